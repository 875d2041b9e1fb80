//! Rust validation and the generated CRD (schema + CEL, evaluated with kube-cel) agree on every KWOKNodeClass fixture,
//! through karpenter-api's fixture harness and the provider's [`NodeClassApi`](karpenter_api::NodeClassApi):
//!
//! - `tests/fixtures/kwoknodeclass/valid/*.yaml`: decode, Rust validation reports nothing, the object round-trips,
//!   the CEL rules accept (also as a self-update), and the schema keywords accept it;
//! - `tests/fixtures/kwoknodeclass/invalid/*.yaml`: rejected where the header says (`# expect:`, `# cel: rejects`,
//!   `# schema: rejects`, `# parse: rejects`, `# controller: rejects`; see the harness).

#[path = "../../karpenter-api/tests/common/mod.rs"]
mod common;

use std::path::PathBuf;

use common::{cel_rule_problems, check_invalid, check_valid, crate_dir, schemas, yaml_files};
use karpenter_api::ValidationContext;
use karpenter_kwok::api::node_class_apis;

fn check_all(files: &[PathBuf], mut check: impl FnMut(&str, &str) -> (Option<String>, Vec<String>)) -> usize {
    let mut failures = Vec::new();
    let mut checked = 0;
    for f in files {
        let name = f.display().to_string();
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (kind, fs) = check(&name, &text);
        assert_eq!(kind.as_deref(), Some("KWOKNodeClass"), "{name}");
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
    let files = yaml_files(&crate_dir().join("tests/fixtures/kwoknodeclass/valid"));
    let checked = check_all(&files, |name, text| check_valid(name, text, &schemas, &apis));
    assert!(checked >= 1, "only {checked} valid KWOKNodeClass manifests");
}

#[test]
fn invalid_fixtures_are_rejected_where_the_header_says() {
    let apis = node_class_apis();
    let schemas = schemas(&apis);
    let files = yaml_files(&crate_dir().join("tests/fixtures/kwoknodeclass/invalid"));
    let old_dir = crate_dir().join("tests/fixtures/kwoknodeclass/old");
    let checked = check_all(&files, |name, text| check_invalid(name, text, &old_dir, &schemas, &apis));
    assert!(checked >= 1, "only {checked} invalid KWOKNodeClass manifests (one per rule)");
}

/// Every rule of the CRD compiles and stays within the cost budget.
#[test]
fn every_rule_compiles_and_fits_the_cost_budget() {
    let mut out = Vec::new();
    let mut rules = 0;
    for crd in node_class_apis().crds(&karpenter_kwok::labels::provider_labels()) {
        let s = crd.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).unwrap();
        cel_rule_problems(&serde_json::to_value(s).unwrap(), &crd.spec.names.kind, &mut out, &mut rules);
    }
    // The spec is empty: the CRD has no rules to check beyond what it may gain.
    let _ = rules;
    assert!(out.is_empty(), "{}", out.join("\n"));
}

#[test]
fn kwok_node_class_without_spec_loads() {
    let loaded = karpenter_api::load_str(
        "apiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: default}\n",
        "kwok.yaml",
    )
    .expect("a KWOKNodeClass without spec is accepted, as by the API server");
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].object.kind(), "KWOKNodeClass");
    let violations = loaded[0]
        .object
        .validate_with(&ValidationContext::new(karpenter_kwok::labels::provider_labels()), &node_class_apis())
        .expect("karpenter kind");
    assert!(violations.is_empty(), "{violations:?}");
}

/// The label sets written out as test data for the crates that may not depend on this one (karpenter-api's tests,
/// the test kit) are this crate's set.
#[test]
fn the_test_data_copies_of_the_label_set_are_this_crates() {
    let ours = karpenter_kwok::labels::provider_labels();
    assert_eq!(common::vocabulary::kwok(), ours);
    assert_eq!(karpenter_testing::vocabulary::kwok(), ours);
}
