use std::collections::BTreeMap;

use crate::api::Ami;
use karpenter_testing::FakeClock;

use super::*;
use crate::launch::fleet::{
    Filter, FleetLaunchTemplateConfig, FleetOverride, InstanceState, NODE_POOL_TAG, TargetCapacityType,
};
use crate::launch::mock::{MockCall, MockEc2};
use crate::launch::template::{LaunchTemplate, LaunchTemplateApi, LaunchTemplateData, LtMetadataOptions};

fn mock() -> MockEc2 {
    MockEc2::new(Arc::new(FakeClock::default()))
}

async fn template(ec2: &MockEc2) -> String {
    let ami = Ami { id: "ami-1".into(), name: None, deprecated: false, requirements: vec![] };
    let data = LaunchTemplateData {
        image_id: ami.id.clone(),
        instance_profile: None,
        security_group_ids: vec!["sg-1".into()],
        user_data: String::new(),
        block_device_mappings: vec![],
        metadata_options: LtMetadataOptions::from(&crate::api::MetadataOptions::default()),
        network_interfaces: vec![],
        detailed_monitoring: false,
        ..Default::default()
    };
    let lt = LaunchTemplate::new(data, BTreeMap::new());
    ec2.create_launch_template(&lt).await.unwrap();
    lt.name
}

fn request(lt: &str, claim: &str, pool: &str) -> CreateFleetRequest {
    CreateFleetRequest {
        target_capacity_type: TargetCapacityType::OnDemand,
        total_target_capacity: 1,
        spot_allocation_strategy: None,
        on_demand_allocation_strategy: Some("lowest-price".into()),
        interruptible_reservations: false,
        context: None,
        launch_template_configs: vec![FleetLaunchTemplateConfig {
            launch_template_name: lt.into(),
            overrides: vec![FleetOverride {
                instance_type: "m5.large".into(),
                subnet_id: Some("subnet-a".into()),
                image_id: Some("ami-1".into()),
                availability_zone: "us-west-2a".into(),
                priority: 0.096,
            }],
        }],
        tags: [(NODE_CLAIM_TAG.to_string(), claim.to_string()), (NODE_POOL_TAG.to_string(), pool.to_string())].into(),
    }
}

#[tokio::test(start_paused = true)]
async fn identical_fleet_requests_merge_and_each_instance_is_tagged_with_its_claim() {
    let ec2 = mock();
    let lt = template(&ec2).await;
    let batcher = Arc::new(fleet_batcher(Arc::new(ec2.clone()), BatchWindow::CREATE_FLEET));
    let (a, b, c) = tokio::join!(
        create_fleet(&batcher, request(&lt, "claim-a", "default")),
        create_fleet(&batcher, request(&lt, "claim-b", "default")),
        create_fleet(&batcher, request(&lt, "claim-c", "other")),
    );
    let fleets = ec2.fleet_requests();
    assert_eq!(fleets.len(), 2, "a+b merged, c (another NodePool tag) alone: {fleets:?}");
    let merged = fleets.iter().find(|f| f.total_target_capacity == 2).expect("a merged fleet");
    assert!(!merged.tags.contains_key(NODE_CLAIM_TAG), "a merged fleet carries no single claim's tag");
    let alone = fleets.iter().find(|f| f.total_target_capacity == 1).expect("a single fleet");
    assert_eq!(alone.tags.get(NODE_CLAIM_TAG).map(String::as_str), Some("claim-c"));
    let ids: Vec<String> = [a, b, c].into_iter().map(|r| r.unwrap().instances[0].instance_id.clone()).collect();
    assert_eq!(ids.iter().collect::<std::collections::BTreeSet<_>>().len(), 3);
    for (id, claim) in ids.iter().zip(["claim-a", "claim-b", "claim-c"]) {
        assert_eq!(ec2.instance(id).unwrap().tags.get(NODE_CLAIM_TAG).map(String::as_str), Some(claim));
    }
    let tag_calls = ec2.calls().into_iter().filter(|c| matches!(c, MockCall::CreateTags(..))).count();
    assert_eq!(tag_calls, 2, "only the merged fleet's instances need tagging");
}

#[tokio::test(start_paused = true)]
async fn callers_beyond_the_launched_instances_get_the_fleet_errors() {
    let ec2 = mock();
    let lt = template(&ec2).await;
    ec2.set_exhausted("on-demand", "m5.large", "us-west-2a", true);
    let batcher = fleet_batcher(Arc::new(ec2.clone()), BatchWindow::CREATE_FLEET);
    let (a, b) = tokio::join!(
        create_fleet(&batcher, request(&lt, "claim-a", "default")),
        create_fleet(&batcher, request(&lt, "claim-b", "default")),
    );
    for r in [a, b] {
        let r = r.unwrap();
        assert!(r.instances.is_empty());
        assert_eq!(r.errors[0].error_code, "InsufficientInstanceCapacity");
    }
}

#[tokio::test(start_paused = true)]
async fn describe_merges_ids_and_tolerates_unknown_ones() {
    let ec2 = mock();
    let lt = template(&ec2).await;
    let fleet = fleet_batcher(Arc::new(ec2.clone()), BatchWindow::NONE);
    let a = create_fleet(&fleet, request(&lt, "a", "p")).await.unwrap().instances[0].instance_id.clone();
    let b = create_fleet(&fleet, request(&lt, "b", "p")).await.unwrap().instances[0].instance_id.clone();
    ec2.clear_calls();
    let describe = DescribeBatcher::new(Arc::new(ec2.clone()), BatchWindow::DESCRIBE_INSTANCES);
    let (ra, rb, rx) = tokio::join!(
        describe.describe(&a, vec![Filter::live_states()]),
        describe.describe(&b, vec![Filter::live_states()]),
        describe.describe("i-unknown", vec![Filter::live_states()]),
    );
    assert_eq!(ra.unwrap().unwrap().instance_id, a);
    assert_eq!(rb.unwrap().unwrap().instance_id, b);
    assert_eq!(rx.unwrap(), None);
    let calls: Vec<DescribeInstancesRequest> = ec2
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            MockCall::DescribeInstances(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(calls[0].instance_ids.len(), 3, "one merged call first: {calls:?}");
    assert_eq!(calls.len(), 4, "then id by id after the NotFound");

    let terminate = TerminateBatcher::new(Arc::new(ec2.clone()), BatchWindow::TERMINATE_INSTANCES);
    ec2.clear_calls();
    let (ta, tb) = tokio::join!(terminate.terminate(&a), terminate.terminate(&b));
    assert_eq!(ta.unwrap().unwrap().current_state, InstanceState::ShuttingDown);
    assert_eq!(tb.unwrap().unwrap().current_state, InstanceState::ShuttingDown);
    assert_eq!(ec2.calls(), vec![MockCall::TerminateInstances(vec![a.clone(), b.clone()])]);
    assert_eq!(terminate.terminate("i-unknown").await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_batch_closes_at_max_items_and_after_the_max_window() {
    #[derive(Debug, Default)]
    struct Count(Mutex<Vec<usize>>);
    #[async_trait]
    impl BatchExecutor<u32, u32> for Count {
        async fn execute(&self, _key: &str, items: Vec<u32>) -> Vec<u32> {
            self.0.lock().unwrap().push(items.len());
            items
        }
    }
    let exec = Arc::new(Count::default());
    let window = BatchWindow { idle: Duration::from_millis(100), max: Duration::from_secs(1), max_items: 3 };
    let batcher = Arc::new(Batcher::new(window, exec.clone()));
    let futs: Vec<_> = (0..5u32)
        .map(|i| {
            let b = batcher.clone();
            async move { b.submit("k".into(), i).await }
        })
        .collect();
    let outs = futures::future::join_all(futs).await;
    assert_eq!(outs, (0..5).map(Some).collect::<Vec<_>>());
    assert_eq!(*exec.0.lock().unwrap(), vec![3, 2]);
    // A steady trickle (every 50 ms, under the idle window) is cut at the max window.
    exec.0.lock().unwrap().clear();
    let b2 = Arc::new(Batcher::new(BatchWindow { max_items: 1000, ..window }, exec.clone()));
    let start = tokio_now();
    let mut handles = Vec::new();
    for i in 0..30u32 {
        let b = b2.clone();
        handles.push(tokio::spawn(async move { b.submit("k".into(), i).await }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for h in handles {
        h.await.unwrap();
    }
    let sizes = exec.0.lock().unwrap().clone();
    assert!(sizes.len() >= 2 && sizes.iter().sum::<usize>() == 30, "{sizes:?}");
    assert!(sizes[0] <= 21, "the first batch closed at ~1 s: {sizes:?}");
    assert!(tokio_now() - start >= Duration::from_millis(1500));
}

// Upstream's batch metrics: one observation per executed batch, its request count and how long it was held open
// (first arrival to close), labelled with the batcher's name.
#[tokio::test(start_paused = true)]
async fn each_batch_reports_its_size_and_how_long_it_was_held_open() {
    let ec2 = mock();
    let lt = template(&ec2).await;
    let metrics = crate::testing::registry();
    let fleet = fleet_batcher(Arc::new(ec2.clone()), BatchWindow::CREATE_FLEET)
        .with_metrics(CREATE_FLEET_BATCHER, metrics.clone());
    let second = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        create_fleet(&fleet, request(&lt, "claim-b", "default")).await
    };
    let (a, b) = tokio::join!(create_fleet(&fleet, request(&lt, "claim-a", "default")), second);
    assert!(a.is_ok() && b.is_ok());
    let value = |series: &str| crate::testing::sample(&metrics.render(), series);
    // Two requests 20 ms apart: one batch of 2, closed 35 ms (idle) after the second.
    let fleet_batches = "karpenter_cloudprovider_batcher_batch_size_count{batcher=\"create_fleet\"}";
    assert_eq!(value(fleet_batches), Some(1.0));
    assert_eq!(value("karpenter_cloudprovider_batcher_batch_size_sum{batcher=\"create_fleet\"}"), Some(2.0));
    let held = value("karpenter_cloudprovider_batcher_batch_time_seconds_sum{batcher=\"create_fleet\"}");
    assert!(held.is_some_and(|s| (s - 0.055).abs() < 1e-9), "{held:?}");

    let id = a.unwrap().instances[0].instance_id.clone();
    let describe =
        DescribeBatcher::new(Arc::new(ec2.clone()), BatchWindow::DESCRIBE_INSTANCES).with_metrics(metrics.clone());
    describe.describe(&id, vec![]).await.unwrap();
    let terminate =
        TerminateBatcher::new(Arc::new(ec2.clone()), BatchWindow::TERMINATE_INSTANCES).with_metrics(metrics.clone());
    terminate.terminate(&id).await.unwrap();
    for batcher in ["describe_instances", "terminate_instances"] {
        let size = value(&format!("karpenter_cloudprovider_batcher_batch_size_sum{{batcher=\"{batcher}\"}}"));
        assert_eq!(size, Some(1.0), "{batcher}");
        let held = value(&format!("karpenter_cloudprovider_batcher_batch_time_seconds_sum{{batcher=\"{batcher}\"}}"));
        assert!(held.is_some_and(|s| (s - 0.1).abs() < 1e-9), "{batcher}: {held:?}");
    }
}
