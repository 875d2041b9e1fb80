//! `SchedulerOptions::parallelism` (from `CPU_REQUESTS`) changes how fast existing nodes are checked, never what
//! is decided: random clusters with more existing nodes than `PARALLEL_MIN_EXISTING` (so the threads really
//! run) are solved with one thread and with several, and the decisions must be identical.

mod common;

use std::collections::BTreeMap;

use karpenter_api::IntoSharedPod;
use karpenter_requirements::{Format, Quantity, ResourceList};
use karpenter_scheduler::scheduler::PARALLEL_MIN_EXISTING;
use karpenter_scheduler::{ClusterSnapshot, NodeInfo, PoolInput, SchedulerOptions, schedule};
use karpenter_testing::{NodePoolOptions, PodOptions, node_pool, pod, pod_affinity_term, taint, topology_spread};
use proptest::prelude::*;

const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// An existing node: (zone, free millicores, free GiB, arch is arm64, tainted).
type NodeGen = (usize, i64, i64, bool, bool);

fn node_gen() -> impl Strategy<Value = NodeGen> {
    (
        0usize..3,
        prop::sample::select(vec![0i64, 200, 600, 1500, 4000]),
        0i64..8,
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
    )
}

/// A pending pod: (millicores, MiB, class: 0 generic, 1 zonal spread, 2 hostname spread, 3 zonal affinity,
/// 4 hostname anti-affinity, arm64 only).
type PodGen = (i64, i64, usize, bool);

fn pod_gen() -> impl Strategy<Value = PodGen> {
    (
        prop::sample::select(vec![100i64, 250, 500, 1000, 3000]),
        prop::sample::select(vec![128i64, 512, 2048, 6000]),
        0usize..5,
        prop::bool::weighted(0.2),
    )
}

fn existing_node(i: usize, (zone, cpu, gib, arm, tainted): NodeGen) -> NodeInfo {
    let name = format!("existing-{i:04}");
    let labels = BTreeMap::from([
        (HOSTNAME.to_string(), name.clone()),
        (ZONE.to_string(), common::ZONES[zone].to_string()),
        ("kubernetes.io/arch".to_string(), if arm { "arm64" } else { "amd64" }.to_string()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
    ]);
    let allocatable = ResourceList::new()
        .with("cpu", Quantity::from_milli(cpu))
        .with("memory", Quantity::from_int(gib << 30, Format::BinarySI))
        .with("pods", Quantity::from_int(110, Format::DecimalSI));
    let taints = if tainted { vec![taint("dedicated", Some("x"), "NoSchedule")] } else { vec![] };
    NodeInfo {
        name,
        labels,
        taints,
        capacity: allocatable.clone(),
        allocatable,
        initialized: true,
        ..Default::default()
    }
}

fn pending_pod(i: usize, (cpu, mib, class, arm): PodGen) -> PodOptions {
    let label = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
    let (labels, topology) = match class {
        1 => (
            label("app", "zonal"),
            PodOptions {
                topology_spread: vec![topology_spread(ZONE, 1, &label("app", "zonal"))],
                ..Default::default()
            },
        ),
        2 => (
            label("app", "host"),
            PodOptions {
                topology_spread: vec![topology_spread(HOSTNAME, 1, &label("app", "host"))],
                ..Default::default()
            },
        ),
        3 => (
            label("app", "together"),
            PodOptions {
                pod_requirements: vec![pod_affinity_term(ZONE, &label("app", "together"))],
                ..Default::default()
            },
        ),
        4 => (
            label("app", "apart"),
            PodOptions {
                pod_anti_requirements: vec![pod_affinity_term(HOSTNAME, &label("app", "apart"))],
                ..Default::default()
            },
        ),
        _ => (label("app", "generic"), PodOptions::default()),
    };
    let mut node_selector = BTreeMap::new();
    if arm {
        node_selector.insert("kubernetes.io/arch".to_string(), "arm64".to_string());
    }
    let (cpu, mem) = (format!("{cpu}m"), format!("{mib}Mi"));
    PodOptions {
        name: Some(format!("p-{i:03}")),
        requests: [("cpu", cpu.as_str()), ("memory", mem.as_str())].into(),
        node_selector,
        labels,
        ..topology
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn decisions_do_not_depend_on_the_thread_count(
        nodes in prop::collection::vec(node_gen(), PARALLEL_MIN_EXISTING + 1..PARALLEL_MIN_EXISTING + 200),
        pods in prop::collection::vec(pod_gen(), 1..40),
        threads in 2usize..6,
    ) {
        let mut snapshot = ClusterSnapshot::new();
        snapshot.node_pools.push(node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }));
        snapshot.nodes = nodes.iter().enumerate().map(|(i, g)| existing_node(i, *g)).collect();
        snapshot.pending_pods = pods.iter().enumerate().map(|(i, g)| pod(pending_pod(i, *g)).into_shared()).collect();
        let catalogue = common::standard();
        let inputs: Vec<PoolInput<'_>> =
            snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: &catalogue }).collect();
        let provider = karpenter_testing::vocabulary::aws();
        let one = schedule(&snapshot, &inputs, &provider, &SchedulerOptions::default());
        let many = schedule(&snapshot, &inputs, &provider, &SchedulerOptions { parallelism: threads, ..Default::default() });
        prop_assert!(!one.existing_nodes.is_empty() || pods.is_empty() || nodes.iter().all(|n| n.1 == 0));
        prop_assert_eq!(one.to_json(), many.to_json());
    }
}
