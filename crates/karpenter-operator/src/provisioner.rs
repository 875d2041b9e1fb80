//! The provisioner: pending pods in, NodeClaims out.
//!
//! - **Triggers**: [`ClusterState`] sends a [`Trigger`](crate::state::Trigger) for each provisionable pod and for
//!   each node carrying the `karpenter.sh/disrupted` taint; [`Provisioner::run`] also re-triggers every pod that
//!   stays provisionable every 10 s, and every CapacityBuffer whose virtual pods did not all fit existing capacity
//!   in the last pass or whose cluster changed since.
//! - **Batching** ([`Batcher`]): wait up to 1 s for a first trigger, then collect until `BATCH_IDLE_DURATION`
//!   passes without a new one or `BATCH_MAX_DURATION` since the first (triggers for keys already in the batch do
//!   not extend it). Time is tokio's, so tests drive it with paused time.
//! - **One pass** ([`Provisioner::provision`], no timers): refuse while the state is not synced (a NodeClaim
//!   mid-launch: its capacity is not known yet, so scheduling now could launch twice for the same pods); take
//!   the [`snapshot`](ClusterState::snapshot); ask the [`CloudProvider`] for the instance types of every ready,
//!   dynamic, non-deleting NodePool; [`schedule_until`] with a 1 minute budget; then record the decisions:
//!   `FailedScheduling` events for pods nothing fits (and for pods rejected by validation), `Nominated` events
//!   and a nomination for pods placed on existing or in-flight nodes, and the new NodeClaims created (after
//!   re-checking the NodePool's limits), each recorded in the state at once with its pods and announced with
//!   `Nominated` events, `karpenter_nodeclaims_created_total{reason="provisioned"}`.
//!
//! The NodeClaim comes from the plan and the NodePool's template through
//! [`karpenter_scheduler::build_node_claim`], the one builder the disruption replacements, static capacity and
//! `simulate` use too (its docs list what the claim carries). Unschedulable pods' reasons are typed
//! ([`karpenter_scheduler::UnschedulableReason`]): events and log lines carry the message, log lines also its
//! code.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use karpenter_api::{CompactPod, NodeClaim, NodePool};
use karpenter_cloudprovider::CloudProvider;
use karpenter_cloudprovider::time::{Stopwatch, tokio_now};
use karpenter_requirements::{InstanceType, Quantity, ResourceList};
use karpenter_scheduler::decision::{NodeClaimPlan, PodKey, UnschedulablePod};
use karpenter_scheduler::snapshot::SnapshotError;
use karpenter_scheduler::{BuildError, Decisions, PoolInput, SchedulerOptions, build_node_claim, schedule_watching};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::events::{Event, reasons};
use crate::settings::{CoreSettings, MinValuesPolicy, PreferencePolicy};
use crate::state::{BufferPlacement, Trigger, object_key, simulate_off_runtime};

/// How long the batcher waits for a first trigger before looking again.
pub const FIRST_TRIGGER_WAIT: Duration = Duration::from_secs(1);
/// How often pods that stay provisionable are triggered again.
pub const RETRIGGER_INTERVAL: Duration = Duration::from_secs(10);
/// The scheduling budget of one pass; what was decided by then is kept.
pub const SOLVE_TIMEOUT: Duration = Duration::from_secs(60);
/// The `controller` label of the scheduler metrics.
pub const CONTROLLER: &str = "provisioner";

/// Retries of a NodeClaim create whose answer was lost, and the wait before the first (doubled each time): an API
/// server restart takes a few seconds.
const CREATE_RETRIES: u32 = 4;
const CREATE_RETRY_WAIT: Duration = Duration::from_secs(1);
/// The characters the API server draws `generateName` suffixes from (no vowels, no look-alikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `prefix` and five characters drawn as the API server draws them for `generateName`, from a randomly keyed hash
/// of a process-wide counter.
fn generated_name(prefix: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let mut bits = hasher.finish();
    let mut name = String::with_capacity(prefix.len() + 5);
    name.push_str(prefix);
    for _ in 0..5 {
        name.push(char::from(NAME_ALPHABET[(bits % NAME_ALPHABET.len() as u64) as usize]));
        bits /= NAME_ALPHABET.len() as u64;
    }
    name
}

/// Whether a failed request may nonetheless have been applied: the connection broke after the request went out,
/// or the server failed (5xx). A 4xx answer means it was not.
fn outcome_unknown(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code >= 500,
        _ => true,
    }
}

/// Creates `claim` under a name chosen here instead of the API server's `generateName`, so a create whose answer
/// was lost can be sent again without launching twice: the retry either creates the claim or is refused with 409
/// AlreadyExists because the first attempt did, and then the claim is read back. (With `generateName`, the next
/// provisioning pass created a second claim for the same pods whenever kube-apiserver went away mid-request.) A
/// 409 on a first attempt is a name collision with another claim: a new name is drawn.
async fn create_named(api: &Api<NodeClaim>, mut claim: NodeClaim) -> Result<NodeClaim, kube::Error> {
    let prefix = claim.metadata.generate_name.take().unwrap_or_default();
    let mut name = claim.metadata.name.clone().unwrap_or_else(|| generated_name(&prefix));
    let mut sent_before = false;
    let mut retries = 0;
    let mut wait = CREATE_RETRY_WAIT;
    loop {
        claim.metadata.name = Some(name.clone());
        match api.create(&PostParams::default(), &claim).await {
            Ok(created) => return Ok(created),
            Err(kube::Error::Api(status)) if status.code == 409 && sent_before => return api.get(&name).await,
            Err(kube::Error::Api(status)) if status.code == 409 && retries < CREATE_RETRIES => {
                retries += 1;
                name = generated_name(&prefix);
            }
            Err(e) if outcome_unknown(&e) && retries < CREATE_RETRIES => {
                tracing::debug!(controller = CONTROLLER, NodeClaim = %name, error = %e,
                    "creating the nodeclaim: no answer, sending it again under the same name");
                sent_before = true;
                retries += 1;
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The provisioner's settings.
#[derive(Debug, Clone)]
pub struct ProvisionerOptions {
    /// `BATCH_IDLE_DURATION`.
    pub batch_idle_duration: Duration,
    /// `BATCH_MAX_DURATION`.
    pub batch_max_duration: Duration,
    /// `PREFERENCE_POLICY`.
    pub preference_policy: PreferencePolicy,
    /// `MIN_VALUES_POLICY`.
    pub min_values_policy: MinValuesPolicy,
    /// Budget of one scheduling pass ([`SOLVE_TIMEOUT`]).
    pub solve_timeout: Duration,
    /// `CLUSTER_LIMITS` (empty: none).
    pub cluster_limits: ResourceList,
    /// `SCHEDULER_CONFIG`: default topology spread constraints (empty: none).
    pub scheduler_config: karpenter_scheduler::SchedulerConfig,
    /// `IGNORE_DRA_REQUESTS`: `false` simulates DRA device allocation (docs/dra.md).
    pub ignore_dra_requests: bool,
    /// Threads that check existing nodes for each pod of a pass: `ceil(CPU_REQUESTS / 1000)`
    /// ([`CoreSettings::scheduler_parallelism`]); decisions do not depend on it.
    pub parallelism: usize,
}

impl Default for ProvisionerOptions {
    fn default() -> Self {
        Self {
            batch_idle_duration: Duration::from_secs(1),
            batch_max_duration: Duration::from_secs(10),
            preference_policy: PreferencePolicy::Respect,
            min_values_policy: MinValuesPolicy::Strict,
            solve_timeout: SOLVE_TIMEOUT,
            cluster_limits: ResourceList::new(),
            scheduler_config: karpenter_scheduler::SchedulerConfig::default(),
            ignore_dra_requests: true,
            parallelism: 1,
        }
    }
}

impl ProvisionerOptions {
    /// The options of `settings`.
    pub fn from_settings(settings: &CoreSettings) -> Self {
        Self {
            batch_idle_duration: settings.batch_idle_duration,
            batch_max_duration: settings.batch_max_duration,
            preference_policy: settings.decisions.preference_policy,
            min_values_policy: settings.decisions.min_values_policy,
            solve_timeout: SOLVE_TIMEOUT,
            cluster_limits: settings.decisions.cluster_limits.clone(),
            scheduler_config: settings.decisions.scheduler_config.clone(),
            ignore_dra_requests: settings.decisions.ignore_dra_requests,
            parallelism: settings.scheduler_parallelism(),
        }
    }

    /// The options every provisioning simulation runs with (also the min-nodes floor's launches, and
    /// `simulate`'s provisioning, so both read the settings the same way).
    pub fn scheduler_options(&self) -> SchedulerOptions {
        SchedulerOptions {
            min_values_policy: self.min_values_policy,
            preference_policy: self.preference_policy,
            cluster_limits: self.cluster_limits.clone(),
            scheduler_config: self.scheduler_config.clone(),
            ignore_dra_requests: self.ignore_dra_requests,
            parallelism: self.parallelism,
            ..SchedulerOptions::default()
        }
    }
}

/// When the provisioner first saw each pending pod: the time its first trigger arrived (the cluster state
/// sends one when it first sees the pod `PodScheduled=False`/`Unschedulable`), by trigger key (the pod's uid).
/// It times `karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds`: a pod's entry is observed once,
/// when the NodeClaim it was planned onto is created, and stays marked (so the 10 s re-triggers of a pod still
/// waiting for its node do not restart its clock) until the pod is no longer pending or is deleted
/// ([`FirstSeen::retain`] after each pass), so the map holds at most the pending pods.
///
/// Times are on tokio's clock ([`tokio_now`]): the wait they measure is mostly batching windows and timers,
/// which run on it, so paused-time tests see the latency they drove.
#[derive(Clone, Debug, Default)]
pub struct FirstSeen(Arc<Mutex<HashMap<String, (tokio::time::Instant, bool)>>>);

impl FirstSeen {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (tokio::time::Instant, bool)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `key` first seen at `at` (a later call for the same key keeps the first time).
    pub fn record(&self, key: &str, at: tokio::time::Instant) {
        let mut map = self.lock();
        if !map.contains_key(key) {
            map.insert(key.to_owned(), (at, false));
        }
    }

    /// The time since `key` was first seen, once: `None` when unknown or already observed.
    pub fn observe(&self, key: &str, now: tokio::time::Instant) -> Option<Duration> {
        let mut map = self.lock();
        let (at, observed) = map.get_mut(key)?;
        if *observed {
            return None;
        }
        *observed = true;
        Some(now.saturating_duration_since(*at))
    }

    /// Keeps only the keys `keep` says are still pending.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.lock().retain(|k, _| keep(k));
    }

    /// How many pods are tracked.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no pod is tracked.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Collects triggers into batches, each closed after `idle` without a new trigger or `max` after its first.
#[derive(Debug)]
pub struct Batcher {
    triggers: mpsc::UnboundedReceiver<Trigger>,
    idle: Duration,
    max: Duration,
}

impl Batcher {
    /// A batcher over `triggers` (from [`ClusterState::subscribe`]).
    pub fn new(triggers: mpsc::UnboundedReceiver<Trigger>, idle: Duration, max: Duration) -> Self {
        Self { triggers, idle, max }
    }

    /// A batcher that also stamps each pod trigger's arrival in `first_seen` as it arrives, also while a pass
    /// runs (a task forwards the triggers; it ends with the batcher or the sender). Needs a tokio runtime.
    pub fn stamped(
        mut triggers: mpsc::UnboundedReceiver<Trigger>,
        idle: Duration,
        max: Duration,
        first_seen: FirstSeen,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(trigger) = triggers.recv().await {
                if let Trigger::Pod(key) = &trigger {
                    first_seen.record(key, tokio_now());
                }
                if tx.send(trigger).is_err() {
                    return;
                }
            }
        });
        Self::new(rx, idle, max)
    }

    /// Waits up to [`FIRST_TRIGGER_WAIT`] for a first trigger (empty result when none came), then collects until
    /// the idle or the max duration ends the batch. Returns the batch's keys. A repeated key does not extend the
    /// idle window.
    pub async fn wait(&mut self) -> BTreeSet<String> {
        let mut batch = BTreeSet::new();
        match tokio::time::timeout(FIRST_TRIGGER_WAIT, self.triggers.recv()).await {
            Ok(Some(t)) => batch.insert(t.key()),
            Ok(None) | Err(_) => return batch,
        };
        let start = tokio_now();
        let mut idle_deadline = start + self.idle;
        let max_deadline = start + self.max;
        loop {
            let deadline = idle_deadline.min(max_deadline);
            match tokio::time::timeout_at(deadline, self.triggers.recv()).await {
                Ok(Some(t)) => {
                    if batch.insert(t.key()) {
                        idle_deadline = tokio_now() + self.idle;
                    }
                }
                Ok(None) | Err(_) => return batch,
            }
        }
    }
}

/// Why a NodeClaim could not be built or created.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// A node or NodeClaim quantity in the state does not parse.
    #[error("building the scheduling snapshot: {0}")]
    Snapshot(#[from] SnapshotError),
    /// The decision names a NodePool the state does not hold (deleted meanwhile).
    #[error("NodePool {0} not found")]
    NodePoolNotFound(String),
    /// The NodePool's usage already reaches one of its limits.
    #[error("NodePool {pool}: {resource} usage {usage} exceeds limit {limit}")]
    LimitsExceeded {
        /// The NodePool.
        pool: String,
        /// The resource.
        resource: String,
        /// Current usage.
        usage: String,
        /// The limit.
        limit: String,
    },
    /// A quantity in the NodePool or a NodeClaim does not parse.
    #[error("NodePool {pool}: {message}")]
    Invalid {
        /// The NodePool.
        pool: String,
        /// What is wrong.
        message: String,
    },
    /// The plan cannot become a NodeClaim of the NodePool.
    #[error("building the NodeClaim: {0}")]
    Build(#[from] BuildError),
    /// The API server refused the NodeClaim.
    #[error("creating a NodeClaim for NodePool {pool}: {source}")]
    Create {
        /// The NodePool.
        pool: String,
        /// The API error.
        source: kube::Error,
    },
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct PassReport {
    /// Set when the pass did nothing because the state is not synced (why).
    pub waiting: Option<String>,
    /// Names of the NodeClaims created, with the pods each is for.
    pub created: Vec<(String, Vec<String>)>,
    /// Pod → node or in-flight NodeClaim it was nominated to.
    pub nominated: BTreeMap<String, String>,
    /// Pods nothing fits, with the scheduler's reason.
    pub unschedulable: Vec<UnschedulablePod>,
    /// Pods rejected before scheduling (validation), with why.
    pub rejected: Vec<UnschedulablePod>,
    /// NodePools skipped because the cloud provider could not list their instance types.
    pub skipped_pools: Vec<(String, String)>,
    /// NodeClaims that could not be created (the pods are retried by the next pass).
    pub errors: Vec<ProvisionError>,
}

/// The provisioner.
#[derive(Clone)]
pub struct Provisioner {
    ctx: ControllerContext,
    options: ProvisionerOptions,
    first_seen: FirstSeen,
    /// The `scheduling_id` of the next simulation (upstream labels each with a fresh UUID).
    next_scheduling_id: Arc<std::sync::atomic::AtomicU64>,
}

impl fmt::Debug for Provisioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provisioner").field("options", &self.options).finish_non_exhaustive()
    }
}

impl Provisioner {
    /// A provisioner writing through `client`.
    pub fn new(ctx: &ControllerContext, options: ProvisionerOptions) -> Self {
        Self { ctx: ctx.clone(), options, first_seen: FirstSeen::default(), next_scheduling_id: Default::default() }
    }

    /// When each pending pod was first seen (shared with the run loop's batcher).
    pub fn first_seen(&self) -> &FirstSeen {
        &self.first_seen
    }

    /// The run loop: batches triggers and runs a pass per batch until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut batcher = Batcher::stamped(
            self.ctx.state.subscribe(),
            self.options.batch_idle_duration,
            self.options.batch_max_duration,
            self.first_seen.clone(),
        );
        let mut last_pass = tokio_now();
        let passes = self.ctx.metrics.reconciler(CONTROLLER, 1);
        let retrigger = {
            let state = self.ctx.state.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(RETRIGGER_INTERVAL);
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        _ = tick.tick() => state.retrigger_provisionable(),
                    }
                }
            })
        };
        loop {
            let batch = tokio::select! {
                () = shutdown.cancelled() => break,
                batch = batcher.wait() => batch,
            };
            if batch.is_empty() {
                // No pass for a while (pending pods are re-triggered every 10 s): forget pods that left.
                if !self.first_seen.is_empty() && last_pass.elapsed() > 2 * RETRIGGER_INTERVAL {
                    self.prune_first_seen(None);
                    last_pass = tokio_now();
                }
                continue;
            }
            last_pass = tokio_now();
            let pass = passes.pass();
            let report = self.provision().await;
            pass.finish(crate::metrics::ReconcileResult::of_pass(&report));
            match report {
                Ok(r) if r.waiting.is_some() => {
                    tracing::debug!(controller = CONTROLLER, reason = r.waiting.as_deref(), "waiting on cluster sync");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    self.ctx.state.retrigger_provisionable();
                }
                Ok(r) => {
                    for e in &r.errors {
                        tracing::error!(controller = CONTROLLER, error = %e, "creating nodeclaim");
                    }
                }
                Err(e) => tracing::error!(controller = CONTROLLER, error = %e, "provisioning"),
            }
        }
        retrigger.abort();
    }

    /// One provisioning pass (see the module docs). Errors only when no snapshot can be built; per-claim
    /// failures are in [`PassReport::errors`].
    ///
    /// `karpenter_scheduler_scheduling_duration_seconds` times the pass from the snapshot to the end of the
    /// simulation (snapshot, instance types, scheduling).
    ///
    /// Long because a pass is upstream's fixed sequence (sync check, buffers, pools and instance types, the timed
    /// simulation, its gauges, nominations, launches) sharing the pass report and the metrics of one pass id.
    pub async fn provision(&self) -> Result<PassReport, ProvisionError> {
        let mut report = PassReport::default();
        self.ctx.metrics.cluster_state_synced().set(if self.ctx.state.synced() { 1.0 } else { 0.0 });
        if let Some(reason) = self.ctx.state.unsynced_reason() {
            report.waiting = Some(reason);
            return Ok(report);
        }
        let gate = self.ctx.state.whole_cluster_pass().await;
        let pass_started = Stopwatch::start();
        // Read before the snapshot: a change in between only costs the buffers one more pass.
        let seen = self.ctx.state.consolidation_state();
        let mut snapshot = self.ctx.state.snapshot()?;
        // CapacityBuffer virtual pods (gate `CapacityBuffer`): placed like pending pods, never bound or nominated.
        let virtual_pods: HashSet<String> = self.ctx.state.add_buffer_pods(&mut snapshot.cluster).into_iter().collect();
        let is_virtual = |key: &str| virtual_pods.contains(key);
        self.ctx.metrics.scheduler_ignored_pods_count().set(count(snapshot.ignored.len() + snapshot.rejected.len()));
        // Pods still pending keep their first-seen time; the others (bound, deleted, no longer provisionable) go.
        let mut pending: HashSet<String> = snapshot.cluster.pending_pods.iter().map(|p| trigger_key(p)).collect();
        pending.extend(
            snapshot.rejected.iter().filter_map(|r| self.ctx.state.get::<CompactPod>(&r.pod)).map(|p| trigger_key(&p)),
        );
        self.prune_first_seen(Some(&pending));
        drop(pending);
        let rejected: Vec<UnschedulablePod> =
            snapshot.rejected.iter().map(|r| UnschedulablePod::new(r.pod.clone(), r.reason.clone())).collect();
        self.failed_scheduling(&rejected, false).await;
        let rejected_keys: Vec<String> = rejected.iter().map(|r| r.pod.to_string()).collect();
        report.rejected = rejected;
        let cluster = snapshot.cluster;
        if cluster.pending_pods.is_empty() {
            self.ctx.state.record_buffer_placements(BTreeMap::new(), seen);
            return Ok(report);
        }

        // The NodePools provisioning may use, with their instance types.
        let mut pools: Vec<(NodePool, Arc<[InstanceType]>)> = Vec::new();
        for pool in &cluster.node_pools {
            // Static, not Ready or being deleted: the rule simulate applies too.
            if karpenter_scheduler::provisioning::dynamic_pool_exclusion(pool).is_some() {
                continue;
            }
            match self.ctx.cloud.instance_types(pool).await {
                Ok(its) => pools.push((pool.clone(), its)),
                Err(e) => {
                    let name = pool.name_any();
                    crate::kube_util::log_instance_types_error(
                        CONTROLLER,
                        &name,
                        &e,
                        "skipping the NodePool this pass",
                    );
                    report.skipped_pools.push((name, e.to_string()));
                }
            }
        }
        let options = self.options.scheduler_options();
        // Real time: the simulation never awaits, so on paused time (tests) tokio's clock would not move and the
        // budget would never run out.
        let solving = Stopwatch::start();
        let solve_timeout = self.options.solve_timeout;
        let labels = self.ctx.cloud.labels().clone();
        // Upstream's progress gauges of the running simulation, under this pass's id: the pods still queued
        // and the seconds spent, set before each pod attempt. A new simulation drops the last one's depth; the
        // unfinished work goes when the simulation ends.
        let scheduling_id = self.next_scheduling_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed).to_string();
        self.ctx.metrics.clear("scheduler_queue_depth");
        let depth = self.ctx.metrics.scheduler_queue_depth(CONTROLLER, &scheduling_id);
        let unfinished = self.ctx.metrics.scheduler_unfinished_work_seconds(CONTROLLER, &scheduling_id);
        // The snapshot is not needed to act on the decisions: it is freed with the simulation, before the API
        // calls, and the next whole-cluster pass may start.
        let solved = simulate_off_runtime(move || {
            let inputs: Vec<PoolInput<'_>> =
                pools.iter().map(|(pool, its)| PoolInput { node_pool: pool, instance_types: its }).collect();
            let decisions: Decisions = schedule_watching(&cluster, &inputs, &labels, &options, &mut |queued| {
                let spent = solving.elapsed();
                depth.set(queued as f64);
                unfinished.set(spent.as_secs_f64());
                spent >= solve_timeout
            });
            if !decisions.timed_out {
                depth.set(0.0);
            }
            (decisions, pools)
        })
        .await;
        self.ctx.metrics.remove(
            "scheduler_unfinished_work_seconds",
            &[("controller", CONTROLLER), ("scheduling_id", &scheduling_id)],
        );
        let Some((decisions, pools)) = solved else { return Ok(report) };
        self.ctx
            .metrics
            .scheduler_scheduling_duration_seconds(CONTROLLER)
            .observe(pass_started.elapsed().as_secs_f64());
        drop(gate);
        // Upstream's scheduling decisions: when each pod was first decided about and first found a place.
        crate::observability::scheduling_times::record_pass(
            self.ctx.state.scheduling_times(),
            &self.ctx.metrics,
            &rejected_keys,
            &decisions,
            self.ctx.clock.now(),
            |key| self.ctx.state.get_shared::<CompactPod>(key).map(|pod| pod.node_name().is_some()),
        );
        self.ctx.metrics.scheduler_unschedulable_pods_count(CONTROLLER).set(count(decisions.unschedulable.len()));
        if decisions.timed_out {
            tracing::warn!(controller = CONTROLLER, "scheduling simulation timed out, keeping what was decided");
        }

        self.ctx.state.record_buffer_placements(buffer_placements(&decisions, &virtual_pods), seen);
        let unschedulable: Vec<UnschedulablePod> =
            decisions.unschedulable.iter().filter(|u| !is_virtual(&u.pod)).cloned().collect();
        self.failed_scheduling(&unschedulable, pools.is_empty()).await;
        report.unschedulable = unschedulable;

        for placement in &decisions.existing_nodes {
            // Room kept for virtual pods on a node does not protect it from disruption: the disruption
            // simulation re-adds the virtual pods itself.
            if placement.pods.iter().all(|p| is_virtual(p)) {
                continue;
            }
            self.ctx.state.nominate(&placement.name);
            let target = if placement.in_flight {
                format!("nodeclaim/{}", placement.name)
            } else {
                format!("node/{}", placement.name)
            };
            for pod in placement.pods.iter().filter(|p| !is_virtual(p)) {
                self.nominated_event(pod, &target).await;
                report.nominated.insert(pod.to_string(), placement.name.clone());
            }
        }

        let pools = &pools;
        let virtual_pods = &virtual_pods;
        let creations = decisions.new_node_claims.iter().map(|plan| async move {
            let pool = pools.iter().find(|(p, _)| p.metadata.name.as_deref() == Some(plan.node_pool.as_str()));
            let Some((pool, _)) = pool else {
                return Err(ProvisionError::NodePoolNotFound(plan.node_pool.clone()));
            };
            self.create(pool, plan, virtual_pods)
                .await
                .map(|name| (name, plan.pods.iter().map(PodKey::to_string).collect()))
        });
        for result in futures::future::join_all(creations).await {
            match result {
                Ok(created) => report.created.push(created),
                Err(e) => report.errors.push(e),
            }
        }
        Ok(report)
    }

    /// Re-checks limits, builds, creates and records one NodeClaim; returns its name.
    async fn create(
        &self,
        pool: &NodePool,
        plan: &NodeClaimPlan,
        virtual_pods: &HashSet<String>,
    ) -> Result<String, ProvisionError> {
        let pool_name = pool.name_any();
        // Re-read the pool: limits may have changed since the snapshot.
        let pool = self
            .ctx
            .state
            .get::<NodePool>(&pool_name)
            .ok_or_else(|| ProvisionError::NodePoolNotFound(pool_name.clone()))?;
        // Only when the pool has limits: the check reads every NodeClaim (shared, not copied).
        if !pool.spec.limits.is_empty() {
            check_limits(&pool, &self.ctx.state.list_shared::<NodeClaim>())?;
        }
        let claim = build_node_claim(&pool, plan, self.ctx.cloud.labels())?;
        let api: Api<NodeClaim> = Api::all(self.ctx.client.clone());
        let created = create_named(&api, claim)
            .await
            .map_err(|source| ProvisionError::Create { pool: pool_name.clone(), source })?;
        let answered = tokio_now();
        let name = created.name_any();
        for pod in plan.pods.iter().filter_map(|key| self.ctx.state.get::<CompactPod>(key)) {
            if let Some(waited) = self.first_seen.observe(&trigger_key(&pod), answered) {
                self.ctx
                    .metrics
                    .provisioner_pod_to_nodeclaim_created_duration_seconds(&pool_name)
                    .observe(waited.as_secs_f64());
            }
        }
        let real_pods: Vec<String> =
            plan.pods.iter().filter(|p| !virtual_pods.contains(p.as_str())).map(PodKey::to_string).collect();
        self.ctx.state.record_created_claim(&created, &real_pods);
        self.ctx
            .metrics
            .nodeclaims_created("provisioned", &pool_name, if plan.min_values_relaxed { "true" } else { "false" })
            .inc();
        tracing::info!(controller = CONTROLLER, NodePool = %pool_name, NodeClaim = %name, pods = real_pods.len(),
            buffer_pods = plan.pods.len() - real_pods.len(), instance_types = plan.instance_types.len(), "created nodeclaim");
        for pod in &real_pods {
            self.nominated_event(pod, &format!("nodeclaim/{name}")).await;
        }
        Ok(name)
    }

    async fn pod(&self, key: &str) -> Option<CompactPod> {
        self.ctx.state.get::<CompactPod>(key)
    }

    /// Forgets the first-seen times of pods not in `pending` (trigger keys), or, without a set, of pods the state
    /// no longer holds as provisionable.
    fn prune_first_seen(&self, pending: Option<&HashSet<String>>) {
        match pending {
            Some(pending) => self.first_seen.retain(|k| pending.contains(k)),
            None => {
                let pending: HashSet<String> =
                    self.ctx.state.provisionable_pods().iter().map(|p| trigger_key(p)).collect();
                self.first_seen.retain(|k| pending.contains(k));
            }
        }
    }

    /// One `FailedScheduling` event per pod (the recorder de-duplicates them) and one log line per cause for the
    /// whole pass ([`unschedulable_summary`]), not one per pod: with no ready NodePool every pending pod fails
    /// the same way, every pass.
    async fn failed_scheduling(&self, pods: &[UnschedulablePod], no_ready_pool: bool) {
        for line in unschedulable_summary(pods, no_ready_pool) {
            tracing::error!(controller = CONTROLLER, pods = line.pods, examples = %line.examples, error = %line.cause,
                code = line.code, "{}", line.message);
        }
        for u in pods {
            if let Some(pod) = self.pod(&u.pod).await {
                let event =
                    Event::warning(&pod, reasons::FAILED_SCHEDULING, format!("Failed to schedule pod, {}", u.reason));
                self.ctx.recorder.publish_detached(event);
            }
        }
    }

    async fn nominated_event(&self, key: &str, target: &str) {
        if let Some(pod) = self.pod(key).await {
            let event = Event::normal(&pod, reasons::NOMINATED, format!("Pod should schedule on: {target}"))
                .with_dedupe_values([object_key(&pod), target.to_owned()]);
            self.ctx.recorder.publish_detached(event);
        }
    }
}

/// Where each buffer's virtual pods (keys in `virtual_pods`) went in a pass, by buffer `namespace/name`.
fn buffer_placements(decisions: &Decisions, virtual_pods: &HashSet<String>) -> BTreeMap<String, BufferPlacement> {
    let mut out: BTreeMap<String, BufferPlacement> = BTreeMap::new();
    let mut add = |key: &str, f: fn(&mut BufferPlacement)| {
        if let Some(b) = virtual_pods.contains(key).then(|| buffer_of_key(key)).flatten() {
            f(out.entry(b).or_default());
        }
    };
    for p in decisions.existing_nodes.iter().flat_map(|n| &n.pods) {
        add(p, |b| b.existing += 1);
    }
    for p in decisions.new_node_claims.iter().flat_map(|c| &c.pods) {
        add(p, |b| b.new += 1);
    }
    for u in &decisions.unschedulable {
        add(&u.pod, |b| b.unschedulable += 1);
    }
    out
}

/// The buffer `namespace/name` of a virtual pod's key `namespace/capacity-buffer-<buffer>-<i>`.
fn buffer_of_key(key: &str) -> Option<String> {
    let (ns, name) = key.split_once('/')?;
    let rest = name.strip_prefix(karpenter_api::capacitybuffer::VIRTUAL_POD_PREFIX)?.strip_prefix('-')?;
    let (buffer, index) = rest.rsplit_once('-')?;
    index.parse::<u32>().ok()?;
    Some(format!("{ns}/{buffer}"))
}

fn count(n: usize) -> f64 {
    n as f64
}

/// A pod's trigger key, as the cluster state sends it (its uid, else `namespace/name`).
fn trigger_key(pod: &CompactPod) -> String {
    pod.metadata.uid.clone().unwrap_or_else(|| object_key(pod))
}

/// How many example pods a summary line names.
pub const SUMMARY_EXAMPLES: usize = 3;
/// How many distinct causes a pass logs; the rest are counted in one last line.
pub const SUMMARY_CAUSES: usize = 10;

/// One log line about pods that could not be scheduled for the same cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryLine {
    /// The line's message, e.g. `no ready NodePool: 4,812 pending pods cannot be provisioned`.
    pub message: String,
    /// The cause (the scheduler's reason).
    pub cause: String,
    /// The cause's code ([`karpenter_scheduler::UnschedulableReason::code`]; `NoNodePool` for no ready
    /// NodePool, `Various` for the line counting the other causes).
    pub code: &'static str,
    /// How many pods.
    pub pods: u64,
    /// The first few pods (`namespace/name`, comma-separated, `…` when there are more).
    pub examples: String,
}

/// The lines a pass logs for its unschedulable pods: one per distinct reason, most pods first (ties by reason),
/// at most [`SUMMARY_CAUSES`] plus one line counting the rest. With `no_ready_pool` (no NodePool could be used)
/// it is one line for all of them.
pub fn unschedulable_summary(pods: &[UnschedulablePod], no_ready_pool: bool) -> Vec<SummaryLine> {
    if pods.is_empty() {
        return Vec::new();
    }
    let examples = |keys: &[&str]| {
        let mut s = keys.iter().take(SUMMARY_EXAMPLES).copied().collect::<Vec<_>>().join(", ");
        if keys.len() > SUMMARY_EXAMPLES {
            s.push_str(", …");
        }
        s
    };
    if no_ready_pool {
        let keys: Vec<&str> = pods.iter().map(|u| u.pod.as_str()).collect();
        return vec![SummaryLine {
            message: format!("no ready NodePool: {} pending pods cannot be provisioned", thousands(pods.len())),
            cause: "no ready NodePool".into(),
            code: "NoNodePool",
            pods: pods.len() as u64,
            examples: examples(&keys),
        }];
    }
    // By message (then code: two reasons could read alike).
    let mut by_reason: BTreeMap<(String, &'static str), Vec<&str>> = BTreeMap::new();
    for u in pods {
        by_reason.entry((u.reason.to_string(), u.reason.code())).or_default().push(u.pod.as_str());
    }
    let mut groups: Vec<((String, &'static str), Vec<&str>)> = by_reason.into_iter().collect();
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    let mut out: Vec<SummaryLine> = groups
        .iter()
        .take(SUMMARY_CAUSES)
        .map(|((reason, code), keys)| SummaryLine {
            message: if keys.len() == 1 {
                "could not schedule pod".into()
            } else {
                format!("could not schedule {} pods", thousands(keys.len()))
            },
            cause: reason.clone(),
            code,
            pods: keys.len() as u64,
            examples: examples(keys),
        })
        .collect();
    if groups.len() > SUMMARY_CAUSES {
        let rest = &groups[SUMMARY_CAUSES..];
        let n: usize = rest.iter().map(|(_, k)| k.len()).sum();
        let keys: Vec<&str> = rest.iter().flat_map(|(_, k)| k.iter().copied()).collect();
        out.push(SummaryLine {
            message: format!("could not schedule {} more pods for {} other causes", thousands(n), rest.len()),
            cause: "various".into(),
            code: "Various",
            pods: n as u64,
            examples: examples(&keys),
        });
    }
    out
}

/// `4812` as `4,812`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn parse_quantity(pool: &str, what: &str, q: &str) -> Result<Quantity, ProvisionError> {
    q.parse().map_err(|e| ProvisionError::Invalid { pool: pool.to_owned(), message: format!("{what} {q:?}: {e}") })
}

/// Fails when the NodePool's current usage (the capacity of its NodeClaims; `nodes` = their count) reaches one of
/// its limits (upstream refuses creation once usage already exceeds the limits).
pub fn check_limits<C: std::borrow::Borrow<NodeClaim>>(pool: &NodePool, claims: &[C]) -> Result<(), ProvisionError> {
    let name = pool.name_any();
    if pool.spec.limits.is_empty() {
        return Ok(());
    }
    let mut usage = ResourceList::new();
    let mut nodes = 0i64;
    for c in claims.iter().map(std::borrow::Borrow::borrow).filter(|c: &&NodeClaim| pool.owns(c)) {
        nodes += 1;
        for (resource, q) in c.status.iter().flat_map(|s| s.capacity.iter()) {
            let q = parse_quantity(&name, &format!("NodeClaim {} capacity {resource}", c.name_any()), q.as_str())?;
            let sum = usage.get_or_zero(resource).saturating_add(&q);
            usage.insert(resource, sum);
        }
    }
    usage.insert(
        karpenter_api::nodepool::NODES_LIMIT,
        Quantity::from_int(nodes, karpenter_requirements::Format::DecimalSI),
    );
    for (resource, limit) in &pool.spec.limits {
        let limit_q = parse_quantity(&name, &format!("limits.{resource}"), limit.as_str())?;
        let used = usage.get_or_zero(resource);
        let exceeded = if resource == karpenter_api::nodepool::NODES_LIMIT {
            used.as_nanos() >= limit_q.as_nanos()
        } else {
            used.as_nanos() > limit_q.as_nanos()
        };
        if exceeded {
            return Err(ProvisionError::LimitsExceeded {
                pool: name,
                resource: resource.clone(),
                usage: used.to_string(),
                limit: limit.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn generated_names_look_like_the_api_servers_and_differ() {
        let a = super::generated_name("default-");
        let b = super::generated_name("default-");
        assert_eq!(a.len(), "default-".len() + 5);
        assert!(
            a.starts_with("default-") && a["default-".len()..].bytes().all(|c| super::NAME_ALPHABET.contains(&c)),
            "{a}"
        );
        assert_ne!(a, b);
    }

    #[test]
    fn only_answers_below_500_say_a_create_was_not_applied() {
        let status = |code: u16| kube::Error::Api(kube::core::Status::failure("x", "Reason").with_code(code).boxed());
        assert!(!super::outcome_unknown(&status(409)));
        assert!(!super::outcome_unknown(&status(422)));
        assert!(super::outcome_unknown(&status(503)));
        assert!(super::outcome_unknown(&kube::Error::LinesCodecMaxLineLengthExceeded));
    }

    use super::*;
    use crate::state::ClusterState;
    use karpenter_api::labels::{self, annotations};
    use karpenter_api::nodeclaim::ResourceQuantity;
    use karpenter_scheduler::decision::UnschedulableReason;
    use karpenter_testing::apiserver::{ApiServer, create_with_status};
    use karpenter_testing::{
        FakeClock, NodeClaimOptions, NodePoolOptions, PodOptions, kwok_node_class_ref, node_claim, node_pool,
        nodepool_requirement, unschedulable_pod,
    };
    use kube::api::ListParams;

    #[tokio::test(start_paused = true)]
    async fn batches_end_after_idle_or_max_and_repeats_do_not_extend() {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut batcher = Batcher::new(rx, Duration::from_secs(1), Duration::from_secs(10));
        // Nothing: returns empty after the first-trigger wait.
        let t0 = tokio_now();
        assert!(batcher.wait().await.is_empty());
        assert_eq!(t0.elapsed(), FIRST_TRIGGER_WAIT);

        // Idle: two triggers 500 ms apart end 1 s after the second.
        let sender = tx.clone();
        tokio::spawn(async move {
            sender.send(Trigger::Pod("a".into())).unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
            sender.send(Trigger::Pod("b".into())).unwrap();
        });
        let t0 = tokio_now();
        let batch = batcher.wait().await;
        assert_eq!(batch.into_iter().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(t0.elapsed(), Duration::from_millis(1500));

        // A repeated key does not extend the idle window.
        let sender = tx.clone();
        tokio::spawn(async move {
            sender.send(Trigger::Pod("a".into())).unwrap();
            tokio::time::sleep(Duration::from_millis(900)).await;
            sender.send(Trigger::Pod("a".into())).unwrap();
        });
        let t0 = tokio_now();
        assert_eq!(batcher.wait().await.len(), 1);
        assert_eq!(t0.elapsed(), Duration::from_secs(1));

        // Max: a new pod every 300 ms keeps it open for 10 s at most (34 pods: 0 s … 9.9 s).
        let sender = tx.clone();
        let feeder = tokio::spawn(async move {
            for i in 0..100 {
                sender.send(Trigger::Pod(format!("p{i}"))).unwrap();
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        let t0 = tokio_now();
        let batch = batcher.wait().await;
        assert_eq!(t0.elapsed(), Duration::from_secs(10));
        assert_eq!(batch.len(), 34);
        feeder.abort();
    }

    struct Fixture {
        server: ApiServer,
        state: ClusterState,
        provisioner: Provisioner,
        clock: FakeClock,
    }

    async fn fixture(pool: NodePoolOptions) -> Fixture {
        fixture_with(pool, ProvisionerOptions::default()).await
    }

    async fn fixture_with(pool: NodePoolOptions, options: ProvisionerOptions) -> Fixture {
        let server = ApiServer::new();
        let client = server.client();
        let clock = FakeClock::default();
        let state = ClusterState::new(Arc::new(clock.clone()), Duration::from_secs(20));
        state.mark_all_synced();
        let pool = node_pool(NodePoolOptions { node_class_ref: Some(kwok_node_class_ref("default")), ..pool });
        let created = create_with_status(&Api::<NodePool>::all(client.clone()), &pool).await.unwrap();
        state.apply(created);
        let ctx =
            ControllerContext::for_tests(client, Arc::new(karpenter_testing::kwok::fake()), Arc::new(clock.clone()))
                .with_state(state.clone());
        let provisioner = Provisioner::new(&ctx, options);
        Fixture { server, state, provisioner, clock }
    }

    async fn add_pod(f: &Fixture, o: PodOptions) {
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(f.server.client(), "default");
        let created = create_with_status(&pods, &unschedulable_pod(o)).await.unwrap();
        f.state.apply(CompactPod::from(created));
    }

    async fn events(f: &Fixture, reason: &str) -> Vec<String> {
        // Events are posted detached; give the tasks a moment.
        let api: Api<k8s_openapi::api::core::v1::Event> = Api::all(f.server.client());
        for _ in 0..100 {
            let list = api.list(&ListParams::default()).await.unwrap();
            let found: Vec<String> = list
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .map(|e| e.message.clone().unwrap_or_default())
                .collect();
            if !found.is_empty() {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Vec::new()
    }

    #[tokio::test]
    async fn a_pass_creates_one_claim_and_the_next_passes_never_launch_again() {
        let f = fixture(NodePoolOptions {
            name: Some("default".into()),
            labels: [("team".to_owned(), "a".to_owned())].into(),
            termination_grace_period: Some("1h".into()),
            requirements: vec![nodepool_requirement("karpenter.sh/capacity-type", "In", &["on-demand"])],
            ..Default::default()
        })
        .await;
        for name in ["a", "b"] {
            add_pod(&f, PodOptions { name: Some(name.into()), requests: [("cpu", "1")].into(), ..Default::default() })
                .await;
        }
        let report = f.provisioner.provision().await.unwrap();
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(report.created.len(), 1);
        let (name, pods) = &report.created[0];
        assert_eq!(pods, &["default/a", "default/b"]);

        let claims: Api<NodeClaim> = Api::all(f.server.client());
        let claim = claims.get(name).await.unwrap();
        assert!(name.starts_with("default-"));
        let l = claim.labels();
        assert_eq!(l.get(labels::NODE_POOL).map(String::as_str), Some("default"));
        assert_eq!(l.get("team").map(String::as_str), Some("a"));
        assert_eq!(l.get("karpenter.kwok.sh/kwoknodeclass").map(String::as_str), Some("default"));
        let a = claim.annotations();
        assert!(a.contains_key(annotations::NODE_POOL_HASH) && a.contains_key(annotations::NODE_POOL_HASH_VERSION));
        let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("NodePool", "default"));
        let it = claim.spec.requirements.iter().find(|r| r.key == labels::INSTANCE_TYPE).unwrap();
        assert!(!it.values.is_empty());
        let ct = claim.spec.requirements.iter().find(|r| r.key == labels::CAPACITY_TYPE).unwrap();
        assert_eq!(ct.values, ["on-demand"]);
        let requests = &claim.spec.resources.as_ref().unwrap().requests;
        assert_eq!(requests.get("cpu").map(ResourceQuantity::as_str), Some("2"));
        assert_eq!(claim.spec.termination_grace_period.as_ref().map(ToString::to_string).as_deref(), Some("1h"));
        assert!(f.state.is_nominated(name));
        assert_eq!(events(&f, reasons::NOMINATED).await.len(), 2);

        // Second pass: the claim has not launched, the state is not synced: nothing happens.
        let second = f.provisioner.provision().await.unwrap();
        assert!(second.waiting.as_deref().unwrap().contains("has not launched"));
        assert!(second.created.is_empty());

        // Once launched (capacity known), the pods are nominated to the in-flight claim instead.
        let mut launched = claim.clone();
        let fake = node_claim(NodeClaimOptions {
            name: Some(name.clone()),
            provider_id: Some(format!("kwok://{name}")),
            allocatable: [("cpu", "4"), ("memory", "16Gi"), ("pods", "110")].into(),
            capacity: [("cpu", "4"), ("memory", "16Gi"), ("pods", "110")].into(),
            launched: true,
            ..Default::default()
        });
        launched.status = fake.status;
        f.state.apply(launched);
        let third = f.provisioner.provision().await.unwrap();
        assert!(third.waiting.is_none());
        assert!(third.created.is_empty(), "{:?}", third.created);
        assert_eq!(third.nominated.get("default/a"), Some(name));
        assert_eq!(claims.list(&ListParams::default()).await.unwrap().items.len(), 1);
        let _ = &f.clock;
    }

    /// With `IGNORE_DRA_REQUESTS=false` a pod whose claim a node's published slice satisfies is nominated there;
    /// with the default it is left unplaced with the "not simulated" reason.
    #[tokio::test]
    async fn dra_claims_are_simulated_only_when_not_ignored() {
        use k8s_openapi::api::resource::v1beta1::{DeviceClass, ResourceClaim, ResourceSlice};
        for ignore in [true, false] {
            let options = ProvisionerOptions { ignore_dra_requests: ignore, ..Default::default() };
            let f = fixture_with(NodePoolOptions { name: Some("default".into()), ..Default::default() }, options).await;
            let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "gpu-node", "labels": {"kubernetes.io/hostname": "gpu-node"}},
                "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}
            }))
            .unwrap();
            f.state.apply(node);
            let class: DeviceClass =
                serde_json::from_value(serde_json::json!({"metadata": {"name": "gpu"}, "spec": {}})).unwrap();
            f.state.apply(class);
            let slice: ResourceSlice = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "gpu-node-gpus"},
                "spec": {"driver": "gpu.example.com", "nodeName": "gpu-node",
                         "pool": {"name": "gpu-node", "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": "gpu-0", "basic": {}}]}
            }))
            .unwrap();
            f.state.apply(slice);
            let claim: ResourceClaim = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "gpu", "namespace": "default"},
                "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "gpu"}]}}
            }))
            .unwrap();
            f.state.apply(claim);
            let mut pod = unschedulable_pod(PodOptions {
                name: Some("trainer".into()),
                requests: [("cpu", "1")].into(),
                ..Default::default()
            });
            if let Some(spec) = pod.spec.as_mut() {
                spec.resource_claims = Some(vec![k8s_openapi::api::core::v1::PodResourceClaim {
                    name: "gpu".into(),
                    resource_claim_name: Some("gpu".into()),
                    resource_claim_template_name: None,
                }]);
            }
            let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(f.server.client(), "default");
            let created = create_with_status(&pods, &pod).await.unwrap();
            f.state.apply(CompactPod::from(created));
            let report = f.provisioner.provision().await.unwrap();
            assert!(report.created.is_empty(), "{ignore}: {:?}", report.created);
            if ignore {
                assert_eq!(report.unschedulable.len(), 1);
                assert_eq!(report.unschedulable[0].reason.code(), "Unsupported");
            } else {
                assert_eq!(report.nominated.get("default/trainer").map(String::as_str), Some("gpu-node"), "{report:?}");
            }
        }
    }

    #[tokio::test]
    async fn pods_that_fit_nothing_get_failed_scheduling() {
        let f = fixture(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
        add_pod(
            &f,
            PodOptions { name: Some("huge".into()), requests: [("cpu", "100000")].into(), ..Default::default() },
        )
        .await;
        let report = f.provisioner.provision().await.unwrap();
        assert!(report.created.is_empty());
        assert_eq!(report.unschedulable.len(), 1);
        let messages = events(&f, reasons::FAILED_SCHEDULING).await;
        assert_eq!(messages.len(), 1);
        assert!(messages[0].starts_with("Failed to schedule pod, "), "{messages:?}");
    }

    #[tokio::test]
    async fn limits_reached_refuse_creation_and_say_why() {
        let f = fixture(NodePoolOptions {
            name: Some("default".into()),
            limits: [("nodes", "1")].into(),
            ..Default::default()
        })
        .await;
        // One claim of this pool exists already.
        f.state.apply(node_claim(NodeClaimOptions {
            name: Some("existing".into()),
            node_pool: Some("default".into()),
            provider_id: Some("kwok://existing".into()),
            taints: vec![karpenter_api::Taint::new("dedicated", Some("x"), karpenter_api::TaintEffect::NoSchedule)],
            allocatable: [("cpu", "4"), ("pods", "110")].into(),
            capacity: [("cpu", "4"), ("pods", "110")].into(),
            launched: true,
            ..Default::default()
        }));
        add_pod(&f, PodOptions { name: Some("a".into()), requests: [("cpu", "1")].into(), ..Default::default() }).await;
        let report = f.provisioner.provision().await.unwrap();
        assert!(report.created.is_empty());
        // The scheduler's own limit accounting or the re-check refuses it; either way nothing is created.
        let claims: Api<NodeClaim> = Api::all(f.server.client());
        assert_eq!(claims.list(&ListParams::default()).await.unwrap().items.len(), 0);
        let pool = f.state.get::<NodePool>("default").unwrap();
        let err = check_limits(&pool, &f.state.list::<NodeClaim>()).unwrap_err();
        assert!(err.to_string().contains("nodes usage 1 exceeds limit 1"), "{err}");
    }

    /// With no ready NodePool the pass logs one ERROR line for all pending pods (count and a few names), and
    /// still gives every pod its FailedScheduling event.
    #[tokio::test]
    async fn no_ready_nodepool_is_one_error_line_per_pass() {
        let f =
            fixture(NodePoolOptions { name: Some("default".into()), ready: Some(false), ..Default::default() }).await;
        for i in 0..25 {
            add_pod(
                &f,
                PodOptions { name: Some(format!("p{i:02}")), requests: [("cpu", "1")].into(), ..Default::default() },
            )
            .await;
        }
        let (_guard, logs) = crate::kube_util::test_log::capture();
        let report = f.provisioner.provision().await.unwrap();
        assert_eq!(report.unschedulable.len(), 25);
        let errors = crate::kube_util::test_log::at(&logs, tracing::Level::ERROR);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("no ready NodePool: 25 pending pods cannot be provisioned"), "{errors:?}");
        assert!(errors[0].contains("default/p00, default/p01, default/p02, …"), "{errors:?}");
        let api: Api<k8s_openapi::api::core::v1::Event> = Api::all(f.server.client());
        for _ in 0..200 {
            let n = api.list(&ListParams::default()).await.unwrap().items.len();
            if n >= 25 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let events = api.list(&ListParams::default()).await.unwrap().items;
        let failed = events.iter().filter(|e| e.reason.as_deref() == Some(reasons::FAILED_SCHEDULING)).count();
        assert_eq!(failed, 25, "one event per pod");
    }

    #[test]
    fn unschedulable_pods_are_summarised_per_cause() {
        let u = |pod: &str, reason: &str| {
            UnschedulablePod::new(
                pod.parse().expect("a pod key"),
                UnschedulableReason::InvalidPod { message: reason.into() },
            )
        };
        let pods = vec![u("a/1", "too big"), u("a/2", "no zone"), u("a/3", "too big"), u("a/4", "too big")];
        let lines = unschedulable_summary(&pods, false);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].message, "could not schedule 3 pods");
        assert_eq!((lines[0].cause.as_str(), lines[0].code, lines[0].pods), ("too big", "InvalidPod", 3));
        assert_eq!(lines[0].examples, "a/1, a/3, a/4");
        assert_eq!(lines[1].message, "could not schedule pod");
        assert_eq!(lines[1].examples, "a/2");
        let one = unschedulable_summary(&pods, true);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].message, "no ready NodePool: 4 pending pods cannot be provisioned");
        assert_eq!(one[0].examples, "a/1, a/2, a/3, …");
        assert!(unschedulable_summary(&[], true).is_empty());
        // Many causes: the first SUMMARY_CAUSES, then one line for the rest.
        let many: Vec<UnschedulablePod> = (0..15).map(|i| u(&format!("b/{i}"), &format!("cause {i:02}"))).collect();
        let lines = unschedulable_summary(&many, false);
        assert_eq!(lines.len(), SUMMARY_CAUSES + 1);
        assert_eq!(lines[SUMMARY_CAUSES].message, "could not schedule 5 more pods for 5 other causes");
        assert_eq!(lines[SUMMARY_CAUSES].code, "Various");
        // Reasons that read alike but differ in code are separate causes.
        let alike = vec![
            u("c/1", "scheduling timed out"),
            UnschedulablePod::new("c/2".parse().expect("a pod key"), UnschedulableReason::Timeout),
        ];
        let lines = unschedulable_summary(&alike, false);
        let codes: Vec<(&str, &str)> = lines.iter().map(|l| (l.cause.as_str(), l.code)).collect();
        assert_eq!(codes, [("scheduling timed out", "InvalidPod"), ("scheduling timed out", "Timeout")]);
        assert_eq!(thousands(4812), "4,812");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(0), "0");
    }

    /// The simulation's progress gauges: a pass leaves its queue depth (0: every pod was tried) under its own
    /// `scheduling_id` and drops its unfinished work.
    #[tokio::test]
    async fn a_simulation_reports_its_queue_depth_and_drops_its_unfinished_work() {
        let f = fixture(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
        add_pod(&f, PodOptions { name: Some("a".into()), requests: [("cpu", "1")].into(), ..Default::default() }).await;
        f.provisioner.provision().await.unwrap();
        let text = f.provisioner.ctx.metrics.render();
        assert!(
            text.contains("karpenter_scheduler_queue_depth{controller=\"provisioner\",scheduling_id=\"0\"} 0.0"),
            "{text}"
        );
        assert!(!text.contains("karpenter_scheduler_unfinished_work_seconds{"), "{text}");
    }

    /// The time from a pod's first trigger to its NodeClaim's creation is observed once per pod (re-triggers do
    /// not restart the clock; a second claim for the same pod is not observed again), and the first-seen entry
    /// goes once the pod is no longer pending.
    #[tokio::test]
    async fn pod_to_nodeclaim_latency_is_observed_once_and_pruned() {
        let f = fixture(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
        add_pod(&f, PodOptions { name: Some("a".into()), requests: [("cpu", "1")].into(), ..Default::default() }).await;
        let pod = f.state.get::<CompactPod>("default/a").unwrap();
        let uid = pod.metadata.uid.clone().expect("the API server sets a uid");
        let seen = f.provisioner.first_seen();
        let now = tokio_now();
        seen.record(&uid, now.checked_sub(Duration::from_secs(3)).unwrap());
        seen.record(&uid, now); // a re-trigger keeps the first time
        let report = f.provisioner.provision().await.unwrap();
        assert_eq!(report.created.len(), 1);
        let text = f.provisioner.ctx.metrics.render();
        let count = "karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_count{nodepool=\"default\"} 1";
        assert!(text.contains(count), "{text}");
        let le3 =
            "karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_bucket{le=\"2.5\",nodepool=\"default\"} 0";
        let le35 =
            "karpenter_provisioner_pod_to_nodeclaim_created_duration_seconds_bucket{le=\"3.5\",nodepool=\"default\"} 1";
        assert!(text.contains(le3) && text.contains(le35), "{text}");
        assert_eq!(seen.len(), 1, "kept (marked) while the pod is pending");
        assert_eq!(seen.observe(&uid, tokio_now()), None, "observed once");

        // Bound: the next pass forgets it.
        let mut bound = pod.clone();
        Arc::make_mut(&mut bound.spec).node_name = Some("n1".into());
        bound.status = None;
        f.state.apply(bound);
        f.state.apply(
            f.state
                .get::<NodeClaim>(&report.created[0].0)
                .map(|mut c| {
                    c.status = node_claim(NodeClaimOptions {
                        launched: true,
                        provider_id: Some("kwok://x".into()),
                        ..Default::default()
                    })
                    .status;
                    c
                })
                .unwrap(),
        );
        let _ = f.provisioner.provision().await.unwrap();
        assert!(seen.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_stamped_batcher_records_first_trigger_times() {
        let (tx, rx) = mpsc::unbounded_channel();
        let seen = FirstSeen::default();
        let mut batcher = Batcher::stamped(rx, Duration::from_secs(1), Duration::from_secs(10), seen.clone());
        let t0 = tokio_now();
        tx.send(Trigger::Pod("uid-a".into())).unwrap();
        tx.send(Trigger::Node("n1".into())).unwrap();
        let batch = batcher.wait().await;
        assert_eq!(batch.len(), 2);
        assert_eq!(seen.len(), 1, "only pods are timed");
        tokio::time::sleep(Duration::from_secs(5)).await;
        tx.send(Trigger::Pod("uid-a".into())).unwrap();
        batcher.wait().await;
        assert_eq!(seen.observe("uid-a", t0 + Duration::from_secs(7)), Some(Duration::from_secs(7)));
    }

    #[test]
    fn a_plan_for_another_pool_is_a_build_error() {
        let pool = node_pool(NodePoolOptions { name: Some("p".into()), ..Default::default() });
        let mut plan = NodeClaimPlan::from_template(&pool, "p-1").unwrap();
        plan.node_pool = "q".into();
        let err: ProvisionError =
            build_node_claim(&pool, &plan, &karpenter_kwok::labels::provider_labels()).unwrap_err().into();
        assert_eq!(err.to_string(), "building the NodeClaim: the plan p-1 is for NodePool q, not p");
    }
}
