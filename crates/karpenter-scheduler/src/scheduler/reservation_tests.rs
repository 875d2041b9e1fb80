//! Capacity reservations within a pass: claims hold reservations, are pinned to them, and fall through to other
//! offerings when the pass has used them up (v1.15.1, #3456).

use karpenter_api::{labels, load_str};
use karpenter_requirements::labels::RESERVATION_ID;
use karpenter_requirements::{Format, InstanceType, Offering, Overhead, Quantity, Requirement, ResourceList};

use super::{PoolInput, ReservedOfferingMode, SchedulerOptions, schedule};
use crate::check::{check, check_reservations};
use crate::decision::{Decisions, NodeClaimPlan};
use crate::snapshot::ClusterSnapshot;

/// One 4-cpu type, `it-4`: on-demand at 4.0 in zone `z`, and reserved at 0.4 in reservation `cr-1` (zone `z`)
/// with room for `reserved` more instances.
fn catalogue(reserved: i32) -> Vec<InstanceType> {
    let on_demand = Offering::new(
        [
            Requirement::in_values(labels::ZONE, ["z"]),
            Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
            Requirement::does_not_exist(RESERVATION_ID),
        ]
        .into_iter()
        .collect(),
        4.0,
    );
    let mut reservation = Offering::new(
        [
            Requirement::in_values(labels::ZONE, ["z"]),
            Requirement::in_values(labels::CAPACITY_TYPE, ["reserved"]),
            Requirement::in_values(RESERVATION_ID, ["cr-1"]),
        ]
        .into_iter()
        .collect(),
        0.4,
    );
    reservation.reservation_capacity = reserved;
    let capacity = ResourceList::new()
        .with("cpu", Quantity::from_int(4, Format::DecimalSI))
        .with("pods", Quantity::from_int(100, Format::DecimalSI));
    vec![InstanceType::new(
        "it-4",
        [Requirement::in_values(labels::INSTANCE_TYPE, ["it-4"])].into_iter().collect(),
        vec![on_demand, reservation],
        capacity,
        Overhead::default(),
    )]
}

/// A NodePool of `weight` allowing `capacity_types`.
fn pool(name: &str, weight: i32, capacity_types: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  weight: {weight}\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements:\n        - {{key: karpenter.sh/capacity-type, operator: In, values: [{capacity_types}]}}\n---\n"
    )
}

/// A pending pod requesting `cpu`, with an extra `spec` line (a nodeSelector or affinity) when given.
fn pending(name: &str, cpu: &str, spec: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n{spec}  containers: [{{name: c, image: x, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]\n---\n"
    )
}

fn solve(yaml: &str, reserved: i32, mode: ReservedOfferingMode) -> Decisions {
    let objects = load_str(yaml, "input.yaml").expect("input parses");
    let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
    let its = catalogue(reserved);
    let pools: Vec<PoolInput<'_>> =
        snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: &its }).collect();
    let options = SchedulerOptions { reserved_offering_mode: mode, ..Default::default() };
    let provider = karpenter_testing::vocabulary::aws();
    let d = schedule(&snapshot, &pools, &provider, &options);
    check(&snapshot, &pools, &provider, &d).expect("the checker agrees");
    check_reservations(&pools, &d).expect("no reservation is counted on beyond its room");
    d
}

/// The capacity types a claim may launch as.
fn capacity_types(c: &NodeClaimPlan) -> Vec<String> {
    let r = c.requirements.get_ref(labels::CAPACITY_TYPE).expect("a capacity-type requirement");
    let mut v: Vec<String> =
        ["on-demand", "spot", "reserved"].iter().filter(|ct| r.has(ct)).map(|ct| ct.to_string()).collect();
    v.sort();
    v
}

fn reservation_ids(c: &NodeClaimPlan) -> Vec<String> {
    c.requirements
        .get_ref(RESERVATION_ID)
        .map(|r| r.values().as_slice().iter().map(|v| v.to_string()).collect())
        .unwrap_or_default()
}

/// Three pods that each need a node of their own.
fn three_pods() -> String {
    pending("a", "3", "") + &pending("b", "3", "") + &pending("c", "3", "")
}

#[test]
fn claims_hold_the_reservation_until_it_is_full_then_launch_on_demand_in_the_same_pass() {
    let d = solve(&(pool("default", 0, "on-demand, reserved") + &three_pods()), 2, ReservedOfferingMode::Strict);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    assert_eq!(d.new_node_claims.len(), 3);
    let reserved: Vec<&NodeClaimPlan> =
        d.new_node_claims.iter().filter(|c| capacity_types(c) == ["reserved"]).collect();
    assert_eq!(reserved.len(), 2, "{:#?}", d.new_node_claims);
    assert!(reserved.iter().all(|c| reservation_ids(c) == ["cr-1"] && c.price == Some(0.4)));
    let rest: Vec<&NodeClaimPlan> = d.new_node_claims.iter().filter(|c| capacity_types(c) != ["reserved"]).collect();
    assert_eq!(capacity_types(rest[0]), ["on-demand"], "kept off the full reservation: {:#?}", rest[0]);
    assert_eq!(rest[0].price, Some(4.0));
}

#[test]
fn a_reserved_only_pool_that_is_full_falls_through_to_the_next_pool() {
    let yaml = pool("reserved", 10, "reserved") + &pool("fallback", 0, "on-demand") + &three_pods();
    let d = solve(&yaml, 2, ReservedOfferingMode::Strict);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    let mut pools: Vec<&str> = d.new_node_claims.iter().map(|c| c.node_pool.as_str()).collect();
    pools.sort();
    assert_eq!(pools, ["fallback", "reserved", "reserved"]);
}

#[test]
fn a_reserved_only_pool_alone_says_the_reservation_is_used_up() {
    let d = solve(&(pool("reserved", 0, "reserved") + &three_pods()), 2, ReservedOfferingMode::Strict);
    assert_eq!(d.new_node_claims.len(), 2);
    assert_eq!(d.unschedulable.len(), 1, "{:?}", d.unschedulable);
    let reason = d.unschedulable[0].reason.to_string();
    assert!(reason.contains("capacity reservations cr-1 are fully used by this pass"), "{reason}");
}

#[test]
fn a_pod_preferring_reserved_capacity_relaxes_to_on_demand_when_it_is_full() {
    let prefer = "  affinity:\n    nodeAffinity:\n      preferredDuringSchedulingIgnoredDuringExecution:\n        - weight: 1\n          preference: {matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [reserved]}]}\n";
    let yaml = pool("default", 0, "on-demand, reserved") + &pending("a", "3", prefer) + &pending("b", "3", prefer);
    let d = solve(&yaml, 1, ReservedOfferingMode::Strict);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    let mut cts: Vec<Vec<String>> = d.new_node_claims.iter().map(capacity_types).collect();
    cts.sort();
    assert_eq!(cts, [vec!["on-demand".to_owned()], vec!["reserved".to_owned()]]);
}

#[test]
fn strict_mode_keeps_a_claim_on_its_reservation_fallback_lets_it_go() {
    // `big` opens a claim holding cr-1; `od` (on-demand only) would fit beside it.
    let od = "  nodeSelector: {karpenter.sh/capacity-type: on-demand}\n";
    let yaml = pool("default", 0, "on-demand, reserved") + &pending("big", "2", "") + &pending("od", "1", od);
    let strict = solve(&yaml, 5, ReservedOfferingMode::Strict);
    assert_eq!(strict.new_node_claims.len(), 2, "{:#?}", strict.new_node_claims);
    let held = strict.new_node_claims.iter().find(|c| c.pods == ["default/big"]).expect("big's claim");
    assert_eq!(reservation_ids(held), ["cr-1"]);

    let fallback = solve(&yaml, 5, ReservedOfferingMode::Fallback);
    assert_eq!(fallback.new_node_claims.len(), 1, "{:#?}", fallback.new_node_claims);
    let claim = &fallback.new_node_claims[0];
    assert_eq!(capacity_types(claim), ["on-demand"]);
    assert!(reservation_ids(claim).is_empty(), "the reservation is let go: {claim:#?}");
}

#[test]
fn a_reservation_without_room_is_never_counted_on() {
    let d = solve(&(pool("default", 0, "on-demand, reserved") + &three_pods()), 0, ReservedOfferingMode::Strict);
    assert_eq!(d.new_node_claims.len(), 3);
    assert!(d.new_node_claims.iter().all(|c| capacity_types(c) == ["on-demand"] && reservation_ids(c).is_empty()));
}
