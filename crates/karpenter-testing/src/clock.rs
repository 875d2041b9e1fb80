//! Time, injected: production code asks a [`Clock`], tests hand it a [`FakeClock`] and move time by hand.
//!
//! The clock module is `karpenter_cloudprovider::time` (whose fake provider stamps launch times); its [`Clock`]
//! trait, [`SystemClock`] and [`Stopwatch`] (and with feature `tokio`, `tokio_now`) are re-exported here, so
//! `karpenter_testing::Clock` keeps working. Its docs say which kind of time to use when.
//! [`FakeClock`] is also a [`Sleeper`]: sleeping on it moves its time forward at once, so launch latency and
//! polling in tests take no real time. `TokioClock` (feature `tokio`) is wall time that moves with tokio's
//! clock, for tests on paused time whose code both waits on timers and reads a [`Clock`].

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Duration, TimeZone, Utc};
#[cfg(feature = "tokio")]
pub use karpenter_cloudprovider::time::tokio_now;
pub use karpenter_cloudprovider::time::{Clock, Sleeper, Stopwatch, SystemClock};

/// A clock that only moves when told to. Clones share the same time, so a test can keep a handle while the code
/// under test holds another. Thread-safe.
#[derive(Clone, Debug)]
pub struct FakeClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl FakeClock {
    /// A clock stopped at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self { now: Arc::new(Mutex::new(start)) }
    }

    /// Sets the time (it may go backwards: tests sometimes need that).
    pub fn set(&self, t: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = t;
    }

    /// Moves time forward by `d` (backward if `d` is negative) and returns the new time.
    pub fn step(&self, d: Duration) -> DateTime<Utc> {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now = now.checked_add_signed(d).unwrap_or(*now);
        *now
    }

    /// Moves time forward by whole seconds.
    pub fn step_secs(&self, secs: i64) -> DateTime<Utc> {
        self.step(Duration::seconds(secs))
    }
}

/// A fixed, arbitrary start: 2024-01-01T00:00:00Z (a Monday), so budget schedules in tests are predictable.
impl Default for FakeClock {
    fn default() -> Self {
        Self::new(Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).single().unwrap_or_default())
    }
}

impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Sleeping on a fake clock moves it forward by the duration and returns at once.
#[async_trait::async_trait]
impl Sleeper for FakeClock {
    async fn sleep(&self, duration: std::time::Duration) {
        self.step(Duration::from_std(duration).unwrap_or(Duration::MAX));
    }
}

/// Wall time that moves with tokio's clock: the start it was given plus the time tokio's clock moved since it was
/// made. On paused time (`#[tokio::test(start_paused = true)]`) it moves exactly when timers fire, so code that
/// sleeps on tokio's timer and stamps or compares times with a [`Clock`] sees both advance together (a
/// [`FakeClock`] would stand still while the timers fire). Feature `tokio`.
#[cfg(feature = "tokio")]
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    start: DateTime<Utc>,
    started_at: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
impl TokioClock {
    /// A clock reading `start` now, moving on with tokio's clock.
    pub fn starting_at(start: DateTime<Utc>) -> Self {
        Self { start, started_at: tokio_now() }
    }
}

#[cfg(feature = "tokio")]
impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let moved = tokio_now().saturating_duration_since(self.started_at);
        self.start.checked_add_signed(Duration::from_std(moved).unwrap_or(Duration::MAX)).unwrap_or(self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fake_clock_moves_only_when_told_and_clones_share_time() {
        let clock = FakeClock::default();
        let start = clock.now();
        assert_eq!(start.to_rfc3339(), "2024-01-01T00:00:00+00:00");
        let handle = clock.clone();
        assert_eq!(clock.step_secs(90), start + Duration::seconds(90));
        assert_eq!(handle.now(), start + Duration::seconds(90));
        handle.set(start);
        assert_eq!(clock.now(), start);
        clock.step(Duration::minutes(-1));
        assert_eq!(clock.now(), start - Duration::minutes(1));
    }

    #[test]
    fn fake_clock_is_shareable_across_threads() {
        let clock: Arc<dyn Clock> = Arc::new(FakeClock::default());
        let c = clock.clone();
        let t = std::thread::spawn(move || c.now()).join().unwrap();
        assert_eq!(t, clock.now());
    }

    #[test]
    fn sleeping_on_a_fake_clock_moves_it() {
        let clock = FakeClock::default();
        let start = clock.now();
        let sleeper: Arc<dyn Sleeper> = Arc::new(clock.clone());
        let fut = sleeper.sleep(std::time::Duration::from_secs(5));
        // The future completes on its first poll: no runtime needed.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut fut = fut;
        assert!(fut.as_mut().poll(&mut cx).is_ready());
        assert_eq!(clock.now(), start + Duration::seconds(5));
    }

    #[cfg(feature = "tokio")]
    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_moves_with_paused_time() {
        let start = FakeClock::default().now();
        let clock = TokioClock::starting_at(start);
        assert_eq!(clock.now(), start);
        tokio::time::sleep(std::time::Duration::from_secs(90)).await;
        assert_eq!(clock.now(), start + Duration::seconds(90));
    }

    #[test]
    fn system_clock_is_after_2024() {
        assert!(SystemClock.now() > FakeClock::default().now());
    }
}
