//! CapacityBuffers in the input (gate `CapacityBuffer`): simulate plays the buffer controller, resolving each
//! buffer against the input's PodTemplates and workloads (capped by its ResourceQuotas), then adds the ready buffers' virtual pods to the pending
//! pods with the one builder the controller uses ([`karpenter_api::capacitybuffer::buffers_virtual_pods`]).
//! Virtual pods are placed and can launch nodes, but are never bound (over simulated time they stay pending and
//! are placed again by every pass); reports show them as `buffer <namespace>/<name>: N virtual pods`.

use std::sync::Arc;

use karpenter_api::capacitybuffer::quota::QuotaAllocator;
use karpenter_api::capacitybuffer::{
    ACTIVE_CAPACITY, CapacityBuffer, CapacityBufferStatus, buffers_virtual_pods, conditions, resolution_status, resolve,
};
use karpenter_api::condition::ConditionStatus;
use karpenter_api::loader::{Loaded, LoadedSources, Object};
use karpenter_api::set_condition;
use karpenter_scheduler::ClusterSnapshot;

/// Adds the virtual pods of the input's ready buffers to `snapshot`'s pending pods (with `enabled`, the
/// `CapacityBuffer` gate), with a note per buffer saying what it added or why it added nothing.
pub fn add(snapshot: &mut ClusterSnapshot, objects: &[Loaded], enabled: bool, notes: &mut Vec<String>) {
    let buffers: Vec<&CapacityBuffer> = objects
        .iter()
        .filter_map(|l| match &l.object {
            Object::CapacityBuffer(b) => Some(b.as_ref()),
            _ => None,
        })
        .collect();
    if buffers.is_empty() {
        return;
    }
    if !enabled {
        notes.push(format!(
            "{} CapacityBuffer(s) ignored: the CapacityBuffer feature gate is off (--feature-gates CapacityBuffer=true)",
            buffers.len()
        ));
        return;
    }
    let sources = LoadedSources(objects);
    let quota_objects = objects.iter().filter_map(|l| match &l.object {
        Object::ResourceQuota(q) => Some(q.as_ref()),
        _ => None,
    });
    let mut quotas = QuotaAllocator::new(quota_objects);
    // The controller's order: quotas are shared out by `namespace/name`.
    let mut buffers = buffers;
    buffers.sort_by_key(|b| b.key());
    let mut resolved: Vec<CapacityBuffer> = Vec::new();
    for b in buffers {
        let key = b.key();
        if b.spec.strategy() != ACTIVE_CAPACITY {
            notes.push(format!(
                "CapacityBuffer {key}: provisioning strategy {} is not Karpenter's, ignored",
                b.spec.strategy()
            ));
            continue;
        }
        let result = resolve(b, &sources);
        let (mut replicas, _, status, reason, message) = resolution_status(&result);
        match &result {
            Ok(r) => {
                let limit = quotas.allocate(b.namespace_or_default(), &r.template, r.replicas);
                replicas = Some(limit.allowed);
                match limit.condition() {
                    (ConditionStatus::True, _, why) => {
                        notes.push(format!("CapacityBuffer {key}: {} virtual pods ({why})", limit.allowed))
                    }
                    _ => notes.push(format!("CapacityBuffer {key}: {} virtual pods", limit.allowed)),
                }
            }
            Err(_) => {
                notes.push(format!("CapacityBuffer {key} is not ready ({reason}): {message}; it adds no virtual pods"))
            }
        }
        // The status the controller would write; the builder reads it.
        let mut b = b.clone();
        let mut st = CapacityBufferStatus { replicas, ..Default::default() };
        set_condition(
            &mut st.conditions,
            conditions::READY_FOR_PROVISIONING,
            status,
            reason,
            &message,
            None,
            chrono::DateTime::UNIX_EPOCH,
        );
        b.status = Some(st);
        resolved.push(b);
    }
    let pods = buffers_virtual_pods(resolved.iter(), &sources);
    snapshot.pending_pods.extend(pods.into_iter().map(Arc::new));
}

/// Whether a pending pod is a buffer's virtual pod (never bound, not counted as pending in reports).
pub fn is_virtual(pod: &karpenter_api::CompactPod) -> bool {
    karpenter_api::capacitybuffer::is_virtual_pod(pod)
}
