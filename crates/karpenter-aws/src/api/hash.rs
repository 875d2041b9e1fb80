//! The EC2NodeClass's static drift hash, by the core's hashing rules ([`karpenter_api::hash`]), and the annotations
//! that carry it on the class and on the NodeClaims launched from it.

use std::collections::BTreeMap;

use crate::labels::annotations;
use karpenter_api::NodeClaim;
use karpenter_api::hash;

use super::EC2NodeClass;

/// Hash version written beside `karpenter.k8s.aws/ec2nodeclass-hash`.
pub const EC2_NODE_CLASS_HASH_VERSION: &str = "rs1";

/// The EC2NodeClass's static hash: its spec minus the selector terms (they drift dynamically against the
/// resolved status), `ipPrefixCount` and the raw `amiFamily`, plus the resolved AMI family and the cluster CA
/// bundle when the controller knows it.
pub fn ec2_node_class_hash(node_class: &EC2NodeClass, ca_bundle: Option<&str>) -> String {
    hash::hash_value(&node_class.spec.drift_hash_input(ca_bundle))
}

/// Static drift of a NodeClaim against its EC2NodeClass, from the hash annotations both carry (the class's
/// current hash when its annotations are absent).
pub fn ec2_node_class_static_drift(node_class: &EC2NodeClass, claim: &NodeClaim) -> hash::StaticDrift {
    let keys = hash::HashKeys {
        hash: annotations::EC2_NODE_CLASS_HASH,
        version: annotations::EC2_NODE_CLASS_HASH_VERSION,
        current_version: EC2_NODE_CLASS_HASH_VERSION,
    };
    hash::annotated_static_drift(&node_class.metadata, || ec2_node_class_hash(node_class, None), &keys, claim)
}

/// The hash annotations of a node class: `karpenter.k8s.aws/ec2nodeclass-hash` and its version.
pub fn hash_annotations(node_class: &EC2NodeClass, ca_bundle: Option<&str>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (annotations::EC2_NODE_CLASS_HASH.to_string(), ec2_node_class_hash(node_class, ca_bundle)),
        (annotations::EC2_NODE_CLASS_HASH_VERSION.to_string(), EC2_NODE_CLASS_HASH_VERSION.to_string()),
    ])
}

/// The hash annotations a NodeClaim launched from `node_class` must carry: **copied from the node class** (the
/// controller computed them, with the cluster CA bundle), or, before the controller annotated the class, its
/// hash without the CA under this build's version. Never recompute the hash with other inputs for a NodeClaim:
/// a different CA input would drift every node.
pub fn claim_hash_annotations(node_class: &EC2NodeClass) -> BTreeMap<String, String> {
    let current = node_class.metadata.annotations.clone().unwrap_or_default();
    match (current.get(annotations::EC2_NODE_CLASS_HASH), current.get(annotations::EC2_NODE_CLASS_HASH_VERSION)) {
        (Some(hash), Some(version)) => BTreeMap::from([
            (annotations::EC2_NODE_CLASS_HASH.to_string(), hash.clone()),
            (annotations::EC2_NODE_CLASS_HASH_VERSION.to_string(), version.clone()),
        ]),
        _ => hash_annotations(node_class, None),
    }
}

#[cfg(test)]
mod tests {
    use crate::labels::annotations::EC2_NODE_CLASS_HASH;
    use karpenter_api::hash::StaticDrift;

    use super::*;
    const VERSION_KEY: &str = crate::labels::annotations::EC2_NODE_CLASS_HASH_VERSION;

    fn class(extra: &str) -> EC2NodeClass {
        let text = format!(
            r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: c}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: c}}}}]
{extra}"#
        );
        serde_saphyr::from_str(&text).expect("fixture parses")
    }

    #[test]
    fn selectors_do_not_change_the_hash_and_static_fields_do() {
        let base = ec2_node_class_hash(&class(""), None);
        let mut c = class("");
        c.spec.subnet_selector_terms.clear();
        c.spec.security_group_selector_terms.clear();
        assert_eq!(ec2_node_class_hash(&c, None), base, "selector terms drift dynamically");
        assert_ne!(ec2_node_class_hash(&class("  tags: {team: a}\n"), None), base, "tags drift");
        assert_ne!(ec2_node_class_hash(&class("  detailedMonitoring: true\n"), None), base);
        let enabled = ec2_node_class_hash(&class("  enclaveOptions: {enabled: true}\n"), None);
        let disabled = ec2_node_class_hash(&class("  enclaveOptions: {enabled: false}\n"), None);
        assert!(enabled != base && disabled != base && enabled != disabled, "enclave options drift");
        assert_ne!(ec2_node_class_hash(&class(""), Some("CA")), base, "the CA bundle is hashed");
        assert_eq!(
            ec2_node_class_hash(&class("  amiFamily: AL2023\n"), None),
            base,
            "the raw amiFamily is not hashed, only the resolved family"
        );
    }

    #[test]
    fn int_max_pods_hashes_as_before_the_int_or_string_change() {
        // Pinned from the release where maxPods was a plain int32: an unchanged class must not drift (so our
        // hash version stays; upstream bumped theirs to v6 for the type change).
        let c = class("  kubelet: {maxPods: 20, kubeReserved: {cpu: 100m}}\n");
        assert_eq!(ec2_node_class_hash(&c, None), "7760762043758552607");
        let expr = class("  kubelet: {maxPods: \"20\", kubeReserved: {cpu: 100m}}\n");
        assert_ne!(ec2_node_class_hash(&expr, None), ec2_node_class_hash(&c, None), "an expression is hashed");
    }

    #[test]
    fn open_kubelet_map_hashes_v1_14_fields_as_before_and_every_other_field() {
        // The same pinned value as above: opening the map (v1.15) changes nothing for a v1.14-only class.
        let c = class("  kubelet: {kubeReserved: {cpu: 100m}, maxPods: 20}\n");
        assert!(c.spec.kubelet.as_ref().unwrap().other.is_empty());
        assert_eq!(ec2_node_class_hash(&c, None), "7760762043758552607");
        // A passed-through field drifts, and so does a malformed value (kept raw).
        let passthrough = class("  kubelet: {maxPods: 20, kubeReserved: {cpu: 100m}, serializeImagePulls: false}\n");
        let flipped = class("  kubelet: {maxPods: 20, kubeReserved: {cpu: 100m}, serializeImagePulls: true}\n");
        let malformed = class("  kubelet: {maxPods: 20, kubeReserved: {cpu: 100m}, podsPerCore: x}\n");
        let hashes = [&c, &passthrough, &flipped, &malformed].map(|n| ec2_node_class_hash(n, None));
        let distinct: std::collections::BTreeSet<_> = hashes.iter().collect();
        assert_eq!(distinct.len(), 4, "{hashes:?}");
    }

    #[test]
    fn claim_with_upstream_hash_version_is_not_drifted() {
        let c = class("");
        let claim: NodeClaim = serde_saphyr::from_str(&format!(
            r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-abc
  annotations: {{"{EC2_NODE_CLASS_HASH}": "123", "{VERSION_KEY}": "v5"}}
spec:
  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  requirements: []
"#
        ))
        .expect("claim parses");
        assert_eq!(ec2_node_class_static_drift(&c, &claim), StaticDrift::VersionMismatch);
    }
}
