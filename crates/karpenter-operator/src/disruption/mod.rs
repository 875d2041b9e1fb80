//! Voluntary disruption on a live cluster: the controllers that turn
//! karpenter-disruption's pure decisions into API writes.
//!
//! - [`controller::Disruption`], the singleton disruption loop: builds karpenter-disruption's input from the
//!   [`ClusterState`](crate::state::ClusterState) snapshot and the cloud provider's instance types, calls
//!   [`karpenter_disruption::evaluate`], publishes the verdicts (budget gauges, `DisruptionBlocked` /
//!   `Unconsolidatable` events) and executes the pass's command in upstream's order: emptiness and consolidation
//!   commands wait the validation delay (15 s) and are re-checked against a fresh snapshot
//!   ([`karpenter_disruption::validation::validate`]); then the candidates are tainted
//!   `karpenter.sh/disrupted:NoSchedule` and get `DisruptionReason=True`, the replacements are created, the
//!   candidates are marked for deletion in the cluster state, and once every replacement is `Initialized` the
//!   candidates' NodeClaims are deleted (termination drains them). A replacement that disappears or does not
//!   initialize in time rolls the command back (untaint, condition removed, mark removed, replacements
//!   deleted).
//! - [`conditions::NodeClaimDisruption`], the NodeClaim disruption-condition controller: `Drifted` (NodePool
//!   hash, requirements, instance type gone, provider drift; a hash-version mismatch rewrites the NodeClaim's
//!   hash annotations instead) and `Consolidatable` (`consolidateAfter` elapsed since the last pod event or the
//!   initialization).
//! - [`podevents::PodEvents`], which stamps `status.lastPodEventTime` on a NodeClaim when a pod binds to its
//!   node, finishes, or starts terminating there (at most once per 10 s).
//!
//! Each controller has a deterministic single-step method tests drive with a fake clock
//! ([`controller::Disruption::step`], [`conditions::NodeClaimDisruption::reconcile_once`],
//! [`podevents::PodEvents::observe`]) and a `run(self: Arc<Self>, shutdown)` loop for the manager.

pub mod conditions;
pub mod controller;
pub mod podevents;

#[cfg(test)]
mod tests;

pub use conditions::NodeClaimDisruption;
pub use controller::{Disruption, DisruptionError, DisruptionSettings, StepReport};
pub use podevents::PodEvents;
