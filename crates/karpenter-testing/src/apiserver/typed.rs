//! Built-in kinds are decoded into their `k8s-openapi` types and encoded back, as the real server decodes into
//! its Go types: a field of the wrong type or a missing required field is rejected, and unknown fields are
//! dropped (the real server prunes them, with a warning).

use k8s_openapi::api::apps::v1::{DaemonSet, ReplicaSet, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Event as CoreEvent, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod,
    ReplicationController, Service,
};
use k8s_openapi::api::events::v1::Event as EventsEvent;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn round_trip<T: Serialize + DeserializeOwned>(v: Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(v).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

/// The object as the real server would store it, or why it cannot be decoded. Custom resources pass through.
pub(crate) fn normalize(group: &str, plural: &str, obj: Value) -> Result<Value, String> {
    match (group, plural) {
        ("", "pods") => round_trip::<Pod>(obj),
        ("", "nodes") => round_trip::<Node>(obj),
        ("", "namespaces") => round_trip::<Namespace>(obj),
        ("", "events") => round_trip::<CoreEvent>(obj),
        ("", "configmaps") => round_trip::<ConfigMap>(obj),
        ("", "persistentvolumeclaims") => round_trip::<PersistentVolumeClaim>(obj),
        ("", "persistentvolumes") => round_trip::<PersistentVolume>(obj),
        ("apps", "daemonsets") => round_trip::<DaemonSet>(obj),
        ("", "services") => round_trip::<Service>(obj),
        ("", "replicationcontrollers") => round_trip::<ReplicationController>(obj),
        ("apps", "replicasets") => round_trip::<ReplicaSet>(obj),
        ("apps", "statefulsets") => round_trip::<StatefulSet>(obj),
        ("policy", "poddisruptionbudgets") => round_trip::<PodDisruptionBudget>(obj),
        ("storage.k8s.io", "storageclasses") => round_trip::<StorageClass>(obj),
        ("storage.k8s.io", "csinodes") => round_trip::<CSINode>(obj),
        ("storage.k8s.io", "volumeattachments") => round_trip::<VolumeAttachment>(obj),
        ("coordination.k8s.io", "leases") => round_trip::<Lease>(obj),
        ("events.k8s.io", "events") => round_trip::<EventsEvent>(obj),
        ("apiextensions.k8s.io", "customresourcedefinitions") => round_trip::<CustomResourceDefinition>(obj),
        _ => Ok(obj),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn built_ins_are_decoded_and_pruned() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}, "bogus": 1});
        let out = normalize("", "pods", pod).expect("valid");
        assert!(out.get("bogus").is_none());
        assert_eq!(out["spec"]["containers"][0]["name"], "c");
        let bad = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": "nope"}});
        assert!(normalize("", "pods", bad).is_err());
        let custom = json!({"spec": {"anything": [1, 2]}, "extra": true});
        assert_eq!(normalize("karpenter.sh", "nodepools", custom.clone()).expect("passes"), custom);
    }
}
