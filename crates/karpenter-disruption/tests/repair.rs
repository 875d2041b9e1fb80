//! Node repair as a voluntary disruption method (upstream v1.15's tests, in our words): budgets with the
//! `Unhealthy` reason, the 20 % outer limit, the vetoes, the order, replace versus delete-first, and reboot.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use karpenter_api::ConditionStatus;
use karpenter_api::loader::load_str;
use karpenter_api::repair::{RepairAction, RepairMatch};
use karpenter_disruption::repair::RepairOptions;
use karpenter_disruption::{Decision, DisruptionOptions, Method, Outcome, Pass, Reason, evaluate};
use karpenter_scheduler::ClusterSnapshot;
use serde_json::json;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z").unwrap().with_timezone(&Utc)
}

/// One node of the test cluster.
struct N {
    name: &'static str,
    pool: &'static str,
    /// CPU requested by the one pod on it (0: no pod).
    pod_cpu: u32,
    /// The pod carries `karpenter.sh/do-not-disrupt: "true"`.
    protected: bool,
    node_annotations: serde_json::Value,
    claim_annotations: serde_json::Value,
}

fn n(name: &'static str, pool: &'static str) -> N {
    N { name, pool, pod_cpu: 4, protected: true, node_annotations: json!({}), claim_annotations: json!({}) }
}

/// Pools as `(name, extra spec fields)`, and nodes: m-4x on-demand nodes in test-zone-a, each full with one
/// 4-cpu pod by default (so a displaced pod needs a new node).
fn cluster(pools: &[(&str, serde_json::Value)], nodes: &[N]) -> ClusterSnapshot {
    let mut docs: Vec<serde_json::Value> = Vec::new();
    for (name, extra) in pools {
        let mut spec = json!({
            "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []}},
            "disruption": {"budgets": [{"nodes": "10%"}]},
        });
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        docs.push(
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name}, "spec": spec}),
        );
    }
    let conditions = json!([
        {"type": "Launched", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Launched", "message": ""},
        {"type": "Registered", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Registered", "message": ""},
        {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:05:00Z", "reason": "Initialized", "message": ""}
    ]);
    let resources = json!({"cpu": "4", "memory": "16Gi", "pods": "110"});
    for node in nodes {
        let labels = json!({
            "kubernetes.io/hostname": node.name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "m-4x", "topology.kubernetes.io/zone": "test-zone-a",
            "karpenter.sh/capacity-type": "on-demand", "karpenter.k8s.aws/instance-family": "m",
            "karpenter.sh/nodepool": node.pool, "karpenter.sh/initialized": "true"
        });
        docs.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": labels, "annotations": node.node_annotations},
            "status": {"allocatable": resources, "capacity": resources}}));
        docs.push(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": format!("claim-{}", node.name), "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": labels, "annotations": node.claim_annotations},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
            "status": {"nodeName": node.name, "providerID": format!("aws:///test-zone-a/i-{}", node.name),
                       "capacity": resources, "allocatable": resources, "conditions": conditions}}));
        if node.pod_cpu > 0 {
            docs.push(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("pod-{}", node.name), "namespace": "default",
                             "annotations": if node.protected { json!({"karpenter.sh/do-not-disrupt": "true"}) } else { json!({}) },
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}]},
                "spec": {"nodeName": node.name, "containers": [{"name": "c", "image": "i",
                         "resources": {"requests": {"cpu": node.pod_cpu.to_string()}}}]},
                "status": {"phase": "Running"}}));
        }
    }
    let text: Vec<String> = docs.iter().map(|d| serde_json::to_string(d).unwrap()).collect();
    ClusterSnapshot::from_objects(&load_str(&text.join("\n---\n"), "repair-test").unwrap()).unwrap()
}

fn broken(rank: u32, eligible_minutes_ago: i64) -> RepairMatch {
    RepairMatch {
        condition_type: "Ready".into(),
        condition_status: ConditionStatus::False,
        reason: Some("KubeletNotReady".into()),
        eligible_at: now() - chrono::Duration::minutes(eligible_minutes_ago),
        toleration: Duration::from_secs(60),
        priority: 0,
        rank,
        action: RepairAction::Replace,
        termination_grace_period: Some(Duration::from_secs(300)),
    }
}

fn options(unhealthy: &[(&str, RepairMatch)]) -> DisruptionOptions {
    DisruptionOptions {
        repair: RepairOptions {
            enabled: true,
            unhealthy: unhealthy.iter().map(|(n, m)| ((*n).to_owned(), m.clone())).collect(),
            ..RepairOptions::default()
        },
        // Broken nodes are not Ready.
        not_ready_nodes: unhealthy.iter().map(|(n, _)| (*n).to_owned()).collect(),
        ..DisruptionOptions::default()
    }
}

fn pass(snapshot: &ClusterSnapshot, options: &DisruptionOptions) -> Pass {
    let catalogue = common::catalogue();
    let pools = common::pools(snapshot, &catalogue);
    evaluate(snapshot, &pools, &karpenter_testing::vocabulary::aws(), now(), options)
}

fn ten(pool: &'static str) -> Vec<N> {
    ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"].into_iter().map(|name| n(name, pool)).collect()
}

#[test]
fn a_broken_node_is_replaced_first_and_do_not_disrupt_does_not_keep_it() {
    let snap = cluster(&[("default", json!({}))], &ten("default"));
    let p = pass(&snap, &options(&[("n3", broken(0, 5))]));
    assert_eq!(p.commands.len(), 1, "{}", p.explain());
    let c = &p.commands[0];
    assert_eq!((c.method, c.decision), (Method::Repair, Decision::Replace), "{}", p.explain());
    assert_eq!(c.candidates[0].node, "n3");
    assert_eq!(c.replacements.len(), 1, "its pod needs a new node: {c:?}");
    assert_eq!(c.displaced_pods, ["default/pod-n3"]);
    let detail = c.repair.as_ref().unwrap();
    assert_eq!((detail.condition.as_str(), detail.status.as_str()), ("Ready", "False"));
    assert_eq!(detail.termination_grace_period_seconds, Some(300));
    assert!(!detail.terminate_first);
    assert!(c.explanation.contains("unhealthy: Ready=False/KubeletNotReady"), "{}", c.explanation);
    assert_eq!(p.verdict("n3").unwrap().reason, Reason::Disrupted { method: Method::Repair });
    // The healthy nodes' pods carry do-not-disrupt: they are blocked for every other method.
    assert_eq!(p.verdict("n4").unwrap().outcome, Outcome::Blocked);
    // Without the gate nothing happens.
    let mut off = options(&[("n3", broken(0, 5))]);
    off.repair.enabled = false;
    assert!(pass(&snap, &off).commands.is_empty());
}

#[test]
fn a_node_inside_its_toleration_waits() {
    let snap = cluster(&[("default", json!({}))], &ten("default"));
    let p = pass(&snap, &options(&[("n3", broken(0, -1))]));
    assert!(p.commands.is_empty(), "{}", p.explain());
}

#[test]
fn do_not_repair_on_the_node_or_the_claim_vetoes() {
    let mut nodes = ten("default");
    nodes[1].node_annotations = json!({"karpenter.sh/do-not-repair": "true"});
    nodes[2].claim_annotations = json!({"karpenter.sh/do-not-repair": "true"});
    nodes[3].node_annotations = json!({"karpenter.sh/do-not-disrupt": "true"});
    let snap = cluster(&[("default", json!({"disruption": {"budgets": [{"nodes": "100%"}]}}))], &nodes);
    let p = pass(&snap, &options(&[("n1", broken(0, 5)), ("n2", broken(0, 5))]));
    assert!(p.commands.is_empty(), "{}", p.explain());
    assert_eq!(p.verdict("n1").unwrap().reason, Reason::NodeDoNotRepair);
    assert_eq!(p.verdict("n2").unwrap().reason, Reason::NodeDoNotRepair);
    let p = pass(&snap, &options(&[("n3", broken(0, 5))]));
    assert_eq!(p.commands[0].candidates[0].node, "n3", "do-not-disrupt does not block repair: {}", p.explain());
}

#[test]
fn an_unhealthy_only_budget_of_zero_blocks_repair_but_not_drift() {
    let budgets = json!({"disruption": {"budgets": [{"nodes": "0", "reasons": ["Unhealthy"]}, {"nodes": "100%"}]}});
    let snap = cluster(&[("default", budgets)], &ten("default"));
    let p = pass(&snap, &options(&[("n3", broken(0, 5))]));
    assert!(p.commands.iter().all(|c| c.method != Method::Repair), "{}", p.explain());
    assert!(matches!(
        p.verdict("n3").unwrap().reason,
        Reason::BudgetExhausted { reason: karpenter_api::nodepool::DisruptionReason::Unhealthy, .. }
    ));
    let unhealthy = p.budgets.iter().find(|b| b.reason.as_str() == "Unhealthy").unwrap();
    assert_eq!(unhealthy.allowed, 0);
    let drifted = p.budgets.iter().find(|b| b.reason.as_str() == "Drifted").unwrap();
    assert_eq!(drifted.allowed, 9, "the not-Ready node consumes the drift budget, as in v1.14");
}

#[test]
fn not_ready_nodes_do_not_use_up_the_unhealthy_allowance() {
    // 10 % of 10 nodes: one repair. Both broken nodes are not Ready; neither counts as disrupting for Unhealthy.
    let snap = cluster(&[("default", json!({}))], &ten("default"));
    let p = pass(&snap, &options(&[("n1", broken(0, 5)), ("n2", broken(0, 9))]));
    let unhealthy = p.budgets.iter().find(|b| b.reason.as_str() == "Unhealthy").unwrap();
    assert_eq!((unhealthy.nodes, unhealthy.disrupting, unhealthy.allowed), (10, 0, 1));
    assert_eq!(p.commands.len(), 1);
    assert_eq!(p.commands[0].candidates[0].node, "n2", "eligible earlier, so first: {}", p.explain());
    // A repair in flight (its node marked for deletion) uses the one allowance: the other waits.
    let mut snap = snap;
    snap.nodes.iter_mut().find(|n| n.name == "n2").unwrap().marked_for_deletion = true;
    let p = pass(&snap, &options(&[("n1", broken(0, 5)), ("n2", broken(0, 9))]));
    assert!(p.commands.is_empty(), "{}", p.explain());
    assert!(matches!(p.verdict("n1").unwrap().reason, Reason::BudgetExhausted { .. }), "{}", p.explain());
}

#[test]
fn more_than_a_fifth_unhealthy_blocks_the_pools_repair() {
    let snap = cluster(&[("default", json!({"disruption": {"budgets": [{"nodes": "100%"}]}}))], &ten("default"));
    // 2 of 10 is the threshold: repair acts.
    let two = [("n1", broken(0, 5)), ("n2", broken(0, 5))];
    assert_eq!(pass(&snap, &options(&two)).commands.len(), 1);
    // 3 of 10 (one not yet eligible still counts): blocked.
    let three = [("n1", broken(0, 5)), ("n2", broken(0, 5)), ("n3", broken(0, -20))];
    let p = pass(&snap, &options(&three));
    assert!(p.commands.is_empty(), "{}", p.explain());
    assert_eq!(
        p.verdict("n1").unwrap().reason,
        Reason::RepairBlocked { node_pool: "default".into(), unhealthy: 3, nodes: 10, threshold: 2 }
    );
    // All ten broken: still blocked, nothing replaced.
    let all: Vec<(&str, RepairMatch)> = snap.nodes.iter().map(|n| (n.name.as_str(), broken(0, 5))).collect();
    assert!(pass(&snap, &options(&all)).commands.is_empty());
}

#[test]
fn a_higher_priority_goes_first_and_waiting_earns_rank() {
    let snap = cluster(&[("default", json!({}))], &ten("default"));
    let p = pass(&snap, &options(&[("n1", broken(0, 5)), ("n2", broken(1, 5))]));
    assert_eq!(p.commands[0].candidates[0].node, "n2", "{}", p.explain());
    // 25 minutes of waiting (2.5 tiers of 10 minutes) outrank one priority rank.
    let p = pass(&snap, &options(&[("n1", broken(0, 25)), ("n2", broken(1, 5))]));
    assert_eq!(p.commands[0].candidates[0].node, "n1", "{}", p.explain());
    // A pool whose repairs keep failing backs off.
    let mut o = options(&[("n1", broken(1, 5))]);
    o.repair.failures = BTreeMap::from([("default".to_owned(), 3)]);
    assert_eq!(pass(&snap, &o).commands.len(), 1, "backoff orders, it does not block");
}

#[test]
fn a_pool_without_room_deletes_first() {
    // limits.cpu 40 with ten 4-cpu nodes: no room for a replacement.
    let limited = json!({"limits": {"cpu": "40"}});
    let snap = cluster(&[("default", limited)], &ten("default"));
    let p = pass(&snap, &options(&[("n3", broken(0, 5))]));
    let c = &p.commands[0];
    assert_eq!((c.decision, c.replacements.len()), (Decision::Delete, 0), "{}", p.explain());
    assert!(c.repair.as_ref().unwrap().terminate_first);
    assert!(c.explanation.contains("at its limits (cpu"), "{}", c.explanation);
    // With room, the same node is replaced first.
    let roomy = json!({"limits": {"cpu": "48"}});
    let snap = cluster(&[("default", roomy)], &ten("default"));
    let c = &pass(&snap, &options(&[("n3", broken(0, 5))])).commands[0];
    assert_eq!((c.decision, c.replacements.len()), (Decision::Replace, 1));
}

#[test]
fn a_reboot_policy_gives_a_reboot_command() {
    let snap = cluster(&[("default", json!({}))], &ten("default"));
    let mut m = broken(0, 5);
    m.action = RepairAction::Reboot;
    m.termination_grace_period = Some(Duration::ZERO);
    let p = pass(&snap, &options(&[("n3", m)]));
    let c = &p.commands[0];
    assert_eq!((c.method, c.decision, c.replacements.len()), (Method::Repair, Decision::Reboot, 0));
    assert!(c.explanation.starts_with("reboot n3 (m-4x)"), "{}", c.explanation);
    assert_eq!(c.repair.as_ref().unwrap().termination_grace_period_seconds, Some(0));
}

#[test]
fn drift_in_a_pool_at_its_limits_deletes_first() {
    // Full nodes (one 4-cpu pod each) in a pool at limits.cpu 40: a drifted node's pod needs a new node, which
    // the limits refuse; v1.15 deletes the drifted node first instead of waiting for room forever.
    let full = |pool: &'static str| -> Vec<N> { ten(pool).into_iter().map(|n| N { protected: false, ..n }).collect() };
    let drifted = |limit: &str| {
        let mut snap = cluster(&[("default", json!({"limits": {"cpu": limit}}))], &full("default"));
        let claim = snap.node_claims.iter_mut().find(|c| c.name == "claim-n3").unwrap();
        let mut nc = (*claim.claim).clone();
        nc.status.get_or_insert_default().conditions.push(karpenter_api::Condition {
            type_: "Drifted".into(),
            status: ConditionStatus::True,
            last_transition_time: "2026-01-01T10:00:00Z".into(),
            reason: "RequirementsDrifted".into(),
            ..Default::default()
        });
        claim.claim = nc.into();
        snap
    };
    let p = pass(&drifted("40"), &DisruptionOptions::default());
    let c = &p.commands[0];
    assert_eq!((c.method, c.decision, c.replacements.len()), (Method::Drift, Decision::Delete, 0), "{}", p.explain());
    assert!(c.explanation.contains("at its limits (cpu"), "{}", c.explanation);
    let p = pass(&drifted("44"), &DisruptionOptions::default());
    let c = &p.commands[0];
    assert_eq!((c.decision, c.replacements.len()), (Decision::Replace, 1), "room for one: {}", p.explain());
}
