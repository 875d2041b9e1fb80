use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as KEvent, PodTemplate};
use karpenter_api::capacitybuffer::{CapacityBuffer, conditions};
use karpenter_api::condition::{Condition, ConditionStatus};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_testing::apiserver::{ApiServer, create_with_status};
use karpenter_testing::{FakeClock, NodePoolOptions, kwok_node_class_ref, node_pool};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use super::*;
use crate::provisioner::{Provisioner, ProvisionerOptions};
use crate::state::{ClusterState, Trigger};

struct Fixture {
    server: ApiServer,
    state: ClusterState,
    ctx: ControllerContext,
}

async fn fixture() -> Fixture {
    let server = ApiServer::new();
    let client = server.client();
    let clock = FakeClock::default();
    let state = ClusterState::new(Arc::new(clock.clone()), Duration::from_secs(20));
    state.mark_all_synced();
    let pool =
        node_pool(NodePoolOptions { node_class_ref: Some(kwok_node_class_ref("default")), ..Default::default() });
    state.apply(create_with_status(&Api::<NodePool>::all(client.clone()), &pool).await.unwrap());
    let ctx = ControllerContext::for_tests(client, Arc::new(karpenter_testing::kwok::fake()), Arc::new(clock))
        .with_state(state.clone());
    Fixture { server, state, ctx }
}

impl Fixture {
    fn buffers(&self) -> Api<CapacityBuffer> {
        Api::namespaced(self.server.client(), "default")
    }

    async fn add_template(&self, name: &str, cpu: &str) {
        let tpl: PodTemplate = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "template": {
                "metadata": {"labels": {"app": "headroom"}},
                "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]}
            }
        }))
        .unwrap();
        let api: Api<PodTemplate> = Api::namespaced(self.server.client(), "default");
        self.state.apply(api.create(&PostParams::default(), &tpl).await.unwrap());
    }

    async fn add_buffer(&self, name: &str, spec: serde_json::Value) {
        let b: CapacityBuffer = serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec,
        }))
        .unwrap();
        self.state.apply(self.buffers().create(&PostParams::default(), &b).await.unwrap());
    }

    async fn condition(&self, name: &str, type_: &str) -> Condition {
        let b = self.buffers().get(name).await.unwrap();
        b.conditions().iter().find(|c| c.type_ == type_).cloned().unwrap_or_else(|| panic!("no {type_} on {name}"))
    }
}

fn is(c: &Condition, status: ConditionStatus, reason: &str) -> bool {
    c.status == status && c.reason == reason
}

#[tokio::test]
async fn a_ready_buffer_launches_capacity_without_pending_pods_and_reports_where_it_went() {
    let f = fixture().await;
    let mut triggers = f.state.subscribe();
    f.add_template("chunk", "1").await;
    f.add_buffer("headroom", json!({"podTemplateRef": {"name": "chunk"}, "replicas": 2})).await;
    let controller = CapacityBufferController::new(&f.ctx);
    assert_eq!(controller.reconcile().await.unwrap().written, ["default/headroom"]);
    let status = f.buffers().get("headroom").await.unwrap().status.unwrap();
    assert_eq!((status.replicas, status.pod_template_ref.map(|r| r.name)), (Some(2), Some("chunk".to_owned())));
    assert!(is(&f.condition("headroom", conditions::READY_FOR_PROVISIONING).await, ConditionStatus::True, "Resolved"));
    // The written status asks for virtual pods: provisioning is triggered without any pending pod.
    assert_eq!(triggers.try_recv().ok(), Some(Trigger::Buffer("default/headroom".into())));

    let provisioner = Provisioner::new(&f.ctx, ProvisionerOptions::default());
    let report = provisioner.provision().await.unwrap();
    assert_eq!(report.created.len(), 1, "{report:?}");
    assert!(report.nominated.is_empty() && report.unschedulable.is_empty(), "{report:?}");
    let claims = Api::<NodeClaim>::all(f.server.client()).list(&ListParams::default()).await.unwrap().items;
    assert_eq!(claims.len(), 1);
    // Virtual pods are no claim's pods (nothing waits for them to bind) and get no events.
    assert!(f.state.claim_pods(claims[0].metadata.name.as_deref().unwrap()).is_empty());
    let events = Api::<KEvent>::all(f.server.client()).list(&ListParams::default()).await.unwrap().items;
    assert!(events.iter().all(|e| e.reason.as_deref() != Some("Nominated")), "{events:?}");
    assert_eq!(
        f.state.buffer_placement("default/headroom"),
        Some(crate::state::BufferPlacement { existing: 0, new: 2, unschedulable: 0 })
    );

    controller.reconcile().await.unwrap();
    let p = f.condition("headroom", conditions::PROVISIONING).await;
    assert!(is(&p, ConditionStatus::True, conditions::REASON_REQUIRES_NEW_CAPACITY), "{p:?}");
    // Nothing changed: nothing is written.
    let rv = f.buffers().get("headroom").await.unwrap().metadata.resource_version;
    assert!(controller.reconcile().await.unwrap().written.is_empty());
    assert_eq!(f.buffers().get("headroom").await.unwrap().metadata.resource_version, rv);
}

#[tokio::test]
async fn a_buffer_that_does_not_resolve_says_why_and_adds_no_pods() {
    let f = fixture().await;
    f.add_buffer("missing", json!({"podTemplateRef": {"name": "nope"}, "replicas": 2})).await;
    f.add_buffer(
        "empty",
        json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}, "replicas": 1}),
    )
    .await;
    f.add_buffer(
        "theirs",
        json!({"provisioningStrategy": "example.com/other", "podTemplateRef": {"name": "nope"}, "replicas": 1}),
    )
    .await;
    let controller = CapacityBufferController::new(&f.ctx);
    let written = controller.reconcile().await.unwrap().written;
    assert_eq!(written, ["default/empty", "default/missing"], "another strategy's buffer is left alone");
    let ready = f.condition("missing", conditions::READY_FOR_PROVISIONING).await;
    assert!(is(&ready, ConditionStatus::False, conditions::REASON_POD_TEMPLATE_NOT_FOUND), "{ready:?}");
    assert!(ready.message.contains("default/nope"), "{}", ready.message);
    let p = f.condition("missing", conditions::PROVISIONING).await;
    assert!(is(&p, ConditionStatus::False, conditions::REASON_NOT_READY_FOR_PROVISIONING), "{p:?}");
    let ready = f.condition("empty", conditions::READY_FOR_PROVISIONING).await;
    assert!(is(&ready, ConditionStatus::False, conditions::REASON_SCALABLE_REF_NOT_FOUND), "{ready:?}");
    assert!(f.buffers().get("theirs").await.unwrap().status.is_none());

    // A Warning event on the buffer names the problem.
    let mut found = false;
    for _ in 0..100 {
        let events = Api::<KEvent>::all(f.server.client()).list(&ListParams::default()).await.unwrap().items;
        found = events.iter().any(|e| {
            e.reason.as_deref() == Some(conditions::REASON_POD_TEMPLATE_NOT_FOUND)
                && e.type_.as_deref() == Some("Warning")
                && e.involved_object.name.as_deref() == Some("missing")
        });
        if found {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(found, "no PodTemplateNotFound event");
    let mut cluster = f.state.snapshot().unwrap().cluster;
    assert!(f.state.add_buffer_pods(&mut cluster).is_empty());

    // The template appears: the buffer becomes ready, with the template's count, and a zero-replica buffer is
    // empty.
    f.add_template("nope", "1").await;
    f.add_buffer("zero", json!({"podTemplateRef": {"name": "nope"}, "replicas": 0})).await;
    controller.reconcile().await.unwrap();
    assert!(is(&f.condition("missing", conditions::READY_FOR_PROVISIONING).await, ConditionStatus::True, "Resolved"));
    let p = f.condition("zero", conditions::PROVISIONING).await;
    assert!(is(&p, ConditionStatus::False, conditions::REASON_BUFFER_EMPTY), "{p:?}");
    let mut cluster = f.state.snapshot().unwrap().cluster;
    assert_eq!(f.state.add_buffer_pods(&mut cluster).len(), 2);
}

#[test]
fn provisioning_condition_follows_the_placement() {
    let p = |existing, new, unschedulable| Some(BufferPlacement { existing, new, unschedulable });
    let reason = |ready, replicas, placement| provisioning_condition(ready, replicas, placement).1;
    assert_eq!(reason(false, 2, p(2, 0, 0)), conditions::REASON_NOT_READY_FOR_PROVISIONING);
    assert_eq!(reason(true, 0, None), conditions::REASON_BUFFER_EMPTY);
    assert_eq!(reason(true, 2, p(2, 0, 0)), conditions::REASON_FITS_EXISTING_CAPACITY);
    assert_eq!(reason(true, 2, p(1, 1, 0)), conditions::REASON_REQUIRES_NEW_CAPACITY);
    assert_eq!(provisioning_condition(true, 2, p(1, 0, 1)).0, ConditionStatus::False);
    assert_eq!(provisioning_condition(true, 2, None).0, ConditionStatus::Unknown);
}

#[test]
fn with_the_gate_the_state_waits_for_the_buffer_kinds() {
    use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
    use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
    use karpenter_api::CompactPod;
    let state = ClusterState::new(Arc::new(FakeClock::default()), Duration::from_secs(20));
    state.mark_synced::<Node>();
    state.mark_synced::<NodeClaim>();
    state.mark_synced::<CompactPod>();
    state.mark_synced::<NodePool>();
    state.mark_synced::<DaemonSet>();
    state.mark_synced::<PodDisruptionBudget>();
    state.mark_synced::<Namespace>();
    state.mark_synced::<PersistentVolumeClaim>();
    state.mark_synced::<PersistentVolume>();
    state.mark_synced::<StorageClass>();
    state.mark_synced::<CSINode>();
    // Without the gate the buffer kinds are not waited for.
    assert_eq!(state.unlisted_reason(), None);
    state.require_buffer_kinds();
    assert_eq!(state.unlisted_reason().as_deref(), Some("CapacityBuffers not listed yet"));
    // A listing of buffers (nothing in it) ends.
    state.handle_event::<CapacityBuffer>(kube::runtime::watcher::Event::Init);
    state.handle_event::<CapacityBuffer>(kube::runtime::watcher::Event::InitDone);
    assert_eq!(state.unlisted_reason().as_deref(), Some("PodTemplates not listed yet"));
    state.mark_synced::<PodTemplate>();
    state.mark_synced::<Deployment>();
    state.mark_synced::<StatefulSet>();
    state.mark_synced::<ReplicaSet>();
    assert_eq!(state.unlisted_reason().as_deref(), Some("ResourceQuotas not listed yet"));
    state.mark_synced::<k8s_openapi::api::core::v1::ResourceQuota>();
    assert_eq!(state.unlisted_reason(), None);
}

#[tokio::test]
async fn resource_quotas_cap_buffers_in_order_and_say_which() {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let f = fixture().await;
    f.add_template("chunk", "1").await;
    // 3 CPUs left of the quota (its status as the API server's quota controller fills it).
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "team-cpu", "namespace": "default"},
        "spec": {"hard": {"requests.cpu": "4"}},
        "status": {"hard": {"requests.cpu": "4"}, "used": {"requests.cpu": "1"}},
    }))
    .unwrap();
    f.state.apply(quota);
    f.add_buffer("a", json!({"podTemplateRef": {"name": "chunk"}, "replicas": 2})).await;
    f.add_buffer("b", json!({"podTemplateRef": {"name": "chunk"}, "replicas": 3})).await;
    let controller = CapacityBufferController::new(&f.ctx);
    controller.reconcile().await.unwrap();
    let replicas = async |name: &str| f.buffers().get(name).await.unwrap().status.unwrap().replicas;
    assert_eq!(replicas("a").await, Some(2));
    assert_eq!(replicas("b").await, Some(1), "b gets the one CPU a left");
    let a = f.condition("a", conditions::LIMITED_BY_QUOTAS).await;
    assert!(is(&a, ConditionStatus::False, conditions::REASON_QUOTAS_ALLOCATED), "{a:?}");
    let b = f.condition("b", conditions::LIMITED_BY_QUOTAS).await;
    assert!(is(&b, ConditionStatus::True, conditions::REASON_QUOTAS_ALLOCATED), "{b:?}");
    assert_eq!(b.message, "replicas limited from 3 to 1 by ResourceQuotas team-cpu");

    // The provisioner plans only the allowed virtual pods: 3 CPUs' worth.
    let provisioner = Provisioner::new(&f.ctx, ProvisionerOptions::default());
    provisioner.provision().await.unwrap();
    let placed = |k: &str| f.state.buffer_placement(k).map(|p| p.existing + p.new + p.unschedulable);
    assert_eq!((placed("default/a"), placed("default/b")), (Some(2), Some(1)));
}

#[tokio::test]
async fn a_settled_buffer_is_not_retriggered_until_the_cluster_changes() {
    let f = fixture().await;
    f.add_template("chunk", "1").await;
    f.add_buffer("headroom", json!({"podTemplateRef": {"name": "chunk"}, "replicas": 2})).await;
    CapacityBufferController::new(&f.ctx).reconcile().await.unwrap();
    let buffer_triggers = |state: &ClusterState| {
        let mut rx = state.subscribe();
        state.retrigger_provisionable();
        std::iter::from_fn(|| rx.try_recv().ok()).filter(|t| matches!(t, Trigger::Buffer(_))).count()
    };
    // No pass yet: the buffer asks.
    assert_eq!(buffer_triggers(&f.state), 1);
    let placed = |existing, new| {
        [("default/headroom".to_owned(), crate::state::BufferPlacement { existing, new, unschedulable: 0 })].into()
    };
    // Its pods needed new NodeClaims: it keeps asking until a pass finds room for all of them.
    f.state.record_buffer_placements(placed(0, 2), f.state.consolidation_state());
    assert_eq!(buffer_triggers(&f.state), 1);
    // All on existing capacity, and nothing changed since that pass's snapshot: quiet.
    f.state.record_buffer_placements(placed(2, 0), f.state.consolidation_state());
    assert_eq!(buffer_triggers(&f.state), 0);
    // Something changed (say a pod took the room): it asks again.
    f.add_template("other", "1").await;
    assert_eq!(buffer_triggers(&f.state), 1);
}
