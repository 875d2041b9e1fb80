//! The fixture harness shared by the integration tests: the generated CRD schemas by kind, typed decoding of every
//! kind, Rust validation, CEL evaluation with kube-cel, a structural-schema checker, the fixture header parser, and
//! the per-fixture checks the valid/invalid fixture loops run.
//!
//! Node classes are the providers': the harness knows them through the [`NodeClassApis`] a test passes (decoding
//! is the API's `decode_json`, validation its `validate`), so a provider crate runs its own fixtures with this
//! same harness (`#[path]` to this file).
//!
//! Fixture headers (leading `#` lines of `tests/fixtures/invalid/*.yaml`) say what must happen:
//! - `# expect: <path>`: a Rust violation with exactly this field path (repeatable);
//! - `# cel: rejects`: the CRD's CEL rules reject the object, and they accept it when the line is absent;
//! - `# schema: rejects`: a structural keyword rejects it (pattern, enum, lengths, counts, ranges, required), and
//!   none does when the line is absent;
//! - `# old: <file>`: an update from `tests/fixtures/old/<file>` (transition rules, `validate_update`);
//! - `# parse: rejects <text>`: decoding into the typed object fails with an error mentioning `<text>`;
//! - `# controller: rejects`: the CRD accepts it on purpose and the EC2NodeClass controller's validation rejects
//!   it (`spec.kubelet`, an open map since v1.15); every `# expect:` path must be under `spec.kubelet`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use karpenter_api::crd;
use karpenter_api::node_class_api::{NodeClassApi, NodeClassApis};
use karpenter_api::{
    CapacityBuffer, NodeClaim, NodeOverlay, NodePool, ProviderLabels, Validate, ValidationContext, Violations,
};
use kube_cel::{ScopeContext, Validator, WarningKind, analyze_rule, compile_schema};
use serde_json::{Value, json};

/// The AWS and kwok label sets as test data (this crate may not depend on the providers' crates); karpenter-aws's
/// and karpenter-kwok's tests, which include this module, check them against the providers' own sets.
#[path = "../../src/test_vocabulary.rs"]
pub mod vocabulary;

/// Kinds whose every rule is enforced by the CRD (upstream has no admission webhook for them), so each invalid
/// fixture of these kinds must be rejected by CEL, the schema or decoding, never by Rust validation alone.
const CRD_ENFORCES_EVERY_RULE: &[&str] = &["EC2NodeClass"];

pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `*.yaml` files of `dir`, sorted; none if `dir` cannot be read.
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    files
}

/// `openAPIV3Schema` of every generated CRD (the core kinds and CapacityBuffer, and the node classes of
/// `node_classes`, with the AWS label set), by kind.
pub fn schemas(node_classes: &NodeClassApis) -> BTreeMap<String, Value> {
    let aws = vocabulary::aws();
    let mut crds = karpenter_api::node_class_api::crds_with(&aws, node_classes);
    crds.extend(crd::optional_crds(&aws));
    crds.iter()
        .map(|c| {
            let schema = c.spec.versions[0].schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).unwrap();
            (c.spec.names.kind.clone(), serde_json::to_value(schema).unwrap())
        })
        .collect()
}

pub enum Typed {
    NodePool(Box<NodePool>),
    NodeClaim(Box<NodeClaim>),
    /// A provider's node class, as JSON, with its API.
    NodeClass(&'static dyn NodeClassApi, Box<Value>),
    Overlay(Box<NodeOverlay>),
    Buffer(Box<CapacityBuffer>),
}

pub fn kind_of(text: &str) -> Option<String> {
    let v: Value = serde_saphyr::from_str(text).ok()?;
    v.get("kind")?.as_str().map(str::to_string)
}

/// Decodes into the typed object (a node class of `node_classes` through its API); `None` for a missing or
/// unknown kind.
pub fn decode(text: &str, node_classes: &NodeClassApis) -> Option<Result<Typed, String>> {
    let kind = kind_of(text)?;
    let r = match kind.as_str() {
        "NodePool" => serde_saphyr::from_str::<NodePool>(text).map(|o| Typed::NodePool(Box::new(o))),
        "NodeClaim" => serde_saphyr::from_str::<NodeClaim>(text).map(|o| Typed::NodeClaim(Box::new(o))),
        "NodeOverlay" => serde_saphyr::from_str::<NodeOverlay>(text).map(|o| Typed::Overlay(Box::new(o))),
        "CapacityBuffer" => serde_saphyr::from_str::<CapacityBuffer>(text).map(|o| Typed::Buffer(Box::new(o))),
        other => {
            let api = node_classes.iter().find(|a| a.kind() == other)?;
            let value: Value = match serde_saphyr::from_str(text) {
                Ok(v) => v,
                Err(e) => return Some(Err(e.to_string())),
            };
            return Some(match api.decode_json(&value) {
                Ok(_) => Ok(Typed::NodeClass(api, Box::new(value))),
                Err(v) => Err(v.to_string()),
            });
        }
    };
    Some(r.map_err(|e| e.to_string()))
}

/// A node class decodes to the same JSON after encoding and decoding again, and encodes no `null`.
pub fn node_class_round_trip(api: &dyn NodeClassApi, value: &Value) -> Result<(), String> {
    let once = api.decode_json(value).map_err(|e| e.to_string())?;
    if once.to_string().contains("null") {
        return Err(format!("encodes a null: {once}"));
    }
    let twice = api.decode_json(&once).map_err(|e| format!("does not decode after encoding: {e}"))?;
    if twice != once {
        return Err(format!("round trip changed the object: {twice}"));
    }
    Ok(())
}

/// Encoding and decoding again gives the same object, and absent optional fields stay absent (no `null`).
pub fn round_trip<T>(o: &T) -> Result<(), String>
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

/// Rust validation: `validate_update` for the kinds that have one when `old` is the same kind, else `validate`.
pub fn rust_violations(new: &Typed, old: Option<&Typed>) -> Violations {
    let ctx = ValidationContext::new(vocabulary::aws());
    match (new, old) {
        (Typed::NodePool(n), Some(Typed::NodePool(o))) => n.validate_update(o, &ctx),
        (Typed::NodeClaim(n), Some(Typed::NodeClaim(o))) => n.validate_update(o, &ctx),
        (Typed::NodePool(n), _) => n.validate(&ctx),
        (Typed::NodeClaim(n), _) => n.validate(&ctx),
        (Typed::NodeClass(api, n), _) => api.validate(n, &ctx),
        (Typed::Overlay(n), _) => n.validate(&ctx),
        (Typed::Buffer(n), _) => n.validate(&ctx),
    }
}

pub fn cel_errors(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(schema, obj, old) {
        Ok(()) => Vec::new(),
        Err(errs) => errs.iter().map(|e| e.to_string()).collect(),
    }
}

/// Does `value` match the regular expression `pattern`? Evaluated by the CEL engine's `matches`, i.e. the same
/// RE2-style engine kube-cel (and the API server) uses.
pub fn matches_pattern(value: &str, pattern: &str) -> bool {
    let rule = format!("self.matches({})", serde_json::to_string(pattern).unwrap());
    let schema = json!({"type": "string", "x-kubernetes-validations": [{"rule": rule}]});
    Validator::new().validate(&schema, &json!(value), None).is_ok()
}

/// A small structural validator for the keywords our CRDs use (what the API server checks besides CEL): enum,
/// string lengths and patterns, string-vs-type (int-or-string excepted), numeric ranges (and patterns on the numeric
/// side of int-or-string), item and property counts, required properties. The top-level `metadata` is skipped.
pub fn schema_errors(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
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

/// What a fixture's header says must happen (see the module docs).
#[derive(Debug, Default)]
pub struct Header {
    pub expects: Vec<String>,
    pub cel_rejects: bool,
    pub schema_rejects: bool,
    pub old: Option<String>,
    pub parse_rejects: Option<String>,
    pub controller_rejects: bool,
}

pub fn header(text: &str) -> Header {
    let mut h = Header::default();
    for line in text.lines().take_while(|l| l.starts_with('#')) {
        let l = line.trim_start_matches('#').trim();
        if let Some(p) = l.strip_prefix("expect:") {
            h.expects.push(p.trim().to_string());
        } else if l == "cel: rejects" {
            h.cel_rejects = true;
        } else if l == "schema: rejects" {
            h.schema_rejects = true;
        } else if l == "controller: rejects" {
            h.controller_rejects = true;
        } else if let Some(o) = l.strip_prefix("old:") {
            h.old = Some(o.trim().to_string());
        } else if let Some(p) = l.strip_prefix("parse: rejects") {
            h.parse_rejects = Some(p.trim().to_string());
        }
    }
    h
}

/// Checks one manifest that must be accepted: it decodes, Rust validation reports nothing, it round-trips, CEL
/// accepts it on create and as an update to itself, and the schema keywords accept it. Returns the manifest's
/// kind (if known) and the failures.
pub fn check_valid(
    name: &str,
    text: &str,
    schemas: &BTreeMap<String, Value>,
    node_classes: &NodeClassApis,
) -> (Option<String>, Vec<String>) {
    let mut failures = Vec::new();
    let Some((kind, schema, obj)) = kind_schema_and_object(name, text, schemas, &mut failures) else {
        return (None, failures);
    };
    match decode(text, node_classes) {
        None => failures.push(format!("{name}: kind {kind} has no typed decoder in the harness")),
        Some(Err(e)) => failures.push(format!("{name}: does not decode: {e}")),
        Some(Ok(typed)) => {
            let v = rust_violations(&typed, None);
            if !v.is_empty() {
                failures.push(format!("{name}: Rust violations: {v:?}"));
            }
            let round_trips = match &typed {
                Typed::NodePool(o) => round_trip(o.as_ref()),
                Typed::NodeClaim(o) => round_trip(o.as_ref()),
                Typed::NodeClass(api, o) => node_class_round_trip(*api, o),
                Typed::Overlay(o) => round_trip(o.as_ref()),
                Typed::Buffer(o) => round_trip(o.as_ref()),
            };
            if let Err(e) = round_trips {
                failures.push(format!("{name}: {e}"));
            }
        }
    }
    for (what, old) in [("create", None), ("self-update", Some(&obj))] {
        let cel = cel_errors(schema, &obj, old);
        if !cel.is_empty() {
            failures.push(format!("{name}: CEL rejects on {what}: {cel:?}"));
        }
    }
    let mut se = Vec::new();
    schema_errors(schema, &obj, "", &mut se);
    if !se.is_empty() {
        failures.push(format!("{name}: schema rejects: {se:?}"));
    }
    (Some(kind), failures)
}

/// Checks one manifest that must be rejected exactly where its header says (see the module docs); `old_dir` holds
/// the files `# old:` names. Returns the manifest's kind (if known) and the failures.
pub fn check_invalid(
    name: &str,
    text: &str,
    old_dir: &Path,
    schemas: &BTreeMap<String, Value>,
    node_classes: &NodeClassApis,
) -> (Option<String>, Vec<String>) {
    let mut failures = Vec::new();
    let h = header(text);
    if h.expects.is_empty() && h.parse_rejects.is_none() {
        failures.push(format!("{name}: header has neither '# expect:' nor '# parse: rejects'"));
    }
    let Some((kind, schema, obj)) = kind_schema_and_object(name, text, schemas, &mut failures) else {
        return (None, failures);
    };
    if CRD_ENFORCES_EVERY_RULE.contains(&kind.as_str())
        && !h.cel_rejects
        && !h.schema_rejects
        && h.parse_rejects.is_none()
        && !h.controller_rejects
    {
        failures.push(format!("{name}: nothing rejects this fixture (cel, schema, parse or controller)"));
    }
    if h.controller_rejects && h.expects.iter().any(|e| !e.starts_with("spec.kubelet")) {
        failures.push(format!("{name}: '# controller: rejects' is for spec.kubelet paths only"));
    }
    let old_text = match h.old.as_ref().map(|o| std::fs::read_to_string(old_dir.join(o)).map_err(|e| (o, e))) {
        Some(Err((o, e))) => {
            failures.push(format!("{name}: cannot read old object {o}: {e}"));
            return (Some(kind), failures);
        }
        Some(Ok(t)) => Some(t),
        None => None,
    };
    let old_obj: Option<Value> = old_text.as_ref().map(|t| serde_saphyr::from_str(t).unwrap());

    match (decode(text, node_classes), &h.parse_rejects) {
        (None, _) => failures.push(format!("{name}: kind {kind} has no typed decoder in the harness")),
        (Some(Ok(_)), Some(p)) => failures.push(format!("{name}: expected decoding to fail mentioning {p:?}")),
        (Some(Err(e)), Some(p)) => {
            if !e.contains(p.as_str()) {
                failures.push(format!("{name}: decode error does not mention {p:?}: {e}"));
            }
        }
        (Some(Err(e)), None) => failures.push(format!("{name}: does not decode: {e}")),
        (Some(Ok(typed)), None) => {
            let old_typed = old_text.as_ref().map(|t| decode(t, node_classes).unwrap().unwrap());
            let v = rust_violations(&typed, old_typed.as_ref());
            for e in &h.expects {
                if !v.has_path(e) {
                    failures.push(format!("{name}: no Rust violation at {e}; got {v:?}"));
                }
            }
        }
    }
    let cel = cel_errors(schema, &obj, old_obj.as_ref());
    if h.cel_rejects && cel.is_empty() {
        failures.push(format!("{name}: CEL accepts, header says '# cel: rejects'"));
    }
    if !h.cel_rejects && !cel.is_empty() {
        failures.push(format!("{name}: CEL rejects ({cel:?}) but the header lacks '# cel: rejects'"));
    }
    let mut se = Vec::new();
    schema_errors(schema, &obj, "", &mut se);
    if h.schema_rejects && se.is_empty() {
        failures.push(format!("{name}: schema accepts, header says '# schema: rejects'"));
    }
    if !h.schema_rejects && !se.is_empty() {
        failures.push(format!("{name}: schema rejects ({se:?}) but the header lacks '# schema: rejects'"));
    }
    (Some(kind), failures)
}

/// The manifest's kind, that kind's CRD schema and the untyped object; `None` (with a failure) if any is missing.
fn kind_schema_and_object<'s>(
    name: &str,
    text: &str,
    schemas: &'s BTreeMap<String, Value>,
    failures: &mut Vec<String>,
) -> Option<(String, &'s Value, Value)> {
    let obj: Value = match serde_saphyr::from_str(text) {
        Ok(o) => o,
        Err(e) => {
            failures.push(format!("{name}: not YAML: {e}"));
            return None;
        }
    };
    let Some(kind) = obj.get("kind").and_then(Value::as_str).map(str::to_string) else {
        failures.push(format!("{name}: no kind"));
        return None;
    };
    let Some(schema) = schemas.get(&kind) else {
        failures.push(format!("{name}: no CRD for kind {kind}"));
        return None;
    };
    Some((kind, schema, obj))
}

/// Every `x-kubernetes-validations` rule under `node` (at `path`) that does not compile or exceeds the cost
/// budget goes to `out`; `rules` counts the rules seen.
pub fn cel_rule_problems(node: &Value, path: &str, out: &mut Vec<String>, rules: &mut usize) {
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
                    cel_rule_problems(c, &format!("{path}.{name}"), out, rules);
                }
            }
            "items" => cel_rule_problems(child, &format!("{path}[]"), out, rules),
            "additionalProperties" => cel_rule_problems(child, &format!("{path}{{}}"), out, rules),
            _ => {}
        }
    }
}
