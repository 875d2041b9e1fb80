//! The runtime karpenter-rs's controllers run on, apart from the controllers themselves.
//!
//! ```toml
//! [dependencies]
//! karpenter-runtime = { version = "0.1" }
//! # This crate leaves the Kubernetes version to the final binary (kube-rs's rule for libraries): the binary
//! # enables exactly one k8s-openapi version feature, the one karpenter-rs is built and tested with being v1_33.
//! k8s-openapi = { version = "0.29", features = ["v1_33"] }
//! ```
//!
//! - [`metrics`]: the Prometheus registry with upstream Karpenter's metric names and labels (`docs/metrics.md`),
//!   controller-runtime's reconcile and client-go's workqueue series per controller
//!   ([`metrics::Metrics::reconciler`]), and the registry as the cloud provider decorator's sink. Always built:
//!   a provider records its own families into it (karpenter-aws depends on this crate without default features).
//!
//! With the default feature `process`, the process plumbing:
//!
//! - [`client`]: the `kube::Client` (kubeconfig or in-cluster, user agent, QPS/burst token bucket, rustls with
//!   ring, kube's retries for everything but evictions);
//! - [`leader`]: leader election on a Lease (client-go's rules and timings), with its own client;
//! - [`server`]: `/metrics` (with the profiles of [`profiling`]) and the `/healthz` / `/readyz` probes;
//! - [`events`]: Kubernetes events with upstream's reasons, de-duplicated for 2 minutes;
//! - [`logging`]: JSON logs in upstream's shape at a [`logging::LogLevel`];
//! - [`shutdown`]: SIGTERM/SIGINT to a cancellation token.
//!
//! Each takes a small typed configuration ([`client::ClientOptions`], [`leader::LeaderElectionConfig`],
//! [`logging::LogConfig`]); karpenter-operator builds them from its settings. **This crate knows no controller**:
//! it never depends on karpenter-operator (cargo forbids the cycle) nor on a provider
//! (`bins/karpenter-controller/tests/deps.rs` holds the layers).

#![warn(missing_docs)]

#[cfg(feature = "process")]
pub mod client;
#[cfg(feature = "process")]
pub mod events;
#[cfg(feature = "process")]
pub mod leader;
#[cfg(feature = "process")]
pub mod logging;
pub mod metrics;
#[cfg(feature = "process")]
pub mod profiling;
#[cfg(feature = "process")]
pub mod server;
#[cfg(feature = "process")]
pub mod shutdown;
