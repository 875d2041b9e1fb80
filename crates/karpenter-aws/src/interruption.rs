//! Parsing of the EventBridge events the interruption queue (SQS) carries, SDK-free.
//!
//! A message body is one EventBridge event as JSON. It is dispatched on (`version`, `source`, `detail-type`):
//!
//! | source / detail-type | [`Kind`] |
//! |---|---|
//! | `aws.ec2` / `EC2 Spot Instance Interruption Warning` | [`Kind::SpotInterrupted`] |
//! | `aws.ec2` / `EC2 Instance Rebalance Recommendation` | [`Kind::RebalanceRecommendation`] |
//! | `aws.ec2` / `EC2 Instance State-change Notification`, state stopping/stopped | [`Kind::InstanceStopped`] |
//! | the same, state shutting-down/terminated | [`Kind::InstanceTerminated`] (other states: [`Kind::NoOp`]) |
//! | `aws.ec2` / `EC2 Capacity Reservation Instance Interruption Warning` | [`Kind::CapacityReservationInterrupted`] |
//! | `aws.health` / `AWS Health Event`, service `EC2`, category `scheduledChange` | [`Kind::ScheduledChange`] |
//! | anything else (other versions, sources, detail types, Health categories) | [`Kind::NoOp`] |
//!
//! [`parse`] never panics: a body that is not JSON, lacks the envelope fields, or is a known event without usable
//! instance ids is a [`ParseError`] (the poller logs it and deletes the message). Instance ids are kept in message
//! order without duplicates. Mapping events to NodeClaims and actions belongs to the interruption controller.

use serde_json::Value;

/// What an event means for Karpenter (the metric `reason` values upstream uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A spot instance will be reclaimed in two minutes: mark the offering unavailable, delete the NodeClaim.
    SpotInterrupted,
    /// EC2 advises moving off a spot instance: an event only, no action.
    RebalanceRecommendation,
    /// AWS Health scheduled maintenance (retirement, reboot): delete the NodeClaim.
    ScheduledChange,
    /// The instance is stopping or stopped: delete the NodeClaim.
    InstanceStopped,
    /// The instance is shutting down or terminated: delete the NodeClaim.
    InstanceTerminated,
    /// An interruptible capacity reservation reclaims the instance: mark the reservation unavailable, delete.
    CapacityReservationInterrupted,
    /// Nothing to do.
    NoOp,
}

impl Kind {
    /// The snake-case name (`spot_interrupted`, ..., `no_op`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Kind::SpotInterrupted => "spot_interrupted",
            Kind::RebalanceRecommendation => "rebalance_recommendation",
            Kind::ScheduledChange => "scheduled_change",
            Kind::InstanceStopped => "instance_stopped",
            Kind::InstanceTerminated => "instance_terminated",
            Kind::CapacityReservationInterrupted => "capacity_reservation_interrupted",
            Kind::NoOp => "no_op",
        }
    }

    /// Whether the NodeClaims of the event's instances are deleted.
    pub fn deletes_node_claim(&self) -> bool {
        !matches!(self, Kind::RebalanceRecommendation | Kind::NoOp)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// What it means.
    pub kind: Kind,
    /// The EventBridge event id (empty when absent).
    pub id: String,
    /// `source`.
    pub source: String,
    /// `detail-type`.
    pub detail_type: String,
    /// `time` as sent (RFC 3339), if present.
    pub time: Option<String>,
    /// `region`, if present.
    pub region: Option<String>,
    /// The instances concerned, in message order, without duplicates (may be empty for [`Kind::NoOp`]).
    pub instance_ids: Vec<String>,
    /// State-change events: the new state.
    pub state: Option<String>,
    /// Capacity-reservation events: the reservation, when the event names it.
    pub capacity_reservation_id: Option<String>,
}

/// A message that cannot be understood.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON.
    #[error("message is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    /// JSON, but not an object.
    #[error("message is not a JSON object")]
    NotAnObject,
    /// A required field is missing or not a string.
    #[error("message field {0:?} is missing or not a string")]
    Field(&'static str),
    /// A known event names no valid instance id.
    #[error("{detail_type} event names no instance id")]
    NoInstance {
        /// The event's detail type.
        detail_type: String,
    },
}

/// Spot interruption warning.
pub const SPOT_INTERRUPTION: &str = "EC2 Spot Instance Interruption Warning";
/// Rebalance recommendation.
pub const REBALANCE_RECOMMENDATION: &str = "EC2 Instance Rebalance Recommendation";
/// Instance state change.
pub const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
/// Capacity-reservation interruption warning.
pub const CAPACITY_RESERVATION_INTERRUPTION: &str = "EC2 Capacity Reservation Instance Interruption Warning";
/// AWS Health event.
pub const HEALTH_EVENT: &str = "AWS Health Event";

/// `i-` followed by 1..=32 lowercase hex digits or ASCII letters/digits (EC2 uses 8 or 17 hex digits).
pub fn is_instance_id(s: &str) -> bool {
    s.strip_prefix("i-")
        .is_some_and(|rest| (1..=32).contains(&rest.len()) && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
}

fn str_field<'a>(obj: &'a serde_json::Map<String, Value>, key: &'static str) -> Result<&'a str, ParseError> {
    obj.get(key).and_then(Value::as_str).ok_or(ParseError::Field(key))
}

fn push_id(ids: &mut Vec<String>, v: Option<&Value>) {
    if let Some(s) = v.and_then(Value::as_str).filter(|s| is_instance_id(s))
        && !ids.iter().any(|i| i == s)
    {
        ids.push(s.to_owned());
    }
}

/// Parses one message body.
pub fn parse(body: &[u8]) -> Result<Message, ParseError> {
    let v: Value = serde_json::from_slice(body)?;
    let obj = v.as_object().ok_or(ParseError::NotAnObject)?;
    let version = str_field(obj, "version")?;
    let source = str_field(obj, "source")?;
    let detail_type = str_field(obj, "detail-type")?;
    let mut m = Message {
        kind: Kind::NoOp,
        id: obj.get("id").and_then(Value::as_str).unwrap_or_default().to_owned(),
        source: source.to_owned(),
        detail_type: detail_type.to_owned(),
        time: obj.get("time").and_then(Value::as_str).map(str::to_owned),
        region: obj.get("region").and_then(Value::as_str).map(str::to_owned),
        instance_ids: Vec::new(),
        state: None,
        capacity_reservation_id: None,
    };
    if version != "0" {
        return Ok(m);
    }
    let empty = serde_json::Map::new();
    let detail = obj.get("detail").and_then(Value::as_object).unwrap_or(&empty);
    let ec2_ids = |ids: &mut Vec<String>| {
        push_id(ids, detail.get("instance-id"));
        if let Some(list) = detail.get("instance-ids").and_then(Value::as_array) {
            for v in list {
                push_id(ids, Some(v));
            }
        }
    };
    let kind = match (source, detail_type) {
        ("aws.ec2", SPOT_INTERRUPTION) => Kind::SpotInterrupted,
        ("aws.ec2", REBALANCE_RECOMMENDATION) => Kind::RebalanceRecommendation,
        ("aws.ec2", CAPACITY_RESERVATION_INTERRUPTION) => {
            m.capacity_reservation_id =
                detail.get("capacity-reservation-id").and_then(Value::as_str).map(str::to_owned);
            Kind::CapacityReservationInterrupted
        }
        ("aws.ec2", STATE_CHANGE) => {
            let state = detail.get("state").and_then(Value::as_str).ok_or(ParseError::Field("detail.state"))?;
            m.state = Some(state.to_owned());
            match state {
                "stopping" | "stopped" => Kind::InstanceStopped,
                "shutting-down" | "terminated" => Kind::InstanceTerminated,
                _ => {
                    ec2_ids(&mut m.instance_ids);
                    return Ok(m);
                }
            }
        }
        ("aws.health", HEALTH_EVENT) => {
            let service = detail.get("service").and_then(Value::as_str);
            let category = detail.get("eventTypeCategory").and_then(Value::as_str);
            if service != Some("EC2") || category != Some("scheduledChange") {
                return Ok(m);
            }
            for e in detail.get("affectedEntities").and_then(Value::as_array).into_iter().flatten() {
                push_id(&mut m.instance_ids, e.get("entityValue"));
            }
            if m.instance_ids.is_empty() {
                return Err(ParseError::NoInstance { detail_type: detail_type.to_owned() });
            }
            m.kind = Kind::ScheduledChange;
            return Ok(m);
        }
        _ => return Ok(m),
    };
    ec2_ids(&mut m.instance_ids);
    if m.instance_ids.is_empty() {
        return Err(ParseError::NoInstance { detail_type: detail_type.to_owned() });
    }
    m.kind = kind;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPOT: &str = r#"{
      "version": "0",
      "id": "1e5527d7-bb36-4607-3370-4164db56a40e",
      "detail-type": "EC2 Spot Instance Interruption Warning",
      "source": "aws.ec2",
      "account": "123456789012",
      "time": "2026-07-20T12:00:00Z",
      "region": "us-west-2",
      "resources": ["arn:aws:ec2:us-west-2b:instance/i-0b662ef9931388ba0"],
      "detail": {"instance-id": "i-0b662ef9931388ba0", "instance-action": "terminate"}
    }"#;

    const REBALANCE: &str = r#"{
      "version": "0", "id": "5f2d9a43-2a4b-0c8e-8d7e-4d5e9d0b3c1a",
      "detail-type": "EC2 Instance Rebalance Recommendation", "source": "aws.ec2",
      "account": "123456789012", "time": "2026-07-20T12:00:00Z", "region": "us-west-2",
      "resources": ["arn:aws:ec2:us-west-2a:instance/i-0123456789abcdef0"],
      "detail": {"instance-id": "i-0123456789abcdef0"}
    }"#;

    const HEALTH: &str = r#"{
      "version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602",
      "detail-type": "AWS Health Event", "source": "aws.health",
      "account": "123456789012", "time": "2026-07-20T06:27:57Z", "region": "us-west-2",
      "resources": ["i-0abcdef1234567890", "i-0fedcba0987654321"],
      "detail": {
        "eventArn": "arn:aws:health:us-west-2::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_1",
        "service": "EC2",
        "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "eventTypeCategory": "scheduledChange",
        "startTime": "Mon, 27 Jul 2026 06:00:00 GMT",
        "endTime": "Mon, 27 Jul 2026 08:00:00 GMT",
        "eventDescription": [{"language": "en_US", "latestDescription": "The instance is scheduled for retirement."}],
        "affectedEntities": [
          {"entityValue": "i-0abcdef1234567890"},
          {"entityValue": "i-0fedcba0987654321"},
          {"entityValue": "i-0abcdef1234567890"}
        ]
      }
    }"#;

    fn state_change(state: &str) -> String {
        format!(
            r#"{{"version": "0", "id": "7bf73129-1428-4cd3-a780-95db273d1602",
                "detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2",
                "account": "123456789012", "time": "2026-07-20T12:00:00Z", "region": "us-west-2",
                "resources": ["arn:aws:ec2:us-west-2:123456789012:instance/i-abcd1111"],
                "detail": {{"instance-id": "i-abcd1111", "state": "{state}"}}}}"#
        )
    }

    #[test]
    fn spot_interruption() {
        let m = parse(SPOT.as_bytes()).expect("parses");
        assert_eq!(m.kind, Kind::SpotInterrupted);
        assert_eq!(m.instance_ids, ["i-0b662ef9931388ba0"]);
        assert_eq!(m.id, "1e5527d7-bb36-4607-3370-4164db56a40e");
        assert_eq!(m.time.as_deref(), Some("2026-07-20T12:00:00Z"));
        assert_eq!(m.region.as_deref(), Some("us-west-2"));
        assert!(m.kind.deletes_node_claim());
        assert_eq!(m.kind.to_string(), "spot_interrupted");
    }

    #[test]
    fn rebalance_recommendation_is_event_only() {
        let m = parse(REBALANCE.as_bytes()).expect("parses");
        assert_eq!(m.kind, Kind::RebalanceRecommendation);
        assert_eq!(m.instance_ids, ["i-0123456789abcdef0"]);
        assert!(!m.kind.deletes_node_claim());
    }

    #[test]
    fn health_scheduled_change_lists_each_instance_once() {
        let m = parse(HEALTH.as_bytes()).expect("parses");
        assert_eq!(m.kind, Kind::ScheduledChange);
        assert_eq!(m.instance_ids, ["i-0abcdef1234567890", "i-0fedcba0987654321"]);
        // Other Health categories and services are not acted on.
        let other = HEALTH.replace("scheduledChange", "issue");
        assert_eq!(parse(other.as_bytes()).expect("parses").kind, Kind::NoOp);
        let rds = HEALTH.replace(r#""service": "EC2""#, r#""service": "RDS""#);
        assert_eq!(parse(rds.as_bytes()).expect("parses").kind, Kind::NoOp);
        let none = HEALTH.replace("i-0", "db-0");
        assert!(matches!(parse(none.as_bytes()), Err(ParseError::NoInstance { .. })));
    }

    #[test]
    fn state_changes() {
        for (state, kind) in [
            ("stopping", Kind::InstanceStopped),
            ("stopped", Kind::InstanceStopped),
            ("shutting-down", Kind::InstanceTerminated),
            ("terminated", Kind::InstanceTerminated),
            ("running", Kind::NoOp),
            ("pending", Kind::NoOp),
        ] {
            let m = parse(state_change(state).as_bytes()).expect("parses");
            assert_eq!(m.kind, kind, "{state}");
            assert_eq!(m.state.as_deref(), Some(state));
            assert_eq!(m.instance_ids, ["i-abcd1111"], "{state}");
        }
        let no_state = state_change("x").replace(r#", "state": "x""#, "");
        assert!(matches!(parse(no_state.as_bytes()), Err(ParseError::Field("detail.state"))));
    }

    #[test]
    fn capacity_reservation_interruption() {
        let body = r#"{"version": "0", "id": "a", "source": "aws.ec2",
            "detail-type": "EC2 Capacity Reservation Instance Interruption Warning",
            "detail": {"capacity-reservation-id": "cr-0123456789abcdef0",
                       "instance-ids": ["i-0000000000000000a", "i-0000000000000000b"]}}"#;
        let m = parse(body.as_bytes()).expect("parses");
        assert_eq!(m.kind, Kind::CapacityReservationInterrupted);
        assert_eq!(m.capacity_reservation_id.as_deref(), Some("cr-0123456789abcdef0"));
        assert_eq!(m.instance_ids.len(), 2);
        assert_eq!(m.time, None);
    }

    #[test]
    fn unknown_events_are_no_ops() {
        for body in [
            r#"{"version": "0", "source": "aws.autoscaling", "detail-type": "EC2 Instance Launch Successful"}"#,
            r#"{"version": "0", "source": "aws.ec2", "detail-type": "EC2 Fleet Error"}"#,
            r#"{"version": "1", "source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning"}"#,
        ] {
            let m = parse(body.as_bytes()).expect("parses");
            assert_eq!(m.kind, Kind::NoOp, "{body}");
            assert!(m.instance_ids.is_empty());
        }
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(parse(b""), Err(ParseError::NotJson(_))));
        assert!(matches!(parse(b"\xff\x00"), Err(ParseError::NotJson(_))));
        assert!(matches!(parse(b"{\"version\": \"0\""), Err(ParseError::NotJson(_))));
        assert!(matches!(parse(b"[1, 2]"), Err(ParseError::NotAnObject)));
        assert!(matches!(parse(b"null"), Err(ParseError::NotAnObject)));
        assert!(matches!(parse(br#"{"source": "aws.ec2"}"#), Err(ParseError::Field("version"))));
        assert!(matches!(parse(br#"{"version": 0, "source": "aws.ec2"}"#), Err(ParseError::Field("version"))));
        assert!(matches!(parse(br#"{"version": "0", "source": "aws.ec2"}"#), Err(ParseError::Field("detail-type"))));
        // A known event without a usable instance id.
        let no_id = SPOT.replace("i-0b662ef9931388ba0\", \"instance-action", "\", \"instance-action");
        assert!(matches!(parse(no_id.as_bytes()), Err(ParseError::NoInstance { .. })));
        let numeric = SPOT.replace("\"i-0b662ef9931388ba0\", \"instance-action", "42, \"instance-action");
        assert!(matches!(parse(numeric.as_bytes()), Err(ParseError::NoInstance { .. })));
        let no_detail = r#"{"version": "0", "source": "aws.ec2", "detail-type": "EC2 Spot Instance Interruption Warning", "detail": "x"}"#;
        assert!(matches!(parse(no_detail.as_bytes()), Err(ParseError::NoInstance { .. })));
        let e = parse(b"[]").unwrap_err();
        assert_eq!(e.to_string(), "message is not a JSON object");
    }

    #[test]
    fn instance_id_shape() {
        assert!(is_instance_id("i-0b662ef9931388ba0"));
        assert!(is_instance_id("i-abcd1111"));
        for bad in ["", "i-", "i-abc/def", "x-123", "I-123", "i-0123456789abcdef0123456789abcdef0"] {
            assert!(!is_instance_id(bad), "{bad}");
        }
    }
}
