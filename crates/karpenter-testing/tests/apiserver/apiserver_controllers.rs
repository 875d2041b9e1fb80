//! The cluster behaviour around the API server, through the real kube client: garbage collection through
//! ownerReferences (background, foreground, orphan), the not-ready taint of Nodes (TaintNodesByCondition), and
//! Leases under leader-election style races.
#![cfg(feature = "apiserver")]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::{FakeClock, NodeClaimOptions, NodeOptions, node, node_claim};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Error, ResourceExt};
use serde_json::json;

fn code(e: Error) -> u16 {
    match e {
        Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn owner_ref(cm: &ConfigMap, block: bool) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: cm.name_any(),
        uid: cm.uid().expect("uid"),
        controller: None,
        block_owner_deletion: Some(block),
    }
}

async fn cm(api: &Api<ConfigMap>, name: &str, owners: Vec<OwnerReference>, finalizers: &[&str]) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.owner_references = (!owners.is_empty()).then_some(owners);
    c.metadata.finalizers = (!finalizers.is_empty()).then(|| finalizers.iter().map(|f| f.to_string()).collect());
    api.create(&PostParams::default(), &c).await.expect("create configmap")
}

async fn exists(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.expect("get").is_some()
}

#[tokio::test]
async fn background_collection_follows_owner_chains_and_waits_for_the_last_owner() {
    let server = ApiServer::new();
    let c = server.client();
    // NodeClaim -> Node -> Lease, as Karpenter and the kubelet wire them.
    let claims: Api<NodeClaim> = Api::all(c.clone());
    let claim = claims
        .create(&PostParams::default(), &node_claim(NodeClaimOptions { name: Some("nc".into()), ..Default::default() }))
        .await
        .expect("nodeclaim");
    let nodes: Api<Node> = Api::all(c.clone());
    let mut n = node(NodeOptions { name: Some("n1".into()), ..Default::default() });
    n.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "karpenter.sh/v1".into(),
        kind: "NodeClaim".into(),
        name: "nc".into(),
        uid: claim.uid().expect("uid"),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let n = nodes.create(&PostParams::default(), &n).await.expect("node");
    let leases: Api<Lease> = Api::namespaced(c.clone(), "kube-node-lease");
    let mut lease = Lease::default();
    lease.metadata.name = Some("n1".into());
    lease.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: "n1".into(),
        uid: n.uid().expect("uid"),
        ..Default::default()
    }]);
    leases.create(&PostParams::default(), &lease).await.expect("lease");
    claims.delete("nc", &DeleteParams::default()).await.expect("delete claim");
    assert!(nodes.get_opt("n1").await.expect("get").is_none(), "node collected");
    assert!(leases.get_opt("n1").await.expect("get").is_none(), "lease collected through the node");

    // Two owners: the dependent loses the reference to the first and goes with the second.
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let a = cm(&cms, "a", vec![], &[]).await;
    let b = cm(&cms, "b", vec![], &[]).await;
    cm(&cms, "dep", vec![owner_ref(&a, false), owner_ref(&b, false)], &[]).await;
    cms.delete("a", &DeleteParams::default()).await.expect("delete a");
    let dep = cms.get("dep").await.expect("dep stays while b exists");
    assert_eq!(dep.owner_references().iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["b"]);
    cms.delete("b", &DeleteParams::default()).await.expect("delete b");
    assert!(!exists(&cms, "dep").await);

    // An owner with finalizers keeps its dependents until it is really gone (background propagation).
    let f = cm(&cms, "f", vec![], &["example.com/hold"]).await;
    cm(&cms, "held", vec![owner_ref(&f, true)], &[]).await;
    cms.delete("f", &DeleteParams::default()).await.expect("delete f");
    assert!(exists(&cms, "held").await);
    cms.patch("f", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .expect("drop finalizer");
    assert!(!exists(&cms, "held").await);
}

#[tokio::test]
async fn dependents_of_missing_owners_are_collected_unless_the_owner_kind_is_not_served() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let mut ghost = ConfigMap::default();
    ghost.metadata.name = Some("ghost".into());
    ghost.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    cm(&cms, "orphaned", vec![owner_ref(&ghost, false)], &[]).await;
    assert!(!exists(&cms, "orphaned").await, "an owner that never existed is gone");
    let rs = OwnerReference {
        api_version: "apps/v1".into(),
        kind: "ReplicaSet".into(),
        name: "web-123".into(),
        uid: "11111111-1111-1111-1111-111111111111".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    cm(&cms, "kept", vec![rs], &[]).await;
    assert!(exists(&cms, "kept").await, "owners of workload kinds are never judged gone");
}

#[tokio::test]
async fn orphan_and_foreground_propagation() {
    let server = ApiServer::new();
    let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let o = cm(&cms, "owner", vec![], &[]).await;
    cm(&cms, "child", vec![owner_ref(&o, true)], &[]).await;
    cms.delete("owner", &DeleteParams { propagation_policy: Some(PropagationPolicy::Orphan), ..Default::default() })
        .await
        .expect("orphan");
    assert!(!exists(&cms, "owner").await);
    assert!(cms.get("child").await.expect("child kept").metadata.owner_references.is_none());

    let o = cm(&cms, "fg", vec![], &[]).await;
    cm(&cms, "blocker", vec![owner_ref(&o, true)], &["example.com/slow"]).await;
    cm(&cms, "plain", vec![owner_ref(&o, false)], &[]).await;
    cms.delete("fg", &DeleteParams::foreground()).await.expect("foreground");
    let fg = cms.get("fg").await.expect("owner waits for its blocking dependents");
    assert!(fg.metadata.deletion_timestamp.is_some());
    assert_eq!(fg.finalizers(), ["foregroundDeletion"]);
    assert!(!exists(&cms, "plain").await);
    assert!(cms.get("blocker").await.expect("finalizer holds it").metadata.deletion_timestamp.is_some());
    cms.patch("blocker", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .expect("release");
    assert!(!exists(&cms, "blocker").await);
    assert!(!exists(&cms, "fg").await, "owner removed once its blocking dependents are gone");
}

fn taint_keys(n: &Node) -> Vec<String> {
    n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default().into_iter().map(|t| t.key).collect()
}

#[tokio::test]
async fn nodes_carry_the_not_ready_taint_until_ready() {
    let server = ApiServer::new();
    let nodes: Api<Node> = Api::all(server.client());
    let mut bare = Node::default();
    bare.metadata.name = Some("bare".into());
    let bare = nodes.create(&PostParams::default(), &bare).await.expect("node");
    assert_eq!(taint_keys(&bare), ["node.kubernetes.io/not-ready"]);
    assert_eq!(bare.spec.and_then(|s| s.taints).unwrap_or_default()[0].effect, "NoSchedule");

    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    nodes.patch_status("bare", &PatchParams::default(), &Patch::Merge(ready)).await.expect("ready");
    assert!(taint_keys(&nodes.get("bare").await.expect("get")).is_empty());
    let not_ready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    nodes.patch_status("bare", &PatchParams::default(), &Patch::Merge(not_ready)).await.expect("not ready");
    assert_eq!(taint_keys(&nodes.get("bare").await.expect("get")), ["node.kubernetes.io/not-ready"]);
    let unknown = json!({"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}});
    nodes.patch_status("bare", &PatchParams::default(), &Patch::Merge(unknown)).await.expect("unknown");
    assert_eq!(taint_keys(&nodes.get("bare").await.expect("get")), ["node.kubernetes.io/unreachable"]);

    // Other taints are left alone; a Node registered Ready gets no condition taint.
    let k = node(NodeOptions {
        name: Some("karp".into()),
        ready: Some(false),
        taints: vec![karpenter_testing::taint("karpenter.sh/unregistered", None, "NoExecute")],
        ..Default::default()
    });
    let k = nodes.create(&PostParams::default(), &k).await.expect("node");
    assert_eq!(taint_keys(&k), ["karpenter.sh/unregistered", "node.kubernetes.io/not-ready"]);
    let r = nodes.create(&PostParams::default(), &node(NodeOptions::default())).await.expect("ready node");
    assert!(taint_keys(&r).is_empty());
}

fn lease(holder: &str, renew: MicroTime) -> Lease {
    Lease {
        metadata: kube::api::ObjectMeta { name: Some("leader".into()), ..Default::default() },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(renew),
            ..Default::default()
        }),
    }
}

/// One leader-election attempt: take the lease when it is free or expired, renew it when held.
async fn try_acquire(api: &Api<Lease>, me: &str, now: MicroTime) -> Result<bool, Error> {
    let current = match api.get_opt("leader").await? {
        None => return api.create(&PostParams::default(), &lease(me, now)).await.map(|_| true),
        Some(l) => l,
    };
    let spec = current.spec.clone().unwrap_or_default();
    let expired = spec.renew_time.as_ref().is_none_or(|t| {
        t.0.checked_add(jiff_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0)))).is_ok_and(|end| end < now.0)
    });
    if spec.holder_identity.as_deref() != Some(me) && !expired {
        return Ok(false);
    }
    let mut next = lease(me, now);
    next.metadata.resource_version = current.metadata.resource_version.clone();
    api.replace("leader", &PostParams::default(), &next).await.map(|_| true)
}

fn jiff_secs(s: i64) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::from_secs(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_admit_one_leader_per_round_of_racing_candidates() {
    let clock = FakeClock::default();
    let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
    let api: Api<Lease> = Api::namespaced(server.client(), "default");
    let t0 = now_micro(&clock);
    // Ten candidates race for a free lease: exactly one creates it, the others see AlreadyExists or a held lease.
    let winners = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let (api, winners, t0) = (api.clone(), winners.clone(), t0.clone());
        tasks.push(tokio::spawn(async move {
            match try_acquire(&api, &format!("c{i}"), t0).await {
                Ok(true) => {
                    winners.fetch_add(1, Ordering::SeqCst);
                }
                Ok(false) => {}
                Err(e) => assert!(matches!(code(e), 409), "only conflicts"),
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    assert_eq!(winners.load(Ordering::SeqCst), 1);
    let leader = api.get("leader").await.expect("lease").spec.and_then(|s| s.holder_identity).expect("holder");

    // The holder renews; a stale copy cannot be written back (409), so a steal needs a fresh read.
    let stale = api.get("leader").await.expect("lease");
    clock.step_secs(5);
    assert!(try_acquire(&api, &leader, now_micro(&clock)).await.expect("renew"));
    let mut steal = stale.clone();
    steal.spec.as_mut().expect("spec").holder_identity = Some("thief".into());
    assert_eq!(code(api.replace("leader", &PostParams::default(), &steal).await.expect_err("stale")), 409);
    assert!(!try_acquire(&api, "thief", t0.clone()).await.expect("held, not expired"));

    // The lease expires; racing candidates steal it, exactly one wins.
    clock.step_secs(60);
    let later = now_micro(&clock);
    let winners = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..10 {
        let (api, winners, later) = (api.clone(), winners.clone(), later.clone());
        tasks.push(tokio::spawn(async move {
            match try_acquire(&api, &format!("s{i}"), later).await {
                Ok(true) => {
                    winners.fetch_add(1, Ordering::SeqCst);
                }
                Ok(false) => {}
                Err(e) => assert_eq!(code(e), 409),
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let holder = api.get("leader").await.expect("lease").spec.and_then(|s| s.holder_identity).expect("holder");
    assert!(holder.starts_with('s'), "{holder}");
    assert_eq!(winners.load(Ordering::SeqCst), 1, "exactly one steal succeeds");
}

fn now_micro(clock: &FakeClock) -> MicroTime {
    use karpenter_testing::Clock;
    let t = clock.now();
    MicroTime(k8s_openapi::jiff::Timestamp::from_second(t.timestamp()).expect("timestamp"))
}
