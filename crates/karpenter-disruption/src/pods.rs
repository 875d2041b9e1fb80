//! Pod predicates of disruption: reschedulable pods, the `karpenter.sh/do-not-disrupt`
//! annotation (including its duration form), PodDisruptionBudgets, eviction cost.

use chrono::{DateTime, Utc};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use karpenter_api::labels::{annotations, taints};
use karpenter_api::selector::selector_matches;
use karpenter_api::{CompactPod, DoNotDisrupt};
use karpenter_scheduler::ClusterSnapshot;
use karpenter_scheduler::snapshot::is_daemon_set_pod;

/// A static (mirror) pod: owned by its Node.
pub fn is_static(pod: &CompactPod) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|o| o.kind == "Node")
}

fn is_stateful_set_pod(pod: &CompactPod) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|o| o.kind == "StatefulSet")
}

/// Disruption's "reschedulable": pods that must find a new home when their node goes, active (or terminating
/// StatefulSet) pods that are neither DaemonSet nor static pods. Whether they may be moved now (do-not-disrupt,
/// PDBs) is a separate question, asked by the callers that need it.
pub fn is_reschedulable(pod: &CompactPod) -> bool {
    (pod.is_active() || (pod.is_terminating() && is_stateful_set_pod(pod)))
        && !is_daemon_set_pod(pod)
        && !is_static(pod)
}

/// Whether the pod tolerates `karpenter.sh/disrupted:NoSchedule` (it will not be evicted by a drain).
pub fn tolerates_disrupted_taint(pod: &CompactPod) -> bool {
    pod.spec.tolerations.as_ref().into_iter().flatten().any(|t| {
        let key_ok = match t.key.as_deref() {
            None | Some("") => t.operator.as_deref() == Some("Exists"),
            Some(k) => k == taints::DISRUPTED,
        };
        let effect_ok = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoSchedule");
        let value_ok = t.operator.as_deref() == Some("Exists") || t.value.as_deref().unwrap_or("").is_empty();
        key_ok && effect_ok && value_ok
    })
}

fn is_ready(pod: &CompactPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// `namespace/name` of a PDB ([`karpenter_api::namespaced_key`]).
pub fn pdb_key(pdb: &PodDisruptionBudget) -> String {
    karpenter_api::namespaced_key(&pdb.metadata)
}

/// Why a PDB blocks the eviction of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PdbBlock {
    /// More than one PDB selects the pod (the eviction API refuses such pods).
    Multiple(Vec<String>),
    /// The PDB allows no disruption now.
    ZeroAllowed(String),
}

/// The PodDisruptionBudgets of a snapshot, by namespace.
#[derive(Debug, Default)]
pub struct Pdbs<'a> {
    by_namespace: std::collections::BTreeMap<&'a str, Vec<&'a PodDisruptionBudget>>,
}

impl<'a> Pdbs<'a> {
    /// Indexes `pdbs`.
    pub fn new(pdbs: &'a [PodDisruptionBudget]) -> Self {
        let mut by_namespace: std::collections::BTreeMap<&str, Vec<&PodDisruptionBudget>> = Default::default();
        for p in pdbs {
            by_namespace.entry(p.metadata.namespace.as_deref().unwrap_or("default")).or_default().push(p);
        }
        Pdbs { by_namespace }
    }

    /// Indexes PDBs held elsewhere (the controller's state shares them).
    pub fn from_refs(pdbs: impl IntoIterator<Item = &'a PodDisruptionBudget>) -> Self {
        let mut by_namespace: std::collections::BTreeMap<&str, Vec<&PodDisruptionBudget>> = Default::default();
        for p in pdbs {
            by_namespace.entry(p.metadata.namespace.as_deref().unwrap_or("default")).or_default().push(p);
        }
        Pdbs { by_namespace }
    }

    /// The PDBs selecting `pod`.
    pub fn matching(&self, pod: &CompactPod) -> Vec<&'a PodDisruptionBudget> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let empty = Default::default();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        self.by_namespace
            .get(ns)
            .into_iter()
            .flatten()
            .copied()
            .filter(|p| selector_matches(p.spec.as_ref().and_then(|s| s.selector.as_ref()), labels))
            .collect()
    }

    /// Whether evicting `pod` is blocked now: more than one PDB, or one with
    /// `disruptionsAllowed == 0` unless it has `unhealthyPodEvictionPolicy: AlwaysAllow` and the pod is not
    /// Ready.
    pub fn blocks(&self, pod: &CompactPod) -> Option<PdbBlock> {
        let m = self.matching(pod);
        if m.len() > 1 {
            return Some(PdbBlock::Multiple(m.iter().map(|p| pdb_key(p)).collect()));
        }
        let p = m.first()?;
        let allowed = p.status.as_ref().map(|s| s.disruptions_allowed).unwrap_or(0);
        if allowed > 0 {
            return None;
        }
        let always_allow =
            p.spec.as_ref().and_then(|s| s.unhealthy_pod_eviction_policy.as_deref()) == Some("AlwaysAllow");
        if always_allow && !is_ready(pod) {
            return None;
        }
        Some(PdbBlock::ZeroAllowed(pdb_key(p)))
    }
}

/// Pods a drain would evict (the PDB check only looks at these): not terminal, not terminating, not tolerating
/// the disrupted taint, not static, and not protected by do-not-disrupt.
pub fn would_be_evicted(pod: &CompactPod, now: DateTime<Utc>) -> bool {
    pod.is_active() && !tolerates_disrupted_taint(pod) && !is_static(pod) && pod.do_not_disrupt(now) == DoNotDisrupt::No
}

/// A PDB that can never allow a disruption, whatever the state of its pods: `maxUnavailable` 0 or `"0%"`, or
/// `minAvailable` `"100%"`.
pub fn is_fully_blocking(pdb: &PodDisruptionBudget) -> bool {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let Some(spec) = pdb.spec.as_ref() else { return false };
    let zero = |v: &IntOrString| matches!(v, IntOrString::Int(0)) || matches!(v, IntOrString::String(s) if s == "0%");
    spec.max_unavailable.as_ref().is_some_and(zero)
        || matches!(spec.min_available.as_ref(), Some(IntOrString::String(s)) if s == "100%")
}

/// Whether PDBs keep a drain from ever evicting `pod`, as upstream judges it for provisioning: only a pod a drain
/// would evict ([`would_be_evicted`]) can be held; more than one PDB selecting it holds it (the eviction API
/// refuses such pods); a single PDB holds it when it is fully blocking ([`is_fully_blocking`]), unless it has
/// `unhealthyPodEvictionPolicy: AlwaysAllow` and the pod's `Ready` condition is `False`.
pub fn is_fully_blocked(pod: &CompactPod, pdbs: &Pdbs<'_>, now: DateTime<Utc>) -> bool {
    if !would_be_evicted(pod, now) {
        return false;
    }
    let matching = pdbs.matching(pod);
    if matching.len() > 1 {
        return true;
    }
    let explicitly_unready = || {
        pod.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "False")
    };
    matching.first().is_some_and(|pdb| {
        let always_allow =
            pdb.spec.as_ref().and_then(|s| s.unhealthy_pod_eviction_policy.as_deref()) == Some("AlwaysAllow");
        !(always_allow && explicitly_unready()) && is_fully_blocking(pdb)
    })
}

/// Upstream's "currently reschedulable": a pod of a node being deleted that provisioning finds room for now.
/// [`is_reschedulable`] (active, or a terminating StatefulSet pod; not a DaemonSet or static pod, not terminal),
/// plus two conditions of the moment: no active `karpenter.sh/do-not-disrupt` (`"true"`, or a duration still
/// running at `now`) and not held by PDBs ([`is_fully_blocked`]). The controller's provisioner and `simulate`
/// both use it.
pub fn is_currently_reschedulable(pod: &CompactPod, pdbs: &Pdbs<'_>, now: DateTime<Utc>) -> bool {
    is_reschedulable(pod) && pod.do_not_disrupt(now) == DoNotDisrupt::No && !is_fully_blocked(pod, pdbs, now)
}

/// Provisioning's view of a snapshot with nodes being deleted ([`reschedule_deleting_nodes`]).
#[derive(Debug)]
pub struct Rescheduling {
    /// The snapshot provisioning schedules: the currently reschedulable pods of nodes being deleted are pending
    /// (their `nodeName` cleared), the other pods of those nodes are left out.
    pub snapshot: ClusterSnapshot,
    /// The keys (`namespace/name`) of the pods made pending.
    pub pods: Vec<String>,
}

/// What the controller's provisioner schedules besides the pending pods: the currently reschedulable pods
/// ([`is_currently_reschedulable`]) of the nodes being deleted (`marked_for_deletion`: a deletion timestamp on the
/// Node or its NodeClaim, or the `karpenter.sh/disrupted` taint). `None` when no node being deleted holds a pod.
pub fn reschedule_deleting_nodes(snapshot: &ClusterSnapshot, now: DateTime<Utc>) -> Option<Rescheduling> {
    let deleting: std::collections::BTreeSet<&str> =
        snapshot.nodes.iter().filter(|n| n.marked_for_deletion).map(|n| n.name.as_str()).collect();
    let on_deleting = |p: &CompactPod| p.node_name().is_some_and(|n| deleting.contains(n));
    if !snapshot.bound_pods.iter().any(|p| on_deleting(p)) {
        return None;
    }
    let pdbs = Pdbs::new(&snapshot.pdbs);
    let mut out = snapshot.clone();
    let mut moved = Vec::new();
    out.bound_pods.retain(|p| {
        if !on_deleting(p) {
            return true;
        }
        if is_currently_reschedulable(p, &pdbs, now) {
            moved.push(std::sync::Arc::clone(p));
        }
        false
    });
    let mut pods = Vec::new();
    for mut p in moved {
        std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut p).spec).node_name = None;
        pods.push(karpenter_scheduler::snapshot::pod_key(&p));
        out.pending_pods.push(p);
    }
    out.sort();
    Some(Rescheduling { snapshot: out, pods })
}

const DELETION_COST_SCALE: f64 = (1u64 << 27) as f64;
const PRIORITY_SCALE: f64 = (1u64 << 25) as f64;

/// Where a pod's deletion cost comes from, by the feature gate `PodDeletionCostManagement`.
///
/// Gate off: `karpenter.sh/disruption-cost` when present, else `controller.kubernetes.io/pod-deletion-cost` (the
/// v1.14 source plus the new key). Gate on: only `karpenter.sh/disruption-cost`, because Karpenter then writes
/// `pod-deletion-cost` itself and that value no longer says what the user wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostAnnotations {
    /// The `PodDeletionCostManagement` gate.
    pub managed: bool,
}

/// A cost annotation whose value is not an integer of its range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCost {
    /// The annotation key.
    pub key: &'static str,
    /// The value as written.
    pub value: String,
}

impl CostAnnotations {
    /// The annotation that gives `pod`'s cost and its parsed value: `None` when no source annotation is present,
    /// `Some(Err)` when the one that counts does not parse (`karpenter.sh/disruption-cost` is an int32; the
    /// Kubernetes key is read as v1.14 read it, any 64-bit integer). An invalid `disruption-cost` does not fall
    /// back to `pod-deletion-cost`: the user's key is present, so it is the one that counts, and it is ignored.
    pub fn deletion_cost(self, pod: &CompactPod) -> Option<Result<i64, InvalidCost>> {
        let a = pod.metadata.annotations.as_ref()?;
        let invalid = |key: &'static str, value: &str| InvalidCost { key, value: value.to_owned() };
        if let Some(v) = a.get(annotations::DISRUPTION_COST) {
            return Some(v.trim().parse::<i32>().map(i64::from).map_err(|_| invalid(annotations::DISRUPTION_COST, v)));
        }
        if self.managed {
            return None;
        }
        let v = a.get(annotations::POD_DELETION_COST)?;
        Some(v.trim().parse::<i64>().map_err(|_| invalid(annotations::POD_DELETION_COST, v)))
    }

    /// `EvictionCost(pod) = clamp(1 + deletionCost/2^27 + priority/2^25, -10, 10)`, the deletion cost from
    /// [`Self::deletion_cost`]; an unparsable one is ignored (the controller reports it).
    pub fn eviction_cost(self, pod: &CompactPod) -> f64 {
        let mut cost = 1.0;
        if let Some(Ok(c)) = self.deletion_cost(pod) {
            cost += c as f64 / DELETION_COST_SCALE;
        }
        if let Some(p) = pod.spec.priority {
            cost += f64::from(p) / PRIORITY_SCALE;
        }
        cost.clamp(-10.0, 10.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use karpenter_testing::{PodOptions, label_selector, pod};
    use std::collections::BTreeMap;

    fn pdb(name: &str, app: &str, allowed: i32, always_allow: bool) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(label_selector(&BTreeMap::from([("app".to_string(), app.to_string())]))),
                unhealthy_pod_eviction_policy: always_allow.then(|| "AlwaysAllow".to_string()),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus { disruptions_allowed: allowed, ..Default::default() }),
        }
    }

    /// Which pods of a node being deleted provisioning finds room for (upstream's "currently reschedulable").
    #[test]
    fn currently_reschedulable_pods() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z").unwrap().with_timezone(&Utc);
        let base = || PodOptions {
            name: Some("p".into()),
            labels: BTreeMap::from([("app".into(), "web".into())]),
            node_name: Some("n1".into()),
            ..Default::default()
        };
        let with_dnd = |value: &str, started_mins_ago: i64| {
            let mut p = pod(PodOptions {
                annotations: [(annotations::DO_NOT_DISRUPT.to_owned(), value.to_owned())].into(),
                ..base()
            });
            p.status.get_or_insert_default().start_time =
                karpenter_testing::k8s_time(now - chrono::Duration::minutes(started_mins_ago));
            CompactPod::from(p)
        };
        let none = Pdbs::default();
        assert!(!is_currently_reschedulable(&with_dnd("true", 60), &none, now));
        assert!(!is_currently_reschedulable(&with_dnd("10m", 1), &none, now), "the duration is still running");
        assert!(is_currently_reschedulable(&with_dnd("10m", 20), &none, now), "the duration is over");
        assert!(is_currently_reschedulable(&with_dnd("not-a-duration", 1), &none, now), "invalid values are ignored");

        let plain: CompactPod = pod(base()).into();
        let terminal: CompactPod = pod(PodOptions { phase: Some("Succeeded".into()), ..base() }).into();
        assert!(is_currently_reschedulable(&plain, &none, now));
        assert!(!is_currently_reschedulable(&terminal, &none, now), "terminal pods stay");
        let owned = |kind: &str, deleting: bool| {
            let mut p = pod(PodOptions { owner: Some((kind.into(), "w".into())), ..base() });
            if deleting {
                p.metadata.deletion_timestamp = karpenter_testing::k8s_time(now);
            }
            CompactPod::from(p)
        };
        assert!(!is_currently_reschedulable(&owned("DaemonSet", false), &none, now), "DaemonSet pods stay");
        assert!(!is_currently_reschedulable(&owned("ReplicaSet", true), &none, now), "terminating pods stay");
        assert!(is_currently_reschedulable(&owned("StatefulSet", true), &none, now), "but a StatefulSet's count");

        let blocking = |name: &str, spec: serde_json::Value| -> PodDisruptionBudget {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default"}, "spec": spec
            }))
            .unwrap()
        };
        let sel = serde_json::json!({"matchLabels": {"app": "web"}});
        let max0 = [blocking("a", serde_json::json!({"selector": sel, "maxUnavailable": 0}))];
        assert!(!is_currently_reschedulable(&plain, &Pdbs::new(&max0), now), "a PDB that never allows a disruption");
        let full = [blocking("a", serde_json::json!({"selector": sel, "minAvailable": "100%"}))];
        assert!(!is_currently_reschedulable(&plain, &Pdbs::new(&full), now));
        let zero_pct = [blocking("a", serde_json::json!({"selector": sel, "maxUnavailable": "0%"}))];
        assert!(!is_currently_reschedulable(&plain, &Pdbs::new(&zero_pct), now));
        let one = [blocking("a", serde_json::json!({"selector": sel, "maxUnavailable": 1}))];
        assert!(is_currently_reschedulable(&plain, &Pdbs::new(&one), now), "a PDB that allows disruptions later");
        let two = [one[0].clone(), blocking("b", serde_json::json!({"selector": sel, "maxUnavailable": 1}))];
        assert!(!is_currently_reschedulable(&plain, &Pdbs::new(&two), now), "two PDBs: the eviction API refuses");
        let always = [blocking(
            "a",
            serde_json::json!({"selector": sel, "maxUnavailable": 0, "unhealthyPodEvictionPolicy": "AlwaysAllow"}),
        )];
        let unready = |status: &str| {
            let c = k8s_openapi::api::core::v1::PodCondition {
                type_: "Ready".into(),
                status: status.into(),
                ..Default::default()
            };
            CompactPod::from(pod(PodOptions { conditions: vec![c], ..base() }))
        };
        assert!(is_currently_reschedulable(&unready("False"), &Pdbs::new(&always), now), "AlwaysAllow, unready");
        assert!(!is_currently_reschedulable(&unready("True"), &Pdbs::new(&always), now));
        assert!(!is_currently_reschedulable(&plain, &Pdbs::new(&always), now), "no Ready condition: not unready");
        let tolerating = CompactPod::from(pod(PodOptions {
            tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                key: Some(taints::DISRUPTED.into()),
                operator: Some("Exists".into()),
                ..Default::default()
            }],
            ..base()
        }));
        assert!(
            is_currently_reschedulable(&tolerating, &Pdbs::new(&max0), now),
            "a pod a drain does not evict is not held by PDBs"
        );
    }

    /// Provisioning's view of nodes being deleted: their currently reschedulable pods become pending, the rest
    /// of their pods are left out, other nodes' pods stay bound.
    #[test]
    fn pods_of_nodes_being_deleted_become_pending() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z").unwrap().with_timezone(&Utc);
        let node = |name: &str, extra: &str| {
            format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}{extra}}}\nstatus: {{allocatable: {{cpu: '4', pods: '10'}}}}\n---\n"
            )
        };
        let bound = |name: &str, node: &str, extra: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default{extra}}}\n\
                 spec: {{nodeName: {node}, containers: [{{name: c, image: x}}]}}\nstatus: {{phase: Running}}\n---\n"
            )
        };
        let tainted = "apiVersion: v1\nkind: Node\nmetadata: {name: tainted}\n\
                       spec: {taints: [{key: karpenter.sh/disrupted, effect: NoSchedule}]}\n\
                       status: {allocatable: {cpu: '4', pods: '10'}}\n---\n";
        let yaml = [
            node("keep", ""),
            node("deleting", ", deletionTimestamp: '2026-01-01T11:00:00Z', finalizers: [x]"),
            tainted.to_owned(),
            bound("stays", "keep", ""),
            bound("moves", "deleting", ""),
            bound("moves-too", "tainted", ""),
            bound("protected", "deleting", ", annotations: {karpenter.sh/do-not-disrupt: 'true'}"),
            bound(
                "ds",
                "deleting",
                ", ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: d, uid: u, controller: true}]",
            ),
        ]
        .concat();
        let objects = karpenter_api::load_str(&yaml, "t.yaml").expect("valid");
        let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let r = reschedule_deleting_nodes(&snapshot, now).expect("nodes being deleted hold pods");
        assert_eq!(r.pods, ["default/moves", "default/moves-too"]);
        let pending: Vec<String> = r.snapshot.pending_pods.iter().map(|p| pod_key_of(p)).collect();
        assert_eq!(pending, ["default/moves", "default/moves-too"]);
        assert!(r.snapshot.pending_pods.iter().all(|p| p.node_name().is_none()));
        let still_bound: Vec<String> = r.snapshot.bound_pods.iter().map(|p| pod_key_of(p)).collect();
        assert_eq!(still_bound, ["default/stays"], "the other pods of the deleting nodes are left out");
        let calm =
            karpenter_api::load_str(&[node("keep", ""), bound("stays", "keep", "")].concat(), "t.yaml").expect("valid");
        assert!(reschedule_deleting_nodes(&ClusterSnapshot::from_objects(&calm).unwrap(), now).is_none());
    }

    fn pod_key_of(p: &CompactPod) -> String {
        karpenter_scheduler::snapshot::pod_key(p)
    }

    #[test]
    fn pdb_rules() {
        let p: CompactPod =
            pod(PodOptions { labels: BTreeMap::from([("app".into(), "web".into())]), ..Default::default() }).into();
        let list = [pdb("a", "web", 0, false)];
        assert_eq!(Pdbs::new(&list).blocks(&p), Some(PdbBlock::ZeroAllowed("default/a".into())));
        let list = [pdb("a", "web", 1, false)];
        assert_eq!(Pdbs::new(&list).blocks(&p), None);
        let list = [pdb("a", "web", 1, false), pdb("b", "web", 5, false)];
        assert!(matches!(Pdbs::new(&list).blocks(&p), Some(PdbBlock::Multiple(v)) if v.len() == 2));
        let list = [pdb("a", "web", 0, true)];
        assert_eq!(Pdbs::new(&list).blocks(&p), None, "AlwaysAllow lets unready pods go");
        let list = [pdb("a", "db", 0, false)];
        assert_eq!(Pdbs::new(&list).blocks(&p), None, "selector does not match");
    }

    #[test]
    fn eviction_cost_formula() {
        let eviction_cost = |p: &CompactPod| CostAnnotations { managed: false }.eviction_cost(p);
        let mut p: CompactPod = pod(PodOptions::default()).into();
        assert_eq!(eviction_cost(&p), 1.0);
        p.metadata.annotations =
            Some(BTreeMap::from([(annotations::POD_DELETION_COST.to_string(), (1i64 << 27).to_string())]));
        assert_eq!(eviction_cost(&p), 2.0);
        p.metadata.annotations = Some(BTreeMap::from([(annotations::POD_DELETION_COST.to_string(), "x".into())]));
        assert_eq!(eviction_cost(&p), 1.0, "unparsable deletion cost is ignored");
        std::sync::Arc::make_mut(&mut p.spec).priority = Some(2_000_000_000);
        assert_eq!(eviction_cost(&p), 10.0, "clamped");
        std::sync::Arc::make_mut(&mut p.spec).priority = Some(-(1 << 25));
        assert_eq!(eviction_cost(&p), 0.0);
    }

    /// Upstream's `Pod Eviction Cost` specs (disruption suite_test.go): the standard cost is 1; a positive
    /// deletion cost or priority raises it, a negative one lowers it, and higher deletion costs cost more.
    #[test]
    fn upstream_pod_eviction_cost_specs() {
        let cost = |deletion_cost: Option<&str>, priority: Option<i32>| {
            let mut p: CompactPod = pod(PodOptions::default()).into();
            p.metadata.annotations =
                deletion_cost.map(|c| BTreeMap::from([(annotations::POD_DELETION_COST.to_string(), c.to_string())]));
            std::sync::Arc::make_mut(&mut p.spec).priority = priority;
            CostAnnotations { managed: false }.eviction_cost(&p)
        };
        assert_eq!(cost(None, None), 1.0, "no priority and no deletion cost");
        assert!(cost(Some("100"), None) > 1.0);
        assert!(cost(Some("-100"), None) < 1.0);
        assert!(cost(Some("101"), None) > cost(Some("100"), None));
        assert!(cost(Some("100"), None) > cost(Some("99"), None));
        assert!(cost(None, Some(1)) > 1.0);
        assert!(cost(None, Some(-1)) < 1.0);
    }

    #[test]
    fn cost_annotation_precedence() {
        let with = |pairs: &[(&str, &str)]| -> CompactPod {
            let mut p: CompactPod = pod(PodOptions::default()).into();
            p.metadata.annotations = Some(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
            p
        };
        let (off, on) = (CostAnnotations { managed: false }, CostAnnotations { managed: true });
        let both = with(&[(annotations::DISRUPTION_COST, "100"), (annotations::POD_DELETION_COST, "-5")]);
        assert_eq!(off.deletion_cost(&both), Some(Ok(100)), "disruption-cost wins with the gate off");
        assert_eq!(on.deletion_cost(&both), Some(Ok(100)));
        let k8s_only = with(&[(annotations::POD_DELETION_COST, "-5")]);
        assert_eq!(off.deletion_cost(&k8s_only), Some(Ok(-5)), "gate off: v1.14's source");
        assert_eq!(on.deletion_cost(&k8s_only), None, "gate on: Karpenter's own writes are not user intent");
        assert_eq!(on.eviction_cost(&k8s_only), 1.0);
        assert!(off.eviction_cost(&k8s_only) < 1.0);
        let bad = with(&[(annotations::DISRUPTION_COST, "lots"), (annotations::POD_DELETION_COST, "7")]);
        assert_eq!(
            off.deletion_cost(&bad),
            Some(Err(InvalidCost { key: annotations::DISRUPTION_COST, value: "lots".into() })),
            "an invalid user value is reported, not replaced by the other key"
        );
        assert_eq!(off.eviction_cost(&bad), 1.0, "and ignored");
        let too_big = with(&[(annotations::DISRUPTION_COST, "4294967296")]);
        assert!(on.deletion_cost(&too_big).is_some_and(|r| r.is_err()), "disruption-cost is an int32");
        let big = with(&[(annotations::DISRUPTION_COST, &(1i64 << 27).to_string())]);
        assert_eq!(on.eviction_cost(&big), 2.0);
    }
}
