//! Status conditions, shaped like `metav1.Condition` so `kubectl wait --for=condition=Ready` works.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One status condition.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type in CamelCase, e.g. `Ready`, `Launched`, `Drifted`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// Generation of the object the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// RFC 3339 time the status last changed.
    pub last_transition_time: String,
    /// CamelCase reason for the last transition.
    #[serde(default)]
    pub reason: String,
    /// Human-readable detail.
    #[serde(default)]
    pub message: String,
}

/// A condition's status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds (`"True"`).
    True,
    /// The condition does not hold (`"False"`); `reason` and `message` usually say why.
    False,
    /// Not (yet) known whether the condition holds (`"Unknown"`): the state a condition starts in before its
    /// controller has looked, and the default of a status that omits it.
    #[default]
    Unknown,
}

impl ConditionStatus {
    /// `True`, `False` or `Unknown`, as the API server writes a condition's status (Node conditions are plain
    /// strings in k8s-openapi, so they are compared with this).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// Sets condition `type_` in `conditions`, recording `observed_generation` (the generation of the object the
/// condition was computed from, so readers can tell a stale condition). The transition time changes only when
/// the status does. Returns whether anything changed, a new generation included: the caller writes the status
/// back only then, and a generation left unwritten would make the condition look stale.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: DateTime<Utc>,
) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status == status
                && c.reason == reason
                && c.message == message
                && c.observed_generation == observed_generation
            {
                return false;
            }
            if c.status != status {
                c.last_transition_time = crate::time::rfc3339(now);
            }
            c.status = status;
            reason.clone_into(&mut c.reason);
            message.clone_into(&mut c.message);
            c.observed_generation = observed_generation;
            true
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_owned(),
                status,
                observed_generation,
                last_transition_time: crate::time::rfc3339(now),
                reason: reason.to_owned(),
                message: message.to_owned(),
            });
            true
        }
    }
}

/// Removes condition `type_`; returns whether it was there.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Lookup helpers over a condition list.
pub trait Conditions {
    /// The conditions, in status order.
    fn conditions(&self) -> &[Condition];

    /// The condition of type `type_`, if present.
    fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions().iter().find(|c| c.type_ == type_)
    }

    /// True only when the condition exists and its status is `True`.
    fn is_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(|c| c.status == ConditionStatus::True)
    }
}

impl Conditions for [Condition] {
    fn conditions(&self) -> &[Condition] {
        self
    }
}

impl Conditions for Vec<Condition> {
    fn conditions(&self) -> &[Condition] {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_767_268_800 + secs, 0).unwrap()
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut cs = Vec::new();
        assert!(set_condition(&mut cs, "Drained", ConditionStatus::Unknown, "Draining", "", Some(1), at(0)));
        assert!(
            !set_condition(&mut cs, "Drained", ConditionStatus::Unknown, "Draining", "", Some(1), at(5)),
            "no change"
        );
        assert!(set_condition(&mut cs, "Drained", ConditionStatus::Unknown, "Draining", "2 pods", Some(1), at(5)));
        assert_eq!(cs[0].last_transition_time, "2026-01-01T12:00:00Z", "same status, same transition time");
        assert!(set_condition(&mut cs, "Drained", ConditionStatus::True, "Drained", "", Some(1), at(9)));
        assert_eq!(cs[0].last_transition_time, "2026-01-01T12:00:09Z");
        assert!(remove_condition(&mut cs, "Drained"));
        assert!(!remove_condition(&mut cs, "Drained"));
    }

    /// A caller that writes the status only on a change must see a new generation as one, or the condition's
    /// `observedGeneration` falls behind the object's.
    #[test]
    fn a_new_generation_alone_is_a_change() {
        let mut cs = Vec::new();
        set_condition(&mut cs, "Ready", ConditionStatus::True, "Ready", "", Some(1), at(0));
        assert!(set_condition(&mut cs, "Ready", ConditionStatus::True, "Ready", "", Some(2), at(1)));
        assert_eq!(cs.condition("Ready").and_then(|c| c.observed_generation), Some(2));
        assert_eq!(cs[0].last_transition_time, "2026-01-01T12:00:00Z");
    }
}
