//! The scheduler on a realistic AWS catalogue (issue 5 item 1): the us-east-1 instance types of the EC2 catalogue
//! that ships in moto (found through `KARPENTER_MOTO_VENV`, default `target/moto-venv`, which `.ci/run` creates),
//! converted by `karpenter_aws::instancetype` for a default AL2023 EC2NodeClass, with on-demand prices from
//! `../shared/data/aws/on-demand-prices.json` (spot offerings have no price there, so they are unavailable; types
//! without a published price have no available offering). Without the price snapshot every offering is priced by
//! the documented estimate instead (`karpenter_aws::pricing::estimate`), and the run says so.
//!
//! Two NodePools: one without requirements (every type) and upstream's getting-started NodePool (categories c, m,
//! r of generation > 2, amd64, on-demand). Pods have no constraints; CPU from {100m, 250m, 500m, 1, 1.5} and memory from {100, 256, 512, 1024, 2048,
//! 4096}Mi round-robin (the scheduler benchmark's mix), at 1k and 10k pods. Each size is solved once outside
//! criterion to check the decision independently and print time, pods/s, new nodes, $/h, the LP lower bound on cost
//! (`karpenter_scheduler::bound`) and the ratio to it. The catalogue conversion itself is benchmarked too.
//!
//! Without moto the benchmark prints a note and measures nothing.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::{IntoSharedPod, NodePool};
use karpenter_aws::ec2::InstanceTypeInfo;
use karpenter_aws::instancetype::InstanceTypeContext;
use karpenter_aws::moto::{LocationType, MotoCatalogue};
use karpenter_aws::pricing::{PriceFile, PriceSource};
use karpenter_cloudprovider::time::Stopwatch;
use karpenter_requirements::InstanceType;
use karpenter_scheduler::bound::decision_bound;
use karpenter_scheduler::check::check;
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions, schedule};

const REGION: &str = "us-east-1";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The us-east-1 catalogue and the conversion context, or `None` (with a note) without moto.
fn load() -> Option<(Vec<InstanceTypeInfo>, InstanceTypeContext)> {
    let cat = match MotoCatalogue::discover(&workspace_root()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("aws_catalogue: skipped: {e}");
            return None;
        }
    };
    let infos = cat.instance_types_in(REGION).expect("moto's us-east-1 catalogue loads");
    let zones = cat.locations(REGION, LocationType::AvailabilityZone).expect("moto's us-east-1 zone offerings");
    let prices_path = workspace_root().join("../shared/data/aws/on-demand-prices.json");
    let prices = match PriceFile::read(&prices_path) {
        Ok(f) => PriceSource::Table(f.region(REGION)),
        Err(e) => {
            eprintln!("aws_catalogue: no price snapshot ({e}); pricing every offering by the documented estimate");
            PriceSource::Estimate
        }
    };
    Some((infos, InstanceTypeContext { region: REGION.into(), zones, prices, ..Default::default() }))
}

/// The NodePools measured: `all` has no requirements (every us-east-1 type), `cmr` is the getting-started NodePool
/// of upstream's documentation (categories c, m, r of generation > 2, amd64, on-demand).
fn node_pools() -> Vec<(&'static str, NodePool)> {
    let pool = |requirements: serde_json::Value| -> NodePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": requirements
            }}}
        }))
        .expect("fixture NodePool")
    };
    vec![
        ("all", pool(serde_json::json!([]))),
        (
            "cmr",
            pool(serde_json::json!([
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["2"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
            ])),
        ),
    ]
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

fn report(pool_name: &str, pool: &NodePool, its: &[InstanceType], n: usize) {
    let provider = karpenter_aws::labels::provider_labels();
    let options = SchedulerOptions::default();
    let snapshot = ClusterSnapshot {
        pending_pods: pods(n).into_iter().map(IntoSharedPod::into_shared).collect(),
        ..Default::default()
    };
    let inputs = [PoolInput { node_pool: pool, instance_types: its }];
    let start = Stopwatch::start();
    let d = schedule(&snapshot, &inputs, &provider, &options);
    let secs = start.elapsed().as_secs_f64();
    if let Err(v) = check(&snapshot, &inputs, &provider, &d) {
        panic!("checker found {} violations, first: {:?}", v.len(), v.first());
    }
    assert!(d.unschedulable.is_empty(), "every pod fits: {:?}", d.unschedulable.first());
    let cost = d.total_price();
    let bound = match decision_bound(&snapshot, &inputs, &provider, &d) {
        Ok(b) => format!(
            "bound ${:.2}/h, ratio {}",
            b.cost,
            b.ratio(cost).map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"))
        ),
        Err(e) => format!("no bound: {e}"),
    };
    let mut types: Vec<&str> = d.new_node_claims.iter().filter_map(|c| c.instance_type_names().next()).collect();
    types.sort();
    types.dedup();
    eprintln!(
        "aws_catalogue {REGION} pool {pool_name}, {n} pods: {secs:.3} s ({:.0} pods/s), {} new nodes (first options: {}), \
         ${cost:.2}/h, {bound}",
        n as f64 / secs,
        d.new_node_claims.len(),
        types.join(", "),
    );
}

fn aws_catalogue(c: &mut Criterion) {
    let Some((infos, ctx)) = load() else { return };
    let start = Stopwatch::start();
    let its = ctx.instance_types(&infos);
    let available = its.iter().filter(|it| it.offerings.iter().any(|o| o.available)).count();
    eprintln!(
        "aws_catalogue: {} {REGION} types converted in {:.1} ms, {available} with an available offering",
        its.len(),
        start.elapsed().as_secs_f64() * 1e3
    );
    let mut group = c.benchmark_group("aws_catalogue");
    group.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(5));
    group
        .bench_function(format!("convert {} types", infos.len()), |b| b.iter(|| ctx.instance_types(black_box(&infos))));
    let provider = karpenter_aws::labels::provider_labels();
    let options = SchedulerOptions::default();
    for (name, pool) in node_pools() {
        for n in [1_000usize, 10_000] {
            report(name, &pool, &its, n);
            let snapshot = ClusterSnapshot {
                pending_pods: pods(n).into_iter().map(IntoSharedPod::into_shared).collect(),
                ..Default::default()
            };
            let inputs = [PoolInput { node_pool: &pool, instance_types: &its }];
            group.bench_function(format!("pool {name}, {n} pods"), |b| {
                b.iter(|| schedule(black_box(&snapshot), &inputs, &provider, &options))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, aws_catalogue);
criterion_main!(benches);
