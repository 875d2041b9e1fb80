//! The transient heap of one provisioning pass and of one disruption pass at the scale of the controller's
//! `memory-50k` perf case: how many bytes the scheduler (or the disruption evaluation) allocates on top of its
//! input while it runs (the input is shared with the controller's state and costs nothing extra there). Not a
//! criterion bench: it prints figures.
//!
//! `cargo bench -p karpenter-benches --bench pass_memory`
//!
//! The controller's resident set peaks when such a pass runs (docs/benchmarks.md, memory-50k run 9): this is the
//! figure to lower.

use std::process::Command;
use std::sync::Arc;

use karpenter_api::CompactPod;
use karpenter_benches::{disruption, upstream};
use karpenter_cloudprovider::time::Stopwatch;
use karpenter_disruption::{DisruptionOptions, evaluate};
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions, schedule};
use serde_json::json;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// What a case measures.
#[derive(Clone, Copy)]
enum Pass {
    /// One provisioning pass ([`schedule`]) on the upstream catalogue, existing nodes full.
    Provisioning,
    /// One disruption pass ([`evaluate`], as the controller runs it) on the kwok catalogue restricted to at most
    /// 16 vCPU as in `memory-50k`, so the pending pods need thousands of small new nodes.
    Disruption,
}

/// (pass, existing nodes, pending pods) per case; each runs in a process of its own, as dhat's high-water mark
/// cannot be reset.
const CASES: [(Pass, usize, usize); 5] = [
    (Pass::Provisioning, 1_000, 8_000),
    (Pass::Provisioning, 2_500, 20_000),
    (Pass::Provisioning, 5_000, 40_000),
    (Pass::Disruption, 2_500, 20_000),
    (Pass::Disruption, 5_000, 40_000),
];

/// Set in the child process: the index of the case it runs.
const CASE_ENV: &str = "PASS_MEMORY_CASE";
/// When set, each case also writes dhat's full profile (every allocation site, with the bytes it held at the
/// pass's peak) to `<dir>/pass-memory[-disruption]-<nodes>-<pods>.json` (read it with dhat's viewer or a script over `gb`).
const PROFILE_DIR_ENV: &str = "PASS_MEMORY_PROFILE_DIR";

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let Some(case) = std::env::var(CASE_ENV).ok().and_then(|c| c.parse::<usize>().ok()) else {
        let me = std::env::current_exe().expect("the bench binary's path");
        for i in 0..CASES.len() {
            let status = Command::new(&me).env(CASE_ENV, i.to_string()).status().expect("running a case");
            assert!(status.success(), "case {i} failed: {status}");
        }
        return;
    };
    match CASES[case] {
        (Pass::Provisioning, nodes, pending) => provisioning(nodes, pending),
        (Pass::Disruption, nodes, pending) => disruption_pass(nodes, pending),
    }
}

fn profiler(name: &str) -> dhat::Profiler {
    match std::env::var_os(PROFILE_DIR_ENV) {
        Some(dir) => {
            dhat::Profiler::builder().file_name(std::path::Path::new(&dir).join(format!("{name}.json"))).build()
        }
        None => dhat::Profiler::builder().testing().build(),
    }
}

fn provisioning(nodes: usize, pending: usize) {
    let its = upstream::catalogue();
    let pool = upstream::node_pool();
    let provider = karpenter_aws::labels::provider_labels();
    let options = SchedulerOptions::default();
    let inputs = [PoolInput { node_pool: &pool, instance_types: &its }];
    let (node_objects, pods) = upstream::full_cluster_objects(nodes, pending);
    // Shared before the profiler starts, as the controller's state hands the snapshot its own `Arc`s.
    let pods: Vec<Arc<CompactPod>> = pods.into_iter().map(Arc::new).collect();
    // Started after the objects are decoded: the controller's state holds them already.
    let _profiler = profiler(&format!("pass-memory-{nodes}-{pending}"));
    let before = dhat::HeapStats::get();
    let start = Stopwatch::start();
    let mut builder = ClusterSnapshot::builder();
    for node in &node_objects {
        builder.node(node);
    }
    for pod in pods {
        builder.pod(pod);
    }
    let snapshot = builder.build().expect("fixture snapshot");
    let built = dhat::HeapStats::get();
    let decisions = schedule(&snapshot, &inputs, &provider, &options);
    let secs = start.elapsed().as_secs_f64();
    let after = dhat::HeapStats::get();
    println!(
        "pass_memory/full-cluster/{nodes}-nodes-{pending}-pods: snapshot {:.1} MiB (peak +{:.1}), solve peak \
         +{:.1} MiB, decisions {:.1} MiB ({} new nodes), {} allocations, {secs:.2} s under dhat",
        mib(built.curr_bytes.saturating_sub(before.curr_bytes)),
        mib(built.max_bytes.saturating_sub(before.curr_bytes)),
        mib(after.max_bytes.saturating_sub(built.curr_bytes)),
        mib(after.curr_bytes.saturating_sub(built.curr_bytes)),
        decisions.new_node_claims.len(),
        after.total_blocks - before.total_blocks,
    );
}

fn disruption_pass(nodes: usize, pending: usize) {
    let case = disruption::kwok_case();
    let pool =
        disruption::pool(&[json!({"key": "karpenter.kwok.sh/instance-cpu", "operator": "Lt", "values": ["17"]})]);
    let snapshot = disruption::with_pending(disruption::cluster(nodes, &case, pool), pending);
    let pools = [PoolInput { node_pool: &snapshot.node_pools[0], instance_types: &case.instance_types }];
    let provider = karpenter_aws::labels::provider_labels();
    let options = DisruptionOptions { every_verdict: false, ..Default::default() };
    // Started after the snapshot is built: the controller's disruption loop builds it the same way as a
    // provisioning pass (measured by the provisioning cases).
    let _profiler = profiler(&format!("pass-memory-disruption-{nodes}-{pending}"));
    let before = dhat::HeapStats::get();
    let start = Stopwatch::start();
    let pass = evaluate(&snapshot, &pools, &provider, disruption::now(), &options);
    let secs = start.elapsed().as_secs_f64();
    let after = dhat::HeapStats::get();
    println!(
        "pass_memory/disruption/{nodes}-nodes-{pending}-pods: evaluation peak +{:.1} MiB, result {:.1} MiB ({} \
         commands, {} verdicts), {} allocations, {secs:.2} s under dhat",
        mib(after.max_bytes.saturating_sub(before.curr_bytes)),
        mib(after.curr_bytes.saturating_sub(before.curr_bytes)),
        pass.commands.len(),
        pass.verdicts.len(),
        after.total_blocks - before.total_blocks,
    );
}
