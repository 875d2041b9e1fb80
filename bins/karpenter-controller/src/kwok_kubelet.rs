//! `karpenter-controller kwok-kubelet`: the kwok provider's kubelet stand-in (`karpenter_kwok::kubelet`) as a
//! process of its own, until SIGTERM/SIGINT. What a cluster without a KWOK controller runs beside the controller
//! (or what `run --kwok-simulate-kubelet` runs inside it): the kwok Nodes turn Ready and keep fresh Leases, pods
//! bound to them run, and pods whose graceful deletion ran out are removed. The Kubernetes client and the logs
//! are `run`'s (kubeconfig from `$KUBECONFIG` or in-cluster, `KUBE_CLIENT_QPS`/`BURST`, JSON logs, `LOG_LEVEL`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use karpenter_cloudprovider::{Clock, SystemClock};
use karpenter_kwok::kubelet::{KubeletOptions, SimulateOptions, kubelet_options, simulate_kubelet_with};
use karpenter_operator::CoreSettings;
use karpenter_operator::client::build_client;

#[derive(Debug, Args)]
pub struct KwokKubeletArgs {
    /// Time between passes (e.g. 500ms, 1s, 2s).
    #[arg(long, env = "KWOK_KUBELET_INTERVAL", default_value = "1s", value_parser = parse_interval)]
    interval: Duration,
    /// Renew each node Lease once this long has passed since its last renewal (the real kubelet's 10s; large
    /// clusters on small machines may use up to 30s: the node lifecycle controller's grace period is 40s).
    #[arg(long, env = "KWOK_KUBELET_LEASE_RENEW_INTERVAL", default_value = "10s", value_parser = parse_interval)]
    lease_renew_interval: Duration,
    /// Play the kubelet of every Node, not only those the kwok provider launched (label
    /// `karpenter.kwok.sh/managed=true`).
    #[arg(long)]
    all_nodes: bool,
    #[command(flatten)]
    core: CoreSettings,
}

/// `500ms`, `1s`, `1.5s`, `2m`: a positive duration of at least 10 ms.
fn parse_interval(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: f64 = number.parse().map_err(|_| format!("not a duration: {text:?} (e.g. 500ms, 1s)"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("unknown unit in {text:?}: use ms, s or m")),
    };
    if !(0.01..=3600.0).contains(&seconds) {
        return Err(format!("{text:?} is out of range (10ms to 1h)"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Runs the kubelet stand-in until SIGTERM/SIGINT.
pub fn run(args: KwokKubeletArgs) -> anyhow::Result<ExitCode> {
    let core = args.core.clone().normalized();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    karpenter_operator::logging::init(&core.log_config(), crate::build_info::COMMIT, clock.clone())
        .context("setting up logging")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("kwok-kubelet")
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async move {
        let shutdown = karpenter_operator::shutdown::on_signals();
        let client = build_client(&core.client_options()).await.context("building the Kubernetes client")?;
        let mut kubelet = if args.all_nodes { KubeletOptions::default() } else { kubelet_options() };
        kubelet.renew_interval =
            chrono::Duration::from_std(args.lease_renew_interval).context("--lease-renew-interval is out of range")?;
        tracing::info!(
            interval_ms = u64::try_from(args.interval.as_millis()).unwrap_or(u64::MAX),
            lease_renew_interval_ms = u64::try_from(args.lease_renew_interval.as_millis()).unwrap_or(u64::MAX),
            node_selector = kubelet.node_selector.as_deref().unwrap_or("<all nodes>"),
            "starting the kwok kubelet"
        );
        simulate_kubelet_with(client, clock, SimulateOptions { interval: args.interval, kubelet }, shutdown).await;
        tracing::info!("kwok kubelet stopped");
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::parse_interval;
    use std::time::Duration;

    #[test]
    fn intervals_parse_with_units_and_bounds() {
        assert_eq!(parse_interval("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_interval("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_interval("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_interval("1m"), Ok(Duration::from_secs(60)));
        for bad in ["", "x", "1h", "0s", "5ms", "-1s", "2d"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }
}
