//! The loader's output: decoded objects with their origin, and why a document could not be loaded. Data only:
//! reading text into it lives in `read`.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate, ReplicationController, ResourceQuota,
    Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1beta1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde_json::Value;

use crate::capacitybuffer::CapacityBuffer;
use crate::node_class_api::NodeClassApis;
use crate::nodeclaim::NodeClaim;
use crate::nodeoverlay::NodeOverlay;
use crate::nodepool::NodePool;
use crate::pod::CompactPod;
use crate::validation::{Validate, ValidationContext, Violations};

/// The API group owned by Karpenter's core: an unknown kind or version in it is a mistake, not a foreign object.
/// The providers' groups are known through the [`NodeClassApis`] a caller validates with.
pub const KARPENTER_GROUPS: [&str; 1] = ["karpenter.sh"];

/// The core Karpenter kinds the loader decodes, as (apiVersion, kind). Node classes are the providers' (see
/// [`crate::node_class_api`]).
pub const KARPENTER_KINDS: [(&str, &str); 3] =
    [("karpenter.sh/v1", "NodePool"), ("karpenter.sh/v1", "NodeClaim"), ("karpenter.sh/v1alpha1", "NodeOverlay")];

/// Where a loaded object (or a load error) came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    /// The file path as given (or the origin name passed to `load_str`).
    pub file: String,
    /// 0-based index of the document in the file, counting only non-empty documents.
    pub document: usize,
    /// 0-based index in the `items` of a `List` document.
    pub item: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.file, self.document)?;
        if let Some(item) = self.item {
            write!(f, " item {item}")?;
        }
        Ok(())
    }
}

/// An object whose apiVersion/kind the loader does not model. Kept as JSON so callers can still look at it.
#[derive(Clone, Debug, PartialEq)]
pub struct UnknownObject {
    /// The object's `apiVersion`.
    pub api_version: String,
    /// The object's `kind`.
    pub kind: String,
    /// The whole object as read.
    pub value: Value,
}

impl UnknownObject {
    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        group_of(&self.api_version)
    }

    /// True if the group is Karpenter's core group (see [`KARPENTER_GROUPS`]).
    pub fn is_karpenter_group(&self) -> bool {
        KARPENTER_GROUPS.contains(&self.group())
    }

    /// True if the group is Karpenter's core group or a group of one of `node_classes`.
    pub fn is_karpenter_group_in(&self, node_classes: &NodeClassApis) -> bool {
        self.is_karpenter_group() || node_classes.owns_group(self.group())
    }

    /// The object as `K` when its apiVersion and kind are `K`'s (`None` otherwise); `Err` when it does not decode.
    /// How a provider reads its node classes from loaded manifests.
    pub fn decode<K>(&self) -> Option<Result<K, serde_json::Error>>
    where
        K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
    {
        (self.kind == K::kind(&()) && self.api_version == K::api_version(&())).then(|| K::deserialize(&self.value))
    }

    fn metadata_str(&self, field: &str) -> Option<&str> {
        self.value.get("metadata")?.get(field)?.as_str()
    }
}

macro_rules! define_objects {
    ($( $variant:ident($ty:ty) = $api_version:literal ),* $(,)?) => {
        /// A decoded object. Variants are boxed so the enum stays small.
        #[derive(Clone, Debug)]
        #[allow(clippy::large_enum_variant)]
        pub enum Object {
            $(
                #[doc = concat!("A `", stringify!($variant), "` of `", $api_version, "`.")]
                $variant(Box<$ty>),
            )*
            /// Any other apiVersion/kind (see the module docs).
            Unknown(Box<UnknownObject>),
            /// A Pod as decisions read it, when loaded with `LoadOptions::compact_pods`.
            CompactPod(Arc<CompactPod>),
        }

        impl Object {
            /// The object's `kind`.
            pub fn kind(&self) -> &str {
                match self {
                    $( Object::$variant(_) => stringify!($variant), )*
                    Object::Unknown(u) => &u.kind,
                    Object::CompactPod(_) => "Pod",
                }
            }

            /// The object's `apiVersion`.
            pub fn api_version(&self) -> &str {
                match self {
                    $( Object::$variant(_) => $api_version, )*
                    Object::Unknown(u) => &u.api_version,
                    Object::CompactPod(_) => "v1",
                }
            }

            /// `metadata.name`, if set.
            pub fn name(&self) -> Option<&str> {
                match self {
                    $( Object::$variant(o) => o.metadata.name.as_deref(), )*
                    Object::Unknown(u) => u.metadata_str("name"),
                    Object::CompactPod(p) => p.metadata.name.as_deref(),
                }
            }

            /// `metadata.namespace`, if set.
            pub fn namespace(&self) -> Option<&str> {
                match self {
                    $( Object::$variant(o) => o.metadata.namespace.as_deref(), )*
                    Object::Unknown(u) => u.metadata_str("namespace"),
                    Object::CompactPod(p) => p.metadata.namespace.as_deref(),
                }
            }
        }

        /// The apiVersion the loader decodes `kind` at (`apps/v1` for `Deployment`); `None` for kinds it does not
        /// model. An object of such a kind at another apiVersion (`extensions/v1beta1`) loads as
        /// [`Object::Unknown`].
        pub fn supported_api_version(kind: &str) -> Option<&'static str> {
            $(
                if kind == stringify!($variant) {
                    return Some($api_version);
                }
            )*
            None
        }
    };
}

with_object_kinds!(define_objects);

impl Object {
    /// `Kind/name` (`Kind/namespace/name` for namespaced objects; `Kind` alone when unnamed).
    pub fn display_name(&self) -> String {
        match (self.namespace(), self.name()) {
            (Some(ns), Some(name)) => format!("{}/{ns}/{name}", self.kind()),
            (None, Some(name)) => format!("{}/{name}", self.kind()),
            _ => self.kind().to_string(),
        }
    }

    /// True for the core Karpenter kinds and for unknown objects in the core Karpenter API group.
    pub fn is_karpenter(&self) -> bool {
        self.is_karpenter_in(&NodeClassApis::none())
    }

    /// [`Object::is_karpenter`], with the groups of `node_classes` counting as Karpenter's.
    pub fn is_karpenter_in(&self, node_classes: &NodeClassApis) -> bool {
        match self {
            Object::Unknown(u) => u.is_karpenter_group_in(node_classes),
            other => KARPENTER_KINDS.iter().any(|(_, kind)| *kind == other.kind()),
        }
    }

    /// Validates a core Karpenter object the way the API server plus upstream's runtime validation would; node
    /// classes are foreign to it (see [`Object::validate_with`]).
    ///
    /// Returns `None` for objects this crate does not validate (core kinds, foreign unknown kinds). An unknown kind
    /// or apiVersion in a Karpenter API group yields a violation on `kind` or `apiVersion`.
    pub fn validate(&self, ctx: &ValidationContext) -> Option<Violations> {
        self.validate_with(ctx, &NodeClassApis::none())
    }

    /// [`Object::validate`], also validating the node classes of `node_classes` (through their
    /// [`NodeClassApi::validate`](crate::node_class_api::NodeClassApi::validate)); their groups count as
    /// Karpenter's, so an unknown kind or version there is a violation too.
    pub fn validate_with(&self, ctx: &ValidationContext, node_classes: &NodeClassApis) -> Option<Violations> {
        match self {
            Object::NodePool(o) => Some(o.validate(ctx)),
            Object::NodeClaim(o) => Some(o.validate(ctx)),
            Object::NodeOverlay(o) => Some(o.validate(ctx)),
            Object::CapacityBuffer(o) => Some(o.validate(ctx)),
            Object::Unknown(u) => match node_classes.get(&u.api_version, &u.kind) {
                Some(api) => Some(api.validate(&u.value, ctx)),
                None if u.is_karpenter_group_in(node_classes) => Some(unknown_karpenter_kind(u, node_classes)),
                None => None,
            },
            _ => None,
        }
    }
}

fn unknown_karpenter_kind(u: &UnknownObject, node_classes: &NodeClassApis) -> Violations {
    let mut v = Violations::new();
    let kinds: Vec<(String, String)> = KARPENTER_KINDS
        .iter()
        .map(|(api_version, kind)| (api_version.to_string(), kind.to_string()))
        .chain(node_classes.iter().map(|a| (a.api_version(), a.kind().into_owned())))
        .collect();
    let same_kind: Vec<&str> =
        kinds.iter().filter(|(_, kind)| *kind == u.kind).map(|(api_version, _)| api_version.as_str()).collect();
    if let Some(expected) = same_kind.first() {
        v.push(
            "apiVersion",
            format!("unsupported apiVersion {:?} for kind {}, expected {expected:?}", u.api_version, u.kind),
        );
    } else {
        let known: Vec<&str> = kinds
            .iter()
            .filter(|(api_version, _)| group_of(api_version) == u.group())
            .map(|(_, kind)| kind.as_str())
            .collect();
        let hint = if known.is_empty() { String::new() } else { format!(" (known kinds: {})", known.join(", ")) };
        v.push("kind", format!("unknown kind {:?} in API group {}{hint}", u.kind, u.group()));
    }
    v
}

pub(super) fn group_of(api_version: &str) -> &str {
    match api_version.rsplit_once('/') {
        Some((group, _)) => group,
        None => "",
    }
}

/// One object with its origin.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// Where the object came from (file, document, List item).
    pub origin: Origin,
    /// The decoded object.
    pub object: Object,
}

impl Loaded {
    /// The origin and object as one label: `file.yaml: document 2 item 5: Pod/default/web`.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.origin, self.object.display_name())
    }
}

/// Why a file or a document could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file or directory could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path that could not be read.
        path: PathBuf,
        #[source]
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The text is not valid YAML/JSON (or exceeds the parser's limits); the whole file is rejected.
    #[error("{file}: {message}")]
    Syntax {
        /// The file's name as the loader was given it.
        file: String,
        /// 1-based line of the problem, when known (`message` names it too).
        line: Option<u64>,
        /// The parser's message.
        message: String,
    },
    /// A document parsed but is not a valid object of its kind.
    #[error(transparent)]
    Decode(Box<DecodeError>),
}

/// Why one document (or List item) could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {}{}{message}{}", object_prefix(object), path_prefix(path), line_suffix(*line))]
pub struct DecodeError {
    /// Where the document came from (file, document, List item).
    pub origin: Origin,
    /// `Kind/name` of the object, as far as it could be read.
    pub object: Option<String>,
    /// Field path of the problem (`spec.template.spec.requirements[0]`); empty for the object itself.
    pub path: String,
    /// 1-based line of the field in the YAML source, when known.
    pub line: Option<u64>,
    /// What is wrong, in the decoder's words.
    pub message: String,
}

fn object_prefix(object: &Option<String>) -> String {
    object.as_ref().map(|o| format!("{o}: ")).unwrap_or_default()
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() { String::new() } else { format!("{path}: ") }
}

fn line_suffix(line: Option<u64>) -> String {
    line.map(|l| format!(" (line {l})")).unwrap_or_default()
}

impl LoadError {
    /// The file the error is about.
    pub fn file(&self) -> String {
        match self {
            LoadError::Io { path, .. } => path.display().to_string(),
            LoadError::Syntax { file, .. } => file.clone(),
            LoadError::Decode(d) => d.origin.file.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_of_core_and_named() {
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("karpenter.sh/v1"), "karpenter.sh");
    }

    #[test]
    fn supported_api_versions_by_kind() {
        assert_eq!(supported_api_version("Deployment"), Some("apps/v1"));
        assert_eq!(supported_api_version("NodePool"), Some("karpenter.sh/v1"));
        assert_eq!(supported_api_version("Service"), Some("v1"));
        assert_eq!(supported_api_version("ConfigMap"), None);
    }
}
