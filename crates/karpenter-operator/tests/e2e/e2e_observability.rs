//! End to end: the cluster-state observability controllers run in the manager and record what the cluster holds;
//! `DISABLE_CLUSTER_STATE_OBSERVABILITY` keeps them from starting.

use crate::e2e_support;

use std::time::Duration;

use e2e_support::{Cluster, settings};
use karpenter_testing::NodePoolOptions;

/// Lines of the exposition that are samples of `name` (with labels).
fn series<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let prefix = format!("{name}{{");
    text.lines().filter(|l| l.starts_with(&prefix)).collect()
}

#[tokio::test(start_paused = true)]
async fn provisioned_nodes_and_their_pods_show_in_the_cluster_state_metrics() {
    let cluster = Cluster::new().await;
    cluster.node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    let running = cluster.start(settings(&["--disable-leader-election"]));
    cluster.pending_pods("web", 3, "1", &[("app", "web")]).await;
    let placements = cluster.all_pods_running(Duration::from_secs(120)).await;
    // metrics.node writes every 5 s, metrics.pod resyncs every 30 s, metrics.nodepool every 10 s.
    tokio::time::sleep(Duration::from_secs(31)).await;

    let text = running.metrics.render();
    for node in placements.values() {
        let allocatable = series(&text, "karpenter_nodes_allocatable");
        assert!(
            allocatable.iter().any(|l| l.contains(&format!("node_name=\"{node}\""))
                && l.contains("nodepool=\"default\"")
                && l.contains("managed=\"true\"")
                && l.contains("resource_type=\"cpu\"")),
            "{node}: {allocatable:?}"
        );
    }
    for pod in placements.keys() {
        let name = pod.rsplit('/').next().unwrap();
        let states = series(&text, "karpenter_pods_state");
        assert!(
            states.iter().any(|l| l.contains(&format!("name=\"{name}\"")) && l.contains("phase=\"Running\"")),
            "{pod}: {states:?}"
        );
    }
    assert!(text.contains("karpenter_pods_bound_duration_seconds_count{} 3"), "{text}");
    assert!(series(&text, "karpenter_pods_unbound_time_seconds").is_empty(), "no pod waits any more");
    assert!(!series(&text, "karpenter_cluster_utilization_percent").is_empty());
    assert!(!series(&text, "karpenter_nodepools_cost_total").is_empty());
    assert!(!text.contains("karpenter_cluster_state_node_count 0"), "{text}");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn disabled_cluster_state_observability_records_no_node_or_pod_series() {
    let cluster = Cluster::new().await;
    cluster.node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    let running = cluster.start(settings(&["--disable-leader-election", "--disable-cluster-state-observability=true"]));
    cluster.pending_pods("web", 2, "1", &[("app", "web")]).await;
    cluster.all_pods_running(Duration::from_secs(120)).await;
    tokio::time::sleep(Duration::from_secs(31)).await;

    let text = running.metrics.render();
    for family in ["karpenter_nodes_allocatable", "karpenter_pods_state", "karpenter_nodepools_cost_total"] {
        assert!(series(&text, family).is_empty(), "{family} is not recorded");
    }
    assert!(!text.contains("karpenter_pods_bound_duration_seconds_count{} 2"));
    // Upstream's cluster state records its own gauges whatever the setting.
    assert!(!text.contains("karpenter_cluster_state_node_count 0"), "{text}");
    running.stop().await;
}
