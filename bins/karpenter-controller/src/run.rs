//! `karpenter-controller run`: settings, logs, the Kubernetes clients, the provider, and the controller manager
//! (`karpenter_operator::manager`) until SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use karpenter_aws::settings::AwsSettings;
use karpenter_cloudprovider::{Clock, SystemClock};
use karpenter_operator::CoreSettings;
use karpenter_operator::client::{client_from_config, load_config};
use karpenter_operator::manager::ManagerError;
use karpenter_operator::metrics::{BuildInfo, Metrics};

use crate::build_info::{COMMIT, RUSTC_VERSION};
use crate::providers::{Provider, Start};

/// Exit status of a usage error (as the other subcommands).
const USAGE: u8 = 2;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The cloud provider: `kwok` (fake Nodes through the Kubernetes API) or `aws` (needs the `aws` build feature).
    #[arg(long, value_enum)]
    pub(crate) provider: Provider,
    /// kwok: also play the kubelet of the kwok Nodes (Ready, Leases, running pods), for clusters without a KWOK
    /// controller.
    #[arg(long, env = "KWOK_SIMULATE_KUBELET", default_value = "false", action = clap::ArgAction::Set, value_parser = karpenter_api::settings::parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub(crate) kwok_simulate_kubelet: bool,
    /// kwok: instance types in upstream's kwok JSON format instead of the built-in catalogue.
    #[arg(long, env = "KWOK_INSTANCE_TYPES", value_name = "FILE")]
    pub(crate) instance_types: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) core: CoreSettings,
    #[command(flatten)]
    pub(crate) aws: AwsSettings,
}

/// Runs the controller until SIGTERM/SIGINT.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let provider = args.provider.entry();
    if let Some(message) = (provider.usage_error)(&args) {
        eprintln!("error: {message}");
        return Ok(ExitCode::from(USAGE));
    }
    (provider.preflight)(&args)?;
    let core = args.core.clone().normalized();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    karpenter_operator::logging::init(&core.log_config(), COMMIT, clock.clone()).context("setting up logging")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads())
        .enable_all()
        .thread_name("karpenter")
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(run_async(args, core, clock))
}

/// Where the client configuration comes from, as kube infers it: `$KUBECONFIG`, else `~/.kube/config`, else the
/// in-cluster service account.
fn config_source() -> String {
    if let Some(path) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) {
        return format!("kubeconfig {}", path.to_string_lossy());
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).map(|h| h.join(".kube/config"));
    match home {
        Some(path) if path.exists() || std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() => {
            format!("kubeconfig {}", path.display())
        }
        _ => "the in-cluster service account".to_owned(),
    }
}

/// The runtime's worker threads: `TOKIO_WORKER_THREADS` when set (tokio's own variable), else one. The
/// controller's work between simulations is small and bursty (watch events, reconciles, API calls): one worker
/// does it all, where two spent a tenth of the process's CPU waking and parking each other (docs/benchmarks.md,
/// "scale-5k CPU"). The simulations, seconds of CPU at 5,000 nodes, run on tokio's blocking pool
/// (`karpenter_operator::state::simulate_off_runtime`), so they never hold up the worker.
fn worker_threads() -> usize {
    worker_threads_from(std::env::var("TOKIO_WORKER_THREADS").ok().as_deref())
}

/// [`worker_threads`] for the variable's value: a positive count, else one.
fn worker_threads_from(value: Option<&str>) -> usize {
    value.and_then(|v| v.trim().parse().ok()).filter(|&n: &usize| n > 0).unwrap_or(1)
}

async fn run_async(args: RunArgs, core: CoreSettings, clock: Arc<dyn Clock>) -> anyhow::Result<ExitCode> {
    let shutdown = karpenter_operator::shutdown::on_signals();
    let options = core.client_options();
    let source = config_source();
    let config =
        load_config(&options).await.with_context(|| format!("loading the Kubernetes configuration ({source})"))?;
    let server = format!("the Kubernetes API server {} ({source})", config.cluster_url);
    let client = client_from_config(config.clone(), &options).context("building the Kubernetes client")?;
    // The leader election gets its own client: renewals must not queue behind the controllers' requests.
    let leader_client = client_from_config(config, &options).context("building the leader-election client")?;
    let metrics = Arc::new(Metrics::new(&BuildInfo::current(COMMIT, RUSTC_VERSION)));

    let provider = args.provider.entry();
    let start =
        Start { args: &args, core, client, clock, shutdown: shutdown.clone(), metrics: metrics.clone(), server };
    let manager = (provider.manager)(start).await?;
    let manager = manager
        .with_node_class_registrations((provider.node_classes)())
        .with_leader_client(leader_client)
        .with_metrics(metrics);
    #[cfg(feature = "jemalloc-profiling")]
    let manager = manager.with_heap_profiler(jemalloc_heap_profile());
    match manager.run(shutdown).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e @ ManagerError::LeadershipLost) => {
            tracing::error!(error = %e, "exiting");
            Ok(ExitCode::FAILURE)
        }
        Err(e) => Err(e.into()),
    }
}

/// `/debug/pprof/heap` (with `ENABLE_PROFILING`): jemalloc's sampled live heap as gzip-compressed pprof protobuf.
/// jemalloc samples only when the process started with its profiler on (`_RJEM_MALLOC_CONF=prof:true`); otherwise
/// the request is answered with what to set.
#[cfg(feature = "jemalloc-profiling")]
fn jemalloc_heap_profile() -> karpenter_operator::profiling::HeapProfiler {
    Arc::new(|| {
        Box::pin(async {
            let Some(ctl) = jemalloc_pprof::PROF_CTL.as_ref() else {
                return Err("jemalloc's profiler is off: start the controller with _RJEM_MALLOC_CONF=prof:true".into());
            };
            let mut ctl = ctl.clone().lock_owned().await;
            if !ctl.activated() {
                return Err("jemalloc's profiler is inactive (prof_active:false)".into());
            }
            // The dump goes through a temporary file: off the runtime's worker.
            tokio::task::spawn_blocking(move || ctl.dump_pprof().map_err(|e| format!("dumping jemalloc's heap: {e}")))
                .await
                .map_err(|e| format!("dumping jemalloc's heap: {e}"))?
        })
    })
}

#[cfg(test)]
mod tests {
    use super::worker_threads_from;

    #[test]
    fn one_worker_unless_tokio_worker_threads_names_a_positive_count() {
        assert_eq!(worker_threads_from(None), 1);
        assert_eq!(worker_threads_from(Some("4")), 4);
        assert_eq!(worker_threads_from(Some(" 2 ")), 2);
        assert_eq!(worker_threads_from(Some("0")), 1);
        assert_eq!(worker_threads_from(Some("many")), 1);
    }
}
