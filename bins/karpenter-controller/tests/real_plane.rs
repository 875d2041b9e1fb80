//! End to end on a real control plane (`karpenter_testing::realplane`: etcd, kube-apiserver, kube-scheduler and
//! kube-controller-manager v1.32.6): the controller manager runs in this process with the kwok provider over a
//! TLS client, on the wall clock; the real kube-scheduler binds the pods, the real ReplicaSet controller keeps
//! the Deployments' replicas, and the kubelet stand-in runs as a process of its own (this binary's
//! `kwok-kubelet` subcommand). One plane, one test: the scenarios run one after another, each deleting what it
//! created. `REAL_PLANE_SCENARIOS=provisioning,drift` runs a subset (by name, see `SCENARIOS`).
//!
//! The managers talk to the plane through the controller's own client stack (`karpenter_operator::client`: rate
//! limit, retries of 429/503/504, evictions sent once), as the binary does. Their logs (the JSON lines of
//! `karpenter_operator::logging`) go to `<state dir>.controller.log` beside the plane's state dir, and the fault
//! scenarios (the last four) count the ERROR lines written while they ran.
//!
//! `chart-rbac` runs the controller as the Helm chart's service account (its rendered RBAC, applied to the plane)
//! instead of cluster-admin; it needs Helm (`tools/get-helm.sh` or `KARPENTER_HELM`).
//!
//! Skipped (with the reason on stderr) where the plane (or, for `chart-rbac`, Helm) is not installed; a failure
//! under `CI=true`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, Pod};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::condition::{ConditionStatus, Conditions};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_cloudprovider::{
    Clock, CloudProvider, InterruptionAction, InterruptionError, InterruptionEvent, InterruptionKind,
    InterruptionSource, SystemClock,
};
use karpenter_kwok::api::KWOKNodeClass;
use karpenter_kwok::{KwokCloudProvider, KwokOptions};
use karpenter_operator::CoreSettings;
use karpenter_operator::client::client_from_config;
use karpenter_operator::disruption::DisruptionSettings;
use karpenter_operator::manager::{Manager, ManagerError};
use karpenter_operator::node_classes::{KubeNodeClasses, NodeClassRegistration};
use karpenter_requirements::Quantity;
use karpenter_testing::Stopwatch;
use karpenter_testing::realplane::{PlaneError, PlaneOptions, RealPlane, Stop};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
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
    ("ec2nodeclass-crd", |e| Box::pin(ec2nodeclass_crd(e))),
    ("nodeclaim-deletion", |e| Box::pin(nodeclaim_deletion(e))),
    ("node-deletion", |e| Box::pin(node_deletion(e))),
    ("limits", |e| Box::pin(limits(e))),
    ("drift-and-budgets", |e| Box::pin(drift_and_budgets(e))),
    ("do-not-disrupt", |e| Box::pin(do_not_disrupt(e))),
    ("autoscaler-annotations", |e| Box::pin(autoscaler_annotations(e))),
    ("expiration", |e| Box::pin(expiration(e))),
    ("consolidation", |e| Box::pin(consolidation(e))),
    ("consolidation-min-savings", |e| Box::pin(consolidation_min_savings(e))),
    ("pdb-blocked-drain", |e| Box::pin(pdb_blocked_drain(e))),
    ("interruption", |e| Box::pin(interruption(e))),
    ("restart-mid-launch", |e| Box::pin(restart_mid_launch(e))),
    ("leader-failover", |e| Box::pin(leader_failover(e))),
    ("apiserver-restart", |e| Box::pin(apiserver_restart_mid_scale_out(e))),
    ("watch-gone-relist", |e| Box::pin(watch_gone_relist(e))),
    ("apf-throttling", |e| Box::pin(apf_throttling(e))),
    ("write-conflicts", |e| Box::pin(write_conflicts(e))),
    ("cluster-limits", |e| Box::pin(cluster_limits(e))),
    ("disruption-topology", |e| Box::pin(disruption_topology(e))),
    ("min-nodes", |e| Box::pin(min_nodes(e))),
    ("pod-deletion-cost", |e| Box::pin(pod_deletion_cost(e))),
    ("node-repair", |e| Box::pin(node_repair(e))),
    ("node-repair-reboot", |e| Box::pin(node_repair_reboot(e))),
    ("scheduler-config", |e| Box::pin(scheduler_config(e))),
    ("node-overlay", |e| Box::pin(node_overlay(e))),
    ("capacity-buffer", |e| Box::pin(capacity_buffer(e))),
    ("chart-rbac", |e| Box::pin(chart_rbac(e))),
    ("metrics", |e| Box::pin(metrics(e))),
];

/// ERROR lines a fault the controller should ride out quietly (an apiserver restart, a partition, throttling, write
/// conflicts) may leave in its log:
/// a handful, none per object.
const MAX_FAULT_ERRORS: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_plane_scenarios() {
    let started = Stopwatch::start();
    let options = PlaneOptions {
        controller_manager_args: Some("--node-monitor-period=1s".into()),
        // A small server concurrency (APF divides it among the priority levels by their shares): `apf-throttling`'s
        // level of one share gets one seat. Every other client here is in system:masters, which APF exempts.
        apiserver_args: Some("--max-requests-inflight=20 --max-mutating-requests-inflight=10".into()),
        ..PlaneOptions::default()
    };
    let Some(plane) = tokio::task::block_in_place(|| karpenter_testing::realplane::require_with(options)) else {
        return;
    };
    let selected: Option<BTreeSet<String>> = std::env::var("REAL_PLANE_SCENARIOS")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.split(',').map(|x| x.trim().to_string()).collect());
    let env = Env::new(plane).await;
    progress(format_args!("real plane: set up in {:.1}s", started.elapsed().as_secs_f64()));
    for (name, scenario) in SCENARIOS {
        if selected.as_ref().is_some_and(|s| !s.contains(*name)) {
            continue;
        }
        let t = Stopwatch::start();
        scenario(&env).await;
        env.cleanup(name).await;
        progress(format_args!("real plane: {name} passed in {:.1}s", t.elapsed().as_secs_f64()));
    }
    env.stop_main().await;
    drop(env);
    progress(format_args!("real plane: all scenarios in {:.1}s", started.elapsed().as_secs_f64()));
}

/// One line of timing straight to the process's stderr: libtest captures `eprintln!` of a passing test, and CI's
/// log should show where the suite's minutes go without `--nocapture`.
fn progress(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

// ------------------------------------------------------------------------------------------------ harness

#[derive(Parser)]
struct SettingsCli {
    #[command(flatten)]
    core: CoreSettings,
}

/// The controller's settings for these tests: short batches, servers on ephemeral ports.
fn settings(leader_election: bool) -> CoreSettings {
    settings_with(leader_election, &[])
}

/// [`settings`] with more controller flags (as the Helm chart's env would set them).
fn settings_with(leader_election: bool, flags: &[&str]) -> CoreSettings {
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
    args.extend_from_slice(flags);
    SettingsCli::try_parse_from(args).expect("settings parse").core
}

/// The kwok node-class kind as the binary registers it (`providers.rs`): ready on sight.
fn kwok_node_class_registration() -> NodeClassRegistration {
    NodeClassRegistration::of::<KWOKNodeClass>().ready_on_sight()
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
    /// Where its `/metrics` listens, once started.
    metrics_addr: Arc<OnceLock<SocketAddr>>,
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(60), self.task).await.expect("manager stops");
        result.expect("manager task").expect("manager returns Ok on shutdown");
    }

    /// The text of its `/metrics`.
    async fn metrics(&self) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = *self.metrics_addr.get().expect("the manager's servers started");
        let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect to /metrics");
        sock.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.expect("request /metrics");
        let mut response = String::new();
        sock.read_to_string(&mut response).await.expect("read /metrics");
        let (head, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
        assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
        body.to_string()
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
    /// The test's own client (admin, kube's default stack): objects are created and checked through it.
    client: Client,
    /// The managers' client (admin, the controller's stack: `karpenter_operator::client`).
    controller_client: Client,
    /// The kwok provider over the test's client, to list instances.
    kwok: KwokCloudProvider,
    node_classes: KubeNodeClasses,
    queue: Queue,
    main: Mutex<Option<Running>>,
    background: CancellationToken,
    kubelet: Mutex<Option<KubeletProcess>>,
    kubelet_log: PathBuf,
    /// The in-process managers' JSON log lines (every manager, the kwok provider, the node-class watch).
    controller_log: PathBuf,
    // Last: the plane stops after everything above is dropped.
    plane: RealPlane,
}

impl Env {
    async fn new(plane: RealPlane) -> Self {
        // The controller's logs, as the binary writes them; the fault scenarios read them back.
        let controller_log = plane.state_dir().with_extension("controller.log");
        let _ = std::fs::remove_file(&controller_log);
        let log_settings = SettingsCli::try_parse_from([
            "karpenter-controller",
            "--log-output-paths",
            &controller_log.to_string_lossy(),
        ])
        .expect("log settings")
        .core;
        karpenter_operator::logging::init(&log_settings.log_config(), "real-plane", Arc::new(SystemClock))
            .expect("logging");
        let client = plane.client().await.expect("client");
        install_crds(&client).await;
        let classes: Api<KWOKNodeClass> = Api::all(client.clone());
        let class = karpenter_kwok::testing::kwok_node_class(karpenter_kwok::testing::KWOKNodeClassOptions::default());
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
        let controller_client = controller_client(&plane, plane.kubeconfig(), None).await;
        let env = Self {
            client,
            controller_client,
            kwok,
            node_classes,
            queue: Queue::default(),
            main: Mutex::new(None),
            background,
            kubelet: Mutex::new(Some(KubeletProcess(child))),
            kubelet_log,
            controller_log,
            plane,
        };
        let main = env.start_manager("main", false, true);
        *env.main.lock().expect("main") = Some(main);
        env
    }

    /// A manager over the plane, started, on the shared controller client.
    fn start_manager(&self, identity: &str, leader_election: bool, interruption: bool) -> Running {
        self.start_manager_on(self.controller_client.clone(), identity, leader_election, interruption)
    }

    /// A manager whose controllers and kwok provider use `client`, started.
    fn start_manager_on(&self, client: Client, identity: &str, leader_election: bool, interruption: bool) -> Running {
        self.start_manager_with(client, identity, settings(leader_election), interruption)
    }

    /// A manager with `settings` whose controllers and kwok provider use `client`, started.
    fn start_manager_with(
        &self,
        client: Client,
        identity: &str,
        settings: CoreSettings,
        interruption: bool,
    ) -> Running {
        self.start_manager_kwok(client, identity, settings, interruption, KwokOptions::default())
    }

    /// [`Self::start_manager_with`] with the kwok provider's options (its node classes are always the env's).
    fn start_manager_kwok(
        &self,
        client: Client,
        identity: &str,
        settings: CoreSettings,
        interruption: bool,
        kwok: KwokOptions,
    ) -> Running {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let kwok = KwokCloudProvider::new(
            client.clone(),
            KwokOptions { node_classes: Some(Arc::new(self.node_classes.clone())), ..kwok },
        );
        let cloud: Arc<dyn CloudProvider> = Arc::new(kwok);
        let mut manager = Manager::new(settings, client, cloud, Arc::new(self.node_classes.clone()), clock)
            .with_node_class_registrations([kwok_node_class_registration()])
            .with_bind_ip(IpAddr::V4(Ipv4Addr::LOCALHOST))
            .with_identity(identity)
            .with_disruption_settings(disruption_settings());
        if interruption {
            manager = manager.with_interruption(Arc::new(self.queue.clone()));
        }
        let shutdown = CancellationToken::new();
        let metrics_addr = Arc::new(OnceLock::new());
        let addr = metrics_addr.clone();
        let task = tokio::spawn(manager.run_with(shutdown.clone(), move |started| {
            let _ = addr.set(started.metrics_addr);
        }));
        Running { shutdown, task, metrics_addr }
    }

    /// Replaces the main manager with a fresh one on the shared controller client (after a scenario ran its own).
    fn restore_main(&self) {
        let main = self.start_manager("main", false, true);
        *self.main.lock().expect("main") = Some(main);
    }

    /// The text of the main manager's `/metrics`.
    async fn main_metrics(&self) -> String {
        let main = self.main.lock().expect("main").take().expect("a main manager");
        let text = main.metrics().await;
        *self.main.lock().expect("main") = Some(main);
        text
    }

    /// A position in the controller's log, for [`Env::log_since`].
    fn log_mark(&self) -> u64 {
        std::fs::metadata(&self.controller_log).map(|m| m.len()).unwrap_or(0)
    }

    /// The controller's log lines written after `mark`, parsed.
    fn log_since(&self, mark: u64) -> Vec<Map<String, Value>> {
        let bytes = std::fs::read(&self.controller_log).unwrap_or_default();
        let start = usize::try_from(mark).unwrap_or(usize::MAX).min(bytes.len());
        String::from_utf8_lossy(&bytes[start..]).lines().filter_map(karpenter_operator::logging::parse_line).collect()
    }

    /// The controller stayed quiet through a fault: no ERROR line since `mark` about a write conflict (a 409 on
    /// our own write is retried and counted, never an error) and, with `max_errors`, at most that many ERROR
    /// lines. Prints the count of each WARN and ERROR message for the record.
    fn assert_quiet(&self, scenario: &str, mark: u64, max_errors: Option<usize>) {
        let lines = self.log_since(mark);
        let level = |l: &Map<String, Value>| l.get("level").and_then(Value::as_str).unwrap_or_default().to_string();
        let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
        for l in lines.iter().filter(|l| matches!(level(l).as_str(), "WARN" | "ERROR")) {
            let message = l.get("message").and_then(Value::as_str).unwrap_or_default().to_string();
            *counts.entry((level(l), message)).or_default() += 1;
        }
        eprintln!("real plane: {scenario}: controller WARN/ERROR lines: {counts:?}");
        let errors: Vec<String> =
            lines.iter().filter(|l| level(l) == "ERROR").map(|l| Value::Object((*l).clone()).to_string()).collect();
        let conflicts: Vec<&String> = errors.iter().filter(|e| mentions_conflict(e)).collect();
        assert!(conflicts.is_empty(), "{scenario}: ERROR lines about write conflicts:\n{conflicts:#?}");
        if let Some(max) = max_errors {
            assert!(
                errors.len() <= max,
                "{scenario}: {} ERROR lines (at most {max}):\n{}",
                errors.len(),
                errors.join("\n")
            );
        }
    }

    /// Claims, Nodes and kwok instances agree one to one, strictly: every Node has the NodeClaim with its
    /// providerID and that claim names it, every claim has its Node and instance, none is being deleted and every
    /// claim is Initialized. (Lists that fail are retried, never read as empty.)
    async fn assert_no_orphans(&self) {
        self.eventually("claims, Nodes and instances agree one to one", Duration::from_secs(30), || async {
            let lp = ListParams::default();
            let claims = self.claims().list(&lp).await.ok()?.items;
            let nodes = self.nodes().list(&lp).await.ok()?.items;
            let instances = self.kwok.list().await.ok()?;
            let by_provider: BTreeMap<&str, &NodeClaim> =
                claims.iter().filter_map(|c| c.provider_id().map(|p| (p, c))).collect();
            let nodes_ok = nodes.iter().all(|n| {
                let provider_id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref()).unwrap_or_default();
                n.metadata.deletion_timestamp.is_none()
                    && by_provider.get(provider_id).is_some_and(|c| c.node_name() == Some(n.name_any().as_str()))
            });
            let claims_ok = by_provider.len() == claims.len()
                && claims.iter().all(|c| c.metadata.deletion_timestamp.is_none() && condition_true(c, "Initialized"));
            let instances: BTreeSet<&str> = instances.iter().filter_map(|i| i.provider_id()).collect();
            let counts_ok = nodes.len() == claims.len() && instances == by_provider.keys().copied().collect();
            (nodes_ok && claims_ok && counts_ok).then_some(())
        })
        .await;
    }

    /// Exactly as many NodeClaims as `replicas` pods requesting `cpu_milli` each need on the Nodes' one instance
    /// type, for a few seconds: a claim launched twice, or launched again for pods already planned onto an
    /// in-flight claim, would be one too many. Returns the count.
    async fn assert_claims_fit(&self, replicas: usize, cpu_milli: i64) -> usize {
        let nodes = self.nodes().list(&ListParams::default()).await.expect("nodes").items;
        let types: BTreeSet<&str> = nodes
            .iter()
            .filter_map(|n| n.labels().get("node.kubernetes.io/instance-type").map(String::as_str))
            .collect();
        assert_eq!(types.len(), 1, "one instance type: {types:?}");
        let per_node = nodes
            .iter()
            .map(|n| {
                let cpu = n.status.as_ref().and_then(|s| s.allocatable.as_ref()).and_then(|a| a.get("cpu"));
                let cpu: Quantity = cpu.expect("allocatable cpu").0.parse().expect("a quantity");
                usize::try_from(cpu.as_nanos() / (i128::from(cpu_milli) * 1_000_000)).expect("pods per node")
            })
            .min()
            .expect("a node");
        let needed = replicas.div_ceil(per_node);
        let what = format!("{needed} NodeClaims for {replicas} pods ({per_node} per node)");
        self.stays(&what, Duration::from_secs(3), async || {
            self.claims().list(&ListParams::default()).await.is_ok_and(|l| l.items.len() == needed)
        })
        .await;
        needed
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
        // Real time: the plane runs in real processes, tokio's clock is never paused here.
        let start = Stopwatch::start();
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
        let start = Stopwatch::start();
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

    /// The apiserver's `/metrics`.
    fn apiserver_metrics(&self) -> String {
        tokio::task::block_in_place(|| self.plane.apiserver_get("/metrics")).expect("apiserver /metrics")
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

/// A client with the controller's stack (`karpenter_operator::client`, the settings' rate limit) for `kubeconfig`,
/// sent to `url` instead of the kubeconfig's server when given (a [`karpenter_testing::realplane::Link`]).
async fn controller_client(plane: &RealPlane, kubeconfig: &Path, url: Option<String>) -> Client {
    let mut config = plane.config(kubeconfig).await.expect("kubeconfig");
    if let Some(url) = url {
        config.cluster_url = url.parse().expect("url");
    }
    client_from_config(config, &settings(false).client_options()).expect("controller client")
}

/// Whether a log line is about a write conflict (409: Conflict or AlreadyExists).
fn mentions_conflict(line: &str) -> bool {
    let line = line.to_ascii_lowercase();
    ["conflict", "object has been modified", "alreadyexists", "already exists"].iter().any(|w| line.contains(w))
}

/// The sum of the samples of metric `name` whose labels include every pair of `labels`; `None` when the metric
/// has no such sample (Prometheus text format).
fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once('}') {
                Some((l, v)) => (l, v),
                None => continue,
            },
            None if rest.starts_with(' ') => ("", rest),
            None => continue,
        };
        if labels.iter().all(|(k, v)| label_text.contains(&format!("{k}=\"{v}\""))) {
            let value: f64 = value.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            found = Some(found.unwrap_or(0.0) + value);
        }
    }
    found
}

#[test]
fn metric_sum_adds_the_matching_samples_and_tells_absent_from_zero() {
    let text = "# HELP x_total X.\n# TYPE x_total counter\n\
                x_total{code=\"409\",resource=\"nodeclaims\"} 3\n\
                x_total{code=\"409\",resource=\"nodeclaims\",subresource=\"status\"} 4\n\
                x_total{code=\"200\",resource=\"nodeclaims\"} 100\n\
                x_total_other 7\nplain 2.5\n";
    assert_eq!(metric_sum(text, "x_total", &[("resource", "nodeclaims"), ("code", "409")]), Some(7.0));
    assert_eq!(metric_sum(text, "x_total", &[]), Some(107.0));
    assert_eq!(metric_sum(text, "x_total", &[("code", "500")]), None);
    assert_eq!(metric_sum(text, "plain", &[]), Some(2.5));
    assert_eq!(metric_sum(text, "absent", &[]), None);
}

#[test]
fn conflict_lines_are_recognised() {
    assert!(mentions_conflict(
        r#"{"error":"ApiError: Operation cannot be fulfilled on nodeclaims.karpenter.sh \"a\": the object has been modified; please apply your changes to the latest version and try again: Conflict"}"#
    ));
    assert!(mentions_conflict(r#"{"error":"nodeclaims.karpenter.sh \"a\" already exists: AlreadyExists"}"#));
    assert!(!mentions_conflict(r#"{"error":"client error (Connect)","message":"reconcile failed"}"#));
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

/// Installs the kwok CRDs and the CapacityBuffer CRD (`karpenter-controller crds --provider kwok
/// --capacity-buffer`) and waits until they are Established.
async fn install_crds(client: &Client) {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .args(["crds", "--provider", "kwok", "--capacity-buffer"])
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
    assert_eq!(names.len(), 5, "nodepools, nodeclaims, nodeoverlays, kwoknodeclasses, capacitybuffers: {names:?}");
    let start = Stopwatch::start();
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

/// The EC2NodeClass CRD (`crds --provider aws`) is accepted by a real API server, whose `spec.kubelet` is an open
/// map since v1.15: the server keeps any field (unknown ones and malformed values included), every stored class
/// still decodes in our typed list (a watcher's view), and the EC2NodeClass status controller, run against the
/// server with the in-memory AWS, reports the bad ones as `ValidationSucceeded=False`
/// `InvalidKubeletConfiguration` with a Warning event, while CEL expressions and passed-through fields pass.
async fn ec2nodeclass_crd(env: &Env) {
    install_ec2nodeclass_crd(env).await;
    let resource = kube::discovery::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "karpenter.k8s.aws",
        "v1",
        "EC2NodeClass",
    ));
    let api: Api<kube::core::DynamicObject> = Api::all_with(env.client.clone(), &resource);
    let class = |name: &str, kubelet: Value| -> kube::core::DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"tags": {"k": "v"}}], "securityGroupSelectorTerms": [{"tags": {"k": "v"}}],
                     "kubelet": kubelet}
        }))
        .expect("EC2NodeClass")
    };
    // (name, kubelet, what the controller says: None when valid, else a part of the InvalidKubeletConfiguration
    // message). The API server accepts them all.
    let cases = [
        ("static", json!({"maxPods": 110, "kubeReserved": {"cpu": "100m", "pid": "200"}}), None),
        (
            "expressions",
            json!({"maxPods": "min(max_pods, 50)", "kubeReserved": {"memory": "11 * max_pods + 255"},
                   "systemReserved": {"cpu": "max(vcpus * 10, 100)"}}),
            None,
        ),
        (
            "passthrough",
            json!({"serializeImagePulls": false, "featureGates": {"InPlacePodVerticalScaling": true},
                   "authentication": {"webhook": {"cacheTTL": "1m"}}}),
            None,
        ),
        ("unknown-field", json!({"maxPods": 20, "fooBar": {"a": 1}}), Some("kubelet.fooBar: unknown field")),
        (
            "malformed",
            json!({"podsPerCore": "x", "evictionHard": 5}),
            Some("kubelet.evictionHard: expected a map; kubelet.podsPerCore: expected an integer"),
        ),
        ("negative-max-pods", json!({"maxPods": -1}), Some("kubelet.maxPods: must be greater than or equal to 0")),
        (
            "too-many-max-pods",
            json!({"maxPods": 2_147_483_648_i64}),
            Some("kubelet.maxPods: 2147483648 is out of the int32 range"),
        ),
        ("negative-reserved", json!({"kubeReserved": {"cpu": "-100m"}}), Some("kubelet.kubeReserved[cpu]")),
        ("bad-reserved-key", json!({"systemReserved": {"gpu": "vcpus"}}), Some("kubelet.systemReserved[gpu]")),
    ];
    for (name, kubelet, _) in &cases {
        api.create(&PostParams::default(), &class(name, kubelet.clone()))
            .await
            .unwrap_or_else(|e| panic!("{name}: the open kubelet map is accepted: {e}"));
    }
    let stored = api.get("unknown-field").await.expect("unknown-field");
    assert_eq!(stored.data["spec"]["kubelet"]["fooBar"], json!({"a": 1}), "the server keeps unknown fields");
    let typed: Api<karpenter_aws::api::EC2NodeClass> = Api::all(env.client.clone());
    let listed = typed.list(&ListParams::default()).await.expect("every class decodes, malformed kubelets included");
    assert_eq!(listed.items.len(), cases.len());
    let controller = ec2_node_class_controller(env);
    for (name, _, problem) in &cases {
        controller.reconcile(name).await.unwrap_or_else(|e| panic!("{name}: reconcile: {e}"));
        let c = typed.get(name).await.expect(name);
        let v = c.status.as_ref().and_then(|s| s.condition("ValidationSucceeded")).cloned().expect(name);
        match problem {
            None => assert_ne!(v.reason, "InvalidKubeletConfiguration", "{name}: {}", v.message),
            Some(p) => {
                assert_eq!(
                    (v.status, v.reason.as_str()),
                    (ConditionStatus::False, "InvalidKubeletConfiguration"),
                    "{name}"
                );
                assert!(v.message.contains(p), "{name}: {}", v.message);
            }
        }
    }
    let events: Api<CoreEvent> = Api::namespaced(env.client.clone(), "default");
    let warned: BTreeSet<String> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("InvalidKubeletConfiguration"))
        .filter_map(|e| e.involved_object.name)
        .collect();
    let invalid: BTreeSet<String> =
        cases.iter().filter(|(_, _, p)| p.is_some()).map(|(n, _, _)| n.to_string()).collect();
    assert_eq!(warned, invalid, "one Warning event per invalid class");
}

/// Installs the EC2NodeClass CRD (`crds --provider aws`; already there is fine) and waits until it is Established.
async fn install_ec2nodeclass_crd(env: &Env) {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .args(["crds", "--provider", "aws"])
        .output()
        .expect("karpenter-controller crds");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd: CustomResourceDefinition = text
        .split("\n---")
        .map(|d| d.trim().trim_start_matches("---").trim())
        .filter_map(|d| serde_saphyr::from_str::<CustomResourceDefinition>(d).ok())
        .find(|c| c.name_any() == "ec2nodeclasses.karpenter.k8s.aws")
        .expect("the EC2NodeClass CRD");
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("the API server accepts the EC2NodeClass CRD: {e}"),
    }
    env.eventually("EC2NodeClass CRD established", Duration::from_secs(30), || async {
        let c = crds.get("ec2nodeclasses.karpenter.k8s.aws").await.ok()?;
        c.status?.conditions?.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(())
    })
    .await;
}

/// The EC2NodeClass status controller against the plane's API server, with an empty in-memory AWS (the kubelet
/// check does not need AWS: it comes before the checks that do).
fn ec2_node_class_controller(env: &Env) -> karpenter_aws::nodeclass::controller::NodeClassController {
    ec2_node_class_controller_on(env.client.clone())
}

/// [`ec2_node_class_controller`] writing through `client`.
fn ec2_node_class_controller_on(client: Client) -> karpenter_aws::nodeclass::controller::NodeClassController {
    use karpenter_aws::nodeclass::controller::{NodeClassController, StaticKubernetesVersion};
    use karpenter_aws::nodeclass::{NodeClassResolver, ResolverSettings};
    let apis = Arc::new(karpenter_aws::nodeclass::mock::MockAws::new()).resolver_apis();
    let clock: Arc<dyn karpenter_cloudprovider::Clock> = Arc::new(karpenter_cloudprovider::SystemClock);
    let resolver = Arc::new(NodeClassResolver::new(apis, ResolverSettings::default(), clock.clone()));
    let version = Arc::new(StaticKubernetesVersion("1.32".into()));
    NodeClassController::new(client, resolver, version, clock, None)
}

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
    let node = env.running("keep", 1, Duration::from_secs(60)).await.into_values().next().expect("a pod");
    let original = claim_names(&env.list_claims().await);
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}});
    env.pools().patch("default", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch pool");
    env.eventually("claim Drifted", Duration::from_secs(30), || async {
        env.list_claims().await.iter().all(|c| condition_true(c, "Drifted")).then_some(())
    })
    .await;
    // Positive evidence of the block (drift waits a few seconds anyway, so the claim staying alone proves little).
    disruption_blocked(env, &node, "is annotated karpenter.sh/do-not-disrupt").await;
    env.stays("do-not-disrupt: the drifted claim stays", Duration::from_secs(6), async || {
        let claims = env.list_claims().await;
        claim_names(&claims) == original && claims.iter().all(|c| c.metadata.deletion_timestamp.is_none())
    })
    .await;
}

/// Waits for a `DisruptionBlocked` event on `node` whose message contains `needle`.
async fn disruption_blocked(env: &Env, node: &str, needle: &str) {
    let what = format!("a DisruptionBlocked event on {node} naming {needle}");
    env.eventually(&what, Duration::from_secs(30), || async {
        let events: Api<CoreEvent> = Api::namespaced(env.client.clone(), NS);
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("DisruptionBlocked")
                    && e.involved_object.name.as_deref() == Some(node)
                    && e.message.as_deref().is_some_and(|m| m.contains(needle))
            })
            .then_some(())
    })
    .await;
}

/// Other autoscalers' annotations keep a drifted node as `karpenter.sh/do-not-disrupt` does (on by default): a
/// pod's `cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`, then the node's
/// `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`; once both are gone the node is replaced.
async fn autoscaler_annotations(env: &Env) {
    env.pool("default", json!({})).await;
    env.deployment("keep-ca", 1, "500m", json!({"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"})).await;
    let pods = env.running("keep-ca", 1, Duration::from_secs(60)).await;
    let (pod, node) = pods.into_iter().next().expect("a pod");
    let original = claim_names(&env.list_claims().await);
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}});
    env.pools().patch("default", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch pool");
    env.eventually("claim Drifted", Duration::from_secs(30), || async {
        env.list_claims().await.iter().all(|c| condition_true(c, "Drifted")).then_some(())
    })
    .await;
    let kept = async || {
        let claims = env.list_claims().await;
        claim_names(&claims) == original && claims.iter().all(|c| c.metadata.deletion_timestamp.is_none())
    };
    // The block is positive, not just slowness: the node's DisruptionBlocked event names the annotation.
    let blocked_by = async |needle: &str| disruption_blocked(env, &node, needle).await;
    blocked_by(&format!("pod {NS}/{pod} has cluster-autoscaler.kubernetes.io/safe-to-evict=false")).await;
    env.stays("safe-to-evict=false: the drifted claim stays", Duration::from_secs(6), kept).await;
    // The node annotation alone keeps it too.
    let annotate =
        json!({"metadata": {"annotations": {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}}});
    env.nodes().patch(&node, &PatchParams::default(), &Patch::Merge(&annotate)).await.expect("annotate node");
    let unannotate = json!({"metadata": {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": null}}});
    env.pods().patch(&pod, &PatchParams::default(), &Patch::Merge(&unannotate)).await.expect("unannotate pod");
    blocked_by("node has cluster-autoscaler.kubernetes.io/scale-down-disabled=true").await;
    env.stays("scale-down-disabled=true: the drifted claim stays", Duration::from_secs(6), kept).await;
    // Without either, drift replaces it: the annotations were what held it.
    let unannotate =
        json!({"metadata": {"annotations": {"cluster-autoscaler.kubernetes.io/scale-down-disabled": null}}});
    env.nodes().patch(&node, &PatchParams::default(), &Patch::Merge(&unannotate)).await.expect("unannotate node");
    env.eventually("the drifted claim replaced", Duration::from_secs(90), || async {
        let claims = env.list_claims().await;
        (!claims.is_empty() && claim_names(&claims).is_disjoint(&original)).then_some(())
    })
    .await;
    env.running("keep-ca", 1, Duration::from_secs(60)).await;
}

/// A NodePool annotated `karpenter-rs.io/disruption-topology-key: topology.kubernetes.io/zone` with a budget of
/// 100% and two drifted nodes in each of two kwok zones: the second zone's first NodeClaim is marked for deletion
/// only after every NodeClaim of the first zone is gone (observed by polling: each claim's first sighting with a
/// deletion timestamp and its first absence).
async fn disruption_topology(env: &Env) {
    const KEY: &str = "karpenter-rs.io/disruption-topology-key";
    const ZONE: &str = "topology.kubernetes.io/zone";
    env.pool("default", json!({"disruption": {"budgets": [{"nodes": "100%"}]}})).await;
    let annotate = json!({"metadata": {"annotations": {KEY: ZONE}}});
    env.pools().patch("default", &PatchParams::default(), &Patch::Merge(&annotate)).await.expect("annotate pool");
    // Two pods per zone, one per 2-CPU node.
    for (app, zone) in [("web-a", "test-zone-a"), ("web-b", "test-zone-b")] {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": app, "namespace": NS},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": app}},
                "template": {
                    "metadata": {"labels": {"app": app}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": {ZONE: zone},
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "1500m", "memory": "128Mi"}}}],
                    },
                },
            },
        });
        let d: Deployment = serde_json::from_value(d).expect("deployment json");
        env.deployments().create(&PostParams::default(), &d).await.expect("create deployment");
    }
    env.running("web-a", 2, Duration::from_secs(60)).await;
    env.running("web-b", 2, Duration::from_secs(60)).await;
    env.eventually("DisruptionTopologyKeyValid=True", Duration::from_secs(30), || async {
        let pool = env.pools().get("default").await.ok()?;
        pool.conditions()
            .iter()
            .any(|c| c.type_ == "DisruptionTopologyKeyValid" && c.status == ConditionStatus::True)
            .then_some(())
    })
    .await;
    let zones: BTreeMap<String, String> = env
        .list_claims()
        .await
        .iter()
        .map(|c| (c.name_any(), c.labels().get(ZONE).cloned().unwrap_or_default()))
        .collect();
    let per_zone = |z: &str| zones.values().filter(|v| *v == z).count();
    assert_eq!((per_zone("test-zone-a"), per_zone("test-zone-b")), (2, 2), "{zones:?}");

    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}});
    env.pools().patch("default", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch pool");
    // When (seconds since the drift) each original claim was first seen deleting, and first seen gone.
    let clock = Stopwatch::start();
    let mut marked: BTreeMap<String, f64> = BTreeMap::new();
    let mut gone: BTreeMap<String, f64> = BTreeMap::new();
    while gone.len() < zones.len() {
        assert!(
            clock.elapsed() < Duration::from_secs(240),
            "drift did not finish: {marked:?} {gone:?}\n{}",
            env.describe().await
        );
        let t = clock.elapsed().as_secs_f64();
        let claims = env.list_claims().await;
        for name in zones.keys() {
            match claims.iter().find(|c| &c.name_any() == name) {
                Some(c) if c.metadata.deletion_timestamp.is_some() => {
                    marked.entry(name.clone()).or_insert(t);
                }
                Some(_) => {}
                None => {
                    marked.entry(name.clone()).or_insert(t);
                    gone.entry(name.clone()).or_insert(t);
                }
            }
        }
        tokio::time::sleep(POLL).await;
    }
    let (first, _) = marked.iter().min_by(|a, b| a.1.total_cmp(b.1)).expect("a claim was marked");
    let first_zone = zones[first].clone();
    let last_gone_in_first =
        zones.iter().filter(|(_, z)| **z == first_zone).map(|(n, _)| gone[n]).fold(f64::MIN, f64::max);
    let first_marked_in_second =
        zones.iter().filter(|(_, z)| **z != first_zone).map(|(n, _)| marked[n]).fold(f64::MAX, f64::min);
    eprintln!(
        "real plane: disruption-topology: {first_zone} first; its last claim gone at {last_gone_in_first:.1}s, the \
         other zone's first claim marked at {first_marked_in_second:.1}s; marked {marked:?}, gone {gone:?}"
    );
    assert!(
        last_gone_in_first <= first_marked_in_second,
        "the second zone started at {first_marked_in_second:.1}s, before the first zone's claims were gone \
         ({last_gone_in_first:.1}s): marked {marked:?}, gone {gone:?}"
    );
    env.running("web-a", 2, Duration::from_secs(60)).await;
    env.running("web-b", 2, Duration::from_secs(60)).await;
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

/// `karpenter-rs.io/consolidation-min-savings: "60%"` on the pool: four 1500m pods take one 8-CPU node; down to
/// two, the replacement by a 4-CPU node would save half its price (the kwok catalogue prices by size), so the node
/// stays, with an `Unconsolidatable` event naming the saving and the threshold and the skip counted as
/// `SavingsBelowThreshold`; down to one, a 2-CPU node saves three quarters and the node is replaced.
async fn consolidation_min_savings(env: &Env) {
    const ANNOTATION: &str = karpenter_api::labels::consolidation_min_savings::ANNOTATION;
    const CPU: &str = "karpenter.kwok.sh/instance-cpu";
    let spec = json!({
        "template": {"spec": {"requirements": [
            {"key": CPU, "operator": "In", "values": ["2", "4", "8"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        ]}},
        "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"},
    });
    env.pool("default", spec).await;
    let annotate = json!({"metadata": {"annotations": {ANNOTATION: "60%"}}});
    env.pools().patch("default", &PatchParams::default(), &Patch::Merge(&annotate)).await.expect("annotate");
    env.deployment("web", 4, "1500m", json!({})).await;
    let nodes = env.running("web", 4, Duration::from_secs(60)).await;
    let node: BTreeSet<String> = nodes.into_values().collect();
    assert_eq!(node.len(), 1, "four 1500m pods share one 8-CPU node: {node:?}");
    let node = node.into_iter().next().expect("a node");
    let cpu_of = async |name: &str| {
        let n = env.nodes().get(name).await.ok()?;
        n.labels().get(CPU).cloned()
    };
    assert_eq!(cpu_of(&node).await.as_deref(), Some("8"), "{}", env.describe().await);
    let claims = claim_names(&env.list_claims().await);

    // Marginal: 8 -> 4 CPUs saves 50 %, below the pool's 60 %.
    env.scale("web", 2).await;
    env.running("web", 2, Duration::from_secs(60)).await;
    let what = format!("an Unconsolidatable event on {node} naming the saving and the pool's threshold");
    // A pass that finds nothing is not run again until the cluster state changes, and the nomination of the node
    // for the four pods (which blocks it for the nomination window) ends without a change: each poll touches
    // the pool, so a pass runs once the window is over.
    let pokes = std::sync::atomic::AtomicU32::new(0);
    env.eventually(&what, Duration::from_secs(30), || async {
        let n = pokes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let poke = json!({"metadata": {"labels": {"poke": n.to_string()}}});
        env.pools().patch("default", &PatchParams::default(), &Patch::Merge(&poke)).await.ok()?;
        let events: Api<CoreEvent> = Api::all(env.client.clone());
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Unconsolidatable")
                    && e.involved_object.name.as_deref() == Some(node.as_str())
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains("(50.0%), NodePool default requires 60%") && m.contains(ANNOTATION))
            })
            .then_some(())
    })
    .await;
    // Past the poll (1 s) and validation wait (2 s) a few times over: the node is still there, alone.
    env.stays("the 8-CPU node stays", Duration::from_secs(6), async || {
        let now = env.list_claims().await;
        claim_names(&now) == claims && now.iter().all(|c| c.metadata.deletion_timestamp.is_none())
    })
    .await;
    let metrics = env.main_metrics().await;
    let skipped = metric_sum(
        &metrics,
        "karpenter_voluntary_disruption_candidates_skipped_total",
        &[("nodepool", "default"), ("reason", "SavingsBelowThreshold")],
    );
    assert!(skipped.is_some_and(|n| n >= 1.0), "SavingsBelowThreshold skips of pool default: {skipped:?}");

    // Large: 8 -> 2 CPUs saves 75 %, above it: the node is replaced.
    env.scale("web", 1).await;
    let replacement = env
        .eventually("the 8-CPU node replaced by a 2-CPU one", Duration::from_secs(60), || async {
            let nodes = env.list_nodes().await;
            let [only] = nodes.as_slice() else { return None };
            let name = only.name_any();
            (name != node && only.labels().get(CPU).map(String::as_str) == Some("2") && env.consistent().await)
                .then_some(name)
        })
        .await;
    let pods = env.running("web", 1, Duration::from_secs(60)).await;
    assert_eq!(pods.into_values().collect::<Vec<_>>(), [replacement], "the pod moved to the replacement");
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

// ------------------------------------------------------------------------------------------------ faults

/// A NodePool of 4-CPU machines of one instance type (`c-4x-amd64-linux`: 3900m allocatable, seven 500m pods),
/// so the number of NodeClaims a Deployment needs is known exactly.
async fn one_type_pool(env: &Env) {
    let requirements = json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c-4x-amd64-linux"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]);
    env.pool("default", json!({"template": {"spec": {"requirements": requirements}}})).await;
}

/// kube-apiserver crashes (SIGKILL) and starts again while the NodeClaims of a 40-pod scale-out are being created
/// and launched. Afterwards every pod runs, there are exactly as many claims as the pods need (nothing launched
/// twice), claims, Nodes and instances agree one to one (no orphan), and a scale-up made after the restart is
/// acted on (the watches resumed). No ERROR line is about a write conflict.
async fn apiserver_restart_mid_scale_out(env: &Env) {
    let mark = env.log_mark();
    one_type_pool(env).await;
    env.deployment("web", 40, "500m", json!({})).await;
    // Restart as soon as the provisioner's first claim shows: the rest of the pass and the launches straddle it.
    let start = Stopwatch::start();
    let claims = loop {
        let claims = env.claims().list(&ListParams::default()).await.expect("claims").items;
        if !claims.is_empty() {
            break claims;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no NodeClaim within 30s\n{}", env.describe().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let initialized = claims.iter().filter(|c| condition_true(c, "Initialized")).count();
    assert!(initialized < claims.len(), "the restart must catch claims in flight: {initialized}/{}", claims.len());
    let t = Stopwatch::start();
    tokio::task::block_in_place(|| -> Result<(), PlaneError> {
        env.plane.stop_apiserver(Stop::Kill)?;
        env.plane.start_apiserver()
    })
    .expect("restart kube-apiserver");
    eprintln!(
        "real plane: apiserver-restart: restarted in {:.1}s with {} claims created, {initialized} initialized",
        t.elapsed().as_secs_f64(),
        claims.len()
    );
    env.running("web", 40, Duration::from_secs(120)).await;
    env.assert_no_orphans().await;
    let before = env.assert_claims_fit(40, 500).await;
    // The watches resumed: a change made after the restart is acted on.
    env.scale("web", 48).await;
    env.running("web", 48, Duration::from_secs(90)).await;
    env.assert_no_orphans().await;
    let after = env.assert_claims_fit(48, 500).await;
    assert!(after > before, "the scale-up needed a new claim: {before} -> {after}");
    // An outage fails requests: the ERROR lines are counted (printed), not capped; none may be about a conflict.
    env.assert_quiet("apiserver-restart", mark, Some(MAX_FAULT_ERRORS));
}

/// The controller is cut off from the apiserver (a partition: `Link::cut`); meanwhile a NodeClaim is deleted and
/// the Deployment scaled up, etcd is compacted and the apiserver restarted, so its new watch cache starts after
/// every resourceVersion the controller holds. When the link comes back each watch resumes into `410 Gone` and
/// re-lists; the controller then finishes the deletion (claim, Node, instance gone) and provisions for the new
/// pods. The log shows the 410 re-lists of the NodeClaim and Pod watches.
async fn watch_gone_relist(env: &Env) {
    env.stop_main().await;
    env.pool("default", json!({})).await;
    let link = env.plane.link().await.expect("link");
    let client = controller_client(&env.plane, env.plane.kubeconfig(), Some(link.url())).await;
    let partitioned = env.start_manager_on(client, "partitioned", false, true);
    env.deployment("web", 2, "900m", json!({})).await;
    let pods = env.running("web", 2, Duration::from_secs(60)).await;
    let node = pods.values().next().expect("a node").clone();
    let victim = env.list_claims().await.into_iter().find(|c| c.node_name() == Some(node.as_str())).expect("claim");
    env.assert_no_orphans().await;

    let mark = env.log_mark();
    link.cut();
    // While the controller cannot watch: its claim is deleted (the termination finalizer is ours, so the claim
    // waits for the controller) and the Deployment is scaled up.
    env.claims().delete(&victim.name_any(), &DeleteParams::default()).await.expect("delete claim");
    env.scale("web", 4).await;
    tokio::task::block_in_place(|| -> Result<(), PlaneError> {
        env.plane.compact_etcd()?;
        env.plane.stop_apiserver(Stop::Kill)?;
        env.plane.start_apiserver()
    })
    .expect("compact etcd and restart kube-apiserver");
    link.restore();

    env.eventually("the claim deleted during the partition: claim, Node gone", Duration::from_secs(90), || async {
        let claim_gone = env.claims().get_opt(&victim.name_any()).await.ok()?.is_none();
        let node_gone = env.nodes().get_opt(&node).await.ok()?.is_none();
        (claim_gone && node_gone).then_some(())
    })
    .await;
    let pods = env.running("web", 4, Duration::from_secs(90)).await;
    assert!(pods.values().all(|n| n != &node), "{pods:?}");
    env.assert_no_orphans().await;
    // The watches resumed into 410 Gone and re-listed (ClusterState logs each failed watch).
    let relisted: BTreeSet<String> = env
        .log_since(mark)
        .iter()
        .filter(|l| l.get("message").and_then(Value::as_str) == Some("watch failed, re-listing"))
        .filter(|l| {
            let error = l.get("error").and_then(Value::as_str).unwrap_or_default();
            error.contains("too old resource version") || error.contains("Expired")
        })
        .filter_map(|l| l.get("kind").and_then(Value::as_str).map(str::to_owned))
        .collect();
    assert!(
        relisted.contains("NodeClaim") && relisted.contains("Pod"),
        "the NodeClaim and Pod watches re-listed after 410 Gone; re-listed: {relisted:?}"
    );
    env.assert_quiet("watch-gone-relist", mark, Some(MAX_FAULT_ERRORS));
    partitioned.stop().await;
    env.restore_main();
}

/// The identity the throttled controller runs as (outside system:masters, which APF exempts).
const THROTTLED_USER: &str = "karpenter-throttled";

/// API Priority and Fairness throttles the controller's identity hard (a priority level of one share of the
/// plane's small concurrency, i.e. one seat, no borrowing, one queue of one request: 429 as soon as three requests
/// are in flight). The controller still gets 21 pods Running (slower), with the right number of claims and
/// nothing orphaned, its client retrying the 429s (`Retry-After`, backoff) without ERROR lines piling up. The
/// apiserver's metrics show the rejections.
async fn apf_throttling(env: &Env) {
    env.stop_main().await;
    let kubeconfig =
        tokio::task::block_in_place(|| env.plane.user_kubeconfig(THROTTLED_USER, &[])).expect("user kubeconfig");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": THROTTLED_USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": THROTTLED_USER}],
    }))
    .expect("binding");
    let level: PriorityLevelConfiguration = serde_json::from_value(json!({
        "metadata": {"name": THROTTLED_USER},
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 1, "lendablePercent": 0, "borrowingLimitPercent": 0,
            "limitResponse": {"type": "Queue", "queuing": {"queues": 1, "handSize": 1, "queueLengthLimit": 1}},
        }},
    }))
    .expect("priority level");
    let schema: FlowSchema = serde_json::from_value(json!({
        "metadata": {"name": THROTTLED_USER},
        "spec": {
            "priorityLevelConfiguration": {"name": THROTTLED_USER},
            "matchingPrecedence": 50,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "User", "user": {"name": THROTTLED_USER}}],
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true,
                                   "namespaces": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            }],
        },
    }))
    .expect("flow schema");
    let bindings: Api<ClusterRoleBinding> = Api::all(env.client.clone());
    let levels: Api<PriorityLevelConfiguration> = Api::all(env.client.clone());
    let schemas: Api<FlowSchema> = Api::all(env.client.clone());
    bindings.create(&PostParams::default(), &binding).await.expect("create binding");
    levels.create(&PostParams::default(), &level).await.expect("create priority level");
    schemas.create(&PostParams::default(), &schema).await.expect("create flow schema");
    env.eventually("the apiserver took the FlowSchema (Dangling=False)", Duration::from_secs(30), || async {
        let schema = schemas.get(THROTTLED_USER).await.ok()?;
        let conditions = schema.status.and_then(|s| s.conditions).unwrap_or_default();
        conditions
            .iter()
            .any(|c| c.type_.as_deref() == Some("Dangling") && c.status.as_deref() == Some("False"))
            .then_some(())
    })
    .await;
    let rejected = |text: &str| {
        metric_sum(text, "apiserver_flowcontrol_rejected_requests_total", &[("flow_schema", THROTTLED_USER)])
            .unwrap_or(0.0)
    };
    let rejected_before = rejected(&env.apiserver_metrics());

    let mark = env.log_mark();
    let client = controller_client(&env.plane, &kubeconfig, None).await;
    one_type_pool(env).await;
    let throttled = env.start_manager_on(client, "throttled", false, false);
    // The pool's readiness is the throttled controller's to write: pods wait for it (a pass with pending pods and
    // no ready pool is an ERROR line, not what this scenario counts).
    env.eventually("the NodePool Ready", Duration::from_secs(60), || async {
        let pool = serde_json::to_value(env.pools().get("default").await.ok()?).ok()?;
        let conditions = pool["status"]["conditions"].as_array()?.clone();
        conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True").then_some(())
    })
    .await;
    let t = Stopwatch::start();
    env.deployment("web", 21, "500m", json!({})).await;
    env.running("web", 21, Duration::from_secs(180)).await;
    let took = t.elapsed().as_secs_f64();
    env.assert_no_orphans().await;
    env.assert_claims_fit(21, 500).await;
    let metrics = env.apiserver_metrics();
    let rejections = rejected(&metrics) - rejected_before;
    let dispatched =
        metric_sum(&metrics, "apiserver_flowcontrol_dispatched_requests_total", &[("flow_schema", THROTTLED_USER)]);
    let seats =
        metric_sum(&metrics, "apiserver_flowcontrol_nominal_limit_seats", &[("priority_level", THROTTLED_USER)]);
    eprintln!(
        "real plane: apf-throttling: 21 pods running in {took:.1}s; {seats:?} seat(s), {rejections} requests \
         rejected with 429, {dispatched:?} dispatched"
    );
    assert!(dispatched.is_some_and(|d| d > 0.0), "the controller's requests went through the FlowSchema");
    assert!(rejections > 0.0, "APF rejected none of the controller's requests: nothing was throttled");
    env.assert_quiet("apf-throttling", mark, Some(MAX_FAULT_ERRORS));

    throttled.stop().await;
    let _ = schemas.delete(THROTTLED_USER, &DeleteParams::default()).await;
    let _ = levels.delete(THROTTLED_USER, &DeleteParams::default()).await;
    let _ = bindings.delete(THROTTLED_USER, &DeleteParams::default()).await;
    env.restore_main();
}

/// Other writers race the controller: while a scale-out is launched, registered and initialized, every NodeClaim
/// and Node gets fresh annotations back to back (merge patches without a resourceVersion always win) until the
/// controller has counted a conflict on one of its guarded writes (they carry the resourceVersion they were
/// computed from), which the apiserver answered with 409 (on a NodeClaim or a Node: which one the race hits first
/// is chance). The controller retries quietly (no ERROR line about a conflict), counts the conflicts in
/// `karpenter_kube_write_conflicts_total` on its `/metrics`, and finishes the job.
async fn write_conflicts(env: &Env) {
    let conflicts_409 = |text: &str| {
        ["nodeclaims", "nodes"]
            .iter()
            .map(|r| metric_sum(text, "apiserver_request_total", &[("resource", r), ("code", "409")]).unwrap_or(0.0))
            .sum::<f64>()
    };
    let counted = |text: &str| metric_sum(text, "karpenter_kube_write_conflicts_total", &[]);
    let served_before = conflicts_409(&env.apiserver_metrics());
    let counted_before = counted(&env.main_metrics().await).unwrap_or(0.0);
    let mark = env.log_mark();
    env.pool("default", json!({})).await;
    env.deployment("web", 8, "900m", json!({})).await;
    // Three racers patch every claim and Node as fast as they can until the controller has counted a conflict
    // (then they stop: the controller is not to be starved, only crossed).
    let done = CancellationToken::new();
    let race = |racer: u32| {
        let done = &done;
        async move {
            let key = format!("karpenter-rs.test/race-{racer}");
            let mut round = 0u64;
            while !done.is_cancelled() {
                round += 1;
                let patch = json!({"metadata": {"annotations": {&key: round.to_string()}}});
                for claim in env.list_claims().await {
                    let _ = env.claims().patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
                }
                for node in env.list_nodes().await {
                    let _ = env.nodes().patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
                }
                tokio::task::yield_now().await;
            }
        }
    };
    let until_a_409 = async {
        while !done.is_cancelled() {
            if counted(&env.main_metrics().await).is_some_and(|c| c > counted_before) {
                done.cancel();
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let scale_out = async {
        env.running("web", 8, Duration::from_secs(90)).await;
        done.cancel();
        env.assert_no_orphans().await;
    };
    tokio::join!(race(1), race(2), race(3), until_a_409, scale_out);
    let served = conflicts_409(&env.apiserver_metrics()) - served_before;
    let counted = counted(&env.main_metrics().await);
    eprintln!(
        "real plane: write-conflicts: apiserver answered {served} 409s on NodeClaims and Nodes, controller counted \
         {counted:?} (from {counted_before})"
    );
    assert!(served > 0.0, "the racing writers provoked no 409 on NodeClaim or Node writes");
    assert!(
        counted.is_some_and(|c| c > counted_before),
        "karpenter_kube_write_conflicts_total on /metrics counts the conflicts: {counted:?} (was {counted_before})"
    );
    env.assert_quiet("write-conflicts", mark, Some(MAX_FAULT_ERRORS));
}

// ------------------------------------------------------------------------------------------------ simulate

/// The user the read-only role of docs/simulate.md is bound to.
const READER: &str = "simulate-reader";

/// `simulate --from-cluster` on a plane of its own (the scenarios' controller would write while it reads): the
/// real binary, as a user bound only by the ClusterRole docs/simulate.md documents, sees the pending pods of a
/// Deployment and provisions them onto new nodes; the kube-apiserver's audit log shows that user's requests were
/// LISTs of exactly the documented resources; nothing in etcd changed but the control plane's own leases and
/// events; the same user cannot create anything; and a user without the role gets an error naming the resource,
/// the verb and the docs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_plane_simulate_from_cluster() {
    let started = Stopwatch::start();
    // The audit log records the reader's requests (and nobody else's). Outside the state dir, which a fresh
    // start wipes.
    let audit_dir = std::env::temp_dir().join(format!("karpenter-simulate-audit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&audit_dir);
    std::fs::create_dir_all(&audit_dir).expect("audit dir");
    let policy = audit_dir.join("policy.yaml");
    let audit_log = audit_dir.join("audit.log");
    std::fs::write(
        &policy,
        format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
             - level: Metadata\n  users: [\"{READER}\"]\n- level: None\n"
        ),
    )
    .expect("audit policy");
    let options = PlaneOptions {
        name: Some("real_plane-simulate".into()),
        apiserver_args: Some(format!(
            "--audit-policy-file={} --audit-log-path={} --audit-log-mode=blocking",
            policy.display(),
            audit_log.display()
        )),
        ..PlaneOptions::default()
    };
    let Some(plane) = tokio::task::block_in_place(|| karpenter_testing::realplane::require_with(options)) else {
        return;
    };
    let client = plane.client().await.expect("client");
    install_crds(&client).await;

    // A NodePool, its KWOKNodeClass, two tainted Nodes nothing tolerates (no kubelet: kube-scheduler cannot place
    // the pods anywhere) and a Deployment of four pods that stay Pending.
    let class: KWOKNodeClass = serde_json::from_value(json!({
        "apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}
    }))
    .expect("class");
    Api::<KWOKNodeClass>::all(client.clone()).create(&PostParams::default(), &class).await.expect("KWOKNodeClass");
    let pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
            "requirements": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}}}
    }))
    .expect("pool");
    Api::<NodePool>::all(client.clone()).create(&PostParams::default(), &pool).await.expect("NodePool");
    for name in ["reserved-1", "reserved-2"] {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "c-4x-amd64-linux",
                "topology.kubernetes.io/zone": "test-zone-a", "karpenter.sh/capacity-type": "on-demand"}},
            "spec": {"taints": [{"key": "example.com/reserved", "value": "true", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "64"},
                       "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "64"}}
        }))
        .expect("node");
        Api::<Node>::all(client.clone()).create(&PostParams::default(), &node).await.expect("Node");
    }
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": NS},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}}]}}}
    }))
    .expect("deployment");
    Api::<Deployment>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("Deployment");
    // Wait until the four pods exist and kube-scheduler has given up on each (PodScheduled=False), so the
    // cluster is as quiet as it gets before the run.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let waited = Stopwatch::start();
    loop {
        let list = pods.list(&ListParams::default().labels("app=web")).await.expect("pods");
        let unschedulable = list
            .items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "PodScheduled" && c.status == "False"))
            })
            .count();
        if list.items.len() == 4 && unschedulable == 4 {
            break;
        }
        assert!(waited.elapsed() < Duration::from_secs(60), "pods not Pending: {:?}", list.items);
        tokio::time::sleep(POLL).await;
    }

    // The documented role, bound to the reader.
    let docs = include_str!("../../../docs/simulate.md");
    let section = docs.split("## A live dry run").nth(1).expect("docs: section \"A live dry run\"");
    let yaml = section.split("```yaml\n").nth(1).and_then(|s| s.split("```").next()).expect("docs: the RBAC yaml");
    let yaml = yaml.replace("jane@example.com", READER);
    let mut docs_iter = yaml.split("\n---\n");
    let role: ClusterRole = serde_saphyr::from_str(docs_iter.next().expect("role")).expect("ClusterRole yaml");
    let binding: ClusterRoleBinding =
        serde_saphyr::from_str(docs_iter.next().expect("binding")).expect("ClusterRoleBinding yaml");
    Api::<ClusterRole>::all(client.clone()).create(&PostParams::default(), &role).await.expect("ClusterRole");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("ClusterRoleBinding");
    let reader_kubeconfig = tokio::task::block_in_place(|| plane.user_kubeconfig(READER, &[])).expect("kubeconfig");
    let reader = Client::try_from(plane.config(&reader_kubeconfig).await.expect("config")).expect("reader client");
    // RBAC reaches the authorizer through an informer: wait until the reader may list.
    let waited = Stopwatch::start();
    while Api::<NodePool>::all(reader.clone()).list(&ListParams::default()).await.is_err() {
        assert!(waited.elapsed() < Duration::from_secs(30), "the reader cannot list NodePools");
        tokio::time::sleep(POLL).await;
    }

    // The run, with nothing changing around it but the plane's own bookkeeping.
    let (revision_before, keys_before) = tokio::task::block_in_place(|| etcd_keys(&plane)).expect("etcd keys before");
    let t = Stopwatch::start();
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .args(["simulate", "--from-cluster", "-o", "json"])
        .env("KUBECONFIG", &reader_kubeconfig)
        .output()
        .expect("karpenter-controller simulate");
    let run_seconds = t.elapsed().as_secs_f64();
    let (revision_after, keys_after) = tokio::task::block_in_place(|| etcd_keys(&plane)).expect("etcd keys after");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "simulate --from-cluster failed: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("simulate's JSON");

    // Nothing changed: every key of etcd has the revision it had, except the control plane's leases (leader
    // election, apiserver identity) and events kube-scheduler keeps writing for the pending pods.
    let changed: Vec<&String> = keys_before
        .keys()
        .chain(keys_after.keys())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .filter(|k| keys_before.get(*k) != keys_after.get(*k))
        .collect();
    let unexpected: Vec<&&String> =
        changed.iter().filter(|k| !k.starts_with("/registry/leases/") && !k.starts_with("/registry/events/")).collect();
    assert!(
        unexpected.is_empty(),
        "etcd changed during simulate (revision {revision_before} -> {revision_after}): {unexpected:?}"
    );
    eprintln!(
        "real plane: simulate --from-cluster ran in {run_seconds:.2}s; etcd revision {revision_before} -> \
         {revision_after}, keys changed meanwhile (the plane's own): {changed:?}"
    );

    // What it printed: the four pending pods on new nodes, the plane's nodes with their verdicts.
    assert_eq!(report["apiVersion"], "karpenter-rs.timeline/v1", "{report:#}");
    assert_eq!(report["inputs"], json!([format!("cluster {}", plane.server_url())]));
    let notes: Vec<&str> = report["notes"].as_array().expect("notes").iter().filter_map(Value::as_str).collect();
    assert!(
        notes.iter().any(|n| n.starts_with("ec2nodeclasses.karpenter.k8s.aws: not served")),
        "the AWS node class CRD is not installed: {notes:?}"
    );
    let provisioning = &report["events"][0];
    assert_eq!(provisioning["type"], "Provisioning", "{report:#}");
    let launched = provisioning["nodesLaunched"].as_array().expect("nodes launched");
    assert!(!launched.is_empty(), "{report:#}");
    let placed: u64 = launched.iter().filter_map(|n| n["pods"].as_u64()).sum();
    assert_eq!(placed, 4, "the four pending pods on new nodes: {launched:?}");
    assert!(launched.iter().all(|n| n["nodePool"] == "default"), "{launched:?}");
    assert_eq!(report["summary"]["before"]["pendingPods"], 0, "{report:#}");
    let nodes: BTreeSet<&str> =
        report["nodes"].as_array().expect("nodes").iter().filter_map(|n| n["name"].as_str()).collect();
    assert!(nodes.contains("reserved-1") && nodes.contains("reserved-2"), "{nodes:?}");
    assert!(
        report["nodes"].as_array().expect("nodes").iter().all(|n| n["verdict"].as_str().is_some_and(|v| !v.is_empty())),
        "every node has its verdict: {report:#}"
    );

    // The audit log: the binary's requests (its user agent) were LISTs of exactly the documented resources.
    let audit = std::fs::read_to_string(&audit_log).expect("audit log");
    let mut listed = BTreeSet::new();
    for line in audit.lines() {
        let event: Value = serde_json::from_str(line).expect("audit event");
        if !event["userAgent"].as_str().is_some_and(|a| a.contains("(simulate)")) {
            continue;
        }
        assert_eq!(event["user"]["username"], READER, "{event}");
        assert_eq!(event["verb"], "list", "simulate sent something else than a LIST: {event}");
        let group = event["objectRef"]["apiGroup"].as_str().unwrap_or_default().to_owned();
        // The AWS node class CRD is not installed here: 404, after the role allowed the request. kube-apiserver
        // 1.32 serves DRA's resource.k8s.io/v1beta1 only when enabled (K8SREAL_APISERVER_ARGS): 404 or 200.
        let code = event["responseStatus"]["code"].as_u64();
        let expected: &[u64] = match group.as_str() {
            "karpenter.k8s.aws" => &[404],
            "resource.k8s.io" => &[200, 404],
            _ => &[200],
        };
        assert!(code.is_some_and(|c| expected.contains(&c)), "{event}");
        listed.insert((group, event["objectRef"]["resource"].as_str().expect("resource").to_owned()));
    }
    let granted: BTreeSet<(String, String)> = role
        .rules
        .iter()
        .flatten()
        .flat_map(|r| {
            let groups = r.api_groups.clone().unwrap_or_default();
            let resources = r.resources.clone().unwrap_or_default();
            groups.into_iter().flat_map(move |g| resources.clone().into_iter().map(move |res| (g.clone(), res)))
        })
        .collect();
    assert_eq!(listed, granted, "simulate lists exactly the documented resources");

    // The role is read-only: the reader cannot create anything.
    let cm: k8s_openapi::api::core::v1::ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "x", "namespace": NS}})).expect("configmap");
    let refused = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(reader.clone(), NS)
        .create(&PostParams::default(), &cm)
        .await
        .expect_err("the reader cannot create");
    assert!(matches!(&refused, kube::Error::Api(s) if s.code == 403), "{refused}");
    let refused =
        Api::<NodePool>::all(reader.clone()).create(&PostParams::default(), &pool).await.expect_err("no NodePools");
    assert!(matches!(&refused, kube::Error::Api(s) if s.code == 403), "{refused}");

    // A user without the role: exit 1, the resource, the verb and the docs named.
    let stranger = tokio::task::block_in_place(|| plane.user_kubeconfig("stranger", &[])).expect("kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .args(["simulate", "--from-cluster"])
        .env("KUBECONFIG", &stranger)
        .output()
        .expect("karpenter-controller simulate");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("verb \"list\" on nodepools.karpenter.sh"), "{stderr}");
    assert!(stderr.contains("docs/simulate.md"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing simulated");

    drop(plane);
    let _ = std::fs::remove_dir_all(&audit_dir);
    eprintln!("real plane: simulate --from-cluster scenario in {:.1}s", started.elapsed().as_secs_f64());
}

/// etcd's revision and every key with its last modification (`etcdctl get --prefix / -w fields`).
fn etcd_keys(plane: &RealPlane) -> Result<(i64, BTreeMap<String, i64>), PlaneError> {
    let text = plane.etcdctl(&["get", "/", "--prefix", "--keys-only", "-w", "fields"])?;
    let mut keys = BTreeMap::new();
    let mut revision = 0;
    let mut key = None;
    for line in text.lines() {
        let Some((name, value)) = line.split_once(" : ") else { continue };
        match name.trim().trim_matches('"') {
            "Revision" => revision = value.trim().parse().unwrap_or_default(),
            "Key" => key = Some(value.trim().trim_matches('"').to_owned()),
            "ModRevision" => {
                if let Some(k) = key.take() {
                    keys.insert(k, value.trim().parse().unwrap_or_default());
                }
            }
            _ => {}
        }
    }
    Ok((revision, keys))
}

// ------------------------------------------------------------------------------------------------ beyond upstream

/// `CLUSTER_LIMITS=nodes=1` on a controller of its own: two pods that each need a 2-CPU node get exactly one
/// NodeClaim; the other pod's `FailedScheduling` event names the cluster limit, and `/metrics` shows the limit
/// and the usage. The NodePool has no limits of its own.
async fn cluster_limits(env: &Env) {
    env.stop_main().await;
    let limited = env.start_manager_with(
        env.controller_client.clone(),
        "cluster-limits",
        settings_with(false, &["--cluster-limits=nodes=1"]),
        false,
    );
    env.pool("default", json!({})).await;
    env.deployment("wide", 2, "1500m", json!({})).await;
    let pending = env
        .eventually("one wide pod running, one pending", Duration::from_secs(60), || async {
            let pods = env.list_pods("app=wide").await;
            let unbound: Vec<String> = pods
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
                .map(|p| p.name_any())
                .collect();
            (pods.len() == 2 && unbound.len() == 1).then(|| unbound.into_iter().next()).flatten()
        })
        .await;
    let needle = "NodePool default: cluster limit nodes 1 reached";
    env.eventually(
        &format!("a FailedScheduling event on {pending} naming the cluster limit"),
        Duration::from_secs(30),
        || async {
            let events: Api<CoreEvent> = Api::namespaced(env.client.clone(), NS);
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("FailedScheduling")
                        && e.involved_object.name.as_deref() == Some(pending.as_str())
                        && e.message.as_deref().is_some_and(|m| m.contains(needle))
                })
                .then_some(())
        },
    )
    .await;
    env.stays("exactly one NodeClaim (cluster limit nodes=1)", Duration::from_secs(6), async || {
        env.list_claims().await.len() == 1
    })
    .await;
    env.eventually("the cluster limit and usage metrics", Duration::from_secs(45), || async {
        let text = limited.metrics().await;
        (text.contains("karpenter_cluster_limit{resource_type=\"nodes\"} 1")
            && text.contains("karpenter_cluster_usage{resource_type=\"nodes\"} 1")
            && text.contains("karpenter_cluster_usage{resource_type=\"cpu\"} 2"))
        .then_some(())
    })
    .await;
    limited.stop().await;
    env.restore_main();
}

/// `karpenter-rs.io/min-nodes`: a pool annotated with a floor of 2 gets two NodeClaims with no pod and keeps them
/// past `consolidateAfter: 0s` (the verdicts' `AtMinNodes` counted in the skip metric), while an unannotated pool's
/// emptied node is consolidated; a value that is not an integer is the pool's `MinNodesValid=False` condition and
/// a Warning event, and without a floor in force the empty nodes go.
async fn min_nodes(env: &Env) {
    const ANNOTATION: &str = karpenter_api::labels::min_nodes::ANNOTATION;
    let consolidate = json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"});
    // A taint keeps the Deployment's pod off the floor's nodes, so that pool plain gets a node of its own.
    let taint = json!([{"key": "dedicated", "value": "floor", "effect": "NoSchedule"}]);
    env.pool("floor", json!({"template": {"spec": {"taints": taint}}, "disruption": consolidate.clone()})).await;
    let annotate = |value: &str| json!({"metadata": {"annotations": {ANNOTATION: value}}});
    env.pools().patch("floor", &PatchParams::default(), &Patch::Merge(&annotate("2"))).await.expect("annotate");
    let of_pool = |claims: Vec<NodeClaim>, pool: &str| -> Vec<NodeClaim> {
        claims
            .into_iter()
            .filter(|c| c.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some(pool))
            .collect()
    };
    let floor_claims = env
        .eventually("two NodeClaims of pool floor, initialized, with no pod", Duration::from_secs(60), || async {
            let claims = of_pool(env.list_claims().await, "floor");
            (claims.len() == 2 && claims.iter().all(|c| condition_true(c, "Initialized"))).then(|| claim_names(&claims))
        })
        .await;

    env.pool("plain", json!({"disruption": consolidate})).await;
    env.deployment("web", 1, "500m", json!({})).await;
    env.running("web", 1, Duration::from_secs(60)).await;
    assert_eq!(of_pool(env.list_claims().await, "plain").len(), 1, "the pod's node is pool plain's");
    env.scale("web", 0).await;
    env.eventually("pool plain's empty node consolidated", Duration::from_secs(90), || async {
        of_pool(env.list_claims().await, "plain").is_empty().then_some(())
    })
    .await;
    let kept = async || {
        let claims = of_pool(env.list_claims().await, "floor");
        claim_names(&claims) == floor_claims && claims.iter().all(|c| c.metadata.deletion_timestamp.is_none())
    };
    env.stays("pool floor keeps its two empty nodes", Duration::from_secs(6), kept).await;
    let metrics = env.main_metrics().await;
    let skipped = metric_sum(
        &metrics,
        "karpenter_voluntary_disruption_candidates_skipped_total",
        &[("nodepool", "floor"), ("reason", "AtMinNodes")],
    );
    assert!(skipped.is_some_and(|n| n >= 2.0), "AtMinNodes skips of pool floor: {skipped:?}");
    // A claim deleted by hand no longer counts: the floor launches its replacement.
    let gone = floor_claims.iter().next().expect("a claim").clone();
    env.claims().delete(&gone, &DeleteParams::default()).await.expect("delete claim");
    env.eventually("the deleted claim replaced", Duration::from_secs(60), || async {
        let claims = of_pool(env.list_claims().await, "floor");
        let live: Vec<&NodeClaim> = claims.iter().filter(|c| c.metadata.deletion_timestamp.is_none()).collect();
        (live.len() == 2 && live.iter().all(|c| c.name_any() != gone)).then_some(())
    })
    .await;

    // A value that is not an integer: the condition and a Warning event name the pool and the annotation.
    env.pools().patch("floor", &PatchParams::default(), &Patch::Merge(&annotate("two"))).await.expect("annotate");
    let needle = format!("NodePool floor: annotation {ANNOTATION} \"two\" is not a non-negative integer");
    env.eventually("MinNodesValid=False on pool floor", Duration::from_secs(30), || async {
        let pool = env.pools().get("floor").await.ok()?;
        let c = pool.status.as_ref()?.conditions.iter().find(|c| c.type_ == "MinNodesValid")?.clone();
        (c.status == karpenter_api::ConditionStatus::False && c.message.contains(&needle)).then_some(())
    })
    .await;
    env.eventually("a MinNodesInvalid Warning event on pool floor", Duration::from_secs(30), || async {
        let events: Api<CoreEvent> = Api::all(env.client.clone());
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("MinNodesInvalid")
                    && e.type_.as_deref() == Some("Warning")
                    && e.involved_object.name.as_deref() == Some("floor")
                    && e.message.as_deref().is_some_and(|m| m.contains(&needle))
            })
            .then_some(())
    })
    .await;
    // No floor in force: the empty nodes are consolidated like any others.
    env.eventually("pool floor's empty nodes consolidated", Duration::from_secs(90), || async {
        of_pool(env.list_claims().await, "floor").is_empty().then_some(())
    })
    .await;
}

/// `pod.deletioncost` (`FEATURE_GATES=PodDeletionCostManagement=true`). Three 900m pods of one Deployment on two
/// 2-CPU nodes of one pool (two pods on one, one on the other; consolidation only `WhenEmpty` after an hour, so
/// both nodes stay, and a 100% budget, so both rank). With the gate off (the main manager, restarted once the pods
/// run) no pod gets `controller.kubernetes.io/pod-deletion-cost`, and a value set by hand stays. On a manager with the gate on, the
/// pods on the node with fewer pods (the one consolidation would rather remove) get `-2`, those on the other `-1`,
/// the hand-set value included, and `/metrics` counts the writes.
async fn pod_deletion_cost(env: &Env) {
    const COST: &str = karpenter_api::labels::annotations::POD_DELETION_COST;
    let disruption =
        json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1h", "budgets": [{"nodes": "100%"}]});
    env.pool("default", json!({"disruption": disruption})).await;
    env.deployment("web", 3, "900m", json!({})).await;
    let placed = env.running("web", 3, Duration::from_secs(60)).await;
    let mut per_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (pod, node) in &placed {
        per_node.entry(node.as_str()).or_default().push(pod.as_str());
    }
    let mut counts: Vec<usize> = per_node.values().map(Vec::len).collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 2], "three 900m pods on two 2-CPU nodes: {placed:?}");
    let (fewer, more) = {
        let mut nodes: Vec<(&str, &Vec<&str>)> = per_node.iter().map(|(n, p)| (*n, p)).collect();
        nodes.sort_by_key(|(_, pods)| pods.len());
        (nodes[0], nodes[1])
    };
    // A user's value on a pod of the node with more pods: Karpenter owns the annotation once the gate is on.
    let hand_set = more.1[0];
    let patch = json!({"metadata": {"annotations": {COST: "500"}}});
    env.pods().patch(hand_set, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("annotate pod");
    let costs = async || -> BTreeMap<String, Option<String>> {
        env.list_pods("app=web").await.iter().map(|p| (p.name_any(), p.annotations().get(COST).cloned())).collect()
    };
    // Gate off: a main manager started now, with the pods in place (a registered controller's first cycle runs
    // within a second of the cluster state syncing; its next only a minute later, so the manager that saw the
    // pods arrive would prove nothing), writes nothing once synced.
    env.stop_main().await;
    env.restore_main();
    env.eventually("the restarted main manager's cluster state synced", Duration::from_secs(30), || async {
        if env.main.lock().expect("main").as_ref().is_none_or(|m| m.metrics_addr.get().is_none()) {
            return None;
        }
        let synced = metric_sum(&env.main_metrics().await, "karpenter_cluster_state_synced", &[])?;
        (synced == 1.0).then_some(())
    })
    .await;
    env.stays("gate off: no pod deletion cost written, the hand-set one kept", Duration::from_secs(6), async || {
        let now = costs().await;
        now.len() == 3
            && now.iter().all(
                |(pod, cost)| {
                    if pod == hand_set { cost.as_deref() == Some("500") } else { cost.is_none() }
                },
            )
    })
    .await;
    let updated = metric_sum(&env.main_metrics().await, "karpenter_pod_deletion_cost_pods_updated_total", &[]);
    assert!(updated.is_none_or(|n| n == 0.0), "gate off: no deletion-cost writes counted, got {updated:?}");

    env.stop_main().await;
    let gated = env.start_manager_with(
        env.controller_client.clone(),
        "pod-deletion-cost",
        settings_with(false, &["--feature-gates=PodDeletionCostManagement=true"]),
        false,
    );
    let mut expected: BTreeMap<String, Option<String>> = BTreeMap::new();
    for pod in fewer.1 {
        expected.insert((*pod).to_string(), Some("-2".into()));
    }
    for pod in more.1 {
        expected.insert((*pod).to_string(), Some("-1".into()));
    }
    let what = format!("deletion costs -2 on {} (fewer pods), -1 on {}: {expected:?}", fewer.0, more.0);
    env.eventually(&what, Duration::from_secs(30), || async { (costs().await == expected).then_some(()) }).await;
    env.eventually("the deletion-cost writes in /metrics", Duration::from_secs(30), || async {
        let text = gated.metrics().await;
        let updated = metric_sum(&text, "karpenter_pod_deletion_cost_pods_updated_total", &[("result", "updated")])?;
        (updated >= 3.0).then_some(())
    })
    .await;
    // The pods stayed where they were: the values describe the placement read above.
    let now = env.running("web", 3, Duration::from_secs(10)).await;
    assert_eq!(now, placed, "the pods did not move");
    gated.stop().await;
    env.restore_main();
}

/// Node repair as a disruption method (gate `NodeRepair`): a node whose `KernelReady` condition turns False is
/// left alone while annotated `karpenter.sh/do-not-repair`, then replaced (the replacement initialized before
/// the broken node's NodeClaim is deleted, its drain bounded by the policy) with the repair metrics in /metrics.
/// The kubelet stand-in keeps every condition but Ready, so the broken condition stays as written.
async fn node_repair(env: &Env) {
    use karpenter_api::repair::RepairPolicy;
    env.stop_main().await;
    let mut kernel = RepairPolicy::replace("KernelReady", ConditionStatus::False, Duration::from_secs(3));
    kernel.termination_grace_period = Some(Duration::from_secs(30));
    let repairing = env.start_manager_kwok(
        env.controller_client.clone(),
        "node-repair",
        settings_with(false, &["--feature-gates=NodeRepair=true"]),
        false,
        KwokOptions { repair_policies: vec![kernel], ..KwokOptions::default() },
    );
    env.pool("default", json!({})).await;
    env.deployment("web", 1, "500m", json!({})).await;
    let placed = env.running("web", 1, Duration::from_secs(60)).await;
    let broken = placed.values().next().expect("a node").clone();
    let broken_claim = env
        .list_claims()
        .await
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(broken.as_str()))
        .map(|c| c.name_any())
        .expect("the node's claim");
    let veto = json!({"metadata": {"annotations": {"karpenter.sh/do-not-repair": "true"}}});
    env.nodes().patch(&broken, &PatchParams::default(), &Patch::Merge(&veto)).await.expect("annotate node");
    let node = env.nodes().get(&broken).await.expect("node");
    let mut conditions: Vec<Value> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|cs| cs.iter().filter_map(|c| serde_json::to_value(c).ok()).collect())
        .unwrap_or_default();
    let now = karpenter_api::time::rfc3339(SystemClock.now());
    conditions.push(json!({"type": "KernelReady", "status": "False", "reason": "KernelDeadlock",
        "message": "test", "lastHeartbeatTime": now, "lastTransitionTime": now}));
    let patch = json!({"status": {"conditions": conditions}});
    env.nodes().patch_status(&broken, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("break node");
    env.stays("do-not-repair keeps the broken node", Duration::from_secs(8), async || {
        let claims = env.list_claims().await;
        claims.len() == 1 && claims.iter().all(|c| c.metadata.deletion_timestamp.is_none())
    })
    .await;
    let lift = json!({"metadata": {"annotations": {"karpenter.sh/do-not-repair": null}}});
    env.nodes().patch(&broken, &PatchParams::default(), &Patch::Merge(&lift)).await.expect("lift veto");
    // The broken node's claim goes only once its replacement is initialized, and its drain is bounded by the
    // policy's 30 s.
    env.eventually(
        "the broken node's claim deleted after its replacement initialized",
        Duration::from_secs(90),
        || async {
            let claims = env.list_claims().await;
            let old = claims.iter().find(|c| c.name_any() == broken_claim);
            if old.is_some_and(|c| c.metadata.deletion_timestamp.is_none()) {
                return None;
            }
            let replaced = claims.iter().any(|c| c.name_any() != broken_claim && condition_true(c, "Initialized"));
            assert!(replaced, "the broken claim went before an initialized replacement existed: {claims:?}");
            if let Some(deadline) = old
                .and_then(|c| c.annotations().get("karpenter.sh/nodeclaim-termination-timestamp"))
                .and_then(|d| karpenter_api::time::parse_rfc3339(d))
            {
                let left = (deadline - SystemClock.now()).num_seconds();
                assert!(left <= 30, "the drain is bounded by the policy's 30 s: {left}s left");
            }
            Some(())
        },
    )
    .await;
    env.running("web", 1, Duration::from_secs(60)).await;
    env.eventually("the repair in /metrics", Duration::from_secs(30), || async {
        let text = repairing.metrics().await;
        let repaired =
            metric_sum(&text, "karpenter_nodeclaims_unhealthy_disrupted_total", &[("condition", "KernelReady")])?;
        let disrupted = metric_sum(&text, "karpenter_nodeclaims_disrupted_total", &[("reason", "unhealthy")])?;
        (repaired >= 1.0 && disrupted >= 1.0).then_some(())
    })
    .await;
    repairing.stop().await;
    env.restore_main();
}

/// `SCHEDULER_CONFIG`'s default topology spread constraints: three small pods of one Deployment fit one node;
/// with a default hostname spread (maxSkew 1, DoNotSchedule) given to pods that declare none, with the selector
/// kube-scheduler derives from their ReplicaSet, Karpenter plans one node per pod.
async fn scheduler_config(env: &Env) {
    env.pool("default", json!({"disruption": {"consolidateAfter": "Never"}})).await;
    env.deployment("web", 3, "100m", json!({})).await;
    env.running("web", 3, Duration::from_secs(60)).await;
    assert_eq!(env.list_claims().await.len(), 1, "without the config three 100m pods share one node");
    env.cleanup("scheduler-config (no config)").await;

    env.stop_main().await;
    let config = "--scheduler-config={podTopologySpread: {defaultConstraints: \
        [{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]}}";
    let spreading = env.start_manager_with(
        env.controller_client.clone(),
        "scheduler-config",
        settings_with(false, &[config]),
        false,
    );
    env.pool("default", json!({"disruption": {"consolidateAfter": "Never"}})).await;
    env.deployment("web", 3, "100m", json!({})).await;
    env.eventually("one NodeClaim per pod under the default hostname spread", Duration::from_secs(60), || async {
        (env.list_claims().await.len() == 3).then_some(())
    })
    .await;
    env.stays("still three NodeClaims", Duration::from_secs(5), async || env.list_claims().await.len() == 3).await;
    spreading.stop().await;
    env.restore_main();
}

/// Sets a Node condition through the status subresource (the kubelet stand-in keeps every condition but Ready).
async fn set_node_condition(env: &Env, node: &str, type_: &str, status: &str) {
    let current = env.nodes().get(node).await.expect("node");
    let mut conditions: Vec<Value> = current
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|cs| cs.iter().filter(|c| c.type_ != type_).filter_map(|c| serde_json::to_value(c).ok()).collect())
        .unwrap_or_default();
    let now = karpenter_api::time::rfc3339(SystemClock.now());
    conditions.push(json!({"type": type_, "status": status, "reason": "Test", "message": "test",
        "lastHeartbeatTime": now, "lastTransitionTime": now}));
    let patch = json!({"status": {"conditions": conditions}});
    env.nodes().patch_status(node, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("node condition");
}

/// Node repair's Reboot action on kwok: the node is drained and rebooted (the kwok provider gives it a new boot
/// id), the NodeClaim records the old boot id and `Rebooting=True`; once the fault is gone the marks and the
/// taint are removed and the node stays.
async fn node_repair_reboot(env: &Env) {
    use karpenter_api::repair::{RepairAction, RepairPolicy};
    env.stop_main().await;
    // The toleration is also the time a rebooted node gets to report itself healthy: long enough for this test
    // to see the reboot and clear the condition on a loaded machine.
    let mut kernel = RepairPolicy::replace("KernelReady", ConditionStatus::False, Duration::from_secs(10));
    kernel.termination_grace_period = Some(Duration::ZERO);
    kernel.action = RepairAction::Reboot;
    let repairing = env.start_manager_kwok(
        env.controller_client.clone(),
        "node-repair-reboot",
        settings_with(false, &["--feature-gates=NodeRepair=true"]),
        false,
        KwokOptions { repair_policies: vec![kernel], ..KwokOptions::default() },
    );
    env.pool("default", json!({"disruption": {"consolidateAfter": "Never"}})).await;
    env.deployment("web", 1, "500m", json!({})).await;
    let placed = env.running("web", 1, Duration::from_secs(60)).await;
    let node = placed.values().next().expect("a node").clone();
    let boot = |n: &Node| n.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.boot_id.clone());
    let before = boot(&env.nodes().get(&node).await.expect("node")).expect("kwok nodes carry a boot id");
    let claim_name = env
        .list_claims()
        .await
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .map(|c| c.name_any())
        .expect("the node's claim");
    set_node_condition(env, &node, "KernelReady", "False").await;
    env.eventually("rebooted: a new boot id, the old one on the claim", Duration::from_secs(60), || async {
        let n = env.nodes().get(&node).await.ok()?;
        let claim = env.claims().get(&claim_name).await.ok()?;
        let recorded = claim.annotations().get("karpenter.sh/reboot-pre-boot-id")?.clone();
        (recorded == before && boot(&n).is_some_and(|b| b != before) && condition_true(&claim, "Rebooting"))
            .then_some(())
    })
    .await;
    // The fault is gone after the reboot: the marks and the taint go, the node stays.
    set_node_condition(env, &node, "KernelReady", "True").await;
    env.eventually("the reboot's marks and taint removed", Duration::from_secs(60), || async {
        let n = env.nodes().get(&node).await.ok()?;
        let claim = env.claims().get(&claim_name).await.ok()?;
        let tainted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"));
        (!tainted
            && !claim.annotations().contains_key("karpenter.sh/reboot-pre-boot-id")
            && !condition_true(&claim, "Rebooting"))
        .then_some(())
    })
    .await;
    assert!(
        env.claims().get(&claim_name).await.expect("claim").metadata.deletion_timestamp.is_none(),
        "a reboot that helped keeps the node"
    );
    repairing.stop().await;
    env.restore_main();
}

/// NodeOverlay (gate on, on a controller of its own): an overlay pricing one instance type is applied (its
/// NodeClaim carries `karpenter.sh/price-overlay-applied`), a pair of equal weight pricing the same type both get
/// `ValidationSucceeded=False` (Conflict, each naming the other), and a capacity overlay giving one type an
/// extended resource makes the provisioner pick that type for a pod asking for it (the kwok provider launches at
/// its own prices, as upstream's does, so capacity is what steers the launch here). The launched claim carries the
/// overlaid resource in its capacity; once the Node publishes it (what a device plugin does; played here by a
/// status patch) the pod runs there.
async fn node_overlay(env: &Env) {
    use karpenter_api::nodeoverlay::{NodeOverlay, conditions};
    const IT: &str = "node.kubernetes.io/instance-type";
    env.stop_main().await;
    let gated = env.start_manager_with(
        env.controller_client.clone(),
        "node-overlay",
        settings_with(false, &["--feature-gates=NodeOverlay=true"]),
        false,
    );
    let overlays: Api<NodeOverlay> = Api::all(env.client.clone());
    let create = async |name: &str, spec: Value| {
        let o = json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name}, "spec": spec});
        let o: NodeOverlay = serde_json::from_value(o).expect("nodeoverlay json");
        overlays.create(&PostParams::default(), &o).await.expect("create nodeoverlay");
    };
    let on = |it: &str| json!([{"key": IT, "operator": "In", "values": [it]}]);
    create("cheap", json!({"weight": 10, "requirements": on("m-2x-amd64-linux"), "price": "0.0001"})).await;
    create("clash-a", json!({"weight": 5, "requirements": on("s-2x-amd64-linux"), "priceAdjustment": "-50%"})).await;
    create("clash-b", json!({"weight": 5, "requirements": on("s-2x-amd64-linux"), "price": "0.5"})).await;
    create("license", json!({"requirements": on("c-2x-amd64-linux"), "capacity": {"example.com/license": "1"}})).await;
    env.pool("default", json!({})).await;

    let validation = |o: &NodeOverlay| {
        o.status.as_ref()?.conditions.iter().find(|c| c.type_ == conditions::VALIDATION_SUCCEEDED).cloned()
    };
    env.eventually(
        "overlay conditions: cheap and license valid, clash-a and clash-b in conflict",
        Duration::from_secs(60),
        || async {
            let list = overlays.list(&ListParams::default()).await.ok()?.items;
            let by: BTreeMap<String, _> = list.iter().map(|o| (o.name_any(), validation(o))).collect();
            let valid = |n: &str| by.get(n)?.as_ref().map(|c| c.status == ConditionStatus::True);
            let clash = |n: &str, other: &str| {
                by.get(n)?.as_ref().map(|c| {
                    c.status == ConditionStatus::False
                        && c.reason == conditions::REASON_CONFLICT
                        && c.message.contains(other)
                })
            };
            (valid("cheap")? && valid("license")? && clash("clash-a", "clash-b")? && clash("clash-b", "clash-a")?)
                .then_some(())
        },
    )
    .await;

    env.deployment("overlaid", 1, "500m", json!({})).await;
    env.running("overlaid", 1, Duration::from_secs(90)).await;
    let claims = env.list_claims().await;
    assert_eq!(claims.len(), 1, "{}", env.describe().await);
    let first_claim = claims[0].name_any();
    let annotation = |c: &NodeClaim, key: &str| c.annotations().get(key).cloned();
    assert_eq!(
        annotation(&claims[0], karpenter_api::labels::annotations::PRICE_OVERLAY_APPLIED).as_deref(),
        Some("true"),
        "the claim's options include the overlaid m-2x-amd64-linux"
    );

    // A pod only the license overlay's type can hold: the provisioner plans a NodeClaim offering that one type.
    let mark = env.log_mark();
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "licensed", "namespace": NS},
        "spec": {"terminationGracePeriodSeconds": 0, "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "example.com/license": "1"}, "limits": {"example.com/license": "1"}}}]},
    });
    env.pods()
        .create(&PostParams::default(), &serde_json::from_value(pod).expect("pod json"))
        .await
        .expect("create pod");
    env.eventually(
        "the provisioner creating a NodeClaim with one instance-type option",
        Duration::from_secs(60),
        || async {
            env.log_since(mark)
                .iter()
                .any(|l| {
                    l.get("message").and_then(Value::as_str) == Some("created nodeclaim")
                        && l.get("instance_types").and_then(Value::as_u64) == Some(1)
                        && l.get("pods").and_then(Value::as_u64) == Some(1)
                })
                .then_some(())
        },
    )
    .await;
    // The overlay decorator leaves the overlay-only request out of what kwok checks, and adds the overlaid capacity
    // to what the launch reports.
    let licensed_claim = env
        .eventually("the licensed NodeClaim launched with the overlaid capacity", Duration::from_secs(60), || async {
            // Not the first deployment's claim, which may carry the license too (kwok may launch it on that type).
            env.list_claims().await.into_iter().find(|c| {
                c.name_any() != first_claim
                    && c.is_launched()
                    && c.status.as_ref().and_then(|s| s.capacity.get("example.com/license")).map(|q| q.0.as_str())
                        == Some("1")
            })
        })
        .await;
    // Every node of the overlaid type publishes the resource (the first deployment's claim may have landed on
    // that type too: kwok launches at its own prices), else the consistency check rightly flags it.
    let licensed: Vec<String> = env
        .list_claims()
        .await
        .iter()
        .filter(|c| c.status.as_ref().is_some_and(|s| s.capacity.contains_key("example.com/license")))
        .filter_map(|c| c.status.as_ref()?.provider_id.clone())
        .collect();
    let node_name = env
        .eventually("the licensed claim's Node", Duration::from_secs(60), || async {
            let id = licensed_claim.status.as_ref()?.provider_id.clone()?;
            env.list_nodes()
                .await
                .into_iter()
                .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(id.as_str()))
        })
        .await
        .name_any();
    let publish =
        json!({"status": {"capacity": {"example.com/license": "1"}, "allocatable": {"example.com/license": "1"}}});
    for node in env.list_nodes().await {
        if node.spec.as_ref().and_then(|s| s.provider_id.as_ref()).is_some_and(|id| licensed.contains(id)) {
            let name = node.name_any();
            env.nodes()
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&publish))
                .await
                .expect("publish license");
        }
    }
    env.eventually("the licensed pod running on the overlaid node", Duration::from_secs(90), || async {
        let pod = env.pods().get("licensed").await.ok()?;
        let on = pod.spec.as_ref()?.node_name.as_deref() == Some(node_name.as_str());
        (on && pod.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    assert_eq!(
        env.list_claims().await.len(),
        2,
        "one claim per pod, none launched again for the licensed pod: {}",
        env.describe().await
    );
    let _ =
        env.pods().delete("licensed", &DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() }).await;
    let _ = overlays.delete_collection(&DeleteParams::default(), &ListParams::default()).await;
    gated.stop().await;
    env.restore_main();
}

/// CapacityBuffer (gate): without the gate a buffer launches nothing; with it, a buffer of 2 replicas of a PodTemplate
/// makes Karpenter launch a node with no pending pod and report the buffer's status; the node outlives its
/// consolidateAfter (it holds the buffer's room, so it is not empty), and deleting the buffer lets Emptiness remove it.
async fn capacity_buffer(env: &Env) {
    use k8s_openapi::api::core::v1::PodTemplate;
    use karpenter_api::capacitybuffer::{CapacityBuffer, conditions};
    let templates: Api<PodTemplate> = Api::namespaced(env.client.clone(), NS);
    let buffers: Api<CapacityBuffer> = Api::namespaced(env.client.clone(), NS);
    let template: PodTemplate = serde_json::from_value(json!({
        "metadata": {"name": "chunk", "namespace": NS},
        "template": {
            "metadata": {"labels": {"app": "headroom"}},
            "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "500m"}}}]},
        },
    }))
    .expect("podtemplate json");
    templates.create(&PostParams::default(), &template).await.expect("create podtemplate");
    let buffer: CapacityBuffer = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "headroom", "namespace": NS},
        "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 2},
    }))
    .expect("capacitybuffer json");
    buffers.create(&PostParams::default(), &buffer).await.expect("create capacitybuffer");
    env.pool(
        "default",
        json!({"disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s"}}),
    )
    .await;

    // Without the gate: nothing reads the buffer.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(env.list_claims().await.is_empty(), "no gate, no capacity: {}", env.describe().await);
    assert!(buffers.get("headroom").await.expect("buffer").status.is_none(), "no gate, no status");

    env.stop_main().await;
    let gated = env.start_manager_with(
        env.controller_client.clone(),
        "capacity-buffer",
        settings_with(false, &["--feature-gates=CapacityBuffer=true"]),
        false,
    );
    let condition = |b: &CapacityBuffer, t: &str| {
        b.status.as_ref()?.conditions.iter().find(|c| c.type_ == t).map(|c| (c.status, c.reason.clone()))
    };
    env.eventually("the buffer's node launched and its status reporting it fits", Duration::from_secs(90), || async {
        let b = buffers.get("headroom").await.ok()?;
        let s = b.status.as_ref()?;
        let ready = condition(&b, conditions::READY_FOR_PROVISIONING)? == (ConditionStatus::True, "Resolved".into());
        let fits = condition(&b, conditions::PROVISIONING)?
            == (ConditionStatus::True, conditions::REASON_FITS_EXISTING_CAPACITY.into());
        let one = env.list_claims().await.len() == 1 && env.list_nodes().await.len() == 1;
        (s.replicas == Some(2) && s.pod_template_ref.as_ref()?.name == "chunk" && ready && fits && one).then_some(())
    })
    .await;
    assert!(env.list_pods("").await.is_empty(), "virtual pods are never created");
    let names = async || env.list_claims().await.iter().map(|c| c.name_any()).collect::<Vec<_>>();
    let launched = names().await;

    // A ResourceQuota caps a second buffer (filled in by kube-controller-manager's quota controller): 2 of its 5
    // chunks fit `requests.example.com/foo: 2`, and LimitedByQuotas names the quota.
    use k8s_openapi::api::core::v1::ResourceQuota;
    let quotas: Api<ResourceQuota> = Api::namespaced(env.client.clone(), NS);
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "foo-cap", "namespace": NS}, "spec": {"hard": {"requests.example.com/foo": "2"}},
    }))
    .expect("quota json");
    quotas.create(&PostParams::default(), &quota).await.expect("create quota");
    let foo_template: PodTemplate = serde_json::from_value(json!({
        "metadata": {"name": "foo-chunk", "namespace": NS},
        "template": {"spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"example.com/foo": "1"}, "limits": {"example.com/foo": "1"}}}]}},
    }))
    .expect("podtemplate json");
    templates.create(&PostParams::default(), &foo_template).await.expect("create podtemplate");
    let capped: CapacityBuffer = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "capped", "namespace": NS},
        "spec": {"podTemplateRef": {"name": "foo-chunk"}, "replicas": 5},
    }))
    .expect("capacitybuffer json");
    buffers.create(&PostParams::default(), &capped).await.expect("create capped buffer");
    env.eventually("the capped buffer limited to 2 replicas by foo-cap", Duration::from_secs(60), || async {
        let b = buffers.get("capped").await.ok()?;
        let limited = b.status.as_ref()?.conditions.iter().find(|c| c.type_ == conditions::LIMITED_BY_QUOTAS)?;
        let named = limited.status == ConditionStatus::True && limited.message.contains("foo-cap");
        (b.status.as_ref()?.replicas == Some(2) && named).then_some(())
    })
    .await;
    buffers.delete("capped", &DeleteParams::default()).await.expect("delete capped buffer");
    let _ = templates.delete("foo-chunk", &DeleteParams::default()).await;
    let _ = quotas.delete("foo-cap", &DeleteParams::default()).await;

    // Well past consolidateAfter and the 15 s validation wait: the node holds the buffer's room and stays (the
    // same claim: not deleted as empty and launched again).
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(names().await, launched, "the buffer's node is kept: {}", env.describe().await);

    buffers.delete("headroom", &DeleteParams::default()).await.expect("delete buffer");
    env.eventually("the empty node consolidated away once the buffer is gone", Duration::from_secs(90), || async {
        (env.list_claims().await.is_empty() && env.list_nodes().await.is_empty()).then_some(())
    })
    .await;
    let _ = templates.delete("chunk", &DeleteParams::default()).await;
    gated.stop().await;
    env.restore_main();
}

// ------------------------------------------------------------------------------------------------ chart RBAC

/// The release namespace `chart-rbac` renders the chart for.
const CHART_NS: &str = "karpenter";
/// The chart's ServiceAccount (its fullname for release `karpenter`).
const CHART_SA: &str = "karpenter";
/// The kinds of the rendered chart `chart-rbac` applies.
const RBAC_KINDS: [&str; 5] = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];
/// The test-only grants of the kwok provider (the chart is the AWS provider's and has none): what
/// `karpenter_kwok::KwokCloudProvider` and the kwok node-class controllers call beyond the chart's rules. Nodes are
/// the provider's instances (created, and their status written at launch); KWOKNodeClasses are its node classes
/// (the node-class store and NodePool readiness watch and read them, the kwok status controller marks them Ready).
const KWOK_TEST_ROLE: &str = "karpenter-kwok-test";

/// The Helm binary ([`karpenter_testing::helm::require`]; chart-rbac is skipped without one, a failure under
/// `CI=true`).
fn helm_binary() -> Option<PathBuf> {
    karpenter_testing::helm::require()
}

/// `helm template karpenter charts/karpenter --namespace <CHART_NS>` with the chart's defaults (only the required
/// cluster name set), as JSON documents.
fn render_chart(helm: &Path) -> Vec<Value> {
    let chart = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/karpenter");
    let out = Command::new(helm)
        .args(["template", "karpenter"])
        .arg(&chart)
        .args(["--namespace", CHART_NS, "--set", "settings.clusterName=real-plane"])
        .output()
        .expect("running helm");
    assert!(out.status.success(), "helm template: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    text.split("\n---")
        .map(|d| d.trim().trim_start_matches("---"))
        .filter_map(|d| serde_saphyr::from_str::<Value>(d).ok())
        .filter(Value::is_object)
        .collect()
}

/// The controller flags the rendered Deployment's environment sets (its literal values, for every variable
/// `CoreSettings` reads), except the ports, batch windows and log outputs the tests choose themselves.
fn chart_core_flags(docs: &[Value]) -> Vec<String> {
    use clap::CommandFactory;
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").expect("the chart's Deployment");
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array().expect("container env");
    let command = SettingsCli::command();
    let long_of: BTreeMap<String, String> = command
        .get_arguments()
        .filter_map(|a| Some((a.get_env()?.to_string_lossy().into_owned(), a.get_long()?.to_string())))
        .collect();
    let own = ["METRICS_PORT", "HEALTH_PROBE_PORT", "BATCH_MAX_DURATION", "BATCH_IDLE_DURATION"];
    env.iter()
        .filter_map(|e| {
            let (name, value) = (e["name"].as_str()?, e["value"].as_str()?);
            if own.contains(&name) || name.starts_with("LOG_") {
                return None;
            }
            Some(format!("--{}={value}", long_of.get(name)?))
        })
        .collect()
}

/// A client with the controller's stack that the plane's admin certificate uses to impersonate `user` in
/// `groups` (what a pod's service-account token would authenticate as).
async fn impersonating_client(plane: &RealPlane, user: &str, groups: &[&str]) -> Client {
    let mut config = plane.config(plane.kubeconfig()).await.expect("kubeconfig");
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| (*g).to_string()).collect());
    client_from_config(config, &settings(false).client_options()).expect("impersonating client")
}

/// The impersonation of service account `name` in [`CHART_NS`], with the groups the API server gives a token.
async fn service_account_client(plane: &RealPlane, name: &str) -> Client {
    let user = format!("system:serviceaccount:{CHART_NS}:{name}");
    let ns_group = format!("system:serviceaccounts:{CHART_NS}");
    impersonating_client(plane, &user, &["system:serviceaccounts", &ns_group, "system:authenticated"]).await
}

/// Creates `obj` (a JSON object of a kind `ApiResource` names) through the dynamic API; one already there is
/// replaced by deleting it first, so a re-run starts from the chart's current rules.
async fn apply_object(client: &Client, obj: &Value) {
    let (api_version, kind) = (obj["apiVersion"].as_str().expect("apiVersion"), obj["kind"].as_str().expect("kind"));
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = format!("{}s", kind.to_ascii_lowercase());
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(group, version, kind),
        &plural,
    );
    let api: Api<kube::core::DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let object: kube::core::DynamicObject = serde_json::from_value(obj.clone()).expect("object");
    let name = object.name_any();
    let _ = api.delete(&name, &DeleteParams::default()).await;
    api.create(&PostParams::default(), &object).await.unwrap_or_else(|e| panic!("create {kind} {name}: {e}"));
}

/// Deletes what [`apply_object`] created.
async fn delete_object(client: &Client, obj: &Value) {
    let (api_version, kind) = (obj["apiVersion"].as_str().unwrap_or("v1"), obj["kind"].as_str().unwrap_or_default());
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(group, version, kind),
        &format!("{}s", kind.to_ascii_lowercase()),
    );
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<kube::core::DynamicObject> = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let _ = api.delete(name, &DeleteParams::default()).await;
}

/// The controller's log lines since `mark` that report a refusal (a 403 says `forbidden`).
fn refusals(env: &Env, mark: u64) -> Vec<String> {
    let lines = env.log_since(mark).into_iter().map(|l| Value::Object(l).to_string());
    lines.filter(|l| l.to_ascii_lowercase().contains("forbidden")).collect()
}

/// `GET path` on `addr` over plain HTTP/1.0: the status line and the body.
async fn http_get(addr: SocketAddr, path: &str) -> (String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
    sock.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes()).await.expect("request");
    let mut response = String::new();
    sock.read_to_string(&mut response).await.expect("response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

/// The controller under the chart's RBAC instead of cluster-admin. The chart is rendered by a real Helm with its
/// defaults; its ServiceAccount, ClusterRoles, Roles and bindings are applied, plus the test-only kwok role
/// ([`KWOK_TEST_ROLE`]); then everything Karpenter does here goes through a client impersonating that service
/// account, with the settings the rendered Deployment's environment gives (leader election on, in the release
/// namespace):
/// - the AWS provider's kube-dns read (`karpenter_aws::discovery::kube_dns_ip`) returns the Service's ClusterIP
///   (and a service account without the chart's grants reads nothing: the check can fail);
/// - the EC2NodeClass status controller validates a class, reports its conditions, emits its Warning event and
///   removes its finalizer on deletion;
/// - a Manager with the kwok provider takes the leader Lease, reports ready (its CRD check), provisions, consolidates
///   (drain by eviction) and drains through a PodDisruptionBudget; every NodeClaim and Node is finalized.
///
/// No controller log line while it runs may mention `forbidden`: a grant the code needs and the chart lacks shows
/// up there (a watch that cannot list, a write refused) or as a scenario that never completes.
async fn chart_rbac(env: &Env) {
    use futures::FutureExt as _;
    let Some(helm) = helm_binary() else { return };
    let docs = render_chart(&helm);
    let rbac: Vec<&Value> = docs.iter().filter(|d| RBAC_KINDS.iter().any(|k| d["kind"] == *k)).collect();
    let kinds: BTreeSet<&str> = rbac.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds.len(), RBAC_KINDS.len(), "the chart renders every RBAC kind: {kinds:?}");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": CHART_NS}})).expect("namespace");
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create namespace {CHART_NS}: {e}"),
    }
    let subject = json!([{"kind": "ServiceAccount", "name": CHART_SA, "namespace": CHART_NS}]);
    let kwok_role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": KWOK_TEST_ROLE},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
            {"apiGroups": ["karpenter.kwok.sh"], "resources": ["kwoknodeclasses"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["karpenter.kwok.sh"], "resources": ["kwoknodeclasses/status"], "verbs": ["patch"]},
        ],
    });
    let kwok_binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": KWOK_TEST_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KWOK_TEST_ROLE},
        "subjects": subject,
    });
    let mut applied: Vec<Value> = rbac.iter().map(|d| (*d).clone()).collect();
    applied.push(kwok_role);
    applied.push(kwok_binding);
    for obj in &applied {
        apply_object(&env.client, obj).await;
    }
    let client = service_account_client(&env.plane, CHART_SA).await;
    env.eventually("the chart's bindings in force", Duration::from_secs(30), || async {
        Api::<Node>::all(client.clone()).list(&ListParams::default().limit(1)).await.ok().map(|_| ())
    })
    .await;

    // The AWS provider's kube-dns read, without the chart's grants (the check can fail: that read logs a refusal,
    // before `mark`) and with them.
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(env.client.clone(), "kube-system");
    let dns: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
        "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
        "spec": {"selector": {"k8s-app": "kube-dns"},
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]},
    }))
    .expect("service");
    let _ = services.delete("kube-dns", &DeleteParams::default()).await;
    let dns = services.create(&PostParams::default(), &dns).await.expect("create kube-dns");
    let ip = dns.spec.and_then(|s| s.cluster_ip).expect("a ClusterIP");
    let stranger = service_account_client(&env.plane, "not-karpenter").await;
    assert_eq!(karpenter_aws::discovery::kube_dns_ip(&stranger).await, None, "no grant, no read");
    let mark = env.log_mark();
    assert_eq!(karpenter_aws::discovery::kube_dns_ip(&client).await, Some(ip), "kube-dns read under the chart");

    // The EC2NodeClass status controller.
    install_ec2nodeclass_crd(env).await;
    let classes: Api<karpenter_aws::api::EC2NodeClass> = Api::all(env.client.clone());
    let class = |name: &str, kubelet: Value| -> karpenter_aws::api::EC2NodeClass {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": name},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"tags": {"k": "v"}}], "securityGroupSelectorTerms": [{"tags": {"k": "v"}}],
                     "kubelet": kubelet}
        }))
        .expect("EC2NodeClass")
    };
    let cases = [("rbac-valid", json!({"maxPods": 110})), ("rbac-invalid", json!({"maxPods": -1}))];
    for (name, kubelet) in &cases {
        let _ = classes.delete(name, &DeleteParams::default()).await;
        classes.create(&PostParams::default(), &class(name, kubelet.clone())).await.expect("create EC2NodeClass");
    }
    let controller = ec2_node_class_controller_on(client.clone());
    for (name, _) in &cases {
        controller.reconcile(name).await.unwrap_or_else(|e| panic!("{name}: reconcile under the chart's RBAC: {e}"));
        let c = classes.get(name).await.expect(name);
        let v = c.status.as_ref().and_then(|s| s.condition("ValidationSucceeded")).cloned();
        let v = v.unwrap_or_else(|| panic!("{name}: status written under the chart's RBAC"));
        assert_eq!(v.reason == "InvalidKubeletConfiguration", *name == "rbac-invalid", "{name}: {}", v.message);
    }
    let events: Api<CoreEvent> = Api::namespaced(env.client.clone(), "default");
    env.eventually("the invalid class's Warning event", Duration::from_secs(10), || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        list.iter()
            .any(|e| {
                e.reason.as_deref() == Some("InvalidKubeletConfiguration")
                    && e.involved_object.name.as_deref() == Some("rbac-invalid")
            })
            .then_some(())
    })
    .await;
    for (name, _) in &cases {
        classes.delete(name, &DeleteParams::default()).await.expect("delete EC2NodeClass");
        controller.reconcile(name).await.unwrap_or_else(|e| panic!("{name}: finalize under the chart's RBAC: {e}"));
        env.eventually(&format!("EC2NodeClass {name} gone"), Duration::from_secs(10), || async {
            classes.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }

    // The Manager with the kwok provider, with the chart's settings.
    env.stop_main().await;
    let flags = chart_core_flags(&docs);
    eprintln!("real plane: chart-rbac: controller flags from the chart: {flags:?}");
    for setting in ["--feature-gates=", "--ignore-dra-requests="] {
        assert!(flags.iter().any(|f| f.starts_with(setting)), "the chart sets {setting}: {flags:?}");
    }
    let namespace_flag = format!("--system-namespace={CHART_NS}");
    let mut args = vec![
        "karpenter-controller",
        "--metrics-port=0",
        "--health-probe-port=0",
        "--batch-idle-duration=1s",
        "--batch-max-duration=3s",
        &namespace_flag,
    ];
    args.extend(flags.iter().map(String::as_str));
    let settings = SettingsCli::try_parse_from(args).expect("the chart's settings parse").core;
    let background = CancellationToken::new();
    let node_classes = KubeNodeClasses::new();
    node_classes.start::<KWOKNodeClass>(client.clone(), background.clone()).await.expect("node classes, as the chart");
    let kwok = KwokCloudProvider::new(
        client.clone(),
        KwokOptions { node_classes: Some(Arc::new(node_classes.clone())), ..KwokOptions::default() },
    );
    let manager = Manager::new(settings, client.clone(), Arc::new(kwok), Arc::new(node_classes), Arc::new(SystemClock))
        .with_node_class_registrations([kwok_node_class_registration()])
        .with_bind_ip(IpAddr::V4(Ipv4Addr::LOCALHOST))
        .with_identity("chart-rbac")
        .with_disruption_settings(disruption_settings());
    let shutdown = CancellationToken::new();
    let metrics_addr = Arc::new(OnceLock::new());
    let probes_addr = Arc::new(OnceLock::new());
    let (m, p) = (metrics_addr.clone(), probes_addr.clone());
    let task = tokio::spawn(manager.run_with(shutdown.clone(), move |started| {
        let _ = m.set(started.metrics_addr);
        let _ = p.set(started.probes_addr);
    }));
    let running = Running { shutdown, task, metrics_addr };
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), CHART_NS);
    env.eventually("the leader Lease in the release namespace", Duration::from_secs(30), || async {
        let lease = leases.get_opt("karpenter-leader-election").await.ok()??;
        lease.spec?.holder_identity.filter(|h| h.starts_with("chart-rbac")).map(|_| ())
    })
    .await;
    env.eventually("/readyz answers 200", Duration::from_secs(60), || async {
        let addr = *probes_addr.get()?;
        http_get(addr, "/readyz").await.0.contains(" 200").then_some(())
    })
    .await;
    for name in ["provisioning", "consolidation", "pdb-blocked-drain"] {
        let (_, scenario) = SCENARIOS.iter().find(|(n, _)| *n == name).expect("a scenario");
        let t = Stopwatch::start();
        // A refused request mostly shows as a scenario that never completes: say which, then fail as it did.
        if let Err(panic) = std::panic::AssertUnwindSafe(scenario(env)).catch_unwind().await {
            let refused = refusals(env, mark);
            eprintln!("real plane: chart-rbac: {name} failed; refused under the chart's RBAC:\n{}", refused.join("\n"));
            std::panic::resume_unwind(panic);
        }
        env.cleanup(&format!("chart-rbac: {name}")).await;
        eprintln!("real plane: chart-rbac: {name} passed in {:.1}s", t.elapsed().as_secs_f64());
    }
    let refused = refusals(env, mark);
    env.assert_quiet("chart-rbac", mark, None);
    running.stop().await;
    background.cancel();
    assert!(refused.is_empty(), "the chart's RBAC refused the controller:\n{}", refused.join("\n"));

    let _ = services.delete("kube-dns", &DeleteParams::default()).await;
    for obj in applied.iter().rev() {
        delete_object(&env.client, obj).await;
    }
    let _ = leases.delete("karpenter-leader-election", &DeleteParams::default()).await;
    env.restore_main();
}

// ------------------------------------------------------------------------------------------------ metrics

/// What a run's scrapes of `/metrics` saw: sample name → the sets of label names its samples carried.
type SeenSamples = BTreeMap<String, BTreeSet<BTreeSet<String>>>;

/// Labels a dashboard may match on or group by that Prometheus attaches at scrape or query time, never the
/// exporter: `job` (the scrape job; the chart's ServiceMonitor names it after the Service, `karpenter`) and
/// `cluster` (an external label of multi-cluster setups; without it, `by (cluster)` makes one group).
const SCRAPE_LABELS: &[&str] = &["job", "cluster"];

/// Metrics dashboards read that another exporter serves, with the exporter: the real-plane run cannot hold them.
const OTHER_EXPORTERS: &[(&str, &str)] =
    &[("node_time_seconds", "node-exporter"), ("node_boot_time_seconds", "node-exporter")];

/// Labels upstream's own dashboards group by that upstream Karpenter does not serve on that metric either
/// (`crates/karpenter-runtime/src/metrics_upstream/v1.15.txt` lists its labels; a test holds this list against
/// it): (metric, label). Grouping by an absent label makes one group, so those panels still draw.
const UPSTREAM_DASHBOARD_GAPS: &[(&str, &str)] = &[("karpenter_voluntary_disruption_decisions_total", "nodepool")];

/// The dashboards whose facts the `metrics` scenario holds against `/metrics` (written by
/// tools/dashboard-facts.py): upstream's getting-started dashboards and ours in docs/dashboards/.
const DASHBOARD_FIXTURES: &[(&str, &str)] = &[
    ("upstream-dashboards.txt", include_str!("fixtures/upstream-dashboards.txt")),
    ("our-dashboards.txt", include_str!("fixtures/our-dashboards.txt")),
];

/// Controllers the `metrics` scenario's scale-out, consolidation, drift and deletions drive, by the `name` of their
/// workqueue series (upstream's controller names): each must have counted adds.
const QUEUED_CONTROLLERS: &[&str] = &[
    "provisioner",
    "disruption",
    "nodeclaim.lifecycle",
    "node.termination",
    "nodeclaim.disruption",
    "nodeclaim.consistency",
    "nodeclaim.expiration",
    "nodepool.counter",
    "nodepool.hash",
    "nodepool.readiness",
    "nodepool.validation",
];

/// Adds the samples of one exposition (Prometheus or OpenMetrics text) to `seen`. Label values are read as
/// quoted strings with escapes, so a `,` or `}` inside a value does not cut it.
fn record_samples(text: &str, seen: &mut SeenSamples) -> Result<(), String> {
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let name_end = line.find(['{', ' ']).ok_or_else(|| format!("no value: {line:?}"))?;
        let (name, mut rest) = line.split_at(name_end);
        let mut labels = BTreeSet::new();
        if let Some(body) = rest.strip_prefix('{') {
            rest = body;
            loop {
                rest = rest.trim_start_matches(',');
                if let Some(after) = rest.strip_prefix('}') {
                    rest = after;
                    break;
                }
                let (label, after) =
                    rest.split_once("=\"").ok_or_else(|| format!("a label without a value: {line:?}"))?;
                labels.insert(label.to_string());
                let mut chars = after.char_indices();
                let mut end = None;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => {
                            end = Some(i);
                            break;
                        }
                        _ => {}
                    }
                }
                let end = end.ok_or_else(|| format!("an unterminated label value: {line:?}"))?;
                rest = &after[end + 1..];
            }
        }
        if rest.split_whitespace().next().is_none() {
            return Err(format!("no value: {line:?}"));
        }
        seen.entry(name.to_string()).or_default().insert(labels);
    }
    Ok(())
}

/// The sample a declared family shows when it has data: a histogram its `_count`, others their own name.
fn family_sample(d: &karpenter_operator::metrics::MetricDescriptor) -> String {
    match d.kind {
        karpenter_operator::metrics::MetricType::Histogram | karpenter_operator::metrics::MetricType::Summary => {
            format!("{}_count", d.name)
        }
        _ => d.name.clone(),
    }
}

/// Every declared family (`Metrics::descriptors`) without a sample in `seen`, but for the fault-path families
/// and the families not sampled on the kwok plane, both listed beside the declaration.
fn families_without_samples(seen: &SeenSamples) -> Vec<String> {
    let exempt: BTreeSet<&str> = karpenter_operator::metrics::FAULT_PATH_FAMILIES
        .iter()
        .chain(karpenter_operator::metrics::NOT_SAMPLED_ON_THE_KWOK_PLANE)
        .map(|(n, _)| *n)
        .collect();
    karpenter_operator::metrics::Metrics::descriptors()
        .iter()
        .filter(|d| !exempt.contains(d.name.as_str()) && !seen.contains_key(&family_sample(d)))
        .map(|d| d.name.clone())
        .collect()
}

/// One line of a dashboard-facts fixture: a metric a panel reads and the labels it matches on or groups by.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DashboardFact {
    metric: String,
    labels: BTreeSet<String>,
    /// `<dashboard file> / <panel title>`.
    source: String,
}

fn dashboard_facts(fixture: &str) -> Result<Vec<DashboardFact>, String> {
    fixture
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let [metric, labels, file, panel] = line.split('\t').collect::<Vec<_>>()[..] else {
                return Err(format!("not four tab-separated fields: {line:?}"));
            };
            let labels = labels.split(',').filter(|l| *l != "-" && !l.is_empty()).map(str::to_owned).collect();
            Ok(DashboardFact { metric: metric.to_owned(), labels, source: format!("{file} / {panel}") })
        })
        .collect()
}

/// The facts `seen` does not bear out, one message each: a metric without samples, or no sample carrying every
/// label the panel matches on or groups by (scrape-time labels and other exporters' metrics left out).
fn unmet_dashboard_facts(facts: &[DashboardFact], seen: &SeenSamples) -> Vec<String> {
    let mut out = Vec::new();
    for fact in facts {
        if OTHER_EXPORTERS.iter().any(|(m, _)| *m == fact.metric) {
            continue;
        }
        let needed: BTreeSet<&str> = fact
            .labels
            .iter()
            .map(String::as_str)
            .filter(|l| !SCRAPE_LABELS.contains(l) && !UPSTREAM_DASHBOARD_GAPS.contains(&(fact.metric.as_str(), *l)))
            .collect();
        let Some(samples) = seen.get(&fact.metric) else {
            // A summary's quantiles read where a histogram is served: say so, the fix is the type.
            let histogram = seen.contains_key(&format!("{}_bucket", fact.metric));
            let why = if histogram {
                " (served as a histogram: _bucket, _sum, _count; the panel reads a summary)"
            } else {
                ""
            };
            out.push(format!("{}: {} has no samples{why}", fact.source, fact.metric));
            continue;
        };
        if !samples.iter().any(|labels| needed.iter().all(|l| labels.contains(*l))) {
            let missing: BTreeSet<&str> =
                needed.iter().copied().filter(|l| !samples.iter().any(|s| s.contains(*l))).collect();
            out.push(format!(
                "{}: no {} sample carries all of {needed:?} (never seen: {missing:?})",
                fact.source, fact.metric
            ));
        }
    }
    out
}

/// `/metrics` at `addr`, or `None` when it does not answer 200 within a few seconds.
async fn scrape(addr: SocketAddr) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let get = async {
        let mut sock = tokio::net::TcpStream::connect(addr).await.ok()?;
        sock.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.ok()?;
        let mut response = String::new();
        sock.read_to_string(&mut response).await.ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        head.lines().next()?.contains(" 200").then(|| body.to_string())
    };
    tokio::time::timeout(Duration::from_secs(5), get).await.ok().flatten()
}

/// After a scale-out, a consolidation and a drift, every declared metric family has had samples (scraped every
/// half second through the run, so families that exist only while something is pending count too), and every
/// fact of upstream's dashboards and ours holds on them. One failure lists everything missing.
///
/// The manager runs with cluster limits and the pod deletion-cost gate on, so the families behind them are
/// recorded.
async fn metrics(env: &Env) {
    env.stop_main().await;
    let flags = ["--cluster-limits=cpu=1000,nodes=100", "--feature-gates=PodDeletionCostManagement=true"];
    let main = env.start_manager_with(env.controller_client.clone(), "metrics", settings_with(false, &flags), true);
    let addr = main.metrics_addr.clone();
    *env.main.lock().expect("main") = Some(main);
    let addr = env
        .eventually("the metrics manager's /metrics listening", Duration::from_secs(30), || async {
            addr.get().copied()
        })
        .await;
    let seen = Arc::new(Mutex::new(SeenSamples::new()));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = CancellationToken::new();
    let scraper = {
        let (seen, errors, stop) = (seen.clone(), errors.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                if let Some(text) = scrape(addr).await {
                    let mut seen = seen.lock().expect("seen");
                    if let Err(e) = record_samples(&text, &mut seen) {
                        errors.lock().expect("errors").push(e);
                    }
                }
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        })
    };

    // Scale-out: four 900m pods on two 2-CPU nodes, under NodePool limits (karpenter_nodepools_limit), with a
    // DaemonSet's pod on each node (karpenter_nodes_total_daemon_*).
    let disruption = json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s",
        "budgets": [{"nodes": "100%"}]});
    env.pool("default", json!({"disruption": disruption, "limits": {"cpu": "1000", "memory": "1000Gi"}})).await;
    let daemons: Api<DaemonSet> = Api::namespaced(env.client.clone(), NS);
    let daemon: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "daemon", "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "daemon"}},
            "template": {
                "metadata": {"labels": {"app": "daemon"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10", "resources": {
                        "requests": {"cpu": "10m", "memory": "16Mi"},
                        "limits": {"cpu": "50m", "memory": "32Mi"}}}],
                },
            },
        },
    }))
    .expect("daemonset json");
    daemons.create(&PostParams::default(), &daemon).await.expect("create daemonset");
    env.deployment("web", 4, "900m", json!({})).await;
    env.running("web", 4, Duration::from_secs(60)).await;
    // Consolidation: one pod left, one node.
    env.scale("web", 1).await;
    env.eventually("consolidated to one node", Duration::from_secs(120), || async {
        let one = env.list_claims().await.len() == 1 && env.list_nodes().await.len() == 1;
        (one && env.consistent().await).then_some(())
    })
    .await;
    // Drift: a template label replaces the node.
    let original = claim_names(&env.list_claims().await);
    let patch = json!({"spec": {"template": {"metadata": {"labels": {"team": "blue"}}}}});
    env.pools().patch("default", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch pool");
    env.eventually("the drifted node replaced", Duration::from_secs(120), || async {
        let claims = env.list_claims().await;
        let replaced = !claims.is_empty() && claim_names(&claims).is_disjoint(&original);
        (replaced && env.consistent().await).then_some(())
    })
    .await;
    env.running("web", 1, Duration::from_secs(60)).await;
    env.eventually("a DaemonSet pod running on the replacement", Duration::from_secs(60), || async {
        let pods = env.list_pods("app=daemon").await;
        pods.iter()
            .any(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .then_some(())
    })
    .await;
    // A NodePool deleted while a finalizer of ours holds it: operator_nodepool_termination_current_time_seconds
    // while it is held, operator_nodepool_termination_duration_seconds once it is gone (upstream records both for
    // any object of the kind; nothing of Karpenter's holds a NodePool).
    env.pool("held", json!({"limits": {"cpu": "0"}})).await;
    let hold = json!({"metadata": {"finalizers": ["karpenter-rs.test/hold"]}});
    env.pools().patch("held", &PatchParams::default(), &Patch::Merge(&hold)).await.expect("hold the pool");
    env.pools().delete("held", &DeleteParams::default()).await.expect("delete the held pool");
    let held = env
        .eventually("the held NodePool's termination timed", Duration::from_secs(30), || async {
            let text = scrape(addr).await?;
            text.contains("operator_nodepool_termination_current_time_seconds{name=\"held\"").then_some(text)
        })
        .await;
    // The background scraper may fall between the two writes: this scrape counts as one of its.
    record_samples(&held, &mut seen.lock().expect("seen")).expect("the scrape parses");
    let release = json!({"metadata": {"finalizers": null}});
    env.pools().patch("held", &PatchParams::default(), &Patch::Merge(&release)).await.expect("release the pool");
    env.eventually("the held NodePool's termination observed", Duration::from_secs(30), || async {
        let text = scrape(addr).await?;
        let gone = !text.contains("operator_nodepool_termination_current_time_seconds{name=\"held\"");
        let observed = text
            .lines()
            .any(|l| l.starts_with("operator_nodepool_termination_duration_seconds_count") && l.ends_with(" 1"));
        (gone && observed).then_some(())
    })
    .await;

    stop.cancel();
    scraper.await.expect("scraper");
    let last = scrape(addr).await.expect("a last scrape of /metrics");
    let mut seen = Arc::try_unwrap(seen).expect("the scraper is done").into_inner().expect("seen");
    record_samples(&last, &mut seen).expect("the last scrape parses");
    let errors = errors.lock().expect("errors").clone();
    daemons.delete("daemon", &DeleteParams::default()).await.expect("delete daemonset");
    env.stop_main().await;
    env.restore_main();

    // client-go's workqueue per controller: each controller this run drives queued work, kube-runtime's
    // (lifecycle, termination, the NodeClaim and NodePool controllers) as well as the periodic loops.
    let unqueued: Vec<&str> = QUEUED_CONTROLLERS
        .iter()
        .copied()
        .filter(|c| !metric_sum(&last, "workqueue_adds_total", &[("name", c)]).is_some_and(|n| n > 0.0))
        .collect();
    assert!(unqueued.is_empty(), "controllers with no workqueue_adds_total in this run: {unqueued:?}");

    let missing = families_without_samples(&seen);
    // The list of families this run does not sample only shrinks: one that shows a sample leaves it.
    let sampled_but_listed: Vec<&str> = karpenter_operator::metrics::Metrics::descriptors()
        .iter()
        .filter(|d| seen.contains_key(&family_sample(d)))
        .filter_map(|d| {
            karpenter_operator::metrics::NOT_SAMPLED_ON_THE_KWOK_PLANE
                .iter()
                .find(|(n, why)| *n == d.name && !why.starts_with("transient:"))
                .map(|(n, _)| *n)
        })
        .collect();
    assert!(
        sampled_but_listed.is_empty(),
        "sampled, so take them out of NOT_SAMPLED_ON_THE_KWOK_PLANE: {sampled_but_listed:?}"
    );
    let mut unmet = Vec::new();
    for (fixture, text) in DASHBOARD_FIXTURES {
        let facts = dashboard_facts(text).unwrap_or_else(|e| panic!("{fixture}: {e}"));
        unmet.extend(unmet_dashboard_facts(&facts, &seen).into_iter().map(|u| format!("{fixture}: {u}")));
    }
    eprintln!(
        "real plane: metrics: {} sample names seen, {} declared families without samples, {} dashboard facts unmet",
        seen.len(),
        missing.len(),
        unmet.len()
    );
    assert!(
        errors.is_empty() && missing.is_empty() && unmet.is_empty(),
        "/metrics after a scale-out, a consolidation and a drift:\n\
         unreadable scrapes: {errors:#?}\n\
         {} declared families without a sample:\n  {}\n\
         {} dashboard facts unmet:\n  {}",
        missing.len(),
        missing.join("\n  "),
        unmet.len(),
        unmet.join("\n  ")
    );
}

#[test]
fn samples_are_read_with_their_label_names() {
    let text = "# TYPE a counter\na_total{x=\"1,}\\\"\",y=\"\"} 3\nb 1.5\nh_bucket{le=\"+Inf\"} 2 1700000000\n# EOF\n";
    let mut seen = SeenSamples::new();
    record_samples(text, &mut seen).expect("parses");
    let names = |v: &[&str]| v.iter().map(|s| (*s).to_string()).collect::<BTreeSet<_>>();
    assert_eq!(seen["a_total"], BTreeSet::from([names(&["x", "y"])]));
    assert_eq!(seen["b"], BTreeSet::from([names(&[])]));
    assert_eq!(seen["h_bucket"], BTreeSet::from([names(&["le"])]));
    assert!(record_samples("c{x=\"open} 1\n", &mut seen).is_err());
    assert!(record_samples("d\n", &mut seen).is_err());
}

#[test]
fn declared_families_without_samples_are_all_named() {
    let metrics = karpenter_operator::metrics::Metrics::new(&karpenter_operator::metrics::BuildInfo::default());
    metrics.nodeclaims_created("provisioned", "default", "false").inc();
    metrics.nodes_termination_duration_seconds("default").observe(1.0);
    let mut seen = SeenSamples::new();
    record_samples(&metrics.render(), &mut seen).expect("our exposition parses");
    let missing = families_without_samples(&seen);
    for present in
        ["karpenter_build_info", "karpenter_nodeclaims_created_total", "karpenter_nodes_termination_duration_seconds"]
    {
        assert!(!missing.iter().any(|m| m == present), "{present} has a sample");
    }
    for absent in ["karpenter_nodes_created_total", "karpenter_pods_startup_duration_seconds"] {
        assert!(missing.iter().any(|m| m == absent), "{absent} has none");
    }
    let declared = karpenter_operator::metrics::Metrics::descriptors().len();
    let exempt = karpenter_operator::metrics::FAULT_PATH_FAMILIES.len()
        + karpenter_operator::metrics::NOT_SAMPLED_ON_THE_KWOK_PLANE.len();
    assert_eq!(missing.len() + 3, declared - exempt, "every other family is named");
    for (family, _) in karpenter_operator::metrics::NOT_SAMPLED_ON_THE_KWOK_PLANE {
        assert!(
            karpenter_operator::metrics::Metrics::descriptors().iter().any(|d| d.name == *family),
            "{family} is not declared"
        );
    }
}

/// Each fault-path family exempted from the `metrics` scenario is a declared family (a renamed one would
/// silently stop being checked) and names the unit test that provokes it.
#[test]
fn fault_path_exemptions_name_declared_families_and_their_tests() {
    let declared: BTreeSet<String> =
        karpenter_operator::metrics::Metrics::descriptors().into_iter().map(|d| d.name).collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (family, test) in karpenter_operator::metrics::FAULT_PATH_FAMILIES {
        assert!(declared.contains(*family), "{family} is not declared");
        let (krate, name) = match (test.split_once("::"), test.rsplit_once("::")) {
            (Some((krate, _)), Some((_, name))) => (krate, name),
            _ => panic!("{family}: name the unit test as a path (crate::module::test), got {test:?}"),
        };
        let src = root.join("crates").join(krate.replace('_', "-")).join("src");
        let needle = format!("fn {name}(");
        assert!(
            rust_sources(&src).iter().any(|text| text.contains(&needle)),
            "{family}: no `{needle}` under {}",
            src.display()
        );
    }
}

/// The text of every `.rs` file under `dir`.
fn rust_sources(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.extend(std::fs::read_to_string(&path).ok());
        }
    }
    out
}

#[test]
fn dashboard_facts_hold_only_on_samples_with_their_labels() {
    let facts = dashboard_facts(
        "# header\n\
         m_total\tcluster,nodepool\td.json\tNodes\n\
         h_bucket\tquantile\td.json\tLatency\n\
         gone\t-\td.json\tGone\n\
         node_time_seconds\tnode\td.json\tUptime\n\
         lat\tquantile\td.json\tP99\n",
    )
    .expect("a fixture");
    assert_eq!(facts.len(), 5);
    assert_eq!(facts[0].labels, BTreeSet::from(["cluster".to_string(), "nodepool".to_string()]));
    assert_eq!(facts[0].source, "d.json / Nodes");
    let mut seen = SeenSamples::new();
    record_samples("m_total{nodepool=\"a\"} 1\nh_bucket{le=\"1\"} 1\nlat_bucket{le=\"1\"} 1\n", &mut seen)
        .expect("parses");
    let unmet = unmet_dashboard_facts(&facts, &seen);
    // `cluster` is Prometheus's, node-exporter's metric is not ours; the summary label, the absent metric and the
    // summary read where a histogram is served fail.
    assert_eq!(unmet.len(), 3, "{unmet:#?}");
    assert!(unmet[0].contains("h_bucket") && unmet[0].contains("quantile"), "{}", unmet[0]);
    assert!(unmet[1].contains("gone has no samples"), "{}", unmet[1]);
    assert!(unmet[2].contains("lat has no samples (served as a histogram"), "{}", unmet[2]);
    assert!(dashboard_facts("a\tb\n").is_err());
}

/// Each gap of upstream's dashboards is one upstream has too: its v1.15 list serves the metric without the label.
#[test]
fn upstream_dashboard_gaps_are_upstreams_own() {
    let list = include_str!("../../../crates/karpenter-runtime/src/metrics_upstream/v1.15.txt");
    for (metric, label) in UPSTREAM_DASHBOARD_GAPS {
        let line = list
            .lines()
            .find(|l| l.split_whitespace().next() == Some(*metric))
            .unwrap_or_else(|| panic!("{metric} is not in upstream's list"));
        let labels = line.split_whitespace().nth(2).unwrap_or_default();
        assert!(!labels.split(',').any(|l| l == *label), "upstream serves {metric} with {label}: {line}");
    }
}

/// The exemptions of the dashboard check are in use: every scrape-time label and other exporter's metric is
/// read by some dashboard of the fixtures (a stale entry would hide nothing, but would claim a need).
#[test]
fn dashboard_exemptions_are_in_use() {
    let facts: Vec<DashboardFact> = DASHBOARD_FIXTURES
        .iter()
        .flat_map(|(n, t)| dashboard_facts(t).unwrap_or_else(|e| panic!("{n}: {e}")))
        .collect();
    for label in SCRAPE_LABELS {
        assert!(facts.iter().any(|f| f.labels.contains(*label)), "{label}");
    }
    for (metric, _) in OTHER_EXPORTERS {
        assert!(facts.iter().any(|f| f.metric == *metric), "{metric}");
    }
    for (metric, label) in UPSTREAM_DASHBOARD_GAPS {
        assert!(facts.iter().any(|f| f.metric == *metric && f.labels.contains(*label)), "{metric} by {label}");
    }
}

/// The fixtures are what tools/dashboard-facts.py reads from the dashboards: ours from docs/dashboards/*.json,
/// upstream's from aws/karpenter-provider-aws at the commit the fixture names (a git dir of it in
/// `UPSTREAM_AWS_GIT_DIR`, else the mirror beside the workspace when there is one). Needs python3.
#[test]
fn dashboard_fixtures_match_the_dashboards() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cmd = Command::new("python3");
    cmd.arg(root.join("tools/dashboard-facts.py")).arg("--check");
    let upstream = std::env::var_os("UPSTREAM_AWS_GIT_DIR")
        .map(PathBuf::from)
        .or_else(|| Some(root.join("../.mirror/aws+karpenter-provider-aws/repo")).filter(|p| p.is_dir()));
    match &upstream {
        Some(dir) => {
            cmd.arg("--upstream").arg(dir);
        }
        None => eprintln!("upstream-dashboards.txt not re-read: no UPSTREAM_AWS_GIT_DIR"),
    }
    let out = match cmd.output() {
        Ok(out) => out,
        Err(e) if !karpenter_testing::in_ci() => {
            eprintln!("skipped: python3 not runnable ({e})");
            return;
        }
        Err(e) => panic!("python3: {e}"),
    };
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}
