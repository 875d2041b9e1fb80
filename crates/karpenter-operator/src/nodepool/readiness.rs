//! NodePool readiness (`nodepool.readiness`): `NodeClassReady` from the referenced node class, then the root
//! `Ready` ([`super::recompute_ready`]).
//!
//! - the node class does not exist: `NodeClassReady=False(NodeClassNotFound)`;
//! - it is being deleted: `False(NodeClassTerminating)`;
//! - its `Ready` is `True`: `True`; `False`: `False` with the class's own reason and message; absent or
//!   `Unknown`: `False(NodeClassReadinessUnknown)`.
//!
//! NodePools whose node-class kind the cloud provider does not launch from are left alone (another controller
//! instance owns them), as are kinds the [`NodeClassResolver`] cannot read (logged). The run loop watches
//! NodePools and every readable node-class kind, mapping a node class to the NodePools that reference it.

use std::sync::Arc;

use karpenter_api::NodePool;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::nodeclaim::conditions::{self as cond, reasons};
use karpenter_cloudprovider::CloudProvider;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio_util::sync::CancellationToken;

use super::nodeclass::{NodeClassResolver, NodeClassState};
use super::{recompute_ready, set_pool_condition, write_pool_conditions};
use crate::context::ControllerContext;
use crate::kube_util::{ReconcileError, Requeue};
use crate::metrics::runtime::queue::ControllerQueue;
use crate::termination::{error_policy, to_action};

/// The controller name in logs.
pub const CONTROLLER: &str = "nodepool.readiness";
/// Reason of `NodeClassReady=False` when the class's readiness is not known yet.
pub const NODE_CLASS_READINESS_UNKNOWN: &str = "NodeClassReadinessUnknown";

/// The readiness controller (see the module docs).
pub struct Readiness {
    ctx: ControllerContext,
    resolver: NodeClassResolver,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness").field("resolver", &self.resolver).finish_non_exhaustive()
    }
}

impl Readiness {
    pub fn new(ctx: &ControllerContext, resolver: NodeClassResolver) -> Self {
        Self { ctx: ctx.clone(), resolver }
    }

    fn api(&self) -> Api<NodePool> {
        Api::all(self.ctx.client.clone())
    }

    /// One pass over the NodePool `name` (absent: nothing to do).
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api = self.api();
        let Some(pool) = api.get_opt(name).await? else { return Ok(None) };
        let reference = &pool.spec.template.spec.node_class_ref;
        if !self.ctx.cloud.supported_node_classes().iter().any(|k| k.matches(reference)) {
            return Ok(None);
        }
        let Some(state) = self.resolver.fetch(&self.ctx.client, reference).await? else {
            tracing::warn!(controller = CONTROLLER, NodePool = %name, group = %reference.group, kind = %reference.kind,
                "node class kind has no known API resource; readiness not evaluated");
            return Ok(None);
        };
        let (status, reason, message) = match &state {
            NodeClassState::NotFound => (
                ConditionStatus::False,
                reasons::NODE_CLASS_NOT_FOUND.to_owned(),
                "NodeClass not found on cluster".into(),
            ),
            NodeClassState::Terminating => {
                (ConditionStatus::False, reasons::NODE_CLASS_TERMINATING.to_owned(), "NodeClass is terminating".into())
            }
            NodeClassState::Present { ready, .. } => match ready {
                Some(c) if c.status == ConditionStatus::True => {
                    (ConditionStatus::True, cond::NODE_CLASS_READY.to_owned(), String::new())
                }
                Some(c) if c.status == ConditionStatus::False => (
                    ConditionStatus::False,
                    if c.reason.is_empty() { "NodeClassNotReady".to_owned() } else { c.reason.clone() },
                    c.message.clone(),
                ),
                _ => (
                    ConditionStatus::False,
                    NODE_CLASS_READINESS_UNKNOWN.to_owned(),
                    "NodeClass readiness is unknown".to_owned(),
                ),
            },
        };
        let now = self.ctx.clock.now();
        let generation = pool.metadata.generation;
        let mut conditions = pool.conditions().to_vec();
        set_pool_condition(&mut conditions, cond::NODE_CLASS_READY, status, &reason, &message, now, generation);
        recompute_ready(&mut conditions, now, generation);
        if let Some(written) = write_pool_conditions(&api, &pool, conditions).await? {
            tracing::debug!(controller = CONTROLLER, NodePool = %name, ready = written.is_ready(), reason = %reason,
                "nodepool readiness updated");
        }
        Ok(None)
    }

    /// Watches NodePools and node classes until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let queue = ControllerQueue::new(crate::kube_util::ErrorPolicyContext::reconciles(&*self, 0));
        let (pools, writer) = reflector::store();
        let events = reflector(writer, watcher(self.api(), watcher::Config::default())).default_backoff();
        let mut controller = Controller::for_stream(queue.object_results(events.applied_objects()), pools);
        let supported = self.ctx.cloud.supported_node_classes();
        for kind in &supported {
            let Some(resource) = self.resolver.resource(&kind.group, &kind.kind).cloned() else { continue };
            let pools = controller.store();
            let (group, kind_name) = (resource.group.clone(), resource.kind.clone());
            controller = controller.watches_with(
                Api::<DynamicObject>::all_with(self.ctx.client.clone(), &resource),
                resource,
                watcher::Config::default(),
                queue.mapped(move |class: DynamicObject| {
                    let name = class.name_any();
                    pools
                        .state()
                        .iter()
                        .filter(|p| {
                            let r = &p.spec.template.spec.node_class_ref;
                            r.group == group && r.kind == kind_name && r.name == name
                        })
                        .map(|p| ObjectRef::from_obj(&**p))
                        .collect::<Vec<_>>()
                }),
            );
        }
        queue
            .run(
                controller.graceful_shutdown_on(shutdown.cancelled_owned()),
                |pool: Arc<NodePool>, ctx: Arc<Self>| async move {
                    Ok::<Action, ReconcileError>(to_action(ctx.reconcile(&pool.name_any()).await?))
                },
                error_policy,
                self,
            )
            .await;
    }
}

impl crate::kube_util::ErrorPolicyContext for Readiness {
    fn controller_name(&self) -> &'static str {
        CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(self.ctx.metrics().as_ref())
    }
}
