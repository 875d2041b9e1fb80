//! Simulated time: the cluster of the manifests evolves under timeline steps, provisioning, expiration and
//! disruption (docs/simulate.md, "Simulated time").
//!
//! The state is a [`ClusterSnapshot`] edited in place. At every instant the run visits, in order:
//! 1. the timeline steps due (scale, delete, apply, drift);
//! 2. then, repeatedly until nothing changes: expired NodeClaims are deleted (forceful, no budget); pending pods
//!    are scheduled (placed on nodes, new nodes launched with the offering the fake provider's create picks);
//!    a disruption command whose 15 s validation wait is over is re-validated and executed; otherwise a
//!    disruption pass ([`karpenter_disruption::evaluate`]) runs: Drift and StaticDrift commands execute at once,
//!    Emptiness and consolidation commands wait 15 s for validation (the controller does nothing else meanwhile).
//!
//! Then time jumps to the next instant something can change: the next step, the end of a validation wait,
//! `consolidateAfter` elapsing on a node, a NodeClaim expiring, a pod's do-not-disrupt duration ending, or a
//! scheduled budget's window opening or closing, a launched node's startup ending. Nodes launch and initialize
//! instantly unless `--node-startup` ([`World::node_startup`]) delays initialization; then a disruption command
//! with replacements stays in flight until they are initialized, its candidates tainted and counted against
//! budgets, as in the controller. A removed node's reschedulable pods become pending and are placed again by the
//! next scheduling pass.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use karpenter_api::loader::{self, Loaded, Object};
use karpenter_api::nodepool::NODES_LIMIT;
use karpenter_api::time::{chrono_duration, from_k8s, parse_rfc3339, rfc3339};
use karpenter_api::{CompactPod, IntoSharedPod, SpecInterner};
use karpenter_api::{NodePool, ProviderLabels, ValidationContext, labels};
use karpenter_disruption::pods::reschedule_deleting_nodes;
use karpenter_disruption::validation::{NextStep, VALIDATION_DELAY, next_step};
use karpenter_disruption::{Command, DisruptionOptions, Method, Pass, Reason, evaluate, expiration, validation};
use karpenter_operator::disruption::DisruptionSettings;
use karpenter_requirements::InstanceType;
use karpenter_scheduler::decision::{NodeClaimPlan, PodKey};
use karpenter_scheduler::provisioning::{
    ClusterNodes, PoolExclusion, StaticClaims, StaticScaleUp, dynamic_pool_exclusion, static_plan, static_scale_up,
};
use karpenter_scheduler::snapshot::{api_taint, is_daemon_set_pod, pod_key};
use karpenter_scheduler::{
    ClusterSnapshot, Decisions, NodeClaimInfo, NodeInfo, PoolInput, SchedulerOptions, build_node_claim, schedule,
};

use super::catalogue::{Catalogue, cheapest_launch};
use super::pods::Owners;
use super::timeline::{Action, DeletedKind, Step, WorkloadKind, format_offset};
use super::timeline_report::{ClusterState, Event, EventKind, LaunchedNode};

/// Commands and scheduling rounds at one instant before the run gives up on settling (a safety net).
const MAX_ROUNDS_PER_INSTANT: usize = 1_000;

/// A run's problem caused by the timeline (names the step); the run stops.
#[derive(Debug)]
pub struct StepError(pub String);

/// A workload's pod template, for scaling up.
#[derive(Debug, Clone)]
struct Workload {
    api_version: &'static str,
    uid: String,
    template: PodTemplateSpec,
}

type WorkloadKey = (WorkloadKind, String, String);

/// A graceful command waiting for its validation.
#[derive(Debug)]
struct Waiting {
    decided: DateTime<Utc>,
    due: DateTime<Utc>,
    commands: Vec<Command>,
}

/// A node launched and not yet initialized (`--node-startup`): until then its NodeClaim is in flight (offered
/// to pods, not bound to), and the Node joins the snapshot at `ready_at`.
#[derive(Debug)]
struct Starting {
    ready_at: DateTime<Utc>,
    launched_at: DateTime<Utc>,
    /// The Node it registers as.
    node: NodeInfo,
    /// The pods its plan was made for (nominated): those still pending are bound to it when it initializes.
    nominated: Vec<PodKey>,
}

/// A disruption command whose replacements are launching: its candidates are tainted
/// `karpenter.sh/disrupted:NoSchedule` and marked for deletion (budgets count them as disrupting, no pass takes
/// them again, their pods stay), until every replacement is initialized (then the candidates go) or one is gone
/// or late (then the command is rolled back), as the controller's disruption queue does.
#[derive(Debug)]
struct InFlight {
    command: Command,
    decided: DateTime<Utc>,
    started: DateTime<Utc>,
    /// The replacements' NodeClaim (and node) names, in the order of `command.replacements`.
    replacements: Vec<String>,
}

/// The simulated cluster.
pub struct World<'c> {
    pub snapshot: ClusterSnapshot,
    pools: Vec<NodePool>,
    /// The run's catalogues, rebuilt (owned) when an `apply` adds a NodePool or changes its node class.
    catalogue: Cow<'c, Catalogue>,
    provider: ProviderLabels,
    pub(super) options: DisruptionOptions,
    /// Provisioning's scheduler options (`PREFERENCE_POLICY`, `MIN_VALUES_POLICY` and the settings shared with
    /// disruption), as the controller's provisioner builds them.
    pub(super) provisioning: SchedulerOptions,
    objects: Vec<Loaded>,
    workloads: BTreeMap<WorkloadKey, Workload>,
    pub start: DateTime<Utc>,
    pub now: DateTime<Utc>,
    next_node: BTreeMap<String, u64>,
    waiting: Option<Waiting>,
    /// Instants after `now` at which something may change (from the last pass).
    hints: BTreeSet<DateTime<Utc>>,
    /// Also visit every multiple of this (from the epoch); tests use it to check that visiting only the hinted
    /// instants misses nothing.
    tick: Option<chrono::Duration>,
    pub events: Vec<Event>,
    /// Disruption passes run so far (each instant visited runs at least one).
    pub passes: usize,
    /// Notes about the run (a command still waiting at the end, rounds cut short).
    pub notes: Vec<String>,
    /// The `StaticCapacity` feature gate: static NodePools get their replicas.
    pub static_capacity: bool,
    /// The input's nodes being deleted (a deletion timestamp on the Node or its NodeClaim): their termination
    /// finishes once they are drained ([`Self::terminate_drained`]). A node that only carries the
    /// `karpenter.sh/disrupted` taint is in a disruption command the input does not show, which nothing here
    /// finishes.
    deleted_nodes: BTreeSet<String>,
    /// In-flight NodeClaims a `delete` step removed at once (no node to drain), for its event.
    removed_by_step: Vec<String>,
    /// `--node-startup`: how long a launched node takes to initialize; zero initializes it as it launches.
    pub node_startup: chrono::Duration,
    /// Nodes launched and not yet initialized.
    starting: Vec<Starting>,
    /// Disruption commands waiting for their replacements to initialize.
    in_flight: Vec<InFlight>,
}

/// The latest timestamp of the input's NodeClaims (creation, condition transitions, last pod event), so a run
/// over a captured cluster starts after everything in it.
pub fn latest_timestamp(snapshot: &ClusterSnapshot) -> Option<DateTime<Utc>> {
    let mut latest: Option<DateTime<Utc>> = None;
    for c in &snapshot.node_claims {
        let created = c.claim.metadata.creation_timestamp.as_ref().and_then(from_k8s);
        let status = c.claim.status.as_ref();
        let times = created
            .into_iter()
            .chain(status.and_then(|s| s.last_pod_event_time.as_deref()).and_then(parse_rfc3339))
            .chain(c.claim.conditions().iter().filter_map(|c| parse_rfc3339(&c.last_transition_time)));
        for t in times {
            latest = Some(latest.map_or(t, |l| l.max(t)));
        }
    }
    latest
}

impl<'c> World<'c> {
    /// A world at `start` over the input.
    pub fn new(
        snapshot: ClusterSnapshot,
        pools: Vec<NodePool>,
        catalogue: &'c Catalogue,
        provider: ProviderLabels,
        objects: Vec<Loaded>,
        start: DateTime<Utc>,
    ) -> Self {
        // A pool without status is taken as ready, as for a plain run (mod.rs does it for the input's pools).
        let mut pools = pools;
        pools.iter_mut().for_each(super::assume_ready);
        let mut world = World {
            snapshot,
            pools,
            catalogue: Cow::Borrowed(catalogue),
            provider,
            options: DisruptionOptions::default(),
            provisioning: SchedulerOptions::default(),
            objects: Vec::new(),
            workloads: BTreeMap::new(),
            start,
            now: start,
            next_node: BTreeMap::new(),
            waiting: None,
            hints: BTreeSet::new(),
            tick: None,
            events: Vec::new(),
            passes: 0,
            notes: Vec::new(),
            static_capacity: false,
            deleted_nodes: BTreeSet::new(),
            removed_by_step: Vec::new(),
            node_startup: chrono::Duration::zero(),
            starting: Vec::new(),
            in_flight: Vec::new(),
        };
        world.deleted_nodes = objects
            .iter()
            .filter_map(|l| match &l.object {
                Object::Node(n) if n.metadata.deletion_timestamp.is_some() => n.metadata.name.clone(),
                _ => None,
            })
            .chain(
                world
                    .snapshot
                    .node_claims
                    .iter()
                    .filter(|c| c.claim.metadata.deletion_timestamp.is_some())
                    .filter_map(|c| c.node_name.clone()),
            )
            .collect();
        world.learn_workloads(&objects);
        world.objects = objects;
        world
    }

    fn learn_workloads(&mut self, objects: &[Loaded]) {
        for loaded in objects {
            let (key, w) = match &loaded.object {
                Object::Deployment(d) => workload(WorkloadKind::Deployment, d.as_ref()),
                Object::StatefulSet(s) => workload(WorkloadKind::StatefulSet, s.as_ref()),
                Object::ReplicaSet(r) => workload(WorkloadKind::ReplicaSet, r.as_ref()),
                _ => continue,
            };
            self.workloads.insert(key, w);
        }
    }

    /// The NodePools in use (the input's ready ones and those applied since).
    pub fn pools(&self) -> &[NodePool] {
        &self.pools
    }

    /// The catalogues the NodePools in use are evaluated against.
    pub fn catalogue(&self) -> &Catalogue {
        &self.catalogue
    }

    /// Every object loaded (input and applied files).
    pub fn objects(&self) -> &[Loaded] {
        &self.objects
    }

    fn offset(&self) -> Duration {
        (self.now - self.start).to_std().unwrap_or_default()
    }

    /// The NodePools disruption reads: those not being deleted (as the controller's disruption).
    fn pool_inputs(&self) -> Vec<PoolInput<'_>> {
        self.pool_inputs_where(|p| p.metadata.deletion_timestamp.is_none())
    }

    /// The NodePools the provisioner launches from: dynamic, Ready and not being deleted (the controller's rule,
    /// [`dynamic_pool_exclusion`]).
    fn provisioning_pool_inputs(&self) -> Vec<PoolInput<'_>> {
        self.pool_inputs_where(|p| dynamic_pool_exclusion(p).is_none())
    }

    fn pool_inputs_where(&self, keep: impl Fn(&NodePool) -> bool) -> Vec<PoolInput<'_>> {
        self.pools
            .iter()
            .filter(|p| keep(p))
            .map(|p| PoolInput {
                node_pool: p,
                instance_types: self.catalogue.for_pool(p.metadata.name.as_deref().unwrap_or("")),
            })
            .collect()
    }

    /// Nodes, their price sum and pod counts.
    pub fn state(&self) -> ClusterState {
        ClusterState {
            nodes: self.snapshot.nodes.len(),
            price_per_hour: round(self.snapshot.nodes.iter().filter_map(|n| self.node_price(n)).sum()),
            unpriced_nodes: self.snapshot.nodes.iter().filter(|n| self.node_price(n).is_none()).count(),
            price_estimated: self.snapshot.nodes.iter().any(|n| self.node_price_estimated(n)),
            pods: self.snapshot.bound_pods.len(),
            pending_pods: self.pending_real_pods(),
        }
    }

    /// Pending pods that are not CapacityBuffer virtual pods (those stay pending by design).
    fn pending_real_pods(&self) -> usize {
        self.snapshot.pending_pods.iter().filter(|p| !super::buffers::is_virtual(p)).count()
    }

    /// The catalogue price of a node's offering (labels), if known.
    pub fn node_price(&self, node: &NodeInfo) -> Option<f64> {
        let l = |k: &str| node.labels.get(k).cloned();
        super::report::price_of(&self.catalogue, &l(labels::INSTANCE_TYPE), &l(labels::ZONE), &l(labels::CAPACITY_TYPE))
            .ok()
    }

    /// Whether the catalogue price of a node is an estimate (AWS spot, another region's on-demand price).
    pub fn node_price_estimated(&self, node: &NodeInfo) -> bool {
        let l = |k: &str| node.labels.get(k).map(String::as_str);
        self.node_price(node).is_some()
            && l(labels::INSTANCE_TYPE).is_some_and(|it| self.catalogue.price_estimated(it, l(labels::CAPACITY_TYPE)))
    }

    fn event(&mut self, kind: EventKind, message: String) -> &mut Event {
        let offset = self.offset();
        self.events.push(Event {
            at: rfc3339(self.now),
            offset: format_offset(offset),
            offset_seconds: offset.as_secs(),
            kind,
            message,
            nodes_removed: Vec::new(),
            nodes_launched: Vec::new(),
            pods_placed: 0,
            unschedulable_pods: 0,
            price_per_hour_after: 0.0,
            price_per_hour_after_estimated: false,
            decided_at: None,
            launched_at: None,
            initialized_at: None,
            command: None,
        });
        let i = self.events.len() - 1;
        &mut self.events[i]
    }

    fn close_event(&mut self) {
        let state = self.state();
        if let Some(e) = self.events.last_mut() {
            e.price_per_hour_after = state.price_per_hour;
            e.price_per_hour_after_estimated = state.price_estimated;
        }
    }

    // ---- Pods and nodes ----

    /// Binds pending pods (by key) to `node`; returns how many were bound. Updates the node's last pod event.
    fn bind(&mut self, keys: &[PodKey], node: &str) -> usize {
        if keys.is_empty() {
            return 0;
        }
        let wanted: BTreeSet<&str> = keys.iter().map(PodKey::as_str).collect();
        let mut moved = Vec::new();
        // CapacityBuffer virtual pods are placed but never bound: they stay pending for the next pass.
        self.snapshot.pending_pods.retain(|p| {
            if wanted.contains(pod_key(p).as_str()) && !super::buffers::is_virtual(p) {
                moved.push(CompactPod::clone(p));
                false
            } else {
                true
            }
        });
        let n = moved.len();
        // Replicas bound to one node share their (new) spec.
        let mut specs = SpecInterner::new();
        for mut p in moved {
            Arc::make_mut(&mut p.spec).node_name = Some(node.to_owned());
            p.status = Some(PodStatus { phase: Some("Running".into()), ..Default::default() });
            self.snapshot.bound_pods.push(Arc::new(specs.intern(p)));
        }
        if n > 0 {
            self.pod_event(node);
        }
        n
    }

    /// Sets the NodeClaim's `lastPodEventTime` of `node` to now.
    fn pod_event(&mut self, node: &str) {
        let now = rfc3339(self.now);
        if let Some(c) = self.snapshot.node_claims.iter_mut().find(|c| c.node_name.as_deref() == Some(node)) {
            Arc::make_mut(&mut c.claim).status.get_or_insert_with(Default::default).last_pod_event_time = Some(now);
        }
    }

    /// Removes a node and its NodeClaim; its reschedulable pods become pending, the others are gone.
    fn remove_node(&mut self, name: &str) {
        let claim = self.snapshot.nodes.iter().find(|n| n.name == name).and_then(|n| n.node_claim.clone());
        self.snapshot.nodes.retain(|n| n.name != name);
        self.snapshot.node_claims.retain(|c| Some(&c.name) != claim.as_ref() && c.node_name.as_deref() != Some(name));
        let mut displaced = Vec::new();
        self.snapshot.bound_pods.retain(|p| {
            if p.node_name() == Some(name) {
                displaced.push(CompactPod::clone(p));
                false
            } else {
                true
            }
        });
        let mut specs = SpecInterner::new();
        for mut p in displaced {
            let reschedulable = karpenter_disruption::pods::is_reschedulable(&p) && !is_daemon_set_pod(&p);
            if !reschedulable {
                continue;
            }
            Arc::make_mut(&mut p.spec).node_name = None;
            p.status = None;
            self.snapshot.pending_pods.push(Arc::new(specs.intern(p)));
        }
    }

    /// Takes the bound pods `keys` off their nodes and makes them pending (a drain's eviction).
    fn evict(&mut self, keys: &BTreeSet<&str>) {
        if keys.is_empty() {
            return;
        }
        let mut evicted = Vec::new();
        self.snapshot.bound_pods.retain(|p| {
            if keys.contains(pod_key(p).as_str()) {
                evicted.push(Arc::clone(p));
                false
            } else {
                true
            }
        });
        for mut p in evicted {
            Arc::make_mut(&mut Arc::make_mut(&mut p).spec).node_name = None;
            self.snapshot.pending_pods.push(p);
        }
    }

    /// The termination of the input's nodes being deleted: a node with a deletion timestamp that holds no
    /// reschedulable pod any more (its pods were placed elsewhere; DaemonSet, static and terminal pods do not
    /// hold it) is removed. One holding a pod that do-not-disrupt or a PodDisruptionBudget keeps on it stays, as
    /// the controller's drain waits for it (its `terminationGracePeriod` is not simulated).
    fn terminate_drained(&mut self) -> bool {
        let holding: BTreeSet<&str> = self
            .snapshot
            .bound_pods
            .iter()
            .filter(|p| karpenter_disruption::pods::is_reschedulable(p))
            .filter_map(|p| p.node_name())
            .collect();
        let drained: Vec<String> = self
            .snapshot
            .nodes
            .iter()
            .filter(|n| self.deleted_nodes.contains(&n.name) && !holding.contains(n.name.as_str()))
            .map(|n| n.name.clone())
            .collect();
        if drained.is_empty() {
            return false;
        }
        for name in &drained {
            self.remove_node(name);
            self.deleted_nodes.remove(name);
        }
        self.snapshot.sort();
        let e = self.event(
            EventKind::Termination,
            format!(
                "{} being deleted drained and removed: {}",
                plural(drained.len(), "node", "nodes"),
                drained.join(", ")
            ),
        );
        e.nodes_removed = drained;
        self.close_event();
        true
    }

    fn node_name_for(&mut self, pool: &str) -> String {
        let existing: BTreeSet<&str> = self
            .snapshot
            .nodes
            .iter()
            .map(|n| n.name.as_str())
            .chain(self.snapshot.node_claims.iter().map(|c| c.name.as_str()))
            .collect();
        let next = self.next_node.entry(pool.to_owned()).or_insert(1);
        loop {
            let name = format!("{pool}-{next}");
            *next += 1;
            if !existing.contains(name.as_str()) {
                return name;
            }
        }
    }

    /// Draws the catalogue's capacity reservations down by the instances the cluster runs in them (a borrowed
    /// catalogue is copied only when it has reserved offerings).
    fn count_running_reservations(&mut self) {
        if self.catalogue.has_reservations() {
            self.catalogue.to_mut().count_running_reservations(&self.snapshot);
        }
    }

    /// Launches a node for `plan` (the offering the fake provider's create picks, with that offering's capacity
    /// and allocatable) and binds the plan's pods that are pending. `Ok(None)` when no offering is available.
    ///
    /// The NodeClaim is the controller's ([`build_node_claim`]), then filled in as a launch does: named, its
    /// labels the cloud-resolved ones (the instance type's and the chosen offering's), then the single-value
    /// requirement labels, then the claim's own (user-defined labels win), its status launched, registered and
    /// initialized (with a node startup delay: launched only, in flight until [`Self::initialize_started`]). The
    /// node carries the same labels plus its hostname and the registration labels.
    ///
    /// Long because a simulated launch does what the controller, the provider and the kubelet do in turn (claim,
    /// labels, status, node, startup delay) to one NodeClaim and Node.
    fn launch(&mut self, plan: &NodeClaimPlan) -> anyhow::Result<Option<LaunchedNode>> {
        let Some(pool) = self.pools.iter().find(|p| p.metadata.name.as_deref() == Some(plan.node_pool.as_str())) else {
            return Ok(None);
        };
        let pool = pool.clone();
        let mut claim = build_node_claim(&pool, plan, &self.provider)
            .with_context(|| format!("building a NodeClaim for {} from NodePool {}", plan.name, plan.node_pool))?;
        // The pool's own catalogue: two EC2NodeClasses give the same instance type different capacities.
        let types = self.catalogue.for_pool(&plan.node_pool);
        let find = |n: &str| types.iter().find(|it| it.name == n);
        let options: Vec<&InstanceType> = if plan.instance_types.is_empty() {
            types.iter().collect()
        } else {
            plan.instance_type_names().filter_map(find).collect()
        };
        let Some(choice) = cheapest_launch(options.iter().copied(), &plan.requirements, &plan.total_requests()) else {
            return Ok(None);
        };
        let Some(it) = find(&choice.instance_type).cloned() else { return Ok(None) };
        let name = self.node_name_for(&plan.node_pool);
        let now = rfc3339(self.now);

        // Cloud-resolved: what the provider's create reports for the instance type and offering it picked.
        // The zone id (AWS) is the chosen offering's, as the provider takes it from the launch's subnet.
        let offering_labels = [labels::ZONE, labels::CAPACITY_TYPE, karpenter_aws::labels::ZONE_ID];
        let mut claim_labels: BTreeMap<String, String> = it.requirements.labels(|k| offering_labels.contains(&k));
        claim_labels.insert(labels::INSTANCE_TYPE.to_owned(), it.name.clone());
        if let Some(z) = &choice.zone {
            claim_labels.insert(labels::ZONE.to_owned(), z.clone());
        }
        let zone_id = it
            .offerings
            .iter()
            .find(|o| o.zone() == choice.zone.as_deref() && o.capacity_type() == choice.capacity_type.as_deref())
            .and_then(|o| o.requirements.get_ref(karpenter_aws::labels::ZONE_ID))
            .map(|r| r.any())
            .filter(|id| !id.is_empty());
        if let Some(id) = zone_id {
            claim_labels.insert(karpenter_aws::labels::ZONE_ID.to_owned(), id);
        }
        // A reserved launch runs in a reservation: the cheapest of the zone's reservations with instances left
        // that the claim allows, its id the node's `karpenter.sh/reservation-id`, as a provider labels it.
        if choice.capacity_type.as_deref() == Some(labels::CAPACITY_TYPE_RESERVED) {
            let reservation = it
                .offerings
                .iter()
                .filter(|o| o.zone() == choice.zone.as_deref() && o.capacity_type() == choice.capacity_type.as_deref())
                .filter(|o| o.available && o.reservation_capacity > 0)
                .filter(|o| {
                    o.reservation_id().is_some_and(|id| {
                        plan.requirements
                            .get_ref(karpenter_requirements::labels::RESERVATION_ID)
                            .is_none_or(|r| r.has(id))
                    })
                })
                .min_by(|a, b| a.price.total_cmp(&b.price))
                .and_then(|o| o.reservation_id());
            if let Some(id) = reservation {
                claim_labels.insert(karpenter_requirements::labels::RESERVATION_ID.to_owned(), id.to_owned());
            }
        }
        if let Some(ct) = &choice.capacity_type {
            claim_labels.insert(labels::CAPACITY_TYPE.to_owned(), ct.clone());
        }
        // Then the single-value requirements, then the claim's own labels: the rule every provider's launch follows.
        let mut node_labels = karpenter_cloudprovider::launch::launched_claim_labels(claim_labels, &claim);
        node_labels.insert(labels::HOSTNAME.to_owned(), name.clone());
        node_labels.insert(labels::NODE_REGISTERED.to_owned(), "true".to_owned());
        node_labels.insert(labels::NODE_INITIALIZED.to_owned(), "true".to_owned());

        // With a startup delay the claim is launched only: it registers and initializes at `ready_at`.
        let starting = self.node_startup > chrono::Duration::zero();
        claim.metadata.name = Some(name.clone());
        claim.metadata.creation_timestamp = serde_json::from_value(serde_json::Value::String(now.clone())).ok();
        let mut launched_labels = node_labels.clone();
        if starting {
            launched_labels.remove(labels::NODE_REGISTERED);
            launched_labels.remove(labels::NODE_INITIALIZED);
        }
        claim.metadata.labels = Some(launched_labels);
        let condition = |t: &str| karpenter_api::Condition {
            type_: t.to_owned(),
            status: karpenter_api::ConditionStatus::True,
            observed_generation: None,
            last_transition_time: now.clone(),
            reason: t.to_owned(),
            message: String::new(),
        };
        let conditions = if starting {
            vec![condition("Launched")]
        } else {
            vec![condition("Launched"), condition("Registered"), condition("Initialized")]
        };
        claim.status = Some(karpenter_api::nodeclaim::NodeClaimStatus {
            node_name: (!starting).then(|| name.clone()),
            last_pod_event_time: Some(now.clone()),
            conditions,
            ..Default::default()
        });
        let taints = pool.spec.template.spec.taints.iter().map(api_taint).collect();
        self.snapshot.node_claims.push(NodeClaimInfo {
            name: name.clone(),
            node_pool: Some(plan.node_pool.clone()),
            node_name: (!starting).then(|| name.clone()),
            in_flight: starting,
            claim: claim.into(),
            capacity: choice.capacity.clone(),
            allocatable: choice.allocatable.clone(),
            marked_for_deletion: false,
            nominated: false,
        });
        let node = NodeInfo {
            name: name.clone(),
            labels: node_labels,
            annotations: BTreeMap::new(),
            taints,
            startup_taints: Vec::new(),
            allocatable: choice.allocatable,
            capacity: choice.capacity,
            node_pool: Some(plan.node_pool.clone()),
            node_claim: Some(name.clone()),
            initialized: true,
            ..Default::default()
        };
        let pods = if starting {
            let ready_at = self.now + self.node_startup;
            self.hints.insert(ready_at);
            self.starting.push(Starting { ready_at, launched_at: self.now, node, nominated: plan.pods.clone() });
            0
        } else {
            self.snapshot.nodes.push(node);
            self.bind(&plan.pods, &name)
        };
        // The instance is running now: a reserved one holds its reservation's instance for the next launch.
        self.count_running_reservations();
        let price_estimated = self.catalogue.price_estimated(&choice.instance_type, choice.capacity_type.as_deref());
        Ok(Some(LaunchedNode {
            name,
            node_pool: plan.node_pool.clone(),
            instance_type: choice.instance_type,
            zone: choice.zone,
            capacity_type: choice.capacity_type,
            price: choice.price,
            price_estimated,
            pods,
        }))
    }

    /// Applies scheduling decisions: binds placements on existing nodes, launches new nodes. Returns (pods
    /// placed, nodes launched, pods left unschedulable).
    fn place(&mut self, decisions: &Decisions) -> anyhow::Result<(usize, Vec<LaunchedNode>, usize)> {
        let mut placed = 0;
        for n in &decisions.existing_nodes {
            if !n.in_flight {
                placed += self.bind(&n.pods, &n.name);
            }
        }
        let mut launched = Vec::new();
        for plan in &decisions.new_node_claims {
            if let Some(l) = self.launch(plan)? {
                placed += l.pods;
                launched.push(l);
            }
        }
        self.snapshot.sort();
        Ok((placed, launched, self.pending_real_pods()))
    }

    /// Schedules the pending pods; `None` when there were none or nothing changed.
    ///
    /// As the controller's provisioner, the currently reschedulable pods of nodes being deleted are scheduled with
    /// the pending ones ([`reschedule_deleting_nodes`]); those placed leave their node for the new one (evicted
    /// by its drain, bound again), the others stay.
    fn schedule_pending(&mut self) -> anyhow::Result<Option<(usize, Vec<LaunchedNode>, usize)>> {
        let rescheduling = reschedule_deleting_nodes(&self.snapshot, self.now).filter(|r| !r.pods.is_empty());
        if self.snapshot.pending_pods.is_empty() && rescheduling.is_none() {
            return Ok(None);
        }
        let decisions = {
            let pools = self.provisioning_pool_inputs();
            let input = rescheduling.as_ref().map_or(&self.snapshot, |r| &r.snapshot);
            // Provisioning's options (not disruption's): the preference and minValues policies apply here only.
            schedule(input, &pools, &self.provider, &self.provisioning)
        };
        if let Some(r) = &rescheduling {
            let placed: BTreeSet<&str> = decisions
                .existing_nodes
                .iter()
                .flat_map(|n| &n.pods)
                .chain(decisions.new_node_claims.iter().flat_map(|c| &c.pods))
                .map(PodKey::as_str)
                .collect();
            // The candidates of commands in flight keep their pods until the command finishes: provisioning sees
            // them (and finds them room on the replacements, as the controller's does), no drain has begun.
            let held = self.in_flight_candidates();
            let kept: BTreeSet<String> = self
                .snapshot
                .bound_pods
                .iter()
                .filter(|p| p.node_name().is_some_and(|n| held.contains(n)))
                .map(|p| pod_key(p))
                .collect();
            let moving: BTreeSet<&str> =
                r.pods.iter().map(String::as_str).filter(|k| placed.contains(k) && !kept.contains(*k)).collect();
            self.evict(&moving);
        }
        let (placed, launched, left) = self.place(&decisions)?;
        Ok((placed > 0 || !launched.is_empty()).then_some((placed, launched, left)))
    }

    /// The provisioner: schedules pending pods and records an event when something happened.
    pub fn provision(&mut self) -> anyhow::Result<bool> {
        let Some((placed, launched, left)) = self.schedule_pending()? else { return Ok(false) };
        let mut message = format!("{placed} pending pods placed");
        if !launched.is_empty() {
            let names: Vec<String> = launched.iter().map(describe_launch).collect();
            message.push_str(&format!(", {} new: {}", plural(launched.len(), "node", "nodes"), names.join(", ")));
        }
        if left > 0 {
            message.push_str(&format!("; {left} still pending"));
        }
        let e = self.event(EventKind::Provisioning, message);
        e.pods_placed = placed;
        e.unschedulable_pods = left;
        e.nodes_launched = launched;
        self.close_event();
        Ok(true)
    }

    /// Launches the nodes that bring pools below their `karpenter-rs.io/min-nodes` floor back to it (the
    /// controller's `nodepool.minnodes`); records a provisioning event when it launched any.
    pub fn floor(&mut self) -> anyhow::Result<bool> {
        let mut notes = Vec::new();
        let plans = {
            let pools = self.provisioning_pool_inputs();
            // Provisioning's options, as for pending pods (the controller's floor takes them too).
            super::floor::plans(&self.snapshot, &pools, &self.provider, self.now, &[], &self.provisioning, &mut notes)
        };
        for n in notes {
            if !self.notes.contains(&n) {
                self.notes.push(n);
            }
        }
        let mut launched = Vec::new();
        for plan in &plans {
            if let Some(l) = self.launch(plan)? {
                launched.push(l);
            }
        }
        if launched.is_empty() {
            return Ok(false);
        }
        self.snapshot.sort();
        let names: Vec<String> = launched.iter().map(describe_launch).collect();
        let message = format!(
            "{} launched for {} floors: {}",
            plural(launched.len(), "node", "nodes"),
            karpenter_api::labels::min_nodes::ANNOTATION,
            names.join(", ")
        );
        let e = self.event(EventKind::Provisioning, message);
        e.nodes_launched = launched;
        self.close_event();
        Ok(true)
    }

    /// The controller's static provisioning (gate `StaticCapacity`): each static NodePool short of its
    /// `replicas` gets the missing nodes, within `limits.nodes` and the cluster's `nodes` limit
    /// ([`static_scale_up`], the controller's decision); records a provisioning event when it launched any.
    pub fn static_provision(&mut self) -> anyhow::Result<bool> {
        if !self.static_capacity {
            return Ok(false);
        }
        let cluster_limit =
            self.options.scheduler.cluster_limits.get(NODES_LIMIT).map(|q| q.value().unwrap_or(i64::MAX));
        let mut launched = Vec::new();
        let static_pools: Vec<NodePool> = self.pools.iter().filter(|p| p.is_static()).cloned().collect();
        for pool in &static_pools {
            let name = pool.metadata.name.clone().unwrap_or_default();
            let of_pool = self.snapshot.node_claims.iter().filter(|c| c.node_pool.as_deref() == Some(name.as_str()));
            let claims = StaticClaims {
                live: of_pool.clone().filter(|c| !c.marked_for_deletion).count(),
                total: of_pool.count(),
            };
            let cluster = cluster_limit.map(|limit| ClusterNodes { limit, claims: self.snapshot.node_claims.len() });
            let wanted = match static_scale_up(pool, claims, cluster) {
                Ok(StaticScaleUp::Create(n)) => n,
                Ok(_) => continue,
                Err(e) => {
                    self.note_once(format!("static NodePool {name}: {e}"));
                    continue;
                }
            };
            let plan = match static_plan(pool) {
                Ok(p) => p,
                Err(e) => {
                    self.note_once(format!("static NodePool {name}: {e}"));
                    continue;
                }
            };
            for _ in 0..wanted {
                match self.launch(&plan)? {
                    Some(l) => launched.push(l),
                    None => {
                        self.note_once(format!(
                            "static NodePool {name}: no offering of its instance types fits its requirements"
                        ));
                        break;
                    }
                }
            }
        }
        if launched.is_empty() {
            return Ok(false);
        }
        self.snapshot.sort();
        let names: Vec<String> = launched.iter().map(describe_launch).collect();
        let message = format!(
            "{} launched for static NodePools (spec.replicas): {}",
            plural(launched.len(), "node", "nodes"),
            names.join(", ")
        );
        let e = self.event(EventKind::Provisioning, message);
        e.nodes_launched = launched;
        self.close_event();
        Ok(true)
    }

    fn note_once(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    fn expire(&mut self) -> bool {
        // As the controller: an expired node of a pool short of its karpenter-rs.io/min-nodes floor waits for
        // its replacement (the floor launches it first; only limits can keep it from doing so).
        let floors = karpenter_disruption::floor::Floors::new(&self.snapshot, &self.pools, self.now);
        let pool_of = |claim: &str| self.snapshot.node_claims.iter().find(|c| c.name == claim)?.node_pool.clone();
        let mut expired = expiration::expired(&self.snapshot, self.now);
        expired.retain(|e| {
            pool_of(&e.node_claim).and_then(|p| floors.get(&p).copied()).is_none_or(|f| f.counted >= f.min_nodes)
        });
        if expired.is_empty() {
            return false;
        }
        let mut removed = Vec::new();
        for e in &expired {
            let node = e.node.clone().unwrap_or_else(|| e.node_claim.clone());
            self.remove_node(&node);
            self.snapshot.node_claims.retain(|c| c.name != e.node_claim);
            removed.push(node);
        }
        self.snapshot.sort();
        let names: Vec<String> =
            expired.iter().map(|e| format!("{} (expired {})", e.node_claim, e.expires_at)).collect();
        let ev = self.event(EventKind::Expiration, format!("expireAfter reached: deleted {}", names.join(", ")));
        ev.nodes_removed = removed;
        self.close_event();
        true
    }

    /// Executes commands: removes candidates, launches replacements with their pods, places the rest. With a
    /// node startup delay, a command with replacements starts instead ([`Self::start_command`]) and finishes when
    /// they are initialized.
    fn execute(&mut self, commands: &[Command], decided: DateTime<Utc>) -> anyhow::Result<()> {
        for cmd in commands {
            if self.node_startup > chrono::Duration::zero() && !cmd.replacements.is_empty() {
                self.start_command(cmd, decided)?;
                continue;
            }
            for c in &cmd.candidates {
                self.remove_node(&c.node);
            }
            let mut launched = Vec::new();
            let mut placed = 0;
            for plan in &cmd.replacements {
                if let Some(l) = self.launch(plan)? {
                    placed += l.pods;
                    launched.push(l);
                }
            }
            self.command_done(cmd, decided, placed, launched)?;
            self.close_event();
        }
        Ok(())
    }

    /// The end of a command whose candidates are gone and whose replacements hold the pods placed so far: the
    /// pods still pending are scheduled, and the `Disruption` event is opened with what the command did (the
    /// caller adds what only it knows, then closes it).
    fn command_done(
        &mut self,
        cmd: &Command,
        decided: DateTime<Utc>,
        mut placed: usize,
        mut launched: Vec<LaunchedNode>,
    ) -> anyhow::Result<&mut Event> {
        self.snapshot.sort();
        let mut left = self.pending_real_pods();
        if let Some((p, more, l)) = self.schedule_pending()? {
            placed += p;
            launched.extend(more);
            left = l;
        }
        let mut message = format!("{:?}: {}", cmd.method, cmd.explanation);
        if left > 0 {
            message.push_str(&format!("; {left} pods still pending"));
        }
        let decided_at = (decided != self.now).then(|| rfc3339(decided));
        let e = self.event(EventKind::Disruption, message);
        e.nodes_removed = cmd.candidates.iter().map(|c| c.node.clone()).collect();
        e.nodes_launched = launched;
        e.pods_placed = placed;
        e.unschedulable_pods = left;
        e.decided_at = decided_at;
        e.command = Some(Box::new(cmd.clone()));
        Ok(e)
    }

    /// Starts a command whose replacements take `--node-startup` to initialize, as the controller's disruption
    /// does: the candidates are tainted `karpenter.sh/disrupted:NoSchedule` and marked for deletion, the
    /// replacements launched; [`Self::advance_in_flight`] finishes or rolls it back. A replacement with no
    /// offering to launch rolls it back at once (the controller's failed create).
    fn start_command(&mut self, cmd: &Command, decided: DateTime<Utc>) -> anyhow::Result<()> {
        let candidates: Vec<String> = cmd.candidates.iter().map(|c| c.node.clone()).collect();
        self.mark_disrupted(&candidates, true);
        let mut launched = Vec::new();
        let mut failure = None;
        for plan in &cmd.replacements {
            match self.launch(plan)? {
                Some(l) => launched.push(l),
                None => {
                    failure =
                        Some(format!("no offering of NodePool {} fits replacement {}", plan.node_pool, plan.name));
                    break;
                }
            }
        }
        self.snapshot.sort();
        let flight = InFlight {
            command: cmd.clone(),
            decided,
            started: self.now,
            replacements: launched.iter().map(|l| l.name.clone()).collect(),
        };
        if let Some(why) = failure {
            self.roll_back(flight, &why);
            return Ok(());
        }
        let ready = self.now + self.node_startup;
        let message = format!(
            "{:?} command started: {} tainted karpenter.sh/disrupted:NoSchedule; {} launched, initialized at {}: {}",
            cmd.method,
            candidates.join(", "),
            plural(launched.len(), "replacement", "replacements"),
            format_offset((ready - self.start).to_std().unwrap_or_default()),
            launched.iter().map(describe_launch).collect::<Vec<_>>().join(", ")
        );
        let decided_at = (decided != self.now).then(|| rfc3339(decided));
        let e = self.event(EventKind::DisruptionStarted, message);
        e.nodes_launched = launched;
        e.decided_at = decided_at;
        e.command = Some(Box::new(cmd.clone()));
        self.close_event();
        self.in_flight.push(flight);
        Ok(())
    }

    /// Taints (or untaints) the candidates of a command in flight `karpenter.sh/disrupted:NoSchedule` and marks
    /// (or unmarks) them and their NodeClaims for deletion, as the controller's cluster state does. A node a
    /// step deleted meanwhile keeps its marks: its termination owns them.
    fn mark_disrupted(&mut self, nodes: &[String], on: bool) {
        for name in nodes.iter().filter(|n| !self.deleted_nodes.contains(*n)) {
            let Some(n) = self.snapshot.nodes.iter_mut().find(|n| &n.name == name) else { continue };
            n.marked_for_deletion = on;
            n.taints.retain(|t| t.key != labels::taints::DISRUPTED);
            if on {
                n.taints.push(k8s_openapi::api::core::v1::Taint {
                    key: labels::taints::DISRUPTED.to_owned(),
                    effect: "NoSchedule".to_owned(),
                    ..Default::default()
                });
            }
            let claim = n.node_claim.clone();
            for c in self
                .snapshot
                .node_claims
                .iter_mut()
                .filter(|c| c.node_name.as_deref() == Some(name.as_str()) || Some(&c.name) == claim.as_ref())
            {
                c.marked_for_deletion = on;
            }
        }
    }

    /// The nodes of commands in flight (tainted, waiting for their replacements).
    fn in_flight_candidates(&self) -> BTreeSet<&str> {
        self.in_flight.iter().flat_map(|f| f.command.candidates.iter().map(|c| c.node.as_str())).collect()
    }

    /// Nodes whose startup is over register and initialize: the Node joins the snapshot, its NodeClaim gets
    /// `Registered` and `Initialized`, and the pods nominated to it that are still pending are bound to it.
    fn initialize_started(&mut self) -> bool {
        let now = self.now;
        let (ready, starting): (Vec<Starting>, Vec<Starting>) =
            std::mem::take(&mut self.starting).into_iter().partition(|s| s.ready_at <= now);
        self.starting = starting;
        let mut names = Vec::new();
        let mut placed = 0;
        for s in ready {
            let name = s.node.name.clone();
            // Gone while it launched (a delete step, expiry, a rolled-back command): nothing registers.
            let Some(c) = self.snapshot.node_claims.iter_mut().find(|c| c.name == name && c.in_flight) else {
                continue;
            };
            let at = rfc3339(s.ready_at);
            c.in_flight = false;
            c.node_name = Some(name.clone());
            let claim = Arc::make_mut(&mut c.claim);
            let claim_labels = claim.metadata.labels.get_or_insert_with(Default::default);
            claim_labels.insert(labels::NODE_REGISTERED.to_owned(), "true".to_owned());
            claim_labels.insert(labels::NODE_INITIALIZED.to_owned(), "true".to_owned());
            let status = claim.status.get_or_insert_with(Default::default);
            status.node_name = Some(name.clone());
            status.conditions.push(true_condition("Registered", &at));
            status.conditions.push(true_condition("Initialized", &at));
            self.snapshot.nodes.push(s.node);
            placed += self.bind(&s.nominated, &name);
            let launched = format_offset((s.launched_at - self.start).to_std().unwrap_or_default());
            names.push(format!("{name} (launched at {launched})"));
        }
        if names.is_empty() {
            return false;
        }
        self.snapshot.sort();
        let left = self.pending_real_pods();
        let message = format!(
            "{} initialized: {}; {} nominated to them bound",
            plural(names.len(), "node", "nodes"),
            names.join(", "),
            plural(placed, "pending pod", "pending pods")
        );
        let e = self.event(EventKind::Initialized, message);
        e.pods_placed = placed;
        e.unschedulable_pods = left;
        self.close_event();
        true
    }

    /// Commands in flight, as the controller's disruption queue advances them: once every replacement is
    /// initialized the candidates are removed (drained; the pods nominated to a replacement bind to it); one whose
    /// replacement is gone, or that waited longer than the controller's replacement timeout (10 min to 1 h by
    /// the candidates queued, [`DisruptionSettings::replacement_timeout`]), is rolled back.
    fn advance_in_flight(&mut self) -> anyhow::Result<bool> {
        if self.in_flight.is_empty() {
            return Ok(false);
        }
        let queued: usize = self.in_flight.iter().map(|f| f.command.candidates.len()).sum();
        let timeout = chrono_duration(DisruptionSettings::default().replacement_timeout(queued));
        // Per command: `None` while it waits, `Some(Ok)` when its replacements are ready, `Some(Err)` to roll back.
        let outcomes: Vec<Option<Result<(), String>>> = self
            .in_flight
            .iter()
            .map(|f| {
                let mut waiting = false;
                for r in &f.replacements {
                    match self.snapshot.node_claims.iter().find(|c| &c.name == r) {
                        None => return Some(Err(format!("replacement NodeClaim {r} no longer exists"))),
                        Some(c) if c.marked_for_deletion => {
                            return Some(Err(format!("replacement NodeClaim {r} is being deleted")));
                        }
                        Some(c) if c.in_flight => waiting = true,
                        Some(_) => {}
                    }
                }
                if !waiting {
                    Some(Ok(()))
                } else if self.now - f.started > timeout {
                    Some(Err(format!("replacements not initialized after {}s", timeout.num_seconds())))
                } else {
                    None
                }
            })
            .collect();
        let mut changed = false;
        let mut i = 0;
        for outcome in outcomes {
            let Some(result) = outcome else {
                // The controller notices a late replacement at its next poll after the timeout.
                self.hints.insert(self.in_flight[i].started + timeout + chrono::Duration::seconds(1));
                i += 1;
                continue;
            };
            let flight = self.in_flight.remove(i);
            changed = true;
            match result {
                Ok(()) => self.finish_command(flight)?,
                Err(why) => self.roll_back(flight, &why),
            }
        }
        Ok(changed)
    }

    /// A command whose replacements are initialized: its candidates are removed, the pods nominated to each
    /// replacement bind to it, the rest are scheduled.
    fn finish_command(&mut self, flight: InFlight) -> anyhow::Result<()> {
        let cmd = flight.command;
        for c in &cmd.candidates {
            self.remove_node(&c.node);
        }
        let mut placed = 0;
        for (plan, name) in cmd.replacements.iter().zip(&flight.replacements) {
            placed += self.bind(&plan.pods, name);
        }
        let e = self.command_done(&cmd, flight.decided, placed, Vec::new())?;
        e.launched_at = Some(rfc3339(flight.started));
        e.initialized_at = Some(e.at.clone());
        self.close_event();
        Ok(())
    }

    /// Rolls a command back, as the controller does: the candidates are untainted and unmarked, the replacements
    /// deleted (one still launching at once, an initialized one drained and terminated).
    fn roll_back(&mut self, flight: InFlight, why: &str) {
        let candidates: Vec<String> = flight.command.candidates.iter().map(|c| c.node.clone()).collect();
        self.mark_disrupted(&candidates, false);
        let mut removed = Vec::new();
        for r in &flight.replacements {
            if self.snapshot.nodes.iter().any(|n| &n.name == r) {
                self.begin_node_deletion(r);
            } else if self.snapshot.node_claims.iter().any(|c| &c.name == r) {
                self.snapshot.node_claims.retain(|c| &c.name != r);
                self.starting.retain(|s| &s.node.name != r);
                removed.push(r.clone());
            }
        }
        let message = format!(
            "{:?} command rolled back ({why}): {} untainted; replacements deleted",
            flight.command.method,
            candidates.join(", ")
        );
        let decided_at = (flight.decided != self.now).then(|| rfc3339(flight.decided));
        let e = self.event(EventKind::DisruptionFailed, message);
        e.nodes_removed = removed;
        e.decided_at = decided_at;
        e.launched_at = (!flight.replacements.is_empty()).then(|| rfc3339(flight.started));
        e.command = Some(Box::new(flight.command));
        self.close_event();
    }

    /// One disruption pass at now (and the hints it gives).
    pub fn pass(&self) -> Pass {
        self.pass_continuing(None)
    }

    /// [`Self::pass`]; with `continue_after`, the pass that goes on after that method's command failed
    /// validation (`karpenter_disruption::validation::continue_after`).
    fn pass_continuing(&self, continue_after: Option<Method>) -> Pass {
        let pools = self.pool_inputs();
        let options = match continue_after {
            None => Cow::Borrowed(&self.options),
            Some(m) => Cow::Owned(DisruptionOptions { continue_after: Some(m), ..self.options.clone() }),
        };
        evaluate(&self.snapshot, &pools, &self.provider, self.now, &options)
    }

    fn learn_hints(&mut self, pass: &Pass) {
        let now = self.now;
        self.hints.retain(|t| *t > now);
        for v in &pass.verdicts {
            match &v.reason {
                Reason::ConsolidateAfterNotElapsed { remaining_seconds } if *remaining_seconds > 0 => {
                    self.hints.insert(now + chrono::Duration::seconds(*remaining_seconds));
                }
                Reason::PodDoNotDisrupt { until: Some(u), .. } => {
                    if let Ok(t) = DateTime::parse_from_rfc3339(u) {
                        self.hints.insert(t.with_timezone(&Utc));
                    }
                }
                _ => {}
            }
        }
        for e in expiration::expirations(&self.snapshot, now) {
            if let Ok(t) = DateTime::parse_from_rfc3339(&e.expires_at) {
                self.hints.insert(t.with_timezone(&Utc));
            }
        }
        if let Some(tick) = self.tick.map(|t| t.num_seconds().max(1)) {
            let next = (now.timestamp() / tick + 1) * tick;
            self.hints.extend(DateTime::<Utc>::from_timestamp(next, 0));
        }
        // A scheduled budget changes what a pass may do only when its window opens or closes.
        for b in self.pools.iter().flat_map(|p| &p.spec.disruption.budgets) {
            if let Some(t) = b.next_transition(now) {
                self.hints.insert(t);
            }
        }
        self.hints.retain(|t| *t > now);
    }

    /// Runs provisioning, expiration and disruption at `now` until nothing more happens.
    pub fn settle(&mut self) -> anyhow::Result<()> {
        // Set when a command failed validation: the methods after its own take their turn in the next pass.
        let mut continuing: Option<Method> = None;
        for _ in 0..MAX_ROUNDS_PER_INSTANT {
            // What the cluster runs in each capacity reservation now (nodes deleted since give theirs back).
            self.count_running_reservations();
            // The floor first: an expired node of a pool at its floor is replaced before it goes.
            // Launches started earlier come up first, then the commands waiting for them move on.
            let initialized = self.initialize_started();
            let advanced = self.advance_in_flight()?;
            let floored = self.floor()?;
            let static_launched = self.static_provision()?;
            let expired = self.expire();
            let provisioned = self.provision()? || floored || static_launched;
            let terminated = self.terminate_drained();
            if let Some(w) = self.waiting.take_if(|w| w.due <= self.now) {
                let pools = self.pool_inputs();
                let mut valid = Vec::new();
                let mut failures = Vec::new();
                for c in &w.commands {
                    match validation::validate(c, &self.snapshot, &pools, &self.provider, self.now, &self.options) {
                        Ok(v) => valid.push(v),
                        Err(f) => failures.push((c.clone(), f)),
                    }
                }
                drop(pools);
                for (c, f) in failures {
                    continuing = continuing.or(validation::continue_after(&c));
                    let message = format!("{:?} command rejected by validation ({f}): {}", c.method, c.explanation);
                    let e = self.event(EventKind::ValidationFailed, message);
                    e.decided_at = Some(rfc3339(w.decided));
                    e.command = Some(Box::new(c));
                    self.close_event();
                }
                self.execute(&valid, w.decided)?;
                continue;
            }
            if self.waiting.is_some() {
                return Ok(());
            }
            let pass = self.pass_continuing(continuing.take());
            self.passes += 1;
            self.learn_hints(&pass);
            // The controller's step after a pass: drift starts at once, the graceful methods wait and re-check.
            match next_step(pass.commands) {
                NextStep::Idle if expired || provisioned || terminated || initialized || advanced => continue,
                NextStep::Idle => return Ok(()),
                NextStep::StartNow(commands) => self.execute(&commands, self.now)?,
                NextStep::ValidateAfterDelay(command) => {
                    let due = self.now + chrono_duration(VALIDATION_DELAY);
                    self.hints.insert(due);
                    self.waiting = Some(Waiting { decided: self.now, due, commands: vec![command] });
                    return Ok(());
                }
            }
        }
        self.notes.push(format!(
            "at {} the cluster did not settle within {MAX_ROUNDS_PER_INSTANT} rounds; time moved on",
            format_offset(self.offset())
        ));
        Ok(())
    }

    /// The next instant after now something may change, before or at `limit`.
    pub fn next_instant(&self) -> Option<DateTime<Utc>> {
        let mut next = self.hints.iter().copied().find(|t| *t > self.now);
        if let Some(ready) = self.starting.iter().map(|s| s.ready_at).filter(|t| *t > self.now).min() {
            next = Some(next.map_or(ready, |n| n.min(ready)));
        }
        if let Some(w) = &self.waiting
            && w.due > self.now
        {
            next = Some(next.map_or(w.due, |n| n.min(w.due)));
        }
        next
    }

    /// Commands waiting for their replacements to initialize.
    pub fn commands_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Notes when a command is still waiting for validation or for its replacements, or nodes are still starting.
    pub fn finish(&mut self) {
        for f in &self.in_flight {
            let candidates: Vec<&str> = f.command.candidates.iter().map(|c| c.node.as_str()).collect();
            self.notes.push(format!(
                "a {:?} command started at {} was still waiting for its replacements ({}) to initialize at the end; \
                 {} stay tainted karpenter.sh/disrupted:NoSchedule",
                f.command.method,
                format_offset((f.started - self.start).to_std().unwrap_or_default()),
                f.replacements.join(", "),
                candidates.join(", ")
            ));
        }
        let launching: Vec<String> = self
            .starting
            .iter()
            .filter(|s| self.snapshot.node_claims.iter().any(|c| c.name == s.node.name && c.in_flight))
            .map(|s| {
                format!(
                    "{} (initialized at {})",
                    s.node.name,
                    format_offset((s.ready_at - self.start).to_std().unwrap_or_default())
                )
            })
            .collect();
        if !launching.is_empty() {
            self.notes.push(format!(
                "{} still starting at the end (in flight, not in the nodes below): {}",
                plural(launching.len(), "node was", "nodes were"),
                launching.join(", ")
            ));
        }
        if let Some(w) = &self.waiting {
            let commands: Vec<String> =
                w.commands.iter().map(|c| format!("{:?}: {}", c.method, c.explanation)).collect();
            self.notes.push(format!(
                "a command decided at {} was still in its {}s validation wait at the end: {}",
                rfc3339(w.decided),
                VALIDATION_DELAY.as_secs(),
                commands.join("; ")
            ));
        }
    }

    // ---- Steps ----

    /// Applies one timeline step at now.
    pub fn step(&mut self, step: &Step) -> Result<(), StepError> {
        let err = |field: &str, m: String| {
            let field = if step.label.starts_with("steps") { field } else { "" };
            StepError(format!("{}{field}: {m}", step.label))
        };
        let message = step.action.describe();
        match &step.action {
            Action::Advance => return Ok(()),
            Action::Scale { kind, namespace, name, replicas } => {
                let key = (*kind, namespace.clone(), name.clone());
                if !self.workloads.contains_key(&key) {
                    return Err(err(".scale", format!("{} {namespace}/{name} is not in the input", kind.as_str())));
                }
                let message = self.scale(&key, *replicas);
                self.event(EventKind::Step, message);
            }
            Action::DeletePod { namespace, name } => {
                let key = format!("{namespace}/{name}");
                let before = self.snapshot.bound_pods.len() + self.snapshot.pending_pods.len();
                let node = self
                    .snapshot
                    .bound_pods
                    .iter()
                    .find(|p| pod_key(p) == key)
                    .and_then(|p| p.node_name().map(str::to_owned));
                self.snapshot.bound_pods.retain(|p| pod_key(p) != key);
                self.snapshot.pending_pods.retain(|p| pod_key(p) != key);
                if before == self.snapshot.bound_pods.len() + self.snapshot.pending_pods.len() {
                    return Err(err(".delete", format!("pod {key} does not exist at {}", format_offset(step.at))));
                }
                if let Some(node) = node {
                    self.pod_event(&node);
                }
                self.event(EventKind::Step, message);
            }
            Action::DeleteNode { name } => {
                if !self.snapshot.nodes.iter().any(|n| &n.name == name) {
                    return Err(err(".delete", format!("node {name} does not exist at {}", format_offset(step.at))));
                }
                self.begin_node_deletion(name);
                self.event(EventKind::Step, format!("{message}: draining, then terminated"));
            }
            Action::Delete { kind, namespace, name } => {
                let summary = self
                    .delete(*kind, namespace.as_deref(), name)
                    .map_err(|m| err(".delete", format!("{m} at {}", format_offset(step.at))))?;
                let removed = std::mem::take(&mut self.removed_by_step);
                let e = self.event(EventKind::Step, format!("{message}: {summary}"));
                e.nodes_removed = removed;
            }
            Action::DriftNodePool { name } => {
                if !self.pools.iter().any(|p| p.metadata.name.as_deref() == Some(name)) {
                    return Err(err(".drift", format!("NodePool {name} is not in the input")));
                }
                let n = self.drift(|c| c.node_pool.as_deref() == Some(name));
                self.event(
                    EventKind::Step,
                    format!("{message}: {} marked Drifted", plural(n, "NodeClaim", "NodeClaims")),
                );
            }
            Action::DriftNode { name } => {
                let n = self.drift(|c| c.node_name.as_deref() == Some(name));
                if n == 0 {
                    return Err(err(".drift", format!("node {name} has no NodeClaim at {}", format_offset(step.at))));
                }
                self.event(EventKind::Step, message);
            }
            Action::Apply { path } => {
                let summary = self.apply(path).map_err(|m| err(".apply", m))?;
                self.event(EventKind::Step, format!("{message}: {summary}"));
            }
        }
        self.close_event();
        Ok(())
    }

    /// A Node or NodeClaim deleted as the controller's termination handles it: the node (and its NodeClaim) get
    /// a deletion timestamp and the `karpenter.sh/disrupted:NoSchedule` taint, count against disruption budgets
    /// as deleting, their reschedulable pods are scheduled again by provisioning, and the node is removed once
    /// drained ([`Self::terminate_drained`]).
    fn begin_node_deletion(&mut self, node: &str) {
        let now: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> =
            serde_json::from_value(serde_json::Value::String(rfc3339(self.now))).ok();
        let mut claim_name = None;
        if let Some(n) = self.snapshot.nodes.iter_mut().find(|n| n.name == node) {
            n.marked_for_deletion = true;
            if !n.taints.iter().any(labels::taints::is_disrupted) {
                n.taints.push(k8s_openapi::api::core::v1::Taint {
                    key: labels::taints::DISRUPTED.to_owned(),
                    effect: "NoSchedule".to_owned(),
                    ..Default::default()
                });
            }
            claim_name.clone_from(&n.node_claim);
        }
        for c in self
            .snapshot
            .node_claims
            .iter_mut()
            .filter(|c| c.node_name.as_deref() == Some(node) || Some(&c.name) == claim_name.as_ref())
        {
            c.marked_for_deletion = true;
            let claim = Arc::make_mut(&mut c.claim);
            if claim.metadata.deletion_timestamp.is_none() {
                claim.metadata.deletion_timestamp.clone_from(&now);
            }
        }
        self.deleted_nodes.insert(node.to_owned());
    }

    /// Deletes a NodeClaim: its node is drained and terminated; an in-flight one (no node) goes at once.
    fn delete_node_claim(&mut self, name: &str) {
        let node = self.snapshot.node_claims.iter().find(|c| c.name == name).and_then(|c| c.node_name.clone());
        match node.filter(|n| self.snapshot.nodes.iter().any(|x| &x.name == n)) {
            Some(node) => self.begin_node_deletion(&node),
            None => {
                self.snapshot.node_claims.retain(|c| c.name != name);
                self.removed_by_step.push(name.to_owned());
            }
        }
    }

    /// Removes pods (bound and pending) matching `gone`; bound ones give their node a pod event. Returns how many.
    fn delete_pods(&mut self, gone: impl Fn(&CompactPod) -> bool) -> usize {
        let nodes: BTreeSet<String> = self
            .snapshot
            .bound_pods
            .iter()
            .filter(|p| gone(p))
            .filter_map(|p| p.node_name().map(str::to_owned))
            .collect();
        let before = self.snapshot.bound_pods.len() + self.snapshot.pending_pods.len();
        self.snapshot.bound_pods.retain(|p| !gone(p));
        self.snapshot.pending_pods.retain(|p| !gone(p));
        for n in nodes {
            self.pod_event(&n);
        }
        before - self.snapshot.bound_pods.len() - self.snapshot.pending_pods.len()
    }

    /// A `delete` step of a kind other than pod and node, with the garbage collector's cascade the API server
    /// would run: a NodePool's NodeClaims and a workload's pods go with it, a namespace takes everything in it.
    fn delete(&mut self, kind: DeletedKind, namespace: Option<&str>, name: &str) -> Result<String, String> {
        let ns = namespace.unwrap_or("default");
        let in_ns =
            |m: &ObjectMeta| m.namespace.as_deref().unwrap_or("default") == ns && m.name.as_deref() == Some(name);
        let missing = || match namespace {
            Some(ns) => format!("{} {ns}/{name} does not exist", kind.as_str()),
            None => format!("{} {name} does not exist", kind.as_str()),
        };
        match kind {
            DeletedKind::NodeClaim => {
                if !self.snapshot.node_claims.iter().any(|c| c.name == name) {
                    return Err(missing());
                }
                self.delete_node_claim(name);
                Ok("its node is drained, then terminated".to_owned())
            }
            DeletedKind::NodePool => {
                if !self.pools.iter().any(|p| p.metadata.name.as_deref() == Some(name)) {
                    return Err(missing());
                }
                self.pools.retain(|p| p.metadata.name.as_deref() != Some(name));
                self.snapshot.node_pools.retain(|p| p.metadata.name.as_deref() != Some(name));
                let claims: Vec<String> = self
                    .snapshot
                    .node_claims
                    .iter()
                    .filter(|c| c.node_pool.as_deref() == Some(name))
                    .map(|c| c.name.clone())
                    .collect();
                for c in &claims {
                    self.delete_node_claim(c);
                }
                Ok(format!(
                    "{} of it deleted (drained, then terminated)",
                    plural(claims.len(), "NodeClaim", "NodeClaims")
                ))
            }
            DeletedKind::Workload(w) => {
                let key = (w, ns.to_owned(), name.to_owned());
                if self.workloads.remove(&key).is_none() {
                    return Err(missing());
                }
                let pods: BTreeSet<String> = self.pods_of(&key).into_iter().map(|(k, _)| k).collect();
                let n = self.delete_pods(|p| pods.contains(&pod_key(p)));
                Ok(format!("{} deleted with it", plural(n, "pod", "pods")))
            }
            DeletedKind::DaemonSet => {
                let before = self.snapshot.daemon_sets.len();
                self.snapshot.daemon_sets.retain(|d| !in_ns(&d.metadata));
                if before == self.snapshot.daemon_sets.len() {
                    return Err(missing());
                }
                self.snapshot.daemon_set_pods.retain(|(n, m, _), _| !(n == ns && m == name));
                let owned = |p: &CompactPod| {
                    p.metadata.namespace.as_deref().unwrap_or("default") == ns
                        && p.metadata.owner_references.iter().flatten().any(|o| o.kind == "DaemonSet" && o.name == name)
                };
                let n = self.delete_pods(owned);
                Ok(format!("{} deleted with it", plural(n, "pod", "pods")))
            }
            DeletedKind::PodDisruptionBudget => {
                let before = self.snapshot.pdbs.len();
                self.snapshot.pdbs.retain(|p| !in_ns(&p.metadata));
                if before == self.snapshot.pdbs.len() {
                    return Err(missing());
                }
                Ok("its pods are no longer protected by it".to_owned())
            }
            DeletedKind::Namespace => {
                let known = self.snapshot.namespaces.remove(name).is_some();
                let in_it = |m: &ObjectMeta| m.namespace.as_deref().unwrap_or("default") == name;
                let pods = self.delete_pods(|p| p.metadata.namespace.as_deref().unwrap_or("default") == name);
                let workloads = self.workloads.len();
                self.workloads.retain(|(_, n, _), _| n != name);
                let workloads = workloads - self.workloads.len();
                let pdbs = self.snapshot.pdbs.len();
                self.snapshot.pdbs.retain(|p| !in_it(&p.metadata));
                let daemon_sets = self.snapshot.daemon_sets.len();
                self.snapshot.daemon_sets.retain(|d| !in_it(&d.metadata));
                self.snapshot.daemon_set_pods.retain(|(n, _, _), _| n != name);
                let others =
                    workloads + pdbs - self.snapshot.pdbs.len() + daemon_sets - self.snapshot.daemon_sets.len();
                if !known && pods == 0 && others == 0 {
                    return Err(missing());
                }
                Ok(format!(
                    "{} and {} in it deleted",
                    plural(pods, "pod", "pods"),
                    plural(others, "other object", "other objects")
                ))
            }
        }
    }

    fn drift(&mut self, select: impl Fn(&NodeClaimInfo) -> bool) -> usize {
        let now = rfc3339(self.now);
        let mut n = 0;
        for c in self.snapshot.node_claims.iter_mut().filter(|c| select(c)) {
            let status = Arc::make_mut(&mut c.claim).status.get_or_insert_with(Default::default);
            status.conditions.retain(|x| x.type_ != "Drifted");
            status.conditions.push(karpenter_api::Condition {
                type_: "Drifted".to_owned(),
                status: karpenter_api::ConditionStatus::True,
                observed_generation: None,
                last_transition_time: now.clone(),
                reason: "Simulated".to_owned(),
                message: "drifted by the timeline".to_owned(),
            });
            n += 1;
        }
        n
    }

    /// The pods (bound and pending) of a workload.
    fn pods_of(&self, key: &WorkloadKey) -> Vec<(String, bool)> {
        let owners = Owners::new(&self.objects);
        let (kind, ns, name) = key;
        let owned = |p: &CompactPod| {
            let (pns, pkind, pname) = owners.owner_of(p);
            &pns == ns && pkind == kind.as_str() && &pname == name
        };
        let mut out: Vec<(String, bool)> = Vec::new();
        out.extend(self.snapshot.pending_pods.iter().filter(|p| owned(p)).map(|p| (pod_key(p), false)));
        out.extend(self.snapshot.bound_pods.iter().filter(|p| owned(p)).map(|p| (pod_key(p), true)));
        out
    }

    /// Scales a workload: new pods from its template (pending), or removes pending pods first, then the highest
    /// ordinals. Returns the event message.
    fn scale(&mut self, key: &WorkloadKey, replicas: u32) -> String {
        let pods = self.pods_of(key);
        let current = pods.len();
        let want = replicas as usize;
        let (kind, ns, name) = key;
        let label = format!("{} {ns}/{name}", kind.as_str());
        if want > current {
            let Some(w) = self.workloads.get(key).cloned() else { return format!("{label}: unknown") };
            let used: BTreeSet<String> = pods.iter().map(|(k, _)| k.clone()).collect();
            let mut i = 0u64;
            let mut added = 0;
            while added < want - current {
                let pod_name = format!("{name}-{i}");
                i += 1;
                if used.contains(&format!("{ns}/{pod_name}")) {
                    continue;
                }
                self.snapshot.pending_pods.push(new_pod(key, &w, &pod_name).into_shared());
                added += 1;
            }
            self.snapshot.sort();
            format!("scale {label} from {current} to {want} pods ({added} new pending)")
        } else if want < current {
            let mut order = pods;
            // Pending first, then by descending ordinal (the newest pods of generated names).
            order.sort_by(|a, b| {
                a.1.cmp(&b.1).then_with(|| ordinal(&b.0).cmp(&ordinal(&a.0))).then_with(|| b.0.cmp(&a.0))
            });
            let gone: BTreeSet<String> = order.iter().take(current - want).map(|(k, _)| k.clone()).collect();
            let nodes: BTreeSet<String> = self
                .snapshot
                .bound_pods
                .iter()
                .filter(|p| gone.contains(&pod_key(p)))
                .filter_map(|p| p.node_name().map(str::to_owned))
                .collect();
            self.snapshot.bound_pods.retain(|p| !gone.contains(&pod_key(p)));
            self.snapshot.pending_pods.retain(|p| !gone.contains(&pod_key(p)));
            for n in nodes {
                self.pod_event(&n);
            }
            format!("scale {label} from {current} to {want} pods ({} deleted)", gone.len())
        } else {
            format!("scale {label}: already {current} pods")
        }
    }

    /// Adds objects of a manifest file: pods, workloads (existing ones are scaled to the new replica count with
    /// the new template), NodePools (added or replaced), PodDisruptionBudgets, DaemonSets, Namespaces.
    ///
    /// Long because each kind a timeline step may add (pods, workloads, NodePools, PDBs, DaemonSets, Namespaces) is
    /// one match arm with its own validation.
    fn apply(&mut self, path: &std::path::Path) -> Result<String, String> {
        let (objects, errors) = loader::load_paths([path]);
        let mut problems: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let ctx = ValidationContext { provider: self.provider.clone() };
        for l in &objects {
            if let Some(v) = l.object.validate_with(&ctx, &crate::node_classes()) {
                for v in v.iter() {
                    problems.push(format!("{}: {}: {}: {}", l.origin, l.object.display_name(), v.path, v.message));
                }
            }
            if matches!(l.object, Object::Node(_) | Object::NodeClaim(_)) {
                problems.push(format!(
                    "{}: {}: Nodes and NodeClaims cannot be applied during a run; put them in the initial manifests",
                    l.origin,
                    l.object.display_name()
                ));
            }
        }
        if objects.is_empty() && problems.is_empty() {
            problems.push(format!("{}: no objects", path.display()));
        }
        if !problems.is_empty() {
            return Err(problems.join("; "));
        }
        let added = ClusterSnapshot::from_objects(&objects).map_err(|e| e.to_string())?;
        let mut parts: Vec<String> = Vec::new();

        // Workloads that exist already: scale to the new replica count, with the new template.
        let mut rescaled: BTreeSet<WorkloadKey> = BTreeSet::new();
        for l in &objects {
            let (key, w, replicas) = match &l.object {
                Object::Deployment(d) => {
                    let (k, w) = workload(WorkloadKind::Deployment, d.as_ref());
                    (k, w, d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1))
                }
                Object::StatefulSet(s) => {
                    let (k, w) = workload(WorkloadKind::StatefulSet, s.as_ref());
                    (k, w, s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1))
                }
                Object::ReplicaSet(r) => {
                    let (k, w) = workload(WorkloadKind::ReplicaSet, r.as_ref());
                    (k, w, r.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1))
                }
                _ => continue,
            };
            if self.workloads.contains_key(&key) {
                self.workloads.insert(key.clone(), w);
                parts.push(self.scale(&key, u32::try_from(replicas.max(0)).unwrap_or(0)));
                rescaled.insert(key);
            }
        }
        let owners = Owners::new(&objects);
        let is_rescaled = |p: &CompactPod| {
            let (ns, kind, name) = owners.owner_of(p);
            rescaled.iter().any(|(k, n, m)| k.as_str() == kind && n == &ns && m == &name)
        };
        let existing: BTreeSet<String> =
            self.snapshot.bound_pods.iter().chain(&self.snapshot.pending_pods).map(|p| pod_key(p)).collect();
        let mut new_pods = 0;
        for p in added.pending_pods.into_iter().filter(|p| !is_rescaled(p)) {
            if existing.contains(&pod_key(&p)) {
                return Err(format!("pod {} already exists", pod_key(&p)));
            }
            self.snapshot.pending_pods.push(p);
            new_pods += 1;
        }
        let node_names: BTreeSet<&str> = self.snapshot.nodes.iter().map(|n| n.name.as_str()).collect();
        let mut bound = Vec::new();
        for p in added.bound_pods {
            let node = p.node_name().unwrap_or_default().to_owned();
            if !node_names.contains(node.as_str()) {
                return Err(format!("pod {} is bound to node {node}, which does not exist", pod_key(&p)));
            }
            if existing.contains(&pod_key(&p)) {
                return Err(format!("pod {} already exists", pod_key(&p)));
            }
            bound.push((p, node));
        }
        for (p, node) in bound {
            self.snapshot.bound_pods.push(p);
            self.pod_event(&node);
            new_pods += 1;
        }
        if new_pods > 0 {
            parts.push(format!("{new_pods} new pods"));
        }
        for mut pool in added.node_pools {
            super::assume_ready(&mut pool);
            let name = pool.metadata.name.clone().unwrap_or_default();
            if let Some(e) = dynamic_pool_exclusion(&pool).filter(|e| *e != PoolExclusion::Static) {
                self.note_once(format!("NodePool {name} (applied) left out of provisioning: it is {e}"));
            }
            let replaced = self.pools.iter().any(|p| p.metadata.name == pool.metadata.name);
            self.pools.retain(|p| p.metadata.name != pool.metadata.name);
            self.snapshot.node_pools.retain(|p| p.metadata.name != pool.metadata.name);
            self.pools.push(pool.clone());
            self.snapshot.node_pools.push(pool);
            parts.push(format!("NodePool {name} {}", if replaced { "replaced" } else { "added" }));
        }
        self.pools.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for pdb in added.pdbs {
            let key = (pdb.metadata.namespace.clone(), pdb.metadata.name.clone());
            self.snapshot.pdbs.retain(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()) != key);
            parts.push(format!(
                "PodDisruptionBudget {}/{}",
                key.0.as_deref().unwrap_or("default"),
                key.1.as_deref().unwrap_or_default()
            ));
            self.snapshot.pdbs.push(pdb);
        }
        for ds in added.daemon_sets {
            parts.push(format!("DaemonSet {}", ds.metadata.name.as_deref().unwrap_or_default()));
            self.snapshot.daemon_sets.push(ds);
        }
        for pod in added.daemon_set_pods.values() {
            self.snapshot.offer_daemon_set_pod(pod);
        }
        for (name, ns) in added.namespaces {
            self.snapshot.namespaces.entry(name).or_insert(ns);
        }
        self.learn_workloads(&objects);
        let first_new = self.objects.len();
        self.objects.extend(objects);
        // A NodePool added (or moved to another node class) gets the catalogue of its node class.
        if self.catalogue.is_stale(&self.pools, &self.objects, &self.objects[first_new..]) {
            let rebuilt =
                self.catalogue.rebuilt(&self.pools, &self.objects, &mut self.notes).map_err(|e| format!("{e:#}"))?;
            self.catalogue = Cow::Owned(rebuilt);
        }
        self.snapshot.sort();
        if parts.is_empty() {
            parts.push("nothing to add".to_owned());
        }
        Ok(parts.join(", "))
    }
}

/// (key, template) of a workload object.
fn workload<T: WorkloadObject>(kind: WorkloadKind, o: &T) -> (WorkloadKey, Workload) {
    let meta = o.meta();
    let key =
        (kind, meta.namespace.clone().unwrap_or_else(|| "default".to_owned()), meta.name.clone().unwrap_or_default());
    (key, Workload { api_version: "apps/v1", uid: meta.uid.clone().unwrap_or_default(), template: o.template() })
}

trait WorkloadObject {
    fn meta(&self) -> &ObjectMeta;
    fn template(&self) -> PodTemplateSpec;
}

impl WorkloadObject for Deployment {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn template(&self) -> PodTemplateSpec {
        self.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default()
    }
}

impl WorkloadObject for StatefulSet {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn template(&self) -> PodTemplateSpec {
        self.spec.as_ref().map(|s| s.template.clone()).unwrap_or_default()
    }
}

impl WorkloadObject for ReplicaSet {
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn template(&self) -> PodTemplateSpec {
        self.spec.as_ref().and_then(|s| s.template.clone()).unwrap_or_default()
    }
}

/// A pending pod of a workload, named as the snapshot names generated pods (`<workload>-<i>`).
fn new_pod(key: &WorkloadKey, w: &Workload, pod_name: &str) -> Pod {
    let (kind, ns, name) = key;
    let tm = w.template.metadata.as_ref();
    let mut spec = w.template.spec.clone().unwrap_or_default();
    spec.node_name = None;
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name.to_owned()),
            namespace: Some(ns.clone()),
            uid: Some(format!("generated/{ns}/{pod_name}")),
            labels: tm.and_then(|m| m.labels.clone()),
            annotations: tm.and_then(|m| m.annotations.clone()),
            owner_references: Some(vec![OwnerReference {
                api_version: w.api_version.to_owned(),
                kind: kind.as_str().to_owned(),
                name: name.clone(),
                uid: w.uid.clone(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The numeric suffix of `ns/name-<n>` (0 when none).
fn ordinal(key: &str) -> u64 {
    key.rsplit_once('-').and_then(|(_, n)| n.parse().ok()).unwrap_or(0)
}

/// A `True` condition of `type_` that became so at `at`.
fn true_condition(type_: &str, at: &str) -> karpenter_api::Condition {
    karpenter_api::Condition {
        type_: type_.to_owned(),
        status: karpenter_api::ConditionStatus::True,
        observed_generation: None,
        last_transition_time: at.to_owned(),
        reason: type_.to_owned(),
        message: String::new(),
    }
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn describe_launch(l: &LaunchedNode) -> String {
    let estimated = if l.price_estimated { ", estimated" } else { "" };
    format!("{} ({}, ${:.4}/h{estimated})", l.name, l.instance_type, l.price)
}

/// Sums of prices rounded to 1e-6.
pub fn round(price: f64) -> f64 {
    (price * 1e6).round() / 1e6 + 0.0
}

/// Pod counts per node name.
pub fn pods_per_node(snapshot: &ClusterSnapshot) -> HashMap<&str, Vec<&CompactPod>> {
    let mut out: HashMap<&str, Vec<&CompactPod>> = HashMap::new();
    for p in &snapshot.bound_pods {
        if let Some(n) = p.node_name() {
            out.entry(n).or_default().push(p);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A launch uses the controller's NodeClaim (hash annotations, node class label, requests) and fills in what
    /// a launch does: the offering's labels, the single-value requirements' and the claim's own.
    #[test]
    fn launched_claims_are_the_controllers_with_resolved_labels() {
        let input = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata:
      labels: {team: a}
      annotations: {note: kept}
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: example.com/rack, operator: In, values: [r2, r1]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default}
spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}
";
        let objects = loader::load_str(input, "input.yaml").expect("valid input");
        let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let pools = snapshot.node_pools.clone();
        let catalogue = Catalogue::kwok();
        let start = parse_rfc3339("2026-01-01T00:00:00Z").expect("time");
        let mut world =
            World::new(snapshot, pools, &catalogue, karpenter_kwok::labels::provider_labels(), objects, start);
        let (placed, launched, left) = world.schedule_pending().expect("runs").expect("something happened");
        assert_eq!((placed, launched.len(), left), (1, 1, 0));
        let info = &world.snapshot.node_claims[0];
        let claim = &info.claim;
        assert_eq!(claim.metadata.name.as_deref(), Some(launched[0].name.as_str()));
        let a = claim.metadata.annotations.as_ref().expect("annotations");
        assert!(a.contains_key(labels::annotations::NODE_POOL_HASH), "{a:?}");
        assert_eq!(a.get("note").map(String::as_str), Some("kept"));
        let l = claim.metadata.labels.as_ref().expect("labels");
        let get = |k: &str| l.get(k).map(String::as_str);
        assert_eq!(get("team"), Some("a"));
        assert_eq!(get("example.com/rack"), Some("r1"), "a custom In requirement: its smallest value");
        assert_eq!(get("kubernetes.io/arch"), Some("amd64"), "single-value requirement");
        assert_eq!(get("karpenter.kwok.sh/kwoknodeclass"), Some("default"));
        assert_eq!(get(labels::INSTANCE_TYPE), Some(launched[0].instance_type.as_str()), "cloud-resolved");
        assert_eq!(get(labels::ZONE), launched[0].zone.as_deref(), "cloud-resolved");
        assert_eq!(get(labels::NODE_POOL), Some("default"));
        let requests = &claim.spec.resources.as_ref().expect("requests").requests;
        assert_eq!(requests.get("cpu").map(|q| q.as_str()), Some("1"));
        let node = &world.snapshot.nodes[0];
        assert_eq!(node.labels.get(labels::HOSTNAME), Some(&launched[0].name));
        assert_eq!(node.labels.get("example.com/rack").map(String::as_str), Some("r1"));
        assert!(karpenter_api::Conditions::is_true(claim.conditions(), "Initialized"));
    }

    /// A pod annotated for cluster-autoscaler keeps its node, and the node's verdict names the annotation.
    #[test]
    fn autoscaler_annotations_block_and_the_verdict_names_them() {
        let input = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption: {consolidateAfter: 0s}
---
apiVersion: v1
kind: Pod
metadata:
  name: keep
  namespace: default
  annotations: {cluster-autoscaler.kubernetes.io/safe-to-evict: 'false'}
spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}
";
        let catalogue = Catalogue::kwok();
        let mut w = run_world(input, &catalogue, &[], "2026-01-01T00:00:00Z", Duration::from_secs(3600), None);
        let node = w.snapshot.nodes.first().expect("a node was launched").name.clone();
        let pass = w.pass();
        let verdict = pass.verdict(&node).expect("a verdict");
        assert_eq!(verdict.message, "pod default/keep has cluster-autoscaler.kubernetes.io/safe-to-evict=false");
        w.options.honor_autoscaler_annotations = false;
        let pass = w.pass();
        let verdict = pass.verdict(&node).expect("a verdict");
        assert!(!matches!(verdict.reason, Reason::PodDoNotDisrupt { .. }), "off: {verdict:?}");
    }

    /// A NodePool whose budget blocks every disruption 09:00-17:00 UTC on weekdays, and 10 pods of 1 CPU.
    const BUSINESS_HOURS: &str = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - {key: kubernetes.io/os, operator: In, values: [linux]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
      expireAfter: 720h
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 5m
    budgets:
      - {nodes: '0', schedule: '0 9 * * mon-fri', duration: 8h}
      - {nodes: '10%'}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: inflate, namespace: default}
spec:
  replicas: 10
  selector: {matchLabels: {app: inflate}}
  template:
    metadata: {labels: {app: inflate}}
    spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}
";

    /// Runs `input` from `start` to `start + length` under `steps` as `simulate --timeline` does (steps due, then
    /// settle, then the next instant), visiting every multiple of `tick` too when given.
    fn run_world<'c>(
        input: &str,
        catalogue: &'c Catalogue,
        steps: &[Step],
        start: &str,
        length: Duration,
        tick: Option<chrono::Duration>,
    ) -> World<'c> {
        let objects = loader::load_str(input, "input.yaml").expect("valid input");
        let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let pools = snapshot.node_pools.clone();
        let start = parse_rfc3339(start).expect("time");
        let end = start + chrono_duration(length);
        let mut w = World::new(snapshot, pools, catalogue, karpenter_kwok::labels::provider_labels(), objects, start);
        w.tick = tick;
        w.provision().expect("provisions");
        let mut next_step = 0;
        loop {
            while let Some(step) = steps.get(next_step).filter(|s| start + chrono_duration(s.at) <= w.now) {
                w.step(step).unwrap_or_else(|e| panic!("{}", e.0));
                next_step += 1;
            }
            w.settle().expect("settles");
            let due = steps.get(next_step).map(|s| start + chrono_duration(s.at));
            match [due, w.next_instant()].into_iter().flatten().min() {
                Some(t) if t <= end => w.now = t,
                _ => break,
            }
        }
        w
    }

    fn scale_to(at_minutes: u64, replicas: u32) -> Step {
        Step {
            label: format!("scale at {at_minutes}m"),
            at: Duration::from_secs(at_minutes * 60),
            action: Action::Scale {
                kind: WorkloadKind::Deployment,
                namespace: "default".into(),
                name: "inflate".into(),
                replicas,
            },
        }
    }

    fn disruptions(w: &World<'_>) -> Vec<(String, Option<String>)> {
        w.events
            .iter()
            .filter(|e| e.kind == EventKind::Disruption)
            .map(|e| (e.at.clone(), e.decided_at.clone()))
            .collect()
    }

    /// A scale-down at 10:00 on a Monday cannot be consolidated before the budget's window closes at 17:00:
    /// the command is decided at 17:00:00 and runs after its 15 s validation. Over a year the run visits the
    /// window's edges, expiries and the steps only: a bounded number of passes, not one per minute.
    #[test]
    fn a_cron_budget_window_defers_consolidation_to_its_end_and_a_year_takes_few_passes() {
        let catalogue = Catalogue::kwok();
        // 2026-01-05 is a Monday.
        let steps = [scale_to(600, 2)];
        let year = Duration::from_secs(365 * 24 * 3600);
        let w = run_world(BUSINESS_HOURS, &catalogue, &steps, "2026-01-05T00:00:00Z", year, None);
        let got = disruptions(&w);
        assert_eq!(
            got.first(),
            Some(&("2026-01-05T17:00:15Z".to_owned(), Some("2026-01-05T17:00:00Z".to_owned()))),
            "{got:?}"
        );
        // Expiry every 30 days replaces the node; nothing else is disrupted.
        assert!(w.events.iter().filter(|e| e.kind == EventKind::Expiration).count() >= 12);
        // 261 weekdays open and close a window; 12 expiries with their provisioning; a few commands.
        assert!(w.passes > 2 * 261, "{} passes", w.passes);
        assert!(w.passes < 1_200, "{} passes over a year", w.passes);
    }

    /// Visiting only the hinted instants gives the same events as visiting every minute as well.
    #[test]
    fn skipping_to_the_next_hint_misses_nothing() {
        let catalogue = Catalogue::kwok();
        // From Monday 08:00: 08:50 down to 2 (consolidated at 08:55, before the window), 08:57 up to 9, 08:58 down
        // to 3 (consolidateAfter elapses at 09:03, inside the window: deferred to 17:00).
        let steps = [scale_to(50, 2), scale_to(57, 9), scale_to(58, 3)];
        let length = Duration::from_secs(9 * 3600 + 30 * 60);
        let start = "2026-01-05T08:00:00Z";
        let fast = run_world(BUSINESS_HOURS, &catalogue, &steps, start, length, None);
        let slow = run_world(BUSINESS_HOURS, &catalogue, &steps, start, length, Some(chrono::Duration::minutes(1)));
        let events =
            |w: &World<'_>| w.events.iter().map(|e| format!("{} {:?} {}", e.at, e.kind, e.message)).collect::<Vec<_>>();
        assert_eq!(events(&fast), events(&slow));
        let at: Vec<String> = disruptions(&fast).into_iter().map(|(at, _)| at).collect();
        assert_eq!(at, ["2026-01-05T08:55:15Z", "2026-01-05T17:00:15Z"], "{:?}", events(&fast));
        assert!(slow.passes > 9 * 60 && fast.passes < 30, "{} vs {} passes", fast.passes, slow.passes);
    }

    /// A NodePool added by a timeline `apply` is evaluated against the catalogue of its node class, with the
    /// settings of an EC2NodeClass applied with it, as a NodePool of the input would be; its nodes carry the
    /// zone id of their offering, and estimated (spot) prices are marked in the events and the nodes.
    #[test]
    fn applied_node_pools_get_the_catalogue_of_their_node_class() {
        use super::super::{Options, Outcome, TimeOptions, simulate};
        let dir = std::env::temp_dir().join(format!("karpenter-world-apply-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let class = |name: &str, max_pods: u32| {
            format!(
                "apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: {name}}}
spec:
  role: r
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{a: b}}}}]
  securityGroupSelectorTerms: [{{tags: {{a: b}}}}]
  kubelet: {{maxPods: {max_pods}}}
"
            )
        };
        let pool = |name: &str, class: &str, capacity: &str| {
            format!(
                "apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {class}}}
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [{capacity}]}}
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}}
"
            )
        };
        let pod = |name: &str, pool: &str| {
            format!(
                "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeSelector: {{karpenter.sh/nodepool: {pool}}}
  containers: [{{name: c, resources: {{requests: {{cpu: 100m}}}}}}]
"
            )
        };
        let input = dir.join("input.yaml");
        let input_text = [class("first", 9), pool("first", "first", "on-demand"), pod("a", "first")].join("---\n");
        std::fs::write(&input, &input_text).expect("write");
        let later_text = [class("later", 7), pool("later", "later", "spot"), pod("b", "later")].join("---\n");
        std::fs::write(dir.join("later.yaml"), &later_text).expect("write");
        std::fs::write(dir.join("timeline.yaml"), "steps:\n  - {at: 10m, apply: later.yaml}\n").expect("write");
        let options = Options {
            paths: vec![input],
            instance_types: None,
            provider: None,
            region: "us-east-1".into(),
            time: Some(TimeOptions { timeline: Some(dir.join("timeline.yaml")), ..Default::default() }),
            honor_autoscaler_annotations: true,
            cluster_limits: Default::default(),
            scheduler_config: Default::default(),
            feature_gates: Default::default(),
            ignore_dra_requests: true,
            aws_feature_gates: Default::default(),
            preference_policy: Default::default(),
            min_values_policy: Default::default(),
            consolidation_min_savings: None,
            spot_to_spot_min_instance_types: karpenter_disruption::SPOT_TO_SPOT_MIN_TYPES,
        };
        let outcome = simulate(&options).expect("runs");
        let _ = std::fs::remove_dir_all(&dir);
        let Outcome::Timeline(report) = outcome else { panic!("{outcome:?}") };
        let node = |pool: &str| {
            report.nodes.iter().find(|n| n.node_pool.as_deref() == Some(pool)).unwrap_or_else(|| panic!("{pool}"))
        };
        // Before the fix the applied pool had the kwok catalogue: no m5.large, so pod b stayed pending.
        assert!(report.unschedulable.is_empty(), "{:?}", report.unschedulable);
        let (first, later) = (node("first"), node("later"));
        assert_eq!(later.instance_type.as_deref(), Some("m5.large"));
        assert_eq!(later.capacity_type.as_deref(), Some("spot"));
        assert!(later.price_estimated && !first.price_estimated, "spot prices are estimated");
        assert!(report.summary.after.price_estimated);
        let launch = report.events.iter().flat_map(|e| &e.nodes_launched).find(|l| l.node_pool == "later");
        assert!(launch.is_some_and(|l| l.price_estimated), "{:?}", report.events);
        let rendered = super::super::render_timeline(&report);
        assert!(rendered.contains(" (estimated)"), "{rendered}");
        assert!(report.catalogue.source.contains("aws us-east-1"), "{:?}", report.catalogue);

        // The same at the level of the world: the applied EC2NodeClass's kubelet shapes the applied pool's
        // instance types, and the node carries the zone id of its offering's zone.
        let objects = loader::load_str(&input_text, "input.yaml").expect("valid input");
        let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let pools = snapshot.node_pools.clone();
        let selection = super::super::catalogue::Selection {
            force: None,
            instance_types: None,
            region: "us-east-1",
            aws_feature_gates: Default::default(),
        };
        let catalogue = Catalogue::build(&selection, &pools, &objects, &mut Vec::new()).expect("catalogue");
        let start = parse_rfc3339("2026-01-01T00:00:00Z").expect("time");
        let mut w = World::new(snapshot, pools, &catalogue, karpenter_aws::labels::provider_labels(), objects, start);
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("later.yaml"), &later_text).expect("write");
        let step = Step {
            label: "steps[0]".into(),
            at: Duration::ZERO,
            action: Action::Apply { path: dir.join("later.yaml") },
        };
        w.step(&step).unwrap_or_else(|e| panic!("{}", e.0));
        let _ = std::fs::remove_dir_all(&dir);
        w.settle().expect("settles");
        let node = |pool: &str| w.snapshot.nodes.iter().find(|n| n.node_pool.as_deref() == Some(pool)).expect("node");
        assert_eq!(node("first").allocatable.pods().value(), Some(9));
        assert_eq!(node("later").allocatable.pods().value(), Some(7), "maxPods of the applied EC2NodeClass");
        let later = node("later");
        let zone = later.labels.get(labels::ZONE).expect("zone");
        let offering = catalogue
            .for_pool("first")
            .iter()
            .find(|it| it.name == "m5.large")
            .and_then(|it| it.offerings.iter().find(|o| o.zone() == Some(zone.as_str())))
            .expect("offering");
        let id = offering.requirements.get(karpenter_aws::labels::ZONE_ID).any();
        assert!(id.starts_with("use1-az"), "{id:?}");
        assert_eq!(later.labels.get(karpenter_aws::labels::ZONE_ID), Some(&id));
    }

    #[test]
    fn ordinals_sort_numerically() {
        assert_eq!(ordinal("default/inflate-10"), 10);
        assert_eq!(ordinal("default/web"), 0);
    }
}
