//! CustomResourceDefinition generation.
//!
//! How a kind gets its CRD:
//! 1. `#[derive(CustomResource, JsonSchema)]` (kube-derive + schemars) generates names, printer columns,
//!    subresources and the structural schema. Static constraints and static CEL rules live next to the fields as
//!    schemars attributes (`length`, `range`, `regex`, `extend("x-kubernetes-validations" = [...])`,
//!    `extend("x-kubernetes-list-type" = "atomic")`, `extend("default" = ...)`).
//! 2. The kind implements [`KarpenterCrd`]; its [`KarpenterCrd::schema_patches`] returns the rules that depend on
//!    the provider's label vocabulary (restricted label domains), each a [`SchemaPatch`] that inserts a
//!    keyword (typically an `x-kubernetes-validations` rule) at a field path of the generated schema.
//! 3. [`generate`] runs kube's generator, normalises the schema the way the API server expects (no `nullable`, no
//!    `additionalProperties: false`) and applies the patches. [`core_crds`] lists the core CRDs;
//!    [`crds_with`](crate::node_class_api::crds_with) adds the node classes a provider serves.
//!
//! The checked-in YAML under `charts/*/crds/` is [`render_yaml`] of these; the binary's `tests/crds.rs` keeps it in sync.

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{CustomResourceDefinition, JSONSchemaProps};
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Value, json};

use crate::labels::ProviderLabels;

/// The Kubernetes quantity pattern (as in `resource.Quantity`'s OpenAPI definition).
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A quantity as written in a manifest: accepts YAML integers, floats and strings (`cpu: 4`, `memory: 16Gi`),
/// keeps the text. Syntax is checked by validation ([`ResourceQuantity::error`]) and by the schema pattern.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceQuantity(pub String);

impl ResourceQuantity {
    /// A quantity with text `s`, unchecked (validation reports bad syntax with the field's path).
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    /// The text as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
    /// The exact quantity value.
    pub fn parse(&self) -> Result<karpenter_requirements::Quantity, karpenter_requirements::QuantityError> {
        self.0.parse()
    }
    /// Why this is not a valid quantity, if it is not: it must match the schema's pattern and be in range.
    pub fn error(&self) -> Option<String> {
        if !is_quantity(&self.0) {
            return Some(format!("invalid quantity {:?}: must match {QUANTITY_PATTERN}", self.0));
        }
        self.parse().err().map(|e| e.to_string())
    }
}

impl fmt::Display for ResourceQuantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&karpenter_requirements::Quantity> for ResourceQuantity {
    /// The quantity's canonical text (`"1500m"`, `"16Gi"`).
    fn from(q: &karpenter_requirements::Quantity) -> Self {
        Self(q.to_string())
    }
}

impl From<karpenter_requirements::Quantity> for ResourceQuantity {
    /// The quantity's canonical text (`"1500m"`, `"16Gi"`).
    fn from(q: karpenter_requirements::Quantity) -> Self {
        Self(q.to_string())
    }
}

impl From<&str> for ResourceQuantity {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl Serialize for ResourceQuantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ResourceQuantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ResourceQuantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity (string or number)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(ResourceQuantity(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(ResourceQuantity(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(ResourceQuantity(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(ResourceQuantity(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for ResourceQuantity {
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true
        })
    }
}

/// Hand-written matcher for [`QUANTITY_PATTERN`].
fn is_quantity(s: &str) -> bool {
    fn number(b: &[u8]) -> Option<usize> {
        // ([0-9]+(\.[0-9]*)?) | (\.[0-9]+); returns bytes consumed.
        let digits = |from: usize| b[from..].iter().take_while(|c| c.is_ascii_digit()).count();
        let int = digits(0);
        if int > 0 {
            if b.get(int) == Some(&b'.') { Some(int + 1 + digits(int + 1)) } else { Some(int) }
        } else if b.first() == Some(&b'.') {
            let frac = digits(1);
            (frac > 0).then_some(1 + frac)
        } else {
            None
        }
    }
    let mut b = s.as_bytes();
    if let Some((b'+' | b'-', rest)) = b.split_first() {
        b = rest;
    }
    let Some(n) = number(b) else { return false };
    let suffix = &b[n..];
    match suffix {
        [] => true,
        [b'K' | b'M' | b'G' | b'T' | b'P' | b'E', b'i'] => true,
        [b'n' | b'u' | b'm' | b'k' | b'M' | b'G' | b'T' | b'P' | b'E'] => true,
        [b'e' | b'E', rest @ ..] => {
            let rest = match rest.split_first() {
                Some((b'+' | b'-', r)) => r,
                _ => rest,
            };
            number(rest) == Some(rest.len()) && !rest.is_empty()
        }
        _ => false,
    }
}

/// One `x-kubernetes-validations` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CelRule {
    /// The CEL expression; it must evaluate to `true` for a write to be accepted.
    pub rule: String,
    /// The fixed error message when the rule fails.
    pub message: Option<String>,
    /// A CEL expression that builds the error message when the rule fails (instead of `message`).
    pub message_expression: Option<String>,
}

impl CelRule {
    /// A rule with no message (the API server then reports the rule itself).
    pub fn new(rule: impl Into<String>) -> Self {
        Self { rule: rule.into(), message: None, message_expression: None }
    }
    /// Sets the fixed error message (builder style).
    pub fn message(mut self, m: impl Into<String>) -> Self {
        self.message = Some(m.into());
        self
    }
    /// Sets the message expression (builder style).
    pub fn message_expression(mut self, m: impl Into<String>) -> Self {
        self.message_expression = Some(m.into());
        self
    }
    fn to_json(&self) -> Value {
        let mut o = serde_json::Map::new();
        if let Some(m) = &self.message {
            o.insert("message".into(), json!(m));
        }
        if let Some(m) = &self.message_expression {
            o.insert("messageExpression".into(), json!(m));
        }
        o.insert("rule".into(), json!(self.rule));
        Value::Object(o)
    }
}

/// A post-generation change to a kind's schema at a field path.
///
/// Paths are dotted field names from the root of the object; `[]` steps into list items, `{}` into map values:
/// `spec.template.spec.requirements[]`, `spec.template.metadata.labels`, `spec.limits{}`.
#[derive(Clone, Debug, PartialEq)]
pub enum SchemaPatch {
    /// Appends a CEL rule to the node's `x-kubernetes-validations`.
    Validation {
        /// Where in the schema (see the path syntax above).
        path: String,
        /// The rule appended.
        rule: CelRule,
    },
    /// Sets `keyword` to `value` on the node (replacing any previous value).
    Set {
        /// Where in the schema (see the path syntax above).
        path: String,
        /// The OpenAPI keyword, e.g. `maxItems` or `pattern`.
        keyword: String,
        /// Its value.
        value: Value,
    },
}

impl SchemaPatch {
    /// A [`SchemaPatch::Validation`] at `path`.
    pub fn validation(path: &str, rule: CelRule) -> Self {
        Self::Validation { path: path.into(), rule }
    }
    /// A [`SchemaPatch::Set`] at `path`.
    pub fn set(path: &str, keyword: &str, value: Value) -> Self {
        Self::Set { path: path.into(), keyword: keyword.into(), value }
    }
}

/// Why a patch could not be applied (a bug in the kind's patch list; surfaced by the CRD tests).
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("schema path {0:?} does not exist")]
    /// A patch path names no node of the generated schema.
    NoSuchPath(String),
    #[error("schema (de)serialisation failed: {0}")]
    /// The generated schema did not survive a JSON round trip.
    Json(#[from] serde_json::Error),
    #[error("YAML rendering failed: {0}")]
    /// The CRD could not be written as YAML.
    #[cfg(feature = "yaml")]
    Yaml(String),
}

/// A kind whose CRD this crate generates.
pub trait KarpenterCrd: CustomResourceExt {
    /// Rules that depend on the provider's label set, applied after generation. Default: none.
    fn schema_patches(_provider: &ProviderLabels) -> Vec<SchemaPatch> {
        Vec::new()
    }
}

fn node_at<'a>(root: &'a mut Value, path: &str) -> Result<&'a mut Value, CrdError> {
    let mut node = root;
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (name, suffix) = match seg.find(['[', '{']) {
            Some(i) => seg.split_at(i),
            None => (seg, ""),
        };
        node = node
            .get_mut("properties")
            .and_then(|p| p.get_mut(name))
            .ok_or_else(|| CrdError::NoSuchPath(path.to_string()))?;
        let mut rest = suffix;
        while !rest.is_empty() {
            let kw = if rest.starts_with("[]") {
                "items"
            } else if rest.starts_with("{}") {
                "additionalProperties"
            } else {
                return Err(CrdError::NoSuchPath(path.to_string()));
            };
            rest = &rest[2..];
            node = node.get_mut(kw).ok_or_else(|| CrdError::NoSuchPath(path.to_string()))?;
        }
    }
    Ok(node)
}

/// Applies patches to a schema (`openAPIV3Schema` as JSON).
pub fn apply_patches(schema: &mut Value, patches: &[SchemaPatch]) -> Result<(), CrdError> {
    for p in patches {
        match p {
            SchemaPatch::Validation { path, rule } => {
                let node = node_at(schema, path)?;
                let obj = node.as_object_mut().ok_or_else(|| CrdError::NoSuchPath(path.clone()))?;
                let list = obj.entry("x-kubernetes-validations").or_insert_with(|| json!([]));
                if let Some(a) = list.as_array_mut() {
                    a.push(rule.to_json());
                }
            }
            SchemaPatch::Set { path, keyword, value } => {
                let node = node_at(schema, path)?;
                let obj = node.as_object_mut().ok_or_else(|| CrdError::NoSuchPath(path.clone()))?;
                obj.insert(keyword.clone(), value.clone());
            }
        }
    }
    Ok(())
}

/// Removes what schemars emits but Kubernetes structural schemas do not want: `nullable` (optional fields are
/// simply absent, as in upstream's CRDs) and `additionalProperties: false` (from `deny_unknown_fields`: the API
/// server prunes unknown fields on its own).
fn normalise(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("nullable");
            if o.get("additionalProperties") == Some(&Value::Bool(false)) {
                o.remove("additionalProperties");
            }
            // kube's rewriter empties the anyOf branches of int-or-string; restore the canonical form.
            if o.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                o.insert("anyOf".into(), json!([{"type": "integer"}, {"type": "string"}]));
            }
            for (_, c) in o.iter_mut() {
                normalise(c);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalise),
        _ => {}
    }
}

/// Generates `K`'s CRD for a provider: kube's generator, normalisation, then the kind's patches.
pub fn try_generate<K: KarpenterCrd>(provider: &ProviderLabels) -> Result<CustomResourceDefinition, CrdError> {
    let mut crd = K::crd();
    let patches = K::schema_patches(provider);
    for version in &mut crd.spec.versions {
        let Some(validation) = version.schema.as_mut() else { continue };
        let Some(schema) = validation.open_api_v3_schema.take() else { continue };
        let mut v = serde_json::to_value(schema)?;
        normalise(&mut v);
        apply_patches(&mut v, &patches)?;
        validation.open_api_v3_schema = Some(serde_json::from_value::<JSONSchemaProps>(v)?);
    }
    Ok(crd)
}

/// [`try_generate`] for the built-in kinds, whose patch paths are covered by tests. Falls back to the unpatched
/// CRD if a patch path were ever wrong (the CRD tests would fail first).
pub fn generate<K: KarpenterCrd>(provider: &ProviderLabels) -> CustomResourceDefinition {
    try_generate::<K>(provider).unwrap_or_else(|_| K::crd())
}

/// The core CRDs Karpenter installs whatever the provider: NodePool, NodeClaim and NodeOverlay.
pub fn core_crds(provider: &ProviderLabels) -> Vec<CustomResourceDefinition> {
    vec![
        generate::<crate::nodepool::NodePool>(provider),
        generate::<crate::nodeclaim::NodeClaim>(provider),
        generate::<crate::nodeoverlay::NodeOverlay>(provider),
    ]
}

/// CRDs Karpenter reads but does not own, shipped separately and installed only on request: CapacityBuffer
/// (`autoscaling.x-k8s.io`, SIG Autoscaling's API, which cluster-autoscaler's project also installs). See
/// docs/capacity-buffer.md for how it is shipped.
pub fn optional_crds(provider: &ProviderLabels) -> Vec<CustomResourceDefinition> {
    vec![generate::<crate::capacitybuffer::CapacityBuffer>(provider)]
}

/// The conventional file name of a CRD: `<group>_<plural>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// Renders a CRD as a YAML document (keys in the order k8s-openapi serialises them, deterministic). Feature
/// `yaml`.
#[cfg(feature = "yaml")]
pub fn try_render_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    let mut out = String::from("---\n");
    out.push_str(&serde_saphyr::to_string(crd).map_err(|e| CrdError::Yaml(e.to_string()))?);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

/// [`try_render_yaml`], with the error text in place of the document if rendering failed. Feature `yaml`.
#[cfg(feature = "yaml")]
pub fn render_yaml(crd: &CustomResourceDefinition) -> String {
    try_render_yaml(crd).unwrap_or_else(|e| format!("# {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantity_syntax() {
        for ok in ["1", "100m", "1.5", ".5", "16Gi", "1e3", "1E-3", "+1", "-1", "2k", "1.", "5Ei"] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in ["", "Gi", "1GB", "1.2.3", "1e", "abc", "1 Gi", "."] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn quantity_decodes_numbers() {
        let m: std::collections::BTreeMap<String, ResourceQuantity> =
            serde_saphyr::from_str("cpu: 1000\nmemory: 16Gi\nx: 0.5\n").unwrap();
        assert_eq!(m["cpu"].as_str(), "1000");
        assert_eq!(m["memory"].as_str(), "16Gi");
        assert_eq!(m["x"].as_str(), "0.5");
    }

    #[test]
    fn patch_paths() {
        let mut s = json!({"properties": {"spec": {"properties": {"xs": {"items": {"type": "object"}}}}}});
        apply_patches(&mut s, &[SchemaPatch::validation("spec.xs[]", CelRule::new("true").message("m"))]).unwrap();
        assert_eq!(s["properties"]["spec"]["properties"]["xs"]["items"]["x-kubernetes-validations"][0]["rule"], "true");
        assert!(apply_patches(&mut s, &[SchemaPatch::set("spec.nope", "a", json!(1))]).is_err());
    }
}
