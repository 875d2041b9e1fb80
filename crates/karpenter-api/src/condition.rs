//! Status conditions, shaped like `metav1.Condition` so `kubectl wait --for=condition=Ready` works.

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
    True,
    False,
    #[default]
    Unknown,
}

/// Lookup helpers over a condition list.
pub trait Conditions {
    fn conditions(&self) -> &[Condition];

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
