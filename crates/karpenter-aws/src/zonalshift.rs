//! ARC zonal shifts (`ENABLE_ZONAL_SHIFT=true`): while Amazon Application Recovery Controller moves the cluster's
//! traffic away from an Availability Zone, Karpenter stays out of that zone too.
//!
//! An EKS cluster registered for zonal shift is an ARC managed resource identified by its ARN. Every
//! [`POLL_INTERVAL`] the [`ZonalShiftWatcher`] asks ARC which shifts are applied to it (`GetManagedResource`:
//! customer-started zonal shifts, practice runs and zonal autoshifts whose status is `APPLIED`). ARC names zones by
//! id (`use1-az1`); the watcher maps them to the account's zone names through the zones EC2 reported at start.
//! While a zone is shifted away from:
//!
//! * every offering in it is unavailable ([`crate::launch::ice::UnavailableOfferings::set_shifted_zones`]), so no
//!   NodeClaim is planned or launched there;
//! * the provider leaves its instances alone: they are not listed for garbage collection, not terminated
//!   (deleting a NodeClaim there waits for the shift to end: its node keeps running, as the shift keeps traffic
//!   away from it anyway) and not tagged;
//! * a `ZonalShiftActive` event when a zone's shift starts and `ZonalShiftCleared` when it ends go to every
//!   EC2NodeClass (through a [`ZonalShiftEvents`] sink), with a log line each.
//!
//! When ARC cannot be asked the last answer stands (a transient error does not lift a shift, nor invent one);
//! without the `arc-zonal-shift:GetManagedResource` permission, or when the cluster is not registered with ARC
//! (`ResourceNotFoundException`), one warning is logged and the watcher keeps asking every interval, so fixing it
//! takes effect without a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use karpenter_cloudprovider::Sleeper;
use tokio_util::sync::CancellationToken;

use crate::api_error::{AwsApiError, AwsErrorKind};
use crate::launch::ice::UnavailableOfferings;
use crate::runtime::timed_pass;
use karpenter_runtime::metrics::{Metrics, ReconcileMetrics};

/// The event reason when a zone's shift starts.
pub const EVENT_ACTIVE: &str = "ZonalShiftActive";
/// The event reason when a zone's shift ends.
pub const EVENT_CLEARED: &str = "ZonalShiftCleared";

/// How often ARC is asked.
pub const POLL_INTERVAL: Duration = Duration::from_secs(30);

/// What moved traffic away from a zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ShiftKind {
    /// A zonal shift a person or a tool started.
    ZonalShift,
    /// An ARC practice run of zonal autoshift.
    PracticeRun,
    /// A zonal autoshift AWS started.
    Autoshift,
}

impl fmt::Display for ShiftKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ShiftKind::ZonalShift => "zonal shift",
            ShiftKind::PracticeRun => "practice run",
            ShiftKind::Autoshift => "zonal autoshift",
        })
    }
}

/// One shift applied to the cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct AppliedShift {
    /// The zone id traffic moved away from (`use1-az1`).
    pub away_from: String,
    /// What started it.
    pub kind: ShiftKind,
    /// The zonal shift's id (empty for an autoshift, which has none).
    pub id: String,
}

/// The ARC call the watcher makes.
#[async_trait]
pub trait ZonalShiftApi: Send + Sync + fmt::Debug {
    /// The shifts applied to the managed resource `resource_arn` now.
    async fn applied_shifts(&self, resource_arn: &str) -> Result<Vec<AppliedShift>, AwsApiError>;
}

/// Where the watcher reports shifts starting and ending (events on the EC2NodeClasses in production).
#[async_trait]
pub trait ZonalShiftEvents: Send + Sync {
    /// Traffic moved away from `zone` (a name) because of `shift`.
    async fn shift_started(&self, zone: &str, shift: &AppliedShift);
    /// The shift away from `zone` ended.
    async fn shift_ended(&self, zone: &str);
}

/// A sink that only logs (tests, and a start without a Kubernetes client for events).
#[derive(Debug, Default)]
pub struct LogOnly;

#[async_trait]
impl ZonalShiftEvents for LogOnly {
    async fn shift_started(&self, _zone: &str, _shift: &AppliedShift) {}
    async fn shift_ended(&self, _zone: &str) {}
}

/// What one poll changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneChanges {
    /// Zones (names) newly shifted away from.
    pub started: Vec<String>,
    /// Zones (names) whose shift ended.
    pub ended: Vec<String>,
}

/// Polls ARC and keeps the shifted zones in the unavailable-offerings cache.
pub struct ZonalShiftWatcher {
    api: Arc<dyn ZonalShiftApi>,
    resource_arn: String,
    /// Zone id -> zone name, as EC2 reported the region's zones.
    zone_names: BTreeMap<String, String>,
    offerings: UnavailableOfferings,
    events: Arc<dyn ZonalShiftEvents>,
    state: Mutex<WatchState>,
    /// The watcher's reconcile and workqueue series ([`ZonalShiftWatcher::with_metrics`]).
    reconcile_metrics: Option<ReconcileMetrics>,
}

#[derive(Default)]
struct WatchState {
    /// Zone name -> the shift moving traffic away from it, as of the last answer.
    shifted: BTreeMap<String, AppliedShift>,
    /// A warning about ARC failing was logged and nothing has worked since.
    warned: bool,
}

impl fmt::Debug for ZonalShiftWatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZonalShiftWatcher").field("resource_arn", &self.resource_arn).finish_non_exhaustive()
    }
}

impl ZonalShiftWatcher {
    /// A watcher of `resource_arn` (the EKS cluster's ARN) whose region's zones are `zone_names` (id -> name).
    pub fn new(
        api: Arc<dyn ZonalShiftApi>,
        resource_arn: impl Into<String>,
        zone_names: BTreeMap<String, String>,
        offerings: UnavailableOfferings,
        events: Arc<dyn ZonalShiftEvents>,
    ) -> Self {
        Self {
            api,
            resource_arn: resource_arn.into(),
            zone_names,
            offerings,
            events,
            state: Mutex::new(WatchState::default()),
            reconcile_metrics: None,
        }
    }

    /// Upstream's name of this controller: the `controller` label of its reconcile and workqueue series.
    pub const NAME: &'static str = "zonalshift";

    /// Records each poll into `metrics` under [`Self::NAME`], as a singleton controller (one worker).
    pub fn with_metrics(mut self, metrics: &Metrics) -> Self {
        self.reconcile_metrics = Some(metrics.reconciler(Self::NAME, 1));
        self
    }

    /// The zones (names) shifted away from as of the last answer.
    pub fn shifted_zones(&self) -> BTreeSet<String> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).shifted.keys().cloned().collect()
    }

    /// Asks ARC once and applies the answer; on an error nothing changes.
    pub async fn poll(&self) -> Result<ZoneChanges, AwsApiError> {
        let shifts = match self.api.applied_shifts(&self.resource_arn).await {
            Ok(s) => s,
            Err(e) => {
                self.warn_once(&e);
                return Err(e);
            }
        };
        let mut now: BTreeMap<String, AppliedShift> = BTreeMap::new();
        for shift in shifts {
            let Some(zone) = self.zone_names.get(&shift.away_from) else {
                tracing::warn!(zone_id = %shift.away_from, "a zonal shift names a zone id this region does not have");
                continue;
            };
            // Two shifts of one zone (a practice run during an autoshift): either keeps it shifted; the first in
            // a stable order is the one reported.
            match now.get(zone) {
                Some(kept) if kept <= &shift => {}
                _ => {
                    now.insert(zone.clone(), shift);
                }
            }
        }
        let changes = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.warned = false;
            let started: Vec<String> = now.keys().filter(|z| !state.shifted.contains_key(*z)).cloned().collect();
            let ended: Vec<String> = state.shifted.keys().filter(|z| !now.contains_key(*z)).cloned().collect();
            state.shifted = now.clone();
            ZoneChanges { started, ended }
        };
        self.offerings.set_shifted_zones(now.keys().cloned().collect());
        for zone in &changes.started {
            if let Some(shift) = now.get(zone) {
                tracing::info!(zone = %zone, zone_id = %shift.away_from, kind = %shift.kind, id = %shift.id,
                    "zonal shift active: no launches in the zone and its instances are left alone until it ends");
                self.events.shift_started(zone, shift).await;
            }
        }
        for zone in &changes.ended {
            tracing::info!(zone = %zone, "zonal shift cleared: the zone is offered again");
            self.events.shift_ended(zone).await;
        }
        Ok(changes)
    }

    fn warn_once(&self, e: &AwsApiError) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.warned {
            tracing::debug!(error = %e, "asking ARC for zonal shifts failed again");
            return;
        }
        state.warned = true;
        let hint = match e.kind {
            AwsErrorKind::Unauthorized => "; grant arc-zonal-shift:GetManagedResource to the controller's role",
            AwsErrorKind::NotFound => "; is the cluster registered for zonal shift (EKS zonalShiftConfig)?",
            _ => "",
        };
        tracing::warn!(error = %e, resource = %self.resource_arn,
            "asking ARC for zonal shifts failed; the last answer stands{hint}");
    }

    /// Polls every [`POLL_INTERVAL`] until `shutdown` is cancelled.
    pub async fn run(self: Arc<Self>, sleeper: Arc<dyn Sleeper>, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            // Errors were logged by `poll`; the next interval retries.
            let _ = timed_pass(self.reconcile_metrics.as_ref(), self.poll()).await;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = sleeper.sleep(POLL_INTERVAL) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
