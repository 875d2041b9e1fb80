//! What happens to a NodePool's static drift when a cluster swaps upstream Karpenter for karpenter-rs and back
//! (docs/migration-from-upstream.md, "Drift across the swap"). The EC2NodeClass's half of these facts is
//! karpenter-aws's `tests/upstream_hashes.rs`.
//!
//! From upstream (kubernetes-sigs/karpenter): `v3` for `karpenter.sh/nodepool-hash-version`; upstream compares
//! hashes only when the owner's version equals the NodeClaim's, and re-annotates NodeClaims of another version
//! without drifting them. Our version (`rs1`) is none of upstream's, so each side sees a version mismatch.

use karpenter_api::hash::{NODE_POOL_HASH_VERSION, StaticDrift, node_pool_hash, node_pool_static_drift};
use karpenter_api::labels::annotations;
use karpenter_api::{NodeClaim, NodePool};
use serde_json::{Value, json};

/// Upstream's current NodePool hash version (pkg/apis/v1/nodepool.go `NodePoolHashVersion`) and every earlier one.
const UPSTREAM_NODE_POOL_VERSIONS: &[&str] = &["v1", "v2", "v3"];
const UPSTREAM_NODE_POOL_VERSION: &str = "v3";

#[test]
fn our_node_pool_hash_version_is_none_of_upstreams() {
    assert!(!UPSTREAM_NODE_POOL_VERSIONS.contains(&NODE_POOL_HASH_VERSION), "{NODE_POOL_HASH_VERSION}");
}

fn claim(annotations: &[(&str, &str)]) -> NodeClaim {
    let annotations: serde_json::Map<String, Value> =
        annotations.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-x", "labels": {"karpenter.sh/nodepool": "default"}, "annotations": annotations},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []
        }
    }))
    .expect("the claim decodes")
}

#[test]
fn node_pool_claims_from_upstream_are_a_version_mismatch_not_drift() {
    let mut pool: NodePool = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]
        }}}
    }))
    .expect("the pool decodes");
    let ours = node_pool_hash(&pool);
    pool.metadata.annotations = Some(
        [
            (annotations::NODE_POOL_HASH.to_owned(), ours.clone()),
            (annotations::NODE_POOL_HASH_VERSION.to_owned(), NODE_POOL_HASH_VERSION.to_owned()),
        ]
        .into(),
    );
    // Any upstream hash value at upstream's version: never compared with ours.
    let upstream_claim = claim(&[
        (annotations::NODE_POOL_HASH, "6043272443934853718"),
        (annotations::NODE_POOL_HASH_VERSION, UPSTREAM_NODE_POOL_VERSION),
    ]);
    assert_eq!(node_pool_static_drift(&pool, &upstream_claim), StaticDrift::VersionMismatch);
    let rewritten =
        claim(&[(annotations::NODE_POOL_HASH, &ours), (annotations::NODE_POOL_HASH_VERSION, NODE_POOL_HASH_VERSION)]);
    assert_eq!(node_pool_static_drift(&pool, &rewritten), StaticDrift::NotDrifted);
}
