//! Workload builders: DaemonSet and PodDisruptionBudget.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::names::{next_name, uid_for};
use crate::pod::{PodOptions, label_selector, pod_spec};

/// A DaemonSet: `pod` describes the pod template (its `name`, `node_name`, `phase` and status fields are ignored).
#[derive(Clone, Debug, Default)]
pub struct DaemonSetOptions {
    /// Default: `daemonset-N`.
    pub name: Option<String>,
    /// Default: `default`.
    pub namespace: Option<String>,
    /// Labels of the pod template and the selector; default `app: <name>`.
    pub selector: BTreeMap<String, String>,
    /// The pod template; `selector`'s labels are added to its own.
    pub pod: PodOptions,
}

/// A DaemonSet built from `o`.
pub fn daemon_set(o: DaemonSetOptions) -> DaemonSet {
    let name = o.name.clone().unwrap_or_else(|| next_name("daemonset"));
    let namespace = o.namespace.clone().unwrap_or_else(|| "default".to_string());
    let selector =
        if o.selector.is_empty() { BTreeMap::from([("app".to_string(), name.clone())]) } else { o.selector.clone() };
    let mut template_labels = o.pod.labels.clone();
    template_labels.extend(selector.clone());
    let template_spec = pod_spec(&PodOptions { node_name: None, ..o.pod.clone() });
    DaemonSet {
        metadata: ObjectMeta {
            uid: Some(uid_for("DaemonSet", &namespace, &name)),
            name: Some(name),
            namespace: Some(namespace),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            selector: label_selector(&selector),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(template_labels),
                    annotations: (!o.pod.annotations.is_empty()).then(|| o.pod.annotations.clone()),
                    ..Default::default()
                }),
                spec: Some(template_spec),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// A PodDisruptionBudget selecting pods by `labels`.
#[derive(Clone, Debug, Default)]
pub struct PdbOptions {
    /// Default: `pdb-N`.
    pub name: Option<String>,
    /// Default: `default`.
    pub namespace: Option<String>,
    /// The pods it selects (`spec.selector.matchLabels`).
    pub labels: BTreeMap<String, String>,
    /// `spec.minAvailable`: pods (a number or a percentage) that must stay available.
    pub min_available: Option<IntOrString>,
    /// `spec.maxUnavailable`: pods (a number or a percentage) that may be unavailable at once.
    pub max_unavailable: Option<IntOrString>,
    /// `status.disruptionsAllowed` as the disruption controller would compute it; `None` leaves status empty.
    pub disruptions_allowed: Option<i32>,
    /// `spec.unhealthyPodEvictionPolicy` (`IfHealthyBudget` or `AlwaysAllow`).
    pub unhealthy_pod_eviction_policy: Option<String>,
}

/// A PodDisruptionBudget built from `o`.
pub fn pod_disruption_budget(o: PdbOptions) -> PodDisruptionBudget {
    let name = o.name.clone().unwrap_or_else(|| next_name("pdb"));
    let namespace = o.namespace.clone().unwrap_or_else(|| "default".to_string());
    PodDisruptionBudget {
        metadata: ObjectMeta {
            uid: Some(uid_for("PodDisruptionBudget", &namespace, &name)),
            name: Some(name),
            namespace: Some(namespace),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(label_selector(&o.labels)),
            min_available: o.min_available.clone(),
            max_unavailable: o.max_unavailable.clone(),
            unhealthy_pod_eviction_policy: o.unhealthy_pod_eviction_policy.clone(),
        }),
        status: o
            .disruptions_allowed
            .map(|allowed| PodDisruptionBudgetStatus { disruptions_allowed: allowed, ..Default::default() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::map;

    #[test]
    fn daemon_set_template_carries_pod_options_and_selector() {
        let ds = daemon_set(DaemonSetOptions {
            name: Some("agent".into()),
            pod: PodOptions { requests: [("cpu", "100m")].into(), ..Default::default() },
            ..Default::default()
        });
        let spec = ds.spec.unwrap();
        assert_eq!(spec.selector.match_labels.as_ref().unwrap()["app"], "agent");
        assert_eq!(spec.template.metadata.unwrap().labels.unwrap()["app"], "agent");
        let requests = spec.template.spec.unwrap().containers[0].resources.clone().unwrap().requests.unwrap();
        assert_eq!(requests["cpu"].0, "100m");
    }

    #[test]
    fn pdb_carries_selector_and_budget() {
        let pdb = pod_disruption_budget(PdbOptions {
            labels: map(&[("app", "web")]),
            max_unavailable: Some(IntOrString::Int(1)),
            disruptions_allowed: Some(0),
            ..Default::default()
        });
        let spec = pdb.spec.unwrap();
        assert_eq!(spec.selector.unwrap().match_labels.unwrap()["app"], "web");
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        assert_eq!(pdb.status.unwrap().disruptions_allowed, 0);
    }
}
