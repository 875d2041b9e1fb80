//! The CapacityBuffer controller (gate `CapacityBuffer`): resolves every buffer of the
//! `buffer.x-k8s.io/active-capacity` strategy against the PodTemplates and workloads in the cluster state
//! ([`karpenter_api::capacitybuffer::resolve`]) and writes its status: `replicas`, `podTemplateRef`,
//! `ReadyForProvisioning`, and `Provisioning` from where the last provisioning pass put its virtual pods
//! ([`ClusterState::buffer_placement`](crate::state::ClusterState::buffer_placement)), with `replicas` capped by
//! the namespace's ResourceQuotas and `LimitedByQuotas` saying so
//! ([`karpenter_api::capacitybuffer::quota`]). A buffer that does not
//! resolve gets a Warning event naming why. Buffers of other strategies are left alone (another autoscaler's).
//!
//! One reconcile looks at every buffer: it runs when the state records a change to a buffer, a PodTemplate, a
//! Deployment, StatefulSet or ReplicaSet, a ResourceQuota, or a buffer's placement, and every [`RESYNC`]. The status is written
//! only when it changes, with the `resourceVersion` it was computed from; a conflict (someone wrote meanwhile)
//! is retried quietly after [`CONFLICT_RETRY`](crate::kube_util::CONFLICT_RETRY).

use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceQuota;
use karpenter_api::capacitybuffer::quota::QuotaAllocator;
use karpenter_api::capacitybuffer::{
    ACTIVE_CAPACITY, CapacityBuffer, CapacityBufferStatus, LocalObjectRef, conditions, resolution_status,
};
use karpenter_api::condition::{ConditionStatus, remove_condition};
use karpenter_api::set_condition;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::events::Event;
use crate::kube_util::{CONFLICT_RETRY, is_write_conflict};
use crate::state::BufferPlacement;

/// The controller's name (logs, metrics).
pub const CONTROLLER: &str = "capacitybuffer";
/// How often every buffer is looked at again without a change.
pub const RESYNC: Duration = Duration::from_secs(30);
/// The pause after a failed write before the next reconcile.
pub const ERROR_BACKOFF: Duration = Duration::from_secs(5);

/// What one reconcile did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Buffers whose status was written.
    pub written: Vec<String>,
    /// Buffers whose write conflicted (retried by the next reconcile).
    pub conflicts: Vec<String>,
}

/// See the module docs.
#[derive(Debug)]
pub struct CapacityBufferController {
    ctx: ControllerContext,
}

/// The `Provisioning` condition of a buffer: not ready, empty, or where its virtual pods went.
fn provisioning_condition(
    ready: bool,
    replicas: i32,
    placement: Option<BufferPlacement>,
) -> (ConditionStatus, &'static str, String) {
    if !ready {
        return (
            ConditionStatus::False,
            conditions::REASON_NOT_READY_FOR_PROVISIONING,
            "the buffer is not ready for provisioning".into(),
        );
    }
    if replicas == 0 {
        return (ConditionStatus::False, conditions::REASON_BUFFER_EMPTY, "the buffer resolved to 0 replicas".into());
    }
    let Some(p) = placement else {
        return (
            ConditionStatus::Unknown,
            conditions::REASON_REQUIRES_NEW_CAPACITY,
            "waiting for a provisioning pass".into(),
        );
    };
    if p.unschedulable > 0 {
        let message = format!("{} of {replicas} virtual pods fit no node nor any NodePool", p.unschedulable);
        return (ConditionStatus::False, conditions::REASON_REQUIRES_NEW_CAPACITY, message);
    }
    if p.new > 0 {
        let message = format!("{} of {replicas} virtual pods need new NodeClaims", p.new);
        return (ConditionStatus::True, conditions::REASON_REQUIRES_NEW_CAPACITY, message);
    }
    (
        ConditionStatus::True,
        conditions::REASON_FITS_EXISTING_CAPACITY,
        format!("{replicas} virtual pods fit existing capacity"),
    )
}

impl CapacityBufferController {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone() }
    }

    /// The status `buffer` should have now, and whether it is not ready (for the Warning event). `quotas` caps
    /// the replicas and remembers what this buffer takes of them.
    fn desired(
        &self,
        buffer: &CapacityBuffer,
        quotas: &mut QuotaAllocator<'_>,
    ) -> (CapacityBufferStatus, Option<(String, String)>) {
        let now = self.ctx.clock().now();
        let generation = buffer.metadata.generation;
        let resolved = self.ctx.state.resolve_buffer(buffer);
        let (mut replicas, template_ref, status, reason, message) = resolution_status(&resolved);
        let mut out = buffer.status.clone().unwrap_or_default();
        match (&resolved, replicas) {
            (Ok(r), Some(desired)) => {
                let limit = quotas.allocate(buffer.namespace_or_default(), &r.template, desired);
                replicas = Some(limit.allowed);
                let (l_status, l_reason, l_message) = limit.condition();
                let c = conditions::LIMITED_BY_QUOTAS;
                set_condition(&mut out.conditions, c, l_status, l_reason, &l_message, generation, now);
            }
            // A buffer that does not resolve asks for nothing, so no quota limits it.
            _ => {
                remove_condition(&mut out.conditions, conditions::LIMITED_BY_QUOTAS);
            }
        }
        out.replicas = replicas;
        out.pod_template_ref = template_ref.map(|name| LocalObjectRef { name });
        out.pod_template_generation = resolved.as_ref().ok().and_then(|r| r.pod_template_generation);
        set_condition(
            &mut out.conditions,
            conditions::READY_FOR_PROVISIONING,
            status,
            reason,
            &message,
            generation,
            now,
        );
        let ready = status == ConditionStatus::True;
        // The placement is of the virtual pods the previous status asked for: only meaningful while the count
        // stays the same.
        let same_count = buffer.ready_replicas() as i32 == replicas.unwrap_or(0);
        let placement = same_count.then(|| self.ctx.state.buffer_placement(&buffer.key())).flatten();
        let (p_status, p_reason, p_message) = provisioning_condition(ready, replicas.unwrap_or(0), placement);
        set_condition(&mut out.conditions, conditions::PROVISIONING, p_status, p_reason, &p_message, generation, now);
        let problem = (!ready).then(|| (reason.to_owned(), message));
        (out, problem)
    }

    /// Writes the status of every buffer of the active-capacity strategy whose status changed.
    pub async fn reconcile(&self) -> Result<Outcome, kube::Error> {
        let mut outcome = Outcome::default();
        let quota_objects = self.ctx.state.list_shared::<ResourceQuota>();
        // Buffers come in `namespace/name` order, so the quotas of a namespace are shared out in that order.
        let mut quotas = QuotaAllocator::new(quota_objects.iter().map(AsRef::as_ref));
        for buffer in self.ctx.state.list_shared::<CapacityBuffer>() {
            if buffer.spec.strategy() != ACTIVE_CAPACITY {
                continue;
            }
            let (status, problem) = self.desired(&buffer, &mut quotas);
            if buffer.status.as_ref() == Some(&status) {
                continue;
            }
            let key = buffer.key();
            let api: Api<CapacityBuffer> = Api::namespaced(self.ctx.client().clone(), buffer.namespace_or_default());
            let name = buffer.metadata.name.clone().unwrap_or_default();
            let patch = json!({
                "metadata": {"resourceVersion": buffer.metadata.resource_version},
                "status": status,
            });
            match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(written) => {
                    // The next provisioning pass sees the new replicas before the watch event arrives.
                    self.ctx.state.apply(written);
                    outcome.written.push(key.clone());
                }
                Err(kube::Error::Api(e)) if e.code == 404 => continue,
                Err(e) if is_write_conflict(&e) => {
                    tracing::debug!(controller = CONTROLLER, CapacityBuffer = %key, "status write conflicted, retrying");
                    outcome.conflicts.push(key);
                    continue;
                }
                Err(e) => return Err(e),
            }
            if let Some((reason, message)) = problem {
                tracing::warn!(controller = CONTROLLER, CapacityBuffer = %key, %reason, %message, "CapacityBuffer not ready");
                self.ctx.recorder().publish_detached(Event::warning(buffer.as_ref(), &reason, message));
            }
        }
        Ok(outcome)
    }

    /// Reconciles at start, after every change the state reports and every [`RESYNC`], until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let changed = self.ctx.state.buffers_changed();
        let passes = self.ctx.metrics.reconciler(CONTROLLER, 1);
        loop {
            let pass = passes.pass();
            let reconciled = self.reconcile().await;
            pass.finish(crate::metrics::ReconcileResult::of_pass(&reconciled));
            let wait = match reconciled {
                Ok(o) if !o.conflicts.is_empty() => CONFLICT_RETRY,
                Ok(_) => RESYNC,
                Err(e) => {
                    tracing::warn!(controller = CONTROLLER, error = %e, "writing CapacityBuffer status");
                    ERROR_BACKOFF
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = changed.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests;
