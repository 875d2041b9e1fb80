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
//! * [`evaluate`]: one pass. Tries the methods in upstream's order (Emptiness, StaticDrift, Drift,
//!   MultiNodeConsolidation, SingleNodeConsolidation); the first that acts gives the pass's [`Command`]s (one
//!   command, or one per node for StaticDrift). In addition every node gets a [`Verdict`] computed against the
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
pub mod pods;
pub mod repair;
pub mod savings;
mod topology;
pub mod validation;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, Utc};
use karpenter_api::ProviderLabels;
use karpenter_scheduler::decision::NodeClaimPlan;
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions};

pub use command::{API_VERSION, Command, Decision, Method, Outcome, Pass, Reason, Verdict};
pub use engine::{MULTI_NODE_MAX_CANDIDATES, SPOT_TO_SPOT_MIN_TYPES};

use budget::Remaining;
use candidate::{Candidate, Cluster, candidate};
use engine::Engine;

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

/// Per candidate: per method, the result (`Ok(detail)` = the method would act).
type Results = BTreeMap<String, Vec<(Method, Result<String, Reason>)>>;

/// One disruption pass at `now`: the commands to start and a verdict for every node.
///
/// The methods run in upstream's order (emptiness, static drift and drift, then consolidation: multi-node, then
/// single-node); the first that decides something provides the pass's command, and the later ones still give
/// each node their verdict (or `NotEvaluated` when they would only simulate for it).
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
    let mut results: Results = BTreeMap::new();
    let mut record = |node: &str, m: Method, r: Result<String, Reason>| {
        results.entry(node.to_owned()).or_default().push((m, r));
    };
    // A method at or before the one whose command failed validation gives no command this pass.
    let skipped = |m: Method| options.continue_after.is_some_and(|after| m <= after);
    // Node repair first: a broken node is replaced before anything is consolidated.
    let mut commands: Vec<Command> = repair::repair(&engine, &mut record).into_iter().collect();
    let empty_command = emptiness(&engine, &cands, &mut record);
    if commands.is_empty() && !skipped(Method::Emptiness) {
        commands.extend(empty_command);
    }
    let static_commands = static_drift(&engine, &cands, &mut record);
    if commands.is_empty() && !skipped(Method::StaticDrift) {
        commands = static_commands;
    }
    let drift_command = drift(&engine, &cands, options, !commands.is_empty() || skipped(Method::Drift), &mut record);
    if commands.is_empty()
        && let Some(c) = drift_command.filter(|_| !skipped(Method::Drift))
    {
        commands.push(c);
    }
    let consolidated = consolidation(
        &engine,
        &cands,
        options,
        !commands.is_empty() || skipped(Method::SingleNodeConsolidation),
        skipped(Method::MultiNodeConsolidation),
        &mut record,
    );
    if commands.is_empty()
        && let Some(c) = consolidated.command.filter(|c| !skipped(c.method))
    {
        commands.push(c);
    }
    // Nodes repair acted on or found that no other method may consider (a do-not-disrupt node is still repaired):
    // their repair result is their verdict.
    let in_cands: BTreeSet<&str> = cands.iter().map(|c| c.node.name.as_str()).collect();
    for (node, list) in &results {
        if in_cands.contains(node.as_str()) {
            continue;
        }
        if let Some((_, r)) = list.iter().find(|(m, _)| *m == Method::Repair) {
            let reason = match r {
                Ok(detail) => Reason::Deferred { method: Method::Repair, detail: detail.clone() },
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
        resume_single_node_after: consolidated.resume_single_node_after,
    }
}

/// Emptiness: every empty candidate its budget allows, in one command.
fn emptiness<'a>(
    engine: &Engine<'a>,
    cands: &[Candidate<'a>],
    record: &mut impl FnMut(&str, Method, Result<String, Reason>),
) -> Option<Command> {
    let mut empties: Vec<&Candidate<'_>> = Vec::new();
    let remaining = Remaining::new(&engine.budgets, Method::Emptiness.reason());
    // In consolidation order, so that a pool's floor keeps the nodes a command would take last.
    let ordered = Engine::sorted(cands.iter().filter(|c| c.is_empty()));
    let mut taken: Vec<&Candidate<'_>> = Vec::new();
    for c in &ordered {
        let checked = emptiness_check(engine, c, &remaining).and_then(|()| {
            let mut with = taken.clone();
            with.push(c);
            engine.floor_allows(&with, &[])
        });
        match checked {
            Ok(()) => {
                record(&c.node.name, Method::Emptiness, Ok("empty".into()));
                taken.push(c);
            }
            Err(r) => record(&c.node.name, Method::Emptiness, Err(r)),
        }
    }
    empties.extend(taken);
    let mut sorted: Vec<Candidate<'_>> = Engine::sorted(empties.iter().copied());
    let mut remaining = remaining;
    let mut topology = engine.topology.clone();
    sorted.retain(|c| topology.block(c).is_none() && remaining.take(c.pool_name) && topology.admit(c).is_ok());
    let refs: Vec<&Candidate<'_>> = sorted.iter().collect();
    (!refs.is_empty()).then(|| Engine::command(Method::Emptiness, &refs, Vec::new(), "empty"))
}

/// What consolidation decided in a pass.
struct Consolidation {
    /// The multi-node command, else the first single-node one.
    command: Option<Command>,
    /// Where the next pass's single-node consolidation resumes ([`Pass::resume_single_node_after`]).
    resume_single_node_after: Option<String>,
}

/// Consolidation: eligibility, multi-node consolidation (unless an earlier method `decided` or the pass continues
/// after its failed command, `skip_multi`), then single-node verdicts for every eligible candidate (simulated only
/// until something is decided, unless [`DisruptionOptions::every_verdict`], and while the pass's simulation budget
/// lasts).
fn consolidation<'a>(
    engine: &Engine<'a>,
    cands: &[Candidate<'a>],
    options: &DisruptionOptions,
    decided: bool,
    skip_multi: bool,
    record: &mut impl FnMut(&str, Method, Result<String, Reason>),
) -> Consolidation {
    let remaining = Remaining::new(&engine.budgets, Method::SingleNodeConsolidation.reason());
    let mut eligible: Vec<&Candidate<'_>> = Vec::new();
    for c in cands.iter().filter(|c| !c.is_empty()) {
        match engine.consolidation_precheck(c) {
            Ok(()) => eligible.push(c),
            Err(r) => record(&c.node.name, Method::SingleNodeConsolidation, Err(r)),
        }
    }
    let sorted = Engine::sorted(eligible.iter().copied());
    let sorted_refs: Vec<&Candidate<'_>> = sorted.iter().collect();
    let multi = if !decided && !skip_multi && !options.consolidation_unchanged {
        engine.multi(&sorted_refs, options.multi_node_max_candidates, || may_simulate_multi(options))
    } else {
        None
    };
    let mut first_single: Option<Command> = None;
    // The domain multi-node consolidation's command took, else the first single-node command's, is the one its
    // keyed pool's other candidates would have to share.
    let mut topology = engine.topology.clone();
    for r in multi.iter().flat_map(|m| &m.candidates) {
        if let Some(c) = sorted.iter().find(|c| c.node.name == r.node) {
            topology.take(c);
        }
    }
    let mut single_order = Engine::single_order(&sorted);
    if let Some(after) = options.resume_single_node_after.as_deref()
        && let Some(i) = single_order.iter().position(|c| c.node.name == after)
    {
        single_order.rotate_left(i + 1);
    }
    // The last candidate simulated, and whether the budget stopped the loop after it.
    let mut last_simulated: Option<&str> = None;
    let mut ran_out = false;
    let method = Method::SingleNodeConsolidation;
    for c in single_order {
        let decided = decided || multi.is_some() || first_single.is_some();
        if decided && !options.every_verdict {
            record(&c.node.name, method, Err(Reason::NotEvaluated { method }));
            continue;
        }
        if options.consolidation_unchanged {
            record(&c.node.name, method, Err(Reason::ConsolidationUnchanged));
            continue;
        }
        if let Some(r) = topology.block(c) {
            record(&c.node.name, method, Err(r));
            continue;
        }
        if let Some(r) = engine.budget_block(c, method, &remaining) {
            record(&c.node.name, method, Err(r));
            continue;
        }
        if ran_out || !may_simulate(options) {
            ran_out = true;
            record(&c.node.name, method, Err(Reason::PassTimeSpent { method }));
            continue;
        }
        last_simulated = Some(c.node.name.as_str());
        match engine.single(c) {
            Ok(cmd) => {
                record(&c.node.name, method, Ok(cmd.explanation.clone()));
                if first_single.is_none() {
                    topology.take(c);
                    first_single = Some(cmd);
                }
            }
            Err(r) => record(&c.node.name, method, Err(r)),
        }
    }
    // Where the next pass resumes: after the last candidate simulated (where this pass started when it
    // simulated none).
    let resume_single_node_after = ran_out
        .then(|| last_simulated.map(str::to_owned).or_else(|| options.resume_single_node_after.clone()))
        .flatten();
    Consolidation { command: multi.or(first_single), resume_single_node_after }
}

/// Each candidate's reason: part of a command (`Disrupted`), a method would act but the budget is spent by this
/// pass's commands (`BudgetExhausted`) or it waits for a later pass (`Deferred`), or the first method's reason
/// not to act.
fn candidate_verdicts(
    engine: &Engine<'_>,
    cands: &[Candidate<'_>],
    commands: &[Command],
    mut results: Results,
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
    let eligible = cands.iter().filter(|c| !c.is_empty() && engine.consolidation_precheck(c).is_ok());
    let sorted = Engine::sorted(eligible);
    let refs: Vec<&Candidate<'_>> = sorted.iter().collect();
    engine.multi(&refs, options.multi_node_max_candidates, || may_simulate_multi(options))
}

pub(crate) fn emptiness_check(engine: &Engine<'_>, c: &Candidate<'_>, remaining: &Remaining) -> Result<(), Reason> {
    let pool = c.pool.node_pool;
    if pool.is_static() {
        return Err(Reason::StaticNodePool);
    }
    if pool.spec.disruption.consolidate_after.is_never() {
        return Err(Reason::ConsolidationDisabled);
    }
    if let Some(buffers) = engine.buffer_hosts.get(&c.node.name) {
        return Err(Reason::HostsCapacityBuffer { buffers: buffers.iter().cloned().collect() });
    }
    candidate::consolidatable(c.claim, pool, engine.cluster.now)?;
    if let Some(r) = c.pod_block_for(true) {
        return Err(r.clone());
    }
    if let Some(r) = engine.budget_block(c, Method::Emptiness, remaining) {
        return Err(r);
    }
    Ok(())
}

/// Drift: the first drifted candidate, oldest-drifted with empties first, that has budget and whose
/// pods all fit gives the command. With `every_verdict` every drifted candidate is simulated (for its verdict);
/// without, the simulations stop at the first command (or are all skipped when the pass already `decided`).
/// Once the options' simulation budget is spent the rest are not simulated ([`Reason::PassTimeSpent`]).
fn drift<'a>(
    engine: &Engine<'a>,
    cands: &[Candidate<'a>],
    options: &DisruptionOptions,
    decided: bool,
    record: &mut impl FnMut(&str, Method, Result<String, Reason>),
) -> Option<Command> {
    let mut drifted: Vec<&Candidate<'a>> =
        cands.iter().filter(|c| c.drifted_since.is_some() && !c.pool.node_pool.is_static()).collect();
    drifted.sort_by(|a, b| {
        let ta = a.drifted_since.flatten();
        let tb = b.drifted_since.flatten();
        ta.cmp(&tb).then_with(|| a.node.name.cmp(&b.node.name))
    });
    // Stable partition: empty (no reschedulable pods) first.
    drifted.sort_by_key(|c| !c.reschedulable.is_empty());
    let remaining = Remaining::new(&engine.budgets, Method::Drift.reason());
    let mut topology = engine.topology.clone();
    let mut command = None;
    for c in drifted {
        if let Some(r) = c.pod_block_for(false) {
            record(&c.node.name, Method::Drift, Err(r.clone()));
            continue;
        }
        if let Some(r) = topology.block(c) {
            record(&c.node.name, Method::Drift, Err(r));
            continue;
        }
        if let Some(r) = engine.budget_block(c, Method::Drift, &remaining) {
            record(&c.node.name, Method::Drift, Err(r));
            continue;
        }
        if (decided || command.is_some()) && !options.every_verdict {
            record(&c.node.name, Method::Drift, Err(Reason::NotEvaluated { method: Method::Drift }));
            continue;
        }
        if !may_simulate(options) {
            record(&c.node.name, Method::Drift, Err(Reason::PassTimeSpent { method: Method::Drift }));
            continue;
        }
        // A pool with no room for the replacement (at its limits) deletes first (upstream v1.15): the freed room
        // then takes the replacement through provisioning, instead of the drift waiting forever.
        let simulated = match engine.simulate(&[c], false) {
            Ok(d) => Ok((d.new_node_claims, "drifted".to_owned())),
            Err(e @ Reason::PodsUnschedulable { .. }) => match repair::no_room(engine, c) {
                Some(why) => Ok((Vec::new(), format!("drifted; {why}, so it goes first"))),
                None => Err(e),
            },
            Err(e) => Err(e),
        };
        match simulated.and_then(|(plans, what)| engine.floor_allows(&[c], &plans).map(|()| (plans, what))) {
            Ok((plans, what)) => {
                let cmd = Engine::command(Method::Drift, &[c], plans, &what);
                record(&c.node.name, Method::Drift, Ok(cmd.explanation.clone()));
                if command.is_none() {
                    topology.take(c);
                    command = Some(cmd);
                }
            }
            Err(r) => record(&c.node.name, Method::Drift, Err(r)),
        }
    }
    command
}

/// StaticDrift: per static pool, replace up to `min(budget, drifted)` nodes (within `limits.nodes`),
/// each with one NodeClaim from the template.
fn static_drift<'a>(
    engine: &Engine<'a>,
    cands: &[Candidate<'a>],
    record: &mut impl FnMut(&str, Method, Result<String, Reason>),
) -> Vec<Command> {
    let mut by_pool: BTreeMap<&str, Vec<&Candidate<'a>>> = BTreeMap::new();
    for c in cands.iter().filter(|c| c.drifted_since.is_some() && c.pool.node_pool.is_static()) {
        by_pool.entry(c.pool_name).or_default().push(c);
    }
    let snapshot = engine.cluster.snapshot;
    let mut topology = engine.topology.clone();
    let mut out = Vec::new();
    for (pool_name, mut list) in by_pool {
        list.sort_by(|a, b| {
            a.drifted_since.flatten().cmp(&b.drifted_since.flatten()).then(a.node.name.cmp(&b.node.name))
        });
        let Some(pool) = engine.cluster.pools.get(pool_name).map(|p| p.node_pool) else { continue };
        let replicas = pool.spec.replicas.unwrap_or(0).max(0) as u64;
        let claims: Vec<_> =
            snapshot.node_claims.iter().filter(|c| c.node_pool.as_deref() == Some(pool_name)).collect();
        let running = claims.iter().filter(|c| !c.marked_for_deletion).count() as u64;
        let pending_disruption = claims.iter().filter(|c| c.marked_for_deletion).count() as u64;
        let mut n = engine.budgets.allowed(pool_name, Method::StaticDrift.reason()) as usize;
        let mut wait = None;
        if running + pending_disruption > replicas && running > replicas {
            wait = Some(format!("scale-down in progress ({running} running, {replicas} replicas)"));
            n = 0;
        }
        // Each command launches its replacement before its node goes, so it needs room under `limits.nodes`
        // (every NodeClaim of the pool counts, deleting ones too); a node without room waits, as upstream's
        // reservation against the limit grants no more commands than that.
        let mut room = usize::MAX;
        let mut full = String::new();
        if let Some(limit) = pool.spec.limits.get(karpenter_api::nodepool::NODES_LIMIT) {
            let limit: u64 = limit.0.parse().unwrap_or(0);
            room = limit.saturating_sub(claims.len() as u64) as usize;
            full = format!("no room for a replacement under limits.nodes {limit} ({} NodeClaims)", claims.len());
        }
        let mut taken = 0;
        for c in list {
            if taken < n {
                if let Some(r) = topology.block(c) {
                    record(&c.node.name, Method::StaticDrift, Err(r));
                    continue;
                }
                if taken >= room {
                    record(&c.node.name, Method::StaticDrift, Err(Reason::StaticDriftWaiting { detail: full.clone() }));
                    continue;
                }
                let plan = match NodeClaimPlan::from_template(pool, format!("{pool_name}-replacement-{}", taken + 1)) {
                    Ok(plan) => plan,
                    Err(e) => {
                        // Validation rejects such a pool; nothing to replace with until it is fixed.
                        let detail = format!("NodePool {pool_name} has invalid requirements: {e}");
                        record(&c.node.name, Method::StaticDrift, Err(Reason::StaticDriftWaiting { detail }));
                        continue;
                    }
                };
                let cmd = Engine::command(Method::StaticDrift, &[c], vec![plan], "drifted (static pool)");
                record(&c.node.name, Method::StaticDrift, Ok(cmd.explanation.clone()));
                topology.take(c);
                taken += 1;
                out.push(cmd);
            } else if let Some(w) = &wait {
                record(&c.node.name, Method::StaticDrift, Err(Reason::StaticDriftWaiting { detail: w.clone() }));
            } else {
                let remaining = Remaining::default();
                if let Some(r) = engine.budget_block(c, Method::StaticDrift, &remaining) {
                    record(&c.node.name, Method::StaticDrift, Err(r));
                }
            }
        }
    }
    out
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
