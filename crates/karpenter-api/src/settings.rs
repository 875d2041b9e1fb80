//! The syntax the controller's settings share, whichever crate defines them: the core settings (the operator),
//! a provider's own settings (karpenter-aws) and the binary that composes both. Each setting is an environment
//! variable with upstream Karpenter's name, so its errors name that variable.

use std::collections::BTreeMap;
use std::time::Duration;

use karpenter_requirements::{Quantity, ResourceList};

use crate::duration::parse_go_duration;
use crate::nodepool::NODES_LIMIT;
use crate::validation::qualified_name_errors;

/// A setting that cannot be used, named by its environment variable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("{setting}: {message}")]
    /// The value of `setting` is not usable.
    Invalid {
        /// The environment variable (and flag) name, e.g. `BATCH_MAX_DURATION`.
        setting: &'static str,
        /// What is wrong with the value.
        message: String,
    },
}

impl SettingsError {
    /// The error for `setting` (its environment variable) with what is wrong with its value.
    pub fn invalid(setting: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid { setting, message: message.into() }
    }
}

/// The words that start the help of a setting in [`COMPATIBILITY_ONLY`].
pub const COMPATIBILITY_NOTE: &str = "Accepted for compatibility, no effect";

/// Settings accepted so that upstream's values files and environments start unchanged, but that have no effect in
/// this build: (environment variable, why). The one list: each listed setting's help, in `run --help` and
/// docs/settings.md, is [`compatibility_help`]'s, and the binary's settings-reference test pins both ways (every
/// listed setting says so, no other does).
pub const COMPATIBILITY_ONLY: &[(&str, &str)] = &[(
    "MEMORY_LIMIT",
    "upstream sets Go's garbage-collector soft limit to 90 % of it; Rust has no garbage collector (memory is \
     freed when its owner is dropped, and jemalloc returns freed pages to the system), so there is no limit to set",
)];

/// The help of the setting `env`: `help`, then, when it is in [`COMPATIBILITY_ONLY`], the note and why.
pub fn compatibility_help(env: &str, help: &str) -> String {
    match COMPATIBILITY_ONLY.iter().find(|(name, _)| *name == env) {
        Some((_, why)) => format!("{help}. {COMPATIBILITY_NOTE}: {why}"),
        None => help.to_owned(),
    }
}

/// A duration setting in Go syntax (`10s`, `1m30s`), with an error that shows the accepted form.
pub fn parse_duration_setting(s: &str) -> Result<Duration, String> {
    parse_go_duration(s).map_err(|e| format!("{s:?} is not a duration such as 10s or 1m30s: {e}"))
}

/// A boolean setting as Go's `strconv.ParseBool` reads it, which upstream's settings use: `1`, `t`, `T`, `TRUE`,
/// `true`, `True` and `0`, `f`, `F`, `FALSE`, `false`, `False`. Anything else (`yes`, `on`, an empty value) is an
/// error that lists the accepted forms.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(format!(
            "{other:?} is not a boolean; use true or false (or 1, t, T, TRUE, True, 0, f, F, FALSE, False)"
        )),
    }
}

/// Parses a feature-gate list, `Name=bool,Name=bool` (`FEATURE_GATES`, `AWS_FEATURE_GATES`). Whitespace around
/// entries is allowed and empty entries are skipped; a malformed entry is an error. Values are Go booleans
/// ([`parse_go_bool`]), as upstream's feature-gate parsing reads them. Which names are
/// known is the caller's business (upstream ignores unknown gates, so a newer values file still starts).
pub fn parse_feature_gates(s: &str) -> Result<BTreeMap<String, bool>, String> {
    let mut gates = BTreeMap::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(format!("feature gate {entry:?} must have the form Name=true or Name=false"));
        };
        let value = parse_go_bool(value.trim()).map_err(|e| format!("feature gate {}: {e}", name.trim()))?;
        gates.insert(name.trim().to_string(), value);
    }
    Ok(gates)
}

/// Parses cluster-wide limits (`CLUSTER_LIMITS`): `resource=quantity` pairs separated by commas, such as
/// `cpu=2000,memory=8Ti,nodes=300`. Whitespace around pairs, names and quantities is allowed. The empty string
/// (or only whitespace) means no cluster limit. Accepted names are the ones a NodePool's `spec.limits` can count
/// against capacity: `cpu`, `memory`, `ephemeral-storage`, `pods`, `nodes` (one per node), `hugepages-<size>`,
/// and any domain-prefixed extended resource (`nvidia.com/gpu`). An unknown unprefixed name (a typo such as
/// `cpus` would otherwise limit nothing), a quantity that does not parse, a negative value, a name given twice or
/// an empty pair is an error naming the entry.
pub fn parse_cluster_limits(s: &str) -> Result<ResourceList, String> {
    let mut limits = ResourceList::new();
    if s.trim().is_empty() {
        return Ok(limits);
    }
    for (i, raw) in s.split(',').enumerate() {
        let entry = raw.trim();
        let at = || format!("entry {} ({entry:?})", i + 1);
        if entry.is_empty() {
            return Err(format!("entry {} is empty: use resource=quantity pairs separated by commas", i + 1));
        }
        let Some((name, value)) = entry.split_once('=') else {
            return Err(format!("{} must have the form resource=quantity, such as cpu=2000", at()));
        };
        let (name, value) = (name.trim(), value.trim());
        if let Err(why) = cluster_limit_name(name) {
            return Err(format!("{}: {why}", at()));
        }
        let quantity: Quantity = value
            .parse()
            .map_err(|e| format!("{}: {value:?} is not a quantity such as 2000, 500m or 8Ti: {e}", at()))?;
        if quantity.is_negative() {
            return Err(format!("{}: a limit cannot be negative", at()));
        }
        if limits.get(name).is_some() {
            return Err(format!("{}: {name} is given more than once", at()));
        }
        limits.insert(name, quantity);
    }
    Ok(limits)
}

/// Whether `name` is a resource a cluster limit may name (see [`parse_cluster_limits`]).
fn cluster_limit_name(name: &str) -> Result<(), String> {
    const STANDARD: [&str; 5] = ["cpu", "memory", "ephemeral-storage", "pods", NODES_LIMIT];
    if name.is_empty() {
        return Err("the resource name is empty".to_owned());
    }
    if STANDARD.contains(&name) {
        return Ok(());
    }
    if let Some(size) = name.strip_prefix("hugepages-") {
        return match size.parse::<Quantity>() {
            Ok(q) if !q.is_negative() && !q.is_zero() => Ok(()),
            _ => Err(format!("{name} is not a huge page size such as hugepages-2Mi")),
        };
    }
    if name.contains('/') {
        let errors = qualified_name_errors(name);
        return if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("{name} is not a valid extended resource name: {}", errors.join("; ")))
        };
    }
    Err(format!(
        "unknown resource {name:?}: use cpu, memory, ephemeral-storage, pods, nodes, hugepages-<size> or a \
         domain-prefixed extended resource such as nvidia.com/gpu"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_booleans_are_parse_bool_spellings() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(t), Ok(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(f), Ok(false), "{f}");
        }
        for bad in ["", "yes", "on", "tRUE", " true", "2"] {
            assert!(parse_go_bool(bad).unwrap_err().contains("is not a boolean"), "{bad:?}");
        }
    }

    #[test]
    fn gate_lists() {
        let gates = parse_feature_gates(" A=true, ,B=False ").unwrap();
        assert_eq!(gates, BTreeMap::from([("A".to_owned(), true), ("B".to_owned(), false)]));
        assert!(parse_feature_gates("").unwrap().is_empty());
        assert!(parse_feature_gates("A").unwrap_err().contains("must have the form Name=true"));
        assert!(parse_feature_gates("A=yes").unwrap_err().contains("\"yes\" is not a boolean"));
        assert_eq!(parse_feature_gates("A=1,B=f").unwrap(), BTreeMap::from([("A".into(), true), ("B".into(), false)]));
    }

    #[test]
    fn durations_and_errors() {
        assert_eq!(parse_duration_setting("1m30s").unwrap(), Duration::from_secs(90));
        assert!(parse_duration_setting("10").unwrap_err().contains("is not a duration"));
        assert_eq!(SettingsError::invalid("X", "bad").to_string(), "X: bad");
    }

    #[test]
    fn cluster_limits_parse() {
        let l = parse_cluster_limits(" cpu=2000, memory = 8Ti,nodes=300 ,nvidia.com/gpu=8,hugepages-2Mi=1Gi").unwrap();
        assert_eq!(l.get("cpu").map(ToString::to_string).as_deref(), Some("2k"));
        assert_eq!(l.get_or_zero("cpu").value(), Some(2000));
        assert_eq!(l.get("memory").map(ToString::to_string).as_deref(), Some("8Ti"));
        assert_eq!(l.get_or_zero("nodes").value(), Some(300));
        assert_eq!(l.get_or_zero("nvidia.com/gpu").value(), Some(8));
        assert_eq!(l.get_or_zero("hugepages-2Mi").value(), Some(1 << 30));
        assert_eq!(l.len(), 5);
        assert!(parse_cluster_limits("").unwrap().is_empty());
        assert!(parse_cluster_limits("  ").unwrap().is_empty());
        assert_eq!(parse_cluster_limits("cpu=0").unwrap().get_or_zero("cpu").value(), Some(0));
    }

    #[test]
    fn cluster_limit_errors_name_the_entry() {
        let err = |s: &str| parse_cluster_limits(s).unwrap_err();
        assert_eq!(
            err("cpu=1,cpus=2"),
            "entry 2 (\"cpus=2\"): unknown resource \"cpus\": use cpu, memory, ephemeral-storage, pods, nodes, \
             hugepages-<size> or a domain-prefixed extended resource such as nvidia.com/gpu"
        );
        assert!(
            err("cpu=lots").starts_with("entry 1 (\"cpu=lots\"): \"lots\" is not a quantity"),
            "{}",
            err("cpu=lots")
        );
        assert_eq!(err("memory=-1Gi"), "entry 1 (\"memory=-1Gi\"): a limit cannot be negative");
        assert_eq!(err("cpu=1,cpu=2"), "entry 2 (\"cpu=2\"): cpu is given more than once");
        assert_eq!(err("cpu=1,,nodes=2"), "entry 2 is empty: use resource=quantity pairs separated by commas");
        assert_eq!(err("cpu=1,"), "entry 2 is empty: use resource=quantity pairs separated by commas");
        assert!(err("cpu").contains("must have the form resource=quantity"));
        assert!(err("=5").contains("the resource name is empty"));
        assert!(err("cpu=").contains("is not a quantity"));
        assert!(err("Example.com/gpu=1").contains("not a valid extended resource name"));
        assert!(err("hugepages-x=1").contains("not a huge page size"));
    }

    proptest::proptest! {
        /// Any input either parses into limits that are all named, non-negative and print back into an input
        /// that parses to the same limits, or fails with a message naming an entry; it never panics.
        #[test]
        fn cluster_limits_never_panic(s in "[ a-z0-9=,./\\-GMTKimn]{0,40}") {
            match parse_cluster_limits(&s) {
                Ok(l) => {
                    let text: Vec<String> = l.iter().map(|(k, q)| format!("{k}={q}")).collect();
                    let again = parse_cluster_limits(&text.join(",")).unwrap();
                    proptest::prop_assert_eq!(&again, &l);
                    proptest::prop_assert!(l.iter().all(|(_, q)| !q.is_negative()));
                }
                Err(e) => proptest::prop_assert!(e.starts_with("entry "), "{}", e),
            }
        }

        /// Well-formed lists of known names and non-negative integers always parse, in any order.
        #[test]
        fn well_formed_cluster_limits_parse(
            values in proptest::collection::vec(0i64..1_000_000, 1..5),
            names in proptest::sample::subsequence(vec!["cpu", "memory", "pods", "nodes", "example.com/gpu"], 1..5),
        ) {
            let pairs: Vec<String> = names.iter().zip(&values).map(|(n, v)| format!("{n}={v}")).collect();
            let l = parse_cluster_limits(&pairs.join(",")).unwrap();
            proptest::prop_assert_eq!(l.len(), pairs.len());
            for (n, v) in names.iter().zip(&values) {
                proptest::prop_assert_eq!(l.get_or_zero(n).value(), Some(*v));
            }
        }
    }
}
