//! Manifest loading: YAML or JSON files into typed objects, with the origin of every object.
//!
//! This is the one loader every consumer uses (`karpenter-controller validate`, test fixtures, the simulator).
//!
//! # Input
//! - **YAML**: any number of documents separated by `---`. Empty documents (a bare `---`, only comments, or
//!   `null`) are skipped and do **not** count in the document index.
//! - **JSON** (an origin name ending in `.json`): one object, or a top-level array of objects (each counts as a
//!   document).
//! - A document of kind `List` (or any kind ending in `List`, as `kubectl get -o yaml` writes) is expanded into its
//!   `items`; each item keeps the list's document index plus its own `item` index.
//!
//! # Dispatch
//! Objects are decoded by `apiVersion` + `kind` into [`Object`]. Kinds the loader does not model become
//! [`Object::Unknown`] rather than an error, so a directory with Services, ConfigMaps or Secrets next to NodePools
//! still loads; callers that only care about some kinds ignore the rest. The providers' node classes are such
//! objects too: the loader knows no provider, and [`UnknownObject::decode`] gives a provider its type.
//! [`Object::validate`] reports an unknown kind or apiVersion **in a Karpenter API group** (`karpenter.sh`) as a
//! violation, so a typo like `kind: NodePoll` is not silently ignored by `validate`; [`Object::validate_with`]
//! also validates the node classes of the [`NodeClassApis`](crate::node_class_api::NodeClassApis) it is given
//! and counts their groups as Karpenter's.
//!
//! # Strictness
//! Like `kubectl apply` (strict field validation), a field the type does not know is an error, reported with the
//! path of the object that holds it: `spec.template.spec.requirements[0]: unknown field "operater"`. A misspelt
//! field whose value is empty or a default (`null`, `false`, `0`, `""`, `{}`, `[]`) is not detected.
//!
//! # Errors
//! [`LoadError`] names the file, the document (and list item) index, the object (`Kind/name`, when known), the
//! field path and, for YAML, the line. Loading never panics on any input.
//!
//! # Layout
//! The loader sits above the API types and nothing below it imports it: [`Object`], [`Loaded`] and the errors
//! (`object`) are data every consumer of loaded manifests matches on; reading text and files into them (the
//! `read` module, behind the crate feature `loader`) holds the parsers and the fast paths for large inputs
//! (a YAML block reader, a direct Pod decoder, block-wise reading of large Lists); [`lean`] decodes watched
//! objects without `managedFields`; [`LoadedSources`] and [`DraObjects::add`](crate::dra::DraObjects::add)
//! hand loaded objects to the capacity-buffer and DRA code, which know nothing of the loader.

/// Every kind the loader decodes, as `Variant(Type) = "apiVersion"`, handed to `$then!`: the one list that the
/// [`Object`] enum and the decoder table are both generated from, so they cannot disagree.
macro_rules! with_object_kinds {
    ($then:ident) => {
        $then! {
        NodePool(NodePool) = "karpenter.sh/v1",
        NodeClaim(NodeClaim) = "karpenter.sh/v1",
        NodeOverlay(NodeOverlay) = "karpenter.sh/v1alpha1",
        Pod(Pod) = "v1",
        Node(Node) = "v1",
        Namespace(Namespace) = "v1",
        PersistentVolumeClaim(PersistentVolumeClaim) = "v1",
        PersistentVolume(PersistentVolume) = "v1",
        Deployment(Deployment) = "apps/v1",
        ReplicaSet(ReplicaSet) = "apps/v1",
        StatefulSet(StatefulSet) = "apps/v1",
        DaemonSet(DaemonSet) = "apps/v1",
        Job(Job) = "batch/v1",
        StorageClass(StorageClass) = "storage.k8s.io/v1",
        CSINode(CSINode) = "storage.k8s.io/v1",
        PodDisruptionBudget(PodDisruptionBudget) = "policy/v1",
        Service(Service) = "v1",
        ReplicationController(ReplicationController) = "v1",
        ResourceClaim(ResourceClaim) = "resource.k8s.io/v1beta1",
        ResourceClaimTemplate(ResourceClaimTemplate) = "resource.k8s.io/v1beta1",
        DeviceClass(DeviceClass) = "resource.k8s.io/v1beta1",
        ResourceSlice(ResourceSlice) = "resource.k8s.io/v1beta1",
        PodTemplate(PodTemplate) = "v1",
        ResourceQuota(ResourceQuota) = "v1",
        CapacityBuffer(CapacityBuffer) = "autoscaling.x-k8s.io/v1beta1",
        }
    };
}

pub mod lean;
mod object;
#[cfg(feature = "loader")]
mod read;
mod sources;

pub use object::{
    DecodeError, KARPENTER_GROUPS, KARPENTER_KINDS, LoadError, Loaded, Object, Origin, UnknownObject,
    supported_api_version,
};
#[cfg(feature = "loader")]
pub(crate) use read::load_streamed;
#[cfg(feature = "loader")]
pub use read::{
    LoadOptions, Progress, decode_text, is_manifest_file, load_file, load_paths, load_paths_with, load_str,
    load_str_all, load_str_all_with, manifest_files,
};
pub use sources::LoadedSources;
