//! The probe: one list of semantic checks, each a function of a `kube::Client`, run against the in-process API
//! server by `cargo test`, and against a real cluster on demand:
//!
//! ```text
//! kubectl proxy --port 8001 &            # plain HTTP to the real API server (this crate's kube has no TLS)
//! KARPENTER_PROBE_SERVER=http://127.0.0.1:8001 \
//!   cargo test -p karpenter-testing --features apiserver --test apiserver -- apiserver_probe --ignored --nocapture
//! ```
//!
//! Each check works in its own namespace (`probe-…`, deleted afterwards) and uses only built-in kinds, so it
//! needs no CRDs; it creates one Node (`probe-node-…`, deleted again). Checks that depend on the cluster's
//! controllers (PDB status, garbage collection) wait up to a minute for them, since on a real cluster they run
//! asynchronously. The known differences between the two servers are listed in the `apiserver` module docs;
//! every check here passes on both.
#![cfg(feature = "apiserver")]

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use karpenter_testing::apiserver::ApiServer;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// What a check runs against.
struct Probe {
    client: Client,
    ns: String,
    /// A unique suffix for cluster-scoped names.
    suffix: String,
}

type Outcome = Result<(), String>;
type Check = (&'static str, for<'a> fn(&'a Probe) -> BoxFuture<'a, Outcome>);

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T> Ctx<T> for kube::Result<T> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

/// The API error code of a failed call, or a description of the unexpected success.
fn code_of<T: std::fmt::Debug>(r: kube::Result<T>) -> Result<(u16, String), String> {
    match r {
        Err(kube::Error::Api(s)) => Ok((s.code, s.reason.clone())),
        Err(other) => Err(format!("expected an API error, got {other}")),
        Ok(v) => Err(format!("expected an API error, got success: {v:?}")),
    }
}

/// Polls `f` until it returns `Ok` (controllers on a real cluster are asynchronous), for up to a minute.
async fn eventually<F, Fut>(what: &str, mut f: F) -> Outcome
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Outcome>,
{
    let mut last = String::new();
    for _ in 0..600 {
        match f().await {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{what}: still failing after 60 s: {last}"))
}

fn cm(name: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.data = Some([("k".to_string(), "v".to_string())].into());
    c
}

fn pod_json(name: &str, labels: Value, node: Option<&str>) -> Pod {
    let mut spec = json!({"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]});
    if let Some(n) = node {
        spec["nodeName"] = json!(n);
    }
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": spec})).unwrap_or_default()
}

async fn ready_pod(p: &Probe, name: &str, node: &str) -> Outcome {
    let pods: Api<Pod> = Api::namespaced(p.client.clone(), &p.ns);
    pods.create(&PostParams::default(), &pod_json(name, json!({"app": "web"}), Some(node))).await.ctx("pod")?;
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.ctx("status")?;
    Ok(())
}

async fn resource_version_changes_on_every_write(p: &Probe) -> Outcome {
    let api: Api<ConfigMap> = Api::namespaced(p.client.clone(), &p.ns);
    let a = api.create(&PostParams::default(), &cm("rv")).await.ctx("create")?;
    let patch = Patch::Merge(json!({"data": {"k": "w"}}));
    let b = api.patch("rv", &PatchParams::default(), &patch).await.ctx("patch")?;
    ensure!(a.resource_version() != b.resource_version(), "a write keeps the resourceVersion");
    let c = api.patch("rv", &PatchParams::default(), &patch).await.ctx("no-op patch")?;
    ensure!(b.resource_version() == c.resource_version(), "a no-op patch changed the resourceVersion");
    Ok(())
}

async fn stale_update_conflicts(p: &Probe) -> Outcome {
    let api: Api<ConfigMap> = Api::namespaced(p.client.clone(), &p.ns);
    let a = api.create(&PostParams::default(), &cm("stale")).await.ctx("create")?;
    let mut first = a.clone();
    first.data = Some([("k".to_string(), "1".to_string())].into());
    api.replace("stale", &PostParams::default(), &first).await.ctx("first update")?;
    let mut second = a;
    second.data = Some([("k".to_string(), "2".to_string())].into());
    let (code, reason) = code_of(api.replace("stale", &PostParams::default(), &second).await)?;
    ensure!((code, reason.as_str()) == (409, "Conflict"), "stale update: {code} {reason}");
    Ok(())
}

fn pdb(name: &str, min: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "minAvailable": min},
    }))
    .unwrap_or_default()
}

async fn generation_and_status_subresource(p: &Probe) -> Outcome {
    let api: Api<PodDisruptionBudget> = Api::namespaced(p.client.clone(), &p.ns);
    let created = api.create(&PostParams::default(), &pdb("gen", 1)).await.ctx("create")?;
    ensure!(created.metadata.generation == Some(1), "generation on create: {:?}", created.metadata.generation);
    let labeled = api
        .patch("gen", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})))
        .await
        .ctx("label")?;
    ensure!(labeled.metadata.generation == Some(1), "a metadata change bumped generation");
    let spec = api
        .patch("gen", &PatchParams::default(), &Patch::Merge(json!({"spec": {"minAvailable": 2}})))
        .await
        .ctx("spec")?;
    ensure!(spec.metadata.generation == Some(2), "a spec change did not bump generation");
    // The status subresource ignores spec; the main resource ignores status.
    let s = api
        .patch_status(
            "gen",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minAvailable": 5}, "status": {"expectedPods": 7}})),
        )
        .await
        .ctx("status write")?;
    ensure!(
        s.spec.and_then(|s| s.min_available) == Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2)),
        "a status write changed spec"
    );
    let m = api
        .patch("gen", &PatchParams::default(), &Patch::Merge(json!({"status": {"expectedPods": 9}})))
        .await
        .ctx("main write")?;
    ensure!(m.status.is_none_or(|s| s.expected_pods != 9), "a main-resource write changed status");
    Ok(())
}

async fn finalizers_hold_deletion(p: &Probe) -> Outcome {
    let api: Api<ConfigMap> = Api::namespaced(p.client.clone(), &p.ns);
    let mut c = cm("fin");
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &c).await.ctx("create")?;
    api.delete("fin", &DeleteParams::default()).await.ctx("delete")?;
    let held = api.get("fin").await.ctx("still there")?;
    ensure!(held.metadata.deletion_timestamp.is_some(), "no deletionTimestamp");
    api.patch("fin", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .ctx("release")?;
    ensure!(api.get_opt("fin").await.ctx("get")?.is_none(), "still there after the last finalizer");
    Ok(())
}

async fn selectors(p: &Probe) -> Outcome {
    let api: Api<ConfigMap> = Api::namespaced(p.client.clone(), &p.ns);
    let mut a = cm("sel-a");
    a.metadata.labels = Some([("tier".to_string(), "web".to_string())].into());
    api.create(&PostParams::default(), &a).await.ctx("create")?;
    api.create(&PostParams::default(), &cm("sel-b")).await.ctx("create")?;
    let by_label = api.list(&ListParams::default().labels("tier in (web,db)")).await.ctx("labels")?;
    ensure!(by_label.items.iter().map(|c| c.name_any()).collect::<Vec<_>>() == ["sel-a"], "label selector");
    let by_name = api.list(&ListParams::default().fields("metadata.name=sel-b")).await.ctx("fields")?;
    ensure!(by_name.items.len() == 1, "metadata.name field selector");
    let (code, _) = code_of(api.list(&ListParams::default().fields("data.k=v")).await)?;
    ensure!(code == 400, "unsupported field selector: {code}");
    let pods: Api<Pod> = Api::namespaced(p.client.clone(), &p.ns);
    pods.list(&ListParams::default().fields("spec.nodeName=x,status.phase=Running")).await.ctx("pod fields")?;
    Ok(())
}

async fn binding(p: &Probe) -> Outcome {
    let pods: Api<Pod> = Api::namespaced(p.client.clone(), &p.ns);
    pods.create(&PostParams::default(), &pod_json("bind", json!({}), None)).await.ctx("pod")?;
    let node = format!("probe-node-{}", p.suffix);
    let b = |pod: &str, n: &str| json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod}, "target": {"kind": "Node", "name": n}});
    let _: kube::core::Status =
        pods.create_subresource("binding", "bind", &PostParams::default(), &b("bind", &node)).await.ctx("bind")?;
    let bound = pods.get("bind").await.ctx("get")?;
    ensure!(bound.spec.and_then(|s| s.node_name) == Some(node.clone()), "nodeName not set");
    let (code, _) = code_of(
        pods.create_subresource::<_, kube::core::Status>("binding", "bind", &PostParams::default(), &b("bind", "x"))
            .await,
    )?;
    ensure!(code == 409, "rebinding: {code}");
    let (code, _) = code_of(
        pods.create_subresource::<_, kube::core::Status>("binding", "nope", &PostParams::default(), &b("nope", "x"))
            .await,
    )?;
    ensure!(code == 404, "binding a missing pod: {code}");
    // A bound pod is deleted gracefully.
    pods.delete("bind", &DeleteParams::default()).await.ctx("delete")?;
    let terminating = pods.get("bind").await.ctx("terminating")?;
    ensure!(
        terminating.metadata.deletion_timestamp.is_some()
            && terminating.metadata.deletion_grace_period_seconds == Some(30),
        "graceful deletion: {:?}",
        terminating.metadata.deletion_grace_period_seconds
    );
    Ok(())
}

async fn eviction_and_budgets(p: &Probe) -> Outcome {
    let node = format!("probe-node-{}", p.suffix);
    ready_pod(p, "ev-a", &node).await?;
    ready_pod(p, "ev-b", &node).await?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(p.client.clone(), &p.ns);
    pdbs.create(&PostParams::default(), &pdb("ev", 2)).await.ctx("pdb")?;
    eventually("pdb status", || async {
        let s = pdbs.get("ev").await.ctx("get")?.status.ok_or("no status")?;
        let got = (s.current_healthy, s.desired_healthy, s.disruptions_allowed, s.expected_pods);
        ensure!(got == (2, 2, 0, 2), "pdb status {got:?}");
        Ok(())
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(p.client.clone(), &p.ns);
    let (code, reason) = code_of(pods.evict("ev-a", &EvictParams::default()).await)?;
    ensure!((code, reason.as_str()) == (429, "TooManyRequests"), "eviction under a spent budget: {code} {reason}");
    // A pod not yet running (Pending) is evictable whatever the budget.
    pods.create(&PostParams::default(), &pod_json("ev-pending", json!({"app": "web"}), None)).await.ctx("pod")?;
    pods.evict("ev-pending", &EvictParams::default()).await.ctx("evict pending")?;
    ensure!(pods.get_opt("ev-pending").await.ctx("get")?.is_none(), "pending pod not deleted at once");
    Ok(())
}

async fn garbage_collection(p: &Probe) -> Outcome {
    let api: Api<ConfigMap> = Api::namespaced(p.client.clone(), &p.ns);
    let owner = api.create(&PostParams::default(), &cm("owner")).await.ctx("owner")?;
    let mut dep = cm("dependent");
    dep.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.uid().unwrap_or_default(),
        ..Default::default()
    }]);
    api.create(&PostParams::default(), &dep).await.ctx("dependent")?;
    api.delete("owner", &DeleteParams::default()).await.ctx("delete owner")?;
    eventually("dependent collected", || async {
        ensure!(api.get_opt("dependent").await.ctx("get")?.is_none(), "dependent still there");
        Ok(())
    })
    .await
}

async fn node_not_ready_taint(p: &Probe) -> Outcome {
    let api: Api<Node> = Api::all(p.client.clone());
    let name = format!("probe-node-{}", p.suffix);
    let mut n = Node::default();
    n.metadata.name = Some(name.clone());
    let created = api.create(&PostParams::default(), &n).await.ctx("node")?;
    let taints = created.spec.and_then(|s| s.taints).unwrap_or_default();
    let result = if taints.iter().any(|t| t.key == "node.kubernetes.io/not-ready" && t.effect == "NoSchedule") {
        Ok(())
    } else {
        Err(format!("no not-ready taint on a new node: {taints:?}"))
    };
    api.delete(&name, &DeleteParams::default()).await.ctx("delete node")?;
    result
}

async fn lease_conflicts(p: &Probe) -> Outcome {
    let api: Api<Lease> = Api::namespaced(p.client.clone(), &p.ns);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }))
    .map_err(|e| e.to_string())?;
    let created = api.create(&PostParams::default(), &lease).await.ctx("create")?;
    let (code, _) = code_of(api.create(&PostParams::default(), &lease).await)?;
    ensure!(code == 409, "second create: {code}");
    let take = |holder: &str| {
        let mut l = created.clone();
        if let Some(s) = l.spec.as_mut() {
            s.holder_identity = Some(holder.into());
        }
        l
    };
    api.replace("leader", &PostParams::default(), &take("b")).await.ctx("first candidate")?;
    let (code, _) = code_of(api.replace("leader", &PostParams::default(), &take("c")).await)?;
    ensure!(code == 409, "second candidate with the same resourceVersion: {code}");
    Ok(())
}

async fn watch_replays_from_a_resource_version(p: &Probe) -> Outcome {
    let api: Api<ConfigMap> = Api::namespaced(p.client.clone(), &p.ns);
    let rv = api.list(&ListParams::default()).await.ctx("list")?.metadata.resource_version.unwrap_or_default();
    api.create(&PostParams::default(), &cm("watched")).await.ctx("create")?;
    let stream = api.watch(&WatchParams::default().timeout(10), &rv).await.ctx("watch")?;
    let mut stream = stream.boxed();
    let first = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .map_err(|_| "no event".to_string())?
        .ctx("event")?;
    match first {
        Some(WatchEvent::Added(c)) if c.name_any() == "watched" => Ok(()),
        other => Err(format!("expected ADDED watched, got {other:?}")),
    }
}

async fn json_patch_test_failure_is_invalid(p: &Probe) -> Outcome {
    let api: Api<ConfigMap> = Api::namespaced(p.client.clone(), &p.ns);
    api.create(&PostParams::default(), &cm("jp")).await.ctx("create")?;
    let patch: json_patch::Patch = serde_json::from_value(json!([{"op": "test", "path": "/data/k", "value": "nope"}]))
        .map_err(|e| e.to_string())?;
    let (code, _) = code_of(api.patch("jp", &PatchParams::default(), &Patch::<()>::Json(patch)).await)?;
    ensure!(code == 422, "failed test op: {code}");
    Ok(())
}

fn checks() -> Vec<Check> {
    vec![
        ("resourceVersion changes on every write, not on no-ops", |p| {
            Box::pin(resource_version_changes_on_every_write(p))
        }),
        ("stale update conflicts", |p| Box::pin(stale_update_conflicts(p))),
        ("generation and the status subresource", |p| Box::pin(generation_and_status_subresource(p))),
        ("finalizers hold deletion", |p| Box::pin(finalizers_hold_deletion(p))),
        ("label and field selectors", |p| Box::pin(selectors(p))),
        ("pods/binding and graceful deletion", |p| Box::pin(binding(p))),
        ("pods/eviction and PDB status", |p| Box::pin(eviction_and_budgets(p))),
        ("garbage collection", |p| Box::pin(garbage_collection(p))),
        ("not-ready taint on new nodes", |p| Box::pin(node_not_ready_taint(p))),
        ("lease conflicts", |p| Box::pin(lease_conflicts(p))),
        ("watch replays from a resourceVersion", |p| Box::pin(watch_replays_from_a_resource_version(p))),
        ("JSON patch test failure is 422", |p| Box::pin(json_patch_test_failure_is_invalid(p))),
    ]
}

static RUN: AtomicUsize = AtomicUsize::new(0);

/// Runs every check in its own namespace; returns the failures.
async fn run_probe(client: Client) -> Vec<String> {
    let run = format!("{}-{}", std::process::id(), RUN.fetch_add(1, Ordering::SeqCst));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut failures = Vec::new();
    for (i, (name, check)) in checks().into_iter().enumerate() {
        let ns = format!("probe-{run}-{i}");
        let mut n = Namespace::default();
        n.metadata.name = Some(ns.clone());
        if let Err(e) = namespaces.create(&PostParams::default(), &n).await {
            failures.push(format!("{name}: namespace: {e}"));
            continue;
        }
        let probe = Probe { client: client.clone(), ns: ns.clone(), suffix: format!("{run}-{i}") };
        let outcome = check(&probe).await;
        eprintln!("probe: {name}: {}", outcome.as_ref().map_or_else(|e| format!("FAILED: {e}"), |()| "ok".into()));
        if let Err(e) = outcome {
            failures.push(format!("{name}: {e}"));
        }
        // Clean up: bound pods would wait for a kubelet, so remove them at once, then the namespace.
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let _ = pods
            .delete_collection(
                &DeleteParams { grace_period_seconds: Some(0), ..Default::default() },
                &ListParams::default(),
            )
            .await;
        let _ = namespaces.delete(&ns, &DeleteParams::default()).await;
    }
    failures
}

#[tokio::test]
async fn probe_passes_against_the_in_process_server() {
    let server = ApiServer::new();
    let failures = run_probe(server.client()).await;
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test]
#[ignore = "needs a real cluster: set KARPENTER_PROBE_SERVER to a plain-HTTP API endpoint (kubectl proxy)"]
async fn probe_passes_against_a_real_cluster() {
    let url = std::env::var("KARPENTER_PROBE_SERVER").expect("KARPENTER_PROBE_SERVER (e.g. http://127.0.0.1:8001)");
    let client =
        Client::try_from(kube::Config::new(url.parse().expect("KARPENTER_PROBE_SERVER is a URL"))).expect("client");
    let failures = run_probe(client).await;
    assert!(failures.is_empty(), "{failures:#?}");
}
