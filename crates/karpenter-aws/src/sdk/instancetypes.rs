//! [`InstanceTypeApi`] over aws-sdk-ec2: `DescribeInstanceTypes` and `DescribeInstanceTypeOfferings` (by zone),
//! every page, converted into the serde types of [`crate::ec2`] (the fields Karpenter reads).

use async_trait::async_trait;
use aws_sdk_ec2::types as sdk;
use aws_sdk_ec2::types::LocationType;

use super::{Ec2Adapter, api_error};
use crate::api_error::AwsApiError;
use crate::ec2::{
    DiskInfo, EbsInfo, EbsOptimizedInfo, EfaInfo, GpuDeviceInfo, GpuInfo, InferenceAcceleratorInfo,
    InstanceStorageInfo, InstanceTypeInfo, InstanceTypeOffering, MemoryInfo, NetworkCardInfo, NetworkInfo,
    NeuronCoreInfo, NeuronDeviceInfo, NeuronInfo, PlacementGroupInfo, ProcessorInfo, VCpuInfo,
};
use crate::instancetypes::InstanceTypeApi;

fn i(v: Option<i32>) -> Option<i64> {
    v.map(i64::from)
}

fn memory(size: Option<i32>) -> Option<MemoryInfo> {
    size.map(|s| MemoryInfo { size_in_mib: Some(i64::from(s)) })
}

/// One SDK instance type as ours.
pub fn convert(t: &sdk::InstanceTypeInfo) -> InstanceTypeInfo {
    InstanceTypeInfo {
        instance_type: t.instance_type().map(|t| t.as_str().to_owned()).unwrap_or_default(),
        current_generation: t.current_generation(),
        bare_metal: t.bare_metal(),
        hypervisor: t.hypervisor().map(|h| h.as_str().to_owned()),
        nitro_enclaves_support: t.nitro_enclaves_support().map(|n| n.as_str().to_owned()),
        supported_usage_classes: t.supported_usage_classes().iter().map(|u| u.as_str().to_owned()).collect(),
        supported_virtualization_types: t
            .supported_virtualization_types()
            .iter()
            .map(|v| v.as_str().to_owned())
            .collect(),
        processor_info: t
            .processor_info()
            .map(|p| ProcessorInfo {
                supported_architectures: p.supported_architectures().iter().map(|a| a.as_str().to_owned()).collect(),
                manufacturer: p.manufacturer().map(str::to_owned),
                sustained_clock_speed_in_ghz: p.sustained_clock_speed_in_ghz(),
                supported_features: p.supported_features().iter().map(|f| f.as_str().to_owned()).collect(),
            })
            .unwrap_or_default(),
        vcpu_info: t
            .v_cpu_info()
            .map(|v| VCpuInfo {
                default_vcpus: i(v.default_v_cpus()),
                default_cores: i(v.default_cores()),
                default_threads_per_core: i(v.default_threads_per_core()),
            })
            .unwrap_or_default(),
        memory_info: t.memory_info().map(|m| MemoryInfo { size_in_mib: m.size_in_mib() }).unwrap_or_default(),
        instance_storage_supported: t.instance_storage_supported(),
        instance_storage_info: t.instance_storage_info().map(|s| InstanceStorageInfo {
            total_size_in_gb: s.total_size_in_gb(),
            nvme_support: s.nvme_support().map(|n| n.as_str().to_owned()),
            disks: s
                .disks()
                .iter()
                .map(|d| DiskInfo {
                    count: i(d.count()),
                    size_in_gb: d.size_in_gb(),
                    disk_type: d.r#type().map(|t| t.as_str().to_owned()),
                })
                .collect(),
        }),
        ebs_info: t.ebs_info().map(|e| EbsInfo {
            ebs_optimized_support: e.ebs_optimized_support().map(|s| s.as_str().to_owned()),
            ebs_optimized_info: e.ebs_optimized_info().map(|o| EbsOptimizedInfo {
                baseline_bandwidth_in_mbps: i(o.baseline_bandwidth_in_mbps()),
                maximum_bandwidth_in_mbps: i(o.maximum_bandwidth_in_mbps()),
            }),
        }),
        network_info: t.network_info().map(network).unwrap_or_default(),
        gpu_info: t.gpu_info().map(|g| GpuInfo {
            gpus: g
                .gpus()
                .iter()
                .map(|d| GpuDeviceInfo {
                    name: d.name().map(str::to_owned),
                    manufacturer: d.manufacturer().map(str::to_owned),
                    count: i(d.count()),
                    memory_info: memory(d.memory_info().and_then(|m| m.size_in_mib())),
                })
                .collect(),
            total_gpu_memory_in_mib: i(g.total_gpu_memory_in_mib()),
        }),
        inference_accelerator_info: t.inference_accelerator_info().map(|a| InferenceAcceleratorInfo {
            accelerators: a
                .accelerators()
                .iter()
                .map(|d| GpuDeviceInfo {
                    name: d.name().map(str::to_owned),
                    manufacturer: d.manufacturer().map(str::to_owned),
                    count: i(d.count()),
                    memory_info: memory(d.memory_info().and_then(|m| m.size_in_mib())),
                })
                .collect(),
        }),
        neuron_info: t.neuron_info().map(|n| NeuronInfo {
            neuron_devices: n
                .neuron_devices()
                .iter()
                .map(|d| NeuronDeviceInfo {
                    name: d.name().map(str::to_owned),
                    count: i(d.count()),
                    core_info: d.core_info().map(|c| NeuronCoreInfo { count: i(c.count()), version: i(c.version()) }),
                    memory_info: memory(d.memory_info().and_then(|m| m.size_in_mib())),
                })
                .collect(),
        }),
        placement_group_info: t.placement_group_info().map(|p| PlacementGroupInfo {
            supported_strategies: p.supported_strategies().iter().map(|s| s.as_str().to_owned()).collect(),
        }),
    }
}

fn network(n: &sdk::NetworkInfo) -> NetworkInfo {
    NetworkInfo {
        maximum_network_interfaces: i(n.maximum_network_interfaces()),
        ipv4_addresses_per_interface: i(n.ipv4_addresses_per_interface()),
        ipv6_addresses_per_interface: i(n.ipv6_addresses_per_interface()),
        default_network_card_index: i(n.default_network_card_index()),
        maximum_network_cards: i(n.maximum_network_cards()),
        network_cards: n
            .network_cards()
            .iter()
            .map(|c| NetworkCardInfo {
                network_card_index: i(c.network_card_index()),
                maximum_network_interfaces: i(c.maximum_network_interfaces()),
                baseline_bandwidth_in_gbps: c.baseline_bandwidth_in_gbps(),
                peak_bandwidth_in_gbps: c.peak_bandwidth_in_gbps(),
                interface_types: c.interface_types().iter().map(|t| t.as_str().to_owned()).collect(),
            })
            .collect(),
        network_performance: n.network_performance().map(str::to_owned),
        ena_support: n.ena_support().map(|e| e.as_str().to_owned()),
        efa_supported: n.efa_supported(),
        efa_info: n.efa_info().map(|e| EfaInfo { maximum_efa_interfaces: i(e.maximum_efa_interfaces()) }),
        encryption_in_transit_supported: n.encryption_in_transit_supported(),
    }
}

#[async_trait]
impl InstanceTypeApi for Ec2Adapter {
    async fn describe_instance_types(&self) -> Result<Vec<InstanceTypeInfo>, AwsApiError> {
        let mut pages = self.client.describe_instance_types().into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("DescribeInstanceTypes", e))?;
            out.extend(page.instance_types().iter().map(convert));
        }
        Ok(out)
    }

    async fn describe_instance_type_offerings(&self) -> Result<Vec<InstanceTypeOffering>, AwsApiError> {
        let mut pages = self
            .client
            .describe_instance_type_offerings()
            .location_type(LocationType::AvailabilityZone)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("DescribeInstanceTypeOfferings", e))?;
            out.extend(page.instance_type_offerings().iter().filter_map(|o| {
                Some(InstanceTypeOffering {
                    instance_type: o.instance_type()?.as_str().to_owned(),
                    location_type: o.location_type().map(|l| l.as_str().to_owned()),
                    location: o.location()?.to_owned(),
                })
            }));
        }
        Ok(out)
    }
}
