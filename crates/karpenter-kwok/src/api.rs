//! KWOKNodeClass (`karpenter.kwok.sh/v1alpha1`): the node class of the kwok provider, which fakes nodes for
//! scale testing. Like upstream's, its spec is empty; its status carries conditions (`Ready`). The provider owns
//! its API, as upstream's kwok provider does: [`KWOK_NODE_CLASS_API`] is what a program registers to read,
//! validate and install it.

use karpenter_api::condition::{Condition, Conditions};
use karpenter_api::crd::KarpenterCrd;
use karpenter_api::node_class_api::TypedNodeClassApi;
use karpenter_api::validation::{Validate, ValidationContext, Violations};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The kwok provider's group.
pub const GROUP: &str = "karpenter.kwok.sh";
/// The kind name used in `nodeClassRef.kind`.
pub const KIND: &str = "KWOKNodeClass";

/// KWOKNodeClass spec: intentionally empty (kwok nodes need no cloud configuration). May be absent: upstream
/// writes `{apiVersion, kind, metadata: {name: default}}`, and the CRD does not require it.
// kube-derive takes one `printcolumn(...)` per column; clippy reads the repeated `type_ = "string"` as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.kwok.sh",
    version = "v1alpha1",
    kind = "KWOKNodeClass",
    root = "KWOKNodeClassSchema",
    plural = "kwoknodeclasses",
    singular = "kwoknodeclass",
    category = "karpenter",
    status = "KWOKNodeClassStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "KWOKNodeClass is the node class of the kwok provider (fake nodes for testing Karpenter at scale).",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KWOKNodeClassSpec {}

karpenter_api::optional_spec_root!(
    /// KWOKNodeClass is the node class of the kwok provider (fake nodes for testing Karpenter at scale). Its
    /// `spec` may be absent (decoded as the empty spec).
    KWOKNodeClass,
    KWOKNodeClassSchema,
    KWOKNodeClassSpec,
    KWOKNodeClassStatus
);

/// Observed state of a KWOKNodeClass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KWOKNodeClassStatus {
    /// Status conditions (`Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl Conditions for KWOKNodeClassStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

impl KWOKNodeClass {
    /// Ready when the `Ready` condition is True (the kwok controller sets it unconditionally).
    pub fn is_ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| s.is_true(karpenter_api::nodeclaim::conditions::READY))
    }
}

impl Validate for KWOKNodeClass {
    /// Nothing to validate: the spec has no fields (unknown fields are rejected when decoding).
    fn validate(&self, _ctx: &ValidationContext) -> Violations {
        Violations::new()
    }
}

impl KarpenterCrd for KWOKNodeClass {}

/// The KWOKNodeClass API, for a program's [`NodeClassApis`](karpenter_api::node_class_api::NodeClassApis).
pub static KWOK_NODE_CLASS_API: TypedNodeClassApi<KWOKNodeClass> = TypedNodeClassApi::new();

/// The node classes this provider serves (KWOKNodeClass), as one registry.
pub fn node_class_apis() -> karpenter_api::node_class_api::NodeClassApis {
    karpenter_api::node_class_api::NodeClassApis::none().with(&KWOK_NODE_CLASS_API)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_empty_spec_and_rejects_unknown_fields() {
        let k: KWOKNodeClass = serde_saphyr::from_str(
            "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: default}\nspec: {}\n",
        )
        .unwrap();
        assert!(k.validate(&ValidationContext::new(crate::labels::provider_labels())).is_empty());
        assert!(!k.is_ready());
        let err = serde_saphyr::from_str::<KWOKNodeClass>(
            "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: default}\nspec: {foo: 1}\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("foo"), "{err}");
    }

    /// Upstream writes a KWOKNodeClass with no `spec`; a watch (JSON) and a manifest (YAML) decode it, and it
    /// serialises back with apiVersion and kind.
    #[test]
    fn decodes_without_spec() {
        let k: KWOKNodeClass = serde_json::from_str(
            r#"{"apiVersion":"karpenter.kwok.sh/v1alpha1","kind":"KWOKNodeClass","metadata":{"name":"default"},
                "status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2024-01-01T00:00:00Z"}]}}"#,
        )
        .unwrap();
        assert_eq!(k.metadata.name.as_deref(), Some("default"));
        assert!(k.is_ready());
        let y: KWOKNodeClass = serde_saphyr::from_str(
            "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: a}\n",
        )
        .unwrap();
        assert_eq!(y.spec, KWOKNodeClassSpec {});
        let v = serde_json::to_value(&y).unwrap();
        assert_eq!(v["apiVersion"], "karpenter.kwok.sh/v1alpha1");
        assert_eq!(v["kind"], "KWOKNodeClass");
        assert!(v.get("status").is_none());
        assert_eq!(<KWOKNodeClass as kube::Resource>::plural(&()), "kwoknodeclasses");
    }

    #[test]
    fn crd_does_not_require_spec() {
        let crd = <KWOKNodeClass as kube::CustomResourceExt>::crd();
        let schema = crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
        assert!(schema.required.as_ref().is_none_or(|r| !r.iter().any(|f| f == "spec")), "{:?}", schema.required);
        assert!(schema.properties.as_ref().unwrap().contains_key("spec"));
    }
}
