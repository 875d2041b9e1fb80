//! Karpenter's disruption decisions (upstream v1.14.1's disruption rules) as pure functions over the
//! scheduler's [`ClusterSnapshot`]: emptiness, drift, consolidation, budgets, expiration and
//! terminationGracePeriod deadlines.
//!
//! ```toml
//! [dependencies]
//! karpenter-disruption = { version = "0.1" }
//! # This crate leaves the Kubernetes version to the final binary (kube-rs's rule for libraries): the binary
//! # enables exactly one k8s-openapi version feature, the one karpenter-rs is built and tested with being v1_33.
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! ```
//!
//! **No IO, no clock**: `now` is an argument. The snapshot is wrapped (indexes in [`candidate::Cluster`]), never
//! edited. Displaced pods are placed with `karpenter-scheduler`'s [`Simulator`](karpenter_scheduler::simulation::Simulator),
//! prepared once per pass and reused by every simulation. By default every candidate is evaluated; a caller
//! that must bound a pass's time gives it a [`SimulationBudget`] (the controller does: see there).
//!
//! # Entry points
//!
//! * [`evaluate`]: one pass. Tries the methods in [`Method::ORDER`] (upstream's: node repair, Emptiness,
//!   StaticDrift, Drift, MultiNodeConsolidation, SingleNodeConsolidation; each a module of `src/methods/`
//!   behind one trait); the first that acts gives the pass's [`Command`]s (one command, or one per node for
//!   StaticDrift). In addition every node gets a [`Verdict`] computed against the
//!   unchanged snapshot: disrupted, deferred (a valid move exists, a later pass will take it), blocked (PDB,
//!   do-not-disrupt, budget, ...) or kept (no cheaper option, pods cannot move, ...).
//! * [`validation::validate`]: the re-check after the wait ([`validation::VALIDATION_DELAY`], 15 s) against a
//!   later snapshot; when it fails, [`validation::continue_after`] says which methods still get their turn then
//!   ([`DisruptionOptions::continue_after`]).
//! * [`expiration`]: forceful expiry and terminationGracePeriod deadlines at `now`.
//! * [`budget`]: allowances per NodePool and reason.
//! * [`command`]: the serialisable output ([`Pass`], versioned `karpenter-rs.disruption/v1`).
//!
//! # Deviations from upstream
//!
//! * Time bounds: upstream stops multi-node consolidation after 1 minute and single-node consolidation after 3
//!   minutes, and puts the pools the stopped pass did not reach first in the next. Here two
//!   [`SimulationBudget`]s bound a pass (the controller's: 3 s for drift and single-node consolidation, the
//!   first 1 s of it for multi-node consolidation's search), and single-node consolidation resumes after the last candidate the stopped
//!   pass simulated ([`DisruptionOptions::resume_single_node_after`], [`Pass::resume_single_node_after`]), so
//!   every candidate is reached within a few passes whatever the cluster's size. Without a budget (the
//!   default, and `simulate`), every candidate is simulated.
//! * The `Consolidatable` state is computed from `lastPodEventTime` (or the `Initialized` transition) and
//!   `consolidateAfter` at `now`, so passes over simulated time need no condition controller; without any
//!   reference time the condition itself decides.
//! * Node readiness is not in the snapshot: the caller lists not-Ready nodes in
//!   [`DisruptionOptions::not_ready_nodes`] (they consume budgets as upstream).
//! * CapacityBuffer virtual pods are the snapshot's pending pods (the caller adds them with
//!   `karpenter_api::capacitybuffer::virtual_pods`): every simulation re-places them, so consolidation keeps the
//!   room, and Emptiness leaves a node they land on alone ([`Reason::HostsCapacityBuffer`]).
//! * Reserved-offering fallback is not modelled.
//! * Beyond upstream: a NodePool annotated `karpenter-rs.io/disruption-topology-key` is disrupted one domain of
//!   that node label at a time (the `topology` module; [`Reason::TopologyDomainWaiting`],
//!   [`Reason::TopologyKeyInvalid`]).
//! * Beyond upstream: replacements and multi-node moves must save at least a NodePool's
//!   `karpenter-rs.io/consolidation-min-savings` and the cluster's `CONSOLIDATION_MIN_SAVINGS` ([`savings`],
//!   [`Reason::SavingsBelowThreshold`]); the spot-to-spot floor of 15 instance types is a setting
//!   ([`DisruptionOptions::spot_to_spot_min_instance_types`]).
//! * Beyond upstream: a NodePool's `karpenter-rs.io/min-nodes` floor refuses commands that would shrink it below
//!   the floor ([`floor`], [`Reason::AtMinNodes`]); [`floor::launches`] plans the NodeClaims that restore it.

pub mod budget;
pub mod candidate;
pub mod command;
pub mod deletion_cost;
mod engine;
pub mod expiration;
pub mod floor;
mod methods;
pub mod pods;
pub mod savings;
mod topology;
pub mod validation;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Utc};
use karpenter_api::ProviderLabels;
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions};

pub use command::{API_VERSION, Command, Decision, Method, Outcome, Pass, Reason, SPOT_TO_SPOT_MIN_TYPES, Verdict};
pub use engine::MULTI_NODE_MAX_CANDIDATES;
pub use methods::repair;

use candidate::{Candidate, Cluster, candidate};
use engine::Engine;
use methods::{PassState, Results};

/// Options of a pass.
#[derive(Debug, Clone)]
pub struct DisruptionOptions {
    /// Feature gate `SpotToSpotConsolidation` (default off, as upstream).
    pub spot_to_spot_consolidation: bool,
    /// `SPOT_TO_SPOT_MIN_INSTANCE_TYPES`: how many cheaper instance types single-node spot-to-spot consolidation
    /// needs, and keeps (upstream's constant, [`SPOT_TO_SPOT_MIN_TYPES`], by default; at least 1).
    pub spot_to_spot_min_instance_types: usize,
    /// `CONSOLIDATION_MIN_SAVINGS`: the cluster-wide minimum saving of replacements and multi-node moves
    /// ([`savings`]; each pool's `karpenter-rs.io/consolidation-min-savings` annotation too, the stricter
    /// applying). `None` (the default): any saving will do, as upstream.
    pub consolidation_min_savings: Option<savings::MinSavings>,
    /// Options of the scheduling simulations.
    pub scheduler: SchedulerOptions,
    /// Nodes whose `Ready` condition is not True (they count as disrupting in budgets).
    pub not_ready_nodes: BTreeSet<String>,
    /// Multi-node consolidation candidate cap (upstream: 100).
    pub multi_node_max_candidates: usize,
    /// Simulate every candidate for every method, so each node gets a full verdict (`simulate`, explanations);
    /// off, drift and single-node consolidation stop simulating once the pass has its command and the rest get
    /// [`Reason::NotEvaluated`]. The controller turns it off: it acts on one command per pass, and on a
    /// cluster of drifted nodes whose pods spread by hostname, simulating them all made each pass take seconds.
    pub every_verdict: bool,
    /// Nothing has changed since a pass in which consolidation found nothing to do (upstream's "already
    /// consolidated"; the controller tracks it): multi-node and single-node consolidation
    /// simulate nothing and their candidates are kept with [`Reason::ConsolidationUnchanged`]. Emptiness and
    /// drift still run (emptiness simulates nothing; drift does not short-circuit upstream either).
    pub consolidation_unchanged: bool,
    /// Bounds the pass's drift and single-node consolidation simulations; candidates not reached get
    /// [`Reason::PassTimeSpent`]. `None`: every candidate is simulated.
    pub simulation_budget: Option<SimulationBudget>,
    /// Bounds multi-node consolidation's binary search (the best command found when it runs out stands), so
    /// that it cannot take the whole pass from single-node consolidation. `None`: the search runs to its end.
    pub multi_node_budget: Option<SimulationBudget>,
    /// Single-node consolidation starts with the candidate after this node (in its order, wrapping around):
    /// where the previous pass ran out of budget ([`Pass::resume_single_node_after`]).
    pub resume_single_node_after: Option<String>,
    /// Treat other autoscalers' annotations ([`karpenter_api::labels::autoscaler::BLOCKING`]: a pod's
    /// `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`, a node's
    /// `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`, their `node-autoscaling.kubernetes.io/`
    /// forms) as `karpenter.sh/do-not-disrupt: "true"` (default on; not upstream Karpenter's behaviour).
    pub honor_autoscaler_annotations: bool,
    /// Feature gate `PodDeletionCostManagement` (default off, as upstream): which annotations give a pod's
    /// eviction cost ([`pods::CostAnnotations`]).
    pub pod_deletion_cost_management: bool,
    /// Node repair (feature gate `NodeRepair`, voluntary form): the unhealthy nodes and the ordering knobs
    /// ([`repair`]). Empty by default: no repair.
    pub repair: repair::RepairOptions,
    /// The method whose command just failed validation: upstream's method loop goes on in the same pass with the
    /// methods after it ([`validation::continue_after`]), so the pass takes no command from this method or an
    /// earlier one (their verdicts still come). Node repair, its own controller upstream, is not part of that
    /// loop and still acts. `None`: a full pass.
    pub continue_after: Option<Method>,
}

impl DisruptionOptions {
    /// The cost sources these options select.
    pub fn cost_annotations(&self) -> pods::CostAnnotations {
        pods::CostAnnotations { managed: self.pod_deletion_cost_management }
    }
}

/// How many simulations a pass may still start: a deadline on the caller's clock, or a count.
///
/// A pass over thousands of nodes whose pods constrain each other (a hostname topology spread, say) simulates
/// every candidate in turn, each against the whole cluster: tens of milliseconds each, minutes per pass. The
/// disruption loop acts on one command per pass and must stay responsive, so the controller bounds each pass's
/// simulations by time, as upstream bounds consolidation by time; the crate itself never reads a clock.
#[derive(Clone)]
pub struct SimulationBudget {
    may_start: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl SimulationBudget {
    /// A budget asked, before each simulation, whether it may start (the controller: "is the deadline still
    /// ahead?").
    pub fn new(may_start: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        SimulationBudget { may_start: Arc::new(may_start) }
    }

    /// At most `n` simulations (deterministic: tests and benchmarks).
    pub fn simulations(n: usize) -> Self {
        let left = AtomicUsize::new(n);
        SimulationBudget::new(move || {
            left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1)).is_ok()
        })
    }

    /// Whether one more simulation may start (a count is spent by asking).
    pub fn may_start(&self) -> bool {
        (self.may_start)()
    }
}

impl fmt::Debug for SimulationBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimulationBudget").finish_non_exhaustive()
    }
}

fn may_simulate(options: &DisruptionOptions) -> bool {
    options.simulation_budget.as_ref().is_none_or(SimulationBudget::may_start)
}

fn may_simulate_multi(options: &DisruptionOptions) -> bool {
    options.multi_node_budget.as_ref().is_none_or(SimulationBudget::may_start)
}

impl Default for DisruptionOptions {
    fn default() -> Self {
        DisruptionOptions {
            spot_to_spot_consolidation: false,
            spot_to_spot_min_instance_types: SPOT_TO_SPOT_MIN_TYPES,
            consolidation_min_savings: None,
            scheduler: SchedulerOptions {
                reserved_offering_mode: karpenter_scheduler::ReservedOfferingMode::Fallback,
                ..Default::default()
            },
            not_ready_nodes: BTreeSet::new(),
            multi_node_max_candidates: MULTI_NODE_MAX_CANDIDATES,
            every_verdict: true,
            consolidation_unchanged: false,
            simulation_budget: None,
            multi_node_budget: None,
            resume_single_node_after: None,
            honor_autoscaler_annotations: true,
            pod_deletion_cost_management: false,
            repair: repair::RepairOptions::default(),
            continue_after: None,
        }
    }
}

/// One disruption pass at `now`: the commands to start and a verdict for every node.
///
/// The methods run in [`Method::ORDER`] (upstream's: node repair, emptiness, static drift and drift, then
/// consolidation: multi-node, then single-node); the first that decides something provides the pass's command, and
/// the later ones still give each node their verdict (or `NotEvaluated` when they would only simulate for it).
pub fn evaluate(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    now: DateTime<Utc>,
    options: &DisruptionOptions,
) -> Pass {
    let cluster = Cluster::new(snapshot, pools, provider, now, options);
    let engine = Engine::new(cluster);
    let mut verdicts: BTreeMap<String, Reason> = BTreeMap::new();
    let mut cands: Vec<Candidate<'_>> = Vec::new();
    for n in &snapshot.nodes {
        // A candidate of a pool disrupted one topology domain at a time waits, unsimulated, while another
        // domain of its pool is being disrupted.
        match candidate(&engine.cluster, n).and_then(|c| engine.topology.block(&c).map_or(Ok(c), Err)) {
            Ok(c) => cands.push(c),
            Err(r) => {
                verdicts.insert(n.name.clone(), r);
            }
        }
    }
    let mut pass = PassState::new(&engine, &cands);
    for implementation in Method::ORDER.map(methods::of) {
        let method = implementation.method();
        // A method at or before the one whose command failed validation gives no command this pass.
        let skipped = !implementation.outside_method_loop() && options.continue_after.is_some_and(|a| method <= a);
        let closed = !pass.commands.is_empty() || skipped;
        let commands = implementation.evaluate(&mut pass, closed);
        if !closed {
            pass.commands = commands;
        }
    }
    let PassState { commands, results, resume_single_node_after, consolidation_moves, .. } = pass;
    // Nodes that only a method outside the candidates (node repair) considered: its result is their verdict.
    let in_cands: BTreeSet<&str> = cands.iter().map(|c| c.node.name.as_str()).collect();
    for (node, list) in &results.0 {
        if in_cands.contains(node.as_str()) {
            continue;
        }
        if let Some((method, r)) = list.first() {
            let reason = match r {
                Ok(detail) => Reason::Deferred { method: *method, detail: detail.clone() },
                Err(r) => r.clone(),
            };
            verdicts.insert(node.clone(), reason);
        }
    }
    verdicts.extend(candidate_verdicts(&engine, &cands, &commands, results));
    for c in commands.iter().flat_map(|c| c.candidates.iter().map(move |r| (r, c.method))) {
        verdicts.insert(c.0.node.clone(), Reason::Disrupted { method: c.1 });
    }
    Pass {
        api_version: API_VERSION.to_owned(),
        now: karpenter_api::time::rfc3339(now),
        verdicts: verdict_list(snapshot, verdicts, &commands),
        commands,
        budgets: engine.budgets.statuses(),
        resume_single_node_after,
        consolidation_moves,
    }
}

/// Each candidate's reason: part of a command (`Disrupted`), a method would act but the budget is spent by this
/// pass's commands (`BudgetExhausted`) or it waits for a later pass (`Deferred`), or the first method's reason
/// not to act.
fn candidate_verdicts(
    engine: &Engine<'_>,
    cands: &[Candidate<'_>],
    commands: &[Command],
    Results(mut results): Results,
) -> BTreeMap<String, Reason> {
    let in_command: BTreeMap<&str, Method> =
        commands.iter().flat_map(|c| c.candidates.iter().map(move |r| (r.node.as_str(), c.method))).collect();
    let mut taken: BTreeMap<&str, u32> = BTreeMap::new();
    for c in commands.iter().flat_map(|c| &c.candidates) {
        *taken.entry(c.node_pool.as_str()).or_default() += 1;
    }
    // The domains this pass's commands take: a candidate a method would act on in another domain of a keyed
    // pool waits for them.
    let mut chosen = engine.topology.clone();
    for c in cands.iter().filter(|c| in_command.contains_key(c.node.name.as_str())) {
        chosen.take(c);
    }
    let mut verdicts = BTreeMap::new();
    for c in cands {
        let name = c.node.name.clone();
        if let Some(m) = in_command.get(c.node.name.as_str()) {
            verdicts.insert(name, Reason::Disrupted { method: *m });
            continue;
        }
        let list = results.remove(&c.node.name).unwrap_or_default();
        let acting = list.iter().find_map(|(m, r)| r.as_ref().ok().map(|d| (*m, d.clone())));
        let reason = match acting {
            Some(_) if let Some(waiting) = chosen.block(c) => waiting,
            Some((m, detail)) => {
                let allowed = engine.budgets.allowed(c.pool_name, m.reason());
                let used = taken.get(c.pool_name).copied().unwrap_or(0);
                if used >= allowed {
                    let limiting =
                        engine.budgets.get(c.pool_name, m.reason()).map(|a| a.limiting.clone()).unwrap_or_default();
                    Reason::BudgetExhausted {
                        node_pool: c.pool_name.to_owned(),
                        reason: m.reason(),
                        detail: format!("{limiting}; {used} taken by this pass's commands"),
                    }
                } else {
                    Reason::Deferred { method: m, detail }
                }
            }
            None => list.into_iter().find_map(|(_, r)| r.err()).unwrap_or(Reason::NothingToDo),
        };
        verdicts.insert(name, reason);
    }
    verdicts
}

/// The verdicts by node name, with the node's claim and pool and a message (a command's explanation appended for
/// its candidates).
fn verdict_list(snapshot: &ClusterSnapshot, verdicts: BTreeMap<String, Reason>, commands: &[Command]) -> Vec<Verdict> {
    let explanations: BTreeMap<&str, &str> = commands
        .iter()
        .flat_map(|c| c.candidates.iter().map(move |r| (r.node.as_str(), c.explanation.as_str())))
        .collect();
    let nodes: BTreeMap<&str, &karpenter_scheduler::NodeInfo> =
        snapshot.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    verdicts
        .into_iter()
        .map(|(node, reason)| {
            let n = nodes.get(node.as_str()).copied();
            let message = match explanations.get(node.as_str()) {
                Some(e) => format!("{reason}: {e}"),
                None => reason.to_string(),
            };
            Verdict {
                node_claim: n.and_then(|n| n.node_claim.clone()),
                node_pool: n.and_then(|n| n.node_pool.clone()),
                outcome: reason.outcome(),
                message,
                reason,
                node,
            }
        })
        .collect()
}

/// Multi-node consolidation alone at `now`, as if no earlier method acted: the command of the binary
/// search over the sorted, budget-limited candidates (at most [`DisruptionOptions::multi_node_max_candidates`]),
/// if any.
pub fn multi_node_consolidation(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    now: DateTime<Utc>,
    options: &DisruptionOptions,
) -> Option<Command> {
    let cluster = Cluster::new(snapshot, pools, provider, now, options);
    let engine = Engine::new(cluster);
    let cands: Vec<Candidate<'_>> = snapshot
        .nodes
        .iter()
        .filter_map(|n| candidate(&engine.cluster, n).ok())
        .filter(|c| engine.topology.block(c).is_none())
        .collect();
    let eligible = methods::consolidation::Eligible::new(&engine, &cands);
    let refs: Vec<&Candidate<'_>> = eligible.sorted.iter().collect();
    let max = options.multi_node_max_candidates;
    methods::multi_node::search(&engine, &refs, max, || may_simulate_multi(options), &mut Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counted_budget_allows_exactly_its_simulations() {
        let budget = SimulationBudget::simulations(2);
        assert!(budget.may_start());
        assert!(budget.may_start());
        assert!(!budget.may_start(), "the third simulation is over budget");
        assert!(!budget.may_start(), "and it stays spent");
        assert!(!SimulationBudget::simulations(0).may_start());
        let unbounded = DisruptionOptions::default();
        assert!((0..1000).all(|_| may_simulate(&unbounded) && may_simulate_multi(&unbounded)));
    }
}
