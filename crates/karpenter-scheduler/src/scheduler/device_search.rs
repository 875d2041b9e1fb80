//! The device search of DRA allocation: which devices of a candidate satisfy a set of requests, with
//! `firstAvailable` alternatives, `matchAttribute` and `distinctAttribute` constraints, admin access and shared counters (partitionable
//! devices), backtracking over choices; and the [`Allocator`] holding what the pass has taken of published
//! devices.
//!
//! Constraints and counters are checked as each device is taken, not after a full choice: a device that breaks a
//! constraint or overdraws a counter is skipped right there and the search moves on to the next, so a valid
//! choice is found whenever one exists within the step bound.

use karpenter_api::dra::AllocationMode;
use karpenter_requirements::{CounterSet, Device, DeviceAttribute};
use rustc_hash::{FxHashMap, FxHashSet};

/// Device-search steps after which a claim counts as not allocatable on a candidate (a bound on pathological
/// inputs: many identical devices and many requests).
const MAX_SEARCH_STEPS: usize = 20_000;

/// A device the pass knows.
#[derive(Debug)]
pub(crate) struct DeviceEntry<'a> {
    pub(crate) driver: &'a str,
    pub(crate) device: &'a Device,
    /// The shared counters it uses up while allocated (counter id, amount in nano-units).
    pub(crate) consumes: Vec<(u32, i128)>,
}

impl DeviceEntry<'_> {
    /// The value of a fully-qualified attribute (`domain/id`); the device's own driver's domain may be left out
    /// in the slice.
    pub(crate) fn attribute(&self, qualified: &str) -> Option<&DeviceAttribute> {
        self.device.attributes.get(qualified).or_else(|| {
            let (domain, id) = qualified.split_once('/')?;
            (domain == self.driver).then(|| self.device.attributes.get(id)).flatten()
        })
    }
}

/// Every device of the pass and every shared counter's capacity (nano-units), by id.
#[derive(Debug, Default)]
pub(crate) struct DeviceTable<'a> {
    pub(crate) devices: Vec<DeviceEntry<'a>>,
    pub(crate) counters: Vec<i128>,
}

/// Counter ids by (counter set, counter) of one pool or one slice template.
pub(crate) type CounterIds<'a> = FxHashMap<(&'a str, &'a str), u32>;

impl<'a> DeviceTable<'a> {
    /// Gives every counter of `shared` an id (with its capacity), recorded in `sets`.
    pub(crate) fn add_counters(&mut self, sets: &mut CounterIds<'a>, shared: &'a [CounterSet]) {
        for set in shared {
            for (name, q) in &set.counters {
                sets.insert((set.name.as_str(), name.as_str()), self.counters.len() as u32);
                self.counters.push(q.as_nanos());
            }
        }
    }

    /// A device's `consumesCounters` as counter ids. A counter its pool does not declare gets a capacity of
    /// zero, so the device is never allocated (the API server rejects such a slice; here it simply stays unused).
    pub(crate) fn consumption(&mut self, sets: Option<&CounterIds<'a>>, consumes: &[CounterSet]) -> Vec<(u32, i128)> {
        let mut out = Vec::new();
        for set in consumes {
            for (name, q) in &set.counters {
                let id = sets.and_then(|s| s.get(&(set.name.as_str(), name.as_str()))).copied().unwrap_or_else(|| {
                    self.counters.push(0);
                    (self.counters.len() - 1) as u32
                });
                out.push((id, q.as_nanos()));
            }
        }
        out
    }

    fn consumes(&self, d: u32) -> &[(u32, i128)] {
        self.devices.get(d as usize).map_or(&[], |e| e.consumes.as_slice())
    }

    fn capacity(&self, counter: u32) -> i128 {
        self.counters.get(counter as usize).copied().unwrap_or(0)
    }
}

/// One way to satisfy a request, with the devices that match its class, selectors and tolerations.
#[derive(Debug, Clone)]
pub(crate) struct Alternative {
    pub(crate) mode: AllocationMode,
    /// Sorted ids of the matching devices.
    pub(crate) matches: Vec<u32>,
    /// `adminAccess`: devices in use qualify, and the ones chosen are not taken from others.
    pub(crate) admin: bool,
    /// The claim's constraints this alternative is bound by (indices into its claim's constraints).
    pub(crate) constraints: Vec<u32>,
}

/// A claim's constraint in a search, on a fully-qualified attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Constraint<'s> {
    /// `matchAttribute`: every device bound by it has the same value.
    Match(&'s str),
    /// `distinctAttribute`: the devices bound by it have pairwise different values.
    Distinct(&'s str),
}

impl<'s> Constraint<'s> {
    fn attribute(self) -> &'s str {
        match self {
            Constraint::Match(a) | Constraint::Distinct(a) => a,
        }
    }

    /// Whether a device with `value` may join `taken` (the values of the devices bound so far).
    fn admits(self, taken: &[&DeviceAttribute], value: &DeviceAttribute) -> bool {
        match self {
            Constraint::Match(_) => taken.first().is_none_or(|v| *v == value),
            Constraint::Distinct(_) => !taken.contains(&value),
        }
    }
}

/// A request in a search: its alternatives, and where its claim's constraints start in the search's list.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Req<'s> {
    pub(crate) alts: &'s [Alternative],
    pub(crate) constraint_base: u32,
}

/// A device chosen by a search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    pub(crate) id: u32,
    /// Chosen with admin access: not taken from others.
    pub(crate) admin: bool,
}

/// Published devices in use and shared counters consumed: held by claims' status or allocated during the solve.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Allocator {
    used: FxHashSet<u32>,
    consumed: FxHashMap<u32, i128>,
}

impl Allocator {
    /// The devices `held` in use, their counters consumed.
    pub(crate) fn new(table: &DeviceTable<'_>, held: impl IntoIterator<Item = u32>) -> Self {
        let mut allocator = Allocator::default();
        for d in held {
            if allocator.used.insert(d) {
                allocator.consume(table, d, 1);
            }
        }
        allocator
    }

    pub(crate) fn is_used(&self, id: u32) -> bool {
        self.used.contains(&id)
    }

    /// Of `counter`, how much is consumed.
    pub(crate) fn consumed(&self, counter: u32) -> i128 {
        self.consumed.get(&counter).copied().unwrap_or(0)
    }

    fn consume(&mut self, table: &DeviceTable<'_>, d: u32, sign: i128) {
        for &(c, amount) in table.consumes(d) {
            let left = {
                let v = self.consumed.entry(c).or_default();
                *v += sign * amount;
                *v
            };
            if left == 0 {
                self.consumed.remove(&c);
            }
        }
    }

    /// Takes `devices`; `false` (and nothing taken) if one is in use already or their counters do not fit.
    pub(crate) fn commit(&mut self, table: &DeviceTable<'_>, devices: &[u32]) -> bool {
        if devices.iter().any(|d| self.used.contains(d)) {
            return false;
        }
        let mut need: FxHashMap<u32, i128> = FxHashMap::default();
        for &d in devices {
            for &(c, amount) in table.consumes(d) {
                *need.entry(c).or_default() += amount;
            }
        }
        if need.iter().any(|(&c, &n)| self.consumed(c) + n > table.capacity(c)) {
            return false;
        }
        for &d in devices {
            self.used.insert(d);
            self.consume(table, d, 1);
        }
        true
    }

    /// Gives `devices` back (a rollback of [`Allocator::commit`]): a candidate searched jointly for all its claims
    /// (a new NodeClaim, a node offering slice templates) replaces the shared devices it took before with the new
    /// search's; the property test proves the two are inverse.
    pub(crate) fn release(&mut self, table: &DeviceTable<'_>, devices: &[u32]) {
        for &d in devices {
            if self.used.remove(&d) {
                self.consume(table, d, -1);
            }
        }
    }
}

/// Devices for every request of `requests` out of `view` (sorted ids): each device for one request only (admin
/// access aside), none in use in `base` (`None`: a candidate's own template devices, all free), constraints
/// holding and shared counters not overdrawn. Alternatives are tried in order and the search backtracks. `None`
/// when there is no way.
pub(crate) fn search(
    table: &DeviceTable<'_>,
    requests: &[Req<'_>],
    constraints: &[Constraint<'_>],
    view: &[u32],
    base: Option<&Allocator>,
) -> Option<Vec<Taken>> {
    search_again(table, requests, constraints, view, base, &[])
}

/// [`search`] for a candidate that holds `mine` (sorted ids, committed to `base` by its previous search): they
/// count as free, and their counters as unconsumed, since the new choice replaces the old one.
pub(crate) fn search_again(
    table: &DeviceTable<'_>,
    requests: &[Req<'_>],
    constraints: &[Constraint<'_>],
    view: &[u32],
    base: Option<&Allocator>,
    mine: &[u32],
) -> Option<Vec<Taken>> {
    let mut mine_consumed: FxHashMap<u32, i128> = FxHashMap::default();
    if base.is_some() {
        for &d in mine {
            for &(c, amount) in table.consumes(d) {
                *mine_consumed.entry(c).or_default() += amount;
            }
        }
    }
    let mut s = Search {
        table,
        view,
        base,
        mine,
        mine_consumed,
        constraints,
        values: vec![Vec::new(); constraints.len()],
        consumed: FxHashMap::default(),
        taken: Vec::new(),
        steps: 0,
    };
    s.requests(requests).then_some(s.taken)
}

struct Search<'s, 'a> {
    table: &'s DeviceTable<'a>,
    view: &'s [u32],
    base: Option<&'s Allocator>,
    /// Devices the candidate took in its previous search (sorted): free again for this one.
    mine: &'s [u32],
    /// What `mine` consumes of `base`'s counters.
    mine_consumed: FxHashMap<u32, i128>,
    /// The constraints of the search's claims.
    constraints: &'s [Constraint<'s>],
    /// Per constraint: the values of the devices taken so far that it binds, in order taken.
    values: Vec<Vec<&'s DeviceAttribute>>,
    /// Counters consumed by the devices taken so far (on top of `base`).
    consumed: FxHashMap<u32, i128>,
    taken: Vec<Taken>,
    steps: usize,
}

impl<'s> Search<'s, '_> {
    fn tick(&mut self) -> bool {
        self.steps += 1;
        self.steps <= MAX_SEARCH_STEPS
    }

    fn requests(&mut self, requests: &[Req<'_>]) -> bool {
        let Some((first, rest)) = requests.split_first() else { return true };
        for alt in first.alts {
            if !self.tick() {
                return false;
            }
            let mark = self.taken.len();
            let free = self.free(alt);
            let found = match alt.mode {
                AllocationMode::All => {
                    let all = alt.matches.iter().filter(|&&d| in_view(self.view, d)).count();
                    all > 0 && free.len() == all && self.take_all(alt, first.constraint_base, &free, rest)
                }
                AllocationMode::ExactCount(n) => self.pick(alt, first.constraint_base, &free, n as usize, 0, rest),
            };
            if found {
                return true;
            }
            debug_assert_eq!(self.taken.len(), mark, "a failed branch gives its devices back");
        }
        false
    }

    /// The devices `alt` may be given: on the node, and (without admin access) in use neither before the search
    /// nor by an earlier request of it.
    fn free(&self, alt: &Alternative) -> Vec<u32> {
        alt.matches
            .iter()
            .copied()
            .filter(|&d| {
                in_view(self.view, d)
                    && (alt.admin
                        || (!self.base.is_some_and(|b| b.is_used(d) && !in_view(self.mine, d))
                            && !self.taken.iter().any(|t| t.id == d && !t.admin)))
            })
            .collect()
    }

    fn take_all(&mut self, alt: &Alternative, base: u32, free: &[u32], rest: &[Req<'_>]) -> bool {
        let mut done = 0;
        while done < free.len() && self.take(alt, base, free[done]) {
            done += 1;
        }
        if done == free.len() && self.requests(rest) {
            return true;
        }
        for &d in free[..done].iter().rev() {
            self.untake(alt, base, d);
        }
        false
    }

    /// Chooses `n` more devices of `free[from..]` (in increasing position, so each set is tried once), then the
    /// remaining requests.
    fn pick(&mut self, alt: &Alternative, base: u32, free: &[u32], n: usize, from: usize, rest: &[Req<'_>]) -> bool {
        if n == 0 {
            return self.requests(rest);
        }
        let mut k = from;
        while k + n <= free.len() {
            if !self.tick() {
                return false;
            }
            let d = free[k];
            if self.take(alt, base, d) {
                if self.pick(alt, base, free, n - 1, k + 1, rest) {
                    return true;
                }
                self.untake(alt, base, d);
            }
            k += 1;
        }
        false
    }

    /// Takes `d` for `alt` if its constraints hold and (without admin access) its counters are available.
    fn take(&mut self, alt: &Alternative, base: u32, d: u32) -> bool {
        let table = self.table;
        let Some(entry) = table.devices.get(d as usize) else { return false };
        for &c in &alt.constraints {
            let i = (base + c) as usize;
            let Some(&constraint) = self.constraints.get(i) else { return false };
            // A device without the attribute satisfies neither kind.
            let Some(value) = entry.attribute(constraint.attribute()) else { return false };
            if !constraint.admits(self.values.get(i).map_or(&[], Vec::as_slice), value) {
                return false;
            }
        }
        if !alt.admin && !entry.consumes.is_empty() {
            // Added first, then checked: a device may name one counter twice.
            for &(c, amount) in &entry.consumes {
                *self.consumed.entry(c).or_default() += amount;
            }
            let over = entry.consumes.iter().any(|&(c, _)| {
                let before = self.base.map_or(0, |b| b.consumed(c)) - self.mine_consumed.get(&c).copied().unwrap_or(0);
                before + self.consumed.get(&c).copied().unwrap_or(0) > table.capacity(c)
            });
            if over {
                for &(c, amount) in &entry.consumes {
                    *self.consumed.entry(c).or_default() -= amount;
                }
                return false;
            }
        }
        for &c in &alt.constraints {
            let i = (base + c) as usize;
            let value = self.constraints.get(i).and_then(|k| entry.attribute(k.attribute()));
            if let (Some(slot), Some(value)) = (self.values.get_mut(i), value) {
                slot.push(value);
            }
        }
        self.taken.push(Taken { id: d, admin: alt.admin });
        true
    }

    /// Undoes the last [`Search::take`] (of `d`).
    fn untake(&mut self, alt: &Alternative, base: u32, d: u32) {
        let popped = self.taken.pop();
        debug_assert_eq!(popped.map(|t| t.id), Some(d));
        let Some(entry) = self.table.devices.get(d as usize) else { return };
        if !alt.admin {
            for &(c, amount) in &entry.consumes {
                *self.consumed.entry(c).or_default() -= amount;
            }
        }
        // Takes are undone last first, so each constraint's last value is this device's.
        for &c in &alt.constraints {
            if let Some(slot) = self.values.get_mut((base + c) as usize) {
                slot.pop();
            }
        }
    }
}

fn in_view(view: &[u32], id: u32) -> bool {
    view.binary_search(&id).is_ok()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use proptest::prelude::*;

    const DRIVER: &str = "gpu.example.com";

    fn alt(mode: AllocationMode, matches: &[u32]) -> Alternative {
        let mut matches = matches.to_vec();
        matches.sort_unstable();
        matches.dedup();
        Alternative { mode, matches, admin: false, constraints: Vec::new() }
    }

    fn one(matches: &[u32]) -> Alternative {
        alt(AllocationMode::ExactCount(1), matches)
    }

    fn req(alts: &[Alternative]) -> Req<'_> {
        Req { alts, constraint_base: 0 }
    }

    /// A table over `devices` (consuming nothing) and the given counter capacities.
    fn table(devices: &[Device], counters: Vec<i128>) -> DeviceTable<'_> {
        let devices =
            devices.iter().map(|device| DeviceEntry { driver: DRIVER, device, consumes: Vec::new() }).collect();
        DeviceTable { devices, counters }
    }

    fn plain(n: usize) -> Vec<Device> {
        (0..n).map(|i| Device::named(format!("d{i}"))).collect()
    }

    fn ids(taken: Option<Vec<Taken>>) -> Option<Vec<u32>> {
        taken.map(|t| t.into_iter().map(|t| t.id).collect())
    }

    #[test]
    fn search_backtracks_and_tries_alternatives_in_order() {
        let devices = plain(10);
        let t = table(&devices, Vec::new());
        let run = |reqs: &[Req<'_>], view: &[u32], base: Option<&Allocator>| ids(search(&t, reqs, &[], view, base));
        // Greedy would give device 0 to the first request and leave the second (only device 0) without.
        let (a, b) = ([one(&[0, 1])], [one(&[0])]);
        assert_eq!(run(&[req(&a), req(&b)], &[0, 1], None), Some(vec![1, 0]));
        let used = Allocator::new(&t, [0]);
        assert_eq!(run(&[req(&a), req(&b)], &[0, 1], Some(&used)), None, "device 0 is in use");
        // firstAvailable: the first alternative that fits wins.
        let first = [alt(AllocationMode::ExactCount(2), &[5, 6]), one(&[7])];
        assert_eq!(run(&[req(&first)], &[5, 7], None), Some(vec![7]), "only one of 5, 6 is on the node");
        assert_eq!(run(&[req(&first)], &[5, 6, 7], None), Some(vec![5, 6]));
        // All: every matching device on the node, and at least one; one in use means none.
        let all = [alt(AllocationMode::All, &[1, 2, 3])];
        assert_eq!(run(&[req(&all)], &[1, 2, 9], None), Some(vec![1, 2]));
        let two_used = Allocator::new(&t, [2]);
        assert_eq!(run(&[req(&all)], &[1, 2, 9], Some(&two_used)), None);
        assert_eq!(run(&[req(&all)], &[9], None), None);
        assert_eq!(run(&[], &[], None), Some(vec![]), "no requests: nothing to allocate");
    }

    fn numa(n: Option<i64>) -> Device {
        let d = Device::named("gpu");
        match n {
            Some(n) => d.with_attribute("numa", DeviceAttribute::Int(n)),
            None => d,
        }
    }

    #[test]
    fn match_attribute_is_part_of_the_search() {
        // Devices 0 (numa 0), 1 and 2 (numa 1), 3 (no numa attribute).
        let devices = [numa(Some(0)), numa(Some(1)), numa(Some(1)), numa(None)];
        let t = table(&devices, Vec::new());
        let bound = |m: &[u32]| Alternative { constraints: vec![0], ..one(m) };
        let (a, b) = ([bound(&[0, 1])], [bound(&[2])]);
        let view = [0, 1, 2, 3];
        // Unconstrained, the first request would take device 0 and the second could not match it: the search
        // backtracks to device 1 instead of giving up.
        let constraint = [Constraint::Match("gpu.example.com/numa")];
        assert_eq!(ids(search(&t, &[req(&a), req(&b)], &constraint, &view, None)), Some(vec![1, 2]));
        // The domain may be written out in the slice too.
        let written = [numa(None).with_attribute("gpu.example.com/numa", DeviceAttribute::Int(1)), numa(Some(1))];
        let t2 = table(&written, Vec::new());
        let both = [Alternative { constraints: vec![0], ..alt(AllocationMode::ExactCount(2), &[0, 1]) }];
        assert_eq!(ids(search(&t2, &[req(&both)], &constraint, &[0, 1], None)), Some(vec![0, 1]));
        // A device lacking the attribute does not qualify, even alone.
        let lacking = [bound(&[3])];
        assert_eq!(search(&t, &[req(&lacking)], &constraint, &view, None), None);
        // Two devices of one request share it too: only {1, 2} qualifies among 0, 1, 2.
        let pair = [Alternative { constraints: vec![0], ..alt(AllocationMode::ExactCount(2), &[0, 1, 2]) }];
        assert_eq!(ids(search(&t, &[req(&pair)], &constraint, &view, None)), Some(vec![1, 2]));
        // All mode: every device must share the value, else the alternative fails.
        let all = [Alternative { constraints: vec![0], ..alt(AllocationMode::All, &[0, 1, 2]) }];
        assert_eq!(search(&t, &[req(&all)], &constraint, &view, None), None);
        // A request the constraint does not bind is free: device 0 and device 2 differ.
        let free = [one(&[0])];
        assert_eq!(ids(search(&t, &[req(&free), req(&b)], &constraint, &view, None)), Some(vec![0, 2]));
        // Constraints of different claims are separate: each claim's base offsets its own.
        let other_claim = [Alternative { constraints: vec![0], ..one(&[0]) }];
        let reqs = [req(&b), Req { alts: &other_claim, constraint_base: 1 }];
        let two = [Constraint::Match("gpu.example.com/numa"), Constraint::Match("gpu.example.com/numa")];
        assert_eq!(ids(search(&t, &reqs, &two, &view, None)), Some(vec![2, 0]));
        assert_eq!(search(&t, &[req(&b), Req { constraint_base: 0, ..reqs[1] }], &constraint, &view, None), None);
    }

    #[test]
    fn admin_access_uses_devices_in_use_and_takes_nothing() {
        let devices = plain(2);
        let t = table(&devices, Vec::new());
        let used = Allocator::new(&t, [0]);
        let admin = [Alternative { admin: true, ..one(&[0]) }];
        let taken = search(&t, &[req(&admin)], &[], &[0, 1], Some(&used));
        assert_eq!(taken, Some(vec![Taken { id: 0, admin: true }]), "in use, yet allocatable with admin access");
        // It does not take device 1 from a plain request of the same search either.
        let (admin1, plain1) = ([Alternative { admin: true, ..one(&[1]) }], [one(&[1])]);
        assert_eq!(ids(search(&t, &[req(&admin1), req(&plain1)], &[], &[0, 1], None)), Some(vec![1, 1]));
        // Without admin access, the device in use is not offered.
        assert_eq!(search(&t, &[req(&[one(&[0])])], &[], &[0, 1], Some(&used)), None);
    }

    /// Devices 0..n each consuming `each` of counter 0, whose capacity is `capacity`.
    fn partitions(devices: &[Device], each: i128, capacity: i128) -> DeviceTable<'_> {
        let mut t = table(devices, vec![capacity]);
        for e in &mut t.devices {
            e.consumes = vec![(0, each)];
        }
        t
    }

    #[test]
    fn shared_counters_bound_partitionable_devices() {
        let devices = plain(3);
        let t = partitions(&devices, 40, 80);
        let view = [0, 1, 2];
        assert_eq!(search(&t, &[req(&[alt(AllocationMode::ExactCount(3), &view)])], &[], &view, None), None);
        assert_eq!(
            ids(search(&t, &[req(&[alt(AllocationMode::ExactCount(2), &view)])], &[], &view, None)),
            Some(vec![0, 1])
        );
        // Counters consumed already (a held claim's device) leave room for one more.
        let held = Allocator::new(&t, [2]);
        assert_eq!(held.consumed(0), 40);
        let two = [alt(AllocationMode::ExactCount(2), &view)];
        assert_eq!(search(&t, &[req(&two)], &[], &view, Some(&held)), None);
        assert_eq!(ids(search(&t, &[req(&[one(&view)])], &[], &view, Some(&held))), Some(vec![0]));
        // Admin access consumes nothing.
        let admin = [Alternative { admin: true, ..alt(AllocationMode::ExactCount(3), &view) }];
        assert!(search(&t, &[req(&admin)], &[], &view, None).is_some());
        // A commit that would overdraw is refused whole.
        let mut a = Allocator::new(&t, []);
        assert!(!a.commit(&t, &[0, 1, 2]));
        assert_eq!(a, Allocator::new(&t, []));
        assert!(a.commit(&t, &[0, 1]));
        assert!(!a.commit(&t, &[2]), "the counter is used up");
    }

    /// A generated alternative: All mode, admin access, count, matching devices.
    type RawAlt = (bool, bool, u32, Vec<u32>);

    fn requests() -> impl Strategy<Value = Vec<Vec<RawAlt>>> {
        let alt = (any::<bool>(), proptest::bool::weighted(0.2), 1u32..3, proptest::collection::vec(0u32..12, 0..6));
        proptest::collection::vec(proptest::collection::vec(alt, 1..3), 0..4)
    }

    fn to_alts(raw: &[Vec<RawAlt>]) -> Vec<Vec<Alternative>> {
        raw.iter()
            .map(|r| {
                r.iter()
                    .map(|(all, admin, n, m)| Alternative {
                        admin: *admin,
                        ..alt(if *all { AllocationMode::All } else { AllocationMode::ExactCount(*n) }, m)
                    })
                    .collect()
            })
            .collect()
    }

    /// Whether one device per request (each from its matches, all distinct, all with a numa value: the same one,
    /// or with `distinct` pairwise different ones) exists.
    fn brute_force(matches: &[Vec<u32>], devices: &[Device], distinct: bool, chosen: &mut Vec<u32>) -> bool {
        let Some((first, rest)) = matches.split_first() else { return true };
        let numa = |d: u32| devices[d as usize].attributes.get("numa");
        for &d in first {
            let agrees = if distinct {
                chosen.iter().all(|&c| numa(c) != numa(d))
            } else {
                chosen.first().is_none_or(|&c| numa(c) == numa(d))
            };
            if numa(d).is_some() && agrees && !chosen.contains(&d) {
                chosen.push(d);
                if brute_force(rest, devices, distinct, chosen) {
                    return true;
                }
                chosen.pop();
            }
        }
        false
    }

    /// Searches eight devices with `numa` = index mod 3 (device 7 has none) for one request per set of
    /// `matches` (the devices each may take), all under `constraint`. Returns the devices, the requests as lists
    /// and what the search found.
    fn numa_search(
        matches: Vec<BTreeSet<u32>>,
        constraint: Constraint<'_>,
    ) -> (Vec<Device>, Vec<Vec<u32>>, Option<Vec<u32>>) {
        let devices: Vec<Device> = (0..8).map(|d| numa((d != 7).then_some(i64::from(d % 3)))).collect();
        let matches: Vec<Vec<u32>> = matches.into_iter().map(|m| m.into_iter().collect()).collect();
        let t = table(&devices, Vec::new());
        let alts: Vec<[Alternative; 1]> =
            matches.iter().map(|m| [Alternative { constraints: vec![0], ..one(m) }]).collect();
        let reqs: Vec<Req<'_>> = alts.iter().map(|a| req(a)).collect();
        let view: Vec<u32> = (0..8).collect();
        let found = ids(search(&t, &reqs, &[constraint], &view, None));
        (devices, matches, found)
    }

    /// The `numa` values of the `found` devices (-1 for a device without one).
    fn numa_values(devices: &[Device], found: &[u32]) -> BTreeSet<i64> {
        found
            .iter()
            .map(|&d| match devices[d as usize].attributes.get("numa") {
                Some(DeviceAttribute::Int(n)) => *n,
                _ => -1,
            })
            .collect()
    }

    proptest! {
        /// With a matchAttribute constraint over every request, the search finds an allocation exactly when one
        /// exists (checked by brute force), and what it finds shares the attribute.
        #[test]
        fn match_attribute_search_is_complete(
            matches in proptest::collection::vec(proptest::collection::btree_set(0u32..8, 0..5), 1..4),
        ) {
            let (devices, matches, found) = numa_search(matches, Constraint::Match("gpu.example.com/numa"));
            prop_assert_eq!(found.is_some(), brute_force(&matches, &devices, false, &mut Vec::new()));
            if let Some(found) = found {
                let values = numa_values(&devices, &found);
                prop_assert_eq!(values.len(), 1, "one shared value, never a missing one: {:?}", found);
                prop_assert!(!values.contains(&-1));
            }
        }

        /// With a distinctAttribute constraint over every request, the search finds an allocation exactly when one
        /// exists, and what it finds has pairwise different values.
        #[test]
        fn distinct_attribute_search_is_complete(
            matches in proptest::collection::vec(proptest::collection::btree_set(0u32..8, 0..5), 1..5),
        ) {
            let (devices, matches, found) = numa_search(matches, Constraint::Distinct("gpu.example.com/numa"));
            prop_assert_eq!(found.is_some(), brute_force(&matches, &devices, true, &mut Vec::new()));
            if let Some(found) = found {
                let values = numa_values(&devices, &found);
                prop_assert_eq!(values.len(), found.len(), "pairwise different: {:?}", found);
                prop_assert!(!values.contains(&-1));
            }
        }

        /// Whatever is asked, an allocation never hands out a device twice (admin access aside), never one in
        /// use, never one the node does not see, gives each ExactCount request its count, and never consumes a
        /// shared counter beyond its capacity; searching again with what it took held finds the same choice;
        /// committing it then releasing it restores the allocator exactly.
        #[test]
        fn allocations_are_disjoint_within_counters_and_rollback_restores(
            batches in proptest::collection::vec(requests(), 1..5),
            view in proptest::collection::btree_set(0u32..12, 0..12),
            held in proptest::collection::btree_set(0u32..12, 0..4),
            consumes in proptest::collection::vec(proptest::collection::vec((0u32..3, 0i128..4), 0..3), 12),
            capacities in proptest::collection::vec(0i128..8, 3),
        ) {
            let devices = plain(12);
            let mut t = table(&devices, capacities.clone());
            for (e, c) in t.devices.iter_mut().zip(&consumes) {
                e.consumes = c.clone();
            }
            // Held devices are given up front; a generated set may overdraw, so keep only what fits.
            let mut start = Allocator::new(&t, []);
            let held: Vec<u32> = held.into_iter().filter(|&d| start.commit(&t, &[d])).collect();
            let view: Vec<u32> = view.into_iter().collect();
            let mut allocator = start.clone();
            let mut committed: Vec<Vec<u32>> = Vec::new();
            for raw in &batches {
                let alts = to_alts(raw);
                let reqs: Vec<Req<'_>> = alts.iter().map(|a| req(a)).collect();
                let before = allocator.clone();
                if let Some(taken) = search(&t, &reqs, &[], &view, Some(&allocator)) {
                    let exclusive: Vec<u32> = taken.iter().filter(|t| !t.admin).map(|t| t.id).collect();
                    let distinct: BTreeSet<u32> = exclusive.iter().copied().collect();
                    prop_assert_eq!(distinct.len(), exclusive.len(), "a device twice in one allocation");
                    prop_assert!(taken.iter().all(|d| view.contains(&d.id)));
                    prop_assert!(exclusive.iter().all(|d| !allocator.is_used(*d)));
                    prop_assert!(taken.len() >= reqs.len(), "every request gets a device");
                    prop_assert!(allocator.commit(&t, &exclusive), "the search stays within the counters");
                    for (c, cap) in capacities.iter().enumerate() {
                        prop_assert!(allocator.consumed(c as u32) <= *cap, "counter {} overdrawn", c);
                    }
                    // A candidate searching again (jointly, with one more pod) sees its own devices as free.
                    let mut mine = exclusive.clone();
                    mine.sort_unstable();
                    let again = search_again(&t, &reqs, &[], &view, Some(&allocator), &mine);
                    prop_assert_eq!(again, Some(taken), "the devices it holds are free to its next search");
                    let mut probe = allocator.clone();
                    probe.release(&t, &exclusive);
                    prop_assert_eq!(&probe, &before, "release undoes commit");
                    committed.push(exclusive);
                } else {
                    prop_assert_eq!(&allocator, &before, "a failed search takes nothing");
                }
            }
            let all: Vec<u32> = committed.iter().flatten().copied().collect();
            let distinct: BTreeSet<u32> = all.iter().copied().collect();
            prop_assert_eq!(distinct.len(), all.len(), "no device allocated twice across pods");
            prop_assert!(all.iter().all(|d| !held.contains(d)), "devices held by claims' status are never reused");
            for devices in committed.iter().rev() {
                allocator.release(&t, devices);
            }
            prop_assert_eq!(allocator, start, "rolling everything back restores");
        }
    }
}
