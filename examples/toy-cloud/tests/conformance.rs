//! The toy cloud against the CloudProvider conformance suite, with every optional check switched on: a second
//! cluster on the same account, a missing node class, exhausted capacity and drift.

use std::sync::Arc;
use std::time::Duration;

use karpenter_cloudprovider::prelude::*;
use karpenter_cloudprovider::{CloudProvider, InMemoryNodeClasses};
use karpenter_example_toy_cloud::api::{GROUP, KIND};
use karpenter_example_toy_cloud::cloud::REGION_DRIFT;
use karpenter_example_toy_cloud::{Account, ToyCloud, ToyNodeClass, ToyNodeClassSpec};
use karpenter_testing::FakeClock;
use karpenter_testing::conformance::{ConformanceHooks, Fixtures, Outcome, run};

/// Provokes the situations the trait cannot: running out of capacity (through the account) and drift (by moving
/// the class to another region).
#[derive(Debug)]
struct ToyHooks {
    cloud: ToyCloud,
    classes: InMemoryNodeClasses,
    pool: NodePool,
}

#[async_trait]
impl ConformanceHooks for ToyHooks {
    async fn exhaust_capacity(&self, claim: &NodeClaim) -> Option<Vec<OfferingRef>> {
        let requirements = claim.requirements().ok()?;
        let requests = claim.spec.resources.iter().flat_map(|r| &r.requests);
        let requests = ResourceList::try_from_pairs(requests.map(|(n, q)| (n, q.as_str()))).ok()?;
        let mut exhausted = Vec::new();
        for it in self.cloud.instance_types(&self.pool).await.ok()?.iter() {
            if !requests.fits(it.allocatable()) || requirements.intersects(&it.requirements).is_err() {
                continue;
            }
            for o in it.offerings.iter().filter(|o| requirements.intersects(&o.requirements).is_ok()) {
                let offering = OfferingRef::new(&it.name, o.zone()?, o.capacity_type()?);
                self.cloud.account().exhaust(&offering);
                exhausted.push(offering);
            }
        }
        Some(exhausted)
    }

    async fn restore_capacity(&self) {
        self.cloud.account().restore_capacity();
    }

    async fn cause_drift(&self, launched: &NodeClaim) -> Option<DriftReason> {
        let name = &launched.spec.node_class_ref.name;
        let moved = ToyNodeClass::new(name, ToyNodeClassSpec::in_region("elsewhere"));
        self.classes.insert(GROUP, KIND, name, &moved).ok()?;
        Some(DriftReason::new(REGION_DRIFT))
    }
}

#[tokio::test]
async fn the_toy_cloud_passes_every_conformance_check() {
    let classes = InMemoryNodeClasses::new();
    let class = ToyNodeClass::new("default", ToyNodeClassSpec::in_region("toy-east-1"));
    classes.insert(GROUP, KIND, "default", &class).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(FakeClock::default());
    let account = Account::new();
    let cloud = ToyCloud::new("toy-cluster", account.clone(), Arc::new(classes.clone()), clock.clone());
    let base = Fixtures::new(NodeClassReference::new(GROUP, KIND, "default"));
    let fixtures = Fixtures {
        // The same account seen from another cluster: neither lists nor gets this cluster's instances.
        other_cluster: Some(Arc::new(ToyCloud::new(
            "other-cluster",
            account.clone(),
            Arc::new(classes.clone()),
            clock,
        ))),
        hooks: Arc::new(ToyHooks { cloud: cloud.clone(), classes, pool: base.node_pool.clone() }),
        // The toy terminates on the second delete: polls need not wait long.
        delete_poll_interval: Duration::from_millis(1),
        ..base
    };
    let report = run(Arc::new(cloud), &fixtures).await;
    assert!(report.passed(), "{report}");
    // Every check ran: none was skipped for want of a hook or fixture.
    let skipped: Vec<&str> = report.checks.iter().filter(|c| c.outcome != Outcome::Passed).map(|c| c.name).collect();
    assert!(skipped.is_empty(), "not passed: {skipped:?}\n{report}");
    assert!(report.checks.len() >= 13, "{report}");
    assert_eq!(account.instance_count("toy-cluster"), 0, "the suite cleans up");
}

/// The node class decides what the cloud offers and how much it launches: offerings only in the class's zones,
/// and a launch past `maxNodes` fails with insufficient capacity; an invalid class launches nothing and says why.
#[tokio::test]
async fn the_node_class_sets_the_zones_and_the_node_limit() {
    let classes = InMemoryNodeClasses::new();
    let spec = ToyNodeClassSpec { region: "toy-west-2".into(), max_nodes: Some(1) };
    classes.insert(GROUP, KIND, "one", &ToyNodeClass::new("one", spec)).unwrap();
    let broken = ToyNodeClassSpec { region: "West_2".into(), max_nodes: None };
    classes.insert(GROUP, KIND, "broken", &ToyNodeClass::new("broken", broken)).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(FakeClock::default());
    let cloud = ToyCloud::new("c", Account::new(), Arc::new(classes), clock);

    let fixtures = Fixtures::new(NodeClassReference::new(GROUP, KIND, "one"));
    let types = cloud.instance_types(&fixtures.node_pool).await.unwrap();
    let mut zones: Vec<&str> = types.iter().flat_map(|it| it.offerings.iter().filter_map(|o| o.zone())).collect();
    zones.sort();
    zones.dedup();
    assert_eq!(zones, ["toy-west-2-a", "toy-west-2-b"]);

    let claim = |name: &str| {
        let mut claim = fixtures.node_claim.clone();
        claim.metadata.name = Some(name.into());
        claim
    };
    let first = cloud.create(&claim("first")).await.unwrap();
    assert!(first.provider_id().unwrap().starts_with("toy:///c/i-"), "{:?}", first.provider_id());
    let second = cloud.create(&claim("second")).await.unwrap_err();
    assert_eq!(second.kind(), karpenter_cloudprovider::ErrorKind::InsufficientCapacity, "{second}");
    assert!(second.to_string().contains("maxNodes (1)"), "{second}");

    let mut invalid = claim("third");
    invalid.spec.node_class_ref.name = "broken".into();
    let error = cloud.create(&invalid).await.unwrap_err();
    assert_eq!(error.kind(), karpenter_cloudprovider::ErrorKind::NodeClassNotReady, "{error}");
    assert!(error.to_string().contains("spec.region"), "{error}");
    assert_eq!(cloud.list().await.unwrap().len(), 1);
}
