//! The syntax the controller's settings share, whichever crate defines them: the core settings (the operator),
//! a provider's own settings (karpenter-aws) and the binary that composes both. Each setting is an environment
//! variable with upstream Karpenter's name, so its errors name that variable.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::duration::parse_go_duration;

/// A setting that cannot be used, named by its environment variable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("{setting}: {message}")]
    Invalid { setting: &'static str, message: String },
}

impl SettingsError {
    /// The error for `setting` (its environment variable) with what is wrong with its value.
    pub fn invalid(setting: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid { setting, message: message.into() }
    }
}

/// A duration setting in Go syntax (`10s`, `1m30s`), with an error that shows the accepted form.
pub fn parse_duration_setting(s: &str) -> Result<Duration, String> {
    parse_go_duration(s).map_err(|e| format!("{s:?} is not a duration such as 10s or 1m30s: {e}"))
}

/// Parses a feature-gate list, `Name=bool,Name=bool` (`FEATURE_GATES`, `AWS_FEATURE_GATES`). Whitespace around
/// entries is allowed and empty entries are skipped; a malformed entry is an error. Go's boolean spellings
/// `true`/`True`/`TRUE` and their false forms are accepted, as upstream's flag parsing does. Which names are
/// known is the caller's business (upstream ignores unknown gates, so a newer values file still starts).
pub fn parse_feature_gates(s: &str) -> Result<BTreeMap<String, bool>, String> {
    let mut gates = BTreeMap::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(format!("feature gate {entry:?} must have the form Name=true or Name=false"));
        };
        let value = match value.trim() {
            "true" | "True" | "TRUE" => true,
            "false" | "False" | "FALSE" => false,
            other => return Err(format!("feature gate {}: {other:?} is not true or false", name.trim())),
        };
        gates.insert(name.trim().to_string(), value);
    }
    Ok(gates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_lists() {
        let gates = parse_feature_gates(" A=true, ,B=False ").unwrap();
        assert_eq!(gates, BTreeMap::from([("A".to_owned(), true), ("B".to_owned(), false)]));
        assert!(parse_feature_gates("").unwrap().is_empty());
        assert!(parse_feature_gates("A").unwrap_err().contains("must have the form Name=true"));
        assert!(parse_feature_gates("A=yes").unwrap_err().contains("\"yes\" is not true or false"));
    }

    #[test]
    fn durations_and_errors() {
        assert_eq!(parse_duration_setting("1m30s").unwrap(), Duration::from_secs(90));
        assert!(parse_duration_setting("10").unwrap_err().contains("is not a duration"));
        assert_eq!(SettingsError::invalid("X", "bad").to_string(), "X: bad");
    }
}
