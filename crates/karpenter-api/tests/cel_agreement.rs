//! Rust validation and the generated CRDs (schema + CEL, evaluated with kube-cel) must agree.
//!
//! - `tests/fixtures/valid/*.yaml` and `examples/manifests/*.yaml`: Rust `validate()` reports nothing, the CEL
//!   rules accept, and the schema keywords (pattern, enum, lengths, ranges, required) accept.
//! - `tests/fixtures/invalid/*.yaml`: header comments say what must happen:
//!   - `# expect: <path>`: a Rust violation with exactly this field path;
//!   - `# cel: rejects`: the CRD's CEL rules reject the object (for rules upstream enforces in CEL);
//!   - `# schema: rejects`: the CRD's structural keywords reject it (pattern, enum, min/max...);
//!   - `# old: <file>`: an update from `tests/fixtures/old/<file>` (transition rules, `validate_update`);
//!   - `# parse: rejects <text>`: decoding into the typed object fails with an error mentioning `<text>`.
//!
//! Files named `ec2nodeclass-*` belong to the EC2NodeClass tests and are skipped here.

use std::path::{Path, PathBuf};

use karpenter_api::crd;
use karpenter_api::{KWOKNodeClass, NodeClaim, NodePool, ProviderLabels, Validate, ValidationContext, Violations};
use kube_cel::{ScopeContext, Validator, WarningKind, analyze_rule, compile_schema};
use serde_json::{Value, json};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p| {
        p.extension().is_some_and(|e| e == "yaml")
            && !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ec2nodeclass-"))
    });
    files.sort();
    files
}

/// `openAPIV3Schema` of each kind's generated CRD (AWS provider), by kind.
fn schemas() -> Vec<(String, Value)> {
    let mut crds = crd::crds(&ProviderLabels::aws());
    crds.extend(crd::node_class_crds(&ProviderLabels::kwok()));
    crds.iter()
        .map(|c| {
            let schema = c.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).unwrap();
            (c.spec.names.kind.clone(), serde_json::to_value(schema).unwrap())
        })
        .collect()
}

fn schema_for(kind: &str) -> Option<Value> {
    schemas().into_iter().find(|(k, _)| k == kind).map(|(_, s)| s)
}

enum Typed {
    NodePool(Box<NodePool>),
    NodeClaim(Box<NodeClaim>),
    Kwok(Box<KWOKNodeClass>),
}

fn kind_of(text: &str) -> Option<String> {
    let v: Value = serde_saphyr::from_str(text).ok()?;
    v.get("kind")?.as_str().map(str::to_string)
}

/// Decodes into the typed object; `None` for kinds this test does not own.
fn decode(text: &str) -> Option<Result<Typed, String>> {
    let kind = kind_of(text)?;
    let r = match kind.as_str() {
        "NodePool" => serde_saphyr::from_str::<NodePool>(text).map(|o| Typed::NodePool(Box::new(o))),
        "NodeClaim" => serde_saphyr::from_str::<NodeClaim>(text).map(|o| Typed::NodeClaim(Box::new(o))),
        "KWOKNodeClass" => serde_saphyr::from_str::<KWOKNodeClass>(text).map(|o| Typed::Kwok(Box::new(o))),
        _ => return None,
    };
    Some(r.map_err(|e| e.to_string()))
}

fn round_trip<T>(o: &T) -> Result<(), String>
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let json = serde_json::to_value(o).map_err(|e| e.to_string())?;
    if json.to_string().contains("null") {
        return Err(format!("encodes a null: {json}"));
    }
    let back: T = serde_json::from_value(json).map_err(|e| format!("does not decode after encoding: {e}"))?;
    if &back != o {
        return Err(format!("round trip changed the object: {back:?}"));
    }
    Ok(())
}

fn rust_violations(new: &Typed, old: Option<&Typed>) -> Violations {
    let ctx = ValidationContext::default();
    match (new, old) {
        (Typed::NodePool(n), Some(Typed::NodePool(o))) => n.validate_update(o, &ctx),
        (Typed::NodeClaim(n), Some(Typed::NodeClaim(o))) => n.validate_update(o, &ctx),
        (Typed::NodePool(n), _) => n.validate(&ctx),
        (Typed::NodeClaim(n), _) => n.validate(&ctx),
        (Typed::Kwok(n), _) => n.validate(&ctx),
    }
}

fn cel_errors(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(schema, obj, old) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
    }
}

/// Does `value` match the regular expression `pattern`? Evaluated by the CEL engine's `matches`, i.e. the same
/// RE2-style engine kube-cel uses.
fn matches_pattern(value: &str, pattern: &str) -> bool {
    let rule = format!("self.matches({})", serde_json::to_string(pattern).unwrap());
    let schema = json!({"type": "string", "x-kubernetes-validations": [{"rule": rule}]});
    Validator::new().validate(&schema, &json!(value), None).is_ok()
}

/// A small structural validator for the keywords our CRDs use (what the API server checks besides CEL).
fn schema_errors(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let s = |k: &str| schema.get(k);
    if let (Some(en), false) = (s("enum").and_then(Value::as_array), v.is_null())
        && !en.contains(v)
    {
        out.push(format!("{path}: {v} not in enum"));
    }
    match v {
        Value::String(st) => {
            let n = st.chars().count() as u64;
            if s("maxLength").and_then(Value::as_u64).is_some_and(|m| n > m) {
                out.push(format!("{path}: longer than maxLength"));
            }
            if s("minLength").and_then(Value::as_u64).is_some_and(|m| n < m) {
                out.push(format!("{path}: shorter than minLength"));
            }
            if let Some(p) = s("pattern").and_then(Value::as_str)
                && !matches_pattern(st, p)
            {
                out.push(format!("{path}: {st:?} does not match {p}"));
            }
            if s("type").and_then(Value::as_str).is_some_and(|t| t != "string")
                && s("x-kubernetes-int-or-string").is_none()
            {
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
            if let Some(p) = s("pattern").and_then(Value::as_str)
                && !matches_pattern(&num.to_string(), p)
            {
                out.push(format!("{path}: {num} does not match {p}"));
            }
        }
        Value::Array(items) => {
            if s("maxItems").and_then(Value::as_u64).is_some_and(|m| items.len() as u64 > m) {
                out.push(format!("{path}: more than maxItems"));
            }
            if let Some(is) = s("items") {
                for (i, it) in items.iter().enumerate() {
                    schema_errors(is, it, &format!("{path}[{i}]"), out);
                }
            }
        }
        Value::Object(map) => {
            if s("maxProperties").and_then(Value::as_u64).is_some_and(|m| map.len() as u64 > m) {
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

struct Header {
    expects: Vec<String>,
    cel_rejects: bool,
    schema_rejects: bool,
    old: Option<String>,
    parse_rejects: Option<String>,
}

fn header(text: &str) -> Header {
    let mut h =
        Header { expects: Vec::new(), cel_rejects: false, schema_rejects: false, old: None, parse_rejects: None };
    for line in text.lines().take_while(|l| l.starts_with('#')) {
        let l = line.trim_start_matches('#').trim();
        if let Some(p) = l.strip_prefix("expect:") {
            h.expects.push(p.trim().to_string());
        } else if l == "cel: rejects" {
            h.cel_rejects = true;
        } else if l == "schema: rejects" {
            h.schema_rejects = true;
        } else if let Some(o) = l.strip_prefix("old:") {
            h.old = Some(o.trim().to_string());
        } else if let Some(p) = l.strip_prefix("parse: rejects") {
            h.parse_rejects = Some(p.trim().to_string());
        }
    }
    h
}

#[test]
fn valid_fixtures_and_examples_pass_rust_cel_and_schema() {
    let mut files = yaml_files(&crate_dir().join("tests/fixtures/valid"));
    let examples = yaml_files(&crate_dir().join("../../examples/manifests"));
    assert!(examples.iter().any(|p| p.to_string_lossy().contains("nodepool-")), "no NodePool examples found");
    files.extend(examples);
    let mut failures = Vec::new();
    let mut checked = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let Some(decoded) = decode(&text) else { continue };
        checked += 1;
        let typed = match decoded {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{}: does not decode: {e}", f.display()));
                continue;
            }
        };
        let v = rust_violations(&typed, None);
        if !v.is_empty() {
            failures.push(format!("{}: Rust violations: {v:?}", f.display()));
        }
        // Round trip: encoding the typed object and decoding it again gives the same object, and absent
        // optional fields stay absent.
        let round_trips = match &typed {
            Typed::NodePool(o) => round_trip(o.as_ref()),
            Typed::NodeClaim(o) => round_trip(o.as_ref()),
            Typed::Kwok(o) => round_trip(o.as_ref()),
        };
        if let Err(e) = round_trips {
            failures.push(format!("{}: {e}", f.display()));
        }
        let obj: Value = serde_saphyr::from_str(&text).unwrap();
        let kind = kind_of(&text).unwrap();
        let schema = schema_for(&kind).unwrap();
        let cel = cel_errors(&schema, &obj, None);
        if !cel.is_empty() {
            failures.push(format!("{}: CEL rejects: {cel:?}", f.display()));
        }
        // Updating an object to itself must pass the transition rules too.
        let cel = cel_errors(&schema, &obj, Some(&obj));
        if !cel.is_empty() {
            failures.push(format!("{}: CEL rejects self-update: {cel:?}", f.display()));
        }
        let mut se = Vec::new();
        schema_errors(&schema, &obj, "", &mut se);
        if !se.is_empty() {
            failures.push(format!("{}: schema rejects: {se:?}", f.display()));
        }
    }
    assert!(checked >= 10, "only {checked} valid manifests checked");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn invalid_fixtures_are_rejected_where_the_header_says() {
    let dir = crate_dir().join("tests/fixtures");
    let files = yaml_files(&dir.join("invalid"));
    assert!(files.len() >= 60, "expected one invalid fixture per rule, found {}", files.len());
    let mut failures = Vec::new();
    for f in &files {
        let name = f.display();
        let text = std::fs::read_to_string(f).unwrap();
        let h = header(&text);
        if h.expects.is_empty() && h.parse_rejects.is_none() {
            failures.push(format!("{name}: header has neither '# expect:' nor '# parse: rejects'"));
        }
        let old_text = h.old.as_ref().map(|o| std::fs::read_to_string(dir.join("old").join(o)).unwrap());
        let obj: Value = serde_saphyr::from_str(&text).unwrap();
        let old_obj: Option<Value> = old_text.as_ref().map(|t| serde_saphyr::from_str(t).unwrap());
        let kind = kind_of(&text).unwrap();
        let schema = schema_for(&kind).unwrap();

        match (decode(&text).unwrap(), &h.parse_rejects) {
            (Ok(_), Some(p)) => failures.push(format!("{name}: expected decoding to fail mentioning {p:?}")),
            (Err(e), Some(p)) => {
                if !e.contains(p.as_str()) {
                    failures.push(format!("{name}: decode error does not mention {p:?}: {e}"));
                }
            }
            (Err(e), None) => failures.push(format!("{name}: does not decode: {e}")),
            (Ok(typed), None) => {
                let old_typed = old_text.as_ref().map(|t| decode(t).unwrap().unwrap());
                let v = rust_violations(&typed, old_typed.as_ref());
                for e in &h.expects {
                    if !v.has_path(e) {
                        failures.push(format!("{name}: no Rust violation at {e}; got {v:?}"));
                    }
                }
            }
        }
        let cel = cel_errors(&schema, &obj, old_obj.as_ref());
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
