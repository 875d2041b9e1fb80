//! EC2's instance-type data as serde types: the shapes `DescribeInstanceTypes` and `DescribeInstanceTypeOfferings`
//! return, with EC2's JSON field names (`InstanceType`, `VCpuInfo.DefaultVCpus`, `MemoryInfo.SizeInMiB`, ...).
//!
//! Only the fields Karpenter reads are modelled; unknown fields are ignored so newer EC2 answers (and moto's
//! catalogue, which has a few extra fields) decode. Every field EC2 may leave out is optional or defaults to empty:
//! the conversion in [`crate::instancetype`] decides what a missing value means.

use serde::{Deserialize, Serialize};

/// One instance type (`InstanceTypeInfo`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceTypeInfo {
    /// The name, e.g. `m5.large`.
    pub instance_type: String,
    /// Current generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_generation: Option<bool>,
    /// Bare metal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bare_metal: Option<bool>,
    /// `nitro` or `xen`; absent for bare metal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hypervisor: Option<String>,
    /// `supported` or `unsupported`: Nitro Enclaves (the `karpenter.k8s.aws/nitro-sandbox` label); absent
    /// where the source does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nitro_enclaves_support: Option<String>,
    /// `on-demand`, `spot`, `capacity-block`.
    #[serde(default)]
    pub supported_usage_classes: Vec<String>,
    /// `hvm`, `paravirtual`.
    #[serde(default)]
    pub supported_virtualization_types: Vec<String>,
    /// Processor.
    #[serde(default)]
    pub processor_info: ProcessorInfo,
    /// vCPUs.
    #[serde(default, rename = "VCpuInfo")]
    pub vcpu_info: VCpuInfo,
    /// Memory.
    #[serde(default)]
    pub memory_info: MemoryInfo,
    /// Whether the type has instance storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_storage_supported: Option<bool>,
    /// Instance storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_storage_info: Option<InstanceStorageInfo>,
    /// EBS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs_info: Option<EbsInfo>,
    /// Networking.
    #[serde(default)]
    pub network_info: NetworkInfo,
    /// GPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_info: Option<GpuInfo>,
    /// Inference accelerators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_accelerator_info: Option<InferenceAcceleratorInfo>,
    /// Neuron devices (Inferentia, Trainium).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neuron_info: Option<NeuronInfo>,
    /// Placement group strategies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_info: Option<PlacementGroupInfo>,
}

/// `ProcessorInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ProcessorInfo {
    /// `x86_64`, `arm64`, `i386`, `x86_64_mac`, `arm64_mac`.
    #[serde(default)]
    pub supported_architectures: Vec<String>,
    /// `Intel`, `AMD`, `AWS`, `Apple`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    /// Sustained all-core clock speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_clock_speed_in_ghz: Option<f64>,
    /// `amd-sev-snp`, `nested-virtualization`, ...
    #[serde(default)]
    pub supported_features: Vec<String>,
}

/// `VCpuInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct VCpuInfo {
    /// Default number of vCPUs.
    #[serde(default, rename = "DefaultVCpus", skip_serializing_if = "Option::is_none")]
    pub default_vcpus: Option<i64>,
    /// Default number of cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_cores: Option<i64>,
    /// Default threads per core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_threads_per_core: Option<i64>,
}

/// `MemoryInfo` (also used per GPU, accelerator and Neuron device).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryInfo {
    /// Size in MiB.
    #[serde(default, rename = "SizeInMiB", skip_serializing_if = "Option::is_none")]
    pub size_in_mib: Option<i64>,
}

/// `InstanceStorageInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceStorageInfo {
    /// Total instance storage in GB (decimal).
    #[serde(default, rename = "TotalSizeInGB", skip_serializing_if = "Option::is_none")]
    pub total_size_in_gb: Option<i64>,
    /// `unsupported`, `supported`, `required`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvme_support: Option<String>,
    /// The disks.
    #[serde(default)]
    pub disks: Vec<DiskInfo>,
}

/// `DiskInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DiskInfo {
    /// Disks of this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// Size of one disk in GB.
    #[serde(default, rename = "SizeInGB", skip_serializing_if = "Option::is_none")]
    pub size_in_gb: Option<i64>,
    /// `hdd` or `ssd`.
    #[serde(default, rename = "Type", skip_serializing_if = "Option::is_none")]
    pub disk_type: Option<String>,
}

/// `EbsInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EbsInfo {
    /// `unsupported`, `supported`, `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs_optimized_support: Option<String>,
    /// Bandwidth figures when EBS-optimized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs_optimized_info: Option<EbsOptimizedInfo>,
}

/// `EbsOptimizedInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EbsOptimizedInfo {
    /// Baseline bandwidth (Mbit/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_bandwidth_in_mbps: Option<i64>,
    /// Maximum bandwidth (Mbit/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_bandwidth_in_mbps: Option<i64>,
}

/// `NetworkInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkInfo {
    /// Maximum ENIs over all cards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_network_interfaces: Option<i64>,
    /// IPv4 addresses per ENI.
    #[serde(default, rename = "Ipv4AddressesPerInterface", skip_serializing_if = "Option::is_none")]
    pub ipv4_addresses_per_interface: Option<i64>,
    /// IPv6 addresses per ENI.
    #[serde(default, rename = "Ipv6AddressesPerInterface", skip_serializing_if = "Option::is_none")]
    pub ipv6_addresses_per_interface: Option<i64>,
    /// The card the primary ENI is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_network_card_index: Option<i64>,
    /// Number of network cards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_network_cards: Option<i64>,
    /// Per-card limits.
    #[serde(default)]
    pub network_cards: Vec<NetworkCardInfo>,
    /// `Up to 10 Gigabit`, `25 Gigabit`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_performance: Option<String>,
    /// `unsupported`, `supported`, `required`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ena_support: Option<String>,
    /// Elastic Fabric Adapter support.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efa_supported: Option<bool>,
    /// EFA limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efa_info: Option<EfaInfo>,
    /// Encryption in transit between instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_in_transit_supported: Option<bool>,
}

/// `NetworkCardInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NetworkCardInfo {
    /// Index of the card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_card_index: Option<i64>,
    /// Maximum ENIs on this card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_network_interfaces: Option<i64>,
    /// Baseline bandwidth of the card (Gbit/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_bandwidth_in_gbps: Option<f64>,
    /// Peak bandwidth of the card (Gbit/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bandwidth_in_gbps: Option<f64>,
    /// `interface`, `efa`, `efa-only`.
    #[serde(default)]
    pub interface_types: Vec<String>,
}

/// `EfaInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EfaInfo {
    /// Maximum EFA interfaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_efa_interfaces: Option<i64>,
}

/// `GpuInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GpuInfo {
    /// GPU kinds.
    #[serde(default)]
    pub gpus: Vec<GpuDeviceInfo>,
    /// Total GPU memory.
    #[serde(default, rename = "TotalGpuMemoryInMiB", skip_serializing_if = "Option::is_none")]
    pub total_gpu_memory_in_mib: Option<i64>,
}

/// `GpuDeviceInfo`, also the shape of `InferenceDeviceInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct GpuDeviceInfo {
    /// Model, e.g. `V100`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `NVIDIA`, `AMD`, `Habana`, `AWS`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    /// Devices of this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// Memory per device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_info: Option<MemoryInfo>,
}

/// `InferenceAcceleratorInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InferenceAcceleratorInfo {
    /// Accelerator kinds.
    #[serde(default)]
    pub accelerators: Vec<GpuDeviceInfo>,
}

/// `NeuronInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NeuronInfo {
    /// Neuron device kinds.
    #[serde(default)]
    pub neuron_devices: Vec<NeuronDeviceInfo>,
}

/// `NeuronDeviceInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NeuronDeviceInfo {
    /// `Inferentia`, `Inferentia2`, `Trainium`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Devices of this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// Cores per device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_info: Option<NeuronCoreInfo>,
    /// Memory per device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_info: Option<MemoryInfo>,
}

/// `NeuronDeviceCoreInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct NeuronCoreInfo {
    /// Cores per device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<i64>,
    /// Core version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
}

/// `PlacementGroupInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PlacementGroupInfo {
    /// `cluster`, `partition`, `spread`.
    #[serde(default)]
    pub supported_strategies: Vec<String>,
}

/// The answer of `DescribeInstanceTypes` (one page).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DescribeInstanceTypesOutput {
    /// The instance types of this page.
    #[serde(default)]
    pub instance_types: Vec<InstanceTypeInfo>,
    /// The next page's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One `InstanceTypeOffering`: an instance type offered in a location.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct InstanceTypeOffering {
    /// The instance type.
    pub instance_type: String,
    /// `region`, `availability-zone`, `availability-zone-id` (moto's files leave it out: the directory says).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location_type: Option<String>,
    /// The region, zone name or zone id.
    pub location: String,
}

/// The answer of `DescribeInstanceTypeOfferings` (one page).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DescribeInstanceTypeOfferingsOutput {
    /// The offerings of this page.
    #[serde(default)]
    pub instance_type_offerings: Vec<InstanceTypeOffering>,
    /// The next page's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_ec2_json_and_ignores_unknown_fields() {
        let json = r#"{"InstanceTypes": [{
            "InstanceType": "m5.large", "CurrentGeneration": true, "Hypervisor": "nitro", "FreeTierEligible": false,
            "SupportedUsageClasses": ["on-demand", "spot"], "SupportedVirtualizationTypes": ["hvm"],
            "ProcessorInfo": {"SupportedArchitectures": ["x86_64"], "Manufacturer": "Intel",
                              "SustainedClockSpeedInGhz": 3.1},
            "VCpuInfo": {"DefaultVCpus": 2, "DefaultCores": 1, "DefaultThreadsPerCore": 2},
            "MemoryInfo": {"SizeInMiB": 8192},
            "EbsInfo": {"EbsOptimizedSupport": "default",
                        "EbsOptimizedInfo": {"BaselineBandwidthInMbps": 650, "MaximumBandwidthInMbps": 4750}},
            "NetworkInfo": {"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10,
                            "DefaultNetworkCardIndex": 0,
                            "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 3,
                                              "BaselineBandwidthInGbps": 0.75}],
                            "EncryptionInTransitSupported": false}
        }], "NextToken": "abc"}"#;
        let out: DescribeInstanceTypesOutput = serde_json::from_str(json).expect("decodes");
        assert_eq!(out.next_token.as_deref(), Some("abc"));
        let it = &out.instance_types[0];
        assert_eq!(it.instance_type, "m5.large");
        assert_eq!(it.vcpu_info.default_vcpus, Some(2));
        assert_eq!(it.memory_info.size_in_mib, Some(8192));
        assert_eq!(it.network_info.ipv4_addresses_per_interface, Some(10));
        assert_eq!(it.network_info.network_cards[0].baseline_bandwidth_in_gbps, Some(0.75));
        assert_eq!(
            it.ebs_info.as_ref().and_then(|e| e.ebs_optimized_info.as_ref()?.maximum_bandwidth_in_mbps),
            Some(4750)
        );
        // Round trip keeps EC2's names.
        let again = serde_json::to_value(it).expect("serialises");
        assert_eq!(again["VCpuInfo"]["DefaultVCpus"], 2);
        assert_eq!(again["MemoryInfo"]["SizeInMiB"], 8192);
    }

    #[test]
    fn offerings_decode() {
        let json = r#"{"InstanceTypeOfferings": [
            {"InstanceType": "m5.large", "LocationType": "availability-zone", "Location": "us-west-2a"}]}"#;
        let out: DescribeInstanceTypeOfferingsOutput = serde_json::from_str(json).expect("decodes");
        assert_eq!(out.instance_type_offerings[0].location, "us-west-2a");
        assert_eq!(out.instance_type_offerings[0].location_type.as_deref(), Some("availability-zone"));
    }

    #[test]
    fn wrong_types_are_errors_not_panics() {
        assert!(serde_json::from_str::<InstanceTypeInfo>(r#"{"InstanceType": 5}"#).is_err());
        assert!(serde_json::from_str::<InstanceTypeInfo>(r#"{"InstanceType": "x", "VCpuInfo": "2"}"#).is_err());
    }
}
