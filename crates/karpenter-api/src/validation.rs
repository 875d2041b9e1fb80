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
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that the field at `path` breaks a rule.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Violation { path: path.into(), message: message.into() });
    }

    pub fn extend(&mut self, other: Violations) {
        self.0.extend(other.0);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Violation> {
        self.0.iter()
    }

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
/// The provider's well-known labels and restricted domains are a value, never a global: the AWS set is
/// the default because upstream's AWS CRDs carry its restricted-domain rule.
#[derive(Clone, Debug)]
pub struct ValidationContext {
    pub provider: ProviderLabels,
}

impl Default for ValidationContext {
    fn default() -> Self {
        Self { provider: ProviderLabels::aws() }
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
