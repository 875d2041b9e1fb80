//! End to end on a real control plane (`karpenter_testing::realplane`: etcd, kube-apiserver, kube-scheduler and
//! kube-controller-manager v1.32.6): the controller manager runs in this process with the kwok provider over a
//! TLS client, on the wall clock; the real kube-scheduler binds the pods, the real ReplicaSet controller keeps
//! the Deployments' replicas, and the kubelet stand-in runs as a process of its own (this binary's
//! `kwok-kubelet` subcommand). One plane, one test: the scenarios run one after another, each deleting what it
//! created. `REAL_PLANE_SCENARIOS=provisioning,drift` runs a subset (by name, see `SCENARIOS`).
//!
//! Skipped (with the reason on stderr) where the plane is not installed; a failure under `CI=true`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::{KWOKNodeClass, NodeClaim, NodePool};
use karpenter_cloudprovider::{
    Clock, CloudProvider, InterruptionAction, InterruptionError, InterruptionEvent, InterruptionKind,
    InterruptionSource, SystemClock,
};
use karpenter_kwok::{KwokCloudProvider, KwokOptions};
use karpenter_operator::CoreSettings;
use karpenter_operator::disruption::DisruptionSettings;
use karpenter_operator::manager::{Manager, ManagerError};
use karpenter_operator::node_classes::KubeNodeClasses;
use karpenter_testing::realplane::{PlaneOptions, RealPlane};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";
/// Polling period of every wait.
const POLL: Duration = Duration::from_millis(300);

type BoxFut<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;
type Scenario = for<'a> fn(&'a Env) -> BoxFut<'a>;

/// The scenarios, in order.
const SCENARIOS: &[(&str, Scenario)] = &[
    ("provisioning", |e| Box::pin(provisioning(e))),
    ("nodeclaim-deletion", |e| Box::pin(nodeclaim_deletion(e))),
    ("node-deletion", |e| Box::pin(node_deletion(e))),
    ("limits", |e| Box::pin(limits(e))),
    ("drift-and-budgets", |e| Box::pin(drift_and_budgets(e))),
    ("do-not-disrupt", |e| Box::pin(do_not_disrupt(e))),
    ("expiration", |e| Box::pin(expiration(e))),
    ("consolidation", |e| Box::pin(consolidation(e))),
    ("pdb-blocked-drain", |e| Box::pin(pdb_blocked_drain(e))),
    ("interruption", |e| Box::pin(interruption(e))),
    ("restart-mid-launch", |e| Box::pin(restart_mid_launch(e))),
    ("leader-failover", |e| Box::pin(leader_failover(e))),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_plane_scenarios() {
    let started = Instant::now();
    let options =
        PlaneOptions { controller_manager_args: Some("--node-monitor-period=1s".into()), ..PlaneOptions::default() };
    let Some(plane) = tokio::task::block_in_place(|| karpenter_testing::realplane::require_with(options)) else {
        return;
    };
    let selected: Option<BTreeSet<String>> = std::env::var("REAL_PLANE_SCENARIOS")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.split(',').map(|x| x.trim().to_string()).collect());
    let env = Env::new(plane).await;
    eprintln!("real plane: set up in {:.1}s", started.elapsed().as_secs_f64());
    for (name, scenario) in SCENARIOS {
        if selected.as_ref().is_some_and(|s| !s.contains(*name)) {
            continue;
        }
        let t = Instant::now();
        scenario(&env).await;
        env.cleanup(name).await;
        eprintln!("real plane: {name} passed in {:.1}s", t.elapsed().as_secs_f64());
    }
    env.stop_main().await;
    drop(env);
    eprintln!("real plane: all scenarios in {:.1}s", started.elapsed().as_secs_f64());
}

// ------------------------------------------------------------------------------------------------ harness

#[derive(Parser)]
struct SettingsCli {
    #[command(flatten)]
    core: CoreSettings,
}

/// The controller's settings for these tests: short batches, servers on ephemeral ports.
fn settings(leader_election: bool) -> CoreSettings {
    let mut args = vec![
        "karpenter-controller",
        "--metrics-port=0",
        "--health-probe-port=0",
        "--batch-idle-duration=1s",
        "--batch-max-duration=3s",
    ];
    if !leader_election {
        args.push("--disable-leader-election");
    }
    SettingsCli::try_parse_from(args).expect("settings parse").core
}

/// Disruption with a short poll and validation wait, so consolidation and drift act within seconds.
fn disruption_settings() -> DisruptionSettings {
    DisruptionSettings {
        poll_interval: Duration::from_secs(1),
        validation_delay: Duration::from_secs(2),
        ..DisruptionSettings::default()
    }
}

/// An interruption queue the test pushes to (the kwok provider has none of its own).
#[derive(Debug, Clone, Default)]
struct Queue {
    events: Arc<Mutex<VecDeque<InterruptionEvent>>>,
    acked: Arc<Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl InterruptionSource for Queue {
    async fn next_batch(&self) -> Result<Vec<InterruptionEvent>, InterruptionError> {
        Ok(self.events.lock().map(|mut q| q.drain(..).collect()).unwrap_or_default())
    }

    async fn acknowledge(&self, events: &[InterruptionEvent]) -> Result<(), InterruptionError> {
        if let Ok(mut acked) = self.acked.lock() {
            acked.extend(events.iter().map(|e| e.ack_id.clone()));
        }
        Ok(())
    }
}

struct Running {
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ManagerError>>,
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(60), self.task).await.expect("manager stops");
        result.expect("manager task").expect("manager returns Ok on shutdown");
    }
}

/// The kubelet stand-in process; SIGTERM on drop.
struct KubeletProcess(Child);

impl Drop for KubeletProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
        for _ in 0..50 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Env {
    client: Client,
    kwok: KwokCloudProvider,
    node_classes: KubeNodeClasses,
    queue: Queue,
    main: Mutex<Option<Running>>,
    background: CancellationToken,
    kubelet: Mutex<Option<KubeletProcess>>,
    kubelet_log: PathBuf,
    // Last: the plane stops after everything above is dropped.
    _plane: RealPlane,
}

impl Env {
    async fn new(plane: RealPlane) -> Self {
        let client = plane.client().await.expect("client");
        install_crds(&client).await;
        let classes: Api<KWOKNodeClass> = Api::all(client.clone());
        let class = karpenter_testing::kwok_node_class(karpenter_testing::KWOKNodeClassOptions::default());
        let mut class = serde_json::to_value(&class).expect("class json");
        if let Some(meta) = class.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| k == "name");
        }
        let class: KWOKNodeClass = serde_json::from_value(class).expect("class");
        classes.create(&PostParams::default(), &class).await.expect("KWOKNodeClass");
        let background = CancellationToken::new();
        let node_classes = KubeNodeClasses::new();
        node_classes.start::<KWOKNodeClass>(client.clone(), background.clone()).await.expect("node classes");
        let kwok = KwokCloudProvider::new(
            client.clone(),
            KwokOptions { node_classes: Some(Arc::new(node_classes.clone())), ..KwokOptions::default() },
        );
        // The kubelet stand-in: this binary's `kwok-kubelet`, a process of its own.
        let kubelet_log = plane.state_dir().with_extension("kubelet.log");
        let log = std::fs::File::create(&kubelet_log).expect("kubelet log");
        let child = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
            .args(["kwok-kubelet", "--interval", "500ms"])
            .env("KUBECONFIG", plane.kubeconfig())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting karpenter-controller kwok-kubelet");
        let env = Self {
            client,
            kwok,
            node_classes,
            queue: Queue::default(),
            main: Mutex::new(None),
            background,
            kubelet: Mutex::new(Some(KubeletProcess(child))),
            kubelet_log,
            _plane: plane,
        };
        let main = env.start_manager("main", false, true);
        *env.main.lock().expect("main") = Some(main);
        env
    }

    /// A manager over the plane, started.
    fn start_manager(&self, identity: &str, leader_election: bool, interruption: bool) -> Running {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let cloud: Arc<dyn CloudProvider> = Arc::new(self.kwok.clone());
        let mut manager = Manager::new(
            settings(leader_election),
            self.client.clone(),
            cloud,
            Arc::new(self.node_classes.clone()),
            clock,
        )
        .with_bind_ip(IpAddr::V4(Ipv4Addr::LOCALHOST))
        .with_identity(identity)
        .with_disruption_settings(disruption_settings());
        if interruption {
            manager = manager.with_interruption(Arc::new(self.queue.clone()));
        }
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(manager.run(shutdown.clone()));
        Running { shutdown, task }
    }

    async fn stop_main(&self) {
        let main = self.main.lock().expect("main").take();
        if let Some(main) = main {
            main.stop().await;
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }
    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), NS)
    }
    fn pdbs(&self) -> Api<PodDisruptionBudget> {
        Api::namespaced(self.client.clone(), NS)
    }
    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }
    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }
    fn pools(&self) -> Api<NodePool> {
        Api::all(self.client.clone())
    }

    async fn list_claims(&self) -> Vec<NodeClaim> {
        self.claims().list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default()
    }
    async fn list_nodes(&self) -> Vec<Node> {
        self.nodes().list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default()
    }
    async fn list_pods(&self, selector: &str) -> Vec<Pod> {
        self.pods().list(&ListParams::default().labels(selector)).await.map(|l| l.items).unwrap_or_default()
    }

    /// A NodePool `name` on the kwok class `default` with `spec` merged over a minimal template (2-CPU
    /// on-demand amd64 machines unless `spec` says otherwise; consolidation off).
    async fn pool(&self, name: &str, spec: Value) -> NodePool {
        let mut pool = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name},
            "spec": {
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                    "requirements": [
                        {"key": "karpenter.kwok.sh/instance-cpu", "operator": "In", "values": ["2"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    ],
                }},
                "disruption": {"consolidateAfter": "Never"},
            },
        });
        merge(&mut pool["spec"], spec);
        let pool: NodePool = serde_json::from_value(pool).expect("nodepool json");
        self.pools().create(&PostParams::default(), &pool).await.expect("create nodepool")
    }

    /// A Deployment of `replicas` pods (`app=<name>`) requesting `cpu`, optionally with pod annotations.
    async fn deployment(&self, name: &str, replicas: i32, cpu: &str, annotations: Value) {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}, "annotations": annotations},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}],
                    },
                },
            },
        });
        let d: Deployment = serde_json::from_value(d).expect("deployment json");
        self.deployments().create(&PostParams::default(), &d).await.expect("create deployment");
    }

    async fn scale(&self, name: &str, replicas: i32) {
        let patch = json!({"spec": {"replicas": replicas}});
        self.deployments().patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("scale");
    }

    /// Waits until `replicas` pods of `app` run (bound, Running, not terminating); returns pod → node.
    async fn running(&self, app: &str, replicas: usize, limit: Duration) -> BTreeMap<String, String> {
        self.eventually(&format!("{replicas} pods of {app} running"), limit, || async {
            let pods = self.list_pods(&format!("app={app}")).await;
            let running: BTreeMap<String, String> = pods
                .iter()
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .map(|p| (p.name_any(), p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()))
                .collect();
            let live = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).count();
            (running.len() == replicas && live == replicas).then_some(running)
        })
        .await
    }

    /// Polls `check` every [`POLL`] until it returns `Some`, for at most `limit`; panics with a cluster summary.
    async fn eventually<T, F, Fut>(&self, what: &str, limit: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let start = Instant::now();
        loop {
            if let Some(v) = check().await {
                return v;
            }
            if start.elapsed() > limit {
                panic!("timed out after {limit:?} waiting for: {what}\n{}", self.describe().await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Checks that `check` stays true for `period` (polling); panics with a summary when it does not.
    async fn stays(&self, what: &str, period: Duration, mut check: impl AsyncFnMut() -> bool) {
        let start = Instant::now();
        while start.elapsed() < period {
            if !check().await {
                panic!("no longer true after {:?}: {what}\n{}", start.elapsed(), self.describe().await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Claims, nodes and kwok instances agree one to one.
    async fn consistent(&self) -> bool {
        let claims: BTreeSet<String> =
            self.list_claims().await.iter().filter_map(|c| c.provider_id().map(str::to_owned)).collect();
        let nodes: BTreeSet<String> = self
            .list_nodes()
            .await
            .iter()
            .filter_map(|n| n.spec.as_ref().and_then(|s| s.provider_id.clone()))
            .collect();
        let instances: BTreeSet<String> = self
            .kwok
            .list()
            .await
            .unwrap_or_default()
            .iter()
            .filter_map(|c| c.provider_id().map(str::to_owned))
            .collect();
        claims == nodes && nodes == instances
    }

    async fn describe(&self) -> String {
        let mut out = String::new();
        for c in self.list_claims().await {
            let conds: Vec<String> = c
                .status
                .as_ref()
                .map(|s| s.conditions.iter().map(|c| format!("{}={:?}({})", c.type_, c.status, c.reason)).collect())
                .unwrap_or_default();
            out += &format!(
                "nodeclaim {} deleting={} node={:?} {}\n",
                c.name_any(),
                c.metadata.deletion_timestamp.is_some(),
                c.node_name(),
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
                "node {} deleting={} taints={taints:?}\n",
                n.name_any(),
                n.metadata.deletion_timestamp.is_some()
            );
        }
        for p in self.list_pods("").await {
            out += &format!(
                "pod {} node={:?} phase={:?} deleting={}\n",
                p.name_any(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                p.status.as_ref().and_then(|s| s.phase.clone()),
                p.metadata.deletion_timestamp.is_some()
            );
        }
        let log = std::fs::read_to_string(&self.kubelet_log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        out += &format!("kubelet log tail:\n{}\n", lines[lines.len().saturating_sub(5)..].join("\n"));
        out
    }

    /// Deletes what a scenario created (Deployments, pods, PDBs, NodePools, NodeClaims) and waits until no
    /// NodeClaim and no Node is left.
    async fn cleanup(&self, scenario: &str) {
        let lp = ListParams::default();
        let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
        let _ = self.deployments().delete_collection(&DeleteParams::default(), &lp).await;
        let _ = self.pdbs().delete_collection(&DeleteParams::default(), &lp).await;
        let _ = self.pods().delete_collection(&now, &lp).await;
        for pool in self.pools().list(&lp).await.map(|l| l.items).unwrap_or_default() {
            let _ = self.pools().delete(&pool.name_any(), &DeleteParams::default()).await;
        }
        for claim in self.list_claims().await {
            let _ = self.claims().delete(&claim.name_any(), &DeleteParams::default()).await;
        }
        self.eventually(&format!("{scenario}: cleaned up"), Duration::from_secs(90), || async {
            let pods = self.list_pods("").await;
            for p in pods.iter().filter(|p| p.metadata.deletion_timestamp.is_some()) {
                let _ = self.pods().delete(&p.name_any(), &now).await;
            }
            let empty = self.list_claims().await.is_empty()
                && self.list_nodes().await.is_empty()
                && pods.is_empty()
                && self.pools().list(&lp).await.is_ok_and(|l| l.items.is_empty());
            empty.then_some(())
        })
        .await;
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.background.cancel();
        drop(self.kubelet.lock().ok().and_then(|mut k| k.take()));
    }
}

/// JSON merge (objects recursively, everything else replaced).
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

/// Installs the kwok CRDs (`karpenter-controller crds --provider kwok`) and waits until they are Established.
async fn install_crds(client: &Client) {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .args(["crds", "--provider", "kwok"])
        .output()
        .expect("karpenter-controller crds");
    assert!(out.status.success(), "crds: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for doc in text.split("\n---").map(|d| d.trim().trim_start_matches("---").trim()).filter(|d| !d.is_empty()) {
        let crd: CustomResourceDefinition = serde_saphyr::from_str(doc).expect("CRD yaml");
        names.push(crd.name_any());
        api.create(&PostParams::default(), &crd).await.expect("create CRD");
    }
    assert_eq!(names.len(), 3, "nodepools, nodeclaims, kwoknodeclasses: {names:?}");
    let start = Instant::now();
    for name in &names {
        loop {
            let crd = api.get(name).await.expect("CRD");
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
            if established {
                break;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "CRD {name} not Established");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn claim_names(claims: &[NodeClaim]) -> BTreeSet<String> {
    claims.iter().map(ResourceExt::name_any).collect()
}

fn condition_true(claim: &NodeClaim, type_: &str) -> bool {
    claim.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| c.type_ == type_ && c.status == karpenter_api::condition::ConditionStatus::True)
    })
}

// ------------------------------------------------------------------------------------------------ scenarios

/// Pending pods → NodeClaims → Nodes (registered, initialized, Ready) → pods Running, bound by kube-scheduler.
async fn provisioning(env: &Env) {
    env.pool("default", json!({})).await;
    env.deployment("web", 3, "500m", json!({})).await;
    let pods = env.running("web", 3, Duration::from_secs(60)).await;
    let claims = env.list_claims().await;
    assert!(!claims.is_empty());
    for claim in &claims {
        assert!(condition_true(claim, "Launched") && condition_true(claim, "Registered"), "{}", env.describe().await);
        assert!(condition_true(claim, "Initialized"), "{}", env.describe().await);
    }
    let used: BTreeSet<&String> = pods.values().collect();
    let nodes: BTreeSet<String> = claims.iter().filter_map(|c| c.node_name().map(str::to_owned)).collect();
    assert!(used.iter().all(|n| nodes.contains(*n)), "pods on karpenter nodes: {pods:?} {nodes:?}");
    for node in env.list_nodes().await {
        let labels = node.labels();
        assert_eq!(labels.get("karpenter.sh/nodepool").map(String::as_str), Some("default"));
        assert_eq!(labels.get("karpenter.sh/initialized").map(String::as_str), Some("true"));
    }
    assert!(env.consistent().await);
}

/// Deleting a NodeClaim deletes its Node and instance (finalizers), and its pods find a new node.
async fn nodeclaim_deletion(env: &Env) {
    env.pool("default", json!({})).await;
    env.deployment("web", 2, "500m", json!({})).await;
    env.running("web", 2, Duration::from_secs(60)).await;
    let victim = env.list_claims().await.into_iter().next().expect("a claim");
    let node = victim.node_name().expect("registered").to_string();
    env.claims().delete(&victim.name_any(), &DeleteParams::default()).await.expect("delete claim");
    env.eventually("claim, node and instance gone", Duration::from_secs(60), || async {
        let claim_gone = env.claims().get_opt(&victim.name_any()).await.ok()?.is_none();
        let node_gone = env.nodes().get_opt(&node).await.ok()?.is_none();
        (claim_gone && node_gone).then_some(())
    })
    .await;
    let pods = env.running("web", 2, Duration::from_secs(60)).await;
    assert!(pods.values().all(|n| n != &node), "{pods:?}");
    env.eventually("claims, nodes and instances agree", Duration::from_secs(30), || async {
        env.consistent().await.then_some(())
    })
    .await;
}

/// Deleting a Node (its termination finalizer) deletes its NodeClaim, and the pods move.
async fn node_deletion(env: &Env) {
    env.pool("default", json!({})).await;
    env.deployment("web", 2, "500m", json!({})).await;
    env.running("web", 2, Duration::from_secs(60)).await;
    let victim = env.list_claims().await.into_iter().next().expect("a claim");
    let node = victim.node_name().expect("registered").to_string();
    let n = env.nodes().get(&node).await.expect("node");
    assert!(n.finalizers().iter().any(|f| f == "karpenter.sh/termination"), "{:?}", n.finalizers());
    env.nodes().delete(&node, &DeleteParams::default()).await.expect("delete node");
    env.eventually("node and its claim gone", Duration::from_secs(60), || async {
        let claim_gone = env.claims().get_opt(&victim.name_any()).await.ok()?.is_none();
        let node_gone = env.nodes().get_opt(&node).await.ok()?.is_none();
        (claim_gone && node_gone).then_some(())
    })
    .await;
    let pods = env.running("web", 2, Duration::from_secs(60)).await;
    assert!(pods.values().all(|n| n != &node), "{pods:?}");
}

/// A NodePool's cpu limit stops provisioning: two 2-CPU nodes at most, the rest of the pods stay pending.
async fn limits(env: &Env) {
    env.pool("default", json!({"limits": {"cpu": "4"}})).await;
    env.deployment("web", 6, "900m", json!({})).await;
    env.eventually("two claims", Duration::from_secs(60), || async {
        (env.list_claims().await.len() == 2).then_some(())
    })
    .await;
    env.eventually("four pods running, two pending", Duration::from_secs(60), || async {
        let pods = env.list_pods("app=web").await;
        let running =
            pods.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).count();
        (running == 4).then_some(())
    })
    .await;
    env.stays("no more than two claims (cpu limit 4)", Duration::from_secs(6), async || {
        env.list_claims().await.len() == 2
    })
    .await;
    let pending = env
        .list_pods("app=web")
        .await
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
        .count();
    assert_eq!(pending, 2, "{}", env.describe().await);
}

/// A template change drifts the nodes; a budget of `nodes: "0"` holds them, a budget of 100% lets them go.
async fn drift_and_budgets(env: &Env) {
    env.pool("default", json!({"disruption": {"budgets": [{"nodes": "0"}]}})).await;
    env.deployment("web", 2, "500m", json!({})).await;
    env.running("web", 2, Duration::from_secs(60)).await;
    let original = claim_names(&env.list_claims().await);
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}});
    env.pools().patch("default", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch pool");
    env.eventually("claims Drifted", Duration::from_secs(30), || async {
        env.list_claims().await.iter().all(|c| condition_true(c, "Drifted")).then_some(())
    })
    .await;
    env.stays("budget 0: the drifted claims stay", Duration::from_secs(5), async || {
        claim_names(&env.list_claims().await) == original
    })
    .await;
    let patch = json!({"spec": {"disruption": {"budgets": [{"nodes": "100%"}]}}});
    env.pools().patch("default", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch budget");
    env.eventually("drifted nodes replaced", Duration::from_secs(120), || async {
        let claims = env.list_claims().await;
        let replaced = claim_names(&claims).is_disjoint(&original)
            && !claims.is_empty()
            && claims.iter().all(|c| c.labels().get("team").map(String::as_str) == Some("blue"));
        (replaced && env.consistent().await).then_some(())
    })
    .await;
    let pods = env.running("web", 2, Duration::from_secs(60)).await;
    for node in pods.values() {
        let n = env.nodes().get(node).await.expect("node");
        assert_eq!(n.labels().get("team").map(String::as_str), Some("blue"), "{node} is a replacement");
    }
}

/// A pod annotated `karpenter.sh/do-not-disrupt` keeps its drifted node.
async fn do_not_disrupt(env: &Env) {
    env.pool("default", json!({})).await;
    env.deployment("keep", 1, "500m", json!({"karpenter.sh/do-not-disrupt": "true"})).await;
    env.running("keep", 1, Duration::from_secs(60)).await;
    let original = claim_names(&env.list_claims().await);
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}});
    env.pools().patch("default", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch pool");
    env.eventually("claim Drifted", Duration::from_secs(30), || async {
        env.list_claims().await.iter().all(|c| condition_true(c, "Drifted")).then_some(())
    })
    .await;
    env.stays("do-not-disrupt: the drifted claim stays", Duration::from_secs(6), async || {
        let claims = env.list_claims().await;
        claim_names(&claims) == original && claims.iter().all(|c| c.metadata.deletion_timestamp.is_none())
    })
    .await;
}

/// `expireAfter` deletes the claim once it is old enough; its pods get a new node.
async fn expiration(env: &Env) {
    env.pool("default", json!({"template": {"spec": {"expireAfter": "25s"}}})).await;
    env.deployment("web", 1, "500m", json!({})).await;
    env.running("web", 1, Duration::from_secs(60)).await;
    let original = claim_names(&env.list_claims().await);
    env.eventually("the expired claim replaced", Duration::from_secs(90), || async {
        let claims = env.list_claims().await;
        (!claims.is_empty() && claim_names(&claims).is_disjoint(&original)).then_some(())
    })
    .await;
    env.running("web", 1, Duration::from_secs(60)).await;
}

/// Scaling a Deployment down consolidates its nodes.
async fn consolidation(env: &Env) {
    env.pool(
        "default",
        json!({"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}}),
    )
    .await;
    env.deployment("web", 4, "900m", json!({})).await;
    env.running("web", 4, Duration::from_secs(60)).await;
    let before = env.list_claims().await.len();
    assert!(before >= 2, "four 900m pods need two 2-CPU nodes, got {before}");
    env.scale("web", 1).await;
    env.eventually("consolidated to one node", Duration::from_secs(120), || async {
        let claims = env.list_claims().await;
        (claims.len() == 1 && env.list_nodes().await.len() == 1 && env.consistent().await).then_some(())
    })
    .await;
    env.running("web", 1, Duration::from_secs(60)).await;
}

/// A PDB that allows no disruption holds the drain of a deleted claim (the Eviction API answers 429) until it is
/// relaxed.
async fn pdb_blocked_drain(env: &Env) {
    env.pool("default", json!({})).await;
    env.deployment("guarded", 1, "500m", json!({})).await;
    let pods = env.running("guarded", 1, Duration::from_secs(60)).await;
    let node = pods.values().next().expect("a node").clone();
    let pdb = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "guarded", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    });
    let pdb: PodDisruptionBudget = serde_json::from_value(pdb).expect("pdb");
    env.pdbs().create(&PostParams::default(), &pdb).await.expect("pdb");
    env.eventually("PDB status computed", Duration::from_secs(30), || async {
        let p = env.pdbs().get("guarded").await.ok()?;
        (p.status.as_ref().map(|s| s.current_healthy) == Some(1)).then_some(())
    })
    .await;
    let claim = env.list_claims().await.into_iter().find(|c| c.node_name() == Some(node.as_str())).expect("claim");
    env.claims().delete(&claim.name_any(), &DeleteParams::default()).await.expect("delete claim");
    env.stays("the PDB holds the pod on its draining node", Duration::from_secs(6), async || {
        let on_node = env.list_pods("app=guarded").await.iter().any(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
                && p.metadata.deletion_timestamp.is_none()
        });
        let node_there = env.nodes().get_opt(&node).await.ok().flatten().is_some();
        on_node && node_there
    })
    .await;
    let patch = json!({"spec": {"minAvailable": 0}});
    env.pdbs().patch("guarded", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("relax pdb");
    env.eventually("the drained node gone", Duration::from_secs(60), || async {
        env.nodes().get_opt(&node).await.ok()?.is_none().then_some(())
    })
    .await;
    let pods = env.running("guarded", 1, Duration::from_secs(60)).await;
    assert!(pods.values().all(|n| n != &node), "{pods:?}");
}

/// An interruption message for an instance: its claim and node are drained and deleted, the pods move.
async fn interruption(env: &Env) {
    env.pool("default", json!({})).await;
    env.deployment("web", 2, "500m", json!({})).await;
    env.running("web", 2, Duration::from_secs(60)).await;
    let victim = env.list_claims().await.into_iter().next().expect("a claim");
    let node = victim.node_name().expect("registered").to_string();
    let provider_id = victim.provider_id().expect("launched").to_string();
    let ack_id = "real-plane-1".to_string();
    if let Ok(mut q) = env.queue.events.lock() {
        q.push_back(InterruptionEvent {
            ack_id: ack_id.clone(),
            provider_id,
            kind: InterruptionKind::SpotInterrupted,
            action: InterruptionAction::Delete,
        });
    }
    env.eventually("the interrupted claim and node gone", Duration::from_secs(60), || async {
        let claim_gone = env.claims().get_opt(&victim.name_any()).await.ok()?.is_none();
        let node_gone = env.nodes().get_opt(&node).await.ok()?.is_none();
        (claim_gone && node_gone).then_some(())
    })
    .await;
    let pods = env.running("web", 2, Duration::from_secs(60)).await;
    assert!(pods.values().all(|n| n != &node), "{pods:?}");
    assert!(env.queue.acked.lock().is_ok_and(|a| a.contains(&ack_id)), "the message was acknowledged");
}

/// The manager stops right after it created a NodeClaim; a new one finishes the job without a second claim or
/// a leaked instance.
async fn restart_mid_launch(env: &Env) {
    env.stop_main().await;
    env.pool("default", json!({})).await;
    let first = env.start_manager("first", false, false);
    env.deployment("web", 1, "500m", json!({})).await;
    let created = env
        .eventually("a NodeClaim", Duration::from_secs(30), || async {
            let claims = env.list_claims().await;
            (!claims.is_empty()).then_some(claims)
        })
        .await;
    first.stop().await;
    let before: BTreeSet<(String, String)> =
        created.iter().map(|c| (c.name_any(), c.uid().unwrap_or_default())).collect();
    let second = env.start_manager("second", false, true);
    env.running("web", 1, Duration::from_secs(60)).await;
    // A few seconds for anything duplicated or leaked to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let claims = env.list_claims().await;
    let after: BTreeSet<(String, String)> =
        claims.iter().map(|c| (c.name_any(), c.uid().unwrap_or_default())).collect();
    assert_eq!(before, after, "the first manager's claim was kept and nothing was added");
    assert!(env.consistent().await, "{}", env.describe().await);
    *env.main.lock().expect("main") = Some(second);
}

/// Two managers with leader election: only the leader provisions; when it stops, the other takes the Lease and
/// provisions.
async fn leader_failover(env: &Env) {
    env.stop_main().await;
    env.pool("default", json!({})).await;
    let a = env.start_manager("replica-a", true, false);
    let b = env.start_manager("replica-b", true, false);
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "kube-system");
    let holder = env
        .eventually("a leader", Duration::from_secs(30), || async {
            let lease = leases.get_opt("karpenter-leader-election").await.ok()??;
            lease.spec.and_then(|s| s.holder_identity)
        })
        .await;
    env.deployment("web", 1, "500m", json!({})).await;
    env.running("web", 1, Duration::from_secs(60)).await;
    let (leader, follower, follower_name) =
        if holder.starts_with("replica-a") { (a, b, "replica-b") } else { (b, a, "replica-a") };
    leader.stop().await;
    env.eventually("the follower takes the Lease", Duration::from_secs(45), || async {
        let lease = leases.get_opt("karpenter-leader-election").await.ok()??;
        lease.spec.and_then(|s| s.holder_identity).filter(|h| h.starts_with(follower_name))
    })
    .await;
    env.scale("web", 4).await;
    env.running("web", 4, Duration::from_secs(60)).await;
    assert!(env.consistent().await);
    *env.main.lock().expect("main") = Some(follower);
}
