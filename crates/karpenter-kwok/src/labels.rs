//! The kwok provider's label vocabulary (upstream's fake provider for scale testing): its well-known label keys,
//! its restricted domain and [`provider_labels`], the set the binary uses with `--provider kwok`.
//!
//! The core crates know none of these keys; they take the set as a [`ProviderLabels`] value.

use karpenter_api::ProviderLabels;

/// The kwok provider's restricted label domain.
pub const DOMAIN: &str = "karpenter.kwok.sh";
/// The fake instance size (the size part of the instance type name).
pub const INSTANCE_SIZE: &str = "karpenter.kwok.sh/instance-size";
/// The fake instance family.
pub const INSTANCE_FAMILY: &str = "karpenter.kwok.sh/instance-family";
/// vCPUs of the fake instance type.
pub const INSTANCE_CPU: &str = "karpenter.kwok.sh/instance-cpu";
/// Memory of the fake instance type.
pub const INSTANCE_MEMORY: &str = "karpenter.kwok.sh/instance-memory";
/// The name of the KWOKNodeClass a node was launched from.
pub const KWOK_NODE_CLASS: &str = "karpenter.kwok.sh/kwoknodeclass";

/// The kwok well-known labels.
pub const WELL_KNOWN: [&str; 5] = [INSTANCE_SIZE, INSTANCE_FAMILY, INSTANCE_CPU, INSTANCE_MEMORY, KWOK_NODE_CLASS];

/// The kwok label set: the `karpenter.kwok.sh/*` instance labels well known, `karpenter.kwok.sh` restricted.
pub fn provider_labels() -> ProviderLabels {
    ProviderLabels::new("kwok").with_well_known(WELL_KNOWN).with_restricted_domain(DOMAIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_holds_every_key_and_the_domain() {
        let kwok = provider_labels();
        assert_eq!(kwok.name, "kwok");
        assert!(WELL_KNOWN.iter().all(|k| kwok.is_well_known(k) && !kwok.is_restricted(k)));
        assert!(kwok.is_restricted("karpenter.kwok.sh/other") && !kwok.is_restricted("karpenter.k8s.aws/custom"));
        assert!(kwok.known_values.is_empty());
    }

    /// The in-memory fake stands in for this provider with a set it builds itself (karpenter-cloudprovider cannot
    /// depend on this crate): it is this set.
    #[test]
    fn the_fakes_stand_in_set_is_this_set() {
        assert_eq!(karpenter_cloudprovider::fake::stand_in_labels(), provider_labels());
    }
}
