//! Upstream Karpenter's own scheduling specs as our judge: each fixture under
//! `tests/fixtures/upstream-specs/<area>/*.yaml` is one upstream `It`/`Entry` (inputs and expected outcome are
//! upstream's facts, written as manifests), run through `karpenter-controller simulate -o json` on a catalogue of
//! upstream's fake instance types, and checked against what upstream asserts.
//!
//! # Fixture format
//!
//! A multi-document YAML file. The **first document** is the spec, stripped before simulate sees the rest (the
//! NodePools, pods, nodes... of the spec, as simulate reads them):
//!
//! ```yaml
//! upstream:
//!   file: pkg/controllers/provisioning/scheduling/topology_test.go
//!   spec: Topology / Zonal / should balance pods across zones (match labels)   # Describe / Context / It
//! instanceTypes: fake-instance-types.json   # optional; a path under upstream-specs/ (default: this one)
//! without: {arch: arm64, zone: test-zone-2}  # optional; leave out the catalogue's types matching every field
//! addOfferings: [{type: t, capacityType: reserved, zone: z, price: 0.1, reservationCapacity: 10, reservationId: r-t}]
//! args: [--scheduler-config, "..."]         # optional; more simulate arguments
//! deliberate: why we differ                 # optional; see below
//! expect:                                    # every entry must hold
//!   - newNodes: 2                            # NodeClaims created
//!   - scheduled: [spread-*]                  # these pods are placed (new or existing node)
//!   - unschedulable: [big]                   # these pods are not placed
//!   - sameNode: [a, b]                       # these pods share one node
//!   - differentNodes: [a, b]                 # no two of these pods share a node
//!   - skew: {topologyKey: topology.kubernetes.io/zone, pods: [spread-*], counts: [1, 1, 2]}
//!   - maxPerDomain: {topologyKey: kubernetes.io/hostname, pods: [spread-*], max: 3}
//!   - instanceType: {pods: [a], in: [small-instance-type]}   # the launched node's instance type
//!   - zone: {pods: [a], in: [test-zone-1]}
//!   - capacityType: {pods: [a], in: [spot]}
//!   - nodeLabel: {pods: [a], key: integer, in: ["16"]}      # a label of the pod's node
//!   - price: {pods: [a], equals: 0.2073741824}               # the launched offering's price
//!   - options: {pods: [a], arch: arm64, os: windows, capacityType: spot, zone: test-zone-1}
//!   - claimRequirement: {pods: [a], key: node.kubernetes.io/instance-type, operator: In, values: [arm-instance-type]}
//!   - claimRequirement: {pods: [a], key: topology.kubernetes.io/zone, operator: In, values: [z1, z2], minValues: 2}
//!   - minValuesRelaxed: {pods: [a], relaxed: true}        # the claim's karpenter.sh/nodeclaim-min-values-relaxed
//! ```
//!
//! Disruption specs run over simulated time (`args: [--for, 15s]`: upstream's one disruption reconcile plus the
//! 15 s validation wait, so a command decided at the start is executed before the end) and read the report's
//! `Disruption` events (nodes are named as in the input):
//!
//! ```yaml
//! expect:
//!   - disrupted: {nodes: [node-0], decision: delete, method: Emptiness}  # removed by a disruption command
//!   - notDisrupted: [node-1]                     # no disruption command removed these nodes
//!   - disruptedCount: 3                          # nodes removed by disruption commands in the run
//!   - commands: 1                                # disruption commands executed
//!   - firstCommand: {candidates: 3, decision: delete, method: Emptiness}   # the first command (one reconcile)
//!   - firstCommand: {nodes: [node-1]}            # ... removed exactly these nodes
//!   - atStart: {commands: 2, perPool: {a: 1, b: 1}, method: StaticDrift}   # commands begun at the first instant
//!   - replacementInstanceType: {in: [small-instance-type]}   # every replacement a command launched
//!   - replacements: 1                            # nodes launched by disruption commands
//!   - replacementOptions: {count: 15, includes: [a], excludes: [b]}   # every replacement's instance-type choices
//!   - rejected: 1                                # commands validation rejected at the end of their wait
//!   - replacementZone: {in: [test-zone-2]}        # every node a disruption command launched
//!   - replacementCapacityType: {in: [reserved]}
//! ```
//!
//! `decision` (`delete`, `replace`) and `method` (`Emptiness`, `Drift`, `StaticDrift`,
//! `MultiNodeConsolidation`, `SingleNodeConsolidation`) are optional; `disrupted` with them requires the command
//! that removed each node to have them. Upstream's "no commands in the queue and every NodeClaim still exists"
//! is `commands: 0` (or `notDisrupted` of the nodes).
//! `atStart` reads the commands begun at the run's first instant (executed there, or started there and still
//! launching their replacements with `--node-startup`): upstream's one reconcile when it queues several
//! commands (StaticDrift starts one per node) or when commands in flight hold the budget.
//!
//! `options` judges every instance type the new NodeClaim of each pod may launch (upstream's check of the types
//! handed to the provider's create): each named field must hold for every option, `arch`/`os` as the catalogue
//! entry declares them, `capacityType`/`zone` as one of its offerings (both together when both are named).
//!
//! Pods are named `name` (namespace `default`) or `namespace/name`; a trailing `*` matches any suffix (a
//! Deployment `spread` of 4 expands into `spread-0`..`spread-3`). Every pattern must match at least one pod of the
//! result. `skew` counts the placed pods matching `pods` per value of `topologyKey` on their node (per node for
//! `kubernetes.io/hostname`), as upstream's `ExpectSkew`; `counts` are compared sorted (upstream's `ConsistOf`).
//! The input's bound pods count too (a Pod with `spec.nodeName`, not `Succeeded`/`Failed`, not terminating, on a
//! Node of the input: its labels give the domain), so a spec that provisions in rounds is ported as the state
//! upstream asserts after the earlier rounds (Nodes and bound Pods) plus the last round's pending pods. Other
//! expectations read only the pods this run places or leaves unschedulable.
//!
//! `deliberate` marks a spec where karpenter-rs differs from upstream on purpose: the expectations stay
//! upstream's, the harness requires them to still fail (so the difference stays documented truthfully), and
//! docs/upstream-specs.md lists it with the reason.
//!
//! The harness prints, per area, how many fixtures are ported, pass, and differ deliberately, and fails on any
//! other difference. `UPSTREAM_SPECS=<substring>` runs only fixtures whose path contains it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream-specs")
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Spec {
    upstream: Upstream,
    #[serde(default)]
    instance_types: Option<String>,
    /// Catalogue entries to leave out (upstream's specs that filter the fake types first).
    #[serde(default)]
    without: Option<Without>,
    /// Offerings added to catalogue entries (upstream's specs that give a type a reserved offering).
    #[serde(default)]
    add_offerings: Vec<AddOffering>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    deliberate: Option<String>,
    expect: Vec<Expectation>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Upstream {
    file: String,
    spec: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
enum Expectation {
    NewNodes(usize),
    Scheduled(Vec<String>),
    Unschedulable(Vec<String>),
    SameNode(Vec<String>),
    DifferentNodes(Vec<String>),
    Skew(Skew),
    MaxPerDomain(MaxPerDomain),
    InstanceType(OneOf),
    Zone(OneOf),
    CapacityType(OneOf),
    NodeLabel(NodeLabel),
    Price(Price),
    Options(Options),
    ClaimRequirement(ClaimRequirement),
    MinValuesRelaxed(MinValuesRelaxed),
    Disrupted(Disrupted),
    NotDisrupted(Vec<String>),
    DisruptedCount(usize),
    Commands(usize),
    FirstCommand(FirstCommand),
    AtStart(AtStart),
    ReplacementInstanceType(InSet),
    Replacements(usize),
    ReplacementOptions(ReplacementOptions),
    Rejected(usize),
    ReplacementZone(InSet),
    ReplacementCapacityType(InSet),
}

/// The instance types a replacement NodeClaim may launch (its `node.kubernetes.io/instance-type` `In` values):
/// upstream's check of the new NodeClaim's requirements. Every replacement of every command must hold.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplacementOptions {
    /// Exactly this many choices.
    #[serde(default)]
    count: Option<usize>,
    /// Each of these is a choice.
    #[serde(default)]
    includes: Vec<String>,
    /// None of these is a choice.
    #[serde(default)]
    excludes: Vec<String>,
}

/// Nodes a disruption command removed, optionally with that command's decision and method.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Disrupted {
    nodes: Vec<String>,
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    method: Option<String>,
}

/// The disruption commands begun at the run's first instant: what one upstream reconcile queues when it starts
/// several (StaticDrift) or when commands in flight hold the budget (`--node-startup`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AtStart {
    commands: usize,
    /// Exactly these nodes, in any order.
    #[serde(default)]
    nodes: Option<Vec<String>>,
    /// Commands per NodePool of their candidates (pools not named: none).
    #[serde(default)]
    per_pool: Option<BTreeMap<String, usize>>,
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    method: Option<String>,
}

/// The first disruption command executed: what one upstream reconcile queues.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FirstCommand {
    #[serde(default)]
    candidates: Option<usize>,
    /// Exactly these nodes, in any order.
    #[serde(default)]
    nodes: Option<Vec<String>>,
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    method: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct InSet {
    #[serde(rename = "in")]
    values: Vec<String>,
}

/// One executed disruption command of a run over simulated time.
#[derive(Debug)]
struct CommandOutcome {
    method: String,
    decision: String,
    removed: Vec<String>,
    launched_types: Vec<String>,
    /// Per replacement, the instance types its NodeClaim allows.
    replacement_options: Vec<Vec<String>>,
}

impl CommandOutcome {
    fn matches(&self, decision: Option<&String>, method: Option<&String>) -> Result<(), String> {
        if let Some(d) = decision.filter(|d| !self.decision.eq_ignore_ascii_case(d)) {
            return Err(format!("{:?} was removed by a {} decision, expected {d}", self.removed, self.decision));
        }
        if let Some(m) = method.filter(|m| self.method != **m) {
            return Err(format!("{:?} was removed by {}, expected {m}", self.removed, self.method));
        }
        Ok(())
    }
}

/// A label of the pod's node: the new NodeClaim's single-valued requirement, else the launched instance type's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeLabel {
    pods: Vec<String>,
    key: String,
    #[serde(rename = "in")]
    values: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Price {
    pods: Vec<String>,
    equals: f64,
}

/// A requirement of the pod's new NodeClaim (upstream's `ExpectNodeClaimRequirements` on the create call): the
/// claim has a requirement on `key` with this operator and exactly these values (in any order).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimRequirement {
    pods: Vec<String>,
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
    /// The requirement's `minValues` as the claim carries it (relaxed by `MinValuesPolicy=BestEffort`); unchecked
    /// when absent.
    #[serde(default, rename = "minValues")]
    min_values: Option<u64>,
}

/// Whether the pod's new NodeClaim had its minValues relaxed: the `karpenter.sh/nodeclaim-min-values-relaxed`
/// annotation the controller writes on the claim (and its Node), read from the report's `minValuesRelaxed`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MinValuesRelaxed {
    pods: Vec<String>,
    relaxed: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Options {
    pods: Vec<String>,
    #[serde(default)]
    arch: Option<String>,
    #[serde(default)]
    os: Option<String>,
    #[serde(default)]
    capacity_type: Option<String>,
    #[serde(default)]
    zone: Option<String>,
}

/// An offering appended to the catalogue entry named `type`, in the kwok JSON's offering form (a reserved one
/// names its reservation with the reservation-id requirement the kwok loader reads).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AddOffering {
    #[serde(rename = "type")]
    instance_type: String,
    capacity_type: String,
    zone: String,
    price: f64,
    #[serde(default)]
    reservation_capacity: Option<u64>,
    #[serde(default)]
    reservation_id: Option<String>,
}

impl AddOffering {
    fn to_json(&self) -> Value {
        let mut requirements = vec![
            serde_json::json!({"key": CAPACITY_TYPE, "operator": "In", "values": [self.capacity_type]}),
            serde_json::json!({"key": ZONE, "operator": "In", "values": [self.zone]}),
        ];
        if let Some(id) = &self.reservation_id {
            requirements.push(serde_json::json!({"key": RESERVATION_ID, "operator": "In", "values": [id]}));
        }
        let mut offering = serde_json::json!({"Price": self.price, "Available": true, "Requirements": requirements});
        if let Some(n) = self.reservation_capacity {
            offering["ReservationCapacity"] = n.into();
        }
        offering
    }
}

/// Entries matching every named field are left out of the catalogue: `arch` as declared, `zone` among the
/// offerings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Without {
    #[serde(default)]
    arch: Option<String>,
    #[serde(default)]
    zone: Option<String>,
}

impl Without {
    fn drops(&self, entry: &CatalogueEntry) -> bool {
        self.arch.as_ref().is_none_or(|a| *a == entry.architecture) && entry.offers(None, self.zone.as_deref())
    }
}

/// What `options` reads of a catalogue entry.
#[derive(Debug, Deserialize)]
struct CatalogueEntry {
    name: String,
    architecture: String,
    #[serde(rename = "operatingSystems")]
    operating_systems: Vec<String>,
    offerings: Vec<Value>,
    #[serde(default)]
    requirements: Vec<Value>,
}

impl CatalogueEntry {
    fn offers(&self, capacity_type: Option<&str>, zone: Option<&str>) -> bool {
        self.offerings.iter().any(|o| {
            let value = |key: &str| {
                o["Requirements"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|r| r["key"] == key)
                    .and_then(|r| r["values"][0].as_str())
            };
            capacity_type.is_none_or(|c| value(CAPACITY_TYPE) == Some(c)) && zone.is_none_or(|z| value(ZONE) == Some(z))
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Skew {
    topology_key: String,
    pods: Vec<String>,
    counts: Vec<usize>,
}

/// No domain of `topology_key` holds more than `max` of `pods` (upstream's "no element above max").
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MaxPerDomain {
    topology_key: String,
    pods: Vec<String>,
    max: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OneOf {
    pods: Vec<String>,
    #[serde(rename = "in")]
    values: Vec<String>,
}

/// Where simulate put one pod.
#[derive(Debug, Clone)]
struct Placement {
    node: String,
    /// The launched offering's price (new nodes).
    price: Option<f64>,
    /// The instance types the new node may launch (its claim's `node.kubernetes.io/instance-type` values).
    options: Vec<String>,
    /// The new node's claim requirements as (key, operator, sorted values); empty for existing nodes.
    requirements: Vec<(String, String, Vec<String>)>,
    /// The new node's claim requirements' `minValues` by key.
    min_values: BTreeMap<String, u64>,
    /// The new node's claim's minValues were relaxed (`None` for existing nodes).
    min_values_relaxed: Option<bool>,
    /// Node labels known for the placement: zone, capacity type, instance type, and the claim's single-valued
    /// `In` requirements (new nodes).
    labels: BTreeMap<String, String>,
}

/// The parts of simulate's JSON report the expectations read.
#[derive(Debug, Default)]
struct Outcome {
    new_nodes: usize,
    placed: BTreeMap<String, Placement>,
    unschedulable: BTreeMap<String, String>,
    /// The input's bound pods (`namespace/name`) → their node's labels (hostname: the node's name).
    bound: BTreeMap<String, BTreeMap<String, String>>,
    /// The catalogue's entries by name.
    catalogue: BTreeMap<String, CatalogueEntry>,
    /// A run over simulated time: its executed disruption commands in order (`None` for one pass).
    commands: Option<Vec<CommandOutcome>>,
    /// A run over simulated time: how many decided commands validation rejected.
    rejected: usize,
    /// A run over simulated time: every node disruption commands launched, as (zone, capacity type).
    launched: Vec<(String, String)>,
    /// The commands begun at the first instant (executed then, or started there and in flight), with the
    /// NodePool of their first candidate.
    at_start: Vec<(CommandOutcome, String)>,
}

/// The input's bound pods that count for topology, with their node's labels.
fn bound_pods(manifests: &[Value]) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut nodes: BTreeMap<&str, BTreeMap<String, String>> = BTreeMap::new();
    for m in manifests.iter().filter(|m| m["kind"] == "Node") {
        let Some(name) = m["metadata"]["name"].as_str() else { continue };
        let mut labels: BTreeMap<String, String> = m["metadata"]["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect();
        labels.insert(HOSTNAME.to_owned(), name.to_owned());
        nodes.insert(name, labels);
    }
    let mut out = BTreeMap::new();
    for m in manifests.iter().filter(|m| m["kind"] == "Pod") {
        let finished = matches!(m["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
        if finished || !m["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        let (Some(node), Some(name)) = (m["spec"]["nodeName"].as_str(), m["metadata"]["name"].as_str()) else {
            continue;
        };
        let namespace = m["metadata"]["namespace"].as_str().unwrap_or("default");
        if let Some(labels) = nodes.get(node) {
            out.insert(format!("{namespace}/{name}"), labels.clone());
        }
    }
    out
}

const ZONE: &str = "topology.kubernetes.io/zone";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const HOSTNAME: &str = "kubernetes.io/hostname";
/// The reservation label of a reserved offering in the kwok catalogue.
const RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";

impl Outcome {
    fn from_report(report: &Value) -> Outcome {
        let mut out = Outcome::default();
        let claims: BTreeMap<&str, &Value> = report["decisions"]["newNodeClaims"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| Some((c["name"].as_str()?, c)))
            .collect();
        let new_nodes = report["newNodes"].as_array().cloned().unwrap_or_default();
        out.new_nodes = new_nodes.len();
        for node in &new_nodes {
            let name = node["name"].as_str().unwrap_or_default().to_owned();
            let mut labels = BTreeMap::new();
            let mut options = Vec::new();
            let mut requirements = Vec::new();
            let mut min_values = BTreeMap::new();
            let min_values_relaxed = claims.get(name.as_str()).and_then(|c| c["minValuesRelaxed"].as_bool());
            if let Some(claim) = claims.get(name.as_str()) {
                for r in claim["requirements"].as_array().into_iter().flatten() {
                    if let (Some(k), Some(n)) = (r["key"].as_str(), r["minValues"].as_u64()) {
                        min_values.insert(k.to_owned(), n);
                    }
                    let values = r["values"].as_array().cloned().unwrap_or_default();
                    let mut sorted: Vec<String> = values.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect();
                    sorted.sort();
                    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                    requirements.push((text(&r["key"]), text(&r["operator"]), sorted));
                    if r["key"] == INSTANCE_TYPE && r["operator"] == "In" {
                        options = values.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect();
                    }
                    if r["operator"] == "In" && values.len() == 1 {
                        let (Some(k), Some(v)) = (r["key"].as_str(), values[0].as_str()) else { continue };
                        labels.insert(k.to_owned(), v.to_owned());
                    }
                }
            }
            // The launch narrows the claim to one offering: its labels win.
            for (key, field) in [(ZONE, "zone"), (CAPACITY_TYPE, "capacityType"), (INSTANCE_TYPE, "instanceType")] {
                if let Some(v) = node[field].as_str() {
                    labels.insert(key.to_owned(), v.to_owned());
                }
            }
            labels.insert(HOSTNAME.to_owned(), name.clone());
            let price = node["price"].as_f64();
            for pod in node["pods"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                let placement = Placement {
                    node: name.clone(),
                    price,
                    options: options.clone(),
                    requirements: requirements.clone(),
                    min_values: min_values.clone(),
                    min_values_relaxed,
                    labels: labels.clone(),
                };
                out.placed.insert(pod.to_owned(), placement);
            }
        }
        for node in report["existingNodes"].as_array().into_iter().flatten() {
            let name = node["name"].as_str().unwrap_or_default().to_owned();
            let mut labels = BTreeMap::new();
            for (key, field) in [(ZONE, "zone"), (CAPACITY_TYPE, "capacityType"), (INSTANCE_TYPE, "instanceType")] {
                if let Some(v) = node[field].as_str() {
                    labels.insert(key.to_owned(), v.to_owned());
                }
            }
            labels.insert(HOSTNAME.to_owned(), name.clone());
            let price = node["price"].as_f64();
            for pod in node["pods"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                let placement = Placement {
                    node: name.clone(),
                    price,
                    options: Vec::new(),
                    requirements: Vec::new(),
                    min_values: BTreeMap::new(),
                    min_values_relaxed: None,
                    labels: labels.clone(),
                };
                out.placed.insert(pod.to_owned(), placement);
            }
        }
        if report["apiVersion"] == "karpenter-rs.timeline/v1" {
            let strings = |v: &Value| -> Vec<String> {
                v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_owned)).collect()
            };
            let commands = report["events"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["type"] == "Disruption")
                .map(|e| CommandOutcome {
                    method: e["command"]["method"].as_str().unwrap_or_default().to_owned(),
                    decision: e["command"]["decision"].as_str().unwrap_or_default().to_owned(),
                    removed: strings(&e["nodesRemoved"]),
                    launched_types: e["nodesLaunched"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|n| n["instanceType"].as_str().unwrap_or("(no offering)").to_owned())
                        .collect(),
                    replacement_options: e["command"]["replacements"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| {
                            r["requirements"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter(|q| q["key"] == INSTANCE_TYPE && q["operator"] == "In")
                                .flat_map(|q| strings(&q["values"]))
                                .collect()
                        })
                        .collect(),
                })
                .collect();
            out.commands = Some(commands);
            out.launched = report["events"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["type"] == "Disruption")
                .flat_map(|e| e["nodesLaunched"].as_array().cloned().unwrap_or_default())
                .map(|n| {
                    let text = |k: &str| n[k].as_str().unwrap_or_default().to_owned();
                    (text("zone"), text("capacityType"))
                })
                .collect();
            out.rejected =
                report["events"].as_array().into_iter().flatten().filter(|e| e["type"] == "ValidationFailed").count();
            // A command in flight is `DisruptionStarted` when it begins and `Disruption` when it completes.
            out.at_start = report["events"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["offsetSeconds"] == 0 && e["launchedAt"].is_null())
                .filter(|e| e["type"] == "Disruption" || e["type"] == "DisruptionStarted")
                .map(|e| {
                    let c = &e["command"];
                    let outcome = CommandOutcome {
                        method: c["method"].as_str().unwrap_or_default().to_owned(),
                        decision: c["decision"].as_str().unwrap_or_default().to_owned(),
                        removed: c["candidates"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|n| n["node"].as_str().map(str::to_owned))
                            .collect(),
                        launched_types: Vec::new(),
                        replacement_options: Vec::new(),
                    };
                    (outcome, c["candidates"][0]["nodePool"].as_str().unwrap_or_default().to_owned())
                })
                .collect();
        }
        for group in report["unschedulable"].as_array().into_iter().flatten() {
            let reason = group["reason"].as_str().unwrap_or_default();
            for pod in group["pods"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                out.unschedulable.insert(pod.to_owned(), reason.to_owned());
            }
        }
        out
    }

    /// The pods of the result (and with `with_bound` the input's bound pods) matching `patterns`; a pattern
    /// matching none is an error.
    fn select_from(&self, patterns: &[String], with_bound: bool) -> Result<BTreeSet<String>, String> {
        let bound = self.bound.keys().filter(|_| with_bound);
        let all: Vec<&String> = self.placed.keys().chain(self.unschedulable.keys()).chain(bound).collect();
        let mut out = BTreeSet::new();
        for p in patterns {
            let full = if p.contains('/') { p.clone() } else { format!("default/{p}") };
            let matched: Vec<&String> = all
                .iter()
                .copied()
                .filter(|pod| match full.strip_suffix('*') {
                    Some(prefix) => pod.starts_with(prefix),
                    None => **pod == full,
                })
                .collect();
            if matched.is_empty() {
                return Err(format!("no pod of the result matches {p:?}"));
            }
            out.extend(matched.into_iter().cloned());
        }
        Ok(out)
    }

    /// The pods this run placed or left unschedulable matching `patterns`.
    fn select(&self, patterns: &[String]) -> Result<BTreeSet<String>, String> {
        self.select_from(patterns, false)
    }

    fn placement(&self, pod: &str) -> Result<&Placement, String> {
        self.placed.get(pod).ok_or_else(|| match self.unschedulable.get(pod) {
            Some(reason) => format!("{pod} is unschedulable: {reason}"),
            None => format!("{pod} is not in the result"),
        })
    }

    fn check(&self, e: &Expectation) -> Result<(), String> {
        match e {
            Expectation::NewNodes(n) => {
                if self.new_nodes != *n {
                    return Err(format!("{} new nodes, expected {n}", self.new_nodes));
                }
            }
            Expectation::Scheduled(pods) => {
                for pod in self.select(pods)? {
                    self.placement(&pod)?;
                }
            }
            Expectation::Unschedulable(pods) => {
                for pod in self.select(pods)? {
                    if let Some(p) = self.placed.get(&pod) {
                        return Err(format!("{pod} was placed on {}, expected unschedulable", p.node));
                    }
                }
            }
            Expectation::SameNode(pods) => {
                let nodes: BTreeSet<&str> = self
                    .select(pods)?
                    .iter()
                    .map(|p| self.placement(p).map(|p| p.node.as_str()))
                    .collect::<Result<_, _>>()?;
                if nodes.len() != 1 {
                    return Err(format!("{pods:?} are on nodes {nodes:?}, expected one node"));
                }
            }
            Expectation::DifferentNodes(pods) => {
                let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
                let selected = self.select(pods)?;
                for pod in &selected {
                    let node = self.placement(pod)?.node.as_str();
                    if let Some(other) = seen.insert(node, pod) {
                        return Err(format!("{other} and {pod} share node {node}"));
                    }
                }
            }
            Expectation::MaxPerDomain(m) => {
                let per_domain = self.per_domain(&m.topology_key, &m.pods)?;
                if per_domain.values().any(|c| *c > m.max) {
                    return Err(format!("{} counts {per_domain:?}, expected none above {}", m.topology_key, m.max));
                }
            }
            Expectation::Skew(s) => {
                let per_domain = self.per_domain(&s.topology_key, &s.pods)?;
                let mut counts: Vec<usize> = per_domain.values().copied().collect();
                counts.sort_unstable();
                let mut expected = s.counts.clone();
                expected.sort_unstable();
                if counts != expected {
                    return Err(format!("{} skew {per_domain:?}, expected counts {:?}", s.topology_key, s.counts));
                }
            }
            Expectation::Price(p) => {
                for pod in self.select(&p.pods)? {
                    let placement = self.placement(&pod)?;
                    if placement.price.is_none_or(|price| (price - p.equals).abs() > 1e-9) {
                        return Err(format!(
                            "{pod} on {} at {:?}, expected {}",
                            placement.node, placement.price, p.equals
                        ));
                    }
                }
            }
            Expectation::Options(o) => {
                for pod in self.select(&o.pods)? {
                    let placement = self.placement(&pod)?;
                    if placement.options.is_empty() {
                        return Err(format!("{pod} on {}: no instance-type options (not a new node)", placement.node));
                    }
                    for name in &placement.options {
                        let entry =
                            self.catalogue.get(name).ok_or_else(|| format!("{name} is not in the catalogue"))?;
                        let arch_ok = o.arch.as_ref().is_none_or(|a| *a == entry.architecture);
                        let os_ok = o.os.as_ref().is_none_or(|os| entry.operating_systems.contains(os));
                        let offer_ok = entry.offers(o.capacity_type.as_deref(), o.zone.as_deref());
                        if !(arch_ok && os_ok && offer_ok) {
                            return Err(format!("{pod} on {}: option {name} does not satisfy {o:?}", placement.node));
                        }
                    }
                }
            }
            Expectation::ClaimRequirement(c) => {
                let mut expected = c.values.clone();
                expected.sort();
                for pod in self.select(&c.pods)? {
                    let p = self.placement(&pod)?;
                    let found = p.requirements.iter().find(|(k, _, _)| *k == c.key);
                    if !found.is_some_and(|(_, op, values)| *op == c.operator && *values == expected) {
                        return Err(format!(
                            "{pod} on {}: claim requirement on {} is {found:?}, expected {} {expected:?}",
                            p.node, c.key, c.operator
                        ));
                    }
                    let min_values = p.min_values.get(&c.key).copied();
                    if c.min_values.is_some_and(|n| min_values != Some(n)) {
                        return Err(format!(
                            "{pod} on {}: claim requirement on {} has minValues {min_values:?}, expected {:?}",
                            p.node, c.key, c.min_values
                        ));
                    }
                }
            }
            Expectation::MinValuesRelaxed(m) => {
                for pod in self.select(&m.pods)? {
                    let p = self.placement(&pod)?;
                    if p.min_values_relaxed != Some(m.relaxed) {
                        return Err(format!(
                            "{pod} on {}: minValues relaxed {:?}, expected {}",
                            p.node, p.min_values_relaxed, m.relaxed
                        ));
                    }
                }
            }
            Expectation::NodeLabel(l) => {
                for pod in self.select(&l.pods)? {
                    let p = self.placement(&pod)?;
                    let from_type = || {
                        let entry = self.catalogue.get(p.labels.get(INSTANCE_TYPE)?)?;
                        let r =
                            entry.requirements.iter().find(|r| r["key"] == l.key.as_str() && r["operator"] == "In")?;
                        r["values"][0].as_str().map(str::to_owned)
                    };
                    let value = p.labels.get(&l.key).cloned().or_else(from_type);
                    if !value.as_ref().is_some_and(|v| l.values.contains(v)) {
                        return Err(format!(
                            "{pod} on {}: {} {value:?}, expected one of {:?}",
                            p.node, l.key, l.values
                        ));
                    }
                }
            }
            Expectation::Disrupted(d) => {
                let commands = self.commands()?;
                for node in &d.nodes {
                    let command = commands
                        .iter()
                        .find(|c| c.removed.contains(node))
                        .ok_or_else(|| format!("{node} was not disrupted; commands: {commands:?}"))?;
                    command.matches(d.decision.as_ref(), d.method.as_ref())?;
                }
            }
            Expectation::NotDisrupted(nodes) => {
                let commands = self.commands()?;
                for node in nodes {
                    if let Some(c) = commands.iter().find(|c| c.removed.contains(node)) {
                        return Err(format!("{node} was disrupted by {c:?}"));
                    }
                }
            }
            Expectation::DisruptedCount(n) => {
                let commands = self.commands()?;
                let count: usize = commands.iter().map(|c| c.removed.len()).sum();
                if count != *n {
                    return Err(format!("{count} nodes disrupted, expected {n}; commands: {commands:?}"));
                }
            }
            Expectation::Commands(n) => {
                let commands = self.commands()?;
                if commands.len() != *n {
                    return Err(format!("{} commands, expected {n}: {commands:?}", commands.len()));
                }
            }
            Expectation::AtStart(a) => {
                self.commands()?;
                let started: Vec<&CommandOutcome> = self.at_start.iter().map(|(c, _)| c).collect();
                if started.len() != a.commands {
                    return Err(format!(
                        "{} commands begun at the start, expected {}: {started:?}",
                        started.len(),
                        a.commands
                    ));
                }
                if let Some(nodes) = &a.nodes {
                    let expected: BTreeSet<&String> = nodes.iter().collect();
                    let removed: BTreeSet<&String> = started.iter().flat_map(|c| &c.removed).collect();
                    if removed != expected {
                        return Err(format!("commands begun at the start take {removed:?}, expected {nodes:?}"));
                    }
                }
                if let Some(per_pool) = &a.per_pool {
                    let mut counted: BTreeMap<String, usize> = BTreeMap::new();
                    for (_, pool) in &self.at_start {
                        *counted.entry(pool.clone()).or_default() += 1;
                    }
                    if counted != *per_pool {
                        return Err(format!(
                            "commands begun at the start per NodePool {counted:?}, expected {per_pool:?}"
                        ));
                    }
                }
                for c in started {
                    c.matches(a.decision.as_ref(), a.method.as_ref())?;
                }
            }
            Expectation::FirstCommand(f) => {
                let first = self.commands()?.first().ok_or("no disruption command was executed")?;
                if let Some(n) = f.candidates.filter(|n| *n != first.removed.len()) {
                    return Err(format!(
                        "first command removed {} nodes, expected {n}: {first:?}",
                        first.removed.len()
                    ));
                }
                if let Some(nodes) = &f.nodes {
                    let expected: BTreeSet<&String> = nodes.iter().collect();
                    if first.removed.iter().collect::<BTreeSet<_>>() != expected {
                        return Err(format!("first command removed {:?}, expected {nodes:?}", first.removed));
                    }
                }
                first.matches(f.decision.as_ref(), f.method.as_ref())?;
            }
            Expectation::ReplacementInstanceType(set) => {
                let commands = self.commands()?;
                let launched: Vec<&String> = commands.iter().flat_map(|c| &c.launched_types).collect();
                if launched.is_empty() {
                    return Err(format!("no disruption command launched a replacement: {commands:?}"));
                }
                if let Some(t) = launched.iter().find(|t| !set.values.contains(t)) {
                    return Err(format!("replacement {t}, expected one of {:?}", set.values));
                }
            }
            Expectation::Replacements(n) => {
                let commands = self.commands()?;
                let count: usize = commands.iter().map(|c| c.launched_types.len()).sum();
                if count != *n {
                    return Err(format!("{count} replacements launched, expected {n}: {commands:?}"));
                }
            }
            Expectation::ReplacementOptions(o) => {
                let commands = self.commands()?;
                let all: Vec<&Vec<String>> = commands.iter().flat_map(|c| &c.replacement_options).collect();
                if all.is_empty() {
                    return Err(format!("no disruption command launched a replacement: {commands:?}"));
                }
                for options in all {
                    if let Some(n) = o.count.filter(|n| *n != options.len()) {
                        return Err(format!(
                            "a replacement has {} instance-type options, expected {n}: {options:?}",
                            options.len()
                        ));
                    }
                    if let Some(t) = o.includes.iter().find(|t| !options.contains(t)) {
                        return Err(format!("a replacement's options lack {t}: {options:?}"));
                    }
                    if let Some(t) = o.excludes.iter().find(|t| options.contains(t)) {
                        return Err(format!("a replacement's options include {t}: {options:?}"));
                    }
                }
            }
            Expectation::ReplacementZone(set) | Expectation::ReplacementCapacityType(set) => {
                self.commands()?;
                let zone = matches!(e, Expectation::ReplacementZone(_));
                let launched: Vec<&String> = self.launched.iter().map(|(z, c)| if zone { z } else { c }).collect();
                if launched.is_empty() {
                    return Err("no disruption command launched a replacement".into());
                }
                if let Some(v) = launched.iter().find(|v| !set.values.contains(v)) {
                    return Err(format!("a replacement launched with {v}, expected one of {:?}", set.values));
                }
            }
            Expectation::Rejected(n) => {
                self.commands()?;
                if self.rejected != *n {
                    return Err(format!("{} commands rejected by validation, expected {n}", self.rejected));
                }
            }
            Expectation::InstanceType(o) => self.check_label(INSTANCE_TYPE, o)?,
            Expectation::Zone(o) => self.check_label(ZONE, o)?,
            Expectation::CapacityType(o) => self.check_label(CAPACITY_TYPE, o)?,
        }
        Ok(())
    }

    fn commands(&self) -> Result<&[CommandOutcome], String> {
        self.commands
            .as_deref()
            .ok_or_else(|| "a disruption expectation needs a run over simulated time (args: [--for, 15s])".into())
    }

    /// Pods matching `patterns` (placed by this run or bound in the input) per value of `key` on their node.
    fn per_domain(&self, key: &str, patterns: &[String]) -> Result<BTreeMap<String, usize>, String> {
        let mut per_domain: BTreeMap<String, usize> = BTreeMap::new();
        for pod in self.select_from(patterns, true)? {
            let labels = self.placed.get(&pod).map(|p| &p.labels).or_else(|| self.bound.get(&pod));
            if let Some(v) = labels.and_then(|l| l.get(key)) {
                *per_domain.entry(v.clone()).or_default() += 1;
            }
        }
        Ok(per_domain)
    }

    fn check_label(&self, key: &str, o: &OneOf) -> Result<(), String> {
        for pod in self.select(&o.pods)? {
            let p = self.placement(&pod)?;
            match p.labels.get(key) {
                Some(v) if o.values.contains(v) => {}
                other => return Err(format!("{pod} on {}: {key} {other:?}, expected one of {:?}", p.node, o.values)),
            }
        }
        Ok(())
    }
}

/// Splits a fixture into its spec document and the manifests simulate reads.
fn split(text: &str) -> (String, String) {
    let mut docs: Vec<String> = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(last) = docs.last_mut() {
            last.push_str(line);
            last.push('\n');
        }
    }
    // A leading `---` or comment-only document before the spec is allowed.
    let first = docs.iter().position(|d| d.lines().any(|l| l.starts_with("upstream:"))).unwrap_or(0);
    let spec = docs[first].clone();
    let rest: Vec<&String> = docs.iter().skip(first + 1).collect();
    (spec, rest.iter().map(|d| d.as_str()).collect::<Vec<_>>().join("---\n"))
}

enum Verdict {
    Pass,
    Deliberate,
    Fail(String),
}

fn run_fixture(path: &Path, tmp: &Path) -> Result<(Spec, Verdict), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading: {e}"))?;
    let (spec_text, manifests) = split(&text);
    let spec: Spec = serde_saphyr::from_str(&spec_text).map_err(|e| format!("spec document: {e}"))?;
    if spec.expect.is_empty() {
        return Err("expect: empty".into());
    }
    let input = tmp.join(path.file_name().unwrap_or_default());
    std::fs::write(&input, &manifests).map_err(|e| format!("writing {}: {e}", input.display()))?;
    let mut catalogue = fixtures_dir().join(spec.instance_types.as_deref().unwrap_or("fake-instance-types.json"));
    let catalogue_text = std::fs::read(&catalogue).map_err(|e| format!("reading {}: {e}", catalogue.display()))?;
    let raw: Vec<Value> =
        serde_json::from_slice(&catalogue_text).map_err(|e| format!("{}: {e}", catalogue.display()))?;
    let mut entries: Vec<CatalogueEntry> = Vec::with_capacity(raw.len());
    let mut kept: Vec<Value> = Vec::with_capacity(raw.len());
    for mut value in raw {
        let name = value["name"].as_str().unwrap_or_default().to_owned();
        for add in spec.add_offerings.iter().filter(|a| a.instance_type == name) {
            if let Some(offerings) = value["offerings"].as_array_mut() {
                offerings.push(add.to_json());
            }
        }
        let entry: CatalogueEntry =
            serde_json::from_value(value.clone()).map_err(|e| format!("{}: {e}", catalogue.display()))?;
        if spec.without.as_ref().is_some_and(|w| w.drops(&entry)) {
            continue;
        }
        entries.push(entry);
        kept.push(value);
    }
    if let Some(add) = spec.add_offerings.iter().find(|a| !entries.iter().any(|e| e.name == a.instance_type)) {
        return Err(format!("addOfferings: no catalogue entry {}", add.instance_type));
    }
    if spec.without.is_some() || !spec.add_offerings.is_empty() {
        catalogue = input.with_extension("instance-types.json");
        let text = serde_json::to_string(&kept).map_err(|e| format!("catalogue: {e}"))?;
        std::fs::write(&catalogue, text).map_err(|e| format!("writing {}: {e}", catalogue.display()))?;
    }
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .arg("simulate")
        .arg(&input)
        .arg("--instance-types")
        .arg(&catalogue)
        .args(["--provider", "kwok", "-o", "json"])
        .args(&spec.args)
        .output()
        .map_err(|e| format!("running simulate: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "simulate exited {:?}:\n{}{}",
            output.status.code(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let report: Value = serde_json::from_slice(&output.stdout).map_err(|e| format!("report is not JSON: {e}"))?;
    let mut outcome = Outcome::from_report(&report);
    let parsed: Vec<Value> = manifests
        .split("---\n")
        .filter(|d| d.lines().any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#')))
        .map(serde_saphyr::from_str::<Value>)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("manifests: {e}"))?;
    outcome.bound = bound_pods(&parsed);
    outcome.catalogue = entries.into_iter().map(|e| (e.name.clone(), e)).collect();
    let failures: Vec<String> =
        spec.expect.iter().filter_map(|e| outcome.check(e).err().map(|m| format!("{e:?}: {m}"))).collect();
    let verdict = match (&spec.deliberate, failures.is_empty()) {
        (None, true) => Verdict::Pass,
        (None, false) => Verdict::Fail(format!(
            "{}\nnotes: {}\nunschedulable: {:?}",
            failures.join("\n"),
            report["notes"],
            outcome.unschedulable
        )),
        (Some(_), false) => Verdict::Deliberate,
        (Some(_), true) => Verdict::Fail(
            "marked deliberate but now behaves as upstream: drop `deliberate` and its docs/upstream-specs.md entry"
                .into(),
        ),
    };
    Ok((spec, verdict))
}

#[derive(Default)]
struct Counts {
    ported: usize,
    passing: usize,
    deliberate: usize,
}

/// What one fixture's run gave: the spec and its verdict, or why it could not be judged.
type FixtureResult = Result<(Spec, Verdict), String>;

#[test]
fn upstream_scheduling_specs_hold() {
    let filter = std::env::var("UPSTREAM_SPECS").ok();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("upstream-specs");
    let mut per_area: BTreeMap<String, Counts> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut areas: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    areas.sort();
    // Every fixture is one `simulate` process: they run on as many threads as the machine has cores, and their
    // results are gathered in file order so the report and the failure list read the same on every run.
    let mut jobs: Vec<(String, PathBuf, PathBuf)> = Vec::new();
    for area in areas {
        let name = area.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let area_tmp = tmp.join(&name);
        std::fs::create_dir_all(&area_tmp).expect("tmp dir");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&area)
            .expect("area dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .filter(|p| filter.as_deref().is_none_or(|f| p.to_string_lossy().contains(f)))
            .collect();
        files.sort();
        per_area.entry(name.clone()).or_default();
        jobs.extend(files.into_iter().map(|file| (name.clone(), file, area_tmp.clone())));
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len().max(1));
    let mut results: Vec<(usize, FixtureResult)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((_, file, area_tmp)) = jobs.get(i) else { break done };
                        done.push((i, run_fixture(file, area_tmp)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a fixture thread panicked")).collect()
    });
    results.sort_by_key(|(i, _)| *i);
    for (i, result) in results {
        let (name, file, _) = &jobs[i];
        let counts = per_area.entry(name.clone()).or_default();
        counts.ported += 1;
        let label = format!("{name}/{}", file.file_name().unwrap_or_default().to_string_lossy());
        match result {
            Ok((_, Verdict::Pass)) => counts.passing += 1,
            Ok((_, Verdict::Deliberate)) => counts.deliberate += 1,
            Ok((spec, Verdict::Fail(why))) => {
                failures.push(format!("{label} ({} / {}):\n{why}", spec.upstream.file, spec.upstream.spec))
            }
            Err(why) => failures.push(format!("{label}: {why}")),
        }
    }
    println!("{:<28} {:>7} {:>8} {:>11} {:>7}", "AREA", "PORTED", "PASSING", "DELIBERATE", "FAILING");
    for (area, c) in &per_area {
        let failing = c.ported - c.passing - c.deliberate;
        println!("{area:<28} {:>7} {:>8} {:>11} {failing:>7}", c.ported, c.passing, c.deliberate);
    }
    assert!(failures.is_empty(), "{} fixtures differ from upstream:\n\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn the_spec_document_is_stripped_and_patterns_must_match() {
    let (spec, rest) =
        split("upstream:\n  file: f\n  spec: s\nexpect: [{newNodes: 1}]\n---\nkind: Pod\n---\nkind: Node\n");
    assert!(spec.starts_with("upstream:"));
    assert_eq!(rest, "kind: Pod\n---\nkind: Node\n");
    let report = serde_json::json!({
        "newNodes": [{"name": "n-1", "zone": "test-zone-1", "capacityType": "spot", "instanceType": "t",
                      "pods": ["default/a-0", "default/a-1"]},
                     {"name": "n-2", "zone": "test-zone-2", "pods": ["default/a-2"]}],
        "existingNodes": [],
        "unschedulable": [{"reason": "too big", "pods": ["default/big"]}],
        "decisions": {"newNodeClaims": []}
    });
    let o = Outcome::from_report(&report);
    let skew =
        |counts: Vec<usize>| Expectation::Skew(Skew { topology_key: ZONE.into(), pods: vec!["a-*".into()], counts });
    assert!(o.check(&skew(vec![1, 2])).is_ok());
    assert!(o.check(&skew(vec![1, 1, 1])).is_err());
    assert!(o.check(&Expectation::Unschedulable(vec!["big".into()])).is_ok());
    assert!(o.check(&Expectation::Scheduled(vec!["big".into()])).is_err());
    assert!(o.check(&Expectation::Scheduled(vec!["nope".into()])).unwrap_err().contains("matches"));
    assert!(o.check(&Expectation::SameNode(vec!["a-0".into(), "a-1".into()])).is_ok());
    assert!(o.check(&Expectation::DifferentNodes(vec!["a-*".into()])).is_err());
    assert!(o.check(&Expectation::NewNodes(2)).is_ok());
}
