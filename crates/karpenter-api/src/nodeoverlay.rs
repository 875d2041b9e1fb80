//! NodeOverlay (`karpenter.sh/v1alpha1`, alpha, gate `NodeOverlay`): adjusts the price of, or adds extended
//! resources to, the instance types a NodePool's scheduling simulation sees. Requirements select the instance
//! types (and their offerings) an overlay applies to; `price` replaces a price, `priceAdjustment` changes it by
//! an amount or a percentage; `capacity` adds extended resources. Higher `weight` wins (unset counts as 0).
//!
//! Applying overlays to a catalogue is `karpenter_cloudprovider::overlay`; this module holds the kind, its
//! validation (the CRD's rules plus upstream's runtime checks) and the price-change syntax.

use std::collections::BTreeMap;
use std::fmt;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{Condition, Conditions};
use crate::crd::{CelRule, KarpenterCrd, SchemaPatch};
use crate::labels::ProviderLabels;
use crate::nodeclaim::{NodeSelectorRequirementWithMinValues, ResourceQuantities, operator, validate_requirements};
use crate::validation::{Validate, ValidationContext, Violations, field, index, key as map_key};

/// Maximum number of requirements of an overlay.
pub const MAX_REQUIREMENTS: usize = 100;
/// Highest allowed `weight`.
pub const MAX_WEIGHT: i32 = 10_000;
/// Resources an overlay's `capacity` may not set: only extended resources may be added.
pub const RESTRICTED_CAPACITY: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// Condition types and reasons of a NodeOverlay's status.
pub mod conditions {
    /// True when the overlay passed runtime validation and conflicts with no other overlay.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// Mirrors `ValidationSucceeded` (the root condition).
    pub const READY: &str = "Ready";
    /// Reasons of a False `ValidationSucceeded` / `Ready`.
    pub const REASON_RUNTIME_VALIDATION: &str = "RuntimeValidation";
    /// `ValidationSucceeded=False`: the overlay sets a price or capacity another overlay of the same weight also
    /// sets for some instance type, so neither can apply there.
    pub const REASON_CONFLICT: &str = "Conflict";
    /// Reason of a True condition.
    pub const REASON_VALID: &str = "ValidationSucceeded";
    /// `Ready=True`, but the overlay selects no instance type of any NodePool (so it changes nothing).
    pub const REASON_NO_MATCHING_INSTANCE_TYPES: &str = "NoMatchingInstanceTypes";
}

/// A node selector requirement as overlays write it: like a NodePool's, without `minValues`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeOverlayRequirement {
    /// Label key the requirement applies to.
    #[schemars(
        length(max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
        )
    )]
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, `Gte` or `Lte`.
    #[schemars(extend("enum" = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]))]
    pub operator: String,
    /// Values (label values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = 63), regex(pattern = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub values: Vec<String>,
}

impl NodeOverlayRequirement {
    /// A requirement on label `key` with `operator` (`In`, `NotIn`, `Exists`, ...) and `values`.
    pub fn new(key: impl Into<String>, operator: &str, values: &[&str]) -> Self {
        Self { key: key.into(), operator: operator.into(), values: values.iter().map(|s| s.to_string()).collect() }
    }

    /// The same requirement in the NodePool form (no minValues), for the shared algebra and validation.
    pub fn with_min_values(&self) -> NodeSelectorRequirementWithMinValues {
        NodeSelectorRequirementWithMinValues {
            key: self.key.clone(),
            operator: self.operator.clone(),
            values: self.values.clone(),
            min_values: None,
        }
    }
}

/// The `priceAdjustment` pattern (upstream's): a signed amount, a `+` percentage, or a `-` percentage of at most
/// 100.
pub const PRICE_ADJUSTMENT_PATTERN: &str =
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$";
/// The `price` pattern: a non-negative decimal.
pub const PRICE_PATTERN: &str = r"^\d+(\.\d+)?$";

/// NodeOverlay spec.
// kube-derive takes one `printcolumn(...)` per column; clippy reads the repeated `type_ = ...` as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    singular = "nodeoverlay",
    shortname = "overlays",
    category = "karpenter",
    status = "NodeOverlayStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "NodeOverlay changes the price or adds extended resources of the instance types its requirements select.",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight", priority = 1)
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "!has(self.price) || !has(self.priceAdjustment)", "message": "cannot set both 'price' and 'priceAdjustment'"}
]))]
pub struct NodeOverlaySpec {
    /// Select the instance types and offerings the overlay applies to (well-known labels, including
    /// `karpenter.sh/nodepool` and `karpenter.sh/capacity-type`, and the NodePool template's labels).
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub requirements: Vec<NodeOverlayRequirement>,
    /// Change of the price: `+0.5`, `-0.5` (an amount) or `+10%`, `-15%` (a percentage, at most `-100%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"))]
    pub price_adjustment: Option<String>,
    /// A price replacing the offering's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^\d+(\.\d+)?$"))]
    pub price: Option<String>,
    /// Extended resources added to the instance type's capacity (cpu, memory, ephemeral-storage and pods may not
    /// be set).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))", "message": "invalid resource restricted"}
    ]))]
    pub capacity: ResourceQuantities,
    /// Priority (1..10000; unset counts as 0). Higher weights win; equal weights are taken by name, descending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// Observed state of a NodeOverlay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeOverlayStatus {
    /// Status conditions (`ValidationSucceeded`, `Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl Conditions for NodeOverlayStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

/// A parsed `price` or `priceAdjustment`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PriceChange {
    /// `price`: replaces the offering's price.
    Absolute(f64),
    /// `priceAdjustment` `+x` / `-x`: added to the price.
    Delta(f64),
    /// `priceAdjustment` `+x%` / `-x%`: the price times `1 + x/100`.
    Percent(f64),
}

impl PriceChange {
    /// The new price of an offering priced `price`, never below zero.
    pub fn apply(self, price: f64) -> f64 {
        let p = match self {
            PriceChange::Absolute(p) => return p,
            PriceChange::Delta(d) => price + d,
            PriceChange::Percent(x) => price * (1.0 + x / 100.0),
        };
        if p >= 0.0 { p } else { 0.0 }
    }
}

impl fmt::Display for PriceChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PriceChange::Absolute(p) => write!(f, "{p}"),
            PriceChange::Delta(d) => write!(f, "{d:+}"),
            PriceChange::Percent(x) => write!(f, "{x:+}%"),
        }
    }
}

/// `\d+`: at least one ASCII digit and nothing else.
fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `\d*\.?\d+`: digits, optionally with one dot that has digits after it.
fn unsigned_decimal(s: &str) -> bool {
    match s.split_once('.') {
        Some((int, frac)) => (int.is_empty() || digits(int)) && digits(frac),
        None => digits(s),
    }
}

/// Parses `price` ([`PRICE_PATTERN`]).
pub fn parse_price(s: &str) -> Option<PriceChange> {
    let ok = match s.split_once('.') {
        Some((int, frac)) => digits(int) && digits(frac),
        None => digits(s),
    };
    ok.then(|| s.parse().ok().map(PriceChange::Absolute)).flatten()
}

/// Parses `priceAdjustment` ([`PRICE_ADJUSTMENT_PATTERN`]).
pub fn parse_price_adjustment(s: &str) -> Option<PriceChange> {
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => return None,
    };
    let signed = |v: f64| if negative { -v } else { v };
    if let Some(pct) = rest.strip_suffix('%') {
        let ok = if negative {
            // `-\d{1,2}(\.\d+)?%` or exactly `-100%`.
            pct == "100"
                || match pct.split_once('.') {
                    Some((int, frac)) => digits(int) && int.len() <= 2 && digits(frac),
                    None => digits(pct) && pct.len() <= 2,
                }
        } else {
            unsigned_decimal(pct)
        };
        return ok.then(|| pct.parse().ok().map(|v| PriceChange::Percent(signed(v)))).flatten();
    }
    unsigned_decimal(rest).then(|| rest.parse().ok().map(|v| PriceChange::Delta(signed(v)))).flatten()
}

impl NodeOverlaySpec {
    /// The price change this overlay makes, if it makes a valid one (`price` first: the two are exclusive).
    pub fn price_change(&self) -> Option<PriceChange> {
        match (&self.price, &self.price_adjustment) {
            (Some(p), _) => parse_price(p),
            (None, Some(a)) => parse_price_adjustment(a),
            (None, None) => None,
        }
    }

    /// Whether the overlay changes prices at all.
    pub fn sets_price(&self) -> bool {
        self.price.is_some() || self.price_adjustment.is_some()
    }

    /// The weight, unset counting as 0.
    pub fn weight(&self) -> i32 {
        self.weight.unwrap_or(0)
    }
}

impl NodeOverlay {
    /// The overlay's name (empty when unnamed).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// `status.conditions`, empty when there is no status.
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
    }
}

/// Orders overlays as they take precedence: higher weight first, equal weights by name descending.
pub fn order_by_weight<T: std::borrow::Borrow<NodeOverlay>>(overlays: &mut [T]) {
    overlays.sort_by(|a, b| {
        let (a, b) = (a.borrow(), b.borrow());
        b.spec.weight().cmp(&a.spec.weight()).then_with(|| b.name().cmp(a.name()))
    });
}

impl Validate for NodeOverlay {
    /// Every CRD rule (the schema's patterns, bounds and CEL) and upstream's runtime validation.
    fn validate(&self, ctx: &ValidationContext) -> Violations {
        let mut out = Violations::new();
        let spec = &self.spec;
        let path = "spec.requirements";
        let reqs: Vec<NodeSelectorRequirementWithMinValues> =
            spec.requirements.iter().map(NodeOverlayRequirement::with_min_values).collect();
        // The NodePool rules apply (the node pool key is a well-known label overlays may select on).
        validate_requirements(&reqs, path, &ctx.provider, true, &mut out);
        for (i, r) in spec.requirements.iter().enumerate() {
            if r.operator == operator::NOT_IN && r.values.is_empty() {
                out.push(
                    field(&index(path, i), "values"),
                    "requirements with operator 'NotIn' must have a value defined",
                );
            }
        }
        if spec.price.is_some() && spec.price_adjustment.is_some() {
            out.push("spec", "cannot set both 'price' and 'priceAdjustment'");
        }
        if let Some(p) = &spec.price
            && parse_price(p).is_none()
        {
            out.push("spec.price", format!("invalid price {p:?}: must match {PRICE_PATTERN}"));
        }
        if let Some(a) = &spec.price_adjustment
            && parse_price_adjustment(a).is_none()
        {
            out.push(
                "spec.priceAdjustment",
                format!("invalid price adjustment {a:?}: an amount (+0.5, -0.5) or a percentage (+10%, -15%, at least -100%)"),
            );
        }
        for (name, q) in &spec.capacity {
            let kp = map_key("spec.capacity", name);
            if RESTRICTED_CAPACITY.contains(&name.as_str()) {
                out.push(&kp, format!("invalid capacity: {name} in resource, restricted"));
            }
            if let Some(e) = q.error() {
                out.push(&kp, e);
            }
        }
        if let Some(w) = spec.weight
            && !(1..=MAX_WEIGHT).contains(&w)
        {
            out.push("spec.weight", format!("must be between 1 and {MAX_WEIGHT}"));
        }
        out
    }
}

impl KarpenterCrd for NodeOverlay {
    fn schema_patches(provider: &ProviderLabels) -> Vec<SchemaPatch> {
        let list = "spec.requirements";
        let mut p = vec![
            SchemaPatch::validation(
                list,
                CelRule::new("self.all(x, x.operator == 'NotIn' ? (has(x.values) && size(x.values) != 0) : true)")
                    .message("requirements with operator 'NotIn' must have a value defined"),
            ),
            SchemaPatch::validation(
                list,
                CelRule::new("self.all(x, x.operator == 'In' ? (has(x.values) && size(x.values) != 0) : true)")
                    .message("requirements with operator 'In' must have a value defined"),
            ),
            SchemaPatch::validation(
                list,
                CelRule::new(
                    "self.all(x, x.operator in ['Gt', 'Lt', 'Gte', 'Lte'] ? (has(x.values) && size(x.values) == 1 && x.values[0].matches('^[0-9]+$')) : true)",
                )
                .message("requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value"),
            ),
        ];
        for (rule, message) in crate::nodepool::restricted_domain_rules(provider, "self") {
            p.push(SchemaPatch::validation(&format!("{list}[].key"), CelRule::new(rule).message(message)));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(yaml_spec: &str) -> NodeOverlay {
        serde_saphyr::from_str(&format!(
            "apiVersion: karpenter.sh/v1alpha1\nkind: NodeOverlay\nmetadata: {{name: o}}\nspec:\n{yaml_spec}"
        ))
        .unwrap()
    }

    fn paths(o: &NodeOverlay) -> Vec<String> {
        o.validate(&ValidationContext::new(crate::test_vocabulary::aws())).iter().map(|v| v.path.clone()).collect()
    }

    #[test]
    fn price_adjustment_syntax_follows_the_pattern() {
        for (s, want) in [
            ("+0.5", Some(PriceChange::Delta(0.5))),
            ("-0.5", Some(PriceChange::Delta(-0.5))),
            ("+.5", Some(PriceChange::Delta(0.5))),
            ("-3", Some(PriceChange::Delta(-3.0))),
            ("+10%", Some(PriceChange::Percent(10.0))),
            ("+250.5%", Some(PriceChange::Percent(250.5))),
            ("-15%", Some(PriceChange::Percent(-15.0))),
            ("-99.9%", Some(PriceChange::Percent(-99.9))),
            ("-100%", Some(PriceChange::Percent(-100.0))),
        ] {
            assert_eq!(parse_price_adjustment(s), want, "{s}");
        }
        for bad in ["", "0.5", "10%", "-101%", "-100.0%", "-150%", "+1.", "+", "+%", "--1", "+1e3", "-.5%", " +1"] {
            assert_eq!(parse_price_adjustment(bad), None, "{bad}");
        }
        for (s, want) in [("0", 0.0), ("1.25", 1.25), ("12", 12.0)] {
            assert_eq!(parse_price(s), Some(PriceChange::Absolute(want)));
        }
        for bad in ["", "-1", "+1", ".5", "1.", "1e2", "1%"] {
            assert_eq!(parse_price(bad), None, "{bad}");
        }
    }

    #[test]
    fn price_changes_apply_and_clamp_at_zero() {
        assert_eq!(PriceChange::Absolute(2.0).apply(1.0), 2.0);
        assert_eq!(PriceChange::Delta(0.5).apply(1.0), 1.5);
        assert_eq!(PriceChange::Delta(-1.5).apply(1.0), 0.0);
        assert!((PriceChange::Percent(10.0).apply(2.0) - 2.2).abs() < 1e-12);
        assert_eq!(PriceChange::Percent(-100.0).apply(2.0), 0.0);
    }

    #[test]
    fn validation_names_each_field() {
        let o = overlay(
            "  requirements:\n  - {key: kubernetes.io/hostname, operator: In, values: [a]}\n  - {key: a, operator: NotIn}\n  - {key: b, operator: Gt, values: [x]}\n  price: '1'\n  priceAdjustment: '+1'\n  capacity: {cpu: '1', example.com/x: bad}\n  weight: 0\n",
        );
        let p = paths(&o);
        for want in [
            "spec.requirements[0].key",
            "spec.requirements[1].values",
            "spec.requirements[2].values",
            "spec",
            "spec.capacity[cpu]",
            "spec.capacity[example.com/x]",
            "spec.weight",
        ] {
            assert!(p.iter().any(|x| x == want), "{want} not in {p:?}");
        }
        let ok = overlay(
            "  requirements:\n  - {key: karpenter.sh/nodepool, operator: In, values: [default]}\n  - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}\n  priceAdjustment: '-10%'\n  capacity: {example.com/gpu: '2'}\n  weight: 10000\n",
        );
        assert!(paths(&ok).is_empty(), "{:?}", paths(&ok));
    }

    #[test]
    fn orders_by_weight_then_name_descending() {
        let mk = |name: &str, w: Option<i32>| {
            let mut o = NodeOverlay::new(name, NodeOverlaySpec { weight: w, ..Default::default() });
            o.metadata.name = Some(name.into());
            o
        };
        let mut v = vec![mk("a", None), mk("b", Some(5)), mk("c", Some(5)), mk("d", Some(1))];
        order_by_weight(&mut v);
        let names: Vec<&str> = v.iter().map(NodeOverlay::name).collect();
        assert_eq!(names, ["c", "b", "d", "a"]);
    }
}
