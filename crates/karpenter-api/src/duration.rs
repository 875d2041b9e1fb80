//! Durations as written in manifests (`"720h"`, `"1h30m"`, `"Never"`).
//!
//! Upstream's CRDs accept Go duration syntax restricted by a per-field regex; we keep the text the user wrote so
//! a manifest round-trips unchanged (`"90m"` stays `"90m"`, it is not rewritten to `"1h30m0s"`), and parse it
//! once into a [`std::time::Duration`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a duration string was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("duration is empty")]
    /// The text was empty.
    Empty,
    #[error(
        "invalid duration {0:?}: expected a sequence of <integer><unit> with units h, m, s (e.g. \"720h\", \"1h30m\")"
    )]
    /// Not a sequence of `<integer><h|m|s>`; holds the text as written.
    Syntax(String),
    #[error("duration {0:?} overflows")]
    /// Too long to represent; holds the text as written.
    Overflow(String),
}

/// Which units a field accepts, mirroring upstream's per-field regexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationUnits {
    /// `h`, `m`, `s` (expireAfter, terminationGracePeriod, consolidateAfter).
    HoursMinutesSeconds,
    /// Budget durations: `^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$`.
    BudgetHoursMinutes,
}

/// Parses Go-style `<int><unit>` sequences (units `h`, `m`, `s`, `ms`, `us`, `ns`) into a duration.
///
/// This is the lenient parser; fields check their own stricter syntax with [`check_syntax`].
pub fn parse_go_duration(s: &str) -> Result<Duration, DurationError> {
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let bytes = s.as_bytes();
    let mut i = 0;
    let mut total: u128 = 0; // nanoseconds
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i {
            return Err(DurationError::Syntax(s.to_string()));
        }
        let n: u128 = s[start..i].parse().map_err(|_| DurationError::Overflow(s.to_string()))?;
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let nanos_per_unit: u128 = match &s[unit_start..i] {
            "h" => 3_600_000_000_000,
            "m" => 60_000_000_000,
            "s" => 1_000_000_000,
            "ms" => 1_000_000,
            "us" => 1_000,
            "ns" => 1,
            _ => return Err(DurationError::Syntax(s.to_string())),
        };
        total = n
            .checked_mul(nanos_per_unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| DurationError::Overflow(s.to_string()))?;
    }
    // Go durations are int64 nanoseconds.
    if total > i64::MAX as u128 {
        return Err(DurationError::Overflow(s.to_string()));
    }
    Ok(Duration::from_nanos(total as u64))
}

/// Checks the stricter per-field syntax upstream's CRD regexes enforce.
pub fn check_syntax(s: &str, units: DurationUnits) -> bool {
    let mut parts = Vec::new();
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if start == i || i >= bytes.len() {
            return false;
        }
        let unit = bytes[i];
        i += 1;
        parts.push((&s[start..i - 1], unit));
    }
    if parts.is_empty() {
        return false;
    }
    match units {
        DurationUnits::HoursMinutesSeconds => parts.iter().all(|(_, u)| matches!(u, b'h' | b'm' | b's')),
        DurationUnits::BudgetHoursMinutes => {
            // Optional trailing "0s".
            let mut p: &[(&str, u8)] = &parts;
            if let Some(((n, b's'), rest)) = p.split_last()
                && *n == "0"
                && !rest.is_empty()
            {
                p = rest;
            }
            matches!(p, [(_, b'h' | b'm')] | [(_, b'h'), (_, b'm')])
        }
    }
}

/// A duration field that keeps its text. Serialises exactly as it was written.
#[derive(Clone, Debug)]
pub struct KDuration {
    text: String,
    value: Duration,
}

impl KDuration {
    /// Builds from a [`Duration`], writing it in whole seconds (e.g. `"300s"`).
    pub fn from_duration(d: Duration) -> Self {
        Self { text: format!("{}s", d.as_secs()), value: Duration::from_secs(d.as_secs()) }
    }
    /// The duration as written (`"1h30m"`), which is what round-trips to the API server.
    pub fn as_str(&self) -> &str {
        &self.text
    }
    /// The parsed length.
    pub fn duration(&self) -> Duration {
        self.value
    }
}

impl PartialEq for KDuration {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}
impl Eq for KDuration {}

impl FromStr for KDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self { text: s.to_string(), value: parse_go_duration(s)? })
    }
}

impl fmt::Display for KDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for KDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for KDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for KDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}

/// A duration that may also be `"Never"` (expireAfter, consolidateAfter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NillableDuration {
    /// `"Never"`: the behaviour is off (no expiry, no consolidation).
    Never,
    /// A finite duration.
    Duration(KDuration),
}

impl NillableDuration {
    /// The text of [`NillableDuration::Never`].
    pub const NEVER: &'static str = "Never";

    /// `None` for `Never`.
    pub fn duration(&self) -> Option<Duration> {
        match self {
            Self::Never => None,
            Self::Duration(d) => Some(d.duration()),
        }
    }
    /// The text as written, or `"Never"`.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Never => Self::NEVER,
            Self::Duration(d) => d.as_str(),
        }
    }
    /// Whether this is `"Never"`.
    pub fn is_never(&self) -> bool {
        matches!(self, Self::Never)
    }
    /// Parses a literal known to be valid (defaults in code). Falls back to `Never` on a bad literal.
    pub fn from_static(s: &'static str) -> Self {
        s.parse().unwrap_or(Self::Never)
    }
}

impl From<Duration> for KDuration {
    /// As [`KDuration::from_duration`]: whole seconds.
    fn from(d: Duration) -> Self {
        KDuration::from_duration(d)
    }
}

impl From<Duration> for NillableDuration {
    /// A finite duration in whole seconds (`"3600s"`); `Never` is [`NillableDuration::Never`].
    fn from(d: Duration) -> Self {
        NillableDuration::Duration(KDuration::from_duration(d))
    }
}

impl FromStr for NillableDuration {
    type Err = DurationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == Self::NEVER { Ok(Self::Never) } else { Ok(Self::Duration(s.parse()?)) }
    }
}

impl fmt::Display for NillableDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for NillableDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for NillableDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NillableDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NillableDuration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_round_trips_text() {
        let d: KDuration = "1h30m".parse().unwrap();
        assert_eq!(d.duration(), Duration::from_secs(5400));
        assert_eq!(d.to_string(), "1h30m");
        let n: NillableDuration = "Never".parse().unwrap();
        assert!(n.is_never());
        assert_eq!(n.duration(), None);
        assert_eq!("720h".parse::<NillableDuration>().unwrap().duration(), Some(Duration::from_secs(720 * 3600)));
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for bad in ["", "h", "10", "10x", "1.5h", "-1h", "99999999999999999999999h", "10hh", "never"] {
            assert!(bad.parse::<KDuration>().is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn field_syntax_matches_upstream_regexes() {
        use DurationUnits::*;
        assert!(check_syntax("720h", HoursMinutesSeconds));
        assert!(check_syntax("1h30m10s", HoursMinutesSeconds));
        assert!(!check_syntax("10ms", HoursMinutesSeconds));
        assert!(!check_syntax("", HoursMinutesSeconds));
        assert!(check_syntax("8h", BudgetHoursMinutes));
        assert!(check_syntax("30m", BudgetHoursMinutes));
        assert!(check_syntax("1h30m", BudgetHoursMinutes));
        assert!(check_syntax("1h30m0s", BudgetHoursMinutes));
        assert!(check_syntax("10m0s", BudgetHoursMinutes));
        assert!(!check_syntax("30s", BudgetHoursMinutes));
        assert!(!check_syntax("30m1h", BudgetHoursMinutes));
        assert!(!check_syntax("1h30m5s", BudgetHoursMinutes));
    }
}
