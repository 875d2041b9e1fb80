//! The scheduler on upstream's benchmark catalogue with unconstrained pods (issue 3 item 6, first cut):
//! 400 instance types (type k: k vCPU, 2k GiB, 10k pods; price 0.1/vCPU + 0.1 per 10^9 bytes of memory; spot in
//! two zones and on-demand in three at the same price; overhead 100m CPU / 10Mi), pods with CPU from
//! {100m, 250m, 500m, 1, 1.5} and memory from {100, 256, 512, 1024, 2048, 4096}Mi round-robin, at 1k and 10k
//! pods. Each size is run once outside criterion to print pods/s, nodes and $/h, and to run the checker.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::{NodePool, ProviderLabels};
use karpenter_requirements::{
    Format, InstanceType, Offering, Overhead, Quantity, Requirement, Requirements, ResourceList,
};
use karpenter_scheduler::check::check;
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions, schedule};

const ZONES: [&str; 3] = ["test-zone-a", "test-zone-b", "test-zone-c"];

fn offering(zone: &str, ct: &str, price: f64) -> Offering {
    let reqs: Requirements = [
        Requirement::in_values("topology.kubernetes.io/zone", [zone]),
        Requirement::in_values("karpenter.sh/capacity-type", [ct]),
        Requirement::does_not_exist("karpenter.k8s.aws/capacity-reservation-id"),
    ]
    .into_iter()
    .collect();
    Offering::new(reqs, price)
}

fn catalogue() -> Vec<InstanceType> {
    (1..=400i64)
        .map(|k| {
            let name = format!("fake-it-{k}");
            let mem = k * 2 * 1024 * 1024 * 1024;
            let price = 0.1 * k as f64 + 0.1 * (mem as f64 / 1e9);
            let mut offerings: Vec<Offering> = ZONES[..2].iter().map(|z| offering(z, "spot", price)).collect();
            offerings.extend(ZONES.iter().map(|z| offering(z, "on-demand", price)));
            let reqs: Requirements = [
                Requirement::in_values("node.kubernetes.io/instance-type", [name.as_str()]),
                Requirement::in_values("kubernetes.io/arch", ["amd64"]),
                Requirement::in_values("kubernetes.io/os", ["linux"]),
                Requirement::in_values("topology.kubernetes.io/zone", ZONES),
                Requirement::in_values("karpenter.sh/capacity-type", ["spot", "on-demand"]),
                Requirement::does_not_exist("karpenter.k8s.aws/capacity-reservation-id"),
            ]
            .into_iter()
            .collect();
            let capacity = ResourceList::new()
                .with("cpu", Quantity::from_int(k, Format::DecimalSI))
                .with("memory", Quantity::from_int(mem, Format::BinarySI))
                .with("pods", Quantity::from_int(k * 10, Format::DecimalSI));
            let overhead = Overhead {
                kube_reserved: ResourceList::new()
                    .with("cpu", Quantity::from_milli(100))
                    .with("memory", Quantity::from_int(10 * 1024 * 1024, Format::BinarySI)),
                ..Default::default()
            };
            InstanceType::new(name, reqs, offerings, capacity, overhead)
        })
        .collect()
}

fn node_pool() -> NodePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []
        }}}
    }))
    .expect("fixture NodePool")
}

fn pods(n: usize) -> Vec<Pod> {
    const CPU: [&str; 5] = ["100m", "250m", "500m", "1", "1500m"];
    const MEM: [&str; 6] = ["100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi"];
    (0..n)
        .map(|i| Pod {
            metadata: ObjectMeta {
                name: Some(format!("pod-{i:05}")),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{i:05}")),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(
                            [
                                ("cpu".to_string(), KQuantity(CPU[i % CPU.len()].into())),
                                ("memory".to_string(), KQuantity(MEM[i % MEM.len()].into())),
                            ]
                            .into(),
                        ),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        })
        .collect()
}

fn unconstrained(c: &mut Criterion) {
    let its = catalogue();
    let pool = node_pool();
    let provider = ProviderLabels::aws();
    let options = SchedulerOptions::default();
    let mut group = c.benchmark_group("scheduler/unconstrained");
    group.sample_size(10);
    for n in [1_000usize, 10_000] {
        let snapshot = ClusterSnapshot { pending_pods: pods(n), ..Default::default() };
        let inputs = [PoolInput { node_pool: &pool, instance_types: &its }];
        let start = Instant::now();
        let d = schedule(&snapshot, &inputs, &provider, &options);
        let secs = start.elapsed().as_secs_f64();
        if let Err(v) = check(&snapshot, &inputs, &provider, &d) {
            panic!("checker found {} violations, first: {:?}", v.len(), v.first());
        }
        assert!(d.unschedulable.is_empty(), "every pod fits");
        eprintln!(
            "unconstrained {n} pods: {:.3} s ({:.0} pods/s), {} nodes, ${:.2}/h",
            secs,
            n as f64 / secs,
            d.new_node_claims.len(),
            d.total_price()
        );
        group.bench_function(format!("{n} pods"), |b| {
            b.iter(|| schedule(black_box(&snapshot), &inputs, &provider, &options))
        });
    }
    group.finish();
}

criterion_group!(benches, unconstrained);
criterion_main!(benches);
