//! EC2NodeClass resolution and the node class controllers.
//!
//! * [`api`] — the narrow AWS traits resolution calls ([`api::SubnetApi`], [`api::SecurityGroupApi`],
//!   [`api::ImageApi`], [`api::SsmApi`], [`api::CapacityReservationApi`], [`api::PlacementGroupApi`],
//!   [`api::IamApi`]) with our own request/response structs; the `sdk` feature implements them.
//! * [`network`] — subnets and security groups from selector terms (cached; free-IP counts for launches).
//! * [`ami`] — aliases → SSM parameter paths per family, architecture, variant and Kubernetes version; selector
//!   terms → `DescribeImages` queries; one best image per requirement set; AMI ↔ instance-type matching.
//! * [`instance_profile`] — the managed instance profile of `spec.role` (create, tag, role, delete, GC).
//! * [`reservation`] — capacity reservations (with availability tracking) and the placement group.
//! * [`status`] — [`status::NodeClassResolver::reconcile`]: the new status with its conditions and requeue.
//! * [`controller`] — the kube-backed runners: status + finalizer + hash annotations, SSM invalidation,
//!   instance-profile garbage collection.
//! * [`demotion`] — relabels reserved NodeClaims and Nodes on-demand once EC2 no longer reports their instance in
//!   a capacity reservation.
//! * [`error`] — [`error::ControllerError`], the error of the kube-backed controllers (both of the above).
//!
//! All caches run on an injected [`karpenter_cloudprovider::Clock`].

pub mod ami;
pub mod api;
pub mod cache;
pub mod controller;
pub mod demotion;
pub mod error;
pub mod instance_profile;
pub mod network;
pub mod reservation;
pub mod status;

#[cfg(any(test, feature = "test-util"))]
pub mod mock;

pub use status::{NodeClassResolver, Reconciled, ResolverApis, ResolverSettings};

#[cfg(test)]
mod ami_upstream_expectations;
#[cfg(test)]
mod controller_tests;
#[cfg(test)]
mod tests;
