//! Leader election on a `coordination.k8s.io/v1` Lease, with the timings and rules of client-go's leader
//! election (which upstream Karpenter uses through controller-runtime), so a Rust replica and an upstream replica
//! would even respect each other's Lease.
//!
//! - A candidate reads the Lease every `retry_period` (2 s). It takes the Lease when it is free (no holder), or
//!   when the holder's record has not changed for `lease_duration` (15 s) as measured on the candidate's own
//!   monotonic clock since it last saw the record change (not the `renewTime` written in it, so clock skew between
//!   nodes does not matter). Every write is an update carrying the read `resourceVersion`: of two candidates
//!   writing at once, one gets 409 Conflict and stays a candidate.
//! - The leader renews every `retry_period`; when no renewal succeeded for `renew_deadline` (10 s) it has lost
//!   the Lease: [`Leadership::lost`] is cancelled and the process should exit (controllers must not run twice).
//! - On shutdown the leader releases the Lease (holder cleared, duration 1 s) so the other replica takes over
//!   within one retry period instead of waiting for expiry.
//!
//! Give the elector its own `kube::Client` (build a second one with [`crate::client::build_client`]): renewals
//! must not queue behind the controllers' requests in the shared rate limiter, or a busy leader could lose its
//! Lease.
//!
//! Time goes through the clock module, in two kinds. Times written into the Lease (`acquireTime`, `renewTime`)
//! are wall time from the injected [`Clock`]. When the record was last seen to change, and when this replica last
//! renewed, are read with [`tokio_now`], tokio's monotonic clock, which tests pause and advance: these decide
//! expiry and the renew deadline, so they must not jump with the wall clock (an NTP step would expire or extend a
//! Lease; client-go measures them on Go's monotonic clock reading), and they must be on the clock the election's
//! timers run on (the retry-period sleep, the renew-deadline timeout), or on paused time the timers would fire
//! while the measured time stood still.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use karpenter_cloudprovider::Clock;
use karpenter_cloudprovider::time::tokio_now;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where the Lease is and how the election is timed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// The Lease's name.
    pub name: String,
    /// The Lease's namespace.
    pub namespace: String,
    /// This replica's identity, written as `holderIdentity`; unique per process (see [`identity`]).
    pub identity: String,
    /// How long a Lease whose record does not change stays with its holder (15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up the leadership (10 s).
    pub renew_deadline: Duration,
    /// Time between two attempts to acquire or renew (2 s).
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// controller-runtime's lease duration: 15 s.
    pub const LEASE_DURATION: Duration = Duration::from_secs(15);
    /// controller-runtime's renew deadline: 10 s.
    pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
    /// controller-runtime's retry period: 2 s.
    pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

    /// The Lease `namespace`/`name`, held as `identity`, with the default timings.
    pub fn new(name: String, namespace: String, identity: String) -> Self {
        Self {
            name,
            namespace,
            identity,
            lease_duration: Self::LEASE_DURATION,
            renew_deadline: Self::RENEW_DEADLINE,
            retry_period: Self::RETRY_PERIOD,
        }
    }
}

/// A unique identity for this process: `<pod name>_<random hex>` (the pod name alone is not enough: a restarted
/// container has the same one but must not inherit the old process's leadership unannounced). The random part
/// comes from the standard library's per-process hash keys, which are seeded from the OS's random source.
pub fn identity(pod_name: &str) -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{pod_name}_{:016x}", hasher.finish())
}

/// The pod name from `POD_NAME` (set by the chart from the downward API) or `HOSTNAME` (the pod name inside a
/// pod), else `karpenter`.
pub fn pod_name_from_env() -> String {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "karpenter".to_string())
}

/// Why the election stopped before this replica became the leader.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The shutdown token was cancelled first.
    #[error("shut down before acquiring the leader-election Lease")]
    Cancelled,
    /// The timings cannot work (the renew deadline must be under the lease duration, the retry period positive).
    #[error("invalid leader-election timings: {0}")]
    Config(String),
}

/// What one attempt to acquire or renew found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the Lease (just acquired or renewed).
    Leader,
    /// Another replica holds a live Lease.
    HeldBy(String),
    /// A concurrent write won (409 Conflict or AlreadyExists); try again next period.
    Conflict,
    /// The API call failed (network, 5xx, timeout, …).
    Error(String),
}

/// The record as last seen, and when (tokio's monotonic clock) it last changed.
#[derive(Debug, Clone)]
struct Observed {
    spec: LeaseSpec,
    resource_version: Option<String>,
    at: Instant,
}

/// One candidate for the leadership.
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    clock: Arc<dyn Clock>,
    observed: Option<Observed>,
}

fn micro_time(clock: &dyn Clock) -> MicroTime {
    let now = clock.now();
    let ts = Timestamp::new(now.timestamp(), i32::try_from(now.timestamp_subsec_nanos()).unwrap_or(0))
        .unwrap_or(Timestamp::UNIX_EPOCH);
    MicroTime(ts)
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

fn holder(spec: &LeaseSpec) -> &str {
    spec.holder_identity.as_deref().unwrap_or("")
}

impl LeaderElector {
    /// A candidate writing the Lease through `client` (give it a client of its own, see the module docs).
    pub fn new(client: Client, config: LeaderElectionConfig, clock: Arc<dyn Clock>) -> Result<Self, LeaderError> {
        if config.lease_duration <= config.renew_deadline {
            return Err(LeaderError::Config("the lease duration must be greater than the renew deadline".into()));
        }
        if config.retry_period.is_zero() || config.renew_deadline <= config.retry_period {
            return Err(LeaderError::Config("the renew deadline must be greater than the retry period (> 0)".into()));
        }
        if config.identity.is_empty() || config.name.is_empty() || config.namespace.is_empty() {
            return Err(LeaderError::Config("identity, Lease name and namespace must not be empty".into()));
        }
        let api = Api::namespaced(client, &config.namespace);
        Ok(Self { api, config, clock, observed: None })
    }

    /// The Lease and timings this elector was built with.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// One attempt: read the Lease; create it if missing; take it if free or expired, renew it if ours; every
    /// write conditional on the resourceVersion read.
    pub async fn try_acquire_or_renew(&mut self) -> Attempt {
        let me = self.config.identity.clone();
        let now = micro_time(self.clock.as_ref());
        let current = match self.api.get_opt(&self.config.name).await {
            Ok(current) => current,
            Err(e) => return Attempt::Error(e.to_string()),
        };
        let Some(current) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(seconds(self.config.lease_duration)),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return self.write(self.api.create(&PostParams::default(), &lease).await);
        };
        let spec = current.spec.clone().unwrap_or_default();
        let changed = self.observed.as_ref().is_none_or(|o| o.spec != spec);
        let read_at = tokio_now();
        if changed {
            self.observed = Some(Observed {
                spec: spec.clone(),
                resource_version: current.metadata.resource_version.clone(),
                at: read_at,
            });
        }
        let unchanged_for = read_at.saturating_duration_since(self.observed.as_ref().map_or(read_at, |o| o.at));
        let held_by = holder(&spec).to_string();
        let lease_duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.config.lease_duration, Duration::from_secs);
        if !held_by.is_empty() && held_by != me && unchanged_for < lease_duration {
            return Attempt::HeldBy(held_by);
        }
        let mut next = spec.clone();
        if held_by != me {
            next.acquire_time = Some(now.clone());
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        next.holder_identity = Some(me);
        next.renew_time = Some(now);
        next.lease_duration_seconds = Some(seconds(self.config.lease_duration));
        let mut lease = current;
        lease.spec = Some(next);
        // `replace` sends the read resourceVersion: a concurrent writer makes this a 409.
        let result = self.api.replace(&self.config.name, &PostParams::default(), &lease).await;
        self.write(result)
    }

    fn write(&mut self, result: kube::Result<Lease>) -> Attempt {
        match result {
            Ok(lease) => {
                self.observed = Some(Observed {
                    spec: lease.spec.unwrap_or_default(),
                    resource_version: lease.metadata.resource_version,
                    at: tokio_now(),
                });
                Attempt::Leader
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Attempt::Conflict,
            Err(e) => Attempt::Error(e.to_string()),
        }
    }

    /// Waits until this replica holds the Lease, trying every retry period. Returns [`LeaderError::Cancelled`]
    /// if `shutdown` is cancelled first.
    pub async fn acquire(&mut self, shutdown: &CancellationToken) -> Result<(), LeaderError> {
        loop {
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => return Err(LeaderError::Cancelled),
                a = tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew()) => a,
            };
            match attempt {
                Ok(Attempt::Leader) => {
                    tracing::info!(identity = %self.config.identity, lease = %self.config.name, "successfully acquired lease");
                    return Ok(());
                }
                Ok(Attempt::Error(e)) => {
                    tracing::warn!(error = %e, "error retrieving or updating the leader-election lease")
                }
                Ok(_) => {}
                Err(_) => tracing::warn!("timed out acquiring the leader-election lease"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return Err(LeaderError::Cancelled),
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
    }

    /// Releases the Lease if this replica holds it: holder cleared, duration 1 s, so another candidate takes it
    /// on its next attempt. Conditional on the last resourceVersion seen; returns whether it was released.
    pub async fn release(&mut self) -> bool {
        let Some(observed) = self.observed.clone() else { return false };
        if holder(&observed.spec) != self.config.identity {
            return false;
        }
        let now = micro_time(self.clock.as_ref());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                resource_version: observed.resource_version.clone(),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..observed.spec.clone()
            }),
        };
        match self.api.replace(&self.config.name, &PostParams::default(), &lease).await {
            Ok(lease) => {
                self.observed = Some(Observed {
                    spec: lease.spec.unwrap_or_default(),
                    resource_version: lease.metadata.resource_version,
                    at: tokio_now(),
                });
                tracing::info!(identity = %self.config.identity, "released the leader-election lease");
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "releasing the leader-election lease failed");
                false
            }
        }
    }

    /// Acquires the Lease, then keeps renewing it in a spawned task. The returned [`Leadership`]'s `lost` token
    /// is cancelled when renewal fails for the renew deadline, or after the Lease was released because
    /// `shutdown` was cancelled.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<Leadership, LeaderError> {
        self.acquire(&shutdown).await?;
        let lost = CancellationToken::new();
        let task = tokio::spawn(self.renew_loop(shutdown, lost.clone()));
        Ok(Leadership { lost, task })
    }

    async fn renew_loop(mut self, shutdown: CancellationToken, lost: CancellationToken) {
        let mut last_renew = tokio_now();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    self.release().await;
                    lost.cancel();
                    return;
                }
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
            let remaining =
                self.config.renew_deadline.saturating_sub(tokio_now().saturating_duration_since(last_renew));
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => continue,
                a = tokio::time::timeout(remaining, self.try_acquire_or_renew()) => a,
            };
            match attempt {
                Ok(Attempt::Leader) => last_renew = tokio_now(),
                Ok(other) => tracing::warn!(attempt = ?other, "failed to renew the leader-election lease"),
                Err(_) => tracing::warn!("timed out renewing the leader-election lease"),
            }
            if tokio_now().saturating_duration_since(last_renew) >= self.config.renew_deadline {
                tracing::error!(identity = %self.config.identity, "leader-election lease lost");
                lost.cancel();
                return;
            }
        }
    }
}

/// The leadership of a replica that acquired the Lease: renewal runs in the background.
#[derive(Debug)]
pub struct Leadership {
    lost: CancellationToken,
    task: JoinHandle<()>,
}

impl Leadership {
    /// Cancelled when the leadership ends (lost, or released on shutdown). The process must stop its
    /// controllers then; upstream exits.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Waits for the renewal task to end (after a loss, or after the release on shutdown).
    pub async fn finished(self) {
        let _ = self.task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_testing::apiserver::ApiServer;
    use karpenter_testing::{FakeClock, TokioClock};

    fn config(identity: &str) -> LeaderElectionConfig {
        LeaderElectionConfig {
            name: "karpenter-leader-election".into(),
            namespace: "kube-system".into(),
            identity: identity.into(),
            lease_duration: LeaderElectionConfig::LEASE_DURATION,
            renew_deadline: LeaderElectionConfig::RENEW_DEADLINE,
            retry_period: LeaderElectionConfig::RETRY_PERIOD,
        }
    }

    /// A candidate whose wall clock moves with tokio's (paused) clock from the fake clock's start: renewals
    /// write a new renewTime, as with a real clock.
    fn candidate(server: &ApiServer, identity: &str) -> LeaderElector {
        candidate_skewed(server, identity, chrono::Duration::zero())
    }

    /// [`candidate`] with its wall clock `skew` ahead of the others'.
    fn candidate_skewed(server: &ApiServer, identity: &str, skew: chrono::Duration) -> LeaderElector {
        let clock = TokioClock::starting_at(FakeClock::default().now() + skew);
        LeaderElector::new(server.client(), config(identity), Arc::new(clock)).unwrap()
    }

    async fn lease(server: &ApiServer) -> LeaseSpec {
        let api: Api<Lease> = Api::namespaced(server.client(), "kube-system");
        api.get("karpenter-leader-election").await.unwrap().spec.unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn first_candidate_wins_and_the_second_waits() {
        let server = ApiServer::new();
        let (mut a, mut b) = (candidate(&server, "a"), candidate(&server, "b"));
        assert_eq!(a.try_acquire_or_renew().await, Attempt::Leader);
        assert_eq!(b.try_acquire_or_renew().await, Attempt::HeldBy("a".into()));
        let spec = lease(&server).await;
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!((spec.lease_duration_seconds, spec.lease_transitions), (Some(15), Some(0)));
        assert_eq!(spec.renew_time.unwrap().0.to_string(), "2024-01-01T00:00:00Z", "time from the injected clock");
        // Renewal keeps the holder and the transition count.
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(a.try_acquire_or_renew().await, Attempt::Leader);
        assert_eq!(lease(&server).await.lease_transitions, Some(0));
        // b does not take a Lease that keeps being renewed, however long it waits.
        for _ in 0..10 {
            tokio::time::advance(Duration::from_secs(2)).await;
            assert_eq!(a.try_acquire_or_renew().await, Attempt::Leader);
            assert_eq!(b.try_acquire_or_renew().await, Attempt::HeldBy("a".into()));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_not_renewed_for_its_duration_is_taken_over() {
        let server = ApiServer::new();
        let (mut a, mut b) = (candidate(&server, "a"), candidate(&server, "b"));
        assert_eq!(a.try_acquire_or_renew().await, Attempt::Leader);
        // a stops renewing (its process hangs); b's own clock decides when the Lease expired.
        let start = tokio_now();
        b.acquire(&CancellationToken::new()).await.unwrap();
        let waited = tokio_now() - start;
        assert!(waited >= Duration::from_secs(15) && waited <= Duration::from_secs(17), "{waited:?}");
        let spec = lease(&server).await;
        assert_eq!(spec.holder_identity.as_deref(), Some("b"));
        assert_eq!(spec.lease_transitions, Some(1));
        // a comes back: it is not the leader any more.
        assert_eq!(a.try_acquire_or_renew().await, Attempt::HeldBy("b".into()));
    }

    /// Expiry is measured on the candidate's own tokio clock since it saw the record change, never by comparing
    /// the renewTime written with its wall clock: an hour of skew between the replicas changes nothing.
    #[tokio::test(start_paused = true)]
    async fn wall_clock_skew_does_not_decide_expiry() {
        let server = ApiServer::new();
        let mut a = candidate(&server, "a");
        let mut b = candidate_skewed(&server, "b", chrono::Duration::hours(1));
        assert_eq!(a.try_acquire_or_renew().await, Attempt::Leader);
        // To b the renewTimes look an hour old; a keeps renewing, so the record changes and b waits.
        for _ in 0..20 {
            tokio::time::advance(Duration::from_secs(2)).await;
            assert_eq!(a.try_acquire_or_renew().await, Attempt::Leader);
            assert_eq!(b.try_acquire_or_renew().await, Attempt::HeldBy("a".into()));
        }
        // a stops: b takes over once the record stood still for the lease duration on b's clock, not before.
        tokio::time::advance(Duration::from_secs(14)).await;
        assert_eq!(b.try_acquire_or_renew().await, Attempt::HeldBy("a".into()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(b.try_acquire_or_renew().await, Attempt::Leader);
        let renewed = lease(&server).await.renew_time.unwrap().0.to_string();
        assert_eq!(renewed, "2024-01-01T01:00:55Z", "b writes its own (skewed) wall time");
    }

    #[tokio::test(start_paused = true)]
    async fn release_on_shutdown_hands_over_within_a_retry_period() {
        let server = ApiServer::new();
        let shutdown_a = CancellationToken::new();
        let leadership = candidate(&server, "a").run(shutdown_a.clone()).await.unwrap();
        let lost = leadership.lost();
        let b = tokio::spawn(candidate(&server, "b").run(CancellationToken::new()));
        // a keeps renewing: b stays a candidate well past the lease duration.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!b.is_finished() && !lost.is_cancelled());
        assert_eq!(lease(&server).await.holder_identity.as_deref(), Some("a"));

        shutdown_a.cancel();
        leadership.finished().await;
        assert!(lost.is_cancelled());
        let released_at = tokio_now();
        let spec = lease(&server).await;
        assert!(spec.holder_identity.is_none() && spec.lease_duration_seconds == Some(1), "{spec:?}");
        let b_leadership = b.await.unwrap().unwrap();
        let handed_over = tokio_now() - released_at;
        assert!(handed_over <= Duration::from_secs(2), "{handed_over:?}");
        assert_eq!(lease(&server).await.holder_identity.as_deref(), Some("b"));
        assert!(!b_leadership.lost().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_cannot_renew_loses_after_the_renew_deadline() {
        let server = ApiServer::new();
        let leadership = candidate(&server, "a").run(CancellationToken::new()).await.unwrap();
        let lost = leadership.lost();
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!lost.is_cancelled(), "renewals succeed");
        // Someone else overwrites the Lease (an operator, or a partition healed the wrong way).
        let api: Api<Lease> = Api::namespaced(server.client(), "kube-system");
        let mut current = api.get("karpenter-leader-election").await.unwrap();
        current.spec.as_mut().unwrap().holder_identity = Some("intruder".into());
        api.replace("karpenter-leader-election", &PostParams::default(), &current).await.unwrap();
        let start = tokio_now();
        lost.cancelled().await;
        let after = tokio_now() - start;
        assert!(after >= Duration::from_secs(8) && after <= Duration::from_secs(12), "{after:?}");
        leadership.finished().await;
        assert_eq!(lease(&server).await.holder_identity.as_deref(), Some("intruder"), "no release when not holder");
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_acquires_conflict_and_one_wins() {
        let server = ApiServer::new();
        // A free Lease (released by a previous leader) that both candidates read, then both write.
        let mut first = candidate(&server, "old");
        assert_eq!(first.try_acquire_or_renew().await, Attempt::Leader);
        assert!(first.release().await);
        let (mut a, mut b) = (candidate(&server, "a"), candidate(&server, "b"));
        let (ra, rb) = tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew());
        let mut results = [ra, rb];
        results.sort_by_key(|r| r == &Attempt::Leader);
        assert_eq!(results, [Attempt::Conflict, Attempt::Leader]);
        let spec = lease(&server).await;
        assert!(matches!(spec.holder_identity.as_deref(), Some("a" | "b")));
        assert_eq!(spec.lease_transitions, Some(1));

        // Concurrent creates of a missing Lease: AlreadyExists (409) for the loser.
        let server = ApiServer::new();
        let (mut a, mut b) = (candidate(&server, "a"), candidate(&server, "b"));
        let (ra, rb) = tokio::join!(a.try_acquire_or_renew(), b.try_acquire_or_renew());
        let mut results = [ra, rb];
        results.sort_by_key(|r| r == &Attempt::Leader);
        assert_eq!(results, [Attempt::Conflict, Attempt::Leader]);
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_before_winning_and_bad_timings() {
        let server = ApiServer::new();
        let mut a = candidate(&server, "a");
        assert_eq!(a.try_acquire_or_renew().await, Attempt::Leader);
        let shutdown = CancellationToken::new();
        let waiting = tokio::spawn({
            let shutdown = shutdown.clone();
            async move { candidate(&server, "b").acquire(&shutdown).await }
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        shutdown.cancel();
        assert!(matches!(waiting.await.unwrap(), Err(LeaderError::Cancelled)));

        let server = ApiServer::new();
        let bad = LeaderElectionConfig { renew_deadline: Duration::from_secs(20), ..config("a") };
        assert!(LeaderElector::new(server.client(), bad, Arc::new(FakeClock::default())).is_err());
        let bad = LeaderElectionConfig { retry_period: Duration::ZERO, ..config("a") };
        assert!(LeaderElector::new(server.client(), bad, Arc::new(FakeClock::default())).is_err());
    }

    #[test]
    fn identities_are_unique_per_call_and_keep_the_pod_name() {
        let (x, y) = (identity("karpenter-abc"), identity("karpenter-abc"));
        assert!(x.starts_with("karpenter-abc_") && x.len() == "karpenter-abc_".len() + 16, "{x}");
        assert_ne!(x, y);
        let config = LeaderElectionConfig::new("lease".into(), "ns".into(), x.clone());
        assert_eq!(
            (config.name.as_str(), config.namespace.as_str(), config.identity.as_str()),
            ("lease", "ns", x.as_str())
        );
        assert_eq!(config.lease_duration, Duration::from_secs(15));
    }
}
