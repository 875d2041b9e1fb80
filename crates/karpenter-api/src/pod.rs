//! A pod as decisions read it: [`CompactPod`], and the [`SpecInterner`] that lets identical pods share one spec.
//!
//! A `Pod` as k8s-openapi decodes it is large even when little of it is set: the struct is 2,176 bytes inline and
//! each `Container` another 2,120 (every probe, lifecycle hook and security context is an inline `Option`).
//! Trimmed of what no decision reads it was still ~8 KB per pod in the controller (heap profile in
//! docs/benchmarks.md, "memory-50k"): 50,000 pending pods were ~400 MiB before a single node existed.
//!
//! A `CompactPod` keeps the pod's metadata and status as they are (trimmed) and its spec behind an `Arc`. The
//! replicas of a Deployment, Job or ReplicaSet have equal specs (the pod's name, labels and status live outside
//! the spec), and so do the replicas a node runs (`nodeName` is part of the spec), so a [`SpecInterner`] makes
//! them share one: 50,000 replicas pending cost one spec plus ~2 KB each for metadata and status.
//!
//! What is kept (the rest is dropped on conversion, [`CompactPod::from`]): the whole metadata except
//! `managedFields` and the `kubectl.kubernetes.io/last-applied-configuration` annotation; the whole spec except,
//! of each container (init containers included; ephemeral containers are dropped: they have no requests), all
//! but `name`, `resources`, `ports` (host ports) and `restartPolicy` (sidecars), and of the volumes all but those
//! backed by a claim (`persistentVolumeClaim`, `ephemeral`), which is all the volume topology, CSI limit and
//! detachment checks read; of the status only `phase`, the `PodScheduled` and `Ready` conditions,
//! `nominatedNodeName`, `startTime` and `resourceClaimStatuses` (the claims made from the pod's claim templates).

use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Weak};
use std::time::Duration;

use chrono::{DateTime, Utc};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a pod's `karpenter.sh/do-not-disrupt` annotation asks for: `"true"`, or a Go duration (`"5m"`) of
/// protection from the pod's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoNotDisruptAnnotation {
    /// `"true"`: never disrupt the pod voluntarily.
    Always,
    /// A duration: do not disrupt the pod until this long after it started.
    For(Duration),
}

/// Parses a `karpenter.sh/do-not-disrupt` value; `None` for values that ask for nothing: invalid ones (ignored,
/// as upstream ignores them) and a zero duration.
pub fn parse_do_not_disrupt(value: &str) -> Option<DoNotDisruptAnnotation> {
    if value == "true" {
        return Some(DoNotDisruptAnnotation::Always);
    }
    crate::duration::parse_go_duration(value).ok().filter(|d| !d.is_zero()).map(DoNotDisruptAnnotation::For)
}

/// Why a `karpenter.sh/do-not-disrupt` value is not one the annotation accepts (`"true"` or a Go duration), or
/// `None` when it is. Such a value is ignored ([`parse_do_not_disrupt`]), and the disruption controller says so in
/// a `InvalidDoNotDisruptAnnotation` event on the pod, as upstream does (`"false"` included: it is not a value the
/// annotation takes).
pub fn do_not_disrupt_problem(value: &str) -> Option<String> {
    if value == "true" {
        return None;
    }
    crate::duration::parse_go_duration(value).err().map(|e| e.to_string())
}

/// How the `karpenter.sh/do-not-disrupt` annotation protects a pod at a given moment
/// ([`CompactPod::do_not_disrupt`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DoNotDisrupt {
    /// No annotation, an expired duration, or an invalid value.
    No,
    /// `"true"`.
    Permanent,
    /// A duration: protected until this time (`startTime + d`).
    Until(DateTime<Utc>),
}

/// The annotation `kubectl apply` leaves: a full copy of the applied manifest. No decision reads it.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The pod conditions a decision reads: `PodScheduled` (provisionable pods) and `Ready` (disruption and
/// termination).
const POD_CONDITIONS_READ: [&str; 2] = ["PodScheduled", "Ready"];

/// The DaemonSet owning an object: its owner reference of group `apps`, version `v1`, kind `DaemonSet`. The one rule
/// for "a DaemonSet pod" (upstream compares the group, version and kind, so a `DaemonSet` of another API group is
/// not one), used by the scheduler's overhead, the provisioner's pod filter, drains and disruption alike.
pub fn daemon_set_owner(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().flatten().find(|o| o.kind == "DaemonSet" && o.api_version == "apps/v1")
}

/// A pod with what decisions read of it and a spec shared with identical pods (see the module docs).
///
/// It is a `Pod` for the API machinery (`kind: Pod`, `apiVersion: v1`; it decodes from and encodes to a Pod's
/// JSON), so events and object references name it as one.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct CompactPod {
    /// The pod's metadata, without `managedFields` and the last-applied annotation.
    pub metadata: ObjectMeta,
    /// The pod's spec (trimmed as the module docs say), shared with pods whose spec is equal.
    pub spec: Arc<PodSpec>,
    /// The pod's status: `phase`, the `PodScheduled` and `Ready` conditions, `nominatedNodeName`, `startTime`,
    /// `resourceClaimStatuses`.
    pub status: Option<PodStatus>,
}

impl CompactPod {
    /// `"{namespace}/{name}"`, the key decisions name the pod by ([`crate::meta::namespaced_key`]: a missing
    /// namespace reads as `default`).
    pub fn key(&self) -> String {
        crate::meta::namespaced_key(&self.metadata)
    }

    /// The node the pod is bound to (`spec.nodeName`, when not empty).
    pub fn node_name(&self) -> Option<&str> {
        self.spec.node_name.as_deref().filter(|n| !n.is_empty())
    }

    /// The pod's phase (`status.phase`), when known.
    pub fn phase(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.phase.as_deref())
    }

    /// `Succeeded` or `Failed`: the pod uses no resources and will not run again.
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase(), Some("Succeeded" | "Failed"))
    }

    /// Being deleted (`metadata.deletionTimestamp` set).
    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// Neither terminal nor terminating.
    pub fn is_active(&self) -> bool {
        !self.is_terminal() && !self.is_terminating()
    }

    /// How the pod's `karpenter.sh/do-not-disrupt` annotation protects it at `now`. Only active pods are
    /// protected; the duration form runs from the pod's start (its creation while it has not started).
    pub fn do_not_disrupt(&self, now: DateTime<Utc>) -> DoNotDisrupt {
        if !self.is_active() {
            return DoNotDisrupt::No;
        }
        let Some(annotation) = self.annotation(crate::labels::annotations::DO_NOT_DISRUPT) else {
            return DoNotDisrupt::No;
        };
        let d = match parse_do_not_disrupt(annotation) {
            None => return DoNotDisrupt::No,
            Some(DoNotDisruptAnnotation::Always) => return DoNotDisrupt::Permanent,
            Some(DoNotDisruptAnnotation::For(d)) => d,
        };
        let start = self
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .or(self.metadata.creation_timestamp.as_ref())
            .and_then(crate::time::from_k8s);
        // Without a start the end of the protection is unknown: protecting is the safe side.
        let Some(start) = start else { return DoNotDisrupt::Permanent };
        let Ok(d) = chrono::Duration::from_std(d) else { return DoNotDisrupt::Permanent };
        match start.checked_add_signed(d) {
            Some(until) if until > now => DoNotDisrupt::Until(until),
            Some(_) => DoNotDisrupt::No,
            None => DoNotDisrupt::Permanent,
        }
    }

    /// The other autoscaler's annotation ([`crate::labels::autoscaler::BLOCKING`]) that protects the pod now,
    /// as `karpenter.sh/do-not-disrupt: "true"` would: only active pods are protected.
    pub fn autoscaler_do_not_disrupt(&self) -> Option<&'static crate::labels::autoscaler::BlockingAnnotation> {
        if !self.is_active() {
            return None;
        }
        let annotations = self.metadata.annotations.as_ref()?;
        crate::labels::autoscaler::blocking(crate::labels::autoscaler::Target::Pod, annotations)
    }

    /// Owned by a DaemonSet ([`daemon_set_owner`]).
    pub fn is_daemon_set_pod(&self) -> bool {
        daemon_set_owner(&self.metadata).is_some()
    }

    /// An annotation's value.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str)
    }

    /// The pod as a k8s-openapi `Pod` (its spec copied).
    pub fn to_pod(&self) -> Pod {
        Pod { metadata: self.metadata.clone(), spec: Some(PodSpec::clone(&self.spec)), status: self.status.clone() }
    }
}

impl From<Pod> for CompactPod {
    /// Trims `pod` to what decisions read (module docs); the spec is not shared with any other pod until
    /// [`SpecInterner::intern`].
    fn from(pod: Pod) -> Self {
        let Pod { mut metadata, spec, status } = pod;
        metadata.managed_fields = None;
        if let Some(annotations) = metadata.annotations.as_mut() {
            annotations.remove(LAST_APPLIED);
        }
        // Decoding grows each list to a capacity of 4 or more; a pod's lists are then read-only, so the spare
        // capacity is given back.
        metadata.owner_references.as_mut().map(Vec::shrink_to_fit);
        let mut spec = spec.unwrap_or_default();
        trim_spec(&mut spec);
        CompactPod { metadata, spec: Arc::new(spec), status: status.map(trim_status) }
    }
}

impl From<&Pod> for CompactPod {
    fn from(pod: &Pod) -> Self {
        CompactPod::from(pod.clone())
    }
}

impl From<CompactPod> for Pod {
    fn from(pod: CompactPod) -> Self {
        let CompactPod { metadata, spec, status } = pod;
        Pod { metadata, spec: Some(Arc::unwrap_or_clone(spec)), status }
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

fn trim_spec(spec: &mut PodSpec) {
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

fn trim_status(status: PodStatus) -> PodStatus {
    let mut conditions = status.conditions;
    if let Some(cs) = conditions.as_mut() {
        cs.retain(|c| POD_CONDITIONS_READ.contains(&c.type_.as_str()));
        cs.shrink_to_fit();
    }
    PodStatus {
        phase: status.phase,
        conditions,
        nominated_node_name: status.nominated_node_name,
        start_time: status.start_time,
        // The names of the claims generated from the pod's claim templates (DRA simulation).
        resource_claim_statuses: status.resource_claim_statuses,
        ..PodStatus::default()
    }
}

/// Any form of pod a [`CompactPod`] list takes: a `Pod` (converted, its spec not shared), a `CompactPod`, or an
/// already shared one.
pub trait IntoSharedPod {
    /// The pod, shared.
    fn into_shared(self) -> Arc<CompactPod>;
}

impl IntoSharedPod for Arc<CompactPod> {
    fn into_shared(self) -> Arc<CompactPod> {
        self
    }
}

impl IntoSharedPod for CompactPod {
    fn into_shared(self) -> Arc<CompactPod> {
        Arc::new(self)
    }
}

impl IntoSharedPod for Pod {
    fn into_shared(self) -> Arc<CompactPod> {
        Arc::new(CompactPod::from(self))
    }
}

impl IntoSharedPod for &Pod {
    fn into_shared(self) -> Arc<CompactPod> {
        Arc::new(CompactPod::from(self))
    }
}

impl k8s_openapi::Resource for CompactPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for CompactPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de> Deserialize<'de> for CompactPod {
    /// Decodes a Pod's JSON and trims it (the spec not yet shared).
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Pod::deserialize(deserializer).map(CompactPod::from)
    }
}

impl Serialize for CompactPod {
    /// Encodes as a Pod (`apiVersion: v1`, `kind: Pod`).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct View<'a> {
            api_version: &'static str,
            kind: &'static str,
            metadata: &'a ObjectMeta,
            spec: &'a PodSpec,
            #[serde(skip_serializing_if = "Option::is_none")]
            status: &'a Option<PodStatus>,
        }
        View {
            api_version: <Pod as k8s_openapi::Resource>::API_VERSION,
            kind: <Pod as k8s_openapi::Resource>::KIND,
            metadata: &self.metadata,
            spec: &self.spec,
            status: &self.status,
        }
        .serialize(serializer)
    }
}

/// Hands out one shared `PodSpec` per distinct spec (see the module docs).
///
/// Specs are found by a hash of their JSON encoding and compared whole, so two pods share a spec only when the
/// specs are equal. The interner holds specs weakly: a spec no pod holds any more is freed, and its entry is
/// swept once the entries outnumber twice the specs alive at the last sweep.
#[derive(Default)]
pub struct SpecInterner {
    specs: HashMap<u64, Vec<Weak<PodSpec>>>,
    hasher: std::collections::hash_map::RandomState,
    entries: usize,
    sweep_at: usize,
}

impl fmt::Debug for SpecInterner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpecInterner").field("entries", &self.entries).finish_non_exhaustive()
    }
}

/// Feeds a serializer's output to a hasher, so a spec is hashed without building its JSON.
struct HashWriter<'a, H: Hasher>(&'a mut H);

impl<H: Hasher> std::io::Write for HashWriter<'_, H> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Below this many entries the interner never sweeps.
const MIN_SWEEP: usize = 1024;

impl SpecInterner {
    /// An empty interner.
    pub fn new() -> Self {
        Self::default()
    }

    /// `pod` with its spec replaced by an equal one already shared, or its own spec remembered for the next pods.
    pub fn intern(&mut self, mut pod: CompactPod) -> CompactPod {
        pod.spec = self.intern_spec(&pod.spec);
        pod
    }

    /// The shared spec equal to `spec` (a clone of `spec` itself when it is the first of its kind).
    pub fn intern_spec(&mut self, spec: &Arc<PodSpec>) -> Arc<PodSpec> {
        let mut hasher = self.hasher.build_hasher();
        if serde_json::to_writer(HashWriter(&mut hasher), spec.as_ref()).is_err() {
            // A spec that cannot be encoded (it always can) is simply not shared.
            return Arc::clone(spec);
        }
        let hash = hasher.finish();
        let bucket = self.specs.entry(hash).or_default();
        if let Some(shared) = bucket.iter().filter_map(Weak::upgrade).find(|s| Arc::ptr_eq(s, spec) || **s == **spec) {
            return shared;
        }
        bucket.retain(|w| w.strong_count() > 0);
        bucket.push(Arc::downgrade(spec));
        self.entries += 1;
        if self.entries >= self.sweep_at.max(MIN_SWEEP) {
            self.sweep();
        }
        Arc::clone(spec)
    }

    /// Drops the entries of specs no pod holds any more.
    pub fn sweep(&mut self) {
        self.specs.retain(|_, bucket| {
            bucket.retain(|w| w.strong_count() > 0);
            !bucket.is_empty()
        });
        self.entries = self.specs.values().map(Vec::len).sum();
        self.sweep_at = self.entries * 2;
        if self.specs.capacity() > 4 * self.specs.len().max(MIN_SWEEP) {
            self.specs.shrink_to_fit();
        }
    }

    /// How many specs are remembered (alive or not yet swept).
    pub fn len(&self) -> usize {
        self.entries
    }

    /// Whether no spec is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::annotations::DO_NOT_DISRUPT;
    use k8s_openapi::api::core::v1::{
        ContainerPort, PersistentVolumeClaimVolumeSource, PodCondition, ResourceRequirements, Volume,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};

    #[test]
    fn a_daemon_set_pod_is_owned_by_an_apps_v1_daemon_set() {
        let owner = |api_version: &str, kind: &str| ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: "agent".into(),
                uid: "u".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        assert_eq!(daemon_set_owner(&owner("apps/v1", "DaemonSet")).map(|o| o.name.as_str()), Some("agent"));
        assert!(daemon_set_owner(&owner("example.com/v1", "DaemonSet")).is_none(), "another group's DaemonSet");
        assert!(daemon_set_owner(&owner("apps/v1", "ReplicaSet")).is_none());
        assert!(daemon_set_owner(&ObjectMeta::default()).is_none());
    }

    fn replica(name: &str, node: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                labels: Some([("app".to_owned(), "web".to_owned())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_owned),
                containers: vec![Container {
                    name: "c".into(),
                    image: Some("registry.k8s.io/pause:3.9".into()),
                    resources: Some(ResourceRequirements {
                        requests: Some([("cpu".to_owned(), Quantity("500m".into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn conversion_keeps_what_decisions_read() {
        let mut p = replica("web", Some("n1"));
        p.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        p.metadata.annotations.get_or_insert_default().insert(LAST_APPLIED.into(), "{...}".into());
        p.metadata.annotations.get_or_insert_default().insert("karpenter.sh/do-not-disrupt".into(), "true".into());
        let spec = p.spec.as_mut().unwrap();
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
        let status = p.status.get_or_insert_default();
        status.pod_ip = Some("10.0.0.1".into());
        status.phase = Some("Running".into());
        status.conditions = Some(
            ["PodScheduled", "Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers"]
                .map(|t| PodCondition { type_: t.into(), status: "True".into(), ..Default::default() })
                .into(),
        );

        let c = CompactPod::from(p);
        assert_eq!(c.metadata.managed_fields, None);
        assert_eq!(c.annotation(LAST_APPLIED), None);
        assert_eq!(c.annotation("karpenter.sh/do-not-disrupt"), Some("true"));
        assert_eq!(c.node_name(), Some("n1"));
        let container = &c.spec.containers[0];
        assert_eq!((container.image.as_deref(), container.command.as_ref()), (None, None));
        assert!(container.resources.is_some());
        assert_eq!(container.ports.as_ref().map(Vec::len), Some(1));
        let volumes: Vec<&str> = c.spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        assert_eq!(volumes, ["claim"]);
        let status = c.status.as_ref().unwrap();
        assert_eq!((c.phase(), status.pod_ip.as_deref()), (Some("Running"), None));
        let kept: Vec<&str> = status.conditions.iter().flatten().map(|c| c.type_.as_str()).collect();
        assert_eq!(kept, ["PodScheduled", "Ready"]);
    }

    #[test]
    fn replicas_share_one_spec_and_different_specs_do_not() {
        let mut interner = SpecInterner::new();
        let a = interner.intern(CompactPod::from(replica("a", None)));
        let b = interner.intern(CompactPod::from(replica("b", None)));
        let on_node = interner.intern(CompactPod::from(replica("c", Some("n1"))));
        let on_node_too = interner.intern(CompactPod::from(replica("d", Some("n1"))));
        assert!(Arc::ptr_eq(&a.spec, &b.spec));
        assert!(Arc::ptr_eq(&on_node.spec, &on_node_too.spec));
        assert!(!Arc::ptr_eq(&a.spec, &on_node.spec));
        assert_eq!(on_node.node_name(), Some("n1"));
        assert_eq!(a.node_name(), None);
        assert_eq!((a.metadata.name.as_deref(), b.metadata.name.as_deref()), (Some("a"), Some("b")));
    }

    #[test]
    fn specs_no_pod_holds_are_swept() {
        let mut interner = SpecInterner::new();
        for i in 0..3 * MIN_SWEEP {
            // Every spec differs (its node), and none is kept: the interner must not grow without bound.
            drop(interner.intern(CompactPod::from(replica("p", Some(&format!("n{i}"))))));
        }
        assert!(interner.len() <= MIN_SWEEP, "{} entries for 0 live specs", interner.len());
        let kept = interner.intern(CompactPod::from(replica("p", None)));
        interner.sweep();
        assert_eq!(interner.len(), 1);
        let again = interner.intern(CompactPod::from(replica("q", None)));
        assert!(Arc::ptr_eq(&kept.spec, &again.spec));
    }

    #[test]
    fn decodes_from_and_encodes_to_a_pods_json() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "managedFields": [{"manager": "kubectl"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "pause"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}
        });
        let pod: CompactPod = serde_json::from_value(json).unwrap();
        assert_eq!((pod.metadata.managed_fields.as_ref(), pod.node_name()), (None, Some("n1")));
        let back = serde_json::to_value(&pod).unwrap();
        assert_eq!(back["kind"], "Pod");
        assert_eq!(back["apiVersion"], "v1");
        assert_eq!(back["spec"]["containers"][0]["name"], "c");
        assert_eq!(back["status"], serde_json::json!({"phase": "Running"}));
        let as_pod: Pod = serde_json::from_value(back).unwrap();
        assert_eq!(CompactPod::from(as_pod), pod);
    }

    fn annotated(value: &str) -> CompactPod {
        let mut p = replica("web", Some("n1"));
        p.metadata.annotations.get_or_insert_default().insert(DO_NOT_DISRUPT.into(), value.into());
        CompactPod::from(p)
    }

    fn at(s: &str) -> DateTime<Utc> {
        crate::time::parse_rfc3339(s).unwrap()
    }

    fn k8s_time(s: &str) -> Time {
        serde_json::from_value(serde_json::Value::String(s.into())).unwrap()
    }

    #[test]
    fn do_not_disrupt_values() {
        for valid in ["true", "5m", "1h30m", "0s"] {
            assert_eq!(do_not_disrupt_problem(valid), None, "{valid}");
        }
        for invalid in ["false", "yes", "5 minutes", ""] {
            assert!(do_not_disrupt_problem(invalid).is_some(), "{invalid}");
            assert_eq!(parse_do_not_disrupt(invalid), None, "{invalid} is ignored");
        }
        assert_eq!(parse_do_not_disrupt("true"), Some(DoNotDisruptAnnotation::Always));
        assert_eq!(parse_do_not_disrupt("5m"), Some(DoNotDisruptAnnotation::For(Duration::from_secs(300))));
        assert_eq!(parse_do_not_disrupt("1h30m"), Some(DoNotDisruptAnnotation::For(Duration::from_secs(5400))));
        assert_eq!(parse_do_not_disrupt("0s"), None, "a zero duration protects nothing");
        assert_eq!(parse_do_not_disrupt("false"), None);
        assert_eq!(parse_do_not_disrupt("True"), None, "only the literal true");
        assert_eq!(parse_do_not_disrupt(""), None);
    }

    #[test]
    fn autoscaler_pod_annotations_protect_active_pods() {
        use crate::labels::autoscaler::{CLUSTER_AUTOSCALER_SAFE_TO_EVICT, NODE_AUTOSCALING_SAFE_TO_EVICT};
        let with = |key: &str, value: &str| {
            let mut p = Pod::default();
            p.metadata.annotations.get_or_insert_default().insert(key.into(), value.into());
            CompactPod::from(p)
        };
        for key in [CLUSTER_AUTOSCALER_SAFE_TO_EVICT, NODE_AUTOSCALING_SAFE_TO_EVICT] {
            assert_eq!(with(key, "false").autoscaler_do_not_disrupt().map(|a| a.key), Some(key));
            assert_eq!(with(key, "true").autoscaler_do_not_disrupt(), None, "{key}=true changes nothing");
            let mut deleting = with(key, "false");
            deleting.metadata.deletion_timestamp = Some(k8s_time("2026-01-01T12:00:00Z"));
            assert_eq!(deleting.autoscaler_do_not_disrupt(), None, "terminating pods are not protected");
        }
        assert_eq!(with("karpenter.sh/do-not-disrupt", "true").autoscaler_do_not_disrupt(), None);
    }

    #[test]
    fn do_not_disrupt_at_a_moment() {
        let now = at("2026-01-01T12:00:00Z");
        assert_eq!(annotated("true").do_not_disrupt(now), DoNotDisrupt::Permanent);
        assert_eq!(annotated("false").do_not_disrupt(now), DoNotDisrupt::No, "invalid values are ignored");
        let mut p = annotated("30m");
        p.status = Some(PodStatus { start_time: Some(k8s_time("2026-01-01T11:45:00Z")), ..Default::default() });
        assert_eq!(p.do_not_disrupt(now), DoNotDisrupt::Until(at("2026-01-01T12:15:00Z")));
        assert_eq!(p.do_not_disrupt(at("2026-01-01T12:15:00Z")), DoNotDisrupt::No, "expires at start + d");
        let mut unstarted = annotated("30m");
        unstarted.metadata.creation_timestamp = Some(k8s_time("2026-01-01T11:00:00Z"));
        assert_eq!(unstarted.do_not_disrupt(now), DoNotDisrupt::No, "counted from creation before the start");
        assert_eq!(annotated("30m").do_not_disrupt(now), DoNotDisrupt::Permanent, "no start known: protected");
        let mut deleting = annotated("true");
        deleting.metadata.deletion_timestamp = Some(k8s_time("2026-01-01T12:00:00Z"));
        assert_eq!(deleting.do_not_disrupt(now), DoNotDisrupt::No, "terminating pods are not protected");
    }
}
