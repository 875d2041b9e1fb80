//! Node repair as a voluntary disruption method (upstream v1.15, feature gate `NodeRepair`): the first method of
//! a pass. A node whose conditions match one of the provider's repair policies (the caller assesses them with
//! [`karpenter_api::repair::RepairPolicies::assess`] and hands the matches in [`RepairOptions::unhealthy`]) is
//! replaced, deleted first, or rebooted, within the NodePool's `Unhealthy` budget.
//!
//! * **Candidates**: managed, initialized nodes not already being deleted, whose match is eligible (the
//!   policy's toleration has passed). `karpenter.sh/do-not-disrupt`, PDBs and pods' do-not-disrupt do not keep a
//!   broken node (the drain still honours them until the policy's drain bound); `karpenter.sh/do-not-repair:
//!   "true"` on the node or its NodeClaim does. Repair ignores a pool's disruption-topology key and min-nodes
//!   floor: both are for voluntary changes, and a broken node helps neither.
//! * **Outer limit**: when more than 20 % (rounded up) of a pool's nodes match a policy, eligible or not, the
//!   pool's repair stops ([`Reason::RepairBlocked`]): something wider than one node is wrong.
//! * **Budget**: the `Unhealthy` allowance, in which only nodes being deleted count as disrupting
//!   ([`crate::budget::PoolCounts::deleting`]).
//! * **Order**: by `rank + age / τ − backoff(pool)`, highest first: `rank` is the dense rank of the matching
//!   policy's priority, `age` the time since the node became eligible, `τ` ([`RepairOptions::tier_wait`]) the
//!   wait that is worth one rank, and the backoff grows with the pool's failed repairs
//!   ([`RepairOptions::failures`]) so a pool whose replacements keep failing does not starve the others. Ties go
//!   to the lower disruption cost, then the node name.
//! * **Command**: one per pass. A `Reboot` policy gives a [`Decision::Reboot`]; otherwise the node's pods are
//!   simulated as for a single-node replace and the new NodeClaims they need become the replacements, launched
//!   before the node is deleted. Pods that would fit nowhere do not hold a broken node. When the pool has no
//!   room for a replacement (a static pool, or its `limits` cannot take one more node like this one) the node is
//!   deleted first and provisioning (or the static pool's replica count) brings the replacement
//!   ([`RepairDetail::terminate_first`]).

use std::collections::BTreeMap;
use std::time::Duration;

use karpenter_api::labels;
use karpenter_api::nodepool::DisruptionReason;
use karpenter_api::repair::{RepairAction, RepairMatch};
use karpenter_requirements::ResourceList;
use karpenter_scheduler::Decisions;
use karpenter_scheduler::simulation::SimulationView;

use super::{DisruptionMethod, PassState};
use crate::budget::Remaining;
use crate::candidate::{Candidate, node_set, repair_candidate};
use crate::command::{Command, Decision, Method, Reason, RepairDetail};
use crate::engine::Engine;
use crate::pods::is_reschedulable;
use crate::validation::failure::ValidationFailure;

/// Node repair's outer limit: the share of a pool's nodes that may be unhealthy for repair to act.
pub const UNHEALTHY_THRESHOLD_PERCENT: u32 = 20;
/// The default `τ`: ten minutes of waiting are worth one priority rank. Upstream leaves the value open.
pub const DEFAULT_TIER_WAIT: Duration = Duration::from_secs(10 * 60);
/// The default backoff per failed repair of a pool, in ranks. Upstream leaves the value open.
pub const DEFAULT_BACKOFF_PER_FAILURE: f64 = 1.0;

/// Node repair's inputs to a pass.
#[derive(Debug, Clone)]
pub struct RepairOptions {
    /// Node repair runs as a disruption method (gate `NodeRepair` on, legacy repair off): the pass computes the
    /// `Unhealthy` budgets and acts on [`Self::unhealthy`].
    pub enabled: bool,
    /// The nodes whose conditions match a repair policy (eligible or not yet), by node name. Empty: repair has
    /// nothing to do (the gate is off, or every node is healthy).
    pub unhealthy: BTreeMap<String, RepairMatch>,
    /// `τ`: how long a node must wait to gain one priority rank.
    pub tier_wait: Duration,
    /// Failed repair commands per NodePool (replacements that never initialized), recently: each costs the pool
    /// [`Self::backoff_per_failure`] ranks.
    pub failures: BTreeMap<String, u32>,
    /// Ranks one failure costs.
    pub backoff_per_failure: f64,
}

impl Default for RepairOptions {
    fn default() -> Self {
        Self {
            enabled: false,
            unhealthy: BTreeMap::new(),
            tier_wait: DEFAULT_TIER_WAIT,
            failures: BTreeMap::new(),
            backoff_per_failure: DEFAULT_BACKOFF_PER_FAILURE,
        }
    }
}

/// The outer limit for a pool of `nodes` nodes: `ceil(20 % × nodes)`.
pub fn unhealthy_threshold(nodes: u32) -> u32 {
    (nodes * UNHEALTHY_THRESHOLD_PERCENT).div_ceil(100)
}

/// A candidate's repair score at the pass's time (see the module docs).
pub fn score(m: &RepairMatch, now: chrono::DateTime<chrono::Utc>, options: &RepairOptions, pool: &str) -> f64 {
    let age = (now - m.eligible_at).num_milliseconds().max(0) as f64 / 1000.0;
    let tau = options.tier_wait.as_secs_f64().max(1.0);
    let backoff = f64::from(options.failures.get(pool).copied().unwrap_or(0)) * options.backoff_per_failure;
    f64::from(m.rank) + age / tau - backoff
}

/// Why a pool has no room for a replacement of `c` (so repair and drift delete first), or `None`.
pub(crate) fn no_room(engine: &Engine<'_>, c: &Candidate<'_>) -> Option<String> {
    let pool = c.pool.node_pool;
    if pool.is_static() {
        return Some(format!("NodePool {} is static: its replica count brings the replacement", c.pool_name));
    }
    let Ok(Some((_, remaining))) = karpenter_scheduler::remaining_limits(pool, engine.cluster.snapshot) else {
        return None;
    };
    over(&remaining, &c.node.capacity).map(|what| format!("NodePool {} is at its limits ({what})", c.pool_name))
}

/// The first limit that `capacity` (one more node) would exceed, described.
fn over(remaining: &ResourceList, capacity: &ResourceList) -> Option<String> {
    for (name, left) in remaining.iter() {
        if name == karpenter_api::nodepool::NODES_LIMIT {
            if left.value().is_some_and(|v| v < 1) {
                return Some("nodes".to_owned());
            }
        } else if let Some(need) = capacity.get(name)
            && need > left
        {
            return Some(format!("{name}: {left} left, the node has {need}"));
        }
    }
    None
}

/// The matched condition, for commands and messages.
fn detail(m: &RepairMatch, terminate_first: bool) -> RepairDetail {
    RepairDetail {
        condition: m.condition_type.clone(),
        status: m.condition_status.as_str().to_owned(),
        condition_reason: m.reason.clone(),
        termination_grace_period_seconds: m.termination_grace_period.map(|d| d.as_secs()),
        terminate_first,
    }
}

fn describe(m: &RepairMatch) -> String {
    let reason = m.reason.as_deref().map(|r| format!("/{r}")).unwrap_or_default();
    format!(
        "unhealthy: {}={}{reason} since {}",
        m.condition_type,
        m.condition_status.as_str(),
        karpenter_api::time::rfc3339(m.eligible_at)
    )
}

/// The node's pods simulated as a single-node replace; unlike drift, pods that would fit nowhere do not hold
/// the node back (it is broken: keeping it helps none of them).
fn simulate(engine: &Engine<'_>, c: &Candidate<'_>) -> Decisions {
    let removed = node_set(&[c]);
    let view = SimulationView { removed: &removed, pods: c.reschedulable.clone(), ..Default::default() };
    engine.sim.simulate(&view)
}

/// The repair command for one candidate.
fn command(engine: &Engine<'_>, c: &Candidate<'_>, m: &RepairMatch) -> Command {
    let what = describe(m);
    if m.action == RepairAction::Reboot {
        let mut cmd = Engine::command(Method::Repair, &[c], Vec::new(), &what);
        cmd.decision = Decision::Reboot;
        cmd.explanation = format!(
            "reboot {} ({}): {what}",
            c.node.name,
            c.node.labels.get(labels::INSTANCE_TYPE).map_or("?", String::as_str)
        );
        cmd.savings_per_hour = 0.0;
        cmd.repair = Some(detail(m, false));
        return cmd;
    }
    if let Some(why) = no_room(engine, c) {
        let mut cmd = Engine::command(Method::Repair, &[c], Vec::new(), &format!("{what}; {why}, so it goes first"));
        cmd.savings_per_hour = 0.0;
        cmd.repair = Some(detail(m, true));
        return cmd;
    }
    let d = simulate(engine, c);
    let stranded = d.unschedulable.iter().filter(|u| c.reschedulable.iter().any(|p| p.key() == u.pod)).count();
    let what = if stranded > 0 { format!("{what}; {stranded} pod(s) fit nowhere and wait pending") } else { what };
    let mut cmd = Engine::command(Method::Repair, &[c], d.new_node_claims, &what);
    cmd.savings_per_hour = 0.0;
    cmd.repair = Some(detail(m, false));
    cmd
}

pub(crate) struct Repair;

impl DisruptionMethod for Repair {
    fn method(&self) -> Method {
        Method::Repair
    }

    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Unhealthy
    }

    /// Neither graceful nor eventual: pod blocks never keep a broken node, its drain is bounded by the repair
    /// policy; its command starts at once.
    fn is_graceful(&self) -> bool {
        false
    }

    /// Upstream's node repair is a controller of its own.
    fn outside_method_loop(&self) -> bool {
        true
    }

    /// Considers the unhealthy nodes, candidates of the other methods or not (a do-not-disrupt node is still
    /// repaired). Its one simulation serves the command, so it runs whether the pass takes the command or not.
    fn evaluate<'a>(&self, pass: &mut PassState<'_, 'a>, _closed: bool) -> Vec<Command> {
        repair(pass.engine, &mut |node, m, r| pass.results.record(node, m, r)).into_iter().collect()
    }

    fn still_candidate(&self, _engine: &Engine<'_>, _c: &Candidate<'_>, _command: &Command) -> Result<(), Reason> {
        Ok(())
    }

    /// Repair commands start without the re-check ([`crate::validation::next_step`]); asked anyway, they stand.
    fn recheck(
        &self,
        _engine: &Engine<'_>,
        _kept: &[&Candidate<'_>],
        command: &Command,
    ) -> Result<Command, ValidationFailure> {
        Ok(command.clone())
    }
}

/// The repair method: one command for the best-scored eligible candidate with budget, and a result for every
/// unhealthy node.
fn repair<'a>(engine: &Engine<'a>, record: &mut impl FnMut(&str, Method, Result<String, Reason>)) -> Option<Command> {
    let cluster = &engine.cluster;
    let options = &cluster.options.repair;
    if !options.enabled || options.unhealthy.is_empty() {
        return None;
    }
    let now = cluster.now;
    // The outer limit: per pool, its nodes and how many of them match a policy.
    let mut per_pool: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for n in &cluster.snapshot.nodes {
        let (Some(pool), Some(_)) = (n.node_pool.as_deref(), n.node_claim.as_deref()) else { continue };
        let e = per_pool.entry(pool).or_default();
        e.0 += 1;
        if options.unhealthy.contains_key(&n.name) {
            e.1 += 1;
        }
    }
    let mut eligible: Vec<(f64, Candidate<'a>, &RepairMatch)> = Vec::new();
    for n in &cluster.snapshot.nodes {
        let Some(m) = options.unhealthy.get(&n.name) else { continue };
        if !m.is_eligible(now) {
            continue;
        }
        let c = match repair_candidate(cluster, n) {
            // Every reschedulable pod moves, do-not-disrupt and PDBs notwithstanding: the drain honours them
            // until the policy's bound, then the node goes.
            Ok(mut c) => {
                c.reschedulable = c.pods.iter().copied().filter(|p| is_reschedulable(p)).collect();
                c
            }
            Err(r) => {
                record(&n.name, Method::Repair, Err(r));
                continue;
            }
        };
        let (nodes, unhealthy) = per_pool.get(c.pool_name).copied().unwrap_or_default();
        let threshold = unhealthy_threshold(nodes);
        if unhealthy > threshold {
            let node_pool = c.pool_name.to_owned();
            record(&n.name, Method::Repair, Err(Reason::RepairBlocked { node_pool, unhealthy, nodes, threshold }));
            continue;
        }
        eligible.push((score(m, now, options, c.pool_name), c, m));
    }
    eligible.sort_by(|(sa, a, _), (sb, b, _)| {
        sb.total_cmp(sa)
            .then(a.disruption_cost.total_cmp(&b.disruption_cost))
            .then_with(|| a.node.name.cmp(&b.node.name))
    });
    let remaining = Remaining::new(&engine.budgets, Method::Repair.reason());
    let mut chosen = None;
    for (_, c, m) in &eligible {
        if let Some(r) = engine.budget_block(c, Method::Repair, &remaining) {
            record(&c.node.name, Method::Repair, Err(r));
            continue;
        }
        if chosen.is_some() {
            record(&c.node.name, Method::Repair, Ok(describe(m)));
            continue;
        }
        let cmd = command(engine, c, m);
        record(&c.node.name, Method::Repair, Ok(cmd.explanation.clone()));
        chosen = Some(cmd);
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use karpenter_api::ConditionStatus;

    fn at(minute: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_800_000_000 + minute * 60, 0).unwrap()
    }

    fn matched(rank: u32, eligible_minute: i64) -> RepairMatch {
        RepairMatch {
            condition_type: "Ready".into(),
            condition_status: ConditionStatus::False,
            reason: None,
            eligible_at: at(eligible_minute),
            toleration: Duration::from_secs(60),
            priority: 0,
            rank,
            action: RepairAction::Replace,
            termination_grace_period: None,
        }
    }

    #[test]
    fn the_outer_limit_is_a_fifth_rounded_up() {
        assert_eq!([1, 5, 6, 10, 11, 100].map(unhealthy_threshold), [1, 1, 2, 2, 3, 20]);
        assert_eq!(unhealthy_threshold(0), 0);
    }

    #[test]
    fn a_rank_is_worth_one_tier_of_waiting_and_failures_cost_ranks() {
        let options = RepairOptions::default();
        let now = at(100);
        // Eligible 10 minutes ago at rank 0 scores as a fresh rank-1 node.
        assert!(
            (score(&matched(0, 90), now, &options, "p") - score(&matched(1, 100), now, &options, "p")).abs() < 1e-9
        );
        assert!(score(&matched(0, 50), now, &options, "p") > score(&matched(1, 100), now, &options, "p"));
        let failing = RepairOptions { failures: BTreeMap::from([("p".to_owned(), 2)]), ..RepairOptions::default() };
        assert!(
            (score(&matched(2, 100), now, &failing, "p") - score(&matched(0, 100), now, &options, "q")).abs() < 1e-9
        );
        // Not yet eligible counts no age.
        assert_eq!(score(&matched(0, 200), now, &options, "p"), 0.0);
    }
}
