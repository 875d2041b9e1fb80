//! Times as the API server writes them, and the conversions between k8s-openapi, std and chrono times that every
//! crate needs: one definition each, so a timestamp written by one controller reads back the same in another.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// RFC 3339 with whole seconds and a `Z` suffix, as the API server writes `Time` fields (condition transition
/// times, `lastPodEventTime`).
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// An RFC 3339 string as a UTC time (`None` when it does not parse).
pub fn parse_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).ok().map(|t| t.with_timezone(&Utc))
}

/// A k8s-openapi `Time` as a chrono time (`None` only when it lies outside chrono's range).
pub fn from_k8s(t: &Time) -> Option<DateTime<Utc>> {
    let ts = t.0;
    DateTime::<Utc>::from_timestamp(ts.as_second(), u32::try_from(ts.subsec_nanosecond()).unwrap_or(0))
}

/// A chrono time as a k8s-openapi `Time` (what objects carry in timestamps; the API server keeps whole seconds).
/// `None` only when it lies outside the range k8s-openapi's timestamps can hold.
pub fn to_k8s(t: DateTime<Utc>) -> Option<Time> {
    let nanos = i32::try_from(t.timestamp_subsec_nanos()).ok()?;
    k8s_openapi::jiff::Timestamp::new(t.timestamp(), nanos).ok().map(Time)
}

/// A std duration as a chrono one, saturating at chrono's maximum: durations here come from manifests (Go
/// duration syntax allows values chrono cannot hold), and "longer than representable" means "never" to callers.
pub fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_at_second_precision() {
        let t = DateTime::from_timestamp(1_767_268_800, 123_000_000).unwrap();
        assert_eq!(rfc3339(t), "2026-01-01T12:00:00Z");
        assert_eq!(parse_rfc3339("2026-01-01T13:00:00+01:00"), DateTime::from_timestamp(1_767_268_800, 0));
        assert_eq!(parse_rfc3339("yesterday"), None);
    }

    #[test]
    fn k8s_times_convert_to_chrono() {
        let k8s: Time = serde_json::from_value(serde_json::json!("2026-01-01T12:00:00Z")).unwrap();
        assert_eq!(from_k8s(&k8s), DateTime::from_timestamp(1_767_268_800, 0));
        let t = DateTime::from_timestamp(1_767_268_800, 250_000_000).unwrap();
        assert_eq!(to_k8s(t).as_ref().and_then(from_k8s), Some(t));
        assert_eq!(serde_json::to_value(to_k8s(t)).unwrap(), serde_json::json!("2026-01-01T12:00:00Z"));
    }

    #[test]
    fn durations_too_long_for_chrono_saturate() {
        assert_eq!(chrono_duration(Duration::from_secs(90)), chrono::Duration::seconds(90));
        assert_eq!(chrono_duration(Duration::MAX), chrono::Duration::MAX);
    }
}
