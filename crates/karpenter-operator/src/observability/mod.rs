//! Cluster-state observability: the controllers that turn what the [`ClusterState`](crate::state::ClusterState)
//! holds into upstream Karpenter's gauges and latency histograms, named as upstream names them.
//!
//! - [`node`] (`metrics.node`): per Node, `karpenter_nodes_{allocatable, total_pod_requests, total_pod_limits,
//!   total_daemon_requests, total_daemon_limits, system_overhead, current_lifetime_seconds}` labelled with the
//!   Node's well-known labels, and `karpenter_cluster_utilization_percent`, every 5 s;
//! - [`pod`] (`metrics.pod`): `karpenter_pods_state` per pod, the bound/startup histograms observed once per
//!   pod, the `*_time_seconds` gauges of the pods still waiting, and the provisioning variants measured from
//!   [`SchedulingTimes`] (held by the cluster state, written by the provisioner);
//! - [`nodepool`] (`metrics.nodepool`): `karpenter_nodepools_cost_total` from a cost tracker over the launched
//!   NodeClaims, and `karpenter_nodepools_cost_tracker_errors_total`;
//! - [`cluster_state`] (`state.metrics`): `karpenter_cluster_state_node_count` and
//!   `karpenter_cluster_state_unsynced_time_seconds`;
//! - [`status`] (`operatorpkg.<kind>.status`): the `operator_<kind>_status_condition_*` and
//!   `operator_<kind>_termination_*` families of NodeClaims, NodePools and Nodes, and of the provider's node
//!   classes of each kind registered with status metrics.
//!
//! The first three and the NodeClaim, NodePool and Node status recorders are what
//! `DISABLE_CLUSTER_STATE_OBSERVABILITY=true` turns off ([`controllers`] returns none of them), as upstream. The
//! cluster-state gauges are not: upstream records them inside its cluster state, whatever that setting says, so
//! [`cluster_state`] always runs; nor are the node-class recorders, which upstream's providers always run.
//!
//! **No stale series:** every gauge series here belongs to one object (a Node, a pod, a NodePool) and is removed
//! when that object leaves the state or stops qualifying, so `/metrics` never shows a Node or pod that is gone.

pub mod cluster_state;
pub mod node;
pub mod nodepool;
pub mod pod;
pub mod scheduling_times;
pub mod status;

use futures::future::BoxFuture;
use karpenter_requirements::quantity::Quantity;
use std::collections::{BTreeMap, BTreeSet};
use tokio_util::sync::CancellationToken;

pub use scheduling_times::SchedulingTimes;

use crate::context::ControllerContext;
use crate::metrics::Metrics;
use crate::node_classes::NodeClassRegistration;
use crate::settings::CoreSettings;

/// The names of the controllers `DISABLE_CLUSTER_STATE_OBSERVABILITY` turns off, as upstream names them.
pub const GATED_CONTROLLERS: [&str; 6] = [
    pod::CONTROLLER,
    nodepool::CONTROLLER,
    node::CONTROLLER,
    "operatorpkg.nodeclaim.status",
    "operatorpkg.nodepool.status",
    "operatorpkg.node.status",
];

/// The observability controllers to run for these settings, by name, not started yet: none of
/// [`GATED_CONTROLLERS`] when `disable_cluster_state_observability` is set; [`cluster_state`] and the status
/// recorder of each node-class kind registered with status metrics always.
pub fn controllers(
    ctx: &ControllerContext,
    settings: &CoreSettings,
    node_classes: &[NodeClassRegistration],
    shutdown: &CancellationToken,
) -> Vec<(String, BoxFuture<'static, ()>)> {
    let mut list: Vec<(String, BoxFuture<'static, ()>)> = Vec::new();
    let state_metrics = cluster_state::ClusterStateMetrics::new(ctx);
    list.push((cluster_state::CONTROLLER.into(), Box::pin(state_metrics.run(shutdown.clone()))));
    for registration in node_classes.iter().filter(|r| r.status_metrics) {
        match status::NodeClassStatusObserver::new(ctx, registration) {
            Some(observer) => list.push((observer.name(), Box::pin(observer.run(shutdown.clone())))),
            None => tracing::warn!(kind = %registration.api_resource.kind,
                "a node-class kind named as a core kind gets no status metrics of its own"),
        }
    }
    if settings.disable_cluster_state_observability {
        return list;
    }
    let claims = status::StateStatusObserver::<karpenter_api::NodeClaim>::new(ctx);
    let name = status::controller_name(crate::metrics::StatusKind::NodeClaim);
    list.push((name, Box::pin(claims.run(shutdown.clone()))));
    let pools = status::StateStatusObserver::<karpenter_api::NodePool>::new(ctx);
    let name = status::controller_name(crate::metrics::StatusKind::NodePool);
    list.push((name, Box::pin(pools.run(shutdown.clone()))));
    let nodes = status::StateStatusObserver::<k8s_openapi::api::core::v1::Node>::new(ctx);
    let name = status::controller_name(crate::metrics::StatusKind::Node);
    list.push((name, Box::pin(nodes.run(shutdown.clone()))));
    let pods = pod::PodMetrics::new(ctx);
    list.push((pod::CONTROLLER.into(), Box::pin(pods.run(shutdown.clone()))));
    let pools = nodepool::NodePoolMetrics::new(&ctx.for_controller(nodepool::CONTROLLER));
    list.push((nodepool::CONTROLLER.into(), Box::pin(pools.run(shutdown.clone()))));
    let nodes = node::NodeMetrics::new(ctx);
    list.push((node::CONTROLLER.into(), Box::pin(nodes.run(shutdown.clone()))));
    list
}

/// A resource name as upstream writes it in `resource_type`: lower case, `-` as `_` (`nvidia.com/gpu` keeps its
/// `.` and `/`).
pub fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// A quantity as upstream's gauges report it: CPU in cores (from millicores), anything else in whole units
/// rounded up. `None` when it does not fit an `i64`.
pub fn gauge_value(resource: &str, quantity: &Quantity) -> Option<f64> {
    if resource == "cpu" {
        quantity.milli_value().map(|m| m as f64 / 1000.0)
    } else {
        quantity.value().map(|v| v as f64)
    }
}

/// One gauge series of a `dgauge` metric: the metric's name and its label map.
pub(crate) type Series = (&'static str, BTreeMap<String, String>);

/// The series one controller set last time, so a new round removes those it no longer sets (upstream's metric
/// store `ReplaceAll`/`Update`: an object's series are replaced as a whole).
#[derive(Debug, Default)]
pub(crate) struct SeriesSet {
    by_owner: BTreeMap<String, BTreeSet<Series>>,
}

impl SeriesSet {
    /// Sets `owner`'s series to `series` (with their values), removing its series that are not among them.
    pub(crate) fn update(
        &mut self,
        metrics: &Metrics,
        owner: &str,
        series: Vec<(Series, f64)>,
        set: impl Fn(&Metrics, &Series, f64),
    ) {
        let new: BTreeSet<Series> = series.iter().map(|(s, _)| s.clone()).collect();
        if let Some(old) = self.by_owner.get(owner) {
            for gone in old.difference(&new) {
                remove(metrics, gone);
            }
        }
        for (s, value) in &series {
            set(metrics, s, *value);
        }
        if new.is_empty() {
            self.by_owner.remove(owner);
        } else {
            self.by_owner.insert(owner.to_string(), new);
        }
    }

    /// Removes every series of `owner`.
    pub(crate) fn delete(&mut self, metrics: &Metrics, owner: &str) {
        for s in self.by_owner.remove(owner).into_iter().flatten() {
            remove(metrics, &s);
        }
    }

    /// Removes the series of every owner not in `keep`.
    pub(crate) fn retain(&mut self, metrics: &Metrics, keep: &BTreeSet<String>) {
        let gone: Vec<String> = self.by_owner.keys().filter(|k| !keep.contains(*k)).cloned().collect();
        for owner in gone {
            self.delete(metrics, &owner);
        }
    }
}

fn remove(metrics: &Metrics, (name, labels): &Series) {
    let pairs: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    metrics.remove(name, &pairs);
}

/// Sleeps `period`, or returns `false` when `shutdown` is cancelled first.
pub(crate) async fn tick(period: std::time::Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        () = shutdown.cancelled() => false,
        () = tokio::time::sleep(period) => true,
    }
}

#[cfg(test)]
mod tests;
