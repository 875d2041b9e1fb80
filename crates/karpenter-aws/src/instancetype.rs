//! EC2 instance-type data → [`InstanceType`]s, SDK-free.
//!
//! Inputs: [`InstanceTypeInfo`] (what `DescribeInstanceTypes` returns), the zones each type is offered in (from
//! `DescribeInstanceTypeOfferings`), a node class's settings ([`NodeClassSettings`], from an EC2NodeClass spec),
//! the operator [`Settings`] (`VM_MEMORY_OVERHEAD_PERCENT`, `RESERVED_ENIS`) and prices. Output: instance types with
//! upstream's labels as single-valued requirements, capacity, overhead (kube-reserved, system-reserved, hard
//! eviction thresholds) and offerings per zone × capacity type.
//!
//! Formulas (each is a public function so the controller, tests and docs share one definition):
//! * [`memory_capacity_mib`]: `M = SizeInMiB` (−64 MiB when the first architecture is arm64), minus
//!   `ceil(M × vmMemoryOverheadPercent)`.
//! * [`eni_limited_pods`]: `usableENIs × (IPv4 per ENI − 1) + 2`, usable ENIs being the default card's
//!   `MaximumNetworkInterfaces − reservedENIs − efa-only interfaces on card 0` (never negative; 0 usable ⇒ 0).
//! * [`pods_capacity`]: `maxPods`, else ENI-limited (AL2, AL2023, Bottlerocket, Custom) or 110 (Windows); then
//!   `min(podsPerCore × vCPU, pods)` when `podsPerCore > 0` (not on Bottlerocket).
//! * [`kube_reserved_cpu_millis`]: 6 % of the first core, 1 % of the second, 0.5 % of cores 3–4, 0.25 % above.
//! * [`kube_reserved_memory_mib`]: `11 × pods + 255` (pods: ENI-limited with 0 reserved ENIs for AL2, AL2023 and
//!   Custom; the pods capacity for Bottlerocket and Windows).
//! * Hard eviction defaults `memory.available=100Mi`, `nodefs.available=10%`; `evictionHard` overrides them
//!   (percentages of the capacity, rounded up; `100%` means 0).
//! * Kubelet CEL expressions ([`crate::kubelet_cel`], `NodeClassCEL` gate): [`InstanceTypeContext::kubelet`]
//!   resolves `maxPods` and then the reserved values per type; the result feeds the pods capacity and the
//!   overhead in place of the static values. A type an expression fails for is left out.
//!
//! Deviations, all documented on the items: the `instance-network-bandwidth` label is the sum of the network
//! cards' `BaselineBandwidthInGbps` (in Mbit/s) instead of upstream's static table, which EC2 does not return;
//! `vpc.amazonaws.com/pod-eni` comes from an optional [`InstanceTypeContext::branch_interfaces`] table (upstream's
//! is static too) and is left out when unknown; extended resources with a zero count are left out of the
//! capacity (upstream lists them as 0 and drops them on the NodeClaim); reserved (capacity-reservation) offerings
//! and placement-group labels are not built yet (they need the SDK half's reservation data).

use std::collections::{BTreeMap, BTreeSet};

use crate::api::AmiFamily;
use crate::api::BlockDeviceMapping;
use crate::labels as aws_labels;
use karpenter_requirements::labels::{
    ARCH, CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, INSTANCE_TYPE, OS, REGION, ZONE,
};
use karpenter_requirements::{
    Format, InstanceType, Offering, Overhead, Quantity, Requirement, Requirements, ResourceList,
};

use crate::dynamic_resources::{DraTemplates, efa_interfaces};
use crate::ec2::{GpuDeviceInfo, InstanceTypeInfo};
use crate::kubelet_cel::{KubeletExpressionError, Variables};
use crate::pricing::{PriceSource, estimate};

pub mod node_class;

pub use node_class::{InstanceTypeError, NodeClassSettings, Threshold};

/// `node.kubernetes.io/windows-build`.
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

/// Extended resource names.
pub mod resources {
    /// NVIDIA GPUs.
    pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
    /// AMD GPUs.
    pub const AMD_GPU: &str = "amd.com/gpu";
    /// Habana Gaudi accelerators.
    pub const HABANA_GAUDI: &str = "habana.ai/gaudi";
    /// AWS Neuron devices (Inferentia, Trainium).
    pub const AWS_NEURON: &str = "aws.amazon.com/neuron";
    /// AWS Neuron cores.
    pub const AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
    /// Elastic Fabric Adapter interfaces.
    pub const EFA: &str = "vpc.amazonaws.com/efa";
    /// Branch interfaces for security groups for pods.
    pub const POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
    /// Windows: secondary IPv4 addresses for pods.
    pub const PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";
}

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// Operator settings that shape capacity.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `VM_MEMORY_OVERHEAD_PERCENT`: the share of memory the hypervisor and firmware keep (default 0.075).
    pub vm_memory_overhead_percent: f64,
    /// `RESERVED_ENIS`: ENIs kept out of the VPC CNI's reach (default 0).
    pub reserved_enis: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { vm_memory_overhead_percent: 0.075, reserved_enis: 0 }
    }
}

/// Everything besides the instance type's own data that the conversion needs.
#[derive(Clone, Debug, Default)]
pub struct InstanceTypeContext {
    /// The region (`topology.kubernetes.io/region`).
    pub region: String,
    /// The node class.
    pub node_class: NodeClassSettings,
    /// Operator settings.
    pub settings: Settings,
    /// Instance type → zones it is offered in (`DescribeInstanceTypeOfferings` with location type
    /// `availability-zone`). A type without an entry gets no offerings.
    pub zones: BTreeMap<String, BTreeSet<String>>,
    /// Zone name → zone id (`topology.k8s.aws/zone-id`); zones without an id get no zone-id label.
    pub zone_ids: BTreeMap<String, String>,
    /// Zones of the node class's subnets; `None` means every zone (no subnet restriction known yet).
    pub subnet_zones: Option<BTreeSet<String>>,
    /// Prices.
    pub prices: PriceSource,
    /// (capacity type, instance type, zone) triples recently refused for capacity (the ICE cache).
    pub unavailable: BTreeSet<(String, String, String)>,
    /// Instance type → branch interfaces (security groups for pods) for trunking-compatible types.
    pub branch_interfaces: BTreeMap<String, i64>,
    /// DRA slice templates to publish (AWS gates `DRANVIDIAGPU`, `DRAEFA`).
    pub dra: DraTemplates,
}

/// `x86_64` → `amd64`, `arm64` → `arm64`; other architectures are not supported.
pub fn architecture(info: &InstanceTypeInfo) -> Option<&'static str> {
    info.processor_info.supported_architectures.iter().find_map(|a| match a.as_str() {
        "x86_64" => Some("amd64"),
        "arm64" => Some("arm64"),
        _ => None,
    })
}

/// Whether Karpenter considers the type at all: HVM and x86_64 or arm64 (the `DescribeInstanceTypes` filters)
/// with vCPU and memory figures.
pub fn is_supported(info: &InstanceTypeInfo) -> bool {
    info.supported_virtualization_types.iter().any(|v| v == "hvm")
        && architecture(info).is_some()
        && info.vcpu_info.default_vcpus.is_some_and(|v| v > 0)
        && info.memory_info.size_in_mib.is_some_and(|m| m > 0)
}

/// Memory capacity estimate in MiB: `M = SizeInMiB` (−64 MiB when the first architecture listed is arm64), then
/// `M − ceil(M × overhead_percent)`.
pub fn memory_capacity_mib(info: &InstanceTypeInfo, overhead_percent: f64) -> i64 {
    let mut m = info.memory_info.size_in_mib.unwrap_or(0).max(0);
    if info.processor_info.supported_architectures.first().map(String::as_str) == Some("arm64") {
        m = (m - 64).max(0);
    }
    let overhead = (m as f64 * overhead_percent.clamp(0.0, 1.0)).ceil() as i64;
    m - overhead
}

fn default_card_max_enis(info: &InstanceTypeInfo) -> i64 {
    let n = &info.network_info;
    let idx = n.default_network_card_index.unwrap_or(0);
    n.network_cards
        .iter()
        .find(|c| c.network_card_index.unwrap_or(0) == idx)
        .and_then(|c| c.maximum_network_interfaces)
        .or(n.maximum_network_interfaces)
        .unwrap_or(0)
}

/// ENI-limited max pods: `usable × (IPv4 per ENI − 1) + 2` with `usable = max(default card's ENIs −
/// reserved_enis − efa_only_on_card0, 0)`; 0 usable ENIs ⇒ 0 pods.
pub fn eni_limited_pods(info: &InstanceTypeInfo, reserved_enis: i64, efa_only_on_card0: i64) -> i64 {
    let usable = default_card_max_enis(info).saturating_sub(reserved_enis).saturating_sub(efa_only_on_card0).max(0);
    if usable == 0 {
        return 0;
    }
    let ips = info.network_info.ipv4_addresses_per_interface.unwrap_or(0).max(1);
    usable.saturating_mul(ips - 1).saturating_add(2)
}

/// Whether the family's bootstrap sets max pods from the ENI limit.
fn eni_limited_family(f: AmiFamily) -> bool {
    matches!(f, AmiFamily::Al2 | AmiFamily::Al2023 | AmiFamily::Bottlerocket | AmiFamily::Custom)
}

/// The `pods` capacity: `maxPods`, else ENI-limited (AL2, AL2023, Bottlerocket, Custom) or 110 (Windows); then
/// `min(podsPerCore × vCPU, pods)` when `podsPerCore > 0` and the family honours it (not Bottlerocket).
pub fn pods_capacity(info: &InstanceTypeInfo, node_class: &NodeClassSettings, settings: &Settings) -> i64 {
    pods_capacity_for(info, node_class, settings, node_class.max_pods)
}

/// [`pods_capacity`] with `max_pods` in place of the node class's static value (an expression's result, or
/// `None` for the family default).
pub fn pods_capacity_for(
    info: &InstanceTypeInfo,
    node_class: &NodeClassSettings,
    settings: &Settings,
    max_pods: Option<i64>,
) -> i64 {
    let mut pods = match max_pods {
        Some(m) => m.max(0),
        None if eni_limited_family(node_class.ami_family) => {
            eni_limited_pods(info, settings.reserved_enis, node_class.efa_only_on_card(0))
        }
        None => 110,
    };
    if let Some(ppc) = node_class.pods_per_core.filter(|p| *p > 0)
        && node_class.ami_family != AmiFamily::Bottlerocket
    {
        pods = pods.min(ppc.saturating_mul(info.vcpu_info.default_vcpus.unwrap_or(0)));
    }
    pods
}

/// The kubelet expression variables of `info`, with `max_pods`.
pub fn expression_variables(info: &InstanceTypeInfo, max_pods: i64) -> Variables {
    Variables {
        vcpus: info.vcpu_info.default_vcpus.unwrap_or(0),
        memory_mib: info.memory_info.size_in_mib.unwrap_or(0),
        default_enis: default_card_max_enis(info),
        ips_per_eni: info.network_info.ipv4_addresses_per_interface.unwrap_or(0),
        max_pods,
        instance_type: info.instance_type.clone(),
    }
}

/// One instance type's kubelet values: the node class's static ones with its expressions evaluated for the type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResolvedKubelet {
    /// `maxPods` (static, or the expression's value); `None` means the family default.
    pub max_pods: Option<i64>,
    /// `kubeReserved`: quantities and evaluated expressions.
    pub kube_reserved: ResourceList,
    /// `systemReserved`: quantities and evaluated expressions.
    pub system_reserved: ResourceList,
}

/// Default kube-reserved CPU in millicores for `vcpus` vCPUs: 6 % of the first 1000m, 1 % of 1000–2000m, 0.5 % of
/// 2000–4000m and 0.25 % of everything above 4000m.
pub fn kube_reserved_cpu_millis(vcpus: i64) -> i64 {
    let m = vcpus.max(0).saturating_mul(1000);
    let band = |lo: i64, hi: i64| (m.min(hi) - lo).max(0);
    (band(0, 1000) * 600 + band(1000, 2000) * 100 + band(2000, 4000) * 50 + band(4000, i64::MAX) * 25) / 10_000
}

/// Default kube-reserved memory in MiB: `11 × pods + 255`.
pub fn kube_reserved_memory_mib(pods: i64) -> i64 {
    pods.max(0).saturating_mul(11).saturating_add(255)
}

/// The family's default ephemeral (kubelet) device and its default size in GiB.
fn family_ephemeral_default(f: AmiFamily) -> (&'static str, i64) {
    match f {
        AmiFamily::Al2 | AmiFamily::Al2023 => ("/dev/xvda", 20),
        AmiFamily::Bottlerocket => ("/dev/xvdb", 20),
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => ("/dev/sda1", 50),
        AmiFamily::Custom => ("", 20),
    }
}

fn bdm_bytes(m: &BlockDeviceMapping) -> Option<i64> {
    m.ebs.as_ref()?.volume_size_bytes().and_then(|b| i64::try_from(b).ok())
}

/// Ephemeral-storage capacity: RAID0 over instance storage ⇒ its total size (decimal GB); else the root-volume
/// mapping; else for Custom the last mapping (or 20Gi); else the mapping on the family's ephemeral device; else
/// the family default (20Gi, Windows 50Gi).
pub fn ephemeral_storage(info: &InstanceTypeInfo, node_class: &NodeClassSettings) -> Quantity {
    if node_class.instance_store_raid0
        && let Some(gb) = info.instance_storage_info.as_ref().and_then(|s| s.total_size_in_gb).filter(|g| *g > 0)
    {
        return Quantity::from_int(gb.saturating_mul(1_000_000_000), Format::DecimalSI);
    }
    let (device, default_gib) = family_ephemeral_default(node_class.ami_family);
    let bdms = &node_class.block_device_mappings;
    let chosen = if let Some(root) = bdms.iter().find(|m| m.root_volume) {
        Some(bdm_bytes(root))
    } else if node_class.ami_family == AmiFamily::Custom {
        bdms.last().map(bdm_bytes)
    } else {
        bdms.iter().find(|m| m.device_name.as_deref() == Some(device)).map(bdm_bytes)
    };
    let bytes = chosen.flatten().unwrap_or(default_gib * GIB);
    Quantity::from_int(bytes, Format::BinarySI)
}

/// Windows build numbers for the `node.kubernetes.io/windows-build` label.
fn windows_build(f: AmiFamily) -> Option<&'static str> {
    match f {
        AmiFamily::Windows2019 => Some("10.0.17763"),
        AmiFamily::Windows2022 => Some("10.0.20348"),
        AmiFamily::Windows2025 => Some("10.0.26100"),
        _ => None,
    }
}

/// Lowercase with spaces as dashes (`RTX PRO 4500` → `rtx-pro-4500`).
fn lower_kebab(s: &str) -> String {
    s.trim().to_lowercase().split_whitespace().collect::<Vec<_>>().join("-")
}

/// `(category, generation)` from the name, as upstream's `^([a-z]+)(-[0-9]+tb)?([0-9]+).*\.`
/// (`m5.large` → (m, 5); `u-6tb1.metal` → (u, 1); `p6-b200.48xlarge` → (p, 6)).
pub fn category_and_generation(name: &str) -> Option<(&str, &str)> {
    let b = name.as_bytes();
    let letters = b.iter().take_while(|c| c.is_ascii_lowercase()).count();
    if letters == 0 {
        return None;
    }
    let mut i = letters;
    // Optional `-<digits>tb`.
    if b.get(i) == Some(&b'-') {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits > 0 && b.get(i + 1 + digits) == Some(&b't') && b.get(i + 2 + digits) == Some(&b'b') {
            i += 3 + digits;
        }
    }
    let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || !name[i + digits..].contains('.') {
        return None;
    }
    Some((&name[..letters], &name[i..i + digits]))
}

fn single_kind(devices: &[GpuDeviceInfo]) -> Option<&GpuDeviceInfo> {
    match devices {
        [one] => Some(one),
        _ => None,
    }
}

fn in_or_dne(key: &str, value: Option<String>) -> Requirement {
    match value {
        Some(v) => Requirement::in_values(key, [v.as_str()]),
        None => Requirement::does_not_exist(key),
    }
}

/// Network bandwidth in Mbit/s: the sum of the cards' baseline bandwidth (upstream uses a static table that EC2
/// does not return; for the types both know the figures agree, e.g. m5.large 750).
pub fn network_bandwidth_mbps(info: &InstanceTypeInfo) -> Option<i64> {
    let total: f64 = info.network_info.network_cards.iter().filter_map(|c| c.baseline_bandwidth_in_gbps).sum();
    (total > 0.0).then(|| (total * 1000.0).round() as i64)
}

/// Whether the type can be launched with the node class (otherwise all its offerings are unavailable): AL2023 has
/// no a1 images; configured network interfaces must exist on the type (card and device indexes in range, efa-only
/// only where EFA is supported and within its EFA count).
pub fn compatible_with_node_class(info: &InstanceTypeInfo, node_class: &NodeClassSettings) -> bool {
    if node_class.ami_family == AmiFamily::Al2023 && info.instance_type.starts_with("a1.") {
        return false;
    }
    if node_class.network_interfaces.is_empty() {
        return true;
    }
    let n = &info.network_info;
    if n.ena_support.as_deref() == Some("unsupported") {
        return false;
    }
    let efa_only = node_class.network_interfaces.iter().filter(|(_, _, efa)| *efa).count() as i64;
    let max_efa = n.efa_info.as_ref().and_then(|e| e.maximum_efa_interfaces).unwrap_or(0);
    if efa_only > 0 && (n.efa_supported != Some(true) || efa_only > max_efa) {
        return false;
    }
    node_class.network_interfaces.iter().all(|(card, device, _)| {
        let max = if n.network_cards.is_empty() && *card == 0 {
            n.maximum_network_interfaces
        } else {
            n.network_cards
                .iter()
                .find(|c| c.network_card_index.unwrap_or(0) == *card)
                .and_then(|c| c.maximum_network_interfaces)
        };
        max.is_some_and(|m| *device < m)
    })
}

fn int(v: i64) -> Quantity {
    Quantity::from_int(v, Format::DecimalSI)
}

impl InstanceTypeContext {
    /// The zones offerings are built for: the type's offered zones ∩ the subnet zones.
    pub fn zones_of(&self, instance_type: &str) -> BTreeSet<&str> {
        self.zones
            .get(instance_type)
            .into_iter()
            .flatten()
            .filter(|z| self.subnet_zones.as_ref().is_none_or(|s| s.contains(*z)))
            .map(String::as_str)
            .collect()
    }

    /// The type's kubelet values. `maxPods`' expression sees the family default as `max_pods` (ENI-limited or
    /// 110, `podsPerCore` applied); the reserved expressions see the pods capacity that results.
    pub fn kubelet(&self, info: &InstanceTypeInfo) -> Result<ResolvedKubelet, KubeletExpressionError> {
        let nc = &self.node_class;
        let mut k = ResolvedKubelet {
            max_pods: nc.max_pods,
            kube_reserved: nc.kube_reserved.clone(),
            system_reserved: nc.system_reserved.clone(),
        };
        if nc.expressions.is_empty() {
            return Ok(k);
        }
        let mut vars = expression_variables(info, pods_capacity_for(info, nc, &self.settings, None));
        if let Some(m) = nc.expressions.max_pods(&vars)? {
            k.max_pods = Some(m);
        }
        vars.max_pods = pods_capacity_for(info, nc, &self.settings, k.max_pods);
        let reserved = nc.expressions.reserved(&vars)?;
        for (name, q) in reserved.kube_reserved.iter() {
            k.kube_reserved.insert(name, *q);
        }
        for (name, q) in reserved.system_reserved.iter() {
            k.system_reserved.insert(name, *q);
        }
        Ok(k)
    }

    /// Every kubelet expression evaluated for every supported type of `infos`: the first failure, naming the
    /// instance type and the expression (what `ValidationSucceeded` reports).
    pub fn check_expressions<'a>(
        &self,
        infos: impl IntoIterator<Item = &'a InstanceTypeInfo>,
    ) -> Result<(), KubeletExpressionError> {
        if self.node_class.expressions.is_empty() {
            return Ok(());
        }
        infos.into_iter().filter(|i| is_supported(i)).try_for_each(|i| self.kubelet(i).map(drop))
    }

    /// Capacity of the type under this node class, with its kubelet values `kubelet`.
    pub fn capacity(&self, info: &InstanceTypeInfo, kubelet: &ResolvedKubelet) -> ResourceList {
        let nc = &self.node_class;
        let vcpus = info.vcpu_info.default_vcpus.unwrap_or(0);
        let mut c = ResourceList::new()
            .with("cpu", int(vcpus))
            .with(
                "memory",
                Quantity::from_int(
                    memory_capacity_mib(info, self.settings.vm_memory_overhead_percent).saturating_mul(MIB),
                    Format::BinarySI,
                ),
            )
            .with("ephemeral-storage", ephemeral_storage(info, nc))
            .with("pods", int(pods_capacity_for(info, nc, &self.settings, kubelet.max_pods)));
        let mut add = |name: &str, v: i64| {
            if v > 0 {
                let cur = c.get(name).and_then(Quantity::value).unwrap_or(0);
                c.insert(name, int(cur.saturating_add(v)));
            }
        };
        for g in info.gpu_info.iter().flat_map(|g| &g.gpus) {
            let name = match g.manufacturer.as_deref().map(str::to_ascii_lowercase).as_deref() {
                Some("nvidia") => resources::NVIDIA_GPU,
                Some("amd") => resources::AMD_GPU,
                Some("habana") => resources::HABANA_GAUDI,
                _ => continue,
            };
            add(name, g.count.unwrap_or(0));
        }
        for d in info.neuron_info.iter().flat_map(|n| &n.neuron_devices) {
            let count = d.count.unwrap_or(0);
            add(resources::AWS_NEURON, count);
            add(
                resources::AWS_NEURON_CORE,
                count.saturating_mul(d.core_info.as_ref().and_then(|c| c.count).unwrap_or(0)),
            );
        }
        add(resources::EFA, efa_interfaces(info, nc));
        add(resources::POD_ENI, self.branch_interfaces.get(&info.instance_type).copied().unwrap_or(0));
        if nc.ami_family.is_windows() {
            add(resources::PRIVATE_IPV4_ADDRESS, info.network_info.ipv4_addresses_per_interface.unwrap_or(0) - 1);
        }
        c
    }

    /// kube-reserved, system-reserved and hard eviction thresholds for a type with `capacity` and kubelet values
    /// `kubelet`.
    pub fn overhead(&self, info: &InstanceTypeInfo, capacity: &ResourceList, kubelet: &ResolvedKubelet) -> Overhead {
        let nc = &self.node_class;
        let pods_for_memory = match nc.ami_family {
            AmiFamily::Al2 | AmiFamily::Al2023 | AmiFamily::Custom => eni_limited_pods(info, 0, nc.efa_only_on_card(0)),
            _ => capacity.pods().value().unwrap_or(0),
        };
        let mut kube_reserved = ResourceList::new()
            .with("cpu", Quantity::from_milli(kube_reserved_cpu_millis(info.vcpu_info.default_vcpus.unwrap_or(0))))
            .with("memory", Quantity::from_int(kube_reserved_memory_mib(pods_for_memory) * MIB, Format::BinarySI))
            .with("ephemeral-storage", Quantity::from_int(GIB, Format::BinarySI));
        for (k, v) in kubelet.kube_reserved.iter() {
            kube_reserved.insert(k, *v);
        }
        let memory = capacity.memory().value().unwrap_or(0);
        let storage = capacity.ephemeral_storage().value().unwrap_or(0);
        let eviction_threshold = ResourceList::new()
            .with(
                "memory",
                nc.eviction_memory
                    .as_ref()
                    .map_or(Quantity::from_int(100 * MIB, Format::BinarySI), |t| t.bytes(memory)),
            )
            .with(
                "ephemeral-storage",
                nc.eviction_nodefs.as_ref().unwrap_or(&Threshold::Percent(1_000)).bytes(storage),
            );
        Overhead { kube_reserved, system_reserved: kubelet.system_reserved.clone(), eviction_threshold }
    }

    /// The type's labels as requirements (every AWS well-known key: `In` one value, or `DoesNotExist`), with zone
    /// and capacity-type covering `offerings`.
    pub fn requirements(&self, info: &InstanceTypeInfo, offerings: &[Offering]) -> Requirements {
        let name = info.instance_type.as_str();
        let nc = &self.node_class;
        let arch = architecture(info).unwrap_or("amd64");
        let os = if nc.ami_family.is_windows() && arch == "amd64" { "windows" } else { "linux" };
        let zones: BTreeSet<&str> = offerings.iter().filter_map(Offering::zone).collect();
        let capacity_types: BTreeSet<&str> = offerings.iter().filter_map(Offering::capacity_type).collect();
        let (family, size) = match name.split_once('.') {
            Some((f, s)) => (Some(f.to_owned()), Some(s.to_owned())),
            None => (None, None),
        };
        let (category, generation) = match category_and_generation(name) {
            Some((c, g)) => (Some(c.to_owned()), Some(g.to_owned())),
            None => (None, None),
        };
        let gpu = info.gpu_info.as_ref().and_then(|g| single_kind(&g.gpus));
        let neuron = info.neuron_info.as_ref().and_then(|n| match n.neuron_devices.as_slice() {
            [one] => Some(one),
            _ => None,
        });
        let inference = info.inference_accelerator_info.as_ref().and_then(|a| single_kind(&a.accelerators));
        let (acc_name, acc_manufacturer, acc_count) = match (neuron, inference) {
            (Some(d), _) => (d.name.as_deref().map(lower_kebab), Some("aws".to_owned()), d.count),
            (None, Some(a)) => {
                (a.name.as_deref().map(lower_kebab), a.manufacturer.as_deref().map(lower_kebab), a.count)
            }
            (None, None) => (None, None, None),
        };
        let ebs = info
            .ebs_info
            .as_ref()
            .filter(|e| e.ebs_optimized_support.as_deref() == Some("default"))
            .and_then(|e| e.ebs_optimized_info.as_ref()?.maximum_bandwidth_in_mbps);
        let local_nvme = info
            .instance_storage_info
            .as_ref()
            .filter(|s| s.nvme_support.as_deref().is_some_and(|n| n != "unsupported"))
            .and_then(|s| s.total_size_in_gb);
        let zone_ids: BTreeSet<&str> = zones.iter().filter_map(|z| self.zone_ids.get(*z)).map(String::as_str).collect();
        let mut reqs: Requirements = [
            Requirement::in_values(INSTANCE_TYPE, [name]),
            Requirement::in_values(ARCH, [arch]),
            Requirement::in_values(OS, [os]),
            Requirement::in_values(ZONE, zones.iter().copied()),
            Requirement::in_values(REGION, [self.region.as_str()]),
            in_or_dne(WINDOWS_BUILD, windows_build(nc.ami_family).map(str::to_owned)),
            Requirement::in_values(CAPACITY_TYPE, capacity_types.iter().copied()),
            Requirement::in_values(aws_labels::INSTANCE_TENANCY, ["default", "dedicated"]),
            Requirement::in_values(
                aws_labels::INSTANCE_CPU,
                [info.vcpu_info.default_vcpus.unwrap_or(0).to_string().as_str()],
            ),
            in_or_dne(
                aws_labels::INSTANCE_CPU_MANUFACTURER,
                info.processor_info.manufacturer.as_deref().map(lower_kebab),
            ),
            in_or_dne(
                aws_labels::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
                info.processor_info.sustained_clock_speed_in_ghz.map(|g| ((g * 1000.0).round() as i64).to_string()),
            ),
            Requirement::in_values(
                aws_labels::INSTANCE_MEMORY,
                [info.memory_info.size_in_mib.unwrap_or(0).to_string().as_str()],
            ),
            in_or_dne(aws_labels::INSTANCE_EBS_BANDWIDTH, ebs.map(|v| v.to_string())),
            in_or_dne(aws_labels::INSTANCE_NETWORK_BANDWIDTH, network_bandwidth_mbps(info).map(|v| v.to_string())),
            in_or_dne(aws_labels::INSTANCE_CATEGORY, category),
            in_or_dne(aws_labels::INSTANCE_GENERATION, generation),
            in_or_dne(aws_labels::INSTANCE_CAPABILITY_FLEX, family.as_ref().map(|f| f.contains("-flex").to_string())),
            in_or_dne(aws_labels::INSTANCE_FAMILY, family),
            in_or_dne(aws_labels::INSTANCE_SIZE, size),
            in_or_dne(aws_labels::INSTANCE_HYPERVISOR, info.hypervisor.clone().filter(|h| !h.is_empty())),
            in_or_dne(
                aws_labels::NITRO_SANDBOX,
                info.nitro_enclaves_support.as_deref().map(|s| (s == "supported").to_string()),
            ),
            Requirement::in_values(
                aws_labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
                [info.network_info.encryption_in_transit_supported.unwrap_or(false).to_string().as_str()],
            ),
            in_or_dne(aws_labels::INSTANCE_LOCAL_NVME, local_nvme.map(|v| v.to_string())),
            in_or_dne(aws_labels::INSTANCE_GPU_NAME, gpu.and_then(|g| g.name.as_deref()).map(lower_kebab)),
            in_or_dne(
                aws_labels::INSTANCE_GPU_MANUFACTURER,
                gpu.and_then(|g| g.manufacturer.as_deref()).map(lower_kebab),
            ),
            in_or_dne(aws_labels::INSTANCE_GPU_COUNT, gpu.and_then(|g| g.count).map(|v| v.to_string())),
            in_or_dne(
                aws_labels::INSTANCE_GPU_MEMORY,
                gpu.and_then(|g| g.memory_info.as_ref()?.size_in_mib).map(|v| v.to_string()),
            ),
            in_or_dne(aws_labels::INSTANCE_ACCELERATOR_NAME, acc_name),
            in_or_dne(aws_labels::INSTANCE_ACCELERATOR_MANUFACTURER, acc_manufacturer),
            in_or_dne(aws_labels::INSTANCE_ACCELERATOR_COUNT, acc_count.map(|v| v.to_string())),
            Requirement::does_not_exist(aws_labels::CAPACITY_RESERVATION_ID),
            Requirement::does_not_exist(aws_labels::CAPACITY_RESERVATION_TYPE),
            Requirement::does_not_exist(aws_labels::CAPACITY_RESERVATION_INTERRUPTIBLE),
        ]
        .into_iter()
        .collect();
        if !zone_ids.is_empty() {
            reqs.add(Requirement::in_values(aws_labels::ZONE_ID, zone_ids));
        }
        reqs
    }

    /// Offerings: one per offered zone (∩ subnet zones) × capacity type (`on-demand`, `spot` as the type's usage
    /// classes allow). Priced from [`Self::prices`]; available iff priced, not in the ICE set, and the type is
    /// compatible with the node class.
    pub fn offerings(&self, info: &InstanceTypeInfo) -> Vec<Offering> {
        let name = info.instance_type.as_str();
        let compatible = compatible_with_node_class(info, &self.node_class);
        let mut out = Vec::new();
        for zone in self.zones_of(name) {
            for ct in [CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT] {
                if !info.supported_usage_classes.iter().any(|u| u == ct) {
                    continue;
                }
                let price = match &self.prices {
                    PriceSource::Estimate => Some(estimate(info)),
                    PriceSource::Table(t) if ct == CAPACITY_TYPE_SPOT => t.spot(name, zone),
                    PriceSource::Table(t) => t.on_demand(name),
                };
                let mut reqs: Requirements = [
                    Requirement::in_values(CAPACITY_TYPE, [ct]),
                    Requirement::in_values(ZONE, [zone]),
                    Requirement::does_not_exist(aws_labels::CAPACITY_RESERVATION_ID),
                ]
                .into_iter()
                .collect();
                if let Some(id) = self.zone_ids.get(zone) {
                    reqs.add(Requirement::in_values(aws_labels::ZONE_ID, [id.as_str()]));
                }
                let mut o = Offering::new(reqs, price.unwrap_or(f64::INFINITY));
                o.available = compatible
                    && price.is_some()
                    && !self.unavailable.contains(&(ct.to_owned(), name.to_owned(), zone.to_owned()));
                out.push(o);
            }
        }
        out
    }

    /// The instance type, or `None` when Karpenter does not consider it ([`is_supported`]) or a kubelet
    /// expression fails for it (the EC2NodeClass's `ValidationSucceeded` reports that and blocks launches).
    pub fn instance_type(&self, info: &InstanceTypeInfo) -> Option<InstanceType> {
        if !is_supported(info) {
            return None;
        }
        let kubelet = match self.kubelet(info) {
            Ok(k) => k,
            Err(e) => {
                tracing::debug!(error = %e, "instance type left out");
                return None;
            }
        };
        let capacity = self.capacity(info, &kubelet);
        let overhead = self.overhead(info, &capacity, &kubelet);
        let offerings = self.offerings(info);
        let requirements = self.requirements(info, &offerings);
        let it = InstanceType::new(info.instance_type.clone(), requirements, offerings, capacity, overhead);
        if !self.dra.any() {
            return Some(it);
        }
        Some(it.with_dynamic_resources(self.dra.templates(info, &self.node_class)))
    }

    /// Every supported type of `infos`, sorted by name.
    pub fn instance_types<'a>(&self, infos: impl IntoIterator<Item = &'a InstanceTypeInfo>) -> Vec<InstanceType> {
        let mut out: Vec<InstanceType> = infos.into_iter().filter_map(|i| self.instance_type(i)).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod upstream_expectations;
