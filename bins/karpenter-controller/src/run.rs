//! `karpenter-controller run`: settings, logs, the Kubernetes clients, the provider, and the controller manager
//! (`karpenter_operator::manager`) until SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use karpenter_aws::settings::AwsSettings;
use karpenter_cloudprovider::{Clock, CloudProvider, SystemClock};
use karpenter_kwok::api::KWOKNodeClass;
use karpenter_kwok::{KwokCloudProvider, KwokOptions};
use karpenter_operator::CoreSettings;
use karpenter_operator::client::{client_from_config, load_config};
use karpenter_operator::manager::{Manager, ManagerError};
use karpenter_operator::metrics::{BuildInfo, Metrics};
use karpenter_operator::node_classes::KubeNodeClasses;

use crate::Provider;
use crate::build_info::{COMMIT, RUSTC_VERSION};

/// Exit status of a usage error (as the other subcommands).
const USAGE: u8 = 2;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The cloud provider: `kwok` (fake Nodes through the Kubernetes API) or `aws` (needs the `aws` build feature).
    #[arg(long, value_enum)]
    provider: Provider,
    /// kwok: also play the kubelet of the kwok Nodes (Ready, Leases, running pods), for clusters without a KWOK
    /// controller.
    #[arg(long, env = "KWOK_SIMULATE_KUBELET", default_value = "false", action = clap::ArgAction::Set, value_parser = karpenter_api::settings::parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    kwok_simulate_kubelet: bool,
    /// kwok: instance types in upstream's kwok JSON format instead of the built-in catalogue.
    #[arg(long, env = "KWOK_INSTANCE_TYPES", value_name = "FILE")]
    instance_types: Option<PathBuf>,
    #[command(flatten)]
    core: CoreSettings,
    #[command(flatten)]
    aws: AwsSettings,
}

/// Runs the controller until SIGTERM/SIGINT.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    if args.provider == Provider::Aws && !cfg!(feature = "aws") {
        eprintln!(
            "error: --provider aws needs a karpenter-controller built with the `aws` cargo feature \
             (cargo build -p karpenter-controller --features aws); this build only has the kwok provider"
        );
        return Ok(ExitCode::from(USAGE));
    }
    if args.provider == Provider::Aws && (args.instance_types.is_some() || args.kwok_simulate_kubelet) {
        eprintln!("error: --instance-types and --kwok-simulate-kubelet apply to --provider kwok only");
        return Ok(ExitCode::from(USAGE));
    }
    if args.provider == Provider::Aws
        && let Err(e) = args.aws.validate()
    {
        eprintln!("error: {e}");
        return Ok(ExitCode::from(USAGE));
    }
    // A malformed price file stops the controller before it starts anything.
    if args.provider == Provider::Aws {
        args.aws.check_price_file().context("PRICE_FILE")?;
    }
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

    let manager = match args.provider {
        Provider::Kwok => {
            let node_classes = KubeNodeClasses::new();
            if let Err(e) = node_classes.start::<KWOKNodeClass>(client.clone(), shutdown.clone()).await {
                // Only a 404 says the resource is unknown to the server; anything else is about reaching it.
                let hint = if matches!(&e, kube::Error::Api(s) if s.code == 404) {
                    " (the kwok CRDs are not installed: `karpenter-controller crds --provider kwok | kubectl apply -f -`)"
                } else {
                    ""
                };
                return Err(anyhow::Error::new(e).context(format!("listing KWOKNodeClasses from {server}{hint}")));
            }
            let mut kwok_options = match &args.instance_types {
                Some(path) => KwokOptions::from_instance_types_file(path)?,
                None => KwokOptions::default(),
            };
            kwok_options.node_classes = Some(Arc::new(node_classes.clone()));
            let cloud: Arc<dyn CloudProvider> = Arc::new(KwokCloudProvider::new(client.clone(), kwok_options));
            let mut manager = Manager::new(core, client.clone(), cloud, Arc::new(node_classes), clock);
            if args.kwok_simulate_kubelet {
                let kubelet = karpenter_kwok::simulate_kubelet(client.clone(), shutdown.clone());
                manager = manager.with_controller("kwok.kubelet", Box::pin(kubelet));
            }
            manager
        }
        Provider::Aws => aws_manager(&args, core, client.clone(), clock, shutdown.clone(), metrics.clone()).await?,
    };
    let manager = manager.with_leader_client(leader_client).with_metrics(metrics);
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

#[cfg(feature = "aws")]
async fn aws_manager(
    args: &RunArgs,
    core: CoreSettings,
    client: kube::Client,
    clock: Arc<dyn Clock>,
    shutdown: tokio_util::sync::CancellationToken,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Manager> {
    let (runtime, node_classes) =
        crate::aws::start(&core, &args.aws, client.clone(), clock.clone(), shutdown, metrics).await?;
    let mut manager = Manager::new(core, client, runtime.cloud_provider, node_classes, clock);
    if let Some(source) = runtime.interruption {
        manager = manager.with_interruption(source);
    }
    manager = manager.with_interruption(runtime.instance_status);
    for (i, controller) in runtime.controllers.into_iter().enumerate() {
        manager = manager.with_controller(format!("aws.{i}"), controller);
    }
    Ok(manager)
}

#[cfg(not(feature = "aws"))]
async fn aws_manager(
    _args: &RunArgs,
    _core: CoreSettings,
    _client: kube::Client,
    _clock: Arc<dyn Clock>,
    _shutdown: tokio_util::sync::CancellationToken,
    _metrics: Arc<Metrics>,
) -> anyhow::Result<Manager> {
    anyhow::bail!("--provider aws needs the `aws` cargo feature")
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
