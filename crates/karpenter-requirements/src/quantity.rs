//! Exact Kubernetes resource quantities (`resource.Quantity`).
//!
//! A [`Quantity`] is a signed count of **nano-units** held in an `i128`, plus the [`Format`] Kubernetes keeps
//! alongside the number (it only influences how the value is printed). All arithmetic is integer arithmetic;
//! there are no floats anywhere.
//!
//! # Parsing
//!
//! The accepted grammar is Kubernetes' `^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$` with its suffix table:
//! decimal SI (`n u m "" k M G T P E`), binary SI (`Ki Mi Gi Ti Pi Ei`) and decimal exponents (`e3`, `E-3`,
//! `e+3`). Fractions (`1.5Gi`, `.5`, `1.`) and signs are accepted. Values that are not a whole number of
//! nano-units are rounded **up in magnitude** to the next nano-unit (`0.1n` is `1n`, `-0.1n` is `-1n`), as
//! Kubernetes does. Like Kubernetes, degenerate inputs without digits (`+`, `-`, `.`, even a bare suffix such as `Gi`)
//! parse as zero.
//!
//! # Formatting
//!
//! [`Display`](fmt::Display) produces Kubernetes' canonical form (`Quantity.String()`):
//! * zero is `0`;
//! * decimal formats: strip every factor of ten into the exponent, then lower the exponent to a multiple of
//!   three (`1.5` → `1500m`, `1000m` → `1`, `12e2` → `1200`, `1e3` → `1e3`); DecimalSI prints the exponent as an
//!   SI suffix, DecimalExponent as `eN`;
//! * binary SI: values strictly between -1024 and 1024, and values that are not whole units, are printed as
//!   DecimalSI (`0.5Ki` → `512`); otherwise every factor of 1024 becomes a suffix (`1.5Gi` → `1536Mi`).
//!   Like Kubernetes, a whole value without a factor of 1024 prints bare (`3312.5Ki` → `3392000`), and that
//!   string re-parses as DecimalSI and then prints as `3392k`: formatting is canonical after one round trip.
//!
//! # Deliberate differences from Kubernetes
//!
//! * **Range**: magnitudes above `i64::MAX` units (≈ 9.2·10¹⁸) are an error ([`QuantityError::OutOfRange`]) and
//!   checked arithmetic returns `None`. Kubernetes silently caps most such values at `2^63-1` (and keeps some,
//!   such as `1e30`, uncapped in its arbitrary precision path).
//! * **Exponents** are read as true integers: Kubernetes truncates `e`-exponents to 32 bits.
//! * **Echoing input**: Kubernetes prints the original string when its heuristic believes it is canonical, which
//!   lets non-canonical spellings such as `+1` or `01` survive. We always print the canonical form.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Nano-units per unit.
const NANO: i128 = 1_000_000_000;
/// Largest magnitude we represent: `i64::MAX` whole units.
const MAX_NANOS: i128 = i64::MAX as i128 * NANO;

/// How Kubernetes remembers a quantity was written; only affects printing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Format {
    /// Decimal SI suffixes (`m`, `k`, `M`, …) or no suffix.
    #[default]
    DecimalSI,
    /// Binary SI suffixes (`Ki`, `Mi`, …).
    BinarySI,
    /// Decimal exponent (`1e3`).
    DecimalExponent,
}

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The empty string is not a quantity.
    #[error("quantity is empty")]
    Empty,
    /// The string does not match `^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$`.
    #[error("quantity {input:?} must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    Format {
        /// The rejected input.
        input: String,
    },
    /// The number is followed by an unknown suffix.
    #[error("quantity {input:?} has an unknown suffix {suffix:?}")]
    Suffix {
        /// The rejected input.
        input: String,
        /// The suffix that is not in the table.
        suffix: String,
    },
    /// The magnitude exceeds `i64::MAX` whole units.
    #[error("quantity {input:?} is out of range (magnitude above 9223372036854775807)")]
    OutOfRange {
        /// The rejected input.
        input: String,
    },
}

/// An exact Kubernetes resource quantity. Equality, ordering and hashing are by **value** (`1Gi == 1024Mi`).
#[derive(Clone, Copy, Default)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl Quantity {
    /// Zero (DecimalSI).
    pub const ZERO: Quantity = Quantity { nanos: 0, format: Format::DecimalSI };

    /// `value` thousandths of a unit, DecimalSI (Kubernetes' `NewMilliQuantity(v, DecimalSI)`).
    pub fn from_milli(value: i64) -> Quantity {
        Quantity { nanos: i128::from(value) * 1_000_000, format: Format::DecimalSI }
    }

    /// `value` whole units in `format` (Kubernetes' `NewQuantity`).
    pub fn from_int(value: i64, format: Format) -> Quantity {
        Quantity { nanos: i128::from(value) * NANO, format }
    }

    /// A quantity of `nanos` nano-units, or `None` when out of range.
    pub fn from_nanos(nanos: i128, format: Format) -> Option<Quantity> {
        (nanos.abs() <= MAX_NANOS).then_some(Quantity { nanos, format })
    }

    /// The exact value in nano-units.
    pub fn as_nanos(&self) -> i128 {
        self.nanos
    }

    /// The remembered format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// True for zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// True for values below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// `self + other`, or `None` when the result is out of range. Keeps `self`'s format unless `self` is zero
    /// (then `other`'s), as Kubernetes' `Add` does.
    pub fn checked_add(&self, other: &Quantity) -> Option<Quantity> {
        let nanos = self.nanos.checked_add(other.nanos)?;
        let format = if self.nanos == 0 { other.format } else { self.format };
        Quantity::from_nanos(nanos, format)
    }

    /// `self - other`, or `None` when the result is out of range. Format rule as [`Quantity::checked_add`].
    pub fn checked_sub(&self, other: &Quantity) -> Option<Quantity> {
        let nanos = self.nanos.checked_sub(other.nanos)?;
        let format = if self.nanos == 0 { other.format } else { self.format };
        Quantity::from_nanos(nanos, format)
    }

    /// `self + other` clamped to the representable range (format rule as [`Quantity::checked_add`]).
    pub fn saturating_add(&self, other: &Quantity) -> Quantity {
        let nanos = self.nanos.saturating_add(other.nanos).clamp(-MAX_NANOS, MAX_NANOS);
        let format = if self.nanos == 0 { other.format } else { self.format };
        Quantity { nanos, format }
    }

    /// `-self` (always in range: the range is symmetric).
    pub fn neg(&self) -> Quantity {
        Quantity { nanos: -self.nanos, format: self.format }
    }

    /// The value in whole units rounded away from zero (Kubernetes' `Value()`), or `None` if it does not fit.
    pub fn value(&self) -> Option<i64> {
        i64::try_from(div_away_from_zero(self.nanos, NANO)).ok()
    }

    /// The value in thousandths rounded away from zero (Kubernetes' `MilliValue()`), or `None` if it does not
    /// fit in an `i64`.
    pub fn milli_value(&self) -> Option<i64> {
        i64::try_from(div_away_from_zero(self.nanos, 1_000_000)).ok()
    }

    /// The larger of the two by value (`self` on ties).
    pub fn max_of<'a>(&'a self, other: &'a Quantity) -> &'a Quantity {
        if other.nanos > self.nanos { other } else { self }
    }
}

fn div_away_from_zero(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d == 0 {
        q
    } else if n > 0 {
        q + 1
    } else {
        q - 1
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}
impl Eq for Quantity {}
impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}
impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}

impl fmt::Debug for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Quantity({self})")
    }
}

const DECIMAL_SUFFIXES: [(i32, &str); 9] =
    [(-9, "n"), (-6, "u"), (-3, "m"), (3, "k"), (6, "M"), (9, "G"), (12, "T"), (15, "P"), (18, "E")];
const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let mut format = self.format;
        if format == Format::BinarySI && (self.nanos.abs() < 1024 * NANO || self.nanos % NANO != 0) {
            format = Format::DecimalSI;
        }
        if format == Format::BinarySI {
            let mut units = self.nanos / NANO;
            let mut exp = 0usize;
            while units.abs() >= 1024 && units % 1024 == 0 && exp + 1 < BINARY_SUFFIXES.len() {
                units /= 1024;
                exp += 1;
            }
            return write!(f, "{units}{}", BINARY_SUFFIXES.get(exp).copied().unwrap_or(""));
        }
        let mut mantissa = self.nanos;
        let mut exp: i32 = -9;
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exp += 1;
        }
        let r = exp.rem_euclid(3);
        for _ in 0..r {
            mantissa *= 10; // cannot overflow: we only undo part of the divisions above
        }
        exp -= r;
        if exp == 0 {
            return write!(f, "{mantissa}");
        }
        if format == Format::DecimalSI
            && let Some((_, suffix)) = DECIMAL_SUFFIXES.iter().find(|(e, _)| *e == exp)
        {
            return write!(f, "{mantissa}{suffix}");
        }
        write!(f, "{mantissa}e{exp}")
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s)
    }
}

impl TryFrom<&str> for Quantity {
    type Error = QuantityError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        parse(s)
    }
}

impl TryFrom<&k8s_openapi::apimachinery::pkg::api::resource::Quantity> for Quantity {
    type Error = QuantityError;
    fn try_from(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Result<Self, Self::Error> {
        parse(q.0.trim())
    }
}

impl TryFrom<k8s_openapi::apimachinery::pkg::api::resource::Quantity> for Quantity {
    type Error = QuantityError;
    fn try_from(q: k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Result<Self, Self::Error> {
        Quantity::try_from(&q)
    }
}

impl From<&Quantity> for k8s_openapi::apimachinery::pkg::api::resource::Quantity {
    fn from(q: &Quantity) -> Self {
        k8s_openapi::apimachinery::pkg::api::resource::Quantity(q.to_string())
    }
}

impl From<Quantity> for k8s_openapi::apimachinery::pkg::api::resource::Quantity {
    fn from(q: Quantity) -> Self {
        (&q).into()
    }
}

fn format_err(s: &str) -> QuantityError {
    QuantityError::Format { input: s.to_owned() }
}

/// Kubernetes' suffix table: (base, exponent, format).
fn interpret_suffix(s: &str, suffix: &str) -> Result<(u32, i64, Format), QuantityError> {
    let decimal = |e| Ok((10, e, Format::DecimalSI));
    let binary = |e| Ok((2, e, Format::BinarySI));
    match suffix {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            let mut chars = suffix.chars();
            if suffix.len() > 1
                && matches!(chars.next(), Some('e' | 'E'))
                && let Ok(exp) = chars.as_str().parse::<i64>()
            {
                return Ok((10, exp, Format::DecimalExponent));
            }
            Err(QuantityError::Suffix { input: s.to_owned(), suffix: suffix.to_owned() })
        }
    }
}

fn parse(s: &str) -> Result<Quantity, QuantityError> {
    parse_with(s, true)
}

/// `fast`: try [`small_whole`] before the exact digit arithmetic (off only in the test that compares the two).
fn parse_with(s: &str, fast: bool) -> Result<Quantity, QuantityError> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(QuantityError::Empty);
    }
    let len = b.len();
    let mut pos = 0;
    let mut negative = false;
    match b.first() {
        Some(b'-') => {
            negative = true;
            pos = 1;
        }
        Some(b'+') => pos = 1,
        _ => {}
    }
    while pos < len && b[pos] == b'0' {
        pos += 1;
    }
    let num_start = pos;
    while pos < len && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let num = &b[num_start..pos];
    let mut denom: &[u8] = &[];
    if pos < len && b[pos] == b'.' {
        pos += 1;
        let denom_start = pos;
        while pos < len && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &b[denom_start..pos];
    }
    let suffix_start = pos;
    while pos < len && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < len && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < len && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < len {
        return Err(format_err(s));
    }
    // Everything before suffix_start is ASCII, so this is a char boundary.
    let suffix = s.get(suffix_start..).ok_or_else(|| format_err(s))?;
    let (base, exponent, format) = interpret_suffix(s, suffix)?;
    if fast
        && denom.is_empty()
        && let Some(q) = small_whole(num, base, exponent, format, negative)
    {
        return Ok(q);
    }

    // Significant digits of num.denom, big-endian, without leading zeros.
    let mut digits: Vec<u8> = num.iter().chain(denom.iter()).map(|d| d - b'0').skip_while(|d| *d == 0).collect();
    if digits.is_empty() {
        return Ok(Quantity { nanos: 0, format });
    }
    // value = digits * 10^exp10 (in nano-units) * 2^(binary exponent)
    let mut exp10: i128 = 9 - denom.len() as i128;
    if base == 10 {
        exp10 += i128::from(exponent);
    } else {
        multiply_digits(&mut digits, 1u128 << exponent);
    }
    while digits.last() == Some(&0) {
        digits.pop();
        exp10 += 1;
    }
    let out_of_range = || QuantityError::OutOfRange { input: s.to_owned() };
    let magnitude: u128 = if exp10 >= 0 {
        if digits.len() as i128 + exp10 > 39 {
            return Err(out_of_range());
        }
        let mut v = digits_value(&digits).ok_or_else(out_of_range)?;
        for _ in 0..exp10 {
            v = v.checked_mul(10).ok_or_else(out_of_range)?;
        }
        v
    } else {
        // A fraction of a nano-unit remains (the last digit is non-zero): round up in magnitude.
        let int_len = digits.len() as i128 + exp10;
        let int_part = if int_len <= 0 {
            0
        } else {
            if int_len > 39 {
                return Err(out_of_range());
            }
            digits_value(digits.get(..int_len as usize).unwrap_or(&[])).ok_or_else(out_of_range)?
        };
        int_part.checked_add(1).ok_or_else(out_of_range)?
    };
    if magnitude > MAX_NANOS as u128 {
        return Err(out_of_range());
    }
    let nanos = magnitude as i128;
    Ok(Quantity { nanos: if negative { -nanos } else { nanos }, format })
}

/// The value of a whole number of at most 18 digits (`num`, no fraction) times its suffix, when that is a whole
/// number of nano-units within range; `None` sends the caller to the exact digit arithmetic, which also words the
/// errors. Nearly every quantity in a manifest (`500m`, `2Gi`, `110`) is such a number, and parsing them without
/// the digit buffer's allocation matters: pods' requests are read for every pod of a pass.
fn small_whole(num: &[u8], base: u32, exponent: i64, format: Format, negative: bool) -> Option<Quantity> {
    if num.len() > 18 {
        return None;
    }
    let value = num.iter().fold(0i128, |acc, d| acc * 10 + i128::from(d - b'0'));
    let scale: i128 = if base == 10 {
        // Exponents below nano-units take the rounding path.
        10i128.checked_pow(u32::try_from(exponent.checked_add(9)?).ok()?)?
    } else {
        (1i128 << u32::try_from(exponent).ok().filter(|e| *e < 64)?).checked_mul(NANO)?
    };
    let magnitude = value.checked_mul(scale)?;
    if magnitude > MAX_NANOS {
        return None;
    }
    Some(Quantity { nanos: if negative { -magnitude } else { magnitude }, format })
}

fn digits_value(digits: &[u8]) -> Option<u128> {
    digits.iter().try_fold(0u128, |acc, d| acc.checked_mul(10)?.checked_add(u128::from(*d)))
}

/// Multiplies a big-endian decimal digit string by `m` (at most 2^60) in place.
fn multiply_digits(digits: &mut Vec<u8>, m: u128) {
    let mut carry: u128 = 0;
    for d in digits.iter_mut().rev() {
        let v = u128::from(*d) * m + carry;
        *d = (v % 10) as u8;
        carry = v / 10;
    }
    let mut prefix = Vec::new();
    while carry > 0 {
        prefix.push((carry % 10) as u8);
        carry /= 10;
    }
    if !prefix.is_empty() {
        prefix.reverse();
        prefix.append(digits);
        *digits = prefix;
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct QuantityVisitor;
        impl Visitor<'_> for QuantityVisitor {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a quantity string such as \"1.5Gi\" or a number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
                parse(v.trim()).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity::from_int(v, Format::DecimalSI))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
                parse(&v.to_string()).map_err(E::custom)
            }
            // JSON numbers with a fraction or exponent: serde has already turned them into an f64; its shortest
            // round-tripping decimal rendering is parsed exactly (no float arithmetic on the value).
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
                parse(&v.to_string()).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(QuantityVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The allocation-free path for small whole numbers gives exactly what the digit arithmetic gives: value,
        /// format and errors.
        #[test]
        fn the_small_whole_path_agrees_with_the_digit_arithmetic(
            sign in "[-+]?",
            num in "0{0,2}[0-9]{0,20}",
            suffix in "(|n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|e[0-9]{1,2}|e-[0-9]|E[0-9]{1,2})",
        ) {
            let s = format!("{sign}{num}{suffix}");
            let (fast, exact) = (parse_with(&s, true), parse_with(&s, false));
            proptest::prop_assert_eq!(&fast, &exact, "{}", s);
            if let (Ok(a), Ok(b)) = (fast, exact) {
                proptest::prop_assert_eq!(a.format, b.format, "{}", s);
            }
        }
    }

    fn q(s: &str) -> Quantity {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn canonical_forms() {
        let cases = [
            ("0", "0"),
            ("-0", "0"),
            ("0Gi", "0"),
            ("1", "1"),
            ("1000m", "1"),
            ("1.5", "1500m"),
            ("100m", "100m"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Ki", "512"),
            ("1Ki", "1Ki"),
            ("1024", "1024"),
            ("1e3", "1e3"),
            ("1E3", "1e3"),
            ("12e2", "1200"),
            ("1e-3", "1e-3"),
            ("1.5e3", "1500"),
            ("1000e0", "1e3"),
            ("1k", "1k"),
            ("1000", "1k"),
            ("1000000", "1M"),
            ("1500k", "1500k"),
            ("1.5M", "1500k"),
            ("2000Mi", "2000Mi"),
            ("2048Mi", "2Gi"),
            ("1025Ki", "1025Ki"),
            ("0.1", "100m"),
            (".5", "500m"),
            ("1.", "1"),
            ("+1", "1"),
            ("01", "1"),
            ("-1Ki", "-1Ki"),
            ("-1023Ki", "-1023Ki"),
            ("-0.5Ki", "-512"),
            ("-1.5", "-1500m"),
            ("1n", "1n"),
            ("1u", "1u"),
            ("1000n", "1u"),
            ("0.1n", "1n"),
            ("-0.1n", "-1n"),
            ("1.0000000001", "1000000001n"),
            ("0.1Ki", "102400m"),
            ("1e-100", "1e-9"),
            ("0e100", "0"),
            ("9223372036854775807", "9223372036854775807"),
            ("9E", "9E"),
            ("7Ei", "7Ei"),
            ("Gi", "0"),
            ("m", "0"),
            ("1e18", "1e18"),
            ("+", "0"),
            ("-", "0"),
            (".", "0"),
            ("000", "0"),
            ("1Pi", "1Pi"),
            ("1.5e-9", "2e-9"),
            // Kubernetes quirk: a whole BinarySI value that is not a multiple of 1024 prints without a suffix,
            // and that string re-parses as DecimalSI.
            ("3312.5Ki", "3392000"),
            ("3392000", "3392k"),
        ];
        for (input, want) in cases {
            assert_eq!(q(input).to_string(), want, "input {input}");
        }
    }

    #[test]
    fn rejects_with_reason() {
        assert_eq!("".parse::<Quantity>(), Err(QuantityError::Empty));
        for bad in ["abc", "1 ", " 1", "1.5.5", "1Gi ", "1e3.5", "1KiB", "1,5", "１", "1e3e"] {
            assert!(matches!(bad.parse::<Quantity>(), Err(QuantityError::Format { .. })), "{bad}");
        }
        for bad in ["1i", "1e", "1Ki3", "1ee3", "1mi", "1e+", "1K", "--1", "1e99999999999999999999"] {
            assert!(matches!(bad.parse::<Quantity>(), Err(QuantityError::Suffix { .. })), "{bad}");
        }
        for bad in ["9223372036854775808", "10E", "1e19", "16Ei", "-9223372036854775808", "1e100", "8Ei"] {
            assert!(matches!(bad.parse::<Quantity>(), Err(QuantityError::OutOfRange { .. })), "{bad}");
        }
        let err = "1xyz".parse::<Quantity>().unwrap_err().to_string();
        assert!(err.contains("1xyz"), "{err}");
    }

    #[test]
    fn huge_inputs_do_not_overflow() {
        let long_fraction = format!("0.{}1", "0".repeat(200));
        assert_eq!(q(&long_fraction).to_string(), "1n");
        let long_int = format!("1{}", "0".repeat(200));
        assert!(long_int.parse::<Quantity>().is_err());
        let many_zeros = format!("{}5", "0".repeat(500));
        assert_eq!(q(&many_zeros), q("5"));
        assert_eq!(
            q("1.0000000000000000000000000000000000000000000000001Ei").to_string(),
            "1152921504606846976000000001n"
        );
    }

    #[test]
    fn value_semantics() {
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert_eq!(q("1"), q("1000m"));
        assert!(q("1Gi") > q("1G"));
        assert!(q("-1") < q("0"));
        let mut set = std::collections::HashSet::new();
        set.insert(q("1Ki"));
        assert!(set.contains(&q("1024")));
    }

    #[test]
    fn values_round_away_from_zero() {
        assert_eq!(q("1.5").value(), Some(2));
        assert_eq!(q("-1.5").value(), Some(-2));
        assert_eq!(q("1").value(), Some(1));
        assert_eq!(q("100m").value(), Some(1));
        assert_eq!(q("100m").milli_value(), Some(100));
        assert_eq!(q("1n").milli_value(), Some(1));
        assert_eq!(q("-1n").milli_value(), Some(-1));
        assert_eq!(q("1Gi").value(), Some(1 << 30));
        assert_eq!(q("9223372036854775807").value(), Some(i64::MAX));
        assert_eq!(q("9223372036854775807").milli_value(), None);
    }

    #[test]
    fn arithmetic_is_checked() {
        let max = q("9223372036854775807");
        assert_eq!(max.checked_add(&q("1")), None);
        assert_eq!(max.neg().checked_sub(&q("1")), None);
        assert_eq!(q("1Gi").checked_sub(&q("512Mi")).map(|x| x.to_string()), Some("512Mi".into()));
        assert_eq!(Quantity::ZERO.checked_add(&q("1Ki")).map(|x| x.to_string()), Some("1Ki".into()));
        assert_eq!(q("1").checked_add(&q("1Ki")).map(|x| x.to_string()), Some("1025".into()));
        assert!(q("1").checked_sub(&q("2")).is_some_and(|x| x.is_negative()));
        assert_eq!(Quantity::from_milli(1500).to_string(), "1500m");
        assert_eq!(Quantity::from_int(2048, Format::BinarySI).to_string(), "2Ki");
        assert_eq!(Quantity::from_int(-3, Format::DecimalExponent).to_string(), "-3");
    }

    #[test]
    fn serde_string_and_numbers() {
        let v: Quantity = serde_json::from_str("\"1.5Gi\"").unwrap();
        assert_eq!(v.to_string(), "1536Mi");
        let v: Quantity = serde_json::from_str("2").unwrap();
        assert_eq!(v.to_string(), "2");
        let v: Quantity = serde_json::from_str("0.5").unwrap();
        assert_eq!(v.to_string(), "500m");
        let v: Quantity = serde_json::from_str("18446744073709551615").unwrap_or(Quantity::ZERO);
        assert!(v.is_zero(), "u64 above range must be rejected");
        assert!(serde_json::from_str::<Quantity>("\"x\"").is_err());
        assert_eq!(serde_json::to_string(&q("1000m")).unwrap(), "\"1\"");
    }

    #[test]
    fn k8s_conversions() {
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K;
        let k = K("1.5Gi".into());
        let ours = Quantity::try_from(&k).unwrap();
        assert_eq!(K::from(&ours).0, "1536Mi");
        assert!(Quantity::try_from(&K("bogus".into())).is_err());
    }
}
