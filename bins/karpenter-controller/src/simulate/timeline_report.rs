//! The report of a run over simulated time (`karpenter-rs.timeline/v1`, docs/simulate.md): what happened when,
//! each disruption command with its reason and savings, the cluster's $/h at the start and the end, and why
//! every node left at the end stays.

use std::collections::BTreeMap;
use std::fmt::Write;

use karpenter_disruption::{Command, Verdict};
use serde::Serialize;

use super::pods::{PodGroup, compact};
use super::report::CatalogueSummary;
use super::table::{marked, price, table};

/// The `apiVersion` of [`TimelineReport`].
pub const API_VERSION: &str = "karpenter-rs.timeline/v1";

/// Pod groups shown per row before `+N more pods`.
const MAX_GROUPS: usize = 3;

/// One run over simulated time (the `--output json` document with `--timeline`, `--scale` or `--for`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineReport {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// The manifest paths (the bundled example's name when none).
    pub inputs: Vec<String>,
    /// True when no path was given and the bundled example ran.
    pub bundled_example: bool,
    /// The timeline file, if any.
    pub timeline: Option<String>,
    /// Whose well-known labels applied.
    pub provider: String,
    /// The instance types every NodePool was evaluated against.
    pub catalogue: CatalogueSummary,
    /// Assumptions about the input and notes about the run.
    pub notes: Vec<String>,
    /// Simulated start time (RFC 3339).
    pub start: String,
    /// Simulated end time (RFC 3339).
    pub end: String,
    /// `end - start`, e.g. `2h`.
    pub duration: String,
    /// Totals.
    pub summary: TimelineSummary,
    /// Everything that happened, in time order.
    pub events: Vec<Event>,
    /// The nodes at the end, with their verdict.
    pub nodes: Vec<FinalNode>,
    /// The verdicts of a disruption pass at the end, for every node (`karpenter-rs.disruption/v1` verdicts).
    pub verdicts: Vec<Verdict>,
    /// Pods still pending at the end, grouped by why they cannot be placed.
    pub unschedulable: Vec<PendingGroup>,
}

/// Cluster size and cost at one instant.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterState {
    /// Nodes.
    pub nodes: usize,
    /// Sum of the priced nodes' $/h (rounded to 10⁻⁶).
    pub price_per_hour: f64,
    /// Nodes whose price is unknown (left out of the sum).
    pub unpriced_nodes: usize,
    /// The sum includes estimated prices (AWS spot, or another region's on-demand prices); omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub price_estimated: bool,
    /// Pods bound to nodes.
    pub pods: usize,
    /// Pods pending.
    pub pending_pods: usize,
}

/// Totals of a run.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineSummary {
    /// The cluster after the initial scheduling of the input's pending pods, before the first step.
    pub before: ClusterState,
    /// The cluster at the end.
    pub after: ClusterState,
    /// `before.pricePerHour - after.pricePerHour`.
    pub savings_per_hour: f64,
    /// Disruption commands executed.
    pub commands: usize,
    /// Of those, per method.
    pub commands_by_method: BTreeMap<String, usize>,
    /// Commands rejected by the validation after the 15 s wait.
    pub validation_failures: usize,
    /// Commands started and rolled back (`--node-startup`: a replacement gone or late); omitted when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub commands_rolled_back: usize,
    /// Commands still waiting for their replacements at the end; omitted when none.
    #[serde(skip_serializing_if = "is_zero")]
    pub commands_in_flight: usize,
    /// Nodes launched during the run (provisioning and replacements).
    pub nodes_launched: usize,
    /// Nodes removed during the run (disruption, expiration, deleted by steps).
    pub nodes_removed: usize,
    /// Pods the executed disruption commands moved (their displaced pods, summed): the churn a threshold saves.
    pub pods_moved: usize,
    /// The cluster's $/h averaged over the run, each price weighted by how long it lasted (rounded to 10⁻⁶).
    pub average_price_per_hour: f64,
    /// With `--consolidation-min-savings` or a non-default `--spot-to-spot-min-instance-types`: the same run
    /// without those flags, for comparison; omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
}

/// The churn of the same run without the decision flags given (`summary.baseline`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Baseline {
    /// The flags left out, as given (`--consolidation-min-savings 10%`).
    pub without: Vec<String>,
    /// Disruption commands executed.
    pub commands: usize,
    /// Pods they moved.
    pub pods_moved: usize,
    /// The time-weighted average $/h.
    pub average_price_per_hour: f64,
}

impl TimelineSummary {
    /// This run's churn as a [`Baseline`] for another run's report.
    pub fn as_baseline(&self, without: Vec<String>) -> Baseline {
        Baseline {
            without,
            commands: self.commands,
            pods_moved: self.pods_moved,
            average_price_per_hour: self.average_price_per_hour,
        }
    }
}

/// The cluster's $/h averaged over `[0, length_seconds]`: `initial` until the first event, then each event's
/// price after it until the next (events in time order, offsets past the end cut off). A run of no length
/// averages to the last price.
pub fn average_price_per_hour(initial: f64, events: &[Event], length_seconds: u64) -> f64 {
    let mut price = initial;
    if length_seconds == 0 {
        return events.last().map_or(price, |e| e.price_per_hour_after);
    }
    let (mut weighted, mut since) = (0.0, 0u64);
    for e in events {
        let at = e.offset_seconds.min(length_seconds);
        weighted += price * (at - since.min(at)) as f64;
        since = since.max(at);
        price = e.price_per_hour_after;
    }
    weighted += price * (length_seconds - since) as f64;
    super::world::round(weighted / length_seconds as f64)
}

/// What kind of event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventKind {
    /// A timeline step.
    Step,
    /// Pending pods were scheduled (placed on nodes, new nodes launched).
    Provisioning,
    /// NodeClaims past `expireAfter` were deleted (forceful, not budgeted).
    Expiration,
    /// A disruption command ran (its candidates were removed; with `--node-startup`, once its replacements
    /// were initialized).
    Disruption,
    /// With `--node-startup`: a disruption command with replacements started: its candidates were tainted
    /// `karpenter.sh/disrupted:NoSchedule` and its replacements launched; it is in flight until they initialize.
    DisruptionStarted,
    /// A command in flight was rolled back (a replacement gone or not initialized within the controller's
    /// replacement timeout): its candidates were untainted, its replacements deleted.
    DisruptionFailed,
    /// With `--node-startup`: launched nodes registered and initialized; the pods nominated to them were bound.
    Initialized,
    /// A disruption command was rejected by its validation after the wait.
    ValidationFailed,
    /// A node being deleted in the input (deletion timestamp, or the `karpenter.sh/disrupted` taint) was drained
    /// of its reschedulable pods and removed.
    Termination,
}

/// Something that happened.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// When (RFC 3339).
    pub at: String,
    /// Offset from the start, e.g. `10m15s`.
    pub offset: String,
    /// The same in seconds.
    pub offset_seconds: u64,
    /// What kind of event.
    #[serde(rename = "type")]
    pub kind: EventKind,
    /// One line for humans.
    pub message: String,
    /// Nodes removed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes_removed: Vec<String>,
    /// Nodes launched.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes_launched: Vec<LaunchedNode>,
    /// Pods placed on nodes by this event.
    pub pods_placed: usize,
    /// Pods pending after it.
    pub unschedulable_pods: usize,
    /// The cluster's $/h after the event.
    pub price_per_hour_after: f64,
    /// That sum includes estimated prices; omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub price_per_hour_after_estimated: bool,
    /// For commands that waited for validation: when they were decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
    /// For commands that were in flight (`--node-startup`): when their replacements were launched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launched_at: Option<String>,
    /// For commands that were in flight: when their replacements were all initialized (the candidates were
    /// removed then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initialized_at: Option<String>,
    /// The disruption command (`karpenter-rs.disruption/v1`: method, reason, decision, candidates,
    /// replacements, displaced pods, savings, explanation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Box<Command>>,
}

/// A node launched during the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchedNode {
    /// Node (and NodeClaim) name, `<nodepool>-<n>`.
    pub name: String,
    /// The NodePool.
    pub node_pool: String,
    /// The offering the fake provider's create picks.
    pub instance_type: String,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// Its $/h.
    pub price: f64,
    /// The price is an estimate; omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub price_estimated: bool,
    /// Pods bound to it at launch.
    pub pods: usize,
}

/// A node at the end.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalNode {
    pub name: String,
    pub node_pool: Option<String>,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    pub capacity_type: Option<String>,
    /// $/h, `null` when unknown.
    pub price: Option<f64>,
    /// The price is an estimate; omitted when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub price_estimated: bool,
    /// Pods bound to it.
    pub pods: usize,
    /// Those pods by owner.
    pub pod_groups: Vec<PodGroup>,
    /// Why disruption leaves it (or would act on it): the verdict's message.
    pub verdict: String,
    /// Taints, annotations and the NodeClaim's `Consolidatable` condition at the end.
    #[serde(flatten)]
    pub details: super::report::NodeDetails,
}

/// Pending pods at the end sharing one reason.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingGroup {
    /// The reason's code (`karpenter_scheduler::UnschedulableReason::code`).
    pub code: &'static str,
    pub reason: String,
    pub pods: Vec<String>,
}

/// Renders the report as text (ends with a newline).
///
/// Long because it writes the text report section by section in reading order; each section is a few lines of
/// formatting.
pub fn render(r: &TimelineReport) -> String {
    let mut out = String::new();
    let inputs = r.inputs.join(", ");
    let _ = writeln!(out, "Input: {inputs}{}", if r.bundled_example { " (the bundled example)" } else { "" });
    if let Some(t) = &r.timeline {
        let _ = writeln!(out, "Timeline: {t}");
    }
    let source = super::catalogue::describe_source(&r.catalogue.source);
    let _ =
        writeln!(out, "Instance types: {} from {source}; provider labels: {}", r.catalogue.instance_types, r.provider);
    let _ = writeln!(out, "Simulated time: {} to {} ({})", r.start, r.end, r.duration);
    for note in &r.notes {
        let _ = writeln!(out, "note: {note}");
    }
    let s = &r.summary;
    out.push('\n');
    let _ = writeln!(out, "Before: {}", state(&s.before));
    out.push('\n');
    if r.events.is_empty() {
        out.push_str("Events: none\n");
    } else {
        let _ = writeln!(out, "Events: {}", r.events.len());
        let rows = r
            .events
            .iter()
            .map(|e| {
                let removed = if e.nodes_removed.is_empty() { "-".to_owned() } else { e.nodes_removed.join(", ") };
                let launched = if e.nodes_launched.is_empty() {
                    "-".to_owned()
                } else {
                    e.nodes_launched
                        .iter()
                        .map(|l| format!("{} ({})", l.name, l.instance_type))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let kind = match (&e.command, e.kind) {
                    (Some(c), EventKind::DisruptionStarted) => format!("{:?} started", c.method),
                    (Some(c), EventKind::DisruptionFailed) => format!("{:?} rolled back", c.method),
                    (Some(c), _) => format!("{:?}", c.method),
                    (None, kind) => format!("{kind:?}"),
                };
                let detail = match &e.command {
                    Some(c) if e.kind == super::timeline_report::EventKind::Disruption => c.explanation.clone(),
                    _ => e.message.clone(),
                };
                let after = marked(e.price_per_hour_after, e.price_per_hour_after_estimated);
                vec![e.offset.clone(), kind, removed, launched, after, detail]
            })
            .collect();
        out.push_str(&table(&["TIME", "EVENT", "REMOVED", "LAUNCHED", "$/H AFTER", "DETAIL"], rows));
    }
    out.push('\n');
    let _ = writeln!(out, "After: {}", state(&s.after));
    if r.nodes.is_empty() {
        out.push_str("Nodes at the end: none\n");
    } else {
        let _ = writeln!(out, "Nodes at the end: {}", r.nodes.len());
        let rows = r
            .nodes
            .iter()
            .map(|n| {
                vec![
                    n.name.clone(),
                    text(&n.node_pool),
                    text(&n.instance_type),
                    text(&n.capacity_type),
                    n.price.map(|p| marked(p, n.price_estimated)).unwrap_or_else(|| "unknown".to_owned()),
                    compact(&n.pod_groups, MAX_GROUPS),
                    n.details.consolidatable_cell(),
                    n.verdict.clone(),
                ]
            })
            .collect();
        out.push_str(&table(
            &["NODE", "NODEPOOL", "INSTANCE TYPE", "CAPACITY", "$/H", "PODS", "CONSOLIDATABLE", "WHY IT STAYS"],
            rows,
        ));
        for n in &r.nodes {
            if let Some(line) = n.details.line() {
                let _ = writeln!(out, "  {}: {line}", n.name);
            }
        }
    }
    if !r.unschedulable.is_empty() {
        out.push('\n');
        let _ = writeln!(out, "Pending at the end: {}", s.after.pending_pods);
        let rows = r.unschedulable.iter().map(|u| vec![u.pods.len().to_string(), u.reason.clone()]).collect();
        out.push_str(&table(&["PODS", "REASON"], rows));
    }
    out.push('\n');
    let methods: Vec<String> = s.commands_by_method.iter().map(|(m, n)| format!("{m} {n}")).collect();
    let percent = if s.before.price_per_hour > 0.0 {
        format!(" ({:.1} %)", 100.0 * s.savings_per_hour.abs() / s.before.price_per_hour)
    } else {
        String::new()
    };
    let change = if s.savings_per_hour < 0.0 {
        format!("costs ${}/h more{percent}", price(-s.savings_per_hour))
    } else {
        format!("saves ${}/h{percent}", price(s.savings_per_hour))
    };
    let _ = writeln!(
        out,
        "Summary: {} disruption {}{}, {} launched, {} removed{}.\n\
         Cost: ${}/h before, ${}/h after: {change}.",
        s.commands,
        if s.commands == 1 { "command" } else { "commands" },
        if methods.is_empty() { String::new() } else { format!(" ({})", methods.join(", ")) },
        nodes(s.nodes_launched),
        nodes(s.nodes_removed),
        [
            (s.validation_failures, "rejected by validation"),
            (s.commands_rolled_back, "rolled back"),
            (s.commands_in_flight, "still in flight")
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!(", {n} {what}"))
        .collect::<String>(),
        price(s.before.price_per_hour),
        price(s.after.price_per_hour),
    );
    let _ = writeln!(
        out,
        "Churn over {}: {}; ${}/h on average.",
        r.duration,
        moved(s.commands, s.pods_moved),
        price(s.average_price_per_hour)
    );
    if let Some(b) = &s.baseline {
        let _ = writeln!(
            out,
            "Without {}: {}; ${}/h on average (the same run, for comparison).",
            b.without.join(" "),
            moved(b.commands, b.pods_moved),
            price(b.average_price_per_hour)
        );
    }
    out
}

/// `3 disruption commands moved 8 pods`.
fn moved(commands: usize, pods: usize) -> String {
    format!(
        "{commands} disruption {} moved {pods} {}",
        if commands == 1 { "command" } else { "commands" },
        if pods == 1 { "pod" } else { "pods" }
    )
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn nodes(n: usize) -> String {
    format!("{n} {}", if n == 1 { "node" } else { "nodes" })
}

fn state(s: &ClusterState) -> String {
    let unpriced = if s.unpriced_nodes > 0 { format!(", {} unpriced", s.unpriced_nodes) } else { String::new() };
    format!(
        "{}, ${}/h{}{unpriced}; {} pods bound, {} pending",
        nodes(s.nodes),
        price(s.price_per_hour),
        if s.price_estimated { " (estimated)" } else { "" },
        s.pods,
        s.pending_pods
    )
}

fn text(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(offset_seconds: u64, price_per_hour_after: f64) -> Event {
        Event {
            at: String::new(),
            offset: String::new(),
            offset_seconds,
            kind: EventKind::Step,
            message: String::new(),
            nodes_removed: Vec::new(),
            nodes_launched: Vec::new(),
            pods_placed: 0,
            unschedulable_pods: 0,
            price_per_hour_after,
            price_per_hour_after_estimated: false,
            decided_at: None,
            launched_at: None,
            initialized_at: None,
            command: None,
        }
    }

    #[test]
    fn the_average_weighs_each_price_by_how_long_it_lasted() {
        // $1/h for the first hour, $3/h for the second, $2/h for the last two: (1 + 3 + 2 + 2) / 4.
        let events = [event(0, 1.0), event(3600, 3.0), event(7200, 2.0)];
        assert_eq!(average_price_per_hour(9.0, &events, 4 * 3600), 2.0);
        // The price before the first event holds until it; events at the same instant weigh nothing.
        let events = [event(1800, 4.0), event(1800, 2.0)];
        assert_eq!(average_price_per_hour(1.0, &events, 3600), 1.5);
        // Events past the end are cut off; a run of no length is its last price; no event keeps the initial one.
        assert_eq!(average_price_per_hour(1.0, &[event(7200, 5.0)], 3600), 1.0);
        assert_eq!(average_price_per_hour(1.0, &[event(0, 5.0)], 0), 5.0);
        assert_eq!(average_price_per_hour(0.5, &[], 3600), 0.5);
    }
}
