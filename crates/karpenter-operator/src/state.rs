//! Cluster state: the controller's in-memory view of the objects provisioning and the NodeClaim controllers read
//! (upstream's cluster state), fed by kube-runtime watchers and updated **at once on our own writes**.
//!
//! [`ClusterState`] is a cheap handle (clone it into every controller). It holds:
//!
//! - the watched objects of every [`Tracked`] kind: Nodes, NodeClaims, Pods, NodePools, DaemonSets,
//!   PodDisruptionBudgets, Namespaces, PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes (and,
//!   with default topology spread constraints configured, Services, ReplicaSets, StatefulSets and
//!   ReplicationControllers).
//!   [`ClusterState::run_watchers`] keeps them current (one watcher per kind, re-listing after errors with
//!   kube-runtime's backoff); [`ClusterState::apply`] / [`ClusterState::remove`] record an object directly, which
//!   is what a controller does with the object a write returned, so the next pass sees it before the watch
//!   event arrives. An object is never replaced by an older `resourceVersion` (a late watch event cannot undo a
//!   recorded write).
//! - **bindings** (`namespace/name` of each pod → its node), derived from the pods' `spec.nodeName`;
//! - **nominations**: a node or in-flight NodeClaim that a provisioning pass placed pods on is nominated for the
//!   nomination window (`max(2 × BATCH_MAX_DURATION, 10 s)`, [`CoreSettings::nomination_window`]); it blocks
//!   voluntary disruption of that node ([`ClusterState::is_nominated`]);
//! - **deletion marks** set by disruption before it deletes ([`ClusterState::mark_for_deletion`]): a marked node
//!   takes no new pods and its reschedulable pods are provisioned for elsewhere;
//! - the pods each NodeClaim we created was planned for ([`ClusterState::record_created_claim`]).
//!
//! [`ClusterState::synced`] is upstream's precondition for provisioning and disruption: every kind has been
//! listed once and every NodeClaim has a `status.providerID` (nothing is mid-launch). Together with the
//! immediate recording of created NodeClaims this is what keeps a second provisioning pass from launching
//! again for the same pods: until the claim has launched the pass waits, and once it has, the claim's
//! allocatable takes the pods (they are nominated to it instead).
//!
//! [`ClusterState::snapshot`] builds the scheduler's [`ClusterSnapshot`] with the controller's pod rules
//! (upstream's provisioner rules): pending pods are the provisionable ones ([`is_provisionable`]) that pass
//! [`validate_pod`], plus the currently reschedulable pods of nodes being deleted
//! ([`karpenter_disruption::pods::is_currently_reschedulable`], the rule `simulate` applies too); in-flight NodeClaims are included; every
//! DaemonSet pod is offered as its DaemonSet's representative (the newest one's spec is what DaemonSet overhead
//! is judged on, [`ClusterSnapshot::daemon_set_pod_spec`]).
//! Features that bring kinds of their own keep them, and the methods that serve only them, in submodules:
//! `spread` (Services and pod controllers for default topology spread constraints), `dra` (dynamic resource
//! allocation) and `buffers` (CapacityBuffers and where their virtual pods went).
//! Provisioning triggers ([`Trigger`]) go to every [`ClusterState::subscribe`]r when a provisionable pod or a
//! node with the `karpenter.sh/disrupted` taint is recorded.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, PodTemplate, ReplicationController, ResourceQuota,
    Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1beta1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use karpenter_api::labels;
use karpenter_api::lean::Lean;
use karpenter_api::{CapacityBuffer, CompactPod, NodeClaim, NodePool, SpecInterner};
use karpenter_cloudprovider::Clock;
use karpenter_disruption::pods::{Pdbs, is_currently_reschedulable};
use karpenter_scheduler::ClusterSnapshot;
use karpenter_scheduler::decision::{PodKey, UnschedulableReason};
use karpenter_scheduler::snapshot::SnapshotError;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::settings::CoreSettings;
use crate::trim::trim;

// The kinds one feature reads, with the methods that serve only it, live in a room of their own; this file keeps
// the stores, the watch plumbing, pods, nodes, NodeClaims and the snapshot.
mod buffers;
mod dra;
mod spread;

pub use buffers::BufferPlacement;

/// Why provisioning was triggered.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Trigger {
    /// A provisionable pod (its uid).
    Pod(String),
    /// A node carrying the `karpenter.sh/disrupted` taint (its name): its pods need capacity elsewhere.
    Node(String),
    /// A CapacityBuffer that asks for virtual pods (`namespace/name`): a pass must find them room even with no
    /// pending pod.
    Buffer(String),
}

impl Trigger {
    /// The batcher's key: a pod's uid, or `node/<name>`.
    pub fn key(&self) -> String {
        match self {
            Trigger::Pod(uid) => uid.clone(),
            Trigger::Node(name) => format!("node/{name}"),
            Trigger::Buffer(key) => format!("capacitybuffer/{key}"),
        }
    }
}

/// A pod as the state's pod watcher saw it ([`ClusterState::pod_changes`]). Controllers that react to pod
/// changes subscribe here instead of opening a second watch on every pod in the cluster.
#[derive(Debug, Clone)]
pub enum PodChange {
    /// Known already: in the state when the subscription started, or listed again by a re-list.
    Listed(Arc<CompactPod>),
    /// Created or updated.
    Applied(Arc<CompactPod>),
    /// Deleted.
    Deleted(Arc<CompactPod>),
}

/// Objects of one kind, keyed by `namespace/name` (or `name`), with the watcher's re-list buffer.
pub struct Store<K: Tracked> {
    /// Shared: a snapshot takes its pods from here without copying them.
    objects: BTreeMap<String, Arc<K>>,
    buffer: Option<BTreeMap<String, Arc<K>>>,
    synced: bool,
    /// What kube-runtime controllers of this kind read ([`ClusterState::controller_source`]); created by the
    /// first of them.
    feed: Option<Feed<K>>,
    /// providerID → keys of the objects that carry it (Nodes and NodeClaims; empty for other kinds), so finding
    /// the Node of a NodeClaim is a lookup, not a scan of every Node: with one scan per reconcile, a 5,000-node
    /// scale-out compared strings 5,000 × 5,000 times.
    by_provider_id: HashMap<String, BTreeSet<String>>,
}

impl<K: Tracked> Default for Store<K> {
    fn default() -> Self {
        Self { objects: BTreeMap::new(), buffer: None, synced: false, feed: None, by_provider_id: HashMap::new() }
    }
}

impl<K: Tracked> Store<K> {
    /// Stores `obj` under `key`, keeping the providerID index in step.
    fn insert(&mut self, key: String, obj: Arc<K>) {
        let new_id = provider_id_of(obj.as_ref()).map(str::to_owned);
        if let Some(old) = self.objects.insert(key.clone(), obj) {
            let old_id = provider_id_of(old.as_ref());
            if old_id == new_id.as_deref() {
                return;
            }
            if let Some(id) = old_id {
                self.unindex(id, &key);
            }
        }
        if let Some(id) = new_id {
            self.by_provider_id.entry(id).or_default().insert(key);
        }
    }

    /// Removes the object under `key`, keeping the providerID index in step.
    fn remove(&mut self, key: &str) -> Option<Arc<K>> {
        let old = self.objects.remove(key)?;
        if let Some(id) = provider_id_of(old.as_ref()) {
            self.unindex(id, key);
        }
        Some(old)
    }

    /// Replaces every object (a re-list) and rebuilds the index.
    fn replace_all(&mut self, objects: BTreeMap<String, Arc<K>>) {
        self.by_provider_id.clear();
        for (key, obj) in &objects {
            if let Some(id) = provider_id_of(obj.as_ref()) {
                self.by_provider_id.entry(id.to_owned()).or_default().insert(key.clone());
            }
        }
        self.objects = objects;
    }

    fn unindex(&mut self, id: &str, key: &str) {
        if let Some(keys) = self.by_provider_id.get_mut(id) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_provider_id.remove(id);
            }
        }
    }

    /// The objects whose providerID is `id`, by key.
    fn with_provider_id(&self, id: &str) -> Vec<Arc<K>> {
        self.by_provider_id.get(id).into_iter().flatten().filter_map(|key| self.objects.get(key).cloned()).collect()
    }
}

/// A Node's `spec.providerID` or a NodeClaim's `status.providerID` (`None` for other kinds and when unset or
/// empty).
fn provider_id_of<K: Tracked>(obj: &K) -> Option<&str> {
    let any: &dyn std::any::Any = obj;
    let id = if let Some(node) = any.downcast_ref::<Node>() {
        node.spec.as_ref().and_then(|s| s.provider_id.as_deref())
    } else if let Some(claim) = any.downcast_ref::<NodeClaim>() {
        claim.provider_id()
    } else {
        None
    };
    id.filter(|id| !id.is_empty())
}

impl<K: Tracked> fmt::Debug for Store<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store").field("objects", &self.objects.len()).field("synced", &self.synced).finish()
    }
}

/// The state's objects of one kind as kube-runtime controllers consume them: a reflector store kept equal to the
/// state's, and a trigger stream per controller. So every controller of the kind shares the state's one watch and
/// one (trimmed) copy of the objects, instead of opening a watch and keeping a full copy of its own each.
/// The reflector store makes its own copy of each object it is given; the state then keeps that copy and drops
/// its own, so the two hold one object between them (two full copies of every Node and NodeClaim before, ~11 KB
/// per node). Subscribers get the same `Arc`s: an event costs one reference count per controller, not a copy.
struct Feed<K: Tracked> {
    writer: reflector::store::Writer<K>,
    reader: reflector::Store<K>,
    subscribers: Vec<mpsc::UnboundedSender<Arc<K>>>,
}

impl<K: Tracked> Feed<K> {
    /// A feed holding `objects` (which then hold the feed's copies), its reflector store marked ready.
    fn new(objects: &mut BTreeMap<String, Arc<K>>) -> Self {
        let writer = reflector::store::Writer::new(());
        let reader = writer.as_reader();
        let mut feed = Self { writer, reader, subscribers: Vec::new() };
        feed.relist(objects);
        feed
    }

    /// Replaces the reflector store's objects with `objects` (which then hold the store's copies) and triggers
    /// every subscriber for each (a re-list).
    fn relist(&mut self, objects: &mut BTreeMap<String, Arc<K>>) {
        self.writer.apply_watcher_event(&watcher::Event::Init);
        for obj in objects.values() {
            self.writer.apply_watcher_event(&watcher::Event::InitApply(K::clone(obj)));
        }
        self.writer.apply_watcher_event(&watcher::Event::InitDone);
        for obj in objects.values_mut() {
            *obj = self.shared(Arc::clone(obj));
            self.send(obj);
        }
    }

    /// Stores `obj` and returns the store's copy, for the state to keep.
    fn applied(&mut self, obj: Arc<K>) -> Arc<K> {
        self.writer.apply_watcher_event(&watcher::Event::Apply(K::clone(&obj)));
        let shared = self.shared(obj);
        self.send(&shared);
        shared
    }

    fn deleted(&mut self, obj: &Arc<K>) {
        self.writer.apply_watcher_event(&watcher::Event::Delete(K::clone(obj)));
        self.send(obj);
    }

    /// The reflector store's copy of `obj` (`obj` itself if the store has none).
    fn shared(&self, obj: Arc<K>) -> Arc<K> {
        self.reader.get(&ObjectRef::from_obj(obj.as_ref())).unwrap_or(obj)
    }

    fn send(&mut self, obj: &Arc<K>) {
        self.subscribers.retain(|tx| tx.send(Arc::clone(obj)).is_ok());
    }
}

/// Every tracked object (the inside of [`ClusterState`]; reached only through its methods).
#[derive(Debug, Default)]
pub struct Objects {
    nodes: Store<Node>,
    node_claims: Store<NodeClaim>,
    pods: Store<CompactPod>,
    node_pools: Store<NodePool>,
    daemon_sets: Store<DaemonSet>,
    pdbs: Store<PodDisruptionBudget>,
    namespaces: Store<Namespace>,
    pvcs: Store<PersistentVolumeClaim>,
    pvs: Store<PersistentVolume>,
    storage_classes: Store<StorageClass>,
    csi_nodes: Store<CSINode>,
    /// Services and pod controllers (their selectors decide default spread constraints' selectors).
    spread: spread::SpreadObjects,
    /// DRA objects.
    dra: dra::DraStores,
    /// CapacityBuffers, what they refer to and where their virtual pods went.
    buffers: buffers::BufferObjects,
    /// Node or NodeClaim name → end of its nomination.
    nominations: BTreeMap<String, DateTime<Utc>>,
    /// Node or NodeClaim names marked for deletion by disruption.
    marked: BTreeSet<String>,
    /// NodeClaim name → `namespace/name` of the pods it was created for.
    claim_pods: BTreeMap<String, Vec<String>>,
    /// Bumped by every stored change of any kind ([`ClusterState::consolidation_state`]).
    changes: u64,
}

/// A kind the cluster state tracks.
pub trait Tracked: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static {
    /// The store of this kind.
    #[doc(hidden)]
    fn store(objects: &mut Objects) -> &mut Store<Self>;
    /// The store of this kind, read-only.
    #[doc(hidden)]
    fn store_ref(objects: &Objects) -> &Store<Self>;
    /// The kind's name in logs and errors.
    const KIND: &'static str;
}

/// What [`ClusterState::apply`] takes: a tracked object, or a `Pod` (kept as a [`CompactPod`]).
pub trait IntoTracked {
    /// The kind it is stored as.
    type Kind: Tracked;
    /// The object as stored.
    fn into_tracked(self) -> Self::Kind;
}

impl<K: Tracked> IntoTracked for K {
    type Kind = K;
    fn into_tracked(self) -> K {
        self
    }
}

impl IntoTracked for k8s_openapi::api::core::v1::Pod {
    type Kind = CompactPod;
    fn into_tracked(self) -> CompactPod {
        CompactPod::from(self)
    }
}

macro_rules! tracked {
    ($($ty:ty => $($field:ident).+, $kind:literal;)*) => {
        $(impl Tracked for $ty {
            fn store(objects: &mut Objects) -> &mut Store<Self> {
                &mut objects.$($field).+
            }
            fn store_ref(objects: &Objects) -> &Store<Self> {
                &objects.$($field).+
            }
            const KIND: &'static str = $kind;
        })*
    };
}

tracked! {
    Node => nodes, "Node";
    NodeClaim => node_claims, "NodeClaim";
    CompactPod => pods, "Pod";
    NodePool => node_pools, "NodePool";
    DaemonSet => daemon_sets, "DaemonSet";
    PodDisruptionBudget => pdbs, "PodDisruptionBudget";
    Namespace => namespaces, "Namespace";
    PersistentVolumeClaim => pvcs, "PersistentVolumeClaim";
    PersistentVolume => pvs, "PersistentVolume";
    StorageClass => storage_classes, "StorageClass";
    CSINode => csi_nodes, "CSINode";
    Service => spread.services, "Service";
    ReplicaSet => spread.replica_sets, "ReplicaSet";
    StatefulSet => spread.stateful_sets, "StatefulSet";
    ReplicationController => spread.replication_controllers, "ReplicationController";
    ResourceClaim => dra.resource_claims, "ResourceClaim";
    ResourceClaimTemplate => dra.resource_claim_templates, "ResourceClaimTemplate";
    DeviceClass => dra.device_classes, "DeviceClass";
    ResourceSlice => dra.resource_slices, "ResourceSlice";
    CapacityBuffer => buffers.capacity_buffers, "CapacityBuffer";
    PodTemplate => buffers.pod_templates, "PodTemplate";
    Deployment => buffers.deployments, "Deployment";
    ResourceQuota => buffers.resource_quotas, "ResourceQuota";
}

/// `namespace/name` or `name`.
pub fn object_key<K: Resource>(obj: &K) -> String {
    let name = obj.meta().name.clone().unwrap_or_default();
    match obj.meta().namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name,
    }
}

fn resource_version<K: Resource>(obj: &K) -> Option<u64> {
    obj.meta().resource_version.as_deref().and_then(|rv| rv.parse().ok())
}

/// Whether `new` may replace `old`: not when both resourceVersions are numbers and `new`'s is older.
fn newer_or_equal<K: Resource>(old: &K, new: &K) -> bool {
    match (resource_version(old), resource_version(new)) {
        (Some(o), Some(n)) => n >= o,
        _ => true,
    }
}

/// The cluster state handle (see the module docs). Clones share the state.
#[derive(Clone)]
pub struct ClusterState {
    objects: Arc<RwLock<Objects>>,
    clock: Arc<dyn Clock>,
    nomination_window: Duration,
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<Trigger>>>>,
    pod_subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<PodChange>>>>,
    /// One shared spec per distinct pod spec among the stored pods.
    pod_specs: Arc<Mutex<SpecInterner>>,
    /// Held by each pass that snapshots and simulates the whole cluster ([`Self::whole_cluster_pass`]).
    pass_gate: Arc<tokio::sync::Mutex<()>>,
    /// The buffer controller's wake-up and whether the buffer kinds gate syncing (`buffers`).
    buffers: buffers::BufferSignals,
    /// When the provisioner first saw and first decided about each pending pod (upstream's pod acks and
    /// scheduling decisions), for the pod latency metrics; a deleted pod's entry goes with it.
    scheduling_times: crate::observability::SchedulingTimes,
}

impl fmt::Debug for ClusterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterState").field("nomination_window", &self.nomination_window).finish_non_exhaustive()
    }
}

/// A pending pod the controller will not provision for, and why (upstream's provisioner validation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedPod {
    /// The pod.
    pub pod: karpenter_scheduler::PodKey,
    /// Why (its `Display` is the `FailedScheduling` event's message).
    pub reason: UnschedulableReason,
}

/// What [`ClusterState::snapshot`] returns.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The scheduler's input.
    pub cluster: ClusterSnapshot,
    /// Provisionable pods rejected by validation (they get a `FailedScheduling` event).
    pub rejected: Vec<RejectedPod>,
    /// Provisionable pods that opt out of Karpenter nodes (`karpenter.sh/nodepool DoesNotExist`): ignored
    /// silently.
    pub ignored: Vec<String>,
}

/// Runs a whole-cluster simulation (a provisioning solve, a disruption evaluation or validation) on tokio's
/// blocking pool and waits for it. The simulations never await and take up to seconds at 5,000 nodes; on the
/// pool they leave the runtime's worker free for watch events, leases and API calls, which is what lets the
/// controller run on one worker thread (`karpenter-controller run`: two workers spent a tenth of their CPU
/// waking each other). A panic in `simulate` is resumed here, as if it had run inline; `None` means the runtime
/// is shutting down.
pub async fn simulate_off_runtime<T, F>(simulate: F) -> Option<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match tokio::task::spawn_blocking(simulate).await {
        Ok(value) => Some(value),
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => None,
        },
    }
}

impl ClusterState {
    /// An empty state; `nomination_window` is how long a nomination lasts.
    pub fn new(clock: Arc<dyn Clock>, nomination_window: Duration) -> Self {
        Self {
            objects: Arc::default(),
            clock,
            nomination_window,
            subscribers: Arc::default(),
            pod_subscribers: Arc::default(),
            pod_specs: Arc::default(),
            pass_gate: Arc::default(),
            buffers: Default::default(),
            scheduling_times: Default::default(),
        }
    }

    /// The pods' scheduling times (see [`crate::observability::SchedulingTimes`]).
    pub fn scheduling_times(&self) -> &crate::observability::SchedulingTimes {
        &self.scheduling_times
    }

    /// An empty state with the nomination window of `settings`.
    pub fn from_settings(settings: &CoreSettings, clock: Arc<dyn Clock>) -> Self {
        Self::new(clock, settings.nomination_window())
    }

    /// Waits until no other whole-cluster pass runs, and holds that until the guard is dropped. Provisioning and
    /// disruption (evaluation and validation) each build a snapshot of every node and pod and simulate on it: at
    /// 5,000 nodes and 40,000 pending pods one provisioning pass allocates ~80 MiB on top of the state
    /// (`cargo bench -p karpenter-benches --bench pass_memory`), and two such passes at once were the controller's
    /// resident-set peaks (docs/benchmarks.md, memory-50k run 9). One at a time bounds the peak to one pass; each
    /// pass is a few seconds at most at that scale, and milliseconds at ordinary ones.
    pub async fn whole_cluster_pass(&self) -> tokio::sync::OwnedMutexGuard<()> {
        Arc::clone(&self.pass_gate).lock_owned().await
    }

    /// The clock the state times nominations with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    fn read(&self) -> RwLockReadGuard<'_, Objects> {
        self.objects.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Objects> {
        self.objects.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Receives a [`Trigger`] for each provisionable pod and disrupted node recorded from now on.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Trigger> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.lock().unwrap_or_else(|p| p.into_inner()).push(tx);
        rx
    }

    /// Receives every pod change the watcher records from now on, after one [`PodChange::Listed`] for each pod
    /// already in the state (so a subscriber knows every pod's last state and misses no change in between).
    pub fn pod_changes(&self) -> mpsc::UnboundedReceiver<PodChange> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut subs = self.pod_subscribers.lock().unwrap_or_else(|p| p.into_inner());
        for pod in self.read().pods.objects.values() {
            let _ = tx.send(PodChange::Listed(Arc::clone(pod)));
        }
        subs.push(tx);
        rx
    }

    /// `obj` as a shared pod when it is one (what [`Self::publish_pod`] sends).
    fn as_pod<K: Tracked>(obj: &Arc<K>) -> Option<Arc<CompactPod>> {
        let any: Arc<dyn std::any::Any + Send + Sync> = obj.clone();
        any.downcast::<CompactPod>().ok()
    }

    /// `obj` trimmed (`trim`) and, when it is a pod, with its spec shared with the pods of equal spec
    /// ([`SpecInterner`]): the replicas of a workload on one node, or pending, hold one spec between them.
    fn share<K: Tracked>(&self, mut obj: K) -> K {
        trim(&mut obj);
        let any: &mut dyn std::any::Any = &mut obj;
        if let Some(pod) = any.downcast_mut::<CompactPod>() {
            pod.spec = self.pod_specs.lock().unwrap_or_else(|p| p.into_inner()).intern_spec(&pod.spec);
        }
        obj
    }

    /// Sends a pod watch event to the pod subscribers, after the store has it (see [`Self::pod_changes`]).
    fn publish_pod(&self, change: PodChange) {
        let mut subs = self.pod_subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|tx| tx.send(change.clone()).is_ok());
    }

    fn notify(&self, trigger: Trigger) {
        let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|tx| tx.send(trigger.clone()).is_ok());
    }

    fn trigger_for<K: Tracked>(obj: &K) -> Option<Trigger> {
        let any: &dyn std::any::Any = obj;
        if let Some(pod) = any.downcast_ref::<CompactPod>() {
            return is_provisionable(pod)
                .then(|| Trigger::Pod(pod.metadata.uid.clone().unwrap_or_else(|| object_key(pod))));
        }
        if let Some(buffer) = any.downcast_ref::<CapacityBuffer>() {
            return (buffer.ready_replicas() > 0).then(|| Trigger::Buffer(buffer.key()));
        }
        if let Some(node) = any.downcast_ref::<Node>() {
            return labels::taints::node_is_disrupted(node).then(|| Trigger::Node(node.name_any()));
        }
        None
    }

    /// Records an object (a watch event or the answer of our own write). Ignored when the stored copy has a newer
    /// resourceVersion.
    pub fn apply<O: IntoTracked>(&self, obj: O) {
        self.record(obj.into_tracked());
    }

    /// [`Self::apply`], returning the object as stored when it was (not older than the stored copy).
    fn record<K: Tracked>(&self, obj: K) -> Option<Arc<K>> {
        let obj = self.share(obj);
        let trigger = Self::trigger_for(&obj);
        let acked = matches!(trigger, Some(Trigger::Pod(_))).then(|| object_key(&obj));
        let stored = {
            let mut objects = self.write();
            let store = K::store(&mut objects);
            let key = object_key(&obj);
            if store.objects.get(&key).is_none_or(|old| newer_or_equal(old.as_ref(), &obj)) {
                let mut obj = Arc::new(obj);
                if let Some(feed) = store.feed.as_mut() {
                    obj = feed.applied(obj);
                }
                store.insert(key, obj.clone());
                objects.changes += 1;
                Some(obj)
            } else {
                None
            }
        };
        // A provisionable pod is acknowledged for the provisioner (upstream's pod ack; the first time counts).
        if let Some(key) = acked {
            self.scheduling_times.ack([key.as_str()], self.clock.now());
        }
        if let Some(t) = trigger {
            self.notify(t);
        }
        if stored.is_some() {
            self.buffer_kind_changed::<K>();
        }
        stored
    }

    /// Forgets an object (deleted).
    pub fn remove<K: Tracked>(&self, obj: &K) {
        self.forget(Arc::new(obj.clone()));
    }

    fn forget<K: Tracked>(&self, obj: Arc<K>) {
        let key = object_key(obj.as_ref());
        let mut objects = self.write();
        let store = K::store(&mut objects);
        if store.remove(&key).is_some() {
            if let Some(feed) = store.feed.as_mut() {
                feed.deleted(&obj);
            }
            objects.changes += 1;
            self.buffer_kind_changed::<K>();
        }
        let any: &dyn std::any::Any = obj.as_ref();
        if any.is::<CompactPod>() {
            self.scheduling_times.forget(&key);
        }
        if any.is::<NodeClaim>() || any.is::<Node>() {
            let name = obj.meta().name.clone().unwrap_or_default();
            objects.nominations.remove(&name);
            if any.is::<NodeClaim>() {
                objects.claim_pods.remove(&name);
                objects.marked.remove(&name);
            }
        }
    }

    /// Applies one watcher event: `Init` … `InitApply` … `InitDone` replaces the kind's objects at once.
    pub fn handle_event<K: Tracked>(&self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(obj) => {
                // An older copy than the stored one is not news to the pod subscribers either.
                if let Some(pod) = self.record(obj).as_ref().and_then(Self::as_pod) {
                    self.publish_pod(PodChange::Applied(pod));
                }
            }
            watcher::Event::Delete(mut obj) => {
                trim(&mut obj);
                let obj = Arc::new(obj);
                let pod = Self::as_pod(&obj);
                self.forget(obj);
                pod.into_iter().for_each(|p| self.publish_pod(PodChange::Deleted(p)));
            }
            watcher::Event::Init => K::store(&mut self.write()).buffer = Some(BTreeMap::new()),
            watcher::Event::InitApply(obj) => {
                let obj = self.share(obj);
                let trigger = Self::trigger_for(&obj);
                let obj = Arc::new(obj);
                let pod = Self::as_pod(&obj);
                let key = object_key(obj.as_ref());
                K::store(&mut self.write()).buffer.get_or_insert_default().insert(key.clone(), obj);
                pod.into_iter().for_each(|p| self.publish_pod(PodChange::Listed(p)));
                if let Some(t) = trigger {
                    if matches!(t, Trigger::Pod(_)) {
                        self.scheduling_times.ack([key.as_str()], self.clock.now());
                    }
                    self.notify(t);
                }
            }
            watcher::Event::InitDone => {
                let mut objects = self.write();
                let store = K::store(&mut objects);
                let fresh = store.buffer.take().unwrap_or_default();
                // Keep a recorded write newer than the listed copy (the list may predate it).
                let mut merged = BTreeMap::new();
                for (key, obj) in fresh {
                    let keep = match store.remove(&key) {
                        Some(old) if !newer_or_equal(old.as_ref(), obj.as_ref()) => old,
                        _ => obj,
                    };
                    merged.insert(key, keep);
                }
                store.replace_all(merged);
                store.synced = true;
                if let Some(feed) = store.feed.as_mut() {
                    feed.relist(&mut store.objects);
                }
                objects.changes += 1;
                self.buffer_kind_changed::<K>();
            }
        }
    }

    /// What a kube-runtime `Controller` of kind `K` runs on instead of a watch of its own
    /// (`Controller::for_shared_stream(stream, store)`): a reflector store that always holds the state's objects of the
    /// kind, and a stream that yields every object already known, then every object the state records (applied
    /// or deleted: a deleted object is no longer in the store, so the controller skips it, as with a watch).
    /// Related kinds come the same way, for `Controller::watches_shared_stream`.
    pub fn controller_source<K: Tracked>(
        &self,
    ) -> (reflector::Store<K>, impl futures::Stream<Item = Arc<K>> + Send + 'static) {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut objects = self.write();
        let store = K::store(&mut objects);
        let Store { objects, feed, .. } = store;
        let feed = feed.get_or_insert_with(|| Feed::new(objects));
        for obj in objects.values() {
            let _ = tx.send(Arc::clone(obj));
        }
        feed.subscribers.push(tx);
        let reader = feed.writer.as_reader();
        (reader, futures::stream::poll_fn(move |cx| rx.poll_recv(cx)))
    }

    /// Upstream's consolidation state: a value that changes whenever an object of any kind is stored, replaced or
    /// forgotten. A consolidation pass that found nothing to do need not run again while it stays the same (the
    /// disruption controller still re-runs it every 5 minutes: time alone changes some answers).
    pub fn consolidation_state(&self) -> u64 {
        self.read().changes
    }

    /// Marks a kind as listed without a watcher (tests that feed the state by hand).
    pub fn mark_synced<K: Tracked>(&self) {
        K::store(&mut self.write()).synced = true;
    }

    /// Marks every kind as listed (tests that feed the state by hand).
    pub fn mark_all_synced(&self) {
        self.mark_synced::<Node>();
        self.mark_synced::<NodeClaim>();
        self.mark_synced::<CompactPod>();
        self.mark_synced::<NodePool>();
        self.mark_synced::<DaemonSet>();
        self.mark_synced::<PodDisruptionBudget>();
        self.mark_synced::<Namespace>();
        self.mark_synced::<PersistentVolumeClaim>();
        self.mark_synced::<PersistentVolume>();
        self.mark_synced::<StorageClass>();
        self.mark_synced::<CSINode>();
        self.mark_synced::<CapacityBuffer>();
        self.mark_synced::<PodTemplate>();
        self.mark_synced::<Deployment>();
        self.mark_synced::<StatefulSet>();
        self.mark_synced::<ReplicaSet>();
        self.mark_synced::<ResourceQuota>();
    }

    /// Whether `K` has been listed once.
    pub fn kind_synced<K: Tracked>(&self) -> bool {
        K::store_ref(&self.read()).synced
    }

    /// Upstream's `Synced()`: every kind listed and every NodeClaim has a providerID (none is mid-launch). A
    /// NodeClaim being deleted before it launched never will, and does not count.
    pub fn synced(&self) -> bool {
        self.unsynced_reason().is_none()
    }

    /// Why the state is not synced (`None` when it is), for logs.
    pub fn unsynced_reason(&self) -> Option<String> {
        if let Some(reason) = self.unlisted_reason() {
            return Some(reason);
        }
        let o = self.read();
        o.node_claims
            .objects
            .values()
            .find(|c| c.metadata.deletion_timestamp.is_none() && c.provider_id().is_none_or(str::is_empty))
            .map(|c| format!("NodeClaim {} has not launched yet (no providerID)", c.name_any()))
    }

    /// Which kind has not been listed yet (`None` once every kind has): the part of [`Self::unsynced_reason`]
    /// that a controller counting NodeClaims, not their capacity, waits for.
    pub fn unlisted_reason(&self) -> Option<String> {
        let o = self.read();
        let kinds: [(&str, bool); 11] = [
            (Node::KIND, o.nodes.synced),
            (NodeClaim::KIND, o.node_claims.synced),
            (CompactPod::KIND, o.pods.synced),
            (NodePool::KIND, o.node_pools.synced),
            (DaemonSet::KIND, o.daemon_sets.synced),
            (PodDisruptionBudget::KIND, o.pdbs.synced),
            (Namespace::KIND, o.namespaces.synced),
            (PersistentVolumeClaim::KIND, o.pvcs.synced),
            (PersistentVolume::KIND, o.pvs.synced),
            (StorageClass::KIND, o.storage_classes.synced),
            (CSINode::KIND, o.csi_nodes.synced),
        ];
        if let Some((kind, _)) = kinds.iter().find(|(_, synced)| !synced) {
            return Some(format!("{kind}s not listed yet"));
        }
        self.unlisted_buffer_kind(&o)
    }

    /// Runs one watcher per tracked kind until `shutdown` is cancelled. Watch errors are logged and the watcher
    /// re-lists with kube-runtime's default backoff.
    pub async fn run_watchers(&self, client: Client, shutdown: CancellationToken) {
        let c = &client;
        let s = &shutdown;
        futures::join!(
            self.watch::<Node>(Api::all(c.clone()), s.clone()),
            self.watch::<NodeClaim>(Api::all(c.clone()), s.clone()),
            self.watch::<CompactPod>(Api::all(c.clone()), s.clone()),
            self.watch::<NodePool>(Api::all(c.clone()), s.clone()),
            self.watch::<DaemonSet>(Api::all(c.clone()), s.clone()),
            self.watch::<PodDisruptionBudget>(Api::all(c.clone()), s.clone()),
            self.watch::<Namespace>(Api::all(c.clone()), s.clone()),
            self.watch::<PersistentVolumeClaim>(Api::all(c.clone()), s.clone()),
            self.watch::<PersistentVolume>(Api::all(c.clone()), s.clone()),
            self.watch::<StorageClass>(Api::all(c.clone()), s.clone()),
            self.watch::<CSINode>(Api::all(c.clone()), s.clone()),
        );
    }

    /// Runs the watcher of one kind (cluster-wide, through `api`'s client) until `shutdown` is cancelled. Objects
    /// are decoded without their `managedFields` ([`Lean`]): the state would drop them anyway.
    pub async fn watch<K: Tracked>(&self, api: Api<K>, shutdown: CancellationToken) {
        let api: Api<Lean<K>> = Api::all(api.into_client());
        let mut stream = watcher(api, watcher::Config::default()).default_backoff().boxed();
        loop {
            let next = tokio::select! {
                () = shutdown.cancelled() => return,
                next = stream.next() => next,
            };
            match next {
                Some(Ok(event)) => self.handle_event(unwrap_lean(event)),
                Some(Err(error)) => tracing::warn!(kind = K::KIND, %error, "watch failed, re-listing"),
                None => return,
            }
        }
    }

    /// Every object of kind `K`, by key.
    pub fn list<K: Tracked>(&self) -> Vec<K> {
        K::store_ref(&self.read()).objects.values().map(|o| K::clone(o)).collect()
    }

    /// Every object of kind `K`, by key, shared with the state (no copy: readers that only look, such as a
    /// counter summing capacity on every NodeClaim event, should not clone every object each time).
    pub fn list_shared<K: Tracked>(&self) -> Vec<Arc<K>> {
        K::store_ref(&self.read()).objects.values().cloned().collect()
    }

    /// One object of kind `K` by `namespace/name` (or `name`), shared with the state.
    pub fn get_shared<K: Tracked>(&self, key: &str) -> Option<Arc<K>> {
        K::store_ref(&self.read()).objects.get(key).cloned()
    }

    /// The first object of kind `K` (in key order) that `matches`, without copying the others.
    pub fn find<K: Tracked>(&self, matches: impl Fn(&K) -> bool) -> Option<K> {
        self.find_shared(matches).map(|o| K::clone(&o))
    }

    /// [`Self::find`], shared with the state instead of copied.
    pub fn find_shared<K: Tracked>(&self, matches: impl Fn(&K) -> bool) -> Option<Arc<K>> {
        K::store_ref(&self.read()).objects.values().find(|o| matches(o)).cloned()
    }

    /// One object of kind `K` by `namespace/name` (or `name`).
    pub fn get<K: Tracked>(&self, key: &str) -> Option<K> {
        K::store_ref(&self.read()).objects.get(key).map(|o| K::clone(o))
    }

    /// Nodes whose `spec.providerID` is `provider_id` (upstream's field index).
    pub fn nodes_by_provider_id(&self, provider_id: &str) -> Vec<Arc<Node>> {
        self.read().nodes.with_provider_id(provider_id)
    }

    /// NodeClaims whose `status.providerID` is `provider_id`.
    pub fn node_claims_by_provider_id(&self, provider_id: &str) -> Vec<Arc<NodeClaim>> {
        self.read().node_claims.with_provider_id(provider_id)
    }

    /// Pod bindings: `namespace/name` → node, for every bound, non-terminal pod.
    pub fn bindings(&self) -> BTreeMap<String, String> {
        self.read()
            .pods
            .objects
            .iter()
            .filter(|(_, p)| !p.is_terminal())
            .filter_map(|(k, p)| p.node_name().map(|n| (k.clone(), n.to_owned())))
            .collect()
    }

    /// Non-terminal pods bound to `node`.
    pub fn pods_on_node(&self, node: &str) -> Vec<Arc<CompactPod>> {
        self.read().pods.objects.values().filter(|p| p.node_name() == Some(node) && !p.is_terminal()).cloned().collect()
    }

    /// Records a NodeClaim this process just created (the API server's answer) with the pods it was created for.
    /// The claim is nominated: the pods scheduled to it keep it from voluntary disruption until they bind.
    pub fn record_created_claim(&self, claim: &NodeClaim, pods: &[String]) {
        let name = claim.name_any();
        self.apply(claim.clone());
        let mut objects = self.write();
        objects.claim_pods.insert(name.clone(), pods.to_vec());
        let until = self.clock.now() + karpenter_api::time::chrono_duration(self.nomination_window);
        objects.nominations.insert(name, until);
    }

    /// The pods a NodeClaim created by this process was planned for.
    pub fn claim_pods(&self, claim: &str) -> Vec<String> {
        self.read().claim_pods.get(claim).cloned().unwrap_or_default()
    }

    /// Nominates a node or in-flight NodeClaim (by name) for the nomination window from now.
    pub fn nominate(&self, name: &str) {
        let until = self.clock.now() + karpenter_api::time::chrono_duration(self.nomination_window);
        self.write().nominations.insert(name.to_owned(), until);
    }

    /// Whether a node or NodeClaim (by name) is nominated now. A node is also nominated through its NodeClaim.
    pub fn is_nominated(&self, name: &str) -> bool {
        let now = self.clock.now();
        let o = self.read();
        let direct = |n: &str| o.nominations.get(n).is_some_and(|until| *until > now);
        if direct(name) {
            return true;
        }
        // The other name of the same machine.
        o.node_claims.objects.values().any(|c| {
            let claim = c.name_any();
            (c.node_name() == Some(name) && direct(&claim)) || (claim == name && c.node_name().is_some_and(direct))
        })
    }

    /// Marks nodes or NodeClaims (by name) for deletion: they take no new pods, their pods are provisioned for.
    pub fn mark_for_deletion<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let mut o = self.write();
        o.marked.extend(names.into_iter().map(str::to_owned));
    }

    /// Removes deletion marks (a disruption command that failed).
    pub fn unmark_for_deletion<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let mut o = self.write();
        for n in names {
            o.marked.remove(n);
        }
    }

    /// Whether a node or NodeClaim is marked for deletion: by a mark (on it or its NodeClaim), a deletion
    /// timestamp (on it or its NodeClaim) or, for a node, the `karpenter.sh/disrupted` taint.
    pub fn is_marked_for_deletion(&self, name: &str) -> bool {
        let o = self.read();
        marked_names(&o).contains(name)
    }

    /// Sends a [`Trigger`] for every pod that is still provisionable (the pod trigger's 10 s requeue).
    pub fn retrigger_provisionable(&self) {
        // Keys only: copying every pending pod to name it cost a pass's worth of memory every 10 s.
        let triggers: Vec<Trigger> = self
            .read()
            .pods
            .objects
            .values()
            .filter(|p| is_provisionable(p))
            .map(|p| Trigger::Pod(p.metadata.uid.clone().unwrap_or_else(|| object_key(p.as_ref()))))
            .chain(self.buffers_asking().into_iter().map(Trigger::Buffer))
            .collect();
        for trigger in triggers {
            self.notify(trigger);
        }
    }

    /// The provisionable pods ([`is_provisionable`], before validation), by key.
    pub fn provisionable_pods(&self) -> Vec<Arc<CompactPod>> {
        self.read().pods.objects.values().filter(|p| is_provisionable(p)).cloned().collect()
    }

    /// The scheduler's input (see the module docs). Fails only on a node or NodeClaim quantity that does not parse.
    pub fn snapshot(&self) -> Result<Snapshot, SnapshotError> {
        let now = self.clock.now();
        let o = self.read();
        let marked = marked_names(&o);
        // Typed, straight from the stores: nodes and NodeClaims are borrowed, pods shared (`Arc`), and only
        // the pods of nodes being deleted copied (their `nodeName` cleared).
        let mut builder = ClusterSnapshot::builder();
        o.nodes.objects.values().for_each(|n| builder.node(n));
        o.node_claims.objects.values().for_each(|c| builder.node_claim(Arc::clone(c)));
        o.node_pools.objects.values().for_each(|p| builder.node_pool(NodePool::clone(p)));
        o.daemon_sets.objects.values().for_each(|d| builder.daemon_set(DaemonSet::clone(d)));
        o.pdbs.objects.values().for_each(|p| builder.pdb(PodDisruptionBudget::clone(p)));
        o.namespaces.objects.values().for_each(|n| builder.namespace(n));
        o.pvcs.objects.values().for_each(|p| builder.pvc(PersistentVolumeClaim::clone(p)));
        o.pvs.objects.values().for_each(|p| builder.pv(PersistentVolume::clone(p)));
        o.storage_classes.objects.values().for_each(|s| builder.storage_class(StorageClass::clone(s)));
        o.csi_nodes.objects.values().for_each(|c| builder.csi_node(c));
        o.spread.add_to(&mut builder);
        builder.dra(o.dra.objects());

        let mut rejected = Vec::new();
        let mut ignored = Vec::new();
        let pdbs = Pdbs::from_refs(o.pdbs.objects.values().map(AsRef::as_ref));
        for (key, pod) in &o.pods.objects {
            // Every DaemonSet pod (pending, terminal, on a node being deleted too) may stand for its DaemonSet.
            builder.daemon_set_pod(pod);
            match pod.node_name() {
                Some(node) if marked.contains(node) => {
                    if is_currently_reschedulable(pod, &pdbs, now) {
                        let mut p = CompactPod::clone(pod);
                        Arc::make_mut(&mut p.spec).node_name = None;
                        builder.pod(p);
                    }
                }
                Some(_) => {
                    if !pod.is_terminal() {
                        builder.pod(pod.clone());
                    }
                }
                None => {
                    if !is_provisionable(pod) {
                        continue;
                    }
                    match validate_pod(pod, &o) {
                        Ok(()) => builder.pod(pod.clone()),
                        Err(PodRejection::OptOut) => ignored.push(key.clone()),
                        Err(PodRejection::Invalid(message)) => rejected.push(RejectedPod {
                            pod: PodKey::of(pod),
                            reason: UnschedulableReason::Volume { message },
                        }),
                    }
                }
            }
        }
        let mut cluster = builder.build()?;
        let nominated = |n: &str| o.nominations.get(n).is_some_and(|until| *until > now);
        for node in &mut cluster.nodes {
            let claim = node.node_claim.clone().unwrap_or_default();
            node.nominated = nominated(&node.name) || nominated(&claim);
            node.marked_for_deletion |= marked.contains(&node.name);
        }
        for claim in &mut cluster.node_claims {
            claim.nominated = nominated(&claim.name) || claim.node_name.as_deref().is_some_and(nominated);
            claim.marked_for_deletion |= marked.contains(&claim.name);
        }
        Ok(Snapshot { cluster, rejected, ignored })
    }
}

fn unwrap_lean<K>(event: watcher::Event<Lean<K>>) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(o.0),
        watcher::Event::Delete(o) => watcher::Event::Delete(o.0),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(o.0),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Names (nodes and NodeClaims) marked for deletion, each machine under both its names.
fn marked_names(o: &Objects) -> BTreeSet<String> {
    let mut out = o.marked.clone();
    for n in o.nodes.objects.values() {
        if karpenter_scheduler::snapshot::is_deleting_node(n) {
            out.insert(n.name_any());
        }
    }
    for c in o.node_claims.objects.values() {
        let name = c.name_any();
        let node = c.node_name().map(str::to_owned);
        let marked = c.metadata.deletion_timestamp.is_some()
            || out.contains(&name)
            || node.as_ref().is_some_and(|n| out.contains(n));
        if marked {
            out.insert(name);
            out.extend(node);
        }
    }
    out
}

fn owned_by_kind(pod: &CompactPod, api_version: &str, kind: &str) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|o| o.kind == kind && o.api_version == api_version)
}

/// Whether the provisioner considers `pod`, as upstream: `PodScheduled=False` with reason `Unschedulable`, no
/// `spec.nodeName`, no `status.nominatedNodeName`, not owned by a DaemonSet or a Node (static pod), and not terminal
/// or terminating.
pub fn is_provisionable(pod: &CompactPod) -> bool {
    let status = pod.status.as_ref();
    let unschedulable = status.and_then(|s| s.conditions.as_ref()).is_some_and(|cs| {
        cs.iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
    });
    unschedulable
        && pod.node_name().is_none()
        && status.and_then(|s| s.nominated_node_name.as_deref()).is_none_or(str::is_empty)
        && !pod.is_daemon_set_pod()
        && !owned_by_kind(pod, "v1", "Node")
        && !pod.is_terminal()
        && pod.metadata.deletion_timestamp.is_none()
}

/// Why a provisionable pod is not provisioned for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodRejection {
    /// It requires `karpenter.sh/nodepool DoesNotExist`: it opts out of Karpenter's nodes (no event).
    OptOut,
    /// A volume of the pod cannot be used (the `FailedScheduling` message).
    Invalid(String),
}

/// The parts of upstream's provisioner validation the scheduler does not report per pod itself: the opt-out
/// (`karpenter.sh/nodepool DoesNotExist`) and the PVC checks. Invalid requirements and `matchFields` come back
/// from the scheduler as the pod's unschedulable reason.
fn validate_pod(pod: &CompactPod, o: &Objects) -> Result<(), PodRejection> {
    let spec = Some(&*pod.spec);
    let opts_out = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref())
        .is_some_and(|sel| {
            sel.node_selector_terms.iter().any(|t| {
                t.match_expressions.iter().flatten().any(|e| e.key == labels::NODE_POOL && e.operator == "DoesNotExist")
            })
        });
    if opts_out {
        return Err(PodRejection::OptOut);
    }
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    for volume in spec.and_then(|s| s.volumes.as_ref()).into_iter().flatten() {
        let Some(claim) = volume.persistent_volume_claim.as_ref() else { continue };
        let key = format!("{ns}/{}", claim.claim_name);
        let invalid = |m: String| Err(PodRejection::Invalid(m));
        let Some(pvc) = o.pvcs.objects.get(&key) else {
            return invalid(format!("persistentvolumeclaim {key} not found"));
        };
        if pvc.metadata.deletion_timestamp.is_some() {
            return invalid(format!("persistentvolumeclaim {key} is being deleted"));
        }
        if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            return invalid(format!("persistentvolumeclaim {key} is Lost"));
        }
        let pvc_spec = pvc.spec.as_ref();
        match pvc_spec.and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty()) {
            Some(pv) => {
                let bound = pvc
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("pv.kubernetes.io/bind-completed"));
                if !bound {
                    return invalid(format!("persistentvolumeclaim {key} names volume {pv} but is not bound yet"));
                }
                if !o.pvs.objects.contains_key(pv) {
                    return invalid(format!("persistentvolume {pv} of persistentvolumeclaim {key} not found"));
                }
            }
            None => match pvc_spec.and_then(|s| s.storage_class_name.as_deref()).filter(|s| !s.is_empty()) {
                None => return invalid(format!("unbound persistentvolumeclaim {key} has no storage class")),
                Some(sc) if !o.storage_classes.objects.contains_key(sc) => {
                    return invalid(format!("storageclass {sc} of persistentvolumeclaim {key} not found"));
                }
                Some(_) => {}
            },
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_cloudprovider::time::tokio_now;

    #[tokio::test]
    async fn a_simulation_off_the_runtime_returns_its_value_and_resumes_its_panic() {
        let worker = std::thread::current().id();
        let (value, ran_on) = simulate_off_runtime(move || (21 * 2, std::thread::current().id())).await.unwrap();
        assert_eq!(value, 42);
        assert_ne!(ran_on, worker, "the simulation ran on the blocking pool, not the runtime's thread");
        let panicked = tokio::spawn(simulate_off_runtime(|| -> u32 { panic!("a scheduler bug") })).await.unwrap_err();
        assert!(panicked.is_panic(), "the panic reaches the caller as its own");
    }
    use karpenter_testing::apiserver::ApiServer;
    use karpenter_testing::{
        FakeClock, NodeClaimOptions, NodeOptions, NodePoolOptions, PodOptions, node, node_claim, node_pool, pod,
        unschedulable_pod,
    };
    use kube::api::PostParams;

    fn state(clock: &FakeClock) -> ClusterState {
        let s = ClusterState::new(Arc::new(clock.clone()), Duration::from_secs(20));
        s.mark_all_synced();
        s
    }

    fn with_rv<K: Resource>(mut obj: K, rv: u64) -> K {
        obj.meta_mut().resource_version = Some(rv.to_string());
        obj
    }

    #[test]
    fn provisionable_rules() {
        let provisionable = |p: &k8s_openapi::api::core::v1::Pod| is_provisionable(&CompactPod::from(p));
        let p = unschedulable_pod(PodOptions { name: Some("a".into()), ..Default::default() });
        assert!(provisionable(&p));
        // Never marked unschedulable by kube-scheduler.
        assert!(!provisionable(&pod(PodOptions { name: Some("b".into()), ..Default::default() })));
        let mut preempting = p.clone();
        preempting.status.as_mut().unwrap().nominated_node_name = Some("n".into());
        assert!(!provisionable(&preempting));
        let ds = unschedulable_pod(PodOptions { owner: Some(("DaemonSet".into(), "ds".into())), ..Default::default() });
        assert!(!provisionable(&ds));
        let mut deleting = p.clone();
        deleting.metadata.deletion_timestamp = karpenter_testing::k8s_time(chrono::DateTime::UNIX_EPOCH);
        assert!(!provisionable(&deleting));
    }

    #[test]
    fn older_resource_versions_never_replace_newer_ones() {
        let clock = FakeClock::default();
        let s = state(&clock);
        let mut c = node_claim(NodeClaimOptions { name: Some("c".into()), ..Default::default() });
        c.metadata.labels.get_or_insert_default().insert("v".into(), "new".into());
        s.apply(with_rv(c.clone(), 7));
        c.metadata.labels.get_or_insert_default().insert("v".into(), "old".into());
        s.apply(with_rv(c.clone(), 5));
        let got: NodeClaim = s.get("c").unwrap();
        assert_eq!(got.labels().get("v").map(String::as_str), Some("new"));
        // A re-list with the older copy keeps the recorded write too.
        s.handle_event(watcher::Event::<NodeClaim>::Init);
        s.handle_event(watcher::Event::InitApply(with_rv(c, 5)));
        s.handle_event(watcher::Event::<NodeClaim>::InitDone);
        let got: NodeClaim = s.get("c").unwrap();
        assert_eq!(got.labels().get("v").map(String::as_str), Some("new"));
    }

    /// The controllers' reflector store and the state hold one copy of each object between them: before and
    /// after the store exists, on an apply and on a re-list.
    #[test]
    fn the_controller_store_shares_the_state_copy() {
        let clock = FakeClock::default();
        let s = state(&clock);
        let named = |n: &str| node(NodeOptions { name: Some(n.into()), ..Default::default() });
        s.apply(named("before"));
        let (store, _events) = s.controller_source::<Node>();
        let same = |name: &str| {
            let ours = s.get_shared::<Node>(name).unwrap();
            let theirs = store.get(&ObjectRef::new(name)).unwrap();
            Arc::ptr_eq(&ours, &theirs)
        };
        assert!(same("before"), "the store's creation");
        s.apply(named("after"));
        assert!(same("after"), "an apply");
        s.handle_event(watcher::Event::<Node>::Init);
        s.handle_event(watcher::Event::InitApply(named("listed")));
        s.handle_event(watcher::Event::<Node>::InitDone);
        assert!(same("listed"), "a re-list");
        assert!(store.get(&ObjectRef::new("after")).is_none(), "the re-list dropped it from both");
    }

    #[test]
    fn relist_drops_objects_that_are_gone() {
        let clock = FakeClock::default();
        let s = state(&clock);
        s.apply(node(NodeOptions { name: Some("gone".into()), ..Default::default() }));
        s.handle_event(watcher::Event::<Node>::Init);
        s.handle_event(watcher::Event::InitApply(node(NodeOptions {
            name: Some("kept".into()),
            ..Default::default()
        })));
        assert_eq!(s.list::<Node>().len(), 1, "the old view stays until the list is complete");
        s.handle_event(watcher::Event::<Node>::InitDone);
        let names: Vec<String> = s.list::<Node>().iter().map(|n| n.name_any()).collect();
        assert_eq!(names, ["kept"]);
    }

    /// The providerID index follows every change: a new ID, a changed one, a delete and a re-list.
    #[test]
    fn provider_id_lookups_follow_updates_deletes_and_relists() {
        let clock = FakeClock::default();
        let s = state(&clock);
        let with_id = |name: &str, id: &str, rv: u64| {
            let mut n = with_rv(node(NodeOptions { name: Some(name.into()), ..Default::default() }), rv);
            n.spec.get_or_insert_default().provider_id = Some(id.into());
            n
        };
        let names = |id: &str| -> Vec<String> { s.nodes_by_provider_id(id).iter().map(|n| n.name_any()).collect() };
        s.apply(with_id("a", "kwok://a", 1));
        s.apply(with_id("b", "kwok://b", 1));
        assert_eq!(names("kwok://a"), ["a"]);
        s.apply(with_id("a", "kwok://a2", 2));
        assert!(names("kwok://a").is_empty(), "the old ID no longer finds the node");
        assert_eq!(names("kwok://a2"), ["a"]);
        s.apply(with_id("a", "kwok://a", 1));
        assert_eq!(names("kwok://a2"), ["a"], "an older copy is ignored, index included");
        s.remove(&with_id("b", "kwok://b", 2));
        assert!(names("kwok://b").is_empty());
        s.handle_event(watcher::Event::<Node>::Init);
        s.handle_event(watcher::Event::InitApply(with_id("c", "kwok://c", 3)));
        s.handle_event(watcher::Event::<Node>::InitDone);
        assert!(names("kwok://a2").is_empty(), "the re-list dropped a");
        assert_eq!(names("kwok://c"), ["c"]);
        assert!(names("").is_empty(), "an empty ID is never indexed");
        let mut claim = node_claim(NodeClaimOptions { name: Some("c1".into()), ..Default::default() });
        claim.status.get_or_insert_default().provider_id = Some("kwok://c".into());
        s.apply(claim);
        let claims: Vec<String> = s.node_claims_by_provider_id("kwok://c").iter().map(|c| c.name_any()).collect();
        assert_eq!(claims, ["c1"]);
    }

    #[test]
    fn synced_needs_every_kind_listed_and_every_claim_launched() {
        let clock = FakeClock::default();
        let s = ClusterState::new(Arc::new(clock.clone()), Duration::from_secs(20));
        assert!(!s.synced());
        s.mark_all_synced();
        assert!(s.synced());
        let c = node_claim(NodeClaimOptions { name: Some("c".into()), ..Default::default() });
        s.record_created_claim(&c, &["default/a".into()]);
        assert!(s.unsynced_reason().unwrap().contains("NodeClaim c has not launched"));
        assert_eq!(s.claim_pods("c"), ["default/a"]);
        let launched = node_claim(NodeClaimOptions {
            name: Some("c".into()),
            provider_id: Some("kwok://c".into()),
            launched: true,
            ..Default::default()
        });
        s.apply(launched);
        assert!(s.synced());
    }

    #[test]
    fn dra_objects_reach_the_snapshot_and_bad_ones_are_left_out() {
        let clock = FakeClock::default();
        let s = state(&clock);
        let claim: ResourceClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpu", "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "gpu"}]}}
        }))
        .unwrap();
        let bad: ResourceClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "zero", "namespace": "ml"},
            "spec": {"devices": {"requests": [{"name": "r", "deviceClassName": "gpu", "count": 0}]}}
        }))
        .unwrap();
        let slice: ResourceSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1-gpu"},
            "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                     "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0", "basic": {}}]}
        }))
        .unwrap();
        let class: DeviceClass =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "gpu"}, "spec": {}})).unwrap();
        s.apply(claim);
        s.apply(bad);
        s.apply(slice);
        s.apply(class);
        let dra = s.snapshot().expect("snapshot").cluster.dra;
        assert_eq!(dra.claims.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["gpu"], "count 0 is left out");
        assert_eq!(dra.slices[0].devices[0].name, "gpu-0");
        assert_eq!(dra.classes[0].name, "gpu");
    }

    #[test]
    fn nominations_last_the_window_and_cover_both_names() {
        let clock = FakeClock::default();
        let s = state(&clock);
        s.apply(node_claim(NodeClaimOptions {
            name: Some("c".into()),
            node_name: Some("n".into()),
            provider_id: Some("kwok://n".into()),
            ..Default::default()
        }));
        s.nominate("c");
        assert!(s.is_nominated("c") && s.is_nominated("n"));
        clock.step_secs(19);
        assert!(s.is_nominated("n"));
        clock.step_secs(2);
        assert!(!s.is_nominated("c") && !s.is_nominated("n"));
    }

    #[test]
    fn snapshot_applies_the_controller_pod_rules() {
        let clock = FakeClock::default();
        let s = state(&clock);
        s.apply(node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }));
        s.apply(unschedulable_pod(PodOptions { name: Some("pending".into()), ..Default::default() }));
        // Not marked unschedulable by kube-scheduler yet: not provisionable.
        s.apply(pod(PodOptions { name: Some("fresh".into()), ..Default::default() }));
        s.apply(unschedulable_pod(PodOptions {
            name: Some("opt-out".into()),
            node_requirements: vec![karpenter_testing::requirement(labels::NODE_POOL, "DoesNotExist", &[])],
            ..Default::default()
        }));
        s.apply(unschedulable_pod(PodOptions {
            name: Some("no-pvc".into()),
            pvcs: vec!["data".into()],
            ..Default::default()
        }));
        s.apply(node(NodeOptions { name: Some("n1".into()), ..Default::default() }));
        s.apply(node(NodeOptions { name: Some("n2".into()), ..Default::default() }));
        s.apply(pod(PodOptions { name: Some("on-n1".into()), node_name: Some("n1".into()), ..Default::default() }));
        s.apply(pod(PodOptions { name: Some("on-n2".into()), node_name: Some("n2".into()), ..Default::default() }));
        s.mark_for_deletion(["n2"]);

        let snap = s.snapshot().unwrap();
        let pending: Vec<String> = snap.cluster.pending_pods.iter().map(|p| object_key(p.as_ref())).collect();
        assert_eq!(pending, ["default/on-n2", "default/pending"], "the marked node's pod needs a new home");
        let bound: Vec<String> = snap.cluster.bound_pods.iter().map(|p| object_key(p.as_ref())).collect();
        assert_eq!(bound, ["default/on-n1"]);
        assert_eq!(snap.ignored, ["default/opt-out"]);
        assert_eq!(snap.rejected.len(), 1);
        assert_eq!(snap.rejected[0].pod, "default/no-pvc");
        assert_eq!(
            snap.rejected[0].reason,
            UnschedulableReason::Volume { message: "persistentvolumeclaim default/data not found".into() }
        );
        let n2 = snap.cluster.nodes.iter().find(|n| n.name == "n2").unwrap();
        assert!(n2.marked_for_deletion);
        s.unmark_for_deletion(["n2"]);
        assert!(!s.is_marked_for_deletion("n2"));
    }

    /// A DaemonSet is judged on its pod (requests as admission left them) even when the pod is pending or on a
    /// node being deleted, so neither place to put it nor room it takes.
    #[test]
    fn snapshot_offers_every_daemon_set_pod_as_its_representative() {
        let clock = FakeClock::default();
        let s = state(&clock);
        let cpu = |v: &str| PodOptions { requests: [("cpu", v)].into(), ..Default::default() };
        s.apply(karpenter_testing::daemon_set(karpenter_testing::DaemonSetOptions {
            name: Some("agent".into()),
            pod: cpu("3"),
            ..Default::default()
        }));
        s.apply(node(NodeOptions { name: Some("n2".into()), ..Default::default() }));
        s.mark_for_deletion(["n2"]);
        let ds_pod = |name: &str, minutes: i64, node_name: Option<&str>, requests: &str| {
            let mut p = unschedulable_pod(PodOptions {
                name: Some(name.into()),
                owner: Some(("DaemonSet".into(), "agent".into())),
                node_name: node_name.map(str::to_owned),
                ..cpu(requests)
            });
            p.metadata.creation_timestamp =
                karpenter_testing::k8s_time(chrono::DateTime::UNIX_EPOCH + chrono::Duration::minutes(minutes));
            p
        };
        s.apply(ds_pod("agent-on-n2", 1, Some("n2"), "2"));
        let requests = |s: &ClusterState| {
            let snap = s.snapshot().unwrap().cluster;
            assert!(snap.pending_pods.is_empty() && snap.bound_pods.is_empty(), "DaemonSet pods are overhead");
            let spec = snap.daemon_set_pod_spec(&snap.daemon_sets[0]).unwrap();
            spec.containers[0].resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"].0.clone()
        };
        assert_eq!(requests(&s), "2", "the pod of a node being deleted");
        s.apply(ds_pod("agent-pending", 2, None, "1"));
        assert_eq!(requests(&s), "1", "the newest pod, pending");
    }

    #[test]
    fn triggers_for_provisionable_pods_and_disrupted_nodes() {
        let clock = FakeClock::default();
        let s = state(&clock);
        let mut rx = s.subscribe();
        let mut p = unschedulable_pod(PodOptions { name: Some("a".into()), ..Default::default() });
        p.metadata.uid = Some("uid-a".into());
        s.apply(p);
        s.apply(pod(PodOptions { name: Some("bound".into()), node_name: Some("n".into()), ..Default::default() }));
        s.apply(node(NodeOptions {
            name: Some("n".into()),
            taints: vec![karpenter_testing::taint(labels::taints::DISRUPTED, None, "NoSchedule")],
            ..Default::default()
        }));
        assert_eq!(rx.try_recv().unwrap(), Trigger::Pod("uid-a".into()));
        assert_eq!(rx.try_recv().unwrap(), Trigger::Node("n".into()));
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn watchers_follow_the_api_server() {
        let server = ApiServer::new();
        let client = server.client();
        let clock = FakeClock::default();
        let s = ClusterState::new(Arc::new(clock), Duration::from_secs(20));
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let s = s.clone();
            let shutdown = shutdown.clone();
            async move { s.run_watchers(client, shutdown).await }
        });
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(server.client(), "default");
        pods.create(
            &PostParams::default(),
            &unschedulable_pod(PodOptions { name: Some("w".into()), ..Default::default() }),
        )
        .await
        .unwrap();
        let deadline = tokio_now() + Duration::from_secs(10);
        while !(s.kind_synced::<CSINode>() && s.synced() && s.get::<CompactPod>("default/w").is_some()) {
            assert!(tokio_now() < deadline, "state did not catch up: {:?}", s.unsynced_reason());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(s.get::<Namespace>("kube-system").is_some());
        pods.delete("w", &Default::default()).await.unwrap();
        while s.get::<CompactPod>("default/w").is_some() {
            assert!(tokio_now() < deadline, "delete not seen");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn spread_watchers_bring_services_and_controllers_into_the_snapshot() {
        let server = ApiServer::new();
        let client = server.client();
        let s = ClusterState::new(Arc::new(FakeClock::default()), Duration::from_secs(20));
        s.mark_all_synced();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let s = s.clone();
            let shutdown = shutdown.clone();
            async move { s.run_spread_watchers(client, shutdown).await }
        });
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}}
        }))
        .unwrap();
        Api::<Service>::namespaced(server.client(), "default").create(&PostParams::default(), &svc).await.unwrap();
        let rs: ReplicaSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "web", "pod-template-hash": "1"}},
                     "template": {"metadata": {"labels": {"app": "web", "pod-template-hash": "1"}}}}
        }))
        .unwrap();
        Api::<ReplicaSet>::namespaced(server.client(), "default").create(&PostParams::default(), &rs).await.unwrap();
        let deadline = tokio_now() + Duration::from_secs(10);
        while s.get::<Service>("default/web").is_none() || s.get::<ReplicaSet>("default/web-1").is_none() {
            assert!(tokio_now() < deadline, "the spread watchers did not list the objects");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let snap = s.snapshot().unwrap().cluster;
        assert_eq!(snap.services.len(), 1);
        assert_eq!(snap.services[0].selector, Some(BTreeMap::from([("app".to_string(), "web".to_string())])));
        assert_eq!(snap.controllers.len(), 1);
        assert_eq!((snap.controllers[0].kind.as_str(), snap.controllers[0].name.as_str()), ("ReplicaSet", "web-1"));
        // A replica of the ReplicaSet gets the Service's labels and the ReplicaSet's selector.
        let mut p = unschedulable_pod(PodOptions {
            name: Some("web-1-a".into()),
            labels: BTreeMap::from([("app".into(), "web".into()), ("pod-template-hash".into(), "1".into())]),
            ..Default::default()
        });
        p.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "web-1".into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        let selector = karpenter_scheduler::default_spread::default_selector(&CompactPod::from(p), &snap).unwrap();
        assert_eq!(selector.match_labels, Some(BTreeMap::from([("app".to_string(), "web".to_string())])));
        assert_eq!(selector.match_expressions.map(|e| e.len()), Some(2));
        shutdown.cancel();
        task.await.unwrap();
    }
}
