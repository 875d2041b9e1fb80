//! Post-registration tagging: once a NodeClaim's Node has registered, its instance gets the tags only known then
//! (`Name` = the node's name, `karpenter.sh/nodeclaim`, `eks:eks-cluster-name`), and the NodeClaim is annotated
//! `karpenter.k8s.aws/tagged: "true"` so the work is done once. An instance that is already gone needs no tags:
//! the claim is annotated anyway, so a terminated instance never makes the controller retry forever.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::labels::annotations::TAGGED;
use async_trait::async_trait;
use karpenter_api::NodeClaim;
use karpenter_api::condition::Conditions;
use karpenter_api::nodeclaim::conditions::REGISTERED;
use karpenter_cloudprovider::{CloudProviderError, ErrorKind};
use karpenter_runtime::metrics::runtime::queue::ControllerQueue;
use karpenter_runtime::metrics::{Metrics, ReconcileMetrics};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, reflector};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::launch::ice::UnavailableOfferings;
use crate::provider::{AwsCloudProvider, instance_id};

/// The tag carrying the node's name, shown as the instance's name in the EC2 console.
pub const NAME_TAG: &str = "Name";
/// The tag naming the NodeClaim (also set at launch; repeated so older instances get it).
pub const NODE_CLAIM_TAG: &str = "karpenter.sh/nodeclaim";
/// The tag EKS uses to attribute instances to a cluster.
pub const EKS_CLUSTER_NAME_TAG: &str = "eks:eks-cluster-name";

/// How instances are tagged; the `AwsCloudProvider` in production (its batching instance provider), a recorder
/// in tests.
#[async_trait]
pub trait InstanceTagger: Send + Sync {
    async fn tag(&self, instance_id: &str, tags: &BTreeMap<String, String>) -> Result<(), CloudProviderError>;
}

#[async_trait]
impl InstanceTagger for AwsCloudProvider {
    async fn tag(&self, instance_id: &str, tags: &BTreeMap<String, String>) -> Result<(), CloudProviderError> {
        self.instance_provider().tag(instance_id, tags).await
    }
}

/// Why a tagging reconcile failed; it is retried.
#[derive(Debug, thiserror::Error)]
pub enum TaggingError {
    #[error("tagging instance {instance_id} of NodeClaim {claim}: {source}")]
    Tag {
        claim: String,
        instance_id: String,
        #[source]
        source: CloudProviderError,
    },
    #[error("annotating NodeClaim {claim} as tagged: {source}")]
    Annotate {
        claim: String,
        #[source]
        source: kube::Error,
    },
}

/// The instance id and the tags a NodeClaim's instance should get now, or `None` when there is nothing to do:
/// not registered yet, no AWS provider id or node name, already tagged, or being deleted.
pub fn pending_tags(claim: &NodeClaim, cluster_name: &str) -> Option<(String, BTreeMap<String, String>)> {
    if claim.metadata.deletion_timestamp.is_some() {
        return None;
    }
    if claim.annotations().get(TAGGED).is_some_and(|v| v == "true") {
        return None;
    }
    let status = claim.status.as_ref()?;
    if !status.conditions.is_true(REGISTERED) {
        return None;
    }
    let instance = instance_id(status.provider_id.as_deref()?)?.to_owned();
    let node_name = status.node_name.as_deref().filter(|n| !n.is_empty())?;
    let mut tags =
        BTreeMap::from([(NAME_TAG.to_owned(), node_name.to_owned()), (NODE_CLAIM_TAG.to_owned(), claim.name_any())]);
    if !cluster_name.is_empty() {
        tags.insert(EKS_CLUSTER_NAME_TAG.to_owned(), cluster_name.to_owned());
    }
    Some((instance, tags))
}

/// How soon a claim held back by a zonal shift is looked at again.
const ZONAL_SHIFT_RECHECK: Duration = crate::zonalshift::POLL_INTERVAL;

/// The post-registration tagging controller.
pub struct TaggingController {
    client: Client,
    tagger: Arc<dyn InstanceTagger>,
    cluster_name: String,
    /// Zones under an ARC zonal shift (`crate::zonalshift`): their instances are tagged once the shift ends.
    shifts: Option<UnavailableOfferings>,
    /// The controller's reconcile and workqueue series ([`TaggingController::with_metrics`]).
    reconcile_metrics: Option<ReconcileMetrics>,
}

impl std::fmt::Debug for TaggingController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaggingController").field("cluster_name", &self.cluster_name).finish_non_exhaustive()
    }
}

impl TaggingController {
    pub fn new(client: Client, tagger: Arc<dyn InstanceTagger>, cluster_name: impl Into<String>) -> Self {
        Self { client, tagger, cluster_name: cluster_name.into(), shifts: None, reconcile_metrics: None }
    }

    /// Upstream's name of this controller: the `controller` label of its reconcile and workqueue series.
    pub const NAME: &'static str = "nodeclaim.tagging";

    /// Records the controller's reconciles and queue into `metrics` under [`TaggingController::NAME`], with
    /// kube-runtime's unbounded concurrency (0), as the operator's kube-runtime controllers report it.
    pub fn with_metrics(mut self, metrics: &Metrics) -> Self {
        self.reconcile_metrics = Some(metrics.reconciler(Self::NAME, 0));
        self
    }

    /// Leaves instances in zones under an ARC zonal shift untagged until the shift ends.
    pub fn with_zonal_shifts(mut self, shifts: UnavailableOfferings) -> Self {
        self.shifts = Some(shifts);
        self
    }

    /// Whether the claim's instance is in a zone under a zonal shift.
    fn deferred(&self, claim: &NodeClaim) -> bool {
        let zone = claim.metadata.labels.as_ref().and_then(|l| l.get(karpenter_api::labels::ZONE));
        matches!((&self.shifts, zone), (Some(s), Some(z)) if s.is_zone_shifted(z))
    }

    /// Tags the claim's instance if it is due and records that on the claim. Returns whether it tagged.
    pub async fn reconcile(&self, claim: &NodeClaim) -> Result<bool, TaggingError> {
        let Some((instance, tags)) = pending_tags(claim, &self.cluster_name) else {
            return Ok(false);
        };
        if self.deferred(claim) {
            return Ok(false);
        }
        let name = claim.name_any();
        let tagged = match self.tagger.tag(&instance, &tags).await {
            Ok(()) => true,
            // The instance is gone: garbage collection and termination take it from here.
            Err(e) if e.kind() == ErrorKind::NodeClaimNotFound => false,
            Err(source) => return Err(TaggingError::Tag { claim: name, instance_id: instance, source }),
        };
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let patch = serde_json::json!({"metadata": {"annotations": {TAGGED: "true"}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| TaggingError::Annotate { claim: name, source })?;
        Ok(tagged)
    }

    /// Runs until `shutdown` fires: every NodeClaim change is a reconcile; failures retry after 10 s.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        if shutdown.is_cancelled() {
            return;
        }
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        let queue = ControllerQueue::new(self.reconcile_metrics.clone());
        // The claim watch is ours (`for_stream`, as the operator's controllers run), so each claim event counts as
        // an add when it arrives, not only when its reconcile starts.
        let (claims, writer) = reflector::store();
        let events = reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
        let controller = Controller::for_stream(queue.object_results(events.applied_objects()), claims)
            .graceful_shutdown_on(shutdown.clone().cancelled_owned());
        let run = queue.run(
            controller,
            |claim: Arc<NodeClaim>, ctx: Arc<Self>| async move {
                let tagged = ctx.reconcile(&claim).await;
                // A claim held back by a zonal shift is looked at again after the next poll of ARC.
                let deferred = ctx.deferred(&claim) && pending_tags(&claim, &ctx.cluster_name).is_some();
                tagged.map(|_| if deferred { Action::requeue(ZONAL_SHIFT_RECHECK) } else { Action::await_change() })
            },
            |_claim, error: &TaggingError, _ctx| {
                tracing::warn!(error = %error, "post-registration tagging failed");
                Action::requeue(Duration::from_secs(10))
            },
            self,
        );
        tokio::pin!(run);
        tokio::select! {
            _ = &mut run => {}
            _ = shutdown.cancelled() => {
                let _ = tokio::time::timeout(Duration::from_secs(10), run).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<(String, BTreeMap<String, String>)>>,
        gone: bool,
    }

    #[async_trait]
    impl InstanceTagger for Recorder {
        async fn tag(&self, id: &str, tags: &BTreeMap<String, String>) -> Result<(), CloudProviderError> {
            self.calls.lock().unwrap().push((id.to_owned(), tags.clone()));
            if self.gone { Err(CloudProviderError::not_found(format!("instance {id} not found"))) } else { Ok(()) }
        }
    }

    fn claim(registered: &str, annotations: serde_json::Value) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc", "annotations": annotations},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"providerID": "aws:///us-west-2a/i-0123", "nodeName": "ip-10-0-0-1.ec2.internal",
                       "conditions": [{"type": "Registered", "status": registered, "reason": "Registered",
                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .unwrap()
    }

    #[test]
    fn tags_only_registered_untagged_claims() {
        let (id, tags) = pending_tags(&claim("True", serde_json::json!({})), "prod").unwrap();
        assert_eq!(id, "i-0123");
        assert_eq!(tags[NAME_TAG], "ip-10-0-0-1.ec2.internal");
        assert_eq!(tags[NODE_CLAIM_TAG], "default-abc");
        assert_eq!(tags[EKS_CLUSTER_NAME_TAG], "prod");
        assert!(pending_tags(&claim("False", serde_json::json!({})), "prod").is_none());
        assert!(pending_tags(&claim("True", serde_json::json!({TAGGED: "true"})), "prod").is_none());
        let mut kwok = claim("True", serde_json::json!({}));
        kwok.status.as_mut().unwrap().provider_id = Some("kwok://x".into());
        assert!(pending_tags(&kwok, "prod").is_none());
        let mut deleting = claim("True", serde_json::json!({}));
        deleting.metadata.deletion_timestamp =
            serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).unwrap();
        assert!(deleting.metadata.deletion_timestamp.is_some());
        assert!(pending_tags(&deleting, "prod").is_none());
    }

    #[tokio::test]
    async fn an_instance_in_a_shifted_zone_is_tagged_after_the_shift() {
        let server = karpenter_testing::apiserver::ApiServer::builder()
            .provider(&crate::labels::provider_labels(), &crate::api::node_class_apis())
            .build();
        let client = server.client();
        let api: Api<NodeClaim> = Api::all(client.clone());
        let mut zoned = claim("True", serde_json::json!({}));
        zoned.metadata.labels = Some([(karpenter_api::labels::ZONE.to_owned(), "us-west-2a".to_owned())].into());
        let created = karpenter_testing::apiserver::create_with_status(&api, &zoned).await.unwrap();
        let recorder = Arc::new(Recorder::default());
        let shifts = UnavailableOfferings::new(Arc::new(karpenter_cloudprovider::SystemClock));
        shifts.set_shifted_zones(["us-west-2a".to_owned()].into());
        let controller =
            TaggingController::new(client.clone(), recorder.clone(), "prod").with_zonal_shifts(shifts.clone());
        assert!(!controller.reconcile(&created).await.unwrap());
        assert!(recorder.calls.lock().unwrap().is_empty(), "not tagged during the shift");
        assert!(api.get("default-abc").await.unwrap().annotations().get(TAGGED).is_none());
        shifts.set_shifted_zones(Default::default());
        assert!(controller.reconcile(&created).await.unwrap());
        assert_eq!(recorder.calls.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn tags_the_instance_then_annotates_the_claim() {
        let server = karpenter_testing::apiserver::ApiServer::builder()
            .provider(&crate::labels::provider_labels(), &crate::api::node_class_apis())
            .build();
        let client = server.client();
        let api: Api<NodeClaim> = Api::all(client.clone());
        let created = karpenter_testing::apiserver::create_with_status(&api, &claim("True", serde_json::json!({})))
            .await
            .unwrap();
        let recorder = Arc::new(Recorder::default());
        let controller = TaggingController::new(client.clone(), recorder.clone(), "prod");
        assert!(controller.reconcile(&created).await.unwrap());
        let calls = recorder.calls.lock().unwrap().clone();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, "i-0123");
        let after = api.get("default-abc").await.unwrap();
        assert_eq!(after.annotations().get(TAGGED).map(String::as_str), Some("true"));
        // Done once: the annotated claim is not tagged again.
        assert!(!controller.reconcile(&after).await.unwrap());
        assert_eq!(recorder.calls.lock().unwrap().len(), 1);
    }

    /// Run as in production, the controller reports its reconciles and queue under upstream's name.
    #[tokio::test]
    async fn the_running_controller_records_its_reconcile_and_workqueue_series() {
        let server = karpenter_testing::apiserver::ApiServer::builder()
            .provider(&crate::labels::provider_labels(), &crate::api::node_class_apis())
            .build();
        let client = server.client();
        let api: Api<NodeClaim> = Api::all(client.clone());
        karpenter_testing::apiserver::create_with_status(&api, &claim("True", serde_json::json!({}))).await.unwrap();
        let metrics = crate::testing::registry();
        let controller = TaggingController::new(client, Arc::new(Recorder::default()), "prod").with_metrics(&metrics);
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(Arc::new(controller).run(shutdown.clone()));
        // Waits on the outcome (the claim annotated), not on a duration; the bound only ends a broken run.
        let annotated = tokio::time::timeout(Duration::from_secs(30), async {
            while api.get("default-abc").await.unwrap().annotations().get(TAGGED).is_none() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        shutdown.cancel();
        running.await.unwrap();
        assert!(annotated.is_ok(), "the running controller tagged the claim");
        let exposition = metrics.render();
        let value = |series: &str| crate::testing::sample(&exposition, series).unwrap_or(0.0);
        let success = "controller_runtime_reconcile_total{controller=\"nodeclaim.tagging\",result=\"success\"}";
        assert!(value(success) >= 1.0, "{exposition}");
        let adds = "workqueue_adds_total{name=\"nodeclaim.tagging\",controller=\"nodeclaim.tagging\"}";
        assert!(value(adds) >= 1.0, "{exposition}");
    }

    #[tokio::test]
    async fn a_gone_instance_still_marks_the_claim() {
        let server = karpenter_testing::apiserver::ApiServer::builder()
            .provider(&crate::labels::provider_labels(), &crate::api::node_class_apis())
            .build();
        let client = server.client();
        let api: Api<NodeClaim> = Api::all(client.clone());
        let created = karpenter_testing::apiserver::create_with_status(&api, &claim("True", serde_json::json!({})))
            .await
            .unwrap();
        let recorder = Arc::new(Recorder { gone: true, ..Recorder::default() });
        let controller = TaggingController::new(client, recorder, "prod");
        assert!(!controller.reconcile(&created).await.unwrap());
        let after = api.get("default-abc").await.unwrap();
        assert_eq!(after.annotations().get(TAGGED).map(String::as_str), Some("true"));
    }
}
