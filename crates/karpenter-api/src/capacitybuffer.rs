//! CapacityBuffer (`autoscaling.x-k8s.io/v1beta1`, alpha, gate `CapacityBuffer`): spare room ("headroom") a
//! cluster keeps for pods that do not exist yet. The API is SIG Autoscaling's (cluster-autoscaler's project owns
//! the CRD); Karpenter reads it, writes its status, and adds **virtual pods** built from the buffer's template to
//! every provisioning pass and every disruption simulation.
//!
//! This module holds the kind and its validation, the pure resolution of a buffer into a template and a replica
//! count ([`resolve`]), and the one builder of virtual pods ([`virtual_pods`]) that the operator's provisioner
//! and disruption controller and `simulate` all use.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_requirements::resources::spec_requests;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{Condition, ConditionStatus, Conditions};
use crate::crd::{KarpenterCrd, ResourceQuantity};
use crate::pod::CompactPod;
use crate::validation::{Validate, ValidationContext, Violations, key as map_key};

/// The only provisioning strategy Karpenter acts on (and the default).
pub const ACTIVE_CAPACITY: &str = "buffer.x-k8s.io/active-capacity";
/// The kinds `scalableRef` may name (all in API group `apps`).
pub const SCALABLE_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "ReplicaSet"];
/// The API group of the scalable kinds.
pub const APPS_GROUP: &str = "apps";

/// Annotations every virtual pod carries.
pub mod annotations {
    /// `"true"` on every virtual pod.
    pub const FAKE_POD: &str = "karpenter.sh/capacity-buffer-fake-pod";
    /// The buffer's name.
    pub const NAME: &str = "karpenter.sh/capacity-buffer-name";
    /// The buffer's namespace.
    pub const NAMESPACE: &str = "karpenter.sh/capacity-buffer-namespace";
}

/// Condition types and reasons of a buffer's status.
pub mod conditions {
    /// Whether the buffer resolved to a template and a replica count.
    pub const READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
    /// Where the buffer's virtual pods went in the last provisioning pass.
    pub const PROVISIONING: &str = "Provisioning";
    /// Whether quotas limit the buffer (ResourceQuotas are not consulted: never set, see docs/capacity-buffer.md).
    pub const LIMITED_BY_QUOTAS: &str = "LimitedByQuotas";

    /// `ReadyForProvisioning=True`: the buffer resolved to a pod template and a replica count.
    pub const REASON_RESOLVED: &str = "Resolved";
    /// `ReadyForProvisioning=False`: the workload the buffer's `scalableRef` names does not exist.
    pub const REASON_SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
    /// `ReadyForProvisioning=False`: the PodTemplate the buffer's `podTemplateRef` names does not exist.
    pub const REASON_POD_TEMPLATE_NOT_FOUND: &str = "PodTemplateNotFound";
    /// `ReadyForProvisioning=False`: the buffer could not be turned into pods for another reason (the message says which).
    pub const REASON_RESOLUTION_FAILED: &str = "ResolutionFailed";

    /// `Provisioning`: the buffer's virtual pods fit on existing nodes.
    pub const REASON_FITS_EXISTING_CAPACITY: &str = "FitsExistingCapacity";
    /// `Provisioning`: the buffer's virtual pods need new nodes, which Karpenter launches.
    pub const REASON_REQUIRES_NEW_CAPACITY: &str = "RequiresNewCapacity";
    /// `Provisioning`: the buffer is not resolved, so it was not considered.
    pub const REASON_NOT_READY_FOR_PROVISIONING: &str = "NotReadyForProvisioning";
    /// `Provisioning`: the buffer resolved to zero replicas.
    pub const REASON_BUFFER_EMPTY: &str = "BufferEmpty";
    /// `LimitedByQuotas`'s reason, True or False (cluster-autoscaler's).
    pub const REASON_QUOTAS_ALLOCATED: &str = "ResourceQuotasAllocated";
}

/// A reference to an object in the buffer's namespace by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LocalObjectRef {
    /// Name of the object.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A reference to a scalable workload in the buffer's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScalableRef {
    /// API group of the workload (`apps`).
    #[serde(default)]
    pub api_group: String,
    /// Kind: `Deployment`, `StatefulSet` or `ReplicaSet`.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// Name of the workload.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// CapacityBuffer spec (SIG Autoscaling's API).
// kube-derive takes one `printcolumn(...)` per column; clippy reads the repeated `type_ = ...` as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    plural = "capacitybuffers",
    singular = "capacitybuffer",
    namespaced,
    status = "CapacityBufferStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "CapacityBuffer keeps room in the cluster for pods that do not exist yet.",
    printcolumn(name = "Strategy", type_ = "string", json_path = ".spec.provisioningStrategy"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ReadyForProvisioning\")].status"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.podTemplateRef) != has(self.scalableRef)", "message": "exactly one of podTemplateRef or scalableRef must be set"},
    {"rule": "!has(self.percentage) || has(self.scalableRef)", "message": "percentage requires scalableRef"}
]))]
pub struct CapacityBufferSpec {
    /// How the buffer is provided; Karpenter acts only on `buffer.x-k8s.io/active-capacity` (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "buffer.x-k8s.io/active-capacity"))]
    pub provisioning_strategy: Option<String>,
    /// A PodTemplate in the buffer's namespace: the shape of one chunk of the buffer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A Deployment, StatefulSet or ReplicaSet whose pod template is the chunk's shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.kind in ['Deployment', 'StatefulSet', 'ReplicaSet']", "message": "kind must be Deployment, StatefulSet or ReplicaSet"}
    ]))]
    pub scalable_ref: Option<ScalableRef>,
    /// Number of chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Chunks as a percentage of the scalable workload's replicas (rounded up, at least 1; only with
    /// `scalableRef`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub percentage: Option<i32>,
    /// Caps the buffer's total requests; without `replicas` and `percentage`, as many chunks as fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, ResourceQuantity>>,
}

/// Observed state of a buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityBufferStatus {
    /// The PodTemplate the chunks are built from (the spec's `podTemplateRef`; unset for a `scalableRef`
    /// buffer, whose template is the workload's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// Number of chunks (virtual pods) the buffer resolved to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The generation of the PodTemplate read (for a `podTemplateRef` buffer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    /// `ReadyForProvisioning`, `Provisioning`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl Conditions for CapacityBufferStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

impl CapacityBufferSpec {
    /// The provisioning strategy, the default when unset.
    pub fn strategy(&self) -> &str {
        self.provisioning_strategy.as_deref().unwrap_or(ACTIVE_CAPACITY)
    }
}

impl CapacityBuffer {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        crate::meta::namespaced_key(&self.metadata)
    }

    /// The buffer's namespace (`default` when unset, as the API server would place it).
    pub fn namespace_or_default(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    /// `status.conditions`, empty when there is no status.
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
    }

    /// Whether the status says the buffer resolved (`ReadyForProvisioning=True`).
    pub fn is_ready(&self) -> bool {
        self.conditions()
            .iter()
            .any(|c| c.type_ == conditions::READY_FOR_PROVISIONING && c.status == ConditionStatus::True)
    }

    /// The number of virtual pods the status asks for: `status.replicas` of a ready buffer of the active-capacity
    /// strategy, else 0.
    pub fn ready_replicas(&self) -> u32 {
        if self.spec.strategy() != ACTIVE_CAPACITY || !self.is_ready() {
            return 0;
        }
        self.status.as_ref().and_then(|s| s.replicas).map_or(0, |r| r.max(0) as u32)
    }
}

impl Validate for CapacityBuffer {
    /// The CRD's rules.
    fn validate(&self, _ctx: &ValidationContext) -> Violations {
        let mut out = Violations::new();
        let spec = &self.spec;
        if spec.pod_template_ref.is_some() == spec.scalable_ref.is_some() {
            out.push("spec", "exactly one of podTemplateRef or scalableRef must be set");
        }
        if spec.percentage.is_some() && spec.scalable_ref.is_none() {
            out.push("spec.percentage", "percentage requires scalableRef");
        }
        if let Some(r) = &spec.scalable_ref
            && !SCALABLE_KINDS.contains(&r.kind.as_str())
        {
            out.push("spec.scalableRef.kind", "kind must be Deployment, StatefulSet or ReplicaSet");
        }
        for (path, name) in [
            ("spec.podTemplateRef.name", spec.pod_template_ref.as_ref().map(|r| &r.name)),
            ("spec.scalableRef.name", spec.scalable_ref.as_ref().map(|r| &r.name)),
        ] {
            if name.is_some_and(String::is_empty) {
                out.push(path, "must not be empty");
            }
        }
        for (path, v) in [("spec.replicas", spec.replicas), ("spec.percentage", spec.percentage)] {
            if v.is_some_and(|v| v < 0) {
                out.push(path, "must be 0 or more");
            }
        }
        for (name, q) in spec.limits.iter().flatten() {
            if let Some(e) = q.error() {
                out.push(map_key("spec.limits", name), e);
            }
        }
        out
    }
}

impl KarpenterCrd for CapacityBuffer {}

/// What a `scalableRef` names, as resolution reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Scalable {
    /// The workload's pod template.
    pub template: PodTemplateSpec,
    /// Its `spec.replicas` (Kubernetes' default 1 when unset).
    pub replicas: i32,
}

/// The objects a buffer may refer to, in the buffer's namespace (the caller's stores or input files).
pub trait BufferSources {
    /// The template of PodTemplate `namespace/name`, with the PodTemplate's generation.
    fn pod_template(&self, namespace: &str, name: &str) -> Option<(PodTemplateSpec, Option<i64>)>;
    /// The Deployment, StatefulSet or ReplicaSet `namespace/name` of `kind`.
    fn scalable(&self, namespace: &str, kind: &str, name: &str) -> Option<Scalable>;
}

/// A buffer resolved into what its virtual pods are built from.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The template of one chunk.
    pub template: PodTemplateSpec,
    /// The number of chunks.
    pub replicas: i32,
    /// The PodTemplate read, for `status.podTemplateRef` (none for a `scalableRef` buffer).
    pub pod_template_ref: Option<String>,
    /// Its generation.
    pub pod_template_generation: Option<i64>,
}

/// Why a buffer did not resolve: the `ReadyForProvisioning=False` reason and a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unresolved {
    #[error("{0}")]
    /// [`REASON_SCALABLE_REF_NOT_FOUND`](conditions::REASON_SCALABLE_REF_NOT_FOUND), with the message.
    ScalableRefNotFound(String),
    #[error("{0}")]
    /// [`REASON_POD_TEMPLATE_NOT_FOUND`](conditions::REASON_POD_TEMPLATE_NOT_FOUND), with the message.
    PodTemplateNotFound(String),
    #[error("{0}")]
    /// [`REASON_RESOLUTION_FAILED`](conditions::REASON_RESOLUTION_FAILED), with the message.
    ResolutionFailed(String),
}

impl Unresolved {
    /// The condition reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Unresolved::ScalableRefNotFound(_) => conditions::REASON_SCALABLE_REF_NOT_FOUND,
            Unresolved::PodTemplateNotFound(_) => conditions::REASON_POD_TEMPLATE_NOT_FOUND,
            Unresolved::ResolutionFailed(_) => conditions::REASON_RESOLUTION_FAILED,
        }
    }
}

/// Resolves `buffer` against `sources`: the template of one chunk and the number of chunks.
///
/// The count: `replicas`; `percentage` of the scalable workload's replicas rounded up, at least 1; the smaller
/// of the two when both are set; `limits` then caps it so the chunks' total requests stay within every limit the
/// template requests; with neither `replicas` nor `percentage`, as many chunks as `limits` allow.
pub fn resolve(buffer: &CapacityBuffer, sources: &dyn BufferSources) -> Result<Resolved, Unresolved> {
    let problems = buffer.validate(&ValidationContext::default());
    if let Some(v) = problems.iter().next() {
        return Err(Unresolved::ResolutionFailed(format!("invalid buffer: {}: {}", v.path, v.message)));
    }
    let ns = buffer.namespace_or_default();
    let spec = &buffer.spec;
    let (template, scalable_replicas, template_ref, generation) = match (&spec.pod_template_ref, &spec.scalable_ref) {
        (Some(r), _) => {
            let (t, generation) = sources
                .pod_template(ns, &r.name)
                .ok_or_else(|| Unresolved::PodTemplateNotFound(format!("PodTemplate {ns}/{} not found", r.name)))?;
            (t, None, Some(r.name.clone()), generation)
        }
        (None, Some(r)) => {
            if !r.api_group.is_empty() && r.api_group != APPS_GROUP {
                return Err(Unresolved::ResolutionFailed(format!(
                    "scalableRef apiGroup {:?} is not supported: only {APPS_GROUP} Deployments, StatefulSets and ReplicaSets",
                    r.api_group
                )));
            }
            let s = sources
                .scalable(ns, &r.kind, &r.name)
                .ok_or_else(|| Unresolved::ScalableRefNotFound(format!("{} {ns}/{} not found", r.kind, r.name)))?;
            (s.template, Some(s.replicas), None, None)
        }
        (None, None) => unreachable_refs()?,
    };
    let replicas = chunk_count(spec, scalable_replicas, &template)?;
    Ok(Resolved { template, replicas, pod_template_ref: template_ref, pod_template_generation: generation })
}

/// Validation already refused a buffer with neither reference; kept as an error rather than a panic.
fn unreachable_refs<T>() -> Result<T, Unresolved> {
    Err(Unresolved::ResolutionFailed("exactly one of podTemplateRef or scalableRef must be set".into()))
}

/// The number of chunks (see [`resolve`]).
fn chunk_count(
    spec: &CapacityBufferSpec,
    scalable_replicas: Option<i32>,
    template: &PodTemplateSpec,
) -> Result<i32, Unresolved> {
    let from_percentage = spec.percentage.zip(scalable_replicas).map(|(p, n)| {
        let n = i64::from(n.max(0));
        // Rounded up: (a + 99) / 100 for non-negative a.
        let chunks = ((n * i64::from(p.max(0)) + 99) / 100).max(1);
        i32::try_from(chunks).unwrap_or(i32::MAX)
    });
    let count = match (spec.replicas, from_percentage) {
        (Some(r), Some(p)) => Some(r.min(p)),
        (r, p) => r.or(p),
    };
    let Some(limits) = &spec.limits else {
        return count.ok_or_else(|| {
            Unresolved::ResolutionFailed("set replicas, percentage or limits to size the buffer".into())
        });
    };
    let cap = limit_cap(limits, template)?;
    match (count, cap) {
        (Some(c), Some(cap)) => Ok(c.min(cap)),
        (Some(c), None) => Ok(c),
        (None, Some(cap)) => Ok(cap),
        (None, None) => Err(Unresolved::ResolutionFailed(
            "limits cap none of the resources the template requests, and neither replicas nor percentage is set".into(),
        )),
    }
}

/// How many chunks fit `limits` (`None` when the template requests none of the limited resources).
fn limit_cap(
    limits: &BTreeMap<String, ResourceQuantity>,
    template: &PodTemplateSpec,
) -> Result<Option<i32>, Unresolved> {
    let spec = template.spec.clone().unwrap_or_default();
    let requests =
        spec_requests(&spec).map_err(|e| Unresolved::ResolutionFailed(format!("the template's requests: {e}")))?;
    let mut cap: Option<i128> = None;
    for (name, limit) in limits {
        let limit = limit.parse().map_err(|e| Unresolved::ResolutionFailed(format!("limits[{name}]: {e}")))?.as_nanos();
        let per_chunk = requests.get(name).map_or(0, |q| q.as_nanos());
        if per_chunk <= 0 {
            continue;
        }
        let fits = (limit.max(0)) / per_chunk;
        cap = Some(cap.map_or(fits, |c| c.min(fits)));
    }
    Ok(cap.map(|c| i32::try_from(c).unwrap_or(i32::MAX)))
}

/// The status a resolution gives: `replicas`, `podTemplateRef` and the `ReadyForProvisioning` condition's
/// status, reason and message.
pub fn resolution_status(
    result: &Result<Resolved, Unresolved>,
) -> (Option<i32>, Option<String>, ConditionStatus, &'static str, String) {
    match result {
        Ok(r) => (
            Some(r.replicas),
            r.pod_template_ref.clone(),
            ConditionStatus::True,
            conditions::REASON_RESOLVED,
            format!("resolved to {} replicas", r.replicas),
        ),
        Err(e) => (None, None, ConditionStatus::False, e.reason(), e.to_string()),
    }
}

/// Whether `pod` is a buffer's virtual pod.
pub fn is_virtual_pod(pod: &CompactPod) -> bool {
    pod.metadata.annotations.as_ref().and_then(|a| a.get(annotations::FAKE_POD)).is_some_and(|v| v == "true")
}

/// The `namespace/name` of the buffer a virtual pod belongs to (`None` for other pods).
pub fn buffer_of(pod: &CompactPod) -> Option<String> {
    if !is_virtual_pod(pod) {
        return None;
    }
    let a = pod.metadata.annotations.as_ref()?;
    Some(format!("{}/{}", a.get(annotations::NAMESPACE)?, a.get(annotations::NAME)?))
}

/// The prefix of virtual pods' names; with the buffer's name and an index it names each uniquely.
pub const VIRTUAL_POD_PREFIX: &str = "capacity-buffer";

/// The one builder of a buffer's virtual pods: `count` pods in the buffer's namespace, named
/// `capacity-buffer-<buffer>-<i>`, with the template's labels and spec (priority `i32::MIN`, no node, no
/// nominated node) and the virtual-pod annotations. They are pending (`PodScheduled=False/Unschedulable`) and
/// share one spec.
pub fn virtual_pods(buffer: &CapacityBuffer, template: &PodTemplateSpec, count: u32) -> Vec<CompactPod> {
    let ns = buffer.namespace_or_default().to_owned();
    let name = buffer.metadata.name.clone().unwrap_or_default();
    let mut spec: PodSpec = template.spec.clone().unwrap_or_default();
    spec.priority = Some(i32::MIN);
    spec.node_name = None;
    let spec = Arc::new(spec);
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
    let mut ann = BTreeMap::new();
    ann.insert(annotations::FAKE_POD.to_owned(), "true".to_owned());
    ann.insert(annotations::NAME.to_owned(), name.clone());
    ann.insert(annotations::NAMESPACE.to_owned(), ns.clone());
    let status = k8s_openapi::api::core::v1::PodStatus {
        phase: Some("Pending".into()),
        conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    (0..count)
        .map(|i| CompactPod {
            metadata: ObjectMeta {
                name: Some(format!("{VIRTUAL_POD_PREFIX}-{name}-{i}")),
                namespace: Some(ns.clone()),
                uid: Some(format!("{VIRTUAL_POD_PREFIX}/{ns}/{name}/{i}")),
                labels: labels.clone(),
                annotations: Some(ann.clone()),
                creation_timestamp: buffer.metadata.creation_timestamp.clone(),
                ..Default::default()
            },
            spec: Arc::clone(&spec),
            status: Some(status.clone()),
        })
        .collect()
}

/// Every ready buffer's virtual pods ([`CapacityBuffer::ready_replicas`] of each, from its template as
/// resolved now; a buffer that no longer resolves contributes none).
pub fn buffers_virtual_pods<'a>(
    buffers: impl IntoIterator<Item = &'a CapacityBuffer>,
    sources: &dyn BufferSources,
) -> Vec<CompactPod> {
    let mut out = Vec::new();
    for b in buffers {
        let count = b.ready_replicas();
        if count == 0 {
            continue;
        }
        if let Ok(r) = resolve(b, sources) {
            out.extend(virtual_pods(b, &r.template, count));
        }
    }
    out
}

pub mod quota;

#[cfg(test)]
mod tests;
