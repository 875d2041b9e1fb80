//! [`FakeCloudProvider`]: an in-memory cloud implementing [`CloudProvider`], for tests.
//!
//! It stands in for the kwok provider: its node class is `KWOKNodeClass` (`karpenter.kwok.sh`), its labels are
//! the kwok set ([`stand_in_labels`]), its provider ids start with `kwok://`. Its instance types are whatever the
//! caller gives [`FakeOptions::new`]: there is no default catalogue, because the kwok catalogue belongs to the kwok
//! provider's crate (`karpenter_kwok::catalogue`), which depends on this one and so cannot be a dependency of it.
//! Tests that want the fake over the kwok catalogue, as most do, take it from the test kit:
//! `karpenter_testing::kwok::fake()` or `FakeOptions { clock, ..karpenter_testing::kwok::fake_options() }`
//! (feature `kwok`). Hand-made instance types work just as well where a test wants to say exactly what is on
//! offer. What the fake adds for tests:
//!
//! * **Instances** in memory, per cluster: [`FakeCloudProvider::for_cluster`] gives a view of the same cloud for
//!   another cluster (the same account), so "list finds this cluster's instances only" can be tested.
//! * **Launches** pick [`cheapest_launch_holding`]: the cheapest offering whose node holds the claim's
//!   `spec.resources.requests` (an offering with overrides judged by its own allocatable), and the instance gets
//!   that offering's capacity and allocatable; `create` is idempotent per NodeClaim name (a second create returns
//!   the same instance, also when both run concurrently).
//! * **Launch latency** through an injected [`Sleeper`] (`karpenter_testing::FakeClock` moves its time instead of
//!   waiting) and **termination delay** measured on the injected [`Clock`]: `delete` returns `Ok` and the
//!   instance is reported with a deletion timestamp until the delay has passed, then it is gone
//!   (`NodeClaimNotFound`). With the default zero delay, it is gone right after the first `delete`.
//! * **Insufficient capacity per offering** ([`FakeCloudProvider::set_insufficient_capacity`]): such offerings
//!   are reported `available: false` by `instance_types` and never launched; a create with nothing else left
//!   fails with `InsufficientCapacity` naming them.
//! * **Failure injection per method** ([`FakeCloudProvider::fail_next`], [`FakeCloudProvider::fail_always`]).
//! * **Call recording** ([`FakeCloudProvider::calls`]).
//! * **Drift** per instance ([`FakeCloudProvider::set_drifted`]).
//! * **Reboots** (node repair's `Reboot` action): `reboot` of a live instance counts one more boot of it
//!   ([`FakeCloudProvider::boot_count`], [`FakeCloudProvider::reboots`]) and changes nothing else (the instance
//!   keeps its provider id and stays in `list`); a gone, terminating or unknown instance gives
//!   `NodeClaimNotFound`. With [`FakeOptions::reboot`] `false` it answers `NotImplemented`, a cloud without
//!   in-place reboot, so callers can test their fallback to replace.
//! * **Interruption events** ([`FakeCloudProvider::inject_interruption`], read through
//!   [`FakeCloudProvider::interruption_source`]). A spot interruption also marks the instance's offering as
//!   insufficient capacity, as a real cloud's spot warning does.
//! * **Node classes** through an optional [`NodeClassLookup`]: without one every class counts as ready; with
//!   one, a missing or terminating class fails create with `InsufficientCapacity` (and gives no instance types),
//!   `Ready=False` with `NodeClassNotReady`, an unknown readiness with `Create { reason:
//!   "NodeClassReadinessUnknown" }`, as the AWS provider does.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use karpenter_api::condition::Condition;
use karpenter_api::condition::Conditions;
use karpenter_api::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, ZONE};
use karpenter_api::nodeclaim::NodeClaimStatus;
use karpenter_api::nodeclaim::{NodeClassReference, conditions};
use karpenter_api::{ConditionStatus, NodeClaim, NodePool, ProviderLabels};
use karpenter_requirements::{InstanceType, Operator, Quantity, Requirements, ResourceList};

use crate::capacity::CapacityMarks;
use crate::error::{CloudProviderError, OfferingRef};
use crate::interruption::InterruptionSource;
use crate::interruption::{InterruptionAction, InterruptionError, InterruptionEvent, InterruptionKind};
use crate::launch::{
    LaunchChoice, cheapest_launch_holding, k8s_time, out_of_capacity, resource_map, unavailable_offerings_holding,
};
use crate::node_class::{NodeClassLookup, get_node_class};
use crate::provider::{CloudProvider, DriftReason, Method, NodeClassKind, RepairPolicy};
use crate::time::{Clock, NoSleep, Sleeper, SystemClock};

/// Provider ids of fake instances start with this: the fake stands in for the kwok provider, so its instances
/// carry the kwok scheme.
const PROVIDER_ID_PREFIX: &str = "kwok://";
/// The node-class group and kind the fake serves: the kwok provider's, which it stands in for. Written out rather
/// than imported because the kwok provider's crate depends on this one.
const NODE_CLASS_GROUP: &str = "karpenter.kwok.sh";
const NODE_CLASS_KIND: &str = "KWOKNodeClass";

/// The label set of the kwok provider the fake stands in for (its instance labels well known, its node-class
/// group restricted): the default of [`FakeOptions::labels`]. Built from the group rather than imported, because
/// the kwok provider's crate depends on this one; karpenter-kwok's tests check it is that crate's set.
pub fn stand_in_labels() -> ProviderLabels {
    let key = |name: &str| format!("{NODE_CLASS_GROUP}/{name}");
    ProviderLabels::new("kwok")
        .with_well_known(
            ["instance-size", "instance-family", "instance-cpu", "instance-memory", "kwoknodeclass"].map(key),
        )
        .with_restricted_domain(NODE_CLASS_GROUP)
}

/// What the fake reads of a node class: whether it is going away and its conditions (any kind has both).
#[derive(Debug, serde::Deserialize)]
struct NodeClassView {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    status: Option<NodeClassViewStatus>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct NodeClassViewStatus {
    #[serde(default)]
    conditions: Vec<Condition>,
}

impl Conditions for NodeClassViewStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

/// How to build a [`FakeCloudProvider`]: [`FakeOptions::new`] with the catalogue, the rest filled with
/// `FakeOptions { launch_latency, ..FakeOptions::new(instance_types) }`. There is deliberately no `Default`: a
/// fake without instance types launches nothing, which a test should ask for rather than get by omission.
#[derive(Clone, Debug)]
pub struct FakeOptions {
    /// The cluster this provider view serves (default `fake-cluster`).
    pub cluster_name: String,
    /// The catalogue: what `instance_types` reports and `create` launches from.
    pub instance_types: Vec<InstanceType>,
    /// How long `create` takes, slept on [`sleeper`](Self::sleeper) (default zero).
    pub launch_latency: Duration,
    /// How long a deleted instance stays visible (terminating) on [`clock`](Self::clock) (default zero).
    pub termination_delay: Duration,
    /// Time of launches and terminations (default [`SystemClock`]).
    pub clock: Arc<dyn Clock>,
    /// Waits for the launch latency (default [`NoSleep`]).
    pub sleeper: Arc<dyn Sleeper>,
    /// Node classes; `None` treats every class as ready.
    pub node_classes: Option<Arc<dyn NodeClassLookup>>,
    /// Labels (default [`stand_in_labels`]); [`CloudProvider::name`] is `labels.name`.
    pub labels: ProviderLabels,
    /// What [`CloudProvider::repair_policies`] returns (default: node `Ready` `False` or `Unknown` for 30 min).
    pub repair_policies: Vec<RepairPolicy>,
    /// Whether `reboot` reboots (default `true`); `false` answers `NotImplemented`, as a cloud without in-place
    /// reboot does.
    pub reboot: bool,
}

impl FakeOptions {
    /// Options for a fake cloud offering `instance_types`, everything else at its default (see the fields).
    pub fn new(instance_types: Vec<InstanceType>) -> Self {
        let ready = |status| RepairPolicy::replace("Ready", status, Duration::from_secs(30 * 60));
        Self {
            cluster_name: "fake-cluster".into(),
            instance_types,
            launch_latency: Duration::ZERO,
            termination_delay: Duration::ZERO,
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(NoSleep),
            node_classes: None,
            labels: stand_in_labels(),
            repair_policies: vec![ready(ConditionStatus::False), ready(ConditionStatus::Unknown)],
            reboot: true,
        }
    }
}

/// One recorded call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The method.
    pub method: Method,
    /// What it was called with: the NodeClaim name (create, delete, is-drifted, reboot), the provider id (get),
    /// the NodePool name (instance types), empty otherwise.
    pub subject: String,
}

type ErrorFactory = Arc<dyn Fn() -> CloudProviderError + Send + Sync>;

struct Failure {
    method: Method,
    /// `None`: every call.
    remaining: Option<usize>,
    make: ErrorFactory,
}

#[derive(Clone, Debug)]
struct Instance {
    cluster: String,
    claim_name: String,
    node_claim: NodeClaim,
    offering: OfferingRef,
    terminating_at: Option<DateTime<Utc>>,
    drift: Option<DriftReason>,
    /// Boots so far: 1 at launch, one more per reboot.
    boots: u32,
}

/// State shared by every cluster view of one fake cloud.
#[derive(Debug, Default)]
struct Cloud {
    instances: BTreeMap<String, Instance>,
    by_claim: BTreeMap<(String, String), String>,
    next_id: u64,
    ice: CapacityMarks,
    queue: VecDeque<InterruptionEvent>,
    in_flight: Vec<InterruptionEvent>,
    next_event: u64,
    /// Provider ids of the instances rebooted, in order, one entry per reboot.
    reboots: Vec<String>,
}

impl Cloud {
    /// Forgets instances whose termination delay has passed.
    fn sweep(&mut self, now: DateTime<Utc>, delay: Duration) {
        let delay = chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
        let gone: Vec<String> = self
            .instances
            .iter()
            .filter(|(_, i)| i.terminating_at.is_some_and(|t| t.checked_add_signed(delay).is_none_or(|end| end <= now)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some(i) = self.instances.remove(&id) {
                self.by_claim.remove(&(i.cluster, i.claim_name));
            }
        }
    }
}

/// Per-view state: calls, failures, the catalogue with ICE applied.
#[derive(Default)]
struct Local {
    calls: Vec<Call>,
    failures: Vec<Failure>,
    effective: Option<(u64, Arc<[InstanceType]>)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The in-memory fake provider (see the module docs). Clones share everything: keep one as a handle to drive
/// the fake while the code under test holds another as `Arc<dyn CloudProvider>`.
#[derive(Clone)]
pub struct FakeCloudProvider {
    options: Arc<FakeOptions>,
    cloud: Arc<Mutex<Cloud>>,
    local: Arc<Mutex<Local>>,
}

impl fmt::Debug for FakeCloudProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeCloudProvider")
            .field("cluster", &self.options.cluster_name)
            .field("instance_types", &self.options.instance_types.len())
            .field("instances", &lock(&self.cloud).instances.len())
            .finish()
    }
}

impl FakeCloudProvider {
    /// A fake cloud with one view, for `options.cluster_name`.
    pub fn new(options: FakeOptions) -> Self {
        Self {
            options: Arc::new(options),
            cloud: Arc::new(Mutex::new(Cloud::default())),
            local: Arc::new(Mutex::new(Local::default())),
        }
    }

    /// A view of the same cloud (instances, capacity, interruptions) for another cluster, with its own calls and
    /// failures.
    pub fn for_cluster(&self, cluster_name: &str) -> Self {
        let options = FakeOptions { cluster_name: cluster_name.into(), ..(*self.options).clone() };
        Self { options: Arc::new(options), cloud: self.cloud.clone(), local: Arc::new(Mutex::new(Local::default())) }
    }

    /// The options this view was built with.
    pub fn options(&self) -> &FakeOptions {
        &self.options
    }

    // ---- capacity -------------------------------------------------------------------------------------------

    /// Marks an offering as out of capacity (or back in capacity with `false`).
    pub fn set_insufficient_capacity(&self, offering: OfferingRef, insufficient: bool) {
        lock(&self.cloud).ice.set(offering, insufficient);
    }

    /// Every offering back in capacity.
    pub fn clear_insufficient_capacity(&self) {
        lock(&self.cloud).ice.clear();
    }

    /// The offerings currently out of capacity.
    pub fn insufficient_capacity(&self) -> Vec<OfferingRef> {
        lock(&self.cloud).ice.offerings()
    }

    // ---- failures and calls ---------------------------------------------------------------------------------

    /// The next `times` calls of `method` fail with the error `make` builds (after the call is recorded).
    pub fn fail_next(
        &self,
        method: Method,
        times: usize,
        make: impl Fn() -> CloudProviderError + Send + Sync + 'static,
    ) {
        lock(&self.local).failures.push(Failure { method, remaining: Some(times), make: Arc::new(make) });
    }

    /// Every call of `method` fails with the error `make` builds, until [`clear_failures`](Self::clear_failures).
    pub fn fail_always(&self, method: Method, make: impl Fn() -> CloudProviderError + Send + Sync + 'static) {
        lock(&self.local).failures.push(Failure { method, remaining: None, make: Arc::new(make) });
    }

    /// Removes every injected failure.
    pub fn clear_failures(&self) {
        lock(&self.local).failures.clear();
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.local).calls.clone()
    }

    /// How many calls of `method` so far.
    pub fn call_count(&self, method: Method) -> usize {
        lock(&self.local).calls.iter().filter(|c| c.method == method).count()
    }

    /// Forgets the recorded calls.
    pub fn clear_calls(&self) {
        lock(&self.local).calls.clear();
    }

    // ---- instances ------------------------------------------------------------------------------------------

    /// Sets (or clears) the drift `is_drifted` reports for an instance; false when there is no such instance.
    pub fn set_drifted(&self, provider_id: &str, reason: Option<DriftReason>) -> bool {
        let mut cloud = lock(&self.cloud);
        match cloud.instances.get_mut(provider_id) {
            Some(i) => {
                i.drift = reason;
                true
            }
            None => false,
        }
    }

    /// Provider ids of this cluster's instances (terminating ones included), sorted.
    pub fn instance_ids(&self) -> Vec<String> {
        let mut cloud = lock(&self.cloud);
        cloud.sweep(self.options.clock.now(), self.options.termination_delay);
        cloud
            .instances
            .iter()
            .filter(|(_, i)| i.cluster == self.options.cluster_name)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// How many times an instance has booted: 1 after its launch, one more per accepted `reboot`; `None` when
    /// there is no such instance (or it is gone).
    pub fn boot_count(&self, provider_id: &str) -> Option<u32> {
        let mut cloud = lock(&self.cloud);
        cloud.sweep(self.options.clock.now(), self.options.termination_delay);
        cloud.instances.get(provider_id).map(|i| i.boots)
    }

    /// Provider ids of the instances this fake cloud rebooted, in order, one entry per accepted `reboot` (every
    /// cluster view's).
    pub fn reboots(&self) -> Vec<String> {
        lock(&self.cloud).reboots.clone()
    }

    /// The offering an instance was launched on.
    pub fn instance_offering(&self, provider_id: &str) -> Option<OfferingRef> {
        lock(&self.cloud).instances.get(provider_id).map(|i| i.offering.clone())
    }

    /// Launches an instance for a NodeClaim as `create` would, but without latency, node-class checks, call
    /// recording or injected failures: set up instances whose NodeClaim is gone (garbage-collection tests).
    pub fn add_instance(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        self.launch(claim)
    }

    // ---- interruptions --------------------------------------------------------------------------------------

    /// Queues an interruption event for an instance; returns it. A spot interruption of a known instance marks
    /// its offering out of capacity.
    pub fn inject_interruption(
        &self,
        provider_id: &str,
        kind: InterruptionKind,
        action: InterruptionAction,
    ) -> InterruptionEvent {
        let mut cloud = lock(&self.cloud);
        cloud.next_event += 1;
        let event = InterruptionEvent {
            ack_id: format!("event-{}", cloud.next_event),
            provider_id: provider_id.into(),
            kind,
            action,
        };
        if event.kind == InterruptionKind::SpotInterrupted
            && let Some(offering) = cloud.instances.get(provider_id).map(|i| i.offering.clone())
        {
            cloud.ice.set(offering, true);
        }
        cloud.queue.push_back(event.clone());
        event
    }

    /// The interruption queue of this fake cloud.
    pub fn interruption_source(&self) -> FakeInterruptionSource {
        FakeInterruptionSource { cloud: self.cloud.clone() }
    }

    // ---- internals ------------------------------------------------------------------------------------------

    /// Records the call and returns an injected failure, if one is due.
    fn begin(&self, method: Method, subject: &str) -> Result<(), CloudProviderError> {
        let mut local = lock(&self.local);
        local.calls.push(Call { method, subject: subject.into() });
        let due = local.failures.iter_mut().find(|f| f.method == method && f.remaining != Some(0));
        let Some(failure) = due else { return Ok(()) };
        if let Some(n) = failure.remaining.as_mut() {
            *n -= 1;
        }
        let make = failure.make.clone();
        local.failures.retain(|f| f.remaining != Some(0));
        drop(local);
        Err(make())
    }

    /// The catalogue with out-of-capacity offerings marked unavailable (cached until capacity changes).
    fn effective_catalogue(&self) -> Arc<[InstanceType]> {
        let ice = lock(&self.cloud).ice.clone();
        let version = ice.version();
        let mut local = lock(&self.local);
        if let Some((v, its)) = &local.effective
            && *v == version
        {
            return its.clone();
        }
        let mut its = self.options.instance_types.clone();
        ice.apply(&mut its);
        let its: Arc<[InstanceType]> = its.into();
        local.effective = Some((version, its.clone()));
        its
    }

    /// Checks the claim's node class (see the module docs).
    fn check_node_class(&self, reference: &NodeClassReference) -> Result<(), CloudProviderError> {
        let Some(lookup) = &self.options.node_classes else { return Ok(()) };
        let what = format!("{} {}/{}", reference.kind, reference.group, reference.name);
        if reference.group != NODE_CLASS_GROUP || reference.kind != NODE_CLASS_KIND {
            return Err(CloudProviderError::create(
                "UnsupportedNodeClass",
                format!("{what} is not a {NODE_CLASS_KIND}"),
            ));
        }
        let class: Option<NodeClassView> =
            get_node_class(&**lookup, &reference.group, &reference.kind, &reference.name).map_err(|e| {
                CloudProviderError::node_class_not_ready(format!("{what} does not decode")).with_source(e)
            })?;
        let Some(class) = class else {
            return Err(CloudProviderError::insufficient_capacity(vec![], format!("{what} not found")));
        };
        if class.metadata.deletion_timestamp.is_some() {
            return Err(CloudProviderError::insufficient_capacity(vec![], format!("{what} is terminating")));
        }
        let ready = class.status.as_ref().and_then(|s| s.condition(conditions::READY)).map(|c| c.status);
        match ready {
            Some(ConditionStatus::True) => Ok(()),
            Some(ConditionStatus::False) => {
                Err(CloudProviderError::node_class_not_ready(format!("{what} is not ready (Ready=False)")))
            }
            _ => Err(CloudProviderError::create("NodeClassReadinessUnknown", format!("{what} readiness is unknown"))),
        }
    }

    /// Picks and records a launch for the claim (idempotent per claim name).
    fn launch(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let name = claim_name(claim)?;
        let reqs: Requirements =
            claim.requirements().map_err(|e| CloudProviderError::create("InvalidRequirements", e.to_string()))?;
        let mut requests = ResourceList::new();
        for (resource, q) in claim.spec.resources.iter().flat_map(|r| r.requests.iter()) {
            let v: Quantity = q.parse().map_err(|e| {
                CloudProviderError::create("InvalidResources", format!("spec.resources.requests.{resource}: {e}"))
            })?;
            requests.insert(resource, v);
        }
        let catalogue = self.effective_catalogue();
        let now = self.options.clock.now();
        let cluster = &self.options.cluster_name;
        let mut cloud = lock(&self.cloud);
        cloud.sweep(now, self.options.termination_delay);
        if let Some(existing) =
            cloud.by_claim.get(&(cluster.clone(), name.to_owned())).and_then(|id| cloud.instances.get(id))
        {
            return Ok(existing.node_claim.clone());
        }
        let Some(choice) = cheapest_launch_holding(catalogue.iter(), &reqs, &requests) else {
            return Err(out_of_capacity(name, unavailable_offerings_holding(catalogue.iter(), &reqs, &requests)));
        };
        let Some(it) = catalogue.iter().find(|it| it.name == choice.instance_type) else {
            return Err(CloudProviderError::other("chosen instance type vanished"));
        };
        cloud.next_id += 1;
        let provider_id = format!("{PROVIDER_ID_PREFIX}{name}-{}", cloud.next_id);
        let launched = launched_claim(claim, it, &choice, &provider_id, now);
        let offering = OfferingRef::new(&choice.instance_type, &choice.zone, &choice.capacity_type);
        cloud.by_claim.insert((cluster.clone(), name.to_owned()), provider_id.clone());
        cloud.instances.insert(
            provider_id,
            Instance {
                cluster: cluster.clone(),
                claim_name: name.to_owned(),
                node_claim: launched.clone(),
                offering,
                terminating_at: None,
                drift: None,
                boots: 1,
            },
        );
        Ok(launched)
    }

    /// This cluster's live instance with that id.
    fn find(&self, cloud: &mut Cloud, provider_id: &str) -> Option<Instance> {
        cloud.sweep(self.options.clock.now(), self.options.termination_delay);
        cloud.instances.get(provider_id).filter(|i| i.cluster == self.options.cluster_name).cloned()
    }
}

fn claim_name(claim: &NodeClaim) -> Result<&str, CloudProviderError> {
    claim
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| CloudProviderError::create("InvalidNodeClaim", "the NodeClaim has no name"))
}

/// The NodeClaim `create` returns: the claim with resolved labels and the launch status.
fn launched_claim(
    claim: &NodeClaim,
    it: &InstanceType,
    choice: &LaunchChoice,
    provider_id: &str,
    now: DateTime<Utc>,
) -> NodeClaim {
    let single = |r: &karpenter_requirements::Requirement| {
        (r.operator() == Operator::In && r.values().len() == 1).then(|| (r.key().to_owned(), r.any()))
    };
    let mut resolved: BTreeMap<String, String> = it.requirements.iter().filter_map(single).collect();
    resolved.insert(INSTANCE_TYPE.into(), it.name.clone());
    resolved.insert(ZONE.into(), choice.zone.clone());
    resolved.insert(CAPACITY_TYPE.into(), choice.capacity_type.clone());
    let labels = crate::launch::launched_claim_labels(resolved, claim);
    let metadata = ObjectMeta {
        name: claim.metadata.name.clone(),
        uid: claim.metadata.uid.clone(),
        labels: Some(labels),
        annotations: claim.metadata.annotations.clone(),
        creation_timestamp: k8s_time(now),
        ..ObjectMeta::default()
    };
    let status = NodeClaimStatus {
        provider_id: Some(provider_id.into()),
        capacity: resource_map(&choice.capacity),
        allocatable: resource_map(&choice.allocatable),
        ..NodeClaimStatus::default()
    };
    NodeClaim { metadata, spec: claim.spec.clone(), status: Some(status) }
}

#[async_trait]
impl CloudProvider for FakeCloudProvider {
    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        self.begin(Method::Create, node_claim.metadata.name.as_deref().unwrap_or(""))?;
        self.check_node_class(&node_claim.spec.node_class_ref)?;
        claim_name(node_claim)?;
        // Sleep first, then check-and-launch under one lock: concurrent creates for one claim get one instance.
        self.options.sleeper.sleep(self.options.launch_latency).await;
        self.launch(node_claim)
    }

    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or("");
        self.begin(Method::Delete, name)?;
        let Some(provider_id) = node_claim.provider_id() else {
            return Err(CloudProviderError::not_found(format!("nodeclaim {name} has no providerID")));
        };
        let now = self.options.clock.now();
        let mut cloud = lock(&self.cloud);
        if self.find(&mut cloud, provider_id).is_none() {
            return Err(CloudProviderError::not_found(format!("instance {provider_id} is gone")));
        }
        if let Some(i) = cloud.instances.get_mut(provider_id)
            && i.terminating_at.is_none()
        {
            i.terminating_at = Some(now);
            i.node_claim.metadata.deletion_timestamp = k8s_time(now);
        }
        Ok(())
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.begin(Method::Get, provider_id)?;
        let mut cloud = lock(&self.cloud);
        self.find(&mut cloud, provider_id)
            .map(|i| i.node_claim)
            .ok_or_else(|| CloudProviderError::not_found(format!("instance {provider_id} not found")))
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        self.begin(Method::List, "")?;
        let mut cloud = lock(&self.cloud);
        cloud.sweep(self.options.clock.now(), self.options.termination_delay);
        Ok(cloud
            .instances
            .values()
            .filter(|i| i.cluster == self.options.cluster_name)
            .map(|i| i.node_claim.clone())
            .collect())
    }

    async fn instance_types(&self, node_pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        self.begin(Method::InstanceTypes, node_pool.metadata.name.as_deref().unwrap_or(""))?;
        let reference = &node_pool.spec.template.spec.node_class_ref;
        match self.check_node_class(reference) {
            Ok(()) => Ok(self.effective_catalogue()),
            // A missing class gives no instance types (the NodePool reports NodeClassReady=False).
            Err(CloudProviderError::InsufficientCapacity { .. }) => Ok(Arc::from(Vec::new())),
            // Not ready yet: upstream still lists the types; so does the fake.
            Err(CloudProviderError::NodeClassNotReady { .. } | CloudProviderError::Create { .. }) => {
                Ok(self.effective_catalogue())
            }
            Err(e) => Err(e),
        }
    }

    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or("");
        self.begin(Method::IsDrifted, name)?;
        let Some(provider_id) = node_claim.provider_id() else {
            return Err(CloudProviderError::not_found(format!("nodeclaim {name} has no providerID")));
        };
        let mut cloud = lock(&self.cloud);
        self.find(&mut cloud, provider_id)
            .map(|i| i.drift)
            .ok_or_else(|| CloudProviderError::not_found(format!("instance {provider_id} not found")))
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        lock(&self.local).calls.push(Call { method: Method::RepairPolicies, subject: String::new() });
        self.options.repair_policies.clone()
    }

    async fn reboot(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let name = node_claim.metadata.name.as_deref().unwrap_or("");
        self.begin(Method::Reboot, name)?;
        if !self.options.reboot {
            return Err(CloudProviderError::not_implemented("Reboot"));
        }
        let Some(provider_id) = node_claim.provider_id() else {
            return Err(CloudProviderError::not_found(format!("nodeclaim {name} has no providerID")));
        };
        let mut cloud = lock(&self.cloud);
        match self.find(&mut cloud, provider_id) {
            None => return Err(CloudProviderError::not_found(format!("instance {provider_id} not found"))),
            // A machine shutting down cannot be rebooted; for repair it is as good as gone.
            Some(i) if i.terminating_at.is_some() => {
                return Err(CloudProviderError::not_found(format!("instance {provider_id} is terminating")));
            }
            Some(_) => {}
        }
        if let Some(i) = cloud.instances.get_mut(provider_id) {
            i.boots += 1;
        }
        cloud.reboots.push(provider_id.to_owned());
        Ok(())
    }

    fn name(&self) -> &str {
        &self.options.labels.name
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind::new(NODE_CLASS_GROUP, NODE_CLASS_KIND)]
    }

    fn labels(&self) -> &ProviderLabels {
        &self.options.labels
    }
}

/// The fake cloud's interruption queue. `next_batch` never waits: it returns up to 10 queued events (empty when
/// none); delivered events stay in flight until acknowledged, and
/// [`redeliver_unacknowledged`](Self::redeliver_unacknowledged) puts them back (a visibility timeout).
#[derive(Clone)]
pub struct FakeInterruptionSource {
    cloud: Arc<Mutex<Cloud>>,
}

impl fmt::Debug for FakeInterruptionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cloud = lock(&self.cloud);
        f.debug_struct("FakeInterruptionSource")
            .field("queued", &cloud.queue.len())
            .field("in_flight", &cloud.in_flight.len())
            .finish()
    }
}

impl FakeInterruptionSource {
    /// Events delivered and not acknowledged go back to the front of the queue.
    pub fn redeliver_unacknowledged(&self) {
        let mut cloud = lock(&self.cloud);
        let in_flight = std::mem::take(&mut cloud.in_flight);
        for e in in_flight.into_iter().rev() {
            cloud.queue.push_front(e);
        }
    }

    /// Events queued (not yet delivered).
    pub fn queued(&self) -> usize {
        lock(&self.cloud).queue.len()
    }

    /// Events delivered and not acknowledged.
    pub fn in_flight(&self) -> usize {
        lock(&self.cloud).in_flight.len()
    }
}

/// Batch size of [`FakeInterruptionSource::next_batch`] (SQS's maximum).
pub const INTERRUPTION_BATCH: usize = 10;

#[async_trait]
impl InterruptionSource for FakeInterruptionSource {
    async fn next_batch(&self) -> Result<Vec<InterruptionEvent>, InterruptionError> {
        let mut cloud = lock(&self.cloud);
        let n = cloud.queue.len().min(INTERRUPTION_BATCH);
        let batch: Vec<InterruptionEvent> = cloud.queue.drain(..n).collect();
        cloud.in_flight.extend(batch.iter().cloned());
        Ok(batch)
    }

    async fn acknowledge(&self, events: &[InterruptionEvent]) -> Result<(), InterruptionError> {
        let acked: BTreeSet<&str> = events.iter().map(|e| e.ack_id.as_str()).collect();
        let mut cloud = lock(&self.cloud);
        cloud.in_flight.retain(|e| !acked.contains(e.ack_id.as_str()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use chrono::TimeZone;
    use karpenter_api::labels::{ARCH, OS};
    use karpenter_api::nodeclaim::ResourceQuantity;
    use serde_json::json;

    use super::*;
    use crate::decorator::{InMemoryMetrics, Instrumented};
    use crate::error::ErrorKind;
    use crate::node_class::InMemoryNodeClasses;
    use crate::test_types::{instance_type, offering};

    /// A clock tests move by hand; as a sleeper it moves itself.
    #[derive(Debug, Default)]
    struct ManualClock(AtomicI64);

    impl ManualClock {
        fn advance(&self, d: Duration) {
            self.0.fetch_add(i64::try_from(d.as_millis()).unwrap(), Ordering::SeqCst);
        }
    }

    impl Clock for ManualClock {
        fn now(&self) -> DateTime<Utc> {
            Utc.timestamp_millis_opt(1_700_000_000_000 + self.0.load(Ordering::SeqCst)).unwrap()
        }
    }

    #[async_trait]
    impl Sleeper for ManualClock {
        async fn sleep(&self, d: Duration) {
            self.advance(d);
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(f)
    }

    fn claim(name: &str, reqs: &[(&str, &str, &[&str])], cpu: &str) -> NodeClaim {
        let reqs: Vec<_> = reqs.iter().map(|(k, op, v)| json!({"key": k, "operator": op, "values": v})).collect();
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default", "team": "a"}},
            "spec": {
                "requirements": reqs,
                "resources": {"requests": {"cpu": cpu}},
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
            }
        }))
        .unwrap()
    }

    fn pool() -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "requirements": [],
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
            }}}
        }))
        .unwrap()
    }

    fn linux(name: &str, cpu: &str) -> NodeClaim {
        claim(name, &[(OS, "In", &["linux"]), (ARCH, "In", &["arm64"])], cpu)
    }

    /// What the fake offers does not change how it behaves: two linux arm64 sizes (the smaller one cheaper) and an
    /// amd64 one, each with spot and on-demand in two zones.
    fn catalogue() -> Vec<InstanceType> {
        let offerings = |price: f64| {
            ["zone-a", "zone-b"]
                .into_iter()
                .flat_map(|z| [offering(z, "spot", 0.7 * price, true), offering(z, "on-demand", price, true)])
                .collect()
        };
        vec![
            instance_type("large-arm64", "arm64", "linux", 8, offerings(0.4)),
            instance_type("small-amd64", "amd64", "linux", 2, offerings(0.1)),
            instance_type("small-arm64", "arm64", "linux", 2, offerings(0.1)),
        ]
    }

    fn fake_with_clock() -> (FakeCloudProvider, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::default());
        let fake = FakeCloudProvider::new(FakeOptions {
            clock: clock.clone(),
            sleeper: clock.clone(),
            launch_latency: Duration::from_secs(3),
            ..FakeOptions::new(catalogue())
        });
        (fake, clock)
    }

    #[test]
    fn create_launches_the_cheapest_offering_whose_allocatable_fits() {
        let (fake, clock) = fake_with_clock();
        let start = clock.now();
        let launched = block_on(fake.create(&linux("a", "2"))).unwrap();
        let labels = launched.metadata.labels.clone().unwrap();
        assert_eq!(labels.get(INSTANCE_TYPE).map(String::as_str), Some("small-arm64"));
        assert_eq!(labels.get(ZONE).map(String::as_str), Some("zone-a"));
        assert_eq!(labels.get(CAPACITY_TYPE).map(String::as_str), Some("spot"));
        assert_eq!(labels.get(OS).map(String::as_str), Some("linux"));
        assert_eq!(labels.get("team").map(String::as_str), Some("a"), "claim labels are kept");
        let status = launched.status.clone().unwrap();
        assert!(status.provider_id.as_deref().unwrap().starts_with("kwok://a-"));
        assert_eq!(status.capacity.get("cpu").map(ResourceQuantity::as_str), Some("2"));
        let created = launched.metadata.creation_timestamp.clone().unwrap();
        assert_eq!(created.0.as_second(), (start + chrono::Duration::seconds(3)).timestamp(), "launch latency");
        // More than the small type's 2 CPUs: the large one.
        let b = block_on(fake.create(&linux("b", "2500m"))).unwrap();
        assert_eq!(b.metadata.labels.unwrap().get(INSTANCE_TYPE).map(String::as_str), Some("large-arm64"));
        // More than anything offers: InsufficientCapacity without offerings.
        let err = block_on(fake.create(&linux("huge", "9"))).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InsufficientCapacity);
        assert!(err.failed_offerings().is_empty());
        assert_eq!(fake.call_count(Method::Create), 3);
    }

    #[test]
    fn create_is_idempotent_per_node_claim_even_concurrently() {
        let (fake, _) = fake_with_clock();
        let c = linux("same", "1");
        let (x, y) = block_on(async { futures_join(fake.create(&c), fake.create(&c)).await });
        let (x, y) = (x.unwrap(), y.unwrap());
        assert_eq!(x.provider_id(), y.provider_id());
        assert_eq!(fake.instance_ids().len(), 1);
        let again = block_on(fake.create(&c)).unwrap();
        assert_eq!(again.provider_id(), x.provider_id());
        assert_eq!(block_on(fake.list()).unwrap().len(), 1);
    }

    /// Polls two futures to completion on one task (enough for these tests; the conformance suite uses futures).
    async fn futures_join<A: std::future::Future, B: std::future::Future>(a: A, b: B) -> (A::Output, B::Output) {
        let (mut a, mut b) = (Box::pin(a), Box::pin(b));
        let (mut ra, mut rb) = (None, None);
        std::future::poll_fn(|cx| {
            if ra.is_none()
                && let std::task::Poll::Ready(v) = a.as_mut().poll(cx)
            {
                ra = Some(v);
            }
            if rb.is_none()
                && let std::task::Poll::Ready(v) = b.as_mut().poll(cx)
            {
                rb = Some(v);
            }
            if ra.is_some() && rb.is_some() { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
        })
        .await;
        (ra.unwrap(), rb.unwrap())
    }

    #[test]
    fn delete_get_list_follow_the_contract() {
        let clock = Arc::new(ManualClock::default());
        let fake = FakeCloudProvider::new(FakeOptions {
            clock: clock.clone(),
            termination_delay: Duration::from_secs(60),
            ..FakeOptions::new(catalogue())
        });
        let other = fake.for_cluster("other");
        let mine = block_on(fake.create(&linux("a", "1"))).unwrap();
        let theirs = block_on(other.create(&linux("a", "1"))).unwrap();
        assert_ne!(mine.provider_id(), theirs.provider_id(), "same claim name, other cluster: another instance");
        let id = mine.provider_id().unwrap().to_owned();
        assert_eq!(block_on(fake.list()).unwrap().len(), 1);
        assert!(block_on(fake.get(theirs.provider_id().unwrap())).unwrap_err().is_not_found());
        assert_eq!(block_on(fake.get(&id)).unwrap().provider_id(), Some(id.as_str()));

        block_on(fake.delete(&mine)).unwrap();
        // Terminating: still visible, with a deletion timestamp; delete keeps answering Ok.
        let got = block_on(fake.get(&id)).unwrap();
        assert!(got.metadata.deletion_timestamp.is_some());
        assert!(block_on(fake.list()).unwrap()[0].metadata.deletion_timestamp.is_some());
        block_on(fake.delete(&mine)).unwrap();
        clock.advance(Duration::from_secs(60));
        assert!(block_on(fake.delete(&mine)).unwrap_err().is_not_found());
        assert!(block_on(fake.get(&id)).unwrap_err().is_not_found());
        assert!(block_on(fake.list()).unwrap().is_empty());
        assert_eq!(block_on(other.list()).unwrap().len(), 1);
        // A claim never launched has no instance.
        assert!(block_on(fake.delete(&linux("never", "1"))).unwrap_err().is_not_found());
        // Deleted claims can be launched again (a new instance).
        let relaunched = block_on(fake.create(&linux("a", "1"))).unwrap();
        assert_ne!(relaunched.provider_id(), Some(id.as_str()));
    }

    #[test]
    fn failures_are_injected_per_method_and_calls_recorded() {
        let fake = FakeCloudProvider::new(FakeOptions::new(catalogue()));
        fake.fail_next(Method::Create, 2, || CloudProviderError::create("Throttled", "slow down"));
        fake.fail_always(Method::List, || CloudProviderError::other("list broken"));
        let c = linux("a", "1");
        assert_eq!(block_on(fake.create(&c)).unwrap_err().kind(), ErrorKind::Create);
        assert_eq!(block_on(fake.create(&c)).unwrap_err().kind(), ErrorKind::Create);
        assert!(block_on(fake.create(&c)).is_ok());
        assert!(block_on(fake.list()).is_err());
        assert!(block_on(fake.list()).is_err());
        fake.clear_failures();
        assert!(block_on(fake.list()).is_ok());
        let calls = fake.calls();
        assert_eq!(calls.len(), 6);
        assert_eq!(calls[0], Call { method: Method::Create, subject: "a".into() });
        assert_eq!(fake.call_count(Method::List), 3);
        fake.clear_calls();
        assert!(fake.calls().is_empty());
        assert_eq!(fake.repair_policies().len(), 2);
        assert_eq!(fake.calls()[0].method, Method::RepairPolicies);
    }

    #[test]
    fn node_classes_gate_create_and_instance_types() {
        let classes = InMemoryNodeClasses::new();
        let fake = FakeCloudProvider::new(FakeOptions {
            node_classes: Some(Arc::new(classes.clone())),
            ..FakeOptions::new(catalogue())
        });
        let c = linux("a", "1");
        let err = block_on(fake.create(&c)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InsufficientCapacity, "{err}");
        assert!(block_on(fake.instance_types(&pool())).unwrap().is_empty(), "missing class: no instance types");
        let class = |status: Option<&str>| {
            let mut class = json!({"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
                "metadata": {"name": "default"}});
            if let Some(status) = status {
                class["status"] = json!({"conditions": [{"type": "Ready", "status": status,
                    "lastTransitionTime": "2024-01-01T00:00:00Z", "reason": "R", "message": ""}]});
            }
            classes.insert_value(NODE_CLASS_GROUP, NODE_CLASS_KIND, "default", class);
        };
        class(None);
        let err = block_on(fake.create(&c)).unwrap_err();
        assert!(matches!(&err, CloudProviderError::Create { reason, .. } if reason == "NodeClassReadinessUnknown"));
        class(Some("False"));
        assert_eq!(block_on(fake.create(&c)).unwrap_err().kind(), ErrorKind::NodeClassNotReady);
        assert_eq!(block_on(fake.instance_types(&pool())).unwrap().len(), catalogue().len());
        class(Some("True"));
        assert!(block_on(fake.create(&c)).is_ok());
        let mut ec2 = linux("b", "1");
        ec2.spec.node_class_ref = NodeClassReference::new("karpenter.k8s.aws", "EC2NodeClass", "default");
        assert!(
            matches!(block_on(fake.create(&ec2)).unwrap_err(), CloudProviderError::Create { reason, .. } if reason == "UnsupportedNodeClass")
        );
    }

    #[test]
    fn drift_and_interruptions() {
        let fake = FakeCloudProvider::new(FakeOptions::new(catalogue()));
        let launched = block_on(fake.create(&linux("a", "1"))).unwrap();
        let id = launched.provider_id().unwrap().to_owned();
        assert_eq!(block_on(fake.is_drifted(&launched)).unwrap(), None);
        assert!(fake.set_drifted(&id, Some("ImageDrift".into())));
        assert_eq!(block_on(fake.is_drifted(&launched)).unwrap(), Some(DriftReason::new("ImageDrift")));
        assert!(!fake.set_drifted("kwok://nope", None));
        assert!(block_on(fake.is_drifted(&linux("never", "1"))).unwrap_err().is_not_found());

        let source = fake.interruption_source();
        assert!(block_on(source.next_batch()).unwrap().is_empty());
        let offering = fake.instance_offering(&id).unwrap();
        fake.inject_interruption(&id, InterruptionKind::SpotInterrupted, InterruptionAction::Delete);
        for i in 0..11 {
            fake.inject_interruption(
                &format!("kwok://x-{i}"),
                InterruptionKind::ScheduledChange,
                InterruptionAction::None,
            );
        }
        assert_eq!(fake.insufficient_capacity(), vec![offering], "a spot warning marks the offering out of capacity");
        let batch = block_on(source.next_batch()).unwrap();
        assert_eq!(batch.len(), 10);
        assert_eq!(batch[0].provider_id, id);
        assert_eq!(batch[0].kind.as_str(), "spot_interrupted");
        block_on(source.acknowledge(&batch[1..])).unwrap();
        assert_eq!(source.in_flight(), 1);
        source.redeliver_unacknowledged();
        let again = block_on(source.next_batch()).unwrap();
        assert_eq!(again.len(), 3, "the unacknowledged one first, then the two never delivered");
        assert_eq!(again[0], batch[0]);
        block_on(source.acknowledge(&again)).unwrap();
        assert_eq!((source.queued(), source.in_flight()), (0, 0));
    }

    #[test]
    fn reboot_counts_a_boot_of_a_live_instance_and_nothing_else() {
        let clock = Arc::new(ManualClock::default());
        let fake = FakeCloudProvider::new(FakeOptions {
            clock: clock.clone(),
            termination_delay: Duration::from_secs(60),
            ..FakeOptions::new(catalogue())
        });
        let a = block_on(fake.create(&linux("a", "1"))).unwrap();
        let b = block_on(fake.create(&linux("b", "1"))).unwrap();
        let (ida, idb) = (a.provider_id().unwrap().to_owned(), b.provider_id().unwrap().to_owned());
        assert_eq!(fake.boot_count(&ida), Some(1));
        block_on(fake.reboot(&a)).unwrap();
        block_on(fake.reboot(&a)).unwrap();
        assert_eq!((fake.boot_count(&ida), fake.boot_count(&idb)), (Some(3), Some(1)));
        assert_eq!(fake.reboots(), vec![ida.clone(), ida.clone()]);
        let listed: Vec<_> =
            block_on(fake.list()).unwrap().iter().map(|c| c.provider_id().unwrap().to_owned()).collect();
        assert_eq!(listed, vec![ida.clone(), idb.clone()], "a reboot keeps the instance, launches nothing");
        assert_eq!(
            fake.calls().iter().filter(|c| c.method == Method::Reboot).map(|c| c.subject.as_str()).collect::<Vec<_>>(),
            vec!["a", "a"]
        );
        // Another cluster's view does not reach this cluster's instance.
        assert!(block_on(fake.for_cluster("other").reboot(&a)).unwrap_err().is_not_found());
        // Terminating, then gone: NodeClaimNotFound, and no boot counted.
        block_on(fake.delete(&b)).unwrap();
        assert!(block_on(fake.reboot(&b)).unwrap_err().is_not_found());
        clock.advance(Duration::from_secs(60));
        assert!(block_on(fake.reboot(&b)).unwrap_err().is_not_found());
        assert_eq!(fake.boot_count(&idb), None);
        assert!(block_on(fake.reboot(&linux("never", "1"))).unwrap_err().is_not_found());
        assert_eq!(fake.reboots().len(), 2);
        // Injected failures apply to reboot like to every method.
        fake.fail_next(Method::Reboot, 1, || CloudProviderError::other("throttled"));
        assert_eq!(block_on(fake.reboot(&a)).unwrap_err().kind(), ErrorKind::Other);
        assert_eq!(fake.boot_count(&ida), Some(3));
    }

    #[test]
    fn a_fake_without_reboot_answers_not_implemented() {
        let fake = FakeCloudProvider::new(FakeOptions { reboot: false, ..FakeOptions::new(catalogue()) });
        let a = block_on(fake.create(&linux("a", "1"))).unwrap();
        let err = block_on(fake.reboot(&a)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotImplemented, "{err}");
        assert_eq!(fake.boot_count(a.provider_id().unwrap()), Some(1));
        assert!(fake.reboots().is_empty());
        assert_eq!(fake.call_count(Method::Reboot), 1);
    }

    #[test]
    fn instrumented_reports_durations_and_error_kinds() {
        let (fake, clock) = fake_with_clock();
        let metrics = InMemoryMetrics::default();
        let provider: Arc<dyn CloudProvider> = Arc::new(
            Instrumented::new(Arc::new(fake.clone()), Arc::new(metrics.clone()), clock.clone())
                .for_controller("lifecycle"),
        );
        block_on(provider.create(&linux("a", "1"))).unwrap();
        assert!(block_on(provider.get("kwok://missing")).is_err());
        fake.fail_next(Method::Create, 1, || CloudProviderError::insufficient_capacity(vec![], "none"));
        assert!(block_on(provider.create(&linux("b", "1"))).is_err());
        let create = metrics.stats(Method::Create);
        assert_eq!(create.calls, 2);
        assert_eq!(create.total_duration, Duration::from_secs(3), "the launch latency, measured on the clock");
        assert_eq!(create.errors.get(&ErrorKind::InsufficientCapacity), Some(&1));
        assert_eq!(metrics.stats(Method::Get).errors.get(&ErrorKind::NodeClaimNotFound), Some(&1));
        assert_eq!(metrics.observations().len(), 3);
        assert_eq!(metrics.observations()[0].controller, "lifecycle");
        let text = metrics.render_prometheus();
        assert!(text.contains("# TYPE karpenter_cloudprovider_duration_seconds histogram"), "{text}");
        assert!(text.contains("karpenter_cloudprovider_duration_seconds_bucket{controller=\"lifecycle\",method=\"Create\",provider=\"kwok\",le=\"+Inf\"} 2"), "{text}");
        assert!(text.contains("karpenter_cloudprovider_duration_seconds_sum{controller=\"lifecycle\",method=\"Create\",provider=\"kwok\"} 3"), "{text}");
        assert!(text.contains("karpenter_cloudprovider_errors_total{controller=\"lifecycle\",error=\"InsufficientCapacityError\",method=\"Create\",provider=\"kwok\"} 1"), "{text}");
        assert_eq!(provider.name(), "kwok");
        assert_eq!(provider.supported_node_classes()[0].label_key(), "karpenter.kwok.sh/kwoknodeclass");
        assert!(provider.supported_node_classes()[0].matches(&linux("x", "1").spec.node_class_ref));
        // An Arc of a provider is a provider (decorators can wrap shared providers).
        let shared: Arc<dyn CloudProvider> = Arc::new(provider.clone());
        assert!(block_on(shared.list()).unwrap().iter().any(|c| c.metadata.name.as_deref() == Some("a")));
        assert_eq!(metrics.stats(Method::List).calls, 1, "the call went through the decorator");
        assert!(provider.labels().is_well_known("karpenter.kwok.sh/instance-family"));
    }
}
