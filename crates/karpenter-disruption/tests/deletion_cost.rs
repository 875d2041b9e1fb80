//! The pod deletion-cost ranking (`deletion_cost::rank`) and the cycle's writes (`deletion_cost::plan`).

mod common;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use karpenter_api::load_str;
use karpenter_disruption::DisruptionOptions;
use karpenter_disruption::deletion_cost::{DISRUPTED_COST, Group, PodPatch, desired, plan, rank};
use karpenter_scheduler::ClusterSnapshot;

const NOW: &str = "2026-01-01T12:00:00Z";

fn pool(name: &str, budget: &str, consolidate_after: &str) -> String {
    format!(
        r#"{{"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {{"name": "{name}"}}, "spec": {{"template": {{"spec": {{"nodeClassRef": {{"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}, "requirements": []}}}}, "disruption": {{"consolidateAfter": "{consolidate_after}", "budgets": [{{"nodes": "{budget}"}}]}}}}}}"#
    )
}

#[derive(Default)]
struct NodeOpts {
    drifted: bool,
    disrupted_taint: bool,
    do_not_disrupt: bool,
}

fn node(name: &str, pool: &str, o: NodeOpts) -> String {
    let labels = format!(
        r#""kubernetes.io/hostname": "{name}", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m-4x", "topology.kubernetes.io/zone": "test-zone-a", "karpenter.sh/capacity-type": "on-demand", "karpenter.k8s.aws/instance-family": "m", "karpenter.sh/nodepool": "{pool}", "karpenter.sh/initialized": "true""#
    );
    let res = r#"{"cpu": "4", "memory": "16Gi", "pods": "110"}"#;
    let taints = if o.disrupted_taint {
        r#", "spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}"#
    } else {
        ""
    };
    let ann = if o.do_not_disrupt { r#", "annotations": {"karpenter.sh/do-not-disrupt": "true"}"# } else { "" };
    let drift = if o.drifted {
        r#", {"type": "Drifted", "status": "True", "lastTransitionTime": "2026-01-01T06:00:00Z", "reason": "NodePoolDrifted", "message": ""}"#
    } else {
        ""
    };
    format!(
        r#"{{"apiVersion": "v1", "kind": "Node", "metadata": {{"name": "{name}", "labels": {{{labels}}}{ann}}}{taints}, "status": {{"allocatable": {res}, "capacity": {res}}}}}
---
{{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {{"name": "claim-{name}", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {{{labels}}}}}, "spec": {{"nodeClassRef": {{"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}, "requirements": []}}, "status": {{"nodeName": "{name}", "providerID": "aws:///test-zone-a/i-{name}", "capacity": {res}, "allocatable": {res}, "conditions": [{{"type": "Launched", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Launched", "message": ""}}, {{"type": "Registered", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Registered", "message": ""}}, {{"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:05:00Z", "reason": "Initialized", "message": ""}}{drift}]}}}}"#
    )
}

fn pod(name: &str, node: &str, owner: &str, cost: Option<&str>) -> String {
    let ann = cost.map_or(String::new(), |c| {
        format!(r#", "annotations": {{"controller.kubernetes.io/pod-deletion-cost": "{c}"}}"#)
    });
    format!(
        r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}", "namespace": "default"{ann}, "ownerReferences": [{{"apiVersion": "apps/v1", "kind": "{owner}", "name": "x", "uid": "u-{owner}"}}]}}, "spec": {{"containers": [{{"name": "c", "image": "x", "resources": {{"requests": {{"cpu": "100m", "memory": "128Mi"}}}}}}], "nodeName": "{node}"}}, "status": {{"phase": "Running", "startTime": "2026-01-01T00:00:00Z", "conditions": [{{"type": "Ready", "status": "True"}}]}}}}"#
    )
}

fn ranking(docs: &[String]) -> Vec<karpenter_disruption::deletion_cost::RankedNode> {
    let objects = load_str(&docs.join("\n---\n"), "input.yaml").expect("manifests load");
    let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
    let catalogue = common::catalogue();
    let pools = common::pools(&snapshot, &catalogue);
    let now: DateTime<Utc> = NOW.parse().unwrap();
    rank(&snapshot, &pools, &karpenter_testing::vocabulary::aws(), now, &DisruptionOptions::default())
}

fn groups(r: &[karpenter_disruption::deletion_cost::RankedNode]) -> Vec<(&str, Group, Option<i32>)> {
    r.iter().map(|n| (n.node.as_str(), n.group, n.cost)).collect()
}

#[test]
fn groups_order_and_ranks() {
    let docs = vec![
        pool("default", "100%", "0s"),
        pool("never", "100%", "Never"),
        // Disruptable: c-two has 2 pods, c-one 1 pod: fewer pods first.
        node("c-two", "default", NodeOpts::default()),
        pod("c-two-a", "c-two", "ReplicaSet", None),
        pod("c-two-b", "c-two", "ReplicaSet", None),
        node("c-one", "default", NodeOpts::default()),
        pod("c-one-a", "c-one", "ReplicaSet", None),
        // Drifted: ranked before every disruptable node.
        node("drifted", "default", NodeOpts { drifted: true, ..Default::default() }),
        pod("drifted-a", "drifted", "ReplicaSet", None),
        pod("drifted-b", "drifted", "ReplicaSet", None),
        pod("drifted-c", "drifted", "ReplicaSet", None),
        // Already being disrupted.
        node("tainted", "default", NodeOpts { disrupted_taint: true, ..Default::default() }),
        pod("tainted-a", "tainted", "StatefulSet", None),
        // Not disruptable: a StatefulSet pod, do-not-disrupt node, consolidateAfter Never.
        node("sts", "default", NodeOpts::default()),
        pod("sts-a", "sts", "StatefulSet", Some("5")),
        node("dnd", "default", NodeOpts { do_not_disrupt: true, ..Default::default() }),
        pod("dnd-a", "dnd", "ReplicaSet", None),
        node("never-1", "never", NodeOpts::default()),
        pod("never-a", "never-1", "ReplicaSet", None),
        // DaemonSet pods are never written and do not count as pods that would move.
        pod("ds-on-c-one", "c-one", "DaemonSet", None),
    ];
    let r = ranking(&docs);
    assert_eq!(
        groups(&r),
        vec![
            ("tainted", Group::Disrupted, Some(DISRUPTED_COST)),
            ("drifted", Group::Drifted, Some(-3)),
            ("c-one", Group::Disruptable, Some(-2)),
            ("c-two", Group::Disruptable, Some(-1)),
            ("dnd", Group::NotDisruptable, None),
            ("never-1", Group::NotDisruptable, None),
            ("sts", Group::NotDisruptable, None),
        ]
    );
    let want = desired(&r);
    assert_eq!(want.get("default/drifted-b"), Some(&Some(-3)), "every pod gets its node's rank");
    assert_eq!(want.get("default/c-two-b"), Some(&Some(-1)));
    assert_eq!(want.get("default/tainted-a"), Some(&Some(i32::MIN)));
    assert!(!want.contains_key("default/ds-on-c-one"), "DaemonSet pods are left alone");

    let p = plan(&r, 50);
    let by_pod: BTreeMap<String, Option<i32>> =
        p.patches.iter().map(|x| (format!("{}/{}", x.namespace, x.name), x.cost)).collect();
    assert_eq!(by_pod.get("default/sts-a"), Some(&None), "a not-disruptable pod loses its annotation");
    assert!(!by_pod.contains_key("default/dnd-a"), "no annotation and none wanted: nothing to write");
    assert_eq!(p.unchanged, 2, "dnd-a and never-a already hold no annotation");
    assert_eq!(p.patches.len(), 8);
}

#[test]
fn budgets_bound_ranked_nodes() {
    // One node of three may be disrupted: the first in order is ranked, the other two are not disruptable.
    let docs = vec![
        pool("default", "1", "0s"),
        node("a", "default", NodeOpts::default()),
        pod("a-1", "a", "ReplicaSet", None),
        pod("a-2", "a", "ReplicaSet", None),
        node("b", "default", NodeOpts::default()),
        pod("b-1", "b", "ReplicaSet", None),
        node("c", "default", NodeOpts::default()),
    ];
    let r = ranking(&docs);
    assert_eq!(
        groups(&r),
        vec![
            ("c", Group::Disruptable, Some(-1)),
            ("a", Group::NotDisruptable, None),
            ("b", Group::NotDisruptable, None),
        ]
    );
}

#[test]
fn plan_writes_only_changes_and_caps_nodes() {
    let mut docs = vec![pool("default", "100%", "0s")];
    for i in 0..5 {
        docs.push(node(&format!("n{i}"), "default", NodeOpts::default()));
        // Pods on n0 already hold n0's rank (-5).
        let cost = (i == 0).then_some("-5");
        docs.push(pod(&format!("p{i}"), &format!("n{i}"), "ReplicaSet", cost));
    }
    docs.push(node("gone", "default", NodeOpts { disrupted_taint: true, ..Default::default() }));
    docs.push(pod("g", "gone", "ReplicaSet", None));
    let r = ranking(&docs);
    let p = plan(&r, 2);
    assert_eq!(p.unchanged, 1, "n0's pod holds its value");
    assert_eq!(
        p.patches,
        vec![
            PodPatch { namespace: "default".into(), name: "g".into(), cost: Some(i32::MIN) },
            PodPatch { namespace: "default".into(), name: "p1".into(), cost: Some(-4) },
            PodPatch { namespace: "default".into(), name: "p2".into(), cost: Some(-3) },
        ],
        "the disrupted node is outside the cap; unchanged nodes do not count against it"
    );
    assert_eq!(p.deferred_nodes, 2);
}
