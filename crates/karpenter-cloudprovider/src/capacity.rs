//! Offerings a provider has marked out of capacity, shared by the fake and the kwok provider (and usable by any
//! provider that keeps such marks in memory): the set, a version that changes with it (so a cached catalogue
//! knows when to rebuild), and applying the marks to a catalogue.

use std::collections::BTreeSet;

use karpenter_requirements::InstanceType;

use crate::OfferingRef;

/// Offerings out of capacity, with a version bumped on every change.
#[derive(Debug, Clone, Default)]
pub struct CapacityMarks {
    offerings: BTreeSet<OfferingRef>,
    version: u64,
}

impl CapacityMarks {
    /// Marks `offering` out of capacity (`true`) or back in capacity (`false`); returns whether anything changed.
    pub fn set(&mut self, offering: OfferingRef, insufficient: bool) -> bool {
        let changed = if insufficient { self.offerings.insert(offering) } else { self.offerings.remove(&offering) };
        if changed {
            self.version += 1;
        }
        changed
    }

    /// Every offering back in capacity.
    pub fn clear(&mut self) {
        if !self.offerings.is_empty() {
            self.offerings.clear();
            self.version += 1;
        }
    }

    /// The marked offerings, sorted.
    pub fn offerings(&self) -> Vec<OfferingRef> {
        self.offerings.iter().cloned().collect()
    }

    /// How many offerings are marked out of capacity.
    pub fn len(&self) -> usize {
        self.offerings.len()
    }

    /// Whether every offering is in capacity.
    pub fn is_empty(&self) -> bool {
        self.offerings.is_empty()
    }

    /// Changes whenever the marks do.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Marks every offering of `instance_types` that is out of capacity as unavailable.
    pub fn apply(&self, instance_types: &mut [InstanceType]) {
        if self.offerings.is_empty() {
            return;
        }
        for it in instance_types {
            for o in &mut it.offerings {
                let key = OfferingRef::new(&it.name, o.zone().unwrap_or(""), o.capacity_type().unwrap_or(""));
                if self.offerings.contains(&key) {
                    o.available = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_types::{instance_type, offering};

    #[test]
    fn version_changes_only_with_the_marks_and_apply_marks_unavailable() {
        let mut marks = CapacityMarks::default();
        let a = OfferingRef::new("small", "zone-a", "spot");
        assert!(marks.set(a.clone(), true));
        assert!(!marks.set(a.clone(), true));
        assert_eq!(marks.version(), 1);
        // Only the marked offering goes: not its type's other offerings, nor the same offering of another type.
        let offerings = || {
            ["zone-a", "zone-b"]
                .into_iter()
                .flat_map(|z| [offering(z, "spot", 0.7, true), offering(z, "on-demand", 1.0, true)])
                .collect::<Vec<_>>()
        };
        let mut catalogue = vec![
            instance_type("large", "amd64", "linux", 8, offerings()),
            instance_type("small", "amd64", "linux", 2, offerings()),
        ];
        marks.apply(&mut catalogue);
        let unavailable: Vec<_> = catalogue
            .iter()
            .flat_map(|it| it.offerings.iter().filter(|o| !o.available).map(move |o| (it.name.clone(), o.zone())))
            .collect();
        assert_eq!(unavailable, [("small".to_string(), Some("zone-a"))]);
        marks.clear();
        marks.clear();
        assert_eq!((marks.version(), marks.len()), (2, 0));
        assert!(!marks.set(a, false));
    }
}
