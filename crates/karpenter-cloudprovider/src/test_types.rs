//! Hand-made instance types for this crate's tests. The code under test takes instance types as data, so a few
//! small ones with round numbers say more than a provider's catalogue would, and keep this crate free of any
//! provider.

use std::collections::BTreeSet;

use karpenter_api::labels::{ARCH, CAPACITY_TYPE, INSTANCE_TYPE, OS, ZONE};
use karpenter_requirements::{
    Format, InstanceType, Offering, Overhead, Quantity, Requirement, Requirements, ResourceList,
};

/// An offering in `zone` with capacity type `capacity_type`.
pub(crate) fn offering(zone: &str, capacity_type: &str, price: f64, available: bool) -> Offering {
    let reqs: Requirements =
        [Requirement::in_values(CAPACITY_TYPE, [capacity_type]), Requirement::in_values(ZONE, [zone])]
            .into_iter()
            .collect();
    Offering { available, ..Offering::new(reqs, price) }
}

/// An instance type with `cpu` vCPUs, 4 GiB per vCPU, 110 pods and no overhead; its requirements name it, its
/// architecture and OS, and the zones and capacity types of its offerings.
pub(crate) fn instance_type(name: &str, arch: &str, os: &str, cpu: i64, offerings: Vec<Offering>) -> InstanceType {
    let zones: BTreeSet<&str> = offerings.iter().filter_map(Offering::zone).collect();
    let capacity_types: BTreeSet<&str> = offerings.iter().filter_map(Offering::capacity_type).collect();
    let reqs: Requirements = [
        Requirement::in_values(INSTANCE_TYPE, [name]),
        Requirement::in_values(ARCH, [arch]),
        Requirement::in_values(OS, [os]),
        Requirement::in_values(ZONE, zones),
        Requirement::in_values(CAPACITY_TYPE, capacity_types),
    ]
    .into_iter()
    .collect();
    let capacity = ResourceList::new()
        .with("cpu", Quantity::from_int(cpu, Format::DecimalSI))
        .with("memory", Quantity::from_int(cpu * (4 << 30), Format::BinarySI))
        .with("pods", Quantity::from_int(110, Format::DecimalSI));
    InstanceType::new(name, reqs, offerings, capacity, Overhead::default())
}
