//! pods/binding, pods/eviction and PodDisruptionBudget status through the real kube client.
#![cfg(feature = "apiserver")]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod, PodCondition};
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use karpenter_testing::apiserver::{ApiServer, create_with_status};
use karpenter_testing::{PdbOptions, PodOptions, map, pod, pod_disruption_budget};
use kube::api::{Api, DeleteParams, EvictParams, PostParams};
use kube::core::Status;
use kube::{Client, Error};

fn api_status(e: Error) -> Box<Status> {
    match e {
        Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn binding(pod: &str, node: &str) -> Binding {
    Binding {
        metadata: kube::api::ObjectMeta { name: Some(pod.into()), ..Default::default() },
        target: ObjectReference { kind: Some("Node".into()), name: Some(node.into()), ..Default::default() },
    }
}

fn ready(status: bool) -> PodCondition {
    PodCondition { type_: "Ready".into(), status: if status { "True" } else { "False" }.into(), ..Default::default() }
}

/// A pod bound to `node-a`, Running, Ready or not.
async fn running(pods: &Api<Pod>, name: &str, labels: &[(&str, &str)], is_ready: bool) -> Pod {
    let p = pod(PodOptions {
        name: Some(name.into()),
        labels: map(labels),
        node_name: Some("node-a".into()),
        phase: Some("Running".into()),
        conditions: vec![ready(is_ready)],
        ..Default::default()
    });
    create_with_status(pods, &p).await.expect("running pod")
}

async fn budget(c: &Client, name: &str, min: Option<IntOrString>, max: Option<IntOrString>) -> PodDisruptionBudget {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), "default");
    let pdb = pod_disruption_budget(PdbOptions {
        name: Some(name.into()),
        labels: map(&[("app", "web")]),
        min_available: min,
        max_unavailable: max,
        ..Default::default()
    });
    pdbs.create(&PostParams::default(), &pdb).await.expect("pdb")
}

async fn budget_status(c: &Client, name: &str) -> (i32, i32, i32, i32) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), "default");
    let s = pdbs.get(name).await.expect("pdb").status.expect("status computed");
    (s.current_healthy, s.desired_healthy, s.disruptions_allowed, s.expected_pods)
}

#[tokio::test]
async fn binding_sets_the_node_once() {
    let server = ApiServer::new();
    let pods: Api<Pod> = Api::namespaced(server.client(), "default");
    pods.create(&PostParams::default(), &pod(PodOptions { name: Some("p".into()), ..Default::default() }))
        .await
        .expect("pod");
    let rv_before = server.resource_version();
    let status: Status =
        pods.create_subresource("binding", "p", &PostParams::default(), &binding("p", "node-a")).await.expect("bind");
    assert!(status.is_success(), "{status:?}");
    assert_eq!(server.resource_version(), rv_before + 1, "one write");
    let bound = pods.get("p").await.expect("get");
    assert_eq!(bound.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("node-a"));
    let conditions = bound.status.and_then(|s| s.conditions).unwrap_or_default();
    assert!(conditions.iter().any(|c| c.type_ == "PodScheduled" && c.status == "True"), "{conditions:?}");

    let pp = PostParams::default();
    let again = pods.create_subresource::<_, Status>("binding", "p", &pp, &binding("p", "node-b")).await;
    let s = api_status(again.expect_err("already bound"));
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"node-a\""
    );

    let missing = pods.create_subresource::<_, Status>("binding", "q", &pp, &binding("q", "node-a")).await;
    let s = api_status(missing.expect_err("missing pod"));
    assert_eq!((s.code, s.message.as_str()), (404, "pods \"q\" not found"));

    pods.create(&PostParams::default(), &pod(PodOptions { name: Some("r".into()), ..Default::default() }))
        .await
        .expect("pod");
    let mut wrong = binding("r", "x");
    wrong.target.kind = Some("Pod".into());
    let s = api_status(
        pods.create_subresource::<_, Status>("binding", "r", &PostParams::default(), &wrong).await.expect_err("kind"),
    );
    assert_eq!(s.code, 422);
    let s = api_status(
        pods.create_subresource::<_, Status>("binding", "r", &PostParams::default(), &binding("p", "x"))
            .await
            .expect_err("name mismatch"),
    );
    assert_eq!(s.code, 400);
}

#[tokio::test]
async fn budget_status_follows_ready_pods_and_blocks_evictions() {
    let server = ApiServer::new();
    let c = server.client();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    running(&pods, "a", &[("app", "web")], true).await;
    running(&pods, "b", &[("app", "web")], true).await;
    running(&pods, "other", &[("app", "db")], true).await;
    budget(&c, "web", Some(IntOrString::Int(2)), None).await;
    assert_eq!(budget_status(&c, "web").await, (2, 2, 0, 2));

    let s = api_status(pods.evict("a", &EvictParams::default()).await.expect_err("429"));
    assert_eq!((s.code, s.reason.as_str()), (429, "TooManyRequests"));
    assert_eq!(s.message, "Cannot evict pod as it would violate the pod's disruption budget.");
    let cause = s.details.as_ref().and_then(|d| d.causes.first()).expect("cause");
    assert_eq!(cause.reason, "DisruptionBudget");
    assert_eq!(cause.message, "The disruption budget web needs 2 healthy pods and has 2 currently");
    assert!(pods.get("a").await.expect("still there").metadata.deletion_timestamp.is_none());

    // A third Ready pod makes room for one disruption.
    running(&pods, "c", &[("app", "web")], true).await;
    assert_eq!(budget_status(&c, "web").await, (3, 2, 1, 3));
    let ok = pods.evict("a", &EvictParams::default()).await.expect("evicted");
    assert!(ok.is_success());
    // Bound pods are deleted gracefully: the kubelet removes them once the grace period has passed.
    let a = pods.get("a").await.expect("terminating");
    assert!(a.metadata.deletion_timestamp.is_some());
    assert_eq!(a.metadata.deletion_grace_period_seconds, Some(30));
    assert_eq!(budget_status(&c, "web").await, (2, 2, 0, 3));
    let s = api_status(pods.evict("b", &EvictParams::default()).await.expect_err("budget spent"));
    assert_eq!(s.code, 429);
    // Evicting a pod already being deleted ignores budgets.
    pods.evict("a", &EvictParams::default()).await.expect("already terminating");
    // Pods not selected by any budget are evicted at once (bound: gracefully).
    pods.evict("other", &EvictParams::default()).await.expect("no budget");

    // A Ready pod becoming not Ready lowers currentHealthy.
    pods.patch_status(
        "c",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})),
    )
    .await
    .expect("not ready");
    assert_eq!(budget_status(&c, "web").await, (1, 2, 0, 3));
    // The grace period passes; the kubelet's final delete removes `a`: fewer expected pods.
    pods.delete("a", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.expect("gone");
    assert_eq!(budget_status(&c, "web").await, (1, 2, 0, 2));
}

#[tokio::test]
async fn pending_and_unhealthy_pods_are_evictable_regardless_of_budgets() {
    let server = ApiServer::new();
    let c = server.client();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    running(&pods, "a", &[("app", "web")], true).await;
    running(&pods, "b", &[("app", "web")], true).await;
    // Not yet running (phase Pending, unbound): deleted at once whatever the budget says.
    pods.create(
        &PostParams::default(),
        &pod(PodOptions { name: Some("pending".into()), labels: map(&[("app", "web")]), ..Default::default() }),
    )
    .await
    .expect("pending pod");
    budget(&c, "web", None, Some(IntOrString::Int(0))).await;
    assert_eq!(budget_status(&c, "web").await, (2, 3, 0, 3));
    pods.evict("pending", &EvictParams::default()).await.expect("pending pods ignore budgets");
    assert_eq!(api_status(pods.get("pending").await.expect_err("gone")).code, 404);
    assert_eq!(budget_status(&c, "web").await, (2, 2, 0, 2));

    // Running but not Ready, with a healthy budget (IfHealthyBudget, the default): evictable.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), "default");
    pdbs.delete("web", &DeleteParams::default()).await.expect("delete pdb");
    running(&pods, "sick", &[("app", "web")], false).await;
    budget(&c, "web", Some(IntOrString::Int(2)), None).await;
    assert_eq!(budget_status(&c, "web").await, (2, 2, 0, 3));
    pods.evict("sick", &EvictParams::default()).await.expect("unhealthy pod, healthy budget");
    let s = api_status(pods.evict("a", &EvictParams::default()).await.expect_err("healthy pod"));
    assert_eq!(s.code, 429);
}

#[tokio::test]
async fn percentages_and_several_budgets() {
    let server = ApiServer::new();
    let c = server.client();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    for name in ["a", "b", "c", "d"] {
        running(&pods, name, &[("app", "web")], true).await;
    }
    // maxUnavailable 30% of 4 rounds up to 2.
    budget(&c, "pct", None, Some(IntOrString::String("30%".into()))).await;
    assert_eq!(budget_status(&c, "pct").await, (4, 2, 2, 4));
    budget(&c, "second", Some(IntOrString::Int(1)), None).await;
    let s = api_status(pods.evict("a", &EvictParams::default()).await.expect_err("two budgets"));
    assert_eq!(s.code, 500);
    assert_eq!(
        s.message,
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );

    // The eviction's delete options apply; kube's `Api::evict` sends them as `delete_options`, a field the
    // real server does not know and ignores, and so does this one: send an Eviction object to set them.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), "default");
    pdbs.delete("second", &DeleteParams::default()).await.expect("delete");
    let dry = EvictParams { post_options: PostParams { dry_run: true, ..Default::default() }, ..Default::default() };
    pods.evict("a", &dry).await.expect("dry run");
    assert!(pods.get("a").await.expect("kept").metadata.deletion_timestamp.is_none());
    let ignored = EvictParams {
        delete_options: Some(DeleteParams { grace_period_seconds: Some(5), ..Default::default() }),
        post_options: PostParams::default(),
    };
    pods.evict("a", &ignored).await.expect("evict");
    assert_eq!(pods.get("a").await.expect("terminating").metadata.deletion_grace_period_seconds, Some(30));
    let eviction = Eviction {
        metadata: kube::api::ObjectMeta { name: Some("b".into()), ..Default::default() },
        delete_options: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions {
            grace_period_seconds: Some(5),
            ..Default::default()
        }),
    };
    let done: Status =
        pods.create_subresource("eviction", "b", &PostParams::default(), &eviction).await.expect("evict");
    assert!(done.is_success());
    assert_eq!(pods.get("b").await.expect("terminating").metadata.deletion_grace_period_seconds, Some(5));
    let labels: BTreeMap<String, String> = pods.get("b").await.expect("b").metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("app").map(String::as_str), Some("web"));
}

/// The disruption controller updates the budgets of a namespace on each pod write: one budget over 1,000
/// pods; the counts are incremental, so this stays linear (the figure is in the apiserver module docs).
#[tokio::test]
async fn a_thousand_pods_under_one_budget() {
    let server = ApiServer::new();
    let c = server.client();
    budget(&c, "web", Some(IntOrString::Int(1)), None).await;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let start = karpenter_testing::Stopwatch::start();
    for i in 0..1_000 {
        let p = pod(PodOptions { name: Some(format!("p{i}")), labels: map(&[("app", "web")]), ..Default::default() });
        pods.create(&PostParams::default(), &p).await.expect("pod");
    }
    println!("apiserver: created 1000 pods under one PodDisruptionBudget in {:?}", start.elapsed());
    assert_eq!(budget_status(&c, "web").await, (0, 1, 0, 1_000));
}
