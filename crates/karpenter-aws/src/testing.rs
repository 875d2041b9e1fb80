//! In-memory implementations of AWS-A's API traits, for unit tests here and in other crates (feature
//! `test-util`): [`MemoryQueue`] ([`QueueApi`]), [`FakeEks`] ([`EksApi`]) and [`FakePricing`] ([`PricingApi`]).
//! Each records its calls and can be told to fail the next call with a given [`AwsApiError`], so tests reach the
//! error paths (throttling, missing queue, access denied) an emulator cannot produce.
//!
//! [`aws_kubelet`]: the instances of [`MockEc2`](crate::launch::mock::MockEc2) booting on a real API server, their
//! Nodes registering only when the real kubelet accepts their user data.

pub mod aws_kubelet;
mod node_class;

pub use node_class::{EC2NodeClassOptions, ec2_node_class};

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::api_error::{AwsApiError, AwsErrorKind};
use crate::discovery::{ClusterInfo, EksApi};
use crate::pricing_api::{OnDemandPrice, PricingApi, SpotPrice};
use crate::queue::{QueueApi, QueueMessage, ReceiveRequest};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct QueueState {
    /// Visible messages, oldest first.
    visible: VecDeque<QueueMessage>,
    /// Received, not yet deleted, by receipt handle. Redelivered on the next receive (no visibility timer).
    in_flight: BTreeMap<String, QueueMessage>,
    next_id: u64,
    receipts: u64,
    requests: Vec<ReceiveRequest>,
    url_lookups: usize,
    fail_receive: Option<AwsApiError>,
}

/// An SQS queue in memory. Received messages that are not deleted are delivered again by the next receive (as
/// if their visibility timeout had passed), each time with a new receipt handle.
#[derive(Debug)]
pub struct MemoryQueue {
    name: String,
    state: Mutex<QueueState>,
}

impl MemoryQueue {
    /// An empty queue named `name`.
    pub fn new(name: &str) -> Self {
        Self { name: name.to_owned(), state: Mutex::new(QueueState::default()) }
    }

    /// The queue's URL.
    pub fn url(&self) -> String {
        format!("https://sqs.us-west-2.amazonaws.com/123456789012/{}", self.name)
    }

    /// Sends a message; returns its id.
    pub fn send(&self, body: &str) -> String {
        self.send_at(body, None)
    }

    /// Sends a message SQS says was sent at `sent_ms` (ms since the epoch); returns its id.
    pub fn send_at(&self, body: &str, sent_ms: Option<i64>) -> String {
        let mut s = lock(&self.state);
        s.next_id += 1;
        let id = format!("msg-{}", s.next_id);
        s.visible.push_back(QueueMessage {
            message_id: id.clone(),
            receipt_handle: String::new(),
            body: body.to_owned(),
            sent_timestamp_ms: sent_ms,
        });
        id
    }

    /// Messages not deleted yet (visible or in flight).
    pub fn len(&self) -> usize {
        let s = lock(&self.state);
        s.visible.len() + s.in_flight.len()
    }

    /// Whether every message was deleted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The receive requests made so far.
    pub fn requests(&self) -> Vec<ReceiveRequest> {
        lock(&self.state).requests.clone()
    }

    /// How many `GetQueueUrl` calls were made.
    pub fn url_lookups(&self) -> usize {
        lock(&self.state).url_lookups
    }

    /// The next receive fails with `error`.
    pub fn fail_next_receive(&self, error: AwsApiError) {
        lock(&self.state).fail_receive = Some(error);
    }
}

#[async_trait]
impl QueueApi for MemoryQueue {
    async fn queue_url(&self, queue_name: &str) -> Result<String, AwsApiError> {
        lock(&self.state).url_lookups += 1;
        if queue_name == self.name {
            Ok(self.url())
        } else {
            Err(AwsApiError::new(
                "GetQueueUrl",
                "AWS.SimpleQueueService.NonExistentQueue",
                "The specified queue does not exist.",
            ))
        }
    }

    async fn receive(&self, request: &ReceiveRequest) -> Result<Vec<QueueMessage>, AwsApiError> {
        let mut s = lock(&self.state);
        s.requests.push(request.clone());
        if let Some(e) = s.fail_receive.take() {
            return Err(e);
        }
        if request.queue_url != self.url() {
            return Err(AwsApiError::new("ReceiveMessage", "AWS.SimpleQueueService.NonExistentQueue", "no queue"));
        }
        // In-flight messages become visible again (the visibility timeout is not modelled).
        let redeliver: Vec<QueueMessage> = std::mem::take(&mut s.in_flight).into_values().collect();
        for m in redeliver.into_iter().rev() {
            s.visible.push_front(m);
        }
        let n = usize::try_from(request.max_messages.clamp(1, 10)).unwrap_or(10);
        let mut out = Vec::new();
        while out.len() < n {
            let Some(mut m) = s.visible.pop_front() else { break };
            s.receipts += 1;
            m.receipt_handle = format!("rh-{}-{}", m.message_id, s.receipts);
            s.in_flight.insert(m.receipt_handle.clone(), m.clone());
            out.push(m);
        }
        Ok(out)
    }

    async fn delete(&self, queue_url: &str, receipt_handle: &str) -> Result<(), AwsApiError> {
        let mut s = lock(&self.state);
        if queue_url != self.url() {
            return Err(AwsApiError::new("DeleteMessage", "AWS.SimpleQueueService.NonExistentQueue", "no queue"));
        }
        match s.in_flight.remove(receipt_handle) {
            Some(_) => Ok(()),
            None => Err(AwsApiError::with_kind(
                "DeleteMessage",
                "ReceiptHandleIsInvalid",
                "the receipt handle is not current",
                AwsErrorKind::NotFound,
            )),
        }
    }
}

/// An EKS control plane with fixed clusters.
#[derive(Debug, Default)]
pub struct FakeEks {
    clusters: Mutex<BTreeMap<String, ClusterInfo>>,
    calls: Mutex<Vec<String>>,
    fail_next: Mutex<Option<AwsApiError>>,
}

impl FakeEks {
    /// No clusters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a cluster.
    pub fn with_cluster(self, name: &str, info: ClusterInfo) -> Self {
        lock(&self.clusters).insert(name.to_owned(), info);
        self
    }

    /// The clusters described so far.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.calls).clone()
    }

    /// The next call fails with `error`.
    pub fn fail_next(&self, error: AwsApiError) {
        *lock(&self.fail_next) = Some(error);
    }
}

#[async_trait]
impl EksApi for FakeEks {
    async fn describe_cluster(&self, name: &str) -> Result<ClusterInfo, AwsApiError> {
        lock(&self.calls).push(name.to_owned());
        if let Some(e) = lock(&self.fail_next).take() {
            return Err(e);
        }
        lock(&self.clusters).get(name).cloned().ok_or_else(|| {
            AwsApiError::new(
                "DescribeCluster",
                "ResourceNotFoundException",
                format!("No cluster found for name: {name}."),
            )
        })
    }
}

/// A Pricing API and spot price history with fixed answers.
#[derive(Debug, Default)]
pub struct FakePricing {
    on_demand: Mutex<Vec<OnDemandPrice>>,
    spot: Mutex<Vec<SpotPrice>>,
    calls: Mutex<Vec<String>>,
    fail_on_demand: Mutex<Option<AwsApiError>>,
    fail_spot: Mutex<Option<AwsApiError>>,
}

impl FakePricing {
    /// No prices.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the on-demand answer.
    pub fn set_on_demand(&self, prices: Vec<OnDemandPrice>) {
        *lock(&self.on_demand) = prices;
    }

    /// Sets the spot answer.
    pub fn set_spot(&self, prices: Vec<SpotPrice>) {
        *lock(&self.spot) = prices;
    }

    /// The next on-demand call fails with `error`.
    pub fn fail_on_demand(&self, error: AwsApiError) {
        *lock(&self.fail_on_demand) = Some(error);
    }

    /// The next spot call fails with `error`.
    pub fn fail_spot(&self, error: AwsApiError) {
        *lock(&self.fail_spot) = Some(error);
    }

    /// The calls so far (`on-demand:<region>`, `spot`).
    pub fn calls(&self) -> Vec<String> {
        lock(&self.calls).clone()
    }
}

#[async_trait]
impl PricingApi for FakePricing {
    async fn on_demand_prices(&self, region: &str) -> Result<Vec<OnDemandPrice>, AwsApiError> {
        lock(&self.calls).push(format!("on-demand:{region}"));
        if let Some(e) = lock(&self.fail_on_demand).take() {
            return Err(e);
        }
        Ok(lock(&self.on_demand).clone())
    }

    async fn spot_prices(&self, _start_time: chrono::DateTime<chrono::Utc>) -> Result<Vec<SpotPrice>, AwsApiError> {
        lock(&self.calls).push("spot".to_owned());
        if let Some(e) = lock(&self.fail_spot).take() {
            return Err(e);
        }
        Ok(lock(&self.spot).clone())
    }
}

/// The value of one series in a registry's exposition (`name{labels}` exactly as rendered; a series without
/// labels may be given bare), `None` when it has no sample.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series || name.strip_suffix("{}") == Some(series)).then(|| value.parse().ok()).flatten()
    })
}

/// A registry for a test to record into and read back.
pub fn registry() -> std::sync::Arc<karpenter_runtime::metrics::Metrics> {
    std::sync::Arc::new(karpenter_runtime::metrics::Metrics::new(&karpenter_runtime::metrics::BuildInfo::default()))
}
