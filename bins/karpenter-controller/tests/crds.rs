//! The checked-in CRDs under `charts/*/crds/` (and the templated copies in `charts/karpenter-crd/templates/`)
//! must equal what the types generate: the core kinds' (karpenter-api) and the node classes' of the providers the
//! binary serves (karpenter-aws's EC2NodeClass, karpenter-kwok's KWOKNodeClass), which is why this test lives with
//! the binary, the one crate that knows every provider.
//!
//! Regenerate with: `UPDATE_CRDS=1 cargo test -p karpenter-controller --test crds`

use karpenter_api::crd::{self, render_yaml};
use karpenter_api::k8s_openapi;
use karpenter_aws::api::EC2NodeClass;
use karpenter_kwok::api::KWOKNodeClass;
use std::path::{Path, PathBuf};

fn aws_node_classes() -> karpenter_api::NodeClassApis {
    karpenter_aws::api::node_class_apis()
}

fn kwok_node_classes() -> karpenter_api::NodeClassApis {
    karpenter_kwok::api::node_class_apis()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (chart CRD directory, provider, which generated CRDs go there).
fn expected() -> Vec<(PathBuf, String, String)> {
    let root = repo_root();
    let mut out = Vec::new();
    for c in karpenter_api::node_class_api::crds_with(&karpenter_aws::labels::provider_labels(), &aws_node_classes()) {
        out.push((root.join("charts/karpenter/crds"), crd::file_name(&c), render_yaml(&c)));
        out.push((root.join("charts/karpenter-crd/templates"), crd::file_name(&c), helm_template(&render_yaml(&c))));
    }
    // Not ours to own: a plain copy for `kubectl apply`, and a template the karpenter-crd chart renders only
    // with `capacityBuffer.installCRD=true`.
    for c in crd::optional_crds(&karpenter_aws::labels::provider_labels()) {
        out.push((root.join("charts/karpenter-crd/optional"), crd::file_name(&c), render_yaml(&c)));
        let gated = format!(
            "{{{{- if .Values.capacityBuffer.installCRD }}}}\n{}{{{{- end }}}}\n",
            helm_template(&render_yaml(&c))
        );
        out.push((root.join("charts/karpenter-crd/templates"), crd::file_name(&c), gated));
    }
    for c in kwok_node_classes().crds(&karpenter_kwok::labels::provider_labels()) {
        out.push((root.join("charts/karpenter-kwok/crds"), crd::file_name(&c), render_yaml(&c)));
    }
    out
}

/// The CRD as a Helm template for the `karpenter-crd` chart: Helm never upgrades files under `crds/`, so that
/// chart ships them as templates. Anything that looks like a template action is escaped, and the chart's
/// `additionalAnnotations` are spliced into the metadata.
fn helm_template(yaml: &str) -> String {
    let escaped = yaml.replace("{{", "{{ \"{{\" }}");
    let mut out = String::with_capacity(escaped.len() + 200);
    let mut in_metadata = false;
    let mut spliced = false;
    for line in escaped.lines() {
        out.push_str(line);
        out.push('\n');
        if line == "metadata:" {
            in_metadata = true;
        } else if in_metadata && !spliced && line.starts_with("  name: ") {
            out.push_str("  {{- with .Values.additionalAnnotations }}\n");
            out.push_str("  annotations:\n");
            out.push_str("    {{- toYaml . | nindent 4 }}\n");
            out.push_str("  {{- end }}\n");
            spliced = true;
        }
    }
    out
}

fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}:\n  checked in: {x}\n  generated:  {y}", i + 1);
        }
    }
    format!("length differs: checked in {} lines, generated {} lines", a.lines().count(), b.lines().count())
}

#[test]
fn checked_in_crds_are_up_to_date() {
    let update = std::env::var_os("UPDATE_CRDS").is_some();
    let mut stale = Vec::new();
    for (dir, name, yaml) in expected() {
        let path = dir.join(&name);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &yaml).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(existing) if existing == yaml => {}
            Ok(existing) => stale.push(format!("{}: {}", path.display(), first_difference(&existing, &yaml))),
            Err(e) => stale.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "checked-in CRDs differ from the generated ones:\n{}\n\nregenerate with: UPDATE_CRDS=1 cargo test -p karpenter-controller --test crds",
        stale.join("\n")
    );
}

#[test]
fn crd_chart_templates_splice_annotations_once() {
    let yaml = render_yaml(&crd::generate::<karpenter_api::NodePool>(&karpenter_aws::labels::provider_labels()));
    let template = helm_template(&yaml);
    assert_eq!(template.matches(".Values.additionalAnnotations").count(), 1);
    // Without the spliced block the template is the CRD itself.
    let stripped: String =
        template.lines().filter(|l| !l.contains("{{-") && *l != "  annotations:").map(|l| format!("{l}\n")).collect();
    assert_eq!(stripped, yaml);
    assert_eq!(helm_template("metadata:\n  name: x\nspec: {{x}}\n").lines().last(), Some("spec: {{ \"{{\" }}x}}"));
}

#[test]
fn every_kind_has_a_crd() {
    let aws: Vec<String> =
        karpenter_api::node_class_api::crds_with(&karpenter_aws::labels::provider_labels(), &aws_node_classes())
            .iter()
            .map(crd::file_name)
            .collect();
    assert!(aws.contains(&"karpenter.sh_nodepools.yaml".to_string()), "{aws:?}");
    assert!(aws.contains(&"karpenter.sh_nodeclaims.yaml".to_string()), "{aws:?}");
    assert!(aws.contains(&"karpenter.sh_nodeoverlays.yaml".to_string()), "{aws:?}");
    assert!(
        !aws.iter().any(|n| n.contains("capacitybuffers")),
        "the CapacityBuffer CRD is not ours to install: {aws:?}"
    );
    let optional: Vec<String> =
        crd::optional_crds(&karpenter_aws::labels::provider_labels()).iter().map(crd::file_name).collect();
    assert_eq!(optional, ["autoscaling.x-k8s.io_capacitybuffers.yaml"]);
    let kwok: Vec<String> =
        kwok_node_classes().crds(&karpenter_kwok::labels::provider_labels()).iter().map(crd::file_name).collect();
    assert_eq!(kwok, vec!["karpenter.kwok.sh_kwoknodeclasses.yaml".to_string()]);
}

#[test]
fn provider_rules_follow_the_label_set() {
    let aws = render_yaml(&crd::generate::<karpenter_api::NodePool>(&karpenter_aws::labels::provider_labels()));
    let kwok = render_yaml(&crd::generate::<karpenter_api::NodePool>(&karpenter_kwok::labels::provider_labels()));
    let aws_domain = r#"label domain "karpenter.k8s.aws" is restricted"#;
    let kwok_domain = r#"label domain "karpenter.kwok.sh" is restricted"#;
    assert!(aws.contains(aws_domain) && !aws.contains(kwok_domain));
    assert!(kwok.contains(kwok_domain) && !kwok.contains(aws_domain));
}

#[test]
fn patches_apply_cleanly() {
    for p in [karpenter_aws::labels::provider_labels(), karpenter_kwok::labels::provider_labels()] {
        crd::try_generate::<karpenter_api::NodePool>(&p).unwrap();
        crd::try_generate::<karpenter_api::NodeClaim>(&p).unwrap();
        crd::try_generate::<KWOKNodeClass>(&p).unwrap();
        crd::try_generate::<karpenter_api::CapacityBuffer>(&p).unwrap();
    }
}

/// Every `required` list of a schema outside `status`, by path (`.spec.template.spec`, `[]` for list items).
fn required_lists(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> std::collections::BTreeMap<String, Vec<String>> {
    fn walk(v: &serde_json::Value, path: String, out: &mut std::collections::BTreeMap<String, Vec<String>>) {
        if path.starts_with(".status") {
            return;
        }
        if let Some(r) = v.get("required").and_then(|r| r.as_array()) {
            out.insert(path.clone(), r.iter().filter_map(|s| s.as_str().map(String::from)).collect());
        }
        if let Some(props) = v.get("properties").and_then(|p| p.as_object()) {
            for (k, c) in props {
                walk(c, format!("{path}.{k}"), out);
            }
        }
        if let Some(items) = v.get("items") {
            walk(items, format!("{path}[]"), out);
        }
        if let Some(ap) = v.get("additionalProperties").filter(|a| a.is_object()) {
            walk(ap, format!("{path}{{}}"), out);
        }
    }
    let schema = crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
    let mut out = std::collections::BTreeMap::new();
    walk(&serde_json::to_value(schema).unwrap(), String::new(), &mut out);
    out
}

/// The `required` lists (outside status) are upstream's (kubernetes-sigs/karpenter pkg/apis/crds, kwok/apis/crds;
/// aws/karpenter-provider-aws pkg/apis/crds): NodePool and NodeClaim require `spec`, the node classes do not (an
/// object without `spec` is accepted by the API server, as upstream's is). Upstream's NodePool also requires a
/// budget's `nodes`, which it defaults (`10%`), so that is not required here: ours defaults it too.
#[test]
fn required_fields_are_upstreams() {
    let p = karpenter_aws::labels::provider_labels();
    let r = |pairs: &[(&str, &[&str])]| -> std::collections::BTreeMap<String, Vec<String>> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.iter().map(|s| s.to_string()).collect())).collect()
    };
    assert_eq!(
        required_lists(&crd::generate::<karpenter_api::NodePool>(&p)),
        r(&[
            ("", &["spec"]),
            (".spec", &["template"]),
            (".spec.template", &["spec"]),
            (".spec.template.spec", &["nodeClassRef", "requirements"]),
            (".spec.template.spec.nodeClassRef", &["group", "kind", "name"]),
            (".spec.template.spec.requirements[]", &["key", "operator"]),
            (".spec.template.spec.startupTaints[]", &["effect", "key"]),
            (".spec.template.spec.taints[]", &["effect", "key"]),
        ])
    );
    assert_eq!(
        required_lists(&crd::generate::<karpenter_api::NodeClaim>(&p)),
        r(&[
            ("", &["spec"]),
            (".spec", &["nodeClassRef", "requirements"]),
            (".spec.nodeClassRef", &["group", "kind", "name"]),
            (".spec.requirements[]", &["key", "operator"]),
            (".spec.startupTaints[]", &["effect", "key"]),
            (".spec.taints[]", &["effect", "key"]),
        ])
    );
    assert_eq!(
        required_lists(&crd::generate::<EC2NodeClass>(&p)),
        r(&[
            (".spec", &["amiSelectorTerms", "securityGroupSelectorTerms", "subnetSelectorTerms"]),
            (".spec.networkInterfaces[]", &["deviceIndex", "interfaceType", "networkCardIndex"]),
        ])
    );
    assert_eq!(required_lists(&crd::generate::<KWOKNodeClass>(&karpenter_kwok::labels::provider_labels())), r(&[]));
    // The schema's title stays the kind's name (the derived schema type is named differently).
    for c in kwok_node_classes()
        .crds(&karpenter_kwok::labels::provider_labels())
        .into_iter()
        .chain(aws_node_classes().crds(&p))
    {
        let s = c.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema.as_ref().unwrap();
        assert_eq!(s.title.as_deref(), Some(c.spec.names.kind.as_str()));
    }
}
