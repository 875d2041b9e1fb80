//! The disruption loop and how it starts commands. See the [module docs](super).
//!
//! [`Disruption::step`] is one iteration without timers; it returns a [`StepReport`] saying what it did and when
//! to step again. An iteration:
//!
//! 1. advances the commands in flight: a command whose replacements are all `Initialized` deletes its
//!    candidates' NodeClaims (`DisruptionTerminating`, `karpenter_nodeclaims_disrupted_total`,
//!    `karpenter_pods_disruption_initiated_total`); one whose replacement is gone, or that waited longer than
//!    `clamp(80 ms × queued candidates, 10 min, 1 h)`, is rolled back (`karpenter_voluntary_disruption_queue_failures_total`);
//!    otherwise `DisruptionLaunching` / `DisruptionWaitingReadiness` events;
//! 2. waits (1 s) while the cluster state is not synced;
//! 3. if a command awaits validation: before the delay has passed, nothing else; after it, re-checks the
//!    command against a fresh snapshot and starts it, or drops it (`ConsolidationRejected`,
//!    `karpenter_voluntary_disruption_failed_validations_total`) and, as upstream's method loop, goes on with the
//!    methods after the dropped command's in this iteration (multi-node consolidation's hands over to single-node
//!    consolidation; `karpenter_disruption::validation::continue_after`);
//! 4. removes the `karpenter.sh/disrupted` taint and the `DisruptionReason` condition from nodes that are in no
//!    command and not being deleted (what a crash mid-command leaves behind);
//! 5. evaluates a pass, publishes its verdicts and budgets, and takes its command: drift commands start at once,
//!    emptiness and consolidation commands wait for validation.
//!
//! Commands are started as upstream's `StartCommand` does: candidates tainted and given `DisruptionReason=True`
//! (any failure rolls back what was done), replacements created
//! (`karpenter_nodeclaims_created_total{reason=<method reason>}`), candidates marked for deletion in the cluster
//! state after the replacements exist, `karpenter_voluntary_disruption_decisions_total`. A command without
//! replacements deletes at once.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Taint as CoreTaint};
use karpenter_api::condition::ConditionStatus;
use karpenter_api::labels::{self, taints};
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_api::nodepool::{ConsolidationPolicy, DisruptionReason};
use karpenter_api::{CompactPod, NodeClaim, NodePool};
use karpenter_cloudprovider::CloudProvider;
use karpenter_cloudprovider::time::Stopwatch;
use karpenter_disruption::SimulationBudget;
use karpenter_disruption::command::{Command, Decision, Method, Outcome, Pass, Reason};
use karpenter_disruption::validation::{
    FailureKind, NextStep, VALIDATION_DELAY, ValidationFailure, continue_after, next_step, validate,
};
use karpenter_requirements::InstanceType;
use karpenter_scheduler::snapshot::{SnapshotError, is_daemon_set_pod, pod_key};
use karpenter_scheduler::{PoolInput, build_node_claim};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use karpenter_api::condition::{remove_condition, set_condition};
use karpenter_api::time::chrono_duration;

use crate::context::ControllerContext;
use crate::events::{Event, reasons};
use crate::kube_util::{delete_ignoring_missing, is_not_found, label, lock, retry_write_conflicts};
use crate::state::simulate_off_runtime;

// Node repair's reboot flow (prepare, drain, reboot, judge the node that came back) is a room of its own.
mod reboot;

pub use reboot::REBOOT_TIMEOUT;
use reboot::RebootFlight;

/// The controller name in logs.
pub const CONTROLLER: &str = "disruption";
/// Idle requeue of the loop.
pub const POLL_INTERVAL: Duration = Duration::from_secs(10);
/// Candidates marked, rolled back or deleted at once: a command may hold hundreds of empty nodes, and one after
/// another their requests took minutes on a busy API server.
const WRITE_CONCURRENCY: usize = 16;
/// Requeue while the cluster state is not synced.
pub const UNSYNCED_RETRY: Duration = Duration::from_secs(1);
/// Requeue while commands wait for their replacements.
pub const IN_FLIGHT_POLL: Duration = Duration::from_secs(1);
/// The time one pass may spend simulating (drift, multi-node and single-node consolidation together). A pass
/// over 2,000 nodes whose pods spread by hostname simulated every candidate against the whole cluster and took
/// up to 90 s, holding the loop (and a runtime thread) the whole time; with this bound a pass takes a few
/// seconds and the next one resumes single-node consolidation where it stopped. Multi-node consolidation gets
/// the first third of it ([`DisruptionSettings::pass_simulation_time`]), so it cannot starve single-node
/// consolidation. Upstream bounds multi-node consolidation by 1 minute and single-node consolidation by 3.
pub const PASS_SIMULATION_TIME: Duration = Duration::from_secs(3);

/// Settings of the disruption loop.
#[derive(Debug, Clone)]
pub struct DisruptionSettings {
    /// Idle requeue ([`POLL_INTERVAL`]).
    pub poll_interval: Duration,
    /// Validation wait ([`VALIDATION_DELAY`], karpenter-disruption's).
    pub validation_delay: Duration,
    /// Feature gate `SpotToSpotConsolidation`.
    pub spot_to_spot_consolidation: bool,
    /// `SPOT_TO_SPOT_MIN_INSTANCE_TYPES`: cheaper instance types single-node spot-to-spot consolidation needs.
    pub spot_to_spot_min_instance_types: usize,
    /// `CONSOLIDATION_MIN_SAVINGS`: the cluster-wide minimum saving of replacements and multi-node moves.
    pub consolidation_min_savings: Option<karpenter_disruption::savings::MinSavings>,
    /// Shortest time a command waits for its replacements (upstream: 10 min).
    pub min_replacement_timeout: Duration,
    /// Longest time a command waits for its replacements (upstream: 1 h).
    pub max_replacement_timeout: Duration,
    /// Per queued candidate node (upstream: 80 ms).
    pub replacement_timeout_per_candidate: Duration,
    /// The simulation time of one pass ([`PASS_SIMULATION_TIME`]).
    pub pass_simulation_time: Duration,
    /// `HONOR_AUTOSCALER_ANNOTATIONS`: other autoscalers' annotations block voluntary disruption as
    /// `karpenter.sh/do-not-disrupt` does (karpenter-disruption's `DisruptionOptions`).
    pub honor_autoscaler_annotations: bool,
    /// `CLUSTER_LIMITS`: replacements must fit them, as they must fit their NodePool's limits.
    pub cluster_limits: karpenter_requirements::ResourceList,
    /// Feature gate `PodDeletionCostManagement`: pods' eviction cost reads only `karpenter.sh/disruption-cost`.
    pub pod_deletion_cost_management: bool,
    /// `SCHEDULER_CONFIG`: the simulations give pods the default topology spread constraints provisioning does.
    pub scheduler_config: karpenter_scheduler::SchedulerConfig,
    /// Node repair runs as a disruption method: gate `NodeRepair` on and `LEGACY_NODE_REPAIR` off.
    pub node_repair: bool,
    /// `IGNORE_DRA_REQUESTS`: the simulations treat pods with DRA claims as provisioning does.
    pub ignore_dra_requests: bool,
    /// Threads that check existing nodes for each pod of a simulation: `ceil(CPU_REQUESTS / 1000)`, as
    /// provisioning (upstream's disruption simulations use the provisioner's scheduler).
    pub scheduler_parallelism: usize,
    /// `PREFERENCE_POLICY`: with `Ignore` the simulations drop pods' preferences, as provisioning does
    /// (upstream's disruption simulations read the same option).
    pub preference_policy: karpenter_requirements::PreferencePolicy,
    /// `MIN_VALUES_POLICY`: the simulations judge minValues as provisioning does (upstream reads it too).
    pub min_values_policy: karpenter_requirements::MinValuesPolicy,
}

impl Default for DisruptionSettings {
    fn default() -> Self {
        Self {
            poll_interval: POLL_INTERVAL,
            validation_delay: VALIDATION_DELAY,
            spot_to_spot_consolidation: false,
            spot_to_spot_min_instance_types: karpenter_disruption::SPOT_TO_SPOT_MIN_TYPES,
            consolidation_min_savings: None,
            min_replacement_timeout: Duration::from_secs(10 * 60),
            max_replacement_timeout: Duration::from_secs(60 * 60),
            replacement_timeout_per_candidate: Duration::from_millis(80),
            pass_simulation_time: PASS_SIMULATION_TIME,
            honor_autoscaler_annotations: true,
            cluster_limits: karpenter_requirements::ResourceList::new(),
            pod_deletion_cost_management: false,
            scheduler_config: karpenter_scheduler::SchedulerConfig::default(),
            node_repair: false,
            ignore_dra_requests: true,
            scheduler_parallelism: 1,
            preference_policy: karpenter_requirements::PreferencePolicy::default(),
            min_values_policy: karpenter_requirements::MinValuesPolicy::default(),
        }
    }
}

impl DisruptionSettings {
    /// The settings for `settings` (the `SpotToSpotConsolidation` gate, `HONOR_AUTOSCALER_ANNOTATIONS`).
    pub fn from_settings(settings: &crate::settings::CoreSettings) -> Self {
        Self {
            spot_to_spot_consolidation: settings.decisions.feature_gates.spot_to_spot_consolidation,
            spot_to_spot_min_instance_types: settings.decisions.spot_to_spot_min_instance_types,
            consolidation_min_savings: settings.decisions.consolidation_min_savings.0,
            honor_autoscaler_annotations: settings.decisions.honor_autoscaler_annotations,
            cluster_limits: settings.decisions.cluster_limits.clone(),
            pod_deletion_cost_management: settings.decisions.feature_gates.pod_deletion_cost_management,
            scheduler_config: settings.decisions.scheduler_config.clone(),
            node_repair: settings.decisions.feature_gates.node_repair && !settings.legacy_node_repair,
            ignore_dra_requests: settings.decisions.ignore_dra_requests,
            scheduler_parallelism: settings.scheduler_parallelism(),
            preference_policy: settings.decisions.preference_policy,
            min_values_policy: settings.decisions.min_values_policy,
            ..Self::default()
        }
    }

    /// These settings with the timings of `other` (poll interval, validation wait, replacement timeouts, pass
    /// simulation time).
    pub fn with_timings_of(self, other: &Self) -> Self {
        Self {
            poll_interval: other.poll_interval,
            validation_delay: other.validation_delay,
            min_replacement_timeout: other.min_replacement_timeout,
            max_replacement_timeout: other.max_replacement_timeout,
            replacement_timeout_per_candidate: other.replacement_timeout_per_candidate,
            pass_simulation_time: other.pass_simulation_time,
            ..self
        }
    }

    /// How long commands may wait for replacements when `queued` candidate nodes are in flight.
    pub fn replacement_timeout(&self, queued: usize) -> Duration {
        let scaled = self.replacement_timeout_per_candidate.saturating_mul(u32::try_from(queued).unwrap_or(u32::MAX));
        scaled.clamp(self.min_replacement_timeout, self.max_replacement_timeout)
    }
}

/// Why an iteration failed as a whole (per-command failures are in the [`StepReport`]).
#[derive(Debug, thiserror::Error)]
pub enum DisruptionError {
    /// A quantity in the cluster state does not parse.
    #[error("building the disruption snapshot: {0}")]
    Snapshot(#[from] SnapshotError),
    /// The runtime stopped while the pass simulated.
    #[error("the controller is shutting down")]
    ShuttingDown,
}

/// What one [`Disruption::step`] did.
#[derive(Debug, Default)]
pub struct StepReport {
    /// Set when the loop waited on the cluster state (why).
    pub waiting: Option<String>,
    /// The pass evaluated this step, if any.
    pub pass: Option<Pass>,
    /// A command computed this step that now waits for validation.
    pub awaiting_validation: Option<Command>,
    /// A command dropped by validation, with why.
    pub rejected: Option<ValidationFailure>,
    /// Commands started this step.
    pub started: Vec<Command>,
    /// Replacement NodeClaims created this step.
    pub replacements: Vec<String>,
    /// Candidate NodeClaims deleted this step.
    pub deleted: Vec<String>,
    /// Commands rolled back this step (their candidate nodes, and why).
    pub rolled_back: Vec<(Vec<String>, String)>,
    /// Nodes whose stale disrupted taint or `DisruptionReason` condition was removed.
    pub cleaned: Vec<String>,
    /// Errors that did not stop the step.
    pub errors: Vec<String>,
    /// When to step again.
    pub requeue: Duration,
}

/// A candidate of a started command.
#[derive(Debug, Clone)]
struct Target {
    node: String,
    claim: String,
    pool: String,
    capacity_type: String,
}

/// A command started and not finished.
#[derive(Debug, Clone)]
struct InFlight {
    command: Command,
    targets: Vec<Target>,
    replacements: Vec<String>,
    started: DateTime<Utc>,
}

/// A command waiting for its validation.
#[derive(Debug, Clone)]
struct Pending {
    command: Command,
    computed: DateTime<Utc>,
}

#[derive(Debug, Default)]
struct Inner {
    pending: Option<Pending>,
    in_flight: Vec<InFlight>,
    /// Reboots draining their node.
    reboots: Vec<RebootFlight>,
    /// The state's consolidation state when a pass last found nothing for consolidation to do, and when.
    consolidated: Option<(u64, DateTime<Utc>)>,
    /// Where the last pass's simulation time ran out in single-node consolidation: the next pass resumes there.
    resume_single_node_after: Option<String>,
}

/// Consolidation runs again at least this often although nothing changed: time alone changes some answers
/// (consolidateAfter elapsing, budget schedules, nominations expiring). Upstream's forced refresh.
pub const CONSOLIDATION_REFRESH: Duration = Duration::from_secs(5 * 60);

/// Whether a pass without commands found consolidation with nothing to do: no candidate left for a later pass
/// (deferred, not simulated because a command was found or the pass's time ran out) and none held back by a
/// budget.
fn found_nothing(pass: &Pass) -> bool {
    pass.commands.is_empty()
        && !pass.verdicts.iter().any(|v| {
            matches!(
                v.reason,
                Reason::BudgetExhausted { .. }
                    | Reason::Deferred { .. }
                    | Reason::NotEvaluated { .. }
                    | Reason::PassTimeSpent { .. }
            )
        })
}

/// The disruption loop (see the module docs).
pub struct Disruption {
    ctx: ControllerContext,
    settings: DisruptionSettings,
    inner: Mutex<Inner>,
    /// The provider's repair policies when node repair runs here (validated at start).
    repair_policies: Option<karpenter_api::repair::RepairPolicies>,
    /// Node repair's memory: failed repairs per pool, and whether the provider refused a reboot.
    repair: std::sync::Mutex<RepairMemory>,
}

/// What node repair remembers between passes (see [`karpenter_disruption::repair::RepairOptions`]).
#[derive(Debug, Default)]
struct RepairMemory {
    /// Repair commands rolled back (replacements that never initialized), by pool, with when.
    failures: Vec<(String, DateTime<Utc>)>,
    /// The provider answered `NotImplemented` to a reboot: reboot policies replace instead.
    reboot_unsupported: bool,
    /// Nodes whose reboot is being prepared (draining): repair leaves them alone.
    rebooting: BTreeSet<String>,
    /// NodeClaims whose reboot did not help (back unhealthy, or not back within [`REBOOT_TIMEOUT`]): repair
    /// replaces them. Kept in memory, as upstream keeps its reboot history.
    escalated: BTreeSet<String>,
}

/// How long a failed repair weighs on its pool's order.
pub const REPAIR_FAILURE_MEMORY: Duration = Duration::from_secs(60 * 60);

impl fmt::Debug for Disruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Disruption").field("settings", &self.settings).finish_non_exhaustive()
    }
}

/// `delete` / `replace`.
fn decision_label(d: Decision) -> &'static str {
    match d {
        Decision::Delete => "delete",
        Decision::Replace => "replace",
        Decision::Reboot => "reboot",
    }
}

/// `karpenter_voluntary_disruption_consolidation_timeouts_total`: once per consolidation method whose evaluation
/// the pass's simulation budget cut short (candidates left with `PassTimeSpent`), as upstream counts a single- or
/// multi-node consolidation that hit its timeout once per evaluation.
fn count_consolidation_timeouts(metrics: &crate::metrics::Metrics, pass: &Pass) {
    let timed_out: BTreeSet<&'static str> = pass
        .verdicts
        .iter()
        .filter_map(|v| match v.reason {
            Reason::PassTimeSpent { method } => Some(method.consolidation_type()),
            _ => None,
        })
        .filter(|t| !t.is_empty())
        .collect();
    for consolidation_type in timed_out {
        metrics.voluntary_disruption_consolidation_timeouts(consolidation_type).inc();
    }
}

/// `karpenter_consolidation_moves_total` and `karpenter_consolidation_score` for the pass's consolidation moves, as
/// upstream's Balanced evaluator counts them: every move of any policy counted, by the move's decision (approved or
/// rejected), its NodePool and the pool's policy as the NodePool spells it; the Balanced pools' scores observed by
/// each pool's own decision.
fn count_consolidation_moves(metrics: &crate::metrics::Metrics, pass: &Pass) {
    let approval = |approved: bool| if approved { "approved" } else { "rejected" };
    for m in &pass.consolidation_moves {
        let policy = match m.policy {
            ConsolidationPolicy::WhenEmpty => "WhenEmpty",
            ConsolidationPolicy::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
            ConsolidationPolicy::Balanced => "Balanced",
        };
        metrics.consolidation_moves(approval(m.approved), &m.node_pool, policy).inc();
        if let Some(score) = m.score {
            metrics.consolidation_score(approval(m.pool_approved()), &m.node_pool, policy).observe(score);
        }
    }
}

fn reason_label(c: &Command) -> String {
    c.reason.as_str().to_lowercase()
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

impl Disruption {
    /// A disruption loop writing through the context's client, on `settings`' timings.
    pub fn new(ctx: &ControllerContext, settings: DisruptionSettings) -> Self {
        let repair_policies = if settings.node_repair { crate::repair::policies(ctx) } else { None };
        Self { ctx: ctx.clone(), settings, inner: Mutex::default(), repair_policies, repair: Default::default() }
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.ctx.client.clone())
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.ctx.client.clone())
    }

    /// Node names of the commands in flight.
    pub async fn in_flight_nodes(&self) -> Vec<String> {
        let inner = self.inner.lock().await;
        inner.in_flight.iter().flat_map(|c| c.targets.iter().map(|t| t.node.clone())).collect()
    }

    /// The command waiting for validation, if any.
    pub async fn pending_command(&self) -> Option<Command> {
        self.inner.lock().await.pending.as_ref().map(|p| p.command.clone())
    }

    /// Runs the loop until `shutdown`: steps, then sleeps what the step asked for.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let passes = self.ctx.metrics.reconciler(CONTROLLER, 1);
        loop {
            let pass = passes.pass();
            let step = self.step().await;
            pass.finish(crate::metrics::ReconcileResult::of_pass(&step));
            let wait = match step {
                Ok(report) => {
                    for e in &report.errors {
                        tracing::error!(controller = CONTROLLER, error = %e, "disruption");
                    }
                    report.requeue
                }
                Err(e) => {
                    tracing::error!(controller = CONTROLLER, error = %e, "disruption pass failed");
                    self.settings.poll_interval
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait.max(Duration::from_millis(10))) => {}
            }
        }
    }

    /// One iteration (see the module docs).
    pub async fn step(&self) -> Result<StepReport, DisruptionError> {
        let mut report = StepReport { requeue: self.settings.poll_interval, ..StepReport::default() };
        let mut inner = self.inner.lock().await;
        self.advance(&mut inner, &mut report).await;
        self.advance_reboots(&mut inner, &mut report).await;
        let busy = !inner.in_flight.is_empty() || !inner.reboots.is_empty();
        let settle = |report: &mut StepReport, d: Duration| {
            report.requeue = if busy { d.min(IN_FLIGHT_POLL) } else { d };
        };

        self.ctx.metrics.cluster_state_synced().set(if self.ctx.state.synced() { 1.0 } else { 0.0 });
        if let Some(reason) = self.ctx.state.unsynced_reason() {
            report.waiting = Some(reason);
            settle(&mut report, UNSYNCED_RETRY);
            return Ok(report);
        }

        let now = self.ctx.clock.now();
        // Set when a command failed validation and the methods after its own still get their turn now.
        let mut continuing = None;
        if let Some(p) = inner.pending.take() {
            let due = p.computed + chrono_duration(self.settings.validation_delay);
            if now < due {
                let left = (due - now).to_std().unwrap_or(Duration::ZERO);
                inner.pending = Some(p);
                settle(&mut report, left);
                return Ok(report);
            }
            match self.validate(&p.command).await {
                Ok(command) => self.start(&mut inner, command, &mut report).await,
                Err(failure) => {
                    self.rejected(&p.command, failure, &mut report);
                    continuing = continue_after(&p.command);
                }
            }
            if continuing.is_none() {
                settle(&mut report, Duration::ZERO);
                return Ok(report);
            }
        }

        self.clean_stale(&inner, &mut report).await;
        self.finish_reboots(&mut report).await;

        let now = self.ctx.clock.now();
        let state_before = self.ctx.state.consolidation_state();
        let unchanged = inner
            .consolidated
            .is_some_and(|(state, at)| state == state_before && now - at < chrono_duration(CONSOLIDATION_REFRESH));
        // A pass that skips consolidation keeps the resume point for the next one that runs it.
        let resume = if unchanged { None } else { inner.resume_single_node_after.clone() };
        let pass = self.evaluate_pass(unchanged, resume, continuing).await?;
        if !unchanged {
            // A pass that skipped multi-node consolidation cannot say that consolidation has nothing to do.
            inner.consolidated = (found_nothing(&pass) && continuing.is_none()).then_some((state_before, now));
            inner.resume_single_node_after.clone_from(&pass.resume_single_node_after);
        }
        self.publish(&pass);
        let step = next_step(pass.commands.clone());
        report.pass = Some(pass);
        match step {
            NextStep::Idle => settle(&mut report, self.settings.poll_interval),
            NextStep::ValidateAfterDelay(command) => {
                report.awaiting_validation = Some(command.clone());
                inner.pending = Some(Pending { command, computed: now });
                settle(&mut report, self.settings.validation_delay);
            }
            NextStep::StartNow(commands) => {
                for c in commands {
                    self.start(&mut inner, c, &mut report).await;
                }
                settle(&mut report, Duration::ZERO);
            }
        }
        Ok(report)
    }

    /// The NodePools (not deleting) with their instance types; a pool whose types cannot be listed is left out.
    async fn pools(&self, pools: &[NodePool]) -> Vec<(NodePool, Arc<[InstanceType]>)> {
        let mut out = Vec::new();
        for pool in pools.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
            match self.ctx.cloud.instance_types(pool).await {
                Ok(its) => out.push((pool.clone(), its)),
                Err(e) => crate::kube_util::log_instance_types_error(
                    CONTROLLER,
                    &pool.name_any(),
                    &e,
                    "the pool's nodes are not disrupted this pass",
                ),
            }
        }
        out
    }

    fn options(&self) -> karpenter_disruption::DisruptionOptions {
        let not_ready_nodes: BTreeSet<String> =
            self.ctx.state.list_shared::<Node>().iter().filter(|n| !node_ready(n)).map(|n| n.name_any()).collect();
        karpenter_disruption::DisruptionOptions {
            spot_to_spot_consolidation: self.settings.spot_to_spot_consolidation,
            spot_to_spot_min_instance_types: self.settings.spot_to_spot_min_instance_types,
            consolidation_min_savings: self.settings.consolidation_min_savings,
            honor_autoscaler_annotations: self.settings.honor_autoscaler_annotations,
            pod_deletion_cost_management: self.settings.pod_deletion_cost_management,
            not_ready_nodes,
            // One command per pass: stop simulating once it is found (the verdicts of the rest wait for a
            // later pass).
            every_verdict: false,
            scheduler: karpenter_scheduler::SchedulerOptions {
                cluster_limits: self.settings.cluster_limits.clone(),
                scheduler_config: self.settings.scheduler_config.clone(),
                ignore_dra_requests: self.settings.ignore_dra_requests,
                parallelism: self.settings.scheduler_parallelism,
                preference_policy: self.settings.preference_policy,
                min_values_policy: self.settings.min_values_policy,
                ..karpenter_disruption::DisruptionOptions::default().scheduler
            },
            repair: self.repair_options(),
            ..Default::default()
        }
    }

    /// Node repair's inputs: the unhealthy nodes now, with reboots in progress left out (never issued twice) and
    /// reboots that did not help (or that the provider refused) turned into replacements; the pools' recent
    /// failures.
    fn repair_options(&self) -> karpenter_disruption::repair::RepairOptions {
        let Some(policies) = &self.repair_policies else { return Default::default() };
        let now = self.ctx.clock.now();
        let mut unhealthy = crate::repair::unhealthy_nodes(&self.ctx.state, policies, now);
        let mut memory = lock(&self.repair);
        memory.failures.retain(|(_, at)| now - *at < chrono_duration(REPAIR_FAILURE_MEMORY));
        let mut failures: BTreeMap<String, u32> = BTreeMap::new();
        for (pool, _) in &memory.failures {
            *failures.entry(pool.clone()).or_default() += 1;
        }
        let reboot_unsupported = memory.reboot_unsupported;
        for node in &memory.rebooting {
            unhealthy.remove(node);
        }
        let escalated = memory.escalated.clone();
        drop(memory);
        for claim in self.ctx.state.list_shared::<NodeClaim>() {
            let Some(node) = claim.node_name() else { continue };
            let Some(m) = unhealthy.get_mut(node) else { continue };
            if reboot_unsupported || escalated.contains(&claim.name_any()) {
                m.action = karpenter_api::repair::RepairAction::Replace;
            }
            // A reboot under way (`finish_reboots` judges its end before each pass): not again, and nothing
            // else either.
            if claim.annotations().contains_key(labels::annotations::REBOOT_PRE_BOOT_ID) {
                unhealthy.remove(node);
            }
        }
        karpenter_disruption::repair::RepairOptions { enabled: true, unhealthy, failures, ..Default::default() }
    }

    /// One pass of karpenter-disruption over the current state.
    /// `karpenter_voluntary_disruption_decision_evaluation_duration_seconds` covers the whole pass: building the
    /// snapshot, listing instance types and the evaluation.
    pub async fn evaluate(&self) -> Result<Pass, DisruptionError> {
        self.evaluate_pass(false, None, None).await
    }

    /// [`Self::evaluate`]; with `consolidation_unchanged`, multi-node and single-node consolidation are skipped
    /// (nothing changed since they last found nothing); single-node consolidation starts after
    /// `resume_single_node_after`; with `continue_after`, only the methods after that one (whose command just
    /// failed validation) may give the command. Simulations stop [`DisruptionSettings::pass_simulation_time`]
    /// after the pass started.
    async fn evaluate_pass(
        &self,
        consolidation_unchanged: bool,
        resume_single_node_after: Option<String>,
        continue_after: Option<Method>,
    ) -> Result<Pass, DisruptionError> {
        let _gate = self.ctx.state.whole_cluster_pass().await;
        // Real time: the simulations never await, so on paused time (tests) tokio's clock would stand still and
        // the budgets would never run out. The same stopwatch times the pass for the metric.
        let started = Stopwatch::start();
        let budget = self.settings.pass_simulation_time;
        let multi_node_budget = budget / 3;
        let mut snapshot = self.ctx.state.snapshot()?.cluster;
        // CapacityBuffer virtual pods: every simulation re-places them, so consolidation keeps the buffers' room.
        self.ctx.state.add_buffer_pods(&mut snapshot);
        self.invalid_do_not_disrupt(&snapshot.bound_pods);
        let pools = self.pools(&snapshot.node_pools).await;
        let now = self.ctx.clock.now();
        let options = karpenter_disruption::DisruptionOptions {
            consolidation_unchanged,
            simulation_budget: Some(SimulationBudget::new(move || started.elapsed() < budget)),
            multi_node_budget: Some(SimulationBudget::new(move || started.elapsed() < multi_node_budget)),
            resume_single_node_after,
            continue_after,
            ..self.options()
        };
        let labels = self.ctx.cloud.labels().clone();
        let pass = simulate_off_runtime(move || {
            let inputs: Vec<PoolInput<'_>> =
                pools.iter().map(|(p, its)| PoolInput { node_pool: p, instance_types: its }).collect();
            karpenter_disruption::evaluate(&snapshot, &inputs, &labels, now, &options)
        })
        .await
        .ok_or(DisruptionError::ShuttingDown)?;
        // Every pass is observed: under its command's method, or, without a command, under the last method the
        // pass went through (single-node consolidation), so a quiet cluster's passes are measured too.
        let method = pass.commands.first().map_or(Method::SingleNodeConsolidation, |c| c.method);
        self.ctx
            .metrics
            .voluntary_disruption_decision_evaluation_duration_seconds(
                &method.reason().as_str().to_lowercase(),
                method.consolidation_type(),
            )
            .observe(started.elapsed().as_secs_f64());
        Ok(pass)
    }

    /// A Warning event on each pod whose `karpenter.sh/do-not-disrupt` value the pass ignores because it is
    /// neither `"true"` nor a duration (upstream's `InvalidDoNotDisruptAnnotation`); the recorder keeps one per
    /// pod and value for its dedupe timeout.
    fn invalid_do_not_disrupt(&self, pods: &[Arc<CompactPod>]) {
        for pod in pods {
            let Some(value) = pod.annotations().get(labels::annotations::DO_NOT_DISRUPT) else { continue };
            let Some(problem) = karpenter_api::do_not_disrupt_problem(value) else { continue };
            let message = format!(
                "Invalid {} annotation value {value:?} ({problem}), ignoring annotation; use \"true\" or a duration \
                 such as \"5m\" or \"1h\"",
                labels::annotations::DO_NOT_DISRUPT
            );
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let event = Event::warning(&**pod, reasons::INVALID_DO_NOT_DISRUPT_ANNOTATION, message)
                .with_dedupe_values([uid, value.clone()]);
            self.ctx.recorder.publish_detached(event);
        }
        // With PodDeletionCostManagement, karpenter.sh/disruption-cost is the user's cost: a value that is not an
        // int32 is ignored (the pod costs as if unannotated), and says so.
        if self.settings.pod_deletion_cost_management {
            let costs = karpenter_disruption::pods::CostAnnotations { managed: true };
            for pod in pods {
                let Some(Err(bad)) = costs.deletion_cost(pod) else { continue };
                let message = format!(
                    "Invalid {} annotation value {:?} (not a 32-bit integer), ignoring annotation",
                    bad.key, bad.value
                );
                tracing::warn!(controller = CONTROLLER, Pod = %pod_key(pod), "{message}");
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let event = Event::warning(&**pod, reasons::INVALID_DISRUPTION_COST_ANNOTATION, message)
                    .with_dedupe_values([uid, bad.value]);
                self.ctx.recorder.publish_detached(event);
            }
        }
    }

    async fn validate(&self, command: &Command) -> Result<Command, ValidationFailure> {
        let _gate = self.ctx.state.whole_cluster_pass().await;
        let snapshot = self.ctx.state.snapshot().map_err(|e| ValidationFailure {
            kind: FailureKind::Scheduling,
            message: format!("building the snapshot: {e}"),
        })?;
        let mut snapshot = snapshot.cluster;
        self.ctx.state.add_buffer_pods(&mut snapshot);
        let pools = self.pools(&snapshot.node_pools).await;
        let (command, labels, now, options) =
            (command.clone(), self.ctx.cloud.labels().clone(), self.ctx.clock.now(), self.options());
        simulate_off_runtime(move || {
            let inputs: Vec<PoolInput<'_>> =
                pools.iter().map(|(p, its)| PoolInput { node_pool: p, instance_types: its }).collect();
            validate(&command, &snapshot, &inputs, &labels, now, &options)
        })
        .await
        .unwrap_or_else(|| {
            Err(ValidationFailure { kind: FailureKind::Scheduling, message: "the controller is shutting down".into() })
        })
    }

    fn rejected(&self, command: &Command, failure: ValidationFailure, report: &mut StepReport) {
        tracing::info!(controller = CONTROLLER, method = ?command.method, error = %failure,
            "abandoning disruption command: it failed validation");
        // Upstream counts the candidates of a command whose candidates changed (churn) or whose budget is gone,
        // not a command whose pods no longer schedule as planned (its validateCommand counts nothing).
        if matches!(failure.kind, FailureKind::Churn | FailureKind::Budget) {
            let candidates = command.candidates.len() as u64;
            self.ctx
                .metrics
                .voluntary_disruption_failed_validations(command.method.consolidation_type())
                .inc_by(candidates);
        }
        for c in &command.candidates {
            if let Some(node) = self.ctx.state.get_shared::<Node>(&c.node) {
                self.ctx.recorder.publish_detached(Event::normal(
                    &*node,
                    reasons::CONSOLIDATION_REJECTED,
                    format!("Disruption was abandoned after revalidation: {failure}"),
                ));
            }
        }
        report.rejected = Some(failure);
    }

    /// Budget gauges, eligible-node gauges, the skipped-candidate counter and the verdicts' events.
    fn publish(&self, pass: &Pass) {
        count_consolidation_timeouts(&self.ctx.metrics, pass);
        count_consolidation_moves(&self.ctx.metrics, pass);
        for b in &pass.budgets {
            let reason = b.reason.as_str();
            self.ctx.metrics.nodepools_allowed_disruptions(&b.node_pool, reason).set(f64::from(b.allowed));
            self.ctx.metrics.nodepools_nodes_consuming_budgets(&b.node_pool, reason).set(f64::from(b.disrupting));
        }
        let mut eligible: BTreeMap<&'static str, u32> =
            karpenter_disruption::budget::REASONS.iter().map(|r| (r.as_str(), 0)).collect();
        let mut blocked_pools: BTreeSet<(String, &'static str)> = BTreeSet::new();
        for v in &pass.verdicts {
            // Why each candidate was left alone this pass; nodes Karpenter does not manage are no candidates.
            if matches!(v.outcome, Outcome::Blocked | Outcome::Kept)
                && let (Some(_), Some(pool)) = (&v.node_claim, &v.node_pool)
            {
                self.ctx.metrics.voluntary_disruption_candidates_skipped(pool, v.reason.code()).inc();
            }
            let method = match &v.reason {
                Reason::Disrupted { method } | Reason::Deferred { method, .. } => Some(*method),
                _ => None,
            };
            if let Some(m) = method {
                *eligible.entry(m.reason().as_str()).or_default() += 1;
            }
            if let Reason::BudgetExhausted { node_pool, reason, .. } = &v.reason {
                blocked_pools.insert((node_pool.clone(), reason.as_str()));
            }
            let event_reason = match (&v.reason, v.outcome) {
                (Reason::BeingDeleted | Reason::BudgetExhausted { .. }, _) => None,
                (_, Outcome::Blocked) => Some(reasons::DISRUPTION_BLOCKED),
                (
                    Reason::PodsUnschedulable { .. }
                    | Reason::NeedsMultipleNodes { .. }
                    | Reason::PendingPodsNeedNodes { .. }
                    | Reason::NoCheaperOption { .. }
                    | Reason::SpotToSpotDisabled
                    | Reason::SpotToSpotTooFewOptions { .. }
                    | Reason::SavingsBelowThreshold { .. }
                    | Reason::WhenEmptyPolicy
                    | Reason::UnknownInstanceType { .. }
                    | Reason::MissingLabels { .. }
                    | Reason::BalancedRejected { .. },
                    _,
                ) => Some(reasons::UNCONSOLIDATABLE),
                _ => None,
            };
            let Some(event_reason) = event_reason else { continue };
            if let Some(node) = self.ctx.state.get_shared::<Node>(&v.node) {
                self.ctx.recorder.publish_detached(Event::normal(&*node, event_reason, v.reason.to_string()));
            }
            if let Some(claim) = v.node_claim.as_deref().and_then(|c| self.ctx.state.get_shared::<NodeClaim>(c)) {
                self.ctx.recorder.publish_detached(Event::normal(&*claim, event_reason, v.reason.to_string()));
            }
        }
        for (reason, n) in eligible {
            self.ctx.metrics.voluntary_disruption_eligible_nodes(reason).set(f64::from(n));
        }
        for (pool, reason) in blocked_pools {
            if let Some(p) = self.ctx.state.get::<NodePool>(&pool) {
                self.ctx.recorder.publish_detached(Event::normal(
                    &p,
                    reasons::DISRUPTION_BLOCKED,
                    format!("No allowed disruptions for disruption reason {reason} due to blocking budget"),
                ));
            }
        }
    }

    /// Removes the disrupted taint and `DisruptionReason` from nodes in no command and not being deleted.
    async fn clean_stale(&self, inner: &Inner, report: &mut StepReport) {
        let mut busy: BTreeSet<&str> = inner
            .in_flight
            .iter()
            .flat_map(|c| c.targets.iter().flat_map(|t| [t.node.as_str(), t.claim.as_str()]))
            .collect();
        busy.extend(inner.reboots.iter().flat_map(|r| [r.target.node.as_str(), r.target.claim.as_str()]));
        // Shared reads, and claims indexed by node: this runs every step, over thousands of nodes at scale.
        let claims = self.ctx.state.list_shared::<NodeClaim>();
        let claim_of_node: BTreeMap<&str, &NodeClaim> =
            claims.iter().filter_map(|c| c.node_name().map(|n| (n, &**c))).collect();
        // A node rebooted by repair keeps its taint until it is back and healthy (`finish_reboots`).
        let rebooting = |c: &NodeClaim| {
            c.annotations().contains_key(labels::annotations::REBOOT_PRE_BOOT_ID)
                || c.conditions().iter().any(|x| x.type_ == cond::REBOOTING && x.status == ConditionStatus::True)
        };
        for node in self.ctx.state.list_shared::<Node>() {
            let name = node.name_any();
            if busy.contains(name.as_str())
                || node.metadata.deletion_timestamp.is_some()
                || !taints::node_is_disrupted(&node)
            {
                continue;
            }
            let claim = claim_of_node.get(name.as_str());
            if claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some() || rebooting(c)) {
                continue;
            }
            match self.untaint(&name).await {
                Ok(()) => report.cleaned.push(name.clone()),
                Err(e) => report.errors.push(format!("removing the disrupted taint from {name}: {e}")),
            }
        }
        for claim in &claims {
            let name = claim.name_any();
            let has = claim.conditions().iter().any(|c| c.type_ == cond::DISRUPTION_REASON);
            let node_busy = claim.node_name().is_some_and(|n| busy.contains(n));
            if !has || busy.contains(name.as_str()) || node_busy || claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if let Err(e) = self.clear_condition(&name).await {
                report.errors.push(format!("removing DisruptionReason from {name}: {e}"));
            } else if let Some(n) = claim.node_name()
                && !report.cleaned.iter().any(|c| c == n)
            {
                report.cleaned.push(n.to_owned());
            }
        }
    }

    async fn taint(&self, node: &str) -> Result<(), kube::Error> {
        let current = self.nodes().get(node).await?;
        let mut list: Vec<CoreTaint> = current.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        if list.iter().any(taints::is_disrupted) {
            return Ok(());
        }
        list.retain(|t| t.key != taints::DISRUPTED);
        list.push(CoreTaint {
            key: taints::DISRUPTED.to_owned(),
            effect: "NoSchedule".to_owned(),
            ..CoreTaint::default()
        });
        let patch = json!({"metadata": {"resourceVersion": current.resource_version()}, "spec": {"taints": list}});
        let written = self.nodes().patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        self.ctx.state.apply(written);
        Ok(())
    }

    async fn untaint(&self, node: &str) -> Result<(), kube::Error> {
        let current = match self.nodes().get(node).await {
            Ok(n) => n,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut list: Vec<CoreTaint> = current.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        let before = list.len();
        list.retain(|t| t.key != taints::DISRUPTED);
        if list.len() == before {
            return Ok(());
        }
        let patch = json!({"metadata": {"resourceVersion": current.resource_version()}, "spec": {"taints": list}});
        let written = self.nodes().patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        self.ctx.state.apply(written);
        Ok(())
    }

    async fn set_disruption_reason(&self, claim: &str, command: &Command) -> Result<(), kube::Error> {
        let current = self.claims().get(claim).await?;
        let mut conditions = current.conditions().to_vec();
        let changed = set_condition(
            &mut conditions,
            cond::DISRUPTION_REASON,
            ConditionStatus::True,
            command.reason.as_str(),
            &crate::lifecycle::truncate(&command.explanation),
            current.metadata.generation,
            self.ctx.clock.now(),
        );
        if changed {
            let written = crate::kube_util::patch_claim_conditions(&self.claims(), &current, &conditions).await?;
            self.ctx.state.apply(written);
        }
        Ok(())
    }

    async fn clear_condition(&self, claim: &str) -> Result<(), kube::Error> {
        let current = match self.claims().get(claim).await {
            Ok(c) => c,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut conditions = current.conditions().to_vec();
        if remove_condition(&mut conditions, cond::DISRUPTION_REASON) {
            let written = crate::kube_util::patch_claim_conditions(&self.claims(), &current, &conditions).await?;
            self.ctx.state.apply(written);
        }
        Ok(())
    }

    /// Taints the candidates' nodes and sets `DisruptionReason` on their NodeClaims, several candidates at a time:
    /// an emptiness command may hold hundreds of nodes, each a few requests. A lost race (a kubelet heartbeat on
    /// the Node, a status write on the claim) is retried on fresh data, not a reason to roll the whole command
    /// back; any other failure is. Returns the targets marked and the first failure.
    async fn mark_candidates(&self, targets: &[Target], command: &Command) -> (Vec<Target>, Option<String>) {
        let metrics = Some(&*self.ctx.metrics);
        let outcomes: Vec<(Target, Result<(), kube::Error>)> = stream::iter(targets.iter().cloned())
            .map(|t| async move {
                let result = async {
                    retry_write_conflicts(metrics, CONTROLLER, "Node", &t.node, || self.taint(&t.node)).await?;
                    retry_write_conflicts(metrics, CONTROLLER, "NodeClaim", &t.claim, || {
                        self.set_disruption_reason(&t.claim, command)
                    })
                    .await
                }
                .await;
                (t, result)
            })
            .buffered(WRITE_CONCURRENCY)
            .collect()
            .await;
        let mut marked: Vec<Target> = Vec::new();
        let mut failure = None;
        for (t, result) in outcomes {
            match result {
                Ok(()) => marked.push(t),
                Err(e) => {
                    failure.get_or_insert_with(|| format!("marking {} for disruption: {e}", t.node));
                }
            }
        }
        (marked, failure)
    }

    /// Creates the command's replacement NodeClaims, in order. On a failure: what failed, and the replacements
    /// created before it (for the roll-back).
    async fn create_replacements(&self, command: &Command) -> Result<Vec<String>, (String, Vec<String>)> {
        let mut replacements: Vec<String> = Vec::new();
        let reason = reason_label(command);
        for plan in &command.replacements {
            let created = async {
                let pool = self
                    .ctx
                    .state
                    .get::<NodePool>(&plan.node_pool)
                    .ok_or_else(|| format!("NodePool {} not found", plan.node_pool))?;
                let claim = build_node_claim(&pool, plan, self.ctx.cloud.labels()).map_err(|e| e.to_string())?;
                let created = self.claims().create(&PostParams::default(), &claim).await.map_err(|e| e.to_string())?;
                let pods: Vec<String> = plan.pods.iter().map(ToString::to_string).collect();
                self.ctx.state.record_created_claim(&created, &pods);
                self.ctx
                    .metrics
                    .nodeclaims_created(
                        &reason,
                        &plan.node_pool,
                        if plan.min_values_relaxed { "true" } else { "false" },
                    )
                    .inc();
                Ok::<String, String>(created.name_any())
            }
            .await;
            match created {
                Ok(name) => {
                    tracing::info!(controller = CONTROLLER, NodeClaim = %name, NodePool = %plan.node_pool,
                        "created replacement nodeclaim");
                    replacements.push(name);
                }
                Err(e) => {
                    return Err((format!("creating a replacement in NodePool {}: {e}", plan.node_pool), replacements));
                }
            }
        }
        Ok(replacements)
    }

    /// Starts a command (upstream's `StartCommand`).
    async fn start(&self, inner: &mut Inner, command: Command, report: &mut StepReport) {
        let busy: BTreeSet<&str> =
            inner.in_flight.iter().flat_map(|c| c.targets.iter().map(|t| t.node.as_str())).collect();
        if command.candidates.iter().any(|c| busy.contains(c.node.as_str())) {
            report.errors.push("a candidate is already part of a command in flight".to_owned());
            return;
        }
        let targets: Vec<Target> = command
            .candidates
            .iter()
            .map(|c| Target {
                node: c.node.clone(),
                claim: c.node_claim.clone(),
                pool: c.node_pool.clone(),
                capacity_type: c.capacity_type.clone().unwrap_or_default(),
            })
            .collect();
        tracing::info!(controller = CONTROLLER, method = ?command.method, decision = ?command.decision,
            nodes = ?targets.iter().map(|t| t.node.as_str()).collect::<Vec<_>>(), explanation = %command.explanation,
            "disrupting node(s)");
        if command.decision == Decision::Reboot {
            self.start_reboots(inner, targets, command, report).await;
            return;
        }

        // 1. Taint and DisruptionReason.
        let (marked, failure) = self.mark_candidates(&targets, &command).await;
        if let Some(message) = failure {
            report.errors.push(message);
            self.roll_back(&command, &marked, &[], "marking a candidate failed", report).await;
            return;
        }

        // 2. Replacements.
        let replacements = match self.create_replacements(&command).await {
            Ok(created) => created,
            Err((message, created)) => {
                report.errors.push(message);
                self.roll_back(&command, &marked, &created, "creating a replacement failed", report).await;
                return;
            }
        };
        report.replacements.extend(replacements.iter().cloned());

        // 3. Marked for deletion after the replacements exist.
        self.ctx.state.mark_for_deletion(targets.iter().flat_map(|t| [t.node.as_str(), t.claim.as_str()]));

        // 4. Decision metrics.
        let reason = reason_label(&command);
        let decision = decision_label(command.decision);
        let ctype = command.method.consolidation_type();
        self.ctx.metrics.voluntary_disruption_decisions(decision, &reason, ctype).inc();
        let pools: BTreeSet<&str> = targets.iter().map(|t| t.pool.as_str()).collect();
        for pool in pools {
            self.ctx.metrics.voluntary_disruption_decisions_by_nodepool(decision, &reason, ctype, pool).inc();
        }
        if !replacements.is_empty() {
            for t in &targets {
                self.event_on(
                    t,
                    reasons::DISRUPTION_LAUNCHING,
                    format!("Launching NodeClaim: {}", command.reason.as_str()),
                )
                .await;
            }
        }
        report.started.push(command.clone());
        let mut flight = InFlight { command, targets, replacements, started: self.ctx.clock.now() };
        if flight.replacements.is_empty() {
            if !self.finish(&mut flight, report).await {
                inner.in_flight.push(flight);
            }
        } else {
            inner.in_flight.push(flight);
        }
    }

    async fn event_on(&self, t: &Target, reason: &str, message: String) {
        if let Some(node) = self.ctx.state.get_shared::<Node>(&t.node) {
            self.ctx.recorder.publish_detached(Event::normal(&*node, reason, message.clone()));
        }
        if let Some(claim) = self.ctx.state.get_shared::<NodeClaim>(&t.claim) {
            self.ctx.recorder.publish_detached(Event::normal(&*claim, reason, message));
        }
    }

    /// Commands in flight: deletes candidates once the replacements are initialized, rolls back on failure.
    async fn advance(&self, inner: &mut Inner, report: &mut StepReport) {
        let queued: usize = inner.in_flight.iter().map(|c| c.targets.len()).sum();
        let timeout = chrono_duration(self.settings.replacement_timeout(queued));
        let now = self.ctx.clock.now();
        let mut keep = Vec::new();
        for mut flight in std::mem::take(&mut inner.in_flight) {
            let mut failure: Option<String> = None;
            let mut waiting = false;
            for name in &flight.replacements {
                // The state's copy (the watch keeps it current, and a created replacement is recorded at once);
                // the API server only for one the state does not hold.
                let current = match self.ctx.state.get::<NodeClaim>(name) {
                    Some(c) => Ok(Some(c)),
                    None => self.claims().get_opt(name).await,
                };
                match current {
                    Ok(Some(c)) if c.metadata.deletion_timestamp.is_some() => {
                        failure = Some(format!("replacement NodeClaim {name} is being deleted"));
                    }
                    Ok(Some(c)) => {
                        if !c.is_initialized() {
                            waiting = true;
                        }
                    }
                    Ok(None) => failure = Some(format!("replacement NodeClaim {name} no longer exists")),
                    Err(e) => {
                        report.errors.push(format!("reading replacement {name}: {e}"));
                        waiting = true;
                    }
                }
                if failure.is_some() {
                    break;
                }
            }
            if failure.is_none() && waiting && now - flight.started > timeout {
                failure = Some(format!("replacements not initialized after {}s", timeout.num_seconds()));
            }
            if let Some(why) = failure {
                // One per replacement that never initialized, as upstream counts its failed launches.
                let failed_launches = flight
                    .replacements
                    .iter()
                    .filter(|name| !self.ctx.state.get::<NodeClaim>(name).is_some_and(|c| c.is_initialized()))
                    .count() as u64;
                self.ctx
                    .metrics
                    .voluntary_disruption_queue_failures(
                        decision_label(flight.command.decision),
                        &reason_label(&flight.command),
                        flight.command.method.consolidation_type(),
                    )
                    .inc_by(failed_launches);
                let targets = flight.targets.clone();
                let replacements = flight.replacements.clone();
                self.roll_back(&flight.command, &targets, &replacements, &why, report).await;
                continue;
            }
            if waiting {
                for t in &flight.targets {
                    self.event_on(
                        t,
                        reasons::DISRUPTION_WAITING_READINESS,
                        "Waiting on readiness to continue disruption".to_owned(),
                    )
                    .await;
                }
                keep.push(flight);
                continue;
            }
            if !self.finish(&mut flight, report).await {
                keep.push(flight);
            }
        }
        inner.in_flight = keep;
    }

    /// Deletes the candidates' NodeClaims; returns whether all are deleted (else retried next step).
    async fn finish(&self, flight: &mut InFlight, report: &mut StepReport) -> bool {
        let command = &flight.command;
        let reason = reason_label(command);
        let mut remaining = Vec::new();
        let claims = self.claims();
        let outcomes: Vec<(Target, Result<(), kube::Error>)> = stream::iter(std::mem::take(&mut flight.targets))
            .map(|t| {
                let claims = claims.clone();
                async move {
                    if let Some(repair) = &command.repair
                        && let Some(claim) = self.ctx.state.get::<NodeClaim>(&t.claim)
                    {
                        let policy = repair.termination_grace_period_seconds.map(Duration::from_secs);
                        let now = self.ctx.clock.now();
                        if let Err(e) = crate::repair::annotate_drain_bound(&claims, &claim, policy, now).await
                            && !is_not_found(&e)
                        {
                            return (t, Err(e));
                        }
                    }
                    let result = match claims.delete(&t.claim, &Default::default()).await {
                        Ok(either) => {
                            if let Some(obj) = either.left() {
                                self.ctx.state.apply(obj);
                            }
                            Ok(())
                        }
                        Err(e) if is_not_found(&e) => Ok(()),
                        Err(e) => Err(e),
                    };
                    (t, result)
                }
            })
            .buffered(WRITE_CONCURRENCY)
            .collect()
            .await;
        for (t, result) in outcomes {
            if let Err(e) = result {
                report.errors.push(format!("deleting NodeClaim {}: {e}", t.claim));
                remaining.push(t);
                continue;
            }
            tracing::info!(controller = CONTROLLER, NodeClaim = %t.claim, Node = %t.node, reason = %reason, "deleted nodeclaim");
            self.event_on(&t, reasons::DISRUPTION_TERMINATING, format!("Disrupting Node: {}", command.reason.as_str()))
                .await;
            // The policy label is set for consolidation commands only (emptiness and underutilization); the
            // termination mode comes from the claim's terminationGracePeriod, whatever the method.
            let policy = match command.method.reason() {
                DisruptionReason::Empty | DisruptionReason::Underutilized => self
                    .ctx
                    .state
                    .get::<NodePool>(&t.pool)
                    .map_or("", |p| p.spec.disruption.consolidation_policy.metric_label()),
                _ => "",
            };
            if let (Some(repair), Some(claim)) = (&command.repair, self.ctx.state.get::<NodeClaim>(&t.claim)) {
                crate::repair::record_unhealthy(&self.ctx.metrics, &claim, &repair.condition);
            }
            let mode = self.ctx.state.get::<NodeClaim>(&t.claim).map_or("graceful", |c| c.termination_mode());
            self.ctx.metrics.nodeclaims_disrupted(&reason, &t.pool, &t.capacity_type, policy, mode).inc();
            let pods = self.ctx.state.pods_on_node(&t.node).iter().filter(|p| moves(p)).count();
            self.ctx
                .metrics
                .pods_disruption_initiated(&reason, &t.pool, &t.capacity_type, policy, mode)
                .inc_by(pods as u64);
            // The claim's deletion timestamp marks it (and its node) from now on; the explicit mark goes, so a
            // later node reusing the name (AWS hostnames) is not taken for this one.
            self.ctx.state.unmark_for_deletion([t.node.as_str(), t.claim.as_str()]);
            report.deleted.push(t.claim.clone());
        }
        flight.targets = remaining;
        flight.targets.is_empty()
    }

    /// Undoes a command's marks: taint, condition, deletion mark, and deletes the replacements.
    async fn roll_back(
        &self,
        command: &Command,
        targets: &[Target],
        replacements: &[String],
        why: &str,
        report: &mut StepReport,
    ) {
        tracing::warn!(controller = CONTROLLER, method = ?command.method, reason = why, "disruption command failed, rolling back");
        if command.method == Method::Repair {
            let now = self.ctx.clock.now();
            lock(&self.repair).failures.extend(targets.iter().map(|t| (t.pool.clone(), now)));
        }
        let errors: Vec<String> = stream::iter(targets.iter().cloned())
            .map(|t: Target| async move {
                let mut errors = Vec::new();
                if let Err(e) = self.untaint(&t.node).await {
                    errors.push(format!("removing the disrupted taint from {}: {e}", t.node));
                }
                if let Err(e) = self.clear_condition(&t.claim).await {
                    errors.push(format!("removing DisruptionReason from {}: {e}", t.claim));
                }
                errors
            })
            .buffered(WRITE_CONCURRENCY)
            .concat()
            .await;
        report.errors.extend(errors);
        self.ctx.state.unmark_for_deletion(targets.iter().flat_map(|t| [t.node.as_str(), t.claim.as_str()]));
        for name in replacements {
            if let Err(e) = delete_ignoring_missing(&self.claims(), name).await {
                report.errors.push(format!("deleting replacement {name}: {e}"));
            }
        }
        report.rolled_back.push((command.candidates.iter().map(|c| c.node.clone()).collect(), why.to_owned()));
    }
}

/// A pod whose disruption a node deletion initiates (not a DaemonSet pod, not terminal).
fn moves(pod: &CompactPod) -> bool {
    !is_daemon_set_pod(pod)
        && !pod.is_terminal()
        && !karpenter_disruption::pods::is_static(pod)
        && pod.meta().deletion_timestamp.is_none()
}

/// The capacity-type label of a NodeClaim ("" when absent), for metric labels.
pub fn capacity_type(claim: &NodeClaim) -> &str {
    label(claim, labels::CAPACITY_TYPE)
}

#[cfg(test)]
mod timeout_tests {
    use super::*;
    use crate::metrics::{BuildInfo, Metrics};

    fn verdict(node: &str, reason: Reason) -> karpenter_disruption::command::Verdict {
        karpenter_disruption::command::Verdict {
            node: node.into(),
            node_claim: None,
            node_pool: Some("default".into()),
            outcome: Outcome::Kept,
            message: reason.to_string(),
            reason,
        }
    }

    /// The fault path: the simulation budget runs out mid-pass.
    #[test]
    fn a_pass_cut_short_counts_one_timeout_per_consolidation_method() {
        let metrics = Metrics::new(&BuildInfo::default());
        let single = Method::SingleNodeConsolidation;
        let pass = Pass {
            api_version: String::new(),
            now: String::new(),
            commands: Vec::new(),
            verdicts: vec![
                verdict("a", Reason::PassTimeSpent { method: single }),
                verdict("b", Reason::PassTimeSpent { method: single }),
                verdict("c", Reason::PassTimeSpent { method: Method::Drift }),
                verdict("d", Reason::WhenEmptyPolicy),
            ],
            budgets: Vec::new(),
            resume_single_node_after: None,
            consolidation_moves: Vec::new(),
        };
        count_consolidation_timeouts(&metrics, &pass);
        let text = metrics.render();
        assert!(
            text.contains(
                "karpenter_voluntary_disruption_consolidation_timeouts_total{consolidation_type=\"single\"} 1\n"
            ),
            "{text}"
        );
        assert!(!text.contains("karpenter_voluntary_disruption_consolidation_timeouts_total{consolidation_type=\"\"}"));
        let quiet = Pass { verdicts: vec![verdict("d", Reason::WhenEmptyPolicy)], ..pass };
        count_consolidation_timeouts(&metrics, &quiet);
        assert!(metrics.render().contains("consolidation_timeouts_total{consolidation_type=\"single\"} 1\n"));
    }
}

#[cfg(test)]
mod consolidation_move_tests {
    use super::*;
    use crate::metrics::{BuildInfo, Metrics};
    use karpenter_disruption::command::ConsolidationMove;

    /// A multi-node move rejected as a whole: every pool counts a rejected move, while each Balanced pool's score is
    /// observed under its own decision (one pool may have approved it), and a pool that is not Balanced has no score.
    #[test]
    fn a_rejected_multi_node_move_counts_each_pool_and_scores_each_by_its_own_decision() {
        let metrics = Metrics::new(&BuildInfo::default());
        let moved = |pool: &str, policy, score| ConsolidationMove {
            method: Method::MultiNodeConsolidation,
            node_pool: pool.into(),
            policy,
            approved: false,
            score,
        };
        let pass = Pass {
            api_version: String::new(),
            now: String::new(),
            commands: Vec::new(),
            verdicts: Vec::new(),
            budgets: Vec::new(),
            resume_single_node_after: None,
            consolidation_moves: vec![
                moved("a", ConsolidationPolicy::Balanced, Some(0.2)),
                moved("b", ConsolidationPolicy::Balanced, Some(3.0)),
                moved("c", ConsolidationPolicy::WhenEmptyOrUnderutilized, None),
            ],
        };
        count_consolidation_moves(&metrics, &pass);
        let text = metrics.render();
        for (pool, policy) in [("a", "Balanced"), ("b", "Balanced"), ("c", "WhenEmptyOrUnderutilized")] {
            let line = format!(
                "karpenter_consolidation_moves_total{{decision=\"rejected\",nodepool=\"{pool}\",policy=\"{policy}\"}} 1\n"
            );
            assert!(text.contains(&line), "{line}: {text}");
        }
        assert!(text.contains(
            "karpenter_consolidation_score_sum{decision=\"rejected\",nodepool=\"a\",policy=\"Balanced\"} 0.2"
        ));
        assert!(text.contains(
            "karpenter_consolidation_score_sum{decision=\"approved\",nodepool=\"b\",policy=\"Balanced\"} 3.0"
        ));
        assert!(!text.contains("karpenter_consolidation_score_sum{decision=\"rejected\",nodepool=\"b\""));
        let scored_c =
            text.lines().any(|l| l.starts_with("karpenter_consolidation_score") && l.contains("nodepool=\"c\""));
        assert!(!scored_c, "a pool that is not Balanced has no score: {text}");
    }
}
