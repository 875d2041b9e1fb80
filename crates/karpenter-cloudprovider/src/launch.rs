//! Provider-neutral launch helpers: [`cheapest_launch`], the offering a launch picks over any instance types, with
//! its answer, [`LaunchChoice`]; [`resource_map`] and [`k8s_time`] for the status and timestamps of the NodeClaim
//! a provider returns.
//!
//! Instance types arrive as data (a provider's catalogue, a file, a test's hand-made types), so the in-memory fake,
//! the kwok provider and `simulate` share one rule and make the same choice for the same claim.

use std::collections::BTreeMap;
use std::fmt;

use karpenter_api::nodeclaim::ResourceQuantity;
use karpenter_requirements::{InstanceType, Offering, Requirements, ResourceList};

/// The offering a launch picks for a NodeClaim, as the fake and kwok providers' `create` do, and the resources a
/// node launched from it has.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchChoice {
    /// Instance type name.
    pub instance_type: String,
    /// The offering's zone (empty when the offering names none).
    pub zone: String,
    /// The offering's capacity type (empty when the offering names none).
    pub capacity_type: String,
    /// Hourly price of the offering.
    pub price: f64,
    /// The node's capacity: the type's with the offering's capacity override merged in
    /// ([`InstanceType::capacity_for`]).
    pub capacity: ResourceList,
    /// The node's allocatable: the type's, or the offering's group's when it carries overrides
    /// ([`InstanceType::allocatable_for`]).
    pub allocatable: ResourceList,
}

impl fmt::Display for LaunchChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {} ${:.4}/h", self.instance_type, self.zone, self.capacity_type, self.price)
    }
}

/// The cheapest available offering compatible with `requirements` over every instance type whose requirements
/// intersect them; ties broken by instance-type name, then zone, then capacity type (so the answer is
/// deterministic). Offerings with a NaN price are never picked. `None` when nothing is launchable.
///
/// Compatibility is `Requirements::intersects` (keys constrained on both sides must share a value; a key only one
/// side constrains is ignored), for the instance type as the scheduler filters them and for the offering. A
/// claim's requirements normally pin the candidates with `node.kubernetes.io/instance-type In [...]`. Resource fit
/// is not checked here: [`cheapest_launch_holding`] also asks that the offering's node hold the claim's requests.
pub fn cheapest_launch<'a, I>(instance_types: I, requirements: &Requirements) -> Option<LaunchChoice>
where
    I: IntoIterator<Item = &'a InstanceType>,
{
    pick(instance_types, requirements, |_, _| true)
}

/// [`cheapest_launch`] over the offerings whose node would hold `requests` (a NodeClaim's
/// `spec.resources.requests`: its pods' and DaemonSets'), judged against that offering's allocatable
/// ([`InstanceType::offering_holds`]). An instance type whose offerings carry overrides thus launches from the
/// cheapest group that has room, e.g. the only offerings that bring an extended resource the pods ask for; for
/// a type without overrides this is the type's allocatable, as before overrides existed. Empty requests fit
/// every offering.
pub fn cheapest_launch_holding<'a, I>(
    instance_types: I,
    requirements: &Requirements,
    requests: &ResourceList,
) -> Option<LaunchChoice>
where
    I: IntoIterator<Item = &'a InstanceType>,
{
    pick(instance_types, requirements, |it, o| it.offering_holds(o, requests))
}

/// The offerings a claim with `requirements` and `requests` could have launched on but that are unavailable (out
/// of capacity), sorted: what a provider's `InsufficientCapacity` error names when [`cheapest_launch_holding`]
/// finds nothing.
pub fn unavailable_offerings_holding<'a, I>(
    instance_types: I,
    requirements: &Requirements,
    requests: &ResourceList,
) -> Vec<crate::OfferingRef>
where
    I: IntoIterator<Item = &'a InstanceType>,
{
    let mut out = std::collections::BTreeSet::new();
    for it in instance_types.into_iter().filter(|it| requirements.intersects(&it.requirements).is_ok()) {
        for o in &it.offerings {
            if !o.available && requirements.intersects(&o.requirements).is_ok() && it.offering_holds(o, requests) {
                out.insert(crate::OfferingRef::new(&it.name, o.zone().unwrap_or(""), o.capacity_type().unwrap_or("")));
            }
        }
    }
    out.into_iter().collect()
}

/// The `InsufficientCapacity` error of a create for NodeClaim `name` that found no offering: naming the
/// `unavailable` offerings ([`unavailable_offerings_holding`]) when there are some ("out of capacity"), else saying
/// that nothing satisfies the claim. The fake and kwok providers' one wording.
pub fn out_of_capacity(name: &str, unavailable: Vec<crate::OfferingRef>) -> crate::CloudProviderError {
    let message = if unavailable.is_empty() {
        format!("no instance type offering satisfies the requirements and requests of nodeclaim {name}")
    } else {
        format!("every offering nodeclaim {name} allows is out of capacity")
    };
    crate::CloudProviderError::insufficient_capacity(unavailable, message)
}

/// The cheapest launchable offering `accept` lets through (see [`cheapest_launch`] for the order).
fn pick<'a, I>(
    instance_types: I,
    requirements: &Requirements,
    accept: impl Fn(&InstanceType, &Offering) -> bool,
) -> Option<LaunchChoice>
where
    I: IntoIterator<Item = &'a InstanceType>,
{
    let mut best: Option<(&InstanceType, &Offering)> = None;
    for it in instance_types {
        if requirements.intersects(&it.requirements).is_err() {
            continue;
        }
        for o in &it.offerings {
            if !o.available || o.price.is_nan() || requirements.intersects(&o.requirements).is_err() {
                continue;
            }
            // Among types, the cheaper offering and then the type's name; within a type, the offerings' order.
            let better = match best {
                None => true,
                Some((bit, bo)) => o
                    .price
                    .total_cmp(&bo.price)
                    .then_with(|| it.name.cmp(&bit.name))
                    .then_with(|| o.launch_order(bo))
                    .is_lt(),
            };
            // Last, as it may copy the offering's allocatable.
            if better && accept(it, o) {
                best = Some((it, o));
            }
        }
    }
    best.map(|(it, o)| LaunchChoice {
        instance_type: it.name.clone(),
        zone: o.zone().unwrap_or("").to_owned(),
        capacity_type: o.capacity_type().unwrap_or("").to_owned(),
        price: o.price,
        capacity: it.capacity_for(o),
        allocatable: it.allocatable_for(o),
    })
}

/// A chrono instant as a Kubernetes `Time` (what providers put in creation and deletion timestamps): karpenter-api's
/// one conversion, here beside [`resource_map`] for the NodeClaim a launch returns.
pub use karpenter_api::time::to_k8s as k8s_time;

/// An instance type's resource list as NodeClaim status quantities, zero entries dropped (as upstream).
pub fn resource_map(list: &ResourceList) -> BTreeMap<String, ResourceQuantity> {
    list.iter()
        .filter(|(_, q)| !q.is_zero())
        .map(|(n, q)| (n.to_owned(), ResourceQuantity::new(q.to_string())))
        .collect()
}

/// The labels a launched NodeClaim carries, by upstream's precedence (core's launch step, whatever the provider):
/// the labels the provider `resolved` for the instance (instance type, zone, capacity type, the type's
/// single-valued requirements, provider extras), overridden by the claim's single-valued `In` requirements,
/// overridden by the claim's own labels. So what the user asked for in the NodePool's template always shows on the
/// claim and its Node; the scheduler only launches claims where these agree anyway, and this order decides the rare
/// case where they would not. The providers' `create` (fake, kwok, AWS) return claims labelled this way, and the
/// lifecycle's launch step and `simulate` apply it to what a provider returned.
pub fn launched_claim_labels(
    resolved: impl IntoIterator<Item = (String, String)>,
    claim: &karpenter_api::NodeClaim,
) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = resolved.into_iter().collect();
    for r in &claim.spec.requirements {
        if r.operator == karpenter_requirements::Operator::In.as_str()
            && let [one] = r.values.as_slice()
        {
            labels.insert(r.key.clone(), one.clone());
        }
    }
    if let Some(own) = &claim.metadata.labels {
        labels.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    labels
}

/// Instances running in each capacity reservation, one per label map (a launched NodeClaim's or an unclaimed
/// Node's labels) carrying the reservation label `karpenter.k8s.aws/capacity-reservation-id`.
pub fn reservations_in_use<'a>(
    labels: impl IntoIterator<Item = &'a BTreeMap<String, String>>,
) -> BTreeMap<String, i32> {
    let mut in_use: BTreeMap<String, i32> = BTreeMap::new();
    for id in labels.into_iter().filter_map(|l| l.get(karpenter_requirements::labels::RESERVATION_ID)) {
        *in_use.entry(id.clone()).or_default() += 1;
    }
    in_use
}

/// Takes the instances `in_use` out of the reserved offerings of `instance_types`, whose `reservation_capacity`
/// then says what is left; an offering of a reservation with nothing left becomes unavailable, as upstream's
/// providers mark a full reservation (its fake provider's create does it on the launch that takes the last
/// instance). Offerings of reservations not in `in_use` are left as they are.
///
/// For catalogues that state a reservation's instances before any are running (a kwok instance-type file): the
/// kwok provider applies its running Nodes, and `simulate` the instances of its cluster before every pass (a
/// reserved node of the input, or one an earlier pass launched), so both hold a reservation's instance the same
/// way; a provider whose cloud reports the instances left (AWS) does not call it.
pub fn draw_down_reservations(instance_types: &mut [InstanceType], in_use: &BTreeMap<String, i32>) {
    if in_use.is_empty() {
        return;
    }
    for o in instance_types.iter_mut().flat_map(|it| it.offerings.iter_mut()) {
        if o.capacity_type() != Some(karpenter_requirements::labels::CAPACITY_TYPE_RESERVED) {
            continue;
        }
        let Some(used) = o.reservation_id().and_then(|id| in_use.get(id)).copied() else { continue };
        o.reservation_capacity = (o.reservation_capacity - used).max(0);
        if o.reservation_capacity == 0 {
            o.available = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use karpenter_api::labels::{ARCH, CAPACITY_TYPE, INSTANCE_TYPE, OS, ZONE};
    use karpenter_requirements::{Overhead, Requirement, ResourceList};

    use super::*;
    use crate::test_types::{instance_type, offering};

    fn reqs(entries: &[(&str, &[&str])]) -> Requirements {
        entries.iter().map(|(k, v)| Requirement::in_values(k, v.iter().copied())).collect()
    }

    /// Spot at 0.7 and on-demand at 1.0 per unit of `scale`, in two zones.
    fn priced(scale: f64) -> Vec<Offering> {
        ["zone-b", "zone-a"]
            .into_iter()
            .flat_map(|z| [offering(z, "on-demand", scale, true), offering(z, "spot", 0.7 * scale, true)])
            .collect()
    }

    fn catalogue() -> Vec<InstanceType> {
        vec![
            instance_type("big-amd64-linux", "amd64", "linux", 8, priced(4.0)),
            instance_type("small-amd64-linux", "amd64", "linux", 2, priced(1.0)),
            instance_type("small-arm64-linux", "arm64", "linux", 2, priced(1.0)),
            instance_type("tiny-amd64-windows", "amd64", "windows", 1, priced(0.5)),
        ]
    }

    #[test]
    fn cheapest_launch_picks_cheapest_then_breaks_ties_by_name_zone_capacity_type() {
        let its = catalogue();
        // Everything linux amd64: the cheapest is small spot, tie over zones → zone-a.
        let r = reqs(&[(OS, &["linux"]), (ARCH, &["amd64"])]);
        let c = cheapest_launch(&its, &r).unwrap();
        assert_eq!(
            (c.instance_type.as_str(), c.zone.as_str(), c.capacity_type.as_str()),
            ("small-amd64-linux", "zone-a", "spot")
        );
        assert!((c.price - 0.7).abs() < 1e-12, "{}", c.price);
        // amd64 and arm64 cost the same: the name breaks the tie.
        let c = cheapest_launch(&its, &reqs(&[(OS, &["linux"])])).unwrap();
        assert_eq!(c.instance_type, "small-amd64-linux");
        // Without requirements the cheaper windows type wins: compatibility is the only filter.
        assert_eq!(cheapest_launch(&its, &Requirements::new()).unwrap().instance_type, "tiny-amd64-windows");
        // on-demand only, one zone, two named candidates
        let r = reqs(&[
            (INSTANCE_TYPE, &["big-amd64-linux", "small-arm64-linux"]),
            (CAPACITY_TYPE, &["on-demand"]),
            (ZONE, &["zone-b"]),
        ]);
        let c = cheapest_launch(&its, &r).unwrap();
        assert_eq!(
            (c.instance_type.as_str(), c.zone.as_str(), c.capacity_type.as_str()),
            ("small-arm64-linux", "zone-b", "on-demand")
        );
        assert_eq!(c.to_string(), "small-arm64-linux zone-b on-demand $1.0000/h");
        // a capacity-type tie: two offerings in the same zone at the same price
        let it = InstanceType::new(
            "x",
            reqs(&[(INSTANCE_TYPE, &["x"])]),
            vec![offering("z", "spot", 1.0, true), offering("z", "on-demand", 1.0, true)],
            ResourceList::new(),
            Overhead::default(),
        );
        assert_eq!(cheapest_launch([&it], &Requirements::new()).unwrap().capacity_type, "on-demand");
        // unavailable offerings are skipped; nothing compatible → None
        let mut it2 = it.clone();
        it2.offerings[1].available = false;
        assert_eq!(cheapest_launch([&it2], &Requirements::new()).unwrap().capacity_type, "spot");
        it2.offerings[0].available = false;
        assert_eq!(cheapest_launch([&it2], &Requirements::new()), None);
        assert_eq!(cheapest_launch(&its, &reqs(&[(ZONE, &["elsewhere"])])), None);
        assert_eq!(cheapest_launch(&its, &reqs(&[(OS, &["plan9"])])), None);
    }

    #[test]
    fn a_launch_takes_the_cheapest_offering_whose_node_holds_the_requests() {
        use karpenter_requirements::Quantity;
        let q = |s: &str| s.parse::<Quantity>().unwrap();
        let slots = "test.com/extended-slots";
        let overhead =
            Overhead { system_reserved: [("memory", q("1Gi"))].into_iter().collect(), ..Overhead::default() };
        // The cheap offering's node has the type's own resources; the dearer one brings 4 slots and keeps 2Gi.
        let slotted = offering("zone-b", "on-demand", 2.0, true)
            .with_capacity_override([(slots, q("4"))].into_iter().collect())
            .with_overhead_override(Overhead {
                system_reserved: [("memory", q("2Gi"))].into_iter().collect(),
                ..Overhead::default()
            });
        let mut it = instance_type("m", "amd64", "linux", 4, vec![offering("zone-a", "on-demand", 1.0, true), slotted]);
        it.set_capacity([("cpu", q("4")), ("memory", q("8Gi")), ("pods", q("110"))].into_iter().collect());
        it.set_overhead(overhead);
        let its = [it];
        let none = Requirements::new();

        let want_slot: ResourceList = [(slots, q("1")), ("cpu", q("1"))].into_iter().collect();
        let c = cheapest_launch_holding(&its, &none, &want_slot).unwrap();
        assert_eq!((c.zone.as_str(), c.price), ("zone-b", 2.0), "the cheaper node has no slot");
        assert_eq!(c.capacity.get(slots), Some(&q("4")));
        assert_eq!(c.allocatable.get(slots), Some(&q("4")));
        assert_eq!(c.allocatable.memory(), q("6Gi"), "the override's 2Gi replaces the type's 1Gi");
        // What the claim does not ask for leaves today's choice: the cheapest, the type's own resources.
        let c = cheapest_launch_holding(&its, &none, &[("memory", q("7Gi"))].into_iter().collect()).unwrap();
        assert_eq!((c.zone.as_str(), c.allocatable.memory(), c.capacity.get(slots)), ("zone-a", q("7Gi"), None));
        assert_eq!(cheapest_launch_holding(&its, &none, &ResourceList::new()), cheapest_launch(&its, &none));
        // Nothing holds 5 slots; with the slotted offering out of capacity, it is the one an error names.
        assert_eq!(cheapest_launch_holding(&its, &none, &[(slots, q("5"))].into_iter().collect()), None);
        let mut gone = its.clone();
        gone[0].offerings[1].available = false;
        assert_eq!(cheapest_launch_holding(&gone, &none, &want_slot), None);
        assert_eq!(
            unavailable_offerings_holding(&gone, &none, &want_slot),
            [crate::OfferingRef::new("m", "zone-b", "on-demand")]
        );
        assert_eq!(unavailable_offerings_holding(&gone, &none, &ResourceList::new()).len(), 1);
    }

    #[test]
    fn a_nan_price_is_never_picked() {
        let mut it = instance_type("x", "amd64", "linux", 1, vec![offering("z", "spot", f64::NAN, true)]);
        assert_eq!(cheapest_launch([&it], &Requirements::new()), None);
        it.offerings.push(offering("z", "on-demand", 5.0, true));
        assert_eq!(cheapest_launch([&it], &Requirements::new()).unwrap().capacity_type, "on-demand");
    }

    #[test]
    fn launched_labels_let_the_claims_labels_win_over_its_requirements_and_those_over_the_provider() {
        use karpenter_api::NodeClaim;
        let mut claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c"},
            "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [
                    {"key": ZONE, "operator": "In", "values": ["zone-b"]},
                    {"key": ARCH, "operator": "In", "values": ["amd64", "arm64"]},
                    {"key": OS, "operator": "NotIn", "values": ["windows"]},
                    {"key": "team", "operator": "In", "values": ["from-requirement"]}]}}))
        .expect("a valid NodeClaim");
        claim.metadata.labels = Some([("team".to_owned(), "from-label".to_owned())].into());
        let resolved = [(ZONE, "zone-a"), (ARCH, "arm64"), (INSTANCE_TYPE, "m.large"), (CAPACITY_TYPE, "spot")]
            .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let labels = launched_claim_labels(resolved, &claim);
        // A single-valued requirement beats what the provider resolved; a multi-valued one or NotIn says nothing.
        assert_eq!(labels[ZONE], "zone-b");
        assert_eq!(labels[ARCH], "arm64");
        assert!(!labels.contains_key(OS));
        // The claim's own label beats its requirement.
        assert_eq!(labels["team"], "from-label");
        assert_eq!(labels[INSTANCE_TYPE], "m.large");
        assert_eq!(labels[CAPACITY_TYPE], "spot");
    }

    #[test]
    fn running_instances_draw_their_reservations_down_and_a_full_one_is_unavailable() {
        let mut its = vec![instance_type(
            "m.large",
            "amd64",
            "linux",
            2,
            vec![
                Offering::reserved("z", "cr-1", 1, 0.1),
                Offering::reserved("z", "cr-2", 3, 0.1),
                Offering::reserved("z", "cr-3", 1, 0.1),
                offering("z", "on-demand", 1.0, true),
            ],
        )];
        let node = |id: Option<&str>| -> BTreeMap<String, String> {
            let mut l = BTreeMap::from([(INSTANCE_TYPE.to_owned(), "m.large".to_owned())]);
            if let Some(id) = id {
                l.insert(karpenter_requirements::labels::RESERVATION_ID.to_owned(), id.to_owned());
            }
            l
        };
        let nodes = [node(Some("cr-1")), node(Some("cr-2")), node(Some("cr-2")), node(None)];
        let in_use = reservations_in_use(&nodes);
        assert_eq!(in_use, BTreeMap::from([("cr-1".to_owned(), 1), ("cr-2".to_owned(), 2)]));
        draw_down_reservations(&mut its, &in_use);
        let left: Vec<(i32, bool)> = its[0].offerings.iter().map(|o| (o.reservation_capacity, o.available)).collect();
        // cr-1 is full (unavailable, as upstream marks it), cr-2 has one left, cr-3 and on-demand are untouched.
        assert_eq!(left, [(0, false), (1, true), (1, true), (0, true)]);
        // The reserved launch now goes to the reservation with room.
        let reserved =
            Requirements::from_iter([karpenter_requirements::Requirement::in_values(CAPACITY_TYPE, ["reserved"])]);
        assert_eq!(cheapest_launch([&its[0]], &reserved).map(|c| c.capacity_type), Some("reserved".to_owned()));
    }
}
