//! Karpenter's v1 API: NodePool and NodeClaim (`karpenter.sh/v1`) and NodeOverlay, with validation, drift
//! hashes, CRD generation and manifest loading. The node classes are the providers' (each provider crate defines
//! its kind); [`node_class_api`] is how the core reads, validates and installs them without naming one.
//!
//! ```toml
//! [dependencies]
//! karpenter-api = { version = "0.1" }
//! # This crate leaves the Kubernetes version to the final binary (kube-rs's rule for libraries): the binary
//! # enables exactly one k8s-openapi version feature, the one karpenter-rs is built and tested with being v1_33.
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! ```
//!
//! This crate is pure: it depends on `kube` with the `derive` feature only, so it pulls in no HTTP client and no
//! async runtime. It re-exports [`kube`] and [`k8s_openapi`] so embedders line up on the same versions.
//!
//! Features, all on by default (`default-features = false` for a lean tree; what is left out is an explicit
//! outcome, never a silent difference):
//!
//! * `loader`: reading manifests from text and files (`load_str`, `load_file`, `load_paths`); implies `yaml`.
//!   Without it the decoded types (`loader::Object`, `Loaded`) remain.
//! * `yaml`: YAML through serde-saphyr (`crd::render_yaml`, and the loader's parser).
//! * `time-zones`: budget `timeZone`s through chrono-tz. Without it a budget naming a zone is
//!   `nodepool::BudgetError::TimeZonesUnsupported` (it allows no disruption, validation reports it), never UTC.
//!
//! The CRD derive (kube-derive, schemars) is not optional: it generates the API types themselves.

#![warn(missing_docs)]

pub use k8s_openapi;
pub use kube;

pub mod builder;
pub mod capacitybuffer;
pub mod condition;
pub mod crd;
pub mod dra;
pub mod duration;
#[cfg(feature = "loader")]
#[doc(hidden)]
pub mod fuzzing;
pub mod hash;
pub mod labels;
pub mod loader;
pub mod meta;
pub mod node_class_api;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod optional_spec;
pub mod pod;
pub mod repair;
pub mod scheduling;
pub mod selector;
pub mod settings;
pub mod time;
pub mod validation;

#[cfg(test)]
mod test_vocabulary;

/// Decoding watched objects without `managedFields`; lives in the loader's tree, named here for its users.
pub use loader::lean;

pub use builder::{NodePoolBuilder, PodBuilder};
pub use capacitybuffer::{CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus};
pub use condition::{Condition, ConditionStatus, Conditions, remove_condition, set_condition};
pub use duration::{KDuration, NillableDuration};
pub use labels::ProviderLabels;
pub use loader::{LoadError, Loaded, Object, Origin};
#[cfg(feature = "loader")]
pub use loader::{load_file, load_paths, load_str};
pub use meta::namespaced_key;
pub use node_class_api::{NodeClassApi, NodeClassApis, TypedNodeClassApi};
pub use nodeclaim::{
    NodeClaim, NodeClaimSpec, NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceQuantities,
    ResourceQuantity, Taint, TaintEffect,
};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec};
pub use nodepool::{Budget, Disruption, NodePool, NodePoolSpec};
pub use pod::{
    CompactPod, DoNotDisrupt, DoNotDisruptAnnotation, IntoSharedPod, SpecInterner, do_not_disrupt_problem,
    parse_do_not_disrupt,
};
pub use validation::{Validate, ValidationContext, Violation, Violations};
