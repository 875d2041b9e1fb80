//! Node repair (feature gate `NodeRepair`): what the disruption loop and the legacy controller share, and the
//! legacy controller itself.
//!
//! * **Voluntary repair** (the default with the gate on, upstream v1.15): the disruption loop hands
//!   [`unhealthy_nodes`] to `karpenter_disruption::repair`, which decides within the `Unhealthy` budget; the loop
//!   launches replacements, then deletes the node with its drain bounded by the policy ([`annotate_drain_bound`]).
//! * **Legacy repair** (`LEGACY_NODE_REPAIR=true`, upstream v1.14): [`LegacyRepair`], the `node.health`
//!   controller. An eligible unhealthy node is deleted forcefully (termination deadline = now) with no replacement
//!   first and no budget, unless more than 20 % of its NodePool's nodes are unhealthy (event `NodeRepairBlocked`,
//!   looked at again after [`BLOCKED_RETRY`]).
//!
//! The provider's policies are validated once at start-up ([`policies`]); a set that fails validation disables
//! repair with an error naming the bad policy, as upstream does not register repair then.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::labels::{self, annotations};
use karpenter_api::repair::{RepairMatch, RepairPolicies, drain_bound};
use karpenter_api::time::{parse_rfc3339, rfc3339};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::events::{Event, reasons};
use crate::kube_util::{ReconcileError, delete_ignoring_missing, label, lock, record_disrupted};
use crate::state::ClusterState;

/// The metric reason of a repair.
pub const REASON: &str = "unhealthy";
/// How soon the legacy controller looks at a pool again after its outer limit blocked repair (upstream v1.14).
pub const BLOCKED_RETRY: Duration = Duration::from_secs(5 * 60);
/// How often the legacy controller looks at the nodes.
pub const LEGACY_INTERVAL: Duration = Duration::from_secs(10);

/// The provider's repair policies, validated; `None` (logged) when the set is invalid or empty.
pub fn policies(ctx: &ControllerContext) -> Option<RepairPolicies> {
    match RepairPolicies::new(ctx.cloud.repair_policies()) {
        Ok(set) if set.is_empty() => {
            tracing::info!(provider = ctx.cloud.name(), "node repair: the provider declares no repair policies");
            None
        }
        Ok(set) => Some(set),
        Err(e) => {
            tracing::error!(provider = ctx.cloud.name(), error = %e,
                "node repair disabled: the provider's repair policies are invalid");
            None
        }
    }
}

/// Whether Karpenter manages `node` (it carries a NodePool label or a NodeClaim owns it).
fn managed(node: &Node) -> bool {
    node.labels().contains_key(labels::NODE_POOL)
}

/// Every managed Node whose conditions match a policy at `now` (eligible or not yet), by name.
pub fn unhealthy_nodes(
    state: &ClusterState,
    policies: &RepairPolicies,
    now: DateTime<Utc>,
) -> BTreeMap<String, RepairMatch> {
    state
        .list_shared::<Node>()
        .iter()
        .filter(|n| managed(n) && n.metadata.deletion_timestamp.is_none())
        .filter_map(|n| {
            let conditions = n.status.as_ref()?.conditions.as_deref()?;
            Some((n.name_any(), policies.assess(conditions, now)?))
        })
        .collect()
}

/// Bounds the drain of a NodeClaim about to be deleted by repair: the termination deadline annotation becomes
/// `now + drain_bound(policy, claim's terminationGracePeriod)` unless an earlier one is set. `policy`: the
/// matching policy's bound (`None`: the claim's own terminationGracePeriod applies, nothing is written here).
pub async fn annotate_drain_bound(
    claims: &Api<NodeClaim>,
    claim: &NodeClaim,
    policy: Option<Duration>,
    now: DateTime<Utc>,
) -> Result<(), kube::Error> {
    if policy.is_none() {
        return Ok(());
    }
    let Some(bound) = drain_bound(policy, claim.spec.termination_grace_period.as_ref().map(|d| d.duration())) else {
        return Ok(());
    };
    let deadline = now + karpenter_api::time::chrono_duration(bound);
    let current = claim.annotations().get(annotations::NODE_CLAIM_TERMINATION_TIMESTAMP).and_then(|v| parse_rfc3339(v));
    if current.is_some_and(|t| t <= deadline) {
        return Ok(());
    }
    let patch =
        json!({"metadata": {"annotations": {annotations::NODE_CLAIM_TERMINATION_TIMESTAMP: rfc3339(deadline)}}});
    claims.patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// The repair metrics of a deleted NodeClaim: `karpenter_nodeclaims_unhealthy_disrupted_total{condition,...}`.
pub fn record_unhealthy(metrics: &crate::metrics::Metrics, claim: &NodeClaim, condition: &str) {
    let image = claim.status.as_ref().and_then(|s| s.image_id.as_deref()).unwrap_or("");
    metrics
        .nodeclaims_unhealthy_disrupted(
            condition,
            claim.node_pool_name().unwrap_or(""),
            label(claim, labels::CAPACITY_TYPE),
            image,
        )
        .inc();
}

/// Legacy node repair, upstream v1.14's `node.health` (see the module docs).
pub struct LegacyRepair {
    ctx: ControllerContext,
    policies: RepairPolicies,
    /// Pools whose outer limit blocked repair, and when to look again.
    blocked: std::sync::Mutex<BTreeMap<String, DateTime<Utc>>>,
}

impl std::fmt::Debug for LegacyRepair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LegacyRepair").finish_non_exhaustive()
    }
}

impl LegacyRepair {
    pub fn new(ctx: &ControllerContext, policies: RepairPolicies) -> Self {
        Self { ctx: ctx.clone(), policies, blocked: std::sync::Mutex::default() }
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.ctx.client.clone())
    }

    /// One look at every node: deletes the eligible unhealthy ones whose pool is within the outer limit; returns
    /// the NodeClaims deleted.
    pub async fn sweep(&self) -> Result<Vec<String>, ReconcileError> {
        let state = &self.ctx.state;
        let now = self.ctx.clock.now();
        let unhealthy = unhealthy_nodes(state, &self.policies, now);
        if unhealthy.is_empty() {
            return Ok(Vec::new());
        }
        let nodes = state.list_shared::<Node>();
        let mut per_pool: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        for n in nodes.iter().filter(|n| managed(n)) {
            let pool = n.labels().get(labels::NODE_POOL).cloned().unwrap_or_default();
            let e = per_pool.entry(pool).or_default();
            e.0 += 1;
            if unhealthy.contains_key(&n.name_any()) {
                e.1 += 1;
            }
        }
        let claims = state.list_shared::<NodeClaim>();
        let mut deleted = Vec::new();
        for node in nodes.iter().filter(|n| managed(n)) {
            let name = node.name_any();
            let Some(m) = unhealthy.get(&name).filter(|m| m.is_eligible(now)) else { continue };
            let pool = node.labels().get(labels::NODE_POOL).cloned().unwrap_or_default();
            if lock(&self.blocked).get(&pool).is_some_and(|until| now < *until) {
                continue;
            }
            let (total, bad) = per_pool.get(&pool).copied().unwrap_or_default();
            let threshold = karpenter_disruption::repair::unhealthy_threshold(total);
            if bad > threshold {
                lock(&self.blocked).insert(pool.clone(), now + karpenter_api::time::chrono_duration(BLOCKED_RETRY));
                let message = format!(
                    "More than {}% of NodePool {pool}'s nodes are unhealthy ({bad} of {total}); node repair is blocked",
                    karpenter_disruption::repair::UNHEALTHY_THRESHOLD_PERCENT
                );
                tracing::info!(controller = "node.health", NodePool = %pool, unhealthy = bad, nodes = total, "{message}");
                self.ctx.recorder.publish_detached(Event::warning(&**node, reasons::NODE_REPAIR_BLOCKED, message));
                continue;
            }
            let Some(claim) = claims.iter().find(|c| c.node_name() == Some(name.as_str())) else { continue };
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            // v1.14: a forceful drain (deadline = now), whatever the claim's terminationGracePeriod.
            annotate_drain_bound(&self.claims(), claim, Some(Duration::ZERO), now).await?;
            delete_ignoring_missing(&self.claims(), &claim.name_any()).await?;
            record_disrupted(&self.ctx.metrics, claim, REASON);
            record_unhealthy(&self.ctx.metrics, claim, &m.condition_type);
            tracing::info!(controller = "node.health", NodeClaim = %claim.name_any(), Node = %name,
                condition = %m.condition_type, status = m.condition_status.as_str(), "deleting unhealthy node");
            deleted.push(claim.name_any());
        }
        Ok(deleted)
    }

    /// Sweeps every [`LEGACY_INTERVAL`] until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let passes = self.ctx.metrics.reconciler("node.health", 1);
        loop {
            let pass = passes.pass();
            let swept = self.sweep().await;
            pass.finish(crate::metrics::ReconcileResult::of_pass(&swept));
            if let Err(e) = swept {
                tracing::error!(controller = "node.health", error = %e, "node repair sweep failed");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(LEGACY_INTERVAL) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use karpenter_api::repair::{RepairPolicies, RepairPolicy};
    use karpenter_cloudprovider::Clock;
    use karpenter_testing::FakeClock;

    use super::*;

    fn not_ready(name: &str, labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// Nodes are assessed from their current labels in every pass: one whose NodePool label is synced after it was
    /// created is repaired once the label is there (upstream v1.15.1 missed such nodes).
    #[test]
    fn a_node_labelled_managed_after_creation_is_assessed() {
        let clock = FakeClock::default();
        let state = ClusterState::new(Arc::new(clock.clone()), Duration::from_secs(20));
        let policies = RepairPolicies::new(vec![RepairPolicy::replace(
            "Ready",
            karpenter_api::condition::ConditionStatus::False,
            Duration::from_secs(600),
        )])
        .unwrap();
        state.apply(not_ready("n-1", &[]));
        assert!(unhealthy_nodes(&state, &policies, clock.now()).is_empty(), "not managed yet");
        state.apply(not_ready("n-1", &[(labels::NODE_POOL, "default")]));
        assert!(unhealthy_nodes(&state, &policies, clock.now()).contains_key("n-1"));
    }
}
