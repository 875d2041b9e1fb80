//! The simulation report: the scheduler's decisions plus what a user asks first (which machines, where, at
//! what price, which pods go where, and why the rest cannot be placed). Serialised as the versioned JSON
//! documented in docs/simulate.md.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Taint;
use karpenter_api::CompactPod;
use karpenter_api::labels;
use karpenter_api::loader::Loaded;
use karpenter_api::time::rfc3339;
use karpenter_requirements::InstanceType;
use karpenter_scheduler::snapshot::{api_taint, pod_key};
use karpenter_scheduler::{ClusterSnapshot, Decisions, NodeClaimInfo, NodeInfo};
use serde::Serialize;

use super::catalogue::{Catalogue, cheapest_launch};
use super::pods::{Owners, PodGroup, group};

/// The `apiVersion` of [`Report`]; changes on any incompatible change of the format.
pub const API_VERSION: &str = "karpenter-rs.simulate/v1";

/// One simulate run (the `--output json` document).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// The paths given (the bundled example's name when none).
    pub inputs: Vec<String>,
    /// True when no path was given and the bundled example ran.
    pub bundled_example: bool,
    /// Whose well-known labels applied (`kwok`, `aws`).
    pub provider: String,
    /// The instance types every NodePool was evaluated against.
    pub catalogue: CatalogueSummary,
    /// Assumptions simulate made about the input (e.g. a node class treated as ready).
    pub notes: Vec<String>,
    /// Totals.
    pub summary: Summary,
    /// NodeClaims to create, with the offering a launch would pick.
    pub new_nodes: Vec<NewNode>,
    /// Every existing node and in-flight NodeClaim, with its price and the pods placed on it.
    pub existing_nodes: Vec<ExistingNode>,
    /// Unschedulable pods grouped by reason.
    pub unschedulable: Vec<UnschedulableGroup>,
    /// The scheduler's decision document (`karpenter-rs.scheduler/v1`), unchanged.
    pub decisions: Decisions,
}

/// Where the instance types came from.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CatalogueSummary {
    /// `kwok`, `aws <region>`, `file <path>` or `file <path> (aws <region>)`, joined by ` + ` when NodePools use
    /// both kinds.
    pub source: String,
    /// How many instance types.
    pub instance_types: usize,
}

/// Totals of a run.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Pending pods in the snapshot (CapacityBuffer virtual pods included).
    pub pending_pods: usize,
    /// Of which CapacityBuffer virtual pods (gate `CapacityBuffer`).
    #[serde(skip_serializing_if = "is_zero")]
    pub buffer_pods: usize,
    /// Pods placed on new nodes.
    pub pods_on_new_nodes: usize,
    /// Pods placed on existing nodes and in-flight NodeClaims.
    pub pods_on_existing_nodes: usize,
    /// Pods that cannot be placed.
    pub unschedulable_pods: usize,
    /// New nodes.
    pub new_nodes: usize,
    /// Sum of the new nodes' launch prices.
    pub new_nodes_price_per_hour: f64,
    /// Existing nodes and in-flight NodeClaims.
    pub existing_nodes: usize,
    /// Sum of the prices of the existing nodes that could be priced.
    pub existing_nodes_price_per_hour: f64,
    /// Existing nodes whose price is unknown (left out of the sum).
    pub existing_nodes_unpriced: usize,
    /// The scheduler's deadline fired.
    pub timed_out: bool,
}

/// A NodeClaim to create.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NewNode {
    /// Placeholder name from the decisions (`<nodepool>-<n>`).
    pub name: String,
    /// The NodePool.
    pub node_pool: String,
    /// Instance type of the offering a launch picks (`null` if no offering is compatible).
    pub instance_type: Option<String>,
    /// Its zone.
    pub zone: Option<String>,
    /// Its capacity type.
    pub capacity_type: Option<String>,
    /// Its hourly price.
    pub price: Option<f64>,
    /// The price is an estimate (AWS spot, or another region's on-demand price); omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub price_estimated: bool,
    /// How many instance types the NodeClaim allows.
    pub instance_type_options: usize,
    /// The pods (`namespace/name`).
    pub pods: Vec<String>,
    /// The pods grouped by owner.
    pub pod_groups: Vec<PodGroup>,
    /// The DRA drivers its pods' resource claims rely on (the NodeClaim's `karpenter.sh/requested-dra-drivers`
    /// annotation); omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requested_dra_drivers: Vec<String>,
}

/// An existing node or in-flight NodeClaim.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExistingNode {
    /// Node name (NodeClaim name when in flight).
    pub name: String,
    /// A NodeClaim whose node is not in the input.
    pub in_flight: bool,
    /// Owning NodePool (`null` for nodes Karpenter does not manage).
    pub node_pool: Option<String>,
    /// `node.kubernetes.io/instance-type`.
    pub instance_type: Option<String>,
    /// `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
    /// `karpenter.sh/capacity-type`.
    pub capacity_type: Option<String>,
    /// Hourly price from the catalogue; `null` when unknown (see `priceUnknown`).
    pub price: Option<f64>,
    /// Why the price is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_unknown: Option<String>,
    /// The price is an estimate (AWS spot, or another region's on-demand price); omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub price_estimated: bool,
    /// Pods already bound to it.
    pub bound_pods: usize,
    /// Pending pods placed on it by this simulation.
    pub pods: Vec<String>,
    /// Those pods grouped by owner.
    pub pod_groups: Vec<PodGroup>,
    /// Taints, annotations and the NodeClaim's `Consolidatable` condition.
    #[serde(flatten)]
    pub details: NodeDetails,
}

/// What a node carries besides its offering: its taints and annotations, and its NodeClaim's `Consolidatable`
/// condition as the controller's condition controller sets it.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDetails {
    /// `spec.taints` of the Node (an in-flight NodeClaim's `spec.taints`); omitted when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// `metadata.annotations` of the Node; omitted when none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The NodeClaim's `Consolidatable` condition; omitted for a node without a NodeClaim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consolidatable: Option<ConsolidatableCondition>,
}

/// A NodeClaim's `Consolidatable` condition at the report's time, by the controller's rule
/// ([`karpenter_disruption::candidate::consolidatable_at`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsolidatableCondition {
    /// `True` once `consolidateAfter` has passed since the last pod event (else since `Initialized`); `False`
    /// while it has not, or when it never will (a static NodePool, `consolidateAfter: Never`, not initialized).
    pub status: &'static str,
    /// When it became (or becomes) `True`; omitted when it never does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
}

impl NodeDetails {
    /// The details of `node` (a Node of `snapshot`) at `now`.
    pub fn of_node(node: &NodeInfo, snapshot: &ClusterSnapshot, now: DateTime<Utc>) -> NodeDetails {
        let claim = node.node_claim.as_deref().and_then(|c| snapshot.node_claims.iter().find(|x| x.name == c));
        NodeDetails {
            taints: node.taints.clone(),
            annotations: node.annotations.clone(),
            consolidatable: claim.map(|c| consolidatable_condition(c, snapshot, now)),
        }
    }

    /// The details of an in-flight NodeClaim (no Node yet) at `now`.
    pub fn of_claim(claim: &NodeClaimInfo, snapshot: &ClusterSnapshot, now: DateTime<Utc>) -> NodeDetails {
        NodeDetails {
            taints: claim.claim.spec.taints.iter().map(api_taint).collect(),
            annotations: BTreeMap::new(),
            consolidatable: Some(consolidatable_condition(claim, snapshot, now)),
        }
    }

    /// One line for the table (`taints: ...; annotations: ...`), `None` when there is nothing to say. Long
    /// annotation values (a `last-applied-configuration`) are cut; the JSON has them whole.
    pub fn line(&self) -> Option<String> {
        const MAX_VALUE: usize = 40;
        let mut parts = Vec::new();
        if !self.taints.is_empty() {
            let taints: Vec<String> = self.taints.iter().map(taint_text).collect();
            parts.push(format!("taints: {}", taints.join(", ")));
        }
        if !self.annotations.is_empty() {
            let annotations: Vec<String> = self
                .annotations
                .iter()
                .map(|(k, v)| {
                    if v.chars().count() > MAX_VALUE {
                        format!("{k}={}...", v.chars().take(MAX_VALUE).collect::<String>())
                    } else {
                        format!("{k}={v}")
                    }
                })
                .collect();
            parts.push(format!("annotations: {}", annotations.join(", ")));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// The `CONSOLIDATABLE` cell: `True`, `False (at TIME)`, `False`, or `-` without a NodeClaim.
    pub fn consolidatable_cell(&self) -> String {
        match &self.consolidatable {
            None => "-".to_owned(),
            Some(c) if c.status == "True" => "True".to_owned(),
            Some(ConsolidatableCondition { at: Some(at), .. }) => format!("False (at {at})"),
            Some(_) => "False".to_owned(),
        }
    }
}

/// `key=value:Effect`, as kubectl prints a taint.
fn taint_text(t: &Taint) -> String {
    match t.value.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => format!("{}={v}:{}", t.key, t.effect),
        None => format!("{}:{}", t.key, t.effect),
    }
}

fn consolidatable_condition(
    claim: &NodeClaimInfo,
    snapshot: &ClusterSnapshot,
    now: DateTime<Utc>,
) -> ConsolidatableCondition {
    let pool = claim
        .node_pool
        .as_deref()
        .and_then(|p| snapshot.node_pools.iter().find(|x| x.metadata.name.as_deref() == Some(p)));
    let at = pool.and_then(|pool| karpenter_disruption::candidate::consolidatable_at(&claim.claim, pool));
    ConsolidatableCondition {
        status: if at.is_some_and(|at| now >= at) { "True" } else { "False" },
        at: at.map(rfc3339),
    }
}

/// Unschedulable pods sharing one reason.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulableGroup {
    /// The reason's code (`karpenter_scheduler::UnschedulableReason::code`).
    pub code: &'static str,
    /// Why they cannot be placed.
    pub reason: String,
    /// The pods.
    pub pods: Vec<String>,
    /// The pods grouped by owner.
    pub pod_groups: Vec<PodGroup>,
}

/// What [`Report::build`] reads.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The report's time (conditions such as `Consolidatable` are judged then).
    pub now: DateTime<Utc>,
    pub inputs: Vec<String>,
    pub bundled_example: bool,
    pub provider: String,
    pub notes: Vec<String>,
    pub objects: &'a [Loaded],
    pub snapshot: &'a ClusterSnapshot,
    pub catalogue: &'a Catalogue,
}

impl Report {
    /// Summarises `decisions` made on `input.snapshot`.
    ///
    /// Long because it summarises every kind of decision (new claims, existing nodes, pending pods, errors) into
    /// the report's sections in one walk over the decisions.
    pub fn build(input: Inputs<'_>, decisions: Decisions) -> Report {
        let owners = Owners::new(input.objects);
        let pending: HashMap<String, &CompactPod> =
            input.snapshot.pending_pods.iter().map(|p| (pod_key(p), p.as_ref())).collect();
        let groups = |pods: &[String]| group(pods.iter().map(|k| (k.as_str(), pending.get(k).copied())), &owners);

        let new_nodes: Vec<NewNode> = decisions
            .new_node_claims
            .iter()
            .map(|claim| {
                // The claim's options (cheapest first), as the provider's create receives them.
                let by_name: HashMap<&str, &InstanceType> =
                    input.catalogue.for_pool(&claim.node_pool).iter().map(|it| (it.name.as_str(), it)).collect();
                let options: Vec<&InstanceType> =
                    claim.instance_type_names().filter_map(|n| by_name.get(n).copied()).collect();
                let launch = cheapest_launch(options.iter().copied(), &claim.requirements, &claim.total_requests());
                let pods: Vec<String> = claim.pods.iter().map(ToString::to_string).collect();
                let price_estimated = launch
                    .as_ref()
                    .is_some_and(|l| input.catalogue.price_estimated(&l.instance_type, l.capacity_type.as_deref()));
                NewNode {
                    name: claim.name.clone(),
                    node_pool: claim.node_pool.clone(),
                    instance_type: launch.as_ref().map(|l| l.instance_type.clone()),
                    zone: launch.as_ref().and_then(|l| l.zone.clone()),
                    capacity_type: launch.as_ref().and_then(|l| l.capacity_type.clone()),
                    price: launch.as_ref().map(|l| l.price),
                    price_estimated,
                    instance_type_options: claim.instance_types.len(),
                    pod_groups: groups(&pods),
                    pods,
                    requested_dra_drivers: claim.requested_dra_drivers.clone(),
                }
            })
            .collect();

        let placed: BTreeMap<&str, Vec<String>> = decisions
            .existing_nodes
            .iter()
            .map(|n| (n.name.as_str(), n.pods.iter().map(ToString::to_string).collect()))
            .collect();
        let mut bound: HashMap<&str, usize> = HashMap::new();
        for pod in &input.snapshot.bound_pods {
            if let Some(node) = pod.node_name() {
                *bound.entry(node).or_default() += 1;
            }
        }
        let mut existing_nodes = Vec::new();
        for node in &input.snapshot.nodes {
            let labels = |key: &str| node.labels.get(key).cloned();
            let bound_pods = bound.get(node.name.as_str()).copied().unwrap_or_default();
            existing_nodes.push(existing(
                NodeDetails::of_node(node, input.snapshot, input.now),
                &node.name,
                false,
                node.node_pool.clone(),
                [labels(labels::INSTANCE_TYPE), labels(labels::ZONE), labels(labels::CAPACITY_TYPE)],
                input.catalogue,
                bound_pods,
                placed.get(node.name.as_str()).map(|p| p.as_slice()).unwrap_or_default(),
                &groups,
            ));
        }
        for claim in input.snapshot.in_flight_claims() {
            let single = |key: &str| {
                claim.labels().get(key).cloned().or_else(|| {
                    let req = claim.claim.spec.requirements.iter().find(|r| r.key == key && r.operator == "In")?;
                    match req.values.as_slice() {
                        [one] => Some(one.clone()),
                        _ => None,
                    }
                })
            };
            existing_nodes.push(existing(
                NodeDetails::of_claim(claim, input.snapshot, input.now),
                &claim.name,
                true,
                claim.node_pool.clone(),
                [single(labels::INSTANCE_TYPE), single(labels::ZONE), single(labels::CAPACITY_TYPE)],
                input.catalogue,
                0,
                placed.get(claim.name.as_str()).map(|p| p.as_slice()).unwrap_or_default(),
                &groups,
            ));
        }
        existing_nodes.sort_by(|a, b| a.name.cmp(&b.name).then(a.in_flight.cmp(&b.in_flight)));

        let mut by_reason: BTreeMap<(String, &'static str), Vec<String>> = BTreeMap::new();
        for u in &decisions.unschedulable {
            by_reason.entry((u.reason.to_string(), u.reason.code())).or_default().push(u.pod.to_string());
        }
        let unschedulable: Vec<UnschedulableGroup> = by_reason
            .into_iter()
            .map(|((reason, code), pods)| UnschedulableGroup { code, reason, pod_groups: groups(&pods), pods })
            .collect();

        let summary = Summary {
            pending_pods: input.snapshot.pending_pods.len(),
            buffer_pods: input.snapshot.pending_pods.iter().filter(|p| super::buffers::is_virtual(p)).count(),
            pods_on_new_nodes: new_nodes.iter().map(|n| n.pods.len()).sum(),
            pods_on_existing_nodes: decisions.existing_nodes.iter().map(|n| n.pods.len()).sum(),
            unschedulable_pods: decisions.unschedulable.len(),
            new_nodes: new_nodes.len(),
            new_nodes_price_per_hour: round(new_nodes.iter().filter_map(|n| n.price).sum()),
            existing_nodes: existing_nodes.len(),
            existing_nodes_price_per_hour: round(existing_nodes.iter().filter_map(|n| n.price).sum()),
            existing_nodes_unpriced: existing_nodes.iter().filter(|n| n.price.is_none()).count(),
            timed_out: decisions.timed_out,
        };

        Report {
            api_version: API_VERSION.to_owned(),
            inputs: input.inputs,
            bundled_example: input.bundled_example,
            provider: input.provider,
            catalogue: CatalogueSummary {
                source: input.catalogue.source.clone(),
                instance_types: input.catalogue.len(),
            },
            notes: input.notes,
            summary,
            new_nodes,
            existing_nodes,
            unschedulable,
            decisions,
        }
    }

    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Sums of prices rounded to 1e-6 so float noise does not reach the output (and `-0` of an empty sum is `0`).
fn round(price: f64) -> f64 {
    (price * 1e6).round() / 1e6 + 0.0
}

#[allow(clippy::too_many_arguments)]
fn existing(
    details: NodeDetails,
    name: &str,
    in_flight: bool,
    node_pool: Option<String>,
    [instance_type, zone, capacity_type]: [Option<String>; 3],
    catalogue: &Catalogue,
    bound_pods: usize,
    pods: &[String],
    groups: &dyn Fn(&[String]) -> Vec<PodGroup>,
) -> ExistingNode {
    let (price, price_unknown) = match price_of(catalogue, &instance_type, &zone, &capacity_type) {
        Ok(p) => (Some(p), None),
        Err(why) => (None, Some(why)),
    };
    let price_estimated = price.is_some()
        && instance_type.as_deref().is_some_and(|it| catalogue.price_estimated(it, capacity_type.as_deref()));
    ExistingNode {
        name: name.to_owned(),
        in_flight,
        node_pool,
        instance_type,
        zone,
        capacity_type,
        price,
        price_unknown,
        price_estimated,
        bound_pods,
        pods: pods.to_vec(),
        pod_groups: groups(pods),
        details,
    }
}

/// The catalogue price of (instance type, zone, capacity type), or why there is none.
pub(super) fn price_of(
    catalogue: &Catalogue,
    instance_type: &Option<String>,
    zone: &Option<String>,
    capacity_type: &Option<String>,
) -> Result<f64, String> {
    let missing: Vec<&str> =
        [(instance_type, labels::INSTANCE_TYPE), (zone, labels::ZONE), (capacity_type, labels::CAPACITY_TYPE)]
            .iter()
            .filter(|(v, _)| v.is_none())
            .map(|(_, k)| *k)
            .collect();
    let (Some(it), Some(zone), Some(ct)) = (instance_type, zone, capacity_type) else {
        return Err(format!("no {} label", missing.join(", ")));
    };
    let Some(found) = catalogue.get(it) else {
        return Err(format!("instance type {it} is not in the catalogue"));
    };
    found
        .offerings
        .iter()
        .filter(|o| o.zone() == Some(zone.as_str()) && o.capacity_type() == Some(ct.as_str()))
        .map(|o| o.price)
        .min_by(f64::total_cmp)
        .ok_or_else(|| format!("instance type {it} has no {ct} offering in {zone}"))
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}
