//! Static NodePools (`spec.replicas`, feature gate `StaticCapacity`).
//!
//! - [`StaticProvisioning`] (`static.provisioning`): for a ready, static, non-deleting pool with fewer live
//!   (not deleting) NodeClaims than `replicas`, creates the missing ones straight from the template (no pods, no
//!   instance-type decision: the claim carries the pool's requirements and the cloud provider picks the instance
//!   type at launch). How many is [`karpenter_scheduler::provisioning::static_scale_up`]'s pure decision, which
//!   `simulate` applies too. Creation honours `limits.nodes` against every NodeClaim of the pool, deleting ones
//!   included (they still hold a node); when the limit leaves no room it looks again in [`LIMIT_RETRY`].
//!   Requeue [`RESYNC`] otherwise. Claims being replaced by a disruption command count as live, so a drift
//!   replacement in flight is not doubled.
//! - [`StaticDeprovisioning`] (`static.deprovisioning`): when a static pool has more live NodeClaims than
//!   `replicas` (a scale-down through `kubectl scale nodepool`), deletes the excess, choosing first claims that
//!   never launched (no providerID), then claims whose node runs no pods (DaemonSet pods aside), then those
//!   with the lowest disruption cost (summed eviction cost of their pods), name order breaking ties. Claims
//!   marked for deletion by a disruption command (a drift replacement in flight) are not counted, so the
//!   replacement is not taken for an excess. The termination controller drains the deleted ones. Requeue
//!   [`RESYNC`].
//!
//! Both do nothing while the gate is off. The CRD's `scale` subresource maps `spec.replicas` to `status.nodes`
//! (written by the [counter](super::counter)).

use std::sync::Arc;
use std::time::Duration;

use karpenter_api::labels;
use karpenter_api::nodepool::NODES_LIMIT;
use karpenter_api::{NodeClaim, NodePool, ProviderLabels};
use karpenter_scheduler::build_node_claim;
use karpenter_scheduler::provisioning::{
    ClusterNodes, StaticClaims, StaticScaleUp as Decision, static_plan, static_scale_up,
};
use kube::api::{ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::{Watches, run_pool_controller};
use crate::context::ControllerContext;
use crate::kube_util::{ReconcileError, Requeue, delete_ignoring_missing};
use crate::termination::to_action;

/// The provisioning controller's name in logs.
pub const PROVISIONING_CONTROLLER: &str = "static.provisioning";
/// The deprovisioning controller's name in logs.
pub const DEPROVISIONING_CONTROLLER: &str = "static.deprovisioning";
/// Periodic look at every static pool.
pub const RESYNC: Duration = Duration::from_secs(60);
/// Retry while `limits.nodes` leaves no room.
pub const LIMIT_RETRY: Duration = Duration::from_secs(30);

/// Why a static pool could not be scaled up.
#[derive(Debug, thiserror::Error)]
pub enum StaticError {
    /// A limit or template value does not parse (the pool's `ValidationSucceeded` says so too).
    #[error("NodePool {pool}: {message}")]
    Invalid { pool: String, message: String },
    /// An API call failed.
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
}

impl From<kube::Error> for StaticError {
    fn from(e: kube::Error) -> Self {
        StaticError::Reconcile(e.into())
    }
}

/// The pool's NodeClaims, from the API server (fresh: a pass must not create twice for the same gap).
async fn pool_claims(client: &Client, pool: &str) -> Result<Vec<NodeClaim>, kube::Error> {
    let api: Api<NodeClaim> = Api::all(client.clone());
    let selector = format!("{}={pool}", labels::NODE_POOL);
    Ok(api.list(&ListParams::default().labels(&selector)).await?.items)
}

fn live(claims: &[NodeClaim]) -> Vec<&NodeClaim> {
    claims.iter().filter(|c| c.metadata.deletion_timestamp.is_none()).collect()
}

/// What a scale-up pass decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScaleUp {
    /// Not a static pool, not ready, deleting, or the gate is off.
    Skipped,
    /// Enough live NodeClaims.
    Satisfied,
    /// Created these NodeClaims (possibly fewer than missing, when `limits.nodes` allowed no more).
    Created(Vec<String>),
    /// `limits.nodes` leaves no room for the missing ones.
    LimitReached,
}

/// Creates the missing NodeClaims of static pools (see the module docs).
pub struct StaticProvisioning {
    ctx: ControllerContext,
    provider: ProviderLabels,
    enabled: bool,
    /// `nodes` of `CLUSTER_LIMITS`: the NodeClaims of every pool together stay within it (a static pool's
    /// NodeClaims carry no requests before launch, so, as with `limits`, only the node count applies).
    cluster_nodes: Option<i64>,
}

impl std::fmt::Debug for StaticProvisioning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticProvisioning").field("enabled", &self.enabled).finish_non_exhaustive()
    }
}

impl StaticProvisioning {
    /// `enabled` is the `StaticCapacity` feature gate; claims get the context's provider's labels.
    pub fn new(ctx: &ControllerContext, enabled: bool) -> Self {
        Self { ctx: ctx.clone(), provider: ctx.cloud().labels().clone(), enabled, cluster_nodes: None }
    }

    /// Honours the `nodes` entry of `CLUSTER_LIMITS` (`limits`), as provisioning does.
    pub fn with_cluster_limits(mut self, limits: &karpenter_requirements::ResourceList) -> Self {
        self.cluster_nodes = limits.get(NODES_LIMIT).map(|q| q.value().unwrap_or(i64::MAX));
        self
    }

    /// One scale-up pass over the NodePool `name`.
    pub async fn scale_up(&self, name: &str) -> Result<ScaleUp, StaticError> {
        if !self.enabled {
            return Ok(ScaleUp::Skipped);
        }
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let Some(pool) = api.get_opt(name).await? else { return Ok(ScaleUp::Skipped) };
        // Not static, not ready or deleting: skipped before anything is listed.
        if static_scale_up(&pool, StaticClaims::default(), None) == Ok(Decision::Skipped) {
            return Ok(ScaleUp::Skipped);
        }
        let claims = pool_claims(&self.ctx.client, name).await?;
        let counts = StaticClaims { live: live(&claims).len(), total: claims.len() };
        let cluster = match self.cluster_nodes {
            Some(limit) => {
                let all = Api::<NodeClaim>::all(self.ctx.client.clone()).list(&ListParams::default()).await?.items;
                Some(ClusterNodes { limit, claims: all.len() })
            }
            None => None,
        };
        let invalid = |message: String| StaticError::Invalid { pool: name.to_owned(), message };
        let wanted = match static_scale_up(&pool, counts, cluster).map_err(invalid)? {
            Decision::Skipped => return Ok(ScaleUp::Skipped),
            Decision::Satisfied => return Ok(ScaleUp::Satisfied),
            Decision::LimitReached => {
                tracing::info!(controller = PROVISIONING_CONTROLLER, NodePool = %name, replicas = pool.spec.replicas,
                    running = counts.live, "limits.nodes or the cluster's nodes limit reached, not creating nodeclaims");
                return Ok(ScaleUp::LimitReached);
            }
            Decision::Create(n) => n,
        };
        let plan = static_plan(&pool).map_err(invalid)?;
        let claim = build_node_claim(&pool, &plan, &self.provider).map_err(|e| invalid(e.to_string()))?;
        let claims_api: Api<NodeClaim> = Api::all(self.ctx.client.clone());
        let mut created = Vec::new();
        for _ in 0..wanted {
            let c = claims_api.create(&PostParams::default(), &claim).await?;
            self.ctx.state.apply(c.clone());
            self.ctx.metrics.nodeclaims_created("provisioned", name, "false").inc();
            tracing::info!(controller = PROVISIONING_CONTROLLER, NodePool = %name, NodeClaim = %c.name_any(), "created nodeclaim");
            created.push(c.name_any());
        }
        Ok(ScaleUp::Created(created))
    }

    /// [`StaticProvisioning::scale_up`] as a reconcile: when to look again.
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        match self.scale_up(name).await {
            Ok(ScaleUp::Skipped) => Ok(None),
            Ok(ScaleUp::LimitReached) => Ok(Some(LIMIT_RETRY)),
            Ok(ScaleUp::Satisfied | ScaleUp::Created(_)) => Ok(Some(RESYNC)),
            Err(StaticError::Invalid { pool, message }) => {
                tracing::error!(controller = PROVISIONING_CONTROLLER, NodePool = %pool, error = %message, "cannot scale static nodepool");
                Ok(Some(RESYNC))
            }
            Err(StaticError::Reconcile(e)) => Err(e),
        }
    }

    /// Follows the state's NodePools and NodeClaims until `shutdown`. Dynamic pools (no `spec.replicas` in the
    /// state's copy) cost nothing: only a static pool is read fresh and counted.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let state = self.ctx.state.clone();
        // Status changes too: a static pool scales up once it becomes Ready.
        let watches = Watches { node_claims: true, status_changes: true, ..Watches::default() };
        run_pool_controller(&state, self, watches, shutdown, |pool: Arc<NodePool>, ctx: Arc<Self>| async move {
            if pool.spec.replicas.is_none() {
                return Ok(Action::await_change());
            }
            Ok::<Action, ReconcileError>(to_action(ctx.reconcile(&pool.name_any()).await?))
        })
        .await;
    }
}

/// Deletion order of a static pool's NodeClaims: (launched, runs pods, disruption cost, name), lowest first.
type Rank = (bool, bool, f64, String);

/// Deletes the excess NodeClaims of static pools (see the module docs).
pub struct StaticDeprovisioning {
    ctx: ControllerContext,
    enabled: bool,
    /// Which annotations give a pod's deletion cost (the `PodDeletionCostManagement` gate).
    costs: karpenter_disruption::pods::CostAnnotations,
}

impl std::fmt::Debug for StaticDeprovisioning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticDeprovisioning").field("enabled", &self.enabled).finish_non_exhaustive()
    }
}

impl StaticDeprovisioning {
    /// `enabled` is the `StaticCapacity` feature gate.
    pub fn new(ctx: &ControllerContext, enabled: bool) -> Self {
        Self { ctx: ctx.clone(), enabled, costs: karpenter_disruption::pods::CostAnnotations { managed: false } }
    }

    /// Reads pods' deletion costs as the `PodDeletionCostManagement` gate says (default: off).
    pub fn with_deletion_cost_management(mut self, managed: bool) -> Self {
        self.costs = karpenter_disruption::pods::CostAnnotations { managed };
        self
    }

    /// Deletion order key: (launched, has pods, disruption cost, name).
    fn rank(&self, claim: &NodeClaim) -> Rank {
        let launched = claim.provider_id().is_some_and(|p| !p.is_empty());
        let pods: Vec<_> = claim
            .node_name()
            .map(|n| self.ctx.state.pods_on_node(n))
            .unwrap_or_default()
            .into_iter()
            .filter(|p| !karpenter_scheduler::snapshot::is_daemon_set_pod(p))
            .collect();
        let cost: f64 = pods.iter().map(|p| self.costs.eviction_cost(p)).sum();
        (launched, !pods.is_empty(), cost, claim.name_any())
    }

    /// One scale-down pass over the NodePool `name`; returns the NodeClaims deleted.
    pub async fn scale_down(&self, name: &str) -> Result<Vec<String>, ReconcileError> {
        if !self.enabled {
            return Ok(Vec::new());
        }
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let Some(pool) = api.get_opt(name).await? else { return Ok(Vec::new()) };
        let Some(replicas) = pool.spec.replicas else { return Ok(Vec::new()) };
        if pool.metadata.deletion_timestamp.is_some() {
            return Ok(Vec::new());
        }
        let claims = pool_claims(&self.ctx.client, name).await?;
        // Claims a disruption command is replacing are on their way out: neither running nor candidates.
        let live: Vec<&NodeClaim> =
            live(&claims).into_iter().filter(|c| !self.ctx.state.is_marked_for_deletion(&c.name_any())).collect();
        let excess = usize::try_from(i64::try_from(live.len()).unwrap_or(i64::MAX) - replicas.max(0)).unwrap_or(0);
        if excess == 0 {
            return Ok(Vec::new());
        }
        let mut ranked: Vec<(Rank, &NodeClaim)> = live.iter().map(|c| (self.rank(c), *c)).collect();
        ranked.sort_by(|(a, _), (b, _)| {
            a.0.cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.total_cmp(&b.2)).then_with(|| a.3.cmp(&b.3))
        });
        let claims_api: Api<NodeClaim> = Api::all(self.ctx.client.clone());
        let mut deleted = Vec::new();
        for (_, claim) in ranked.into_iter().take(excess) {
            delete_ignoring_missing(&claims_api, &claim.name_any()).await?;
            tracing::info!(controller = DEPROVISIONING_CONTROLLER, NodePool = %name, NodeClaim = %claim.name_any(), replicas,
                "deleting nodeclaim above the static nodepool's replicas");
            deleted.push(claim.name_any());
        }
        Ok(deleted)
    }

    /// [`StaticDeprovisioning::scale_down`] as a reconcile.
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        self.scale_down(name).await?;
        Ok(if self.enabled { Some(RESYNC) } else { None })
    }

    /// Follows the state's NodePools and NodeClaims until `shutdown`; dynamic pools cost nothing (see
    /// [`StaticProvisioning::run`]).
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let state = self.ctx.state.clone();
        let watches = Watches { node_claims: true, ..Watches::default() };
        run_pool_controller(&state, self, watches, shutdown, |pool: Arc<NodePool>, ctx: Arc<Self>| async move {
            if pool.spec.replicas.is_none() {
                return Ok(Action::await_change());
            }
            Ok::<Action, ReconcileError>(to_action(ctx.reconcile(&pool.name_any()).await?))
        })
        .await;
    }
}

impl crate::kube_util::ErrorPolicyContext for StaticProvisioning {
    fn controller_name(&self) -> &'static str {
        PROVISIONING_CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(self.ctx.metrics().as_ref())
    }
}

impl crate::kube_util::ErrorPolicyContext for StaticDeprovisioning {
    fn controller_name(&self) -> &'static str {
        DEPROVISIONING_CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(self.ctx.metrics().as_ref())
    }
}
