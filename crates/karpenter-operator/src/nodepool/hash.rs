//! The NodePool hash controller (`nodepool.hash`): keeps
//! `karpenter.sh/nodepool-hash` (karpenter-api's [`node_pool_hash`]) and `karpenter.sh/nodepool-hash-version`
//! ([`NODE_POOL_HASH_VERSION`]) on every NodePool; the provisioner copies both onto the NodeClaims it creates,
//! and drift compares them.
//!
//! When a NodeClaim of the pool carries another hash *version* (made by an older release or by upstream
//! Karpenter, whose hashes are not comparable with ours), its annotations are rewritten to the pool's current
//! hash and version instead of letting it drift — unless it is already `Drifted`: then only the version is
//! rewritten, so it stays drifted (its old hash differs from the pool's). Claims with the current version are
//! never touched: a hash difference under the same version is real drift.

use std::sync::Arc;

use karpenter_api::hash::{NODE_POOL_HASH_VERSION, node_pool_hash};
use karpenter_api::labels::{self, annotations};
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_api::{NodeClaim, NodePool};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::{Watches, run_pool_controller};
use crate::context::ControllerContext;
use crate::kube_util::{ReconcileError, Requeue};
use crate::state::ClusterState;
use crate::termination::to_action;

/// The controller name in logs.
pub const CONTROLLER: &str = "nodepool.hash";

/// The hash controller (see the module docs).
pub struct HashController {
    ctx: ControllerContext,
}

impl std::fmt::Debug for HashController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashController").finish_non_exhaustive()
    }
}

/// The annotations a NodeClaim on another hash version gets: the pool's hash version always, and the pool's
/// hash unless the claim is already `Drifted` (its old hash then keeps it drifted). Shared by this controller and
/// the drift-condition controller, which may meet such a claim first.
pub fn version_rewrite(claim: &NodeClaim, hash: &str, version: &str) -> serde_json::Map<String, serde_json::Value> {
    let drifted = claim.conditions().iter().any(|c| c.type_ == cond::DRIFTED);
    let mut values = serde_json::Map::new();
    values.insert(annotations::NODE_POOL_HASH_VERSION.into(), version.into());
    if !drifted {
        values.insert(annotations::NODE_POOL_HASH.into(), hash.into());
    }
    values
}

fn annotation<'a, K: ResourceExt>(obj: &'a K, key: &str) -> Option<&'a str> {
    obj.annotations().get(key).map(String::as_str)
}

impl HashController {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone() }
    }

    /// Rewrites the hash annotations of the pool's NodeClaims whose hash version is not the current one; returns
    /// their names.
    pub async fn propagate(&self, pool: &NodePool, hash: &str) -> Result<Vec<String>, ReconcileError> {
        let api: Api<NodeClaim> = Api::all(self.ctx.client.clone());
        let selector = format!("{}={}", labels::NODE_POOL, pool.name_any());
        let claims = api.list(&ListParams::default().labels(&selector)).await?.items;
        let mut rewritten = Vec::new();
        for claim in claims {
            if annotation(&claim, annotations::NODE_POOL_HASH_VERSION) == Some(NODE_POOL_HASH_VERSION) {
                continue;
            }
            let values = version_rewrite(&claim, hash, NODE_POOL_HASH_VERSION);
            let patch = json!({"metadata": {"resourceVersion": claim.resource_version(), "annotations": values}});
            match api.patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => rewritten.push(claim.name_any()),
                Err(e) if crate::kube_util::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(rewritten)
    }

    /// One pass over the NodePool `name`.
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let Some(pool) = api.get_opt(name).await? else { return Ok(None) };
        self.reconcile_pool(&pool).await
    }

    /// [`Self::reconcile`] on a pool already read (the run loop's: the cluster state's copy).
    pub async fn reconcile_pool(&self, pool: &NodePool) -> Result<Requeue, ReconcileError> {
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let name = pool.name_any();
        let name = name.as_str();
        if pool.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let hash = node_pool_hash(pool);
        let rewritten = self.propagate(pool, &hash).await?;
        if !rewritten.is_empty() {
            tracing::info!(controller = CONTROLLER, NodePool = %name, nodeclaims = rewritten.len(),
                version = NODE_POOL_HASH_VERSION, "rewrote nodeclaim hash annotations to the current hash version");
        }
        let current =
            (annotation(pool, annotations::NODE_POOL_HASH), annotation(pool, annotations::NODE_POOL_HASH_VERSION));
        if current != (Some(hash.as_str()), Some(NODE_POOL_HASH_VERSION)) {
            let patch = json!({"metadata": {
                "resourceVersion": pool.resource_version(),
                "annotations": {
                    annotations::NODE_POOL_HASH: hash,
                    annotations::NODE_POOL_HASH_VERSION: NODE_POOL_HASH_VERSION,
                },
            }});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        Ok(None)
    }

    /// Follows the state's NodePools until `shutdown`.
    pub async fn run(self: Arc<Self>, state: ClusterState, shutdown: CancellationToken) {
        run_pool_controller(
            &state,
            self,
            Watches::default(),
            shutdown,
            |pool: Arc<NodePool>, ctx: Arc<Self>| async move {
                Ok::<Action, ReconcileError>(to_action(ctx.reconcile_pool(&pool).await?))
            },
        )
        .await;
    }
}

impl crate::kube_util::ErrorPolicyContext for HashController {
    fn controller_name(&self) -> &'static str {
        CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(self.ctx.metrics().as_ref())
    }
}
