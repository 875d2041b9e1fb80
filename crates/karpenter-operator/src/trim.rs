//! What the cluster state keeps of a watched object: the fields some decision reads, nothing else.
//!
//! Objects as the API server sends them carry much that no controller reads. [`trim`] drops it as each object
//! arrives, so the state's stores and every snapshot built from them hold only what is read (heap profile in
//! docs/benchmarks.md, "Controller memory").
//!
//! Kept for every kind: the whole object except `metadata.managedFields` and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation (neither is read by any controller; writes
//! never send a stored copy back: a controller acting on the state's copy patches only the fields it sets,
//! guarded by the copy's resourceVersion). Nodes drop `status.images` (a real node lists tens of image names)
//! and all of `status.nodeInfo` but `bootID` (node repair's reboot compares it). Pods are trimmed further as they are decoded: the state keeps them as
//! [`karpenter_api::CompactPod`]s (what is kept is listed there).

use std::any::Any;

use k8s_openapi::api::core::v1::Node;
pub use karpenter_api::pod::LAST_APPLIED;
use kube::Resource;

/// Drops what no controller reads from a watched object (see the module docs).
pub fn trim<K: Resource + Any>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    let any: &mut dyn Any = obj;
    if let Some(node) = any.downcast_mut::<Node>() {
        trim_node(node);
    }
}

fn trim_node(node: &mut Node) {
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.node_info = status
            .node_info
            .take()
            .filter(|i| !i.boot_id.is_empty())
            .map(|i| k8s_openapi::api::core::v1::NodeSystemInfo { boot_id: i.boot_id, ..Default::default() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    #[test]
    fn nodes_drop_images_node_info_but_the_boot_id_and_managed_fields() {
        let mut n = karpenter_testing::node(karpenter_testing::NodeOptions {
            name: Some("n1".into()),
            allocatable: [("cpu", "4")].into(),
            ..Default::default()
        });
        n.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        n.metadata.annotations.get_or_insert_default().insert(LAST_APPLIED.into(), "{...}".into());
        let status = n.status.get_or_insert_default();
        status.images = Some(vec![Default::default()]);
        status.node_info = Some(k8s_openapi::api::core::v1::NodeSystemInfo {
            boot_id: "b-1".into(),
            kernel_version: "6.1".into(),
            ..Default::default()
        });
        trim(&mut n);
        assert!(n.metadata.managed_fields.is_none());
        assert!(!n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(LAST_APPLIED)));
        let status = n.status.as_ref().unwrap();
        assert!(status.images.is_none());
        let info = status.node_info.as_ref().expect("the boot id stays");
        assert_eq!((info.boot_id.as_str(), info.kernel_version.as_str()), ("b-1", ""));
        assert!(status.allocatable.as_ref().is_some_and(|a| a.contains_key("cpu")));
    }
}
