//! The NodeClaim lifecycle controller: launch, registration, initialization
//! and liveness of every live NodeClaim. Deleting NodeClaims are left to the termination controller.
//!
//! [`reconcile`] is one pass over one NodeClaim, without timers (tests call it directly); [`run`] drives it with
//! kube-runtime's `Controller` over NodeClaims plus Nodes mapped to their NodeClaim (by owner reference or
//! providerID), retrying failures with a per-object backoff from 1 s doubling to 1 min. Every pass:
//!
//! 1. ensures the `karpenter.sh/termination` finalizer;
//! 2. **launch** (until `Launched=True`): `CloudProvider::create` (the answer is cached by uid for an hour, so a
//!    status write lost to a conflict never launches a second instance); on success the claim gets the
//!    provider's labels (its own labels win), annotations, `providerID`, `imageID`, capacity, allocatable and
//!    `Launched=True`. Insufficient capacity or a node class that is not ready delete the claim (events
//!    `InsufficientCapacityError` / `NodeClassNotReady`; the provisioner makes a new decision with the
//!    offerings now unavailable); other errors set `Launched=Unknown` with the error kind as reason and are
//!    retried;
//! 3. **registration** (until `Registered=True`): the Node with the claim's providerID gets the claim's labels
//!    and annotations, an owner reference to the claim, the termination finalizer, the claim's taints and
//!    startup taints (unless it carries `karpenter.sh/do-not-sync-taints=true`), loses the
//!    `karpenter.sh/unregistered` taint and gains `karpenter.sh/registered=true`; the claim gets
//!    `status.nodeName` and `Registered=True` (`karpenter_nodes_created_total`). No Node yet:
//!    `Registered=Unknown(NodeNotFound)`; several: `Registered=False(MultipleNodesFound)`;
//! 4. **initialization** (until `Initialized=True`): the Node is `Ready=True`, none of the claim's startup taints
//!    and none of the known ephemeral taints (not-ready, unreachable, cloud-provider uninitialized) remain, and
//!    every resource the claim requests is registered (non-zero allocatable); then the Node is labelled
//!    `karpenter.sh/initialized=true` and the claim gets `Initialized=True`. Otherwise `Initialized=Unknown`
//!    with the reason (`NodeNotReady`, `StartupTaintsExist`, `KnownEphemeralTaintsExist`,
//!    `ResourceNotRegistered`);
//! 5. **liveness**: a claim not `Launched` 5 minutes after its launch attempt began (reason `launch_timeout`),
//!    or not `Registered` 15 minutes after launch (`registration_timeout`) is deleted.
//!
//! The root `Ready` condition is `True` once the three are. Every write names the resourceVersion it was
//! computed from (a conflict is retried), and its answer is recorded in the [`ClusterState`] at once.
//!
//! Steps 2 to 5 each live in a submodule of their own (`launch`, `registration`, `initialization`, `liveness`),
//! as methods of one pass over the claim and the status it is building, written once at the end.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::condition::{Condition, ConditionStatus, set_condition};
use karpenter_api::labels::finalizers;
use karpenter_api::nodeclaim::NodeClaimStatus;
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_api::time::{chrono_duration, parse_rfc3339};
use karpenter_cloudprovider::CloudProviderError;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::metrics::runtime::queue::ControllerQueue;
use crate::state::ClusterState;

mod initialization;
mod launch;
mod liveness;
mod registration;

pub use initialization::{initialization_blocker, unpublished_dra_drivers};
use liveness::Liveness;

/// A claim not launched this long after its launch began is deleted.
pub const LAUNCH_TTL: Duration = Duration::from_secs(5 * 60);
/// A claim not registered this long after launch is deleted.
pub const REGISTRATION_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a successful `create` answer is remembered per NodeClaim uid.
pub const LAUNCH_CACHE_TTL: Duration = Duration::from_secs(60 * 60);
/// Longest message kept in a condition.
pub const MAX_CONDITION_MESSAGE: usize = 300;
/// The controller name in logs and metrics.
pub const CONTROLLER: &str = "nodeclaim.lifecycle";

/// Why a pass failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// An API request failed (409 conflicts included: the pass is retried on fresher data).
    #[error("NodeClaim {name}: {action}: {source}")]
    Kube {
        /// The NodeClaim.
        name: String,
        /// What was being done.
        action: &'static str,
        /// The kind written (`NodeClaim`, `Node`).
        kind: &'static str,
        /// The API error.
        source: kube::Error,
    },
    /// The cloud provider could not launch (not insufficient capacity, not a node class problem).
    #[error("NodeClaim {name}: launching: {source}")]
    Launch {
        /// The NodeClaim.
        name: String,
        /// The provider's error.
        source: CloudProviderError,
    },
}

/// What the lifecycle controller works with.
pub struct LifecycleContext {
    shared: ControllerContext,
    launches: Mutex<BTreeMap<String, (DateTime<Utc>, NodeClaim)>>,
    failures: Mutex<BTreeMap<String, u32>>,
}

impl fmt::Debug for LifecycleContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LifecycleContext").finish_non_exhaustive()
    }
}

impl LifecycleContext {
    /// A context; `clock` times conditions and the TTLs.
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { shared: ctx.clone(), launches: Mutex::default(), failures: Mutex::default() }
    }

    fn api(&self) -> Api<NodeClaim> {
        Api::all(self.shared.client.clone())
    }

    fn cached_launch(&self, uid: &str) -> Option<NodeClaim> {
        let now = self.shared.clock.now();
        let mut cache = self.launches.lock().unwrap_or_else(|p| p.into_inner());
        cache.retain(|_, (at, _)| now - *at < chrono_duration(LAUNCH_CACHE_TTL));
        cache.get(uid).map(|(_, c)| c.clone())
    }

    /// Drops the cached launch of a claim whose launch is written: only a lost status write needs it. Kept for
    /// the whole TTL, the cache held a full NodeClaim per launch of the last hour (~7 KB each at 5,000 nodes).
    fn forget_launch(&self, uid: &str) {
        self.launches.lock().unwrap_or_else(|p| p.into_inner()).remove(uid);
    }

    fn cache_launch(&self, uid: &str, launched: &NodeClaim) {
        let now = self.shared.clock.now();
        self.launches.lock().unwrap_or_else(|p| p.into_inner()).insert(uid.to_owned(), (now, launched.clone()));
    }

    /// Backoff of the next retry of `name`: 1 s doubling per consecutive failure, at most 1 min.
    fn backoff(&self, name: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = failures.entry(name.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        Duration::from_secs(1u64 << (*n - 1).min(6)).min(Duration::from_secs(60))
    }

    fn succeeded(&self, name: &str) {
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
    }
}

/// A condition message cut to [`MAX_CONDITION_MESSAGE`] characters: launch and registration errors can carry
/// whole provider responses, and NodePool validation messages list every violation.
pub(crate) fn truncate(message: &str) -> String {
    message.chars().take(MAX_CONDITION_MESSAGE).collect()
}

fn transition_time(c: &Condition) -> Option<DateTime<Utc>> {
    parse_rfc3339(&c.last_transition_time)
}

fn resource_version(claim: &NodeClaim) -> Option<u64> {
    claim.metadata.resource_version.as_deref().and_then(|rv| rv.parse().ok())
}

/// The newer of the claim handed in and the state's copy (our own writes land in the state first).
fn freshest(given: &NodeClaim, state: &ClusterState) -> NodeClaim {
    match state.get::<NodeClaim>(&given.name_any()) {
        Some(s) if s.metadata.uid == given.metadata.uid && resource_version(&s) > resource_version(given) => s,
        _ => given.clone(),
    }
}

/// One pass over one NodeClaim (see the module docs): each step reads and amends the claim's status, and the
/// status is written once at the end (a step that deletes the claim or fails to launch ends the pass early).
pub async fn reconcile(ctx: &LifecycleContext, claim: &NodeClaim) -> Result<Action, LifecycleError> {
    let claim = freshest(claim, &ctx.shared.state);
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let claim = ensure_finalizer(ctx, claim).await?;
    let mut pass = Pass::new(ctx, claim);
    if let Some(done) = pass.launch().await? {
        return Ok(done);
    }
    let (registered, node) = pass.register().await?;
    if let Some(node) = &node {
        pass.initialize(node).await?;
    }
    pass.set_ready();
    let requeue = match pass.liveness(registered).await? {
        Liveness::Deleted => return Ok(Action::await_change()),
        Liveness::Alive(requeue) => requeue,
    };
    write_status(ctx, &pass.claim, &pass.before, pass.status).await?;
    Ok(match requeue {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

/// Step 1: the termination finalizer, added before anything is launched for the claim.
async fn ensure_finalizer(ctx: &LifecycleContext, claim: NodeClaim) -> Result<NodeClaim, LifecycleError> {
    if claim.finalizers().iter().any(|f| f == finalizers::TERMINATION) {
        return Ok(claim);
    }
    let name = claim.name_any();
    let mut finalizers_list = claim.finalizers().to_vec();
    finalizers_list.push(finalizers::TERMINATION.to_owned());
    let patch = json!({"metadata": {"finalizers": finalizers_list, "resourceVersion": claim.resource_version()}});
    let claim = ctx.api().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|source| {
        LifecycleError::Kube { name, action: "adding the termination finalizer", kind: "NodeClaim", source }
    })?;
    ctx.shared.state.apply(claim.clone());
    Ok(claim)
}

/// One reconcile of one claim: the claim as last written, its status before the pass and as amended so far.
struct Pass<'c> {
    ctx: &'c LifecycleContext,
    name: String,
    claim: NodeClaim,
    before: NodeClaimStatus,
    status: NodeClaimStatus,
    generation: Option<i64>,
    now: DateTime<Utc>,
}

impl<'c> Pass<'c> {
    fn new(ctx: &'c LifecycleContext, claim: NodeClaim) -> Self {
        let before = claim.status.clone().unwrap_or_default();
        Pass {
            ctx,
            name: claim.name_any(),
            generation: claim.metadata.generation,
            now: ctx.shared.clock.now(),
            status: before.clone(),
            before,
            claim,
        }
    }

    fn set(&mut self, type_: &str, status: ConditionStatus, reason: &str, message: &str) {
        set_condition(&mut self.status.conditions, type_, status, reason, message, self.generation, self.now);
    }

    fn is_true(&self, type_: &str) -> bool {
        self.status.conditions.iter().any(|c| c.type_ == type_ && c.status == ConditionStatus::True)
    }

    fn kube_err(&self, action: &'static str) -> impl FnOnce(kube::Error) -> LifecycleError + use<> {
        let name = self.name.clone();
        move |source| LifecycleError::Kube { name, action, kind: "NodeClaim", source }
    }

    /// The root `Ready` condition: `True` once launch, registration and initialization are.
    fn set_ready(&mut self) {
        let all_true = cond::NODE_CLAIM_READY_DEPENDENTS.iter().all(|t| self.is_true(t));
        let (status, reason) =
            if all_true { (ConditionStatus::True, cond::READY) } else { (ConditionStatus::Unknown, "NotReady") };
        self.set(cond::READY, status, reason, "");
    }
}

/// Writes `status` when it differs from `before`, with the claim's resourceVersion as precondition.
async fn write_status(
    ctx: &LifecycleContext,
    claim: &NodeClaim,
    before: &NodeClaimStatus,
    status: NodeClaimStatus,
) -> Result<(), LifecycleError> {
    if &status == before {
        return Ok(());
    }
    let name = claim.name_any();
    let patch = json!({"metadata": {"resourceVersion": claim.resource_version()}, "status": status});
    let written = ctx
        .api()
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| LifecycleError::Kube { name, action: "writing the status", kind: "NodeClaim", source })?;
    ctx.shared.state.apply(written);
    Ok(())
}

async fn delete_claim(ctx: &LifecycleContext, claim: &NodeClaim, reason: &str) -> Result<(), LifecycleError> {
    let name = claim.name_any();
    tracing::info!(controller = CONTROLLER, NodeClaim = %name, reason, "deleting nodeclaim");
    match ctx.api().delete(&name, &DeleteParams::default()).await {
        Ok(either) => {
            if let Some(obj) = either.left() {
                ctx.shared.state.apply(obj);
            }
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(LifecycleError::Kube { name, action: "deleting", kind: "NodeClaim", source }),
    }
}

/// The NodeClaim a Node belongs to: its NodeClaim owner, else the claim with its providerID.
fn claim_of(state: &ClusterState, node: &Node) -> Option<ObjectRef<NodeClaim>> {
    if let Some(o) = node.owner_references().iter().find(|o| o.kind == "NodeClaim") {
        return Some(ObjectRef::new(&o.name));
    }
    let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref())?;
    state.node_claims_by_provider_id(provider_id).first().map(|c| ObjectRef::new(&c.name_any()))
}

impl LifecycleError {
    /// The kind whose write lost a race (see [`crate::kube_util::is_write_conflict`]), if this is one.
    pub fn write_conflict(&self) -> Option<&'static str> {
        match self {
            LifecycleError::Kube { kind, source, .. } if crate::kube_util::is_write_conflict(source) => Some(kind),
            _ => None,
        }
    }
}

/// What the run loop does after a failed pass over claim `name`: a write conflict (the Node or NodeClaim changed
/// since it was read: common while a kubelet registers) is logged at debug level, counted and retried soon
/// without growing the backoff; an unavailable API server ([`crate::kube_util::is_transient`]) is a warning and
/// anything else an ERROR, both retried with exponential backoff.
pub fn on_error(ctx: &LifecycleContext, name: &str, error: &LifecycleError) -> Action {
    if let Some(kind) = error.write_conflict() {
        crate::kube_util::record_write_conflict(Some(&ctx.shared.metrics), CONTROLLER, kind, name, error);
        return Action::requeue(crate::kube_util::CONFLICT_RETRY);
    }
    let wait = ctx.backoff(name);
    let transient = matches!(error, LifecycleError::Kube { source, .. } if crate::kube_util::is_transient(source));
    if transient {
        tracing::warn!(controller = CONTROLLER, NodeClaim = %name, error = %error, retry_in = ?wait,
            "reconcile failed: the API server is unavailable, retrying");
    } else {
        tracing::error!(controller = CONTROLLER, NodeClaim = %name, error = %error, retry_in = ?wait, "reconcile failed");
    }
    Action::requeue(wait)
}

/// NodeClaims reconciled at once. Each reconcile holds copies of its claim while it waits on the API server,
/// which serves at most [`crate::client::MAX_REQUESTS_IN_FLIGHT`] of our requests at a time: unbounded, a
/// 1,200-node scale-out had hundreds of reconciles waiting (32 MB of the heap at its peak) without going faster.
pub const CONCURRENCY: u16 = 64;

/// Runs the controller until `shutdown` (see the module docs).
pub async fn run(ctx: Arc<LifecycleContext>, shutdown: CancellationToken) {
    // The cluster state's watches, not watches of our own (ClusterState::controller_source).
    let (claims, claim_events) = ctx.shared.state.controller_source::<NodeClaim>();
    let (_, node_events) = ctx.shared.state.controller_source::<Node>();
    let state = ctx.shared.state.clone();
    let queue = ControllerQueue::new(Some(ctx.shared.metrics.reconciler(CONTROLLER, usize::from(CONCURRENCY))));
    let controller = Controller::for_shared_stream(queue.objects(claim_events), claims)
        .watches_shared_stream(node_events, queue.mapped(move |node: Arc<Node>| claim_of(&state, &node)))
        .with_config(controller::Config::default().concurrency(CONCURRENCY))
        .graceful_shutdown_on(async move { shutdown.cancelled().await });
    queue
        .run(
            controller,
            |claim: Arc<NodeClaim>, ctx: Arc<LifecycleContext>| async move {
                let result = reconcile(&ctx, &claim).await;
                if result.is_ok() {
                    ctx.succeeded(&claim.name_any());
                }
                result
            },
            |claim: Arc<NodeClaim>, error: &LifecycleError, ctx: Arc<LifecycleContext>| {
                on_error(&ctx, &claim.name_any(), error)
            },
            ctx,
        )
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::reasons;
    use k8s_openapi::api::core::v1::Taint as CoreTaint;
    use karpenter_api::labels::{self, taints};
    use karpenter_api::nodeclaim::NodeSelectorRequirementWithMinValues as Req;
    use karpenter_api::nodeclaim::conditions::reasons as cond_reasons;
    use karpenter_api::{Taint, TaintEffect};
    use karpenter_cloudprovider::{FakeCloudProvider, Method};
    use karpenter_testing::apiserver::ApiServer;
    use karpenter_testing::{FakeClock, NodeClaimOptions, NodeOptions, kwok_node_class_ref, node, node_claim, taint};
    use kube::api::PostParams;

    fn condition<'a>(claim: &'a NodeClaim, type_: &str) -> Option<&'a Condition> {
        claim.conditions().iter().find(|c| c.type_ == type_)
    }

    struct Fixture {
        server: ApiServer,
        state: ClusterState,
        cloud: Arc<FakeCloudProvider>,
        ctx: LifecycleContext,
        clock: FakeClock,
    }

    fn fixture() -> Fixture {
        let server = ApiServer::new();
        let client = server.client();
        let clock = FakeClock::default();
        let state = ClusterState::new(Arc::new(clock.clone()), Duration::from_secs(20));
        state.mark_all_synced();
        let cloud = Arc::new(karpenter_testing::kwok::fake());
        let ctx = LifecycleContext::new(
            &ControllerContext::for_tests(client, cloud.clone(), Arc::new(clock.clone())).with_state(state.clone()),
        );
        Fixture { server, state, cloud, ctx, clock }
    }

    async fn create_claim(f: &Fixture) -> NodeClaim {
        let claim = node_claim(NodeClaimOptions {
            name: Some("c1".into()),
            node_pool: Some("default".into()),
            node_class_ref: Some(kwok_node_class_ref("default")),
            requirements: vec![
                Req::new(labels::INSTANCE_TYPE, "In", &["c-1x-amd64-linux"]),
                Req::new(labels::CAPACITY_TYPE, "In", &["on-demand"]),
            ],
            startup_taints: vec![Taint::new("example.com/agent", None, TaintEffect::NoSchedule)],
            requests: [("cpu", "500m")].into(),
            ..Default::default()
        });
        let mut claim = claim;
        claim.metadata.owner_references = None; // no NodePool in this server: the collector would take it
        f.ctx.api().create(&PostParams::default(), &claim).await.unwrap()
    }

    async fn get(f: &Fixture) -> NodeClaim {
        f.ctx.api().get("c1").await.unwrap()
    }

    fn cond_of(c: &NodeClaim, t: &str) -> (ConditionStatus, String) {
        let c = condition(c, t).unwrap_or_else(|| panic!("no {t} condition"));
        (c.status, c.reason.clone())
    }

    async fn add_node(f: &Fixture, provider_id: &str, ready: bool, extra: Vec<CoreTaint>) -> Node {
        let mut t = vec![taint(taints::UNREGISTERED, None, "NoExecute")];
        t.extend(extra);
        let n = node(NodeOptions {
            name: Some("node-1".into()),
            provider_id: Some(provider_id.into()),
            taints: t,
            allocatable: [("cpu", "1"), ("pods", "110")].into(),
            ready: Some(ready),
            ..Default::default()
        });
        let created = Api::<Node>::all(f.server.client()).create(&PostParams::default(), &n).await.unwrap();
        f.state.apply(created.clone());
        created
    }

    async fn events(f: &Fixture, reason: &str) -> usize {
        let api: Api<k8s_openapi::api::core::v1::Event> = Api::all(f.server.client());
        for _ in 0..100 {
            let n = api
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .count();
            if n > 0 {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        0
    }

    #[tokio::test]
    async fn launch_register_initialize() {
        let f = fixture();
        create_claim(&f).await;

        // Launch: finalizer, provider fields, Launched=True; no node yet → Registered=Unknown, requeue within the TTL.
        let action = reconcile(&f.ctx, &get(&f).await).await.unwrap();
        assert_eq!(action, Action::requeue(REGISTRATION_TTL));
        let c = get(&f).await;
        assert!(c.finalizers().iter().any(|x| x == finalizers::TERMINATION));
        let pid = c.provider_id().unwrap().to_owned();
        assert!(pid.starts_with("kwok://"));
        assert_eq!(c.labels().get(labels::INSTANCE_TYPE).map(String::as_str), Some("c-1x-amd64-linux"));
        assert_eq!(c.labels().get(labels::NODE_POOL).map(String::as_str), Some("default"));
        assert!(!c.status.as_ref().unwrap().allocatable.is_empty());
        assert_eq!(cond_of(&c, cond::LAUNCHED).0, ConditionStatus::True);
        assert_eq!(cond_of(&c, cond::REGISTERED), (ConditionStatus::Unknown, cond_reasons::NODE_NOT_FOUND.into()));
        assert_eq!(f.cloud.call_count(Method::Create), 1);

        // Registration: the node gets the claim's labels, taints, owner and finalizer; unregistered taint gone.
        add_node(&f, &pid, false, vec![]).await;
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        let c = get(&f).await;
        assert_eq!(cond_of(&c, cond::REGISTERED).0, ConditionStatus::True);
        assert_eq!(c.node_name(), Some("node-1"));
        assert_eq!(cond_of(&c, cond::INITIALIZED), (ConditionStatus::Unknown, cond_reasons::NODE_NOT_READY.into()));
        assert_eq!(cond_of(&c, cond::READY).0, ConditionStatus::Unknown);
        let n = Api::<Node>::all(f.server.client()).get("node-1").await.unwrap();
        assert_eq!(n.labels().get(labels::NODE_REGISTERED).map(String::as_str), Some("true"));
        assert_eq!(n.labels().get(labels::NODE_POOL).map(String::as_str), Some("default"));
        assert!(n.finalizers().iter().any(|x| x == finalizers::TERMINATION));
        assert_eq!(n.owner_references()[0].name, "c1");
        let node_taints: Vec<String> = n.spec.unwrap().taints.unwrap().into_iter().map(|t| t.key).collect();
        assert!(node_taints.contains(&"example.com/agent".to_owned()));
        assert!(!node_taints.contains(&taints::UNREGISTERED.to_owned()));
        assert_eq!(f.cloud.call_count(Method::Create), 1, "never launched twice");

        // Initialization waits for Ready, then for the startup taint to go.
        let mut n = Api::<Node>::all(f.server.client()).get("node-1").await.unwrap();
        n.status.as_mut().unwrap().conditions = Some(vec![k8s_openapi::api::core::v1::NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]);
        let n = Api::<Node>::all(f.server.client()).replace_status("node-1", &PostParams::default(), &n).await.unwrap();
        f.state.apply(n);
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        assert_eq!(cond_of(&get(&f).await, cond::INITIALIZED).1, cond_reasons::STARTUP_TAINTS_EXIST);
        let n = Api::<Node>::all(f.server.client()).get("node-1").await.unwrap();
        let kept: Vec<CoreTaint> = n
            .spec
            .as_ref()
            .unwrap()
            .taints
            .clone()
            .unwrap()
            .into_iter()
            .filter(|t| t.key != "example.com/agent")
            .collect();
        let patch = json!({"spec": {"taints": kept}});
        let n = Api::<Node>::all(f.server.client())
            .patch("node-1", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        f.state.apply(n);
        let action = reconcile(&f.ctx, &get(&f).await).await.unwrap();
        assert_eq!(action, Action::await_change());
        let c = get(&f).await;
        assert_eq!(cond_of(&c, cond::INITIALIZED).0, ConditionStatus::True);
        assert_eq!(cond_of(&c, cond::READY).0, ConditionStatus::True);
        let n = Api::<Node>::all(f.server.client()).get("node-1").await.unwrap();
        assert_eq!(n.labels().get(labels::NODE_INITIALIZED).map(String::as_str), Some("true"));
    }

    /// A claim launched for DRA claims is initialized once its drivers published complete pools for its Node.
    #[tokio::test]
    async fn initialization_waits_for_the_requested_dra_drivers() {
        let f = fixture();
        create_claim(&f).await;
        let patch =
            json!({"metadata": {"annotations": {labels::annotations::REQUESTED_DRA_DRIVERS: "gpu.example.com"}}});
        f.ctx.api().patch("c1", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        let pid = get(&f).await.provider_id().unwrap().to_owned();
        add_node(&f, &pid, true, vec![]).await;
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        // Registration put the claim's startup taint on the node: remove it, as its agent would.
        let n = Api::<Node>::all(f.server.client()).get("node-1").await.unwrap();
        let kept: Vec<CoreTaint> =
            n.spec.unwrap().taints.unwrap_or_default().into_iter().filter(|t| t.key != "example.com/agent").collect();
        let n = Api::<Node>::all(f.server.client())
            .patch("node-1", &PatchParams::default(), &Patch::Merge(&json!({"spec": {"taints": kept}})))
            .await
            .unwrap();
        f.state.apply(n);
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        let (status, reason) = cond_of(&get(&f).await, cond::INITIALIZED);
        assert_eq!((status, reason.as_str()), (ConditionStatus::Unknown, cond_reasons::DRA_DRIVER_POOLS_NOT_PUBLISHED));

        let slice: k8s_openapi::api::resource::v1beta1::ResourceSlice = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice", "metadata": {"name": "node-1-gpu"},
            "spec": {"driver": "gpu.example.com", "nodeName": "node-1",
                     "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1}}
        }))
        .unwrap();
        f.state.apply(slice);
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        assert_eq!(cond_of(&get(&f).await, cond::INITIALIZED).0, ConditionStatus::True);
    }

    #[tokio::test]
    async fn insufficient_capacity_deletes_the_claim() {
        let f = fixture();
        create_claim(&f).await;
        f.cloud.fail_next(Method::Create, 1, || CloudProviderError::insufficient_capacity(vec![], "no capacity"));
        let action = reconcile(&f.ctx, &get(&f).await).await.unwrap();
        assert_eq!(action, Action::await_change());
        assert!(get(&f).await.metadata.deletion_timestamp.is_some(), "deleted (the finalizer holds it)");
        assert_eq!(events(&f, reasons::INSUFFICIENT_CAPACITY_ERROR).await, 1);
    }

    #[tokio::test]
    async fn insufficient_capacity_tells_the_pods_the_claim_was_planned_for() {
        let f = fixture();
        let claim = create_claim(&f).await;
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "default", "uid": "u-web-1"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}
        }))
        .unwrap();
        f.state.apply(pod);
        // A second planned pod that is gone by now gets no event.
        f.state.record_created_claim(&claim, &["default/web-1".to_owned(), "default/gone".to_owned()]);
        f.cloud.fail_next(Method::Create, 1, || CloudProviderError::insufficient_capacity(vec![], "no capacity"));
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        let api: Api<k8s_openapi::api::core::v1::Event> = Api::all(f.server.client());
        let mut on_pods = Vec::new();
        for _ in 0..100 {
            on_pods = api
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|e| {
                    e.reason.as_deref() == Some(reasons::INSUFFICIENT_CAPACITY_ERROR)
                        && e.involved_object.kind.as_deref() == Some("Pod")
                })
                .collect();
            if !on_pods.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(on_pods.len(), 1, "{on_pods:?}");
        let event = &on_pods[0];
        assert_eq!(event.involved_object.name.as_deref(), Some("web-1"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        let message = event.message.as_deref().unwrap_or_default();
        assert!(message.starts_with("NodeClaim c1 nominated for this pod failed to launch: "), "{message}");
        assert!(message.contains("no capacity"), "{message}");
    }

    #[tokio::test]
    async fn other_launch_errors_are_reported_and_retried() {
        let f = fixture();
        create_claim(&f).await;
        f.cloud.fail_next(Method::Create, 1, || CloudProviderError::create("RequestLimitExceeded", "slow down"));
        let err = reconcile(&f.ctx, &get(&f).await).await.unwrap_err();
        assert!(err.to_string().contains("NodeClaim c1: launching"), "{err}");
        let c = get(&f).await;
        assert_eq!(cond_of(&c, cond::LAUNCHED), (ConditionStatus::Unknown, "CreateError".into()));
        assert!(c.metadata.deletion_timestamp.is_none());
        // The retry launches.
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        assert_eq!(cond_of(&get(&f).await, cond::LAUNCHED).0, ConditionStatus::True);
        assert_eq!(f.ctx.backoff("c1"), Duration::from_secs(1));
        assert_eq!(f.ctx.backoff("c1"), Duration::from_secs(2));
        f.ctx.succeeded("c1");
        assert_eq!(f.ctx.backoff("c1"), Duration::from_secs(1));
    }

    /// The launch cache only bridges a lost status write: once the launch is written, the next reconcile drops
    /// it, instead of holding every launch of the last hour.
    #[tokio::test]
    async fn a_written_launch_leaves_the_cache() {
        let f = fixture();
        create_claim(&f).await;
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        let uid = get(&f).await.metadata.uid.clone().unwrap();
        assert!(f.ctx.launches.lock().unwrap().contains_key(&uid), "cached until the write is seen");
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        assert!(f.ctx.launches.lock().unwrap().is_empty());
        assert_eq!(f.cloud.call_count(Method::Create), 1);
    }

    #[tokio::test]
    async fn a_claim_never_registered_is_deleted_after_the_ttl() {
        let f = fixture();
        create_claim(&f).await;
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        f.clock.step_secs(14 * 60);
        let action = reconcile(&f.ctx, &get(&f).await).await.unwrap();
        assert_eq!(action, Action::requeue(Duration::from_secs(60)));
        assert!(get(&f).await.metadata.deletion_timestamp.is_none());
        f.clock.step_secs(60);
        reconcile(&f.ctx, &get(&f).await).await.unwrap();
        assert!(get(&f).await.metadata.deletion_timestamp.is_some());
    }

    #[tokio::test]
    async fn a_conflicting_write_is_an_error_not_a_panic() {
        let f = fixture();
        let created = create_claim(&f).await;
        // Someone else writes first: our copy is stale.
        let patch = json!({"metadata": {"labels": {"other": "writer"}}});
        f.ctx.api().patch("c1", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let err = reconcile(&f.ctx, &created).await.unwrap_err();
        assert!(matches!(&err, LifecycleError::Kube { source: kube::Error::Api(s), .. } if s.code == 409), "{err}");
    }

    /// A 409 on our own write is expected (a kubelet or another controller wrote first): no ERROR line, a debug
    /// line, `karpenter_kube_write_conflicts_total` counts it, the retry comes soon and the backoff does not grow.
    /// Any other failure still logs an ERROR.
    #[tokio::test]
    async fn a_conflict_is_retried_quietly_and_counted() {
        let f = fixture();
        let created = create_claim(&f).await;
        let patch = json!({"metadata": {"labels": {"other": "writer"}}});
        f.ctx.api().patch("c1", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        let err = reconcile(&f.ctx, &created).await.unwrap_err();
        assert_eq!(err.write_conflict(), Some("NodeClaim"));

        let (_guard, events) = crate::kube_util::test_log::capture();
        for _ in 0..3 {
            assert_eq!(on_error(&f.ctx, "c1", &err), Action::requeue(crate::kube_util::CONFLICT_RETRY));
        }
        use crate::kube_util::test_log::at;
        assert!(at(&events, tracing::Level::ERROR).is_empty(), "{:?}", events.lock().unwrap());
        assert_eq!(at(&events, tracing::Level::DEBUG).len(), 3);
        let text = f.ctx.shared.metrics.render();
        assert!(
            text.contains(
                "karpenter_kube_write_conflicts_total{controller=\"nodeclaim.lifecycle\",kind=\"NodeClaim\"} 3"
            ),
            "{text}"
        );

        // An unavailable API server (a 5xx, 429 or no connection) passes: a warning, with backoff.
        let unavailable = LifecycleError::Kube {
            name: "c1".into(),
            action: "deleting",
            kind: "NodeClaim",
            source: kube::Error::Api(kube::core::Status::failure("boom", "InternalError").with_code(500).boxed()),
        };
        assert_eq!(
            on_error(&f.ctx, "c1", &unavailable),
            Action::requeue(Duration::from_secs(1)),
            "backoff starts at 1 s"
        );
        assert!(at(&events, tracing::Level::ERROR).is_empty());
        assert_eq!(at(&events, tracing::Level::WARN).len(), 1);
        // A rejected request is an error, and the backoff grows.
        let rejected = LifecycleError::Kube {
            name: "c1".into(),
            action: "deleting",
            kind: "NodeClaim",
            source: kube::Error::Api(kube::core::Status::failure("bad", "Invalid").with_code(422).boxed()),
        };
        assert_eq!(on_error(&f.ctx, "c1", &rejected), Action::requeue(Duration::from_secs(2)));
        assert_eq!(at(&events, tracing::Level::ERROR).len(), 1);
    }
}
