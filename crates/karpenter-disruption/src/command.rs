//! The output of a disruption pass as plain, serialisable data: [`Pass`] with its [`Command`]s and one
//! [`Verdict`] per node.
//!
//! ```json
//! {
//!   "apiVersion": "karpenter-rs.disruption/v1",
//!   "now": "2026-01-01T12:00:00Z",
//!   "commands": [{
//!     "method": "SingleNodeConsolidation", "reason": "Underutilized", "decision": "Replace",
//!     "candidates": [{"node": "n1", "nodeClaim": "c1", "nodePool": "default", "instanceType": "m-8x",
//!                     "zone": "test-zone-a", "capacityType": "on-demand", "price": 0.48}],
//!     "replacements": [ /* karpenter-scheduler NodeClaimPlan */ ],
//!     "displacedPods": ["default/web-0"],
//!     "savingsPerHour": 0.36,
//!     "explanation": "replace n1 (m-8x, $0.4800/h) with one c-2x ($0.1200/h): saves $0.3600/h"
//!   }],
//!   "verdicts": [{"node": "n2", "nodeClaim": "c2", "nodePool": "default", "outcome": "Blocked",
//!                 "reason": {"code": "PdbBlocked", "pod": "default/db-0", "pdb": "default/db"},
//!                 "message": "pod default/db-0 is protected by PodDisruptionBudget default/db (0 disruptions allowed)"}],
//!   "budgets": [{"nodePool": "default", "reason": "Underutilized", "nodes": 10, "disrupting": 0, "allowed": 1}]
//! }
//! ```

use karpenter_api::nodepool::DisruptionReason;
use karpenter_scheduler::decision::{NodeClaimPlan, UnschedulablePod};
use serde::{Deserialize, Serialize};

/// The `apiVersion` of [`Pass`].
pub const API_VERSION: &str = "karpenter-rs.disruption/v1";

/// Disruption methods, declared in the order a pass tries them ([`Method::ORDER`]). Each is implemented in a module
/// of its own (`src/methods/`), which also answers what the method consumes and how it drains
/// ([`Method::reason`], [`Method::is_graceful`], [`Method::consolidation_type`], defined in `src/methods/mod.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Method {
    /// Replace (or reboot) nodes whose conditions match a provider's repair policy (node repair, feature gate
    /// `NodeRepair`, upstream v1.15's voluntary form).
    Repair,
    /// Delete empty nodes.
    Emptiness,
    /// Replace drifted nodes of static NodePools.
    StaticDrift,
    /// Replace drifted nodes.
    Drift,
    /// Remove several nodes at once, with at most one replacement.
    MultiNodeConsolidation,
    /// Remove or replace one node.
    SingleNodeConsolidation,
}

impl Method {
    /// All methods in the order a pass tries them: upstream's (`NewMethods`), node repair first. The only place the
    /// methods are sequenced: [`crate::evaluate`] walks it, and a failed validation hands over to the methods after
    /// the command's ([`crate::validation::continue_after`]).
    pub const ORDER: [Method; 6] = [
        Method::Repair,
        Method::Emptiness,
        Method::StaticDrift,
        Method::Drift,
        Method::MultiNodeConsolidation,
        Method::SingleNodeConsolidation,
    ];
}

/// What a command does to its candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Delete the candidates; their pods fit elsewhere.
    Delete,
    /// Launch the replacements, then delete the candidates.
    Replace,
    /// Reboot the candidate in place (node repair's `Reboot` action).
    Reboot,
}

/// What node repair found wrong with a command's node, and how it is to be handled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RepairDetail {
    /// The Node condition type that matched, e.g. `Ready`.
    pub condition: String,
    /// Its status (`False`, `Unknown`, ...).
    pub status: String,
    /// Its reason, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition_reason: Option<String>,
    /// The matching policy's drain bound in seconds (`0`: forceful). The controller takes the shorter of it and
    /// the NodeClaim's terminationGracePeriod ([`karpenter_api::repair::drain_bound`]); absent: the NodeClaim's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<u64>,
    /// The node is deleted before its replacement exists: its NodePool has no room for one (static, or at its
    /// limits), so the replacement follows through provisioning or the static pool's replica count.
    #[serde(default)]
    pub terminate_first: bool,
}

/// A node a command disrupts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CandidateRef {
    /// Node name.
    pub node: String,
    /// NodeClaim name.
    pub node_claim: String,
    /// NodePool name.
    pub node_pool: String,
    /// `node.kubernetes.io/instance-type` label.
    pub instance_type: Option<String>,
    /// Zone label.
    pub zone: Option<String>,
    /// Capacity-type label.
    pub capacity_type: Option<String>,
    /// Hourly price of the node's offering (0 when unknown).
    pub price: f64,
}

/// One disruption command: the controller taints the candidates, launches the replacements, waits for them to
/// initialize, then deletes the candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Command {
    /// The method that produced it.
    pub method: Method,
    /// Budget reason (`Empty`, `Drifted`, `Underutilized`).
    pub reason: DisruptionReason,
    /// Delete or replace.
    pub decision: Decision,
    /// Nodes to remove.
    pub candidates: Vec<CandidateRef>,
    /// NodeClaims to launch first (scheduler plans; `instanceTypes` are the options, cheapest first).
    pub replacements: Vec<NodeClaimPlan>,
    /// Pods that move (`namespace/name`), sorted.
    pub displaced_pods: Vec<String>,
    /// Σ candidate prices − Σ replacement prices ($/h, estimate).
    pub savings_per_hour: f64,
    /// One line for humans.
    pub explanation: String,
    /// Node repair's finding (repair commands only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repair: Option<RepairDetail>,
}

impl Command {
    /// Names of the nodes the command removes.
    pub fn node_names(&self) -> impl Iterator<Item = &str> {
        self.candidates.iter().map(|c| c.node.as_str())
    }
}

/// The broad outcome for one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Part of a command of this pass.
    Disrupted,
    /// A valid disruption exists, but only one command runs per pass (a later pass will act).
    Deferred,
    /// Something prevents disruption (PDB, do-not-disrupt, budget, nomination, ...).
    Blocked,
    /// Not a candidate or nothing worth doing (no cheaper option, pods cannot move, not managed, ...).
    Kept,
}

/// Why a node was or was not disrupted. Serialised with a `code` tag and camelCase fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "code", rename_all_fields = "camelCase")]
pub enum Reason {
    /// In a command of this pass.
    Disrupted { method: Method },
    /// A command would act on it; only one command runs per pass.
    Deferred { method: Method, detail: String },
    /// No NodeClaim (not managed by Karpenter).
    NotManaged,
    /// The node's NodeClaim is not in the snapshot.
    NodeClaimNotFound { node_claim: String },
    /// No `karpenter.sh/nodepool` label.
    NoNodePoolLabel,
    /// Not initialized yet.
    NotInitialized,
    /// Already being deleted or disrupted.
    BeingDeleted,
    /// A pending pod was planned onto it.
    Nominated,
    /// Node (or NodeClaim) annotation `karpenter.sh/do-not-disrupt: "true"`, or (`annotation`, `key=value`)
    /// another autoscaler's annotation honoured as it ([`crate::DisruptionOptions`]).
    NodeDoNotDisrupt {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotation: Option<String>,
    },
    /// Its NodePool was not given.
    NodePoolNotFound { node_pool: String },
    /// Its NodePool has no instance types.
    NoInstanceTypes { node_pool: String },
    /// A pod's `karpenter.sh/do-not-disrupt` annotation (`until`: end of a duration-form protection), or
    /// (`annotation`, `key=value`) another autoscaler's annotation honoured as it ([`crate::DisruptionOptions`]).
    PodDoNotDisrupt {
        pod: String,
        until: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotation: Option<String>,
    },
    /// A PodDisruptionBudget allows no disruption of a pod now.
    PdbBlocked { pod: String, pdb: String },
    /// A pod is selected by several PodDisruptionBudgets (the eviction API refuses it).
    MultiplePdbs { pod: String, pdbs: Vec<String> },
    /// The pool's disruption budget for the reason is used up.
    BudgetExhausted { node_pool: String, reason: DisruptionReason, detail: String },
    /// Static pools are never consolidated.
    StaticNodePool,
    /// `consolidateAfter: Never`.
    ConsolidationDisabled,
    /// `consolidateAfter` has not elapsed since the last pod event.
    ConsolidateAfterNotElapsed { remaining_seconds: i64 },
    /// `consolidationPolicy: WhenEmpty` and the node is not empty.
    WhenEmptyPolicy,
    /// The instance type label is missing or not in the pool's catalogue.
    UnknownInstanceType { instance_type: Option<String> },
    /// Zone or capacity-type label missing.
    MissingLabels { labels: Vec<String> },
    /// Some pods would not find a place.
    PodsUnschedulable { pods: Vec<UnschedulablePod> },
    /// Removing it needs more than one new node.
    NeedsMultipleNodes { count: usize },
    /// The pending pods alone need at least `count` (2: the simulation stops counting there) new nodes, so no
    /// consolidation of this pass could make do with one: consolidation waits until provisioning has launched them.
    PendingPodsNeedNodes { count: usize },
    /// No replacement is strictly cheaper.
    NoCheaperOption { price: f64 },
    /// Spot-to-spot consolidation is behind the `SpotToSpotConsolidation` feature gate, which is off.
    SpotToSpotDisabled,
    /// Single-node spot-to-spot needs at least `required` cheaper instance types (`SPOT_TO_SPOT_MIN_INSTANCE_TYPES`,
    /// upstream's constant 15 by default); `count` were found.
    SpotToSpotTooFewOptions {
        count: usize,
        #[serde(default = "spot_to_spot_min_types")]
        required: usize,
    },
    /// The Balanced policy judged the savings not worth the disruption.
    BalancedRejected { node_pool: String, score: f64 },
    /// Drifted, but a static pool's scale-down is in progress, its node limit is reached, or its template's
    /// requirements do not parse (no replacement can be built).
    StaticDriftWaiting { detail: String },
    /// Not simulated for this method this pass: an earlier candidate already gave the pass its command, and the
    /// pass was asked to stop there ([`DisruptionOptions::every_verdict`](crate::DisruptionOptions) off, as the
    /// controller runs it). A later pass judges it.
    NotEvaluated { method: Method },
    /// Not simulated for this method this pass: the pass's simulation budget
    /// ([`DisruptionOptions::simulation_budget`](crate::DisruptionOptions)) ran out before this candidate; a later
    /// pass resumes where this one stopped.
    PassTimeSpent { method: Method },
    /// Consolidation was not simulated: nothing has changed since a pass in which it found nothing to do
    /// ([`DisruptionOptions::consolidation_unchanged`](crate::DisruptionOptions)).
    ConsolidationUnchanged,
    /// Healthy and in use: no method applies.
    NothingToDo,
    /// Its NodePool is disrupted one domain of `key` (annotation `karpenter-rs.io/disruption-topology-key`) at a
    /// time, and another domain's nodes are being disrupted (`domain`: that domain's value, `None` for the nodes
    /// without the label), or were chosen by this pass's command.
    TopologyDomainWaiting { node_pool: String, key: String, domain: Option<String> },
    /// Its NodePool's `karpenter-rs.io/disruption-topology-key` annotation is not a label key: voluntary
    /// disruption of the pool is held until it is fixed.
    TopologyKeyInvalid { node_pool: String, detail: String },
    /// Removing it would leave its NodePool with fewer NodeClaims than its `karpenter-rs.io/min-nodes` floor
    /// (`nodes`: the pool's NodeClaims that count toward it; see [`crate::floor`]).
    AtMinNodes { node_pool: String, min_nodes: u32, nodes: u32 },
    /// More of its NodePool's nodes match a repair policy than node repair's outer limit allows (20 %, rounded
    /// up): something wider than one node is wrong, and replacing them would not help.
    RepairBlocked { node_pool: String, unhealthy: u32, nodes: u32, threshold: u32 },
    /// The node or its NodeClaim is annotated `karpenter.sh/do-not-repair: "true"`.
    NodeDoNotRepair,
    /// Empty of pods, but CapacityBuffer virtual pods land on it (`buffers`: `namespace/name`): it is the
    /// buffers' room, so Emptiness leaves it.
    HostsCapacityBuffer { buffers: Vec<String> },
    /// A replacement or multi-node move saves too little for its disruption (not upstream Karpenter): the share
    /// of the saving that falls to `node_pool` (`savings_per_hour`, `percent` of the pool's candidates' price) is
    /// below what `threshold` requires of it (`required_per_hour`). `set_by` names where the threshold comes from:
    /// the pool's `karpenter-rs.io/consolidation-min-savings` annotation or the `CONSOLIDATION_MIN_SAVINGS`
    /// setting (the stricter of the two applies). See [`crate::savings`].
    SavingsBelowThreshold {
        node_pool: String,
        savings_per_hour: f64,
        percent: f64,
        threshold: String,
        required_per_hour: f64,
        set_by: ThresholdSource,
    },
    /// The NodePool's `karpenter-rs.io/consolidation-min-savings` annotation does not parse: its replacements and
    /// multi-node moves are held until it is fixed (deletes go on).
    MinSavingsInvalid { node_pool: String, detail: String },
}

/// Where the threshold that held a move comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThresholdSource {
    /// The NodePool's `karpenter-rs.io/consolidation-min-savings` annotation.
    NodePool,
    /// The `CONSOLIDATION_MIN_SAVINGS` setting.
    Setting,
}

/// Single-node spot-to-spot consolidation needs this many cheaper instance types and keeps this many: upstream's
/// constant, the default of `SPOT_TO_SPOT_MIN_INSTANCE_TYPES` ([`crate::DisruptionOptions::spot_to_spot_min_instance_types`]).
pub const SPOT_TO_SPOT_MIN_TYPES: usize = 15;

fn spot_to_spot_min_types() -> usize {
    SPOT_TO_SPOT_MIN_TYPES
}

impl Reason {
    /// Every [`Reason::code`], in declaration order.
    pub const CODES: [&'static str; 41] = [
        "Disrupted",
        "Deferred",
        "NotManaged",
        "NodeClaimNotFound",
        "NoNodePoolLabel",
        "NotInitialized",
        "BeingDeleted",
        "Nominated",
        "NodeDoNotDisrupt",
        "NodePoolNotFound",
        "NoInstanceTypes",
        "PodDoNotDisrupt",
        "PdbBlocked",
        "MultiplePdbs",
        "BudgetExhausted",
        "StaticNodePool",
        "ConsolidationDisabled",
        "ConsolidateAfterNotElapsed",
        "WhenEmptyPolicy",
        "UnknownInstanceType",
        "MissingLabels",
        "PodsUnschedulable",
        "NeedsMultipleNodes",
        "PendingPodsNeedNodes",
        "NoCheaperOption",
        "SpotToSpotDisabled",
        "SpotToSpotTooFewOptions",
        "BalancedRejected",
        "StaticDriftWaiting",
        "NotEvaluated",
        "PassTimeSpent",
        "ConsolidationUnchanged",
        "NothingToDo",
        "TopologyDomainWaiting",
        "TopologyKeyInvalid",
        "AtMinNodes",
        "RepairBlocked",
        "NodeDoNotRepair",
        "HostsCapacityBuffer",
        "SavingsBelowThreshold",
        "MinSavingsInvalid",
    ];

    /// The stable code of this reason: the variant's name, as the `code` tag of its JSON form. Metrics label
    /// by it (`karpenter_voluntary_disruption_candidates_skipped_total`), so codes are only ever added.
    pub fn code(&self) -> &'static str {
        match self {
            Reason::Disrupted { .. } => "Disrupted",
            Reason::Deferred { .. } => "Deferred",
            Reason::NotManaged => "NotManaged",
            Reason::NodeClaimNotFound { .. } => "NodeClaimNotFound",
            Reason::NoNodePoolLabel => "NoNodePoolLabel",
            Reason::NotInitialized => "NotInitialized",
            Reason::BeingDeleted => "BeingDeleted",
            Reason::Nominated => "Nominated",
            Reason::NodeDoNotDisrupt { .. } => "NodeDoNotDisrupt",
            Reason::NodePoolNotFound { .. } => "NodePoolNotFound",
            Reason::NoInstanceTypes { .. } => "NoInstanceTypes",
            Reason::PodDoNotDisrupt { .. } => "PodDoNotDisrupt",
            Reason::PdbBlocked { .. } => "PdbBlocked",
            Reason::MultiplePdbs { .. } => "MultiplePdbs",
            Reason::BudgetExhausted { .. } => "BudgetExhausted",
            Reason::StaticNodePool => "StaticNodePool",
            Reason::ConsolidationDisabled => "ConsolidationDisabled",
            Reason::ConsolidateAfterNotElapsed { .. } => "ConsolidateAfterNotElapsed",
            Reason::WhenEmptyPolicy => "WhenEmptyPolicy",
            Reason::UnknownInstanceType { .. } => "UnknownInstanceType",
            Reason::MissingLabels { .. } => "MissingLabels",
            Reason::PodsUnschedulable { .. } => "PodsUnschedulable",
            Reason::NeedsMultipleNodes { .. } => "NeedsMultipleNodes",
            Reason::PendingPodsNeedNodes { .. } => "PendingPodsNeedNodes",
            Reason::NoCheaperOption { .. } => "NoCheaperOption",
            Reason::SpotToSpotDisabled => "SpotToSpotDisabled",
            Reason::SpotToSpotTooFewOptions { .. } => "SpotToSpotTooFewOptions",
            Reason::BalancedRejected { .. } => "BalancedRejected",
            Reason::StaticDriftWaiting { .. } => "StaticDriftWaiting",
            Reason::NotEvaluated { .. } => "NotEvaluated",
            Reason::PassTimeSpent { .. } => "PassTimeSpent",
            Reason::ConsolidationUnchanged => "ConsolidationUnchanged",
            Reason::NothingToDo => "NothingToDo",
            Reason::TopologyDomainWaiting { .. } => "TopologyDomainWaiting",
            Reason::TopologyKeyInvalid { .. } => "TopologyKeyInvalid",
            Reason::AtMinNodes { .. } => "AtMinNodes",
            Reason::RepairBlocked { .. } => "RepairBlocked",
            Reason::NodeDoNotRepair => "NodeDoNotRepair",
            Reason::HostsCapacityBuffer { .. } => "HostsCapacityBuffer",
            Reason::SavingsBelowThreshold { .. } => "SavingsBelowThreshold",
            Reason::MinSavingsInvalid { .. } => "MinSavingsInvalid",
        }
    }

    /// The broad outcome of this reason.
    pub fn outcome(&self) -> Outcome {
        match self {
            Reason::Disrupted { .. } => Outcome::Disrupted,
            Reason::Deferred { .. } => Outcome::Deferred,
            Reason::BeingDeleted
            | Reason::Nominated
            | Reason::NodeDoNotDisrupt { .. }
            | Reason::PodDoNotDisrupt { .. }
            | Reason::PdbBlocked { .. }
            | Reason::MultiplePdbs { .. }
            | Reason::BudgetExhausted { .. }
            | Reason::StaticDriftWaiting { .. }
            | Reason::TopologyDomainWaiting { .. }
            | Reason::TopologyKeyInvalid { .. }
            | Reason::AtMinNodes { .. }
            | Reason::RepairBlocked { .. }
            | Reason::NodeDoNotRepair
            | Reason::MinSavingsInvalid { .. } => Outcome::Blocked,
            _ => Outcome::Kept,
        }
    }
}

fn money(v: f64) -> String {
    format!("${v:.4}/h")
}

impl std::fmt::Display for Reason {
    /// Long because every reason has its own sentence: one match arm per variant.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Disrupted { method } => write!(f, "disrupted by {method:?}"),
            Reason::Deferred { method, detail } => {
                write!(f, "{method:?} would act ({detail}); one command runs per pass, so a later pass will")
            }
            Reason::NotManaged => write!(f, "not managed by Karpenter (no NodeClaim)"),
            Reason::NodeClaimNotFound { node_claim } => write!(f, "NodeClaim {node_claim} not found"),
            Reason::NoNodePoolLabel => write!(f, "no karpenter.sh/nodepool label"),
            Reason::NotInitialized => write!(f, "not initialized yet"),
            Reason::BeingDeleted => write!(f, "already being deleted or disrupted"),
            Reason::Nominated => write!(f, "nominated for pending pods"),
            Reason::NodeDoNotDisrupt { annotation: None } => write!(f, "node annotated karpenter.sh/do-not-disrupt"),
            Reason::NodeDoNotDisrupt { annotation: Some(a) } => write!(f, "node has {a}"),
            Reason::NodePoolNotFound { node_pool } => write!(f, "NodePool {node_pool} not found"),
            Reason::NoInstanceTypes { node_pool } => write!(f, "NodePool {node_pool} has no instance types"),
            Reason::PodDoNotDisrupt { pod, annotation: Some(a), .. } => write!(f, "pod {pod} has {a}"),
            Reason::PodDoNotDisrupt { pod, until: None, .. } => {
                write!(f, "pod {pod} is annotated karpenter.sh/do-not-disrupt")
            }
            Reason::PodDoNotDisrupt { pod, until: Some(u), .. } => {
                write!(f, "pod {pod} is annotated karpenter.sh/do-not-disrupt until {u}")
            }
            Reason::PdbBlocked { pod, pdb } => {
                write!(f, "pod {pod} is protected by PodDisruptionBudget {pdb} (0 disruptions allowed)")
            }
            Reason::MultiplePdbs { pod, pdbs } => {
                write!(f, "pod {pod} is selected by more than one PodDisruptionBudget ({})", pdbs.join(", "))
            }
            Reason::BudgetExhausted { node_pool, reason, detail } => {
                write!(f, "NodePool {node_pool} disruption budget for {} is at 0 ({detail})", reason.as_str())
            }
            Reason::StaticNodePool => write!(f, "static NodePools are never consolidated"),
            Reason::ConsolidationDisabled => write!(f, "consolidateAfter is Never"),
            Reason::ConsolidateAfterNotElapsed { remaining_seconds } => {
                write!(f, "consolidateAfter has not elapsed ({remaining_seconds}s to go)")
            }
            Reason::WhenEmptyPolicy => write!(f, "consolidationPolicy WhenEmpty and the node is not empty"),
            Reason::UnknownInstanceType { instance_type: Some(it) } => {
                write!(f, "instance type {it} is not offered by the NodePool")
            }
            Reason::UnknownInstanceType { instance_type: None } => write!(f, "no instance-type label"),
            Reason::MissingLabels { labels } => write!(f, "missing labels {}", labels.join(", ")),
            Reason::PodsUnschedulable { pods } => {
                let shown: Vec<String> = pods.iter().take(3).map(|p| format!("{}: {}", p.pod, p.reason)).collect();
                let more = if pods.len() > 3 { format!(" (and {} more)", pods.len() - 3) } else { String::new() };
                write!(f, "pods would not schedule elsewhere: {}{more}", shown.join("; "))
            }
            Reason::NeedsMultipleNodes { count } => write!(f, "can't remove without creating {count} nodes"),
            Reason::PendingPodsNeedNodes { count } => write!(
                f,
                "can't remove while pending pods need {count} or more new nodes (consolidation waits for provisioning)"
            ),
            Reason::NoCheaperOption { price } => {
                write!(f, "can't replace with a cheaper node (current price {})", money(*price))
            }
            Reason::SpotToSpotDisabled => write!(f, "SpotToSpotConsolidation is disabled, can't replace a spot node"),
            Reason::SpotToSpotTooFewOptions { count, required } => write!(
                f,
                "spot-to-spot consolidation requires {required} cheaper instance type options than the current candidate, found {count}"
            ),
            Reason::BalancedRejected { node_pool, score } => {
                write!(f, "Balanced policy of NodePool {node_pool}: score {score:.3} below the threshold 0.5")
            }
            Reason::StaticDriftWaiting { detail } => write!(f, "drifted; static pool waits: {detail}"),
            Reason::NotEvaluated { method } => {
                write!(f, "{method:?} not simulated this pass: an earlier candidate gave the pass its command")
            }
            Reason::PassTimeSpent { method } => {
                write!(
                    f,
                    "{method:?} not simulated this pass: the pass's time for simulations ran out; a later pass resumes here"
                )
            }
            Reason::ConsolidationUnchanged => write!(
                f,
                "not simulated: nothing changed since consolidation last found nothing to do (re-checked within 5 min)"
            ),
            Reason::NothingToDo => write!(f, "in use, not drifted, and no cheaper arrangement found"),
            Reason::TopologyDomainWaiting { node_pool, key, domain: Some(d) } => write!(
                f,
                "waiting: {key}={d} is being disrupted (NodePool {node_pool} is disrupted one {key} at a time)"
            ),
            Reason::TopologyDomainWaiting { node_pool, key, domain: None } => write!(
                f,
                "waiting: nodes without {key} are being disrupted (NodePool {node_pool} is disrupted one {key} at a time)"
            ),
            Reason::TopologyKeyInvalid { node_pool, detail } => write!(
                f,
                "NodePool {node_pool} is not disrupted voluntarily until its {} annotation is fixed: {detail}",
                karpenter_api::labels::disruption_topology::ANNOTATION
            ),
            Reason::AtMinNodes { node_pool, min_nodes, nodes } => write!(
                f,
                "NodePool {node_pool} is at its floor: removing it would leave fewer than {min_nodes} NodeClaims ({} {min_nodes}; {nodes} count toward it now)",
                karpenter_api::labels::min_nodes::ANNOTATION
            ),
            Reason::RepairBlocked { node_pool, unhealthy, nodes, threshold } => write!(
                f,
                "node repair blocked: {unhealthy} of NodePool {node_pool}'s {nodes} nodes are unhealthy, more than the {threshold} (20%) repair acts on"
            ),
            Reason::NodeDoNotRepair => {
                write!(f, "unhealthy, but the node or its NodeClaim is annotated karpenter.sh/do-not-repair")
            }
            Reason::HostsCapacityBuffer { buffers } => {
                write!(f, "keeps room for CapacityBuffer {}: its virtual pods land on it", buffers.join(", "))
            }
            Reason::SavingsBelowThreshold { node_pool, savings_per_hour, percent, threshold, set_by, .. } => {
                let saves = format!("saves {} ({percent:.1}%)", money(*savings_per_hour));
                match set_by {
                    ThresholdSource::NodePool => write!(
                        f,
                        "{saves}, NodePool {node_pool} requires {threshold} ({})",
                        karpenter_api::labels::consolidation_min_savings::ANNOTATION
                    ),
                    ThresholdSource::Setting => write!(
                        f,
                        "{saves}, {} requires {threshold} (NodePool {node_pool})",
                        karpenter_api::labels::consolidation_min_savings::SETTING
                    ),
                }
            }
            Reason::MinSavingsInvalid { node_pool, detail } => write!(
                f,
                "NodePool {node_pool}'s {} annotation is invalid ({detail}): its replacements and multi-node moves are held until it is fixed",
                karpenter_api::labels::consolidation_min_savings::ANNOTATION
            ),
        }
    }
}

/// The verdict for one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// Node name.
    pub node: String,
    /// Its NodeClaim.
    pub node_claim: Option<String>,
    /// Its NodePool.
    pub node_pool: Option<String>,
    /// Broad outcome.
    pub outcome: Outcome,
    /// The reason, as data.
    pub reason: Reason,
    /// The reason, for humans.
    pub message: String,
}

/// The allowance of one pool for one reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetStatus {
    /// NodePool.
    pub node_pool: String,
    /// Reason.
    pub reason: DisruptionReason,
    /// Managed, initialized nodes not terminating.
    pub nodes: u32,
    /// Of those, not Ready or being deleted.
    pub disrupting: u32,
    /// Nodes that may start being disrupted now.
    pub allowed: u32,
}

/// The Balanced approval threshold `1/k` with `k = 2`.
pub const BALANCED_THRESHOLD: f64 = 0.5;

/// How Balanced scoring judged one consolidation move, for one NodePool among its candidates: what upstream counts
/// in `karpenter_consolidation_moves_total` (every pool, whatever its policy) and `karpenter_consolidation_score`
/// (Balanced pools only).
#[derive(Debug, Clone, PartialEq)]
pub struct ConsolidationMove {
    /// Single- or multi-node consolidation.
    pub method: Method,
    /// The NodePool.
    pub node_pool: String,
    /// Its consolidation policy.
    pub policy: karpenter_api::nodepool::ConsolidationPolicy,
    /// The move was approved: every Balanced pool among its candidates scored at least
    /// [`BALANCED_THRESHOLD`].
    pub approved: bool,
    /// The pool's Balanced score (Balanced pools only): savings fraction over disruption fraction, infinite when
    /// the move disrupts nothing the pool counts.
    pub score: Option<f64>,
}

impl ConsolidationMove {
    /// Whether the pool itself approved the move (a pool that is not Balanced always does). A multi-node move is
    /// rejected as a whole when one of its Balanced pools rejects it, while another may have approved.
    pub fn pool_approved(&self) -> bool {
        self.score.is_none_or(|s| s >= BALANCED_THRESHOLD)
    }
}

/// Everything one pass decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pass {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// The time the pass was evaluated at (RFC 3339).
    pub now: String,
    /// Commands to start (one method acts per pass; StaticDrift may emit one command per node).
    pub commands: Vec<Command>,
    /// One verdict per node of the snapshot, by node name.
    pub verdicts: Vec<Verdict>,
    /// Allowances per pool and reason, before the commands.
    pub budgets: Vec<BudgetStatus>,
    /// Set when the simulation budget stopped single-node consolidation: the last candidate it simulated. The
    /// next pass resumes after it ([`DisruptionOptions::resume_single_node_after`](crate::DisruptionOptions)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_single_node_after: Option<String>,
    /// How Balanced scoring judged the consolidation moves of the pass, in upstream's counting: each single-node move
    /// computed while the pass could still take its command, and multi-node consolidation's outcome (its command,
    /// else its last move rejected), one entry per NodePool of the move. The controller turns them into metrics;
    /// not serialised (a score may be infinite, which JSON cannot carry).
    #[serde(skip)]
    pub consolidation_moves: Vec<ConsolidationMove>,
}

impl Pass {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The verdict for `node`.
    pub fn verdict(&self, node: &str) -> Option<&Verdict> {
        self.verdicts.iter().find(|v| v.node == node)
    }

    /// Human-readable summary: each command's explanation, then each verdict.
    pub fn explain(&self) -> String {
        let mut out = String::new();
        if self.commands.is_empty() {
            out.push_str("no command this pass\n");
        }
        for c in &self.commands {
            out.push_str(&format!("{:?}: {}\n", c.method, c.explanation));
        }
        for v in &self.verdicts {
            out.push_str(&format!("{} [{:?}]: {}\n", v.node, v.outcome, v.message));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One reason of every code (the match in `code` is exhaustive, so a new variant must be added there; this
    /// list must then grow too, or the CODES comparison fails).
    fn one_of_each() -> Vec<Reason> {
        let m = Method::SingleNodeConsolidation;
        let s = || String::from("x");
        vec![
            Reason::Disrupted { method: m },
            Reason::Deferred { method: m, detail: s() },
            Reason::NotManaged,
            Reason::NodeClaimNotFound { node_claim: s() },
            Reason::NoNodePoolLabel,
            Reason::NotInitialized,
            Reason::BeingDeleted,
            Reason::Nominated,
            Reason::NodeDoNotDisrupt { annotation: None },
            Reason::NodePoolNotFound { node_pool: s() },
            Reason::NoInstanceTypes { node_pool: s() },
            Reason::PodDoNotDisrupt { pod: s(), until: None, annotation: Some(s()) },
            Reason::PdbBlocked { pod: s(), pdb: s() },
            Reason::MultiplePdbs { pod: s(), pdbs: vec![s()] },
            Reason::BudgetExhausted { node_pool: s(), reason: DisruptionReason::Empty, detail: s() },
            Reason::StaticNodePool,
            Reason::ConsolidationDisabled,
            Reason::ConsolidateAfterNotElapsed { remaining_seconds: 1 },
            Reason::WhenEmptyPolicy,
            Reason::UnknownInstanceType { instance_type: None },
            Reason::MissingLabels { labels: vec![s()] },
            Reason::PodsUnschedulable { pods: vec![] },
            Reason::NeedsMultipleNodes { count: 2 },
            Reason::PendingPodsNeedNodes { count: 2 },
            Reason::NoCheaperOption { price: 1.0 },
            Reason::SpotToSpotDisabled,
            Reason::SpotToSpotTooFewOptions { count: 3, required: 15 },
            Reason::BalancedRejected { node_pool: s(), score: 0.1 },
            Reason::StaticDriftWaiting { detail: s() },
            Reason::NotEvaluated { method: m },
            Reason::PassTimeSpent { method: m },
            Reason::ConsolidationUnchanged,
            Reason::NothingToDo,
            Reason::TopologyDomainWaiting { node_pool: s(), key: s(), domain: None },
            Reason::TopologyKeyInvalid { node_pool: s(), detail: s() },
            Reason::AtMinNodes { node_pool: s(), min_nodes: 2, nodes: 2 },
            Reason::RepairBlocked { node_pool: s(), unhealthy: 3, nodes: 10, threshold: 2 },
            Reason::NodeDoNotRepair,
            Reason::HostsCapacityBuffer { buffers: vec![s()] },
            Reason::SavingsBelowThreshold {
                node_pool: s(),
                savings_per_hour: 0.012,
                percent: 1.8,
                threshold: s(),
                required_per_hour: 0.05,
                set_by: ThresholdSource::NodePool,
            },
            Reason::MinSavingsInvalid { node_pool: s(), detail: s() },
        ]
    }

    #[test]
    fn codes_are_the_json_tags_and_all_listed() {
        let reasons = one_of_each();
        for r in &reasons {
            let json = serde_json::to_value(r).unwrap();
            assert_eq!(json["code"], r.code(), "{r:?}");
        }
        let codes: Vec<&str> = reasons.iter().map(Reason::code).collect();
        assert_eq!(codes, Reason::CODES);
    }

    /// The annotation of the do-not-disrupt reasons is optional in JSON: documents written before it existed
    /// still read, and without one the JSON is as it was.
    #[test]
    fn do_not_disrupt_annotation_is_optional_in_json() {
        let node: Reason = serde_json::from_str(r#"{"code":"NodeDoNotDisrupt"}"#).unwrap();
        assert_eq!(node, Reason::NodeDoNotDisrupt { annotation: None });
        assert_eq!(serde_json::to_string(&node).unwrap(), r#"{"code":"NodeDoNotDisrupt"}"#);
        let pod = Reason::PodDoNotDisrupt { pod: "default/a".into(), until: None, annotation: Some("k=v".into()) };
        assert_eq!(serde_json::to_value(&pod).unwrap()["annotation"], "k=v");
        assert_eq!(pod.to_string(), "pod default/a has k=v");
    }
}
