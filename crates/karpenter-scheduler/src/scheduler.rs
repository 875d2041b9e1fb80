//! The solve loop: queue order, placement order, NodeClaim.CanAdd, relaxation,
//! finalisation.

mod add;
#[cfg(feature = "dra-cel")]
mod device_cel;
#[cfg(not(feature = "dra-cel"))]
mod device_cel_unsupported;
#[cfg(not(feature = "dra-cel"))]
use device_cel_unsupported as device_cel;
mod device_search;
pub(crate) mod dra;
// Most DRA scenarios select devices with CEL; without `dra-cel` the other module checks the refusal instead.
#[cfg(all(test, feature = "dra-cel"))]
mod dra_tests;
#[cfg(all(test, not(feature = "dra-cel")))]
mod dra_without_cel_tests;
#[cfg(test)]
mod offering_override_tests;
mod parallel;
pub(crate) mod pods;
mod repack;
mod reservations;
mod room;
pub(crate) mod templates;
mod topology;
#[cfg(test)]
mod volume_limit_tests;
pub(crate) mod volumes;

use std::borrow::Cow;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::scheduling::SIMULATION_ONLY_KEYS;
use karpenter_api::{NodePool, ProviderLabels, labels};
use karpenter_requirements::{
    HostPortUsage, InstanceType, MinValuesPolicy, NoKeys, Offering, OfferingsExt, PreferencePolicy, Requirement,
    Requirements, ResourceList, satisfies_min_values,
};

use dra::{DraIndex, DraPass};
pub use pods::{DRA_IGNORED, TOPOLOGY_NOT_SUPPORTED};
use pods::{PodData, Relaxation, pods_data};
use reservations::{Held, Ledger};
use room::{NoRoom, RoomClasses};
use rustc_hash::FxHashMap;
use templates::{ClusterBudget, ExistingNode, Template, daemons, existing_nodes};
use topology::{Prepared, Topology};
use volumes::{
    ClaimVolumes, VolumeIndex, attach_counts, attach_limit_error, first_compatible, incompatible_alternatives,
    within_attach_limits,
};

use crate::decision::{
    Decisions, ExistingNodePlacement, InstanceTypeOption, NodeClaimPlan, NodePoolRejection, PodKey, RejectionKind,
    UnschedulablePod, UnschedulableReason,
};
use crate::default_spread::{DefaultSpread, SchedulerConfig};
use crate::snapshot::ClusterSnapshot;

/// Upstream's cap on instance-type options per NodeClaim.
pub const MAX_INSTANCE_TYPES: usize = 600;

/// What a pod may do to a NodeClaim's capacity reservations (the `reservations` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReservedOfferingMode {
    /// Provisioning: a pod may not join a NodeClaim if the claim would lose every reservation it holds (default).
    #[default]
    Strict,
    /// Other simulations (disruption): a claim may let its reservations go.
    Fallback,
}

/// Scheduler options. The crate never reads the clock: `now` is informational and the deadline is a budget
/// of pod attempts or a caller-supplied check ([`schedule_until`]).
#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    /// `--min-values-policy`.
    pub min_values_policy: MinValuesPolicy,
    /// `PREFERENCE_POLICY`.
    pub preference_policy: PreferencePolicy,
    /// Reserved-offering mode.
    pub reserved_offering_mode: ReservedOfferingMode,
    /// The time of the pass (reserved for time-dependent rules; unused by this build).
    pub now: Option<Time>,
    /// Stop after this many pod attempts (the result then says `timedOut`).
    pub max_pod_attempts: Option<usize>,
    /// Keep upstream's packing exactly: skip the cost post-pass that re-packs the pods of interchangeable
    /// new NodeClaims when that is strictly cheaper (see the `repack` module docs: only pods without
    /// topology, host ports or volumes move, never across NodePools or requirements; NodePools with limits,
    /// minValues and timed-out passes are left alone). Default `false`: the post-pass runs.
    pub upstream_packing: bool,
    /// Cluster-wide limits (`CLUSTER_LIMITS`; empty: none): like a NodePool's `spec.limits` (resources and
    /// `nodes`), but over the nodes and in-flight NodeClaims of every NodePool, and every new claim of the pass,
    /// whichever NodePool it comes from, draws on the same budget.
    pub cluster_limits: ResourceList,
    /// The scheduler config (`SCHEDULER_CONFIG`): default topology spread constraints for pods without their
    /// own (see [`crate::default_spread`]). Default: none.
    pub scheduler_config: SchedulerConfig,
    /// `IGNORE_DRA_REQUESTS` (default `true`, as upstream): pods with DRA resource claims get [`DRA_IGNORED`] and
    /// DaemonSets with claims are left out of overhead. `false` simulates device allocation (the `dra` module).
    pub ignore_dra_requests: bool,
    /// Threads that check existing nodes for a pod (upstream's `ceil(CPU_REQUESTS / 1000)`; 0 and 1 mean the
    /// calling thread alone). Decisions do not depend on it: the earliest node that takes the pod wins, as with
    /// one thread (the `parallel` module). Threads are used only when at least [`PARALLEL_MIN_EXISTING`] nodes
    /// are left to check.
    pub parallelism: usize,
}

/// Existing nodes left to check below which a pod's scan stays on one thread: starting threads costs tens of
/// microseconds, more than checking a few hundred nodes.
pub const PARALLEL_MIN_EXISTING: usize = 256;

impl Default for SchedulerOptions {
    fn default() -> Self {
        SchedulerOptions {
            min_values_policy: MinValuesPolicy::default(),
            preference_policy: PreferencePolicy::default(),
            reserved_offering_mode: ReservedOfferingMode::default(),
            now: None,
            max_pod_attempts: None,
            upstream_packing: false,
            cluster_limits: ResourceList::new(),
            scheduler_config: SchedulerConfig::default(),
            ignore_dra_requests: true,
            parallelism: 1,
        }
    }
}

/// A NodePool with its instance types (data, never a provider).
#[derive(Debug, Clone, Copy)]
pub struct PoolInput<'a> {
    /// The NodePool.
    pub node_pool: &'a NodePool,
    /// Every instance type the provider offers for it (unavailable offerings marked `available: false`).
    pub instance_types: &'a [InstanceType],
}

/// One scheduling pass. Deterministic: the same input gives the same output.
pub fn schedule(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    options: &SchedulerOptions,
) -> Decisions {
    schedule_until(snapshot, pools, provider, options, &mut || false)
}

/// [`schedule`] with a deadline: `should_stop` is called before each pod attempt; once it returns true the
/// pass stops and the result says `timedOut`.
pub fn schedule_until(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    options: &SchedulerOptions,
    should_stop: &mut dyn FnMut() -> bool,
) -> Decisions {
    schedule_watching(snapshot, pools, provider, options, &mut |_| should_stop())
}

/// [`schedule_until`] whose `should_stop` also learns, before each pod attempt, how many pods are still queued
/// (the one about to be tried included; a pod that failed and was relaxed is queued again): what a caller needs
/// to report the simulation's progress (upstream's `karpenter_scheduler_queue_depth`).
pub fn schedule_watching(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    options: &SchedulerOptions,
    should_stop: &mut dyn FnMut(usize) -> bool,
) -> Decisions {
    Solver::new(snapshot, pools, provider, options).solve(should_stop)
}

struct NewClaim {
    template: usize,
    hostname: String,
    requirements: Requirements,
    its: Vec<u32>,
    requests: ResourceList,
    pods: Vec<usize>,
    ports: HostPortUsage,
    /// The volumes its pods attach (instance types' volume attachment limits).
    volumes: ClaimVolumes,
    min_values_relaxed: bool,
    /// The capacity reservations it holds (see the `reservations` module).
    held: Held,
    /// Its index in the pass's claims when opened (DRA records where claims are allocated by it).
    id: usize,
    /// The DRA claims allocated on it (indices of the pass's resolved claims).
    dra_claims: Vec<u32>,
}

struct Candidate {
    requirements: Requirements,
    its: Vec<u32>,
    requests: ResourceList,
    min_values_relaxed: bool,
    /// DRA claims the pod allocates on the claim.
    dra_claims: Vec<u32>,
    /// The shared published devices the claim holds with the pod (`None`: unchanged).
    dra_devices: Option<Vec<u32>>,
}

pub(crate) struct Solver<'a> {
    provider: &'a ProviderLabels,
    options: &'a SchedulerOptions,
    pods: Vec<PodData<'a>>,
    templates: Vec<Template<'a>>,
    existing: Vec<ExistingNode>,
    claims: Vec<NewClaim>,
    /// Indices of `claims` sorted by (number of pods, index): the order in-flight claims are tried in.
    claim_order: Vec<usize>,
    topology: Topology,
    errors: Vec<Option<UnschedulableReason>>,
    placed: Vec<bool>,
    any_prefer_no_schedule: bool,
    no_templates_reason: Option<UnschedulableReason>,
    /// Per (template, claim requirements without the hostname): whether each of the template's instance
    /// types intersects the requirements and has a compatible available offering (0 unknown, 1 yes, 2 no).
    /// Claims differ mostly by hostname, which neither instance types nor offerings carry (checked per
    /// template: `Template::hostname_free`), so a handful of entries answer every candidate check.
    compat_cache: RefCell<HashMap<(usize, Requirements), Vec<u8>>>,
    /// [`Topology::affinity_keys`], and per key the ids given to domains seen on claims.
    affinity_keys: Vec<String>,
    domain_ids: Vec<HashMap<String, u32>>,
    /// Per claim, per affinity key: the id of the claim's one domain, [`DOMAIN_OPEN`] or
    /// [`DOMAIN_MULTI`]; lets the in-flight scan apply [`Topology::affinity_rejects`] without key lookups.
    claim_domains: Vec<Vec<u32>>,
    /// Per class of interchangeable pods (see [`Solver::existing_class`]) and relaxation: how many of the first
    /// existing nodes are known not to take such a pod. During a pass nodes only fill up, so a node that turned
    /// a pod of the class down turns every later one down too; with thousands of full nodes and tens of
    /// thousands of pending replicas, scanning them all again for every replica was most of a pass.
    existing_unfit: FxHashMap<(u64, Relaxation), usize>,
    /// Each pod's class of equal requests, and per class the in-flight claims known to have no room for it:
    /// the in-flight scan skips those (exact: see the `room` module docs).
    room_classes: RoomClasses,
    no_room: NoRoom,
    /// Stop once this many new NodeClaims are open (the result then says `timedOut`); see
    /// [`crate::simulation::Simulator::count_new_claims`].
    claim_cap: Option<usize>,
    /// What is left of the cluster-wide limits, `None` without them.
    cluster: Option<ClusterBudget>,
    /// The capacity reservations the pass's claims hold.
    reservations: Ledger,
    /// DRA allocation state, `None` when DRA is ignored or no pod has claims.
    dra: Option<DraPass<'a>>,
}

fn add_volumes(volumes: &mut ClaimVolumes, claims: &[(String, String)]) {
    for (driver, claim) in claims {
        volumes.entry(driver.clone()).or_default().insert(claim.clone());
    }
}

/// The claim does not constrain the key to listed values (absent or a complement): never rejected by it.
const DOMAIN_OPEN: u32 = u32::MAX;
/// The claim lists zero or several values for the key: checked with [`Topology::affinity_rejects`].
const DOMAIN_MULTI: u32 = u32::MAX - 1;

/// Solves with fewer pods than this do not remember which existing nodes turned a class of pods down
/// ([`Solver::existing_unfit`]).
const EXISTING_MEMORY_MIN_PODS: usize = 256;

/// Entries kept in [`Solver::compat_cache`] before it is cleared (a bound on memory for inputs whose claims
/// all have different requirements).
const COMPAT_CACHE_MAX: usize = 4096;

/// The per-pass state that does not depend on the pods being placed: templates and existing nodes. Built once
/// by [`Solver::new`]; [`crate::simulation`] builds it once per disruption pass and hands clones of it (with
/// nodes left out) to many solves. State that depends on the pods to place belongs in [`Solver::from_base`].
#[derive(Debug, Clone)]
pub(crate) struct Base<'a> {
    pub snapshot: &'a ClusterSnapshot,
    pub templates: Vec<Template<'a>>,
    pub existing: Vec<ExistingNode>,
    pub any_prefer_no_schedule: bool,
    pub no_templates_reason: Option<UnschedulableReason>,
    pub cluster: Option<ClusterBudget>,
    /// The pass's DRA objects and devices, `None` when DRA is ignored.
    pub dra: Option<Arc<DraIndex<'a>>>,
    /// The capacity reservations the templates offer, before any claim holds one (computed once: a disruption
    /// pass runs many simulations over one base).
    pub reservations: Ledger,
}

impl<'a> Base<'a> {
    pub(crate) fn new(
        snapshot: &'a ClusterSnapshot,
        pools: &[PoolInput<'a>],
        provider: &'a ProviderLabels,
        daemons: &[templates::Daemon],
        options: &SchedulerOptions,
    ) -> Self {
        let cluster_limits = &options.cluster_limits;
        let mut dynamic: Vec<&PoolInput<'a>> = pools.iter().filter(|p| !p.node_pool.is_static()).collect();
        // Weight descending, ties by name descending (upstream).
        dynamic.sort_by(|a, b| {
            b.node_pool
                .weight()
                .cmp(&a.node_pool.weight())
                .then_with(|| b.node_pool.metadata.name.cmp(&a.node_pool.metadata.name))
        });
        let cluster = ClusterBudget::new(cluster_limits, snapshot);
        let mut templates: Vec<Template<'a>> =
            dynamic.iter().map(|p| Template::new(p.node_pool, p.instance_types, snapshot, daemons, provider)).collect();
        if let Some(c) = &cluster {
            for t in &mut templates {
                t.retain_within_cluster(c);
            }
        }
        let no_templates_reason =
            dynamic.is_empty().then_some(UnschedulableReason::NoNodePool { all_static: !pools.is_empty() });
        let any_prefer_no_schedule = templates.iter().any(|t| t.taints.iter().any(|t| t.effect == "PreferNoSchedule"));
        let volume_index = VolumeIndex::new(snapshot);
        let dra = (!options.ignore_dra_requests)
            .then(|| Arc::new(DraIndex::new(&snapshot.dra, pools.iter().flat_map(|p| p.instance_types.iter()))));
        Base {
            snapshot,
            existing: existing_nodes(snapshot, daemons, &volume_index),
            reservations: Ledger::new(&templates),
            templates,
            any_prefer_no_schedule,
            no_templates_reason,
            cluster,
            dra,
        }
    }
}

impl<'a> Solver<'a> {
    fn new(
        snapshot: &'a ClusterSnapshot,
        pools: &[PoolInput<'a>],
        provider: &'a ProviderLabels,
        options: &'a SchedulerOptions,
    ) -> Self {
        let daemons = daemons(snapshot, !options.ignore_dra_requests);
        let volume_index = VolumeIndex::new(snapshot);
        let mut spread = DefaultSpread::new(&options.scheduler_config, snapshot);
        let pods: Vec<PodData<'a>> =
            pods_data(snapshot.pending_pods.iter().map(|p| &**p), provider, &volume_index, &mut spread);
        let base = Base::new(snapshot, pools, provider, &daemons, options);
        Solver::from_base(base, pods, provider, options)
    }

    /// A solver over prepared state and the pods to place.
    pub(crate) fn from_base(
        base: Base<'a>,
        mut pods: Vec<PodData<'a>>,
        provider: &'a ProviderLabels,
        options: &'a SchedulerOptions,
    ) -> Self {
        let n = pods.len();
        let dra = dra_pass(base.dra.as_ref(), &mut pods);
        let topology =
            Topology::new(base.snapshot, &mut pods, &base.templates, &base.existing, options.preference_policy);
        let affinity_keys = topology.affinity_keys();
        let room_classes = RoomClasses::new(pods.iter().map(|p| &p.requests));
        Solver {
            reservations: base.reservations,
            no_room: NoRoom::new(room_classes.len()),
            room_classes,
            domain_ids: vec![HashMap::new(); affinity_keys.len()],
            affinity_keys,
            claim_domains: Vec::new(),
            topology,
            claim_order: Vec::new(),
            provider,
            options,
            existing: base.existing,
            templates: base.templates,
            claims: Vec::new(),
            errors: vec![None; n],
            placed: vec![false; n],
            any_prefer_no_schedule: base.any_prefer_no_schedule,
            no_templates_reason: base.no_templates_reason,
            compat_cache: RefCell::new(HashMap::new()),
            existing_unfit: FxHashMap::default(),
            claim_cap: None,
            cluster: base.cluster,
            dra,
            pods,
        }
    }

    /// The class of pod `i` for [`Solver::existing_unfit`], or `None` when an existing node's answer for it can
    /// change during the pass. Pods of a class share one spec (the same `Arc`: the cluster state shares equal
    /// specs), namespace and labels, so every existing-node check gives them the same answer; pods with a
    /// topology spread or pod (anti-)affinity of their own are left out, because pods placed elsewhere can turn
    /// a node's answer for them from no to yes, and so are pods with volume claims (another pod attaching the
    /// same claim to a node frees them of its attachment limit there).
    /// Computed once per pod and kept with its facts: hashing the labels on every placement attempt was a
    /// quarter of a solve with many replicas.
    fn existing_class(&self, i: usize) -> Option<u64> {
        let data = &self.pods[i];
        *data.existing_class.get_or_init(|| Self::compute_existing_class(data))
    }

    /// The first existing node from `from` on that takes pod `i` under `relax` by everything but devices
    /// (checked by the caller, on the node found). On up to `options.parallelism` threads, always with the
    /// answer one thread gives: the `parallel` module.
    fn first_existing_fit(
        &self,
        i: usize,
        relax: &Relaxation,
        (reqs, strict, prepared): (&Requirements, &Requirements, &Prepared),
        from: usize,
    ) -> Option<usize> {
        // Only the fields the check reads are shared with the workers (the solver's caches are not `Sync`).
        let (pod, existing, topology) = (&self.pods[i], &self.existing, &self.topology);
        let fits = |n: usize| {
            let node = &existing[n];
            // Every check is pure, so their order changes no answer; the cheapest and most selective (room, on
            // nodes that fill up) goes first.
            pod.requests.fits(&node.available)
                && pod.tolerates(relax, node.taints.iter()).is_ok()
                && node.volumes.check(&pod.volumes.claims).is_ok()
                && node.ports.conflicts(&pod.host_ports).is_ok()
                && node.requirements.compatible_ok(reqs, &NoKeys)
                && first_compatible(&pod.volumes.alternatives, &node.requirements, &NoKeys).is_ok()
                // The node must carry the domain the topology narrows it to: a node without the topology key's
                // label is in no domain, so a pod spreading or (anti-)affine on that key cannot go there (as
                // upstream's compatibility check of the node with its topology requirements).
                && match topology.add_requirements(i, relax, strict, &node.requirements, prepared) {
                    Ok(None) => true,
                    Ok(Some(narrowed)) => node.requirements.compatible_ok(&narrowed, &NoKeys),
                    Err(_) => false,
                }
        };
        parallel::first_match(from..existing.len(), self.options.parallelism, PARALLEL_MIN_EXISTING, fits)
    }

    fn compute_existing_class(data: &PodData<'_>) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let pod = data.pod;
        let spec = &*pod.spec;
        let affinity = spec.affinity.as_ref();
        if !data.volumes.claims.is_empty()
            || has_resource_claims(pod)
            || !data.spread_constraints().is_empty()
            || affinity.is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
        {
            return None;
        }
        let mut hasher = rustc_hash::FxHasher::default();
        std::sync::Arc::as_ptr(&pod.spec).hash(&mut hasher);
        pod.metadata.namespace.hash(&mut hasher);
        pod.metadata.labels.hash(&mut hasher);
        Some(hasher.finish())
    }

    /// Runs the solve loop (for [`crate::simulation`]), stopping once `claim_cap` new NodeClaims are open.
    pub(crate) fn run(mut self, should_stop: &mut dyn FnMut() -> bool, claim_cap: Option<usize>) -> Decisions {
        self.claim_cap = claim_cap;
        self.solve(&mut |_| should_stop())
    }

    fn solve(mut self, should_stop: &mut dyn FnMut(usize) -> bool) -> Decisions {
        let mut order: Vec<usize> = (0..self.pods.len()).filter(|&i| self.pods[i].error.is_none()).collect();
        for (i, p) in self.pods.iter().enumerate() {
            if let Some(e) = &p.error {
                self.errors[i] = Some(e.clone());
            }
        }
        {
            // CPU desc, memory desc, creation time, uid; resource keys gathered once (the comparator runs
            // n·log n times), the index last so the unstable sort gives the stable order. Creation is compared
            // as a time, not as the formatted string (equal empty strings cost a libc call per comparison,
            // 15 ms for 10k pods in profiles).
            let pods = &self.pods;
            let mut keyed: Vec<_> = order
                .iter()
                .map(|&i| {
                    let pod = &pods[i];
                    let created = pod.pod.metadata.creation_timestamp.as_ref().map(|t| &t.0);
                    (Reverse(pod.requests.cpu()), Reverse(pod.requests.memory()), created, pod.uid(), i)
                })
                .collect();
            keyed.sort_unstable();
            order = keyed.into_iter().map(|k| k.4).collect();
        }
        let mut queue: VecDeque<usize> = order.into();
        let mut pushed_at: Vec<Option<usize>> = vec![None; self.pods.len()];
        let mut attempts = 0usize;
        let mut timed_out = false;
        while let Some(i) = queue.pop_front() {
            if pushed_at[i] == Some(queue.len() + 1) {
                // A full cycle without progress.
                queue.push_front(i);
                break;
            }
            if should_stop(queue.len() + 1) || self.options.max_pod_attempts.is_some_and(|m| attempts >= m) {
                queue.push_front(i);
                timed_out = true;
                break;
            }
            attempts += 1;
            match self.try_schedule(i) {
                Ok(()) => {
                    self.errors[i] = None;
                    self.placed[i] = true;
                    if self.claim_cap.is_some_and(|cap| self.claims.len() >= cap) {
                        timed_out = true;
                        break;
                    }
                }
                Err(e) => {
                    self.errors[i] = Some(e);
                    queue.push_back(i);
                    pushed_at[i] = Some(queue.len());
                }
            }
        }
        if timed_out {
            for &i in &queue {
                if self.errors[i].is_none() {
                    self.errors[i] = Some(UnschedulableReason::Timeout);
                }
            }
        }
        self.finish(timed_out)
    }

    fn try_schedule(&mut self, i: usize) -> Result<(), UnschedulableReason> {
        let mut relax = Relaxation::default();
        loop {
            match self.add(i, &relax) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    // Upstream relaxes no preference for a DRA failure: devices do not depend on preferences.
                    if e.rejections().iter().any(|r| r.kind == RejectionKind::Devices) {
                        return Err(e);
                    }
                    let pod = &self.pods[i];
                    if !pod.relax(&mut relax, self.options.preference_policy, self.any_prefer_no_schedule) {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Records claim `c`'s domain per affinity key in `claim_domains` (after its requirements changed).
    fn index_claim_domains(&mut self, c: usize) {
        if self.affinity_keys.is_empty() {
            return;
        }
        let Some(claim) = self.claims.get(c) else { return };
        let mut doms = Vec::with_capacity(self.affinity_keys.len());
        for (k, key) in self.affinity_keys.iter().enumerate() {
            let d = match claim.requirements.get_ref(key) {
                None => DOMAIN_OPEN,
                Some(r) if r.complement() => DOMAIN_OPEN,
                Some(r) if r.values().len() == 1 => match (r.values().first(), self.domain_ids.get_mut(k)) {
                    (Some(v), Some(ids)) => {
                        let next = ids.len() as u32;
                        *ids.entry(v.to_string()).or_insert(next)
                    }
                    _ => DOMAIN_MULTI,
                },
                Some(_) => DOMAIN_MULTI,
            };
            doms.push(d);
        }
        if self.claim_domains.len() <= c {
            self.claim_domains.resize(c + 1, Vec::new());
        }
        if let Some(slot) = self.claim_domains.get_mut(c) {
            *slot = doms;
        }
    }

    /// Moves the claim at `claim_order[o]`, which just gained a pod, to its sorted place.
    fn reorder_claim(&mut self, o: usize) {
        if o >= self.claim_order.len() {
            return;
        }
        let c = self.claim_order.remove(o);
        let key = |x: usize| (self.claims.get(x).map_or(0, |cl| cl.pods.len()), x);
        let k = key(c);
        let at = self.claim_order.partition_point(|&x| key(x) < k);
        self.claim_order.insert(at, c);
    }

    /// Upstream's `NodeClaim.CanAdd` over the instance types `its`.
    #[allow(clippy::too_many_arguments)]
    fn can_add(
        &self,
        template: &Template<'_>,
        claim: &NewClaim,
        i: usize,
        pod: (&Requirements, &Requirements, &Prepared),
        relax: &Relaxation,
        its: &[u32],
    ) -> Result<Candidate, NodePoolRejection> {
        self.can_add_explained(template, claim, i, pod, relax, its, true, &mut false)
            .map_err(|e| e.unwrap_or_else(|| NodePoolRejection::new(&template.name, RejectionKind::Other, "")))
    }

    /// [`Self::can_add`]; without `explain`, the error carries no reason (`None`) instead of the diagnosis
    /// (the in-flight claims loop discards reasons, and diagnosing is its hot path). With `explain` it always
    /// has one. `no_room` is set when the check got as far as resources and none of `its` has room for the
    /// claim's requests plus the pod's (left alone otherwise).
    #[allow(clippy::too_many_arguments)]
    fn can_add_explained(
        &self,
        template: &Template<'_>,
        claim: &NewClaim,
        i: usize,
        (pod_reqs, strict, prepared): (&Requirements, &Requirements, &Prepared),
        relax: &Relaxation,
        its: &[u32],
        explain: bool,
        no_room: &mut bool,
    ) -> Result<Candidate, Option<NodePoolRejection>> {
        let np = &template.name;
        let reject = |kind: RejectionKind, detail: String| explain.then(|| NodePoolRejection::new(np, kind, detail));
        let pod = &self.pods[i];
        pod.tolerates(relax, &template.taints)
            .map_err(|t| reject(RejectionKind::Taints, format!("taint {t} not tolerated")))?;
        if !claim.requirements.compatible_ok(pod_reqs, self.provider) {
            return Err(explain.then(|| {
                let e = claim.requirements.compatible(pod_reqs, self.provider).err();
                let detail = format!("incompatible requirements: {}", e.map(|e| e.to_string()).unwrap_or_default());
                NodePoolRejection::new(np, RejectionKind::Requirements, detail)
            }));
        }
        let changed = !pod_reqs.is_empty();
        // Borrowed while unchanged: cloned only when the pod is added.
        let requirements: Cow<'_, Requirements> = if changed {
            Cow::Owned(claim.requirements.intersection(pod_reqs))
        } else {
            Cow::Borrowed(&claim.requirements)
        };
        if let Err(c) = claim.ports.conflicts(&pod.host_ports) {
            return Err(reject(RejectionKind::HostPorts, c.to_string()));
        }
        let alternatives = &pod.volumes.alternatives;
        if alternatives.is_empty() {
            let attempt = (requirements, changed);
            return self.try_volume_alternative(
                template,
                claim,
                i,
                attempt,
                (strict, prepared),
                relax,
                its,
                explain,
                no_room,
            );
        }
        // Each volume-topology alternative in turn, as upstream does: the one chosen narrows what topology sees,
        // so the first compatible one may be refused (a zone already taken by anti-affinity) where a later one fits.
        let mut last = None;
        for alt in alternatives.iter().filter(|a| requirements.compatible_ok(a, self.provider)) {
            let attempt = (Cow::Owned(requirements.intersection(alt)), true);
            match self.try_volume_alternative(
                template,
                claim,
                i,
                attempt,
                (strict, prepared),
                relax,
                its,
                explain,
                no_room,
            ) {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(e) => Err(e),
            None => Err(reject(RejectionKind::Volumes, incompatible_alternatives(alternatives))),
        }
    }

    /// The rest of [`Self::can_add_explained`] for one volume-topology alternative: `requirements` are the
    /// claim's with the pod's and the alternative's (`changed` when they differ from the claim's).
    #[allow(clippy::too_many_arguments)]
    fn try_volume_alternative(
        &self,
        template: &Template<'_>,
        claim: &NewClaim,
        i: usize,
        (mut requirements, mut changed): (Cow<'_, Requirements>, bool),
        (strict, prepared): (&Requirements, &Prepared),
        relax: &Relaxation,
        its: &[u32],
        explain: bool,
        no_room: &mut bool,
    ) -> Result<Candidate, Option<NodePoolRejection>> {
        let np = &template.name;
        let reject = |kind: RejectionKind, detail: String| explain.then(|| NodePoolRejection::new(np, kind, detail));
        let pod = &self.pods[i];
        if let Some(narrowed) =
            self.topology.add_requirements(i, relax, strict, &requirements, prepared).map_err(|e| {
                explain.then(|| NodePoolRejection::new(np, RejectionKind::Topology, self.topology.explain(&e)))
            })?
        {
            requirements = Cow::Owned(narrowed);
            changed = true;
        }
        let requests = claim.requests.add(&pod.requests);
        let mut survivors = Vec::with_capacity(its.len());
        let mut any_room = false;
        {
            let mut cache = self.compat_cache.borrow_mut();
            let mut mask: Option<&mut Vec<u8>> = None;
            if changed {
                let mut key = requirements.as_ref().clone();
                if template.hostname_free {
                    key.remove(labels::HOSTNAME);
                }
                if cache.len() >= COMPAT_CACHE_MAX {
                    cache.clear();
                }
                mask = Some(cache.entry((claim.template, key)).or_insert_with(|| vec![0; template.its.len()]));
            }
            for &i in its {
                let (Some(it), Some(dports)) = (template.its.get(i as usize), template.daemon_ports.get(i as usize))
                else {
                    continue;
                };
                if !template.has_room(i as usize, &requests) {
                    continue;
                }
                any_room = true;
                if let Some(m) = mask.as_deref_mut()
                    && let Some(state) = m.get_mut(i as usize)
                {
                    if *state == 0 {
                        let ok = it.requirements.intersects_ok(&requirements)
                            && it.offerings.available().any(|o| o.is_compatible(&requirements, self.provider));
                        *state = if ok { 1 } else { 2 };
                    }
                    if *state != 1 {
                        continue;
                    }
                }
                // Checked on every add, not cached: the requests grow, so the group that holds them may change.
                if !template.group_offers(i as usize, &requests, &requirements, self.provider) {
                    continue;
                }
                if !pod.host_ports.is_empty() && dports.conflicts(&pod.host_ports).is_err() {
                    continue;
                }
                survivors.push(i);
            }
        }
        *no_room = !any_room;
        if survivors.is_empty() {
            return Err(explain.then(|| self.diagnose(template, &requirements, &requests, pod, its)));
        }
        // Instance types' volume attachment limits: every option must attach the claim's volumes and the pod's.
        if !pod.volumes.claims.is_empty() {
            let counts = attach_counts(&claim.volumes, &pod.volumes.claims);
            let fits = |i: &u32| template.its.get(*i as usize).is_some_and(|it| within_attach_limits(it, &counts));
            if !survivors.iter().all(fits) {
                let kept: Vec<u32> = survivors.iter().copied().filter(fits).collect();
                if kept.is_empty() {
                    return Err(explain.then(|| {
                        let options: Vec<&InstanceType> =
                            survivors.iter().filter_map(|&i| template.its.get(i as usize).copied()).collect();
                        NodePoolRejection::new(np, RejectionKind::Volumes, attach_limit_error(&options, &counts))
                    }));
                }
                survivors = kept;
            }
        }
        // DRA: keep the instance types whose slice templates hold the claim's resource claims and the pod's.
        let mut dra_claims = Vec::new();
        let mut dra_devices = None;
        if let Some(d) = &self.dra
            && d.has_claims(i)
        {
            let named: Vec<(u32, &InstanceType)> =
                survivors.iter().filter_map(|&k| template.its.get(k as usize).map(|it| (k, *it))).collect();
            let fit = d
                .filter_new(i, claim.id, &claim.dra_claims, &named, &requirements)
                .map_err(|e| reject(RejectionKind::Devices, e))?;
            survivors = fit.its;
            dra_claims = fit.claims;
            dra_devices = fit.devices;
        }
        let mut requirements = requirements.into_owned();
        let min_values_relaxed = self
            .hold_to_min_values(template, &survivors, &mut requirements)
            .map_err(|e| reject(RejectionKind::MinValues, e))?;
        Ok(Candidate { requirements, its: survivors, requests, min_values_relaxed, dra_claims, dra_devices })
    }

    /// Holds the instance types `survivors` to the minValues of `requirements`: under `Strict` a shortfall turns
    /// the claim down (the error); under `BestEffort` each short requirement is lowered to what the types achieve.
    /// Returns whether a requirement was lowered.
    fn hold_to_min_values(
        &self,
        template: &Template<'_>,
        survivors: &[u32],
        requirements: &mut Requirements,
    ) -> Result<bool, String> {
        if !requirements.has_min_values() {
            return Ok(false);
        }
        let list: Vec<&InstanceType> =
            survivors.iter().filter_map(|&i| template.its.get(i as usize).copied()).collect();
        let Err(e) = satisfies_min_values(&list, requirements) else { return Ok(false) };
        match self.options.min_values_policy {
            MinValuesPolicy::Strict => Err(e.to_string()),
            MinValuesPolicy::BestEffort => {
                for (key, achieved) in &e.achieved {
                    if let Some(r) = requirements.remove(key) {
                        let lowered = r.with_min_values(Some(u32::try_from(*achieved).unwrap_or(0)));
                        requirements.add(lowered);
                    }
                }
                Ok(true)
            }
        }
    }

    /// Why no instance type survived: requirements, offerings, resources or host ports.
    fn diagnose(
        &self,
        template: &Template<'_>,
        requirements: &Requirements,
        requests: &ResourceList,
        pod: &PodData<'_>,
        its: &[u32],
    ) -> NodePoolRejection {
        let reject = |kind: RejectionKind, detail: String| NodePoolRejection::new(&template.name, kind, detail);
        let list: Vec<u32> = its.to_vec();
        let matching: Vec<u32> = list
            .iter()
            .copied()
            .filter(|&i| {
                template.its.get(i as usize).is_some_and(|it| it.requirements.intersects(requirements).is_ok())
            })
            .collect();
        if matching.is_empty() {
            return reject(
                RejectionKind::Requirements,
                format!("no instance type matches the requirements {}", describe_reqs(requirements, template)),
            );
        }
        let offered: Vec<u32> = matching
            .iter()
            .copied()
            .filter(|&i| {
                template
                    .its
                    .get(i as usize)
                    .is_some_and(|it| it.offerings.available().any(|o| o.is_compatible(requirements, self.provider)))
            })
            .collect();
        if offered.is_empty() {
            return reject(
                RejectionKind::Offerings,
                format!(
                    "no available offering (zone / capacity type) matches the requirements {}",
                    describe_reqs(requirements, template)
                ),
            );
        }
        // Resources: which requested resources exceed every candidate's allocatable after daemon overhead.
        let mut short = Vec::new();
        for (name, q) in requests.iter() {
            let fits_one = offered.iter().any(|&i| {
                let (Some(it), Some(d)) = (template.its.get(i as usize), template.daemon.get(i as usize)) else {
                    return false;
                };
                match template.groups.get(i as usize).filter(|g| !g.is_empty()) {
                    None => {
                        let need = q.saturating_add(&d.get_or_zero(name));
                        it.allocatable().get(name).is_some_and(|a| need <= *a)
                    }
                    Some(groups) => groups.iter().any(|g| g.room.get(name).is_some_and(|room| q <= room)),
                }
            });
            if !fits_one {
                short.push(format!("{q} {name}"));
            }
        }
        if !short.is_empty() {
            return reject(
                RejectionKind::Resources,
                format!(
                    "no instance type has {} after DaemonSet overhead{}",
                    short.join(", "),
                    if pod.requests.len() < requests.len() || requests != &pod.requests {
                        " (counting pods already on the node)"
                    } else {
                        ""
                    }
                ),
            );
        }
        let fits: Vec<u32> = offered.iter().copied().filter(|&i| template.has_room(i as usize, requests)).collect();
        if fits.is_empty() {
            return reject(
                RejectionKind::Resources,
                format!(
                    "no instance type fits {} together after DaemonSet overhead",
                    requests.iter().map(|(n, q)| format!("{q} {n}")).collect::<Vec<_>>().join(", ")
                ),
            );
        }
        reject(RejectionKind::HostPorts, "the pod's host ports conflict with its DaemonSets' host ports".to_owned())
    }

    fn finish(mut self, timed_out: bool) -> Decisions {
        if !timed_out && !self.options.upstream_packing {
            self.repack();
        }
        let mut d = Decisions::new();
        d.timed_out = timed_out;
        let claims = std::mem::take(&mut self.claims);
        let mut pricing_cache: HashMap<(usize, Requirements), Pricing<'_>> = HashMap::new();
        for mut claim in claims {
            let Some(template) = self.templates.get(claim.template) else { continue };
            let mut reqs = claim.requirements.clone();
            reqs.remove(labels::HOSTNAME);
            for k in SIMULATION_ONLY_KEYS {
                reqs.remove(k);
            }
            claim.held.pin(&mut reqs, &mut claim.its, template, self.provider);
            // Price order, prices and capacity types depend on the requirements only: computed once per
            // distinct (template, requirements) over all of the template's types. What a claim turns into
            // depends on those and its instance types only, so it is built once per distinct set of them
            // (claims of one pass share a handful: hostname anti-affinity makes one claim per pod).
            let pricing = pricing_cache
                .entry((claim.template, reqs.clone()))
                .or_insert_with(|| Pricing::new(template, &reqs, self.provider));
            if !pricing.built.contains_key(&claim.its) {
                let b = pricing.build(template, reqs, &claim.its, self.options.min_values_policy, self.provider);
                pricing.built.insert(claim.its.clone(), b);
            }
            let Some(built) = pricing.built.get(&claim.its) else { continue };
            let plan = match built {
                Ok(plan) => plan,
                Err(e) => {
                    for &p in &claim.pods {
                        self.placed[p] = false;
                        self.errors[p] = Some(UnschedulableReason::MinValues {
                            node_pool: template.name.clone(),
                            detail: e.clone(),
                        });
                    }
                    continue;
                }
            };
            let mut pods: Vec<PodKey> = claim.pods.iter().map(|&p| self.pods[p].key.clone()).collect();
            pods.sort();
            let requested_dra_drivers = match &self.dra {
                Some(dra) if !claim.dra_claims.is_empty() => {
                    let its: Vec<&str> = plan.instance_types.iter().map(|o| o.name.as_str()).collect();
                    dra.drivers(claim.id, &claim.dra_claims, &its)
                }
                _ => Vec::new(),
            };
            d.new_node_claims.push(NodeClaimPlan {
                name: claim.hostname.clone(),
                node_pool: template.name.clone(),
                requirements: plan.requirements.clone(),
                instance_types: plan.instance_types.clone(),
                price: plan.price,
                zones: plan.zones.clone(),
                pods,
                requests: claim.requests,
                daemon_set_overhead: plan.daemon_set_overhead.clone(),
                min_values_relaxed: claim.min_values_relaxed,
                price_overlay_applied: plan.price_overlay_applied,
                capacity_overlay_applied: plan.capacity_overlay_applied,
                requested_dra_drivers,
            });
        }
        for node in &self.existing {
            if node.pods.is_empty() {
                continue;
            }
            let mut pods: Vec<PodKey> = node.pods.iter().map(|&p| self.pods[p].key.clone()).collect();
            pods.sort();
            d.existing_nodes.push(ExistingNodePlacement::new(node.name.clone(), node.in_flight, pods));
        }
        d.existing_nodes.sort_by(|a, b| a.name.cmp(&b.name));
        for (i, p) in self.pods.iter().enumerate() {
            if !self.placed[i] {
                let reason = self.errors[i].clone().unwrap_or(UnschedulableReason::NotScheduled);
                d.unschedulable.push(UnschedulablePod::new(p.key.clone(), reason));
            }
        }
        d.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        d
    }
}

/// Instance-type pricing of one template under one set of claim requirements, for [`Solver::finish`].
struct Pricing<'a> {
    /// Indices of the template's instance types by ascending cheapest compatible price, ties by name
    /// (the order of `karpenter_requirements::order_by_price`).
    order: Vec<u32>,
    /// Cheapest compatible available price per instance type (`+∞` without one).
    price: Vec<f64>,
    /// Per instance type: bit `b` set when an available offering compatible with the requirements has
    /// capacity type `ct_names[b]`.
    cts: Vec<u64>,
    /// Capacity types seen, sorted (at most 64 are tracked).
    ct_names: Vec<String>,
    /// Per instance type: the offering its plan option names ([`InstanceTypeOption::of`]'s choice: the first
    /// by launch order among the available offerings compatible with the requirements). Found here, in the
    /// one pass over the offerings, instead of once more per built plan (issue 36: the diverse benchmark builds
    /// hundreds of plans of hundreds of options).
    best: Vec<Option<&'a Offering>>,
    /// Per instance type: bit `b` set when an available offering compatible with the requirements is in zone
    /// `zone_names[b]`; the plan's zones are the union over its options ([`crate::decision::offered_zones`]).
    zones: Vec<u64>,
    /// Zones seen, sorted; `None` past 64 zones (then a plan's zones are computed from its options).
    zone_names: Option<Vec<String>>,
    /// What a claim with these requirements and the given instance types turns into (or the minValues
    /// error that drops it), see [`Pricing::build`].
    built: HashMap<Vec<u32>, Result<BuiltPlan, String>>,
}

/// The parts of a [`NodeClaimPlan`] that depend on the claim's requirements and instance types only.
struct BuiltPlan {
    requirements: Requirements,
    instance_types: Arc<[InstanceTypeOption]>,
    price: Option<f64>,
    zones: Vec<String>,
    daemon_set_overhead: ResourceList,
    price_overlay_applied: bool,
    capacity_overlay_applied: bool,
}

impl<'a> Pricing<'a> {
    fn new(template: &Template<'a>, reqs: &Requirements, provider: &ProviderLabels) -> Pricing<'a> {
        let mut ct_names: Vec<String> = template
            .its
            .iter()
            .flat_map(|it| it.offerings.available().filter_map(|o| o.capacity_type()))
            .map(str::to_owned)
            .collect();
        ct_names.sort_unstable();
        ct_names.dedup();
        ct_names.truncate(64);
        let mut zone_names: Vec<&str> =
            template.its.iter().flat_map(|it| it.offerings.available().filter_map(|o| o.zone())).collect();
        zone_names.sort_unstable();
        zone_names.dedup();
        let zone_names: Option<Vec<String>> =
            (zone_names.len() <= 64).then(|| zone_names.into_iter().map(str::to_owned).collect());
        let n = template.its.len();
        let (mut price, mut cts, mut best, mut zones) =
            (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        for &it in &template.its {
            // The first by launch order: its price (launch order's first key) is the type's cheapest.
            let mut first: Option<&'a Offering> = None;
            let (mut mask, mut zone_mask) = (0u64, 0u64);
            for o in it.offerings.available().filter(|o| o.is_compatible(reqs, provider)) {
                if first.is_none_or(|b| o.launch_order(b).is_lt()) {
                    first = Some(o);
                }
                if let Some(b) = o.capacity_type().and_then(|c| ct_names.binary_search_by(|n| n.as_str().cmp(c)).ok()) {
                    mask |= 1u64 << b;
                }
                if let (Some(names), Some(z)) = (&zone_names, o.zone())
                    && let Ok(b) = names.binary_search_by(|n| n.as_str().cmp(z))
                {
                    zone_mask |= 1u64 << b;
                }
            }
            price.push(first.map_or(f64::INFINITY, |o| o.price));
            cts.push(mask);
            best.push(first);
            zones.push(zone_mask);
        }
        let mut order: Vec<u32> = (0..template.its.len() as u32).collect();
        order.sort_by(|&a, &b| {
            let pa = price.get(a as usize).copied().unwrap_or(f64::INFINITY);
            let pb = price.get(b as usize).copied().unwrap_or(f64::INFINITY);
            let name = |i: u32| template.its.get(i as usize).map(|it| it.name.as_str());
            pa.total_cmp(&pb).then_with(|| name(a).cmp(&name(b)))
        });
        Pricing { order, price, cts, ct_names, best, zones, zone_names, built: HashMap::new() }
    }

    /// A claim's options `its` (template indices) in price order truncated to [`MAX_INSTANCE_TYPES`], the
    /// minValues check under `Strict`, the final requirements (instance types and capacity types of the
    /// options kept), the price and the DaemonSet overhead. `reqs` are the claim's requirements without
    /// hostname and simulation-only keys. `Err`: the minValues error.
    fn build(
        &self,
        template: &Template<'_>,
        mut reqs: Requirements,
        its: &[u32],
        policy: MinValuesPolicy,
        provider: &ProviderLabels,
    ) -> Result<BuiltPlan, String> {
        let mut member = vec![false; template.its.len()];
        for &i in its {
            if let Some(m) = member.get_mut(i as usize) {
                *m = true;
            }
        }
        let kept_idx: Vec<u32> = self
            .order
            .iter()
            .copied()
            .filter(|&i| member.get(i as usize).copied().unwrap_or(false))
            .take(MAX_INSTANCE_TYPES)
            .collect();
        let kept: Vec<&InstanceType> = kept_idx.iter().filter_map(|&i| template.its.get(i as usize).copied()).collect();
        if policy == MinValuesPolicy::Strict {
            satisfies_min_values(&kept, &reqs).map_err(|e| e.to_string())?;
        }
        // Each option's offering under the requirements it was priced and ordered with (before the options'
        // own instance-type and capacity-type requirements are added below).
        let instance_types: Arc<[InstanceTypeOption]> = kept_idx
            .iter()
            .filter_map(|&i| {
                let it = template.its.get(i as usize)?;
                Some(InstanceTypeOption::with_offering(it, self.best.get(i as usize).copied().flatten()))
            })
            .collect();
        let zones = match &self.zone_names {
            Some(names) => {
                let mask = kept_idx.iter().fold(0u64, |m, &i| m | self.zones.get(i as usize).copied().unwrap_or(0));
                names.iter().enumerate().filter(|(b, _)| mask & (1u64 << b) != 0).map(|(_, z)| z.clone()).collect()
            }
            None => crate::decision::offered_zones(&kept, &reqs, provider),
        };
        let min_values = reqs.get_ref(labels::INSTANCE_TYPE).and_then(|r| r.min_values());
        reqs.add(
            Requirement::in_values(labels::INSTANCE_TYPE, kept.iter().map(|it| it.name.as_str()))
                .with_min_values(min_values),
        );
        let mut ct_mask = 0u64;
        for &i in &kept_idx {
            ct_mask |= self.cts.get(i as usize).copied().unwrap_or(0);
        }
        let cts: Vec<&str> = self
            .ct_names
            .iter()
            .enumerate()
            .filter(|(b, _)| ct_mask & (1u64 << b) != 0)
            .map(|(_, n)| n.as_str())
            .collect();
        if !cts.is_empty() {
            reqs.add(Requirement::in_values(labels::CAPACITY_TYPE, cts));
        }
        let mut overhead: Option<ResourceList> = None;
        for &i in its {
            if let Some(dl) = template.daemon.get(i as usize) {
                overhead = Some(match overhead {
                    None => dl.clone(),
                    Some(o) => min_resources(&o, dl),
                });
            }
        }
        let price = kept_idx.first().and_then(|&i| self.price.get(i as usize).copied()).filter(|p| p.is_finite());
        let (price_overlay_applied, capacity_overlay_applied) = crate::decision::overlay_flags(&kept);
        Ok(BuiltPlan {
            requirements: reqs,
            instance_types,
            price,
            zones,
            daemon_set_overhead: overhead.unwrap_or_default(),
            price_overlay_applied,
            capacity_overlay_applied,
        })
    }
}

/// Whether `pod` uses DRA resource claims: pod-level ones, or a container or init container naming one (as
/// upstream's `HasDRARequirements` reads it; the API server only admits container claims the pod lists, but a
/// hand-written input may hold one alone).
pub(crate) fn has_resource_claims(pod: &karpenter_api::CompactPod) -> bool {
    let spec = &pod.spec;
    let in_containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| c.resources.as_ref().and_then(|r| r.claims.as_ref()).is_some_and(|claims| !claims.is_empty()));
    in_containers || spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty())
}

/// The solve's DRA state: with DRA ignored, pods with claims get [`DRA_IGNORED`]; otherwise their claims are
/// resolved (a pod whose claims cannot be resolved gets the reason and waits). `None` without such pods.
fn dra_pass<'a>(index: Option<&Arc<DraIndex<'a>>>, pods: &mut [PodData<'a>]) -> Option<DraPass<'a>> {
    let with_claims = |p: &PodData<'a>| p.error.is_none() && has_resource_claims(p.pod);
    let Some(index) = index else {
        for p in pods.iter_mut().filter(|p| with_claims(p)) {
            p.error = Some(UnschedulableReason::Unsupported { message: DRA_IGNORED.into() });
        }
        return None;
    };
    if !pods.iter().any(with_claims) {
        return None;
    }
    let (pass, errors) = DraPass::new(
        Arc::clone(index),
        pods.iter().enumerate().filter(|(_, p)| with_claims(p)).map(|(i, p)| (i, p.pod)),
    );
    for (i, message) in errors {
        if let Some(p) = pods.get_mut(i) {
            p.error = Some(UnschedulableReason::ResourceClaims { message });
        }
    }
    Some(pass)
}

fn min_resources(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    for (name, q) in a.iter() {
        let other = b.get_or_zero(name);
        out.insert(name, if other < *q { other } else { *q });
    }
    out
}

fn describe_reqs(reqs: &Requirements, template: &Template<'_>) -> String {
    let shown: Vec<String> = reqs
        .iter()
        .filter(|r| {
            r.key() != labels::HOSTNAME
                && !SIMULATION_ONLY_KEYS.contains(&r.key())
                && r.key() != labels::NODE_POOL
                && template.requirements.get_ref(r.key()) != Some(*r)
        })
        .map(|r| r.to_string())
        .collect();
    if shown.is_empty() { reqs.to_string() } else { shown.join(", ") }
}

#[cfg(test)]
mod cluster_limit_tests;

#[cfg(test)]
mod reservation_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::IntoSharedPod;
    use karpenter_requirements::{Format, Offering, Overhead, Quantity};
    use karpenter_testing::{NodePoolOptions, PodOptions, node_pool, pod};

    fn catalogue() -> Vec<InstanceType> {
        [2i64, 4]
            .iter()
            .map(|&cpu| {
                let name = format!("it-{cpu}");
                let offering = Offering::new(
                    [
                        Requirement::in_values(labels::ZONE, ["z"]),
                        Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
                    ]
                    .into_iter()
                    .collect(),
                    cpu as f64,
                );
                InstanceType::new(
                    name.clone(),
                    [Requirement::in_values(labels::INSTANCE_TYPE, [name.as_str()])].into_iter().collect(),
                    vec![offering],
                    ResourceList::new()
                        .with("cpu", Quantity::from_int(cpu, Format::DecimalSI))
                        .with("pods", Quantity::from_int(100, Format::DecimalSI)),
                    Overhead::default(),
                )
            })
            .collect()
    }

    fn snapshot(n: usize, cpu: &str) -> ClusterSnapshot {
        let mut s = ClusterSnapshot::new();
        s.node_pools.push(node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }));
        for i in 0..n {
            s.pending_pods.push(
                pod(PodOptions { name: Some(format!("p{i}")), requests: [("cpu", cpu)].into(), ..Default::default() })
                    .into_shared(),
            );
        }
        s
    }

    #[test]
    fn deadline_stops_and_reports_timed_out() {
        let s = snapshot(3, "1");
        let its = catalogue();
        let pools = [PoolInput { node_pool: &s.node_pools[0], instance_types: &its }];
        let mut calls = 0;
        let d = schedule_until(
            &s,
            &pools,
            &karpenter_testing::vocabulary::aws(),
            &SchedulerOptions::default(),
            &mut || {
                calls += 1;
                calls > 1
            },
        );
        assert!(d.timed_out);
        assert_eq!(d.placed_pods(), 1, "what was decided before the deadline is kept");
        assert_eq!(d.unschedulable.len(), 2);
        assert!(d.unschedulable.iter().all(|u| u.reason == UnschedulableReason::Timeout));
        assert!(d.unschedulable.iter().all(|u| u.reason.code() == "Timeout"));
        let budget = SchedulerOptions { max_pod_attempts: Some(2), ..Default::default() };
        let d = schedule(&s, &pools, &karpenter_testing::vocabulary::aws(), &budget);
        assert!(d.timed_out);
        assert_eq!(d.placed_pods(), 2);
    }

    #[test]
    fn packs_onto_in_flight_claim_then_opens_a_new_one() {
        let s = snapshot(5, "1500m");
        let its = catalogue();
        let pools = [PoolInput { node_pool: &s.node_pools[0], instance_types: &its }];
        let d = schedule(&s, &pools, &karpenter_testing::vocabulary::aws(), &SchedulerOptions::default());
        assert!(!d.timed_out);
        assert!(d.unschedulable.is_empty());
        // 4 cpu holds two 1.5 cpu pods: 5 pods need 3 claims.
        assert_eq!(d.new_node_claims.len(), 3);
        assert_eq!(d.new_node_claims[0].instance_type_names().collect::<Vec<_>>(), ["it-4"]);
        assert_eq!(d.new_node_claims[0].requests.get("cpu").map(ToString::to_string).as_deref(), Some("3"));
        assert_eq!(d.new_node_claims[0].price, Some(4.0));
    }

    #[test]
    fn claims_without_room_are_remembered_per_class_and_change_no_decision() {
        // 1.5 cpu pods: two fill a 4-cpu claim; 0.5 cpu pods still fit beside them.
        let mut s = snapshot(7, "1500m");
        for (i, cpu) in ["500m", "500m", "1500m", "500m"].iter().enumerate() {
            s.pending_pods.push(
                pod(PodOptions { name: Some(format!("q{i}")), requests: [("cpu", *cpu)].into(), ..Default::default() })
                    .into_shared(),
            );
        }
        let its = catalogue();
        let pools = [PoolInput { node_pool: &s.node_pools[0], instance_types: &its }];
        let provider = karpenter_testing::vocabulary::aws();
        let options = SchedulerOptions::default();
        let mut solver = Solver::new(&s, &pools, &provider, &options);
        let big = solver.room_classes.class(0).expect("a class");
        let small = solver.room_classes.class(7).expect("a class");
        assert_ne!(big, small);
        assert_eq!(solver.room_classes.class(9), Some(big), "equal requests, one class");
        for i in 0..3 {
            assert_eq!(solver.try_schedule(i), Ok(()));
        }
        assert_eq!(solver.claims.len(), 2);
        assert!(solver.no_room.has(big, 0), "the third big pod found claim 0 full");
        assert!(!solver.no_room.has(big, 1));
        assert_eq!(solver.try_schedule(7), Ok(()));
        assert_eq!(solver.claims[0].pods, [0, 1], "the small pod is not turned away by the big pods' memory");
        assert_eq!(solver.claims[1].pods, [2, 7]);

        let with = schedule(&s, &pools, &provider, &options);
        let mut solver = Solver::new(&s, &pools, &provider, &options);
        solver.room_classes = RoomClasses::default();
        let without = solver.solve(&mut |_| false);
        assert_eq!(with, without, "the memory only skips claims CanAdd would reject");
        assert_eq!(with.new_node_claims.len(), 4, "eight big pods, two a claim; the small ones fit beside them");
    }

    #[test]
    fn static_pools_are_skipped() {
        let mut s = snapshot(1, "1");
        s.node_pools[0] = node_pool(NodePoolOptions { replicas: Some(2), ..Default::default() });
        let its = catalogue();
        let pools = [PoolInput { node_pool: &s.node_pools[0], instance_types: &its }];
        let d = schedule(&s, &pools, &karpenter_testing::vocabulary::aws(), &SchedulerOptions::default());
        assert_eq!(d.unschedulable.len(), 1);
        assert_eq!(d.unschedulable[0].reason, UnschedulableReason::NoNodePool { all_static: true });
        assert_eq!(d.unschedulable[0].reason.to_string(), "no dynamic NodePools found (all are static)");
    }
}
