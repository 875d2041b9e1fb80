//! Default topology spread constraints: the scheduler config (`--scheduler-config` / `SCHEDULER_CONFIG`) that
//! mirrors kube-scheduler's `PodTopologySpread` default constraints, and how they are given to pods.
//!
//! The config is a YAML or JSON document `{podTopologySpread: {defaultConstraints: [...]}}`, decoded strictly
//! (an unknown field is an error). An empty document configures nothing: kube-scheduler's built-in "System"
//! defaults are **not** applied, so a cluster relying on them must list them here.
//!
//! A pending pod that declares no `topologySpreadConstraints` of its own gets every default, each with a
//! selector derived the way kube-scheduler derives it ([`default_selector`]); a pod whose derived selector is
//! empty gets none. The defaults live only in the simulation's view of the pod (never in the pod itself) and
//! then behave like the pod's own constraints: `ScheduleAnyway` ones are relaxed like any other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use karpenter_api::CompactPod;
use karpenter_api::validation::qualified_name_errors;
use serde::Deserialize;

use crate::snapshot::ClusterSnapshot;
// The selectors are data the snapshot holds, so they live there (no import back into this module); kept at
// their old path too.
pub use crate::snapshot::{ControllerSelector, ServiceSelector};

/// The parsed scheduler config. `Default` is the empty config: no default constraints.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulerConfig {
    /// `podTopologySpread.defaultConstraints`, validated; none has a label selector (it is derived per pod).
    pub default_constraints: Arc<[TopologySpreadConstraint]>,
    /// What the config says that has no effect, one message per constraint, naming it (the controller logs
    /// them as warnings at start-up, `simulate` shows them as notes): today `minDomains` on a `ScheduleAnyway`
    /// constraint, which is dropped.
    pub warnings: Arc<[String]>,
}

/// Why a scheduler config was rejected; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerConfigError {
    /// Not a YAML/JSON document of the supported shape (an unknown field, a wrong type).
    #[error("scheduler config: {0}")]
    Decode(String),
    /// A default constraint breaks a rule.
    #[error("scheduler config: podTopologySpread.defaultConstraints[{index}]: {message}")]
    Constraint {
        /// Index in `defaultConstraints`.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    pod_topology_spread: Option<RawSpread>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSpread {
    #[serde(default)]
    default_constraints: Option<Vec<RawConstraint>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConstraint {
    #[serde(default)]
    max_skew: i32,
    #[serde(default)]
    topology_key: String,
    #[serde(default)]
    when_unsatisfiable: String,
    #[serde(default)]
    label_selector: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    match_label_keys: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    min_domains: Option<i32>,
    #[serde(default)]
    node_affinity_policy: Option<String>,
    #[serde(default)]
    node_taints_policy: Option<String>,
}

/// The config document: YAML (which JSON is a subset of) with the `yaml` feature.
#[cfg(feature = "yaml")]
fn decode(text: &str) -> Result<Option<RawConfig>, SchedulerConfigError> {
    serde_saphyr::from_str(text).map_err(|e| SchedulerConfigError::Decode(e.to_string()))
}

/// The config document: JSON only without the `yaml` feature. A document that is not JSON may well be valid
/// YAML, so the error says which feature reads it rather than only what the JSON parser saw.
#[cfg(not(feature = "yaml"))]
fn decode(text: &str) -> Result<Option<RawConfig>, SchedulerConfigError> {
    serde_json::from_str(text).map_err(|e| {
        let reason = if e.is_syntax() || e.is_eof() {
            format!("not JSON ({e}); YAML configs need karpenter-scheduler's `yaml` feature")
        } else {
            e.to_string()
        };
        SchedulerConfigError::Decode(reason)
    })
}

impl SchedulerConfig {
    /// Parses and validates a scheduler config (YAML or JSON; JSON only without the `yaml` feature). Blank text
    /// is the empty config.
    pub fn parse(text: &str) -> Result<SchedulerConfig, SchedulerConfigError> {
        if text.trim().is_empty() {
            return Ok(SchedulerConfig::default());
        }
        let raw = decode(text)?;
        let raw = raw.unwrap_or_default();
        let constraints = raw.pod_topology_spread.unwrap_or_default().default_constraints.unwrap_or_default();
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(constraints.len());
        let mut warnings = Vec::new();
        for (index, c) in constraints.into_iter().enumerate() {
            let bad = |message: String| SchedulerConfigError::Constraint { index, message };
            if c.max_skew <= 0 {
                return Err(bad(format!("maxSkew must be greater than zero, got {}", c.max_skew)));
            }
            if c.topology_key.is_empty() {
                return Err(bad("topologyKey is required".into()));
            }
            if let Some(e) = qualified_name_errors(&c.topology_key).into_iter().next() {
                return Err(bad(format!("topologyKey {:?} is not a qualified label name: {e}", c.topology_key)));
            }
            if c.when_unsatisfiable != "DoNotSchedule" && c.when_unsatisfiable != "ScheduleAnyway" {
                return Err(bad(format!(
                    "whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway, got {:?}",
                    c.when_unsatisfiable
                )));
            }
            if c.label_selector.is_some() {
                return Err(bad("labelSelector is not allowed: it is derived for each pod".into()));
            }
            if c.match_label_keys.is_some() {
                return Err(bad("matchLabelKeys is not allowed in default constraints".into()));
            }
            let mut min_domains = c.min_domains;
            if let Some(m) = min_domains {
                if c.when_unsatisfiable != "DoNotSchedule" {
                    // Accepted as upstream accepts it; kube-scheduler reads minDomains only for DoNotSchedule
                    // (a soft constraint only scores nodes), so it is dropped here and the user told.
                    warnings.push(format!(
                        "scheduler config: podTopologySpread.defaultConstraints[{index}] (topologyKey {}, \
                         whenUnsatisfiable {}): minDomains {m} has no effect unless whenUnsatisfiable is \
                         DoNotSchedule; ignored",
                        c.topology_key, c.when_unsatisfiable
                    ));
                    min_domains = None;
                } else if m < 1 {
                    return Err(bad(format!("minDomains must be at least 1, got {m}")));
                }
            }
            for (field, v) in
                [("nodeAffinityPolicy", &c.node_affinity_policy), ("nodeTaintsPolicy", &c.node_taints_policy)]
            {
                if let Some(v) = v
                    && v != "Honor"
                    && v != "Ignore"
                {
                    return Err(bad(format!("{field} must be Honor or Ignore, got {v:?}")));
                }
            }
            if !seen.insert((c.topology_key.clone(), c.when_unsatisfiable.clone())) {
                return Err(bad(format!(
                    "another default constraint has topologyKey {:?} and whenUnsatisfiable {}",
                    c.topology_key, c.when_unsatisfiable
                )));
            }
            out.push(TopologySpreadConstraint {
                max_skew: c.max_skew,
                topology_key: c.topology_key,
                when_unsatisfiable: c.when_unsatisfiable,
                min_domains,
                node_affinity_policy: c.node_affinity_policy,
                node_taints_policy: c.node_taints_policy,
                label_selector: None,
                match_label_keys: None,
            });
        }
        Ok(SchedulerConfig { default_constraints: out.into(), warnings: warnings.into() })
    }

    /// Whether any default constraint is configured.
    pub fn is_empty(&self) -> bool {
        self.default_constraints.is_empty()
    }
}

/// The selector kube-scheduler gives `pod`'s default spread constraints: the labels of every Service of its
/// namespace that selects it (merged in name order), then its controller's selector (a ReplicationController's
/// labels overwrite; a ReplicaSet's or StatefulSet's terms are ANDed). `None` when that is empty: an empty
/// selector would count every pod of the namespace, so such a pod gets no defaults.
pub fn default_selector(pod: &CompactPod, snapshot: &ClusterSnapshot) -> Option<LabelSelector> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    for s in snapshot.services.iter().filter(|s| s.namespace == ns) {
        let Some(sel) = &s.selector else { continue };
        if sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            set.extend(sel.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    let mut exprs: Vec<LabelSelectorRequirement> = Vec::new();
    let owner = pod.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
    if let Some(o) = owner
        && let Some(c) = snapshot.controllers.iter().find(|c| c.namespace == ns && c.kind == o.kind && c.name == o.name)
    {
        if c.kind == "ReplicationController" {
            set.extend(c.selector.match_labels.iter().flatten().map(|(k, v)| (k.clone(), v.clone())));
        } else {
            exprs.extend(c.selector.match_labels.iter().flatten().map(|(k, v)| LabelSelectorRequirement {
                key: k.clone(),
                operator: "In".into(),
                values: Some(vec![v.clone()]),
            }));
            exprs.extend(c.selector.match_expressions.iter().flatten().cloned());
        }
    }
    if set.is_empty() && exprs.is_empty() {
        return None;
    }
    Some(LabelSelector {
        match_labels: (!set.is_empty()).then_some(set),
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    })
}

/// A pod's workload as far as its default constraints go: (namespace, controller `kind/name`, labels).
type WorkloadKey = (String, Option<String>, Vec<(String, String)>);

/// Gives pods their default constraints, once per pass; pods of one workload (same namespace, controller and
/// labels) share one list.
pub(crate) struct DefaultSpread<'s> {
    config: &'s SchedulerConfig,
    snapshot: &'s ClusterSnapshot,
    cache: BTreeMap<WorkloadKey, Option<Arc<[TopologySpreadConstraint]>>>,
}

impl<'s> DefaultSpread<'s> {
    pub(crate) fn new(config: &'s SchedulerConfig, snapshot: &'s ClusterSnapshot) -> Self {
        DefaultSpread { config, snapshot, cache: BTreeMap::new() }
    }

    /// The constraints the simulation gives `pod` in place of its own: `None` when it has its own, when no
    /// default is configured, or when its derived selector is empty.
    pub(crate) fn for_pod(&mut self, pod: &CompactPod) -> Option<Arc<[TopologySpreadConstraint]>> {
        if self.config.is_empty() || pod.spec.topology_spread_constraints.as_ref().is_some_and(|c| !c.is_empty()) {
            return None;
        }
        let owner = pod.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
        let key = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            owner.map(|o| format!("{}/{}", o.kind, o.name)),
            pod.metadata.labels.iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect(),
        );
        let (config, snapshot) = (self.config, self.snapshot);
        self.cache
            .entry(key)
            .or_insert_with(|| {
                let selector = default_selector(pod, snapshot)?;
                Some(
                    config
                        .default_constraints
                        .iter()
                        .map(|c| TopologySpreadConstraint { label_selector: Some(selector.clone()), ..c.clone() })
                        .collect(),
                )
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    const ZONE_AND_HOST: &str = "podTopologySpread:
  defaultConstraints:
  - maxSkew: 5
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
  - maxSkew: 3
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
";

    /// `SchedulerConfig::parse`, with the YAML fixtures handed over as their JSON equivalent when the crate is
    /// built without `yaml` (JSON only), so the same rules are checked in both builds.
    fn parse(text: &str) -> Result<SchedulerConfig, SchedulerConfigError> {
        #[cfg(not(feature = "yaml"))]
        if let Ok(value) = serde_saphyr::from_str::<serde_json::Value>(text) {
            return SchedulerConfig::parse(&value.to_string());
        }
        SchedulerConfig::parse(text)
    }

    #[test]
    #[cfg(not(feature = "yaml"))]
    fn yaml_without_the_feature_is_an_error_naming_it() {
        let message = SchedulerConfig::parse(ZONE_AND_HOST).unwrap_err().to_string();
        assert!(message.contains("not JSON") && message.contains("`yaml` feature"), "{message}");
        // JSON is read, and a JSON document of the wrong shape is reported as such, not as missing YAML.
        assert_eq!(SchedulerConfig::parse(r#"{"podTopologySpread":{}}"#), Ok(SchedulerConfig::default()));
        let message = SchedulerConfig::parse(r#"{"podTopologySpread":{"defaultingType":"List"}}"#).unwrap_err();
        assert!(message.to_string().contains("defaultingType") && !message.to_string().contains("yaml"));
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_yaml_and_json() {
        let c = parse(ZONE_AND_HOST).unwrap();
        assert_eq!(c.default_constraints.len(), 2);
        assert_eq!(c.default_constraints[0].max_skew, 5);
        assert_eq!(c.default_constraints[1].topology_key, "kubernetes.io/hostname");
        let j = parse(
            r#"{"podTopologySpread":{"defaultConstraints":[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"DoNotSchedule","minDomains":3}]}}"#,
        )
        .unwrap();
        assert_eq!(j.default_constraints[0].min_domains, Some(3));
        assert!(parse("").unwrap().is_empty());
        assert!(parse("  \n").unwrap().is_empty());
        assert!(parse("{}").unwrap().is_empty());
        assert!(parse("podTopologySpread: {}").unwrap().is_empty());
    }

    #[test]
    fn rejects_bad_input_naming_the_field() {
        assert!(
            err("podTopologySpread: {defaultingType: List}").contains("defaultingType"),
            "{}",
            err("podTopologySpread: {defaultingType: List}")
        );
        assert!(err("profiles: []").contains("profiles"));
        assert!(err("podTopologySpread: [1]").starts_with("scheduler config:"));
        assert!(err("[unclosed").starts_with("scheduler config:"));
        let one = |c: &str| format!("podTopologySpread:\n  defaultConstraints:\n  - {c}\n");
        let cases = [
            ("{topologyKey: k, whenUnsatisfiable: DoNotSchedule}", "[0]: maxSkew must be greater than zero"),
            (
                "{maxSkew: -1, topologyKey: k, whenUnsatisfiable: DoNotSchedule}",
                "maxSkew must be greater than zero, got -1",
            ),
            ("{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}", "topologyKey is required"),
            (
                "{maxSkew: 1, topologyKey: 'bad key!', whenUnsatisfiable: DoNotSchedule}",
                "is not a qualified label name",
            ),
            ("{maxSkew: 1, topologyKey: k}", "whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway"),
            ("{maxSkew: 1, topologyKey: k, whenUnsatisfiable: Sometimes}", "got \"Sometimes\""),
            (
                "{maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {a: b}}}",
                "labelSelector is not allowed",
            ),
            ("{maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule, matchLabelKeys: [a]}", "matchLabelKeys"),
            (
                "{maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule, minDomains: 0}",
                "minDomains must be at least 1",
            ),
            (
                "{maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: Maybe}",
                "nodeTaintsPolicy",
            ),
            ("{maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule, maxskew: 2}", "maxskew"),
            ("{maxSkew: one, topologyKey: k, whenUnsatisfiable: DoNotSchedule}", "scheduler config:"),
        ];
        for (c, want) in cases {
            let e = err(&one(c));
            assert!(e.contains(want), "{c}: {e}");
        }
        let dup = "podTopologySpread:\n  defaultConstraints:\n  - {maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule}\n  - {maxSkew: 2, topologyKey: k, whenUnsatisfiable: DoNotSchedule}\n";
        assert!(err(dup).contains("defaultConstraints[1]: another default constraint"), "{}", err(dup));
        let ok = "podTopologySpread:\n  defaultConstraints:\n  - {maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule}\n  - {maxSkew: 2, topologyKey: k, whenUnsatisfiable: ScheduleAnyway}\n";
        assert_eq!(parse(ok).unwrap().default_constraints.len(), 2);
        assert!(parse(ok).unwrap().warnings.is_empty());
    }

    #[test]
    fn min_domains_on_a_schedule_anyway_default_is_accepted_with_a_warning() {
        let text = "podTopologySpread:\n  defaultConstraints:\n  \
                    - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, minDomains: 2}\n  \
                    - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, minDomains: 3}\n";
        let c = parse(text).unwrap();
        assert_eq!(c.default_constraints.len(), 2);
        assert_eq!(c.default_constraints[0].min_domains, Some(2), "kept where it has an effect");
        assert_eq!(c.default_constraints[1].min_domains, None, "dropped where it has none");
        assert_eq!(c.default_constraints[1].when_unsatisfiable, "ScheduleAnyway");
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        let w = &c.warnings[0];
        for part in ["defaultConstraints[1]", "topology.kubernetes.io/zone", "ScheduleAnyway", "minDomains 3"] {
            assert!(w.contains(part), "{part}: {w}");
        }
        // Whatever the value: it is ignored all the same.
        let zero = "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: k, \
                    whenUnsatisfiable: ScheduleAnyway, minDomains: 0}]}";
        assert_eq!(parse(zero).unwrap().warnings.len(), 1);
    }

    fn pod(labels: &[(&str, &str)], owner: Option<(&str, &str)>) -> CompactPod {
        CompactPod::from(&Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("ns".into()),
                labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                owner_references: owner.map(|(kind, name)| {
                    vec![OwnerReference {
                        kind: kind.into(),
                        name: name.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn service(ns: &str, name: &str, sel: Option<&[(&str, &str)]>) -> ServiceSelector {
        ServiceSelector {
            namespace: ns.into(),
            name: name.into(),
            selector: sel.map(|s| s.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn selector_from_services_and_controllers() {
        let mut snap = ClusterSnapshot::new();
        let p = pod(&[("app", "web"), ("tier", "front")], Some(("ReplicaSet", "web-1")));
        // Nothing selects the pod, and its ReplicaSet is unknown: no selector.
        assert_eq!(default_selector(&p, &snap), None);
        snap.services = vec![
            service("ns", "a", Some(&[("app", "web")])),
            // Selects every pod but adds nothing.
            service("ns", "b", Some(&[])),
            // No selector: selects nothing.
            service("ns", "c", None),
            // Does not select the pod.
            service("ns", "d", Some(&[("app", "db")])),
            // Other namespace.
            service("other", "e", Some(&[("tier", "front")])),
            service("ns", "f", Some(&[("tier", "front")])),
        ];
        let s = default_selector(&p, &snap).unwrap();
        assert_eq!(s.match_labels, Some(labels(&[("app", "web"), ("tier", "front")])));
        assert_eq!(s.match_expressions, None);
        snap.controllers = vec![ControllerSelector {
            namespace: "ns".into(),
            kind: "ReplicaSet".into(),
            name: "web-1".into(),
            selector: LabelSelector {
                match_labels: Some(labels(&[("app", "web")])),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "Exists".into(),
                    values: None,
                }]),
            },
        }];
        let s = default_selector(&p, &snap).unwrap();
        let exprs = s.match_expressions.unwrap();
        assert_eq!(exprs.len(), 2);
        assert_eq!((exprs[0].key.as_str(), exprs[0].operator.as_str()), ("app", "In"));
        assert_eq!(exprs[1].operator, "Exists");
        // A ReplicationController's labels overwrite the Services'.
        snap.services = vec![service("ns", "a", Some(&[("app", "web")]))];
        snap.controllers = vec![ControllerSelector {
            namespace: "ns".into(),
            kind: "ReplicationController".into(),
            name: "rc".into(),
            selector: LabelSelector { match_labels: Some(labels(&[("tier", "front")])), match_expressions: None },
        }];
        let rc = pod(&[("app", "web"), ("tier", "front")], Some(("ReplicationController", "rc")));
        let s = default_selector(&rc, &snap).unwrap();
        assert_eq!(s.match_labels, Some(labels(&[("app", "web"), ("tier", "front")])));
        // Other owners contribute nothing.
        snap.services.clear();
        let job = pod(&[("app", "web")], Some(("Job", "rc")));
        assert_eq!(default_selector(&job, &snap), None);
    }

    #[test]
    fn defaults_only_for_pods_without_their_own() {
        let config = parse(ZONE_AND_HOST).unwrap();
        let mut snap = ClusterSnapshot::new();
        snap.services = vec![service("ns", "a", Some(&[("app", "web")]))];
        let mut d = DefaultSpread::new(&config, &snap);
        let p = pod(&[("app", "web")], None);
        let got = d.for_pod(&p).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].when_unsatisfiable, "ScheduleAnyway");
        assert_eq!(got[0].label_selector.as_ref().unwrap().match_labels, Some(labels(&[("app", "web")])));
        // The pod's own constraints win, all or nothing.
        let mut own = p.clone();
        let mut spec = (*own.spec).clone();
        spec.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "k".into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            ..Default::default()
        }]);
        own.spec = Arc::new(spec);
        assert!(d.for_pod(&own).is_none());
        // Nothing selects it: no defaults.
        assert!(d.for_pod(&pod(&[("app", "other")], None)).is_none());
        // Empty config: nothing.
        let empty = SchedulerConfig::default();
        assert!(DefaultSpread::new(&empty, &snap).for_pod(&p).is_none());
    }
}
