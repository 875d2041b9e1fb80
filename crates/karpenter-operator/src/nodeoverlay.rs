//! The NodeOverlay controller (gate `NodeOverlay`): evaluates every NodeOverlay against every NodePool's instance
//! types, publishes the applicable ones to the [`OverlayStore`] that the [`Overlaid`] provider decorator reads
//! (so the provisioner, disruption and every other `instance_types` caller see overlaid prices and capacity),
//! and reports each overlay's `ValidationSucceeded` and `Ready` conditions, with a Warning event when an overlay
//! is invalid or conflicts with another.
//!
//! One reconcile evaluates everything (a conflict involves two overlays, and pools change what overlays select):
//! it runs at start, after any change to a NodeOverlay or NodePool, and every [`RESYNC`] so changed catalogues are
//! picked up. Instance types are read from the undecorated provider.
//!
//! [`Overlaid`]: karpenter_cloudprovider::Overlaid

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::nodeoverlay::{NodeOverlay, conditions};
use karpenter_api::{NodePool, set_condition};
use karpenter_cloudprovider::overlay::{evaluate, unmatched};
use karpenter_cloudprovider::{CloudProvider, Evaluated, OverlayStore};
use karpenter_requirements::InstanceType;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::events::Event;
use crate::nodepool::nodeclass::NodeClassResolver;

/// The controller's name (logs, metrics).
pub const CONTROLLER: &str = "nodeoverlay.controller";
/// How often everything is evaluated again without a watch event.
pub const RESYNC: Duration = Duration::from_secs(300);
/// The pause after a failed evaluation before the next one.
pub const ERROR_BACKOFF: Duration = Duration::from_secs(5);
/// The Warning event's reason for an overlay that is not applied.
pub const EVENT_REASON: &str = "NodeOverlayNotApplied";
/// The Warning event's reason for a valid overlay that selects no instance type of any NodePool.
pub const EVENT_REASON_UNMATCHED: &str = "NodeOverlayMatchesNothing";

/// What one evaluation found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Overlays applied.
    pub applied: Vec<String>,
    /// Overlays not applied, with why.
    pub rejected: Vec<(String, String)>,
    /// Applied overlays that select no instance type of any NodePool.
    pub unmatched: Vec<String>,
    /// NodePools whose instance types could not be read (they get `UnevaluatedNodePool` until they can).
    pub unevaluated_pools: Vec<String>,
}

/// See the module docs.
pub struct NodeOverlayController {
    ctx: ControllerContext,
    provider: Arc<dyn CloudProvider>,
    store: OverlayStore,
    /// The node-class kinds whose changes bring an evaluation.
    node_classes: NodeClassResolver,
}

impl std::fmt::Debug for NodeOverlayController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeOverlayController").finish_non_exhaustive()
    }
}

impl NodeOverlayController {
    /// `provider` is the undecorated provider; `store` the one its [`Overlaid`](karpenter_cloudprovider::Overlaid)
    /// wrapper reads.
    pub fn new(ctx: &ControllerContext, provider: Arc<dyn CloudProvider>, store: OverlayStore) -> Self {
        Self { ctx: ctx.clone(), provider, store, node_classes: NodeClassResolver::default() }
    }

    /// The provider's node-class kinds (none by default): a change to a node class of one the provider
    /// launches from brings an evaluation.
    pub fn with_node_classes(mut self, node_classes: NodeClassResolver) -> Self {
        self.node_classes = node_classes;
        self
    }

    /// Evaluates every overlay against every pool, updates the store, then the overlays' conditions.
    pub async fn reconcile(&self) -> Result<Outcome, kube::Error> {
        let client = self.ctx.client().clone();
        let overlays_api: Api<NodeOverlay> = Api::all(client.clone());
        let overlays = overlays_api.list(&ListParams::default()).await?.items;
        let pools = Api::<NodePool>::all(client).list(&ListParams::default()).await?.items;
        let mut outcome = Outcome::default();
        let mut catalogues: Vec<(&NodePool, Arc<[InstanceType]>)> = Vec::new();
        for pool in &pools {
            let name = pool.metadata.name.clone().unwrap_or_default();
            match self.provider.instance_types(pool).await {
                Ok(its) => catalogues.push((pool, its)),
                Err(e) => {
                    tracing::warn!(controller = CONTROLLER, NodePool = %name, error = %e, "listing instance types");
                    outcome.unevaluated_pools.push(name);
                }
            }
        }
        let views: Vec<(&NodePool, &[InstanceType])> = catalogues.iter().map(|(p, its)| (*p, &its[..])).collect();
        let problems = evaluate(&overlays, &views, self.provider.labels());
        let unmatched = unmatched(&overlays, &views, self.provider.labels());
        let node_pools: BTreeMap<String, Arc<NodePool>> =
            catalogues.iter().filter_map(|(p, _)| Some((p.metadata.name.clone()?, Arc::new((*p).clone())))).collect();
        let applicable: Vec<NodeOverlay> =
            overlays.iter().filter(|o| !problems.contains_key(o.name())).cloned().collect();
        outcome.applied = applicable.iter().map(|o| o.name().to_owned()).collect();
        let pool_names = node_pools.keys().cloned().collect::<Vec<_>>().join(", ");
        self.store.set(Evaluated { overlays: applicable, node_pools });

        let now = self.ctx.clock().now();
        for overlay in &overlays {
            let name = overlay.name();
            let mut conds = overlay.status.clone().unwrap_or_default().conditions;
            let (status, reason, message) = match problems.get(name) {
                None => (ConditionStatus::True, conditions::REASON_VALID, String::new()),
                Some(p) => {
                    outcome.rejected.push((name.to_owned(), p.to_string()));
                    (ConditionStatus::False, p.reason(), p.to_string())
                }
            };
            // Valid but selecting nothing: ready (pools may change), with the reason saying it changes nothing.
            let selects_nothing = status == ConditionStatus::True && unmatched.contains(name);
            let (ready_reason, ready_message) = if selects_nothing {
                outcome.unmatched.push(name.to_owned());
                let message = format!("selects no instance type of any NodePool ({pool_names})");
                (conditions::REASON_NO_MATCHING_INSTANCE_TYPES, message)
            } else {
                (reason, message.clone())
            };
            let generation = overlay.metadata.generation;
            let mut changed =
                set_condition(&mut conds, conditions::VALIDATION_SUCCEEDED, status, reason, &message, generation, now);
            let ready_changed =
                set_condition(&mut conds, conditions::READY, status, ready_reason, &ready_message, generation, now);
            changed |= ready_changed;
            if !changed {
                continue;
            }
            let patch = json!({
                "metadata": {"resourceVersion": overlay.metadata.resource_version},
                "status": {"conditions": conds},
            });
            match overlays_api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {}
                // Changed or deleted since the list: the watch brings the next evaluation.
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => continue,
                Err(e) => return Err(e),
            }
            if status == ConditionStatus::False {
                tracing::warn!(controller = CONTROLLER, NodeOverlay = %name, %message, "NodeOverlay not applied");
                self.ctx.recorder().publish_detached(Event::warning(overlay, EVENT_REASON, message));
            } else if selects_nothing && ready_changed {
                tracing::info!(controller = CONTROLLER, NodeOverlay = %name, message = %ready_message,
                    "NodeOverlay selects nothing");
                self.ctx.recorder().publish_detached(Event::warning(overlay, EVENT_REASON_UNMATCHED, ready_message));
            }
        }
        Ok(outcome)
    }

    /// Evaluates at start, after every NodeOverlay, NodePool or node-class change (a node class shapes its pools'
    /// instance types) and every [`RESYNC`], until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let changed = Arc::new(Notify::new());
        let client = self.ctx.client().clone();
        // Only events trigger an evaluation; a failing watch (its errors are items too) must not spin the loop.
        fn events<T>(r: Result<T, watcher::Error>) -> futures::future::Ready<Option<()>> {
            futures::future::ready(r.ok().map(|_| ()))
        }
        let overlays =
            watcher(Api::<NodeOverlay>::all(client.clone()), watcher::Config::default()).filter_map(events).boxed();
        let pools =
            watcher(Api::<NodePool>::all(client.clone()), watcher::Config::default()).filter_map(events).boxed();
        let resolver = &self.node_classes;
        let node_classes: Vec<_> = self
            .provider
            .supported_node_classes()
            .into_iter()
            .filter_map(|k| {
                let resource = resolver.resource(&k.group, &k.kind)?;
                let api = Api::<DynamicObject>::all_with(client.clone(), resource);
                Some(watcher(api, watcher::Config::default()).filter_map(events).boxed())
            })
            .collect();
        let watch = tokio::spawn({
            let (changed, shutdown) = (changed.clone(), shutdown.clone());
            async move {
                let mut events = futures::stream::select_all([overlays, pools].into_iter().chain(node_classes));
                loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        e = events.next() => match e {
                            Some(()) => changed.notify_one(),
                            None => return,
                        },
                    }
                }
            }
        });
        let passes = self.ctx.metrics().reconciler(CONTROLLER, 1);
        loop {
            let pass = passes.pass();
            let reconciled = self.reconcile().await;
            pass.finish(crate::metrics::ReconcileResult::of_pass(&reconciled));
            if let Err(e) = reconciled {
                tracing::warn!(controller = CONTROLLER, error = %e, "evaluating NodeOverlays");
                // Let the API server recover before the next attempt, whatever the watches report meanwhile.
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(ERROR_BACKOFF) => {}
                }
                continue;
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = changed.notified() => {}
                () = tokio::time::sleep(RESYNC) => {}
            }
        }
        watch.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodepool::nodeclass::NodeClassRegistration;
    use karpenter_api::nodeoverlay::{NodeOverlayRequirement, NodeOverlaySpec};
    use karpenter_api::{Conditions, labels};
    use karpenter_cloudprovider::Overlaid;
    use karpenter_testing::apiserver::ApiServer;
    use karpenter_testing::{FakeClock, NodePoolOptions, node_pool};
    use kube::api::PostParams;

    fn overlay(name: &str, it: &str, price: &str) -> NodeOverlay {
        let spec = NodeOverlaySpec {
            requirements: vec![NodeOverlayRequirement::new(labels::INSTANCE_TYPE, "In", &[it])],
            price: Some(price.into()),
            ..Default::default()
        };
        NodeOverlay::new(name, spec)
    }

    #[tokio::test]
    async fn applies_valid_overlays_and_reports_conflicts_on_both() {
        let clock = FakeClock::default();
        let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
        let client = server.client();
        let raw: Arc<dyn CloudProvider> = Arc::new(karpenter_testing::kwok::fake());
        let store = OverlayStore::new();
        let overlaid: Arc<dyn CloudProvider> = Arc::new(Overlaid::new(raw.clone(), store.clone()));
        let ctx = ControllerContext::for_tests(client.clone(), overlaid.clone(), Arc::new(clock.clone()));
        let pool = node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() });
        Api::<NodePool>::all(client.clone()).create(&PostParams::default(), &pool).await.unwrap();
        // Before an evaluation the pool is skipped rather than launched at the provider's prices.
        assert!(overlaid.instance_types(&pool).await.is_err());

        let its = raw.instance_types(&pool).await.unwrap();
        let (a, b) = (its[0].name.clone(), its[1].name.clone());
        let api: Api<NodeOverlay> = Api::all(client.clone());
        let typo = overlay("typo", "no-such-type", "1");
        for o in [overlay("cheap", &a, "0.0001"), overlay("x", &b, "1"), overlay("y", &b, "2"), typo] {
            api.create(&PostParams::default(), &o).await.unwrap();
        }
        let controller = NodeOverlayController::new(&ctx, raw.clone(), store.clone());
        let outcome = controller.reconcile().await.unwrap();
        assert_eq!(outcome.applied, ["cheap", "typo"]);
        assert_eq!(outcome.rejected.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(outcome.unmatched, ["typo"]);

        let seen = overlaid.instance_types(&pool).await.unwrap();
        let cheap = seen.iter().find(|it| it.name == a).unwrap();
        assert!(cheap.offerings.iter().all(|o| o.price == 0.0001 && o.price_overlay_applied));
        let conflicted = seen.iter().find(|it| it.name == b).unwrap();
        let original = its.iter().find(|it| it.name == b).unwrap();
        assert_eq!(conflicted.offerings, original.offerings, "conflicting overlays are not applied");

        let status = |name: &str| {
            let api = api.clone();
            let name = name.to_owned();
            async move { api.get(&name).await.unwrap().status.unwrap_or_default() }
        };
        assert!(status("cheap").await.is_true(conditions::VALIDATION_SUCCEEDED));
        assert!(status("cheap").await.is_true(conditions::READY));
        // Valid and ready, but its Ready reason and a Warning event say it changes nothing.
        let s = status("typo").await;
        assert!(s.is_true(conditions::VALIDATION_SUCCEEDED));
        let ready = s.conditions.iter().find(|c| c.type_ == conditions::READY).unwrap();
        assert_eq!(
            (ready.status, ready.reason.as_str(), ready.message.as_str()),
            (
                ConditionStatus::True,
                conditions::REASON_NO_MATCHING_INSTANCE_TYPES,
                "selects no instance type of any NodePool (default)"
            )
        );
        let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(client.clone());
        let warned = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let list = events.list(&Default::default()).await.unwrap().items;
                if list.iter().any(|e| e.reason.as_deref() == Some(EVENT_REASON_UNMATCHED)) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        warned.await.expect("a NodeOverlayMatchesNothing event");
        for (name, other) in [("x", "y"), ("y", "x")] {
            let s = status(name).await;
            let c = s.conditions.iter().find(|c| c.type_ == conditions::VALIDATION_SUCCEEDED).unwrap();
            assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, conditions::REASON_CONFLICT));
            assert!(c.message.contains(other), "{}", c.message);
            assert!(!s.is_true(conditions::READY));
        }
        // Nothing changed: a second evaluation writes nothing.
        let rv = api.get("cheap").await.unwrap().metadata.resource_version;
        controller.reconcile().await.unwrap();
        assert_eq!(api.get("cheap").await.unwrap().metadata.resource_version, rv);
    }

    #[tokio::test]
    async fn a_node_class_change_brings_an_evaluation_before_the_resync() {
        use karpenter_cloudprovider::Method;
        let server = ApiServer::new();
        let client = server.client();
        let fake = Arc::new(karpenter_testing::kwok::fake());
        let raw: Arc<dyn CloudProvider> = fake.clone();
        let ctx = ControllerContext::for_tests(client.clone(), raw.clone(), Arc::new(FakeClock::default()));
        let pool = node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() });
        Api::<NodePool>::all(client.clone()).create(&PostParams::default(), &pool).await.unwrap();
        let kwok = NodeClassRegistration::of::<karpenter_kwok::api::KWOKNodeClass>();
        let controller = NodeOverlayController::new(&ctx, raw, OverlayStore::new())
            .with_node_classes(NodeClassResolver::new([&kwok]));
        let controller = Arc::new(controller);
        let shutdown = CancellationToken::new();
        let run = tokio::spawn(controller.run(shutdown.clone()));
        let evaluations = || fake.call_count(Method::InstanceTypes);
        // Real time: the watches run on the in-process API server. Wait for the start's evaluations to settle.
        let settled = async || {
            let mut last = usize::MAX;
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let now = evaluations();
                if now == last && now > 0 {
                    return now;
                }
                last = now;
            }
        };
        let before = settled().await;
        let class = karpenter_kwok::testing::kwok_node_class(Default::default());
        Api::<karpenter_kwok::api::KWOKNodeClass>::all(client).create(&PostParams::default(), &class).await.unwrap();
        let after = tokio::time::timeout(Duration::from_secs(10), async {
            while evaluations() == before {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            evaluations()
        })
        .await
        .expect("an evaluation after the node class appeared, long before the 5-minute resync");
        assert!(after > before);
        shutdown.cancel();
        run.await.unwrap();
    }
}
