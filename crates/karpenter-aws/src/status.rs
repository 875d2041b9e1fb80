//! Instance status checks: an [`InterruptionSource`] over EC2 `DescribeInstanceStatus`, so broken instances are
//! replaced without an interruption queue.
//!
//! Every [`CHECK_INTERVAL`] the source describes the status of the account's running instances (every page) and
//! looks at three health checks:
//!
//! * `InstanceStatus.Status` = `impaired` (category [`category::INSTANCE_STATUS`]) and
//!   `SystemStatus.Status` = `impaired` ([`category::SYSTEM_STATUS`]): the instance cannot serve its pods, so
//!   its NodeClaim is deleted forcefully ([`InterruptionAction::DeleteForceful`]: the termination timestamp is set
//!   to now, the drain does not wait for PDBs or volumes), kind [`InterruptionKind::InstanceStatusFailure`];
//! * a scheduled event (`Events[]`: reboot, retirement, stop, maintenance) that is neither completed nor
//!   cancelled (EC2 prefixes their descriptions with `[Completed]` / `[Canceled]`)
//!   ([`category::SCHEDULED_EVENT`]): the instance still works until the event, so its NodeClaim is deleted
//!   gracefully ([`InterruptionAction::Delete`]), kind [`InterruptionKind::ScheduledChange`].
//!
//! Only instances with a NodeClaim (found through an [`InstanceLookup`], which is only asked when something is
//! unhealthy) produce events; the interruption controller publishes `InstanceUnhealthy` and deletes the NodeClaim.
//! An instance is reported once per episode: after its event is acknowledged it is not reported again while it
//! stays unhealthy (its NodeClaim is already deleting), and once it is healthy again a new failure is a new
//! report. An event that was not acknowledged (handling failed) is delivered again at the next check. The
//! `karpenter_interruption_instance_status_unhealthy_total{category}` counter is recorded into the metrics
//! registry ([`InstanceStatusSource::with_metrics`]), once per acknowledged report and category.
//!
//! Without the `ec2:DescribeInstanceStatus` permission (an `Unauthorized` error) the check logs one warning and
//! is skipped; it keeps trying every interval, so granting the permission later takes effect without a restart.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use karpenter_cloudprovider::{
    Clock, InterruptionAction, InterruptionError, InterruptionEvent, InterruptionKind, InterruptionSource, Sleeper,
};

use karpenter_runtime::metrics::Metrics;

use crate::api_error::{AwsApiError, AwsErrorKind};
use crate::metrics::AwsMetrics;
use crate::queue::InstanceLookup;

/// How often the statuses are described (upstream's one minute).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(60);

/// The `category` label values of `karpenter_interruption_instance_status_unhealthy_total`.
pub mod category {
    /// The instance status check failed (`InstanceStatus.Status` = `impaired`).
    pub const INSTANCE_STATUS: &str = "InstanceStatus";
    /// The system status check failed (`SystemStatus.Status` = `impaired`).
    pub const SYSTEM_STATUS: &str = "SystemStatus";
    /// A scheduled event is pending.
    pub const SCHEDULED_EVENT: &str = "ScheduledEvent";
}

/// The status value of a failed check.
pub const IMPAIRED: &str = "impaired";

/// One scheduled event of an instance (`Events[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduledEvent {
    /// `Code`: `instance-reboot`, `system-reboot`, `system-maintenance`, `instance-retirement`, `instance-stop`.
    pub code: String,
    /// `Description`; EC2 prefixes it with `[Completed]` or `[Canceled]` once the event is over.
    pub description: String,
    /// `NotBefore`.
    pub not_before: Option<DateTime<Utc>>,
}

impl ScheduledEvent {
    /// Whether the event is still to come (neither completed nor cancelled).
    pub fn is_pending(&self) -> bool {
        let d = self.description.trim_start();
        !(d.starts_with("[Completed]") || d.starts_with("[Canceled]") || d.starts_with("[Cancelled]"))
    }
}

/// One entry of a `DescribeInstanceStatus` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceStatus {
    /// `InstanceId`.
    pub instance_id: String,
    /// `AvailabilityZone`.
    pub availability_zone: Option<String>,
    /// `InstanceStatus.Status`: `ok`, `impaired`, `initializing`, `insufficient-data`, `not-applicable`.
    pub instance_status: String,
    /// `SystemStatus.Status`, same values.
    pub system_status: String,
    /// `Events`.
    pub events: Vec<ScheduledEvent>,
}

/// `DescribeInstanceStatus`. Implementations: the SDK adapter (feature `sdk`) and `launch::mock::MockEc2`.
#[async_trait]
pub trait InstanceStatusApi: Send + Sync + fmt::Debug {
    /// The statuses of every running instance of the account in the region (every page).
    async fn describe_instance_status(&self) -> Result<Vec<InstanceStatus>, AwsApiError>;
}

/// What is wrong with one instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The instance.
    pub instance_id: String,
    /// Every failed check, in [`category`] order (instance, system, scheduled event).
    pub categories: Vec<&'static str>,
    /// Forceful when a status check failed, graceful for a scheduled event alone.
    pub action: InterruptionAction,
    /// [`InterruptionKind::InstanceStatusFailure`] or [`InterruptionKind::ScheduledChange`].
    pub kind: InterruptionKind,
}

/// What is wrong with `status`, if anything (see the module docs).
pub fn assess(status: &InstanceStatus) -> Option<Finding> {
    let mut categories = Vec::new();
    if status.instance_status == IMPAIRED {
        categories.push(category::INSTANCE_STATUS);
    }
    if status.system_status == IMPAIRED {
        categories.push(category::SYSTEM_STATUS);
    }
    let impaired = !categories.is_empty();
    if status.events.iter().any(ScheduledEvent::is_pending) {
        categories.push(category::SCHEDULED_EVENT);
    }
    if categories.is_empty() {
        return None;
    }
    let (action, kind) = if impaired {
        (InterruptionAction::DeleteForceful, InterruptionKind::InstanceStatusFailure)
    } else {
        (InterruptionAction::Delete, InterruptionKind::ScheduledChange)
    };
    Some(Finding { instance_id: status.instance_id.clone(), categories, action, kind })
}

/// The ack id of a finding: the instance and its categories, so a change of what is wrong is a new report.
fn ack_id(f: &Finding) -> String {
    format!("{}/{}", f.instance_id, f.categories.join("+"))
}

#[derive(Debug, Default)]
struct State {
    last_check: Option<DateTime<Utc>>,
    unauthorized_logged: bool,
    /// Ack ids delivered and acknowledged, or without a NodeClaim; pruned to what is still unhealthy.
    reported: BTreeSet<String>,
    /// Ack ids delivered and not yet acknowledged, with their categories.
    pending: BTreeMap<String, Vec<&'static str>>,
}

/// The instance status checks as an [`InterruptionSource`] (see the module docs).
pub struct InstanceStatusSource {
    api: Arc<dyn InstanceStatusApi>,
    lookup: Arc<dyn InstanceLookup>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    interval: Duration,
    metrics: Option<Arc<Metrics>>,
    state: Mutex<State>,
}

impl fmt::Debug for InstanceStatusSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstanceStatusSource").field("interval", &self.interval).finish_non_exhaustive()
    }
}

impl InstanceStatusSource {
    /// A source describing through `api` every [`CHECK_INTERVAL`] (the first check at once), finding NodeClaims
    /// through `lookup`.
    pub fn new(
        api: Arc<dyn InstanceStatusApi>,
        lookup: Arc<dyn InstanceLookup>,
        clock: Arc<dyn Clock>,
        sleeper: Arc<dyn Sleeper>,
    ) -> Self {
        Self { api, lookup, clock, sleeper, interval: CHECK_INTERVAL, metrics: None, state: Mutex::default() }
    }

    /// Counts unhealthy instances into `metrics` (`karpenter_interruption_instance_status_unhealthy_total`).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One check now: the events of the instances newly found unhealthy that have a NodeClaim.
    pub async fn check(&self) -> Result<Vec<InterruptionEvent>, InterruptionError> {
        self.state().last_check = Some(self.clock.now());
        let statuses = match self.api.describe_instance_status().await {
            Ok(s) => s,
            Err(e) if e.kind == AwsErrorKind::Unauthorized => {
                let mut state = self.state();
                if !state.unauthorized_logged {
                    state.unauthorized_logged = true;
                    tracing::warn!(error = %e, "not authorized for ec2:DescribeInstanceStatus; instance status checks are skipped until it is granted");
                }
                return Ok(Vec::new());
            }
            Err(e) => {
                return Err(InterruptionError {
                    message: "describing instance statuses".into(),
                    source: Some(Box::new(e)),
                });
            }
        };
        let findings: BTreeMap<String, Finding> = statuses.iter().filter_map(assess).map(|f| (ack_id(&f), f)).collect();
        let fresh: Vec<&Finding> = {
            let mut state = self.state();
            state.unauthorized_logged = false;
            state.reported.retain(|id| findings.contains_key(id));
            state.pending.retain(|id, _| findings.contains_key(id));
            findings.iter().filter(|(id, _)| !state.reported.contains(*id)).map(|(_, f)| f).collect()
        };
        if fresh.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = fresh.iter().map(|f| f.instance_id.clone()).collect();
        let claims = self
            .lookup
            .lookup(&ids)
            .await
            .map_err(|e| InterruptionError { message: "looking up nodeclaims".into(), source: Some(Box::new(e)) })?;
        let mut state = self.state();
        let mut events = Vec::new();
        for f in fresh {
            let id = ack_id(f);
            match claims.get(&f.instance_id) {
                Some(claim) => {
                    tracing::info!(instance = %f.instance_id, NodeClaim = %claim.name, categories = ?f.categories, "instance status check found the instance unhealthy");
                    state.pending.insert(id.clone(), f.categories.clone());
                    events.push(InterruptionEvent {
                        ack_id: id,
                        provider_id: claim.provider_id.clone(),
                        kind: f.kind.clone(),
                        action: f.action,
                    });
                }
                // Not this cluster's instance: not looked up again while it stays so.
                None => {
                    state.reported.insert(id);
                }
            }
        }
        Ok(events)
    }
}

#[async_trait]
impl InterruptionSource for InstanceStatusSource {
    /// Waits until the next check is due, then checks.
    async fn next_batch(&self) -> Result<Vec<InterruptionEvent>, InterruptionError> {
        let last = self.state().last_check;
        if let Some(last) = last {
            let elapsed = (self.clock.now() - last).to_std().unwrap_or_default();
            if let Some(wait) = self.interval.checked_sub(elapsed).filter(|w| !w.is_zero()) {
                self.sleeper.sleep(wait).await;
            }
        }
        self.check().await
    }

    async fn acknowledge(&self, events: &[InterruptionEvent]) -> Result<(), InterruptionError> {
        let mut state = self.state();
        for e in events {
            if let Some(categories) = state.pending.remove(&e.ack_id) {
                if let Some(m) = &self.metrics {
                    for c in categories {
                        m.interruption_instance_status_unhealthy(c).inc();
                    }
                }
                state.reported.insert(e.ack_id.clone());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
