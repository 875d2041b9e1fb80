//! The toy cloud's node-class API: `ToyNodeClass` (`karpenter.toy.example/v1alpha1`), cluster-scoped, with a
//! status subresource holding conditions.
//!
//! A NodePool names one in `spec.template.spec.nodeClassRef`; the cloud reads it when it describes instance types
//! (offerings in the class's region) and when it launches (the class's node limit).

use karpenter_api::ProviderLabels;
use karpenter_api::condition::{Condition, Conditions};
use karpenter_api::crd::KarpenterCrd;
use karpenter_api::node_class_api::TypedNodeClassApi;
use karpenter_api::nodeclaim::NodeClassReference;
use karpenter_api::validation::{Validate, ValidationContext, Violations};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the toy cloud's kinds (also its restricted label domain).
pub const GROUP: &str = "karpenter.toy.example";
/// The served version.
pub const VERSION: &str = "v1alpha1";
/// The kind, as a `nodeClassRef.kind` names it.
pub const KIND: &str = "ToyNodeClass";

/// The longest region name the toy cloud has (zones add a two-character suffix).
pub const MAX_REGION_LEN: usize = 32;

/// The provider's name (its `--provider` value, metrics label and log field).
pub const NAME: &str = "toy";

/// The toy cloud's labels: the core well-known set, and its API group as a restricted label domain (a NodePool
/// may not set `karpenter.toy.example/*` labels; the cloud owns them). One key of that domain is well-known: the
/// node-class label `karpenter.toy.example/toynodeclass`, which the scheduler puts in every NodeClaim's
/// requirements (the NodeClaim CRD generated with these labels would refuse the claims otherwise).
pub fn labels() -> ProviderLabels {
    ProviderLabels::new(NAME)
        .with_restricted_domain(GROUP)
        .with_well_known([NodeClassReference::new(GROUP, KIND, "").label_key()])
}

/// Where and how much the toy cloud launches for the NodePools that name this class.
#[derive(CustomResource, Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.toy.example",
    version = "v1alpha1",
    kind = "ToyNodeClass",
    plural = "toynodeclasses",
    singular = "toynodeclass",
    status = "ToyNodeClassStatus",
    derive = "PartialEq",
    doc = "ToyNodeClass is the node class of the toy cloud: the region its nodes run in and how many it may run."
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToyNodeClassSpec {
    /// The region the nodes run in: lower-case letters, digits and '-', starting with a letter. Its zones are
    /// `<region>-a` and `<region>-b`.
    pub region: String,
    /// The most instances the toy cloud runs for this class at once (terminating ones included); absent for no
    /// limit. A launch beyond it fails with insufficient capacity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<u32>,
}

/// Observed state of a ToyNodeClass: its conditions (`Ready`, set by the operator as soon as the class exists,
/// since the toy cloud needs no resources made for it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToyNodeClassStatus {
    /// Status conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl Conditions for ToyNodeClassStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

impl ToyNodeClassSpec {
    /// A spec for `region` with no node limit.
    pub fn in_region(region: impl Into<String>) -> Self {
        Self { region: region.into(), max_nodes: None }
    }

    /// The zones of the class's region, in launch-preference order.
    pub fn zones(&self) -> [String; 2] {
        [format!("{}-a", self.region), format!("{}-b", self.region)]
    }
}

impl ToyNodeClass {
    /// The class's problems, each naming its field; empty when the cloud can launch from it.
    pub fn problems(&self) -> Violations {
        self.validate(&ValidationContext { provider: labels() })
    }
}

impl Validate for ToyNodeClass {
    fn validate(&self, _ctx: &ValidationContext) -> Violations {
        let mut v = Violations::new();
        let region = &self.spec.region;
        if region.is_empty() {
            v.push("spec.region", "required: the region the nodes run in");
        } else if region.len() > MAX_REGION_LEN {
            v.push("spec.region", format!("{region:?} is longer than {MAX_REGION_LEN} characters"));
        } else if !region.starts_with(|c: char| c.is_ascii_lowercase())
            || region.ends_with('-')
            || !region.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            v.push(
                "spec.region",
                format!("{region:?} is not a region name: lower-case letters, digits and '-', starting with a letter"),
            );
        }
        if self.spec.max_nodes == Some(0) {
            v.push("spec.maxNodes", "0 would launch nothing: give at least 1, or leave it out for no limit");
        }
        v
    }
}

impl KarpenterCrd for ToyNodeClass {}

/// The ToyNodeClass API as the core takes node-class kinds (`karpenter_api::node_class_api`): its names, its
/// validation of a manifest's JSON ([`Validate`] above, or the field that does not decode) and its CRD.
pub static TOY_NODE_CLASS_API: TypedNodeClassApi<ToyNodeClass> = TypedNodeClassApi::new();

#[cfg(test)]
mod tests {
    use super::*;

    fn class(region: &str, max_nodes: Option<u32>) -> ToyNodeClass {
        ToyNodeClass::new("c", ToyNodeClassSpec { region: region.into(), max_nodes })
    }

    fn paths(c: &ToyNodeClass) -> Vec<String> {
        c.problems().into_iter().map(|v| v.to_string()).collect()
    }

    /// The domain is the cloud's, except the node-class label the scheduler writes into every NodeClaim's
    /// requirements (karpenter-controller's tests/toy_provider.rs saw the API server refuse the claims without it).
    #[test]
    fn the_node_class_label_is_the_one_well_known_key_of_the_restricted_domain() {
        let labels = labels();
        assert!(labels.is_restricted("karpenter.toy.example/size"));
        assert!(!labels.is_restricted("karpenter.toy.example/toynodeclass"));
        assert_eq!(labels.well_known.iter().collect::<Vec<_>>(), ["karpenter.toy.example/toynodeclass"]);
    }

    #[test]
    fn a_named_region_with_or_without_a_limit_is_valid() {
        assert!(paths(&class("toy-east-1", None)).is_empty());
        assert!(paths(&class("west2", Some(3))).is_empty());
    }

    #[test]
    fn each_problem_names_its_field() {
        let problems = paths(&class("", Some(0)));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("spec.region: required"), "{problems:?}");
        assert!(problems[1].starts_with("spec.maxNodes: 0 would launch nothing"), "{problems:?}");
        for bad in ["Toy-East", "1east", "east-", "east_1", &"x".repeat(MAX_REGION_LEN + 1)] {
            let problems = paths(&class(bad, None));
            assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
            assert!(problems[0].starts_with("spec.region: "), "{bad}: {problems:?}");
        }
    }

    #[test]
    fn zones_follow_the_region() {
        assert_eq!(ToyNodeClassSpec::in_region("toy-east-1").zones(), ["toy-east-1-a", "toy-east-1-b"]);
    }

    #[test]
    fn the_crd_serves_the_kind_cluster_scoped_with_a_status() {
        let crd = karpenter_api::crd::generate::<ToyNodeClass>(&crate::labels());
        assert_eq!(crd.metadata.name.as_deref(), Some("toynodeclasses.karpenter.toy.example"));
        assert_eq!((crd.spec.group.as_str(), crd.spec.scope.as_str()), (GROUP, "Cluster"));
        assert_eq!(crd.spec.names.kind, KIND);
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, VERSION);
        assert!(version.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
        let schema = serde_json::to_value(&version.schema).unwrap();
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["required"], serde_json::json!(["region"]), "{spec}");
    }

    /// The core validates a manifest's ToyNodeClass through the kind's API: the same problems, by field.
    #[test]
    fn the_node_class_api_validates_manifests_by_field() {
        use karpenter_api::node_class_api::NodeClassApi;
        let ctx = ValidationContext { provider: crate::labels() };
        let object = |spec: serde_json::Value| {
            serde_json::json!({"apiVersion": "karpenter.toy.example/v1alpha1", "kind": "ToyNodeClass",
                "metadata": {"name": "c"}, "spec": spec})
        };
        assert_eq!(TOY_NODE_CLASS_API.api_version(), "karpenter.toy.example/v1alpha1");
        assert!(TOY_NODE_CLASS_API.validate(&object(serde_json::json!({"region": "r1"})), &ctx).is_empty());
        let bad = TOY_NODE_CLASS_API.validate(&object(serde_json::json!({"region": "R", "maxNodes": 0})), &ctx);
        assert!(bad.has_path("spec.region") && bad.has_path("spec.maxNodes") && bad.len() == 2, "{bad:?}");
        let undecodable = TOY_NODE_CLASS_API.validate(&object(serde_json::json!({"region": "r", "max": 1})), &ctx);
        assert_eq!(undecodable.len(), 1, "{undecodable:?}");
        assert_eq!(TOY_NODE_CLASS_API.crd(&crate::labels()), crate::crds()[0]);
    }

    #[test]
    fn unknown_spec_fields_do_not_decode() {
        let object = serde_json::json!({"apiVersion": "karpenter.toy.example/v1alpha1", "kind": "ToyNodeClass",
            "metadata": {"name": "c"}, "spec": {"region": "r", "maxNode": 2}});
        let error = serde_json::from_value::<ToyNodeClass>(object).unwrap_err().to_string();
        assert!(error.contains("maxNode"), "{error}");
    }
}
