//! An in-process Kubernetes API server for controller tests (feature `apiserver`).
//!
//! [`ApiServer`] stores objects as JSON and answers the REST API the way the real `kube-apiserver` does, so that
//! code under test goes through the real `kube` client paths (`Api`, `watcher`, `reflector`, patches, finalizers)
//! without a cluster. [`ApiServer::client`] returns a `kube::Client` whose transport is the server itself, as a
//! tower service: no sockets, no TLS. It needs a tokio runtime (the client spawns its buffer task).
//! [`ApiServer::serve_tcp`] also serves it over plain HTTP on a local address for manual runs.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), kube::Error> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//! use karpenter_testing::apiserver::ApiServer;
//!
//! let server = ApiServer::new();
//! let cms: Api<ConfigMap> = Api::namespaced(server.client(), "default");
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("settings".into());
//! let created = cms.create(&PostParams::default(), &cm).await?;
//! assert!(created.metadata.resource_version.is_some());
//! # Ok(())
//! # }
//! ```
//!
//! # Served kinds
//!
//! core/v1 Pods, Nodes, Namespaces, Events, ConfigMaps, PersistentVolumeClaims, PersistentVolumes; apps/v1
//! DaemonSets; policy/v1 PodDisruptionBudgets; storage.k8s.io/v1 StorageClasses, CSINodes, VolumeAttachments;
//! coordination.k8s.io/v1 Leases; events.k8s.io/v1 Events; apiextensions.k8s.io/v1 CustomResourceDefinitions
//! (read-only, holding the installed CRDs); and the kinds of the CRDs `karpenter_api::crd` generates
//! (karpenter.sh/v1 NodePools with status and scale, NodeClaims with status, NodeOverlays, with the feature `kwok`
//! karpenter.kwok.sh/v1alpha1 KWOKNodeClasses, and any provider's node classes given to
//! [`ApiServerBuilder::provider`]), with scope and subresources read from the CRDs.
//! Namespaces `default`, `kube-system`, `kube-public` and `kube-node-lease` exist from the start.
//! `/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>` and `/apis/<group>/<version>` serve discovery
//! (the unaggregated documents, which `kube::Discovery::run` reads).
//!
//! # Semantics (as the real server)
//!
//! - **resourceVersion** is one opaque global counter that changes on every write; a write that changes
//!   nothing (an update or patch whose result equals the stored object) is not a write: same resourceVersion,
//!   no watch event.
//! - **create**: `generateName` appends 5 random-looking (deterministic) characters; 409 AlreadyExists;
//!   namespaced objects need an existing namespace (404 NotFound otherwise; 403 Forbidden while it terminates);
//!   `uid`, `creationTimestamp` (from the server's [`Clock`]) and `metadata.generation` = 1 are set;
//!   for kinds with a status subresource the status sent on create is dropped (Pods get `phase: Pending` and a
//!   `qosClass`, PVs/PVCs `phase: Pending`, Namespaces `phase: Active`; Nodes keep theirs, as the kubelet
//!   registers them).
//! - **update** (PUT) needs `metadata.resourceVersion` (422 otherwise, for every kind: stricter than the real
//!   server, which allows unconditional updates of a few kinds such as Nodes and ConfigMaps) and answers 409
//!   Conflict when it is stale. `metadata.generation` increases only when something outside `metadata` and
//!   `status` changes. For kinds with a status subresource, writes to the main resource keep the stored status
//!   and writes to `/status` change nothing but the status. System metadata (uid, creationTimestamp,
//!   deletionTimestamp, generation) cannot be changed by clients.
//! - **patch**: JSON merge patch (`application/merge-patch+json`) and JSON patch (RFC 6902, `test` ops
//!   included; a failing op is 422 Invalid). A patch that sets `metadata.resourceVersion` is a precondition (409
//!   when stale). Strategic merge patch: refused (415) on custom resources, as on the real server; on built-in
//!   kinds accepted only when it means the same as a JSON merge patch (no lists, no `$` directives), 415 with an
//!   explanation otherwise.
//! - **Server-side apply is not supported, on purpose**: `application/apply-patch+yaml` answers 415
//!   UnsupportedMediaType. Rule: karpenter-rs controllers must not use server-side apply; they write with JSON
//!   merge patches, JSON patches, or updates carrying a resourceVersion.
//! - **delete**: an object with finalizers gets `deletionTimestamp` (202 Accepted) and disappears when an update
//!   or patch removes its last finalizer; new finalizers cannot be added once it is being deleted (422). Pods bound
//!   to a node (and not Succeeded/Failed) are deleted gracefully: `deletionTimestamp` = now + grace period
//!   (`gracePeriodSeconds`, else `spec.terminationGracePeriodSeconds`, else 30) and
//!   `deletionGracePeriodSeconds`, until a DELETE with `gracePeriodSeconds: 0` (the kubelet's) removes them.
//!   Preconditions (uid, resourceVersion) give 409. Deleting a namespace deletes its content and removes the namespace once
//!   it is empty. `deletecollection` with selectors is served.
//! - **list**: `labelSelector` (`=`, `==`, `!=`, `in`, `notin`, exists, `!`exists, `>`, `<`);
//!   `fieldSelector` on `metadata.name` and `metadata.namespace` for every kind, plus the fields the real server
//!   indexes for Pods (`spec.nodeName`, `status.phase`, `spec.schedulerName`, …), Nodes
//!   (`spec.unschedulable`), Namespaces and core Events; any other field is 400 BadRequest (`field label not
//!   supported`), custom resources included. `limit`/`continue` paginate (a continue token older than the event
//!   history is 410 Expired). Lists always serve the latest state (`resourceVersion`/`resourceVersionMatch` are
//!   accepted but an older snapshot is never served).
//! - **watch**: without `resourceVersion` (or with `"0"`) a watch starts with synthetic ADDED events for the
//!   current state; with a resourceVersion it replays the retained history after it; a resourceVersion older
//!   than the history window ([`ApiServerBuilder::history_limit`] events) gets a 200 response carrying one
//!   ERROR event with a 410 Expired Status, exactly as the real server (kube-runtime's watcher re-lists).
//!   Selectors apply, and an object moving into or out of the selection is seen as ADDED or DELETED.
//!   `allowWatchBookmarks` sends BOOKMARK events every [`ApiServerBuilder::bookmark_interval`];
//!   `sendInitialEvents=true` ends the initial events with the `k8s.io/initial-events-end` bookmark;
//!   `timeoutSeconds` ends the stream.
//! - **metadata** is validated for every kind (422 Invalid): label keys and values, annotation keys and total size,
//!   finalizer names, owner references (required fields, at most one controller), object names (DNS-1123
//!   subdomains; labels for namespaces).
//! - **Garbage collection** through `metadata.ownerReferences`, as the real collector decides: when an
//!   object is removed, each dependent whose owners are all gone is deleted (background propagation, the
//!   default; chains follow, e.g. NodeClaim → Node → node Lease); a dependent that still has an owner only loses
//!   the references to the gone ones. A dependent created or updated with a reference to an owner that does not
//!   exist (same uid and kind) is collected too. Owners of kinds this server does not serve (Jobs,
//!   Deployments, …) are never judged gone (the real collector cannot resolve them either), so test pods may
//!   name such owners. ReplicaSets, StatefulSets and ReplicationControllers are served (for the controller's
//!   watchers) but, as no workload controller runs here and the test stand-ins name owners they never create,
//!   they are never judged gone either: unlike the real server, deleting one leaves its pods. `propagationPolicy: Foreground`: the owner gets `deletionTimestamp` and the `foregroundDeletion`
//!   finalizer, its dependents are deleted, and it is removed once no dependent with `blockOwnerDeletion: true`
//!   is left; `Orphan`: the dependents lose their reference and stay.
//! - **Node condition taints** (TaintNodesByCondition): a Node created without `Ready=True` gets
//!   `node.kubernetes.io/not-ready:NoSchedule` (the admission plugin); afterwards, as the node lifecycle
//!   controller, `Ready=True` removes it, `Ready=False` sets it, `Ready=Unknown` sets
//!   `node.kubernetes.io/unreachable:NoSchedule` instead. Other taints are left alone.
//! - **Leases** are plain objects with optimistic concurrency: of racing leader-election candidates that read
//!   the same resourceVersion one update wins and the others get 409 Conflict; concurrent creates give one
//!   success and 409 AlreadyExists.
//! - **pods/binding** (POST a v1 `Binding`): sets `spec.nodeName` and the `PodScheduled=True` condition of an
//!   unbound pod (one write); 409 Conflict when the pod is already bound (`pod p is already assigned to node
//!   "n"`), 404 for a missing pod, 422 for a target that is not a Node, 400 when the names differ.
//! - **pods/eviction** (POST a policy/v1 `Eviction`): pods in phase Pending, Succeeded or Failed, or already
//!   being deleted, are deleted regardless of budgets (the real server's rule: "not yet running" means phase
//!   Pending, not "not Ready"). Otherwise the PodDisruptionBudgets of the pod's namespace that select it decide:
//!   several → 500 (`This pod has more than one PodDisruptionBudget, which the eviction subresource does not
//!   support.`); one with `disruptionsAllowed: 0` → 429 TooManyRequests (`Cannot evict pod as it would violate
//!   the pod's disruption budget.`, with a `DisruptionBudget` cause `The disruption budget web needs 2 healthy
//!   pods and has 2 currently`), except for a pod that is not Ready when the policy is `AlwaysAllow` or (the
//!   default `IfHealthyBudget`) the budget is healthy (currentHealthy ≥ desiredHealthy > 0). An allowed
//!   eviction is a DELETE with the Eviction's `deleteOptions` (bound pods: graceful, see delete), answered
//!   with a 201 Success Status. Note: kube 5's `Api::evict` sends its `DeleteParams` under the key
//!   `delete_options`, which the real server ignores as an unknown field; so does this one (use
//!   `Api::create_subresource("eviction", …)` with a `policy/v1` `Eviction` to pass delete options).
//! - **PodDisruptionBudget status** is computed as the disruption controller does, after every write to a pod or
//!   budget of the namespace: `expectedPods` (the selected pods), `currentHealthy` (selected pods with
//!   `Ready=True` and no deletionTimestamp), `desiredHealthy` (`minAvailable`, or expected − `maxUnavailable`;
//!   percentages of expected, rounded up), `disruptionsAllowed` = max(0, healthy − desired) (0 while no pod is
//!   selected or when the budget cannot be computed), `observedGeneration` and the `DisruptionAllowed`
//!   condition. A nil selector selects nothing, an empty one everything (policy/v1). The counts are kept incrementally (each
//!   pod write costs O(budgets in its namespace)): creating 1,000 pods under one budget takes about 0.5 s in a
//!   debug build (`a_thousand_pods_under_one_budget`).
//! - Errors are `Status` objects with the real codes and reasons, so `kube` returns `kube::Error::Api`; no request
//!   can panic the server (malformed JSON is 400 BadRequest).
//!
//! # Known differences from a real API server
//!
//! - Built-in kinds are decoded into their `k8s-openapi` types: wrong field types and missing required fields are
//!   400 BadRequest (the real server answers 422 for some of these), unknown fields are dropped. No further
//!   validation or defaulting (Pod spec immutability, for one, is not enforced).
//! - Custom resources go through their CRD's structural schema as on the real server: unknown fields pruned,
//!   `default`s applied, types/required/enum/length/range/item-count checked, and the `x-kubernetes-validations`
//!   CEL rules evaluated by `kube-cel` (transition rules see the old object) — 422 Invalid with every field error.
//!   Not checked: `pattern`, `format`, list-type uniqueness; rules `kube-cel` cannot compile or evaluate are
//!   skipped (accepted), and validation ratcheting is not implemented.
//! - core/v1 and events.k8s.io/v1 Events are stored separately (on the real server they are one resource).
//! - PUT never creates (the real server creates Nodes, Leases, ConfigMaps, … on update of a missing object).
//! - No managedFields, no aggregated discovery, no protobuf, no `resourceVersionMatch=Exact` snapshots.
//! - The watch history window counts events ([`ApiServerBuilder::history_limit`]); the real server's is about
//!   five minutes of etcd history, so 410 Gone comes after a time there, after a number of writes here.
//! - No admission beyond what is listed (no ResourceQuota, LimitRange, PodSecurity, ServiceAccount, priority
//!   admission; a pod's `priorityClassName` is not resolved into `priority`), no authentication/RBAC.
//! - pods/binding does not check that the Node exists (neither does the real server) and, like it, refuses to
//!   bind pods with scheduling gates or being deleted (here as a 500 InternalError).
//! - Delete of an immediately removed built-in object answers a success Status; pods and custom resources
//!   answer their last state.
//! - The cluster's controllers (garbage collector, disruption controller, node lifecycle taints) run
//!   synchronously inside the write that triggers them, before the response; on a real cluster they follow
//!   asynchronously, so code must still wait for their effects through watches (their writes are ordinary
//!   events here too).
//! - PodDisruptionBudgets with a percentage or `maxUnavailable` count the selected pods as the expected pods;
//!   the real disruption controller asks the pods' controllers (Deployments, StatefulSets, …) for their scale,
//!   and fails safe (no disruption) for pods without one. `status.disruptedPods` is not maintained (evictions
//!   and the status recomputation are one atomic step here).
//! - The node lifecycle controller's NoExecute taints (taint-based eviction), its Ready=Unknown marking of
//!   Nodes whose Lease is not renewed, and pod eviction from unreachable Nodes are not simulated. The
//!   admission plugin's not-ready taint is only added when the Node is created without `Ready=True` (the real
//!   plugin adds it to every new Node and the controller removes it right after).
//!
//! # Cluster stand-ins and the probe
//!
//! The server runs no scheduler and no kubelet: [`crate::standins`] has a scheduler stand-in and
//! `karpenter_kwok::kubelet` a kubelet stand-in, written against `kube::Client` (so they also drive kwok nodes on
//! a real cluster). `tests/apiserver/apiserver_probe.rs`
//! holds one list of semantic checks (resourceVersion, conflicts, generation and status subresource,
//! finalizers, selectors, binding and graceful deletion, eviction with PDB status, garbage collection, the
//! not-ready taint, Lease conflicts, watch replay, JSON patch failures) run against this server by `cargo
//! test`, and against a real cluster with `KARPENTER_PROBE_SERVER=http://127.0.0.1:8001 cargo test -p
//! karpenter-testing --features apiserver --test apiserver -- apiserver_probe --ignored` (through `kubectl
//! proxy`: this crate's kube client is built without TLS). Every check passes on both; what differs is listed
//! above.

mod http;
mod meta;
mod registry;
mod schema;
mod selector;
mod status;
mod store;
mod typed;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

pub use http::{APPLY_REFUSED, ApiService, ResponseBody};
pub use registry::{Registry, ResourceKind};
pub use selector::{FieldSelector, LabelSelector};
pub use status::ApiError;

use crate::clock::{Clock, SystemClock};

/// Creates `obj`, then writes the status it carries through the status subresource (JSON merge patch): the way
/// to get an object with a given status into a server (this one or a real one), which drops the status sent on
/// create for kinds with a status subresource. Objects without a status are just created.
pub async fn create_with_status<K>(api: &kube::Api<K>, obj: &K) -> kube::Result<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    use kube::api::{Patch, PatchParams, PostParams};
    let created = api.create(&PostParams::default(), obj).await?;
    let status = serde_json::to_value(obj).map_err(kube::Error::SerdeError)?.get("status").cloned();
    match (status, created.meta().name.clone()) {
        (Some(status), Some(name)) if !status.is_null() => {
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({ "status": status }))).await
        }
        _ => Ok(created),
    }
}

/// Builder of an [`ApiServer`]: clock, history window, bookmark interval, served kinds.
#[derive(Debug, Clone)]
pub struct ApiServerBuilder {
    clock: Arc<dyn Clock>,
    history_limit: usize,
    bookmark_interval: Duration,
    registry: Option<Registry>,
}

impl Default for ApiServerBuilder {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            history_limit: 10_000,
            bookmark_interval: Duration::from_secs(1),
            registry: None,
        }
    }
}

impl ApiServerBuilder {
    /// The clock for `creationTimestamp` and `deletionTimestamp` (a [`FakeClock`](crate::FakeClock) makes them
    /// deterministic).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How many events the watch history keeps (default 10,000); watches from an older resourceVersion get
    /// 410 Expired.
    pub fn history_limit(mut self, events: usize) -> Self {
        self.history_limit = events;
        self
    }

    /// How often watches with `allowWatchBookmarks` get a BOOKMARK (default 1 s; the real server's is about a
    /// minute).
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_interval = every.clamp(Duration::from_millis(1), Duration::from_secs(86_400));
        self
    }

    /// The served kinds (default [`Registry::karpenter`]).
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Serves [`Registry::karpenter_with`] a provider's labels and node classes (a provider's tests pass its own).
    pub fn provider(
        self,
        labels: &karpenter_api::ProviderLabels,
        node_classes: &karpenter_api::node_class_api::NodeClassApis,
    ) -> Self {
        self.registry(Registry::karpenter_with(labels, node_classes))
    }

    /// Starts the server (no task is spawned: it runs inside the requests of its clients).
    pub fn build(self) -> ApiServer {
        let registry = self.registry.unwrap_or_else(Registry::karpenter);
        let mut store = store::Store::new(self.clock, self.history_limit);
        store.set_kinds(registry.kinds().to_vec());
        if let Some(ns_kind) = registry.find("", "v1", "namespaces") {
            for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                // Seeding cannot fail on a fresh store; an error would only mean a namespace is missing.
                let _ = store.seed(ns_kind, json!({"metadata": {"name": ns}}));
            }
        }
        if let Some(crd_kind) = registry.find("apiextensions.k8s.io", "v1", "customresourcedefinitions") {
            for crd in registry.crds() {
                if let Ok(value) = serde_json::to_value(crd) {
                    let _ = store.seed(crd_kind, value);
                }
            }
        }
        let shared = http::Shared {
            store: Mutex::new(store),
            registry,
            config: http::Config { bookmark_interval: self.bookmark_interval },
        };
        ApiServer { shared: Arc::new(shared) }
    }
}

/// The in-process API server. Cloning shares the same state.
#[derive(Debug, Clone)]
pub struct ApiServer {
    shared: Arc<http::Shared>,
}

impl Default for ApiServer {
    fn default() -> Self {
        Self::new()
    }
}

impl ApiServer {
    /// A server with the default settings ([`ApiServerBuilder`]).
    pub fn new() -> Self {
        ApiServerBuilder::default().build()
    }

    /// A builder for a server with other settings.
    pub fn builder() -> ApiServerBuilder {
        ApiServerBuilder::default()
    }

    /// A `kube::Client` talking to this server in-process, with `default` as its default namespace. Must be
    /// called inside a tokio runtime.
    pub fn client(&self) -> kube::Client {
        kube::Client::new(self.service(), "default")
    }

    /// Serves the API over plain HTTP/1.1 on `addr` (say `127.0.0.1:0`), for manual runs with `kubectl
    /// --server http://…` or a controller binary. Returns the bound address and the accept loop's task (abort
    /// it to stop accepting). Needs a tokio runtime with IO enabled.
    pub async fn serve_tcp(
        &self,
        addr: std::net::SocketAddr,
    ) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let service = self.service();
        let task = tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(_) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let svc = hyper_util::service::TowerToHyperService::new(service.clone());
                tokio::spawn(async move {
                    // A connection error concerns that client only.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Ok((local, task))
    }

    /// The server as a tower service (`http::Request` in, `http::Response` out).
    pub fn service(&self) -> ApiService {
        ApiService { shared: self.shared.clone() }
    }

    /// The current resourceVersion (the number of writes so far).
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().resource_version()
    }

    /// Open watch streams.
    pub fn watcher_count(&self) -> usize {
        self.shared.lock().watcher_count()
    }

    /// The served kinds.
    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }
}
