//! The NodePool counter (`nodepool.counter`): `status.resources` (the summed capacity of the pool's nodes plus
//! `nodes`, their count) and `status.nodes` (the count again: the scale subresource's status path), and the
//! metrics `karpenter_nodepools_usage{nodepool,resource_type}` (the same sums) and
//! `karpenter_nodepools_limit{nodepool,resource_type}` (`spec.limits`); and, summed the same way over every
//! NodePool, `karpenter_cluster_usage{resource_type}` and `karpenter_cluster_limit{resource_type}`
//! (`CLUSTER_LIMITS`).
//!
//! The sums come from the [`ClusterState`], as upstream's come from its cluster state: every NodeClaim of the
//! pool (label `karpenter.sh/nodepool`), deleting ones included (they still hold capacity), counts once, with
//! its Node's capacity once the Node exists (joined by providerID) and the claim's launch estimate before; a
//! Node of the pool without a NodeClaim counts too. Quantities that do not parse are skipped (logged). The
//! counter waits (requeue 1 s) until the state has listed Nodes and NodeClaims once, and recounts every
//! [`RESYNC`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::labels;
use karpenter_api::nodepool::NODES_LIMIT;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_requirements::{Format, Quantity, ResourceList};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Watches, patch_pool_status, run_pool_controller};
use crate::context::ControllerContext;
use crate::kube_util::{ReconcileError, Requeue};
use crate::termination::to_action;

/// The controller name in logs.
pub const CONTROLLER: &str = "nodepool.counter";
/// How long the counter waits for the state to be listed.
pub const WAIT_FOR_STATE: Duration = Duration::from_secs(1);
/// Triggers within this window make one recount.
pub const DEBOUNCE: Duration = Duration::from_secs(1);
/// Periodic recount: the state's watchers and the run loop's are separate streams, so a recount triggered by an
/// event may read the state just before it sees that event.
pub const RESYNC: Duration = Duration::from_secs(30);

/// The pool's usage: summed capacity (with `nodes`) and node count.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Usage {
    /// Summed capacity, `nodes` included.
    pub resources: ResourceList,
    /// Node count.
    pub nodes: i64,
}

fn add_capacity(sum: &mut ResourceList, owner: &str, capacity: &BTreeMap<String, String>) {
    for (resource, q) in capacity {
        match q.parse::<Quantity>() {
            Ok(q) => {
                let total = sum.get_or_zero(resource).saturating_add(&q);
                sum.insert(resource, total);
            }
            Err(e) => {
                tracing::warn!(controller = CONTROLLER, object = owner, resource = %resource, error = %e, "skipping unparsable capacity")
            }
        }
    }
}

fn node_capacity(node: &Node) -> BTreeMap<String, String> {
    node.status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .map(|c| c.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
        .unwrap_or_default()
}

fn claim_capacity(claim: &NodeClaim) -> BTreeMap<String, String> {
    claim
        .status
        .as_ref()
        .map(|s| s.capacity.iter().map(|(k, v)| (k.clone(), v.as_str().to_owned())).collect())
        .unwrap_or_default()
}

/// The usage of pool `pool` in `claims` and `nodes` (see the module docs). Linear: runs on every NodeClaim and
/// Node event, so a claim finds its Node through a providerID index, not a scan of every node.
pub fn usage<'a>(
    pool: &str,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    nodes: impl IntoIterator<Item = &'a Node>,
) -> Usage {
    usage_of(|l| l.get(labels::NODE_POOL).map(String::as_str) == Some(pool), claims, nodes)
}

/// The usage of every NodePool together: what `CLUSTER_LIMITS` counts.
pub fn cluster_usage<'a>(
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    nodes: impl IntoIterator<Item = &'a Node>,
) -> Usage {
    usage_of(|l| l.contains_key(labels::NODE_POOL), claims, nodes)
}

fn usage_of<'a>(
    in_pool: impl Fn(&BTreeMap<String, String>) -> bool,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    nodes: impl IntoIterator<Item = &'a Node>,
) -> Usage {
    let provider_id = |n: &'a Node| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()).filter(|p| !p.is_empty());
    let nodes: Vec<&Node> = nodes.into_iter().collect();
    let by_provider_id: BTreeMap<&str, &Node> = nodes.iter().filter_map(|n| Some((provider_id(n)?, *n))).collect();
    let mut out = Usage::default();
    let mut seen_provider_ids = BTreeSet::new();
    for claim in claims.into_iter().filter(|c| in_pool(c.labels())) {
        out.nodes += 1;
        let claim_provider_id = claim.provider_id().filter(|p| !p.is_empty());
        let node = claim_provider_id.and_then(|p| by_provider_id.get(p));
        if let Some(p) = claim_provider_id {
            seen_provider_ids.insert(p);
        }
        let capacity =
            node.map(|n| node_capacity(n)).filter(|c| !c.is_empty()).unwrap_or_else(|| claim_capacity(claim));
        add_capacity(&mut out.resources, &claim.name_any(), &capacity);
    }
    for node in nodes.into_iter().filter(|n| in_pool(n.labels())) {
        if provider_id(node).is_some_and(|p| seen_provider_ids.contains(p)) {
            continue;
        }
        out.nodes += 1;
        add_capacity(&mut out.resources, &node.name_any(), &node_capacity(node));
    }
    out.resources.insert(NODES_LIMIT, Quantity::from_int(out.nodes, Format::DecimalSI));
    out
}

fn as_f64(q: &Quantity) -> f64 {
    q.as_nanos() as f64 / 1e9
}

/// Series set per pool: (usage resource types, limit resource types).
type Published = BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)>;

/// The counter (see the module docs).
pub struct Counter {
    ctx: ControllerContext,
    published: Mutex<Published>,
    /// `CLUSTER_LIMITS`.
    cluster_limits: ResourceList,
    /// Resource types of the `cluster_usage` series set.
    cluster_published: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counter").finish_non_exhaustive()
    }
}

impl Counter {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self {
            ctx: ctx.clone(),
            published: Mutex::default(),
            cluster_limits: ResourceList::new(),
            cluster_published: Mutex::default(),
        }
    }

    /// The counter, publishing `limits` as `karpenter_cluster_limit` (set once: they are a start-up setting).
    pub fn with_cluster_limits(mut self, limits: ResourceList) -> Self {
        for (resource, q) in limits.iter() {
            self.ctx.metrics.cluster_limit(resource).set(as_f64(q));
        }
        self.cluster_limits = limits;
        self
    }

    /// Publishes `karpenter_cluster_usage` for `usage`, removing series of resources no longer used.
    fn publish_cluster(&self, usage: &Usage) {
        let mut published = self.cluster_published.lock().unwrap_or_else(PoisonError::into_inner);
        let mut now = BTreeSet::new();
        for (resource, q) in usage.resources.iter() {
            self.ctx.metrics.cluster_usage(resource).set(as_f64(q));
            now.insert(resource.to_string());
        }
        // A limited resource nothing uses yet reads 0 rather than missing, so `usage / limit` is defined.
        for (resource, _) in self.cluster_limits.iter() {
            if !now.contains(resource) {
                self.ctx.metrics.cluster_usage(resource).set(0.0);
                now.insert(resource.to_string());
            }
        }
        for gone in published.difference(&now) {
            self.ctx.metrics.remove("cluster_usage", &[("resource_type", gone)]);
        }
        *published = now;
    }

    fn publish(&self, pool: &str, usage: Option<&Usage>, limits: Option<&BTreeMap<String, String>>) {
        let mut published = self.published.lock().unwrap_or_else(PoisonError::into_inner);
        let (old_usage, old_limits) = published.remove(pool).unwrap_or_default();
        let mut new_usage = BTreeSet::new();
        let mut new_limits = BTreeSet::new();
        for (resource, q) in usage.map(|u| u.resources.iter()).into_iter().flatten() {
            self.ctx.metrics.nodepools_usage(pool, resource).set(as_f64(q));
            new_usage.insert(resource.to_string());
        }
        for (resource, q) in limits.into_iter().flatten() {
            match q.parse::<Quantity>() {
                Ok(q) => {
                    self.ctx.metrics.nodepools_limit(pool, resource).set(as_f64(&q));
                    new_limits.insert(resource.clone());
                }
                Err(e) => {
                    tracing::warn!(controller = CONTROLLER, NodePool = pool, resource = %resource, error = %e, "unparsable limit")
                }
            }
        }
        for gone in old_usage.difference(&new_usage) {
            self.ctx.metrics.remove("nodepools_usage", &[("nodepool", pool), ("resource_type", gone)]);
        }
        for gone in old_limits.difference(&new_limits) {
            self.ctx.metrics.remove("nodepools_limit", &[("nodepool", pool), ("resource_type", gone)]);
        }
        if usage.is_some() {
            published.insert(pool.to_owned(), (new_usage, new_limits));
        }
    }

    /// Drops the series of pools the state no longer holds (the run loop never sees a deleted pool again).
    fn prune(&self) {
        if !self.ctx.state.kind_synced::<NodePool>() {
            return;
        }
        let live: BTreeSet<String> = self.ctx.state.list_shared::<NodePool>().iter().map(|p| p.name_any()).collect();
        let gone: Vec<String> = {
            let published = self.published.lock().unwrap_or_else(PoisonError::into_inner);
            published.keys().filter(|p| !live.contains(*p)).cloned().collect()
        };
        for pool in gone {
            self.publish(&pool, None, None);
        }
    }

    /// Recounts the NodePool `name`, writes its status when it changed and refreshes its metrics (removed when the
    /// pool is gone).
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        match api.get_opt(name).await? {
            Some(pool) => self.reconcile_pool(&pool).await,
            None => {
                self.prune();
                self.publish(name, None, None);
                Ok(None)
            }
        }
    }

    /// [`Self::reconcile`] on a pool already read (the run loop's: the cluster state's copy). The written pool is
    /// recorded in the state, so the next recount does not write from a stale resourceVersion.
    pub async fn reconcile_pool(&self, pool: &NodePool) -> Result<Requeue, ReconcileError> {
        self.prune();
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let name = pool.name_any();
        let name = name.as_str();
        if !(self.ctx.state.kind_synced::<NodeClaim>() && self.ctx.state.kind_synced::<Node>()) {
            return Ok(Some(WAIT_FOR_STATE));
        }
        let (claims, nodes) = (self.ctx.state.list_shared::<NodeClaim>(), self.ctx.state.list_shared::<Node>());
        let usage = usage(name, claims.iter().map(AsRef::as_ref), nodes.iter().map(AsRef::as_ref));
        self.publish_cluster(&cluster_usage(claims.iter().map(AsRef::as_ref), nodes.iter().map(AsRef::as_ref)));
        let limits: BTreeMap<String, String> =
            pool.spec.limits.iter().map(|(k, v)| (k.clone(), v.as_str().to_owned())).collect();
        self.publish(name, Some(&usage), Some(&limits));

        let status = super::status_of(pool);
        let resources: BTreeMap<String, String> =
            usage.resources.iter().map(|(k, q)| (k.to_string(), q.to_string())).collect();
        let stored: BTreeMap<String, String> =
            status.resources.iter().map(|(k, v)| (k.clone(), v.as_str().to_owned())).collect();
        if stored == resources && status.nodes == Some(usage.nodes) {
            return Ok(Some(RESYNC));
        }
        let mut patch: serde_json::Map<String, Value> = stored.keys().map(|k| (k.clone(), Value::Null)).collect();
        patch.extend(resources.into_iter().map(|(k, v)| (k, Value::String(v))));
        let written = patch_pool_status(&api, pool, json!({"resources": patch, "nodes": usage.nodes})).await?;
        self.ctx.state.apply(written);
        tracing::debug!(controller = CONTROLLER, NodePool = %name, nodes = usage.nodes, "nodepool usage updated");
        Ok(Some(RESYNC))
    }

    /// Follows the state's NodePools, NodeClaims and Nodes until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let state = self.ctx.state.clone();
        let watches = Watches { node_claims: true, nodes: true, debounce: Some(DEBOUNCE), ..Watches::default() };
        run_pool_controller(&state, self, watches, shutdown, |pool: Arc<NodePool>, ctx: Arc<Self>| async move {
            Ok::<Action, ReconcileError>(to_action(ctx.reconcile_pool(&pool).await?))
        })
        .await;
    }
}

impl crate::kube_util::ErrorPolicyContext for Counter {
    fn controller_name(&self) -> &'static str {
        CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(&self.ctx.metrics)
    }
}
