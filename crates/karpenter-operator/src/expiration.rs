//! NodeClaim expiration: a NodeClaim whose `creationTimestamp + expireAfter`
//! has passed is deleted — forcefully in the sense of disruption (no budget, no replacement launched first);
//! the drain itself is the normal termination flow (PDBs honoured up to the terminationGracePeriod). Metric
//! `karpenter_nodeclaims_disrupted_total{reason="expired"}`, its `termination_mode` from the claim's
//! terminationGracePeriod.
//!
//! One exception, not part of upstream Karpenter: an expired NodeClaim of a NodePool with a
//! `karpenter-rs.io/min-nodes` floor waits while the pool has fewer NodeClaims counting toward the floor than the
//! floor (expired, drifted and deleting ones do not count), so the floor controller's replacement is in flight
//! before the expired one goes and the pool never drops below its floor without one ([`HOLD_RETRY`]). Likewise an
//! expired NodeClaim of a pool annotated `karpenter-rs.io/disruption-topology-key` waits while a NodeClaim of
//! another domain of that pool is going, so expiry replaces the pool's nodes one domain at a time.
//!
//! The expiry time comes from [`karpenter_disruption::expiration`]. [`Expiration::reconcile`] handles one claim
//! and returns when to look again (its expiry); [`Expiration::sweep`] handles all of them at once;
//! [`Expiration::run`] is the kube-runtime loop (a NodeClaim watch, each claim requeued at its expiry).

use std::sync::Arc;

use karpenter_api::{NodeClaim, NodePool};
use karpenter_disruption::expiration::{expired, expires_at};
use karpenter_scheduler::ClusterSnapshot;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::controller::{Action, Controller};
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::kube_util::{ReconcileError, Requeue, delete_ignoring_missing, node_claim_info, record_disrupted};
use crate::metrics::runtime::queue::ControllerQueue;
use crate::state::ClusterState;
use crate::termination::{error_policy, to_action};

/// How soon an expired NodeClaim held for its pool's floor or topology domain is looked at again.
pub const HOLD_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// The metric reason of an expiry.
pub const REASON: &str = "expired";

/// The expiration controller (see the module docs).
pub struct Expiration {
    ctx: ControllerContext,
}

impl std::fmt::Debug for Expiration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expiration").finish_non_exhaustive()
    }
}

impl Expiration {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone() }
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.ctx.client.clone())
    }

    /// Why the expired `claim` must wait: its pool's floor is not covered by other NodeClaims yet.
    fn held_by_floor(&self, claim: &NodeClaim) -> Option<String> {
        let pool_name = claim.node_pool_name()?;
        let pool = self.ctx.state.get::<NodePool>(pool_name)?;
        let floor = pool.min_nodes().floor;
        if floor == 0 {
            return None;
        }
        let counted = crate::nodepool::min_nodes::counted(&self.ctx.state, pool_name, self.ctx.clock.now());
        (counted < floor).then(|| {
            format!(
                "NodePool {pool_name} has {counted} NodeClaim(s) counting toward its floor ({} {floor}); waiting for the replacement",
                karpenter_api::labels::min_nodes::ANNOTATION
            )
        })
    }

    /// Why the expired `claim` must wait: its pool is disrupted one domain of a topology key at a time
    /// (`karpenter-rs.io/disruption-topology-key`) and another domain's NodeClaims are going (deleting, or their
    /// nodes tainted `karpenter.sh/disrupted`). Expiration then replaces a pool's nodes domain by domain as the
    /// voluntary methods do; an invalid key holds nothing here (expiry is a promise the owner made first).
    fn held_by_topology(&self, claim: &NodeClaim) -> Option<String> {
        let pool_name = claim.node_pool_name()?;
        let pool = self.ctx.state.get::<NodePool>(pool_name)?;
        let key = karpenter_api::labels::disruption_topology::of(&pool).ok().flatten()?;
        let domain_of =
            |labels: Option<&std::collections::BTreeMap<String, String>>| labels.and_then(|l| l.get(&key)).cloned();
        let own = domain_of(claim.metadata.labels.as_ref());
        let disrupted_nodes: std::collections::BTreeSet<String> = self
            .ctx
            .state
            .list_shared::<k8s_openapi::api::core::v1::Node>()
            .iter()
            .filter(|n| karpenter_api::labels::taints::node_is_disrupted(n))
            .map(|n| n.name_any())
            .collect();
        let busy = self.ctx.state.list_shared::<NodeClaim>().iter().find_map(|c| {
            let going = c.metadata.deletion_timestamp.is_some()
                || c.status.as_ref().and_then(|s| s.node_name.as_ref()).is_some_and(|n| disrupted_nodes.contains(n));
            let domain = domain_of(c.metadata.labels.as_ref());
            (c.name_any() != claim.name_any() && c.node_pool_name() == Some(pool_name) && going && domain != own)
                .then_some(domain)
        })?;
        Some(format!(
            "NodePool {pool_name} is disrupted one {key} at a time and {} is being disrupted",
            match busy {
                Some(d) => format!("{key}={d}"),
                None => format!("the domain without {key}"),
            }
        ))
    }

    async fn expire(&self, claim: &NodeClaim) -> Result<(), ReconcileError> {
        delete_ignoring_missing(&self.claims(), &claim.name_any()).await?;
        record_disrupted(&self.ctx.metrics, claim, REASON);
        tracing::info!(NodeClaim = %claim.name_any(), reason = REASON, "disrupting nodeclaim via delete");
        Ok(())
    }

    /// Deletes the NodeClaim `name` if it has expired; otherwise returns the time left until it does (`None`
    /// for `expireAfter: Never`, a missing or a deleting claim).
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let Some(claim) = self.claims().get_opt(name).await? else { return Ok(None) };
        self.reconcile_claim(&claim).await
    }

    /// [`Self::reconcile`] on a claim already read (the run loop's: the cluster state's copy). Deleting an
    /// expired claim needs no fresh copy: a deletion is not guarded by a resourceVersion.
    pub async fn reconcile_claim(&self, claim: &NodeClaim) -> Result<Requeue, ReconcileError> {
        if claim.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let Some(at) = expires_at(&node_claim_info(claim, None)) else { return Ok(None) };
        let now = self.ctx.clock.now();
        if now >= at {
            if let Some(why) = self.held_by_floor(claim).or_else(|| self.held_by_topology(claim)) {
                tracing::info!(NodeClaim = %claim.name_any(), reason = REASON, "expired nodeclaim waits: {why}");
                return Ok(Some(HOLD_RETRY));
            }
            self.expire(claim).await?;
            return Ok(None);
        }
        Ok((at - now).to_std().ok())
    }

    /// Deletes every expired NodeClaim; returns their names (sorted by expiry).
    pub async fn sweep(&self) -> Result<Vec<String>, ReconcileError> {
        let claims = self.claims().list(&ListParams::default()).await?.items;
        let snapshot = ClusterSnapshot {
            node_claims: claims.iter().map(|c| node_claim_info(c, None)).collect(),
            ..ClusterSnapshot::default()
        };
        let mut done = Vec::new();
        for e in expired(&snapshot, self.ctx.clock.now()) {
            if let Some(claim) = claims.iter().find(|c| c.name_any() == e.node_claim) {
                if self.held_by_floor(claim).is_some() || self.held_by_topology(claim).is_some() {
                    continue;
                }
                self.expire(claim).await?;
                done.push(e.node_claim);
            }
        }
        Ok(done)
    }

    /// Follows the NodeClaims of `state` (its watch: [`ClusterState::controller_source`]) and expires each at
    /// its time, until `shutdown` is cancelled.
    pub async fn run(self: Arc<Self>, state: ClusterState, shutdown: CancellationToken) {
        let (claims, claim_events) = state.controller_source::<NodeClaim>();
        let queue = ControllerQueue::new(crate::kube_util::ErrorPolicyContext::reconciles(&*self, 0));
        let controller = Controller::for_shared_stream(queue.objects(claim_events), claims)
            .graceful_shutdown_on(shutdown.cancelled_owned());
        queue
            .run(
                controller,
                |claim: Arc<NodeClaim>, ctx: Arc<Self>| async move {
                    if claim.metadata.deletion_timestamp.is_some() {
                        return Ok(Action::await_change());
                    }
                    Ok(to_action(ctx.reconcile_claim(&claim).await?))
                },
                error_policy,
                self.clone(),
            )
            .await;
    }
}

impl crate::kube_util::ErrorPolicyContext for Expiration {
    fn controller_name(&self) -> &'static str {
        "nodeclaim.expiration"
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(&self.ctx.metrics)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::{TimeZone, Utc};
    use karpenter_api::labels;
    use karpenter_testing::apiserver::ApiServer;
    use karpenter_testing::{FakeClock, NodeClaimOptions, NodePoolOptions, node_claim, node_pool};
    use kube::api::PostParams;

    use super::*;

    /// A clock, an API server on it (kept alive by the caller), its client and a controller context.
    fn setup() -> (FakeClock, ApiServer, kube::Client, ControllerContext) {
        let clock = FakeClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap());
        let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
        let client = server.client();
        let ctx = ControllerContext::for_tests(
            client.clone(),
            Arc::new(karpenter_testing::kwok::fake()),
            Arc::new(clock.clone()),
        );
        (clock, server, client, ctx)
    }

    fn claim(name: &str, expire_after: &str) -> NodeClaim {
        let mut c = node_claim(NodeClaimOptions {
            name: Some(name.into()),
            labels: [(labels::NODE_POOL.to_string(), "spot".to_string())].into(),
            expire_after: Some(expire_after.into()),
            ..Default::default()
        });
        c.metadata.uid = None;
        c
    }

    #[tokio::test]
    async fn claims_are_deleted_once_expired_and_requeued_until_then() {
        let (clock, _server, client, ctx) = setup();
        let (metrics, exp) = (ctx.metrics().clone(), Expiration::new(&ctx));
        let mut pool = node_pool(NodePoolOptions { name: Some("spot".into()), ..Default::default() });
        pool.metadata.uid = None;
        Api::<karpenter_api::NodePool>::all(client.clone()).create(&PostParams::default(), &pool).await.unwrap();
        let claims: Api<NodeClaim> = Api::all(client.clone());
        for c in [claim("short", "1h"), claim("long", "24h"), claim("forever", "Never")] {
            claims.create(&PostParams::default(), &c).await.unwrap();
        }
        assert_eq!(exp.reconcile("short").await.unwrap(), Some(Duration::from_secs(3600)));
        assert_eq!(exp.reconcile("forever").await.unwrap(), None);
        assert_eq!(exp.reconcile("missing").await.unwrap(), None);
        clock.step_secs(3599);
        assert_eq!(exp.reconcile("short").await.unwrap(), Some(Duration::from_secs(1)));
        assert!(exp.sweep().await.unwrap().is_empty());
        clock.step_secs(1);
        assert_eq!(exp.reconcile("short").await.unwrap(), None);
        assert!(claims.get_opt("short").await.unwrap().is_none(), "deleted (no finalizer here)");
        assert_eq!(metrics.nodeclaims_disrupted(REASON, "spot", "", "", "graceful").get(), 1);
        clock.step_secs(30 * 24 * 3600);
        assert_eq!(exp.sweep().await.unwrap(), ["long"]);
        assert!(claims.get_opt("forever").await.unwrap().is_some(), "Never expires");
    }

    /// A pool disrupted one zone at a time: of two expired claims in two zones, the second waits while the
    /// first (held by a finalizer) is going, and goes once it is gone.
    #[tokio::test]
    async fn expired_claims_of_a_zonal_pool_go_zone_by_zone() {
        let (clock, _server, client, ctx) = setup();
        let exp = Expiration::new(&ctx);
        let mut pool = node_pool(NodePoolOptions {
            name: Some("spot".into()),
            metadata_annotations: [(labels::disruption_topology::ANNOTATION.to_owned(), labels::ZONE.to_owned())]
                .into(),
            ..Default::default()
        });
        pool.metadata.uid = None;
        ctx.state().apply(pool);
        let claims: Api<NodeClaim> = Api::all(client.clone());
        for (name, zone) in [("a", "test-zone-a"), ("b", "test-zone-b")] {
            let mut c = claim(name, "1h");
            c.labels_mut().insert(labels::ZONE.to_owned(), zone.to_owned());
            c.metadata.finalizers = Some(vec![labels::finalizers::TERMINATION.to_owned()]);
            ctx.state().apply(claims.create(&PostParams::default(), &c).await.unwrap());
        }
        clock.step_secs(3600);
        assert_eq!(exp.reconcile("a").await.unwrap(), None, "the first zone starts");
        ctx.state().apply(claims.get("a").await.unwrap());
        assert_eq!(exp.reconcile("b").await.unwrap(), Some(HOLD_RETRY), "zone b waits while zone a goes");
        assert!(exp.sweep().await.unwrap().is_empty());
        assert!(claims.get("b").await.unwrap().metadata.deletion_timestamp.is_none());
        // Zone a's claim is gone: zone b goes.
        let going = claims.get("a").await.unwrap();
        let patch = serde_json::json!({"metadata": {"finalizers": null}});
        claims.patch("a", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await.unwrap();
        ctx.state().remove(&going);
        assert_eq!(exp.reconcile("b").await.unwrap(), None);
        assert!(claims.get("b").await.unwrap().metadata.deletion_timestamp.is_some());
    }

    #[tokio::test]
    async fn an_expired_claim_of_a_pool_at_its_floor_waits_for_its_replacement() {
        let (clock, _server, client, ctx) = setup();
        let exp = Expiration::new(&ctx);
        let mut pool = node_pool(NodePoolOptions {
            name: Some("spot".into()),
            metadata_annotations: [(labels::min_nodes::ANNOTATION.to_owned(), "1".to_owned())].into(),
            ..Default::default()
        });
        pool.metadata.uid = None;
        ctx.state().apply(pool);
        let claims: Api<NodeClaim> = Api::all(client.clone());
        let old = claims.create(&PostParams::default(), &claim("old", "1h")).await.unwrap();
        ctx.state().apply(old);
        clock.step_secs(3600);
        assert_eq!(exp.reconcile("old").await.unwrap(), Some(HOLD_RETRY), "the floor's only claim waits");
        assert!(exp.sweep().await.unwrap().is_empty());
        assert!(claims.get_opt("old").await.unwrap().is_some());
        // The floor controller's replacement is in flight: now the expired claim goes.
        let new = claims.create(&PostParams::default(), &claim("new", "1h")).await.unwrap();
        ctx.state().apply(new);
        assert_eq!(exp.reconcile("old").await.unwrap(), None);
        assert!(claims.get_opt("old").await.unwrap().is_none());
    }
}
