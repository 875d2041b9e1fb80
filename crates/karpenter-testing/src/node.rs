//! Node builders.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::names::{next_name, uid_for};
use crate::pod::k8s_time;
use crate::resources::Resources;

/// Everything a test usually sets on a node. See [`node`].
#[derive(Clone, Debug, Default)]
pub struct NodeOptions {
    /// Default: `node-N` (a per-thread counter).
    pub name: Option<String>,
    /// `metadata.labels` (well-known labels such as zone and instance type go here).
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `metadata.finalizers`, e.g. Karpenter's termination finalizer.
    pub finalizers: Vec<String>,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `status.allocatable`: what pods may request on the node.
    pub allocatable: Resources,
    /// Default: the allocatable resources.
    pub capacity: Resources,
    /// `spec.providerID`: how a node is matched to its NodeClaim; unset when `None`.
    pub provider_id: Option<String>,
    /// The `Ready` condition's status; `None` means ready (`True`).
    pub ready: Option<bool>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `metadata.creationTimestamp`; unset when `None`.
    pub creation_timestamp: Option<DateTime<Utc>>,
    /// `metadata.deletionTimestamp`: set, the node is being deleted.
    pub deletion_timestamp: Option<DateTime<Utc>>,
}

/// A taint: `taint("gpu", Some("true"), "NoSchedule")`.
pub fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint { key: key.to_string(), value: value.map(str::to_string), effect: effect.to_string(), time_added: None }
}

/// A node built from `o`. The `Ready` condition is `True` unless `ready: Some(false)`.
pub fn node(o: NodeOptions) -> Node {
    let name = o.name.clone().unwrap_or_else(|| next_name("node"));
    let capacity = if o.capacity.is_empty() { o.allocatable.clone() } else { o.capacity.clone() };
    let ready = o.ready.unwrap_or(true);
    let mut labels = o.labels.clone();
    labels.entry("kubernetes.io/hostname".to_string()).or_insert_with(|| name.clone());
    Node {
        metadata: ObjectMeta {
            uid: Some(uid_for("Node", "", &name)),
            name: Some(name),
            labels: Some(labels),
            annotations: (!o.annotations.is_empty()).then(|| o.annotations.clone()),
            finalizers: (!o.finalizers.is_empty()).then(|| o.finalizers.clone()),
            creation_timestamp: o.creation_timestamp.and_then(k8s_time),
            deletion_timestamp: o.deletion_timestamp.and_then(k8s_time),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: o.provider_id.clone(),
            taints: (!o.taints.is_empty()).then(|| o.taints.clone()),
            unschedulable: o.unschedulable.then_some(true),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            allocatable: o.allocatable.to_option(),
            capacity: capacity.to_option(),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_string(),
                status: if ready { "True" } else { "False" }.to_string(),
                reason: Some(if ready { "KubeletReady" } else { "KubeletNotReady" }.to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::reset_names;
    use crate::resources::map;

    #[test]
    fn node_carries_requested_fields() {
        reset_names();
        let n = node(NodeOptions {
            labels: map(&[("kubernetes.io/arch", "amd64")]),
            taints: vec![taint("gpu", Some("true"), "NoSchedule")],
            allocatable: [("cpu", "3800m"), ("pods", "110")].into(),
            capacity: [("cpu", "4")].into(),
            provider_id: Some("aws:///us-west-2a/i-0123".into()),
            unschedulable: true,
            finalizers: vec!["karpenter.sh/termination".into()],
            ..Default::default()
        });
        assert_eq!(n.metadata.name.as_deref(), Some("node-1"));
        let labels = n.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "node-1");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        let spec = n.spec.as_ref().unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("aws:///us-west-2a/i-0123"));
        assert_eq!(spec.unschedulable, Some(true));
        assert_eq!(spec.taints.as_ref().unwrap()[0].effect, "NoSchedule");
        let status = n.status.as_ref().unwrap();
        assert_eq!(status.allocatable.as_ref().unwrap()["cpu"].0, "3800m");
        assert_eq!(status.capacity.as_ref().unwrap()["cpu"].0, "4");
        assert_eq!(status.conditions.as_ref().unwrap()[0].status, "True");
    }

    #[test]
    fn capacity_defaults_to_allocatable_and_ready_can_be_false() {
        let n = node(NodeOptions {
            name: Some("n".into()),
            allocatable: [("cpu", "2")].into(),
            ready: Some(false),
            ..Default::default()
        });
        let status = n.status.unwrap();
        assert_eq!(status.capacity.unwrap()["cpu"].0, "2");
        assert_eq!(status.conditions.unwrap()[0].status, "False");
    }
}
