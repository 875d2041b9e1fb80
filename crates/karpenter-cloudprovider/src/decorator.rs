//! [`Instrumented`]: a [`CloudProvider`] wrapping another, timing every call on an injected [`Clock`] and
//! reporting method, duration and error kind to a [`MetricsSink`] — upstream's metrics decorator
//! (`karpenter_cloudprovider_duration_seconds{controller,method,provider}`,
//! `karpenter_cloudprovider_errors_total{controller,method,provider,error}`). [`InMemoryMetrics`] is a sink that
//! keeps counters, durations and the call sequence, and renders them in Prometheus' text format.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use karpenter_cloudprovider::{
//!     CloudProvider, ErrorKind, FakeCloudProvider, FakeOptions, InMemoryMetrics, Instrumented, Method, SystemClock,
//! };
//!
//! let metrics = InMemoryMetrics::default();
//! // A fake offering no instance types is enough to time a `get`.
//! let fake = FakeCloudProvider::new(FakeOptions::new(Vec::new()));
//! let provider = Instrumented::new(Arc::new(fake), Arc::new(metrics.clone()), Arc::new(SystemClock))
//!     .for_controller("nodeclaim.garbagecollection");
//! let _ = provider.get("kwok://nothing-here").await;
//! assert_eq!(metrics.stats(Method::Get).calls, 1);
//! assert_eq!(metrics.stats(Method::Get).errors.get(&ErrorKind::NodeClaimNotFound), Some(&1));
//! # });
//! ```

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use karpenter_api::{NodeClaim, NodePool, ProviderLabels};
use karpenter_requirements::InstanceType;

use crate::error::{CloudProviderError, ErrorKind};
use crate::provider::{CloudProvider, DriftReason, Method, NodeClassKind, RepairPolicy};
use crate::time::Clock;

/// One finished call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The provider's name.
    pub provider: String,
    /// The calling controller (empty when not set).
    pub controller: String,
    /// The method.
    pub method: Method,
    /// How long the call took on the decorator's clock.
    pub duration: Duration,
    /// The error kind when the call failed.
    pub error: Option<ErrorKind>,
}

/// Receives every call [`Instrumented`] observes (a Prometheus registry in the controller).
pub trait MetricsSink: Send + Sync + fmt::Debug {
    /// Records one call.
    fn observe(&self, observation: &Observation);
}

/// Wraps a provider and reports every call to a [`MetricsSink`]; otherwise behaves exactly as the inner provider.
#[derive(Clone, Debug)]
pub struct Instrumented {
    inner: Arc<dyn CloudProvider>,
    sink: Arc<dyn MetricsSink>,
    clock: Arc<dyn Clock>,
    controller: String,
}

impl Instrumented {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn CloudProvider>, sink: Arc<dyn MetricsSink>, clock: Arc<dyn Clock>) -> Self {
        Self { inner, sink, clock, controller: String::new() }
    }

    /// The same decorator labelling its observations with `controller` (give each controller its own).
    pub fn for_controller(&self, controller: &str) -> Self {
        Self { controller: controller.into(), ..self.clone() }
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &Arc<dyn CloudProvider> {
        &self.inner
    }

    fn record<T>(&self, method: Method, start: chrono::DateTime<chrono::Utc>, result: &Result<T, CloudProviderError>) {
        let duration = (self.clock.now() - start).to_std().unwrap_or(Duration::ZERO);
        self.sink.observe(&Observation {
            provider: self.inner.name().to_owned(),
            controller: self.controller.clone(),
            method,
            duration,
            error: result.as_ref().err().map(CloudProviderError::kind),
        });
    }
}

#[async_trait]
impl CloudProvider for Instrumented {
    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let start = self.clock.now();
        let r = self.inner.create(node_claim).await;
        self.record(Method::Create, start, &r);
        r
    }

    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let start = self.clock.now();
        let r = self.inner.delete(node_claim).await;
        self.record(Method::Delete, start, &r);
        r
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        let start = self.clock.now();
        let r = self.inner.get(provider_id).await;
        self.record(Method::Get, start, &r);
        r
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let start = self.clock.now();
        let r = self.inner.list().await;
        self.record(Method::List, start, &r);
        r
    }

    async fn instance_types(&self, node_pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        let start = self.clock.now();
        let r = self.inner.instance_types(node_pool).await;
        self.record(Method::InstanceTypes, start, &r);
        r
    }

    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError> {
        let start = self.clock.now();
        let r = self.inner.is_drifted(node_claim).await;
        self.record(Method::IsDrifted, start, &r);
        r
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        let start = self.clock.now();
        let r = self.inner.repair_policies();
        self.record::<()>(Method::RepairPolicies, start, &Ok(()));
        r
    }

    async fn reboot(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let start = self.clock.now();
        let r = self.inner.reboot(node_claim).await;
        self.record(Method::Reboot, start, &r);
        r
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        self.inner.supported_node_classes()
    }

    fn labels(&self) -> &ProviderLabels {
        self.inner.labels()
    }
}

/// Counters of one (controller, method).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MethodStats {
    /// Calls (successful or not).
    pub calls: u64,
    /// Failed calls per error kind.
    pub errors: BTreeMap<ErrorKind, u64>,
    /// Sum of the calls' durations.
    pub total_duration: Duration,
    /// The longest call.
    pub max_duration: Duration,
}

#[derive(Debug, Default)]
struct MetricsState {
    provider: String,
    stats: BTreeMap<(String, Method), MethodStats>,
    log: Vec<Observation>,
}

/// A [`MetricsSink`] in memory. Clones share the same data.
#[derive(Clone, Debug, Default)]
pub struct InMemoryMetrics {
    state: Arc<Mutex<MetricsState>>,
}

impl MetricsSink for InMemoryMetrics {
    fn observe(&self, o: &Observation) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.provider.clone_from(&o.provider);
        let stats = state.stats.entry((o.controller.clone(), o.method)).or_default();
        stats.calls += 1;
        stats.total_duration += o.duration;
        stats.max_duration = stats.max_duration.max(o.duration);
        if let Some(kind) = o.error {
            *stats.errors.entry(kind).or_default() += 1;
        }
        state.log.push(o.clone());
    }
}

impl InMemoryMetrics {
    /// Counters of `method` summed over controllers.
    pub fn stats(&self, method: Method) -> MethodStats {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = MethodStats::default();
        for ((_, m), s) in &state.stats {
            if *m == method {
                out.calls += s.calls;
                out.total_duration += s.total_duration;
                out.max_duration = out.max_duration.max(s.max_duration);
                for (k, n) in &s.errors {
                    *out.errors.entry(*k).or_default() += n;
                }
            }
        }
        out
    }

    /// Counters per (controller, method).
    pub fn snapshot(&self) -> BTreeMap<(String, Method), MethodStats> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).stats.clone()
    }

    /// Every observation, in call order.
    pub fn observations(&self) -> Vec<Observation> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).log.clone()
    }

    /// The counters in Prometheus' text format: `karpenter_cloudprovider_duration_seconds` as a histogram (the
    /// type the controller exposes; kept here without finite buckets, only `+Inf`, `_sum` and `_count`) and
    /// `karpenter_cloudprovider_errors_total`, labelled `controller`, `method`, `provider` (and `error`).
    pub fn render_prometheus(&self) -> String {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        let p = &state.provider;
        out.push_str("# TYPE karpenter_cloudprovider_duration_seconds histogram\n");
        for ((c, m), s) in &state.stats {
            let labels = format!("controller=\"{c}\",method=\"{m}\",provider=\"{p}\"");
            let _ =
                writeln!(out, "karpenter_cloudprovider_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}", s.calls);
            let _ = writeln!(
                out,
                "karpenter_cloudprovider_duration_seconds_sum{{{labels}}} {}",
                s.total_duration.as_secs_f64()
            );
            let _ = writeln!(out, "karpenter_cloudprovider_duration_seconds_count{{{labels}}} {}", s.calls);
        }
        out.push_str("# TYPE karpenter_cloudprovider_errors_total counter\n");
        for ((c, m), s) in &state.stats {
            for (kind, n) in &s.errors {
                let _ = writeln!(
                    out,
                    "karpenter_cloudprovider_errors_total{{controller=\"{c}\",error=\"{kind}\",method=\"{m}\",provider=\"{p}\"}} {n}"
                );
            }
        }
        out
    }
}
