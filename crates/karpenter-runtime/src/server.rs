//! The controller's HTTP servers (hyper 1, HTTP/1.1): `/metrics` on `METRICS_PORT` (8080) and the probes
//! `/healthz` and `/readyz` on `HEALTH_PROBE_PORT` (8081), as upstream serves them.
//!
//! - `/healthz`: the `ping` check (answers while the process serves) plus any liveness checks added.
//! - `/readyz`: `ping` ∧ `started` (set once the manager runs its controllers: [`Probes::set_started`]) ∧ the
//!   readiness checks added, typically [`crds_present`].
//!
//! A passing probe answers 200 `ok`; a failing one 500 with one line per check (`[+]name ok` /
//! `[-]name failed: reason`) and `<probe> check failed`, in the style of controller-runtime's handlers;
//! `?verbose` lists the checks on success too. Both servers stop accepting when the shutdown token is cancelled
//! and let open requests finish. [`start`] binds the address it is given, so tests bind port 0.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::{CONTENT_TYPE, Metrics};
use crate::profiling::{self, ProfileError, Profiling};

/// The future of one check: `Err` carries the reason it fails.
pub type CheckFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
/// A named health check.
pub type Check = Arc<dyn Fn() -> CheckFuture + Send + Sync>;

/// How long one check may take before it counts as failed.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The probe checks. Clones share the `started` flag.
#[derive(Clone)]
pub struct Probes {
    started: Arc<AtomicBool>,
    liveness: Vec<(String, Check)>,
    readiness: Vec<(String, Check)>,
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes")
            .field("started", &self.is_started())
            .field("liveness", &self.liveness.iter().map(|(n, _)| n).collect::<Vec<_>>())
            .field("readiness", &self.readiness.iter().map(|(n, _)| n).collect::<Vec<_>>())
            .finish()
    }
}

impl Default for Probes {
    fn default() -> Self {
        Self::new()
    }
}

impl Probes {
    /// Only `ping` (both probes) and `started` (readiness), not yet started.
    pub fn new() -> Self {
        Self { started: Arc::new(AtomicBool::new(false)), liveness: Vec::new(), readiness: Vec::new() }
    }

    /// Adds a check to `/healthz` (e.g. a provider cache whose lock must be obtainable).
    pub fn with_liveness_check(mut self, name: impl Into<String>, check: Check) -> Self {
        self.liveness.push((name.into(), check));
        self
    }

    /// Adds a check to `/readyz` (e.g. [`crds_present`]).
    pub fn with_readiness_check(mut self, name: impl Into<String>, check: Check) -> Self {
        self.readiness.push((name.into(), check));
        self
    }

    /// Marks the manager as started (readiness then depends on the checks only).
    pub fn set_started(&self) {
        self.started.store(true, Ordering::SeqCst);
    }

    /// Whether [`Probes::set_started`] was called.
    pub fn is_started(&self) -> bool {
        self.started.load(Ordering::SeqCst)
    }

    /// Runs the probe's checks in order: (all passed, report lines).
    async fn run(&self, ready: bool) -> (bool, Vec<String>) {
        let mut lines = vec!["[+]ping ok".to_string()];
        let mut ok = true;
        if ready {
            if self.is_started() {
                lines.push("[+]started ok".into());
            } else {
                ok = false;
                lines.push("[-]started failed: the manager has not started its controllers yet".into());
            }
        }
        let checks = if ready { &self.readiness } else { &self.liveness };
        for (name, check) in checks {
            match tokio::time::timeout(CHECK_TIMEOUT, check()).await {
                Ok(Ok(())) => lines.push(format!("[+]{name} ok")),
                Ok(Err(reason)) => {
                    ok = false;
                    lines.push(format!("[-]{name} failed: {reason}"));
                }
                Err(_) => {
                    ok = false;
                    lines.push(format!("[-]{name} failed: timed out after {CHECK_TIMEOUT:?}"));
                }
            }
        }
        (ok, lines)
    }
}

/// A readiness check passing when every named CRD (e.g. `nodepools.karpenter.sh`) is installed.
pub fn crds_present(client: kube::Client, names: Vec<String>) -> Check {
    Arc::new(move || {
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        let names = names.clone();
        Box::pin(async move {
            let mut missing = Vec::new();
            for name in &names {
                match api.get_opt(name).await {
                    Ok(Some(_)) => {}
                    Ok(None) => missing.push(name.clone()),
                    Err(e) => return Err(format!("reading CRD {name}: {e}")),
                }
            }
            if missing.is_empty() { Ok(()) } else { Err(format!("CRDs not installed: {}", missing.join(", "))) }
        })
    })
}

/// What a server answers.
#[derive(Clone)]
enum Routes {
    /// `/metrics`, and the profiles under `/debug/pprof/` when profiling is on (`ENABLE_PROFILING`).
    Metrics(Arc<Metrics>, Option<Profiling>),
    Probes(Probes),
}

/// A profile, or the status and reason it was not served.
async fn profile(profiling: &Profiling, path: &str, query: Option<&str>) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    const PROTOBUF: &str = "application/octet-stream";
    let served = match path {
        "/debug/pprof" => return text(StatusCode::OK, "text/html; charset=utf-8", profiling.index()),
        "/debug/pprof/profile" => match profiling::cpu_seconds(query) {
            Ok(seconds) => profiling::cpu_profile(Duration::from_secs(seconds)).await,
            Err(e) => Err(e),
        },
        "/debug/pprof/heap" => profiling.heap().await,
        _ => return text(StatusCode::NOT_FOUND, PLAIN, "404 page not found\n".into()),
    };
    match served {
        Ok(bytes) => {
            let mut response = Response::new(Full::new(Bytes::from(bytes)));
            response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(PROTOBUF));
            let name = if path.ends_with("heap") { "heap" } else { "profile" };
            let disposition = format!("attachment; filename=\"{name}\"");
            if let Ok(value) = header::HeaderValue::from_str(&disposition) {
                response.headers_mut().insert(header::CONTENT_DISPOSITION, value);
            }
            response
        }
        Err(e) => {
            let status = match e {
                ProfileError::BadRequest(_) => StatusCode::BAD_REQUEST,
                ProfileError::Busy => StatusCode::CONFLICT,
                ProfileError::Unavailable(_) => StatusCode::NOT_IMPLEMENTED,
                ProfileError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            text(status, PLAIN, format!("{e}\n"))
        }
    }
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    response
}

async fn handle(routes: Routes, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "method not allowed\n".into()));
    }
    let path = req.uri().path().trim_end_matches('/');
    let verbose = req.uri().query().is_some_and(|q| q.split('&').any(|p| p == "verbose" || p.starts_with("verbose=")));
    let response = match (&routes, path) {
        (Routes::Metrics(metrics, _), "/metrics") => text(StatusCode::OK, CONTENT_TYPE, metrics.render()),
        (Routes::Metrics(_, Some(profiling)), p) if p == "/debug/pprof" || p.starts_with("/debug/pprof/") => {
            profile(profiling, p, req.uri().query()).await
        }
        (Routes::Probes(probes), "/healthz" | "/readyz") => {
            let ready = path == "/readyz";
            let (ok, mut lines) = probes.run(ready).await;
            let probe = if ready { "readyz" } else { "healthz" };
            if ok && !verbose {
                text(StatusCode::OK, PLAIN, "ok".into())
            } else {
                lines.push(if ok { format!("{probe} check passed") } else { format!("{probe} check failed") });
                let status = if ok { StatusCode::OK } else { StatusCode::INTERNAL_SERVER_ERROR };
                text(status, PLAIN, lines.join("\n") + "\n")
            }
        }
        _ => text(StatusCode::NOT_FOUND, PLAIN, "404 page not found\n".into()),
    };
    Ok(response)
}

/// A running server: its bound address and its task (which ends after shutdown, once open connections closed).
#[derive(Debug)]
pub struct RunningServer {
    /// The address the server listens on (the real port when asked for port 0).
    pub local_addr: SocketAddr,
    /// The serving task.
    pub task: JoinHandle<()>,
}

/// Serves `/metrics` on `addr` until `shutdown` is cancelled.
pub async fn start_metrics(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> std::io::Result<RunningServer> {
    start_metrics_with(addr, metrics, None, shutdown).await
}

/// [`start_metrics`], with the profiles of [`crate::profiling`] when `profiling` is given (`ENABLE_PROFILING`).
pub async fn start_metrics_with(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    profiling: Option<Profiling>,
    shutdown: CancellationToken,
) -> std::io::Result<RunningServer> {
    start(addr, Routes::Metrics(metrics, profiling), shutdown).await
}

/// Serves `/healthz` and `/readyz` on `addr` until `shutdown` is cancelled.
pub async fn start_probes(
    addr: SocketAddr,
    probes: Probes,
    shutdown: CancellationToken,
) -> std::io::Result<RunningServer> {
    start(addr, Routes::Probes(probes), shutdown).await
}

async fn start(addr: SocketAddr, routes: Routes, shutdown: CancellationToken) -> std::io::Result<RunningServer> {
    let listener = TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    let task = tokio::spawn(accept_loop(listener, routes, shutdown));
    Ok(RunningServer { local_addr, task })
}

async fn accept_loop(listener: TcpListener, routes: Routes, shutdown: CancellationToken) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let routes = routes.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let service = service_fn(move |req| handle(routes.clone(), req));
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
        // Reap finished connections so the set does not grow.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::BuildInfo;
    use karpenter_testing::apiserver::ApiServer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A plain HTTP/1.1 GET over TCP: (status, headers, body).
    async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_ascii_lowercase(), body.to_string())
    }

    fn local() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    #[tokio::test]
    async fn metrics_endpoint_serves_the_exposition() {
        let metrics = Arc::new(Metrics::new(&BuildInfo::current("abc", "1.95")));
        metrics.nodeclaims_created("provisioned", "default", "false").inc();
        let shutdown = CancellationToken::new();
        let server = start_metrics(local(), metrics.clone(), shutdown.clone()).await.unwrap();
        assert_ne!(server.local_addr.port(), 0);
        let (status, head, body) = get(server.local_addr, "/metrics").await;
        assert_eq!(status, 200);
        assert!(head.contains("content-type: application/openmetrics-text"), "{head}");
        assert!(body.contains("karpenter_nodeclaims_created_total{reason=\"provisioned\""), "{body}");
        assert!(body.contains("karpenter_build_info{"));
        assert_eq!(get(server.local_addr, "/healthz").await.0, 404, "probes live on their own port");

        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), server.task).await.unwrap().unwrap();
        assert!(tokio::net::TcpStream::connect(server.local_addr).await.is_err(), "stopped listening");
    }

    /// A GET whose body is bytes (a profile): (status, body).
    async fn get_bytes(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8_lossy(&raw[..end]).to_string();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, raw[end + 4..].to_vec())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn profiles_are_served_only_when_enabled_and_decode_with_samples() {
        use pprof::protos::Message;
        let metrics = Arc::new(Metrics::new(&BuildInfo::current("abc", "1.95")));
        let shutdown = CancellationToken::new();
        let off = start_metrics(local(), metrics.clone(), shutdown.clone()).await.unwrap();
        for path in ["/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/heap"] {
            assert_eq!(get(off.local_addr, path).await.0, 404, "{path} with profiling off");
        }
        let on = start_metrics_with(local(), metrics, Some(Profiling::new()), shutdown.clone()).await.unwrap();
        let addr = on.local_addr;
        let (status, _, index) = get(addr, "/debug/pprof/").await;
        assert_eq!(status, 200);
        assert!(index.contains("href=\"profile?seconds=30\""), "{index}");
        let (status, _, body) = get(addr, "/debug/pprof/heap").await;
        assert_eq!(status, 501, "no heap reader given: {body}");
        assert_eq!(get(addr, "/debug/pprof/profile?seconds=0").await.0, 400);
        assert_eq!(get(addr, "/debug/pprof/goroutine").await.0, 404);

        // A thread burns CPU while two 2 s profiles are asked for at once: they overlap whatever the scheduling, so
        // exactly one is taken and the other is turned away (which one wins is up to the machine's load).
        let spinning = Arc::new(AtomicBool::new(true));
        let spinner = std::thread::spawn({
            let spinning = spinning.clone();
            move || {
                let mut x = 0u64;
                while spinning.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
        });
        let first = tokio::spawn(get_bytes(addr, "/debug/pprof/profile?seconds=2"));
        let second = tokio::spawn(get_bytes(addr, "/debug/pprof/profile?seconds=2"));
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        spinning.store(false, Ordering::Relaxed);
        spinner.join().unwrap();
        let (taken, refused) = if first.0 == 200 { (first, second) } else { (second, first) };
        assert_eq!(refused.0, 409, "{}", String::from_utf8_lossy(&refused.1));
        let (status, bytes) = taken;
        assert_eq!(status, 200);
        let decoded = pprof::protos::Profile::decode(bytes.as_slice()).expect("a pprof protobuf profile");
        assert!(!decoded.sample.is_empty(), "no samples in {} bytes", bytes.len());
        let samples: i64 = decoded.sample.iter().map(|s| s.value.iter().sum::<i64>()).sum();
        assert!(samples >= 50, "about 100 samples a second of the busy thread, got {samples}");
        assert!(decoded.string_table.iter().any(|s| s == "cpu"), "{:?}", &decoded.string_table[..5]);
        shutdown.cancel();
    }

    #[tokio::test]
    async fn readyz_needs_started_and_crds_and_healthz_only_ping() {
        let api = ApiServer::new();
        let crds = crds_present(api.client(), vec!["nodepools.karpenter.sh".into(), "nodeclaims.karpenter.sh".into()]);
        let probes = Probes::new().with_readiness_check("crds", crds);
        let shutdown = CancellationToken::new();
        let server = start_probes(local(), probes.clone(), shutdown.clone()).await.unwrap();
        let addr = server.local_addr;

        assert_eq!(get(addr, "/healthz").await, (200, get(addr, "/healthz").await.1, "ok".into()));
        let (status, _, body) = get(addr, "/readyz").await;
        assert_eq!(status, 500);
        assert!(body.contains("[+]ping ok\n[-]started failed"), "{body}");
        assert!(body.contains("[+]crds ok") && body.ends_with("readyz check failed\n"), "{body}");

        probes.set_started();
        let (status, _, body) = get(addr, "/readyz").await;
        assert_eq!((status, body.as_str()), (200, "ok"));
        let (status, _, body) = get(addr, "/readyz?verbose").await;
        assert_eq!(status, 200);
        assert_eq!(body, "[+]ping ok\n[+]started ok\n[+]crds ok\nreadyz check passed\n");
        assert_eq!(get(addr, "/metrics").await.0, 404);
        shutdown.cancel();
        server.task.await.unwrap();
    }

    #[tokio::test]
    async fn failing_checks_name_what_is_missing() {
        let api = ApiServer::new();
        let crds = crds_present(api.client(), vec!["nodepools.karpenter.sh".into(), "widgets.example.com".into()]);
        let stuck: Check = Arc::new(|| Box::pin(async { Err::<(), _>("cache lock held".to_string()) }));
        let probes = Probes::new().with_readiness_check("crds", crds).with_liveness_check("pricing", stuck);
        probes.set_started();
        let shutdown = CancellationToken::new();
        let server = start_probes(local(), probes, shutdown.clone()).await.unwrap();
        let (status, _, body) = get(server.local_addr, "/readyz").await;
        assert_eq!(status, 500);
        assert!(body.contains("[-]crds failed: CRDs not installed: widgets.example.com"), "{body}");
        let (status, _, body) = get(server.local_addr, "/healthz").await;
        assert_eq!(status, 500);
        assert!(body.contains("[-]pricing failed: cache lock held") && body.contains("healthz check failed"));
        shutdown.cancel();
        server.task.await.unwrap();
    }
}
