//! A set of requirements keyed by label key (upstream's `Requirements`).
//!
//! Stored as a `Vec<Requirement>` sorted by key: lookups are binary searches, and `compatible`, `intersects`
//! and `intersection` are linear merges of two sorted lists. The success paths of `compatible` and
//! `intersects` do not allocate.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec};

use crate::fastcmp;
use crate::labels::normalize_key;
use crate::requirement::{Operator, Requirement, RequirementError, SerializedRequirement};

/// A set of label keys, e.g. the well-known labels a NodePool need not define (`allow_undefined`).
pub trait KeySet {
    /// Whether `key` is in the set.
    fn contains_key(&self, key: &str) -> bool;
}

/// The empty key set: nothing is allowed to be undefined.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoKeys;

impl KeySet for NoKeys {
    fn contains_key(&self, _: &str) -> bool {
        false
    }
}
impl KeySet for BTreeSet<String> {
    fn contains_key(&self, key: &str) -> bool {
        self.contains(key)
    }
}
impl KeySet for BTreeSet<&str> {
    fn contains_key(&self, key: &str) -> bool {
        self.contains(key)
    }
}
impl<S: std::hash::BuildHasher> KeySet for HashSet<String, S> {
    fn contains_key(&self, key: &str) -> bool {
        self.contains(key)
    }
}
impl KeySet for [&str] {
    fn contains_key(&self, key: &str) -> bool {
        self.contains(&key)
    }
}
impl<const N: usize> KeySet for [&str; N] {
    fn contains_key(&self, key: &str) -> bool {
        self.contains(&key)
    }
}
impl KeySet for [String] {
    fn contains_key(&self, key: &str) -> bool {
        self.iter().any(|k| k == key)
    }
}
impl KeySet for Vec<String> {
    fn contains_key(&self, key: &str) -> bool {
        self.iter().any(|k| k == key)
    }
}
impl<T: KeySet + ?Sized> KeySet for &T {
    fn contains_key(&self, key: &str) -> bool {
        (**self).contains_key(key)
    }
}

/// Why two requirement sets are not compatible. The messages are used verbatim as unschedulable reasons.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompatibilityError {
    /// The incoming side demands a label the other side does not define.
    #[error("label {key} does not have known values")]
    UndefinedKey {
        /// The label key.
        key: String,
    },
    /// Both sides constrain the key and no value satisfies both.
    #[error("key {key}: {incoming} does not intersect {existing}")]
    NoIntersection {
        /// The label key.
        key: String,
        /// The incoming side's constraint (operator and values).
        incoming: String,
        /// The existing side's constraint (operator and values).
        existing: String,
    },
}

/// Whether preferred node affinity is treated as required (`Respect`, the default) or ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PreferencePolicy {
    /// The heaviest preferred node-affinity term is added as if required.
    #[default]
    Respect,
    /// Preferences are ignored.
    Ignore,
}

/// A `--preference-policy` value that is neither `Respect` nor `Ignore`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a preference policy; use Respect or Ignore")]
pub struct UnknownPreferencePolicy(pub String);

impl std::str::FromStr for PreferencePolicy {
    type Err = UnknownPreferencePolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Respect" => Ok(Self::Respect),
            "Ignore" => Ok(Self::Ignore),
            _ => Err(UnknownPreferencePolicy(s.to_owned())),
        }
    }
}

/// Requirements keyed by (normalised) label key; at most one [`Requirement`] per key.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    reqs: Vec<Requirement>,
}

fn both_negative(a: &Requirement, b: &Requirement) -> bool {
    matches!(a.operator(), Operator::NotIn | Operator::DoesNotExist)
        && matches!(b.operator(), Operator::NotIn | Operator::DoesNotExist)
}

impl Requirements {
    /// No requirements.
    pub fn new() -> Self {
        Requirements::default()
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.reqs.binary_search_by(|r| fastcmp::cmp(r.key(), key))
    }

    /// Adds a requirement: intersects it into the existing one for its key, or inserts it.
    pub fn add(&mut self, requirement: Requirement) {
        match self.position(requirement.key()) {
            Ok(i) => {
                if let Some(existing) = self.reqs.get_mut(i) {
                    *existing = existing.intersection(&requirement);
                }
            }
            Err(i) => self.reqs.insert(i, requirement),
        }
    }

    /// Adds every requirement of `other` (intersection in place).
    pub fn add_all(&mut self, other: &Requirements) {
        if self.reqs.is_empty() {
            self.reqs = other.reqs.clone();
            return;
        }
        *self = self.intersection(other);
    }

    /// The requirement for `key`; a missing key is unconstrained (`Exists`).
    pub fn get(&self, key: &str) -> Requirement {
        self.get_ref(key).cloned().unwrap_or_else(|| Requirement::exists(key))
    }

    /// The stored requirement for `key`, if any (aliases are normalised).
    pub fn get_ref(&self, key: &str) -> Option<&Requirement> {
        let key = normalize_key(key);
        self.position(key).ok().and_then(|i| self.reqs.get(i))
    }

    /// Whether `key` is constrained.
    pub fn has(&self, key: &str) -> bool {
        self.get_ref(key).is_some()
    }

    /// Removes and returns the requirement for `key`.
    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        let key = normalize_key(key);
        self.position(key).ok().map(|i| self.reqs.remove(i))
    }

    /// Keys in sorted order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.reqs.iter().map(Requirement::key)
    }

    /// Requirements in key order.
    pub fn iter(&self) -> std::slice::Iter<'_, Requirement> {
        self.reqs.iter()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    /// True without requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether any requirement carries minValues.
    pub fn has_min_values(&self) -> bool {
        self.reqs.iter().any(|r| r.min_values().is_some())
    }

    /// Upstream's `Compatible(self, incoming, allow_undefined)`: can `incoming` be satisfied by
    /// something described by `self`?
    /// 1. every key of `incoming` must be defined by `self`, be in `allow_undefined`, or be NotIn/DoesNotExist;
    /// 2. then [`Requirements::intersects`].
    pub fn compatible(&self, incoming: &Requirements, allow_undefined: &impl KeySet) -> Result<(), CompatibilityError> {
        let mut mine = self.reqs.iter().peekable();
        for theirs in &incoming.reqs {
            while mine.next_if(|m| fastcmp::cmp(m.key(), theirs.key()) == Ordering::Less).is_some() {}
            if mine.peek().is_some_and(|m| fastcmp::eq(m.key(), theirs.key())) {
                continue;
            }
            if matches!(theirs.operator(), Operator::NotIn | Operator::DoesNotExist)
                || allow_undefined.contains_key(theirs.key())
            {
                continue;
            }
            return Err(CompatibilityError::UndefinedKey { key: theirs.key().to_owned() });
        }
        self.intersects(incoming)
    }

    /// `Intersects(self, incoming)`: every key constrained by **both** must have a possible common value, or
    /// both sides must be NotIn/DoesNotExist (an absent label satisfies both). Keys on one side only are
    /// ignored. Symmetric apart from the order of the sides in the error message.
    pub fn intersects(&self, incoming: &Requirements) -> Result<(), CompatibilityError> {
        let mut mine = self.reqs.iter().peekable();
        for theirs in &incoming.reqs {
            while mine.next_if(|m| fastcmp::cmp(m.key(), theirs.key()) == Ordering::Less).is_some() {}
            let Some(existing) = mine.peek() else { break };
            if !fastcmp::eq(existing.key(), theirs.key()) {
                continue;
            }
            if !existing.has_intersection(theirs) && !both_negative(existing, theirs) {
                return Err(CompatibilityError::NoIntersection {
                    key: theirs.key().to_owned(),
                    incoming: theirs.describe(),
                    existing: existing.describe(),
                });
            }
        }
        Ok(())
    }

    /// [`Requirements::intersects`] as a boolean, without building an error message (for hot loops that
    /// only need the answer).
    pub fn intersects_ok(&self, incoming: &Requirements) -> bool {
        let mut mine = self.reqs.iter().peekable();
        for theirs in &incoming.reqs {
            while mine.next_if(|m| fastcmp::cmp(m.key(), theirs.key()) == Ordering::Less).is_some() {}
            let Some(existing) = mine.peek() else { break };
            if !fastcmp::eq(existing.key(), theirs.key()) {
                continue;
            }
            if !existing.has_intersection(theirs) && !both_negative(existing, theirs) {
                return false;
            }
        }
        true
    }

    /// [`Requirements::compatible`] as a boolean, without building an error message.
    pub fn compatible_ok(&self, incoming: &Requirements, allow_undefined: &impl KeySet) -> bool {
        let mut mine = self.reqs.iter().peekable();
        for theirs in &incoming.reqs {
            while mine.next_if(|m| fastcmp::cmp(m.key(), theirs.key()) == Ordering::Less).is_some() {}
            if mine.peek().is_some_and(|m| fastcmp::eq(m.key(), theirs.key())) {
                continue;
            }
            if matches!(theirs.operator(), Operator::NotIn | Operator::DoesNotExist)
                || allow_undefined.contains_key(theirs.key())
            {
                continue;
            }
            return false;
        }
        self.intersects_ok(incoming)
    }

    /// `self ∩ other`: all keys of both; shared keys intersected.
    pub fn intersection(&self, other: &Requirements) -> Requirements {
        let mut out = Vec::with_capacity(self.reqs.len() + other.reqs.len());
        let (mut a, mut b) = (self.reqs.iter().peekable(), other.reqs.iter().peekable());
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(x), None) => {
                    out.push((*x).clone());
                    a.next();
                }
                (None, Some(y)) => {
                    out.push((*y).clone());
                    b.next();
                }
                (Some(x), Some(y)) => match fastcmp::cmp(x.key(), y.key()) {
                    Ordering::Less => {
                        out.push((*x).clone());
                        a.next();
                    }
                    Ordering::Greater => {
                        out.push((*y).clone());
                        b.next();
                    }
                    Ordering::Equal => {
                        out.push(x.intersection(y));
                        a.next();
                        b.next();
                    }
                },
            }
        }
        Requirements { reqs: out }
    }

    /// `k In [v]` for every label.
    pub fn from_labels<'a, I>(labels: I) -> Requirements
    where
        I: IntoIterator<Item = (&'a String, &'a String)>,
    {
        labels.into_iter().map(|(k, v)| Requirement::in_values(k, [v])).collect()
    }

    /// From Kubernetes node selector requirements (intersected when a key repeats).
    pub fn from_node_selector_requirements<'a, I>(nsrs: I) -> Result<Requirements, RequirementError>
    where
        I: IntoIterator<Item = &'a NodeSelectorRequirement>,
    {
        let mut out = Requirements::new();
        for nsr in nsrs {
            out.add(Requirement::from_node_selector_requirement(nsr)?);
        }
        Ok(out)
    }

    /// From one node selector term's `matchExpressions` (`matchFields` are not label requirements and are
    /// ignored, as upstream).
    pub fn from_node_selector_term(term: &NodeSelectorTerm) -> Result<Requirements, RequirementError> {
        Requirements::from_node_selector_requirements(term.match_expressions.iter().flatten())
    }

    /// A pod's requirements, "preferences as required": the nodeSelector as `In`; with
    /// `Respect`, the single heaviest preferred node-affinity term (first among equal weights); and the
    /// **first** required node-selector term.
    pub fn from_pod(pod: &Pod, policy: PreferencePolicy) -> Result<Requirements, RequirementError> {
        pod.spec.as_ref().map_or_else(|| Ok(Requirements::new()), |spec| Requirements::from_pod_spec(spec, policy))
    }

    /// [`Requirements::from_pod`] of a pod with this spec.
    pub fn from_pod_spec(spec: &PodSpec, policy: PreferencePolicy) -> Result<Requirements, RequirementError> {
        let mut out = Requirements::new();
        if let Some(selector) = &spec.node_selector {
            out = Requirements::from_labels(selector);
        }
        let Some(node_affinity) = spec.affinity.as_ref().and_then(|a| a.node_affinity.as_ref()) else {
            return Ok(out);
        };
        if policy == PreferencePolicy::Respect
            && let Some(preferred) = &node_affinity.preferred_during_scheduling_ignored_during_execution
        {
            let mut heaviest: Option<&k8s_openapi::api::core::v1::PreferredSchedulingTerm> = None;
            for term in preferred {
                if heaviest.is_none_or(|h| term.weight > h.weight) {
                    heaviest = Some(term);
                }
            }
            if let Some(term) = heaviest {
                out.add_all(&Requirements::from_node_selector_term(&term.preference)?);
            }
        }
        if let Some(first) = node_affinity
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .and_then(|r| r.node_selector_terms.first())
        {
            out.add_all(&Requirements::from_node_selector_term(first)?);
        }
        Ok(out)
    }

    /// A pod's strict requirements: nodeSelector and the first required term, no preferences.
    pub fn from_pod_strict(pod: &Pod) -> Result<Requirements, RequirementError> {
        Requirements::from_pod(pod, PreferencePolicy::Ignore)
    }

    /// Labels implied by the requirements: `key = any()` for every key not excluded by `exclude` whose `any()`
    /// is non-empty (deterministic, see [`Requirement::any`]).
    pub fn labels(&self, exclude: impl Fn(&str) -> bool) -> BTreeMap<String, String> {
        self.reqs
            .iter()
            .filter(|r| !exclude(r.key()))
            .filter_map(|r| {
                let v = r.any();
                (!v.is_empty()).then(|| (r.key().to_owned(), v))
            })
            .collect()
    }

    /// The serialised form of every requirement, in key order.
    pub fn to_serialized(&self) -> Vec<SerializedRequirement> {
        self.reqs.iter().flat_map(Requirement::to_serialized).collect()
    }
}

impl FromIterator<Requirement> for Requirements {
    fn from_iter<T: IntoIterator<Item = Requirement>>(iter: T) -> Self {
        let mut out = Requirements::new();
        for r in iter {
            out.add(r);
        }
        out
    }
}

impl Extend<Requirement> for Requirements {
    fn extend<T: IntoIterator<Item = Requirement>>(&mut self, iter: T) {
        for r in iter {
            self.add(r);
        }
    }
}

impl<'a> IntoIterator for &'a Requirements {
    type Item = &'a Requirement;
    type IntoIter = std::slice::Iter<'a, Requirement>;
    fn into_iter(self) -> Self::IntoIter {
        self.reqs.iter()
    }
}

impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Requirements({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operator::*;
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, NodeSelector, PodSpec, PreferredSchedulingTerm};

    fn r(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, op, values.iter().copied(), None).unwrap()
    }

    fn reqs(list: Vec<Requirement>) -> Requirements {
        list.into_iter().collect()
    }

    #[test]
    fn boolean_checks_agree_with_the_error_returning_ones() {
        let cases = [
            reqs(vec![r("zone", In, &["a", "b"])]),
            reqs(vec![r("zone", In, &["c"])]),
            reqs(vec![r("zone", NotIn, &["a"]), r("arch", In, &["amd64"])]),
            reqs(vec![r("zone", DoesNotExist, &[])]),
            reqs(vec![r("arch", Exists, &[])]),
            reqs(vec![]),
        ];
        for a in &cases {
            for b in &cases {
                assert_eq!(a.intersects_ok(b), a.intersects(b).is_ok(), "{a} vs {b}");
                assert_eq!(a.compatible_ok(b, &NoKeys), a.compatible(b, &NoKeys).is_ok(), "{a} vs {b}");
                assert_eq!(a.compatible_ok(b, &["zone"]), a.compatible(b, &["zone"]).is_ok(), "{a} vs {b}");
            }
        }
    }

    fn nsr(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn term(exprs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
        NodeSelectorTerm { match_expressions: Some(exprs), match_fields: None }
    }

    const ZONE: &str = "topology.kubernetes.io/zone";

    #[test]
    fn add_intersects_and_get_defaults_to_exists() {
        let mut a = Requirements::new();
        a.add(r(ZONE, In, &["a", "b"]));
        a.add(r("failure-domain.beta.kubernetes.io/zone", In, &["b", "c"]));
        assert_eq!(a.len(), 1);
        assert_eq!(a.get(ZONE).describe(), "In [b]");
        assert_eq!(a.get("example.com/x").operator(), Exists);
        assert!(a.has("failure-domain.beta.kubernetes.io/zone"));
        a.add(r("a/b", Exists, &[]));
        assert_eq!(a.keys().collect::<Vec<_>>(), vec!["a/b", ZONE]);
        assert!(a.remove("a/b").is_some() && !a.has("a/b"));
    }

    #[test]
    fn compatible_rules() {
        let template = reqs(vec![r(ZONE, In, &["a", "b"]), r("example.com/team", Exists, &[])]);
        let well_known = [ZONE, "kubernetes.io/arch"];
        // defined keys intersect
        assert!(template.compatible(&reqs(vec![r(ZONE, In, &["b"])]), &well_known).is_ok());
        // undefined custom label
        let pod = reqs(vec![r("example.com/other", In, &["x"])]);
        let err = template.compatible(&pod, &well_known).unwrap_err();
        assert_eq!(err.to_string(), "label example.com/other does not have known values");
        // undefined custom label with NotIn / DoesNotExist is fine
        assert!(template.compatible(&reqs(vec![r("example.com/other", NotIn, &["x"])]), &well_known).is_ok());
        assert!(template.compatible(&reqs(vec![r("example.com/other", DoesNotExist, &[])]), &well_known).is_ok());
        // undefined well-known label allowed only with allowance
        let arch = reqs(vec![r("kubernetes.io/arch", In, &["arm64"])]);
        assert!(template.compatible(&arch, &well_known).is_ok());
        assert!(matches!(template.compatible(&arch, &NoKeys), Err(CompatibilityError::UndefinedKey { .. })));
        // no intersection
        let err = template.compatible(&reqs(vec![r(ZONE, In, &["c"])]), &NoKeys).unwrap_err();
        assert_eq!(err.to_string(), "key topology.kubernetes.io/zone: In [c] does not intersect In [a b]");
        // NotIn / DoesNotExist rescue
        let absent = reqs(vec![r("example.com/gpu", DoesNotExist, &[])]);
        assert!(absent.compatible(&reqs(vec![r("example.com/gpu", DoesNotExist, &[])]), &NoKeys).is_ok());
        assert!(absent.compatible(&reqs(vec![r("example.com/gpu", NotIn, &["x"])]), &NoKeys).is_ok());
        let not_in = reqs(vec![r("example.com/gpu", NotIn, &["x"])]);
        assert!(not_in.compatible(&absent, &NoKeys).is_ok());
        // ...but not Exists vs DoesNotExist
        let exists = reqs(vec![r("example.com/gpu", Exists, &[])]);
        assert!(exists.compatible(&absent, &NoKeys).is_err());
        assert!(absent.compatible(&exists, &NoKeys).is_err());
        // undefined-key errors come before intersection errors
        let pod = reqs(vec![r(ZONE, In, &["z"]), r("zz.example.com/x", In, &["1"])]);
        assert!(matches!(template.compatible(&pod, &NoKeys), Err(CompatibilityError::UndefinedKey { .. })));
    }

    #[test]
    fn intersects_ignores_one_sided_keys() {
        let it = reqs(vec![r(ZONE, In, &["a"]), r("kubernetes.io/arch", In, &["amd64"])]);
        assert!(it.intersects(&reqs(vec![r("example.com/x", In, &["y"])])).is_ok());
        assert!(it.intersects(&reqs(vec![r("kubernetes.io/arch", In, &["arm64"])])).is_err());
        assert!(reqs(vec![r("kubernetes.io/arch", In, &["arm64"])]).intersects(&it).is_err());
    }

    #[test]
    fn intersection_unions_keys() {
        let a = reqs(vec![r(ZONE, In, &["a", "b"]), r("x/a", Exists, &[])]);
        let b = reqs(vec![r(ZONE, NotIn, &["a"]), r("x/b", In, &["1"])]);
        let c = a.intersection(&b);
        assert_eq!(c.to_string(), "topology.kubernetes.io/zone In [b], x/a Exists, x/b In [1]");
        let mut d = a.clone();
        d.add_all(&b);
        assert_eq!(c, d);
    }

    #[test]
    fn from_labels_and_labels_view() {
        let labels: BTreeMap<String, String> =
            [("beta.kubernetes.io/arch".to_string(), "amd64".to_string())].into_iter().collect();
        let rs = Requirements::from_labels(&labels);
        assert_eq!(rs.get("kubernetes.io/arch").describe(), "In [amd64]");
        let mut rs = reqs(vec![r("example.com/team", Exists, &[]), r(ZONE, In, &["b", "a"])]);
        rs.add(r("example.com/absent", DoesNotExist, &[]));
        let view = rs.labels(|k| k == ZONE);
        assert_eq!(view.into_iter().collect::<Vec<_>>(), vec![("example.com/team".to_string(), "0".to_string())]);
    }

    fn pod(selector: &[(&str, &str)], preferred: Vec<(i32, NodeSelectorTerm)>, required: Vec<NodeSelectorTerm>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                node_selector: Some(selector.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                affinity: Some(Affinity {
                    node_affinity: Some(NodeAffinity {
                        preferred_during_scheduling_ignored_during_execution: Some(
                            preferred
                                .into_iter()
                                .map(|(weight, preference)| PreferredSchedulingTerm { weight, preference })
                                .collect(),
                        ),
                        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                            node_selector_terms: required,
                        }),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_requirements() {
        let p = pod(
            &[("kubernetes.io/os", "linux")],
            vec![
                (10, term(vec![nsr(ZONE, "In", &["a"])])),
                (50, term(vec![nsr(ZONE, "In", &["b"])])),
                (50, term(vec![nsr(ZONE, "In", &["c"])])),
            ],
            vec![term(vec![nsr(ZONE, "In", &["b", "c", "d"])]), term(vec![nsr(ZONE, "In", &["e"])])],
        );
        let rs = Requirements::from_pod(&p, PreferencePolicy::Respect).unwrap();
        assert_eq!(rs.to_string(), "kubernetes.io/os In [linux], topology.kubernetes.io/zone In [b]");
        let strict = Requirements::from_pod_strict(&p).unwrap();
        assert_eq!(strict.to_string(), "kubernetes.io/os In [linux], topology.kubernetes.io/zone In [b c d]");
        assert_eq!(Requirements::from_pod(&p, PreferencePolicy::Ignore).unwrap(), strict);
        assert!(Requirements::from_pod(&Pod::default(), PreferencePolicy::Respect).unwrap().is_empty());
        let bad = pod(&[], vec![], vec![term(vec![nsr(ZONE, "Within", &["a"])])]);
        assert!(Requirements::from_pod(&bad, PreferencePolicy::Respect).is_err());
    }

    #[test]
    fn serialised_in_key_order() {
        let rs = reqs(vec![r("b/x", Gt, &["1"]), r("a/x", In, &["v"])]);
        let s = rs.to_serialized();
        assert_eq!(s.iter().map(|e| (e.key.as_str(), e.operator)).collect::<Vec<_>>(), vec![("a/x", In), ("b/x", Gte)]);
    }
}
