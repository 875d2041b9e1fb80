//! Provisioning's rules around the solver, pure and shared by the controller (its provisioner and its static
//! provisioning) and `simulate`, so the two cannot disagree:
//!
//! - which NodePools provisioning may launch from ([`pool_exclusion`], [`dynamic_pool_exclusion`]): a pool must
//!   be `Ready=True` and not being deleted; dynamic provisioning also leaves static pools (`spec.replicas`) out;
//! - how many NodeClaims a static pool's provisioning creates ([`static_scale_up`]) and from what
//!   ([`static_plan`]): the missing replicas, within `limits.nodes` (every NodeClaim of the pool counts, deleting
//!   ones included: they still hold a node) and the cluster's `nodes` limit.

use std::fmt;

use karpenter_api::nodeclaim::conditions;
use karpenter_api::nodepool::NODES_LIMIT;
use karpenter_api::{Conditions, NodePool};
use karpenter_requirements::Quantity;

use crate::decision::NodeClaimPlan;

/// Why provisioning launches nothing from a NodePool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolExclusion {
    /// A static pool (`spec.replicas`): only static provisioning creates its NodeClaims.
    Static,
    /// Its `Ready` condition is not `True` (absent: the readiness controllers have not judged it yet).
    NotReady {
        /// `Ready=False, reason` / `Ready=Unknown` / `no Ready condition`.
        why: String,
    },
    /// It has a deletion timestamp.
    Deleting,
}

impl fmt::Display for PoolExclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolExclusion::Static => f.write_str("static (spec.replicas)"),
            PoolExclusion::NotReady { why } => write!(f, "not ready ({why})"),
            PoolExclusion::Deleting => f.write_str("being deleted"),
        }
    }
}

/// Whether any provisioning (dynamic or static) may launch from `pool`: `None` when it is `Ready=True` and not
/// being deleted. Deletion is reported first (a deleting pool's readiness no longer matters).
pub fn pool_exclusion(pool: &NodePool) -> Option<PoolExclusion> {
    if pool.metadata.deletion_timestamp.is_some() {
        return Some(PoolExclusion::Deleting);
    }
    match pool.conditions().condition(conditions::READY) {
        Some(c) if c.status == karpenter_api::ConditionStatus::True => None,
        Some(c) if c.reason.is_empty() => Some(PoolExclusion::NotReady { why: format!("Ready={:?}", c.status) }),
        Some(c) => Some(PoolExclusion::NotReady { why: format!("Ready={:?}, {}", c.status, c.reason) }),
        None => Some(PoolExclusion::NotReady { why: "no Ready condition".to_owned() }),
    }
}

/// Whether the provisioner (pending pods, pods of nodes being deleted) may launch from `pool`: `None` for a
/// dynamic, ready pool that is not being deleted.
pub fn dynamic_pool_exclusion(pool: &NodePool) -> Option<PoolExclusion> {
    if pool.is_static() {
        return Some(PoolExclusion::Static);
    }
    pool_exclusion(pool)
}

/// A static pool's NodeClaims as its provisioning counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StaticClaims {
    /// NodeClaims not being deleted (claims a disruption command replaces count too: a drift replacement in
    /// flight is not doubled).
    pub live: usize,
    /// Every NodeClaim of the pool, deleting ones included (what `limits.nodes` counts).
    pub total: usize,
}

/// The cluster's `nodes` limit (`CLUSTER_LIMITS`) and the NodeClaims of every pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterNodes {
    /// The limit.
    pub limit: i64,
    /// NodeClaims of every pool.
    pub claims: usize,
}

/// What static provisioning does for a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaticScaleUp {
    /// Not a static pool, not ready, or being deleted.
    Skipped,
    /// It has its replicas.
    Satisfied,
    /// Create this many NodeClaims (possibly fewer than missing, when a limit allows no more).
    Create(u64),
    /// A limit leaves no room for the missing ones.
    LimitReached,
}

/// How many NodeClaims static provisioning creates for `pool` (see the module docs). Errors on a
/// `limits.nodes` that does not parse (the pool's validation reports it too).
pub fn static_scale_up(
    pool: &NodePool,
    claims: StaticClaims,
    cluster: Option<ClusterNodes>,
) -> Result<StaticScaleUp, String> {
    let Some(replicas) = pool.spec.replicas else { return Ok(StaticScaleUp::Skipped) };
    if pool_exclusion(pool).is_some() {
        return Ok(StaticScaleUp::Skipped);
    }
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let live = count(claims.live);
    if live >= replicas {
        return Ok(StaticScaleUp::Satisfied);
    }
    let mut wanted = replicas - live;
    if let Some(limit) = pool.spec.limits.get(NODES_LIMIT) {
        let parsed: Quantity = limit.as_str().parse().map_err(|e| format!("limits.nodes {:?}: {e}", limit.as_str()))?;
        let limit = parsed.value().unwrap_or(i64::MAX);
        wanted = wanted.min((limit - count(claims.total)).max(0));
    }
    if let Some(c) = cluster {
        wanted = wanted.min((c.limit - count(c.claims)).max(0));
    }
    Ok(match u64::try_from(wanted) {
        Ok(0) | Err(_) => StaticScaleUp::LimitReached,
        Ok(n) => StaticScaleUp::Create(n),
    })
}

/// The plan a static pool's NodeClaims are built from: the template's requirements, no pods, no instance-type
/// decision (the provider picks at launch), named `<pool>-static`.
pub fn static_plan(pool: &NodePool) -> Result<NodeClaimPlan, String> {
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    NodeClaimPlan::from_template(pool, format!("{name}-static")).map_err(|e| format!("requirements: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::load_str;
    use karpenter_api::loader::Object;

    fn pool(extra_spec: &str, status: &str, deleting: bool) -> NodePool {
        let deletion = if deleting { "deletionTimestamp: '2026-01-01T00:00:00Z', finalizers: [x], " } else { "" };
        let doc = format!(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{{deletion}name: p}}\nspec:\n  {extra_spec}\n  \
             template: {{spec: {{nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: d}}, \
             requirements: []}}}}\n{status}"
        );
        let loaded = load_str(&doc, "p.yaml").expect("valid");
        match &loaded[0].object {
            Object::NodePool(p) => (**p).clone(),
            o => panic!("not a NodePool: {o:?}"),
        }
    }

    const READY: &str = "status: {conditions: [{type: Ready, status: 'True', reason: Ready, lastTransitionTime: '2026-01-01T00:00:00Z'}]}";
    const NOT_READY: &str = "status: {conditions: [{type: Ready, status: 'False', reason: NodeClassNotReady, \
                             lastTransitionTime: '2026-01-01T00:00:00Z'}]}";

    #[test]
    fn provisioning_launches_only_from_ready_pools_not_being_deleted() {
        assert_eq!(dynamic_pool_exclusion(&pool("", READY, false)), None);
        assert_eq!(
            dynamic_pool_exclusion(&pool("", NOT_READY, false)),
            Some(PoolExclusion::NotReady { why: "Ready=False, NodeClassNotReady".into() })
        );
        assert_eq!(
            dynamic_pool_exclusion(&pool("", "", false)),
            Some(PoolExclusion::NotReady { why: "no Ready condition".into() })
        );
        assert_eq!(dynamic_pool_exclusion(&pool("", READY, true)), Some(PoolExclusion::Deleting));
        assert_eq!(dynamic_pool_exclusion(&pool("replicas: 2", READY, false)), Some(PoolExclusion::Static));
        assert_eq!(pool_exclusion(&pool("replicas: 2", READY, false)), None, "static provisioning may use it");
        assert_eq!(PoolExclusion::Deleting.to_string(), "being deleted");
    }

    #[test]
    fn static_scale_up_creates_the_missing_replicas_within_the_limits() {
        let claims = |live, total| StaticClaims { live, total };
        let three = pool("replicas: 3", READY, false);
        assert_eq!(static_scale_up(&three, claims(0, 0), None), Ok(StaticScaleUp::Create(3)));
        assert_eq!(static_scale_up(&three, claims(1, 2), None), Ok(StaticScaleUp::Create(2)));
        assert_eq!(static_scale_up(&three, claims(3, 3), None), Ok(StaticScaleUp::Satisfied));
        // limits.nodes counts deleting claims too.
        let limited = pool("replicas: 3\n  limits: {nodes: '2'}", READY, false);
        assert_eq!(static_scale_up(&limited, claims(0, 0), None), Ok(StaticScaleUp::Create(2)));
        assert_eq!(static_scale_up(&limited, claims(1, 2), None), Ok(StaticScaleUp::LimitReached));
        let cluster = Some(ClusterNodes { limit: 5, claims: 4 });
        assert_eq!(static_scale_up(&three, claims(0, 0), cluster), Ok(StaticScaleUp::Create(1)));
        // Not static, not ready, deleting: nothing.
        assert_eq!(static_scale_up(&pool("", READY, false), claims(0, 0), None), Ok(StaticScaleUp::Skipped));
        assert_eq!(
            static_scale_up(&pool("replicas: 3", NOT_READY, false), claims(0, 0), None),
            Ok(StaticScaleUp::Skipped)
        );
        assert_eq!(static_scale_up(&pool("replicas: 3", READY, true), claims(0, 0), None), Ok(StaticScaleUp::Skipped));
        let plan = static_plan(&three).expect("valid");
        assert_eq!(plan.name, "p-static");
        assert!(plan.pods.is_empty() && plan.instance_types.is_empty());
    }
}
