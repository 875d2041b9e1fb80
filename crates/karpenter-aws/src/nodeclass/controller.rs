//! The kube-backed node class controllers. Each has `run(self: Arc<Self>, shutdown)` that returns when the
//! token is cancelled, and a `reconcile`/`run_once` step that tests drive without timers.
//!
//! * [`NodeClassController`] — per EC2NodeClass (watch-driven, plus NodeClaim changes of the class):
//!   - adds the `karpenter.k8s.aws/termination` finalizer and keeps the `karpenter.k8s.aws/ec2nodeclass-hash`
//!     and `-hash-version` annotations current (upstream's separate hash controller); NodeClaims of the class
//!     whose hash version differs from ours get the class's current hash and version (so a version change never
//!     drifts every node);
//!   - computes the status with [`NodeClassResolver::reconcile`] and writes it (PUT of the status subresource
//!     with the read resourceVersion, only when it changed), requeueing as the resolver says;
//!   - publishes a Warning event naming the problem when `ValidationSucceeded` turns False for a problem of the
//!     spec (`InvalidKubeletConfiguration`, `InvalidUserData`, `ClusterCIDRNotFound`; again when it changes), and
//!     `UserDataSettingsDropped` once per generation when a Bottlerocket `userData` has settings launches leave
//!     out;
//!   - while there is no price source ([`PricingProvider::uses_estimate`], given with
//!     [`NodeClassController::with_price_estimate_warning`]), publishes a `PricesEstimated` Warning event on the
//!     class (again every hour, the API server's default event TTL, while it lasts);
//!   - on deletion: while NodeClaims reference the class, publishes `WaitingOnNodeClaimTermination` (again every
//!     10 minutes) and waits; then deletes the managed instance profile(s) and, through
//!     [`LaunchTemplateCleanup`], the class's launch templates, and removes the finalizer.
//! * [`SsmInvalidationController`] — every 30 min drops cached `latest` SSM values whose AMI is deprecated.
//! * [`InstanceProfileGarbageCollector`] — deletes managed instance profiles no EC2NodeClass and no NodeClaim
//!   references (not run in isolated VPCs).
//! * [`CapacityBlockExpiration`] — every minute deletes NodeClaims launched into a reservation that the class's
//!   status reports `expiring` (capacity blocks within 40 minutes of their end).
//! * [`ReservationDemotion`] (in [`super::demotion`]) — every minute relabels reserved NodeClaims and Nodes
//!   on-demand once EC2 no longer reports their instance in a capacity reservation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::api::conditions::{self, reasons};
use crate::api::{AmiFamily, EC2NodeClass, EC2NodeClassStatus};
use crate::api::{CapacityReservationState, GROUP, KIND};
use crate::labels::{self as aws_labels, annotations, finalizers};
use async_trait::async_trait;
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::NodeClaim;
use karpenter_api::condition::{ConditionStatus, Conditions};
use karpenter_cloudprovider::Clock;
use karpenter_runtime::metrics::runtime::queue::ControllerQueue;
use karpenter_runtime::metrics::{Metrics, ReconcileMetrics};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::ami::{SSM_INVALIDATION_INTERVAL, SsmProvider};
use super::api::ImageApi;
use super::cache::TtlCache;
use super::demotion::ReservationDemotion;
use super::instance_profile::InstanceProfileProvider;
use super::status::NodeClassResolver;
use crate::api_error::AwsApiError;
use crate::launch::instance::InstanceProvider;
use crate::launch::template::LaunchTemplateProvider;
use crate::launch::userdata::bottlerocket_dropped_settings;
use crate::pricing_api::{PRICES_ESTIMATED_MESSAGE, PRICES_ESTIMATED_REASON, PricingProvider};
use crate::runtime::timed_pass;

/// A kube client that formats as `Client` (kube's has no `Debug`).
#[derive(Clone)]
struct KubeClient(Client);

impl std::fmt::Debug for KubeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Client")
    }
}

/// How long a stopping controller waits for its reconciles in flight.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Event reason while a deleted node class waits for its NodeClaims.
pub const WAITING_ON_NODE_CLAIM_TERMINATION: &str = "WaitingOnNodeClaimTermination";
/// How often the waiting event is published again.
pub const WAITING_EVENT_INTERVAL: Duration = Duration::from_secs(600);
/// How often the `PricesEstimated` event is published again on a class while there is no price source.
pub const PRICES_ESTIMATED_EVENT_INTERVAL: Duration = Duration::from_secs(3600);

// Shared with the demotion controller, so it lives in a module below both; the old path keeps working.
pub use super::error::ControllerError;
// With the hash they carry (the launch side stamps claims with them too); the old paths keep working.
pub use crate::api::hash::{claim_hash_annotations, hash_annotations};

/// The cluster's Kubernetes version (`<major>.<minor>`) for AMI aliases.
#[async_trait]
pub trait KubernetesVersionSource: Send + Sync + std::fmt::Debug {
    async fn version(&self) -> Result<String, String>;
}

/// A fixed version (tests, or an operator override).
#[derive(Clone, Debug)]
pub struct StaticKubernetesVersion(pub String);

#[async_trait]
impl KubernetesVersionSource for StaticKubernetesVersion {
    async fn version(&self) -> Result<String, String> {
        Ok(self.0.clone())
    }
}

/// The API server's `/version`, cached for 5 minutes (upstream's refresh). `minor` values such as `31+` (EKS)
/// are trimmed.
#[derive(Debug)]
pub struct ApiServerVersion {
    client: KubeClient,
    cache: TtlCache<(), String>,
}

impl ApiServerVersion {
    pub fn new(client: Client, clock: Arc<dyn Clock>) -> Self {
        Self { client: KubeClient(client), cache: TtlCache::new(clock, Duration::from_secs(300)) }
    }
}

#[async_trait]
impl KubernetesVersionSource for ApiServerVersion {
    async fn version(&self) -> Result<String, String> {
        if let Some(v) = self.cache.get(&()) {
            return Ok(v);
        }
        let info = self.client.0.apiserver_version().await.map_err(|e| e.to_string())?;
        let minor: String = info.minor.chars().take_while(char::is_ascii_digit).collect();
        let major: String = info.major.chars().take_while(char::is_ascii_digit).collect();
        if major.is_empty() || minor.is_empty() {
            return Err(format!("unparsable server version {}.{}", info.major, info.minor));
        }
        let v = format!("{major}.{minor}");
        self.cache.insert((), v.clone());
        Ok(v)
    }
}

/// The cluster's version as EKS reports it (`DescribeCluster`'s `version`), cached for 5 minutes like
/// [`ApiServerVersion`]: upstream's source when `EKS_CONTROL_PLANE` is true.
#[derive(Debug)]
pub struct EksKubernetesVersion {
    api: Arc<dyn crate::discovery::EksApi>,
    cluster_name: String,
    cache: TtlCache<(), String>,
}

impl EksKubernetesVersion {
    pub fn new(api: Arc<dyn crate::discovery::EksApi>, cluster_name: impl Into<String>, clock: Arc<dyn Clock>) -> Self {
        Self { api, cluster_name: cluster_name.into(), cache: TtlCache::new(clock, Duration::from_secs(300)) }
    }
}

#[async_trait]
impl KubernetesVersionSource for EksKubernetesVersion {
    async fn version(&self) -> Result<String, String> {
        if let Some(v) = self.cache.get(&()) {
            return Ok(v);
        }
        let info = self.api.describe_cluster(&self.cluster_name).await.map_err(|e| e.to_string())?;
        let reported = info.version.unwrap_or_default();
        let well_formed = reported.split_once('.').is_some_and(|(major, minor)| {
            [major, minor].iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        });
        if !well_formed {
            return Err(format!(
                "eks:DescribeCluster reports version {reported:?} for cluster {:?}, not <major>.<minor>",
                self.cluster_name
            ));
        }
        self.cache.insert((), reported.clone());
        Ok(reported)
    }
}

/// Where the cluster's Kubernetes version comes from (`EKS_CONTROL_PLANE`, as upstream): EKS `DescribeCluster`
/// when true, the API server's `/version` otherwise.
pub fn kubernetes_version_source(
    eks_control_plane: bool,
    client: Client,
    eks: Arc<dyn crate::discovery::EksApi>,
    cluster_name: &str,
    clock: Arc<dyn Clock>,
) -> Arc<dyn KubernetesVersionSource> {
    if eks_control_plane {
        Arc::new(EksKubernetesVersion::new(eks, cluster_name, clock))
    } else {
        Arc::new(ApiServerVersion::new(client, clock))
    }
}

/// Deletes the launch templates of a node class (the launch side implements it; upstream deletes every launch
/// template tagged `karpenter.k8s.aws/ec2nodeclass=<name>`).
#[async_trait]
pub trait LaunchTemplateCleanup: Send + Sync + std::fmt::Debug {
    async fn delete_launch_templates(&self, node_class: &EC2NodeClass) -> Result<(), AwsApiError>;
}

// The launch side's provider is the cleanup a running operator uses (tests record the calls instead).
#[async_trait]
impl LaunchTemplateCleanup for LaunchTemplateProvider {
    async fn delete_launch_templates(&self, node_class: &EC2NodeClass) -> Result<(), AwsApiError> {
        let name = node_class.metadata.name.as_deref().unwrap_or_default();
        let deleted = self.delete_for_node_class(name).await?;
        if !deleted.is_empty() {
            tracing::info!(node_class = name, launch_templates = ?deleted, "deleted the node class's launch templates");
        }
        Ok(())
    }
}

/// Whether a NodeClaim references the EC2NodeClass `name`.
pub fn references(claim: &NodeClaim, name: &str) -> bool {
    let r = &claim.spec.node_class_ref;
    r.group == GROUP && r.kind == KIND && r.name == name
}

/// The status, finalizer and hash controller of EC2NodeClasses.
#[derive(Debug)]
pub struct NodeClassController {
    client: KubeClient,
    resolver: Arc<NodeClassResolver>,
    version: Arc<dyn KubernetesVersionSource>,
    launch_templates: Option<Arc<dyn LaunchTemplateCleanup>>,
    clock: Arc<dyn Clock>,
    ca_bundle: Option<String>,
    waiting_events: TtlCache<String, ()>,
    pricing: Option<Arc<PricingProvider>>,
    estimate_events: TtlCache<String, ()>,
    dropped_settings_events: TtlCache<String, ()>,
    /// The controller's reconcile and workqueue series ([`NodeClassController::with_metrics`]).
    reconcile_metrics: Option<ReconcileMetrics>,
}

impl NodeClassController {
    /// Upstream's name of this controller: the `controller` label of its reconcile and workqueue series.
    pub const NAME: &'static str = "nodeclass";

    /// Records the controller's reconciles and queue into `metrics` under [`NodeClassController::NAME`], with
    /// kube-runtime's unbounded concurrency (0), as the operator's kube-runtime controllers report it.
    pub fn with_metrics(mut self, metrics: &Metrics) -> Self {
        self.reconcile_metrics = Some(metrics.reconciler(Self::NAME, 0));
        self
    }

    /// `ca_bundle` is the cluster CA handed to nodes (hashed into the static drift hash when known).
    pub fn new(
        client: Client,
        resolver: Arc<NodeClassResolver>,
        version: Arc<dyn KubernetesVersionSource>,
        clock: Arc<dyn Clock>,
        ca_bundle: Option<String>,
    ) -> Self {
        Self {
            client: KubeClient(client),
            resolver,
            version,
            launch_templates: None,
            waiting_events: TtlCache::new(clock.clone(), WAITING_EVENT_INTERVAL),
            pricing: None,
            estimate_events: TtlCache::new(clock.clone(), PRICES_ESTIMATED_EVENT_INTERVAL),
            // Per generation, again after the API server's default event TTL while the class is unchanged.
            dropped_settings_events: TtlCache::new(clock.clone(), PRICES_ESTIMATED_EVENT_INTERVAL),
            clock,
            ca_bundle,
            reconcile_metrics: None,
        }
    }

    /// Adds the launch-template cleanup run on node class deletion.
    pub fn with_launch_template_cleanup(mut self, cleanup: Arc<dyn LaunchTemplateCleanup>) -> Self {
        self.launch_templates = Some(cleanup);
        self
    }

    /// Publishes the `PricesEstimated` Warning event on each class while `pricing` has no price source.
    pub fn with_price_estimate_warning(mut self, pricing: Arc<PricingProvider>) -> Self {
        self.pricing = Some(pricing);
        self
    }

    /// The resolver (shared with the CloudProvider, which reads its providers' caches).
    pub fn resolver(&self) -> &Arc<NodeClassResolver> {
        &self.resolver
    }

    fn classes(&self) -> Api<EC2NodeClass> {
        Api::all(self.client.0.clone())
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.0.clone())
    }

    /// One reconcile of the node class `name`; returns when to look again (`None`: on the next change).
    pub async fn reconcile(&self, name: &str) -> Result<Option<Duration>, ControllerError> {
        let Some(node_class) = self.classes().get_opt(name).await? else { return Ok(None) };
        if node_class.metadata.deletion_timestamp.is_some() {
            return self.finalize(&node_class).await;
        }
        let node_class = self.ensure_metadata(node_class).await?;
        self.rewrite_claim_hashes(&node_class).await?;
        let version = match self.version.version().await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the Kubernetes version; AMI aliases cannot resolve");
                String::new()
            }
        };
        let reconciled = self.resolver.reconcile(&node_class, &version).await;
        self.warn_if_newly_invalid(&node_class, &reconciled.status).await;
        self.warn_if_user_settings_dropped(&node_class).await;
        if node_class.status.as_ref() != Some(&reconciled.status) {
            let mut updated = node_class.clone();
            updated.status = Some(reconciled.status);
            self.classes().replace_status(name, &PostParams::default(), &updated).await?;
        }
        self.warn_if_estimated(&node_class).await;
        Ok(Some(reconciled.requeue_after))
    }

    /// A Warning event naming the problem when `ValidationSucceeded` newly turns False for a problem of the
    /// class's own spec ([`SPEC_PROBLEM_REASONS`]), or for another such problem, so the class's events show why
    /// it launches nothing. The event's reason is the condition's.
    async fn warn_if_newly_invalid(&self, node_class: &EC2NodeClass, status: &EC2NodeClassStatus) {
        let Some((reason, message)) = spec_problem(Some(status)) else { return };
        if spec_problem(node_class.status.as_ref()) == Some((reason, message)) {
            return;
        }
        self.publish_event(node_class, "Warning", reason, message).await;
    }

    /// A `UserDataSettingsDropped` Warning event, once per generation of a Bottlerocket class, naming the
    /// `settings.kubernetes` keys of its `userData` that launches leave out (Bottlerocket would refuse them).
    async fn warn_if_user_settings_dropped(&self, node_class: &EC2NodeClass) {
        if node_class.spec.effective_ami_family() != Some(AmiFamily::Bottlerocket) {
            return;
        }
        let Some(user_data) = node_class.spec.user_data.as_deref() else { return };
        let dropped = bottlerocket_dropped_settings(user_data);
        if dropped.is_empty() {
            return;
        }
        let key = format!(
            "{}/{}",
            node_class.metadata.uid.as_deref().unwrap_or_else(|| node_class.metadata.name.as_deref().unwrap_or("")),
            node_class.metadata.generation.unwrap_or(0)
        );
        if self.dropped_settings_events.get(&key).is_some() {
            return;
        }
        self.dropped_settings_events.insert(key, ());
        let message = format!(
            "userData settings.kubernetes keys Bottlerocket's settings model lacks are left out of launches: {}",
            dropped.join(", ")
        );
        self.publish_event(node_class, "Warning", USER_DATA_SETTINGS_DROPPED, &message).await;
    }

    /// The `PricesEstimated` event, at most once per class per [`PRICES_ESTIMATED_EVENT_INTERVAL`].
    async fn warn_if_estimated(&self, node_class: &EC2NodeClass) {
        if !self.pricing.as_ref().is_some_and(|p| p.uses_estimate()) {
            return;
        }
        let uid = node_class.metadata.uid.clone().unwrap_or_else(|| node_class.name_any());
        if self.estimate_events.get(&uid).is_none() {
            self.estimate_events.insert(uid, ());
            self.publish_event(node_class, "Warning", PRICES_ESTIMATED_REASON, PRICES_ESTIMATED_MESSAGE).await;
        }
    }

    /// Finalizer and hash annotations, in one merge patch guarded by the resourceVersion.
    async fn ensure_metadata(&self, node_class: EC2NodeClass) -> Result<EC2NodeClass, ControllerError> {
        let wanted = hash_annotations(&node_class, self.ca_bundle.as_deref());
        let current = node_class.metadata.annotations.clone().unwrap_or_default();
        let annotations_ok = wanted.iter().all(|(k, v)| current.get(k) == Some(v));
        let finalizers = node_class.finalizers().to_vec();
        let has_finalizer = finalizers.iter().any(|f| f == finalizers::TERMINATION);
        if annotations_ok && has_finalizer {
            return Ok(node_class);
        }
        let mut new_finalizers = finalizers;
        if !has_finalizer {
            new_finalizers.push(finalizers::TERMINATION.to_string());
        }
        let patch = json!({
            "metadata": {
                "resourceVersion": node_class.metadata.resource_version,
                "finalizers": new_finalizers,
                "annotations": wanted,
            }
        });
        Ok(self.classes().patch(&node_class.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?)
    }

    /// NodeClaims of the class whose hash version is not ours get the class's current hash and version.
    async fn rewrite_claim_hashes(&self, node_class: &EC2NodeClass) -> Result<(), ControllerError> {
        let name = node_class.name_any();
        let class_annotations = node_class.metadata.annotations.clone().unwrap_or_default();
        let (Some(hash), Some(version)) = (
            class_annotations.get(annotations::EC2_NODE_CLASS_HASH),
            class_annotations.get(annotations::EC2_NODE_CLASS_HASH_VERSION),
        ) else {
            return Ok(());
        };
        for claim in self.claims().list(&ListParams::default()).await? {
            if !references(&claim, &name) || claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let claim_version = claim.annotations().get(annotations::EC2_NODE_CLASS_HASH_VERSION);
            if claim_version == Some(version) {
                continue;
            }
            let patch = json!({
                "metadata": {
                    "resourceVersion": claim.metadata.resource_version,
                    "annotations": {
                        annotations::EC2_NODE_CLASS_HASH: hash,
                        annotations::EC2_NODE_CLASS_HASH_VERSION: version,
                    }
                }
            });
            match self.claims().patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn finalize(&self, node_class: &EC2NodeClass) -> Result<Option<Duration>, ControllerError> {
        if !node_class.finalizers().iter().any(|f| f == finalizers::TERMINATION) {
            return Ok(None);
        }
        let name = node_class.name_any();
        let mut waiting: Vec<String> = self
            .claims()
            .list(&ListParams::default())
            .await?
            .iter()
            .filter(|c| references(c, &name))
            .map(|c| c.name_any())
            .collect();
        if !waiting.is_empty() {
            waiting.sort();
            let uid = node_class.metadata.uid.clone().unwrap_or_default();
            if self.waiting_events.get(&uid).is_none() {
                self.waiting_events.insert(uid, ());
                let message = format!("Waiting on NodeClaim termination for {}", waiting.join(", "));
                self.publish_event(node_class, "Normal", WAITING_ON_NODE_CLAIM_TERMINATION, &message).await;
            }
            return Ok(Some(Duration::from_secs(30)));
        }
        self.resolver.instance_profiles.delete_managed(node_class).await?;
        if let Some(cleanup) = &self.launch_templates {
            cleanup.delete_launch_templates(node_class).await?;
        }
        let remaining: Vec<String> =
            node_class.finalizers().iter().filter(|f| *f != finalizers::TERMINATION).cloned().collect();
        let patch = json!({
            "metadata": { "resourceVersion": node_class.metadata.resource_version, "finalizers": remaining }
        });
        match self.classes().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        Ok(None)
    }

    /// A core/v1 Event on the node class.
    async fn publish_event(&self, node_class: &EC2NodeClass, type_: &str, reason: &str, message: &str) {
        publish_node_class_event(&self.client.0, self.clock.now(), node_class, type_, reason, message).await;
    }

    /// Runs the controller until `shutdown` is cancelled: EC2NodeClass changes and changes of NodeClaims that
    /// reference one trigger a reconcile.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        if shutdown.is_cancelled() {
            return;
        }
        let queue = ControllerQueue::new(self.reconcile_metrics.clone());
        // The class watch is ours (`for_stream`, as the operator's controllers run), so each class event counts
        // as an add when it arrives, not only when its reconcile starts.
        let (classes, writer) = reflector::store();
        let events = reflector(writer, watcher(self.classes(), watcher::Config::default())).default_backoff();
        let controller = Controller::for_stream(queue.object_results(events.applied_objects()), classes)
            .watches(
                self.claims(),
                watcher::Config::default(),
                queue.mapped(|claim: NodeClaim| {
                    let r = &claim.spec.node_class_ref;
                    (r.group == GROUP && r.kind == KIND).then(|| ObjectRef::<EC2NodeClass>::new(&r.name))
                }),
            )
            .graceful_shutdown_on(shutdown.clone().cancelled_owned());
        let run = queue.run(
            controller,
            |nc: Arc<EC2NodeClass>, ctx: Arc<Self>| async move {
                Ok::<_, ControllerError>(match ctx.reconcile(&nc.name_any()).await? {
                    Some(d) => Action::requeue(d),
                    None => Action::await_change(),
                })
            },
            |_nc, error: &ControllerError, _ctx| {
                if error.is_conflict() {
                    Action::requeue(Duration::from_millis(100))
                } else {
                    tracing::warn!(error = %error, "EC2NodeClass reconcile failed");
                    Action::requeue(Duration::from_secs(5))
                }
            },
            self,
        );
        tokio::pin!(run);
        tokio::select! {
            _ = &mut run => return,
            _ = shutdown.cancelled() => {}
        }
        // kube-runtime finishes the reconciles in flight; do not wait for it forever.
        if tokio::time::timeout(SHUTDOWN_GRACE, run).await.is_err() {
            tracing::warn!("EC2NodeClass controller did not stop within {SHUTDOWN_GRACE:?}");
        }
    }
}

/// The `ValidationSucceeded=False` reasons that name a problem of the class's own spec, which its owner must
/// fix (each gets a Warning event).
pub const SPEC_PROBLEM_REASONS: [&str; 3] =
    [reasons::INVALID_KUBELET_CONFIGURATION, reasons::INVALID_USER_DATA, reasons::CLUSTER_CIDR_NOT_FOUND];

/// Event reason: a Bottlerocket class's `userData` has `settings.kubernetes` keys that launches leave out.
pub const USER_DATA_SETTINGS_DROPPED: &str = "UserDataSettingsDropped";

/// The reason and message of a `ValidationSucceeded=False` condition for a spec problem.
fn spec_problem(status: Option<&EC2NodeClassStatus>) -> Option<(&str, &str)> {
    status?
        .condition(conditions::VALIDATION_SUCCEEDED)
        .filter(|c| c.status == ConditionStatus::False && SPEC_PROBLEM_REASONS.contains(&c.reason.as_str()))
        .map(|c| (c.reason.as_str(), c.message.as_str()))
}

/// A core/v1 Event on `node_class` (cluster-scoped objects' events go to `default`, as client-go does); a failure
/// to publish is logged at debug level, as events are best effort.
pub(crate) async fn publish_node_class_event(
    client: &Client,
    now: chrono::DateTime<chrono::Utc>,
    node_class: &EC2NodeClass,
    type_: &str,
    reason: &str,
    message: &str,
) {
    let name = node_class.name_any();
    let stamp = now.timestamp_nanos_opt().unwrap_or_default();
    let event = CoreEvent {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{stamp:x}")),
            namespace: Some("default".into()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(EC2NodeClass::api_version(&()).into_owned()),
            kind: Some(KIND.into()),
            name: Some(name.clone()),
            uid: node_class.metadata.uid.clone(),
            resource_version: node_class.metadata.resource_version.clone(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some(type_.into()),
        source: Some(EventSource { component: Some("karpenter".into()), host: None }),
        reporting_component: Some("karpenter".into()),
        count: Some(1),
        first_timestamp: karpenter_api::time::to_k8s(now),
        last_timestamp: karpenter_api::time::to_k8s(now),
        ..Default::default()
    };
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::debug!(error = %e, reason, "event not published");
    }
}

/// Zonal shift events ([`crate::zonalshift::ZonalShiftEvents`]) on every EC2NodeClass: a shift concerns every
/// class whose subnets reach the zone, and an operator looks at the classes' events to see why a zone is not used.
pub struct NodeClassZonalShiftEvents {
    client: Client,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for NodeClassZonalShiftEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClassZonalShiftEvents").finish_non_exhaustive()
    }
}

impl NodeClassZonalShiftEvents {
    /// Events through `client`, stamped by `clock`.
    pub fn new(client: Client, clock: Arc<dyn Clock>) -> Self {
        Self { client, clock }
    }

    async fn publish(&self, type_: &str, reason: &str, message: &str) {
        let classes: Api<EC2NodeClass> = Api::all(self.client.clone());
        match classes.list(&ListParams::default()).await {
            Ok(list) => {
                for class in &list.items {
                    publish_node_class_event(&self.client, self.clock.now(), class, type_, reason, message).await;
                }
            }
            Err(e) => tracing::debug!(error = %e, reason, "listing EC2NodeClasses for a zonal shift event failed"),
        }
    }
}

#[async_trait]
impl crate::zonalshift::ZonalShiftEvents for NodeClassZonalShiftEvents {
    async fn shift_started(&self, zone: &str, shift: &crate::zonalshift::AppliedShift) {
        let id = if shift.id.is_empty() { String::new() } else { format!(" {}", shift.id) };
        let message = format!(
            "{}{id} moved traffic away from {zone} ({}): no NodeClaims launch there and its instances are not terminated until it ends",
            shift.kind, shift.away_from
        );
        self.publish("Warning", crate::zonalshift::EVENT_ACTIVE, &message).await;
    }

    async fn shift_ended(&self, zone: &str) {
        let message = format!("the zonal shift away from {zone} ended: the zone is offered again");
        self.publish("Normal", crate::zonalshift::EVENT_CLEARED, &message).await;
    }
}

/// Sleeps `interval` (tokio time) or returns `false` when `shutdown` fires first.
async fn tick(interval: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => false,
        _ = tokio::time::sleep(interval) => true,
    }
}

/// Drops cached `latest` SSM parameters whose AMI became deprecated (every 30 minutes).
#[derive(Debug)]
pub struct SsmInvalidationController {
    ssm: Arc<SsmProvider>,
    images: Arc<dyn ImageApi>,
    clock: Arc<dyn Clock>,
    interval: Duration,
    reconcile_metrics: Option<ReconcileMetrics>,
}

impl SsmInvalidationController {
    /// Upstream's name of this controller: the `controller` label of its reconcile and workqueue series.
    pub const NAME: &'static str = "providers.ssm.invalidation";

    pub fn new(ssm: Arc<SsmProvider>, images: Arc<dyn ImageApi>, clock: Arc<dyn Clock>) -> Self {
        Self { ssm, images, clock, interval: SSM_INVALIDATION_INTERVAL, reconcile_metrics: None }
    }

    /// Records each pass into `metrics` under [`Self::NAME`], as a singleton controller (one worker).
    pub fn with_metrics(mut self, metrics: &Metrics) -> Self {
        self.reconcile_metrics = Some(metrics.reconciler(Self::NAME, 1));
        self
    }

    /// From the resolver's providers.
    pub fn for_resolver(resolver: &NodeClassResolver, clock: Arc<dyn Clock>) -> Self {
        Self::new(resolver.amis.ssm().clone(), resolver.amis.image_api().clone(), clock)
    }

    /// One pass; the dropped parameter names.
    pub async fn run_once(&self) -> Result<Vec<String>, AwsApiError> {
        self.ssm.invalidate_deprecated(&*self.images, self.clock.now()).await
    }

    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        while tick(self.interval, &shutdown).await {
            match timed_pass(self.reconcile_metrics.as_ref(), self.run_once()).await {
                Ok(dropped) if !dropped.is_empty() => {
                    tracing::info!(?dropped, "invalidated deprecated SSM AMI parameters")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "SSM invalidation failed"),
            }
        }
    }
}

/// Deletes managed instance profiles that no EC2NodeClass or NodeClaim references (not in isolated VPCs).
#[derive(Debug)]
pub struct InstanceProfileGarbageCollector {
    client: KubeClient,
    profiles: Arc<InstanceProfileProvider>,
    interval: Duration,
    reconcile_metrics: Option<ReconcileMetrics>,
}

/// Cadence of instance-profile garbage collection.
pub const INSTANCE_PROFILE_GC_INTERVAL: Duration = Duration::from_secs(30 * 60);

impl InstanceProfileGarbageCollector {
    /// Upstream's name of this controller: the `controller` label of its reconcile and workqueue series.
    pub const NAME: &'static str = "instanceprofile.garbagecollection";

    pub fn new(client: Client, profiles: Arc<InstanceProfileProvider>) -> Self {
        Self { client: KubeClient(client), profiles, interval: INSTANCE_PROFILE_GC_INTERVAL, reconcile_metrics: None }
    }

    /// Records each pass into `metrics` under [`Self::NAME`], as a singleton controller (one worker).
    pub fn with_metrics(mut self, metrics: &Metrics) -> Self {
        self.reconcile_metrics = Some(metrics.reconciler(Self::NAME, 1));
        self
    }

    /// One pass; the deleted profile names. A profile is in use when an EC2NodeClass's status names it or a
    /// NodeClaim's `karpenter.k8s.aws/instance-profile-name` annotation does, as upstream: the instances of a
    /// claim launched with an older profile (before a role change, or by upstream Karpenter before a swap, whose
    /// profiles live under the same path with other names) still run with it, and deleting it (its role first)
    /// would take their credentials away.
    pub async fn run_once(&self) -> Result<Vec<String>, ControllerError> {
        let classes: Api<EC2NodeClass> = Api::all(self.client.0.clone());
        let mut referenced: BTreeSet<String> = classes
            .list(&ListParams::default())
            .await?
            .into_iter()
            .filter_map(|c| c.status.and_then(|s| s.instance_profile))
            .collect();
        let claims: Api<NodeClaim> = Api::all(self.client.0.clone());
        referenced.extend(
            claims
                .list(&ListParams::default())
                .await?
                .into_iter()
                .filter_map(|c| c.metadata.annotations?.remove(annotations::INSTANCE_PROFILE_NAME)),
        );
        Ok(self.profiles.garbage_collect(&referenced).await?)
    }

    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        while tick(self.interval, &shutdown).await {
            match timed_pass(self.reconcile_metrics.as_ref(), self.run_once()).await {
                Ok(deleted) if !deleted.is_empty() => tracing::info!(?deleted, "deleted unused instance profiles"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "instance profile garbage collection failed"),
            }
        }
    }
}

/// Deletes NodeClaims running in a capacity block that the node class's status reports `expiring`.
#[derive(Debug)]
pub struct CapacityBlockExpiration {
    client: KubeClient,
    interval: Duration,
    reconcile_metrics: Option<ReconcileMetrics>,
}

impl CapacityBlockExpiration {
    /// Upstream's name of this controller: the `controller` label of its reconcile and workqueue series.
    pub const NAME: &'static str = "capacityreservation.expiration";

    pub fn new(client: Client) -> Self {
        Self { client: KubeClient(client), interval: Duration::from_secs(60), reconcile_metrics: None }
    }

    /// Records each pass into `metrics` under [`Self::NAME`], as a singleton controller (one worker).
    pub fn with_metrics(mut self, metrics: &Metrics) -> Self {
        self.reconcile_metrics = Some(metrics.reconciler(Self::NAME, 1));
        self
    }

    /// One pass; the deleted NodeClaim names.
    pub async fn run_once(&self) -> Result<Vec<String>, ControllerError> {
        let classes: Api<EC2NodeClass> = Api::all(self.client.0.clone());
        let claims: Api<NodeClaim> = Api::all(self.client.0.clone());
        let expiring: BTreeMap<String, BTreeSet<String>> = classes
            .list(&ListParams::default())
            .await?
            .into_iter()
            .map(|c| {
                let ids = c
                    .status
                    .iter()
                    .flat_map(|s| s.capacity_reservations.iter())
                    .filter(|r| r.state == CapacityReservationState::Expiring)
                    .map(|r| r.id.clone())
                    .collect();
                (c.name_any(), ids)
            })
            .collect();
        let mut deleted = Vec::new();
        for claim in claims.list(&ListParams::default()).await? {
            if claim.metadata.deletion_timestamp.is_some() || claim.spec.node_class_ref.kind != KIND {
                continue;
            }
            let Some(id) = claim.labels().get(aws_labels::CAPACITY_RESERVATION_ID) else { continue };
            if expiring.get(&claim.spec.node_class_ref.name).is_some_and(|ids| ids.contains(id)) {
                match claims.delete(&claim.name_any(), &DeleteParams::default()).await {
                    Ok(_) => deleted.push(claim.name_any()),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(deleted)
    }

    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        while tick(self.interval, &shutdown).await {
            match timed_pass(self.reconcile_metrics.as_ref(), self.run_once()).await {
                Ok(deleted) if !deleted.is_empty() => {
                    tracing::info!(?deleted, "deleted NodeClaims on expiring capacity blocks");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "capacity block expiration failed"),
            }
        }
    }
}

/// Every node class controller, ready to spawn: the status/finalizer/hash controller, SSM invalidation,
/// instance-profile garbage collection (left out in isolated VPCs, as upstream), and with the `ReservedCapacity`
/// gate capacity-block expiration and, given the CloudProvider's `instances`, reserved → on-demand demotion
/// ([`ReservationDemotion`]). Each future returns when `shutdown` is cancelled.
pub fn controllers(
    node_class: Arc<NodeClassController>,
    clock: Arc<dyn Clock>,
    isolated_vpc: bool,
    instances: Option<InstanceProvider>,
    shutdown: CancellationToken,
) -> Vec<BoxFuture<'static, ()>> {
    let resolver = node_class.resolver().clone();
    let client = node_class.client.0.clone();
    let mut out: Vec<BoxFuture<'static, ()>> = vec![
        node_class.run(shutdown.clone()).boxed(),
        Arc::new(SsmInvalidationController::for_resolver(&resolver, clock.clone())).run(shutdown.clone()).boxed(),
    ];
    if !isolated_vpc {
        let gc = InstanceProfileGarbageCollector::new(client.clone(), resolver.instance_profiles.clone());
        out.push(Arc::new(gc).run(shutdown.clone()).boxed());
    }
    if resolver.reserved_capacity() {
        out.push(Arc::new(CapacityBlockExpiration::new(client.clone())).run(shutdown.clone()).boxed());
        if let Some(instances) = instances {
            out.push(Arc::new(ReservationDemotion::new(client, instances, clock)).run(shutdown).boxed());
        }
    }
    out
}
