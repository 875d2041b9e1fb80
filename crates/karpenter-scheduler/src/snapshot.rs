//! [`ClusterSnapshot`]: the one input of the scheduler (and later of disruption and the controller).
//!
//! A snapshot is plain data: the controller fills it from its watchers, `simulate` fills it from files with
//! [`ClusterSnapshot::from_objects`]. Nothing in it is derived lazily, so it can be shared read-only.
//!
//! # File-input rules ([`ClusterSnapshot::from_objects`])
//!
//! * A Pod **without `spec.nodeName` is pending**; its `status` is ignored so hand-written pods work. (The
//!   controller instead applies upstream's provisionable-pod rules before filling the snapshot.)
//!   Pending pods owned by a DaemonSet are left out: DaemonSet pods are accounted for as overhead. Every pod a
//!   DaemonSet controls (pending, bound or terminal) may stand for it: the newest one's spec is what the
//!   DaemonSet's overhead is judged on ([`ClusterSnapshot::daemon_set_pod_spec`]), as upstream does.
//! * A Pod **with `spec.nodeName` is bound**, unless its phase is `Succeeded` or `Failed` (terminal pods use no
//!   resources and are dropped).
//! * A Deployment, ReplicaSet, StatefulSet or Job is **expanded** into pending pods only for the **replicas no
//!   pod of the input accounts for**. A non-terminal pod accounts for the workload its controlling
//!   `metadata.ownerReferences` entry names (same namespace). A pod whose ReplicaSet is not in the input (a dump
//!   without ReplicaSets) accounts for the Deployment whose name plus `-<pod-template-hash>` is that
//!   ReplicaSet's name, else for the Deployment whose selector matches the pod's labels. A Deployment whose
//!   ReplicaSets are in the input is represented by them (each expanded for its own missing replicas). So the
//!   output of `kubectl get all -o yaml`, or of `kubectl get deployments,pods`, is not counted twice.
//!   Replicas: `spec.replicas` (default 1) for Deployments, ReplicaSets and StatefulSets; `spec.parallelism`
//!   (default 1) for Jobs, none for a Job with a `completionTime`. Generated pods are named `<owner>-<i>` with
//!   the lowest `i` (from 0) no pod of the namespace has (a StatefulSet's missing ordinals), carry the
//!   template's labels and spec, an owner reference to the workload and the uid `generated/<namespace>/<name>`,
//!   so output is deterministic.
//! * Namespaces come from Namespace objects; a namespace referenced by a pod but not listed is added with the
//!   label `kubernetes.io/metadata.name` only (as the API server labels every namespace).
//! * A Node is initialized when its NodeClaim says `Initialized=True`, when it carries
//!   `karpenter.sh/initialized=true`, or when it is not managed by Karpenter (no `karpenter.sh/nodepool`
//!   label). It is marked for deletion when it or its NodeClaim has a deletion timestamp or it carries the
//!   `karpenter.sh/disrupted` taint. A NodeClaim whose node is not in the input is **in flight**.
//! * Every list is sorted by (namespace, name) so iteration order never depends on input order.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodSpec, PodStatus, PodTemplateSpec, Service, Taint,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use karpenter_api::condition::ConditionStatus;
use karpenter_api::dra::{DraError, DraObjects};
use karpenter_api::labels;
use karpenter_api::loader::{Loaded, Object};
use karpenter_api::nodeclaim::NodeClaimStatus;
use karpenter_api::selector::selector_matches;
use karpenter_api::{CompactPod, IntoSharedPod, NodeClaim, NodePool, SpecInterner};
use karpenter_requirements::{ResourceError, ResourceList};

/// The label the API server puts on every namespace.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A Service's selector, as far as default spread reads it ([`crate::default_spread::default_selector`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServiceSelector {
    /// Namespace.
    pub namespace: String,
    /// Name (Services are merged in name order: a later Service's value for a key wins).
    pub name: String,
    /// `spec.selector`; `None` (no selector) selects no pod, an empty map every pod.
    pub selector: Option<BTreeMap<String, String>>,
}

/// A pod controller's selector, as far as default spread reads it ([`crate::default_spread::default_selector`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ControllerSelector {
    /// Namespace.
    pub namespace: String,
    /// `ReplicationController`, `ReplicaSet` or `StatefulSet` (the owners kube-scheduler reads), or
    /// `Deployment`: file input expands Deployments into pods the Deployment owns directly, and there it stands
    /// for the ReplicaSet it would create, with the same selector.
    pub kind: String,
    /// Name.
    pub name: String,
    /// The selector (a ReplicationController's map as `matchLabels`).
    pub selector: LabelSelector,
}

/// Why a snapshot could not be built from objects.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// A resource quantity of a node or NodeClaim does not parse.
    #[error("{kind} {name}: {source}")]
    Resources {
        /// `Node` or `NodeClaim`.
        kind: &'static str,
        /// The object name.
        name: String,
        /// The bad quantity.
        source: ResourceError,
    },
    /// A DRA object cannot be read.
    #[error(transparent)]
    Dra(#[from] DraError),
}

/// A namespace and its labels (namespace selectors of pod affinity use them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamespaceInfo {
    /// The name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// A node as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// Startup taints of its NodeClaim (ignored while the node is not initialized).
    pub startup_taints: Vec<Taint>,
    /// `status.allocatable` (for an uninitialized node, missing resources are taken from its NodeClaim).
    pub allocatable: ResourceList,
    /// `status.capacity` (NodeClaim capacity where the node reports none).
    pub capacity: ResourceList,
    /// Owning NodePool (`karpenter.sh/nodepool` label); `None` for unmanaged nodes.
    pub node_pool: Option<String>,
    /// The NodeClaim backing this node, if any.
    pub node_claim: Option<String>,
    /// Initialized (see the module docs).
    pub initialized: bool,
    /// Being deleted or disrupted: pods must not be placed here.
    pub marked_for_deletion: bool,
    /// Nominated for pods in a previous pass (blocks voluntary disruption; not used by provisioning).
    pub nominated: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
}

/// A NodeClaim with what the scheduler needs.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClaimInfo {
    /// Name.
    pub name: String,
    /// Owning NodePool.
    pub node_pool: Option<String>,
    /// `status.nodeName`.
    pub node_name: Option<String>,
    /// `true` when its node is not (yet) in the snapshot: an in-flight claim, offered to pods like a node.
    pub in_flight: bool,
    /// The NodeClaim itself (labels, annotations, conditions, requirements, taints, startup taints, requests:
    /// read through the methods below). Shared, not copied, like pods: a copy per claim per pass was ~20 KB per
    /// node at every provisioning and disruption pass, and copies of its labels, annotations and conditions
    /// another ~4 KB.
    pub claim: Arc<NodeClaim>,
    /// `status.capacity`.
    pub capacity: ResourceList,
    /// `status.allocatable`.
    pub allocatable: ResourceList,
    /// Has a deletion timestamp.
    pub marked_for_deletion: bool,
    /// Nominated for pods in a previous pass.
    pub nominated: bool,
}

impl NodeClaimInfo {
    /// The claim's labels.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.claim.metadata.labels.as_ref().unwrap_or(&NO_STRINGS)
    }

    /// The claim's annotations.
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        self.claim.metadata.annotations.as_ref().unwrap_or(&NO_STRINGS)
    }

    /// The status of the claim's condition `type_`, if it has one.
    pub fn condition(&self, type_: &str) -> Option<ConditionStatus> {
        self.claim.conditions().iter().find(|c| c.type_ == type_).map(|c| c.status)
    }

    /// Whether the claim's condition `type_` is `True`.
    pub fn is_true(&self, type_: &str) -> bool {
        self.condition(type_) == Some(ConditionStatus::True)
    }
}

static NO_STRINGS: BTreeMap<String, String> = BTreeMap::new();

/// CSI volume limits of one node: driver → maximum attachable volumes.
pub type CsiLimits = BTreeMap<String, i32>;

/// Everything a scheduling (or disruption) decision reads.
#[derive(Debug, Clone, Default)]
pub struct ClusterSnapshot {
    /// Namespaces by name.
    pub namespaces: BTreeMap<String, NamespaceInfo>,
    /// Nodes, by name.
    pub nodes: Vec<NodeInfo>,
    /// NodeClaims (in-flight ones included), by name.
    pub node_claims: Vec<NodeClaimInfo>,
    /// NodePools found in the input (the scheduler takes its pools separately, with their instance types).
    pub node_pools: Vec<NodePool>,
    /// Every pod bound to a node, with annotations, by (namespace, name). Shared, not copied: the controller's
    /// state and every snapshot built from it hold the same pods.
    pub bound_pods: Vec<Arc<CompactPod>>,
    /// Pods to place, by (namespace, name). Shared like `bound_pods`.
    pub pending_pods: Vec<Arc<CompactPod>>,
    /// DaemonSets, by (namespace, name).
    pub daemon_sets: Vec<DaemonSet>,
    /// The newest pod of each DaemonSet, by the (namespace, name, uid) its pods' owner reference names (uid empty
    /// when the reference has none): what the DaemonSet costs a node is judged on it when there is one
    /// ([`ClusterSnapshot::daemon_set_pod_spec`]). Filled by [`ClusterSnapshot::offer_daemon_set_pod`].
    pub daemon_set_pods: BTreeMap<(String, String, String), Arc<CompactPod>>,
    /// PersistentVolumeClaims.
    pub pvcs: Vec<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub pvs: Vec<PersistentVolume>,
    /// StorageClasses.
    pub storage_classes: Vec<StorageClass>,
    /// CSINode volume limits by node name.
    pub csi_limits: BTreeMap<String, CsiLimits>,
    /// PodDisruptionBudgets.
    pub pdbs: Vec<PodDisruptionBudget>,
    /// Service selectors (read only for default topology spread constraints).
    pub services: Vec<ServiceSelector>,
    /// Pod controllers' selectors (read only for default topology spread constraints).
    pub controllers: Vec<ControllerSelector>,
    /// DRA ResourceClaims, claim templates, DeviceClasses and ResourceSlices (read only when DRA is simulated,
    /// `SchedulerOptions::ignore_dra_requests` false).
    pub dra: DraObjects,
}

/// (namespace, name) of a namespaced object: a manifest without a namespace lands in `default`, as
/// `kubectl apply` puts it. One rule for pods, workloads, Services and DaemonSets, so a hand-written pod without
/// a namespace counts for its ReplicaSet in `default` (and is not invented a second time), and a Service or
/// controller written without one selects `default`'s pods.
fn meta_key(m: &ObjectMeta) -> (String, String) {
    (m.namespace.clone().unwrap_or_else(|| "default".to_owned()), m.name.clone().unwrap_or_default())
}

/// (namespace, name) borrowed: the sort key of every list, compared without copying the strings (a snapshot of
/// thousands of pods is sorted on every pass).
fn meta_ref(m: &ObjectMeta) -> (&str, &str) {
    (m.namespace.as_deref().unwrap_or_default(), m.name.as_deref().unwrap_or_default())
}

fn owned_by(m: &ObjectMeta) -> impl Iterator<Item = &OwnerReference> {
    m.owner_references.iter().flatten()
}

/// Newest first: by creation time (none: oldest), then by name.
fn newest_first(a: &CompactPod, b: &CompactPod) -> std::cmp::Ordering {
    let rank = |p: &CompactPod| (p.metadata.creation_timestamp.as_ref().map(|t| t.0), p.metadata.name.clone());
    rank(b).cmp(&rank(a))
}

/// `namespace/name` of a pod (the identifier used in decisions): [`CompactPod::key`], as a function to map with.
pub fn pod_key(pod: &CompactPod) -> String {
    pod.key()
}

/// Whether a pod is owned by a DaemonSet.
pub fn is_daemon_set_pod(pod: &CompactPod) -> bool {
    pod.is_daemon_set_pod()
}

struct Workload {
    kind: &'static str,
    api_version: &'static str,
    namespace: String,
    name: String,
    uid: Option<String>,
    replicas: i32,
    template: PodTemplateSpec,
    /// `spec.selector` (Deployments: ties pods to it when their ReplicaSet is not in the input).
    selector: Option<LabelSelector>,
}

/// The label the Deployment controller puts on a ReplicaSet's pods (and suffixes the ReplicaSet's name with).
const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// Non-terminal pods per workload (namespace, kind, name). A pod counts for its controlling owner reference; when
/// that owner is a ReplicaSet absent from the input (a dump without ReplicaSets), or the pod has no owner, a pod
/// carrying `pod-template-hash` counts for the Deployment of its namespace whose name plus `-<hash>` is the
/// ReplicaSet's name, else for the one whose selector matches its labels.
fn account_pods<'a>(
    pods: impl Iterator<Item = (&'a ObjectMeta, Option<&'a PodStatus>)>,
    workloads: &[Workload],
    replica_sets: &[(Workload, Vec<OwnerReference>)],
) -> BTreeMap<(String, &'static str, String), usize> {
    let rs_in_input: BTreeSet<(&str, &str)> =
        replica_sets.iter().map(|(w, _)| (w.namespace.as_str(), w.name.as_str())).collect();
    let deployments: Vec<&Workload> = workloads.iter().filter(|w| w.kind == "Deployment").collect();
    let mut out: BTreeMap<(String, &'static str, String), usize> = BTreeMap::new();
    for (metadata, status) in pods {
        if matches!(status.and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")) {
            continue;
        }
        let (ns, _) = meta_key(metadata);
        let refs = metadata.owner_references.as_deref().unwrap_or_default();
        let owner = refs.iter().find(|o| o.controller == Some(true)).or_else(|| refs.first());
        let orphan_rs =
            owner.filter(|o| o.kind == "ReplicaSet" && !rs_in_input.contains(&(ns.as_str(), o.name.as_str())));
        if let Some(o) = owner
            && orphan_rs.is_none()
        {
            let kind = match o.kind.as_str() {
                "Deployment" => "Deployment",
                "ReplicaSet" => "ReplicaSet",
                "StatefulSet" => "StatefulSet",
                "Job" => "Job",
                _ => continue,
            };
            *out.entry((ns, kind, o.name.clone())).or_default() += 1;
            continue;
        }
        let labels = metadata.labels.clone().unwrap_or_default();
        let Some(hash) = labels.get(POD_TEMPLATE_HASH) else { continue };
        let in_ns = || deployments.iter().filter(|d| d.namespace == ns);
        let by_name = orphan_rs.and_then(|o| in_ns().find(|d| o.name == format!("{}-{hash}", d.name)));
        let found = by_name
            .or_else(|| in_ns().find(|d| d.selector.is_some() && selector_matches(d.selector.as_ref(), &labels)));
        if let Some(d) = found {
            *out.entry((ns.clone(), "Deployment", d.name.clone())).or_default() += 1;
        }
    }
    out
}

/// `count` invented pods of `w`, named `<owner>-<i>` with the lowest `i` whose name no pod of the namespace has
/// (so a StatefulSet's missing ordinals are the ones invented).
fn expand(w: &Workload, count: usize, taken: &mut BTreeSet<(String, String)>) -> Vec<Pod> {
    let mut out = Vec::new();
    let mut i = 0u64;
    while out.len() < count {
        let name = format!("{}-{i}", w.name);
        i += 1;
        if !taken.insert((w.namespace.clone(), name.clone())) {
            continue;
        }
        let tm = &w.template.metadata;
        let mut spec: PodSpec = w.template.spec.clone().unwrap_or_default();
        spec.node_name = None;
        out.push(Pod {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(w.namespace.clone()),
                uid: Some(format!("generated/{}/{name}", w.namespace)),
                labels: tm.as_ref().and_then(|m| m.labels.clone()),
                annotations: tm.as_ref().and_then(|m| m.annotations.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: w.api_version.to_owned(),
                    kind: w.kind.to_owned(),
                    name: w.name.clone(),
                    uid: w.uid.clone().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                ..Default::default()
            },
            spec: Some(spec),
            status: None,
        });
    }
    out
}

fn api_resources(
    kind: &'static str,
    name: &str,
    list: &karpenter_api::nodeclaim::ResourceQuantities,
) -> Result<ResourceList, SnapshotError> {
    let mut out = ResourceList::new();
    for (k, v) in list {
        let q = v.parse().map_err(|source| SnapshotError::Resources {
            kind,
            name: name.to_owned(),
            source: ResourceError::Quantity { resource: k.clone(), source },
        })?;
        out.insert(k, q);
    }
    Ok(out)
}

fn k8s_resources(
    kind: &'static str,
    name: &str,
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Result<ResourceList, SnapshotError> {
    match list {
        None => Ok(ResourceList::new()),
        Some(l) => {
            ResourceList::from_k8s(l).map_err(|source| SnapshotError::Resources { kind, name: name.to_owned(), source })
        }
    }
}

/// Fills missing or zero resources of `base` from `fallback`.
fn fill_missing(base: &mut ResourceList, fallback: &ResourceList) {
    for (name, q) in fallback.iter() {
        if base.get(name).is_none_or(|b| b.is_zero()) {
            base.insert(name, *q);
        }
    }
}

/// Whether a Node is being deleted as provisioning and disruption see it (the controller's state and `simulate`
/// share the rule): it has a deletion timestamp or carries the `karpenter.sh/disrupted` taint (a disruption
/// command is taking it away). A node whose NodeClaim has a deletion timestamp is being deleted too.
pub fn is_deleting_node(node: &Node) -> bool {
    node.metadata.deletion_timestamp.is_some() || labels::taints::node_is_disrupted(node)
}

/// Fills a [`ClusterSnapshot`] from typed objects, one call per object, with the same rules as
/// [`ClusterSnapshot::from_objects`] (which is built on it) minus workload expansion: a pod with `spec.nodeName`
/// is bound (dropped when terminal), one without is pending (dropped when a DaemonSet owns it); nodes are
/// matched with their NodeClaims and namespaces completed in [`build`](Self::build). Nodes, NodeClaims and
/// CSINodes are borrowed until then (only what the scheduler reads is copied); pods are taken shared
/// (`Arc<CompactPod>`; a `Pod` or `CompactPod` converts), so a caller that keeps its pods shared (the controller's
/// state) builds a snapshot without copying any; everything else is moved in.
#[derive(Debug, Default)]
pub struct SnapshotBuilder<'a> {
    snap: ClusterSnapshot,
    nodes: Vec<&'a Node>,
    claims: Vec<Arc<NodeClaim>>,
    csi_nodes: Vec<&'a CSINode>,
}

impl<'a> SnapshotBuilder<'a> {
    /// Adds a namespace (its labels, plus `kubernetes.io/metadata.name` as the API server sets it).
    pub fn namespace(&mut self, ns: &Namespace) {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let mut labels = ns.metadata.labels.clone().unwrap_or_default();
        labels.entry(NAMESPACE_NAME_LABEL.to_owned()).or_insert_with(|| name.clone());
        self.snap.namespaces.insert(name.clone(), NamespaceInfo { name, labels });
    }

    /// Adds a node (converted in [`build`](Self::build), once its NodeClaim is known).
    pub fn node(&mut self, node: &'a Node) {
        self.nodes.push(node);
    }

    /// Adds a NodeClaim (in flight when its node is not added), shared like pods (a `NodeClaim` converts).
    pub fn node_claim(&mut self, claim: impl Into<Arc<NodeClaim>>) {
        self.claims.push(claim.into());
    }

    /// Adds a NodePool.
    pub fn node_pool(&mut self, pool: NodePool) {
        self.snap.node_pools.push(pool);
    }

    /// Adds a pod: bound with `spec.nodeName` (dropped when terminal), pending without (dropped when owned by a
    /// DaemonSet: DaemonSet pods are overhead). A DaemonSet's pod, whatever its state, is also offered as its
    /// DaemonSet's representative ([`Self::daemon_set_pod`]).
    pub fn pod(&mut self, pod: impl IntoSharedPod) {
        let pod: Arc<CompactPod> = pod.into_shared();
        self.snap.offer_daemon_set_pod(&pod);
        if pod.node_name().is_some() {
            if !pod.is_terminal() {
                self.snap.bound_pods.push(pod);
            }
        } else if !pod.is_daemon_set_pod() {
            self.snap.pending_pods.push(pod);
        }
    }

    /// Offers a DaemonSet's pod as its DaemonSet's representative only (the pod is not placed or counted):
    /// for the DaemonSet pods a caller leaves out of [`Self::pod`] (pending or on a node being deleted).
    pub fn daemon_set_pod(&mut self, pod: &Arc<CompactPod>) {
        self.snap.offer_daemon_set_pod(pod);
    }

    /// Adds a DaemonSet.
    pub fn daemon_set(&mut self, ds: DaemonSet) {
        self.snap.daemon_sets.push(ds);
    }

    /// Adds a PersistentVolumeClaim.
    pub fn pvc(&mut self, pvc: PersistentVolumeClaim) {
        self.snap.pvcs.push(pvc);
    }

    /// Adds a PersistentVolume.
    pub fn pv(&mut self, pv: PersistentVolume) {
        self.snap.pvs.push(pv);
    }

    /// Adds a StorageClass.
    pub fn storage_class(&mut self, sc: StorageClass) {
        self.snap.storage_classes.push(sc);
    }

    /// Adds a PodDisruptionBudget.
    pub fn pdb(&mut self, pdb: PodDisruptionBudget) {
        self.snap.pdbs.push(pdb);
    }

    /// Adds a Service's selector (default topology spread constraints read it).
    pub fn service(&mut self, svc: &Service) {
        let (namespace, name) = meta_key(&svc.metadata);
        let selector = svc.spec.as_ref().and_then(|s| s.selector.clone());
        self.snap.services.push(ServiceSelector { namespace, name, selector });
    }

    /// Adds a pod controller's selector (default topology spread constraints read it): `kind` is
    /// `ReplicationController`, `ReplicaSet`, `StatefulSet` or `Deployment`.
    pub fn controller(&mut self, kind: &str, metadata: &ObjectMeta, selector: LabelSelector) {
        let (namespace, name) = meta_key(metadata);
        self.snap.controllers.push(ControllerSelector { namespace, kind: kind.to_owned(), name, selector });
    }

    /// Adds a CSINode (its drivers' volume limits).
    pub fn csi_node(&mut self, csi: &'a CSINode) {
        self.csi_nodes.push(csi);
    }

    /// Sets the DRA objects.
    pub fn dra(&mut self, dra: DraObjects) {
        self.snap.dra = dra;
    }

    /// The snapshot: namespaces referenced by pods completed, nodes joined with their NodeClaims, every list
    /// sorted. Fails only on a node or NodeClaim quantity that does not parse.
    pub fn build(self) -> Result<ClusterSnapshot, SnapshotError> {
        let SnapshotBuilder { mut snap, nodes: raw_nodes, claims: raw_claims, csi_nodes } = self;
        for p in snap.bound_pods.iter().chain(&snap.pending_pods) {
            let ns = p.metadata.namespace.as_deref().unwrap_or("default");
            if !snap.namespaces.contains_key(ns) {
                snap.namespaces.insert(
                    ns.to_owned(),
                    NamespaceInfo {
                        labels: BTreeMap::from([(NAMESPACE_NAME_LABEL.to_owned(), ns.to_owned())]),
                        name: ns.to_owned(),
                    },
                );
            }
        }

        for c in csi_nodes {
            let name = c.metadata.name.clone().unwrap_or_default();
            let limits = c
                .spec
                .drivers
                .iter()
                .filter_map(|d| d.allocatable.as_ref().and_then(|a| a.count).map(|n| (d.name.clone(), n)))
                .collect();
            snap.csi_limits.insert(name, limits);
        }

        let node_names: BTreeSet<&str> = raw_nodes.iter().filter_map(|n| n.metadata.name.as_deref()).collect();
        let mut claims_by_node: BTreeMap<String, &NodeClaimInfo> = BTreeMap::new();
        let mut claim_infos = Vec::new();
        let no_status = NodeClaimStatus::default();
        for c in raw_claims {
            let name = c.metadata.name.clone().unwrap_or_default();
            let status = c.status.as_ref().unwrap_or(&no_status);
            let node_name = status.node_name.clone().filter(|n| !n.is_empty());
            claim_infos.push(NodeClaimInfo {
                in_flight: node_name.as_deref().is_none_or(|n| !node_names.contains(n)),
                node_pool: c.node_pool_name().map(str::to_owned),
                capacity: api_resources("NodeClaim", &name, &status.capacity)?,
                allocatable: api_resources("NodeClaim", &name, &status.allocatable)?,
                marked_for_deletion: c.metadata.deletion_timestamp.is_some(),
                nominated: false,
                claim: Arc::clone(&c),
                node_name,
                name,
            });
        }
        for c in &claim_infos {
            if let Some(n) = &c.node_name {
                claims_by_node.insert(n.clone(), c);
            }
        }

        for n in &raw_nodes {
            let name = n.metadata.name.clone().unwrap_or_default();
            let status = n.status.as_ref();
            let labels = n.metadata.labels.clone().unwrap_or_default();
            let taints = n.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
            let claim = claims_by_node.get(&name).copied();
            let mut allocatable = k8s_resources("Node", &name, status.and_then(|s| s.allocatable.as_ref()))?;
            let mut capacity = k8s_resources("Node", &name, status.and_then(|s| s.capacity.as_ref()))?;
            let node_pool = labels.get(labels::NODE_POOL).cloned();
            let initialized = node_pool.is_none()
                || labels.get(labels::NODE_INITIALIZED).is_some_and(|v| v == "true")
                || claim.is_some_and(|c| c.is_true("Initialized"));
            if let Some(c) = claim
                && !initialized
            {
                fill_missing(&mut allocatable, &c.allocatable);
                fill_missing(&mut capacity, &c.capacity);
            }
            snap.nodes.push(NodeInfo {
                annotations: n.metadata.annotations.clone().unwrap_or_default(),
                startup_taints: claim
                    .map(|c| c.claim.spec.startup_taints.iter().map(api_taint).collect())
                    .unwrap_or_default(),
                marked_for_deletion: is_deleting_node(n) || claim.is_some_and(|c| c.marked_for_deletion),
                node_claim: claim.map(|c| c.name.clone()),
                unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
                nominated: false,
                taints,
                allocatable,
                capacity,
                node_pool,
                initialized,
                labels,
                name,
            });
        }
        snap.node_claims = claim_infos;
        snap.sort();
        Ok(snap)
    }
}

impl ClusterSnapshot {
    /// An empty snapshot.
    pub fn new() -> Self {
        ClusterSnapshot::default()
    }

    /// A [`SnapshotBuilder`]: the typed way to fill a snapshot (what the controller does from its state).
    pub fn builder<'a>() -> SnapshotBuilder<'a> {
        SnapshotBuilder::default()
    }

    /// Builds a snapshot from loaded manifests with the file-input rules of the module docs. Objects of kinds
    /// the scheduler does not read (node classes, unknown kinds) are ignored. Fails only on a node or
    /// NodeClaim resource quantity that does not parse; pod problems are reported per pod by the scheduler.
    ///
    /// Long because it sorts each loaded kind into the builder and then resolves what needs every kind (workload
    /// replicas, shared specs) in one pass; each match arm is a kind.
    pub fn from_objects(objects: &[Loaded]) -> Result<ClusterSnapshot, SnapshotError> {
        let mut builder = SnapshotBuilder::default();
        let mut pods: Vec<&Pod> = Vec::new();
        // Pods the loader kept in compact form (simulate loads them so).
        let mut compact_pods: Vec<&Arc<CompactPod>> = Vec::new();
        let mut workloads: Vec<Workload> = Vec::new();
        let mut replica_sets: Vec<(Workload, Vec<OwnerReference>)> = Vec::new();
        let mut dra = DraObjects::default();
        for loaded in objects {
            match &loaded.object {
                Object::Namespace(ns) => builder.namespace(ns),
                Object::Node(n) => builder.node(n),
                Object::NodeClaim(c) => builder.node_claim((**c).clone()),
                Object::NodePool(p) => builder.node_pool((**p).clone()),
                Object::Pod(p) => pods.push(p),
                Object::CompactPod(p) => compact_pods.push(p),
                Object::DaemonSet(d) => builder.daemon_set((**d).clone()),
                Object::PersistentVolumeClaim(p) => builder.pvc((**p).clone()),
                Object::PersistentVolume(p) => builder.pv((**p).clone()),
                Object::StorageClass(s) => builder.storage_class((**s).clone()),
                Object::PodDisruptionBudget(p) => builder.pdb((**p).clone()),
                Object::CSINode(c) => builder.csi_node(c),
                Object::Service(svc) => builder.service(svc),
                Object::ResourceClaim(_)
                | Object::ResourceClaimTemplate(_)
                | Object::DeviceClass(_)
                | Object::ResourceSlice(_)
                | Object::Unknown(_) => {
                    dra.add(&loaded.object)?;
                }
                Object::ReplicationController(rc) => {
                    let selector = rc.spec.as_ref().and_then(|s| s.selector.clone());
                    let selector = LabelSelector { match_labels: selector, match_expressions: None };
                    builder.controller("ReplicationController", &rc.metadata, selector);
                }
                Object::Deployment(d) => {
                    let (namespace, name) = meta_key(&d.metadata);
                    let spec = d.spec.clone().unwrap_or_default();
                    builder.controller("Deployment", &d.metadata, spec.selector.clone());
                    workloads.push(Workload {
                        kind: "Deployment",
                        api_version: "apps/v1",
                        namespace,
                        name,
                        uid: d.metadata.uid.clone(),
                        replicas: spec.replicas.unwrap_or(1),
                        template: spec.template,
                        selector: Some(spec.selector),
                    });
                }
                Object::ReplicaSet(r) => {
                    let (namespace, name) = meta_key(&r.metadata);
                    let spec = r.spec.clone().unwrap_or_default();
                    builder.controller("ReplicaSet", &r.metadata, spec.selector.clone());
                    replica_sets.push((
                        Workload {
                            kind: "ReplicaSet",
                            api_version: "apps/v1",
                            namespace,
                            name,
                            uid: r.metadata.uid.clone(),
                            replicas: spec.replicas.unwrap_or(1),
                            template: spec.template.unwrap_or_default(),
                            selector: Some(spec.selector),
                        },
                        owned_by(&r.metadata).cloned().collect(),
                    ));
                }
                Object::StatefulSet(s) => {
                    let (namespace, name) = meta_key(&s.metadata);
                    let spec = s.spec.clone().unwrap_or_default();
                    builder.controller("StatefulSet", &s.metadata, spec.selector.clone());
                    workloads.push(Workload {
                        kind: "StatefulSet",
                        api_version: "apps/v1",
                        namespace,
                        name,
                        uid: s.metadata.uid.clone(),
                        replicas: spec.replicas.unwrap_or(1),
                        template: spec.template,
                        selector: Some(spec.selector),
                    });
                }
                Object::Job(j) => {
                    let (namespace, name) = meta_key(&j.metadata);
                    let spec = j.spec.clone().unwrap_or_default();
                    workloads.push(Workload {
                        kind: "Job",
                        api_version: "batch/v1",
                        namespace,
                        name,
                        uid: j.metadata.uid.clone(),
                        // A finished Job runs no pods.
                        replicas: if j.status.as_ref().is_some_and(|s| s.completion_time.is_some()) {
                            0
                        } else {
                            spec.parallelism.unwrap_or(1)
                        },
                        template: spec.template,
                        selector: spec.selector,
                    });
                }
                _ => {}
            }
        }

        // Replicas already accounted for, per workload (namespace, kind, name): the non-terminal pods it owns.
        let accounted = account_pods(
            pods.iter()
                .map(|p| (&p.metadata, p.status.as_ref()))
                .chain(compact_pods.iter().map(|p| (&p.metadata, p.status.as_ref()))),
            &workloads,
            &replica_sets,
        );
        // A Deployment whose ReplicaSets are in the input is represented by them (a rollout's old and new sets).
        let mut has_replica_sets: BTreeSet<(String, String)> = BTreeSet::new();
        for (rs, owners) in &replica_sets {
            for o in owners.iter().filter(|o| o.kind == "Deployment") {
                has_replica_sets.insert((rs.namespace.clone(), o.name.clone()));
            }
        }
        let mut taken: BTreeSet<(String, String)> = pods
            .iter()
            .map(|p| meta_key(&p.metadata))
            .chain(compact_pods.iter().map(|p| meta_key(&p.metadata)))
            .collect();
        // Replicas share one spec (a workload of 10,000 replicas is one spec, not 10,000 copies).
        let mut specs = SpecInterner::new();
        for p in pods {
            builder.pod(specs.intern(CompactPod::from(p)));
        }
        // A compact pod is shared as it is when its spec is the one this snapshot shares already; the loader's
        // specs are shared within a file, so each spec is looked up once.
        let mut shared_specs: HashMap<*const PodSpec, Arc<PodSpec>> = HashMap::new();
        for p in compact_pods {
            let spec = shared_specs.entry(Arc::as_ptr(&p.spec)).or_insert_with(|| specs.intern_spec(&p.spec));
            if Arc::ptr_eq(spec, &p.spec) {
                builder.pod(Arc::clone(p));
            } else {
                builder.pod(CompactPod { spec: Arc::clone(spec), ..(**p).clone() });
            }
        }
        for w in workloads.iter().chain(replica_sets.iter().map(|(w, _)| w)) {
            if w.kind == "Deployment" && has_replica_sets.contains(&(w.namespace.clone(), w.name.clone())) {
                continue;
            }
            let have = accounted.get(&(w.namespace.clone(), w.kind, w.name.clone())).copied().unwrap_or(0);
            let missing = (i64::from(w.replicas.max(0)) - have as i64).max(0) as usize;
            for p in expand(w, missing, &mut taken) {
                builder.pod(specs.intern(CompactPod::from(p)));
            }
        }
        builder.dra(dra);
        builder.build()
    }

    /// Sorts every list by (namespace, name). [`from_objects`](Self::from_objects) calls it; callers that fill
    /// the fields by hand may too (the scheduler does not depend on it: it sorts what it iterates).
    pub fn sort(&mut self) {
        self.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        self.node_claims.sort_by(|a, b| a.name.cmp(&b.name));
        self.node_pools.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        self.bound_pods.sort_by(|a, b| meta_ref(&a.metadata).cmp(&meta_ref(&b.metadata)));
        self.pending_pods.sort_by(|a, b| meta_ref(&a.metadata).cmp(&meta_ref(&b.metadata)));
        self.daemon_sets.sort_by(|a, b| meta_ref(&a.metadata).cmp(&meta_ref(&b.metadata)));
        self.pvcs.sort_by(|a, b| meta_ref(&a.metadata).cmp(&meta_ref(&b.metadata)));
        self.pvs.sort_by(|a, b| meta_ref(&a.metadata).cmp(&meta_ref(&b.metadata)));
        self.storage_classes.sort_by(|a, b| meta_ref(&a.metadata).cmp(&meta_ref(&b.metadata)));
        self.pdbs.sort_by(|a, b| meta_ref(&a.metadata).cmp(&meta_ref(&b.metadata)));
        self.services.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        self.controllers.sort_by(|a, b| (&a.namespace, &a.kind, &a.name).cmp(&(&b.namespace, &b.kind, &b.name)));
    }

    /// Keeps `pod` as its DaemonSet's representative when a DaemonSet controls it (its owner reference of kind
    /// `DaemonSet` not marked `controller: false`) and it is the newest such pod so far (by creation time,
    /// then name), as upstream keeps the newest pod its DaemonSet controls. Other pods are ignored.
    pub fn offer_daemon_set_pod(&mut self, pod: &Arc<CompactPod>) {
        let Some(owner) = karpenter_api::pod::daemon_set_owner(&pod.metadata) else { return };
        let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".to_owned());
        let key = (namespace, owner.name.clone(), owner.uid.clone());
        match self.daemon_set_pods.get(&key) {
            Some(kept) if newest_first(kept, pod).is_le() => {}
            _ => {
                self.daemon_set_pods.insert(key, Arc::clone(pod));
            }
        }
    }

    /// The pod spec a DaemonSet is judged on (its requests, tolerations, node selector and affinity): its newest
    /// pod's, which carries what admission changed (a LimitRange's or a webhook's requests), with the required
    /// node affinity of the template put back when the template has one (the DaemonSet controller pins each of
    /// its pods to its node, which says nothing of a new node); the template's when it has no pod. `None`
    /// without a template.
    pub fn daemon_set_pod_spec(&self, ds: &DaemonSet) -> Option<PodSpec> {
        let template = ds.spec.as_ref()?.template.spec.as_ref()?;
        let (namespace, name) = meta_key(&ds.metadata);
        let uid = ds.metadata.uid.as_deref().unwrap_or_default();
        // Pods whose owner reference names this DaemonSet: by uid when both sides have one (a pod of an earlier
        // DaemonSet of the same name is not this one's), by name otherwise.
        let pod = self
            .daemon_set_pods
            .range((namespace.clone(), name.clone(), String::new())..)
            .take_while(|((n, m, _), _)| *n == namespace && *m == name)
            .filter(|((_, _, owner_uid), _)| uid.is_empty() || owner_uid.is_empty() || owner_uid == uid)
            .map(|(_, p)| p)
            .min_by(|a, b| newest_first(a, b));
        let Some(pod) = pod else { return Some(template.clone()) };
        let mut spec = PodSpec::clone(&pod.spec);
        let required = template
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| n.required_during_scheduling_ignored_during_execution.clone());
        if let Some(required) = required {
            spec.affinity
                .get_or_insert_with(Default::default)
                .node_affinity
                .get_or_insert_with(Default::default)
                .required_during_scheduling_ignored_during_execution = Some(required);
        }
        // The pod is bound: its node name is not part of what the DaemonSet asks of a node.
        spec.node_name = None;
        Some(spec)
    }

    /// NodeClaims whose node is not in the snapshot.
    pub fn in_flight_claims(&self) -> impl Iterator<Item = &NodeClaimInfo> {
        self.node_claims.iter().filter(|c| c.in_flight)
    }

    /// Pods bound to `node`.
    pub fn pods_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a CompactPod> {
        self.bound_pods.iter().map(|p| p.as_ref()).filter(move |p| p.node_name() == Some(node))
    }
}

/// A Karpenter API taint as a core/v1 taint.
pub fn api_taint(t: &karpenter_api::Taint) -> Taint {
    Taint { key: t.key.clone(), value: t.value.clone(), effect: t.effect.as_str().to_owned(), time_added: None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::load_str;

    fn snap(yaml: &str) -> ClusterSnapshot {
        let objects = load_str(yaml, "test.yaml").expect("fixture loads");
        ClusterSnapshot::from_objects(&objects).expect("snapshot builds")
    }

    fn names(pods: &[Arc<CompactPod>]) -> Vec<String> {
        pods.iter().map(|p| pod_key(p)).collect()
    }

    const DEPLOY: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: x, resources: {requests: {cpu: "1"}}}]
"#;

    #[test]
    fn pod_without_node_name_is_pending_whatever_its_status() {
        let s = snap(
            r#"
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: default}
spec: {containers: [{name: c, image: x}]}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: default}
spec: {nodeName: n1, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: done, namespace: default}
spec: {nodeName: n1, containers: [{name: c, image: x}]}
status: {phase: Succeeded}
"#,
        );
        assert_eq!(names(&s.pending_pods), ["default/a"]);
        assert_eq!(names(&s.bound_pods), ["default/b"], "terminal pods are dropped");
        assert!(s.namespaces.contains_key("default"), "referenced namespaces are implied");
    }

    #[test]
    fn deployment_without_pods_is_expanded_deterministically() {
        let s = snap(DEPLOY);
        assert_eq!(names(&s.pending_pods), ["shop/web-0", "shop/web-1", "shop/web-2"]);
        let p = &s.pending_pods[0];
        assert_eq!(p.metadata.labels.as_ref().and_then(|l| l.get("app")).map(String::as_str), Some("web"));
        assert_eq!(p.metadata.uid.as_deref(), Some("generated/shop/web-0"));
        assert_eq!(s.namespaces["shop"].labels.get(NAMESPACE_NAME_LABEL).map(String::as_str), Some("shop"));
    }

    #[test]
    fn a_workload_without_a_namespace_expands_into_the_default_namespace() {
        let s = snap(&DEPLOY.replace("{name: web, namespace: shop}", "{name: web}"));
        assert_eq!(names(&s.pending_pods), ["default/web-0", "default/web-1", "default/web-2"]);
    }

    #[test]
    fn objects_without_a_namespace_meet_in_default() {
        // Hand-written input: the ReplicaSet, its bound pod and the Service name no namespace. The pod accounts
        // for one of the two replicas (one more is invented, under a name the pod does not hold), and the
        // ReplicaSet's and the Service's selectors are `default`'s, where the pods are.
        let s = snap(
            r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  labels: {app: web}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: u1, controller: true}]
spec: {nodeName: n1, containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {selector: {app: web}}
"#,
        );
        assert_eq!(names(&s.bound_pods), ["default/web-0"]);
        assert_eq!(names(&s.pending_pods), ["default/web-1"], "one replica is missing, and web-0 is taken");
        assert_eq!(s.controllers.iter().map(|c| c.namespace.as_str()).collect::<Vec<_>>(), ["default"]);
        assert_eq!(s.services.iter().map(|c| c.namespace.as_str()).collect::<Vec<_>>(), ["default"]);
    }

    #[test]
    fn deployment_with_its_replica_set_is_not_double_counted() {
        let rs = r#"
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-abc
  namespace: shop
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: u1}]
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: x}]}
"#;
        let s = snap(&format!("{DEPLOY}{rs}"));
        assert_eq!(
            names(&s.pending_pods),
            ["shop/web-abc-0", "shop/web-abc-1"],
            "the RS is expanded, not the Deployment"
        );
        let pod = r#"
---
apiVersion: v1
kind: Pod
metadata:
  name: web-abc-xyz
  namespace: shop
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-abc, uid: u2}]
spec: {containers: [{name: c, image: x}]}
"#;
        let s = snap(&format!("{DEPLOY}{rs}{pod}"));
        assert_eq!(
            names(&s.pending_pods),
            ["shop/web-abc-0", "shop/web-abc-xyz"],
            "kubectl get all output counts each pod once; the RS's second replica is invented"
        );
    }

    #[test]
    fn job_uses_parallelism_and_statefulset_replicas() {
        let s = snap(
            r#"
apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: default}
spec:
  parallelism: 2
  template: {spec: {restartPolicy: Never, containers: [{name: c, image: x}]}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: one, namespace: default}
spec:
  template: {spec: {restartPolicy: Never, containers: [{name: c, image: x}]}}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: default}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: c, image: x}]}
"#,
        );
        assert_eq!(
            names(&s.pending_pods),
            ["default/batch-0", "default/batch-1", "default/db-0", "default/db-1", "default/one-0"]
        );
    }

    #[test]
    fn statefulset_with_a_pod_in_the_input_is_expanded_for_its_missing_ordinals_only() {
        let s = snap(
            r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: default}
spec:
  replicas: 3
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: db-0
  namespace: default
  ownerReferences: [{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: u}]
spec: {nodeName: n1, containers: [{name: c, image: x}]}
"#,
        );
        assert_eq!(names(&s.pending_pods), ["default/db-1", "default/db-2"]);
        assert_eq!(names(&s.bound_pods), ["default/db-0"]);
    }

    /// A pod of `web` (DEPLOY's Deployment) as `kubectl get pods -o yaml` shows it: owned by a ReplicaSet that
    /// the dump does not hold.
    fn web_pod(name: &str, node: Option<&str>, hash: &str, app: &str) -> String {
        let node = node.map(|n| format!("nodeName: {n}, ")).unwrap_or_default();
        format!(
            r#"
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: shop
  labels: {{app: {app}, pod-template-hash: {hash}}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-{hash}, uid: u2, controller: true}}]
spec: {{{node}containers: [{{name: c, image: x, resources: {{requests: {{cpu: "1"}}}}}}]}}
"#
        )
    }

    #[test]
    fn deployment_without_replica_sets_counts_its_pods_by_template_hash() {
        let pods =
            format!("{}{}", web_pod("web-5d8-a", None, "5d8", "web"), web_pod("web-5d8-b", Some("n1"), "5d8", "web"));
        let s = snap(&format!("{DEPLOY}{pods}"));
        assert_eq!(names(&s.pending_pods), ["shop/web-0", "shop/web-5d8-a"], "3 replicas, 2 pods: 1 invented");
        assert_eq!(names(&s.bound_pods), ["shop/web-5d8-b"]);
        assert_eq!(s.pods_on("n1").map(|p| p.key()).collect::<Vec<_>>(), ["shop/web-5d8-b"]);

        // The ReplicaSet's name need not be `<deployment>-<hash>`: the selector ties the pod to it.
        let renamed = web_pod("x-1", None, "f77", "web").replace("name: web-f77", "name: other-f77");
        assert_eq!(names(&snap(&format!("{DEPLOY}{renamed}")).pending_pods), ["shop/web-0", "shop/web-1", "shop/x-1"]);
        // A pod the selector does not match, without the hash of a ReplicaSet named after the Deployment, is not
        // one of its replicas.
        let stranger = web_pod("y-1", None, "f77", "api").replace("name: web-f77", "name: api-f77");
        let s = snap(&format!("{DEPLOY}{stranger}"));
        assert_eq!(names(&s.pending_pods), ["shop/web-0", "shop/web-1", "shop/web-2", "shop/y-1"]);
        // Terminal pods are not replicas.
        let done = web_pod("web-5d8-c", Some("n1"), "5d8", "web").replace("spec:", "status: {phase: Failed}\nspec:");
        assert_eq!(names(&snap(&format!("{DEPLOY}{done}")).pending_pods), ["shop/web-0", "shop/web-1", "shop/web-2"]);
    }

    #[test]
    fn finished_job_is_not_expanded() {
        let s = snap(
            r#"
apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: default}
spec:
  parallelism: 2
  template: {spec: {restartPolicy: Never, containers: [{name: c, image: x}]}}
status: {completionTime: "2026-01-01T00:00:00Z", succeeded: 1}
"#,
        );
        assert!(s.pending_pods.is_empty());
    }

    #[test]
    fn daemon_set_pods_are_never_pending() {
        let s = snap(
            r#"
apiVersion: v1
kind: Pod
metadata:
  name: ds-x
  namespace: kube-system
  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: ds, uid: u}]
spec: {containers: [{name: c, image: x}]}
"#,
        );
        assert!(s.pending_pods.is_empty());
    }

    #[test]
    fn nodes_claims_and_flags() {
        let s = snap(
            r#"
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels: {karpenter.sh/nodepool: default}
spec:
  taints: [{key: karpenter.sh/disrupted, effect: NoSchedule}]
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: unmanaged, annotations: {a: b}}
status: {allocatable: {cpu: "2"}}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: c1, labels: {karpenter.sh/nodepool: default}}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: []
status: {nodeName: n1, allocatable: {cpu: "4", ephemeral-storage: 10Gi}}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: c2, labels: {karpenter.sh/nodepool: default}}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: []
---
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata: {name: n1}
spec:
  drivers: [{name: ebs.csi.aws.com, nodeID: i-1, allocatable: {count: 25}}]
"#,
        );
        assert_eq!(s.nodes.len(), 2);
        let n1 = &s.nodes[0];
        assert_eq!(n1.name, "n1");
        assert!(!n1.initialized, "managed node without Initialized");
        assert!(n1.marked_for_deletion, "disrupted taint");
        assert_eq!(n1.node_claim.as_deref(), Some("c1"));
        assert_eq!(n1.node_pool.as_deref(), Some("default"));
        assert_eq!(
            n1.allocatable.ephemeral_storage().to_string(),
            "10Gi",
            "uninitialized nodes take missing resources from the claim"
        );
        let un = &s.nodes[1];
        assert!(un.initialized && !un.marked_for_deletion);
        assert_eq!(un.annotations.get("a").map(String::as_str), Some("b"));
        let in_flight: Vec<&str> = s.in_flight_claims().map(|c| c.name.as_str()).collect();
        assert_eq!(in_flight, ["c2"]);
        assert_eq!(s.csi_limits["n1"]["ebs.csi.aws.com"], 25);
    }

    #[test]
    fn malformed_node_quantity_is_an_error_not_a_panic() {
        let objects = load_str(
            "apiVersion: v1\nkind: Node\nmetadata: {name: bad}\nstatus: {allocatable: {cpu: \"lots\"}}\n",
            "t.yaml",
        );
        // The loader may already reject the quantity; either way nothing panics.
        if let Ok(objects) = objects {
            let err = ClusterSnapshot::from_objects(&objects).expect_err("bad quantity");
            assert!(err.to_string().contains("bad"), "{err}");
        }
    }

    const AGENT: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system, uid: ds-2}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: c, image: x, resources: {requests: {cpu: "3"}}}]
"#;

    fn agent_pod(name: &str, created: &str, uid: &str, cpu: &str, node: Option<&str>) -> String {
        let node = node.map(|n| format!("nodeName: {n}, ")).unwrap_or_default();
        format!(
            r#"
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: kube-system
  creationTimestamp: "{created}"
  ownerReferences: [{{apiVersion: apps/v1, kind: DaemonSet, name: agent, uid: {uid}, controller: true}}]
spec:
  {{{node}affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: {{nodeSelectorTerms: [{{matchFields: [{{key: metadata.name, operator: In, values: [n1]}}]}}]}}}}}}, containers: [{{name: c, image: x, resources: {{requests: {{cpu: "{cpu}"}}}}}}]}}
"#
        )
    }

    fn cpu(spec: &PodSpec) -> String {
        let c = &spec.containers[0];
        c.resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get("cpu")).map(|q| q.0.clone()).unwrap()
    }

    #[test]
    fn daemon_set_is_judged_on_its_newest_pod() {
        // Bound, pending and of an earlier DaemonSet of the same name (another uid): the newest of this one's wins,
        // whatever the order the pods come in.
        let pods = [
            agent_pod("agent-a", "2026-01-01T10:00:00Z", "ds-2", "2", Some("n1")),
            agent_pod("agent-b", "2026-01-01T12:00:00Z", "ds-2", "1", None),
            agent_pod("agent-c", "2026-01-01T13:00:00Z", "ds-1", "500m", Some("n1")),
        ];
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
            let yaml = format!("{AGENT}{}{}{}", pods[order[0]], pods[order[1]], pods[order[2]]);
            let s = snap(&yaml);
            assert_eq!(s.pending_pods.len(), 0, "a DaemonSet's pending pod is not placed");
            let spec = s.daemon_set_pod_spec(&s.daemon_sets[0]).unwrap();
            assert_eq!(cpu(&spec), "1", "order {order:?}");
            assert_eq!(spec.node_name, None);
        }
        let s = snap(AGENT);
        assert_eq!(cpu(&s.daemon_set_pod_spec(&s.daemon_sets[0]).unwrap()), "3", "no pod: the template");
    }

    #[test]
    fn daemon_set_pod_node_pin_gives_way_to_the_template_affinity() {
        let term = |spec: &PodSpec| {
            spec.affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
                .map(|r| r.node_selector_terms.clone())
        };
        // The template has no required node affinity: the pod's (the controller's node pin, matchFields only,
        // which constrains no label) stays as upstream leaves it.
        let s = snap(&format!("{AGENT}{}", agent_pod("agent-a", "2026-01-01T10:00:00Z", "ds-2", "1", Some("n1"))));
        let spec = s.daemon_set_pod_spec(&s.daemon_sets[0]).unwrap();
        assert!(term(&spec).unwrap()[0].match_fields.is_some());
        // The template requires a label: that replaces the pin.
        let with_affinity = AGENT.replace(
            "    spec:\n      containers",
            "    spec:\n      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
             {nodeSelectorTerms: [{matchExpressions: [{key: foo, operator: In, values: [bar]}]}]}}}\n      containers",
        );
        assert_ne!(with_affinity, AGENT);
        let s =
            snap(&format!("{with_affinity}{}", agent_pod("agent-a", "2026-01-01T10:00:00Z", "ds-2", "1", Some("n1"))));
        let spec = s.daemon_set_pod_spec(&s.daemon_sets[0]).unwrap();
        let terms = term(&spec).unwrap();
        assert_eq!(terms.len(), 1);
        assert!(terms[0].match_fields.is_none());
        assert_eq!(terms[0].match_expressions.as_ref().unwrap()[0].key, "foo");
        assert_eq!(cpu(&spec), "1", "the pod's requests");
    }
}
