//! Offerings: where and how an instance type can be bought.

use crate::labels::{
    CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, RESERVATION_ID, ZONE,
};
use crate::overhead::Overhead;
use crate::requirement::Requirement;
use crate::requirements::{KeySet, Requirements};
use crate::resources::ResourceList;

/// One purchasable combination (zone × capacity type × reservation) of an instance type.
///
/// Its requirements carry single-valued `karpenter.sh/capacity-type` and `topology.kubernetes.io/zone`
/// (reserved offerings also the reservation id).
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    /// Offering labels (capacity type, zone, reservation …).
    pub requirements: Requirements,
    /// Hourly price.
    pub price: f64,
    /// Whether it can currently be launched.
    pub available: bool,
    /// Remaining instances in the reservation (reserved offerings only).
    pub reservation_capacity: i32,
    /// Resources a node launched from this offering has beyond or instead of the instance type's capacity (upstream
    /// v1.14's `CapacityOverride`): merged into the capacity, each named resource added or replacing the type's.
    /// `None` (or an empty list) leaves the capacity as it is. See [`InstanceType::offering_groups`].
    ///
    /// [`InstanceType::offering_groups`]: crate::InstanceType::offering_groups
    pub capacity_override: Option<ResourceList>,
    /// Overhead a node launched from this offering keeps for itself (upstream's `OverheadOverride`): its total
    /// is merged into the instance type's overhead total, each named resource replacing the type's; `None`
    /// leaves the overhead as it is. `Some` of an empty overhead still makes an override group of its own, as
    /// upstream's non-nil pointer does.
    pub overhead_override: Option<Overhead>,
    /// A NodeOverlay set this offering's price (NodeClaims launched from it are annotated so).
    pub price_overlay_applied: bool,
}

impl Offering {
    /// An available offering with the given requirements and price and no overrides.
    pub fn new(requirements: Requirements, price: f64) -> Self {
        Offering {
            requirements,
            price,
            available: true,
            reservation_capacity: 0,
            capacity_override: None,
            overhead_override: None,
            price_overlay_applied: false,
        }
    }

    /// An available on-demand offering in `zone` at `price` per hour.
    pub fn on_demand(zone: &str, price: f64) -> Self {
        Offering::in_zone(zone, CAPACITY_TYPE_ON_DEMAND, price)
    }

    /// An available spot offering in `zone` at `price` per hour.
    pub fn spot(zone: &str, price: f64) -> Self {
        Offering::in_zone(zone, CAPACITY_TYPE_SPOT, price)
    }

    /// An available offering of the capacity reservation `reservation_id` in `zone` with `capacity` instances
    /// left, at `price` per hour.
    pub fn reserved(zone: &str, reservation_id: &str, capacity: i32, price: f64) -> Self {
        let mut offering = Offering::in_zone(zone, CAPACITY_TYPE_RESERVED, price);
        offering.requirements.add(Requirement::in_values(RESERVATION_ID, [reservation_id]));
        offering.reservation_capacity = capacity;
        offering
    }

    fn in_zone(zone: &str, capacity_type: &str, price: f64) -> Self {
        let requirements: Requirements =
            [Requirement::in_values(CAPACITY_TYPE, [capacity_type]), Requirement::in_values(ZONE, [zone])]
                .into_iter()
                .collect();
        Offering::new(requirements, price)
    }

    /// The same offering with a capacity override ([`Offering::capacity_override`]).
    pub fn with_capacity_override(self, capacity: ResourceList) -> Self {
        Offering { capacity_override: Some(capacity), ..self }
    }

    /// The same offering with an overhead override ([`Offering::overhead_override`]).
    pub fn with_overhead_override(self, overhead: Overhead) -> Self {
        Offering { overhead_override: Some(overhead), ..self }
    }

    /// Whether the offering overrides the instance type's capacity or overhead (an empty capacity override does
    /// not count, as upstream's `len(CapacityOverride) > 0`).
    pub fn has_override(&self) -> bool {
        self.capacity_override.as_ref().is_some_and(|c| !c.is_empty()) || self.overhead_override.is_some()
    }

    /// The same offering marked unavailable (out of capacity): the scheduler and launches skip it.
    pub fn unavailable(self) -> Self {
        Offering { available: false, ..self }
    }

    fn single(&self, key: &str) -> Option<&str> {
        let r = self.requirements.get_ref(key)?;
        if r.complement() {
            return None;
        }
        r.values().first().map(|v| v.as_ref())
    }

    /// The zone (the smallest value if several).
    pub fn zone(&self) -> Option<&str> {
        self.single(ZONE)
    }

    /// The capacity type (`on-demand`, `spot`, `reserved`).
    pub fn capacity_type(&self) -> Option<&str> {
        self.single(CAPACITY_TYPE)
    }

    /// The order in which a launch prefers offerings of one instance type: cheaper first, then by zone, then by
    /// capacity type. The one rule for "the cheapest offering": a provider's launch choice
    /// (`karpenter_cloudprovider::launch::cheapest_launch`) and the scheduler plan's options use it, so a plan
    /// names the offering the launch takes.
    pub fn launch_order(&self, other: &Offering) -> std::cmp::Ordering {
        self.price
            .total_cmp(&other.price)
            .then_with(|| self.zone().unwrap_or("").cmp(other.zone().unwrap_or("")))
            .then_with(|| self.capacity_type().unwrap_or("").cmp(other.capacity_type().unwrap_or("")))
    }

    /// The capacity reservation id, for reserved offerings.
    pub fn reservation_id(&self) -> Option<&str> {
        self.single(RESERVATION_ID)
    }

    /// Whether the offering is compatible with a claim: `Compatible(claim, offering, allow_undefined)`.
    pub fn is_compatible(&self, claim: &Requirements, allow_undefined: &impl KeySet) -> bool {
        claim.compatible_ok(&self.requirements, allow_undefined)
    }
}

/// The cheapest offering (first among equal prices); `None` for an empty input.
pub fn cheapest<'a>(offerings: impl IntoIterator<Item = &'a Offering>) -> Option<&'a Offering> {
    offerings.into_iter().fold(None, |best: Option<&Offering>, o| match best {
        Some(b) if b.price.total_cmp(&o.price).is_le() => Some(b),
        _ => Some(o),
    })
}

/// The most expensive offering (first among equal prices); `None` for an empty input.
pub fn most_expensive<'a>(offerings: impl IntoIterator<Item = &'a Offering>) -> Option<&'a Offering> {
    offerings.into_iter().fold(None, |best: Option<&Offering>, o| match best {
        Some(b) if b.price.total_cmp(&o.price).is_ge() => Some(b),
        _ => Some(o),
    })
}

/// Helpers over a list of offerings.
pub trait OfferingsExt {
    /// The available offerings.
    fn available(&self) -> impl Iterator<Item = &Offering>;
    /// The offerings compatible with `reqs` (`Compatible(reqs, offering, allow_undefined)`).
    fn compatible<'a, K: KeySet>(
        &'a self,
        reqs: &'a Requirements,
        allow_undefined: &'a K,
    ) -> impl Iterator<Item = &'a Offering>;
    /// The cheapest offering.
    fn cheapest(&self) -> Option<&Offering>;
    /// The most expensive offering.
    fn most_expensive(&self) -> Option<&Offering>;
    /// The price consolidation assumes a launch costs: capacity types in precedence reserved → spot →
    /// on-demand; for the first with an offering compatible with `reqs`, the most expensive such offering's
    /// price; `+∞` if none. (Callers pass offerings already filtered to available ones.)
    fn worst_launch_price<K: KeySet>(&self, reqs: &Requirements, allow_undefined: &K) -> f64;
}

impl OfferingsExt for [Offering] {
    fn available(&self) -> impl Iterator<Item = &Offering> {
        self.iter().filter(|o| o.available)
    }

    fn compatible<'a, K: KeySet>(
        &'a self,
        reqs: &'a Requirements,
        allow_undefined: &'a K,
    ) -> impl Iterator<Item = &'a Offering> {
        self.iter().filter(move |o| o.is_compatible(reqs, allow_undefined))
    }

    fn cheapest(&self) -> Option<&Offering> {
        cheapest(self)
    }

    fn most_expensive(&self) -> Option<&Offering> {
        most_expensive(self)
    }

    fn worst_launch_price<K: KeySet>(&self, reqs: &Requirements, allow_undefined: &K) -> f64 {
        for ct in [CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND] {
            let of_type = self.compatible(reqs, allow_undefined).filter(|o| o.capacity_type() == Some(ct));
            if let Some(o) = most_expensive(of_type) {
                return o.price;
            }
        }
        f64::INFINITY
    }
}
