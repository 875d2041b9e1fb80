//! `metrics.pod`: upstream's pod state gauge and pod latency metrics, from the state's pod changes and a 30 s
//! resync (upstream requeues every pod every 30 s).
//!
//! - `karpenter_pods_state` = 1 per pod, labelled `name`, `namespace`, `owner` (the first owner reference as a
//!   self link), `node`, `nodepool`, `zone`, `arch`, `capacity_type`, `instance_type` (the Node's labels), `phase`,
//!   and, as upstream, `scheduled`, `ready` and `managed` (the Node has a NodePool label). Replaced when any label
//!   changes, removed when the pod goes.
//! - `pods_unbound_time_seconds` / `pods_unstarted_time_seconds`: seconds since creation of a Pending pod not
//!   bound yet / not running yet. The unbound gauge goes once the pod is bound, the unstarted one once it is Ready
//!   or terminal; both when it is deleted.
//! - `pods_bound_duration_seconds` / `pods_startup_duration_seconds`: observed once per pod this controller saw
//!   Pending: from creation to its `PodScheduled` transition when it leaves Pending bound, and to its `Ready`
//!   transition when it becomes Ready (a pod that ends without becoming Ready is not observed: its Ready=False
//!   time would measure nothing).
//! - The `pods_provisioning_*` variants measure the same from the time Karpenter first thought the pod could
//!   schedule ([`SchedulingTimes`]) instead of its creation, for the pods it has one for.
//! - `pods_provisioning_scheduling_undecided_time_seconds`: seconds since the provisioner first saw a pod it has
//!   not decided about; removed once it has, or the pod is bound, terminal or gone.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::CompactPod;
use karpenter_api::labels;
use tokio_util::sync::CancellationToken;

use super::SchedulingTimes;
use super::scheduling_times::seconds;
use crate::context::ControllerContext;
use crate::metrics::Metrics;
use crate::state::PodChange;

/// The controller's name, as upstream's.
pub const CONTROLLER: &str = "metrics.pod";
/// How often every pod's gauges are brought up to date without a change.
pub const RESYNC: Duration = Duration::from_secs(30);

/// The per-pod gauges keyed by `name` and `namespace`.
const WAITING_GAUGES: [&str; 5] = [
    "pods_unbound_time_seconds",
    "pods_unstarted_time_seconds",
    "pods_provisioning_unbound_time_seconds",
    "pods_provisioning_unstarted_time_seconds",
    "pods_provisioning_scheduling_undecided_time_seconds",
];

#[derive(Debug, Default)]
struct Tracking {
    /// Pods seen Pending: their startup is observed when they become Ready.
    pending: HashSet<String>,
    /// Pods seen Pending: their binding is observed when they leave Pending bound.
    unscheduled: HashSet<String>,
    /// The labels of each pod's `pods_state` series.
    state: PodStateSeries,
}

/// The pod metrics (see the module docs).
#[derive(Debug)]
pub struct PodMetrics {
    ctx: ControllerContext,
    times: SchedulingTimes,
    tracking: Mutex<Tracking>,
}

impl PodMetrics {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone(), times: ctx.state.scheduling_times().clone(), tracking: Mutex::default() }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let mut changes = self.ctx.state.pod_changes();
        let mut resync = tokio::time::interval(RESYNC);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        resync.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                change = changes.recv() => match change {
                    Some(PodChange::Listed(pod) | PodChange::Applied(pod)) => self.reconcile(&pod),
                    Some(PodChange::Deleted(pod)) => self.forget(&pod.key()),
                    None => return,
                },
                _ = resync.tick() => self.resync(),
            }
        }
    }

    /// Brings every pod's gauges up to date and drops those of pods no longer in the state.
    pub fn resync(&self) {
        let pods = self.ctx.state.list_shared::<CompactPod>();
        let keys: BTreeSet<String> = pods.iter().map(|p| p.key()).collect();
        for pod in &pods {
            self.reconcile(pod);
        }
        let gone: Vec<String> = {
            let t = self.lock();
            t.state
                .by_pod
                .keys()
                .chain(t.pending.iter())
                .chain(t.unscheduled.iter())
                .filter(|k| !keys.contains(*k))
                .cloned()
                .collect()
        };
        for key in gone {
            self.forget(&key);
        }
        // Pods a re-list dropped without a delete event.
        self.times.retain(|key| keys.contains(key));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tracking> {
        self.tracking.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A deleted pod: every series of it goes.
    pub fn forget(&self, key: &str) {
        let metrics: &Metrics = &self.ctx.metrics;
        let mut t = self.lock();
        t.pending.remove(key);
        t.unscheduled.remove(key);
        t.state.delete(metrics, key);
        drop(t);
        let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
        for gauge in WAITING_GAUGES {
            remove_waiting(metrics, gauge, name, namespace);
        }
        self.times.forget(key);
    }

    /// Records one pod's current state.
    pub fn reconcile(&self, pod: &CompactPod) {
        let metrics: &Metrics = &self.ctx.metrics;
        let key = pod.key();
        let now = self.ctx.clock.now();
        let labels = self.state_labels(pod);
        let mut t = self.lock();
        t.state.update(metrics, &key, labels);
        let facts = Facts::of(pod);
        self.undecided(pod, &key, &facts, now);
        let schedulable = self.times.schedulable_time(&key);
        self.startup(&mut t, pod, &key, &facts, schedulable, now);
        self.bound(&mut t, pod, &key, &facts, schedulable, now);
    }

    fn undecided(&self, pod: &CompactPod, key: &str, facts: &Facts, now: DateTime<Utc>) {
        let (name, namespace) = name_namespace(pod);
        let gauge = "pods_provisioning_scheduling_undecided_time_seconds";
        if self.times.decision_time(key).is_some() || facts.scheduled || pod.node_name().is_some() || pod.is_terminal()
        {
            remove_waiting(&self.ctx.metrics, gauge, name, namespace);
        } else if let Some(acked) = self.times.ack_time(key) {
            self.ctx
                .metrics
                .pods_provisioning_scheduling_undecided_time_seconds(name, namespace)
                .set(seconds(now - acked));
        }
    }

    fn startup(
        &self,
        t: &mut Tracking,
        pod: &CompactPod,
        key: &str,
        facts: &Facts,
        since: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) {
        let metrics: &Metrics = &self.ctx.metrics;
        let (name, namespace) = name_namespace(pod);
        let waiting = |metrics: &Metrics| {
            if let Some(created) = facts.created {
                metrics.pods_unstarted_time_seconds(name, namespace).set(seconds(now - created));
            }
            match since {
                Some(since) => {
                    metrics.pods_provisioning_unstarted_time_seconds(name, namespace).set(seconds(now - since));
                }
                None => remove_waiting(metrics, "pods_provisioning_unstarted_time_seconds", name, namespace),
            }
        };
        if pod.phase() == Some("Pending") {
            waiting(metrics);
            t.pending.insert(key.to_string());
            return;
        }
        if !t.pending.contains(key) {
            return;
        }
        if facts.ready {
            remove_waiting(metrics, "pods_unstarted_time_seconds", name, namespace);
            remove_waiting(metrics, "pods_provisioning_unstarted_time_seconds", name, namespace);
            if let (Some(created), Some(ready_at)) = (facts.created, facts.ready_at) {
                metrics.pods_startup_duration_seconds().observe(seconds(ready_at - created));
            }
            if let (Some(since), Some(ready_at)) = (since, facts.ready_at) {
                metrics.pods_provisioning_startup_duration_seconds().observe(seconds(ready_at - since));
            }
            t.pending.remove(key);
            self.times.forget(key);
        } else if pod.is_terminal() {
            remove_waiting(metrics, "pods_unstarted_time_seconds", name, namespace);
            remove_waiting(metrics, "pods_provisioning_unstarted_time_seconds", name, namespace);
            t.pending.remove(key);
            self.times.forget(key);
        } else {
            waiting(metrics);
        }
    }

    fn bound(
        &self,
        t: &mut Tracking,
        pod: &CompactPod,
        key: &str,
        facts: &Facts,
        since: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) {
        let metrics: &Metrics = &self.ctx.metrics;
        let (name, namespace) = name_namespace(pod);
        if pod.phase() == Some("Pending") {
            if facts.scheduled {
                // Bound but not started: nothing waits for a binding any more. (Upstream leaves the gauge at its
                // last value until the pod leaves Pending; a gone wait has no series here.)
                remove_waiting(metrics, "pods_unbound_time_seconds", name, namespace);
                remove_waiting(metrics, "pods_provisioning_unbound_time_seconds", name, namespace);
            } else {
                if let Some(created) = facts.created {
                    metrics.pods_unbound_time_seconds(name, namespace).set(seconds(now - created));
                }
                match since {
                    Some(since) => {
                        metrics.pods_provisioning_unbound_time_seconds(name, namespace).set(seconds(now - since));
                    }
                    None => remove_waiting(metrics, "pods_provisioning_unbound_time_seconds", name, namespace),
                }
            }
            t.unscheduled.insert(key.to_string());
            return;
        }
        if let Some(bound_at) = facts.scheduled_at.filter(|_| facts.scheduled && t.unscheduled.contains(key)) {
            remove_waiting(metrics, "pods_unbound_time_seconds", name, namespace);
            remove_waiting(metrics, "pods_provisioning_unbound_time_seconds", name, namespace);
            if let Some(created) = facts.created {
                metrics.pods_bound_duration_seconds().observe(seconds(bound_at - created));
            }
            if let Some(since) = since {
                metrics.pods_provisioning_bound_duration_seconds().observe(seconds(bound_at - since));
            }
            t.unscheduled.remove(key);
        }
    }

    /// The pod's `pods_state` label values, in [`POD_STATE_LABELS`] order.
    fn state_labels(&self, pod: &CompactPod) -> [String; 13] {
        let (name, namespace) = name_namespace(pod);
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .next()
            .map(|o| format!("/apis/{}/namespaces/{namespace}/{}s/{}", o.api_version, o.kind.to_lowercase(), o.name))
            .unwrap_or_default();
        let node = pod.node_name().and_then(|n| self.ctx.state.get_shared::<Node>(n));
        let node_label = |key: &str| {
            node.as_ref().and_then(|n| n.metadata.labels.as_ref()).and_then(|l| l.get(key)).cloned().unwrap_or_default()
        };
        let facts = Facts::of(pod);
        let nodepool = node_label(labels::NODE_POOL);
        [
            name.to_string(),
            namespace.to_string(),
            owner,
            pod.node_name().unwrap_or_default().to_string(),
            pod.node_name().is_some().to_string(),
            nodepool.clone(),
            node_label(labels::ZONE),
            node_label(labels::ARCH),
            node_label(labels::CAPACITY_TYPE),
            node_label(labels::INSTANCE_TYPE),
            pod.phase().unwrap_or_default().to_string(),
            facts.ready.to_string(),
            (!nodepool.is_empty()).to_string(),
        ]
    }
}

fn name_namespace(pod: &CompactPod) -> (&str, &str) {
    (pod.metadata.name.as_deref().unwrap_or_default(), pod.metadata.namespace.as_deref().unwrap_or("default"))
}

fn remove_waiting(metrics: &Metrics, gauge: &str, name: &str, namespace: &str) {
    metrics.remove(gauge, &[("name", name), ("namespace", namespace)]);
}

/// What the latency rules read of a pod.
struct Facts {
    created: Option<DateTime<Utc>>,
    /// `PodScheduled` is True.
    scheduled: bool,
    /// When `PodScheduled` last changed (whatever its status).
    scheduled_at: Option<DateTime<Utc>>,
    /// `Ready` is True.
    ready: bool,
    /// When `Ready` became True, if it is (a condition without a transition time cannot be measured).
    ready_at: Option<DateTime<Utc>>,
}

impl Facts {
    fn of(pod: &CompactPod) -> Self {
        let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
        let find = |kind: &str| conditions.iter().find(|c| c.type_ == kind);
        let at = |c: &k8s_openapi::api::core::v1::PodCondition| {
            c.last_transition_time.as_ref().and_then(karpenter_api::time::from_k8s)
        };
        let scheduled = find("PodScheduled");
        let ready = find("Ready").filter(|c| c.status == "True");
        Facts {
            created: pod.metadata.creation_timestamp.as_ref().and_then(karpenter_api::time::from_k8s),
            scheduled: scheduled.is_some_and(|c| c.status == "True"),
            scheduled_at: scheduled.and_then(at),
            ready: ready.is_some(),
            ready_at: ready.and_then(at),
        }
    }
}

/// The `pods_state` label names, in the order [`PodStateSeries`] stores their values.
pub const POD_STATE_LABELS: [&str; 13] = [
    "name",
    "namespace",
    "owner",
    "node",
    "scheduled",
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
    "ready",
    "managed",
];

/// The `pods_state` series of each pod, kept as one string of its label values (the registry holds the labels
/// themselves; this copy only needs to name the series to remove, and at thousands of pods a map of owned
/// label pairs per pod would cost as much again as the registry).
#[derive(Debug, Default)]
struct PodStateSeries {
    by_pod: std::collections::HashMap<String, Box<str>>,
}

/// Separates label values in [`PodStateSeries`]: a control character no label value holds.
const SEPARATOR: char = '\u{1f}';

impl PodStateSeries {
    fn labels(values: &str) -> BTreeMap<String, String> {
        POD_STATE_LABELS.iter().zip(values.split(SEPARATOR)).map(|(k, v)| ((*k).to_string(), v.to_string())).collect()
    }

    /// Sets the pod's series to `values` (in [`POD_STATE_LABELS`] order), removing the one it replaces.
    fn update(&mut self, metrics: &Metrics, pod: &str, values: [String; 13]) {
        let joined = values.join(&SEPARATOR.to_string());
        if self.by_pod.get(pod).is_some_and(|old| **old == *joined) {
            return;
        }
        self.delete(metrics, pod);
        metrics.pods_state(&Self::labels(&joined)).set(1.0);
        self.by_pod.insert(pod.to_string(), joined.into_boxed_str());
    }

    fn delete(&mut self, metrics: &Metrics, pod: &str) {
        if let Some(old) = self.by_pod.remove(pod) {
            let labels = Self::labels(&old);
            let pairs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            metrics.remove("pods_state", &pairs);
        }
    }
}
