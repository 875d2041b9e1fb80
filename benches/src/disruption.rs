//! The disruption benches' cluster: N nodes of one instance type with 30 pods each (70 % full, 30 %
//! underutilized), one NodePool, optionally thousands of pending pods. Shared by the `disruption` criterion bench
//! and the `pass_memory` heap figures.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use karpenter_api::{CompactPod, IntoSharedPod, NodeClaim, NodePool};
use karpenter_kwok::catalogue as kwok;
use karpenter_requirements::{InstanceType, ResourceList};
use karpenter_scheduler::{ClusterSnapshot, NodeClaimInfo, NodeInfo};
use serde_json::json;

/// A catalogue and the instance type every node of the cluster runs.
#[derive(Debug)]
pub struct Case {
    pub name: &'static str,
    pub instance_types: Vec<InstanceType>,
    pub node_type: &'static str,
    /// Zones where `node_type` has an available on-demand offering (nodes are spread over them).
    pub zones: Vec<String>,
}

pub fn on_demand_zones(its: &[InstanceType], node_type: &str) -> Vec<String> {
    let mut zones: Vec<String> = its
        .iter()
        .filter(|t| t.name == node_type)
        .flat_map(|t| t.offerings.iter())
        .filter(|o| o.available && o.capacity_type() == Some("on-demand"))
        .filter_map(|o| o.zone().map(str::to_owned))
        .collect();
    zones.sort();
    zones.dedup();
    zones
}

/// The kwok catalogue, nodes of `s-16x-amd64-linux`.
pub fn kwok_case() -> Case {
    let instance_types = kwok::catalogue();
    let node_type = "s-16x-amd64-linux";
    let zones = on_demand_zones(&instance_types, node_type);
    Case { name: "kwok", instance_types, node_type, zones }
}

/// The pass's time: every NodeClaim of [`cluster`] is older than any consolidateAfter.
pub fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z").map(|t| t.with_timezone(&Utc)).unwrap_or_default()
}

/// The one NodePool `default` (on-demand, linux, amd64, budget 100 %) with `extra` requirements added (e.g. the
/// `memory-50k` perf case's `karpenter.kwok.sh/instance-cpu Lt 17`).
pub fn pool(extra: &[serde_json::Value]) -> NodePool {
    let mut requirements = vec![
        json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}),
        json!({"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}),
        json!({"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}),
    ];
    requirements.extend(extra.iter().cloned());
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
            "requirements": requirements}},
            "disruption": {"budgets": [{"nodes": "100%"}]}}
    }))
    .expect("pool")
}

/// `n` nodes with 30 pods each; nodes with `i % 10 < 3` (30 %) are underutilized.
pub fn cluster(n: usize, case: &Case, pool: NodePool) -> ClusterSnapshot {
    let it = case.instance_types.iter().find(|t| t.name == case.node_type).expect("node type in the catalogue");
    let allocatable: ResourceList = it.allocatable().clone();
    let claim_template: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}, "requirements": []},
        "status": {"conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:05:00Z", "reason": "Initialized", "message": ""}]}
    }))
    .expect("claim");
    let pod_template = |cpu: &str, mem: &str| -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "x", "namespace": "default", "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"}]},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]},
            "status": {"phase": "Running"}
        }))
        .expect("pod")
    };
    let full = pod_template("500m", "2Gi");
    let light = pod_template("100m", "256Mi");
    let mut s = ClusterSnapshot { node_pools: vec![pool], ..Default::default() };
    for i in 0..n {
        let name = format!("node-{i:05}");
        let zone = case.zones[i % case.zones.len()].as_str();
        let labels: BTreeMap<String, String> = [
            ("kubernetes.io/hostname", name.as_str()),
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/os", "linux"),
            ("node.kubernetes.io/instance-type", case.node_type),
            ("topology.kubernetes.io/zone", zone),
            ("karpenter.sh/capacity-type", "on-demand"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.sh/initialized", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let claim_name = format!("claim-{i:05}");
        let mut claim = claim_template.clone();
        claim.metadata.name = Some(claim_name.clone());
        claim.metadata.labels = Some(labels.clone());
        s.node_claims.push(NodeClaimInfo {
            name: claim_name.clone(),
            node_pool: Some("default".into()),
            node_name: Some(name.clone()),
            in_flight: false,
            claim: claim.into(),
            capacity: it.capacity().clone(),
            allocatable: allocatable.clone(),
            marked_for_deletion: false,
            nominated: false,
        });
        s.nodes.push(NodeInfo {
            name: name.clone(),
            labels,
            allocatable: allocatable.clone(),
            capacity: it.capacity().clone(),
            node_pool: Some("default".into()),
            node_claim: Some(claim_name),
            initialized: true,
            ..Default::default()
        });
        let template = if i % 10 < 3 { &light } else { &full };
        for j in 0..30 {
            let mut p = template.clone();
            p.metadata.name = Some(format!("p-{i:05}-{j:02}"));
            p.metadata.uid = Some(format!("uid-{i}-{j}"));
            if let Some(spec) = p.spec.as_mut() {
                spec.node_name = Some(name.clone());
            }
            s.bound_pods.push(p.into_shared());
        }
    }
    s.sort();
    s
}

/// `n` pending pods of 1.5 vCPU / 1 GiB added to `snapshot` (a large scale-out under way).
pub fn with_pending(mut snapshot: ClusterSnapshot, n: usize) -> ClusterSnapshot {
    let template: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "x", "namespace": "default", "labels": {"app": "batch"}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .expect("pod");
    // One spec shared by every replica, as the controller's state shares equal specs.
    let template = CompactPod::from(template);
    for i in 0..n {
        let mut p = template.clone();
        p.metadata.name = Some(format!("pending-{i:05}"));
        p.metadata.uid = Some(format!("uid-pending-{i}"));
        snapshot.pending_pods.push(p.into_shared());
    }
    snapshot.sort();
    snapshot
}
