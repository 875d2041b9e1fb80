//! The in-process API server through the real kube client: CRUD, resourceVersion, generation, status
//! subresource, finalizers, selectors, patches, errors, discovery.
#![cfg(feature = "apiserver")]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use karpenter_api::nodeclaim::NodeClaim;
use karpenter_api::nodepool::NodePool;
use karpenter_testing::apiserver::{APPLY_REFUSED, ApiServer};
use karpenter_testing::{NodeClaimOptions, NodePoolOptions, PodOptions, node_claim, node_pool, pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Error, ResourceExt};
use serde_json::json;

fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
    c.data = Some(BTreeMap::from([("k".to_string(), "v".to_string())]));
    c
}

fn api_err(e: Error) -> (u16, String, String) {
    match e {
        Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn rv<K: kube::Resource>(o: &K) -> String {
    o.meta().resource_version.clone().expect("resourceVersion")
}

fn client() -> (ApiServer, Client) {
    let s = ApiServer::new();
    let c = s.client();
    (s, c)
}

#[tokio::test]
async fn create_get_and_errors_are_real_status_objects() {
    let (_s, c) = client();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let created = cms.create(&PostParams::default(), &cm("a", &[])).await.expect("create");
    assert!(created.metadata.uid.is_some() && created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(cms.get("a").await.expect("get"), created);

    let (code, reason, msg) = api_err(cms.get("missing").await.expect_err("404"));
    assert_eq!((code, reason.as_str(), msg.as_str()), (404, "NotFound", "configmaps \"missing\" not found"));
    let (code, reason, _) = api_err(cms.create(&PostParams::default(), &cm("a", &[])).await.expect_err("409"));
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));

    // generateName
    let mut g = ConfigMap::default();
    g.metadata.generate_name = Some("gen-".into());
    let a = cms.create(&PostParams::default(), &g).await.expect("generateName");
    let b = cms.create(&PostParams::default(), &g).await.expect("generateName");
    assert!(a.name_any().starts_with("gen-") && a.name_any().len() == 9, "{}", a.name_any());
    assert_ne!(a.name_any(), b.name_any());

    // Namespaced kinds need their namespace.
    let elsewhere: Api<ConfigMap> = Api::namespaced(c.clone(), "team-a");
    let (code, _, msg) = api_err(elsewhere.create(&PostParams::default(), &cm("x", &[])).await.expect_err("no ns"));
    assert_eq!((code, msg.as_str()), (404, "namespaces \"team-a\" not found"));
    let nss: Api<Namespace> = Api::all(c.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("team-a".into());
    let ns = nss.create(&PostParams::default(), &ns).await.expect("namespace");
    assert_eq!(ns.status.and_then(|s| s.phase).as_deref(), Some("Active"));
    elsewhere.create(&PostParams::default(), &cm("x", &[])).await.expect("now it exists");

    // Cluster-scoped list across namespaces sees both.
    let all: Api<ConfigMap> = Api::all(c);
    assert_eq!(all.list(&ListParams::default()).await.expect("list").items.len(), 4);
}

#[tokio::test]
async fn resource_version_changes_on_every_write_and_not_on_no_ops() {
    let (server, c) = client();
    let cms: Api<ConfigMap> = Api::namespaced(c, "default");
    let v0 = server.resource_version();
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.expect("create");
    let mut seen = vec![rv(&a)];
    let mut cur = a;
    for i in 0..3 {
        cur.data = Some(BTreeMap::from([("i".to_string(), i.to_string())]));
        cur = cms.replace("a", &PostParams::default(), &cur).await.expect("update");
        seen.push(rv(&cur));
    }
    let patched = cms
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})))
        .await
        .expect("patch");
    seen.push(rv(&patched));
    let mut dedup = seen.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), seen.len(), "every write has its own resourceVersion: {seen:?}");
    assert_eq!(server.resource_version(), v0 + 5);
    // A patch that changes nothing is not a write.
    let same = cms
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})))
        .await
        .expect("no-op");
    assert_eq!(rv(&same), rv(&patched));
    assert_eq!(server.resource_version(), v0 + 5);
}

#[tokio::test]
async fn stale_updates_conflict_and_updates_need_a_resource_version() {
    let (_s, c) = client();
    let cms: Api<ConfigMap> = Api::namespaced(c, "default");
    let a = cms.create(&PostParams::default(), &cm("a", &[])).await.expect("create");
    let mut first = a.clone();
    first.data = Some(BTreeMap::from([("who".to_string(), "first".to_string())]));
    cms.replace("a", &PostParams::default(), &first).await.expect("first writer wins");
    let mut second = a.clone();
    second.data = Some(BTreeMap::from([("who".to_string(), "second".to_string())]));
    let (code, reason, msg) = api_err(cms.replace("a", &PostParams::default(), &second).await.expect_err("stale"));
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(msg.contains("the object has been modified"), "{msg}");

    let mut unconditional = second.clone();
    unconditional.metadata.resource_version = None;
    let (code, reason, _) = api_err(cms.replace("a", &PostParams::default(), &unconditional).await.expect_err("no rv"));
    assert_eq!((code, reason.as_str()), (422, "Invalid"));

    // A merge patch carrying a stale resourceVersion is a precondition too.
    let stale = json!({"metadata": {"resourceVersion": rv(&a)}, "data": {"who": "patch"}});
    let (code, _, _) =
        api_err(cms.patch("a", &PatchParams::default(), &Patch::Merge(stale)).await.expect_err("stale patch"));
    assert_eq!(code, 409);
    assert_eq!(cms.get("a").await.expect("get").data.and_then(|d| d.get("who").cloned()).as_deref(), Some("first"));
}

#[tokio::test]
async fn generation_tracks_spec_and_status_subresource_is_separate() {
    let (_s, c) = client();
    let pools: Api<NodePool> = Api::all(c);
    let mut np = node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() });
    np.status = Some(serde_json::from_value(json!({"nodes": 7})).expect("status"));
    let created = pools.create(&PostParams::default(), &np).await.expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.status.is_none(), "status sent on create is dropped for kinds with a status subresource");

    let labelled = pools
        .patch("default", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})))
        .await
        .expect("label");
    assert_eq!(labelled.metadata.generation, Some(1));
    assert_ne!(rv(&labelled), rv(&created));

    let weighted = pools
        .patch("default", &PatchParams::default(), &Patch::Merge(json!({"spec": {"weight": 10}})))
        .await
        .expect("spec");
    assert_eq!(weighted.metadata.generation, Some(2));
    assert_eq!(weighted.spec.weight, Some(10));

    // Main-resource writes ignore status.
    let ignored = pools
        .patch("default", &PatchParams::default(), &Patch::Merge(json!({"status": {"nodes": 3}})))
        .await
        .expect("status on main");
    assert!(ignored.status.is_none());
    assert_eq!(rv(&ignored), rv(&weighted), "nothing changed, nothing written");

    // Status writes ignore spec and metadata, and do not bump generation.
    let st = pools
        .patch_status(
            "default",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"weight": 99}, "metadata": {"labels": {"team": "b"}}, "status": {"nodes": 3}}),
            ),
        )
        .await
        .expect("status");
    assert_eq!(st.metadata.generation, Some(2));
    assert_eq!(st.spec.weight, Some(10));
    assert_eq!(st.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(serde_json::to_value(&st.status).expect("json")["nodes"], 3);

    // replace_status with a stale resourceVersion conflicts.
    let (code, _, _) =
        api_err(pools.replace_status("default", &PostParams::default(), &weighted).await.expect_err("stale"));
    assert_eq!(code, 409);

    // Pods: status on create becomes Pending, whatever was sent.
    let pods: Api<Pod> = Api::namespaced(pools.clone().into_client(), "default");
    let p = pod(PodOptions { name: Some("p".into()), phase: Some("Running".into()), ..Default::default() });
    let created = pods.create(&PostParams::default(), &p).await.expect("pod");
    let status = created.status.expect("status");
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    assert!(status.conditions.is_none());
}

#[tokio::test]
async fn finalizers_hold_deletion_until_the_last_one_is_removed() {
    let (_s, c) = client();
    let claims: Api<NodeClaim> = Api::all(c);
    let nc = node_claim(NodeClaimOptions {
        name: Some("claim".into()),
        finalizers: vec!["karpenter.sh/termination".into()],
        ..Default::default()
    });
    claims.create(&PostParams::default(), &nc).await.expect("create");
    let deleting = claims.delete("claim", &DeleteParams::default()).await.expect("delete");
    let obj = deleting.left().expect("the object comes back while deletion is pending");
    assert!(obj.metadata.deletion_timestamp.is_some());
    let still = claims.get("claim").await.expect("still there");
    assert!(still.metadata.deletion_timestamp.is_some());
    // A second delete changes nothing.
    claims.delete("claim", &DeleteParams::default()).await.expect("delete again");
    assert_eq!(rv(&claims.get("claim").await.expect("get")), rv(&still));

    let (code, _, msg) = api_err(
        claims
            .patch(
                "claim",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": ["karpenter.sh/termination", "x/y"]}})),
            )
            .await
            .expect_err("no new finalizers"),
    );
    assert_eq!(code, 422, "{msg}");

    let patch: json_patch_ops::Ops = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers/0", "value": "karpenter.sh/termination"},
        {"op": "remove", "path": "/metadata/finalizers/0"}
    ]))
    .expect("ops");
    claims.patch("claim", &PatchParams::default(), &Patch::Json::<()>(patch.0)).await.expect("remove finalizer");
    let (code, _, _) = api_err(claims.get("claim").await.expect_err("gone"));
    assert_eq!(code, 404);
}

/// RFC 6902 operations from JSON.
mod json_patch_ops {
    #[derive(serde::Deserialize)]
    pub struct Ops(pub json_patch::Patch);
}

#[tokio::test]
async fn bound_pods_are_deleted_gracefully_unbound_ones_at_once() {
    let (_s, c) = client();
    let pods: Api<Pod> = Api::namespaced(c, "default");
    let bound = pod(PodOptions { name: Some("bound".into()), node_name: Some("node-a".into()), ..Default::default() });
    let unbound = pod(PodOptions { name: Some("unbound".into()), ..Default::default() });
    pods.create(&PostParams::default(), &bound).await.expect("bound");
    pods.create(&PostParams::default(), &unbound).await.expect("unbound");

    pods.delete("unbound", &DeleteParams::default()).await.expect("delete");
    assert_eq!(api_err(pods.get("unbound").await.expect_err("gone")).0, 404);

    let pending = pods.delete("bound", &DeleteParams::default()).await.expect("delete").left().expect("pending");
    assert_eq!(pending.metadata.deletion_grace_period_seconds, Some(30));
    let ts = pending.metadata.deletion_timestamp.expect("deletionTimestamp");
    let created = pending.metadata.creation_timestamp.expect("creation");
    assert!(ts.0 > created.0, "deletionTimestamp is now + grace");
    pods.get("bound").await.expect("kept until the kubelet confirms");
    pods.delete("bound", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.expect("force");
    assert_eq!(api_err(pods.get("bound").await.expect_err("gone")).0, 404);
}

#[tokio::test]
async fn delete_preconditions_and_collection() {
    let (_s, c) = client();
    let cms: Api<ConfigMap> = Api::namespaced(c, "default");
    for (n, app) in [("a", "web"), ("b", "web"), ("c", "db")] {
        cms.create(&PostParams::default(), &cm(n, &[("app", app)])).await.expect("create");
    }
    let (code, _, _) = api_err(
        cms.delete(
            "a",
            &DeleteParams {
                preconditions: Some(kube::api::Preconditions { uid: Some("nope".into()), resource_version: None }),
                ..Default::default()
            },
        )
        .await
        .expect_err("precondition"),
    );
    assert_eq!(code, 409);
    let deleted = cms
        .delete_collection(&DeleteParams::default(), &ListParams::default().labels("app=web"))
        .await
        .expect("deletecollection")
        .left()
        .expect("list");
    assert_eq!(deleted.items.len(), 2);
    let left: Vec<String> =
        cms.list(&ListParams::default()).await.expect("list").items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(left, ["c"]);
}

#[tokio::test]
async fn label_and_field_selectors() {
    let (_s, c) = client();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    for (n, labels) in
        [("a", vec![("app", "web"), ("tier", "1")]), ("b", vec![("app", "db")]), ("c", vec![("tier", "2")])]
    {
        cms.create(&PostParams::default(), &cm(n, &labels)).await.expect("create");
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| l.items.iter().map(ResourceExt::name_any).collect::<Vec<_>>();
    let sel = |s: &str| ListParams::default().labels(s);
    assert_eq!(names(cms.list(&sel("app=web")).await.expect("=")), ["a"]);
    assert_eq!(names(cms.list(&sel("app==db")).await.expect("==")), ["b"]);
    assert_eq!(names(cms.list(&sel("app!=web")).await.expect("!=")), ["b", "c"]);
    assert_eq!(names(cms.list(&sel("app in (web,db)")).await.expect("in")), ["a", "b"]);
    assert_eq!(names(cms.list(&sel("app notin (web)")).await.expect("notin")), ["b", "c"]);
    assert_eq!(names(cms.list(&sel("tier")).await.expect("exists")), ["a", "c"]);
    assert_eq!(names(cms.list(&sel("!tier")).await.expect("!exists")), ["b"]);
    assert_eq!(names(cms.list(&sel("app,tier=1")).await.expect("and")), ["a"]);
    let (code, _, _) = api_err(cms.list(&sel("app in web")).await.expect_err("bad selector"));
    assert_eq!(code, 400);

    assert_eq!(names(cms.list(&ListParams::default().fields("metadata.name=b")).await.expect("name")), ["b"]);
    assert_eq!(
        names(cms.list(&ListParams::default().fields("metadata.namespace!=default")).await.expect("ns")),
        Vec::<String>::new()
    );
    let (code, reason, msg) =
        api_err(cms.list(&ListParams::default().fields("data.k=v")).await.expect_err("unsupported"));
    assert_eq!((code, reason.as_str(), msg.as_str()), (400, "BadRequest", "field label not supported: data.k"));

    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod(PodOptions { name: Some("on-a".into()), node_name: Some("a".into()), ..Default::default() }),
    )
    .await
    .expect("pod");
    pods.create(&PostParams::default(), &pod(PodOptions { name: Some("pending".into()), ..Default::default() }))
        .await
        .expect("pod");
    let pnames = |l: kube::core::ObjectList<Pod>| l.items.iter().map(ResourceExt::name_any).collect::<Vec<_>>();
    assert_eq!(pnames(pods.list(&ListParams::default().fields("spec.nodeName=a")).await.expect("nodeName")), ["on-a"]);
    assert_eq!(pnames(pods.list(&ListParams::default().fields("spec.nodeName=")).await.expect("unbound")), ["pending"]);
    assert_eq!(
        pnames(pods.list(&ListParams::default().fields("status.phase=Pending,spec.nodeName!=")).await.expect("phase")),
        ["on-a"]
    );

    let claims: Api<NodeClaim> = Api::all(c);
    let (code, _, msg) =
        api_err(claims.list(&ListParams::default().fields("spec.nodeClassRef.name=x")).await.expect_err("crd"));
    assert_eq!((code, msg.as_str()), (400, "field label not supported: spec.nodeClassRef.name"));
    claims.list(&ListParams::default().fields("metadata.name=x")).await.expect("metadata.name on a CRD");
}

#[tokio::test]
async fn list_pages_with_limit_and_continue() {
    let (_s, c) = client();
    let cms: Api<ConfigMap> = Api::namespaced(c, "default");
    for i in 0..7 {
        cms.create(&PostParams::default(), &cm(&format!("cm-{i}"), &[])).await.expect("create");
    }
    let first = cms.list(&ListParams::default().limit(3)).await.expect("page 1");
    let rv0 = first.metadata.resource_version.clone();
    let mut names: Vec<String> = first.items.iter().map(ResourceExt::name_any).collect();
    let mut token = first.metadata.continue_.clone();
    // A write between pages does not change the list's resourceVersion.
    cms.create(&PostParams::default(), &cm("zz-late", &[])).await.expect("late");
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = cms.list(&ListParams::default().limit(3).continue_token(&t)).await.expect("page");
        assert_eq!(page.metadata.resource_version, rv0);
        names.extend(page.items.iter().map(ResourceExt::name_any));
        token = page.metadata.continue_;
    }
    assert_eq!(names[..7], (0..7).map(|i| format!("cm-{i}")).collect::<Vec<_>>()[..]);
}

#[tokio::test]
async fn patches_json_merge_strategic_and_apply() {
    let (_s, c) = client();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    cms.create(&PostParams::default(), &cm("a", &[("app", "web")])).await.expect("create");
    let pp = PatchParams::default();

    let ops: json_patch_ops::Ops = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/labels/app", "value": "web"},
        {"op": "replace", "path": "/metadata/labels/app", "value": "api"},
        {"op": "add", "path": "/data/extra", "value": "1"}
    ]))
    .expect("ops");
    let p = cms.patch("a", &pp, &Patch::Json::<()>(ops.0)).await.expect("json patch");
    assert_eq!(p.labels().get("app").map(String::as_str), Some("api"));
    assert_eq!(p.data.as_ref().and_then(|d| d.get("extra")).map(String::as_str), Some("1"));

    let failing: json_patch_ops::Ops =
        serde_json::from_value(json!([{"op": "test", "path": "/metadata/labels/app", "value": "web"}])).expect("ops");
    let (code, _, _) = api_err(cms.patch("a", &pp, &Patch::Json::<()>(failing.0)).await.expect_err("test op fails"));
    assert_eq!(code, 422);

    let m = cms.patch("a", &pp, &Patch::Merge(json!({"data": {"extra": null}}))).await.expect("merge");
    assert!(m.data.as_ref().is_some_and(|d| !d.contains_key("extra")));

    // Strategic merge patch: only where it equals a merge patch, and never on custom resources.
    let s =
        cms.patch("a", &pp, &Patch::Strategic(json!({"metadata": {"annotations": {"a": "b"}}}))).await.expect("smp");
    assert_eq!(s.annotations().get("a").map(String::as_str), Some("b"));
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    pods.create(&PostParams::default(), &pod(PodOptions { name: Some("p".into()), ..Default::default() }))
        .await
        .expect("pod");
    let (code, reason, _) = api_err(
        pods.patch("p", &pp, &Patch::Strategic(json!({"spec": {"tolerations": [{"key": "k", "operator": "Exists"}]}})))
            .await
            .expect_err("smp list"),
    );
    assert_eq!((code, reason.as_str()), (415, "UnsupportedMediaType"));
    let pools: Api<NodePool> = Api::all(c.clone());
    pools
        .create(&PostParams::default(), &node_pool(NodePoolOptions { name: Some("np".into()), ..Default::default() }))
        .await
        .expect("np");
    let (code, _, _) = api_err(
        pools.patch("np", &pp, &Patch::Strategic(json!({"spec": {"weight": 1}}))).await.expect_err("smp on a CRD"),
    );
    assert_eq!(code, 415);

    // Server-side apply is refused, with the rule in the message.
    let (code, reason, msg) = api_err(
        cms.patch(
            "a",
            &PatchParams::apply("karpenter"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})),
        )
        .await
        .expect_err("apply"),
    );
    assert_eq!((code, reason.as_str(), msg.as_str()), (415, "UnsupportedMediaType", APPLY_REFUSED));
}

#[tokio::test]
async fn scale_subresource_of_node_pools() {
    let (_s, c) = client();
    let pools: Api<NodePool> = Api::all(c);
    let static_pool = NodePoolOptions {
        name: Some("np".into()),
        replicas: Some(1),
        limits: [("nodes", "5")].into(),
        ..Default::default()
    };
    pools.create(&PostParams::default(), &node_pool(static_pool)).await.expect("np");
    let scaled = pools
        .patch_scale("np", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}})))
        .await
        .expect("scale");
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(3));
    let np = pools.get("np").await.expect("get");
    assert_eq!(np.spec.replicas, Some(3));
    assert_eq!(np.metadata.generation, Some(2));
    assert_eq!(pools.get_scale("np").await.expect("get scale").spec.and_then(|s| s.replicas), Some(3));

    // A dynamic NodePool cannot become static: the CRD's CEL transition rule answers 422.
    pools
        .create(
            &PostParams::default(),
            &node_pool(NodePoolOptions { name: Some("dynamic".into()), ..Default::default() }),
        )
        .await
        .expect("dynamic");
    let (code, reason, msg) = api_err(
        pools
            .patch_scale("dynamic", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 3}})))
            .await
            .expect_err("transition rule"),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(msg.contains("replicas cannot be added or removed after creation"), "{msg}");
}

#[tokio::test]
async fn custom_resources_follow_their_crd_schema() {
    let (_s, c) = client();
    let pools: Api<NodePool> = Api::all(c);
    pools
        .create(&PostParams::default(), &node_pool(NodePoolOptions { name: Some("np".into()), ..Default::default() }))
        .await
        .expect("np");
    let pp = PatchParams::default();
    // Wrong type, out of range, unknown enum value: 422 Invalid naming the field.
    let (code, _, msg) =
        api_err(pools.patch("np", &pp, &Patch::Merge(json!({"spec": {"weight": "heavy"}}))).await.expect_err("type"));
    assert_eq!(code, 422);
    assert!(msg.contains("spec.weight"), "{msg}");
    let (code, _, msg) =
        api_err(pools.patch("np", &pp, &Patch::Merge(json!({"spec": {"weight": 1000}}))).await.expect_err("range"));
    assert_eq!(code, 422, "{msg}");
    // Unknown fields are pruned, as for any structural schema.
    let p = pools.patch("np", &pp, &Patch::Merge(json!({"spec": {"notAField": 1}}))).await.expect("pruned");
    let raw: Api<kube::api::DynamicObject> =
        Api::all_with(pools.clone().into_client(), &kube::discovery::ApiResource::erase::<NodePool>(&()));
    let stored = raw.get("np").await.expect("get");
    assert!(stored.data["spec"].get("notAField").is_none(), "{}", stored.data["spec"]);
    assert_eq!(p.metadata.generation, Some(1), "a pruned-away change is no change");
}

#[tokio::test]
async fn raw_requests_never_panic_the_server() {
    use tower::{Service, ServiceExt};
    let server = ApiServer::new();
    let mut svc = server.service();
    let cases: Vec<(&str, &str, &str, &[u8], u16)> = vec![
        ("POST", "/api/v1/namespaces/default/configmaps", "application/json", b"{not json", 400),
        ("POST", "/api/v1/namespaces/default/configmaps", "application/json", b"[1,2]", 400),
        ("POST", "/api/v1/namespaces/default/configmaps", "application/json", br#"{"metadata": 5}"#, 400),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            br#"{"kind": "Pod", "metadata": {"name": "x"}}"#,
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            br#"{"metadata": {"name": "Bad_Name"}}"#,
            422,
        ),
        ("POST", "/api/v1/namespaces/default/configmaps", "application/yaml", b"a: b", 415),
        ("GET", "/api/v1/secrets", "", b"", 404),
        ("GET", "/apis/nope/v1/things", "", b"", 404),
        ("GET", "/api/v1/namespaces/default/configmaps/a/b/c/d", "", b"", 404),
        ("GET", "/api/v1/namespaces/default/configmaps?limit=x", "", b"", 400),
        ("GET", "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=abc", "", b"", 400),
        ("PATCH", "/api/v1/namespaces/default/configmaps/none", "application/merge-patch+json", b"{}", 404),
        ("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", b"{}", 405),
        ("DELETE", "/api/v1/namespaces/default/configmaps/x", "application/json", b"{oops", 400),
        ("GET", "/api/v1/namespaces/default/pods/p/exec", "", b"", 404),
        ("GET", "/%ff%fe", "", b"", 404),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            br#"{"metadata": {"name": "p"}, "spec": {"nodeName": "n"}}"#,
            201,
        ),
        ("DELETE", "/api/v1/namespaces/default/pods/p?gracePeriodSeconds=9223372036854775807", "", b"", 422),
        (
            "DELETE",
            "/api/v1/namespaces/default/pods/p",
            "application/json",
            br#"{"propagationPolicy": "Sideways"}"#,
            400,
        ),
        ("GET", "/api/v1/namespaces/default/pods?labelSelector=a%20in%20(b", "", b"", 400),
        ("GET", "/api/v1/namespaces/default/pods?continue=garbage", "", b"", 400),
        ("GET", "/api/v1/namespaces/default/pods?dryRun=Some", "", b"", 400),
        // Built-in kinds are decoded into their types: a wrong field type is a bad request.
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            br#"{"metadata": {"name": "q"}, "spec": {"containers": "x"}}"#,
            400,
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            br#"{"metadata": {"name": "u"}, "bogus": 1}"#,
            201,
        ),
        ("GET", "/api/v1/namespaces/default/configmaps/u", "", b"", 200),
    ];
    for (method, uri, ct, body, want) in cases {
        let mut req = http::Request::builder().method(method).uri(uri);
        if !ct.is_empty() {
            req = req.header("content-type", ct);
        }
        let req = req.body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(body))).expect("request");
        let resp = ServiceExt::<http::Request<http_body_util::Full<bytes::Bytes>>>::ready(&mut svc)
            .await
            .expect("ready")
            .call(req)
            .await
            .expect("infallible");
        assert_eq!(resp.status().as_u16(), want, "{method} {uri}");
        let body = http_body_util::BodyExt::collect(resp.into_body()).await.expect("body").to_bytes();
        let status: serde_json::Value = serde_json::from_slice(&body).expect("a Status object");
        if want < 300 {
            assert!(status.get("bogus").is_none(), "unknown fields of built-in kinds are dropped: {status}");
            continue;
        }
        assert_eq!(
            (status["kind"].as_str(), status["code"].as_u64()),
            (Some("Status"), Some(u64::from(want))),
            "{method} {uri}"
        );
    }
    // A watch whose timeout cannot be represented simply has none.
    let req = http::Request::builder()
        .uri("/api/v1/pods?watch=true&timeoutSeconds=18446744073709551615&allowWatchBookmarks=true")
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    let resp = ServiceExt::<http::Request<http_body_util::Full<bytes::Bytes>>>::ready(&mut svc)
        .await
        .expect("ready")
        .call(req)
        .await
        .expect("infallible");
    assert_eq!(resp.status().as_u16(), 200);
}

#[tokio::test]
async fn discovery_and_version() {
    let (_s, c) = client();
    let info = c.apiserver_version().await.expect("version");
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "33"));
    let discovery = kube::Discovery::new(c.clone()).run().await.expect("discovery");
    let (np, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(r, _)| r.kind == "NodePool")
        .expect("NodePool discovered");
    assert_eq!((np.group.as_str(), np.version.as_str(), np.plural.as_str()), ("karpenter.sh", "v1", "nodepools"));
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "nodepools/status" || s.plural == "status"));
    // A provider's node class is served when the kit is given it (the `kwok` feature here); EC2NodeClass only
    // when a test passes karpenter-aws's API (`ApiServerBuilder::node_classes`).
    for kind in ["Pod", "Node", "Lease", "DaemonSet", "PodDisruptionBudget", "KWOKNodeClass", "CSINode"] {
        assert!(discovery.groups().flat_map(|g| g.recommended_resources()).any(|(r, _)| r.kind == kind), "{kind}");
    }
    // The CRDs are served read-only.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(c);
    let names: Vec<String> =
        crds.list(&ListParams::default()).await.expect("crds").items.iter().map(ResourceExt::name_any).collect();
    assert!(names.contains(&"nodepools.karpenter.sh".to_string()), "{names:?}");
}

#[tokio::test]
async fn namespace_deletion_empties_the_namespace_first() {
    let (_s, c) = client();
    let nss: Api<Namespace> = Api::all(c.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("doomed".into());
    nss.create(&PostParams::default(), &ns).await.expect("ns");
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "doomed");
    cms.create(&PostParams::default(), &cm("plain", &[])).await.expect("cm");
    let pods: Api<Pod> = Api::namespaced(c.clone(), "doomed");
    let held = pod(PodOptions {
        name: Some("held".into()),
        namespace: Some("doomed".into()),
        finalizers: vec!["example.com/hold".into()],
        ..Default::default()
    });
    pods.create(&PostParams::default(), &held).await.expect("pod");

    let pending = nss.delete("doomed", &DeleteParams::default()).await.expect("delete").left().expect("terminating");
    assert_eq!(pending.status.and_then(|s| s.phase).as_deref(), Some("Terminating"));
    assert_eq!(api_err(cms.get("plain").await.expect_err("content deleted")).0, 404);
    assert!(pods.get("held").await.expect("held by its finalizer").metadata.deletion_timestamp.is_some());
    let (code, reason, _) =
        api_err(cms.create(&PostParams::default(), &cm("new", &[])).await.expect_err("terminating"));
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));

    pods.patch("held", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await
        .expect("release");
    assert_eq!(api_err(pods.get("held").await.expect_err("gone")).0, 404);
    assert_eq!(api_err(nss.get("doomed").await.expect_err("namespace gone once empty")).0, 404);
}

#[tokio::test]
async fn dry_run_writes_nothing() {
    let (server, c) = client();
    let cms: Api<ConfigMap> = Api::namespaced(c, "default");
    let before = server.resource_version();
    let dry = PostParams { dry_run: true, ..Default::default() };
    let would = cms.create(&dry, &cm("a", &[])).await.expect("dry create");
    assert_eq!(would.name_any(), "a");
    assert_eq!(api_err(cms.get("a").await.expect_err("not stored")).0, 404);
    assert_eq!(server.resource_version(), before);
    cms.create(&PostParams::default(), &cm("a", &[])).await.expect("create");
    cms.delete("a", &DeleteParams { dry_run: true, ..Default::default() }).await.expect("dry delete");
    cms.get("a").await.expect("still there");
    let patched = cms
        .patch("a", &PatchParams { dry_run: true, ..Default::default() }, &Patch::Merge(json!({"data": {"k": "w"}})))
        .await
        .expect("dry patch");
    assert_eq!(patched.data.and_then(|d| d.get("k").cloned()).as_deref(), Some("w"));
    assert_eq!(cms.get("a").await.expect("get").data.and_then(|d| d.get("k").cloned()).as_deref(), Some("v"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_concurrency_loses_no_increment() {
    const WRITERS: usize = 8;
    const EACH: usize = 15;
    let (_s, c) = client();
    let cms: Api<ConfigMap> = Api::namespaced(c, "default");
    let mut counter = cm("counter", &[]);
    counter.data = Some(BTreeMap::from([("n".to_string(), "0".to_string())]));
    cms.create(&PostParams::default(), &counter).await.expect("create");
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| {
            let cms = cms.clone();
            tokio::spawn(async move {
                let mut conflicts = 0usize;
                for _ in 0..EACH {
                    loop {
                        let mut cur = cms.get("counter").await.expect("get");
                        let n: usize =
                            cur.data.as_ref().and_then(|d| d.get("n")).and_then(|s| s.parse().ok()).expect("n");
                        cur.data = Some(BTreeMap::from([("n".to_string(), (n + 1).to_string())]));
                        match cms.replace("counter", &PostParams::default(), &cur).await {
                            Ok(_) => break,
                            Err(Error::Api(s)) if s.code == 409 => conflicts += 1,
                            Err(e) => panic!("unexpected {e}"),
                        }
                    }
                }
                conflicts
            })
        })
        .collect();
    let mut conflicts = 0;
    for t in tasks {
        conflicts += t.await.expect("join");
    }
    let n = cms.get("counter").await.expect("get").data.and_then(|d| d.get("n").cloned()).expect("n");
    assert_eq!(n, (WRITERS * EACH).to_string(), "no lost update ({conflicts} conflicts retried)");
}

#[tokio::test]
async fn metadata_is_validated_for_every_kind() {
    let (_s, c) = client();
    let cms: Api<ConfigMap> = Api::namespaced(c.clone(), "default");
    let (code, reason, msg) =
        api_err(cms.create(&PostParams::default(), &cm("a", &[("tier", "not valid")])).await.expect_err("label"));
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(msg.contains("metadata.labels"), "{msg}");
    cms.create(&PostParams::default(), &cm("a", &[("karpenter.sh/nodepool", "default")])).await.expect("valid");
    let long = "x".repeat(64);
    let (code, _, _) = api_err(
        cms.patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"k": long}}})))
            .await
            .expect_err("label value too long"),
    );
    assert_eq!(code, 422);
    let (code, _, _) = api_err(
        cms.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["no spaces allowed"]}})),
        )
        .await
        .expect_err("finalizer"),
    );
    assert_eq!(code, 422);
    let nss: Api<Namespace> = Api::all(c);
    let mut ns = Namespace::default();
    ns.metadata.name = Some("dotted.name".into());
    let (code, _, _) = api_err(nss.create(&PostParams::default(), &ns).await.expect_err("namespace names are labels"));
    assert_eq!(code, 422);
}

#[tokio::test]
async fn create_with_status_writes_the_status_after_create() {
    let (_s, c) = client();
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let p = karpenter_testing::unschedulable_pod(PodOptions { name: Some("pending".into()), ..Default::default() });
    let created = karpenter_testing::apiserver::create_with_status(&pods, &p).await.expect("create");
    let status = created.status.expect("status");
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let conditions = status.conditions.expect("conditions");
    assert!(conditions.iter().any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable")));
    let claims: Api<NodeClaim> = Api::all(c);
    let nc = node_claim(NodeClaimOptions { name: Some("c".into()), launched: true, ..Default::default() });
    let created = karpenter_testing::apiserver::create_with_status(&claims, &nc).await.expect("claim");
    assert!(created.status.is_some_and(|s| !s.conditions.is_empty()));
}
