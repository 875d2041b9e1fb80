//! Kubernetes events with upstream Karpenter's reasons, de-duplicated in process.
//!
//! Events are written as **core/v1 `Event`s** — what upstream's recorder (client-go's `tools/record`, through
//! controller-runtime) writes, with the same fields: `involvedObject`, `reason`, `message`, `type`,
//! `source.component: karpenter`, `count`, `firstTimestamp`/`lastTimestamp`, `reportingComponent`. So
//! `kubectl describe`, `kubectl get events --field-selector reason=…` and event exporters see what they saw
//! with upstream. (events.k8s.io/v1 is the same storage on a real server, but its field names differ and
//! field selectors on core fields are what operators' scripts use.)
//!
//! [`Recorder::publish`] drops an event equal to one published less than its dedupe timeout ago (2 minutes by
//! default, [`Event::dedupe_timeout`] overrides it): equal means same reason, same object (kind, namespace,
//! name, uid) and same dedupe values (the message when none are given). Time comes from the injected [`Clock`].
//! Events of cluster-scoped objects (Nodes, NodeClaims, NodePools) go to the `default` namespace, as client-go
//! puts them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use karpenter_cloudprovider::Clock;
use kube::api::{Api, PostParams};
use kube::{Client, Resource};

/// The reasons upstream Karpenter uses, by the objects they are recorded on.
pub mod reasons {
    // Disruption (node, nodeclaim, nodepool).
    /// `DisruptionBlocked`, recorded by disruption (node, nodeclaim, nodepool).
    pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";
    /// `DisruptionLaunching`, recorded by disruption (node, nodeclaim, nodepool).
    pub const DISRUPTION_LAUNCHING: &str = "DisruptionLaunching";
    /// `DisruptionWaitingReadiness`, recorded by disruption (node, nodeclaim, nodepool).
    pub const DISRUPTION_WAITING_READINESS: &str = "DisruptionWaitingReadiness";
    /// `DisruptionTerminating`, recorded by disruption (node, nodeclaim, nodepool).
    pub const DISRUPTION_TERMINATING: &str = "DisruptionTerminating";
    /// `Unconsolidatable`, recorded by disruption (node, nodeclaim, nodepool).
    pub const UNCONSOLIDATABLE: &str = "Unconsolidatable";
    /// `ConsolidationCandidate`, recorded by disruption (node, nodeclaim, nodepool).
    pub const CONSOLIDATION_CANDIDATE: &str = "ConsolidationCandidate";
    /// `ConsolidationRejected`, recorded by disruption (node, nodeclaim, nodepool).
    pub const CONSOLIDATION_REJECTED: &str = "ConsolidationRejected";
    /// `ConsolidationApproved`, recorded by disruption (node, nodeclaim, nodepool).
    pub const CONSOLIDATION_APPROVED: &str = "ConsolidationApproved";
    /// `Disrupted`, recorded by disruption (node, nodeclaim, nodepool).
    pub const DISRUPTED: &str = "Disrupted";
    /// `NodeRepairBlocked`, recorded by disruption (node, nodeclaim, nodepool).
    pub const NODE_REPAIR_BLOCKED: &str = "NodeRepairBlocked";
    // Provisioning.
    /// `FailedScheduling`, recorded by provisioning.
    pub const FAILED_SCHEDULING: &str = "FailedScheduling";
    /// `NoCompatibleInstanceTypes`, recorded by provisioning.
    pub const NO_COMPATIBLE_INSTANCE_TYPES: &str = "NoCompatibleInstanceTypes";
    /// `Nominated`, recorded by provisioning.
    pub const NOMINATED: &str = "Nominated";
    // Termination.
    /// `Evicted`, recorded by termination.
    pub const EVICTED: &str = "Evicted";
    /// `FailedDraining`, recorded by termination.
    pub const FAILED_DRAINING: &str = "FailedDraining";
    /// `TerminationGracePeriodExpiring`, recorded by termination.
    pub const TERMINATION_GRACE_PERIOD_EXPIRING: &str = "TerminationGracePeriodExpiring";
    /// `FailedTermination`, recorded by termination.
    pub const FAILED_TERMINATION: &str = "FailedTermination";
    /// `AwaitingVolumeDetachment`, recorded by termination.
    pub const AWAITING_VOLUME_DETACHMENT: &str = "AwaitingVolumeDetachment";
    // NodeClaim lifecycle.
    /// `FailedConsistencyCheck`, recorded by nodeClaim lifecycle.
    pub const FAILED_CONSISTENCY_CHECK: &str = "FailedConsistencyCheck";
    /// `InsufficientCapacityError`, recorded by nodeClaim lifecycle.
    pub const INSUFFICIENT_CAPACITY_ERROR: &str = "InsufficientCapacityError";
    /// `UnregisteredTaintMissing`, recorded by nodeClaim lifecycle.
    pub const UNREGISTERED_TAINT_MISSING: &str = "UnregisteredTaintMissing";
    /// `NodeClassNotReady`, recorded by nodeClaim lifecycle.
    pub const NODE_CLASS_NOT_READY: &str = "NodeClassNotReady";
    // Pods.
    /// `InvalidDoNotDisruptAnnotation`, recorded by pods.
    pub const INVALID_DO_NOT_DISRUPT_ANNOTATION: &str = "InvalidDoNotDisruptAnnotation";
    /// A pod's `karpenter.sh/disruption-cost` is not an int32 (gate `PodDeletionCostManagement`): ignored.
    pub const INVALID_DISRUPTION_COST_ANNOTATION: &str = "InvalidDisruptionCostAnnotation";
    /// `DoNotDisruptUntil`, recorded by pods.
    pub const DO_NOT_DISRUPT_UNTIL: &str = "DoNotDisruptUntil";
    /// `DoNotDisruptGracePeriodElapsed`, recorded by pods.
    pub const DO_NOT_DISRUPT_GRACE_PERIOD_ELAPSED: &str = "DoNotDisruptGracePeriodElapsed";
    // AWS interruption and node classes.
    /// `SpotInterrupted`, recorded by aWS interruption and node classes.
    pub const SPOT_INTERRUPTED: &str = "SpotInterrupted";
    /// `SpotRebalanceRecommendation`, recorded by aWS interruption and node classes.
    pub const SPOT_REBALANCE_RECOMMENDATION: &str = "SpotRebalanceRecommendation";
    /// `InstanceStopping`, recorded by aWS interruption and node classes.
    pub const INSTANCE_STOPPING: &str = "InstanceStopping";
    /// `InstanceTerminating`, recorded by aWS interruption and node classes.
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    /// `InstanceUnhealthy`, recorded by aWS interruption and node classes.
    pub const INSTANCE_UNHEALTHY: &str = "InstanceUnhealthy";
    /// `CapacityReservationInstanceInterrupted`, recorded by aWS interruption and node classes.
    pub const CAPACITY_RESERVATION_INSTANCE_INTERRUPTED: &str = "CapacityReservationInstanceInterrupted";
    /// `TerminatingOnInterruption`, recorded by aWS interruption and node classes.
    pub const TERMINATING_ON_INTERRUPTION: &str = "TerminatingOnInterruption";
    /// `WaitingOnNodeClaimTermination`, recorded by aWS interruption and node classes.
    pub const WAITING_ON_NODE_CLAIM_TERMINATION: &str = "WaitingOnNodeClaimTermination";
    /// `ZonalShiftActive`, recorded by aWS interruption and node classes.
    pub const ZONAL_SHIFT_ACTIVE: &str = "ZonalShiftActive";
    /// `ZonalShiftCleared`, recorded by aWS interruption and node classes.
    pub const ZONAL_SHIFT_CLEARED: &str = "ZonalShiftCleared";

    /// Every reason above.
    pub const ALL: &[&str] = &[
        DISRUPTION_BLOCKED,
        DISRUPTION_LAUNCHING,
        DISRUPTION_WAITING_READINESS,
        DISRUPTION_TERMINATING,
        UNCONSOLIDATABLE,
        CONSOLIDATION_CANDIDATE,
        CONSOLIDATION_REJECTED,
        CONSOLIDATION_APPROVED,
        DISRUPTED,
        NODE_REPAIR_BLOCKED,
        FAILED_SCHEDULING,
        NO_COMPATIBLE_INSTANCE_TYPES,
        NOMINATED,
        EVICTED,
        FAILED_DRAINING,
        TERMINATION_GRACE_PERIOD_EXPIRING,
        FAILED_TERMINATION,
        AWAITING_VOLUME_DETACHMENT,
        FAILED_CONSISTENCY_CHECK,
        INSUFFICIENT_CAPACITY_ERROR,
        UNREGISTERED_TAINT_MISSING,
        NODE_CLASS_NOT_READY,
        INVALID_DO_NOT_DISRUPT_ANNOTATION,
        INVALID_DISRUPTION_COST_ANNOTATION,
        DO_NOT_DISRUPT_UNTIL,
        DO_NOT_DISRUPT_GRACE_PERIOD_ELAPSED,
        SPOT_INTERRUPTED,
        SPOT_REBALANCE_RECOMMENDATION,
        INSTANCE_STOPPING,
        INSTANCE_TERMINATING,
        INSTANCE_UNHEALTHY,
        CAPACITY_RESERVATION_INSTANCE_INTERRUPTED,
        TERMINATING_ON_INTERRUPTION,
        WAITING_ON_NODE_CLAIM_TERMINATION,
        ZONAL_SHIFT_ACTIVE,
        ZONAL_SHIFT_CLEARED,
    ];
}

/// The default de-duplication window.
pub const DEDUPE_TIMEOUT: Duration = Duration::from_secs(120);
/// The component events are attributed to.
pub const COMPONENT: &str = "karpenter";
/// Longest message the API server accepts in an event (longer ones are cut).
const MAX_MESSAGE_BYTES: usize = 1024;

/// `Normal` or `Warning`, the two event types Kubernetes knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something an operator may need to act on.
    Warning,
}

impl EventType {
    /// The type as the Event object spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "Normal",
            Self::Warning => "Warning",
        }
    }
}

/// One event to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The object the event is about (`involvedObject`).
    pub object: ObjectReference,
    /// Normal or Warning.
    pub event_type: EventType,
    /// One of [`reasons`], in CamelCase.
    pub reason: String,
    /// What happened, for people (cut to 1 KiB when published).
    pub message: String,
    /// What makes two events with the same reason and object different; empty means the message does.
    pub dedupe_values: Vec<String>,
    /// Overrides [`DEDUPE_TIMEOUT`] for this event.
    pub dedupe_timeout: Option<Duration>,
}

impl Event {
    /// An event about `object` (any kube resource with static type information: Pod, Node, NodeClaim, …).
    pub fn new<K: Resource<DynamicType = ()>>(
        object: &K,
        event_type: EventType,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            object: object.object_ref(&()),
            event_type,
            reason: reason.to_string(),
            message: message.into(),
            dedupe_values: Vec::new(),
            dedupe_timeout: None,
        }
    }

    /// A `Normal` event ([`Event::new`]).
    pub fn normal<K: Resource<DynamicType = ()>>(object: &K, reason: &str, message: impl Into<String>) -> Self {
        Self::new(object, EventType::Normal, reason, message)
    }

    /// A `Warning` event ([`Event::new`]).
    pub fn warning<K: Resource<DynamicType = ()>>(object: &K, reason: &str, message: impl Into<String>) -> Self {
        Self::new(object, EventType::Warning, reason, message)
    }

    /// The event with its de-duplication key set to `values` (see [`Event::dedupe_values`]).
    pub fn with_dedupe_values(mut self, values: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.dedupe_values = values.into_iter().map(Into::into).collect();
        self
    }

    /// The event with its own de-duplication window.
    pub fn with_dedupe_timeout(mut self, timeout: Duration) -> Self {
        self.dedupe_timeout = Some(timeout);
        self
    }

    /// What makes two events duplicates (reason, object, and the dedupe values or else the message), hashed: the
    /// cache keeps 8 bytes per event instead of its strings (a scale-out publishes a `Nominated` event per pending
    /// pod, and 50,000 keys of six strings each were ~15 MB). Two distinct events colliding on 64 bits would
    /// only drop the second's post for the dedupe timeout.
    fn dedupe_key(&self) -> DedupeKey {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::hash::DefaultHasher::new();
        let o = &self.object;
        self.reason.hash(&mut hasher);
        [&o.kind, &o.namespace, &o.name, &o.uid].hash(&mut hasher);
        if self.dedupe_values.is_empty() {
            std::slice::from_ref(&self.message).hash(&mut hasher);
        } else {
            self.dedupe_values.hash(&mut hasher);
        }
        hasher.finish()
    }
}

type DedupeKey = u64;
/// When each key was last published, with its timeout; and when expired keys were last dropped.
#[derive(Debug, Default)]
struct Seen {
    published: HashMap<DedupeKey, (DateTime<Utc>, Duration)>,
    pruned_at: Option<DateTime<Utc>>,
}
type SeenCache = Arc<Mutex<Seen>>;
/// How often the dedupe cache drops expired keys: a full pass, so not on every event (a scale-out publishes one
/// per pod); an expired key still present counts as absent.
const PRUNE_INTERVAL: Duration = Duration::from_secs(10);

fn unexpired(now: DateTime<Utc>, (at, timeout): &(DateTime<Utc>, Duration)) -> bool {
    chrono::Duration::from_std(*timeout).is_ok_and(|timeout| now.signed_duration_since(*at) < timeout)
}

/// Publishes events; shared by all controllers (`Clone` shares the dedupe cache).
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    clock: Arc<dyn Clock>,
    /// `reportingInstance` (the pod name or leader identity).
    instance: String,
    seen: SeenCache,
    sequence: Arc<AtomicU64>,
    /// Detached posts spawned and not finished ([`Recorder::publish_detached`]).
    detached: Arc<std::sync::atomic::AtomicUsize>,
}

/// Detached event posts that may wait at once; more are dropped (see [`Recorder::publish_detached`]).
pub const MAX_DETACHED: usize = 1000;

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("instance", &self.instance).finish_non_exhaustive()
    }
}

fn to_jiff(t: DateTime<Utc>) -> Timestamp {
    Timestamp::new(t.timestamp(), i32::try_from(t.timestamp_subsec_nanos()).unwrap_or(0))
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

fn truncate(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE_BYTES - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

impl Recorder {
    /// A recorder publishing through `client` as the component `instance` (the Event's `reportingInstance`).
    pub fn new(client: Client, clock: Arc<dyn Clock>, instance: impl Into<String>) -> Self {
        Self {
            client,
            clock,
            instance: instance.into(),
            seen: Arc::default(),
            sequence: Arc::new(AtomicU64::new(0)),
            detached: Arc::default(),
        }
    }

    /// Whether `event` is a duplicate now; if not, records it as published now. Also forgets expired entries.
    fn admit(&self, event: &Event, now: DateTime<Utc>) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let prune_due = seen.pruned_at.is_none_or(|at| {
            chrono::Duration::from_std(PRUNE_INTERVAL).is_ok_and(|every| now.signed_duration_since(at) >= every)
        });
        if prune_due {
            seen.published.retain(|_, entry| unexpired(now, entry));
            seen.pruned_at = Some(now);
        }
        let key = event.dedupe_key();
        if seen.published.get(&key).is_some_and(|entry| unexpired(now, entry)) {
            return false;
        }
        seen.published.insert(key, (now, event.dedupe_timeout.unwrap_or(DEDUPE_TIMEOUT)));
        true
    }

    fn forget(&self, event: &Event) {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).published.remove(&event.dedupe_key());
    }

    /// Posts `event` unless it is a duplicate. Returns whether it was posted. On an API error the event is not
    /// remembered, so publishing it again retries.
    pub async fn publish(&self, event: Event) -> Result<bool, kube::Error> {
        let now = self.clock.now();
        if !self.admit(&event, now) {
            return Ok(false);
        }
        self.post(&event, now).await.map(|()| true)
    }

    /// Posts an admitted `event`; on an API error it is forgotten, so publishing it again retries.
    async fn post(&self, event: &Event, now: DateTime<Utc>) -> Result<(), kube::Error> {
        let object_name = event.object.name.clone().unwrap_or_default();
        let namespace = event.object.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".into());
        let stamp = now.timestamp_nanos_opt().unwrap_or_default().unsigned_abs();
        let unique = stamp.wrapping_add(self.sequence.fetch_add(1, Ordering::Relaxed));
        let ts = to_jiff(now);
        let core = CoreEvent {
            metadata: ObjectMeta {
                name: Some(format!("{object_name}.{unique:x}")),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: event.object.clone(),
            reason: Some(event.reason.clone()),
            message: Some(truncate(&event.message)),
            type_: Some(event.event_type.as_str().to_string()),
            source: Some(EventSource { component: Some(COMPONENT.to_string()), host: None }),
            count: Some(1),
            first_timestamp: Some(Time(ts)),
            last_timestamp: Some(Time(ts)),
            event_time: None::<MicroTime>,
            reporting_component: Some(COMPONENT.to_string()),
            reporting_instance: Some(self.instance.clone()).filter(|i| !i.is_empty()),
            ..CoreEvent::default()
        };
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), &namespace);
        match api.create(&PostParams::default(), &core).await {
            Ok(_) => Ok(()),
            Err(e) => {
                self.forget(event);
                Err(e)
            }
        }
    }

    /// [`Recorder::publish`] in a spawned task, logging failures: for reconcilers that must not wait on events.
    /// Duplicates are dropped before a task is spawned; with [`MAX_DETACHED`] posts already waiting (the API
    /// server slower than the events come: a pass nominating 50,000 pods), the event is dropped too, as
    /// client-go's broadcaster drops events when its queue is full. Unbounded, the waiting posts held tens of
    /// thousands of tasks and events, and starved the controller's other requests of the client's rate.
    pub fn publish_detached(&self, event: Event) {
        let now = self.clock.now();
        if !self.admit(&event, now) {
            return;
        }
        if self.detached.fetch_add(1, Ordering::AcqRel) >= MAX_DETACHED {
            self.detached.fetch_sub(1, Ordering::AcqRel);
            self.forget(&event);
            tracing::debug!(reason = %event.reason, object = ?event.object.name, "event dropped: too many events waiting to be posted");
            return;
        }
        let recorder = self.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder.post(&event, now).await {
                tracing::warn!(error = %e, reason = %event.reason, "failed to publish event");
            }
            recorder.detached.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use karpenter_testing::FakeClock;
    use karpenter_testing::apiserver::ApiServer;
    use kube::api::ListParams;

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.metadata.uid = Some(format!("uid-{name}"));
        n
    }

    async fn events(server: &ApiServer, namespace: &str) -> Vec<CoreEvent> {
        let api: Api<CoreEvent> = Api::namespaced(server.client(), namespace);
        api.list(&ListParams::default()).await.unwrap().items
    }

    #[tokio::test(flavor = "current_thread")]
    async fn detached_posts_are_bounded_and_dropped_events_can_come_again() {
        let server = ApiServer::new();
        let clock = FakeClock::default();
        let recorder = Recorder::new(server.client(), Arc::new(clock.clone()), "karpenter-abc");
        let event = |i: usize| Event::normal(&node(&format!("n{i}")), reasons::NOMINATED, "Pod should schedule");
        // On one thread no spawned post runs before this loop yields: the first MAX_DETACHED wait, the rest are
        // dropped, and a duplicate of a waiting one spawns nothing.
        for i in 0..MAX_DETACHED + 5 {
            recorder.publish_detached(event(i));
        }
        recorder.publish_detached(event(0));
        assert_eq!(recorder.detached.load(Ordering::Acquire), MAX_DETACHED);
        while recorder.detached.load(Ordering::Acquire) > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(events(&server, "default").await.len(), MAX_DETACHED);
        // The dropped ones were not remembered as published: they go out when they come again.
        recorder.publish_detached(event(MAX_DETACHED + 1));
        while recorder.detached.load(Ordering::Acquire) > 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(events(&server, "default").await.len(), MAX_DETACHED + 1);
    }

    #[tokio::test]
    async fn posts_core_events_with_upstream_fields() {
        let server = ApiServer::new();
        let clock = FakeClock::default();
        let recorder = Recorder::new(server.client(), Arc::new(clock.clone()), "karpenter-abc");
        let event = Event::warning(&node("n1"), reasons::FAILED_DRAINING, "Failed to drain node, 3 pods are waiting");
        assert!(recorder.publish(event).await.unwrap());
        let posted = events(&server, "default").await;
        assert_eq!(posted.len(), 1);
        let e = &posted[0];
        assert_eq!(e.reason.as_deref(), Some("FailedDraining"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.involved_object.kind.as_deref(), Some("Node"));
        assert_eq!(e.involved_object.name.as_deref(), Some("n1"));
        assert_eq!(e.source.as_ref().and_then(|s| s.component.as_deref()), Some("karpenter"));
        assert_eq!(e.reporting_instance.as_deref(), Some("karpenter-abc"));
        assert_eq!(e.count, Some(1));
        assert_eq!(e.last_timestamp.as_ref().unwrap().0.to_string(), "2024-01-01T00:00:00Z");
        assert!(e.metadata.name.as_deref().unwrap().starts_with("n1."));

        // A pod's event goes to the pod's namespace.
        let mut pod = Pod::default();
        pod.metadata.name = Some("web".into());
        pod.metadata.namespace = Some("kube-system".into());
        recorder.publish(Event::normal(&pod, reasons::NOMINATED, "Pod should schedule on: nodeclaim/x")).await.unwrap();
        assert_eq!(events(&server, "kube-system").await.len(), 1);
    }

    #[tokio::test]
    async fn duplicates_within_two_minutes_are_dropped() {
        let server = ApiServer::new();
        let clock = FakeClock::default();
        let recorder = Recorder::new(server.client(), Arc::new(clock.clone()), "");
        let blocked = || Event::normal(&node("n1"), reasons::DISRUPTION_BLOCKED, "Cannot disrupt Node: pdb blocks");
        assert!(recorder.publish(blocked()).await.unwrap());
        clock.step_secs(60);
        assert!(!recorder.publish(blocked()).await.unwrap(), "same reason, object and message");
        // A different message, object or reason is a different event.
        let other = Event::normal(&node("n1"), reasons::DISRUPTION_BLOCKED, "Cannot disrupt Node: do-not-disrupt");
        assert!(recorder.publish(other).await.unwrap());
        assert!(
            recorder
                .publish(Event::normal(&node("n2"), reasons::DISRUPTION_BLOCKED, "Cannot disrupt Node: pdb blocks"))
                .await
                .unwrap()
        );
        assert!(
            recorder
                .clone()
                .publish(Event::warning(&node("n1"), reasons::UNCONSOLIDATABLE, "Cannot disrupt Node: pdb blocks"))
                .await
                .unwrap()
        );
        // Clones share the cache.
        assert!(!recorder.clone().publish(blocked()).await.unwrap());
        clock.step_secs(60);
        assert!(recorder.publish(blocked()).await.unwrap(), "two minutes after the first, it is posted again");
        assert_eq!(events(&server, "default").await.len(), 5);
    }

    #[tokio::test]
    async fn dedupe_values_and_timeout_override() {
        let server = ApiServer::new();
        let clock = FakeClock::default();
        let recorder = Recorder::new(server.client(), Arc::new(clock.clone()), "");
        let with_values = |msg: &str| {
            Event::normal(&node("n1"), reasons::UNCONSOLIDATABLE, msg)
                .with_dedupe_values(["n1"])
                .with_dedupe_timeout(Duration::from_secs(15 * 60))
        };
        assert!(recorder.publish(with_values("Can't replace with a cheaper node (9 pods)")).await.unwrap());
        clock.step_secs(600);
        // Same dedupe values: a changed message is still a duplicate, for the event's own 15 minutes.
        assert!(!recorder.publish(with_values("Can't replace with a cheaper node (10 pods)")).await.unwrap());
        clock.step_secs(301);
        assert!(recorder.publish(with_values("Can't replace with a cheaper node (10 pods)")).await.unwrap());
        assert_eq!(events(&server, "default").await.len(), 2);
    }

    #[tokio::test]
    async fn failed_posts_are_not_remembered_and_messages_are_cut() {
        let server = ApiServer::new();
        let clock = FakeClock::default();
        let recorder = Recorder::new(server.client(), Arc::new(clock.clone()), "");
        let mut pod = Pod::default();
        pod.metadata.name = Some("p".into());
        pod.metadata.namespace = Some("missing-namespace".into());
        let event = Event::warning(&pod, reasons::FAILED_SCHEDULING, "x".repeat(5000));
        assert!(recorder.publish(event.clone()).await.is_err(), "namespace does not exist");
        let mut ns = k8s_openapi::api::core::v1::Namespace::default();
        ns.metadata.name = Some("missing-namespace".into());
        Api::all(server.client()).create(&PostParams::default(), &ns).await.unwrap();
        assert!(recorder.publish(event.clone()).await.unwrap(), "the failed post was not remembered");
        assert!(!recorder.publish(event).await.unwrap());
        let posted = events(&server, "missing-namespace").await;
        assert_eq!(posted[0].message.as_ref().unwrap().len(), MAX_MESSAGE_BYTES);
        assert!(reasons::ALL.contains(&"DoNotDisruptGracePeriodElapsed") && reasons::ALL.len() == 36);
    }
}
