//! Taint / toleration matching with standard Kubernetes semantics.
//!
//! A toleration matches a taint when its effect is empty or equal, its key is empty or equal, and its operator
//! is `Exists`, or `Equal`/empty with an equal value (an empty key with `Exists` therefore tolerates
//! everything). `PreferNoSchedule` taints are **not** ignored: they must be tolerated like any other.

use std::fmt;

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// A taint no toleration matches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("did not tolerate taint {taint}")]
pub struct TaintError {
    /// The taint as `key=value:effect` (or `key:effect` without a value).
    pub taint: String,
}

/// `key=value:effect`, or `key:effect` when the value is empty.
pub fn format_taint(taint: &Taint) -> String {
    struct T<'a>(&'a Taint);
    impl fmt::Display for T<'_> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self.0.value.as_deref() {
                Some(v) if !v.is_empty() => write!(f, "{}={}:{}", self.0.key, v, self.0.effect),
                _ => write!(f, "{}:{}", self.0.key, self.0.effect),
            }
        }
    }
    T(taint).to_string()
}

/// Whether `toleration` tolerates `taint`.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

/// `Ok` when every taint is tolerated by at least one toleration; otherwise the first untolerated taint.
pub fn tolerates_all<'a>(
    tolerations: &[Toleration],
    taints: impl IntoIterator<Item = &'a Taint>,
) -> Result<(), TaintError> {
    for taint in taints {
        if !tolerations.iter().any(|t| tolerates(t, taint)) {
            return Err(TaintError { taint: format_taint(taint) });
        }
    }
    Ok(())
}

/// Whether two taints have the same key and effect.
pub fn same_key_and_effect(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// `base` plus every taint of `with` whose (key, effect) is not already present (order kept).
pub fn merge(base: &[Taint], with: &[Taint]) -> Vec<Taint> {
    let mut out = base.to_vec();
    for t in with {
        if !out.iter().any(|o| same_key_and_effect(o, t)) {
            out.push(t.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration {
            key: opt(key),
            operator: opt(op),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    #[test]
    fn matching_rules() {
        let t = taint("dedicated", "gpu", "NoSchedule");
        assert!(tolerates(&tol("dedicated", "Equal", "gpu", "NoSchedule"), &t));
        assert!(tolerates(&tol("dedicated", "", "gpu", ""), &t), "empty operator is Equal, empty effect matches all");
        assert!(!tolerates(&tol("dedicated", "Equal", "cpu", "NoSchedule"), &t));
        assert!(!tolerates(&tol("dedicated", "Equal", "gpu", "NoExecute"), &t));
        assert!(tolerates(&tol("dedicated", "Exists", "", ""), &t));
        assert!(tolerates(&tol("", "Exists", "", ""), &t), "empty key with Exists matches everything");
        assert!(!tolerates(&tol("other", "Exists", "", ""), &t));
        assert!(!tolerates(&tol("dedicated", "Bogus", "gpu", ""), &t));
        assert!(tolerates(&tol("k", "Equal", "", ""), &taint("k", "", "NoSchedule")));
    }

    #[test]
    fn prefer_no_schedule_must_be_tolerated() {
        let taints = [taint("a", "", "NoSchedule"), taint("b", "x", "PreferNoSchedule")];
        let tols = [tol("a", "Exists", "", "")];
        let err = tolerates_all(&tols, &taints).unwrap_err();
        assert_eq!(err.to_string(), "did not tolerate taint b=x:PreferNoSchedule");
        let tols = [tol("a", "Exists", "", ""), tol("", "Exists", "", "PreferNoSchedule")];
        assert!(tolerates_all(&tols, &taints).is_ok());
        assert!(tolerates_all(&[], &[]).is_ok());
        assert_eq!(tolerates_all(&[], &[taint("a", "", "NoExecute")]).unwrap_err().taint, "a:NoExecute");
    }

    #[test]
    fn merge_adds_missing_key_effect_pairs_only() {
        let base = [taint("a", "1", "NoSchedule")];
        let with = [taint("a", "2", "NoSchedule"), taint("a", "1", "NoExecute"), taint("b", "", "NoSchedule")];
        let merged = merge(&base, &with);
        let got: Vec<String> = merged.iter().map(format_taint).collect();
        assert_eq!(got, vec!["a=1:NoSchedule", "a=1:NoExecute", "b:NoSchedule"]);
    }
}
