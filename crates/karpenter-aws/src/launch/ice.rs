//! Offerings EC2 recently refused for capacity: marked unavailable for
//! [`ICE_TTL`] (the TTL restarts on a repeated mark) in a [`CapacityMarks`], whose version changes with every
//! mark and expiry so cached catalogues know when to rebuild.
//!
//! Launches into a placement group mark their offering *within that group* (key `capacity type, instance type,
//! zone, group id[, partition]`): [`UnavailableOfferings::mark_in_group`]. A spread group that reached its
//! per-zone instance limit marks the whole zone for the group ([`UnavailableOfferings::mark_group_zone`]).
//! [`UnavailableOfferings::apply_in_group`] applies them to a class's offerings: a mark without partition (or a
//! zone mark) makes the offering unavailable; partition marks narrow the offering's partition requirement, and
//! the offering is unavailable once every partition is marked. Marks without a group apply to every class.
//!
//! Zones an ARC zonal shift moves the cluster away from ([`UnavailableOfferings::set_shifted_zones`], kept by
//! `crate::zonalshift`) make every offering there unavailable until the shift ends; they have no TTL.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::labels as aws_labels;
use chrono::{DateTime, Utc};
use karpenter_cloudprovider::{CapacityMarks, Clock, OfferingRef};
use karpenter_requirements::{InstanceType, Requirement};

/// How long an offering stays unavailable after an insufficient-capacity error.
pub const ICE_TTL: Duration = Duration::from_secs(180);

/// The fleet error codes that mean "no capacity for this offering now".
pub const ICE_CODES: [&str; 8] = [
    "InsufficientInstanceCapacity",
    "MaxSpotInstanceCountExceeded",
    "VcpuLimitExceeded",
    "UnfulfillableCapacity",
    "Unsupported",
    "InsufficientFreeAddressesInSubnet",
    "MaxFleetCountExceeded",
    "ReservationCapacityExceeded",
];

/// The fleet error code saying the spot service-linked role cannot be created: spot as a whole is unavailable.
pub const SPOT_SLR_CODE: &str = "AuthFailure.ServiceLinkedRoleCreationNotPermitted";

/// Whether a fleet error code is an insufficient-capacity code.
pub fn is_ice_code(code: &str) -> bool {
    ICE_CODES.contains(&code)
}

/// The placement group (and partition) a launch went into.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlacementScope {
    /// The group's id.
    pub group_id: String,
    /// The partition of a partition group.
    pub partition: Option<i32>,
}

impl PlacementScope {
    /// A scope for `group_id` (and `partition`).
    pub fn new(group_id: impl Into<String>, partition: Option<i32>) -> Self {
        Self { group_id: group_id.into(), partition }
    }
}

#[derive(Debug, Default)]
struct Inner {
    marks: CapacityMarks,
    expiry: BTreeMap<OfferingRef, DateTime<Utc>>,
    capacity_types: BTreeMap<String, DateTime<Utc>>,
    /// (offering, group) marks.
    grouped: BTreeMap<(OfferingRef, PlacementScope), DateTime<Utc>>,
    /// (group id, zone) marks: every instance type of the zone, in the group.
    group_zones: BTreeMap<(String, String), DateTime<Utc>>,
    /// Zones (names) under an active zonal shift.
    shifted_zones: std::collections::BTreeSet<String>,
    version: u64,
}

/// The unavailable-offerings cache, shared (clones share state) by the launch path, the instance-type
/// provider and the interruption handler (spot interruptions mark their offering too).
#[derive(Clone)]
pub struct UnavailableOfferings {
    inner: Arc<Mutex<Inner>>,
    clock: Arc<dyn Clock>,
    ttl: Duration,
}

impl fmt::Debug for UnavailableOfferings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnavailableOfferings").field("marked", &self.lock().marks.len()).finish()
    }
}

impl UnavailableOfferings {
    /// An empty cache on `clock` with [`ICE_TTL`].
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self::with_ttl(clock, ICE_TTL)
    }

    /// An empty cache with another TTL.
    pub fn with_ttl(clock: Arc<dyn Clock>, ttl: Duration) -> Self {
        Self { inner: Arc::new(Mutex::new(Inner::default())), clock, ttl }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn expires(&self) -> DateTime<Utc> {
        self.clock.now() + chrono::Duration::from_std(self.ttl).unwrap_or(chrono::Duration::MAX)
    }

    /// Marks one offering unavailable for the TTL (restarting it when already marked).
    pub fn mark(&self, offering: OfferingRef) {
        let until = self.expires();
        let mut inner = self.lock();
        inner.expiry.insert(offering.clone(), until);
        if inner.marks.set(offering, true) {
            inner.version += 1;
        }
    }

    /// Marks a whole capacity type (e.g. `spot` when the spot service-linked role is missing).
    pub fn mark_capacity_type(&self, capacity_type: &str) {
        let until = self.expires();
        let mut inner = self.lock();
        if inner.capacity_types.insert(capacity_type.to_owned(), until).is_none() {
            inner.version += 1;
        }
    }

    /// Marks one offering unavailable within a placement group (and partition) for the TTL.
    pub fn mark_in_group(&self, offering: OfferingRef, scope: PlacementScope) {
        let until = self.expires();
        let mut inner = self.lock();
        if inner.grouped.insert((offering, scope), until).is_none() {
            inner.version += 1;
        }
    }

    /// Marks every instance type of `zone` unavailable within placement group `group_id` for the TTL (a spread
    /// group at its per-zone instance limit).
    pub fn mark_group_zone(&self, group_id: &str, zone: &str) {
        let until = self.expires();
        let mut inner = self.lock();
        if inner.group_zones.insert((group_id.to_owned(), zone.to_owned()), until).is_none() {
            inner.version += 1;
        }
    }

    /// Replaces the zones under an active zonal shift; `true` when they changed.
    pub fn set_shifted_zones(&self, zones: std::collections::BTreeSet<String>) -> bool {
        let mut inner = self.lock();
        if inner.shifted_zones == zones {
            return false;
        }
        inner.shifted_zones = zones;
        inner.version += 1;
        true
    }

    /// Whether `zone` (a name) is under an active zonal shift.
    pub fn is_zone_shifted(&self, zone: &str) -> bool {
        self.lock().shifted_zones.contains(zone)
    }

    /// Whether the offering is unavailable within the group (and partition): an unscoped mark, a mark of the
    /// group without partition, of that partition, or of the group's zone.
    pub fn is_unavailable_in_group(&self, offering: &OfferingRef, scope: &PlacementScope) -> bool {
        if self.is_unavailable(offering) {
            return true;
        }
        let inner = self.lock();
        inner.group_zones.contains_key(&(scope.group_id.clone(), offering.zone.clone()))
            || inner.grouped.contains_key(&(offering.clone(), PlacementScope::new(&scope.group_id, None)))
            || (scope.partition.is_some() && inner.grouped.contains_key(&(offering.clone(), scope.clone())))
    }

    /// Drops marks whose TTL has passed.
    pub fn sweep(&self) {
        let now = self.clock.now();
        let mut inner = self.lock();
        let before = inner.grouped.len() + inner.group_zones.len();
        inner.grouped.retain(|_, t| *t > now);
        inner.group_zones.retain(|_, t| *t > now);
        if inner.grouped.len() + inner.group_zones.len() != before {
            inner.version += 1;
        }
        let expired: Vec<OfferingRef> =
            inner.expiry.iter().filter(|(_, t)| **t <= now).map(|(o, _)| o.clone()).collect();
        for o in expired {
            inner.expiry.remove(&o);
            if inner.marks.set(o, false) {
                inner.version += 1;
            }
        }
        let before = inner.capacity_types.len();
        inner.capacity_types.retain(|_, t| *t > now);
        if inner.capacity_types.len() != before {
            inner.version += 1;
        }
    }

    /// Whether the offering is unavailable now.
    pub fn is_unavailable(&self, offering: &OfferingRef) -> bool {
        self.sweep();
        let inner = self.lock();
        inner.capacity_types.contains_key(&offering.capacity_type)
            || inner.expiry.contains_key(offering)
            || inner.shifted_zones.contains(&offering.zone)
    }

    /// The marked offerings now (sorted).
    pub fn offerings(&self) -> Vec<OfferingRef> {
        self.sweep();
        self.lock().marks.offerings()
    }

    /// Changes whenever the set of unavailable offerings does.
    pub fn version(&self) -> u64 {
        self.sweep();
        self.lock().version
    }

    /// [`apply`](Self::apply), then the marks of placement group `group_id` (with `partitions` partitions for
    /// a partition group): see the module docs.
    pub fn apply_in_group(&self, instance_types: &mut [InstanceType], group_id: &str, partitions: Option<i32>) {
        self.apply(instance_types);
        let inner = self.lock();
        if inner.grouped.is_empty() && inner.group_zones.is_empty() {
            return;
        }
        for it in instance_types {
            let name = it.name.clone();
            for o in &mut it.offerings {
                let (Some(zone), Some(ct)) = (o.zone().map(str::to_owned), o.capacity_type().map(str::to_owned)) else {
                    continue;
                };
                let offering = OfferingRef::new(&name, &zone, &ct);
                if inner.group_zones.contains_key(&(group_id.to_owned(), zone.clone()))
                    || inner.grouped.contains_key(&(offering.clone(), PlacementScope::new(group_id, None)))
                {
                    o.available = false;
                    continue;
                }
                let Some(n) = partitions.filter(|n| *n > 0) else { continue };
                let left: Vec<String> = (1..=n)
                    .filter(|p| {
                        !inner.grouped.contains_key(&(offering.clone(), PlacementScope::new(group_id, Some(*p))))
                    })
                    .map(|p| p.to_string())
                    .collect();
                if left.is_empty() {
                    o.available = false;
                } else if left.len() < usize::try_from(n).unwrap_or(usize::MAX) {
                    o.requirements.remove(aws_labels::PLACEMENT_GROUP_PARTITION);
                    o.requirements.add(Requirement::in_values(aws_labels::PLACEMENT_GROUP_PARTITION, left));
                }
            }
        }
    }

    /// Marks the unavailable offerings of `instance_types` `available: false`.
    pub fn apply(&self, instance_types: &mut [InstanceType]) {
        self.sweep();
        let inner = self.lock();
        inner.marks.apply(instance_types);
        if inner.capacity_types.is_empty() && inner.shifted_zones.is_empty() {
            return;
        }
        for it in instance_types {
            for o in &mut it.offerings {
                if o.capacity_type().is_some_and(|ct| inner.capacity_types.contains_key(ct))
                    || o.zone().is_some_and(|z| inner.shifted_zones.contains(z))
                {
                    o.available = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Debug)]
    struct TestClock(Mutex<DateTime<Utc>>);
    impl Clock for TestClock {
        fn now(&self) -> DateTime<Utc> {
            *self.0.lock().unwrap()
        }
    }

    #[test]
    fn marks_expire_after_three_minutes_and_repeat_marks_restart_the_ttl() {
        let clock = Arc::new(TestClock(Mutex::new(DateTime::<Utc>::UNIX_EPOCH)));
        let ice = UnavailableOfferings::new(clock.clone());
        let o = OfferingRef::new("m5.large", "us-west-2a", "spot");
        let v0 = ice.version();
        ice.mark(o.clone());
        assert!(ice.is_unavailable(&o));
        assert!(ice.version() > v0);
        *clock.0.lock().unwrap() += chrono::Duration::seconds(120);
        ice.mark(o.clone());
        *clock.0.lock().unwrap() += chrono::Duration::seconds(120);
        assert!(ice.is_unavailable(&o), "the repeated mark restarted the TTL");
        *clock.0.lock().unwrap() += chrono::Duration::seconds(61);
        assert!(!ice.is_unavailable(&o));
        assert!(ice.offerings().is_empty());
        ice.mark_capacity_type("spot");
        assert!(ice.is_unavailable(&OfferingRef::new("c5.large", "us-west-2b", "spot")));
        assert!(!ice.is_unavailable(&OfferingRef::new("c5.large", "us-west-2b", "on-demand")));
        assert!(is_ice_code("InsufficientInstanceCapacity"));
        assert!(!is_ice_code("InvalidParameterValue"));
    }

    fn offering(zone: &str, ct: &str, partitions: &[&str]) -> karpenter_requirements::Offering {
        use karpenter_requirements::labels::{CAPACITY_TYPE, ZONE};
        let reqs = [
            Requirement::in_values(CAPACITY_TYPE, [ct]),
            Requirement::in_values(ZONE, [zone]),
            Requirement::in_values(aws_labels::PLACEMENT_GROUP_ID, ["pg-1"]),
            Requirement::in_values(aws_labels::PLACEMENT_GROUP_PARTITION, partitions.iter().copied()),
        ]
        .into_iter()
        .collect();
        karpenter_requirements::Offering::new(reqs, 0.1)
    }

    #[test]
    fn group_marks_narrow_partitions_and_expire() {
        let clock = Arc::new(TestClock(Mutex::new(DateTime::<Utc>::UNIX_EPOCH)));
        let ice = UnavailableOfferings::new(clock.clone());
        let offerings = vec![offering("us-west-2a", "spot", &["1", "2"]), offering("us-west-2b", "spot", &["1", "2"])];
        let it = InstanceType::new("m5.large", Default::default(), offerings, Default::default(), Default::default());
        let a = OfferingRef::new("m5.large", "us-west-2a", "spot");
        let v0 = ice.version();
        ice.mark_in_group(a.clone(), PlacementScope::new("pg-1", Some(1)));
        assert!(ice.version() > v0);
        let mut its = vec![it.clone()];
        ice.apply_in_group(&mut its, "pg-1", Some(2));
        let narrowed = its[0].offerings[0].requirements.get(aws_labels::PLACEMENT_GROUP_PARTITION);
        assert!(its[0].offerings[0].available);
        assert!(narrowed.has("2") && !narrowed.has("1"));
        assert_eq!(its[0].offerings[1].requirements.get(aws_labels::PLACEMENT_GROUP_PARTITION).values().len(), 2);
        // Another group is not affected.
        let mut other = vec![it.clone()];
        ice.apply_in_group(&mut other, "pg-2", Some(2));
        assert!(other[0].offerings.iter().all(|o| o.available));
        // Every partition marked: unavailable. A zone mark takes every type of the zone.
        ice.mark_in_group(a.clone(), PlacementScope::new("pg-1", Some(2)));
        let mut its = vec![it.clone()];
        ice.apply_in_group(&mut its, "pg-1", Some(2));
        assert!(!its[0].offerings[0].available);
        assert!(its[0].offerings[1].available);
        ice.mark_group_zone("pg-1", "us-west-2b");
        let mut its = vec![it.clone()];
        ice.apply_in_group(&mut its, "pg-1", Some(2));
        assert!(its[0].offerings.iter().all(|o| !o.available));
        assert!(!ice.is_unavailable(&a), "group marks stay in the group");
        *clock.0.lock().unwrap() += chrono::Duration::seconds(181);
        let mut its = vec![it];
        ice.apply_in_group(&mut its, "pg-1", Some(2));
        assert!(its[0].offerings.iter().all(|o| o.available), "expired after the TTL");
        assert!(!ice.is_unavailable_in_group(&a, &PlacementScope::new("pg-1", Some(1))));
    }
}
