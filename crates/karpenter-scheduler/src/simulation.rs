//! What-if scheduling for disruption: "remove these nodes, where do their pods go?".
//!
//! A [`Simulator`] is built **once** per pass from a [`ClusterSnapshot`] and the pools: the NodeClaim templates
//! (instance types, DaemonSet overhead, limits), every existing node's free capacity and the snapshot's pending
//! pods are prepared then. Each [`Simulator::simulate`] call takes a [`SimulationView`] (nodes left out, extra
//! pods to place) and runs the ordinary solve loop over a clone of that prepared state, so thousands of
//! candidate simulations never rebuild anything from the snapshot.
//!
//! Only nodes that could hold at least the element-wise smallest request among the pods to place are cloned
//! into a solve: a node that cannot take that cannot take any of the pods, and leaving it out keeps the order
//! (and hence the first-fit result) of the remaining nodes unchanged.
//!
//! ```
//! use std::collections::BTreeSet;
//! use karpenter_api::{ProviderLabels, load_str};
//! use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions};
//! use karpenter_scheduler::simulation::{SimulationView, Simulator};
//!
//! let objects = load_str(r#"
//! apiVersion: v1
//! kind: Node
//! metadata: {name: a, labels: {kubernetes.io/hostname: a}}
//! status: {allocatable: {cpu: "4", pods: "10"}}
//! ---
//! apiVersion: v1
//! kind: Node
//! metadata: {name: b, labels: {kubernetes.io/hostname: b}}
//! status: {allocatable: {cpu: "4", pods: "10"}}
//! ---
//! apiVersion: v1
//! kind: Pod
//! metadata: {name: web, namespace: default}
//! spec: {nodeName: a, containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]}
//! "#, "example.yaml").unwrap();
//! let snapshot = ClusterSnapshot::from_objects(&objects).unwrap();
//! let provider = karpenter_testing::vocabulary::aws();
//! let options = SchedulerOptions::default();
//! let sim = Simulator::new(&snapshot, &[], &provider, &options);
//! let removed = BTreeSet::from(["a".to_string()]);
//! let view = SimulationView { removed: &removed, pods: snapshot.pods_on("a").collect(), ..Default::default() };
//! let d = sim.simulate(&view);
//! assert_eq!(d.existing_nodes[0].name, "b", "the pod of the removed node moves to b");
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use karpenter_api::{CompactPod, ProviderLabels};
use karpenter_requirements::ResourceList;
use rustc_hash::FxHashSet;

use crate::decision::{Decisions, PodKey, UnschedulablePod, UnschedulableReason};
use crate::default_spread::DefaultSpread;
use crate::scheduler::pods::{PodData, PodMemory, pods_data};
use crate::scheduler::templates::{ExistingNode, daemons};
use crate::scheduler::volumes::VolumeIndex;
use crate::scheduler::{Base, PoolInput, SchedulerOptions, Solver};
use crate::snapshot::{ClusterSnapshot, pod_key};

// The message lives with the other reasons' messages; re-exported at its old path.
pub use crate::decision::reason::UNINITIALIZED_NODE;

/// Prepared per-pass state for many simulations over one snapshot.
pub struct Simulator<'a> {
    provider: &'a ProviderLabels,
    options: &'a SchedulerOptions,
    /// `options` with upstream's packing, for views that ask for the fewest new nodes.
    fewest_nodes_options: SchedulerOptions,
    base: Base<'a>,
    volumes: VolumeIndex<'a>,
    pending: Vec<PodData<'a>>,
    /// Existing-node index by name (nodes and in-flight NodeClaims).
    index: BTreeMap<String, usize>,
    /// No PreferNoSchedule template taints and no existing pod anti-affinity: simple pods may use the prefix
    /// fast path of [`Simulator::simulate`].
    prefix_ok: bool,
    /// The snapshot without nodes and pods, for solves of simple pods (see [`Simulator::simulate`]).
    lean: ClusterSnapshot,
    /// Addresses of the snapshot's bound pods: a view's pod found here lives (in place) as long as the simulator,
    /// so its parse is kept in `parsed` for the next view that places it.
    bound: FxHashSet<usize>,
    /// Bound pods parsed for earlier views. Disruption places each candidate's pods in many what-ifs; parsing
    /// them (their quantities above all) once per view was a fifth of a consolidation pass.
    parsed: Mutex<PodMemory>,
}

impl std::fmt::Debug for Simulator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulator")
            .field("existing_nodes", &self.base.existing.len())
            .field("templates", &self.base.templates.len())
            .field("pending_pods", &self.pending.len())
            .finish()
    }
}

/// One what-if question.
#[derive(Debug, Clone)]
pub struct SimulationView<'v> {
    /// Nodes (by node name) and in-flight NodeClaims (by claim name) whose capacity is not offered.
    pub removed: &'v BTreeSet<String>,
    /// Pods to place besides the snapshot's pending pods (for disruption: the candidates' reschedulable pods).
    pub pods: Vec<&'v CompactPod>,
    /// Leave the snapshot's pending pods out (they are included by default, as upstream does).
    pub skip_pending: bool,
    /// Accept placements on uninitialized nodes and in-flight claims; by default such a placement is turned
    /// into an unschedulable entry with [`UnschedulableReason::UninitializedNode`], so disruption never counts on
    /// capacity not yet ready.
    pub allow_uninitialized: bool,
    /// Pack new NodeClaims in upstream's order, skipping the cost post-pass (as with
    /// [`SchedulerOptions::upstream_packing`]): the post-pass may spread pods over more, cheaper nodes than the
    /// fewest that hold them, and consolidation asks whether one new node is enough.
    pub fewest_new_nodes: bool,
}

static NO_NODES: BTreeSet<String> = BTreeSet::new();

impl Default for SimulationView<'_> {
    fn default() -> Self {
        SimulationView {
            removed: &NO_NODES,
            pods: Vec::new(),
            skip_pending: false,
            allow_uninitialized: false,
            fewest_new_nodes: false,
        }
    }
}

impl<'a> Simulator<'a> {
    /// Prepares templates, existing nodes and pending pods once.
    pub fn new(
        snapshot: &'a ClusterSnapshot,
        pools: &[PoolInput<'a>],
        provider: &'a ProviderLabels,
        options: &'a SchedulerOptions,
    ) -> Self {
        let daemons = daemons(snapshot, !options.ignore_dra_requests);
        let volumes = VolumeIndex::new(snapshot);
        let mut spread = DefaultSpread::new(&options.scheduler_config, snapshot);
        let pending = pods_data(snapshot.pending_pods.iter().map(|p| &**p), provider, &volumes, &mut spread);
        let base = Base::new(snapshot, pools, provider, &daemons, options);
        let index = base.existing.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        let prefix_ok = !base.any_prefer_no_schedule
            && !snapshot
                .bound_pods
                .iter()
                .any(|p| p.spec.affinity.as_ref().and_then(|a| a.pod_anti_affinity.as_ref()).is_some());
        let lean = ClusterSnapshot { namespaces: snapshot.namespaces.clone(), ..Default::default() };
        let fewest_nodes_options = SchedulerOptions { upstream_packing: true, ..options.clone() };
        let bound = snapshot.bound_pods.iter().map(|p| address(p)).collect();
        Simulator {
            provider,
            options,
            fewest_nodes_options,
            base,
            volumes,
            pending,
            index,
            prefix_ok,
            lean,
            bound,
            parsed: Mutex::default(),
        }
    }

    /// The view's pods, parsed: the snapshot's bound pods from (and into) the simulator's memory, others afresh.
    /// A pod's data does not depend on the view (its spread defaults come from the snapshot and the config), so
    /// a remembered parse is the one a fresh parse would give.
    fn view_pods<'v>(&self, pods: &[&'v CompactPod]) -> Vec<PodData<'v>> {
        let mut spread = DefaultSpread::new(&self.options.scheduler_config, self.base.snapshot);
        if !pods.iter().all(|p| self.bound.contains(&address(p))) {
            return pods_data(pods.iter().copied(), self.provider, &self.volumes, &mut spread);
        }
        let mut memory = self.parsed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        pods.iter().map(|pod| memory.data(pod, self.provider, &self.volumes, &mut spread)).collect()
    }

    /// Whether `name` is an existing node or in-flight claim the simulator knows (marked-for-deletion nodes are
    /// not offered to pods and therefore unknown).
    pub fn offers(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Runs one simulation. Deterministic.
    pub fn simulate<'v>(&self, view: &SimulationView<'v>) -> Decisions
    where
        'a: 'v,
    {
        self.simulate_capped(view, None)
    }

    /// How many new NodeClaims [`Simulator::simulate`] would plan for `view`, counted up to `cap`: the solve stops
    /// as soon as `cap` claims are open, so asking "two or more?" of 40,000 pending pods places a few dozen of
    /// them instead of planning thousands of nodes. A solve never closes a claim it opened, so the full answer is
    /// at least `cap` then, except that finalisation drops a claim whose instance types cannot meet a NodePool's
    /// `minValues`, and a claim that more pods narrowed could fail there where the capped one did not: the count
    /// may then be `cap` where the full solve plans fewer. Callers that use it to hold back (consolidation waits
    /// for the pending pods' nodes) are at worst held back one pass too long.
    pub fn count_new_claims<'v>(&self, view: &SimulationView<'v>, cap: usize) -> usize
    where
        'a: 'v,
    {
        let d = self.simulate_capped(view, Some(cap));
        d.new_node_claims.len().min(cap)
    }

    fn simulate_capped<'v>(&self, view: &SimulationView<'v>, claim_cap: Option<usize>) -> Decisions
    where
        'a: 'v,
    {
        let mut pods: Vec<PodData<'v>> = Vec::with_capacity(view.pods.len() + self.pending.len());
        if !view.skip_pending {
            pods.extend(self.pending.iter().cloned());
        }
        pods.extend(self.view_pods(&view.pods));
        // The element-wise smallest request: nodes that cannot hold it cannot hold any pod.
        let mut smallest: Option<ResourceList> = None;
        for p in pods.iter().filter(|p| p.error.is_none()) {
            smallest = Some(match smallest {
                None => p.requests.clone(),
                Some(acc) => {
                    let mut out = ResourceList::new();
                    for (name, q) in acc.iter() {
                        let other = p.requests.get_or_zero(name);
                        out.insert(name, if other < *q { other } else { *q });
                    }
                    out
                }
            });
        }
        // Simple pods with no existing anti-affinity have no topology: the solver then needs no bound pods, and
        // reading them all once per simulation would make a pass quadratic.
        let simple_pods = self.prefix_ok && pods.iter().all(|p| p.spread_constraints().is_empty() && simple(p.pod));
        let topology = if simple_pods { &self.lean } else { self.base.snapshot };
        let Some(min) = smallest else {
            return self.finish(self.solve(topology, Vec::new(), pods, view, claim_cap), view);
        };
        let offered = self.base.existing.iter().filter(|n| !view.removed.contains(&n.name) && min.fits(&n.available));
        // Fast path: first fit over a prefix of the offered nodes. When every pod lands on a node of the prefix,
        // the full list gives the same answer: each pod meets the prefix nodes in the same order and state. Only
        // valid for pods whose placement depends on nothing but the node itself (no relaxation, no topology).
        if simple_pods {
            let k = (pods.len() * 4).max(PREFIX_MIN);
            let prefix: Vec<ExistingNode> = offered.clone().take(k).cloned().collect();
            if prefix.len() == k {
                let d = self.solve(topology, prefix, pods.clone(), view, claim_cap);
                if d.new_node_claims.is_empty() && d.unschedulable.is_empty() && !d.timed_out {
                    return self.finish(d, view);
                }
            }
        }
        let d = self.solve(topology, offered.cloned().collect(), pods, view, claim_cap);
        self.finish(d, view)
    }

    fn solve<'s>(
        &'s self,
        snapshot: &'s ClusterSnapshot,
        existing: Vec<ExistingNode>,
        pods: Vec<PodData<'s>>,
        view: &SimulationView<'_>,
        claim_cap: Option<usize>,
    ) -> Decisions {
        let base = Base {
            snapshot,
            templates: self.base.templates.clone(),
            existing,
            any_prefer_no_schedule: self.base.any_prefer_no_schedule,
            no_templates_reason: self.base.no_templates_reason.clone(),
            cluster: self.base.cluster.clone(),
            dra: self.base.dra.clone(),
            reservations: self.base.reservations.clone(),
        };
        let options = if view.fewest_new_nodes { &self.fewest_nodes_options } else { self.options };
        Solver::from_base(base, pods, self.provider, options).run(&mut || false, claim_cap)
    }

    fn finish(&self, mut d: Decisions, view: &SimulationView<'_>) -> Decisions {
        if !view.allow_uninitialized {
            let mut kept = Vec::with_capacity(d.existing_nodes.len());
            for placement in std::mem::take(&mut d.existing_nodes) {
                let ready = self
                    .index
                    .get(&placement.name)
                    .and_then(|&i| self.base.existing.get(i))
                    .is_some_and(|n| n.initialized && !n.in_flight);
                if ready {
                    kept.push(placement);
                } else {
                    d.unschedulable.extend(
                        placement
                            .pods
                            .into_iter()
                            .map(|pod| UnschedulablePod::new(pod, UnschedulableReason::UninitializedNode)),
                    );
                }
            }
            d.existing_nodes = kept;
            d.unschedulable.sort_by(|a, b| a.pod.cmp(&b.pod));
        }
        d
    }

    /// Keys (`namespace/name`) of the snapshot's pending pods, sorted: their failures do not block disruption
    /// (`AllNonPendingPodsScheduled`).
    pub fn pending_keys(&self) -> BTreeSet<PodKey> {
        self.pending.iter().map(|p| p.key.clone()).collect()
    }
}

/// The fast path of [`Simulator::simulate`] starts with this many nodes (or 4 per pod, if more).
const PREFIX_MIN: usize = 64;

/// A pod whose placement depends only on the node it is tried on: no preferred or alternative node affinity
/// (no relaxation), no topology spread, no pod affinity or anti-affinity.
fn simple(pod: &CompactPod) -> bool {
    let spec = &*pod.spec;
    if spec.topology_spread_constraints.as_ref().is_some_and(|c| !c.is_empty())
        || crate::scheduler::has_resource_claims(pod)
    {
        return false;
    }
    let Some(a) = spec.affinity.as_ref() else { return true };
    if a.pod_affinity.is_some() || a.pod_anti_affinity.is_some() {
        return false;
    }
    a.node_affinity.as_ref().is_none_or(|na| {
        na.preferred_during_scheduling_ignored_during_execution.as_ref().is_none_or(Vec::is_empty)
            && na
                .required_during_scheduling_ignored_during_execution
                .as_ref()
                .is_none_or(|r| r.node_selector_terms.len() <= 1)
    })
}

/// A pod's address: the key of a bound pod in [`Simulator`]'s memory (stable while the snapshot is borrowed).
fn address(pod: &CompactPod) -> usize {
    std::ptr::from_ref(pod) as usize
}

/// `namespace/name` of a pod, as simulations name pods.
pub fn key(pod: &CompactPod) -> String {
    pod_key(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule;
    use karpenter_api::load_str;

    /// A deterministic cluster of `n` nodes with 1..6 bound pods each of varied sizes.
    fn cluster(n: usize, seed: u64) -> String {
        let mut x = seed;
        let mut next = move |m: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let mut docs = Vec::new();
        for i in 0..n {
            docs.push(format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: n{i:03}, labels: {{kubernetes.io/hostname: n{i:03}}}}}\nstatus: {{allocatable: {{cpu: \"4\", memory: 8Gi, pods: \"20\"}}}}"
            ));
            for j in 0..1 + next(6) {
                let cpu = [100, 250, 500, 1000, 1500][next(5) as usize];
                docs.push(format!(
                    "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i:03}-{j}, namespace: default}}\nspec: {{nodeName: n{i:03}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: {cpu}m, memory: 256Mi}}}}}}]}}"
                ));
            }
        }
        docs.join("\n---\n")
    }

    /// The simulator (prefix fast path included) agrees with a plain scheduling pass over a snapshot from which
    /// the removed nodes are deleted and their pods made pending.
    #[test]
    fn simulation_equals_rescheduling_without_the_nodes() {
        let provider = karpenter_testing::vocabulary::aws();
        let options = SchedulerOptions::default();
        for seed in 1..6u64 {
            let objects = load_str(&cluster(150, seed), "t.yaml").expect("loads");
            let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
            let sim = Simulator::new(&snapshot, &[], &provider, &options);
            for first in [0usize, 40, 97, 140] {
                let removed: BTreeSet<String> = (first..first + 3).map(|i| format!("n{i:03}")).collect();
                let pods: Vec<&CompactPod> =
                    removed.iter().flat_map(|n| snapshot.pods_on(n).collect::<Vec<_>>()).collect();
                let d = sim.simulate(&SimulationView { removed: &removed, pods: pods.clone(), ..Default::default() });
                let mut reference = snapshot.clone();
                reference.nodes.retain(|n| !removed.contains(&n.name));
                reference.bound_pods.retain(|p| !p.node_name().is_some_and(|n| removed.iter().any(|r| r == n)));
                reference.pending_pods = pods
                    .iter()
                    .map(|p| {
                        let mut p = (*p).clone();
                        std::sync::Arc::make_mut(&mut p.spec).node_name = None;
                        std::sync::Arc::new(p)
                    })
                    .collect();
                let expected = schedule(&reference, &[], &provider, &options);
                assert_eq!(d, expected, "seed {seed}, removed {removed:?}");
                assert!(d.placed_pods() > 0);
            }
        }
    }

    /// `n` pending pods of 3 CPU and a catalogue of one 4-CPU type: each pod needs a new node of its own.
    fn one_node_per_pod(n: usize) -> (ClusterSnapshot, Vec<karpenter_requirements::InstanceType>) {
        use karpenter_api::IntoSharedPod;
        use karpenter_requirements::{Format, InstanceType, Offering, Overhead, Quantity, Requirement};
        use karpenter_testing::{NodePoolOptions, PodOptions, node_pool, pod};
        let offering = Offering::new(
            [
                Requirement::in_values("topology.kubernetes.io/zone", ["z"]),
                Requirement::in_values("karpenter.sh/capacity-type", ["on-demand"]),
            ]
            .into_iter()
            .collect(),
            1.0,
        );
        let it = InstanceType::new(
            "it-4",
            [Requirement::in_values("node.kubernetes.io/instance-type", ["it-4"])].into_iter().collect(),
            vec![offering],
            ResourceList::new()
                .with("cpu", Quantity::from_int(4, Format::DecimalSI))
                .with("pods", Quantity::from_int(100, Format::DecimalSI)),
            Overhead::default(),
        );
        let mut s = ClusterSnapshot::new();
        s.node_pools.push(node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }));
        for i in 0..n {
            s.pending_pods.push(
                pod(PodOptions { name: Some(format!("p{i}")), requests: [("cpu", "3")].into(), ..Default::default() })
                    .into_shared(),
            );
        }
        (s, vec![it])
    }

    #[test]
    fn counting_new_claims_stops_at_the_cap_and_agrees_below_it() {
        let provider = karpenter_testing::vocabulary::aws();
        let options = SchedulerOptions::default();
        for n in [0usize, 1, 2, 5] {
            let (s, its) = one_node_per_pod(n);
            let pools = [PoolInput { node_pool: &s.node_pools[0], instance_types: &its }];
            let sim = Simulator::new(&s, &pools, &provider, &options);
            let view = SimulationView { fewest_new_nodes: true, ..Default::default() };
            let full = sim.simulate(&view);
            assert_eq!(full.new_node_claims.len(), n, "one node per pod");
            assert!(!full.timed_out);
            for cap in [1usize, 2, 3, 10] {
                assert_eq!(sim.count_new_claims(&view, cap), n.min(cap), "{n} pods, cap {cap}");
            }
        }
    }
}
