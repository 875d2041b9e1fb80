//! The toy cloud plugged into the whole operator, as a binary wires it, against the in-process API server: the
//! server learns ToyNodeClass from the crate's CRD; a ToyNodeClass, a NodePool naming it and a pending pod go in;
//! the operator marks the class Ready (ready on sight), the NodePool Ready, and launches a NodeClaim for the pod
//! through the toy cloud.
//!
//! Everything runs on tokio's paused clock (the server's timestamps and the controllers' clock follow it), so the
//! minutes of cluster time the polls allow take well under a second when nothing is wrong.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use clap::Parser;
use k8s_openapi::api::core::v1::{Event, Pod};
use karpenter_api::condition::Conditions;
use karpenter_api::nodeclaim::NodeClassReference;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_cloudprovider::{Clock, CloudProvider, InMemoryNodeClasses};
use karpenter_example_toy_cloud::api::{GROUP, KIND};
use karpenter_example_toy_cloud::{ToyCloud, ToyNodeClass, ToyNodeClassSpec, ToyOptions};
use karpenter_operator::CoreSettings;
use karpenter_testing::apiserver::{ApiServer, Registry};
use karpenter_testing::standins::Scheduler;
use karpenter_testing::{NodePoolOptions, PodOptions, TokioClock, node_pool, pod, tokio_now};
use kube::api::{Api, ListParams, PostParams};
use tokio_util::sync::CancellationToken;

/// The settings a binary parses from its flags and environment: the defaults, servers on ephemeral ports.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    core: CoreSettings,
}

/// Polls `check` every second of cluster time until it gives `Some`, for at most five minutes of cluster time;
/// on timeout the failure shows the NodeClaims and the events.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    client: &kube::Client,
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = tokio_now() + Duration::from_secs(300);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio_now() >= deadline {
            panic!("timed out waiting for {what}\n{}", describe(client).await);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The NodeClaims (provider id, conditions) and the events, one a line.
async fn describe(client: &kube::Client) -> String {
    let mut out = String::new();
    let claims: Api<NodeClaim> = Api::all(client.clone());
    for c in claims.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default() {
        let conditions = c.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
        let conditions: Vec<String> =
            conditions.iter().map(|c| format!("{}={:?} {} {}", c.type_, c.status, c.reason, c.message)).collect();
        out += &format!("nodeclaim {:?} {:?} {conditions:?}\n", c.metadata.name, c.provider_id());
    }
    let events: Api<Event> = Api::all(client.clone());
    for e in events.list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default() {
        let object = &e.involved_object;
        out += &format!(
            "event {:?}/{:?} {:?}: {:?}\n",
            object.kind.as_deref().unwrap_or_default(),
            object.name.as_deref().unwrap_or_default(),
            e.reason.as_deref().unwrap_or_default(),
            e.message.as_deref().unwrap_or_default()
        );
    }
    out
}

#[tokio::test(start_paused = true)]
async fn the_operator_launches_a_pending_pod_on_the_toy_cloud() {
    let clock = Arc::new(TokioClock::starting_at(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()));
    // The server serves Karpenter's kinds and the toy cloud's, generated with the toy cloud's labels as a binary
    // prints them (`crds --provider toy`): the NodeClaim CRD then enforces the toy's restricted label domain.
    let crds = karpenter_api::node_class_api::crds_with(
        &karpenter_example_toy_cloud::labels(),
        &karpenter_example_toy_cloud::node_class_apis(),
    );
    let server = ApiServer::builder().clock(clock.clone()).registry(Registry::with_crds(crds)).build();
    let client = server.client();

    let classes: Api<ToyNodeClass> = Api::all(client.clone());
    let spec = ToyNodeClassSpec { region: "toy-east-1".into(), max_nodes: Some(3) };
    classes.create(&PostParams::default(), &ToyNodeClass::new("default", spec)).await.unwrap();
    let pools: Api<NodePool> = Api::all(client.clone());
    let mut pool = node_pool(NodePoolOptions {
        name: Some("toy".into()),
        node_class_ref: Some(NodeClassReference::new(GROUP, KIND, "default")),
        ..Default::default()
    });
    // No status: the operator's NodePool controllers must make it Ready.
    pool.status = None;
    let created = pools.create(&PostParams::default(), &pool).await.unwrap();
    assert!(!created.status.is_some_and(|s| s.is_true("Ready")));
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = pod(PodOptions {
        name: Some("web".into()),
        requests: [("cpu", "3"), ("memory", "1Gi")].into(),
        ..Default::default()
    });
    pods.create(&PostParams::default(), &pod).await.unwrap();
    // The scheduler finds no node for it and says so on the pod, which is what Karpenter provisions for.
    let report = Scheduler::new(client.clone()).step().await.unwrap();
    assert_eq!(report.unschedulable.len(), 1, "{report:?}");

    // As a binary's provider entry does: the crate builds the manager, the binary adds the registrations.
    let settings = Cli::try_parse_from(["karpenter-controller", "--metrics-port=0", "--health-probe-port=0"])
        .expect("default settings")
        .core;
    let options = ToyOptions::default();
    let account = options.account.clone();
    let shutdown = CancellationToken::new();
    let clock_dyn: Arc<dyn Clock> = clock.clone();
    let manager = karpenter_example_toy_cloud::manager(settings, client.clone(), clock_dyn, shutdown.clone(), options)
        .await
        .expect("the toy cloud starts")
        .with_node_class_registrations(karpenter_example_toy_cloud::node_classes())
        .with_bind_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let running = tokio::spawn(manager.run(shutdown.clone()));

    eventually(&client, "the ToyNodeClass to be Ready", || async {
        let class = classes.get("default").await.ok()?;
        class.status.as_ref().is_some_and(|s| s.is_true("Ready")).then_some(())
    })
    .await;
    eventually(&client, "the NodePool to be Ready", || async {
        let pool = pools.get("toy").await.ok()?;
        pool.status.as_ref().is_some_and(|s| s.is_true("Ready")).then_some(())
    })
    .await;
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let launched = eventually(&client, "a NodeClaim launched by the toy cloud", || async {
        let list = claims.list(&ListParams::default()).await.ok()?.items;
        list.into_iter().find(|c| c.provider_id().is_some_and(|id| id.starts_with("toy:///toy-cluster/i-")))
    })
    .await;

    // The claim is the toy cloud's instance: same provider id, a type that fits the 3-CPU pod, a zone of the
    // class's region.
    let provider_id = launched.provider_id().unwrap().to_owned();
    let cloud = ToyCloud::new("toy-cluster", account, Arc::new(InMemoryNodeClasses::new()), clock.clone());
    let instance = cloud.get(&provider_id).await.expect("the claim's instance exists in the toy account");
    let labels = launched.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("node.kubernetes.io/instance-type").map(String::as_str), Some("toy.large"), "{labels:?}");
    let zone = labels.get("topology.kubernetes.io/zone").cloned().unwrap_or_default();
    assert!(["toy-east-1-a", "toy-east-1-b"].contains(&zone.as_str()), "{zone}");
    assert_eq!(labels.get("karpenter.sh/nodepool").map(String::as_str), Some("toy"));
    assert_eq!(instance.metadata.name, launched.metadata.name);

    shutdown.cancel();
    let stopped = tokio::time::timeout(Duration::from_secs(60), running).await.expect("the manager stops");
    stopped.expect("the manager task").expect("the manager returns Ok on shutdown");
}
