//! Instance types, allocatable, price ordering, minValues and truncation.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

use crate::devices::DeviceSliceTemplate;
use crate::labels::{ARCH, CAPACITY_TYPE, INSTANCE_TYPE, OS, ZONE};
use crate::offering::{Offering, OfferingsExt};
use crate::overhead::allocatable_of;
use crate::quantity::{Format, Quantity};
use crate::requirement::Requirement;
use crate::requirements::{KeySet, Requirements};
use crate::resources::{CPU, MEMORY, PODS, ResourceList};

// Overhead lives in its own module (offerings carry overhead overrides too); its old paths here keep working.
pub use crate::overhead::{Overhead, compute_allocatable};

/// A machine shape a cloud provider can launch.
#[derive(Debug)]
pub struct InstanceType {
    /// Name, e.g. `m5.large`.
    pub name: String,
    /// Labels the instance type guarantees (every well-known key; zones / capacity types of its offerings).
    pub requirements: Requirements,
    /// All offerings, including unavailable ones.
    pub offerings: Vec<Offering>,
    /// Volumes a node of this type can attach, per CSI driver name; a driver not listed has no known limit. A
    /// registered node's CSINode limits take precedence; these apply to NodeClaims not launched yet.
    pub volume_attachment_limits: BTreeMap<String, u32>,
    /// A NodeOverlay added to this type's capacity (NodeClaims launched from it are annotated so).
    pub capacity_overlay_applied: bool,
    /// The DRA devices a node of this type publishes once its drivers run (upstream's
    /// `InstanceType.DynamicResources`), one template per driver; empty by default. The scheduler offers them to
    /// pods with resource claims on nodes not launched or not initialized yet.
    pub dynamic_resources: Arc<[DeviceSliceTemplate]>,
    capacity: ResourceList,
    overhead: Overhead,
    allocatable: OnceLock<ResourceList>,
}

impl Clone for InstanceType {
    fn clone(&self) -> Self {
        InstanceType {
            name: self.name.clone(),
            requirements: self.requirements.clone(),
            offerings: self.offerings.clone(),
            volume_attachment_limits: self.volume_attachment_limits.clone(),
            capacity_overlay_applied: self.capacity_overlay_applied,
            dynamic_resources: self.dynamic_resources.clone(),
            capacity: self.capacity.clone(),
            overhead: self.overhead.clone(),
            allocatable: self.allocatable.clone(),
        }
    }
}

/// `base` with every resource of `over` added or replacing `base`'s (upstream's `lo.Assign`).
fn merged(base: &ResourceList, over: &ResourceList) -> ResourceList {
    let mut out = base.clone();
    for (name, q) in over.iter() {
        out.insert(name, *q);
    }
    out
}

/// The available offerings of an instance type that share one pair of overrides, and the allocatable a node
/// launched from any of them has (upstream's `AllocatableOfferings`). See [`InstanceType::offering_groups`].
#[derive(Debug, Clone, PartialEq)]
pub struct OfferingGroup<'a> {
    /// The instance type's capacity with the group's capacity override merged in, minus its overhead with the
    /// group's overhead override merged in ([`compute_allocatable`]'s rules otherwise).
    pub allocatable: ResourceList,
    /// The group's available offerings, in the instance type's order (none for a base group whose offerings all
    /// carry overrides or are unavailable).
    pub offerings: Vec<&'a Offering>,
}

impl OfferingGroup<'_> {
    /// Whether `requests` fit the group's allocatable and one of its offerings is compatible with `reqs`:
    /// upstream's per-group test in the scheduler's instance-type filter (`fits`).
    pub fn holds<K: KeySet>(&self, requests: &ResourceList, reqs: &Requirements, allow_undefined: &K) -> bool {
        requests.fits(&self.allocatable) && self.offerings.iter().any(|o| o.is_compatible(reqs, allow_undefined))
    }
}

/// Whether two offerings carry the same overrides (so they fall in one [`OfferingGroup`]).
fn same_overrides(a: &Offering, b: &Offering) -> bool {
    let capacity = |o: &Offering| o.capacity_override.as_ref().filter(|c| !c.is_empty()).cloned();
    capacity(a) == capacity(b) && a.overhead_override == b.overhead_override
}

impl InstanceType {
    /// A new instance type.
    pub fn new(
        name: impl Into<String>,
        requirements: Requirements,
        offerings: Vec<Offering>,
        capacity: ResourceList,
        overhead: Overhead,
    ) -> Self {
        InstanceType {
            name: name.into(),
            requirements,
            offerings,
            volume_attachment_limits: BTreeMap::new(),
            capacity_overlay_applied: false,
            dynamic_resources: Arc::from([]),
            capacity,
            overhead,
            allocatable: OnceLock::new(),
        }
    }

    /// Sets the per-CSI-driver volume attachment limits (builder style).
    pub fn with_volume_attachment_limits(mut self, limits: BTreeMap<String, u32>) -> Self {
        self.volume_attachment_limits = limits;
        self
    }

    /// Sets the DRA slice templates (builder style).
    pub fn with_dynamic_resources(mut self, templates: Vec<DeviceSliceTemplate>) -> Self {
        self.dynamic_resources = templates.into();
        self
    }

    /// Total capacity.
    pub fn capacity(&self) -> &ResourceList {
        &self.capacity
    }

    /// Reserved overhead.
    pub fn overhead(&self) -> &Overhead {
        &self.overhead
    }

    /// Replaces the capacity (drops the cached allocatable).
    pub fn set_capacity(&mut self, capacity: ResourceList) {
        self.capacity = capacity;
        self.allocatable = OnceLock::new();
    }

    /// Replaces the overhead (drops the cached allocatable).
    pub fn set_overhead(&mut self, overhead: Overhead) {
        self.overhead = overhead;
        self.allocatable = OnceLock::new();
    }

    /// Allocatable resources ([`compute_allocatable`]), computed on first use and cached.
    pub fn allocatable(&self) -> &ResourceList {
        self.allocatable.get_or_init(|| compute_allocatable(&self.capacity, &self.overhead))
    }

    /// Allocatable of a node launched from `offering` (one of this type's): [`Self::allocatable`] unless the
    /// offering has overrides, else the capacity with its capacity override merged in, minus the overhead total
    /// with its overhead override's total merged in (each named resource replaces the type's; not cached).
    pub fn allocatable_for(&self, offering: &Offering) -> ResourceList {
        if !offering.has_override() {
            return self.allocatable().clone();
        }
        let capacity = self.capacity_for(offering);
        let overhead = match &offering.overhead_override {
            Some(over) => merged(&self.overhead.total(), &over.total()),
            None => self.overhead.total(),
        };
        allocatable_of(&capacity, &overhead)
    }

    /// Capacity of a node launched from `offering` (one of this type's): the type's capacity with the offering's
    /// capacity override merged in (each named resource added or replacing the type's); the type's own capacity
    /// when the offering overrides none. What a launch reports in the node's `status.capacity`, beside
    /// [`Self::allocatable_for`].
    pub fn capacity_for(&self, offering: &Offering) -> ResourceList {
        match offering.capacity_override.as_ref().filter(|c| !c.is_empty()) {
            Some(over) => merged(&self.capacity, over),
            None => self.capacity.clone(),
        }
    }

    /// Whether a node launched from `offering` (one of this type's) has room for `requests`: they fit
    /// [`Self::allocatable_for`] the offering. Copies nothing for an offering without overrides, so a launch can
    /// ask it of every offering.
    pub fn offering_holds(&self, offering: &Offering, requests: &ResourceList) -> bool {
        if offering.has_override() {
            requests.fits(&self.allocatable_for(offering))
        } else {
            requests.fits(self.allocatable())
        }
    }

    /// Whether any offering (available or not) carries a capacity or overhead override.
    pub fn has_offering_overrides(&self) -> bool {
        self.offerings.iter().any(Offering::has_override)
    }

    /// The available offerings grouped by equal overrides, each with its allocatable (upstream's
    /// `AllocatableOfferingsList`): the first group is always the base one (offerings without overrides,
    /// allocatable [`Self::allocatable`]), possibly with no offering; then one group per distinct pair of
    /// overrides in the order the offerings list them. A pod fits the type when it fits some group that has an
    /// offering compatible with its claim ([`OfferingGroup::holds`]). Without overrides this is one group of
    /// every available offering. Computed on each call (the offerings are public and may change): callers on a
    /// hot path compute it once, and only for types where [`Self::has_offering_overrides`].
    pub fn offering_groups(&self) -> Vec<OfferingGroup<'_>> {
        let mut groups = vec![OfferingGroup {
            allocatable: self.allocatable().clone(),
            offerings: Vec::with_capacity(self.offerings.len()),
        }];
        let mut representatives: Vec<&Offering> = Vec::new();
        for o in self.offerings.iter().filter(|o| o.available) {
            let at = if !o.has_override() {
                0
            } else if let Some(k) = representatives.iter().position(|r| same_overrides(r, o)) {
                k + 1
            } else {
                representatives.push(o);
                groups.push(OfferingGroup { allocatable: self.allocatable_for(o), offerings: Vec::new() });
                representatives.len()
            };
            if let Some(group) = groups.get_mut(at) {
                group.offerings.push(o);
            }
        }
        groups
    }

    /// Whether `requests` fit some [offering group](Self::offering_groups) with an offering compatible with
    /// `reqs` (upstream's `fits`; the no-override case is one test against [`Self::allocatable`]).
    pub fn fits_an_offering<K: KeySet>(
        &self,
        requests: &ResourceList,
        reqs: &Requirements,
        allow_undefined: &K,
    ) -> bool {
        if !self.has_offering_overrides() {
            return requests.fits(self.allocatable())
                && self.offerings.available().any(|o| o.is_compatible(reqs, allow_undefined));
        }
        self.offering_groups().iter().any(|g| g.holds(requests, reqs, allow_undefined))
    }

    /// The lowest price over available offerings compatible with `reqs`; `+∞` if there is none.
    pub fn min_compatible_price<K: KeySet>(&self, reqs: &Requirements, allow_undefined: &K) -> f64 {
        self.offerings
            .available()
            .filter(|o| o.is_compatible(reqs, allow_undefined))
            .map(|o| o.price)
            .min_by(f64::total_cmp)
            .unwrap_or(f64::INFINITY)
    }
}

/// Builds an [`InstanceType`] as a provider describes one: its name, capacity, offerings and the well-known
/// requirements derived from them, so a caller writes only what differs between its types.
///
/// [`build`](Self::build) gives the type these requirements: `node.kubernetes.io/instance-type In [name]`,
/// `kubernetes.io/arch In [arch]` (default `amd64`), `kubernetes.io/os In [os]` (default `linux`),
/// `topology.kubernetes.io/zone In [zones of the offerings]` and `karpenter.sh/capacity-type In [their capacity
/// types]` (both left out when there are no offerings), intersected with any [`requirement`](Self::requirement)
/// given. Overhead defaults to none.
///
/// ```
/// use karpenter_requirements::{InstanceType, Offering, Requirement};
/// use karpenter_requirements::labels::ZONE;
///
/// let it = InstanceType::builder("m-4x16")
///     .cpu(4)
///     .memory_gib(16)
///     .pods(110)
///     .requirement(Requirement::in_values("example.com/generation", ["3"]))
///     .offering(Offering::on_demand("zone-a", 0.20))
///     .offering(Offering::spot("zone-b", 0.07))
///     .build();
/// assert_eq!(it.allocatable().cpu().value(), Some(4));
/// assert_eq!(it.requirements.get(ZONE).values().len(), 2);
/// ```
#[derive(Debug, Clone)]
pub struct InstanceTypeBuilder {
    name: String,
    arch: String,
    os: String,
    requirements: Vec<Requirement>,
    offerings: Vec<Offering>,
    capacity: ResourceList,
    overhead: Overhead,
}

impl InstanceType {
    /// A builder for an instance type named `name`; see [`InstanceTypeBuilder`].
    pub fn builder(name: impl Into<String>) -> InstanceTypeBuilder {
        InstanceTypeBuilder {
            name: name.into(),
            arch: "amd64".to_owned(),
            os: "linux".to_owned(),
            requirements: Vec::new(),
            offerings: Vec::new(),
            capacity: ResourceList::new(),
            overhead: Overhead::default(),
        }
    }
}

impl InstanceTypeBuilder {
    /// Replaces the whole capacity.
    pub fn capacity(mut self, capacity: ResourceList) -> Self {
        self.capacity = capacity;
        self
    }

    /// Sets one resource of the capacity.
    pub fn resource(mut self, name: &str, quantity: Quantity) -> Self {
        self.capacity.insert(name, quantity);
        self
    }

    /// Sets the `cpu` capacity in whole cores.
    pub fn cpu(self, cores: i64) -> Self {
        self.resource(CPU, Quantity::from_int(cores, Format::DecimalSI))
    }

    /// Sets the `memory` capacity in GiB.
    pub fn memory_gib(self, gib: i64) -> Self {
        self.resource(MEMORY, Quantity::from_int(gib.saturating_mul(1 << 30), Format::BinarySI))
    }

    /// Sets the `pods` capacity (how many pods the kubelet admits).
    pub fn pods(self, pods: i64) -> Self {
        self.resource(PODS, Quantity::from_int(pods, Format::DecimalSI))
    }

    /// Sets the `kubernetes.io/arch` value (default `amd64`).
    pub fn arch(mut self, arch: &str) -> Self {
        arch.clone_into(&mut self.arch);
        self
    }

    /// Sets the `kubernetes.io/os` value (default `linux`).
    pub fn os(mut self, os: &str) -> Self {
        os.clone_into(&mut self.os);
        self
    }

    /// Adds a requirement the type guarantees (a provider-specific label such as its CPU count or GPU model).
    pub fn requirement(mut self, requirement: Requirement) -> Self {
        self.requirements.push(requirement);
        self
    }

    /// Adds an offering ([`Offering::on_demand`], [`Offering::spot`], [`Offering::reserved`]).
    pub fn offering(mut self, offering: Offering) -> Self {
        self.offerings.push(offering);
        self
    }

    /// Adds several offerings.
    pub fn offerings(mut self, offerings: impl IntoIterator<Item = Offering>) -> Self {
        self.offerings.extend(offerings);
        self
    }

    /// Sets the overhead the node keeps for itself (kube-reserved, system-reserved, eviction threshold).
    pub fn overhead(mut self, overhead: Overhead) -> Self {
        self.overhead = overhead;
        self
    }

    /// The instance type.
    pub fn build(self) -> InstanceType {
        let zones: BTreeSet<&str> = self.offerings.iter().filter_map(Offering::zone).collect();
        let capacity_types: BTreeSet<&str> = self.offerings.iter().filter_map(Offering::capacity_type).collect();
        let mut requirements: Requirements = [
            Requirement::in_values(INSTANCE_TYPE, [self.name.as_str()]),
            Requirement::in_values(ARCH, [self.arch.as_str()]),
            Requirement::in_values(OS, [self.os.as_str()]),
        ]
        .into_iter()
        .collect();
        if !self.offerings.is_empty() {
            requirements.add(Requirement::in_values(ZONE, zones));
            requirements.add(Requirement::in_values(CAPACITY_TYPE, capacity_types));
        }
        for requirement in self.requirements {
            requirements.add(requirement);
        }
        InstanceType::new(self.name, requirements, self.offerings, self.capacity, self.overhead)
    }
}

/// Sorts instance types by ascending [`InstanceType::min_compatible_price`] (`+∞` last, NaN after that),
/// ties broken by name so the order is deterministic. Each price is computed once.
pub fn order_by_price<T: Borrow<InstanceType>, K: KeySet>(its: &mut Vec<T>, reqs: &Requirements, allow_undefined: &K) {
    let mut keyed: Vec<(f64, T)> =
        its.drain(..).map(|it| (it.borrow().min_compatible_price(reqs, allow_undefined), it)).collect();
    keyed.sort_by(|(pa, a), (pb, b)| pa.total_cmp(pb).then_with(|| a.borrow().name.cmp(&b.borrow().name)));
    its.extend(keyed.into_iter().map(|(_, t)| t));
}

/// minValues could not be met.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("minValues requirement is not met for label(s) {}", describe(.achieved, .required))]
pub struct MinValuesError {
    /// Per failing key: distinct values the instance types cover.
    pub achieved: BTreeMap<String, usize>,
    /// Per failing key: the minValues asked for.
    pub required: BTreeMap<String, u32>,
}

fn describe(achieved: &BTreeMap<String, usize>, required: &BTreeMap<String, u32>) -> String {
    achieved
        .iter()
        .map(|(k, a)| format!("{k} (got {a}, need {})", required.get(k).copied().unwrap_or(0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Walks `its` in order, collecting distinct values of every key that has minValues in `reqs`; returns the
/// shortest prefix length that satisfies all of them (0 when no key has minValues), or the per-key counts
/// achieved by the whole list.
pub fn satisfies_min_values<T: Borrow<InstanceType>>(its: &[T], reqs: &Requirements) -> Result<usize, MinValuesError> {
    let keys: Vec<(&str, u32)> = reqs.iter().filter_map(|r| r.min_values().map(|m| (r.key(), m))).collect();
    if keys.is_empty() {
        return Ok(0);
    }
    let mut seen: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); keys.len()];
    for (i, it) in its.iter().enumerate() {
        let it = it.borrow();
        for ((key, _), set) in keys.iter().zip(seen.iter_mut()) {
            if let Some(r) = it.requirements.get_ref(key) {
                set.extend(r.values().iter().map(|v| v.as_ref()));
            }
        }
        if keys.iter().zip(&seen).all(|((_, m), s)| s.len() >= *m as usize) {
            return Ok(i + 1);
        }
    }
    let mut err = MinValuesError { achieved: BTreeMap::new(), required: BTreeMap::new() };
    for ((key, m), s) in keys.iter().zip(&seen) {
        if s.len() < *m as usize {
            err.achieved.insert((*key).to_owned(), s.len());
            err.required.insert((*key).to_owned(), *m);
        }
    }
    Err(err)
}

/// What to do when minValues cannot be met (`--min-values-policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MinValuesPolicy {
    /// Reject (default).
    #[default]
    Strict,
    /// Accept and relax minValues to what was achieved.
    BestEffort,
}

/// A `--min-values-policy` value that is neither `Strict` nor `BestEffort`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a min-values policy; use Strict or BestEffort")]
pub struct UnknownMinValuesPolicy(pub String);

impl std::str::FromStr for MinValuesPolicy {
    type Err = UnknownMinValuesPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "Strict" => Ok(Self::Strict),
            "BestEffort" => Ok(Self::BestEffort),
            _ => Err(UnknownMinValuesPolicy(s.to_owned())),
        }
    }
}

/// Orders by price ([`order_by_price`]) and keeps the first `max`. Under `Strict`, when `reqs` has minValues and
/// the kept list no longer satisfies them, fails; under `BestEffort` never fails.
pub fn truncate<T: Borrow<InstanceType>, K: KeySet>(
    mut its: Vec<T>,
    reqs: &Requirements,
    allow_undefined: &K,
    max: usize,
    policy: MinValuesPolicy,
) -> Result<Vec<T>, MinValuesError> {
    order_by_price(&mut its, reqs, allow_undefined);
    its.truncate(max);
    if policy == MinValuesPolicy::Strict && reqs.has_min_values() {
        satisfies_min_values(&its, reqs)?;
    }
    Ok(its)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::{CAPACITY_TYPE, INSTANCE_TYPE, RESERVATION_ID, ZONE};
    use crate::requirement::{Operator, Requirement};
    use crate::{OfferingsExt, Quantity};

    const WK: [&str; 4] = [ZONE, CAPACITY_TYPE, RESERVATION_ID, INSTANCE_TYPE];

    fn q(s: &str) -> Quantity {
        s.parse().unwrap()
    }

    fn rl(entries: &[(&str, &str)]) -> ResourceList {
        entries.iter().map(|(n, v)| (*n, q(v))).collect()
    }

    fn offering(zone: &str, ct: &str, price: f64, available: bool) -> Offering {
        let mut reqs: Requirements =
            [Requirement::in_values(ZONE, [zone]), Requirement::in_values(CAPACITY_TYPE, [ct])].into_iter().collect();
        if ct == "reserved" {
            reqs.add(Requirement::in_values(RESERVATION_ID, ["cr-1"]));
        } else {
            reqs.add(Requirement::does_not_exist(RESERVATION_ID));
        }
        Offering { available, ..Offering::new(reqs, price) }
    }

    fn it(name: &str, offerings: Vec<Offering>) -> InstanceType {
        let reqs: Requirements = [Requirement::in_values(INSTANCE_TYPE, [name])].into_iter().collect();
        InstanceType::new(name, reqs, offerings, rl(&[("cpu", "2"), ("memory", "8Gi")]), Overhead::default())
    }

    fn claim(entries: &[(&str, &[&str])]) -> Requirements {
        entries.iter().map(|(k, v)| Requirement::in_values(k, v.iter().copied())).collect()
    }

    #[test]
    fn allocatable_rules() {
        let capacity = rl(&[
            ("cpu", "4"),
            ("memory", "16Gi"),
            ("hugepages-2Mi", "1Gi"),
            ("hugepages-1Gi", "2Gi"),
            ("pods", "110"),
        ]);
        let overhead = Overhead {
            kube_reserved: rl(&[("cpu", "80m"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")]),
            system_reserved: rl(&[("cpu", "20m")]),
            eviction_threshold: rl(&[("memory", "100Mi")]),
        };
        let mut t = InstanceType::new("x", Requirements::new(), vec![], capacity, overhead);
        let a = t.allocatable();
        assert_eq!(a.cpu(), q("3900m"));
        assert_eq!(
            a.memory(),
            q("16Gi").checked_sub(&q("1Gi")).unwrap().checked_sub(&q("100Mi")).unwrap().checked_sub(&q("3Gi")).unwrap()
        );
        assert_eq!(a.pods(), q("110"));
        assert!(a.get("nvidia.com/gpu").is_none(), "overhead-only resources are ignored");
        // hugepages larger than memory floor memory at zero
        t.set_capacity(rl(&[("memory", "1Gi"), ("hugepages-1Gi", "2Gi")]));
        assert_eq!(t.allocatable().memory(), Quantity::ZERO);
        // without hugepages a negative result stays negative (never fits)
        t.set_capacity(rl(&[("memory", "1Gi")]));
        assert!(t.allocatable().memory().is_negative());
        // An offering's overrides are merged into the type's capacity and overhead, not put in their place: an
        // empty overhead override keeps every reserved resource of the type.
        let o = offering("a", "on-demand", 1.0, true)
            .with_capacity_override(rl(&[("memory", "4Gi")]))
            .with_overhead_override(Overhead::default());
        assert_eq!(
            t.allocatable_for(&o).memory(),
            q("4Gi").checked_sub(&q("1Gi")).unwrap().checked_sub(&q("100Mi")).unwrap()
        );
        assert_eq!(t.allocatable_for(&offering("a", "on-demand", 1.0, true)), *t.allocatable());
    }

    const SLOTS: &str = "test.com/extended-slots";

    /// 4 CPU, 16Gi, 110 pods, kube-reserved 100m / 1Gi; offerings as given.
    fn slotted(offerings: Vec<Offering>) -> InstanceType {
        let overhead = Overhead { kube_reserved: rl(&[("cpu", "100m"), ("memory", "1Gi")]), ..Overhead::default() };
        InstanceType::new(
            "x",
            Requirements::new(),
            offerings,
            rl(&[("cpu", "4"), ("memory", "16Gi"), ("pods", "110")]),
            overhead,
        )
    }

    /// An offering with 12 slots of capacity and 3Gi of system-reserved memory.
    fn with_slots(o: Offering) -> Offering {
        o.with_capacity_override(rl(&[(SLOTS, "12")]))
            .with_overhead_override(Overhead { system_reserved: rl(&[("memory", "3Gi")]), ..Overhead::default() })
    }

    #[test]
    fn offerings_group_by_equal_overrides_with_the_base_group_first() {
        // No overrides: one group of the available offerings, the type's allocatable.
        let plain = slotted(vec![offering("a", "spot", 1.0, true), offering("b", "spot", 1.0, false)]);
        assert!(!plain.has_offering_overrides());
        let groups = plain.offering_groups();
        assert_eq!(groups.len(), 1);
        assert_eq!((&groups[0].allocatable, groups[0].offerings.len()), (plain.allocatable(), 1));

        let t = slotted(vec![
            offering("a", "on-demand", 1.0, true),
            with_slots(offering("a", "on-demand", 1.0, true)),
            offering("b", "on-demand", 1.0, true),
            with_slots(offering("b", "on-demand", 1.0, true)),
            with_slots(offering("c", "on-demand", 1.0, false)),
            offering("c", "spot", 1.0, true).with_capacity_override(rl(&[(SLOTS, "2")])),
            // An empty capacity override is none (upstream's `len(...) > 0`).
            offering("d", "spot", 1.0, true).with_capacity_override(ResourceList::new()),
        ]);
        let groups = t.offering_groups();
        let zones =
            |g: &OfferingGroup<'_>| g.offerings.iter().filter_map(|o| o.zone().map(str::to_owned)).collect::<Vec<_>>();
        assert_eq!(groups.len(), 3);
        assert_eq!(zones(&groups[0]), ["a", "b", "d"]);
        assert_eq!((groups[0].allocatable.cpu(), groups[0].allocatable.memory()), (q("3900m"), q("15Gi")));
        assert!(groups[0].allocatable.get(SLOTS).is_none());
        // The override group: the unavailable offering of zone c is left out; the overhead override's 3Gi of
        // memory replaces the type's 1Gi, its CPU reservation stays.
        assert_eq!(zones(&groups[1]), ["a", "b"]);
        assert_eq!(
            (groups[1].allocatable.cpu(), groups[1].allocatable.memory(), groups[1].allocatable.get(SLOTS).copied()),
            (q("3900m"), q("13Gi"), Some(q("12")))
        );
        assert_eq!(zones(&groups[2]), ["c"]);
        assert_eq!(
            (groups[2].allocatable.memory(), groups[2].allocatable.get(SLOTS).copied()),
            (q("15Gi"), Some(q("2")))
        );

        // Every offering carries overrides: the base group is still first, with no offering.
        let only = slotted(vec![with_slots(offering("a", "spot", 1.0, true))]);
        let groups = only.offering_groups();
        assert_eq!(groups.iter().map(|g| g.offerings.len()).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn a_pod_fits_a_type_through_a_compatible_group_that_holds_it() {
        let slot = rl(&[(SLOTS, "1")]);
        let zone_a = claim(&[(ZONE, &["a"])]);
        let zone_b = claim(&[(ZONE, &["b"])]);
        let t = slotted(vec![offering("a", "spot", 1.0, true), with_slots(offering("b", "spot", 1.0, true))]);
        // The slot exists only on zone b's override offering.
        assert!(t.fits_an_offering(&slot, &Requirements::new(), &WK));
        assert!(t.fits_an_offering(&slot, &zone_b, &WK));
        assert!(!t.fits_an_offering(&slot, &zone_a, &WK), "zone a's offering has no slot");
        // 14Gi fits the base group (15Gi) but not the override group (13Gi).
        let big = rl(&[("memory", "14Gi")]);
        assert!(t.fits_an_offering(&big, &zone_a, &WK));
        assert!(!t.fits_an_offering(&big, &zone_b, &WK));
        // Override offerings that are unavailable give no slot, whatever their allocatable says.
        let gone = slotted(vec![offering("a", "spot", 1.0, true), with_slots(offering("a", "spot", 1.0, false))]);
        assert!(!gone.fits_an_offering(&slot, &Requirements::new(), &WK));
        // Without overrides: the type's allocatable and any compatible available offering.
        let plain = slotted(vec![offering("a", "spot", 1.0, true)]);
        assert!(plain.fits_an_offering(&big, &zone_a, &WK));
        assert!(!plain.fits_an_offering(&big, &zone_b, &WK));
        assert!(!plain.fits_an_offering(&slot, &zone_a, &WK));
    }

    #[test]
    fn a_node_from_an_override_offering_has_its_capacity_and_room() {
        let base = offering("a", "spot", 1.0, true);
        let slotted_offering = with_slots(offering("a", "spot", 1.0, true));
        let t = slotted(vec![base.clone(), slotted_offering.clone()]);
        // The capacity gains the override's slots; the base offering's node has the type's own capacity.
        assert_eq!(t.capacity_for(&slotted_offering).get(SLOTS).copied(), Some(q("12")));
        assert_eq!(t.capacity_for(&slotted_offering).memory(), q("16Gi"), "overhead overrides leave capacity alone");
        assert_eq!(t.capacity_for(&base), *t.capacity());
        // Room follows the offering's allocatable: slots only there, 14Gi only on the base node (15Gi vs 13Gi).
        let slot = rl(&[(SLOTS, "1")]);
        let big = rl(&[("memory", "14Gi")]);
        assert!(t.offering_holds(&slotted_offering, &slot) && !t.offering_holds(&base, &slot));
        assert!(t.offering_holds(&base, &big) && !t.offering_holds(&slotted_offering, &big));
        assert!(t.offering_holds(&slotted_offering, &ResourceList::new()));
    }

    #[test]
    fn offering_accessors_and_helpers() {
        let offs = [
            offering("a", "on-demand", 1.0, true),
            offering("b", "spot", 0.3, true),
            offering("b", "spot", 0.5, false),
            offering("c", "reserved", 0.2, true),
        ];
        assert_eq!(
            (offs[3].zone(), offs[3].capacity_type(), offs[3].reservation_id()),
            (Some("c"), Some("reserved"), Some("cr-1"))
        );
        assert_eq!(offs[0].reservation_id(), None);
        assert_eq!(offs.available().count(), 3);
        assert_eq!(offs.cheapest().map(|o| o.price), Some(0.2));
        assert_eq!(offs.most_expensive().map(|o| o.price), Some(1.0));
        let zone_b = claim(&[(ZONE, &["b"])]);
        assert_eq!(offs.compatible(&zone_b, &WK).count(), 2);
        // reserved → spot → on-demand, most expensive of the first type present
        assert_eq!(offs.worst_launch_price(&Requirements::new(), &WK), 0.2);
        assert_eq!(offs.worst_launch_price(&zone_b, &WK), 0.5);
        assert_eq!(offs.worst_launch_price(&claim(&[(ZONE, &["a"])]), &WK), 1.0);
        assert_eq!(offs.worst_launch_price(&claim(&[(ZONE, &["z"])]), &WK), f64::INFINITY);
        // an offering with a reservation id is not compatible with a claim that does not allow it
        let no_res = [Requirement::does_not_exist(RESERVATION_ID)].into_iter().collect::<Requirements>();
        assert!(!offs[3].is_compatible(&no_res, &WK));
        assert!(offs[0].is_compatible(&no_res, &WK));
    }

    #[test]
    fn order_by_price_is_deterministic() {
        let mut its = vec![
            it("d", vec![offering("a", "spot", 1.0, false)]),
            it("c", vec![offering("a", "spot", 0.5, true)]),
            it("b", vec![offering("a", "spot", 0.5, true), offering("z", "spot", 0.1, true)]),
            it("a", vec![offering("a", "spot", f64::NAN, true)]),
            it("e", vec![]),
        ];
        let reqs = claim(&[(ZONE, &["a"])]);
        order_by_price(&mut its, &reqs, &WK);
        let names: Vec<&str> = its.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, vec!["b", "c", "d", "e", "a"]);
        let mut refs: Vec<&InstanceType> = its.iter().collect();
        order_by_price(&mut refs, &Requirements::new(), &WK);
        assert_eq!(refs.first().map(|i| i.name.as_str()), Some("b"));
    }

    #[test]
    fn min_values_and_truncate() {
        let its = vec![
            it("m5.large", vec![offering("a", "spot", 0.1, true)]),
            it("m5.xlarge", vec![offering("a", "spot", 0.2, true)]),
            it("c5.large", vec![offering("a", "spot", 0.3, true)]),
        ];
        let reqs: Requirements =
            [Requirement::new(INSTANCE_TYPE, Operator::Exists, [""; 0], Some(2)).unwrap()].into_iter().collect();
        assert_eq!(satisfies_min_values(&its, &reqs), Ok(2));
        assert_eq!(satisfies_min_values(&its, &Requirements::new()), Ok(0));
        let need4 = [Requirement::exists(INSTANCE_TYPE).with_min_values(Some(4))].into_iter().collect::<Requirements>();
        let err = satisfies_min_values(&its, &need4).unwrap_err();
        assert_eq!(err.achieved.get(INSTANCE_TYPE), Some(&3));
        assert!(err.to_string().contains("node.kubernetes.io/instance-type (got 3, need 4)"), "{err}");
        let refs: Vec<&InstanceType> = its.iter().collect();
        let kept = truncate(refs.clone(), &reqs, &WK, 2, MinValuesPolicy::Strict).unwrap();
        assert_eq!(kept.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(), vec!["m5.large", "m5.xlarge"]);
        assert!(truncate(refs.clone(), &reqs, &WK, 1, MinValuesPolicy::Strict).is_err());
        assert_eq!(truncate(refs, &reqs, &WK, 1, MinValuesPolicy::BestEffort).map(|v| v.len()), Ok(1));
    }
}
