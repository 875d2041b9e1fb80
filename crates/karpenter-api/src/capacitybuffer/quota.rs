//! ResourceQuotas over CapacityBuffers (the `LimitedByQuotas` condition, as cluster-autoscaler's buffer
//! controller does it): a buffer's virtual pods do not exist, so the API server never counts them against a
//! quota, but room kept for pods the quota would refuse is room nobody can use. So each buffer's replica count is
//! capped by what its namespace's quotas still allow.
//!
//! The quotas are shared: buffers are taken in order (the caller's: the controller goes by `namespace/name`),
//! and what each is allowed is reserved before the next one is sized. Per quota and per resource it limits
//! (`status.hard`), one chunk's request counts under its plain name and under `requests.<name>`; the room left
//! is `hard - used - reserved`, and the buffer gets at most `room / request` chunks (rounded down). A quota whose
//! status the API server has not filled yet limits nothing. Only quotas whose scopes select the template's pod
//! apply: buffer pods are never terminating (`NotTerminating` matches, `Terminating` does not), `BestEffort`
//! when the template requests neither cpu nor memory, `PriorityClass` by the template's `priorityClassName`,
//! `CrossNamespacePodAffinity` when an affinity term names other namespaces.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec, ResourceQuota, ScopedResourceSelectorRequirement};
use karpenter_requirements::resources::spec_requests;

use super::conditions;
use crate::condition::ConditionStatus;

/// What the quotas allow one buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaLimit {
    /// The replicas asked for.
    pub desired: i32,
    /// The replicas the quotas leave room for (at most `desired`).
    pub allowed: i32,
    /// The quotas that allow fewer than `desired`, by name.
    pub blocking: Vec<String>,
}

impl QuotaLimit {
    /// The `LimitedByQuotas` condition's status, reason and message.
    pub fn condition(&self) -> (ConditionStatus, &'static str, String) {
        if self.allowed < self.desired {
            let message = format!(
                "replicas limited from {} to {} by ResourceQuotas {}",
                self.desired,
                self.allowed,
                self.blocking.join(", ")
            );
            (ConditionStatus::True, conditions::REASON_QUOTAS_ALLOCATED, message)
        } else {
            (ConditionStatus::False, conditions::REASON_QUOTAS_ALLOCATED, String::new())
        }
    }
}

/// The quotas of the cluster and what earlier buffers reserved of them (see the module docs).
#[derive(Debug, Default)]
pub struct QuotaAllocator<'a> {
    quotas: Vec<&'a ResourceQuota>,
    /// Quota `namespace/name` → resource → nanos reserved by the buffers sized so far.
    reserved: BTreeMap<String, BTreeMap<String, i128>>,
}

fn quota_key(q: &ResourceQuota) -> String {
    format!("{}/{}", q.metadata.namespace.as_deref().unwrap_or("default"), q.metadata.name.as_deref().unwrap_or(""))
}

impl<'a> QuotaAllocator<'a> {
    /// An allocator over `quotas`, with nothing reserved yet.
    pub fn new(quotas: impl IntoIterator<Item = &'a ResourceQuota>) -> Self {
        Self { quotas: quotas.into_iter().collect(), reserved: BTreeMap::new() }
    }

    /// How many of `desired` chunks of `template` the quotas of `namespace` leave room for; the allowed chunks'
    /// requests are reserved for the buffers sized after this one. A template whose requests do not parse is
    /// not limited (resolution reports such templates where it reads them).
    pub fn allocate(&mut self, namespace: &str, template: &PodTemplateSpec, desired: i32) -> QuotaLimit {
        let mut limit = QuotaLimit { desired, allowed: desired, blocking: Vec::new() };
        let spec = template.spec.clone().unwrap_or_default();
        let Ok(requests) = spec_requests(&spec) else { return limit };
        // Each request under its own name and as `requests.<name>` (how quotas name extended resources).
        let mut per_chunk: BTreeMap<String, i128> = BTreeMap::new();
        for (name, q) in requests.iter() {
            if q.as_nanos() > 0 {
                per_chunk.insert(name.to_owned(), q.as_nanos());
                per_chunk.insert(format!("requests.{name}"), q.as_nanos());
            }
        }
        if per_chunk.is_empty() {
            return limit;
        }
        let best_effort = !per_chunk.contains_key("cpu") && !per_chunk.contains_key("memory");
        let matching: Vec<&ResourceQuota> = self
            .quotas
            .iter()
            .copied()
            .filter(|q| q.metadata.namespace.as_deref().unwrap_or("default") == namespace)
            .filter(|q| selects(q, &spec, best_effort))
            .collect();
        for quota in &matching {
            let fits = self.room_in(quota, &per_chunk);
            if fits < i128::from(desired) {
                limit.blocking.push(quota.metadata.name.clone().unwrap_or_default());
            }
            limit.allowed = limit.allowed.min(i32::try_from(fits.max(0)).unwrap_or(i32::MAX));
        }
        if limit.allowed > 0 {
            for quota in matching {
                let hard = quota.status.as_ref().and_then(|s| s.hard.as_ref());
                let reserved = self.reserved.entry(quota_key(quota)).or_default();
                for (name, nanos) in &per_chunk {
                    if hard.is_some_and(|h| h.contains_key(name)) {
                        *reserved.entry(name.clone()).or_default() += nanos * i128::from(limit.allowed);
                    }
                }
            }
        }
        limit
    }

    /// How many chunks fit the room `quota` has left (`i128::MAX` when it limits none of their resources).
    fn room_in(&self, quota: &ResourceQuota, per_chunk: &BTreeMap<String, i128>) -> i128 {
        let Some(status) = &quota.status else { return i128::MAX };
        let reserved = self.reserved.get(&quota_key(quota));
        let mut fits = i128::MAX;
        for (name, hard) in status.hard.iter().flatten() {
            let Some(&request) = per_chunk.get(name) else { continue };
            let nanos = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
                q.and_then(|q| q.0.parse::<karpenter_requirements::Quantity>().ok()).map_or(0, |q| q.as_nanos())
            };
            let used = nanos(status.used.as_ref().and_then(|u| u.get(name)));
            let taken = reserved.and_then(|r| r.get(name)).copied().unwrap_or(0);
            let room = nanos(Some(hard)) - used - taken;
            fits = fits.min(if room <= 0 { 0 } else { room / request });
        }
        fits
    }
}

/// Whether `quota`'s scopes and scope selector all select a pod of `spec`.
fn selects(quota: &ResourceQuota, spec: &PodSpec, best_effort: bool) -> bool {
    let Some(qs) = &quota.spec else { return true };
    let scopes = qs.scopes.iter().flatten().map(|s| ScopedResourceSelectorRequirement {
        scope_name: s.clone(),
        operator: "Exists".into(),
        values: None,
    });
    let expressions = qs.scope_selector.as_ref().and_then(|s| s.match_expressions.clone()).unwrap_or_default();
    scopes.chain(expressions).all(|r| scope_selects(&r, spec, best_effort))
}

fn scope_selects(r: &ScopedResourceSelectorRequirement, spec: &PodSpec, best_effort: bool) -> bool {
    match r.scope_name.as_str() {
        "NotTerminating" => true,
        "Terminating" => false,
        "BestEffort" => best_effort,
        "NotBestEffort" => !best_effort,
        "PriorityClass" => {
            let class = spec.priority_class_name.as_deref().filter(|c| !c.is_empty());
            let values = r.values.as_deref().unwrap_or_default();
            match r.operator.as_str() {
                "Exists" => class.is_some(),
                "DoesNotExist" => class.is_none(),
                "In" => class.is_some_and(|c| values.iter().any(|v| v == c)),
                "NotIn" => !class.is_some_and(|c| values.iter().any(|v| v == c)),
                _ => false,
            }
        }
        "CrossNamespacePodAffinity" => cross_namespace_affinity(spec),
        // A scope this code does not know selects nothing, so it cannot cap a buffer wrongly.
        _ => false,
    }
}

fn cross_namespace_affinity(spec: &PodSpec) -> bool {
    let Some(affinity) = &spec.affinity else { return false };
    let crosses = |t: &k8s_openapi::api::core::v1::PodAffinityTerm| {
        t.namespaces.as_ref().is_some_and(|n| !n.is_empty()) || t.namespace_selector.is_some()
    };
    let affinity_terms = affinity.pod_affinity.iter().flat_map(|a| {
        let required = a.required_during_scheduling_ignored_during_execution.iter().flatten();
        let preferred =
            a.preferred_during_scheduling_ignored_during_execution.iter().flatten().map(|w| &w.pod_affinity_term);
        required.chain(preferred)
    });
    let anti_terms = affinity.pod_anti_affinity.iter().flat_map(|a| {
        let required = a.required_during_scheduling_ignored_during_execution.iter().flatten();
        let preferred =
            a.preferred_during_scheduling_ignored_during_execution.iter().flatten().map(|w| &w.pod_affinity_term);
        required.chain(preferred)
    });
    affinity_terms.chain(anti_terms).any(crosses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(requests: serde_json::Value, priority_class: Option<&str>) -> PodTemplateSpec {
        serde_json::from_value(json!({"spec": {
            "priorityClassName": priority_class,
            "containers": [{"name": "c", "resources": {"requests": requests}}]
        }}))
        .unwrap()
    }

    fn quota(name: &str, hard: serde_json::Value, used: serde_json::Value, spec: serde_json::Value) -> ResourceQuota {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team"},
            "spec": spec,
            "status": {"hard": hard, "used": used},
        }))
        .unwrap()
    }

    #[test]
    fn buffers_share_the_room_a_quota_has_left_in_order() {
        let cpu = quota("cpu", json!({"requests.cpu": "4"}), json!({"requests.cpu": "1"}), json!({}));
        let quotas = [cpu];
        let mut a = QuotaAllocator::new(&quotas);
        let t = template(json!({"cpu": "1"}), None);
        // 3 CPUs left: the first buffer's 2 fit, the second gets the one left of its 3.
        let first = a.allocate("team", &t, 2);
        assert_eq!((first.allowed, first.condition().0), (2, ConditionStatus::False));
        let second = a.allocate("team", &t, 3);
        assert_eq!(second, QuotaLimit { desired: 3, allowed: 1, blocking: vec!["cpu".into()] });
        let (status, reason, message) = second.condition();
        assert_eq!((status, reason), (ConditionStatus::True, "ResourceQuotasAllocated"));
        assert_eq!(message, "replicas limited from 3 to 1 by ResourceQuotas cpu");
        // Nothing left, and another namespace's buffer is not limited by this quota.
        assert_eq!(a.allocate("team", &t, 1).allowed, 0);
        assert_eq!(a.allocate("other", &t, 5).allowed, 5);
    }

    #[test]
    fn plain_and_prefixed_names_and_the_tightest_resource_count() {
        let q = quota(
            "mixed",
            json!({"memory": "10Gi", "requests.example.com/gpu": "3", "pods": "100"}),
            json!({"memory": "1Gi"}),
            json!({}),
        );
        let quotas = [q];
        let mut a = QuotaAllocator::new(&quotas);
        // Memory allows 4 (9Gi / 2Gi), GPUs 3, `pods` is not counted for buffers.
        let t = template(json!({"memory": "2Gi", "example.com/gpu": "1"}), None);
        assert_eq!(a.allocate("team", &t, 10).allowed, 3);
        // A quota over-used already allows none.
        let over = quota("over", json!({"cpu": "1"}), json!({"cpu": "2"}), json!({}));
        let quotas = [over];
        assert_eq!(
            QuotaAllocator::new(&quotas).allocate("team", &template(json!({"cpu": "100m"}), None), 2).allowed,
            0
        );
    }

    #[test]
    fn scopes_decide_which_quotas_apply() {
        let t = template(json!({"cpu": "1"}), Some("high"));
        let best_effort = template(json!({}), None);
        let cases = [
            (json!({"scopes": ["NotTerminating"]}), true),
            (json!({"scopes": ["Terminating"]}), false),
            (json!({"scopes": ["BestEffort"]}), false),
            (json!({"scopes": ["NotBestEffort"]}), true),
            (
                json!({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}]}}),
                true,
            ),
            (
                json!({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "NotIn", "values": ["high"]}]}}),
                false,
            ),
            (
                json!({"scopeSelector": {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "DoesNotExist"}]}}),
                false,
            ),
            (json!({"scopes": ["CrossNamespacePodAffinity"]}), false),
            (json!({"scopes": ["SomethingNew"]}), false),
        ];
        for (spec, applies) in cases {
            let q = quota("q", json!({"cpu": "1"}), json!({}), spec.clone());
            let quotas = [q];
            let limit = QuotaAllocator::new(&quotas).allocate("team", &t, 3);
            assert_eq!(limit.allowed == 1, applies, "{spec}");
        }
        // A template without requests is never limited, whatever the scope.
        let q = quota("q", json!({"cpu": "1"}), json!({}), json!({"scopes": ["BestEffort"]}));
        let quotas = [q];
        assert_eq!(QuotaAllocator::new(&quotas).allocate("team", &best_effort, 3).allowed, 3);
    }

    #[test]
    fn a_quota_without_status_limits_nothing() {
        let mut q = quota("fresh", json!({"cpu": "1"}), json!({}), json!({}));
        q.status = None;
        let quotas = [q];
        assert_eq!(QuotaAllocator::new(&quotas).allocate("team", &template(json!({"cpu": "1"}), None), 4).allowed, 4);
    }
}
