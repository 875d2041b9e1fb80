//! Which in-flight NodeClaims are known to have no room left for a class of pods.
//!
//! A pass over many replicas opens hundreds of NodeClaims, and every pod scans them in fewest-pods order
//! before opening another: without a memory each pod re-checked every claim already filled by the pods
//! before it, so the scan grew with pods × claims (524 claims at 200,000 pods).
//!
//! Why skipping is exact: a class is the pods with equal requests ([`RoomClasses`]); a claim "has no room"
//! for a class when, for each of its instance-type options, its requests plus the class's requests do not
//! fit the option's room (allocatable minus daemon overhead). During a pass a claim's requests only grow
//! (every pod added has non-negative requests, which [`RoomClasses::new`] checks, else the memory is off),
//! its options only shrink (each placement keeps a subset) and the rooms are fixed, so once true this stays
//! true for the rest of the pass: `NodeClaim.CanAdd` would turn every later pod of the class down on that
//! claim, whatever its requirements, topology or ports say. Skipping such a claim therefore changes no
//! decision, only the work spent reaching it.

use karpenter_requirements::ResourceList;
use rustc_hash::FxHashMap;

/// No class: the memory is off for this pod.
const NONE: u32 = u32::MAX;

/// Each pod's class of equal requests, or none when the memory is off for the pass.
#[derive(Debug, Default)]
pub(crate) struct RoomClasses {
    of_pod: Vec<u32>,
    count: usize,
}

impl RoomClasses {
    /// Classes for the pods' requests, in order; off (every pod without a class) when any pod requests a
    /// negative quantity, since adding such a pod would shrink a claim's requests.
    pub fn new<'r>(requests: impl Iterator<Item = &'r ResourceList> + Clone) -> Self {
        if requests.clone().any(ResourceList::any_negative) {
            return RoomClasses::default();
        }
        let mut ids: FxHashMap<&ResourceList, u32> = FxHashMap::default();
        let of_pod = requests
            .map(|r| {
                let next = u32::try_from(ids.len()).unwrap_or(NONE);
                *ids.entry(r).or_insert(next)
            })
            .collect();
        RoomClasses { of_pod, count: ids.len() }
    }

    /// Pod `i`'s class.
    pub fn class(&self, i: usize) -> Option<usize> {
        self.of_pod.get(i).filter(|&&c| c != NONE).map(|&c| c as usize)
    }

    /// The number of classes.
    pub fn len(&self) -> usize {
        self.count
    }
}

/// Per class, the set of claims (by index) known to have no room for it.
#[derive(Debug, Default)]
pub(crate) struct NoRoom {
    /// Per class a bit set over claim indices, grown on demand.
    bits: Vec<Vec<u64>>,
    /// Per class the number of bits set.
    counts: Vec<usize>,
}

impl NoRoom {
    /// An empty memory for `classes` classes.
    pub fn new(classes: usize) -> Self {
        NoRoom { bits: vec![Vec::new(); classes], counts: vec![0; classes] }
    }

    /// Whether claim `claim` is known to have no room for `class`.
    pub fn has(&self, class: usize, claim: usize) -> bool {
        self.bits.get(class).and_then(|b| b.get(claim / 64)).is_some_and(|w| w & (1 << (claim % 64)) != 0)
    }

    /// Records that claim `claim` has no room for `class`.
    pub fn insert(&mut self, class: usize, claim: usize) {
        let (Some(bits), Some(count)) = (self.bits.get_mut(class), self.counts.get_mut(class)) else { return };
        if bits.len() <= claim / 64 {
            bits.resize(claim / 64 + 1, 0);
        }
        if let Some(w) = bits.get_mut(claim / 64) {
            let bit = 1 << (claim % 64);
            if *w & bit == 0 {
                *w |= bit;
                *count += 1;
            }
        }
    }

    /// How many claims are known to have no room for `class`.
    pub fn count(&self, class: usize) -> usize {
        self.counts.get(class).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_requirements::Quantity;

    fn cpu(s: &str) -> ResourceList {
        let mut r = ResourceList::new();
        r.insert("cpu", s.parse::<Quantity>().expect("quantity"));
        r
    }

    #[test]
    fn equal_requests_share_a_class_by_value() {
        let reqs = [cpu("1"), cpu("500m"), cpu("1000m"), cpu("0.5")];
        let classes = RoomClasses::new(reqs.iter());
        assert_eq!(classes.len(), 2);
        assert_eq!(classes.class(0), classes.class(2), "1 and 1000m are one class");
        assert_eq!(classes.class(1), classes.class(3));
        assert_ne!(classes.class(0), classes.class(1));
        assert_eq!(classes.class(4), None, "out of range");
    }

    #[test]
    fn a_negative_request_turns_the_memory_off() {
        let reqs = [cpu("1"), cpu("-1")];
        let classes = RoomClasses::new(reqs.iter());
        assert_eq!(classes.class(0), None);
        assert_eq!(classes.class(1), None);
        assert_eq!(classes.len(), 0);
    }

    #[test]
    fn claims_are_remembered_per_class_and_counted_once() {
        let mut memory = NoRoom::new(2);
        assert!(!memory.has(0, 130));
        memory.insert(0, 130);
        memory.insert(0, 130);
        memory.insert(0, 3);
        assert!(memory.has(0, 130) && memory.has(0, 3));
        assert!(!memory.has(0, 129) && !memory.has(0, 131) && !memory.has(1, 130));
        assert_eq!(memory.count(0), 2);
        assert_eq!(memory.count(1), 0);
        memory.insert(5, 1);
        assert!(!memory.has(5, 1), "unknown classes are ignored");
    }
}
