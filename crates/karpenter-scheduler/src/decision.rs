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
//!   "unschedulable": [{"pod": "default/big", "reason": "NodePool default: no instance type has ..."}]
//! }
//! ```
//!
//! * `requirements` are the NodeClaim's `spec.requirements`: simulation-only keys and the placeholder hostname
//!   removed, `node.kubernetes.io/instance-type In [options]` and `karpenter.sh/capacity-type` added. Numeric
//!   bounds serialise as `Gte`/`Lte`; `minValues` appears when set.
//! * Pods are named `namespace/name`; every pending pod of the snapshot appears exactly once: in a new claim,
//!   on an existing or in-flight node, or in `unschedulable`. Lists are sorted (claims in creation order,
//!   existing nodes by name, pods and unschedulable entries by name).
//! * `timedOut` is true when the deadline fired: the document holds what was decided until then and the
//!   remaining pods are listed as unschedulable with the reason `scheduling timed out`.
//!
//! The version string changes on any incompatible change of this format.

use std::collections::BTreeMap;

use karpenter_requirements::{Requirements, ResourceList};
use serde::{Deserialize, Serialize};

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

/// A NodeClaim to create.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimPlan {
    /// Placeholder hostname (`<nodepool>-<n>`), unique in the document.
    pub name: String,
    /// The NodePool.
    pub node_pool: String,
    /// `spec.requirements` of the NodeClaim.
    pub requirements: Vec<RequirementJson>,
    /// Instance-type options, cheapest first.
    pub instance_types: Vec<String>,
    /// Price of the cheapest compatible available offering of the first option (`null` if none).
    pub price: Option<f64>,
    /// Pods packed onto the claim.
    pub pods: Vec<String>,
    /// Summed requests of those pods.
    pub requests: BTreeMap<String, String>,
    /// DaemonSet overhead the claim is sized for (the smallest over the options).
    pub daemon_set_overhead: BTreeMap<String, String>,
    /// minValues were lowered under the BestEffort policy.
    pub min_values_relaxed: bool,
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

/// A pod that could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnschedulablePod {
    /// `namespace/name`.
    pub pod: String,
    /// What to change to make it schedulable.
    pub reason: String,
}

/// One requirement in JSON (`NodeSelectorRequirement` plus `minValues`).
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

    /// The JSON form of a NodePool template's requirements, as written (no normalisation); a negative or
    /// oversized minValues, which validation rejects, is dropped.
    pub fn from_node_pool_requirements(
        reqs: &[karpenter_api::NodeSelectorRequirementWithMinValues],
    ) -> Vec<RequirementJson> {
        reqs.iter()
            .map(|r| RequirementJson {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: r.values.clone(),
                min_values: r.min_values.and_then(|m| u32::try_from(m).ok()),
            })
            .collect()
    }

    /// Back to the algebra (errors for an unknown operator or bad numeric value).
    pub fn to_requirements(list: &[RequirementJson]) -> Result<Requirements, karpenter_requirements::RequirementError> {
        let mut out = Requirements::new();
        for r in list {
            let op = r.operator.parse().map_err(|source| {
                karpenter_requirements::RequirementError::UnknownOperator { key: r.key.clone(), source }
            })?;
            out.add(karpenter_requirements::Requirement::new(&r.key, op, &r.values, r.min_values)?);
        }
        Ok(out)
    }
}

/// A resource list as `name -> canonical quantity string`.
pub fn resources_json(list: &ResourceList) -> BTreeMap<String, String> {
    list.iter().map(|(n, q)| (n.to_owned(), q.to_string())).collect()
}

/// Parses [`resources_json`] output back.
pub fn resources_from_json(map: &BTreeMap<String, String>) -> Option<ResourceList> {
    let mut out = ResourceList::new();
    for (k, v) in map {
        out.insert(k, v.parse().ok()?);
    }
    Some(out)
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
    use karpenter_requirements::Requirement;

    #[test]
    fn json_round_trip_and_version() {
        let mut d = Decisions::new();
        let reqs: Requirements =
            [Requirement::in_values("a", ["x", "y"]).with_min_values(Some(2)), Requirement::exists("b")]
                .into_iter()
                .collect();
        d.new_node_claims.push(NodeClaimPlan {
            name: "default-1".into(),
            node_pool: "default".into(),
            requirements: RequirementJson::from_requirements(&reqs),
            instance_types: vec!["t".into()],
            price: Some(0.5),
            pods: vec!["default/p".into()],
            requests: BTreeMap::from([("cpu".into(), "1".into())]),
            daemon_set_overhead: BTreeMap::new(),
            min_values_relaxed: false,
        });
        let json = d.to_json();
        assert!(json.contains("\"apiVersion\": \"karpenter-rs.scheduler/v1\""), "{json}");
        assert!(json.contains("\"minValues\": 2"), "{json}");
        let back: Decisions = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, d);
        let r = RequirementJson::to_requirements(&back.new_node_claims[0].requirements).expect("valid");
        assert_eq!(r, reqs);
        assert_eq!(d.placed_pods(), 1);
    }
}
