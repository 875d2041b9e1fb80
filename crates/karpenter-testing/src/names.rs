//! Deterministic object names: `pod-1`, `pod-2`, `node-1`, … counted per kind and per thread, so each test
//! (libtest runs each on its own thread) sees the same names whatever runs beside it.

use std::cell::RefCell;
use std::collections::BTreeMap;

thread_local! {
    static COUNTERS: RefCell<BTreeMap<&'static str, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// The next name for `prefix` on this thread: `prefix-1`, `prefix-2`, …
pub fn next_name(prefix: &'static str) -> String {
    COUNTERS.with(|c| {
        let mut c = c.borrow_mut();
        let n = c.entry(prefix).or_insert(0);
        *n += 1;
        format!("{prefix}-{n}")
    })
}

/// Restarts every counter of this thread (for tests that run several scenarios in one thread).
pub fn reset_names() {
    COUNTERS.with(|c| c.borrow_mut().clear());
}

/// A stable fake UID for an object, derived from its kind, namespace and name.
pub fn uid_for(kind: &str, namespace: &str, name: &str) -> String {
    // FNV-1a, 64 bits, twice with different offsets: enough to look like a UID and stay unique in tests.
    fn fnv(seed: u64, s: &str) -> u64 {
        s.bytes().fold(seed, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    }
    let key = format!("{kind}/{namespace}/{name}");
    let a = fnv(0xcbf2_9ce4_8422_2325, &key);
    let b = fnv(0x8422_2325_cbf2_9ce4, &key);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_count_per_prefix_and_reset() {
        reset_names();
        assert_eq!(next_name("pod"), "pod-1");
        assert_eq!(next_name("pod"), "pod-2");
        assert_eq!(next_name("node"), "node-1");
        reset_names();
        assert_eq!(next_name("pod"), "pod-1");
    }

    #[test]
    fn uids_are_stable_and_distinct() {
        assert_eq!(uid_for("Pod", "default", "a"), uid_for("Pod", "default", "a"));
        assert_ne!(uid_for("Pod", "default", "a"), uid_for("Pod", "default", "b"));
        assert_eq!(uid_for("Pod", "default", "a").len(), 36);
    }
}
