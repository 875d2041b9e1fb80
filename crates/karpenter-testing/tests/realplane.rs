//! The real-plane harness against the real control plane: start, client, apiserver restart (state kept), a crash
//! and start, etcd compaction (410 Gone for an old resourceVersion), a user outside system:masters, the apiserver's metrics, a
//! link that is cut and restored, stop. Skipped with a printed reason where the plane is
//! missing; a failure under CI=true.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use karpenter_testing::realplane::Stop;
use kube::api::{Api, ListParams, PostParams, WatchParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plane_starts_restarts_and_compacts() {
    let Some(plane) = karpenter_testing::realplane::require() else { return };
    let client = plane.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some("probe".into()), ..Default::default() },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    };
    let created = cms.create(&PostParams::default(), &cm).await.expect("create");
    let old_rv = created.metadata.resource_version.clone().expect("rv");

    tokio::task::block_in_place(|| plane.restart_apiserver()).expect("restart");
    // A fresh client (the old one's connections died with the server); the state survived in etcd.
    let client = plane.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert_eq!(cms.get("probe").await.expect("get after restart").data, cm.data);

    // Move etcd on, compact, and restart the apiserver so its watch cache forgets: an old resourceVersion is gone.
    for i in 0..3 {
        let mut next = cm.clone();
        next.metadata.name = Some(format!("probe-{i}"));
        cms.create(&PostParams::default(), &next).await.expect("create");
    }
    let revision = tokio::task::block_in_place(|| plane.compact_etcd()).expect("compact");
    assert!(revision > old_rv.parse::<i64>().expect("numeric rv"), "{revision} vs {old_rv}");
    // This time a crash (SIGKILL) and a start as two steps.
    tokio::task::block_in_place(|| plane.stop_apiserver(Stop::Kill)).expect("kill");
    assert!(cms.get("probe").await.is_err(), "no apiserver");
    tokio::task::block_in_place(|| plane.start_apiserver()).expect("start");
    let client = plane.client().await.expect("client");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut stream = cms.watch(&WatchParams::default(), &old_rv).await.expect("watch").boxed();
    let first = stream.next().await.expect("an event");
    let gone = match first {
        Ok(kube::api::WatchEvent::Error(e)) => e.code == 410,
        Err(kube::Error::Api(e)) => e.code == 410,
        other => panic!("expected 410 Gone, got {other:?}"),
    };
    assert!(gone, "410 Gone after compaction");
    // Ours only: the controller-manager publishes `kube-root-ca.crt` into every namespace in its own time.
    let probes = cms.list(&ListParams::default()).await.expect("list").items;
    let probes: Vec<String> =
        probes.into_iter().filter_map(|c| c.metadata.name).filter(|n| n.starts_with("probe")).collect();
    assert_eq!(probes.len(), 4, "{probes:?}");

    // A user outside system:masters: authenticated by its certificate, allowed nothing until bound.
    let kubeconfig =
        tokio::task::block_in_place(|| plane.user_kubeconfig("probe-user", &["probe-group"])).expect("user kubeconfig");
    let user = kube::Client::try_from(plane.config(&kubeconfig).await.expect("config")).expect("user client");
    let denied = Api::<ConfigMap>::namespaced(user.clone(), "default").list(&ListParams::default()).await;
    match denied {
        Err(kube::Error::Api(e)) => assert_eq!((e.code, e.message.contains("\"probe-user\"")), (403, true), "{e:?}"),
        other => panic!("expected 403 for an unbound user, got {other:?}"),
    }
    // The apiserver's own metrics, as cluster-admin.
    let metrics = tokio::task::block_in_place(|| plane.apiserver_get("/metrics")).expect("metrics");
    assert!(metrics.contains("apiserver_request_total"), "{}", &metrics[..metrics.len().min(500)]);

    // A client through a link: works, fails while the link is cut, works again once restored.
    let link = plane.link().await.expect("link");
    let mut config = plane.config(plane.kubeconfig()).await.expect("config");
    config.cluster_url = link.url().parse().expect("url");
    let linked: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).expect("client"), "default");
    linked.get("probe").await.expect("through the link");
    link.cut();
    linked.get("probe").await.expect_err("the link is cut");
    link.restore();
    linked.get("probe").await.expect("restored");
    plane.stop().expect("stop");
}
