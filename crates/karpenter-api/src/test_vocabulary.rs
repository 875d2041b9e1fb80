//! Test data: the AWS and kwok label vocabularies as the tests of this crate use them.
//!
//! The tests validate upstream's manifests, which name AWS keys (`karpenter.k8s.aws/instance-family`, the
//! tenancy values, the restricted `karpenter.k8s.aws` domain), but this crate may not depend on a provider's
//! crate, so the two sets are written out here for its tests only. They are copies of
//! `karpenter_aws::labels::provider_labels()` and `karpenter_kwok::labels::provider_labels()`; karpenter-aws
//! and karpenter-kwok check the test kit's copies (`karpenter_testing::vocabulary`) against theirs.
//!
//! Included by the unit tests (`#[cfg(test)] mod test_vocabulary` in lib.rs) and, through `#[path]`, by the
//! integration tests' common module; the includer has `ProviderLabels` in scope.

// Each includer uses a part of it.
#![allow(dead_code)]

use super::ProviderLabels;

/// The AWS keys the tests name.
pub mod aws_keys {
    pub const DOMAIN: &str = "karpenter.k8s.aws";
    pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
    pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
    pub const INSTANCE_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";

    /// Every AWS well-known key.
    pub const WELL_KNOWN: [&str; 30] = [
        "karpenter.k8s.aws/capacity-reservation-id",
        "karpenter.k8s.aws/capacity-reservation-type",
        "karpenter.k8s.aws/capacity-reservation-interruptible",
        "karpenter.k8s.aws/instance-hypervisor",
        "karpenter.k8s.aws/instance-encryption-in-transit-supported",
        "karpenter.k8s.aws/nitro-sandbox",
        "karpenter.k8s.aws/instance-category",
        "karpenter.k8s.aws/instance-capability-flex",
        INSTANCE_FAMILY,
        "karpenter.k8s.aws/instance-generation",
        "karpenter.k8s.aws/instance-size",
        "karpenter.k8s.aws/instance-local-nvme",
        INSTANCE_CPU,
        "karpenter.k8s.aws/instance-cpu-manufacturer",
        "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
        "karpenter.k8s.aws/instance-memory",
        "karpenter.k8s.aws/instance-ebs-bandwidth",
        "karpenter.k8s.aws/instance-network-bandwidth",
        "karpenter.k8s.aws/instance-gpu-name",
        "karpenter.k8s.aws/instance-gpu-manufacturer",
        "karpenter.k8s.aws/instance-gpu-count",
        "karpenter.k8s.aws/instance-gpu-memory",
        "karpenter.k8s.aws/instance-accelerator-name",
        "karpenter.k8s.aws/instance-accelerator-manufacturer",
        "karpenter.k8s.aws/instance-accelerator-count",
        INSTANCE_TENANCY,
        "karpenter.k8s.aws/placement-group-id",
        "karpenter.k8s.aws/placement-group-partition",
        "topology.k8s.aws/zone-id",
        "karpenter.k8s.aws/ec2nodeclass",
    ];
}

/// The AWS provider's vocabulary.
pub fn aws() -> ProviderLabels {
    ProviderLabels::new("aws")
        .with_well_known(aws_keys::WELL_KNOWN)
        .with_restricted_domain(aws_keys::DOMAIN)
        .with_known_values(aws_keys::INSTANCE_TENANCY, ["default", "dedicated"])
}

/// The kwok provider's vocabulary.
pub fn kwok() -> ProviderLabels {
    ProviderLabels::new("kwok")
        .with_well_known([
            "karpenter.kwok.sh/instance-size",
            "karpenter.kwok.sh/instance-family",
            "karpenter.kwok.sh/instance-cpu",
            "karpenter.kwok.sh/instance-memory",
            "karpenter.kwok.sh/kwoknodeclass",
        ])
        .with_restricted_domain("karpenter.kwok.sh")
}
