//! Node classes as the NodePool controllers read them, and the status controller of the kinds that are ready on
//! sight.
//!
//! A NodePool names its node class by `group`, `kind` and `name` only; [`NodeClassResolver`] knows the API
//! resource (version, plural) of each node-class kind the provider registered
//! ([`NodeClassRegistration`]) and fetches them as dynamic objects. Their readiness is their own `Ready`
//! condition: the provider's own controller writes it (the AWS crate for its node classes), or, for a kind
//! registered [`ready_on_sight`](NodeClassRegistration::ready_on_sight) (one that needs no cloud resources, as
//! upstream's kwok provider has it), [`ReadyOnSight`] sets it `True` as soon as the node class exists.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use karpenter_api::NodeClassReference;
use karpenter_api::condition::{Condition, ConditionStatus};
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_cloudprovider::time::tokio_now;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::kube_util::{ReconcileError, Requeue, record_write_conflict};
use crate::metrics::ReconcileResult;
pub use crate::node_classes::NodeClassRegistration;
use crate::termination::to_action;

/// Maps node-class kinds to their API resources (see the module docs). The default knows no kind.
#[derive(Debug, Clone, Default)]
pub struct NodeClassResolver {
    resources: Vec<ApiResource>,
}

impl NodeClassResolver {
    /// A resolver of the registered kinds.
    pub fn new<'a>(registrations: impl IntoIterator<Item = &'a NodeClassRegistration>) -> Self {
        registrations.into_iter().fold(Self::default(), |r, reg| r.with(reg.api_resource.clone()))
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
    /// This resolver plus `resource` (replacing a resource of the same group and kind).
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

/// The controller name of a kind's [`ReadyOnSight`]: the lower-cased kind and `.status` (`toynodeclass.status`
/// for a `ToyNodeClass`), as upstream names a node class's status controller.
pub fn ready_on_sight_controller_name(kind: &str) -> String {
    format!("{}.status", kind.to_lowercase())
}

/// Marks every node class of one kind `Ready=True` (see the module docs).
pub struct ReadyOnSight {
    ctx: ControllerContext,
    resource: ApiResource,
    /// [`ready_on_sight_controller_name`].
    controller: String,
}

impl std::fmt::Debug for ReadyOnSight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadyOnSight").field("controller", &self.controller).finish_non_exhaustive()
    }
}

impl ReadyOnSight {
    /// The controller of `registration`'s kind (whatever its `ready_on_sight` says: the manager starts one only
    /// for the kinds registered so).
    pub fn new(ctx: &ControllerContext, registration: &NodeClassRegistration) -> Self {
        let controller = ready_on_sight_controller_name(&registration.api_resource.kind);
        Self { ctx: ctx.clone(), resource: registration.api_resource.clone(), controller }
    }

    /// The controller's name in logs and metrics.
    pub fn name(&self) -> &str {
        &self.controller
    }

    fn api(&self) -> Api<DynamicObject> {
        Api::all_with(self.ctx.client.clone(), &self.resource)
    }

    /// Sets `Ready=True` on the node class `name` unless it is already or the class is gone or deleting.
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api = self.api();
        let Some(class) = api.get_opt(name).await? else { return Ok(None) };
        if class.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        // Conditions that do not read as conditions are replaced: this controller owns the status of its kind.
        let mut conditions: Vec<Condition> = class
            .data
            .get("status")
            .and_then(|s| s.get("conditions"))
            .and_then(|c| serde_json::from_value(c.clone()).ok())
            .unwrap_or_default();
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
            tracing::info!(controller = %self.controller, kind = %self.resource.kind, name = %name,
                "marked node class ready");
        }
        Ok(None)
    }

    /// Watches the kind's node classes until `shutdown`, reconciling each one the watch reports. A failed
    /// reconcile is retried on its own schedule (soon after a write conflict, else after [`RETRY`]) unless a
    /// newer event brings the object first. Its reconcile and workqueue series are the controller's, as a
    /// kube-runtime controller's are (kube-runtime's `Controller` is typed to kinds known at compile time).
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let metrics = self.ctx.metrics().reconciler(&self.controller, 0);
        let events = watcher(self.api(), watcher::Config::default()).default_backoff().applied_objects();
        let mut events = std::pin::pin!(events);
        // Names to reconcile again, and when.
        let mut retries: BTreeMap<String, tokio::time::Instant> = BTreeMap::new();
        loop {
            let next_retry = retries.values().min().copied();
            let due: Vec<String> = tokio::select! {
                () = shutdown.cancelled() => return,
                event = events.next() => match event {
                    Some(Ok(class)) => {
                        let name = class.name_any();
                        metrics.object_queued(key_of(&self.resource, &name));
                        vec![name]
                    }
                    // The watcher retries with backoff.
                    Some(Err(e)) => {
                        tracing::debug!(controller = %self.controller, error = %e, "node class watch");
                        continue;
                    }
                    None => return,
                },
                () = sleep_until_some(next_retry) => {
                    let now = tokio_now();
                    retries.iter().filter(|(_, at)| **at <= now).map(|(n, _)| n.clone()).collect()
                }
            };
            for name in due {
                retries.remove(&name);
                let guard = metrics.start_object(&key_of(&self.resource, &name));
                let result = self.reconcile(&name).await;
                guard.finish(ReconcileResult::of_action(&result.as_ref().map(|r| to_action(*r))));
                if let Err(e) = result {
                    if e.is_conflict() {
                        let metrics = Some(self.ctx.metrics().as_ref());
                        record_write_conflict(metrics, &self.controller, &self.resource.kind, &name, &e);
                    } else {
                        tracing::warn!(controller = %self.controller, error = %e, "reconcile failed");
                    }
                    retries.insert(name, tokio_now() + e.retry_after(RETRY));
                }
            }
        }
    }
}

/// How long [`ReadyOnSight`] waits before retrying a failed reconcile (other than a write conflict).
pub const RETRY: Duration = Duration::from_secs(5);

/// The workqueue key of a node class, as the kube-runtime controllers' keys read.
fn key_of(resource: &ApiResource, name: &str) -> String {
    crate::metrics::runtime::queue::object_key(&resource.kind, None, name)
}

/// Sleeps until `at`, or forever when there is nothing to wait for.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
