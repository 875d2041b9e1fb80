//! The few label keys the algebra itself needs (the full well-known tables live in `karpenter-api`).

/// `topology.kubernetes.io/zone`.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// `topology.kubernetes.io/region`.
pub const REGION: &str = "topology.kubernetes.io/region";
/// `node.kubernetes.io/instance-type`.
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
/// `kubernetes.io/arch`.
pub const ARCH: &str = "kubernetes.io/arch";
/// `kubernetes.io/os`.
pub const OS: &str = "kubernetes.io/os";
/// `kubernetes.io/hostname`.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// `karpenter.sh/capacity-type`.
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// `karpenter.sh/nodepool`.
pub const NODE_POOL: &str = "karpenter.sh/nodepool";
/// The reservation-id label of offerings backed by a capacity reservation (the AWS provider's key).
pub const RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";

/// Capacity type `on-demand`.
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Capacity type `spot`.
pub const CAPACITY_TYPE_SPOT: &str = "spot";
/// Capacity type `reserved`.
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

/// Deprecated label keys and the key each is normalised to on input.
pub const LABEL_ALIASES: [(&str, &str); 5] = [
    ("failure-domain.beta.kubernetes.io/zone", ZONE),
    ("failure-domain.beta.kubernetes.io/region", REGION),
    ("beta.kubernetes.io/arch", ARCH),
    ("beta.kubernetes.io/os", OS),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE),
];

/// The key with aliases replaced by the key they stand for.
pub fn normalize_key(key: &str) -> &str {
    LABEL_ALIASES.iter().find(|(alias, _)| crate::fastcmp::eq(alias, key)).map_or(key, |(_, to)| *to)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_normalise() {
        assert_eq!(normalize_key("failure-domain.beta.kubernetes.io/zone"), ZONE);
        assert_eq!(normalize_key("beta.kubernetes.io/instance-type"), INSTANCE_TYPE);
        assert_eq!(normalize_key("example.com/team"), "example.com/team");
    }
}
