//! Step 2 of a lifecycle pass: launching the claim's instance through the cloud provider (see the module docs of
//! [`super`]).

use karpenter_api::CompactPod;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::labels;
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_cloudprovider::ErrorKind;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::json;

use super::{CONTROLLER, LifecycleError, Pass, delete_claim, truncate, write_status};
use crate::events::{Event, reasons};

impl Pass<'_> {
    /// Step 2: launch (until `Launched=True`). `Some` ends the pass: the claim was deleted, or the launch failed
    /// (then the status is written and the error returned for a retry).
    pub(super) async fn launch(&mut self) -> Result<Option<Action>, LifecycleError> {
        let ctx = self.ctx;
        let uid = self.claim.metadata.uid.clone().unwrap_or_default();
        if self.claim.is_launched() {
            ctx.forget_launch(&uid);
            return Ok(None);
        }
        let cached = ctx.cached_launch(&uid);
        // A cached launch is one whose status write lost a race: writing it again is not news.
        let fresh = cached.is_none();
        let result = match cached {
            Some(cached) => Ok(cached),
            None => ctx.shared.cloud.create(&self.claim).await,
        };
        let launched = match result {
            Ok(launched) => launched,
            Err(e) if matches!(e.kind(), ErrorKind::InsufficientCapacity | ErrorKind::NodeClassNotReady) => {
                let (reason, metric_reason) = if e.kind() == ErrorKind::InsufficientCapacity {
                    (reasons::INSUFFICIENT_CAPACITY_ERROR, "insufficient_capacity")
                } else {
                    (reasons::NODE_CLASS_NOT_READY, "node_class_not_ready")
                };
                let name = &self.name;
                tracing::error!(controller = CONTROLLER, NodeClaim = %name, error = %e, "launch failed, deleting nodeclaim");
                ctx.shared.recorder.publish_detached(Event::warning(
                    &self.claim,
                    reason,
                    format!("NodeClaim {name} event: {e}"),
                ));
                if e.kind() == ErrorKind::InsufficientCapacity {
                    // The pods this claim was planned for learn why they are still pending; the next pass plans
                    // them again without the offerings that just failed.
                    for key in ctx.shared.state.claim_pods(name) {
                        if let Some(pod) = ctx.shared.state.get::<CompactPod>(&key) {
                            ctx.shared.recorder.publish_detached(Event::warning(
                                &pod,
                                reasons::INSUFFICIENT_CAPACITY_ERROR,
                                format!("NodeClaim {name} nominated for this pod failed to launch: {e}"),
                            ));
                        }
                    }
                }
                delete_claim(ctx, &self.claim, metric_reason).await?;
                return Ok(Some(Action::await_change()));
            }
            Err(e) => {
                self.set(cond::LAUNCHED, ConditionStatus::Unknown, e.kind().as_str(), &truncate(&e.to_string()));
                write_status(ctx, &self.claim, &self.before, self.status.clone()).await?;
                return Err(LifecycleError::Launch { name: self.name.clone(), source: e });
            }
        };
        ctx.cache_launch(&uid, &launched);
        let labels_merged =
            karpenter_cloudprovider::launch::launched_claim_labels(launched.labels().clone(), &self.claim);
        let mut annotations_merged = launched.annotations().clone();
        annotations_merged.extend(self.claim.annotations().clone());
        if &labels_merged != self.claim.labels() || &annotations_merged != self.claim.annotations() {
            let patch = json!({"metadata": {
                "labels": labels_merged, "annotations": annotations_merged,
                "resourceVersion": self.claim.resource_version()}});
            self.claim = ctx
                .api()
                .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(self.kube_err("writing the launched labels"))?;
            ctx.shared.state.apply(self.claim.clone());
        }
        let l = launched.status.unwrap_or_default();
        self.status.provider_id = l.provider_id;
        self.status.image_id = l.image_id;
        self.status.capacity = l.capacity;
        self.status.allocatable = l.allocatable;
        self.set(cond::LAUNCHED, ConditionStatus::True, cond::LAUNCHED, "");
        let name = &self.name;
        let instance_type = self.claim.labels().get(labels::INSTANCE_TYPE).map(String::as_str).unwrap_or("");
        let provider_id = self.status.provider_id.as_deref().unwrap_or("");
        if fresh {
            tracing::info!(controller = CONTROLLER, NodeClaim = %name, provider_id, instance_type, "launched nodeclaim");
        } else {
            tracing::debug!(controller = CONTROLLER, NodeClaim = %name, provider_id, instance_type,
                "writing the cached launch again");
        }
        Ok(None)
    }
}
