//! Cluster-wide limits: one budget over every NodePool's nodes, in-flight claims and the pass's new claims.

use karpenter_api::settings::parse_cluster_limits;
use karpenter_api::{labels, load_str};
use karpenter_requirements::{Format, InstanceType, Offering, Overhead, Quantity, Requirement, ResourceList};

use super::{PoolInput, SchedulerOptions, schedule};
use crate::check::{check, check_cluster_limits};
use crate::decision::Decisions;
use crate::simulation::{SimulationView, Simulator};
use crate::snapshot::ClusterSnapshot;

/// `it-2` and `it-4` (cpu only, priced by cpu) and `gpu-4` (4 cpu, one GPU, dearer).
fn catalogue() -> Vec<InstanceType> {
    [("it-2", 2i64, 0i64, 2.0), ("it-4", 4, 0, 4.0), ("gpu-4", 4, 1, 10.0)]
        .into_iter()
        .map(|(name, cpu, gpu, price)| {
            let offering = Offering::new(
                [
                    Requirement::in_values(labels::ZONE, ["z"]),
                    Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
                ]
                .into_iter()
                .collect(),
                price,
            );
            let mut capacity = ResourceList::new()
                .with("cpu", Quantity::from_int(cpu, Format::DecimalSI))
                .with("pods", Quantity::from_int(100, Format::DecimalSI));
            if gpu > 0 {
                capacity.insert("nvidia.com/gpu", Quantity::from_int(gpu, Format::DecimalSI));
            }
            InstanceType::new(
                name,
                [Requirement::in_values(labels::INSTANCE_TYPE, [name])].into_iter().collect(),
                vec![offering],
                capacity,
                Overhead::default(),
            )
        })
        .collect()
}

fn pool(name: &str, weight: i32) -> String {
    format!(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {{name: {name}}}\nspec:\n  weight: {weight}\n  template:\n    spec:\n      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n      requirements: []\n---\n"
    )
}

/// A pending pod requesting `cpu` (and `gpu` GPUs when not zero), on NodePool `on` when given.
fn pending(name: &str, cpu: &str, gpu: u32, on: Option<&str>) -> String {
    let selector = on.map(|p| format!("  nodeSelector: {{karpenter.sh/nodepool: {p}}}\n")).unwrap_or_default();
    let gpu = if gpu > 0 { format!(", nvidia.com/gpu: \"{gpu}\"") } else { String::new() };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n{selector}  containers: [{{name: c, image: x, resources: {{requests: {{cpu: \"{cpu}\"{gpu}}}, limits: {{}}}}}}]\n---\n"
    )
}

fn solve(yaml: &str, limits: &str) -> (ClusterSnapshot, Decisions) {
    let objects = load_str(yaml, "input.yaml").expect("input parses");
    let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
    let its = catalogue();
    let pools: Vec<PoolInput<'_>> =
        snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: &its }).collect();
    let options = SchedulerOptions { cluster_limits: parse_cluster_limits(limits).unwrap(), ..Default::default() };
    let provider = karpenter_testing::vocabulary::aws();
    let d = schedule(&snapshot, &pools, &provider, &options);
    check(&snapshot, &pools, &provider, &d).expect("the checker agrees");
    check_cluster_limits(&snapshot, &pools, &options.cluster_limits, &d).expect("within the cluster limits");
    (snapshot, d)
}

fn reasons(d: &Decisions) -> Vec<(String, String)> {
    d.unschedulable.iter().map(|u| (u.pod.to_string(), u.reason.to_string())).collect()
}

fn pools_of(d: &Decisions) -> Vec<&str> {
    d.new_node_claims.iter().map(|c| c.node_pool.as_str()).collect()
}

#[test]
fn two_node_pools_share_one_budget() {
    // `big` (sorted first: more cpu) opens a 4-cpu claim on pool a; the first 3-cpu pod takes pool b's first
    // claim; the cluster's 8 cpu are then spent, although pool b alone has no limit and used only 4.
    let yaml = pool("a", 0)
        + &pool("b", 0)
        + &pending("big", "3500m", 0, Some("a"))
        + &pending("b1", "3", 0, Some("b"))
        + &pending("b2", "3", 0, Some("b"));
    let (_, unlimited) = solve(&yaml, "");
    assert_eq!(unlimited.new_node_claims.len(), 3, "without a cluster limit every pod gets a node");
    let (_, d) = solve(&yaml, "cpu=8");
    assert_eq!(pools_of(&d), ["a", "b"]);
    assert_eq!(d.unschedulable.len(), 1);
    let (pod, reason) = &reasons(&d)[0];
    assert!(pod == "default/b1" || pod == "default/b2", "{pod}");
    assert!(reason.contains("cluster limit cpu 8 would be exceeded (0 remaining)"), "{reason}");
    assert_eq!(d.unschedulable[0].reason.code(), "NodePoolLimits");
}

#[test]
fn in_flight_claims_and_deleting_nodes_count() {
    // A NodeClaim of pool a still launching and a node of pool a being deleted hold 4 cpu each: with 12 cpu for
    // the cluster, one 4-cpu node is left for pool b's two pods.
    let in_flight = "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: a-launching, labels: {karpenter.sh/nodepool: a}}\nspec:\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n  requirements: []\nstatus: {capacity: {cpu: \"4\", pods: \"100\"}, allocatable: {cpu: \"4\", pods: \"100\"}}\n---\n";
    let deleting = "apiVersion: v1\nkind: Node\nmetadata: {name: a-old, deletionTimestamp: \"2026-01-01T00:00:00Z\", finalizers: [karpenter.sh/termination], labels: {karpenter.sh/nodepool: a, karpenter.sh/initialized: \"true\"}}\nstatus: {capacity: {cpu: \"4\", pods: \"100\"}, allocatable: {cpu: \"4\", pods: \"100\"}}\n---\n";
    let pods = pending("b1", "3", 0, Some("b")) + &pending("b2", "3", 0, Some("b"));
    let yaml = pool("a", 0) + &pool("b", 0) + in_flight + deleting + &pods;
    let (snapshot, d) = solve(&yaml, "cpu=12");
    assert_eq!(snapshot.in_flight_claims().count(), 1);
    assert!(snapshot.nodes.iter().any(|n| n.marked_for_deletion));
    assert_eq!(crate::cluster_usage(&snapshot).get_or_zero("cpu").value(), Some(8));
    assert_eq!(pools_of(&d), ["b"]);
    assert!(reasons(&d)[0].1.contains("cluster limit cpu 12 would be exceeded (0 remaining)"), "{:?}", reasons(&d));
    // Without the in-flight claim there is room for both.
    let (_, d) = solve(&(pool("a", 0) + &pool("b", 0) + deleting + &pods), "cpu=12");
    assert_eq!(pools_of(&d), ["b", "b"]);
}

#[test]
fn node_count_limit() {
    let yaml = pool("a", 0) + &pool("b", 10) + &pending("p1", "3", 0, None) + &pending("p2", "3", 0, None);
    let (_, d) = solve(&yaml, "nodes=1");
    assert_eq!(d.new_node_claims.len(), 1);
    assert_eq!(d.unschedulable.len(), 1);
    // Both NodePools say why: the cluster has no node left.
    let reason = &reasons(&d)[0].1;
    assert_eq!(reason, "NodePool b: cluster limit nodes 1 reached; NodePool a: cluster limit nodes 1 reached");
    // An existing node of any NodePool counts; a node no NodePool owns does not.
    let node = |name: &str, pool: Option<&str>| {
        let label = pool.map(|p| format!(", karpenter.sh/nodepool: {p}")).unwrap_or_default();
        format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{karpenter.sh/initialized: \"true\"{label}}}}}\nspec: {{taints: [{{key: dedicated, effect: NoSchedule}}]}}\nstatus: {{capacity: {{cpu: \"4\", pods: \"100\"}}, allocatable: {{cpu: \"4\", pods: \"100\"}}}}\n---\n"
        )
    };
    let (_, d) = solve(&(yaml.clone() + &node("mine", Some("a"))), "nodes=2");
    assert_eq!(d.new_node_claims.len(), 1);
    let (_, d) = solve(&(yaml + &node("unmanaged", None)), "nodes=2");
    assert_eq!(d.new_node_claims.len(), 2);
}

#[test]
fn extended_resource_limit() {
    // The GPU pods are sorted first (more cpu): the first takes the one GPU; the second cannot open a node.
    let yaml =
        pool("a", 0) + &pending("g1", "1", 1, None) + &pending("g2", "1", 1, None) + &pending("c", "500m", 0, None);
    let (_, d) = solve(&yaml, "nvidia.com/gpu=1");
    let types: Vec<Vec<&str>> = d.new_node_claims.iter().map(|c| c.instance_type_names().collect()).collect();
    assert_eq!(types, [["gpu-4"]]);
    let (_, unlimited) = solve(&yaml, "");
    assert_eq!(unlimited.new_node_claims.len(), 2);
    // As with a NodePool's limits, a claim counts the largest of its options: a CPU-only pod's claim that may
    // still become a GPU type takes the GPU budget too, and the GPU pods then find none.
    let (_, d) =
        solve(&(pool("a", 0) + &pending("c", "3500m", 0, None) + &pending("g", "1", 1, None)), "nvidia.com/gpu=1");
    assert_eq!(d.new_node_claims.len(), 1);
    assert!(reasons(&d)[0].1.contains("cluster limit nvidia.com/gpu 1 would be exceeded (0 remaining)"));
    let reasons = reasons(&d);
    assert_eq!(reasons.len(), 1);
    assert!(reasons[0].0.starts_with("default/g"));
    assert!(reasons[0].1.contains("cluster limit nvidia.com/gpu 1 would be exceeded (0 remaining)"), "{reasons:?}");
}

#[test]
fn cpu_only_pods_keep_to_types_within_the_budget() {
    // 6 cpu left: the first claim may be it-4 (counted 4), the next only it-2.
    let yaml = pool("a", 0) + &pending("p1", "1500m", 0, None) + &pending("p2", "1500m", 0, None);
    let (_, d) = solve(&(yaml + &pending("p3", "1500m", 0, None)), "cpu=6");
    assert!(d.unschedulable.is_empty(), "{:?}", reasons(&d));
    let counted: i64 =
        d.new_node_claims.iter().map(|c| if c.instance_type_names().any(|t| t != "it-2") { 4 } else { 2 }).sum();
    assert!(counted <= 6, "{:?}", d.new_node_claims.iter().map(|c| &c.instance_types).collect::<Vec<_>>());
}

#[test]
fn disruption_simulation_honours_the_cluster_limit() {
    // Replacing the node of pool a needs a new node, and the cluster is at its node limit: the node being
    // replaced still counts (it is only gone once its replacement is up), so the simulation finds no room.
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: a-1, labels: {karpenter.sh/nodepool: a, karpenter.sh/initialized: \"true\"}}\nstatus: {capacity: {cpu: \"4\", pods: \"100\"}, allocatable: {cpu: \"4\", pods: \"100\"}}\n---\n";
    let bound = "apiVersion: v1\nkind: Pod\nmetadata: {name: w, namespace: default}\nspec:\n  nodeName: a-1\n  containers: [{name: c, image: x, resources: {requests: {cpu: \"3\"}}}]\nstatus: {phase: Running}\n---\n";
    let objects = load_str(&(pool("a", 0) + node + bound), "input.yaml").unwrap();
    let snapshot = ClusterSnapshot::from_objects(&objects).unwrap();
    let its = catalogue();
    let pools: Vec<PoolInput<'_>> =
        snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: &its }).collect();
    let provider = karpenter_testing::vocabulary::aws();
    let removed = ["a-1".to_owned()].into_iter().collect();
    let pods: Vec<_> = snapshot.bound_pods.iter().map(|p| p.as_ref()).collect();
    let view = SimulationView { removed: &removed, pods, ..Default::default() };
    for (limits, placed) in [("nodes=1", false), ("nodes=2", true), ("", true)] {
        let options = SchedulerOptions { cluster_limits: parse_cluster_limits(limits).unwrap(), ..Default::default() };
        let d = Simulator::new(&snapshot, &pools, &provider, &options).simulate(&view);
        assert_eq!(d.new_node_claims.len() == 1, placed, "{limits}: {:?}", reasons(&d));
        if !placed {
            assert!(reasons(&d)[0].1.contains("cluster limit nodes 1 reached"), "{:?}", reasons(&d));
        }
    }
}
