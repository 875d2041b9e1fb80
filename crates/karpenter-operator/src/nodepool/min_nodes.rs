//! NodePool floors (`nodepool.minnodes`): the `karpenter-rs.io/min-nodes` annotation of a dynamic NodePool (not
//! part of upstream Karpenter; see [`karpenter_disruption::floor`] for what counts toward a floor).
//!
//! - The `MinNodesValid` condition on every annotated pool: `True`, or `False` with reason
//!   [`MIN_NODES_INVALID`] and a message naming the pool and the annotation (a value that is not a non-negative
//!   integer, a static pool, a value above `limits.nodes`), plus a Warning event with the same message. Neither
//!   touches the root `Ready`: a bad floor never stops the pool's other work. The condition goes when the
//!   annotation does.
//! - For a ready, dynamic, non-deleting pool below its floor, creates the missing NodeClaims without pending pods,
//!   planned by [`karpenter_disruption::floor::launches`] over the cluster state's snapshot (in-flight claims
//!   count, deleting, drifted and expired ones do not); the pool's `limits` are re-checked before each create.
//!   Requeue [`RESYNC`], and on every change of the pool or its NodeClaims.

use std::sync::Arc;
use std::time::Duration;

use karpenter_api::condition::{ConditionStatus, remove_condition};
use karpenter_api::labels::min_nodes;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_disruption::floor::{counts_toward_floor, launches};
use karpenter_scheduler::{PoolInput, SchedulerOptions, build_node_claim};
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::{Watches, run_pool_controller, set_pool_condition, write_pool_conditions};
use crate::context::ControllerContext;
use crate::events::Event;
use crate::kube_util::{ReconcileError, Requeue, node_claim_info};
use crate::provisioner::check_limits;
use crate::state::simulate_off_runtime;
use crate::termination::to_action;

/// The controller name in logs.
pub const CONTROLLER: &str = "nodepool.minnodes";
/// Reason of `MinNodesValid=True`.
pub const MIN_NODES_VALID: &str = "MinNodesValid";
/// Reason of `MinNodesValid=False` and of its Warning event.
pub const MIN_NODES_INVALID: &str = "MinNodesInvalid";
/// Periodic look at every pool with a floor.
pub const RESYNC: Duration = Duration::from_secs(60);
/// Look again this soon while the floor is not met (a create failed, the state is not synced, limits).
pub const RETRY: Duration = Duration::from_secs(10);

/// What one pass over a pool did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FloorPass {
    /// The NodeClaims created.
    pub created: Vec<String>,
    /// The floor is not met yet (look again in [`RETRY`]).
    pub short: bool,
}

/// The state's NodeClaims of pool `name` that count toward its floor at `now`.
pub fn counted(state: &crate::state::ClusterState, name: &str, now: chrono::DateTime<chrono::Utc>) -> u32 {
    let claims = state.list_shared::<NodeClaim>();
    let n = claims
        .iter()
        .filter(|c| c.node_pool_name() == Some(name))
        .filter(|c| counts_toward_floor(&node_claim_info(c, None), now))
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The floor controller (see the module docs).
pub struct MinNodes {
    ctx: ControllerContext,
    /// The provisioner's scheduling options (cluster limits, policies), so a floor's launches obey what
    /// provisioning obeys.
    options: SchedulerOptions,
}

impl std::fmt::Debug for MinNodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MinNodes").finish_non_exhaustive()
    }
}

impl MinNodes {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone(), options: SchedulerOptions::default() }
    }

    /// Plans the floor's launches with `options` (the provisioner's, from the settings).
    pub fn with_scheduler_options(mut self, options: SchedulerOptions) -> Self {
        self.options = options;
        self
    }

    /// Writes `MinNodesValid` (and the Warning event of an invalid floor) for `pool`.
    async fn condition(&self, pool: &NodePool) -> Result<(), ReconcileError> {
        let floor = pool.min_nodes();
        let mut conditions = pool.conditions().to_vec();
        if floor.annotated {
            let (status, reason, message) = match &floor.problem {
                None => (ConditionStatus::True, MIN_NODES_VALID, String::new()),
                Some(p) => (ConditionStatus::False, MIN_NODES_INVALID, p.clone()),
            };
            let now = self.ctx.clock.now();
            set_pool_condition(
                &mut conditions,
                min_nodes::CONDITION,
                status,
                reason,
                &message,
                now,
                pool.metadata.generation,
            );
        } else {
            remove_condition(&mut conditions, min_nodes::CONDITION);
        }
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let written = write_pool_conditions(&api, pool, conditions).await?;
        if let Some(problem) = &floor.problem {
            if written.is_some() {
                tracing::warn!(controller = CONTROLLER, NodePool = %pool.name_any(), error = %problem, "invalid nodepool floor");
            }
            let event = Event::warning(pool, MIN_NODES_INVALID, problem.clone());
            self.ctx.recorder.publish_detached(event);
        }
        Ok(())
    }

    /// Creates the NodeClaims that bring `pool` back to its floor.
    pub async fn launch(&self, pool: &NodePool) -> Result<FloorPass, ReconcileError> {
        let name = pool.name_any();
        let mut pass = FloorPass::default();
        if pool.min_nodes().floor == 0
            || pool.is_static()
            || !pool.is_ready()
            || pool.metadata.deletion_timestamp.is_some()
        {
            return Ok(pass);
        }
        if counted(&self.ctx.state, &name, self.ctx.clock.now()) >= pool.min_nodes().floor {
            return Ok(pass);
        }
        if self.ctx.state.unlisted_reason().is_some() {
            pass.short = true;
            return Ok(pass);
        }
        let its = match self.ctx.cloud.instance_types(pool).await {
            Ok(its) => its,
            Err(e) => {
                crate::kube_util::log_instance_types_error(CONTROLLER, &name, &e, "the floor waits for the next pass");
                pass.short = true;
                return Ok(pass);
            }
        };
        let cluster = match self.ctx.state.snapshot() {
            Ok(s) => s.cluster,
            Err(e) => {
                tracing::error!(controller = CONTROLLER, NodePool = %name, error = %e, "snapshot failed");
                pass.short = true;
                return Ok(pass);
            }
        };
        let labels = self.ctx.cloud.labels().clone();
        let now = self.ctx.clock.now();
        let owned = pool.clone();
        let options = self.options.clone();
        let Some(planned) = simulate_off_runtime(move || {
            let input = PoolInput { node_pool: &owned, instance_types: &its };
            launches(&cluster, &[input], &labels, now, &options)
        })
        .await
        else {
            return Ok(pass);
        };
        let Some(launch) = planned.into_iter().find(|l| l.node_pool == name) else { return Ok(pass) };
        if let Some(problem) = &launch.problem {
            tracing::warn!(controller = CONTROLLER, NodePool = %name, error = %problem, "cannot plan every nodeclaim of the floor");
        }
        pass.short = launch.plans.len() < launch.floor.missing() as usize;
        let api: Api<NodeClaim> = Api::all(self.ctx.client.clone());
        for plan in &launch.plans {
            if let Err(e) = check_limits(pool, &self.ctx.state.list_shared::<NodeClaim>()) {
                tracing::info!(controller = CONTROLLER, NodePool = %name, error = %e, "not creating the floor's nodeclaim");
                pass.short = true;
                break;
            }
            let claim = match build_node_claim(pool, plan, self.ctx.cloud.labels()) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(controller = CONTROLLER, NodePool = %name, error = %e, "building the floor's nodeclaim");
                    pass.short = true;
                    break;
                }
            };
            let created = match api.create(&PostParams::default(), &claim).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(controller = CONTROLLER, NodePool = %name, error = %e, "creating the floor's nodeclaim");
                    pass.short = true;
                    break;
                }
            };
            self.ctx.state.record_created_claim(&created, &[]);
            self.ctx.metrics.nodeclaims_created("provisioned", &name, "false").inc();
            tracing::info!(controller = CONTROLLER, NodePool = %name, NodeClaim = %created.name_any(),
                min_nodes = launch.floor.min_nodes, counted = launch.floor.counted, "created nodeclaim for the nodepool's floor");
            pass.created.push(created.name_any());
        }
        Ok(pass)
    }

    /// One pass over the NodePool `name` (read fresh): the condition, then the launches.
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let Some(pool) = api.get_opt(name).await? else { return Ok(None) };
        self.reconcile_pool(&pool).await
    }

    /// [`Self::reconcile`] on a pool already read.
    pub async fn reconcile_pool(&self, pool: &NodePool) -> Result<Requeue, ReconcileError> {
        if !pool.min_nodes().annotated && pool.conditions().iter().all(|c| c.type_ != min_nodes::CONDITION) {
            return Ok(None);
        }
        self.condition(pool).await?;
        let pass = self.launch(pool).await?;
        Ok(Some(if pass.short { RETRY } else { RESYNC }))
    }

    /// Follows the state's NodePools and NodeClaims until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let state = self.ctx.state.clone();
        // Status changes too: a pool's floor is launched once the pool becomes Ready.
        let watches = Watches { node_claims: true, status_changes: true, ..Watches::default() };
        run_pool_controller(&state, self, watches, shutdown, |pool: Arc<NodePool>, ctx: Arc<Self>| async move {
            Ok::<Action, ReconcileError>(to_action(ctx.reconcile_pool(&pool).await?))
        })
        .await;
    }
}

impl crate::kube_util::ErrorPolicyContext for MinNodes {
    fn controller_name(&self) -> &'static str {
        CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(self.ctx.metrics().as_ref())
    }
}
