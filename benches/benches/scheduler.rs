//! The scheduler on upstream Karpenter's scheduling benchmark workload (`karpenter_benches::upstream`):
//! diverse pods at 100 .. 50k, 4k preference pods under Respect and Ignore, and unconstrained pods, all on
//! the 400-type fake catalogue.
//!
//! Before criterion measures a case, the case is solved once outside criterion and a line is printed to
//! stderr: time, pods/s, new nodes, $/h, the LP lower bound on cost (`karpenter_scheduler::bound`) over the
//! pods placed on new nodes and the ratio to it, and unschedulable pods grouped by reason. The run panics
//! if the independent checker (`karpenter_scheduler::check`) finds a violation. Unschedulable pods are
//! reported, not fatal (upstream's workload schedules every pod; a count here is a gap to explain).
//!
//! Only cases matching the command-line filter are prepared and reported, e.g.
//! `cargo bench -p karpenter-benches --bench scheduler -- diverse/10000`. With
//! `BENCH_REPORT_ONLY=1` (or the older `SCHEDULER_BENCH_REPORT_ONLY=1`) in the environment, only the report lines are produced (one solve per
//! case, no criterion measurement). `full-cluster` is the end of the controller's 50,000-pod perf case: 5,000
//! full nodes and 40,000 pending replicas.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkGroup, Criterion, SamplingMode, criterion_group, criterion_main, measurement::WallTime};
use k8s_openapi::api::core::v1::Pod;
use karpenter_api::IntoSharedPod;
use karpenter_benches::{report_only, selected, upstream};
use karpenter_cloudprovider::time::Stopwatch;
use karpenter_requirements::{InstanceType, PreferencePolicy};
use karpenter_scheduler::bound::decision_bound;
use karpenter_scheduler::check::check;
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions, schedule};

/// Solves once, checks, prints the report line; returns the snapshot for criterion.
fn report(id: &str, pods: Vec<Pod>, its: &[InstanceType], options: &SchedulerOptions) -> ClusterSnapshot {
    let pool = upstream::node_pool();
    let snapshot = ClusterSnapshot {
        pending_pods: pods.into_iter().map(IntoSharedPod::into_shared).collect(),
        ..Default::default()
    };
    let provider = karpenter_aws::labels::provider_labels();
    let inputs = [PoolInput { node_pool: &pool, instance_types: its }];
    let n = snapshot.pending_pods.len();
    let start = Stopwatch::start();
    let d = schedule(&snapshot, &inputs, &provider, options);
    let secs = start.elapsed().as_secs_f64();
    if let Err(v) = check(&snapshot, &inputs, &provider, &d) {
        panic!("{id}: the checker found {} violations, first: {:?}", v.len(), v.first());
    }
    let cost = d.total_price();
    let bound = match decision_bound(&snapshot, &inputs, &provider, &d) {
        Ok(b) => format!(
            "bound ${:.2}/h, ratio {}",
            b.cost,
            b.ratio(cost).map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"))
        ),
        Err(e) => format!("no bound: {e}"),
    };
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for u in &d.unschedulable {
        *reasons.entry(format!("{}: {}", u.reason.code(), u.reason).chars().take(140).collect()).or_default() += 1;
    }
    eprintln!(
        "{id}: {n} pods in {secs:.3} s ({:.0} pods/s), {} new nodes, ${cost:.2}/h, {bound}, {} unschedulable{}",
        n as f64 / secs,
        d.new_node_claims.len(),
        d.unschedulable.len(),
        if d.timed_out { " (timed out)" } else { "" }
    );
    for (reason, count) in reasons.iter().take(5) {
        eprintln!("    {count} x {reason}");
    }
    snapshot
}

fn run_case(
    group: &mut BenchmarkGroup<'_, WallTime>,
    group_name: &str,
    name: &str,
    make: impl FnOnce() -> Vec<Pod>,
    its: &[InstanceType],
    options: &SchedulerOptions,
) {
    let id = format!("{group_name}/{name}");
    if !selected(&id) {
        return;
    }
    let snapshot = report(&id, make(), its, options);
    if report_only() {
        return;
    }
    let pool = upstream::node_pool();
    let provider = karpenter_aws::labels::provider_labels();
    let inputs = [PoolInput { node_pool: &pool, instance_types: its }];
    group.bench_function(name, |b| b.iter(|| schedule(black_box(&snapshot), &inputs, &provider, options)));
}

fn configure(group: &mut BenchmarkGroup<'_, WallTime>, secs: u64) {
    group.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(secs));
}

fn diverse(c: &mut Criterion) {
    let its = upstream::catalogue();
    let options = SchedulerOptions::default();
    let mut group = c.benchmark_group("scheduler/diverse");
    configure(&mut group, 3);
    for n in [100usize, 1_000, 5_000, 10_000, 20_000, 50_000] {
        if n >= 20_000 {
            configure(&mut group, 10);
        }
        run_case(&mut group, "scheduler/diverse", &n.to_string(), || upstream::diverse_pods(n), &its, &options);
    }
    group.finish();
}

fn preferences(c: &mut Criterion) {
    let its = upstream::catalogue();
    let mut group = c.benchmark_group("scheduler/preferences");
    configure(&mut group, 3);
    for (name, policy) in [("4000-respect", PreferencePolicy::Respect), ("4000-ignore", PreferencePolicy::Ignore)] {
        let options = SchedulerOptions { preference_policy: policy, ..Default::default() };
        run_case(&mut group, "scheduler/preferences", name, || upstream::preference_pods(4_000), &its, &options);
    }
    group.finish();
}

fn unconstrained(c: &mut Criterion) {
    let its = upstream::catalogue();
    let options = SchedulerOptions::default();
    let mut group = c.benchmark_group("scheduler/unconstrained");
    configure(&mut group, 3);
    for n in [1_000usize, 10_000, 50_000] {
        run_case(
            &mut group,
            "scheduler/unconstrained",
            &n.to_string(),
            || upstream::unconstrained_pods(n),
            &its,
            &options,
        );
    }
    group.finish();
}

/// A full cluster: 5,000 existing nodes with no room left for the pending pods, and 40,000 pending replicas of
/// one workload (sharing one spec, as the controller's state shares them): the provisioning pass of the
/// `memory-50k` perf case at its end. Every replica has to be turned down by every node before it goes to a new
/// NodeClaim.
fn full_cluster(c: &mut Criterion) {
    let id = "scheduler/full-cluster/5000-nodes-40000-pods";
    if !selected(id) {
        return;
    }
    let its = upstream::catalogue();
    let options = SchedulerOptions::default();
    let pool = upstream::node_pool();
    let provider = karpenter_aws::labels::provider_labels();
    let inputs = [PoolInput { node_pool: &pool, instance_types: &its }];
    let snapshot = upstream::full_cluster(5_000, 40_000);
    let start = Stopwatch::start();
    let d = schedule(&snapshot, &inputs, &provider, &options);
    eprintln!(
        "{id}: {:.3} s, {} new nodes, {} unschedulable{}",
        start.elapsed().as_secs_f64(),
        d.new_node_claims.len(),
        d.unschedulable.len(),
        if d.timed_out { " (timed out)" } else { "" }
    );
    if report_only() {
        return;
    }
    let mut group = c.benchmark_group("scheduler/full-cluster");
    configure(&mut group, 10);
    group.bench_function("5000-nodes-40000-pods", |b| {
        b.iter(|| schedule(black_box(&snapshot), &inputs, &provider, &options))
    });
    group.finish();
}

criterion_group!(benches, unconstrained, preferences, diverse, full_cluster);
criterion_main!(benches);
