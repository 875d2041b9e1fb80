//! Cluster stand-ins for end-to-end tests (feature `standins`, implied by `apiserver`): a [`Scheduler`] that
//! binds pending pods to nodes that fit. Its partner, the kubelet stand-in (nodes Ready, Leases, running pods,
//! removal of pods whose graceful deletion has run out), is production code and lives in the kwok provider:
//! `karpenter_kwok::kubelet::Kubelet` (the controller runs it for `--kwok-simulate-kubelet` and as
//! `karpenter-controller kwok-kubelet`).
//!
//! Both are written against `kube::Client` only: they work the same against the in-process
//! `ApiServer` (feature `apiserver`) and a real API server. Each has a `step()` that does one pass and reports
//! what it did — tests call it at the points they choose, with a [`FakeClock`](crate::FakeClock) for the
//! kubelet's notion of time — and a `run(every)` loop for real-time use (spawn it on tokio, abort the task to
//! stop it).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), kube::Error> {
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::{Node, Pod};
//! use kube::api::{Api, PostParams};
//! use karpenter_testing::apiserver::ApiServer;
//! use karpenter_kwok::kubelet::Kubelet;
//! use karpenter_testing::standins::Scheduler;
//! use karpenter_testing::{FakeClock, NodeOptions, PodOptions, node, pod};
//!
//! let server = ApiServer::new();
//! let client = server.client();
//! let clock = FakeClock::default();
//! let nodes: Api<Node> = Api::all(client.clone());
//! let n = node(NodeOptions { name: Some("n1".into()), allocatable: [("cpu", "4"), ("pods", "10")].into(), ready: Some(false), ..Default::default() });
//! nodes.create(&PostParams::default(), &n).await?;
//! let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
//! let p = pod(PodOptions { name: Some("web".into()), requests: [("cpu", "1")].into(), ..Default::default() });
//! pods.create(&PostParams::default(), &p).await?;
//!
//! let kubelet = Kubelet::new(client.clone(), Arc::new(clock.clone()));
//! let scheduler = Scheduler::new(client.clone());
//! assert!(scheduler.step().await?.bound.is_empty()); // the node is not Ready yet: not-ready taint
//! kubelet.step().await?; // Ready, Lease created
//! assert_eq!(scheduler.step().await?.bound, [("default/web".to_string(), "n1".to_string())]);
//! kubelet.step().await?; // the pod runs
//! assert_eq!(pods.get("web").await?.status.and_then(|s| s.phase).as_deref(), Some("Running"));
//! # Ok(())
//! # }
//! ```

mod scheduler;

pub use scheduler::{ScheduleReport, Scheduler};

use serde_json::Value;

/// The condition list with `cond` (matched by `type`) put in place of any existing one of its type.
fn with_condition(mut conditions: Vec<Value>, cond: Value) -> Vec<Value> {
    conditions.retain(|c| c.get("type") != cond.get("type"));
    conditions.push(cond);
    conditions
}
