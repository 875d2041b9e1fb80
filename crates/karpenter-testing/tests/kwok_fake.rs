//! The in-memory fake provider over the kwok catalogue (`karpenter_testing::kwok::fake`): the launches it picks
//! from that catalogue (sizes, allocatable after the kwok overhead, labels) and insufficient capacity named by
//! its offerings. The fake's mechanics are tested in its own crate with hand-made instance types.

use std::sync::Arc;
use std::time::Duration;

use karpenter_api::labels::{ARCH, CAPACITY_TYPE, INSTANCE_TYPE, OS, ZONE};
use karpenter_api::nodeclaim::ResourceQuantity;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_cloudprovider::{CloudProvider, ErrorKind, FakeCloudProvider, FakeOptions, Method, OfferingRef};
use karpenter_testing::{
    Clock, FakeClock, NodeClaimOptions, NodePoolOptions, kwok, kwok_node_class_ref, node_claim, node_pool,
    nodepool_requirement,
};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
}

/// A NodeClaim of the `default` pool (labelled `team: a`) on the default KWOKNodeClass, built with the test kit.
fn claim(name: &str, reqs: &[(&str, &str, &[&str])], cpu: &str) -> NodeClaim {
    node_claim(NodeClaimOptions {
        name: Some(name.into()),
        node_pool: Some("default".into()),
        labels: [("team".to_string(), "a".to_string())].into(),
        requirements: reqs.iter().map(|(k, op, v)| nodepool_requirement(k, op, v)).collect(),
        requests: [("cpu", cpu)].into(),
        node_class_ref: Some(kwok_node_class_ref("default")),
        ..Default::default()
    })
}

fn pool() -> NodePool {
    node_pool(NodePoolOptions {
        name: Some("default".into()),
        node_class_ref: Some(kwok_node_class_ref("default")),
        ..Default::default()
    })
}

fn linux(name: &str, cpu: &str) -> NodeClaim {
    claim(name, &[(OS, "In", &["linux"]), (ARCH, "In", &["arm64"])], cpu)
}

fn fake_with_clock() -> (FakeCloudProvider, FakeClock) {
    let clock = FakeClock::default();
    let fake = FakeCloudProvider::new(FakeOptions {
        clock: Arc::new(clock.clone()),
        sleeper: Arc::new(clock.clone()),
        launch_latency: Duration::from_secs(3),
        ..kwok::fake_options()
    });
    (fake, clock)
}

#[test]
fn the_kwok_fake_offers_the_whole_kwok_catalogue() {
    let fake = kwok::fake();
    let its = block_on(fake.instance_types(&pool())).unwrap();
    let names: Vec<&str> = its.iter().map(|it| it.name.as_str()).collect();
    let catalogue = kwok::catalogue::catalogue();
    assert_eq!(names, catalogue.iter().map(|it| it.name.as_str()).collect::<Vec<_>>());
    assert_eq!(names.len(), 144);
    assert_eq!(fake.name(), "kwok");
}

#[test]
fn create_launches_the_cheapest_fitting_offering_with_resolved_labels() {
    let (fake, clock) = fake_with_clock();
    let start = clock.now();
    let launched = block_on(fake.create(&linux("a", "3"))).unwrap();
    // 3 CPUs do not fit a 4-CPU type's allocatable? They do (3.9 allocatable): c-4x is the cheapest fit.
    let labels = launched.metadata.labels.clone().unwrap();
    assert_eq!(labels.get(INSTANCE_TYPE).map(String::as_str), Some("c-4x-arm64-linux"));
    assert_eq!(labels.get(ZONE).map(String::as_str), Some("test-zone-a"));
    assert_eq!(labels.get(CAPACITY_TYPE).map(String::as_str), Some("spot"));
    assert_eq!(labels.get(OS).map(String::as_str), Some("linux"));
    assert_eq!(labels.get("team").map(String::as_str), Some("a"), "claim labels are kept");
    assert_eq!(labels.get("karpenter.kwok.sh/instance-family").map(String::as_str), Some("c"));
    let status = launched.status.clone().unwrap();
    assert!(status.provider_id.as_deref().unwrap().starts_with("kwok://a-"));
    assert_eq!(status.capacity.get("cpu").map(ResourceQuantity::as_str), Some("4"));
    assert_eq!(status.allocatable.get("cpu").map(ResourceQuantity::as_str), Some("3900m"));
    let created = launched.metadata.creation_timestamp.clone().unwrap();
    assert_eq!(created.0.as_second(), (start + chrono::Duration::seconds(3)).timestamp(), "launch latency");
    // 3.95 CPUs no longer fit c-4x (3.9 allocatable): the next size up.
    let b = block_on(fake.create(&linux("b", "3950m"))).unwrap();
    assert_eq!(b.metadata.labels.unwrap().get(INSTANCE_TYPE).map(String::as_str), Some("c-8x-arm64-linux"));
    assert_eq!(fake.call_count(Method::Create), 2);
}

#[test]
fn insufficient_capacity_names_the_offerings_and_marks_them_unavailable() {
    let fake = kwok::fake();
    let c = claim("ice", &[(INSTANCE_TYPE, "In", &["c-1x-amd64-linux"]), (ZONE, "In", &["test-zone-a"])], "500m");
    fake.set_insufficient_capacity(OfferingRef::new("c-1x-amd64-linux", "test-zone-a", "spot"), true);
    let launched = block_on(fake.create(&c)).unwrap();
    assert_eq!(launched.metadata.labels.unwrap().get(CAPACITY_TYPE).map(String::as_str), Some("on-demand"));
    fake.set_insufficient_capacity(OfferingRef::new("c-1x-amd64-linux", "test-zone-a", "on-demand"), true);
    let err = block_on(fake.create(&claim(
        "ice2",
        &[(INSTANCE_TYPE, "In", &["c-1x-amd64-linux"]), (ZONE, "In", &["test-zone-a"])],
        "500m",
    )))
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity);
    assert_eq!(
        err.failed_offerings(),
        [
            OfferingRef::new("c-1x-amd64-linux", "test-zone-a", "on-demand"),
            OfferingRef::new("c-1x-amd64-linux", "test-zone-a", "spot")
        ]
    );
    let its = block_on(fake.instance_types(&pool())).unwrap();
    let it = its.iter().find(|i| i.name == "c-1x-amd64-linux").unwrap();
    assert_eq!(it.offerings.iter().filter(|o| !o.available).count(), 2);
    assert_eq!(its.iter().flat_map(|i| &i.offerings).filter(|o| !o.available).count(), 2);
    fake.clear_insufficient_capacity();
    let its = block_on(fake.instance_types(&pool())).unwrap();
    assert!(its.iter().flat_map(|i| &i.offerings).all(|o| o.available));
    // Nothing fits: InsufficientCapacity without offerings.
    let err = block_on(fake.create(&linux("huge", "1000"))).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity);
    assert!(err.failed_offerings().is_empty());
}
