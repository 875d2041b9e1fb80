//! AWS nodes end to end on a real control plane (`karpenter_testing::realplane`: etcd, kube-apiserver,
//! kube-scheduler and kube-controller-manager v1.32.6), where a Node registers only when the real kubelet accepts
//! the user data its instance booted with.
//!
//! In this process, on the wall clock:
//! - the controller manager with the AWS provider (`AwsCloudProvider`) over the in-memory EC2 (`MockEc2`), the
//!   EC2NodeClasses watched by `KubeNodeClasses`;
//! - the EC2NodeClass status controller (`NodeClassController`) over the in-memory AWS (`MockAws`: subnets,
//!   security groups, the SSM parameters and images of the al2, al2023 and bottlerocket aliases, IAM), which
//!   resolves each class's status (subnets, security groups, AMIs, instance profile, Ready) as in a cluster;
//! - the AWS kubelet stand-in (`karpenter_aws::testing::aws_kubelet`): for each launched NodeClaim it reads the
//!   kubelet's flags and configuration from its instance's user data, asks the real kubelet
//!   (`karpenter_testing::kubelet_check`) and registers the Node only when the kubelet accepts them;
//! - the kwok crate's kubelet stand-in for every Node: Ready, Leases, pods Running.
//!
//! Scenarios, one after another: `families` (AL2, AL2023 and Bottlerocket side by side: pending pods → NodeClaims
//! → instances → the kubelet accepts → Nodes register → Registered, Initialized → pods Running; the
//! `node-role.kubernetes.io/worker` label of the NodePool on the Nodes, put there by Karpenter's registration and
//! never in user data; then the AWS provider's own series on the shared registry: EC2 request batches and the
//! `nodeclass` controller's reconciles and work queue) and `refusal` (user data the kubelet refuses never registers, the kubelet's message kept;
//! where the EC2NodeClass already reports such user data invalid, nothing launches).
//! `REAL_PLANE_AWS_SCENARIOS=refusal` runs a subset.
//!
//! Skipped (with the reason on stderr) where the plane or the kubelet judge is not installed; a failure under
//! `CI=true`. The managers' JSON logs go to `<state dir>.controller.log`.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use futures::FutureExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::condition::{ConditionStatus, Conditions};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_aws::api::EC2NodeClass;
use karpenter_aws::api::{Alias, AmiFamily};
use karpenter_aws::instancetypes::SharedPrices;
use karpenter_aws::launch::instance::ClusterInfo;
use karpenter_aws::launch::kubelet_inputs::KubeletInputs;
use karpenter_aws::launch::mock::{MockEc2, instance_type_info};
use karpenter_aws::nodeclass::api::{ImageDescription, SecurityGroupDescription, SubnetDescription};
use karpenter_aws::nodeclass::controller::{ApiServerVersion, NodeClassController};
use karpenter_aws::nodeclass::instance_profile::ClusterIdentity;
use karpenter_aws::nodeclass::mock::MockAws;
use karpenter_aws::nodeclass::{NodeClassResolver, ResolverSettings};
use karpenter_aws::pricing::{PriceSource, PriceTable};
use karpenter_aws::provider::{AwsCloudProvider, AwsCloudProviderOptions};
use karpenter_aws::testing::aws_kubelet::AwsKubelet;
use karpenter_cloudprovider::{Clock, SystemClock, TokioSleeper};
use karpenter_operator::CoreSettings;
use karpenter_operator::client::client_from_config;
use karpenter_operator::manager::{Manager, ManagerError};
use karpenter_operator::metrics::{BuildInfo, Metrics};
use karpenter_operator::node_classes::{KubeNodeClasses, NodeClassRegistration};
use karpenter_testing::Stopwatch;
use karpenter_testing::kubelet_check::KubeletCheck;
use karpenter_testing::realplane::{PlaneOptions, RealPlane};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const NS: &str = "default";
const POLL: Duration = Duration::from_millis(300);
const CLUSTER: &str = "test-cluster";
const REGION: &str = "us-west-2";
const ZONES: [&str; 2] = ["us-west-2a", "us-west-2b"];
/// The plane's Kubernetes minor: the SSM parameters of the aliases are seeded for it.
const K8S_MINOR: &str = "1.32";
const ROLE_LABEL: &str = "node-role.kubernetes.io/worker";
const TAINT_KEY: &str = "example.com/dedicated";

/// The families of `families`: (class, pool and app name; alias; family).
const FAMILIES: [(&str, &str, AmiFamily); 3] = [
    ("al2", "al2@latest", AmiFamily::Al2),
    ("al2023", "al2023@latest", AmiFamily::Al2023),
    ("bottlerocket", "bottlerocket@latest", AmiFamily::Bottlerocket),
];

type Scenario = for<'a> fn(&'a Env) -> futures::future::LocalBoxFuture<'a, ()>;

const SCENARIOS: &[(&str, Scenario)] =
    &[("families", |e| families(e).boxed_local()), ("refusal", |e| refusal(e).boxed_local())];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_plane_aws() {
    let started = Stopwatch::start();
    let options =
        PlaneOptions { controller_manager_args: Some("--node-monitor-period=1s".into()), ..PlaneOptions::default() };
    let Some(plane) = tokio::task::block_in_place(|| karpenter_testing::realplane::require_with(options)) else {
        return;
    };
    let Some(judge) = KubeletCheck::require() else { return };
    let selected: Option<BTreeSet<String>> = std::env::var("REAL_PLANE_AWS_SCENARIOS")
        .ok()
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.split(',').map(|x| x.trim().to_owned()).collect());
    let env = Env::new(plane, judge).await;
    eprintln!("real plane aws: set up in {:.1}s", started.elapsed().as_secs_f64());
    for (name, scenario) in SCENARIOS {
        if selected.as_ref().is_some_and(|s| !s.contains(*name)) {
            continue;
        }
        let t = Stopwatch::start();
        scenario(&env).await;
        env.cleanup(name).await;
        eprintln!("real plane aws: {name} passed in {:.1}s", t.elapsed().as_secs_f64());
    }
    env.stop().await;
    drop(env);
    eprintln!("real plane aws: all scenarios in {:.1}s", started.elapsed().as_secs_f64());
}

// ------------------------------------------------------------------------------------------------ harness

#[derive(Parser)]
struct SettingsCli {
    #[command(flatten)]
    core: CoreSettings,
}

fn core_settings(flags: &[&str]) -> CoreSettings {
    let mut args = vec!["karpenter-controller"];
    args.extend_from_slice(flags);
    SettingsCli::try_parse_from(args).expect("settings parse").core
}

/// The controller's settings here: one manager (no leader election), short batches, servers on ephemeral ports.
fn settings() -> CoreSettings {
    core_settings(&[
        "--disable-leader-election",
        "--metrics-port=0",
        "--health-probe-port=0",
        "--batch-idle-duration=1s",
        "--batch-max-duration=3s",
    ])
}

/// The in-memory AWS the EC2NodeClass status controller resolves against: two zones of subnets and a security
/// group tagged for discovery, and for every alias of [`FAMILIES`] its SSM parameters with an image each.
fn aws_world() -> Arc<MockAws> {
    let aws = Arc::new(MockAws::new());
    let discovery: BTreeMap<String, String> = [("karpenter.sh/discovery".to_owned(), CLUSTER.to_owned())].into();
    aws.with(|w| {
        w.subnets = ZONES
            .iter()
            .enumerate()
            .map(|(i, zone)| SubnetDescription {
                subnet_id: format!("subnet-{i}"),
                availability_zone: (*zone).to_owned(),
                availability_zone_id: Some(format!("usw2-az{}", i + 1)),
                available_ip_address_count: 1000,
                vpc_id: Some("vpc-1".into()),
                tags: discovery.clone(),
            })
            .collect();
        w.security_groups = vec![SecurityGroupDescription {
            group_id: "sg-nodes".into(),
            group_name: "nodes".into(),
            vpc_id: Some("vpc-1".into()),
            tags: discovery.clone(),
        }];
        for (name, alias, _) in FAMILIES {
            let alias: Alias = alias.parse().expect("alias");
            let params = karpenter_aws::nodeclass::ami::alias_parameters(&alias, K8S_MINOR).expect("alias parameters");
            for (i, p) in params.iter().enumerate() {
                let id = format!("ami-{name}-{i}");
                w.parameters.insert(p.path.clone(), id.clone());
                w.images.push(ImageDescription {
                    image_id: id.clone(),
                    name: Some(format!("{name}-{i}")),
                    architecture: if p.arch == "arm64" { "arm64" } else { "x86_64" }.into(),
                    creation_date: "2025-06-01T00:00:00.000Z".into(),
                    deprecation_time: None,
                    owner_id: Some("amazon".into()),
                    tags: BTreeMap::new(),
                });
            }
        }
    });
    aws
}

struct Env {
    /// The test's own client (admin): objects are created and checked through it.
    client: Client,
    /// The registry the manager, the provider and the EC2NodeClass controller record into.
    metrics: Arc<Metrics>,
    ec2: MockEc2,
    aws_kubelet: AwsKubelet,
    shutdown: CancellationToken,
    manager: tokio::sync::Mutex<Option<JoinHandle<Result<(), ManagerError>>>>,
    standins: Vec<JoinHandle<()>>,
    // Last: the plane stops after everything above is dropped.
    _plane: RealPlane,
}

impl Env {
    async fn new(plane: RealPlane, judge: KubeletCheck) -> Self {
        let log = plane.state_dir().with_extension("controller.log");
        let _ = std::fs::remove_file(&log);
        let log_settings = core_settings(&["--log-output-paths", &log.to_string_lossy()]);
        karpenter_operator::logging::init(&log_settings.log_config(), "real-plane-aws", Arc::new(SystemClock))
            .expect("logging");
        let client = plane.client().await.expect("client");
        install_crds(&client).await;
        let settings = settings();
        let config = plane.config(plane.kubeconfig()).await.expect("kubeconfig");
        let controller_client = client_from_config(config, &settings.client_options()).expect("controller client");
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let shutdown = CancellationToken::new();
        // One registry for the manager, the AWS provider and the EC2NodeClass controller, as `run --provider aws`
        // shares it: the scenarios read the AWS provider's own families from it.
        let metrics = Arc::new(Metrics::new(&BuildInfo::current("", "")));

        let node_classes = KubeNodeClasses::new();
        node_classes.start::<EC2NodeClass>(controller_client.clone(), shutdown.clone()).await.expect("node classes");

        // EC2 in memory: two instance types in both zones, priced on demand.
        let ec2 = MockEc2::new(clock.clone());
        let types = vec![instance_type_info("m5.large", 2, 8), instance_type_info("m5.xlarge", 4, 16)];
        let mut prices = PriceTable::default();
        prices.on_demand.insert("m5.large".into(), 0.096);
        prices.on_demand.insert("m5.xlarge".into(), 0.192);
        ec2.set_catalogue(types, &ZONES);
        let cluster = ClusterInfo {
            name: CLUSTER.into(),
            endpoint: plane.server_url(),
            ca_bundle: Some("Q0EtQlVORExF".into()),
            service_cidr: Some("10.100.0.0/16".into()),
            dns_ip: Some("10.100.0.10".into()),
        };
        let provider = AwsCloudProvider::new(
            ec2.apis(),
            Arc::new(node_classes.clone()),
            clock.clone(),
            Arc::new(TokioSleeper),
            SharedPrices::new(PriceSource::Table(prices)),
            AwsCloudProviderOptions::new(cluster.clone(), REGION),
        )
        .with_metrics(metrics.clone());
        provider.instance_type_provider().refresh().await.expect("instance-type catalogue");

        // The EC2NodeClass status controller over the in-memory AWS, as the binary wires it.
        let resolver_settings = ResolverSettings {
            cluster: ClusterIdentity { cluster_name: CLUSTER.into(), region: REGION.into() },
            service_cidr: cluster.service_cidr.clone(),
            ..ResolverSettings::default()
        };
        let resolver = NodeClassResolver::new(aws_world().resolver_apis(), resolver_settings, clock.clone())
            .with_instance_types(provider.instance_type_provider().clone());
        resolver.subnets.share_ips(provider.instance_provider().subnet_ips());
        let version = Arc::new(ApiServerVersion::new(controller_client.clone(), clock.clone()));
        let status = NodeClassController::new(
            controller_client.clone(),
            Arc::new(resolver),
            version,
            clock.clone(),
            cluster.ca_bundle.clone(),
        )
        .with_launch_template_cleanup(Arc::new(provider.launch_templates().clone()))
        .with_metrics(&metrics);

        let manager =
            Manager::new(settings, controller_client, Arc::new(provider), Arc::new(node_classes), clock.clone())
                .with_node_class_registrations([NodeClassRegistration::of::<EC2NodeClass>().with_status_metrics()])
                .with_metrics(metrics.clone())
                .with_bind_ip(IpAddr::V4(Ipv4Addr::LOCALHOST))
                .with_identity("real-plane-aws")
                .with_controller("aws.nodeclass", Arc::new(status).run(shutdown.clone()).boxed());
        let manager = tokio::spawn(manager.run(shutdown.clone()));

        // The stand-ins: the instances booting (only what the kubelet accepts registers), and every Node's kubelet.
        let aws_kubelet = AwsKubelet::new(client.clone(), ec2.clone(), judge);
        let kwok_kubelet = karpenter_kwok::kubelet::Kubelet::new(client.clone(), clock);
        let standins = vec![
            tokio::spawn(aws_kubelet.clone().run(Duration::from_millis(500))),
            tokio::spawn(kwok_kubelet.run(Duration::from_millis(500))),
        ];
        Self {
            client,
            metrics,
            ec2,
            aws_kubelet,
            shutdown,
            manager: tokio::sync::Mutex::new(Some(manager)),
            standins,
            _plane: plane,
        }
    }

    async fn stop(&self) {
        self.shutdown.cancel();
        if let Some(task) = self.manager.lock().await.take() {
            let result = tokio::time::timeout(Duration::from_secs(60), task).await.expect("manager stops");
            result.expect("manager task").expect("manager returns Ok on shutdown");
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope> + Clone + serde::de::DeserializeOwned,
        K::DynamicType: Default,
    {
        Api::all(self.client.clone())
    }
    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), NS)
    }
    fn deployments(&self) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn list<K>(&self) -> Vec<K>
    where
        K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        self.api::<K>().list(&ListParams::default()).await.map(|l| l.items).unwrap_or_default()
    }
    async fn list_pods(&self, selector: &str) -> Vec<Pod> {
        self.pods().list(&ListParams::default().labels(selector)).await.map(|l| l.items).unwrap_or_default()
    }

    async fn create<K>(&self, api: &Api<K>, value: Value) -> K
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
    {
        let object: K = serde_json::from_value(value).expect("object json");
        api.create(&PostParams::default(), &object).await.expect("create")
    }

    /// An EC2NodeClass `name` with the alias, the discovery selectors, a role and `extra`
    /// merged into its spec.
    async fn node_class(&self, name: &str, alias: &str, extra: Value) {
        let mut spec = json!({
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": alias}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        let class = json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                           "metadata": {"name": name}, "spec": spec});
        self.create(&self.api::<EC2NodeClass>(), class).await;
    }

    /// A NodePool `name` on EC2NodeClass `name`: template label [`ROLE_LABEL`]`=true`, taint
    /// [`TAINT_KEY`]`=<name>:NoSchedule`, on-demand amd64 m5 machines, no consolidation.
    async fn pool(&self, name: &str) {
        let pool = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
            "spec": {
                "template": {
                    "metadata": {"labels": {ROLE_LABEL: "true", "example.com/family": name}},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": name},
                        "taints": [{"key": TAINT_KEY, "value": name, "effect": "NoSchedule"}],
                        "requirements": [
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                        ],
                    },
                },
                "disruption": {"consolidateAfter": "Never"},
            },
        });
        self.create(&self.api::<NodePool>(), pool).await;
    }

    /// A Deployment `name` of `replicas` pods (`app=<name>`) for pool `name`: they select it and tolerate its taint.
    async fn deployment(&self, name: &str, replicas: i32) {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": {"karpenter.sh/nodepool": name},
                        "tolerations": [{"key": TAINT_KEY, "operator": "Equal", "value": name, "effect": "NoSchedule"}],
                        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}}}],
                    },
                },
            },
        });
        self.create(&self.deployments(), d).await;
    }

    /// Waits until `replicas` pods of `app` run (bound, Running, not terminating); returns pod → node.
    async fn running(&self, app: &str, replicas: usize, limit: Duration) -> BTreeMap<String, String> {
        self.eventually(&format!("{replicas} pods of {app} running"), limit, || async {
            let pods = self.list_pods(&format!("app={app}")).await;
            let live: Vec<&Pod> = pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
            let running: BTreeMap<String, String> = live
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .map(|p| (p.name_any(), p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()))
                .collect();
            (running.len() == replicas && live.len() == replicas).then_some(running)
        })
        .await
    }

    /// Polls `check` every [`POLL`] until it returns `Some`, for at most `limit`; panics with a summary.
    async fn eventually<T, F, Fut>(&self, what: &str, limit: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
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

    /// Checks that `check` stays true for `period`; panics with a summary when it does not.
    async fn stays(&self, what: &str, period: Duration, mut check: impl AsyncFnMut() -> bool) {
        let start = Stopwatch::start();
        while start.elapsed() < period {
            if !check().await {
                panic!("no longer true after {:?}: {what}\n{}", start.elapsed(), self.describe().await);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn describe(&self) -> String {
        let mut out = String::new();
        for c in self.list::<NodeClaim>().await {
            let conds: Vec<String> = c
                .status
                .as_ref()
                .map(|s| s.conditions.iter().map(|c| format!("{}={:?}({})", c.type_, c.status, c.reason)).collect())
                .unwrap_or_default();
            out += &format!(
                "nodeclaim {} provider={:?} node={:?} {}\n",
                c.name_any(),
                c.provider_id(),
                c.node_name(),
                conds.join(" ")
            );
        }
        for n in self.list::<Node>().await {
            let taints: Vec<String> = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .map(|ts| ts.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect())
                .unwrap_or_default();
            out += &format!("node {} taints={taints:?}\n", n.name_any());
        }
        for c in self.list::<EC2NodeClass>().await {
            let conds: Vec<String> = c
                .conditions()
                .iter()
                .map(|c| format!("{}={:?}({}: {})", c.type_, c.status, c.reason, c.message))
                .collect();
            out += &format!("ec2nodeclass {} {}\n", c.name_any(), conds.join(" "));
        }
        for p in self.list_pods("").await {
            out += &format!(
                "pod {} node={:?} phase={:?}\n",
                p.name_any(),
                p.spec.as_ref().and_then(|s| s.node_name.clone()),
                p.status.as_ref().and_then(|s| s.phase.clone())
            );
        }
        out += &format!(
            "kubelet refusals: {:?}\nboot failures: {:?}\n",
            self.aws_kubelet.refusals(),
            self.aws_kubelet.failures()
        );
        out
    }

    /// Deletes what a scenario created (Deployments, pods, NodePools, NodeClaims, EC2NodeClasses) and waits until
    /// none of it is left.
    async fn cleanup(&self, scenario: &str) {
        let lp = ListParams::default();
        let now = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
        let _ = self.deployments().delete_collection(&DeleteParams::default(), &lp).await;
        let _ = self.pods().delete_collection(&now, &lp).await;
        for pool in self.list::<NodePool>().await {
            let _ = self.api::<NodePool>().delete(&pool.name_any(), &DeleteParams::default()).await;
        }
        for claim in self.list::<NodeClaim>().await {
            let _ = self.api::<NodeClaim>().delete(&claim.name_any(), &DeleteParams::default()).await;
        }
        self.eventually(
            &format!("{scenario}: claims, nodes, pods and pools gone"),
            Duration::from_secs(90),
            || async {
                let empty = self.list::<NodeClaim>().await.is_empty()
                    && self.list::<Node>().await.is_empty()
                    && self.list_pods("").await.is_empty()
                    && self.list::<NodePool>().await.is_empty();
                empty.then_some(())
            },
        )
        .await;
        for class in self.list::<EC2NodeClass>().await {
            let _ = self.api::<EC2NodeClass>().delete(&class.name_any(), &DeleteParams::default()).await;
        }
        self.eventually(&format!("{scenario}: node classes gone"), Duration::from_secs(30), || async {
            self.list::<EC2NodeClass>().await.is_empty().then_some(())
        })
        .await;
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.shutdown.cancel();
        for t in &self.standins {
            t.abort();
        }
    }
}

/// Installs `karpenter-controller crds --provider aws` (NodePool, NodeClaim, NodeOverlay, EC2NodeClass) and waits
/// until each is Established.
async fn install_crds(client: &Client) {
    let out = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .args(["crds", "--provider", "aws"])
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
    assert!(names.iter().any(|n| n == "ec2nodeclasses.karpenter.k8s.aws"), "{names:?}");
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

fn condition_true(claim: &NodeClaim, type_: &str) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == type_ && c.status == ConditionStatus::True))
}

/// Whether the kubelet was handed `field` in its configuration or a `--<flag>` on its command line.
fn handed(inputs: &KubeletInputs, field: &str, flag: &str) -> bool {
    inputs.config.get(field).is_some_and(|v| !v.is_null())
        || inputs.flags.iter().any(|f| f.starts_with(&format!("--{flag}=")))
}

// ------------------------------------------------------------------------------------------------ scenarios

/// The node class kubelet settings of `families`: hard and soft eviction with a grace period, kube-reserved and
/// the image GC thresholds.
fn kubelet_settings() -> Value {
    json!({
        "evictionHard": {"memory.available": "5%", "nodefs.available": "10%"},
        "evictionSoft": {"memory.available": "10%"},
        "evictionSoftGracePeriod": {"memory.available": "1m30s"},
        "kubeReserved": {"cpu": "100m", "memory": "300Mi"},
        "imageGCHighThresholdPercent": 85,
        "imageGCLowThresholdPercent": 75,
    })
}

/// For AL2, AL2023 and Bottlerocket at once: a NodePool labelled `node-role.kubernetes.io/worker=true` and
/// tainted, an EC2NodeClass with kubelet settings, a Deployment tolerating the taint. Its pods go pending → a
/// NodeClaim → an instance → the kubelet accepts the user data → the Node registers → Registered and
/// Initialized → pods Running. The Node carries the role label (Karpenter's registration put it there: the user
/// data does not name it) and the pool's taint; the kubelet refused nothing.
async fn families(env: &Env) {
    for (name, alias, _) in FAMILIES {
        env.node_class(name, alias, json!({"kubelet": kubelet_settings()})).await;
        env.pool(name).await;
        env.deployment(name, 2).await;
    }
    for (name, _, family) in FAMILIES {
        let pods = env.running(name, 2, Duration::from_secs(120)).await;
        let claims: Vec<NodeClaim> = env
            .list::<NodeClaim>()
            .await
            .into_iter()
            .filter(|c| c.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some(name))
            .collect();
        assert!(!claims.is_empty(), "{name}: a NodeClaim");
        let nodes: BTreeMap<String, Node> = env.list::<Node>().await.into_iter().map(|n| (n.name_any(), n)).collect();
        let mut claim_nodes = BTreeSet::new();
        for claim in &claims {
            let what = format!("{name}: claim {}", claim.name_any());
            for c in ["Launched", "Registered", "Initialized"] {
                assert!(condition_true(claim, c), "{what}: {c}\n{}", env.describe().await);
            }
            let node_name = claim.node_name().expect("registered claim names its Node");
            claim_nodes.insert(node_name.to_owned());
            let node = nodes.get(node_name).unwrap_or_else(|| panic!("{what}: Node {node_name}"));
            let labels = node.labels();
            assert_eq!(labels.get(ROLE_LABEL).map(String::as_str), Some("true"), "{what}: {labels:?}");
            assert_eq!(labels.get("karpenter.sh/initialized").map(String::as_str), Some("true"), "{what}");
            assert_eq!(labels.get("example.com/family").map(String::as_str), Some(name), "{what}: {labels:?}");
            let taints: Vec<(String, Option<String>, String)> = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|t| (t.key, t.value, t.effect))
                .collect();
            assert!(
                taints.contains(&(TAINT_KEY.to_owned(), Some(name.to_owned()), "NoSchedule".to_owned())),
                "{what}: {taints:?}"
            );
            assert!(!taints.iter().any(|t| t.0 == "karpenter.sh/unregistered"), "{what}: {taints:?}");
            // The kubelet judged this instance's user data and accepted it; the role label was never in it.
            let provider_id = claim.provider_id().expect("launched");
            let instance = karpenter_aws::provider::instance_id(provider_id).expect("an instance id");
            let registration = env
                .aws_kubelet
                .registrations()
                .into_iter()
                .find(|r| r.instance_id == instance)
                .unwrap_or_else(|| panic!("{what}: the kubelet judged {instance}"));
            assert_eq!(registration.family, family, "{what}");
            let user_data = env.ec2.launch_template_of(instance).expect("launch template").data.user_data;
            assert!(!user_data.contains("node-role.kubernetes.io"), "{what}: user data names the role:\n{user_data}");
            let inputs = &registration.inputs;
            for (field, flag) in [
                ("evictionHard", "eviction-hard"),
                ("evictionSoft", "eviction-soft"),
                ("evictionSoftGracePeriod", "eviction-soft-grace-period"),
                ("kubeReserved", "kube-reserved"),
                ("imageGCHighThresholdPercent", "image-gc-high-threshold"),
                ("imageGCLowThresholdPercent", "image-gc-low-threshold"),
            ] {
                assert!(handed(inputs, field, flag), "{what}: the kubelet was not handed {field}: {inputs:?}");
            }
            assert!(
                inputs.flags.iter().any(|f| f.starts_with("--node-labels=") && f.contains("example.com/family")),
                "{what}: {:?}",
                inputs.flags
            );
        }
        assert!(
            pods.values().all(|n| claim_nodes.contains(n)),
            "{name}: pods on the pool's nodes: {pods:?} {claim_nodes:?}"
        );
    }
    assert_eq!(env.aws_kubelet.refusals(), Vec::new(), "the kubelet refused nothing");
    assert_eq!(env.aws_kubelet.failures(), Vec::<String>::new(), "every instance booted");
    // The AWS provider's own series in the registry `run --provider aws` serves on /metrics: the EC2 request
    // batches that launched these instances, and the EC2NodeClass controller (upstream's `nodeclass`) reconciling
    // the classes through its work queue.
    let exposition = env.metrics.render();
    for (sample, matcher) in [
        ("karpenter_cloudprovider_batcher_batch_size_count", ""),
        ("karpenter_cloudprovider_batcher_batch_time_seconds_count", ""),
        ("controller_runtime_reconcile_total", "controller=\"nodeclass\""),
        ("controller_runtime_reconcile_time_seconds_count", "controller=\"nodeclass\""),
        ("workqueue_adds_total", "controller=\"nodeclass\""),
        ("workqueue_work_duration_seconds_count", "controller=\"nodeclass\""),
    ] {
        assert!(
            positive_sample(&exposition, sample, matcher),
            "no {sample}{{{matcher}}} above 0 on /metrics:\n{}",
            exposition
                .lines()
                .filter(|l| l.contains("batcher") || l.contains("nodeclass"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// Whether the exposition has a sample named `sample` whose labels contain `matcher` and whose value is above 0.
fn positive_sample(exposition: &str, sample: &str, matcher: &str) -> bool {
    exposition.lines().any(|line| {
        let Some(rest) = line.strip_prefix(sample) else { return false };
        let (labels, value) = match rest.strip_prefix('{') {
            Some(r) => match r.split_once("} ") {
                Some((labels, value)) => (labels, value),
                None => return false,
            },
            None => match rest.strip_prefix(' ') {
                Some(value) => ("", value),
                None => return false,
            },
        };
        labels.contains(matcher)
            && value.split_whitespace().next().and_then(|v| v.parse::<f64>().ok()).is_some_and(|v| v > 0.0)
    })
}

/// User data the kubelet refuses never registers a Node. Three AL2023 classes whose `userData` is a user NodeConfig
/// that nodeadm merges with Karpenter's at boot:
/// - `bad-gc`: `kubelet.config` with the image GC thresholds the wrong way round (low 60 ≥ high 40);
/// - `role-flag`: `kubelet.flags` with `--node-labels=node-role.kubernetes.io/worker=true`, a label the kubelet
///   refuses to set on itself (Karpenter's registration sets it, as `families` shows);
/// - `unknown-flag`: `kubelet.flags` with a flag the kubelet does not have, which validation cannot know.
///
/// For each: where the EC2NodeClass reports the user data invalid (`ValidationSucceeded=False`,
/// `InvalidUserData`, the message naming the field), nothing launches for it; otherwise its instance launches,
/// the kubelet refuses to start with a message naming the field, and the Node never registers (the claim stays
/// unregistered, its pod pending). At least one of them must reach the kubelet (its refusal is the point here);
/// the stand-in's refusal is also covered against `MockEc2` alone by karpenter-aws's `testing::aws_kubelet` tests.
async fn refusal(env: &Env) {
    let node_config =
        |kubelet: &str| format!("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n{kubelet}");
    let cases = [
        (
            "bad-gc",
            node_config("    config:\n      imageGCHighThresholdPercent: 40\n      imageGCLowThresholdPercent: 60\n"),
            "imageGCLowThresholdPercent",
        ),
        (
            "role-flag",
            node_config("    flags:\n      - --node-labels=node-role.kubernetes.io/worker=true\n"),
            "node-role.kubernetes.io",
        ),
        // Validation does not know the kubelet's flag set: this one reaches the kubelet.
        ("unknown-flag", node_config("    flags:\n      - --no-such-kubelet-flag=1\n"), "no-such-kubelet-flag"),
    ];
    let mut refused = 0;
    for (name, user_data, needle) in &cases {
        if refused_or_invalid(env, name, user_data, needle).await {
            refused += 1;
        }
    }
    assert!(refused > 0, "no case reached the kubelet: validation caught them all; add a case it cannot see");
    assert_eq!(env.aws_kubelet.failures(), Vec::<String>::new());
}

/// One case of [`refusal`]; whether the kubelet refused it (else the class reported it invalid).
async fn refused_or_invalid(env: &Env, name: &str, user_data: &str, needle: &str) -> bool {
    env.node_class(name, "al2023@latest", json!({"userData": user_data})).await;
    let classes = env.api::<EC2NodeClass>();
    // Ready, or refused for its user data.
    let invalid = env
        .eventually(&format!("the {name} class resolved"), Duration::from_secs(30), || async {
            let class = classes.get(name).await.ok()?;
            let validation = class.status.as_ref().and_then(|s| s.condition("ValidationSucceeded")).cloned();
            if let Some(v) = validation.filter(|v| v.status == ConditionStatus::False && v.reason == "InvalidUserData")
            {
                return Some(Some(v.message));
            }
            class.is_ready().then_some(None)
        })
        .await;
    let instances_before = env.ec2.instances().len();
    env.pool(name).await;
    env.deployment(name, 1).await;
    let of_pool = |c: &NodeClaim| c.labels().get("karpenter.sh/nodepool").map(String::as_str) == Some(name);
    if let Some(message) = invalid {
        eprintln!("real plane aws: {name}: the EC2NodeClass reports the user data invalid: {message}");
        assert!(message.contains(needle), "{name}: the condition names {needle}: {message}");
        env.stays(&format!("{name}: no NodeClaim launches for an invalid class"), Duration::from_secs(6), async || {
            !env.list::<NodeClaim>().await.iter().any(of_pool) && env.ec2.instances().len() == instances_before
        })
        .await;
        return false;
    }
    let claim = env
        .eventually(&format!("a launched NodeClaim of {name}"), Duration::from_secs(60), || async {
            env.list::<NodeClaim>().await.into_iter().find(|c| of_pool(c) && c.provider_id().is_some())
        })
        .await;
    let instance = karpenter_aws::provider::instance_id(claim.provider_id().expect("launched")).expect("id").to_owned();
    let refusal = env
        .eventually(&format!("{name}: the kubelet's refusal"), Duration::from_secs(30), || async {
            env.aws_kubelet.refusals().into_iter().find(|r| r.instance_id == instance)
        })
        .await;
    eprintln!("real plane aws: {name}: the kubelet refuses: {}", refusal.message);
    assert_eq!((refusal.node_claim.as_str(), refusal.family), (claim.name_any().as_str(), AmiFamily::Al2023));
    assert!(refusal.message.contains(needle), "{name}: the kubelet's message names {needle}: {}", refusal.message);
    env.stays(&format!("{name}: the refused instance never registers"), Duration::from_secs(5), async || {
        let provider_id = claim.provider_id();
        let no_node = env
            .list::<Node>()
            .await
            .iter()
            .all(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) != provider_id);
        let unregistered =
            env.api::<NodeClaim>().get(&claim.name_any()).await.is_ok_and(|c| !condition_true(&c, "Registered"));
        let pending = env
            .list_pods(&format!("app={name}"))
            .await
            .iter()
            .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"));
        no_node && unregistered && pending
    })
    .await;
    true
}
