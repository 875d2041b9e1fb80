//! The kubelet stand-in for kwok nodes: a launched Node turns Ready, gets a Lease and runs its pods; other Nodes
//! are left alone; the background loop stops on shutdown.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::labels::{ARCH, NODE_POOL, OS};
use karpenter_cloudprovider::CloudProvider;
use karpenter_kwok::{KwokCloudProvider, SimulateOptions, kwok_kubelet, simulate_kubelet_with};
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::{
    FakeClock, NodeClaimOptions, NodeOptions, PodOptions, kwok_node_class_ref, node, node_claim, nodepool_requirement,
    pod,
};
use kube::api::{Api, PostParams};
use tokio_util::sync::CancellationToken;

fn claim(name: &str) -> karpenter_api::NodeClaim {
    node_claim(NodeClaimOptions {
        name: Some(name.into()),
        node_pool: Some("default".into()),
        requirements: vec![
            nodepool_requirement(OS, "In", &["linux"]),
            nodepool_requirement(ARCH, "In", &["amd64"]),
            nodepool_requirement(NODE_POOL, "In", &["default"]),
        ],
        requests: [("cpu", "1")].into(),
        node_class_ref: Some(kwok_node_class_ref("default")),
        ..Default::default()
    })
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test]
async fn a_launched_node_becomes_ready_and_runs_its_pods() {
    let server = ApiServer::new();
    let client = server.client();
    let provider = KwokCloudProvider::with_defaults(client.clone());
    provider.create(&claim("kwok-1")).await.unwrap();
    // A Node the kwok provider did not launch (say, a real one): the stand-in must not touch it.
    let nodes: Api<Node> = Api::all(client.clone());
    let real = node(NodeOptions { name: Some("real".into()), ready: Some(false), ..Default::default() });
    nodes.create(&PostParams::default(), &real).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p = pod(PodOptions {
        name: Some("web".into()),
        node_name: Some("kwok-1".into()),
        phase: Some("Pending".into()),
        ..Default::default()
    });
    pods.create(&PostParams::default(), &p).await.unwrap();

    assert!(!is_ready(&nodes.get("kwok-1").await.unwrap()));
    let clock = FakeClock::default();
    let kubelet = kwok_kubelet(client.clone(), Arc::new(clock.clone()));
    let report = kubelet.step().await.unwrap();
    assert_eq!(report.nodes_ready, ["kwok-1"]);
    assert_eq!(report.leases, ["kwok-1"]);
    assert_eq!(report.pods_started, ["default/web"]);
    let n = nodes.get("kwok-1").await.unwrap();
    assert!(is_ready(&n));
    let taints: Vec<String> = n.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().map(|t| t.key).collect();
    assert_eq!(taints, ["karpenter.sh/unregistered"], "not-ready is gone; unregistered stays for the lifecycle");
    assert!(!is_ready(&nodes.get("real").await.unwrap()), "other nodes are not this kubelet's");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    assert!(leases.get_opt("kwok-1").await.unwrap().is_some());
    assert!(leases.get_opt("real").await.unwrap().is_none());
    assert_eq!(pods.get("web").await.unwrap().status.and_then(|s| s.phase).as_deref(), Some("Running"));
    // Nothing to do until the Lease is due.
    assert_eq!(kubelet.step().await.unwrap(), Default::default());
    clock.step_secs(10);
    assert_eq!(kubelet.step().await.unwrap().leases, ["kwok-1"]);
}

#[tokio::test]
async fn simulate_kubelet_runs_until_shutdown() {
    let server = ApiServer::new();
    let client = server.client();
    let provider = KwokCloudProvider::with_defaults(client.clone());
    let shutdown = CancellationToken::new();
    let options = SimulateOptions { interval: Duration::from_millis(20), ..SimulateOptions::default() };
    let task =
        tokio::spawn(simulate_kubelet_with(client.clone(), Arc::new(FakeClock::default()), options, shutdown.clone()));
    provider.create(&claim("kwok-2")).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let mut ready = false;
    for _ in 0..250 {
        if is_ready(&nodes.get("kwok-2").await.unwrap()) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(ready, "the background kubelet made the node Ready");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("stops on shutdown").unwrap();
}
