//! In-process batching of EC2 calls.
//!
//! Callers [`submit`](Batcher::submit) an item under a key; items with the same key arriving within the
//! window are executed together. A batch closes when no item arrived for `idle`, `max` after its first item, or
//! at `max_items`. The batch runs on a spawned tokio task, so a caller that gives up does not strand the others.
//!
//! | Call | idle | max | items | merge |
//! |---|---|---|---|---|
//! | CreateFleet ([`FleetBatcher`]) | 35 ms | 1 s | 1000 | requests equal but for the NodeClaim tag → one fleet with `TotalTargetCapacity = N`; instances handed out one per caller and tagged with the caller's NodeClaim |
//! | DescribeInstances ([`DescribeBatcher`]) | 100 ms | 1 s | 500 | instance ids of requests with equal filters |
//! | TerminateInstances ([`TerminateBatcher`]) | 100 ms | 1 s | 500 | instance ids |
//!
//! A batcher given the metrics registry records, as each batch starts executing, how many requests it holds and
//! how long it was held open (first arrival to close), as upstream's
//! `karpenter_cloudprovider_batcher_batch_size` and `karpenter_cloudprovider_batcher_batch_time_seconds`, labelled
//! `batcher` with the names upstream gives its three batchers ([`CREATE_FLEET_BATCHER`],
//! [`DESCRIBE_INSTANCES_BATCHER`], [`TERMINATE_INSTANCES_BATCHER`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use karpenter_cloudprovider::time::tokio_now;
use karpenter_runtime::metrics::Metrics;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use crate::api_error::{AwsApiError, AwsErrorKind};
use crate::launch::fleet::{
    CreateFleetRequest, CreateFleetResponse, DescribeInstancesRequest, Ec2Instance, FleetApi, NODE_CLAIM_TAG,
    TerminatingInstance,
};
use crate::metrics::AwsMetrics;

/// The `batcher` label of the CreateFleet batcher's metrics.
pub const CREATE_FLEET_BATCHER: &str = "create_fleet";
/// The `batcher` label of the DescribeInstances batcher's metrics.
pub const DESCRIBE_INSTANCES_BATCHER: &str = "describe_instances";
/// The `batcher` label of the TerminateInstances batcher's metrics.
pub const TERMINATE_INSTANCES_BATCHER: &str = "terminate_instances";

/// A batcher's name and the registry its batches are recorded in.
#[derive(Clone, Debug)]
struct Observer {
    name: &'static str,
    metrics: Arc<Metrics>,
}

/// A batching window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchWindow {
    /// Close the batch when no item arrived for this long.
    pub idle: Duration,
    /// Close the batch this long after its first item.
    pub max: Duration,
    /// Close the batch at this many items.
    pub max_items: usize,
}

impl BatchWindow {
    /// CreateFleet: 35 ms idle, 1 s max, 1000 items.
    pub const CREATE_FLEET: BatchWindow =
        BatchWindow { idle: Duration::from_millis(35), max: Duration::from_secs(1), max_items: 1000 };
    /// DescribeInstances: 100 ms idle, 1 s max, 500 items.
    pub const DESCRIBE_INSTANCES: BatchWindow =
        BatchWindow { idle: Duration::from_millis(100), max: Duration::from_secs(1), max_items: 500 };
    /// TerminateInstances: 100 ms idle, 1 s max, 500 items.
    pub const TERMINATE_INSTANCES: BatchWindow =
        BatchWindow { idle: Duration::from_millis(100), max: Duration::from_secs(1), max_items: 500 };
    /// No waiting: every item alone (tests, or batching off).
    pub const NONE: BatchWindow = BatchWindow { idle: Duration::ZERO, max: Duration::ZERO, max_items: 1 };
}

/// Runs one batch: returns one output per item, in item order.
#[async_trait]
pub trait BatchExecutor<I, O>: Send + Sync + 'static {
    /// Executes `items` (all submitted under `key`).
    async fn execute(&self, key: &str, items: Vec<I>) -> Vec<O>;
}

struct Pending<I, O> {
    items: Vec<(I, oneshot::Sender<O>)>,
    first: Instant,
    last: Instant,
    /// Closed at `max_items`: no more items, run now.
    sealed: bool,
}

type Shared<I, O> = Arc<(Mutex<Pending<I, O>>, Notify)>;
type PendingMap<I, O> = Arc<Mutex<BTreeMap<String, Shared<I, O>>>>;

/// A batcher of items `I` answered by outputs `O`.
pub struct Batcher<I, O> {
    window: BatchWindow,
    executor: Arc<dyn BatchExecutor<I, O>>,
    open: PendingMap<I, O>,
    observer: Option<Observer>,
}

impl<I, O> fmt::Debug for Batcher<I, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batcher").field("window", &self.window).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// A batcher with `window` running batches through `executor`.
    pub fn new(window: BatchWindow, executor: Arc<dyn BatchExecutor<I, O>>) -> Self {
        Self { window, executor, open: Arc::new(Mutex::new(BTreeMap::new())), observer: None }
    }

    /// The same batcher, recording each batch into `metrics` under the name `name` (the `batcher` label).
    pub fn with_metrics(mut self, name: &'static str, metrics: Arc<Metrics>) -> Self {
        self.observer = Some(Observer { name, metrics });
        self
    }

    /// Submits `item` under `key` and waits for its output; `None` if the batch task died (a panic in the
    /// executor) or the executor returned too few outputs.
    pub async fn submit(&self, key: String, item: I) -> Option<O> {
        let (tx, rx) = oneshot::channel();
        // Windows are slept on tokio's timer, so arrivals are stamped on its clock (which tests pause).
        let now = tokio_now();
        let spawn = {
            let mut open = lock(&self.open);
            match open.get(&key).cloned() {
                Some(shared) => {
                    let mut p = lock(&shared.0);
                    p.items.push((item, tx));
                    p.last = now;
                    if p.items.len() >= self.window.max_items {
                        p.sealed = true;
                        open.remove(&key);
                        shared.1.notify_one();
                    }
                    None
                }
                None => {
                    let sealed = self.window.max_items <= 1;
                    let shared: Shared<I, O> = Arc::new((
                        Mutex::new(Pending { items: vec![(item, tx)], first: now, last: now, sealed }),
                        Notify::new(),
                    ));
                    if !sealed {
                        open.insert(key.clone(), shared.clone());
                    }
                    Some(shared)
                }
            }
        };
        if let Some(shared) = spawn {
            let (window, executor, open) = (self.window, self.executor.clone(), self.open.clone());
            tokio::spawn(run_batch(key, shared, window, executor, open, self.observer.clone()));
        }
        rx.await.ok()
    }
}

async fn run_batch<I: Send + 'static, O: Send + 'static>(
    key: String,
    shared: Shared<I, O>,
    window: BatchWindow,
    executor: Arc<dyn BatchExecutor<I, O>>,
    open: PendingMap<I, O>,
    observer: Option<Observer>,
) {
    loop {
        let deadline = {
            let p = lock(&shared.0);
            if p.sealed {
                break;
            }
            (p.last + window.idle).min(p.first + window.max)
        };
        if tokio_now() >= deadline {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {}
            () = shared.1.notified() => {}
        }
    }
    let (items, first) = {
        let mut open = lock(&open);
        if open.get(&key).is_some_and(|s| Arc::ptr_eq(s, &shared)) {
            open.remove(&key);
        }
        let mut p = lock(&shared.0);
        p.sealed = true;
        (std::mem::take(&mut p.items), p.first)
    };
    if let Some(o) = &observer {
        // A batch holds at most 1000 requests: exact as f64.
        o.metrics.cloudprovider_batcher_batch_size(o.name).observe(items.len() as f64);
        let held_open = tokio_now().saturating_duration_since(first);
        o.metrics.cloudprovider_batcher_batch_time_seconds(o.name).observe(held_open.as_secs_f64());
    }
    let (items, senders): (Vec<I>, Vec<oneshot::Sender<O>>) = items.into_iter().unzip();
    let outputs = executor.execute(&key, items).await;
    for (tx, out) in senders.into_iter().zip(outputs) {
        let _ = tx.send(out);
    }
}

// -------------------------------------------------------------------------------------------------------------
// CreateFleet.
// -------------------------------------------------------------------------------------------------------------

/// What one caller of a merged fleet gets: its instance (if any) and the fleet's errors.
pub type FleetOutcome = Result<CreateFleetResponse, AwsApiError>;

/// Merges CreateFleet requests that are equal apart from the NodeClaim tag.
#[derive(Debug)]
pub struct FleetExecutor {
    api: Arc<dyn FleetApi>,
}

#[async_trait]
impl BatchExecutor<CreateFleetRequest, FleetOutcome> for FleetExecutor {
    async fn execute(&self, _key: &str, items: Vec<CreateFleetRequest>) -> Vec<FleetOutcome> {
        let n = items.len();
        let Some(first) = items.first() else { return Vec::new() };
        if n == 1 {
            return vec![self.api.create_fleet(first).await];
        }
        let mut merged = first.clone();
        merged.tags.remove(NODE_CLAIM_TAG);
        merged.total_target_capacity = u32::try_from(n).unwrap_or(u32::MAX);
        let response = match self.api.create_fleet(&merged).await {
            Ok(r) => r,
            Err(e) => return vec![Err(e); n],
        };
        let mut instances = response.instances.into_iter();
        let mut out = Vec::with_capacity(n);
        for item in &items {
            match instances.next() {
                Some(instance) => {
                    // Tag the instance with its NodeClaim so a create retried after a restart finds it.
                    if let Some(claim) = item.tags.get(NODE_CLAIM_TAG) {
                        let tags = BTreeMap::from([(NODE_CLAIM_TAG.to_owned(), claim.clone())]);
                        if let Err(e) = self.api.create_tags(std::slice::from_ref(&instance.instance_id), &tags).await {
                            tracing::warn!(instance = %instance.instance_id, error = %e, "tagging a batched fleet instance with its NodeClaim failed");
                        }
                    }
                    out.push(Ok(CreateFleetResponse { instances: vec![instance], errors: response.errors.clone() }));
                }
                None => out.push(Ok(CreateFleetResponse { instances: vec![], errors: response.errors.clone() })),
            }
        }
        // More instances than callers cannot happen for an instant fleet; if it did they stay tagged with the
        // NodePool and the garbage collector terminates them.
        out
    }
}

/// The CreateFleet batcher.
pub type FleetBatcher = Batcher<CreateFleetRequest, FleetOutcome>;

/// A CreateFleet batcher over `api` with `window` ([`BatchWindow::CREATE_FLEET`] in production); report its
/// batches with `.with_metrics(CREATE_FLEET_BATCHER, metrics)`.
pub fn fleet_batcher(api: Arc<dyn FleetApi>, window: BatchWindow) -> FleetBatcher {
    Batcher::new(window, Arc::new(FleetExecutor { api }))
}

/// Submits a CreateFleet request through the batcher.
pub async fn create_fleet(batcher: &FleetBatcher, request: CreateFleetRequest) -> FleetOutcome {
    let key = request.batch_key();
    batcher.submit(key, request).await.unwrap_or_else(|| Err(batch_failed("CreateFleet")))
}

fn batch_failed(operation: &str) -> AwsApiError {
    AwsApiError {
        operation: operation.into(),
        code: "BatchFailed".into(),
        message: "the batched call did not answer".into(),
        kind: AwsErrorKind::Transient,
    }
}

// -------------------------------------------------------------------------------------------------------------
// DescribeInstances.
// -------------------------------------------------------------------------------------------------------------

/// One instance id's answer: the instance, or `None` when EC2 does not have it.
pub type DescribeOutcome = Result<Option<Ec2Instance>, AwsApiError>;

/// Merges DescribeInstances by id for requests with equal filters (the key is the filters' JSON).
#[derive(Debug)]
pub struct DescribeExecutor {
    api: Arc<dyn FleetApi>,
    filters: Mutex<BTreeMap<String, Vec<crate::launch::fleet::Filter>>>,
}

impl DescribeExecutor {
    async fn describe(
        &self,
        ids: Vec<String>,
        filters: Vec<crate::launch::fleet::Filter>,
    ) -> Result<Vec<Ec2Instance>, AwsApiError> {
        self.api.describe_instances(&DescribeInstancesRequest { instance_ids: ids, filters }).await
    }
}

#[async_trait]
impl BatchExecutor<String, DescribeOutcome> for DescribeExecutor {
    async fn execute(&self, key: &str, ids: Vec<String>) -> Vec<DescribeOutcome> {
        let filters = lock(&self.filters).get(key).cloned().unwrap_or_default();
        let unique: Vec<String> = ids.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect();
        let found = match self.describe(unique.clone(), filters.clone()).await {
            Ok(found) => found,
            // One unknown id fails the whole call: ask id by id.
            Err(e) if e.kind == AwsErrorKind::NotFound && unique.len() > 1 => {
                let mut found = Vec::new();
                for id in &unique {
                    match self.describe(vec![id.clone()], filters.clone()).await {
                        Ok(mut f) => found.append(&mut f),
                        Err(e) if e.kind == AwsErrorKind::NotFound => {}
                        Err(e) => return vec![Err(e); ids.len()],
                    }
                }
                found
            }
            Err(e) if e.kind == AwsErrorKind::NotFound => Vec::new(),
            Err(e) => return vec![Err(e); ids.len()],
        };
        ids.iter().map(|id| Ok(found.iter().find(|i| &i.instance_id == id).cloned())).collect()
    }
}

/// The DescribeInstances batcher (by id, with filters).
#[derive(Debug)]
pub struct DescribeBatcher {
    executor: Arc<DescribeExecutor>,
    batcher: Batcher<String, DescribeOutcome>,
}

impl DescribeBatcher {
    /// A batcher over `api` with `window` ([`BatchWindow::DESCRIBE_INSTANCES`] in production).
    pub fn new(api: Arc<dyn FleetApi>, window: BatchWindow) -> Self {
        let executor = Arc::new(DescribeExecutor { api, filters: Mutex::new(BTreeMap::new()) });
        Self { batcher: Batcher::new(window, executor.clone()), executor }
    }

    /// The same batcher, recording its batches into `metrics` as [`DESCRIBE_INSTANCES_BATCHER`].
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.batcher = self.batcher.with_metrics(DESCRIBE_INSTANCES_BATCHER, metrics);
        self
    }

    /// Describes one instance (with `filters`, e.g. the live states): `Ok(None)` when EC2 does not have it.
    pub async fn describe(&self, instance_id: &str, filters: Vec<crate::launch::fleet::Filter>) -> DescribeOutcome {
        let key = serde_json::to_string(&filters).unwrap_or_default();
        lock(&self.executor.filters).insert(key.clone(), filters);
        self.batcher.submit(key, instance_id.to_owned()).await.unwrap_or_else(|| Err(batch_failed("DescribeInstances")))
    }
}

// -------------------------------------------------------------------------------------------------------------
// TerminateInstances.
// -------------------------------------------------------------------------------------------------------------

/// One instance id's answer: its new state, or `None` when EC2 did not report it.
pub type TerminateOutcome = Result<Option<TerminatingInstance>, AwsApiError>;

/// Merges TerminateInstances by id.
#[derive(Debug)]
pub struct TerminateExecutor {
    api: Arc<dyn FleetApi>,
}

#[async_trait]
impl BatchExecutor<String, TerminateOutcome> for TerminateExecutor {
    async fn execute(&self, _key: &str, ids: Vec<String>) -> Vec<TerminateOutcome> {
        let unique: Vec<String> = ids.iter().cloned().collect::<BTreeSet<_>>().into_iter().collect();
        let answer = match self.api.terminate_instances(&unique).await {
            Ok(a) => a,
            Err(e) if e.kind == AwsErrorKind::NotFound && unique.len() > 1 => {
                let mut all = Vec::new();
                for id in &unique {
                    match self.api.terminate_instances(std::slice::from_ref(id)).await {
                        Ok(mut a) => all.append(&mut a),
                        Err(e) if e.kind == AwsErrorKind::NotFound => {}
                        Err(e) => return vec![Err(e); ids.len()],
                    }
                }
                all
            }
            Err(e) => return vec![Err(e); ids.len()],
        };
        ids.iter().map(|id| Ok(answer.iter().find(|t| &t.instance_id == id).cloned())).collect()
    }
}

/// The TerminateInstances batcher.
#[derive(Debug)]
pub struct TerminateBatcher {
    batcher: Batcher<String, TerminateOutcome>,
}

impl TerminateBatcher {
    /// A batcher over `api` with `window` ([`BatchWindow::TERMINATE_INSTANCES`] in production).
    pub fn new(api: Arc<dyn FleetApi>, window: BatchWindow) -> Self {
        Self { batcher: Batcher::new(window, Arc::new(TerminateExecutor { api })) }
    }

    /// The same batcher, recording its batches into `metrics` as [`TERMINATE_INSTANCES_BATCHER`].
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.batcher = self.batcher.with_metrics(TERMINATE_INSTANCES_BATCHER, metrics);
        self
    }

    /// Terminates one instance. A NotFound error from EC2 for this id alone is `Ok(None)`.
    pub async fn terminate(&self, instance_id: &str) -> TerminateOutcome {
        match self.batcher.submit(String::new(), instance_id.to_owned()).await {
            Some(Err(e)) if e.kind == AwsErrorKind::NotFound => Ok(None),
            Some(r) => r,
            None => Err(batch_failed("TerminateInstances")),
        }
    }
}

#[cfg(test)]
mod tests;
