//! `karpenter-rs.io/min-nodes` floors: the NodeClaims planned for a pool below its floor, and which removals the
//! floor refuses.

mod common;

use chrono::{DateTime, Utc};
use karpenter_api::loader::load_str;
use karpenter_disruption::Reason;
use karpenter_disruption::floor::{Floors, launches};
use karpenter_scheduler::{ClusterSnapshot, SchedulerOptions};

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z").unwrap().with_timezone(&Utc)
}

fn snapshot(file: &str) -> ClusterSnapshot {
    let path = format!("{}/tests/scenarios/{file}/input.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    ClusterSnapshot::from_objects(&load_str(&text, &path).unwrap()).unwrap()
}

/// The min-nodes scenario with pool floor's annotation set to `value` and optional `limits.nodes`.
fn with_floor(value: &str, nodes_limit: Option<u32>) -> ClusterSnapshot {
    let mut s = snapshot("min-nodes");
    let pool = s.node_pools.iter_mut().find(|p| p.metadata.name.as_deref() == Some("floor")).unwrap();
    pool.metadata.annotations.get_or_insert_default().insert("karpenter-rs.io/min-nodes".into(), value.into());
    if let Some(l) = nodes_limit {
        pool.spec.limits.insert("nodes".into(), karpenter_api::nodeclaim::ResourceQuantity::new(l.to_string()));
    }
    s
}

#[test]
fn a_pool_below_its_floor_gets_the_cheapest_nodes_for_no_pods() {
    let catalogue = common::catalogue();
    let provider = karpenter_testing::vocabulary::aws();
    let snap = with_floor("5", None);
    let pools = common::pools(&snap, &catalogue);
    let out = launches(&snap, &pools, &provider, now(), &SchedulerOptions::default());
    assert_eq!(out.len(), 1, "only pool floor has a floor: {out:?}");
    let l = &out[0];
    assert_eq!((l.node_pool.as_str(), l.floor.min_nodes, l.floor.counted, l.floor.missing()), ("floor", 5, 3, 2));
    assert_eq!(l.plans.len(), 2, "{l:?}");
    assert_eq!(l.problem, None);
    let cheapest = catalogue
        .iter()
        .filter_map(|it| it.offerings.iter().filter(|o| o.available).map(|o| o.price).min_by(f64::total_cmp))
        .min_by(f64::total_cmp)
        .unwrap();
    for p in &l.plans {
        assert_eq!(p.node_pool, "floor");
        assert!(p.pods.is_empty(), "placeholders are not pods: {p:?}");
        assert_eq!(p.price, Some(cheapest), "the cheapest offering of the pool: {p:?}");
    }
    // At the floor (3 claims, floor 3) nothing is planned.
    let snap = with_floor("3", None);
    assert!(
        launches(&snap, &common::pools(&snap, &catalogue), &provider, now(), &SchedulerOptions::default()).is_empty()
    );
}

#[test]
fn limits_cap_the_floors_launches() {
    let catalogue = common::catalogue();
    let provider = karpenter_testing::vocabulary::aws();
    // Floor 5 above limits.nodes 4: the floor in force is 4, and the limit leaves room for one more claim.
    let snap = with_floor("5", Some(4));
    let out = launches(&snap, &common::pools(&snap, &catalogue), &provider, now(), &SchedulerOptions::default());
    assert_eq!(out[0].floor.min_nodes, 4);
    assert_eq!(out[0].plans.len(), 1, "{out:?}");
}

#[test]
fn removals_that_shrink_a_pool_below_its_floor_are_refused_replacements_are_not() {
    let snap = with_floor("3", None);
    let floors = Floors::new(&snap, &snap.node_pools, now());
    let claim = |n: &str| snap.node_claims.iter().find(|c| c.name == n).unwrap();
    let refused = floors.allows([("floor", claim("claim-n1"))], []).unwrap_err();
    assert_eq!(refused, Reason::AtMinNodes { node_pool: "floor".into(), min_nodes: 3, nodes: 3 });
    assert_eq!(floors.allows([("floor", claim("claim-n1"))], ["floor"]), Ok(()), "a replacement in the pool");
    assert!(floors.allows([("floor", claim("claim-n1"))], ["plain"]).is_err(), "a replacement elsewhere shrinks it");
    assert_eq!(floors.allows([("plain", claim("claim-n4"))], []), Ok(()), "no floor on pool plain");
    let two = with_floor("2", None);
    let floors = Floors::new(&two, &two.node_pools, now());
    assert_eq!(floors.allows([("floor", claim("claim-n1"))], []), Ok(()), "one above the floor");
    assert!(floors.allows([("floor", claim("claim-n1")), ("floor", claim("claim-n2"))], []).is_err());
}

#[test]
fn validation_drops_what_a_later_snapshot_s_floor_no_longer_allows() {
    let catalogue = common::catalogue();
    let provider = karpenter_testing::vocabulary::aws();
    let options = karpenter_disruption::DisruptionOptions::default();
    let snap = with_floor("2", None);
    let pools = common::pools(&snap, &catalogue);
    let pass = karpenter_disruption::evaluate(&snap, &pools, &provider, now(), &options);
    let command = pass.commands.first().expect("an emptiness command");
    let nodes = |c: &karpenter_disruption::Command| c.candidates.iter().map(|r| r.node.clone()).collect::<Vec<_>>();
    assert_eq!(nodes(command), ["n1", "n4"], "one of pool floor's three, and pool plain's node");
    // Meanwhile another of pool floor's claims started deleting: only pool plain's node may still go.
    let mut later = snap.clone();
    later.node_claims.iter_mut().find(|c| c.name == "claim-n2").unwrap().marked_for_deletion = true;
    let pools = common::pools(&later, &catalogue);
    let valid =
        karpenter_disruption::validation::validate(command, &later, &pools, &provider, now(), &options).unwrap();
    assert_eq!(nodes(&valid), ["n4"]);
}
