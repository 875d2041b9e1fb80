//! NodePool (`karpenter.sh/v1`): a template for NodeClaims plus disruption settings, limits, weight and (for
//! static pools) a replica count.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{Condition, Conditions};
use crate::crd::{CelRule, KarpenterCrd, SchemaPatch};
use crate::duration::{DurationUnits, KDuration, NillableDuration, check_syntax};
use crate::labels::{self, ProviderLabels};
use crate::nodeclaim::{
    ClaimSpecFields, NodeClaim, NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceQuantities, Taint,
    conditions, validate_quantity_map,
};
use crate::validation::{
    Validate, ValidationContext, Violations, field, index, key as map_key, label_value_errors, qualified_name_errors,
};

/// Maximum number of template labels.
pub const MAX_TEMPLATE_LABELS: usize = 100;
/// Maximum number of disruption budgets.
pub const MAX_BUDGETS: usize = 50;
/// The only limit a static NodePool may set.
pub const NODES_LIMIT: &str = "nodes";

/// A NodePool's floor from its `karpenter-rs.io/min-nodes` annotation ([`NodePool::min_nodes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MinNodes {
    /// The live NodeClaims the pool keeps (0: no floor).
    pub floor: u32,
    /// The pool carries the annotation.
    pub annotated: bool,
    /// Why the annotation is not applied as written (the `MinNodesValid` condition's message), naming the pool
    /// and the annotation.
    pub problem: Option<String>,
}

/// NodePool spec.
// kube-derive takes one `printcolumn(...)` per column; clippy reads the repeated `type_ = "string"` as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    singular = "nodepool",
    category = "karpenter",
    status = "NodePoolStatus",
    derive = "PartialEq",
    doc = "NodePool describes the nodes Karpenter may launch for pending pods and how they may be disrupted.",
    scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.nodes"),
    printcolumn(name = "NodeClass", type_ = "string", json_path = ".spec.template.spec.nodeClassRef.name"),
    printcolumn(name = "Nodes", type_ = "string", json_path = ".status.resources.nodes"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight", priority = 1),
    printcolumn(name = "CPU", type_ = "string", json_path = ".status.resources.cpu", priority = 1),
    printcolumn(name = "Memory", type_ = "string", json_path = ".status.resources.memory", priority = 1)
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.replicas) == has(oldSelf.replicas)", "message": "replicas cannot be added or removed after creation (static and dynamic NodePools cannot be converted into each other)"},
    {"rule": "!has(self.replicas) || !has(self.limits) || self.limits.all(k, k == 'nodes')", "message": "a static NodePool (replicas set) only supports the 'nodes' limit"},
    {"rule": "!has(self.replicas) || !has(self.weight)", "message": "a static NodePool (replicas set) cannot set weight"}
]))]
pub struct NodePoolSpec {
    /// Template of the NodeClaims this pool creates.
    pub template: NodeClaimTemplate,
    /// How and when nodes of this pool may be disrupted.
    #[serde(default)]
    pub disruption: Disruption,
    /// Upper bound on the summed capacity of the pool's nodes (`nodes` counts nodes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: ResourceQuantities,
    /// Priority among NodePools (1..100, higher first). Unset means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// Node count of a static NodePool; its presence makes the pool static.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

/// Template of a NodePool's NodeClaims.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplate {
    /// Labels and annotations put on NodeClaims and their nodes.
    #[serde(default, skip_serializing_if = "TemplateMetadata::is_empty")]
    pub metadata: TemplateMetadata,
    /// NodeClaim spec.
    pub spec: NodeClaimTemplateSpec,
}

/// Template metadata: labels and annotations only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TemplateMetadata {
    /// Labels put on NodeClaims and nodes (at most 100; restricted domains forbidden).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 100, "x-kubernetes-map-type" = "atomic"))]
    pub labels: BTreeMap<String, String>,
    /// Annotations put on NodeClaims and nodes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-map-type" = "granular"))]
    pub annotations: BTreeMap<String, String>,
}

impl TemplateMetadata {
    /// Whether the template sets neither labels nor annotations.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

pub(crate) fn default_expire_after() -> NillableDuration {
    NillableDuration::from_static("720h")
}

/// The `spec` of a NodePool's template: a NodeClaim spec without `resources`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimTemplateSpec {
    /// Taints applied to the nodes; pods must tolerate them to schedule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub taints: Vec<Taint>,
    /// Taints applied at boot and expected to be removed by something else; ignored by the scheduler.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub startup_taints: Vec<Taint>,
    /// Requirements every node of this pool satisfies.
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The provider node class nodes are launched from (`group` and `kind` are immutable).
    pub node_class_ref: NodeClassReference,
    /// Maximum time a node may drain once deletion starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(s|m|h))+$"))]
    pub termination_grace_period: Option<KDuration>,
    /// Maximum node lifetime (`Never` disables expiry).
    #[serde(default = "default_expire_after")]
    #[schemars(regex(pattern = r"^(([0-9]+(s|m|h))+|Never)$"))]
    pub expire_after: NillableDuration,
}

impl NodeClaimTemplateSpec {
    fn fields(&self) -> ClaimSpecFields<'_> {
        ClaimSpecFields {
            requirements: &self.requirements,
            taints: &self.taints,
            startup_taints: &self.startup_taints,
            node_class_ref: &self.node_class_ref,
            expire_after: &self.expire_after,
            termination_grace_period: self.termination_grace_period.as_ref(),
        }
    }
}

/// Consolidation policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only empty nodes are consolidated.
    WhenEmpty,
    /// Empty and underutilized nodes are consolidated.
    #[default]
    WhenEmptyOrUnderutilized,
    /// Underutilized nodes are consolidated only when the savings outweigh the disruption (v1.14).
    Balanced,
}

impl ConsolidationPolicy {
    /// The policy as the `consolidation_policy` label of the disruption metrics spells it (snake case).
    pub fn metric_label(self) -> &'static str {
        match self {
            ConsolidationPolicy::WhenEmpty => "when_empty",
            ConsolidationPolicy::WhenEmptyOrUnderutilized => "when_empty_or_underutilized",
            ConsolidationPolicy::Balanced => "balanced",
        }
    }
}

/// Disruption reasons a budget can be limited to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum DisruptionReason {
    /// Consolidation of nodes whose pods fit elsewhere or on a cheaper replacement
    /// (`consolidationPolicy: WhenEmptyOrUnderutilized`).
    Underutilized,
    /// Consolidation of nodes running no pods but DaemonSet ones.
    Empty,
    /// Replacement of nodes whose NodePool or node class changed since launch (drift).
    Drifted,
    /// Node repair's reason (upstream v1.15): repair commands (feature gate `NodeRepair`) use up its allowance, in
    /// which only nodes being deleted count as disrupting.
    Unhealthy,
}

impl DisruptionReason {
    /// The reason as the API spells it in `budgets[].reasons`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Underutilized => "Underutilized",
            Self::Empty => "Empty",
            Self::Drifted => "Drifted",
            Self::Unhealthy => "Unhealthy",
        }
    }
}

fn default_consolidate_after() -> NillableDuration {
    NillableDuration::from_static("0s")
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget::default()]
}

/// Disruption settings of a NodePool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disruption {
    /// How long after the last pod event a node may be consolidated; `Never` disables consolidation.
    #[serde(default = "default_consolidate_after")]
    #[schemars(regex(pattern = r"^(([0-9]+(s|m|h))+|Never)$"))]
    pub consolidate_after: NillableDuration,
    /// Which nodes consolidation considers.
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    /// Limits on how many nodes may be disrupted at once (at most 50).
    #[serde(default = "default_budgets")]
    #[schemars(length(max = 50))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Self {
            consolidate_after: default_consolidate_after(),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

fn default_budget_nodes() -> String {
    "10%".to_string()
}

/// How many nodes may be disrupted at once, optionally only for some reasons and during a schedule window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.schedule) == has(self.duration)", "message": "'schedule' must be set with 'duration'"},
    {"rule": "!has(self.timeZone) || has(self.schedule)", "message": "'timeZone' requires 'schedule'"}
]))]
pub struct Budget {
    /// Reasons the budget applies to; absent means every reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub reasons: Option<Vec<DisruptionReason>>,
    /// Number (`5`) or percentage (`10%`, rounded up) of the pool's nodes.
    #[serde(default = "default_budget_nodes")]
    #[schemars(regex(pattern = r"^((100|[0-9]{1,2})%|[0-9]+)$"))]
    pub nodes: String,
    /// Cron schedule (5 fields or `@daily`-style) of when the budget starts being active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|\S+\s+\S+\s+\S+\s+\S+\s+\S+)$"
    ))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit (hours and minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"))]
    pub duration: Option<KDuration>,
    /// IANA time zone the schedule is evaluated in (e.g. `Europe/Berlin`); absent means UTC. Extension: not in
    /// upstream Karpenter, which always uses UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
}

impl Default for Budget {
    fn default() -> Self {
        Self { reasons: None, nodes: default_budget_nodes(), schedule: None, duration: None, time_zone: None }
    }
}

/// Why a budget cannot be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("invalid budget nodes {0:?}: must be an integer or a percentage 0%..100%")]
    /// `nodes` is neither an integer nor a percentage from 0% to 100%; holds the text as written.
    Nodes(String),
    #[error("invalid schedule {schedule:?}: {reason}")]
    /// `schedule` is not a cron expression the budget accepts.
    Schedule {
        /// The schedule as written.
        schedule: String,
        /// What the cron parser rejected.
        reason: String,
    },
    #[error("schedule requires duration")]
    /// `duration` is missing although `schedule` is set.
    MissingDuration,
    #[error("duration requires schedule")]
    /// `schedule` is missing although `duration` is set.
    MissingSchedule,
    #[error("unknown time zone {0:?}")]
    /// `timeZone` names no IANA time zone; holds the name as written.
    TimeZone(String),
    #[error(
        "time zone {0:?} cannot be evaluated: karpenter-api was built without its `time-zones` feature (budgets with a timeZone are refused, never evaluated in UTC)"
    )]
    /// `timeZone` is set but the crate was built without the `time-zones` feature (no time zone database);
    /// holds the name as written.
    TimeZonesUnsupported(String),
}

/// The nickname schedules and their five-field forms.
const CRON_NICKNAMES: [(&str, &str); 7] = [
    ("@annually", "0 0 1 1 *"),
    ("@yearly", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// Parses a budget schedule: exactly five fields (minute hour day-of-month month day-of-week) or one of the
/// nicknames. Day-of-month and day-of-week follow standard cron: when both are restricted, a day matching
/// either fires.
pub fn parse_schedule(schedule: &str) -> Result<croner::Cron, BudgetError> {
    let err = |reason: String| BudgetError::Schedule { schedule: schedule.to_string(), reason };
    let trimmed = schedule.trim();
    let five = if trimmed.starts_with('@') {
        CRON_NICKNAMES
            .iter()
            .find(|(n, _)| *n == trimmed)
            .map(|(_, f)| *f)
            .ok_or_else(|| err("unknown nickname".to_string()))?
    } else {
        let n = trimmed.split_whitespace().count();
        if n != 5 {
            return Err(err(format!("expected 5 fields (minute hour day-of-month month day-of-week), found {n}")));
        }
        trimmed
    };
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .dom_and_dow(false)
        .build()
        .parse(five)
        .map_err(|e| err(e.to_string()))
}

/// Parses an IANA time zone name (feature `time-zones`).
#[cfg(feature = "time-zones")]
pub fn parse_time_zone(tz: &str) -> Result<chrono_tz::Tz, BudgetError> {
    tz.parse::<chrono_tz::Tz>().map_err(|_| BudgetError::TimeZone(tz.to_string()))
}

/// The zone budget schedules are evaluated in: any IANA zone with the `time-zones` feature; without it the only
/// zone is UTC, the zone of a budget without `timeZone`.
#[cfg(feature = "time-zones")]
type ScheduleZone = chrono_tz::Tz;
#[cfg(not(feature = "time-zones"))]
type ScheduleZone = Utc;
#[cfg(feature = "time-zones")]
const UTC_ZONE: ScheduleZone = chrono_tz::UTC;
#[cfg(not(feature = "time-zones"))]
const UTC_ZONE: ScheduleZone = Utc;

/// The zone of a budget's `timeZone` (UTC when absent). Without the `time-zones` feature every named zone is
/// [`BudgetError::TimeZonesUnsupported`], "UTC" included: the crate has no database to tell a name's meaning,
/// and guessing UTC would move a maintenance window silently.
fn schedule_zone(name: Option<&str>) -> Result<ScheduleZone, BudgetError> {
    match name {
        None => Ok(UTC_ZONE),
        #[cfg(feature = "time-zones")]
        Some(name) => parse_time_zone(name),
        #[cfg(not(feature = "time-zones"))]
        Some(name) => Err(BudgetError::TimeZonesUnsupported(name.to_string())),
    }
}

/// Parses a budget `nodes` value: `Ok(Err(n))` for an absolute count, `Ok(Ok(pct))` for a percentage.
fn parse_nodes(nodes: &str) -> Result<Result<u32, u64>, BudgetError> {
    let bad = || BudgetError::Nodes(nodes.to_string());
    if let Some(p) = nodes.strip_suffix('%') {
        if p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let pct: u32 = p.parse().map_err(|_| bad())?;
        if pct > 100 || (p.len() == 3 && p != "100") {
            return Err(bad());
        }
        Ok(Ok(pct))
    } else {
        if nodes.is_empty() || !nodes.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        // Absolute counts beyond u64 saturate: they allow everything anyway.
        Ok(Err(nodes.parse::<u64>().unwrap_or(u64::MAX)))
    }
}

impl Budget {
    /// Nodes this budget allows to be disrupted at once in a pool of `total_nodes`: an absolute count as is
    /// (capped at `u32::MAX`), a percentage rounded up (`ceil(pct × total / 100)`). An invalid value allows 0.
    pub fn allowed_disruptions(&self, total_nodes: u32) -> u32 {
        match parse_nodes(&self.nodes) {
            Ok(Ok(pct)) => (u64::from(pct) * u64::from(total_nodes)).div_ceil(100) as u32,
            Ok(Err(n)) => u32::try_from(n).unwrap_or(u32::MAX),
            Err(_) => 0,
        }
    }

    /// Whether the budget applies at `now`.
    ///
    /// A budget without a schedule is always active. A scheduled budget is active when the schedule fired at some
    /// time `t` with `now - duration < t <= now`. The schedule is evaluated on the wall clock of the budget's time
    /// zone (UTC when absent), so `0 9 * * 1-5` in `Europe/Berlin` fires at 09:00 Berlin time in summer and in
    /// winter. On the day clocks jump forward, a time inside the skipped hour fires at the moment of the jump
    /// (as classic cron daemons do); on the day they fall back, a repeated wall-clock time fires once.
    pub fn is_active(&self, now: DateTime<Utc>) -> Result<bool, BudgetError> {
        let (schedule, duration) = match (&self.schedule, &self.duration) {
            (None, None) => return Ok(true),
            (Some(_), None) => return Err(BudgetError::MissingDuration),
            (None, Some(_)) => return Err(BudgetError::MissingSchedule),
            (Some(s), Some(d)) => (s, d),
        };
        let cron = parse_schedule(schedule)?;
        let tz = schedule_zone(self.time_zone.as_deref())?;
        let window = chrono::Duration::from_std(duration.duration()).unwrap_or(chrono::Duration::MAX);
        let Some(start) = now.checked_sub_signed(window) else { return Ok(true) };
        let start_local = start.with_timezone(&tz);
        match cron.find_next_occurrence(&start_local, false) {
            Ok(next) => Ok(next.with_timezone(&Utc) <= now),
            // No future occurrence at all (e.g. 30 February): never active.
            Err(_) => Ok(false),
        }
    }

    /// The first instant after `now` at which [`Budget::is_active`] can change: the schedule's next firing (the
    /// window opens) or the end of the window of the next firing after `now - duration` (it closes). `None` for
    /// a budget without a schedule, one that cannot be evaluated (it never changes) or a schedule that never
    /// fires again. Between `now` and that instant the budget stays as it is at `now`, so a simulation may
    /// skip to it instead of looking every minute.
    pub fn next_transition(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let (Some(schedule), Some(duration)) = (&self.schedule, &self.duration) else { return None };
        let cron = parse_schedule(schedule).ok()?;
        let tz = schedule_zone(self.time_zone.as_deref()).ok()?;
        let next_fire = |after: DateTime<Utc>| {
            cron.find_next_occurrence(&after.with_timezone(&tz), false).ok().map(|t| t.with_timezone(&Utc))
        };
        let window = chrono::Duration::from_std(duration.duration()).unwrap_or(chrono::Duration::MAX);
        let opens = next_fire(now);
        let closes = now.checked_sub_signed(window).and_then(next_fire).and_then(|t| t.checked_add_signed(window));
        [opens, closes].into_iter().flatten().filter(|t| *t > now).min()
    }

    /// Whether this budget limits `reason` (absent reasons = every reason).
    pub fn applies_to(&self, reason: DisruptionReason) -> bool {
        self.reasons.as_ref().is_none_or(|r| r.contains(&reason))
    }
}

/// Observed state of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePoolStatus {
    /// Summed capacity of the pool's nodes, including the `nodes` count.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: ResourceQuantities,
    /// Number of nodes of the pool (scale subresource status path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<i64>,
    /// Generation of the NodeClass when registration health was last reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// Status conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl Conditions for NodePoolStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

impl NodePool {
    /// A static pool (replicas set) keeps a fixed node count and never consolidates.
    pub fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }

    /// Weight used for ordering pools (unset = 0).
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    /// `status.conditions`, empty when there is no status.
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
    }

    /// Only `Ready=True` pools are used by the provisioner.
    pub fn is_ready(&self) -> bool {
        self.conditions().is_true(conditions::READY)
    }

    /// The floor its `karpenter-rs.io/min-nodes` annotation sets ([`MinNodes`]): none without the annotation, none
    /// (with the problem) for a value that does not parse or on a static pool, and `limits.nodes` (with the
    /// problem) for a value above that limit.
    pub fn min_nodes(&self) -> MinNodes {
        use crate::labels::min_nodes;
        let name = self.metadata.name.as_deref().unwrap_or_default();
        let Some(value) = self.metadata.annotations.as_ref().and_then(|a| a.get(min_nodes::ANNOTATION)) else {
            return MinNodes::default();
        };
        let n = match min_nodes::parse(value) {
            Ok(n) => n,
            Err(e) => return MinNodes { floor: 0, annotated: true, problem: Some(format!("NodePool {name}: {e}")) },
        };
        if self.is_static() {
            let problem = format!(
                "NodePool {name}: annotation {} applies to dynamic NodePools only; this one is static \
                 (spec.replicas), its floor is not applied",
                min_nodes::ANNOTATION
            );
            return MinNodes { floor: 0, annotated: true, problem: Some(problem) };
        }
        let limit =
            self.spec.limits.get(NODES_LIMIT).and_then(|l| l.as_str().parse::<karpenter_requirements::Quantity>().ok());
        if let Some(limit) = limit.and_then(|l| l.value()) {
            let limit = u32::try_from(limit.max(0)).unwrap_or(u32::MAX);
            if n > limit {
                let problem = format!(
                    "NodePool {name}: annotation {} {n} is above limits.nodes {limit}; the floor is {limit}",
                    min_nodes::ANNOTATION
                );
                return MinNodes { floor: limit, annotated: true, problem: Some(problem) };
            }
        }
        MinNodes { floor: n, annotated: true, problem: None }
    }

    /// Whether `claim` belongs to this pool (by the `karpenter.sh/nodepool` label).
    pub fn owns(&self, claim: &NodeClaim) -> bool {
        claim.node_pool_name().is_some() && claim.node_pool_name() == self.metadata.name.as_deref()
    }

    /// Budgets limiting `reason`.
    pub fn budgets_for(&self, reason: DisruptionReason) -> impl Iterator<Item = &Budget> {
        self.spec.disruption.budgets.iter().filter(move |b| b.applies_to(reason))
    }

    /// Nodes that may be disrupted for `reason` at `now` in a pool of `total_nodes`: the minimum over active
    /// budgets applying to the reason (`u32::MAX`-free: with no active budget, every node). Budgets that cannot
    /// be evaluated count as allowing 0, the safe direction.
    pub fn allowed_disruptions(&self, reason: DisruptionReason, now: DateTime<Utc>, total_nodes: u32) -> u32 {
        self.budgets_for(reason)
            .filter_map(|b| match b.is_active(now) {
                Ok(true) => Some(b.allowed_disruptions(total_nodes)),
                Ok(false) => None,
                Err(_) => Some(0),
            })
            .min()
            .unwrap_or(total_nodes)
    }

    /// Transition rules (`oldSelf`): replicas presence and nodeClassRef group/kind are immutable. Includes
    /// [`Validate::validate`] of the new object.
    pub fn validate_update(&self, old: &Self, ctx: &ValidationContext) -> Violations {
        let mut out = self.validate(ctx);
        if self.spec.replicas.is_some() != old.spec.replicas.is_some() {
            out.push(
                "spec",
                "replicas cannot be added or removed after creation (static and dynamic NodePools cannot be converted into each other)",
            );
        }
        let (new_ref, old_ref) = (&self.spec.template.spec.node_class_ref, &old.spec.template.spec.node_class_ref);
        if new_ref.group != old_ref.group {
            out.push("spec.template.spec.nodeClassRef.group", "nodeClassRef.group is immutable");
        }
        if new_ref.kind != old_ref.kind {
            out.push("spec.template.spec.nodeClassRef.kind", "nodeClassRef.kind is immutable");
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------------------------

fn validate_template_labels(
    labels_: &BTreeMap<String, String>,
    path: &str,
    provider: &ProviderLabels,
    out: &mut Violations,
) {
    if labels_.len() > MAX_TEMPLATE_LABELS {
        out.push(path, format!("must have at most {MAX_TEMPLATE_LABELS} labels, found {}", labels_.len()));
    }
    for (k, v) in labels_ {
        let kp = map_key(path, k);
        for e in qualified_name_errors(k) {
            out.push(&kp, format!("invalid label key: {e}"));
        }
        for e in label_value_errors(v) {
            out.push(&kp, format!("invalid label value {v:?}: {e}"));
        }
        if let Some(m) = crate::nodeclaim::restricted_key_message(k, provider, false) {
            out.push(&kp, m);
        }
    }
}

fn validate_budgets(budgets: &[Budget], path: &str, out: &mut Violations) {
    if budgets.len() > MAX_BUDGETS {
        out.push(path, format!("must have at most {MAX_BUDGETS} budgets, found {}", budgets.len()));
    }
    for (i, b) in budgets.iter().enumerate() {
        let bp = index(path, i);
        if parse_nodes(&b.nodes).is_err() {
            out.push(
                field(&bp, "nodes"),
                format!("invalid value {:?}: must match ^((100|[0-9]{{1,2}})%|[0-9]+)$", b.nodes),
            );
        }
        match (&b.schedule, &b.duration) {
            (Some(_), None) => out.push(&bp, "schedule requires duration"),
            (None, Some(_)) => out.push(&bp, "duration requires schedule"),
            _ => {}
        }
        if let Some(s) = &b.schedule
            && let Err(e) = parse_schedule(s)
        {
            out.push(field(&bp, "schedule"), e.to_string());
        }
        if let Some(d) = &b.duration
            && !check_syntax(d.as_str(), DurationUnits::BudgetHoursMinutes)
        {
            out.push(
                field(&bp, "duration"),
                format!("invalid duration {:?}: must be hours and/or minutes, e.g. 8h, 30m, 1h30m", d.as_str()),
            );
        }
        if let Some(tz) = &b.time_zone {
            if b.schedule.is_none() {
                out.push(field(&bp, "timeZone"), "timeZone requires schedule");
            }
            match schedule_zone(Some(tz)) {
                Ok(_) => {}
                Err(BudgetError::TimeZone(_)) => out.push(
                    field(&bp, "timeZone"),
                    format!("unknown time zone {tz:?}: must be an IANA name such as Europe/Berlin"),
                ),
                Err(e) => out.push(field(&bp, "timeZone"), e.to_string()),
            }
        }
        if let Some(r) = &b.reasons {
            if r.len() > MAX_BUDGETS {
                out.push(field(&bp, "reasons"), "must have at most 50 items");
            }
            let mut seen = std::collections::BTreeSet::new();
            for (j, reason) in r.iter().enumerate() {
                if !seen.insert(reason) {
                    out.push(index(&field(&bp, "reasons"), j), format!("duplicate reason {}", reason.as_str()));
                }
            }
        }
    }
}

impl Validate for NodePool {
    fn validate(&self, ctx: &ValidationContext) -> Violations {
        let mut out = Violations::new();
        let spec = &self.spec;
        validate_template_labels(
            &spec.template.metadata.labels,
            "spec.template.metadata.labels",
            &ctx.provider,
            &mut out,
        );
        spec.template.spec.fields().validate_at("spec.template.spec", ctx, false, &mut out);
        let d = &spec.disruption;
        if !d.consolidate_after.is_never()
            && !check_syntax(d.consolidate_after.as_str(), DurationUnits::HoursMinutesSeconds)
        {
            out.push(
                "spec.disruption.consolidateAfter",
                format!("invalid duration {:?}", d.consolidate_after.as_str()),
            );
        }
        validate_budgets(&d.budgets, "spec.disruption.budgets", &mut out);
        validate_quantity_map(&spec.limits, "spec.limits", &mut out);
        if let Some(w) = spec.weight
            && !(1..=100).contains(&w)
        {
            out.push("spec.weight", "must be between 1 and 100");
        }
        if let Some(r) = spec.replicas {
            if r < 0 {
                out.push("spec.replicas", "must be greater than or equal to 0");
            }
            if spec.limits.keys().any(|k| k != NODES_LIMIT) {
                out.push("spec.limits", "a static NodePool (replicas set) only supports the 'nodes' limit");
            }
            if spec.weight.is_some() {
                out.push("spec.weight", "a static NodePool (replicas set) cannot set weight");
            }
        }
        out
    }
}

/// CEL rules restricting label keys to the provider's allowed domains, as `(rule, message)` over a string `x`.
///
/// Generated from the [`ProviderLabels`] value: the core `karpenter.sh` domain (allowing its well-known keys) and
/// each provider restricted domain (allowing the provider's well-known keys in it).
pub fn restricted_domain_rules(provider: &ProviderLabels, var: &str) -> Vec<(String, String)> {
    let mut rules = Vec::new();
    let domain = format!("{var}.find('^[^/]+')");
    let mut domains = vec![labels::CORE_RESTRICTED_DOMAIN.to_string()];
    domains.extend(provider.restricted_domains.iter().cloned());
    for d in domains {
        let allowed: Vec<String> = provider
            .all_well_known()
            .into_iter()
            .filter(|k| k.split_once('/').is_some_and(|(kd, _)| labels::domain_matches(kd, &d)))
            .map(|k| format!("'{k}'"))
            .collect();
        rules.push((
            format!(
                "!{var}.contains('/') || {var} in [{}] || !({domain} == '{d}' || {domain}.endsWith('.{d}'))",
                allowed.join(", ")
            ),
            format!("label domain \"{d}\" is restricted"),
        ));
    }
    rules.push((format!("{var} != '{}'", labels::HOSTNAME), format!("label \"{}\" is restricted", labels::HOSTNAME)));
    rules
}

impl KarpenterCrd for NodePool {
    fn schema_patches(provider: &ProviderLabels) -> Vec<SchemaPatch> {
        let mut p = vec![
            SchemaPatch::set("spec.template.metadata.labels{}", "maxLength", serde_json::json!(63)),
            SchemaPatch::set(
                "spec.template.metadata.labels{}",
                "pattern",
                serde_json::json!(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"),
            ),
        ];
        for (rule, message) in restricted_domain_rules(provider, "x") {
            p.push(SchemaPatch::validation(
                "spec.template.metadata.labels",
                CelRule::new(format!("self.all(x, {rule})")).message(message),
            ));
        }
        p.push(SchemaPatch::validation(
            "spec.template.metadata.labels",
            CelRule::new(format!("self.all(x, x != '{}')", labels::NODE_POOL))
                .message(format!("label \"{}\" is restricted", labels::NODE_POOL)),
        ));
        p.extend(crate::nodeclaim::requirement_patches("spec.template.spec.requirements", provider));
        p.push(SchemaPatch::validation(
            "spec.template.spec.nodeClassRef",
            CelRule::new("self.group == oldSelf.group").message("nodeClassRef.group is immutable"),
        ));
        p.push(SchemaPatch::validation(
            "spec.template.spec.nodeClassRef",
            CelRule::new("self.kind == oldSelf.kind").message("nodeClassRef.kind is immutable"),
        ));
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn budget(nodes: &str, schedule: Option<&str>, duration: Option<&str>, tz: Option<&str>) -> Budget {
        Budget {
            reasons: None,
            nodes: nodes.into(),
            schedule: schedule.map(str::to_string),
            duration: duration.map(|d| d.parse().unwrap()),
            time_zone: tz.map(str::to_string),
        }
    }

    #[test]
    fn percent_rounds_up() {
        assert_eq!(budget("10%", None, None, None).allowed_disruptions(5), 1);
        assert_eq!(budget("10%", None, None, None).allowed_disruptions(0), 0);
        assert_eq!(budget("10%", None, None, None).allowed_disruptions(11), 2);
        assert_eq!(budget("100%", None, None, None).allowed_disruptions(7), 7);
        assert_eq!(budget("0%", None, None, None).allowed_disruptions(7), 0);
        assert_eq!(budget("3", None, None, None).allowed_disruptions(1), 3);
        assert_eq!(budget("101%", None, None, None).allowed_disruptions(7), 0);
        assert_eq!(budget("99999999999999999999999", None, None, None).allowed_disruptions(7), u32::MAX);
    }

    #[test]
    fn min_nodes_floor_and_its_problems() {
        let pool = |value: Option<&str>, replicas: Option<i64>, nodes_limit: Option<&str>| {
            let mut p: NodePool = serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "web"},
                "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                    "name": "default"}, "requirements": []}}}
            }))
            .expect("fixture parses");
            if let Some(v) = value {
                p.metadata.annotations = Some(BTreeMap::from([(labels::min_nodes::ANNOTATION.into(), v.into())]));
            }
            p.spec.replicas = replicas;
            if let Some(l) = nodes_limit {
                p.spec.limits.insert(NODES_LIMIT.into(), crate::nodeclaim::ResourceQuantity::new(l));
            }
            p.min_nodes()
        };
        assert_eq!(pool(None, None, None), MinNodes::default());
        assert_eq!(pool(Some("2"), None, None), MinNodes { floor: 2, annotated: true, problem: None });
        assert_eq!(pool(Some("2"), None, Some("2")), MinNodes { floor: 2, annotated: true, problem: None });
        let bad = pool(Some("two"), None, None);
        assert_eq!((bad.floor, bad.annotated), (0, true));
        assert_eq!(
            bad.problem.as_deref(),
            Some("NodePool web: annotation karpenter-rs.io/min-nodes \"two\" is not a non-negative integer")
        );
        let over = pool(Some("5"), None, Some("3"));
        assert_eq!(over.floor, 3, "a floor above limits.nodes is capped at the limit");
        assert!(over.problem.as_deref().is_some_and(|p| p.contains("above limits.nodes 3")), "{over:?}");
        let stat = pool(Some("1"), Some(2), None);
        assert_eq!(stat.floor, 0, "no floor on a static pool");
        assert!(stat.problem.as_deref().is_some_and(|p| p.contains("static")), "{stat:?}");
    }

    #[test]
    fn schedule_forms() {
        for ok in [
            "0 9 * * 1-5",
            "@daily",
            "@midnight",
            "@hourly",
            "@annually",
            "@yearly",
            "@monthly",
            "@weekly",
            "*/15 * * * *",
            "0 0 1 JAN MON",
        ] {
            assert!(parse_schedule(ok).is_ok(), "{ok}: {:?}", parse_schedule(ok).err());
        }
        for bad in ["0 0 9 * * 1-5", "0 0 9 * * 1-5 2030", "* * * *", "@reboot", "@every 1h", "", "61 * * * *"] {
            assert!(parse_schedule(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn unscheduled_budget_always_active() {
        assert_eq!(
            budget("1", None, None, None).is_active(Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap()),
            Ok(true)
        );
        assert!(
            budget("1", Some("@daily"), None, None)
                .is_active(Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap())
                .is_err()
        );
    }

    #[test]
    fn utc_window() {
        let b = budget("0", Some("0 9 * * *"), Some("8h"), None);
        let at = |h: u32, m: u32| Utc.with_ymd_and_hms(2024, 3, 5, h, m, 0).unwrap();
        assert_eq!(b.is_active(at(8, 59)), Ok(false));
        assert_eq!(b.is_active(at(9, 0)), Ok(true), "the firing minute itself is inside");
        assert_eq!(b.is_active(at(16, 59)), Ok(true));
        assert_eq!(b.is_active(at(17, 0)), Ok(false), "now - duration is excluded");
    }

    /// `next_transition` agrees with `is_active` checked every minute: the state changes exactly at the
    /// transitions it names, and nowhere in between (windows longer than the period, time zones with DST,
    /// weekday ranges).
    #[test]
    fn next_transition_matches_is_active_minute_by_minute() {
        // (budget, transitions in the week).
        let cases = [
            (budget("0", Some("0 9 * * mon-fri"), Some("8h"), None), 10),
            (budget("0", Some("*/30 * * * *"), Some("20m"), None), 2 * 2 * 24 * 7),
            // Windows overlap: always active, whatever the transitions say.
            (budget("0", Some("*/10 * * * *"), Some("25m"), None), 0),
            #[cfg(feature = "time-zones")]
            (budget("0", Some("30 2 * * *"), Some("30m"), Some("Europe/Berlin")), 14),
            #[cfg(feature = "time-zones")]
            (budget("0", Some("@weekly"), Some("1h30m"), Some("America/New_York")), 2),
        ];
        // A week (Wednesday to Wednesday) around Berlin's spring DST change.
        let from = Utc.with_ymd_and_hms(2024, 3, 27, 0, 0, 0).unwrap();
        for (b, want) in &cases {
            let mut t = from;
            let mut next = b.next_transition(t).expect("scheduled");
            let mut transitions = 0;
            let mut active = b.is_active(t);
            while t < from + chrono::Duration::days(7) {
                let later = t + chrono::Duration::minutes(1);
                let now_active = b.is_active(later);
                let changed = now_active != active;
                active = now_active;
                if later == next {
                    transitions += usize::from(changed);
                    next = b.next_transition(later).expect("scheduled");
                    assert!(next > later, "{b:?} at {later}");
                } else {
                    assert!(!changed, "{b:?}: active changed at {later}, next transition said {next}");
                    assert!(later < next, "{b:?}: skipped past {next}");
                }
                t = later;
            }
            assert_eq!(transitions, *want, "{b:?}");
        }
        assert_eq!(budget("0", None, None, None).next_transition(from), None);
        assert_eq!(budget("0", Some("@daily"), None, None).next_transition(from), None);
        let b = budget("0", Some("0 9 * * *"), Some("8h"), None);
        let at = |h: u32| Utc.with_ymd_and_hms(2024, 3, 5, h, 0, 0).unwrap();
        assert_eq!(b.next_transition(at(8)), Some(at(9)));
        assert_eq!(b.next_transition(at(9)), Some(at(17)));
        assert_eq!(b.next_transition(at(17)), Some(at(9) + chrono::Duration::days(1)));
    }

    #[test]
    fn dom_dow_or_semantics() {
        // 1st of the month OR a Monday.
        let b = budget("0", Some("0 0 1 * 1"), Some("1h"), None);
        // 2024-04-01 is a Monday; 2024-04-08 a Monday; 2024-05-01 a Wednesday; 2024-04-09 a Tuesday.
        for (m, d, want) in [(4, 8, true), (5, 1, true), (4, 9, false)] {
            let t = Utc.with_ymd_and_hms(2024, m, d, 0, 30, 0).unwrap();
            assert_eq!(b.is_active(t), Ok(want), "2024-{m}-{d}");
        }
    }

    #[test]
    #[cfg(feature = "time-zones")]
    fn time_zone_follows_dst() {
        // 09:00 Berlin: 08:00 UTC in winter (CET), 07:00 UTC in summer (CEST). DST starts 2024-03-31.
        let b = budget("0", Some("0 9 * * *"), Some("1h"), Some("Europe/Berlin"));
        let utc = |d: u32, h: u32, m: u32| Utc.with_ymd_and_hms(2024, 3, d, h, m, 0).unwrap();
        assert_eq!(b.is_active(utc(30, 8, 30)), Ok(true), "winter: 09:30 CET");
        assert_eq!(b.is_active(utc(30, 7, 30)), Ok(false), "winter: 08:30 CET");
        assert_eq!(b.is_active(utc(31, 7, 30)), Ok(true), "summer: 09:30 CEST");
        assert_eq!(b.is_active(utc(31, 8, 30)), Ok(false), "summer: 10:30 CEST");
        // 02:30 does not exist in Berlin on 2024-03-31 (02:00 CET -> 03:00 CEST = 01:00 UTC): it fires when the
        // clocks jump, and the window runs from there.
        let gap = budget("0", Some("30 2 * * *"), Some("30m"), Some("Europe/Berlin"));
        assert_eq!(gap.is_active(utc(31, 0, 55)), Ok(false));
        assert_eq!(gap.is_active(utc(31, 1, 15)), Ok(true));
        assert_eq!(gap.is_active(utc(31, 1, 45)), Ok(false));
        assert_eq!(gap.is_active(utc(30, 1, 45)), Ok(true), "02:45 CET the day before");
        // Unknown zone.
        assert!(
            budget("0", Some("@daily"), Some("1h"), Some("Mars/Base"))
                .is_active(Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap())
                .is_err()
        );
    }

    #[test]
    #[cfg(feature = "time-zones")]
    fn berlin_fall_back_repeated_time_fires_once() {
        // 2024-10-27: 03:00 CEST -> 02:00 CET, so 02:30 happens twice (00:30 UTC and 01:30 UTC).
        let b = budget("0", Some("30 2 * * *"), Some("30m"), Some("Europe/Berlin"));
        let utc = |h: u32, m: u32| Utc.with_ymd_and_hms(2024, 10, 27, h, m, 0).unwrap();
        assert_eq!(b.is_active(utc(0, 45)), Ok(true), "first 02:30 (CEST)");
        assert_eq!(b.is_active(utc(1, 15)), Ok(false));
        assert_eq!(b.is_active(utc(1, 45)), Ok(false), "the repeated 02:30 (CET) does not fire again");
    }

    /// Without a time zone database a named zone is an error everywhere it is read, never UTC: `is_active` says
    /// so, the pool allows no disruption under that budget (the safe direction), validation names the feature.
    #[test]
    #[cfg(not(feature = "time-zones"))]
    fn a_named_time_zone_without_the_feature_is_an_error_not_utc() {
        let b = budget("0", Some("0 9 * * *"), Some("1h"), Some("Europe/Berlin"));
        let now = Utc.with_ymd_and_hms(2024, 3, 30, 9, 30, 0).unwrap();
        assert_eq!(b.is_active(now), Err(BudgetError::TimeZonesUnsupported("Europe/Berlin".into())));
        assert_eq!(b.next_transition(now), None);
        assert!(b.is_active(now).unwrap_err().to_string().contains("`time-zones` feature"));
        // UTC by name too: the crate cannot know what a name means without the database.
        let utc = budget("0", Some("0 9 * * *"), Some("1h"), Some("UTC"));
        assert_eq!(utc.is_active(now), Err(BudgetError::TimeZonesUnsupported("UTC".into())));
        // Without `timeZone` the schedule runs in UTC, as upstream's does.
        assert_eq!(budget("0", Some("0 9 * * *"), Some("1h"), None).is_active(now), Ok(true));
        let mut out = Violations::default();
        validate_budgets(&[b], "spec.disruption.budgets", &mut out);
        let text = format!("{out:?}");
        assert!(text.contains("timeZone") && text.contains("`time-zones` feature"), "{text}");
    }

    #[test]
    #[cfg(feature = "time-zones")]
    fn new_york_fall_back() {
        // America/New_York falls back on 2024-11-03 (02:00 EDT -> 01:00 EST). 00:00 local on 11-03 is 04:00 UTC,
        // on 11-04 it is 05:00 UTC.
        let b = budget("0", Some("@midnight"), Some("30m"), Some("America/New_York"));
        let utc = |d: u32, h: u32, m: u32| Utc.with_ymd_and_hms(2024, 11, d, h, m, 0).unwrap();
        assert_eq!(b.is_active(utc(3, 4, 10)), Ok(true));
        assert_eq!(b.is_active(utc(4, 4, 10)), Ok(false));
        assert_eq!(b.is_active(utc(4, 5, 10)), Ok(true));
    }

    #[test]
    fn decoded_defaults() {
        let np: NodePool = serde_saphyr::from_str(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
        )
        .unwrap();
        assert_eq!(np.spec.disruption, Disruption::default());
        assert_eq!(np.spec.disruption.consolidate_after.as_str(), "0s");
        assert_eq!(np.spec.disruption.budgets, vec![budget("10%", None, None, None)]);
        assert_eq!(np.spec.template.spec.expire_after.as_str(), "720h");
        assert!(!np.is_static());
        assert!(np.validate(&ValidationContext::new(crate::test_vocabulary::aws())).is_empty());
    }

    #[test]
    fn a_v1_15_budget_for_unhealthy_nodes_is_accepted() {
        let np: NodePool = serde_saphyr::from_str(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n  disruption:\n    budgets:\n      - {nodes: \"1\", reasons: [Unhealthy, Drifted]}\n",
        )
        .unwrap();
        let reasons = np.spec.disruption.budgets[0].reasons.clone().unwrap();
        assert_eq!(reasons, [DisruptionReason::Unhealthy, DisruptionReason::Drifted]);
        assert!(np.validate(&ValidationContext::new(crate::test_vocabulary::aws())).is_empty());
        assert!(np.spec.disruption.budgets[0].applies_to(DisruptionReason::Unhealthy));
        assert!(!np.spec.disruption.budgets[0].applies_to(DisruptionReason::Empty));
    }

    #[test]
    fn static_pool_transitions() {
        let mut old: NodePool = serde_saphyr::from_str(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: s}\nspec:\n  replicas: 3\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
        )
        .unwrap();
        assert!(old.is_static());
        let ctx = ValidationContext::new(crate::test_vocabulary::aws());
        let mut new = old.clone();
        new.spec.replicas = None;
        assert!(new.validate_update(&old, &ctx).has_path("spec"));
        new.spec.replicas = Some(5);
        assert!(new.validate_update(&old, &ctx).is_empty());
        new.spec.template.spec.node_class_ref.kind = "Other".into();
        assert!(new.validate_update(&old, &ctx).has_path("spec.template.spec.nodeClassRef.kind"));
        old.spec.weight = Some(3);
        assert!(old.validate(&ctx).has_path("spec.weight"));
    }
}
