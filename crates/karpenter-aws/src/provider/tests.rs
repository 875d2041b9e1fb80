use std::collections::BTreeSet;

use karpenter_api::labels::aws::INSTANCE_FAMILY;
use karpenter_api::labels::{NODE_POOL, OS};
use karpenter_api::nodeclaim::conditions::drift as drift_reasons;
use karpenter_cloudprovider::{ErrorKind, InMemoryNodeClasses, OfferingRef};
use karpenter_testing::FakeClock;
use karpenter_testing::conformance::{ConformanceHooks, Fixtures, run};
use karpenter_testing::karpenter::{NodeClaimOptions, NodePoolOptions, node_claim, node_pool};
use karpenter_testing::nodepool_requirement;
use serde_json::json;

use super::*;
use crate::api_error::AwsApiError;
use crate::ec2::InstanceTypeInfo;
use crate::launch::fleet::{CreateFleetRequest, NODE_CLAIM_TAG, TargetCapacityType};
use crate::launch::mock::{MockCall, MockEc2, instance_type_info, ops};
use crate::pricing::{PriceSource, PriceTable};

const ZONES: [&str; 3] = ["us-west-2a", "us-west-2b", "us-west-2c"];

fn class_json(ready: &str) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": 1, "uid": "uid-1"},
        "spec": {
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "role": "KarpenterNodeRole",
            "tags": {"team": "a"}
        },
        "status": {
            "subnets": [{"id": "subnet-a", "zone": "us-west-2a", "zoneID": "usw2-az1"},
                        {"id": "subnet-b", "zone": "us-west-2b", "zoneID": "usw2-az2"}],
            "securityGroups": [{"id": "sg-1"}],
            "amis": [
                {"id": "ami-amd", "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]},
                {"id": "ami-arm", "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}
            ],
            "instanceProfile": "profile-1",
            "conditions": [{"type": "Ready", "status": ready, "observedGeneration": 1,
                            "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Ready", "message": ""}]
        }
    })
}

fn catalogue() -> Vec<InstanceTypeInfo> {
    vec![
        instance_type_info("m5.large", 2, 8),
        instance_type_info("m5.xlarge", 4, 16),
        instance_type_info("c5.large", 2, 4),
        instance_type_info("m6g.large", 2, 8),
    ]
}

fn prices(infos: &[InstanceTypeInfo]) -> PriceTable {
    let mut t = PriceTable::default();
    for (i, info) in infos.iter().enumerate() {
        let od = 0.05 + 0.01 * i as f64;
        t.on_demand.insert(info.instance_type.clone(), od);
        for (z, zone) in ZONES.iter().enumerate() {
            t.spot.entry(info.instance_type.clone()).or_default().insert((*zone).into(), od / 3.0 + 0.001 * z as f64);
        }
    }
    t
}

struct Env {
    ec2: MockEc2,
    classes: InMemoryNodeClasses,
    clock: FakeClock,
    provider: AwsCloudProvider,
}

fn provider_on(
    ec2: &MockEc2,
    classes: &InMemoryNodeClasses,
    clock: &FakeClock,
    cluster: &str,
    prices: PriceTable,
) -> AwsCloudProvider {
    let apis = AwsApis {
        fleet: Arc::new(ec2.clone()),
        launch_templates: Arc::new(ec2.clone()),
        instance_types: Arc::new(ec2.clone()),
    };
    let cluster = ClusterInfo {
        name: cluster.into(),
        endpoint: "https://api.example".into(),
        ca_bundle: Some("Q0E=".into()),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: Some("10.100.0.10".into()),
    };
    AwsCloudProvider::new(
        apis,
        Arc::new(classes.clone()),
        Arc::new(clock.clone()),
        Arc::new(clock.clone()),
        SharedPrices::new(PriceSource::Table(prices)),
        AwsCloudProviderOptions::new(cluster, "us-west-2"),
    )
}

fn env_with(infos: Vec<InstanceTypeInfo>) -> Env {
    let clock = FakeClock::default();
    let ec2 = MockEc2::new(Arc::new(clock.clone()));
    let table = prices(&infos);
    ec2.set_catalogue(infos, &ZONES);
    let classes = InMemoryNodeClasses::new();
    classes.insert_value(GROUP, KIND, "default", class_json("True"));
    let provider = provider_on(&ec2, &classes, &clock, "test-cluster", table);
    Env { ec2, classes, clock, provider }
}

fn env() -> Env {
    env_with(catalogue())
}

fn claim(name: &str, capacity_types: &[&str]) -> NodeClaim {
    node_claim(NodeClaimOptions {
        name: Some(name.into()),
        node_pool: Some("default".into()),
        requirements: vec![
            nodepool_requirement(OS, "In", &["linux"]),
            nodepool_requirement(NODE_POOL, "In", &["default"]),
            nodepool_requirement(CAPACITY_TYPE, "In", capacity_types),
        ],
        requests: [("cpu", "1"), ("memory", "1Gi")].into(),
        node_class_ref: Some(NodeClassReference::new(GROUP, KIND, "default")),
        ..Default::default()
    })
}

fn pool() -> NodePool {
    node_pool(NodePoolOptions {
        name: Some("default".into()),
        requirements: vec![nodepool_requirement(OS, "In", &["linux"])],
        node_class_ref: Some(NodeClassReference::new(GROUP, KIND, "default")),
        ..Default::default()
    })
}

fn label<'a>(c: &'a NodeClaim, k: &str) -> Option<&'a str> {
    c.metadata.labels.as_ref()?.get(k).map(String::as_str)
}

#[derive(Debug)]
struct Hooks(MockEc2);

#[async_trait]
impl ConformanceHooks for Hooks {
    async fn exhaust_capacity(&self, _claim: &NodeClaim) -> Option<Vec<OfferingRef>> {
        let mut out = Vec::new();
        for it in catalogue() {
            for zone in ZONES {
                for ct in ["spot", "on-demand"] {
                    self.0.set_exhausted(ct, &it.instance_type, zone, true);
                    out.push(OfferingRef::new(&it.instance_type, zone, ct));
                }
            }
        }
        Some(out)
    }

    async fn restore_capacity(&self) {
        self.0.clear_exhausted();
    }

    async fn cause_drift(&self, launched: &NodeClaim) -> Option<DriftReason> {
        let id = instance_id(launched.provider_id()?)?;
        self.0
            .update_instance(id, |i| i.image_id = Some("ami-old".into()))
            .then(|| DriftReason::new(drift_reasons::AMI_DRIFT))
    }
}

#[tokio::test(start_paused = true)]
async fn passes_the_conformance_suite() {
    let e = env();
    let other = provider_on(&e.ec2, &e.classes, &e.clock, "another-cluster", prices(&catalogue()));
    let fixtures = Fixtures {
        node_pool: pool(),
        node_claim: claim("conformance", &["spot", "on-demand"]),
        other_cluster: Some(Arc::new(other)),
        hooks: Arc::new(Hooks(e.ec2.clone())),
        sleeper: Arc::new(e.clock.clone()),
        ..Fixtures::kwok()
    };
    let report = run(Arc::new(e.provider.clone()), &fixtures).await;
    assert!(report.passed(), "{report}");
    for check in ["insufficient_capacity", "drift", "repeated_create"] {
        let c = report.check(check).unwrap();
        assert_eq!(c.outcome, karpenter_testing::conformance::Outcome::Passed, "{report}");
    }
    assert!(report.check("repeated_create").unwrap().notes.is_empty(), "create is idempotent: {report}");
}

fn only_fleet(e: &Env) -> CreateFleetRequest {
    let fleets = e.ec2.fleet_requests();
    assert_eq!(fleets.len(), 1, "{fleets:?}");
    fleets.into_iter().next().unwrap()
}

#[tokio::test(start_paused = true)]
async fn fleet_request_shape_for_spot_and_on_demand() {
    let e = env();
    let created = e.provider.create(&claim("spot-claim", &["spot", "on-demand"])).await.unwrap();
    let r = only_fleet(&e);
    assert_eq!(r.target_capacity_type, TargetCapacityType::Spot);
    assert_eq!(r.spot_allocation_strategy.as_deref(), Some("price-capacity-optimized"));
    assert_eq!(r.on_demand_allocation_strategy, None);
    assert_eq!(r.total_target_capacity, 1);
    // One override per (instance type, zone), only zones with a subnet, that zone's subnet, the AMI of the type's
    // architecture, the spot price as priority.
    let mut seen = BTreeSet::new();
    for c in &r.launch_template_configs {
        for o in &c.overrides {
            assert!(seen.insert((o.instance_type.clone(), o.availability_zone.clone())), "duplicate {o:?}");
            let subnet = if o.availability_zone == "us-west-2a" { "subnet-a" } else { "subnet-b" };
            assert_ne!(o.availability_zone, "us-west-2c");
            assert_eq!(o.subnet_id.as_deref(), Some(subnet));
            let ami = if o.instance_type == "m6g.large" { "ami-arm" } else { "ami-amd" };
            assert_eq!(o.image_id.as_deref(), Some(ami));
            let z = ZONES.iter().position(|z| *z == o.availability_zone).unwrap();
            let od = prices(&catalogue()).on_demand[&o.instance_type];
            assert!((o.priority - (od / 3.0 + 0.001 * z as f64)).abs() < 1e-12);
        }
    }
    assert_eq!(seen.len(), 8, "4 types × 2 zones: {seen:?}");
    assert_eq!(r.launch_template_configs.len(), 2, "one launch template per AMI (same pods value)");
    let expected_tags: BTreeMap<String, String> = [
        ("team", "a"),
        ("kubernetes.io/cluster/test-cluster", "owned"),
        ("eks:eks-cluster-name", "test-cluster"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("karpenter.sh/nodepool", "default"),
        (NODE_CLAIM_TAG, "spot-claim"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(r.tags, expected_tags);
    // The cheapest spot offering won; the claim carries its labels, capacity and provider id.
    assert_eq!(label(&created, INSTANCE_TYPE), Some("m5.large"));
    assert_eq!(label(&created, ZONE), Some("us-west-2a"));
    assert_eq!(label(&created, CAPACITY_TYPE), Some("spot"));
    assert_eq!(label(&created, aws_labels::ZONE_ID), Some("usw2-az1"));
    assert_eq!(label(&created, INSTANCE_FAMILY), Some("m5"));
    let status = created.status.clone().unwrap();
    assert!(status.provider_id.as_deref().unwrap().starts_with("aws:///us-west-2a/i-"));
    assert_eq!(status.image_id.as_deref(), Some("ami-amd"));
    assert_eq!(status.capacity.get("cpu").map(|q| q.0.as_str()), Some("2"));
    let annotations = created.metadata.annotations.clone().unwrap();
    assert_eq!(annotations.get(AWS_INSTANCE_PROFILE_NAME).map(String::as_str), Some("profile-1"));
    assert!(annotations.contains_key("karpenter.k8s.aws/ec2nodeclass-hash"));
    // Launch templates: the AMI, groups, profile and user data with the claim's labels and the registration taint.
    let lts = e.ec2.launch_templates();
    assert_eq!(lts.len(), 2);
    for lt in &lts {
        assert!(lt.name.starts_with("karpenter.k8s.aws/"));
        assert_eq!(lt.data.security_group_ids, vec!["sg-1".to_string()]);
        assert_eq!(lt.data.instance_profile.as_deref(), Some("profile-1"));
        assert!(lt.data.user_data.contains("karpenter.sh/unregistered"), "{}", lt.data.user_data);
        assert!(lt.data.user_data.contains("karpenter.sh/capacity-type=spot"));
        assert!(lt.data.user_data.contains("maxPods: 29"));
        assert_eq!(lt.tags.get("karpenter.k8s.aws/cluster").map(String::as_str), Some("test-cluster"));
        assert!(!lt.data.resource_tags.contains_key(NODE_CLAIM_TAG));
    }

    e.ec2.clear_calls();
    let created = e.provider.create(&claim("od-claim", &["on-demand"])).await.unwrap();
    let r = only_fleet(&e);
    assert_eq!(r.target_capacity_type, TargetCapacityType::OnDemand);
    assert_eq!(r.on_demand_allocation_strategy.as_deref(), Some("lowest-price"));
    assert_eq!(r.spot_allocation_strategy, None);
    assert_eq!(label(&created, CAPACITY_TYPE), Some("on-demand"));
    assert_eq!(label(&created, INSTANCE_TYPE), Some("m5.large"));
}

#[tokio::test(start_paused = true)]
async fn truncates_to_sixty_cheapest_types_and_fails_unmet_min_values() {
    let infos: Vec<InstanceTypeInfo> = (1..=70).map(|i| instance_type_info(&format!("x{i}.large"), 2, 8)).collect();
    let e = env_with(infos);
    e.provider.create(&claim("many", &["on-demand"])).await.unwrap();
    let r = only_fleet(&e);
    let types: BTreeSet<String> =
        r.launch_template_configs.iter().flat_map(|c| &c.overrides).map(|o| o.instance_type.clone()).collect();
    assert_eq!(types.len(), 60);
    let expected: BTreeSet<String> = (1..=60).map(|i| format!("x{i}.large")).collect();
    assert_eq!(types, expected, "the 60 cheapest (prices rise with the index)");

    let mut c = claim("min-values", &["on-demand"]);
    let mut req = nodepool_requirement(INSTANCE_FAMILY, "Exists", &[]);
    req.min_values = Some(65);
    c.spec.requirements.push(req);
    let err = e.provider.create(&c).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity, "{err}");
    assert!(err.to_string().contains("minValues"), "{err}");
    req_ok(&e, 50).await;
}

async fn req_ok(e: &Env, min: i32) {
    let mut c = claim(&format!("min-values-{min}"), &["on-demand"]);
    let mut req = nodepool_requirement(INSTANCE_FAMILY, "Exists", &[]);
    req.min_values = Some(min);
    c.spec.requirements.push(req);
    e.provider.create(&c).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn insufficient_capacity_marks_offerings_for_three_minutes() {
    let e = env();
    for it in catalogue() {
        for zone in ZONES {
            e.ec2.set_exhausted("spot", &it.instance_type, zone, true);
        }
    }
    let err = e.provider.create(&claim("ice", &["spot", "on-demand"])).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity, "{err}");
    let named: BTreeSet<OfferingRef> = err.failed_offerings().iter().cloned().collect();
    assert_eq!(named.len(), 8, "{named:?}");
    assert!(named.iter().all(|o| o.capacity_type == "spot"));
    assert_eq!(e.provider.unavailable_offerings().offerings().len(), 8);
    let its = e.provider.instance_types(&pool()).await.unwrap();
    let m5 = its.iter().find(|it| it.name == "m5.large").unwrap();
    for o in &m5.offerings {
        let spot_in_subnet_zone = o.capacity_type() == Some("spot");
        assert_eq!(o.available, !spot_in_subnet_zone, "{o:?}");
    }
    // The retry launches on-demand (spot is marked); after 3 minutes spot is back.
    let created = e.provider.create(&claim("ice-retry", &["spot", "on-demand"])).await.unwrap();
    assert_eq!(label(&created, CAPACITY_TYPE), Some("on-demand"));
    e.clock.step_secs(181);
    assert!(e.provider.unavailable_offerings().offerings().is_empty());
    e.ec2.clear_exhausted();
    let created = e.provider.create(&claim("ice-later", &["spot", "on-demand"])).await.unwrap();
    assert_eq!(label(&created, CAPACITY_TYPE), Some("spot"));
}

#[tokio::test(start_paused = true)]
async fn throttled_create_fleet_is_retried_with_backoff() {
    let e = env();
    for _ in 0..2 {
        e.ec2.fail_next(ops::CREATE_FLEET, AwsApiError::new("CreateFleet", "RequestLimitExceeded", "slow down"));
    }
    let before = e.clock.now();
    e.provider.create(&claim("throttled", &["on-demand"])).await.unwrap();
    assert_eq!(e.ec2.fleet_requests().len(), 3);
    assert_eq!(e.clock.now() - before, chrono::Duration::milliseconds(500 + 1000));
    // A non-throttling API error is a CreateError with the mapped reason, not retried.
    e.ec2.clear_calls();
    e.ec2.fail_next(ops::CREATE_FLEET, AwsApiError::new("CreateFleet", "UnauthorizedOperation", "no"));
    let err = e.provider.create(&claim("denied", &["on-demand"])).await.unwrap_err();
    assert!(matches!(&err, CloudProviderError::Create { reason, .. } if reason == "Unauthorized"), "{err}");
    assert_eq!(e.ec2.fleet_requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn create_after_a_restart_finds_the_tagged_instance() {
    let e = env();
    let c = claim("restart", &["on-demand"]);
    let first = e.provider.create(&c).await.unwrap();
    // A new process: fresh caches, same EC2.
    let restarted = provider_on(&e.ec2, &e.classes, &e.clock, "test-cluster", prices(&catalogue()));
    let second = restarted.create(&c).await.unwrap();
    assert_eq!(first.provider_id(), second.provider_id());
    assert_eq!(label(&second, INSTANCE_TYPE), Some("m5.large"));
    assert_eq!(e.ec2.fleet_requests().len(), 1);
    // Concurrent creates of one claim launch once.
    let c2 = claim("concurrent", &["on-demand"]);
    let (a, b) = tokio::join!(restarted.create(&c2), restarted.create(&c2));
    assert_eq!(a.unwrap().provider_id(), b.unwrap().provider_id());
    assert_eq!(e.ec2.fleet_requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn concurrent_claims_are_merged_into_one_fleet() {
    let e = env();
    let (ca, cb) = (claim("merge-a", &["on-demand"]), claim("merge-b", &["on-demand"]));
    let (a, b) = tokio::join!(e.provider.create(&ca), e.provider.create(&cb));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_ne!(a.provider_id(), b.provider_id());
    let r = only_fleet(&e);
    assert_eq!(r.total_target_capacity, 2);
    for (c, name) in [(&a, "merge-a"), (&b, "merge-b")] {
        let id = instance_id(c.provider_id().unwrap()).unwrap();
        assert_eq!(e.ec2.instance(id).unwrap().tags.get(NODE_CLAIM_TAG).map(String::as_str), Some(name));
    }
}

#[tokio::test(start_paused = true)]
async fn delete_reaches_not_found_and_stays_there() {
    let e = env();
    let c = claim("gone", &["on-demand"]);
    let mut launched = e.provider.create(&c).await.unwrap();
    launched.spec = c.spec.clone();
    e.provider.delete(&launched).await.unwrap();
    assert!(
        e.provider.list().await.unwrap().iter().all(|l| l.provider_id() != launched.provider_id()),
        "terminated instances are not listed"
    );
    assert!(e.provider.delete(&launched).await.unwrap_err().is_not_found());
    assert!(e.provider.delete(&launched).await.unwrap_err().is_not_found());
    assert!(e.provider.get(launched.provider_id().unwrap()).await.unwrap_err().is_not_found());
    assert!(e.provider.delete(&c).await.unwrap_err().is_not_found(), "no providerID");
    let terminates = e.ec2.calls().into_iter().filter(|c| matches!(c, MockCall::TerminateInstances(_))).count();
    assert_eq!(terminates, 1);
}

#[tokio::test(start_paused = true)]
async fn node_class_readiness_decides_the_error() {
    let e = env();
    e.classes.insert_value(GROUP, KIND, "default", class_json("False"));
    let err = e.provider.create(&claim("nr", &["on-demand"])).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NodeClassNotReady);
    e.classes.insert_value(GROUP, KIND, "default", class_json("Unknown"));
    let err = e.provider.create(&claim("nr", &["on-demand"])).await.unwrap_err();
    assert!(matches!(&err, CloudProviderError::Create { reason, .. } if reason == "NodeClassReadinessUnknown"));
    let mut stale = class_json("True");
    stale["metadata"]["generation"] = json!(2);
    e.classes.insert_value(GROUP, KIND, "default", stale);
    let err = e.provider.create(&claim("nr", &["on-demand"])).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NodeClassNotReady);
    e.classes.remove(GROUP, KIND, "default");
    let err = e.provider.create(&claim("nr", &["on-demand"])).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity);
    assert!(e.provider.instance_types(&pool()).await.unwrap().is_empty());
    assert!(e.ec2.fleet_requests().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_launch_template_deleted_behind_the_cache_is_recreated() {
    let e = env();
    e.provider.create(&claim("lt-1", &["on-demand"])).await.unwrap();
    for lt in e.ec2.launch_templates() {
        crate::launch::template::LaunchTemplateApi::delete_launch_template(&e.ec2, &lt.name).await.unwrap();
    }
    e.ec2.clear_calls();
    e.provider.create(&claim("lt-2", &["on-demand"])).await.unwrap();
    let creates = e.ec2.calls().into_iter().filter(|c| matches!(c, MockCall::CreateLaunchTemplate(_))).count();
    assert_eq!(creates, 2, "both templates this launch uses (one per AMI), recreated");
    assert_eq!(e.ec2.fleet_requests().len(), 2, "the first fleet said the template is gone");
    // Unused templates are deleted from EC2 after a minute.
    e.clock.step_secs(61);
    let deleted = e.provider.launch_templates().delete_expired().await;
    assert!(!deleted.is_empty());
    assert!(e.provider.launch_templates().cached().is_empty());
}

#[tokio::test(start_paused = true)]
async fn drift_of_security_groups_and_subnets() {
    let e = env();
    let c = claim("drifty", &["on-demand"]);
    let mut launched = e.provider.create(&c).await.unwrap();
    launched.spec = c.spec.clone();
    assert_eq!(e.provider.is_drifted(&launched).await.unwrap(), None);
    let mut changed = class_json("True");
    changed["status"]["securityGroups"] = json!([{"id": "sg-2"}]);
    e.classes.insert_value(GROUP, KIND, "default", changed);
    assert_eq!(
        e.provider.is_drifted(&launched).await.unwrap(),
        Some(DriftReason::new(drift_reasons::SECURITY_GROUP_DRIFT))
    );
    let mut changed = class_json("True");
    changed["status"]["subnets"] = json!([{"id": "subnet-z", "zone": "us-west-2a"}]);
    e.classes.insert_value(GROUP, KIND, "default", changed);
    assert_eq!(e.provider.is_drifted(&launched).await.unwrap(), Some(DriftReason::new(drift_reasons::SUBNET_DRIFT)));
}

#[tokio::test]
async fn claims_carry_the_class_hash_written_by_the_status_controller() {
    // The status controller hashes the class with the cluster CA bundle; a claim must copy that value, not a
    // recomputation without the CA, or every node would look drifted the moment it launched.
    let e = env();
    let mut class = class_json("True");
    class["metadata"]["annotations"] = json!({
        "karpenter.k8s.aws/ec2nodeclass-hash": "hash-with-ca",
        "karpenter.k8s.aws/ec2nodeclass-hash-version": karpenter_api::hash::EC2_NODE_CLASS_HASH_VERSION,
    });
    e.classes.insert_value(GROUP, KIND, "default", class);
    let c = claim("hashed", &["on-demand"]);
    let mut launched = e.provider.create(&c).await.unwrap();
    let annotations = launched.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get("karpenter.k8s.aws/ec2nodeclass-hash").map(String::as_str), Some("hash-with-ca"));
    launched.spec = c.spec.clone();
    assert_eq!(e.provider.is_drifted(&launched).await.unwrap(), None);
}

#[test]
fn provider_ids() {
    assert_eq!(instance_id("aws:///us-west-2a/i-0123"), Some("i-0123"));
    assert_eq!(instance_id("kwok://x"), None);
    assert_eq!(instance_id("aws:///us-west-2a/"), None);
    assert_eq!(provider_id("us-west-2a", "i-1"), "aws:///us-west-2a/i-1");
}
