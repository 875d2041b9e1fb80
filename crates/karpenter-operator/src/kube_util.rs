//! Small pieces the termination, garbage-collection, expiration and interruption controllers share: their
//! error type, time conversions, status-condition edits and guarded writes (finalizer removal and status
//! patches carry the `resourceVersion` they were computed from, so a concurrent writer makes them fail with 409
//! Conflict and the reconcile runs again instead of overwriting).

use std::time::Duration;

use chrono::{DateTime, Utc};
use karpenter_api::NodeClaim;
use karpenter_api::condition::{Condition, ConditionStatus, set_condition};
use karpenter_cloudprovider::{CloudProviderError, InterruptionError};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::eviction::EvictionError;

/// What a reconcile returns: `Ok(None)` nothing more to do, `Ok(Some(d))` look again after `d`.
pub type Requeue = Option<Duration>;

/// Why a reconcile failed; the run loops retry with backoff (a [`ReconcileError::is_conflict`] at once).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A Kubernetes API call failed (409 Conflict included: a concurrent writer won, reconcile again).
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A cloud provider call failed (other than NodeClaimNotFound, which callers handle).
    #[error("cloud provider: {0}")]
    CloudProvider(#[from] CloudProviderError),
    /// An eviction failed for another reason than a budget (e.g. a pod selected by several PDBs).
    #[error(transparent)]
    Eviction(#[from] EvictionError),
    /// The interruption source failed.
    #[error(transparent)]
    Interruption(#[from] InterruptionError),
}

impl ReconcileError {
    /// A 409 Conflict from the API server: the object changed since it was read (see [`is_write_conflict`]).
    pub fn is_conflict(&self) -> bool {
        matches!(self, ReconcileError::Kube(e) if is_write_conflict(e))
    }

    /// How long the run loops wait before retrying after this error: soon for a conflict, else `backoff`.
    pub fn retry_after(&self, backoff: Duration) -> Duration {
        if self.is_conflict() { CONFLICT_RETRY } else { backoff }
    }
}

/// How soon a reconcile that lost a write race runs again (on the fresher object its watch delivers).
pub const CONFLICT_RETRY: Duration = Duration::from_millis(100);

/// An expected outcome of our own optimistic-concurrency writes, not a failure: a 409 from the API server, i.e.
/// `Conflict` (an update or patch carrying a stale `resourceVersion`: "the object has been modified; please apply
/// your changes to the latest version and try again", or a failed precondition) or `AlreadyExists` (a create that
/// raced another, which our creates are idempotent to). The controllers log these at debug level, count them in
/// `karpenter_kube_write_conflicts_total` ([`record_write_conflict`]) and retry soon ([`CONFLICT_RETRY`]).
pub fn is_write_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// A failure of the API server's availability, not of the request: no connection or a broken one, a timeout,
/// throttling (429) or a 5xx. It passes when the server comes back, so a retried reconcile logs it as a warning,
/// not an error (an apiserver restart otherwise pages for every NodeClaim in flight).
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || (500..600).contains(&s.code),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The process's metrics for controllers whose context holds none (set once by the manager).
static FALLBACK_METRICS: std::sync::OnceLock<std::sync::Arc<crate::metrics::Metrics>> = std::sync::OnceLock::new();

/// Makes `metrics` the registry [`record_write_conflict`] counts in when a controller passes none. The first
/// call wins (one registry per process).
pub fn set_fallback_metrics(metrics: std::sync::Arc<crate::metrics::Metrics>) {
    let _ = FALLBACK_METRICS.set(metrics);
}

/// Records an expected write conflict (see [`is_write_conflict`]): one debug line and one increment of
/// `karpenter_kube_write_conflicts_total{controller,kind}`, in `metrics` or else the fallback registry.
pub fn record_write_conflict(
    metrics: Option<&crate::metrics::Metrics>,
    controller: &str,
    kind: &str,
    name: &str,
    error: &dyn std::fmt::Display,
) {
    tracing::debug!(controller, kind, name, error = %error, "write conflict, retrying on fresher data");
    if let Some(m) = metrics.or(FALLBACK_METRICS.get().map(|m| &**m)) {
        m.kube_write_conflicts(controller, kind).inc();
    }
}

/// How many times [`retry_write_conflicts`] runs a read-modify-write that keeps losing races.
pub const CONFLICT_ATTEMPTS: usize = 5;
/// The pause after the first lost race in [`retry_write_conflicts`]; it doubles with each further one (25, 50,
/// 100, 200 ms: under 0.4 s in all).
pub const CONFLICT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(25);

/// Runs `write` (a read-modify-write that starts from a fresh GET) again when it answers a write conflict
/// ([`is_write_conflict`]: someone wrote the object between our read and our write, e.g. a kubelet heartbeat on a
/// Node), up to [`CONFLICT_ATTEMPTS`] times, recording each conflict; any other error, or the last conflict, is
/// returned. For steps whose failure is costly (a disruption command rolled back over one lost race).
pub async fn retry_write_conflicts<T, F, Fut>(
    metrics: Option<&crate::metrics::Metrics>,
    controller: &str,
    kind: &str,
    name: &str,
    mut write: F,
) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let mut attempt = 1;
    let mut backoff = CONFLICT_BACKOFF;
    loop {
        match write().await {
            Err(e) if is_write_conflict(&e) && attempt < CONFLICT_ATTEMPTS => {
                record_write_conflict(metrics, controller, kind, name, &e);
                // A short, growing pause: the object is busy (a status writer mid-burst), and an immediate
                // re-read tends to lose the same race again.
                tokio::time::sleep(backoff).await;
                backoff *= 2;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// A kube-runtime context whose errors go through [`error_policy`](crate::termination::error_policy): its name
/// in logs and metrics and its metrics registry, if it holds one.
pub trait ErrorPolicyContext {
    /// The controller's name (`controller` in logs and metrics).
    fn controller_name(&self) -> &'static str;
    /// The registry write conflicts are counted in (`None`: the fallback registry).
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        None
    }
    /// The controller's reconcile and workqueue series (in [`ErrorPolicyContext::metrics`]), for
    /// [`crate::metrics::runtime::queue::ControllerQueue`]; `max_concurrent` as configured (0: unbounded).
    fn reconciles(&self, max_concurrent: usize) -> Option<crate::metrics::ReconcileMetrics> {
        self.metrics().map(|m| m.reconciler(self.controller_name(), max_concurrent))
    }
}

/// Every object of kind `K` from the API server (not a cache), in pages of [`LIST_PAGE`] and decoded without
/// `managedFields` ([`karpenter_api::lean::Lean`]), keeping of each object only what `keep` returns: each page is
/// dropped before the next is read, so a periodic sweep over every Node or NodeClaim holds the fields it needs,
/// not the objects (one full list at 5,000 nodes was tens of MB; garbage collection held three at once).
pub async fn list_all_lean_map<K, T>(
    client: &kube::Client,
    mut keep: impl FnMut(K) -> Option<T>,
) -> Result<Vec<T>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: kube::Api<karpenter_api::lean::Lean<K>> = kube::Api::all(client.clone());
    let mut params = kube::api::ListParams::default().limit(LIST_PAGE);
    let mut out = Vec::new();
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items.into_iter().filter_map(|l| keep(l.0)));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params.continue_token = Some(token),
            None => return Ok(out),
        }
    }
}

/// Objects per page of [`list_all_lean_map`].
pub const LIST_PAGE: u32 = 500;

/// A 404 from the API server.
pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Seconds from `from` to `to` (0 when negative), for duration histograms.
pub(crate) fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    ((to - from).num_milliseconds().max(0) as f64) / 1000.0
}

/// Writes `conditions` as the NodeClaim's status conditions (merge patch of the status subresource, guarded by
/// the claim's resourceVersion). Returns the updated claim.
pub async fn patch_claim_conditions(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    conditions: &[Condition],
) -> Result<NodeClaim, kube::Error> {
    let patch = json!({
        "metadata": {"resourceVersion": claim.resource_version()},
        "status": {"conditions": conditions},
    });
    api.patch_status(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await
}

/// Sets one condition on a NodeClaim if it differs; returns the claim as stored afterwards.
pub async fn ensure_claim_condition(
    api: &Api<NodeClaim>,
    claim: &NodeClaim,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) -> Result<NodeClaim, kube::Error> {
    let mut conditions = claim.conditions().to_vec();
    if !set_condition(&mut conditions, type_, status, reason, message, claim.metadata.generation, now) {
        return Ok(claim.clone());
    }
    patch_claim_conditions(api, claim, &conditions).await
}

/// Removes `finalizer` from `obj` (merge patch guarded by its resourceVersion). A 404 (already gone) is success.
pub async fn remove_finalizer<K>(api: &Api<K>, obj: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + std::fmt::Debug + Serialize + DeserializeOwned,
{
    let finalizers: Vec<&String> = obj.finalizers().iter().filter(|f| f.as_str() != finalizer).collect();
    if finalizers.len() == obj.finalizers().len() {
        return Ok(());
    }
    let patch = json!({"metadata": {"resourceVersion": obj.resource_version(), "finalizers": finalizers}});
    match api.patch(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes `name`; a 404 (already gone) is success.
pub(crate) async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned,
{
    match api.delete(name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A label of the object, or "" (metric label values).
pub(crate) fn label<'a, K: Resource>(obj: &'a K, key: &str) -> &'a str {
    obj.meta().labels.as_ref().and_then(|l| l.get(key)).map(String::as_str).unwrap_or("")
}

/// The NodeClaim as karpenter-disruption's deadline functions read it (`node_name` overrides
/// `status.nodeName`; capacity and allocatable are left empty: those functions do not read them).
pub fn node_claim_info(claim: &NodeClaim, node_name: Option<&str>) -> karpenter_scheduler::snapshot::NodeClaimInfo {
    karpenter_scheduler::snapshot::NodeClaimInfo {
        name: claim.name_any(),
        node_pool: claim.node_pool_name().map(str::to_owned),
        node_name: node_name.or(claim.node_name()).map(str::to_owned),
        in_flight: false,
        claim: std::sync::Arc::new(claim.clone()),
        capacity: karpenter_requirements::ResourceList::new(),
        allocatable: karpenter_requirements::ResourceList::new(),
        marked_for_deletion: claim.metadata.deletion_timestamp.is_some(),
        nominated: false,
    }
}

/// Counts a disruption of `claim` outside the disruption queue (expiration, interruption, garbage collection) in
/// `karpenter_nodeclaims_disrupted_total`: no consolidation policy (the label is only set for consolidation
/// commands), the termination mode from the claim's `terminationGracePeriod`.
pub(crate) fn record_disrupted(metrics: &crate::metrics::Metrics, claim: &NodeClaim, reason: &str) {
    metrics
        .nodeclaims_disrupted(
            reason,
            claim.node_pool_name().unwrap_or(""),
            label(claim, karpenter_api::labels::CAPACITY_TYPE),
            "",
            claim.termination_mode(),
        )
        .inc();
}

/// Locks a std mutex; a poisoned one (a panic while held) still hands out its data: the controllers' in-memory
/// notes stay usable, and the panic itself is reported where it happened.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Test support: records the events logged on this thread (level and rendered fields) while the guard lives.
#[cfg(test)]
pub(crate) mod test_log {
    use std::sync::{Arc, Mutex};

    use tracing::Level;
    use tracing::field::{Field, Visit};
    use tracing_subscriber::layer::{Context, SubscriberExt};

    /// The events logged so far: (level, "message key=value …").
    pub(crate) type Events = Arc<Mutex<Vec<(Level, String)>>>;

    struct Recorder(Events);

    struct Fields(String);
    impl Visit for Fields {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0.insert_str(0, &format!("{value:?} "));
            } else {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
    }

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
        fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            self.0.lock().unwrap().push((*event.metadata().level(), fields.0));
        }
    }

    /// Starts recording every level on this thread.
    pub(crate) fn capture() -> (tracing::subscriber::DefaultGuard, Events) {
        let events = Events::default();
        let subscriber = tracing_subscriber::registry().with(Recorder(events.clone()));
        (tracing::subscriber::set_default(subscriber), events)
    }

    /// The recorded events at `level`.
    pub(crate) fn at(events: &Events, level: Level) -> Vec<String> {
        events.lock().unwrap().iter().filter(|(l, _)| *l == level).map(|(_, m)| m.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn read_modify_writes_are_retried_on_conflicts_only() {
        let api = |code: u16| kube::Error::Api(kube::core::Status::failure("x", "y").with_code(code).boxed());
        let metrics = crate::metrics::Metrics::new(&crate::metrics::BuildInfo::current("test", "1.95"));
        let conflicts = || metrics.kube_write_conflicts("test", "Node").get();
        // Its conflicts are logged at debug level, which `error_policy_counts_conflicts_quietly` asserts on
        // another thread: with a subscriber here too, tracing never caches that line as uninteresting.
        let (_guard, _events) = test_log::capture();
        // Two lost races, then the write lands.
        let calls = std::cell::Cell::new(0);
        let result = retry_write_conflicts(Some(&metrics), "test", "Node", "n1", || {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move { if n < 3 { Err(api(409)) } else { Ok(n) } }
        })
        .await;
        assert_eq!(result.unwrap(), 3);
        assert_eq!(conflicts(), 2);
        // A conflict every time: given up after CONFLICT_ATTEMPTS writes, the last conflict returned, with a
        // growing pause between the writes (25 + 50 + 100 + 200 ms).
        calls.set(0);
        let started = karpenter_cloudprovider::time::tokio_now();
        let result: Result<(), _> = retry_write_conflicts(Some(&metrics), "test", "Node", "n1", || {
            calls.set(calls.get() + 1);
            async { Err(api(409)) }
        })
        .await;
        assert!(result.is_err_and(|e| is_write_conflict(&e)));
        assert_eq!(calls.get(), CONFLICT_ATTEMPTS);
        assert_eq!(started.elapsed(), std::time::Duration::from_millis(375));
        // Any other error is not retried.
        calls.set(0);
        let result: Result<(), _> = retry_write_conflicts(Some(&metrics), "test", "Node", "n1", || {
            calls.set(calls.get() + 1);
            async { Err(api(500)) }
        })
        .await;
        assert!(result.is_err() && calls.get() == 1);
    }

    #[test]
    fn write_conflicts_are_409s_only() {
        let api = |code: u16, reason: &str| {
            kube::Error::Api(
                kube::core::Status::failure("the object has been modified; please apply your changes", reason)
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(is_write_conflict(&api(409, "Conflict")));
        assert!(is_write_conflict(&api(409, "AlreadyExists")));
        assert!(!is_write_conflict(&api(404, "NotFound")));
        assert!(!is_write_conflict(&api(422, "Invalid")));
        assert!(ReconcileError::Kube(api(409, "Conflict")).is_conflict());
        assert_eq!(ReconcileError::Kube(api(409, "Conflict")).retry_after(Duration::from_secs(5)), CONFLICT_RETRY);
        assert_eq!(ReconcileError::Kube(api(500, "x")).retry_after(Duration::from_secs(5)), Duration::from_secs(5));
    }

    struct Ctx(crate::metrics::Metrics);
    impl ErrorPolicyContext for Ctx {
        fn controller_name(&self) -> &'static str {
            "test.controller"
        }
        fn metrics(&self) -> Option<&crate::metrics::Metrics> {
            Some(&self.0)
        }
    }

    /// The run loops' shared error policy: a conflict is a debug line, a count under the object's kind and a
    /// soon retry; another error is a warning and a retry in 5 s.
    #[test]
    fn an_unavailable_api_server_is_transient_a_rejected_request_is_not() {
        let status = |code: u16| kube::Error::Api(kube::core::Status::failure("x", "Reason").with_code(code).boxed());
        for code in [429, 500, 503, 504] {
            assert!(is_transient(&status(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 422] {
            assert!(!is_transient(&status(code)), "{code}");
        }
        assert!(is_transient(&kube::Error::Service("connection refused".into())));
    }

    #[test]
    fn error_policy_counts_conflicts_quietly() {
        use kube::runtime::controller::Action;
        use std::sync::Arc;
        let ctx = Arc::new(Ctx(crate::metrics::Metrics::new(&crate::metrics::BuildInfo::default())));
        let pool = Arc::new(k8s_openapi::api::core::v1::Node {
            metadata: kube::api::ObjectMeta { name: Some("n1".into()), ..Default::default() },
            ..Default::default()
        });
        let conflict = ReconcileError::Kube(kube::Error::Api(
            kube::core::Status::failure("the object has been modified", "Conflict").with_code(409).boxed(),
        ));
        let other = ReconcileError::Kube(kube::Error::Api(
            kube::core::Status::failure("boom", "InternalError").with_code(500).boxed(),
        ));
        let (_guard, events) = test_log::capture();
        let action = crate::termination::error_policy(pool.clone(), &conflict, ctx.clone());
        assert_eq!(action, Action::requeue(CONFLICT_RETRY));
        assert!(test_log::at(&events, tracing::Level::WARN).is_empty());
        assert_eq!(test_log::at(&events, tracing::Level::DEBUG).len(), 1);
        assert!(
            ctx.0
                .render()
                .contains("karpenter_kube_write_conflicts_total{controller=\"test.controller\",kind=\"Node\"} 1")
        );
        let action = crate::termination::error_policy(pool, &other, ctx);
        assert_eq!(action, Action::requeue(Duration::from_secs(5)));
        assert_eq!(test_log::at(&events, tracing::Level::WARN).len(), 1);
    }
}

/// Logs why a NodePool's instance types could not be listed, and what the caller does instead (`consequence`). A
/// pool the provider has not evaluated yet (NodeOverlays, a moment after start or the pool's creation) is
/// expected and logged at INFO; anything else is an ERROR.
pub(crate) fn log_instance_types_error(
    controller: &str,
    pool: &str,
    error: &karpenter_cloudprovider::CloudProviderError,
    consequence: &str,
) {
    if error.kind() == karpenter_cloudprovider::ErrorKind::UnevaluatedNodePool {
        tracing::info!(controller, NodePool = %pool, %error, "not evaluated yet: {consequence}");
    } else {
        tracing::error!(controller, NodePool = %pool, %error, "listing instance types failed: {consequence}");
    }
}
