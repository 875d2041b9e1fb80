//! The real `karpenter-controller run --provider kwok --kwok-simulate-kubelet` process against the in-process
//! API server served over HTTP (a kubeconfig points at it), with the scheduler stand-in in the test: a pending
//! pod gets a kwok node and runs; `/readyz` passes; SIGTERM ends the process cleanly.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use karpenter_api::{NodeClaim, NodePool};
use karpenter_kwok::api::KWOKNodeClass;
use karpenter_kwok::testing::{KWOKNodeClassOptions, kwok_node_class};
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::standins::Scheduler;
use karpenter_testing::{NodePoolOptions, PodOptions, Stopwatch, kwok_node_class_ref};
use kube::api::{Api, ListParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap().local_addr().unwrap().port()
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_kwok_provisions_a_pending_pod_and_stops_on_sigterm() {
    let server = ApiServer::new();
    let (addr, _accept) = server.serve_tcp((Ipv4Addr::LOCALHOST, 0).into()).await.unwrap();
    let client = server.client();
    let dir = std::env::temp_dir().join(format!("karpenter-run-kwok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig: PathBuf = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: http://{addr}\n\
             users:\n- name: test\n  user: {{}}\ncontexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n\
             current-context: test\n"
        ),
    )
    .unwrap();

    Api::<KWOKNodeClass>::all(client.clone())
        .create(&PostParams::default(), &kwok_node_class(KWOKNodeClassOptions::default()))
        .await
        .unwrap();
    let pool = karpenter_testing::node_pool(NodePoolOptions {
        name: Some("default".into()),
        node_class_ref: Some(kwok_node_class_ref("default")),
        ..Default::default()
    });
    Api::<NodePool>::all(client.clone()).create(&PostParams::default(), &pool).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod = karpenter_testing::pod(PodOptions {
        name: Some("web".into()),
        requests: [("cpu", "1"), ("memory", "1Gi")].into(),
        ..Default::default()
    });
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let scheduler = tokio::spawn(Scheduler::new(client.clone()).run(Duration::from_millis(500)));

    let (metrics_port, probe_port) = (free_port(), free_port());
    let log = dir.join("controller.log");
    let child = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .args(["run", "--provider=kwok", "--kwok-simulate-kubelet", "--disable-leader-election"])
        .arg(format!("--metrics-port={metrics_port}"))
        .arg(format!("--health-probe-port={probe_port}"))
        .arg(format!("--log-output-paths={}", log.display()))
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting karpenter-controller");
    let mut process = Process(child);

    // A real process: real time.
    let start = Stopwatch::start();
    let probes: SocketAddr = (Ipv4Addr::LOCALHOST, probe_port).into();
    let mut ready = false;
    let mut running = false;
    while start.elapsed() < Duration::from_secs(60) && !(ready && running) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if let Ok(Some(status)) = process.0.try_wait() {
            panic!(
                "karpenter-controller exited early: {status}\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        ready = ready || http_get(probes, "/readyz").await.is_some_and(|(code, _)| code == 200);
        let p = pods.get("web").await.unwrap();
        running = p.status.and_then(|s| s.phase).as_deref() == Some("Running");
    }
    let logs = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(ready, "readyz never passed\n{logs}");
    assert!(running, "the pod never ran\n{logs}");
    eprintln!("run --provider kwok: pod running after {:.1} s", start.elapsed().as_secs_f64());
    let claims = Api::<NodeClaim>::all(client.clone()).list(&ListParams::default()).await.unwrap().items;
    assert_eq!(claims.len(), 1, "one NodeClaim for the pod");
    assert!(logs.lines().any(|l| l.contains("\"message\":\"created nodeclaim\"")), "JSON logs:\n{logs}");

    let (code, metrics) = http_get((Ipv4Addr::LOCALHOST, metrics_port).into(), "/metrics").await.expect("metrics");
    assert_eq!(code, 200);
    assert!(metrics.contains("karpenter_nodeclaims_created_total{reason=\"provisioned\""), "{metrics}");
    // The commit `version` reports (build.rs) reaches karpenter_build_info and every log line.
    let version = Command::new(env!("CARGO_BIN_EXE_karpenter-controller")).args(["version", "-o", "json"]).output();
    let version: serde_json::Value = serde_json::from_slice(&version.expect("version").stdout).expect("JSON");
    let commit = version["gitCommit"].as_str().expect("gitCommit");
    let build_info = metrics.lines().find(|l| l.starts_with("karpenter_build_info{")).expect("karpenter_build_info");
    assert!(build_info.contains(&format!("commit=\"{commit}\"")), "{build_info}");
    assert!(logs.contains(&format!("\"commit\":\"{commit}\"")), "{logs}");

    // SIGTERM: graceful shutdown, exit status 0.
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
    let _ = std::fs::remove_dir_all(&dir);
}
