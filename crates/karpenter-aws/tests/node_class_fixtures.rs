//! Rust validation and the generated CRD (schema + CEL, evaluated with kube-cel) agree on every EC2NodeClass fixture,
//! through karpenter-api's fixture harness and the provider's [`NodeClassApi`](karpenter_api::NodeClassApi):
//!
//! - `tests/fixtures/ec2nodeclass/valid/*.yaml` and the EC2NodeClass examples of `examples/manifests/`; each also has an effective AMI family: decode, Rust validation reports nothing, the object round-trips,
//!   the CEL rules accept (also as a self-update), and the schema keywords accept it;
//! - `tests/fixtures/ec2nodeclass/invalid/*.yaml`: rejected where the header says (`# expect:`, `# cel: rejects`,
//!   `# schema: rejects`, `# parse: rejects`, `# controller: rejects`; see the harness).

#[path = "../../karpenter-api/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;

use common::{cel_rule_problems, check_invalid, check_valid, crate_dir, schemas, yaml_files};
use karpenter_aws::api::{EC2NodeClass, node_class_apis};

fn check_all(files: &[PathBuf], mut check: impl FnMut(&str, &str) -> (Option<String>, Vec<String>)) -> usize {
    let mut failures = Vec::new();
    let mut checked = 0;
    for f in files {
        let name = f.display().to_string();
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (kind, fs) = check(&name, &text);
        assert_eq!(kind.as_deref(), Some("EC2NodeClass"), "{name}");
        checked += 1;
        failures.extend(fs);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    checked
}

#[test]
fn valid_fixtures_pass_rust_cel_and_schema() {
    let apis = node_class_apis();
    let schemas = schemas(&apis);
    let mut files = yaml_files(&crate_dir().join("tests/fixtures/ec2nodeclass/valid"));
    let examples: Vec<PathBuf> = yaml_files(&crate_dir().join("../../examples/manifests"))
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ec2nodeclass-")))
        .collect();
    assert!(examples.len() >= 3, "expected EC2NodeClass examples, found {}", examples.len());
    files.extend(examples);
    for f in &files {
        let class: EC2NodeClass = serde_saphyr::from_str(&std::fs::read_to_string(f).unwrap()).unwrap();
        assert!(class.effective_ami_family().is_some(), "{}: no effective AMI family", f.display());
    }
    let checked = check_all(&files, |name, text| check_valid(name, text, &schemas, &apis));
    assert!(checked >= 15, "only {checked} valid EC2NodeClass manifests");
}

#[test]
fn invalid_fixtures_are_rejected_where_the_header_says() {
    let apis = node_class_apis();
    let schemas = schemas(&apis);
    let files = yaml_files(&crate_dir().join("tests/fixtures/ec2nodeclass/invalid"));
    let old_dir = crate_dir().join("tests/fixtures/ec2nodeclass/old");
    let checked = check_all(&files, |name, text| check_invalid(name, text, &old_dir, &schemas, &apis));
    assert!(checked >= 60, "only {checked} invalid EC2NodeClass manifests (one per rule)");
}

/// Every rule of the CRD compiles and stays within the cost budget.
#[test]
fn every_rule_compiles_and_fits_the_cost_budget() {
    let mut out = Vec::new();
    let mut rules = 0;
    for crd in node_class_apis().crds(&karpenter_aws::labels::provider_labels()) {
        let s = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).unwrap();
        cel_rule_problems(&serde_json::to_value(s).unwrap(), &crd.spec.names.kind, &mut out, &mut rules);
    }
    assert!(rules >= 10, "only {rules} rules found");
    assert!(out.is_empty(), "{}", out.join("\n"));
}
