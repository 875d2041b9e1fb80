//! The cloud-provider boundary of karpenter-rs: the [`CloudProvider`] trait every cloud implements, its error
//! enum, [`InterruptionSource`], a metrics/recording decorator, an in-memory [`FakeCloudProvider`] and the kwok
//! instance-type catalogue.
//!
//! # Modules
//!
//! * [`provider`]: [`CloudProvider`] (object-safe, shared as `Arc<dyn CloudProvider>`) with its contract,
//!   [`DriftReason`], [`RepairPolicy`], [`NodeClassKind`], [`Method`].
//! * [`error`]: [`CloudProviderError`] (`#[non_exhaustive]`; NodeClaimNotFound, InsufficientCapacity naming the
//!   failed offerings, NodeClassNotReady, Create { reason, message }, UnevaluatedNodePool, Other; each with a boxed
//!   source) and [`ErrorKind`].
//! * [`node_class`]: [`NodeClassLookup`], the injected read-only handle node classes arrive through, and
//!   [`InMemoryNodeClasses`].
//! * [`interruption`]: [`InterruptionSource`] (pull a batch, acknowledge) and [`InterruptionEvent`].
//! * [`decorator`]: [`Instrumented`], a provider wrapping another that reports every call's duration and error
//!   kind to a [`MetricsSink`] ([`InMemoryMetrics`] records counters, durations and the call sequence).
//! * [`fake`]: [`FakeCloudProvider`], in memory, with launch latency, per-offering insufficient capacity, failure
//!   injection, call recording, drift and interruption injection.
//! * [`kwok`]: upstream's kwok catalogue and its JSON loader.
//! * [`launch`]: [`cheapest_launch`], the offering a launch picks over any instance types, and [`LaunchChoice`].
//! * [`time`]: the injected [`Clock`] and [`Sleeper`].
//!
//! # Implementing a cloud
//!
//! Implement [`CloudProvider`] and check it with `karpenter_testing::conformance` (feature `conformance`), which
//! runs the contract documented on the trait against your implementation. A minimal provider that never has
//! capacity:
//!
//! ```
//! use std::sync::Arc;
//!
//! use async_trait::async_trait;
//! use karpenter_api::{NodeClaim, NodePool, ProviderLabels};
//! use karpenter_cloudprovider::{
//!     CloudProvider, CloudProviderError, DriftReason, NodeClassKind, RepairPolicy,
//! };
//! use karpenter_requirements::InstanceType;
//!
//! #[derive(Debug)]
//! struct Empty {
//!     labels: ProviderLabels,
//! }
//!
//! #[async_trait]
//! impl CloudProvider for Empty {
//!     async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
//!         Err(CloudProviderError::insufficient_capacity(vec![], "this cloud is full"))
//!     }
//!     async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
//!         Err(CloudProviderError::not_found("nothing was ever launched"))
//!     }
//!     async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
//!         Err(CloudProviderError::not_found(provider_id))
//!     }
//!     async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
//!         Ok(vec![])
//!     }
//!     async fn instance_types(&self, _: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
//!         Ok(Arc::from(Vec::new()))
//!     }
//!     async fn is_drifted(&self, _: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError> {
//!         Ok(None)
//!     }
//!     fn repair_policies(&self) -> Vec<RepairPolicy> {
//!         vec![]
//!     }
//!     fn name(&self) -> &str {
//!         "empty"
//!     }
//!     fn supported_node_classes(&self) -> Vec<NodeClassKind> {
//!         vec![NodeClassKind::new("example.com", "ExampleNodeClass")]
//!     }
//!     fn labels(&self) -> &ProviderLabels {
//!         &self.labels
//!     }
//! }
//!
//! let provider: Arc<dyn CloudProvider> = Arc::new(Empty { labels: ProviderLabels::core_only("empty") });
//! assert_eq!(provider.name(), "empty");
//! ```
//!
//! # The fake and the kwok catalogue
//!
//! ```
//! use karpenter_cloudprovider::{CloudProvider, FakeCloudProvider, FakeOptions, kwok};
//! use karpenter_requirements::{Requirement, Requirements};
//!
//! let catalogue = kwok::catalogue();
//! assert_eq!(catalogue.len(), 144);
//! let linux: Requirements = [Requirement::in_values("kubernetes.io/os", ["linux"])].into_iter().collect();
//! let choice = karpenter_cloudprovider::cheapest_launch(&catalogue, &linux).unwrap();
//! assert_eq!((choice.instance_type.as_str(), choice.zone.as_str(), choice.capacity_type.as_str()),
//!            ("c-1x-amd64-linux", "test-zone-a", "spot"));
//!
//! let fake = FakeCloudProvider::new(FakeOptions::new(catalogue)); // no latency, every node class ready
//! assert_eq!(fake.name(), "kwok");
//! ```

pub mod capacity;
pub mod decorator;
pub mod error;
pub mod fake;
pub mod interruption;
pub mod kwok;
pub mod launch;
pub mod node_class;
pub mod provider;
pub mod time;

#[cfg(test)]
mod test_types;

pub use capacity::CapacityMarks;
pub use decorator::{InMemoryMetrics, Instrumented, MethodStats, MetricsSink, Observation};
pub use error::{BoxError, CloudProviderError, ErrorKind, OfferingRef};
pub use fake::{Call, FakeCloudProvider, FakeInterruptionSource, FakeOptions};
pub use interruption::{
    InterruptionAction, InterruptionError, InterruptionEvent, InterruptionKind, InterruptionSource,
};
pub use kwok::{KwokCatalogueError, load_instance_types_json, to_instance_types_json};
pub use launch::{LaunchChoice, cheapest_launch};
pub use node_class::{InMemoryNodeClasses, NodeClassLookup, get_node_class};
pub use provider::{CloudProvider, DriftReason, Method, NodeClassKind, RepairPolicy};
#[cfg(feature = "tokio")]
pub use time::TokioSleeper;
pub use time::{Clock, NoSleep, Sleeper, SystemClock};
