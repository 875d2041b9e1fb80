//! Entry points for fuzz targets (`fuzz/fuzz_targets/`) and their corpus replay test. Not a stable API.

use crate::interruption::{self, Kind};

/// Parses arbitrary bytes as an interruption-queue message. Must never panic; checks the parser's invariants: a
/// message that deletes NodeClaims names at least one well-formed instance id, ids are unique, and anything
/// unparsable has a displayable error.
pub fn sqs_message(data: &[u8]) {
    match interruption::parse(data) {
        Ok(m) => {
            assert!(m.instance_ids.iter().all(|i| interruption::is_instance_id(i)), "malformed id in {m:?}");
            let mut sorted = m.instance_ids.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), m.instance_ids.len(), "duplicate ids in {m:?}");
            if m.kind != Kind::NoOp {
                assert!(!m.instance_ids.is_empty(), "{} without instances", m.kind);
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}
