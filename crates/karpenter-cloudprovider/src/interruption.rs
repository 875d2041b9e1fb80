//! Interruption events: a provider-agnostic stream of "this instance is going away" notices.
//!
//! The controller pulls a batch with [`InterruptionSource::next_batch`], acts on each event (cordon and drain
//! through the normal termination flow for [`InterruptionAction::Delete`], forceful termination for
//! [`InterruptionAction::DeleteForceful`], an event only for [`InterruptionAction::None`]) and then calls
//! [`InterruptionSource::acknowledge`] with the events it handled. Events not acknowledged are delivered again
//! (as an SQS message reappears after its visibility timeout), so a crash between receiving and handling loses
//! nothing; handling must therefore be idempotent (deleting an already deleting NodeClaim is a no-op).
//!
//! Why a pull trait and not a `Stream`: acknowledgement is part of the contract, batches match the underlying
//! queues (SQS returns up to 10 messages per receive), and an `async fn` trait stays object-safe with
//! `async-trait` without pinning gymnastics. Side effects inside the provider (marking a spot offering
//! unavailable after a spot warning, a reservation after its interruption) are the provider's own business and
//! happen before the event is returned.

use std::fmt;

use async_trait::async_trait;

/// What happened, as the metrics reason (`karpenter_nodeclaims_disrupted_total{reason}`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum InterruptionKind {
    /// The spot instance will be reclaimed (two-minute warning).
    SpotInterrupted,
    /// Scheduled maintenance (e.g. an AWS Health scheduled change).
    ScheduledChange,
    /// The instance is stopping or stopped.
    InstanceStopped,
    /// The instance is shutting down or terminated.
    InstanceTerminated,
    /// The cloud recommends moving off the instance (no action by default).
    RebalanceRecommendation,
    /// The capacity reservation the instance runs in is being reclaimed.
    CapacityReservationInterrupted,
    /// Instance or system status checks failed.
    InstanceStatusFailure,
    /// A provider-specific kind.
    Other(String),
}

impl InterruptionKind {
    /// The metrics reason value.
    pub fn as_str(&self) -> &str {
        match self {
            InterruptionKind::SpotInterrupted => "spot_interrupted",
            InterruptionKind::ScheduledChange => "scheduled_change",
            InterruptionKind::InstanceStopped => "instance_stopped",
            InterruptionKind::InstanceTerminated => "instance_terminated",
            InterruptionKind::RebalanceRecommendation => "rebalance_recommendation",
            InterruptionKind::CapacityReservationInterrupted => "capacity_reservation_interrupted",
            InterruptionKind::InstanceStatusFailure => "instance_status_failure",
            InterruptionKind::Other(s) => s,
        }
    }
}

impl fmt::Display for InterruptionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the controller should do with the NodeClaim of the interrupted instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InterruptionAction {
    /// Delete the NodeClaim through the normal, graceful termination flow (drain respecting PDBs).
    Delete,
    /// Delete it forcefully: termination timestamp now, no PDB-respecting drain, no volume wait.
    DeleteForceful,
    /// Record an event only.
    None,
}

/// One interruption notice for one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterruptionEvent {
    /// Identifies the delivery for [`InterruptionSource::acknowledge`] (e.g. an SQS receipt handle). Several
    /// events may share one (a message naming several instances); acknowledging any of them acknowledges it.
    pub ack_id: String,
    /// The instance, as a NodeClaim's `status.providerID`.
    pub provider_id: String,
    /// What happened.
    pub kind: InterruptionKind,
    /// What to do about it.
    pub action: InterruptionAction,
}

/// The error an [`InterruptionSource`] returns (queue unreachable, permissions, ...); the caller retries.
#[derive(Debug, thiserror::Error)]
#[error("interruption source: {message}")]
pub struct InterruptionError {
    /// What failed.
    pub message: String,
    /// Provider detail.
    #[source]
    pub source: Option<crate::error::BoxError>,
}

impl InterruptionError {
    /// An error without a source.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), source: None }
    }
}

/// A queue of interruption events (see the module docs).
#[async_trait]
pub trait InterruptionSource: Send + Sync + fmt::Debug {
    /// The next events. May wait (a long poll) and may return an empty batch when nothing arrived in that time;
    /// callers loop.
    async fn next_batch(&self) -> Result<Vec<InterruptionEvent>, InterruptionError>;

    /// Marks events as handled so they are not delivered again.
    async fn acknowledge(&self, events: &[InterruptionEvent]) -> Result<(), InterruptionError>;
}
