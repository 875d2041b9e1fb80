//! End to end, voluntary and involuntary disruption with the whole manager: a scaled-down workload is
//! consolidated onto fewer nodes, a NodePool change drifts its nodes and they are replaced, and an interrupted
//! instance is drained and replaced. Workloads are kept at their replica count by the harness's ReplicaSet
//! stand-in, so evicted pods come back and must find room.

use crate::e2e_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use e2e_support::{Cluster, InterruptionQueue, Timer, settings, workload_pods};
use karpenter_api::nodepool::ConsolidationPolicy;
use karpenter_cloudprovider::{InterruptionAction, InterruptionKind};
use karpenter_testing::{NodePoolOptions, nodepool_requirement};
use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// Waits until every replica of `workload` (`replicas` of them) runs on a node; returns pod → node.
async fn workload_running(
    cluster: &Cluster,
    workload: &str,
    replicas: usize,
) -> std::collections::BTreeMap<String, String> {
    cluster
        .eventually(&format!("{replicas} replicas of {workload} running"), Duration::from_secs(600), || async {
            let pods = workload_pods(cluster, workload).await;
            let running = cluster
                .list_pods()
                .await
                .iter()
                .filter(|p| {
                    p.labels().get("workload").map(String::as_str) == Some(workload)
                        && p.metadata.deletion_timestamp.is_none()
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .count();
            (pods.len() == replicas && running == replicas).then_some(pods)
        })
        .await
}

/// Claims, nodes and instances agree: one node and one instance per claim, nothing else.
async fn consistent(cluster: &Cluster) -> bool {
    let claims: BTreeSet<String> =
        cluster.list_claims().await.iter().filter_map(|c| c.provider_id().map(str::to_owned)).collect();
    let nodes: BTreeSet<String> =
        cluster.list_nodes().await.iter().filter_map(|n| n.spec.as_ref().and_then(|s| s.provider_id.clone())).collect();
    let instances: BTreeSet<String> =
        cluster.instances().await.iter().filter_map(|c| c.provider_id().map(str::to_owned)).collect();
    claims == nodes && nodes == instances
}

#[tokio::test(start_paused = true)]
async fn a_scaled_down_workload_is_consolidated_onto_fewer_nodes() {
    let _t = Timer::start("consolidation");
    let cluster = Cluster::new().await;
    cluster
        .node_pool(NodePoolOptions {
            name: Some("default".into()),
            // Two-CPU machines only, so six 900m pods need three nodes.
            requirements: vec![nodepool_requirement("karpenter.kwok.sh/instance-cpu", "In", &["2"])],
            consolidation_policy: Some(ConsolidationPolicy::WhenEmptyOrUnderutilized),
            consolidate_after: Some("30s".into()),
            ..Default::default()
        })
        .await;
    let running = cluster.start(settings(&["--disable-leader-election"]));
    cluster.workloads.scale("web", 6, "900m");
    workload_running(&cluster, "web", 6).await;
    let before = cluster.list_claims().await;
    assert!(before.len() >= 3, "six 900m pods on 2-CPU machines need three nodes, got {}", before.len());

    cluster.workloads.scale("web", 2, "900m");
    cluster
        .eventually("consolidated down to one node", Duration::from_secs(1200), || async {
            let pods = workload_pods(&cluster, "web").await;
            let nodes = cluster.list_nodes().await;
            (nodes.len() == 1 && pods.len() == 2 && pods.values().all(|n| !n.is_empty()) && consistent(&cluster).await)
                .then_some(())
        })
        .await;
    workload_running(&cluster, "web", 2).await;
    let rendered = running.metrics.render();
    assert!(rendered.contains("karpenter_nodeclaims_disrupted_total{"), "{rendered}");
    assert!(rendered.contains("karpenter_voluntary_disruption_decisions_total{"), "{rendered}");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_nodepool_change_drifts_its_nodes_and_they_are_replaced() {
    let _t = Timer::start("drift");
    let cluster = Cluster::new().await;
    cluster
        .node_pool(NodePoolOptions {
            name: Some("default".into()),
            consolidate_after: Some("Never".into()),
            ..Default::default()
        })
        .await;
    let running = cluster.start(settings(&["--disable-leader-election"]));
    cluster.workloads.scale("web", 2, "500m");
    workload_running(&cluster, "web", 2).await;
    let original: BTreeSet<String> = cluster.list_claims().await.iter().map(|c| c.name_any()).collect();
    assert!(!original.is_empty());

    // A template label is a drift-relevant change: the NodePool hash changes.
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}});
    cluster.pools().patch("default", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();

    cluster
        .eventually("drifted nodes replaced", Duration::from_secs(1200), || async {
            let claims = cluster.list_claims().await;
            let names: BTreeSet<String> = claims.iter().map(|c| c.name_any()).collect();
            let replaced = names.is_disjoint(&original)
                && !claims.is_empty()
                && claims.iter().all(|c| c.labels().get("team").map(String::as_str) == Some("blue"));
            (replaced && consistent(&cluster).await).then_some(())
        })
        .await;
    let pods = workload_running(&cluster, "web", 2).await;
    for node in pods.values() {
        let n = cluster.nodes().get(node).await.unwrap();
        assert_eq!(n.labels().get("team").map(String::as_str), Some("blue"), "{node} is a replacement");
    }
    let rendered = running.metrics.render();
    assert!(rendered.contains("karpenter_nodeclaims_created_total{reason=\"drifted\""), "{rendered}");
    assert!(rendered.contains("karpenter_nodeclaims_disrupted_total{reason=\"drifted\""), "{rendered}");
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_instance_is_drained_and_replaced() {
    let _t = Timer::start("interruption");
    let cluster = Cluster::new().await;
    cluster
        .node_pool(NodePoolOptions {
            name: Some("default".into()),
            consolidate_after: Some("Never".into()),
            ..Default::default()
        })
        .await;
    let queue = InterruptionQueue::default();
    let running =
        cluster.start_with(settings(&["--disable-leader-election"]), |m| m.with_interruption(Arc::new(queue.clone())));
    cluster.workloads.scale("web", 2, "500m");
    let first = workload_running(&cluster, "web", 2).await;
    let claims = cluster.list_claims().await;
    let victim = claims.first().expect("a claim").clone();
    let victim_node = victim.status.as_ref().and_then(|s| s.node_name.clone()).expect("registered");
    let provider_id = victim.provider_id().expect("launched").to_string();

    queue.push(&provider_id, InterruptionKind::SpotInterrupted, InterruptionAction::Delete);
    cluster
        .eventually("the interrupted claim and node gone", Duration::from_secs(600), || async {
            let claim_gone = cluster.claims().get_opt(&victim.name_any()).await.ok()?.is_none();
            let node_gone = cluster.nodes().get_opt(&victim_node).await.ok()?.is_none();
            (claim_gone && node_gone).then_some(())
        })
        .await;
    let pods = workload_running(&cluster, "web", 2).await;
    assert!(pods.values().all(|n| n != &victim_node), "{pods:?} (before: {first:?})");
    assert!(consistent(&cluster).await);
    assert_eq!(queue.acknowledged(), ["m-0"], "the message was acknowledged once handled");
    assert!(!cluster.events("SpotInterrupted").await.is_empty());
    let rendered = running.metrics.render();
    assert!(rendered.contains("karpenter_nodeclaims_disrupted_total{reason=\"spot_interrupted\""), "{rendered}");
    running.stop().await;
}

/// Two interruption sources (on AWS the SQS queue and the instance status checks) are both consumed, each by its
/// own loop: the same instance reported by both is deleted (forcefully, by the status check) and both events are
/// acknowledged.
#[tokio::test(start_paused = true)]
async fn a_second_interruption_source_is_consumed_too() {
    let _t = Timer::start("interruption, two sources");
    let cluster = Cluster::new().await;
    cluster
        .node_pool(NodePoolOptions {
            name: Some("default".into()),
            consolidate_after: Some("Never".into()),
            ..Default::default()
        })
        .await;
    let (queue, status) = (InterruptionQueue::default(), InterruptionQueue::default());
    let running = cluster.start_with(settings(&["--disable-leader-election"]), |m| {
        m.with_interruption(Arc::new(queue.clone())).with_interruption(Arc::new(status.clone()))
    });
    cluster.workloads.scale("web", 1, "500m");
    workload_running(&cluster, "web", 1).await;
    let victim = cluster.list_claims().await.first().expect("a claim").clone();
    let provider_id = victim.provider_id().expect("launched").to_string();

    status.push(&provider_id, InterruptionKind::InstanceStatusFailure, InterruptionAction::DeleteForceful);
    cluster
        .eventually("the unhealthy claim gone", Duration::from_secs(600), || async {
            cluster.claims().get_opt(&victim.name_any()).await.ok()?.is_none().then_some(())
        })
        .await;
    queue.push(&provider_id, InterruptionKind::ScheduledChange, InterruptionAction::Delete);
    cluster
        .eventually("both sources acknowledged", Duration::from_secs(60), || async {
            (status.acknowledged().len() == 1 && queue.acknowledged().len() == 1).then_some(())
        })
        .await;
    assert!(!cluster.events("InstanceUnhealthy").await.is_empty());
    running.stop().await;
}
