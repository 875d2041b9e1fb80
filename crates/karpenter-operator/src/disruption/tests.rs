//! The disruption controllers against the in-process API server, driven step by step on a fake clock: the
//! FakeCloudProvider launches replacements, the lifecycle controller registers and initializes them once the
//! test has created their Node (as the kwok provider would) and the kubelet stand-in has made it Ready.

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::hash::node_pool_hash_annotations;
use karpenter_api::labels::{self, annotations, finalizers, taints};
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_api::nodepool::{Budget, DisruptionReason};
use karpenter_api::{CompactPod, NodeClaim, NodePool};
use karpenter_cloudprovider::{Clock, FakeCloudProvider, FakeOptions};
use karpenter_disruption::command::{Decision, Method, Outcome, Reason};
use karpenter_disruption::validation::FailureKind;
use karpenter_kwok::kubelet::Kubelet;
use karpenter_testing::apiserver::{ApiServer, create_with_status};
use karpenter_testing::{
    FakeClock, NodeClaimOptions, NodeOptions, NodePoolOptions, PdbOptions, PodOptions, kwok_node_class_ref, node,
    node_claim, node_pool, nodepool_requirement, pod, pod_disruption_budget, taint,
};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::controller::CONSOLIDATION_REFRESH;
use super::*;
use crate::context::ControllerContext;
use crate::events::{Recorder, reasons};
use crate::lifecycle::{LifecycleContext, reconcile as lifecycle_reconcile};
use crate::metrics::Metrics;
use crate::state::ClusterState;
use karpenter_disruption::validation::VALIDATION_DELAY;

const POOL: &str = "default";

struct Env {
    _server: ApiServer,
    client: Client,
    clock: FakeClock,
    state: ClusterState,
    metrics: Arc<Metrics>,
    /// What the controllers were built from (the fake cloud, `state` marked listed).
    ctx: ControllerContext,
    disruption: Disruption,
    conditions: NodeClaimDisruption,
    pod_events: PodEvents,
    lifecycle: LifecycleContext,
    kubelet: Kubelet,
    cloud: FakeCloudProvider,
}

fn env() -> Env {
    env_with(|_| {}, DisruptionSettings::default())
}

/// [`env`] with the fake cloud's options and the loop's settings changed.
fn env_with(cloud_options: impl FnOnce(&mut FakeOptions), settings: DisruptionSettings) -> Env {
    let clock = FakeClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap());
    let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
    let client = server.client();
    let mut options = FakeOptions { clock: Arc::new(clock.clone()), ..karpenter_testing::kwok::fake_options() };
    cloud_options(&mut options);
    let cloud = FakeCloudProvider::new(options);
    let ctx = ControllerContext::for_tests(client.clone(), Arc::new(cloud.clone()), Arc::new(clock.clone()));
    let (state, metrics) = (ctx.state().clone(), ctx.metrics().clone());
    let disruption = Disruption::new(&ctx, settings);
    let conditions = NodeClaimDisruption::new(&ctx);
    let pod_events = PodEvents::new(&ctx);
    let lifecycle = LifecycleContext::new(&ctx);
    let kubelet = Kubelet::new(client.clone(), Arc::new(clock.clone()));
    Env {
        _server: server,
        client,
        clock,
        state,
        metrics,
        ctx,
        disruption,
        conditions,
        pod_events,
        lifecycle,
        kubelet,
        cloud,
    }
}

fn pool_options() -> NodePoolOptions {
    NodePoolOptions {
        name: Some(POOL.into()),
        node_class_ref: Some(kwok_node_class_ref("default")),
        requirements: vec![
            nodepool_requirement(labels::CAPACITY_TYPE, "In", &["on-demand"]),
            nodepool_requirement(labels::ARCH, "In", &["amd64"]),
            nodepool_requirement(labels::OS, "In", &["linux"]),
        ],
        ..Default::default()
    }
}

impl Env {
    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }
    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    /// Copies every Node, NodeClaim, Pod, NodePool and PDB from the API server into the state (what the
    /// watchers do).
    async fn sync(&self) {
        for n in self.nodes().list(&ListParams::default()).await.unwrap().items {
            self.state.apply(n);
        }
        let claims = self.claims().list(&ListParams::default()).await.unwrap().items;
        let live: Vec<String> = claims.iter().map(ResourceExt::name_any).collect();
        for c in self.state.list::<NodeClaim>() {
            if !live.contains(&c.name_any()) {
                self.state.remove(&c);
            }
        }
        for c in claims {
            self.state.apply(c);
        }
        for p in self.pods().list(&ListParams::default()).await.unwrap().items {
            self.state.apply(CompactPod::from(p));
        }
        for p in Api::<NodePool>::all(self.client.clone()).list(&ListParams::default()).await.unwrap().items {
            self.state.apply(p);
        }
        for p in Api::<PodDisruptionBudget>::all(self.client.clone()).list(&ListParams::default()).await.unwrap().items
        {
            self.state.apply(p);
        }
    }

    async fn pool(&self, o: NodePoolOptions) -> NodePool {
        let mut p = node_pool(o);
        p.metadata.uid = None;
        let created = create_with_status(&Api::<NodePool>::all(self.client.clone()), &p).await.unwrap();
        self.state.apply(created.clone());
        created
    }

    /// A launched, registered, initialized NodeClaim of `instance_type` (on-demand, test-zone-a) with its Ready
    /// Node `name`, both carrying the termination finalizer.
    async fn machine(&self, name: &str, instance_type: &str) -> NodeClaim {
        let pool = self.state.get::<NodePool>(POOL).unwrap();
        let claim_labels: std::collections::BTreeMap<String, String> = [
            (labels::NODE_POOL, POOL),
            (labels::INSTANCE_TYPE, instance_type),
            (labels::ZONE, "test-zone-a"),
            (labels::CAPACITY_TYPE, "on-demand"),
            (labels::ARCH, "amd64"),
            (labels::OS, "linux"),
            ("karpenter.kwok.sh/kwoknodeclass", "default"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let mut claim = node_claim(NodeClaimOptions {
            name: Some(format!("{name}-claim")),
            labels: claim_labels.clone(),
            annotations: node_pool_hash_annotations(&pool).into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            node_class_ref: Some(kwok_node_class_ref("default")),
            requirements: vec![nodepool_requirement(labels::INSTANCE_TYPE, "In", &[instance_type])],
            finalizers: vec![finalizers::TERMINATION.into()],
            launched: true,
            registered: true,
            initialized: true,
            node_name: Some(name.into()),
            ..Default::default()
        });
        let launched = self.cloud.add_instance(&claim).unwrap();
        let status = launched.status.clone().unwrap();
        let c = claim.status.as_mut().unwrap();
        c.provider_id = status.provider_id.clone();
        c.capacity = status.capacity.clone();
        c.allocatable = status.allocatable.clone();
        claim.metadata.uid = None;
        claim.metadata.owner_references = None;
        let claim = create_with_status(&self.claims(), &claim).await.unwrap();
        let mut node_labels = claim_labels;
        node_labels.insert(labels::NODE_INITIALIZED.into(), "true".into());
        node_labels.insert(labels::NODE_REGISTERED.into(), "true".into());
        node_labels.insert(labels::HOSTNAME.into(), name.into());
        let alloc: Vec<(String, String)> = status.allocatable.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
        let mut n = node(NodeOptions {
            name: Some(name.into()),
            labels: node_labels,
            finalizers: vec![finalizers::TERMINATION.into()],
            provider_id: status.provider_id.clone(),
            allocatable: alloc.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>().as_slice().into(),
            ..Default::default()
        });
        n.metadata.uid = None;
        self.nodes().create(&PostParams::default(), &n).await.unwrap();
        self.sync().await;
        claim
    }

    async fn bound_pod(&self, name: &str, node: &str, o: PodOptions) -> Pod {
        let mut p = pod(PodOptions {
            name: Some(name.into()),
            node_name: Some(node.into()),
            phase: Some("Running".into()),
            ..o
        });
        p.metadata.uid = None;
        let created = create_with_status(&self.pods(), &p).await.unwrap();
        self.state.apply(CompactPod::from(&created));
        created
    }

    async fn claim(&self, name: &str) -> Option<NodeClaim> {
        self.claims().get_opt(name).await.unwrap()
    }

    async fn node_taints(&self, name: &str) -> Vec<String> {
        let n = self.nodes().get(name).await.unwrap();
        n.spec.and_then(|s| s.taints).unwrap_or_default().into_iter().map(|t| t.key).collect()
    }

    /// Brings a replacement NodeClaim up: lifecycle launches it, the test creates its Node as the kwok provider
    /// would, the kubelet stand-in makes it Ready, lifecycle registers and initializes it.
    async fn bring_up(&self, claim_name: &str) {
        for _ in 0..6 {
            self.sync().await;
            let claim = self.claims().get(claim_name).await.unwrap();
            if claim.is_initialized() {
                return;
            }
            if let Some(pid) = claim.provider_id()
                && self.state.nodes_by_provider_id(pid).is_empty()
            {
                let mut l = claim.labels().clone();
                l.insert(labels::HOSTNAME.into(), claim_name.into());
                let alloc: Vec<(String, String)> = claim
                    .status
                    .as_ref()
                    .unwrap()
                    .allocatable
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect();
                let mut n = node(NodeOptions {
                    name: Some(claim_name.into()),
                    labels: l,
                    provider_id: Some(pid.into()),
                    taints: vec![taint(taints::UNREGISTERED, None, "NoExecute")],
                    allocatable: alloc
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect::<Vec<_>>()
                        .as_slice()
                        .into(),
                    ready: Some(false),
                    ..Default::default()
                });
                n.metadata.uid = None;
                self.nodes().create(&PostParams::default(), &n).await.unwrap();
                self.kubelet.step().await.unwrap();
                self.sync().await;
            }
            let claim = self.claims().get(claim_name).await.unwrap();
            lifecycle_reconcile(&self.lifecycle, &claim).await.unwrap();
        }
        panic!("replacement {claim_name} did not initialize");
    }

    async fn events(&self, reason: &str) -> Vec<(String, String)> {
        let api: Api<CoreEvent> = Api::all(self.client.clone());
        let mut last = Vec::new();
        for _ in 0..50 {
            last = api
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .map(|e| (e.involved_object.name.unwrap_or_default(), e.message.unwrap_or_default()))
                .collect();
            if !last.is_empty() {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        last
    }
}

fn condition_of(claim: &NodeClaim, type_: &str) -> Option<(ConditionStatus, String)> {
    claim.conditions().iter().find(|c| c.type_ == type_).map(|c| (c.status, c.reason.clone()))
}

#[tokio::test]
async fn an_empty_node_is_deleted_after_validation() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("empty", "c-2x-amd64-linux").await;

    let report = e.disruption.step().await.unwrap();
    let cmd = report.awaiting_validation.expect("an emptiness command awaits validation");
    assert_eq!(cmd.method, Method::Emptiness);
    assert_eq!(report.requeue, VALIDATION_DELAY);
    assert!(e.node_taints("empty").await.is_empty(), "nothing is tainted before validation");

    // Before the delay nothing happens.
    e.clock.step_secs(10);
    let report = e.disruption.step().await.unwrap();
    assert!(report.started.is_empty());
    assert_eq!(report.requeue, Duration::from_secs(5));

    e.clock.step_secs(5);
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.started.len(), 1, "{report:?}");
    assert_eq!(report.deleted, ["empty-claim"]);
    let claim = e.claim("empty-claim").await.unwrap();
    assert!(claim.metadata.deletion_timestamp.is_some(), "deletion requested (termination holds the finalizer)");
    assert_eq!(condition_of(&claim, cond::DISRUPTION_REASON), Some((ConditionStatus::True, "Empty".into())));
    assert!(e.node_taints("empty").await.contains(&taints::DISRUPTED.to_owned()));
    assert_eq!(
        e.metrics.nodeclaims_disrupted("empty", POOL, "on-demand", "when_empty_or_underutilized", "graceful").get(),
        1
    );
    assert_eq!(e.metrics.voluntary_disruption_decisions("delete", "empty", "empty").get(), 1);
    assert!(!e.events(reasons::DISRUPTION_TERMINATING).await.is_empty());

    // The next pass does not touch the deleting node (it keeps its taint).
    e.sync().await;
    let report = e.disruption.step().await.unwrap();
    assert!(report.cleaned.is_empty() && report.awaiting_validation.is_none(), "{report:?}");
}

#[tokio::test]
async fn an_underutilized_node_is_replaced_by_a_cheaper_one() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("big", "m-8x-amd64-linux").await;
    e.bound_pod(
        "web",
        "big",
        PodOptions { requests: [("cpu", "500m"), ("memory", "256Mi")].into(), ..Default::default() },
    )
    .await;

    let report = e.disruption.step().await.unwrap();
    let cmd = report.awaiting_validation.expect("a consolidation command");
    assert_eq!((cmd.method, cmd.decision), (Method::SingleNodeConsolidation, Decision::Replace), "{cmd:?}");
    e.clock.step_secs(15);
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.started.len(), 1, "{report:?}");
    let [replacement] = report.replacements.as_slice() else { panic!("one replacement: {report:?}") };
    assert!(report.deleted.is_empty(), "the old node waits for its replacement");
    assert!(e.node_taints("big").await.contains(&taints::DISRUPTED.to_owned()));
    let old = e.claim("big-claim").await.unwrap();
    assert_eq!(condition_of(&old, cond::DISRUPTION_REASON), Some((ConditionStatus::True, "Underutilized".into())));
    assert!(e.state.is_marked_for_deletion("big"));
    assert_eq!(e.disruption.in_flight_nodes().await, ["big"]);
    assert_eq!(e.metrics.nodeclaims_created("underutilized", POOL, "false").get(), 1);

    // Not initialized yet: the command waits.
    let report = e.disruption.step().await.unwrap();
    assert!(report.deleted.is_empty() && report.rolled_back.is_empty(), "{report:?}");
    assert!(!e.events(reasons::DISRUPTION_WAITING_READINESS).await.is_empty());

    e.bring_up(replacement).await;
    let new = e.claim(replacement).await.unwrap();
    let new_type = new.labels().get(labels::INSTANCE_TYPE).cloned().unwrap();
    let price = |name: &str| {
        karpenter_testing::kwok::catalogue::catalogue()
            .into_iter()
            .find(|it| it.name == name)
            .and_then(|it| it.offerings.iter().map(|o| o.price).reduce(f64::max))
            .unwrap()
    };
    assert!(price(&new_type) < price("m-8x-amd64-linux"), "{new_type} is cheaper");

    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.deleted, ["big-claim"], "{report:?}");
    assert!(e.claim("big-claim").await.unwrap().metadata.deletion_timestamp.is_some());
    assert!(e.state.is_marked_for_deletion("big"), "still marked, now through the claim's deletion");
    assert!(e.disruption.in_flight_nodes().await.is_empty());
    assert_eq!(
        e.metrics
            .nodeclaims_disrupted("underutilized", POOL, "on-demand", "when_empty_or_underutilized", "graceful")
            .get(),
        1
    );
    assert_eq!(
        e.metrics
            .pods_disruption_initiated("underutilized", POOL, "on-demand", "when_empty_or_underutilized", "graceful")
            .get(),
        1
    );
    assert_eq!(e.metrics.voluntary_disruption_decisions("replace", "underutilized", "single").get(), 1);
    // Upstream counts the moves of every policy; only Balanced pools are scored.
    let text = e.metrics.render();
    assert!(
        text.contains(
            "karpenter_consolidation_moves_total{decision=\"approved\",nodepool=\"default\",\
             policy=\"WhenEmptyOrUnderutilized\"} 1\n"
        ),
        "{text}"
    );
    assert!(!text.contains("karpenter_consolidation_score_count{"), "{text}");
}

/// Upstream's Balanced evaluator as the loop records it: a single-node move, once computed, is counted by its
/// decision, NodePool and policy, and a Balanced pool's score observed; a pass that takes nothing counts nothing.
#[tokio::test]
async fn balanced_scoring_counts_moves_and_observes_scores() {
    let e = env();
    let policy = Some(karpenter_api::nodepool::ConsolidationPolicy::Balanced);
    e.pool(NodePoolOptions { consolidation_policy: policy, ..pool_options() }).await;
    e.machine("big", "m-8x-amd64-linux").await;
    e.bound_pod("web", "big", PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() }).await;

    let report = e.disruption.step().await.unwrap();
    let cmd = report.awaiting_validation.expect("a consolidation command");
    assert_eq!((cmd.method, cmd.decision), (Method::SingleNodeConsolidation, Decision::Replace), "{cmd:?}");
    let pass = report.pass.expect("the pass");
    let [m] = pass.consolidation_moves.as_slice() else { panic!("one move: {:?}", pass.consolidation_moves) };
    // The pool's only node: its move disrupts the whole pool, so the score is the fraction of the cost it saves.
    let score = m.score.expect("a Balanced pool's move is scored");
    assert!(m.approved && score >= 0.5, "{m:?}");
    let text = e.metrics.render();
    let labels = "{decision=\"approved\",nodepool=\"default\",policy=\"Balanced\"}";
    assert!(text.contains(&format!("karpenter_consolidation_moves_total{labels} 1\n")), "{text}");
    assert!(text.contains(&format!("karpenter_consolidation_score_count{labels} 1\n")), "{text}");
    let bucket = if score <= 1.0 { "1.0" } else { "+Inf" };
    let line = format!(
        "karpenter_consolidation_score_bucket{{le=\"{bucket}\",decision=\"approved\",nodepool=\"default\",policy=\"Balanced\"}} 1"
    );
    assert!(text.contains(&line), "upstream's buckets: {text}");
}

#[tokio::test]
async fn a_replacement_that_never_initializes_rolls_the_command_back() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("big", "m-8x-amd64-linux").await;
    e.bound_pod("web", "big", PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() }).await;
    e.disruption.step().await.unwrap();
    e.clock.step_secs(15);
    let report = e.disruption.step().await.unwrap();
    let replacement = report.replacements.first().cloned().expect("a replacement");

    e.clock.step_secs(9 * 60);
    let report = e.disruption.step().await.unwrap();
    assert!(report.rolled_back.is_empty(), "within the 10 min timeout");
    e.clock.step_secs(60 + 1);
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.rolled_back.len(), 1, "{report:?}");
    assert!(report.rolled_back[0].1.contains("not initialized"), "{:?}", report.rolled_back);
    assert!(!e.node_taints("big").await.contains(&taints::DISRUPTED.to_owned()), "untainted");
    let old = e.claim("big-claim").await.unwrap();
    assert!(condition_of(&old, cond::DISRUPTION_REASON).is_none(), "condition cleared");
    assert!(old.metadata.deletion_timestamp.is_none());
    assert!(e.claim(&replacement).await.is_none(), "replacement deleted");
    assert!(!e.state.is_marked_for_deletion("big"));
    assert!(e.disruption.in_flight_nodes().await.is_empty());
    assert_eq!(e.metrics.voluntary_disruption_queue_failures("replace", "underutilized", "single").get(), 1);
}

/// The fault path of `karpenter_voluntary_disruption_queue_failures_total` as production meets it: the cloud
/// provider has no capacity for the replacement, the lifecycle controller deletes the NodeClaim it could not launch,
/// and the command is rolled back, counting the replacement that never initialized.
#[tokio::test]
async fn a_replacement_the_cloud_cannot_launch_rolls_the_command_back_and_counts_a_queue_failure() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("big", "m-8x-amd64-linux").await;
    e.bound_pod("web", "big", PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() }).await;
    e.disruption.step().await.unwrap();
    e.clock.step_secs(15);
    let replacement = e.disruption.step().await.unwrap().replacements.first().cloned().expect("a replacement");
    e.cloud.fail_next(karpenter_cloudprovider::Method::Create, 1, || {
        karpenter_cloudprovider::CloudProviderError::insufficient_capacity(Vec::new(), "no capacity in any zone")
    });
    let claim = e.claims().get(&replacement).await.unwrap();
    lifecycle_reconcile(&e.lifecycle, &claim).await.unwrap();
    e.sync().await;
    let gone = e.claim(&replacement).await.is_none_or(|c| c.metadata.deletion_timestamp.is_some());
    assert!(gone, "the lifecycle controller deletes the NodeClaim it could not launch");

    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.rolled_back.len(), 1, "{report:?}");
    assert!(!e.node_taints("big").await.contains(&taints::DISRUPTED.to_owned()), "the candidate is untainted");
    let text = e.metrics.render();
    assert!(
        text.contains(
            "karpenter_voluntary_disruption_queue_failures_total{decision=\"replace\",reason=\"underutilized\",\
             consolidation_type=\"single\"} 1\n"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_deleted_replacement_rolls_the_command_back_at_once() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("big", "m-8x-amd64-linux").await;
    e.bound_pod("web", "big", PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() }).await;
    e.disruption.step().await.unwrap();
    e.clock.step_secs(15);
    let replacement = e.disruption.step().await.unwrap().replacements.first().cloned().unwrap();
    // Insufficient capacity: the lifecycle controller deletes the replacement.
    e.claims().delete(&replacement, &Default::default()).await.unwrap();
    // The loop reads replacements from the state, which the NodeClaim watch keeps current.
    e.sync().await;
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.rolled_back.len(), 1, "{report:?}");
    assert!(report.rolled_back[0].1.contains("no longer exists"));
    assert!(!e.node_taints("big").await.contains(&taints::DISRUPTED.to_owned()));
}

#[tokio::test]
async fn a_budget_of_zero_blocks_with_an_event_on_the_pool() {
    let e = env();
    e.pool(NodePoolOptions { budgets: vec![Budget { nodes: "0".into(), ..Default::default() }], ..pool_options() })
        .await;
    e.machine("empty", "c-2x-amd64-linux").await;
    let report = e.disruption.step().await.unwrap();
    assert!(report.awaiting_validation.is_none() && report.started.is_empty(), "{report:?}");
    let pass = report.pass.unwrap();
    let v = pass.verdict("empty").unwrap();
    assert!(matches!(v.reason, Reason::BudgetExhausted { reason: DisruptionReason::Empty, .. }), "{v:?}");
    // A pass without a command is measured too, under the last method it went through.
    let rendered = e.metrics.render();
    assert!(
        rendered.contains(
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds_count{reason=\"underutilized\",consolidation_type=\"single\"} 1"
        ),
        "{rendered}"
    );
    assert_eq!(e.metrics.nodepools_allowed_disruptions(POOL, "Empty").get(), 0.0);
    let events = e.events(reasons::DISRUPTION_BLOCKED).await;
    assert!(events.iter().any(|(obj, m)| obj == POOL && m.contains("Empty")), "{events:?}");
}

/// The pool, node `big` and on it pod `precious` (500m) annotated `key: value`.
async fn big_node_with_an_annotated_pod(e: &Env, key: &str, value: &str) {
    e.pool(pool_options()).await;
    e.machine("big", "m-8x-amd64-linux").await;
    let pod = PodOptions {
        requests: [("cpu", "500m")].into(),
        annotations: [(key.to_owned(), value.to_owned())].into(),
        ..Default::default()
    };
    e.bound_pod("precious", "big", pod).await;
}

#[tokio::test]
async fn a_do_not_disrupt_pod_blocks_with_an_event() {
    let e = env();
    big_node_with_an_annotated_pod(&e, annotations::DO_NOT_DISRUPT, "true").await;
    let report = e.disruption.step().await.unwrap();
    assert!(report.awaiting_validation.is_none(), "{report:?}");
    let v = report.pass.unwrap().verdict("big").cloned().unwrap();
    assert_eq!(v.outcome, Outcome::Blocked);
    assert!(matches!(v.reason, Reason::PodDoNotDisrupt { .. }), "{v:?}");
    let events = e.events(reasons::DISRUPTION_BLOCKED).await;
    assert!(events.iter().any(|(obj, m)| obj == "big" && m.contains("do-not-disrupt")), "{events:?}");
}

/// Another autoscaler's pod annotation blocks as do-not-disrupt does, and the event names it; with
/// `HONOR_AUTOSCALER_ANNOTATIONS=false` it changes nothing.
#[tokio::test]
async fn an_autoscaler_safe_to_evict_pod_blocks_with_an_event_naming_it() {
    let e = env();
    let key = labels::autoscaler::CLUSTER_AUTOSCALER_SAFE_TO_EVICT;
    big_node_with_an_annotated_pod(&e, key, "false").await;
    let off = Disruption::new(&e.ctx, DisruptionSettings { honor_autoscaler_annotations: false, ..Default::default() });
    let pass = off.evaluate().await.unwrap();
    let v = pass.verdict("big").cloned().unwrap();
    assert!(!matches!(v.reason, Reason::PodDoNotDisrupt { .. }), "off: the annotation changes nothing: {v:?}");

    let report = e.disruption.step().await.unwrap();
    assert!(report.awaiting_validation.is_none(), "{report:?}");
    let v = report.pass.unwrap().verdict("big").cloned().unwrap();
    assert_eq!(v.outcome, Outcome::Blocked);
    assert!(matches!(&v.reason, Reason::PodDoNotDisrupt { annotation: Some(a), .. } if a.starts_with(key)), "{v:?}");
    let events = e.events(reasons::DISRUPTION_BLOCKED).await;
    let expected = format!("pod default/precious has {key}=false");
    assert!(events.iter().any(|(obj, m)| obj == "big" && m.contains(&expected)), "{events:?}");
}

/// Each pass counts each candidate it left alone once, under its verdict's reason code.
#[tokio::test]
async fn skipped_candidates_are_counted_by_reason_once_per_pass() {
    let e = env();
    big_node_with_an_annotated_pod(&e, annotations::DO_NOT_DISRUPT, "true").await;
    let sample = |n: u32| {
        format!(
            "karpenter_voluntary_disruption_candidates_skipped_total{{nodepool=\"{POOL}\",reason=\"PodDoNotDisrupt\"}} {n}"
        )
    };
    let report = e.disruption.step().await.unwrap();
    assert!(report.awaiting_validation.is_none() && report.started.is_empty(), "{report:?}");
    let rendered = e.metrics.render();
    assert!(rendered.contains(&sample(1)), "{rendered}");
    e.disruption.step().await.unwrap();
    let rendered = e.metrics.render();
    assert!(rendered.contains(&sample(2)), "one more per pass: {rendered}");
    assert!(!rendered.contains("candidates_skipped_total{nodepool=\"default\",reason=\"Disrupted\""), "{rendered}");
}

/// cluster-autoscaler's node annotation keeps the node as a node's `karpenter.sh/do-not-disrupt` does.
#[tokio::test]
async fn an_autoscaler_scale_down_disabled_node_is_not_disrupted() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("empty", "c-2x-amd64-linux").await;
    let key = labels::autoscaler::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED;
    e.nodes()
        .patch("empty", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {key: "true"}}})))
        .await
        .unwrap();
    e.sync().await;
    let report = e.disruption.step().await.unwrap();
    assert!(report.awaiting_validation.is_none() && report.started.is_empty(), "{report:?}");
    let v = report.pass.unwrap().verdict("empty").cloned().unwrap();
    assert_eq!(v.reason, Reason::NodeDoNotDisrupt { annotation: Some(format!("{key}=true")) }, "{v:?}");
}

#[tokio::test]
async fn an_invalid_do_not_disrupt_value_is_ignored_with_an_event() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("big", "m-8x-amd64-linux").await;
    e.bound_pod(
        "careless",
        "big",
        PodOptions {
            requests: [("cpu", "500m")].into(),
            annotations: [(annotations::DO_NOT_DISRUPT.to_owned(), "yes please".to_owned())].into(),
            ..Default::default()
        },
    )
    .await;
    let report = e.disruption.step().await.unwrap();
    let v = report.pass.unwrap().verdict("big").cloned().unwrap();
    assert!(!matches!(v.reason, Reason::PodDoNotDisrupt { .. }), "the value is ignored: {v:?}");
    let events = e.events(reasons::INVALID_DO_NOT_DISRUPT_ANNOTATION).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "careless");
    assert!(events[0].1.contains("\"yes please\""), "{events:?}");
    // The next pass says nothing new: the recorder keeps one event per pod and value.
    e.disruption.step().await.unwrap();
    assert_eq!(e.events(reasons::INVALID_DO_NOT_DISRUPT_ANNOTATION).await.len(), 1);
}

#[tokio::test]
async fn an_invalid_disruption_cost_is_ignored_with_an_event_when_the_gate_is_on() {
    for gate in [false, true] {
        let e = env_with(|_| {}, DisruptionSettings { pod_deletion_cost_management: gate, ..Default::default() });
        e.pool(pool_options()).await;
        e.machine("big", "m-8x-amd64-linux").await;
        let bad = [(annotations::DISRUPTION_COST.to_owned(), "lots".to_owned())].into();
        e.bound_pod("priced", "big", PodOptions { annotations: bad, ..Default::default() }).await;
        e.disruption.step().await.unwrap();
        let events = e.events(reasons::INVALID_DISRUPTION_COST_ANNOTATION).await;
        if gate {
            assert_eq!(events.len(), 1, "{events:?}");
            assert_eq!(events[0].0, "priced");
            assert!(events[0].1.contains("karpenter.sh/disruption-cost annotation value \"lots\""), "{events:?}");
        } else {
            assert!(events.is_empty(), "without the gate the annotation means nothing: {events:?}");
        }
    }
}

/// Upstream's "already consolidated": once consolidation finds nothing, later passes skip its simulations until
/// the state changes or 5 minutes have passed.
#[tokio::test]
async fn consolidation_that_found_nothing_waits_for_a_change() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("big", "s-8x-amd64-linux").await;
    e.bound_pod(
        "busy",
        "big",
        PodOptions { requests: [("cpu", "7"), ("memory", "28Gi")].into(), ..Default::default() },
    )
    .await;
    let verdict = |report: StepReport| {
        let pass = report.pass.as_ref().unwrap_or_else(|| panic!("no pass: {report:?}"));
        pass.verdict("big").cloned().unwrap_or_else(|| panic!("no verdict: {pass:?}")).reason
    };
    let simulated = verdict(e.disruption.step().await.unwrap());
    assert!(matches!(simulated, Reason::NoCheaperOption { .. }), "{simulated:?}");
    assert_eq!(verdict(e.disruption.step().await.unwrap()), Reason::ConsolidationUnchanged, "nothing changed");
    e.bound_pod("small", "big", PodOptions { requests: [("cpu", "100m")].into(), ..Default::default() }).await;
    assert_eq!(verdict(e.disruption.step().await.unwrap()), simulated, "a pod arrived");
    assert_eq!(verdict(e.disruption.step().await.unwrap()), Reason::ConsolidationUnchanged);
    e.clock.step(chrono::Duration::from_std(CONSOLIDATION_REFRESH).unwrap());
    assert_eq!(verdict(e.disruption.step().await.unwrap()), simulated, "re-checked after 5 minutes");
}

#[tokio::test]
async fn a_pdb_blocks_graceful_disruption() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("big", "m-8x-amd64-linux").await;
    e.bound_pod(
        "db",
        "big",
        PodOptions {
            requests: [("cpu", "500m")].into(),
            labels: [("app".to_owned(), "db".to_owned())].into(),
            ..Default::default()
        },
    )
    .await;
    let mut pdb = pod_disruption_budget(PdbOptions {
        name: Some("db".into()),
        labels: [("app".to_owned(), "db".to_owned())].into(),
        max_unavailable: Some(IntOrString::Int(0)),
        disruptions_allowed: Some(0),
        ..Default::default()
    });
    pdb.metadata.uid = None;
    let pdb =
        create_with_status(&Api::<PodDisruptionBudget>::namespaced(e.client.clone(), "default"), &pdb).await.unwrap();
    e.state.apply(pdb);
    let report = e.disruption.step().await.unwrap();
    assert!(report.awaiting_validation.is_none(), "{report:?}");
    let v = report.pass.unwrap().verdict("big").cloned().unwrap();
    assert!(matches!(v.reason, Reason::PdbBlocked { .. }), "{v:?}");
    let events = e.events(reasons::DISRUPTION_BLOCKED).await;
    assert!(events.iter().any(|(obj, m)| obj == "big" && m.contains("PodDisruptionBudget default/db")), "{events:?}");
}

#[tokio::test]
async fn validation_rejects_a_command_when_a_pod_lands_on_the_candidate() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("empty", "c-2x-amd64-linux").await;
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.awaiting_validation.map(|c| c.method), Some(Method::Emptiness));
    e.bound_pod("late", "empty", PodOptions { requests: [("cpu", "100m")].into(), ..Default::default() }).await;
    e.clock.step_secs(15);
    let report = e.disruption.step().await.unwrap();
    let failure = report.rejected.clone().expect("rejected by validation");
    assert_eq!(failure.kind, FailureKind::Churn, "{failure}");
    assert!(report.started.is_empty());
    assert!(e.node_taints("empty").await.is_empty());
    assert!(e.claim("empty-claim").await.unwrap().metadata.deletion_timestamp.is_none());
    let text = e.metrics.render();
    assert!(
        text.contains("karpenter_voluntary_disruption_failed_validations_total{consolidation_type=\"empty\"} 1\n"),
        "one candidate of an emptiness command gone: {text}"
    );
    // The methods after Emptiness take their turn in the same iteration, as in upstream's method loop: the node,
    // no longer empty, is now worth replacing with a smaller one.
    let next = e.disruption.pending_command().await.expect("single-node consolidation's command");
    assert_eq!((next.method, next.decision), (Method::SingleNodeConsolidation, Decision::Replace), "{next:?}");
    assert_eq!(report.awaiting_validation, Some(next));
}

/// Upstream's method loop: when multi-node consolidation's command fails validation, single-node consolidation
/// gets its turn in the same iteration (against the cluster as it is after the wait), not a pass later from the
/// first method.
#[tokio::test]
async fn a_multi_node_command_failing_validation_hands_over_to_single_node_consolidation() {
    let e = env();
    e.pool(NodePoolOptions { budgets: vec![Budget { nodes: "100%".into(), ..Default::default() }], ..pool_options() })
        .await;
    let one_cpu = || PodOptions { requests: [("cpu", "1")].into(), ..Default::default() };
    for name in ["n1", "n2", "n3"] {
        e.machine(name, "c-4x-amd64-linux").await;
        e.bound_pod(&format!("{name}-web"), name, one_cpu()).await;
    }
    let report = e.disruption.step().await.unwrap();
    let multi = report.awaiting_validation.expect("a multi-node command");
    assert_eq!((multi.method, multi.decision), (Method::MultiNodeConsolidation, Decision::Delete), "{multi:?}");
    // A pod lands on each candidate meanwhile: their four pods no longer fit on the third node, one node's two do.
    for c in &multi.candidates {
        e.bound_pod(&format!("{}-late", c.node), &c.node, one_cpu()).await;
    }
    e.clock.step_secs(15);
    let report = e.disruption.step().await.unwrap();
    let failure = report.rejected.as_ref().unwrap_or_else(|| panic!("rejected by validation: {report:?}"));
    assert_eq!(failure.kind, FailureKind::Scheduling, "{failure}");
    assert!(report.started.is_empty(), "{report:?}");
    let single = report.awaiting_validation.as_ref().unwrap_or_else(|| panic!("single-node's turn: {report:?}"));
    assert_eq!((single.method, single.decision), (Method::SingleNodeConsolidation, Decision::Delete), "{single:?}");
    assert_eq!(report.requeue, VALIDATION_DELAY);
    // Upstream counts a failed validation only when the candidates changed or the budget is gone: pods that no
    // longer schedule as planned are not counted.
    assert!(!e.metrics.render().contains("karpenter_voluntary_disruption_failed_validations_total{"));

    // Its own validation, then it starts.
    e.clock.step_secs(15);
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.started.len(), 1, "{report:?}");
    assert_eq!(report.started[0].method, Method::SingleNodeConsolidation);
}

#[tokio::test]
async fn stale_disruption_marks_are_removed_after_a_restart() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("big", "m-8x-amd64-linux").await;
    e.bound_pod("web", "big", PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() }).await;
    // What a crash between tainting and deleting leaves behind.
    let patch = json!({"spec": {"taints": [{"key": taints::DISRUPTED, "effect": "NoSchedule"}]}});
    e.nodes().patch("big", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let claim = e.claim("big-claim").await.unwrap();
    let mut conditions = claim.conditions().to_vec();
    karpenter_api::set_condition(
        &mut conditions,
        cond::DISRUPTION_REASON,
        ConditionStatus::True,
        "Underutilized",
        "",
        claim.metadata.generation,
        e.clock.now(),
    );
    crate::kube_util::patch_claim_conditions(&e.claims(), &claim, &conditions).await.unwrap();
    e.sync().await;

    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.cleaned, ["big"], "{report:?}");
    assert!(e.node_taints("big").await.is_empty());
    assert!(condition_of(&e.claim("big-claim").await.unwrap(), cond::DISRUPTION_REASON).is_none());
}

#[tokio::test]
async fn a_drifted_node_is_replaced_without_validation() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("old", "c-2x-amd64-linux").await;
    e.bound_pod("web", "old", PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() }).await;
    // The template changes: the claim drifts.
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}});
    let pool = Api::<NodePool>::all(e.client.clone()).patch(POOL, &PatchParams::default(), &Patch::Merge(&patch)).await;
    e.state.apply(pool.unwrap());
    assert_eq!(e.conditions.reconcile_once("old-claim").await.unwrap(), Some(conditions::DRIFT_REQUEUE));
    e.sync().await;
    let report = e.disruption.step().await.unwrap();
    assert!(report.awaiting_validation.is_none(), "drift is not validated");
    assert_eq!(report.started.first().map(|c| c.method), Some(Method::Drift), "{report:?}");
    let [replacement] = report.replacements.as_slice() else { panic!("{report:?}") };
    assert_eq!(e.metrics.nodeclaims_created("drifted", POOL, "false").get(), 1);
    let created = e.claim(replacement).await.unwrap();
    assert_eq!(created.labels().get("team").map(String::as_str), Some("b"), "from the new template");
    e.bring_up(replacement).await;
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.deleted, ["old-claim"]);
    assert_eq!(e.metrics.nodeclaims_disrupted("drifted", POOL, "on-demand", "", "graceful").get(), 1);
}

#[tokio::test]
async fn drift_is_set_on_a_template_change_and_cleared_when_reverted() {
    let e = env();
    e.pool(pool_options()).await;
    e.machine("n", "c-2x-amd64-linux").await;
    e.conditions.reconcile_once("n-claim").await.unwrap();
    assert!(condition_of(&e.claim("n-claim").await.unwrap(), cond::DRIFTED).is_none());

    let pools = Api::<NodePool>::all(e.client.clone());
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}});
    e.state.apply(pools.patch(POOL, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap());
    e.conditions.reconcile_once("n-claim").await.unwrap();
    assert_eq!(
        condition_of(&e.claim("n-claim").await.unwrap(), cond::DRIFTED),
        Some((ConditionStatus::True, "NodePoolDrifted".into()))
    );

    let patch = json!({"spec": {"template": {"metadata": {"labels": null}}}});
    e.state.apply(pools.patch(POOL, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap());
    e.conditions.reconcile_once("n-claim").await.unwrap();
    assert!(condition_of(&e.claim("n-claim").await.unwrap(), cond::DRIFTED).is_none(), "reverted: not drifted");

    // Requirements no longer satisfied by the claim's labels.
    let patch = json!({"spec": {"template": {"spec": {"requirements": [
        {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot"]}]}}}});
    e.state.apply(pools.patch(POOL, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap());
    e.conditions.reconcile_once("n-claim").await.unwrap();
    assert_eq!(
        condition_of(&e.claim("n-claim").await.unwrap(), cond::DRIFTED),
        Some((ConditionStatus::True, "RequirementsDrifted".into()))
    );
}

#[tokio::test]
async fn a_hash_version_mismatch_rewrites_the_annotations_instead_of_drifting() {
    let e = env();
    let pool = e.pool(pool_options()).await;
    let claim = e.machine("n", "c-2x-amd64-linux").await;
    let patch = json!({"metadata": {"annotations": {
        annotations::NODE_POOL_HASH: "123456", annotations::NODE_POOL_HASH_VERSION: "v3"}}});
    e.claims().patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    e.conditions.reconcile_once("n-claim").await.unwrap();
    let claim = e.claim("n-claim").await.unwrap();
    assert!(condition_of(&claim, cond::DRIFTED).is_none(), "not drifted");
    let [(_, hash), (_, version)] = node_pool_hash_annotations(&pool);
    assert_eq!(claim.annotations().get(annotations::NODE_POOL_HASH), Some(&hash));
    assert_eq!(claim.annotations().get(annotations::NODE_POOL_HASH_VERSION), Some(&version));
}

#[tokio::test]
async fn provider_drift_sets_the_provider_reason() {
    let e = env();
    e.pool(pool_options()).await;
    let claim = e.machine("n", "c-2x-amd64-linux").await;
    e.cloud.set_drifted(claim.provider_id().unwrap(), Some(karpenter_cloudprovider::DriftReason::new("AMIDrift")));
    e.conditions.reconcile_once("n-claim").await.unwrap();
    assert_eq!(
        condition_of(&e.claim("n-claim").await.unwrap(), cond::DRIFTED),
        Some((ConditionStatus::True, "AMIDrift".into()))
    );
}

#[tokio::test]
async fn consolidatable_after_consolidate_after_and_reset_by_pod_events() {
    let e = env();
    e.pool(NodePoolOptions { consolidate_after: Some("30s".into()), ..pool_options() }).await;
    let claim = e.machine("n", "c-2x-amd64-linux").await;
    // Initialized now.
    let mut conditions = claim.conditions().to_vec();
    for c in conditions.iter_mut().filter(|c| c.type_ == cond::INITIALIZED) {
        c.last_transition_time = karpenter_api::time::rfc3339(e.clock.now());
    }
    crate::kube_util::patch_claim_conditions(&e.claims(), &claim, &conditions).await.unwrap();
    e.sync().await;

    assert_eq!(e.conditions.reconcile_once("n-claim").await.unwrap(), Some(Duration::from_secs(30)));
    assert!(condition_of(&e.claim("n-claim").await.unwrap(), cond::CONSOLIDATABLE).is_none());
    e.clock.step_secs(30);
    e.conditions.reconcile_once("n-claim").await.unwrap();
    assert_eq!(
        condition_of(&e.claim("n-claim").await.unwrap(), cond::CONSOLIDATABLE).map(|c| c.0),
        Some(ConditionStatus::True)
    );

    // A pod binds: lastPodEventTime is stamped and the clock restarts.
    e.pod_events.prime(std::iter::empty());
    let p = e.bound_pod("a", "n", PodOptions::default()).await;
    assert_eq!(e.pod_events.observe(&CompactPod::from(&p)).await.unwrap().as_deref(), Some("n-claim"));
    let stamped = e.claim("n-claim").await.unwrap();
    assert_eq!(
        stamped.status.as_ref().unwrap().last_pod_event_time.as_deref(),
        Some(karpenter_api::time::rfc3339(e.clock.now()).as_str())
    );
    assert_eq!(e.conditions.reconcile_once("n-claim").await.unwrap(), Some(Duration::from_secs(30)));
    assert!(condition_of(&e.claim("n-claim").await.unwrap(), cond::CONSOLIDATABLE).is_none());

    // Seeing the same pod again is no event; another pod within 10 s is deduplicated.
    assert_eq!(e.pod_events.observe(&CompactPod::from(&p)).await.unwrap(), None);
    e.clock.step_secs(5);
    let b = e.bound_pod("b", "n", PodOptions::default()).await;
    assert_eq!(e.pod_events.observe(&CompactPod::from(&b)).await.unwrap(), None, "within the 10 s dedupe");
    e.clock.step_secs(5);
    let c = e.bound_pod("c", "n", PodOptions::default()).await;
    assert_eq!(e.pod_events.observe(&CompactPod::from(&c)).await.unwrap().as_deref(), Some("n-claim"));
    // A pod listed at start-up is no event.
    e.clock.step_secs(20);
    let d = e.bound_pod("d", "n", PodOptions::default()).await;
    e.pod_events.prime([&CompactPod::from(&d)]);
    assert_eq!(e.pod_events.observe(&CompactPod::from(&d)).await.unwrap(), None);
}

#[tokio::test]
async fn never_consolidate_removes_the_condition() {
    let e = env();
    e.pool(NodePoolOptions { consolidate_after: Some("Never".into()), ..pool_options() }).await;
    e.machine("n", "c-2x-amd64-linux").await;
    e.conditions.reconcile_once("n-claim").await.unwrap();
    assert!(condition_of(&e.claim("n-claim").await.unwrap(), cond::CONSOLIDATABLE).is_none());
}

async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    for _ in 0..600 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(start_paused = true)]
async fn the_run_loops_delete_an_empty_node_and_stop_on_shutdown() {
    let e = env();
    e.pool(NodePoolOptions { consolidate_after: Some("30s".into()), ..pool_options() }).await;
    let claim = e.machine("empty", "c-2x-amd64-linux").await;
    // Initialized now, so consolidateAfter has to pass on the loop's clock.
    let mut conditions = claim.conditions().to_vec();
    for c in conditions.iter_mut().filter(|c| c.type_ == cond::INITIALIZED) {
        c.last_transition_time = karpenter_api::time::rfc3339(e.clock.now());
    }
    crate::kube_util::patch_claim_conditions(&e.claims(), &claim, &conditions).await.unwrap();
    e.sync().await;

    // Wall time on tokio's (paused) clock, so the run loops' timers and their notion of now move together.
    let clock: Arc<dyn Clock> = Arc::new(karpenter_testing::TokioClock::starting_at(e.clock.now()));
    let state = ClusterState::new(clock.clone(), Duration::from_secs(20));
    let shutdown = CancellationToken::new();
    let watchers = tokio::spawn({
        let (state, client, shutdown) = (state.clone(), e.client.clone(), shutdown.clone());
        async move { state.run_watchers(client, shutdown).await }
    });
    let ctx = e
        .ctx
        .clone()
        .with_state(state.clone())
        .with_recorder(Recorder::new(e.client.clone(), clock.clone(), "test"))
        .with_clock(clock);
    let disruption = Arc::new(Disruption::new(&ctx, DisruptionSettings::default()));
    let conditions = Arc::new(NodeClaimDisruption::new(&ctx));
    let pod_events = Arc::new(PodEvents::new(&ctx));
    let tasks = [
        tokio::spawn(disruption.clone().run(shutdown.clone())),
        tokio::spawn(conditions.run(shutdown.clone())),
        tokio::spawn(pod_events.run(shutdown.clone())),
    ];

    // The condition controller marks the claim Consolidatable once 30 s have passed.
    eventually("Consolidatable", || async {
        e.claim("empty-claim").await.is_some_and(|c| c.is_condition_true(cond::CONSOLIDATABLE))
    })
    .await;
    // The pod-events controller stamps a pod landing (it started after the listing).
    e.bound_pod("short-lived", "empty", PodOptions::default()).await;
    eventually("lastPodEventTime", || async {
        e.claim("empty-claim").await.is_some_and(|c| c.status.is_some_and(|s| s.last_pod_event_time.is_some()))
    })
    .await;
    e.pods().delete("short-lived", &Default::default()).await.unwrap();
    e.pods()
        .delete("short-lived", &kube::api::DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
        .await
        .ok();
    // Then the disruption loop validates the emptiness command and deletes the claim.
    eventually("the empty node's claim deleted", || async {
        e.claim("empty-claim").await.is_some_and(|c| c.metadata.deletion_timestamp.is_some())
    })
    .await;
    assert!(e.node_taints("empty").await.contains(&taints::DISRUPTED.to_owned()));

    shutdown.cancel();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t).await.expect("stops on shutdown").unwrap();
    }
    tokio::time::timeout(Duration::from_secs(30), watchers).await.expect("watchers stop").unwrap();
}

/// A pool annotated `karpenter-rs.io/disruption-topology-key: topology.kubernetes.io/zone` with a 100% budget and
/// drifted nodes in two zones: the first pass starts one zone's node; while it is in flight the other zone's node
/// waits, with a DisruptionBlocked event naming the zone and the skipped-candidate metric's code.
#[tokio::test]
async fn a_zonal_pool_waits_for_the_zone_being_disrupted() {
    use karpenter_api::labels::disruption_topology::ANNOTATION;
    let e = env();
    e.pool(NodePoolOptions {
        metadata_annotations: [(ANNOTATION.to_owned(), labels::ZONE.to_owned())].into(),
        budgets: vec![Budget { nodes: "100%".into(), ..Default::default() }],
        ..pool_options()
    })
    .await;
    for name in ["a", "b"] {
        e.machine(name, "c-2x-amd64-linux").await;
        e.bound_pod(
            &format!("web-{name}"),
            name,
            PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() },
        )
        .await;
    }
    // b is in test-zone-b.
    let zone_b = json!({"metadata": {"labels": {labels::ZONE: "test-zone-b"}}});
    e.nodes().patch("b", &PatchParams::default(), &Patch::Merge(&zone_b)).await.unwrap();
    e.claims().patch("b-claim", &PatchParams::default(), &Patch::Merge(&zone_b)).await.unwrap();
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}});
    let pool = Api::<NodePool>::all(e.client.clone()).patch(POOL, &PatchParams::default(), &Patch::Merge(&patch)).await;
    e.state.apply(pool.unwrap());
    e.sync().await;
    for claim in ["a-claim", "b-claim"] {
        e.conditions.reconcile_once(claim).await.unwrap();
    }
    e.sync().await;

    let report = e.disruption.step().await.unwrap();
    let [started] = report.started.as_slice() else { panic!("one drift command: {report:?}") };
    assert_eq!(started.node_names().collect::<Vec<_>>(), ["a"], "oldest first, ties by name");
    e.sync().await;
    let report = e.disruption.step().await.unwrap();
    assert!(report.started.is_empty(), "{report:?}");
    let pass = report.pass.expect("a pass");
    let v = pass.verdict("b").expect("b's verdict");
    assert_eq!(
        v.reason,
        Reason::TopologyDomainWaiting {
            node_pool: POOL.into(),
            key: labels::ZONE.into(),
            domain: Some("test-zone-a".into())
        }
    );
    assert_eq!(v.outcome, Outcome::Blocked);
    let events = e.events(reasons::DISRUPTION_BLOCKED).await;
    assert!(
        events.iter().any(|(obj, m)| obj == "b" && m.contains("waiting: topology.kubernetes.io/zone=test-zone-a")),
        "{events:?}"
    );
    // Counted in both passes: in the first, b's zone waited for the zone the pass's command took.
    let rendered = e.metrics.render();
    let sample = format!(
        "karpenter_voluntary_disruption_candidates_skipped_total{{nodepool=\"{POOL}\",reason=\"TopologyDomainWaiting\"}} 2"
    );
    assert!(rendered.contains(&sample), "{rendered}");
}

/// A pool's `karpenter-rs.io/min-nodes` floor keeps its empty node: no command, the verdict's `AtMinNodes` counted
/// in the skip metric; without the annotation the same node is an emptiness command.
#[tokio::test]
async fn a_pool_at_its_min_nodes_floor_keeps_its_empty_node() {
    let e = env();
    let floor = [(labels::min_nodes::ANNOTATION.to_owned(), "1".to_owned())].into();
    e.pool(NodePoolOptions { metadata_annotations: floor, ..pool_options() }).await;
    e.machine("empty", "c-2x-amd64-linux").await;
    let report = e.disruption.step().await.unwrap();
    assert!(report.awaiting_validation.is_none() && report.started.is_empty(), "{report:?}");
    let rendered = e.metrics.render();
    let sample = format!(
        "karpenter_voluntary_disruption_candidates_skipped_total{{nodepool=\"{POOL}\",reason=\"AtMinNodes\"}} 1"
    );
    assert!(rendered.contains(&sample), "{rendered}");

    let mut pool = e.state.get::<NodePool>(POOL).unwrap();
    pool.metadata.annotations = None;
    e.state.apply(pool);
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.awaiting_validation.map(|c| c.method), Some(Method::Emptiness));
}

/// A ReplicaSet or StatefulSet named `name` in the default namespace, as the owner reference its pods carry.
async fn owner_in_cluster(e: &Env, kind: &str, name: &str) -> OwnerReference {
    let object = json!({
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "serviceName": name,
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        }
    });
    let uid = match kind {
        "ReplicaSet" => {
            let mut rs: ReplicaSet = serde_json::from_value(object).unwrap();
            if let Some(spec) = rs.spec.as_mut() {
                spec.replicas = Some(1);
            }
            Api::<ReplicaSet>::namespaced(e.client.clone(), "default")
                .create(&PostParams::default(), &rs)
                .await
                .unwrap()
                .uid()
        }
        _ => {
            let set: StatefulSet = serde_json::from_value(object).unwrap();
            Api::<StatefulSet>::namespaced(e.client.clone(), "default")
                .create(&PostParams::default(), &set)
                .await
                .unwrap()
                .uid()
        }
    };
    OwnerReference {
        api_version: "apps/v1".into(),
        kind: kind.into(),
        name: name.into(),
        uid: uid.expect("a uid"),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// `pod.deletioncost` (gate `PodDeletionCostManagement`): the pods of the node consolidation would empty first
/// get the lowest deletion cost, a node that is not disruptable loses the annotation, only changes are written
/// and an unchanged cluster skips the cycle.
#[tokio::test]
async fn deletion_costs_follow_the_ranking() {
    use crate::deletion_cost::DeletionCost;
    let e = env();
    e.pool(NodePoolOptions {
        budgets: vec![Budget { nodes: "100%".into(), ..Default::default() }],
        consolidate_after: Some("0s".into()),
        ..pool_options()
    })
    .await;
    for n in ["one", "three", "sts"] {
        e.machine(n, "c-2x-amd64-linux").await;
    }
    // The owners exist (the API server, as the real garbage collector, deletes pods whose owner does not).
    let replica_set = owner_in_cluster(&e, "ReplicaSet", "web-1").await;
    let stateful_set = owner_in_cluster(&e, "StatefulSet", "db").await;
    let owned = |owner: &OwnerReference, name: &str, node: &str, cost: Option<&str>| {
        let mut p = pod(PodOptions {
            name: Some(name.into()),
            node_name: Some(node.into()),
            phase: Some("Running".into()),
            annotations: cost
                .map(|c| (annotations::POD_DELETION_COST.to_string(), c.to_string()))
                .into_iter()
                .collect(),
            ..PodOptions::default()
        });
        p.metadata.uid = None;
        p.metadata.owner_references = Some(vec![owner.clone()]);
        p
    };
    let mut pods = vec![owned(&replica_set, "one-a", "one", None)];
    for p in ["three-a", "three-b", "three-c"] {
        pods.push(owned(&replica_set, p, "three", None));
    }
    pods.push(owned(&stateful_set, "db-0", "sts", Some("7")));
    // Already holds its value: not written.
    pods.push(owned(&replica_set, "three-d", "three", Some("-1")));
    for p in pods {
        let created = create_with_status(&e.pods(), &p).await.unwrap();
        assert!(created.metadata.deletion_timestamp.is_none(), "its owner exists: not collected");
        e.state.apply(CompactPod::from(&created));
    }
    e.state.mark_all_synced();

    let controller = DeletionCost::new(&e.ctx, true);
    let report = controller.step().await.unwrap();
    assert_eq!((report.ranked, report.updated, report.skipped_unchanged, report.errors), (2, 5, 1, 0), "{report:?}");
    let cost = |pod: Pod| pod.annotations().get(annotations::POD_DELETION_COST).cloned();
    assert_eq!(cost(e.pods().get("one-a").await.unwrap()).as_deref(), Some("-2"), "fewest pods: lowest cost");
    for p in ["three-a", "three-b", "three-c", "three-d"] {
        assert_eq!(cost(e.pods().get(p).await.unwrap()).as_deref(), Some("-1"), "{p}");
    }
    assert_eq!(cost(e.pods().get("db-0").await.unwrap()), None, "a StatefulSet's node is not disruptable");

    let again = controller.step().await.unwrap();
    assert!(again.skipped, "nothing changed in the state: {again:?}");
    e.sync().await;
    let after = controller.step().await.unwrap();
    assert!(!after.skipped && after.updated == 0 && after.skipped_unchanged == 6, "{after:?}");
    let text = e.metrics.render();
    for line in [
        "karpenter_pod_deletion_cost_pods_updated_total{result=\"updated\"} 5",
        "karpenter_pod_deletion_cost_reconcile_skipped_total{} 1",
        "karpenter_pod_deletion_cost_nodes_ranked{} 2.0",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

/// Sets the Node's `Ready` condition to `status` since `minutes_ago`.
async fn set_ready(e: &Env, node: &str, status: &str, minutes_ago: i64) {
    let since = karpenter_api::time::rfc3339(e.clock.now() - chrono::Duration::minutes(minutes_ago));
    let patch = json!({"status": {"conditions": [
        {"type": "Ready", "status": status, "reason": "KubeletNotReady", "lastTransitionTime": since, "lastHeartbeatTime": since}
    ]}});
    let written = e.nodes().patch_status(node, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    e.state.apply(written);
}

fn repair_settings() -> DisruptionSettings {
    DisruptionSettings { node_repair: true, ..DisruptionSettings::default() }
}

/// Ready=False for 30 minutes is repaired, draining at most 5 minutes.
fn bounded_ready_policy(o: &mut FakeOptions) {
    let mut p = karpenter_api::repair::RepairPolicy::replace(
        "Ready",
        karpenter_api::ConditionStatus::False,
        Duration::from_secs(30 * 60),
    );
    p.termination_grace_period = Some(Duration::from_secs(300));
    o.repair_policies = vec![p];
}

#[tokio::test]
async fn a_broken_node_is_replaced_first_then_deleted_with_its_drain_bounded() {
    let e = env_with(bounded_ready_policy, repair_settings());
    e.pool(pool_options()).await;
    e.machine("sick", "m-8x-amd64-linux").await;
    e.bound_pod("web", "sick", PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() }).await;
    set_ready(&e, "sick", "False", 10).await;
    let report = e.disruption.step().await.unwrap();
    assert!(report.started.is_empty(), "inside the 30 min toleration: {report:?}");
    e.clock.step_secs(20 * 60);
    let report = e.disruption.step().await.unwrap();
    assert!(report.awaiting_validation.is_none(), "repair is not validated");
    let started = report.started.first().expect("a repair command");
    assert_eq!((started.method, started.decision), (Method::Repair, Decision::Replace), "{report:?}");
    let [replacement] = report.replacements.as_slice() else { panic!("{report:?}") };
    assert_eq!(e.metrics.nodeclaims_created("unhealthy", POOL, "false").get(), 1);
    let marked = e.claim("sick-claim").await.unwrap();
    assert_eq!(condition_of(&marked, cond::DISRUPTION_REASON).map(|c| c.1), Some("Unhealthy".to_owned()));
    assert!(e.claim("sick-claim").await.unwrap().metadata.deletion_timestamp.is_none(), "not before the replacement");
    e.bring_up(replacement).await;
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.deleted, ["sick-claim"]);
    let gone = e.claim("sick-claim").await.unwrap();
    let deadline = gone.annotations().get(annotations::NODE_CLAIM_TERMINATION_TIMESTAMP).cloned();
    assert_eq!(deadline, Some(karpenter_api::time::rfc3339(e.clock.now() + chrono::Duration::minutes(5))));
    assert_eq!(e.metrics.nodeclaims_disrupted("unhealthy", POOL, "on-demand", "", "graceful").get(), 1);
    assert_eq!(e.metrics.nodeclaims_unhealthy_disrupted("Ready", POOL, "on-demand", "").get(), 1);
}

#[tokio::test]
async fn without_the_gate_a_broken_node_stays() {
    let e = env_with(bounded_ready_policy, DisruptionSettings::default());
    e.pool(pool_options()).await;
    e.machine("sick", "m-8x-amd64-linux").await;
    e.bound_pod("web", "sick", PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() }).await;
    set_ready(&e, "sick", "False", 60).await;
    let report = e.disruption.step().await.unwrap();
    assert!(report.started.is_empty() && report.awaiting_validation.is_none(), "{report:?}");
}

#[tokio::test]
async fn a_reboot_drains_first_and_one_the_provider_cannot_do_becomes_a_replacement() {
    let e = env_with(
        |o| {
            reboot_policy(o);
            o.repair_policies[0].termination_grace_period = Some(Duration::ZERO);
            o.reboot = false;
        },
        repair_settings(),
    );
    e.pool(pool_options()).await;
    e.machine("sick", "m-8x-amd64-linux").await;
    e.bound_pod("web", "sick", PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() }).await;
    set_ready(&e, "sick", "False", 40).await;
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.started.first().map(|c| c.decision), Some(Decision::Reboot), "{report:?}");
    let claim = e.claim("sick-claim").await.unwrap();
    assert_eq!(condition_of(&claim, cond::REBOOTING).map(|c| c.0), Some(ConditionStatus::True));
    assert!(e.node_taints("sick").await.contains(&taints::DISRUPTED.to_owned()), "tainted for the drain");
    // The policy's bound is 0: the pod is deleted at once, and nothing else starts meanwhile.
    let report = e.disruption.step().await.unwrap();
    assert!(report.started.is_empty(), "{report:?}");
    assert!(e.pods().get("web").await.unwrap().metadata.deletion_timestamp.is_some(), "drained");
    e.sync().await;
    // Drained: the reboot is asked for; this provider cannot, so the marks go and a replacement follows.
    let report = e.disruption.step().await.unwrap();
    assert!(report.errors.iter().any(|e| e.contains("not implemented by this provider: Reboot")), "{report:?}");
    assert!(e.cloud.calls().iter().any(|c| c.method == karpenter_cloudprovider::Method::Reboot));
    let claim = e.claim("sick-claim").await.unwrap();
    assert!(!claim.annotations().contains_key(annotations::REBOOT_PRE_BOOT_ID), "marks taken back after the refusal");
    assert_eq!(condition_of(&claim, cond::REBOOTING).map(|c| c.0), Some(ConditionStatus::False));
    // Its pod is gone already, so the replacement is a plain delete: no new node needed.
    let started = report.started.first().expect("a replacement command");
    assert_eq!((started.method, started.decision), (Method::Repair, Decision::Delete), "{report:?}");
}

#[tokio::test]
async fn legacy_repair_deletes_forcefully_unless_too_much_of_the_pool_is_broken() {
    let e = env_with(bounded_ready_policy, DisruptionSettings::default());
    e.pool(pool_options()).await;
    for n in ["a", "b", "c"] {
        e.machine(n, "m-8x-amd64-linux").await;
    }
    let legacy = crate::repair::LegacyRepair::new(&e.ctx, crate::repair::policies(&e.ctx).unwrap());
    // Two of three broken: above 20 % (1 node), blocked with an event.
    set_ready(&e, "a", "False", 40).await;
    set_ready(&e, "b", "False", 40).await;
    assert!(legacy.sweep().await.unwrap().is_empty());
    assert!(!e.events(reasons::NODE_REPAIR_BLOCKED).await.is_empty());
    // One broken: deleted at once, drained forcefully (deadline now), though its policy says 5 minutes.
    set_ready(&e, "b", "True", 0).await;
    e.clock.step_secs(5 * 60);
    assert_eq!(legacy.sweep().await.unwrap(), ["a-claim"]);
    let gone = e.claim("a-claim").await.unwrap();
    let deadline = gone.annotations().get(annotations::NODE_CLAIM_TERMINATION_TIMESTAMP).cloned();
    assert_eq!(deadline, Some(karpenter_api::time::rfc3339(e.clock.now())));
    assert_eq!(e.metrics.nodeclaims_unhealthy_disrupted("Ready", POOL, "on-demand", "").get(), 1);
}

/// [`bounded_ready_policy`] with the reboot action.
fn reboot_policy(o: &mut FakeOptions) {
    bounded_ready_policy(o);
    o.repair_policies[0].action = karpenter_api::repair::RepairAction::Reboot;
}

/// Sets the Node's boot id.
async fn set_boot_id(e: &Env, node: &str, boot: &str) {
    let patch = json!({"status": {"nodeInfo": {"bootID": boot, "machineID": "", "systemUUID": "", "kernelVersion": "",
        "osImage": "", "containerRuntimeVersion": "", "kubeletVersion": "", "kubeProxyVersion": "",
        "operatingSystem": "linux", "architecture": "amd64"}}});
    let written = e.nodes().patch_status(node, &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    e.state.apply(written);
}

#[tokio::test]
async fn a_reboot_is_asked_once_and_its_marks_go_when_the_node_is_back_healthy() {
    let e = env_with(reboot_policy, repair_settings());
    e.pool(pool_options()).await;
    e.machine("sick", "m-8x-amd64-linux").await;
    set_boot_id(&e, "sick", "boot-1").await;
    set_ready(&e, "sick", "False", 40).await;
    let report = e.disruption.step().await.unwrap();
    assert_eq!(report.started.first().map(|c| c.decision), Some(Decision::Reboot), "{report:?}");
    // No pod to drain: the next step reboots, recording the boot id first.
    e.disruption.step().await.unwrap();
    let claim = e.claim("sick-claim").await.unwrap();
    assert_eq!(claim.annotations().get(annotations::REBOOT_PRE_BOOT_ID).map(String::as_str), Some("boot-1"));
    let reboots = || e.cloud.calls().iter().filter(|c| c.method == karpenter_cloudprovider::Method::Reboot).count();
    assert_eq!(reboots(), 1);
    // The same boot id and still broken: the reboot is under way, nothing is asked again (a restarted loop
    // neither: its memory is empty, the annotation says it all).
    e.sync().await;
    for _ in 0..3 {
        let report = e.disruption.step().await.unwrap();
        assert!(report.started.is_empty(), "{report:?}");
    }
    let restarted = Disruption::new(&e.ctx, repair_settings());
    assert!(restarted.step().await.unwrap().started.is_empty());
    assert_eq!(reboots(), 1, "never asked twice");
    assert!(e.node_taints("sick").await.contains(&taints::DISRUPTED.to_owned()), "tainted while it reboots");
    // Back with a new boot id and Ready: the marks and the taint go.
    set_boot_id(&e, "sick", "boot-2").await;
    set_ready(&e, "sick", "True", 0).await;
    e.sync().await;
    e.disruption.step().await.unwrap();
    let claim = e.claim("sick-claim").await.unwrap();
    assert!(!claim.annotations().contains_key(annotations::REBOOT_PRE_BOOT_ID));
    assert_eq!(condition_of(&claim, cond::REBOOTING).map(|c| c.0), Some(ConditionStatus::False));
    assert!(!e.node_taints("sick").await.contains(&taints::DISRUPTED.to_owned()), "untainted");
}

#[tokio::test]
async fn a_reboot_that_did_not_help_escalates_to_a_replacement() {
    let e = env_with(reboot_policy, repair_settings());
    e.pool(pool_options()).await;
    e.machine("sick", "m-8x-amd64-linux").await;
    e.bound_pod("web", "sick", PodOptions { requests: [("cpu", "500m")].into(), ..Default::default() }).await;
    set_boot_id(&e, "sick", "boot-1").await;
    set_ready(&e, "sick", "False", 40).await;
    e.disruption.step().await.unwrap();
    e.clock.step_secs(301);
    e.disruption.step().await.unwrap(); // the drain's bound (5 min) has passed: the pod is deleted
    e.sync().await;
    e.disruption.step().await.unwrap(); // rebooted
    assert!(e.claim("sick-claim").await.unwrap().annotations().contains_key(annotations::REBOOT_PRE_BOOT_ID));
    // Back with a new boot id, its Ready=False unchanged since before the reboot: the node gets the toleration
    // (at most 10 minutes) from the reboot request to report itself healthy, as a starting kubelet would.
    set_boot_id(&e, "sick", "boot-2").await;
    set_ready(&e, "sick", "False", 40).await;
    e.sync().await;
    let report = e.disruption.step().await.unwrap();
    assert!(report.started.is_empty(), "still settling after the reboot: {report:?}");
    assert!(e.claim("sick-claim").await.unwrap().annotations().contains_key(annotations::REBOOT_PRE_BOOT_ID));
    // Still broken once that has passed: replaced.
    e.clock.step_secs(300);
    e.sync().await;
    let report = e.disruption.step().await.unwrap();
    let started = report.started.first().unwrap_or_else(|| panic!("a replacement: {report:?}"));
    assert_eq!((started.method, started.decision == Decision::Reboot), (Method::Repair, false), "{report:?}");
}
