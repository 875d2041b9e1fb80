//! EC2NodeClass fixtures: Rust validation and the generated CRD (schema keywords + CEL via kube-cel) must agree.
//!
//! - `tests/fixtures/valid/ec2nodeclass-*.yaml` and `examples/manifests/ec2nodeclass-*.yaml`: decode, no Rust
//!   violation, CEL accepts (also as a self-update), schema keywords accept.
//! - `tests/fixtures/invalid/ec2nodeclass-*.yaml`, header comments (same format as `cel_agreement.rs`):
//!   - `# expect: <path>`: a Rust violation with exactly this path;
//!   - `# cel: rejects`: CEL rejects (and CEL accepts when the line is absent);
//!   - `# schema: rejects`: a structural keyword rejects (pattern, enum, lengths, counts, ranges, required), and
//!     none does when the line is absent;
//!   - `# parse: rejects <text>`: decoding into `EC2NodeClass` fails with an error mentioning `<text>`.

use std::path::{Path, PathBuf};

use karpenter_api::crd;
use karpenter_api::ec2nodeclass::{AmiFamily, EC2NodeClass, HttpTokens};
use karpenter_api::{ProviderLabels, Validate, ValidationContext};
use kube_cel::Validator;
use serde_json::{Value, json};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ec2_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p| {
        p.extension().is_some_and(|e| e == "yaml")
            && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ec2nodeclass-"))
    });
    files.sort();
    files
}

fn schema() -> Value {
    let c = crd::generate::<EC2NodeClass>(&ProviderLabels::aws());
    let s = c.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).unwrap();
    serde_json::to_value(s).unwrap()
}

fn cel_errors(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(schema, obj, old) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
    }
}

/// Regular-expression match through the CEL engine (`matches`), the RE2-style engine the API server also uses.
fn matches_pattern(value: &str, pattern: &str) -> bool {
    let rule = format!("self.matches({})", serde_json::to_string(pattern).unwrap());
    let schema = json!({"type": "string", "x-kubernetes-validations": [{"rule": rule}]});
    Validator::new().validate(&schema, &json!(value), None).is_ok()
}

/// The structural keywords the EC2NodeClass CRD uses, checked the way the API server does.
fn schema_errors(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let s = |k: &str| schema.get(k);
    let count = |k: &str| s(k).and_then(Value::as_u64);
    if let Some(en) = s("enum").and_then(Value::as_array)
        && !en.contains(v)
    {
        out.push(format!("{path}: {v} not in enum"));
    }
    match v {
        Value::String(st) => {
            let n = st.chars().count() as u64;
            if count("maxLength").is_some_and(|m| n > m) {
                out.push(format!("{path}: longer than maxLength"));
            }
            if count("minLength").is_some_and(|m| n < m) {
                out.push(format!("{path}: shorter than minLength"));
            }
            if let Some(p) = s("pattern").and_then(Value::as_str)
                && !matches_pattern(st, p)
            {
                out.push(format!("{path}: {st:?} does not match {p}"));
            }
            if s("type").and_then(Value::as_str).is_some_and(|t| t != "string") {
                out.push(format!("{path}: expected {}", s("type").unwrap()));
            }
        }
        Value::Number(num) => {
            let x = num.as_f64().unwrap_or(f64::NAN);
            if s("minimum").and_then(Value::as_f64).is_some_and(|m| x < m) {
                out.push(format!("{path}: below minimum"));
            }
            if s("maximum").and_then(Value::as_f64).is_some_and(|m| x > m) {
                out.push(format!("{path}: above maximum"));
            }
        }
        Value::Array(items) => {
            if count("maxItems").is_some_and(|m| items.len() as u64 > m) {
                out.push(format!("{path}: more than maxItems"));
            }
            if count("minItems").is_some_and(|m| (items.len() as u64) < m) {
                out.push(format!("{path}: fewer than minItems"));
            }
            if let Some(is) = s("items") {
                for (i, it) in items.iter().enumerate() {
                    schema_errors(is, it, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            if count("maxProperties").is_some_and(|m| map.len() as u64 > m) {
                out.push(format!("{path}: more than maxProperties"));
            }
            for r in s("required").and_then(Value::as_array).into_iter().flatten() {
                if let Some(r) = r.as_str()
                    && !map.contains_key(r)
                {
                    out.push(format!("{path}.{r}: required"));
                }
            }
            let props = s("properties").and_then(Value::as_object);
            for (k, child) in map {
                if path.is_empty() && k == "metadata" {
                    continue;
                }
                let cp = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                if let Some(ps) = props.and_then(|p| p.get(k)) {
                    schema_errors(ps, child, &cp, out);
                } else if let Some(ap) = s("additionalProperties").filter(|a| a.is_object()) {
                    schema_errors(ap, child, &format!("{path}[{k}]"), out);
                }
            }
        }
        _ => {}
    }
}

#[derive(Default)]
struct Header {
    expects: Vec<String>,
    cel_rejects: bool,
    schema_rejects: bool,
    parse_rejects: Option<String>,
}

fn header(text: &str) -> Header {
    let mut h = Header::default();
    for line in text.lines().take_while(|l| l.starts_with('#')) {
        let l = line.trim_start_matches('#').trim();
        if let Some(p) = l.strip_prefix("expect:") {
            h.expects.push(p.trim().to_string());
        } else if l == "cel: rejects" {
            h.cel_rejects = true;
        } else if l == "schema: rejects" {
            h.schema_rejects = true;
        } else if let Some(p) = l.strip_prefix("parse: rejects") {
            h.parse_rejects = Some(p.trim().to_string());
        }
    }
    h
}

#[test]
fn valid_ec2nodeclasses_pass_rust_cel_and_schema() {
    let schema = schema();
    let mut files = ec2_files(&crate_dir().join("tests/fixtures/valid"));
    let examples = ec2_files(&crate_dir().join("../../examples/manifests"));
    assert!(examples.len() >= 3, "expected EC2NodeClass examples, found {}", examples.len());
    files.extend(examples);
    assert!(files.len() >= 15, "only {} valid EC2NodeClass manifests", files.len());
    let mut failures = Vec::new();
    for f in &files {
        let name = f.display();
        let text = std::fs::read_to_string(f).unwrap();
        match serde_saphyr::from_str::<EC2NodeClass>(&text) {
            Err(e) => failures.push(format!("{name}: does not decode: {e}")),
            Ok(nc) => {
                let v = nc.validate(&ValidationContext::default());
                if !v.is_empty() {
                    failures.push(format!("{name}: Rust violations: {v:?}"));
                }
                if nc.effective_ami_family().is_none() {
                    failures.push(format!("{name}: no effective AMI family"));
                }
            }
        }
        let obj: Value = serde_saphyr::from_str(&text).unwrap();
        for (what, old) in [("create", None), ("self-update", Some(&obj))] {
            let cel = cel_errors(&schema, &obj, old);
            if !cel.is_empty() {
                failures.push(format!("{name}: CEL rejects on {what}: {cel:?}"));
            }
        }
        let mut se = Vec::new();
        schema_errors(&schema, &obj, "", &mut se);
        if !se.is_empty() {
            failures.push(format!("{name}: schema rejects: {se:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn invalid_ec2nodeclasses_are_rejected_where_the_header_says() {
    let schema = schema();
    let files = ec2_files(&crate_dir().join("tests/fixtures/invalid"));
    assert!(files.len() >= 60, "expected one invalid EC2NodeClass fixture per rule, found {}", files.len());
    let mut failures = Vec::new();
    for f in &files {
        let name = f.display();
        let text = std::fs::read_to_string(f).unwrap();
        let h = header(&text);
        if h.expects.is_empty() && h.parse_rejects.is_none() {
            failures.push(format!("{name}: header has neither '# expect:' nor '# parse: rejects'"));
        }
        if !h.cel_rejects && !h.schema_rejects && h.parse_rejects.is_none() {
            failures.push(format!("{name}: nothing rejects this fixture (cel, schema or parse)"));
        }
        match (serde_saphyr::from_str::<EC2NodeClass>(&text), &h.parse_rejects) {
            (Ok(_), Some(p)) => failures.push(format!("{name}: expected decoding to fail mentioning {p:?}")),
            (Err(e), Some(p)) => {
                if !e.to_string().contains(p.as_str()) {
                    failures.push(format!("{name}: decode error does not mention {p:?}: {e}"));
                }
            }
            (Err(e), None) => failures.push(format!("{name}: does not decode: {e}")),
            (Ok(nc), None) => {
                let v = nc.validate(&ValidationContext::default());
                for e in &h.expects {
                    if !v.has_path(e) {
                        failures.push(format!("{name}: no Rust violation at {e}; got {v:?}"));
                    }
                }
            }
        }
        let obj: Value = serde_saphyr::from_str(&text).unwrap();
        let cel = cel_errors(&schema, &obj, None);
        if h.cel_rejects && cel.is_empty() {
            failures.push(format!("{name}: CEL accepts, header says '# cel: rejects'"));
        }
        if !h.cel_rejects && !cel.is_empty() {
            failures.push(format!("{name}: CEL rejects ({cel:?}) but the header lacks '# cel: rejects'"));
        }
        let mut se = Vec::new();
        schema_errors(&schema, &obj, "", &mut se);
        if h.schema_rejects && se.is_empty() {
            failures.push(format!("{name}: schema accepts, header says '# schema: rejects'"));
        }
        if !h.schema_rejects && !se.is_empty() {
            failures.push(format!("{name}: schema rejects ({se:?}) but the header lacks '# schema: rejects'"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn defaults_are_applied_on_decode_and_by_the_schema() {
    let text =
        std::fs::read_to_string(crate_dir().join("tests/fixtures/valid/ec2nodeclass-al2023-alias.yaml")).unwrap();
    let nc: EC2NodeClass = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(nc.spec.metadata_options.http_put_response_hop_limit, 1);
    assert_eq!(nc.spec.metadata_options.http_tokens, HttpTokens::Required);
    assert_eq!(nc.effective_ami_family(), Some(AmiFamily::Al2023));
    let s = schema();
    let mo = &s["properties"]["spec"]["properties"]["metadataOptions"];
    assert_eq!(
        mo["default"],
        json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"})
    );
    assert_eq!(mo["properties"]["httpTokens"]["default"], json!("required"));
}

#[test]
fn crd_names_columns_and_subresources() {
    let c = crd::generate::<EC2NodeClass>(&ProviderLabels::aws());
    assert_eq!(c.spec.group, "karpenter.k8s.aws");
    assert_eq!(c.spec.scope, "Cluster");
    assert_eq!(c.spec.names.kind, "EC2NodeClass");
    assert_eq!(c.spec.names.plural, "ec2nodeclasses");
    assert_eq!(c.spec.names.short_names, Some(vec!["ec2nc".to_string(), "ec2ncs".to_string()]));
    assert_eq!(c.spec.names.categories, Some(vec!["karpenter".to_string()]));
    let v = &c.spec.versions[0];
    assert_eq!(v.name, "v1");
    assert!(v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
    let cols: Vec<(String, i32)> =
        v.additional_printer_columns.iter().flatten().map(|c| (c.name.clone(), c.priority.unwrap_or(0))).collect();
    assert_eq!(cols, vec![("Ready".into(), 0), ("Age".into(), 0), ("Role".into(), 1)]);
    assert!(crd::crds(&ProviderLabels::aws()).iter().any(|c| c.spec.names.kind == "EC2NodeClass"));
    assert!(!crd::crds(&ProviderLabels::kwok()).iter().any(|c| c.spec.names.kind == "EC2NodeClass"));
}
