//! `karpenter-perf`: the controller at scale, upstream's performance suite (test/suites/performance, kind + KWOK)
//! rebuilt for this machine.
//!
//! `cargo run --release -p karpenter-perf -- <case>|all [--pods N] [--json FILE] [--max-peak-rss-mib N]`
//!
//! For each case: a fresh real control plane (kube-apiserver, kube-scheduler, kube-controller-manager v1.32.6 from
//! ../shared/k8s, on its own ports and state directory), the kwok CRDs (`karpenter-controller crds --provider
//! kwok`), the release `karpenter-controller run --provider kwok` and `karpenter-controller kwok-kubelet` as child
//! processes, a KWOKNodeClass and a NodePool of kwok types with at most 16 CPUs, then the case's workload. The
//! controller's resident memory (`VmRSS`) and CPU time (`utime + stime`) are sampled every second; the report gives
//! per case and phase the pods, nodes, times, peak and P95 RSS, CPU seconds and average cores, the controller's idle
//! RSS 60 s after its caches synced (1 NodePool, 0 pods), and upstream's limits where upstream has a case.
//!
//! Exit status: 0 when every case finished (and stayed under `--max-peak-rss-mib`), 1 otherwise, 2 on a usage
//! error.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, ValueEnum};
use karpenter_testing::Stopwatch;
use kube::Client;
use serde::Serialize;

mod cluster;
mod metrics;
mod plane;
mod sampler;

use cluster::PodShape;
use plane::{Plane, Processes};
use sampler::{Sampler, Window, mib, window};

#[derive(Debug, Parser)]
#[command(name = "karpenter-perf", about = "The karpenter-rs controller at scale on a real control plane")]
struct Cli {
    /// The case to run, or `all` (every case but memory-50k).
    #[arg(value_enum)]
    case: CaseArg,
    /// Pods of the case's workload instead of its default.
    #[arg(long)]
    pods: Option<u32>,
    /// Write the figures as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Exit non-zero when the controller's peak RSS (after its caches synced) exceeds N MiB in any case.
    #[arg(long, value_name = "N")]
    max_peak_rss_mib: Option<f64>,
    /// The karpenter-controller binary (default: the one beside this binary, i.e. target/release).
    #[arg(long, value_name = "PATH")]
    controller: Option<PathBuf>,
    /// Use the plane of this kubeconfig instead of starting a fresh one per case (it must hold no NodePool yet).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Seconds the idle controller (1 NodePool, 0 pods) runs after its caches synced before its idle RSS is read.
    #[arg(long, default_value_t = 60)]
    idle_secs: u64,
    /// Seconds after the last Node is gone before the settled RSS is read (default: 120 for scale-5k, else none).
    #[arg(long)]
    settle_secs: Option<u64>,
    /// Give up on a wait after this many minutes (default: the case's own limit).
    #[arg(long)]
    timeout_mins: Option<u64>,
    /// Keep each plane's state dir (etcd data, component logs) after the case.
    #[arg(long)]
    keep_plane_state: bool,
    /// Where the planes' state and the controllers' logs go.
    #[arg(long, default_value = "target/perf")]
    work_dir: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CaseArg {
    All,
    #[value(name = "scale-out-1k")]
    ScaleOut1k,
    #[value(name = "spread-2k")]
    Spread2k,
    #[value(name = "drift-600")]
    Drift600,
    #[value(name = "consolidation-500")]
    Consolidation500,
    #[value(name = "scale-5k")]
    Scale5k,
    #[value(name = "memory-50k")]
    Memory50k,
}

/// One case of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    ScaleOut1k,
    Spread2k,
    Drift600,
    Consolidation500,
    Scale5k,
    Memory50k,
}

impl Case {
    const ALL: [Case; 5] = [Case::ScaleOut1k, Case::Drift600, Case::Scale5k, Case::Spread2k, Case::Consolidation500];

    fn name(self) -> &'static str {
        match self {
            Case::ScaleOut1k => "scale-out-1k",
            Case::Spread2k => "spread-2k",
            Case::Drift600 => "drift-600",
            Case::Consolidation500 => "consolidation-500",
            Case::Scale5k => "scale-5k",
            Case::Memory50k => "memory-50k",
        }
    }

    fn default_pods(self) -> u32 {
        match self {
            Case::ScaleOut1k => 1000,
            Case::Spread2k => 2000,
            Case::Drift600 => 600,
            Case::Consolidation500 => 500,
            Case::Scale5k => 5000,
            Case::Memory50k => 50_000,
        }
    }

    /// Minutes any one wait may take.
    fn timeout_mins(self) -> u64 {
        match self {
            Case::ScaleOut1k | Case::Drift600 => 20,
            Case::Spread2k | Case::Consolidation500 => 30,
            Case::Scale5k => 40,
            Case::Memory50k => 120,
        }
    }

    /// Upstream's limits for the phase of the same name, where upstream has a comparable case
    /// (test/suites/performance: P95 memory of the controller, average CPU, total time).
    fn upstream(self, phase: &str) -> Option<Upstream> {
        let limit = |case: &'static str, mb: f64, cores: f64, mins: f64| {
            Some(Upstream { case, p95_memory_mb: mb, avg_cpu_cores: cores, time_mins: mins })
        };
        match (self, phase) {
            (Case::ScaleOut1k, "scale-out") => limit("basic/scaleOut (1,000 pods)", 260.0, 0.50, 2.0),
            (Case::Spread2k, "scale-out") => limit("hostNameSpreadingXL/scaleOut (2,000 pods)", 1330.0, 1.40, 35.0),
            (Case::Drift600, "scale-out") => limit("drift/initial (600 pods)", 425.0, 0.70, 5.0),
            (Case::Drift600, "drift") => limit("drift/drift (600 pods)", 470.0, 1.05, 50.0),
            (Case::Consolidation500, "consolidation") => {
                limit("basic/consolidation (1,000 -> 700 pods)", 260.0, 0.25, 20.0)
            }
            _ => None,
        }
    }
}

/// Upstream's limit for a phase.
#[derive(Clone, Debug, Serialize)]
struct Upstream {
    case: &'static str,
    p95_memory_mb: f64,
    avg_cpu_cores: f64,
    time_mins: f64,
}

/// One phase's figures.
#[derive(Clone, Debug, Serialize)]
struct PhaseReport {
    name: String,
    /// Karpenter's Nodes at the end of the phase (the most seen during it for a scale-out).
    nodes: usize,
    #[serde(flatten)]
    window: Window,
    upstream: Option<Upstream>,
}

/// One case's figures.
#[derive(Clone, Debug, Default, Serialize)]
struct CaseReport {
    case: String,
    pods: u32,
    /// The most Karpenter Nodes seen.
    nodes: usize,
    /// Seconds from the workload's creation until all its pods were Running.
    time_to_running_s: Option<f64>,
    /// RSS `idle_secs` after the controller's caches synced, with 1 NodePool and 0 pods.
    idle_rss_mib: Option<f64>,
    /// Over everything after the caches synced.
    peak_rss_mib: f64,
    p95_rss_mib: f64,
    end_rss_mib: Option<f64>,
    /// RSS `settle_secs` after the last Node was gone.
    settled_rss_mib: Option<f64>,
    settle_secs: Option<u64>,
    cpu_seconds: f64,
    /// The controller's own latency histograms at the end of the case (`None`: the scrape failed).
    latency: Option<metrics::Latency>,
    phases: Vec<PhaseReport>,
    error: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let cases: Vec<Case> = match cli.case {
        CaseArg::All => Case::ALL.to_vec(),
        CaseArg::ScaleOut1k => vec![Case::ScaleOut1k],
        CaseArg::Spread2k => vec![Case::Spread2k],
        CaseArg::Drift600 => vec![Case::Drift600],
        CaseArg::Consolidation500 => vec![Case::Consolidation500],
        CaseArg::Scale5k => vec![Case::Scale5k],
        CaseArg::Memory50k => vec![Case::Memory50k],
    };
    let controller = match &cli.controller {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating this binary")?.with_file_name("karpenter-controller"),
    };
    if !controller.is_file() {
        bail!(
            "{} not found: build it first (cargo build --release -p karpenter-controller) or pass --controller",
            controller.display()
        );
    }
    let controller = std::path::absolute(&controller).context("resolving the controller path")?;
    std::fs::create_dir_all(&cli.work_dir).with_context(|| format!("creating {}", cli.work_dir.display()))?;
    let work_dir = std::path::absolute(&cli.work_dir).context("resolving --work-dir")?;
    eprintln!("machine: {}", uptime());

    let mut reports = Vec::new();
    for case in cases {
        let pods = cli.pods.unwrap_or(case.default_pods());
        eprintln!("\n== {} ({} pods)", case.name(), pods);
        let mut report = CaseReport { case: case.name().into(), pods, ..CaseReport::default() };
        // Ctrl-C or SIGTERM drops the case (its children are killed on drop, its plane stopped on drop); the phases
        // it finished are still reported and written.
        let case_dir = work_dir.join(case.name());
        let interrupted = tokio::select! {
            r = run_case(case, &cli, &controller, &case_dir, &mut report) => {
                if let Err(e) = r {
                    eprintln!("{}: {e:#}", case.name());
                    report.error = Some(format!("{e:#}"));
                }
                false
            }
            () = signalled() => {
                report.error = Some("interrupted".into());
                true
            }
        };
        print_report(&report);
        reports.push(report);
        // Written after every case, so an interrupted `all` keeps what it measured.
        if let Some(path) = &cli.json {
            let doc = serde_json::json!({"machine": uptime(), "controller": controller, "cases": reports});
            std::fs::write(path, serde_json::to_string_pretty(&doc)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        if interrupted {
            break;
        }
    }
    let mut failed = reports.iter().any(|r| r.error.is_some());
    if let Some(max) = cli.max_peak_rss_mib {
        for r in reports.iter().filter(|r| r.peak_rss_mib > max) {
            eprintln!("{}: peak RSS {:.1} MiB exceeds --max-peak-rss-mib {max}", r.case, r.peak_rss_mib);
            failed = true;
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The state a case runs in.
struct Run<'a> {
    client: Client,
    sampler: &'a Sampler,
    processes: &'a Processes,
    timeout: Duration,
    /// Poll period of the waits.
    poll: Duration,
}

async fn run_case(case: Case, cli: &Cli, controller: &Path, dir: &Path, report: &mut CaseReport) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let lease_seconds = if case == Case::Memory50k { Some(30) } else { None };
    let plane = match &cli.kubeconfig {
        Some(kubeconfig) => Plane::existing(kubeconfig.clone()),
        None => Plane::start(&dir.join("plane"), cli.keep_plane_state).await?,
    };
    let client = plane.client().await?;
    cluster::install_crds(&client, controller).await?;
    cluster::create_nodepool(&client).await?;
    let processes = Processes::start(controller, plane.kubeconfig(), dir, lease_seconds).await?;
    let sampler = Sampler::start(processes.controller_pid(), Duration::from_secs(1));
    let result = async {
        processes.wait_synced(Duration::from_secs(180)).await?;
        let synced = sampler.now();
        eprintln!("  caches synced {:.1} s after start; idling {} s", synced, cli.idle_secs);
        tokio::time::sleep(Duration::from_secs(cli.idle_secs)).await;
        report.idle_rss_mib = sampler.read_now().map(|s| mib(s.rss_kib));
        let run = Run {
            client: client.clone(),
            sampler: &sampler,
            processes: &processes,
            timeout: Duration::from_secs(60 * cli.timeout_mins.unwrap_or(case.timeout_mins())),
            poll: if report.pods > 10_000 { Duration::from_secs(10) } else { Duration::from_secs(2) },
        };
        phases(case, &run, report).await?;
        match metrics::scrape(processes.metrics_port).await {
            Ok(text) => report.latency = Some(metrics::Latency::from_exposition(&text)),
            Err(e) => eprintln!("  reading the controller's /metrics failed: {e:#}"),
        }
        report.end_rss_mib = sampler.read_now().map(|s| mib(s.rss_kib));
        let settle = cli.settle_secs.or((case == Case::Scale5k).then_some(120)).filter(|s| *s > 0);
        if let Some(secs) = settle {
            eprintln!("  settling {secs} s after the last Node is gone");
            tokio::time::sleep(Duration::from_secs(secs)).await;
            report.settled_rss_mib = sampler.read_now().map(|s| mib(s.rss_kib));
            report.settle_secs = Some(secs);
        }
        let all = window(&sampler.samples.snapshot(), synced, f64::MAX);
        report.peak_rss_mib = all.peak_rss_mib;
        report.p95_rss_mib = all.p95_rss_mib;
        report.cpu_seconds = all.cpu_seconds;
        processes.check_alive()
    }
    .await;
    if result.is_err() {
        // Figures up to the failure still help.
        let all = window(&sampler.samples.snapshot(), 0.0, f64::MAX);
        report.peak_rss_mib = all.peak_rss_mib;
        report.p95_rss_mib = all.p95_rss_mib;
        report.cpu_seconds = all.cpu_seconds;
    }
    drop(sampler);
    processes.stop().await;
    plane.stop().await;
    result
}

/// The case's workload, phase by phase.
async fn phases(case: Case, run: &Run<'_>, report: &mut CaseReport) -> anyhow::Result<()> {
    let client = &run.client;
    let pods = report.pods;
    match case {
        Case::ScaleOut1k | Case::Spread2k | Case::Scale5k => {
            let mut shape = PodShape::pause("inflate");
            shape.hostname_spread = case == Case::Spread2k;
            let (secs, nodes) = scale_out(run, report, &shape, pods, true).await?;
            report.time_to_running_s = Some(secs);
            report.nodes = nodes;
            let start = run.sampler.now();
            cluster::scale_deployment(client, &shape.app, 0).await?;
            wait_empty(run, &shape).await?;
            push_phase(case, run, report, "scale-in", start, 0);
        }
        Case::Drift600 => {
            let mut spread = PodShape::pause("spread");
            spread.hostname_spread = true;
            let standard = PodShape::pause("standard");
            let start = run.sampler.now();
            cluster::create_deployment(client, &spread, pods / 2).await?;
            cluster::create_deployment(client, &standard, pods - pods / 2).await?;
            let nodes = wait_running(run, &[(&spread, pods / 2), (&standard, pods - pods / 2)]).await?;
            report.time_to_running_s = Some(run.sampler.now() - start);
            report.nodes = nodes;
            push_phase(case, run, report, "scale-out", start, nodes);
            eprintln!("  stabilising 30 s before the drift");
            tokio::time::sleep(Duration::from_secs(30)).await;
            let start = run.sampler.now();
            let old = cluster::karpenter_nodes(client).await?;
            cluster::drift_nodepool(client).await?;
            let waited = Stopwatch::start();
            loop {
                let nodes = cluster::karpenter_nodes(client).await?;
                let claims = cluster::count_nodeclaims(client).await?;
                let a = cluster::count_pods(client, &spread.selector()).await?;
                let b = cluster::count_pods(client, &standard.selector()).await?;
                let left = nodes.intersection(&old).count();
                report.nodes = report.nodes.max(nodes.len());
                tick(
                    run,
                    start,
                    &format!(
                        "{left} of {} old nodes left, {} nodes, {} claims, {} pods running",
                        old.len(),
                        nodes.len(),
                        claims,
                        a.running + b.running
                    ),
                )?;
                if left == 0 && claims == nodes.len() && a.running + b.running == pods {
                    push_phase(case, run, report, "drift", start, nodes.len());
                    break;
                }
                if waited.elapsed() > run.timeout {
                    bail!("drift not finished after {:?}: {left} old nodes left", run.timeout);
                }
                tokio::time::sleep(run.poll).await;
            }
            let start = run.sampler.now();
            cluster::scale_deployment(client, &spread.app, 0).await?;
            cluster::scale_deployment(client, &standard.app, 0).await?;
            wait_empty(run, &standard).await?;
            push_phase(case, run, report, "scale-in", start, 0);
        }
        Case::Consolidation500 => {
            // One pod per node (required hostname anti-affinity), so `pods` pods make `pods` nodes; scaling down to
            // a fifth leaves four fifths of the nodes empty for consolidation to remove.
            let mut shape = PodShape::pause("consolidate");
            shape.hostname_anti_affinity = true;
            let (secs, nodes) = scale_out(run, report, &shape, pods, true).await?;
            report.time_to_running_s = Some(secs);
            report.nodes = nodes;
            let keep = pods / 5;
            let start = run.sampler.now();
            cluster::scale_deployment(client, &shape.app, keep).await?;
            let waited = Stopwatch::start();
            loop {
                let nodes = cluster::karpenter_nodes(client).await?.len();
                let claims = cluster::count_nodeclaims(client).await?;
                let counts = cluster::count_pods(client, &shape.selector()).await?;
                tick(
                    run,
                    start,
                    &format!("{nodes} nodes, {claims} claims, {} of {keep} pods running", counts.running),
                )?;
                if nodes as u32 <= keep && claims == nodes && counts.running == keep && counts.total == keep {
                    push_phase(case, run, report, "consolidation", start, nodes);
                    break;
                }
                if waited.elapsed() > run.timeout {
                    bail!("consolidation not finished after {:?}: {nodes} nodes for {keep} pods", run.timeout);
                }
                tokio::time::sleep(run.poll).await;
            }
            let start = run.sampler.now();
            cluster::scale_deployment(client, &shape.app, 0).await?;
            wait_empty(run, &shape).await?;
            push_phase(case, run, report, "scale-in", start, 0);
        }
        Case::Memory50k => {
            // Bare pods (no ReplicaSet controller in the way), 1.5 CPU each: ten to a 16-CPU node, ~5,000 nodes.
            let mut shape = PodShape::pause("pending");
            shape.cpu = "1500m".into();
            let (secs, nodes) = scale_out(run, report, &shape, pods, false).await?;
            report.time_to_running_s = Some(secs);
            report.nodes = nodes;
            let start = run.sampler.now();
            cluster::delete_pods(client, &shape.selector()).await?;
            wait_empty(run, &shape).await?;
            push_phase(case, run, report, "scale-in", start, 0);
        }
    }
    Ok(())
}

/// Creates the workload (a Deployment, or bare pods) and waits until all its pods are Running. Returns the seconds
/// that took and the most nodes seen.
async fn scale_out(
    run: &Run<'_>,
    report: &mut CaseReport,
    shape: &PodShape,
    pods: u32,
    deployment: bool,
) -> anyhow::Result<(f64, usize)> {
    let start = run.sampler.now();
    if deployment {
        cluster::create_deployment(&run.client, shape, pods).await?;
    } else {
        cluster::create_pods(&run.client, shape, pods, 64).await?;
    }
    let nodes = wait_running(run, &[(shape, pods)]).await?;
    let secs = run.sampler.now() - start;
    let case = case_of(report);
    push_phase(case, run, report, "scale-out", start, nodes);
    Ok((secs, nodes))
}

fn case_of(report: &CaseReport) -> Case {
    [Case::ScaleOut1k, Case::Spread2k, Case::Drift600, Case::Consolidation500, Case::Scale5k, Case::Memory50k]
        .into_iter()
        .find(|c| c.name() == report.case)
        .unwrap_or(Case::ScaleOut1k)
}

/// Waits until every workload has exactly its pods, all Running. Returns the most nodes seen.
async fn wait_running(run: &Run<'_>, want: &[(&PodShape, u32)]) -> anyhow::Result<usize> {
    let start = run.sampler.now();
    let waited = Stopwatch::start();
    let mut most = 0;
    loop {
        let nodes = cluster::karpenter_nodes(&run.client).await?.len();
        most = most.max(nodes);
        let mut done = true;
        let (mut running, mut total) = (0, 0);
        for (shape, n) in want {
            let c = cluster::count_pods(&run.client, &shape.selector()).await?;
            done &= c.running == *n && c.total == *n;
            running += c.running;
            total += n;
        }
        tick(run, start, &format!("{running} of {total} pods running, {nodes} nodes"))?;
        if done {
            return Ok(most);
        }
        if waited.elapsed() > run.timeout {
            bail!("{running} of {total} pods running after {:?}", run.timeout);
        }
        tokio::time::sleep(run.poll).await;
    }
}

/// Waits until the workload has no pods and no Karpenter Node or NodeClaim is left.
async fn wait_empty(run: &Run<'_>, shape: &PodShape) -> anyhow::Result<()> {
    let start = run.sampler.now();
    let waited = Stopwatch::start();
    loop {
        let nodes = cluster::karpenter_nodes(&run.client).await?.len();
        let claims = cluster::count_nodeclaims(&run.client).await?;
        let pods = cluster::count_pods(&run.client, &shape.selector()).await?.total;
        tick(run, start, &format!("{pods} pods, {nodes} nodes, {claims} claims left"))?;
        if nodes == 0 && claims == 0 && pods == 0 {
            return Ok(());
        }
        if waited.elapsed() > run.timeout {
            bail!("{nodes} nodes and {claims} NodeClaims still there after {:?}", run.timeout);
        }
        tokio::time::sleep(run.poll).await;
    }
}

/// One poll of a wait: fails if the controller or the kubelet stand-in died; a progress line every ~10 s.
fn tick(run: &Run<'_>, start: f64, what: &str) -> anyhow::Result<()> {
    run.processes.check_alive()?;
    let t = run.sampler.now() - start;
    let poll = run.poll.as_secs_f64();
    if (t % 10.0) < poll {
        let rss = run.sampler.read_now().map(|s| mib(s.rss_kib)).unwrap_or(0.0);
        eprintln!("  {t:6.1} s  {what}  (controller RSS {rss:.1} MiB)");
    }
    Ok(())
}

fn push_phase(case: Case, run: &Run<'_>, report: &mut CaseReport, name: &str, start: f64, nodes: usize) {
    let window = window(&run.sampler.samples.snapshot(), start, f64::MAX);
    let phase = PhaseReport { name: name.into(), nodes, window, upstream: case.upstream(name) };
    eprintln!(
        "  phase {name}: {:.1} s, {nodes} nodes, peak RSS {:.1} MiB, P95 {:.1} MiB, {:.1} CPU-s ({:.2} cores)",
        window.seconds, window.peak_rss_mib, window.p95_rss_mib, window.cpu_seconds, window.avg_cores
    );
    report.phases.push(phase);
}

fn print_report(r: &CaseReport) {
    let opt = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.1} {unit}"));
    println!("\n{}: {} pods, {} nodes", r.case, r.pods, r.nodes);
    println!("  time until all pods Running  {}", opt(r.time_to_running_s, "s"));
    println!("  idle RSS (1 NodePool, 0 pods) {}", opt(r.idle_rss_mib, "MiB"));
    println!("  peak RSS                     {:.1} MiB (P95 {:.1} MiB)", r.peak_rss_mib, r.p95_rss_mib);
    println!("  RSS at the end               {}", opt(r.end_rss_mib, "MiB"));
    if let Some(secs) = r.settle_secs {
        println!("  RSS {secs} s after the last Node {}", opt(r.settled_rss_mib, "MiB"));
    }
    println!("  controller CPU               {:.1} s", r.cpu_seconds);
    if let Some(latency) = &r.latency {
        let show = |what: &str, s: &Option<metrics::Summary>| {
            let le = |v: Option<f64>| v.map_or("beyond the last bucket".to_string(), |v| format!("<= {v} s"));
            match s {
                Some(s) if s.count > 0 => println!(
                    "  {what:<28} p99 {}, max {}, mean {:.3} s ({} observed)",
                    le(s.p99_le_s),
                    le(s.max_le_s),
                    s.mean_s,
                    s.count
                ),
                _ => println!("  {what:<28} -"),
            }
        };
        show("pod -> NodeClaim created", &latency.pod_to_nodeclaim);
        show("provisioning pass", &latency.scheduling_pass);
        show("disruption pass", &latency.disruption_pass);
    }
    println!(
        "  {:<14} {:>8} {:>6} {:>10} {:>10} {:>8} {:>6}   upstream limit",
        "phase", "time s", "nodes", "peak MiB", "P95 MiB", "CPU-s", "cores"
    );
    for p in &r.phases {
        let w = &p.window;
        let up = p.upstream.as_ref().map_or("-".to_string(), |u| {
            format!("{}: P95 < {} MB, < {} cores, < {} min", u.case, u.p95_memory_mb, u.avg_cpu_cores, u.time_mins)
        });
        println!(
            "  {:<14} {:>8.1} {:>6} {:>10.1} {:>10.1} {:>8.1} {:>6.2}   {up}",
            p.name, w.seconds, p.nodes, w.peak_rss_mib, w.p95_rss_mib, w.cpu_seconds, w.avg_cores
        );
    }
    if let Some(e) = &r.error {
        println!("  FAILED: {e}");
    }
}

async fn signalled() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// `uptime`'s line (the machine's load while the suite ran).
fn uptime() -> String {
    std::process::Command::new("uptime")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
