//! What the cluster state keeps of a watched object: the fields some decision reads, nothing else.
//!
//! A Pod as the API server sends it is ~20 KB once decoded: `managedFields` (a JSON tree per field manager),
//! every container's image, command, environment, probes and mounts, projected token volumes, and a status with
//! per-container states. Provisioning, disruption and termination read a small part of it (heap profile in
//! docs/benchmarks.md, "Controller memory"); keeping the rest cost ~20 KB of resident memory per pod, several
//! times over. [`trim`] drops it as each object arrives, so the state's stores and every snapshot built from them
//! hold only what is read.
//!
//! Kept for every kind: the whole object except `metadata.managedFields` and the
//! `kubectl.kubernetes.io/last-applied-configuration` annotation (neither is read by any controller; writes
//! never send a stored copy back: a controller acting on the state's copy patches only the fields it sets,
//! guarded by the copy's resourceVersion).
//!
//! Pods additionally keep, of each container (init containers included; ephemeral containers are dropped: they
//! have no requests), only `name`, `resources`, `ports` (host ports) and `restartPolicy` (sidecars); of the
//! volumes only those backed by a claim (`persistentVolumeClaim`, `ephemeral`), which is all the volume
//! topology, CSI limit and detachment checks read; of the status only `phase`, the `PodScheduled` and `Ready`
//! conditions, `nominatedNodeName` and `startTime`; and no list keeps capacity it does not use. Nodes drop
//! `status.images` (a real node lists tens of image names) and `status.nodeInfo`.

use std::any::Any;

use k8s_openapi::api::core::v1::{Container, Node, Pod, PodStatus};
use kube::Resource;

/// The annotation `kubectl apply` leaves: a full copy of the applied manifest.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what no controller reads from a watched object (see the module docs).
pub fn trim<K: Resource + Any>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    let any: &mut dyn Any = obj;
    if let Some(pod) = any.downcast_mut::<Pod>() {
        trim_pod(pod);
    } else if let Some(node) = any.downcast_mut::<Node>() {
        trim_node(node);
    }
}

fn trim_container(c: &mut Container) {
    let mut ports = c.ports.take();
    ports.as_mut().map(Vec::shrink_to_fit);
    *c = Container {
        name: std::mem::take(&mut c.name),
        resources: c.resources.take(),
        ports,
        restart_policy: c.restart_policy.take(),
        ..Container::default()
    };
}

/// The pod conditions a decision reads: `PodScheduled` (provisionable pods) and `Ready` (disruption and
/// termination).
const POD_CONDITIONS_READ: [&str; 2] = ["PodScheduled", "Ready"];

fn trim_pod(pod: &mut Pod) {
    // Decoding grows each list to a capacity of 4 or more; a pod's lists are then read-only, so the spare
    // capacity (about 1 KB of a pod with two tolerations, one owner and five conditions) is given back.
    pod.metadata.owner_references.as_mut().map(Vec::shrink_to_fit);
    if let Some(spec) = pod.spec.as_mut() {
        spec.containers.iter_mut().for_each(trim_container);
        spec.containers.shrink_to_fit();
        if let Some(init) = spec.init_containers.as_mut() {
            init.iter_mut().for_each(trim_container);
            init.shrink_to_fit();
        }
        spec.ephemeral_containers = None;
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.retain(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
            volumes.shrink_to_fit();
        }
        spec.tolerations.as_mut().map(Vec::shrink_to_fit);
    }
    if let Some(status) = pod.status.take() {
        let mut conditions = status.conditions;
        if let Some(cs) = conditions.as_mut() {
            cs.retain(|c| POD_CONDITIONS_READ.contains(&c.type_.as_str()));
            cs.shrink_to_fit();
        }
        pod.status = Some(PodStatus {
            phase: status.phase,
            conditions,
            nominated_node_name: status.nominated_node_name,
            start_time: status.start_time,
            ..PodStatus::default()
        });
    }
}

fn trim_node(node: &mut Node) {
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.node_info = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerPort, PersistentVolumeClaimVolumeSource, PodCondition, Volume};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use karpenter_testing::{PodOptions, pod};

    #[test]
    fn pods_keep_what_decisions_read() {
        let mut p = pod(PodOptions {
            name: Some("web".into()),
            requests: [("cpu", "1")].into(),
            node_name: Some("n1".into()),
            pvcs: vec!["data".into()],
            ..Default::default()
        });
        p.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        p.metadata.annotations.get_or_insert_default().insert(LAST_APPLIED.into(), "{...}".into());
        p.metadata.annotations.get_or_insert_default().insert("karpenter.sh/do-not-disrupt".into(), "true".into());
        let spec = p.spec.as_mut().unwrap();
        spec.containers[0].image = Some("registry.k8s.io/pause:3.9".into());
        spec.containers[0].command = Some(vec!["/pause".into()]);
        spec.containers[0].ports = Some(vec![ContainerPort { host_port: Some(8080), ..Default::default() }]);
        spec.volumes.get_or_insert_default().push(Volume { name: "token".into(), ..Default::default() });
        spec.volumes.get_or_insert_default().push(Volume {
            name: "claim".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: "other".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        p.status.get_or_insert_default().pod_ip = Some("10.0.0.1".into());
        p.status.get_or_insert_default().phase = Some("Running".into());
        p.status.get_or_insert_default().conditions = Some(
            ["PodScheduled", "Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers"]
                .map(|t| PodCondition { type_: t.into(), status: "True".into(), ..Default::default() })
                .into(),
        );
        let requests = p.spec.as_ref().unwrap().containers[0].resources.clone();

        trim(&mut p);

        assert!(p.metadata.managed_fields.is_none());
        let annotations = p.metadata.annotations.as_ref().unwrap();
        assert!(!annotations.contains_key(LAST_APPLIED));
        assert_eq!(annotations.get("karpenter.sh/do-not-disrupt").map(String::as_str), Some("true"));
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        let c = &spec.containers[0];
        assert_eq!(c.resources, requests, "requests are what the scheduler packs");
        assert_eq!(c.ports.as_ref().unwrap()[0].host_port, Some(8080), "host ports are a scheduling constraint");
        assert!(c.image.is_none() && c.command.is_none());
        let volumes: Vec<&str> = spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        assert!(!volumes.contains(&"token"), "volumes without a claim are not read");
        assert!(volumes.contains(&"claim"));
        assert_eq!(volumes.len(), 2, "the builder's PVC volume and the added claim: {volumes:?}");
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(status.pod_ip.is_none());
        let conditions: Vec<&str> = status.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
        assert_eq!(conditions, ["PodScheduled", "Ready"]);
        let conditions = status.conditions.as_ref().unwrap();
        assert_eq!(conditions.capacity(), conditions.len(), "no spare capacity kept");
    }

    #[test]
    fn nodes_drop_images_and_node_info() {
        let mut n = karpenter_testing::node(karpenter_testing::NodeOptions {
            name: Some("n1".into()),
            allocatable: [("cpu", "4")].into(),
            ..Default::default()
        });
        let status = n.status.get_or_insert_default();
        status.images = Some(vec![Default::default()]);
        status.node_info = Some(Default::default());
        trim(&mut n);
        let status = n.status.as_ref().unwrap();
        assert!(status.images.is_none() && status.node_info.is_none());
        assert!(status.allocatable.as_ref().is_some_and(|a| a.contains_key("cpu")));
    }
}
