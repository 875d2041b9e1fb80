//! The API server over plain HTTP on 127.0.0.1, reached by a kube client built from a `Config`.
#![cfg(feature = "apiserver")]

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use karpenter_testing::apiserver::ApiServer;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::{Client, Config, ResourceExt};

#[tokio::test]
async fn serves_kube_clients_over_tcp() {
    let server = ApiServer::new();
    let (addr, task) = server.serve_tcp(([127, 0, 0, 1], 0).into()).await.expect("bind");
    let url: http::Uri = format!("http://{addr}").parse().expect("url");
    let client = Client::try_from(Config::new(url)).expect("client");
    assert_eq!(client.apiserver_version().await.expect("version").minor, "33");
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let rv = server.resource_version().to_string();
    let mut watch = Box::pin(cms.watch(&WatchParams::default(), &rv).await.expect("watch"));
    let mut c = ConfigMap::default();
    c.metadata.name = Some("over-tcp".into());
    cms.create(&PostParams::default(), &c).await.expect("create");
    // The same state is seen in-process.
    let local: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    assert_eq!(local.get("over-tcp").await.expect("get").name_any(), "over-tcp");
    let event = tokio::time::timeout(std::time::Duration::from_secs(10), watch.try_next())
        .await
        .expect("in time")
        .expect("ok")
        .expect("event");
    assert!(matches!(event, WatchEvent::Added(o) if o.name_any() == "over-tcp"));
    task.abort();
}
