//! Validation results shared by every kind: a violation names the field path and the reason.
//!
//! Paths use the API server's notation (`spec.template.spec.requirements[2].values[0]`,
//! `spec.tags[kubernetes.io/cluster/x]`), so a user can find the field in the manifest.

use std::fmt;

use crate::labels::ProviderLabels;

/// One broken rule on one field.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// Field path from the object root, e.g. `spec.disruption.budgets[1]`.
    pub path: String,
    /// What is wrong, in words a user can act on.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Collects violations while a validator walks an object.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Violations(Vec<Violation>);

impl Violations {
    /// No violations.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the field at `path` breaks a rule.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Violation { path: path.into(), message: message.into() });
    }

    /// Appends `other`'s violations.
    pub fn extend(&mut self, other: Violations) {
        self.0.extend(other.0);
    }

    /// Whether nothing is wrong.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many violations there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The violations in the order found.
    pub fn iter(&self) -> impl Iterator<Item = &Violation> {
        self.0.iter()
    }

    /// The violations, owned.
    pub fn into_vec(self) -> Vec<Violation> {
        self.0
    }

    /// True if some violation's path equals `path` (test helper, also handy for callers).
    pub fn has_path(&self, path: &str) -> bool {
        self.0.iter().any(|v| v.path == path)
    }
}

impl IntoIterator for Violations {
    type Item = Violation;
    type IntoIter = std::vec::IntoIter<Violation>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// What validation needs to know beyond the object itself.
///
/// The provider's well-known labels and restricted domains are a value, never a global: callers pass their
/// provider's set (`karpenter_aws::labels::provider_labels()`, ...). `Default` knows no provider: the core
/// well-known keys and the `karpenter.sh` restricted domain only, which is all validation needs for objects
/// whose rules name no label key (a CapacityBuffer, say).
#[derive(Clone, Debug)]
pub struct ValidationContext {
    /// The provider's well-known labels and restricted domains, which decide which label keys a manifest may use.
    pub provider: ProviderLabels,
}

impl ValidationContext {
    /// Validation with `provider`'s labels.
    pub fn new(provider: ProviderLabels) -> Self {
        Self { provider }
    }
}

impl Default for ValidationContext {
    /// No provider's labels: [`ProviderLabels::core_only`], named `core`.
    fn default() -> Self {
        Self::new(ProviderLabels::core_only("core"))
    }
}

/// Validation the API server (schema + CEL) plus upstream's runtime validation would apply.
pub trait Validate {
    /// Returns every violation, not just the first.
    fn validate(&self, ctx: &ValidationContext) -> Violations;
}

/// Appends `[index]` to a path.
pub fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Appends `.field` to a path.
pub fn field(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}.{name}") }
}

/// Appends `[key]` (a map key) to a path.
pub fn key(path: &str, k: &str) -> String {
    format!("{path}[{k}]")
}

/// Maximum length of a qualified name's name part and of a label value.
pub const MAX_NAME_LEN: usize = 63;
/// Maximum length of a DNS-1123 subdomain (a qualified name's prefix).
pub const MAX_DNS1123_SUBDOMAIN_LEN: usize = 253;

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: non-empty, alphanumeric at both ends, `-_.` inside.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// DNS-1123 label: lowercase alphanumerics and `-`, alphanumeric at both ends.
fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            (f.is_ascii_lowercase() || f.is_ascii_digit())
                && (l.is_ascii_lowercase() || l.is_ascii_digit())
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        }
        _ => false,
    }
}

/// Errors of a DNS-1123 subdomain (`example.com`), empty if valid.
pub fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > MAX_DNS1123_SUBDOMAIN_LEN {
        errs.push(format!("must be no more than {MAX_DNS1123_SUBDOMAIN_LEN} characters"));
    }
    if !s.split('.').all(is_dns1123_label) {
        errs.push(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".to_string(),
        );
    }
    errs
}

/// Kubernetes qualified-name rules for label keys (and taint keys): an optional DNS-1123 subdomain prefix of at
/// most 253 characters followed by `/`, then a name of at most 63 characters matching
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`. Returns every problem, empty if valid.
pub fn qualified_name_errors(s: &str) -> Vec<String> {
    const NAME_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(dns1123_subdomain_errors(prefix).into_iter().map(|e| format!("prefix part {e}")));
            }
            *name
        }
        _ => {
            errs.push(
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_string(),
            );
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else {
        if name.len() > MAX_NAME_LEN {
            errs.push(format!("name part must be no more than {MAX_NAME_LEN} characters"));
        }
        if !is_name_part(name) {
            errs.push(NAME_MSG.to_string());
        }
    }
    errs
}

/// Kubernetes label-value rules: empty, or at most 63 characters matching
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`. Returns every problem, empty if valid.
pub fn label_value_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > MAX_NAME_LEN {
        errs.push(format!("must be no more than {MAX_NAME_LEN} characters"));
    }
    if !s.is_empty() && !is_name_part(s) {
        errs.push("a valid label value must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".to_string());
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names() {
        for ok in ["a", "example.com/team", "kubernetes.io/arch", "A_b.c-d", "x/y"] {
            assert!(qualified_name_errors(ok).is_empty(), "{ok}: {:?}", qualified_name_errors(ok));
        }
        for bad in
            ["", "/a", "a/", "a/b/c", "Example.com/a", "-a", "a-", &"a".repeat(64), &format!("{}/a", "b".repeat(254))]
        {
            assert!(!qualified_name_errors(bad).is_empty(), "{bad} should be invalid");
        }
    }

    #[test]
    fn label_values() {
        for ok in ["", "a", "on-demand", "m5.large", "A_1"] {
            assert!(label_value_errors(ok).is_empty(), "{ok}");
        }
        for bad in ["-a", "a b", "a/b", &"a".repeat(64)] {
            assert!(!label_value_errors(bad).is_empty(), "{bad}");
        }
    }
}
