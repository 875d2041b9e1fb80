//! Disruption budgets per NodePool and reason.
//!
//! `nodes` counts the pool's managed, initialized nodes whose NodeClaim is not `InstanceTerminating`;
//! `disrupting` those of them that are not Ready or are being deleted / disrupted. Each active budget applying
//! to the reason allows `ceil(pct × nodes)` or its integer (an unparsable budget allows 0, an inactive one is
//! ignored), the allowance is `max(min(...) − disrupting, 0)`. Schedules are evaluated in the budget's
//! `timeZone` (UTC when absent) with [`karpenter_api::Budget::is_active`], so daylight-saving changes follow
//! the wall clock.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use karpenter_api::NodePool;
use karpenter_api::nodeclaim::conditions;
use karpenter_api::nodepool::DisruptionReason;
use karpenter_scheduler::ClusterSnapshot;

use crate::command::BudgetStatus;

/// The reasons budgets distinguish. Node repair's `Unhealthy` is added when repair runs
/// ([`crate::repair::RepairOptions::enabled`]).
pub const REASONS: [DisruptionReason; 3] =
    [DisruptionReason::Empty, DisruptionReason::Drifted, DisruptionReason::Underutilized];

/// One pool's allowance for one reason, with the budget that limits it.
#[derive(Debug, Clone, PartialEq)]
pub struct Allowance {
    /// Nodes counted.
    pub nodes: u32,
    /// Nodes already disrupting.
    pub disrupting: u32,
    /// Minimum over active budgets (before subtracting `disrupting`).
    pub limit: u32,
    /// Nodes that may start being disrupted.
    pub allowed: u32,
    /// Which budget set the limit (for explanations).
    pub limiting: String,
}

/// Node counts of a pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Managed, initialized nodes whose NodeClaim is not `InstanceTerminating`.
    pub nodes: u32,
    /// Of those, not Ready or being deleted / disrupted.
    pub disrupting: u32,
    /// Of those, being deleted / disrupted. Node repair's `Unhealthy` budget counts only these: the not-Ready
    /// nodes are the ones it is to repair, and counting them would let broken nodes use up their own budget.
    pub deleting: u32,
}

/// The node counts of `pool`.
pub fn pool_counts(snapshot: &ClusterSnapshot, pool: &str, not_ready: &BTreeSet<String>) -> PoolCounts {
    let claims: BTreeMap<&str, _> = snapshot.node_claims.iter().map(|c| (c.name.as_str(), c)).collect();
    let mut counts = PoolCounts::default();
    for n in snapshot.nodes.iter().filter(|n| n.node_pool.as_deref() == Some(pool)) {
        let Some(claim) = n.node_claim.as_deref().and_then(|c| claims.get(c)) else { continue };
        if !n.initialized || claim.is_true(conditions::INSTANCE_TERMINATING) {
            continue;
        }
        counts.nodes += 1;
        let deleting = n.marked_for_deletion;
        if deleting {
            counts.deleting += 1;
        }
        if deleting || not_ready.contains(&n.name) {
            counts.disrupting += 1;
        }
    }
    counts
}

/// The allowance of `pool` for `reason` at `now`, given its node counts.
pub fn allowance(
    pool: &NodePool,
    reason: DisruptionReason,
    now: DateTime<Utc>,
    nodes: u32,
    disrupting: u32,
) -> Allowance {
    let mut limit = u32::MAX;
    let mut limiting = "no active budget".to_owned();
    for (i, b) in pool.spec.disruption.budgets.iter().enumerate() {
        if !b.applies_to(reason) {
            continue;
        }
        let (value, why) = match b.is_active(now) {
            Ok(true) => {
                let v = b.allowed_disruptions(nodes);
                let when = match (&b.schedule, &b.time_zone) {
                    (Some(s), Some(tz)) => format!(", schedule {s:?} in {tz} active"),
                    (Some(s), None) => format!(", schedule {s:?} active"),
                    _ => String::new(),
                };
                (v, format!("budget {i} (nodes {}{when}) allows {v} of {nodes}", b.nodes))
            }
            Ok(false) => continue,
            Err(e) => (0, format!("budget {i} cannot be evaluated: {e}")),
        };
        if value < limit {
            limit = value;
            limiting = why;
        }
    }
    let allowed = limit.saturating_sub(disrupting);
    if disrupting > 0 {
        limiting = format!("{limiting}; {disrupting} already disrupting");
    }
    Allowance { nodes, disrupting, limit, allowed, limiting }
}

/// Allowances for every pool of `pools` and every reason.
#[derive(Debug, Clone, Default)]
pub struct Budgets {
    by_pool: BTreeMap<(String, DisruptionReason), Allowance>,
}

impl Budgets {
    /// Computes every pool's allowances; `repair`: node repair runs, so `Unhealthy` is computed too.
    pub fn new<'p>(
        snapshot: &ClusterSnapshot,
        pools: impl IntoIterator<Item = &'p NodePool>,
        now: DateTime<Utc>,
        not_ready: &BTreeSet<String>,
        repair: bool,
    ) -> Self {
        let unhealthy = repair.then_some(DisruptionReason::Unhealthy);
        let mut by_pool = BTreeMap::new();
        for p in pools {
            let name = p.metadata.name.clone().unwrap_or_default();
            let counts = pool_counts(snapshot, &name, not_ready);
            for r in REASONS.into_iter().chain(unhealthy) {
                let disrupting = if r == DisruptionReason::Unhealthy { counts.deleting } else { counts.disrupting };
                by_pool.insert((name.clone(), r), allowance(p, r, now, counts.nodes, disrupting));
            }
        }
        Budgets { by_pool }
    }

    /// The allowance of `pool` for `reason` (`None` for an unknown pool).
    pub fn get(&self, pool: &str, reason: DisruptionReason) -> Option<&Allowance> {
        self.by_pool.get(&(pool.to_owned(), reason))
    }

    /// Nodes that may start being disrupted (0 for an unknown pool).
    pub fn allowed(&self, pool: &str, reason: DisruptionReason) -> u32 {
        self.get(pool, reason).map_or(0, |a| a.allowed)
    }

    /// The report form.
    pub fn statuses(&self) -> Vec<BudgetStatus> {
        self.by_pool
            .iter()
            .map(|((pool, reason), a)| BudgetStatus {
                node_pool: pool.clone(),
                reason: *reason,
                nodes: a.nodes,
                disrupting: a.disrupting,
                allowed: a.allowed,
            })
            .collect()
    }
}

/// A mutable copy of the allowances that methods decrement per candidate they include.
#[derive(Debug, Clone, Default)]
pub struct Remaining {
    left: BTreeMap<String, u32>,
}

impl Remaining {
    /// The allowances of `reason` for every pool.
    pub fn new(budgets: &Budgets, reason: DisruptionReason) -> Self {
        Remaining {
            left: budgets
                .by_pool
                .iter()
                .filter(|((_, r), _)| *r == reason)
                .map(|((p, _), a)| (p.clone(), a.allowed))
                .collect(),
        }
    }

    /// What is left for `pool`.
    pub fn left(&self, pool: &str) -> u32 {
        self.left.get(pool).copied().unwrap_or(0)
    }

    /// Takes one node from `pool`'s allowance; `false` when none is left.
    pub fn take(&mut self, pool: &str) -> bool {
        match self.left.get_mut(pool) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::Budget;
    use karpenter_testing::{NodePoolOptions, node_pool};

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).expect("time").with_timezone(&Utc)
    }

    fn pool(budgets: Vec<Budget>) -> NodePool {
        let mut p = node_pool(NodePoolOptions { name: Some("p".into()), ..Default::default() });
        p.spec.disruption.budgets = budgets;
        p
    }

    fn budget(nodes: &str) -> Budget {
        Budget { nodes: nodes.into(), ..Default::default() }
    }

    #[test]
    fn percentages_round_up_and_minimum_wins() {
        let now = at("2026-01-01T00:00:00Z");
        let a = allowance(&pool(vec![budget("10%")]), DisruptionReason::Empty, now, 11, 0);
        assert_eq!(a.allowed, 2, "ceil(1.1)");
        let a = allowance(&pool(vec![budget("10%"), budget("1")]), DisruptionReason::Empty, now, 50, 0);
        assert_eq!(a.allowed, 1);
        assert!(a.limiting.contains("budget 1"), "{}", a.limiting);
        let a = allowance(&pool(vec![budget("3")]), DisruptionReason::Empty, now, 50, 2);
        assert_eq!(a.allowed, 1, "nodes already disrupting consume the budget");
        let a = allowance(&pool(vec![budget("1")]), DisruptionReason::Empty, now, 50, 4);
        assert_eq!(a.allowed, 0, "never negative");
    }

    #[test]
    fn reasons_and_bad_budgets() {
        let now = at("2026-01-01T00:00:00Z");
        let drifted_only = Budget { reasons: Some(vec![DisruptionReason::Drifted]), ..budget("0") };
        let p = pool(vec![drifted_only, budget("5")]);
        assert_eq!(allowance(&p, DisruptionReason::Drifted, now, 10, 0).allowed, 0);
        assert_eq!(allowance(&p, DisruptionReason::Empty, now, 10, 0).allowed, 5);
        let p = pool(vec![budget("lots")]);
        assert_eq!(allowance(&p, DisruptionReason::Empty, now, 10, 0).allowed, 0, "unparsable fails closed");
        // A v1.15 budget for node repair only leaves the other reasons to the rest of the budgets.
        let unhealthy_only = Budget { reasons: Some(vec![DisruptionReason::Unhealthy]), ..budget("0") };
        let p = pool(vec![unhealthy_only, budget("3")]);
        assert_eq!(allowance(&p, DisruptionReason::Unhealthy, now, 10, 0).allowed, 0);
        for reason in [DisruptionReason::Empty, DisruptionReason::Drifted, DisruptionReason::Underutilized] {
            assert_eq!(allowance(&p, reason, now, 10, 0).allowed, 3, "{reason:?}");
        }
    }

    #[test]
    fn schedules_with_time_zone_follow_daylight_saving() {
        // 0 nodes from 09:00 for 8h, Berlin wall clock: 08:00 UTC in summer, 09:00 UTC in winter.
        let b = Budget {
            schedule: Some("0 9 * * *".into()),
            duration: Some("8h".parse().expect("duration")),
            time_zone: Some("Europe/Berlin".into()),
            ..budget("0")
        };
        let p = pool(vec![b, budget("100%")]);
        // 07:30 UTC is 09:30 in Berlin in summer (CEST) but 08:30 in winter (CET).
        let summer_in = at("2026-07-01T07:30:00Z");
        let winter_out = at("2026-01-15T07:30:00Z");
        assert_eq!(allowance(&p, DisruptionReason::Underutilized, summer_in, 4, 0).allowed, 0);
        assert_eq!(allowance(&p, DisruptionReason::Underutilized, winter_out, 4, 0).allowed, 4);
        assert_eq!(allowance(&p, DisruptionReason::Underutilized, at("2026-01-15T08:00:00Z"), 4, 0).allowed, 0);
    }
}
