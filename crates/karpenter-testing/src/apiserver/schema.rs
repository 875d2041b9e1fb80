//! Custom resources against their CRD's structural schema, in the real server's order: prune unknown fields
//! (and nulls where not nullable), apply defaults, validate the schema (types, required, enum, bounds), then the
//! `x-kubernetes-validations` CEL rules (with the old object for transition rules).

use std::sync::Arc;

use kube_cel::{CompiledSchema, ErrorKind};
use serde_json::{Map, Value};

/// A served version's `openAPIV3Schema`, with its CEL rules compiled once.
#[derive(Debug)]
pub struct CrSchema {
    raw: Value,
    compiled: CompiledSchema,
}

/// Shared handle on a [`CrSchema`] (equal when it is the same schema).
#[derive(Debug, Clone)]
pub struct SchemaRef(pub(crate) Arc<CrSchema>);

impl PartialEq for SchemaRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SchemaRef {}

impl SchemaRef {
    pub(crate) fn new(raw: Value) -> Self {
        let compiled = kube_cel::compile_schema(&raw);
        Self(Arc::new(CrSchema { raw, compiled }))
    }

    /// The object as the server stores it, or the list of field errors.
    pub(crate) fn admit(&self, obj: Value, old: Option<&Value>) -> Result<Value, Vec<String>> {
        let mut obj = obj;
        prune(&self.0.raw, &mut obj, true);
        let obj = kube_cel::apply_defaults(&self.0.raw, &obj);
        let mut errors = Vec::new();
        check(&self.0.raw, &obj, "", &mut errors, true);
        if errors.is_empty()
            && let Err(cel) = kube_cel::validate_compiled(&self.0.compiled, &obj, old)
        {
            for e in cel.iter() {
                // Rules this CEL implementation cannot compile or evaluate are coverage gaps, not verdicts: the
                // object is accepted (the real server would evaluate them).
                if matches!(
                    e.kind,
                    ErrorKind::CompilationFailure | ErrorKind::InvalidRule | ErrorKind::UnsupportedReference
                ) {
                    continue;
                }
                errors.push(e.to_string());
            }
        }
        if errors.is_empty() { Ok(obj) } else { Err(errors) }
    }
}

fn is_true(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Drops fields the schema does not declare (unless it preserves unknown fields) and nulls where the schema is
/// not nullable. At the root and in embedded resources, apiVersion/kind/metadata are kept.
fn prune(schema: &Value, v: &mut Value, root: bool) {
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let preserve = is_true(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = root || is_true(schema, "x-kubernetes-embedded-resource");
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    if k == "metadata"
                        && let Some(m) = map.get_mut("metadata")
                    {
                        prune_nulls(m);
                    }
                    continue;
                }
                let child_schema = props.and_then(|p| p.get(&k)).or(additional);
                match child_schema {
                    Some(cs) => {
                        let drop = map.get(&k).is_some_and(Value::is_null) && !is_true(cs, "nullable");
                        if drop {
                            map.remove(&k);
                        } else if let Some(child) = map.get_mut(&k) {
                            prune(cs, child, false);
                        }
                    }
                    None if preserve || schema.get("additionalProperties") == Some(&Value::Bool(true)) => {}
                    None => {
                        map.remove(&k);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items.iter_mut() {
                    prune(item_schema, item, false);
                }
            }
        }
        _ => {}
    }
}

fn prune_nulls(v: &mut Value) {
    if let Value::Object(m) = v {
        m.retain(|_, x| !x.is_null());
    }
}

fn describe(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 80 { format!("{}…", s.chars().take(80).collect::<String>()) } else { s }
}

fn type_ok(schema: &Value, v: &Value) -> Result<(), String> {
    if is_true(schema, "x-kubernetes-int-or-string") {
        return if v.is_i64() || v.is_u64() || v.is_string() {
            Ok(())
        } else {
            Err("must be an integer or a string".into())
        };
    }
    let Some(t) = schema.get("type").and_then(Value::as_str) else { return Ok(()) };
    let ok = match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        _ => true,
    };
    if ok { Ok(()) } else { Err(format!("must be of type {t}")) }
}

/// Schema checks (type, required, enum, lengths, bounds), collecting `path: message` errors.
fn check(schema: &Value, v: &Value, path: &str, errors: &mut Vec<String>, root: bool) {
    let at = |p: &str| if p.is_empty() { "<root>".to_string() } else { p.to_string() };
    if v.is_null() {
        if !is_true(schema, "nullable") && !root {
            errors.push(format!("{}: Invalid value: \"null\": {} in body must not be null", at(path), at(path)));
        }
        return;
    }
    if let Err(why) = type_ok(schema, v) {
        errors.push(format!("{}: Invalid value: {}: {} in body {why}", at(path), describe(v), at(path)));
        return;
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        errors.push(format!("{}: Unsupported value: {}: supported values: {}", at(path), describe(v), list.join(", ")));
    }
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    let count = |k: &str| schema.get(k).and_then(Value::as_u64);
    match v {
        Value::String(s) => {
            let n = s.chars().count() as u64;
            if count("maxLength").is_some_and(|m| n > m) {
                errors.push(format!(
                    "{}: Too long: may not be more than {} bytes",
                    at(path),
                    count("maxLength").unwrap_or_default()
                ));
            }
            if count("minLength").is_some_and(|m| n < m) {
                errors.push(format!(
                    "{}: Invalid value: {}: should be at least {} chars long",
                    at(path),
                    describe(v),
                    count("minLength").unwrap_or_default()
                ));
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or_default();
            if let Some(max) = num("maximum") {
                let exclusive = is_true(schema, "exclusiveMaximum");
                if x > max || (exclusive && x >= max) {
                    errors.push(format!(
                        "{}: Invalid value: {}: should be less than or equal to {max}",
                        at(path),
                        describe(v)
                    ));
                }
            }
            if let Some(min) = num("minimum") {
                let exclusive = is_true(schema, "exclusiveMinimum");
                if x < min || (exclusive && x <= min) {
                    errors.push(format!(
                        "{}: Invalid value: {}: should be greater than or equal to {min}",
                        at(path),
                        describe(v)
                    ));
                }
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if count("maxItems").is_some_and(|m| n > m) {
                errors.push(format!(
                    "{}: Too many: {n}: must have at most {} items",
                    at(path),
                    count("maxItems").unwrap_or_default()
                ));
            }
            if count("minItems").is_some_and(|m| n < m) {
                errors.push(format!(
                    "{}: Invalid value: {n}: should have at least {} items",
                    at(path),
                    count("minItems").unwrap_or_default()
                ));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), errors, false);
                }
            }
        }
        Value::Object(map) => check_object(schema, map, path, errors, root),
        _ => {}
    }
}

fn check_object(schema: &Value, map: &Map<String, Value>, path: &str, errors: &mut Vec<String>, root: bool) {
    let child = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) {
                errors.push(format!("{}: Required value", child(r)));
            }
        }
    }
    let n = map.len() as u64;
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
        && n > max
    {
        errors.push(format!(
            "{}: Too many: {n}: must have at most {max} items",
            if path.is_empty() { "<root>" } else { path }
        ));
    }
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
        && n < min
    {
        errors.push(format!(
            "{}: Invalid value: {n}: should have at least {min} properties",
            if path.is_empty() { "<root>" } else { path }
        ));
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    for (k, v) in map {
        if root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        if let Some(cs) = props.and_then(|p| p.get(k)).or(additional) {
            check(cs, v, &child(k), errors, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> SchemaRef {
        SchemaRef::new(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 3}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "opt": {"type": "string", "nullable": true}
                    },
                    "x-kubernetes-validations": [{"rule": "self.size != 7", "message": "seven is unlucky"}]
                }
            }
        }))
    }

    #[test]
    fn prunes_defaults_and_validates() {
        let s = schema();
        let ok = s
            .admit(json!({"metadata": {"name": "x", "labels": null}, "spec": {"size": 2, "junk": 1, "free": {"any": 1}, "opt": null, "tags": null}, "other": 1}), None)
            .expect("valid");
        assert_eq!(
            ok,
            json!({"metadata": {"name": "x"}, "spec": {"size": 2, "mode": "a", "free": {"any": 1}, "opt": null}})
        );
        let errs = s.admit(json!({"spec": {"size": "2", "mode": "c"}}), None).expect_err("invalid");
        assert_eq!(errs.len(), 2, "{errs:?}");
        // Fields are checked in key order.
        assert!(errs[0].starts_with("spec.mode: Unsupported value"), "{errs:?}");
        assert!(errs[1].starts_with("spec.size: Invalid value: \"2\""), "{errs:?}");
        let errs = s.admit(json!({"spec": {"tags": ["abcd", "b", "c"]}}), None).expect_err("invalid");
        assert_eq!(errs.len(), 3, "{errs:?}");
        let errs = s.admit(json!({"spec": {"size": 11}}), None).expect_err("max");
        assert!(errs[0].contains("less than or equal to 10"), "{errs:?}");
        let errs = s.admit(json!({"spec": {"size": 7}}), None).expect_err("cel");
        assert!(errs[0].contains("seven is unlucky"), "{errs:?}");
    }
}
