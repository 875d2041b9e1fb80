//! Everything a [`CloudProvider`] implementation is written with, in one import:
//! `use karpenter_cloudprovider::prelude::*;`.
//!
//! The trait and its error and value types, the `#[async_trait]` attribute its methods need, the objects it
//! receives and returns (NodeClaim, NodePool), the instance types it describes (with their builder, offerings,
//! requirements and quantities), the well-known labels a launched claim carries and the launch helpers the fake
//! and kwok providers share. Every name is a re-export; its home crate is named in its docs.

pub use async_trait::async_trait;
pub use karpenter_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
pub use karpenter_api::labels::ProviderLabels;
pub use karpenter_api::nodeclaim::{NodeClaim, NodeClaimStatus, NodeClassReference};
pub use karpenter_api::nodepool::NodePool;
pub use karpenter_requirements::labels::{
    ARCH, CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, INSTANCE_TYPE, OS, ZONE,
};
pub use karpenter_requirements::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
pub use karpenter_requirements::{
    InstanceType, InstanceTypeBuilder, Offering, Operator, Overhead, Quantity, Requirement, Requirements, ResourceList,
};

pub use crate::error::{CloudProviderError, OfferingRef};
pub use crate::launch::{LaunchChoice, cheapest_launch, cheapest_launch_holding, k8s_time, resource_map};
pub use crate::provider::{CloudProvider, DriftReason, NodeClassKind, RepairPolicy};
pub use crate::time::{Clock, SystemClock};
