//! `karpenter-rs.io/min-nodes` floors in `simulate`: the NodeClaims the controller's `nodepool.minnodes` would
//! create for a dynamic pool below its floor (planned by `karpenter_disruption::floor::launches`), and the
//! problems it would report as the pool's `MinNodesValid=False` condition, here as notes.

use chrono::{DateTime, Utc};
use karpenter_api::{NodePool, ProviderLabels};
use karpenter_disruption::floor::launches;
use karpenter_scheduler::decision::NodeClaimPlan;
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions};

/// A note per annotated pool whose floor is not applied as written (the condition's message).
pub fn notes<'p>(pools: impl IntoIterator<Item = &'p NodePool>) -> Vec<String> {
    pools
        .into_iter()
        .filter_map(|p| p.min_nodes().problem)
        .map(|p| format!("{p} (condition MinNodesValid=False)"))
        .collect()
}

/// The NodeClaims that bring every pool of `pools` up to its floor, on top of `planned` (new NodeClaims already
/// decided, which count toward their pools' floors as in-flight claims do). Plans are named
/// `min-nodes-<pool>-<n>`; notes say what could not be planned.
pub fn plans(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    now: DateTime<Utc>,
    planned: &[NodeClaimPlan],
    options: &SchedulerOptions,
    notes: &mut Vec<String>,
) -> Vec<NodeClaimPlan> {
    let mut out = Vec::new();
    for launch in launches(snapshot, pools, provider, now, options) {
        let already = planned.iter().filter(|p| p.node_pool == launch.node_pool).count();
        if let Some(problem) = &launch.problem {
            notes.push(problem.clone());
        }
        for (i, mut plan) in launch.plans.into_iter().skip(already).enumerate() {
            plan.name = format!("min-nodes-{}-{}", launch.node_pool, i + 1);
            out.push(plan);
        }
    }
    out
}
