//! The example cloud (examples/toy-cloud) plugged into the real binary by its one line in src/providers.rs
//! (`provider_crate!(karpenter_example_toy_cloud)`, feature `example-toy-cloud`): `toy` is a `--provider` value;
//! `crds --provider toy` prints the crate's ToyNodeClass CRD; `validate` checks ToyNodeClasses with the crate's
//! own rules; `run --provider toy` against the in-process API server serving the printed CRDs marks the class
//! Ready and launches a toy NodeClaim for a pending pod; without the CRD it fails naming it.
//!
//! The judges are the crate itself (its CRD and its validation, called directly) and the API server.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::condition::Conditions;
use karpenter_api::nodeclaim::NodeClassReference;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_example_toy_cloud::api::{GROUP, KIND};
use karpenter_example_toy_cloud::{ToyNodeClass, ToyNodeClassSpec};
use karpenter_testing::apiserver::{ApiServer, Registry};
use karpenter_testing::standins::Scheduler;
use karpenter_testing::{NodePoolOptions, PodOptions, Stopwatch};
use kube::api::{Api, ListParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
}

/// Runs the binary to completion: (exit status, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let Output { status, stdout, stderr } = bin().args(args).output().expect("running karpenter-controller");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A directory of its own per test, removed at the end.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("karpenter-toy-provider-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating a temporary directory");
        TempDir(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("writing a temporary file");
        path
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The CRDs `crds --provider <provider> -o json` prints.
fn printed_crds(provider: &str) -> Vec<CustomResourceDefinition> {
    let (code, stdout, stderr) = run(&["crds", "--provider", provider, "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).expect("crds -o json prints JSON");
    serde_json::from_value(list["items"].clone()).expect("a List of CRDs")
}

fn crd_names(crds: &[CustomResourceDefinition]) -> Vec<String> {
    crds.iter().map(|c| c.metadata.name.clone().unwrap_or_default()).collect()
}

#[test]
fn toy_is_a_provider_value_of_every_command_that_takes_one() {
    let (code, _, stderr) = run(&["crds", "--provider", "nope"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("[possible values: kwok, aws, toy]"), "{stderr}");
    for args in [&["crds", "--help"][..], &["validate", "--help"], &["run", "--help"], &["simulate", "--help"]] {
        let (code, help, stderr) = run(args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert!(help.contains("kwok, aws, toy"), "{args:?}:\n{help}");
    }
}

/// `crds --provider toy` prints Karpenter's CRDs and the toy cloud's own ToyNodeClass CRD, as the crate builds it;
/// the other providers' output does not carry it.
#[test]
fn crds_print_the_toy_clouds_node_class_crd() {
    let toy = printed_crds("toy");
    let kwok = printed_crds("kwok");
    let names = crd_names(&toy);
    assert!(names.iter().any(|n| n == "nodepools.karpenter.sh"), "{names:?}");
    let own = toy.iter().find(|c| c.spec.group == GROUP).expect("the toy CRD");
    assert_eq!(own, &karpenter_example_toy_cloud::crds()[0], "the crate's CRD, unchanged");
    assert!(!crd_names(&kwok).iter().any(|n| n.ends_with(GROUP)), "{:?}", crd_names(&kwok));
    // Karpenter's own CRDs are the same whichever provider: only the node class differs.
    let without = |crds: &[CustomResourceDefinition], group: &str| -> Vec<String> {
        crd_names(&crds.iter().filter(|c| c.spec.group != group).cloned().collect::<Vec<_>>())
    };
    assert_eq!(without(&toy, GROUP), without(&kwok, "karpenter.kwok.sh"));
}

const GOOD: &str = "apiVersion: karpenter.toy.example/v1alpha1
kind: ToyNodeClass
metadata: {name: default}
spec: {region: toy-east-1, maxNodes: 3}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: toy}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.toy.example, kind: ToyNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
";

#[test]
fn validate_accepts_a_toy_node_class_and_a_node_pool_naming_it() {
    let tmp = TempDir::new("good");
    let file = tmp.write("toy.yaml", GOOD);
    let (code, stdout, stderr) = run(&["validate", "--provider", "toy", file.to_str().unwrap()]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout, "validated 2 objects in 1 file: 0 violations\n");
}

/// A malformed ToyNodeClass gets the toy cloud's own messages, by field: the lines are what the crate's
/// validation says of the same object. A field the kind does not have is a decode error naming it.
#[test]
fn validate_reports_a_malformed_toy_node_class_in_the_crates_own_words() {
    let tmp = TempDir::new("bad");
    let bad = "apiVersion: karpenter.toy.example/v1alpha1\nkind: ToyNodeClass\nmetadata: {name: bad}\n\
               spec: {region: Toy_East, maxNodes: 0}\n";
    let file = tmp.write("bad.yaml", bad);
    let (code, stdout, stderr) = run(&["validate", "--provider", "toy", file.to_str().unwrap()]);
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let class = ToyNodeClass::new("bad", ToyNodeClassSpec { region: "Toy_East".into(), max_nodes: Some(0) });
    let problems = class.problems();
    assert_eq!(problems.len(), 2, "{problems:?}");
    let mut expected: Vec<String> = problems
        .iter()
        .map(|v| format!("{}: document 0: ToyNodeClass/bad: {}: {}", file.display(), v.path, v.message))
        .collect();
    expected.push("validated 1 object in 1 file: 2 violations".into());
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);

    let typo = tmp.write("typo.yaml", &bad.replace("maxNodes: 0", "maxNode: 2").replace("Toy_East", "east"));
    let (code, stdout, _) = run(&["validate", "--provider", "toy", "-o", "json", typo.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let violations = report["violations"].as_array().expect("violations");
    assert_eq!(violations.len(), 1, "{report}");
    assert!(violations[0]["message"].as_str().unwrap_or_default().contains("maxNode"), "{report}");
}

/// The toy cloud's labels apply with `--provider toy`: its API group is a restricted label domain of NodePools.
#[test]
fn validate_with_the_toy_provider_restricts_its_label_domain() {
    let tmp = TempDir::new("labels");
    let pool = GOOD.split("---\n").nth(1).unwrap().replace(
        "  template:\n    spec:\n",
        "  template:\n    metadata:\n      labels: {karpenter.toy.example/size: big}\n    spec:\n",
    );
    let file = tmp.write("pool.yaml", &pool);
    let (code, toy, _) = run(&["validate", "--provider", "toy", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{toy}");
    assert!(toy.contains("karpenter.toy.example/size"), "{toy}");
    let (code, kwok, _) = run(&["validate", "--provider", "kwok", file.to_str().unwrap()]);
    assert_eq!(code, 0, "the domain is the toy cloud's, not kwok's: {kwok}");
}

/// kwok's flags do nothing for the toy cloud, so `run` refuses them before anything starts.
#[test]
fn run_refuses_kwok_flags_for_the_toy_provider() {
    for flag in ["--kwok-simulate-kubelet", "--instance-types=types.json"] {
        let (code, _, stderr) = run(&["run", "--provider=toy", flag]);
        assert_eq!(code, 2, "{flag}: {stderr}");
        assert!(stderr.contains("apply to --provider kwok only, not toy"), "{flag}: {stderr}");
    }
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port()
}

/// A kubeconfig pointing at `addr` (the in-process API server over plain HTTP).
fn kubeconfig(dir: &TempDir, addr: SocketAddr) -> PathBuf {
    dir.write(
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: http://{addr}\n\
             users:\n- name: test\n  user: {{}}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n\
             current-context: test\n"
        ),
    )
}

/// `run --provider=toy` with servers on free ports and logs in `dir`.
fn run_toy(dir: &TempDir, kubeconfig: &Path, probe_port: u16) -> Command {
    let mut command = bin();
    command
        .args(["run", "--provider=toy", "--disable-leader-election"])
        .arg(format!("--metrics-port={}", free_port()))
        .arg(format!("--health-probe-port={probe_port}"))
        .arg(format!("--log-output-paths={}", dir.path().join("controller.log").display()))
        .env("KUBECONFIG", kubeconfig);
    command
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.split_whitespace().nth(1)?.parse().ok()
}

/// The whole binary with the toy cloud against an API server that serves exactly what `crds --provider toy`
/// printed: the ToyNodeClass becomes Ready (ready on sight), `/readyz` passes, and the pending pod gets a NodeClaim
/// whose instance the toy cloud launched; SIGTERM ends it with status 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_toy_launches_a_toy_node_claim_for_a_pending_pod() {
    let server = ApiServer::builder().registry(Registry::with_crds(printed_crds("toy"))).build();
    let (addr, _accept) = server.serve_tcp((Ipv4Addr::LOCALHOST, 0).into()).await.unwrap();
    let client = server.client();
    let dir = TempDir::new("run");
    let kubeconfig = kubeconfig(&dir, addr);

    let classes: Api<ToyNodeClass> = Api::all(client.clone());
    let spec = ToyNodeClassSpec { region: "toy-east-1".into(), max_nodes: Some(3) };
    classes.create(&PostParams::default(), &ToyNodeClass::new("default", spec)).await.unwrap();
    let pool = karpenter_testing::node_pool(NodePoolOptions {
        name: Some("toy".into()),
        node_class_ref: Some(NodeClassReference::new(GROUP, KIND, "default")),
        ..Default::default()
    });
    Api::<NodePool>::all(client.clone()).create(&PostParams::default(), &pool).await.unwrap();
    let pod = karpenter_testing::pod(PodOptions {
        name: Some("web".into()),
        requests: [("cpu", "3"), ("memory", "1Gi")].into(),
        ..Default::default()
    });
    Api::<Pod>::namespaced(client.clone(), "default").create(&PostParams::default(), &pod).await.unwrap();
    let scheduler = tokio::spawn(Scheduler::new(client.clone()).run(Duration::from_millis(500)));

    let probe_port = free_port();
    let child = run_toy(&dir, &kubeconfig, probe_port).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    let mut process = Process(child.expect("starting karpenter-controller"));
    let log = dir.path().join("controller.log");

    // A real process: real time.
    let start = Stopwatch::start();
    let probes: SocketAddr = (Ipv4Addr::LOCALHOST, probe_port).into();
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let (mut ready, mut class_ready, mut launched) = (false, false, None);
    while start.elapsed() < Duration::from_secs(60) && !(ready && class_ready && launched.is_some()) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Ok(Some(status)) = process.0.try_wait() {
            panic!(
                "karpenter-controller exited early: {status}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        ready = ready || http_status(probes, "/readyz").await == Some(200);
        let class = classes.get("default").await.unwrap();
        class_ready = class.status.is_some_and(|s| s.is_true("Ready"));
        let list = claims.list(&ListParams::default()).await.unwrap().items;
        launched = list.into_iter().find(|c| c.provider_id().is_some_and(|id| id.starts_with("toy:///toy-cluster/i-")));
    }
    let logs = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(ready, "readyz never passed\n{logs}");
    assert!(class_ready, "the ToyNodeClass never became Ready\n{logs}");
    let launched = launched.unwrap_or_else(|| panic!("no NodeClaim launched by the toy cloud\n{logs}"));
    eprintln!("run --provider toy: toy NodeClaim launched after {:.1} s", start.elapsed().as_secs_f64());
    // The toy catalogue's type that holds 3 CPUs, in a zone of the class's region.
    let labels = launched.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("node.kubernetes.io/instance-type").map(String::as_str), Some("toy.large"), "{labels:?}");
    let zone = labels.get("topology.kubernetes.io/zone").map(String::as_str).unwrap_or_default();
    assert!(["toy-east-1-a", "toy-east-1-b"].contains(&zone), "{zone}");

    let pid = process.0.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let terminating = Stopwatch::start();
    let status = loop {
        if let Some(status) = process.0.try_wait().unwrap() {
            break status;
        }
        assert!(terminating.elapsed() < Duration::from_secs(30), "no exit within 30 s of SIGTERM");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.success(), "exit status {status}\n{}", std::fs::read_to_string(&log).unwrap_or_default());
    scheduler.abort();
}

/// Without the ToyNodeClass CRD the toy cloud cannot list its classes: `run` exits with status 1, naming the CRD
/// and the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_toy_without_its_crd_fails_naming_it() {
    let server = ApiServer::builder().registry(Registry::with_crds(printed_crds("kwok"))).build();
    let (addr, _accept) = server.serve_tcp((Ipv4Addr::LOCALHOST, 0).into()).await.unwrap();
    let dir = TempDir::new("no-crd");
    let kubeconfig = kubeconfig(&dir, addr);
    let mut command = run_toy(&dir, &kubeconfig, free_port());
    let output = tokio::task::spawn_blocking(move || command.output()).await.unwrap().expect("running the binary");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("toynodeclasses.karpenter.toy.example CRD"), "{stderr}");
    assert!(stderr.contains(&format!("http://{addr}")), "{stderr}");
}
