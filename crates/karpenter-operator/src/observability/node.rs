//! `metrics.node`: upstream's per-Node resource gauges and the cluster utilization, every 5 s from the state.
//!
//! Every Node in the state gets, per resource: `karpenter_nodes_allocatable` (its status), the requests and
//! limits of its pods (`total_pod_*`, DaemonSet pods included, as upstream counts them) and of its DaemonSet pods
//! alone (`total_daemon_*`), `system_overhead` (capacity minus allocatable), and `current_lifetime_seconds`. Their
//! labels: `node_name`, `phase` (the Node's deprecated `status.phase`, usually empty), `managed` (a NodeClaim
//! has the Node's providerID) and one label per well-known node label (core and the provider's: the part of the
//! key after `/`, lower case, `-` as `_`; `nodepool` is one of them), empty when the Node lacks it. A Node's
//! series go when it leaves the state. Terminal pods count for nothing (they hold no resources); each other pod
//! adds 1 to the `pods` resource of the requests and limits, as upstream's sums do.
//!
//! `karpenter_cluster_utilization_percent{resource_type}`: the pods' requests over the allocatable of every Node,
//! in percent (an uninitialized managed Node's zero allocatable read from its NodeClaim, as upstream's state does).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::CompactPod;
use karpenter_api::labels;
use karpenter_requirements::quantity::{Format, Quantity};
use karpenter_requirements::resources::{ResourceList, spec_requests};
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::{Series, SeriesSet, gauge_value, resource_type, tick};
use crate::context::ControllerContext;
use crate::metrics::Metrics;

/// The controller's name, as upstream's.
pub const CONTROLLER: &str = "metrics.node";
/// How often the gauges are rebuilt (upstream's requeue).
pub const PERIOD: Duration = Duration::from_secs(5);

/// The per-resource node gauges, by metric name.
const RESOURCE_GAUGES: [&str; 6] = [
    "nodes_allocatable",
    "nodes_total_pod_requests",
    "nodes_total_pod_limits",
    "nodes_total_daemon_requests",
    "nodes_total_daemon_limits",
    "nodes_system_overhead",
];
const UTILIZATION_OWNER: &str = "clusterUtilization";

/// Label name per well-known node label key: the part after `/`, lower case, `-` as `_` (upstream's).
pub fn well_known_label_names(keys: impl IntoIterator<Item = String>) -> BTreeMap<String, String> {
    let mut by_name: BTreeMap<String, String> = BTreeMap::new();
    for key in keys {
        if let Some((_, name)) = key.split_once('/') {
            by_name.entry(name.to_lowercase().replace('-', "_")).or_insert(key);
        }
    }
    by_name
}

/// The gauges (see the module docs).
#[derive(Debug)]
pub struct NodeMetrics {
    ctx: ControllerContext,
    /// Label name → node label key.
    well_known: BTreeMap<String, String>,
    series: std::sync::Mutex<SeriesSet>,
}

impl NodeMetrics {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self {
            ctx: ctx.clone(),
            well_known: well_known_label_names(ctx.cloud.labels().all_well_known()),
            series: Default::default(),
        }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            self.reconcile();
            if !tick(PERIOD, &shutdown).await {
                return;
            }
        }
    }

    /// Rebuilds every series from the state.
    pub fn reconcile(&self) {
        let metrics: &Metrics = &self.ctx.metrics;
        let state = &self.ctx.state;
        let now = self.ctx.clock.now();
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        let mut keep = BTreeSet::new();
        let (mut allocatable_sum, mut requested_sum) = (ResourceList::new(), ResourceList::new());
        for node in state.list_shared::<Node>() {
            let name = node.name_any();
            let managed = node_provider_id(&node).is_some_and(|id| !state.node_claims_by_provider_id(id).is_empty());
            let usage = Usage::of(&state.pods_on_node(&name));
            let (capacity, allocatable) = (status_list(&node, false), status_list(&node, true));
            let mut out: Vec<(Series, f64)> = Vec::new();
            let base = self.labels(&node, managed);
            let lists = [
                &allocatable,
                &usage.requests,
                &usage.limits,
                &usage.daemon_requests,
                &usage.daemon_limits,
                &capacity.sub(&allocatable),
            ];
            for (metric, list) in RESOURCE_GAUGES.iter().zip(lists) {
                for (resource, quantity) in list.iter() {
                    let Some(value) = gauge_value(resource, quantity) else { continue };
                    let mut labels = base.clone();
                    labels.insert("resource_type".into(), resource_type(resource));
                    out.push(((metric, labels), value));
                }
            }
            if let Some(created) = node.metadata.creation_timestamp.as_ref().and_then(karpenter_api::time::from_k8s) {
                out.push((("nodes_current_lifetime_seconds", base), super::scheduling_times::seconds(now - created)));
            }
            series.update(metrics, &name, out, |m, (metric, labels), v| set(m, metric, labels, v));
            keep.insert(name);
            allocatable_sum = allocatable_sum.add(&self.state_allocatable(&node, managed, allocatable));
            requested_sum = requested_sum.add(&usage.requests);
        }
        let utilization = utilization(&allocatable_sum, &requested_sum)
            .into_iter()
            .map(|(resource, v)| {
                (("cluster_utilization_percent", BTreeMap::from([("resource_type".into(), resource)])), v)
            })
            .collect();
        series.update(metrics, UTILIZATION_OWNER, utilization, |m, (_, labels), v| {
            m.cluster_utilization_percent(&labels["resource_type"]).set(v);
        });
        keep.insert(UTILIZATION_OWNER.to_string());
        series.retain(metrics, &keep);
    }

    fn labels(&self, node: &Node, managed: bool) -> BTreeMap<String, String> {
        let node_labels = node.metadata.labels.as_ref();
        let mut out: BTreeMap<String, String> = self
            .well_known
            .iter()
            .map(|(name, key)| (name.clone(), node_labels.and_then(|l| l.get(key)).cloned().unwrap_or_default()))
            .collect();
        out.insert("node_name".into(), node.name_any());
        out.insert("phase".into(), node.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default());
        out.insert("managed".into(), managed.to_string());
        out
    }

    /// The allocatable upstream's state reads for utilization: an uninitialized managed Node's zero or missing
    /// values are its NodeClaim's.
    fn state_allocatable(&self, node: &Node, managed: bool, mut allocatable: ResourceList) -> ResourceList {
        let initialized = node.labels().get(labels::NODE_INITIALIZED).is_some_and(|v| v == "true");
        if initialized || !managed {
            return allocatable;
        }
        let Some(id) = node_provider_id(node) else { return allocatable };
        for claim in self.ctx.state.node_claims_by_provider_id(id) {
            let Some(status) = claim.status.as_ref() else { continue };
            for (resource, q) in &status.allocatable {
                let Ok(q) = q.parse() else { continue };
                if allocatable.get(resource).is_none_or(|have| have.is_zero()) {
                    allocatable.insert(resource, q);
                }
            }
        }
        allocatable
    }
}

fn set(metrics: &Metrics, metric: &str, labels: &BTreeMap<String, String>, value: f64) {
    let gauge = match metric {
        "nodes_allocatable" => metrics.nodes_allocatable(labels),
        "nodes_total_pod_requests" => metrics.nodes_total_pod_requests(labels),
        "nodes_total_pod_limits" => metrics.nodes_total_pod_limits(labels),
        "nodes_total_daemon_requests" => metrics.nodes_total_daemon_requests(labels),
        "nodes_total_daemon_limits" => metrics.nodes_total_daemon_limits(labels),
        "nodes_system_overhead" => metrics.nodes_system_overhead(labels),
        "nodes_current_lifetime_seconds" => metrics.nodes_current_lifetime_seconds(labels),
        _ => return,
    };
    gauge.set(value);
}

fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).filter(|id| !id.is_empty())
}

/// `status.allocatable` (or `status.capacity`); unparseable quantities leave the list empty (the API server
/// never stores one).
fn status_list(node: &Node, allocatable: bool) -> ResourceList {
    let status = node.status.as_ref();
    let list = if allocatable {
        status.and_then(|s| s.allocatable.as_ref())
    } else {
        status.and_then(|s| s.capacity.as_ref())
    };
    list.and_then(|l| ResourceList::from_k8s(l).ok()).unwrap_or_default()
}

/// The requests and limits of a Node's pods.
#[derive(Debug, Default)]
pub struct Usage {
    pub requests: ResourceList,
    pub limits: ResourceList,
    pub daemon_requests: ResourceList,
    pub daemon_limits: ResourceList,
}

impl Usage {
    /// Sums the non-terminal pods (terminal ones hold nothing); DaemonSet pods count in both totals; each pod adds
    /// one to `pods`.
    pub fn of(pods: &[Arc<CompactPod>]) -> Self {
        let mut usage = Usage::default();
        for pod in pods.iter().filter(|p| !p.is_terminal()) {
            // Upstream's per-pod sums carry `pods: 1` in both requests and limits, so a Node's `pods` series
            // count its pods.
            let one_pod = ResourceList::new().with("pods", Quantity::from_int(1, Format::DecimalSI));
            let requests = spec_requests(&pod.spec).unwrap_or_default().add(&one_pod);
            let limits = pod_limits(&pod.spec).add(&one_pod);
            if pod.is_daemon_set_pod() {
                usage.daemon_requests = usage.daemon_requests.add(&requests);
                usage.daemon_limits = usage.daemon_limits.add(&limits);
            }
            usage.requests = usage.requests.add(&requests);
            usage.limits = usage.limits.add(&limits);
        }
        usage
    }
}

/// A pod's effective limits, computed as its effective requests are (containers summed, the init-container
/// peak, sidecars running alongside, plus the pod overhead) over the containers' limits only.
pub fn pod_limits(spec: &k8s_openapi::api::core::v1::PodSpec) -> ResourceList {
    let limits_of = |c: &k8s_openapi::api::core::v1::Container| {
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| ResourceList::from_k8s(l).ok())
            .unwrap_or_default()
    };
    let mut app = ResourceList::new();
    for c in &spec.containers {
        app = app.add(&limits_of(c));
    }
    let (mut sidecars, mut init) = (ResourceList::new(), ResourceList::new());
    for c in spec.init_containers.iter().flatten() {
        let limits = limits_of(c);
        let peak = if c.restart_policy.as_deref() == Some("Always") {
            app = app.add(&limits);
            sidecars = sidecars.add(&limits);
            sidecars.clone()
        } else {
            limits.add(&sidecars)
        };
        init = init.max(&peak);
    }
    let mut out = app.max(&init);
    // As Kubernetes' own limit sum: the overhead is added only to the resources that have a limit (an absent
    // limit means unbounded, and stays so).
    if let Some(overhead) = spec.overhead.as_ref().and_then(|o| ResourceList::from_k8s(o).ok()) {
        for (resource, extra) in overhead.iter() {
            if let Some(sum) = out.get(resource).and_then(|limit| limit.checked_add(extra)) {
                out.insert(resource, sum);
            }
        }
    }
    out
}

/// Requests over allocatable in percent, per resource with a non-zero allocatable (CPU in millicores).
pub fn utilization(allocatable: &ResourceList, requested: &ResourceList) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for (resource, total) in allocatable.iter() {
        let used = requested.get_or_zero(resource);
        let ratio = if resource == "cpu" {
            match (used.milli_value(), total.milli_value()) {
                (Some(u), Some(t)) if t != 0 => u as f64 / t as f64,
                _ => continue,
            }
        } else {
            match (used.value(), total.value()) {
                (Some(u), Some(t)) if t != 0 => u as f64 / t as f64,
                _ => continue,
            }
        };
        out.push((resource_type(resource), 100.0 * ratio));
    }
    out
}
