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
//!     "instanceTypeOptions": [                // each option's cheapest compatible offering, same order
//!       {"name": "c-2x", "price": 0.3, "zone": "zone-a", "capacityType": "spot"},
//!       {"name": "c-4x", "price": 0.5, "zone": "zone-b", "capacityType": "spot"}
//!     ],
//!     "zones": ["zone-a", "zone-b"],          // where the claim may land
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
//! * `instanceTypeOptions[i]` is `instanceTypes[i]` with its cheapest available offering compatible with the
//!   requirements (ties: capacity type, then zone, alphabetically): what the cloud launches if it picks that
//!   type, so the first one priced is the claim's cheapest ([`NodeClaimPlan::cheapest_offering`]). An option
//!   without such an offering has no `price`, `zone` nor `capacityType`.
//! * `zones` are the zones of every available offering of the options compatible with the requirements, sorted:
//!   the NodeClaim launches in one of them. Read [`NodeClaimPlan::zone`] / `zones` rather than the zone
//!   requirement, which may allow zones no option is offered in. Offerings without a zone add none.
//! * Pods are named `namespace/name` ([`PodKey`]); every pending pod of the snapshot appears exactly once: in a new claim,
//!   on an existing or in-flight node, or in `unschedulable`. Lists are sorted (claims in creation order,
//!   existing nodes by name, pods and unschedulable entries by name).
//! * `timedOut` is true when the deadline fired: the document holds what was decided until then and the
//!   remaining pods are listed as unschedulable with the reason `scheduling timed out` (code `Timeout`).
//! * `unschedulable[].reason` is the message for people, `code` a stable machine code to branch on (see
//!   [`UnschedulableReason::code`]; new codes may appear without a version change).
//!
//! The version string changes on any incompatible change of this format; fields are added without one
//! (`instanceTypeOptions` and `zones` were), and a document without them still reads.

mod pod_key;
pub(crate) mod reason;

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_api::NodePool;
use karpenter_requirements::{OfferingsExt, Quantity, RequirementError, Requirements, ResourceList};
use serde::{Deserialize, Serialize};

pub use pod_key::{PodKey, PodKeyError};
pub use reason::{NodePoolRejection, RejectionKind, UnschedulableReason};

/// The `apiVersion` of [`Decisions`].
pub const API_VERSION: &str = "karpenter-rs.scheduler/v1";

/// Everything one scheduling pass decided.
///
/// The output types are `#[non_exhaustive]`: fields are added without a breaking release, so code outside this
/// crate reads their public fields and builds them only through the scheduler or their constructors
/// ([`Decisions::new`], [`NodeClaimPlan::from_template`], [`ExistingNodePlacement::new`],
/// [`UnschedulablePod::new`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
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
///
/// ```
/// use karpenter_scheduler::prelude::*;
///
/// let pool = NodePool::builder("default", NodeClassReference::new("example.com", "ToyNodeClass", "default")).build();
/// let catalogue = [
///     InstanceType::builder("small").cpu(2).memory_gib(4).pods(110)
///         .offering(Offering::on_demand("zone-a", 0.10))
///         .offering(Offering::spot("zone-b", 0.04))
///         .build(),
///     InstanceType::builder("large").cpu(8).memory_gib(16).pods(110)
///         .offering(Offering::on_demand("zone-c", 0.40))
///         .build(),
/// ];
/// let mut snapshot = ClusterSnapshot::builder();
/// snapshot.pod(PodBuilder::new("shop", "web-0").requests(&ResourceList::try_from_pairs([(CPU, "1")]).unwrap()).build());
/// let snapshot = snapshot.build().unwrap();
/// let pools = [PoolInput { node_pool: &pool, instance_types: &catalogue }];
/// let decisions = schedule(&snapshot, &pools, &ProviderLabels::core_only("toy"), &SchedulerOptions::default());
///
/// let claim = &decisions.new_node_claims[0];
/// assert_eq!(claim.pods[0].namespace(), "shop");
/// assert_eq!(claim.pods[0].to_string(), "shop/web-0");
/// // Where it may land: every zone an option is offered in, whatever the zone requirement allows.
/// assert_eq!(claim.zones, ["zone-a", "zone-b", "zone-c"]);
/// // The cheapest offering: type, zone, capacity type and price.
/// let cheapest = claim.cheapest_offering().expect("an option is offered");
/// assert_eq!(
///     (cheapest.name.as_str(), cheapest.zone.as_deref(), cheapest.capacity_type.as_deref(), cheapest.price),
///     ("small", Some("zone-b"), Some("spot"), Some(0.04))
/// );
/// assert_eq!(claim.price, Some(0.04));
/// // Every option with its own cheapest offering, cheapest first.
/// let large = &claim.instance_types[1];
/// assert_eq!((large.name.as_str(), large.zone.as_deref(), large.price), ("large", Some("zone-c"), Some(0.40)));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "NodeClaimPlanJson", try_from = "NodeClaimPlanJson")]
#[non_exhaustive]
pub struct NodeClaimPlan {
    /// Placeholder hostname (`<nodepool>-<n>`), unique in the document.
    pub name: String,
    /// The NodePool.
    pub node_pool: String,
    /// `spec.requirements` of the NodeClaim (JSON: a list of [`RequirementJson`] in key order).
    pub requirements: Requirements,
    /// Instance-type options, cheapest first, each with its cheapest compatible offering (JSON: the names in
    /// `instanceTypes`, the offerings in `instanceTypeOptions`). [`NodeClaimPlan::set_instance_types`] sets them
    /// from the instance types. Shared, not copied, between the claims of a pass with the same options: a pass
    /// of one claim per pod (hostname anti-affinity) would otherwise copy three strings per option per claim,
    /// which cost more than the rest of the pass in the preference benchmark (issue 36).
    pub instance_types: Arc<[InstanceTypeOption]>,
    /// The claim's cheapest price: the first option's (`None` if no option has a compatible offering).
    pub price: Option<f64>,
    /// The zones the claim may land in, sorted: those of its options' available offerings compatible with its
    /// requirements ([`NodeClaimPlan::zone`] when there is one).
    pub zones: Vec<String>,
    /// Pods packed onto the claim, sorted.
    pub pods: Vec<PodKey>,
    /// Summed requests of those pods (JSON: `name -> canonical quantity`).
    pub requests: ResourceList,
    /// DaemonSet overhead the claim is sized for (the smallest over the options).
    pub daemon_set_overhead: ResourceList,
    /// minValues were lowered under the BestEffort policy.
    pub min_values_relaxed: bool,
    /// A NodeOverlay changed the price of an offering of one of the options (absent from the JSON when false).
    pub price_overlay_applied: bool,
    /// A NodeOverlay added capacity to one of the options (absent from the JSON when false).
    pub capacity_overlay_applied: bool,
    /// The DRA drivers the claim's pods' resource claims rely on, sorted (annotation
    /// `karpenter.sh/requested-dra-drivers`; absent from the JSON when empty).
    pub requested_dra_drivers: Vec<String>,
}

/// One instance-type option of a [`NodeClaimPlan`] and its cheapest available offering compatible with the
/// claim's requirements: where and how the type launches if the cloud picks it, at what price. The offering's
/// fields are `None` when the type has no such offering (a plan read from an older document, or options set
/// by a caller under requirements no offering meets).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct InstanceTypeOption {
    /// The instance type's name.
    pub name: String,
    /// The offering's hourly price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
    /// The offering's zone (`None` also when the offering names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// The offering's capacity type (`on-demand`, `spot`, `reserved`; `None` also when it names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_type: Option<String>,
}

impl InstanceTypeOption {
    /// An option named `name` with no offering known.
    pub fn named(name: impl Into<String>) -> Self {
        InstanceTypeOption { name: name.into(), price: None, zone: None, capacity_type: None }
    }

    /// `it` as an option of a claim with requirements `reqs`: its cheapest available offering compatible with
    /// them; equal prices go to the capacity type, then the zone, first in alphabetical order, so the choice
    /// does not depend on the catalogue's order. `allow_undefined` are the keys an offering may leave
    /// undefined (the provider's labels, as the scheduler checks offerings).
    pub fn of<K: karpenter_requirements::KeySet>(
        it: &karpenter_requirements::InstanceType,
        reqs: &Requirements,
        allow_undefined: &K,
    ) -> Self {
        let best = it
            .offerings
            .available()
            .filter(|o| o.is_compatible(reqs, allow_undefined))
            .min_by(|a, b| a.launch_order(b));
        InstanceTypeOption::with_offering(it, best)
    }

    /// `it` as an option whose cheapest offering is `best` (found by the caller as [`InstanceTypeOption::of`]
    /// finds it).
    pub(crate) fn with_offering(
        it: &karpenter_requirements::InstanceType,
        best: Option<&karpenter_requirements::Offering>,
    ) -> Self {
        InstanceTypeOption {
            name: it.name.clone(),
            price: best.map(|o| o.price),
            zone: best.and_then(|o| o.zone()).map(str::to_owned),
            capacity_type: best.and_then(|o| o.capacity_type()).map(str::to_owned),
        }
    }
}

/// The zones of the available offerings of `its` compatible with `reqs`, sorted and without repeats: where a
/// claim with those options and requirements may land.
pub fn offered_zones<K: karpenter_requirements::KeySet>(
    its: &[&karpenter_requirements::InstanceType],
    reqs: &Requirements,
    allow_undefined: &K,
) -> Vec<String> {
    let mut zones: Vec<&str> = its
        .iter()
        .flat_map(|it| it.offerings.available().filter(|o| o.is_compatible(reqs, allow_undefined)))
        .filter_map(|o| o.zone())
        .collect();
    zones.sort_unstable();
    zones.dedup();
    zones.into_iter().map(str::to_owned).collect()
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
            instance_types: Arc::default(),
            price: None,
            zones: Vec::new(),
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

    /// Makes `its` (in the order given: cheapest first) the plan's options under its current requirements: each
    /// option's cheapest offering, the claim's price (the first option's), its zones and the NodeOverlay flags.
    /// Set the requirements first; they are not changed.
    pub fn set_instance_types<K: karpenter_requirements::KeySet>(
        &mut self,
        its: &[&karpenter_requirements::InstanceType],
        allow_undefined: &K,
    ) {
        self.instance_types =
            its.iter().map(|it| InstanceTypeOption::of(it, &self.requirements, allow_undefined)).collect();
        self.price = self.instance_types.first().and_then(|o| o.price);
        self.zones = offered_zones(its, &self.requirements, allow_undefined);
        self.set_overlay_flags(its);
    }

    /// The names of the instance-type options, cheapest first.
    pub fn instance_type_names(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        self.instance_types.iter().map(|o| o.name.as_str())
    }

    /// The claim's cheapest offering: the option with the lowest price (the first of equal ones), with its
    /// zone and capacity type. `None` when no option has a compatible offering.
    pub fn cheapest_offering(&self) -> Option<&InstanceTypeOption> {
        self.instance_types
            .iter()
            .filter(|o| o.price.is_some())
            .min_by(|a, b| a.price.unwrap_or(f64::INFINITY).total_cmp(&b.price.unwrap_or(f64::INFINITY)))
    }

    /// The one zone the claim lands in, when its options are offered in exactly one (`None`: several, or none
    /// known).
    pub fn zone(&self) -> Option<&str> {
        match self.zones.as_slice() {
            [zone] => Some(zone),
            _ => None,
        }
    }

    /// What the NodeClaim requests: the pods' requests plus the DaemonSet overhead.
    pub fn total_requests(&self) -> ResourceList {
        self.requests.add(&self.daemon_set_overhead)
    }
}

/// Pods placed on one existing node or in-flight NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ExistingNodePlacement {
    /// Node name (or NodeClaim name when in flight).
    pub name: String,
    /// A NodeClaim without a node yet.
    pub in_flight: bool,
    /// Pods placed there, sorted.
    pub pods: Vec<PodKey>,
}

impl ExistingNodePlacement {
    /// `pods` placed on the node (or in-flight NodeClaim) `name`.
    pub fn new(name: impl Into<String>, in_flight: bool, pods: Vec<PodKey>) -> Self {
        ExistingNodePlacement { name: name.into(), in_flight, pods }
    }
}

/// A pod that could not be placed. JSON: `{"pod", "code", "reason"}`, `reason` being the message
/// ([`UnschedulableReason`]'s `Display`) and `code` its [`code`](UnschedulableReason::code).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "UnschedulablePodJson", try_from = "UnschedulablePodJson")]
#[non_exhaustive]
pub struct UnschedulablePod {
    /// The pod.
    pub pod: PodKey,
    /// Why, and so what to change to make it schedulable.
    pub reason: UnschedulableReason,
}

impl UnschedulablePod {
    /// `pod`, left out for `reason`.
    pub fn new(pod: PodKey, reason: UnschedulableReason) -> Self {
        UnschedulablePod { pod, reason }
    }
}

/// [`UnschedulablePod`]'s JSON form. With the pod rather than the reason (`decision/reason.rs`), which knows
/// nothing of the pod it explains.
#[derive(Serialize, Deserialize)]
struct UnschedulablePodJson {
    pod: PodKey,
    code: String,
    reason: String,
}

impl From<UnschedulablePod> for UnschedulablePodJson {
    fn from(u: UnschedulablePod) -> Self {
        UnschedulablePodJson { code: u.reason.code().to_owned(), reason: u.reason.to_string(), pod: u.pod }
    }
}

impl TryFrom<UnschedulablePodJson> for UnschedulablePod {
    type Error = String;

    fn try_from(j: UnschedulablePodJson) -> Result<Self, String> {
        let reason = UnschedulableReason::from_code_and_message(&j.code, &j.reason)
            .ok_or_else(|| format!("pod {}: unknown reason code {:?} or message {:?}", j.pod, j.code, j.reason))?;
        Ok(UnschedulablePod { pod: j.pod, reason })
    }
}

/// One requirement in JSON (`NodeSelectorRequirement` plus `minValues`): the view of [`Requirements`] in the
/// decision document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
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

/// [`NodeClaimPlan`]'s JSON form (module docs). The names stay in `instanceTypes`, as before options carried
/// offerings, so a reader of the names alone sees the list it always saw.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeClaimPlanJson {
    name: String,
    node_pool: String,
    #[serde(with = "requirements_json")]
    requirements: Requirements,
    instance_types: Vec<String>,
    price: Option<f64>,
    /// Absent from documents written before options carried offerings: their offerings are then unknown.
    #[serde(default)]
    instance_type_options: Option<Vec<InstanceTypeOption>>,
    #[serde(default)]
    zones: Vec<String>,
    pods: Vec<PodKey>,
    #[serde(with = "resources_json")]
    requests: ResourceList,
    #[serde(with = "resources_json")]
    daemon_set_overhead: ResourceList,
    min_values_relaxed: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    price_overlay_applied: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    capacity_overlay_applied: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    requested_dra_drivers: Vec<String>,
}

impl From<NodeClaimPlan> for NodeClaimPlanJson {
    fn from(p: NodeClaimPlan) -> Self {
        NodeClaimPlanJson {
            name: p.name,
            node_pool: p.node_pool,
            requirements: p.requirements,
            instance_types: p.instance_types.iter().map(|o| o.name.clone()).collect(),
            price: p.price,
            instance_type_options: Some(p.instance_types.to_vec()),
            zones: p.zones,
            pods: p.pods,
            requests: p.requests,
            daemon_set_overhead: p.daemon_set_overhead,
            min_values_relaxed: p.min_values_relaxed,
            price_overlay_applied: p.price_overlay_applied,
            capacity_overlay_applied: p.capacity_overlay_applied,
            requested_dra_drivers: p.requested_dra_drivers,
        }
    }
}

impl TryFrom<NodeClaimPlanJson> for NodeClaimPlan {
    type Error = String;

    fn try_from(j: NodeClaimPlanJson) -> Result<Self, String> {
        let instance_types = match j.instance_type_options {
            None => j.instance_types.into_iter().map(InstanceTypeOption::named).collect(),
            Some(options) => {
                let names = options.iter().map(|o| o.name.as_str());
                if !names.eq(j.instance_types.iter().map(String::as_str)) {
                    return Err(format!(
                        "claim {}: instanceTypeOptions name {:?}, not instanceTypes {:?} in that order",
                        j.name,
                        options.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(),
                        j.instance_types
                    ));
                }
                options.into()
            }
        };
        Ok(NodeClaimPlan {
            name: j.name,
            node_pool: j.node_pool,
            requirements: j.requirements,
            instance_types,
            price: j.price,
            zones: j.zones,
            pods: j.pods,
            requests: j.requests,
            daemon_set_overhead: j.daemon_set_overhead,
            min_values_relaxed: j.min_values_relaxed,
            price_overlay_applied: j.price_overlay_applied,
            capacity_overlay_applied: j.capacity_overlay_applied,
            requested_dra_drivers: j.requested_dra_drivers,
        })
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
    use karpenter_requirements::{Format, InstanceType, Offering, Requirement};

    fn key(key: &str) -> PodKey {
        key.parse().expect("a pod key")
    }

    fn plan(reqs: Requirements) -> NodeClaimPlan {
        NodeClaimPlan {
            name: "default-1".into(),
            node_pool: "default".into(),
            requirements: reqs,
            instance_types: vec![InstanceTypeOption {
                price: Some(0.5),
                zone: Some("zone-a".into()),
                capacity_type: Some("spot".into()),
                ..InstanceTypeOption::named("t")
            }]
            .into(),
            price: Some(0.5),
            zones: vec!["zone-a".into()],
            pods: vec![key("default/p")],
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
        d.unschedulable.push(UnschedulablePod::new(key("default/q"), UnschedulableReason::Timeout));
        let json = d.to_json();
        assert!(json.contains("\"apiVersion\": \"karpenter-rs.scheduler/v1\""), "{json}");
        assert!(json.contains("\"minValues\": 2"), "{json}");
        let back: Decisions = serde_json::from_str(&json).expect("round trip");
        assert_eq!(back, d);
        assert_eq!(back.new_node_claims[0].requirements, reqs);
        assert_eq!(d.placed_pods(), 1);
    }

    /// The typed plan serialises as the string form did, plus the options' offerings and the zones:
    /// requirements in key order, quantities as canonical strings in name order, a pod's reason as its message
    /// next to its code.
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
                "instanceTypes": ["t"], "price": 0.5,
                "instanceTypeOptions": [{"name": "t", "price": 0.5, "zone": "zone-a", "capacityType": "spot"}],
                "zones": ["zone-a"], "pods": ["default/p"],
                "requests": {"cpu": "1500m", "pods": "1"}, "daemonSetOverhead": {"cpu": "100m"},
                "minValuesRelaxed": false
            })
        );
        let text = serde_json::to_string(&serde_json::json!({"requests": value["requests"]})).expect("text");
        assert_eq!(text, r#"{"requests":{"cpu":"1500m","pods":"1"}}"#);
        let u = UnschedulablePod::new(key("default/q"), UnschedulableReason::UninitializedNode);
        assert_eq!(
            serde_json::to_string(&u).expect("serialises"),
            r#"{"pod":"default/q","code":"UninitializedNode","reason":"would schedule against uninitialized nodeclaim"}"#
        );
    }

    fn catalogue() -> Vec<InstanceType> {
        vec![
            InstanceType::builder("small")
                .cpu(2)
                .offering(Offering::spot("zone-a", 0.04))
                .offering(Offering::on_demand("zone-a", 0.10))
                .offering(Offering::on_demand("zone-b", 0.09))
                .offering(Offering::on_demand("zone-c", 0.01).unavailable())
                .build(),
            InstanceType::builder("large").cpu(8).offering(Offering::on_demand("zone-c", 0.40)).build(),
            InstanceType::builder("spot-only").cpu(2).offering(Offering::spot("zone-b", 0.02)).build(),
            InstanceType::builder("tied")
                .cpu(2)
                .offering(Offering::spot("zone-b", 0.05))
                .offering(Offering::on_demand("zone-b", 0.05))
                .offering(Offering::on_demand("zone-a", 0.05))
                .build(),
        ]
    }

    /// Each option is its cheapest available offering the requirements allow (ties: capacity type, then zone,
    /// alphabetically), the claim is priced at its first option; the zones are where those offerings are,
    /// whatever the zone requirement allows.
    #[test]
    fn options_carry_the_cheapest_offering_the_requirements_allow() {
        let its = catalogue();
        let refs: Vec<&InstanceType> = its.iter().collect();
        let provider = karpenter_api::ProviderLabels::core_only("toy");
        let on_demand_in_a_b_d: Requirements = [
            Requirement::in_values(karpenter_requirements::labels::CAPACITY_TYPE, ["on-demand"]),
            Requirement::in_values(karpenter_requirements::labels::ZONE, ["zone-a", "zone-b", "zone-d"]),
        ]
        .into_iter()
        .collect();
        let mut p = plan(on_demand_in_a_b_d);
        p.set_instance_types(&refs, &provider);
        // (name, price, zone, capacity type)
        type Seen<'a> = (&'a str, Option<f64>, Option<&'a str>, Option<&'a str>);
        let options: Vec<Seen<'_>> = p
            .instance_types
            .iter()
            .map(|o| (o.name.as_str(), o.price, o.zone.as_deref(), o.capacity_type.as_deref()))
            .collect();
        assert_eq!(
            options,
            [
                ("small", Some(0.09), Some("zone-b"), Some("on-demand")),
                ("large", None, None, None),
                ("spot-only", None, None, None),
                ("tied", Some(0.05), Some("zone-a"), Some("on-demand")),
            ],
            "spot, unavailable and zone-c offerings excluded; a tie goes to the first zone"
        );
        assert_eq!(p.price, Some(0.09), "the first option's");
        let cheapest = p.cheapest_offering().expect("priced");
        assert_eq!((cheapest.name.as_str(), cheapest.price), ("tied", Some(0.05)), "the cheapest, not the first");
        assert_eq!(p.zones, ["zone-a", "zone-b"], "zone-d is allowed but offered by no option");
        assert_eq!(p.zone(), None, "two zones: no single one");

        let mut p = plan(Requirements::new());
        p.set_instance_types(&refs[1..2], &provider);
        assert_eq!((p.zone(), p.price), (Some("zone-c"), Some(0.4)));
        assert_eq!(p.instance_type_names().collect::<Vec<_>>(), ["large"]);
        p.set_instance_types(&refs[3..], &provider);
        let tied = &p.instance_types[0];
        assert_eq!((tied.capacity_type.as_deref(), tied.zone.as_deref()), (Some("on-demand"), Some("zone-a")));

        p.set_instance_types(&[], &provider);
        assert!(p.zones.is_empty() && p.zone().is_none() && p.price.is_none() && p.cheapest_offering().is_none());
    }

    /// A document written before options carried offerings still reads (offerings unknown, no zones); options
    /// that do not name the instance types in order are an error saying so, as is a pod that is not
    /// `namespace/name`.
    #[test]
    fn plans_without_offerings_read_and_misaligned_options_are_errors() {
        let old = r#"{"name": "x", "nodePool": "p", "requirements": [], "instanceTypes": ["a", "b"], "price": 0.1,
            "pods": ["default/q"], "requests": {}, "daemonSetOverhead": {}, "minValuesRelaxed": false}"#;
        let p: NodeClaimPlan = serde_json::from_str(old).expect("an older document reads");
        assert_eq!(*p.instance_types, [InstanceTypeOption::named("a"), InstanceTypeOption::named("b")]);
        assert!(p.zones.is_empty() && p.cheapest_offering().is_none());
        assert_eq!((p.pods[0].namespace(), p.pods[0].name()), ("default", "q"));
        let swapped =
            old.replace(r#""price": 0.1"#, r#""price": 0.1, "instanceTypeOptions": [{"name": "b"}, {"name": "a"}]"#);
        let err = serde_json::from_str::<NodeClaimPlan>(&swapped).unwrap_err().to_string();
        assert!(err.contains("instanceTypeOptions name [\"b\", \"a\"], not instanceTypes [\"a\", \"b\"]"), "{err}");
        let bad = old.replace(r#"["default/q"]"#, r#"["q"]"#);
        let err = serde_json::from_str::<NodeClaimPlan>(&bad).unwrap_err().to_string();
        assert!(err.contains("pod key \"q\" is not namespace/name"), "{err}");
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
