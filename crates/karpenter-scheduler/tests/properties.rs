//! Property tests: random small clusters; the checker must pass and every pod reported unschedulable must
//! fit no single empty instance type of any NodePool it is compatible with.

mod common;

use std::collections::BTreeMap;

use karpenter_api::IntoSharedPod;
use karpenter_scheduler::check::{check, check_reservations, fits_some_empty_instance_type};
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions, schedule};
use karpenter_testing::{
    DaemonSetOptions, NodePoolOptions, PodOptions, TaintEffect, daemon_set, karpenter_taint, node_pool,
    nodepool_requirement, pod, pod_affinity_term, toleration, topology_spread,
};
use proptest::prelude::*;

const ARCHES: [&str; 2] = ["amd64", "arm64"];
const FAMILIES: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
struct ItGen {
    cpu: i64,
    gib_per_cpu: i64,
    arch: usize,
    family: usize,
    zones: Vec<bool>,
    available: bool,
    /// A capacity reservation for the type in the first zone, with this many instances left (an EC2
    /// reservation is for one instance type, so each type has its own).
    reserved: Option<i32>,
}

#[derive(Debug, Clone)]
struct PoolGen {
    arch: Option<usize>,
    families: Vec<bool>,
    tainted: bool,
    weight: i32,
}

#[derive(Debug, Clone)]
struct PodGen {
    cpu_milli: i64,
    mem_mib: i64,
    arch: Option<usize>,
    family: Option<usize>,
    zone: Option<usize>,
    tolerates: bool,
    /// 0 generic, 1 zonal spread, 2 hostname spread, 3 zonal self-affinity (two groups), 4 hostname
    /// anti-affinity among the class (the classes of upstream's scheduling benchmark).
    class: usize,
    group: usize,
}

fn it_gen() -> impl Strategy<Value = ItGen> {
    (
        1i64..=32,
        prop::sample::select(vec![1i64, 2, 4, 8]),
        0usize..2,
        0usize..3,
        prop::collection::vec(any::<bool>(), 3),
        prop::bool::weighted(0.9),
        prop::option::weighted(0.3, 0i32..3),
    )
        .prop_map(|(cpu, gib_per_cpu, arch, family, zones, available, reserved)| ItGen {
            cpu,
            gib_per_cpu,
            arch,
            family,
            zones,
            available,
            reserved,
        })
}

fn pool_gen() -> impl Strategy<Value = PoolGen> {
    (prop::option::of(0usize..2), prop::collection::vec(any::<bool>(), 3), prop::bool::weighted(0.3), 0i32..3)
        .prop_map(|(arch, families, tainted, weight)| PoolGen { arch, families, tainted, weight })
}

fn pod_gen() -> impl Strategy<Value = PodGen> {
    (
        prop::sample::select(vec![100i64, 250, 500, 1000, 1500, 3000, 8000, 40000]),
        prop::sample::select(vec![100i64, 512, 1024, 4096, 16384, 100_000]),
        prop::option::weighted(0.3, 0usize..2),
        prop::option::weighted(0.2, 0usize..3),
        prop::option::weighted(0.2, 0usize..4),
        any::<bool>(),
        0usize..5,
        0usize..2,
    )
        .prop_map(|(cpu_milli, mem_mib, arch, family, zone, tolerates, class, group)| PodGen {
            cpu_milli,
            mem_mib,
            arch,
            family,
            zone,
            tolerates,
            class,
            group,
        })
}

fn catalogue(its: &[ItGen]) -> Vec<karpenter_requirements::InstanceType> {
    its.iter()
        .enumerate()
        .map(|(i, g)| {
            let mut offerings = Vec::new();
            for (z, on) in common::ZONES.iter().zip(&g.zones) {
                if *on {
                    let price = 0.05 * g.cpu as f64 + 0.01 * (g.cpu * g.gib_per_cpu) as f64;
                    offerings.push((z.to_string(), "on-demand".to_string(), price, g.available));
                    offerings.push((z.to_string(), "spot".to_string(), price * 0.5, g.available));
                }
            }
            let it = common::build(&common::Spec {
                name: format!("it-{i}"),
                family: FAMILIES[g.family].to_string(),
                arch: ARCHES[g.arch],
                cpu_milli: g.cpu * 1000,
                memory_mib: g.cpu * g.gib_per_cpu * 1024,
                pods: 110,
                gpus: 0,
                offerings,
                overhead_cpu_milli: 100,
                overhead_memory_mib: 100,
            });
            match g.reserved {
                Some(left) if g.zones[0] => {
                    let price = 0.005 * g.cpu as f64;
                    common::with_reservation(it, common::ZONES[0], &format!("cr-{i}"), left, price, g.available)
                }
                _ => it,
            }
        })
        .collect()
}

fn class_of(g: &PodGen) -> (BTreeMap<String, String>, PodOptions) {
    let label = |k: &str, v: &str| BTreeMap::from([(k.to_string(), v.to_string())]);
    match g.class {
        1 => {
            let l = label("app", "zonal-spread");
            let o = PodOptions { topology_spread: vec![topology_spread(ZONE, 1, &l)], ..Default::default() };
            (l, o)
        }
        2 => {
            let l = label("app", "host-spread");
            let o = PodOptions { topology_spread: vec![topology_spread(HOSTNAME, 1, &l)], ..Default::default() };
            (l, o)
        }
        3 => {
            let l = label("affinity-group", if g.group == 0 { "g0" } else { "g1" });
            let o = PodOptions { pod_requirements: vec![pod_affinity_term(ZONE, &l)], ..Default::default() };
            (l, o)
        }
        4 => {
            let l = label("app", "anti");
            let o = PodOptions { pod_anti_requirements: vec![pod_affinity_term(HOSTNAME, &l)], ..Default::default() };
            (l, o)
        }
        _ => (label("generic", "x"), PodOptions::default()),
    }
}

const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn decisions_pass_the_checker_and_unschedulable_pods_have_no_place(
        its in prop::collection::vec(it_gen(), 5..30),
        pools in prop::collection::vec(pool_gen(), 1..4),
        pods in prop::collection::vec(pod_gen(), 1..30),
        daemon_cpu in prop::option::of(prop::sample::select(vec![100i64, 500, 2000])),
    ) {
        let catalogue = catalogue(&its);
        let mut snapshot = ClusterSnapshot::new();
        for (i, p) in pools.iter().enumerate() {
            let mut requirements = Vec::new();
            if let Some(a) = p.arch {
                requirements.push(nodepool_requirement("kubernetes.io/arch", "In", &[ARCHES[a]]));
            }
            let fams: Vec<&str> = FAMILIES.iter().zip(&p.families).filter(|(_, on)| **on).map(|(f, _)| *f).collect();
            if !fams.is_empty() {
                requirements.push(nodepool_requirement(common::FAMILY, "In", &fams));
            }
            snapshot.node_pools.push(node_pool(NodePoolOptions {
                name: Some(format!("pool-{i}")),
                requirements,
                taints: if p.tainted { vec![karpenter_taint("dedicated", Some("x"), TaintEffect::NoSchedule)] } else { vec![] },
                weight: Some(p.weight),
                ..Default::default()
            }));
        }
        if let Some(cpu) = daemon_cpu {
            snapshot.daemon_sets.push(daemon_set(DaemonSetOptions {
                name: Some("agent".into()),
                namespace: Some("kube-system".into()),
                pod: PodOptions { requests: [("cpu", format!("{cpu}m").as_str())].into(), ..Default::default() },
                ..Default::default()
            }));
        }
        for (i, g) in pods.iter().enumerate() {
            let mut node_selector = BTreeMap::new();
            if let Some(a) = g.arch { node_selector.insert("kubernetes.io/arch".to_string(), ARCHES[a].to_string()); }
            if let Some(f) = g.family { node_selector.insert(common::FAMILY.to_string(), FAMILIES[f].to_string()); }
            if let Some(z) = g.zone {
                let zone = common::ZONES.get(z).copied().unwrap_or("nowhere");
                node_selector.insert("topology.kubernetes.io/zone".to_string(), zone.to_string());
            }
            let cpu = format!("{}m", g.cpu_milli);
            let mem = format!("{}Mi", g.mem_mib);
            let (labels, topology) = class_of(g);
            snapshot.pending_pods.push(pod(PodOptions {
                name: Some(format!("p-{i:02}")),
                requests: [("cpu", cpu.as_str()), ("memory", mem.as_str())].into(),
                node_selector,
                tolerations: if g.tolerates { vec![toleration("dedicated", None, None)] } else { vec![] },
                labels,
                ..topology
            }).into_shared());
        }
        let inputs: Vec<PoolInput<'_>> =
            snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: &catalogue }).collect();
        let provider = karpenter_testing::vocabulary::aws();
        let decisions = schedule(&snapshot, &inputs, &provider, &SchedulerOptions::default());
        if let Err(v) = check(&snapshot, &inputs, &provider, &decisions) {
            prop_assert!(false, "checker: {v:#?}\n{}", decisions.to_json());
        }
        if let Err(v) = check_reservations(&inputs, &decisions) {
            prop_assert!(false, "reservations: {v:#?}\n{}", decisions.to_json());
        }
        // The bound (resource LP and shape LP) is a lower bound on every placement onto new nodes, the
        // scheduler's included.
        if let Ok(bound) = karpenter_scheduler::bound::decision_bound(&snapshot, &inputs, &provider, &decisions) {
            prop_assert!(
                bound.cost <= decisions.total_price() * (1.0 + 1e-9) + 1e-9,
                "bound {bound:?} above the decision's ${}/h\n{}", decisions.total_price(), decisions.to_json()
            );
        }
        for u in &decisions.unschedulable {
            let i = snapshot.pending_pods.iter().position(|p| karpenter_scheduler::snapshot::pod_key(p) == u.pod);
            prop_assert!(i.is_some());
            // Zonal spread and affinity may legitimately fail (skew, the group's zone); a generic pod, a
            // hostname-spread pod or a hostname-anti-affinity pod can always get a node of its own.
            if let Some(i) = i && matches!(pods[i].class, 0 | 2 | 4) {
                let p = &snapshot.pending_pods[i];
                prop_assert!(
                    !fits_some_empty_instance_type(&snapshot, &inputs, &provider, p),
                    "{} reported unschedulable ({}) but fits an empty instance type", u.pod, u.reason
                );
            }
        }
    }
}
