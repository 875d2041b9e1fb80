//! Interruption handling: consumes an [`InterruptionSource`] (the
//! SQS queue on AWS, the fake cloud's queue in tests).
//!
//! For each event, the NodeClaim is found by `status.providerID` (one NodeClaim list per batch). Then:
//!
//! - an event on the Node and the NodeClaim by kind: `SpotInterrupted`, `SpotRebalanceRecommendation`,
//!   `InstanceStopping`, `InstanceTerminating`, `InstanceUnhealthy` (scheduled change, failed status checks),
//!   `CapacityReservationInstanceInterrupted`;
//! - [`InterruptionAction::Delete`]: the NodeClaim gets `DisruptionReason=True` (reason: the kind in
//!   CamelCase) and is deleted unless already deleting; the termination controller then cordons
//!   (`karpenter.sh/disrupted` taint) and drains it gracefully. Event `TerminatingOnInterruption`, metric
//!   `karpenter_nodeclaims_disrupted_total{reason=<kind>,termination_mode="forceful"}` (interruption is a
//!   forceful method: no budget, no replacement first);
//! - [`InterruptionAction::DeleteForceful`]: the same, and first the termination timestamp annotation is set to
//!   now, so the drain deletes pods without honouring PDBs and does not wait for volumes;
//! - [`InterruptionAction::None`]: the event only.
//!
//! Events are acknowledged once handled (an event whose provider id matches no NodeClaim is logged and
//! acknowledged); a delivery whose handling failed is not, so the source delivers it again. Handling is
//! idempotent. The queue metrics (`karpenter_interruption_received_messages_total{message_type}`,
//! `karpenter_interruption_deleted_messages_total`, `karpenter_interruption_message_queue_duration_seconds`)
//! are the queue's to count (a source may be no queue at all, as the instance status checks are).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::labels::annotations;
use karpenter_api::nodeclaim::conditions;
use karpenter_cloudprovider::{InterruptionAction, InterruptionEvent, InterruptionKind, InterruptionSource};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use karpenter_api::time::{from_k8s, parse_rfc3339, rfc3339};

use crate::context::ControllerContext;
use crate::events::{Event, reasons};
use crate::kube_util::{ReconcileError, delete_ignoring_missing, ensure_claim_condition, record_disrupted};

/// How long the run loop waits after the source failed.
pub const SOURCE_ERROR_BACKOFF: Duration = Duration::from_secs(5);
/// How long the run loop waits after an empty batch (sources that long-poll return empty only after waiting).
pub const EMPTY_BATCH_WAIT: Duration = Duration::from_secs(1);

/// The event reason and message published for a kind (`None`: no event).
pub fn event_for(kind: &InterruptionKind) -> Option<(&'static str, &'static str)> {
    match kind {
        InterruptionKind::SpotInterrupted => {
            Some((reasons::SPOT_INTERRUPTED, "Spot interruption warning was triggered"))
        }
        InterruptionKind::RebalanceRecommendation => {
            Some((reasons::SPOT_REBALANCE_RECOMMENDATION, "Spot rebalance recommendation was triggered"))
        }
        InterruptionKind::InstanceStopped => Some((reasons::INSTANCE_STOPPING, "Instance is stopping")),
        InterruptionKind::InstanceTerminated => Some((reasons::INSTANCE_TERMINATING, "Instance is terminating")),
        InterruptionKind::ScheduledChange => {
            Some((reasons::INSTANCE_UNHEALTHY, "An unhealthy health event was triggered (scheduled change)"))
        }
        InterruptionKind::InstanceStatusFailure => Some((reasons::INSTANCE_UNHEALTHY, "Instance status checks failed")),
        InterruptionKind::CapacityReservationInterrupted => Some((
            reasons::CAPACITY_RESERVATION_INSTANCE_INTERRUPTED,
            "Capacity reservation interruption warning was triggered",
        )),
        _ => None,
    }
}

/// A metrics reason (`spot_interrupted`) as a condition reason (`SpotInterrupted`).
pub fn condition_reason(kind: &InterruptionKind) -> String {
    let mut out = String::new();
    for part in kind.as_str().split(|c: char| !c.is_ascii_alphanumeric()).filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    if out.is_empty() || !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert_str(0, "Interruption");
    }
    out
}

/// What one batch did (names sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterruptionReport {
    /// NodeClaims deleted gracefully.
    pub deleted: Vec<String>,
    /// NodeClaims deleted forcefully (termination timestamp now).
    pub deleted_forcefully: Vec<String>,
    /// NodeClaims for which only an event was recorded (action None, or already deleting).
    pub recorded: Vec<String>,
    /// Provider ids no NodeClaim has.
    pub unknown: Vec<String>,
    /// Ack ids acknowledged.
    pub acknowledged: Vec<String>,
    /// Ack ids left unacknowledged because handling failed (delivered again later).
    pub failed: Vec<String>,
}

/// The interruption controller (see the module docs).
pub struct Interruption {
    ctx: ControllerContext,
    source: Arc<dyn InterruptionSource>,
}

impl std::fmt::Debug for Interruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interruption").field("source", &self.source).finish_non_exhaustive()
    }
}

enum Handled {
    Deleted(String),
    DeletedForcefully(String),
    Recorded(String),
    Unknown(String),
}

impl Interruption {
    /// A handler of the messages `source` delivers.
    pub fn new(ctx: &ControllerContext, source: Arc<dyn InterruptionSource>) -> Self {
        Self { ctx: ctx.clone(), source }
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.ctx.client.clone())
    }

    /// Pulls one batch from the source, handles it and acknowledges what was handled.
    pub async fn poll_once(&self) -> Result<InterruptionReport, ReconcileError> {
        let batch = self.source.next_batch().await?;
        if batch.is_empty() {
            return Ok(InterruptionReport::default());
        }
        self.handle(&batch).await
    }

    /// Handles `events` and acknowledges the deliveries whose events were all handled.
    pub async fn handle(&self, events: &[InterruptionEvent]) -> Result<InterruptionReport, ReconcileError> {
        let mut report = InterruptionReport::default();
        let by_id: BTreeMap<String, NodeClaim> = self
            .claims()
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|c| c.provider_id().filter(|p| !p.is_empty()).map(str::to_owned).map(|p| (p, c)))
            .collect();
        let mut failed: BTreeSet<&str> = BTreeSet::new();
        for event in events {
            match self.handle_one(event, by_id.get(&event.provider_id)).await {
                Ok(Handled::Deleted(n)) => report.deleted.push(n),
                Ok(Handled::DeletedForcefully(n)) => report.deleted_forcefully.push(n),
                Ok(Handled::Recorded(n)) => report.recorded.push(n),
                Ok(Handled::Unknown(p)) => report.unknown.push(p),
                Err(e) => {
                    tracing::warn!(error = %e, provider_id = %event.provider_id, kind = %event.kind, "handling interruption failed");
                    failed.insert(event.ack_id.as_str());
                }
            }
        }
        let done: Vec<InterruptionEvent> =
            events.iter().filter(|e| !failed.contains(e.ack_id.as_str())).cloned().collect();
        let ack_ids: BTreeSet<String> = done.iter().map(|e| e.ack_id.clone()).collect();
        if !done.is_empty() {
            self.source.acknowledge(&done).await?;
        }
        report.acknowledged = ack_ids.into_iter().collect();
        report.failed = failed.into_iter().map(str::to_owned).collect();
        for v in [&mut report.deleted, &mut report.deleted_forcefully, &mut report.recorded, &mut report.unknown] {
            v.sort();
            v.dedup();
        }
        Ok(report)
    }

    async fn handle_one(
        &self,
        event: &InterruptionEvent,
        claim: Option<&NodeClaim>,
    ) -> Result<Handled, ReconcileError> {
        let Some(claim) = claim else {
            tracing::info!(provider_id = %event.provider_id, kind = %event.kind, "interruption for an instance without a nodeclaim, ignoring");
            return Ok(Handled::Unknown(event.provider_id.clone()));
        };
        let name = claim.name_any();
        let node = match claim.node_name().filter(|n| !n.is_empty()) {
            Some(n) => Api::<Node>::all(self.ctx.client.clone()).get_opt(n).await?,
            None => None,
        };
        if let Some((reason, message)) = event_for(&event.kind) {
            self.publish_both(claim, node.as_ref(), reason, message);
        }
        if event.action == InterruptionAction::None {
            return Ok(Handled::Recorded(name));
        }
        // Re-read: the claim may have changed since the batch's list.
        let Some(claim) = self.claims().get_opt(&name).await? else { return Ok(Handled::Recorded(name)) };
        if claim.metadata.deletion_timestamp.is_some() {
            return Ok(Handled::Recorded(name));
        }
        let now = self.ctx.clock.now();
        let claim = ensure_claim_condition(
            &self.claims(),
            &claim,
            conditions::DISRUPTION_REASON,
            ConditionStatus::True,
            &condition_reason(&event.kind),
            &format!("Interrupted: {}", event.kind),
            now,
        )
        .await?;
        let forceful = event.action == InterruptionAction::DeleteForceful;
        if forceful {
            let current =
                claim.annotations().get(annotations::NODE_CLAIM_TERMINATION_TIMESTAMP).and_then(|v| parse_rfc3339(v));
            if current.is_none_or(|t| t > now) {
                let patch =
                    json!({"metadata": {"annotations": {annotations::NODE_CLAIM_TERMINATION_TIMESTAMP: rfc3339(now)}}});
                self.claims().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
        }
        delete_ignoring_missing(&self.claims(), &name).await?;
        record_disrupted(&self.ctx.metrics, &claim, event.kind.as_str());
        self.publish_both(
            &claim,
            node.as_ref(),
            reasons::TERMINATING_ON_INTERRUPTION,
            "Interruption triggered termination for the NodeClaim",
        );
        let created = claim.metadata.creation_timestamp.as_ref().and_then(from_k8s);
        tracing::info!(NodeClaim = %name, kind = %event.kind, forceful, age_seconds = created.map(|c| (now - c).num_seconds()), "deleted nodeclaim on interruption");
        Ok(if forceful { Handled::DeletedForcefully(name) } else { Handled::Deleted(name) })
    }

    fn publish_both(&self, claim: &NodeClaim, node: Option<&Node>, reason: &str, message: &str) {
        if let Some(node) = node {
            self.ctx.recorder.publish_detached(Event::warning(node, reason, message));
        }
        self.ctx.recorder.publish_detached(Event::warning(claim, reason, message));
    }

    /// Pulls and handles batches until `shutdown` is cancelled.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let passes = self.ctx.metrics.reconciler("interruption", 1);
        loop {
            let pass = passes.pass();
            let result = tokio::select! {
                () = shutdown.cancelled() => return,
                result = self.poll_once() => result,
            };
            pass.finish(crate::metrics::ReconcileResult::of_pass(&result));
            let wait = match result {
                Ok(r) if r.acknowledged.is_empty() && r.failed.is_empty() => EMPTY_BATCH_WAIT,
                Ok(r) if !r.failed.is_empty() => SOURCE_ERROR_BACKOFF,
                Ok(_) => Duration::ZERO,
                Err(e) => {
                    tracing::warn!(error = %e, "interruption source failed");
                    SOURCE_ERROR_BACKOFF
                }
            };
            if wait.is_zero() {
                continue;
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::Client;

    use crate::metrics::Metrics;
    use chrono::{TimeZone, Utc};
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use karpenter_api::condition::Conditions;
    use karpenter_api::labels::finalizers;
    use karpenter_cloudprovider::{CloudProvider, FakeCloudProvider, FakeOptions};
    use karpenter_testing::apiserver::{ApiServer, create_with_status};
    use karpenter_testing::{FakeClock, NodeClaimOptions, NodeOptions, node, node_claim};
    use kube::api::PostParams;

    use super::*;

    struct Env {
        _server: ApiServer,
        client: Client,
        cloud: FakeCloudProvider,
        metrics: Arc<Metrics>,
        handler: Interruption,
        source: karpenter_cloudprovider::FakeInterruptionSource,
    }

    fn env() -> Env {
        let clock = FakeClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap());
        let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
        let client = server.client();
        let cloud = FakeCloudProvider::new(FakeOptions {
            clock: Arc::new(clock.clone()),
            ..karpenter_testing::kwok::fake_options()
        });
        let source = cloud.interruption_source();
        let ctx = ControllerContext::for_tests(client.clone(), Arc::new(cloud.clone()), Arc::new(clock));
        let handler = Interruption::new(&ctx, Arc::new(source.clone()));
        let metrics = ctx.metrics().clone();
        Env { _server: server, client, cloud, metrics, handler, source }
    }

    impl Env {
        /// A registered claim (with the finalizer, so deletion leaves it visible) and its node.
        async fn launched(&self, name: &str) -> String {
            let mut c = node_claim(NodeClaimOptions {
                name: Some(name.into()),
                finalizers: vec![finalizers::TERMINATION.into()],
                registered: true,
                launched: true,
                node_name: Some(format!("node-{name}")),
                ..Default::default()
            });
            let pid = self.cloud.add_instance(&c).unwrap().provider_id().unwrap().to_owned();
            c.status.as_mut().unwrap().provider_id = Some(pid.clone());
            c.metadata.uid = None;
            create_with_status(&Api::all(self.client.clone()), &c).await.unwrap();
            let mut n = node(NodeOptions {
                name: Some(format!("node-{name}")),
                provider_id: Some(pid.clone()),
                ..Default::default()
            });
            n.metadata.uid = None;
            Api::<Node>::all(self.client.clone()).create(&PostParams::default(), &n).await.unwrap();
            pid
        }

        async fn claim(&self, name: &str) -> NodeClaim {
            Api::<NodeClaim>::all(self.client.clone()).get(name).await.unwrap()
        }

        async fn reasons_on(&self, name: &str) -> Vec<String> {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let mut r: Vec<String> = Api::<CoreEvent>::all(self.client.clone())
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|e| e.involved_object.name.as_deref() == Some(name))
                .filter_map(|e| e.reason)
                .collect();
            r.sort();
            r
        }
    }

    #[test]
    fn condition_reasons_are_camel_case() {
        assert_eq!(condition_reason(&InterruptionKind::SpotInterrupted), "SpotInterrupted");
        assert_eq!(
            condition_reason(&InterruptionKind::CapacityReservationInterrupted),
            "CapacityReservationInterrupted"
        );
        assert_eq!(condition_reason(&InterruptionKind::Other("9-weird kind".into())), "Interruption9WeirdKind");
        assert_eq!(condition_reason(&InterruptionKind::Other(String::new())), "Interruption");
    }

    #[tokio::test]
    async fn interruptions_delete_mark_and_acknowledge() {
        let e = env();
        let spot = e.launched("spot").await;
        let broken = e.launched("broken").await;
        let rebalance = e.launched("rebalance").await;
        e.cloud.inject_interruption(&spot, InterruptionKind::SpotInterrupted, InterruptionAction::Delete);
        e.cloud.inject_interruption(
            &broken,
            InterruptionKind::InstanceStatusFailure,
            InterruptionAction::DeleteForceful,
        );
        e.cloud.inject_interruption(&rebalance, InterruptionKind::RebalanceRecommendation, InterruptionAction::None);
        e.cloud.inject_interruption("kwok://nobody", InterruptionKind::InstanceTerminated, InterruptionAction::Delete);

        let report = e.handler.poll_once().await.unwrap();
        assert_eq!(report.deleted, ["spot"]);
        assert_eq!(report.deleted_forcefully, ["broken"]);
        assert_eq!(report.recorded, ["rebalance"]);
        assert_eq!(report.unknown, ["kwok://nobody"]);
        assert_eq!(report.acknowledged.len(), 4);
        assert!(report.failed.is_empty());
        assert_eq!((e.source.queued(), e.source.in_flight()), (0, 0), "all acknowledged");

        let spot_claim = e.claim("spot").await;
        assert!(spot_claim.metadata.deletion_timestamp.is_some());
        let reason = spot_claim.conditions().condition(conditions::DISRUPTION_REASON).unwrap();
        assert_eq!((reason.status, reason.reason.as_str()), (ConditionStatus::True, "SpotInterrupted"));
        assert!(
            !spot_claim.annotations().contains_key(annotations::NODE_CLAIM_TERMINATION_TIMESTAMP),
            "graceful: PDBs are honoured by the drain"
        );
        let broken_claim = e.claim("broken").await;
        assert!(broken_claim.metadata.deletion_timestamp.is_some());
        assert_eq!(
            broken_claim.annotations().get(annotations::NODE_CLAIM_TERMINATION_TIMESTAMP).map(String::as_str),
            Some("2026-03-01T12:00:00Z"),
            "forceful: deadline now"
        );
        assert!(e.claim("rebalance").await.metadata.deletion_timestamp.is_none());

        assert_eq!(e.reasons_on("node-spot").await, ["SpotInterrupted", "TerminatingOnInterruption"]);
        assert_eq!(e.reasons_on("spot").await, ["SpotInterrupted", "TerminatingOnInterruption"]);
        assert_eq!(e.reasons_on("node-rebalance").await, ["SpotRebalanceRecommendation"]);
        assert_eq!(e.reasons_on("broken").await, ["InstanceUnhealthy", "TerminatingOnInterruption"]);
        assert_eq!(e.metrics.nodeclaims_disrupted("spot_interrupted", "", "", "", "graceful").get(), 1);
        // Events are not queue messages: the provider's queue, not this handler, counts those.
        assert!(!e.metrics.render().contains("karpenter_interruption_"), "no queue message counted here");
        assert!(e.cloud.instance_ids().contains(&spot), "the instance goes through termination, not here");

        // A redelivered event is handled idempotently: nothing deleted twice, still acknowledged.
        e.cloud.inject_interruption(&spot, InterruptionKind::SpotInterrupted, InterruptionAction::Delete);
        let again = e.handler.poll_once().await.unwrap();
        assert_eq!(again.recorded, ["spot"]);
        assert!(again.deleted.is_empty());
        assert_eq!(e.metrics.nodeclaims_disrupted("spot_interrupted", "", "", "", "graceful").get(), 1);
        assert_eq!(e.source.in_flight(), 0);
        assert_eq!(e.handler.poll_once().await.unwrap(), InterruptionReport::default(), "empty queue");
    }

    #[tokio::test]
    async fn the_run_loop_handles_events_and_stops_on_shutdown() {
        let e = env();
        let spot = e.launched("spot").await;
        e.cloud.inject_interruption(&spot, InterruptionKind::SpotInterrupted, InterruptionAction::Delete);
        let handler = Arc::new(e.handler);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(handler.clone().run(shutdown.clone()));
        let claims: Api<NodeClaim> = Api::all(e.client.clone());
        let mut deleted = false;
        for _ in 0..200 {
            if claims.get("spot").await.unwrap().metadata.deletion_timestamp.is_some() {
                deleted = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(deleted);
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("stops").unwrap();
        let _ = CloudProvider::name(&e.cloud);
    }
}
