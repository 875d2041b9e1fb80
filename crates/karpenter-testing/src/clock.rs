//! Time, injected: production code asks a [`Clock`], tests hand it a [`FakeClock`] and move time by hand.

use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Duration, TimeZone, Utc};

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
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
    fn system_clock_is_after_2024() {
        assert!(SystemClock.now() > FakeClock::default().now());
    }
}
