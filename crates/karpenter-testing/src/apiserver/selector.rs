//! Label and field selectors in the query-string syntax the real server accepts.

use std::collections::BTreeSet;

use serde_json::Value;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    Eq(String, String),
    NotEq(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Gt(String, i64),
    Lt(String, i64),
}

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<LabelReq>,
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("unbalanced parenthesis in selector {s:?}"));
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced parenthesis in selector {s:?}"));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 317
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && key.matches('/').count() <= 1
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63 && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn value_set(key: &str, rest: &str) -> Result<BTreeSet<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised value list for {key:?}, found {rest:?}"))?;
    let mut set = BTreeSet::new();
    for v in inner.split(',') {
        let v = v.trim();
        if !valid_value(v) {
            return Err(format!("invalid label value {v:?}"));
        }
        set.insert(v.to_string());
    }
    Ok(set)
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (x,y),f notin (z),g,!h,i>3`. An empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { reqs });
        }
        for part in split_top_level(s)? {
            let part = part.trim();
            if part.is_empty() {
                return Err(format!("empty requirement in label selector {s:?}"));
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                LabelReq::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('>') {
                LabelReq::Gt(k.trim().into(), v.trim().parse().map_err(|_| format!("invalid integer {v:?}"))?)
            } else if let Some((k, v)) = part.split_once('<') {
                LabelReq::Lt(k.trim().into(), v.trim().parse().map_err(|_| format!("invalid integer {v:?}"))?)
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                LabelReq::NotIn(k.trim().into(), value_set(k, rest)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                LabelReq::In(k.trim().into(), value_set(k, rest)?)
            } else {
                LabelReq::Exists(part.to_string())
            };
            let (key, value) = match &req {
                LabelReq::Exists(k) | LabelReq::NotExists(k) | LabelReq::Gt(k, _) | LabelReq::Lt(k, _) => (k, None),
                LabelReq::Eq(k, v) | LabelReq::NotEq(k, v) => (k, Some(v)),
                LabelReq::In(k, _) | LabelReq::NotIn(k, _) => (k, None),
            };
            if !valid_key(key) {
                return Err(format!("invalid label key {key:?}"));
            }
            if let Some(v) = value
                && !valid_value(v)
            {
                return Err(format!("invalid label value {v:?}"));
            }
            reqs.push(req);
        }
        Ok(Self { reqs })
    }

    /// Does the object's `metadata.labels` satisfy every requirement?
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|r| match r {
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, set) => get(k).is_some_and(|x| set.contains(x)),
            LabelReq::NotIn(k, set) => get(k).is_none_or(|x| !set.contains(x)),
            LabelReq::Gt(k, n) => get(k).and_then(|x| x.parse::<i64>().ok()).is_some_and(|x| x > *n),
            LabelReq::Lt(k, n) => get(k).and_then(|x| x.parse::<i64>().ok()).is_some_and(|x| x < *n),
        })
    }
}

/// Field paths the real server indexes, per (group, plural): the selectable fields beyond `metadata.name` and
/// `metadata.namespace` (which every kind supports). Custom resources support nothing else (the Karpenter CRDs
/// declare no `selectableFields`).
fn extra_fields(group: &str, plural: &str) -> &'static [(&'static str, &'static str)] {
    match (group, plural) {
        ("", "pods") => &[
            ("spec.nodeName", "/spec/nodeName"),
            ("spec.restartPolicy", "/spec/restartPolicy"),
            ("spec.schedulerName", "/spec/schedulerName"),
            ("spec.serviceAccountName", "/spec/serviceAccountName"),
            ("spec.hostNetwork", "/spec/hostNetwork"),
            ("status.phase", "/status/phase"),
            ("status.podIP", "/status/podIP"),
            ("status.nominatedNodeName", "/status/nominatedNodeName"),
        ],
        ("", "nodes") => &[("spec.unschedulable", "/spec/unschedulable")],
        ("", "namespaces") => &[("status.phase", "/status/phase")],
        ("", "events") => &[
            ("involvedObject.kind", "/involvedObject/kind"),
            ("involvedObject.namespace", "/involvedObject/namespace"),
            ("involvedObject.name", "/involvedObject/name"),
            ("involvedObject.uid", "/involvedObject/uid"),
            ("involvedObject.apiVersion", "/involvedObject/apiVersion"),
            ("involvedObject.resourceVersion", "/involvedObject/resourceVersion"),
            ("involvedObject.fieldPath", "/involvedObject/fieldPath"),
            ("reason", "/reason"),
            ("reportingComponent", "/reportingComponent"),
            ("source", "/source/component"),
            ("type", "/type"),
        ],
        ("", "persistentvolumeclaims") | ("", "persistentvolumes") => &[],
        _ => &[],
    }
}

/// A parsed `fieldSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// (JSON pointer, value, equal?)
    reqs: Vec<(String, String, bool)>,
}

impl FieldSelector {
    /// Parses `metadata.name=x,spec.nodeName!=` for a resource; unsupported fields are an error
    /// (`field label not supported: …`), as on the real server.
    pub fn parse(s: &str, group: &str, plural: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { reqs });
        }
        for part in s.split(',') {
            let part = part.trim();
            let (field, value, eq) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, v, true)
            } else {
                return Err(format!("invalid field selector: {part:?}: expected an operator (=, ==, !=)"));
            };
            let field = field.trim();
            let pointer = match field {
                "metadata.name" => "/metadata/name",
                "metadata.namespace" => "/metadata/namespace",
                other => extra_fields(group, plural)
                    .iter()
                    .find(|(f, _)| *f == other)
                    .map(|(_, p)| *p)
                    .ok_or_else(|| format!("field label not supported: {other}"))?,
            };
            reqs.push((pointer.to_string(), value.trim().to_string(), eq));
        }
        Ok(Self { reqs })
    }

    /// Does the object satisfy every requirement? Missing fields compare as `""`; booleans as `true`/`false`.
    pub fn matches(&self, object: &Value) -> bool {
        self.reqs.iter().all(|(pointer, want, eq)| {
            let got = match object.pointer(pointer) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "labels": labels}})
    }

    #[test]
    fn label_selector_operators() {
        let o = obj(json!({"app": "web", "tier": "front", "n": "5"}));
        let m = |s: &str| LabelSelector::parse(s).expect(s).matches(&o);
        assert!(m(""));
        assert!(m("app=web") && m("app==web") && !m("app=db"));
        assert!(m("app!=db") && !m("app!=web") && m("missing!=x"));
        assert!(m("app in (web, db)") && !m("app in (db)") && !m("missing in (x)"));
        assert!(m("app notin (db)") && !m("app notin (web,db)") && m("missing notin (x)"));
        assert!(m("tier") && !m("missing") && m("!missing") && !m("!tier"));
        assert!(m("n>4") && !m("n>5") && m("n<6"));
        assert!(m("app=web,tier in (front,back),!missing"));
        assert!(!m("app=web,tier=back"));
    }

    #[test]
    fn label_selector_rejects_garbage() {
        for bad in ["app in web", "a=b,,c", "a in (b", "bad key=x", "a=b c", "n>x"] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors_are_limited_to_indexed_fields() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        let m = |s: &str| FieldSelector::parse(s, "", "pods").expect(s).matches(&pod);
        assert!(m("metadata.name=p") && m("metadata.namespace=ns") && m("spec.nodeName=n1"));
        assert!(m("status.phase!=Pending") && !m("spec.nodeName="));
        let unbound = json!({"metadata": {"name": "q"}, "spec": {}});
        assert!(FieldSelector::parse("spec.nodeName=", "", "pods").expect("ok").matches(&unbound));
        let err = FieldSelector::parse("spec.nodeName=x", "karpenter.sh", "nodeclaims").expect_err("crd");
        assert_eq!(err, "field label not supported: spec.nodeName");
        assert!(FieldSelector::parse("metadata.name=x", "karpenter.sh", "nodeclaims").is_ok());
        assert!(FieldSelector::parse("metadata.name", "", "pods").is_err());
    }
}
