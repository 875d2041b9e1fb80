//! The manager's servers over real sockets, in real time: `/healthz` answers at once, `/readyz` only when the
//! CRDs are installed, `/metrics` serves the registry; the manager stops on shutdown even while it still waits
//! for the cluster state (CRDs missing).

use crate::e2e_support;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use e2e_support::http_get as get;
use karpenter_cloudprovider::{Clock, CloudProvider, SystemClock};
use karpenter_kwok::KwokCloudProvider;
use karpenter_operator::CoreSettings;
use karpenter_operator::manager::{Manager, Started};
use karpenter_operator::node_classes::KubeNodeClasses;
use karpenter_testing::apiserver::{ApiServer, Registry};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    core: CoreSettings,
}

fn settings() -> CoreSettings {
    Cli::try_parse_from(["k", "--metrics-port=0", "--health-probe-port=0", "--disable-leader-election"]).unwrap().core
}

async fn start(server: &ApiServer) -> (Started, CancellationToken, tokio::task::JoinHandle<()>) {
    let client = server.client();
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let cloud: Arc<dyn CloudProvider> = Arc::new(KwokCloudProvider::with_defaults(client.clone()));
    let manager = Manager::new(settings(), client, cloud, Arc::new(KubeNodeClasses::new()), clock)
        .with_bind_ip(std::net::Ipv4Addr::LOCALHOST.into());
    assert_eq!(
        manager.required_crds(),
        ["nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "kwoknodeclasses.karpenter.kwok.sh"]
    );
    let shutdown = CancellationToken::new();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        let mut tx = Some(tx);
        manager
            .run_with(token, move |started| {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(started);
                }
            })
            .await
            .expect("manager stops cleanly");
    });
    let started = tokio::time::timeout(Duration::from_secs(10), rx).await.expect("servers start").unwrap();
    (started, shutdown, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_needs_the_crds_healthz_does_not_and_metrics_are_served() {
    // Without the CRDs: alive, not ready, and the manager still stops on shutdown.
    let bare = ApiServer::builder().registry(Registry::with_crds(Vec::new())).build();
    let (started, shutdown, task) = start(&bare).await;
    assert_eq!(get(started.probes_addr, "/healthz").await, (200, "ok".to_string()));
    let (code, body) = get(started.probes_addr, "/readyz").await;
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("[+]started ok"), "{body}");
    assert!(body.contains("CRDs not installed: nodepools.karpenter.sh, nodeclaims.karpenter.sh"), "{body}");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), task).await.expect("stops while waiting for the state").unwrap();

    // With them: ready, and /metrics serves the registry.
    let server = ApiServer::new();
    let (started, shutdown, task) = start(&server).await;
    let (code, body) = get(started.probes_addr, "/readyz?verbose").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("[+]crd ok"), "{body}");
    let (code, metrics) = get(started.metrics_addr, "/metrics").await;
    assert_eq!(code, 200);
    assert!(metrics.contains("karpenter_build_info"), "{metrics}");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), task).await.expect("stops on shutdown").unwrap();
    // The servers are closed.
    assert!(tokio::net::TcpStream::connect(started.probes_addr).await.is_err());
}
