//! DRA slice templates of EC2 instance types (AWS gates `DRANVIDIAGPU` and `DRAEFA`): the devices a node of the
//! type will publish once its DRA drivers run, so the scheduler can launch nodes for pods whose ResourceClaims
//! ask for NVIDIA GPUs or EFA interfaces (docs/dra.md, "AWS slice templates").
//!
//! Upstream's shape is unconfirmed (aws #9550 is a draft), so these are our choices, each from the best public
//! evidence:
//! * NVIDIA GPUs: driver `gpu.nvidia.com` (NVIDIA's DRA driver), one device per GPU named `gpu-0`, `gpu-1`, ...,
//!   with the attributes `type` = `"gpu"`, `index`, `productName` (EC2's model name, e.g. `A100`; the driver
//!   itself publishes the full marketing name), `brand` = `"NVIDIA"`, `architecture` (from the model, when known)
//!   and the capacity `memory` (EC2's per-GPU memory).
//! * EFA: driver `dra.networking.k8s.aws` (AWS's networking DRA driver, which serves EFA interfaces), one device
//!   per EFA interface the node gets (`efa-0`, ...), with `type` = `"efa"` and `index`. The count is the one of the
//!   `vpc.amazonaws.com/efa` extended resource ([`efa_interfaces`]).

use karpenter_requirements::{Device, DeviceAttribute, DeviceSliceTemplate, Format, Quantity};

use crate::ec2::InstanceTypeInfo;
use crate::instancetype::node_class::NodeClassSettings;
use crate::settings::AwsFeatureGates;

/// The NVIDIA GPU DRA driver.
pub const NVIDIA_GPU_DRIVER: &str = "gpu.nvidia.com";
/// The AWS networking DRA driver publishing EFA interfaces.
pub const EFA_DRIVER: &str = "dra.networking.k8s.aws";

/// Which drivers' slice templates instance types carry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DraTemplates {
    /// `DRANVIDIAGPU`.
    pub nvidia_gpu: bool,
    /// `DRAEFA`.
    pub efa: bool,
}

impl DraTemplates {
    /// The templates the AWS feature gates turn on.
    pub fn from_gates(gates: &AwsFeatureGates) -> Self {
        DraTemplates { nvidia_gpu: gates.dra_nvidia_gpu, efa: gates.dra_efa }
    }

    /// Whether any template is on.
    pub fn any(&self) -> bool {
        self.nvidia_gpu || self.efa
    }

    /// The slice templates of `info` under `node_class` (empty when the gates are off or the type has neither
    /// NVIDIA GPUs nor EFA).
    pub fn templates(&self, info: &InstanceTypeInfo, node_class: &NodeClassSettings) -> Vec<DeviceSliceTemplate> {
        let mut out = Vec::new();
        if self.nvidia_gpu {
            out.extend(nvidia_gpus(info));
        }
        if self.efa {
            out.extend(efa(efa_interfaces(info, node_class)));
        }
        out
    }
}

/// Why the DRA gates on in `gates` have no effect: DRA requests are ignored (`IGNORE_DRA_REQUESTS=true`), so no
/// pod's claims are simulated against the templates. `None` when they take effect or are off.
pub fn dra_gates_unused(gates: &AwsFeatureGates, ignore_dra_requests: bool) -> Option<String> {
    let on: Vec<&str> = [("DRANVIDIAGPU", gates.dra_nvidia_gpu), ("DRAEFA", gates.dra_efa)]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
    (ignore_dra_requests && !on.is_empty()).then(|| {
        format!(
            "AWS feature gate(s) {} publish DRA slice templates, but IGNORE_DRA_REQUESTS=true: pods with resource \
             claims are not placed (set it to false to use them)",
            on.join(", ")
        )
    })
}

/// The EFA interfaces a node of `info` gets: the class's efa interfaces when it configures network interfaces,
/// else the type's maximum. Also the count of the `vpc.amazonaws.com/efa` extended resource.
pub fn efa_interfaces(info: &InstanceTypeInfo, node_class: &NodeClassSettings) -> i64 {
    if node_class.network_interfaces.is_empty() {
        info.network_info.efa_info.as_ref().and_then(|e| e.maximum_efa_interfaces).unwrap_or(0)
    } else {
        node_class.network_interfaces.iter().filter(|(_, _, efa)| *efa).count() as i64
    }
}

/// The GPU architecture of an EC2 GPU model name, for the models EC2 offers.
fn nvidia_architecture(model: &str) -> Option<&'static str> {
    let m = model.to_ascii_uppercase();
    Some(match m.as_str() {
        "K80" => "Kepler",
        "M60" => "Maxwell",
        "V100" => "Volta",
        "T4" | "T4G" => "Turing",
        "A10G" | "A100" => "Ampere",
        "L4" | "L40S" => "Ada Lovelace",
        "H100" | "H200" => "Hopper",
        _ if m.starts_with('B') || m.starts_with("GB") => "Blackwell",
        _ => return None,
    })
}

fn nvidia_gpus(info: &InstanceTypeInfo) -> Option<DeviceSliceTemplate> {
    let mut devices = Vec::new();
    let nvidia = info
        .gpu_info
        .iter()
        .flat_map(|g| &g.gpus)
        .filter(|g| g.manufacturer.as_deref().is_some_and(|m| m.eq_ignore_ascii_case("nvidia")));
    for kind in nvidia {
        for _ in 0..kind.count.unwrap_or(0).max(0) {
            let index = devices.len() as i64;
            let mut device = Device::named(format!("gpu-{index}"))
                .with_attribute("type", DeviceAttribute::String("gpu".into()))
                .with_attribute("index", DeviceAttribute::Int(index))
                .with_attribute("brand", DeviceAttribute::String("NVIDIA".into()));
            if let Some(name) = &kind.name {
                device = device.with_attribute("productName", DeviceAttribute::String(name.clone()));
                if let Some(arch) = nvidia_architecture(name) {
                    device = device.with_attribute("architecture", DeviceAttribute::String(arch.into()));
                }
            }
            if let Some(mib) = kind.memory_info.as_ref().and_then(|m| m.size_in_mib) {
                let bytes = Quantity::from_int(mib.saturating_mul(1 << 20), Format::BinarySI);
                device = device.with_capacity("memory", bytes);
            }
            devices.push(device);
        }
    }
    (!devices.is_empty()).then(|| DeviceSliceTemplate {
        driver: NVIDIA_GPU_DRIVER.into(),
        devices,
        ..Default::default()
    })
}

fn efa(count: i64) -> Option<DeviceSliceTemplate> {
    let devices: Vec<Device> = (0..count.max(0))
        .map(|i| {
            Device::named(format!("efa-{i}"))
                .with_attribute("type", DeviceAttribute::String("efa".into()))
                .with_attribute("index", DeviceAttribute::Int(i))
        })
        .collect();
    (!devices.is_empty()).then(|| DeviceSliceTemplate { driver: EFA_DRIVER.into(), devices, ..Default::default() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ec2::{EfaInfo, GpuDeviceInfo, GpuInfo, MemoryInfo};

    fn p4d() -> InstanceTypeInfo {
        let mut info = InstanceTypeInfo { instance_type: "p4d.24xlarge".into(), ..Default::default() };
        info.gpu_info = Some(GpuInfo {
            gpus: vec![GpuDeviceInfo {
                name: Some("A100".into()),
                manufacturer: Some("NVIDIA".into()),
                count: Some(8),
                memory_info: Some(MemoryInfo { size_in_mib: Some(40960) }),
            }],
            total_gpu_memory_in_mib: Some(327680),
        });
        info.network_info.efa_supported = Some(true);
        info.network_info.efa_info = Some(EfaInfo { maximum_efa_interfaces: Some(4) });
        info
    }

    #[test]
    fn gates_off_publish_nothing() {
        assert!(DraTemplates::default().templates(&p4d(), &NodeClassSettings::default()).is_empty());
        let gates: AwsFeatureGates = "DRANVIDIAGPU=true".parse().expect("gates");
        assert_eq!(DraTemplates::from_gates(&gates), DraTemplates { nvidia_gpu: true, efa: false });
    }

    #[test]
    fn nvidia_gpus_one_device_each_with_memory() {
        let t = DraTemplates { nvidia_gpu: true, efa: false }.templates(&p4d(), &NodeClassSettings::default());
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].driver, "gpu.nvidia.com");
        let names: Vec<&str> = t[0].devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7"]);
        let last = &t[0].devices[7];
        assert_eq!(last.attributes["productName"], DeviceAttribute::String("A100".into()));
        assert_eq!(last.attributes["architecture"], DeviceAttribute::String("Ampere".into()));
        assert_eq!(last.attributes["type"], DeviceAttribute::String("gpu".into()));
        assert_eq!(last.attributes["index"], DeviceAttribute::Int(7));
        assert_eq!(last.capacity["memory"].to_string(), "40Gi");
    }

    #[test]
    fn other_gpus_are_not_nvidias() {
        let mut info = p4d();
        if let Some(g) = info.gpu_info.as_mut() {
            g.gpus[0].manufacturer = Some("AMD".into());
        }
        assert!(
            DraTemplates { nvidia_gpu: true, efa: false }.templates(&info, &NodeClassSettings::default()).is_empty()
        );
    }

    #[test]
    fn efa_interfaces_follow_the_type_or_the_node_class() {
        let gates = DraTemplates { nvidia_gpu: false, efa: true };
        let t = gates.templates(&p4d(), &NodeClassSettings::default());
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].driver, EFA_DRIVER);
        assert_eq!(t[0].devices.len(), 4);
        assert_eq!(t[0].devices[3].name, "efa-3");
        assert_eq!(t[0].devices[3].attributes["type"], DeviceAttribute::String("efa".into()));
        // A class with explicit interfaces: one EFA device per efa interface it configures.
        let nc = NodeClassSettings { network_interfaces: vec![(0, 0, false), (1, 0, true)], ..Default::default() };
        assert_eq!(gates.templates(&p4d(), &nc)[0].devices.len(), 1);
        let mut no_efa = p4d();
        no_efa.network_info.efa_info = None;
        assert!(gates.templates(&no_efa, &NodeClassSettings::default()).is_empty());
    }
}
