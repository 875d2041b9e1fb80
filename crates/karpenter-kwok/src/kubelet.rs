//! The built-in kubelet stand-in for kwok nodes (`--kwok-simulate-kubelet`), for clusters without a KWOK
//! controller. It is the test kit's [`Kubelet`] (written once, in `karpenter_testing::standins`), restricted to the
//! Nodes this provider launched (label [`MANAGED_LABEL`]`=true`) and run on a timer until shutdown.

use std::sync::Arc;
use std::time::Duration;

use karpenter_cloudprovider::{Clock, SystemClock};
pub use karpenter_testing::standins::{Kubelet, KubeletOptions, KubeletReport};
use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::provider::MANAGED_LABEL;

/// How often [`simulate_kubelet`] runs a pass by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);

/// Settings of [`simulate_kubelet_with`].
#[derive(Clone, Debug)]
pub struct SimulateOptions {
    /// Time between passes (default [`DEFAULT_INTERVAL`]). A new Node turns Ready within about one interval.
    pub interval: Duration,
    /// The kubelet's settings; `node_selector` defaults to the kwok provider's Nodes.
    pub kubelet: KubeletOptions,
}

impl Default for SimulateOptions {
    fn default() -> Self {
        Self { interval: DEFAULT_INTERVAL, kubelet: kubelet_options() }
    }
}

/// The kubelet settings for kwok nodes: only Nodes labelled [`MANAGED_LABEL`]`=true`, the real kubelet's Lease
/// timing (40 s duration, renewed every 10 s).
pub fn kubelet_options() -> KubeletOptions {
    KubeletOptions { node_selector: Some(format!("{MANAGED_LABEL}=true")), ..KubeletOptions::default() }
}

/// A kubelet stand-in for the kwok provider's Nodes (see [`kubelet_options`]); call
/// [`step`](Kubelet::step) for one pass.
pub fn kwok_kubelet(client: Client, clock: Arc<dyn Clock>) -> Kubelet {
    Kubelet::with_options(client, clock, kubelet_options())
}

/// Runs the kubelet stand-in for the kwok provider's Nodes with the default settings until `shutdown` is
/// cancelled: every pass marks new Nodes Ready, creates or renews their Leases in `kube-node-lease`, starts the
/// pods bound to them and removes pods whose graceful deletion ran out. What the binary runs for
/// `--kwok-simulate-kubelet`.
pub async fn simulate_kubelet(client: Client, shutdown: CancellationToken) {
    simulate_kubelet_with(client, Arc::new(SystemClock), SimulateOptions::default(), shutdown).await;
}

/// [`simulate_kubelet`] with a clock and settings. A pass that fails (e.g. the API server is unreachable) is
/// logged and retried on the next tick.
pub async fn simulate_kubelet_with(
    client: Client,
    clock: Arc<dyn Clock>,
    options: SimulateOptions,
    shutdown: CancellationToken,
) {
    let kubelet = Kubelet::with_options(client, clock, options.kubelet);
    let mut tick = tokio::time::interval(options.interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let pass = tokio::select! {
            _ = shutdown.cancelled() => return,
            pass = kubelet.step() => pass,
        };
        match pass {
            Ok(report) if report != KubeletReport::default() => tracing::debug!(
                nodes_ready = report.nodes_ready.len(),
                leases = report.leases.len(),
                pods_started = report.pods_started.len(),
                pods_removed = report.pods_removed.len(),
                "simulated kubelet pass"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "simulated kubelet pass failed"),
        }
    }
}
