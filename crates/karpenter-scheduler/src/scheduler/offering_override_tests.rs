//! Offerings with capacity and overhead overrides (upstream v1.14, #3109): an instance type fits a pod when one
//! of its offering groups has an offering compatible with the claim and an allocatable that holds the claim's
//! requests, on new claims and on claims the pass already opened.

use karpenter_api::{labels, load_str};
use karpenter_requirements::{Format, InstanceType, Offering, Overhead, Quantity, Requirement, ResourceList};

use super::{PoolInput, SchedulerOptions, schedule};
use crate::check::check;
use crate::decision::{Decisions, RejectionKind, UnschedulableReason};
use crate::snapshot::ClusterSnapshot;

const SLOTS: &str = "test.com/extended-slots";

fn q(s: &str) -> Quantity {
    s.parse().expect("quantity")
}

/// An on-demand offering in `zone` at `price`.
fn offering(zone: &str, price: f64) -> Offering {
    Offering::new(
        [Requirement::in_values(labels::ZONE, [zone]), Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"])]
            .into_iter()
            .collect(),
        price,
    )
}

/// `offering` with 4 slots of capacity and 1Gi of system-reserved memory, as upstream's spec builds them.
fn slotted(o: Offering) -> Offering {
    o.with_capacity_override(ResourceList::new().with(SLOTS, q("4"))).with_overhead_override(Overhead {
        system_reserved: ResourceList::new().with("memory", q("1Gi")),
        ..Default::default()
    })
}

/// A 4-CPU, 8Gi type with kube-reserved 100m / 10Mi (upstream's fake overhead).
fn instance_type(name: &str, offerings: Vec<Offering>) -> InstanceType {
    let capacity = ResourceList::new()
        .with("cpu", Quantity::from_int(4, Format::DecimalSI))
        .with("memory", q("8Gi"))
        .with("pods", Quantity::from_int(110, Format::DecimalSI));
    let overhead = Overhead {
        kube_reserved: ResourceList::new().with("cpu", q("100m")).with("memory", q("10Mi")),
        ..Default::default()
    };
    InstanceType::new(
        name,
        [
            Requirement::in_values(labels::INSTANCE_TYPE, [name]),
            Requirement::in_values(labels::ZONE, ["z1", "z2"]),
            Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
        ]
        .into_iter()
        .collect(),
        offerings,
        capacity,
        overhead,
    )
}

/// `override-capable`: plain offerings in z1 and z2 plus, beside them, the `overrides` (at price 1.0); and
/// `normal`, cheaper, without overrides.
fn catalogue(overrides: Vec<Offering>) -> Vec<InstanceType> {
    let mut offerings = vec![offering("z1", 1.0), offering("z2", 1.0)];
    offerings.extend(overrides);
    vec![
        instance_type("override-capable", offerings),
        instance_type("normal", vec![offering("z1", 0.5), offering("z2", 0.5)]),
    ]
}

/// A NodePool and `pods` pending pods requesting `requests` (YAML flow map), with an extra `spec` line.
fn input(pods: usize, requests: &str, spec: &str) -> String {
    let mut yaml = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n---\n".to_owned();
    for i in 0..pods {
        yaml += &format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, namespace: default}}\nspec:\n{spec}  containers: [{{name: c, image: x, resources: {{requests: {requests}, limits: {requests}}}}}]\n---\n"
        );
    }
    yaml
}

fn solve(yaml: &str, its: &[InstanceType]) -> Decisions {
    let objects = load_str(yaml, "input.yaml").expect("input parses");
    let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
    let pools: Vec<PoolInput<'_>> =
        snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: its }).collect();
    let provider = karpenter_testing::vocabulary::aws();
    let d = schedule(&snapshot, &pools, &provider, &SchedulerOptions::default());
    check(&snapshot, &pools, &provider, &d).expect("the checker agrees");
    d
}

fn options(d: &Decisions) -> Vec<Vec<String>> {
    d.new_node_claims.iter().map(|c| c.instance_type_names().map(str::to_owned).collect()).collect()
}

#[test]
fn a_pod_requesting_an_override_resource_gets_only_the_types_whose_offerings_provide_it() {
    let its = catalogue(vec![slotted(offering("z1", 1.0)), slotted(offering("z2", 1.0))]);
    let d = solve(&input(1, &format!("{{{SLOTS}: \"1\"}}"), ""), &its);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    assert_eq!(options(&d), [["override-capable"]]);
    // A plain pod still has both types, the cheaper first: the override offerings change nothing for it.
    let d = solve(&input(1, "{cpu: \"1\"}", ""), &its);
    assert_eq!(options(&d), [["normal", "override-capable"]]);
}

#[test]
fn claims_opened_in_the_pass_count_the_override_groups_room() {
    // 4 slots per node: six one-slot pods need two claims (the second pod onward joins the open claim while the
    // override group still holds the claim's slots).
    let its = catalogue(vec![slotted(offering("z1", 1.0)), slotted(offering("z2", 1.0))]);
    let d = solve(&input(6, &format!("{{{SLOTS}: \"1\"}}"), ""), &its);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    let mut sizes: Vec<usize> = d.new_node_claims.iter().map(|c| c.pods.len()).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, [2, 4]);
}

#[test]
fn override_offerings_that_are_unavailable_give_no_room() {
    let its = catalogue(vec![slotted(offering("z1", 1.0)).unavailable(), slotted(offering("z2", 1.0)).unavailable()]);
    let d = solve(&input(1, &format!("{{{SLOTS}: \"1\"}}"), ""), &its);
    assert!(d.new_node_claims.is_empty(), "{:?}", d.new_node_claims);
    assert_eq!(d.unschedulable.len(), 1);
    let UnschedulableReason::NodePools(rejections) = &d.unschedulable[0].reason else {
        panic!("{:?}", d.unschedulable)
    };
    assert_eq!(rejections[0].kind, RejectionKind::Resources, "{rejections:?}");
    assert!(rejections[0].detail.contains(SLOTS), "{rejections:?}");
}

#[test]
fn the_group_that_holds_the_pod_must_have_an_offering_the_claim_allows() {
    // Slots are offered in z2 only: a pod held to z1 cannot have them, a pod held to z2 can.
    let its = catalogue(vec![slotted(offering("z2", 1.0))]);
    let slot = format!("{{{SLOTS}: \"1\"}}");
    let d = solve(&input(1, &slot, "  nodeSelector: {topology.kubernetes.io/zone: z1}\n"), &its);
    assert!(d.new_node_claims.is_empty(), "{:?}", d.new_node_claims);
    let d = solve(&input(1, &slot, "  nodeSelector: {topology.kubernetes.io/zone: z2}\n"), &its);
    assert_eq!(options(&d), [["override-capable"]]);
}

#[test]
fn one_group_must_hold_every_request_of_the_claim() {
    // 7.5Gi fits the base group (8Gi − 10Mi) but not the override group (8Gi − 1Gi); slots only the latter.
    let its = catalogue(vec![slotted(offering("z1", 1.0)), slotted(offering("z2", 1.0))]);
    let d = solve(&input(1, "{memory: 7.5Gi}", ""), &its);
    assert_eq!(options(&d), [["normal", "override-capable"]]);
    let d = solve(&input(1, &format!("{{memory: 7.5Gi, {SLOTS}: \"1\"}}"), ""), &its);
    assert!(d.new_node_claims.is_empty(), "{:?}", d.new_node_claims);
    assert_eq!(d.unschedulable.len(), 1);
}
