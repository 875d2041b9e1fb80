//! A real Kubernetes control plane for tests (feature `realplane`): etcd, kube-apiserver and, by default,
//! kube-scheduler and kube-controller-manager v1.32.6 on 127.0.0.1, started with the scripts of the shared
//! `k8s` folder (`start.sh` / `stop.sh`, see its README). The in-process [`ApiServer`](crate::apiserver) is
//! quick and deterministic; this is the real thing (admission, CEL, watch caches, the scheduler, the node
//! lifecycle and garbage collectors), for end-to-end and performance suites.
//!
//! # Where things are
//!
//! * **The scripts**: `$KARPENTER_K8S_DIR`, else `../shared/k8s` beside the workspace root (this crate's
//!   `../../..`), or [`PlaneOptions::k8s_dir`].
//! * **State** (`K8SREAL_RUN`: etcd data, certificates, logs, pids): `<target dir>/k8s-real/<name>`, where the
//!   target dir is the one holding the running test executable and `name` is [`PlaneOptions::name`] (default: the
//!   executable's name without its hash), so each test binary has its own. A plane left over by a killed run of
//!   the same binary is stopped first. The state dir is wiped when the plane is dropped (`K8SREAL_WIPE=1`)
//!   unless [`PlaneOptions::keep_state`] (or `KARPENTER_K8S_KEEP=1`) is set, which keeps the logs for a look.
//! * **Ports**: free loopback ports picked at start for the apiserver, etcd (and its peer port, +10), the
//!   scheduler and the controller-manager, so several test binaries can run planes side by side.
//!
//! # Use
//!
//! ```no_run
//! # async fn t() {
//! // In a test: None means "skipped" (the reason is printed); under CI=true a missing plane fails the test.
//! let Some(plane) = karpenter_testing::realplane::require() else { return };
//! let client = plane.client().await.expect("client");
//! // ... create objects, run controllers against `client` or `plane.kubeconfig()` ...
//! plane.restart_apiserver().expect("restart"); // kill kube-apiserver and start it again (etcd keeps the state)
//! let revision = plane.compact_etcd().expect("compact"); // watches from before `revision` now get 410 Gone
//! # let _ = revision;
//! # }
//! ```
//!
//! # Faults
//!
//! * **An apiserver restart**: [`RealPlane::restart_apiserver`], or [`RealPlane::stop_apiserver`] (gracefully or as
//!   a crash, [`Stop`]) and [`RealPlane::start_apiserver`] with something done in between. etcd keeps the state;
//!   the new watch cache starts at etcd's current revision, so a watch resuming from an older `resourceVersion`
//!   gets `410 Gone`.
//! * **A compacted etcd**: [`RealPlane::compact_etcd`] (a read from before the revision gets `410 Gone`).
//! * **A network partition** between one client and the plane: [`RealPlane::link`] starts a [`Link`], a TCP relay
//!   the client connects through (point its `cluster_url` at [`Link::url`]); [`Link::cut`] drops its connections
//!   and refuses new ones while the plane runs on, [`Link::restore`] lets them through again.
//! * **Throttling (429)**: the admin identities are in `system:masters`, which API Priority and Fairness exempts.
//!   [`RealPlane::user_kubeconfig`] makes an identity APF can throttle (bind it to a role, then give it a
//!   FlowSchema and a PriorityLevelConfiguration); [`RealPlane::apiserver_get`] reads the apiserver's `/metrics`
//!   (e.g. `apiserver_flowcontrol_rejected_requests_total`) to see the throttling happen.
//!
//! [`RealPlane::start`] is the fallible form (no skipping, no CI rule) for harnesses that decide themselves,
//! e.g. a benchmark command. Dropping the [`RealPlane`] runs `stop.sh`. The blocking calls
//! ([`RealPlane::start`], [`RealPlane::restart_apiserver`], [`RealPlane::stop_apiserver`],
//! [`RealPlane::start_apiserver`], [`RealPlane::compact_etcd`],
//! [`RealPlane::user_kubeconfig`], [`RealPlane::apiserver_get`], drop) run tools or shell scripts, some for a few
//! seconds: in async tests call them from a multi-threaded runtime (or `spawn_blocking`).
//!
//! # Skipping
//!
//! A machine without the plane (no scripts, no `etcd`, `openssl`, `curl`, or neither `xz` nor unpacked
//! binaries) cannot run these tests. [`require`] then prints `skipped: ...` with the reason to stderr and returns
//! `None`, unless `CI=true`, where it panics with the reason: CI must run them. A plane that is present but fails
//! to start is always a failure.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::clock::Stopwatch;

/// Settings of [`RealPlane::start`]. `Default` gives a plane with the scheduler and the controller-manager.
#[derive(Debug, Clone)]
pub struct PlaneOptions {
    /// The folder with `start.sh` and `stop.sh` (`None`: `$KARPENTER_K8S_DIR`, else `../shared/k8s` beside the
    /// workspace root).
    pub k8s_dir: Option<PathBuf>,
    /// The state dir (`None`: `<target dir>/k8s-real/<name>`).
    pub state_dir: Option<PathBuf>,
    /// The plane's name in the default state dir (`None`: the test executable's name without its hash).
    pub name: Option<String>,
    /// Start kube-scheduler (`K8SREAL_SCHEDULER=1`).
    pub scheduler: bool,
    /// Start kube-controller-manager (`K8SREAL_CONTROLLER_MANAGER=1`).
    pub controller_manager: bool,
    /// Extra flags of kube-apiserver (`K8SREAL_APISERVER_ARGS`), e.g. `--max-requests-inflight=50`.
    pub apiserver_args: Option<String>,
    /// Extra flags of kube-scheduler (`K8SREAL_SCHEDULER_ARGS`).
    pub scheduler_args: Option<String>,
    /// Extra flags of kube-controller-manager (`K8SREAL_CM_ARGS`).
    pub controller_manager_args: Option<String>,
    /// Keep the state dir (logs) after the plane stops (also `KARPENTER_K8S_KEEP=1`).
    pub keep_state: bool,
}

impl Default for PlaneOptions {
    fn default() -> Self {
        Self {
            k8s_dir: None,
            state_dir: None,
            name: None,
            scheduler: true,
            controller_manager: true,
            apiserver_args: None,
            scheduler_args: None,
            controller_manager_args: None,
            keep_state: false,
        }
    }
}

/// How [`RealPlane::stop_apiserver`] stops kube-apiserver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, then SIGKILL after 15 s. kube-apiserver's graceful termination refuses new requests at once but
    /// waits up to a minute for open connections (watches) to close, so with clients connected this usually ends
    /// in the SIGKILL: 15 s without an apiserver.
    Graceful,
    /// SIGKILL at once: a crash. Requests in flight get no answer, though some were already written to etcd.
    Kill,
}

/// Why a plane could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum PlaneError {
    /// Something the plane needs is not on this machine (scripts, etcd, openssl, ...): tests skip, CI fails.
    #[error("the real control plane is not available: {0}")]
    Unavailable(String),
    /// A script or tool ran and failed.
    #[error("{what} failed ({status}): {output}")]
    Command {
        /// What was run.
        what: String,
        /// Its exit status.
        status: String,
        /// The tail of its output.
        output: String,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// No free loopback ports.
    #[error("no free loopback port: {0}")]
    Ports(std::io::Error),
    /// The kubeconfig could not be read or turned into a client.
    #[error("kube client for {path}: {reason}")]
    Client {
        /// The kubeconfig.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The plane did not do something in time.
    #[error("timed out: {0}")]
    Timeout(String),
}

/// The ports of one plane (all on 127.0.0.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// kube-apiserver (HTTPS).
    pub apiserver: u16,
    /// etcd clients (HTTP); its peer port is this plus 10.
    pub etcd: u16,
    /// kube-scheduler's secure port.
    pub scheduler: u16,
    /// kube-controller-manager's secure port.
    pub controller_manager: u16,
}

/// A running real control plane; dropping it stops it (and wipes its state dir unless kept).
#[derive(Debug)]
pub struct RealPlane {
    k8s_dir: PathBuf,
    run_dir: PathBuf,
    ports: Ports,
    kubeconfig: PathBuf,
    options: PlaneOptions,
    keep_state: bool,
}

/// Starts a plane with the default options, or `None` after printing why it was skipped (see the module docs).
///
/// # Panics
///
/// When the plane is unavailable and `CI=true`, or when it is available but fails to start: both are test
/// failures, with the reason.
pub fn require() -> Option<RealPlane> {
    require_with(PlaneOptions::default())
}

/// [`require`] with options.
///
/// # Panics
///
/// As [`require`].
pub fn require_with(options: PlaneOptions) -> Option<RealPlane> {
    match RealPlane::start(options) {
        Ok(plane) => Some(plane),
        Err(PlaneError::Unavailable(reason)) if !in_ci() => {
            eprintln!("skipped: the real control plane is not available here: {reason} (under CI=true this fails)");
            None
        }
        Err(e) => panic!("real control plane: {e}"),
    }
}

pub use crate::in_ci;

/// The default folder of `start.sh`: `$KARPENTER_K8S_DIR`, else `../shared/k8s` beside the workspace root.
pub fn default_k8s_dir() -> PathBuf {
    match std::env::var_os("KARPENTER_K8S_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/k8s"),
    }
}

/// The target dir of the running executable (`.../target` for `.../target/debug/deps/name-hash`), if it looks
/// like one.
fn target_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().find(|p| p.file_name().is_some_and(|n| n == "target")).map(Path::to_path_buf).or_else(|| {
        // A custom CARGO_TARGET_DIR: <dir>/<profile>/deps/<exe>.
        exe.parent()?.parent()?.parent().map(Path::to_path_buf)
    })
}

/// The executable's name without cargo's `-<hash>` suffix.
fn exe_name() -> String {
    let stem = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "plane".to_string());
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_string(),
        _ => stem,
    }
}

/// What is missing on this machine for the plane, if anything.
fn missing(k8s_dir: &Path) -> Option<String> {
    for script in ["start.sh", "stop.sh"] {
        if !k8s_dir.join(script).is_file() {
            return Some(format!(
                "{} not found (set KARPENTER_K8S_DIR to the folder with the k8s start.sh)",
                k8s_dir.join(script).display()
            ));
        }
    }
    let unpacked = std::env::var_os("K8SREAL_BIN")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/karpenter-k8s/v1.32.6")))
        .is_some_and(|bin| bin.join("kube-apiserver").is_file());
    let mut tools = vec![("etcd", "apt-get install -y etcd-server"), ("openssl", "apt-get install -y openssl")];
    tools.push(("curl", "apt-get install -y curl"));
    if !unpacked {
        tools.push(("xz", "apt-get install -y xz-utils"));
    }
    let absent: Vec<String> =
        tools.iter().filter(|(t, _)| !on_path(t)).map(|(t, how)| format!("`{t}` not on PATH ({how})")).collect();
    (!absent.is_empty()).then(|| absent.join(", "))
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()))
}

/// A free loopback port (bound and released; another process could take it in between, which start.sh reports).
fn free_port() -> Result<u16, PlaneError> {
    let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).map_err(PlaneError::Ports)?;
    listener.local_addr().map(|a| a.port()).map_err(PlaneError::Ports)
}

/// Whether a process runs (a zombie does not count), by `/proc`, else `kill -0`.
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last ')'.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) if Path::new("/proc/self").exists() => false,
        Err(_) => Command::new("kill")
            .args(["-0", &pid.to_string()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
    }
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).is_ok()
}

fn pick_ports() -> Result<Ports, PlaneError> {
    // etcd needs its port and port + 10.
    let mut etcd = None;
    for _ in 0..50 {
        let p = free_port()?;
        if p < u16::MAX - 10 && port_free(p + 10) {
            etcd = Some(p);
            break;
        }
    }
    let etcd = etcd.ok_or_else(|| PlaneError::Ports(std::io::Error::other("no port pair for etcd")))?;
    Ok(Ports { apiserver: free_port()?, etcd, scheduler: free_port()?, controller_manager: free_port()? })
}

/// Runs a tool to completion; its output, or an error with its tail.
fn run_tool(what: &str, cmd: &mut Command) -> Result<Output, PlaneError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| PlaneError::Io { what: format!("running {what}"), source })?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(PlaneError::Command { what: what.to_string(), status: out.status.to_string(), output: tail(&out, 2000) })
    }
}

/// Standard base64 with padding (kubeconfig `*-data` fields).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The last `max` characters of a command's stdout and stderr.
fn tail(output: &Output, max: usize) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let start = text.char_indices().rev().nth(max.saturating_sub(1)).map_or(0, |(i, _)| i);
    text[start..].trim().to_string()
}

impl RealPlane {
    /// Starts a fresh plane (`K8SREAL_FRESH=1`) on free ports and waits for the apiserver's `/readyz`
    /// (start.sh does). Blocks for a few seconds.
    pub fn start(options: PlaneOptions) -> Result<Self, PlaneError> {
        let k8s_dir = options.k8s_dir.clone().unwrap_or_else(default_k8s_dir);
        if let Some(reason) = missing(&k8s_dir) {
            return Err(PlaneError::Unavailable(reason));
        }
        let k8s_dir = k8s_dir
            .canonicalize()
            .map_err(|source| PlaneError::Io { what: format!("resolving {}", k8s_dir.display()), source })?;
        let run_dir = match &options.state_dir {
            Some(dir) => dir.clone(),
            None => {
                let target = target_dir().ok_or_else(|| {
                    PlaneError::Unavailable("cannot tell the target dir from the executable's path".into())
                })?;
                target.join("k8s-real").join(options.name.clone().unwrap_or_else(exe_name))
            }
        };
        let keep_state = options.keep_state || std::env::var("KARPENTER_K8S_KEEP").is_ok_and(|v| v == "1");
        let mut plane =
            Self { k8s_dir, run_dir, ports: pick_ports()?, kubeconfig: PathBuf::new(), options, keep_state };
        // A plane left by a killed run of the same binary: stop it and start from nothing.
        if plane.run_dir.join("pids").is_dir() {
            let _ = plane.script("stop.sh", &[("K8SREAL_WIPE", "1")]);
        }
        let started = Stopwatch::start();
        let out = plane.script(
            "start.sh",
            &[
                ("K8SREAL_FRESH", "1"),
                ("K8SREAL_SCHEDULER", if plane.options.scheduler { "1" } else { "0" }),
                ("K8SREAL_CONTROLLER_MANAGER", if plane.options.controller_manager { "1" } else { "0" }),
            ],
        );
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                // Stop whatever did start (etcd, say); keep the logs for the error.
                let _ = plane.script("stop.sh", &[]);
                plane.keep_state = true;
                return Err(e);
            }
        };
        let last = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string();
        plane.kubeconfig = if last.is_empty() { plane.run_dir.join("admin.kubeconfig") } else { PathBuf::from(last) };
        eprintln!(
            "[realplane] started in {:.1}s: apiserver https://127.0.0.1:{}, etcd 127.0.0.1:{}, state {}",
            started.elapsed().as_secs_f64(),
            plane.ports.apiserver,
            plane.ports.etcd,
            plane.run_dir.display()
        );
        Ok(plane)
    }

    /// Runs a script of the k8s folder with the plane's environment plus `extra`.
    fn script(&self, name: &str, extra: &[(&str, &str)]) -> Result<Output, PlaneError> {
        let mut cmd = Command::new("bash");
        cmd.arg(self.k8s_dir.join(name)).stdin(Stdio::null());
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let out = cmd.output().map_err(|source| PlaneError::Io { what: format!("running {name}"), source })?;
        if out.status.success() {
            Ok(out)
        } else {
            Err(PlaneError::Command {
                what: name.to_string(),
                status: out.status.to_string(),
                output: tail(&out, 3000),
            })
        }
    }

    /// The environment start.sh and stop.sh get for this plane (`K8SREAL_RUN`, the ports, extra flags).
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            ("K8SREAL_RUN".to_string(), self.run_dir.display().to_string()),
            ("K8SREAL_PORT".to_string(), self.ports.apiserver.to_string()),
            ("K8SREAL_ETCD_PORT".to_string(), self.ports.etcd.to_string()),
            ("K8SREAL_SCHEDULER_PORT".to_string(), self.ports.scheduler.to_string()),
            ("K8SREAL_CM_PORT".to_string(), self.ports.controller_manager.to_string()),
        ];
        for (key, value) in [
            ("K8SREAL_APISERVER_ARGS", &self.options.apiserver_args),
            ("K8SREAL_SCHEDULER_ARGS", &self.options.scheduler_args),
            ("K8SREAL_CM_ARGS", &self.options.controller_manager_args),
        ] {
            if let Some(v) = value {
                env.push((key.to_string(), v.clone()));
            }
        }
        env
    }

    /// The admin kubeconfig (client certificate, cluster-admin).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The bearer-token kubeconfig (also cluster-admin).
    pub fn token_kubeconfig(&self) -> PathBuf {
        self.run_dir.join("token.kubeconfig")
    }

    /// The state dir (`K8SREAL_RUN`): `logs/` holds each component's log.
    pub fn state_dir(&self) -> &Path {
        &self.run_dir
    }

    /// The plane's ports.
    pub fn ports(&self) -> Ports {
        self.ports
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.ports.apiserver)
    }

    /// A client for the admin kubeconfig (needs a tokio runtime).
    pub async fn client(&self) -> Result<kube::Client, PlaneError> {
        let config = self.config(&self.kubeconfig).await?;
        kube::Client::try_from(config)
            .map_err(|e| PlaneError::Client { path: self.kubeconfig.clone(), reason: e.to_string() })
    }

    /// The client configuration of a kubeconfig (the admin one, [`RealPlane::token_kubeconfig`] or one from
    /// [`RealPlane::user_kubeconfig`]), for callers that build their own client, e.g. a controller's own stack, or
    /// that point it elsewhere ([`Link::url`]).
    pub async fn config(&self, kubeconfig: &Path) -> Result<kube::Config, PlaneError> {
        let err = |reason: String| PlaneError::Client { path: kubeconfig.to_path_buf(), reason };
        let parsed = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| err(e.to_string()))?;
        kube::Config::from_custom_kubeconfig(parsed, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| err(e.to_string()))
    }

    /// A kubeconfig for user `user` in `groups` (and `system:authenticated`), authenticated by a client
    /// certificate the plane's CA signs; written to `<state dir>/users/<user>.kubeconfig`. The user has no
    /// permissions until a (Cluster)RoleBinding names it, and, not being in `system:masters`, is subject to API
    /// Priority and Fairness. Runs `openssl`; blocks for a moment.
    pub fn user_kubeconfig(&self, user: &str, groups: &[&str]) -> Result<PathBuf, PlaneError> {
        let valid = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
        if !valid(user) || !groups.iter().all(|g| valid(g)) {
            return Err(PlaneError::Client {
                path: self.run_dir.join("users"),
                reason: format!("user {user:?} or groups {groups:?}: use letters, digits and -_.: only"),
            });
        }
        let dir = self.run_dir.join("users");
        std::fs::create_dir_all(&dir)
            .map_err(|source| PlaneError::Io { what: format!("creating {}", dir.display()), source })?;
        let pki = self.run_dir.join("pki");
        let (key, csr, crt) =
            (dir.join(format!("{user}.key")), dir.join(format!("{user}.csr")), dir.join(format!("{user}.crt")));
        let subject: String = groups.iter().map(|g| format!("/O={g}")).chain([format!("/CN={user}")]).collect();
        let ext = dir.join("client.ext");
        std::fs::write(&ext, "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n")
            .map_err(|source| PlaneError::Io { what: format!("writing {}", ext.display()), source })?;
        let path = |p: &Path| p.display().to_string();
        run_tool(
            "openssl req",
            Command::new("openssl")
                .args(["req", "-newkey", "rsa:2048", "-nodes", "-sha256", "-subj", &subject])
                .args(["-keyout", &path(&key), "-out", &path(&csr)]),
        )?;
        run_tool(
            "openssl x509",
            Command::new("openssl")
                .args(["x509", "-req", "-in", &path(&csr), "-CA", &path(&pki.join("ca.crt"))])
                .args(["-CAkey", &path(&pki.join("ca.key")), "-CAcreateserial", "-sha256", "-days", "30"])
                .args(["-extfile", &path(&ext), "-out", &path(&crt)]),
        )?;
        let b64 = |p: &Path| -> Result<String, PlaneError> {
            let bytes = std::fs::read(p)
                .map_err(|source| PlaneError::Io { what: format!("reading {}", p.display()), source })?;
            Ok(base64(&bytes))
        };
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: k8s-real\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {}\n    \
             client-key-data: {}\ncontexts:\n- name: k8s-real\n  context: {{cluster: k8s-real, user: {user}, \
             namespace: default}}\ncurrent-context: k8s-real\n",
            self.server_url(),
            b64(&pki.join("ca.crt"))?,
            b64(&crt)?,
            b64(&key)?,
        );
        let out = dir.join(format!("{user}.kubeconfig"));
        std::fs::write(&out, kubeconfig)
            .map_err(|source| PlaneError::Io { what: format!("writing {}", out.display()), source })?;
        Ok(out)
    }

    /// The body of a GET of `path` (e.g. `/metrics`) as cluster-admin, through `curl`. Blocks for a moment.
    pub fn apiserver_get(&self, path: &str) -> Result<String, PlaneError> {
        let pki = self.run_dir.join("pki");
        let url = format!("{}{path}", self.server_url());
        let out = run_tool(
            &format!("GET {path}"),
            Command::new("curl")
                .args(["-fsS", "--max-time", "30", "--cacert"])
                .arg(pki.join("ca.crt"))
                .arg("--cert")
                .arg(pki.join("admin.crt"))
                .arg("--key")
                .arg(pki.join("admin.key"))
                .arg(&url),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A [`Link`] to this plane's apiserver, for a client that should lose the plane on demand (needs a tokio
    /// runtime). The link outlives apiserver restarts (it connects to the same port each time).
    pub async fn link(&self) -> Result<Link, PlaneError> {
        Link::start(SocketAddr::from((Ipv4Addr::LOCALHOST, self.ports.apiserver))).await
    }

    /// The PID recorded for a component (`apiserver`, `etcd`, `scheduler`, `controller-manager`).
    pub fn pid(&self, component: &str) -> Option<u32> {
        std::fs::read_to_string(self.run_dir.join("pids").join(component)).ok()?.trim().parse().ok()
    }

    /// Stops kube-apiserver ([`Stop::Graceful`]) and starts it again with start.sh; etcd keeps the state. Returns
    /// once the new apiserver is ready. Blocks for a few seconds (up to 20 with clients connected).
    pub fn restart_apiserver(&self) -> Result<(), PlaneError> {
        self.stop_apiserver(Stop::Graceful)?;
        self.start_apiserver()
    }

    /// Stops kube-apiserver (gracefully or as a crash, see [`Stop`]) and waits until its port is free; etcd and the
    /// other components keep running. [`RealPlane::start_apiserver`] brings it back.
    pub fn stop_apiserver(&self, stop: Stop) -> Result<(), PlaneError> {
        self.terminate("apiserver", stop)
    }

    /// Starts kube-apiserver again after [`RealPlane::stop_apiserver`] (with the plane's flags; etcd kept the
    /// state) and returns once it is ready (start.sh waits for `/readyz`). Blocks for a few seconds.
    pub fn start_apiserver(&self) -> Result<(), PlaneError> {
        self.script(
            "start.sh",
            &[
                ("K8SREAL_SCHEDULER", if self.options.scheduler { "1" } else { "0" }),
                ("K8SREAL_CONTROLLER_MANAGER", if self.options.controller_manager { "1" } else { "0" }),
            ],
        )
        .map(|_| ())
    }

    /// Stops a component by its recorded PID ([`Stop::Graceful`]) and waits for it to exit (and, for the apiserver,
    /// for its port to be free again).
    pub fn kill(&self, component: &str) -> Result<(), PlaneError> {
        self.terminate(component, Stop::Graceful)
    }

    fn terminate(&self, component: &str, stop: Stop) -> Result<(), PlaneError> {
        let Some(pid) = self.pid(component) else {
            return Err(PlaneError::Unavailable(format!("no pid recorded for {component}")));
        };
        let signal = |sig: &str| {
            Command::new("kill")
                .args([sig, &pid.to_string()])
                .stderr(Stdio::null())
                .status()
                .map_err(|source| PlaneError::Io { what: format!("kill {sig} {component} ({pid})"), source })
        };
        let grace = match stop {
            Stop::Graceful => Duration::from_secs(15),
            Stop::Kill => Duration::ZERO,
        };
        signal(if grace.is_zero() { "-KILL" } else { "-TERM" })?;
        // Blocking waits on a real process: real time.
        let waited = Stopwatch::start();
        while process_alive(pid) {
            if waited.elapsed() > grace {
                signal("-KILL")?;
                std::thread::sleep(Duration::from_millis(300));
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // start.sh and stop.sh test liveness with `kill -0`, which a zombie passes (an orphan is not always reaped
        // at once, e.g. in containers whose init does not reap): the process is gone, so is its pid file.
        let _ = std::fs::remove_file(self.run_dir.join("pids").join(component));
        if component == "apiserver" {
            let waited = Stopwatch::start();
            while !port_free(self.ports.apiserver) {
                if waited.elapsed() > Duration::from_secs(15) {
                    return Err(PlaneError::Timeout(format!("port {} still in use", self.ports.apiserver)));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// Runs `etcdctl` (API v3) against the plane's etcd with `args`.
    pub fn etcdctl(&self, args: &[&str]) -> Result<String, PlaneError> {
        let endpoint = format!("127.0.0.1:{}", self.ports.etcd);
        let out = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &endpoint])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| PlaneError::Io {
                what: "running etcdctl (apt-get install -y etcd-client)".into(),
                source,
            })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(PlaneError::Command {
                what: format!("etcdctl {}", args.join(" ")),
                status: out.status.to_string(),
                output: tail(&out, 2000),
            })
        }
    }

    /// etcd's current revision.
    pub fn etcd_revision(&self) -> Result<i64, PlaneError> {
        let out = self.etcdctl(&["endpoint", "status", "--write-out", "json"])?;
        let parsed: serde_json::Value = serde_json::from_str(&out).map_err(|e| PlaneError::Command {
            what: "etcdctl endpoint status".into(),
            status: "unparsable output".into(),
            output: format!("{e}: {out}"),
        })?;
        let status = if parsed.is_array() { &parsed[0] } else { &parsed };
        status["Status"]["header"]["revision"].as_i64().ok_or_else(|| PlaneError::Command {
            what: "etcdctl endpoint status".into(),
            status: "no revision".into(),
            output: out.clone(),
        })
    }

    /// Compacts etcd at its current revision, so a watch or list from an older resourceVersion gets `410 Gone`
    /// (once the apiserver's watch cache has moved on). Returns the revision.
    pub fn compact_etcd(&self) -> Result<i64, PlaneError> {
        let revision = self.etcd_revision()?;
        self.etcdctl(&["compact", &revision.to_string()])?;
        Ok(revision)
    }

    /// The last `lines` lines of a component's log (`kube-apiserver`, `kube-scheduler`,
    /// `kube-controller-manager`, `etcd`), for failure messages.
    pub fn log_tail(&self, component: &str, lines: usize) -> String {
        let path = self.run_dir.join("logs").join(format!("{component}.log"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Stops the plane now (what drop does); errors are returned instead of printed.
    pub fn stop(mut self) -> Result<(), PlaneError> {
        let result = self.stop_inner();
        self.run_dir = PathBuf::new();
        result
    }

    fn stop_inner(&self) -> Result<(), PlaneError> {
        if self.run_dir.as_os_str().is_empty() {
            return Ok(());
        }
        // Each component by its pid first (see `kill`: stop.sh would wait for zombies), then stop.sh to wipe.
        for component in ["controller-manager", "scheduler", "apiserver", "etcd"] {
            if self.pid(component).is_some()
                && let Err(e) = self.kill(component)
            {
                let _ = writeln!(std::io::stderr(), "[realplane] stopping {component}: {e}");
            }
        }
        let wipe = if self.keep_state { "0" } else { "1" };
        self.script("stop.sh", &[("K8SREAL_WIPE", wipe)]).map(|_| ())
    }
}

impl Drop for RealPlane {
    fn drop(&mut self) {
        if let Err(e) = self.stop_inner() {
            let _ = writeln!(std::io::stderr(), "[realplane] stopping {}: {e}", self.run_dir.display());
        }
    }
}

/// A TCP relay in front of the apiserver that a test cuts and restores: a network partition between the clients
/// that connect through it and the plane, while the plane (and every other client) runs on. TLS passes through
/// untouched (the serving certificate names 127.0.0.1, where the relay listens too). Start it with
/// [`RealPlane::link`]; dropping it closes everything.
///
/// ```no_run
/// # async fn t(plane: &karpenter_testing::realplane::RealPlane) {
/// let link = plane.link().await.expect("link");
/// let mut config = plane.config(plane.kubeconfig()).await.expect("config");
/// config.cluster_url = link.url().parse().expect("url");
/// let client = kube::Client::try_from(config).expect("client"); // talks to the plane through the link
/// link.cut(); // its connections (watches included) drop; new ones are refused
/// // ... change things the client cannot see ...
/// link.restore(); // it reconnects; its watches resume from the resourceVersions they had
/// # drop(client);
/// # }
/// ```
#[derive(Debug)]
pub struct Link {
    addr: SocketAddr,
    up: tokio::sync::watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Link {
    /// Listens on a free loopback port and relays every connection to `target`.
    pub async fn start(target: SocketAddr) -> Result<Self, PlaneError> {
        let listener = tokio::net::TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))
            .await
            .map_err(PlaneError::Ports)?;
        let addr = listener.local_addr().map_err(PlaneError::Ports)?;
        let (up, _) = tokio::sync::watch::channel(true);
        let watch = up.clone();
        let accept = tokio::spawn(async move {
            loop {
                let mut inbound = match listener.accept().await {
                    Ok((socket, _)) => socket,
                    Err(_) => {
                        // Out of descriptors, say: try again shortly rather than spin.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let mut down = watch.subscribe();
                if !*down.borrow_and_update() {
                    // Cut: the connection is closed at once (the client sees a reset or an early EOF).
                    drop(inbound);
                    continue;
                }
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = down.wait_for(|up| !*up) => {}
                    }
                });
            }
        });
        Ok(Self { addr, up, accept })
    }

    /// `https://127.0.0.1:<port>`: the `cluster_url` for clients that should go through the link.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The local address the link listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts the link: closes every relayed connection (open watches end) and closes new ones as soon as they are
    /// accepted, until [`Link::restore`].
    pub fn cut(&self) {
        self.up.send_replace(false);
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.up.send_replace(true);
    }

    /// Whether the link is cut.
    pub fn is_cut(&self) -> bool {
        !*self.up.borrow()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.up.send_replace(false);
        self.accept.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_etcd_has_its_peer_port() {
        let p = pick_ports().expect("ports");
        let all = [p.apiserver, p.etcd, p.scheduler, p.controller_manager];
        assert!(all.iter().all(|&x| x > 0));
        assert!(port_free(p.etcd + 10) || p.etcd + 10 == p.apiserver || p.etcd + 10 == p.scheduler);
    }

    #[test]
    fn a_missing_k8s_dir_is_unavailable_not_a_failure() {
        let options = PlaneOptions { k8s_dir: Some("/nonexistent/k8s".into()), ..PlaneOptions::default() };
        match RealPlane::start(options) {
            Err(PlaneError::Unavailable(reason)) => assert!(reason.contains("start.sh"), "{reason}"),
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn base64_matches_the_standard_alphabet_with_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xff, 0xfe, 0x00, 0x01]), "//4AAQ==");
    }

    #[tokio::test]
    async fn a_cut_link_drops_its_connections_and_refuses_new_ones_until_restored() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // An echo server behind the link.
        let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = sock.read(&mut buf).await {
                        if n == 0 || sock.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let link = Link::start(target).await.unwrap();
        assert!(link.url().starts_with("https://127.0.0.1:"));
        let roundtrip = |mut sock: tokio::net::TcpStream| async move {
            sock.write_all(b"ping").await.ok()?;
            let mut buf = [0u8; 4];
            sock.read_exact(&mut buf).await.ok()?;
            Some((sock, buf))
        };
        let open = tokio::net::TcpStream::connect(link.local_addr()).await.unwrap();
        let (mut open, buf) = roundtrip(open).await.expect("relayed");
        assert_eq!(&buf, b"ping");

        link.cut();
        assert!(link.is_cut());
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), open.read_to_end(&mut rest)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "the open connection was closed: {read:?}");
        let refused = tokio::net::TcpStream::connect(link.local_addr()).await.unwrap();
        assert!(roundtrip(refused).await.is_none(), "a new connection is closed while cut");

        link.restore();
        let again = tokio::net::TcpStream::connect(link.local_addr()).await.unwrap();
        assert_eq!(roundtrip(again).await.expect("relayed again").1, *b"ping");
    }

    #[test]
    fn tail_keeps_the_end() {
        let out =
            Output { status: std::process::ExitStatus::default(), stdout: b"abcdef".to_vec(), stderr: b"XYZ".to_vec() };
        assert_eq!(tail(&out, 4), "fXYZ");
        assert_eq!(tail(&out, 100), "abcdefXYZ");
    }
}
