//! Object metadata validation the real server applies to every kind: label keys and values, annotation keys,
//! finalizer names, owner references, and names (DNS-1123 labels for namespaces).

use serde_json::Value;

fn name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// DNS-1123 subdomain: lowercase alphanumerics, `-` and `.`, at most 253 characters, alphanumeric at both ends.
pub(crate) fn dns_subdomain_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b.first().is_some_and(|c| *c != b'-')
                && b.last().is_some_and(|c| *c != b'-')
        })
}

/// DNS-1123 label: a subdomain without dots, at most 63 characters.
pub(crate) fn dns_label_ok(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && dns_subdomain_ok(s)
}

/// `prefix/name` or `name`, as label and annotation keys and finalizers.
fn qualified_name_ok(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => dns_subdomain_ok(prefix) && name_part_ok(name),
        None => name_part_ok(s),
    }
}

fn label_value_ok(s: &str) -> bool {
    s.is_empty() || name_part_ok(s)
}

/// Every metadata error of the object, as `field: message`.
pub(crate) fn validate(obj: &Value, namespace_kind: bool) -> Vec<String> {
    let mut errors = Vec::new();
    let Some(meta) = obj.get("metadata").and_then(Value::as_object) else { return errors };
    if namespace_kind
        && let Some(name) = meta.get("name").and_then(Value::as_str)
        && !dns_label_ok(name)
    {
        errors.push(format!("metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"));
    }
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if !qualified_name_ok(k) {
                errors.push(format!("metadata.labels: Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (with an optional DNS subdomain prefix and '/')"));
            }
            match v.as_str() {
                Some(s) if label_value_ok(s) => {}
                _ => errors.push(format!("metadata.labels: Invalid value: {v}: a valid label must be an empty string or consist of at most 63 alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character")),
            }
        }
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0usize;
        for (k, v) in annotations {
            if !qualified_name_ok(k) {
                errors.push(format!("metadata.annotations: Invalid value: {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > 256 * 1024 {
            errors.push(format!("metadata.annotations: Too long: may not be more than 262144 bytes (found {total})"));
        }
    }
    if let Some(finalizers) = meta.get("finalizers").and_then(Value::as_array) {
        for f in finalizers {
            match f.as_str() {
                Some(s) if qualified_name_ok(s) => {}
                _ => errors.push(format!("metadata.finalizers: Invalid value: {f}: name part must consist of alphanumeric characters, '-', '_' or '.'")),
            }
        }
    }
    if let Some(owners) = meta.get("ownerReferences").and_then(Value::as_array) {
        for (i, o) in owners.iter().enumerate() {
            for field in ["apiVersion", "kind", "name", "uid"] {
                if o.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                    errors.push(format!("metadata.ownerReferences[{i}].{field}: Required value"));
                }
            }
        }
        let controllers = owners.iter().filter(|o| o.get("controller").and_then(Value::as_bool) == Some(true)).count();
        if controllers > 1 {
            errors.push(
                "metadata.ownerReferences: Invalid value: only one reference can have Controller set to true".into(),
            );
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_labels_annotations_finalizers() {
        assert!(qualified_name_ok("karpenter.sh/nodepool") && qualified_name_ok("app") && qualified_name_ok("A_b.c"));
        assert!(!qualified_name_ok("bad key") && !qualified_name_ok("Upper.Case/x") && !qualified_name_ok("a/b/c"));
        assert!(!qualified_name_ok(&"x".repeat(64)));
        assert!(label_value_ok("") && label_value_ok("m5.large") && !label_value_ok("a b") && !label_value_ok("-a"));
        assert!(dns_label_ok("team-a") && !dns_label_ok("team.a") && !dns_label_ok("Team"));
        let obj = json!({"metadata": {
            "name": "a.b",
            "labels": {"ok": "fine", "bad key": "x", "k": "not ok"},
            "annotations": {"fine/ok": "anything at all"},
            "finalizers": ["karpenter.sh/termination", "not a finalizer"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n"}],
        }});
        let errors = validate(&obj, true);
        assert_eq!(errors.len(), 5, "{errors:#?}");
        assert!(validate(&obj, false).len() == 4);
        assert!(validate(&json!({"metadata": {"labels": {"a": 1}}}), false).len() == 1);
    }
}
