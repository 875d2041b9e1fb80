//! The NodePool controllers (status, conditions, drift hash, static capacity) and the status controller of the
//! node-class kinds that are ready on sight.
//!
//! | Controller | Module | Writes |
//! |---|---|---|
//! | `nodepool.readiness` | [`readiness`] | `NodeClassReady` (from the referenced node class) and the root `Ready` |
//! | `nodepool.validation` | [`validation`] | `ValidationSucceeded` (karpenter-api's runtime validation) and `Ready` |
//! | `nodepool.registrationhealth` | [`registration_health`] | `NodeRegistrationHealthy`, `status.nodeClassObservedGeneration` |
//! | `nodepool.counter` | [`counter`] | `status.resources`, `status.nodes`; metrics `nodepools_limit`, `nodepools_usage` |
//! | `nodepool.hash` | [`hash`] | `karpenter.sh/nodepool-hash(-version)` on the pool; the version rewrite on its NodeClaims |
//! | `static.provisioning` / `static.deprovisioning` | [`static_capacity`] | NodeClaims of static pools (`spec.replicas`) |
//! | `nodepool.minnodes` | [`min_nodes`] | `MinNodesValid`; NodeClaims up to a dynamic pool's `karpenter-rs.io/min-nodes` floor |
//! | `<kind>.status` | [`nodeclass`] | `Ready=True` on the node classes of each kind registered ready on sight |
//!
//! Every controller has a deterministic single step (`reconcile(name)`, reading the object fresh from the API
//! server, returning when to look again) and a `run(self: Arc<Self>, shutdown)` loop on kube-runtime's
//! `Controller`. Status writes are JSON merge patches guarded by the resourceVersion they were computed from: a
//! concurrent writer makes them fail with 409 Conflict, and the run loop retries at once on fresh data (several
//! controllers write NodePool conditions; none overwrites another's).
//!
//! The root `Ready` of a NodePool is recomputed by every writer of a dependent condition ([`recompute_ready`]):
//! `True` when `ValidationSucceeded` and `NodeClassReady` are both `True`, `False` when one is `False`, else
//! `Unknown`. Only `Ready=True` pools are used by the provisioner.

pub mod counter;
pub mod hash;
pub mod min_nodes;
pub mod nodeclass;
pub mod readiness;
pub mod registration_health;
pub mod static_capacity;
pub mod validation;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use karpenter_api::NodePool;
use karpenter_api::condition::{Condition, ConditionStatus};
use karpenter_api::labels;
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_api::nodepool::NodePoolStatus;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::kube_util::ReconcileError;
use crate::metrics::runtime::queue::ControllerQueue;
use crate::state::ClusterState;
use crate::termination::error_policy;

pub use counter::Counter;
pub use hash::HashController;
pub use min_nodes::MinNodes;
pub use nodeclass::{NodeClassRegistration, NodeClassResolver, ReadyOnSight};
pub use readiness::Readiness;
pub use registration_health::{RegistrationHealth, RegistrationTracker};
pub use static_capacity::{StaticDeprovisioning, StaticProvisioning};
pub use validation::Validation;

/// The conditions whose conjunction is a NodePool's root `Ready`.
pub const READY_DEPENDENTS: [&str; 2] = [cond::VALIDATION_SUCCEEDED, cond::NODE_CLASS_READY];
/// Reason of a root `Ready` that is not `True`.
pub const UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";

/// Sets one NodePool condition (observedGeneration = the pool's generation, the message cut to
/// [`crate::lifecycle::MAX_CONDITION_MESSAGE`] characters); returns whether it changed.
pub fn set_pool_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
    generation: Option<i64>,
) -> bool {
    let message = crate::lifecycle::truncate(message);
    karpenter_api::set_condition(conditions, type_, status, reason, &message, generation, now)
}

/// Recomputes the root `Ready` from [`READY_DEPENDENTS`] (see the module docs); returns whether it changed.
pub fn recompute_ready(conditions: &mut Vec<Condition>, now: DateTime<Utc>, generation: Option<i64>) -> bool {
    let mut unhealthy = Vec::new();
    let mut any_false = false;
    for dep in READY_DEPENDENTS {
        match conditions.iter().find(|c| c.type_ == dep).map(|c| c.status) {
            Some(ConditionStatus::True) => {}
            Some(ConditionStatus::False) => {
                any_false = true;
                unhealthy.push(format!("{dep}=False"));
            }
            _ => unhealthy.push(format!("{dep}=Unknown")),
        }
    }
    let (status, reason, message) = if unhealthy.is_empty() {
        (ConditionStatus::True, cond::READY.to_owned(), String::new())
    } else {
        let status = if any_false { ConditionStatus::False } else { ConditionStatus::Unknown };
        (status, UNHEALTHY_DEPENDENTS.to_owned(), unhealthy.join(", "))
    };
    set_pool_condition(conditions, cond::READY, status, &reason, &message, now, generation)
}

/// Writes the NodePool's status fields in `status` (a JSON object: `conditions`, `resources`, …) with a merge patch
/// of the status subresource guarded by `pool`'s resourceVersion. Returns the stored pool.
pub(crate) async fn patch_pool_status(
    api: &Api<NodePool>,
    pool: &NodePool,
    status: serde_json::Value,
) -> Result<NodePool, kube::Error> {
    let patch = json!({"metadata": {"resourceVersion": pool.resource_version()}, "status": status});
    api.patch_status(&pool.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await
}

/// Writes a NodePool's conditions when they differ from the stored ones.
pub(crate) async fn write_pool_conditions(
    api: &Api<NodePool>,
    pool: &NodePool,
    conditions: Vec<Condition>,
) -> Result<Option<NodePool>, kube::Error> {
    if conditions.as_slice() == pool.conditions() {
        return Ok(None);
    }
    patch_pool_status(api, pool, json!({"conditions": conditions})).await.map(Some)
}

/// The pool's status (empty when none).
pub(crate) fn status_of(pool: &NodePool) -> NodePoolStatus {
    pool.status.clone().unwrap_or_default()
}

/// Which related objects wake a NodePool controller up, besides changes to its NodePools' spec or annotations.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Watches {
    /// NodeClaims, mapped to their pool by the `karpenter.sh/nodepool` label.
    pub node_claims: bool,
    /// Nodes, mapped the same way.
    pub nodes: bool,
    /// Wake on every NodePool change, status writes included (a controller whose inputs include the pool's
    /// status, or what another controller mirrors into it: readiness for static scale-up, the node class for
    /// registration health). Otherwise only spec, annotation and deletion changes wake it.
    pub status_changes: bool,
    /// Wait this long after a trigger and merge the triggers that come meanwhile into one reconcile (a
    /// scale-out changes hundreds of NodeClaims a second; a recount per change is wasted work).
    pub debounce: Option<Duration>,
}

/// Runs a NodePool controller on kube-runtime until `shutdown`: `reconcile` per NodePool, errors retried by
/// [`error_policy`] (at once after a conflict, else in 5 s).
///
/// Everything comes from the cluster state's one watch per kind ([`ClusterState::controller_source`]), and the
/// pool handed to `reconcile` is the state's copy: no controller opens a watch or reads the API server per event.
/// A NodePool wakes a controller only when its spec, annotations or deletion change (unless it asks for
/// [`Watches::status_changes`]): every status write of one of them (the counter's on each NodeClaim event) would
/// otherwise wake all the others.
pub(crate) async fn run_pool_controller<C, R, Fut>(
    state: &ClusterState,
    ctx: Arc<C>,
    watches: Watches,
    shutdown: CancellationToken,
    reconcile: R,
) where
    C: crate::kube_util::ErrorPolicyContext + Send + Sync + 'static,
    R: FnMut(Arc<NodePool>, Arc<C>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Action, ReconcileError>> + Send + 'static,
{
    let queue = ControllerQueue::new(ctx.reconciles(0));
    let (pools, pool_events) = state.controller_source::<NodePool>();
    let pool_events = if watches.status_changes { pool_events.boxed() } else { spec_changes(pool_events).boxed() };
    let mut controller = Controller::for_shared_stream(queue.objects(pool_events), pools);
    if watches.node_claims {
        let (_, claim_events) = state.controller_source::<karpenter_api::NodeClaim>();
        controller = controller.watches_shared_stream(
            claim_events,
            queue.mapped(|c: Arc<karpenter_api::NodeClaim>| {
                c.labels().get(labels::NODE_POOL).map(|p| ObjectRef::new(p))
            }),
        );
    }
    if watches.nodes {
        let (_, node_events) = state.controller_source::<k8s_openapi::api::core::v1::Node>();
        controller = controller.watches_shared_stream(
            node_events,
            queue.mapped(|n: Arc<k8s_openapi::api::core::v1::Node>| {
                n.labels().get(labels::NODE_POOL).map(|p| ObjectRef::new(p))
            }),
        );
    }
    if let Some(debounce) = watches.debounce {
        controller = controller.with_config(kube::runtime::controller::Config::default().debounce(debounce));
    }
    queue.run(controller.graceful_shutdown_on(shutdown.cancelled_owned()), reconcile, error_policy, ctx).await;
}

/// What of a NodePool its controllers act on: the spec (its generation), the annotations (the drift hash) and
/// the deletion mark. Status writes change none of them.
type SpecKey = (Option<i64>, BTreeMap<String, String>, bool);

fn spec_key(pool: &NodePool) -> SpecKey {
    (pool.metadata.generation, pool.annotations().clone(), pool.metadata.deletion_timestamp.is_some())
}

/// `events` without the NodePool events that change nothing but the status (see [`spec_key`]). The first event
/// of each pool passes.
pub(crate) fn spec_changes(
    events: impl Stream<Item = Arc<NodePool>> + Send + 'static,
) -> impl Stream<Item = Arc<NodePool>> + Send + 'static {
    let mut seen: BTreeMap<String, SpecKey> = BTreeMap::new();
    events.filter(move |pool| {
        let key = spec_key(pool);
        let changed = seen.get(&pool.name_any()) != Some(&key);
        if changed {
            seen.insert(pool.name_any(), key);
        }
        std::future::ready(changed)
    })
}
