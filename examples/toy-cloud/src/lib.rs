//! A made-up cloud written as one crate, the way a new cloud joins karpenter-rs: it owns its node-class API,
//! its [`CloudProvider`](karpenter_cloudprovider::CloudProvider) and its registration with the operator, and
//! changes no other crate. README.md lists what a cloud author writes and the one entry a binary adds.
//!
//! - [`api`]: `ToyNodeClass` (`karpenter.toy.example/v1alpha1`), with `spec.region` (where nodes run) and
//!   `spec.maxNodes` (how many may run), its validation and CRD, its `NodeClassApi` for the core and the
//!   cloud's label vocabulary ([`labels`]);
//! - [`cloud`]: [`ToyCloud`], instances in an in-memory [`Account`], a two-type catalogue in the class's zones;
//!   it passes `karpenter_testing::conformance` (tests/conformance.rs);
//! - [`registration`]: what a binary's provider table calls: [`labels`], [`node_classes`], [`node_class_apis`],
//!   [`manager`] (and [`crds`]).
//!
//! tests/end_to_end.rs runs the whole operator with it against the in-process API server: a ToyNodeClass and a
//! NodePool become Ready and a pending pod gets a NodeClaim launched by the toy cloud.

#![warn(missing_docs)]

pub mod api;
pub mod cloud;
pub mod registration;

pub use api::{ToyNodeClass, ToyNodeClassSpec, ToyNodeClassStatus};
pub use cloud::{Account, ToyCloud};
pub use registration::{StartError, ToyOptions, crds, labels, manager, node_class_apis, node_classes};
