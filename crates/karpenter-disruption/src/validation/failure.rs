//! What a failed validation reports: [`ValidationFailure`] and its class, [`FailureKind`]. Below both
//! [`validate`](super::validate) and the methods' re-checks that produce it, so neither imports the other for it.

use serde::{Deserialize, Serialize};

/// Failure classes (upstream's `budget | scheduling | churn` metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureKind {
    /// A budget no longer allows the command.
    Budget,
    /// The pods no longer schedule as planned.
    Scheduling,
    /// A candidate is no longer a candidate (pods arrived, nominated, deleted, ...).
    Churn,
}

/// Why a command was rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind:?}: {message}")]
#[serde(rename_all = "camelCase")]
pub struct ValidationFailure {
    /// Class.
    pub kind: FailureKind,
    /// Details.
    pub message: String,
}

/// A failure of class `kind`.
pub(crate) fn fail(kind: FailureKind, message: impl Into<String>) -> ValidationFailure {
    ValidationFailure { kind, message: message.into() }
}
