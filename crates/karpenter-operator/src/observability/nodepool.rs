//! `metrics.nodepool`: `karpenter_nodepools_cost_total`, every 10 s, from a cost tracker over the launched
//! NodeClaims (upstream's cluster cost).
//!
//! A NodeClaim counts once it carries the instance type, capacity type, zone and NodePool labels (it has
//! launched): it adds the price of that offering, read from its NodePool's instance types (0, with a warning, when
//! the offering is not among them), until it leaves the state. Prices are read again every hour, as upstream's
//! pricing controller does. A NodeClaim whose NodePool is missing, or whose NodePool's instance types cannot be
//! read, is not counted and adds one to `karpenter_nodepools_cost_tracker_errors_total{nodepool}`; it is tried
//! again on the next round (upstream retries the NodeClaim's reconcile, counting each failure). Only the
//! NodePools whose node class the provider supports have a cost series; it goes with the NodePool.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use karpenter_api::{NodeClaim, NodePool, labels};
use karpenter_requirements::instance_type::InstanceType;
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::tick;
use crate::context::ControllerContext;
use crate::metrics::Metrics;

/// The controller's name, as upstream's.
pub const CONTROLLER: &str = "metrics.nodepool";
/// How often the cost gauges are written (upstream's requeue).
pub const PERIOD: Duration = Duration::from_secs(10);
/// How often known offerings' prices are read again (upstream's pricing controller).
pub const PRICE_REFRESH: Duration = Duration::from_secs(3600);

/// The offering a NodeClaim launched on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OfferingKey {
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: String,
}

#[derive(Debug, Default)]
struct PoolCost {
    /// Offering → (NodeClaims on it, its price).
    offerings: BTreeMap<OfferingKey, (u32, f64)>,
}

impl PoolCost {
    fn total(&self) -> f64 {
        self.offerings.values().map(|(n, price)| f64::from(*n) * price).sum()
    }
}

/// The cost of each NodePool's launched NodeClaims.
#[derive(Debug, Default)]
pub struct CostTracker {
    pools: BTreeMap<String, PoolCost>,
    /// NodeClaim name → (NodePool, offering).
    claims: HashMap<String, (String, OfferingKey)>,
    prices_read: Option<DateTime<Utc>>,
}

impl CostTracker {
    /// The NodePool's cost (0 when it has no counted NodeClaim).
    pub fn pool_cost(&self, pool: &str) -> f64 {
        self.pools.get(pool).map_or(0.0, PoolCost::total)
    }

    /// Counts a NodeClaim on `offering` at `price`.
    pub fn add(&mut self, claim: &str, pool: &str, offering: OfferingKey, price: f64) {
        if self.claims.contains_key(claim) {
            return;
        }
        let entry =
            self.pools.entry(pool.to_string()).or_default().offerings.entry(offering.clone()).or_insert((0, price));
        entry.0 += 1;
        self.claims.insert(claim.to_string(), (pool.to_string(), offering));
    }

    /// Stops counting a NodeClaim.
    pub fn remove(&mut self, claim: &str) {
        let Some((pool, offering)) = self.claims.remove(claim) else { return };
        let Some(cost) = self.pools.get_mut(&pool) else { return };
        if let Some(entry) = cost.offerings.get_mut(&offering) {
            entry.0 = entry.0.saturating_sub(1);
            if entry.0 == 0 {
                cost.offerings.remove(&offering);
            }
        }
        if cost.offerings.is_empty() {
            self.pools.remove(&pool);
        }
    }

    /// Forgets a deleted NodePool and its NodeClaims.
    pub fn remove_pool(&mut self, pool: &str) {
        self.claims.retain(|_, (p, _)| p != pool);
        self.pools.remove(pool);
    }

    /// New prices for a NodePool's known offerings (those not among `types` keep theirs).
    pub fn update_prices(&mut self, pool: &str, types: &[InstanceType]) {
        let Some(cost) = self.pools.get_mut(pool) else { return };
        for (offering, (_, price)) in cost.offerings.iter_mut() {
            if let Some(p) = offering_price(types, offering) {
                *price = p;
            }
        }
    }
}

/// The price of an offering among instance types: the first offering of the type in that zone and capacity type.
pub fn offering_price(types: &[InstanceType], key: &OfferingKey) -> Option<f64> {
    let it = types.iter().find(|t| t.name == key.instance_type)?;
    it.offerings
        .iter()
        .find(|o| o.zone() == Some(key.zone.as_str()) && o.capacity_type() == Some(key.capacity_type.as_str()))
        .map(|o| o.price)
}

/// The offering a launched NodeClaim runs on, with its NodePool; `None` until it carries all four labels.
pub fn claim_offering(claim: &NodeClaim) -> Option<(String, OfferingKey)> {
    let l = claim.labels();
    Some((
        l.get(labels::NODE_POOL)?.clone(),
        OfferingKey {
            instance_type: l.get(labels::INSTANCE_TYPE)?.clone(),
            zone: l.get(labels::ZONE)?.clone(),
            capacity_type: l.get(labels::CAPACITY_TYPE)?.clone(),
        },
    ))
}

/// The controller (see the module docs).
#[derive(Debug)]
pub struct NodePoolMetrics {
    ctx: ControllerContext,
    tracker: Mutex<CostTracker>,
    /// NodePools with a cost series.
    series: Mutex<BTreeSet<String>>,
}

impl NodePoolMetrics {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone(), tracker: Mutex::default(), series: Mutex::default() }
    }

    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            self.reconcile().await;
            if !tick(PERIOD, &shutdown).await {
                return;
            }
        }
    }

    fn tracker(&self) -> std::sync::MutexGuard<'_, CostTracker> {
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One round: the tracker follows the state's NodeClaims and NodePools, then the gauges follow the tracker.
    pub async fn reconcile(&self) {
        let metrics: &Metrics = &self.ctx.metrics;
        let state = &self.ctx.state;
        let pools: BTreeMap<String, Arc<NodePool>> =
            state.list_shared::<NodePool>().into_iter().map(|p| (p.name_any(), p)).collect();
        let claims = state.list_shared::<NodeClaim>();
        let now = self.ctx.clock.now();

        // Gone NodeClaims and NodePools stop counting.
        {
            let names: BTreeSet<String> = claims.iter().map(|c| c.name_any()).collect();
            let mut tracker = self.tracker();
            let gone: Vec<String> = tracker.claims.keys().filter(|c| !names.contains(*c)).cloned().collect();
            for claim in gone {
                tracker.remove(&claim);
            }
            let gone_pools: Vec<String> = tracker.pools.keys().filter(|p| !pools.contains_key(*p)).cloned().collect();
            for pool in gone_pools {
                tracker.remove_pool(&pool);
            }
        }

        // New launched NodeClaims, priced from their NodePool's instance types (read once per pool per round).
        let refresh =
            self.tracker().prices_read.is_none_or(|at| now - at >= karpenter_api::time::chrono_duration(PRICE_REFRESH));
        let mut types: HashMap<String, Option<Arc<[InstanceType]>>> = HashMap::new();
        let new: Vec<(String, String, OfferingKey)> = {
            let tracker = self.tracker();
            claims
                .iter()
                .filter(|c| !tracker.claims.contains_key(&c.name_any()))
                .filter_map(|c| claim_offering(c).map(|(pool, key)| (c.name_any(), pool, key)))
                .collect()
        };
        for (claim, pool_name, key) in new {
            let Some(pool) = pools.get(&pool_name) else {
                tracing::warn!(nodeclaim = %claim, nodepool = %pool_name, "cost tracking: the NodeClaim's NodePool is not known");
                metrics.nodepools_cost_tracker_errors(&pool_name).inc();
                continue;
            };
            if !types.contains_key(&pool_name) {
                types.insert(pool_name.clone(), self.instance_types(pool).await);
            }
            let Some(Some(its)) = types.get(&pool_name) else {
                metrics.nodepools_cost_tracker_errors(&pool_name).inc();
                continue;
            };
            let price = offering_price(its, &key).unwrap_or_else(|| {
                tracing::warn!(nodeclaim = %claim, nodepool = %pool_name, instance_type = %key.instance_type, zone = %key.zone,
                    capacity_type = %key.capacity_type, "cost tracking: offering price unknown, counted as 0 until prices are read again");
                0.0
            });
            self.tracker().add(&claim, &pool_name, key, price);
        }

        if refresh {
            let tracked: Vec<String> = self.tracker().pools.keys().cloned().collect();
            for pool_name in tracked {
                let Some(pool) = pools.get(&pool_name) else { continue };
                if !types.contains_key(&pool_name) {
                    types.insert(pool_name.clone(), self.instance_types(pool).await);
                }
                if let Some(Some(its)) = types.get(&pool_name) {
                    self.tracker().update_prices(&pool_name, its);
                }
            }
            self.tracker().prices_read = Some(now);
        }

        // The gauges: one per managed NodePool.
        let supported = self.ctx.cloud.supported_node_classes();
        let managed: BTreeSet<String> = pools
            .iter()
            .filter(|(_, p)| supported.iter().any(|k| k.matches(&p.spec.template.spec.node_class_ref)))
            .map(|(name, _)| name.clone())
            .collect();
        let tracker = self.tracker();
        let mut series = self.series.lock().unwrap_or_else(|p| p.into_inner());
        for gone in series.difference(&managed) {
            metrics.remove("nodepools_cost_total", &[("nodepool", gone)]);
        }
        for pool in &managed {
            metrics.nodepools_cost_total(pool).set(tracker.pool_cost(pool));
        }
        *series = managed;
    }

    async fn instance_types(&self, pool: &NodePool) -> Option<Arc<[InstanceType]>> {
        match self.ctx.cloud.instance_types(pool).await {
            Ok(types) => Some(types),
            Err(e) => {
                tracing::warn!(nodepool = %pool.name_any(), error = %e, "cost tracking: reading instance types failed");
                None
            }
        }
    }
}
