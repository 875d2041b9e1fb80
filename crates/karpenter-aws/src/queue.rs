//! The interruption queue: a [`karpenter_cloudprovider::InterruptionSource`] over SQS.
//!
//! [`SqsInterruptionSource`] long-polls the queue named by `INTERRUPTION_QUEUE` through the narrow [`QueueApi`]
//! trait (the `sdk` feature implements it with aws-sdk-sqs; tests use an in-memory queue), parses each message
//! with [`crate::interruption::parse`], and turns it into one [`InterruptionEvent`] per instance that has a
//! NodeClaim, found through an [`InstanceLookup`] ([`NodeClaimLookup`] reads the NodeClaims' provider ids from
//! the API server). The SQS receipt handle is the event's `ack_id`; the interruption controller acknowledges
//! handled events and its `InterruptionSource::acknowledge` deletes their messages.
//!
//! Messages that produce no event are deleted by the source itself, at once, so they never come back:
//! malformed bodies (logged as warnings; they never stop the poller), events that mean nothing to Karpenter
//! ([`Kind::NoOp`]) and events whose instances have no NodeClaim. Before a spot interruption or a
//! capacity-reservation interruption is returned, the optional [`InterruptionHook`] is told, so the provider can
//! mark the spot offering or the reservation unavailable (as upstream's interruption controller does): the binary
//! passes `AwsCloudProvider`, which zeroes the reservation's tracked instance count.
//!
//! The queue's metrics are recorded into the registry ([`SqsInterruptionSource::with_metrics`]): every parsed
//! message counts as received by its kind (`karpenter_interruption_received_messages_total{message_type}`), every
//! deletion (by the source or on acknowledgement) as deleted, with the time since SQS's `SentTimestamp`
//! (`karpenter_interruption_deleted_messages_total`, `karpenter_interruption_message_queue_duration_seconds`).
//! Only queue messages count there: the instance status checks are another source with their own counter.
//!
//! Receive parameters follow upstream: at most [`MAX_MESSAGES`] messages, a [`WAIT_TIME_SECONDS`] long poll and a
//! [`VISIBILITY_TIMEOUT_SECONDS`] visibility timeout, so an unacknowledged message is delivered again.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use karpenter_cloudprovider::{Clock, InterruptionAction, InterruptionError, InterruptionEvent, InterruptionKind};
use karpenter_runtime::metrics::Metrics;
use tokio::sync::Mutex;

use crate::api_error::AwsApiError;
use crate::interruption::{self, Kind, Message};
use crate::metrics::AwsMetrics;

/// Messages per receive (SQS's maximum).
pub const MAX_MESSAGES: i32 = 10;
/// Long-poll wait of one receive, seconds (SQS's maximum).
pub const WAIT_TIME_SECONDS: i32 = 20;
/// How long a received message stays invisible before it is delivered again, seconds.
pub const VISIBILITY_TIMEOUT_SECONDS: i32 = 20;

/// One `ReceiveMessage` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiveRequest {
    /// The queue's URL.
    pub queue_url: String,
    /// At most this many messages (1..=10).
    pub max_messages: i32,
    /// Long-poll wait, seconds (0..=20).
    pub wait_time_seconds: i32,
    /// Visibility timeout of the received messages, seconds.
    pub visibility_timeout_seconds: i32,
}

/// A received message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueMessage {
    /// SQS's message id.
    pub message_id: String,
    /// The handle that deletes this delivery.
    pub receipt_handle: String,
    /// The body (an EventBridge event as JSON).
    pub body: String,
    /// When the message was sent (the `SentTimestamp` attribute), milliseconds since the epoch.
    pub sent_timestamp_ms: Option<i64>,
}

/// The SQS calls the interruption source makes.
#[async_trait]
pub trait QueueApi: Send + Sync + fmt::Debug {
    /// `GetQueueUrl` of the queue named `queue_name`.
    async fn queue_url(&self, queue_name: &str) -> Result<String, AwsApiError>;
    /// `ReceiveMessage` (may wait up to the request's long-poll time and return nothing).
    async fn receive(&self, request: &ReceiveRequest) -> Result<Vec<QueueMessage>, AwsApiError>;
    /// `DeleteMessage` of one delivery.
    async fn delete(&self, queue_url: &str, receipt_handle: &str) -> Result<(), AwsApiError>;
}

/// What the source knows about the NodeClaim of an instance.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceClaim {
    /// The NodeClaim's name.
    pub name: String,
    /// Its `status.providerID` (the id the interruption controller matches).
    pub provider_id: String,
    /// `node.kubernetes.io/instance-type`, when labelled.
    pub instance_type: Option<String>,
    /// `topology.kubernetes.io/zone`, when labelled.
    pub zone: Option<String>,
    /// `karpenter.sh/capacity-type`, when labelled.
    pub capacity_type: Option<String>,
    /// `karpenter.k8s.aws/capacity-reservation-id`, when labelled.
    pub capacity_reservation_id: Option<String>,
}

/// Finds the NodeClaims of EC2 instances.
#[async_trait]
pub trait InstanceLookup: Send + Sync + fmt::Debug {
    /// The NodeClaims of `instance_ids` (ids without a NodeClaim are absent from the answer).
    async fn lookup(&self, instance_ids: &[String]) -> Result<BTreeMap<String, InstanceClaim>, LookupError>;
}

/// An [`InstanceLookup`] failure.
#[derive(Debug, thiserror::Error)]
#[error("looking up nodeclaims: {0}")]
pub struct LookupError(pub String);

/// Side effects of interruptions inside the provider, run before the events are returned.
pub trait InterruptionHook: Send + Sync + fmt::Debug {
    /// A spot instance will be reclaimed: mark its (spot, instance type, zone) offering unavailable.
    fn spot_interrupted(&self, claim: &InstanceClaim);
    /// An interruptible capacity reservation reclaims its instances: mark the reservation unavailable.
    fn capacity_reservation_interrupted(&self, reservation_id: &str, claim: &InstanceClaim);
}

/// The provider's unavailable-offerings cache as the hook: a spot interruption marks its (spot, type, zone)
/// offering, a reservation interruption the (reserved, type, zone) one, each for the cache's TTL (3 minutes).
impl InterruptionHook for crate::launch::ice::UnavailableOfferings {
    fn spot_interrupted(&self, claim: &InstanceClaim) {
        if let (Some(it), Some(zone)) = (&claim.instance_type, &claim.zone) {
            self.mark(karpenter_cloudprovider::OfferingRef::new(it, zone, "spot"));
        }
    }

    fn capacity_reservation_interrupted(&self, _reservation_id: &str, claim: &InstanceClaim) {
        if let (Some(it), Some(zone)) = (&claim.instance_type, &claim.zone) {
            self.mark(karpenter_cloudprovider::OfferingRef::new(it, zone, "reserved"));
        }
    }
}

/// Counters of what the source did (for logs and tests; the controller keeps the Prometheus metrics).
#[derive(Debug, Default)]
pub struct QueueStats {
    received: AtomicU64,
    malformed: AtomicU64,
    ignored: AtomicU64,
    deleted: AtomicU64,
    events: AtomicU64,
}

/// A snapshot of [`QueueStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStatsSnapshot {
    /// Messages received.
    pub received: u64,
    /// Messages whose body could not be parsed (deleted).
    pub malformed: u64,
    /// Parsed messages that produced no event: no-op kinds or instances without a NodeClaim (deleted).
    pub ignored: u64,
    /// Messages deleted (by the source or through acknowledgement).
    pub deleted: u64,
    /// Events returned.
    pub events: u64,
}

impl QueueStats {
    fn snapshot(&self) -> QueueStatsSnapshot {
        QueueStatsSnapshot {
            received: self.received.load(Ordering::Relaxed),
            malformed: self.malformed.load(Ordering::Relaxed),
            ignored: self.ignored.load(Ordering::Relaxed),
            deleted: self.deleted.load(Ordering::Relaxed),
            events: self.events.load(Ordering::Relaxed),
        }
    }
}

fn add(counter: &AtomicU64, n: usize) {
    counter.fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// The interruption kind and action of a parsed message kind; `None` for kinds that produce no event.
pub fn kind_and_action(kind: Kind) -> Option<(InterruptionKind, InterruptionAction)> {
    let mapped = match kind {
        Kind::SpotInterrupted => (InterruptionKind::SpotInterrupted, InterruptionAction::Delete),
        Kind::ScheduledChange => (InterruptionKind::ScheduledChange, InterruptionAction::Delete),
        Kind::InstanceStopped => (InterruptionKind::InstanceStopped, InterruptionAction::Delete),
        Kind::InstanceTerminated => (InterruptionKind::InstanceTerminated, InterruptionAction::Delete),
        Kind::CapacityReservationInterrupted => {
            (InterruptionKind::CapacityReservationInterrupted, InterruptionAction::Delete)
        }
        Kind::RebalanceRecommendation => (InterruptionKind::RebalanceRecommendation, InterruptionAction::None),
        Kind::NoOp => return None,
    };
    Some(mapped)
}

/// How long the send time of a message handed out as events is kept for its deletion's latency (a message
/// whose handling failed comes back with a new receipt handle, so the old entry is never claimed).
const SENT_TIMES_KEPT: Duration = Duration::from_secs(3600);

/// The SQS interruption source (see the module docs).
pub struct SqsInterruptionSource {
    api: Arc<dyn QueueApi>,
    lookup: Arc<dyn InstanceLookup>,
    hook: Option<Arc<dyn InterruptionHook>>,
    queue_name: String,
    queue_url: Mutex<Option<String>>,
    stats: QueueStats,
    metrics: Option<Arc<Metrics>>,
    clock: Option<Arc<dyn Clock>>,
    /// Receipt handle → SQS send time (ms since the epoch) of the messages handed out as events.
    sent: std::sync::Mutex<BTreeMap<String, i64>>,
}

impl fmt::Debug for SqsInterruptionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsInterruptionSource").field("queue_name", &self.queue_name).finish_non_exhaustive()
    }
}

impl SqsInterruptionSource {
    /// A source polling the queue `queue_name` (a name as `INTERRUPTION_QUEUE` gives it, or a full queue URL).
    pub fn new(api: Arc<dyn QueueApi>, lookup: Arc<dyn InstanceLookup>, queue_name: impl Into<String>) -> Self {
        Self {
            api,
            lookup,
            hook: None,
            queue_name: queue_name.into(),
            queue_url: Mutex::new(None),
            stats: QueueStats::default(),
            metrics: None,
            clock: None,
            sent: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The same source counting its messages in `metrics`, with their time in the queue measured on `clock`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>, clock: Arc<dyn Clock>) -> Self {
        self.metrics = Some(metrics);
        self.clock = Some(clock);
        self
    }

    /// `karpenter_interruption_deleted_messages_total`, and the message's time in the queue when its send time
    /// (`sent_ms`, SQS's `SentTimestamp`) is known.
    fn count_deletion(&self, sent_ms: Option<i64>) {
        let Some(metrics) = &self.metrics else { return };
        metrics.interruption_deleted_messages().inc();
        if let Some(queued_for) = self.queued_for(sent_ms) {
            metrics.interruption_message_queue_duration_seconds().observe(queued_for.as_secs_f64());
        }
    }

    /// The time since `sent_ms` (SQS's `SentTimestamp`), when both it and a clock are known.
    fn queued_for(&self, sent_ms: Option<i64>) -> Option<Duration> {
        let now_ms = self.clock.as_ref()?.now().timestamp_millis();
        let elapsed = now_ms.checked_sub(sent_ms?)?;
        Some(Duration::from_millis(u64::try_from(elapsed).unwrap_or(0)))
    }

    fn sent_times(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, i64>> {
        self.sent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers when the message behind `receipt_handle` was sent, for the latency of its deletion.
    fn remember_sent(&self, receipt_handle: &str, sent_ms: Option<i64>) {
        let (Some(sent_ms), Some(clock)) = (sent_ms, &self.clock) else { return };
        let oldest = clock.now().timestamp_millis() - i64::try_from(SENT_TIMES_KEPT.as_millis()).unwrap_or(i64::MAX);
        let mut sent = self.sent_times();
        sent.retain(|_, t| *t >= oldest);
        sent.insert(receipt_handle.to_owned(), sent_ms);
    }

    /// The same source telling `hook` about spot and capacity-reservation interruptions.
    pub fn with_hook(mut self, hook: Arc<dyn InterruptionHook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// What the source has done so far.
    pub fn stats(&self) -> QueueStatsSnapshot {
        self.stats.snapshot()
    }

    /// The queue's URL: the name itself when it is a URL, else `GetQueueUrl` (cached after the first success).
    pub async fn queue_url(&self) -> Result<String, AwsApiError> {
        let mut cached = self.queue_url.lock().await;
        if let Some(url) = cached.as_ref() {
            return Ok(url.clone());
        }
        let url = if self.queue_name.starts_with("https://") || self.queue_name.starts_with("http://") {
            self.queue_name.clone()
        } else {
            self.api.queue_url(&self.queue_name).await?
        };
        *cached = Some(url.clone());
        Ok(url)
    }

    async fn delete_now(&self, queue_url: &str, message: &QueueMessage, why: &str) {
        match self.api.delete(queue_url, &message.receipt_handle).await {
            Ok(()) => {
                add(&self.stats.deleted, 1);
                self.count_deletion(message.sent_timestamp_ms);
            }
            // Deleted already (another replica, or a stale handle): nothing left to do.
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                tracing::warn!(error = %e, message_id = %message.message_id, why, "deleting interruption message failed")
            }
        }
    }

    /// Receives one batch and turns it into events (see the module docs).
    pub async fn receive_events(&self) -> Result<Vec<InterruptionEvent>, AwsApiError> {
        let queue_url = self.queue_url().await?;
        let request = ReceiveRequest {
            queue_url: queue_url.clone(),
            max_messages: MAX_MESSAGES,
            wait_time_seconds: WAIT_TIME_SECONDS,
            visibility_timeout_seconds: VISIBILITY_TIMEOUT_SECONDS,
        };
        let messages = self.api.receive(&request).await?;
        add(&self.stats.received, messages.len());

        let mut parsed: Vec<(QueueMessage, Message)> = Vec::with_capacity(messages.len());
        for message in messages {
            let parsed_message = interruption::parse(message.body.as_bytes());
            if let (Ok(m), Some(metrics)) = (&parsed_message, &self.metrics) {
                metrics.interruption_received_messages(m.kind.as_str()).inc();
            }
            match parsed_message {
                Ok(m) if kind_and_action(m.kind).is_some() => parsed.push((message, m)),
                Ok(m) => {
                    tracing::debug!(message_id = %message.message_id, source = %m.source,
                        detail_type = %m.detail_type, "interruption message needs no action, deleting");
                    add(&self.stats.ignored, 1);
                    self.delete_now(&queue_url, &message, "no-op").await;
                }
                Err(e) => {
                    tracing::warn!(error = %e, message_id = %message.message_id,
                        "malformed interruption message, deleting");
                    add(&self.stats.malformed, 1);
                    self.delete_now(&queue_url, &message, "malformed").await;
                }
            }
        }
        if parsed.is_empty() {
            return Ok(Vec::new());
        }

        let ids: Vec<String> = parsed
            .iter()
            .flat_map(|(_, m)| m.instance_ids.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let claims =
            self.lookup.lookup(&ids).await.map_err(|e| {
                AwsApiError::with_kind("LookupNodeClaims", "", e.0, crate::api_error::AwsErrorKind::Other)
            })?;

        let mut events = Vec::new();
        for (message, m) in parsed {
            let Some((kind, action)) = kind_and_action(m.kind) else { continue };
            let before = events.len();
            for id in &m.instance_ids {
                let Some(claim) = claims.get(id) else {
                    tracing::debug!(instance_id = %id, kind = %m.kind, "interruption for an instance without a nodeclaim");
                    continue;
                };
                if let Some(hook) = &self.hook {
                    match m.kind {
                        Kind::SpotInterrupted => hook.spot_interrupted(claim),
                        Kind::CapacityReservationInterrupted => {
                            if let Some(r) =
                                m.capacity_reservation_id.as_ref().or(claim.capacity_reservation_id.as_ref())
                            {
                                hook.capacity_reservation_interrupted(r, claim);
                            }
                        }
                        _ => {}
                    }
                }
                events.push(InterruptionEvent {
                    ack_id: message.receipt_handle.clone(),
                    provider_id: claim.provider_id.clone(),
                    kind: kind.clone(),
                    action,
                });
            }
            if events.len() == before {
                add(&self.stats.ignored, 1);
                self.delete_now(&queue_url, &message, "no nodeclaim").await;
            } else {
                self.remember_sent(&message.receipt_handle, message.sent_timestamp_ms);
            }
        }
        add(&self.stats.events, events.len());
        Ok(events)
    }

    /// Deletes the messages of `events` (each delivery once). A delivery already gone is not an error; other
    /// failures are reported after every delivery was tried.
    pub async fn delete_events(&self, events: &[InterruptionEvent]) -> Result<(), AwsApiError> {
        let queue_url = self.queue_url().await?;
        let handles: BTreeSet<&str> = events.iter().map(|e| e.ack_id.as_str()).collect();
        let mut first_error = None;
        for handle in handles {
            match self.api.delete(&queue_url, handle).await {
                Ok(()) => {
                    add(&self.stats.deleted, 1);
                    let sent_ms = self.sent_times().remove(handle);
                    self.count_deletion(sent_ms);
                }
                Err(e) if e.is_not_found() => {
                    self.sent_times().remove(handle);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "deleting interruption message failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

fn to_interruption_error(e: AwsApiError) -> InterruptionError {
    InterruptionError { message: e.to_string(), source: Some(Box::new(e)) }
}

#[async_trait]
impl karpenter_cloudprovider::InterruptionSource for SqsInterruptionSource {
    async fn next_batch(&self) -> Result<Vec<InterruptionEvent>, InterruptionError> {
        self.receive_events().await.map_err(to_interruption_error)
    }

    async fn acknowledge(&self, events: &[InterruptionEvent]) -> Result<(), InterruptionError> {
        self.delete_events(events).await.map_err(to_interruption_error)
    }
}

/// The instance id of an AWS provider id (`aws:///<zone>/<instance-id>`, or a bare `i-...`).
pub fn instance_id_of(provider_id: &str) -> Option<&str> {
    let id = provider_id.rsplit('/').next()?;
    interruption::is_instance_id(id).then_some(id)
}

/// An [`InstanceLookup`] over the NodeClaims in the API server (matched by the instance id of their provider id).
#[derive(Clone)]
pub struct NodeClaimLookup {
    client: kube::Client,
}

impl fmt::Debug for NodeClaimLookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeClaimLookup").finish_non_exhaustive()
    }
}

impl NodeClaimLookup {
    /// A lookup listing NodeClaims through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

/// The [`InstanceClaim`] of a NodeClaim, keyed by instance id, if it has an AWS provider id.
pub fn instance_claim(claim: &karpenter_api::nodeclaim::NodeClaim) -> Option<(String, InstanceClaim)> {
    use karpenter_api::labels;
    let provider_id = claim.provider_id()?;
    let id = instance_id_of(provider_id)?;
    let label = |k: &str| claim.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned();
    Some((
        id.to_owned(),
        InstanceClaim {
            name: claim.metadata.name.clone().unwrap_or_default(),
            provider_id: provider_id.to_owned(),
            instance_type: label(labels::INSTANCE_TYPE),
            zone: label(labels::ZONE),
            capacity_type: label(labels::CAPACITY_TYPE),
            capacity_reservation_id: label(karpenter_requirements::labels::RESERVATION_ID),
        },
    ))
}

#[async_trait]
impl InstanceLookup for NodeClaimLookup {
    async fn lookup(&self, instance_ids: &[String]) -> Result<BTreeMap<String, InstanceClaim>, LookupError> {
        let api: kube::Api<karpenter_api::nodeclaim::NodeClaim> = kube::Api::all(self.client.clone());
        let list = api.list(&kube::api::ListParams::default()).await.map_err(|e| LookupError(e.to_string()))?;
        let wanted: BTreeSet<&str> = instance_ids.iter().map(String::as_str).collect();
        Ok(list.items.iter().filter_map(instance_claim).filter(|(id, _)| wanted.contains(id.as_str())).collect())
    }
}

/// An [`InstanceLookup`] from a fixed map (tests, tools).
#[derive(Clone, Debug, Default)]
pub struct StaticLookup(pub BTreeMap<String, InstanceClaim>);

#[async_trait]
impl InstanceLookup for StaticLookup {
    async fn lookup(&self, instance_ids: &[String]) -> Result<BTreeMap<String, InstanceClaim>, LookupError> {
        Ok(instance_ids.iter().filter_map(|id| self.0.get(id).map(|c| (id.clone(), c.clone()))).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemoryQueue;
    use karpenter_cloudprovider::InterruptionSource;

    fn spot(id: &str) -> String {
        format!(
            r#"{{"version":"0","id":"e1","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2",
            "time":"2026-03-01T12:00:00Z","region":"us-west-2",
            "detail":{{"instance-id":"{id}","instance-action":"terminate"}}}}"#
        )
    }

    fn state(id: &str, state: &str) -> String {
        format!(
            r#"{{"version":"0","id":"e2","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2",
            "detail":{{"instance-id":"{id}","state":"{state}"}}}}"#
        )
    }

    fn rebalance(id: &str) -> String {
        format!(
            r#"{{"version":"0","id":"e3","detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2",
            "detail":{{"instance-id":"{id}"}}}}"#
        )
    }

    fn claim(id: &str) -> (String, InstanceClaim) {
        (
            id.to_owned(),
            InstanceClaim {
                name: format!("claim-{id}"),
                provider_id: format!("aws:///us-west-2a/{id}"),
                instance_type: Some("m5.large".into()),
                zone: Some("us-west-2a".into()),
                capacity_type: Some("spot".into()),
                capacity_reservation_id: None,
            },
        )
    }

    fn lookup(ids: &[&str]) -> Arc<StaticLookup> {
        Arc::new(StaticLookup(ids.iter().map(|id| claim(id)).collect()))
    }

    #[derive(Debug, Default)]
    struct RecordingHook(std::sync::Mutex<Vec<String>>);

    impl InterruptionHook for RecordingHook {
        fn spot_interrupted(&self, claim: &InstanceClaim) {
            let offering = format!("spot:{:?}:{:?}", claim.instance_type, claim.zone);
            self.0.lock().unwrap().push(offering);
        }
        fn capacity_reservation_interrupted(&self, reservation_id: &str, _: &InstanceClaim) {
            self.0.lock().unwrap().push(format!("reservation:{reservation_id}"));
        }
    }

    #[tokio::test]
    async fn events_for_known_instances_and_deletes_what_produces_none() {
        let queue = Arc::new(MemoryQueue::new("karpenter-int"));
        let known = "i-0123456789abcdef0";
        queue.send(&spot(known));
        queue.send("{not json");
        queue.send(r#"{"version":"0","source":"aws.s3","detail-type":"Object Created","detail":{}}"#);
        queue.send(&spot("i-00000000000000001")); // no nodeclaim
        queue.send(&rebalance(known));
        let hook = Arc::new(RecordingHook::default());
        let source =
            SqsInterruptionSource::new(queue.clone(), lookup(&[known]), "karpenter-int").with_hook(hook.clone());

        let events = source.next_batch().await.unwrap();
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0].provider_id, format!("aws:///us-west-2a/{known}"));
        assert_eq!(events[0].kind, InterruptionKind::SpotInterrupted);
        assert_eq!(events[0].action, InterruptionAction::Delete);
        assert_eq!(events[1].kind, InterruptionKind::RebalanceRecommendation);
        assert_eq!(events[1].action, InterruptionAction::None);
        assert_ne!(events[0].ack_id, events[1].ack_id);
        // Malformed, no-op and unknown-instance messages are gone; the two with events wait for acknowledgement.
        assert_eq!(queue.len(), 2);
        let stats = source.stats();
        assert_eq!((stats.received, stats.malformed, stats.ignored, stats.deleted, stats.events), (5, 1, 2, 3, 2));
        assert_eq!(hook.0.lock().unwrap().as_slice(), [r#"spot:Some("m5.large"):Some("us-west-2a")"#]);

        source.acknowledge(&events).await.unwrap();
        assert_eq!(queue.len(), 0);
        // Acknowledging again (stale handles) is not an error.
        source.acknowledge(&events).await.unwrap();
        assert!(source.next_batch().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn parsed_messages_are_counted_by_kind_and_deletions_with_their_time_in_the_queue() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let clock = karpenter_testing::FakeClock::new(chrono::DateTime::from_timestamp(1_000, 0).unwrap());
        let known = "i-0123456789abcdef0";
        queue.send_at(&spot(known), Some(990_000)); // sent 10 s before now
        queue.send("{not json");
        queue.send_at(&state("i-00000000000000001", "stopping"), Some(999_000)); // no nodeclaim: deleted at once
        let metrics = crate::testing::registry();
        let source = SqsInterruptionSource::new(queue.clone(), lookup(&[known]), "q")
            .with_metrics(metrics.clone(), Arc::new(clock.clone()));
        let events = source.next_batch().await.unwrap();
        assert_eq!(events.len(), 1);
        let value = |series: &str| crate::testing::sample(&metrics.render(), series);
        let received =
            |kind: &str| value(&format!("karpenter_interruption_received_messages_total{{message_type=\"{kind}\"}}"));
        // A malformed message is deleted but was never a message of any kind.
        assert_eq!((received("spot_interrupted"), received("instance_stopped")), (Some(1.0), Some(1.0)));
        assert_eq!(value("karpenter_interruption_received_messages_total{message_type=\"no_op\"}"), None);
        // Both deleted; only the one with a send time has a time in the queue (1 s).
        assert_eq!(value("karpenter_interruption_deleted_messages_total"), Some(2.0));
        assert_eq!(value("karpenter_interruption_message_queue_duration_seconds_count"), Some(1.0));
        assert_eq!(value("karpenter_interruption_message_queue_duration_seconds_sum"), Some(1.0));
        clock.step_secs(5);
        source.acknowledge(&events).await.unwrap();
        // Sent 10 s before the receive, acked 5 s after: 15 s more.
        assert_eq!(value("karpenter_interruption_deleted_messages_total"), Some(3.0));
        assert_eq!(value("karpenter_interruption_message_queue_duration_seconds_sum"), Some(16.0));
        assert!(source.sent_times().is_empty(), "nothing kept once deleted");
    }

    #[tokio::test]
    async fn receive_parameters_and_queue_url_resolved_once() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let source = SqsInterruptionSource::new(queue.clone(), lookup(&[]), "q");
        source.next_batch().await.unwrap();
        source.next_batch().await.unwrap();
        let requests = queue.requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].max_messages, 10);
        assert_eq!(requests[0].wait_time_seconds, 20);
        assert_eq!(requests[0].visibility_timeout_seconds, 20);
        assert_eq!(requests[0].queue_url, queue.url());
        assert_eq!(queue.url_lookups(), 1);
        // A URL is used as it is.
        let by_url = SqsInterruptionSource::new(queue.clone(), lookup(&[]), queue.url());
        by_url.next_batch().await.unwrap();
        assert_eq!(queue.url_lookups(), 1);
    }

    #[tokio::test]
    async fn unacknowledged_messages_come_back_and_errors_do_not_stop_the_poller() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let id = "i-0aaaaaaaaaaaaaaaa";
        queue.send(&state(id, "stopping"));
        let source = SqsInterruptionSource::new(queue.clone(), lookup(&[id]), "q");
        let first = source.next_batch().await.unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].kind, InterruptionKind::InstanceStopped);
        // Not acknowledged: visible again (the in-memory queue has no visibility timer; it redelivers at once).
        let again = source.next_batch().await.unwrap();
        assert_eq!(again.len(), 1);

        queue.fail_next_receive(AwsApiError::new("ReceiveMessage", "ServiceUnavailable", "down"));
        let err = source.next_batch().await.unwrap_err();
        assert!(err.message.contains("ServiceUnavailable"), "{err}");
        let after = source.next_batch().await.unwrap();
        assert_eq!(after.len(), 1);
        source.acknowledge(&after).await.unwrap();
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn missing_queue_is_an_error_each_time_until_it_exists() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let source = SqsInterruptionSource::new(queue.clone(), lookup(&[]), "other");
        let err = source.next_batch().await.unwrap_err();
        assert!(err.message.contains("NonExistentQueue"), "{err}");
        assert!(source.next_batch().await.is_err());
    }

    #[tokio::test]
    async fn one_message_with_several_instances_shares_one_ack() {
        let queue = Arc::new(MemoryQueue::new("q"));
        let (a, b) = ("i-0aaaaaaaaaaaaaaaa", "i-0bbbbbbbbbbbbbbbb");
        queue.send(&format!(
            r#"{{"version":"0","id":"h","detail-type":"AWS Health Event","source":"aws.health",
            "detail":{{"service":"EC2","eventTypeCategory":"scheduledChange",
            "affectedEntities":[{{"entityValue":"{a}"}},{{"entityValue":"{b}"}}]}}}}"#
        ));
        let source = SqsInterruptionSource::new(queue.clone(), lookup(&[a, b]), "q");
        let events = source.next_batch().await.unwrap();
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|e| e.kind == InterruptionKind::ScheduledChange));
        assert_eq!(events[0].ack_id, events[1].ack_id);
        source.acknowledge(&events[..1]).await.unwrap();
        assert!(queue.is_empty());
        assert_eq!(source.stats().deleted, 1);
    }

    #[tokio::test]
    async fn spot_interruptions_mark_the_offering_unavailable() {
        use crate::launch::ice::UnavailableOfferings;
        use karpenter_cloudprovider::OfferingRef;
        let queue = Arc::new(MemoryQueue::new("q"));
        let id = "i-0aaaaaaaaaaaaaaaa";
        queue.send(&spot(id));
        let clock: Arc<dyn karpenter_cloudprovider::Clock> = Arc::new(karpenter_cloudprovider::SystemClock);
        let unavailable = UnavailableOfferings::new(clock);
        let source =
            SqsInterruptionSource::new(queue.clone(), lookup(&[id]), "q").with_hook(Arc::new(unavailable.clone()));
        assert!(!unavailable.is_unavailable(&OfferingRef::new("m5.large", "us-west-2a", "spot")));
        assert_eq!(source.next_batch().await.unwrap().len(), 1);
        assert!(unavailable.is_unavailable(&OfferingRef::new("m5.large", "us-west-2a", "spot")));
        assert!(!unavailable.is_unavailable(&OfferingRef::new("m5.large", "us-west-2a", "on-demand")));
    }

    #[test]
    fn instance_ids_of_provider_ids() {
        assert_eq!(instance_id_of("aws:///us-west-2a/i-0123456789abcdef0"), Some("i-0123456789abcdef0"));
        assert_eq!(instance_id_of("i-0123"), Some("i-0123"));
        assert_eq!(instance_id_of("kwok://node-1"), None);
        assert_eq!(instance_id_of(""), None);
    }

    #[test]
    fn every_kind_maps() {
        assert_eq!(kind_and_action(Kind::NoOp), None);
        for kind in [
            Kind::SpotInterrupted,
            Kind::ScheduledChange,
            Kind::InstanceStopped,
            Kind::InstanceTerminated,
            Kind::CapacityReservationInterrupted,
        ] {
            let (k, a) = kind_and_action(kind).unwrap();
            assert_eq!(k.as_str(), kind.as_str());
            assert_eq!(a, InterruptionAction::Delete);
        }
    }
}
