//! Node classes as the NodePool controllers read them, and the kwok node class's status controller.
//!
//! A NodePool names its node class by `group`, `kind` and `name` only; [`NodeClassResolver`] knows the API
//! resource (version, plural) of each node-class kind the controller can read — EC2NodeClass and KWOKNodeClass
//! by default, more with [`NodeClassResolver::with`] — and fetches them as dynamic objects. Their readiness is
//! their own `Ready` condition: the AWS crate writes it for EC2NodeClasses, [`KwokNodeClassStatus`] for
//! KWOKNodeClasses (which need no cloud resources, so they are `Ready` as soon as they exist, as upstream's kwok
//! provider has them).

use std::sync::Arc;

use karpenter_api::NodeClassReference;
use karpenter_api::condition::{Condition, ConditionStatus};
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_aws::api::EC2NodeClass;
use karpenter_kwok::api::KWOKNodeClass;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::kube_util::{ReconcileError, Requeue};
use crate::metrics::runtime::queue::ControllerQueue;
use crate::termination::{error_policy, to_action};

/// The controller name in logs.
pub const KWOK_CONTROLLER: &str = "kwoknodeclass.status";

/// Maps node-class kinds to their API resources (see the module docs).
#[derive(Debug, Clone)]
pub struct NodeClassResolver {
    resources: Vec<ApiResource>,
}

impl Default for NodeClassResolver {
    fn default() -> Self {
        Self { resources: vec![ApiResource::erase::<EC2NodeClass>(&()), ApiResource::erase::<KWOKNodeClass>(&())] }
    }
}

/// What a NodePool sees of its node class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeClassState {
    /// No such object.
    NotFound,
    /// It is being deleted.
    Terminating,
    /// It exists: its `Ready` condition (absent = `Unknown`) and `metadata.generation`.
    Present {
        /// The `Ready` condition, if any.
        ready: Option<Condition>,
        /// `metadata.generation`.
        generation: Option<i64>,
    },
}

impl NodeClassResolver {
    /// The default resolver plus `resource` (a provider's own node-class kind).
    pub fn with(mut self, resource: ApiResource) -> Self {
        self.resources.retain(|r| !(r.group == resource.group && r.kind == resource.kind));
        self.resources.push(resource);
        self
    }

    /// The API resource of a node-class kind, if known.
    pub fn resource(&self, group: &str, kind: &str) -> Option<&ApiResource> {
        self.resources.iter().find(|r| r.group == group && r.kind == kind)
    }

    /// Every known resource.
    pub fn resources(&self) -> &[ApiResource] {
        &self.resources
    }

    /// Reads the node class `reference` points at. `Ok(None)` when its kind is unknown to the resolver.
    pub async fn fetch(
        &self,
        client: &Client,
        reference: &NodeClassReference,
    ) -> Result<Option<NodeClassState>, kube::Error> {
        let Some(resource) = self.resource(&reference.group, &reference.kind) else { return Ok(None) };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
        let Some(obj) = api.get_opt(&reference.name).await? else { return Ok(Some(NodeClassState::NotFound)) };
        if obj.metadata.deletion_timestamp.is_some() {
            return Ok(Some(NodeClassState::Terminating));
        }
        let ready = obj
            .data
            .get("status")
            .and_then(|s| s.get("conditions"))
            .and_then(|c| serde_json::from_value::<Vec<Condition>>(c.clone()).ok())
            .and_then(|cs| cs.into_iter().find(|c| c.type_ == cond::READY));
        Ok(Some(NodeClassState::Present { ready, generation: obj.metadata.generation }))
    }
}

/// Marks every KWOKNodeClass `Ready=True` (see the module docs).
pub struct KwokNodeClassStatus {
    ctx: ControllerContext,
}

impl std::fmt::Debug for KwokNodeClassStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KwokNodeClassStatus").finish_non_exhaustive()
    }
}

impl KwokNodeClassStatus {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone() }
    }

    fn api(&self) -> Api<KWOKNodeClass> {
        Api::all(self.ctx.client.clone())
    }

    /// Sets `Ready=True` on the KWOKNodeClass `name` unless it is already or the class is gone or deleting.
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api = self.api();
        let Some(class) = api.get_opt(name).await? else { return Ok(None) };
        if class.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let mut conditions = class.status.clone().unwrap_or_default().conditions;
        let changed = karpenter_api::set_condition(
            &mut conditions,
            cond::READY,
            ConditionStatus::True,
            cond::READY,
            "",
            class.metadata.generation,
            self.ctx.clock.now(),
        );
        if changed {
            let patch = json!({
                "metadata": {"resourceVersion": class.resource_version()},
                "status": {"conditions": conditions},
            });
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            tracing::info!(controller = KWOK_CONTROLLER, KWOKNodeClass = %name, "marked node class ready");
        }
        Ok(None)
    }

    /// Watches KWOKNodeClasses until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let queue = ControllerQueue::new(crate::kube_util::ErrorPolicyContext::reconciles(&*self, 0));
        let (classes, writer) = reflector::store();
        let events = reflector(writer, watcher(self.api(), watcher::Config::default())).default_backoff();
        let controller = Controller::for_stream(queue.object_results(events.applied_objects()), classes)
            .graceful_shutdown_on(shutdown.cancelled_owned());
        queue
            .run(
                controller,
                |class: Arc<KWOKNodeClass>, ctx: Arc<Self>| async move {
                    Ok::<Action, ReconcileError>(to_action(ctx.reconcile(&class.name_any()).await?))
                },
                error_policy,
                self,
            )
            .await;
    }
}

impl crate::kube_util::ErrorPolicyContext for KwokNodeClassStatus {
    fn controller_name(&self) -> &'static str {
        KWOK_CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(self.ctx.metrics().as_ref())
    }
}
