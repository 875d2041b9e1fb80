//! Time, injected: code asks a [`Clock`] for `now` and a [`Sleeper`] to wait, so tests control both.
//!
//! The [`Clock`] trait lives here (it moved from `karpenter-testing`, which re-exports it together with its
//! `FakeClock`) because the fake provider stamps launch and termination times, and the test kit depends on this
//! crate for the conformance suite, not the other way round.

use std::fmt;
use std::time::Duration;

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
