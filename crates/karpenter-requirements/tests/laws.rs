//! Property laws of the requirement algebra, quantities and resource lists.

use karpenter_requirements::{
    Format, NoKeys, Operator, Quantity, Requirement, Requirements, ResourceList, SerializedRequirement,
};
use proptest::prelude::*;

const WORDS: [&str; 5] = ["a", "b", "c", "x", "zone-1"];

/// The sample universe used to compare requirements by semantics: every generated value and the integers around
/// every generated bound.
fn universe() -> Vec<String> {
    let mut u: Vec<String> = WORDS.iter().map(|w| w.to_string()).collect();
    u.extend((-4..=16).map(|n: i64| n.to_string()));
    u
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![prop::sample::select(WORDS.to_vec()).prop_map(str::to_owned), (-2i64..14).prop_map(|n| n.to_string())]
}

fn requirement() -> impl Strategy<Value = Requirement> {
    let op = prop::sample::select(vec![
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
        Operator::Gte,
        Operator::Lte,
    ]);
    (op, prop::collection::vec(value(), 0..4), -2i64..14, prop::option::of(1u32..4)).prop_map(|(op, values, n, mv)| {
        match op {
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                Requirement::new("k", op, [n.to_string()], mv).expect("valid bound")
            }
            _ => Requirement::new("k", op, values, mv).expect("valid"),
        }
    })
}

fn same_semantics(a: &Requirement, b: &Requirement) -> bool {
    universe().iter().all(|v| a.has(v) == b.has(v))
}

fn from_serialized(entries: &[SerializedRequirement]) -> Requirement {
    entries
        .iter()
        .map(|e| Requirement::new(&e.key, e.operator, &e.values, e.min_values).expect("serialised form parses"))
        .reduce(|a, b| a.intersection(&b))
        .expect("at least one entry")
}

proptest! {
    #[test]
    fn intersection_is_pointwise_and(a in requirement(), b in requirement()) {
        let c = a.intersection(&b);
        for v in universe() {
            prop_assert_eq!(c.has(&v), a.has(&v) && b.has(&v), "value {}: {} ∩ {} = {}", v, a, b, c);
        }
        prop_assert_eq!(c.min_values(), a.min_values().max(b.min_values()));
    }

    #[test]
    fn intersection_commutes(a in requirement(), b in requirement()) {
        prop_assert_eq!(a.intersection(&b), b.intersection(&a));
    }

    #[test]
    fn intersection_associates(a in requirement(), b in requirement(), c in requirement()) {
        let left = a.intersection(&b).intersection(&c);
        let right = a.intersection(&b.intersection(&c));
        prop_assert!(same_semantics(&left, &right), "{} vs {}", left, right);
        prop_assert_eq!(left.min_values(), right.min_values());
        prop_assert_eq!(left.operator() == Operator::DoesNotExist, right.operator() == Operator::DoesNotExist);
    }

    #[test]
    fn intersection_is_idempotent(a in requirement()) {
        prop_assert_eq!(a.intersection(&a), a.clone());
    }

    #[test]
    fn has_intersection_agrees_with_intersection(a in requirement(), b in requirement()) {
        let c = a.intersection(&b);
        let some_value = universe().iter().any(|v| c.has(v));
        prop_assert_eq!(a.has_intersection(&b), b.has_intersection(&a));
        if some_value {
            prop_assert!(a.has_intersection(&b), "{} ∩ {} has values but has_intersection is false", a, b);
        }
        if !(a.complement() && b.complement()) {
            // With a concrete side the answer is exact.
            prop_assert_eq!(a.has_intersection(&b), some_value, "{} ⋂? {}", a, b);
        }
    }

    #[test]
    fn any_is_allowed_and_stable(a in requirement()) {
        let v = a.any();
        prop_assert_eq!(&v, &a.any());
        if !v.is_empty() {
            prop_assert!(a.has(&v), "{} picked {}", a, v);
        }
        if a.operator() == Operator::In {
            prop_assert!(!v.is_empty());
        }
    }

    #[test]
    fn serialisation_round_trips(a in requirement(), b in requirement()) {
        let c = a.intersection(&b);
        let back = from_serialized(&c.to_serialized());
        // Excluded values of a bounded complement are not serialised (as upstream); compare the rest.
        if !(!c.values().is_empty() && (c.gte().is_some() || c.lte().is_some())) {
            prop_assert!(same_semantics(&c, &back), "{} came back as {}", c, back);
        }
        prop_assert_eq!(back.min_values(), c.min_values());
    }

    #[test]
    fn intersects_is_symmetric(a in requirement(), b in requirement(), c in requirement()) {
        let mk = |r: &Requirement, key: &str| Requirement::new(key, r.operator(), r.values().iter().map(|v| v.as_ref()), None)
            .unwrap_or_else(|_| Requirement::exists(key));
        let left: Requirements = [mk(&a, "x/one"), mk(&b, "x/two")].into_iter().collect();
        let right: Requirements = [mk(&c, "x/one"), mk(&a, "x/three")].into_iter().collect();
        prop_assert_eq!(left.intersects(&right).is_ok(), right.intersects(&left).is_ok());
        // compatible implies intersects
        if left.compatible(&right, &NoKeys).is_ok() {
            prop_assert!(left.intersects(&right).is_ok());
        }
    }

    #[test]
    fn quantity_round_trips(m in any::<i64>(), frac in 0u32..1000, suffix in prop::sample::select(
        vec!["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "e-3", "E6", "e0"]
    )) {
        let text = if frac == 0 { format!("{m}{suffix}") } else { format!("{m}.{frac:03}{suffix}") };
        if let Ok(q) = text.parse::<Quantity>() {
            let s = q.to_string();
            let back: Quantity = s.parse().expect("canonical form parses");
            prop_assert_eq!(back, q);
            // Canonical, except Kubernetes' BinarySI quirk ("3312.5Ki" -> "3392000" -> "3392k"), which is a fixed
            // point after one more round.
            let again = back.to_string();
            if q.format() != Format::BinarySI {
                prop_assert_eq!(&again, &s);
            }
            prop_assert_eq!(again.parse::<Quantity>().map(|x| x.to_string()).ok(), Some(again.clone()));
        }
    }

    #[test]
    fn quantity_parse_never_panics(s in "[-+0-9.eEinumkKMGTP ]{0,24}") {
        if let Ok(q) = s.parse::<Quantity>() {
            prop_assert_eq!(q.to_string().parse::<Quantity>().ok(), Some(q));
        }
    }

    #[test]
    fn quantity_arithmetic_is_checked(a in any::<i64>(), b in any::<i64>(), sa in 0u8..3, sb in 0u8..3) {
        let scale = |v: i64, s: u8| match s {
            0 => Quantity::from_int(v, Format::DecimalSI),
            1 => Quantity::from_milli(v),
            _ => Quantity::from_int(v, Format::BinarySI),
        };
        let (qa, qb) = (scale(a, sa), scale(b, sb));
        let max = i128::from(i64::MAX) * 1_000_000_000;
        let sum = qa.as_nanos() + qb.as_nanos();
        prop_assert_eq!(qa.checked_add(&qb).map(|q| q.as_nanos()), (sum.abs() <= max).then_some(sum));
        let diff = qa.as_nanos() - qb.as_nanos();
        prop_assert_eq!(qa.checked_sub(&qb).map(|q| q.as_nanos()), (diff.abs() <= max).then_some(diff));
        prop_assert_eq!(qa.cmp(&qb), diff.cmp(&0));
    }

    #[test]
    fn fits_is_consistent_with_sub(
        req in prop::collection::vec((prop::sample::select(vec!["cpu", "memory", "pods", "nvidia.com/gpu", "a.com/b"]), -3i64..10), 0..5),
        avail in prop::collection::vec((prop::sample::select(vec!["cpu", "memory", "ephemeral-storage", "nvidia.com/gpu", "z.com/y"]), -1i64..10), 0..5),
    ) {
        let req: ResourceList = req.into_iter().map(|(n, v)| (n, Quantity::from_milli(v * 250))).collect();
        let avail: ResourceList = avail.into_iter().map(|(n, v)| (n, Quantity::from_milli(v * 250))).collect();
        let remaining = avail.sub(&req);
        let expected = !avail.any_negative()
            && req.iter().all(|(n, _)| !remaining.get(n).is_some_and(Quantity::is_negative));
        prop_assert_eq!(req.fits(&avail), expected);
        prop_assert_eq!(avail.sub(&req).add(&req), avail.add(&req).sub(&req));
    }
}
