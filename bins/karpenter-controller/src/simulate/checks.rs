//! Checks of the input that the schema does not make: negative resource quantities in pod specs (errors, as the
//! API server would reject them), EC2NodeClass kubelet CEL expressions that do not compile (`validate` errors, as
//! the controller would not launch for the class), and notes for what simulate cannot read right: objects at an apiVersion the
//! loader does not decode, requirements on labels the catalogue cannot evaluate, and dumps that hold Nodes but
//! none of the pods running on them.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodSpec;
use karpenter_api::ProviderLabels;
use karpenter_api::labels::{CORE_WELL_KNOWN_LABELS, HOSTNAME};
use karpenter_api::loader::{self, Loaded, Object};
use karpenter_aws::dynamic_resources::dra_gates_unused;
use karpenter_aws::settings::AwsFeatureGates;
use karpenter_scheduler::ClusterSnapshot;

use super::Catalogue;

/// Each pod spec of the input: the pods' and the workloads' templates, with the field path leading to it.
fn pod_specs(objects: &[Loaded]) -> impl Iterator<Item = (&Loaded, &'static str, &PodSpec)> {
    objects.iter().filter_map(|l| {
        let (path, spec) = match &l.object {
            Object::Pod(p) => ("spec", p.spec.as_ref()?),
            Object::CompactPod(p) => ("spec", p.spec.as_ref()),
            Object::Deployment(d) => ("spec.template.spec", d.spec.as_ref()?.template.spec.as_ref()?),
            Object::ReplicaSet(r) => ("spec.template.spec", r.spec.as_ref()?.template.as_ref()?.spec.as_ref()?),
            Object::StatefulSet(s) => ("spec.template.spec", s.spec.as_ref()?.template.spec.as_ref()?),
            Object::DaemonSet(d) => ("spec.template.spec", d.spec.as_ref()?.template.spec.as_ref()?),
            Object::Job(j) => ("spec.template.spec", j.spec.as_ref()?.template.spec.as_ref()?),
            _ => return None,
        };
        Some((l, path, spec))
    })
}

/// A quantity below zero (`-1`, `-500m`; `-0` is zero).
fn is_negative(quantity: &str) -> bool {
    quantity.trim().strip_prefix('-').is_some_and(|rest| rest.chars().any(|c| c.is_ascii_digit() && c != '0'))
}

/// Errors for negative requests and limits of containers and init containers, in the API server's words:
/// `pods.yaml: document 0: Pod/default/web: spec.containers[0].resources.requests[cpu]: Invalid value: "-1": must be
/// greater than or equal to 0`.
pub fn negative_quantities(objects: &[Loaded]) -> Vec<String> {
    let mut errors = Vec::new();
    for (loaded, path, spec) in pod_specs(objects) {
        let lists = [
            ("containers", &spec.containers[..]),
            ("initContainers", spec.init_containers.as_deref().unwrap_or_default()),
        ];
        for (field, containers) in lists {
            for (i, c) in containers.iter().enumerate() {
                let Some(resources) = &c.resources else { continue };
                for (kind, list) in [("requests", &resources.requests), ("limits", &resources.limits)] {
                    for (name, q) in list.iter().flatten() {
                        if is_negative(&q.0) {
                            errors.push(format!(
                                "{}: {}: {path}.{field}[{i}].resources.{kind}[{name}]: Invalid value: \"{}\": must be \
                                 greater than or equal to 0",
                                loaded.origin,
                                loaded.object.display_name(),
                                q.0
                            ));
                        }
                    }
                }
            }
        }
    }
    errors
}

/// EC2NodeClass kubelet CEL expressions that do not compile, as `validate` reports violations:
/// `class.yaml: document 0: EC2NodeClass/default: spec.kubelet.maxPods: ...`. The controller sets
/// `ValidationSucceeded=False` (`KubeletExpressionInvalid`) for them, whatever the `NodeClassCEL` gate.
pub fn kubelet_expressions(objects: &[Loaded]) -> Vec<String> {
    use karpenter_aws::kubelet_cel::{KubeletExpressionError, KubeletExpressions};
    objects
        .iter()
        .filter_map(|l| {
            let Object::Unknown(u) = &l.object else { return None };
            let c = u.decode::<karpenter_aws::api::EC2NodeClass>()?.ok()?;
            let Err(KubeletExpressionError::Invalid { field, message, .. }) =
                KubeletExpressions::compile(c.spec.kubelet.as_ref()?)
            else {
                return None;
            };
            Some(format!(
                "{}: {}: spec.kubelet.{field}: {message} (ValidationSucceeded=False, KubeletExpressionInvalid)",
                l.origin,
                l.object.display_name()
            ))
        })
        .collect()
}

/// Objects listed in notes before `and N more`.
const MAX_NAMED: usize = 3;

fn named(names: &[String]) -> String {
    let mut shown = names.iter().take(MAX_NAMED).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > MAX_NAMED {
        shown.push_str(&format!(" and {} more", names.len() - MAX_NAMED));
    }
    shown
}

/// Notes for objects of a kind simulate reads but at an apiVersion the loader does not decode (a Deployment at
/// `extensions/v1beta1`): they are left out of the simulation.
pub fn unsupported_api_versions(objects: &[Loaded], notes: &mut Vec<String>) {
    let mut by_version: BTreeMap<(String, String, &'static str), Vec<String>> = BTreeMap::new();
    for l in objects {
        let Object::Unknown(u) = &l.object else { continue };
        // Unknown Karpenter kinds and versions are validation errors already.
        if u.is_karpenter_group() || karpenter_api::dra::is_later_version(&u.api_version, &u.kind) {
            continue;
        }
        if let Some(supported) = loader::supported_api_version(&u.kind) {
            by_version
                .entry((u.kind.clone(), u.api_version.clone(), supported))
                .or_default()
                .push(l.object.display_name());
        }
    }
    for ((kind, version, supported), names) in by_version {
        let (n, word) =
            if names.len() == 1 { (String::new(), "object") } else { (format!("{} ", names.len()), "objects") };
        notes.push(format!(
            "{n}{kind} {word} at apiVersion {version} left out ({}): only {supported} is read",
            named(&names)
        ));
    }
}

/// Notes for requirements on label keys that nothing in the simulation defines, so the catalogue cannot evaluate
/// them. A NodePool requirement is noted when its key is one of the provider's well-known labels that no instance
/// type of the catalogue carries (an EKS NodePool's `karpenter.k8s.aws/instance-category` against the kwok
/// catalogue); any other key of a NodePool requirement is a label the NodePool itself puts on its nodes. A pod's
/// node selector or required node affinity is noted when its key is neither carried by an instance type, a core
/// well-known label, nor a label some NodePool (template labels or requirements) or Node of the input defines.
pub fn unevaluable_keys(
    objects: &[Loaded],
    pools: &[karpenter_api::NodePool],
    catalogue: &Catalogue,
    provider: &ProviderLabels,
    notes: &mut Vec<String>,
) {
    let catalogue_keys: BTreeSet<&str> = catalogue.all_instance_types().flat_map(|it| it.requirements.keys()).collect();
    let mut defined: BTreeSet<&str> = catalogue_keys.clone();
    defined.extend(CORE_WELL_KNOWN_LABELS);
    defined.insert(HOSTNAME);
    let mut pool_missing: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for pool in pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let pool_keys: BTreeSet<&str> =
            catalogue.for_pool(&name).iter().flat_map(|it| it.requirements.keys()).collect();
        let template = &pool.spec.template;
        defined.extend(template.metadata.labels.keys().map(String::as_str));
        for r in &template.spec.requirements {
            let key = r.key.as_str();
            defined.insert(key);
            if provider.well_known.contains(key) && !pool_keys.contains(key) {
                pool_missing.entry(key).or_default().push(format!("NodePool {name}"));
            }
        }
    }
    for l in objects {
        if let Object::Node(n) = &l.object {
            defined.extend(n.metadata.labels.iter().flatten().map(|(k, _)| k.as_str()));
        }
    }
    let mut pod_missing: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for (loaded, _, spec) in pod_specs(objects) {
        let mut keys: BTreeSet<&str> = spec.node_selector.iter().flatten().map(|(k, _)| k.as_str()).collect();
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref());
        for term in required.iter().flat_map(|r| r.node_selector_terms.iter()) {
            keys.extend(term.match_expressions.iter().flatten().map(|e| e.key.as_str()));
        }
        for key in keys.into_iter().filter(|k| !defined.contains(k)) {
            pod_missing.entry(key).or_default().push(loaded.object.display_name());
        }
    }
    let source = if catalogue.source == "kwok" { "the kwok catalogue".to_owned() } else { catalogue.source.clone() };
    for (key, names) in pool_missing {
        notes.push(format!(
            "{} {} on {key}, a label no instance type of {source} has: the catalogue cannot evaluate it",
            named(&names),
            if names.len() == 1 { "has a requirement" } else { "have requirements" }
        ));
    }
    for (key, names) in pod_missing {
        notes.push(format!(
            "{} {} label {key}, which no instance type of {source}, NodePool or Node of the input defines",
            named(&names),
            if names.len() == 1 { "requires" } else { "require" }
        ));
    }
}

/// A note when the AWS DRA gates are on but DRA requests are ignored: the slice templates they publish are then
/// never used (the controller logs the same at startup).
pub fn dra_gates(gates: AwsFeatureGates, ignore_dra_requests: bool, notes: &mut Vec<String>) {
    if let Some(message) = dra_gates_unused(&gates, ignore_dra_requests) {
        notes.push(message);
    }
}

/// A note when the input has Nodes but no pod bound to any: the dump looks like one of pending pods only (a
/// `--field-selector=status.phase=Pending` dump), so the nodes look empty and pods are placed on nodes that are
/// in fact full.
pub fn pending_only(snapshot: &ClusterSnapshot, notes: &mut Vec<String>) {
    if !snapshot.nodes.is_empty() && snapshot.bound_pods.is_empty() {
        let n = snapshot.nodes.len();
        notes.push(format!(
            "warning: the input has {n} {} but no pod running on any: it looks like a dump of pending pods only, so \
             the nodes look empty and pods may be placed on nodes that are full; dump all pods (docs/simulate.md)",
            if n == 1 { "node" } else { "nodes" }
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::load_str;

    const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {team: a}}\n\
                        status: {allocatable: {cpu: '4', pods: '10'}}\n";

    fn pod(name: &str, extra: &str) -> String {
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{{extra}containers: [{{name: c}}]}}\n"
        )
    }

    fn notes_for(yaml: &str, provider: &ProviderLabels) -> Vec<String> {
        let objects = load_str(yaml, "in.yaml").expect("valid input");
        let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let mut notes = Vec::new();
        unsupported_api_versions(&objects, &mut notes);
        unevaluable_keys(&objects, &snapshot.node_pools, &Catalogue::kwok(), provider, &mut notes);
        pending_only(&snapshot, &mut notes);
        notes
    }

    #[test]
    fn pending_only_dumps_warn_and_a_bound_pod_silences_it() {
        let pending = format!("{NODE}{}", pod("p", ""));
        let notes = notes_for(&pending, &karpenter_kwok::labels::provider_labels());
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("warning: the input has 1 node but no pod running on any"), "{notes:?}");
        let with_bound = format!("{pending}{}", pod("q", "nodeName: n1, "));
        assert_eq!(notes_for(&with_bound, &karpenter_kwok::labels::provider_labels()), Vec::<String>::new());
        // No nodes: nothing to say.
        assert_eq!(notes_for(&pod("p", "")[4..], &karpenter_kwok::labels::provider_labels()), Vec::<String>::new());
    }

    #[test]
    fn keys_nothing_defines_are_named() {
        let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: gp}\nspec:\n  template:\n    \
                    metadata: {labels: {tier: web}}\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: \
                    EC2NodeClass, name: d}\n      requirements:\n      - {key: karpenter.k8s.aws/instance-family, \
                    operator: In, values: [m5]}\n      - {key: example.com/pool, operator: Exists}\n";
        let pods = [
            pod("a", "nodeSelector: {tier: web, team: a, kubernetes.io/arch: amd64, example.com/pool: x}, "),
            pod("b", "nodeSelector: {example.com/gpu: 'true'}, "),
            pod("c", "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: example.com/gpu, operator: Exists}]}]}}}, "),
        ]
        .concat();
        let input = format!("{pool}---\n{NODE}{pods}{}", pod("bound", "nodeName: n1, "));
        assert_eq!(
            notes_for(&input, &karpenter_aws::labels::provider_labels()),
            [
                "NodePool gp has a requirement on karpenter.k8s.aws/instance-family, a label no instance type of the \
                 kwok catalogue has: the catalogue cannot evaluate it",
                "Pod/b, Pod/c require label example.com/gpu, which no instance type of the kwok catalogue, NodePool or \
                 Node of the input defines",
            ]
        );
        // For kwok, karpenter.k8s.aws/instance-family is a label the NodePool defines.
        assert_eq!(notes_for(&input, &karpenter_kwok::labels::provider_labels()).len(), 1);
    }

    #[test]
    fn kubelet_expressions_that_do_not_compile_are_errors() {
        let class = |kubelet: &str| {
            format!(
                "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: c}}\nspec:\n  role: r\n  \
                 amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{k: v}}}}]\n  \
                 securityGroupSelectorTerms: [{{tags: {{k: v}}}}]\n  kubelet: {kubelet}\n"
            )
        };
        let bad = load_str(&class("{kubeReserved: {memory: \"11 * pods\"}}"), "in.yaml").expect("loads");
        let errors = kubelet_expressions(&bad);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("in.yaml: document 0: EC2NodeClass/c: spec.kubelet.kubeReserved[memory]: ")
                && errors[0].contains("undeclared variable \"pods\""),
            "{errors:?}"
        );
        let good = load_str(&class("{maxPods: \"min(max_pods, 50)\", kubeReserved: {cpu: 100m}}"), "in.yaml");
        assert!(kubelet_expressions(&good.expect("loads")).is_empty());
    }

    #[test]
    fn negative_quantities_are_found_and_zero_is_fine() {
        assert!(is_negative("-1") && is_negative("-500m") && is_negative(" -0.5Gi"));
        assert!(!is_negative("-0") && !is_negative("0") && !is_negative("1"));
    }
}
