//! Node-class kinds as values: how the core reads, validates and installs a provider's NodeClass API without
//! naming it.
//!
//! Upstream keeps each NodeClass API with its provider (EC2NodeClass in the AWS provider, KWOKNodeClass in kwok),
//! and so do we: a provider crate defines its kind and exports one [`NodeClassApi`] value for it (usually a
//! [`TypedNodeClassApi`] over the kind's type). Whoever assembles a program (the binary, a test) collects the
//! values it serves into a [`NodeClassApis`] and hands that to the code that needs to know node classes:
//! validation (the loader's `Object::validate_with`) and CRD generation
//! ([`crds_with`]). There is no global registry, as for [`ProviderLabels`].
//!
//! The manifest loader needs no registry: a node class loads as an `Object::Unknown` (its apiVersion, kind and
//! JSON), and `UnknownObject::decode` turns it into the provider's type (this module stands below the loader, which
//! is why those are not links).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::crd::{KarpenterCrd, core_crds, generate};
use crate::labels::ProviderLabels;
use crate::validation::{Validate, ValidationContext, Violation, Violations};

/// One node-class kind: its names, its validation and its CRD.
pub trait NodeClassApi: Send + Sync + fmt::Debug {
    /// The API group (`<provider domain>`), as in a `nodeClassRef.group`.
    fn group(&self) -> Cow<'static, str>;
    /// The served version (`v1`).
    fn version(&self) -> Cow<'static, str>;
    /// The kind, as in a `nodeClassRef.kind`.
    fn kind(&self) -> Cow<'static, str>;
    /// The resource's plural name (the CRD's `names.plural`).
    fn plural(&self) -> Cow<'static, str>;
    /// `group/version`.
    fn api_version(&self) -> String {
        format!("{}/{}", self.group(), self.version())
    }
    /// Every violation of `object` (the JSON form of one object of this kind), field paths from the object's root,
    /// as [`Validate`] reports them. An object that does not decode into the kind's type is one violation at the
    /// field that fails (the root when serde does not say).
    fn validate(&self, object: &Value, ctx: &ValidationContext) -> Violations;
    /// `object` decoded strictly into the kind's type and encoded again (defaults filled in, as a watch would
    /// see it); `Err` is the violation of the field that does not decode (the root when serde does not say).
    fn decode_json(&self, object: &Value) -> Result<Value, Violation>;
    /// The kind's CustomResourceDefinition for a provider's label vocabulary.
    fn crd(&self, labels: &ProviderLabels) -> CustomResourceDefinition;
}

/// The [`NodeClassApi`] of a kind whose Rust type is `K`: names from its `kube::Resource`, validation through its
/// [`Validate`], the CRD through [`crd::generate`](crate::crd::generate). A provider exports one as a `static`.
pub struct TypedNodeClassApi<K>(PhantomData<fn() -> K>);

impl<K> TypedNodeClassApi<K> {
    /// The API of `K`.
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

impl<K> Default for TypedNodeClassApi<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K> fmt::Debug for TypedNodeClassApi<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TypedNodeClassApi").field(&std::any::type_name::<K>()).finish()
    }
}

impl<K> NodeClassApi for TypedNodeClassApi<K>
where
    K: KarpenterCrd + kube::Resource<DynamicType = ()> + Validate + DeserializeOwned + Serialize,
{
    fn group(&self) -> Cow<'static, str> {
        K::group(&())
    }
    fn version(&self) -> Cow<'static, str> {
        K::version(&())
    }
    fn kind(&self) -> Cow<'static, str> {
        K::kind(&())
    }
    fn plural(&self) -> Cow<'static, str> {
        K::plural(&())
    }
    fn validate(&self, object: &Value, ctx: &ValidationContext) -> Violations {
        match decode_typed::<K>(object) {
            Ok(typed) => typed.validate(ctx),
            Err(violation) => {
                let mut v = Violations::new();
                v.push(violation.path, violation.message);
                v
            }
        }
    }
    fn decode_json(&self, object: &Value) -> Result<Value, Violation> {
        let typed = decode_typed::<K>(object)?;
        serde_json::to_value(typed).map_err(|e| Violation { path: String::new(), message: e.to_string() })
    }
    fn crd(&self, labels: &ProviderLabels) -> CustomResourceDefinition {
        generate::<K>(labels)
    }
}

/// Decodes `object` as `K`; on failure the field path (API server notation, `""` for the root) and serde's message.
fn decode_typed<K: DeserializeOwned>(object: &Value) -> Result<K, Violation> {
    #[cfg(feature = "loader")]
    {
        serde_path_to_error::deserialize(object).map_err(|e| {
            let mut path = String::new();
            for segment in e.path().iter() {
                match segment {
                    serde_path_to_error::Segment::Seq { index } => path = crate::validation::index(&path, *index),
                    serde_path_to_error::Segment::Map { key } | serde_path_to_error::Segment::Enum { variant: key } => {
                        path = crate::validation::field(&path, key)
                    }
                    serde_path_to_error::Segment::Unknown => {}
                }
            }
            Violation { path, message: e.into_inner().to_string() }
        })
    }
    #[cfg(not(feature = "loader"))]
    {
        <K as serde::Deserialize>::deserialize(object)
            .map_err(|e| Violation { path: String::new(), message: e.to_string() })
    }
}

/// The node-class kinds a program serves, in the order given (CRDs are generated in this order).
#[derive(Clone, Debug, Default)]
pub struct NodeClassApis {
    apis: Vec<&'static dyn NodeClassApi>,
}

impl NodeClassApis {
    /// No node-class kinds: every node class is a foreign object.
    pub const fn none() -> Self {
        Self { apis: Vec::new() }
    }

    /// These kinds.
    pub fn new(apis: impl IntoIterator<Item = &'static dyn NodeClassApi>) -> Self {
        Self { apis: apis.into_iter().collect() }
    }

    /// Adds a kind.
    pub fn with(mut self, api: &'static dyn NodeClassApi) -> Self {
        self.apis.push(api);
        self
    }

    /// The kinds, in order.
    pub fn iter(&self) -> impl Iterator<Item = &'static dyn NodeClassApi> + '_ {
        self.apis.iter().copied()
    }

    /// Whether no kind is served.
    pub fn is_empty(&self) -> bool {
        self.apis.is_empty()
    }

    /// The kind at exactly `api_version` and `kind`.
    pub fn get(&self, api_version: &str, kind: &str) -> Option<&'static dyn NodeClassApi> {
        self.iter().find(|a| a.kind() == kind && a.api_version() == api_version)
    }

    /// The kind named `kind` in `group`, at any version (a `nodeClassRef` names no version).
    pub fn by_group_kind(&self, group: &str, kind: &str) -> Option<&'static dyn NodeClassApi> {
        self.iter().find(|a| a.kind() == kind && a.group() == group)
    }

    /// Whether some kind is in `group`: an unknown kind or version there is a mistake, not a foreign object.
    pub fn owns_group(&self, group: &str) -> bool {
        self.iter().any(|a| a.group() == group)
    }

    /// Every kind's CRD for `labels`, in order.
    pub fn crds(&self, labels: &ProviderLabels) -> Vec<CustomResourceDefinition> {
        self.iter().map(|a| a.crd(labels)).collect()
    }
}

/// Every CRD Karpenter installs for `provider`: the [`core_crds`], then the CRDs of the node classes it serves
/// (`node_classes`, each provider's own).
pub fn crds_with(provider: &ProviderLabels, node_classes: &NodeClassApis) -> Vec<CustomResourceDefinition> {
    let mut out = core_crds(provider);
    out.extend(node_classes.crds(provider));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodeoverlay::NodeOverlay;

    // A core kind stands in for a provider's node class: the mechanism only needs a typed, validated CRD kind.
    static OVERLAY: TypedNodeClassApi<NodeOverlay> = TypedNodeClassApi::new();

    #[test]
    fn a_typed_api_takes_its_names_from_the_type() {
        assert_eq!(
            (OVERLAY.group(), OVERLAY.version(), OVERLAY.kind(), OVERLAY.plural()),
            ("karpenter.sh".into(), "v1alpha1".into(), "NodeOverlay".into(), "nodeoverlays".into())
        );
        assert_eq!(OVERLAY.api_version(), "karpenter.sh/v1alpha1");
        assert_eq!(OVERLAY.crd(&ProviderLabels::core_only("test")).spec.names.kind, "NodeOverlay");
    }

    #[test]
    fn the_registry_finds_kinds_by_version_and_group() {
        let apis = NodeClassApis::none().with(&OVERLAY);
        assert!(apis.get("karpenter.sh/v1alpha1", "NodeOverlay").is_some());
        assert!(apis.get("karpenter.sh/v1", "NodeOverlay").is_none());
        assert!(apis.by_group_kind("karpenter.sh", "NodeOverlay").is_some());
        assert!(apis.owns_group("karpenter.sh") && !apis.owns_group("example.com"));
        assert!(NodeClassApis::none().is_empty());
    }

    #[test]
    fn validation_reports_decoding_failures_at_their_field() {
        let ctx = ValidationContext::new(crate::test_vocabulary::aws());
        let bad = serde_json::json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": "o"}, "spec": {"weight": "heavy", "requirements": []}});
        let v = OVERLAY.validate(&bad, &ctx);
        assert_eq!(v.len(), 1, "{v:?}");
        #[cfg(feature = "loader")]
        assert!(v.has_path("spec.weight"), "{v:?}");
        let good = serde_json::json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
            "metadata": {"name": "o"}, "spec": {"requirements": [], "price": "1"}});
        assert!(OVERLAY.validate(&good, &ctx).is_empty(), "{:?}", OVERLAY.validate(&good, &ctx));
        assert_eq!(OVERLAY.decode_json(&good).unwrap()["spec"]["price"], "1");
        assert!(OVERLAY.decode_json(&bad).is_err());
    }
}
