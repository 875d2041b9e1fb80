use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::TimeZone;
use karpenter_testing::FakeClock;

use super::*;
use crate::launch::fleet::{Ec2Instance, InstanceState};
use crate::launch::mock::{MockCall, MockEc2, ops};
use crate::queue::{InstanceClaim, LookupError, StaticLookup};

/// A lookup that counts its calls.
#[derive(Debug, Default)]
struct Counting {
    inner: StaticLookup,
    calls: AtomicUsize,
}

#[async_trait]
impl InstanceLookup for Counting {
    async fn lookup(&self, ids: &[String]) -> Result<BTreeMap<String, InstanceClaim>, LookupError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.lookup(ids).await
    }
}

struct Env {
    ec2: MockEc2,
    clock: FakeClock,
    lookup: Arc<Counting>,
    metrics: Arc<karpenter_runtime::metrics::Metrics>,
    source: InstanceStatusSource,
}

fn instance(id: &str) -> Ec2Instance {
    Ec2Instance {
        instance_id: id.into(),
        instance_type: "m5.large".into(),
        availability_zone: "us-west-2a".into(),
        availability_zone_id: None,
        subnet_id: None,
        image_id: None,
        state: InstanceState::Running,
        spot_instance_request_id: None,
        capacity_reservation_id: None,
        capacity_reservation_preference: None,
        security_group_ids: Vec::new(),
        placement_group_id: None,
        launch_time: None,
        tags: BTreeMap::new(),
    }
}

/// EC2 with the running instances `ids`; those in `claimed` have a NodeClaim.
fn env(ids: &[&str], claimed: &[&str]) -> Env {
    let clock = FakeClock::new(Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap());
    let ec2 = MockEc2::new(Arc::new(clock.clone()));
    for id in ids {
        ec2.insert_instance(instance(id));
    }
    let claims = claimed
        .iter()
        .map(|id| {
            let claim = InstanceClaim {
                name: format!("claim-{id}"),
                provider_id: format!("aws:///us-west-2a/{id}"),
                ..Default::default()
            };
            ((*id).to_owned(), claim)
        })
        .collect();
    let lookup = Arc::new(Counting { inner: StaticLookup(claims), calls: AtomicUsize::new(0) });
    let metrics = crate::testing::registry();
    let source = InstanceStatusSource::new(
        Arc::new(ec2.clone()),
        lookup.clone(),
        Arc::new(clock.clone()),
        Arc::new(clock.clone()),
    )
    .with_metrics(metrics.clone());
    Env { ec2, clock, lookup, metrics, source }
}

fn status(instance: &str, system: &str, events: &[(&str, &str)]) -> InstanceStatus {
    InstanceStatus {
        instance_status: instance.into(),
        system_status: system.into(),
        events: events
            .iter()
            .map(|(code, description)| ScheduledEvent {
                code: (*code).into(),
                description: (*description).into(),
                not_before: None,
            })
            .collect(),
        ..Default::default()
    }
}

fn summary(events: &[InterruptionEvent]) -> Vec<(String, InterruptionKind, InterruptionAction)> {
    events.iter().map(|e| (e.provider_id.clone(), e.kind.clone(), e.action)).collect()
}

impl Env {
    /// The categories counted so far, each as often as counted, in name order.
    fn counted(&self) -> Vec<String> {
        let exposition = self.metrics.render();
        let mut out = Vec::new();
        for category in ["InstanceStatus", "ScheduledEvent", "SystemStatus"] {
            let series = format!("karpenter_interruption_instance_status_unhealthy_total{{category=\"{category}\"}}");
            let n = crate::testing::sample(&exposition, &series).unwrap_or(0.0);
            out.extend(std::iter::repeat_n(category.to_owned(), n as usize));
        }
        out
    }
    fn lookups(&self) -> usize {
        self.lookup.calls.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn impaired_checks_delete_forcefully_and_scheduled_events_gracefully() {
    let e = env(
        &["i-inst", "i-sys", "i-both", "i-event", "i-done", "i-ok"],
        &["i-inst", "i-sys", "i-both", "i-event", "i-done", "i-ok"],
    );
    e.ec2.set_instance_status("i-inst", status("impaired", "ok", &[]));
    e.ec2.set_instance_status("i-sys", status("ok", "impaired", &[]));
    e.ec2.set_instance_status("i-both", status("impaired", "impaired", &[]));
    e.ec2.set_instance_status("i-event", status("ok", "ok", &[("instance-retirement", "The instance is retiring")]));
    e.ec2.set_instance_status(
        "i-done",
        status("ok", "ok", &[("system-reboot", "[Completed] reboot"), ("instance-stop", "[Canceled] stop")]),
    );
    e.ec2.set_instance_status("i-ok", status("initializing", "insufficient-data", &[]));

    let events = e.source.check().await.unwrap();
    let forceful = (InterruptionKind::InstanceStatusFailure, InterruptionAction::DeleteForceful);
    assert_eq!(
        summary(&events),
        [
            ("aws:///us-west-2a/i-both".to_owned(), forceful.0.clone(), forceful.1),
            ("aws:///us-west-2a/i-event".to_owned(), InterruptionKind::ScheduledChange, InterruptionAction::Delete),
            ("aws:///us-west-2a/i-inst".to_owned(), forceful.0.clone(), forceful.1),
            ("aws:///us-west-2a/i-sys".to_owned(), forceful.0, forceful.1),
        ]
    );
    // Counted when handled (acknowledged), once per failed check.
    assert!(e.counted().is_empty());
    e.source.acknowledge(&events).await.unwrap();
    let mut counted = e.counted();
    counted.sort();
    assert_eq!(counted, ["InstanceStatus", "InstanceStatus", "ScheduledEvent", "SystemStatus", "SystemStatus"]);
}

#[tokio::test]
async fn an_unhealthy_instance_is_reported_once_per_episode_and_again_until_handled() {
    let e = env(&["i-a", "i-b"], &["i-a", "i-b"]);
    e.ec2.set_instance_status("i-a", status("impaired", "ok", &[]));
    e.ec2.set_instance_status("i-b", status("ok", "impaired", &[]));

    let first = e.source.check().await.unwrap();
    assert_eq!(first.len(), 2);
    // Only i-a was handled: i-b comes again, i-a does not (its NodeClaim is already deleting).
    e.source.acknowledge(&first[..1]).await.unwrap();
    let second = e.source.check().await.unwrap();
    assert_eq!(summary(&second).into_iter().map(|s| s.0).collect::<Vec<_>>(), ["aws:///us-west-2a/i-b"]);
    e.source.acknowledge(&second).await.unwrap();
    assert!(e.source.check().await.unwrap().is_empty());
    assert_eq!(e.counted(), ["InstanceStatus", "SystemStatus"]);

    // i-a recovers, then fails again: a new report. A change of what is wrong is one too.
    e.ec2.set_instance_status("i-a", status("ok", "ok", &[]));
    assert!(e.source.check().await.unwrap().is_empty());
    e.ec2.set_instance_status("i-a", status("impaired", "ok", &[]));
    e.ec2.set_instance_status("i-b", status("ok", "impaired", &[("system-maintenance", "maintenance")]));
    let again = e.source.check().await.unwrap();
    assert_eq!(
        summary(&again).into_iter().map(|s| s.0).collect::<Vec<_>>(),
        ["aws:///us-west-2a/i-a", "aws:///us-west-2a/i-b"]
    );
}

#[tokio::test]
async fn healthy_instances_and_other_instances_cost_no_lookup() {
    let e = env(&["i-mine", "i-foreign"], &["i-mine"]);
    assert!(e.source.check().await.unwrap().is_empty());
    assert_eq!(e.lookups(), 0, "nothing unhealthy: no NodeClaim list");

    e.ec2.set_instance_status("i-foreign", status("impaired", "ok", &[]));
    assert!(e.source.check().await.unwrap().is_empty(), "not the cluster's instance");
    assert_eq!(e.lookups(), 1);
    assert!(e.source.check().await.unwrap().is_empty());
    assert_eq!(e.lookups(), 1, "a foreign instance is not looked up again while it stays unhealthy");
    assert!(e.counted().is_empty());

    // Terminated instances are not described (EC2 reports running instances only without IncludeAllInstances).
    e.ec2.update_instance("i-mine", |i| i.state = InstanceState::Terminated);
    e.ec2.set_instance_status("i-mine", status("impaired", "ok", &[]));
    assert!(e.source.check().await.unwrap().is_empty());
}

#[tokio::test]
async fn missing_permission_skips_the_check_and_other_errors_fail_the_batch() {
    let e = env(&["i-a"], &["i-a"]);
    e.ec2.set_instance_status("i-a", status("impaired", "ok", &[]));
    let denied = || AwsApiError::new(ops::DESCRIBE_INSTANCE_STATUS, "UnauthorizedOperation", "not authorized");
    e.ec2.fail_next(ops::DESCRIBE_INSTANCE_STATUS, denied());
    e.ec2.fail_next(ops::DESCRIBE_INSTANCE_STATUS, denied());
    assert!(e.source.check().await.unwrap().is_empty());
    assert!(e.source.check().await.unwrap().is_empty());
    // The permission granted: the next check works.
    assert_eq!(e.source.check().await.unwrap().len(), 1);

    e.ec2.fail_next(
        ops::DESCRIBE_INSTANCE_STATUS,
        AwsApiError::new(ops::DESCRIBE_INSTANCE_STATUS, "InternalError", "x"),
    );
    let err = e.source.check().await.unwrap_err();
    assert!(err.to_string().contains("instance statuses"), "{err}");
}

#[tokio::test]
async fn next_batch_checks_at_once_then_every_interval() {
    let e = env(&["i-a"], &["i-a"]);
    let start = e.clock.now();
    let describes = || e.ec2.calls().iter().filter(|c| matches!(c, MockCall::DescribeInstanceStatus)).count();
    assert!(e.source.next_batch().await.unwrap().is_empty());
    assert_eq!((describes(), e.clock.now()), (1, start), "the first check does not wait");
    e.clock.step_secs(20);
    e.ec2.set_instance_status("i-a", status("ok", "impaired", &[]));
    let batch = e.source.next_batch().await.unwrap();
    assert_eq!(e.clock.now() - start, chrono::Duration::seconds(60), "waited the rest of the minute");
    assert_eq!((describes(), batch.len()), (2, 1));
    // Handled: acknowledging is what the interruption controller does.
    e.source.acknowledge(&batch).await.unwrap();
    assert!(e.source.next_batch().await.unwrap().is_empty());
    assert_eq!(e.clock.now() - start, chrono::Duration::seconds(120));
}
