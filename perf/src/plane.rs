//! The control plane a case runs on, and the two child processes under test: `karpenter-controller run --provider
//! kwok` and `karpenter-controller kwok-kubelet`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use karpenter_operator::client::{ClientOptions, build_client};
use karpenter_testing::Stopwatch;
use karpenter_testing::realplane::{PlaneOptions, RealPlane};
use kube::Client;
use tokio::process::{Child, Command};

/// A control plane: one this run started (stopped by [`Plane::stop`]), or one given by a kubeconfig.
#[derive(Debug)]
pub struct Plane {
    kubeconfig: PathBuf,
    started: Option<RealPlane>,
}

impl Plane {
    /// A plane someone else runs.
    pub fn existing(kubeconfig: PathBuf) -> Self {
        Self { kubeconfig, started: None }
    }

    /// A fresh plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager: karpenter-testing's
    /// `realplane`) on free ports with its state in `dir`; `keep` keeps the state (logs) after the stop.
    pub async fn start(dir: &Path, keep: bool) -> anyhow::Result<Self> {
        let options = PlaneOptions {
            state_dir: Some(dir.to_path_buf()),
            name: Some("karpenter-perf".into()),
            keep_state: keep,
            ..PlaneOptions::default()
        };
        let plane = tokio::task::spawn_blocking(move || RealPlane::start(options))
            .await
            .context("starting the control plane")?
            .context("starting the control plane")?;
        eprintln!("  plane: {} (state in {})", plane.server_url(), plane.state_dir().display());
        Ok(Self { kubeconfig: plane.kubeconfig().to_path_buf(), started: Some(plane) })
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The driver's client: no client-side rate limit (creating 50k pods needs the apiserver's full rate).
    pub async fn client(&self) -> anyhow::Result<Client> {
        let options = ClientOptions {
            qps: 0,
            burst: 1,
            user_agent: "karpenter-perf".into(),
            kubeconfig: Some(self.kubeconfig.clone()),
            context: None,
        };
        build_client(&options).await.context("building the client of the plane")
    }

    /// Stops a plane this run started (a given one is left alone).
    pub async fn stop(self) {
        if let Some(plane) = self.started {
            match tokio::task::spawn_blocking(move || plane.stop()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("  stopping the plane: {e}"),
                Err(e) => eprintln!("  stopping the plane: {e}"),
            }
        }
    }
}

/// The controller and the kubelet stand-in, each a child process logging into the case's directory.
#[derive(Debug)]
pub struct Processes {
    controller: Child,
    kubelet: Child,
    controller_log: PathBuf,
    /// The controller's `/metrics` port.
    pub metrics_port: u16,
}

impl Processes {
    /// Starts `controller run --provider kwok` (leader election off, metrics and probes on free ports) and
    /// `controller kwok-kubelet` with KUBECONFIG set to the plane's.
    pub async fn start(
        controller: &Path,
        kubeconfig: &Path,
        dir: &Path,
        lease_renew_seconds: Option<u64>,
    ) -> anyhow::Result<Self> {
        let controller_log = dir.join("controller.log");
        let metrics = free_port()?;
        let probes = free_port()?;
        let mut run = Command::new(controller);
        run.args(["run", "--provider", "kwok", "--disable-leader-election"])
            .arg("--metrics-port")
            .arg(metrics.to_string())
            .arg("--health-probe-port")
            .arg(probes.to_string());
        let controller_child = spawn(run, kubeconfig, &controller_log)?;
        let mut kubelet = Command::new(controller);
        kubelet.arg("kwok-kubelet");
        if let Some(secs) = lease_renew_seconds {
            kubelet.arg("--lease-renew-interval").arg(format!("{secs}s"));
        }
        let kubelet_child = spawn(kubelet, kubeconfig, &dir.join("kwok-kubelet.log"))?;
        Ok(Self { controller: controller_child, kubelet: kubelet_child, controller_log, metrics_port: metrics })
    }

    pub fn controller_pid(&self) -> u32 {
        self.controller.id().unwrap_or(0)
    }

    /// Waits for the controller's "starting controllers" log line: its caches synced.
    pub async fn wait_synced(&self, timeout: Duration) -> anyhow::Result<()> {
        let waited = Stopwatch::start();
        loop {
            let log = tokio::fs::read_to_string(&self.controller_log).await.unwrap_or_default();
            if log.contains("\"starting controllers\"") || log.contains("starting controllers") {
                return Ok(());
            }
            self.check_alive()?;
            if waited.elapsed() > timeout {
                bail!(
                    "the controller's caches did not sync within {timeout:?} (see {})",
                    self.controller_log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Fails if either child has exited.
    pub fn check_alive(&self) -> anyhow::Result<()> {
        for (name, pid) in [("controller", self.controller.id()), ("kwok-kubelet", self.kubelet.id())] {
            let alive = pid.is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
            if !alive {
                bail!(
                    "the {name} process exited (see its log in {})",
                    self.controller_log.with_file_name("").display()
                );
            }
        }
        Ok(())
    }

    /// Stops both children (SIGKILL: nothing to drain, the plane goes next).
    pub async fn stop(mut self) {
        for child in [&mut self.controller, &mut self.kubelet] {
            let _ = child.kill().await;
        }
    }
}

fn spawn(mut command: Command, kubeconfig: &Path, log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone().context("duplicating the log handle")?;
    command
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {:?}", command.as_std()))
}

/// A port nothing listens on right now.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr().context("finding a free port")?.port())
}
