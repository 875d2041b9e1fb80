//! Offerings EC2 recently refused for capacity (cloudprovider-aws.md §4.4): marked unavailable for
//! [`ICE_TTL`] (the TTL restarts on a repeated mark) in a [`CapacityMarks`], whose version changes with every
//! mark and expiry so cached catalogues know when to rebuild.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use karpenter_cloudprovider::{CapacityMarks, Clock, OfferingRef};
use karpenter_requirements::InstanceType;

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

#[derive(Debug, Default)]
struct Inner {
    marks: CapacityMarks,
    expiry: BTreeMap<OfferingRef, DateTime<Utc>>,
    capacity_types: BTreeMap<String, DateTime<Utc>>,
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

    /// Drops marks whose TTL has passed.
    pub fn sweep(&self) {
        let now = self.clock.now();
        let mut inner = self.lock();
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
        inner.capacity_types.contains_key(&offering.capacity_type) || inner.expiry.contains_key(offering)
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

    /// Marks the unavailable offerings of `instance_types` `available: false`.
    pub fn apply(&self, instance_types: &mut [InstanceType]) {
        self.sweep();
        let inner = self.lock();
        inner.marks.apply(instance_types);
        if inner.capacity_types.is_empty() {
            return;
        }
        for it in instance_types {
            for o in &mut it.offerings {
                if o.capacity_type().is_some_and(|ct| inner.capacity_types.contains_key(ct)) {
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
}
