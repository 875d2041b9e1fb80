//! A small time-to-live cache on an injected [`Clock`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use karpenter_cloudprovider::Clock;

/// Entries expire `ttl` after they were inserted (reading does not extend them). Thread-safe; clones share
/// nothing (each is its own cache).
pub struct TtlCache<K, V> {
    clock: Arc<dyn Clock>,
    ttl: Duration,
    entries: Mutex<BTreeMap<K, (DateTime<Utc>, V)>>,
}

impl<K, V> fmt::Debug for TtlCache<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = self.entries.lock().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("TtlCache").field("ttl", &self.ttl).field("entries", &len).finish()
    }
}

impl<K: Ord + Clone, V: Clone> TtlCache<K, V> {
    /// An empty cache whose entries live `ttl`.
    pub fn new(clock: Arc<dyn Clock>, ttl: Duration) -> Self {
        Self { clock, ttl, entries: Mutex::new(BTreeMap::new()) }
    }

    /// The time-to-live of new entries.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn expiry(&self, ttl: Duration) -> DateTime<Utc> {
        let now = self.clock.now();
        chrono::Duration::from_std(ttl).ok().and_then(|d| now.checked_add_signed(d)).unwrap_or(DateTime::<Utc>::MAX_UTC)
    }

    /// The live value under `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        let now = self.clock.now();
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.get(key).filter(|(expiry, _)| *expiry > now).map(|(_, v)| v.clone())
    }

    /// Stores `value` under `key` for the cache's ttl.
    pub fn insert(&self, key: K, value: V) {
        self.insert_with_ttl(key, value, self.ttl);
    }

    /// Stores `value` under `key` for `ttl`.
    pub fn insert_with_ttl(&self, key: K, value: V, ttl: Duration) {
        let expiry = self.expiry(ttl);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.clock.now();
        entries.retain(|_, (e, _)| *e > now);
        entries.insert(key, (expiry, value));
    }

    /// Drops `key`; returns whether a live entry was there.
    pub fn remove(&self, key: &K) -> bool {
        let now = self.clock.now();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.remove(key).is_some_and(|(e, _)| e > now)
    }

    /// The live entries, in key order.
    pub fn entries(&self) -> Vec<(K, V)> {
        let now = self.clock.now();
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.iter().filter(|(_, (e, _))| *e > now).map(|(k, (_, v))| (k.clone(), v.clone())).collect()
    }

    /// Drops every entry.
    pub fn clear(&self) {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

#[cfg(test)]
mod tests {
    use karpenter_testing::FakeClock;

    use super::*;

    #[test]
    fn entries_expire_after_their_ttl() {
        let clock = FakeClock::default();
        let cache = TtlCache::new(Arc::new(clock.clone()), Duration::from_secs(60));
        cache.insert("a", 1);
        cache.insert_with_ttl("b", 2, Duration::from_secs(600));
        clock.step_secs(59);
        assert_eq!(cache.get(&"a"), Some(1));
        clock.step_secs(1);
        assert_eq!(cache.get(&"a"), None, "expired exactly at the ttl");
        assert_eq!(cache.entries(), vec![("b", 2)]);
        assert!(cache.remove(&"b"));
        assert!(!cache.remove(&"b"));
    }
}
