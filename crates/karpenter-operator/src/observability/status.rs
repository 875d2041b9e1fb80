//! `operatorpkg.<kind>.status`: the `operator_<kind>_status_condition_*` and `operator_<kind>_termination_*`
//! families of NodeClaims, NodePools, Nodes and the provider's node classes, recorded in one place for every kind, the way
//! upstream's operator package (`awslabs/operatorpkg`, `status.Controller`) records them.
//!
//! A [`StatusRecorder`] remembers, per object, the conditions it saw last; each time it looks at an object again
//! (on every change the watch reports, and every [`PERIOD`] for every object, as upstream's requeue) it:
//!
//! - sets `status_condition_count` to 1 and `status_condition_current_status_seconds` to the time since the
//!   condition's `lastTransitionTime`, for each condition the object has, by name, namespace, type, status and
//!   reason; the series of a condition that went away or changed status or reason (or whose object labels
//!   changed) are removed;
//! - counts `status_condition_transitions_total` for each condition that is new or has a new status, and
//!   observes in `status_condition_transition_seconds` how long the old status lasted (the difference of the two
//!   `lastTransitionTime`s), labelled with the status left. Changes between two looks are not seen (upstream's
//!   are best effort too): the counts are a lower bound;
//! - while the object has a deletion timestamp, sets `termination_current_time_seconds` to the time since it.
//!
//! When the object is gone (a delete event, or missing from a re-list), its gauges are removed and, if it was
//! seen terminating, `termination_duration_seconds` observes the time from its deletion timestamp to now: the
//! removal of its last finalizer. Series carry the object's labels upstream copies: the provider's node class
//! labels (NodeClaims, Nodes), `karpenter.sh/nodepool` (NodeClaims, Nodes) and `karpenter.sh/initialized`
//! (Nodes), as [`StatusKind::object_labels`] lists.
//!
//! NodeClaims, NodePools and Nodes are read from the cluster state's watch ([`ClusterState::controller_source`]),
//! not a watch of their own; they are what `DISABLE_CLUSTER_STATE_OBSERVABILITY` turns off, as upstream. The
//! provider's node classes of a kind registered with status metrics
//! ([`NodeClassRegistration::status_metrics`]) are watched here as dynamic objects, named by the registered kind
//! (`operator_<lower-cased kind>_…`, `operatorpkg.<lower-cased kind>.status`), and never turned off: upstream's
//! AWS provider runs that status controller unconditionally. Upstream also emits transition events and the
//! deprecated kind-labelled `operator_status_condition_*` families; neither is done here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::condition::Condition;
use karpenter_api::time::{from_k8s, parse_rfc3339};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_cloudprovider::Clock;
use kube::api::DynamicObject;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::metrics::{
    Labels, Metrics, OBJECT_CONDITION_LABELS, StatusConditionMetrics, StatusKind, TERMINATING_OBJECT_LABELS,
    TRANSITION_LABELS, TRANSITION_SECONDS_LABELS, prometheus_label_name,
};
use crate::node_classes::NodeClassRegistration;
use crate::state::{ClusterState, Tracked};

/// How often every object is looked at again, refreshing the time gauges (upstream's requeue).
pub const PERIOD: Duration = Duration::from_secs(10);

/// The controller's name for a kind, as upstream's (`operatorpkg.nodeclaim.status`).
pub fn controller_name(kind: StatusKind) -> String {
    format!("operatorpkg.{}.status", kind.metric_name())
}

/// The controller's name for a node-class kind (`operatorpkg.<lower-cased kind>.status`, as upstream's).
pub fn node_class_controller_name(kind: &str) -> String {
    format!("operatorpkg.{}.status", kind.to_lowercase())
}

/// One condition as the recorder reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedCondition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    /// `None` when absent or unreadable: the time gauges then read 0 and no transition duration is observed.
    pub last_transition: Option<DateTime<Utc>>,
}

/// One object as the recorder reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ObservedObject {
    pub name: String,
    pub namespace: String,
    /// The object's `metadata.labels` (the recorder picks the ones its kind copies onto the series).
    pub labels: BTreeMap<String, String>,
    pub conditions: Vec<ObservedCondition>,
    pub deletion: Option<DateTime<Utc>>,
}

/// A kind whose status conditions are recorded.
pub trait StatusObject: Resource + ResourceExt {
    const STATUS_KIND: StatusKind;
    fn status_conditions(&self) -> Vec<ObservedCondition>;

    /// The object as the recorder reads it.
    fn observed(&self) -> ObservedObject {
        ObservedObject {
            name: self.name_any(),
            namespace: self.namespace().unwrap_or_default(),
            labels: self.labels().clone(),
            conditions: self.status_conditions(),
            deletion: self.meta().deletion_timestamp.as_ref().and_then(from_k8s),
        }
    }
}

fn from_conditions(conditions: &[Condition]) -> Vec<ObservedCondition> {
    conditions
        .iter()
        .map(|c| ObservedCondition {
            type_: c.type_.clone(),
            status: c.status.as_str().to_string(),
            reason: c.reason.clone(),
            last_transition: parse_rfc3339(&c.last_transition_time),
        })
        .collect()
}

impl StatusObject for NodeClaim {
    const STATUS_KIND: StatusKind = StatusKind::NodeClaim;
    fn status_conditions(&self) -> Vec<ObservedCondition> {
        from_conditions(self.conditions())
    }
}

impl StatusObject for NodePool {
    const STATUS_KIND: StatusKind = StatusKind::NodePool;
    fn status_conditions(&self) -> Vec<ObservedCondition> {
        from_conditions(self.conditions())
    }
}

impl StatusObject for Node {
    const STATUS_KIND: StatusKind = StatusKind::Node;
    fn status_conditions(&self) -> Vec<ObservedCondition> {
        let conditions = self.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
        conditions
            .iter()
            .map(|c| ObservedCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone().unwrap_or_default(),
                last_transition: c.last_transition_time.as_ref().and_then(from_k8s),
            })
            .collect()
    }
}

/// What the recorder remembers of one object.
#[derive(Debug, Default)]
struct Seen {
    /// By type.
    conditions: BTreeMap<String, ObservedCondition>,
    /// The object's labels on its series when last seen.
    labels: Labels,
    /// The `count` and `current_status_seconds` series set for it (the same label sets for both).
    condition_series: BTreeSet<Labels>,
    /// Its deletion timestamp, once seen terminating.
    deletion: Option<DateTime<Utc>>,
    /// Its `termination_current_time_seconds` series.
    terminating_series: Option<Labels>,
}

/// Records one kind's families (see the module docs). Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct StatusRecorder {
    /// The lower-cased kind, as in the metric names.
    kind: String,
    families: StatusConditionMetrics,
    /// (object label key, series label name) of the labels copied onto the series, in series order.
    copied_labels: Vec<(String, String)>,
    /// By (namespace, name).
    seen: Mutex<BTreeMap<(String, String), Seen>>,
}

impl StatusRecorder {
    /// A recorder of `kind`; `node_class_label_keys` are the provider's node class label keys
    /// (`NodeClassKind::label_key`), copied onto the series of the kinds that carry them.
    pub fn new(kind: StatusKind, metrics: Arc<Metrics>, node_class_label_keys: &[String]) -> Self {
        let classes = node_class_label_keys.iter().filter(|_| kind.carries_node_class_labels());
        let copied_labels = classes
            .map(|key| (key.clone(), prometheus_label_name(key)))
            .chain(kind.object_labels().iter().map(|(key, name)| ((*key).to_string(), (*name).to_string())))
            .collect();
        let families = metrics.status_conditions(kind).clone();
        Self { kind: kind.metric_name().to_owned(), families, copied_labels, seen: Mutex::default() }
    }

    /// A recorder of a provider's node-class kind (`kind` as Kubernetes names it: `ToyNodeClass` records
    /// `operator_toynodeclass_…`), whose series carry no object labels. `None` when `kind` is a core kind's name
    /// ([`Metrics::node_class_status_conditions`]).
    pub fn for_node_class(kind: &str, metrics: &Metrics) -> Option<Self> {
        let families = metrics.node_class_status_conditions(kind)?;
        Some(Self { kind: kind.to_lowercase(), families, copied_labels: Vec::new(), seen: Mutex::default() })
    }

    /// The lower-cased kind, as in the metric names.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    fn object_labels(&self, labels: &BTreeMap<String, String>) -> Labels {
        self.copied_labels
            .iter()
            .map(|(key, name)| (name.clone(), labels.get(key).cloned().unwrap_or_default()))
            .collect()
    }

    /// Looks at an object present in the cluster (see the module docs).
    pub fn observe(&self, obj: &ObservedObject, now: DateTime<Utc>) {
        let m = &self.families;
        let labels = self.object_labels(&obj.labels);
        let with = |names: &[&str], values: &[&str]| -> Labels {
            let fixed = names.iter().zip(values).map(|(n, v)| ((*n).to_string(), (*v).to_string()));
            fixed.chain(labels.iter().cloned()).collect()
        };
        let mut all = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = all.entry((obj.namespace.clone(), obj.name.clone())).or_default();

        if let Some(deleted) = obj.deletion {
            let series = with(TERMINATING_OBJECT_LABELS, &[&obj.name, &obj.namespace]);
            if let Some(old) = seen.terminating_series.replace(series.clone()).filter(|old| *old != series) {
                m.termination_current_time_seconds().remove(&old);
            }
            m.termination_current_time_seconds().get_or_create(&series).set(seconds(deleted, now));
            seen.deletion = Some(deleted);
        }

        let mut condition_series = BTreeSet::new();
        for c in &obj.conditions {
            let series = with(OBJECT_CONDITION_LABELS, &[&obj.name, &obj.namespace, &c.type_, &c.status, &c.reason]);
            m.count().get_or_create(&series).set(1.0);
            let since = c.last_transition.map_or(0.0, |t| seconds(t, now));
            m.current_status_seconds().get_or_create(&series).set(since);
            condition_series.insert(series);
        }
        for old in seen.condition_series.difference(&condition_series) {
            m.count().remove(old);
            m.current_status_seconds().remove(old);
        }
        seen.condition_series = condition_series;

        for c in &obj.conditions {
            let before = seen.conditions.get(&c.type_);
            if before.is_some_and(|b| b.status == c.status) {
                continue;
            }
            m.transitions().get_or_create(&with(TRANSITION_LABELS, &[&c.type_, &c.status, &c.reason])).inc();
            if let Some((b, (from, to))) = before.and_then(|b| Some((b, (b.last_transition?, c.last_transition?)))) {
                let kept = (to - from).num_milliseconds() as f64 / 1000.0;
                m.transition_seconds()
                    .get_or_create(&with(TRANSITION_SECONDS_LABELS, &[&b.type_, &b.status]))
                    .observe(kept);
            }
        }
        seen.conditions = obj.conditions.iter().map(|c| (c.type_.clone(), c.clone())).collect();
        seen.labels = labels;
    }

    /// The object `namespace/name` is gone: its gauges go, and its termination is timed if it was seen
    /// terminating.
    pub fn gone(&self, namespace: &str, name: &str, now: DateTime<Utc>) {
        let removed = self.seen.lock().unwrap_or_else(PoisonError::into_inner).remove(&(namespace.into(), name.into()));
        let Some(seen) = removed else { return };
        let m = &self.families;
        for series in &seen.condition_series {
            m.count().remove(series);
            m.current_status_seconds().remove(series);
        }
        if let Some(series) = &seen.terminating_series {
            m.termination_current_time_seconds().remove(series);
        }
        if let Some(deleted) = seen.deletion {
            m.termination_duration_seconds().get_or_create(&seen.labels).observe(seconds(deleted, now));
        }
    }

    /// Treats every remembered object not in `present` ((namespace, name)) as gone: a re-list dropped it, or
    /// its delete event was missed.
    pub fn retain(&self, present: &BTreeSet<(String, String)>, now: DateTime<Utc>) {
        let missing: Vec<(String, String)> = {
            let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
            seen.keys().filter(|k| !present.contains(*k)).cloned().collect()
        };
        for (namespace, name) in missing {
            self.gone(&namespace, &name, now);
        }
    }
}

fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds().max(0) as f64 / 1000.0
}

/// Ticks every [`PERIOD`], the first time at once; a late tick does not bunch the next ones up.
fn refresh_interval() -> tokio::time::Interval {
    let mut interval = tokio::time::interval(PERIOD);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval
}

fn key_of(obj: &ObservedObject) -> (String, String) {
    (obj.namespace.clone(), obj.name.clone())
}

/// The recorder of a kind the cluster state watches, fed by the state's watch.
#[derive(Debug)]
pub struct StateStatusObserver<K> {
    recorder: StatusRecorder,
    state: ClusterState,
    clock: Arc<dyn Clock>,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K: Tracked + StatusObject> StateStatusObserver<K> {
    pub fn new(ctx: &ControllerContext) -> Self {
        let classes: Vec<String> = ctx.cloud.supported_node_classes().iter().map(|k| k.label_key()).collect();
        Self {
            recorder: StatusRecorder::new(K::STATUS_KIND, ctx.metrics.clone(), &classes),
            state: ctx.state.clone(),
            clock: ctx.clock.clone(),
            _kind: std::marker::PhantomData,
        }
    }

    /// Looks at every object of the kind the state holds (forgetting the ones it no longer does).
    pub fn refresh(&self) {
        let now = self.clock.now();
        let mut present = BTreeSet::new();
        for obj in self.state.list_shared::<K>() {
            let observed = obj.observed();
            present.insert(key_of(&observed));
            self.recorder.observe(&observed, now);
        }
        self.recorder.retain(&present, now);
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let (store, changes) = self.state.controller_source::<K>();
        let mut changes = std::pin::pin!(changes);
        let mut refresh = refresh_interval();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = refresh.tick() => self.refresh(),
                changed = changes.next() => {
                    let Some(obj) = changed else { return };
                    // The stream yields deleted objects too: what the store holds decides.
                    match store.get(&ObjectRef::from_obj(obj.as_ref())) {
                        Some(current) => self.recorder.observe(&current.observed(), self.clock.now()),
                        None => {
                            let gone = obj.observed();
                            self.recorder.gone(&gone.namespace, &gone.name, self.clock.now());
                        }
                    }
                }
            }
        }
    }
}

/// A node class as the recorder reads it: its `status.conditions` read field by field, so a kind whose
/// conditions are not Karpenter's type still reads (a missing field reads empty, an unreadable time as absent).
fn observed_dynamic(obj: &DynamicObject) -> ObservedObject {
    let text = |c: &serde_json::Value, field: &str| c.get(field).and_then(|v| v.as_str()).unwrap_or("").to_owned();
    let conditions = obj
        .data
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .map(|c| ObservedCondition {
            type_: text(c, "type"),
            status: text(c, "status"),
            reason: text(c, "reason"),
            last_transition: parse_rfc3339(&text(c, "lastTransitionTime")),
        })
        .collect();
    ObservedObject {
        name: obj.name_any(),
        namespace: obj.namespace().unwrap_or_default(),
        labels: obj.labels().clone(),
        conditions,
        deletion: obj.meta().deletion_timestamp.as_ref().and_then(from_k8s),
    }
}

/// The recorder of a provider's node-class kind, on a watch of its own (the state does not hold node classes).
pub struct NodeClassStatusObserver {
    recorder: StatusRecorder,
    api: Api<DynamicObject>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for NodeClassStatusObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClassStatusObserver").field("recorder", &self.recorder).finish_non_exhaustive()
    }
}

impl NodeClassStatusObserver {
    /// The recorder of `registration`'s kind; `None` when the kind is named as a core kind
    /// ([`StatusRecorder::for_node_class`]).
    pub fn new(ctx: &ControllerContext, registration: &NodeClassRegistration) -> Option<Self> {
        let resource = &registration.api_resource;
        Some(Self {
            recorder: StatusRecorder::for_node_class(&resource.kind, &ctx.metrics)?,
            api: Api::all_with(ctx.client.clone(), resource),
            clock: ctx.clock.clone(),
        })
    }

    /// The controller's name ([`node_class_controller_name`]).
    pub fn name(&self) -> String {
        node_class_controller_name(self.recorder.kind())
    }

    pub async fn run(self, shutdown: CancellationToken) {
        let events = watcher(self.api.clone(), watcher::Config::default()).default_backoff();
        let mut events = std::pin::pin!(events);
        let mut objects: BTreeMap<(String, String), ObservedObject> = BTreeMap::new();
        let mut relisted: Option<BTreeMap<(String, String), ObservedObject>> = None;
        let mut refresh = refresh_interval();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = refresh.tick() => {
                    let now = self.clock.now();
                    objects.values().for_each(|o| self.recorder.observe(o, now));
                }
                event = events.next() => {
                    let Some(event) = event else { return };
                    let now = self.clock.now();
                    match event {
                        Ok(watcher::Event::Apply(obj)) => {
                            let o = observed_dynamic(&obj);
                            self.recorder.observe(&o, now);
                            objects.insert(key_of(&o), o);
                        }
                        Ok(watcher::Event::Delete(obj)) => {
                            let o = observed_dynamic(&obj);
                            objects.remove(&key_of(&o));
                            self.recorder.gone(&o.namespace, &o.name, now);
                        }
                        Ok(watcher::Event::Init) => relisted = Some(BTreeMap::new()),
                        Ok(watcher::Event::InitApply(obj)) => {
                            let o = observed_dynamic(&obj);
                            relisted.get_or_insert_default().insert(key_of(&o), o);
                        }
                        Ok(watcher::Event::InitDone) => {
                            objects = relisted.take().unwrap_or_default();
                            objects.values().for_each(|o| self.recorder.observe(o, now));
                            self.recorder.retain(&objects.keys().cloned().collect(), now);
                        }
                        // The watcher retries with backoff; the metrics wait for it.
                        Err(e) => tracing::debug!(kind = %self.recorder.kind(), error = %e, "status metrics watch"),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
