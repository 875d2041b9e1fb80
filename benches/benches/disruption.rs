//! Disruption passes on large clusters, with two catalogues: `kwok` (`karpenter_kwok::catalogue::catalogue`,
//! nodes of `s-16x-amd64-linux`, 16 vCPU / 64 GiB) and `aws` (the us-east-1 types of moto's EC2 catalogue converted
//! by `karpenter_aws::instancetype` with on-demand prices from `../shared/data/aws/on-demand-prices.json`, as in
//! the `aws_catalogue` bench; nodes of `m5.4xlarge`, 16 vCPU / 64 GiB). Without moto (`KARPENTER_MOTO_VENV`,
//! default `target/moto-venv`) the `aws` cases print a note and are skipped.
//!
//! * `disruption/single-node/{kwok,aws}/{1000,5000}`: a full pass ([`karpenter_disruption::evaluate`]) over N
//!   nodes with 30 pods each: 70 % of the nodes are full (30 × 500m / 2 GiB), 30 % underutilized (30 × 100m /
//!   256 MiB). Every node is a consolidation candidate and gets a verdict from its own single-node simulation
//!   (upstream stops at 3 minutes; here every candidate is evaluated), after multi-node consolidation has run.
//! * `disruption/multi-node/{kwok,aws}/100`: multi-node consolidation alone
//!   ([`karpenter_disruption::multi_node_consolidation`]) on the 1,000-node cluster: the binary search over the
//!   first 100 sorted candidates (upstream's cap), without upstream's 1 minute timeout.
//!
//! * `disruption/pending/kwok/5000`: a pass as the controller runs it (`every_verdict` off) over the 5,000-node
//!   cluster while 40,000 pods of 1.5 vCPU are pending (a large scale-out under way: they need thousands of new
//!   nodes, so no consolidation can make do with one).
//!
//! Before criterion measures a case it runs once and prints: time, commands, verdict counts by outcome.
//! Only the cases the filter selects are built, e.g. `cargo bench -p karpenter-benches --bench disruption --
//! single-node/kwok/1000`; with `BENCH_REPORT_ONLY=1` only that first run happens (for callgrind).

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use karpenter_aws::instancetype::InstanceTypeContext;
use karpenter_aws::moto::{LocationType, MotoCatalogue};
use karpenter_aws::pricing::{PriceFile, PriceSource};
use karpenter_benches::disruption::{Case, cluster, kwok_case, now, on_demand_zones, pool, with_pending};
use karpenter_benches::{report_only, selected};
use karpenter_cloudprovider::time::Stopwatch;
use karpenter_disruption::{DisruptionOptions, Pass, evaluate, multi_node_consolidation};
use karpenter_scheduler::PoolInput;

/// The scheduler's threads for existing nodes (`SCHEDULER_PARALLELISM`, the controller's ceil(CPU_REQUESTS /
/// 1000); default 1): the simulations decide the same whatever it is, and this measures how fast.
fn options(every_verdict: bool) -> DisruptionOptions {
    let parallelism = std::env::var("SCHEDULER_PARALLELISM").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let defaults = DisruptionOptions::default();
    DisruptionOptions {
        every_verdict,
        scheduler: karpenter_scheduler::SchedulerOptions { parallelism, ..defaults.scheduler.clone() },
        ..defaults
    }
}

/// us-east-1 from moto, or `None` (with a note) without moto.
fn aws_case() -> Option<Case> {
    const REGION: &str = "us-east-1";
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cat = match MotoCatalogue::discover(&root) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("disruption/aws: skipped: {e}");
            return None;
        }
    };
    let infos = cat.instance_types_in(REGION).expect("moto's us-east-1 catalogue loads");
    let zones = cat.locations(REGION, LocationType::AvailabilityZone).expect("moto's us-east-1 zone offerings");
    let prices = match PriceFile::read(&root.join("../shared/data/aws/on-demand-prices.json")) {
        Ok(f) => PriceSource::Table(f.region(REGION)),
        Err(e) => {
            eprintln!("disruption/aws: no price snapshot ({e}); pricing every offering by the documented estimate");
            PriceSource::Estimate
        }
    };
    let ctx = InstanceTypeContext { region: REGION.into(), zones, prices, ..Default::default() };
    let instance_types = ctx.instance_types(&infos);
    let node_type = "m5.4xlarge";
    let zones = on_demand_zones(&instance_types, node_type);
    assert!(!zones.is_empty(), "{node_type} has an available on-demand offering in {REGION}");
    Some(Case { name: "aws", instance_types, node_type, zones })
}

fn cases() -> Vec<Case> {
    let mut out = vec![kwok_case()];
    out.extend(aws_case());
    out
}

fn summary(pass: &Pass) -> String {
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for v in &pass.verdicts {
        *outcomes.entry(format!("{:?}", v.outcome)).or_default() += 1;
    }
    let commands: Vec<String> = pass
        .commands
        .iter()
        .map(|c| {
            format!(
                "{:?} {:?} of {} nodes saving ${:.2}/h",
                c.method,
                c.decision,
                c.candidates.len(),
                c.savings_per_hour
            )
        })
        .collect();
    format!("commands [{}], verdicts {outcomes:?}", commands.join("; "))
}

fn single_node(c: &mut Criterion) {
    let provider = karpenter_aws::labels::provider_labels();
    let options = options(true);
    let mut group = c.benchmark_group("disruption/single-node");
    group.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_millis(100));
    for case in cases() {
        for n in [1_000usize, 5_000] {
            let id = format!("disruption/single-node/{}/{n}", case.name);
            if !selected(&id) {
                continue;
            }
            let snapshot = cluster(n, &case, pool(&[]));
            let pools = [PoolInput { node_pool: &snapshot.node_pools[0], instance_types: &case.instance_types }];
            let start = Stopwatch::start();
            let pass = evaluate(&snapshot, &pools, &provider, now(), &options);
            let secs = start.elapsed().as_secs_f64();
            eprintln!("{id}: {secs:.3} s, {}", summary(&pass));
            if report_only() {
                continue;
            }
            group.measurement_time(Duration::from_secs_f64((secs * 12.0).max(1.0)));
            group.bench_function(format!("{}/{n}", case.name), |b| {
                b.iter(|| evaluate(black_box(&snapshot), &pools, &provider, now(), &options))
            });
        }
    }
    group.finish();
}

fn multi_node(c: &mut Criterion) {
    let provider = karpenter_aws::labels::provider_labels();
    let options = options(true);
    let mut group = c.benchmark_group("disruption/multi-node");
    group.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_millis(100));
    for case in cases() {
        // 1,000 nodes; multi-node consolidation takes the first 100 sorted candidates (upstream's cap).
        if !selected(&format!("disruption/multi-node/{}/100", case.name)) {
            continue;
        }
        let snapshot = cluster(1_000, &case, pool(&[]));
        let pools = [PoolInput { node_pool: &snapshot.node_pools[0], instance_types: &case.instance_types }];
        let start = Stopwatch::start();
        let cmd = multi_node_consolidation(&snapshot, &pools, &provider, now(), &options);
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "disruption/multi-node/{}/100: {secs:.3} s, {}",
            case.name,
            cmd.as_ref().map_or_else(
                || "no command".to_owned(),
                |c| format!("{:?} of {} nodes saving ${:.2}/h", c.decision, c.candidates.len(), c.savings_per_hour)
            )
        );
        if report_only() {
            continue;
        }
        group.measurement_time(Duration::from_secs_f64((secs * 12.0).max(1.0)));
        group.bench_function(format!("{}/100", case.name), |b| {
            b.iter(|| multi_node_consolidation(black_box(&snapshot), &pools, &provider, now(), &options))
        });
    }
    group.finish();
}

fn pending(c: &mut Criterion) {
    let provider = karpenter_aws::labels::provider_labels();
    let options = options(false);
    let mut group = c.benchmark_group("disruption/pending");
    group.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_millis(100));
    if !selected("disruption/pending/kwok/5000") {
        return;
    }
    let case = kwok_case();
    let snapshot = with_pending(cluster(5_000, &case, pool(&[])), 40_000);
    let pools = [PoolInput { node_pool: &snapshot.node_pools[0], instance_types: &case.instance_types }];
    let start = Stopwatch::start();
    let pass = evaluate(&snapshot, &pools, &provider, now(), &options);
    let secs = start.elapsed().as_secs_f64();
    eprintln!("disruption/pending/kwok/5000: {secs:.3} s, {}", summary(&pass));
    if report_only() {
        return;
    }
    group.measurement_time(Duration::from_secs_f64((secs * 12.0).max(1.0)));
    group
        .bench_function("kwok/5000", |b| b.iter(|| evaluate(black_box(&snapshot), &pools, &provider, now(), &options)));
    group.finish();
}

criterion_group!(benches, single_node, multi_node, pending);
criterion_main!(benches);
