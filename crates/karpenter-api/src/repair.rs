//! Node repair policies: the node conditions a cloud provider declares as "broken", and how a Node's conditions
//! are matched against them (upstream v1.15's `RepairPolicy`).
//!
//! A provider returns its policies from `CloudProvider::repair_policies`; [`RepairPolicies::new`] validates the
//! whole set once (a set that fails validation means node repair is not started, as upstream), and
//! [`RepairPolicies::assess`] turns one Node's conditions into at most one [`RepairMatch`]: which policy decides,
//! when the node became eligible, the action and the drain bound. Nothing is remembered between calls: after a
//! restart the same conditions give the same answer, because eligibility is computed from each condition's
//! `lastTransitionTime`.
//!
//! Overlapping policies (a reason-specific one and its fallback, or two regexes that both match) are each
//! evaluated, and one wins by a fixed order: the highest `priority`, then a policy with a `reason_regex` over one
//! without (the specific rule was written for this fault), then the earliest eligibility, then the order the
//! provider listed them in. That order is this project's choice; upstream only says the merge is deterministic.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::NodeCondition;
use regex::Regex;

use crate::condition::ConditionStatus;

/// The highest `priority` a policy may have.
pub const MAX_PRIORITY: u8 = 100;

/// What repair does to a node whose condition matched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RepairAction {
    /// Launch a replacement, then delete the node (or delete first when its NodePool has no room).
    #[default]
    Replace,
    /// Reboot the instance in place (`CloudProvider::reboot`); a provider that cannot reboot falls back to
    /// replace.
    Reboot,
}

impl RepairAction {
    /// `Replace` or `Reboot`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replace => "Replace",
            Self::Reboot => "Reboot",
        }
    }
}

impl fmt::Display for RepairAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node condition that means "broken": a Node whose `condition_type` has had `condition_status` (and, with
/// `reason_regex`, a matching `reason`) for `toleration_duration` is repaired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairPolicy {
    /// Node condition type, e.g. `Ready`.
    pub condition_type: String,
    /// The status that means unhealthy.
    pub condition_status: ConditionStatus,
    /// How long the condition is tolerated before repair.
    pub toleration_duration: Duration,
    /// The drain bound of a repaired node: `Some(0)` drains forcefully (the deadline is the deletion time),
    /// `Some(d)` gives pods at most `d` (or the NodeClaim's own terminationGracePeriod when shorter), `None` keeps
    /// the NodeClaim's terminationGracePeriod.
    pub termination_grace_period: Option<Duration>,
    /// Ordering weight, 0 to [`MAX_PRIORITY`]: nodes matching a higher priority are repaired first. Only the
    /// relative order matters.
    pub priority: u8,
    /// A regular expression (RE2 syntax, unanchored) the condition's `reason` must also match. A policy with one
    /// needs a fallback: another policy with the same type and status and no regex.
    pub reason_regex: Option<String>,
    /// What repair does.
    pub action: RepairAction,
}

impl RepairPolicy {
    /// A replace policy with upstream v1.14's three fields; the rest at their defaults (no drain bound, priority
    /// 0, no reason regex).
    pub fn replace(condition_type: &str, condition_status: ConditionStatus, toleration_duration: Duration) -> Self {
        Self {
            condition_type: condition_type.to_owned(),
            condition_status,
            toleration_duration,
            termination_grace_period: None,
            priority: 0,
            reason_regex: None,
            action: RepairAction::Replace,
        }
    }

    /// `Ready=False`, `Ready=Unknown/NodeStatusUnknown`, ...: how the policy reads in messages.
    pub fn describe(&self) -> String {
        match &self.reason_regex {
            Some(re) => format!("{}={} (reason ~ /{re}/)", self.condition_type, self.condition_status.as_str()),
            None => format!("{}={}", self.condition_type, self.condition_status.as_str()),
        }
    }
}

/// Why a provider's policy set was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepairPolicyError {
    /// A policy without a condition type.
    #[error("repair policy {index}: condition type is empty")]
    EmptyConditionType {
        /// The policy's position in the provider's list.
        index: usize,
    },
    /// A priority above [`MAX_PRIORITY`].
    #[error("repair policy {index} ({policy}): priority {priority} is above {MAX_PRIORITY}")]
    Priority {
        /// The policy's position in the provider's list.
        index: usize,
        /// The policy as [`RepairPolicy::describe`] writes it.
        policy: String,
        /// The priority given.
        priority: u8,
    },
    /// A reason regex that does not compile.
    #[error("repair policy {index} ({policy}): reason regex does not compile: {error}")]
    Regex {
        /// The policy's position in the provider's list.
        index: usize,
        /// The policy as [`RepairPolicy::describe`] writes it.
        policy: String,
        /// The regex compiler's message.
        error: String,
    },
    /// A reason regex with no condition-level fallback.
    #[error(
        "repair policy {index} ({policy}): a policy with a reason regex needs a fallback policy for {condition_type}={status} without one"
    )]
    NoFallback {
        /// The policy's position in the provider's list.
        index: usize,
        /// The policy as [`RepairPolicy::describe`] writes it.
        policy: String,
        /// The condition type that has no fallback policy.
        condition_type: String,
        /// The condition status that has no fallback policy.
        status: &'static str,
    },
}

/// A Node's verdict under the policies: the policy that decides and what follows from it.
#[derive(Clone, Debug, PartialEq)]
pub struct RepairMatch {
    /// The condition type that matched (the `condition` label of `karpenter_nodeclaims_unhealthy_disrupted_total`).
    pub condition_type: String,
    /// Its status.
    pub condition_status: ConditionStatus,
    /// The condition's reason, if any.
    pub reason: Option<String>,
    /// `lastTransitionTime + toleration_duration`: from then on the node may be repaired. A condition without a
    /// transition time counts from `now` (so it waits a full toleration).
    pub eligible_at: DateTime<Utc>,
    /// The winning policy's toleration (how long the condition must hold before a repair).
    pub toleration: Duration,
    /// The winning policy's priority.
    pub priority: u8,
    /// Its dense rank among the set's priorities (0 for the lowest): repair's ordering adds one per rank.
    pub rank: u32,
    /// The winning policy's action.
    pub action: RepairAction,
    /// The winning policy's drain bound.
    pub termination_grace_period: Option<Duration>,
}

impl RepairMatch {
    /// Whether the toleration has passed at `now`.
    pub fn is_eligible(&self, now: DateTime<Utc>) -> bool {
        now >= self.eligible_at
    }
}

/// A validated set of repair policies.
#[derive(Clone, Debug, Default)]
pub struct RepairPolicies {
    policies: Vec<(RepairPolicy, Option<Regex>)>,
}

impl RepairPolicies {
    /// Validates a provider's set: non-empty condition types, priorities within 0..=100, regexes that compile,
    /// each with a fallback policy.
    pub fn new(policies: Vec<RepairPolicy>) -> Result<Self, RepairPolicyError> {
        let mut compiled = Vec::with_capacity(policies.len());
        for (index, p) in policies.iter().enumerate() {
            if p.condition_type.is_empty() {
                return Err(RepairPolicyError::EmptyConditionType { index });
            }
            if p.priority > MAX_PRIORITY {
                return Err(RepairPolicyError::Priority { index, policy: p.describe(), priority: p.priority });
            }
            let regex = match &p.reason_regex {
                None => None,
                Some(text) => {
                    let re = Regex::new(text).map_err(|e| RepairPolicyError::Regex {
                        index,
                        policy: p.describe(),
                        error: e.to_string().lines().last().unwrap_or_default().trim().to_owned(),
                    })?;
                    let fallback = policies.iter().any(|q| {
                        q.reason_regex.is_none()
                            && q.condition_type == p.condition_type
                            && q.condition_status == p.condition_status
                    });
                    if !fallback {
                        return Err(RepairPolicyError::NoFallback {
                            index,
                            policy: p.describe(),
                            condition_type: p.condition_type.clone(),
                            status: p.condition_status.as_str(),
                        });
                    }
                    Some(re)
                }
            };
            compiled.push((p.clone(), regex));
        }
        Ok(Self { policies: compiled })
    }

    /// Whether there are no policies (repair has nothing to do).
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The policies, in the provider's order.
    pub fn iter(&self) -> impl Iterator<Item = &RepairPolicy> {
        self.policies.iter().map(|(p, _)| p)
    }

    /// The dense rank of `priority` among the set's priorities: 0 for the lowest, rising by one per distinct
    /// priority below it.
    pub fn rank(&self, priority: u8) -> u32 {
        let mut below: Vec<u8> = self.policies.iter().map(|(p, _)| p.priority).filter(|p| *p < priority).collect();
        below.sort_unstable();
        below.dedup();
        below.len() as u32
    }

    /// One Node's conditions under the policies: `None` when no condition matches (whether or not its toleration
    /// has passed: see [`RepairMatch::is_eligible`]).
    pub fn assess(&self, conditions: &[NodeCondition], now: DateTime<Utc>) -> Option<RepairMatch> {
        let mut best: Option<(RepairMatch, bool, usize)> = None;
        for (index, (p, regex)) in self.policies.iter().enumerate() {
            let Some(c) = conditions.iter().find(|c| c.type_ == p.condition_type) else { continue };
            if c.status != p.condition_status.as_str() {
                continue;
            }
            if let Some(re) = regex
                && !re.is_match(c.reason.as_deref().unwrap_or_default())
            {
                continue;
            }
            let since = c.last_transition_time.as_ref().and_then(crate::time::from_k8s).unwrap_or(now);
            let toleration = crate::time::chrono_duration(p.toleration_duration);
            let m = RepairMatch {
                condition_type: p.condition_type.clone(),
                condition_status: p.condition_status,
                reason: c.reason.clone(),
                eligible_at: since.checked_add_signed(toleration).unwrap_or(DateTime::<Utc>::MAX_UTC),
                toleration: p.toleration_duration,
                priority: p.priority,
                rank: self.rank(p.priority),
                action: p.action,
                termination_grace_period: p.termination_grace_period,
            };
            let specific = regex.is_some();
            let better = match &best {
                None => true,
                Some((b, b_specific, _)) => {
                    (m.priority, specific, std::cmp::Reverse(m.eligible_at))
                        > (b.priority, *b_specific, std::cmp::Reverse(b.eligible_at))
                }
            };
            if better {
                best = Some((m, specific, index));
            }
        }
        best.map(|(m, _, _)| m)
    }
}

/// The drain bound of a repaired NodeClaim: how long its pods get from the deletion on, or `None` for no bound.
/// `policy` is the matching policy's `termination_grace_period`, `claim` the NodeClaim's own.
pub fn drain_bound(policy: Option<Duration>, claim: Option<Duration>) -> Option<Duration> {
    match (policy, claim) {
        (None, claim) => claim,
        (Some(p), None) => Some(p),
        (Some(p), Some(c)) => Some(p.min(c)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn at(minute: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_800_000_000 + minute * 60, 0).unwrap()
    }

    fn cond(type_: &str, status: &str, reason: Option<&str>, since_minute: i64) -> NodeCondition {
        NodeCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.map(Into::into),
            last_transition_time: Some(
                serde_json::from_value(serde_json::json!(crate::time::rfc3339(at(since_minute)))).unwrap(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_condition_matches_by_type_and_status_and_is_eligible_after_its_toleration() {
        let set = RepairPolicies::new(vec![RepairPolicy::replace("Ready", ConditionStatus::False, 30 * MIN)]).unwrap();
        let m = set.assess(&[cond("Ready", "False", None, 0)], at(10)).unwrap();
        assert_eq!(m.eligible_at, at(30));
        assert!(!m.is_eligible(at(29)));
        assert!(m.is_eligible(at(30)));
        assert_eq!(set.assess(&[cond("Ready", "True", None, 0)], at(40)), None);
        assert_eq!(set.assess(&[cond("DiskPressure", "False", None, 0)], at(40)), None);
    }

    #[test]
    fn a_reason_regex_narrows_the_match_and_wins_over_its_fallback() {
        let mut specific = RepairPolicy::replace("AcceleratedHardwareReady", ConditionStatus::False, MIN);
        specific.reason_regex = Some("^Xid(79|48)$".into());
        specific.action = RepairAction::Reboot;
        specific.termination_grace_period = Some(Duration::ZERO);
        let fallback = RepairPolicy::replace("AcceleratedHardwareReady", ConditionStatus::False, 10 * MIN);
        let set = RepairPolicies::new(vec![fallback, specific]).unwrap();
        let xid = set.assess(&[cond("AcceleratedHardwareReady", "False", Some("Xid79"), 0)], at(0)).unwrap();
        assert_eq!(
            (xid.action, xid.eligible_at, xid.termination_grace_period),
            (RepairAction::Reboot, at(1), Some(Duration::ZERO))
        );
        let other = set.assess(&[cond("AcceleratedHardwareReady", "False", Some("Xid13"), 0)], at(0)).unwrap();
        assert_eq!((other.action, other.eligible_at), (RepairAction::Replace, at(10)));
    }

    #[test]
    fn the_higher_priority_decides_and_then_the_earlier_eligibility() {
        let mut kernel = RepairPolicy::replace("KernelReady", ConditionStatus::False, 30 * MIN);
        kernel.priority = 80;
        let ready = RepairPolicy::replace("Ready", ConditionStatus::False, 5 * MIN);
        let set = RepairPolicies::new(vec![ready.clone(), kernel]).unwrap();
        let both = [cond("Ready", "False", None, 0), cond("KernelReady", "False", None, 0)];
        assert_eq!(set.assess(&both, at(0)).unwrap().condition_type, "KernelReady");
        let mut ready_slow = ready.clone();
        ready_slow.toleration_duration = 60 * MIN;
        ready_slow.condition_type = "StorageReady".into();
        let set = RepairPolicies::new(vec![ready_slow, ready]).unwrap();
        let both = [cond("Ready", "False", None, 0), cond("StorageReady", "False", None, 0)];
        assert_eq!(set.assess(&both, at(0)).unwrap().condition_type, "Ready");
        assert_eq!(set.rank(0), 0);
    }

    #[test]
    fn ranks_are_dense() {
        let mut a = RepairPolicy::replace("A", ConditionStatus::False, MIN);
        a.priority = 90;
        let mut b = RepairPolicy::replace("B", ConditionStatus::False, MIN);
        b.priority = 10;
        let c = RepairPolicy::replace("C", ConditionStatus::False, MIN);
        let set = RepairPolicies::new(vec![a, b.clone(), b, c]).unwrap();
        assert_eq!((set.rank(0), set.rank(10), set.rank(90)), (0, 1, 2));
    }

    #[test]
    fn bad_sets_are_refused_with_the_policy_named() {
        let mut no_fallback = RepairPolicy::replace("Ready", ConditionStatus::False, MIN);
        no_fallback.reason_regex = Some("Kubelet.*".into());
        let err = RepairPolicies::new(vec![no_fallback.clone()]).unwrap_err();
        assert!(err.to_string().contains("needs a fallback policy for Ready=False"), "{err}");
        let mut bad = no_fallback.clone();
        bad.reason_regex = Some("(unclosed".into());
        let err =
            RepairPolicies::new(vec![bad, RepairPolicy::replace("Ready", ConditionStatus::False, MIN)]).unwrap_err();
        assert!(matches!(err, RepairPolicyError::Regex { index: 0, .. }), "{err}");
        let mut high = RepairPolicy::replace("Ready", ConditionStatus::False, MIN);
        high.priority = 101;
        assert!(RepairPolicies::new(vec![high]).unwrap_err().to_string().contains("priority 101 is above 100"));
        let empty = RepairPolicy::replace("", ConditionStatus::False, MIN);
        assert_eq!(RepairPolicies::new(vec![empty]).unwrap_err(), RepairPolicyError::EmptyConditionType { index: 0 });
    }

    #[test]
    fn the_drain_bound_is_the_shorter_of_the_policy_and_the_claim() {
        let h = Some(Duration::from_secs(3600));
        let five = Some(5 * MIN);
        assert_eq!(drain_bound(Some(Duration::ZERO), h), Some(Duration::ZERO));
        assert_eq!(drain_bound(five, h), five);
        assert_eq!(drain_bound(h, five), five);
        assert_eq!(drain_bound(None, h), h);
        assert_eq!(drain_bound(five, None), five);
        assert_eq!(drain_bound(None, None), None);
    }
}
