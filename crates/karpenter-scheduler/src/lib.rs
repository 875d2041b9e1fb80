//! Karpenter's provisioning simulation (scheduling.md) as a pure function.
pub mod check;
pub mod decision;
pub mod scheduler;
pub mod snapshot;

pub use decision::{API_VERSION, Decisions};
pub use scheduler::{PoolInput, ReservedOfferingMode, SchedulerOptions, schedule, schedule_until};
pub use snapshot::{ClusterSnapshot, NamespaceInfo, NodeClaimInfo, NodeInfo, SnapshotError};
