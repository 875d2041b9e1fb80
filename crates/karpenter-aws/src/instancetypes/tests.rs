use crate::labels as aws_labels;
use karpenter_cloudprovider::OfferingRef;
use karpenter_testing::FakeClock;
use serde_json::json;

use super::*;
use crate::launch::mock::{MockCall, MockEc2, instance_type_info, ops};
use crate::pricing::PriceTable;

fn class(reservations: serde_json::Value) -> EC2NodeClass {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": 1},
        "spec": {
            "subnetSelectorTerms": [{"id": "subnet-a"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "R",
            "kubelet": {"maxPods": 20}
        },
        "status": {
            "subnets": [{"id": "subnet-a", "zone": "us-west-2a", "zoneID": "usw2-az1"}],
            "capacityReservations": reservations
        }
    }))
    .unwrap()
}

fn setup() -> (MockEc2, FakeClock, InstanceTypeProvider) {
    let clock = FakeClock::default();
    let ec2 = MockEc2::new(Arc::new(clock.clone()));
    ec2.set_catalogue(
        vec![instance_type_info("m5.large", 2, 8), instance_type_info("c5.large", 2, 4)],
        &["us-west-2a", "us-west-2b"],
    );
    let mut table = PriceTable::default();
    table.on_demand.insert("m5.large".into(), 0.096);
    table.spot.entry("m5.large".into()).or_default().insert("us-west-2a".into(), 0.03);
    let provider = InstanceTypeProvider::new(
        Arc::new(ec2.clone()),
        Arc::new(clock.clone()),
        SharedPrices::new(PriceSource::Table(table)),
        UnavailableOfferings::new(Arc::new(clock.clone())),
        InstanceTypeProviderOptions::new("us-west-2"),
    );
    (ec2, clock, provider)
}

fn fetches(ec2: &MockEc2) -> usize {
    ec2.calls().iter().filter(|c| matches!(c, MockCall::DescribeInstanceTypes)).count()
}

#[tokio::test]
async fn converts_per_node_class_with_subnet_zones_prices_and_kubelet() {
    let (_, _, p) = setup();
    let its = p.list(&class(json!([]))).await.unwrap();
    let names: Vec<&str> = its.iter().map(|it| it.name.as_str()).collect();
    assert_eq!(names, ["c5.large", "m5.large"]);
    let m5 = its.iter().find(|it| it.name == "m5.large").unwrap();
    // Only the subnet's zone; spot priced there, on-demand from the table; c5 has no price → unavailable.
    assert!(m5.offerings.iter().all(|o| o.zone() == Some("us-west-2a")));
    assert!(m5.offerings.iter().all(|o| o.available));
    assert_eq!(m5.capacity().pods().value(), Some(20), "kubelet maxPods");
    assert!(m5.requirements.get(aws_labels::ZONE_ID).has("usw2-az1"));
    let c5 = its.iter().find(|it| it.name == "c5.large").unwrap();
    assert!(c5.offerings.iter().all(|o| !o.available));
}

#[tokio::test]
async fn catalogue_is_cached_for_twelve_hours_and_a_failed_refresh_keeps_it() {
    let (ec2, clock, p) = setup();
    p.list(&class(json!([]))).await.unwrap();
    p.list(&class(json!([]))).await.unwrap();
    assert_eq!(fetches(&ec2), 1);
    clock.step_secs(11 * 3600);
    p.list(&class(json!([]))).await.unwrap();
    assert_eq!(fetches(&ec2), 1);
    clock.step_secs(3600);
    ec2.fail_next(ops::DESCRIBE_INSTANCE_TYPES, AwsApiError::new("DescribeInstanceTypes", "InternalError", "x"));
    assert_eq!(p.list(&class(json!([]))).await.unwrap().len(), 2, "the old catalogue");
    assert_eq!(fetches(&ec2), 2);
    p.list(&class(json!([]))).await.unwrap();
    assert_eq!(fetches(&ec2), 3, "retried on the next use");
    assert_eq!(p.refresh().await.unwrap(), 2);
}

#[tokio::test]
async fn price_updates_and_capacity_marks_rebuild_the_list() {
    let (_, _, p) = setup();
    let nc = class(json!([]));
    let before = p.list(&nc).await.unwrap();
    assert!(Arc::ptr_eq(&before, &p.list(&nc).await.unwrap()), "cached");
    p.unavailable().mark(OfferingRef::new("m5.large", "us-west-2a", "spot"));
    let after = p.list(&nc).await.unwrap();
    let m5 = after.iter().find(|it| it.name == "m5.large").unwrap();
    let spot = m5.offerings.iter().find(|o| o.capacity_type() == Some("spot")).unwrap();
    assert!(!spot.available);
    let mut table = PriceTable::default();
    table.on_demand.insert("c5.large".into(), 0.085);
    p.prices().set(PriceSource::Table(table));
    let priced = p.list(&nc).await.unwrap();
    let c5 = priced.iter().find(|it| it.name == "c5.large").unwrap();
    assert!(c5.offerings.iter().any(|o| o.available && o.capacity_type() == Some("on-demand")));
}

#[tokio::test]
async fn every_kubelet_field_feeds_the_cache_key() {
    let (_, _, p) = setup();
    let nc = class(json!([]));
    let before = p.list(&nc).await.unwrap();
    // Same generation (a test shortcut; the API server would bump it): only the raw kubelet map differs.
    let mut passthrough = nc.clone();
    let kubelet = passthrough.spec.kubelet.as_mut().unwrap();
    kubelet.other.insert("serializeImagePulls".into(), json!(false));
    let after = p.list(&passthrough).await.unwrap();
    assert!(!Arc::ptr_eq(&before, &after), "a passed-through field is part of the key");
    assert!(Arc::ptr_eq(&after, &p.list(&passthrough).await.unwrap()), "and cached under it");
}

#[tokio::test]
async fn capacity_reservations_add_reserved_offerings() {
    let (_, _, p) = setup();
    let nc = class(json!([{
        "id": "cr-1", "availabilityZone": "us-west-2a", "instanceType": "m5.large", "ownerID": "123456789012",
        "instanceMatchCriteria": "targeted", "reservationType": "default", "state": "active"
    }]));
    let its = p.list(&nc).await.unwrap();
    let m5 = its.iter().find(|it| it.name == "m5.large").unwrap();
    let reserved = m5.offerings.iter().find(|o| o.capacity_type() == Some("reserved")).expect("a reserved offering");
    assert_eq!(reserved.reservation_id(), Some("cr-1"));
    assert!(reserved.available);
    assert!((reserved.price - 0.096 / RESERVED_PRICE_DIVISOR).abs() < 1e-15);
    assert!(m5.requirements.get(CAPACITY_TYPE).has("reserved"));
    assert!(m5.requirements.get(aws_labels::CAPACITY_RESERVATION_ID).has("cr-1"));
    let c5 = its.iter().find(|it| it.name == "c5.large").unwrap();
    assert!(c5.offerings.iter().all(|o| o.capacity_type() != Some("reserved")));
}

#[test]
fn kubelet_expression_check_is_the_validation_verdict() {
    use crate::api::MaxPods;
    let mut class: EC2NodeClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "c"},
        "spec": {"subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
                 "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r",
                 "kubelet": {"maxPods": "max_pods - vcpus * 10"}}
    }))
    .expect("class decodes");
    let infos = [instance_type_info("m5.large", 2, 8), instance_type_info("m5.4xlarge", 16, 64)];
    let settings = Settings::default();
    let check = |class: &EC2NodeClass, gate, infos: Option<&[InstanceTypeInfo]>| {
        kubelet_expression_check(class, gate, infos, &settings)
    };
    let reason = |c: ExpressionCheck| match c {
        ExpressionCheck::Failed { reason, message } => (reason, message),
        other => panic!("{other:?}"),
    };
    assert_eq!(reason(check(&class, false, Some(&infos))).0, "KubeletExpressionsDisabled");
    assert_eq!(check(&class, true, None), ExpressionCheck::NoInstanceTypes);
    assert_eq!(check(&class, true, Some(&[])), ExpressionCheck::NoInstanceTypes);
    // 29 − 160 < 0 on the 16-vCPU type.
    let (r, m) = reason(check(&class, true, Some(&infos)));
    assert_eq!(r, "KubeletExpressionEvaluationFailed");
    assert!(m.contains("m5.4xlarge") && !m.contains("m5.large"), "{m}");
    assert_eq!(check(&class, true, Some(&infos[..1])), ExpressionCheck::Passed);
    class.spec.kubelet.as_mut().unwrap().max_pods = Some(MaxPods::Expression("max_pods -".into()));
    assert_eq!(reason(check(&class, true, None)).0, "KubeletExpressionInvalid", "compile errors need no catalogue");
    class.spec.kubelet.as_mut().unwrap().max_pods = Some(MaxPods::Static(20));
    assert_eq!(check(&class, false, None), ExpressionCheck::Passed);
}

/// The provider hands its DRA gates to the conversion: a GPU type gets the NVIDIA slice template only with
/// `DRANVIDIAGPU` on.
#[tokio::test]
async fn dra_gates_reach_the_conversion() {
    let listed = |gate: bool| async move {
        let clock = FakeClock::default();
        let ec2 = MockEc2::new(Arc::new(clock.clone()));
        let mut gpu = instance_type_info("g4dn.xlarge", 4, 16);
        gpu.gpu_info = Some(crate::ec2::GpuInfo {
            gpus: vec![crate::ec2::GpuDeviceInfo {
                name: Some("T4".into()),
                manufacturer: Some("NVIDIA".into()),
                count: Some(1),
                memory_info: Some(crate::ec2::MemoryInfo { size_in_mib: Some(16384) }),
            }],
            total_gpu_memory_in_mib: Some(16384),
        });
        ec2.set_catalogue(vec![gpu], &["us-west-2a"]);
        let mut options = InstanceTypeProviderOptions::new("us-west-2");
        options.dra = DraTemplates { nvidia_gpu: gate, efa: false };
        let p = InstanceTypeProvider::new(
            Arc::new(ec2),
            Arc::new(clock.clone()),
            SharedPrices::default(),
            UnavailableOfferings::new(Arc::new(clock)),
            options,
        );
        p.list(&class(json!([]))).await.unwrap()
    };
    let on = listed(true).await;
    let drivers: Vec<&str> = on[0].dynamic_resources.iter().map(|t| t.driver.as_str()).collect();
    assert_eq!(drivers, ["gpu.nvidia.com"]);
    assert!(listed(false).await[0].dynamic_resources.is_empty());
}
