//! One scheduling requirement on one label key (upstream's `Requirement`).
//!
//! The operator is not stored: a [`Requirement`] is `(key, complement, values, gte, lte, min_values)` and the
//! operator is derived from it ([`Requirement::operator`]). Values are kept **sorted** (byte order) and
//! de-duplicated in a shared slice of `Arc<str>`, so clones are reference-count bumps and every set operation is
//! a linear merge.

use std::cmp::Ordering;
use std::fmt;
use std::ops::Deref;
use std::str::FromStr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::NodeSelectorRequirement;

use crate::fastcmp;
use crate::labels::normalize_key;

/// Node selector operators, including Karpenter's inclusive numeric `Gte`/`Lte`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Operator {
    /// Value is one of the listed values.
    In,
    /// Value is none of the listed values (or the label is absent).
    NotIn,
    /// The label exists (any value).
    Exists,
    /// The label must be absent.
    DoesNotExist,
    /// Integer value strictly greater than the single value.
    Gt,
    /// Integer value strictly less than the single value.
    Lt,
    /// Integer value greater than or equal to the single value.
    Gte,
    /// Integer value less than or equal to the single value.
    Lte,
}

impl Operator {
    /// The Kubernetes spelling.
    pub fn as_str(&self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An operator string that is not one of the eight known operators.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown operator {0:?} (expected In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte or Lte)")]
pub struct UnknownOperator(pub String);

impl FromStr for Operator {
    type Err = UnknownOperator;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            other => return Err(UnknownOperator(other.to_owned())),
        })
    }
}

/// Why a requirement could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// The operator string is unknown.
    #[error("key {key}: {source}")]
    UnknownOperator {
        /// The (normalised) key.
        key: String,
        /// The bad operator.
        source: UnknownOperator,
    },
    /// A numeric operator did not get exactly one value.
    #[error("key {key}: operator {operator} needs exactly one integer value, got {count}")]
    BoundArity {
        /// The (normalised) key.
        key: String,
        /// The numeric operator.
        operator: Operator,
        /// How many values were given.
        count: usize,
    },
    /// A numeric operator's value is not a 64-bit integer.
    #[error("key {key}: operator {operator} value {value:?} is not an integer")]
    BoundNotInteger {
        /// The (normalised) key.
        key: String,
        /// The numeric operator.
        operator: Operator,
        /// The offending value.
        value: String,
    },
}

/// A sorted, de-duplicated, cheaply clonable set of values. The empty set does not allocate.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Values(Option<Arc<[Arc<str>]>>);

impl Values {
    /// Builds a set from values in any order (sorts and de-duplicates).
    pub fn new<I, S>(values: I) -> Values
    where
        I: IntoIterator<Item = S>,
        S: Into<Arc<str>>,
    {
        let mut v: Vec<Arc<str>> = values.into_iter().map(Into::into).collect();
        v.sort_unstable();
        v.dedup();
        Values::from_sorted(v)
    }

    fn from_sorted(v: Vec<Arc<str>>) -> Values {
        if v.is_empty() { Values(None) } else { Values(Some(v.into())) }
    }

    /// The values as a sorted slice.
    pub fn as_slice(&self) -> &[Arc<str>] {
        self.0.as_deref().unwrap_or(&[])
    }

    /// Membership by binary search.
    pub fn contains(&self, value: &str) -> bool {
        self.as_slice().binary_search_by(|v| fastcmp::cmp(v, value)).is_ok()
    }
}

impl Deref for Values {
    type Target = [Arc<str>];
    fn deref(&self) -> &[Arc<str>] {
        self.as_slice()
    }
}

impl fmt::Debug for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// A requirement on one label key. See the module docs for the representation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: Arc<str>,
    complement: bool,
    values: Values,
    gte: Option<i64>,
    lte: Option<i64>,
    min_values: Option<u32>,
}

/// A requirement in its serialised form: one `NodeSelectorRequirement` with Karpenter's `minValues`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerializedRequirement {
    /// Label key.
    pub key: String,
    /// Operator (`Gt`/`Lt` never appear: numeric bounds come back as `Gte`/`Lte`).
    pub operator: Operator,
    /// Values (sorted).
    pub values: Vec<String>,
    /// minValues, copied.
    pub min_values: Option<u32>,
}

impl SerializedRequirement {
    /// As a Kubernetes `NodeSelectorRequirement` (minValues is dropped: the core type has no such field).
    pub fn to_node_selector_requirement(&self) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: self.key.clone(),
            operator: self.operator.as_str().to_owned(),
            values: if self.values.is_empty() { None } else { Some(self.values.clone()) },
        }
    }
}

fn parse_int(s: &str) -> Option<i64> {
    s.parse::<i64>().ok()
}

fn within(value: &str, gte: Option<i64>, lte: Option<i64>) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    match parse_int(value) {
        Some(v) => gte.is_none_or(|g| v >= g) && lte.is_none_or(|l| v <= l),
        None => false,
    }
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Merge-walks two sorted slices, calling `emit(value, in_a, in_b)` for every distinct value; stops early when
/// `emit` returns `true` and reports whether it did.
fn merge<'a>(a: &'a [Arc<str>], b: &'a [Arc<str>], mut emit: impl FnMut(&'a Arc<str>, bool, bool) -> bool) -> bool {
    let (mut i, mut j) = (0, 0);
    loop {
        let step = match (a.get(i), b.get(j)) {
            (None, None) => return false,
            (Some(x), None) => {
                i += 1;
                emit(x, true, false)
            }
            (None, Some(y)) => {
                j += 1;
                emit(y, false, true)
            }
            (Some(x), Some(y)) => match fastcmp::cmp(x, y) {
                Ordering::Less => {
                    i += 1;
                    emit(x, true, false)
                }
                Ordering::Greater => {
                    j += 1;
                    emit(y, false, true)
                }
                Ordering::Equal => {
                    i += 1;
                    j += 1;
                    emit(x, true, true)
                }
            },
        };
        if step {
            return true;
        }
    }
}

impl Requirement {
    /// Builds a requirement from an operator. The key is normalised
    /// through the alias table. `Gt`/`Lt`/`Gte`/`Lte` need exactly one integer value; `Exists` and
    /// `DoesNotExist` ignore values; `In`/`NotIn` accept any number (an empty `In` is DoesNotExist, an empty
    /// `NotIn` is Exists). `Gt i64::MAX` and `Lt i64::MIN` can match nothing and are DoesNotExist.
    pub fn new<K, I, S>(
        key: K,
        operator: Operator,
        values: I,
        min_values: Option<u32>,
    ) -> Result<Self, RequirementError>
    where
        K: AsRef<str>,
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let key: Arc<str> = Arc::from(normalize_key(key.as_ref()));
        let mut r = Requirement { key, complement: true, values: Values::default(), gte: None, lte: None, min_values };
        match operator {
            Operator::In => {
                r.complement = false;
                r.values = Values::new(values.into_iter().map(|v| Arc::<str>::from(v.as_ref())));
            }
            Operator::NotIn => r.values = Values::new(values.into_iter().map(|v| Arc::<str>::from(v.as_ref()))),
            Operator::Exists => {}
            Operator::DoesNotExist => r.complement = false,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let mut it = values.into_iter();
                let first = match (it.next(), it.count()) {
                    (Some(first), 0) => first,
                    (first, rest) => {
                        let count = rest + usize::from(first.is_some());
                        return Err(RequirementError::BoundArity { key: r.key.to_string(), operator, count });
                    }
                };
                let n = parse_int(first.as_ref()).ok_or_else(|| RequirementError::BoundNotInteger {
                    key: r.key.to_string(),
                    operator,
                    value: first.as_ref().to_owned(),
                })?;
                let bound = match operator {
                    Operator::Gt => n.checked_add(1),
                    Operator::Lt => n.checked_sub(1),
                    _ => Some(n),
                };
                match (operator, bound) {
                    (_, None) => r.complement = false, // nothing is beyond i64's range: DoesNotExist
                    (Operator::Gt | Operator::Gte, Some(b)) => r.gte = Some(b),
                    (_, Some(b)) => r.lte = Some(b),
                }
            }
        }
        Ok(r)
    }

    /// Builds a requirement from a Kubernetes `NodeSelectorRequirement` (no minValues).
    pub fn from_node_selector_requirement(nsr: &NodeSelectorRequirement) -> Result<Self, RequirementError> {
        let operator: Operator = nsr
            .operator
            .parse()
            .map_err(|source| RequirementError::UnknownOperator { key: normalize_key(&nsr.key).to_owned(), source })?;
        Requirement::new(&nsr.key, operator, nsr.values.iter().flatten(), None)
    }

    /// `key In [values]`.
    pub fn in_values<I, S>(key: &str, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Requirement {
            key: Arc::from(normalize_key(key)),
            complement: false,
            values: Values::new(values.into_iter().map(|v| Arc::<str>::from(v.as_ref()))),
            gte: None,
            lte: None,
            min_values: None,
        }
    }

    /// `key NotIn [values]`.
    pub fn not_in<I, S>(key: &str, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Requirement { complement: true, ..Requirement::in_values(key, values) }
    }

    /// `key Exists`.
    pub fn exists(key: &str) -> Self {
        Requirement {
            key: Arc::from(normalize_key(key)),
            complement: true,
            values: Values::default(),
            gte: None,
            lte: None,
            min_values: None,
        }
    }

    /// `key DoesNotExist`.
    pub fn does_not_exist(key: &str) -> Self {
        Requirement { complement: false, ..Requirement::exists(key) }
    }

    /// `key Gt value`: the label, as an integer, is strictly greater than `value` (`Gt i64::MAX` matches nothing).
    pub fn gt(key: &str, value: i64) -> Self {
        Requirement::bound(key, Operator::Gt, value)
    }

    /// `key Lt value`: the label, as an integer, is strictly less than `value` (`Lt i64::MIN` matches nothing).
    pub fn lt(key: &str, value: i64) -> Self {
        Requirement::bound(key, Operator::Lt, value)
    }

    fn bound(key: &str, operator: Operator, value: i64) -> Self {
        // One value that is an integer by construction: the only ways `new` can fail (arity, not an integer)
        // cannot happen, so the fallback is never taken; it keeps this infallible without a panic path.
        Requirement::new(key, operator, [value.to_string()], None).unwrap_or_else(|_| Requirement::does_not_exist(key))
    }

    /// The same requirement with `min_values` replaced.
    pub fn with_min_values(mut self, min_values: Option<u32>) -> Self {
        self.min_values = min_values;
        self
    }

    /// The (normalised) key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The key as a shared string.
    pub fn key_arc(&self) -> &Arc<str> {
        &self.key
    }

    /// True when the values are excluded rather than allowed.
    pub fn complement(&self) -> bool {
        self.complement
    }

    /// The listed values, sorted.
    pub fn values(&self) -> &Values {
        &self.values
    }

    /// Inclusive lower bound.
    pub fn gte(&self) -> Option<i64> {
        self.gte
    }

    /// Inclusive upper bound.
    pub fn lte(&self) -> Option<i64> {
        self.lte
    }

    /// minValues.
    pub fn min_values(&self) -> Option<u32> {
        self.min_values
    }

    /// The derived operator: NotIn / Exists (complement, with / without values; bounds are "Exists with bounds")
    /// or In / DoesNotExist.
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, false) => Operator::NotIn,
            (true, true) => Operator::Exists,
            (false, false) => Operator::In,
            (false, true) => Operator::DoesNotExist,
        }
    }

    /// Number of allowed values: `|values|` for In/DoesNotExist, `i64::MAX - |values|` ("infinite minus the
    /// excluded ones") for complements.
    pub fn len(&self) -> i64 {
        let n = i64::try_from(self.values.len()).unwrap_or(i64::MAX);
        if self.complement { i64::MAX - n } else { n }
    }

    /// True for DoesNotExist (nothing is allowed).
    pub fn is_empty(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// Whether an integer-parsable `value` lies within the bounds (always true without bounds).
    pub fn within_bounds(&self, value: &str) -> bool {
        within(value, self.gte, self.lte)
    }

    /// Whether the requirement allows `value`.
    pub fn has(&self, value: &str) -> bool {
        self.complement != self.values.contains(value) && self.within_bounds(value)
    }

    /// `self ∩ other`, as upstream's `Requirement.Intersection`. The key of `self` is kept.
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let complement = self.complement && other.complement;
        let gte = max_opt(self.gte, other.gte);
        let lte = min_opt(self.lte, other.lte);
        let min_values = max_opt(self.min_values, other.min_values);
        if let (Some(g), Some(l)) = (gte, lte)
            && g > l
        {
            return Requirement {
                key: self.key.clone(),
                complement: false,
                values: Values::default(),
                gte: None,
                lte: None,
                min_values,
            };
        }
        let keep = |in_a: bool, in_b: bool| match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => in_b && !in_a,
            (false, true) => in_a && !in_b,
            (false, false) => in_a && in_b,
        };
        // Reuse an operand's value set when the result is exactly that set (common for In ∩ Exists).
        let values = match (self.complement, other.complement) {
            (false, true) if other.values.is_empty() && gte.is_none() && lte.is_none() => self.values.clone(),
            (true, false) if self.values.is_empty() && gte.is_none() && lte.is_none() => other.values.clone(),
            _ => {
                let mut out = Vec::new();
                merge(&self.values, &other.values, |v, in_a, in_b| {
                    if keep(in_a, in_b) && within(v, gte, lte) {
                        out.push(v.clone());
                    }
                    false
                });
                Values::from_sorted(out)
            }
        };
        let (gte, lte) = if complement { (gte, lte) } else { (None, None) };
        Requirement { key: self.key.clone(), complement, values, gte, lte, min_values }
    }

    /// Whether `self ∩ other` may be non-empty (upstream's `HasIntersection`); never allocates.
    /// Two complements always intersect (even when the bounds and exclusions together leave nothing).
    pub fn has_intersection(&self, other: &Requirement) -> bool {
        let gte = max_opt(self.gte, other.gte);
        let lte = min_opt(self.lte, other.lte);
        if let (Some(g), Some(l)) = (gte, lte)
            && g > l
        {
            return false;
        }
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other.values.iter().any(|v| !self.values.contains(v) && within(v, gte, lte)),
            (false, true) => self.values.iter().any(|v| !other.values.contains(v) && within(v, gte, lte)),
            (false, false) => merge(&self.values, &other.values, |v, in_a, in_b| in_a && in_b && within(v, gte, lte)),
        }
    }

    /// A deterministic concrete value:
    /// * In: the smallest value in byte order;
    /// * NotIn / Exists: the smallest integer `n` with `n >= max(gte, 0)` (or `n >= gte` when the whole range is
    ///   negative), `n <= lte`, `n` not excluded, printed in decimal; `""` if the range has no such integer;
    /// * DoesNotExist: `""`.
    ///
    /// Upstream picks a random member / random integer here; we choose the smallest so simulations are
    /// reproducible.
    pub fn any(&self) -> String {
        if !self.complement {
            return self.values.first().map(|v| v.to_string()).unwrap_or_default();
        }
        let lower = self.gte.unwrap_or(0);
        let mut n = if lower >= 0 || self.lte.is_none_or(|l| l >= 0) { lower.max(0) } else { lower };
        loop {
            if self.lte.is_some_and(|l| n > l) {
                return String::new();
            }
            let s = n.to_string();
            if !self.values.contains(&s) {
                return s;
            }
            match n.checked_add(1) {
                Some(next) => n = next,
                None => return String::new(),
            }
        }
    }

    /// The serialised form: both bounds ⇒ `Gte` and `Lte` entries; one bound ⇒ that entry;
    /// otherwise one entry with the derived operator. minValues is copied to every entry. Note that excluded
    /// values of a bounded complement are not serialised (as upstream).
    pub fn to_serialized(&self) -> Vec<SerializedRequirement> {
        let entry = |operator, values: Vec<String>| SerializedRequirement {
            key: self.key.to_string(),
            operator,
            values,
            min_values: self.min_values,
        };
        let mut out = Vec::with_capacity(2);
        if let Some(g) = self.gte {
            out.push(entry(Operator::Gte, vec![g.to_string()]));
        }
        if let Some(l) = self.lte {
            out.push(entry(Operator::Lte, vec![l.to_string()]));
        }
        if out.is_empty() {
            out.push(entry(self.operator(), self.values.iter().map(|v| v.to_string()).collect()));
        }
        out
    }

    /// Operator and values for messages, e.g. `In [a b]`, `NotIn [x]`, `Exists`, `Gte 5 Lte 9`.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let mut bounds = Vec::new();
        if let Some(g) = self.gte {
            bounds.push(format!("Gte {g}"));
        }
        if let Some(l) = self.lte {
            bounds.push(format!("Lte {l}"));
        }
        let op = self.operator();
        if bounds.is_empty() || op != Operator::Exists {
            s.push_str(op.as_str());
            if !self.values.is_empty() {
                s.push_str(" [");
                for (i, v) in self.values.iter().take(5).enumerate() {
                    if i > 0 {
                        s.push(' ');
                    }
                    s.push_str(v);
                }
                if self.values.len() > 5 {
                    s.push_str(&format!(" and {} others", self.values.len() - 5));
                }
                s.push(']');
            }
        }
        for b in bounds {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(&b);
        }
        s
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key, self.describe())?;
        if let Some(m) = self.min_values {
            write!(f, " minValues {m}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Requirement({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operator::*;

    fn req(op: Operator, values: &[&str]) -> Requirement {
        Requirement::new("k", op, values.iter().copied(), None).unwrap()
    }

    #[test]
    fn operator_round_trip_and_errors() {
        for op in [In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte] {
            assert_eq!(op.as_str().parse::<Operator>(), Ok(op));
        }
        let err = "Equals".parse::<Operator>().unwrap_err();
        assert!(err.to_string().contains("\"Equals\""));
    }

    #[test]
    fn construction_table() {
        let r = req(In, &["b", "a", "b"]);
        assert!(!r.complement() && r.values().as_slice() == [Arc::from("a"), Arc::from("b")]);
        assert_eq!(r.operator(), In);
        let r = req(NotIn, &["a"]);
        assert!(r.complement() && r.values().len() == 1 && r.operator() == NotIn);
        let r = req(Exists, &["ignored"]);
        assert!(r.complement() && r.values().is_empty() && r.operator() == Exists);
        let r = req(DoesNotExist, &[]);
        assert!(!r.complement() && r.values().is_empty() && r.operator() == DoesNotExist);
        let r = req(Gt, &["5"]);
        assert!(r.complement() && r.gte() == Some(6) && r.lte().is_none() && r.operator() == Exists);
        let r = req(Lt, &["5"]);
        assert!(r.complement() && r.lte() == Some(4) && r.gte().is_none());
        let r = req(Gte, &["5"]);
        assert_eq!((r.gte(), r.lte()), (Some(5), None));
        let r = req(Lte, &["5"]);
        assert_eq!((r.gte(), r.lte()), (None, Some(5)));
        // Gt i64::MAX behaves as DoesNotExist.
        let r = req(Gt, &[&i64::MAX.to_string()]);
        assert_eq!(r.operator(), DoesNotExist);
        assert!(!r.has(&i64::MAX.to_string()));
        assert!(!r.has_intersection(&req(Exists, &[])));
        let r = req(Lt, &[&i64::MIN.to_string()]);
        assert_eq!(r.operator(), DoesNotExist);
    }

    #[test]
    fn construction_errors_name_key_and_reason() {
        let e = Requirement::new("example.com/gen", Gt, ["1", "2"], None).unwrap_err();
        assert_eq!(e, RequirementError::BoundArity { key: "example.com/gen".into(), operator: Gt, count: 2 });
        assert!(e.to_string().contains("example.com/gen"));
        let e = Requirement::new("k", Lte, Vec::<String>::new(), None).unwrap_err();
        assert!(matches!(e, RequirementError::BoundArity { count: 0, .. }));
        let e = Requirement::new("k", Gte, ["x"], None).unwrap_err();
        assert!(e.to_string().contains("\"x\" is not an integer"), "{e}");
        let nsr = NodeSelectorRequirement { key: "k".into(), operator: "Foo".into(), values: None };
        let e = Requirement::from_node_selector_requirement(&nsr).unwrap_err();
        assert!(e.to_string().contains("Foo") && e.to_string().contains("key k"), "{e}");
    }

    #[test]
    fn key_aliases_are_normalised() {
        let r = Requirement::new("failure-domain.beta.kubernetes.io/zone", In, ["a"], None).unwrap();
        assert_eq!(r.key(), "topology.kubernetes.io/zone");
    }

    #[test]
    fn has_and_bounds() {
        let r = req(Gte, &["3"]).intersection(&req(Lte, &["5"]));
        assert!(r.has("3") && r.has("5") && !r.has("6") && !r.has("2") && !r.has("x"));
        assert!(r.has("+4") && r.has("004"));
        let r = req(NotIn, &["a"]);
        assert!(!r.has("a") && r.has("b"));
        assert!(req(Exists, &[]).has("anything"));
        assert!(!req(DoesNotExist, &[]).has(""));
        assert!(req(In, &["a"]).has("a") && !req(In, &["a"]).has("b"));
    }

    #[test]
    fn len_semantics() {
        assert_eq!(req(In, &["a", "b"]).len(), 2);
        assert_eq!(req(DoesNotExist, &[]).len(), 0);
        assert_eq!(req(Exists, &[]).len(), i64::MAX);
        assert_eq!(req(NotIn, &["a"]).len(), i64::MAX - 1);
        assert!(req(DoesNotExist, &[]).is_empty() && !req(NotIn, &[]).is_empty());
    }

    #[test]
    fn intersection_steps() {
        // 1+4: complement flags and value algebra.
        let r = req(NotIn, &["a"]).intersection(&req(NotIn, &["b"]));
        assert_eq!((r.operator(), r.values().len()), (NotIn, 2));
        let r = req(NotIn, &["a"]).intersection(&req(In, &["a", "b"]));
        assert_eq!(r.describe(), "In [b]");
        let r = req(In, &["a", "b"]).intersection(&req(NotIn, &["a"]));
        assert_eq!(r.describe(), "In [b]");
        let r = req(In, &["a", "b"]).intersection(&req(In, &["b", "c"]));
        assert_eq!(r.describe(), "In [b]");
        let r = req(In, &["a"]).intersection(&req(In, &["c"]));
        assert_eq!(r.operator(), DoesNotExist);
        let r = req(Exists, &[]).intersection(&req(DoesNotExist, &[]));
        assert_eq!(r.operator(), DoesNotExist);
        // 2: bounds and minValues.
        let a = Requirement::new("k", Gte, ["2"], Some(3)).unwrap();
        let b = Requirement::new("k", Gte, ["4"], Some(1)).unwrap().intersection(&req(Lte, &["9"]));
        let r = a.intersection(&b);
        assert_eq!((r.gte(), r.lte(), r.min_values()), (Some(4), Some(9), Some(3)));
        // 3: empty range ⇒ DoesNotExist keeping minValues.
        let r = a.intersection(&req(Lt, &["2"]));
        assert_eq!((r.operator(), r.gte(), r.lte(), r.min_values()), (DoesNotExist, None, None, Some(3)));
        // 5: values outside bounds dropped; 6: bounds dropped on concrete result.
        let r = req(In, &["1", "5", "x"]).intersection(&req(Gt, &["2"]));
        assert_eq!((r.describe(), r.gte(), r.lte()), ("In [5]".to_string(), None, None));
        let r = req(NotIn, &["1", "5", "x"]).intersection(&req(Gt, &["2"]));
        assert_eq!((r.operator(), r.values().len(), r.gte()), (NotIn, 1, Some(3)));
        assert!(!r.has("5") && r.has("6") && !r.has("2"));
    }

    #[test]
    fn has_intersection_consequences() {
        assert!(!req(Exists, &[]).has_intersection(&req(DoesNotExist, &[])));
        assert!(!req(DoesNotExist, &[]).has_intersection(&req(DoesNotExist, &[])));
        assert!(!req(NotIn, &["x"]).has_intersection(&req(DoesNotExist, &[])));
        assert!(req(NotIn, &["x"]).has_intersection(&req(NotIn, &["y"])));
        assert!(req(Exists, &[]).has_intersection(&req(In, &["a"])));
        assert!(!req(NotIn, &["a"]).has_intersection(&req(In, &["a"])));
        assert!(req(NotIn, &["a"]).has_intersection(&req(In, &["a", "b"])));
        assert!(req(In, &["a", "b"]).has_intersection(&req(In, &["b"])));
        assert!(!req(In, &["a"]).has_intersection(&req(In, &["b"])));
        // bounds conflict
        assert!(!req(Gt, &["5"]).has_intersection(&req(Lt, &["5"])));
        assert!(req(Gte, &["5"]).has_intersection(&req(Lte, &["5"])));
        // both complement: true even when exclusions empty the bounded range
        let bounded = req(Gte, &["5"]).intersection(&req(Lte, &["5"]));
        assert!(bounded.has_intersection(&req(NotIn, &["5"])));
        // concrete side filtered by the complement side's bounds
        assert!(!req(Gt, &["5"]).has_intersection(&req(In, &["3", "x"])));
        assert!(req(Gt, &["5"]).has_intersection(&req(In, &["3", "6"])));
    }

    #[test]
    fn any_is_deterministic() {
        assert_eq!(req(In, &["zeta", "alpha"]).any(), "alpha");
        assert_eq!(req(DoesNotExist, &[]).any(), "");
        assert_eq!(req(Exists, &[]).any(), "0");
        assert_eq!(req(NotIn, &["0", "1", "3"]).any(), "2");
        assert_eq!(req(Gt, &["9"]).any(), "10");
        assert_eq!(req(Gte, &["-4"]).any(), "0");
        assert_eq!(req(Lte, &["-4"]).any(), "");
        assert_eq!(req(Gte, &["-8"]).intersection(&req(Lte, &["-4"])).any(), "-8");
        assert_eq!(req(Gte, &["2"]).intersection(&req(Lte, &["3"])).intersection(&req(NotIn, &["2", "3"])).any(), "");
        assert_eq!(req(Gte, &[&i64::MAX.to_string()]).intersection(&req(NotIn, &[&i64::MAX.to_string()])).any(), "");
    }

    #[test]
    fn serialisation() {
        let both = Requirement::new("k", Gt, ["1"], Some(2)).unwrap().intersection(&req(Lt, &["10"]));
        let s = both.to_serialized();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].operator, s[0].values.clone(), s[0].min_values), (Gte, vec!["2".to_string()], Some(2)));
        assert_eq!((s[1].operator, s[1].values.clone()), (Lte, vec!["9".to_string()]));
        assert_eq!(req(Lt, &["3"]).to_serialized()[0].operator, Lte);
        for (op, values) in [(In, vec!["a", "b"]), (NotIn, vec!["a"]), (Exists, vec![]), (DoesNotExist, vec![])] {
            let s = req(op, &values).to_serialized();
            assert_eq!(s.len(), 1);
            assert_eq!((s[0].operator, s[0].values.clone()), (op, values.iter().map(|v| v.to_string()).collect()));
        }
        let nsr = req(In, &["a"]).to_serialized()[0].to_node_selector_requirement();
        assert_eq!((nsr.operator.as_str(), nsr.values), ("In", Some(vec!["a".to_string()])));
    }

    #[test]
    fn display_is_readable() {
        assert_eq!(req(In, &["a", "b"]).to_string(), "k In [a b]");
        assert_eq!(req(Gte, &["3"]).to_string(), "k Gte 3");
        assert_eq!(req(NotIn, &["1"]).intersection(&req(Gte, &["0"])).to_string(), "k NotIn [1] Gte 0");
        let many = req(In, &["1", "2", "3", "4", "5", "6", "7"]);
        assert_eq!(many.describe(), "In [1 2 3 4 5 and 2 others]");
        assert_eq!(req(Exists, &[]).with_min_values(Some(2)).to_string(), "k Exists minValues 2");
    }
}
