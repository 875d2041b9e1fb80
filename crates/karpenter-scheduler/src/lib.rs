//! Karpenter's provisioning simulation (scheduling.md) as a pure function.
pub mod snapshot;

pub use snapshot::{ClusterSnapshot, NamespaceInfo, NodeClaimInfo, NodeInfo, SnapshotError};
