//! Test data: the AWS and kwok label vocabularies for the core crates' tests.
//!
//! The core crates (the scheduler, disruption, the cloudprovider kit) may not depend on a provider's crate, not
//! even for their tests, yet their fixtures are upstream's, which name AWS keys (`karpenter.k8s.aws/instance-family`
//! with `minValues`, instance tenancy, the restricted `karpenter.k8s.aws` domain). These are copies of
//! `karpenter_aws::labels::provider_labels()` and `karpenter_kwok::labels::provider_labels()`, kept equal by a
//! test in each of those crates. Production code takes its provider's own set, never these.
//!
//! ```
//! use karpenter_testing::vocabulary;
//!
//! assert!(vocabulary::aws().is_well_known(vocabulary::aws_keys::INSTANCE_FAMILY));
//! assert!(vocabulary::kwok().is_restricted("karpenter.kwok.sh/other"));
//! ```

use karpenter_api::ProviderLabels;

/// AWS keys the core crates' tests name.
pub mod aws_keys {
    /// The restricted domain.
    pub const DOMAIN: &str = "karpenter.k8s.aws";
    /// The instance family (`c5`, `m6g`, ...): the key upstream's `minValues` fixtures use.
    pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
    /// vCPUs of the instance type.
    pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
    /// Instance tenancy, with known values `default` and `dedicated`.
    pub const INSTANCE_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
    /// The capacity reservation an offering launches into.
    pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
    /// The AWS zone ID (`use1-az1`).
    pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";

    /// Every AWS well-known key.
    pub const WELL_KNOWN: [&str; 30] = [
        CAPACITY_RESERVATION_ID,
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
        ZONE_ID,
        "karpenter.k8s.aws/ec2nodeclass",
    ];
}

/// kwok keys the core crates' tests name.
pub mod kwok_keys {
    /// The restricted domain.
    pub const DOMAIN: &str = "karpenter.kwok.sh";
    /// The fake instance family.
    pub const INSTANCE_FAMILY: &str = "karpenter.kwok.sh/instance-family";

    /// Every kwok well-known key.
    pub const WELL_KNOWN: [&str; 5] = [
        "karpenter.kwok.sh/instance-size",
        INSTANCE_FAMILY,
        "karpenter.kwok.sh/instance-cpu",
        "karpenter.kwok.sh/instance-memory",
        "karpenter.kwok.sh/kwoknodeclass",
    ];
}

/// The AWS provider's label set (a copy of `karpenter_aws::labels::provider_labels()`).
pub fn aws() -> ProviderLabels {
    ProviderLabels::new("aws")
        .with_well_known(aws_keys::WELL_KNOWN)
        .with_restricted_domain(aws_keys::DOMAIN)
        .with_known_values(aws_keys::INSTANCE_TENANCY, ["default", "dedicated"])
}

/// The kwok provider's label set (a copy of `karpenter_kwok::labels::provider_labels()`).
pub fn kwok() -> ProviderLabels {
    ProviderLabels::new("kwok").with_well_known(kwok_keys::WELL_KNOWN).with_restricted_domain(kwok_keys::DOMAIN)
}
