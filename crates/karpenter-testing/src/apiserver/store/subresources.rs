//! `pods/binding` and `pods/eviction`, as the real server's pod storage answers them.

use serde_json::{Value, json};

use super::controllers::condition_status;
use super::{DeleteOpts, EventType, ResourceKind, Store, key, meta_mut, meta_str, set_field};
use crate::apiserver::status::ApiError;

fn success(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

/// The message of the 429 an eviction gets while a budget allows no disruption.
pub(crate) const EVICTION_REFUSED: &str = "Cannot evict pod as it would violate the pod's disruption budget.";
/// The message of the 500 an eviction gets when several budgets select the pod.
pub(crate) const SEVERAL_BUDGETS: &str =
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.";

impl Store {
    /// POST pods/{name}/binding: sets `spec.nodeName` (and the PodScheduled condition) of an unbound pod.
    pub(crate) fn bind(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        binding: &Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        if let Some(k) = binding.get("kind").and_then(Value::as_str)
            && !k.is_empty()
            && k != "Binding"
        {
            return Err(ApiError::bad_request(format!("the body kind {k:?} is not Binding")));
        }
        if let Some(body_name) = meta_str(binding, "name")
            && body_name != name
        {
            return Err(ApiError::bad_request("name in URL does not match name in Binding object"));
        }
        let target = binding.get("target");
        let node = target.and_then(|t| t.get("name")).and_then(Value::as_str).unwrap_or_default();
        if node.is_empty() {
            return Err(ApiError::invalid("", "bindings", name, "target.name: Required value"));
        }
        if let Some(tk) = target.and_then(|t| t.get("kind")).and_then(Value::as_str)
            && !tk.is_empty()
            && tk != "Node"
        {
            return Err(ApiError::invalid(
                "",
                "bindings",
                name,
                format!("target.kind: Unsupported value: {tk:?}: supported values: \"Node\""),
            ));
        }
        let old = self.get(kind, namespace, name)?;
        if let Some(uid) = meta_str(binding, "uid")
            && !uid.is_empty()
            && Some(uid) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                "",
                "pods/binding",
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        if meta_str(&old, "deletionTimestamp").is_some() {
            return Err(ApiError::internal(format!("pod {name} is being deleted, cannot be assigned to a host")));
        }
        if let Some(bound) = old.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            return Err(ApiError::conflict(
                "",
                "pods/binding",
                name,
                &format!("pod {name} is already assigned to node {bound:?}"),
            ));
        }
        if old.pointer("/spec/schedulingGates").and_then(Value::as_array).is_some_and(|g| !g.is_empty()) {
            return Err(ApiError::internal(format!("pod {name} has non-empty .spec.schedulingGates")));
        }
        let mut new = (*old).clone();
        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("nodeName".into(), json!(node));
        } else {
            set_field(&mut new, "spec", Some(json!({"nodeName": node})));
        }
        if let Some(annotations) = binding.pointer("/metadata/annotations").and_then(Value::as_object)
            && let Some(m) = meta_mut(&mut new)
        {
            let target = m.entry("annotations").or_insert_with(|| json!({}));
            if let Some(t) = target.as_object_mut() {
                for (k, v) in annotations {
                    t.insert(k.clone(), v.clone());
                }
            }
        }
        let now = self.now();
        let mut conditions = new.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        conditions.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
        conditions
            .push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}));
        if new.get("status").is_none_or(|s| !s.is_object()) {
            set_field(&mut new, "status", Some(json!({})));
        }
        if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
            status.insert("conditions".into(), Value::Array(conditions));
        }
        if !dry_run {
            self.commit(key(kind, namespace, name), new, EventType::Modified, Some(old));
        }
        Ok(success(201))
    }

    /// POST pods/{name}/eviction (policy/v1 Eviction): deletes the pod unless a PodDisruptionBudget that
    /// selects it allows no disruption (429). Pods that are Pending, Succeeded, Failed or already being deleted
    /// are deleted regardless of budgets, as on the real server.
    pub(crate) fn evict(
        &mut self,
        kind: &ResourceKind,
        namespace: &str,
        name: &str,
        eviction: &Value,
        opts: DeleteOpts,
    ) -> Result<Value, ApiError> {
        if let Some(k) = eviction.get("kind").and_then(Value::as_str)
            && !k.is_empty()
            && k != "Eviction"
        {
            return Err(ApiError::bad_request(format!("the body kind {k:?} is not Eviction")));
        }
        if let Some(body_name) = meta_str(eviction, "name")
            && !body_name.is_empty()
            && body_name != name
        {
            return Err(ApiError::bad_request("name in URL does not match name in Eviction object"));
        }
        let pod = self.get(kind, namespace, name)?;
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending");
        let ignore_budgets =
            matches!(phase, "Pending" | "Succeeded" | "Failed") || meta_str(&pod, "deletionTimestamp").is_some();
        if !ignore_budgets {
            let budgets = self.budgets_for(&pod);
            if budgets.len() > 1 {
                return Err(ApiError::failure_500(SEVERAL_BUDGETS));
            }
            if let Some(pdb) = budgets.first() {
                let status = |f: &str| pdb.pointer(&format!("/status/{f}")).and_then(Value::as_i64).unwrap_or(0);
                let ready = condition_status(&pod, "Ready") == Some("True");
                let always_allow =
                    pdb.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str) == Some("AlwaysAllow");
                let healthy_budget =
                    status("currentHealthy") >= status("desiredHealthy") && status("desiredHealthy") > 0;
                let unhealthy_may_go = !ready && (always_allow || healthy_budget);
                if !unhealthy_may_go && status("disruptionsAllowed") <= 0 {
                    let pdb_name = meta_str(pdb, "name").unwrap_or_default();
                    return Err(ApiError::too_many_requests(
                        EVICTION_REFUSED,
                        vec![(
                            "DisruptionBudget".into(),
                            format!(
                                "The disruption budget {pdb_name} needs {} healthy pods and has {} currently",
                                status("desiredHealthy"),
                                status("currentHealthy")
                            ),
                        )],
                    ));
                }
            }
        }
        // The budget's disruptionsAllowed drops with the deletion itself: the status is recomputed right after
        // this write, and the evicted pod no longer counts as healthy.
        self.delete(kind, namespace, name, &opts)?;
        Ok(success(201))
    }
}
