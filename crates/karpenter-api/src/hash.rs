//! Static drift hashes for NodePools and EC2NodeClasses.
//!
//! A hash covers the fields whose change should replace nodes (api.md §6). It is computed over a canonical
//! JSON rendering of those fields: object keys sorted, every list treated as a set (order does not matter),
//! and absent, `null`, empty-string, empty-list and empty-map values dropped (so `labels: {}` and no labels hash
//! alike). The digest is 64-bit FNV-1a, printed in decimal: stable across Rust releases and platforms, unlike
//! `std::hash`.
//!
//! Hash versions are our own (`rs1`), never upstream's. When a cluster swaps upstream's image for ours, the
//! NodeClaims carry upstream's versions (`v3`, `v5`, ...): versions differ, so [`static_drift`] answers
//! [`StaticDrift::VersionMismatch`] and the controller rewrites the NodeClaim's annotations instead of
//! drifting every node.

use serde_json::{Map, Value};

/// Hash version written beside `karpenter.sh/nodepool-hash`.
pub const NODE_POOL_HASH_VERSION: &str = "rs1";
/// Hash version written beside `karpenter.k8s.aws/ec2nodeclass-hash`.
pub const EC2_NODE_CLASS_HASH_VERSION: &str = "rs1";

/// Canonical form of a JSON value for hashing (see the module docs). Returns `None` for a dropped value.
pub fn canonicalize(value: &Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::Array(items) => {
            let mut kept: Vec<(String, Value)> =
                items.iter().filter_map(canonicalize).map(|v| (v.to_string(), v)).collect();
            if kept.is_empty() {
                return None;
            }
            // Set semantics: order by the canonical text so permutations hash alike.
            kept.sort_by(|a, b| a.0.cmp(&b.0));
            kept.dedup_by(|a, b| a.0 == b.0);
            Some(Value::Array(kept.into_iter().map(|(_, v)| v).collect()))
        }
        Value::Object(fields) => {
            let mut out = Map::new();
            for (k, v) in fields {
                if let Some(v) = canonicalize(v) {
                    out.insert(k.clone(), v);
                }
            }
            if out.is_empty() { None } else { Some(Value::Object(out)) }
        }
        other => Some(other.clone()),
    }
}

/// 64-bit FNV-1a.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Hash of a JSON value's canonical form, as the decimal string stored in annotations.
pub fn hash_value(value: &Value) -> String {
    // serde_json's Map is ordered by key (no `preserve_order` feature), so `to_string` is canonical.
    let text = canonicalize(value).map(|v| v.to_string()).unwrap_or_default();
    fnv1a64(text.as_bytes()).to_string()
}

/// Removes the named top-level fields from a JSON object.
pub fn without_fields(mut value: Value, fields: &[&str]) -> Value {
    if let Value::Object(map) = &mut value {
        for f in fields {
            map.remove(*f);
        }
    }
    value
}

/// The static-drift verdict from a pair of hash annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StaticDrift {
    /// Same version, different hash: the owner's spec changed since the NodeClaim was made.
    Drifted,
    /// Same version, same hash.
    NotDrifted,
    /// Versions differ (e.g. a NodeClaim made by upstream Karpenter or an older release): never drifted; the
    /// controller rewrites the NodeClaim's hash and version annotations to the owner's current values.
    VersionMismatch,
    /// An annotation is missing on either side: no verdict (not drifted).
    Unknown,
}

/// Compares an owner's (NodePool or EC2NodeClass) hash annotations with a NodeClaim's.
pub fn static_drift(
    owner_hash: Option<&str>,
    owner_version: Option<&str>,
    claim_hash: Option<&str>,
    claim_version: Option<&str>,
) -> StaticDrift {
    match (owner_hash, owner_version, claim_hash, claim_version) {
        (Some(oh), Some(ov), Some(ch), Some(cv)) => {
            if ov != cv {
                StaticDrift::VersionMismatch
            } else if oh != ch {
                StaticDrift::Drifted
            } else {
                StaticDrift::NotDrifted
            }
        }
        _ => StaticDrift::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_are_sets_and_empties_are_dropped() {
        let a = json!({"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}],
                       "labels": {}, "annotations": null, "x": ""});
        let b = json!({"taints": [{"effect": "NoExecute", "key": "b"}, {"key": "a", "effect": "NoSchedule"}]});
        assert_eq!(hash_value(&a), hash_value(&b));
        let c = json!({"taints": [{"key": "a", "effect": "NoSchedule"}]});
        assert_ne!(hash_value(&a), hash_value(&c));
    }

    #[test]
    fn fnv_is_stable() {
        // Reference values of 64-bit FNV-1a.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn drift_verdicts() {
        use StaticDrift::*;
        assert_eq!(static_drift(Some("1"), Some("rs1"), Some("2"), Some("rs1")), Drifted);
        assert_eq!(static_drift(Some("1"), Some("rs1"), Some("1"), Some("rs1")), NotDrifted);
        // A NodeClaim made by upstream Karpenter (hash version v3) is never drifted by our hash.
        assert_eq!(static_drift(Some("1"), Some("rs1"), Some("123456"), Some("v3")), VersionMismatch);
        assert_eq!(static_drift(Some("1"), Some("rs1"), None, None), Unknown);
    }
}
