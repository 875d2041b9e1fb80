//! Tests of the NodePool controllers against the in-process API server.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use karpenter_api::condition::{Condition, ConditionStatus};
use karpenter_api::hash::{NODE_POOL_HASH_VERSION, node_pool_hash};
use karpenter_api::labels::{self, annotations};
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_api::{NodeClaim, NodePool, TaintEffect};
use karpenter_cloudprovider::time::tokio_now;
use karpenter_kwok::api::KWOKNodeClass;
use karpenter_kwok::testing::{KWOKNodeClassOptions, kwok_node_class};
use karpenter_testing::apiserver::{ApiServer, ApiService, create_with_status};
use karpenter_testing::{
    FakeClock, NodeClaimOptions, NodeOptions, NodePoolOptions, PodOptions, condition, karpenter_taint,
    kwok_node_class_ref, node, node_claim, node_pool, pod,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::context::ControllerContext;
use crate::metrics::Metrics;
use crate::state::ClusterState;

struct Fx {
    server: ApiServer,
    client: Client,
    clock: FakeClock,
    state: ClusterState,
    metrics: Arc<Metrics>,
    /// What the controllers are built from: `client`, `state` (marked listed), `metrics`, `clock`, the kwok fake.
    ctx: ControllerContext,
}

fn fx() -> Fx {
    let clock = FakeClock::default();
    let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
    let client = server.client();
    let ctx = ControllerContext::for_tests(
        client.clone(),
        Arc::new(karpenter_testing::kwok::fake()),
        Arc::new(clock.clone()),
    );
    Fx { server, client, clock, state: ctx.state().clone(), metrics: ctx.metrics().clone(), ctx }
}

impl Fx {
    /// A cluster state fed by watches of the API server (what the run loops follow), until `shutdown`.
    fn watched_state(&self, shutdown: &CancellationToken) -> ClusterState {
        let state = ClusterState::new(Arc::new(self.clock.clone()), Duration::from_secs(20));
        tokio::spawn({
            let (state, client, shutdown) = (state.clone(), self.client.clone(), shutdown.clone());
            async move { state.run_watchers(client, shutdown).await }
        });
        state
    }

    fn pools(&self) -> Api<NodePool> {
        Api::all(self.client.clone())
    }
    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }
    fn classes(&self) -> Api<KWOKNodeClass> {
        Api::all(self.client.clone())
    }
    fn readiness(&self) -> Readiness {
        Readiness::new(&self.ctx, resolver())
    }
    fn validation(&self) -> Validation {
        Validation::new(&self.ctx)
    }

    /// Creates a pool without status (what a user applies).
    async fn pool(&self, o: NodePoolOptions) -> NodePool {
        let mut p = node_pool(NodePoolOptions { node_class_ref: Some(kwok_node_class_ref("default")), ..o });
        p.status = None;
        p.metadata.uid = None;
        self.pools().create(&PostParams::default(), &p).await.unwrap()
    }

    /// Creates a pool with the builder's `Ready=True` status.
    async fn ready_pool(&self, o: NodePoolOptions) -> NodePool {
        let mut p = node_pool(NodePoolOptions { node_class_ref: Some(kwok_node_class_ref("default")), ..o });
        p.metadata.uid = None;
        let created = create_with_status(&self.pools(), &p).await.unwrap();
        self.state.apply(created.clone());
        created
    }

    async fn claim(&self, o: NodeClaimOptions) -> NodeClaim {
        let mut c = node_claim(o);
        c.metadata.uid = None;
        c.metadata.owner_references = None;
        let created = create_with_status(&self.claims(), &c).await.unwrap();
        self.state.apply(created.clone());
        created
    }

    async fn get_pool(&self, name: &str) -> NodePool {
        self.pools().get(name).await.unwrap()
    }
}

/// The kwok provider's node-class kind, as the binary registers it.
fn kwok() -> NodeClassRegistration {
    NodeClassRegistration::of::<KWOKNodeClass>().ready_on_sight()
}

/// A resolver of the kwok kind only.
fn resolver() -> NodeClassResolver {
    NodeClassResolver::new([&kwok()])
}

fn cond_of<'a>(pool: &'a NodePool, type_: &str) -> Option<&'a Condition> {
    pool.conditions().iter().find(|c| c.type_ == type_)
}

fn status_reason(pool: &NodePool, type_: &str) -> Option<(ConditionStatus, String)> {
    cond_of(pool, type_).map(|c| (c.status, c.reason.clone()))
}

#[tokio::test]
async fn readiness_follows_the_node_class_and_validation() {
    let f = fx();
    f.pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    let readiness = f.readiness();

    // No node class: not ready, with a reason.
    assert_eq!(readiness.reconcile("default").await.unwrap(), None);
    let p = f.get_pool("default").await;
    assert_eq!(status_reason(&p, cond::NODE_CLASS_READY), Some((ConditionStatus::False, "NodeClassNotFound".into())));
    let ready = cond_of(&p, cond::READY).unwrap();
    assert_eq!((ready.status, ready.reason.as_str()), (ConditionStatus::False, UNHEALTHY_DEPENDENTS));
    assert!(ready.message.contains("NodeClassReady=False") && ready.message.contains("ValidationSucceeded=Unknown"));
    assert!(!p.is_ready());

    // A class without status: readiness unknown.
    let mut class = kwok_node_class(KWOKNodeClassOptions::default());
    class.status = None;
    class.metadata.uid = None;
    f.classes().create(&PostParams::default(), &class).await.unwrap();
    readiness.reconcile("default").await.unwrap();
    let p = f.get_pool("default").await;
    assert_eq!(
        status_reason(&p, cond::NODE_CLASS_READY),
        Some((ConditionStatus::False, readiness::NODE_CLASS_READINESS_UNKNOWN.into()))
    );

    // The kwok status controller marks it ready; the pool follows; validation completes Ready.
    let kwok = ReadyOnSight::new(&f.ctx, &kwok());
    assert_eq!(kwok.name(), "kwoknodeclass.status", "upstream's name");
    kwok.reconcile("default").await.unwrap();
    let stored = f.classes().get("default").await.unwrap();
    assert!(stored.is_ready());
    let rv = stored.resource_version();
    kwok.reconcile("default").await.unwrap();
    assert_eq!(f.classes().get("default").await.unwrap().resource_version(), rv, "no write when already ready");
    readiness.reconcile("default").await.unwrap();
    let p = f.get_pool("default").await;
    assert_eq!(status_reason(&p, cond::NODE_CLASS_READY), Some((ConditionStatus::True, "NodeClassReady".into())));
    assert_eq!(cond_of(&p, cond::READY).unwrap().status, ConditionStatus::Unknown, "validation has not run");
    f.validation().reconcile("default").await.unwrap();
    let p = f.get_pool("default").await;
    assert!(p.is_ready());
    assert_eq!(cond_of(&p, cond::READY).unwrap().observed_generation, p.metadata.generation);
    // A pass that changes nothing writes nothing.
    let rv = p.resource_version();
    readiness.reconcile("default").await.unwrap();
    f.validation().reconcile("default").await.unwrap();
    assert_eq!(f.get_pool("default").await.resource_version(), rv);

    // The class's own False readiness is passed through.
    f.classes()
        .patch_status(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [condition("Ready", false, Some("SubnetsNotFound"))]}})),
        )
        .await
        .unwrap();
    readiness.reconcile("default").await.unwrap();
    let p = f.get_pool("default").await;
    assert_eq!(status_reason(&p, cond::NODE_CLASS_READY), Some((ConditionStatus::False, "SubnetsNotFound".into())));
    assert!(!p.is_ready());

    // A terminating class.
    f.classes()
        .patch("default", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["test/keep"]}})))
        .await
        .unwrap();
    f.classes().delete("default", &DeleteParams::default()).await.unwrap();
    readiness.reconcile("default").await.unwrap();
    let p = f.get_pool("default").await;
    assert_eq!(
        status_reason(&p, cond::NODE_CLASS_READY),
        Some((ConditionStatus::False, "NodeClassTerminating".into()))
    );
    // A missing pool is nothing to do.
    assert_eq!(readiness.reconcile("missing").await.unwrap(), None);
}

#[tokio::test]
async fn pools_of_unsupported_node_class_kinds_are_left_alone() {
    let f = fx();
    let mut p = node_pool(NodePoolOptions { name: Some("aws".into()), ..Default::default() });
    p.status = None;
    p.metadata.uid = None;
    f.pools().create(&PostParams::default(), &p).await.unwrap();
    f.readiness().reconcile("aws").await.unwrap();
    assert!(f.get_pool("aws").await.conditions().is_empty(), "EC2NodeClass is not the fake provider's kind");
}

#[tokio::test]
async fn validation_failures_keep_the_pool_not_ready() {
    let f = fx();
    let taint = karpenter_taint("dedicated", Some("x"), TaintEffect::NoSchedule);
    f.pool(NodePoolOptions {
        name: Some("dup".into()),
        taints: vec![taint.clone()],
        startup_taints: vec![taint],
        ..Default::default()
    })
    .await;
    f.classes().create(&PostParams::default(), &kwok_node_class(KWOKNodeClassOptions::default())).await.unwrap();
    ReadyOnSight::new(&f.ctx, &kwok()).reconcile("default").await.unwrap();
    f.readiness().reconcile("dup").await.unwrap();
    f.validation().reconcile("dup").await.unwrap();
    let p = f.get_pool("dup").await;
    let v = cond_of(&p, cond::VALIDATION_SUCCEEDED).unwrap();
    assert_eq!((v.status, v.reason.as_str()), (ConditionStatus::False, validation::VALIDATION_FAILED));
    assert!(v.message.contains("dedicated"), "{}", v.message);
    assert_eq!(status_reason(&p, cond::NODE_CLASS_READY).unwrap().0, ConditionStatus::True);
    assert_eq!(cond_of(&p, cond::READY).unwrap().status, ConditionStatus::False);
}

/// A client whose first PATCH to a NodePool's status is preceded by another writer's change of that NodePool,
/// so the guarded status patch meets a genuine 409 Conflict.
#[derive(Clone)]
struct ConcurrentWriter {
    inner: ApiService,
    conflicts_left: Arc<AtomicUsize>,
}

impl tower::Service<http::Request<kube::client::Body>> for ConcurrentWriter {
    type Response = <ApiService as tower::Service<http::Request<kube::client::Body>>>::Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let mut inner = self.inner.clone();
        let path = req.uri().path().to_owned();
        let hit = req.method() == http::Method::PATCH
            && path.starts_with("/apis/karpenter.sh/v1/nodepools/")
            && path.ends_with("/status")
            && self.conflicts_left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        Box::pin(async move {
            if hit {
                let main = path.trim_end_matches("/status").to_owned();
                let bump = http::Request::patch(main)
                    .header("content-type", "application/merge-patch+json")
                    .body(kube::client::Body::from(br#"{"metadata":{"labels":{"bumped":"true"}}}"#.to_vec()))
                    .unwrap();
                let _ = tower::Service::call(&mut inner, bump).await;
            }
            tower::Service::call(&mut inner, req).await
        })
    }
}

#[tokio::test]
async fn a_conflicting_status_write_fails_the_step_and_the_run_loop_retries() {
    let f = fx();
    f.pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    let conflicts_left = Arc::new(AtomicUsize::new(1));
    let racing =
        Client::new(ConcurrentWriter { inner: f.server.service(), conflicts_left: conflicts_left.clone() }, "default");
    let readiness = Readiness::new(&f.ctx.clone().with_client(racing.clone()), resolver());

    // The single step reports the conflict (nothing written)...
    let err = readiness.reconcile("default").await.unwrap_err();
    assert!(err.is_conflict(), "{err}");
    let p = f.get_pool("default").await;
    assert!(p.conditions().is_empty());
    assert_eq!(p.labels().get("bumped").map(String::as_str), Some("true"), "the other writer won");

    // ...and the run loop retries it on fresh data.
    conflicts_left.store(1, Ordering::SeqCst);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(Arc::new(readiness).run(shutdown.clone()));
    let deadline = tokio_now() + Duration::from_secs(10);
    loop {
        let p = f.get_pool("default").await;
        if cond_of(&p, cond::NODE_CLASS_READY).is_some() {
            assert_eq!(status_reason(&p, cond::NODE_CLASS_READY).unwrap().1, "NodeClassNotFound");
            break;
        }
        assert!(tokio_now() < deadline, "the run loop never wrote the condition");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(conflicts_left.load(Ordering::SeqCst), 0, "the run loop met the conflict too");
    shutdown.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn counter_sums_capacity_writes_status_and_metrics() {
    let f = fx();
    f.ready_pool(NodePoolOptions {
        name: Some("default".into()),
        limits: [("cpu", "100"), ("nodes", "10")].into(),
        ..Default::default()
    })
    .await;
    // Launched but not registered: the claim's estimate counts.
    f.claim(NodeClaimOptions {
        name: Some("a".into()),
        node_pool: Some("default".into()),
        provider_id: Some("kwok://a".into()),
        capacity: [("cpu", "4"), ("memory", "16Gi")].into(),
        launched: true,
        ..Default::default()
    })
    .await;
    // Registered: the node's capacity counts (it differs from the estimate).
    f.claim(NodeClaimOptions {
        name: Some("b".into()),
        node_pool: Some("default".into()),
        provider_id: Some("kwok://b".into()),
        capacity: [("cpu", "2"), ("memory", "8Gi")].into(),
        launched: true,
        ..Default::default()
    })
    .await;
    let n = node(NodeOptions {
        name: Some("b".into()),
        provider_id: Some("kwok://b".into()),
        labels: [(labels::NODE_POOL.to_owned(), "default".to_owned())].into(),
        capacity: [("cpu", "2"), ("memory", "7Gi"), ("nvidia.com/gpu", "1")].into(),
        ..Default::default()
    });
    f.state.apply(n.clone());
    // Another pool's claim does not count.
    f.claim(NodeClaimOptions {
        name: Some("other".into()),
        node_pool: Some("other".into()),
        capacity: [("cpu", "64")].into(),
        ..Default::default()
    })
    .await;

    let limits = karpenter_api::settings::parse_cluster_limits("cpu=100,nodes=5").unwrap();
    let counter = Counter::new(&f.ctx).with_cluster_limits(limits);
    assert_eq!(counter.reconcile("default").await.unwrap(), Some(counter::RESYNC));
    let p = f.get_pool("default").await;
    let status = p.status.clone().unwrap();
    let res: BTreeMap<&str, &str> = status.resources.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(res, BTreeMap::from([("cpu", "6"), ("memory", "23Gi"), ("nodes", "2"), ("nvidia.com/gpu", "1")]));
    assert_eq!(status.nodes, Some(2));
    assert!(p.is_ready(), "conditions are kept");
    let text = f.metrics.render();
    assert!(text.contains("karpenter_nodepools_usage{nodepool=\"default\",resource_type=\"cpu\"} 6.0"), "{text}");
    assert!(text.contains("karpenter_nodepools_usage{nodepool=\"default\",resource_type=\"nodes\"} 2.0"));
    assert!(text.contains("karpenter_nodepools_limit{nodepool=\"default\",resource_type=\"cpu\"} 100.0"));
    // The cluster's usage counts every pool (the other pool's claim too); its limits are the setting.
    assert!(text.contains("karpenter_cluster_usage{resource_type=\"cpu\"} 70.0"), "{text}");
    assert!(text.contains("karpenter_cluster_usage{resource_type=\"nodes\"} 3.0"), "{text}");
    assert!(text.contains("karpenter_cluster_usage{resource_type=\"nvidia.com/gpu\"} 1.0"), "{text}");
    assert!(text.contains("karpenter_cluster_limit{resource_type=\"cpu\"} 100.0"), "{text}");
    assert!(text.contains("karpenter_cluster_limit{resource_type=\"nodes\"} 5.0"), "{text}");
    // The scale subresource reads status.nodes.
    let scale = f.pools().get_scale("default").await.unwrap();
    assert_eq!(scale.status.unwrap().replicas, 2);

    // The GPU node goes away: its resource leaves the status and the metrics.
    f.state.remove(&n);
    f.state.remove(&f.claims().get("b").await.unwrap());
    counter.reconcile("default").await.unwrap();
    let status = f.get_pool("default").await.status.unwrap();
    assert!(!status.resources.contains_key("nvidia.com/gpu"), "{:?}", status.resources);
    assert_eq!(status.nodes, Some(1));
    assert!(!f.metrics.render().contains("resource_type=\"nvidia.com/gpu\""), "pool and cluster series go");
    assert!(f.metrics.render().contains("karpenter_cluster_usage{resource_type=\"cpu\"} 68.0"));

    // The pool is deleted: its series go.
    f.pools().delete("default", &DeleteParams::default()).await.unwrap();
    counter.reconcile("default").await.unwrap();
    assert!(!f.metrics.render().contains("nodepool=\"default\""));

    // The state not listed yet: wait.
    let unsynced = ClusterState::new(Arc::new(f.clock.clone()), Duration::from_secs(20));
    f.ready_pool(NodePoolOptions { name: Some("later".into()), ..Default::default() }).await;
    let waiting = Counter::new(&f.ctx.clone().with_state(unsynced));
    assert_eq!(waiting.reconcile("later").await.unwrap(), Some(counter::WAIT_FOR_STATE));
}

#[tokio::test]
async fn hash_annotations_are_kept_and_version_changes_rewrite_claims() {
    let f = fx();
    let pool = f.pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    let hash = node_pool_hash(&pool);
    let claim_with = |name: &str, h: &str, v: &str, drifted: bool| NodeClaimOptions {
        name: Some(name.into()),
        node_pool: Some("default".into()),
        annotations: [
            (annotations::NODE_POOL_HASH.to_owned(), h.to_owned()),
            (annotations::NODE_POOL_HASH_VERSION.to_owned(), v.to_owned()),
        ]
        .into(),
        conditions: if drifted { vec![condition(cond::DRIFTED, true, Some("NodePoolDrifted"))] } else { vec![] },
        ..Default::default()
    };
    f.claim(claim_with("upstream", "123", "v3", false)).await;
    f.claim(claim_with("upstream-drifted", "456", "v3", true)).await;
    f.claim(claim_with("current-drifted", "789", NODE_POOL_HASH_VERSION, false)).await;

    let hc = HashController::new(&f.ctx);
    hc.reconcile("default").await.unwrap();
    let p = f.get_pool("default").await;
    assert_eq!(p.annotations().get(annotations::NODE_POOL_HASH), Some(&hash));
    assert_eq!(
        p.annotations().get(annotations::NODE_POOL_HASH_VERSION).map(String::as_str),
        Some(NODE_POOL_HASH_VERSION)
    );
    let ann = |c: &NodeClaim, k: &str| c.annotations().get(k).cloned().unwrap_or_default();
    let up = f.claims().get("upstream").await.unwrap();
    assert_eq!(
        (ann(&up, annotations::NODE_POOL_HASH), ann(&up, annotations::NODE_POOL_HASH_VERSION)),
        (hash.clone(), NODE_POOL_HASH_VERSION.to_owned())
    );
    let upd = f.claims().get("upstream-drifted").await.unwrap();
    assert_eq!(ann(&upd, annotations::NODE_POOL_HASH), "456", "a drifted claim keeps its hash: it stays drifted");
    assert_eq!(ann(&upd, annotations::NODE_POOL_HASH_VERSION), NODE_POOL_HASH_VERSION);
    let cur = f.claims().get("current-drifted").await.unwrap();
    assert_eq!(ann(&cur, annotations::NODE_POOL_HASH), "789", "same version: real drift, untouched");

    // A template change moves the pool's hash; claims of the current version are not touched.
    f.pools()
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}})),
        )
        .await
        .unwrap();
    let rv = f.claims().get("upstream").await.unwrap().resource_version();
    hc.reconcile("default").await.unwrap();
    let p = f.get_pool("default").await;
    let new_hash = p.annotations().get(annotations::NODE_POOL_HASH).cloned().unwrap();
    assert_ne!(new_hash, hash);
    assert_eq!(new_hash, node_pool_hash(&p));
    assert_eq!(f.claims().get("upstream").await.unwrap().resource_version(), rv);
    assert_eq!(
        karpenter_api::hash::node_pool_static_drift(&p, &f.claims().get("upstream").await.unwrap()),
        karpenter_api::hash::StaticDrift::Drifted
    );
    // Requirements are not hashed.
    f.pools()
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}}})),
        )
        .await
        .unwrap();
    let rv = f.get_pool("default").await.resource_version();
    hc.reconcile("default").await.unwrap();
    assert_eq!(f.get_pool("default").await.resource_version(), rv);
}

async fn names(f: &Fx, pool: &str) -> Vec<String> {
    let selector = format!("{}={pool}", labels::NODE_POOL);
    let mut v: Vec<String> = f
        .claims()
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| c.name_any())
        .collect();
    v.sort();
    v
}

/// `CLUSTER_LIMITS=nodes=N` caps static pools too: with one NodeClaim elsewhere and `nodes=3`, a static pool of
/// 4 replicas gets 2.
#[tokio::test]
async fn static_pools_stay_within_the_cluster_nodes_limit() {
    let f = fx();
    f.ready_pool(NodePoolOptions { name: Some("fixed".into()), replicas: Some(4), ..Default::default() }).await;
    let mut other = node_claim(NodeClaimOptions { name: Some("elsewhere".into()), ..Default::default() });
    other.metadata.uid = None;
    f.claims().create(&PostParams::default(), &other).await.unwrap();
    let limits: karpenter_requirements::ResourceList = [("nodes", "3".parse().unwrap())].into_iter().collect();
    let p = StaticProvisioning::new(&f.ctx, true).with_cluster_limits(&limits);
    match p.scale_up("fixed").await.unwrap() {
        static_capacity::ScaleUp::Created(c) => assert_eq!(c.len(), 2),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.reconcile("fixed").await.unwrap(), Some(static_capacity::LIMIT_RETRY));
    assert_eq!(names(&f, "fixed").await.len(), 2);
}

#[tokio::test]
async fn static_pools_scale_to_replicas_within_limits() {
    let f = fx();
    let provisioning = |enabled| StaticProvisioning::new(&f.ctx, enabled);
    f.ready_pool(NodePoolOptions {
        name: Some("fixed".into()),
        replicas: Some(3),
        limits: [("nodes", "2")].into(),
        labels: [("team".to_owned(), "a".to_owned())].into(),
        ..Default::default()
    })
    .await;
    // Gate off: nothing.
    assert_eq!(provisioning(false).scale_up("fixed").await.unwrap(), static_capacity::ScaleUp::Skipped);
    assert!(names(&f, "fixed").await.is_empty());

    // Gate on: limits.nodes = 2 stops it at 2 of 3, and it keeps saying so.
    let p = provisioning(true);
    match p.scale_up("fixed").await.unwrap() {
        static_capacity::ScaleUp::Created(c) => assert_eq!(c.len(), 2),
        other => panic!("{other:?}"),
    }
    assert_eq!(p.reconcile("fixed").await.unwrap(), Some(static_capacity::LIMIT_RETRY));
    let created = names(&f, "fixed").await;
    assert_eq!(created.len(), 2);
    let c = f.claims().get(&created[0]).await.unwrap();
    assert_eq!(c.labels().get("team").map(String::as_str), Some("a"));
    assert!(c.annotations().contains_key(annotations::NODE_POOL_HASH));
    assert!(c.spec.resources.is_none(), "no pods, no requests");
    assert!(!c.spec.requirements.iter().any(|r| r.key == labels::INSTANCE_TYPE), "the provider picks the type");

    // Raising the limit lets it finish; then it is satisfied.
    f.pools()
        .patch("fixed", &PatchParams::default(), &Patch::Merge(json!({"spec": {"limits": {"nodes": "5"}}})))
        .await
        .unwrap();
    assert_eq!(p.reconcile("fixed").await.unwrap(), Some(static_capacity::RESYNC));
    assert_eq!(names(&f, "fixed").await.len(), 3);
    assert_eq!(p.scale_up("fixed").await.unwrap(), static_capacity::ScaleUp::Satisfied);

    // A dynamic pool and a not-ready static pool are not touched.
    f.ready_pool(NodePoolOptions { name: Some("dynamic".into()), ..Default::default() }).await;
    f.ready_pool(NodePoolOptions {
        name: Some("unready".into()),
        replicas: Some(2),
        ready: Some(false),
        ..Default::default()
    })
    .await;
    assert_eq!(p.scale_up("dynamic").await.unwrap(), static_capacity::ScaleUp::Skipped);
    assert_eq!(p.scale_up("unready").await.unwrap(), static_capacity::ScaleUp::Skipped);
    assert!(names(&f, "unready").await.is_empty());
}

#[tokio::test]
async fn static_pools_scale_down_through_the_scale_subresource() {
    let f = fx();
    f.ready_pool(NodePoolOptions { name: Some("fixed".into()), replicas: Some(4), ..Default::default() }).await;
    // Four claims: one never launched, one empty, one busy, one busier.
    f.claim(NodeClaimOptions {
        name: Some("fixed-unlaunched".into()),
        node_pool: Some("fixed".into()),
        ..Default::default()
    })
    .await;
    for name in ["fixed-empty", "fixed-busy", "fixed-busier"] {
        f.claim(NodeClaimOptions {
            name: Some(name.into()),
            node_pool: Some("fixed".into()),
            provider_id: Some(format!("kwok://{name}")),
            node_name: Some(name.into()),
            launched: true,
            registered: true,
            initialized: true,
            ..Default::default()
        })
        .await;
    }
    f.state.apply(pod(PodOptions {
        name: Some("ds".into()),
        node_name: Some("fixed-empty".into()),
        owner: Some(("DaemonSet".into(), "ds".into())),
        ..Default::default()
    }));
    f.state.apply(pod(PodOptions {
        name: Some("a".into()),
        node_name: Some("fixed-busy".into()),
        ..Default::default()
    }));
    for n in ["b", "c"] {
        f.state.apply(pod(PodOptions {
            name: Some(n.into()),
            node_name: Some("fixed-busier".into()),
            ..Default::default()
        }));
    }
    let down = StaticDeprovisioning::new(&f.ctx, true);
    assert!(down.scale_down("fixed").await.unwrap().is_empty(), "at replicas");
    // A drift replacement in flight: five claims, one marked for deletion by the disruption command.
    f.claim(NodeClaimOptions {
        name: Some("fixed-replacement".into()),
        node_pool: Some("fixed".into()),
        ..Default::default()
    })
    .await;
    f.state.mark_for_deletion(["fixed-busier"]);
    assert!(down.scale_down("fixed").await.unwrap().is_empty(), "the replaced claim is not running");
    f.state.unmark_for_deletion(["fixed-busier"]);
    f.claims().delete("fixed-replacement", &DeleteParams::default()).await.unwrap();

    // kubectl scale nodepool fixed --replicas=1
    f.pools()
        .patch_scale("fixed", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}})))
        .await
        .unwrap();
    assert_eq!(f.get_pool("fixed").await.spec.replicas, Some(1));
    let deleted = down.scale_down("fixed").await.unwrap();
    assert_eq!(deleted, ["fixed-unlaunched", "fixed-empty", "fixed-busy"]);
    assert_eq!(names(&f, "fixed").await, ["fixed-busier"]);
    assert_eq!(down.reconcile("fixed").await.unwrap(), Some(static_capacity::RESYNC));
    assert!(StaticDeprovisioning::new(&f.ctx, false).scale_down("fixed").await.unwrap().is_empty());
}

#[tokio::test]
async fn registration_health_tracks_outcomes_and_resets_on_generation_changes() {
    let tracker = RegistrationTracker::new();
    assert_eq!(tracker.verdict("p"), None);
    tracker.record("p", registration_health::Outcome::Failure("LaunchFailed".into()));
    assert_eq!(tracker.verdict("p"), Some((ConditionStatus::False, "LaunchFailed".into())));
    tracker.record("p", registration_health::Outcome::Success);
    assert_eq!(tracker.verdict("p").unwrap().0, ConditionStatus::False, "half failed");
    tracker.record("p", registration_health::Outcome::Success);
    assert_eq!(tracker.verdict("p").unwrap().0, ConditionStatus::True);
    for _ in 0..2 {
        tracker.record("p", registration_health::Outcome::Failure(String::new()));
    }
    assert_eq!(
        tracker.verdict("p"),
        Some((ConditionStatus::False, registration_health::REGISTRATION_FAILED.into())),
        "the last four: S S F F"
    );

    // Outcomes observed on NodeClaims, each counted once.
    let observed = RegistrationTracker::new();
    let mut claim =
        node_claim(NodeClaimOptions { name: Some("c".into()), node_pool: Some("p".into()), ..Default::default() });
    assert_eq!(observed.observe(&claim, false), None, "not launched yet");
    claim
        .status
        .as_mut()
        .unwrap()
        .conditions
        .push(Condition { status: ConditionStatus::Unknown, ..condition(cond::LAUNCHED, false, Some("LaunchFailed")) });
    assert_eq!(observed.observe(&claim, false), None, "still trying");
    claim.metadata.deletion_timestamp = karpenter_testing::k8s_time(chrono::DateTime::UNIX_EPOCH);
    assert_eq!(observed.observe(&claim, false), Some(registration_health::Outcome::Failure("LaunchFailed".into())));
    assert_eq!(observed.observe(&claim, true), None, "counted once: the delete event after the deleting update");
    let registered = node_claim(NodeClaimOptions {
        name: Some("r".into()),
        node_pool: Some("p".into()),
        launched: true,
        registered: true,
        ..Default::default()
    });
    assert_eq!(observed.observe(&registered, false), Some(registration_health::Outcome::Success));
    assert_eq!(observed.observe(&registered, false), None);
    let timed_out = node_claim(NodeClaimOptions {
        name: Some("t".into()),
        node_pool: Some("p".into()),
        launched: true,
        deletion_timestamp: Some(chrono::DateTime::UNIX_EPOCH),
        ..Default::default()
    });
    assert_eq!(
        observed.observe(&timed_out, false),
        Some(registration_health::Outcome::Failure(registration_health::REGISTRATION_FAILED.into()))
    );
    assert_eq!(observed.verdict("p").unwrap().0, ConditionStatus::False, "two failures of three");

    let f = fx();
    f.classes().create(&PostParams::default(), &kwok_node_class(KWOKNodeClassOptions::default())).await.unwrap();
    f.pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    let tracker = Arc::new(RegistrationTracker::new());
    let health = RegistrationHealth::new(&f.ctx, tracker.clone(), resolver());
    tracker.record("default", registration_health::Outcome::Failure("x".into()));
    health.reconcile("default").await.unwrap();
    let p = f.get_pool("default").await;
    let c = cond_of(&p, cond::NODE_REGISTRATION_HEALTHY).unwrap();
    assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::Unknown, registration_health::AWAITING_RECONCILIATION));
    assert_eq!(p.status.as_ref().unwrap().node_class_observed_generation, Some(1));
    assert_eq!(tracker.verdict("default"), None, "the first observation resets the buffer");

    tracker.record("default", registration_health::Outcome::Failure("InsufficientCapacity".into()));
    health.reconcile("default").await.unwrap();
    assert_eq!(
        status_reason(&f.get_pool("default").await, cond::NODE_REGISTRATION_HEALTHY),
        Some((ConditionStatus::False, "InsufficientCapacity".into()))
    );
    for _ in 0..3 {
        tracker.record("default", registration_health::Outcome::Success);
    }
    health.reconcile("default").await.unwrap();
    assert_eq!(
        status_reason(&f.get_pool("default").await, cond::NODE_REGISTRATION_HEALTHY).unwrap().0,
        ConditionStatus::True
    );
    assert!(!f.get_pool("default").await.conditions().iter().any(|c| c.type_ == cond::READY), "not a Ready dependent");

    // A spec change (new generation) resets the verdict.
    f.pools()
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"v": "2"}}}}})),
        )
        .await
        .unwrap();
    health.reconcile("default").await.unwrap();
    let p = f.get_pool("default").await;
    assert_eq!(status_reason(&p, cond::NODE_REGISTRATION_HEALTHY).unwrap().0, ConditionStatus::Unknown);
    assert_eq!(cond_of(&p, cond::NODE_REGISTRATION_HEALTHY).unwrap().observed_generation, Some(2));
    assert_eq!(tracker.verdict("default"), None);
}

#[tokio::test]
async fn run_loops_make_a_new_pool_ready_and_count_it() {
    let f = fx();
    let shutdown = CancellationToken::new();
    let state = f.watched_state(&shutdown);
    let ctx = f.ctx.clone().with_state(state.clone());
    let tasks = vec![
        tokio::spawn(Arc::new(ReadyOnSight::new(&ctx, &kwok())).run(shutdown.clone())),
        tokio::spawn(Arc::new(f.readiness()).run(shutdown.clone())),
        tokio::spawn(Arc::new(f.validation()).run(state.clone(), shutdown.clone())),
        tokio::spawn(Arc::new(HashController::new(&ctx)).run(state.clone(), shutdown.clone())),
        tokio::spawn(Arc::new(Counter::new(&ctx)).run(shutdown.clone())),
        tokio::spawn(
            Arc::new(RegistrationHealth::new(&ctx, Arc::new(RegistrationTracker::new()), resolver()))
                .run(state.clone(), shutdown.clone()),
        ),
    ];
    f.pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }).await;
    // The class arrives after every controller has seen the pool without it (readiness has reported it missing):
    // its watch wakes readiness, and readiness's status write wakes registration health.
    let deadline = tokio_now() + Duration::from_secs(10);
    while status_reason(&f.get_pool("default").await, cond::NODE_CLASS_READY).map(|r| r.0)
        != Some(ConditionStatus::False)
    {
        assert!(tokio_now() < deadline, "the missing class was never reported");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    f.classes().create(&PostParams::default(), &kwok_node_class(KWOKNodeClassOptions::default())).await.unwrap();
    let deadline = tokio_now() + Duration::from_secs(10);
    loop {
        let p = f.get_pool("default").await;
        let done = p.is_ready()
            && p.annotations().contains_key(annotations::NODE_POOL_HASH)
            && p.status.as_ref().is_some_and(|s| s.nodes == Some(0));
        if done {
            break;
        }
        assert!(tokio_now() < deadline, "pool never got ready: {:?}", p.status);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Registration health: reset first, then a registered claim makes it healthy.
    let health = || async { status_reason(&f.get_pool("default").await, cond::NODE_REGISTRATION_HEALTHY) };
    while health().await.map(|h| h.1) != Some(registration_health::AWAITING_RECONCILIATION.into()) {
        assert!(tokio_now() < deadline, "registration health never reset");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f.claim(NodeClaimOptions {
        name: Some("default-a".into()),
        node_pool: Some("default".into()),
        launched: true,
        registered: true,
        ..Default::default()
    })
    .await;
    while health().await.map(|h| h.0) != Some(ConditionStatus::True) {
        assert!(tokio_now() < deadline, "a registration was not seen: {:?}", health().await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn static_run_loops_follow_kubectl_scale() {
    let f = fx();
    let shutdown = CancellationToken::new();
    let state = f.watched_state(&shutdown);
    let ctx = f.ctx.clone().with_state(state);
    let up = StaticProvisioning::new(&ctx, true);
    let down = StaticDeprovisioning::new(&ctx, true);
    let tasks = [tokio::spawn(Arc::new(up).run(shutdown.clone())), tokio::spawn(Arc::new(down).run(shutdown.clone()))];
    f.ready_pool(NodePoolOptions { name: Some("fixed".into()), replicas: Some(2), ..Default::default() }).await;
    let deadline = tokio_now() + Duration::from_secs(10);
    for replicas in [2usize, 3, 1] {
        f.pools()
            .patch_scale("fixed", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": replicas}})))
            .await
            .unwrap();
        while names(&f, "fixed").await.len() != replicas {
            assert!(tokio_now() < deadline, "never reached {replicas}: {:?}", names(&f, "fixed").await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Settled: no further creation or deletion.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(names(&f, "fixed").await.len(), 1);
    shutdown.cancel();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn status_only_pool_changes_do_not_wake_the_pool_controllers() {
    use futures::StreamExt;
    let pool = |generation: i64, nodes: i64, hash: &str| {
        let mut p = karpenter_testing::node_pool(NodePoolOptions { name: Some("p".into()), ..Default::default() });
        p.metadata.generation = Some(generation);
        p.metadata.annotations = Some([(annotations::NODE_POOL_HASH.to_owned(), hash.to_owned())].into());
        p.status.get_or_insert_default().nodes = Some(nodes);
        Arc::new(p)
    };
    let mut deleting = pool(2, 9, "b");
    Arc::make_mut(&mut deleting).metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    let events = vec![
        pool(1, 0, "a"), // first sight: passes
        pool(1, 1, "a"), // the counter's status write: filtered
        pool(1, 2, "a"), // again: filtered
        pool(2, 2, "a"), // spec edit: passes
        pool(2, 3, "b"), // the hash controller's annotation: passes
        pool(2, 9, "b"), // status: filtered
        deleting,        // deletion: passes
    ];
    let passed: Vec<(Option<i64>, Option<i64>)> = spec_changes(futures::stream::iter(events))
        .map(|p| (p.metadata.generation, p.status.as_ref().and_then(|s| s.nodes)))
        .collect()
        .await;
    assert_eq!(passed, vec![(Some(1), Some(0)), (Some(2), Some(2)), (Some(2), Some(3)), (Some(2), Some(9))]);
}

/// The disruption-topology annotation: a label key sets `DisruptionTopologyKeyValid=True`, anything else `False`
/// with a Warning event naming the pool and the annotation (Ready is untouched: provisioning goes on), and
/// removing the annotation removes the condition.
#[tokio::test]
async fn disruption_topology_key_is_reported_as_a_condition_and_event() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use karpenter_api::labels::disruption_topology::{ANNOTATION, CONDITION, INVALID_REASON};
    let f = fx();
    let annotated = |v: &str| BTreeMap::from([(ANNOTATION.to_owned(), v.to_owned())]);
    f.pool(NodePoolOptions {
        name: Some("zonal".into()),
        metadata_annotations: annotated("Zone Name"),
        ..Default::default()
    })
    .await;
    f.validation().reconcile("zonal").await.unwrap();
    let p = f.get_pool("zonal").await;
    let c = cond_of(&p, CONDITION).expect("condition");
    assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, INVALID_REASON));
    assert!(c.message.contains(ANNOTATION) && c.message.contains("\"Zone Name\""), "{}", c.message);
    assert_eq!(
        status_reason(&p, cond::VALIDATION_SUCCEEDED).unwrap().0,
        ConditionStatus::True,
        "not a validation failure"
    );
    let events: Vec<CoreEvent> = Api::<CoreEvent>::all(f.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(INVALID_REASON))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0];
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.involved_object.kind.as_deref(), Some("NodePool"));
    assert_eq!(e.involved_object.name.as_deref(), Some("zonal"));
    let message = e.message.as_deref().unwrap_or_default();
    assert!(message.contains("NodePool zonal") && message.contains(ANNOTATION), "{message}");

    let patch = json!({"metadata": {"annotations": {ANNOTATION: "topology.kubernetes.io/zone"}}});
    f.pools().patch("zonal", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    f.validation().reconcile("zonal").await.unwrap();
    let c = cond_of(&f.get_pool("zonal").await, CONDITION).cloned().expect("condition");
    assert_eq!(c.status, ConditionStatus::True);
    assert!(c.message.contains("topology.kubernetes.io/zone"), "{}", c.message);

    let patch = json!({"metadata": {"annotations": {ANNOTATION: null}}});
    f.pools().patch("zonal", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    f.validation().reconcile("zonal").await.unwrap();
    assert!(cond_of(&f.get_pool("zonal").await, CONDITION).is_none(), "no annotation, no condition");
}

/// The consolidation minimum-saving annotation: a value in the grammar sets `ConsolidationMinSavingsValid=True`
/// naming the threshold, anything else `False` with a Warning event naming the pool, the annotation and the value;
/// removing the annotation removes the condition.
#[tokio::test]
async fn consolidation_min_savings_is_reported_as_a_condition_and_event() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use karpenter_api::labels::consolidation_min_savings::{ANNOTATION, CONDITION, INVALID_REASON};
    let f = fx();
    f.pool(NodePoolOptions {
        name: Some("thrifty".into()),
        metadata_annotations: BTreeMap::from([(ANNOTATION.to_owned(), "5".to_owned())]),
        ..Default::default()
    })
    .await;
    f.validation().reconcile("thrifty").await.unwrap();
    let p = f.get_pool("thrifty").await;
    let c = cond_of(&p, CONDITION).expect("condition");
    assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, INVALID_REASON));
    assert!(c.message.contains(ANNOTATION) && c.message.contains("\"5\" is not a minimum saving"), "{}", c.message);
    assert_eq!(status_reason(&p, cond::VALIDATION_SUCCEEDED).unwrap().0, ConditionStatus::True);
    let events: Vec<CoreEvent> = Api::<CoreEvent>::all(f.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(INVALID_REASON))
        .collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    assert_eq!(events[0].involved_object.name.as_deref(), Some("thrifty"));
    let message = events[0].message.as_deref().unwrap_or_default();
    assert!(message.contains("NodePool thrifty") && message.contains(ANNOTATION), "{message}");

    let patch = json!({"metadata": {"annotations": {ANNOTATION: "$0.05/h"}}});
    f.pools().patch("thrifty", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    f.validation().reconcile("thrifty").await.unwrap();
    let c = cond_of(&f.get_pool("thrifty").await, CONDITION).cloned().expect("condition");
    assert_eq!(c.status, ConditionStatus::True);
    assert!(c.message.contains("$0.05/h"), "{}", c.message);

    let patch = json!({"metadata": {"annotations": {ANNOTATION: null}}});
    f.pools().patch("thrifty", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    f.validation().reconcile("thrifty").await.unwrap();
    assert!(cond_of(&f.get_pool("thrifty").await, CONDITION).is_none(), "no annotation, no condition");
}

fn floor_annotation(value: &str) -> BTreeMap<String, String> {
    [(labels::min_nodes::ANNOTATION.to_owned(), value.to_owned())].into()
}

#[tokio::test]
async fn a_dynamic_pool_is_kept_at_its_floor_without_pods() {
    let f = fx();
    let floor = MinNodes::new(&f.ctx);
    f.ready_pool(NodePoolOptions {
        name: Some("floor".into()),
        metadata_annotations: floor_annotation("2"),
        ..Default::default()
    })
    .await;
    assert_eq!(floor.reconcile("floor").await.unwrap(), Some(min_nodes::RESYNC));
    let created = names(&f, "floor").await;
    assert_eq!(created.len(), 2, "two NodeClaims with no pending pod");
    let c = f.claims().get(&created[0]).await.unwrap();
    assert!(
        c.spec.requirements.iter().any(|r| r.key == labels::INSTANCE_TYPE && !r.values.is_empty()),
        "planned like a pod's node: the compatible instance types, cheapest first"
    );
    let pool = f.get_pool("floor").await;
    assert_eq!(
        status_reason(&pool, labels::min_nodes::CONDITION),
        Some((ConditionStatus::True, "MinNodesValid".into()))
    );

    // At the floor: nothing more. A claim being deleted no longer counts, and is replaced.
    assert_eq!(floor.reconcile("floor").await.unwrap(), Some(min_nodes::RESYNC));
    assert_eq!(names(&f, "floor").await.len(), 2);
    let mut gone = f.claims().get(&created[0]).await.unwrap();
    gone.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()));
    f.state.apply(gone);
    floor.reconcile("floor").await.unwrap();
    assert_eq!(names(&f, "floor").await.len(), 3, "the replacement of the deleting claim");

    // An unannotated pool gets nothing, and no condition.
    f.ready_pool(NodePoolOptions { name: Some("plain".into()), ..Default::default() }).await;
    assert_eq!(floor.reconcile("plain").await.unwrap(), None);
    assert!(names(&f, "plain").await.is_empty());
    assert!(cond_of(&f.get_pool("plain").await, labels::min_nodes::CONDITION).is_none());
}

#[tokio::test]
async fn bad_floors_are_a_condition_and_an_event_not_an_error() {
    let f = fx();
    let floor = MinNodes::new(&f.ctx);
    f.ready_pool(NodePoolOptions {
        name: Some("typo".into()),
        metadata_annotations: floor_annotation("two"),
        ..Default::default()
    })
    .await;
    f.ready_pool(NodePoolOptions {
        name: Some("fixed".into()),
        replicas: Some(1),
        metadata_annotations: floor_annotation("1"),
        ..Default::default()
    })
    .await;
    f.ready_pool(NodePoolOptions {
        name: Some("capped".into()),
        limits: [("nodes", "1")].into(),
        metadata_annotations: floor_annotation("3"),
        ..Default::default()
    })
    .await;
    for (pool, needle, claims) in [
        ("typo", "\"two\" is not a non-negative integer", 0),
        ("fixed", "static", 0),
        ("capped", "above limits.nodes 1", 1),
    ] {
        floor.reconcile(pool).await.unwrap();
        let p = f.get_pool(pool).await;
        let c = cond_of(&p, labels::min_nodes::CONDITION).unwrap_or_else(|| panic!("{pool}: no condition"));
        assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, min_nodes::MIN_NODES_INVALID), "{pool}");
        assert!(c.message.contains(&format!("NodePool {pool}")) && c.message.contains(labels::min_nodes::ANNOTATION));
        assert!(c.message.contains(needle), "{pool}: {}", c.message);
        assert_eq!(names(&f, pool).await.len(), claims, "{pool}");
        assert!(p.is_ready(), "{pool}: a bad floor does not stop the pool");
    }
    // Events are published detached: wait for the three.
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::all(f.client.clone());
    let mut events = Vec::new();
    for _ in 0..100 {
        events = api.list(&ListParams::default()).await.unwrap().items;
        events.retain(|e| e.reason.as_deref() == Some(min_nodes::MIN_NODES_INVALID));
        if events.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for pool in ["typo", "fixed", "capped"] {
        assert!(
            events.iter().any(|e| e.type_.as_deref() == Some("Warning")
                && e.involved_object.name.as_deref() == Some(pool)
                && e.message.as_deref().is_some_and(|m| m.contains(labels::min_nodes::ANNOTATION))),
            "{pool}: no Warning event in {events:?}"
        );
    }
    // Fixing the value turns the condition True.
    f.pools()
        .patch(
            "typo",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {labels::min_nodes::ANNOTATION: "1"}}})),
        )
        .await
        .unwrap();
    floor.reconcile("typo").await.unwrap();
    assert_eq!(
        cond_of(&f.get_pool("typo").await, labels::min_nodes::CONDITION).map(|c| c.status),
        Some(ConditionStatus::True)
    );
    assert_eq!(names(&f, "typo").await.len(), 1);
}

/// A kind no provider has (`example.dev/ToyNodeClass`), registered ready on sight: its status controller takes
/// its name from the kind, marks each node class `Ready` once, and the readiness reader resolves it; nothing
/// about a provider is named.
#[tokio::test]
async fn a_made_up_kind_registered_ready_on_sight_is_marked_ready() {
    let clock = FakeClock::default();
    let server = crate::node_classes::toy::api_server(Arc::new(clock.clone()));
    let client = server.client();
    let ctx = ControllerContext::for_tests(
        client.clone(),
        Arc::new(karpenter_testing::kwok::fake()),
        Arc::new(clock.clone()),
    );
    let toy = crate::node_classes::toy::registration().ready_on_sight();
    let api: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &toy.api_resource);
    api.create(&PostParams::default(), &crate::node_classes::toy::object("first")).await.unwrap();
    let reference = karpenter_api::NodeClassReference {
        group: "example.dev".into(),
        kind: "ToyNodeClass".into(),
        name: "first".into(),
    };
    let resolver = NodeClassResolver::new([&toy]);
    let ready_of = async |resolver: &NodeClassResolver| match resolver.fetch(&client, &reference).await.unwrap() {
        Some(nodeclass::NodeClassState::Present { ready, .. }) => ready.map(|c| c.status),
        other => panic!("the toy class reads as present: {other:?}"),
    };
    assert_eq!(ready_of(&resolver).await, None, "no status yet");
    assert_eq!(NodeClassResolver::default().fetch(&client, &reference).await.unwrap(), None, "unregistered");

    let status = ReadyOnSight::new(&ctx, &toy);
    assert_eq!(status.name(), "toynodeclass.status");
    status.reconcile("first").await.unwrap();
    assert_eq!(ready_of(&resolver).await, Some(ConditionStatus::True));
    let rv = api.get("first").await.unwrap().resource_version();
    status.reconcile("first").await.unwrap();
    assert_eq!(api.get("first").await.unwrap().resource_version(), rv, "no write when already ready");
    assert_eq!(status.reconcile("missing").await.unwrap(), None, "a missing class is nothing to do");

    // The run loop marks a class created while it watches, and reports under the kind's controller name.
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(Arc::new(status).run(shutdown.clone()));
    api.create(&PostParams::default(), &crate::node_classes::toy::object("second")).await.unwrap();
    let deadline = tokio_now() + Duration::from_secs(10);
    loop {
        let second = api.get("second").await.unwrap();
        let conditions = second.data.get("status").and_then(|s| s.get("conditions")).cloned();
        if conditions.is_some_and(|c| c[0]["type"] == "Ready" && c[0]["status"] == "True") {
            break;
        }
        assert!(tokio_now() < deadline, "the second class was never marked ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    task.await.unwrap();
    let text = ctx.metrics().render();
    assert!(
        text.lines().any(|l| l
            .starts_with("controller_runtime_reconcile_total{controller=\"toynodeclass.status\",result=\"success\"}")
            && !l.ends_with(" 0")),
        "reconciles counted under the kind's controller name"
    );
}
