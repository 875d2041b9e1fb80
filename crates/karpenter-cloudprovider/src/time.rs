//! Time, injected: code asks a [`Clock`] for `now` and a [`Sleeper`] to wait, so tests control both.
//!
//! The [`Clock`] trait lives here (it moved from `karpenter-testing`, which re-exports it together with its
//! `FakeClock`) because the fake provider stamps launch and termination times, and the test kit depends on this
//! crate for the conformance suite, not the other way round.
//!
//! This module is the only place that reads a clock (`clippy.toml` bans `SystemTime::now`, `Utc::now` and both
//! `Instant::now`s everywhere else). Three kinds of time, each for its own purpose:
//!
//! | Read with | Time | Use it for | Tests control it with |
//! |---|---|---|---|
//! | [`Clock::now`] (injected) | wall time, [`DateTime<Utc>`] | what is written to or compared with the cluster: timestamps, TTLs, expiry of objects, budget schedules | `karpenter_testing::FakeClock` |
//! | `tokio_now` (feature `tokio`) | monotonic, tokio's clock | whatever waits: timers, batching windows, retry and backoff deadlines, rate limiting, lease expiry | `tokio::time::pause` / `advance` (or `#[tokio::test(start_paused = true)]`) |
//! | [`Stopwatch`] | monotonic, real | how long a piece of work took: duration metrics, logs, budgets for CPU-bound work (the solve timeout, the disruption simulation budget) | nothing: it is real even on paused time |
//!
//! The last two differ only in tests: on paused time tokio's clock stands still while code runs and jumps when
//! every task waits. So a deadline that is awaited (a `sleep`, a `timeout`, a batching window) must be on tokio's
//! clock, or a paused test would wait for real (or never see it pass); and a budget for work that never awaits
//! must be real, or on paused time it would never run out (and a duration metric would always read zero).

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place that reads the wall clock
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// Waits. Launch latency and polling go through one, so tests do not wait: `karpenter_testing::FakeClock`
/// implements it by moving its time forward.
#[async_trait]
pub trait Sleeper: Send + Sync + fmt::Debug {
    /// Returns after `duration` (of whatever time this sleeper measures).
    async fn sleep(&self, duration: Duration);
}

/// Never waits.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoSleep;

#[async_trait]
impl Sleeper for NoSleep {
    async fn sleep(&self, _duration: Duration) {}
}

/// Really waits, on tokio's timer (feature `tokio`; needs a tokio runtime with the time driver).
#[cfg(feature = "tokio")]
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioSleeper;

#[cfg(feature = "tokio")]
#[async_trait]
impl Sleeper for TokioSleeper {
    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

/// Real elapsed time since it was started: for measuring work (duration metrics, logs) and for budgets of
/// CPU-bound work such as the scheduler's solve timeout or the disruption simulation budget.
///
/// It reads the operating system's monotonic clock, never tokio's: on paused time (tests) tokio's clock does not
/// move while code runs, so a budget on it would never run out. Do not use it for anything that is awaited
/// (timers, batching windows, retry deadlines): those run on tokio's clock (`tokio_now`, feature `tokio`), which
/// tests pause and advance. `Copy`, so a closure can own one.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch {
    started: Instant,
}

impl Stopwatch {
    /// A stopwatch started now.
    #[allow(clippy::disallowed_methods)] // the one place that reads the real monotonic clock
    #[must_use]
    pub fn start() -> Self {
        Self { started: Instant::now() }
    }

    /// The real time since [`Stopwatch::start`].
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Now on tokio's monotonic clock, the clock its timers (`sleep`, `sleep_until`, `timeout`, `interval`) run on
/// (feature `tokio`).
///
/// For whatever waits or is measured against what waits: deadlines passed to `sleep_until` / `timeout_at`,
/// batching windows, retry and backoff deadlines, rate limiting, lease expiry, and the time a test allowed the
/// code under test. Tests pause and advance it (`tokio::time::pause`, `advance`, `start_paused = true`), and
/// everything on it moves together. To time CPU-bound work use a [`Stopwatch`] instead; for timestamps, a
/// [`Clock`].
#[cfg(feature = "tokio")]
#[allow(clippy::disallowed_methods)] // the one place that reads tokio's clock
#[must_use]
pub fn tokio_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopwatch_measures_real_time() {
        let watch = Stopwatch::start();
        std::thread::sleep(Duration::from_millis(20));
        let first = watch.elapsed();
        assert!(first >= Duration::from_millis(20), "{first:?}");
        assert!(watch.elapsed() >= first, "monotonic");
    }

    #[cfg(feature = "tokio")]
    #[tokio::test(start_paused = true)]
    async fn tokio_now_follows_paused_time_and_a_stopwatch_does_not() {
        let (start, watch) = (tokio_now(), Stopwatch::start());
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(tokio_now() - start, Duration::from_secs(3600), "the sleep advanced tokio's paused clock");
        assert!(watch.elapsed() < Duration::from_secs(60), "no real hour went by: {:?}", watch.elapsed());
        // Code that never awaits does not move a paused clock: a CPU budget on it would never run out.
        let before = tokio_now();
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(tokio_now(), before);
    }
}
