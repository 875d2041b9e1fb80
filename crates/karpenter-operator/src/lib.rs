//! The controller's reconcile loops and their settings.
//!
//! ```toml
//! [dependencies]
//! karpenter-operator = { version = "0.1" }
//! # This crate leaves the Kubernetes version to the final binary (kube-rs's rule for libraries): the binary
//! # enables exactly one k8s-openapi version feature, the one karpenter-rs is built and tested with being v1_33.
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! ```
//!
//! This crate holds everything `karpenter-controller run` does that is not provider-specific, so the binary
//! stays a thin wiring layer: the [`settings`] (flags and environment variables with upstream Karpenter's names
//! and defaults, which build the runtime's configurations: [`CoreSettings::client_options`],
//! [`CoreSettings::leader_election`], [`CoreSettings::log_config`]), [`eviction`] (the Eviction API, telling
//! Evicted / blocked by a PDB / gone apart) and the controllers. The process plumbing they run on (client, leader
//! election, metrics registry, servers, events, logging, profiles, shutdown) is karpenter-runtime's, re-exported
//! here at its old paths ([`client`], [`leader`], [`metrics`], [`server`], [`events`], [`logging`],
//! [`profiling`], [`shutdown`]).
//!
//! The controllers run on kube-runtime: [`provisioner`], [`lifecycle`], [`termination`], [`expiration`],
//! [`garbage_collection`], [`interruption`], [`nodepool`], [`consistency`] and [`disruption`], over the shared
//! [`state::ClusterState`]. Each is built from one [`ControllerContext`] (client, state, provider, recorder,
//! metrics, clock) plus its own options. [`manager::Manager`] assembles them for one cloud provider and runs them on the
//! leader with the servers (what `karpenter-controller run` does); [`node_classes::KubeNodeClasses`] is the
//! watcher-fed node-class lookup a provider is given. End-to-end tests (`tests/e2e/`) run the whole manager
//! with the kwok provider against the in-process API server and the scheduler, kubelet and ReplicaSet
//! stand-ins, on tokio's paused clock.

pub mod capacitybuffer;
pub mod cloudprovider_metrics;
pub mod consistency;
pub mod context;
pub mod deletion_cost;
pub mod disruption;
pub mod eviction;
pub mod expiration;
pub mod garbage_collection;
pub mod interruption;
pub mod kube_util;
pub mod lifecycle;
pub mod manager;
pub mod node_classes;
pub mod nodeoverlay;
pub mod nodepool;
pub mod observability;
pub mod provisioner;
pub mod repair;
pub mod settings;
pub mod state;
pub mod termination;
pub mod trim;
pub mod vpa;

// The runtime lives in karpenter-runtime; its modules stay reachable at their old paths here.
pub use karpenter_runtime::{client, events, leader, logging, metrics, profiling, server, shutdown};

pub use context::ControllerContext;
pub use settings::{CoreSettings, FeatureGates, LogLevel, MinValuesPolicy, PreferencePolicy, SettingsError};
