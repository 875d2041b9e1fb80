//! The kubelet stand-in for kwok nodes ([`Kubelet`]): Ready nodes, node Leases, running pods and the final
//! removal of terminating pods, through a `kube::Client` only. It works the same against the test kit's
//! in-process API server and a real cluster, where it plays the kubelets no machine runs:
//! `karpenter-controller run --kwok-simulate-kubelet` runs it inside the controller, and
//! `karpenter-controller kwok-kubelet` runs it as a process of its own ([`simulate_kubelet_with`] until SIGTERM).
//!
//! Built for a real API server at scale: a pass lists the selected Nodes once and the bound pods once (field
//! selector `spec.nodeName!=`, so pending pods are never transferred), and it remembers when it last renewed
//! each Node's Lease, so a Lease is only read when it is due.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use karpenter_api::namespaced_key;
use karpenter_api::time::rfc3339;
use karpenter_cloudprovider::{Clock, SystemClock};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::provider::MANAGED_LABEL;

/// How often [`simulate_kubelet`] runs a pass by default.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);

/// The namespace of node Leases.
const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Settings of a [`Kubelet`].
#[derive(Debug, Clone)]
pub struct KubeletOptions {
    /// Label selector of the nodes this kubelet runs (`None`: every node), e.g. `karpenter.kwok.sh/managed=true`.
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
///   condition and field (the node lifecycle rules then remove the not-ready taint);
/// - creates the node's Lease in `kube-node-lease` (holder = node name, owned by the Node so it is collected
///   with it) and renews it once `renew_interval` has passed; the last renewal of each Node (by uid) is
///   remembered, so Leases that are not due cost no request;
/// - starts pods bound to its nodes: phase Pending → Running with `startTime` and the `Initialized`,
///   `ContainersReady`, `Ready` and `PodScheduled` conditions True;
/// - removes pods being deleted (`deletionTimestamp` set) once the clock reaches their `deletionTimestamp`
///   (the request time plus the grace period), with a `gracePeriodSeconds: 0` delete carrying a uid precondition,
///   as the real kubelet's final delete.
///
/// Time comes from the [`Clock`] given to [`Kubelet::new`]: tests move a fake clock and call
/// [`step`](Self::step). Writes that lose a race (409) are skipped and retried by the next step. Clones share the
/// remembered renewals.
#[derive(Clone)]
pub struct Kubelet {
    client: Client,
    clock: Arc<dyn Clock>,
    options: KubeletOptions,
    /// Node name → (node uid, last renewTime this kubelet wrote or read).
    renewed: Arc<Mutex<HashMap<String, Renewal>>>,
}

/// A Node's uid and the last `renewTime` of its Lease this kubelet wrote or read.
type Renewal = (Option<String>, DateTime<Utc>);

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet").field("options", &self.options).finish_non_exhaustive()
    }
}

/// RFC 3339 with microseconds (`MicroTime`, a Lease's `renewTime`).
fn micro_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// The condition list with `cond` (matched by `type`) put in place of any existing one of its type.
fn with_condition(mut conditions: Vec<Value>, cond: Value) -> Vec<Value> {
    conditions.retain(|c| c.get("type") != cond.get("type"));
    conditions.push(cond);
    conditions
}

impl Kubelet {
    /// A kubelet for every node, with the default options.
    pub fn new(client: Client, clock: Arc<dyn Clock>) -> Self {
        Self::with_options(client, clock, KubeletOptions::default())
    }

    /// A kubelet with the given options.
    pub fn with_options(client: Client, clock: Arc<dyn Clock>, options: KubeletOptions) -> Self {
        Self { client, clock, options, renewed: Arc::default() }
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
        let names: BTreeSet<String> = nodes.iter().map(ResourceExt::name_any).collect();
        self.renewed.lock().unwrap_or_else(PoisonError::into_inner).retain(|name, _| names.contains(name));
        for node in &nodes {
            if self.ready(&nodes_api, node).await {
                report.nodes_ready.push(node.name_any());
            }
            if self.lease(node).await {
                report.leases.push(node.name_any());
            }
        }
        let pods_api: Api<Pod> = Api::all(self.client.clone());
        let mut pods = pods_api.list(&ListParams::default().fields("spec.nodeName!=")).await?.items;
        pods.retain(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| names.contains(n)));
        pods.sort_by_key(|p| namespaced_key(&p.metadata));
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
                        report.pods_removed.push(namespaced_key(&pod.metadata));
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
                report.pods_started.push(namespaced_key(&pod.metadata));
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

    /// Whether `last` is at least `renew_interval` before `now`.
    fn due(&self, last: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        now.signed_duration_since(last) >= self.options.renew_interval
    }

    fn remember(&self, node: &Node, renewed: DateTime<Utc>) {
        self.renewed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(node.name_any(), (node.metadata.uid.clone(), renewed));
    }

    /// Creates or renews the node's Lease when due; true when it wrote. A Lease renewed recently (by this kubelet,
    /// for this Node's uid) is not even read.
    async fn lease(&self, node: &Node) -> bool {
        let name = node.name_any();
        let now = self.clock.now();
        let known = self.renewed.lock().unwrap_or_else(PoisonError::into_inner).get(&name).cloned();
        if let Some((uid, last)) = known
            && uid == node.metadata.uid
            && !self.due(last, now)
        {
            return false;
        }
        let api: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        let renew = micro_time(now);
        match api.get_opt(&name).await {
            Ok(None) => {
                let lease = json!({
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {
                        "name": name, "namespace": LEASE_NAMESPACE,
                        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.metadata.uid}],
                    },
                    "spec": {
                        "holderIdentity": name, "leaseDurationSeconds": self.options.lease_duration_seconds,
                        "renewTime": renew,
                    },
                });
                let Ok(lease) = serde_json::from_value::<Lease>(lease) else { return false };
                let created = api.create(&PostParams::default(), &lease).await.is_ok();
                if created {
                    self.remember(node, now);
                }
                created
            }
            Ok(Some(lease)) => {
                let last = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.renew_time.as_ref())
                    .and_then(|t| DateTime::<Utc>::from_timestamp_micros(t.0.as_microsecond()));
                if let Some(last) = last
                    && !self.due(last, now)
                {
                    self.remember(node, last);
                    return false;
                }
                let patch = json!({
                    "metadata": {"resourceVersion": lease.metadata.resource_version},
                    "spec": {"holderIdentity": name, "renewTime": renew},
                });
                let renewed = api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await.is_ok();
                if renewed {
                    self.remember(node, now);
                }
                renewed
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

/// Settings of [`simulate_kubelet_with`].
#[derive(Clone, Debug)]
pub struct SimulateOptions {
    /// Time between passes (default [`DEFAULT_INTERVAL`]). A new Node turns Ready within about one interval.
    pub interval: Duration,
    /// The kubelet's settings; `node_selector` defaults to the kwok provider's Nodes.
    pub kubelet: KubeletOptions,
}

impl Default for SimulateOptions {
    fn default() -> Self {
        Self { interval: DEFAULT_INTERVAL, kubelet: kubelet_options() }
    }
}

/// The kubelet settings for kwok nodes: only Nodes labelled [`MANAGED_LABEL`]`=true`, the real kubelet's Lease
/// timing (40 s duration, renewed every 10 s).
pub fn kubelet_options() -> KubeletOptions {
    KubeletOptions { node_selector: Some(format!("{MANAGED_LABEL}=true")), ..KubeletOptions::default() }
}

/// A kubelet stand-in for the kwok provider's Nodes (see [`kubelet_options`]); call
/// [`step`](Kubelet::step) for one pass.
pub fn kwok_kubelet(client: Client, clock: Arc<dyn Clock>) -> Kubelet {
    Kubelet::with_options(client, clock, kubelet_options())
}

/// Runs the kubelet stand-in for the kwok provider's Nodes with the default settings until `shutdown` is
/// cancelled: every pass marks new Nodes Ready, creates or renews their Leases in `kube-node-lease`, starts the
/// pods bound to them and removes pods whose graceful deletion ran out. What the binary runs for
/// `--kwok-simulate-kubelet`.
pub async fn simulate_kubelet(client: Client, shutdown: CancellationToken) {
    simulate_kubelet_with(client, Arc::new(SystemClock), SimulateOptions::default(), shutdown).await;
}

/// [`simulate_kubelet`] with a clock and settings. A pass that fails (e.g. the API server is unreachable) is
/// logged and retried on the next tick.
pub async fn simulate_kubelet_with(
    client: Client,
    clock: Arc<dyn Clock>,
    options: SimulateOptions,
    shutdown: CancellationToken,
) {
    let kubelet = Kubelet::with_options(client, clock, options.kubelet);
    let mut tick = tokio::time::interval(options.interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let pass = tokio::select! {
            _ = shutdown.cancelled() => return,
            pass = kubelet.step() => pass,
        };
        match pass {
            Ok(report) if report != KubeletReport::default() => tracing::debug!(
                nodes_ready = report.nodes_ready.len(),
                leases = report.leases.len(),
                pods_started = report.pods_started.len(),
                pods_removed = report.pods_removed.len(),
                "simulated kubelet pass"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "simulated kubelet pass failed"),
        }
    }
}
