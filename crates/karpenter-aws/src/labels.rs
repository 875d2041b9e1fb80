//! The AWS provider's label vocabulary: its well-known label keys, its restricted domain, the annotations and
//! finalizer it writes, and [`provider_labels`], the set validation, CRD generation and the scheduler take when
//! the binary runs `--provider aws`. SDK-free, like [`crate::api`]: it is data.
//!
//! The core crates know none of these keys; they take the set as a [`ProviderLabels`] value.

use karpenter_api::ProviderLabels;

/// The AWS provider's restricted label domain: NodePools may not set labels in it except the well-known ones.
pub const DOMAIN: &str = "karpenter.k8s.aws";
/// The ID of the capacity reservation (ODCR or capacity block) the instance was launched into.
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
/// The reservation's type: `default` (on-demand capacity reservation) or `capacity-block`.
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
/// `"true"` when the reservation's capacity may be reclaimed (interruptible capacity reservations).
pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str = "karpenter.k8s.aws/capacity-reservation-interruptible";
/// The EC2 hypervisor (`nitro`, `xen`); empty for bare metal.
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
/// `"true"` when the instance type encrypts traffic between instances in transit.
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str = "karpenter.k8s.aws/instance-encryption-in-transit-supported";
/// `"true"` when the instance type supports Nitro sandboxed containers.
pub const NITRO_SANDBOX: &str = "karpenter.k8s.aws/nitro-sandbox";
/// The instance category: the letters of the family before its generation (`c`, `m`, `r`, `g`, ...).
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
/// `"true"` for flex instance types (e.g. `c7i-flex`), which give baseline performance with bursts.
pub const INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
/// The instance family (`c5`, `m6g`, ...).
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
/// The instance generation, the digit(s) of the family (`5` for `c5`).
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
/// The instance size (`large`, `2xlarge`, `metal`, ...).
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
/// Local NVMe instance storage in GiB.
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
/// vCPUs of the instance type.
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
/// The CPU manufacturer (`intel`, `amd`, `aws`).
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
/// The sustained all-core clock speed in MHz.
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str = "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
/// Memory of the instance type in MiB.
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
/// Dedicated EBS bandwidth in Mbps.
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
/// Baseline network bandwidth in Mbps.
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
/// The GPU model, lower case (`t4`, `a100`, ...).
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
/// The GPU manufacturer (`nvidia`, `amd`, ...).
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
/// How many GPUs the instance type has.
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
/// Total GPU memory in MiB.
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
/// The accelerator model (`inferentia`, `trainium`, ...).
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
/// The accelerator manufacturer (`aws`, ...).
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str = "karpenter.k8s.aws/instance-accelerator-manufacturer";
/// How many accelerators (Inferentia, Trainium) the instance type has.
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
/// Instance tenancy: `default` (shared hardware) or `dedicated`.
pub const INSTANCE_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
/// The placement group the instance was launched into (from the EC2NodeClass's placement group selector).
pub const PLACEMENT_GROUP_ID: &str = "karpenter.k8s.aws/placement-group-id";
/// The partition number within a partition placement group.
pub const PLACEMENT_GROUP_PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";
/// The AWS zone ID (`use1-az1`): the same physical zone in every account, unlike the zone name.
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
/// Informational: the node class name.
pub const EC2_NODE_CLASS: &str = "karpenter.k8s.aws/ec2nodeclass";

/// The AWS well-known labels: NodePools and pods may constrain them even when no NodePool sets them.
pub const WELL_KNOWN: [&str; 30] = [
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
    CAPACITY_RESERVATION_INTERRUPTIBLE,
    INSTANCE_HYPERVISOR,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    NITRO_SANDBOX,
    INSTANCE_CATEGORY,
    INSTANCE_CAPABILITY_FLEX,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_SIZE,
    INSTANCE_LOCAL_NVME,
    INSTANCE_CPU,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    INSTANCE_MEMORY,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    INSTANCE_TENANCY,
    PLACEMENT_GROUP_ID,
    PLACEMENT_GROUP_PARTITION,
    ZONE_ID,
    EC2_NODE_CLASS,
];

/// Annotations the AWS provider reads and writes on EC2NodeClasses and NodeClaims.
pub mod annotations {
    /// On EC2NodeClasses and NodeClaims: the node class spec's hash, compared to detect static drift.
    pub const EC2_NODE_CLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
    /// The hash scheme [`EC2_NODE_CLASS_HASH`] was computed with; on a version change the hash is rewritten, not drifted.
    pub const EC2_NODE_CLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";
    /// On a NodeClaim: the AWS provider has tagged its instance after registration (`Name`, `karpenter.sh/nodeclaim`,
    /// `eks:eks-cluster-name`), so it is not tagged again.
    pub const TAGGED: &str = "karpenter.k8s.aws/tagged";
    /// On a NodeClaim: its instance also carries the `eks:eks-cluster-name` tag (added to instances launched before
    /// the tag existed).
    pub const CLUSTER_NAME_TAGGED: &str = "compatibility.karpenter.k8s.aws/cluster-name-tagged";
    /// On a NodeClaim: the instance profile its instance was launched with.
    pub const INSTANCE_PROFILE_NAME: &str = "karpenter.k8s.aws/instance-profile-name";
}

/// Finalizers the AWS provider adds.
pub mod finalizers {
    /// On EC2NodeClasses: before one goes, the status controller waits for its NodeClaims to go, then deletes its
    /// managed instance profile and its launch templates.
    pub const TERMINATION: &str = "karpenter.k8s.aws/termination";
}

/// The AWS label set: the `karpenter.k8s.aws/*` instance labels and `topology.k8s.aws/zone-id` well known,
/// `karpenter.k8s.aws` restricted, and instance tenancy limited to `default` and `dedicated`.
pub fn provider_labels() -> ProviderLabels {
    ProviderLabels::new("aws")
        .with_well_known(WELL_KNOWN)
        .with_restricted_domain(DOMAIN)
        .with_known_values(INSTANCE_TENANCY, ["default", "dedicated"])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_holds_every_key_and_the_rules() {
        let aws = provider_labels();
        assert_eq!(aws.name, "aws");
        assert_eq!(aws.well_known.len(), WELL_KNOWN.len(), "no key listed twice");
        assert!(WELL_KNOWN.iter().all(|k| aws.is_well_known(k) && !aws.is_restricted(k)));
        assert!(aws.is_restricted("karpenter.k8s.aws/custom") && aws.is_restricted("sub.karpenter.k8s.aws/custom"));
        assert!(!aws.is_restricted("example.com/team"));
        assert_eq!(aws.known_values(INSTANCE_TENANCY), Some(vec!["default", "dedicated"]));
    }

    /// The test kit's copy (test data for the core crates, which may not depend on this crate) is this set.
    #[test]
    fn the_test_kits_copy_is_this_set() {
        assert_eq!(karpenter_testing::vocabulary::aws(), provider_labels());
    }
}
