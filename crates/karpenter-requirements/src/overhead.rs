//! What a node keeps for itself (kubelet reservations and eviction thresholds) and the allocatable left over.
//!
//! A module of its own below both instance types and offerings: an instance type has an overhead and an offering
//! may override it.

use crate::quantity::Quantity;
use crate::resources::{MEMORY, ResourceList};

/// Resources a node keeps for itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overhead {
    /// kubelet `kubeReserved`.
    pub kube_reserved: ResourceList,
    /// kubelet `systemReserved`.
    pub system_reserved: ResourceList,
    /// Hard eviction thresholds.
    pub eviction_threshold: ResourceList,
}

impl Overhead {
    /// Sum of the three parts.
    pub fn total(&self) -> ResourceList {
        self.kube_reserved.add(&self.system_reserved).add(&self.eviction_threshold)
    }
}

/// `capacity − overhead` over the capacity's resources (overhead-only resources are ignored); then, if the
/// capacity has any `hugepages-*` resource, memory is reduced by each of them and floored at zero.
pub fn compute_allocatable(capacity: &ResourceList, overhead: &Overhead) -> ResourceList {
    allocatable_of(capacity, &overhead.total())
}

/// [`compute_allocatable`] over an overhead already totalled.
pub(crate) fn allocatable_of(capacity: &ResourceList, total: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    for (name, q) in capacity.iter() {
        let v = match total.get(name) {
            Some(o) => q.saturating_add(&o.neg()),
            None => *q,
        };
        out.insert(name, v);
    }
    for (name, q) in capacity.iter() {
        if name.starts_with("hugepages-") {
            let mem = out.get_or_zero(MEMORY).saturating_add(&q.neg());
            out.insert(MEMORY, if mem.is_negative() { Quantity::from_int(0, mem.format()) } else { mem });
        }
    }
    out
}
