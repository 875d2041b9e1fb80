//! The controllers a real cluster runs next to its API server, reduced to what clients observe: the garbage
//! collector (ownerReferences), the disruption controller (PodDisruptionBudget status) and the node lifecycle
//! controller's condition taints (TaintNodesByCondition). `Store::commit` queues their work and runs it before the
//! request returns, so their writes are ordinary writes (new resourceVersions, watch events) that follow the
//! write that caused them.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{DeleteOpts, EventType, ObjKey, Store, finalizers, meta, meta_mut, meta_str, set_field};

/// The taint a Node carries while its Ready condition is not True.
pub(crate) const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// The taint a Node carries while its Ready condition is Unknown.
const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";
/// The finalizer of an owner being deleted with `propagationPolicy: Foreground`.
pub(super) const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// A safety net against controllers feeding each other forever (never reached by the rules below).
const MAX_TASKS_PER_WRITE: usize = 1_000_000;

/// One unit of controller work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Task {
    /// Recount the pods of a PodDisruptionBudget (created, or its spec changed), then write its status.
    BudgetRecount(ObjKey),
    /// Write a PodDisruptionBudget's status from its current counts.
    BudgetStatus(ObjKey),
    /// Check the owners of one object (delete it when they are all gone, drop references to gone ones).
    Owners(ObjKey),
    /// Check the objects whose ownerReferences name this uid.
    Dependents(String),
    /// Finish the foreground deletion of this uid once no dependent blocks it.
    Foreground(String),
    /// Sync the condition taints of a Node.
    NodeTaints(String),
}

/// Owner kinds the garbage collector never judges gone (see `owner_state`).
const WORKLOAD_OWNER_KINDS: [&str; 3] = ["ReplicaSet", "StatefulSet", "ReplicationController"];

fn owner_refs(obj: &Value) -> Vec<Value> {
    meta(obj).and_then(|m| m.get("ownerReferences")).and_then(Value::as_array).cloned().unwrap_or_default()
}

fn owner_uids(obj: &Value) -> Vec<String> {
    owner_refs(obj).iter().filter_map(|r| r.get("uid").and_then(Value::as_str)).map(str::to_string).collect()
}

fn deleting(obj: &Value) -> bool {
    meta(obj).is_some_and(|m| m.contains_key("deletionTimestamp"))
}

fn foreground_deleting(obj: &Value) -> bool {
    deleting(obj) && finalizers(obj).iter().any(|f| f == FOREGROUND_FINALIZER)
}

/// The status of a condition of an object (`Ready` of a Node or Pod).
pub(crate) fn condition_status<'a>(obj: &'a Value, ctype: &str) -> Option<&'a str> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(ctype))
        .and_then(|c| c.get("status").and_then(Value::as_str))
}

/// The TaintNodesByCondition admission plugin, on Node create: a Node that is not (yet) Ready carries
/// `node.kubernetes.io/not-ready:NoSchedule`.
pub(super) fn admit_node(node: &mut Value) {
    if condition_status(node, "Ready") == Some("True") {
        return;
    }
    let mut taints = node.pointer("/spec/taints").and_then(Value::as_array).cloned().unwrap_or_default();
    if taints.iter().any(|t| t["key"] == NOT_READY_TAINT && t["effect"] == "NoSchedule") {
        return;
    }
    taints.push(json!({"key": NOT_READY_TAINT, "effect": "NoSchedule"}));
    if node.get("spec").is_none_or(|s| !s.is_object()) {
        set_field(node, "spec", Some(json!({})));
    }
    if let Some(spec) = node.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("taints".into(), Value::Array(taints));
    }
}

/// Whether a `metav1.LabelSelector` (JSON) selects these labels. `None` (no selector) selects nothing; an empty
/// selector selects everything (policy/v1 PodDisruptionBudget semantics).
pub(crate) fn selector_matches(selector: Option<&Value>, obj: &Value) -> bool {
    let Some(sel) = selector.filter(|s| s.is_object()) else { return false };
    let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let match_labels = sel.get("matchLabels").and_then(Value::as_object);
    if match_labels.is_some_and(|m| m.iter().any(|(k, v)| label(k) != v.as_str())) {
        return false;
    }
    let exprs = sel.get("matchExpressions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    exprs.iter().all(|e| {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match (e.get("operator").and_then(Value::as_str), label(key)) {
            (Some("In"), Some(v)) => values.contains(&v),
            (Some("NotIn"), v) => v.is_none_or(|v| !values.contains(&v)),
            (Some("Exists"), v) => v.is_some(),
            (Some("DoesNotExist"), v) => v.is_none(),
            _ => false,
        }
    })
}

/// `n` or `"p%"` of `total`, rounded up (as the disruption controller scales minAvailable/maxUnavailable).
fn scaled(v: &Value, total: i64) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let p: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((p.checked_mul(total)? + 99).div_euclid(100))
        }
        _ => None,
    }
}

/// The status the disruption controller computes for `pdb` over the pods of its namespace. The expected pod
/// count is the number of selected pods (the real controller asks the pods' controllers for their scale when the
/// budget is a percentage or a maxUnavailable; workload controllers are not served here).
#[cfg(test)]
pub(crate) fn budget_status(pdb: &Value, pods: &[Arc<Value>], now: &str) -> Value {
    let mut counts = BudgetCounts::default();
    for p in pods {
        counts.add(pdb, p, 1);
    }
    budget_status_from(pdb, counts, now)
}

/// The pods a budget selects, and how many of them are healthy (Ready, not being deleted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BudgetCounts {
    expected: i64,
    healthy: i64,
}

impl BudgetCounts {
    /// Counts `pod` in (`sign` 1) or out (`sign` -1) when the budget selects it.
    fn add(&mut self, pdb: &Value, pod: &Value, sign: i64) {
        if !selector_matches(pdb.pointer("/spec/selector"), pod) {
            return;
        }
        self.expected += sign;
        if !deleting(pod) && condition_status(pod, "Ready") == Some("True") {
            self.healthy += sign;
        }
    }
}

/// The status from a budget's counts (what `budget_status` computes from the pods).
pub(crate) fn budget_status_from(pdb: &Value, counts: BudgetCounts, now: &str) -> Value {
    let BudgetCounts { expected, healthy } = counts;
    let desired = match (pdb.pointer("/spec/maxUnavailable"), pdb.pointer("/spec/minAvailable")) {
        (Some(max), _) if !max.is_null() => scaled(max, expected).map(|m| (expected - m).max(0)),
        (_, Some(min)) if !min.is_null() => scaled(min, expected),
        _ => Some(0),
    };
    // A budget that cannot be computed allows no disruption (the controller's fail-safe).
    let (desired, allowed) = match desired {
        Some(d) if expected > 0 => (d, (healthy - d).max(0)),
        Some(d) => (d, 0),
        None => (0, 0),
    };
    let generation = meta(pdb).and_then(|m| m.get("generation")).cloned().unwrap_or(json!(1));
    let (cstatus, reason) = if allowed > 0 { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
    let old_condition = pdb
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|c| c["type"] == "DisruptionAllowed"));
    let since = match old_condition {
        Some(c) if c["status"] == cstatus => c.get("lastTransitionTime").cloned().unwrap_or(json!(now)),
        _ => json!(now),
    };
    json!({
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [{
            "type": "DisruptionAllowed", "status": cstatus, "reason": reason, "message": "",
            "observedGeneration": generation, "lastTransitionTime": since,
        }],
    })
}

/// Whether an owner reference still has its owner.
enum OwnerState {
    /// Present (or of a kind this server does not serve: the real collector cannot resolve it either and
    /// leaves the dependent alone).
    Solid,
    /// Gone, or being deleted in the foreground.
    Gone,
}

impl Store {
    fn queue(&mut self, task: Task) {
        if !self.tasks.contains(&task) {
            self.tasks.push_back(task);
        }
    }

    /// Keeps the uid and owner indexes current and queues the controllers' work for one committed change.
    pub(super) fn index_and_queue(&mut self, k: &ObjKey, etype: EventType, obj: &Value, prev: Option<&Value>) {
        let uid = meta_str(obj, "uid").unwrap_or_default().to_string();
        if let Some(prev) = prev {
            for owner in owner_uids(prev) {
                if let Some(set) = self.dependents.get_mut(&owner) {
                    set.remove(k);
                    if set.is_empty() {
                        self.dependents.remove(&owner);
                    }
                }
            }
        }
        let owners = owner_uids(obj);
        if etype != EventType::Deleted {
            for owner in &owners {
                self.dependents.entry(owner.clone()).or_default().insert(k.clone());
            }
        }
        match etype {
            EventType::Added => {
                self.uids.insert(uid.clone(), k.clone());
            }
            EventType::Deleted => {
                self.uids.remove(&uid);
            }
            EventType::Modified => {}
        }
        let (group, _, plural, ns, name) = k;
        if group.is_empty() && plural == "pods" {
            self.count_pod_in_budgets(ns, prev, (etype != EventType::Deleted).then_some(obj));
        }
        if group == "policy" && plural == "poddisruptionbudgets" {
            match etype {
                EventType::Deleted => {
                    self.budget_counts.remove(k);
                }
                _ if prev.is_none_or(|p| p.get("spec") != obj.get("spec")) || !self.budget_counts.contains_key(k) => {
                    self.queue(Task::BudgetRecount(k.clone()));
                }
                // Someone else wrote the status: the controller writes it back.
                _ => self.queue(Task::BudgetStatus(k.clone())),
            }
        }
        if group.is_empty() && plural == "nodes" && etype != EventType::Deleted {
            self.queue(Task::NodeTaints(name.clone()));
        }
        if etype == EventType::Deleted {
            self.queue(Task::Dependents(uid));
            for owner in owners {
                self.queue(Task::Foreground(owner));
            }
        } else {
            if !owners.is_empty() {
                self.queue(Task::Owners(k.clone()));
            }
            if foreground_deleting(obj) {
                self.queue(Task::Dependents(uid.clone()));
                self.queue(Task::Foreground(uid));
            }
        }
    }

    /// Runs the queued controller work (and the work it causes) to completion.
    pub(super) fn settle(&mut self) {
        let mut budget = MAX_TASKS_PER_WRITE;
        while let Some(task) = self.tasks.pop_front() {
            budget = budget.saturating_sub(1);
            if budget == 0 {
                self.tasks.clear();
                break;
            }
            match task {
                Task::BudgetRecount(k) => {
                    self.recount_budget(&k);
                    self.write_budget_status(&k);
                }
                Task::BudgetStatus(k) => self.write_budget_status(&k),
                Task::Owners(k) => self.check_owners(&k),
                Task::Dependents(uid) => {
                    let deps: Vec<ObjKey> =
                        self.dependents.get(&uid).map(|s| s.iter().cloned().collect()).unwrap_or_default();
                    for k in deps {
                        self.check_owners(&k);
                    }
                }
                Task::Foreground(uid) => self.finish_foreground(&uid),
                Task::NodeTaints(name) => self.sync_node_taints(&name),
            }
        }
    }

    /// Writes `new` over the stored object without admission (a controller's write); removes the object when it
    /// is being deleted and has no finalizer left.
    fn rewrite(&mut self, k: &ObjKey, new: Value) {
        let Some(old) = self.objects.get(k).cloned() else { return };
        if new == *old {
            return;
        }
        let removable = deleting(&new)
            && finalizers(&new).is_empty()
            && meta(&new).and_then(|m| m.get("deletionGracePeriodSeconds")).and_then(Value::as_i64).unwrap_or(0) <= 0;
        if removable {
            self.commit(k.clone(), new, EventType::Deleted, Some(old));
            if !k.3.is_empty() {
                self.remove_namespace_if_done(&k.3);
            }
        } else {
            self.commit(k.clone(), new, EventType::Modified, Some(old));
        }
    }

    // ----- disruption controller -----

    fn budgets_in(&self, ns: &str) -> Vec<(ObjKey, Arc<Value>)> {
        let lo: ObjKey = ("policy".into(), "v1".into(), "poddisruptionbudgets".into(), ns.to_string(), String::new());
        self.objects
            .range(lo..)
            .take_while(|(k, _)| k.0 == "policy" && k.2 == "poddisruptionbudgets" && k.3 == ns)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// A pod changed from `before` to `after` (`None`: absent): moves it between the counts of the namespace's
    /// budgets and queues the status of those whose counts changed. O(budgets in the namespace).
    fn count_pod_in_budgets(&mut self, ns: &str, before: Option<&Value>, after: Option<&Value>) {
        for (k, pdb) in self.budgets_in(ns) {
            let Some(counts) = self.budget_counts.get_mut(&k) else { continue };
            let old = *counts;
            if let Some(b) = before {
                counts.add(&pdb, b, -1);
            }
            if let Some(a) = after {
                counts.add(&pdb, a, 1);
            }
            if *counts != old {
                self.queue(Task::BudgetStatus(k));
            }
        }
    }

    /// Counts a budget's pods from scratch.
    fn recount_budget(&mut self, k: &ObjKey) {
        let Some(pdb) = self.objects.get(k).cloned() else { return };
        let lo: ObjKey = (String::new(), "v1".into(), "pods".into(), k.3.clone(), String::new());
        let mut counts = BudgetCounts::default();
        for (_, pod) in self.objects.range(lo..).take_while(|(pk, _)| pk.0.is_empty() && pk.2 == "pods" && pk.3 == k.3)
        {
            counts.add(&pdb, pod, 1);
        }
        self.budget_counts.insert(k.clone(), counts);
    }

    fn write_budget_status(&mut self, k: &ObjKey) {
        let Some(pdb) = self.objects.get(k).cloned() else { return };
        let Some(counts) = self.budget_counts.get(k).copied() else { return };
        let status = budget_status_from(&pdb, counts, &self.now());
        if pdb.get("status") != Some(&status) {
            let mut new = (*pdb).clone();
            set_field(&mut new, "status", Some(status));
            self.rewrite(k, new);
        }
    }

    /// The budgets of the pod's namespace that select it (their status is current: it is written after every
    /// change of their pods).
    pub(super) fn budgets_for(&self, pod: &Value) -> Vec<Arc<Value>> {
        let ns = meta_str(pod, "namespace").unwrap_or_default();
        self.budgets_in(ns)
            .into_iter()
            .filter(|(_, pdb)| selector_matches(pdb.pointer("/spec/selector"), pod))
            .map(|(_, v)| v)
            .collect()
    }

    // ----- garbage collector -----

    fn owner_state(&self, r: &Value) -> OwnerState {
        let api_version = r.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let kind = r.get("kind").and_then(Value::as_str).unwrap_or_default();
        let Some(served) = self.kinds.iter().find(|k| k.api_version() == api_version && k.kind == kind) else {
            return OwnerState::Solid;
        };
        // Workload kinds are served for the controller's watchers, but no workload controller runs here: the test
        // stand-ins create pods naming ReplicaSets and StatefulSets they never create, so an owner of these kinds
        // is never judged gone (as before they were served).
        if WORKLOAD_OWNER_KINDS.contains(&kind) {
            return OwnerState::Solid;
        }
        let uid = r.get("uid").and_then(Value::as_str).unwrap_or_default();
        match self.uids.get(uid).and_then(|k| self.objects.get(k).map(|o| (k, o))) {
            Some((k, owner)) if k.0 == served.group && k.2 == served.plural && !foreground_deleting(owner) => {
                OwnerState::Solid
            }
            _ => OwnerState::Gone,
        }
    }

    /// The collector's decision for one dependent: deleted (in the background) when none of its owners is left,
    /// otherwise stripped of the references to owners that are gone.
    fn check_owners(&mut self, k: &ObjKey) {
        let Some(obj) = self.objects.get(k).cloned() else { return };
        let refs = owner_refs(&obj);
        if refs.is_empty() {
            return;
        }
        let mut gone: Vec<String> = Vec::new();
        let mut solid = 0usize;
        for r in &refs {
            match self.owner_state(r) {
                OwnerState::Solid => solid += 1,
                OwnerState::Gone => gone.push(r.get("uid").and_then(Value::as_str).unwrap_or_default().to_string()),
            }
        }
        if gone.is_empty() {
            return;
        }
        if solid == 0 {
            if deleting(&obj) {
                return;
            }
            let Some(kind) = self.kind_of(&k.0, &k.1, &k.2) else { return };
            let opts = DeleteOpts { propagation: Some("Background".into()), ..DeleteOpts::default() };
            // A failed delete is retried on the next change, as the real collector's work queue would.
            let _ = self.delete(&kind, &k.3, &k.4, &opts);
        } else {
            let kept: Vec<Value> = refs
                .into_iter()
                .filter(|r| r.get("uid").and_then(Value::as_str).is_none_or(|u| !gone.iter().any(|g| g == u)))
                .collect();
            let mut new = (*obj).clone();
            if let Some(m) = meta_mut(&mut new) {
                m.insert("ownerReferences".into(), Value::Array(kept));
            }
            self.rewrite(k, new);
        }
    }

    /// `propagationPolicy: Orphan`: the dependents lose their references to the owner.
    pub(super) fn orphan_dependents(&mut self, owner_uid: &str) {
        let deps: Vec<ObjKey> = self.dependents.get(owner_uid).map(|s| s.iter().cloned().collect()).unwrap_or_default();
        for k in deps {
            let Some(obj) = self.objects.get(&k).cloned() else { continue };
            let kept: Vec<Value> = owner_refs(&obj)
                .into_iter()
                .filter(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid))
                .collect();
            let mut new = (*obj).clone();
            if let Some(m) = meta_mut(&mut new) {
                if kept.is_empty() {
                    m.remove("ownerReferences");
                } else {
                    m.insert("ownerReferences".into(), Value::Array(kept));
                }
            }
            self.rewrite(&k, new);
        }
    }

    /// Removes the foreground finalizer of an owner once no dependent with `blockOwnerDeletion: true` is left.
    fn finish_foreground(&mut self, owner_uid: &str) {
        let Some(k) = self.uids.get(owner_uid).cloned() else { return };
        let Some(owner) = self.objects.get(&k).cloned() else { return };
        if !foreground_deleting(&owner) {
            return;
        }
        let blocked = self.dependents.get(owner_uid).is_some_and(|deps| {
            deps.iter().filter_map(|d| self.objects.get(d)).any(|d| {
                owner_refs(d).iter().any(|r| {
                    r.get("uid").and_then(Value::as_str) == Some(owner_uid)
                        && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
                })
            })
        });
        if blocked {
            return;
        }
        let mut new = (*owner).clone();
        let left: Vec<Value> =
            finalizers(&owner).into_iter().filter(|f| f != FOREGROUND_FINALIZER).map(Value::String).collect();
        if let Some(m) = meta_mut(&mut new) {
            if left.is_empty() {
                m.remove("finalizers");
            } else {
                m.insert("finalizers".into(), Value::Array(left));
            }
        }
        self.rewrite(&k, new);
    }

    // ----- node lifecycle controller -----

    /// The condition taints: Ready=True clears `not-ready`/`unreachable`, Ready=False sets `not-ready`,
    /// Ready=Unknown sets `unreachable` (all NoSchedule). A Node without a Ready condition keeps what it has.
    fn sync_node_taints(&mut self, name: &str) {
        let k: ObjKey = (String::new(), "v1".into(), "nodes".into(), String::new(), name.to_string());
        let Some(node) = self.objects.get(&k).cloned() else { return };
        let want = match condition_status(&node, "Ready") {
            Some("True") => None,
            Some("False") => Some(NOT_READY_TAINT),
            Some(_) => Some(UNREACHABLE_TAINT),
            None => return,
        };
        let taints = node.pointer("/spec/taints").and_then(Value::as_array).cloned().unwrap_or_default();
        let is_condition_taint =
            |t: &Value| t["effect"] == "NoSchedule" && (t["key"] == NOT_READY_TAINT || t["key"] == UNREACHABLE_TAINT);
        let mut new_taints: Vec<Value> =
            taints.iter().filter(|t| !is_condition_taint(t) || want.is_some_and(|w| t["key"] == w)).cloned().collect();
        if let Some(w) = want
            && !new_taints.iter().any(|t| t["key"] == w && t["effect"] == "NoSchedule")
        {
            new_taints.push(json!({"key": w, "effect": "NoSchedule"}));
        }
        if new_taints == taints {
            return;
        }
        let mut new = (*node).clone();
        if new.get("spec").is_none_or(|s| !s.is_object()) {
            set_field(&mut new, "spec", Some(json!({})));
        }
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            if new_taints.is_empty() {
                spec.remove("taints");
            } else {
                spec.insert("taints".into(), Value::Array(new_taints));
            }
        }
        self.rewrite(&k, new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: Value, ready: bool) -> Arc<Value> {
        let status = if ready { "True" } else { "False" };
        Arc::new(
            json!({"metadata": {"labels": labels}, "status": {"conditions": [{"type": "Ready", "status": status}]}}),
        )
    }

    #[test]
    fn label_selectors_as_objects() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "a"}}});
        assert!(!selector_matches(None, &o));
        assert!(selector_matches(Some(&json!({})), &o));
        assert!(selector_matches(Some(&json!({"matchLabels": {"app": "web"}})), &o));
        assert!(!selector_matches(Some(&json!({"matchLabels": {"app": "db"}})), &o));
        let e = |op: &str, vals: Value| json!({"matchExpressions": [{"key": "tier", "operator": op, "values": vals}]});
        assert!(selector_matches(Some(&e("In", json!(["a", "b"]))), &o));
        assert!(!selector_matches(Some(&e("NotIn", json!(["a"]))), &o));
        assert!(selector_matches(Some(&e("Exists", json!([]))), &o));
        assert!(!selector_matches(Some(&e("DoesNotExist", json!([]))), &o));
        assert!(!selector_matches(Some(&e("Bogus", json!([]))), &o));
    }

    #[test]
    fn budget_status_as_the_disruption_controller_computes_it() {
        let pods: Vec<Arc<Value>> = vec![
            pod(json!({"app": "web"}), true),
            pod(json!({"app": "web"}), true),
            pod(json!({"app": "web"}), true),
            pod(json!({"app": "web"}), false),
            pod(json!({"app": "db"}), true),
        ];
        let pdb = |spec: Value| json!({"metadata": {"generation": 2}, "spec": spec});
        let sel = json!({"matchLabels": {"app": "web"}});
        let s = budget_status(&pdb(json!({"selector": sel, "minAvailable": 2})), &pods, "t");
        assert_eq!((s["expectedPods"].clone(), s["currentHealthy"].clone()), (json!(4), json!(3)));
        assert_eq!((s["desiredHealthy"].clone(), s["disruptionsAllowed"].clone()), (json!(2), json!(1)));
        assert_eq!(s["observedGeneration"], 2);
        assert_eq!(s["conditions"][0]["status"], "True");
        // 50% of 4 rounds up to 2 unavailable -> 2 desired; 30% of 4 = 1.2 -> 2 available.
        let s = budget_status(&pdb(json!({"selector": sel, "maxUnavailable": "50%"})), &pods, "t");
        assert_eq!((s["desiredHealthy"].clone(), s["disruptionsAllowed"].clone()), (json!(2), json!(1)));
        let s = budget_status(&pdb(json!({"selector": sel, "minAvailable": "30%"})), &pods, "t");
        assert_eq!(s["desiredHealthy"], 2);
        let s = budget_status(&pdb(json!({"selector": sel, "maxUnavailable": 0})), &pods, "t");
        assert_eq!((s["desiredHealthy"].clone(), s["disruptionsAllowed"].clone()), (json!(4), json!(0)));
        assert_eq!(
            (s["conditions"][0]["status"].clone(), s["conditions"][0]["reason"].clone()),
            (json!("False"), json!("InsufficientPods"))
        );
        // No pods selected: nothing allowed (the controller's guard for budgets whose pods are still coming).
        let s =
            budget_status(&pdb(json!({"selector": {"matchLabels": {"app": "none"}}, "minAvailable": 0})), &pods, "t");
        assert_eq!((s["expectedPods"].clone(), s["disruptionsAllowed"].clone()), (json!(0), json!(0)));
        // A malformed percentage fails safe.
        let s = budget_status(&pdb(json!({"selector": sel, "minAvailable": "x"})), &pods, "t");
        assert_eq!(s["disruptionsAllowed"], 0);
    }

    #[test]
    fn nodes_not_ready_on_create_get_the_taint() {
        let mut n = json!({"metadata": {"name": "n"}});
        admit_node(&mut n);
        assert_eq!(n["spec"]["taints"], json!([{"key": NOT_READY_TAINT, "effect": "NoSchedule"}]));
        admit_node(&mut n);
        assert_eq!(n["spec"]["taints"].as_array().map(Vec::len), Some(1));
        let mut ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        admit_node(&mut ready);
        assert!(ready.pointer("/spec/taints").is_none());
    }
}
