//! Pod builders.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimVolumeSource, Pod, PodAffinity, PodAffinityTerm, PodAntiAffinity, PodCondition, PodSpec,
    PodStatus, PreferredSchedulingTerm, ResourceRequirements, Toleration, TopologySpreadConstraint, Volume,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference, Time};

use crate::names::{next_name, uid_for};
use crate::resources::Resources;

/// Everything a test usually sets on a pod. Unset fields get sane defaults; see [`pod`].
#[derive(Clone, Debug, Default)]
pub struct PodOptions {
    /// Default: `pod-N` (a per-thread counter).
    pub name: Option<String>,
    /// Default: `default`.
    pub namespace: Option<String>,
    /// `metadata.labels` (what selectors, spread constraints and affinity terms match).
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`, e.g. `karpenter.sh/do-not-disrupt`.
    pub annotations: BTreeMap<String, String>,
    /// `metadata.finalizers`: a pod with one stays after deletion until a test removes it.
    pub finalizers: Vec<String>,
    /// Default: `registry.k8s.io/pause`.
    pub image: Option<String>,
    /// Requests of the single app container.
    pub requests: Resources,
    /// Limits of the single app container.
    pub limits: Resources,
    /// Extra init containers, used as given (see [`container`]).
    pub init_containers: Vec<Container>,
    /// `spec.nodeSelector`: labels a node must carry.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: one term with these requirements.
    pub node_requirements: Vec<NodeSelectorRequirement>,
    /// Preferred node affinity: one term of weight 1 per requirement.
    pub node_preferences: Vec<NodeSelectorRequirement>,
    /// `spec.tolerations`: taints the pod may be placed despite.
    pub tolerations: Vec<Toleration>,
    /// `spec.topologySpreadConstraints`, used as given (see [`topology_spread`]).
    pub topology_spread: Vec<TopologySpreadConstraint>,
    /// Required pod affinity terms.
    pub pod_requirements: Vec<PodAffinityTerm>,
    /// Preferred pod affinity terms.
    pub pod_preferences: Vec<WeightedPodAffinityTerm>,
    /// Required pod anti-affinity terms.
    pub pod_anti_requirements: Vec<PodAffinityTerm>,
    /// Preferred pod anti-affinity terms.
    pub pod_anti_preferences: Vec<WeightedPodAffinityTerm>,
    /// Host ports (TCP) of the app container.
    pub host_ports: Vec<i32>,
    /// Bound node; a bound pod defaults to phase `Running`, an unbound one to `Pending`.
    pub node_name: Option<String>,
    /// `status.phase`; default `Running` when `node_name` is set, else `Pending`.
    pub phase: Option<String>,
    /// `status.conditions`, used as given ([`unschedulable_pod`] adds `PodScheduled=False` itself).
    pub conditions: Vec<PodCondition>,
    /// Controller owner as (kind, name), e.g. `("ReplicaSet", "web-abc")`; apiVersion is inferred from the kind.
    pub owner: Option<(String, String)>,
    /// Names of PVCs mounted as volumes.
    pub pvcs: Vec<String>,
    /// `spec.priority`: what preemption and disruption ordering compare.
    pub priority: Option<i32>,
    /// `spec.priorityClassName` (e.g. `system-node-critical`, which some decisions treat specially).
    pub priority_class_name: Option<String>,
    /// `spec.terminationGracePeriodSeconds`: how long eviction waits for the pod.
    pub termination_grace_period_seconds: Option<i64>,
    /// `metadata.creationTimestamp`; unset when `None` (tests of age-based rules set it).
    pub creation_timestamp: Option<DateTime<Utc>>,
    /// `metadata.deletionTimestamp`: set, the pod is terminating.
    pub deletion_timestamp: Option<DateTime<Utc>>,
    /// `status.startTime`; unset when `None`.
    pub start_time: Option<DateTime<Utc>>,
    /// `spec.restartPolicy` (`Always`, `OnFailure`, `Never`); unset when `None`.
    pub restart_policy: Option<String>,
    /// `spec.serviceAccountName`; unset when `None`.
    pub service_account_name: Option<String>,
}

/// The apiVersion of a well-known owner kind.
pub fn owner_api_version(kind: &str) -> &'static str {
    match kind {
        "ReplicaSet" | "StatefulSet" | "DaemonSet" | "Deployment" => "apps/v1",
        "Job" => "batch/v1",
        "CronJob" => "batch/v1",
        "NodeClaim" | "NodePool" => "karpenter.sh/v1",
        _ => "v1",
    }
}

/// A controller owner reference with a stable UID.
pub fn owner_reference(kind: &str, namespace: &str, name: &str) -> OwnerReference {
    OwnerReference {
        api_version: owner_api_version(kind).to_string(),
        kind: kind.to_string(),
        name: name.to_string(),
        uid: uid_for(kind, namespace, name),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A container with the given name and requests (for `init_containers`).
pub fn container(name: &str, requests: Resources) -> Container {
    Container {
        name: name.to_string(),
        image: Some("registry.k8s.io/pause".to_string()),
        resources: Some(ResourceRequirements { requests: requests.to_option(), ..Default::default() }),
        ..Default::default()
    }
}

/// A restartable init container (a native sidecar, `restartPolicy: Always`).
pub fn sidecar(name: &str, requests: Resources) -> Container {
    Container { restart_policy: Some("Always".to_string()), ..container(name, requests) }
}

/// A node selector requirement: `requirement("kubernetes.io/arch", "In", &["amd64"])`.
pub fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: if values.is_empty() { None } else { Some(values.iter().map(|v| (*v).to_string()).collect()) },
    }
}

/// A toleration; `operator` is `Equal` when a value is given, `Exists` otherwise.
pub fn toleration(key: &str, value: Option<&str>, effect: Option<&str>) -> Toleration {
    Toleration {
        key: (!key.is_empty()).then(|| key.to_string()),
        operator: Some(if value.is_some() { "Equal" } else { "Exists" }.to_string()),
        value: value.map(str::to_string),
        effect: effect.map(str::to_string),
        toleration_seconds: None,
    }
}

/// A label selector matching these labels.
pub fn label_selector(labels: &BTreeMap<String, String>) -> LabelSelector {
    LabelSelector { match_labels: Some(labels.clone()), match_expressions: None }
}

/// A `DoNotSchedule` topology spread constraint over `topology_key` for pods with these labels.
pub fn topology_spread(
    topology_key: &str,
    max_skew: i32,
    labels: &BTreeMap<String, String>,
) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        topology_key: topology_key.to_string(),
        max_skew,
        when_unsatisfiable: "DoNotSchedule".to_string(),
        label_selector: Some(label_selector(labels)),
        ..Default::default()
    }
}

/// A pod (anti-)affinity term over `topology_key` for pods with these labels.
pub fn pod_affinity_term(topology_key: &str, labels: &BTreeMap<String, String>) -> PodAffinityTerm {
    PodAffinityTerm {
        topology_key: topology_key.to_string(),
        label_selector: Some(label_selector(labels)),
        ..Default::default()
    }
}

/// Converts a chrono time to a Kubernetes `Time` (karpenter-api's one conversion); out-of-range times become `None`.
pub use karpenter_api::time::to_k8s as k8s_time;

fn time(t: Option<DateTime<Utc>>) -> Option<Time> {
    t.and_then(k8s_time)
}

fn non_empty<T: Clone>(v: &[T]) -> Option<Vec<T>> {
    if v.is_empty() { None } else { Some(v.to_vec()) }
}

fn non_empty_map(m: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    if m.is_empty() { None } else { Some(m.clone()) }
}

fn affinity(o: &PodOptions) -> Option<Affinity> {
    let node_affinity = if o.node_requirements.is_empty() && o.node_preferences.is_empty() {
        None
    } else {
        Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: (!o.node_requirements.is_empty()).then(|| {
                NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(o.node_requirements.clone()),
                        match_fields: None,
                    }],
                }
            }),
            preferred_during_scheduling_ignored_during_execution: non_empty(
                &o.node_preferences
                    .iter()
                    .map(|r| PreferredSchedulingTerm {
                        weight: 1,
                        preference: NodeSelectorTerm { match_expressions: Some(vec![r.clone()]), match_fields: None },
                    })
                    .collect::<Vec<_>>(),
            ),
        })
    };
    let pod_affinity = (!o.pod_requirements.is_empty() || !o.pod_preferences.is_empty()).then(|| PodAffinity {
        required_during_scheduling_ignored_during_execution: non_empty(&o.pod_requirements),
        preferred_during_scheduling_ignored_during_execution: non_empty(&o.pod_preferences),
    });
    let pod_anti_affinity =
        (!o.pod_anti_requirements.is_empty() || !o.pod_anti_preferences.is_empty()).then(|| PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: non_empty(&o.pod_anti_requirements),
            preferred_during_scheduling_ignored_during_execution: non_empty(&o.pod_anti_preferences),
        });
    if node_affinity.is_none() && pod_affinity.is_none() && pod_anti_affinity.is_none() {
        None
    } else {
        Some(Affinity { node_affinity, pod_affinity, pod_anti_affinity })
    }
}

/// The pod spec (without metadata/status) for `o`; shared with the workload builders.
pub fn pod_spec(o: &PodOptions) -> PodSpec {
    let ports: Vec<ContainerPort> = o
        .host_ports
        .iter()
        .map(|p| ContainerPort {
            container_port: *p,
            host_port: Some(*p),
            protocol: Some("TCP".to_string()),
            ..Default::default()
        })
        .collect();
    let app = Container {
        name: "app".to_string(),
        image: Some(o.image.clone().unwrap_or_else(|| "registry.k8s.io/pause".to_string())),
        resources: Some(ResourceRequirements {
            requests: o.requests.to_option(),
            limits: o.limits.to_option(),
            ..Default::default()
        }),
        ports: non_empty(&ports),
        ..Default::default()
    };
    let volumes: Vec<Volume> = o
        .pvcs
        .iter()
        .map(|claim| Volume {
            name: claim.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.clone(),
                read_only: None,
            }),
            ..Default::default()
        })
        .collect();
    PodSpec {
        containers: vec![app],
        init_containers: non_empty(&o.init_containers),
        node_selector: non_empty_map(&o.node_selector),
        affinity: affinity(o),
        tolerations: non_empty(&o.tolerations),
        topology_spread_constraints: non_empty(&o.topology_spread),
        node_name: o.node_name.clone(),
        volumes: non_empty(&volumes),
        priority: o.priority,
        priority_class_name: o.priority_class_name.clone(),
        termination_grace_period_seconds: o.termination_grace_period_seconds,
        restart_policy: o.restart_policy.clone(),
        service_account_name: o.service_account_name.clone(),
        ..Default::default()
    }
}

/// A pod with one app container (`app`), built from `o`. Defaults: name `pod-N`, namespace `default`, phase
/// `Running` when `node_name` is set and `Pending` otherwise.
pub fn pod(o: PodOptions) -> Pod {
    let name = o.name.clone().unwrap_or_else(|| next_name("pod"));
    let namespace = o.namespace.clone().unwrap_or_else(|| "default".to_string());
    let phase = o.phase.clone().unwrap_or_else(|| if o.node_name.is_some() { "Running" } else { "Pending" }.into());
    Pod {
        metadata: ObjectMeta {
            uid: Some(uid_for("Pod", &namespace, &name)),
            owner_references: o.owner.as_ref().map(|(kind, owner)| vec![owner_reference(kind, &namespace, owner)]),
            name: Some(name),
            namespace: Some(namespace),
            labels: non_empty_map(&o.labels),
            annotations: non_empty_map(&o.annotations),
            finalizers: non_empty(&o.finalizers),
            creation_timestamp: time(o.creation_timestamp),
            deletion_timestamp: time(o.deletion_timestamp),
            ..Default::default()
        },
        spec: Some(pod_spec(&o)),
        status: Some(PodStatus {
            phase: Some(phase),
            conditions: non_empty(&o.conditions),
            start_time: time(o.start_time),
            ..Default::default()
        }),
    }
}

/// The `PodScheduled=False, reason Unschedulable` condition the kube-scheduler sets on pods it cannot place.
pub fn unschedulable_condition() -> PodCondition {
    PodCondition {
        type_: "PodScheduled".to_string(),
        status: "False".to_string(),
        reason: Some("Unschedulable".to_string()),
        message: Some("0/0 nodes are available".to_string()),
        ..Default::default()
    }
}

/// A pending, unbound pod the kube-scheduler marked unschedulable: what Karpenter provisions for.
pub fn unschedulable_pod(o: PodOptions) -> Pod {
    let mut conditions = o.conditions.clone();
    conditions.retain(|c| c.type_ != "PodScheduled");
    conditions.push(unschedulable_condition());
    pod(PodOptions { node_name: None, phase: Some("Pending".to_string()), conditions, ..o })
}

/// `n` unschedulable pods built from the same options (names `pod-N` unless `o.name` is set, then `name-i`).
pub fn unschedulable_pods(o: &PodOptions, n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let name = o.name.as_ref().map(|base| format!("{base}-{i}"));
            unschedulable_pod(PodOptions { name, ..o.clone() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::reset_names;
    use crate::resources::map;

    #[test]
    fn default_pod_gets_counter_name_namespace_and_pending_phase() {
        reset_names();
        let a = pod(PodOptions::default());
        let b = pod(PodOptions::default());
        assert_eq!(a.metadata.name.as_deref(), Some("pod-1"));
        assert_eq!(b.metadata.name.as_deref(), Some("pod-2"));
        assert_eq!(a.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(a.status.unwrap().phase.as_deref(), Some("Pending"));
        assert_ne!(a.metadata.uid, b.metadata.uid);
    }

    #[test]
    fn pod_carries_requested_fields() {
        let labels = map(&[("app", "web")]);
        let p = pod(PodOptions {
            name: Some("web".into()),
            namespace: Some("prod".into()),
            labels: labels.clone(),
            requests: [("cpu", "1"), ("memory", "1Gi")].into(),
            limits: [("cpu", "2")].into(),
            node_selector: map(&[("kubernetes.io/arch", "arm64")]),
            node_requirements: vec![requirement("topology.kubernetes.io/zone", "In", &["a", "b"])],
            node_preferences: vec![requirement("karpenter.sh/capacity-type", "In", &["spot"])],
            tolerations: vec![toleration("gpu", None, Some("NoSchedule"))],
            topology_spread: vec![topology_spread("topology.kubernetes.io/zone", 1, &labels)],
            pod_anti_requirements: vec![pod_affinity_term("kubernetes.io/hostname", &labels)],
            host_ports: vec![8080],
            node_name: Some("node-a".into()),
            owner: Some(("ReplicaSet".into(), "web-123".into())),
            pvcs: vec!["data".into()],
            init_containers: vec![container("init", [("cpu", "3")].into())],
            priority: Some(100),
            ..Default::default()
        });
        assert_eq!(p.metadata.namespace.as_deref(), Some("prod"));
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.api_version.as_str(), owner.kind.as_str(), owner.controller),
            ("apps/v1", "ReplicaSet", Some(true))
        );
        let spec = p.spec.as_ref().unwrap();
        let app = &spec.containers[0];
        let resources = app.resources.as_ref().unwrap();
        assert_eq!(resources.requests.as_ref().unwrap()["memory"].0, "1Gi");
        assert_eq!(resources.limits.as_ref().unwrap()["cpu"].0, "2");
        assert_eq!(app.ports.as_ref().unwrap()[0].host_port, Some(8080));
        let affinity = spec.affinity.as_ref().unwrap();
        let na = affinity.node_affinity.as_ref().unwrap();
        let required = na.required_during_scheduling_ignored_during_execution.as_ref().unwrap();
        assert_eq!(
            required.node_selector_terms[0].match_expressions.as_ref().unwrap()[0].key,
            "topology.kubernetes.io/zone"
        );
        assert_eq!(na.preferred_during_scheduling_ignored_during_execution.as_ref().unwrap().len(), 1);
        assert!(affinity.pod_affinity.is_none());
        assert_eq!(
            affinity
                .pod_anti_affinity
                .as_ref()
                .unwrap()
                .required_during_scheduling_ignored_during_execution
                .as_ref()
                .unwrap()
                .len(),
            1
        );
        assert_eq!(spec.tolerations.as_ref().unwrap()[0].operator.as_deref(), Some("Exists"));
        assert_eq!(spec.topology_spread_constraints.as_ref().unwrap()[0].max_skew, 1);
        assert_eq!(spec.volumes.as_ref().unwrap()[0].persistent_volume_claim.as_ref().unwrap().claim_name, "data");
        assert_eq!(spec.init_containers.as_ref().unwrap()[0].name, "init");
        assert_eq!(spec.priority, Some(100));
        assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Running"));
    }

    #[test]
    fn unschedulable_pod_is_pending_unbound_and_marked() {
        let p = unschedulable_pod(PodOptions { node_name: Some("ignored".into()), ..Default::default() });
        assert!(p.spec.as_ref().unwrap().node_name.is_none());
        let status = p.status.unwrap();
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let c = &status.conditions.unwrap()[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_deref()),
            ("PodScheduled", "False", Some("Unschedulable"))
        );
    }

    #[test]
    fn unschedulable_pods_have_distinct_names() {
        let pods = unschedulable_pods(&PodOptions { name: Some("batch".into()), ..Default::default() }, 3);
        let names: Vec<_> = pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["batch-0", "batch-1", "batch-2"]);
    }
}
