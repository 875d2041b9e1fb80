//! The kube-backed controllers against karpenter-testing's in-process API server and the in-memory AWS.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api::EC2NodeClass;
use crate::api::conditions;
use crate::api::hash::EC2_NODE_CLASS_HASH_VERSION;
use crate::labels::{self as aws_labels, annotations, finalizers};
use crate::testing::{EC2NodeClassOptions, ec2_node_class};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use karpenter_api::NodeClaim;
use karpenter_api::condition::{ConditionStatus, Conditions};
use karpenter_cloudprovider::Clock;
use karpenter_testing::apiserver::{ApiServer, create_with_status};
use karpenter_testing::{FakeClock, NodeClaimOptions, default_node_class_ref, node_claim};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::controller::*;
use super::mock::MockAws;
use super::status::NodeClassResolver;
use super::tests::{apis, clock, reservation, settings, world};
use crate::api_error::AwsApiError;

struct Env {
    _server: ApiServer,
    client: Client,
    clock: FakeClock,
    aws: Arc<MockAws>,
    controller: Arc<NodeClassController>,
    cleaned: Arc<Mutex<Vec<String>>>,
}

#[derive(Debug)]
struct RecordingCleanup(Arc<Mutex<Vec<String>>>);

#[async_trait::async_trait]
impl LaunchTemplateCleanup for RecordingCleanup {
    async fn delete_launch_templates(&self, node_class: &EC2NodeClass) -> Result<(), AwsApiError> {
        self.0.lock().unwrap().push(node_class.name_any());
        Ok(())
    }
}

fn env() -> Env {
    let clock = clock();
    let server = ApiServer::builder()
        .clock(Arc::new(clock.clone()))
        .provider(&crate::labels::provider_labels(), &crate::api::node_class_apis())
        .build();
    let client = server.client();
    let aws = world();
    let resolver = Arc::new(NodeClassResolver::new(apis(&aws), settings(), Arc::new(clock.clone())));
    let cleaned = Arc::new(Mutex::new(Vec::new()));
    let controller = Arc::new(
        NodeClassController::new(
            client.clone(),
            resolver,
            Arc::new(StaticKubernetesVersion("1.31".into())),
            Arc::new(clock.clone()),
            Some("CA".into()),
        )
        .with_launch_template_cleanup(Arc::new(RecordingCleanup(cleaned.clone()))),
    );
    Env { _server: server, client, clock, aws, controller, cleaned }
}

impl Env {
    fn classes(&self) -> Api<EC2NodeClass> {
        Api::all(self.client.clone())
    }
    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }
    async fn create_class(&self) -> EC2NodeClass {
        let c = ec2_node_class(EC2NodeClassOptions { role: Some("KarpenterNodeRole".into()), ..Default::default() });
        let mut c = c;
        c.metadata.uid = None;
        self.classes().create(&PostParams::default(), &c).await.unwrap()
    }
    async fn create_claim(&self, name: &str, annotations: &[(&str, &str)]) -> NodeClaim {
        let claim = node_claim(NodeClaimOptions {
            name: Some(name.into()),
            node_class_ref: Some(default_node_class_ref()),
            annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        });
        self.claims().create(&PostParams::default(), &claim).await.unwrap()
    }
}

#[tokio::test]
async fn status_finalizer_and_hash_annotations_are_written() {
    let env = env();
    env.create_class().await;
    let requeue = env.controller.reconcile("default").await.unwrap();
    assert_eq!(requeue, Some(Duration::from_secs(60)));
    let c = env.classes().get("default").await.unwrap();
    assert!(c.finalizers().iter().any(|f| f == finalizers::TERMINATION));
    let a = c.annotations();
    assert_eq!(a.get(annotations::EC2_NODE_CLASS_HASH_VERSION).map(String::as_str), Some(EC2_NODE_CLASS_HASH_VERSION));
    assert_eq!(a.get(annotations::EC2_NODE_CLASS_HASH), Some(&crate::api::hash::ec2_node_class_hash(&c, Some("CA"))));
    let status = c.status.clone().unwrap();
    assert_eq!(status.subnets.len(), 3);
    assert_eq!(status.amis.len(), 5);
    assert!(c.is_ready());
    assert_eq!(status.condition(conditions::READY).unwrap().observed_generation, Some(1));
    // NodeClaims copy the class's annotations (CA included), which is not drift.
    let stamped = claim_hash_annotations(&c);
    assert_eq!(&stamped[annotations::EC2_NODE_CLASS_HASH], &a[annotations::EC2_NODE_CLASS_HASH]);
    let mut claim =
        node_claim(NodeClaimOptions { node_class_ref: Some(default_node_class_ref()), ..Default::default() });
    claim.metadata.annotations = Some(stamped);
    assert!(crate::drift::static_drift(&c, &claim).is_none());
    let unannotated = ec2_node_class(EC2NodeClassOptions::default());
    assert_eq!(claim_hash_annotations(&unannotated), hash_annotations(&unannotated, None));
    // Nothing changed: no write.
    let rv = c.metadata.resource_version.clone();
    env.clock.step_secs(61);
    env.controller.reconcile("default").await.unwrap();
    assert_eq!(env.classes().get("default").await.unwrap().metadata.resource_version, rv);
    // A missing node class is nothing to do.
    assert_eq!(env.controller.reconcile("nope").await.unwrap(), None);
}

#[tokio::test]
async fn claims_with_another_hash_version_are_rewritten() {
    let env = env();
    env.create_class().await;
    env.create_claim(
        "old",
        &[(annotations::EC2_NODE_CLASS_HASH, "123"), (annotations::EC2_NODE_CLASS_HASH_VERSION, "v5")],
    )
    .await;
    env.create_claim(
        "current",
        &[
            (annotations::EC2_NODE_CLASS_HASH, "999"),
            (annotations::EC2_NODE_CLASS_HASH_VERSION, EC2_NODE_CLASS_HASH_VERSION),
        ],
    )
    .await;
    env.controller.reconcile("default").await.unwrap();
    let c = env.classes().get("default").await.unwrap();
    let hash = c.annotations()[annotations::EC2_NODE_CLASS_HASH].clone();
    let old = env.claims().get("old").await.unwrap();
    assert_eq!(old.annotations()[annotations::EC2_NODE_CLASS_HASH], hash);
    assert_eq!(old.annotations()[annotations::EC2_NODE_CLASS_HASH_VERSION], EC2_NODE_CLASS_HASH_VERSION);
    // Same version, different hash: that is drift, left alone.
    let current = env.claims().get("current").await.unwrap();
    assert_eq!(current.annotations()[annotations::EC2_NODE_CLASS_HASH], "999");
    assert!(crate::drift::static_drift(&c, &current).is_some());
    assert!(crate::drift::static_drift(&c, &old).is_none());
}

#[tokio::test]
async fn deletion_waits_for_node_claims_then_cleans_up() {
    let env = env();
    env.create_class().await;
    env.controller.reconcile("default").await.unwrap();
    let profile = env.classes().get("default").await.unwrap().status.unwrap().instance_profile.unwrap();
    assert!(env.aws.with(|w| w.instance_profiles.contains_key(&profile)));
    env.create_claim("default-a", &[]).await;
    env.classes().delete("default", &DeleteParams::default()).await.unwrap();
    assert_eq!(env.controller.reconcile("default").await.unwrap(), Some(Duration::from_secs(30)));
    assert!(env.classes().get_opt("default").await.unwrap().is_some(), "held by the finalizer");
    let events: Api<CoreEvent> = Api::namespaced(env.client.clone(), "default");
    let waiting = |list: Vec<CoreEvent>| {
        list.into_iter().filter(|e| e.reason.as_deref() == Some(WAITING_ON_NODE_CLAIM_TERMINATION)).collect::<Vec<_>>()
    };
    let seen = waiting(events.list(&ListParams::default()).await.unwrap().items);
    assert_eq!(seen.len(), 1);
    assert!(seen[0].message.as_deref().unwrap().contains("default-a"));
    // Not re-published within 10 minutes, again after.
    env.controller.reconcile("default").await.unwrap();
    assert_eq!(waiting(events.list(&ListParams::default()).await.unwrap().items).len(), 1);
    env.clock.step_secs(600);
    env.controller.reconcile("default").await.unwrap();
    assert_eq!(waiting(events.list(&ListParams::default()).await.unwrap().items).len(), 2);
    assert!(env.aws.with(|w| w.instance_profiles.contains_key(&profile)), "nothing deleted while claims remain");
    assert!(env.cleaned.lock().unwrap().is_empty());
    env.claims().delete("default-a", &DeleteParams::default()).await.unwrap();
    assert_eq!(env.controller.reconcile("default").await.unwrap(), None);
    assert!(env.classes().get_opt("default").await.unwrap().is_none(), "finalizer removed");
    assert!(env.aws.with(|w| w.instance_profiles.is_empty()), "managed profile deleted");
    assert_eq!(*env.cleaned.lock().unwrap(), ["default"]);
}

#[tokio::test]
async fn aws_failure_during_cleanup_keeps_the_finalizer() {
    let env = env();
    env.create_class().await;
    env.controller.reconcile("default").await.unwrap();
    env.classes().delete("default", &DeleteParams::default()).await.unwrap();
    env.aws.fail_next("ListInstanceProfiles", AwsApiError::new("ListInstanceProfiles", "ServiceUnavailable", "down"));
    assert!(env.controller.reconcile("default").await.is_err());
    assert!(env.classes().get_opt("default").await.unwrap().is_some());
    env.controller.reconcile("default").await.unwrap();
    assert!(env.classes().get_opt("default").await.unwrap().is_none());
}

#[tokio::test]
async fn run_loop_makes_a_new_class_ready_and_stops_on_shutdown() {
    let env = env();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(env.controller.clone().run(shutdown.clone()));
    env.create_class().await;
    let mut ready = false;
    for _ in 0..200 {
        if env.classes().get("default").await.unwrap().is_ready() {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(ready, "the run loop resolved the node class");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task).await.expect("stops on shutdown").unwrap();
}

// After a swap from upstream Karpenter (or a role change), running instances use a profile no node class names any
// more; their NodeClaims name it, and garbage collection keeps it until they are gone.
#[tokio::test]
async fn instance_profile_gc_keeps_profiles_nodeclaims_were_launched_with() {
    let env = env();
    env.create_class().await;
    env.controller.reconcile("default").await.unwrap();
    let upstreams = "test-cluster_12750338151846425330";
    env.aws.with(|w| {
        w.instance_profiles.insert(
            upstreams.into(),
            super::api::InstanceProfileDescription {
                name: upstreams.into(),
                path: "/karpenter/us-west-2/test-cluster/some-uid/".into(),
                roles: vec!["KarpenterNodeRole".into()],
                ..Default::default()
            },
        )
    });
    let claim = env.create_claim("launched-by-upstream", &[(annotations::INSTANCE_PROFILE_NAME, upstreams)]).await;
    let gc =
        InstanceProfileGarbageCollector::new(env.client.clone(), env.controller.resolver().instance_profiles.clone());
    env.clock.step_secs(3600);
    assert_eq!(gc.run_once().await.unwrap(), Vec::<String>::new());
    assert!(env.aws.with(|w| w.instance_profiles[upstreams].roles == ["KarpenterNodeRole"]), "role left attached");
    env.claims().delete(&claim.name_any(), &Default::default()).await.unwrap();
    assert_eq!(gc.run_once().await.unwrap(), vec![upstreams.to_string()], "collected once the claim is gone");
}

#[tokio::test]
async fn instance_profile_gc_and_capacity_block_expiration() {
    let env = env();
    env.create_class().await;
    env.controller.reconcile("default").await.unwrap();
    let profile = env.classes().get("default").await.unwrap().status.unwrap().instance_profile.unwrap();
    // An orphan under the cluster's path, old enough not to be protected.
    env.aws.with(|w| {
        w.instance_profiles.insert(
            "test-cluster_orphan".into(),
            super::api::InstanceProfileDescription {
                name: "test-cluster_orphan".into(),
                path: "/karpenter/us-west-2/test-cluster/gone-uid/".into(),
                roles: vec!["R".into()],
                ..Default::default()
            },
        )
    });
    let gc =
        InstanceProfileGarbageCollector::new(env.client.clone(), env.controller.resolver().instance_profiles.clone());
    env.clock.step_secs(3600);
    assert_eq!(gc.run_once().await.unwrap(), vec!["test-cluster_orphan".to_string()]);
    assert!(env.aws.with(|w| w.instance_profiles.contains_key(&profile)), "referenced profile kept");

    // Capacity blocks: claims on an expiring reservation are deleted.
    let now = env.clock.now();
    env.aws.with(|w| {
        w.capacity_reservations = vec![
            reservation("cr-block", Some("capacity-block"), Some(now + chrono::Duration::minutes(10))),
            reservation("cr-odcr", None, None),
        ]
    });
    let mut c = env.classes().get("default").await.unwrap();
    c.spec.capacity_reservation_selector_terms = vec![
        crate::api::CapacityReservationSelectorTerm { id: Some("cr-block".into()), ..Default::default() },
        crate::api::CapacityReservationSelectorTerm { id: Some("cr-odcr".into()), ..Default::default() },
    ];
    env.classes().replace("default", &PostParams::default(), &c).await.unwrap();
    env.controller.reconcile("default").await.unwrap();
    let status = env.classes().get("default").await.unwrap().status.unwrap();
    assert_eq!(status.capacity_reservations.len(), 2);
    for (name, cr) in [("on-block", "cr-block"), ("on-odcr", "cr-odcr")] {
        let claim = node_claim(NodeClaimOptions {
            name: Some(name.into()),
            node_class_ref: Some(default_node_class_ref()),
            labels: [(aws_labels::CAPACITY_RESERVATION_ID.to_string(), cr.to_string())].into(),
            ..Default::default()
        });
        create_with_status(&env.claims(), &claim).await.unwrap();
    }
    let expiration = CapacityBlockExpiration::new(env.client.clone());
    assert_eq!(expiration.run_once().await.unwrap(), vec!["on-block".to_string()]);
    assert!(env.claims().get_opt("on-odcr").await.unwrap().is_some());
    assert_eq!(status.condition(conditions::CAPACITY_RESERVATIONS_READY).unwrap().status, ConditionStatus::True);
}

#[tokio::test]
async fn api_server_version_and_controller_set() {
    let env = env();
    let source = ApiServerVersion::new(env.client.clone(), Arc::new(env.clock.clone()));
    let v = source.version().await.unwrap();
    let (major, minor) = v.split_once('.').unwrap();
    assert!(major.parse::<u32>().is_ok() && minor.parse::<u32>().is_ok(), "{v}");
    let shutdown = CancellationToken::new();
    let instances = super::demotion::test_instance_provider(&env.clock);
    let futures =
        controllers(env.controller.clone(), Arc::new(env.clock.clone()), false, Some(instances), shutdown.clone());
    assert_eq!(futures.len(), 5, "status, SSM invalidation, profile GC, capacity-block expiration, demotion");
    let isolated = controllers(env.controller.clone(), Arc::new(env.clock.clone()), true, None, shutdown.clone());
    assert_eq!(isolated.len(), 3, "no profile GC; no demotion without the instance provider");
    drop(isolated);
    shutdown.cancel();
    for (i, f) in futures.into_iter().enumerate() {
        tokio::time::timeout(Duration::from_secs(5), f)
            .await
            .unwrap_or_else(|_| panic!("controller {i} stops on shutdown"));
    }
}

#[tokio::test]
async fn eks_control_plane_takes_the_version_from_describe_cluster() {
    use crate::discovery::ClusterInfo;
    use crate::testing::FakeEks;
    let env = env();
    let clock: Arc<dyn Clock> = Arc::new(env.clock.clone());
    let info = ClusterInfo { version: Some("1.33".into()), ..Default::default() };
    let eks = Arc::new(FakeEks::new().with_cluster("prod", info));
    let source = kubernetes_version_source(true, env.client.clone(), eks.clone(), "prod", clock.clone());
    assert_eq!(source.version().await.unwrap(), "1.33");
    assert_eq!(source.version().await.unwrap(), "1.33");
    assert_eq!(eks.calls(), ["prod"], "cached between calls");
    env.clock.step_secs(301);
    eks.fail_next(AwsApiError::new("DescribeCluster", "AccessDeniedException", "no eks:DescribeCluster"));
    let err = source.version().await.unwrap_err();
    assert!(err.contains("AccessDeniedException"), "{err}");
    // A cluster EKS does not know, or a version that is not <major>.<minor>, is an error naming the cluster.
    let missing = kubernetes_version_source(true, env.client.clone(), eks.clone(), "other", clock.clone());
    assert!(missing.version().await.unwrap_err().contains("other"));
    let odd =
        Arc::new(FakeEks::new().with_cluster("odd", ClusterInfo { version: Some("v1".into()), ..Default::default() }));
    let err =
        kubernetes_version_source(true, env.client.clone(), odd, "odd", clock.clone()).version().await.unwrap_err();
    assert!(err.contains("\"v1\"") && err.contains("odd"), "{err}");
    // Off (the default): the API server's version, EKS never asked.
    let unused = Arc::new(FakeEks::new());
    let api_server = kubernetes_version_source(false, env.client.clone(), unused.clone(), "prod", clock);
    assert_eq!(
        api_server.version().await.unwrap(),
        ApiServerVersion::new(env.client.clone(), Arc::new(env.clock.clone())).version().await.unwrap()
    );
    assert!(unused.calls().is_empty());
}

#[tokio::test]
async fn no_price_source_is_a_warning_event_on_each_class_until_prices_are_known() {
    use crate::pricing::PriceTable;
    use crate::pricing_api::{PRICES_ESTIMATED_REASON, PricingProvider};
    use crate::testing::FakePricing;

    let env = env();
    let api = Arc::new(FakePricing::new());
    let pricing = Arc::new(PricingProvider::new("us-west-2", Some(api.clone()), false, PriceTable::default()));
    let resolver = Arc::new(NodeClassResolver::new(apis(&env.aws), settings(), Arc::new(env.clock.clone())));
    let controller = NodeClassController::new(
        env.client.clone(),
        resolver,
        Arc::new(StaticKubernetesVersion("1.31".into())),
        Arc::new(env.clock.clone()),
        Some("CA".into()),
    )
    .with_price_estimate_warning(pricing.clone());
    env.create_class().await;
    let mut other =
        ec2_node_class(EC2NodeClassOptions { role: Some("KarpenterNodeRole".into()), ..Default::default() });
    other.metadata.name = Some("other".into());
    other.metadata.uid = None;
    env.classes().create(&PostParams::default(), &other).await.unwrap();

    let events: Api<CoreEvent> = Api::namespaced(env.client.clone(), "default");
    let estimated = || async {
        let mut seen: Vec<(String, String)> = events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(PRICES_ESTIMATED_REASON))
            .map(|e| {
                assert_eq!(e.type_.as_deref(), Some("Warning"));
                assert!(e.message.as_deref().unwrap_or_default().contains("PRICE_FILE"), "{:?}", e.message);
                (e.involved_object.name.unwrap_or_default(), e.involved_object.kind.unwrap_or_default())
            })
            .collect();
        seen.sort();
        seen
    };
    // Pricing API failing since start: no price source.
    api.fail_on_demand(AwsApiError::new("GetProducts", "AccessDeniedException", "denied"));
    pricing.refresh(env.clock.now()).await;
    assert!(pricing.uses_estimate());
    controller.reconcile("default").await.unwrap();
    controller.reconcile("other").await.unwrap();
    let one_each = vec![("default".to_string(), "EC2NodeClass".to_string()), ("other".into(), "EC2NodeClass".into())];
    assert_eq!(estimated().await, one_each);
    // Not again within the hour, again after it while it lasts.
    controller.reconcile("default").await.unwrap();
    assert_eq!(estimated().await.len(), 2);
    env.clock.step_secs(3600);
    controller.reconcile("default").await.unwrap();
    assert_eq!(estimated().await.len(), 3);
    // Prices known: no more events.
    api.set_on_demand(vec![crate::pricing_api::OnDemandPrice { instance_type: "m5.large".into(), price: 0.096 }]);
    pricing.refresh(env.clock.now()).await;
    env.clock.step_secs(3600);
    controller.reconcile("default").await.unwrap();
    controller.reconcile("other").await.unwrap();
    assert_eq!(estimated().await.len(), 3);
    // The controller without a pricing provider never publishes it.
    env.controller.reconcile("other").await.unwrap();
    assert_eq!(estimated().await.len(), 3);
}

#[tokio::test]
async fn invalid_kubelet_configuration_is_a_condition_and_one_warning_event_per_problem_set() {
    use crate::api::conditions::reasons::INVALID_KUBELET_CONFIGURATION;
    let env = env();
    let mut c = ec2_node_class(EC2NodeClassOptions { role: Some("KarpenterNodeRole".into()), ..Default::default() });
    c.metadata.uid = None;
    c.spec.kubelet = Some(serde_json::from_value(serde_json::json!({"fooBar": 1, "podsPerCore": "x"})).unwrap());
    env.classes().create(&PostParams::default(), &c).await.unwrap();
    let events: Api<CoreEvent> = Api::namespaced(env.client.clone(), "default");
    let warnings = || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(INVALID_KUBELET_CONFIGURATION))
            .map(|e| (e.type_.unwrap_or_default(), e.message.unwrap_or_default()))
            .collect::<Vec<_>>()
    };
    env.controller.reconcile("default").await.unwrap();
    let stored = env.classes().get("default").await.unwrap();
    let v = stored.status.as_ref().unwrap().condition(conditions::VALIDATION_SUCCEEDED).unwrap().clone();
    let expected = "kubelet.fooBar: unknown field; kubelet.podsPerCore: expected an integer";
    assert_eq!(
        (v.status, v.reason.as_str(), v.message.as_str()),
        (ConditionStatus::False, INVALID_KUBELET_CONFIGURATION, expected)
    );
    assert!(!stored.is_ready());
    assert_eq!(warnings().await, [("Warning".to_owned(), expected.to_owned())]);
    // The same problems again: no second event.
    env.clock.step_secs(61);
    env.controller.reconcile("default").await.unwrap();
    assert_eq!(warnings().await.len(), 1);
    // Fixed: the class becomes ready.
    let mut fixed = env.classes().get("default").await.unwrap();
    fixed.spec.kubelet = Some(serde_json::from_value(serde_json::json!({"serializeImagePulls": false})).unwrap());
    env.classes().replace("default", &PostParams::default(), &fixed).await.unwrap();
    env.controller.reconcile("default").await.unwrap();
    assert!(env.classes().get("default").await.unwrap().is_ready());
    assert_eq!(warnings().await.len(), 1);
}

/// The launch side's provider as the finalizer's cleanup: the class's launch templates go, in EC2 and its cache.
#[tokio::test]
async fn node_class_cleanup_deletes_its_launch_templates() {
    use crate::launch::mock::MockEc2;
    use crate::launch::template::{LaunchTemplateApi, LaunchTemplateProvider};

    let clock: Arc<dyn karpenter_cloudprovider::Clock> = Arc::new(karpenter_cloudprovider::SystemClock);
    let ec2 = MockEc2::new(clock.clone());
    let provider = LaunchTemplateProvider::new(Arc::new(ec2.clone()), clock, "test-cluster");
    let node_class: EC2NodeClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "role": "r"
        }
    }))
    .unwrap();
    let tags = crate::launch::template::launch_template_tags("test-cluster", &node_class, "default");
    let data = crate::launch::template::LaunchTemplateData {
        image_id: "ami-1".into(),
        instance_profile: None,
        security_group_ids: vec!["sg-1".into()],
        user_data: String::new(),
        block_device_mappings: vec![],
        metadata_options: crate::launch::template::LtMetadataOptions {
            http_endpoint: "enabled".into(),
            http_protocol_ipv6: Some("disabled".into()),
            http_put_response_hop_limit: 1,
            http_tokens: "required".into(),
            instance_metadata_tags: "disabled".into(),
        },
        network_interfaces: vec![],
        detailed_monitoring: false,
        ..Default::default()
    };
    let template = crate::launch::template::LaunchTemplate::new(data, tags);
    provider.ensure(&template).await.unwrap();
    assert!(ec2.describe_launch_template(&template.name).await.unwrap().is_some());
    provider.delete_launch_templates(&node_class).await.unwrap();
    assert!(ec2.describe_launch_template(&template.name).await.unwrap().is_none());
    assert!(provider.cached().is_empty());
}
