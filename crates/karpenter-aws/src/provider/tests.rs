use std::collections::BTreeSet;

use crate::drift::reasons as drift_reasons;
use crate::labels::INSTANCE_FAMILY;
use karpenter_api::labels::{NODE_POOL, OS};
use karpenter_cloudprovider::{ErrorKind, InMemoryNodeClasses, OfferingRef};
use karpenter_testing::FakeClock;
use karpenter_testing::conformance::{ConformanceHooks, Fixtures, run};
use karpenter_testing::karpenter::{NodeClaimOptions, NodePoolOptions, node_claim, node_pool};
use karpenter_testing::nodepool_requirement;
use serde_json::json;

use super::*;
use crate::api_error::{AwsApiError, AwsErrorKind};
use crate::ec2::InstanceTypeInfo;
use crate::launch::fleet::{CreateFleetRequest, NODE_CLAIM_TAG, TargetCapacityType};
use crate::launch::mock::{MockCall, MockEc2, instance_type_info, ops};
use crate::pricing::{PriceSource, PriceTable};

const ZONES: [&str; 3] = ["us-west-2a", "us-west-2b", "us-west-2c"];

/// A ready-or-not EC2NodeClass with resolved status (two zones, amd64 and arm64 AMIs), shared with other tests.
pub(crate) fn class_json(ready: &str) -> serde_json::Value {
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
    provider_gated(ec2, classes, clock, cluster, prices, true)
}

/// [`provider_on`] with the `ReservedCapacity` gate `reserved_capacity`.
fn provider_gated(
    ec2: &MockEc2,
    classes: &InMemoryNodeClasses,
    clock: &FakeClock,
    cluster: &str,
    prices: PriceTable,
    reserved_capacity: bool,
) -> AwsCloudProvider {
    provider_with(ec2, classes, clock, cluster, prices, |o| o.reserved_capacity = reserved_capacity)
}

/// [`provider_on`] with its options changed by `options`.
fn provider_with(
    ec2: &MockEc2,
    classes: &InMemoryNodeClasses,
    clock: &FakeClock,
    cluster: &str,
    prices: PriceTable,
    options: impl FnOnce(&mut AwsCloudProviderOptions),
) -> AwsCloudProvider {
    let apis = ec2.apis();
    let cluster = ClusterInfo {
        name: cluster.into(),
        endpoint: "https://api.example".into(),
        ca_bundle: Some("Q0E=".into()),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: Some("10.100.0.10".into()),
    };
    let mut o = AwsCloudProviderOptions::new(cluster, "us-west-2");
    options(&mut o);
    AwsCloudProvider::new(
        apis,
        Arc::new(classes.clone()),
        Arc::new(clock.clone()),
        Arc::new(clock.clone()),
        SharedPrices::new(PriceSource::Table(prices)),
        o,
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
        ..Fixtures::new(pool().spec.template.spec.node_class_ref)
    };
    let report = run(Arc::new(e.provider.clone()), &fixtures).await;
    assert!(report.passed(), "{report}");
    for check in ["insufficient_capacity", "drift", "repeated_create"] {
        let c = report.check(check).unwrap();
        assert_eq!(c.outcome, karpenter_testing::conformance::Outcome::Passed, "{report}");
    }
    assert!(report.check("repeated_create").unwrap().notes.is_empty(), "create is idempotent: {report}");
    // Without RebootForRepair the reboot rule holds through NotImplemented.
    let reboot = report.check("reboot").unwrap();
    assert!(reboot.notes.iter().any(|n| n.contains("NotImplemented")), "{report}");
    assert_eq!(report.check("repair_policies").unwrap().notes, ["7 repair policies"], "{report}");
}

#[tokio::test(start_paused = true)]
async fn passes_the_conformance_suite_with_reboot_for_repair() {
    let e = env();
    let provider = rebooting(&e, "test-cluster");
    let fixtures = Fixtures {
        node_pool: pool(),
        node_claim: claim("conformance", &["spot", "on-demand"]),
        other_cluster: Some(Arc::new(rebooting(&e, "another-cluster"))),
        hooks: Arc::new(Hooks(e.ec2.clone())),
        sleeper: Arc::new(e.clock.clone()),
        ..Fixtures::new(pool().spec.template.spec.node_class_ref)
    };
    let report = run(Arc::new(provider), &fixtures).await;
    assert!(report.passed(), "{report}");
    let reboot = report.check("reboot").unwrap();
    assert_eq!(reboot.outcome, karpenter_testing::conformance::Outcome::Passed, "{report}");
    assert!(reboot.notes.is_empty(), "rebooted through RebootInstances: {report}");
    assert_eq!(reboot_calls(&e).len(), 1, "{report}");
    assert_eq!(report.check("repair_policies").unwrap().notes, ["8 repair policies"], "{report}");
}

/// A running instance as DescribeInstances reports it.
fn described(spot: bool, reservation: Option<&str>, preference: Option<&str>) -> Ec2Instance {
    Ec2Instance {
        instance_id: "i-0123456789abcdef0".into(),
        instance_type: "m5.large".into(),
        availability_zone: "us-west-2a".into(),
        availability_zone_id: Some("usw2-az1".into()),
        subnet_id: Some("subnet-a".into()),
        image_id: Some("ami-amd".into()),
        state: InstanceState::Running,
        spot_instance_request_id: spot.then(|| "sir-1".to_owned()),
        capacity_reservation_id: reservation.map(str::to_owned),
        capacity_reservation_preference: preference.map(str::to_owned),
        security_group_ids: vec!["sg-1".into()],
        placement_group_id: None,
        launch_time: None,
        tags: BTreeMap::new(),
    }
}

#[test]
fn capacity_type_of_needs_the_gate_a_reservation_and_preference_reservations_only() {
    let only = Some("capacity-reservations-only");
    // (spot request, reservation id, preference, gate) -> capacity type
    let table = [
        ((true, None, Some("none"), true), "spot"),
        ((true, Some("cr-1"), only, true), "spot"),
        ((true, None, Some("none"), false), "spot"),
        ((false, Some("cr-1"), only, true), "reserved"),
        ((false, Some("cr-1"), only, false), "on-demand"),
        // In an open reservation EC2 chose (preference `open`): on-demand capacity, not reserved.
        ((false, Some("cr-1"), Some("open"), true), "on-demand"),
        ((false, Some("cr-1"), Some("none"), true), "on-demand"),
        ((false, Some("cr-1"), None, true), "on-demand"),
        // The reservation ended: EC2 reports no id any more.
        ((false, None, only, true), "on-demand"),
        ((false, None, Some("none"), true), "on-demand"),
        ((false, None, None, false), "on-demand"),
    ];
    for ((spot, reservation, preference, gate), want) in table {
        let i = described(spot, reservation, preference);
        assert_eq!(capacity_type_of(&i, gate), want, "{spot} {reservation:?} {preference:?} gate {gate}");
    }
}

#[tokio::test(start_paused = true)]
async fn with_the_reserved_capacity_gate_off_templates_keep_ec2s_default_preference() {
    let e = env();
    let off = provider_gated(&e.ec2, &e.classes, &e.clock, "test-cluster", prices(&catalogue()), false);
    let od = off.create(&claim("od", &["on-demand"])).await.unwrap();
    let sp = off.create(&claim("sp", &["spot"])).await.unwrap();
    let templates = e.ec2.launch_templates();
    assert!(!templates.is_empty());
    for t in &templates {
        assert_eq!(t.data.capacity_reservation_preference, None, "{}", t.name);
        assert_eq!(t.data.capacity_reservation_id, None, "{}", t.name);
    }
    let id = |c: &NodeClaim| instance_id(c.provider_id().unwrap()).unwrap().to_owned();
    for c in [&od, &sp] {
        let i = e.ec2.instance(&id(c)).unwrap();
        assert_eq!(i.capacity_reservation_preference.as_deref(), Some("open"), "EC2's default");
    }
    // An instance EC2 reports in a reservation with preference capacity-reservations-only: reserved only
    // under the gate.
    e.ec2.update_instance(&id(&od), |i| {
        i.capacity_reservation_id = Some("cr-1".into());
        i.capacity_reservation_preference = Some("capacity-reservations-only".into());
    });
    let pid = od.provider_id().unwrap();
    assert_eq!(label(&off.get(pid).await.unwrap(), CAPACITY_TYPE), Some("on-demand"));
    assert_eq!(label(&e.provider.get(pid).await.unwrap(), CAPACITY_TYPE), Some("reserved"));
    // The gate-on provider makes other templates for the same claims (preference `none`).
    e.provider.create(&claim("od2", &["on-demand"])).await.unwrap();
    let gated: Vec<_> = e.ec2.launch_templates().into_iter().filter(|t| !templates.contains(t)).collect();
    assert!(!gated.is_empty(), "new names for the gate-on templates");
    for t in &gated {
        assert_eq!(t.data.capacity_reservation_preference, Some(CapacityReservationPreference::None));
    }
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
    assert_eq!(annotations.get(INSTANCE_PROFILE_NAME).map(String::as_str), Some("profile-1"));
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
        "karpenter.k8s.aws/ec2nodeclass-hash-version": crate::api::hash::EC2_NODE_CLASS_HASH_VERSION,
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

// Placement groups, capacity-reservation counts, launch-failure counts.

mod placement_and_reservations {
    use crate::labels::{CAPACITY_RESERVATION_ID, PLACEMENT_GROUP_ID, PLACEMENT_GROUP_PARTITION, ZONE_ID};
    use karpenter_api::labels::{INSTANCE_TYPE, ZONE};

    use super::*;
    use crate::launch::fleet::{CreateFleetResponse, DescribeInstancesRequest, FleetError, TerminatingInstance};
    use crate::launch::ice::PlacementScope;
    use crate::launch::instance::LaunchFailure;
    use crate::nodeclass::api::{CapacityReservationDescription, PlacementGroupDescription};
    use crate::nodeclass::mock::MockAws;
    use crate::nodeclass::reservation::{CapacityReservationProvider, PlacementGroupProvider};
    use crate::queue::{InstanceClaim, InterruptionHook};

    fn group(id: &str, name: &str, strategy: &str, partitions: Option<i32>) -> PlacementGroupDescription {
        PlacementGroupDescription {
            group_id: id.into(),
            group_name: name.into(),
            strategy: strategy.into(),
            partition_count: partitions,
            spread_level: (strategy == "spread").then(|| "rack".into()),
            state: "available".into(),
        }
    }

    /// The default class with `placementGroupSelector: {name: ml}`.
    fn pg_class() -> serde_json::Value {
        let mut c = class_json("True");
        c["spec"]["placementGroupSelector"] = json!({"name": "ml"});
        c
    }

    struct PgEnv {
        e: Env,
        aws: Arc<MockAws>,
    }

    fn pg_env(groups: Vec<PlacementGroupDescription>, fleet: Option<Arc<dyn FleetApi>>) -> PgEnv {
        let mut e = env();
        e.classes.insert_value(GROUP, KIND, "default", pg_class());
        let aws = Arc::new(MockAws::new());
        aws.with(|w| w.placement_groups = groups);
        let groups = Arc::new(PlacementGroupProvider::new(aws.clone(), Arc::new(e.clock.clone())));
        let mut provider = provider_on(&e.ec2, &e.classes, &e.clock, "test-cluster", prices(&catalogue()));
        if let Some(fleet) = fleet {
            let apis =
                AwsApis { fleet, launch_templates: Arc::new(e.ec2.clone()), instance_types: Arc::new(e.ec2.clone()) };
            let cluster = provider.instance_provider().cluster().clone();
            provider = AwsCloudProvider::new(
                apis,
                Arc::new(e.classes.clone()),
                Arc::new(e.clock.clone()),
                Arc::new(e.clock.clone()),
                SharedPrices::new(PriceSource::Table(prices(&catalogue()))),
                AwsCloudProviderOptions::new(cluster, "us-west-2"),
            );
        }
        e.provider = provider.with_placement_groups(groups);
        PgEnv { e, aws }
    }

    fn with_requirement(mut c: NodeClaim, key: &str, values: &[&str]) -> NodeClaim {
        c.spec.requirements.push(nodepool_requirement(key, "In", values));
        c
    }

    fn placements(e: &Env) -> Vec<(Option<String>, Option<i32>)> {
        let mut v: Vec<_> = e
            .ec2
            .launch_templates()
            .into_iter()
            .filter_map(|lt| lt.data.placement.map(|p| (p.group_id, p.partition_number)))
            .collect();
        v.sort();
        v.dedup();
        v
    }

    #[tokio::test(start_paused = true)]
    async fn partition_group_requirements_launch_template_and_labels() {
        let p = pg_env(vec![group("pg-1", "ml", "partition", Some(3))], None);
        let e = &p.e;
        let its = e.provider.instance_types(&pool()).await.unwrap();
        assert!(!its.is_empty());
        for it in its.iter() {
            assert!(it.requirements.get(PLACEMENT_GROUP_ID).has("pg-1"), "{}", it.name);
            assert!(!it.requirements.get(PLACEMENT_GROUP_ID).has("pg-2"));
            for o in &it.offerings {
                let id = o.requirements.get(PLACEMENT_GROUP_ID);
                assert_eq!(id.values().len(), 1, "{o:?}");
                assert!(id.has("pg-1"));
                let partitions = o.requirements.get(PLACEMENT_GROUP_PARTITION);
                assert_eq!(partitions.values().len(), 3, "{o:?}");
                assert!(["1", "2", "3"].iter().all(|v| partitions.has(v)));
            }
        }
        let created = e.provider.create(&claim("pg-a", &["on-demand"])).await.unwrap();
        assert_eq!(placements(e), vec![(Some("pg-1".into()), Some(1))], "lowest partition");
        assert_eq!(label(&created, PLACEMENT_GROUP_ID), Some("pg-1"));
        assert_eq!(label(&created, PLACEMENT_GROUP_PARTITION), Some("1"));
        // A claim that only allows partitions 2 and 3 gets 2.
        let c = with_requirement(claim("pg-b", &["on-demand"]), PLACEMENT_GROUP_PARTITION, &["3", "2"]);
        let created = e.provider.create(&c).await.unwrap();
        assert_eq!(label(&created, PLACEMENT_GROUP_PARTITION), Some("2"));
        assert!(placements(e).contains(&(Some("pg-1".into()), Some(2))));
        // A claim for another group cannot launch here.
        let c = with_requirement(claim("pg-c", &["on-demand"]), PLACEMENT_GROUP_ID, &["pg-9"]);
        let err = e.provider.create(&c).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InsufficientCapacity, "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn cluster_group_has_no_partition() {
        let p = pg_env(vec![group("pg-c", "ml", "cluster", None)], None);
        let e = &p.e;
        let its = e.provider.instance_types(&pool()).await.unwrap();
        assert!(its.iter().flat_map(|it| &it.offerings).all(|o| !o.requirements.has(PLACEMENT_GROUP_PARTITION)));
        let created = e.provider.create(&claim("pg-c", &["on-demand"])).await.unwrap();
        assert_eq!(placements(e), vec![(Some("pg-c".into()), None)]);
        assert_eq!(label(&created, PLACEMENT_GROUP_ID), Some("pg-c"));
        assert_eq!(label(&created, PLACEMENT_GROUP_PARTITION), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_selector_that_resolves_to_nothing_blocks_launches() {
        let p = pg_env(vec![group("pg-1", "other", "cluster", None)], None);
        let e = &p.e;
        let err = e.provider.create(&claim("no-pg", &["on-demand"])).await.unwrap_err();
        match &err {
            CloudProviderError::Create { reason, .. } => assert_eq!(reason, "PlacementGroupNotFound"),
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("name ml"), "{err}");
        assert!(e.ec2.fleet_requests().is_empty());
        assert!(e.provider.instance_types(&pool()).await.unwrap().is_empty());
        // Once the group exists (after the resolver's one-minute cache), launches go into it.
        p.aws.with(|w| w.placement_groups.push(group("pg-2", "ml", "cluster", None)));
        e.clock.step_secs(61);
        let created = e.provider.create(&claim("pg-later", &["on-demand"])).await.unwrap();
        assert_eq!(label(&created, PLACEMENT_GROUP_ID), Some("pg-2"));
    }

    #[tokio::test(start_paused = true)]
    async fn changing_the_selected_group_drifts_claims_launched_before() {
        let p = pg_env(vec![group("pg-1", "ml", "cluster", None)], None);
        let e = &p.e;
        let c = claim("pg-drift", &["on-demand"]);
        let mut launched = e.provider.create(&c).await.unwrap();
        launched.spec = c.spec.clone();
        let before = e.provider.instance_types(&pool()).await.unwrap();
        assert_eq!(e.provider.is_drifted(&launched).await.unwrap(), None);
        let after = e.provider.instance_types(&pool()).await.unwrap();
        assert!(Arc::ptr_eq(&before, &after), "drift checks do not evict the group's cached list");
        // The group is replaced by another one of the same name.
        p.aws.with(|w| w.placement_groups = vec![group("pg-2", "ml", "cluster", None)]);
        e.clock.step_secs(61);
        assert_eq!(
            e.provider.is_drifted(&launched).await.unwrap(),
            Some(DriftReason::new(drift_reasons::PLACEMENT_GROUP_DRIFT))
        );
        // A selector that resolves to nothing (or fails) gives no placement-group answer.
        p.aws.with(|w| w.placement_groups.clear());
        e.clock.step_secs(61);
        assert_eq!(e.provider.is_drifted(&launched).await.unwrap(), None);
        // The selector removed from the class: a claim in a group drifts (the static hash, checked first, is
        // taken out of the picture).
        e.classes.insert_value(GROUP, KIND, "default", class_json("True"));
        assert_eq!(
            e.provider.is_drifted(&launched).await.unwrap(),
            Some(DriftReason::new(drift_reasons::NODE_CLASS_DRIFT))
        );
        launched.metadata.annotations = None;
        assert_eq!(
            e.provider.is_drifted(&launched).await.unwrap(),
            Some(DriftReason::new(drift_reasons::PLACEMENT_GROUP_DRIFT))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn capacity_errors_in_a_partition_mark_the_offering_in_that_partition_only() {
        let p = pg_env(vec![group("pg-1", "ml", "partition", Some(2))], None);
        let e = &p.e;
        e.ec2.set_exhausted("on-demand", "m5.large", "us-west-2a", true);
        let narrow = |name: &str| {
            let c = with_requirement(claim(name, &["on-demand"]), INSTANCE_TYPE, &["m5.large"]);
            with_requirement(c, ZONE, &["us-west-2a"])
        };
        let err = e.provider.create(&narrow("p1")).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InsufficientCapacity, "{err}");
        let o = OfferingRef::new("m5.large", "us-west-2a", "on-demand");
        let ice = e.provider.unavailable_offerings();
        assert!(ice.is_unavailable_in_group(&o, &PlacementScope::new("pg-1", Some(1))));
        assert!(!ice.is_unavailable_in_group(&o, &PlacementScope::new("pg-1", Some(2))));
        assert!(!ice.is_unavailable(&o), "not marked outside the group");
        let its = e.provider.instance_types(&pool()).await.unwrap();
        let m5 = its.iter().find(|it| it.name == "m5.large").unwrap();
        let od_a = m5
            .offerings
            .iter()
            .find(|x| x.zone() == Some("us-west-2a") && x.capacity_type() == Some("on-demand"))
            .unwrap();
        assert!(od_a.available);
        let partitions = od_a.requirements.get(PLACEMENT_GROUP_PARTITION);
        assert!(partitions.has("2") && !partitions.has("1"), "{od_a:?}");
        // The next launch goes to partition 2; when that fails too the offering is gone from the group.
        e.provider.create(&narrow("p2")).await.unwrap_err();
        assert!(placements(e).contains(&(Some("pg-1".into()), Some(2))), "{:?}", placements(e));
        let its = e.provider.instance_types(&pool()).await.unwrap();
        let m5 = its.iter().find(|it| it.name == "m5.large").unwrap();
        assert!(
            m5.offerings
                .iter()
                .filter(|x| x.zone() == Some("us-west-2a") && x.capacity_type() == Some("on-demand"))
                .all(|x| !x.available)
        );
        // Failures are counted per zone (with its id), capacity type and reason.
        let failures = e.provider.instance_provider().launch_failures();
        let key = LaunchFailure {
            zone: "us-west-2a".into(),
            zone_id: "usw2-az1".into(),
            capacity_type: "on-demand".into(),
            reason: "InsufficientInstanceCapacity".into(),
        };
        assert_eq!(failures.get(&key), Some(&2), "{failures:?}");
    }

    /// A fleet that refuses every override in us-west-2a: the spread group is full there.
    #[derive(Debug)]
    struct SpreadFull(MockEc2);

    #[async_trait]
    impl FleetApi for SpreadFull {
        async fn create_fleet(&self, request: &CreateFleetRequest) -> Result<CreateFleetResponse, AwsApiError> {
            let mut r = CreateFleetResponse::default();
            for c in &request.launch_template_configs {
                for o in c.overrides.iter().filter(|o| o.availability_zone == "us-west-2a") {
                    r.errors.push(FleetError {
                        error_code: "InvalidParameterCombination".into(),
                        error_message: "You have reached the limit of instances in this spread placement group.".into(),
                        instance_type: Some(o.instance_type.clone()),
                        availability_zone: Some(o.availability_zone.clone()),
                        subnet_id: o.subnet_id.clone(),
                    });
                }
            }
            Ok(r)
        }
        async fn describe_instances(
            &self,
            request: &DescribeInstancesRequest,
        ) -> Result<Vec<Ec2Instance>, AwsApiError> {
            self.0.describe_instances(request).await
        }
        async fn terminate_instances(&self, ids: &[String]) -> Result<Vec<TerminatingInstance>, AwsApiError> {
            self.0.terminate_instances(ids).await
        }
        async fn reboot_instances(&self, ids: &[String]) -> Result<(), AwsApiError> {
            self.0.reboot_instances(ids).await
        }
        async fn create_tags(&self, ids: &[String], tags: &BTreeMap<String, String>) -> Result<(), AwsApiError> {
            self.0.create_tags(ids, tags).await
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_spread_group_marks_every_type_of_the_zone() {
        let clock = FakeClock::default();
        let fleet = Arc::new(SpreadFull(MockEc2::new(Arc::new(clock))));
        let p = pg_env(vec![group("pg-s", "ml", "spread", None)], Some(fleet));
        let metrics = crate::testing::registry();
        let provider = p.e.provider.clone().with_metrics(metrics.clone());
        let c = with_requirement(claim("s1", &["on-demand"]), INSTANCE_TYPE, &["m5.large"]);
        let c = with_requirement(c, ZONE, &["us-west-2a"]);
        let err = provider.create(&c).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InsufficientCapacity, "the limit is a capacity error: {err}");
        let its = provider.instance_types(&pool()).await.unwrap();
        for it in its.iter() {
            for o in &it.offerings {
                if o.zone() == Some("us-west-2a") {
                    assert!(!o.available, "{} {o:?}", it.name);
                } else if o.zone() == Some("us-west-2b") {
                    assert!(o.available, "{} {o:?}", it.name);
                }
            }
        }
        let ice = provider.unavailable_offerings();
        let other = OfferingRef::new("c5.large", "us-west-2a", "spot");
        assert!(ice.is_unavailable_in_group(&other, &PlacementScope::new("pg-s", None)));
        assert!(!ice.is_unavailable(&other), "only within the group");
        let exposition = metrics.render();
        let seen: Vec<&str> = exposition
            .lines()
            .filter(|l| l.starts_with("karpenter_cloudprovider_instance_launch_failures_total{"))
            .collect();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(seen[0].contains("reason=\"InvalidParameterCombination\""), "{}", seen[0]);
        assert!(seen[0].contains("zone_id=\"usw2-az1\"") && seen[0].ends_with(" 1"), "{}", seen[0]);
    }

    // Capacity reservations.

    fn reserved_class() -> serde_json::Value {
        let mut c = class_json("True");
        c["spec"]["capacityReservationSelectorTerms"] = json!([{"id": "cr-1"}]);
        c["status"]["capacityReservations"] = json!([{
            "id": "cr-1", "availabilityZone": "us-west-2a", "instanceType": "m5.large",
            "ownerID": "123456789012", "instanceMatchCriteria": "targeted", "reservationType": "default",
            "state": "active"
        }]);
        c
    }

    fn reservation(available: i64) -> CapacityReservationDescription {
        CapacityReservationDescription {
            capacity_reservation_id: "cr-1".into(),
            availability_zone: "us-west-2a".into(),
            instance_type: "m5.large".into(),
            owner_id: "123456789012".into(),
            instance_match_criteria: "targeted".into(),
            reservation_type: Some("default".into()),
            state: "active".into(),
            total_instance_count: 4,
            available_instance_count: available,
            ..Default::default()
        }
    }

    struct CrEnv {
        e: Env,
        tracker: Arc<CapacityReservationProvider>,
    }

    async fn cr_env(available: i64) -> CrEnv {
        let mut e = env();
        e.classes.insert_value(GROUP, KIND, "default", reserved_class());
        let aws = Arc::new(MockAws::new());
        aws.with(|w| w.capacity_reservations = vec![reservation(available)]);
        let tracker = Arc::new(CapacityReservationProvider::new(aws, Arc::new(e.clock.clone())));
        let class: EC2NodeClass = serde_json::from_value(reserved_class()).unwrap();
        // The status controller's describe seeds the counts.
        tracker.list(&class.spec.capacity_reservation_selector_terms).await.unwrap();
        e.provider = e.provider.clone().with_capacity_reservations(tracker.clone());
        CrEnv { e, tracker }
    }

    async fn reserved_offering(e: &Env) -> karpenter_requirements::Offering {
        let its = e.provider.instance_types(&pool()).await.unwrap();
        let m5 = its.iter().find(|it| it.name == "m5.large").unwrap();
        m5.offerings.iter().find(|o| o.capacity_type() == Some("reserved")).unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn reserved_offerings_follow_the_tracked_count() {
        let CrEnv { e, tracker } = cr_env(2).await;
        let o = reserved_offering(&e).await;
        assert!(o.available);
        assert_eq!(o.reservation_capacity, 2);
        let first = e.provider.create(&claim("r1", &["reserved", "on-demand"])).await.unwrap();
        assert_eq!(label(&first, CAPACITY_TYPE), Some("reserved"));
        assert_eq!(label(&first, CAPACITY_RESERVATION_ID), Some("cr-1"));
        assert_eq!(label(&first, ZONE_ID), Some("usw2-az1"));
        assert_eq!(tracker.available_count("cr-1"), Some(1), "a reserved launch takes one");
        assert_eq!(reserved_offering(&e).await.reservation_capacity, 1);
        e.provider.create(&claim("r2", &["reserved", "on-demand"])).await.unwrap();
        assert_eq!(tracker.available_count("cr-1"), Some(0));
        let o = reserved_offering(&e).await;
        assert!(!o.available, "no room left: {o:?}");
        assert_eq!(o.reservation_capacity, 0);
        let third = e.provider.create(&claim("r3", &["reserved", "on-demand"])).await.unwrap();
        assert_eq!(label(&third, CAPACITY_TYPE), Some("on-demand"), "falls back once the reservation is full");
        // A reserved instance found gone gives its slot back.
        let mut gone = first.clone();
        gone.spec = claim("r1", &["reserved", "on-demand"]).spec;
        e.provider.delete(&gone).await.unwrap();
        assert!(e.provider.delete(&gone).await.unwrap_err().is_not_found());
        assert_eq!(tracker.available_count("cr-1"), Some(1));
        assert!(reserved_offering(&e).await.available);
    }

    #[tokio::test(start_paused = true)]
    async fn launches_set_the_reservation_preference_and_described_instances_follow_it() {
        let CrEnv { e, .. } = cr_env(2).await;
        let reserved = e.provider.create(&claim("r1", &["reserved"])).await.unwrap();
        let od = e.provider.create(&claim("od", &["on-demand"])).await.unwrap();
        let spot = e.provider.create(&claim("sp", &["spot"])).await.unwrap();
        assert_eq!(label(&reserved, CAPACITY_TYPE), Some("reserved"));
        assert_eq!(label(&od, CAPACITY_TYPE), Some("on-demand"));
        assert_eq!(label(&spot, CAPACITY_TYPE), Some("spot"));
        // The templates: reserved targets cr-1 only; the others say `none`.
        for t in e.ec2.launch_templates() {
            let want = match t.data.capacity_reservation_id.as_deref() {
                Some("cr-1") => CapacityReservationPreference::CapacityReservationsOnly,
                None => CapacityReservationPreference::None,
                Some(other) => panic!("unexpected reservation {other}"),
            };
            assert_eq!(t.data.capacity_reservation_preference, Some(want), "{}", t.name);
        }
        // The instances as EC2 reports them carry their template's preference.
        let id = |c: &NodeClaim| instance_id(c.provider_id().unwrap()).unwrap().to_owned();
        let preference = |c: &NodeClaim| e.ec2.instance(&id(c)).unwrap().capacity_reservation_preference;
        assert_eq!(preference(&reserved).as_deref(), Some("capacity-reservations-only"));
        assert_eq!(preference(&od).as_deref(), Some("none"));
        assert_eq!(preference(&spot).as_deref(), Some("none"));
        // Described again: the same capacity types.
        let got = |c: &NodeClaim| {
            let pid = c.provider_id().unwrap().to_owned();
            let p = e.provider.clone();
            async move { p.get(&pid).await.unwrap() }
        };
        let r = got(&reserved).await;
        assert_eq!((label(&r, CAPACITY_TYPE), label(&r, CAPACITY_RESERVATION_ID)), (Some("reserved"), Some("cr-1")));
        let o = got(&od).await;
        assert_eq!((label(&o, CAPACITY_TYPE), label(&o, CAPACITY_RESERVATION_ID)), (Some("on-demand"), None));
        // The reserved instance's preference is changed to `open`: still in cr-1, but on-demand capacity now,
        // without the reservation labels.
        assert!(e.ec2.update_instance(&id(&reserved), |i| i.capacity_reservation_preference = Some("open".into())));
        let r = got(&reserved).await;
        assert_eq!((label(&r, CAPACITY_TYPE), label(&r, CAPACITY_RESERVATION_ID)), (Some("on-demand"), None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_capacity_error_of_a_reserved_launch_zeroes_the_reservation_not_the_offering() {
        let CrEnv { e, tracker } = cr_env(3).await;
        e.ec2.set_exhausted("reserved", "m5.large", "us-west-2a", true);
        let err = e.provider.create(&claim("r-ice", &["reserved"])).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InsufficientCapacity, "{err}");
        assert_eq!(tracker.available_count("cr-1"), Some(0));
        assert!(!e.provider.unavailable_offerings().is_unavailable(&OfferingRef::new(
            "m5.large",
            "us-west-2a",
            "reserved"
        )));
        assert!(e.provider.unavailable_offerings().offerings().is_empty());
        assert!(!reserved_offering(&e).await.available);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reservation_interruption_zeroes_the_reservation() {
        let CrEnv { e, tracker } = cr_env(2).await;
        let queue = Arc::new(crate::testing::MemoryQueue::new("q"));
        let id = "i-0bbbbbbbbbbbbbbbb";
        queue.send(
            &json!({
                "version": "0", "id": "1", "detail-type": "EC2 Capacity Reservation Instance Interruption Warning",
                "source": "aws.ec2", "account": "123456789012", "time": "2026-01-01T00:00:00Z",
                "region": "us-west-2", "resources": [],
                "detail": {"instance-id": id, "capacity-reservation-id": "cr-1"}
            })
            .to_string(),
        );
        let claim_of = InstanceClaim {
            name: "r".into(),
            provider_id: format!("aws:///us-west-2a/{id}"),
            instance_type: Some("m5.large".into()),
            zone: Some("us-west-2a".into()),
            capacity_type: Some("reserved".into()),
            capacity_reservation_id: Some("cr-1".into()),
        };
        let lookup = Arc::new(crate::queue::StaticLookup(BTreeMap::from([(id.to_owned(), claim_of)])));
        let source =
            crate::queue::SqsInterruptionSource::new(queue, lookup, "q").with_hook(Arc::new(e.provider.clone()));
        let events = karpenter_cloudprovider::InterruptionSource::next_batch(&source).await.unwrap();
        assert_eq!(events.len(), 1);
        assert_eq!(tracker.available_count("cr-1"), Some(0));
        assert!(!reserved_offering(&e).await.available);
        // The spot side of the hook still marks offerings.
        e.provider.spot_interrupted(&InstanceClaim {
            name: "s".into(),
            provider_id: String::new(),
            instance_type: Some("c5.large".into()),
            zone: Some("us-west-2b".into()),
            capacity_type: Some("spot".into()),
            capacity_reservation_id: None,
        });
        assert!(e.provider.unavailable_offerings().is_unavailable(&OfferingRef::new("c5.large", "us-west-2b", "spot")));
    }
}

/// The provider of `e`'s EC2 with the `RebootForRepair` gate on, for `cluster`.
fn rebooting(e: &Env, cluster: &str) -> AwsCloudProvider {
    let apis = e.ec2.apis();
    let info = ClusterInfo {
        name: cluster.into(),
        endpoint: "https://api.example".into(),
        ca_bundle: Some("Q0E=".into()),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: Some("10.100.0.10".into()),
    };
    AwsCloudProvider::new(
        apis,
        Arc::new(e.classes.clone()),
        Arc::new(e.clock.clone()),
        Arc::new(e.clock.clone()),
        SharedPrices::new(PriceSource::Table(prices(&catalogue()))),
        AwsCloudProviderOptions { reboot_for_repair: true, ..AwsCloudProviderOptions::new(info, "us-west-2") },
    )
}

fn reboot_calls(e: &Env) -> Vec<Vec<String>> {
    e.ec2
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            MockCall::RebootInstances(ids) => Some(ids),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn reboot_is_not_implemented_without_the_gate() {
    let e = env();
    let launched = e.provider.create(&claim("gpu", &["on-demand"])).await.unwrap();
    let err = e.provider.reboot(&launched).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotImplemented, "{err}");
    assert!(reboot_calls(&e).is_empty());
}

#[tokio::test(start_paused = true)]
async fn reboot_calls_reboot_instances_with_the_gate_and_maps_errors_like_terminate() {
    let e = env();
    let provider = rebooting(&e, "test-cluster");
    let c = claim("gpu", &["on-demand"]);
    let mut launched = provider.create(&c).await.unwrap();
    launched.spec = c.spec.clone();
    let id = instance_id(launched.provider_id().unwrap()).unwrap().to_owned();
    provider.reboot(&launched).await.unwrap();
    assert_eq!(reboot_calls(&e), vec![vec![id.clone()]]);
    assert_eq!(e.ec2.reboots(&id), 1);
    let listed: Vec<_> =
        provider.list().await.unwrap().iter().filter_map(|c| c.provider_id().map(str::to_owned)).collect();
    assert_eq!(listed, vec![launched.provider_id().unwrap().to_owned()], "a reboot keeps the one instance");
    assert_eq!(e.ec2.instance(&id).unwrap().state, InstanceState::Running);

    // EC2 errors: throttling is retried by the caller, an unknown id is NodeClaimNotFound.
    e.ec2
        .fail_next(ops::REBOOT_INSTANCES, AwsApiError::new(ops::REBOOT_INSTANCES, "RequestLimitExceeded", "slow down"));
    assert_eq!(provider.reboot(&launched).await.unwrap_err().kind(), ErrorKind::Other);
    e.ec2.fail_next(
        ops::REBOOT_INSTANCES,
        AwsApiError::new(ops::REBOOT_INSTANCES, "InvalidInstanceID.NotFound", "gone meanwhile"),
    );
    assert!(provider.reboot(&launched).await.unwrap_err().is_not_found());
    assert_eq!(e.ec2.reboots(&id), 1);

    // Another cluster's instance is not ours to reboot; neither is a claim without an EC2 provider id.
    let other = rebooting(&e, "other-cluster");
    assert!(other.reboot(&launched).await.unwrap_err().is_not_found());
    assert!(provider.reboot(&c).await.unwrap_err().is_not_found(), "no providerID");
    let mut foreign = launched.clone();
    foreign.status.as_mut().unwrap().provider_id = Some("kwok://x".into());
    assert!(provider.reboot(&foreign).await.unwrap_err().is_not_found());

    // Shutting down, then terminated: NodeClaimNotFound, and EC2 is not asked.
    let before = reboot_calls(&e).len();
    provider.delete(&launched).await.unwrap();
    assert!(provider.reboot(&launched).await.unwrap_err().is_not_found());
    assert!(provider.reboot(&launched).await.unwrap_err().is_not_found());
    assert_eq!(reboot_calls(&e).len(), before);
}

/// A repair policy as (type, status, toleration minutes, drain bound minutes, priority, action).
type PolicySummary = (String, &'static str, u64, Option<u64>, u8, RepairAction);

#[test]
fn the_default_repair_policies_are_v1_14s_with_drain_bounds_and_validate() {
    use karpenter_api::repair::RepairPolicies;
    let summary = |ps: &[RepairPolicy]| -> Vec<PolicySummary> {
        ps.iter()
            .map(|p| {
                (
                    p.condition_type.clone(),
                    p.condition_status.as_str(),
                    p.toleration_duration.as_secs() / 60,
                    p.termination_grace_period.map(|d| d.as_secs() / 60),
                    p.priority,
                    p.action,
                )
            })
            .collect()
    };
    let off = repair_policies(false);
    let replace = RepairAction::Replace;
    let expected = vec![
        ("Ready".to_owned(), "False", 30, Some(10), 0, replace),
        ("Ready".to_owned(), "Unknown", 30, Some(0), 0, replace),
        ("AcceleratedHardwareReady".to_owned(), "False", 10, Some(10), 0, replace),
        ("StorageReady".to_owned(), "False", 30, Some(10), 0, replace),
        ("NetworkingReady".to_owned(), "False", 30, Some(10), 0, replace),
        ("KernelReady".to_owned(), "False", 30, Some(0), 0, replace),
        ("ContainerRuntimeReady".to_owned(), "False", 30, Some(10), 0, replace),
    ];
    assert_eq!(summary(&off), expected);
    RepairPolicies::new(off.clone()).unwrap();
    let on = repair_policies(true);
    let mut with_reboot = expected.clone();
    with_reboot.push(("AcceleratedHardwareReady".to_owned(), "False", 10, Some(0), 50, RepairAction::Reboot));
    assert_eq!(summary(&on), with_reboot);
    let set = RepairPolicies::new(on).unwrap();

    // What a node with a broken accelerator gets: a reboot with the gate, a replace without; the replace
    // fallback is still there for a provider answer of NotImplemented.
    let now = chrono::DateTime::<chrono::Utc>::from_timestamp(1_800_000_000, 0).unwrap();
    let broken: k8s_openapi::api::core::v1::NodeCondition = serde_json::from_value(json!({
        "type": "AcceleratedHardwareReady", "status": "False", "reason": "Xid79",
        "lastTransitionTime": "2027-01-15T08:00:00Z"
    }))
    .unwrap();
    let m = set.assess(std::slice::from_ref(&broken), now).unwrap();
    assert_eq!((m.action, m.termination_grace_period), (RepairAction::Reboot, Some(Duration::ZERO)));
    let m = RepairPolicies::new(off).unwrap().assess(&[broken], now).unwrap();
    assert_eq!((m.action, m.termination_grace_period), (RepairAction::Replace, Some(REPAIR_DRAIN_BOUND)));

    // The provider answers with the set its gate selects.
    let e = env();
    assert_eq!(summary(&e.provider.repair_policies()), expected);
    assert_eq!(rebooting(&e, "test-cluster").repair_policies().len(), 8);
}

#[tokio::test(start_paused = true)]
async fn the_mock_refuses_to_reboot_unknown_or_terminating_instances_as_ec2_does() {
    let e = env();
    let c = claim("mock", &["on-demand"]);
    let mut launched = e.provider.create(&c).await.unwrap();
    launched.spec = c.spec.clone();
    let id = instance_id(launched.provider_id().unwrap()).unwrap().to_owned();
    let err = e.ec2.reboot_instances(&["i-unknown".into()]).await.unwrap_err();
    assert_eq!((err.code.as_str(), err.kind), ("InvalidInstanceID.NotFound", AwsErrorKind::NotFound));
    e.ec2.reboot_instances(std::slice::from_ref(&id)).await.unwrap();
    assert_eq!(e.ec2.reboots(&id), 1);
    e.provider.delete(&launched).await.unwrap();
    let err = e.ec2.reboot_instances(std::slice::from_ref(&id)).await.unwrap_err();
    assert_eq!(err.code, "IncorrectInstanceState", "{err}");
    assert_eq!(e.ec2.reboots(&id), 1);
}

/// ARC zonal shifts (`crate::zonalshift`): the shifted zone is not offered, and its instances are neither
/// listed for garbage collection nor terminated until the shift ends.
#[tokio::test(start_paused = true)]
async fn a_zonal_shift_keeps_launches_listing_and_termination_out_of_its_zone() {
    let e = env();
    let c = claim("shifted", &["on-demand"]);
    let mut launched = e.provider.create(&c).await.unwrap();
    launched.spec = c.spec.clone();
    let zone = label(&launched, karpenter_api::labels::ZONE).expect("a zone label").to_owned();
    let offerings = e.provider.unavailable_offerings().clone();
    assert!(offerings.set_shifted_zones([zone.clone()].into()));

    let its = e.provider.instance_types(&pool()).await.unwrap();
    assert!(
        its.iter().flat_map(|it| &it.offerings).filter(|o| o.zone() == Some(zone.as_str())).all(|o| !o.available),
        "no offering of {zone} is available during the shift"
    );
    assert!(
        e.provider.list().await.unwrap().iter().all(|l| l.provider_id() != launched.provider_id()),
        "garbage collection does not see the shifted zone's instances"
    );
    e.ec2.clear_calls();
    e.provider.delete(&launched).await.expect("deferred quietly, not an error");
    let terminates = e.ec2.calls().into_iter().filter(|c| matches!(c, MockCall::TerminateInstances(_))).count();
    assert_eq!(terminates, 0, "not terminated during the shift");
    assert!(e.provider.get(launched.provider_id().unwrap()).await.is_ok(), "the instance still runs");

    assert!(offerings.set_shifted_zones(Default::default()));
    assert!(e.provider.list().await.unwrap().iter().any(|l| l.provider_id() == launched.provider_id()));
    e.provider.delete(&launched).await.unwrap();
    let terminates = e.ec2.calls().into_iter().filter(|c| matches!(c, MockCall::TerminateInstances(_))).count();
    assert_eq!(terminates, 1, "terminated once the shift ended");
}

/// An [`env`] whose class has kubelet CEL expressions, with the `NodeClassCEL` gate `gate`.
fn cel_env(gate: bool) -> Env {
    let clock = FakeClock::default();
    let ec2 = MockEc2::new(Arc::new(clock.clone()));
    let infos = catalogue();
    let table = prices(&infos);
    ec2.set_catalogue(infos, &ZONES);
    let classes = InMemoryNodeClasses::new();
    let mut class = class_json("True");
    class["spec"]["kubelet"] = json!({
        "maxPods": "min(max_pods, 20)",
        "kubeReserved": {"memory": "11 * max_pods + 100", "cpu": "100m"}
    });
    classes.insert_value(GROUP, KIND, "default", class);
    let provider = provider_with(&ec2, &classes, &clock, "test-cluster", table, |o| {
        o.instance_types.node_class_cel = gate;
    });
    Env { ec2, classes, clock, provider }
}

#[tokio::test(start_paused = true)]
async fn kubelet_expressions_shape_instance_types_and_user_data() {
    let e = cel_env(true);
    let pool = pool();
    let its = e.provider.instance_types(&pool).await.unwrap();
    let m5 = its.iter().find(|it| it.name == "m5.large").expect("m5.large");
    assert_eq!(m5.capacity().pods().value(), Some(20));
    // 11 × 20 + 100 = 320 MiB (already a multiple of 16).
    assert_eq!(m5.overhead().kube_reserved.get("memory"), Some(&"320Mi".parse().unwrap()));
    e.provider.create(&claim("cel-claim", &["on-demand"])).await.unwrap();
    for lt in e.ec2.launch_templates() {
        assert!(lt.data.user_data.contains("maxPods: 20"), "{}", lt.data.user_data);
        assert!(lt.data.user_data.contains("320Mi") && lt.data.user_data.contains("100m"), "{}", lt.data.user_data);
        assert!(!lt.data.user_data.contains("max_pods"), "no expression reaches the node: {}", lt.data.user_data);
    }

    // Gate off: the family default max pods and the computed default memory; the quantity still applies.
    let off = cel_env(false);
    let its = off.provider.instance_types(&pool).await.unwrap();
    let m5 = its.iter().find(|it| it.name == "m5.large").expect("m5.large");
    assert_ne!(m5.capacity().pods().value(), Some(20));
    assert_eq!(m5.overhead().kube_reserved.get("cpu"), Some(&"100m".parse().unwrap()));
    // Its user data leaves the expressions out (status checks keep such a class from launching; this is the
    // resolution path on its own).
    off.provider.create(&claim("cel-off", &["on-demand"])).await.unwrap();
    for lt in off.ec2.launch_templates() {
        let u = &lt.data.user_data;
        assert!(u.contains("maxPods: 29") && u.contains("100m"), "{u}");
        assert!(!u.contains("max_pods") && !u.contains("memory:"), "no expression, no resolved memory: {u}");
    }
}

// Upstream's controller policy allows `CreateLaunchTemplate`, launching from a template and deleting it only
// with a `karpenter.sh/nodepool` tag: each NodePool's launches create and use templates tagged with that NodePool.
#[tokio::test(start_paused = true)]
async fn launch_templates_are_tagged_with_the_node_pool_they_launch_for() {
    let e = env();
    let mut batch = claim("batch-claim", &["on-demand"]);
    batch.metadata.labels.get_or_insert_default().insert(NODE_POOL.into(), "batch".into());
    for r in &mut batch.spec.requirements {
        if r.key == NODE_POOL {
            r.values = vec!["batch".into()];
        }
    }
    for (claim, pool) in [(claim("default-claim", &["on-demand"]), "default"), (batch, "batch")] {
        e.ec2.clear_calls();
        e.provider.create(&claim).await.unwrap();
        let fleet = only_fleet(&e);
        assert_eq!(fleet.tags.get(NODE_POOL_TAG).map(String::as_str), Some(pool));
        let templates = e.ec2.launch_templates();
        for config in &fleet.launch_template_configs {
            let template = templates
                .iter()
                .find(|t| t.name == config.launch_template_name)
                .unwrap_or_else(|| panic!("{} was created", config.launch_template_name));
            assert_eq!(template.tags.get(NODE_POOL_TAG).map(String::as_str), Some(pool), "{:?}", template.tags);
            assert_eq!(template.tags.get("karpenter.k8s.aws/ec2nodeclass").map(String::as_str), Some("default"));
            assert_eq!(template.tags.get("kubernetes.io/cluster/test-cluster").map(String::as_str), Some("owned"));
        }
    }
    // Two NodePools never share a template (their user data differs by the NodePool label anyway).
    let pools: BTreeSet<_> = e.ec2.launch_templates().iter().map(|t| t.tags[NODE_POOL_TAG].clone()).collect();
    assert_eq!(pools, BTreeSet::from(["batch".to_owned(), "default".to_owned()]));
}
