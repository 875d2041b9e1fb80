//! The cloud-provider boundary of karpenter-rs: the [`CloudProvider`] trait every cloud implements, its error
//! enum, [`InterruptionSource`], a metrics/recording decorator, an in-memory [`FakeCloudProvider`] and
//! [`cheapest_launch`], the offering a launch picks.
//!
//! ```toml
//! [dependencies]
//! karpenter-cloudprovider = { version = "0.1" }
//! # This crate leaves the Kubernetes version to the final binary (kube-rs's rule for libraries): the binary
//! # enables exactly one k8s-openapi version feature, the one karpenter-rs is built and tested with being v1_33.
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! ```
//!
//! No provider lives here: each is whole in its own crate (`karpenter-aws`, `karpenter-kwok`, with its instance-type
//! catalogue), depending on this one and never the other way round.
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
//! * [`launch`]: [`cheapest_launch`], the offering a launch picks over any instance types, [`cheapest_launch_holding`]
//!   (only offerings whose node holds the claim's requests) and [`LaunchChoice`] with that node's resources;
//!   [`resource_map`](launch::resource_map) and [`k8s_time`](launch::k8s_time) for the NodeClaim a launch returns.
//! * [`time`]: the injected [`Clock`] and [`Sleeper`].
//!
//! # Implementing a cloud
//!
//! [`prelude`] holds everything an implementation is written with (the trait, `#[async_trait]`, the objects and
//! instance-type builders, launch helpers); `cargo run -p karpenter-testing --example toy_provider` runs a toy
//! cloud written with it through the conformance suite.
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
//!     async fn reboot(&self, _: &NodeClaim) -> Result<(), CloudProviderError> {
//!         Err(CloudProviderError::not_implemented("Reboot"))
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
//! # The fake and the launch choice
//!
//! The fake launches from the instance types it is given; tests usually give it the kwok catalogue
//! (`karpenter_testing::kwok::fake()`). It picks the offering with [`cheapest_launch`], as the kwok provider does:
//!
//! ```
//! use karpenter_api::labels::{CAPACITY_TYPE, ZONE};
//! use karpenter_cloudprovider::{CloudProvider, FakeCloudProvider, FakeOptions, cheapest_launch};
//! use karpenter_requirements::{InstanceType, Offering, Overhead, Requirement, Requirements, ResourceList};
//!
//! let offering = |zone: &str, capacity_type: &str, price: f64| {
//!     let reqs = [Requirement::in_values(ZONE, [zone]), Requirement::in_values(CAPACITY_TYPE, [capacity_type])];
//!     Offering::new(reqs.into_iter().collect(), price)
//! };
//! let offerings = vec![offering("zone-a", "on-demand", 0.1), offering("zone-b", "spot", 0.03)];
//! let capacity = ResourceList::new().with("cpu", "2".parse().unwrap());
//! let small = InstanceType::new("small", Requirements::new(), offerings, capacity, Overhead::default());
//!
//! let choice = cheapest_launch([&small], &Requirements::new()).unwrap();
//! assert_eq!((choice.instance_type.as_str(), choice.zone.as_str(), choice.capacity_type.as_str()),
//!            ("small", "zone-b", "spot"));
//!
//! let fake = FakeCloudProvider::new(FakeOptions::new(vec![small])); // no latency, every node class ready
//! assert_eq!(fake.name(), "kwok");
//! ```

#![warn(missing_docs)]

pub mod capacity;
pub mod decorator;
pub mod error;
pub mod fake;
pub mod interruption;
pub mod launch;
pub mod node_class;
pub mod overlay;
pub mod prelude;
pub mod provider;
pub mod time;

#[cfg(test)]
mod test_types;

// What an implementation is written with, re-exported so that a cloud crate depends on this crate alone (plus
// the k8s-openapi version feature its final binary picks) and names the very versions the trait was built with.
pub use async_trait::async_trait;
pub use karpenter_api;
pub use karpenter_api::{k8s_openapi, kube};
pub use karpenter_requirements;

pub use capacity::CapacityMarks;
pub use decorator::{InMemoryMetrics, Instrumented, MethodStats, MetricsSink, Observation};
pub use error::{BoxError, CloudProviderError, ErrorKind, OfferingRef};
pub use fake::{Call, FakeCloudProvider, FakeInterruptionSource, FakeOptions};
pub use interruption::{
    InterruptionAction, InterruptionError, InterruptionEvent, InterruptionKind, InterruptionSource,
};
pub use launch::{LaunchChoice, cheapest_launch, cheapest_launch_holding};
pub use node_class::{InMemoryNodeClasses, NodeClassLookup, get_node_class};
pub use overlay::{Evaluated, Overlaid, OverlayProblem, OverlayStore};
pub use provider::{CloudProvider, DriftReason, Method, NodeClassKind, RepairAction, RepairPolicy};
#[cfg(feature = "tokio")]
pub use time::TokioSleeper;
pub use time::{Clock, NoSleep, Sleeper, SystemClock};
