//! NodePool floors: the `karpenter-rs.io/min-nodes` annotation ([`karpenter_api::NodePool::min_nodes`]) keeps a
//! dynamic pool at `N` or more NodeClaims without pending pods (not part of upstream Karpenter).
//!
//! **What counts.** A pool's NodeClaims that are not being deleted, not `Drifted` and not expired at `now`
//! ([`counts_toward_floor`]); in-flight ones (launched or not, no node yet) count. Drifted and expired claims are
//! on their way out, so the floor treats them as already gone: [`launches`] plans their replacements, and only
//! once those exist (in flight is enough) may drift or expiration remove them without taking the pool below `N`.
//!
//! **Launching** ([`launches`]): a pool with fewer counted claims than its floor gets the missing ones, each
//! planned as the scheduler would plan a node for one pod that requests nothing and tolerates every taint: the
//! pool's requirements, the DaemonSet overhead fitting, cheapest compatible offering first, the pool's
//! `limits` respected (fewer plans, with the reason, when they leave no room).
//!
//! **Disruption** ([`Floors::allows`]): a command that shrinks a pool (more of its nodes removed than
//! replacements created in it) while leaving it with fewer counted claims than its floor is not taken; the
//! candidates get [`Reason::AtMinNodes`]. Replacements in the same pool are always allowed; budgets still
//! apply on top.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use karpenter_api::labels::min_nodes;
use karpenter_api::nodeclaim::conditions;
use karpenter_api::{CompactPod, NodePool, ProviderLabels};
use karpenter_requirements::ResourceList;
use karpenter_scheduler::decision::NodeClaimPlan;
use karpenter_scheduler::simulation::{SimulationView, Simulator};
use karpenter_scheduler::snapshot::NodeClaimInfo;
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions};

use crate::command::Reason;
use crate::expiration::expires_at;

/// Whether `claim` counts toward its pool's floor at `now`: not being deleted, not drifted, not expired.
pub fn counts_toward_floor(claim: &NodeClaimInfo, now: DateTime<Utc>) -> bool {
    !claim.marked_for_deletion && !claim.is_true(conditions::DRIFTED) && expires_at(claim).is_none_or(|at| now < at)
}

/// One pool's floor and its NodeClaims at `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolFloor {
    /// The floor in force ([`karpenter_api::nodepool::MinNodes::floor`]).
    pub min_nodes: u32,
    /// NodeClaims that count toward it ([`counts_toward_floor`]).
    pub counted: u32,
    /// NodeClaims not being deleted (counted ones, drifted and expired ones).
    pub live: u32,
}

impl PoolFloor {
    /// NodeClaims to launch to reach the floor.
    pub fn missing(&self) -> u32 {
        self.min_nodes.saturating_sub(self.counted)
    }
}

/// The floors of a pass's pools, by pool name (pools without a floor are absent).
#[derive(Debug, Clone, Default)]
pub struct Floors {
    pools: BTreeMap<String, PoolFloor>,
    now: DateTime<Utc>,
}

impl Floors {
    /// The floors of `pools` over the snapshot's NodeClaims at `now`.
    pub fn new<'p>(
        snapshot: &ClusterSnapshot,
        pools: impl IntoIterator<Item = &'p NodePool>,
        now: DateTime<Utc>,
    ) -> Self {
        let mut out: BTreeMap<String, PoolFloor> = pools
            .into_iter()
            .filter_map(|p| {
                let floor = p.min_nodes().floor;
                let name = p.metadata.name.clone()?;
                (floor > 0).then_some((name, PoolFloor { min_nodes: floor, counted: 0, live: 0 }))
            })
            .collect();
        for c in &snapshot.node_claims {
            let Some(f) = c.node_pool.as_deref().and_then(|p| out.get_mut(p)) else { continue };
            if !c.marked_for_deletion {
                f.live += 1;
            }
            if counts_toward_floor(c, now) {
                f.counted += 1;
            }
        }
        Floors { pools: out, now }
    }

    /// The floor of `pool`, if it has one.
    pub fn get(&self, pool: &str) -> Option<&PoolFloor> {
        self.pools.get(pool)
    }

    /// Every pool with a floor.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PoolFloor)> {
        self.pools.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Whether removing `removed` (NodeClaims, each with its pool) and creating replacements in the pools
    /// `added` keeps every pool's floor: refused when a pool would shrink and be left with fewer counted claims
    /// than its floor.
    pub fn allows<'c>(
        &self,
        removed: impl IntoIterator<Item = (&'c str, &'c NodeClaimInfo)>,
        added: impl IntoIterator<Item = &'c str>,
    ) -> Result<(), Reason> {
        let mut delta: BTreeMap<&str, (u32, u32, u32)> = BTreeMap::new();
        for (pool, claim) in removed {
            if self.pools.contains_key(pool) {
                let e = delta.entry(pool).or_default();
                e.0 += 1;
                if counts_toward_floor(claim, self.now) {
                    e.1 += 1;
                }
            }
        }
        for pool in added {
            if self.pools.contains_key(pool) {
                delta.entry(pool).or_default().2 += 1;
            }
        }
        for (pool, (removed, removed_counted, added)) in delta {
            let Some(f) = self.pools.get(pool) else { continue };
            let shrinks = removed > added;
            let counted_after = (f.counted + added).saturating_sub(removed_counted);
            if shrinks && counted_after < f.min_nodes {
                return Err(Reason::AtMinNodes {
                    node_pool: pool.to_owned(),
                    min_nodes: f.min_nodes,
                    nodes: f.counted,
                });
            }
        }
        Ok(())
    }
}

/// What a pool with a floor needs at `now`.
#[derive(Debug, Clone, PartialEq)]
pub struct FloorLaunch {
    /// The pool.
    pub node_pool: String,
    /// Its floor and NodeClaims.
    pub floor: PoolFloor,
    /// The NodeClaims to create (fewer than [`PoolFloor::missing`] when the pool's limits or instance types
    /// allow no more; `problem` then says why).
    pub plans: Vec<NodeClaimPlan>,
    /// Why fewer plans than missing claims.
    pub problem: Option<String>,
}

/// The namespace of the placeholder pods [`launches`] plans with (never created anywhere).
pub const PLACEHOLDER_NAMESPACE: &str = "karpenter-rs-min-nodes";

/// A pod that requests nothing, tolerates every taint and keeps away from the other placeholders of its pool.
fn placeholder(pool: &str, i: u32) -> CompactPod {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{pool}-{i}"), "namespace": PLACEHOLDER_NAMESPACE,
            "labels": {min_nodes::ANNOTATION: pool}},
        "spec": {
            "containers": [{"name": "placeholder", "image": "none"}],
            "tolerations": [{"operator": "Exists"}],
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {min_nodes::ANNOTATION: pool}},
                "topologyKey": karpenter_api::labels::HOSTNAME,
            }]}}
        }
    }))
    .unwrap_or_default();
    CompactPod::from(pod)
}

/// For every dynamic pool of `pools` below its floor, the NodeClaims that bring it back (see the module docs).
/// Pools at or above their floor are absent.
pub fn launches(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    now: DateTime<Utc>,
    options: &SchedulerOptions,
) -> Vec<FloorLaunch> {
    let floors = Floors::new(snapshot, pools.iter().map(|p| p.node_pool), now);
    // Placeholders go on new NodeClaims only.
    let removed: BTreeSet<String> = snapshot
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .chain(snapshot.node_claims.iter().map(|c| c.name.clone()))
        .collect();
    let mut out = Vec::new();
    for input in pools {
        let pool = input.node_pool;
        let Some(name) = pool.metadata.name.as_deref() else { continue };
        let Some(floor) = floors.get(name).copied() else { continue };
        let missing = floor.missing();
        if missing == 0 || pool.is_static() {
            continue;
        }
        let placeholders: Vec<CompactPod> = (1..=missing).map(|i| placeholder(name, i)).collect();
        let sim = Simulator::new(snapshot, std::slice::from_ref(input), provider, options);
        let view = SimulationView {
            removed: &removed,
            pods: placeholders.iter().collect(),
            skip_pending: true,
            allow_uninitialized: true,
            fewest_new_nodes: true,
        };
        let d = sim.simulate(&view);
        let plans: Vec<NodeClaimPlan> = d
            .new_node_claims
            .into_iter()
            .map(|mut p| {
                p.pods.clear();
                p.requests = ResourceList::new();
                p
            })
            .collect();
        let problem = d.unschedulable.first().map(|u| {
            format!(
                "NodePool {name}: {} of {missing} NodeClaim(s) for {} {} cannot be planned: {}",
                d.unschedulable.len(),
                min_nodes::ANNOTATION,
                floor.min_nodes,
                u.reason
            )
        });
        out.push(FloorLaunch { node_pool: name.to_owned(), floor, plans, problem });
    }
    out
}
