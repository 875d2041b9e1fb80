//! The kwok instance-type catalogue: upstream's generic, cloud-neutral instance types (the set its kwok provider
//! embeds) and a loader for upstream's kwok instance-type JSON.
//!
//! [`KwokCloudProvider`](crate::KwokCloudProvider) launches from these instance types (the built-in ones unless
//! [`KwokOptions`](crate::KwokOptions) name others), picking with `karpenter_cloudprovider::cheapest_launch`;
//! `simulate` evaluates NodePools against them; tests get them, and the in-memory fake provider over them, from
//! `karpenter_testing::kwok` (feature `kwok`).
//!
//! # The built-in catalogue ([`catalogue`])
//!
//! 144 instance types: every CPU count in [`CPUS`] × memory of 2, 4 or 8 GiB per vCPU ([`MEMORY_FACTORS`]) ×
//! `linux`/`windows` × `amd64`/`arm64`, named `<family>-<cpu>x-<arch>-<os>` with family `c` (2 GiB per vCPU),
//! `s` (4) or `m` (8), e.g. `c-4x-amd64-linux`. Each has
//!
//! * capacity: `cpu`, `memory` (GiB), `pods` = min(16 × CPU, 1024), `ephemeral-storage` = 20Gi;
//! * overhead: kube-reserved `cpu: 100m`, `memory: 10Mi` (so allocatable is capacity minus that);
//! * requirements: `node.kubernetes.io/instance-type`, `kubernetes.io/arch`, `kubernetes.io/os`, the zones and
//!   capacity types of its offerings, and the kwok labels `karpenter.kwok.sh/instance-size` (the CPU count, as
//!   upstream derives it for names that are not `<family>.<size>`), `karpenter.kwok.sh/instance-family`
//!   (`c`/`s`/`m`), `karpenter.kwok.sh/instance-cpu` and `karpenter.kwok.sh/instance-memory` (the memory quantity,
//!   e.g. `8Gi`);
//! * 8 offerings: zones `test-zone-a` … `test-zone-d` ([`ZONES`]) × `spot`/`on-demand`, all available; on-demand
//!   price = 0.025 per vCPU + 0.001 per GB (10⁹ bytes) of memory per hour, spot = 0.7 × on-demand.
//!
//! # Upstream's JSON ([`load_instance_types_json`])
//!
//! A list of `{name, offerings: [{Price, Available, Requirements: [{key, operator, values}]}], architecture,
//! operatingSystems, resources: {cpu, memory, pods, ephemeral-storage, ...}}`, the format of upstream's
//! `kwok/cloudprovider/instance_types.json` (and the older `{CapacityType, Zone, Price, Available}` offering form).
//! Instance types are built exactly like the built-in ones (labels derived from the name and resources, `pods`
//! defaulting to 110, the same overhead). Two deliberate differences from upstream's loader: an offering's
//! `Available` is honoured (upstream forces every offering available; absent means available), and every offering
//! must name exactly one zone and one capacity type (upstream's files always do; an offering without them could
//! not be launched). Errors name the entry (index and name) and the field.
//!
//! Two extensions. An entry may carry `requirements` (`[{key, operator, values}]`, the NodePool requirement shape
//! without `minValues`): further labels of the type, intersected with the derived ones, e.g. the `size`,
//! `special` and `integer` labels of upstream's fake test instance types
//! (`bins/karpenter-controller/tests/fixtures/upstream-specs/*.json`). [`to_instance_types_json`] does not write
//! them back. An entry may also carry `dynamicResources`, the DRA slice templates of the type (a list of
//! `{driver, devices: [{name, attributes: {id: {string|int|bool|version: ...}}, capacity: {id: {value: ...}}}]}`,
//! a ResourceSlice's devices in their `resource.k8s.io/v1` shape). The DRA simulation offers those devices on
//! nodes of the type not launched or not initialized yet. The built-in catalogue has none.
//!
//! Offerings may carry upstream v1.14's overrides under the names of upstream's `Offering` fields (which
//! upstream's kwok loader reads and then drops; we honour them): `CapacityOverride`, a resource map merged into
//! the type's capacity for that offering, and `OverheadOverride` (`{KubeReserved, SystemReserved,
//! EvictionThreshold}`, each a resource map) merged into the type's overhead; camelCase is read too. The
//! scheduler fits pods per group of offerings with equal overrides (`InstanceType::offering_groups` in
//! karpenter-requirements). A bad quantity names the offering (its index, zone and capacity type) and the
//! resource.

use std::collections::BTreeSet;

use crate::labels as kwok_labels;
use k8s_openapi::api::core::v1::Taint;
use karpenter_api::labels::{
    ARCH, CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, INSTANCE_TYPE, OS, ZONE,
};
use karpenter_requirements::labels::RESERVATION_ID;
use karpenter_requirements::{
    CounterSet, Device, DeviceAttribute, DeviceSliceTemplate, Format, InstanceType, Offering, Operator, Overhead,
    Quantity, Requirement, Requirements, ResourceList,
};
use serde::Deserialize;
use serde_json::Value;

/// The zones of the built-in catalogue.
pub const ZONES: [&str; 4] = ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"];
/// The vCPU counts of the built-in catalogue.
pub const CPUS: [i64; 12] = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256];
/// GiB of memory per vCPU, with the family letter each gives the name.
pub const MEMORY_FACTORS: [(i64, &str); 3] = [(2, "c"), (4, "s"), (8, "m")];
/// Operating systems of the built-in catalogue.
pub const OPERATING_SYSTEMS: [&str; 2] = ["linux", "windows"];
/// Architectures of the built-in catalogue.
pub const ARCHITECTURES: [&str; 2] = ["amd64", "arm64"];
/// On-demand price per vCPU-hour.
pub const PRICE_PER_CPU: f64 = 0.025;
/// On-demand price per GB-hour of memory (GB = 10⁹ bytes, as upstream).
pub const PRICE_PER_GB: f64 = 0.001;
/// Spot price as a fraction of on-demand.
pub const SPOT_DISCOUNT: f64 = 0.7;
/// Provider ids of kwok instances start with this.
pub const PROVIDER_ID_PREFIX: &str = "kwok://";
/// Pods per node when an instance type does not say (Kubernetes' default).
pub const DEFAULT_PODS: i64 = 110;

/// On-demand hourly price of a shape: 0.025 per vCPU + 0.001 per GB (10⁹ bytes) of memory.
pub fn on_demand_price(cpu: &Quantity, memory: &Quantity) -> f64 {
    // nanos → units: cpu in cores, memory in bytes.
    let cores = cpu.as_nanos() as f64 / 1e9;
    let bytes = memory.as_nanos() as f64 / 1e9;
    PRICE_PER_CPU * cores + PRICE_PER_GB * bytes / 1e9
}

/// The built-in catalogue (144 instance types, see the module docs), in upstream's order: CPU, memory factor, OS,
/// architecture.
pub fn catalogue() -> Vec<InstanceType> {
    let mut out = Vec::with_capacity(CPUS.len() * MEMORY_FACTORS.len() * 4);
    for cpu in CPUS {
        for (factor, family) in MEMORY_FACTORS {
            for os in OPERATING_SYSTEMS {
                for arch in ARCHITECTURES {
                    let name = format!("{family}-{cpu}x-{arch}-{os}");
                    let cpu_q = Quantity::from_int(cpu, Format::DecimalSI);
                    let mem_q = Quantity::from_int(cpu * factor * (1 << 30), Format::BinarySI);
                    let price = on_demand_price(&cpu_q, &mem_q);
                    let mut offerings = Vec::with_capacity(ZONES.len() * 2);
                    for zone in ZONES {
                        for ct in [CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND] {
                            let p = if ct == CAPACITY_TYPE_SPOT { price * SPOT_DISCOUNT } else { price };
                            offerings.push(offering(zone, ct, p, true));
                        }
                    }
                    let capacity = ResourceList::new()
                        .with("cpu", cpu_q)
                        .with("memory", mem_q)
                        .with("pods", Quantity::from_int((cpu * 16).min(1024), Format::DecimalSI))
                        .with("ephemeral-storage", Quantity::from_int(20 << 30, Format::BinarySI));
                    out.push(build(name, arch, &[os], offerings, capacity, Vec::new()));
                }
            }
        }
    }
    out
}

/// An offering in `zone` with capacity type `ct`.
pub fn offering(zone: &str, ct: &str, price: f64, available: bool) -> Offering {
    let reqs: Requirements =
        [Requirement::in_values(CAPACITY_TYPE, [ct]), Requirement::in_values(ZONE, [zone])].into_iter().collect();
    Offering { available, ..Offering::new(reqs, price) }
}

/// The kwok overhead of every instance type: kube-reserved `cpu: 100m`, `memory: 10Mi`.
pub fn overhead() -> Overhead {
    Overhead {
        kube_reserved: ResourceList::new()
            .with("cpu", Quantity::from_milli(100))
            .with("memory", Quantity::from_int(10 << 20, Format::BinarySI)),
        ..Overhead::default()
    }
}

/// `instance-size` as upstream derives it: the size of an AWS-style `<family>.<size>` name, else the CPU count.
fn size_label(name: &str, cpu: &str) -> String {
    if let Some((family, size)) = name.split_once('.') {
        let family_ok = !family.is_empty() && family.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let size_ok = matches!(size, "nano" | "micro" | "small" | "medium" | "large" | "metal")
            || size.strip_suffix("xlarge").is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()));
        if family_ok && size_ok {
            return size.to_owned();
        }
    }
    cpu.to_owned()
}

/// `instance-family` as upstream derives it: the name up to the first `.` or `-`, else its first character.
fn family_label(name: &str) -> String {
    match name.split_once(['.', '-']) {
        Some((family, _)) => family.to_owned(),
        None => name.chars().next().map(String::from).unwrap_or_default(),
    }
}

/// Builds an instance type the way upstream's kwok provider does (requirements from the name, resources and
/// offerings; the kwok overhead), then narrows them by `extra` (the file's per-type `requirements`). `capacity`
/// must hold `cpu` and `memory`.
fn build(
    name: String,
    arch: &str,
    oses: &[&str],
    offerings: Vec<Offering>,
    capacity: ResourceList,
    extra: Vec<Requirement>,
) -> InstanceType {
    let cpu = capacity.cpu().to_string();
    let memory = capacity.memory().to_string();
    let zones: BTreeSet<&str> = offerings.iter().filter_map(Offering::zone).collect();
    let cts: BTreeSet<&str> = offerings.iter().filter_map(Offering::capacity_type).collect();
    let mut reqs: Requirements = [
        Requirement::in_values(INSTANCE_TYPE, [name.as_str()]),
        Requirement::in_values(ARCH, [arch]),
        Requirement::in_values(OS, oses.iter().copied()),
        Requirement::in_values(ZONE, zones),
        Requirement::in_values(CAPACITY_TYPE, cts),
        Requirement::in_values(kwok_labels::INSTANCE_SIZE, [size_label(&name, &cpu)]),
        Requirement::in_values(kwok_labels::INSTANCE_FAMILY, [family_label(&name)]),
        Requirement::in_values(kwok_labels::INSTANCE_CPU, [cpu.as_str()]),
        Requirement::in_values(kwok_labels::INSTANCE_MEMORY, [memory.as_str()]),
    ]
    .into_iter()
    .collect();
    for r in extra {
        reqs.add(r);
    }
    InstanceType::new(name, reqs, offerings, capacity, overhead())
}

/// Why upstream-format instance-type JSON could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KwokCatalogueError {
    /// The text is not JSON, or not a JSON list.
    #[error("instance types JSON: {0}")]
    Syntax(#[source] serde_json::Error),
    /// One entry is malformed.
    #[error("instance types JSON: entry {index}{}: {field}: {message}", name.as_deref().map(|n| format!(" ({n:?})")).unwrap_or_default())]
    Entry {
        /// Position in the list (0-based).
        index: usize,
        /// The entry's `name`, when it has one.
        name: Option<String>,
        /// Path of the offending field inside the entry, e.g. `offerings[2].Requirements[0].operator`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Deserialize)]
struct RawInstanceType {
    name: String,
    #[serde(default)]
    offerings: Vec<RawOffering>,
    architecture: String,
    #[serde(rename = "operatingSystems")]
    operating_systems: Vec<String>,
    resources: std::collections::BTreeMap<String, Value>,
    /// DRA slice templates (a karpenter-rs extension; upstream's files have none).
    #[serde(rename = "dynamicResources", default)]
    dynamic_resources: Vec<RawSliceTemplate>,
    /// Further requirements of the type (a karpenter-rs extension): the labels a test catalogue's types carry
    /// beyond the derived ones, e.g. upstream's fake `size`/`special`/`integer`.
    #[serde(default)]
    requirements: Vec<RawRequirement>,
}

/// A DRA slice template: the devices one driver publishes on a node of the type, in a ResourceSlice's
/// `resource.k8s.io/v1` device shape (`attributes: {id: {string: ...}}`, `capacity: {id: {value: ...}}`).
#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct RawSliceTemplate {
    driver: String,
    #[serde(default)]
    devices: Vec<RawDevice>,
    /// Counter sets the devices consume from (partitionable devices).
    #[serde(rename = "sharedCounters", default, skip_serializing_if = "Vec::is_empty")]
    shared_counters: Vec<RawCounterSet>,
}

type RawCounters = std::collections::BTreeMap<String, RawCapacity>;

/// A `sharedCounters` entry: `{name, counters: {id: {value}}}`.
#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct RawCounterSet {
    name: String,
    #[serde(default)]
    counters: RawCounters,
}

/// A device's `consumesCounters` entry: `{counterSet, counters: {id: {value}}}`.
#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct RawConsumption {
    #[serde(rename = "counterSet")]
    counter_set: String,
    #[serde(default)]
    counters: RawCounters,
}

#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct RawTaint {
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    effect: String,
}

#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    name: String,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    attributes: std::collections::BTreeMap<String, RawAttribute>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    capacity: std::collections::BTreeMap<String, RawCapacity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    taints: Vec<RawTaint>,
    #[serde(rename = "consumesCounters", default, skip_serializing_if = "Vec::is_empty")]
    consumes_counters: Vec<RawConsumption>,
}

#[derive(Deserialize, serde::Serialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAttribute {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bool: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    int: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    string: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<String>,
}

#[derive(Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
struct RawCapacity {
    value: String,
}

/// The slice templates of an entry; `Err((field, message))` names the bad field.
fn slice_templates(raw: &[RawSliceTemplate]) -> Result<Vec<DeviceSliceTemplate>, (String, String)> {
    let mut out = Vec::with_capacity(raw.len());
    for (i, t) in raw.iter().enumerate() {
        let path = format!("dynamicResources[{i}]");
        if t.driver.is_empty() {
            return Err((format!("{path}.driver"), "must not be empty".into()));
        }
        let mut devices = Vec::with_capacity(t.devices.len());
        for (j, d) in t.devices.iter().enumerate() {
            let dpath = format!("{path}.devices[{j}]");
            let mut device = Device::named(&d.name);
            for (key, a) in &d.attributes {
                let value = match (a.bool, a.int, &a.string, &a.version) {
                    (Some(b), None, None, None) => DeviceAttribute::Bool(b),
                    (None, Some(n), None, None) => DeviceAttribute::Int(n),
                    (None, None, Some(s), None) => DeviceAttribute::String(s.clone()),
                    (None, None, None, Some(v)) => DeviceAttribute::Version(v.clone()),
                    _ => {
                        let field = format!("{dpath}.attributes.{key}");
                        return Err((field, "exactly one of bool, int, string and version".into()));
                    }
                };
                device.attributes.insert(key.clone(), value);
            }
            device.capacity = parse_quantities(&format!("{dpath}.capacity"), &d.capacity)?;
            for (k, t) in d.taints.iter().enumerate() {
                if !karpenter_requirements::devices::DEVICE_TAINT_EFFECTS.contains(&t.effect.as_str()) {
                    return Err((
                        format!("{dpath}.taints[{k}].effect"),
                        format!("{:?}: NoSchedule or NoExecute", t.effect),
                    ));
                }
                let taint =
                    Taint { key: t.key.clone(), value: t.value.clone(), effect: t.effect.clone(), time_added: None };
                device.taints.push(taint);
            }
            let consumes = d.consumes_counters.iter().map(|c| (&c.counter_set, &c.counters));
            device.consumes_counters = counter_sets(&format!("{dpath}.consumesCounters"), consumes)?;
            devices.push(device);
        }
        let shared = t.shared_counters.iter().map(|c| (&c.name, &c.counters));
        let shared_counters = counter_sets(&format!("{path}.sharedCounters"), shared)?;
        out.push(DeviceSliceTemplate { driver: t.driver.clone(), devices, shared_counters });
    }
    Ok(out)
}

/// Counter sets from (name, counters) pairs (`sharedCounters` or `consumesCounters`); the error names the field.
fn counter_sets<'r>(
    path: &str,
    raw: impl Iterator<Item = (&'r String, &'r RawCounters)>,
) -> Result<Vec<CounterSet>, (String, String)> {
    let mut out = Vec::new();
    for (i, (name, raw_counters)) in raw.enumerate() {
        let counters = parse_quantities(&format!("{path}[{i}].counters"), raw_counters)?;
        out.push(CounterSet { name: name.clone(), counters });
    }
    Ok(out)
}

/// Quantities by name as the file gives them (`{name: {value}}`); the error names `path.<name>.value`.
fn parse_quantities(
    path: &str,
    raw: &RawCounters,
) -> Result<std::collections::BTreeMap<String, Quantity>, (String, String)> {
    raw.iter()
        .map(|(key, c)| {
            let q = c.value.parse().map_err(|e| (format!("{path}.{key}.value"), format!("{:?}: {e}", c.value)))?;
            Ok((key.clone(), q))
        })
        .collect()
}

/// Quantities by name as the file writes them (capacities and counters alike).
fn raw_quantities(quantities: &std::collections::BTreeMap<String, Quantity>) -> RawCounters {
    quantities.iter().map(|(k, q)| (k.clone(), RawCapacity { value: q.to_string() })).collect()
}

fn raw_slice_templates(templates: &[DeviceSliceTemplate]) -> Vec<RawSliceTemplate> {
    templates
        .iter()
        .map(|t| RawSliceTemplate {
            driver: t.driver.clone(),
            devices: t
                .devices
                .iter()
                .map(|d| RawDevice {
                    name: d.name.clone(),
                    attributes: d
                        .attributes
                        .iter()
                        .map(|(k, a)| {
                            let mut raw = RawAttribute::default();
                            match a {
                                DeviceAttribute::Bool(b) => raw.bool = Some(*b),
                                DeviceAttribute::Int(n) => raw.int = Some(*n),
                                DeviceAttribute::String(s) => raw.string = Some(s.clone()),
                                DeviceAttribute::Version(v) => raw.version = Some(v.clone()),
                            }
                            (k.clone(), raw)
                        })
                        .collect(),
                    capacity: raw_quantities(&d.capacity),
                    taints: d
                        .taints
                        .iter()
                        .map(|t| RawTaint { key: t.key.clone(), value: t.value.clone(), effect: t.effect.clone() })
                        .collect(),
                    consumes_counters: d
                        .consumes_counters
                        .iter()
                        .map(|c| RawConsumption { counter_set: c.name.clone(), counters: raw_quantities(&c.counters) })
                        .collect(),
                })
                .collect(),
            shared_counters: t
                .shared_counters
                .iter()
                .map(|c| RawCounterSet { name: c.name.clone(), counters: raw_quantities(&c.counters) })
                .collect(),
        })
        .collect()
}

#[derive(Deserialize)]
struct RawOffering {
    #[serde(rename = "Price", alias = "price")]
    price: f64,
    #[serde(rename = "Available", alias = "available", default)]
    available: Option<bool>,
    #[serde(rename = "Requirements", alias = "requirements", default)]
    requirements: Vec<RawRequirement>,
    /// Instances left in the capacity reservation of a `reserved` offering (upstream's `Offering` field).
    #[serde(rename = "ReservationCapacity", alias = "reservationCapacity", default)]
    reservation_capacity: Option<i64>,
    /// The older format's fields.
    #[serde(rename = "CapacityType", alias = "capacityType", default)]
    capacity_type: Option<String>,
    #[serde(rename = "Zone", alias = "zone", default)]
    zone: Option<String>,
    /// Upstream's `Offering.CapacityOverride` (v1.14): resources merged into the type's capacity for this
    /// offering. Upstream's kwok reads the field name but drops the value; we honour it.
    #[serde(rename = "CapacityOverride", alias = "capacityOverride", default)]
    capacity_override: Option<std::collections::BTreeMap<String, Value>>,
    /// Upstream's `Offering.OverheadOverride`: overhead merged into the type's for this offering.
    #[serde(rename = "OverheadOverride", alias = "overheadOverride", default)]
    overhead_override: Option<RawOverhead>,
}

/// Upstream's `InstanceTypeOverhead`, as an offering's overhead override.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverhead {
    #[serde(rename = "KubeReserved", alias = "kubeReserved", default)]
    kube_reserved: std::collections::BTreeMap<String, Value>,
    #[serde(rename = "SystemReserved", alias = "systemReserved", default)]
    system_reserved: std::collections::BTreeMap<String, Value>,
    #[serde(rename = "EvictionThreshold", alias = "evictionThreshold", default)]
    eviction_threshold: std::collections::BTreeMap<String, Value>,
}

/// A resource map (`{name: quantity}`, a quantity as a string or a number) of non-negative quantities. Errors:
/// (field under `path`, message).
fn resource_list(
    raw: &std::collections::BTreeMap<String, Value>,
    path: &str,
) -> Result<ResourceList, (String, String)> {
    let mut out = ResourceList::new();
    for (resource, v) in raw {
        let field = format!("{path}.{resource}");
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => return Err((field, format!("expected a quantity, got {other}"))),
        };
        let q: Quantity = text.parse().map_err(|e| (field.clone(), format!("{text:?}: {e}")))?;
        if q.is_negative() {
            return Err((field, format!("{text:?} is negative")));
        }
        out.insert(resource, q);
    }
    Ok(out)
}

/// An offering's overrides (`path` is the offering's, `offering` names it for people). Errors: (field, message).
fn overrides(
    o: &RawOffering,
    path: &str,
    offering: &str,
) -> Result<(Option<ResourceList>, Option<Overhead>), (String, String)> {
    let named = |(field, message): (String, String)| (field, format!("{message} (offering {offering})"));
    let capacity = o
        .capacity_override
        .as_ref()
        .map(|c| resource_list(c, &format!("{path}.CapacityOverride")))
        .transpose()
        .map_err(named)?;
    let overhead = match &o.overhead_override {
        None => None,
        Some(raw) => Some(Overhead {
            kube_reserved: resource_list(&raw.kube_reserved, &format!("{path}.OverheadOverride.KubeReserved"))
                .map_err(named)?,
            system_reserved: resource_list(&raw.system_reserved, &format!("{path}.OverheadOverride.SystemReserved"))
                .map_err(named)?,
            eviction_threshold: resource_list(
                &raw.eviction_threshold,
                &format!("{path}.OverheadOverride.EvictionThreshold"),
            )
            .map_err(named)?,
        }),
    };
    Ok((capacity, overhead))
}

#[derive(Deserialize)]
struct RawRequirement {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

/// The reservation capacity of an offering with requirements `reqs`: a `reserved` offering names exactly one
/// `karpenter.sh/reservation-id` (operator In) and has a `ReservationCapacity` of 0 or more (instances left, as
/// upstream's `Offering` has it); any other offering has neither. Errors: (field, message).
fn reservation(reqs: &Requirements, capacity: Option<i64>) -> Result<i32, (String, String)> {
    let reserved = reqs.get_ref(CAPACITY_TYPE).is_some_and(|r| r.has(CAPACITY_TYPE_RESERVED));
    let id = reqs.get_ref(RESERVATION_ID);
    if !reserved {
        return match (id, capacity) {
            (Some(_), _) | (_, Some(_)) => Err((
                "Requirements".into(),
                format!(
                    "{RESERVATION_ID} and ReservationCapacity belong to {CAPACITY_TYPE} {CAPACITY_TYPE_RESERVED} offerings only"
                ),
            )),
            _ => Ok(0),
        };
    }
    if !id.is_some_and(|r| r.operator() == Operator::In && r.values().len() == 1) {
        return Err((
            "Requirements".into(),
            format!("a {CAPACITY_TYPE_RESERVED} offering needs exactly one value of {RESERVATION_ID} (operator In)"),
        ));
    }
    match capacity {
        None => Err(("ReservationCapacity".into(), "required for a reserved offering (instances left in it)".into())),
        Some(n) => i32::try_from(n)
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| ("ReservationCapacity".into(), format!("{n} is not a number of instances"))),
    }
}

/// Loads upstream's kwok instance-type JSON (see the module docs). The result is in file order.
pub fn load_instance_types_json(json: &str) -> Result<Vec<InstanceType>, KwokCatalogueError> {
    let entries: Vec<Value> = serde_json::from_str(json).map_err(KwokCatalogueError::Syntax)?;
    let mut out = Vec::with_capacity(entries.len());
    let mut seen = BTreeSet::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let name = entry.get("name").and_then(Value::as_str).map(str::to_owned);
        let err =
            |field: String, message: String| KwokCatalogueError::Entry { index, name: name.clone(), field, message };
        let raw: RawInstanceType = serde_path_to_field(entry).map_err(|(field, message)| err(field, message))?;
        if raw.name.is_empty() {
            return Err(err("name".into(), "must not be empty".into()));
        }
        if !seen.insert(raw.name.clone()) {
            return Err(err("name".into(), "duplicate instance type name".into()));
        }
        if raw.architecture.is_empty() {
            return Err(err("architecture".into(), "must not be empty".into()));
        }
        let mut capacity = resource_list(&raw.resources, "resources").map_err(|(f, m)| err(f, m))?;
        for required in ["cpu", "memory"] {
            if capacity.get(required).is_none() {
                return Err(err(format!("resources.{required}"), "required".into()));
            }
        }
        if capacity.get("pods").is_none() {
            capacity.insert("pods", Quantity::from_int(DEFAULT_PODS, Format::DecimalSI));
        }
        let mut offerings = Vec::with_capacity(raw.offerings.len());
        for (i, o) in raw.offerings.iter().enumerate() {
            let path = format!("offerings[{i}]");
            if !o.price.is_finite() || o.price < 0.0 {
                return Err(err(format!("{path}.Price"), format!("{} is not a price", o.price)));
            }
            let mut reqs = Requirements::new();
            for (j, r) in o.requirements.iter().enumerate() {
                let rpath = format!("{path}.Requirements[{j}]");
                let op: Operator = r.operator.parse().map_err(|e| err(format!("{rpath}.operator"), format!("{e}")))?;
                let req = Requirement::new(&r.key, op, &r.values, None)
                    .map_err(|e| err(format!("{rpath}.values"), e.to_string()))?;
                reqs.add(req);
            }
            if let Some(ct) = &o.capacity_type {
                reqs.add(Requirement::in_values(CAPACITY_TYPE, [ct]));
            }
            if let Some(zone) = &o.zone {
                reqs.add(Requirement::in_values(ZONE, [zone]));
            }
            for key in [ZONE, CAPACITY_TYPE] {
                let single = reqs.get_ref(key).is_some_and(|r| r.operator() == Operator::In && r.values().len() == 1);
                if !single {
                    return Err(err(
                        format!("{path}.Requirements"),
                        format!("an offering needs exactly one value of {key} (operator In)"),
                    ));
                }
            }
            let reservation_capacity =
                reservation(&reqs, o.reservation_capacity).map_err(|(f, m)| err(format!("{path}.{f}"), m))?;
            let named = format!(
                "{}/{}",
                reqs.get_ref(ZONE).map(|r| r.any()).unwrap_or_default(),
                reqs.get_ref(CAPACITY_TYPE).map(|r| r.any()).unwrap_or_default()
            );
            let (capacity_override, overhead_override) = overrides(o, &path, &named).map_err(|(f, m)| err(f, m))?;
            offerings.push(Offering {
                available: o.available.unwrap_or(true),
                reservation_capacity,
                capacity_override,
                overhead_override,
                ..Offering::new(reqs, o.price)
            });
        }
        let oses: Vec<&str> = raw.operating_systems.iter().map(String::as_str).collect();
        let templates = slice_templates(&raw.dynamic_resources).map_err(|(field, message)| err(field, message))?;
        let mut extra = Vec::with_capacity(raw.requirements.len());
        for (j, r) in raw.requirements.iter().enumerate() {
            let rpath = format!("requirements[{j}]");
            let op: Operator = r.operator.parse().map_err(|e| err(format!("{rpath}.operator"), format!("{e}")))?;
            extra.push(
                Requirement::new(&r.key, op, &r.values, None)
                    .map_err(|e| err(format!("{rpath}.values"), e.to_string()))?,
            );
        }
        out.push(
            build(raw.name.clone(), &raw.architecture, &oses, offerings, capacity, extra)
                .with_dynamic_resources(templates),
        );
    }
    Ok(out)
}

/// Deserialises an entry, reporting the failing field's path (`offerings[1].Price`) and the message.
fn serde_path_to_field(entry: Value) -> Result<RawInstanceType, (String, String)> {
    if !entry.is_object() {
        return Err((".".into(), format!("expected an object, got {entry}")));
    }
    match serde_path_to_error::deserialize::<_, RawInstanceType>(entry) {
        Ok(raw) => Ok(raw),
        Err(e) => {
            let path = e.path().to_string();
            let message = e.into_inner().to_string();
            // A missing field is reported at its parent: name the field itself.
            let missing = message.strip_prefix("missing field `").and_then(|m| m.split_once('`')).map(|(f, _)| f);
            let path = match (path.as_str(), missing) {
                (".", Some(f)) => f.to_owned(),
                (_, Some(f)) => format!("{path}.{f}"),
                (".", None) => "(entry)".to_owned(),
                _ => path,
            };
            Err((path, message))
        }
    }
}

#[derive(serde::Serialize)]
struct OutInstanceType<'a> {
    name: &'a str,
    offerings: Vec<OutOffering>,
    architecture: String,
    #[serde(rename = "operatingSystems")]
    operating_systems: Vec<String>,
    resources: std::collections::BTreeMap<&'a str, String>,
    #[serde(rename = "dynamicResources", skip_serializing_if = "Vec::is_empty")]
    dynamic_resources: Vec<RawSliceTemplate>,
}

#[derive(serde::Serialize)]
struct OutOffering {
    #[serde(rename = "Price")]
    price: f64,
    #[serde(rename = "Available")]
    available: bool,
    #[serde(rename = "Requirements")]
    requirements: Vec<OutRequirement>,
    /// Only for reserved offerings.
    #[serde(rename = "ReservationCapacity", skip_serializing_if = "Option::is_none")]
    reservation_capacity: Option<i32>,
    #[serde(rename = "CapacityOverride", skip_serializing_if = "Option::is_none")]
    capacity_override: Option<std::collections::BTreeMap<String, String>>,
    #[serde(rename = "OverheadOverride", skip_serializing_if = "Option::is_none")]
    overhead_override: Option<OutOverhead>,
}

#[derive(serde::Serialize)]
struct OutOverhead {
    #[serde(rename = "KubeReserved", skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    kube_reserved: std::collections::BTreeMap<String, String>,
    #[serde(rename = "SystemReserved", skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    system_reserved: std::collections::BTreeMap<String, String>,
    #[serde(rename = "EvictionThreshold", skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    eviction_threshold: std::collections::BTreeMap<String, String>,
}

fn out_resources(list: &ResourceList) -> std::collections::BTreeMap<String, String> {
    list.iter().map(|(n, q)| (n.to_owned(), q.to_string())).collect()
}

#[derive(serde::Serialize)]
struct OutRequirement {
    key: String,
    operator: &'static str,
    values: Vec<String>,
}

/// Writes instance types in upstream's kwok JSON format (pretty-printed), e.g. the built-in catalogue as a
/// starting point for a custom `--instance-types` file. [`load_instance_types_json`] reads it back to the same
/// instance types (arch and OS come from the `kubernetes.io/arch` / `kubernetes.io/os` requirements; other
/// instance-type labels are derived again on load, as upstream does).
pub fn to_instance_types_json(instance_types: &[InstanceType]) -> String {
    let out: Vec<OutInstanceType<'_>> = instance_types
        .iter()
        .map(|it| OutInstanceType {
            name: &it.name,
            offerings: it
                .offerings
                .iter()
                .map(|o| OutOffering {
                    price: o.price,
                    available: o.available,
                    reservation_capacity: (o.capacity_type() == Some(CAPACITY_TYPE_RESERVED))
                        .then_some(o.reservation_capacity),
                    capacity_override: o.capacity_override.as_ref().map(out_resources),
                    overhead_override: o.overhead_override.as_ref().map(|h| OutOverhead {
                        kube_reserved: out_resources(&h.kube_reserved),
                        system_reserved: out_resources(&h.system_reserved),
                        eviction_threshold: out_resources(&h.eviction_threshold),
                    }),
                    requirements: o
                        .requirements
                        .iter()
                        .flat_map(|r| r.to_serialized())
                        .map(|r| OutRequirement { key: r.key, operator: r.operator.as_str(), values: r.values })
                        .collect(),
                })
                .collect(),
            architecture: it.requirements.get_ref(ARCH).map(|r| r.any()).unwrap_or_default(),
            operating_systems: it
                .requirements
                .get_ref(OS)
                .map(|r| r.values().iter().map(|v| v.to_string()).collect())
                .unwrap_or_default(),
            resources: it.capacity().iter().map(|(n, q)| (n, q.to_string())).collect(),
            dynamic_resources: raw_slice_templates(&it.dynamic_resources),
        })
        .collect();
    serde_json::to_string_pretty(&out).unwrap_or_else(|_| "[]".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_resources_load_write_and_fail_with_the_field() {
        let json = r#"[{"name": "g-1x", "architecture": "amd64", "operatingSystems": ["linux"],
            "resources": {"cpu": "4", "memory": "16Gi"},
            "offerings": [{"Price": 1, "Requirements": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}],
            "dynamicResources": [{"driver": "gpu.example.com", "devices": [
                {"name": "gpu-0", "attributes": {"model": {"string": "A100"}}, "capacity": {"memory": {"value": "80Gi"}}}]}]}]"#;
        let its = load_instance_types_json(json).expect("loads");
        let t = &its[0].dynamic_resources[0];
        assert_eq!(t.driver, "gpu.example.com");
        assert_eq!(t.devices[0].attributes.get("model"), Some(&DeviceAttribute::String("A100".into())));
        assert_eq!(t.devices[0].capacity.get("memory").map(ToString::to_string).as_deref(), Some("80Gi"));
        let again = load_instance_types_json(&to_instance_types_json(&its)).expect("reads back");
        assert_eq!(again[0].dynamic_resources, its[0].dynamic_resources);
        // Partitions, counters and taints (the ResourceSlice v1 device shape) load and write back too.
        let partitioned = json.replace(
            r#""capacity": {"memory": {"value": "80Gi"}}}]}]"#,
            r#""capacity": {"memory": {"value": "80Gi"}},
                "taints": [{"key": "maintenance", "effect": "NoSchedule"}],
                "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}]}],
              "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}]}]"#,
        );
        let its = load_instance_types_json(&partitioned).expect("loads");
        let t = &its[0].dynamic_resources[0];
        assert_eq!(t.shared_counters[0].counters["memory"].to_string(), "80Gi");
        assert_eq!(t.devices[0].consumes_counters[0].name, "gpu-0");
        assert_eq!(t.devices[0].taints[0].effect, "NoSchedule");
        let again = load_instance_types_json(&to_instance_types_json(&its)).expect("reads back");
        assert_eq!(again[0].dynamic_resources, its[0].dynamic_resources);
        let e = load_instance_types_json(&partitioned.replace("NoSchedule", "PreferNoSchedule")).expect_err("effect");
        assert!(e.to_string().contains("dynamicResources[0].devices[0].taints[0].effect"), "{e}");
        let bad = json.replace(r#"{"string": "A100"}"#, r#"{"string": "A100", "int": 1}"#);
        let e = load_instance_types_json(&bad).expect_err("two values").to_string();
        assert!(e.contains("dynamicResources[0].devices[0].attributes.model"), "{e}");
        assert!(catalogue().iter().all(|it| it.dynamic_resources.is_empty()), "the built-in catalogue has none");
    }
    #[test]
    fn per_type_requirements_narrow_the_derived_ones_and_bad_ones_name_the_field() {
        let json = r#"[{"name": "default-instance-type", "architecture": "amd64", "operatingSystems": ["linux"],
            "resources": {"cpu": "4", "memory": "4Gi"},
            "offerings": [{"Price": 1, "Requirements": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-1"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}],
            "requirements": [{"key": "size", "operator": "In", "values": ["small"]},
                {"key": "special", "operator": "DoesNotExist"},
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux", "windows"]}]}]"#;
        let its = load_instance_types_json(json).expect("loads");
        let reqs = &its[0].requirements;
        assert_eq!(label(&its[0], "size"), "small");
        assert_eq!(reqs.get_ref("special").map(|r| r.operator()), Some(Operator::DoesNotExist));
        // Intersected, not replaced: the OS stays the one the entry derives.
        assert_eq!(label(&its[0], OS), "linux");
        let bad = json.replace(r#""operator": "DoesNotExist""#, r#""operator": "Maybe""#);
        let e = load_instance_types_json(&bad).expect_err("bad operator").to_string();
        assert!(e.contains("requirements[1].operator"), "{e}");
    }

    #[test]
    fn offering_overrides_load_in_upstreams_field_names_round_trip_and_bad_ones_name_the_offering() {
        let json = r#"[{"name": "slotted", "architecture": "amd64", "operatingSystems": ["linux"],
            "resources": {"cpu": "4", "memory": "8Gi"},
            "offerings": [{"Price": 0.2, "Requirements": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]},
              {"Price": 0.2, "CapacityOverride": {"test.com/extended-slots": 4},
               "OverheadOverride": {"SystemReserved": {"memory": "1Gi"}}, "Requirements": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}]}]"#;
        let its = load_instance_types_json(json).expect("loads");
        let offs = &its[0].offerings;
        assert!(!offs[0].has_override());
        let q = |s: &str| s.parse::<Quantity>().unwrap();
        assert_eq!(offs[1].capacity_override.as_ref().and_then(|c| c.get("test.com/extended-slots")), Some(&q("4")));
        assert_eq!(offs[1].overhead_override.as_ref().map(|o| o.system_reserved.memory()), Some(q("1Gi")));
        // The override group: the kwok overhead's 10Mi of memory replaced by 1Gi, its 100m of CPU kept.
        let groups = its[0].offering_groups();
        assert_eq!(groups.len(), 2);
        let slotted = &groups[1].allocatable;
        assert_eq!((slotted.cpu(), slotted.memory()), (q("3900m"), q("7Gi")));
        assert_eq!(slotted.get("test.com/extended-slots"), Some(&q("4")));
        let again = load_instance_types_json(&to_instance_types_json(&its)).expect("reads its own output");
        assert_eq!(again[0].offerings, its[0].offerings);
        // camelCase is read too.
        let camel =
            json.replace("CapacityOverride", "capacityOverride").replace("OverheadOverride", "overheadOverride");
        assert_eq!(load_instance_types_json(&camel).expect("loads")[0].offerings, its[0].offerings);
        let bad = json.replace(r#""test.com/extended-slots": 4"#, r#""test.com/extended-slots": "four""#);
        let e = load_instance_types_json(&bad).expect_err("not a quantity").to_string();
        assert!(
            e.contains("offerings[1].CapacityOverride.test.com/extended-slots") && e.contains("offering z/on-demand"),
            "{e}"
        );
        let bad = json.replace(r#""memory": "1Gi""#, r#""memory": "-1Gi""#);
        let e = load_instance_types_json(&bad).expect_err("negative").to_string();
        assert!(e.contains("offerings[1].OverheadOverride.SystemReserved.memory") && e.contains("negative"), "{e}");
        let bad = json.replace("SystemReserved", "SystemReserve");
        let e = load_instance_types_json(&bad).expect_err("unknown overhead part").to_string();
        assert!(e.contains("offerings[1].OverheadOverride") && e.contains("SystemReserve"), "{e}");
    }

    #[test]
    fn reserved_offerings_keep_their_reservation_through_a_round_trip() {
        let json = r#"[{"name": "r", "architecture": "amd64", "operatingSystems": ["linux"],
            "resources": {"cpu": "4", "memory": "4Gi"},
            "offerings": [{"Price": 0.05, "ReservationCapacity": 2, "Requirements": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]},
                {"key": "karpenter.k8s.aws/capacity-reservation-id", "operator": "In", "values": ["cr-1"]}]},
              {"Price": 0.2, "Requirements": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}]}]"#;
        let its = load_instance_types_json(json).expect("loads");
        let offs = &its[0].offerings;
        assert_eq!((offs[0].reservation_id(), offs[0].reservation_capacity), (Some("cr-1"), 2));
        assert_eq!((offs[1].reservation_id(), offs[1].reservation_capacity), (None, 0));
        let again = load_instance_types_json(&to_instance_types_json(&its)).expect("reads its own output");
        assert_eq!(again[0].offerings, its[0].offerings);
        let on_demand_with_capacity = json.replace(r#""Price": 0.2,"#, r#""Price": 0.2, "ReservationCapacity": 1,"#);
        let e = load_instance_types_json(&on_demand_with_capacity).expect_err("not reserved").to_string();
        assert!(e.contains("offerings[1].Requirements") && e.contains("reserved offerings only"), "{e}");
    }

    use karpenter_cloudprovider::cheapest_launch;
    use karpenter_requirements::OfferingsExt;

    fn find<'a>(its: &'a [InstanceType], name: &str) -> &'a InstanceType {
        its.iter().find(|i| i.name == name).unwrap()
    }

    fn label(it: &InstanceType, key: &str) -> String {
        let r = it.requirements.get_ref(key).unwrap();
        assert_eq!(r.values().len(), 1, "{key}");
        r.any()
    }

    #[test]
    fn catalogue_shape_and_prices() {
        let its = catalogue();
        assert_eq!(its.len(), 12 * 3 * 2 * 2);
        assert_eq!(its[0].name, "c-1x-amd64-linux");
        assert_eq!(its[1].name, "c-1x-arm64-linux");
        assert_eq!(its[2].name, "c-1x-amd64-windows");
        assert_eq!(its.last().unwrap().name, "m-256x-arm64-windows");
        let names: BTreeSet<&str> = its.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names.len(), its.len(), "names are unique");

        let c1 = find(&its, "c-1x-amd64-linux");
        assert_eq!(c1.capacity().cpu(), "1".parse().unwrap());
        assert_eq!(c1.capacity().memory(), "2Gi".parse().unwrap());
        assert_eq!(c1.capacity().pods(), "16".parse().unwrap());
        assert_eq!(c1.capacity().ephemeral_storage(), "20Gi".parse().unwrap());
        assert_eq!(c1.allocatable().cpu(), "900m".parse().unwrap());
        assert_eq!(c1.allocatable().memory(), "2038Mi".parse().unwrap());
        assert_eq!(c1.offerings.len(), 8);
        // upstream's figures for c-1x: 0.027147483648 on demand, 0.7 of that for spot
        let od = c1.offerings.iter().find(|o| o.capacity_type() == Some("on-demand")).unwrap();
        assert!((od.price - 0.027147483648).abs() < 1e-12, "{}", od.price);
        let spot = c1.offerings.iter().find(|o| o.capacity_type() == Some("spot")).unwrap();
        assert!((spot.price - 0.019003238553599998).abs() < 1e-12, "{}", spot.price);
        assert_eq!(c1.offerings.available().count(), 8);

        let m = find(&its, "m-256x-arm64-windows");
        assert_eq!(m.capacity().memory(), "2Ti".parse().unwrap());
        assert_eq!(m.capacity().pods(), "1024".parse().unwrap());
        assert_eq!(label(m, ARCH), "arm64");
        assert_eq!(label(m, OS), "windows");
        assert_eq!(label(m, kwok_labels::INSTANCE_FAMILY), "m");
        assert_eq!(label(m, kwok_labels::INSTANCE_SIZE), "256");
        assert_eq!(label(m, kwok_labels::INSTANCE_CPU), "256");
        assert_eq!(label(m, kwok_labels::INSTANCE_MEMORY), "2Ti");
        assert_eq!(label(find(&its, "s-4x-amd64-linux"), kwok_labels::INSTANCE_MEMORY), "16Gi");
        let zones = m.requirements.get_ref(ZONE).unwrap();
        assert_eq!(zones.values().iter().map(|v| v.as_ref()).collect::<Vec<_>>(), ZONES);
        assert!(m.requirements.get_ref(CAPACITY_TYPE).unwrap().has("spot"));
    }

    #[test]
    fn label_derivation_matches_upstream_rules() {
        assert_eq!(size_label("m5.large", "2"), "large");
        assert_eq!(size_label("m5.24xlarge", "96"), "24xlarge");
        assert_eq!(size_label("m5.huge", "2"), "2");
        assert_eq!(size_label("c-4x-amd64-linux", "4"), "4");
        assert_eq!(family_label("m5.large"), "m5");
        assert_eq!(family_label("n2-standard-4"), "n2");
        assert_eq!(family_label("Standard_D4"), "S");
        assert_eq!(family_label(""), "");
    }

    fn reqs(entries: &[(&str, &[&str])]) -> Requirements {
        entries.iter().map(|(k, v)| Requirement::in_values(k, v.iter().copied())).collect()
    }

    #[test]
    fn cheapest_launch_over_the_catalogue() {
        let its = catalogue();
        // Everything linux amd64: the cheapest is c-1x spot, tie over zones → test-zone-a.
        let r = reqs(&[(OS, &["linux"]), (ARCH, &["amd64"])]);
        let c = cheapest_launch(&its, &r).unwrap();
        assert_eq!(
            (c.instance_type.as_str(), c.zone.as_str(), c.capacity_type.as_str()),
            ("c-1x-amd64-linux", "test-zone-a", "spot")
        );
        // amd64 and arm64 cost the same: the name breaks the tie.
        let c = cheapest_launch(&its, &reqs(&[(OS, &["linux"])])).unwrap();
        assert_eq!(c.instance_type, "c-1x-amd64-linux");
        // on-demand only, zone c/d
        let r = reqs(&[
            (INSTANCE_TYPE, &["s-4x-arm64-linux", "c-8x-amd64-linux"]),
            (CAPACITY_TYPE, &["on-demand"]),
            (ZONE, &["test-zone-d", "test-zone-c"]),
        ]);
        let c = cheapest_launch(&its, &r).unwrap();
        assert_eq!(
            (c.instance_type.as_str(), c.zone.as_str(), c.capacity_type.as_str()),
            ("s-4x-arm64-linux", "test-zone-c", "on-demand")
        );
        assert!((c.price - (0.1 + 0.016 * 1.073741824)).abs() < 1e-12, "{}", c.price);
        assert_eq!(cheapest_launch(&its, &reqs(&[(ZONE, &["elsewhere"])])), None);
        assert_eq!(cheapest_launch(&its, &reqs(&[(OS, &["plan9"])])), None);
    }

    const UPSTREAM: &str = r#"[
      {"name": "c-1x-amd64-linux",
       "offerings": [
         {"Price": 0.019003238553599998, "Available": true,
          "Requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
                           {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]},
         {"Price": 0.027147483648, "Available": false,
          "Requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                           {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-b"]}]}
       ],
       "architecture": "amd64", "operatingSystems": ["linux"],
       "resources": {"cpu": "1", "ephemeral-storage": "20Gi", "memory": "2Gi", "pods": "16"}},
      {"name": "m5.large",
       "offerings": [{"CapacityType": "on-demand", "Zone": "us-west-2a", "Price": 0.096, "Available": true}],
       "architecture": "amd64", "operatingSystems": ["linux", "windows"],
       "resources": {"cpu": 2, "memory": "8Gi", "nvidia.com/gpu": "1"}}
    ]"#;

    #[test]
    fn loads_upstream_json() {
        let its = load_instance_types_json(UPSTREAM).unwrap();
        assert_eq!(its.len(), 2);
        let c1 = &its[0];
        let builtin = catalogue();
        let b = find(&builtin, "c-1x-amd64-linux");
        assert_eq!(c1.capacity(), b.capacity());
        assert_eq!(c1.allocatable(), b.allocatable());
        for key in [ARCH, OS, INSTANCE_TYPE, kwok_labels::INSTANCE_MEMORY, kwok_labels::INSTANCE_FAMILY] {
            assert_eq!(c1.requirements.get(key), b.requirements.get(key), "{key}");
        }
        assert_eq!(c1.offerings.len(), 2);
        assert_eq!(c1.offerings[0].price, b.offerings[0].price, "upstream's printed price reads back exactly");
        assert!(!c1.offerings[1].available, "Available is honoured");
        assert_eq!(c1.requirements.get(ZONE).values().len(), 2);
        let m5 = &its[1];
        assert_eq!(label(m5, kwok_labels::INSTANCE_SIZE), "large");
        assert_eq!(label(m5, kwok_labels::INSTANCE_FAMILY), "m5");
        assert_eq!(m5.capacity().pods(), "110".parse().unwrap(), "pods default to 110");
        assert_eq!(m5.capacity().get("nvidia.com/gpu"), Some(&"1".parse().unwrap()));
        assert_eq!(m5.offerings[0].zone(), Some("us-west-2a"));
        assert_eq!(m5.requirements.get(OS).values().len(), 2);
        let c = cheapest_launch(&its, &Requirements::new()).unwrap();
        assert_eq!((c.instance_type.as_str(), c.zone.as_str()), ("c-1x-amd64-linux", "test-zone-a"));
    }

    #[test]
    fn the_catalogue_round_trips_through_upstreams_json() {
        let builtin = catalogue();
        let json = to_instance_types_json(&builtin);
        assert!(
            json.starts_with("[\n  {\n    \"name\": \"c-1x-amd64-linux\",\n    \"offerings\": ["),
            "{}",
            &json[..200]
        );
        let loaded = load_instance_types_json(&json).unwrap();
        assert_eq!(loaded.len(), builtin.len());
        for (a, b) in loaded.iter().zip(&builtin) {
            assert_eq!(a.name, b.name);
            assert_eq!(a.requirements, b.requirements, "{}", a.name);
            assert_eq!(a.offerings, b.offerings, "{}", a.name);
            assert_eq!(a.capacity(), b.capacity(), "{}", a.name);
            assert_eq!(a.allocatable(), b.allocatable(), "{}", a.name);
        }
    }

    fn entry_err(json: &str) -> (usize, Option<String>, String, String) {
        match load_instance_types_json(json).unwrap_err() {
            KwokCatalogueError::Entry { index, name, field, message } => (index, name, field, message),
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn errors_name_entry_and_field() {
        assert!(matches!(load_instance_types_json("{").unwrap_err(), KwokCatalogueError::Syntax(_)));
        assert!(matches!(load_instance_types_json("{}").unwrap_err(), KwokCatalogueError::Syntax(_)));
        let ok = r#"{"name": "a", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "1", "memory": "1Gi"}}"#;
        let (i, n, f, m) = entry_err(&format!(
            r#"[{ok}, {{"name": "b", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {{"cpu": "x", "memory": "1Gi"}}}}]"#
        ));
        assert_eq!((i, n.as_deref(), f.as_str()), (1, Some("b"), "resources.cpu"), "{m}");
        let (_, _, f, _) = entry_err(
            r#"[{"name": "b", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "1"}}]"#,
        );
        assert_eq!(f, "resources.memory");
        let (_, _, f, m) = entry_err(
            r#"[{"name": "b", "offerings": [{"Price": "cheap"}], "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "1", "memory": "1Gi"}}]"#,
        );
        assert_eq!(f, "offerings[0].Price", "{m}");
        let (_, _, f, m) = entry_err(
            r#"[{"name": "b", "offerings": [{"Price": 1, "Requirements": [{"key": "k", "operator": "Near", "values": []}]}], "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "1", "memory": "1Gi"}}]"#,
        );
        assert_eq!(f, "offerings[0].Requirements[0].operator", "{m}");
        let (_, _, f, m) = entry_err(
            r#"[{"name": "b", "offerings": [{"Price": 1, "Requirements": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}], "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "1", "memory": "1Gi"}}]"#,
        );
        assert_eq!(f, "offerings[0].Requirements");
        assert!(m.contains("karpenter.sh/capacity-type"), "{m}");
        let (_, n, f, _) = entry_err(r#"[{"name": "b", "operatingSystems": ["linux"], "resources": {}}]"#);
        assert_eq!((n.as_deref(), f.as_str()), (Some("b"), "architecture"));
        let (i, n, f, _) = entry_err(&format!("[{ok}, {ok}]"));
        assert_eq!((i, n.as_deref(), f.as_str()), (1, Some("a"), "name"));
        let (i, n, _, _) = entry_err("[1]");
        assert_eq!((i, n), (0, None));
        let err = load_instance_types_json(&format!("[{ok}, 1]")).unwrap_err().to_string();
        assert!(err.contains("entry 1"), "{err}");
    }
}
