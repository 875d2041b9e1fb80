//! End to end: pending pods → NodeClaims → kwok Nodes → registered and initialized → pods bound and running,
//! with the whole manager (every controller, leader election off) against the in-process API server.

use crate::e2e_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use e2e_support::{Cluster, Timer, http_get, is_true, settings};
use karpenter_api::ProviderLabels;
use karpenter_cloudprovider::{CloudProviderError, FakeCloudProvider, FakeOptions, Method};
use karpenter_testing::NodePoolOptions;
use kube::ResourceExt;

#[tokio::test(start_paused = true)]
async fn pending_pods_get_nodes_that_initialize_and_run_them() {
    let _t = Timer::start("provisioning");
    let cluster = Cluster::new().await;
    cluster.node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    let running = cluster.start(settings(&["--disable-leader-election"]));

    cluster.pending_pods("web", 5, "1", &[("app", "web")]).await;
    let placements = cluster.all_pods_running(Duration::from_secs(120)).await;

    // The NodePool was made Ready by the manager (kwok class status → NodeClassReady; validation).
    let pool = cluster.pools().get("default").await.unwrap();
    assert!(pool.is_ready(), "{:?}", pool.status);

    let claims = cluster.list_claims().await;
    let nodes = cluster.list_nodes().await;
    assert!(!claims.is_empty(), "NodeClaims were created");
    assert_eq!(claims.len(), nodes.len(), "one Node per NodeClaim");
    let node_names: BTreeSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    for claim in &claims {
        for cond in ["Launched", "Registered", "Initialized", "Ready"] {
            assert!(is_true(claim, cond), "{} has {cond}=True", claim.name_any());
        }
        let node = claim.status.as_ref().and_then(|s| s.node_name.clone()).expect("status.nodeName");
        assert!(node_names.contains(&node));
        assert_eq!(claim.labels().get("karpenter.sh/nodepool").map(String::as_str), Some("default"));
    }
    for node in &nodes {
        assert_eq!(node.labels().get("karpenter.sh/initialized").map(String::as_str), Some("true"));
        assert_eq!(node.labels().get("karpenter.sh/registered").map(String::as_str), Some("true"));
        let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        assert!(!taints.iter().any(|t| t.key == "karpenter.sh/unregistered"), "{taints:?}");
        assert!(node.finalizers().iter().any(|f| f == "karpenter.sh/termination"));
    }
    for (pod, node) in &placements {
        assert!(node_names.contains(node), "{pod} runs on a Karpenter node ({node})");
    }
    // The instances are exactly the claims' (nothing leaked, nothing launched twice).
    let instances: BTreeSet<String> =
        cluster.instances().await.iter().filter_map(|c| c.provider_id().map(str::to_owned)).collect();
    let claimed: BTreeSet<String> = claims.iter().filter_map(|c| c.provider_id().map(str::to_owned)).collect();
    assert_eq!(instances, claimed);

    let rendered = running.metrics.render();
    assert!(
        rendered.contains("karpenter_nodeclaims_created_total{reason=\"provisioned\",nodepool=\"default\""),
        "{rendered}"
    );
    assert!(!cluster.events("Nominated").await.is_empty(), "pods were nominated");
    running.stop().await;
}

/// Every provider call goes through the manager's metrics decorator, whatever the provider: a launch shows in
/// `karpenter_cloudprovider_duration_seconds` (a histogram) and a failed one in
/// `karpenter_cloudprovider_errors_total`, both labelled with the calling controller, on the `/metrics` the
/// manager serves.
#[tokio::test(start_paused = true)]
async fn provider_calls_are_timed_and_their_errors_counted_on_metrics() {
    let cluster = Cluster::new().await;
    cluster.node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    let labels = ProviderLabels { name: "fake".into(), ..karpenter_kwok::labels::provider_labels() };
    let fake = FakeCloudProvider::new(FakeOptions { labels, ..karpenter_testing::kwok::fake_options() });
    fake.fail_next(Method::Create, 1, || CloudProviderError::create("LaunchFailed", "injected"));
    let (running, metrics_addr) =
        cluster.start_serving(settings(&["--disable-leader-election"]), Arc::new(fake.clone())).await;

    cluster.pending_pods("web", 1, "1", &[("app", "web")]).await;
    cluster
        .eventually("a launch after the injected failure", Duration::from_secs(120), async || {
            (fake.call_count(Method::Create) >= 2).then_some(())
        })
        .await;

    let (code, text) = http_get(metrics_addr, "/metrics").await;
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("# TYPE karpenter_cloudprovider_duration_seconds histogram"), "{text}");
    let create = r#"controller="nodeclaim.lifecycle",method="Create",provider="fake""#;
    let count = format!("karpenter_cloudprovider_duration_seconds_count{{{create}}} ");
    let launches = text.lines().find_map(|l| l.strip_prefix(count.as_str())).and_then(|n| n.parse::<u64>().ok());
    assert!(launches.is_some_and(|n| n >= 2), "both launches are timed:\n{text}");
    assert!(
        text.contains(&format!(r#"karpenter_cloudprovider_errors_total{{{create},error="CreateError"}} 1"#)),
        "the failed launch is counted:\n{text}"
    );
    running.stop().await;
}
