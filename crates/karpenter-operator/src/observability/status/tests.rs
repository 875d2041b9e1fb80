//! The status recorder against upstream's semantics (operatorpkg's status controller): what each look at an
//! object sets, counts and removes, read back from the exposition text.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{Duration as Delta, TimeZone, Utc};
use k8s_openapi::api::core::v1::{Node, NodeCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karpenter_api::condition::{Condition, ConditionStatus};
use karpenter_api::{NodeClaim, labels};
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::{FakeClock, NodeClaimOptions, NodeOptions, node, node_claim};

use super::*;
use crate::metrics::BuildInfo;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
}

fn cond(type_: &str, status: &str, reason: &str, at: DateTime<Utc>) -> ObservedCondition {
    ObservedCondition { type_: type_.into(), status: status.into(), reason: reason.into(), last_transition: Some(at) }
}

fn claim(conditions: Vec<ObservedCondition>) -> ObservedObject {
    ObservedObject {
        name: "c1".into(),
        labels: BTreeMap::from([(labels::NODE_POOL.to_string(), "default".to_string())]),
        conditions,
        ..Default::default()
    }
}

/// The lines of `text` for samples of `name` (exactly that sample name), sorted.
fn lines<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let mut out: Vec<&str> = text
        .lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with('{') || r.starts_with(' ')))
        .collect();
    out.sort_unstable();
    out
}

fn recorder(kind: StatusKind) -> (Arc<Metrics>, StatusRecorder) {
    let metrics = Arc::new(Metrics::new(&BuildInfo::default()));
    let classes = ["karpenter.kwok.sh/kwoknodeclass".to_string()];
    (metrics.clone(), StatusRecorder::new(kind, metrics, &classes))
}

#[test]
fn each_condition_is_counted_and_timed_with_the_objects_labels() {
    let (metrics, rec) = recorder(StatusKind::NodeClaim);
    let mut obj = claim(vec![cond("Launched", "True", "Launched", t0()), cond("Ready", "Unknown", "", t0())]);
    obj.labels.insert("karpenter.kwok.sh/kwoknodeclass".into(), "default".into());
    rec.observe(&obj, t0() + Delta::seconds(30));
    let text = metrics.render();
    assert_eq!(
        lines(&text, "operator_nodeclaim_status_condition_count"),
        [
            "operator_nodeclaim_status_condition_count{name=\"c1\",namespace=\"\",type=\"Launched\",status=\"True\",reason=\"Launched\",karpenter_kwok_sh_kwoknodeclass=\"default\",karpenter_sh_nodepool=\"default\"} 1.0",
            "operator_nodeclaim_status_condition_count{name=\"c1\",namespace=\"\",type=\"Ready\",status=\"Unknown\",reason=\"\",karpenter_kwok_sh_kwoknodeclass=\"default\",karpenter_sh_nodepool=\"default\"} 1.0",
        ]
    );
    let current = lines(&text, "operator_nodeclaim_status_condition_current_status_seconds");
    assert_eq!(current.len(), 2);
    assert!(current.iter().all(|l| l.ends_with("} 30.0")), "{current:?}");
    // Both conditions are new to the recorder: each is a transition, with nothing to time yet.
    assert_eq!(lines(&text, "operator_nodeclaim_status_condition_transitions_total").len(), 2);
    assert!(lines(&text, "operator_nodeclaim_status_condition_transition_seconds_count").is_empty());
}

#[test]
fn a_status_change_moves_the_gauges_counts_a_transition_and_times_the_status_left() {
    let (metrics, rec) = recorder(StatusKind::NodeClaim);
    rec.observe(&claim(vec![cond("Ready", "Unknown", "", t0())]), t0());
    // Looked at again unchanged: no new transition.
    rec.observe(&claim(vec![cond("Ready", "Unknown", "", t0())]), t0() + Delta::seconds(5));
    let ready = t0() + Delta::seconds(12);
    rec.observe(&claim(vec![cond("Ready", "True", "Ready", ready)]), ready + Delta::seconds(1));
    let text = metrics.render();
    let count = lines(&text, "operator_nodeclaim_status_condition_count");
    assert_eq!(count.len(), 1, "the Unknown series went: {count:?}");
    assert!(count[0].contains("status=\"True\",reason=\"Ready\""));
    assert_eq!(
        lines(&text, "operator_nodeclaim_status_condition_current_status_seconds"),
        [
            "operator_nodeclaim_status_condition_current_status_seconds{name=\"c1\",namespace=\"\",type=\"Ready\",status=\"True\",reason=\"Ready\",karpenter_kwok_sh_kwoknodeclass=\"\",karpenter_sh_nodepool=\"default\"} 1.0"
        ]
    );
    assert_eq!(
        lines(&text, "operator_nodeclaim_status_condition_transitions_total"),
        [
            "operator_nodeclaim_status_condition_transitions_total{type=\"Ready\",status=\"True\",reason=\"Ready\",karpenter_kwok_sh_kwoknodeclass=\"\",karpenter_sh_nodepool=\"default\"} 1",
            "operator_nodeclaim_status_condition_transitions_total{type=\"Ready\",status=\"Unknown\",reason=\"\",karpenter_kwok_sh_kwoknodeclass=\"\",karpenter_sh_nodepool=\"default\"} 1",
        ]
    );
    // 12 s spent Unknown, labelled with the status left (and no reason).
    assert_eq!(
        lines(&text, "operator_nodeclaim_status_condition_transition_seconds_sum"),
        [
            "operator_nodeclaim_status_condition_transition_seconds_sum{type=\"Ready\",status=\"Unknown\",karpenter_kwok_sh_kwoknodeclass=\"\",karpenter_sh_nodepool=\"default\"} 12.0"
        ]
    );
    // Upstream's doubling buckets: 12 s is first counted at 16 s.
    let buckets = lines(&text, "operator_nodeclaim_status_condition_transition_seconds_bucket");
    let at = |le: &str| buckets.iter().find(|l| l.contains(&format!("le=\"{le}\""))).map(|l| l.rsplit(' ').next());
    assert_eq!((at("8.0"), at("16.0")), (Some(Some("0")), Some(Some("1"))), "{buckets:?}");
}

#[test]
fn a_reason_change_or_a_removed_condition_drops_the_old_series_without_a_transition() {
    let (metrics, rec) = recorder(StatusKind::NodePool);
    let pool = |conditions| ObservedObject { name: "default".into(), conditions, ..Default::default() };
    rec.observe(
        &pool(vec![cond("Ready", "False", "NodeClassNotReady", t0()), cond("ValidationSucceeded", "True", "", t0())]),
        t0(),
    );
    rec.observe(&pool(vec![cond("Ready", "False", "Other", t0())]), t0());
    let text = metrics.render();
    assert_eq!(
        lines(&text, "operator_nodepool_status_condition_count"),
        [
            "operator_nodepool_status_condition_count{name=\"default\",namespace=\"\",type=\"Ready\",status=\"False\",reason=\"Other\"} 1.0"
        ]
    );
    // The same status with another reason is no transition (upstream compares statuses).
    assert_eq!(lines(&text, "operator_nodepool_status_condition_transitions_total").len(), 2);
}

#[test]
fn termination_is_timed_while_terminating_and_observed_once_gone() {
    let (metrics, rec) = recorder(StatusKind::Node);
    let mut obj = ObservedObject {
        name: "n1".into(),
        labels: BTreeMap::from([(labels::NODE_INITIALIZED.to_string(), "true".to_string())]),
        conditions: vec![cond("Ready", "True", "KubeletReady", t0())],
        ..Default::default()
    };
    rec.observe(&obj, t0());
    let text = metrics.render();
    assert!(lines(&text, "operator_node_termination_current_time_seconds").is_empty(), "not terminating yet");
    let deleted = t0() + Delta::seconds(60);
    obj.deletion = Some(deleted);
    rec.observe(&obj, deleted + Delta::seconds(4));
    let text = metrics.render();
    assert_eq!(
        lines(&text, "operator_node_termination_current_time_seconds"),
        [
            "operator_node_termination_current_time_seconds{name=\"n1\",namespace=\"\",karpenter_kwok_sh_kwoknodeclass=\"\",karpenter_sh_nodepool=\"\",karpenter_sh_initialized=\"true\"} 4.0"
        ]
    );
    rec.gone("", "n1", deleted + Delta::seconds(9));
    let text = metrics.render();
    for gauge in [
        "operator_node_termination_current_time_seconds",
        "operator_node_status_condition_count",
        "operator_node_status_condition_current_status_seconds",
    ] {
        assert!(lines(&text, gauge).is_empty(), "{gauge} is removed with the object: {text}");
    }
    assert_eq!(
        lines(&text, "operator_node_termination_duration_seconds_sum"),
        [
            "operator_node_termination_duration_seconds_sum{karpenter_kwok_sh_kwoknodeclass=\"\",karpenter_sh_nodepool=\"\",karpenter_sh_initialized=\"true\"} 9.0"
        ]
    );
    // The counters stay: they count what happened.
    assert_eq!(lines(&text, "operator_node_status_condition_transitions_total").len(), 1);
}

#[test]
fn an_object_gone_without_being_seen_terminating_is_not_timed() {
    let (metrics, rec) = recorder(StatusKind::NodePool);
    let pool =
        ObservedObject { name: "p".into(), conditions: vec![cond("Ready", "True", "", t0())], ..Default::default() };
    rec.observe(&pool, t0());
    rec.retain(&BTreeSet::new(), t0() + Delta::seconds(3));
    let text = metrics.render();
    assert!(lines(&text, "operator_nodepool_status_condition_count").is_empty(), "missing from a re-list: gone");
    assert!(lines(&text, "operator_nodepool_termination_duration_seconds_count").is_empty());
    // Forgetting an object twice is harmless.
    rec.gone("", "p", t0());
}

fn node_claim_condition(type_: &str, status: ConditionStatus, at: DateTime<Utc>) -> Condition {
    Condition {
        type_: type_.into(),
        status,
        last_transition_time: karpenter_api::time::rfc3339(at),
        reason: type_.into(),
        ..Default::default()
    }
}

/// The state-fed recorders read the kinds as the state holds them (NodeClaim and Node conditions, labels,
/// deletion timestamps) and forget what leaves the state.
#[tokio::test]
async fn the_state_observers_record_what_the_state_holds() {
    let clock = FakeClock::new(t0());
    let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
    let ctx = ControllerContext::for_tests(
        server.client(),
        Arc::new(karpenter_testing::kwok::fake()),
        Arc::new(clock.clone()),
    );
    let mut c: NodeClaim = node_claim(NodeClaimOptions { name: Some("c1".into()), ..Default::default() });
    c.metadata.labels.get_or_insert_default().insert(labels::NODE_POOL.into(), "default".into());
    c.status.get_or_insert_default().conditions = vec![node_claim_condition("Launched", ConditionStatus::True, t0())];
    c.metadata.deletion_timestamp = Some(Time(karpenter_api::time::rfc3339(t0() + Delta::seconds(2)).parse().unwrap()));
    let mut n: Node = node(NodeOptions { name: Some("n1".into()), ..Default::default() });
    n.status.get_or_insert_default().conditions = Some(vec![NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: Some("KubeletReady".into()),
        last_transition_time: Some(Time(karpenter_api::time::rfc3339(t0()).parse().unwrap())),
        ..Default::default()
    }]);
    ctx.state.apply(c.clone());
    ctx.state.apply(n);
    clock.set(t0() + Delta::seconds(10));
    let claims = StateStatusObserver::<NodeClaim>::new(&ctx);
    let nodes = StateStatusObserver::<Node>::new(&ctx);
    claims.refresh();
    nodes.refresh();
    let text = ctx.metrics.render();
    assert_eq!(
        lines(&text, "operator_nodeclaim_status_condition_current_status_seconds"),
        [
            "operator_nodeclaim_status_condition_current_status_seconds{name=\"c1\",namespace=\"\",type=\"Launched\",status=\"True\",reason=\"Launched\",karpenter_kwok_sh_kwoknodeclass=\"\",karpenter_sh_nodepool=\"default\"} 10.0"
        ]
    );
    assert_eq!(
        lines(&text, "operator_nodeclaim_termination_current_time_seconds"),
        [
            "operator_nodeclaim_termination_current_time_seconds{name=\"c1\",namespace=\"\",karpenter_kwok_sh_kwoknodeclass=\"\",karpenter_sh_nodepool=\"default\"} 8.0"
        ]
    );
    assert_eq!(lines(&text, "operator_node_status_condition_count").len(), 1, "{text}");
    ctx.state.remove(&c);
    clock.set(t0() + Delta::seconds(12));
    claims.refresh();
    let text = ctx.metrics.render();
    assert!(lines(&text, "operator_nodeclaim_termination_current_time_seconds").is_empty());
    assert!(lines(&text, "operator_nodeclaim_status_condition_count").is_empty());
    assert!(
        text.contains("operator_nodeclaim_termination_duration_seconds_sum{karpenter_kwok_sh_kwoknodeclass=\"\",karpenter_sh_nodepool=\"default\"} 10.0"),
        "deleted at +2 s, gone by +12 s: {text}"
    );
}
