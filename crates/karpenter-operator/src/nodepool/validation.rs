//! NodePool runtime validation (`nodepool.validation`): `ValidationSucceeded` from karpenter-api's
//! [`Validate`] with the cloud provider's well-known labels (the checks the CRD schema and CEL rules cannot make:
//! restricted label domains, requirement values of well-known keys, taint uniqueness, budgets, …), then the root
//! `Ready`. A failure is `ValidationSucceeded=False(NodePoolValidationFailed)` with every violation in the
//! message, which keeps the pool out of provisioning.
//!
//! It also reports the pool's `karpenter-rs.io/disruption-topology-key` annotation (not upstream Karpenter):
//! `DisruptionTopologyKeyValid` is `True` when its value is a label key, `False(InvalidDisruptionTopologyKey)`
//! with a Warning event on the pool when it is not (karpenter-disruption then holds the pool's voluntary
//! disruption), and absent without the annotation. It is no dependent of `Ready`: provisioning goes on.
//!
//! The same for `karpenter-rs.io/consolidation-min-savings` (not upstream Karpenter): `ConsolidationMinSavingsValid`
//! is `True` naming the threshold, or `False(InvalidConsolidationMinSavings)` with a Warning event when the value is
//! neither `N%` nor `$N/h` (karpenter-disruption then holds the pool's replacements and multi-node moves).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use karpenter_api::condition::{Condition, ConditionStatus, remove_condition};
use karpenter_api::labels::{consolidation_min_savings, disruption_topology};
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_api::{NodePool, Validate, ValidationContext};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::{Watches, recompute_ready, run_pool_controller, set_pool_condition, write_pool_conditions};
use crate::context::ControllerContext;
use crate::events::Event;
use crate::kube_util::{ReconcileError, Requeue};
use crate::state::ClusterState;
use crate::termination::to_action;

/// The controller name in logs.
pub const CONTROLLER: &str = "nodepool.validation";
/// Reason of `ValidationSucceeded=False`.
pub const VALIDATION_FAILED: &str = "NodePoolValidationFailed";

/// The validation controller (see the module docs).
pub struct Validation {
    ctx: ControllerContext,
    context: ValidationContext,
}

impl std::fmt::Debug for Validation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validation").finish_non_exhaustive()
    }
}

impl Validation {
    /// Validates against the context's provider's labels (`CloudProvider::labels`).
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone(), context: ValidationContext { provider: ctx.cloud().labels().clone() } }
    }

    /// One pass over the NodePool `name`.
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let Some(pool) = api.get_opt(name).await? else { return Ok(None) };
        self.reconcile_pool(&pool).await
    }

    /// [`Self::reconcile`] on a pool already read (the run loop's: the cluster state's copy).
    pub async fn reconcile_pool(&self, pool: &NodePool) -> Result<Requeue, ReconcileError> {
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let name = pool.name_any();
        let violations = pool.validate(&self.context);
        let (status, reason, message) = if violations.is_empty() {
            (ConditionStatus::True, cond::VALIDATION_SUCCEEDED, String::new())
        } else {
            let message = violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
            (ConditionStatus::False, VALIDATION_FAILED, message)
        };
        let now = self.ctx.clock.now();
        let generation = pool.metadata.generation;
        let mut conditions = pool.conditions().to_vec();
        set_pool_condition(&mut conditions, cond::VALIDATION_SUCCEEDED, status, reason, &message, now, generation);
        recompute_ready(&mut conditions, now, generation);
        let topology = disruption_topology::of(pool)
            .map(|key| key.map(|key| format!("voluntary disruption proceeds one {key} domain at a time")))
            .map_err(|e| format!("{e}; voluntary disruption of the NodePool is held until it is fixed"));
        let invalid_topology_key = annotation_condition(
            &mut conditions,
            (disruption_topology::CONDITION, disruption_topology::INVALID_REASON),
            topology,
            now,
            generation,
        );
        let min_savings = consolidation_min_savings::of(pool)
            .map(|t| t.map(|t| format!("replacements and multi-node moves must save at least {t}")))
            .map_err(|e| {
                format!(
                    "annotation {}: {e}; the NodePool's replacements and multi-node moves are held until it is fixed",
                    consolidation_min_savings::ANNOTATION
                )
            });
        let invalid_min_savings = annotation_condition(
            &mut conditions,
            (consolidation_min_savings::CONDITION, consolidation_min_savings::INVALID_REASON),
            min_savings,
            now,
            generation,
        );
        if write_pool_conditions(&api, pool, conditions).await?.is_some() && status == ConditionStatus::False {
            tracing::error!(controller = CONTROLLER, NodePool = %name, error = %message, "nodepool failed validation");
        }
        if let Some(message) = invalid_topology_key {
            tracing::warn!(controller = CONTROLLER, NodePool = %name, error = %message, "invalid disruption topology key");
            let event =
                Event::warning(pool, disruption_topology::INVALID_REASON, format!("NodePool {name}: {message}"));
            if let Err(e) = self.ctx.recorder.publish(event).await {
                tracing::warn!(controller = CONTROLLER, NodePool = %name, error = %e, "publishing an event failed");
            }
        }
        if let Some(message) = invalid_min_savings {
            tracing::warn!(controller = CONTROLLER, NodePool = %name, error = %message, "invalid consolidation minimum saving");
            let event =
                Event::warning(pool, consolidation_min_savings::INVALID_REASON, format!("NodePool {name}: {message}"));
            if let Err(e) = self.ctx.recorder.publish(event).await {
                tracing::warn!(controller = CONTROLLER, NodePool = %name, error = %e, "publishing an event failed");
            }
        }
        Ok(None)
    }

    /// Follows the state's NodePools until `shutdown`.
    pub async fn run(self: Arc<Self>, state: ClusterState, shutdown: CancellationToken) {
        run_pool_controller(
            &state,
            self,
            Watches::default(),
            shutdown,
            |pool: Arc<NodePool>, ctx: Arc<Self>| async move {
                Ok::<Action, ReconcileError>(to_action(ctx.reconcile_pool(&pool).await?))
            },
        )
        .await;
    }
}

impl crate::kube_util::ErrorPolicyContext for Validation {
    fn controller_name(&self) -> &'static str {
        CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(self.ctx.metrics().as_ref())
    }
}

/// The condition a NodePool annotation of ours sets: removed when the annotation is absent, `True` with what it
/// does when it parses (`Ok(Some(message))`, reason = the condition's type), `False` with `invalid_reason` when it
/// does not (`Err(message)`, returned so the caller can warn and publish an event).
fn annotation_condition(
    conditions: &mut Vec<Condition>,
    (condition, invalid_reason): (&str, &str),
    parsed: Result<Option<String>, String>,
    now: DateTime<Utc>,
    generation: Option<i64>,
) -> Option<String> {
    match parsed {
        Ok(None) => {
            remove_condition(conditions, condition);
            None
        }
        Ok(Some(message)) => {
            set_pool_condition(conditions, condition, ConditionStatus::True, condition, &message, now, generation);
            None
        }
        Err(message) => {
            set_pool_condition(
                conditions,
                condition,
                ConditionStatus::False,
                invalid_reason,
                &message,
                now,
                generation,
            );
            Some(message)
        }
    }
}
