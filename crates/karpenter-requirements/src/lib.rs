//! The pure algebra Karpenter decides with: Kubernetes quantities and resource lists, label requirements
//! (`In`/`NotIn`/`Exists`/`DoesNotExist`/`Gt`/`Lt`/`Gte`/`Lte`), taints and tolerations, host ports, and
//! instance types with their offerings.
//!
//! ```toml
//! [dependencies]
//! karpenter-requirements = { version = "0.1" }
//! # This crate leaves the Kubernetes version to the final binary (kube-rs's rule for libraries): the binary
//! # enables exactly one k8s-openapi version feature, the one karpenter-rs is built and tested with being v1_33.
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! ```
//!
//! **This crate does no IO**: no tokio, no kube client, no clock. It takes data (mostly `k8s-openapi` types) and
//! returns decisions; the scheduler and the API validation build on it. Behaviour follows upstream Karpenter
//! v1.14.1 except where a doc comment says otherwise.
//!
//! # Entry points
//!
//! * [`Quantity`] — exact resource quantities (parse, canonical `Display`, checked arithmetic, serde).
//! * [`ResourceList`] and [`pod_requests`] — per-resource arithmetic and `fits`, pod effective requests.
//! * [`Requirement`] / [`Requirements`] — the requirement algebra: [`Requirement::intersection`],
//!   [`Requirement::has_intersection`], [`Requirements::compatible`], [`Requirements::intersects`],
//!   [`Requirements::from_pod`].
//! * [`taints`] — [`tolerates_all`], [`taints::merge`].
//! * [`host_ports`] — [`pod_host_ports`], [`HostPortUsage`].
//! * [`InstanceType`] / [`Offering`] — cached [`InstanceType::allocatable`], [`OfferingsExt`] price helpers,
//!   [`order_by_price`], [`satisfies_min_values`], [`truncate`].
//!
//! # Determinism
//!
//! Everything observable is ordered: requirements iterate by key, values and resource names in byte order.
//! Where upstream is random or unspecified we fix a rule:
//! * [`Requirement::any`] — `In`: the smallest value; `NotIn`/`Exists`: the smallest integer at or above
//!   `max(gte, 0)` that is within the bounds and not excluded (`""` if none); `DoesNotExist`: `""`.
//! * [`order_by_price`] — ascending price, `+∞` (no compatible available offering) last, ties by name.
//! * [`offering::cheapest`] / [`offering::most_expensive`] — the first offering among equal prices.
//!
//! # Performance
//!
//! Requirements are sorted vectors with `Arc<str>` keys and values: clones are reference-count bumps,
//! intersection is a linear merge, and `has_intersection` / `compatible` / `intersects` / `ResourceList::fits`
//! do not allocate on the success path.

#![warn(missing_docs)]

pub mod devices;
mod fastcmp;
pub mod host_ports;
pub mod instance_type;
pub mod labels;
pub mod offering;
pub mod overhead;
pub mod quantity;
pub mod requirement;
pub mod requirements;
pub mod resources;
pub mod taints;

#[doc(hidden)]
pub mod fuzzing;

pub use devices::{CounterSet, Device, DeviceAttribute, DeviceSliceTemplate};
pub use host_ports::{HostPort, HostPortConflict, HostPortUsage, pod_host_ports, spec_host_ports};
pub use instance_type::{
    InstanceType, InstanceTypeBuilder, MinValuesError, MinValuesPolicy, OfferingGroup, UnknownMinValuesPolicy,
    order_by_price, satisfies_min_values, truncate,
};
pub use offering::{Offering, OfferingsExt};
pub use overhead::Overhead;
pub use quantity::{Format, Quantity, QuantityError};
pub use requirement::{Operator, Requirement, RequirementError, SerializedRequirement, UnknownOperator, Values};
pub use requirements::{CompatibilityError, KeySet, NoKeys, PreferencePolicy, Requirements, UnknownPreferencePolicy};
pub use resources::{ResourceError, ResourceList, pod_requests, spec_requests};
pub use taints::{TaintError, tolerates_all};
