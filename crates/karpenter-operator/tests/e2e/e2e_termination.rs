//! End to end: a NodeClaim deleted while a PodDisruptionBudget allows no eviction of its pods. The node is
//! cordoned (`karpenter.sh/disrupted`) and waits, evictions refused with 429 and retried, nothing forced; once the
//! budget goes, the drain finishes and the node, the claim and the instance are gone.

use crate::e2e_support;

use std::time::Duration;

use e2e_support::{Cluster, Timer, settings};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use karpenter_testing::{NodePoolOptions, PdbOptions, pod_disruption_budget};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};

#[tokio::test(start_paused = true)]
async fn a_pdb_blocking_eviction_holds_the_drain_until_it_allows_it() {
    let _t = Timer::start("pdb-blocked drain");
    let cluster = Cluster::new().await;
    cluster.node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    let running = cluster.start(settings(&["--disable-leader-election"]));

    cluster.pending_pods("db", 2, "500m", &[("app", "db")]).await;
    let placements = cluster.all_pods_running(Duration::from_secs(120)).await;
    let node = placements.get("db-0").cloned().expect("db-0 placed");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(cluster.client.clone(), "default");
    let pdb = pod_disruption_budget(PdbOptions {
        name: Some("db".into()),
        labels: [("app".to_string(), "db".to_string())].into(),
        min_available: Some(IntOrString::Int(2)),
        ..Default::default()
    });
    pdbs.create(&PostParams::default(), &pdb).await.unwrap();

    let claim = cluster
        .list_claims()
        .await
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .expect("the node's claim");
    cluster.claims().delete(&claim.name_any(), &DeleteParams::default()).await.unwrap();

    // The node is cordoned and waits: the pods stay, the node and the claim stay.
    cluster
        .eventually("the node tainted karpenter.sh/disrupted", Duration::from_secs(60), || async {
            let n = cluster.nodes().get(&node).await.ok()?;
            let taints = n.spec.and_then(|s| s.taints).unwrap_or_default();
            taints.iter().any(|t| t.key == "karpenter.sh/disrupted" && t.effect == "NoSchedule").then_some(())
        })
        .await;
    tokio::time::sleep(Duration::from_secs(180)).await;
    let n = cluster.nodes().get(&node).await.expect("the node waits for the budget");
    assert!(n.metadata.deletion_timestamp.is_some());
    for pod in ["db-0", "db-1"] {
        let p = cluster.pods().get(pod).await.expect("the pod is not evicted");
        if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()) {
            assert!(p.metadata.deletion_timestamp.is_none(), "{pod} not deleted while the budget forbids it");
        }
    }
    assert!(cluster.claims().get_opt(&claim.name_any()).await.unwrap().is_some(), "the claim waits too");
    // (A kwok instance is its Node: a deleting Node already counts as terminated for the provider, so the Node
    // object held by the termination finalizer is what shows the wait.)
    let rendered = running.metrics.render();
    assert!(rendered.contains("karpenter_pods_eviction_requests_total{code=\"429\"}"), "{rendered}");
    assert!(!cluster.events("FailedDraining").await.is_empty(), "FailedDraining reported");

    // The budget goes: the drain finishes, everything of the claim is gone.
    pdbs.delete("db", &DeleteParams::default()).await.unwrap();
    cluster
        .eventually("node, claim and instance gone", Duration::from_secs(300), || async {
            let node_gone = cluster.nodes().get_opt(&node).await.ok()?.is_none();
            let claim_gone = cluster.claims().get_opt(&claim.name_any()).await.ok()?.is_none();
            let instance_gone = !cluster.instances().await.iter().any(|i| i.name_any() == claim.name_any());
            (node_gone && claim_gone && instance_gone).then_some(())
        })
        .await;
    assert!(running.metrics.render().contains("karpenter_nodes_drained_total"));
    running.stop().await;
}
