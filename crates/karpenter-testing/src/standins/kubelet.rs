//! The kubelet stand-in: Ready nodes, node Leases, running pods, and the final removal of terminating pods.

use std::sync::Arc;
use std::time::Duration;

use chrono::DateTime;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{pod_key, rfc3339, with_condition};
use crate::clock::Clock;

/// Settings of a [`Kubelet`].
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// Label selector of the nodes this kubelet runs (`None`: every node), e.g. `kwok.x-k8s.io/node=fake`.
    pub node_selector: Option<String>,
    /// `spec.leaseDurationSeconds` of the node Leases (the real kubelet's default: 40).
    pub lease_duration_seconds: i32,
    /// How old `renewTime` may get before a step renews the Lease (the real kubelet: every 10 s, a quarter of
    /// the duration).
    pub renew_interval: chrono::Duration,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        Self { node_selector: None, lease_duration_seconds: 40, renew_interval: chrono::Duration::seconds(10) }
    }
}

/// What one [`Kubelet::step`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletReport {
    /// Nodes whose Ready condition was set to True.
    pub nodes_ready: Vec<String>,
    /// Node Leases created or renewed.
    pub leases: Vec<String>,
    /// `namespace/name` of pods started (phase Running, Ready).
    pub pods_started: Vec<String>,
    /// `namespace/name` of terminating pods removed (their grace period had passed).
    pub pods_removed: Vec<String>,
}

/// A stand-in for the kubelets of a cluster's nodes, through `kube::Client`:
///
/// - sets each node's `Ready` condition to True (reason `KubeletReady`) when it is not, keeping every other
///   condition and field (the API server's node lifecycle rules then remove the not-ready taint);
/// - creates the node's Lease in `kube-node-lease` (holder = node name, owned by the Node so it is collected
///   with it) and renews it once `renew_interval` has passed;
/// - starts pods bound to its nodes: phase Pending → Running with `startTime` and the `Initialized`,
///   `ContainersReady`, `Ready` and `PodScheduled` conditions True;
/// - removes pods being deleted (`deletionTimestamp` set) once the clock reaches their `deletionTimestamp`
///   (the request time plus the grace period), with a `gracePeriodSeconds: 0` delete carrying a uid precondition,
///   as the real kubelet's final delete.
///
/// Time comes from the [`Clock`] given to [`Kubelet::new`]: tests move a [`FakeClock`](crate::FakeClock) and
/// call [`step`](Self::step). Writes that lose a race (409) are skipped and retried by the next step.
#[derive(Clone)]
pub struct Kubelet {
    client: Client,
    clock: Arc<dyn Clock>,
    options: KubeletOptions,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet").field("options", &self.options).finish_non_exhaustive()
    }
}

fn micro_time(t: DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

impl Kubelet {
    /// A kubelet for every node, with the default options.
    pub fn new(client: Client, clock: Arc<dyn Clock>) -> Self {
        Self::with_options(client, clock, KubeletOptions::default())
    }

    /// A kubelet with the given options.
    pub fn with_options(client: Client, clock: Arc<dyn Clock>, options: KubeletOptions) -> Self {
        Self { client, clock, options }
    }

    /// One pass over the nodes and their pods. List errors are returned; failed writes are skipped.
    pub async fn step(&self) -> Result<KubeletReport, kube::Error> {
        let mut report = KubeletReport::default();
        let nodes_api: Api<Node> = Api::all(self.client.clone());
        let mut lp = ListParams::default();
        if let Some(sel) = &self.options.node_selector {
            lp = lp.labels(sel);
        }
        let nodes = nodes_api.list(&lp).await?.items;
        for node in &nodes {
            if self.ready(&nodes_api, node).await {
                report.nodes_ready.push(node.name_any());
            }
            if self.lease(node).await {
                report.leases.push(node.name_any());
            }
        }
        let names: std::collections::BTreeSet<String> = nodes.iter().map(ResourceExt::name_any).collect();
        let pods_api: Api<Pod> = Api::all(self.client.clone());
        let mut pods = pods_api.list(&ListParams::default()).await?.items;
        pods.retain(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| names.contains(n)));
        pods.sort_by_key(pod_key);
        let now = self.clock.now();
        for pod in &pods {
            let api: Api<Pod> =
                Api::namespaced(self.client.clone(), pod.metadata.namespace.as_deref().unwrap_or_default());
            if let Some(deadline) = &pod.metadata.deletion_timestamp {
                if deadline.0.as_second() <= now.timestamp() {
                    let dp = DeleteParams {
                        grace_period_seconds: Some(0),
                        preconditions: Some(Preconditions { uid: pod.metadata.uid.clone(), resource_version: None }),
                        ..Default::default()
                    };
                    if api.delete(&pod.name_any(), &dp).await.is_ok() {
                        report.pods_removed.push(pod_key(pod));
                    }
                }
                continue;
            }
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
            if phase != "Pending" {
                continue;
            }
            let at = rfc3339(now);
            let mut conditions: Vec<Value> = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .map(|cs| cs.iter().filter_map(|c| serde_json::to_value(c).ok()).collect())
                .unwrap_or_default();
            for ctype in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
                let keep = conditions.iter().any(|c| c["type"] == ctype && c["status"] == "True");
                if !keep {
                    let cond =
                        json!({"type": ctype, "status": "True", "lastProbeTime": null, "lastTransitionTime": at});
                    conditions = with_condition(conditions, cond);
                }
            }
            let patch = json!({
                "metadata": {"resourceVersion": pod.metadata.resource_version},
                "status": {"phase": "Running", "startTime": at, "conditions": conditions},
            });
            if api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await.is_ok() {
                report.pods_started.push(pod_key(pod));
            }
        }
        Ok(report)
    }

    /// Sets Ready=True when it is not; true when it wrote.
    async fn ready(&self, api: &Api<Node>, node: &Node) -> bool {
        let conditions = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        if conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True") {
            return false;
        }
        let at = rfc3339(self.clock.now());
        let conditions: Vec<Value> = conditions.iter().filter_map(|c| serde_json::to_value(c).ok()).collect();
        let cond = json!({
            "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
            "lastHeartbeatTime": at, "lastTransitionTime": at,
        });
        let patch = json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "status": {"conditions": with_condition(conditions, cond)},
        });
        api.patch_status(&node.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await.is_ok()
    }

    /// Creates or renews the node's Lease; true when it wrote.
    async fn lease(&self, node: &Node) -> bool {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        let name = node.name_any();
        let now = self.clock.now();
        let renew = micro_time(now);
        match api.get_opt(&name).await {
            Ok(None) => {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {
                        "name": name, "namespace": "kube-node-lease",
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.metadata.uid}],
                    },
                    "spec": {
                        "holderIdentity": name, "leaseDurationSeconds": self.options.lease_duration_seconds,
                        "renewTime": renew,
                    },
                });
                match serde_json::from_value::<Lease>(lease) {
                    Ok(lease) => api.create(&PostParams::default(), &lease).await.is_ok(),
                    Err(_) => false,
                }
            }
            Ok(Some(lease)) => {
                let last = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0.as_microsecond());
                let due = last.is_none_or(|us| {
                    now.timestamp_micros().saturating_sub(us)
                        >= self.options.renew_interval.num_microseconds().unwrap_or(i64::MAX)
                });
                if !due {
                    return false;
                }
                let patch = json!({
                    "metadata": {"resourceVersion": lease.metadata.resource_version},
                    "spec": {"holderIdentity": name, "renewTime": renew},
                });
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.is_ok()
            }
            Err(_) => false,
        }
    }

    /// Runs [`step`](Self::step) every `every`, forever (errors are retried on the next tick). Spawn it and abort
    /// the task to stop.
    pub async fn run(self, every: Duration) {
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let _ = self.step().await;
        }
    }
}
