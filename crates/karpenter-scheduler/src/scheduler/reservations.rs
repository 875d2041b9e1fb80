//! Capacity reservations within one pass.
//!
//! A reserved offering (capacity type `reserved`, with a reservation id) says how many more instances its
//! reservation takes (`Offering::reservation_capacity`). Several NodeClaims of one pass must not count on the same
//! last instance, so the pass keeps a ledger: when a pod joins a NodeClaim, the claim holds one instance of every
//! reservation whose available offerings among the claim's remaining instance types are compatible with it, and
//! lets go of those that no longer are. A claim that holds reservations is pinned to them when it is finished
//! (`capacity-type In [reserved]`, `capacity-reservation-id In [held]`).
//!
//! When every compatible reservation is already taken by other claims of the pass, the claim goes on with its
//! other offerings (on-demand or spot) and is kept off reserved capacity when finished; if it has none, the
//! NodePool turns the pod down like any other offering mismatch, so the next NodePool, capacity type or
//! preference relaxation gets its turn in the same pass (upstream v1.15.1, #3456; v1.14 deferred such pods to a
//! later pass). [`ReservedOfferingMode::Strict`] (provisioning) still refuses to add a pod that would make a claim
//! lose every reservation it holds; other simulations ([`ReservedOfferingMode::Fallback`]) let it go.
//!
//! Nothing here runs when no instance type offers reserved capacity: the ledger is empty and every check returns
//! at once.

use karpenter_api::ProviderLabels;
use karpenter_requirements::labels::{CAPACITY_TYPE, CAPACITY_TYPE_RESERVED, RESERVATION_ID};
use karpenter_requirements::{OfferingsExt, Requirement, Requirements};
use rustc_hash::FxHashMap;

use super::ReservedOfferingMode;
use super::templates::Template;

/// What the claims of one pass hold of each reservation.
#[derive(Debug, Default, Clone)]
pub(crate) struct Ledger {
    /// Per reservation id: instances not yet held by a claim of this pass.
    left: FxHashMap<String, i32>,
}

/// A claim's reservations.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// The reservation ids the claim holds one instance of, sorted.
    pub ids: Vec<String>,
    /// The claim's options had compatible reserved offerings, but other claims of the pass hold them all: it
    /// launches on other capacity.
    pub exhausted: bool,
}

/// Why a pod cannot join a claim for reservation reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReservationRefusal {
    /// Strict mode: the pod would make the claim drop every reservation it holds.
    WouldDrop(Vec<String>),
    /// Every compatible reservation is taken and the claim has no other compatible offering.
    Exhausted(Vec<String>),
}

impl std::fmt::Display for ReservationRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReservationRefusal::WouldDrop(ids) => {
                write!(f, "the NodeClaim would lose its capacity reservations {}", ids.join(", "))
            }
            ReservationRefusal::Exhausted(ids) => write!(
                f,
                "capacity reservations {} are fully used by this pass and no other offering is compatible",
                ids.join(", ")
            ),
        }
    }
}

impl Ledger {
    /// The ledger of a pass over `templates`: each reservation with the capacity its offerings report (the
    /// smallest, should two instance types' offerings of one reservation disagree).
    pub fn new(templates: &[Template<'_>]) -> Ledger {
        let mut left: FxHashMap<String, i32> = FxHashMap::default();
        for t in templates {
            for it in &t.its {
                for o in it.offerings.available() {
                    if o.capacity_type() != Some(CAPACITY_TYPE_RESERVED) {
                        continue;
                    }
                    if let Some(id) = o.reservation_id() {
                        let n = o.reservation_capacity.max(0);
                        left.entry(id.to_owned()).and_modify(|l| *l = (*l).min(n)).or_insert(n);
                    }
                }
            }
        }
        Ledger { left }
    }

    /// Whether any reserved offering is in play.
    pub fn is_empty(&self) -> bool {
        self.left.is_empty()
    }

    /// Instances of reservation `id` not yet held.
    pub fn left(&self, id: &str) -> i32 {
        self.left.get(id).copied().unwrap_or(0)
    }

    /// What a claim of `template` with options `its` and `requirements`, holding `held`, would hold once a pod
    /// joined it; nothing changes until [`Ledger::commit`].
    pub fn plan(
        &self,
        template: &Template<'_>,
        its: &[u32],
        requirements: &Requirements,
        provider: &ProviderLabels,
        held: &Held,
        mode: ReservedOfferingMode,
    ) -> Result<Held, ReservationRefusal> {
        if self.is_empty() {
            return Ok(Held::default());
        }
        let compatible = compatible_reservations(template, its, requirements, provider);
        let ids: Vec<String> =
            compatible.iter().filter(|id| held.ids.contains(id) || self.left(id) > 0).cloned().collect();
        if mode == ReservedOfferingMode::Strict && !held.ids.is_empty() && ids.is_empty() {
            return Err(ReservationRefusal::WouldDrop(held.ids.clone()));
        }
        let exhausted = ids.is_empty() && !compatible.is_empty();
        if exhausted && !has_unreserved_offering(template, its, requirements, provider) {
            return Err(ReservationRefusal::Exhausted(compatible));
        }
        Ok(Held { ids, exhausted })
    }

    /// Moves a claim from holding `old` to holding `new`.
    pub fn commit(&mut self, old: &Held, new: &Held) {
        for id in old.ids.iter().filter(|id| !new.ids.contains(id)) {
            if let Some(l) = self.left.get_mut(id) {
                *l += 1;
            }
        }
        for id in new.ids.iter().filter(|id| !old.ids.contains(id)) {
            if let Some(l) = self.left.get_mut(id) {
                *l -= 1;
            }
        }
    }
}

impl Held {
    /// Narrows a finished claim's requirements and options by its reservations: pinned to the ones it holds, or
    /// kept off reserved capacity when the pass used it all up. Options left without a compatible offering go.
    pub fn pin(&self, reqs: &mut Requirements, its: &mut Vec<u32>, template: &Template<'_>, provider: &ProviderLabels) {
        let mut pinned = reqs.clone();
        if !self.ids.is_empty() {
            pinned.add(Requirement::in_values(CAPACITY_TYPE, [CAPACITY_TYPE_RESERVED]));
            pinned.add(Requirement::in_values(RESERVATION_ID, self.ids.iter().map(String::as_str)));
        } else if self.exhausted {
            pinned.add(Requirement::not_in(CAPACITY_TYPE, [CAPACITY_TYPE_RESERVED]));
        } else {
            return;
        }
        let keep = |i: &u32| {
            template.its.get(*i as usize).is_some_and(|it| {
                it.requirements.intersects_ok(&pinned)
                    && it.offerings.available().any(|o| o.is_compatible(&pinned, provider))
            })
        };
        // Never empty for a claim the ledger planned (its held ids and other offerings came from these
        // options); kept as it was should that ever not hold.
        if its.iter().any(keep) {
            its.retain(keep);
            *reqs = pinned;
        }
    }
}

/// The reservation ids of the available reserved offerings of `its` compatible with `requirements`, sorted.
fn compatible_reservations(
    template: &Template<'_>,
    its: &[u32],
    requirements: &Requirements,
    provider: &ProviderLabels,
) -> Vec<String> {
    let mut ids: Vec<String> = its
        .iter()
        .filter_map(|&i| template.its.get(i as usize))
        .flat_map(|it| it.offerings.available())
        .filter(|o| o.capacity_type() == Some(CAPACITY_TYPE_RESERVED) && o.is_compatible(requirements, provider))
        .filter_map(|o| o.reservation_id().map(str::to_owned))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Whether some option of `its` has an available, compatible offering that is not reserved capacity.
fn has_unreserved_offering(
    template: &Template<'_>,
    its: &[u32],
    requirements: &Requirements,
    provider: &ProviderLabels,
) -> bool {
    its.iter().filter_map(|&i| template.its.get(i as usize)).any(|it| {
        it.offerings
            .available()
            .any(|o| o.capacity_type() != Some(CAPACITY_TYPE_RESERVED) && o.is_compatible(requirements, provider))
    })
}
