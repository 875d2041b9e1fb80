//! Cluster stand-ins for end-to-end tests (feature `standins`, implied by `apiserver`): a [`Scheduler`] that
//! binds pending pods to nodes that fit, and a [`Kubelet`] that makes nodes Ready, renews their Leases, runs bound
//! pods and removes pods whose graceful deletion has run out.
//!
//! Both are written against `kube::Client` only: they work the same against the in-process
//! `ApiServer` (feature `apiserver`) and a real API server (the kwok provider reuses the kubelet for
//! `--kwok-simulate-kubelet`). Each has a `step()` that does one pass and reports what it did — tests call it at
//! the points they choose, with a [`FakeClock`](crate::FakeClock) for the kubelet's notion of time — and a
//! `run(every)` loop for real-time use (spawn it on tokio, abort the task to stop it).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), kube::Error> {
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::{Node, Pod};
//! use kube::api::{Api, PostParams};
//! use karpenter_testing::apiserver::ApiServer;
//! use karpenter_testing::standins::{Kubelet, Scheduler};
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

mod kubelet;
mod scheduler;

pub use kubelet::{Kubelet, KubeletOptions, KubeletReport};
pub use scheduler::{ScheduleReport, Scheduler};

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;

/// RFC 3339 with seconds, as the API server writes `Time` fields.
fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The condition list with `cond` (matched by `type`) put in place of any existing one of its type.
fn with_condition(mut conditions: Vec<Value>, cond: Value) -> Vec<Value> {
    conditions.retain(|c| c.get("type") != cond.get("type"));
    conditions.push(cond);
    conditions
}

/// `"{namespace}/{name}"`.
fn pod_key(p: &k8s_openapi::api::core::v1::Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or_default(),
        p.metadata.name.as_deref().unwrap_or_default()
    )
}
