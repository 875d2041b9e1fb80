//! CapacityBuffers (the `CapacityBuffer` gate): the buffers and what they refer to (PodTemplates, Deployments,
//! ResourceQuotas; StatefulSets and ReplicaSets share the spread watchers' stores), where each buffer's virtual
//! pods went in the last provisioning pass, and the signal that wakes the buffer controller.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec, ResourceQuota};
use karpenter_api::capacitybuffer::{BufferSources, Resolved, Scalable, Unresolved};
use karpenter_api::{CapacityBuffer, CompactPod};
use karpenter_scheduler::ClusterSnapshot;
use kube::Client;
use kube::api::Api;
use tokio_util::sync::CancellationToken;

use super::{ClusterState, Objects, Store, Tracked};

/// Where a buffer's virtual pods went in a provisioning pass (the buffer's `Provisioning` condition).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferPlacement {
    /// Placed on existing nodes or in-flight NodeClaims.
    pub existing: usize,
    /// Planned onto new NodeClaims.
    pub new: usize,
    /// Found no place.
    pub unschedulable: usize,
}

/// The buffer kinds' stores and the last pass's placements (a part of the state's objects).
#[derive(Debug, Default)]
pub(super) struct BufferObjects {
    pub(super) capacity_buffers: Store<CapacityBuffer>,
    pub(super) pod_templates: Store<PodTemplate>,
    pub(super) deployments: Store<Deployment>,
    /// ResourceQuotas cap buffers' replicas (`LimitedByQuotas`).
    pub(super) resource_quotas: Store<ResourceQuota>,
    /// Buffer `namespace/name` → where its virtual pods went in the last provisioning pass.
    placements: BTreeMap<String, BufferPlacement>,
    /// The `changes` count of the snapshot those placements were computed from.
    placements_seen: u64,
}

/// What the state handle carries for buffers (shared by its clones).
#[derive(Clone, Default)]
pub(super) struct BufferSignals {
    /// Wakes the CapacityBuffer controller ([`ClusterState::buffers_changed`]).
    changed: Arc<tokio::sync::Notify>,
    /// With the `CapacityBuffer` gate: the buffer kinds must be listed before the state is synced
    /// ([`ClusterState::require_buffer_kinds`]).
    kinds_required: Arc<AtomicBool>,
}

/// The state's stores as a buffer's [`BufferSources`].
struct StoreSources<'a>(&'a Objects);

impl BufferSources for StoreSources<'_> {
    fn pod_template(&self, namespace: &str, name: &str) -> Option<(PodTemplateSpec, Option<i64>)> {
        let t = self.0.buffers.pod_templates.objects.get(&format!("{namespace}/{name}"))?;
        Some((t.template.clone().unwrap_or_default(), t.metadata.generation))
    }

    fn scalable(&self, namespace: &str, kind: &str, name: &str) -> Option<Scalable> {
        let key = format!("{namespace}/{name}");
        let (template, replicas) = match kind {
            "Deployment" => {
                let s = self.0.buffers.deployments.objects.get(&key)?.spec.clone()?;
                (s.template, s.replicas)
            }
            "StatefulSet" => {
                let s = self.0.spread.stateful_sets.objects.get(&key)?.spec.clone()?;
                (s.template, s.replicas)
            }
            "ReplicaSet" => {
                let s = self.0.spread.replica_sets.objects.get(&key)?.spec.clone()?;
                (s.template.unwrap_or_default(), s.replicas)
            }
            _ => return None,
        };
        // Kubernetes' default for an unset `spec.replicas`.
        Some(Scalable { template, replicas: replicas.unwrap_or(1) })
    }
}

impl ClusterState {
    /// With the `CapacityBuffer` gate: the state is not synced until CapacityBuffers, PodTemplates and the
    /// workloads buffers name are listed, so no pass after a restart misses the buffers (disruption would take a
    /// buffer's node for empty).
    pub fn require_buffer_kinds(&self) {
        self.buffers.kinds_required.store(true, Ordering::Relaxed);
    }

    /// The buffer kind not listed yet, when the `CapacityBuffer` gate requires them (the buffers' part of
    /// [`Self::unlisted_reason`]).
    pub(super) fn unlisted_buffer_kind(&self, o: &Objects) -> Option<String> {
        if !self.buffers.kinds_required.load(Ordering::Relaxed) {
            return None;
        }
        let buffer_kinds: [(&str, bool); 6] = [
            (CapacityBuffer::KIND, o.buffers.capacity_buffers.synced),
            (PodTemplate::KIND, o.buffers.pod_templates.synced),
            (Deployment::KIND, o.buffers.deployments.synced),
            (StatefulSet::KIND, o.spread.stateful_sets.synced),
            (ReplicaSet::KIND, o.spread.replica_sets.synced),
            (ResourceQuota::KIND, o.buffers.resource_quotas.synced),
        ];
        buffer_kinds.iter().find(|(_, synced)| !synced).map(|(kind, _)| format!("{kind}s not listed yet"))
    }

    /// Wakes the buffer controller when `K` is a kind a CapacityBuffer's status depends on.
    pub(super) fn buffer_kind_changed<K: Tracked>(&self) {
        use std::any::TypeId;
        let id = TypeId::of::<K>();
        let related = [
            TypeId::of::<CapacityBuffer>(),
            TypeId::of::<PodTemplate>(),
            TypeId::of::<Deployment>(),
            TypeId::of::<StatefulSet>(),
            TypeId::of::<ReplicaSet>(),
            TypeId::of::<ResourceQuota>(),
        ];
        if related.contains(&id) {
            self.buffers.changed.notify_one();
        }
    }

    /// Keys of the buffers whose virtual pods want another pass: those that ask for some, except a buffer whose
    /// virtual pods all fit existing capacity in the last pass when nothing in the cluster changed since (another
    /// pass would find the same; a change, such as a pod taking the room, makes it ask again).
    pub(super) fn buffers_asking(&self) -> Vec<String> {
        let o = self.read();
        let unchanged = o.changes == o.buffers.placements_seen;
        o.buffers
            .capacity_buffers
            .objects
            .values()
            .filter(|b| b.ready_replicas() > 0)
            .filter(|b| {
                let settled =
                    o.buffers.placements.get(&b.key()).is_some_and(|p| {
                        p.new == 0 && p.unschedulable == 0 && p.existing == b.ready_replicas() as usize
                    });
                !(unchanged && settled)
            })
            .map(|b| b.key())
            .collect()
    }

    /// Resolves a buffer against the stored PodTemplates and workloads.
    pub fn resolve_buffer(&self, buffer: &CapacityBuffer) -> Result<Resolved, Unresolved> {
        karpenter_api::capacitybuffer::resolve(buffer, &StoreSources(&self.read()))
    }

    /// Every ready buffer's virtual pods ([`karpenter_api::capacitybuffer::buffers_virtual_pods`], the one
    /// builder) added to `cluster`'s pending pods, as a provisioning pass and a disruption simulation see them.
    /// Returns their keys. Without the `CapacityBuffer` gate no buffer is watched and this adds none.
    pub fn add_buffer_pods(&self, cluster: &mut ClusterSnapshot) -> Vec<String> {
        let o = self.read();
        if o.buffers.capacity_buffers.objects.is_empty() {
            return Vec::new();
        }
        let pods = karpenter_api::capacitybuffer::buffers_virtual_pods(
            o.buffers.capacity_buffers.objects.values().map(AsRef::as_ref),
            &StoreSources(&o),
        );
        let keys = pods.iter().map(CompactPod::key).collect();
        cluster.pending_pods.extend(pods.into_iter().map(Arc::new));
        keys
    }

    /// Records where each buffer's virtual pods went in a provisioning pass whose snapshot was taken at `seen`
    /// ([`consolidation_state`](Self::consolidation_state) just before it; buffers without virtual pods are
    /// forgotten) and wakes the buffer controller when anything changed.
    pub fn record_buffer_placements(&self, placements: BTreeMap<String, BufferPlacement>, seen: u64) {
        let changed = {
            let mut o = self.write();
            let changed = o.buffers.placements != placements;
            o.buffers.placements = placements;
            o.buffers.placements_seen = seen;
            changed
        };
        if changed {
            self.buffers.changed.notify_one();
        }
    }

    /// Where a buffer's virtual pods went in the last provisioning pass.
    pub fn buffer_placement(&self, key: &str) -> Option<BufferPlacement> {
        self.read().buffers.placements.get(key).copied()
    }

    /// Notified when a buffer, a PodTemplate, a workload, a ResourceQuota or a buffer's placement changes.
    pub fn buffers_changed(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.buffers.changed)
    }

    /// Runs the watchers the `CapacityBuffer` gate needs (CapacityBuffers, PodTemplates, ResourceQuotas,
    /// Deployments and, unless `workloads_watched` says the spread watchers do, StatefulSets and ReplicaSets)
    /// until `shutdown`.
    pub async fn run_buffer_watchers(&self, client: Client, shutdown: CancellationToken, workloads_watched: bool) {
        let c = &client;
        let s = &shutdown;
        let workloads = async {
            if !workloads_watched {
                futures::join!(
                    self.watch::<StatefulSet>(Api::all(c.clone()), s.clone()),
                    self.watch::<ReplicaSet>(Api::all(c.clone()), s.clone()),
                );
            }
        };
        futures::join!(
            self.watch::<CapacityBuffer>(Api::all(c.clone()), s.clone()),
            self.watch::<PodTemplate>(Api::all(c.clone()), s.clone()),
            self.watch::<Deployment>(Api::all(c.clone()), s.clone()),
            self.watch::<ResourceQuota>(Api::all(c.clone()), s.clone()),
            workloads,
        );
    }
}
