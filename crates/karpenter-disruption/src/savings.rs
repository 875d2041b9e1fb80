//! The minimum saving a consolidation move must make before it is worth its disruption (not upstream Karpenter).
//!
//! Upstream consolidates whenever a move is strictly cheaper, so a replacement that saves a cent an hour moves
//! every pod of the node. Here a threshold ([`MinSavings`]: a percentage of the candidates' price or an amount
//! per hour) may be set per NodePool (annotation `karpenter-rs.io/consolidation-min-savings`) and cluster-wide
//! (setting `CONSOLIDATION_MIN_SAVINGS`); for each pool the stricter of the two applies.
//!
//! Which moves it governs: every move that launches a replacement (single- and multi-node) and every
//! multi-node move. Deletes of single nodes (single-node consolidation's deletes and Emptiness) are never held:
//! a delete saves the whole price of the node it removes, at or above any percentage, and keeping a node that
//! nothing needs for a fixed amount would only cost more. A multi-node delete also saves 100 % of its candidates'
//! price, so a percentage never holds it; an absolute amount applies to it as to any governed move.
//!
//! A move across pools: each pool's share of the move's saving is the saving times the pool's share of the
//! candidates' price, and each pool's threshold applies to its share (a percentage of that pool's candidates'
//! price, or its amount per hour). A percentage therefore asks the same of every pool; amounts add up.

use std::collections::BTreeMap;

use karpenter_api::NodePool;
pub use karpenter_api::labels::consolidation_min_savings::MinSavings;

use crate::command::Reason;
// ThresholdSource is part of the Reason a held move reports, so it lives with it; kept at this path too.
pub use crate::command::ThresholdSource;

/// The thresholds of one pass: the setting's, and each pool's annotation (parsed once per pass).
#[derive(Debug, Clone, Default)]
pub struct Thresholds {
    cluster: Option<MinSavings>,
    /// Pools with the annotation: its value, or why it does not parse.
    pools: BTreeMap<String, Result<MinSavings, String>>,
}

impl Thresholds {
    /// The thresholds of `pools` with `cluster` (the setting) as every pool's floor.
    pub fn new<'p>(cluster: Option<MinSavings>, pools: impl IntoIterator<Item = &'p NodePool>) -> Self {
        let pools = pools
            .into_iter()
            .filter_map(|p| {
                let name = p.metadata.name.clone().unwrap_or_default();
                match karpenter_api::labels::consolidation_min_savings::of(p) {
                    Ok(None) => None,
                    Ok(Some(v)) => Some((name, Ok(v))),
                    Err(e) => Some((name, Err(e.to_string()))),
                }
            })
            .collect();
        Thresholds { cluster, pools }
    }

    /// Thresholds from values directly (tests, embedders without NodePool objects).
    pub fn from_values(
        cluster: Option<MinSavings>,
        pools: impl IntoIterator<Item = (String, Result<MinSavings, String>)>,
    ) -> Self {
        Thresholds { cluster, pools: pools.into_iter().collect() }
    }

    /// Whether no threshold is set anywhere (the check then never runs: upstream's behaviour).
    pub fn is_empty(&self) -> bool {
        self.cluster.is_none() && self.pools.is_empty()
    }

    /// Whether a move of candidates `(pool, hourly price)` saving `savings` per hour pays for itself: `Ok`, or
    /// the first pool (by name) whose threshold its share falls short of ([`Reason::SavingsBelowThreshold`]), or
    /// whose annotation does not parse ([`Reason::MinSavingsInvalid`]).
    pub fn check<'c>(&self, candidates: impl IntoIterator<Item = (&'c str, f64)>, savings: f64) -> Result<(), Reason> {
        if self.is_empty() {
            return Ok(());
        }
        let mut by_pool: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
        for (pool, price) in candidates {
            let e = by_pool.entry(pool).or_default();
            e.0 += price;
            e.1 += 1;
        }
        let total: f64 = by_pool.values().map(|(p, _)| p).sum();
        let count: usize = by_pool.values().map(|(_, n)| n).sum();
        for (pool, (price, n)) in by_pool {
            let own = match self.pools.get(pool) {
                Some(Err(detail)) => {
                    return Err(Reason::MinSavingsInvalid { node_pool: pool.to_owned(), detail: detail.clone() });
                }
                Some(Ok(v)) => Some((*v, ThresholdSource::NodePool)),
                None => None,
            };
            let cluster = self.cluster.map(|v| (v, ThresholdSource::Setting));
            // The stricter: the one asking more of this pool's share (the pool's own on a tie).
            let Some((threshold, set_by)) = [own, cluster]
                .into_iter()
                .flatten()
                .reduce(|a, b| if b.0.required(price) > a.0.required(price) { b } else { a })
            else {
                continue;
            };
            // Unknown prices (0) share the saving by node count.
            let share = if total > 0.0 { price / total } else { n as f64 / count.max(1) as f64 };
            let pool_savings = savings * share;
            let required = threshold.required(price);
            if pool_savings < required {
                let percent = if price > 0.0 { pool_savings / price * 100.0 } else { 0.0 };
                return Err(Reason::SavingsBelowThreshold {
                    node_pool: pool.to_owned(),
                    savings_per_hour: pool_savings,
                    percent,
                    threshold: threshold.to_string(),
                    required_per_hour: required,
                    set_by,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn pct(p: f64) -> MinSavings {
        MinSavings::Percent(p)
    }

    #[test]
    fn no_threshold_lets_everything_through() {
        let t = Thresholds::default();
        assert_eq!(t.check([("a", 1.0)], 0.0001), Ok(()));
    }

    #[test]
    fn the_verdict_names_the_saving_the_threshold_and_where_it_comes_from() {
        let t = Thresholds::from_values(None, [("default".to_owned(), Ok(pct(5.0)))]);
        let r = t.check([("default", 0.6667)], 0.012).unwrap_err();
        assert_eq!(r.code(), "SavingsBelowThreshold");
        assert_eq!(
            r.to_string(),
            "saves $0.0120/h (1.8%), NodePool default requires 5% (karpenter-rs.io/consolidation-min-savings)"
        );
        assert_eq!(t.check([("default", 0.6667)], 0.04), Ok(()), "6% passes 5%");
        assert_eq!(t.check([("other", 0.6667)], 0.0001), Ok(()), "a pool without a threshold");

        let t = Thresholds::from_values(Some(MinSavings::PerHour(0.05)), []);
        let r = t.check([("default", 1.0)], 0.04).unwrap_err();
        assert_eq!(
            r.to_string(),
            "saves $0.0400/h (4.0%), CONSOLIDATION_MIN_SAVINGS requires $0.05/h (NodePool default)"
        );
        assert_eq!(t.check([("default", 1.0)], 0.05), Ok(()), "exactly the amount is enough");
    }

    #[test]
    fn the_stricter_of_pool_and_setting_applies() {
        // 10% of $1/h is $0.10/h, stricter than $0.05/h; of $0.20/h it is $0.02/h, and the amount is stricter.
        let t = Thresholds::from_values(Some(MinSavings::PerHour(0.05)), [("p".to_owned(), Ok(pct(10.0)))]);
        let r = t.check([("p", 1.0)], 0.08).unwrap_err();
        assert!(matches!(r, Reason::SavingsBelowThreshold { set_by: ThresholdSource::NodePool, .. }), "{r:?}");
        let r = t.check([("p", 0.2)], 0.04).unwrap_err();
        assert!(matches!(r, Reason::SavingsBelowThreshold { set_by: ThresholdSource::Setting, .. }), "{r:?}");
        assert_eq!(t.check([("p", 0.2)], 0.05), Ok(()));
    }

    #[test]
    fn across_pools_each_threshold_applies_to_its_share() {
        // $1/h from pool a, $3/h from pool b, $0.40/h saved: a's share is $0.10/h (10%), b's $0.30/h (10%).
        let t = Thresholds::from_values(None, [("a".to_owned(), Ok(MinSavings::PerHour(0.2)))]);
        let r = t.check([("a", 1.0), ("b", 3.0)], 0.4).unwrap_err();
        match r {
            Reason::SavingsBelowThreshold { node_pool, savings_per_hour, percent, .. } => {
                assert_eq!(node_pool, "a");
                assert!((savings_per_hour - 0.1).abs() < 1e-9 && (percent - 10.0).abs() < 1e-9);
            }
            other => panic!("{other:?}"),
        }
        let t = Thresholds::from_values(None, [("b".to_owned(), Ok(MinSavings::PerHour(0.2)))]);
        assert_eq!(t.check([("a", 1.0), ("b", 3.0)], 0.4), Ok(()), "b's share of $0.30/h is enough");
    }

    #[test]
    fn a_bad_annotation_holds_the_pools_moves() {
        let t = Thresholds::from_values(None, [("p".to_owned(), Err("\"5\" is not a minimum saving".to_owned()))]);
        let r = t.check([("p", 1.0)], 1.0).unwrap_err();
        assert_eq!(r.code(), "MinSavingsInvalid");
        assert!(r.to_string().contains("karpenter-rs.io/consolidation-min-savings"), "{r}");
    }

    proptest! {
        /// A move passes the stricter of two thresholds exactly when it passes each alone.
        #[test]
        fn stricter_is_both(price in 0.01f64..10.0, frac in 0.0f64..1.0, p in 0.0f64..100.0, a in 0.0f64..2.0) {
            let savings = price * frac;
            let pool = || [("x".to_owned(), Ok(pct(p)))];
            let both = Thresholds::from_values(Some(MinSavings::PerHour(a)), pool()).check([("x", price)], savings);
            let own = Thresholds::from_values(None, pool()).check([("x", price)], savings);
            let setting = Thresholds::from_values(Some(MinSavings::PerHour(a)), []).check([("x", price)], savings);
            prop_assert_eq!(both.is_ok(), own.is_ok() && setting.is_ok());
        }

        /// Raising a percentage never lets through a move a lower one held; a percentage of 0 holds nothing.
        #[test]
        fn thresholds_are_monotonic(price in 0.01f64..10.0, frac in 0.0f64..1.0, lo in 0.0f64..100.0, d in 0.0f64..50.0) {
            let savings = price * frac;
            let check = |p: f64| Thresholds::from_values(Some(pct(p)), []).check([("x", price)], savings).is_ok();
            prop_assert!(check(0.0));
            if !check(lo) {
                prop_assert!(!check((lo + d).min(100.0)));
            }
        }

        /// A percentage asks the same of every pool of a move, however the price is split between them.
        #[test]
        fn a_percentage_does_not_depend_on_the_split(a in 0.01f64..5.0, b in 0.01f64..5.0, frac in 0.0f64..1.0, p in 0.0f64..100.0) {
            let savings = (a + b) * frac;
            let t = Thresholds::from_values(Some(pct(p)), []);
            let split = t.check([("x", a), ("y", b)], savings).is_ok();
            let whole = t.check([("x", a + b)], savings).is_ok();
            // Floating-point rounding of the shares may tip a move exactly at the threshold.
            if (frac * 100.0 - p).abs() > 1e-6 {
                prop_assert_eq!(split, whole);
            }
        }
    }
}
