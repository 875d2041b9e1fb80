//! What the cluster state holds per pod, measured with a heap profiler (dhat) in a test that gates it.
//!
//! 4,000 replicas of one Deployment, as the API server sends them (managed fields, a projected token volume, five
//! conditions, container images, environment and probes), are decoded the way the state's watch decodes them and
//! recorded in a `ClusterState`: half pending, half bound to 40 nodes. The heap the state holds afterwards is
//! divided by the pod count. For comparison the same pods, trimmed the same way but held as k8s-openapi `Pod`s
//! (what the state kept before `CompactPod`), are measured too and printed.
//!
//! The ceiling: 3 KB per pod (measured 2.2 KB; k8s-openapi `Pod`s held ~7 KB). At 50,000 pods that is the
//! difference between ~110 MB and ~350 MB of the controller's memory.
//!
//! Run alone with `cargo test -p karpenter-operator --test state_memory -- --nocapture` to see the figures.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use karpenter_api::CompactPod;
use karpenter_operator::state::ClusterState;
use karpenter_testing::FakeClock;
use serde_json::{Value, json};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const PODS: usize = 4_000;
const NODES: usize = 40;
/// The ceiling on the state's heap per pod.
const MAX_BYTES_PER_POD: usize = 3 * 1024;

/// A replica of Deployment `web` as a real API server returns it (kube-apiserver 1.32, kube-scheduler and kubelet
/// have written to it).
fn replica(i: usize) -> Value {
    let node = (i % 2 == 1).then(|| format!("node-{:03}", (i / 2) % NODES));
    let scheduled = if node.is_some() {
        json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-27T09:00:00Z"})
    } else {
        json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
               "message": "0/3 nodes are available: 3 Insufficient cpu.", "lastTransitionTime": "2026-11-27T09:00:00Z"})
    };
    let name = format!("web-7d9f8c6b5d-{i:05}");
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "generateName": "web-7d9f8c6b5d-", "namespace": "default",
            "uid": format!("6f1c8a52-3b1e-4d7a-9c4e-{i:012}"), "resourceVersion": format!("{}", 100_000 + i),
            "creationTimestamp": "2026-11-27T09:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d9f8c6b5d"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f8c6b5d",
                                 "uid": "0c3d2c4e-8a7b-4b7e-9a61-5f1e2d3c4b5a", "controller": true,
                                 "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-27T09:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}}},
                              "f:spec": {"f:containers": {"k:{\"name\":\"pause\"}": {".": {}, "f:image": {}}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                 "time": "2026-11-27T09:00:05Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:phase": {}, "f:podIP": {}}}}
            ]
        },
        "spec": {
            "nodeName": node,
            "containers": [{
                "name": "pause", "image": "registry.k8s.io/pause:3.9", "imagePullPolicy": "IfNotPresent",
                "env": [{"name": "MODE", "value": "serve"}, {"name": "LOG_LEVEL", "value": "info"}],
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "volumeMounts": [{"name": "kube-api-access-abcde", "readOnly": true,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
            }],
            "volumes": [{"name": format!("kube-api-access-{i:05}"), "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
            "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ]
        },
        "status": {
            "phase": if node.is_some() { "Running" } else { "Pending" },
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": "2026-11-27T09:00:03Z"},
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-27T09:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-27T09:00:05Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-11-27T09:00:05Z"},
                scheduled
            ],
            "hostIP": "10.0.0.1", "podIP": format!("10.1.{}.{}", i / 250, i % 250), "qosClass": "Burstable",
            "startTime": "2026-11-27T09:00:01Z",
            "containerStatuses": [{"name": "pause", "ready": true, "restartCount": 0, "started": true,
                                   "image": "registry.k8s.io/pause:3.9", "imageID": "sha256:e6f1816883972d4be47bd48879a08919b96afcd344132622e4d444987919323c",
                                   "containerID": "containerd://9c4e", "state": {"running": {"startedAt": "2026-11-27T09:00:04Z"}}}]
        }
    })
}

fn live_bytes() -> usize {
    dhat::HeapStats::get().curr_bytes
}

#[test]
fn the_state_holds_a_few_kilobytes_per_replica() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let encoded: Vec<Vec<u8>> = (0..PODS).map(|i| serde_json::to_vec(&replica(i)).expect("encodes")).collect();

    // As the state keeps them: decoded as CompactPods (trimmed on decode), recorded, specs shared.
    let clock = FakeClock::new(chrono::DateTime::UNIX_EPOCH);
    let before = live_bytes();
    let state = ClusterState::new(Arc::new(clock), Duration::from_secs(20));
    for bytes in &encoded {
        let pod: CompactPod = serde_json::from_slice(bytes).expect("a pod");
        state.apply(pod);
    }
    let held = live_bytes() - before;
    let per_pod = held / PODS;

    // What the state held before: the same trimmed pods as k8s-openapi `Pod`s, each with its own spec.
    let before = live_bytes();
    let as_pods: Vec<Arc<Pod>> = encoded
        .iter()
        .map(|bytes| {
            let pod: CompactPod = serde_json::from_slice(bytes).expect("a pod");
            Arc::new(Pod::from(pod))
        })
        .collect();
    let openapi_per_pod = (live_bytes() - before) / PODS;

    println!(
        "state heap per pod: {per_pod} B as CompactPods ({PODS} replicas, {NODES} nodes); {openapi_per_pod} B as \
         trimmed k8s-openapi Pods ({:.1}x)",
        openapi_per_pod as f64 / per_pod as f64
    );
    assert_eq!(state.list_shared::<CompactPod>().len(), PODS);
    assert_eq!(as_pods.len(), PODS);
    assert!(per_pod <= MAX_BYTES_PER_POD, "{per_pod} B per pod held by the state (ceiling {MAX_BYTES_PER_POD} B)");
    assert!(
        per_pod * 2 < openapi_per_pod,
        "sharing specs should at least halve the cost: {per_pod} vs {openapi_per_pod}"
    );

    // The specs are shared: one per node for the bound replicas, one for the pending ones.
    let pods = state.list_shared::<CompactPod>();
    let mut specs: Vec<*const k8s_openapi::api::core::v1::PodSpec> =
        pods.iter().map(|p| Arc::as_ptr(&p.spec)).collect();
    specs.sort();
    specs.dedup();
    assert_eq!(specs.len(), NODES + 1, "bound replicas share a spec per node, pending ones one spec");
}
