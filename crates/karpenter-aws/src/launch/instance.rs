//! The instance provider: launching a NodeClaim's instance with CreateFleet from the
//! node class's resolved status, and finding, listing and terminating instances.
//!
//! A launch: instance types compatible with the claim (requirements, requests, an available compatible
//! offering) → capacity type (reserved if allowed and offered, else spot if allowed and available, else
//! on-demand) → the exotic filter (metal and accelerator types dropped unless nothing else is left; skipped
//! with minValues) → the spot filter (spot offerings above the cheapest on-demand one dropped; skipped with
//! minValues) → price order and truncation to [`MAX_INSTANCE_TYPES`] keeping minValues satisfied → one launch
//! template per (AMI, pods value, reservation) → one override per (instance type, zone) with the zone's subnet
//! and the offering's price as priority → CreateFleet through the batcher, retried with backoff while EC2
//! throttles, retried once with fresh launch templates when EC2 says one is gone. Fleet errors with an
//! insufficient-capacity code mark their offering unavailable for 3 minutes; a launch that got no instance
//! and only such errors is [`CloudProviderError::InsufficientCapacity`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::api::{Ami, KubeletConfiguration, MaxPods, ReservedValue};
use crate::api::{AmiFamily, EC2NodeClass};
use karpenter_api::NodeClaim;
use karpenter_api::labels::annotations::{NODE_CLAIM_MIN_VALUES_RELAXED, PRICE_OVERLAY_APPLIED};
use karpenter_api::labels::{DO_NOT_SYNC_TAINTS, taints as taint_keys};
use karpenter_api::nodeclaim::{Taint, TaintEffect};
use karpenter_cloudprovider::{CloudProviderError, OfferingRef, Sleeper};
use karpenter_requirements::labels::{
    CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT,
};
use karpenter_requirements::{
    InstanceType, MinValuesPolicy, Offering, Quantity, Requirement, Requirements, ResourceList, truncate,
};
use karpenter_runtime::metrics::Metrics;

use crate::api_error::{AwsApiError, AwsErrorKind};
use crate::instancetype::resources as extended;
use crate::launch::batcher::{
    BatchWindow, CREATE_FLEET_BATCHER, DescribeBatcher, FleetBatcher, TerminateBatcher, create_fleet, fleet_batcher,
};
use crate::launch::fleet::{
    CreateFleetRequest, CreateFleetResponse, DescribeInstancesRequest, EKS_CLUSTER_NAME_TAG, Ec2Instance, Filter,
    FleetApi, FleetInstance, FleetLaunchTemplateConfig, FleetOverride, InstanceState, NODE_CLAIM_TAG, NODE_CLASS_TAG,
    NODE_POOL_TAG, TargetCapacityType, is_launch_template_not_found, reason_for_code,
};
use crate::launch::ice::{PlacementScope, SPOT_SLR_CODE, UnavailableOfferings, is_ice_code};
use crate::launch::tags::launch_tags;
use crate::launch::template::{
    LaunchTemplate, LaunchTemplateInputs, LaunchTemplateProvider, launch_template_data, launch_template_tags,
};
use crate::launch::userdata::{BootstrapConfig, user_data};
use crate::metrics::AwsMetrics;
use crate::nodeclass::network::{DEFAULT_FREE_IP_TTL, InFlightSubnets, SUBNET_OUT_OF_ADDRESSES, SubnetIps};
use crate::nodeclass::reservation::{CapacityReservationProvider, PlacementGroupInfo};

/// At most this many instance types go into one fleet request.
pub const MAX_INSTANCE_TYPES: usize = 60;
/// Below this many instance types an on-demand launch that could have been spot is logged.
pub const SPOT_FLEXIBILITY_WARNING: usize = 5;

/// Cluster facts every launch needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    /// Cluster name.
    pub name: String,
    /// API server endpoint.
    pub endpoint: String,
    /// CA bundle (base64).
    pub ca_bundle: Option<String>,
    /// Service CIDR.
    pub service_cidr: Option<String>,
    /// The kube-dns service IP (default `clusterDNS`).
    pub dns_ip: Option<String>,
}

impl ClusterInfo {
    /// An IPv6 cluster: its kube-dns service IP is an IPv6 address.
    pub fn is_ipv6(&self) -> bool {
        self.dns_ip.as_deref().is_some_and(|ip| ip.trim().parse::<std::net::Ipv6Addr>().is_ok())
    }
}

/// Retries of throttled CreateFleet calls: `attempts` tries, waiting `base × 2^n` (at most `max`) in between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Tries in all.
    pub attempts: u32,
    /// First wait.
    pub base: Duration,
    /// Longest wait.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { attempts: 5, base: Duration::from_millis(500), max: Duration::from_secs(8) }
    }
}

impl RetryPolicy {
    /// The wait after failed try number `n` (0-based).
    pub fn backoff(&self, n: u32) -> Duration {
        self.base.saturating_mul(2u32.saturating_pow(n)).min(self.max)
    }
}

/// Batching windows of the three batched calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchWindows {
    /// CreateFleet.
    pub create_fleet: BatchWindow,
    /// DescribeInstances.
    pub describe_instances: BatchWindow,
    /// TerminateInstances.
    pub terminate_instances: BatchWindow,
}

impl Default for BatchWindows {
    fn default() -> Self {
        Self {
            create_fleet: BatchWindow::CREATE_FLEET,
            describe_instances: BatchWindow::DESCRIBE_INSTANCES,
            terminate_instances: BatchWindow::TERMINATE_INSTANCES,
        }
    }
}

/// What a launch produced.
#[derive(Clone, Debug)]
pub struct Launched {
    /// The fleet's instance.
    pub instance: FleetInstance,
    /// Its instance type (from the catalogue the launch used).
    pub instance_type: InstanceType,
    /// `spot`, `on-demand` or `reserved`.
    pub capacity_type: String,
    /// The capacity reservation, for reserved launches.
    pub reservation_id: Option<String>,
    /// The reservation's type and interruptibility, for reserved launches.
    pub reservation: Option<(String, bool)>,
    /// The placement group (and partition) the instance was launched into.
    pub placement: Option<PlacementScope>,
}

/// One failed launch attempt of an offering (a CreateFleet error): the labels of
/// `karpenter_cloudprovider_instance_launch_failures_total`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LaunchFailure {
    /// The zone EC2 named.
    pub zone: String,
    /// Its zone id (from the node class's subnets; empty when unknown).
    pub zone_id: String,
    /// The launch's capacity type.
    pub capacity_type: String,
    /// EC2's error code.
    pub reason: String,
}

/// What a fleet outcome needs to know about the launch besides the request and response.
struct LaunchContext<'a> {
    name: &'a str,
    capacity_type: &'a str,
    placement: Option<&'a PlacementGroupInfo>,
    scope: Option<&'a PlacementScope>,
    zone_ids: BTreeMap<String, String>,
    /// Zones left without an available subnet by `InsufficientFreeAddressesInSubnet` errors of this launch.
    zones_out_of_addresses: BTreeSet<String>,
}

/// Whether a fleet error says a spread placement group holds as many instances as it may in that zone.
pub fn is_spread_limit_error(e: &crate::launch::fleet::FleetError) -> bool {
    let m = e.error_message.to_ascii_lowercase();
    m.contains("spread") && m.contains("placement group") && (m.contains("limit") || m.contains("maximum"))
}

/// The partition of a partition-group launch: the lowest partition (`1..=N`) the claim's requirements allow
/// for which some instance type the claim fits has an available compatible offering; else the lowest allowed
/// (the launch then fails for capacity); `None` when the claim allows none.
fn choose_partition(
    reqs: &Requirements,
    requests: &ResourceList,
    partitions: i32,
    instance_types: &[InstanceType],
) -> Option<i32> {
    let key = crate::labels::PLACEMENT_GROUP_PARTITION;
    let allowed: Vec<i32> =
        (1..=partitions).filter(|p| reqs.get_ref(key).is_none_or(|r| r.has(&p.to_string()))).collect();
    let offered = |p: i32| {
        let mut pinned = reqs.clone();
        pinned.add(Requirement::in_values(key, [p.to_string()]));
        instance_types.iter().any(|it| {
            requests.fits(it.allocatable())
                && it.requirements.intersects_ok(&pinned)
                && it.offerings.iter().any(|o| o.available && pinned.intersects_ok(&o.requirements))
        })
    };
    allowed.iter().copied().find(|p| offered(*p)).or_else(|| allowed.first().copied())
}

/// See the module docs.
#[derive(Clone)]
pub struct InstanceProvider {
    api: Arc<dyn FleetApi>,
    fleet: Arc<FleetBatcher>,
    describe: Arc<DescribeBatcher>,
    terminate: Arc<TerminateBatcher>,
    templates: LaunchTemplateProvider,
    unavailable: UnavailableOfferings,
    sleeper: Arc<dyn Sleeper>,
    cluster: ClusterInfo,
    retry: RetryPolicy,
    reservations: Option<Arc<CapacityReservationProvider>>,
    failures: Arc<Mutex<BTreeMap<LaunchFailure, u64>>>,
    /// Where launch and termination failures and the batchers' batches are recorded.
    metrics: Option<Arc<Metrics>>,
    /// The batchers' windows, kept to rebuild them recording into the registry ([`InstanceProvider::with_metrics`]).
    windows: BatchWindows,
    subnet_ips: SubnetIps,
    reserved_capacity: bool,
    node_class_cel: bool,
    region: String,
}

impl fmt::Debug for InstanceProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InstanceProvider").field("cluster", &self.cluster.name).finish()
    }
}

fn create_error(e: &AwsApiError) -> CloudProviderError {
    CloudProviderError::create(reason_for_code(&e.code), e.to_string()).with_source(e.clone())
}

fn api_error(context: &str, e: AwsApiError) -> CloudProviderError {
    CloudProviderError::other(format!("{context}: {e}")).with_source(e)
}

fn is_exotic(it: &InstanceType) -> bool {
    let gpu = [extended::NVIDIA_GPU, extended::AMD_GPU, extended::HABANA_GAUDI, extended::AWS_NEURON]
        .iter()
        .any(|r| it.capacity().get(r).is_some_and(|q| !q.is_zero()));
    gpu || it.name.contains(".metal")
}

fn offering_ref(it: &InstanceType, o: &Offering) -> OfferingRef {
    OfferingRef::new(&it.name, o.zone().unwrap_or(""), o.capacity_type().unwrap_or(""))
}

/// The claim's resource requests.
pub fn requests(claim: &NodeClaim) -> Result<ResourceList, CloudProviderError> {
    let mut requests = ResourceList::new();
    for (resource, q) in claim.spec.resources.iter().flat_map(|r| r.requests.iter()) {
        let v: Quantity = q.parse().map_err(|e| {
            CloudProviderError::create("InvalidResources", format!("spec.resources.requests.{resource}: {e}"))
        })?;
        requests.insert(resource, v);
    }
    Ok(requests)
}

/// Whether the claim allows the capacity type.
fn allows(reqs: &Requirements, capacity_type: &str) -> bool {
    reqs.get_ref(CAPACITY_TYPE).is_none_or(|r| r.has(capacity_type))
}

/// An offering the launch may use: available, compatible with the claim, of the capacity type.
fn usable(o: &Offering, reqs: &Requirements, capacity_type: &str) -> bool {
    o.available && o.capacity_type() == Some(capacity_type) && reqs.intersects_ok(&o.requirements)
}

impl InstanceProvider {
    /// A provider over `api` for `cluster`.
    pub fn new(
        api: Arc<dyn FleetApi>,
        templates: LaunchTemplateProvider,
        unavailable: UnavailableOfferings,
        sleeper: Arc<dyn Sleeper>,
        cluster: ClusterInfo,
        windows: BatchWindows,
        retry: RetryPolicy,
    ) -> Self {
        let templates_clock = templates.clock();
        Self {
            fleet: Arc::new(fleet_batcher(api.clone(), windows.create_fleet)),
            describe: Arc::new(DescribeBatcher::new(api.clone(), windows.describe_instances)),
            terminate: Arc::new(TerminateBatcher::new(api.clone(), windows.terminate_instances)),
            api,
            templates,
            unavailable,
            sleeper,
            cluster,
            retry,
            reservations: None,
            failures: Arc::default(),
            metrics: None,
            windows,
            subnet_ips: SubnetIps::new(templates_clock, DEFAULT_FREE_IP_TTL),
            reserved_capacity: true,
            node_class_cel: false,
            region: String::new(),
        }
    }

    /// The AWS region launches go to (the metadata options it takes, see
    /// [`crate::launch::template::takes_imds_ipv6_option`]).
    pub fn with_region(mut self, region: &str) -> Self {
        region.clone_into(&mut self.region);
        self
    }

    /// Sets the `ReservedCapacity` feature gate (on by default). On: launch templates without a reservation
    /// carry capacity-reservation preference `none`, and a described instance is reserved only when it runs in a
    /// reservation with preference `capacity-reservations-only` ([`crate::provider::capacity_type_of`]). Off:
    /// templates leave EC2's default preference and no described instance is reserved.
    pub fn with_reserved_capacity(mut self, gate: bool) -> Self {
        self.reserved_capacity = gate;
        self
    }

    /// The AWS `NodeClassCEL` gate (off by default): on, kubelet CEL expressions reach the user data with the
    /// values the instance types were built with; off, they are left out (as instance types ignore them).
    pub fn with_node_class_cel(mut self, gate: bool) -> Self {
        self.node_class_cel = gate;
        self
    }

    /// The `ReservedCapacity` feature gate.
    pub fn reserved_capacity(&self) -> bool {
        self.reserved_capacity
    }

    /// The launch-time subnet accounting; share it with the resolver's
    /// [`crate::nodeclass::network::SubnetProvider::share_ips`] so launches see the described free-IP counts.
    pub fn subnet_ips(&self) -> &SubnetIps {
        &self.subnet_ips
    }

    /// Reserved launches track the reservations' counts: a launch takes one, a capacity error zeroes the
    /// reservation (instead of marking the offering).
    pub fn with_capacity_reservations(mut self, reservations: Arc<CapacityReservationProvider>) -> Self {
        self.reservations = Some(reservations);
        self
    }

    /// Records into `metrics` every launch failure (`karpenter_cloudprovider_instance_launch_failures_total`),
    /// every failed `TerminateInstances` (`karpenter_cloudprovider_instance_termination_failures_total`) and every
    /// batch of the CreateFleet, DescribeInstances and TerminateInstances batchers
    /// (`karpenter_cloudprovider_batcher_batch_size`, `…_batch_time_seconds`). Call it while building the
    /// provider: the batchers are replaced by new ones (requests waiting in the old ones still run, unrecorded).
    /// The AWS provider's families ([`crate::metrics::FAMILIES`]) are declared in `metrics` now.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        crate::metrics::declare(&metrics);
        let api = &self.api;
        self.fleet = Arc::new(
            fleet_batcher(api.clone(), self.windows.create_fleet).with_metrics(CREATE_FLEET_BATCHER, metrics.clone()),
        );
        self.describe =
            Arc::new(DescribeBatcher::new(api.clone(), self.windows.describe_instances).with_metrics(metrics.clone()));
        self.terminate = Arc::new(
            TerminateBatcher::new(api.clone(), self.windows.terminate_instances).with_metrics(metrics.clone()),
        );
        self.metrics = Some(metrics);
        self
    }

    /// The launch failures counted so far, per (zone, zone id, capacity type, reason).
    pub fn launch_failures(&self) -> BTreeMap<LaunchFailure, u64> {
        self.failures.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn record_failure(&self, failure: LaunchFailure) {
        if let Some(m) = &self.metrics {
            m.cloudprovider_instance_launch_failures(
                &failure.zone,
                &failure.zone_id,
                &failure.capacity_type,
                &failure.reason,
            )
            .inc();
        }
        *self.failures.lock().unwrap_or_else(PoisonError::into_inner).entry(failure).or_default() += 1;
    }

    /// The cluster.
    pub fn cluster(&self) -> &ClusterInfo {
        &self.cluster
    }

    /// The launch-template provider.
    pub fn templates(&self) -> &LaunchTemplateProvider {
        &self.templates
    }

    /// The tags of a claim's instance (and its volumes, interfaces and fleet): [`launch_tags`] for the claim's
    /// NodePool (empty when it names none, as upstream), and the NodeClaim's own tag.
    pub fn tags(&self, claim: &NodeClaim, node_class: &EC2NodeClass) -> BTreeMap<String, String> {
        let pool =
            claim.metadata.labels.as_ref().and_then(|l| l.get(karpenter_api::labels::NODE_POOL)).cloned().or_else(
                || {
                    claim
                        .spec
                        .requirements
                        .iter()
                        .find(|r| r.key == karpenter_api::labels::NODE_POOL && r.operator == "In")
                        .and_then(|r| r.values.first().cloned())
                },
            );
        let mut tags = launch_tags(&self.cluster.name, node_class, pool.as_deref().unwrap_or_default());
        tags.insert(NODE_CLAIM_TAG.into(), claim.metadata.name.clone().unwrap_or_default());
        tags
    }

    /// Launches an instance for `claim` from `node_class`'s status, choosing among `instance_types` (the
    /// provider's list for the class, unavailable offerings marked).
    pub async fn create(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
        instance_types: &[InstanceType],
    ) -> Result<Launched, CloudProviderError> {
        self.create_in(claim, node_class, instance_types, None).await
    }

    /// [`create`](Self::create) into the node class's resolved placement group: the launch template's
    /// `Placement` names the group (and, for a partition group, the partition `choose_partition` picks), and
    /// capacity errors mark the offering within the group.
    pub async fn create_in(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
        instance_types: &[InstanceType],
        placement: Option<&PlacementGroupInfo>,
    ) -> Result<Launched, CloudProviderError> {
        let mut retried_templates = false;
        loop {
            match self.create_once(claim, node_class, instance_types, placement).await {
                Err(Retry::LaunchTemplates) if !retried_templates => retried_templates = true,
                Err(Retry::LaunchTemplates) => {
                    return Err(CloudProviderError::create("LaunchTemplateNotFound", "launch template missing twice"));
                }
                Err(Retry::Fail(e)) => return Err(e),
                Ok(l) => return Ok(l),
            }
        }
    }

    /// One launch attempt: the steps of the module docs in order. `Retry::LaunchTemplates` asks the caller to
    /// try once more after EC2 said a launch template is gone.
    async fn create_once(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
        instance_types: &[InstanceType],
        placement: Option<&PlacementGroupInfo>,
    ) -> Result<Launched, Retry> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let needs = ClaimNeeds::of(claim, instance_types, placement)?;
        let available = available_instance_types(instance_types, &needs.reqs, &needs.requests, &name)?;
        let policy = min_values_policy(claim);
        let selection = select_instance_types(&available, &needs.reqs, policy)?;
        warn_if_inflexible(&name, &needs.reqs, &selection);
        let status = node_class.status.clone().unwrap_or_default();
        // Subnets: per zone the available subnet with the most free IPs, each holding its predicted use until
        // the fleet answers.
        let min_pods = min_pods_per_zone(&selection.candidates, &needs.reqs, selection.capacity_type);
        let in_flight = self.subnet_ips.reserve(&status.subnets, |zone| min_pods.get(zone).copied().unwrap_or(0));
        let subnets: BTreeMap<&str, &str> =
            in_flight.subnets().iter().map(|(zone, s)| (zone.as_str(), s.id.as_str())).collect();
        let tags = self.tags(claim, node_class);
        let configs = self.launch_template_configs(claim, node_class, &needs, &selection, &subnets, &tags).await?;
        let overlay = claim.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(PRICE_OVERLAY_APPLIED));
        let context = if policy == MinValuesPolicy::BestEffort { None } else { node_class.spec.context.clone() };
        let target = target_capacity_type(selection.capacity_type, selection.market);
        let request = fleet_request(target, overlay, context, configs, tags);
        let response = self.create_fleet_with_retry(request.clone()).await?;
        let zones_out_of_addresses = settle_subnets(in_flight, &response);
        let context = LaunchContext {
            name: &name,
            capacity_type: selection.capacity_type,
            placement,
            scope: needs.scope.as_ref(),
            zone_ids: zone_ids(&status.subnets),
            zones_out_of_addresses,
        };
        self.outcome(&context, &request, response, &selection.candidates)
    }

    /// One fleet launch-template config per group of candidates sharing a launch template
    /// ([`template_groups`]), each template made sure to exist in EC2 first. Groups left without an override
    /// (no subnet in their offerings' zones) are dropped; none left at all is `NoCapacityOfferings`.
    async fn launch_template_configs(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
        needs: &ClaimNeeds,
        selection: &Selection,
        subnets: &BTreeMap<&str, &str>,
        tags: &BTreeMap<String, String>,
    ) -> Result<Vec<FleetLaunchTemplateConfig>, Retry> {
        let capacity_type = selection.capacity_type;
        let tenancy = tenancy(&needs.reqs);
        let amis = node_class.status.as_ref().map_or(&[][..], |s| s.amis.as_slice());
        let kubelet = node_class.spec.kubelet.as_ref().map(|k| (k, self.node_class_cel));
        let groups = template_groups(&selection.candidates, amis, &needs.reqs, &needs.requests, capacity_type, kubelet);
        let mut configs = Vec::new();
        for ((ami_id, pods, efa, reservation, reserved), (ami, its)) in &groups {
            let template = self
                .launch_template(
                    claim,
                    node_class,
                    ami,
                    *pods,
                    reserved,
                    *efa,
                    capacity_type,
                    tenancy,
                    reservation.as_deref(),
                    selection.market,
                    needs.scope.as_ref(),
                    tags,
                )
                .map_err(Retry::Fail)?;
            self.templates.ensure(&template).await.map_err(|e| create_error(&e))?;
            let overrides = group_overrides(its, &needs.reqs, capacity_type, reservation.as_deref(), subnets, ami_id);
            if !overrides.is_empty() {
                configs.push(FleetLaunchTemplateConfig { launch_template_name: template.name.clone(), overrides });
            }
        }
        if configs.is_empty() {
            return Err(CloudProviderError::create(
                "NoCapacityOfferings",
                "no capacity offerings are currently available (no AMI, subnet or offering matches)",
            )
            .into());
        }
        Ok(configs)
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_template(
        &self,
        claim: &NodeClaim,
        node_class: &EC2NodeClass,
        ami: &Ami,
        pods: i64,
        reserved: &NodeReserved,
        efa: i64,
        capacity_type: &str,
        tenancy: &str,
        reservation: Option<&str>,
        market: Option<&str>,
        placement: Option<&PlacementScope>,
        tags: &BTreeMap<String, String>,
    ) -> Result<LaunchTemplate, CloudProviderError> {
        let family = node_class.effective_ami_family().unwrap_or(AmiFamily::Al2023);
        let mut kubelet = node_class.spec.kubelet.clone().unwrap_or_default();
        if kubelet.cluster_dns.is_empty()
            && let Some(dns) = &self.cluster.dns_ip
        {
            kubelet.cluster_dns = vec![dns.clone()];
        }
        // Expressions were evaluated per instance type when the types were built: the node gets the group's values.
        if kubelet.max_pods.as_ref().and_then(MaxPods::as_static).is_none() {
            kubelet.max_pods = i32::try_from(pods).ok().map(MaxPods::Static);
        }
        if kubelet.has_expressions() {
            (kubelet.kube_reserved, kubelet.system_reserved) = reserved.clone();
        }
        // `user_data` leaves out the labels only registration may set (`is_registration_only_label`).
        let mut labels: BTreeMap<String, String> = claim.metadata.labels.clone().unwrap_or_default();
        labels.insert(CAPACITY_TYPE.into(), capacity_type.into());
        if family != AmiFamily::Custom {
            labels.insert(DO_NOT_SYNC_TAINTS.into(), "true".into());
        }
        let mut taints: Vec<Taint> = claim.spec.taints.iter().chain(&claim.spec.startup_taints).cloned().collect();
        let unregistered = Taint::new(taint_keys::UNREGISTERED, None, TaintEffect::NoExecute);
        if !taints.iter().any(|t| t.matches(&unregistered)) {
            taints.push(unregistered);
        }
        let bootstrap = BootstrapConfig {
            cluster_name: self.cluster.name.clone(),
            cluster_endpoint: self.cluster.endpoint.clone(),
            ca_bundle: self.cluster.ca_bundle.clone(),
            service_cidr: self.cluster.service_cidr.clone(),
            kubelet,
            labels,
            taints,
            instance_store_raid0: node_class.spec.instance_store_policy.is_some(),
            custom_user_data: node_class.spec.user_data.clone(),
        };
        let user_data = user_data(family, &bootstrap)
            .map_err(|e| CloudProviderError::node_class_not_ready(format!("user data: {e}")).with_source(e))?;
        let data = launch_template_data(
            node_class,
            LaunchTemplateInputs {
                ami,
                user_data,
                tenancy,
                placement: placement.map(|p| crate::launch::template::LtPlacement {
                    group_id: Some(p.group_id.clone()),
                    partition_number: p.partition,
                    tenancy: None,
                }),
                capacity_type,
                capacity_reservation_id: reservation,
                reserved_capacity: self.reserved_capacity,
                market_type: market,
                resource_tags: tags.clone(),
                ipv6: self.cluster.is_ipv6(),
                efa_count: efa,
                region: &self.region,
            },
        );
        // The template is the claim's NodePool's: tagged with it as the instance is (`tags` are the launch tags).
        let node_pool = tags.get(NODE_POOL_TAG).map_or("", String::as_str);
        Ok(LaunchTemplate::new(data, launch_template_tags(&self.cluster.name, node_class, node_pool)))
    }

    async fn create_fleet_with_retry(&self, request: CreateFleetRequest) -> Result<CreateFleetResponse, Retry> {
        let mut attempt = 0;
        loop {
            match create_fleet(&self.fleet, request.clone()).await {
                Ok(r) => return Ok(r),
                Err(e) if e.kind == AwsErrorKind::Throttled && attempt + 1 < self.retry.attempts => {
                    let wait = self.retry.backoff(attempt);
                    tracing::debug!(error = %e, ?wait, "CreateFleet throttled; retrying");
                    self.sleeper.sleep(wait).await;
                    attempt += 1;
                }
                Err(e) if e.kind == AwsErrorKind::InsufficientCapacity => {
                    return Err(CloudProviderError::insufficient_capacity(vec![], e.to_string()).with_source(e).into());
                }
                Err(e) if is_launch_template_not_found(&e.code) => {
                    for c in &request.launch_template_configs {
                        self.templates.invalidate(&c.launch_template_name);
                    }
                    return Err(Retry::LaunchTemplates);
                }
                Err(e) => return Err(create_error(&e).into()),
            }
        }
    }

    /// Marks what a capacity error refused: for reserved launches the reservations of that (type, zone) when
    /// their counts are tracked (else the offering), the offering within the placement group for group launches
    /// (the whole zone of a spread group at its limit), else the offering.
    fn mark_capacity_error(
        &self,
        context: &LaunchContext<'_>,
        e: &crate::launch::fleet::FleetError,
        candidates: &[InstanceType],
    ) -> Option<OfferingRef> {
        let (Some(it), Some(zone)) = (&e.instance_type, &e.availability_zone) else { return None };
        let o = OfferingRef::new(it, zone, context.capacity_type);
        if let (Some(group), Some(scope)) = (context.placement, context.scope)
            && group.is_spread()
            && is_spread_limit_error(e)
        {
            self.unavailable.mark_group_zone(&scope.group_id, zone);
            return Some(o);
        }
        if context.capacity_type == CAPACITY_TYPE_RESERVED
            && let Some(tracker) = &self.reservations
        {
            let ids: BTreeSet<&str> = candidates
                .iter()
                .filter(|c| c.name == *it)
                .flat_map(|c| c.offerings.iter())
                .filter(|x| x.zone() == Some(zone.as_str()) && x.capacity_type() == Some(CAPACITY_TYPE_RESERVED))
                .filter_map(Offering::reservation_id)
                .collect();
            for id in ids {
                tracker.mark_unavailable(id);
            }
            return Some(o);
        }
        match context.scope {
            Some(scope) => self.unavailable.mark_in_group(o.clone(), scope.clone()),
            None => self.unavailable.mark(o.clone()),
        }
        Some(o)
    }

    /// The launch's result from the fleet's answer: every error is recorded and handled first
    /// ([`note_fleet_errors`](Self::note_fleet_errors)); then the launched instance, else a retry with fresh
    /// launch templates when one was missing, else the failure ([`fleet_failure`]).
    fn outcome(
        &self,
        context: &LaunchContext<'_>,
        request: &CreateFleetRequest,
        response: CreateFleetResponse,
        candidates: &[InstanceType],
    ) -> Result<Launched, Retry> {
        let (marked, template_missing) = self.note_fleet_errors(context, &response.errors, candidates);
        if let Some(instance) = response.instances.into_iter().next() {
            return self.launched(context, instance, candidates);
        }
        if template_missing {
            for c in &request.launch_template_configs {
                self.templates.invalidate(&c.launch_template_name);
            }
            return Err(Retry::LaunchTemplates);
        }
        Err(fleet_failure(context, marked, &response.errors).into())
    }

    /// Records every fleet error with a zone as a [`LaunchFailure`] and acts on it: the spot service-linked-role
    /// error makes spot unavailable; a subnet out of addresses whose zone another subnet still serves is left to
    /// the subnet accounting; capacity errors (and a spread group at its limit) mark what they refused
    /// ([`mark_capacity_error`](Self::mark_capacity_error)). Returns the offerings marked and whether EC2 said a
    /// launch template is missing.
    fn note_fleet_errors(
        &self,
        context: &LaunchContext<'_>,
        errors: &[crate::launch::fleet::FleetError],
        candidates: &[InstanceType],
    ) -> (Vec<OfferingRef>, bool) {
        let mut marked = Vec::new();
        let mut template_missing = false;
        for e in errors {
            if let Some(zone) = &e.availability_zone {
                self.record_failure(LaunchFailure {
                    zone: zone.clone(),
                    zone_id: context.zone_ids.get(zone).cloned().unwrap_or_default(),
                    capacity_type: context.capacity_type.to_owned(),
                    reason: e.error_code.clone(),
                });
            }
            if e.error_code == SPOT_SLR_CODE {
                self.unavailable.mark_capacity_type(CAPACITY_TYPE_SPOT);
            } else if e.error_code == SUBNET_OUT_OF_ADDRESSES
                && e.subnet_id.is_some()
                && e.availability_zone.as_ref().is_none_or(|z| !context.zones_out_of_addresses.contains(z))
            {
                // Another subnet still serves the zone: the subnet alone is out (marked after the fleet call).
            } else if is_ice_code(&e.error_code) || context.is_spread_limit(e) {
                marked.extend(self.mark_capacity_error(context, e, candidates));
            } else if is_launch_template_not_found(&e.error_code) {
                template_missing = true;
            }
        }
        (marked, template_missing)
    }

    /// The [`Launched`] of the fleet's instance, described by the candidate it was launched as and the offering
    /// of its zone and the launch's capacity type; a reserved launch takes one from the reservation's count.
    /// An instance type the launch did not ask for is an error.
    fn launched(
        &self,
        context: &LaunchContext<'_>,
        instance: FleetInstance,
        candidates: &[InstanceType],
    ) -> Result<Launched, Retry> {
        let capacity_type = context.capacity_type;
        let Some(it) = candidates.iter().find(|it| it.name == instance.instance_type) else {
            return Err(CloudProviderError::other(format!(
                "fleet launched {} which was not requested",
                instance.instance_type
            ))
            .into());
        };
        let offering = it.offerings.iter().find(|o| {
            o.zone() == Some(instance.availability_zone.as_str()) && o.capacity_type() == Some(capacity_type)
        });
        let reservation_id = offering.and_then(|o| o.reservation_id().map(str::to_owned));
        let reservation = offering.filter(|_| reservation_id.is_some()).map(reservation_kind);
        if let (Some(id), Some(tracker)) = (&reservation_id, &self.reservations) {
            tracker.mark_launched(id);
        }
        Ok(Launched {
            instance,
            instance_type: it.clone(),
            capacity_type: capacity_type.to_owned(),
            reservation_id,
            reservation,
            placement: context.scope.cloned(),
        })
    }

    /// This cluster's live instance with that id; `None` when EC2 does not have it, it is terminated, or it
    /// belongs to another cluster.
    pub async fn get(&self, instance_id: &str) -> Result<Option<Ec2Instance>, CloudProviderError> {
        let found = self
            .describe
            .describe(instance_id, vec![Filter::live_states()])
            .await
            .map_err(|e| api_error("DescribeInstances", e))?;
        Ok(found.filter(|i| {
            i.state != InstanceState::Terminated && i.tags.get(EKS_CLUSTER_NAME_TAG) == Some(&self.cluster.name)
        }))
    }

    /// Every live instance Karpenter launched in this cluster.
    pub async fn list(&self) -> Result<Vec<Ec2Instance>, CloudProviderError> {
        let request = DescribeInstancesRequest {
            instance_ids: vec![],
            filters: vec![
                Filter::tag_key(NODE_POOL_TAG),
                Filter::tag_key(NODE_CLASS_TAG),
                Filter::tag(EKS_CLUSTER_NAME_TAG, &self.cluster.name),
                Filter::live_states(),
            ],
        };
        let mut out = self.api.describe_instances(&request).await.map_err(|e| api_error("DescribeInstances", e))?;
        out.retain(|i| i.state != InstanceState::Terminated);
        out.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        Ok(out)
    }

    /// The pending or running instance launched for the NodeClaim named `name`, if any.
    pub async fn find_by_node_claim(&self, name: &str) -> Result<Option<Ec2Instance>, CloudProviderError> {
        let request = DescribeInstancesRequest {
            instance_ids: vec![],
            filters: vec![
                Filter::tag(NODE_CLAIM_TAG, name),
                Filter::tag(EKS_CLUSTER_NAME_TAG, &self.cluster.name),
                Filter::new("instance-state-name", ["pending", "running"]),
            ],
        };
        let mut found = self.api.describe_instances(&request).await.map_err(|e| api_error("DescribeInstances", e))?;
        found.retain(|i| matches!(i.state, InstanceState::Pending | InstanceState::Running));
        found.sort_by(|a, b| a.launch_time.cmp(&b.launch_time).then_with(|| a.instance_id.cmp(&b.instance_id)));
        Ok(found.into_iter().next())
    }

    /// Starts terminating an instance: `Ok` while it goes, `NodeClaimNotFound` once it is gone.
    pub async fn delete(&self, instance_id: &str) -> Result<(), CloudProviderError> {
        let Some(instance) = self.get(instance_id).await? else {
            return Err(CloudProviderError::not_found(format!("instance {instance_id} not found")));
        };
        if instance.state == InstanceState::ShuttingDown {
            return Ok(());
        }
        match self.terminate.terminate(instance_id).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(CloudProviderError::not_found(format!("instance {instance_id} not found"))),
            Err(e) => {
                // As upstream: a refused or failed call counts, an instance already gone (`Ok(None)`) does not.
                if let Some(m) = &self.metrics {
                    let zone_id = instance.availability_zone_id.as_deref().unwrap_or_default();
                    m.cloudprovider_instance_termination_failures(&instance.availability_zone, zone_id).inc();
                }
                Err(api_error("TerminateInstances", e))
            }
        }
    }

    /// Asks EC2 to reboot an instance (node repair's reboot): `Ok` once EC2 accepted the request (the reboot
    /// itself happens after), `NodeClaimNotFound` when the instance is gone, shutting down or another cluster's.
    /// Unbatched: reboots are rare, and one id per call keeps an unknown id from failing others' requests.
    pub async fn reboot(&self, instance_id: &str) -> Result<(), CloudProviderError> {
        let Some(instance) = self.get(instance_id).await? else {
            return Err(CloudProviderError::not_found(format!("instance {instance_id} not found")));
        };
        if instance.state == InstanceState::ShuttingDown {
            return Err(CloudProviderError::not_found(format!("instance {instance_id} is shutting down")));
        }
        match self.api.reboot_instances(&[instance_id.to_owned()]).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind == AwsErrorKind::NotFound => {
                Err(CloudProviderError::not_found(format!("instance {instance_id} not found")).with_source(e))
            }
            // Throttling, IncorrectInstanceState (it began terminating since the describe: the retry's describe
            // then says NotFound), ...: the caller retries.
            Err(e) => Err(api_error("RebootInstances", e)),
        }
    }

    /// Adds tags to an instance (post-registration tagging).
    pub async fn tag(&self, instance_id: &str, tags: &BTreeMap<String, String>) -> Result<(), CloudProviderError> {
        match self.api.create_tags(&[instance_id.to_owned()], tags).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind == AwsErrorKind::NotFound => {
                Err(CloudProviderError::not_found(format!("instance {instance_id} not found")).with_source(e))
            }
            Err(e) => Err(api_error("CreateTags", e)),
        }
    }
}

/// What the claim asks of one launch attempt.
struct ClaimNeeds {
    /// The claim's requirements, pinned to the partition chosen for a partition placement group.
    reqs: Requirements,
    /// The claim's resource requests.
    requests: ResourceList,
    /// The placement group (and partition) launched into; capacity errors are marked within it.
    scope: Option<PlacementScope>,
}

impl ClaimNeeds {
    /// The claim's requirements and requests; with a partition placement group, the partition
    /// ([`choose_partition`]) joins the requirements so only offerings of that partition are used.
    fn of(
        claim: &NodeClaim,
        instance_types: &[InstanceType],
        placement: Option<&PlacementGroupInfo>,
    ) -> Result<Self, CloudProviderError> {
        let mut reqs =
            claim.requirements().map_err(|e| CloudProviderError::create("InvalidRequirements", e.to_string()))?;
        let requests = requests(claim)?;
        let partition = placement
            .and_then(PlacementGroupInfo::partitions)
            .and_then(|n| choose_partition(&reqs, &requests, n, instance_types));
        if let Some(p) = partition {
            reqs.add(Requirement::in_values(crate::labels::PLACEMENT_GROUP_PARTITION, [p.to_string()]));
        }
        let scope = placement.map(|g| PlacementScope::new(&g.id, partition));
        Ok(Self { reqs, requests, scope })
    }
}

/// The instance types and market one fleet request uses.
#[derive(Debug)]
struct Selection {
    /// `reserved`, `spot` or `on-demand` ([`choose_capacity_type`]).
    capacity_type: &'static str,
    /// Reserved launches only: the reservation market ([`reserved_market`]).
    market: Option<&'static str>,
    /// The instance types, cheapest first, at most [`MAX_INSTANCE_TYPES`].
    candidates: Vec<InstanceType>,
}

impl LaunchContext<'_> {
    /// Whether the error says the launch's spread placement group is full in that zone (a capacity error).
    fn is_spread_limit(&self, e: &crate::launch::fleet::FleetError) -> bool {
        self.placement.is_some_and(PlacementGroupInfo::is_spread) && is_spread_limit_error(e)
    }
}

/// Whether the offering's requirements allow `value` for `key`.
fn offering_has(o: &Offering, key: &str, value: &str) -> bool {
    o.requirements.get_ref(key).is_some_and(|r| r.has(value))
}

/// Whether the instance type has a [`usable`] offering of the capacity type.
fn offers(it: &InstanceType, reqs: &Requirements, capacity_type: &str) -> bool {
    it.offerings.iter().any(|o| usable(o, reqs, capacity_type))
}

/// The instance types the claim fits (requests and requirements) that have an available compatible offering.
/// None is insufficient capacity naming every compatible offering of the types the claim fits, so the
/// scheduler avoids them all.
fn available_instance_types<'a>(
    instance_types: &'a [InstanceType],
    reqs: &Requirements,
    requests: &ResourceList,
    name: &str,
) -> Result<Vec<&'a InstanceType>, CloudProviderError> {
    let compatible: Vec<&InstanceType> = instance_types
        .iter()
        .filter(|it| requests.fits(it.allocatable()) && it.requirements.intersects_ok(reqs))
        .collect();
    let available: Vec<&InstanceType> = compatible
        .iter()
        .copied()
        .filter(|it| it.offerings.iter().any(|o| o.available && reqs.intersects_ok(&o.requirements)))
        .collect();
    if !available.is_empty() {
        return Ok(available);
    }
    let failed: BTreeSet<OfferingRef> = compatible
        .iter()
        .flat_map(|it| it.offerings.iter().filter(|o| reqs.intersects_ok(&o.requirements)).map(|o| offering_ref(it, o)))
        .collect();
    Err(CloudProviderError::insufficient_capacity(
        failed.into_iter().collect(),
        format!("all requested instance types were unavailable during launch of nodeclaim {name}"),
    ))
}

/// The claim's minValues policy: best effort once the scheduler relaxed them (the claim's annotation says
/// so), else strict.
fn min_values_policy(claim: &NodeClaim) -> MinValuesPolicy {
    if claim.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(NODE_CLAIM_MIN_VALUES_RELAXED)) {
        MinValuesPolicy::BestEffort
    } else {
        MinValuesPolicy::Strict
    }
}

/// The launch's capacity type: the first of reserved, spot, on-demand the claim allows and some available type
/// offers usably; on-demand when none is.
fn choose_capacity_type(available: &[&InstanceType], reqs: &Requirements) -> &'static str {
    [CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND]
        .into_iter()
        .find(|ct| allows(reqs, ct) && available.iter().any(|it| offers(it, reqs, ct)))
        .unwrap_or(CAPACITY_TYPE_ON_DEMAND)
}

/// The capacity type, market and instance types of the fleet request, from the available instance types:
/// those offering the capacity type usably, narrowed to one reservation market for reserved launches, without
/// exotic types and overpriced spot offerings (both kept under minValues, which need every type), then ordered
/// by price and truncated to [`MAX_INSTANCE_TYPES`] keeping minValues satisfied under `policy`.
fn select_instance_types(
    available: &[&InstanceType],
    reqs: &Requirements,
    policy: MinValuesPolicy,
) -> Result<Selection, CloudProviderError> {
    let allow = crate::labels::provider_labels().all_well_known();
    let capacity_type = choose_capacity_type(available, reqs);
    let mut candidates: Vec<InstanceType> =
        available.iter().filter(|it| offers(it, reqs, capacity_type)).map(|it| (*it).clone()).collect();
    let min_values = reqs.has_min_values();
    let market =
        if capacity_type == CAPACITY_TYPE_RESERVED { reserved_market(&mut candidates, reqs, &allow) } else { None };
    if !min_values {
        candidates = without_exotic(candidates);
    }
    if capacity_type == CAPACITY_TYPE_SPOT && !min_values && allows(reqs, CAPACITY_TYPE_ON_DEMAND) {
        drop_spot_above_on_demand(&mut candidates, reqs);
    }
    let mut pinned = reqs.clone();
    pinned.add(Requirement::in_values(CAPACITY_TYPE, [capacity_type]));
    let candidates = truncate(candidates, &pinned, &allow, MAX_INSTANCE_TYPES, policy)
        .map_err(|e| CloudProviderError::insufficient_capacity(vec![], format!("truncating instance types: {e}")))?;
    Ok(Selection { capacity_type, market, candidates })
}

/// The market of a reserved launch; one fleet request buys in one market only. When any candidate has a usable
/// capacity-block offering, the launch is a capacity-block launch of the cheapest such type alone (the
/// candidates are cut to it); else interruptible reservations among the candidates make it an
/// interruptible-reservation launch; else ordinary reservations need no market (`None`).
fn reserved_market(
    candidates: &mut Vec<InstanceType>,
    reqs: &Requirements,
    allow: &BTreeSet<String>,
) -> Option<&'static str> {
    let reservation_type = crate::labels::CAPACITY_RESERVATION_TYPE;
    let has_block = |it: &InstanceType| {
        it.offerings
            .iter()
            .any(|o| usable(o, reqs, CAPACITY_TYPE_RESERVED) && offering_has(o, reservation_type, "capacity-block"))
    };
    if candidates.iter().any(has_block) {
        candidates.retain(has_block);
        candidates.sort_by(|a, b| a.min_compatible_price(reqs, allow).total_cmp(&b.min_compatible_price(reqs, allow)));
        candidates.truncate(1);
        return Some("capacity-block");
    }
    let interruptible = crate::labels::CAPACITY_RESERVATION_INTERRUPTIBLE;
    candidates
        .iter()
        .any(|it| {
            it.offerings
                .iter()
                .any(|o| usable(o, reqs, CAPACITY_TYPE_RESERVED) && offering_has(o, interruptible, "true"))
        })
        .then_some("interruptible-capacity-reservation")
}

/// The candidates without metal and accelerator types, which cost more than a plain type that serves as well;
/// all of them when only such types are left.
fn without_exotic(candidates: Vec<InstanceType>) -> Vec<InstanceType> {
    let plain: Vec<InstanceType> = candidates.iter().filter(|it| !is_exotic(it)).cloned().collect();
    if plain.is_empty() { candidates } else { plain }
}

/// Spot offerings dearer than the cheapest usable on-demand offering among the candidates are made
/// unavailable (on-demand would be cheaper), and candidates left without a usable spot offering dropped.
/// Without an on-demand offering nothing changes.
fn drop_spot_above_on_demand(candidates: &mut Vec<InstanceType>, reqs: &Requirements) {
    let cheapest_od = candidates
        .iter()
        .flat_map(|it| it.offerings.iter().filter(|o| usable(o, reqs, CAPACITY_TYPE_ON_DEMAND)))
        .map(|o| o.price)
        .min_by(f64::total_cmp);
    let Some(limit) = cheapest_od else { return };
    for it in candidates.iter_mut() {
        for o in &mut it.offerings {
            if o.capacity_type() == Some(CAPACITY_TYPE_SPOT) && o.price > limit {
                o.available = false;
            }
        }
    }
    candidates.retain(|it| offers(it, reqs, CAPACITY_TYPE_SPOT));
}

/// An on-demand launch that could have been spot with few instance types is logged: spot would have had more
/// pools to choose from.
fn warn_if_inflexible(name: &str, reqs: &Requirements, selection: &Selection) {
    let count = selection.candidates.len();
    if selection.capacity_type == CAPACITY_TYPE_ON_DEMAND
        && allows(reqs, CAPACITY_TYPE_SPOT)
        && count < SPOT_FLEXIBILITY_WARNING
    {
        tracing::warn!(nodeclaim = %name, instance_types = count, "launching on-demand with few instance types although spot was allowed");
    }
}

/// Per zone, the smallest pod capacity among the candidates with a usable offering there: the IPs a launch
/// into that zone is predicted to take from its subnet until the fleet answers.
fn min_pods_per_zone<'a>(
    candidates: &'a [InstanceType],
    reqs: &Requirements,
    capacity_type: &str,
) -> BTreeMap<&'a str, i64> {
    let mut min_pods: BTreeMap<&str, i64> = BTreeMap::new();
    for it in candidates {
        let pods = it.capacity().pods().value().unwrap_or(0);
        for zone in it.offerings.iter().filter(|o| usable(o, reqs, capacity_type)).filter_map(Offering::zone) {
            min_pods.entry(zone).and_modify(|p| *p = (*p).min(pods)).or_insert(pods);
        }
    }
    min_pods
}

/// The instance tenancy: `default` when the claim allows it (or says nothing), else `dedicated`.
fn tenancy(reqs: &Requirements) -> &'static str {
    if reqs.get_ref(crate::labels::INSTANCE_TENANCY).is_none_or(|r| r.has("default")) { "default" } else { "dedicated" }
}

/// What instance types sharing one launch template have in common: the AMI id, the pods value (the kubelet's
/// max pods), the EFA interface count (0 unless the claim requests EFA), for reserved launches the capacity
/// reservation, and the reserved maps the kubelet gets when some are CEL expressions ([`node_reserved`]).
type GroupKey = (String, i64, i64, Option<String>, NodeReserved);

/// `kubeReserved` and `systemReserved` as a node of one instance type gets them when the node class has CEL
/// expressions: quantities as written, each expression replaced by its value for the type (which the type's
/// overhead holds), or left out with the `NodeClassCEL` gate off. Empty maps when the class has no expressions
/// (its maps are used as written).
type NodeReserved = (BTreeMap<String, String>, BTreeMap<String, String>);

/// A node class's kubelet settings and the `NodeClassCEL` gate.
type KubeletAndGate<'a> = (&'a KubeletConfiguration, bool);

fn node_reserved(kubelet: Option<KubeletAndGate<'_>>, it: &InstanceType) -> NodeReserved {
    let Some((k, cel)) = kubelet.filter(|(k, _)| k.has_expressions()) else { return NodeReserved::default() };
    let resolve = |map: &BTreeMap<String, String>, resolved: &ResourceList| -> BTreeMap<String, String> {
        map.iter()
            .filter_map(|(key, v)| match ReservedValue::parse(v) {
                ReservedValue::Quantity(_) => Some((key.clone(), v.clone())),
                ReservedValue::Expression(_) if cel => resolved.get(key).map(|q| (key.clone(), q.to_string())),
                ReservedValue::Expression(_) => None,
            })
            .collect()
    };
    let overhead = it.overhead();
    (resolve(&k.kube_reserved, &overhead.kube_reserved), resolve(&k.system_reserved, &overhead.system_reserved))
}

/// The candidates grouped by launch template ([`GroupKey`]), each group with its AMI. A reserved candidate
/// joins the group of each reservation it has a usable offering in; a candidate no AMI serves is left out.
fn template_groups<'a>(
    candidates: &'a [InstanceType],
    amis: &[Ami],
    reqs: &Requirements,
    requests: &ResourceList,
    capacity_type: &str,
    kubelet: Option<KubeletAndGate<'_>>,
) -> BTreeMap<GroupKey, (Ami, Vec<&'a InstanceType>)> {
    let wants_efa = requests.get(extended::EFA).is_some_and(|q| !q.is_zero());
    let mut groups: BTreeMap<GroupKey, (Ami, Vec<&InstanceType>)> = BTreeMap::new();
    for it in candidates {
        let Some(ami) = crate::nodeclass::ami::ami_for_instance_type(amis, &it.requirements) else {
            continue;
        };
        let pods = it.capacity().pods().value().unwrap_or(0);
        let efa = if wants_efa { it.capacity().get(extended::EFA).and_then(Quantity::value).unwrap_or(0) } else { 0 };
        let reservations: BTreeSet<Option<String>> = if capacity_type == CAPACITY_TYPE_RESERVED {
            it.offerings
                .iter()
                .filter(|o| usable(o, reqs, capacity_type))
                .map(|o| o.reservation_id().map(str::to_owned))
                .collect()
        } else {
            BTreeSet::from([None])
        };
        let reserved = node_reserved(kubelet, it);
        for r in reservations {
            groups
                .entry((ami.id.clone(), pods, efa, r, reserved.clone()))
                .or_insert_with(|| (ami.clone(), Vec::new()))
                .1
                .push(it);
        }
    }
    groups
}

/// The fleet overrides of one launch-template group: one per (instance type, zone) with a usable offering (of
/// the group's reservation, when it has one) in a zone that has a chosen subnet, the first such offering
/// giving the priority (its price: cheaper offerings are tried first).
fn group_overrides(
    its: &[&InstanceType],
    reqs: &Requirements,
    capacity_type: &str,
    reservation: Option<&str>,
    subnets: &BTreeMap<&str, &str>,
    ami_id: &str,
) -> Vec<FleetOverride> {
    let mut seen = BTreeSet::new();
    let mut overrides = Vec::new();
    for it in its {
        for o in it.offerings.iter().filter(|o| usable(o, reqs, capacity_type)) {
            if reservation.is_some() && o.reservation_id() != reservation {
                continue;
            }
            let Some(zone) = o.zone() else { continue };
            let Some(subnet) = subnets.get(zone) else { continue };
            if !seen.insert((it.name.clone(), zone.to_owned())) {
                continue;
            }
            overrides.push(FleetOverride {
                instance_type: it.name.clone(),
                subnet_id: Some((*subnet).to_owned()),
                image_id: Some(ami_id.to_owned()),
                availability_zone: zone.to_owned(),
                priority: o.price,
            });
        }
    }
    overrides
}

/// The fleet's target capacity type: spot, a capacity block, reserved capacity (a reserved launch in a market
/// other than capacity blocks) or on-demand (which also serves ordinary reservations, by the launch template's
/// reservation target).
fn target_capacity_type(capacity_type: &str, market: Option<&str>) -> TargetCapacityType {
    match (capacity_type, market) {
        (CAPACITY_TYPE_SPOT, _) => TargetCapacityType::Spot,
        (CAPACITY_TYPE_RESERVED, Some("capacity-block")) => TargetCapacityType::CapacityBlock,
        (CAPACITY_TYPE_RESERVED, Some(_)) => TargetCapacityType::ReservedCapacity,
        _ => TargetCapacityType::OnDemand,
    }
}

/// The CreateFleet request for one instance. The allocation strategy follows the override priorities when a
/// price overlay changed prices (`overlay`), else EC2's own price (and, for spot, capacity) ranking. `context`
/// is the node class's reserved-capacity context.
fn fleet_request(
    target: TargetCapacityType,
    overlay: bool,
    context: Option<String>,
    configs: Vec<FleetLaunchTemplateConfig>,
    tags: BTreeMap<String, String>,
) -> CreateFleetRequest {
    let spot = target == TargetCapacityType::Spot;
    CreateFleetRequest {
        target_capacity_type: target,
        total_target_capacity: 1,
        spot_allocation_strategy: spot
            .then(|| if overlay { "capacity-optimized-prioritized" } else { "price-capacity-optimized" }.to_owned()),
        on_demand_allocation_strategy: (!spot).then(|| if overlay { "prioritized" } else { "lowest-price" }.to_owned()),
        interruptible_reservations: target == TargetCapacityType::ReservedCapacity,
        context,
        launch_template_configs: configs,
        tags,
    }
}

/// Subnet accounting once the fleet answered: a subnet out of addresses is out for a while, and its zone (so
/// the offerings there) only when no other subnet of the class is left in it; the predictions of subnets the
/// fleet did not use come back. Returns the zones left without a subnet.
fn settle_subnets(in_flight: InFlightSubnets, response: &CreateFleetResponse) -> BTreeSet<String> {
    let mut zones_out_of_addresses = BTreeSet::new();
    for e in response.errors.iter().filter(|e| e.error_code == SUBNET_OUT_OF_ADDRESSES) {
        if let Some(zone) = e.subnet_id.as_deref().and_then(|s| in_flight.out_of_addresses(s)) {
            zones_out_of_addresses.insert(zone);
        }
    }
    in_flight.settle(response.instances.iter().filter_map(|i| i.subnet_id.as_deref()));
    zones_out_of_addresses
}

/// Zone name → zone id of the node class's subnets (subnets without a zone id left out).
fn zone_ids(subnets: &[crate::api::Subnet]) -> BTreeMap<String, String> {
    subnets.iter().filter_map(|s| Some((s.zone.clone(), s.zone_id.clone()?))).collect()
}

/// The type and interruptibility of a reserved offering's reservation (`default` when it does not say).
fn reservation_kind(o: &Offering) -> (String, bool) {
    let kind = o
        .requirements
        .get_ref(crate::labels::CAPACITY_RESERVATION_TYPE)
        .map_or_else(|| "default".to_owned(), |r| r.any());
    let interruptible = offering_has(o, crate::labels::CAPACITY_RESERVATION_INTERRUPTIBLE, "true");
    (kind, interruptible)
}

/// The error of a launch that got no instance. Only capacity errors (or none at all) make it insufficient
/// capacity naming the offerings marked, so the scheduler retries elsewhere; otherwise the first other error
/// gives the reason.
fn fleet_failure(
    context: &LaunchContext<'_>,
    mut marked: Vec<OfferingRef>,
    errors: &[crate::launch::fleet::FleetError],
) -> CloudProviderError {
    let all_ice = !errors.is_empty()
        && errors
            .iter()
            .all(|e| is_ice_code(&e.error_code) || e.error_code == SPOT_SLR_CODE || context.is_spread_limit(e));
    if all_ice || errors.is_empty() {
        marked.sort();
        marked.dedup();
        return CloudProviderError::insufficient_capacity(
            marked,
            format!("no capacity for nodeclaim {}: {}", context.name, describe_errors(errors)),
        );
    }
    let first = errors.iter().find(|e| !is_ice_code(&e.error_code)).or(errors.first());
    let (reason, message) = first.map_or(("LaunchFailed", String::new()), |e| {
        (reason_for_code(&e.error_code), format!("{}: {}", e.error_code, e.error_message))
    });
    CloudProviderError::create(reason, message)
}

fn describe_errors(errors: &[crate::launch::fleet::FleetError]) -> String {
    if errors.is_empty() {
        return "the fleet launched nothing".into();
    }
    let mut v: Vec<String> = errors
        .iter()
        .map(|e| {
            format!(
                "{} ({}/{})",
                e.error_code,
                e.instance_type.as_deref().unwrap_or("?"),
                e.availability_zone.as_deref().unwrap_or("?")
            )
        })
        .collect();
    v.sort();
    v.dedup();
    v.join(", ")
}

enum Retry {
    LaunchTemplates,
    Fail(CloudProviderError),
}

impl From<CloudProviderError> for Retry {
    fn from(e: CloudProviderError) -> Self {
        Retry::Fail(e)
    }
}

#[cfg(test)]
mod tests;
