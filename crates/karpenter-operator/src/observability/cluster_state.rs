//! `state.metrics`: the cluster state's own gauges, every second. Upstream's cluster state sets them as it
//! changes; they are not part of `DISABLE_CLUSTER_STATE_OBSERVABILITY`.
//!
//! - `karpenter_cluster_state_node_count`: the state's nodes as upstream counts them, one per providerID over the
//!   Nodes (an unmanaged Node without one counts under its name) and the launched NodeClaims;
//! - `karpenter_cluster_state_unsynced_time_seconds`: seconds since the state was last seen synced
//!   ([`ClusterState::synced`](crate::state::ClusterState::synced)), 0 while it is.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::{NodeClaim, labels};
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::scheduling_times::seconds;
use super::tick;
use crate::context::ControllerContext;
use crate::state::ClusterState;

/// This loop's name (not an upstream controller: upstream records these inside its cluster state).
pub const CONTROLLER: &str = "state.metrics";
/// How often the gauges are written.
pub const PERIOD: Duration = Duration::from_secs(1);

/// The loop (see the module docs).
#[derive(Debug)]
pub struct ClusterStateMetrics {
    ctx: ControllerContext,
    unsynced_since: Mutex<Option<DateTime<Utc>>>,
}

impl ClusterStateMetrics {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone(), unsynced_since: Mutex::default() }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            self.record();
            if !tick(PERIOD, &shutdown).await {
                return;
            }
        }
    }

    /// Writes both gauges once.
    pub fn record(&self) {
        let metrics = &self.ctx.metrics;
        metrics.cluster_state_node_count().set(node_count(&self.ctx.state) as f64);
        let now = self.ctx.clock.now();
        let mut since = self.unsynced_since.lock().unwrap_or_else(|p| p.into_inner());
        if self.ctx.state.synced() {
            *since = None;
            metrics.cluster_state_unsynced_time_seconds().set(0.0);
        } else {
            let start = *since.get_or_insert(now);
            metrics.cluster_state_unsynced_time_seconds().set(seconds(now - start));
        }
    }
}

/// The state's nodes, as upstream's cluster state keys them: by providerID.
pub fn node_count(state: &ClusterState) -> usize {
    let mut ids: BTreeSet<String> = BTreeSet::new();
    for node in state.list_shared::<Node>() {
        match node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).filter(|id| !id.is_empty()) {
            Some(id) => {
                ids.insert(id.to_string());
            }
            // A managed Node without a providerID is not tracked until it has one (upstream's rule).
            None if !node.labels().contains_key(labels::NODE_POOL) => {
                ids.insert(node.name_any());
            }
            None => {}
        }
    }
    for claim in state.list_shared::<NodeClaim>() {
        if let Some(id) = claim.provider_id().filter(|id| !id.is_empty()) {
            ids.insert(id.to_string());
        }
    }
    ids.len()
}
