//! Invariant checks driven by the cargo-fuzz targets in `fuzz/` and replayed on stable by
//! `tests/fuzz_corpus.rs`. Not a stable API.

use std::cmp::Ordering;

use crate::quantity::{Format, Quantity};

/// Parses arbitrary bytes as quantities and asserts the parser's invariants; panics on a violation.
///
/// The input is read as (lossy) UTF-8. The whole input is parsed, and when it contains a `|`, the two halves are
/// also parsed as a pair `a|b` to check the arithmetic laws:
/// * parsing never panics;
/// * `parse(format(q)) == q`, and `format(parse(format(q))) == format(q)` (the output is canonical) except for
///   Kubernetes' own BinarySI quirk (see below), which reaches a fixed point after one more round;
/// * ordering agrees with the sign of `a - b`; addition commutes; `(a + b) - b == a` when in range.
pub fn quantity(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let whole = check_one(&text);
    if let Some((left, right)) = text.split_once('|')
        && let (Some(a), Some(b)) = (check_one(left), check_one(right))
    {
        check_pair(&a, &b);
    }
    // Exercise the integer accessors too (they must not panic).
    if let Some(q) = whole {
        let _ = (q.value(), q.milli_value(), q.is_zero(), q.is_negative());
    }
}

fn check_one(text: &str) -> Option<Quantity> {
    let q: Quantity = text.parse().ok()?;
    let formatted = q.to_string();
    let reparsed: Quantity = match formatted.parse() {
        Ok(r) => r,
        Err(e) => panic!("canonical form {formatted:?} of {text:?} does not parse: {e}"),
    };
    assert_eq!(reparsed, q, "value changed through {formatted:?} (input {text:?})");
    let again = reparsed.to_string();
    if again != formatted {
        // The one Kubernetes quirk: a BinarySI value that is a whole number but not a multiple of 1024 prints
        // without a suffix ("3312.5Ki" -> "3392000"), which re-parses as DecimalSI ("3392k"). After that one
        // re-parse the form is a fixed point.
        assert!(
            q.format() == Format::BinarySI && formatted.bytes().all(|b| b.is_ascii_digit() || b == b'-'),
            "format of {text:?} is not canonical: {formatted:?} then {again:?}"
        );
        let third: Quantity = again.parse().unwrap_or_else(|e| panic!("{again:?} does not parse: {e}"));
        assert_eq!(third, q, "value changed through {again:?}");
        assert_eq!(third.to_string(), again, "format of {again:?} is not a fixed point");
    }
    assert_eq!(q.is_negative(), formatted.starts_with('-'), "sign of {text:?}");
    assert_eq!(q.is_zero(), formatted == "0", "zero of {text:?}");
    Some(q)
}

fn check_pair(a: &Quantity, b: &Quantity) {
    let sum = a.checked_add(b);
    assert_eq!(sum, b.checked_add(a), "addition does not commute for {a} and {b}");
    if let Some(diff) = a.checked_sub(b) {
        let sign = if diff.is_zero() {
            Ordering::Equal
        } else if diff.is_negative() {
            Ordering::Less
        } else {
            Ordering::Greater
        };
        assert_eq!(a.cmp(b), sign, "ordering of {a} and {b} disagrees with {diff}");
        assert_eq!(diff.checked_add(b), Some(*a), "({a} - {b}) + {b}");
    }
    if let Some(sum) = sum {
        assert_eq!(sum.checked_sub(b), Some(*a), "({a} + {b}) - {b}");
        check_one(&sum.to_string());
    }
}
