//! [`AwsCloudProvider`]: the AWS implementation of [`CloudProvider`], SDK-free
//! over the narrow API traits ([`FleetApi`], [`LaunchTemplateApi`], [`InstanceTypeApi`]).
//!
//! * `create` reads the claim's EC2NodeClass through the injected [`NodeClassLookup`] (missing or terminating ⇒
//!   `InsufficientCapacity`; `Ready=False` or stale ⇒ `NodeClassNotReady`; readiness unknown ⇒ `Create`
//!   `NodeClassReadinessUnknown`), then — serialised per NodeClaim name — looks for a live instance tagged with
//!   the claim's name (a create retried after a restart finds it), and otherwise launches through the
//!   [`InstanceProvider`] from the class's status.
//! * `delete` terminates (`Ok` while terminating, `NodeClaimNotFound` once gone); `get` and `list` describe this
//!   cluster's instances (tag `eks:eks-cluster-name`); shutting-down instances carry a deletion timestamp.
//! * `instance_types` lists the pool's class's types ([`InstanceTypeProvider`]); a missing class gives none.
//! * `is_drifted` fills [`InstanceFacts`] from DescribeInstances and asks [`crate::drift::is_drifted`].
//!
//! With [`AwsCloudProvider::with_placement_groups`], a class's `spec.placementGroupSelector` is resolved (through
//! the resolver's one-minute cache) for instance types (the group's requirements on every offering), launches
//! (the launch template's `Placement`, the claim's `placement-group-id`/`-partition` labels) and drift (the
//! claim's label against the resolved id). A selector that resolves to no available group makes `create` fail
//! (`PlacementGroupNotFound`), `instance_types` list nothing, and skips the placement-group drift check (as does
//! an error resolving it). With [`AwsCloudProvider::with_capacity_reservations`], reserved offerings follow the
//! reservations' tracked instance counts: a reserved launch takes one, a capacity error or a reservation
//! interruption ([`InterruptionHook`]) zeroes it, a reserved instance found gone on delete gives one back.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::api::EC2NodeClass;
use crate::api::{GROUP, KIND, conditions as nc_conditions};
use crate::labels as aws_labels;
use crate::labels::annotations::INSTANCE_PROFILE_NAME;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use karpenter_api::condition::Conditions;
use karpenter_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::labels::{
    CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT, INSTANCE_TYPE, NODE_POOL, ZONE,
};
use karpenter_api::nodeclaim::{NodeClaimSpec, NodeClaimStatus, NodeClassReference};
use karpenter_api::{ConditionStatus, NodeClaim, NodePool, ProviderLabels};
use karpenter_cloudprovider::launch::{k8s_time, resource_map};
use karpenter_cloudprovider::{
    Clock, CloudProvider, CloudProviderError, DriftReason, NodeClassKind, NodeClassLookup, RepairAction, RepairPolicy,
    Sleeper, get_node_class,
};
use karpenter_requirements::{InstanceType, Operator};

use crate::drift::{DriftContext, InstanceFacts};
use crate::instancetypes::{
    InstanceTypeApi, InstanceTypeProvider, InstanceTypeProviderError, InstanceTypeProviderOptions, SharedPrices,
};
use crate::launch::fleet::{Ec2Instance, FleetApi, InstanceState, NODE_CLASS_TAG, NODE_POOL_TAG};
use crate::launch::ice::UnavailableOfferings;
use crate::launch::instance::{BatchWindows, ClusterInfo, InstanceProvider, Launched, RetryPolicy};
use crate::launch::template::{CapacityReservationPreference, LaunchTemplateApi, LaunchTemplateProvider};
use crate::nodeclass::reservation::{CapacityReservationProvider, PlacementGroupInfo, PlacementGroupProvider};
use crate::queue::{InstanceClaim, InterruptionHook};

/// The provider's name.
pub const PROVIDER_NAME: &str = "aws";

/// The API implementations the provider runs on.
#[derive(Clone, Debug)]
pub struct AwsApis {
    /// CreateFleet, DescribeInstances, TerminateInstances, RebootInstances, CreateTags.
    pub fleet: Arc<dyn FleetApi>,
    /// Launch templates.
    pub launch_templates: Arc<dyn LaunchTemplateApi>,
    /// The instance-type catalogue.
    pub instance_types: Arc<dyn InstanceTypeApi>,
}

/// Options of [`AwsCloudProvider`].
#[derive(Clone, Debug)]
pub struct AwsCloudProviderOptions {
    /// Cluster facts (name, endpoint, CA, service CIDR, kube-dns IP).
    pub cluster: ClusterInfo,
    /// Instance-type provider options (region, settings, refresh interval).
    pub instance_types: InstanceTypeProviderOptions,
    /// Batching windows (upstream's by default).
    pub windows: BatchWindows,
    /// Throttling retries of CreateFleet.
    pub retry: RetryPolicy,
    /// The `ReservedCapacity` feature gate (on by default): launch templates' capacity-reservation preference
    /// and the capacity type of described instances ([`capacity_type_of`]).
    pub reserved_capacity: bool,
    /// The AWS `RebootForRepair` gate (off by default): `reboot` calls RebootInstances and the repair policies
    /// include a reboot ([`repair_policies`]); off, `reboot` answers `NotImplemented`.
    pub reboot_for_repair: bool,
}

impl AwsCloudProviderOptions {
    /// Defaults for a cluster in a region.
    pub fn new(cluster: ClusterInfo, region: &str) -> Self {
        Self {
            cluster,
            instance_types: InstanceTypeProviderOptions::new(region),
            windows: BatchWindows::default(),
            retry: RetryPolicy::default(),
            reserved_capacity: true,
            reboot_for_repair: false,
        }
    }
}

/// See the module docs. Clones share every cache.
#[derive(Clone)]
pub struct AwsCloudProvider {
    node_classes: Arc<dyn NodeClassLookup>,
    instance_types: InstanceTypeProvider,
    instances: InstanceProvider,
    clock: Arc<dyn Clock>,
    labels: Arc<ProviderLabels>,
    create_locks: Arc<Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>>,
    placement_groups: Option<Arc<PlacementGroupProvider>>,
    reservations: Option<Arc<CapacityReservationProvider>>,
    reboot_for_repair: bool,
}

/// The placement group of a class: none (no selector), resolved, or a selector that resolves to nothing.
enum Placement {
    None,
    Resolved(PlacementGroupInfo),
    NotFound(String),
}

/// The selector as text, for messages.
fn selector_text(s: &crate::api::PlacementGroupSelector) -> String {
    match (&s.id, &s.name) {
        (Some(id), _) => format!("id {id}"),
        (None, Some(name)) => format!("name {name}"),
        (None, None) => "(empty)".into(),
    }
}

impl fmt::Debug for AwsCloudProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCloudProvider").field("cluster", &self.instances.cluster().name).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The instance id of an AWS provider id (`aws:///<zone>/<id>`).
pub fn instance_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    rest.rsplit('/').next().filter(|id| id.starts_with("i-"))
}

/// `aws:///<zone>/<instance id>`.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// The capacity type of a described instance: `spot` with a spot request; `reserved` when the
/// `ReservedCapacity` gate is on and it runs in a reservation with preference `capacity-reservations-only` (what
/// Karpenter's reserved launch templates set); else `on-demand` — which includes an instance EC2 placed in an
/// open reservation (preference `open`), or one whose reservation ended.
pub fn capacity_type_of(instance: &Ec2Instance, reserved_capacity: bool) -> &'static str {
    let reservations_only = instance.capacity_reservation_preference.as_deref()
        == Some(CapacityReservationPreference::CapacityReservationsOnly.as_str());
    if instance.spot_instance_request_id.is_some() {
        CAPACITY_TYPE_SPOT
    } else if reserved_capacity && instance.capacity_reservation_id.is_some() && reservations_only {
        CAPACITY_TYPE_RESERVED
    } else {
        CAPACITY_TYPE_ON_DEMAND
    }
}

/// The spec of a NodeClaim made from a described instance: only the node class reference is known.
fn described_spec(node_class: &str) -> NodeClaimSpec {
    let v = serde_json::json!({"requirements": [], "nodeClassRef": {"group": GROUP, "kind": KIND, "name": node_class}});
    match serde_json::from_value(v) {
        Ok(spec) => spec,
        // The literal above always decodes; keep a total function anyway.
        Err(_) => NodeClaimSpec {
            taints: vec![],
            startup_taints: vec![],
            requirements: vec![],
            resources: None,
            node_class_ref: NodeClassReference::new(GROUP, KIND, node_class),
            termination_grace_period: None,
            expire_after: karpenter_api::NillableDuration::from_static("720h"),
        },
    }
}

const RESERVATION_KEYS: [&str; 3] = [
    aws_labels::CAPACITY_RESERVATION_ID,
    aws_labels::CAPACITY_RESERVATION_TYPE,
    aws_labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
];

/// Facts of a launched or described instance, for the NodeClaim the provider returns.
struct InstanceView<'a> {
    instance_id: &'a str,
    instance_type_name: &'a str,
    zone: &'a str,
    capacity_type: &'a str,
    image_id: Option<&'a str>,
    reservation: Option<(&'a str, &'a str, bool)>,
    launch_time: Option<DateTime<Utc>>,
    node_pool: Option<&'a str>,
    terminating: bool,
    placement_group: Option<(&'a str, Option<i32>)>,
}

impl AwsCloudProvider {
    /// A provider over `apis`.
    pub fn new(
        apis: AwsApis,
        node_classes: Arc<dyn NodeClassLookup>,
        clock: Arc<dyn Clock>,
        sleeper: Arc<dyn Sleeper>,
        prices: SharedPrices,
        options: AwsCloudProviderOptions,
    ) -> Self {
        let unavailable = UnavailableOfferings::new(clock.clone());
        let templates = LaunchTemplateProvider::new(apis.launch_templates, clock.clone(), &options.cluster.name);
        // One gate for both: user data renders the kubelet values the instance types were built with.
        let node_class_cel = options.instance_types.node_class_cel;
        let region = options.instance_types.region.clone();
        let instance_types = InstanceTypeProvider::new(
            apis.instance_types,
            clock.clone(),
            prices,
            unavailable.clone(),
            options.instance_types,
        );
        let instances = InstanceProvider::new(
            apis.fleet,
            templates,
            unavailable,
            sleeper,
            options.cluster,
            options.windows,
            options.retry,
        )
        .with_reserved_capacity(options.reserved_capacity)
        .with_node_class_cel(node_class_cel)
        .with_region(&region);
        Self {
            reboot_for_repair: options.reboot_for_repair,
            node_classes,
            instance_types,
            instances,
            clock,
            labels: Arc::new(crate::labels::provider_labels()),
            create_locks: Arc::default(),
            placement_groups: None,
            reservations: None,
        }
    }

    /// Resolves node classes' placement-group selectors through `groups` (share the node class resolver's).
    pub fn with_placement_groups(mut self, groups: Arc<PlacementGroupProvider>) -> Self {
        self.placement_groups = Some(groups);
        self
    }

    /// Tracks capacity reservations' instance counts in `reservations` (share the node class resolver's, whose
    /// describes seed them).
    pub fn with_capacity_reservations(mut self, reservations: Arc<CapacityReservationProvider>) -> Self {
        self.instance_types = self.instance_types.with_capacity_reservations(reservations.clone());
        self.instances = self.instances.with_capacity_reservations(reservations.clone());
        self.reservations = Some(reservations);
        self
    }

    /// Records the launches' own families into `metrics`: launch failures
    /// (`karpenter_cloudprovider_instance_launch_failures_total`), failed `TerminateInstances`
    /// (`karpenter_cloudprovider_instance_termination_failures_total`) and the EC2 request batchers' batches
    /// (`karpenter_cloudprovider_batcher_batch_size`, `karpenter_cloudprovider_batcher_batch_time_seconds`); call it
    /// while building the provider.
    pub fn with_metrics(mut self, metrics: Arc<karpenter_runtime::metrics::Metrics>) -> Self {
        self.instances = self.instances.with_metrics(metrics);
        self
    }

    /// The class's placement group.
    async fn placement(&self, class: &EC2NodeClass) -> Result<Placement, CloudProviderError> {
        let Some(selector) = &class.spec.placement_group_selector else { return Ok(Placement::None) };
        let what = selector_text(selector);
        let Some(groups) = &self.placement_groups else {
            return Ok(Placement::NotFound(format!("placement groups are not resolved by this provider ({what})")));
        };
        match groups.resolve(selector).await {
            Ok(Some(group)) => Ok(Placement::Resolved(group)),
            Ok(None) => Ok(Placement::NotFound(format!(
                "placementGroupSelector {what} of EC2NodeClass {} matches no available placement group",
                class.metadata.name.as_deref().unwrap_or_default()
            ))),
            Err(e) => Err(CloudProviderError::other(format!("resolving placement group {what}: {e}")).with_source(e)),
        }
    }

    /// The instance-type provider (refresh controller, metrics).
    pub fn instance_type_provider(&self) -> &InstanceTypeProvider {
        &self.instance_types
    }

    /// The instance provider (tagging, garbage collection).
    pub fn instance_provider(&self) -> &InstanceProvider {
        &self.instances
    }

    /// The launch-template provider (launch-template GC, node class finalizer).
    pub fn launch_templates(&self) -> &LaunchTemplateProvider {
        self.instances.templates()
    }

    /// The unavailable-offerings cache (the interruption handler marks spot interruptions).
    /// The zone of the claim's instance when an ARC zonal shift moved the cluster away from it
    /// (`crate::zonalshift`).
    fn shifted_zone_of<'a>(&self, node_claim: &'a NodeClaim) -> Option<&'a str> {
        let zone = node_claim.metadata.labels.as_ref()?.get(karpenter_api::labels::ZONE)?;
        self.instance_types.unavailable().is_zone_shifted(zone).then_some(zone.as_str())
    }

    pub fn unavailable_offerings(&self) -> &UnavailableOfferings {
        self.instance_types.unavailable()
    }

    fn lookup(&self, reference: &NodeClassReference) -> Result<Option<EC2NodeClass>, CloudProviderError> {
        let what = format!("{} {}", reference.kind, reference.name);
        if reference.group != GROUP || reference.kind != KIND {
            return Err(CloudProviderError::create(
                "UnsupportedNodeClass",
                format!("{what} ({}) is not an EC2NodeClass", reference.group),
            ));
        }
        get_node_class(&*self.node_classes, GROUP, KIND, &reference.name)
            .map_err(|e| CloudProviderError::node_class_not_ready(format!("{what} does not decode")).with_source(e))
    }

    /// The claim's node class, ready for launches.
    fn ready_node_class(&self, reference: &NodeClassReference) -> Result<EC2NodeClass, CloudProviderError> {
        let what = format!("EC2NodeClass {}", reference.name);
        let Some(class) = self.lookup(reference)? else {
            return Err(CloudProviderError::insufficient_capacity(vec![], format!("{what} not found")));
        };
        if class.metadata.deletion_timestamp.is_some() {
            return Err(CloudProviderError::insufficient_capacity(vec![], format!("{what} is terminating")));
        }
        let ready = class.status.as_ref().and_then(|s| s.condition(nc_conditions::READY));
        match ready.map(|c| (c.status, c.observed_generation)) {
            Some((ConditionStatus::True, observed)) => {
                if let (Some(o), Some(g)) = (observed, class.metadata.generation)
                    && o != g
                {
                    return Err(CloudProviderError::node_class_not_ready(format!(
                        "{what} readiness is stale (observed generation {o}, generation {g})"
                    )));
                }
                Ok(class)
            }
            Some((ConditionStatus::False, _)) => {
                let why = ready.map(|c| c.message.clone()).unwrap_or_default();
                Err(CloudProviderError::node_class_not_ready(format!("{what} is not ready: {why}")))
            }
            _ => Err(CloudProviderError::create("NodeClassReadinessUnknown", format!("{what} readiness is unknown"))),
        }
    }

    async fn list_instance_types(&self, class: &EC2NodeClass) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        self.list_instance_types_in(class, None).await
    }

    async fn list_instance_types_in(
        &self,
        class: &EC2NodeClass,
        placement: Option<&PlacementGroupInfo>,
    ) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        self.instance_types.list_in(class, placement).await.map_err(|e| match e {
            InstanceTypeProviderError::NodeClass(e) => {
                CloudProviderError::node_class_not_ready(format!("kubelet settings: {e}")).with_source(e)
            }
            InstanceTypeProviderError::Api(e) => {
                CloudProviderError::other(format!("listing instance types: {e}")).with_source(e)
            }
        })
    }

    /// The NodeClaim for an instance: labels (the instance type's single-valued requirements, zone, zone id,
    /// capacity type, reservation, NodePool), capacity and allocatable, provider id, image, launch time.
    fn node_claim(
        &self,
        base: Option<&NodeClaim>,
        view: &InstanceView<'_>,
        it: Option<&InstanceType>,
        class: Option<&EC2NodeClass>,
    ) -> NodeClaim {
        let mut labels = BTreeMap::new();
        if let Some(it) = it {
            for r in it.requirements.iter() {
                if r.operator() == Operator::In
                    && r.values().len() == 1
                    && !RESERVATION_KEYS.contains(&r.key())
                    && r.key() != aws_labels::ZONE_ID
                {
                    labels.insert(r.key().to_owned(), r.any());
                }
            }
        }
        labels.insert(INSTANCE_TYPE.into(), view.instance_type_name.to_owned());
        labels.insert(ZONE.into(), view.zone.to_owned());
        labels.insert(CAPACITY_TYPE.into(), view.capacity_type.to_owned());
        if let Some(zone_id) = class
            .and_then(|c| c.status.as_ref())
            .and_then(|s| s.subnets.iter().find(|s| s.zone == view.zone))
            .and_then(|s| s.zone_id.clone())
        {
            labels.insert(aws_labels::ZONE_ID.into(), zone_id);
        }
        if let Some((id, kind, interruptible)) = view.reservation {
            labels.insert(aws_labels::CAPACITY_RESERVATION_ID.into(), id.to_owned());
            labels.insert(aws_labels::CAPACITY_RESERVATION_TYPE.into(), kind.to_owned());
            labels.insert(aws_labels::CAPACITY_RESERVATION_INTERRUPTIBLE.into(), interruptible.to_string());
        }
        if let Some(pool) = view.node_pool {
            labels.insert(NODE_POOL.into(), pool.to_owned());
        }
        if let Some((group, partition)) = view.placement_group {
            labels.insert(aws_labels::PLACEMENT_GROUP_ID.into(), group.to_owned());
            if let Some(p) = partition {
                labels.insert(aws_labels::PLACEMENT_GROUP_PARTITION.into(), p.to_string());
            }
        }
        // For a launch, the claim's requirements and labels go over what the instance resolved (one rule for every
        // provider); an instance listed without its claim carries only what it resolved.
        let labels = match base {
            Some(claim) => karpenter_cloudprovider::launch::launched_claim_labels(labels, claim),
            None => labels,
        };
        let mut annotations = base.and_then(|c| c.metadata.annotations.clone()).unwrap_or_default();
        if let Some(class) = class {
            // The class's own hash annotations, written by the status controller with the CA bundle in the
            // hash: recomputing here without it would make every claim look drifted.
            annotations.extend(crate::api::hash::claim_hash_annotations(class));
            if let Some(profile) = class.status.as_ref().and_then(|s| s.instance_profile.clone()) {
                annotations.insert(INSTANCE_PROFILE_NAME.into(), profile);
            }
        }
        let now = self.clock.now();
        let metadata = ObjectMeta {
            name: base.and_then(|c| c.metadata.name.clone()),
            uid: base.and_then(|c| c.metadata.uid.clone()),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            creation_timestamp: k8s_time(view.launch_time.unwrap_or(now)),
            deletion_timestamp: if view.terminating { k8s_time(now) } else { None },
            ..ObjectMeta::default()
        };
        let status = NodeClaimStatus {
            provider_id: Some(provider_id(view.zone, view.instance_id)),
            image_id: view.image_id.map(str::to_owned),
            capacity: it.map(|it| resource_map(it.capacity())).unwrap_or_default(),
            allocatable: it.map(|it| resource_map(it.allocatable())).unwrap_or_default(),
            ..NodeClaimStatus::default()
        };
        let spec = match base {
            Some(c) => c.spec.clone(),
            None => described_spec(class.and_then(|c| c.metadata.name.as_deref()).unwrap_or_default()),
        };
        NodeClaim { metadata, spec, status: Some(status) }
    }

    fn launched_claim(&self, claim: &NodeClaim, class: &EC2NodeClass, l: &Launched) -> NodeClaim {
        let (kind, interruptible) = l.reservation.clone().unwrap_or_default();
        let view = InstanceView {
            instance_id: &l.instance.instance_id,
            instance_type_name: &l.instance.instance_type,
            zone: &l.instance.availability_zone,
            capacity_type: &l.capacity_type,
            image_id: l.instance.image_id.as_deref(),
            reservation: l.reservation_id.as_deref().map(|id| (id, kind.as_str(), interruptible)),
            launch_time: Some(self.clock.now()),
            node_pool: None,
            terminating: false,
            placement_group: l.placement.as_ref().map(|p| (p.group_id.as_str(), p.partition)),
        };
        self.node_claim(Some(claim), &view, Some(&l.instance_type), Some(class))
    }

    /// The NodeClaim of a described instance (the instance type resolved through the node class named by its
    /// tag, when that class still exists).
    async fn described_claim(&self, base: Option<&NodeClaim>, i: &Ec2Instance) -> NodeClaim {
        let class = match i.tags.get(NODE_CLASS_TAG) {
            Some(name) => self.lookup(&NodeClassReference::new(GROUP, KIND, name)).ok().flatten(),
            None => None,
        };
        let its = match &class {
            Some(c) => self.list_instance_types(c).await.ok(),
            None => None,
        };
        let it = its.as_ref().and_then(|its| its.iter().find(|it| it.name == i.instance_type));
        let capacity_type = capacity_type_of(i, self.instances.reserved_capacity());
        // Reservation labels only for reserved capacity (not for an instance in an open reservation).
        let reservation = i.capacity_reservation_id.as_deref().filter(|_| capacity_type == CAPACITY_TYPE_RESERVED);
        let reservation = reservation.and_then(|id| {
            let r = class.as_ref()?.status.as_ref()?.capacity_reservations.iter().find(|r| r.id == id)?;
            let kind = match r.reservation_type {
                crate::api::CapacityReservationType::CapacityBlock => "capacity-block",
                _ => "default",
            };
            Some((id, kind, r.interruptible))
        });
        let view = InstanceView {
            instance_id: &i.instance_id,
            instance_type_name: &i.instance_type,
            zone: &i.availability_zone,
            capacity_type,
            image_id: i.image_id.as_deref(),
            reservation,
            launch_time: i.launch_time,
            node_pool: i.tags.get(NODE_POOL_TAG).map(String::as_str),
            terminating: matches!(i.state, InstanceState::ShuttingDown | InstanceState::Terminated),
            placement_group: i.placement_group_id.as_deref().map(|g| (g, None)),
        };
        self.node_claim(base, &view, it, class.as_ref())
    }

    fn claim_lock(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.create_locks).entry(name.to_owned()).or_default().clone()
    }

    fn release_claim_lock(&self, name: &str, held: &Arc<tokio::sync::Mutex<()>>) {
        let mut locks = lock(&self.create_locks);
        // Only the map and this caller hold it: nobody waits, drop the entry.
        if Arc::strong_count(held) <= 2 {
            locks.remove(name);
        }
    }
}

#[async_trait]
impl CloudProvider for AwsCloudProvider {
    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let name = node_claim
            .metadata
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| CloudProviderError::create("InvalidNodeClaim", "the NodeClaim has no name"))?;
        let class = self.ready_node_class(&node_claim.spec.node_class_ref)?;
        let held = self.claim_lock(&name);
        let result = {
            let _guard = held.lock().await;
            match self.instances.find_by_node_claim(&name).await {
                Ok(Some(existing)) => Ok(self.described_claim(Some(node_claim), &existing).await),
                Ok(None) => match self.placement(&class).await {
                    Ok(Placement::NotFound(why)) => Err(CloudProviderError::create("PlacementGroupNotFound", why)),
                    Ok(placement) => {
                        let group = match placement {
                            Placement::Resolved(g) => Some(g),
                            _ => None,
                        };
                        match self.list_instance_types_in(&class, group.as_ref()).await {
                            Ok(its) => self
                                .instances
                                .create_in(node_claim, &class, &its, group.as_ref())
                                .await
                                .map(|l| self.launched_claim(node_claim, &class, &l)),
                            Err(e) => Err(e),
                        }
                    }
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            }
        };
        self.release_claim_lock(&name, &held);
        result
    }

    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or("");
        let Some(provider_id) = node_claim.provider_id() else {
            return Err(CloudProviderError::not_found(format!("nodeclaim {name} has no providerID")));
        };
        let Some(id) = instance_id(provider_id) else {
            return Err(CloudProviderError::not_found(format!("providerID {provider_id} is not an EC2 instance")));
        };
        if let Some(zone) = self.shifted_zone_of(node_claim) {
            // The termination controller asks again until the instance is gone, so it goes once the shift ends.
            tracing::debug!(NodeClaim = %name, instance = %id, zone = %zone,
                "not terminating an instance in a zone under an ARC zonal shift until the shift ends");
            return Ok(());
        }
        let result = self.instances.delete(id).await;
        if let (Err(e), Some(tracker)) = (&result, &self.reservations)
            && e.kind() == karpenter_cloudprovider::ErrorKind::NodeClaimNotFound
            && let Some(reservation) =
                node_claim.metadata.labels.as_ref().and_then(|l| l.get(aws_labels::CAPACITY_RESERVATION_ID))
        {
            // The reserved instance is gone: its reservation has room for one more.
            tracker.mark_terminated(reservation);
        }
        result
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        let Some(id) = instance_id(provider_id) else {
            return Err(CloudProviderError::not_found(format!("providerID {provider_id} is not an EC2 instance")));
        };
        match self.instances.get(id).await? {
            Some(i) => Ok(self.described_claim(None, &i).await),
            None => Err(CloudProviderError::not_found(format!("instance {id} not found"))),
        }
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let mut out = Vec::new();
        let offerings = self.instance_types.unavailable();
        // Instances in a zone under a zonal shift are left out, so garbage collection leaves them alone.
        for i in self.instances.list().await?.into_iter().filter(|i| !offerings.is_zone_shifted(&i.availability_zone)) {
            out.push(self.described_claim(None, &i).await);
        }
        Ok(out)
    }

    async fn instance_types(&self, node_pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        let reference = &node_pool.spec.template.spec.node_class_ref;
        match self.lookup(reference) {
            Ok(Some(class)) => match self.placement(&class).await? {
                Placement::None => self.list_instance_types(&class).await,
                Placement::Resolved(group) => self.list_instance_types_in(&class, Some(&group)).await,
                // The class cannot launch until its placement group exists (PlacementGroupReady=False).
                Placement::NotFound(why) => {
                    tracing::debug!(reason = %why, "no instance types for a node class without its placement group");
                    Ok(Arc::from(Vec::new()))
                }
            },
            // A missing class gives no instance types (the NodePool reports NodeClassReady=False).
            Ok(None) => Ok(Arc::from(Vec::new())),
            Err(e) => Err(e),
        }
    }

    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError> {
        let Some(class) = self.lookup(&node_claim.spec.node_class_ref)? else { return Ok(None) };
        let Some(id) = node_claim.provider_id().and_then(instance_id) else { return Ok(None) };
        let Some(instance) = self.instances.get(id).await? else {
            return Err(CloudProviderError::not_found(format!("instance {id} not found")));
        };
        let facts = InstanceFacts {
            image_id: instance.image_id.clone(),
            subnet_id: instance.subnet_id.clone(),
            security_group_ids: instance.security_group_ids.clone(),
            capacity_reservation_id: instance.capacity_reservation_id.clone(),
            placement_group_id: instance.placement_group_id.clone(),
        };
        let its = self.list_instance_types(&class).await.ok();
        let reqs = its.as_ref().and_then(|its| its.iter().find(|it| it.name == instance.instance_type));
        let label = node_claim.metadata.labels.as_ref().and_then(|l| l.get(aws_labels::PLACEMENT_GROUP_ID));
        let resolved = match self.placement(&class).await {
            Ok(Placement::None) => None,
            Ok(Placement::Resolved(group)) => Some(group.id),
            // Unresolvable or failed: no placement-group answer (the label compared with itself).
            Ok(Placement::NotFound(_)) | Err(_) => label.cloned(),
        };
        let context = DriftContext {
            instance_type_requirements: reqs.map(|it| &it.requirements),
            resolved_placement_group_id: resolved.as_deref(),
        };
        Ok(crate::drift::is_drifted(&class, node_claim, &facts, context))
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        repair_policies(self.reboot_for_repair)
    }

    async fn reboot(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        if !self.reboot_for_repair {
            return Err(CloudProviderError::not_implemented("Reboot"));
        }
        let name = node_claim.metadata.name.as_deref().unwrap_or("");
        let Some(provider_id) = node_claim.provider_id() else {
            return Err(CloudProviderError::not_found(format!("nodeclaim {name} has no providerID")));
        };
        let Some(id) = instance_id(provider_id) else {
            return Err(CloudProviderError::not_found(format!("providerID {provider_id} is not an EC2 instance")));
        };
        self.instances.reboot(id).await
    }

    fn name(&self) -> &str {
        PROVIDER_NAME
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind::new(GROUP, KIND)]
    }

    fn labels(&self) -> &ProviderLabels {
        &self.labels
    }
}

/// How long a repaired node's pods may take to drain where the kubelet can still evict them: long enough for
/// ordinary shutdowns, short enough that a broken node does not linger for a NodeClaim's unbounded grace period.
pub const REPAIR_DRAIN_BOUND: Duration = Duration::from_secs(10 * 60);

/// The AWS provider's node repair policies; with `reboot_for_repair` (the `RebootForRepair` gate) also a reboot
/// for `AcceleratedHardwareReady=False`. The conditions and tolerations are upstream v1.14's. The drain bounds:
///
/// * forceful (`0`) for `Ready=Unknown` (the kubelet stopped reporting: nothing on the node can evict, so waiting
///   only delays the replacement) and `KernelReady=False` (a kernel fault: evictions cannot be trusted to finish);
/// * [`REPAIR_DRAIN_BOUND`] for the rest, where the kubelet still runs and pods can shut down cleanly.
///
/// The reboot policy answers the same condition as its replace fallback (which stays, so a provider or cluster
/// without reboot still replaces), with a higher priority so it decides first: accelerator faults (GPU Xid
/// errors, Neuron device errors) are the ones EKS documents as cleared by a reboot. Its drain is forceful: the
/// pods using the faulty accelerator make no progress while they wait, and the node is back within minutes.
pub fn repair_policies(reboot_for_repair: bool) -> Vec<RepairPolicy> {
    let policy = |t: &str, s: ConditionStatus, minutes: u64, drain: Duration| RepairPolicy {
        termination_grace_period: Some(drain),
        ..RepairPolicy::replace(t, s, Duration::from_secs(minutes * 60))
    };
    let mut out = vec![
        policy("Ready", ConditionStatus::False, 30, REPAIR_DRAIN_BOUND),
        policy("Ready", ConditionStatus::Unknown, 30, Duration::ZERO),
        policy("AcceleratedHardwareReady", ConditionStatus::False, 10, REPAIR_DRAIN_BOUND),
        policy("StorageReady", ConditionStatus::False, 30, REPAIR_DRAIN_BOUND),
        policy("NetworkingReady", ConditionStatus::False, 30, REPAIR_DRAIN_BOUND),
        policy("KernelReady", ConditionStatus::False, 30, Duration::ZERO),
        policy("ContainerRuntimeReady", ConditionStatus::False, 30, REPAIR_DRAIN_BOUND),
    ];
    if reboot_for_repair {
        out.push(RepairPolicy {
            priority: 50,
            action: RepairAction::Reboot,
            ..policy("AcceleratedHardwareReady", ConditionStatus::False, 10, Duration::ZERO)
        });
    }
    out
}

/// Interruptions seen by the SQS source: a spot interruption marks its (spot, type, zone) offering; a
/// capacity-reservation interruption zeroes the reservation's tracked count (or, untracked, marks its
/// (reserved, type, zone) offering).
impl InterruptionHook for AwsCloudProvider {
    fn spot_interrupted(&self, claim: &InstanceClaim) {
        self.unavailable_offerings().spot_interrupted(claim);
    }

    fn capacity_reservation_interrupted(&self, reservation_id: &str, claim: &InstanceClaim) {
        match &self.reservations {
            Some(tracker) => tracker.mark_unavailable(reservation_id),
            None => self.unavailable_offerings().capacity_reservation_interrupted(reservation_id, claim),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
