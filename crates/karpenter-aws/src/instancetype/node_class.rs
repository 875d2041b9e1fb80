//! The parts of an EC2NodeClass that shape instance types ([`NodeClassSettings`]), read from its spec once, with
//! the kubelet's eviction [`Threshold`]s and the [`InstanceTypeError`] of a spec that cannot be used.
//!
//! A module below the conversion ([`super`]) and the DRA slice templates ([`crate::dynamic_resources`]), which
//! both read it.

use std::collections::BTreeMap;

use karpenter_requirements::{Format, Quantity, ResourceList};

use crate::api::{
    AmiFamily, BlockDeviceMapping, EC2NodeClassSpec, InstanceStorePolicy, InterfaceType, MaxPods, ReservedValue,
};
use crate::kubelet_cel::{KubeletExpressionError, KubeletExpressions};

/// A hard-eviction threshold: a percentage of capacity or an absolute quantity.
#[derive(Clone, Debug, PartialEq)]
pub enum Threshold {
    /// Hundredths of a percent (`7.5%` is 750).
    Percent(i64),
    /// An absolute quantity.
    Quantity(Quantity),
}

impl Threshold {
    /// Parses `7.5%` or `500Mi`.
    pub fn parse(s: &str) -> Option<Threshold> {
        if let Some(p) = s.strip_suffix('%') {
            let (whole, frac) = p.split_once('.').unwrap_or((p, ""));
            if whole.is_empty() || frac.len() > 2 || !(whole.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit())) {
                return None;
            }
            let whole: i64 = whole.parse().ok()?;
            let frac: i64 = if frac.is_empty() { 0 } else { format!("{frac:0<2}").parse().ok()? };
            let hundredths = whole.checked_mul(100)?.checked_add(frac)?;
            return (hundredths <= 10_000).then_some(Threshold::Percent(hundredths));
        }
        s.parse::<Quantity>().ok().filter(|q| !q.is_negative()).map(Threshold::Quantity)
    }

    /// The threshold for a capacity of `capacity` bytes: percentages are rounded up, `100%` means 0.
    pub fn bytes(&self, capacity: i64) -> Quantity {
        match self {
            Threshold::Percent(10_000) => Quantity::from_int(0, Format::BinarySI),
            Threshold::Percent(h) => {
                let v = (i128::from(capacity.max(0)) * i128::from(*h) + 9_999) / 10_000;
                Quantity::from_int(i64::try_from(v).unwrap_or(i64::MAX), Format::BinarySI)
            }
            Threshold::Quantity(q) => *q,
        }
    }
}

/// A node class whose settings cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceTypeError {
    /// A kubelet reserved or eviction value that is not a valid quantity or percentage.
    #[error("kubelet {field}[{key}] = {value:?} is not a valid {expected}")]
    InvalidKubeletValue {
        /// `kubeReserved`, `systemReserved` or `evictionHard`.
        field: &'static str,
        /// The map key.
        key: String,
        /// The value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A kubelet CEL expression that does not compile (only with the `NodeClassCEL` gate).
    #[error(transparent)]
    KubeletExpression(#[from] KubeletExpressionError),
}

/// The parts of an EC2NodeClass that shape instance types, parsed once.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeClassSettings {
    /// The resolved AMI family (`amiFamily`, else the alias's; AL2023 when neither says).
    pub ami_family: AmiFamily,
    /// `kubelet.maxPods` when it is an int.
    pub max_pods: Option<i64>,
    /// The kubelet's CEL expressions (`maxPods` and reserved values), evaluated per instance type; empty unless
    /// the `NodeClassCEL` gate is on.
    pub expressions: KubeletExpressions,
    /// `kubelet.podsPerCore`.
    pub pods_per_core: Option<i64>,
    /// `kubelet.kubeReserved`'s quantities, overriding the computed defaults key by key.
    pub kube_reserved: ResourceList,
    /// `kubelet.systemReserved`'s quantities.
    pub system_reserved: ResourceList,
    /// `kubelet.evictionHard["memory.available"]`.
    pub eviction_memory: Option<Threshold>,
    /// `kubelet.evictionHard["nodefs.available"]`.
    pub eviction_nodefs: Option<Threshold>,
    /// `blockDeviceMappings`.
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// `instanceStorePolicy: RAID0`.
    pub instance_store_raid0: bool,
    /// `networkInterfaces` as (card, device, efa-only).
    pub network_interfaces: Vec<(i64, i64, bool)>,
}

impl Default for NodeClassSettings {
    fn default() -> Self {
        NodeClassSettings {
            ami_family: AmiFamily::Al2023,
            max_pods: None,
            expressions: KubeletExpressions::default(),
            pods_per_core: None,
            kube_reserved: ResourceList::new(),
            system_reserved: ResourceList::new(),
            eviction_memory: None,
            eviction_nodefs: None,
            block_device_mappings: Vec::new(),
            instance_store_raid0: false,
            network_interfaces: Vec::new(),
        }
    }
}

fn parse_reserved(field: &'static str, map: &BTreeMap<String, String>) -> Result<ResourceList, InstanceTypeError> {
    let mut out = ResourceList::new();
    for (k, v) in map {
        // Expressions are compiled separately (gate on) or ignored (gate off).
        let ReservedValue::Quantity(q) = ReservedValue::parse(v) else { continue };
        if q.is_negative() {
            return Err(InstanceTypeError::InvalidKubeletValue {
                field,
                key: k.clone(),
                value: v.clone(),
                expected: "non-negative quantity",
            });
        }
        out.insert(k, q);
    }
    Ok(out)
}

impl NodeClassSettings {
    /// Reads the settings of an EC2NodeClass spec; fails on negative reserved quantities and bad eviction
    /// thresholds (the CRD keeps them out of a real cluster). `cel` is the `NodeClassCEL` gate: on, the kubelet's
    /// expressions are compiled (a compile error fails); off, they are ignored (the family default maxPods, the
    /// expression-valued reserved entries dropped).
    pub fn from_spec(spec: &EC2NodeClassSpec, cel: bool) -> Result<NodeClassSettings, InstanceTypeError> {
        let mut s = NodeClassSettings {
            ami_family: spec.effective_ami_family().unwrap_or(AmiFamily::Al2023),
            block_device_mappings: spec.block_device_mappings.clone(),
            instance_store_raid0: spec.instance_store_policy == Some(InstanceStorePolicy::Raid0),
            network_interfaces: spec
                .network_interfaces
                .iter()
                .map(|n| {
                    (
                        i64::from(n.network_card_index),
                        i64::from(n.device_index),
                        n.interface_type == InterfaceType::EfaOnly,
                    )
                })
                .collect(),
            ..Default::default()
        };
        if let Some(k) = &spec.kubelet {
            s.max_pods = k.max_pods.as_ref().and_then(MaxPods::as_static).map(i64::from);
            if cel {
                s.expressions = KubeletExpressions::compile(k)?;
            }
            s.pods_per_core = k.pods_per_core.map(i64::from);
            s.kube_reserved = parse_reserved("kubeReserved", &k.kube_reserved)?;
            s.system_reserved = parse_reserved("systemReserved", &k.system_reserved)?;
            for (key, slot) in
                [("memory.available", &mut s.eviction_memory), ("nodefs.available", &mut s.eviction_nodefs)]
            {
                if let Some(v) = k.eviction_hard.get(key) {
                    *slot = Some(Threshold::parse(v).ok_or_else(|| InstanceTypeError::InvalidKubeletValue {
                        field: "evictionHard",
                        key: key.to_owned(),
                        value: v.clone(),
                        expected: "quantity or percentage",
                    })?);
                }
            }
        }
        Ok(s)
    }

    /// The EFA-only interfaces the class puts on network card `card`.
    pub(crate) fn efa_only_on_card(&self, card: i64) -> i64 {
        self.network_interfaces.iter().filter(|(c, _, efa)| *c == card && *efa).count() as i64
    }
}
