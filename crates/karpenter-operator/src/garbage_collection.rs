//! Garbage collection of what the cloud and the cluster disagree on, as upstream's NodeClaim garbage collection
//! and the AWS provider's instance garbage collection.
//!
//! - **Leaked instances** ([`GarbageCollection::collect_instances`]): an instance from `CloudProvider::list`
//!   that is not terminating, was launched more than [`INSTANCE_GRACE`] ago and has no NodeClaim with its
//!   provider id is deleted, and so are the Nodes with that provider id. The same pass deletes **orphaned
//!   Nodes**: a Node whose provider id is one of this provider's (`<name>://`), created more than
//!   [`INSTANCE_GRACE`] ago, with no NodeClaim carrying that provider id (its termination finalizer then
//!   takes it through the normal flow; the instance is already gone or deleted here). Interval
//!   [`instance_gc_interval`]: 10 s for the first 20 successful runs, then 2 min.
//! - **Orphaned NodeClaims** ([`GarbageCollection::collect_node_claims`], every 2 min): a Registered NodeClaim
//!   that is not being deleted, whose provider id `CloudProvider::list` no longer reports and whose Node is not
//!   `Ready=True`, is deleted once `CloudProvider::get` confirms the instance is gone (NodeClaimNotFound);
//!   metric `karpenter_nodeclaims_disrupted_total{reason="garbage_collected"}`.
//!
//! Both passes are plain async functions returning what they did; [`GarbageCollection::run`] is the timer loop.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_cloudprovider::CloudProvider;
use kube::ResourceExt;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::kube_util::{ReconcileError, delete_ignoring_missing, list_all_lean_map, record_disrupted};
use karpenter_api::time::from_k8s;

/// How long after launch an instance without a NodeClaim is left alone (the claim may not be written yet).
pub const INSTANCE_GRACE: Duration = Duration::from_secs(30);
/// Instance GC interval for its first [`INSTANCE_GC_FAST_RUNS`] successful runs.
pub const INSTANCE_GC_FAST_INTERVAL: Duration = Duration::from_secs(10);
/// Successful instance GC runs at the fast interval.
pub const INSTANCE_GC_FAST_RUNS: u32 = 20;
/// Instance GC interval afterwards, and the NodeClaim GC interval.
pub const GC_INTERVAL: Duration = Duration::from_secs(120);

/// The instance GC interval after `successful_runs` successful runs.
pub fn instance_gc_interval(successful_runs: u32) -> Duration {
    if successful_runs < INSTANCE_GC_FAST_RUNS { INSTANCE_GC_FAST_INTERVAL } else { GC_INTERVAL }
}

/// What a garbage-collection pass deleted (sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Provider ids of the instances deleted.
    pub instances: Vec<String>,
    /// Names of the Nodes deleted.
    pub nodes: Vec<String>,
    /// Names of the NodeClaims deleted.
    pub node_claims: Vec<String>,
}

/// The controller's name, upstream's (logs, metrics).
pub const CONTROLLER: &str = "nodeclaim.garbagecollection";

/// The garbage collectors (see the module docs).
pub struct GarbageCollection {
    ctx: ControllerContext,
}

impl std::fmt::Debug for GarbageCollection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GarbageCollection").field("cloud", &self.ctx.cloud.name()).finish_non_exhaustive()
    }
}

fn node_provider_id(node: &Node) -> Option<&str> {
    node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).filter(|p| !p.is_empty())
}

/// What instance garbage collection reads of a Node.
struct NodeFacts {
    name: String,
    provider_id: String,
    created: Option<DateTime<Utc>>,
    deleting: bool,
}

impl NodeFacts {
    /// `None` for a Node without a provider id (not an instance's).
    fn of(node: &Node) -> Option<Self> {
        Some(Self {
            name: node.name_any(),
            provider_id: node_provider_id(node)?.to_owned(),
            created: node.metadata.creation_timestamp.as_ref().and_then(from_k8s),
            deleting: node.metadata.deletion_timestamp.is_some(),
        })
    }
}

fn older_than(created: Option<DateTime<Utc>>, now: DateTime<Utc>, grace: Duration) -> bool {
    let grace = chrono::Duration::from_std(grace).unwrap_or_else(|_| chrono::Duration::seconds(30));
    created.is_some_and(|c| now - c > grace)
}

impl GarbageCollection {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone() }
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.ctx.client.clone())
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.ctx.client.clone())
    }

    /// Leaked instances and orphaned Nodes (see the module docs).
    pub async fn collect_instances(&self) -> Result<GcReport, ReconcileError> {
        let now = self.ctx.clock.now();
        // NodeClaims first: an instance launched after this list is younger than the grace anyway.
        let claimed: BTreeSet<String> = list_all_lean_map(&self.ctx.client, |c: NodeClaim| {
            c.provider_id().filter(|p| !p.is_empty()).map(str::to_owned)
        })
        .await?
        .into_iter()
        .collect();
        let nodes = list_all_lean_map(&self.ctx.client, |n: Node| NodeFacts::of(&n)).await?;
        let mut nodes_by_id: BTreeMap<&str, Vec<&NodeFacts>> = BTreeMap::new();
        for n in &nodes {
            nodes_by_id.entry(n.provider_id.as_str()).or_default().push(n);
        }
        let mut report = GcReport::default();
        let mut instances = self.ctx.cloud.list().await?;
        instances.sort_by(|a, b| a.provider_id().cmp(&b.provider_id()));
        let mut nodes_to_delete: BTreeSet<String> = BTreeSet::new();
        for instance in &instances {
            let Some(pid) = instance.provider_id().filter(|p| !p.is_empty()) else { continue };
            if claimed.contains(pid) || instance.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let launched = instance.metadata.creation_timestamp.as_ref().and_then(from_k8s);
            if !older_than(launched, now, INSTANCE_GRACE) {
                continue;
            }
            match self.ctx.cloud.delete(instance).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            tracing::info!(provider_id = %pid, "garbage collected cloud instance without a nodeclaim");
            report.instances.push(pid.to_owned());
            for n in nodes_by_id.get(pid).into_iter().flatten() {
                nodes_to_delete.insert(n.name.clone());
            }
        }
        let prefix = format!("{}://", self.ctx.cloud.name());
        for n in &nodes {
            if n.provider_id.starts_with(&prefix)
                && !claimed.contains(&n.provider_id)
                && !n.deleting
                && older_than(n.created, now, INSTANCE_GRACE)
            {
                nodes_to_delete.insert(n.name.clone());
            }
        }
        for name in nodes_to_delete {
            delete_ignoring_missing(&self.nodes(), &name).await?;
            tracing::info!(Node = %name, "garbage collected node without a nodeclaim");
            report.nodes.push(name);
        }
        Ok(report)
    }

    /// Registered NodeClaims whose instance is gone (see the module docs).
    pub async fn collect_node_claims(&self) -> Result<GcReport, ReconcileError> {
        // The instances first, keeping only their ids, so that of the claims only those whose instance was not
        // listed are kept (a claim registered after this list is confirmed by `get` below before anything is
        // deleted).
        let live: BTreeSet<String> =
            self.ctx.cloud.list().await?.iter().filter_map(|i| i.provider_id().map(str::to_owned)).collect();
        let mut claims = list_all_lean_map(&self.ctx.client, |c: NodeClaim| {
            let unlisted = c.provider_id().is_some_and(|p| !p.is_empty() && !live.contains(p));
            (unlisted && c.is_registered() && c.metadata.deletion_timestamp.is_none()).then_some(c)
        })
        .await?;
        claims.sort_by_key(|c| c.name_any());
        let mut report = GcReport::default();
        for claim in claims {
            let Some(pid) = claim.provider_id().filter(|p| !p.is_empty()) else { continue };
            if self.node_ready(&claim, pid).await? {
                continue;
            }
            match self.ctx.cloud.get(pid).await {
                Ok(_) => continue,
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            if claim.metadata.deletion_timestamp.is_none() {
                delete_ignoring_missing(&self.claims(), &claim.name_any()).await?;
                record_disrupted(&self.ctx.metrics, &claim, "garbage_collected");
                tracing::info!(NodeClaim = %claim.name_any(), provider_id = %pid, "garbage collecting nodeclaim with no cloudprovider representation");
                report.node_claims.push(claim.name_any());
            }
        }
        Ok(report)
    }

    /// Whether the claim's Node (by `status.nodeName`, with the same provider id) is Ready.
    async fn node_ready(&self, claim: &NodeClaim, provider_id: &str) -> Result<bool, kube::Error> {
        let Some(name) = claim.node_name().filter(|n| !n.is_empty()) else { return Ok(false) };
        let Some(node) = self.nodes().get_opt(name).await? else { return Ok(false) };
        if node_provider_id(&node) != Some(provider_id) {
            return Ok(false);
        }
        Ok(node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True"))
    }

    /// Runs both collectors on their intervals until `shutdown` is cancelled.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        // Both collectors are upstream's one controller, nodeclaim.garbagecollection.
        let passes = self.ctx.metrics.reconciler(CONTROLLER, 2);
        let instances = async {
            let mut successes = 0u32;
            loop {
                let pass = passes.pass();
                let collected = self.collect_instances().await;
                pass.finish(crate::metrics::ReconcileResult::of_pass(&collected));
                match collected {
                    Ok(_) => successes = successes.saturating_add(1),
                    Err(e) => tracing::warn!(error = %e, "instance garbage collection failed"),
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(instance_gc_interval(successes)) => {}
                }
            }
        };
        let claims = async {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(GC_INTERVAL) => {}
                }
                let pass = passes.pass();
                let collected = self.collect_node_claims().await;
                pass.finish(crate::metrics::ReconcileResult::of_pass(&collected));
                if let Err(e) = collected {
                    tracing::warn!(error = %e, "nodeclaim garbage collection failed");
                }
            }
        };
        futures::join!(instances, claims);
    }
}

#[cfg(test)]
mod tests {
    use kube::Client;

    use crate::metrics::Metrics;
    use chrono::TimeZone;
    use k8s_openapi::api::core::v1::Node;
    use karpenter_api::labels::finalizers;
    use karpenter_cloudprovider::{FakeCloudProvider, FakeOptions};
    use karpenter_testing::apiserver::{ApiServer, create_with_status};
    use karpenter_testing::{FakeClock, NodeClaimOptions, NodeOptions, node, node_claim};
    use kube::api::{Patch, PatchParams, PostParams};
    use serde_json::json;

    use super::*;

    struct Env {
        _server: ApiServer,
        client: Client,
        clock: FakeClock,
        cloud: FakeCloudProvider,
        metrics: Arc<Metrics>,
        gc: GarbageCollection,
    }

    fn env() -> Env {
        let clock = FakeClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap());
        let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
        let client = server.client();
        let cloud = FakeCloudProvider::new(FakeOptions {
            clock: Arc::new(clock.clone()),
            ..karpenter_testing::kwok::fake_options()
        });
        let ctx = ControllerContext::for_tests(client.clone(), Arc::new(cloud.clone()), Arc::new(clock.clone()));
        let gc = GarbageCollection::new(&ctx);
        Env { _server: server, client, clock, cloud, metrics: ctx.metrics().clone(), gc }
    }

    impl Env {
        /// An instance; with `claim`, its registered NodeClaim too. Returns the provider id.
        async fn instance(&self, name: &str, claim: bool) -> String {
            let mut c = node_claim(NodeClaimOptions {
                name: Some(name.into()),
                registered: true,
                launched: true,
                node_name: Some(format!("node-{name}")),
                ..Default::default()
            });
            let pid = self.cloud.add_instance(&c).unwrap().provider_id().unwrap().to_owned();
            if claim {
                c.status.as_mut().unwrap().provider_id = Some(pid.clone());
                c.metadata.uid = None;
                create_with_status(&Api::all(self.client.clone()), &c).await.unwrap();
            }
            pid
        }

        async fn node(&self, name: &str, provider_id: &str, ready: bool) {
            let mut n = node(NodeOptions {
                name: Some(name.into()),
                provider_id: Some(provider_id.into()),
                ready: Some(ready),
                finalizers: vec![finalizers::TERMINATION.into()],
                ..Default::default()
            });
            n.metadata.uid = None;
            Api::<Node>::all(self.client.clone()).create(&PostParams::default(), &n).await.unwrap();
        }

        async fn node_deleting(&self, name: &str) -> Option<bool> {
            Api::<Node>::all(self.client.clone())
                .get_opt(name)
                .await
                .unwrap()
                .map(|n| n.metadata.deletion_timestamp.is_some())
        }
    }

    #[test]
    fn interval_is_fast_for_twenty_runs_then_two_minutes() {
        assert_eq!(instance_gc_interval(0), Duration::from_secs(10));
        assert_eq!(instance_gc_interval(19), Duration::from_secs(10));
        assert_eq!(instance_gc_interval(20), Duration::from_secs(120));
        assert_eq!(instance_gc_interval(u32::MAX), Duration::from_secs(120));
    }

    #[tokio::test]
    async fn leaked_instances_go_after_thirty_seconds_with_their_nodes() {
        let e = env();
        let kept = e.instance("kept", true).await;
        let leaked = e.instance("leaked", false).await;
        e.node("node-leaked", &leaked, true).await;
        e.node("node-kept", &kept, true).await;
        // A node of another provider is none of our business.
        e.node("foreign", "aws:///us-east-1a/i-0123", true).await;
        assert_eq!(e.gc.collect_instances().await.unwrap(), GcReport::default(), "too young");
        e.clock.step_secs(31);
        let report = e.gc.collect_instances().await.unwrap();
        assert_eq!(report.instances, [leaked]);
        assert_eq!(report.nodes, ["node-leaked"]);
        assert_eq!(e.cloud.instance_ids(), [kept]);
        assert_eq!(e.node_deleting("node-leaked").await, Some(true), "deleting through its finalizer");
        assert_eq!(e.node_deleting("node-kept").await, Some(false));
        assert_eq!(e.node_deleting("foreign").await, Some(false));
        let again = e.gc.collect_instances().await.unwrap();
        assert!(again.instances.is_empty(), "idempotent: {again:?}");
    }

    #[tokio::test]
    async fn orphaned_nodes_of_our_provider_are_deleted() {
        let e = env();
        e.node("ghost", "kwok://ghost-1", false).await;
        assert!(e.gc.collect_instances().await.unwrap().nodes.is_empty(), "too young");
        e.clock.step_secs(31);
        assert_eq!(e.gc.collect_instances().await.unwrap().nodes, ["ghost"]);
        assert_eq!(e.node_deleting("ghost").await, Some(true));
    }

    #[tokio::test]
    async fn registered_claims_whose_instance_is_gone_are_deleted_unless_the_node_is_ready() {
        let e = env();
        let gone = e.instance("gone", true).await;
        let gone_ready = e.instance("gone-ready", true).await;
        let alive = e.instance("alive", true).await;
        e.node("node-gone-ready", &gone_ready, true).await;
        e.node("node-gone", &gone, false).await;
        let _ = alive;
        for pid in [&gone, &gone_ready] {
            let c = karpenter_cloudprovider::CloudProvider::list(&e.cloud).await.unwrap();
            let inst = c.iter().find(|i| i.provider_id() == Some(pid.as_str())).unwrap().clone();
            e.cloud.delete(&inst).await.unwrap();
        }
        let report = e.gc.collect_node_claims().await.unwrap();
        assert_eq!(report.node_claims, ["gone"]);
        let claims: Api<NodeClaim> = Api::all(e.client.clone());
        assert!(claims.get_opt("gone").await.unwrap().is_none_or(|c| c.metadata.deletion_timestamp.is_some()));
        assert!(claims.get("gone-ready").await.unwrap().metadata.deletion_timestamp.is_none(), "its node is Ready");
        assert!(claims.get("alive").await.unwrap().metadata.deletion_timestamp.is_none());
        assert_eq!(e.metrics.nodeclaims_disrupted("garbage_collected", "", "", "", "graceful").get(), 1);
        // Once the node stops being Ready the claim goes too.
        Api::<Node>::all(e.client.clone())
            .patch_status(
                "node-gone-ready",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}})),
            )
            .await
            .unwrap();
        assert_eq!(e.gc.collect_node_claims().await.unwrap().node_claims, ["gone-ready"]);
    }

    #[tokio::test]
    async fn unregistered_claims_are_not_collected() {
        let e = env();
        let mut c =
            node_claim(NodeClaimOptions { name: Some("launching".into()), launched: true, ..Default::default() });
        c.status.as_mut().unwrap().provider_id = Some("kwok://never-existed".into());
        c.metadata.uid = None;
        create_with_status(&Api::all(e.client.clone()), &c).await.unwrap();
        assert_eq!(e.gc.collect_node_claims().await.unwrap(), GcReport::default());
    }
}
