//! The scheduler stand-in: binds pending pods to nodes that fit, through the pods/binding subresource.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration};
use karpenter_api::namespaced_key;
use karpenter_requirements::{Requirement, ResourceList, pod_requests, taints::tolerates};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::with_condition;

/// What one [`Scheduler::step`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScheduleReport {
    /// (`namespace/name`, node) of each pod bound, in binding order.
    pub bound: Vec<(String, String)>,
    /// `namespace/name` of each pending pod no node fits (marked `PodScheduled=False`, reason `Unschedulable`).
    pub unschedulable: Vec<String>,
}

/// A stand-in for kube-scheduler. Pending pods (no `spec.nodeName`, not being deleted, no scheduling gates,
/// `schedulerName` unset or `default-scheduler`) are taken by priority (highest first), then age, then name,
/// and bound to the first node by name that fits:
///
/// - not being deleted, not `spec.unschedulable` (unless tolerated, as the real scheduler's taint);
/// - every `NoSchedule`/`NoExecute` taint tolerated (`node.kubernetes.io/not-ready` and
///   `karpenter.sh/unregistered` included, so new nodes wait for their kubelet and for Karpenter);
/// - `nodeSelector` and required node affinity (any term; `matchExpressions` through
///   `karpenter_requirements`, `matchFields` on `metadata.name`);
/// - the pod's requests (`karpenter_requirements::pod_requests`: init containers, sidecars, overhead) within
///   `status.allocatable` (else `status.capacity`) minus the requests of the pods already bound there (those not
///   Succeeded/Failed, terminating ones included), and one more pod within the `pods` allocatable when the node
///   declares one.
///
/// A pod no node fits gets `PodScheduled=False` with reason `Unschedulable` (what Karpenter watches for).
/// Not modelled: pod (anti-)affinity, topology spread, host ports, volumes, preferred terms and scoring (the
/// real scheduler spreads; tests must not depend on which fitting node is chosen), preemption.
#[derive(Clone)]
pub struct Scheduler {
    client: Client,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler").finish_non_exhaustive()
    }
}

fn terminal(p: &Pod) -> bool {
    matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

fn pending(p: &Pod) -> bool {
    let spec = p.spec.as_ref();
    spec.is_some_and(|s| s.node_name.as_deref().is_none_or(str::is_empty))
        && p.metadata.deletion_timestamp.is_none()
        && !terminal(p)
        && spec.and_then(|s| s.scheduling_gates.as_ref()).is_none_or(Vec::is_empty)
        && spec.and_then(|s| s.scheduler_name.as_deref()).is_none_or(|n| n.is_empty() || n == "default-scheduler")
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let Ok(req) = Requirement::from_node_selector_requirement(r) else { return false };
    match value {
        Some(v) => req.has(v),
        None => matches!(r.operator.as_str(), "NotIn" | "DoesNotExist"),
    }
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, node_name: &str) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false; // an empty term matches nothing
    }
    exprs.iter().all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| r.key == "metadata.name" && requirement_matches(r, Some(node_name)))
}

/// Why `pod` cannot go to `node`, if it cannot (resources aside).
fn predicate_failure(pod: &Pod, node: &Node) -> Option<String> {
    let labels = node.labels();
    let spec = pod.spec.as_ref()?;
    if node.metadata.deletion_timestamp.is_some() {
        return Some("node(s) were being deleted".into());
    }
    let tolerations: &[Toleration] = spec.tolerations.as_deref().unwrap_or_default();
    let mut taints: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        taints.push(Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
    }
    for t in taints.iter().filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute") {
        if !tolerations.iter().any(|tol| tolerates(tol, t)) {
            return Some(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                t.key,
                t.value.as_deref().unwrap_or_default()
            ));
        }
    }
    if let Some(sel) = &spec.node_selector
        && sel.iter().any(|(k, v)| labels.get(k) != Some(v))
    {
        return Some("node(s) didn't match Pod's node affinity/selector".into());
    }
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref())
        .map(|r| r.node_selector_terms.as_slice());
    let node_name = node.metadata.name.as_deref().unwrap_or_default();
    if let Some(terms) = terms
        && !terms.iter().any(|t| term_matches(t, labels, node_name))
    {
        return Some("node(s) didn't match Pod's node affinity/selector".into());
    }
    None
}

/// A node's free resources (allocatable minus bound requests) and free pod slots (`None`: not declared).
#[derive(Debug, Clone)]
struct Room {
    free: ResourceList,
    pods: Option<i64>,
}

fn allocatable(node: &Node) -> (ResourceList, Option<i64>) {
    let status = node.status.as_ref();
    let list = status.and_then(|s| s.allocatable.as_ref().filter(|a| !a.is_empty()).or(s.capacity.as_ref()));
    let mut rl = list.and_then(|l| ResourceList::from_k8s(l).ok()).unwrap_or_default();
    let pods = rl.remove("pods").map(|q| q.to_string().parse::<i64>().unwrap_or(i64::MAX));
    (rl, pods)
}

impl Scheduler {
    /// A scheduler working through `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// One scheduling pass over every pending pod. Pods whose binding fails (say, bound meanwhile by someone
    /// else: 409) are skipped; list errors are returned.
    pub async fn step(&self) -> Result<ScheduleReport, kube::Error> {
        let nodes_api: Api<Node> = Api::all(self.client.clone());
        let pods_api: Api<Pod> = Api::all(self.client.clone());
        let mut nodes = nodes_api.list(&ListParams::default()).await?.items;
        nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let pods = pods_api.list(&ListParams::default()).await?.items;
        let mut rooms: BTreeMap<String, Room> = nodes
            .iter()
            .map(|n| {
                let (free, pods) = allocatable(n);
                (n.name_any(), Room { free, pods })
            })
            .collect();
        for p in &pods {
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty()) else {
                continue;
            };
            if terminal(p) {
                continue;
            }
            if let Some(room) = rooms.get_mut(node) {
                room.free = room.free.sub(&pod_requests(p).unwrap_or_default());
                room.pods = room.pods.map(|n| n - 1);
            }
        }
        let mut queue: Vec<&Pod> = pods.iter().filter(|p| pending(p)).collect();
        queue.sort_by(|a, b| {
            let prio = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            prio(b)
                .cmp(&prio(a))
                .then_with(|| a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp))
                .then_with(|| namespaced_key(&a.metadata).cmp(&namespaced_key(&b.metadata)))
        });
        let mut report = ScheduleReport::default();
        for pod in queue {
            let requests = match pod_requests(pod) {
                Ok(r) => r,
                Err(_) => {
                    self.mark_unschedulable(pod, "the pod's resource requests cannot be parsed").await;
                    report.unschedulable.push(namespaced_key(&pod.metadata));
                    continue;
                }
            };
            let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
            let mut chosen = None;
            for node in &nodes {
                if let Some(why) = predicate_failure(pod, node) {
                    *reasons.entry(why).or_default() += 1;
                    continue;
                }
                let Some(room) = rooms.get(&node.name_any()) else { continue };
                if !requests.fits(&room.free) {
                    *reasons.entry("Insufficient resources".into()).or_default() += 1;
                    continue;
                }
                if room.pods.is_some_and(|n| n < 1) {
                    *reasons.entry("Too many pods".into()).or_default() += 1;
                    continue;
                }
                chosen = Some(node.name_any());
                break;
            }
            let Some(node) = chosen else {
                let detail: Vec<String> = reasons.iter().map(|(why, n)| format!("{n} {why}")).collect();
                let message = format!("0/{} nodes are available: {}.", nodes.len(), detail.join(", "));
                self.mark_unschedulable(pod, &message).await;
                report.unschedulable.push(namespaced_key(&pod.metadata));
                continue;
            };
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": pod.name_any(), "namespace": ns, "uid": pod.metadata.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            });
            let bound: Result<kube::core::Status, _> =
                api.create_subresource("binding", &pod.name_any(), &PostParams::default(), &binding).await;
            if bound.is_ok() {
                if let Some(room) = rooms.get_mut(&node) {
                    room.free = room.free.sub(&requests);
                    room.pods = room.pods.map(|n| n - 1);
                }
                report.bound.push((namespaced_key(&pod.metadata), node));
            }
        }
        Ok(report)
    }

    /// Sets `PodScheduled=False`/`Unschedulable` unless the pod already says so (best effort: a failed write is
    /// retried on the next pass).
    async fn mark_unschedulable(&self, pod: &Pod, message: &str) {
        let conditions = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        if conditions.iter().any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
                && c.message.as_deref() == Some(message)
        }) {
            return;
        }
        let conditions: Vec<Value> = conditions.iter().filter_map(|c| serde_json::to_value(c).ok()).collect();
        let cond = json!({
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message,
            "lastProbeTime": null,
            "lastTransitionTime": pod.metadata.creation_timestamp,
        });
        let patch = json!({
            "metadata": {"resourceVersion": pod.metadata.resource_version},
            "status": {"conditions": with_condition(conditions, cond)},
        });
        let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.metadata.namespace.as_deref().unwrap_or_default());
        let _ = api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(patch)).await;
    }

    /// Runs [`step`](Self::step) every `every`, forever (errors are retried on the next tick). Spawn it and abort
    /// the task to stop.
    pub async fn run(self, every: Duration) {
        let mut tick = tokio::time::interval(every.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let _ = self.step().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nsr(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn node_selector_terms_match_labels_and_names() {
        let labels = BTreeMap::from([("zone".to_string(), "a".to_string()), ("size".to_string(), "8".to_string())]);
        let term = |exprs: Vec<NodeSelectorRequirement>| NodeSelectorTerm {
            match_expressions: Some(exprs),
            match_fields: None,
        };
        assert!(term_matches(&term(vec![nsr("zone", "In", &["a", "b"])]), &labels, "n"));
        assert!(!term_matches(&term(vec![nsr("zone", "NotIn", &["a"])]), &labels, "n"));
        assert!(term_matches(&term(vec![nsr("gpu", "DoesNotExist", &[])]), &labels, "n"));
        assert!(!term_matches(&term(vec![nsr("gpu", "Exists", &[])]), &labels, "n"));
        assert!(term_matches(&term(vec![nsr("size", "Gt", &["4"])]), &labels, "n"));
        assert!(!term_matches(&term(vec![nsr("size", "Lt", &["4"])]), &labels, "n"));
        assert!(!term_matches(&term(vec![]), &labels, "n"), "empty terms match nothing");
        let by_name =
            NodeSelectorTerm { match_expressions: None, match_fields: Some(vec![nsr("metadata.name", "In", &["n"])]) };
        assert!(term_matches(&by_name, &labels, "n"));
        assert!(!term_matches(&by_name, &labels, "m"));
    }
}
