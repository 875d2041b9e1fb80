//! controller-runtime's reconcile metrics and client-go's workqueue metrics, per controller, with the names,
//! types, labels and buckets upstream Karpenter serves (controller-runtime v0.23/v0.24 with its priority queue:
//! `controller_runtime_*{controller}` and `workqueue_*{name,controller}`, `workqueue_depth` also by `priority`).
//!
//! Our controllers are hand-written loops, most over kube-runtime's `Controller`, not controller-runtime, so the
//! rule that turns one reconcile into samples lives here once: a controller obtains a [`ReconcileMetrics`] from
//! the registry by name ([`super::Metrics::reconciler`]) and wraps every reconcile step in
//! [`ReconcileMetrics::start`], whose [`ReconcileGuard`] records the result and the duration. A loop that owns
//! its queue also reports what enters it ([`ReconcileMetrics::queued`]). A kube-runtime controller's queue is
//! inside kube-runtime, so [`queue::ControllerQueue`] watches it from outside: what the trigger streams and
//! mappers hand kube-runtime enters, a reconcile starting (or kube-runtime finding the object gone) leaves.
//!
//! The hot path is a few atomic updates on series resolved once per controller, plus one short lock for the
//! in-flight list that `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds` are
//! computed from when the registry is rendered (client-go refreshes them on a 500 ms ticker instead).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use karpenter_cloudprovider::time::Stopwatch;
use kube::runtime::controller::Action;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::{CounterFamily, FloatGauge, GaugeFamily, HistogramFamily, MetricDescriptor, MetricType, labels};

pub mod queue;

/// controller-runtime's buckets of `controller_runtime_reconcile_time_seconds` (5 ms to 60 s).
pub const RECONCILE_TIME_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5,
    1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
];

/// client-go's workqueue duration buckets: 12 powers of ten from 10 ns to 1,000 s.
pub const WORKQUEUE_BUCKETS: &[f64] = &[1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0];

fn reconcile_time_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS.iter().copied())
}
fn workqueue_histogram() -> Histogram {
    Histogram::new(WORKQUEUE_BUCKETS.iter().copied())
}

const CONTROLLER: &[&str] = &["controller"];
const RESULT: &[&str] = &["controller", "result"];
const QUEUE: &[&str] = &["name", "controller"];
const DEPTH: &[&str] = &["name", "controller", "priority"];

/// The results of `controller_runtime_reconcile_total`, as controller-runtime names them.
pub const RESULTS: [&str; 4] = ["success", "error", "requeue", "requeue_after"];

/// Every family of this module: (exposition name, type, labels, help). Registration and
/// [`super::Metrics::descriptors`] both read it, so it is the one list.
pub const FAMILIES: &[(&str, MetricType, &[&str], &str)] = &[
    (
        "controller_runtime_reconcile_total",
        MetricType::Counter,
        RESULT,
        "Total number of reconciliations per controller, by result: success, error, requeue (an immediate retry \
         we do not use) or requeue_after (a reconcile that asked to run again after a delay).",
    ),
    (
        "controller_runtime_reconcile_errors_total",
        MetricType::Counter,
        CONTROLLER,
        "Total number of reconciliation errors per controller.",
    ),
    (
        "controller_runtime_reconcile_time_seconds",
        MetricType::Histogram,
        CONTROLLER,
        "Length of time per reconciliation per controller (controller-runtime's buckets, 5 ms to 60 s).",
    ),
    (
        "controller_runtime_active_workers",
        MetricType::Gauge,
        CONTROLLER,
        "Number of reconciles running now per controller.",
    ),
    (
        "controller_runtime_max_concurrent_reconciles",
        MetricType::Gauge,
        CONTROLLER,
        "Maximum number of concurrent reconciles per controller (0: unbounded, kube-runtime's default).",
    ),
    (
        "workqueue_depth",
        MetricType::Gauge,
        DEPTH,
        "Current depth of workqueue by workqueue and priority (always priority 0 here): the objects (or a \
         periodic loop's passes) queued and not yet taken by a reconcile. An object waits once however often \
         it is queued, as in client-go.",
    ),
    (
        "workqueue_adds_total",
        MetricType::Counter,
        QUEUE,
        "Total number of adds handled by workqueue: an object queued while not already waiting (a watch event, \
         a mapped or owned object's change, a requeue coming due), or a periodic loop's pass.",
    ),
    (
        "workqueue_queue_duration_seconds",
        MetricType::Histogram,
        QUEUE,
        "How long in seconds an item stays in workqueue before being requested (a requeue kube-runtime \
         schedules itself is counted as taken when it comes due).",
    ),
    (
        "workqueue_work_duration_seconds",
        MetricType::Histogram,
        QUEUE,
        "How long in seconds processing an item from workqueue takes.",
    ),
    (
        "workqueue_unfinished_work_seconds",
        MetricType::Gauge,
        QUEUE,
        "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. \
         Large values indicate stuck reconciles.",
    ),
    (
        "workqueue_longest_running_processor_seconds",
        MetricType::Gauge,
        QUEUE,
        "How many seconds has the longest running reconcile of this controller been running.",
    ),
    (
        "workqueue_retries_total",
        MetricType::Counter,
        QUEUE,
        "Total number of items added to the workqueue with a non-zero delay (reconciles that failed or asked \
         to run again after a delay).",
    ),
];

/// The families of [`FAMILIES`], registered on the root registry (these names have no `karpenter_` prefix).
pub(super) struct RuntimeFamilies {
    reconcile_total: CounterFamily,
    reconcile_errors: CounterFamily,
    reconcile_time: HistogramFamily,
    active_workers: GaugeFamily,
    max_concurrent: GaugeFamily,
    depth: GaugeFamily,
    adds: CounterFamily,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    unfinished: GaugeFamily,
    longest: GaugeFamily,
    retries: CounterFamily,
    /// Every controller's series, by name: a second [`super::Metrics::reconciler`] for a name shares them.
    controllers: Mutex<Vec<Arc<ControllerSeries>>>,
}

impl RuntimeFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let this = Self {
            reconcile_total: CounterFamily::default(),
            reconcile_errors: CounterFamily::default(),
            reconcile_time: HistogramFamily::new_with_constructor(reconcile_time_histogram as fn() -> Histogram),
            active_workers: GaugeFamily::default(),
            max_concurrent: GaugeFamily::default(),
            depth: GaugeFamily::default(),
            adds: CounterFamily::default(),
            queue_duration: HistogramFamily::new_with_constructor(workqueue_histogram as fn() -> Histogram),
            work_duration: HistogramFamily::new_with_constructor(workqueue_histogram as fn() -> Histogram),
            unfinished: GaugeFamily::default(),
            longest: GaugeFamily::default(),
            retries: CounterFamily::default(),
            controllers: Mutex::default(),
        };
        for (name, kind, _, help) in FAMILIES {
            // Counters are registered without `_total`, which the encoder appends.
            let base = if *kind == MetricType::Counter { name.trim_end_matches("_total") } else { name };
            match *name {
                "controller_runtime_reconcile_total" => registry.register(base, *help, this.reconcile_total.clone()),
                "controller_runtime_reconcile_errors_total" => {
                    registry.register(base, *help, this.reconcile_errors.clone())
                }
                "controller_runtime_reconcile_time_seconds" => {
                    registry.register(base, *help, this.reconcile_time.clone())
                }
                "controller_runtime_active_workers" => registry.register(base, *help, this.active_workers.clone()),
                "controller_runtime_max_concurrent_reconciles" => {
                    registry.register(base, *help, this.max_concurrent.clone())
                }
                "workqueue_depth" => registry.register(base, *help, this.depth.clone()),
                "workqueue_adds_total" => registry.register(base, *help, this.adds.clone()),
                "workqueue_queue_duration_seconds" => registry.register(base, *help, this.queue_duration.clone()),
                "workqueue_work_duration_seconds" => registry.register(base, *help, this.work_duration.clone()),
                "workqueue_unfinished_work_seconds" => registry.register(base, *help, this.unfinished.clone()),
                "workqueue_longest_running_processor_seconds" => registry.register(base, *help, this.longest.clone()),
                "workqueue_retries_total" => registry.register(base, *help, this.retries.clone()),
                other => unreachable!("{other} is in FAMILIES but has no family"),
            }
        }
        this
    }

    pub(super) fn descriptors() -> impl Iterator<Item = MetricDescriptor> {
        FAMILIES.iter().map(|(name, kind, labels, help)| MetricDescriptor {
            name: (*name).to_string(),
            kind: *kind,
            labels: labels.to_vec(),
            dynamic_labels: false,
            help: (*help).to_string(),
        })
    }

    /// The series of one controller (created at 0, as controller-runtime does when a controller starts).
    pub(super) fn controller(&self, name: &str, max_concurrent: usize) -> ReconcileMetrics {
        let mut controllers = self.controllers.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = controllers.iter().find(|c| c.name == name) {
            existing.max_concurrent.set(max_concurrent as f64);
            return ReconcileMetrics { series: existing.clone() };
        }
        let one = labels(CONTROLLER, &[name]);
        let queue = labels(QUEUE, &[name, name]);
        let result = |r: &str| self.reconcile_total.get_or_create_owned(&labels(RESULT, &[name, r]));
        let series = Arc::new(ControllerSeries {
            name: name.to_string(),
            success: result("success"),
            error: result("error"),
            requeue: result("requeue"),
            requeue_after: result("requeue_after"),
            errors: self.reconcile_errors.get_or_create_owned(&one),
            time: self.reconcile_time.get_or_create_owned(&one),
            active: self.active_workers.get_or_create_owned(&one),
            max_concurrent: self.max_concurrent.get_or_create_owned(&one),
            depth: self.depth.get_or_create_owned(&labels(DEPTH, &[name, name, "0"])),
            adds: self.adds.get_or_create_owned(&queue),
            queue_duration: self.queue_duration.get_or_create_owned(&queue),
            work_duration: self.work_duration.get_or_create_owned(&queue),
            unfinished: self.unfinished.get_or_create_owned(&queue),
            longest: self.longest.get_or_create_owned(&queue),
            retries: self.retries.get_or_create_owned(&queue),
            next_id: AtomicU64::new(0),
            in_flight: Mutex::default(),
            queued: Mutex::default(),
            waiting: Mutex::default(),
        });
        series.max_concurrent.set(max_concurrent as f64);
        controllers.push(series.clone());
        ReconcileMetrics { series }
    }

    /// Sets every controller's unfinished-work and longest-running gauges from its reconciles in flight now.
    pub(super) fn refresh_in_flight(&self) {
        for c in self.controllers.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            let in_flight = c.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
            let mut total = 0.0;
            let mut longest: f64 = 0.0;
            for (_, started) in in_flight.iter() {
                let secs = started.elapsed().as_secs_f64();
                total += secs;
                longest = longest.max(secs);
            }
            c.unfinished.set(total);
            c.longest.set(longest);
        }
    }
}

struct ControllerSeries {
    name: String,
    success: Counter,
    error: Counter,
    requeue: Counter,
    requeue_after: Counter,
    errors: Counter,
    time: Histogram,
    active: FloatGauge,
    max_concurrent: FloatGauge,
    depth: FloatGauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    unfinished: FloatGauge,
    longest: FloatGauge,
    retries: Counter,
    next_id: AtomicU64,
    /// Reconciles running now: (id, start). At most the controller's concurrency.
    in_flight: Mutex<Vec<(u64, Stopwatch)>>,
    /// When each item waiting in a loop's own queue was added, oldest first.
    queued: Mutex<VecDeque<Stopwatch>>,
    /// The objects waiting in a kube-runtime controller's queue ([`queue::ControllerQueue`]), by
    /// [`queue::object_key`], with when each was first queued.
    waiting: Mutex<HashMap<String, Stopwatch>>,
}

/// How one reconcile ended, in controller-runtime's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done; nothing scheduled (kube-runtime's `Action::await_change()`).
    Success,
    /// Failed; retried after the error policy's delay.
    Error,
    /// Asked to run again at once, rate limited.
    Requeue,
    /// Asked to run again after a delay (kube-runtime's `Action::requeue(d)`, a periodic loop's next pass).
    RequeueAfter,
}

impl ReconcileResult {
    /// The result of a kube-runtime reconcile.
    pub fn of_action<E>(result: &Result<Action, E>) -> Self {
        match result {
            Err(_) => Self::Error,
            Ok(action) if *action == Action::await_change() => Self::Success,
            Ok(_) => Self::RequeueAfter,
        }
    }

    /// The result of a periodic loop's pass: it always runs again after a delay, unless it failed.
    pub fn of_pass<T, E>(result: &Result<T, E>) -> Self {
        if result.is_ok() { Self::RequeueAfter } else { Self::Error }
    }

    /// The `result` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Requeue => "requeue",
            Self::RequeueAfter => "requeue_after",
        }
    }
}

/// One controller's reconcile and workqueue series (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct ReconcileMetrics {
    series: Arc<ControllerSeries>,
}

impl std::fmt::Debug for ReconcileMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconcileMetrics").field("controller", &self.series.name).finish()
    }
}

impl ReconcileMetrics {
    /// The controller's name (the `controller` label).
    pub fn controller(&self) -> &str {
        &self.series.name
    }

    /// An item entered the loop's own queue (`workqueue_adds_total`, `workqueue_depth`); the next
    /// [`ReconcileMetrics::start`] takes the oldest one and observes how long it waited.
    pub fn queued(&self) {
        self.series.adds.inc();
        self.series.depth.inc();
        self.series.queued.lock().unwrap_or_else(PoisonError::into_inner).push_back(Stopwatch::start());
    }

    /// A reconcile starts; finish the guard with its result. Dropped unfinished (the reconcile was cancelled,
    /// at shutdown), it records no result.
    #[must_use = "finish the guard with the reconcile's result"]
    pub fn start(&self) -> ReconcileGuard {
        let s = &self.series;
        if let Some(waited) = s.queued.lock().unwrap_or_else(PoisonError::into_inner).pop_front() {
            s.depth.dec();
            s.queue_duration.observe(waited.elapsed().as_secs_f64());
        }
        self.begin()
    }

    /// The object `key` entered a kube-runtime controller's queue. An object already waiting is not added
    /// again (kube-runtime runs it once, as client-go's dirty set does).
    pub fn object_queued(&self, key: String) {
        let s = &self.series;
        let mut waiting = s.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        if let std::collections::hash_map::Entry::Vacant(slot) = waiting.entry(key) {
            slot.insert(Stopwatch::start());
            s.adds.inc();
            s.depth.inc();
        }
    }

    /// kube-runtime took the object `key` off the queue without a reconcile: it is no longer in the store.
    pub fn object_dropped(&self, key: &str) {
        let s = &self.series;
        if let Some(waited) = s.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(key) {
            s.depth.dec();
            s.queue_duration.observe(waited.elapsed().as_secs_f64());
        }
    }

    /// A reconcile of the object `key` starts. Not waiting, it comes from kube-runtime's own schedule (a
    /// requeue its last reconcile or the error policy asked for, now due): client-go adds such an item when its
    /// delay is over, so it is counted as added and taken at once.
    #[must_use = "finish the guard with the reconcile's result"]
    pub fn start_object(&self, key: &str) -> ReconcileGuard {
        let s = &self.series;
        match s.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(key) {
            Some(waited) => {
                s.depth.dec();
                s.queue_duration.observe(waited.elapsed().as_secs_f64());
            }
            None => {
                s.adds.inc();
                s.queue_duration.observe(0.0);
            }
        }
        self.begin()
    }

    /// The reconcile itself: in flight from now until its guard is finished or dropped.
    fn begin(&self) -> ReconcileGuard {
        let s = &self.series;
        let id = s.next_id.fetch_add(1, Ordering::Relaxed);
        let started = Stopwatch::start();
        s.in_flight.lock().unwrap_or_else(PoisonError::into_inner).push((id, started));
        s.active.inc();
        ReconcileGuard { series: s.clone(), id, started }
    }

    /// One pass of a periodic loop (a singleton controller upstream): its one item enters the queue when the
    /// loop wakes and is taken at once, as controller-runtime shows a singleton's requeue.
    #[must_use = "finish the guard with the pass's result"]
    pub fn pass(&self) -> ReconcileGuard {
        self.queued();
        self.start()
    }

    /// Runs one kube-runtime reconcile under a guard and records its result.
    pub async fn reconcile<E>(&self, work: impl Future<Output = Result<Action, E>>) -> Result<Action, E> {
        let guard = self.start();
        let result = work.await;
        guard.finish(ReconcileResult::of_action(&result));
        result
    }
}

/// One reconcile in flight (see [`ReconcileMetrics::start`]).
#[must_use = "finish the guard with the reconcile's result"]
pub struct ReconcileGuard {
    series: Arc<ControllerSeries>,
    id: u64,
    started: Stopwatch,
}

impl ReconcileGuard {
    /// Records the result and the duration.
    pub fn finish(self, result: ReconcileResult) {
        let s = &self.series;
        let secs = self.started.elapsed().as_secs_f64();
        s.time.observe(secs);
        s.work_duration.observe(secs);
        match result {
            ReconcileResult::Success => s.success.inc(),
            ReconcileResult::Error => {
                s.errors.inc();
                s.error.inc()
            }
            ReconcileResult::Requeue => s.requeue.inc(),
            ReconcileResult::RequeueAfter => s.requeue_after.inc(),
        };
        // Everything but success puts the item back with a delay (rate limited or after), which client-go
        // counts as a retry.
        if result != ReconcileResult::Success {
            s.retries.inc();
        }
        // Drop removes it from the in-flight list.
    }
}

impl std::fmt::Debug for ReconcileGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconcileGuard").field("controller", &self.series.name).finish_non_exhaustive()
    }
}

impl Drop for ReconcileGuard {
    fn drop(&mut self) {
        self.series.active.dec();
        let mut in_flight = self.series.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = in_flight.iter().position(|(id, _)| *id == self.id) {
            in_flight.swap_remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{BuildInfo, Metrics};

    fn sample(text: &str, series: &str) -> f64 {
        let line = text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    }

    #[test]
    fn a_controller_exposes_every_series_at_zero_from_the_start() {
        let metrics = Metrics::new(&BuildInfo::default());
        let _ = metrics.reconciler("nodeclaim.lifecycle", 64);
        let text = metrics.render();
        for result in RESULTS {
            let series =
                format!("controller_runtime_reconcile_total{{controller=\"nodeclaim.lifecycle\",result=\"{result}\"}}");
            assert_eq!(sample(&text, &series), 0.0);
        }
        assert_eq!(
            sample(&text, "controller_runtime_max_concurrent_reconciles{controller=\"nodeclaim.lifecycle\"}"),
            64.0
        );
        assert_eq!(
            sample(
                &text,
                "workqueue_depth{name=\"nodeclaim.lifecycle\",controller=\"nodeclaim.lifecycle\",priority=\"0\"}"
            ),
            0.0
        );
        assert!(text.contains("# TYPE workqueue_adds counter"), "{text}");
        assert!(text.contains("workqueue_queue_duration_seconds_bucket{le=\"1e-8\",name=\"nodeclaim.lifecycle\""));
        assert!(text.contains("controller_runtime_reconcile_time_seconds_bucket{le=\"60.0\",controller="));
    }

    #[tokio::test]
    async fn results_errors_and_retries_are_counted_as_controller_runtime_counts_them() {
        let metrics = Metrics::new(&BuildInfo::default());
        let r = metrics.reconciler("node.termination", 0);
        r.reconcile(async { Ok::<_, ()>(Action::await_change()) }).await.unwrap();
        r.reconcile(async { Ok::<_, ()>(Action::requeue(std::time::Duration::from_secs(5))) }).await.unwrap();
        // The fault path: a failed reconcile.
        r.reconcile(async { Err::<Action, _>("the API server is down") }).await.unwrap_err();
        let text = metrics.render();
        let total = |result: &str| {
            sample(
                &text,
                &format!("controller_runtime_reconcile_total{{controller=\"node.termination\",result=\"{result}\"}}"),
            )
        };
        assert_eq!((total("success"), total("requeue_after"), total("error"), total("requeue")), (1.0, 1.0, 1.0, 0.0));
        assert_eq!(sample(&text, "controller_runtime_reconcile_errors_total{controller=\"node.termination\"}"), 1.0);
        assert_eq!(
            sample(&text, "controller_runtime_reconcile_time_seconds_count{controller=\"node.termination\"}"),
            3.0
        );
        let q = "{name=\"node.termination\",controller=\"node.termination\"}";
        assert_eq!(sample(&text, &format!("workqueue_retries_total{q}")), 2.0, "the error and the requeue_after");
        assert_eq!(sample(&text, &format!("workqueue_work_duration_seconds_count{q}")), 3.0);
        assert_eq!(sample(&text, "controller_runtime_active_workers{controller=\"node.termination\"}"), 0.0);
    }

    #[test]
    fn a_loop_with_its_own_queue_reports_depth_adds_and_waits() {
        let metrics = Metrics::new(&BuildInfo::default());
        let r = metrics.reconciler("nodeclaim.podevents", 16);
        r.queued();
        r.queued();
        let q = "{name=\"nodeclaim.podevents\",controller=\"nodeclaim.podevents\"";
        let text = metrics.render();
        assert_eq!(sample(&text, &format!("workqueue_depth{q},priority=\"0\"}}")), 2.0);
        assert_eq!(sample(&text, &format!("workqueue_adds_total{q}}}")), 2.0);

        let first = r.start();
        let second = r.start();
        let text = metrics.render();
        assert_eq!(sample(&text, &format!("workqueue_depth{q},priority=\"0\"}}")), 0.0);
        assert_eq!(sample(&text, &format!("workqueue_queue_duration_seconds_count{q}}}")), 2.0);
        assert_eq!(sample(&text, "controller_runtime_active_workers{controller=\"nodeclaim.podevents\"}"), 2.0);
        // Two reconciles in flight: the unfinished work is at least the longest one.
        let unfinished = sample(&text, &format!("workqueue_unfinished_work_seconds{q}}}"));
        let longest = sample(&text, &format!("workqueue_longest_running_processor_seconds{q}}}"));
        assert!(unfinished >= longest && longest > 0.0, "{unfinished} {longest}");

        first.finish(ReconcileResult::Success);
        drop(second); // cancelled: no result, no longer in flight
        let text = metrics.render();
        assert_eq!(sample(&text, "controller_runtime_active_workers{controller=\"nodeclaim.podevents\"}"), 0.0);
        assert_eq!(sample(&text, &format!("workqueue_longest_running_processor_seconds{q}}}")), 0.0);
        assert_eq!(
            sample(&text, "controller_runtime_reconcile_total{controller=\"nodeclaim.podevents\",result=\"success\"}"),
            1.0
        );
        assert_eq!(
            sample(&text, "controller_runtime_reconcile_time_seconds_count{controller=\"nodeclaim.podevents\"}"),
            1.0
        );
    }

    #[test]
    fn a_periodic_pass_is_one_add_and_requeues_after() {
        let metrics = Metrics::new(&BuildInfo::default());
        let r = metrics.reconciler("disruption", 1);
        r.pass().finish(ReconcileResult::of_pass(&Ok::<(), ()>(())));
        r.pass().finish(ReconcileResult::of_pass(&Err::<(), _>(())));
        let text = metrics.render();
        let q = "{name=\"disruption\",controller=\"disruption\"}";
        assert_eq!(sample(&text, &format!("workqueue_adds_total{q}")), 2.0);
        assert_eq!(
            sample(&text, "controller_runtime_reconcile_total{controller=\"disruption\",result=\"requeue_after\"}"),
            1.0
        );
        assert_eq!(sample(&text, "controller_runtime_reconcile_errors_total{controller=\"disruption\"}"), 1.0);
        // Asking again by name shares the series.
        metrics.reconciler("disruption", 1).pass().finish(ReconcileResult::Success);
        assert_eq!(sample(&metrics.render(), &format!("workqueue_adds_total{q}")), 3.0);
    }
}
