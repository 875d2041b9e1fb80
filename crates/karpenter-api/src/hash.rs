//! Static drift hashes: the NodePool's, and the rules a provider's node-class hash follows (its own module, e.g.
//! the AWS provider's, computes the hash with [`hash_value`] and compares with [`annotated_static_drift`]).
//!
//! A hash covers the fields whose change should replace nodes. It is computed over a canonical
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

use crate::labels::annotations;

/// Hash version written beside `karpenter.sh/nodepool-hash`.
pub const NODE_POOL_HASH_VERSION: &str = "rs1";

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

/// Compares an owner's (NodePool or node class) hash annotations with a NodeClaim's.
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

/// The NodePool's static hash: its template minus `spec.requirements` (requirements drift dynamically by
/// comparing a NodeClaim's labels, not by hash). Behavioural fields (disruption, limits, weight, replicas) are
/// outside the template and never cause drift.
pub fn node_pool_hash(node_pool: &crate::NodePool) -> String {
    let mut template = serde_json::to_value(&node_pool.spec.template).unwrap_or(Value::Null);
    if let Some(spec) = template.get_mut("spec") {
        *spec = without_fields(spec.take(), &["requirements"]);
    }
    hash_value(&template)
}

/// Static drift of a NodeClaim against its NodePool, from the hash annotations both carry. The NodePool's
/// annotations are the ones the hash controller wrote; when they are absent, the current spec's hash is used.
pub fn node_pool_static_drift(node_pool: &crate::NodePool, claim: &crate::NodeClaim) -> StaticDrift {
    let keys = HashKeys {
        hash: annotations::NODE_POOL_HASH,
        version: annotations::NODE_POOL_HASH_VERSION,
        current_version: NODE_POOL_HASH_VERSION,
    };
    annotated_static_drift(&node_pool.metadata, || node_pool_hash(node_pool), &keys, claim)
}

/// The annotation keys of one hash and the version this build writes.
#[derive(Clone, Copy, Debug)]
pub struct HashKeys {
    /// The hash annotation (on the owner and on its NodeClaims).
    pub hash: &'static str,
    /// The annotation naming the hash scheme.
    pub version: &'static str,
    /// The scheme this build computes.
    pub current_version: &'static str,
}

/// Compares the hash annotations on an owner (falling back to `current_hash()` under this build's version when
/// the owner has none) with a NodeClaim's.
pub fn annotated_static_drift(
    owner: &kube::core::ObjectMeta,
    current_hash: impl FnOnce() -> String,
    keys: &HashKeys,
    claim: &crate::NodeClaim,
) -> StaticDrift {
    let get = |meta: &kube::core::ObjectMeta, key: &str| meta.annotations.as_ref()?.get(key).cloned();
    let (owner_hash, owner_version) = match get(owner, keys.hash) {
        Some(h) => (h, get(owner, keys.version)),
        None => (current_hash(), Some(keys.current_version.to_string())),
    };
    static_drift(
        Some(&owner_hash),
        owner_version.as_deref(),
        get(&claim.metadata, keys.hash).as_deref(),
        get(&claim.metadata, keys.version).as_deref(),
    )
}

#[cfg(test)]
mod node_pool_tests {
    use super::*;
    use crate::labels::annotations::NODE_POOL_HASH;
    use crate::{NodeClaim, NodePool};
    // The annotation key, not to be confused with this module's version value `NODE_POOL_HASH_VERSION`.
    const VERSION_KEY: &str = crate::labels::annotations::NODE_POOL_HASH_VERSION;

    const POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata:
      labels: {team: a}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
      taints:
        - {key: a, effect: NoSchedule}
        - {key: b, effect: NoExecute}
  limits: {cpu: "1000"}
"#;

    fn pool() -> NodePool {
        serde_saphyr::from_str(POOL).expect("fixture parses")
    }

    fn claim_with(hash: &str, version: &str) -> NodeClaim {
        let text = format!(
            r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-abc
  labels: {{karpenter.sh/nodepool: default}}
  annotations: {{"{NODE_POOL_HASH}": "{hash}", "{VERSION_KEY}": "{version}"}}
spec:
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  requirements: []
"#
        );
        serde_saphyr::from_str(&text).expect("claim parses")
    }

    #[test]
    fn template_fields_change_the_hash_and_behavioural_fields_do_not() {
        let base = node_pool_hash(&pool());
        let mut p = pool();
        p.spec.template.spec.taints.reverse();
        assert_eq!(node_pool_hash(&p), base, "taints are a set");
        p.spec.template.spec.requirements.clear();
        assert_eq!(node_pool_hash(&p), base, "requirements drift dynamically, not by hash");
        p.spec.limits.clear();
        p.spec.weight = Some(50);
        assert_eq!(node_pool_hash(&p), base, "behavioural fields never drift");
        p.spec.template.metadata.labels.insert("team".into(), "b".into());
        assert_ne!(node_pool_hash(&p), base, "labels drift");
        let mut q = pool();
        q.spec.template.spec.expire_after = "24h".parse().expect("valid");
        assert_ne!(node_pool_hash(&q), base, "expireAfter drifts");
        let mut r = pool();
        r.spec.template.spec.node_class_ref.name = "other".into();
        assert_ne!(node_pool_hash(&r), base, "nodeClassRef drifts");
    }

    #[test]
    fn claim_with_upstream_hash_version_is_not_drifted() {
        let p = pool();
        // Upstream v1.14.1 writes hash version v3 with a hash our function never produces.
        let upstream = claim_with("6043272443934853718", "v3");
        assert_eq!(node_pool_static_drift(&p, &upstream), StaticDrift::VersionMismatch);
        let ours_current = claim_with(&node_pool_hash(&p), NODE_POOL_HASH_VERSION);
        assert_eq!(node_pool_static_drift(&p, &ours_current), StaticDrift::NotDrifted);
        let ours_stale = claim_with("1", NODE_POOL_HASH_VERSION);
        assert_eq!(node_pool_static_drift(&p, &ours_stale), StaticDrift::Drifted);
    }

    #[test]
    fn hash_annotations_carry_our_version_value() {
        let [(hash_key, hash), (version_key, version)] = node_pool_hash_annotations(&pool());
        assert_eq!(hash_key, NODE_POOL_HASH);
        assert_eq!(hash, node_pool_hash(&pool()));
        assert_eq!(version_key, "karpenter.sh/nodepool-hash-version");
        assert_eq!(version, "rs1");
        // A NodeClaim stamped from these annotations is current, and one from upstream is a version mismatch.
        let stamped = claim_with(&hash, &version);
        assert_eq!(node_pool_static_drift(&pool(), &stamped), StaticDrift::NotDrifted);
        assert_eq!(node_pool_static_drift(&pool(), &claim_with(&hash, "v3")), StaticDrift::VersionMismatch);
    }
}

/// The hash annotations the NodePool hash controller writes on a NodePool, and copies to a NodeClaim at
/// creation or when [`StaticDrift::VersionMismatch`] asks for a rewrite.
pub fn node_pool_hash_annotations(node_pool: &crate::NodePool) -> [(&'static str, String); 2] {
    [
        (annotations::NODE_POOL_HASH, node_pool_hash(node_pool)),
        (annotations::NODE_POOL_HASH_VERSION, NODE_POOL_HASH_VERSION.to_string()),
    ]
}
