//! Pod deletion costs (feature gate `PodDeletionCostManagement`): which value of
//! `controller.kubernetes.io/pod-deletion-cost` each pod on a managed node should hold, so that a ReplicaSet
//! scaling in deletes first the pods on the nodes consolidation would remove first, and so empties them.
//!
//! [`rank`] sorts the managed nodes of a snapshot into four groups:
//!
//! * [`Group::Disrupted`]: tainted `karpenter.sh/disrupted`. Their pods get `i32::MIN`; always written, outside
//!   the cap and the budgets.
//! * [`Group::Drifted`] and [`Group::Disruptable`]: candidates (see [`crate::candidate::candidate`]) with no
//!   pod-level block, a pool whose `consolidateAfter` is not `Never`, and only ReplicaSet-owned pods to move;
//!   drifted ones first. Each is bounded by its pool's budget allowance (reason `Drifted`, and `Underutilized`
//!   for the rest); the excess is not disruptable.
//! * [`Group::NotDisruptable`]: every other managed node. Their pods lose the annotation.
//!
//! Within a group nodes go by the number of pods that would have to move, then by name. Drifted then disruptable
//! nodes are numbered `-(n) ..= -1` contiguously, so the first drifted node gets the lowest cost and every pod on
//! a node gets that node's number. [`plan`] then keeps the pods whose value changes, at most
//! [`MAX_NODES_PER_CYCLE`] nodes outside the disrupted group.
//!
//! Pods written: active pods that are neither DaemonSet nor static pods (a ReplicaSet's scale-in only reads its
//! own pods; the others are left alone rather than written for nothing).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use karpenter_api::labels::{annotations, taints};
use karpenter_api::nodepool::DisruptionReason;
use karpenter_api::{CompactPod, ProviderLabels};
use karpenter_scheduler::snapshot::is_daemon_set_pod;
use karpenter_scheduler::{ClusterSnapshot, PoolInput};

use crate::DisruptionOptions;
use crate::budget::{Budgets, Remaining};
use crate::candidate::{Cluster, candidate};
use crate::pods::{is_reschedulable, is_static};

/// At most this many nodes outside [`Group::Disrupted`] have their pods changed in one cycle.
pub const MAX_NODES_PER_CYCLE: usize = 50;

/// The cost written to pods of nodes already being disrupted.
pub const DISRUPTED_COST: i32 = i32::MIN;

/// A node's group in the ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// Tainted `karpenter.sh/disrupted`.
    Disrupted,
    /// Drifted and disruptable within its pool's `Drifted` budget.
    Drifted,
    /// Disruptable within its pool's `Underutilized` budget.
    Disruptable,
    /// Everything else: blocked, not a candidate, or over budget.
    NotDisruptable,
}

/// One managed node of the ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedNode {
    /// Node name.
    pub node: String,
    /// Its group.
    pub group: Group,
    /// The cost its pods should hold; `None`: no annotation.
    pub cost: Option<i32>,
    /// The pods written on this node (see the module docs).
    pub pods: Vec<PodCost>,
}

/// A pod and the value of `controller.kubernetes.io/pod-deletion-cost` it holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCost {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The annotation's current value.
    pub current: Option<String>,
}

/// Managed nodes in group order (disrupted, drifted, disruptable, not disruptable), ranked.
pub fn rank(
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    now: DateTime<Utc>,
    options: &DisruptionOptions,
) -> Vec<RankedNode> {
    let cluster = Cluster::new(snapshot, pools, provider, now, options);
    let budgets =
        Budgets::new(snapshot, cluster.pools.values().map(|p| p.node_pool), now, &options.not_ready_nodes, false);
    // (group, pods that would move, node, pool)
    let mut sorted: Vec<(Group, usize, &str, Option<&str>)> = Vec::new();
    for n in &snapshot.nodes {
        let (Some(claim), Some(_)) = (n.node_claim.as_deref(), n.node_pool.as_deref()) else { continue };
        if !cluster.claims.contains_key(claim) {
            continue;
        }
        if n.taints.iter().any(taints::is_disrupted) {
            sorted.push((Group::Disrupted, 0, &n.name, None));
            continue;
        }
        let entry = match candidate(&cluster, n) {
            Ok(c) if disruptable(&c) => {
                let group = if c.drifted_since.is_some() { Group::Drifted } else { Group::Disruptable };
                (group, c.reschedulable.len(), n.name.as_str(), Some(c.pool_name))
            }
            _ => (Group::NotDisruptable, 0, n.name.as_str(), None),
        };
        sorted.push(entry);
    }
    sorted.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
    // Budgets: drifted nodes spend the pool's Drifted allowance, the others its Underutilized one; a node over
    // it is not disruptable this cycle.
    let mut drifted = Remaining::new(&budgets, DisruptionReason::Drifted);
    let mut underutilized = Remaining::new(&budgets, DisruptionReason::Underutilized);
    for e in &mut sorted {
        let within = match (e.0, e.3) {
            (Group::Drifted, Some(pool)) => drifted.take(pool),
            (Group::Disruptable, Some(pool)) => underutilized.take(pool),
            _ => true,
        };
        if !within {
            e.0 = Group::NotDisruptable;
            e.1 = 0;
        }
    }
    sorted.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
    let ranked = sorted.iter().filter(|e| matches!(e.0, Group::Drifted | Group::Disruptable)).count();
    let mut next = -i64::try_from(ranked).unwrap_or(i64::MAX);
    sorted
        .into_iter()
        .map(|(group, _, node, _)| {
            let cost = match group {
                Group::Disrupted => Some(DISRUPTED_COST),
                Group::Drifted | Group::Disruptable => {
                    let c = i32::try_from(next).unwrap_or(i32::MIN + 1);
                    next += 1;
                    Some(c)
                }
                Group::NotDisruptable => None,
            };
            let pods = cluster
                .pods_on(node)
                .iter()
                .filter(|p| written(p))
                .map(|p| PodCost {
                    namespace: p.metadata.namespace.clone().unwrap_or_default(),
                    name: p.metadata.name.clone().unwrap_or_default(),
                    current: p.annotation(annotations::POD_DELETION_COST).map(str::to_owned),
                })
                .collect();
            RankedNode { node: node.to_owned(), group, cost, pods }
        })
        .collect()
}

/// A candidate nothing keeps from being disrupted now: no do-not-disrupt or PDB block on a pod, consolidation
/// not disabled on its pool, and every pod that would move owned by a ReplicaSet (other owners' pods are not
/// removed by a scale-in, so a deletion cost cannot empty the node).
fn disruptable(c: &crate::candidate::Candidate<'_>) -> bool {
    c.pod_block.is_none()
        && c.pool.node_pool.spec.disruption.consolidate_after.duration().is_some()
        && c.pods.iter().filter(|p| is_reschedulable(p)).all(|p| owned_by_replica_set(p))
}

fn owned_by_replica_set(pod: &CompactPod) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|o| o.kind == "ReplicaSet")
}

fn written(pod: &CompactPod) -> bool {
    pod.is_active() && !is_daemon_set_pod(pod) && !is_static(pod)
}

/// One pod write: set the cost, or remove the annotation (`None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPatch {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The value to write; `None` removes the annotation.
    pub cost: Option<i32>,
}

/// The writes of one cycle.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Pods to write.
    pub patches: Vec<PodPatch>,
    /// Pods of the nodes considered that already hold their value.
    pub unchanged: usize,
    /// Nodes with changes left for a later cycle by the cap.
    pub deferred_nodes: usize,
}

/// The pods of `ranking` whose annotation differs from their node's cost: every disrupted node, then at most
/// `max_nodes` other nodes that have a change, in ranking order.
pub fn plan(ranking: &[RankedNode], max_nodes: usize) -> Plan {
    let mut out = Plan::default();
    let mut taken = 0usize;
    for n in ranking {
        let want = n.cost.map(|c| c.to_string());
        let (same, differ): (Vec<&PodCost>, Vec<&PodCost>) = n.pods.iter().partition(|p| p.current == want);
        out.unchanged += same.len();
        if differ.is_empty() {
            continue;
        }
        if n.group != Group::Disrupted {
            if taken == max_nodes {
                out.deferred_nodes += 1;
                continue;
            }
            taken += 1;
        }
        out.patches.extend(differ.into_iter().map(|p| PodPatch {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            cost: n.cost,
        }));
    }
    out
}

/// The desired cost of every pod written (`namespace/name` → cost), for tests and explanations.
pub fn desired(ranking: &[RankedNode]) -> BTreeMap<String, Option<i32>> {
    ranking.iter().flat_map(|n| n.pods.iter().map(move |p| (format!("{}/{}", p.namespace, p.name), n.cost))).collect()
}
