//! The instance-type provider: EC2's catalogue (DescribeInstanceTypes and
//! DescribeInstanceTypeOfferings through the narrow [`InstanceTypeApi`]) fetched at start and every
//! [`REFRESH_INTERVAL`], converted per EC2NodeClass with [`crate::instancetype`] (kubelet settings, block devices,
//! the zones and zone ids of its resolved subnets), priced from [`SharedPrices`] (which the pricing controller
//! refreshes), with reserved offerings for the capacity reservations in the class's status (available while the
//! tracked count of the [`CapacityReservationProvider`] is above zero, `reservation_capacity` = that count), and
//! offerings EC2 recently refused marked unavailable ([`UnavailableOfferings`]). A class with a resolved
//! placement group ([`InstanceTypeProvider::list_in`]) gets `karpenter.k8s.aws/placement-group-id In [id]` (and
//! for a partition group `karpenter.k8s.aws/placement-group-partition In [1..N]`) on every instance type and
//! offering, and the group's unavailable marks. Converted lists are cached per (node class generation and
//! status, placement group, prices version, catalogue fetch, unavailable-offerings version, reservation counts
//! version).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use crate::api::EC2NodeClass;
use crate::api::{CapacityReservationState, CapacityReservationType};
use crate::labels as aws_labels;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use karpenter_cloudprovider::Clock;
use karpenter_requirements::labels::{CAPACITY_TYPE, CAPACITY_TYPE_RESERVED, ZONE};
use karpenter_requirements::{InstanceType, Offering, Requirement, Requirements};

use crate::api_error::AwsApiError;
use crate::dynamic_resources::DraTemplates;
use crate::ec2::{InstanceTypeInfo, InstanceTypeOffering};
use crate::instancetype::{InstanceTypeContext, InstanceTypeError, NodeClassSettings, Settings};
use crate::kubelet_cel::KubeletExpressions;
use crate::launch::ice::UnavailableOfferings;
use crate::nodeclass::reservation::{CapacityReservationProvider, PlacementGroupInfo};
use crate::pricing::{PriceSource, estimate};

/// How often the catalogue is fetched again.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(12 * 3600);
/// A reserved offering's price: the on-demand price divided by this (nearly free, still ordered).
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// The EC2 calls of the catalogue. Implementations fetch every page: instance types filtered to HVM on x86_64 or
/// arm64, offerings with location type `availability-zone`.
#[async_trait]
pub trait InstanceTypeApi: Send + Sync + fmt::Debug {
    /// `DescribeInstanceTypes`, all pages.
    async fn describe_instance_types(&self) -> Result<Vec<InstanceTypeInfo>, AwsApiError>;
    /// `DescribeInstanceTypeOfferings` by availability zone, all pages.
    async fn describe_instance_type_offerings(&self) -> Result<Vec<InstanceTypeOffering>, AwsApiError>;
}

/// The current prices, shared between the pricing controller (writer) and the instance-type provider (reader).
#[derive(Clone, Debug, Default)]
pub struct SharedPrices {
    inner: Arc<RwLock<(PriceSource, u64)>>,
}

impl SharedPrices {
    /// Prices starting at `source`.
    pub fn new(source: PriceSource) -> Self {
        Self { inner: Arc::new(RwLock::new((source, 0))) }
    }

    /// Replaces the prices (bumps the version).
    pub fn set(&self, source: PriceSource) {
        let mut g = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        g.0 = source;
        g.1 += 1;
    }

    /// The current prices.
    pub fn get(&self) -> PriceSource {
        self.inner.read().unwrap_or_else(PoisonError::into_inner).0.clone()
    }

    /// Changes with every [`set`](Self::set).
    pub fn version(&self) -> u64 {
        self.inner.read().unwrap_or_else(PoisonError::into_inner).1
    }
}

/// Why instance types could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum InstanceTypeProviderError {
    /// The catalogue could not be fetched.
    #[error("fetching the instance-type catalogue: {0}")]
    Api(#[from] AwsApiError),
    /// The node class's settings cannot be used.
    #[error("node class settings: {0}")]
    NodeClass(#[from] InstanceTypeError),
}

/// Options of the provider.
#[derive(Clone, Debug)]
pub struct InstanceTypeProviderOptions {
    /// The region.
    pub region: String,
    /// Operator settings (`VM_MEMORY_OVERHEAD_PERCENT`, `RESERVED_ENIS`).
    pub settings: Settings,
    /// Catalogue refresh interval ([`REFRESH_INTERVAL`]).
    pub refresh_interval: Duration,
    /// Branch interfaces per instance type (security groups for pods), when known.
    pub branch_interfaces: BTreeMap<String, i64>,
    /// The AWS `NodeClassCEL` gate: kubelet CEL expressions are evaluated (off: ignored).
    pub node_class_cel: bool,
    /// DRA slice templates (AWS gates `DRANVIDIAGPU`, `DRAEFA`).
    pub dra: DraTemplates,
}

impl InstanceTypeProviderOptions {
    /// Defaults for `region`.
    pub fn new(region: &str) -> Self {
        Self {
            region: region.into(),
            settings: Settings::default(),
            refresh_interval: REFRESH_INTERVAL,
            branch_interfaces: BTreeMap::new(),
            node_class_cel: false,
            dra: DraTemplates::default(),
        }
    }
}

/// The fetched catalogue.
#[derive(Clone, Debug)]
pub struct Catalogue {
    /// Instance types.
    pub infos: Vec<InstanceTypeInfo>,
    /// Instance type → zones.
    pub zones: BTreeMap<String, BTreeSet<String>>,
    /// When it was fetched.
    pub fetched_at: DateTime<Utc>,
    /// Increases with every fetch.
    pub generation: u64,
}

type CacheKey = (String, u64, u64, u64, u64);
type Converted = BTreeMap<String, (CacheKey, Arc<[InstanceType]>)>;

/// See the module docs. Clones share the catalogue and caches.
#[derive(Clone)]
pub struct InstanceTypeProvider {
    api: Arc<dyn InstanceTypeApi>,
    clock: Arc<dyn Clock>,
    prices: SharedPrices,
    unavailable: UnavailableOfferings,
    options: InstanceTypeProviderOptions,
    catalogue: Arc<Mutex<Option<Arc<Catalogue>>>>,
    fetch: Arc<tokio::sync::Mutex<()>>,
    cache: Arc<Mutex<Converted>>,
    reservations: Option<Arc<CapacityReservationProvider>>,
}

impl fmt::Debug for InstanceTypeProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstanceTypeProvider").field("region", &self.options.region).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl InstanceTypeProvider {
    /// A provider; nothing is fetched until first use or [`refresh`](Self::refresh).
    pub fn new(
        api: Arc<dyn InstanceTypeApi>,
        clock: Arc<dyn Clock>,
        prices: SharedPrices,
        unavailable: UnavailableOfferings,
        options: InstanceTypeProviderOptions,
    ) -> Self {
        Self {
            api,
            clock,
            prices,
            unavailable,
            options,
            catalogue: Arc::default(),
            fetch: Arc::default(),
            cache: Arc::default(),
            reservations: None,
        }
    }

    /// Reserved offerings follow the reservations' tracked counts (without one, an active reservation counts
    /// as one instance until EC2 refuses it).
    pub fn with_capacity_reservations(mut self, reservations: Arc<CapacityReservationProvider>) -> Self {
        self.reservations = Some(reservations);
        self
    }

    /// The shared prices.
    pub fn prices(&self) -> &SharedPrices {
        &self.prices
    }

    /// The shared unavailable-offerings cache.
    pub fn unavailable(&self) -> &UnavailableOfferings {
        &self.unavailable
    }

    /// Fetches the catalogue now; returns the number of instance types.
    pub async fn refresh(&self) -> Result<usize, AwsApiError> {
        let _guard = self.fetch.lock().await;
        self.fetch_locked().await.map(|c| c.infos.len())
    }

    async fn fetch_locked(&self) -> Result<Arc<Catalogue>, AwsApiError> {
        let infos = self.api.describe_instance_types().await?;
        let offerings = self.api.describe_instance_type_offerings().await?;
        let mut zones: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for o in offerings {
            if o.location_type.as_deref().is_none_or(|t| t == "availability-zone") {
                zones.entry(o.instance_type).or_default().insert(o.location);
            }
        }
        let mut slot = lock(&self.catalogue);
        let generation = slot.as_ref().map_or(1, |c| c.generation + 1);
        let catalogue = Arc::new(Catalogue { infos, zones, fetched_at: self.clock.now(), generation });
        *slot = Some(catalogue.clone());
        tracing::debug!(instance_types = catalogue.infos.len(), "instance-type catalogue fetched");
        Ok(catalogue)
    }

    /// The catalogue, fetched when missing or older than the refresh interval (a failed refresh keeps the old
    /// one).
    pub async fn catalogue(&self) -> Result<Arc<Catalogue>, AwsApiError> {
        let interval = chrono::Duration::from_std(self.options.refresh_interval).unwrap_or(chrono::Duration::MAX);
        let current = lock(&self.catalogue).clone();
        if let Some(c) = &current
            && self.clock.now() - c.fetched_at < interval
        {
            return Ok(c.clone());
        }
        let _guard = self.fetch.lock().await;
        if let Some(c) = lock(&self.catalogue).clone()
            && self.clock.now() - c.fetched_at < interval
        {
            return Ok(c);
        }
        match self.fetch_locked().await {
            Ok(c) => Ok(c),
            Err(e) => match current {
                Some(old) => {
                    tracing::warn!(error = %e, "refreshing the instance-type catalogue failed; keeping the old one");
                    Ok(old)
                }
                None => Err(e),
            },
        }
    }

    /// The node class's kubelet expressions checked against the catalogue already fetched (this fetches
    /// nothing): compiled, then evaluated for every known instance type ([`kubelet_expression_check`]).
    pub fn check_kubelet_expressions(&self, node_class: &EC2NodeClass) -> ExpressionCheck {
        let catalogue = lock(&self.catalogue).clone();
        kubelet_expression_check(
            node_class,
            self.options.node_class_cel,
            catalogue.as_ref().map(|c| c.infos.as_slice()),
            &self.options.settings,
        )
    }

    /// Every instance type for `node_class` (without placement group), with all offerings (unavailable ones
    /// marked).
    pub async fn list(&self, node_class: &EC2NodeClass) -> Result<Arc<[InstanceType]>, InstanceTypeProviderError> {
        self.list_in(node_class, None).await
    }

    /// Every instance type for `node_class` launching into `placement` (the class's resolved placement group),
    /// with all offerings (unavailable ones marked).
    pub async fn list_in(
        &self,
        node_class: &EC2NodeClass,
        placement: Option<&PlacementGroupInfo>,
    ) -> Result<Arc<[InstanceType]>, InstanceTypeProviderError> {
        let catalogue = self.catalogue().await?;
        // One cache slot per (class, placement group): drift checks list without the group, launches with it.
        let name = format!(
            "{}\u{0}{}",
            node_class.metadata.name.as_deref().unwrap_or_default(),
            placement.map_or("", |p| p.id.as_str())
        );
        let identity = serde_json::to_string(&(
            &node_class.metadata.uid,
            node_class.metadata.generation,
            &node_class.spec,
            node_class.status.as_ref().map(|s| (&s.subnets, &s.capacity_reservations)),
            placement.map(|p| (&p.id, p.partitions())),
        ))
        .unwrap_or_default();
        let key: CacheKey = (
            identity,
            self.prices.version(),
            catalogue.generation,
            self.unavailable.version(),
            self.reservations.as_ref().map_or(0, |r| r.version()),
        );
        if let Some((k, its)) = lock(&self.cache).get(&name)
            && *k == key
        {
            return Ok(its.clone());
        }
        let mut its = self.convert(&catalogue, node_class)?;
        match placement {
            Some(group) => {
                add_placement_group(&mut its, group);
                self.unavailable.apply_in_group(&mut its, &group.id, group.partitions());
            }
            None => self.unavailable.apply(&mut its),
        }
        let its: Arc<[InstanceType]> = its.into();
        lock(&self.cache).insert(name, (key, its.clone()));
        Ok(its)
    }

    fn convert(
        &self,
        catalogue: &Catalogue,
        node_class: &EC2NodeClass,
    ) -> Result<Vec<InstanceType>, InstanceTypeProviderError> {
        let status = node_class.status.clone().unwrap_or_default();
        let subnet_zones: BTreeSet<String> = status.subnets.iter().map(|s| s.zone.clone()).collect();
        let zone_ids: BTreeMap<String, String> =
            status.subnets.iter().filter_map(|s| Some((s.zone.clone(), s.zone_id.clone()?))).collect();
        let prices = self.prices.get();
        let context = InstanceTypeContext {
            region: self.options.region.clone(),
            node_class: NodeClassSettings::from_spec(&node_class.spec, self.options.node_class_cel)?,
            settings: self.options.settings.clone(),
            zones: catalogue.zones.clone(),
            zone_ids: zone_ids.clone(),
            subnet_zones: (!subnet_zones.is_empty()).then_some(subnet_zones),
            prices: prices.clone(),
            unavailable: BTreeSet::new(),
            branch_interfaces: self.options.branch_interfaces.clone(),
            dra: self.options.dra,
        };
        let mut its = context.instance_types(&catalogue.infos);
        if !status.capacity_reservations.is_empty() {
            let infos: BTreeMap<&str, &InstanceTypeInfo> =
                catalogue.infos.iter().map(|i| (i.instance_type.as_str(), i)).collect();
            let counts = self
                .reservations
                .as_ref()
                .map(|r| r.available_counts(status.capacity_reservations.iter().map(|c| c.id.as_str())));
            for it in &mut its {
                let Some(info) = infos.get(it.name.as_str()) else { continue };
                add_reserved_offerings(it, info, node_class, &context, &zone_ids, counts.as_ref());
            }
        }
        Ok(its)
    }
}

/// What the kubelet expressions of a node class mean for `ValidationSucceeded`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExpressionCheck {
    /// No expressions, or every one compiles and evaluates for every known instance type.
    Passed,
    /// The condition's False reason and message.
    Failed {
        /// `KubeletExpressionsDisabled`, `KubeletExpressionInvalid` or `KubeletExpressionEvaluationFailed`.
        reason: &'static str,
        /// What is wrong, naming the expression (and the instance type).
        message: String,
    },
    /// No instance types are known yet (the catalogue has not been fetched): look again soon.
    NoInstanceTypes,
}

/// The kubelet expression check of `ValidationSucceeded` (pure): with the gate off any expression fails
/// (`KubeletExpressionsDisabled`); with it on, compile errors (`KubeletExpressionInvalid`), then evaluation
/// against every type of `infos` (`KubeletExpressionEvaluationFailed`); `infos` unknown or empty is transient.
pub fn kubelet_expression_check(
    node_class: &EC2NodeClass,
    gate: bool,
    infos: Option<&[InstanceTypeInfo]>,
    settings: &Settings,
) -> ExpressionCheck {
    use crate::api::conditions::reasons;
    let Some(kubelet) = node_class.spec.kubelet.as_ref().filter(|k| k.has_expressions()) else {
        return ExpressionCheck::Passed;
    };
    if !gate {
        return ExpressionCheck::Failed {
            reason: reasons::KUBELET_EXPRESSIONS_DISABLED,
            message: "spec.kubelet has CEL expressions but the NodeClassCEL AWS feature gate is off".into(),
        };
    }
    if let Err(e) = KubeletExpressions::compile(kubelet) {
        return ExpressionCheck::Failed { reason: reasons::KUBELET_EXPRESSION_INVALID, message: e.to_string() };
    }
    let Some(infos) = infos.filter(|i| !i.is_empty()) else { return ExpressionCheck::NoInstanceTypes };
    // Other unusable settings (bad eviction thresholds) are not this check's: listing instance types reports them.
    let Ok(node_class) = NodeClassSettings::from_spec(&node_class.spec, true) else { return ExpressionCheck::Passed };
    let context = InstanceTypeContext { node_class, settings: settings.clone(), ..Default::default() };
    match context.check_expressions(infos) {
        Ok(()) => ExpressionCheck::Passed,
        Err(e) => {
            ExpressionCheck::Failed { reason: reasons::KUBELET_EXPRESSION_EVALUATION_FAILED, message: e.to_string() }
        }
    }
}

/// Adds the placement group's requirements to every instance type and offering: the group id, and for a
/// partition group the partitions `1..=N`.
pub fn add_placement_group(its: &mut [InstanceType], group: &PlacementGroupInfo) {
    let mut reqs: Vec<Requirement> = vec![Requirement::in_values(aws_labels::PLACEMENT_GROUP_ID, [group.id.as_str()])];
    if let Some(n) = group.partitions() {
        reqs.push(Requirement::in_values(aws_labels::PLACEMENT_GROUP_PARTITION, (1..=n).map(|p| p.to_string())));
    }
    for it in its {
        for r in &reqs {
            it.requirements.remove(r.key());
            it.requirements.add(r.clone());
            for o in &mut it.offerings {
                o.requirements.remove(r.key());
                o.requirements.add(r.clone());
            }
        }
    }
}

/// Adds one reserved offering per capacity reservation of the node class for this instance type. `counts`
/// are the tracked remaining instance counts (`None`: not tracked, an active reservation counts as one
/// instance until EC2 refuses it; a reservation missing from the map has no room).
fn add_reserved_offerings(
    it: &mut InstanceType,
    info: &InstanceTypeInfo,
    node_class: &EC2NodeClass,
    context: &InstanceTypeContext,
    zone_ids: &BTreeMap<String, String>,
    counts: Option<&BTreeMap<String, i64>>,
) {
    let Some(status) = node_class.status.as_ref() else { return };
    let zones = context.zones_of(&it.name).into_iter().map(str::to_owned).collect::<BTreeSet<_>>();
    let on_demand = match &context.prices {
        PriceSource::Table(t) => t.on_demand(&it.name),
        PriceSource::Estimate => Some(estimate(info)),
    };
    let compatible = crate::instancetype::compatible_with_node_class(info, &context.node_class);
    let mut ids = Vec::new();
    for r in status.capacity_reservations.iter().filter(|r| r.instance_type == it.name) {
        let kind = match r.reservation_type {
            CapacityReservationType::CapacityBlock => "capacity-block",
            _ => "default",
        };
        let mut reqs: Requirements = [
            Requirement::in_values(CAPACITY_TYPE, [CAPACITY_TYPE_RESERVED]),
            Requirement::in_values(ZONE, [r.availability_zone.as_str()]),
            Requirement::in_values(aws_labels::CAPACITY_RESERVATION_ID, [r.id.as_str()]),
            Requirement::in_values(aws_labels::CAPACITY_RESERVATION_TYPE, [kind]),
            Requirement::in_values(aws_labels::CAPACITY_RESERVATION_INTERRUPTIBLE, [r.interruptible.to_string()]),
        ]
        .into_iter()
        .collect();
        if let Some(id) = zone_ids.get(&r.availability_zone) {
            reqs.add(Requirement::in_values(aws_labels::ZONE_ID, [id.as_str()]));
        }
        let mut o = Offering::new(reqs, on_demand.map_or(f64::INFINITY, |p| p / RESERVED_PRICE_DIVISOR));
        let count = counts.map_or(1, |c| c.get(&r.id).copied().unwrap_or(0)).max(0);
        o.available = compatible
            && on_demand.is_some()
            && zones.contains(&r.availability_zone)
            && r.state == CapacityReservationState::Active
            && count > 0;
        o.reservation_capacity = i32::try_from(count).unwrap_or(i32::MAX);
        it.offerings.push(o);
        ids.push(r.id.clone());
    }
    if ids.is_empty() {
        return;
    }
    // The type's requirements now admit the reservation labels and the reserved capacity type.
    let widen = |reqs: &mut Requirements, key: &str, values: Vec<String>| {
        let mut all: BTreeSet<String> = reqs.get(key).values().iter().map(|v| v.to_string()).collect();
        all.extend(values);
        reqs.remove(key);
        reqs.add(Requirement::in_values(key, all));
    };
    let reqs = &mut it.requirements;
    widen(reqs, CAPACITY_TYPE, vec![CAPACITY_TYPE_RESERVED.into()]);
    let zones_of_offerings: Vec<String> = it.offerings.iter().filter_map(|o| o.zone().map(str::to_owned)).collect();
    widen(reqs, ZONE, zones_of_offerings);
    for key in [
        aws_labels::CAPACITY_RESERVATION_ID,
        aws_labels::CAPACITY_RESERVATION_TYPE,
        aws_labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
    ] {
        reqs.remove(key);
    }
    reqs.add(Requirement::in_values(aws_labels::CAPACITY_RESERVATION_ID, ids));
}

#[cfg(test)]
mod tests;
