//! Everything a program that plans pods needs, in one import: `use karpenter_scheduler::prelude::*;`.
//!
//! The inputs (NodePools, pods, instance types with offerings), their builders and typed values
//! (requirements with [`Operator`]s, quantities, well-known label and resource names), the scheduler's entry
//! points and its output. Every name is a re-export; its home crate is named in its docs.
//!
//! ```
//! use karpenter_scheduler::prelude::*;
//!
//! let pool = NodePool::builder("default", NodeClassReference::new("example.com", "ToyNodeClass", "default"))
//!     .requirement(NodeSelectorRequirementWithMinValues::in_values(CAPACITY_TYPE, [CAPACITY_TYPE_ON_DEMAND]))
//!     .build();
//! let catalogue = [InstanceType::builder("small").cpu(2).memory_gib(8).pods(110)
//!     .offering(Offering::on_demand("zone-a", 0.1)).build()];
//!
//! let mut snapshot = ClusterSnapshot::builder();
//! let requests = ResourceList::try_from_pairs([(CPU, "1"), (MEMORY, "2Gi")]).unwrap();
//! for i in 0..3 {
//!     snapshot.pod(PodBuilder::new("default", format!("web-{i}")).requests(&requests).build());
//! }
//! let snapshot = snapshot.build().unwrap();
//!
//! let pools = [PoolInput { node_pool: &pool, instance_types: &catalogue }];
//! let decisions = schedule(&snapshot, &pools, &ProviderLabels::core_only("toy"), &SchedulerOptions::default());
//! // Three 1-CPU pods on 2-CPU nodes: two new nodes.
//! assert_eq!(decisions.new_node_claims.len(), 2);
//! assert!(decisions.unschedulable.is_empty());
//! ```

pub use karpenter_api::builder::{NodePoolBuilder, PodBuilder};
pub use karpenter_api::k8s_openapi::api::core::v1::{Node, Pod, Toleration};
pub use karpenter_api::labels::ProviderLabels;
pub use karpenter_api::nodeclaim::{
    NodeClaim, NodeClassReference, NodeSelectorRequirementWithMinValues, Taint, TaintEffect,
};
pub use karpenter_api::nodepool::{Budget, ConsolidationPolicy, NodePool};
pub use karpenter_api::{KDuration, NillableDuration};
pub use karpenter_requirements::labels::{
    ARCH, CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, HOSTNAME, INSTANCE_TYPE,
    NODE_POOL, OS, REGION, ZONE,
};
pub use karpenter_requirements::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, NVIDIA_GPU, PODS};
pub use karpenter_requirements::{
    Format, InstanceType, InstanceTypeBuilder, Offering, Operator, Overhead, Quantity, Requirement, Requirements,
    ResourceList,
};

pub use crate::decision::{
    Decisions, ExistingNodePlacement, InstanceTypeOption, NodeClaimPlan, PodKey, UnschedulablePod, UnschedulableReason,
};
pub use crate::snapshot::{ClusterSnapshot, SnapshotBuilder};
pub use crate::{PoolInput, SchedulerOptions, schedule};
