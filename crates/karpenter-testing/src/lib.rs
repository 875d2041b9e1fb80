//! Test kit for karpenter-rs and for cloud-provider authors.
//!
//! ```toml
//! [dev-dependencies]
//! karpenter-testing = { version = "0.1", features = ["apiserver"] }
//! # Under [dev-dependencies]; features as needed: apiserver, realplane, conformance, kwok, standins, tokio.
//! # This crate leaves the Kubernetes version to the final binary (kube-rs's rule for libraries): the binary
//! # enables exactly one k8s-openapi version feature, the one karpenter-rs is built and tested with being v1_33.
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! ```
//!
//! - **Builders with option structs**, filled with `..Default::default()`: [`pod`], [`unschedulable_pod`],
//!   [`node`], [`daemon_set`], [`pod_disruption_budget`], and for the Karpenter kinds [`node_pool`],
//!   [`node_claim`] (valid by default: they pass `Validate`; the node-class builders live with their providers:
//!   `karpenter_aws::testing::ec2_node_class`, `karpenter_kwok::testing::kwok_node_class`). Unset names come from a per-thread counter
//!   (`pod-1`, `pod-2`, …), so tests are deterministic; [`reset_names`] restarts it.
//! - **Small helpers** for the fields tests set most: [`Resources`] (`[("cpu", "1")].into()`), [`map`],
//!   [`requirement`], [`toleration`], [`taint`], [`topology_spread`], [`pod_affinity_term`].
//! - **Time**: the [`Clock`] trait, [`SystemClock`] and a [`FakeClock`] tests move by hand (also a `Sleeper`:
//!   sleeping on it moves it); [`Stopwatch`] for real elapsed time; with feature `tokio` (implied by `standins`,
//!   `apiserver` and `realplane`) `tokio_now` and a `TokioClock` whose wall time moves with tokio's (paused) clock.
//! - **CloudProvider conformance** (feature `conformance`): `conformance::run` checks any `CloudProvider` against
//!   the trait's contract (see the module docs).
//! - **An in-process API server** (feature `apiserver`): `apiserver::ApiServer` serves `kube::Client` as a tower
//!   service with the real server's semantics (see the module docs).
//! - **Cluster stand-ins** (feature `standins`, implied by `apiserver`): `standins::Scheduler` binds pending pods
//!   to nodes that fit, through any `kube::Client`. (The kubelet stand-in is `karpenter_kwok::kubelet::Kubelet`,
//!   also at `kwok::kubelet`.)
//! - **The kwok provider's pieces** (feature `kwok`): `kwok::fake()`, the in-memory `FakeCloudProvider` over the
//!   kwok catalogue (`kwok::fake_options()` to set more), and the kwok crate's `catalogue` and `kubelet` modules
//!   re-exported (see the module docs).
//! - **A real control plane** (feature `realplane`): `realplane::require()` starts etcd, kube-apiserver,
//!   kube-scheduler and kube-controller-manager v1.32.6 from the shared k8s folder on free ports for one test
//!   binary (skipped with a printed reason where they are missing, a failure under `CI=true`).
//! - **Real Helm**: `helm::require()` finds the binary tools/get-helm.sh installs (same skipping rule).
//! - **The real kubelet as a judge**: `kubelet_check::KubeletCheck::require()` runs the shared folder's
//!   `kubelet-check.sh` on flags and a `KubeletConfiguration` (same skipping rule).
//!
//! ```
//! use karpenter_testing::{PodOptions, requirement, unschedulable_pod};
//!
//! let pod = unschedulable_pod(PodOptions {
//!     requests: [("cpu", "1"), ("memory", "2Gi")].into(),
//!     node_requirements: vec![requirement("kubernetes.io/arch", "In", &["arm64"])],
//!     ..Default::default()
//! });
//! assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Pending"));
//!
//! use karpenter_testing::{NodePoolOptions, node_pool, nodepool_requirement};
//!
//! let pool = node_pool(NodePoolOptions {
//!     name: Some("spot".into()),
//!     requirements: vec![nodepool_requirement("karpenter.sh/capacity-type", "In", &["spot"])],
//!     limits: [("cpu", "1000")].into(),
//!     ..Default::default()
//! });
//! assert_eq!(pool.spec.template.spec.node_class_ref.name, "default");
//! ```

#![warn(missing_docs)]

#[cfg(feature = "apiserver")]
pub mod apiserver;
pub mod clock;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod helm;
pub mod karpenter;
pub mod kubelet_check;
#[cfg(feature = "kwok")]
pub mod kwok;
pub mod names;
pub mod node;
pub mod pod;
#[cfg(feature = "realplane")]
pub mod realplane;
pub mod resources;
#[cfg(feature = "standins")]
pub mod standins;
pub mod vocabulary;
pub mod workloads;

pub use clock::{Clock, FakeClock, Stopwatch, SystemClock};
#[cfg(feature = "tokio")]
pub use clock::{TokioClock, tokio_now};
pub use karpenter::{
    NodeClaimOptions, NodePoolOptions, TaintEffect, condition, default_node_class_ref, karpenter_taint,
    kwok_node_class_ref, node_claim, node_pool, nodepool_requirement,
};
pub use names::{next_name, reset_names, uid_for};
pub use node::{NodeOptions, node, taint};
pub use pod::{
    PodOptions, container, k8s_time, label_selector, owner_reference, pod, pod_affinity_term, pod_spec, requirement,
    sidecar, toleration, topology_spread, unschedulable_condition, unschedulable_pod, unschedulable_pods,
};
pub use resources::{Resources, map, res};
pub use workloads::{DaemonSetOptions, PdbOptions, daemon_set, pod_disruption_budget};

/// Whether `CI` is set to `true` (or `1`): the tests that need a real part of the machine (the control plane, the
/// kubelet judge, Helm) fail instead of skipping where it is missing.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v.eq_ignore_ascii_case("true") || v == "1")
}
