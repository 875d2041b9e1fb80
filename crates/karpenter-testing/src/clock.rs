//! Time, injected: production code asks a [`Clock`], tests hand it a [`FakeClock`] and move time by hand.
//!
//! The [`Clock`] trait and [`SystemClock`] live in `karpenter-cloudprovider` (`karpenter_cloudprovider::time`,
//! whose fake provider stamps launch times) and are re-exported here, so `karpenter_testing::Clock` keeps working.
//! [`FakeClock`] is also a [`Sleeper`]: sleeping on it moves its time forward at once, so launch latency and
//! polling in tests take no real time.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Duration, TimeZone, Utc};
pub use karpenter_cloudprovider::time::{Clock, Sleeper, SystemClock};

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

    #[test]
    fn system_clock_is_after_2024() {
        assert!(SystemClock.now() > FakeClock::default().now());
    }
}
