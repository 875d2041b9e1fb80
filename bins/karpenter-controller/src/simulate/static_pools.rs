//! Static NodePools (`spec.replicas`, gate `StaticCapacity`) in a single `simulate` pass: the NodeClaims the
//! controller's static provisioning would create, decided by the controller's own rule
//! ([`karpenter_scheduler::provisioning::static_scale_up`]): the missing replicas, within `limits.nodes` and the
//! cluster's `nodes` limit. Over simulated time the world does the same at every instant
//! (`World::static_provision`).

use karpenter_api::nodepool::NODES_LIMIT;
use karpenter_api::{NodePool, ProviderLabels};
use karpenter_requirements::{InstanceType, ResourceList};
use karpenter_scheduler::decision::NodeClaimPlan;
use karpenter_scheduler::provisioning::{ClusterNodes, StaticClaims, StaticScaleUp, static_plan, static_scale_up};
use karpenter_scheduler::{ClusterSnapshot, Decisions};

use super::catalogue::{Catalogue, cheapest_launch};

/// The NodeClaims static provisioning creates for the static pools of `pools`, named `<pool>-static-<n>`, with
/// the pool's instance types that have an offering fitting the template's requirements as their options (the
/// provider picks the cheapest at launch). `decided` (this pass's other new NodeClaims) counts toward the
/// cluster's `nodes` limit. Notes say what could not be planned.
pub fn plans(
    snapshot: &ClusterSnapshot,
    pools: &[&NodePool],
    catalogue: &Catalogue,
    provider: &ProviderLabels,
    cluster_limits: &ResourceList,
    decided: &Decisions,
    notes: &mut Vec<String>,
) -> Vec<NodeClaimPlan> {
    let cluster_limit = cluster_limits.get(NODES_LIMIT).map(|q| q.value().unwrap_or(i64::MAX));
    let mut out: Vec<NodeClaimPlan> = Vec::new();
    for pool in pools.iter().filter(|p| p.is_static()) {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let of_pool = || snapshot.node_claims.iter().filter(|c| c.node_pool.as_deref() == Some(name));
        let claims =
            StaticClaims { live: of_pool().filter(|c| !c.marked_for_deletion).count(), total: of_pool().count() };
        let all_claims = snapshot.node_claims.len() + decided.new_node_claims.len() + out.len();
        let cluster = cluster_limit.map(|limit| ClusterNodes { limit, claims: all_claims });
        let wanted = match static_scale_up(pool, claims, cluster) {
            Ok(StaticScaleUp::Create(n)) => n,
            Ok(StaticScaleUp::LimitReached) => {
                notes.push(format!(
                    "static NodePool {name}: limits.nodes or the cluster's nodes limit leaves no room for its {} \
                     missing replicas",
                    pool.spec.replicas.unwrap_or_default() - i64::try_from(claims.live).unwrap_or(i64::MAX)
                ));
                continue;
            }
            Ok(StaticScaleUp::Skipped | StaticScaleUp::Satisfied) => continue,
            Err(e) => {
                notes.push(format!("static NodePool {name}: {e}"));
                continue;
            }
        };
        let mut plan = match static_plan(pool) {
            Ok(p) => p,
            Err(e) => {
                notes.push(format!("static NodePool {name}: {e}"));
                continue;
            }
        };
        let options: Vec<&InstanceType> = catalogue
            .for_pool(name)
            .iter()
            .filter(|it| cheapest_launch(std::iter::once(*it), &plan.requirements, &plan.total_requests()).is_some())
            .collect();
        plan.set_instance_types(&options, provider);
        if plan.instance_types.is_empty() {
            notes.push(format!("static NodePool {name}: no offering of its instance types fits its requirements"));
            continue;
        }
        for i in 1..=wanted {
            let mut p = plan.clone();
            p.name = format!("{name}-static-{i}");
            out.push(p);
        }
    }
    out
}
