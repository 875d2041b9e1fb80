//! KWOKNodeClass (`karpenter.kwok.sh/v1alpha1`): the node class of the kwok provider, which fakes nodes for
//! scale testing. Like upstream's, its spec is empty; its status carries conditions (`Ready`).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{Condition, Conditions};
use crate::crd::KarpenterCrd;
use crate::validation::{Validate, ValidationContext, Violations};

/// The kwok provider's group.
pub const GROUP: &str = "karpenter.kwok.sh";
/// The kind name used in `nodeClassRef.kind`.
pub const KIND: &str = "KWOKNodeClass";

/// KWOKNodeClass spec: intentionally empty (kwok nodes need no cloud configuration).
// kube-derive takes one `printcolumn(...)` per column; clippy reads the repeated `type_ = "string"` as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.kwok.sh",
    version = "v1alpha1",
    kind = "KWOKNodeClass",
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
        self.status.as_ref().is_some_and(|s| s.is_true(crate::nodeclaim::conditions::READY))
    }
}

impl Validate for KWOKNodeClass {
    /// Nothing to validate: the spec has no fields (unknown fields are rejected when decoding).
    fn validate(&self, _ctx: &ValidationContext) -> Violations {
        Violations::new()
    }
}

impl KarpenterCrd for KWOKNodeClass {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_empty_spec_and_rejects_unknown_fields() {
        let k: KWOKNodeClass = serde_saphyr::from_str(
            "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: default}\nspec: {}\n",
        )
        .unwrap();
        assert!(k.validate(&ValidationContext::default()).is_empty());
        assert!(!k.is_ready());
        let err = serde_saphyr::from_str::<KWOKNodeClass>(
            "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: default}\nspec: {foo: 1}\n",
        )
        .unwrap_err();
        assert!(err.to_string().contains("foo"), "{err}");
    }
}
