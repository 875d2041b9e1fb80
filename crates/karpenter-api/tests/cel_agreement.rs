//! Rust validation and the generated CRDs (schema + CEL, evaluated with kube-cel) must agree, for every kind
//! (NodePool, NodeClaim, KWOKNodeClass, EC2NodeClass).
//!
//! - `tests/fixtures/valid/*.yaml` and `examples/manifests/*.yaml`: decode, Rust `validate()` reports nothing, the
//!   object round-trips, the CEL rules accept (also as a self-update), and the schema keywords (pattern, enum,
//!   lengths, counts, ranges, required) accept; an EC2NodeClass also has an effective AMI family.
//! - `tests/fixtures/invalid/*.yaml`: header comments say what must happen (`# expect:`, `# cel: rejects`,
//!   `# schema: rejects`, `# old:`, `# parse: rejects`; see `common/mod.rs`). An invalid EC2NodeClass must also be
//!   rejected by CEL, the schema or decoding, as upstream enforces every EC2NodeClass rule in the CRD.
//!
//! The harness (schemas, decoding, structural checker, header parser, per-fixture checks) is in `common/mod.rs`.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{check_invalid, check_valid, crate_dir, matches_pattern, schemas, yaml_files};
use karpenter_api::ProviderLabels;
use karpenter_api::crd;
use kube_cel::{ScopeContext, WarningKind, analyze_rule, compile_schema};
use serde_json::Value;

fn is_ec2(p: &std::path::Path) -> bool {
    p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ec2nodeclass-"))
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

/// Asserts that at least `min_others` NodePool/NodeClaim/KWOKNodeClass and `min_ec2` EC2NodeClass manifests
/// were checked (one invalid fixture per rule), then that none failed.
fn assert_checked(kinds: &BTreeMap<String, usize>, failures: &[String], what: &str, min_others: usize, min_ec2: usize) {
    let ec2 = kinds.get("EC2NodeClass").copied().unwrap_or(0);
    let others = kinds.values().sum::<usize>() - ec2;
    assert!(others >= min_others, "only {others} {what} NodePool/NodeClaim/KWOKNodeClass manifests, want {min_others}");
    assert!(ec2 >= min_ec2, "only {ec2} {what} EC2NodeClass manifests, want {min_ec2}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn valid_fixtures_and_examples_pass_rust_cel_and_schema() {
    let schemas = schemas();
    let mut files = yaml_files(&crate_dir().join("tests/fixtures/valid"));
    let examples = yaml_files(&crate_dir().join("../../examples/manifests"));
    assert!(examples.iter().any(|p| p.to_string_lossy().contains("nodepool-")), "no NodePool examples found");
    let ec2_examples = examples.iter().filter(|p| is_ec2(p)).count();
    assert!(ec2_examples >= 3, "expected EC2NodeClass examples, found {ec2_examples}");
    files.extend(examples);
    let (kinds, failures) = run(&files, |name, text| check_valid(name, text, &schemas));
    assert_checked(&kinds, &failures, "valid", 10, 15);
}

#[test]
fn invalid_fixtures_are_rejected_where_the_header_says() {
    let schemas = schemas();
    let dir = crate_dir().join("tests/fixtures");
    let files = yaml_files(&dir.join("invalid"));
    let old_dir = dir.join("old");
    let (kinds, failures) = run(&files, |name, text| check_invalid(name, text, &old_dir, &schemas));
    assert_checked(&kinds, &failures, "invalid", 60, 60);
}

/// Every rule in every generated CRD compiles and stays within the cost budget.
#[test]
fn every_rule_compiles_and_fits_the_cost_budget() {
    fn walk(node: &Value, path: &str, out: &mut Vec<String>, rules: &mut usize) {
        let Some(obj) = node.as_object() else { return };
        if let Some(vs) = obj.get("x-kubernetes-validations").and_then(Value::as_array) {
            let compiled = compile_schema(node);
            for e in compiled.compilation_errors() {
                out.push(format!("{path}: compile error {e}"));
            }
            for v in vs {
                let rule = v.get("rule").and_then(Value::as_str).unwrap_or_default();
                *rules += 1;
                for w in analyze_rule(rule, &compiled, ScopeContext::CrdValidation) {
                    // WrongScope is not checked: kube-cel 0.8 reports comprehension variables (`x` in `self.all(x, ...)`) as
                    // out of scope.
                    if w.kind == WarningKind::CostExceeded {
                        out.push(format!("{path}: {rule}: {}", w.message));
                    }
                }
            }
        }
        for (k, child) in obj {
            match k.as_str() {
                "properties" => {
                    for (name, c) in child.as_object().into_iter().flatten() {
                        walk(c, &format!("{path}.{name}"), out, rules);
                    }
                }
                "items" => walk(child, &format!("{path}[]"), out, rules),
                "additionalProperties" => walk(child, &format!("{path}{{}}"), out, rules),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    let mut rules = 0;
    for p in [ProviderLabels::aws(), ProviderLabels::kwok()] {
        let mut crds = crd::crds(&p);
        crds.extend(crd::node_class_crds(&p));
        crds.extend(crd::optional_crds(&p));
        for (kind, schema) in crds.iter().map(|c| {
            let s = c.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).unwrap();
            (c.spec.names.kind.clone(), serde_json::to_value(s).unwrap())
        }) {
            walk(&schema, &kind, &mut out, &mut rules);
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
