//! The observability controllers on fake cluster states: each test fills a [`ClusterState`] by hand, runs one
//! round of a controller and reads `/metrics` as Prometheus would.

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{DateTime, Duration as Delta, TimeZone, Utc};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::{CompactPod, labels};
use karpenter_cloudprovider::{Clock, CloudProvider};
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::{
    FakeClock, NodeClaimOptions, NodeOptions, NodePoolOptions, PodOptions, kwok_node_class_ref, node, node_claim,
    node_pool, pod,
};

use super::*;
use crate::context::ControllerContext;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
}

fn setup() -> (FakeClock, ApiServer, ControllerContext) {
    let clock = FakeClock::new(t0());
    let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
    let ctx = ControllerContext::for_tests(
        server.client(),
        Arc::new(karpenter_testing::kwok::fake()),
        Arc::new(clock.clone()),
    );
    (clock, server, ctx)
}

/// The value of the one sample of `name` whose labels include every `labels` pair (`None` when there is none).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<f64> = samples(text, name)
        .into_iter()
        .filter(|(l, _)| labels.iter().all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v)))
        .map(|(_, v)| v)
        .collect();
    assert!(found.len() <= 1, "{name} {labels:?}: more than one sample: {found:?}");
    found.first().copied()
}

/// Every sample of `name`: its labels and value.
fn samples(text: &str, name: &str) -> Vec<(Vec<(String, String)>, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (labels, value) = if let Some(rest) = rest.strip_prefix('{') {
            let Some((labels, value)) = rest.rsplit_once("} ") else { continue };
            (labels, value)
        } else if let Some(value) = rest.strip_prefix(' ') {
            ("", value)
        } else {
            continue;
        };
        let pairs = labels
            .split("\",")
            .filter(|p| !p.is_empty())
            .filter_map(|p| p.split_once("=\""))
            .map(|(k, v)| (k.to_string(), v.trim_end_matches('"').to_string()))
            .collect();
        out.push((pairs, value.parse().unwrap()));
    }
    out
}

fn condition(kind: &str, status: &str, at: DateTime<Utc>) -> PodCondition {
    PodCondition {
        type_: kind.into(),
        status: status.into(),
        last_transition_time: Some(Time(karpenter_api::time::rfc3339(at).parse().unwrap())),
        ..Default::default()
    }
}

fn pending_pod(name: &str) -> Pod {
    pod(PodOptions {
        name: Some(name.into()),
        namespace: Some("default".into()),
        phase: Some("Pending".into()),
        creation_timestamp: Some(t0()),
        owner: Some(("ReplicaSet".into(), "web-abc".into())),
        // What the kube-scheduler writes on a pod it cannot place: what makes it provisionable.
        conditions: vec![PodCondition {
            reason: Some("Unschedulable".into()),
            ..condition("PodScheduled", "False", t0())
        }],
        ..Default::default()
    })
}

fn set_node(p: &mut Pod, node: &str) {
    p.spec.as_mut().unwrap().node_name = Some(node.into());
}

fn set_status(p: &mut Pod, phase: &str, conditions: Vec<PodCondition>) {
    let status = p.status.get_or_insert_default();
    status.phase = Some(phase.into());
    status.conditions = Some(conditions);
}

/// Applies a pod to the state and reconciles it as its watch event would.
fn observe(ctx: &ControllerContext, metrics: &super::pod::PodMetrics, p: &Pod) {
    ctx.state.apply(p.clone());
    let stored = ctx.state.get_shared::<CompactPod>("default/web-1").unwrap();
    metrics.reconcile(&stored);
}

fn histogram(text: &str, name: &str) -> (f64, f64) {
    (
        sample(text, &format!("{name}_count"), &[]).unwrap_or(0.0),
        sample(text, &format!("{name}_sum"), &[]).unwrap_or(0.0),
    )
}

#[tokio::test]
async fn a_pod_going_pending_bound_running_observes_each_histogram_once_and_removes_its_gauges() {
    let (clock, _server, ctx) = setup();
    ctx.state.apply(node(NodeOptions {
        name: Some("n1".into()),
        labels: [(labels::NODE_POOL.to_string(), "default".to_string()), (labels::ZONE.to_string(), "z-a".to_string())]
            .into(),
        ..Default::default()
    }));
    let metrics = super::pod::PodMetrics::new(&ctx);
    let who = [("name", "web-1"), ("namespace", "default")];

    // Created at t0 and seen as provisionable at t0 (applying it acks it); 5 s later still undecided.
    let mut p = pending_pod("web-1");
    observe(&ctx, &metrics, &p);
    clock.set(t0() + Delta::seconds(5));
    metrics.reconcile(&ctx.state.get_shared::<CompactPod>("default/web-1").unwrap());
    let text = ctx.metrics.render();
    assert_eq!(sample(&text, "karpenter_pods_unbound_time_seconds", &who), Some(5.0));
    assert_eq!(sample(&text, "karpenter_pods_unstarted_time_seconds", &who), Some(5.0));
    assert_eq!(sample(&text, "karpenter_pods_provisioning_scheduling_undecided_time_seconds", &who), Some(5.0));
    assert_eq!(sample(&text, "karpenter_pods_provisioning_unbound_time_seconds", &who), None, "not schedulable yet");

    // A pass at t0+6 places it on a new NodeClaim: decided after 6 s, schedulable from then.
    clock.set(t0() + Delta::seconds(6));
    ctx.state.scheduling_times().record_decisions(&ctx.metrics, [], [("default/web-1", false)], clock.now());
    clock.set(t0() + Delta::seconds(8));
    metrics.reconcile(&ctx.state.get_shared::<CompactPod>("default/web-1").unwrap());
    let text = ctx.metrics.render();
    assert_eq!(histogram(&text, "karpenter_pods_scheduling_decision_duration_seconds"), (1.0, 6.0));
    assert_eq!(sample(&text, "karpenter_pods_provisioning_scheduling_undecided_time_seconds", &who), None);
    assert_eq!(sample(&text, "karpenter_pods_provisioning_unbound_time_seconds", &who), Some(2.0));
    assert_eq!(sample(&text, "karpenter_pods_provisioning_unstarted_time_seconds", &who), Some(2.0));

    // Bound at t0+10, still Pending (pulling images): nothing waits for a binding any more.
    clock.set(t0() + Delta::seconds(11));
    set_node(&mut p, "n1");
    set_status(&mut p, "Pending", vec![condition("PodScheduled", "True", t0() + Delta::seconds(10))]);
    observe(&ctx, &metrics, &p);
    let text = ctx.metrics.render();
    assert_eq!(sample(&text, "karpenter_pods_unbound_time_seconds", &who), None);
    assert_eq!(sample(&text, "karpenter_pods_provisioning_unbound_time_seconds", &who), None);
    assert_eq!(sample(&text, "karpenter_pods_unstarted_time_seconds", &who), Some(11.0));

    // Running and Ready at t0+15: both histograms observed, from creation and from the schedulable time.
    clock.set(t0() + Delta::seconds(16));
    set_status(
        &mut p,
        "Running",
        vec![
            condition("PodScheduled", "True", t0() + Delta::seconds(10)),
            condition("Ready", "True", t0() + Delta::seconds(15)),
        ],
    );
    observe(&ctx, &metrics, &p);
    let text = ctx.metrics.render();
    assert_eq!(histogram(&text, "karpenter_pods_bound_duration_seconds"), (1.0, 10.0));
    assert_eq!(histogram(&text, "karpenter_pods_startup_duration_seconds"), (1.0, 15.0));
    assert_eq!(histogram(&text, "karpenter_pods_provisioning_bound_duration_seconds"), (1.0, 4.0));
    assert_eq!(histogram(&text, "karpenter_pods_provisioning_startup_duration_seconds"), (1.0, 9.0));
    for gauge in WAITING {
        assert_eq!(sample(&text, gauge, &who), None, "{gauge} is gone once the pod runs");
    }
    assert!(ctx.state.scheduling_times().is_empty(), "a started pod's times are forgotten");

    // Later updates and resyncs observe nothing more.
    clock.set(t0() + Delta::seconds(60));
    observe(&ctx, &metrics, &p);
    metrics.resync();
    let text = ctx.metrics.render();
    assert_eq!(histogram(&text, "karpenter_pods_bound_duration_seconds").0, 1.0);
    assert_eq!(histogram(&text, "karpenter_pods_startup_duration_seconds").0, 1.0);
    assert_eq!(histogram(&text, "karpenter_pods_scheduling_decision_duration_seconds").0, 1.0);
    let state = sample(&text, "karpenter_pods_state", &[("name", "web-1"), ("phase", "Running"), ("ready", "true")]);
    assert_eq!(state, Some(1.0));
    assert_eq!(samples(&text, "karpenter_pods_state").len(), 1, "the Pending series was replaced");

    // Deleted: its series go.
    ctx.state.remove(ctx.state.get_shared::<CompactPod>("default/web-1").unwrap().as_ref());
    metrics.forget("default/web-1");
    assert!(samples(&ctx.metrics.render(), "karpenter_pods_state").is_empty());
}

const WAITING: [&str; 5] = [
    "karpenter_pods_unbound_time_seconds",
    "karpenter_pods_unstarted_time_seconds",
    "karpenter_pods_provisioning_unbound_time_seconds",
    "karpenter_pods_provisioning_unstarted_time_seconds",
    "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
];

#[tokio::test]
async fn a_pending_pod_deleted_or_dropped_by_a_relist_leaves_no_series() {
    let (_clock, _server, ctx) = setup();
    let metrics = super::pod::PodMetrics::new(&ctx);
    observe(&ctx, &metrics, &pending_pod("web-1"));
    let text = ctx.metrics.render();
    assert!(sample(&text, "karpenter_pods_unbound_time_seconds", &[("name", "web-1")]).is_some());
    // Gone from the state without a delete reaching the controller: the resync notices.
    ctx.state.remove(ctx.state.get_shared::<CompactPod>("default/web-1").unwrap().as_ref());
    metrics.resync();
    let text = ctx.metrics.render();
    for gauge in WAITING.iter().chain(&["karpenter_pods_state"]) {
        assert!(samples(&text, gauge).is_empty(), "{gauge} has no series left");
    }
    assert!(ctx.state.scheduling_times().is_empty());
}

#[tokio::test]
async fn a_pod_that_fails_before_starting_observes_no_startup() {
    let (_clock, _server, ctx) = setup();
    let metrics = super::pod::PodMetrics::new(&ctx);
    let mut p = pending_pod("web-1");
    observe(&ctx, &metrics, &p);
    set_status(&mut p, "Failed", vec![condition("Ready", "False", t0() + Delta::seconds(3))]);
    observe(&ctx, &metrics, &p);
    let text = ctx.metrics.render();
    assert_eq!(histogram(&text, "karpenter_pods_startup_duration_seconds").0, 0.0);
    assert!(samples(&text, "karpenter_pods_unstarted_time_seconds").is_empty());
}

/// Upstream's `pods_state` labels (pkg/controllers/metrics/pod: labelNames()).
const UPSTREAM_POD_STATE_LABELS: [&str; 13] = [
    "name",
    "namespace",
    "owner",
    "node",
    "scheduled",
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
    "ready",
    "managed",
];

#[tokio::test]
async fn pod_state_has_upstreams_labels_with_the_nodes_facts() {
    let (_clock, _server, ctx) = setup();
    ctx.state.apply(node(NodeOptions {
        name: Some("n1".into()),
        labels: [
            (labels::NODE_POOL.to_string(), "default".to_string()),
            (labels::ZONE.to_string(), "z-a".to_string()),
            (labels::ARCH.to_string(), "arm64".to_string()),
            (labels::CAPACITY_TYPE.to_string(), "spot".to_string()),
            (labels::INSTANCE_TYPE.to_string(), "c-4x".to_string()),
        ]
        .into(),
        ..Default::default()
    }));
    let metrics = super::pod::PodMetrics::new(&ctx);
    let mut p = pending_pod("web-1");
    set_node(&mut p, "n1");
    set_status(&mut p, "Running", vec![]);
    observe(&ctx, &metrics, &p);
    let all = samples(&ctx.metrics.render(), "karpenter_pods_state");
    let [(labels, value)] = all.as_slice() else { panic!("one series: {all:?}") };
    assert_eq!(*value, 1.0);
    let names: BTreeSet<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, UPSTREAM_POD_STATE_LABELS.into_iter().collect());
    let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).unwrap();
    assert_eq!(get("owner"), "/apis/apps/v1/namespaces/default/replicasets/web-abc");
    assert_eq!((get("node"), get("scheduled"), get("managed")), ("n1", "true", "true"));
    assert_eq!(
        (get("zone"), get("arch"), get("capacity_type"), get("instance_type")),
        ("z-a", "arm64", "spot", "c-4x")
    );
    assert_eq!((get("nodepool"), get("phase"), get("ready")), ("default", "Running", "false"));
}

#[tokio::test]
async fn node_gauges_carry_the_well_known_labels_and_go_with_the_node() {
    let (clock, _server, ctx) = setup();
    let provider_id = "kwok://n1";
    ctx.state.apply(node(NodeOptions {
        name: Some("n1".into()),
        labels: [
            (labels::NODE_POOL.to_string(), "default".to_string()),
            (labels::ZONE.to_string(), "z-a".to_string()),
            (labels::INSTANCE_TYPE.to_string(), "c-4x".to_string()),
            (labels::NODE_INITIALIZED.to_string(), "true".to_string()),
        ]
        .into(),
        capacity: [("cpu", "4"), ("memory", "8Gi"), ("pods", "110")].into(),
        allocatable: [("cpu", "3500m"), ("memory", "7Gi"), ("pods", "110")].into(),
        provider_id: Some(provider_id.into()),
        creation_timestamp: Some(t0()),
        ..Default::default()
    }));
    ctx.state.apply(node_claim(NodeClaimOptions {
        name: Some("default-abc".into()),
        node_pool: Some("default".into()),
        provider_id: Some(provider_id.into()),
        ..Default::default()
    }));
    let on_n1 = |name: &str, o: PodOptions| {
        let phase = o.phase.clone().or(Some("Running".into()));
        pod(PodOptions { name: Some(name.into()), node_name: Some("n1".into()), phase, ..o })
    };
    ctx.state.apply(on_n1(
        "app",
        PodOptions { requests: [("cpu", "1")].into(), limits: [("cpu", "2")].into(), ..Default::default() },
    ));
    ctx.state.apply(on_n1(
        "ds",
        PodOptions {
            requests: [("cpu", "500m"), ("memory", "1Gi")].into(),
            owner: Some(("DaemonSet".into(), "agent".into())),
            ..Default::default()
        },
    ));
    ctx.state.apply(on_n1(
        "done",
        PodOptions { requests: [("cpu", "2")].into(), phase: Some("Succeeded".into()), ..Default::default() },
    ));
    clock.set(t0() + Delta::seconds(90));
    let nodes = super::node::NodeMetrics::new(&ctx);
    nodes.reconcile();
    let text = ctx.metrics.render();
    let cpu = [("node_name", "n1"), ("resource_type", "cpu")];
    assert_eq!(sample(&text, "karpenter_nodes_allocatable", &cpu), Some(3.5));
    assert_eq!(sample(&text, "karpenter_nodes_system_overhead", &cpu), Some(0.5));
    assert_eq!(sample(&text, "karpenter_nodes_total_pod_requests", &cpu), Some(1.5), "DaemonSet pods included");
    assert_eq!(sample(&text, "karpenter_nodes_total_pod_limits", &cpu), Some(2.0));
    assert_eq!(sample(&text, "karpenter_nodes_total_daemon_requests", &cpu), Some(0.5));
    assert_eq!(
        sample(&text, "karpenter_nodes_total_daemon_requests", &[("node_name", "n1"), ("resource_type", "memory")]),
        Some(1024.0 * 1024.0 * 1024.0)
    );
    let pods = [("node_name", "n1"), ("resource_type", "pods")];
    assert_eq!(
        sample(&text, "karpenter_nodes_total_pod_requests", &pods),
        Some(2.0),
        "the Succeeded pod is not counted"
    );
    assert_eq!(sample(&text, "karpenter_nodes_total_daemon_limits", &pods), Some(1.0));
    assert_eq!(sample(&text, "karpenter_nodes_current_lifetime_seconds", &[("node_name", "n1")]), Some(90.0));
    let percent = sample(&text, "karpenter_cluster_utilization_percent", &[("resource_type", "cpu")]).unwrap();
    assert!((percent - 100.0 * 1.5 / 3.5).abs() < 1e-9, "{percent}");

    // Labels: upstream's fixed ones and one per well-known label, the Node's value or empty.
    let (labels, _) = samples(&text, "karpenter_nodes_current_lifetime_seconds").remove(0);
    let names: BTreeSet<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
    let mut expected: BTreeSet<String> = ["node_name", "phase", "managed"].map(String::from).into();
    expected.extend(super::node::well_known_label_names(ctx.cloud.labels().all_well_known()).into_keys());
    assert_eq!(names, expected.iter().map(String::as_str).collect());
    for core in ["nodepool", "zone", "region", "instance_type", "arch", "os", "capacity_type", "windows_build"] {
        assert!(names.contains(core), "{core}");
    }
    let get = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str()).unwrap();
    assert_eq!((get("nodepool"), get("zone"), get("region"), get("managed")), ("default", "z-a", "", "true"));

    // The Node goes: so do its series (and the utilization, with nothing allocatable left).
    ctx.state.remove(&ctx.state.get::<k8s_openapi::api::core::v1::Node>("n1").unwrap());
    nodes.reconcile();
    let text = ctx.metrics.render();
    assert!(!text.contains("node_name=\"n1\""), "{text}");
    assert!(samples(&text, "karpenter_cluster_utilization_percent").is_empty());
}

#[tokio::test]
async fn nodepool_cost_follows_launched_claims_and_counts_errors() {
    let (_clock, _server, ctx) = setup();
    let pool = node_pool(NodePoolOptions {
        name: Some("default".into()),
        node_class_ref: Some(kwok_node_class_ref("default")),
        ..Default::default()
    });
    ctx.state.apply(pool.clone());
    let types = ctx.cloud.instance_types(&pool).await.unwrap();
    let it = &types[0];
    let offering = &it.offerings[0];
    let launched = |name: &str, pool: &str| {
        node_claim(NodeClaimOptions {
            name: Some(name.into()),
            node_pool: Some(pool.into()),
            labels: [
                (labels::INSTANCE_TYPE.to_string(), it.name.clone()),
                (labels::ZONE.to_string(), offering.zone().unwrap().to_string()),
                (labels::CAPACITY_TYPE.to_string(), offering.capacity_type().unwrap().to_string()),
            ]
            .into(),
            ..Default::default()
        })
    };
    let metrics = nodepool::NodePoolMetrics::new(&ctx);
    ctx.state.apply(launched("a", "default"));
    ctx.state.apply(launched("b", "default"));
    ctx.state.apply(node_claim(NodeClaimOptions {
        name: Some("unlaunched".into()),
        node_pool: Some("default".into()),
        ..Default::default()
    }));
    ctx.state.apply(launched("orphan", "missing"));
    metrics.reconcile().await;
    let text = ctx.metrics.render();
    let cost = sample(&text, "karpenter_nodepools_cost_total", &[("nodepool", "default")]).unwrap();
    assert!((cost - 2.0 * offering.price).abs() < 1e-9, "{cost} vs 2 × {}", offering.price);
    assert_eq!(sample(&text, "karpenter_nodepools_cost_tracker_errors_total", &[("nodepool", "missing")]), Some(1.0));
    assert_eq!(sample(&text, "karpenter_nodepools_cost_total", &[("nodepool", "missing")]), None);

    ctx.state.remove(&ctx.state.get::<karpenter_api::NodeClaim>("a").unwrap());
    metrics.reconcile().await;
    let cost = sample(&ctx.metrics.render(), "karpenter_nodepools_cost_total", &[("nodepool", "default")]).unwrap();
    assert!((cost - offering.price).abs() < 1e-9);

    ctx.state.remove(&pool);
    metrics.reconcile().await;
    assert!(samples(&ctx.metrics.render(), "karpenter_nodepools_cost_total").is_empty());
}

/// The fault path of `karpenter_nodepools_cost_tracker_errors_total` as production meets it: the cloud provider
/// cannot list a NodePool's instance types (an API outage, a node class it cannot resolve), so a launched NodeClaim
/// of that pool cannot be priced. Each round that fails counts one error for the pool (upstream counts each failed
/// reconcile of the NodeClaim); once the types can be read, the claim is priced and the errors stop.
#[tokio::test]
async fn a_pool_whose_instance_types_cannot_be_read_counts_cost_tracker_errors() {
    let clock = FakeClock::new(t0());
    let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
    let cloud = karpenter_testing::kwok::fake();
    let ctx = ControllerContext::for_tests(server.client(), Arc::new(cloud.clone()), Arc::new(clock.clone()));
    let pool = node_pool(NodePoolOptions {
        name: Some("default".into()),
        node_class_ref: Some(kwok_node_class_ref("default")),
        ..Default::default()
    });
    ctx.state.apply(pool.clone());
    let types = ctx.cloud.instance_types(&pool).await.unwrap();
    let (it, offering) = (&types[0], &types[0].offerings[0]);
    ctx.state.apply(node_claim(NodeClaimOptions {
        name: Some("launched".into()),
        node_pool: Some("default".into()),
        labels: [
            (labels::INSTANCE_TYPE.to_string(), it.name.clone()),
            (labels::ZONE.to_string(), offering.zone().unwrap().to_string()),
            (labels::CAPACITY_TYPE.to_string(), offering.capacity_type().unwrap().to_string()),
        ]
        .into(),
        ..Default::default()
    }));
    cloud.fail_always(karpenter_cloudprovider::Method::InstanceTypes, || {
        karpenter_cloudprovider::CloudProviderError::other("the pricing API is unreachable")
    });
    let metrics = nodepool::NodePoolMetrics::new(&ctx);
    let errors = |text: &str| sample(text, "karpenter_nodepools_cost_tracker_errors_total", &[("nodepool", "default")]);

    metrics.reconcile().await;
    let text = ctx.metrics.render();
    assert!(
        text.contains("karpenter_nodepools_cost_tracker_errors_total{nodepool=\"default\"} 1\n"),
        "one error, labelled by the pool only (upstream's label): {text}"
    );
    assert_eq!(sample(&text, "karpenter_nodepools_cost_total", &[("nodepool", "default")]), Some(0.0), "not priced");
    metrics.reconcile().await;
    assert_eq!(errors(&ctx.metrics.render()), Some(2.0), "tried again, and counted again, next round");

    cloud.clear_failures();
    metrics.reconcile().await;
    let text = ctx.metrics.render();
    assert_eq!(errors(&text), Some(2.0), "a round that prices the claim counts no error");
    let cost = sample(&text, "karpenter_nodepools_cost_total", &[("nodepool", "default")]).unwrap();
    assert!((cost - offering.price).abs() < 1e-9, "{cost} vs {}", offering.price);
}

#[test]
fn the_cost_tracker_counts_each_claim_once() {
    let mut tracker = nodepool::CostTracker::default();
    let key = nodepool::OfferingKey { instance_type: "m".into(), zone: "z".into(), capacity_type: "spot".into() };
    tracker.add("a", "p", key.clone(), 0.5);
    tracker.add("a", "p", key.clone(), 0.5);
    tracker.add("b", "p", key, 0.5);
    assert_eq!(tracker.pool_cost("p"), 1.0);
    tracker.remove("a");
    tracker.remove("a");
    assert_eq!(tracker.pool_cost("p"), 0.5);
    tracker.remove_pool("p");
    assert_eq!(tracker.pool_cost("p"), 0.0);
}

#[tokio::test]
async fn cluster_state_gauges_count_nodes_by_provider_id_and_time_the_unsynced_state() {
    let clock = FakeClock::new(t0());
    let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
    let ctx = ControllerContext::for_tests(
        server.client(),
        Arc::new(karpenter_testing::kwok::fake()),
        Arc::new(clock.clone()),
    );
    let gauges = cluster_state::ClusterStateMetrics::new(&ctx);
    ctx.state.apply(node(NodeOptions {
        name: Some("n1".into()),
        provider_id: Some("kwok://1".into()),
        ..Default::default()
    }));
    ctx.state.apply(node_claim(NodeClaimOptions {
        name: Some("c1".into()),
        provider_id: Some("kwok://1".into()),
        ..Default::default()
    }));
    ctx.state.apply(node_claim(NodeClaimOptions {
        name: Some("c2".into()),
        provider_id: Some("kwok://2".into()),
        ..Default::default()
    }));
    gauges.record();
    let text = ctx.metrics.render();
    assert_eq!(sample(&text, "karpenter_cluster_state_node_count", &[]), Some(2.0));
    assert_eq!(sample(&text, "karpenter_cluster_state_unsynced_time_seconds", &[]), Some(0.0));

    // A NodeClaim not launched yet leaves the state unsynced: the gauge counts from when that was first seen.
    ctx.state.apply(node_claim(NodeClaimOptions { name: Some("c3".into()), ..Default::default() }));
    gauges.record();
    clock.set(t0() + Delta::seconds(7));
    gauges.record();
    assert_eq!(sample(&ctx.metrics.render(), "karpenter_cluster_state_unsynced_time_seconds", &[]), Some(7.0));
    ctx.state.remove(&ctx.state.get::<karpenter_api::NodeClaim>("c3").unwrap());
    gauges.record();
    assert_eq!(sample(&ctx.metrics.render(), "karpenter_cluster_state_unsynced_time_seconds", &[]), Some(0.0));
}

#[derive(Debug, clap::Parser)]
struct Cli {
    #[command(flatten)]
    core: CoreSettings,
}

fn settings(args: &[&str]) -> CoreSettings {
    use clap::Parser;
    Cli::try_parse_from(std::iter::once("karpenter-controller").chain(args.iter().copied())).unwrap().core
}

#[tokio::test]
async fn disabling_cluster_state_observability_starts_none_of_the_metric_controllers() {
    let (_clock, _server, ctx) = setup();
    let shutdown = CancellationToken::new();
    let names = |s: &CoreSettings| -> BTreeSet<String> {
        controllers(&ctx, s, &[], &shutdown).into_iter().map(|(name, _)| name).collect()
    };
    let on = names(&settings(&[]));
    let all = [
        "metrics.pod",
        "metrics.nodepool",
        "metrics.node",
        "state.metrics",
        "operatorpkg.nodeclaim.status",
        "operatorpkg.nodepool.status",
        "operatorpkg.node.status",
    ];
    assert_eq!(on, all.map(String::from).into(), "no node-class kind is registered with status metrics");
    let off = names(&settings(&["--disable-cluster-state-observability=true"]));
    assert_eq!(off, ["state.metrics".to_string()].into(), "upstream's cluster state gauges are not gated");
    assert!(GATED_CONTROLLERS.iter().all(|c| on.contains(*c) && !off.contains(*c)));
}

/// A kind no provider has (`example.dev/ToyNodeClass`), registered with status metrics, gets
/// `operatorpkg.toynodeclass.status` and upstream's `operator_<kind>_…` families under its own lower-cased name,
/// whatever `DISABLE_CLUSTER_STATE_OBSERVABILITY` says; registered without, it gets neither.
#[tokio::test]
async fn a_made_up_kind_registered_with_status_metrics_gets_its_families() {
    use crate::node_classes::toy;
    use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};

    let clock = FakeClock::new(t0());
    let server = toy::api_server(Arc::new(clock.clone()));
    let ctx = ControllerContext::for_tests(
        server.client(),
        Arc::new(karpenter_testing::kwok::fake()),
        Arc::new(clock.clone()),
    );
    let shutdown = CancellationToken::new();
    let off = settings(&["--disable-cluster-state-observability=true"]);
    let without: Vec<String> =
        controllers(&ctx, &off, &[toy::registration()], &shutdown).into_iter().map(|(n, _)| n).collect();
    assert_eq!(without, ["state.metrics"], "no status metrics unless registered with them");
    let toy_kind = toy::registration().with_status_metrics();
    let mut list = controllers(&ctx, &off, std::slice::from_ref(&toy_kind), &shutdown);
    let at = list.iter().position(|(n, _)| n == "operatorpkg.toynodeclass.status").expect("the kind's recorder");
    let task = tokio::spawn(list.swap_remove(at).1);

    let api: Api<DynamicObject> = Api::all_with(server.client(), &toy_kind.api_resource);
    api.create(&PostParams::default(), &toy::object("first")).await.unwrap();
    let set_ready = async |status: &str, reason: &str, at: DateTime<Utc>| {
        let conditions = [serde_json::json!({"type": "Ready", "status": status, "reason": reason, "message": "",
            "lastTransitionTime": karpenter_api::time::rfc3339(at)})];
        let patch = serde_json::json!({"status": {"conditions": conditions}});
        api.patch_status("first", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    };
    let eventually = async |what: &str, check: &dyn Fn(&str) -> bool| {
        let deadline = karpenter_cloudprovider::time::tokio_now() + std::time::Duration::from_secs(10);
        loop {
            if check(&ctx.metrics.render()) {
                return;
            }
            assert!(karpenter_cloudprovider::time::tokio_now() < deadline, "{what}:\n{}", ctx.metrics.render());
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    set_ready("False", "Waiting", t0() - Delta::seconds(30)).await;
    let waiting = [("name", "first"), ("type", "Ready"), ("status", "False"), ("reason", "Waiting")];
    eventually("the condition is counted and timed", &|text| {
        sample(text, "operator_toynodeclass_status_condition_count", &waiting) == Some(1.0)
            && sample(text, "operator_toynodeclass_status_condition_current_status_seconds", &waiting) == Some(30.0)
    })
    .await;

    set_ready("True", "Ready", t0()).await;
    eventually("the transition is counted, the old series removed", &|text| {
        let ready = [("type", "Ready"), ("status", "True"), ("reason", "Ready")];
        sample(text, "operator_toynodeclass_status_condition_transitions_total", &ready) == Some(1.0)
            && sample(text, "operator_toynodeclass_status_condition_count", &waiting).is_none()
            && sample(
                text,
                "operator_toynodeclass_status_condition_transition_seconds_sum",
                &[("type", "Ready"), ("status", "False")],
            ) == Some(30.0)
    })
    .await;

    api.delete("first", &DeleteParams::default()).await.unwrap();
    eventually("a deleted object's gauges go", &|text| {
        samples(text, "operator_toynodeclass_status_condition_count").is_empty()
    })
    .await;
    shutdown.cancel();
    task.await.unwrap();
}
