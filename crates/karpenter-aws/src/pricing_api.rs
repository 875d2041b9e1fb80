//! Price refresh from AWS: on-demand prices from the Pricing API, spot prices from
//! EC2 `DescribeSpotPriceHistory`, both over the narrow [`PricingApi`] trait, every [`REFRESH_INTERVAL`] (12 h)
//! and at start.
//!
//! [`PricingProvider`] holds the current prices. It starts from what the operator supplied (a price file, see
//! [`crate::pricing::PriceFile`]) or from nothing; a failed or empty refresh keeps the previous prices. Until the
//! first spot refresh succeeds, the spot price of an instance type in any zone is its on-demand price (upstream's
//! "default price"); after it, a zone without a spot price has no spot offering. In an isolated VPC, and in
//! GovCloud, the Pricing API is never called (spot prices still come from EC2), so the operator's price file is
//! the only on-demand source there.
//!
//! No price source: while no on-demand price is known (an isolated VPC without a price file, or a Pricing API
//! that has failed since start), [`PricingProvider::price_source`] answers [`PriceSource::Estimate`] and every
//! offering, spot included, is priced by the documented [`crate::pricing::estimate`] (spot prices alone cannot
//! order on-demand offerings, and mixing real spot prices with estimated on-demand ones would compare unlike
//! numbers). [`PricingProvider::refresh`] then logs one warning (the first time only), and
//! [`PricingProvider::uses_estimate`] tells the node class controller to publish a Warning event with
//! [`PRICES_ESTIMATED_MESSAGE`] on each EC2NodeClass.
//!
//! [`fetch_price_file`] is what `karpenter-controller prices` runs: the same queries, written as a
//! [`PriceFile`] that the controller loads with `PRICE_FILE`.
//!
//! The Pricing API answers with price-list JSON documents; [`parse_price_list_item`] turns one into an
//! [`OnDemandPrice`], so the SDK adapter only pages.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use karpenter_cloudprovider::Clock;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::api_error::AwsApiError;
use crate::pricing::{PriceFile, PriceSource, PriceTable};

/// How often prices are refreshed.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(12 * 60 * 60);

/// Event reason on each EC2NodeClass while offerings are priced by the estimate.
pub const PRICES_ESTIMATED_REASON: &str = "PricesEstimated";

/// What the no-price-source warning and event say.
pub const PRICES_ESTIMATED_MESSAGE: &str = "No price source: no on-demand price is known (isolated VPC without \
     PRICE_FILE, or the Pricing API has not answered yet), so offerings are ordered by the documented estimate \
     (0.03/vCPU + 0.0065/GiB memory + 1.0/GPU + 0.35/Neuron device + 0.0001/GB local storage, USD per hour), not by \
     real prices. Set PRICE_FILE to a file written by `karpenter-controller prices`.";

/// The spot product descriptions asked for.
pub const SPOT_PRODUCT_DESCRIPTIONS: [&str; 2] = ["Linux/UNIX", "Linux/UNIX (Amazon VPC)"];

/// One instance type's on-demand price.
#[derive(Clone, Debug, PartialEq)]
pub struct OnDemandPrice {
    /// Instance type.
    pub instance_type: String,
    /// Price per hour (USD; CNY in China).
    pub price: f64,
}

/// One spot price history entry.
#[derive(Clone, Debug, PartialEq)]
pub struct SpotPrice {
    /// Instance type.
    pub instance_type: String,
    /// Availability zone.
    pub zone: String,
    /// Price per hour.
    pub price: f64,
    /// When the price took effect.
    pub timestamp: Option<DateTime<Utc>>,
}

/// The price calls: the Pricing API's `GetProducts` and EC2's `DescribeSpotPriceHistory`.
#[async_trait]
pub trait PricingApi: Send + Sync + fmt::Debug {
    /// Every on-demand Linux price of `region` (all pages of the [`on_demand_filters`] queries).
    async fn on_demand_prices(&self, region: &str) -> Result<Vec<OnDemandPrice>, AwsApiError>;
    /// The spot price history from `start_time` on for [`SPOT_PRODUCT_DESCRIPTIONS`] (all pages).
    async fn spot_prices(&self, start_time: DateTime<Utc>) -> Result<Vec<SpotPrice>, AwsApiError>;
}

/// The region whose Pricing API endpoint serves `region`.
pub fn pricing_region(region: &str) -> &'static str {
    if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("eu-") {
        "eu-central-1"
    } else {
        "us-east-1"
    }
}

/// The currency of price lists for `region`.
pub fn currency(region: &str) -> &'static str {
    if region.starts_with("cn-") { "CNY" } else { "USD" }
}

/// Whether the Pricing API is available for `region` (not in GovCloud).
pub fn pricing_api_available(region: &str) -> bool {
    !region.starts_with("us-gov-")
}

/// The `GetProducts` queries (service code `AmazonEC2`, `TERM_MATCH` filters) for on-demand Linux prices of
/// `region`: shared-tenancy instances and dedicated bare-metal ones.
pub fn on_demand_filters(region: &str) -> Vec<Vec<(&'static str, String)>> {
    let common = |tenancy: &str, family: &str| {
        vec![
            ("regionCode", region.to_owned()),
            ("serviceCode", "AmazonEC2".to_owned()),
            ("preInstalledSw", "NA".to_owned()),
            ("operatingSystem", "Linux".to_owned()),
            ("capacitystatus", "Used".to_owned()),
            ("marketoption", "OnDemand".to_owned()),
            ("tenancy", tenancy.to_owned()),
            ("productFamily", family.to_owned()),
        ]
    };
    vec![common("Shared", "Compute Instance"), common("Dedicated", "Compute Instance (bare metal)")]
}

/// The on-demand price in one `GetProducts` price-list document, in `currency`; `None` when the document has no
/// instance type or no positive price.
pub fn parse_price_list_item(json: &str, currency: &str) -> Option<OnDemandPrice> {
    let v: Value = serde_json::from_str(json).ok()?;
    let instance_type = v.pointer("/product/attributes/instanceType")?.as_str()?.to_owned();
    let terms = v.pointer("/terms/OnDemand")?.as_object()?;
    let price = terms
        .values()
        .filter_map(|term| term.get("priceDimensions")?.as_object())
        .flat_map(|dims| dims.values())
        .filter_map(|dim| dim.get("pricePerUnit")?.get(currency)?.as_str()?.parse::<f64>().ok())
        .find(|p| p.is_finite() && *p > 0.0)?;
    Some(OnDemandPrice { instance_type, price })
}

/// What a refresh did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefreshReport {
    /// On-demand prices now known (after an on-demand update; `None` when skipped).
    pub on_demand: Option<usize>,
    /// Spot (type, zone) prices now known (after a spot update).
    pub spot: Option<usize>,
    /// Errors, as text (the previous prices were kept).
    pub errors: Vec<String>,
    /// This refresh logged the no-price-source warning (only the first refresh that finds no on-demand price
    /// does; it is logged again only after prices were known and lost, which a refresh never does).
    pub warned_estimate: bool,
}

/// The latest spot price of a (type, zone): when it took effect and the price.
type Latest = (Option<DateTime<Utc>>, f64);

/// The lowest positive finite price per instance type (several products for one type, shared and bare metal,
/// keep the lowest; the result does not depend on the order).
fn lowest_on_demand(prices: Vec<OnDemandPrice>) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for p in prices.into_iter().filter(|p| p.price.is_finite() && p.price > 0.0) {
        let e = out.entry(p.instance_type).or_insert(p.price);
        *e = e.min(p.price);
    }
    out
}

/// The latest price per (type, zone) of a spot price history; ties on time are broken by the lower price so the
/// result does not depend on the order.
fn latest_spot(history: Vec<SpotPrice>) -> BTreeMap<(String, String), f64> {
    let mut latest: BTreeMap<(String, String), Latest> = BTreeMap::new();
    for p in history.into_iter().filter(|p| p.price.is_finite() && p.price >= 0.0) {
        let key = (p.instance_type, p.zone);
        let newer = match latest.get(&key) {
            None => true,
            Some((t, price)) => p.timestamp > *t || (p.timestamp == *t && p.price < *price),
        };
        if newer {
            latest.insert(key, (p.timestamp, p.price));
        }
    }
    latest.into_iter().map(|(k, (_, price))| (k, price)).collect()
}

/// Why [`fetch_price_file`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum FetchPricesError {
    /// A price call failed.
    #[error(transparent)]
    Api(#[from] AwsApiError),
    /// The region has no Pricing API (GovCloud).
    #[error("the Pricing API does not serve {0} (GovCloud); write its price file by hand")]
    Unavailable(String),
    /// The Pricing API answered, but with no price for the region (a misspelt region, or a region the price list
    /// does not have yet).
    #[error("the Pricing API has no on-demand Linux prices for region {0}; is the region name right?")]
    NoPrices(String),
}

/// The price file of `region` from the APIs, as `karpenter-controller prices` writes it: the on-demand Linux prices
/// of the Pricing API (the same queries and de-duplication as the controller's refresh) and, with `spot_since`,
/// the latest spot price per (type, zone) since then. Fails rather than return a file without on-demand prices.
pub async fn fetch_price_file(
    api: &dyn PricingApi,
    region: &str,
    spot_since: Option<DateTime<Utc>>,
) -> Result<PriceFile, FetchPricesError> {
    if !pricing_api_available(region) {
        return Err(FetchPricesError::Unavailable(region.to_owned()));
    }
    let on_demand = lowest_on_demand(api.on_demand_prices(region).await?);
    if on_demand.is_empty() {
        return Err(FetchPricesError::NoPrices(region.to_owned()));
    }
    let mut spot: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    if let Some(since) = spot_since {
        for ((it, zone), price) in latest_spot(api.spot_prices(since).await?) {
            spot.entry(it).or_default().insert(zone, price);
        }
    }
    let mut file = PriceFile::default();
    file.set_region(region, PriceTable { on_demand, spot });
    Ok(file)
}

#[derive(Debug, Default)]
struct State {
    on_demand: BTreeMap<String, f64>,
    spot: BTreeMap<String, BTreeMap<String, f64>>,
    spot_updated: bool,
    version: u64,
    /// The no-price-source warning was logged (and prices have not become known since).
    estimate_warned: bool,
}

/// The current prices of one region, refreshed from AWS (see the module docs).
pub struct PricingProvider {
    api: Option<Arc<dyn PricingApi>>,
    region: String,
    isolated_vpc: bool,
    state: RwLock<State>,
}

impl fmt::Debug for PricingProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PricingProvider")
            .field("region", &self.region)
            .field("isolated_vpc", &self.isolated_vpc)
            .field("has_api", &self.api.is_some())
            .finish_non_exhaustive()
    }
}

impl PricingProvider {
    /// Prices for `region`, starting from `initial` (e.g. the region of an operator price file). Without `api`
    /// nothing is ever refreshed.
    pub fn new(region: &str, api: Option<Arc<dyn PricingApi>>, isolated_vpc: bool, initial: PriceTable) -> Self {
        let state = State {
            spot_updated: !initial.spot.is_empty(),
            on_demand: initial.on_demand,
            spot: initial.spot,
            version: 0,
            estimate_warned: false,
        };
        Self { api, region: region.to_owned(), isolated_vpc, state: RwLock::new(state) }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether on-demand prices come from the Pricing API (not isolated, not GovCloud, an API given).
    pub fn on_demand_api_enabled(&self) -> bool {
        self.api.is_some() && !self.isolated_vpc && pricing_api_available(&self.region)
    }

    /// Increases whenever the prices change (for caches keyed on prices).
    pub fn version(&self) -> u64 {
        self.read().version
    }

    /// Whether there is no price source: no on-demand price is known, so offerings are priced by
    /// [`crate::pricing::estimate`] (see the module docs).
    pub fn uses_estimate(&self) -> bool {
        self.read().on_demand.is_empty()
    }

    /// The on-demand price of an instance type.
    pub fn on_demand(&self, instance_type: &str) -> Option<f64> {
        self.read().on_demand.get(instance_type).copied()
    }

    /// The spot price of an instance type in a zone: the latest spot price, or before the first spot refresh the
    /// on-demand price.
    pub fn spot(&self, instance_type: &str, zone: &str) -> Option<f64> {
        let s = self.read();
        if s.spot_updated {
            s.spot.get(instance_type)?.get(zone).copied()
        } else {
            s.on_demand.get(instance_type).copied()
        }
    }

    /// The prices as a table for the offerings of `zones` (before the first spot refresh, every zone's spot price
    /// is the on-demand price).
    pub fn table(&self, zones: &[String]) -> PriceTable {
        let s = self.read();
        let spot = if s.spot_updated {
            s.spot.clone()
        } else {
            s.on_demand.iter().map(|(it, p)| (it.clone(), zones.iter().map(|z| (z.clone(), *p)).collect())).collect()
        };
        PriceTable { on_demand: s.on_demand.clone(), spot }
    }

    /// Where offering prices come from: a table, or the estimate when nothing is known.
    pub fn price_source(&self, zones: &[String]) -> PriceSource {
        if self.uses_estimate() { PriceSource::Estimate } else { PriceSource::Table(self.table(zones)) }
    }

    /// Refreshes on-demand prices from the Pricing API. Skipped (`Ok(None)`) in an isolated VPC, in GovCloud or
    /// without an API; an empty answer keeps the previous prices.
    pub async fn update_on_demand(&self) -> Result<Option<usize>, AwsApiError> {
        let Some(api) = self.api.as_ref().filter(|_| self.on_demand_api_enabled()) else { return Ok(None) };
        let fresh = lowest_on_demand(api.on_demand_prices(&self.region).await?);
        let mut s = self.write();
        if fresh.is_empty() {
            tracing::warn!(region = %self.region, "the pricing API returned no on-demand prices; keeping the previous ones");
            return Ok(Some(s.on_demand.len()));
        }
        if s.on_demand != fresh {
            s.on_demand = fresh;
            s.version += 1;
        }
        Ok(Some(s.on_demand.len()))
    }

    /// Refreshes spot prices from the spot price history since `now`: the latest price per (type, zone), merged
    /// into the previous ones. An empty answer keeps the previous prices.
    pub async fn update_spot(&self, now: DateTime<Utc>) -> Result<Option<usize>, AwsApiError> {
        let Some(api) = self.api.as_ref() else { return Ok(None) };
        let latest = latest_spot(api.spot_prices(now).await?);
        let mut s = self.write();
        if latest.is_empty() {
            tracing::warn!(region = %self.region, "no spot price history; keeping the previous spot prices");
            return Ok(Some(s.spot.values().map(BTreeMap::len).sum()));
        }
        let mut changed = !s.spot_updated;
        for ((it, zone), price) in latest {
            let old = s.spot.entry(it).or_default().insert(zone, price);
            changed |= old != Some(price);
        }
        s.spot_updated = true;
        if changed {
            s.version += 1;
        }
        Ok(Some(s.spot.values().map(BTreeMap::len).sum()))
    }

    /// Both updates; errors are logged and reported, the previous prices kept.
    pub async fn refresh(&self, now: DateTime<Utc>) -> RefreshReport {
        let mut report = RefreshReport::default();
        match self.update_on_demand().await {
            Ok(n) => report.on_demand = n,
            Err(e) => {
                tracing::warn!(error = %e, "updating on-demand prices failed; keeping the previous ones");
                report.errors.push(e.to_string());
            }
        }
        match self.update_spot(now).await {
            Ok(n) => report.spot = n,
            Err(e) => {
                tracing::warn!(error = %e, "updating spot prices failed; keeping the previous ones");
                report.errors.push(e.to_string());
            }
        }
        let estimated = self.uses_estimate();
        let mut s = self.write();
        if estimated && !s.estimate_warned {
            tracing::warn!(region = %self.region, isolated_vpc = self.isolated_vpc, "{PRICES_ESTIMATED_MESSAGE}");
            report.warned_estimate = true;
        } else if !estimated && s.estimate_warned {
            tracing::info!(region = %self.region, on_demand = s.on_demand.len(),
                "on-demand prices are known now; offerings are no longer priced by the estimate");
        }
        s.estimate_warned = estimated;
        report
    }

    /// Refreshes at once and then every [`REFRESH_INTERVAL`] until `shutdown` fires.
    pub async fn run(self: Arc<Self>, clock: Arc<dyn Clock>, shutdown: CancellationToken) {
        loop {
            self.refresh(clock.now()).await;
            if shutdown.run_until_cancelled(tokio::time::sleep(REFRESH_INTERVAL)).await.is_none() {
                return;
            }
        }
    }

    /// The instance types with a known on-demand price.
    pub fn instance_types(&self) -> BTreeSet<String> {
        self.read().on_demand.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakePricing;
    use chrono::TimeZone;

    fn od(it: &str, price: f64) -> OnDemandPrice {
        OnDemandPrice { instance_type: it.into(), price }
    }

    fn sp(it: &str, zone: &str, price: f64, minute: u32) -> SpotPrice {
        SpotPrice {
            instance_type: it.into(),
            zone: zone.into(),
            price,
            timestamp: Some(Utc.with_ymd_and_hms(2026, 3, 1, 12, minute, 0).unwrap()),
        }
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, 13, 0, 0).unwrap()
    }

    fn zones() -> Vec<String> {
        vec!["us-west-2a".into(), "us-west-2b".into()]
    }

    #[test]
    fn regions_and_filters() {
        assert_eq!(pricing_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(pricing_region("cn-north-1"), "cn-northwest-1");
        assert_eq!(pricing_region("eu-west-1"), "eu-central-1");
        assert_eq!(pricing_region("us-west-2"), "us-east-1");
        assert_eq!(currency("cn-north-1"), "CNY");
        assert_eq!(currency("us-west-2"), "USD");
        assert!(!pricing_api_available("us-gov-west-1"));
        let f = on_demand_filters("us-west-2");
        assert_eq!(f.len(), 2);
        assert!(f[0].contains(&("regionCode", "us-west-2".into())));
        assert!(f[0].contains(&("tenancy", "Shared".into())));
        assert!(f[1].contains(&("productFamily", "Compute Instance (bare metal)".into())));
    }

    #[test]
    fn parses_price_list_documents() {
        let doc = r#"{"product":{"productFamily":"Compute Instance","attributes":{"instanceType":"m5.large"}},
            "terms":{"OnDemand":{"A.JRTCKXETXF":{"priceDimensions":{"A.JRTCKXETXF.6YS6EN2CT7":
            {"unit":"Hrs","pricePerUnit":{"USD":"0.0960000000"}}}}}}}"#;
        assert_eq!(parse_price_list_item(doc, "USD"), Some(od("m5.large", 0.096)));
        assert_eq!(parse_price_list_item(doc, "CNY"), None);
        let zero = doc.replace("0.0960000000", "0.0000000000");
        assert_eq!(parse_price_list_item(&zero, "USD"), None);
        assert_eq!(parse_price_list_item("{", "USD"), None);
        assert_eq!(parse_price_list_item(r#"{"product":{}}"#, "USD"), None);
    }

    #[tokio::test]
    async fn refresh_on_demand_and_spot_with_fallbacks() {
        let api = Arc::new(FakePricing::new());
        let p = PricingProvider::new("us-west-2", Some(api.clone()), false, PriceTable::default());
        assert!(p.uses_estimate());
        assert_eq!(p.price_source(&zones()), PriceSource::Estimate);

        api.set_on_demand(vec![od("m5.large", 0.096), od("c5.large", 0.085), od("c5.large", 0.09)]);
        api.fail_spot(AwsApiError::new("DescribeSpotPriceHistory", "RequestLimitExceeded", "slow down"));
        let report = p.refresh(now()).await;
        assert_eq!(report.on_demand, Some(2));
        assert_eq!(report.spot, None);
        assert_eq!(report.errors.len(), 1);
        assert_eq!(p.on_demand("c5.large"), Some(0.085));
        // Before the first spot update, spot = on-demand in every zone.
        assert_eq!(p.spot("m5.large", "us-west-2b"), Some(0.096));
        let PriceSource::Table(t) = p.price_source(&zones()) else { panic!("table expected") };
        assert_eq!(t.spot("m5.large", "us-west-2a"), Some(0.096));
        let v1 = p.version();

        api.set_spot(vec![
            sp("m5.large", "us-west-2a", 0.04, 1),
            sp("m5.large", "us-west-2a", 0.03, 5),
            sp("m5.large", "us-west-2a", 0.05, 3),
        ]);
        api.fail_on_demand(AwsApiError::new("GetProducts", "ThrottlingException", "slow down"));
        let report = p.refresh(now()).await;
        assert_eq!(report.spot, Some(1));
        assert_eq!(p.spot("m5.large", "us-west-2a"), Some(0.03), "latest entry wins");
        assert_eq!(p.spot("m5.large", "us-west-2b"), None, "no spot price after the first update");
        assert_eq!(p.on_demand("m5.large"), Some(0.096), "failed on-demand update keeps the prices");
        assert!(p.version() > v1);

        // Merge: a later update adds zones and keeps the others; an empty answer changes nothing.
        api.set_spot(vec![sp("m5.large", "us-west-2b", 0.035, 7)]);
        p.refresh(now()).await;
        assert_eq!(p.spot("m5.large", "us-west-2a"), Some(0.03));
        assert_eq!(p.spot("m5.large", "us-west-2b"), Some(0.035));
        let v2 = p.version();
        api.set_spot(vec![]);
        api.set_on_demand(vec![]);
        p.refresh(now()).await;
        assert_eq!(p.version(), v2);
        assert_eq!(p.on_demand("m5.large"), Some(0.096));
    }

    #[tokio::test]
    async fn isolated_vpc_and_govcloud_never_call_the_pricing_api() {
        let api = Arc::new(FakePricing::new());
        api.set_on_demand(vec![od("m5.large", 0.096)]);
        let mut file = PriceTable::default();
        file.on_demand.insert("m5.large".into(), 0.1);
        let p = PricingProvider::new("us-west-2", Some(api.clone()), true, file);
        p.refresh(now()).await;
        assert_eq!(p.on_demand("m5.large"), Some(0.1));
        assert_eq!(api.calls(), ["spot"]);
        let gov = PricingProvider::new("us-gov-west-1", Some(api.clone()), false, PriceTable::default());
        assert!(!gov.on_demand_api_enabled());
        gov.refresh(now()).await;
        assert!(gov.uses_estimate());
        assert_eq!(api.calls(), ["spot", "spot"]);
        let none = PricingProvider::new("us-west-2", None, false, PriceTable::default());
        assert_eq!(none.refresh(now()).await, RefreshReport { warned_estimate: true, ..Default::default() });
    }

    #[tokio::test]
    async fn no_price_source_is_warned_once_and_spot_alone_is_not_a_source() {
        // Isolated VPC without a price file: spot prices still come from EC2, but no on-demand price is known,
        // so everything is priced by the estimate.
        let api = Arc::new(FakePricing::new());
        api.set_on_demand(vec![od("m5.large", 0.096)]);
        api.set_spot(vec![sp("m5.large", "us-west-2a", 0.03, 1)]);
        let p = PricingProvider::new("us-west-2", Some(api.clone()), true, PriceTable::default());
        assert!(p.uses_estimate());
        let first = p.refresh(now()).await;
        assert!(first.warned_estimate);
        assert_eq!(first.spot, Some(1));
        assert!(p.uses_estimate(), "spot prices alone are no price source");
        assert_eq!(p.price_source(&zones()), PriceSource::Estimate);
        assert!(!p.refresh(now()).await.warned_estimate, "warned once");
        assert_eq!(api.calls(), ["spot", "spot"]);

        // Pricing API failing from the start: estimate, warned once; its first success ends it.
        let api = Arc::new(FakePricing::new());
        let p = PricingProvider::new("us-west-2", Some(api.clone()), false, PriceTable::default());
        api.fail_on_demand(AwsApiError::new("GetProducts", "AccessDeniedException", "no pricing:GetProducts"));
        let report = p.refresh(now()).await;
        assert!(report.warned_estimate && report.errors.len() == 1, "{report:?}");
        assert!(!p.refresh(now()).await.warned_estimate, "empty answer: still estimated, not warned again");
        api.set_on_demand(vec![od("m5.large", 0.096)]);
        let report = p.refresh(now()).await;
        assert!(!report.warned_estimate && !p.uses_estimate());
        assert!(matches!(p.price_source(&zones()), PriceSource::Table(_)));

        // A price file is a source, isolated or not.
        let mut file = PriceTable::default();
        file.on_demand.insert("m5.large".into(), 0.1);
        let p = PricingProvider::new("us-west-2", None, true, file);
        assert!(!p.uses_estimate());
        assert!(!p.refresh(now()).await.warned_estimate);
    }

    #[tokio::test]
    async fn fetch_price_file_round_trips_through_the_file_format() {
        let api = FakePricing::new();
        api.set_on_demand(vec![
            od("m5.large", 0.096),
            od("c5.large", 0.09),
            od("c5.large", 0.085),
            od("free.nano", 0.0),
            od("nan.large", f64::NAN),
        ]);
        api.set_spot(vec![
            sp("m5.large", "us-west-2a", 0.04, 1),
            sp("m5.large", "us-west-2a", 0.031, 5),
            sp("m5.large", "us-west-2b", 0.033, 2),
        ]);
        let file = fetch_price_file(&api, "us-west-2", None).await.expect("prices");
        assert_eq!(api.calls(), ["on-demand:us-west-2"], "no spot call without spot_since");
        let json = file.to_json();
        let loaded = PriceFile::parse(json.as_bytes()).expect("the written file loads");
        assert_eq!(loaded, file);
        let table = loaded.checked_region("us-west-2").expect("region present");
        assert_eq!(table.on_demand, BTreeMap::from([("c5.large".into(), 0.085), ("m5.large".into(), 0.096)]));
        assert!(table.spot.is_empty());
        assert!(!json.contains("spot"), "{json}");

        // With spot: the latest per (type, zone); the file then starts the controller with those spot prices.
        let file = fetch_price_file(&api, "us-west-2", Some(now())).await.expect("prices");
        let table = PriceFile::parse(file.to_json().as_bytes()).unwrap().checked_region("us-west-2").unwrap();
        assert_eq!(table.spot("m5.large", "us-west-2a"), Some(0.031));
        assert_eq!(table.spot("m5.large", "us-west-2b"), Some(0.033));
        let p = PricingProvider::new("us-west-2", None, true, table);
        assert_eq!(p.spot("m5.large", "us-west-2b"), Some(0.033));
        assert_eq!(p.spot("c5.large", "us-west-2a"), None, "a file with spot prices is a spot update");
        assert!(!p.uses_estimate());

        // Nothing to write: errors, never an empty file.
        api.set_on_demand(vec![]);
        let err = fetch_price_file(&api, "us-wset-2", None).await.unwrap_err();
        assert!(matches!(err, FetchPricesError::NoPrices(_)) && err.to_string().contains("us-wset-2"), "{err}");
        api.fail_on_demand(AwsApiError::new("GetProducts", "AccessDeniedException", "denied"));
        assert!(matches!(fetch_price_file(&api, "us-west-2", None).await, Err(FetchPricesError::Api(_))));
        let gov = fetch_price_file(&api, "us-gov-west-1", None).await.unwrap_err();
        assert!(matches!(gov, FetchPricesError::Unavailable(_)), "{gov}");
    }

    #[tokio::test(start_paused = true)]
    async fn run_refreshes_every_twelve_hours_until_shutdown() {
        let api = Arc::new(FakePricing::new());
        let p = Arc::new(PricingProvider::new("us-west-2", Some(api.clone()), false, PriceTable::default()));
        let token = CancellationToken::new();
        let clock: Arc<dyn Clock> = Arc::new(karpenter_cloudprovider::SystemClock);
        let task = tokio::spawn(p.clone().run(clock, token.clone()));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(api.calls().len(), 2);
        tokio::time::sleep(REFRESH_INTERVAL).await;
        assert_eq!(api.calls().len(), 4);
        token.cancel();
        task.await.unwrap();
    }
}
