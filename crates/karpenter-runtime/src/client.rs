//! The controller's `kube::Client`: configuration from a kubeconfig or the in-cluster service account, our user
//! agent, client-side rate limiting (`KUBE_CLIENT_QPS` / `KUBE_CLIENT_BURST`, a token bucket as client-go's) and
//! TLS through rustls with the ring provider (no OpenSSL, no aws-lc).
//!
//! kube's default stack retries 429, 503 and 504 responses up to 15 times with backoff. That is right for
//! throttling, wrong for evictions: a PodDisruptionBudget that blocks an eviction answers 429, and retrying it
//! inside the client would stall the drain for minutes. The stack built here keeps kube's retry policy for every
//! request except `POST …/pods/<name>/eviction`, which is sent once; the caller interprets the answer (karpenter-operator's `eviction`).
//!
//! kube's HTTP client speaks HTTP/1.1 with a pool of keep-alive connections: every request in flight holds a
//! connection of its own (TLS state and buffers, tens of KB each), and idle ones stay open for 90 s. Unbounded, a
//! pass that creates thousands of NodeClaims at once opened hundreds of connections (a heap profile at 4,000 pods
//! found 370) that then sat in the pool. [`InFlightLimitLayer`] caps the requests in flight (watches, which stay
//! open, are not counted), so the pool never grows past that many connections plus the watches.
//!
//! Layers, outermost first: retry ([`ControllerRetryPolicy`]) → in-flight cap ([`InFlightLimitLayer`]) → buffer →
//! rate limit ([`RateLimitLayer`]) → kube's own stack (auth, extra headers including the user agent, tracing, the
//! HTTP/TLS connector). Retries therefore take tokens as well, as client-go's do.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{HeaderValue, Method, Request, Response};
use karpenter_cloudprovider::time::tokio_now;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::time::{Instant, Sleep};
use tower::retry::{Policy, RetryLayer};
use tower::{BoxError, Layer, Service};

/// The user agent of every request the controller sends.
pub const USER_AGENT: &str = concat!("karpenter-rs/", env!("CARGO_PKG_VERSION"));

/// How to build the controller's client.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientOptions {
    /// Requests per second (`KUBE_CLIENT_QPS`); 0 disables client-side rate limiting.
    pub qps: u32,
    /// Requests that may go out at once above the rate (`KUBE_CLIENT_BURST`); at least 1 is used.
    pub burst: u32,
    /// The `User-Agent` header.
    pub user_agent: String,
    /// A kubeconfig file to use; `None` infers the configuration: `$KUBECONFIG` or `~/.kube/config`, else the
    /// in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; `None` is the current context.
    pub context: Option<String>,
}

impl ClientOptions {
    /// The given rate and burst, with our user agent and an inferred configuration.
    pub fn new(qps: u32, burst: u32) -> Self {
        Self { qps, burst, user_agent: USER_AGENT.to_string(), kubeconfig: None, context: None }
    }
}

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig the options name could not be read or used.
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// What was wrong with it.
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error("no Kubernetes configuration found (neither a kubeconfig nor an in-cluster service account): {0}")]
    Infer(#[from] kube::config::InferConfigError),
    /// The user agent is not a valid header value.
    #[error("user agent {0:?} is not a valid header value")]
    UserAgent(String),
    /// kube refused the configuration (TLS, proxy, …).
    #[error("building the Kubernetes client: {0}")]
    Build(#[from] kube::Error),
}

/// Loads the configuration the options name (see [`ClientOptions::kubeconfig`]).
pub async fn load_config(options: &ClientOptions) -> Result<Config, ClientError> {
    match &options.kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).map_err(|source| ClientError::Kubeconfig { path: path.clone(), source })?;
            let kc_options = KubeConfigOptions { context: options.context.clone(), ..KubeConfigOptions::default() };
            Config::from_custom_kubeconfig(kubeconfig, &kc_options)
                .await
                .map_err(|source| ClientError::Kubeconfig { path: path.clone(), source })
        }
        None => Ok(Config::infer().await?),
    }
}

/// Loads the configuration and builds the client ([`load_config`] then [`client_from_config`]).
pub async fn build_client(options: &ClientOptions) -> Result<Client, ClientError> {
    client_from_config(load_config(options).await?, options)
}

/// Builds the controller's client from a configuration: the user agent header, the rate limit, and kube's retry
/// policy for everything but evictions. Needs a tokio runtime (the client spawns its buffer tasks).
pub fn client_from_config(mut config: Config, options: &ClientOptions) -> Result<Client, ClientError> {
    install_crypto_provider();
    let agent =
        HeaderValue::from_str(&options.user_agent).map_err(|_| ClientError::UserAgent(options.user_agent.clone()))?;
    config.headers.retain(|(name, _)| name != http::header::USER_AGENT);
    config.headers.push((http::header::USER_AGENT, agent));
    // Our retry layer replaces kube's (which would retry PDB-blocked evictions).
    config.default_retry = false;
    let builder = ClientBuilder::try_from(config)?
        .with_layer(&RateLimitLayer::new(options.qps, options.burst))
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&InFlightLimitLayer::new(MAX_REQUESTS_IN_FLIGHT))
        .with_layer(&RetryLayer::new(ControllerRetryPolicy::default()));
    Ok(builder.build())
}

/// Makes ring the process's rustls crypto provider unless one is installed already. rustls picks a provider by
/// itself only when exactly one is compiled in; another dependency enabling aws-lc-rs would make that ambiguous.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only if another thread installed one in between, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Whether a request is a pod eviction (`POST /api/v1/namespaces/<ns>/pods/<name>/eviction`).
pub fn is_eviction<B>(request: &Request<B>) -> bool {
    request.method() == Method::POST && request.uri().path().ends_with("/eviction")
}

/// kube's server-aware retry policy (429/503/504, `Retry-After`, exponential backoff, 15 attempts), except for
/// evictions, which are never retried here.
#[derive(Clone)]
pub struct ControllerRetryPolicy(RetryPolicy);

impl Default for ControllerRetryPolicy {
    fn default() -> Self {
        Self(RetryPolicy::server_retry())
    }
}

impl std::fmt::Debug for ControllerRetryPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ControllerRetryPolicy")
    }
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for ControllerRetryPolicy {
    type Future = Sleep;

    fn retry(&mut self, req: &mut Request<Body>, result: &mut Result<Response<Res>, BoxError>) -> Option<Sleep> {
        if is_eviction(req) { None } else { self.0.retry(req, result) }
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        if is_eviction(req) {
            None
        } else {
            <RetryPolicy as Policy<Request<Body>, Response<Res>, BoxError>>::clone_request(&mut self.0, req)
        }
    }
}

/// A token bucket: `burst` tokens, refilled at `qps` per second.
///
/// Its time is passed in (`now`), and [`RateLimit`] reads it with [`tokio_now`]: the refill must be measured on
/// the clock the wait it computes is slept on (tokio's timer). On paused time (tests) a bucket on real time
/// would see no refill after the sleep and wait again and again; on tokio's clock, tests pause and advance it
/// and the bucket follows. The wall [`Clock`](karpenter_cloudprovider::Clock) would be wrong too: a step of the
/// wall clock would empty or fill the bucket.
#[derive(Debug)]
struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`.
    fn new(qps: u32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self { qps: f64::from(qps), burst, tokens: burst, last: now }
    }

    /// Takes a token at `now`, or says how long until one is there.
    fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(((1.0 - self.tokens) / self.qps).max(0.000_001)))
        }
    }
}

/// A tower layer limiting the request rate with a token bucket (client-go's client-side rate limiter):
/// up to `burst` requests at once, then `qps` per second. Requests wait; none is refused. `qps = 0` disables it.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Option<Arc<Mutex<TokenBucket>>>,
}

impl RateLimitLayer {
    /// `qps` requests per second with bursts of `burst` (at least 1); 0 `qps` lets everything through.
    pub fn new(qps: u32, burst: u32) -> Self {
        Self { bucket: (qps > 0).then(|| Arc::new(Mutex::new(TokenBucket::new(qps, burst, tokio_now())))) }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit { inner, bucket: self.bucket.clone(), sleep: None, permit: false }
    }
}

/// The service of [`RateLimitLayer`]. Clones share the bucket.
#[derive(Debug)]
pub struct RateLimit<S> {
    inner: S,
    bucket: Option<Arc<Mutex<TokenBucket>>>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// A token was taken for the next call.
    permit: bool,
}

impl<S: Clone> Clone for RateLimit<S> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), bucket: self.bucket.clone(), sleep: None, permit: false }
    }
}

impl<S, Req> Service<Req> for RateLimit<S>
where
    S: Service<Req>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if let Some(bucket) = &self.bucket {
            while !self.permit {
                if let Some(sleep) = self.sleep.as_mut() {
                    ready!(sleep.as_mut().poll(cx));
                    self.sleep = None;
                }
                let taken = bucket.lock().unwrap_or_else(PoisonError::into_inner).try_take(tokio_now());
                match taken {
                    Ok(()) => self.permit = true,
                    Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.permit = false;
        self.inner.call(req)
    }
}

/// Requests the controller has in flight at most, watches aside (see the module docs). At the API server's usual
/// latencies (10-100 ms) that allows far more than the client's rate limit of 200 per second.
pub const MAX_REQUESTS_IN_FLIGHT: usize = 64;

/// Whether a request is a watch (`?watch=true`), a stream that stays open for minutes.
pub fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// A tower layer capping the requests in flight, watches excepted: a request past the cap waits for one to be
/// answered. Clones of the service share the cap.
#[derive(Debug, Clone)]
pub struct InFlightLimitLayer {
    permits: Arc<tokio::sync::Semaphore>,
}

impl InFlightLimitLayer {
    /// At most `max` requests (at least 1) in flight at once.
    pub fn new(max: usize) -> Self {
        Self { permits: Arc::new(tokio::sync::Semaphore::new(max.max(1))) }
    }
}

impl<S> Layer<S> for InFlightLimitLayer {
    type Service = InFlightLimit<S>;
    fn layer(&self, inner: S) -> InFlightLimit<S> {
        InFlightLimit { inner, permits: self.permits.clone() }
    }
}

/// The service of [`InFlightLimitLayer`]. Always ready: a request waits for its permit, then for the inner
/// service, inside its own future, so waiting requests hold nothing of the layers below.
#[derive(Debug, Clone)]
pub struct InFlightLimit<S> {
    inner: S,
    permits: Arc<tokio::sync::Semaphore>,
}

impl<S, B> Service<Request<B>> for InFlightLimit<S>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: Send,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let mut inner = self.inner.clone();
        let permits = (!is_watch(&req)).then(|| self.permits.clone());
        Box::pin(async move {
            // The semaphore is never closed, so acquiring only fails if it were: then go on uncapped.
            let _permit = match permits {
                Some(p) => p.acquire_owned().await.ok(),
                None => None,
            };
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            inner.call(req).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tower::ServiceExt;

    #[tokio::test(start_paused = true)]
    async fn token_bucket_allows_the_burst_then_the_rate() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counter = calls.clone();
        let inner = tower::service_fn(move |_: ()| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, BoxError>(()) }
        });
        let mut svc = RateLimitLayer::new(10, 3).layer(inner);
        let start = tokio_now();
        let mut times = Vec::new();
        for _ in 0..6 {
            svc.ready().await.unwrap().call(()).await.unwrap();
            times.push((tokio_now() - start).as_millis());
        }
        assert_eq!(calls.load(Ordering::SeqCst), 6);
        // Three at once (the burst), then one every 100 ms (10 per second).
        assert_eq!(times, [0, 0, 0, 100, 200, 300]);
        // Idle time refills the bucket, up to the burst only.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let idle = tokio_now();
        for _ in 0..4 {
            svc.ready().await.unwrap().call(()).await.unwrap();
        }
        assert_eq!((tokio_now() - idle).as_millis(), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn requests_in_flight_are_capped_but_watches_are_not() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (now, high) = (in_flight.clone(), most.clone());
        let inner = tower::service_fn(move |_: Request<()>| {
            let (now, high) = (now.clone(), high.clone());
            async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                high.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, BoxError>(())
            }
        });
        let svc = InFlightLimitLayer::new(2).layer(inner);
        let get = |path: &str| Request::builder().uri(path).body(()).unwrap();
        let start = tokio_now();
        let calls: Vec<_> = (0..6).map(|_| svc.clone().oneshot(get("/api/v1/nodes"))).collect();
        futures::future::join_all(calls).await;
        assert_eq!(most.load(Ordering::SeqCst), 2, "never more than the cap at once");
        assert_eq!(tokio_now() - start, Duration::from_millis(300), "six requests, two at a time");

        // Watches pass beside capped requests: two lists hold both permits, three watches still run at once.
        most.store(0, Ordering::SeqCst);
        let mut calls: Vec<_> = (0..2).map(|_| svc.clone().oneshot(get("/api/v1/pods"))).collect();
        calls.extend((0..3).map(|_| svc.clone().oneshot(get("/api/v1/pods?watch=true&resourceVersion=1"))));
        futures::future::join_all(calls).await;
        assert_eq!(most.load(Ordering::SeqCst), 5);
        assert!(is_watch(&get("/api/v1/pods?labelSelector=a&watch=1")));
        assert!(!is_watch(&get("/api/v1/pods?watchers=true")));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_qps_disables_limiting_and_clones_share_the_bucket() {
        let inner = tower::service_fn(|_: ()| async { Ok::<_, BoxError>(()) });
        let mut unlimited = RateLimitLayer::new(0, 0).layer(inner);
        let start = tokio_now();
        for _ in 0..1000 {
            unlimited.ready().await.unwrap().call(()).await.unwrap();
        }
        assert_eq!(tokio_now() - start, Duration::ZERO);

        let layer = RateLimitLayer::new(1, 1);
        let mut a = layer.layer(inner);
        let mut b = layer.layer(inner);
        a.ready().await.unwrap().call(()).await.unwrap();
        b.ready().await.unwrap().call(()).await.unwrap();
        assert_eq!(tokio_now() - start, Duration::from_secs(1), "the second service waited for the shared bucket");
    }

    /// The bucket alone, at instants given by the test: the refill is exact and capped at the burst.
    #[tokio::test(start_paused = true)]
    async fn token_bucket_refills_with_the_time_it_is_given() {
        let t0 = tokio_now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut bucket = TokenBucket::new(4, 2, t0);
        assert_eq!((bucket.try_take(t0), bucket.try_take(t0)), (Ok(()), Ok(())), "the burst");
        assert_eq!(bucket.try_take(t0), Err(Duration::from_millis(250)), "one token every 250 ms");
        assert_eq!(bucket.try_take(at(125)), Err(Duration::from_millis(125)), "half a token accrued");
        assert_eq!(bucket.try_take(at(250)), Ok(()));
        // An hour idle refills the burst, no more; time going backwards refills nothing.
        assert_eq!((bucket.try_take(at(3_600_000)), bucket.try_take(at(3_600_000))), (Ok(()), Ok(())));
        assert!(bucket.try_take(at(3_600_000)).is_err());
        assert!(bucket.try_take(at(0)).is_err());
    }

    fn request(method: Method, path: &str) -> Request<Body> {
        Request::builder().method(method).uri(path).body(Body::from(b"{}".to_vec())).unwrap()
    }

    fn too_many() -> Result<Response<()>, BoxError> {
        Ok(Response::builder().status(429).body(()).unwrap())
    }

    #[tokio::test]
    async fn retry_policy_retries_throttling_but_never_evictions() {
        let mut policy = ControllerRetryPolicy::default();
        let mut get = request(Method::GET, "/api/v1/namespaces/default/pods");
        assert!(policy.retry(&mut get, &mut too_many()).is_some(), "a throttled list is retried");
        assert!(<ControllerRetryPolicy as Policy<_, Response<()>, _>>::clone_request(&mut policy, &get).is_some());

        let mut evict = request(Method::POST, "/api/v1/namespaces/default/pods/web-1/eviction");
        assert!(is_eviction(&evict));
        assert!(policy.retry(&mut evict, &mut too_many()).is_none(), "a PDB-blocked eviction is not retried");
        assert!(<ControllerRetryPolicy as Policy<_, Response<()>, _>>::clone_request(&mut policy, &evict).is_none());
        let mut ok: Result<Response<()>, BoxError> = Ok(Response::builder().status(200).body(()).unwrap());
        assert!(policy.retry(&mut get, &mut ok).is_none());
        assert!(!is_eviction(&request(Method::GET, "/api/v1/namespaces/default/pods/eviction")));
    }

    /// A one-shot HTTP/1.1 server on a local port: answers every request with `status` and `body`, records the
    /// request heads it saw.
    async fn fake_server(status: u16, body: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else { return };
                let record = record.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut filled = 0;
                    loop {
                        let Ok(n) = sock.read(&mut buf[filled..]).await else { return };
                        if n == 0 {
                            return;
                        }
                        filled += n;
                        let text = String::from_utf8_lossy(&buf[..filled]).to_string();
                        let Some(head_end) = text.find("\r\n\r\n") else { continue };
                        let length = text[..head_end]
                            .lines()
                            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(str::to_owned))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if filled < head_end + 4 + length {
                            continue;
                        }
                        record.lock().unwrap().push(text[..head_end].to_string());
                        filled = 0;
                        let reason = if status == 200 { "OK" } else { "Too Many Requests" };
                        let response = format!(
                            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nretry-after: 0\r\n\
                             content-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if sock.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}"), seen)
    }

    fn options() -> ClientOptions {
        ClientOptions { qps: 200, burst: 300, user_agent: USER_AGENT.into(), kubeconfig: None, context: None }
    }

    #[tokio::test]
    async fn client_sends_our_user_agent_and_sends_an_eviction_once() {
        let (url, seen) = fake_server(200, r#"{"major":"1","minor":"33","gitVersion":"v1.33.0"}"#).await;
        let client = client_from_config(Config::new(url.parse().unwrap()), &options()).unwrap();
        let version = client.apiserver_version().await.unwrap();
        assert_eq!(version.git_version, "v1.33.0");
        let heads = seen.lock().unwrap().clone();
        assert_eq!(heads.len(), 1);
        assert!(heads[0].to_ascii_lowercase().contains(&format!("user-agent: {}", USER_AGENT.to_ascii_lowercase())));

        let status = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"TooManyRequests","code":429,
                          "message":"Cannot evict pod as it would violate the pod's disruption budget."}"#;
        let (url, seen) = fake_server(429, status).await;
        let client = client_from_config(Config::new(url.parse().unwrap()), &options()).unwrap();
        let req = Request::builder()
            .method(Method::POST)
            .uri("/api/v1/namespaces/default/pods/web-1/eviction")
            .header("content-type", "application/json")
            .body(b"{}".to_vec())
            .unwrap();
        let err = client.request::<serde_json::Value>(req).await.unwrap_err();
        assert!(matches!(&err, kube::Error::Api(s) if s.code == 429), "{err:?}");
        assert_eq!(seen.lock().unwrap().len(), 1, "the blocked eviction went out exactly once");
    }

    #[tokio::test]
    async fn https_endpoints_get_a_rustls_connector_and_bad_kubeconfigs_are_named() {
        // TLS is compiled in: an https cluster URL builds (kube answers TlsRequired without a TLS stack).
        client_from_config(Config::new("https://127.0.0.1:6443".parse().unwrap()), &options()).unwrap();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());

        let missing = ClientOptions { kubeconfig: Some("/nonexistent/kubeconfig".into()), ..options() };
        let err = load_config(&missing).await.unwrap_err();
        assert!(err.to_string().starts_with("reading kubeconfig /nonexistent/kubeconfig"), "{err}");

        let bad_agent = ClientOptions { user_agent: "bad\nagent".into(), ..options() };
        let result = client_from_config(Config::new("http://127.0.0.1:1".parse().unwrap()), &bad_agent);
        assert!(matches!(result, Err(ClientError::UserAgent(_))));
    }

    #[tokio::test]
    async fn kubeconfig_file_and_context_are_honoured() {
        let path = std::env::temp_dir().join(format!("karpenter-runtime-kubeconfig-{}", std::process::id()));
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
             clusters:\n- name: a\n  cluster: {server: 'https://a.example:6443'}\n\
             - name: b\n  cluster: {server: 'http://127.0.0.1:8001'}\n\
             contexts:\n- name: a\n  context: {cluster: a, user: u}\n- name: b\n  context: {cluster: b, user: u, namespace: kube-system}\n\
             users:\n- name: u\n  user: {token: abc}\n",
        )
        .unwrap();
        let current = load_config(&ClientOptions { kubeconfig: Some(path.clone()), ..options() }).await.unwrap();
        assert_eq!(current.cluster_url.to_string(), "https://a.example:6443/");
        let b = ClientOptions { kubeconfig: Some(path.clone()), context: Some("b".into()), ..options() };
        let config = load_config(&b).await.unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:8001/");
        assert_eq!(config.default_namespace, "kube-system");
        client_from_config(config, &b).unwrap();
    }
}
