//! The scheduler's output: a versioned, documented JSON document.
//!
//! ```json
//! {
//!   "apiVersion": "karpenter-rs.scheduler/v1",
//!   "timedOut": false,
//!   "newNodeClaims": [{
//!     "name": "default-1",                    // placeholder hostname, unique in this document
//!     "nodePool": "default",
//!     "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]}],
//!     "instanceTypes": ["c-2x", "c-4x"],      // options, cheapest first, at most 600
//!     "price": 0.3,                           // cheapest compatible offering of the first option
//!     "pods": ["default/web-0"],
//!     "requests": {"cpu": "1", "pods": "1"},  // the pods' summed requests
//!     "daemonSetOverhead": {"cpu": "100m"},   // smallest DaemonSet overhead over the options
//!     "minValuesRelaxed": false
//!   }],
//!   "existingNodes": [{"name": "node-a", "inFlight": false, "pods": ["default/db-0"]}],
//!   "unschedulable": [{"pod": "default/big", "code": "Incompatible",
//!                      "reason": "NodePool default: no instance type has ..."}]
//! }
//! ```
//!
//! In Rust the document is typed: a plan's requirements are [`Requirements`], its quantities
//! [`ResourceList`]s and a pod's reason an [`UnschedulableReason`]; the JSON above is their view (`serde`), so
//! consumers use the values directly and never parse them back.
//!
//! * `requirements` are the NodeClaim's `spec.requirements`: simulation-only keys and the placeholder hostname
//!   removed, `node.kubernetes.io/instance-type In [options]` and `karpenter.sh/capacity-type` added. Numeric
//!   bounds serialise as `Gte`/`Lte`; `minValues` appears when set.
//! * Pods are named `namespace/name`; every pending pod of the snapshot appears exactly once: in a new claim,
//!   on an existing or in-flight node, or in `unschedulable`. Lists are sorted (claims in creation order,
//!   existing nodes by name, pods and unschedulable entries by name).
//! * `timedOut` is true when the deadline fired: the document holds what was decided until then and the
//!   remaining pods are listed as unschedulable with the reason `scheduling timed out` (code `Timeout`).
//! * `unschedulable[].reason` is the message for people, `code` a stable machine code to branch on (see
//!   [`UnschedulableReason::code`]; new codes may appear without a version change).
//!
//! The version string changes on any incompatible change of this format.

mod reason;

use std::collections::BTreeMap;

use karpenter_api::NodePool;
use karpenter_requirements::{Quantity, RequirementError, Requirements, ResourceList};
use serde::{Deserialize, Serialize};

pub use reason::{NodePoolRejection, RejectionKind, UnschedulableReason};

/// The `apiVersion` of [`Decisions`].
pub const API_VERSION: &str = "karpenter-rs.scheduler/v1";

/// Everything one scheduling pass decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decisions {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// The deadline fired before every pod was tried.
    pub timed_out: bool,
    /// NodeClaims to create.
    pub new_node_claims: Vec<NodeClaimPlan>,
    /// Pods placed on existing nodes and in-flight NodeClaims.
    pub existing_nodes: Vec<ExistingNodePlacement>,
    /// Pods that could not be placed, with why.
    pub unschedulable: Vec<UnschedulablePod>,
}

/// A NodeClaim to create, as typed values; the JSON form (module docs) is only a view of it.
/// [`crate::nodeclaim::build_node_claim`] turns it into the NodeClaim object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimPlan {
    /// Placeholder hostname (`<nodepool>-<n>`), unique in the document.
    pub name: String,
    /// The NodePool.
    pub node_pool: String,
    /// `spec.requirements` of the NodeClaim (JSON: a list of [`RequirementJson`] in key order).
    #[serde(with = "requirements_json")]
    pub requirements: Requirements,
    /// Instance-type options, cheapest first.
    pub instance_types: Vec<String>,
    /// Price of the cheapest compatible available offering of the first option (`null` if none).
    pub price: Option<f64>,
    /// Pods packed onto the claim.
    pub pods: Vec<String>,
    /// Summed requests of those pods (JSON: `name -> canonical quantity`).
    #[serde(with = "resources_json")]
    pub requests: ResourceList,
    /// DaemonSet overhead the claim is sized for (the smallest over the options).
    #[serde(with = "resources_json")]
    pub daemon_set_overhead: ResourceList,
    /// minValues were lowered under the BestEffort policy.
    pub min_values_relaxed: bool,
    /// A NodeOverlay changed the price of an offering of one of the options (absent from the JSON when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub price_overlay_applied: bool,
    /// A NodeOverlay added capacity to one of the options (absent from the JSON when false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capacity_overlay_applied: bool,
    /// The DRA drivers the claim's pods' resource claims rely on, sorted (annotation
    /// `karpenter.sh/requested-dra-drivers`; absent from the JSON when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requested_dra_drivers: Vec<String>,
}

/// Whether a NodeOverlay set the price of an offering of one of `its`, and whether one added capacity to one of
/// them: the plan's `price_overlay_applied` and `capacity_overlay_applied`.
pub fn overlay_flags(its: &[&karpenter_requirements::InstanceType]) -> (bool, bool) {
    (
        its.iter().any(|it| it.offerings.iter().any(|o| o.price_overlay_applied)),
        its.iter().any(|it| it.capacity_overlay_applied),
    )
}

impl NodeClaimPlan {
    /// A plan straight from a NodePool's template (a static pool's NodeClaim, a static-drift replacement): the
    /// template's `spec.requirements` (normalised by the algebra), no instance-type options (the provider picks),
    /// no pods, no requests.
    pub fn from_template(pool: &NodePool, name: impl Into<String>) -> Result<NodeClaimPlan, RequirementError> {
        Ok(NodeClaimPlan {
            name: name.into(),
            node_pool: pool.metadata.name.clone().unwrap_or_default(),
            requirements: karpenter_api::scheduling::requirements_from(&pool.spec.template.spec.requirements)?,
            instance_types: Vec::new(),
            price: None,
            pods: Vec::new(),
            requests: ResourceList::new(),
            daemon_set_overhead: ResourceList::new(),
            min_values_relaxed: false,
            price_overlay_applied: false,
            capacity_overlay_applied: false,
            requested_dra_drivers: Vec::new(),
        })
    }

    /// Sets the NodeOverlay flags from the plan's instance-type options `its` (whenever the options change).
    pub fn set_overlay_flags(&mut self, its: &[&karpenter_requirements::InstanceType]) {
        (self.price_overlay_applied, self.capacity_overlay_applied) = overlay_flags(its);
    }

    /// What the NodeClaim requests: the pods' requests plus the DaemonSet overhead.
    pub fn total_requests(&self) -> ResourceList {
        self.requests.add(&self.daemon_set_overhead)
    }
}

/// Pods placed on one existing node or in-flight NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExistingNodePlacement {
    /// Node name (or NodeClaim name when in flight).
    pub name: String,
    /// A NodeClaim without a node yet.
    pub in_flight: bool,
    /// Pods placed there.
    pub pods: Vec<String>,
}

/// A pod that could not be placed. JSON: `{"pod", "code", "reason"}`, `reason` being the message
/// ([`UnschedulableReason`]'s `Display`) and `code` its [`code`](UnschedulableReason::code).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "reason::UnschedulablePodJson", try_from = "reason::UnschedulablePodJson")]
pub struct UnschedulablePod {
    /// `namespace/name`.
    pub pod: String,
    /// Why, and so what to change to make it schedulable.
    pub reason: UnschedulableReason,
}

/// One requirement in JSON (`NodeSelectorRequirement` plus `minValues`): the view of [`Requirements`] in the
/// decision document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequirementJson {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gte` or `Lte`.
    pub operator: String,
    /// Values (sorted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// minValues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<u32>,
}

impl RequirementJson {
    /// The JSON form of a requirement set, in key order.
    pub fn from_requirements(reqs: &Requirements) -> Vec<RequirementJson> {
        reqs.to_serialized()
            .into_iter()
            .map(|s| RequirementJson {
                key: s.key,
                operator: s.operator.as_str().to_owned(),
                values: s.values,
                min_values: s.min_values,
            })
            .collect()
    }

    /// Back to the algebra (errors for an unknown operator or bad numeric value).
    pub fn to_requirements(list: &[RequirementJson]) -> Result<Requirements, RequirementError> {
        let mut out = Requirements::new();
        for r in list {
            let op = r
                .operator
                .parse()
                .map_err(|source| RequirementError::UnknownOperator { key: r.key.clone(), source })?;
            out.add(karpenter_requirements::Requirement::new(&r.key, op, &r.values, r.min_values)?);
        }
        Ok(out)
    }
}

/// `serde(with)` for [`Requirements`] as a list of [`RequirementJson`].
mod requirements_json {
    use super::{RequirementJson, Requirements};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(reqs: &Requirements, s: S) -> Result<S::Ok, S::Error> {
        RequirementJson::from_requirements(reqs).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Requirements, D::Error> {
        let list = Vec::<RequirementJson>::deserialize(d)?;
        RequirementJson::to_requirements(&list).map_err(serde::de::Error::custom)
    }
}

/// `serde(with)` for a [`ResourceList`] as `name -> canonical quantity string`, in name order.
mod resources_json {
    use super::{BTreeMap, Quantity, ResourceList};
    use serde::ser::SerializeMap;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(list: &ResourceList, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(list.len()))?;
        for (name, q) in list.iter() {
            map.serialize_entry(name, &q.to_string())?;
        }
        map.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ResourceList, D::Error> {
        let map = BTreeMap::<String, String>::deserialize(d)?;
        let mut out = ResourceList::new();
        for (name, q) in map {
            let q: Quantity =
                q.parse().map_err(|e| serde::de::Error::custom(format_args!("quantity of {name} {q:?}: {e}")))?;
            out.insert(&name, q);
        }
        Ok(out)
    }
}

impl Decisions {
    /// An empty document.
    pub fn new() -> Self {
        Decisions {
            api_version: API_VERSION.to_owned(),
            timed_out: false,
            new_node_claims: Vec::new(),
            existing_nodes: Vec::new(),
            unschedulable: Vec::new(),
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Number of pods placed (new claims plus existing nodes).
    pub fn placed_pods(&self) -> usize {
        self.new_node_claims.iter().map(|c| c.pods.len()).sum::<usize>()
            + self.existing_nodes.iter().map(|n| n.pods.len()).sum::<usize>()
    }

    /// Sum of the new claims' prices (claims without a price count as 0).
    pub fn total_price(&self) -> f64 {
        self.new_node_claims.iter().filter_map(|c| c.price).sum()
    }
}

impl Default for Decisions {
    fn default() -> Self {
        Decisions::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_requirements::{Format, Requirement};

    fn plan(reqs: Requirements) -> NodeClaimPlan {
        NodeClaimPlan {
            name: "default-1".into(),
            node_pool: "default".into(),
            requirements: reqs,
            instance_types: vec!["t".into()],
            price: Some(0.5),
            pods: vec!["default/p".into()],
            requests: ResourceList::new()
                .with("cpu", "1500m".parse().expect("quantity"))
                .with("pods", Quantity::from_int(1, Format::DecimalSI)),
            daemon_set_overhead: ResourceList::new().with("cpu", "100m".parse().expect("quantity")),
            min_values_relaxed: false,
            price_overlay_applied: false,
            capacity_overlay_applied: false,
            requested_dra_drivers: Vec::new(),
        }
    }

    #[test]
    fn json_round_trip_and_version() {
        let mut d = Decisions::new();
        let reqs: Requirements =
            [Requirement::in_values("a", ["x", "y"]).with_min_values(Some(2)), Requirement::exists("b")]
                .into_iter()
                .collect();
        d.new_node_claims.push(plan(reqs.clone()));
        d.unschedulable.push(UnschedulablePod { pod: "default/q".into(), reason: UnschedulableReason::Timeout });
        let json = d.to_json();
        assert!(json.contains("\"apiVersion\": \"karpenter-rs.scheduler/v1\""), "{json}");
        assert!(json.contains("\"minValues\": 2"), "{json}");
        let back: Decisions = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, d);
        assert_eq!(back.new_node_claims[0].requirements, reqs);
        assert_eq!(d.placed_pods(), 1);
    }

    /// The typed plan serialises exactly as the string form did: requirements in key order, quantities as
    /// canonical strings in name order, a pod's reason as its message next to its code.
    #[test]
    fn the_json_view_of_the_typed_plan_is_unchanged() {
        let reqs: Requirements = [
            Requirement::in_values("karpenter.sh/capacity-type", ["spot", "on-demand"]),
            Requirement::new("cpu", karpenter_requirements::Operator::Gt, &["3".to_owned()], None).expect("valid"),
        ]
        .into_iter()
        .collect();
        let value = serde_json::to_value(plan(reqs)).expect("serialises");
        assert_eq!(
            value,
            serde_json::json!({
                "name": "default-1", "nodePool": "default",
                "requirements": [
                    {"key": "cpu", "operator": "Gte", "values": ["4"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "spot"]}
                ],
                "instanceTypes": ["t"], "price": 0.5, "pods": ["default/p"],
                "requests": {"cpu": "1500m", "pods": "1"}, "daemonSetOverhead": {"cpu": "100m"},
                "minValuesRelaxed": false
            })
        );
        let text = serde_json::to_string(&serde_json::json!({"requests": value["requests"]})).expect("text");
        assert_eq!(text, r#"{"requests":{"cpu":"1500m","pods":"1"}}"#);
        let u = UnschedulablePod { pod: "default/q".into(), reason: UnschedulableReason::UninitializedNode };
        assert_eq!(
            serde_json::to_string(&u).expect("serialises"),
            r#"{"pod":"default/q","code":"UninitializedNode","reason":"would schedule against uninitialized nodeclaim"}"#
        );
    }

    #[test]
    fn bad_json_is_an_error_naming_the_problem() {
        let bad = r#"{"name": "x", "nodePool": "p", "requirements": [], "instanceTypes": [], "price": null, "pods": [],
            "requests": {"cpu": "lots"}, "daemonSetOverhead": {}, "minValuesRelaxed": false}"#;
        let err = serde_json::from_str::<NodeClaimPlan>(bad).unwrap_err();
        assert!(err.to_string().contains("quantity of cpu \"lots\""), "{err}");
        let bad = bad.replace(r#""requirements": []"#, r#""requirements": [{"key": "a", "operator": "Like"}]"#);
        assert!(serde_json::from_str::<NodeClaimPlan>(&bad).is_err());
    }

    #[test]
    fn a_template_plan_carries_the_pools_requirements_normalised() {
        let pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "static"},
            "spec": {"replicas": 1, "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["spot"]}
                ]}}}
        }))
        .expect("pool");
        let plan = NodeClaimPlan::from_template(&pool, "static-1").expect("valid");
        assert_eq!((plan.name.as_str(), plan.node_pool.as_str()), ("static-1", "static"));
        let ct = plan.requirements.get("karpenter.sh/capacity-type");
        assert!(ct.has("on-demand") && !ct.has("spot"), "repeated keys intersect");
        assert!(plan.instance_types.is_empty() && plan.requests.is_empty() && plan.price.is_none());
    }
}
