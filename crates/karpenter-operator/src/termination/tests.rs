//! Termination against the in-process API server, driven step by step on a fake clock with the kubelet
//! stand-in removing pods once their grace period has passed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use karpenter_api::condition::{ConditionStatus, Conditions};
use karpenter_api::labels::{self, annotations, finalizers, taints};
use karpenter_api::nodeclaim::conditions;
use karpenter_api::{CompactPod, NodeClaim};
use karpenter_cloudprovider::{CloudProvider, FakeCloudProvider, FakeOptions};
use karpenter_kwok::kubelet::Kubelet;
use karpenter_testing::apiserver::{ApiServer, create_with_status};
use karpenter_testing::{
    FakeClock, NodeClaimOptions, NodeOptions, PdbOptions, PodOptions, node, node_claim, pod, pod_disruption_budget,
    toleration,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::*;
use crate::context::ControllerContext;
use crate::events::Recorder;
use crate::metrics::Metrics;
use karpenter_cloudprovider::Clock;

const NODE: &str = "node-a";
const CLAIM: &str = "default-abc";

struct Env {
    _server: ApiServer,
    client: Client,
    clock: FakeClock,
    cloud: FakeCloudProvider,
    metrics: Arc<Metrics>,
    /// What `term` was built from.
    ctx: ControllerContext,
    term: Termination,
    kubelet: Kubelet,
}

fn env() -> Env {
    let clock = FakeClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap());
    let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
    let client = server.client();
    let cloud = FakeCloudProvider::new(FakeOptions {
        clock: Arc::new(clock.clone()),
        ..karpenter_testing::kwok::fake_options()
    });
    // A state that never lists: every read goes to the API server.
    let ctx = ControllerContext::for_tests(client.clone(), Arc::new(cloud.clone()), Arc::new(clock.clone()))
        .with_state(ClusterState::new(Arc::new(clock.clone()), Duration::from_secs(20)));
    let term = Termination::new(&ctx);
    let kubelet = Kubelet::new(client.clone(), Arc::new(clock.clone()));
    Env { _server: server, client, clock, cloud, metrics: ctx.metrics().clone(), ctx, term, kubelet }
}

impl Env {
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }
    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }
    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }

    /// A launched, registered NodeClaim (instance in the fake cloud) and its Ready Node, both with the finalizer.
    async fn node_and_claim(&self, termination_grace_period: Option<&str>) -> String {
        let mut claim = node_claim(NodeClaimOptions {
            name: Some(CLAIM.into()),
            labels: [(labels::NODE_POOL.to_string(), "default".to_string())].into(),
            finalizers: vec![finalizers::TERMINATION.into()],
            termination_grace_period: termination_grace_period.map(str::to_owned),
            launched: true,
            registered: true,
            initialized: true,
            node_name: Some(NODE.into()),
            ..Default::default()
        });
        let launched = self.cloud.add_instance(&claim).unwrap();
        let provider_id = launched.provider_id().unwrap().to_owned();
        claim.status.as_mut().unwrap().provider_id = Some(provider_id.clone());
        claim.metadata.uid = None;
        create_with_status(&self.claims(), &claim).await.unwrap();
        let mut n = node(NodeOptions {
            name: Some(NODE.into()),
            labels: [(labels::NODE_POOL.to_string(), "default".to_string())].into(),
            finalizers: vec![finalizers::TERMINATION.into()],
            provider_id: Some(provider_id.clone()),
            allocatable: [("cpu", "8"), ("pods", "50")].into(),
            ..Default::default()
        });
        n.metadata.uid = None;
        self.nodes().create(&PostParams::default(), &n).await.unwrap();
        provider_id
    }

    async fn add_pod(&self, o: PodOptions) -> Pod {
        let mut p = pod(PodOptions { node_name: Some(NODE.into()), ..o });
        p.metadata.uid = None;
        self.pods().create(&PostParams::default(), &p).await.unwrap()
    }

    /// A pod owned by a (real) DaemonSet.
    async fn add_daemon_pod(&self, name: &str, priority_class: Option<&str>) -> Pod {
        let ds: DaemonSet = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": format!("ds-{name}"), "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"ds": name}},
                     "template": {"metadata": {"labels": {"ds": name}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}
        }))
        .unwrap();
        let ds = Api::<DaemonSet>::namespaced(self.client.clone(), "default")
            .create(&PostParams::default(), &ds)
            .await
            .unwrap();
        let mut p = pod(PodOptions {
            name: Some(name.into()),
            node_name: Some(NODE.into()),
            priority_class_name: priority_class.map(str::to_owned),
            ..Default::default()
        });
        p.metadata.uid = None;
        p.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "DaemonSet".into(),
            name: ds.name_any(),
            uid: ds.metadata.uid.clone().unwrap(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        self.pods().create(&PostParams::default(), &p).await.unwrap()
    }

    async fn pod_state(&self, name: &str) -> Option<bool> {
        self.pods().get_opt(name).await.unwrap().map(|p| p.metadata.deletion_timestamp.is_some())
    }

    async fn delete_claim(&self) {
        self.claims().delete(CLAIM, &DeleteParams::default()).await.unwrap();
    }

    /// One controller pass: kubelet, claim and node reconciles. Returns the node's requeue.
    async fn pass(&self) -> Requeue {
        self.kubelet.step().await.unwrap();
        self.term.reconcile_node_claim(CLAIM).await.unwrap();
        self.term.reconcile_node(NODE).await.unwrap()
    }

    /// `karpenter_nodeclaims_instance_termination_duration_seconds{nodepool="default"}`: (count, sum), as served.
    fn instance_termination_observed(&self) -> (f64, f64) {
        let text = self.metrics.render();
        let value = |suffix: &str| {
            let series =
                format!("karpenter_nodeclaims_instance_termination_duration_seconds_{suffix}{{nodepool=\"default\"}} ");
            text.lines().find_map(|l| l.strip_prefix(series.as_str())).map_or(0.0, |v| v.parse().unwrap())
        };
        (value("count"), value("sum"))
    }

    async fn events(&self, reason: &str) -> Vec<CoreEvent> {
        tokio::time::sleep(Duration::from_millis(20)).await; // detached publishes
        let all = Api::<CoreEvent>::all(self.client.clone()).list(&ListParams::default()).await.unwrap().items;
        all.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).collect()
    }
}

fn web_pdb(min_available: i32) -> PodDisruptionBudget {
    let mut p = pod_disruption_budget(PdbOptions {
        name: Some("web".into()),
        labels: [("app".to_string(), "web".to_string())].into(),
        min_available: Some(IntOrString::Int(min_available)),
        ..Default::default()
    });
    p.metadata.uid = None;
    p
}

fn web(name: &str, grace: Option<i64>) -> PodOptions {
    PodOptions {
        name: Some(name.into()),
        labels: [("app".to_string(), "web".to_string())].into(),
        termination_grace_period_seconds: grace,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_pdb_holds_the_node_until_it_allows_then_drain_follows_upstreams_order() {
    let e = env();
    e.node_and_claim(None).await;
    e.add_pod(web("web-1", None)).await;
    e.add_pod(web("web-2", None)).await;
    e.add_pod(PodOptions { name: Some("batch".into()), ..Default::default() }).await;
    e.add_daemon_pod("logs", None).await;
    e.add_pod(PodOptions {
        name: Some("dns".into()),
        priority_class_name: Some("system-cluster-critical".into()),
        ..Default::default()
    })
    .await;
    e.add_daemon_pod("cni", Some("system-node-critical")).await;
    e.add_pod(PodOptions {
        name: Some("tolerant".into()),
        tolerations: vec![toleration(taints::DISRUPTED, None, Some("NoSchedule"))],
        ..Default::default()
    })
    .await;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(e.client.clone(), "default");
    pdbs.create(&PostParams::default(), &web_pdb(2)).await.unwrap();
    e.kubelet.step().await.unwrap(); // everything Running and Ready
    e.kubelet.step().await.unwrap();

    e.delete_claim().await;
    assert_eq!(e.term.reconcile_node_claim(CLAIM).await.unwrap(), Some(NODE_WAIT_REQUEUE), "waits for its node");
    assert!(e.nodes().get(NODE).await.unwrap().metadata.deletion_timestamp.is_some(), "the claim deleted the node");

    // First drain pass: only the plain workload group is evicted; the PDB refuses both web pods.
    assert_eq!(e.term.reconcile_node(NODE).await.unwrap(), Some(DRAIN_REQUEUE));
    let n = e.nodes().get(NODE).await.unwrap();
    let t = n.spec.unwrap().taints.unwrap();
    assert!(t.iter().any(|t| t.key == taints::DISRUPTED && t.effect == "NoSchedule"), "{t:?}");
    assert_eq!(n.metadata.labels.unwrap().get(labels::EXCLUDE_FROM_EXTERNAL_LB).map(String::as_str), Some("karpenter"));
    assert_eq!(e.pod_state("batch").await, Some(true), "evicted (terminating, 30 s grace)");
    assert_eq!(e.pod_state("web-1").await, Some(false), "the PDB refused");
    assert_eq!(e.pod_state("logs").await, Some(false), "DaemonSet pods wait for the workload group");
    assert_eq!(e.pod_state("dns").await, Some(false));
    assert!(!e.events(reasons::FAILED_DRAINING).await.is_empty());
    let claim = e.claims().get(CLAIM).await.unwrap();
    assert_eq!(claim.conditions().condition(conditions::DRAINED).map(|c| c.status), Some(ConditionStatus::Unknown));

    // Ten minutes of passes: the batch pod goes, the web pods are never evicted, the node stays.
    for _ in 0..60 {
        e.clock.step_secs(10);
        assert_eq!(e.pass().await, Some(DRAIN_REQUEUE));
    }
    assert_eq!(e.pod_state("batch").await, None, "removed by the kubelet after its grace period");
    assert_eq!(e.pod_state("web-1").await, Some(false));
    assert_eq!(e.pod_state("web-2").await, Some(false));
    assert_eq!(e.pod_state("logs").await, Some(false));
    assert!(e.nodes().get_opt(NODE).await.unwrap().is_some());
    assert!(!e.cloud.instance_ids().is_empty(), "instance kept");
    let eviction_429 = e.metrics.pods_eviction_requests("429").get();
    assert!(eviction_429 >= 60, "retried every pass, each answered at once: {eviction_429}");

    // The budget now allows: the web pods go, then the DaemonSet, then the critical pods, in that order.
    pdbs.patch("web", &PatchParams::default(), &Patch::Merge(json!({"spec": {"minAvailable": 0}}))).await.unwrap();
    e.clock.step_secs(1);
    e.pass().await;
    assert_eq!(e.pod_state("web-1").await, Some(true));
    assert_eq!(e.pod_state("logs").await, Some(false), "the DaemonSet pod waits until the web pods are gone");
    let mut order: Vec<(String, i64)> = Vec::new();
    let mut done_at = None;
    for i in 0..200 {
        e.clock.step_secs(1);
        let requeue = e.pass().await;
        for name in ["web-1", "logs", "dns", "cni"] {
            if e.pod_state(name).await == Some(true) && !order.iter().any(|(n, _)| n == name) {
                order.push((name.into(), i));
            }
        }
        if requeue.is_none() {
            done_at = Some(i);
            break;
        }
    }
    let names: Vec<&str> = order.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["web-1", "logs", "dns", "cni"], "the groups in order");
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "one group at a time: {order:?}");
    assert!(done_at.is_some(), "drained and terminated");
    assert_eq!(e.pod_state("tolerant").await, Some(false), "tolerating pods are not evicted");
    assert!(e.nodes().get_opt(NODE).await.unwrap().is_none(), "finalizer removed, node gone");
    assert!(e.cloud.instance_ids().is_empty(), "instance deleted");
    assert_eq!(e.term.reconcile_node_claim(CLAIM).await.unwrap(), None);
    assert!(e.claims().get_opt(CLAIM).await.unwrap().is_none(), "claim finalizer removed");
    assert_eq!(e.metrics.nodes_drained("default").get(), 1);
    assert_eq!(e.metrics.nodes_terminated("default", "").get(), 1);
    assert_eq!(e.metrics.nodeclaims_terminated("default", "", "").get(), 1);
    assert_eq!(e.instance_termination_observed().0, 1.0, "the instance's termination timed once");
    assert!(e.events(reasons::EVICTED).await.len() >= 5);
}

#[tokio::test]
async fn termination_grace_period_forces_pods_a_pdb_blocks() {
    let e = env();
    let start = e.clock.now();
    e.node_and_claim(Some("2m")).await;
    e.add_pod(web("web-1", Some(30))).await;
    e.add_pod(web("web-2", Some(30))).await;
    Api::<PodDisruptionBudget>::namespaced(e.client.clone(), "default")
        .create(&PostParams::default(), &web_pdb(2))
        .await
        .unwrap();
    e.kubelet.step().await.unwrap();
    e.kubelet.step().await.unwrap();

    e.delete_claim().await;
    e.term.reconcile_node_claim(CLAIM).await.unwrap();
    let claim = e.claims().get(CLAIM).await.unwrap();
    let annotated = claim.annotations().get(annotations::NODE_CLAIM_TERMINATION_TIMESTAMP).cloned();
    assert_eq!(annotated.as_deref(), Some("2026-03-01T12:02:00Z"), "deletion + 2m");
    assert_eq!(e.events(reasons::TERMINATION_GRACE_PERIOD_EXPIRING).await.len(), 1);

    let mut forced_at = None;
    let mut gone_at = None;
    for _ in 0..400 {
        e.clock.step_secs(1);
        if e.pass().await.is_none() {
            gone_at = Some(e.clock.now());
            break;
        }
        if forced_at.is_none() && e.pod_state("web-1").await == Some(true) {
            forced_at = Some(e.clock.now());
            let p = e.pods().get("web-1").await.unwrap();
            let del = karpenter_api::time::from_k8s(p.metadata.deletion_timestamp.as_ref().unwrap()).unwrap();
            assert!(del <= start + chrono::Duration::seconds(120), "deleted to finish by the deadline: {del}");
        }
    }
    let forced_at = forced_at.expect("web pods force-deleted despite the PDB");
    assert!(forced_at > start + chrono::Duration::seconds(90), "not before deadline - grace: {forced_at}");
    assert!(forced_at <= start + chrono::Duration::seconds(92), "{forced_at}");
    let gone_at = gone_at.expect("terminated");
    assert!(gone_at >= start + chrono::Duration::seconds(120), "pods finish at the deadline: {gone_at}");
    assert!(gone_at <= start + chrono::Duration::seconds(130), "{gone_at}");
    assert!(e.nodes().get_opt(NODE).await.unwrap().is_none());
}

/// A node with two attachments: one of a pod that tolerates the disrupted taint (not waited for), one not.
async fn with_attachments(e: &Env, termination_grace_period: Option<&str>) -> Api<VolumeAttachment> {
    e.node_and_claim(termination_grace_period).await;
    // A pod that tolerates the disrupted taint keeps its volume: that attachment is not waited for.
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "agent-data", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv-agent", "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(e.client.clone(), "default")
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
    e.add_pod(PodOptions {
        name: Some("agent".into()),
        tolerations: vec![toleration(taints::DISRUPTED, None, None)],
        pvcs: vec!["agent-data".into()],
        ..Default::default()
    })
    .await;
    let vas: Api<VolumeAttachment> = Api::all(e.client.clone());
    for (name, pv) in [("csi-agent", "pv-agent"), ("csi-app", "pv-app")] {
        let va: VolumeAttachment = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": NODE, "source": {"persistentVolumeName": pv}}
        }))
        .unwrap();
        vas.create(&PostParams::default(), &va).await.unwrap();
    }
    e.nodes().delete(NODE, &DeleteParams::default()).await.unwrap();
    vas
}

#[tokio::test]
async fn volume_attachments_of_drained_pods_hold_the_node_until_detached() {
    let e = env();
    let vas = with_attachments(&e, None).await;
    for _ in 0..30 {
        e.clock.step_secs(1);
        assert!(e.pass().await.is_some(), "waits for csi-app");
    }
    let claim = e.claims().get(CLAIM).await.unwrap();
    assert!(claim.metadata.deletion_timestamp.is_some(), "the node's deletion deleted its claim");
    let vol = claim.conditions().condition(conditions::VOLUMES_DETACHED).cloned().unwrap();
    assert_eq!(
        (vol.status, vol.reason.as_str()),
        (ConditionStatus::Unknown, conditions::reasons::AWAITING_VOLUME_DETACHMENT)
    );
    vas.delete("csi-app", &DeleteParams::default()).await.unwrap();
    let mut done = false;
    for _ in 0..5 {
        e.clock.step_secs(1);
        if e.pass().await.is_none() {
            done = true;
            break;
        }
    }
    assert!(done, "csi-agent belongs to a pod the drain leaves: not waited for");
    assert!(e.nodes().get_opt(NODE).await.unwrap().is_none());
}

#[tokio::test]
async fn the_volume_wait_ends_at_the_termination_grace_period() {
    let e = env();
    let start = e.clock.now();
    with_attachments(&e, Some("1m")).await;
    let mut gone_at = None;
    for _ in 0..120 {
        e.clock.step_secs(1);
        if e.pass().await.is_none() {
            gone_at = Some(e.clock.now());
            break;
        }
    }
    let gone_at = gone_at.expect("terminated");
    assert!(gone_at >= start + chrono::Duration::seconds(60), "waited until the deadline: {gone_at}");
    assert!(gone_at <= start + chrono::Duration::seconds(62), "{gone_at}");
    assert!(!e.events(reasons::AWAITING_VOLUME_DETACHMENT).await.is_empty());
    let claim = e.claims().get(CLAIM).await.unwrap();
    let vol = claim.conditions().condition(conditions::VOLUMES_DETACHED).cloned().unwrap();
    assert_eq!(
        (vol.status, vol.reason.as_str()),
        (ConditionStatus::False, conditions::reasons::TERMINATION_GRACE_PERIOD_ELAPSED)
    );
    assert_eq!(
        claim.conditions().condition(conditions::INSTANCE_TERMINATING).map(|c| c.status),
        Some(ConditionStatus::True)
    );
}

#[tokio::test]
async fn a_not_ready_node_whose_instance_is_gone_loses_its_finalizer_at_once() {
    let e = env();
    let pid = e.node_and_claim(None).await;
    e.add_pod(web("web-1", None)).await;
    Api::<PodDisruptionBudget>::namespaced(e.client.clone(), "default")
        .create(&PostParams::default(), &web_pdb(1))
        .await
        .unwrap();
    e.nodes()
        .patch_status(
            NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})),
        )
        .await
        .unwrap();
    e.cloud.delete(&claim_for_instance("x", &pid)).await.unwrap();
    assert!(e.cloud.instance_ids().is_empty());
    e.nodes().delete(NODE, &DeleteParams::default()).await.unwrap();
    assert_eq!(e.term.reconcile_node(NODE).await.unwrap(), None);
    assert!(e.nodes().get_opt(NODE).await.unwrap().is_none());
    assert_eq!(e.term.reconcile_node_claim(CLAIM).await.unwrap(), None, "instance gone: finalizer removed");
    assert!(e.claims().get_opt(CLAIM).await.unwrap().is_none());
}

/// The kwok provider's case: the first ask to terminate finds the instance gone (its Node is terminating). The
/// NodeClaim is still marked InstanceTerminating and its instance's termination is timed (0 s), as upstream times it.
#[tokio::test]
async fn an_instance_gone_at_the_first_ask_is_still_timed() {
    let e = env();
    let pid = e.node_and_claim(None).await;
    e.cloud.delete(&claim_for_instance("x", &pid)).await.unwrap();
    e.delete_claim().await;
    assert_eq!(e.term.reconcile_node_claim(CLAIM).await.unwrap(), Some(NODE_WAIT_REQUEUE));
    let mut passes = 0;
    while e.term.reconcile_node(NODE).await.unwrap().is_some() {
        e.clock.step_secs(1);
        passes += 1;
        assert!(passes < 10, "the Node's termination ends: nothing to drain, the instance gone");
    }
    let claim = e.claims().get(CLAIM).await.unwrap();
    let terminating = claim.conditions().condition(conditions::INSTANCE_TERMINATING).cloned().expect("condition");
    assert_eq!(terminating.status, ConditionStatus::True, "set by the Node's termination although already gone");
    e.clock.step_secs(3);
    assert_eq!(e.term.reconcile_node_claim(CLAIM).await.unwrap(), None);
    assert!(e.claims().get_opt(CLAIM).await.unwrap().is_none());
    assert_eq!(e.instance_termination_observed(), (1.0, 3.0), "from the Node's first ask to the claim's end");
}

#[tokio::test]
async fn objects_not_being_deleted_or_without_the_finalizer_are_left_alone() {
    let e = env();
    e.node_and_claim(None).await;
    assert_eq!(e.term.reconcile_node(NODE).await.unwrap(), None);
    assert_eq!(e.term.reconcile_node_claim(CLAIM).await.unwrap(), None);
    assert_eq!(e.term.reconcile_node("missing").await.unwrap(), None);
    assert_eq!(e.term.reconcile_node_claim("missing").await.unwrap(), None);
    assert!(e.nodes().get(NODE).await.unwrap().spec.unwrap().taints.is_none(), "not tainted");
}

fn plan_pod(name: &str, daemon: bool, critical: bool) -> CompactPod {
    let mut p = pod(PodOptions {
        name: Some(name.into()),
        node_name: Some(NODE.into()),
        owner: daemon.then(|| ("DaemonSet".to_string(), "ds".to_string())),
        priority_class_name: critical.then(|| "system-node-critical".to_string()),
        phase: Some("Running".into()),
        ..Default::default()
    });
    p.metadata.namespace = Some("default".into());
    p.into()
}

#[test]
fn drain_plan_takes_the_first_group_with_pods_and_skips_what_upstream_skips() {
    let now = Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap();
    let mut terminal = plan_pod("done", false, false);
    terminal.status.as_mut().unwrap().phase = Some("Succeeded".into());
    let mut mirror = plan_pod("static", false, false);
    mirror.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: NODE.into(),
        uid: "u".into(),
        ..Default::default()
    }]);
    let mut stuck = plan_pod("stuck", false, false);
    stuck.metadata.deletion_timestamp = karpenter_testing::pod::k8s_time(now - chrono::Duration::seconds(61));
    let pods = vec![
        plan_pod("cni", true, true),
        plan_pod("dns", false, true),
        plan_pod("logs", true, false),
        terminal,
        mirror,
        stuck,
    ];
    let plan = drain_plan(&pods, None, now);
    assert_eq!(plan.group, Some(DrainGroup::DaemonSet));
    assert_eq!(plan.evict.iter().map(|p| p.name_any()).collect::<Vec<_>>(), ["logs"]);
    assert_eq!(plan.waiting, 3, "cni, dns, logs");
    let mut with_app = pods.clone();
    with_app.push(plan_pod("app", false, false));
    let mut leaving = plan_pod("leaving", false, false);
    leaving.metadata.deletion_timestamp = karpenter_testing::pod::k8s_time(now);
    with_app.push(leaving);
    let plan = drain_plan(&with_app, None, now);
    assert_eq!(plan.group, Some(DrainGroup::Workload));
    assert_eq!(plan.evict.iter().map(|p| p.name_any()).collect::<Vec<_>>(), ["app"], "terminating pods are waited for");
    assert_eq!(plan.waiting, 5);
    let groups: BTreeMap<String, DrainGroup> = pods.iter().map(|p| (p.name_any(), DrainGroup::of(p))).collect();
    assert_eq!(groups["cni"], DrainGroup::CriticalDaemonSet);
    assert_eq!(groups["dns"], DrainGroup::CriticalWorkload);
    assert!(drain_plan(&[], None, now) == DrainPlan::default());
}

#[tokio::test(start_paused = true)]
async fn the_run_loop_terminates_a_deleted_claim_and_stops_on_shutdown() {
    let e = env();
    e.node_and_claim(None).await;
    // Wall time on tokio's (paused) clock, so the run loop's requeues and the controller's notion of now move
    // together.
    let clock: Arc<dyn karpenter_cloudprovider::Clock> =
        Arc::new(karpenter_testing::TokioClock::starting_at(e.clock.now()));
    let shutdown = CancellationToken::new();
    // The run loop follows the cluster state's watches.
    let state = ClusterState::new(Arc::new(e.clock.clone()), Duration::from_secs(20));
    tokio::spawn({
        let (state, client, shutdown) = (state.clone(), e.client.clone(), shutdown.clone());
        async move { state.run_watchers(client, shutdown).await }
    });
    let ctx = e
        .ctx
        .clone()
        .with_state(state.clone())
        .with_recorder(Recorder::new(e.client.clone(), clock.clone(), "test"))
        .with_clock(clock);
    let term = Arc::new(Termination::new(&ctx));
    let task = tokio::spawn(term.run(state, shutdown.clone()));
    e.delete_claim().await;
    let mut gone = false;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if e.claims().get_opt(CLAIM).await.unwrap().is_none() {
            gone = true;
            break;
        }
    }
    assert!(gone, "claim and node terminated by the watch-driven loops");
    assert!(e.nodes().get_opt(NODE).await.unwrap().is_none());
    assert!(e.cloud.instance_ids().is_empty());
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), task).await.expect("stops on shutdown").unwrap();
}
