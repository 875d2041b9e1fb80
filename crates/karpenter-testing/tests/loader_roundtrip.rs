//! Objects from the builders, written as JSON and YAML, load back through the manifest loader unchanged: the
//! loader's strict unknown-field check has no false positives on real objects. A node class loads as the
//! provider's (an unknown object to the loader) and its strict check is its API's validation.

use karpenter_api::loader::{Object, load_str};
use karpenter_api::node_class_api::NodeClassApis;
use karpenter_api::validation::ValidationContext;
use karpenter_kwok::api::KWOK_NODE_CLASS_API;
use karpenter_kwok::testing::{KWOKNodeClassOptions, kwok_node_class};
use karpenter_testing::*;

fn documents() -> Vec<serde_json::Value> {
    let labels = map(&[("app", "web")]);
    vec![
        serde_json::to_value(node_pool(NodePoolOptions {
            requirements: vec![nodepool_requirement("karpenter.sh/capacity-type", "In", &["spot"])],
            taints: vec![karpenter_taint("a", Some("b"), TaintEffect::NoSchedule)],
            limits: [("cpu", "10")].into(),
            ..Default::default()
        })),
        serde_json::to_value(node_claim(NodeClaimOptions {
            node_pool: Some("default".into()),
            capacity: [("cpu", "2")].into(),
            launched: true,
            ..Default::default()
        })),
        serde_json::to_value(kwok_node_class(KWOKNodeClassOptions::default())),
        serde_json::to_value(unschedulable_pod(PodOptions {
            labels: labels.clone(),
            requests: [("cpu", "1")].into(),
            node_requirements: vec![requirement("kubernetes.io/arch", "In", &["amd64"])],
            topology_spread: vec![topology_spread("topology.kubernetes.io/zone", 1, &labels)],
            pod_anti_requirements: vec![pod_affinity_term("kubernetes.io/hostname", &labels)],
            owner: Some(("ReplicaSet".into(), "web-1".into())),
            ..Default::default()
        })),
        serde_json::to_value(node(NodeOptions {
            allocatable: [("cpu", "4")].into(),
            taints: vec![taint("a", None, "NoSchedule")],
            ..Default::default()
        })),
        serde_json::to_value(daemon_set(DaemonSetOptions::default())),
        serde_json::to_value(pod_disruption_budget(PdbOptions {
            labels,
            disruptions_allowed: Some(1),
            ..Default::default()
        })),
    ]
    .into_iter()
    .map(|r| r.expect("builders serialise"))
    .collect()
}

#[test]
fn builder_objects_load_back_from_json_and_yaml() {
    let docs = documents();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": docs});
    let loaded = load_str(&list.to_string(), "objects.json").unwrap_or_else(|e| panic!("{e}"));
    let kinds: Vec<&str> = loaded.iter().map(|l| l.object.kind()).collect();
    assert_eq!(kinds, ["NodePool", "NodeClaim", "KWOKNodeClass", "Pod", "Node", "DaemonSet", "PodDisruptionBudget"]);
    let unknown: Vec<&str> =
        loaded.iter().filter(|l| matches!(l.object, Object::Unknown(_))).map(|l| l.object.kind()).collect();
    assert_eq!(unknown, ["KWOKNodeClass"], "only the provider's node class is foreign to the loader");
    let kwok = NodeClassApis::none().with(&KWOK_NODE_CLASS_API);
    let violations = loaded[2]
        .object
        .validate_with(&ValidationContext::new(karpenter_kwok::labels::provider_labels()), &kwok)
        .expect("validated");
    assert!(violations.is_empty(), "{violations:?}");

    let yaml: String =
        docs.iter().map(|d| format!("---\n{}", serde_saphyr::to_string(d).expect("YAML rendering"))).collect();
    let from_yaml = load_str(&yaml, "objects.yaml").unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(from_yaml.len(), docs.len());
    for (l, doc) in from_yaml.iter().zip(&docs) {
        let Object::NodePool(pool) = &l.object else { continue };
        assert_eq!(&serde_json::to_value(pool).unwrap(), doc);
    }
}
