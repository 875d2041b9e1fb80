//! How the operator takes a provider's node classes: [`NodeClassRegistration`], what the operator needs to know
//! of one node-class kind, and a [`NodeClassLookup`] fed by the API server.
//!
//! The operator names no provider. The binary hands the manager one registration per node-class kind of the
//! provider it runs (`Manager::with_node_class_registrations`), and every controller that reads node classes
//! works from those: the NodePool controllers resolve a NodePool's `nodeClassRef` through them
//! ([`crate::nodepool::NodeClassResolver`]), a kind that needs no cloud resources is marked `Ready` as soon as
//! it exists ([`crate::nodepool::nodeclass::ReadyOnSight`]), and a kind with status metrics gets upstream's
//! `operator_<kind>_status_condition_*` families ([`crate::observability::status`]).
//!
//! [`KubeNodeClasses`] holds the provider's node classes as their JSON, keyed by `(group, kind, name)`, kept
//! current by a kube-runtime watcher. [`KubeNodeClasses::start`] lists the kind once before it returns, so a provider handed the lookup never sees
//! an empty store at startup (a missing class fails a launch: a NodeClaim launched in that window would be
//! deleted for nothing), then keeps it current from a watcher task until the shutdown token is cancelled. The
//! lookup can hold several kinds: call `start` on the same store for each.

use std::sync::Arc;

use futures::StreamExt;
use karpenter_cloudprovider::{InMemoryNodeClasses, NodeClassKind, NodeClassLookup};
use kube::api::{Api, ApiResource, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One node-class kind of a provider, as the operator takes it (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeClassRegistration {
    /// Where the kind is served: group, version, kind and plural.
    pub api_resource: ApiResource,
    /// The kind needs no cloud resources, so a node class of it is `Ready` as soon as it exists: the operator
    /// sets `Ready=True` on each (upstream's kwok provider does the same for its node class).
    pub ready_on_sight: bool,
    /// The operator records `operator_<kind>_status_condition_*` and `operator_<kind>_termination_*` for the
    /// kind's objects, as upstream's AWS provider does for its node class with operatorpkg's status controller.
    pub status_metrics: bool,
}

impl NodeClassRegistration {
    /// A kind served at `api_resource`, neither ready on sight nor with status metrics.
    pub fn new(api_resource: ApiResource) -> Self {
        Self { api_resource, ready_on_sight: false, status_metrics: false }
    }

    /// The kind of the typed resource `K` (a provider's node-class type).
    pub fn of<K: Resource<DynamicType = ()>>() -> Self {
        Self::new(ApiResource::erase::<K>(&()))
    }

    /// The operator marks every node class of the kind `Ready` ([`NodeClassRegistration::ready_on_sight`]).
    pub fn ready_on_sight(mut self) -> Self {
        self.ready_on_sight = true;
        self
    }

    /// The operator records the kind's status-condition metrics ([`NodeClassRegistration::status_metrics`]).
    pub fn with_status_metrics(mut self) -> Self {
        self.status_metrics = true;
        self
    }

    /// The kind's group and kind, as a NodePool's `nodeClassRef` names them.
    pub fn kind(&self) -> NodeClassKind {
        NodeClassKind::new(&self.api_resource.group, &self.api_resource.kind)
    }
}

/// The watcher-fed lookup (see the module docs). Clones share the store.
#[derive(Debug, Clone, Default)]
pub struct KubeNodeClasses {
    store: InMemoryNodeClasses,
}

impl NodeClassLookup for KubeNodeClasses {
    fn get(&self, group: &str, kind: &str, name: &str) -> Option<Arc<Value>> {
        self.store.get(group, kind, name)
    }
}

fn group_kind<K: Resource<DynamicType = ()>>() -> (String, String) {
    (K::group(&()).into_owned(), K::kind(&()).into_owned())
}

impl KubeNodeClasses {
    /// An empty lookup.
    pub fn new() -> Self {
        Self::default()
    }

    fn put<K: Resource<DynamicType = ()> + Serialize>(&self, obj: &K) {
        let (group, kind) = group_kind::<K>();
        match serde_json::to_value(obj) {
            Ok(value) => self.store.insert_value(&group, &kind, &obj.name_any(), value),
            Err(e) => tracing::warn!(kind = %kind, name = %obj.name_any(), error = %e, "encoding node class"),
        }
    }

    fn forget<K: Resource<DynamicType = ()>>(&self, name: &str) {
        let (group, kind) = group_kind::<K>();
        self.store.remove(&group, &kind, name);
    }

    /// Lists kind `K` into the store, then spawns the watcher that keeps it current until `shutdown`. Fails when
    /// the first list fails (the CRD is not installed, or the API server cannot be reached).
    pub async fn start<K>(&self, client: Client, shutdown: CancellationToken) -> Result<(), kube::Error>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug + Send + Sync + 'static,
    {
        let api: Api<K> = Api::all(client);
        for obj in api.list(&ListParams::default()).await?.items {
            self.put(&obj);
        }
        let this = self.clone();
        tokio::spawn(async move { this.watch(api, shutdown).await });
        Ok(())
    }

    /// Keeps kind `K` current from a watcher until `shutdown` (a re-list replaces the kind's entries).
    pub async fn watch<K>(&self, api: Api<K>, shutdown: CancellationToken)
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug + Send + Sync + 'static,
    {
        let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
        let mut listing: Option<Vec<K>> = None;
        let mut known: Vec<String> = Vec::new();
        loop {
            let next = tokio::select! {
                () = shutdown.cancelled() => return,
                next = stream.next() => next,
            };
            match next {
                Some(Ok(watcher::Event::Apply(obj))) => {
                    self.put(&obj);
                    known.push(obj.name_any());
                }
                Some(Ok(watcher::Event::Delete(obj))) => self.forget::<K>(&obj.name_any()),
                Some(Ok(watcher::Event::Init)) => listing = Some(Vec::new()),
                Some(Ok(watcher::Event::InitApply(obj))) => listing.get_or_insert_default().push(obj),
                Some(Ok(watcher::Event::InitDone)) => {
                    let fresh = listing.take().unwrap_or_default();
                    let names: Vec<String> = fresh.iter().map(ResourceExt::name_any).collect();
                    for name in known.iter().filter(|n| !names.contains(n)) {
                        self.forget::<K>(name);
                    }
                    for obj in &fresh {
                        self.put(obj);
                    }
                    known = names;
                }
                Some(Err(error)) => tracing::warn!(kind = %K::kind(&()), %error, "node class watch failed, re-listing"),
                None => return,
            }
            known.sort();
            known.dedup();
        }
    }
}

/// A node-class kind no provider has, `example.dev/v1` `ToyNodeClass`, served by the in-process API server: the
/// tests that prove the operator takes any registered kind, naming none.
#[cfg(test)]
pub(crate) mod toy {
    use std::sync::Arc;

    use karpenter_cloudprovider::Clock;
    use karpenter_testing::apiserver::{ApiServer, Registry};
    use kube::api::ApiResource;

    use super::NodeClassRegistration;

    /// The made-up kind, neither ready on sight nor with status metrics.
    pub(crate) fn registration() -> NodeClassRegistration {
        NodeClassRegistration::new(ApiResource {
            group: "example.dev".into(),
            version: "v1".into(),
            api_version: "example.dev/v1".into(),
            kind: "ToyNodeClass".into(),
            plural: "toynodeclasses".into(),
        })
    }

    /// An API server serving the Karpenter CRDs and the made-up kind's (a status subresource, any fields).
    pub(crate) fn api_server(clock: Arc<dyn Clock>) -> ApiServer {
        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "toynodeclasses.example.dev"},
            "spec": {
                "group": "example.dev",
                "scope": "Cluster",
                "names": {"kind": "ToyNodeClass", "plural": "toynodeclasses", "singular": "toynodeclass",
                          "listKind": "ToyNodeClassList"},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                }],
            },
        });
        let mut crds = Registry::karpenter().crds().to_vec();
        crds.push(serde_json::from_value(crd).expect("a CRD"));
        ApiServer::builder().clock(clock).registry(Registry::with_crds(crds)).build()
    }

    /// A `ToyNodeClass` named `name` with no status.
    pub(crate) fn object(name: &str) -> kube::api::DynamicObject {
        kube::api::DynamicObject::new(name, &registration().api_resource)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use karpenter_kwok::api::KWOKNodeClass;
    use karpenter_kwok::testing::{KWOKNodeClassOptions, kwok_node_class};
    use karpenter_testing::apiserver::ApiServer;
    use kube::api::{DeleteParams, PostParams};

    use super::*;

    async fn eventually(mut f: impl FnMut() -> bool) -> bool {
        for _ in 0..200 {
            if f() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    #[tokio::test]
    async fn lists_before_returning_then_follows_creates_and_deletes() {
        let server = ApiServer::new();
        let client = server.client();
        let api: Api<KWOKNodeClass> = Api::all(client.clone());
        let class =
            |name: &str| kwok_node_class(KWOKNodeClassOptions { name: Some(name.into()), ..Default::default() });
        api.create(&PostParams::default(), &class("first")).await.unwrap();

        let lookup = KubeNodeClasses::new();
        let shutdown = CancellationToken::new();
        lookup.start::<KWOKNodeClass>(client.clone(), shutdown.clone()).await.unwrap();
        let (g, k) = (karpenter_kwok::api::GROUP, karpenter_kwok::api::KIND);
        assert!(lookup.get(g, k, "first").is_some(), "listed before start returns");
        assert!(lookup.get(g, k, "second").is_none());

        api.create(&PostParams::default(), &class("second")).await.unwrap();
        assert!(eventually(|| lookup.get(g, k, "second").is_some()).await, "a created class is seen");
        api.delete("first", &DeleteParams::default()).await.unwrap();
        assert!(eventually(|| lookup.get(g, k, "first").is_none()).await, "a deleted class is forgotten");
        assert!(lookup.get("karpenter.k8s.aws", "EC2NodeClass", "second").is_none(), "keys carry the kind");
        shutdown.cancel();
    }
}
