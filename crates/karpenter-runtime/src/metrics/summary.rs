//! Prometheus summaries, which `prometheus-client` does not have: upstream serves two latency families
//! (`karpenter_nodes_termination_duration_seconds`, `karpenter_pods_startup_duration_seconds`) as summaries and its
//! performance dashboard reads their `quantile` series, so a histogram in their place leaves those panels empty.
//!
//! Like client_golang's default summary, the quantiles (0, 0.5, 0.9, 0.99 and 1, upstream's objectives) cover a
//! sliding window of the last [`MAX_AGE`] split into [`AGE_BUCKETS`] slots that expire one at a time, while `_sum`
//! and `_count` cover every observation since start. Memory stays bounded: each slot keeps at most
//! [`SLOT_CAPACITY`] samples per level of a compactor hierarchy (a level per doubling of
//! its observations; see [`Slot`]), so a 100 000-observation window holds about a thousand samples and its
//! quantiles stay within about 1% of rank; the minimum and maximum are kept exactly.
//!
//! The window runs on the injected [`Clock`] (wall time), so tests move it with a fake clock.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use karpenter_cloudprovider::time::Clock;

use super::Labels;

/// The quantiles served, upstream's `SummaryObjectives` (each with an allowed error of 0.01 there).
pub const QUANTILES: [f64; 5] = [0.0, 0.5, 0.9, 0.99, 1.0];
/// How far back the quantiles look (client_golang's default `MaxAge`).
pub const MAX_AGE: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// The slots the window is split into (client_golang's default `AgeBuckets`): the window moves in steps of
/// `MAX_AGE / AGE_BUCKETS`.
pub const AGE_BUCKETS: i64 = 5;
/// Samples one slot keeps before merging neighbours.
pub const SLOT_CAPACITY: usize = 128;

/// One slot of the window: observations of one `MAX_AGE / AGE_BUCKETS` interval, in a hierarchy of compactors:
/// `levels[i]` holds samples standing for `2^i` observations each. When a level fills up it is sorted and every
/// other sample moves up a level (starting at the first or the second one, alternately, so neither end is
/// favoured): a rank moves by at most one level's weight per compaction, and the slot holds at most
/// `SLOT_CAPACITY` samples per level (a level per doubling of the observations).
#[derive(Debug, Default)]
struct Slot {
    levels: Vec<Vec<f64>>,
    min: f64,
    max: f64,
    /// Which member of each pair the next compaction keeps.
    keep_second: bool,
}

impl Slot {
    fn observe(&mut self, value: f64) {
        if self.levels.is_empty() {
            self.min = value;
            self.max = value;
            self.levels.push(Vec::new());
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        self.levels[0].push(value);
        let mut level = 0;
        while self.levels[level].len() >= SLOT_CAPACITY {
            let mut full = std::mem::take(&mut self.levels[level]);
            full.sort_by(f64::total_cmp);
            let offset = usize::from(self.keep_second);
            self.keep_second = !self.keep_second;
            let promoted: Vec<f64> = full.iter().skip(offset).step_by(2).copied().collect();
            if self.levels.len() == level + 1 {
                self.levels.push(Vec::new());
            }
            self.levels[level + 1].extend(promoted);
            level += 1;
        }
    }

    /// (value, weight) of every sample held.
    fn samples(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        self.levels.iter().enumerate().flat_map(|(i, l)| l.iter().map(move |v| (*v, 1u64 << i)))
    }

    fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }
}

/// One series: the window's slots by slot number, plus the lifetime sum and count.
#[derive(Debug, Default)]
struct Series {
    slots: BTreeMap<i64, Slot>,
    sum: f64,
    count: u64,
}

fn slot_of(now: DateTime<Utc>) -> i64 {
    let width = (MAX_AGE / AGE_BUCKETS as i32).num_milliseconds();
    now.timestamp_millis().div_euclid(width)
}

impl Series {
    fn expire(&mut self, now: DateTime<Utc>) {
        let oldest_kept = slot_of(now) - (AGE_BUCKETS - 1);
        self.slots.retain(|slot, _| *slot >= oldest_kept);
    }

    /// The window's quantiles, `NaN` when it holds no observation (as client_golang reports them).
    fn quantiles(&self) -> [f64; QUANTILES.len()] {
        let mut samples: Vec<(f64, u64)> = self.slots.values().flat_map(Slot::samples).collect();
        if samples.is_empty() {
            return [f64::NAN; QUANTILES.len()];
        }
        samples.sort_by(|a, b| a.0.total_cmp(&b.0));
        let min = self.slots.values().filter(|s| !s.is_empty()).map(|s| s.min).fold(f64::INFINITY, f64::min);
        let max = self.slots.values().filter(|s| !s.is_empty()).map(|s| s.max).fold(f64::NEG_INFINITY, f64::max);
        let total: u64 = samples.iter().map(|s| s.1).sum();
        QUANTILES.map(|q| {
            if q <= 0.0 {
                return min;
            }
            if q >= 1.0 {
                return max;
            }
            // The smallest value whose cumulative weight reaches q of the total.
            let rank = (q * total as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (value, weight) in &samples {
                seen += weight;
                if seen >= rank {
                    return *value;
                }
            }
            max
        })
    }
}

#[derive(Debug)]
struct Family {
    series: Mutex<BTreeMap<Labels, Series>>,
    clock: Arc<dyn Clock>,
}

/// A summary family: series by label values. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct SummaryFamily(Arc<Family>);

impl SummaryFamily {
    /// An empty family whose sliding windows read `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self(Arc::new(Family { series: Mutex::default(), clock }))
    }

    /// The series with these labels (created on first use).
    pub fn get(&self, labels: Labels) -> Summary {
        Summary { family: self.0.clone(), labels }
    }

    /// Drops the series with these labels; whether it existed.
    pub fn remove(&self, labels: &Labels) -> bool {
        self.0.series.lock().unwrap_or_else(PoisonError::into_inner).remove(labels).is_some()
    }

    /// Drops every series.
    pub fn clear(&self) {
        self.0.series.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// Appends the family in OpenMetrics text: `# HELP`, `# TYPE … summary`, then per series one sample per
    /// quantile (label `quantile` after the series' labels), `_sum` and `_count`. Nothing but the descriptor when
    /// it has no series.
    pub fn encode(&self, out: &mut String, name: &str, help: &str) {
        let now = self.0.clock.now();
        let mut series = self.0.series.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(out, "# TYPE {name} summary");
        for (labels, s) in series.iter_mut() {
            s.expire(now);
            let base: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape_value(v))).collect();
            for (q, value) in QUANTILES.iter().zip(s.quantiles()) {
                let mut all = base.clone();
                all.push(format!("quantile=\"{}\"", number(*q)));
                let _ = writeln!(out, "{name}{{{}}} {}", all.join(","), number(value));
            }
            let braces = if base.is_empty() { String::new() } else { format!("{{{}}}", base.join(",")) };
            let _ = writeln!(out, "{name}_sum{braces} {}", number(s.sum));
            let _ = writeln!(out, "{name}_count{braces} {}", s.count);
        }
    }
}

/// One series of a [`SummaryFamily`].
#[derive(Debug, Clone)]
pub struct Summary {
    family: Arc<Family>,
    labels: Labels,
}

impl Summary {
    /// Records one observation: into the window's current slot and the lifetime sum and count.
    pub fn observe(&self, value: f64) {
        let now = self.family.clock.now();
        let mut series = self.family.series.lock().unwrap_or_else(PoisonError::into_inner);
        let s = series.entry(self.labels.clone()).or_default();
        s.expire(now);
        s.slots.entry(slot_of(now)).or_default().observe(value);
        s.sum += value;
        s.count += 1;
    }
}

/// A float as OpenMetrics writes it (`1.0`, `NaN`, `+Inf`).
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v:?}")
    }
}

fn escape_value(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock the test sets by hand.
    #[derive(Debug)]
    struct StepClock(Mutex<DateTime<Utc>>);
    impl Clock for StepClock {
        fn now(&self) -> DateTime<Utc> {
            *self.0.lock().unwrap()
        }
    }

    fn lines(family: &SummaryFamily) -> String {
        let mut out = String::new();
        family.encode(&mut out, "x_seconds", "Help.");
        out
    }

    #[test]
    fn quantiles_over_the_window_and_lifetime_sum_and_count() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().to_utc();
        let clock = Arc::new(StepClock(Mutex::new(start)));
        let family = SummaryFamily::new(clock.clone());
        let series = family.get(vec![("nodepool".into(), "default".into())]);
        for v in 1..=100 {
            series.observe(f64::from(v));
        }
        let text = lines(&family);
        assert!(text.contains("# TYPE x_seconds summary"), "{text}");
        assert!(text.contains("x_seconds{nodepool=\"default\",quantile=\"0.0\"} 1.0"), "{text}");
        assert!(text.contains("x_seconds{nodepool=\"default\",quantile=\"0.5\"} 50.0"), "{text}");
        assert!(text.contains("x_seconds{nodepool=\"default\",quantile=\"0.9\"} 90.0"), "{text}");
        assert!(text.contains("x_seconds{nodepool=\"default\",quantile=\"0.99\"} 99.0"), "{text}");
        assert!(text.contains("x_seconds{nodepool=\"default\",quantile=\"1.0\"} 100.0"), "{text}");
        assert!(text.contains("x_seconds_sum{nodepool=\"default\"} 5050.0"), "{text}");
        assert!(text.contains("x_seconds_count{nodepool=\"default\"} 100"), "{text}");

        // Past the window: the quantiles forget, sum and count do not.
        *clock.0.lock().unwrap() = start + MAX_AGE + chrono::TimeDelta::seconds(1);
        let text = lines(&family);
        assert!(text.contains("x_seconds{nodepool=\"default\",quantile=\"0.5\"} NaN"), "{text}");
        assert!(text.contains("x_seconds_count{nodepool=\"default\"} 100"), "{text}");
        series.observe(7.0);
        assert!(lines(&family).contains("x_seconds{nodepool=\"default\",quantile=\"0.99\"} 7.0"));

        assert!(family.remove(&vec![("nodepool".into(), "default".into())]));
        assert!(!lines(&family).contains("x_seconds_count"));
    }

    #[test]
    fn memory_is_bounded_and_quantiles_stay_close() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().to_utc();
        let family = SummaryFamily::new(Arc::new(StepClock(Mutex::new(start))));
        let series = family.get(Vec::new());
        // 100 000 observations of 0..10 000 in a scrambled order.
        for i in 0..100_000u64 {
            series.observe(((i * 7919) % 10_000) as f64);
        }
        let guard = family.0.series.lock().unwrap();
        let s = &guard[&Vec::new()];
        let held: usize = s.slots.values().flat_map(|slot| &slot.levels).map(Vec::len).sum();
        assert!(held < 10 * SLOT_CAPACITY, "{held} samples held for 100 000 observations");
        let [min, median, p90, p99, max] = s.quantiles();
        assert_eq!((min, max), (0.0, 9_999.0));
        for (got, want) in [(median, 5_000.0), (p90, 9_000.0), (p99, 9_900.0)] {
            assert!((got - want).abs() <= 100.0, "{got} vs {want} (1% of the range)");
        }
        assert_eq!(s.count, 100_000);
    }
}
