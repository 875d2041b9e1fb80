//! The first index a predicate accepts, searched by several threads (`SchedulerOptions::parallelism`, from
//! `CPU_REQUESTS` as upstream's `ceil(CPU_REQUESTS / 1000)`).
//!
//! Upstream checks existing nodes, in-flight NodeClaims and NodePools for a pod on that many goroutines and keeps
//! the earliest that accepts. Here the existing-node scan does the same: the answer is always the *smallest*
//! accepted index, so a pass decides exactly what a single-threaded pass decides, whatever the thread count
//! (a property test below, and `parallel_existing_scan_decides_as_one_thread` in the scheduler's tests).
//!
//! Workers take interleaved indices (worker `w` checks `w`, `w + W`, `w + 2W`, ...) so all of them work near the
//! front of the range, where the first fit usually is, and each stops once its next index is past the best
//! found so far. Every index below the final answer was checked by its worker, so the answer is the smallest.
//! Threads are scoped (`std::thread::scope`): nothing outlives the call, no runtime is involved.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The smallest index of `range` that `accepts`. The first `min_parallel` indices are checked in order on the
/// calling thread; when none accepts and at least `min_parallel` indices remain, the rest is checked on up to
/// `parallelism` threads (below that a thread costs more than the scan it shares; one thread always scans in
/// order).
pub(crate) fn first_match(
    range: Range<usize>,
    parallelism: usize,
    min_parallel: usize,
    accepts: impl Fn(usize) -> bool + Sync,
) -> Option<usize> {
    let len = range.len();
    if parallelism <= 1 || len < min_parallel {
        return range.into_iter().find(|&i| accepts(i));
    }
    // The first `min_parallel` indices on the calling thread: a pod usually fits near the front, and starting
    // threads for every pod cost 10-40 times the whole pass (docs/benchmarks.md). Threads share only the long
    // tail that a pod which fits nowhere early has to search.
    let prefix_end = range.start + min_parallel;
    if let Some(found) = (range.start..prefix_end).find(|&i| accepts(i)) {
        return Some(found);
    }
    let range = prefix_end..range.end;
    let workers = parallelism.min(range.len());
    if workers <= 1 || range.len() < min_parallel {
        return range.into_iter().find(|&i| accepts(i));
    }
    let best = AtomicUsize::new(usize::MAX);
    let stripe = |w: usize| {
        let mut i = range.start + w;
        while i < range.end && i < best.load(Ordering::Relaxed) {
            if accepts(i) {
                best.fetch_min(i, Ordering::Relaxed);
                return;
            }
            i += workers;
        }
    };
    std::thread::scope(|scope| {
        for w in 1..workers {
            let stripe = &stripe;
            scope.spawn(move || stripe(w));
        }
        stripe(0);
    });
    Some(best.into_inner()).filter(|&i| i != usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::first_match;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_first_accepted_index_whatever_the_thread_count(
            accepted in proptest::collection::vec(any::<bool>(), 0..200),
            start in 0usize..20,
            parallelism in 1usize..6,
            min_parallel in 0usize..40,
        ) {
            let start = start.min(accepted.len());
            let expected = (start..accepted.len()).find(|&i| accepted[i]);
            let found = first_match(start..accepted.len(), parallelism, min_parallel, |i| accepted[i]);
            prop_assert_eq!(found, expected);
        }
    }

    #[test]
    fn small_ranges_stay_on_the_calling_thread() {
        let caller = std::thread::current().id();
        let found = first_match(0..10, 4, 11, |i| {
            assert_eq!(std::thread::current().id(), caller);
            i == 7
        });
        assert_eq!(found, Some(7));
    }

    #[test]
    fn a_match_in_the_first_stretch_is_found_on_the_calling_thread() {
        let caller = std::thread::current().id();
        let found = first_match(0..4000, 4, 256, |i| {
            assert_eq!(std::thread::current().id(), caller);
            i == 200
        });
        assert_eq!(found, Some(200));
    }

    #[test]
    fn several_threads_share_a_long_range() {
        let threads = std::sync::Mutex::new(std::collections::HashSet::new());
        let found = first_match(0..4000, 4, 0, |i| {
            threads.lock().unwrap().insert(std::thread::current().id());
            // Slow enough that every worker gets to run before the answer is found.
            std::thread::sleep(std::time::Duration::from_micros(50));
            i == 3999
        });
        assert_eq!(found, Some(3999));
        assert_eq!(threads.lock().unwrap().len(), 4);
    }
}
