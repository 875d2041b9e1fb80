//! Node and NodeClaim termination: the `karpenter.sh/termination`
//! finalizer on both objects.
//!
//! [`Termination::reconcile_node_claim`] handles a deleting NodeClaim: it annotates the terminationGracePeriod
//! deadline (`karpenter.sh/nodeclaim-termination-timestamp`, event `TerminationGracePeriodExpiring`), deletes
//! the claim's Node(s) and waits for them to go, deletes the instance (`CloudProvider::delete` until
//! NodeClaimNotFound, `InstanceTerminating=True` meanwhile) and removes the finalizer.
//!
//! [`Termination::reconcile_node`] handles a deleting Node that carries the finalizer:
//!
//! 1. deletes its NodeClaim (found by `spec.providerID`) if that is not deleting yet;
//! 2. a Node that is not Ready whose instance is already gone loses its finalizer at once;
//! 3. taints it `karpenter.sh/disrupted:NoSchedule` (replacing that key with another effect) and labels it
//!    `node.kubernetes.io/exclude-from-external-load-balancers=karpenter`;
//! 4. **drains** it ([`drain_plan`]): pods that tolerate the disrupted taint, static (mirror) pods, terminal
//!    pods and pods stuck terminating for over a minute are left alone. When the NodeClaim has a deadline,
//!    pods that would not finish before it are deleted directly with the remaining time as their grace period
//!    (bypassing PDBs and `karpenter.sh/do-not-disrupt`, computed by
//!    [`karpenter_disruption::expiration::termination_deadline`]). The others are evicted through the
//!    Eviction API, one group at a time: non-critical non-DaemonSet pods, then non-critical DaemonSet pods,
//!    then critical (`system-cluster-critical` / `system-node-critical`) non-DaemonSet pods, then critical
//!    DaemonSet pods; a group starts only when every pod of the previous ones is gone. A PDB that refuses (429)
//!    leaves the pod for the next pass — never forced; pods with an active do-not-disrupt annotation wait too.
//!    While pods remain: event `FailedDraining`, `Drained=Unknown(Draining)` on the NodeClaim, look again in
//!    1 s. Once empty, it waits until 5 s have passed since `Drained` went Unknown (pods the scheduler placed
//!    before it saw the taint), then sets `Drained=True` (metric `karpenter_nodes_drained_total`);
//! 5. waits for the node's VolumeAttachments to go (`VolumesDetached=Unknown(AwaitingVolumeDetachment)`, event
//!    `AwaitingVolumeDetachment`), ignoring attachments of volumes used by pods the drain does not evict; once
//!    the deadline has passed it stops waiting (`VolumesDetached=False(TerminationGracePeriodElapsed)`);
//! 6. deletes the instance (`InstanceTerminating=True`, look again in 5 s until NodeClaimNotFound);
//! 7. removes the finalizer (metrics `karpenter_nodes_terminated_total`, termination and lifetime durations).
//!
//! Evictions go through [`crate::eviction`]: give [`Termination::new`] a context whose client comes from
//! [`crate::client`] (it never retries a 429, so a PDB-blocked eviction does not hold the reconcile). Every
//! reconcile reads the objects afresh and returns when to look again, so tests drive it step by step;
//! [`Termination::run`] is the thin kube-runtime loop around them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Taint};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use karpenter_api::DoNotDisrupt;
use karpenter_api::condition::{ConditionStatus, Conditions};
use karpenter_api::labels::{self, annotations, finalizers, taints};
use karpenter_api::nodeclaim::conditions;
use karpenter_api::nodeclaim::{NodeClaimSpec, NodeClassReference};
use karpenter_api::time::{from_k8s, parse_rfc3339};
use karpenter_api::{CompactPod, NodeClaim};
use karpenter_cloudprovider::CloudProvider;
use karpenter_disruption::expiration::{STUCK_AFTER_SECONDS, TerminationDeadline, termination_deadline};
use karpenter_disruption::pods::{is_static, tolerates_disrupted_taint};
use karpenter_scheduler::ClusterSnapshot;
use karpenter_scheduler::snapshot::{is_daemon_set_pod, pod_key};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::events::{Event, reasons};
use crate::eviction::{EvictionOutcome, evict_uid};
use crate::kube_util::{
    ErrorPolicyContext, ReconcileError, Requeue, delete_ignoring_missing, ensure_claim_condition, is_not_found, label,
    node_claim_info, remove_finalizer, seconds_between,
};
use crate::metrics::Metrics;
use crate::metrics::runtime::queue::ControllerQueue;
use crate::state::{ClusterState, Tracked};

/// How often a draining node is looked at again.
pub const DRAIN_REQUEUE: Duration = Duration::from_secs(1);
/// How long after the drain started (the `Drained` condition went Unknown) an empty node is declared drained.
pub const DRAIN_SETTLE: Duration = Duration::from_secs(5);
/// How often a terminating instance is polled.
pub const INSTANCE_REQUEUE: Duration = Duration::from_secs(5);
/// How often a deleting NodeClaim looks again for its Node to be gone (its deletion also triggers a reconcile).
pub const NODE_WAIT_REQUEUE: Duration = Duration::from_secs(10);
/// The priority classes whose pods are drained last.
pub const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];
/// Value of the `node.kubernetes.io/exclude-from-external-load-balancers` label on terminating nodes.
pub const EXCLUDE_FROM_LB_VALUE: &str = "karpenter";

/// A pod with its place in the drain order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DrainGroup {
    /// Neither critical nor a DaemonSet pod: evicted first.
    Workload,
    /// A non-critical DaemonSet pod.
    DaemonSet,
    /// A critical pod that is not a DaemonSet pod.
    CriticalWorkload,
    /// A critical DaemonSet pod: evicted last.
    CriticalDaemonSet,
}

impl DrainGroup {
    /// The group of a pod.
    pub fn of(pod: &CompactPod) -> DrainGroup {
        let critical = pod.spec.priority_class_name.as_deref().is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c));
        match (critical, is_daemon_set_pod(pod)) {
            (false, false) => DrainGroup::Workload,
            (false, true) => DrainGroup::DaemonSet,
            (true, false) => DrainGroup::CriticalWorkload,
            (true, true) => DrainGroup::CriticalDaemonSet,
        }
    }
}

/// What one drain pass does (see [`drain_plan`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DrainPlan {
    /// Pods to delete directly now, with the grace period to give them (seconds until the deadline, ≥ 1).
    pub force_delete: Vec<(CompactPod, i64)>,
    /// Pods to evict now: the active pods of the first group that still has pods.
    pub evict: Vec<CompactPod>,
    /// The group being drained, if any pod is left.
    pub group: Option<DrainGroup>,
    /// Pods the drain still waits for (to be evicted, or terminating).
    pub waiting: usize,
}

/// Whether the drain waits for this pod: not terminal, not tolerating the disrupted taint, not static, and not
/// stuck terminating (over a minute past its deletion timestamp).
pub fn waits_for(pod: &CompactPod, now: DateTime<Utc>) -> bool {
    if pod.is_terminal() || tolerates_disrupted_taint(pod) || is_static(pod) {
        return false;
    }
    let stuck = pod
        .metadata
        .deletion_timestamp
        .as_ref()
        .and_then(from_k8s)
        .is_some_and(|d| now > d + chrono::Duration::seconds(STUCK_AFTER_SECONDS));
    !stuck
}

/// The drain pass over the pods of a node at `now`, given the NodeClaim's deadline (see the module docs).
pub fn drain_plan(pods: &[CompactPod], deadline: Option<&TerminationDeadline>, now: DateTime<Utc>) -> DrainPlan {
    let forced: std::collections::BTreeMap<&str, i64> = deadline
        .map(|d| d.force_delete.iter().map(|f| (f.pod.as_str(), f.grace_seconds)).collect())
        .unwrap_or_default();
    let mut plan = DrainPlan::default();
    let mut graceful: Vec<&CompactPod> = Vec::new();
    for pod in pods.iter().filter(|p| waits_for(p, now)) {
        plan.waiting += 1;
        match forced.get(pod_key(pod).as_str()) {
            Some(grace) => plan.force_delete.push((pod.clone(), *grace)),
            None => graceful.push(pod),
        }
    }
    plan.group = graceful.iter().map(|p| DrainGroup::of(p)).min();
    if let Some(group) = plan.group {
        plan.evict = graceful
            .into_iter()
            .filter(|p| DrainGroup::of(p) == group && p.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
    }
    plan.force_delete.sort_by_key(|(p, _)| pod_key(p));
    plan.evict.sort_by_key(pod_key);
    plan
}

/// The terminationGracePeriod deadline of a deleting NodeClaim whose node is `node_name` with `pods` on it.
pub fn claim_deadline(
    claim: &NodeClaim,
    node_name: &str,
    pods: &[CompactPod],
    now: DateTime<Utc>,
) -> Option<TerminationDeadline> {
    let info = node_claim_info(claim, Some(node_name));
    let snapshot =
        ClusterSnapshot { bound_pods: pods.iter().cloned().map(Arc::new).collect(), ..ClusterSnapshot::default() };
    termination_deadline(&snapshot, &info, now)
}

fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).filter(|p| !p.is_empty())
}

/// The node with the disrupted taint and the load-balancer exclusion label; `None` when it has both.
fn tainted(node: &Node) -> Option<Node> {
    let mut node = node.clone();
    let mut changed = false;
    let spec = node.spec.get_or_insert_with(Default::default);
    let list = spec.taints.get_or_insert_with(Vec::new);
    let present = list.iter().any(taints::is_disrupted);
    if !present {
        list.retain(|t| t.key != taints::DISRUPTED);
        list.push(Taint { key: taints::DISRUPTED.into(), effect: "NoSchedule".into(), value: None, time_added: None });
        changed = true;
    }
    let node_labels = node.metadata.labels.get_or_insert_with(Default::default);
    if node_labels.get(labels::EXCLUDE_FROM_EXTERNAL_LB).map(String::as_str) != Some(EXCLUDE_FROM_LB_VALUE) {
        node_labels.insert(labels::EXCLUDE_FROM_EXTERNAL_LB.into(), EXCLUDE_FROM_LB_VALUE.into());
        changed = true;
    }
    changed.then_some(node)
}

/// A NodeClaim standing for an instance known only by its provider id (to delete the instance of a Node
/// whose NodeClaim is gone).
pub(crate) fn claim_for_instance(name: &str, provider_id: &str) -> NodeClaim {
    let spec = NodeClaimSpec {
        taints: Vec::new(),
        startup_taints: Vec::new(),
        requirements: Vec::new(),
        resources: None,
        node_class_ref: NodeClassReference::new("", "", ""),
        termination_grace_period: None,
        expire_after: karpenter_api::NillableDuration::from_static("Never"),
    };
    let mut claim = NodeClaim::new(name, spec);
    claim.status = Some(karpenter_api::nodeclaim::NodeClaimStatus {
        provider_id: Some(provider_id.to_owned()),
        ..Default::default()
    });
    claim
}

/// The termination controller (see the module docs).
pub struct Termination {
    /// The context's state is where a deleting Node's NodeClaims are found instead of listing every NodeClaim
    /// from the API server on each reconcile (a scale-in drains hundreds of nodes at once), once it has listed
    /// them (a claim's providerID never changes once set); until then reads go to the API server.
    ctx: ControllerContext,
}

impl std::fmt::Debug for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Termination").field("cloud", &self.ctx.cloud.name()).finish_non_exhaustive()
    }
}

impl Termination {
    /// A controller writing through `client` (build it with [`crate::client`] so evictions are not retried).
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone() }
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.ctx.client.clone())
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.ctx.client.clone())
    }

    fn publish(&self, event: Event) {
        self.ctx.recorder.publish_detached(event);
    }

    /// The NodeClaims whose `status.providerID` is `provider_id`.
    /// The state, when it has listed every object of kind `K` (its copies are then as fresh as the watch).
    fn synced<K: Tracked>(&self) -> Option<&ClusterState> {
        Some(&self.ctx.state).filter(|s| s.kind_synced::<K>())
    }

    /// The object `name` as the state holds it, else as the API server answers. Every write that follows names
    /// the resourceVersion it was computed from, so a copy the watch has not brought up to date yet costs a
    /// conflict and a retry, not a wrong write; reading the state spares a GET (and its decoding) per pass of
    /// every deleting Node and NodeClaim.
    async fn current<K: Tracked + Clone>(&self, api: &Api<K>, name: &str) -> Result<Option<K>, kube::Error> {
        match self.synced::<K>() {
            Some(state) => Ok(state.get::<K>(name)),
            None => api.get_opt(name).await,
        }
    }

    async fn claims_with_provider_id(&self, provider_id: &str) -> Result<Vec<NodeClaim>, kube::Error> {
        if let Some(state) = self.synced::<NodeClaim>() {
            return Ok(state.node_claims_by_provider_id(provider_id).iter().map(|c| NodeClaim::clone(c)).collect());
        }
        let mut claims = self.claims().list(&ListParams::default()).await?.items;
        claims.retain(|c| c.provider_id() == Some(provider_id));
        Ok(claims)
    }

    /// The Nodes of a NodeClaim: its `status.nodeName` when that node has its provider id, else (not registered
    /// yet) every node with its provider id.
    async fn nodes_of(&self, claim: &NodeClaim) -> Result<Vec<Node>, kube::Error> {
        let Some(provider_id) = claim.provider_id().filter(|p| !p.is_empty()) else { return Ok(Vec::new()) };
        // The state's providerID index when it has every Node: a deleting claim is reconciled every few seconds
        // until its Node is gone, and once the Node is gone the fallback below lists every Node of the cluster.
        if let Some(state) = self.synced::<Node>() {
            return Ok(state.nodes_by_provider_id(provider_id).iter().map(|n| Node::clone(n)).collect());
        }
        if let Some(name) = claim.node_name().filter(|n| !n.is_empty())
            && let Some(node) = self.nodes().get_opt(name).await?
            && node_provider_id(&node) == Some(provider_id)
        {
            return Ok(vec![node]);
        }
        let mut nodes = self.nodes().list(&ListParams::default()).await?.items;
        nodes.retain(|n| node_provider_id(n) == Some(provider_id));
        Ok(nodes)
    }

    /// Reconciles the NodeClaim `name`. Does nothing unless it is being deleted with the finalizer.
    pub async fn reconcile_node_claim(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api = self.claims();
        let Some(mut claim) = self.current(&api, name).await? else { return Ok(None) };
        if claim.metadata.deletion_timestamp.is_none()
            || !claim.finalizers().iter().any(|f| f == finalizers::TERMINATION)
        {
            return Ok(None);
        }
        let now = self.ctx.clock.now();

        // 1. The terminationGracePeriod deadline, as an annotation every later pass reads.
        if let Some(deadline) = claim_deadline(&claim, "", &[], now)
            && let Some(value) = deadline.annotate
        {
            let patch = json!({"metadata": {
                "resourceVersion": claim.resource_version(),
                "annotations": {annotations::NODE_CLAIM_TERMINATION_TIMESTAMP: value},
            }});
            claim = api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            self.publish(Event::warning(
                &claim,
                reasons::TERMINATION_GRACE_PERIOD_EXPIRING,
                format!("All pods will be deleted by {value}"),
            ));
        }

        // 2. The Node goes first (its own finalizer drains it).
        let nodes = self.nodes_of(&claim).await?;
        if !nodes.is_empty() {
            for node in nodes.iter().filter(|n| n.metadata.deletion_timestamp.is_none()) {
                delete_ignoring_missing(&self.nodes(), &node.name_any()).await?;
                tracing::info!(NodeClaim = %name, Node = %node.name_any(), "deleted node");
            }
            return Ok(Some(NODE_WAIT_REQUEUE));
        }

        // 3. The instance, asked to terminate until the provider reports it gone. InstanceTerminating is set even
        // when the first ask already finds it gone (as upstream does; the kwok provider reports a terminating
        // Node's instance gone), so every termination observes how long the instance took from that first ask.
        let mut instance_termination_secs = None;
        if claim.provider_id().is_some_and(|p| !p.is_empty()) {
            let gone = match self.ctx.cloud.delete(&claim).await {
                Ok(()) => false,
                Err(e) if e.is_not_found() => true,
                Err(e) => return Err(e.into()),
            };
            claim = ensure_claim_condition(
                &api,
                &claim,
                conditions::INSTANCE_TERMINATING,
                ConditionStatus::True,
                "InstanceTerminating",
                "",
                now,
            )
            .await?;
            if !gone {
                return Ok(Some(INSTANCE_REQUEUE));
            }
            instance_termination_secs = claim
                .conditions()
                .condition(conditions::INSTANCE_TERMINATING)
                .and_then(|c| parse_rfc3339(&c.last_transition_time))
                .map(|asked| seconds_between(asked, now));
        }

        // 4. The finalizer.
        remove_finalizer(&api, &claim, finalizers::TERMINATION).await?;
        let pool = claim.node_pool_name().unwrap_or("");
        self.ctx
            .metrics
            .nodeclaims_terminated(pool, label(&claim, labels::CAPACITY_TYPE), label(&claim, labels::ZONE))
            .inc();
        if let Some(deleted) = claim.metadata.deletion_timestamp.as_ref().and_then(from_k8s) {
            let secs = seconds_between(deleted, now);
            self.ctx.metrics.nodeclaims_termination_duration_seconds(pool).observe(secs);
        }
        if let Some(secs) = instance_termination_secs {
            self.ctx.metrics.nodeclaims_instance_termination_duration_seconds(pool).observe(secs);
        }
        tracing::info!(NodeClaim = %name, "deleted nodeclaim");
        Ok(None)
    }

    /// Reconciles the Node `name`. Does nothing unless it is being deleted with the finalizer.
    ///
    /// Long because it is upstream's numbered node finalization (steps 1-8 below) in order; each step may end the
    /// reconcile with a requeue, which a split would have to return and re-check.
    pub async fn reconcile_node(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let nodes = self.nodes();
        let Some(node) = self.current(&nodes, name).await? else { return Ok(None) };
        if node.metadata.deletion_timestamp.is_none() || !node.finalizers().iter().any(|f| f == finalizers::TERMINATION)
        {
            return Ok(None);
        }
        let now = self.ctx.clock.now();
        let provider_id = node_provider_id(&node).map(str::to_owned);

        // 1. Its NodeClaim goes too.
        let mut claim = None;
        if let Some(pid) = &provider_id {
            for c in self.claims_with_provider_id(pid).await? {
                if c.metadata.deletion_timestamp.is_none() {
                    delete_ignoring_missing(&self.claims(), &c.name_any()).await?;
                }
                if claim.is_none() {
                    claim = self.claims().get_opt(&c.name_any()).await?;
                }
            }
        }

        // 2. Instance already gone and node not Ready: nothing to drain.
        if !node_is_ready(&node) {
            let gone = match &provider_id {
                Some(pid) => match self.ctx.cloud.get(pid).await {
                    Ok(_) => false,
                    Err(e) if e.is_not_found() => true,
                    Err(e) => return Err(e.into()),
                },
                None => true,
            };
            if gone {
                return self.finish(&node, now).await;
            }
        }

        // 3./4. Taint and label.
        let node = match tainted(&node) {
            Some(changed) => {
                let stored = nodes.replace(name, &PostParams::default(), &changed).await?;
                tracing::info!(Node = %name, "tainted node");
                stored
            }
            None => node,
        };

        // 5. Drain.
        let pods: Vec<CompactPod> = Api::<CompactPod>::all(self.ctx.client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await?
            .items;
        let deadline = claim.as_ref().and_then(|c| claim_deadline(c, name, &pods, now));
        let plan = drain_plan(&pods, deadline.as_ref(), now);
        if let Some(requeue) = self.drain(&node, claim.as_ref(), &plan, now).await? {
            return Ok(Some(requeue));
        }

        // 6. Volumes.
        let deadline_passed = deadline.as_ref().is_some_and(|d| d.deadline_passed);
        let attached = self.blocking_attachments(name, &pods, now).await?;
        if let Some(c) = &claim {
            let api = self.claims();
            let c = api.get_opt(&c.name_any()).await?.unwrap_or_else(|| c.clone());
            if !attached.is_empty() && !deadline_passed {
                ensure_claim_condition(
                    &api,
                    &c,
                    conditions::VOLUMES_DETACHED,
                    ConditionStatus::Unknown,
                    conditions::reasons::AWAITING_VOLUME_DETACHMENT,
                    "Awaiting deletion of bound VolumeAttachments",
                    now,
                )
                .await?;
            } else if !attached.is_empty() {
                ensure_claim_condition(
                    &api,
                    &c,
                    conditions::VOLUMES_DETACHED,
                    ConditionStatus::False,
                    conditions::reasons::TERMINATION_GRACE_PERIOD_ELAPSED,
                    "TerminationGracePeriodElapsed",
                    now,
                )
                .await?;
            } else {
                ensure_claim_condition(
                    &api,
                    &c,
                    conditions::VOLUMES_DETACHED,
                    ConditionStatus::True,
                    "VolumesDetached",
                    "",
                    now,
                )
                .await?;
            }
        }
        if !attached.is_empty() && !deadline_passed {
            self.publish(
                Event::normal(
                    &node,
                    reasons::AWAITING_VOLUME_DETACHMENT,
                    format!("Awaiting deletion of bound VolumeAttachments ({})", attached.join(", ")),
                )
                .with_dedupe_values([name.to_string()]),
            );
            return Ok(Some(DRAIN_REQUEUE));
        }

        // 7. The instance.
        if let Some(pid) = &provider_id {
            let target = claim.clone().unwrap_or_else(|| claim_for_instance(name, pid));
            let gone = match self.ctx.cloud.delete(&target).await {
                Ok(()) => false,
                Err(e) if e.is_not_found() => true,
                Err(e) => return Err(e.into()),
            };
            // Set on the first ask, gone or not (as upstream): the NodeClaim's finalization times the instance's
            // termination from it.
            if let Some(c) = &claim {
                let api = self.claims();
                if let Some(c) = api.get_opt(&c.name_any()).await? {
                    ensure_claim_condition(
                        &api,
                        &c,
                        conditions::INSTANCE_TERMINATING,
                        ConditionStatus::True,
                        "InstanceTerminating",
                        "",
                        now,
                    )
                    .await?;
                }
            }
            if !gone {
                return Ok(Some(INSTANCE_REQUEUE));
            }
        }

        // 8. The finalizer.
        self.finish(&node, now).await
    }

    /// Removes the Node's finalizer and records the metrics.
    async fn finish(&self, node: &Node, now: DateTime<Utc>) -> Result<Requeue, ReconcileError> {
        remove_finalizer(&self.nodes(), node, finalizers::TERMINATION).await?;
        let pool = label(node, labels::NODE_POOL);
        self.ctx.metrics.nodes_terminated(pool, label(node, labels::ZONE)).inc();
        if let Some(deleted) = node.metadata.deletion_timestamp.as_ref().and_then(from_k8s) {
            self.ctx.metrics.nodes_termination_duration_seconds(pool).observe(seconds_between(deleted, now));
        }
        if let Some(created) = node.metadata.creation_timestamp.as_ref().and_then(from_k8s) {
            self.ctx.metrics.nodes_lifetime_duration_seconds(pool).observe(seconds_between(created, now));
        }
        tracing::info!(Node = %node.name_any(), "deleted node");
        Ok(None)
    }

    /// One drain pass; `Some(requeue)` while the node is not drained.
    async fn drain(
        &self,
        node: &Node,
        claim: Option<&NodeClaim>,
        plan: &DrainPlan,
        now: DateTime<Utc>,
    ) -> Result<Option<Duration>, ReconcileError> {
        let name = node.name_any();
        let reason = claim
            .and_then(|c| c.conditions().condition(conditions::DISRUPTION_REASON).map(|c| c.reason.clone()))
            .unwrap_or_default();
        for (pod, grace) in &plan.force_delete {
            self.force_delete(pod, *grace, &reason).await?;
        }
        for pod in &plan.evict {
            self.evict(node, pod, &reason, now).await?;
        }
        let claims = self.claims();
        let fresh = match claim {
            Some(c) => claims.get_opt(&c.name_any()).await?,
            None => None,
        };
        if plan.waiting > 0 {
            self.publish(
                Event::warning(
                    node,
                    reasons::FAILED_DRAINING,
                    format!("Failed to drain node, {} pods are waiting to be evicted", plan.waiting),
                )
                .with_dedupe_values([name.clone()]),
            );
            if let Some(c) = &fresh {
                ensure_claim_condition(
                    &claims,
                    c,
                    conditions::DRAINED,
                    ConditionStatus::Unknown,
                    conditions::reasons::DRAINING,
                    "Draining",
                    now,
                )
                .await?;
            }
            return Ok(Some(DRAIN_REQUEUE));
        }
        let Some(c) = fresh else { return Ok(None) };
        match c.conditions().condition(conditions::DRAINED) {
            Some(d) if d.status == ConditionStatus::True => Ok(None),
            Some(d) if d.status == ConditionStatus::Unknown => {
                let since = parse_rfc3339(&d.last_transition_time).unwrap_or(now);
                let settle = chrono::Duration::from_std(DRAIN_SETTLE).unwrap_or_default();
                if now < since + settle {
                    return Ok(Some((since + settle - now).to_std().unwrap_or(DRAIN_REQUEUE)));
                }
                ensure_claim_condition(&claims, &c, conditions::DRAINED, ConditionStatus::True, "Drained", "", now)
                    .await?;
                self.ctx.metrics.nodes_drained(label(node, labels::NODE_POOL)).inc();
                Ok(None)
            }
            _ => {
                // Never seen draining: start the settle window now.
                ensure_claim_condition(
                    &claims,
                    &c,
                    conditions::DRAINED,
                    ConditionStatus::Unknown,
                    conditions::reasons::DRAINING,
                    "Draining",
                    now,
                )
                .await?;
                Ok(Some(DRAIN_SETTLE))
            }
        }
    }

    /// Deletes a pod that would not finish before the deadline (no PDB, no do-not-disrupt check).
    async fn force_delete(&self, pod: &CompactPod, grace: i64, reason: &str) -> Result<(), ReconcileError> {
        let api: Api<Pod> =
            Api::namespaced(self.ctx.client.clone(), pod.metadata.namespace.as_deref().unwrap_or("default"));
        let dp = DeleteParams {
            grace_period_seconds: Some(u32::try_from(grace.max(1)).unwrap_or(u32::MAX)),
            preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(&pod.name_any(), &dp).await {
            Ok(_) => {
                self.ctx.metrics.pods_drained(reason).inc();
                tracing::info!(Pod = %pod_key(pod), grace_seconds = grace, "deleted pod: terminationGracePeriod");
                Ok(())
            }
            Err(e) if is_not_found(&e) || matches!(&e, kube::Error::Api(s) if s.code == 409) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Evicts one pod through the Eviction API (PDBs decide; a refusal waits for the next pass).
    async fn evict(
        &self,
        node: &Node,
        pod: &CompactPod,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<(), ReconcileError> {
        if pod.do_not_disrupt(now) != DoNotDisrupt::No {
            return Ok(());
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let result = evict_uid(&self.ctx.client, ns, &pod.name_any(), pod.metadata.uid.as_deref()).await;
        let code = match &result {
            Ok(o) => o.code().to_string(),
            Err(e) => e.code().map(|c| c.to_string()).unwrap_or_default(),
        };
        self.ctx.metrics.pods_eviction_requests(&code).inc();
        match result? {
            EvictionOutcome::Evicted => {
                self.ctx.metrics.pods_drained(reason).inc();
                let message =
                    if reason.is_empty() { "Evicted pod".to_string() } else { format!("Evicted pod: {reason}") };
                self.publish(Event::normal(pod, reasons::EVICTED, message));
            }
            EvictionOutcome::Blocked { message } => {
                self.publish(
                    Event::warning(
                        node,
                        reasons::FAILED_DRAINING,
                        format!("Failed to drain node, evicting pod {} violates a PDB: {message}", pod_key(pod)),
                    )
                    .with_dedupe_values([node.name_any(), pod_key(pod)]),
                );
            }
            EvictionOutcome::Gone => {}
        }
        Ok(())
    }

    /// Names of the node's VolumeAttachments the termination waits for: those whose PersistentVolume is not used
    /// by a pod the drain leaves alone.
    async fn blocking_attachments(
        &self,
        node: &str,
        pods: &[CompactPod],
        now: DateTime<Utc>,
    ) -> Result<Vec<String>, kube::Error> {
        let mut attachments: Vec<VolumeAttachment> =
            Api::<VolumeAttachment>::all(self.ctx.client.clone()).list(&ListParams::default()).await?.items;
        attachments.retain(|va| va.spec.node_name == node);
        if attachments.is_empty() {
            return Ok(Vec::new());
        }
        let mut ignored_pvs = BTreeSet::new();
        for pod in pods.iter().filter(|p| tolerates_disrupted_taint(p) || is_static(p) || !waits_for(p, now)) {
            if pod.is_terminal() {
                continue;
            }
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(self.ctx.client.clone(), ns);
            let claims = pod.spec.volumes.iter().flatten();
            for claim in claims.filter_map(|v| v.persistent_volume_claim.as_ref()) {
                if let Some(pvc) = pvcs.get_opt(&claim.claim_name).await?
                    && let Some(pv) = pvc.spec.and_then(|s| s.volume_name)
                {
                    ignored_pvs.insert(pv);
                }
            }
        }
        let mut names: Vec<String> = attachments
            .iter()
            .filter(|va| va.spec.source.persistent_volume_name.as_ref().is_none_or(|pv| !ignored_pvs.contains(pv)))
            .map(|va| va.name_any())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Runs the Node and NodeClaim reconcilers on kube-runtime until `shutdown` is cancelled, following the
    /// Nodes and NodeClaims of `state` (its watches: [`ClusterState::controller_source`]).
    pub async fn run(self: Arc<Self>, state: ClusterState, shutdown: CancellationToken) {
        // One queue (the controller's series) for both loops: its keys name the kind.
        let queue = ControllerQueue::new(crate::kube_util::ErrorPolicyContext::reconciles(&*self, 0));
        let (nodes, node_events) = state.controller_source::<Node>();
        let node_controller = Controller::for_shared_stream(queue.objects(node_events), nodes)
            .graceful_shutdown_on(shutdown.clone().cancelled_owned());
        let node_loop = queue.clone().run(
            node_controller,
            |node: Arc<Node>, ctx: Arc<Self>| async move {
                if node.metadata.deletion_timestamp.is_none() {
                    return Ok(Action::await_change());
                }
                Ok(to_action(ctx.reconcile_node(&node.name_any()).await?))
            },
            error_policy,
            self.clone(),
        );
        let (claims, claim_events) = state.controller_source::<NodeClaim>();
        let (_, owned_node_events) = state.controller_source::<Node>();
        // A Node's change queues the NodeClaims owning it (what `owns_shared_stream` maps, counted).
        let claim_controller = Controller::for_shared_stream(queue.objects(claim_events), claims)
            .watches_shared_stream(owned_node_events, queue.owners::<Node, NodeClaim>())
            .graceful_shutdown_on(shutdown.cancelled_owned());
        let claim_loop = queue.run(
            claim_controller,
            |claim: Arc<NodeClaim>, ctx: Arc<Self>| async move {
                if claim.metadata.deletion_timestamp.is_none() {
                    return Ok(Action::await_change());
                }
                Ok(to_action(ctx.reconcile_node_claim(&claim.name_any()).await?))
            },
            error_policy,
            self.clone(),
        );
        futures::join!(node_loop, claim_loop);
    }
}

/// A [`Requeue`] as a kube-runtime action.
pub(crate) fn to_action(requeue: Requeue) -> Action {
    match requeue {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    }
}

/// Retry after an error: soon after a write conflict (debug log, counted in
/// `karpenter_kube_write_conflicts_total` under the object's kind), else a warning and a retry in 5 s.
pub(crate) fn error_policy<K, C>(obj: Arc<K>, error: &ReconcileError, ctx: Arc<C>) -> Action
where
    K: Resource<DynamicType = ()>,
    C: ErrorPolicyContext,
{
    if error.is_conflict() {
        crate::kube_util::record_write_conflict(
            ctx.metrics(),
            ctx.controller_name(),
            &K::kind(&()),
            &obj.name_any(),
            error,
        );
    } else {
        tracing::warn!(controller = ctx.controller_name(), error = %error, "reconcile failed");
    }
    Action::requeue(error.retry_after(Duration::from_secs(5)))
}

/// The termination controller's name in logs and metrics.
pub const CONTROLLER: &str = "node.termination";

impl ErrorPolicyContext for Termination {
    fn controller_name(&self) -> &'static str {
        CONTROLLER
    }
    fn metrics(&self) -> Option<&Metrics> {
        Some(&self.ctx.metrics)
    }
}

#[cfg(test)]
mod tests;
