//! Rust validation and the generated CRDs (schema + CEL, evaluated with kube-cel) must agree, for every core kind
//! (NodePool, NodeClaim, NodeOverlay, CapacityBuffer). The providers run the same harness over their node classes'
//! fixtures (karpenter-aws's and karpenter-kwok's `tests/node_class_fixtures.rs`).
//!
//! - `tests/fixtures/valid/*.yaml` and `examples/manifests/*.yaml`: decode, Rust `validate()` reports nothing, the
//!   object round-trips, the CEL rules accept (also as a self-update), and the schema keywords (pattern, enum,
//!   lengths, counts, ranges, required) accept.
//! - `tests/fixtures/invalid/*.yaml`: header comments say what must happen (`# expect:`, `# cel: rejects`,
//!   `# schema: rejects`, `# old:`, `# parse: rejects`; see `common/mod.rs`).
//!
//! The harness (schemas, decoding, structural checker, header parser, per-fixture checks) is in `common/mod.rs`.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{cel_rule_problems, check_invalid, check_valid, crate_dir, matches_pattern, schemas, yaml_files};
use karpenter_api::crd;
use karpenter_api::node_class_api::NodeClassApis;

/// The example manifests of node classes belong to their providers' checks.
fn is_node_class(p: &std::path::Path) -> bool {
    p.file_name().is_some_and(|n| n.to_string_lossy().contains("nodeclass-"))
}

/// Runs `check` on each file, collecting failures and how many files of each kind were checked.
fn run(
    files: &[PathBuf],
    mut check: impl FnMut(&str, &str) -> (Option<String>, Vec<String>),
) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut kinds = BTreeMap::new();
    let mut failures = Vec::new();
    for f in files {
        let name = f.display().to_string();
        let text = match std::fs::read_to_string(f) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{name}: cannot read: {e}"));
                continue;
            }
        };
        let (kind, fs) = check(&name, &text);
        if let Some(k) = kind {
            *kinds.entry(k).or_insert(0) += 1;
        }
        failures.extend(fs);
    }
    (kinds, failures)
}

/// Asserts that at least `min` core manifests were checked (one invalid fixture per rule), then that none failed.
fn assert_checked(kinds: &BTreeMap<String, usize>, failures: &[String], what: &str, min: usize) {
    let checked = kinds.values().sum::<usize>();
    assert!(checked >= min, "only {checked} {what} core manifests, want {min}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn valid_fixtures_and_examples_pass_rust_cel_and_schema() {
    let none = NodeClassApis::none();
    let schemas = schemas(&none);
    let mut files = yaml_files(&crate_dir().join("tests/fixtures/valid"));
    let examples = yaml_files(&crate_dir().join("../../examples/manifests"));
    assert!(examples.iter().any(|p| p.to_string_lossy().contains("nodepool-")), "no NodePool examples found");
    files.extend(examples.into_iter().filter(|p| !is_node_class(p)));
    let (kinds, failures) = run(&files, |name, text| check_valid(name, text, &schemas, &none));
    assert_checked(&kinds, &failures, "valid", 10);
}

#[test]
fn invalid_fixtures_are_rejected_where_the_header_says() {
    let none = NodeClassApis::none();
    let schemas = schemas(&none);
    let dir = crate_dir().join("tests/fixtures");
    let files = yaml_files(&dir.join("invalid"));
    let old_dir = dir.join("old");
    let (kinds, failures) = run(&files, |name, text| check_invalid(name, text, &old_dir, &schemas, &none));
    assert_checked(&kinds, &failures, "invalid", 60);
}

/// Every rule in every generated core CRD compiles and stays within the cost budget (the providers' node classes
/// are checked in their crates).
#[test]
fn every_rule_compiles_and_fits_the_cost_budget() {
    let mut out = Vec::new();
    let mut rules = 0;
    for p in [common::vocabulary::aws(), common::vocabulary::kwok()] {
        let mut crds = crd::core_crds(&p);
        crds.extend(crd::optional_crds(&p));
        for (kind, schema) in crds.iter().map(|c| {
            let s = c.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).unwrap();
            (c.spec.names.kind.clone(), serde_json::to_value(s).unwrap())
        }) {
            cel_rule_problems(&schema, &kind, &mut out, &mut rules);
        }
    }
    assert!(rules > 20, "only {rules} rules found");
    assert!(out.is_empty(), "{}", out.join("\n"));
}

#[test]
fn pattern_helper_works() {
    assert!(matches_pattern("10%", r"^((100|[0-9]{1,2})%|[0-9]+)$"));
    assert!(!matches_pattern("101%", r"^((100|[0-9]{1,2})%|[0-9]+)$"));
}
