//! Unit tests of the pure steps of a launch attempt (the whole launch is covered against the in-memory EC2).

use super::*;
use crate::labels::{CAPACITY_RESERVATION_INTERRUPTIBLE, CAPACITY_RESERVATION_TYPE, INSTANCE_TENANCY};
use karpenter_requirements::labels::{RESERVATION_ID, ZONE};
use karpenter_requirements::{Format, Overhead, Requirements};

fn offering(zone: &str, capacity_type: &str, price: f64, extra: &[(&str, &str)]) -> Offering {
    let reqs: Requirements = [(ZONE, zone), (CAPACITY_TYPE, capacity_type)]
        .into_iter()
        .chain(extra.iter().copied())
        .map(|(k, v)| Requirement::in_values(k, [v]))
        .collect();
    Offering::new(reqs, price)
}

fn instance_type(name: &str, pods: &str, offerings: Vec<Offering>) -> InstanceType {
    let mut capacity = ResourceList::new();
    capacity.insert("pods", pods.parse().unwrap());
    InstanceType::new(name, Requirements::new(), offerings, capacity, Overhead::default())
}

fn names(its: &[InstanceType]) -> Vec<&str> {
    its.iter().map(|it| it.name.as_str()).collect()
}

fn only(key: &str, value: &str) -> Requirements {
    [Requirement::in_values(key, [value])].into_iter().collect()
}

#[test]
fn capacity_type_prefers_reserved_then_spot_then_on_demand_as_allowed() {
    let od = instance_type("m5.large", "29", vec![offering("a", CAPACITY_TYPE_ON_DEMAND, 0.1, &[])]);
    let spot = instance_type("c5.large", "29", vec![offering("a", CAPACITY_TYPE_SPOT, 0.05, &[])]);
    let reserved = instance_type("r5.large", "29", vec![offering("a", CAPACITY_TYPE_RESERVED, 0.0, &[])]);
    let any = Requirements::new();
    assert_eq!(choose_capacity_type(&[&od, &spot, &reserved], &any), CAPACITY_TYPE_RESERVED);
    assert_eq!(choose_capacity_type(&[&od, &spot], &any), CAPACITY_TYPE_SPOT);
    assert_eq!(choose_capacity_type(&[&od, &spot], &only(CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND)), "on-demand");
    // Nothing usable at all: on-demand, and the fleet call reports the lack of capacity.
    assert_eq!(choose_capacity_type(&[&spot], &only(CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND)), "on-demand");
}

#[test]
fn a_capacity_block_launches_the_cheapest_block_type_alone() {
    let block = [(CAPACITY_RESERVATION_TYPE, "capacity-block")];
    let mut candidates = vec![
        instance_type("p5.48xlarge", "100", vec![offering("a", CAPACITY_TYPE_RESERVED, 9.0, &block)]),
        instance_type("m5.large", "29", vec![offering("a", CAPACITY_TYPE_RESERVED, 0.1, &[])]),
        instance_type("p4d.24xlarge", "100", vec![offering("a", CAPACITY_TYPE_RESERVED, 5.0, &block)]),
    ];
    let allow = crate::labels::provider_labels().all_well_known();
    let market = reserved_market(&mut candidates, &Requirements::new(), &allow);
    assert_eq!(market, Some("capacity-block"));
    assert_eq!(names(&candidates), ["p4d.24xlarge"]);
}

#[test]
fn interruptible_reservations_pick_their_market_and_ordinary_ones_none() {
    let interruptible = [(CAPACITY_RESERVATION_INTERRUPTIBLE, "true")];
    let plain = instance_type("m5.large", "29", vec![offering("a", CAPACITY_TYPE_RESERVED, 0.1, &[])]);
    let mut candidates = vec![
        plain.clone(),
        instance_type("c5.large", "29", vec![offering("a", CAPACITY_TYPE_RESERVED, 0.1, &interruptible)]),
    ];
    assert_eq!(
        reserved_market(&mut candidates, &Requirements::new(), &BTreeSet::new()),
        Some("interruptible-capacity-reservation")
    );
    assert_eq!(candidates.len(), 2);
    assert_eq!(reserved_market(&mut vec![plain], &Requirements::new(), &BTreeSet::new()), None);
}

#[test]
fn exotic_types_are_dropped_unless_nothing_else_is_left() {
    let o = || vec![offering("a", CAPACITY_TYPE_ON_DEMAND, 1.0, &[])];
    let metal = instance_type("m5.metal", "737", o());
    let plain = instance_type("m5.large", "29", o());
    assert_eq!(names(&without_exotic(vec![metal.clone(), plain])), ["m5.large"]);
    assert_eq!(names(&without_exotic(vec![metal])), ["m5.metal"]);
}

#[test]
fn spot_dearer_than_the_cheapest_on_demand_is_dropped() {
    let mut candidates = vec![
        instance_type(
            "m5.large",
            "29",
            vec![offering("a", CAPACITY_TYPE_ON_DEMAND, 0.10, &[]), offering("a", CAPACITY_TYPE_SPOT, 0.04, &[])],
        ),
        instance_type("m5.24xlarge", "737", vec![offering("a", CAPACITY_TYPE_SPOT, 2.0, &[])]),
    ];
    drop_spot_above_on_demand(&mut candidates, &Requirements::new());
    assert_eq!(names(&candidates), ["m5.large"]);

    // Without an on-demand offering there is no limit.
    let mut spot_only = vec![instance_type("m5.24xlarge", "737", vec![offering("a", CAPACITY_TYPE_SPOT, 2.0, &[])])];
    drop_spot_above_on_demand(&mut spot_only, &Requirements::new());
    assert!(spot_only[0].offerings[0].available);
}

#[test]
fn min_pods_per_zone_takes_the_smallest_usable_type_of_each_zone() {
    let candidates = vec![
        instance_type(
            "m5.large",
            "29",
            vec![offering("a", CAPACITY_TYPE_ON_DEMAND, 0.1, &[]), offering("b", CAPACITY_TYPE_SPOT, 0.1, &[])],
        ),
        instance_type(
            "m5.xlarge",
            "58",
            vec![offering("a", CAPACITY_TYPE_ON_DEMAND, 0.2, &[]), offering("b", CAPACITY_TYPE_ON_DEMAND, 0.2, &[])],
        ),
    ];
    let min = min_pods_per_zone(&candidates, &Requirements::new(), CAPACITY_TYPE_ON_DEMAND);
    assert_eq!(min, BTreeMap::from([("a", 29), ("b", 58)]));
}

#[test]
fn tenancy_is_dedicated_only_when_the_claim_excludes_default() {
    assert_eq!(tenancy(&Requirements::new()), "default");
    assert_eq!(tenancy(&only(INSTANCE_TENANCY, "default")), "default");
    assert_eq!(tenancy(&only(INSTANCE_TENANCY, "dedicated")), "dedicated");
}

#[test]
fn overrides_are_one_per_type_and_zone_with_a_subnet() {
    let reservation = |id| [(RESERVATION_ID, id)];
    let it = instance_type(
        "m5.large",
        "29",
        vec![
            offering("a", CAPACITY_TYPE_RESERVED, 0.3, &reservation("cr-1")),
            offering("a", CAPACITY_TYPE_RESERVED, 0.1, &reservation("cr-1")),
            offering("b", CAPACITY_TYPE_RESERVED, 0.2, &reservation("cr-1")),
            offering("a", CAPACITY_TYPE_RESERVED, 0.0, &reservation("cr-2")),
            offering("c", CAPACITY_TYPE_RESERVED, 0.1, &reservation("cr-1")),
        ],
    );
    let subnets = BTreeMap::from([("a", "subnet-a"), ("b", "subnet-b")]);
    let reqs = Requirements::new();
    let overrides = group_overrides(&[&it], &reqs, CAPACITY_TYPE_RESERVED, Some("cr-1"), &subnets, "ami-1");
    let got: Vec<(&str, Option<&str>, f64)> =
        overrides.iter().map(|o| (o.availability_zone.as_str(), o.subnet_id.as_deref(), o.priority)).collect();
    assert_eq!(got, [("a", Some("subnet-a"), 0.3), ("b", Some("subnet-b"), 0.2)]);
    assert!(overrides.iter().all(|o| o.image_id.as_deref() == Some("ami-1") && o.instance_type == "m5.large"));
    // Without a reservation every usable offering counts; the first of a zone wins.
    let all = group_overrides(&[&it], &reqs, CAPACITY_TYPE_RESERVED, None, &subnets, "ami-1");
    assert_eq!(all.iter().map(|o| o.priority).collect::<Vec<_>>(), [0.3, 0.2]);
}

#[test]
fn reserved_types_join_one_template_group_per_reservation() {
    let reservation = |id| [(RESERVATION_ID, id)];
    let it = instance_type(
        "m5.large",
        "29",
        vec![
            offering("a", CAPACITY_TYPE_RESERVED, 0.1, &reservation("cr-1")),
            offering("b", CAPACITY_TYPE_RESERVED, 0.1, &reservation("cr-2")),
        ],
    );
    let amis = [Ami { id: "ami-1".into(), ..Ami::default() }];
    let candidates = [it];
    let (reqs, requests) = (Requirements::new(), ResourceList::new());
    let groups = template_groups(&candidates, &amis, &reqs, &requests, CAPACITY_TYPE_RESERVED, None);
    let keys: Vec<&GroupKey> = groups.keys().collect();
    assert_eq!(
        keys,
        [
            &("ami-1".to_owned(), 29, 0, Some("cr-1".to_owned()), NodeReserved::default()),
            &("ami-1".to_owned(), 29, 0, Some("cr-2".to_owned()), NodeReserved::default())
        ]
    );
    let on_demand = template_groups(&candidates, &amis, &reqs, &requests, CAPACITY_TYPE_ON_DEMAND, None);
    assert_eq!(on_demand.keys().collect::<Vec<_>>(), [&("ami-1".to_owned(), 29, 0, None, NodeReserved::default())]);
    assert!(template_groups(&candidates, &[], &reqs, &requests, CAPACITY_TYPE_ON_DEMAND, None).is_empty());
}

#[test]
fn fleet_request_follows_the_market_and_price_overlays() {
    assert_eq!(target_capacity_type(CAPACITY_TYPE_SPOT, None), TargetCapacityType::Spot);
    assert_eq!(target_capacity_type(CAPACITY_TYPE_RESERVED, Some("capacity-block")), TargetCapacityType::CapacityBlock);
    assert_eq!(
        target_capacity_type(CAPACITY_TYPE_RESERVED, Some("interruptible-capacity-reservation")),
        TargetCapacityType::ReservedCapacity
    );
    assert_eq!(target_capacity_type(CAPACITY_TYPE_RESERVED, None), TargetCapacityType::OnDemand);
    assert_eq!(target_capacity_type(CAPACITY_TYPE_ON_DEMAND, None), TargetCapacityType::OnDemand);

    let spot = fleet_request(TargetCapacityType::Spot, false, None, vec![], BTreeMap::new());
    assert_eq!(spot.spot_allocation_strategy.as_deref(), Some("price-capacity-optimized"));
    assert_eq!(spot.on_demand_allocation_strategy, None);
    let overlaid = fleet_request(TargetCapacityType::Spot, true, None, vec![], BTreeMap::new());
    assert_eq!(overlaid.spot_allocation_strategy.as_deref(), Some("capacity-optimized-prioritized"));
    let reserved =
        fleet_request(TargetCapacityType::ReservedCapacity, true, Some("ctx".into()), vec![], BTreeMap::new());
    assert_eq!(reserved.on_demand_allocation_strategy.as_deref(), Some("prioritized"));
    assert!(reserved.interruptible_reservations);
    assert_eq!(reserved.context.as_deref(), Some("ctx"));
    assert_eq!(reserved.total_target_capacity, 1);
}

#[test]
fn reservation_kind_defaults_to_an_uninterruptible_default_reservation() {
    let plain = offering("a", CAPACITY_TYPE_RESERVED, 0.1, &[]);
    assert_eq!(reservation_kind(&plain), ("default".to_owned(), false));
    let block = offering(
        "a",
        CAPACITY_TYPE_RESERVED,
        0.1,
        &[(CAPACITY_RESERVATION_TYPE, "capacity-block"), (CAPACITY_RESERVATION_INTERRUPTIBLE, "true")],
    );
    assert_eq!(reservation_kind(&block), ("capacity-block".to_owned(), true));
}

fn fleet_error(code: &str, zone: &str) -> crate::launch::fleet::FleetError {
    crate::launch::fleet::FleetError {
        error_code: code.into(),
        error_message: format!("{code} message"),
        instance_type: Some("m5.large".into()),
        availability_zone: Some(zone.into()),
        subnet_id: None,
    }
}

#[test]
fn fleet_failure_is_insufficient_capacity_only_when_every_error_is_a_capacity_error() {
    let context = LaunchContext {
        name: "claim",
        capacity_type: CAPACITY_TYPE_ON_DEMAND,
        placement: None,
        scope: None,
        zone_ids: BTreeMap::new(),
        zones_out_of_addresses: BTreeSet::new(),
    };
    let a = OfferingRef::new("m5.large", "a", CAPACITY_TYPE_ON_DEMAND);
    let ice = [fleet_error("InsufficientInstanceCapacity", "a"), fleet_error("InsufficientInstanceCapacity", "a")];
    let err = fleet_failure(&context, vec![a.clone(), a.clone()], &ice);
    assert_eq!(err.kind(), karpenter_cloudprovider::ErrorKind::InsufficientCapacity);
    assert_eq!(err.failed_offerings(), std::slice::from_ref(&a));

    let nothing = fleet_failure(&context, vec![], &[]);
    assert_eq!(nothing.kind(), karpenter_cloudprovider::ErrorKind::InsufficientCapacity);

    let mixed = [fleet_error("InsufficientInstanceCapacity", "a"), fleet_error("UnauthorizedOperation", "b")];
    match fleet_failure(&context, vec![a], &mixed) {
        CloudProviderError::Create { reason, message, .. } => {
            assert_eq!(reason, "Unauthorized");
            assert_eq!(message, "UnauthorizedOperation: UnauthorizedOperation message");
        }
        other => panic!("want a create error, got {other:?}"),
    }
}

#[test]
fn kubelet_expressions_split_template_groups_by_their_values() {
    let with_memory = |name: &str, mib: i64| {
        let mut it = instance_type(name, "20", vec![offering("a", CAPACITY_TYPE_ON_DEMAND, 0.1, &[])]);
        let overhead = Overhead {
            kube_reserved: ResourceList::new().with("memory", Quantity::from_int(mib << 20, Format::BinarySI)),
            ..Overhead::default()
        };
        it =
            InstanceType::new(&it.name, it.requirements.clone(), it.offerings.clone(), it.capacity().clone(), overhead);
        it
    };
    let candidates = [with_memory("m5.large", 320), with_memory("c5.large", 320), with_memory("r5.large", 480)];
    let kubelet = KubeletConfiguration {
        max_pods: Some(MaxPods::Expression("min(max_pods, 20)".into())),
        kube_reserved: [("memory".into(), "11 * max_pods + 100".into()), ("cpu".into(), "100m".into())].into(),
        ..Default::default()
    };
    let amis = [Ami { id: "ami-1".into(), ..Ami::default() }];
    let (reqs, requests) = (Requirements::new(), ResourceList::new());
    let groups = template_groups(&candidates, &amis, &reqs, &requests, CAPACITY_TYPE_ON_DEMAND, Some((&kubelet, true)));
    let got: Vec<(Vec<&str>, &BTreeMap<String, String>)> =
        groups.iter().map(|(k, (_, its))| (its.iter().map(|i| i.name.as_str()).collect(), &k.4.0)).collect();
    let map = |m: &str| BTreeMap::from([("cpu".to_owned(), "100m".to_owned()), ("memory".to_owned(), m.to_owned())]);
    assert_eq!(got, [(vec!["m5.large", "c5.large"], &map("320Mi")), (vec!["r5.large"], &map("480Mi"))]);
    // Without expressions the maps stay as written (no per-type split).
    let plain = KubeletConfiguration { kube_reserved: [("cpu".into(), "100m".into())].into(), ..Default::default() };
    let groups = template_groups(&candidates, &amis, &reqs, &requests, CAPACITY_TYPE_ON_DEMAND, Some((&plain, true)));
    assert_eq!(groups.len(), 1);
    // Gate off: the expressions are left out, the quantity stays.
    let off = template_groups(&candidates, &amis, &reqs, &requests, CAPACITY_TYPE_ON_DEMAND, Some((&kubelet, false)));
    let maps: Vec<&BTreeMap<String, String>> = off.keys().map(|k| &k.4.0).collect();
    assert_eq!(maps, [&BTreeMap::from([("cpu".to_owned(), "100m".to_owned())])]);
}
