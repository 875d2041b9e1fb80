//! The end-to-end harness: the in-process API server, the kwok provider, the scheduler and kubelet stand-ins, and
//! the whole controller manager, all on tokio's paused clock (`#[tokio::test(start_paused = true)]`): every
//! clock in the cluster (the server's timestamps, the controllers', the kubelet's) follows tokio's time, which
//! jumps ahead whenever everything waits, so minutes of cluster time take well under a second of wall time.

#![allow(dead_code)] // not every helper is used by the scenarios

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use clap::Parser;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_cloudprovider::{
    Clock, CloudProvider, InterruptionAction, InterruptionError, InterruptionEvent, InterruptionKind,
    InterruptionSource,
};
use karpenter_kwok::api::KWOKNodeClass;
use karpenter_kwok::kubelet::Kubelet;
use karpenter_kwok::testing::{KWOKNodeClassOptions, kwok_node_class};
use karpenter_kwok::{KwokCloudProvider, KwokOptions};
use karpenter_operator::CoreSettings;
use karpenter_operator::manager::{Manager, ManagerError, Started};
use karpenter_operator::metrics::Metrics;
use karpenter_operator::node_classes::{KubeNodeClasses, NodeClassRegistration};
use karpenter_operator::state::ClusterState;
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::standins::Scheduler;
use karpenter_testing::{NodePoolOptions, PodOptions, kwok_node_class_ref, node_pool};
use karpenter_testing::{Stopwatch, TokioClock, tokio_now};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The cluster's wall clock: it follows tokio's (paused) time from a fixed start, so the controllers' timers and
/// their notion of now move together.
fn cluster_clock() -> TokioClock {
    TokioClock::starting_at(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap())
}

#[derive(Parser)]
struct SettingsCli {
    #[command(flatten)]
    core: CoreSettings,
}

/// Core settings from flags (defaults otherwise), with the servers on ephemeral ports.
pub fn settings(extra: &[&str]) -> CoreSettings {
    let args =
        ["karpenter-controller", "--metrics-port=0", "--health-probe-port=0"].into_iter().chain(extra.iter().copied());
    SettingsCli::try_parse_from(args).expect("settings parse").core
}

/// `GET path` over HTTP/1.1: (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).await.expect("read the response");
    let code = response.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (code, body)
}

/// A cluster: API server, kwok provider, stand-ins.
pub struct Cluster {
    pub server: ApiServer,
    pub client: Client,
    pub clock: Arc<TokioClock>,
    pub kwok: KwokCloudProvider,
    pub node_classes: KubeNodeClasses,
    pub workloads: Workloads,
    background: CancellationToken,
    stand_ins: Vec<JoinHandle<()>>,
}

/// A running manager.
pub struct Running {
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Result<(), ManagerError>>,
    pub state: ClusterState,
    pub metrics: Arc<Metrics>,
}

impl Running {
    /// Cancels the manager and waits for `run` to return (it must, and cleanly).
    pub async fn stop(self) {
        self.shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(60), self.task).await.expect("manager stops on shutdown");
        result.expect("manager task").expect("manager returns Ok on shutdown");
    }
}

/// The kwok node-class kind, registered as the binary registers it (ready on sight).
pub fn kwok_registration() -> NodeClassRegistration {
    NodeClassRegistration::of::<KWOKNodeClass>().ready_on_sight()
}

impl Cluster {
    /// The server with a ready KWOKNodeClass `default`, the scheduler and kubelet stand-ins running every second.
    pub async fn new() -> Self {
        let clock = Arc::new(cluster_clock());
        let server = ApiServer::builder().clock(clock.clone()).build();
        let client = server.client();
        let classes: Api<KWOKNodeClass> = Api::all(client.clone());
        // Created without a status: the manager's kwok node-class status controller marks it Ready.
        classes.create(&PostParams::default(), &kwok_node_class(KWOKNodeClassOptions::default())).await.unwrap();
        let background = CancellationToken::new();
        let node_classes = KubeNodeClasses::new();
        node_classes.start::<KWOKNodeClass>(client.clone(), background.clone()).await.unwrap();
        let kwok = KwokCloudProvider::new(
            client.clone(),
            KwokOptions { node_classes: Some(Arc::new(node_classes.clone())), ..KwokOptions::default() },
        );
        let scheduler = Scheduler::new(client.clone());
        let kubelet = Kubelet::new(client.clone(), clock.clone());
        let workloads = Workloads::default();
        let stand_ins = vec![
            tokio::spawn(scheduler.run(Duration::from_secs(1))),
            tokio::spawn(kubelet.run(Duration::from_secs(1))),
            tokio::spawn(workloads.clone().run(client.clone(), Duration::from_secs(1))),
        ];
        Self { server, client, clock, kwok, node_classes, workloads, background, stand_ins }
    }

    /// Creates a NodePool (kwok class `default`) from `options`, without a status: the manager's NodePool
    /// controllers make it Ready (validation, node class readiness).
    pub async fn node_pool(&self, options: NodePoolOptions) -> NodePool {
        let pool = node_pool(NodePoolOptions { node_class_ref: Some(kwok_node_class_ref("default")), ..options });
        self.pools().create(&PostParams::default(), &pool).await.unwrap()
    }

    /// A manager over this cluster with `settings`, started.
    pub fn start(&self, settings: CoreSettings) -> Running {
        self.start_with(settings, |m| m)
    }

    /// A manager over this cluster for `cloud` instead of the kwok provider, started; returns it with the address
    /// its `/metrics` server listens on.
    pub async fn start_serving(&self, settings: CoreSettings, cloud: Arc<dyn CloudProvider>) -> (Running, SocketAddr) {
        let clock: Arc<dyn Clock> = self.clock.clone();
        let state = ClusterState::from_settings(&settings, clock.clone());
        let manager = Manager::new(settings, self.client.clone(), cloud, Arc::new(self.node_classes.clone()), clock)
            .with_node_class_registrations([kwok_registration()])
            .with_bind_ip(IpAddr::V4(Ipv4Addr::LOCALHOST))
            .with_state(state.clone());
        let metrics = manager.metrics();
        let shutdown = CancellationToken::new();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<Started>();
        let task = tokio::spawn(manager.run_with(shutdown.clone(), move |started| {
            let _ = started_tx.send(started);
        }));
        let started = started_rx.await.expect("the manager starts its servers");
        (Running { shutdown, task, state, metrics }, started.metrics_addr)
    }

    /// [`Cluster::start`] with extra configuration of the manager.
    pub fn start_with(&self, settings: CoreSettings, configure: impl FnOnce(Manager) -> Manager) -> Running {
        let clock: Arc<dyn Clock> = self.clock.clone();
        let state = ClusterState::from_settings(&settings, clock.clone());
        let cloud: Arc<dyn CloudProvider> = Arc::new(self.kwok.clone());
        let manager = Manager::new(settings, self.client.clone(), cloud, Arc::new(self.node_classes.clone()), clock)
            .with_node_class_registrations([kwok_registration()])
            .with_bind_ip(IpAddr::V4(Ipv4Addr::LOCALHOST))
            .with_state(state.clone());
        let manager = configure(manager);
        let metrics = manager.metrics();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(manager.run(shutdown.clone()));
        Running { shutdown, task, state, metrics }
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }

    pub fn pools(&self) -> Api<NodePool> {
        Api::all(self.client.clone())
    }

    /// Creates `n` pending pods named `<prefix>-<i>` with the given requests and labels.
    pub async fn pending_pods(&self, prefix: &str, n: usize, cpu: &str, labels: &[(&str, &str)]) -> Vec<Pod> {
        let mut out = Vec::new();
        for i in 0..n {
            let pod = karpenter_testing::pod(PodOptions {
                name: Some(format!("{prefix}-{i}")),
                requests: [("cpu", cpu), ("memory", "256Mi")].into(),
                labels: labels.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect(),
                ..Default::default()
            });
            out.push(self.pods().create(&PostParams::default(), &pod).await.unwrap());
        }
        out
    }

    pub async fn list_pods(&self) -> Vec<Pod> {
        self.pods().list(&ListParams::default()).await.unwrap().items
    }

    pub async fn list_nodes(&self) -> Vec<Node> {
        self.nodes().list(&ListParams::default()).await.unwrap().items
    }

    pub async fn list_claims(&self) -> Vec<NodeClaim> {
        self.claims().list(&ListParams::default()).await.unwrap().items
    }

    /// The kwok instances (Nodes the provider reports).
    pub async fn instances(&self) -> Vec<NodeClaim> {
        self.kwok.list().await.unwrap()
    }

    /// Core events with `reason`, as `(involved kind/name, message)`.
    pub async fn events(&self, reason: &str) -> Vec<(String, String)> {
        let api: Api<CoreEvent> = Api::all(self.client.clone());
        let mut out: Vec<(String, String)> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| {
                let o = &e.involved_object;
                (
                    format!("{}/{}", o.kind.as_deref().unwrap_or(""), o.name.as_deref().unwrap_or("")),
                    e.message.unwrap_or_default(),
                )
            })
            .collect();
        out.sort();
        out
    }

    /// Polls `check` every 500 ms of cluster time until it returns `Some`, for at most `limit` of cluster time.
    pub async fn eventually<T, F, Fut>(&self, what: &str, limit: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let start = tokio_now();
        loop {
            if let Some(v) = check().await {
                return v;
            }
            if tokio_now() - start > limit {
                panic!("timed out after {limit:?} of cluster time waiting for: {what}\n{}", self.describe().await);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// A summary of the cluster for failure messages.
    pub async fn describe(&self) -> String {
        let mut out = String::new();
        for c in self.list_claims().await {
            let conds: Vec<String> = c
                .status
                .as_ref()
                .map(|s| s.conditions.iter().map(|c| format!("{}={:?}({})", c.type_, c.status, c.reason)).collect())
                .unwrap_or_default();
            out += &format!(
                "nodeclaim {} deleting={} provider_id={:?} {}\n",
                c.name_any(),
                c.metadata.deletion_timestamp.is_some(),
                c.provider_id(),
                conds.join(" ")
            );
        }
        for n in self.list_nodes().await {
            let taints: Vec<String> = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .map(|ts| ts.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect())
                .unwrap_or_default();
            out += &format!(
                "node {} deleting={} taints={:?} labels.initialized={:?}\n",
                n.name_any(),
                n.metadata.deletion_timestamp.is_some(),
                taints,
                n.labels().get("karpenter.sh/initialized")
            );
        }
        for p in self.list_pods().await {
            out += &format!(
                "pod {} node={:?} phase={:?} deleting={}\n",
                p.name_any(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                p.status.as_ref().and_then(|s| s.phase.clone()),
                p.metadata.deletion_timestamp.is_some()
            );
        }
        out
    }

    /// Waits until every pod is bound and Running; returns pod name → node name.
    pub async fn all_pods_running(&self, limit: Duration) -> BTreeMap<String, String> {
        self.eventually("every pod bound and Running", limit, || async {
            let pods = self.list_pods().await;
            let running = pods.iter().all(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            });
            (running && !pods.is_empty()).then(|| {
                pods.iter()
                    .map(|p| (p.name_any(), p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()))
                    .collect()
            })
        })
        .await
    }

    /// Stops the stand-ins and the node-class watcher.
    pub fn stop_background(&self) {
        self.background.cancel();
        for task in &self.stand_ins {
            task.abort();
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_background();
    }
}

/// A ReplicaSet stand-in: keeps `replicas` live pods (label `workload=<name>`, owned by a ReplicaSet `<name>`)
/// for each workload, creating `<name>-<n>` pods when some are missing (evicted, deleted) and deleting the
/// newest when there are too many (scale down).
#[derive(Clone, Default)]
pub struct Workloads {
    desired: Arc<Mutex<BTreeMap<String, Workload>>>,
}

#[derive(Clone, Debug)]
struct Workload {
    replicas: usize,
    cpu: String,
    next: usize,
}

fn pod_live(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

impl Workloads {
    /// Sets the replicas of workload `name` (created with pods requesting `cpu`).
    pub fn scale(&self, name: &str, replicas: usize, cpu: &str) {
        let mut desired = self.desired.lock().unwrap();
        let w = desired.entry(name.to_string()).or_insert(Workload { replicas, cpu: cpu.to_string(), next: 0 });
        w.replicas = replicas;
    }

    async fn step(&self, client: &Client) -> Result<(), kube::Error> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let snapshot: Vec<(String, Workload)> =
            self.desired.lock().unwrap().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (name, w) in snapshot {
            let mut live: Vec<Pod> = pods
                .list(&ListParams::default().labels(&format!("workload={name}")))
                .await?
                .items
                .into_iter()
                .filter(pod_live)
                .collect();
            live.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
            if live.len() > w.replicas {
                for p in live.iter().skip(w.replicas) {
                    let _ = pods.delete(&p.name_any(), &Default::default()).await;
                }
            }
            for _ in live.len()..w.replicas {
                let n = {
                    let mut desired = self.desired.lock().unwrap();
                    let Some(entry) = desired.get_mut(&name) else { break };
                    entry.next += 1;
                    entry.next
                };
                let pod = karpenter_testing::pod(PodOptions {
                    name: Some(format!("{name}-{n}")),
                    requests: [("cpu", w.cpu.as_str()), ("memory", "128Mi")].into(),
                    labels: [("workload".to_string(), name.clone())].into(),
                    owner: Some(("ReplicaSet".into(), name.clone())),
                    ..Default::default()
                });
                pods.create(&PostParams::default(), &pod).await?;
            }
        }
        Ok(())
    }

    async fn run(self, client: Client, every: Duration) {
        loop {
            let _ = self.step(&client).await;
            tokio::time::sleep(every).await;
        }
    }
}

/// Live pods of workload `name`, as pod name → node name (empty when unbound).
pub async fn workload_pods(cluster: &Cluster, name: &str) -> BTreeMap<String, String> {
    cluster
        .pods()
        .list(&ListParams::default().labels(&format!("workload={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(pod_live)
        .map(|p| (p.name_any(), p.spec.and_then(|s| s.node_name).unwrap_or_default()))
        .collect()
}

/// An interruption queue for the kwok provider's instances (the AWS provider's is SQS): events are pushed by
/// the test, delivered in order, and acknowledged ones recorded.
#[derive(Debug, Clone, Default)]
pub struct InterruptionQueue {
    queue: Arc<Mutex<VecDeque<InterruptionEvent>>>,
    acked: Arc<Mutex<Vec<String>>>,
}

impl InterruptionQueue {
    pub fn push(&self, provider_id: &str, kind: InterruptionKind, action: InterruptionAction) {
        let mut q = self.queue.lock().unwrap();
        let ack_id = format!("m-{}", q.len() + self.acked.lock().unwrap().len());
        q.push_back(InterruptionEvent { ack_id, provider_id: provider_id.to_string(), kind, action });
    }

    pub fn acknowledged(&self) -> Vec<String> {
        self.acked.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl InterruptionSource for InterruptionQueue {
    async fn next_batch(&self) -> Result<Vec<InterruptionEvent>, InterruptionError> {
        Ok(self.queue.lock().unwrap().drain(..).collect())
    }

    async fn acknowledge(&self, events: &[InterruptionEvent]) -> Result<(), InterruptionError> {
        self.acked.lock().unwrap().extend(events.iter().map(|e| e.ack_id.clone()));
        Ok(())
    }
}

/// Whether the NodeClaim has condition `type_` True.
pub fn is_true(claim: &NodeClaim, type_: &str) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| c.type_ == type_ && c.status == karpenter_api::condition::ConditionStatus::True)
    })
}

/// Real time a test took (not the cluster time it simulated), printed so `--nocapture` runs show the figures.
pub struct Timer(Stopwatch, &'static str);

impl Timer {
    pub fn start(name: &'static str) -> Self {
        Self(Stopwatch::start(), name)
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        eprintln!("e2e {}: {:.2} s wall", self.1, self.0.elapsed().as_secs_f64());
    }
}
