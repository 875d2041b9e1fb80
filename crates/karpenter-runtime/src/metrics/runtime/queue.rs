//! client-go's workqueue metrics for a controller driven by kube-runtime, whose queue (the scheduler inside
//! `applier`) exposes nothing: [`ControllerQueue`] sees it from its edges instead.
//!
//! - In: every object a trigger hands kube-runtime, from the main stream ([`ControllerQueue::objects`]), a
//!   mapper of a watched kind ([`ControllerQueue::mapped`]) or an owned kind ([`ControllerQueue::owners`]). An
//!   object already waiting is not counted again (kube-runtime reconciles it once; client-go's dirty set).
//! - Out: a reconcile of the object starting ([`ControllerQueue::run`] wraps the reconciler), or kube-runtime
//!   dropping it because it is no longer in the store (the `ObjectNotFound` its output stream reports).
//!
//! A requeue kube-runtime schedules itself (a reconcile's `Action::requeue`, the error policy's backoff) never
//! passes a trigger: it is counted when it comes due and starts, as client-go adds a delayed item when its delay
//! is over. Wrap every trigger of a controller, or `workqueue_depth` and `workqueue_adds_total` undercount it.

use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, StreamExt, TryFuture, TryFutureExt};
use kube::Resource;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use serde::de::DeserializeOwned;

use super::{ReconcileMetrics, ReconcileResult};

/// An object's key in a controller's queue: kind, namespace and name, since one series can serve loops over
/// two kinds (`node.termination` reconciles Nodes and NodeClaims).
pub fn object_key(kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{kind}/{}/{name}", namespace.unwrap_or(""))
}

fn key_of_ref<K: Resource<DynamicType = ()>>(r: &ObjectRef<K>) -> String {
    object_key(&K::kind(&()), r.namespace.as_deref(), &r.name)
}

fn key_of_object<K: Resource<DynamicType = ()>>(o: &K) -> String {
    object_key(&K::kind(&()), o.meta().namespace.as_deref(), o.meta().name.as_deref().unwrap_or(""))
}

/// The queue of one kube-runtime controller (see the module docs); with no series (`None`), every method passes
/// its input through unchanged. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct ControllerQueue {
    metrics: Option<ReconcileMetrics>,
}

impl ControllerQueue {
    /// The queue recorded under `metrics` (the controller's series).
    pub fn new(metrics: Option<ReconcileMetrics>) -> Self {
        Self { metrics }
    }

    /// The controller's main stream (`Controller::for_shared_stream`): each object queues itself.
    pub fn objects<K, S>(&self, events: S) -> impl Stream<Item = Arc<K>> + Send + 'static
    where
        K: Resource<DynamicType = ()> + Send + Sync + 'static,
        S: Stream<Item = Arc<K>> + Send + 'static,
    {
        let metrics = self.metrics.clone();
        events.inspect(move |object| {
            if let Some(m) = &metrics {
                m.object_queued(key_of_object(&**object));
            }
        })
    }

    /// A watcher's stream of objects (`Controller::for_stream`): each object received queues itself.
    pub fn object_results<K, E, S>(&self, events: S) -> impl Stream<Item = Result<K, E>> + Send + 'static
    where
        K: Resource<DynamicType = ()> + Send + 'static,
        E: Send + 'static,
        S: Stream<Item = Result<K, E>> + Send + 'static,
    {
        let metrics = self.metrics.clone();
        events.inspect(move |event| {
            if let (Some(m), Ok(object)) = (&metrics, event) {
                m.object_queued(key_of_object(object));
            }
        })
    }

    /// A watched kind's mapper (`Controller::watches_shared_stream`, `watches_with`): the objects it maps to are
    /// queued.
    pub fn mapped<T, K, I>(
        &self,
        mapper: impl Fn(T) -> I + Send + Sync + 'static,
    ) -> impl Fn(T) -> Vec<ObjectRef<K>> + Send + Sync + 'static
    where
        K: Resource<DynamicType = ()>,
        I: IntoIterator<Item = ObjectRef<K>>,
    {
        let metrics = self.metrics.clone();
        move |changed| {
            let refs: Vec<ObjectRef<K>> = mapper(changed).into_iter().collect();
            if let Some(m) = &metrics {
                for r in &refs {
                    m.object_queued(key_of_ref(r));
                }
            }
            refs
        }
    }

    /// An owned kind's relation (what `Controller::owns_shared_stream` maps), as a mapper for
    /// `watches_shared_stream`: a child queues its owners of kind `K`, matched by apiVersion and kind.
    pub fn owners<C, K>(&self) -> impl Fn(Arc<C>) -> Vec<ObjectRef<K>> + Send + Sync + 'static
    where
        C: Resource + Send + Sync + 'static,
        K: Resource<DynamicType = ()>,
    {
        self.mapped(|child: Arc<C>| {
            let namespace = child.meta().namespace.clone();
            child
                .meta()
                .owner_references
                .iter()
                .flatten()
                .filter_map(|owner| ObjectRef::from_owner_ref(namespace.as_deref(), owner, ()))
                .collect::<Vec<ObjectRef<K>>>()
        })
    }

    /// Runs `controller` until its shutdown: each reconcile recorded (result, duration, the object leaving the
    /// queue), and the objects kube-runtime drops as gone taken off the queue.
    pub async fn run<K, Ctx, R, Fut, P>(
        self,
        controller: Controller<K>,
        mut reconcile: R,
        error_policy: P,
        ctx: Arc<Ctx>,
    ) where
        K: Clone + Resource<DynamicType = ()> + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Eq + Hash + Clone + std::fmt::Debug + Unpin,
        Ctx: Send + Sync + 'static,
        R: FnMut(Arc<K>, Arc<Ctx>) -> Fut,
        Fut: TryFuture<Ok = Action> + Send + 'static,
        Fut::Error: std::error::Error + Send + 'static,
        P: Fn(Arc<K>, &Fut::Error, Arc<Ctx>) -> Action,
    {
        let metrics = self.metrics;
        let per_reconcile = metrics.clone();
        let reconciler = move |object: Arc<K>, ctx: Arc<Ctx>| {
            let key = key_of_object(&*object);
            let work = TryFutureExt::into_future(reconcile(object, ctx));
            let metrics = per_reconcile.clone();
            async move {
                let Some(m) = metrics else { return work.await };
                let guard = m.start_object(&key);
                let result = work.await;
                guard.finish(ReconcileResult::of_action(&result));
                result
            }
        };
        controller
            .run(reconciler, error_policy, ctx)
            .for_each(move |outcome| {
                if let (Some(m), Err(controller::Error::ObjectNotFound(gone))) = (&metrics, &outcome) {
                    m.object_dropped(&object_key(&gone.dyntype.kind, gone.namespace.as_deref(), &gone.name));
                }
                std::future::ready(())
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher;
    use tokio::sync::{Semaphore, mpsc};

    use super::*;
    use crate::metrics::{BuildInfo, Metrics};

    const Q: &str = "{name=\"test.queue\",controller=\"test.queue\"";

    fn sample(metrics: &Metrics, series: &str) -> f64 {
        let text = metrics.render();
        let line = text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("no {series} in\n{text}"));
        line.rsplit_once(' ').unwrap().1.parse().unwrap()
    }
    fn depth(m: &Metrics) -> f64 {
        sample(m, &format!("workqueue_depth{Q},priority=\"0\"}}"))
    }
    fn adds(m: &Metrics) -> f64 {
        sample(m, &format!("workqueue_adds_total{Q}}}"))
    }

    fn config_map(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("default".into());
        cm
    }

    #[derive(Debug, thiserror::Error)]
    #[error("never")]
    struct Never;

    /// Waits (polling, bounded) until `done` holds: kube-runtime's tasks run on their own schedule.
    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("timed out waiting for {what}");
    }

    /// A real kube-runtime controller over a store we fill: one reconcile at a time, each held until the test
    /// lets it finish, so what waits in the queue is known at every step.
    #[tokio::test]
    async fn depth_and_adds_follow_what_kube_runtime_is_handed_and_takes() {
        let metrics = Arc::new(Metrics::new(&BuildInfo::default()));
        let queue = ControllerQueue::new(Some(metrics.reconciler("test.queue", 1)));
        let (reader, mut writer) = reflector::store::<ConfigMap>();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(config_map("a")),
            watcher::Event::InitApply(config_map("b")),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
        }
        let (main_tx, main_rx) = futures::channel::mpsc::unbounded::<Arc<ConfigMap>>();
        let (other_tx, others) = futures::channel::mpsc::unbounded::<Arc<ConfigMap>>();
        let main = queue.objects(main_rx);
        // A watched kind mapped by name to the object it names (here "ghost" is in no store).
        let mapper = queue.mapped(|o: Arc<ConfigMap>| {
            Some(ObjectRef::<ConfigMap>::new(o.metadata.name.as_deref().unwrap_or("")).within("default"))
        });
        let controller = Controller::for_shared_stream(main, reader)
            .watches_shared_stream(others, mapper)
            .with_config(controller::Config::default().concurrency(1));
        let gate = Arc::new(Semaphore::new(0));
        let (started_tx, mut started) = mpsc::unbounded_channel::<String>();
        let reconcile = move |cm: Arc<ConfigMap>, gate: Arc<Semaphore>| {
            let started_tx = started_tx.clone();
            async move {
                started_tx.send(cm.metadata.name.clone().unwrap_or_default()).unwrap();
                gate.acquire().await.unwrap().forget();
                Ok::<_, Never>(Action::await_change())
            }
        };
        let run =
            tokio::spawn(queue.run(controller, reconcile, |_, _: &Never, _| Action::await_change(), gate.clone()));

        assert_eq!((depth(&metrics), adds(&metrics)), (0.0, 0.0), "nothing queued yet");
        // "a" twice before it runs (one wait), "b" once.
        main_tx.unbounded_send(Arc::new(config_map("a"))).unwrap();
        main_tx.unbounded_send(Arc::new(config_map("a"))).unwrap();
        main_tx.unbounded_send(Arc::new(config_map("b"))).unwrap();
        let first = started.recv().await.unwrap();
        until("both objects queued", || adds(&metrics) == 2.0).await;
        assert_eq!(depth(&metrics), 1.0, "{first} runs, the other waits");
        assert_eq!(sample(&metrics, "controller_runtime_active_workers{controller=\"test.queue\"}"), 1.0);

        gate.add_permits(1);
        let second = started.recv().await.unwrap();
        assert_ne!(first, second);
        until("the second taken", || depth(&metrics) == 0.0).await;
        assert_eq!(adds(&metrics), 2.0);

        // A mapped change queues its object; one naming an object not in the store is dropped by kube-runtime
        // (before or after "a" runs: one at a time).
        other_tx.unbounded_send(Arc::new(config_map("ghost"))).unwrap();
        other_tx.unbounded_send(Arc::new(config_map("a"))).unwrap();
        gate.add_permits(1);
        assert_eq!(started.recv().await.unwrap(), "a");
        gate.add_permits(1);
        until("three reconciles done and the ghost dropped", || {
            let done =
                sample(&metrics, "controller_runtime_reconcile_total{controller=\"test.queue\",result=\"success\"}");
            done == 3.0 && depth(&metrics) == 0.0
        })
        .await;
        assert_eq!(adds(&metrics), 4.0, "a, b, ghost, a again");
        assert_eq!(sample(&metrics, &format!("workqueue_queue_duration_seconds_count{Q}}}")), 4.0, "each taken once");
        assert_eq!(
            sample(&metrics, &format!("workqueue_work_duration_seconds_count{Q}}}")),
            3.0,
            "the ghost never ran"
        );
        drop((main_tx, other_tx));
        run.abort();
    }

    #[test]
    fn owners_maps_a_child_to_its_owners_of_the_kind() {
        let metrics = Metrics::new(&BuildInfo::default());
        let queue = ControllerQueue::new(Some(metrics.reconciler("test.queue", 0)));
        let owners = queue.owners::<ConfigMap, k8s_openapi::api::core::v1::Node>();
        let mut child = config_map("child");
        let owner = |kind: &str, name: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            ..Default::default()
        };
        child.metadata.owner_references = Some(vec![owner("Node", "n1"), owner("Pod", "p1")]);
        let refs = owners(Arc::new(child));
        assert_eq!(refs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["n1"]);
        assert_eq!((depth(&metrics), adds(&metrics)), (1.0, 1.0));
        // Without series, only the mapping.
        let plain = ControllerQueue::default().owners::<ConfigMap, k8s_openapi::api::core::v1::Node>();
        assert_eq!(plain(Arc::new(config_map("x"))).len(), 0);
    }
}
