//! `pod.deletioncost` (feature gate `PodDeletionCostManagement`, registered only with the gate on): keeps
//! `controller.kubernetes.io/pod-deletion-cost` on the pods of managed nodes so that a ReplicaSet scaling in
//! deletes first the pods on the nodes consolidation would remove first, and so empties them.
//!
//! One cycle a minute (1 s while the cluster state is not synced). A cycle is skipped (counted in
//! `karpenter_pod_deletion_cost_reconcile_skipped_total`) while the state's consolidation state stands where the
//! last successful cycle left it, but not for longer than [`REFRESH`]: time alone changes budgets and
//! `consolidateAfter`. The ranking and the writes are karpenter-disruption's ([`karpenter_disruption::
//! deletion_cost`]); this controller only patches the pods whose value changes, with [`WORKERS`] writes in
//! flight. Throttling, timeouts and unavailability are retried with exponential backoff; a pod gone (404) or
//! changed under the write (409) counts as skipped. A cycle with write errors is not successful, so the next one
//! runs whatever the consolidation state.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::NodePool;
use karpenter_api::labels::annotations;
use karpenter_api::time::chrono_duration;
use karpenter_cloudprovider::time::Stopwatch;
use karpenter_disruption::deletion_cost::{self, Group, MAX_NODES_PER_CYCLE, PodPatch};
use karpenter_requirements::InstanceType;
use karpenter_scheduler::PoolInput;
use karpenter_scheduler::snapshot::SnapshotError;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::kube_util::{is_not_found, is_transient, is_write_conflict};
use crate::state::simulate_off_runtime;

/// The controller's name (logs, the provider decorator).
pub const CONTROLLER: &str = "pod.deletioncost";
/// Time between cycles.
pub const INTERVAL: Duration = Duration::from_secs(60);
/// Retry while the cluster state is not synced.
pub const UNSYNCED_RETRY: Duration = Duration::from_secs(1);
/// A cycle runs at least this often although the consolidation state stands still.
pub const REFRESH: Duration = Duration::from_secs(5 * 60);
/// Pod writes in flight.
pub const WORKERS: usize = 10;
/// Attempts per pod write when the API server throttles or is unavailable.
const ATTEMPTS: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// What one cycle did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// Why the cycle waited (the state is not synced).
    pub waiting: Option<String>,
    /// Skipped: nothing changed since the last successful cycle.
    pub skipped: bool,
    /// Nodes ranked (drifted and disruptable within budget).
    pub ranked: usize,
    /// Pods written.
    pub updated: usize,
    /// Pods that already held their value, or went away or changed under the write.
    pub skipped_unchanged: usize,
    /// Pod writes that failed.
    pub errors: usize,
    /// Nodes with changes left to a later cycle by the per-cycle cap.
    pub deferred_nodes: usize,
    /// When to run again.
    pub requeue: Duration,
}

/// The controller.
pub struct DeletionCost {
    ctx: ControllerContext,
    honor_autoscaler_annotations: bool,
    /// The consolidation state at the start of the last successful cycle, and when it ran.
    last: Mutex<Option<(u64, DateTime<Utc>)>>,
}

impl std::fmt::Debug for DeletionCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeletionCost").finish_non_exhaustive()
    }
}

enum Written {
    Updated,
    Skipped,
    Failed,
}

impl DeletionCost {
    /// The controller over `ctx`; `honor_autoscaler_annotations` as the disruption loop reads it
    /// (`HONOR_AUTOSCALER_ANNOTATIONS`), so both agree on which nodes are disruptable.
    pub fn new(ctx: &ControllerContext, honor_autoscaler_annotations: bool) -> Self {
        Self { ctx: ctx.clone(), honor_autoscaler_annotations, last: Mutex::default() }
    }

    /// Runs cycles until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let passes = self.ctx.metrics.reconciler(CONTROLLER, 1);
        loop {
            let pass = passes.pass();
            let step = self.step().await;
            pass.finish(crate::metrics::ReconcileResult::of_pass(&step));
            let wait = match step {
                Ok(report) => report.requeue,
                Err(e) => {
                    tracing::error!(controller = CONTROLLER, error = %e, "deletion-cost ranking failed");
                    INTERVAL
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// One cycle (see the module docs).
    pub async fn step(&self) -> Result<CycleReport, SnapshotError> {
        let mut report = CycleReport { requeue: INTERVAL, ..CycleReport::default() };
        if let Some(reason) = self.ctx.state.unsynced_reason() {
            report.waiting = Some(reason);
            report.requeue = UNSYNCED_RETRY;
            return Ok(report);
        }
        let mut last = self.last.lock().await;
        let now = self.ctx.clock.now();
        let state_before = self.ctx.state.consolidation_state();
        if last.is_some_and(|(state, at)| state == state_before && now - at < chrono_duration(REFRESH)) {
            self.ctx.metrics.pod_deletion_cost_reconcile_skipped().inc();
            report.skipped = true;
            return Ok(report);
        }

        let started = Stopwatch::start();
        let ranking = self.rank(now).await?;
        self.ctx.metrics.pod_deletion_cost_ranking_duration_seconds().observe(started.elapsed().as_secs_f64());
        report.ranked = ranking.iter().filter(|n| matches!(n.group, Group::Drifted | Group::Disruptable)).count();
        self.ctx.metrics.pod_deletion_cost_nodes_ranked().set(report.ranked as f64);

        let plan = deletion_cost::plan(&ranking, MAX_NODES_PER_CYCLE);
        report.skipped_unchanged = plan.unchanged;
        report.deferred_nodes = plan.deferred_nodes;
        let started = Stopwatch::start();
        // The futures are lazy: at most WORKERS of them run at once.
        let writes: Vec<_> = plan.patches.iter().map(|p| self.write(p)).collect();
        let results: Vec<Written> = stream::iter(writes).buffer_unordered(WORKERS).collect().await;
        self.ctx.metrics.pod_deletion_cost_annotation_duration_seconds().observe(started.elapsed().as_secs_f64());
        for r in results {
            match r {
                Written::Updated => report.updated += 1,
                Written::Skipped => report.skipped_unchanged += 1,
                Written::Failed => report.errors += 1,
            }
        }
        let count = |result: &str, n: usize| self.ctx.metrics.pod_deletion_cost_pods_updated(result).inc_by(n as u64);
        count("updated", report.updated);
        count("skipped_unchanged", report.skipped_unchanged);
        count("error", report.errors);
        if report.errors == 0 {
            *last = Some((state_before, now));
        }
        if report.updated > 0 || report.errors > 0 {
            tracing::info!(
                controller = CONTROLLER,
                ranked = report.ranked,
                updated = report.updated,
                errors = report.errors,
                deferred_nodes = report.deferred_nodes,
                "pod deletion costs written"
            );
        }
        Ok(report)
    }

    /// The ranking of the current state, computed off the runtime as the disruption pass is.
    async fn rank(&self, now: DateTime<Utc>) -> Result<Vec<deletion_cost::RankedNode>, SnapshotError> {
        let _gate = self.ctx.state.whole_cluster_pass().await;
        let snapshot = self.ctx.state.snapshot()?.cluster;
        let pools = self.pools(&snapshot.node_pools).await;
        let not_ready_nodes =
            self.ctx.state.list_shared::<Node>().iter().filter(|n| !node_ready(n)).map(|n| n.name_any()).collect();
        let options = karpenter_disruption::DisruptionOptions {
            not_ready_nodes,
            honor_autoscaler_annotations: self.honor_autoscaler_annotations,
            pod_deletion_cost_management: true,
            ..Default::default()
        };
        let labels = self.ctx.cloud.labels().clone();
        Ok(simulate_off_runtime(move || {
            let inputs: Vec<PoolInput<'_>> =
                pools.iter().map(|(p, its)| PoolInput { node_pool: p, instance_types: its }).collect();
            deletion_cost::rank(&snapshot, &inputs, &labels, now, &options)
        })
        .await
        .unwrap_or_default())
    }

    /// The NodePools (not deleting) with their instance types; a pool whose types cannot be listed is left out
    /// (its nodes are not candidates, so their pods lose the annotation until it can be listed again).
    async fn pools(&self, pools: &[NodePool]) -> Vec<(NodePool, Arc<[InstanceType]>)> {
        let mut out = Vec::new();
        for pool in pools.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
            match self.ctx.cloud.instance_types(pool).await {
                Ok(its) => out.push((pool.clone(), its)),
                Err(e) => crate::kube_util::log_instance_types_error(
                    CONTROLLER,
                    &pool.name_any(),
                    &e,
                    "the pool's nodes are not ranked this cycle",
                ),
            }
        }
        out
    }

    /// One pod's merge patch: the value, or `null` to remove the annotation.
    async fn write(&self, p: &PodPatch) -> Written {
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &p.namespace);
        let value = p.cost.map(|c| c.to_string());
        let body = json!({"metadata": {"annotations": {annotations::POD_DELETION_COST: value}}});
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=ATTEMPTS {
            match api.patch(&p.name, &PatchParams::default(), &Patch::Merge(&body)).await {
                Ok(_) => return Written::Updated,
                Err(e) if is_not_found(&e) || is_write_conflict(&e) => return Written::Skipped,
                Err(e) if is_transient(&e) && attempt < ATTEMPTS => {
                    tracing::debug!(controller = CONTROLLER, pod = %format!("{}/{}", p.namespace, p.name),
                        error = %e, "pod deletion cost write retried");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                Err(e) => {
                    tracing::warn!(controller = CONTROLLER, pod = %format!("{}/{}", p.namespace, p.name),
                        error = %e, "writing the pod deletion cost failed");
                    return Written::Failed;
                }
            }
        }
        Written::Failed
    }
}

fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
