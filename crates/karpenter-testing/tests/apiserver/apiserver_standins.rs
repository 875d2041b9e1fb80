//! The scheduler and kubelet stand-ins against the in-process API server, through the real kube client.
#![cfg(feature = "apiserver")]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_kwok::kubelet::{Kubelet, KubeletOptions};
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::standins::Scheduler;
use karpenter_testing::{
    FakeClock, NodeOptions, PodOptions, SystemClock, map, node, pod, requirement, taint, toleration,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

async fn add_node(c: &Client, name: &str, cpu: &str, labels: &[(&str, &str)], ready: bool) -> Node {
    let nodes: Api<Node> = Api::all(c.clone());
    let n = node(NodeOptions {
        name: Some(name.into()),
        labels: map(labels),
        allocatable: [("cpu", cpu), ("memory", "8Gi"), ("pods", "3")].into(),
        ready: Some(ready),
        ..Default::default()
    });
    nodes.create(&PostParams::default(), &n).await.expect("node")
}

async fn add_pod(c: &Client, o: PodOptions) -> Pod {
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(&PostParams::default(), &pod(o)).await.expect("pod")
}

fn cpu_pod(name: &str, cpu: &str) -> PodOptions {
    PodOptions { name: Some(name.into()), requests: [("cpu", cpu)].into(), ..Default::default() }
}

fn bound(report: &karpenter_testing::standins::ScheduleReport) -> Vec<(&str, &str)> {
    report.bound.iter().map(|(p, n)| (p.as_str(), n.as_str())).collect()
}

#[tokio::test]
async fn scheduler_binds_by_resources_selectors_and_taints() {
    let server = ApiServer::new();
    let c = server.client();
    let sched = Scheduler::new(c.clone());
    add_node(&c, "a", "2", &[("zone", "z1")], true).await;
    add_node(&c, "b", "2", &[("zone", "z2")], true).await;
    // Requests fill nodes in name order; the fifth 1-cpu pod fits nowhere.
    for i in 1..=5 {
        add_pod(&c, cpu_pod(&format!("p{i}"), "1")).await;
    }
    let r = sched.step().await.expect("step");
    assert_eq!(bound(&r), [("default/p1", "a"), ("default/p2", "a"), ("default/p3", "b"), ("default/p4", "b")]);
    assert_eq!(r.unschedulable, ["default/p5"]);
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let p5 = pods.get("p5").await.expect("p5");
    let cond = p5.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find(|c| c.type_ == "PodScheduled");
    let cond = cond.expect("PodScheduled condition");
    assert_eq!((cond.status.as_str(), cond.reason.as_deref()), ("False", Some("Unschedulable")));
    assert_eq!(cond.message.as_deref(), Some("0/2 nodes are available: 2 Insufficient resources."));
    // Marking is idempotent: a second pass writes nothing.
    let rv = server.resource_version();
    assert_eq!(sched.step().await.expect("step").unschedulable, ["default/p5"]);
    assert_eq!(server.resource_version(), rv);

    // Removing a bound pod (the kubelet's final delete) frees its room.
    pods.delete("p1", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.expect("rm");
    assert_eq!(bound(&sched.step().await.expect("step")), [("default/p5", "a")]);

    // nodeSelector and required node affinity.
    add_node(&c, "c", "8", &[("zone", "z3"), ("gpu", "yes")], true).await;
    add_pod(&c, PodOptions { node_selector: map(&[("zone", "z3")]), ..cpu_pod("sel", "1") }).await;
    add_pod(&c, PodOptions { node_requirements: vec![requirement("gpu", "Exists", &[])], ..cpu_pod("aff", "1") }).await;
    add_pod(&c, PodOptions { node_selector: map(&[("zone", "nowhere")]), ..cpu_pod("lost", "0") }).await;
    let r = sched.step().await.expect("step");
    assert_eq!(bound(&r), [("default/aff", "c"), ("default/sel", "c")]);
    assert!(r.unschedulable.contains(&"default/lost".to_string()));

    // Pod slots: c has 3 and holds 2.
    add_pod(&c, PodOptions { node_selector: map(&[("zone", "z3")]), ..cpu_pod("third", "0") }).await;
    add_pod(&c, PodOptions { node_selector: map(&[("zone", "z3")]), ..cpu_pod("fourth", "0") }).await;
    let r = sched.step().await.expect("step");
    assert_eq!(bound(&r), [("default/fourth", "c")]);
    assert!(r.unschedulable.contains(&"default/third".to_string()));
}

#[tokio::test]
async fn scheduler_respects_taints_including_not_ready_and_unregistered() {
    let server = ApiServer::new();
    let c = server.client();
    let sched = Scheduler::new(c.clone());
    let clock = FakeClock::default();
    let kubelet = Kubelet::new(c.clone(), Arc::new(clock.clone()));
    let nodes: Api<Node> = Api::all(c.clone());
    let n = node(NodeOptions {
        name: Some("new".into()),
        allocatable: [("cpu", "4"), ("pods", "10")].into(),
        ready: Some(false),
        taints: vec![taint("karpenter.sh/unregistered", None, "NoExecute")],
        ..Default::default()
    });
    nodes.create(&PostParams::default(), &n).await.expect("node");
    add_pod(&c, cpu_pod("web", "1")).await;
    add_pod(
        &c,
        PodOptions {
            tolerations: vec![toleration("karpenter.sh/unregistered", None, Some("NoExecute"))],
            ..cpu_pod("tolerant", "1")
        },
    )
    .await;
    let r = sched.step().await.expect("step");
    assert!(r.bound.is_empty());
    let msg = |p: Pod| {
        p.status.and_then(|s| s.conditions).unwrap_or_default().into_iter().find_map(|c| c.message).unwrap_or_default()
    };
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    assert_eq!(
        msg(pods.get("web").await.expect("web")),
        "0/1 nodes are available: 1 node(s) had untolerated taint {karpenter.sh/unregistered: }."
    );
    assert_eq!(
        msg(pods.get("tolerant").await.expect("tolerant")),
        "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."
    );
    // The kubelet makes the node Ready; the server lifts the not-ready taint; the tolerant pod goes.
    let k = kubelet.step().await.expect("kubelet");
    assert_eq!(k.nodes_ready, ["new"]);
    assert_eq!(bound(&sched.step().await.expect("step")), [("default/tolerant", "new")]);
    // Karpenter removes its registration taint; the rest follows.
    nodes
        .patch("new", &PatchParams::default(), &Patch::Merge(json!({"spec": {"taints": null}})))
        .await
        .expect("untaint");
    assert_eq!(bound(&sched.step().await.expect("step")), [("default/web", "new")]);
    // Cordoned nodes take nothing new.
    nodes
        .patch("new", &PatchParams::default(), &Patch::Merge(json!({"spec": {"unschedulable": true}})))
        .await
        .expect("cordon");
    add_pod(&c, cpu_pod("late", "1")).await;
    assert_eq!(sched.step().await.expect("step").unschedulable, ["default/late"]);
}

#[tokio::test]
async fn kubelet_readies_nodes_renews_leases_runs_and_removes_pods() {
    let clock = FakeClock::default();
    let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
    let c = server.client();
    let kubelet = Kubelet::new(c.clone(), Arc::new(clock.clone()));
    let node = add_node(&c, "n1", "4", &[], false).await;
    assert_eq!(node.spec.and_then(|s| s.taints).map(|t| t.len()), Some(1), "not-ready taint");
    add_pod(&c, PodOptions { node_name: Some("n1".into()), ..cpu_pod("running", "1") }).await;
    add_pod(&c, PodOptions { node_name: Some("elsewhere".into()), ..cpu_pod("other", "1") }).await;

    let r = kubelet.step().await.expect("step");
    assert_eq!(r.nodes_ready, ["n1"]);
    assert_eq!(r.leases, ["n1"]);
    assert_eq!(r.pods_started, ["default/running"]);
    let nodes: Api<Node> = Api::all(c.clone());
    let n1 = nodes.get("n1").await.expect("n1");
    assert!(n1.spec.and_then(|s| s.taints).is_none(), "the server lifted the not-ready taint");
    let conds = n1.status.and_then(|s| s.conditions).unwrap_or_default();
    assert_eq!(conds.iter().filter(|c| c.type_ == "Ready").count(), 1);
    assert!(conds.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-node-lease");
    let lease = leases.get("n1").await.expect("lease");
    assert_eq!(lease.owner_references().first().map(|o| o.kind.as_str()), Some("Node"));
    let spec = lease.spec.expect("spec");
    assert_eq!((spec.holder_identity.as_deref(), spec.lease_duration_seconds), (Some("n1"), Some(40)));
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let running = pods.get("running").await.expect("pod");
    let status = running.status.expect("status");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert!(status.conditions.unwrap_or_default().iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    assert_eq!(
        pods.get("other").await.expect("other").status.and_then(|s| s.phase).as_deref(),
        Some("Pending"),
        "pods of unknown nodes are not ours"
    );

    // Nothing to do: no writes.
    let rv = server.resource_version();
    assert_eq!(kubelet.step().await.expect("step"), Default::default());
    assert_eq!(server.resource_version(), rv);
    // The Lease is renewed once the renew interval has passed.
    clock.step_secs(9);
    assert!(kubelet.step().await.expect("step").leases.is_empty());
    clock.step_secs(1);
    assert_eq!(kubelet.step().await.expect("step").leases, ["n1"]);
    let renewed = leases.get("n1").await.expect("lease").spec.and_then(|s| s.renew_time).expect("renewTime");
    assert_eq!(renewed.0.as_second(), 1_704_067_210);

    // Graceful deletion: the pod stays until its grace period has passed, then the kubelet removes it.
    pods.delete("running", &DeleteParams { grace_period_seconds: Some(20), ..Default::default() })
        .await
        .expect("delete");
    clock.step_secs(19);
    assert!(kubelet.step().await.expect("step").pods_removed.is_empty());
    assert!(pods.get_opt("running").await.expect("get").is_some());
    clock.step_secs(1);
    assert_eq!(kubelet.step().await.expect("step").pods_removed, ["default/running"]);
    assert!(pods.get_opt("running").await.expect("get").is_none());

    // Deleting the node collects its Lease (ownerReference).
    nodes.delete("n1", &DeleteParams::default()).await.expect("delete node");
    assert!(leases.get_opt("n1").await.expect("get").is_none());
}

#[tokio::test]
async fn kubelet_node_selector_limits_its_nodes() {
    let server = ApiServer::new();
    let c = server.client();
    let opts = KubeletOptions { node_selector: Some("type=kwok".into()), ..Default::default() };
    let kubelet = Kubelet::with_options(c.clone(), Arc::new(FakeClock::default()), opts);
    add_node(&c, "real", "1", &[], false).await;
    add_node(&c, "fake", "1", &[("type", "kwok")], false).await;
    assert_eq!(kubelet.step().await.expect("step").nodes_ready, ["fake"]);
}

#[tokio::test]
async fn run_loops_bring_a_pod_to_running_in_real_time() {
    let server = ApiServer::new();
    let c = server.client();
    add_node(&c, "n1", "4", &[], false).await;
    add_pod(&c, cpu_pod("web", "1")).await;
    let sched = tokio::spawn(Scheduler::new(c.clone()).run(Duration::from_millis(5)));
    let kubelet = tokio::spawn(Kubelet::new(c.clone(), Arc::new(SystemClock)).run(Duration::from_millis(5)));
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let mut phase = None;
    for _ in 0..400 {
        phase = pods.get("web").await.expect("pod").status.and_then(|s| s.phase);
        if phase.as_deref() == Some("Running") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sched.abort();
    kubelet.abort();
    assert_eq!(phase.as_deref(), Some("Running"));
    assert_eq!(pods.get("web").await.expect("pod").spec.and_then(|s| s.node_name).as_deref(), Some("n1"));
}
