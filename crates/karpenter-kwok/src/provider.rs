//! [`KwokCloudProvider`]: the kwok cloud, where an "instance" is a Node object this provider creates through the
//! Kubernetes API (see the crate docs for the rules).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, NodeSystemInfo, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::condition::Conditions;
use karpenter_api::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODE_INITIALIZED, NODE_REGISTERED, ZONE};
use karpenter_api::lean::Lean;
use karpenter_api::nodeclaim::{
    NodeClaimSpec, NodeClaimStatus, NodeClassReference, ResourceQuantity, ResourceRequirements, conditions,
};
use karpenter_api::{ConditionStatus, NodeClaim, NodePool, ProviderLabels};
use karpenter_cloudprovider::launch::{
    LaunchChoice, cheapest_launch_holding, out_of_capacity, unavailable_offerings_holding,
};

use crate::api::{GROUP as KWOK_GROUP, KIND as KWOK_KIND, KWOKNodeClass};
use karpenter_cloudprovider::{
    CapacityMarks, Clock, CloudProvider, CloudProviderError, DriftReason, NodeClassKind, NodeClassLookup, OfferingRef,
    RepairPolicy, SystemClock, get_node_class,
};
use karpenter_requirements::{InstanceType, Operator, Quantity, Requirement, Requirements, ResourceList};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};

use crate::catalogue::{self, KwokCatalogueError, PROVIDER_ID_PREFIX};

/// Marks the Nodes this provider created (value `"true"`); `list` and the kubelet stand-in select on it.
pub const MANAGED_LABEL: &str = "karpenter.kwok.sh/managed";
/// Annotation naming the NodeClaim a Node was launched for (what makes `create` idempotent).
pub const NODE_CLAIM_ANNOTATION: &str = "karpenter.kwok.sh/nodeclaim";
/// Annotation with the uid of that NodeClaim, when it had one.
pub const NODE_CLAIM_UID_ANNOTATION: &str = "karpenter.kwok.sh/nodeclaim-uid";
/// A Node annotated with this key is reported drifted by `is_drifted`, the value being the reason.
pub const DRIFT_ANNOTATION: &str = "karpenter.kwok.sh/drift-reason";
/// The KWOK controller's marker (label and annotation, value [`KWOK_NODE_VALUE`]): a KWOK controller in the
/// cluster manages the Nodes carrying it, as it does upstream's kwok nodes.
pub const KWOK_NODE_KEY: &str = "kwok.x-k8s.io/node";
/// Value of [`KWOK_NODE_KEY`].
pub const KWOK_NODE_VALUE: &str = "fake";
/// Partition label upstream spreads kwok nodes over (`partition-a` … `partition-j`).
pub const PARTITION_LABEL: &str = "kwok-partition";
/// The hourly price of the chosen offering (`%f`), for eks-node-viewer.
pub const PRICE_LABEL: &str = "eks-node-viewer/instance-price";
/// The taint every launched Node starts with; the lifecycle controller removes it at registration.
pub const UNREGISTERED_TAINT: &str = karpenter_api::labels::taints::UNREGISTERED;

/// Between a Node's name and its boot number in `status.nodeInfo.bootID` (`web-abc-boot-0`).
const BOOT_ID_INFIX: &str = "-boot-";

/// How often `reboot` retries its status write when another writer changed the Node in between.
const REBOOT_ATTEMPTS: usize = 3;

const PARTITIONS: [&str; 10] = [
    "partition-a",
    "partition-b",
    "partition-c",
    "partition-d",
    "partition-e",
    "partition-f",
    "partition-g",
    "partition-h",
    "partition-i",
    "partition-j",
];

/// Why the provider could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KwokError {
    /// The instance-type file could not be read.
    #[error("reading instance types from {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The instance-type file is not upstream's kwok format.
    #[error("instance types in {path}: {source}")]
    Catalogue {
        /// The file.
        path: String,
        /// What is wrong with it.
        #[source]
        source: KwokCatalogueError,
    },
    /// The file lists no instance type.
    #[error("instance types in {path}: the list is empty")]
    Empty {
        /// The file.
        path: String,
    },
}

/// Reads upstream's kwok instance-type JSON (the format of its `instance_types.json`; see
/// [`catalogue`]) from a file.
pub fn load_instance_types_file(path: impl AsRef<Path>) -> Result<Vec<InstanceType>, KwokError> {
    let path = path.as_ref();
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| KwokError::Read { path: shown.clone(), source })?;
    let its = catalogue::load_instance_types_json(&text)
        .map_err(|source| KwokError::Catalogue { path: shown.clone(), source })?;
    if its.is_empty() {
        return Err(KwokError::Empty { path: shown });
    }
    Ok(its)
}

/// How to build a [`KwokCloudProvider`]; fill with `..Default::default()`.
#[derive(Clone, Debug)]
pub struct KwokOptions {
    /// The instance types (default: the built-in kwok catalogue, [`catalogue::catalogue`]).
    pub instance_types: Vec<InstanceType>,
    /// Node classes; `None` treats every KWOKNodeClass as present and ready.
    pub node_classes: Option<Arc<dyn NodeClassLookup>>,
    /// Labels (default [`crate::labels::provider_labels`]); [`CloudProvider::name`] is `labels.name`.
    pub labels: ProviderLabels,
    /// What [`CloudProvider::repair_policies`] returns (default, as upstream's kwok provider: node `Ready`
    /// `False` or `Unknown` for 10 minutes).
    pub repair_policies: Vec<RepairPolicy>,
    /// The time a reboot writes into the Node's `Ready` condition (default [`SystemClock`]).
    pub clock: Arc<dyn Clock>,
}

/// The kwok provider's default repair policies (upstream's kwok values): node `Ready` `False` or `Unknown` for
/// 10 minutes.
pub fn repair_policies() -> Vec<RepairPolicy> {
    let ready = |status| RepairPolicy::replace("Ready", status, Duration::from_secs(10 * 60));
    vec![ready(ConditionStatus::False), ready(ConditionStatus::Unknown)]
}

impl Default for KwokOptions {
    fn default() -> Self {
        Self {
            instance_types: catalogue::catalogue(),
            node_classes: None,
            labels: crate::labels::provider_labels(),
            repair_policies: repair_policies(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl KwokOptions {
    /// The default options with the instance types of an upstream-format JSON file
    /// ([`load_instance_types_file`]).
    pub fn from_instance_types_file(path: impl AsRef<Path>) -> Result<Self, KwokError> {
        Ok(Self { instance_types: load_instance_types_file(path)?, ..Self::default() })
    }
}

/// Offerings marked out of capacity, and the catalogue with them applied (rebuilt when they change).
#[derive(Default)]
struct Capacity {
    ice: CapacityMarks,
    effective: Option<(u64, Arc<[InstanceType]>)>,
}

/// Nodes per page when listing instances.
const LIST_PAGE: u32 = 500;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The kwok provider over a `kube::Client` (see the crate docs). Clones share the client and the capacity marks:
/// keep one as a handle (e.g. to mark offerings out of capacity) while the controller holds another as
/// `Arc<dyn CloudProvider>`.
#[derive(Clone)]
pub struct KwokCloudProvider {
    client: Client,
    options: Arc<KwokOptions>,
    capacity: Arc<Mutex<Capacity>>,
}

impl fmt::Debug for KwokCloudProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KwokCloudProvider")
            .field("instance_types", &self.options.instance_types.len())
            .field("node_classes", &self.options.node_classes.is_some())
            .field("insufficient_capacity", &lock(&self.capacity).ice.len())
            .finish_non_exhaustive()
    }
}

fn api_status(e: &kube::Error) -> Option<&kube::core::Status> {
    match e {
        kube::Error::Api(s) => Some(s),
        _ => None,
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    api_status(e).is_some_and(|s| s.is_not_found())
}

fn is_already_exists(e: &kube::Error) -> bool {
    api_status(e).is_some_and(|s| s.is_already_exists() || s.code == 409)
}

fn api_error(what: String, e: kube::Error) -> CloudProviderError {
    CloudProviderError::other(what).with_source(e)
}

impl KwokCloudProvider {
    /// A provider creating Nodes through `client`.
    pub fn new(client: Client, options: KwokOptions) -> Self {
        Self { client, options: Arc::new(options), capacity: Arc::new(Mutex::new(Capacity::default())) }
    }

    /// A provider with the built-in catalogue and no node-class lookup.
    pub fn with_defaults(client: Client) -> Self {
        Self::new(client, KwokOptions::default())
    }

    /// The options this provider was built with.
    pub fn options(&self) -> &KwokOptions {
        &self.options
    }

    // ---- capacity ----------------------------------------------------------------------------------------------

    /// Marks an offering out of capacity (or back in capacity with `false`): `instance_types` reports it
    /// `available: false` and `create` never launches on it (a create left with nothing else fails with
    /// `InsufficientCapacity` naming it). How tests inject insufficient capacity.
    pub fn set_insufficient_capacity(&self, offering: OfferingRef, insufficient: bool) {
        lock(&self.capacity).ice.set(offering, insufficient);
    }

    /// Every offering back in capacity.
    pub fn clear_insufficient_capacity(&self) {
        lock(&self.capacity).ice.clear();
    }

    /// The offerings currently marked out of capacity, sorted.
    pub fn insufficient_capacity(&self) -> Vec<OfferingRef> {
        lock(&self.capacity).ice.offerings()
    }

    /// Marks out of capacity every offering `claim` could launch on (compatible with its requirements, its node
    /// holding its requests) and returns them, sorted: the next create for such a
    /// claim fails with `InsufficientCapacity`. Undo with [`clear_insufficient_capacity`](Self::clear_insufficient_capacity).
    pub fn exhaust_capacity_for(&self, claim: &NodeClaim) -> Result<Vec<OfferingRef>, CloudProviderError> {
        let (reqs, requests) = claim_needs(claim)?;
        let mut out = BTreeSet::new();
        for it in self.options.instance_types.iter() {
            if reqs.intersects(&it.requirements).is_err() {
                continue;
            }
            for o in it
                .offerings
                .iter()
                .filter(|o| reqs.intersects(&o.requirements).is_ok() && it.offering_holds(o, &requests))
            {
                out.insert(OfferingRef::new(&it.name, o.zone().unwrap_or(""), o.capacity_type().unwrap_or("")));
            }
        }
        for o in &out {
            self.set_insufficient_capacity(o.clone(), true);
        }
        Ok(out.into_iter().collect())
    }

    /// Sets (or with `None` removes) the drift reason `is_drifted` reports for the Node behind `provider_id`, by
    /// annotating it with [`DRIFT_ANNOTATION`]. `Ok(false)` when there is no such live Node.
    pub async fn set_drifted(&self, provider_id: &str, reason: Option<&str>) -> Result<bool, CloudProviderError> {
        let Some(name) = provider_id.strip_prefix(PROVIDER_ID_PREFIX) else { return Ok(false) };
        match self.live_node(name).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e),
        }
        let patch = serde_json::json!({"metadata": {"annotations": {DRIFT_ANNOTATION: reason}}});
        match self.nodes().patch(name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(api_error(format!("annotating node {name}"), e)),
        }
    }

    /// The catalogue with out-of-capacity offerings marked unavailable (cached until the marks change).
    pub fn effective_instance_types(&self) -> Arc<[InstanceType]> {
        let mut cap = lock(&self.capacity);
        if let Some((v, its)) = &cap.effective
            && *v == cap.ice.version()
        {
            return its.clone();
        }
        let mut its = self.options.instance_types.clone();
        cap.ice.apply(&mut its);
        let its: Arc<[InstanceType]> = its.into();
        cap.effective = Some((cap.ice.version(), its.clone()));
        its
    }

    /// The catalogue as [`Self::effective_instance_types`], with every capacity reservation drawn down by the
    /// kwok nodes running in it (`karpenter_cloudprovider::launch::draw_down_reservations`): the file states a
    /// reservation's instances with none running, as `simulate` reads it, and a full one is unavailable. Lists the
    /// reserved nodes only when the catalogue has reserved offerings.
    async fn instance_types_now(&self) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        let its = self.effective_instance_types();
        if !its.iter().flat_map(|it| &it.offerings).any(|o| o.reservation_id().is_some()) {
            return Ok(its);
        }
        let api: Api<Lean<Node>> = Api::all(self.client.clone());
        let selector = format!("{MANAGED_LABEL}=true,{}", karpenter_requirements::labels::RESERVATION_ID);
        let mut lp = ListParams::default().labels(&selector).limit(LIST_PAGE);
        let mut labels = Vec::new();
        loop {
            let page = api.list(&lp).await.map_err(|e| api_error("listing reserved kwok nodes".into(), e))?;
            // A terminating Node's instance is gone (as `list` says), so its reservation instance is free again.
            let running =
                page.items.into_iter().filter(|n| is_managed(&n.0) && n.0.metadata.deletion_timestamp.is_none());
            labels.extend(running.filter_map(|n| n.0.metadata.labels));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp.continue_token = Some(token),
                None => break,
            }
        }
        let in_use = karpenter_cloudprovider::launch::reservations_in_use(&labels);
        if in_use.is_empty() {
            return Ok(its);
        }
        let mut drawn = its.to_vec();
        karpenter_cloudprovider::launch::draw_down_reservations(&mut drawn, &in_use);
        Ok(drawn.into())
    }

    // ---- internals ---------------------------------------------------------------------------------------------

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Checks the claim's node class: the kind must be KWOKNodeClass; with a lookup, a missing or terminating class
    /// is `InsufficientCapacity` and `Ready=False` is `NodeClassNotReady` (as upstream's kwok provider; an unknown
    /// readiness does not block a launch).
    fn check_node_class(&self, reference: &NodeClassReference) -> Result<(), CloudProviderError> {
        let what = format!("{} {}/{}", reference.kind, reference.group, reference.name);
        if reference.group != KWOK_GROUP || reference.kind != KWOK_KIND {
            return Err(CloudProviderError::create("UnsupportedNodeClass", format!("{what} is not a KWOKNodeClass")));
        }
        let Some(lookup) = &self.options.node_classes else { return Ok(()) };
        let class: Option<KWOKNodeClass> =
            get_node_class(&**lookup, &reference.group, &reference.kind, &reference.name).map_err(|e| {
                CloudProviderError::node_class_not_ready(format!("{what} does not decode")).with_source(e)
            })?;
        let Some(class) = class else {
            return Err(CloudProviderError::insufficient_capacity(vec![], format!("{what} not found")));
        };
        if class.metadata.deletion_timestamp.is_some() {
            return Err(CloudProviderError::insufficient_capacity(vec![], format!("{what} is terminating")));
        }
        let ready = class.status.as_ref().and_then(|s| s.condition(conditions::READY));
        match ready {
            Some(c) if c.status == ConditionStatus::False => Err(CloudProviderError::node_class_not_ready(format!(
                "{what} is not ready (Ready=False: {})",
                c.message
            ))),
            _ => Ok(()),
        }
    }

    /// The Node named `name` if it exists, is ours and is not terminating; `Err(NodeClaimNotFound)` otherwise.
    async fn live_node(&self, name: &str) -> Result<Node, CloudProviderError> {
        // Decoded without managedFields: the drift check reads a Node on every change of its NodeClaim, and the
        // kubelet's and controller-manager's field managers are most of a Node's JSON.
        let node = Api::<Lean<Node>>::all(self.client.clone())
            .get_opt(name)
            .await
            .map_err(|e| api_error(format!("getting node {name}"), e))?
            .map(|lean| lean.0)
            .ok_or_else(|| CloudProviderError::not_found(format!("node {name} not found")))?;
        if !is_managed(&node) {
            return Err(CloudProviderError::not_found(format!("node {name} was not launched by the kwok provider")));
        }
        if node.metadata.deletion_timestamp.is_some() {
            return Err(CloudProviderError::not_found(format!("node {name} is terminating")));
        }
        Ok(node)
    }

    /// An existing Node for the claim (idempotent create): `Ok(None)` when there is none, the launched claim when
    /// there is ours for this claim, an error when the name is taken or the old Node is still terminating.
    async fn existing(&self, claim: &NodeClaim, name: &str) -> Result<Option<NodeClaim>, CloudProviderError> {
        let node = self.nodes().get_opt(name).await.map_err(|e| api_error(format!("getting node {name}"), e))?;
        let Some(node) = node else { return Ok(None) };
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        let same_claim = is_managed(&node)
            && annotations.get(NODE_CLAIM_ANNOTATION).map(String::as_str) == Some(name)
            && match (annotations.get(NODE_CLAIM_UID_ANNOTATION), &claim.metadata.uid) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            };
        if !same_claim {
            return Err(CloudProviderError::create(
                "NodeNameInUse",
                format!("a node named {name} exists and was not launched for this nodeclaim"),
            ));
        }
        if node.metadata.deletion_timestamp.is_some() {
            return Err(CloudProviderError::create(
                "NodeTerminating",
                format!("node {name} of an earlier launch of this nodeclaim is still terminating"),
            ));
        }
        Ok(Some(launched_claim(claim, &node)))
    }

    /// Chooses the offering for a claim: the cheapest available one compatible with its requirements whose node
    /// holds its requests (judged by the offering's own allocatable when it carries overrides).
    fn choose(
        &self,
        claim: &NodeClaim,
        name: &str,
        its: &[InstanceType],
    ) -> Result<(InstanceType, LaunchChoice), CloudProviderError> {
        let (reqs, requests) = claim_needs(claim)?;
        let Some(choice) = cheapest_launch_holding(its, &reqs, &requests) else {
            return Err(out_of_capacity(name, unavailable_offerings_holding(its, &reqs, &requests)));
        };
        let it = its
            .iter()
            .find(|it| it.name == choice.instance_type)
            .cloned()
            .ok_or_else(|| CloudProviderError::other("the chosen instance type vanished"))?;
        Ok((it, choice))
    }
}

/// A claim's requirements and resource requests, parsed.
fn claim_needs(claim: &NodeClaim) -> Result<(Requirements, ResourceList), CloudProviderError> {
    let reqs: Requirements =
        claim.requirements().map_err(|e| CloudProviderError::create("InvalidRequirements", e.to_string()))?;
    let mut requests = ResourceList::new();
    for (resource, q) in claim.spec.resources.iter().flat_map(|r| r.requests.iter()) {
        let v: Quantity = q.as_str().parse().map_err(|e| {
            CloudProviderError::create("InvalidResources", format!("spec.resources.requests.{resource}: {e}"))
        })?;
        requests.insert(resource, v);
    }
    Ok((reqs, requests))
}

fn is_managed(node: &Node) -> bool {
    node.metadata.labels.as_ref().and_then(|l| l.get(MANAGED_LABEL)).is_some_and(|v| v == "true")
        && node.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_some_and(|p| p.starts_with(PROVIDER_ID_PREFIX))
}

fn claim_name(claim: &NodeClaim) -> Result<&str, CloudProviderError> {
    claim
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| CloudProviderError::create("InvalidNodeClaim", "the NodeClaim has no name"))
}

/// `(key, value)` of a requirement with exactly one value under `In`.
fn single(r: &Requirement) -> Option<(String, String)> {
    (r.operator() == Operator::In && r.values().len() == 1).then(|| (r.key().to_owned(), r.any()))
}

/// The value of `key` when the requirements pin it to one value, else empty.
fn single_value(reqs: &Requirements, key: &str) -> String {
    reqs.get_ref(key).and_then(single).map(|(_, v)| v).unwrap_or_default()
}

/// A stable partition for a node name (upstream picks one at random; a hash keeps runs reproducible).
fn partition(name: &str) -> &'static str {
    // FNV-1a, 32 bit.
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    PARTITIONS.get(h as usize % PARTITIONS.len()).copied().unwrap_or("partition-a")
}

/// The boot id a launched Node starts with.
fn first_boot_id(name: &str) -> String {
    format!("{name}{BOOT_ID_INFIX}0")
}

/// The boot id after a reboot: `<node>-boot-<n+1>` after `<node>-boot-<n>`, else `<node>-boot-1`. Always
/// different from `current`, which is all a reader of boot ids may rely on.
fn next_boot_id(name: &str, current: &str) -> String {
    let n = current
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix(BOOT_ID_INFIX))
        .and_then(|n| n.parse::<u64>().ok())
        .and_then(|n| n.checked_add(1))
        .unwrap_or(1);
    format!("{name}{BOOT_ID_INFIX}{n}")
}

fn k8s_resources(list: &ResourceList) -> BTreeMap<String, KQuantity> {
    list.iter().filter(|(_, q)| !q.is_zero()).map(|(n, q)| (n.to_owned(), KQuantity(q.to_string()))).collect()
}

/// The Node a launch creates (see the crate docs for its labels, annotations, taint and status).
fn build_node(claim: &NodeClaim, name: &str, it: &InstanceType, choice: &LaunchChoice) -> Node {
    let mut resolved: BTreeMap<String, String> = it.requirements.iter().filter_map(single).collect();
    // An available offering: of several reservations in the zone, one with an instance left.
    if let Some(o) = it.offerings.iter().find(|o| {
        o.available && o.zone().unwrap_or("") == choice.zone && o.capacity_type().unwrap_or("") == choice.capacity_type
    }) {
        resolved.extend(o.requirements.iter().filter_map(single));
    }
    resolved.insert(INSTANCE_TYPE.into(), it.name.clone());
    resolved.insert(ZONE.into(), choice.zone.clone());
    resolved.insert(CAPACITY_TYPE.into(), choice.capacity_type.clone());
    // The claim's requirements and labels over what the launch resolved: the one rule every provider follows.
    let mut labels = karpenter_cloudprovider::launch::launched_claim_labels(resolved, claim);
    labels.insert(HOSTNAME.into(), name.to_owned());
    labels.insert(PRICE_LABEL.into(), format!("{:.6}", choice.price));
    labels.insert(PARTITION_LABEL.into(), partition(name).to_owned());
    labels.insert(KWOK_NODE_KEY.into(), KWOK_NODE_VALUE.into());
    labels.insert(MANAGED_LABEL.into(), "true".into());
    // Registration and initialization are the lifecycle controller's to mark.
    labels.remove(NODE_REGISTERED);
    labels.remove(NODE_INITIALIZED);
    let mut annotations = claim.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(KWOK_NODE_KEY.into(), KWOK_NODE_VALUE.into());
    annotations.insert(NODE_CLAIM_ANNOTATION.into(), name.to_owned());
    if let Some(uid) = &claim.metadata.uid {
        annotations.insert(NODE_CLAIM_UID_ANNOTATION.into(), uid.clone());
    }
    annotations.remove(DRIFT_ANNOTATION);
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("{PROVIDER_ID_PREFIX}{name}")),
            taints: Some(vec![Taint {
                key: UNREGISTERED_TAINT.into(),
                effect: "NoExecute".into(),
                value: None,
                time_added: None,
            }]),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(k8s_resources(&choice.capacity)),
            allocatable: Some(k8s_resources(&choice.allocatable)),
            phase: Some("Pending".into()),
            node_info: Some(NodeSystemInfo {
                boot_id: first_boot_id(name),
                architecture: single_value(&it.requirements, karpenter_api::labels::ARCH),
                operating_system: single_value(&it.requirements, karpenter_api::labels::OS),
                ..NodeSystemInfo::default()
            }),
            ..NodeStatus::default()
        }),
    }
}

fn claim_resources(list: Option<&BTreeMap<String, KQuantity>>) -> BTreeMap<String, ResourceQuantity> {
    list.into_iter().flatten().map(|(n, q)| (n.clone(), ResourceQuantity::new(q.0.clone()))).collect()
}

/// The provider's view of a Node as a NodeClaim (get and list): named after the NodeClaim it was launched for,
/// with the Node's labels, `status.providerID`, `nodeName`, capacity and allocatable.
pub fn node_to_claim(node: &Node) -> NodeClaim {
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    let name = annotations.get(NODE_CLAIM_ANNOTATION).cloned().or_else(|| node.metadata.name.clone());
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let class_name = labels.get(crate::labels::KWOK_NODE_CLASS).cloned().unwrap_or_else(|| "default".to_owned());
    let status = node.status.as_ref();
    NodeClaim {
        metadata: ObjectMeta {
            name,
            uid: annotations.get(NODE_CLAIM_UID_ANNOTATION).cloned(),
            labels: Some(labels),
            annotations: Some(annotations),
            creation_timestamp: node.metadata.creation_timestamp.clone(),
            deletion_timestamp: node.metadata.deletion_timestamp.clone(),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints: vec![],
            startup_taints: vec![],
            requirements: vec![],
            resources: None::<ResourceRequirements>,
            node_class_ref: NodeClassReference::new(KWOK_GROUP, KWOK_KIND, &class_name),
            termination_grace_period: None,
            expire_after: karpenter_api::duration::NillableDuration::from_static("720h"),
        },
        status: Some(NodeClaimStatus {
            node_name: node.metadata.name.clone(),
            provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
            capacity: claim_resources(status.and_then(|s| s.capacity.as_ref())),
            allocatable: claim_resources(status.and_then(|s| s.allocatable.as_ref())),
            ..NodeClaimStatus::default()
        }),
    }
}

/// What `create` returns: the claim (its name, uid and spec) with the Node's labels and the launch status.
fn launched_claim(claim: &NodeClaim, node: &Node) -> NodeClaim {
    let mut out = node_to_claim(node);
    out.metadata.name = claim.metadata.name.clone();
    out.metadata.uid = claim.metadata.uid.clone();
    out.metadata.annotations = claim.metadata.annotations.clone();
    out.spec = claim.spec.clone();
    out
}

#[async_trait]
impl CloudProvider for KwokCloudProvider {
    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let name = claim_name(node_claim)?;
        self.check_node_class(&node_claim.spec.node_class_ref)?;
        if let Some(existing) = self.existing(node_claim, name).await? {
            return Ok(existing);
        }
        let its = self.instance_types_now().await?;
        let (it, choice) = self.choose(node_claim, name, &its)?;
        let node = build_node(node_claim, name, &it, &choice);
        match self.nodes().create(&PostParams::default(), &node).await {
            Ok(created) => Ok(launched_claim(node_claim, &created)),
            // A concurrent create for the same claim won: return its Node.
            Err(e) if is_already_exists(&e) => self.existing(node_claim, name).await?.ok_or_else(|| {
                CloudProviderError::create("NodeCreateConflict", format!("node {name} existed and is gone again"))
            }),
            Err(e) => {
                Err(CloudProviderError::create("NodeCreateFailed", format!("creating node {name}: {e}")).with_source(e))
            }
        }
    }

    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let claim = node_claim.metadata.name.as_deref().unwrap_or("");
        let Some(provider_id) = node_claim.provider_id() else {
            return Err(CloudProviderError::not_found(format!("nodeclaim {claim} has no providerID")));
        };
        let Some(name) = provider_id.strip_prefix(PROVIDER_ID_PREFIX) else {
            return Err(CloudProviderError::not_found(format!("{provider_id} is not a kwok provider id")));
        };
        let node = self.live_node(name).await?;
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: node.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        match self.nodes().delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) || api_status(&e).is_some_and(|s| s.code == 409) => {
                Err(CloudProviderError::not_found(format!("node {name} is gone")))
            }
            Err(e) => Err(api_error(format!("deleting node {name}"), e)),
        }
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        let Some(name) = provider_id.strip_prefix(PROVIDER_ID_PREFIX) else {
            return Err(CloudProviderError::not_found(format!("{provider_id} is not a kwok provider id")));
        };
        self.live_node(name).await.map(|n| node_to_claim(&n))
    }

    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        // Garbage collection lists every instance every 10-120 s. Pages of LIST_PAGE nodes, decoded without
        // managedFields and converted page by page: at 5,000 nodes a single full list of Node objects was tens
        // of MB held at once.
        let api: Api<Lean<Node>> = Api::all(self.client.clone());
        let mut lp = ListParams::default().labels(&format!("{MANAGED_LABEL}=true")).limit(LIST_PAGE);
        let mut claims = Vec::new();
        loop {
            let page = api.list(&lp).await.map_err(|e| api_error("listing kwok nodes".into(), e))?;
            claims.extend(
                page.items
                    .iter()
                    .map(|n| &n.0)
                    .filter(|n| is_managed(n) && n.metadata.deletion_timestamp.is_none())
                    .map(|n| (n.name_any(), node_to_claim(n))),
            );
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp.continue_token = Some(token),
                None => break,
            }
        }
        claims.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(claims.into_iter().map(|(_, claim)| claim).collect())
    }

    async fn instance_types(&self, node_pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        match self.check_node_class(&node_pool.spec.template.spec.node_class_ref) {
            Ok(()) | Err(CloudProviderError::NodeClassNotReady { .. }) => self.instance_types_now().await,
            // A missing class (or another kind) gives no instance types; the NodePool reports NodeClassReady=False.
            Err(CloudProviderError::InsufficientCapacity { .. } | CloudProviderError::Create { .. }) => {
                Ok(Arc::from(Vec::new()))
            }
            Err(e) => Err(e),
        }
    }

    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError> {
        let claim = node_claim.metadata.name.as_deref().unwrap_or("");
        let Some(provider_id) = node_claim.provider_id() else {
            return Err(CloudProviderError::not_found(format!("nodeclaim {claim} has no providerID")));
        };
        let Some(name) = provider_id.strip_prefix(PROVIDER_ID_PREFIX) else {
            return Err(CloudProviderError::not_found(format!("{provider_id} is not a kwok provider id")));
        };
        let node = self.live_node(name).await?;
        Ok(node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DRIFT_ANNOTATION))
            .filter(|r| !r.is_empty())
            .map(|r| DriftReason::new(r.as_str())))
    }

    fn repair_policies(&self) -> Vec<RepairPolicy> {
        self.options.repair_policies.clone()
    }

    async fn reboot(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        let claim = node_claim.metadata.name.as_deref().unwrap_or("");
        let Some(provider_id) = node_claim.provider_id() else {
            return Err(CloudProviderError::not_found(format!("nodeclaim {claim} has no providerID")));
        };
        let Some(name) = provider_id.strip_prefix(PROVIDER_ID_PREFIX) else {
            return Err(CloudProviderError::not_found(format!("{provider_id} is not a kwok provider id")));
        };
        let mut last = None;
        for _ in 0..REBOOT_ATTEMPTS {
            let node = self.live_node(name).await?;
            let patch = rebooted_status(&node, name, self.options.clock.now());
            match self.nodes().patch_status(name, &PatchParams::default(), &Patch::Merge(patch)).await {
                Ok(_) => return Ok(()),
                Err(e) if is_not_found(&e) => {
                    return Err(CloudProviderError::not_found(format!("node {name} is gone")));
                }
                // Another writer (the kubelet stand-in renewing Ready) got in between: read it again.
                Err(e) if api_status(&e).is_some_and(|s| s.code == 409) => last = Some(e),
                Err(e) => return Err(api_error(format!("rebooting node {name}"), e)),
            }
        }
        let what = format!("rebooting node {name}: it kept changing under {REBOOT_ATTEMPTS} attempts");
        Err(match last {
            Some(e) => api_error(what, e),
            None => CloudProviderError::other(what),
        })
    }

    fn name(&self) -> &str {
        &self.options.labels.name
    }

    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        vec![NodeClassKind::new(KWOK_GROUP, KWOK_KIND)]
    }

    fn labels(&self) -> &ProviderLabels {
        &self.options.labels
    }
}

/// The status merge patch of a reboot: a new `nodeInfo.bootID` and `Ready=True` (transition time `now` unless
/// it was True already), every other condition kept; guarded by the Node's resourceVersion.
fn rebooted_status(node: &Node, name: &str, now: chrono::DateTime<chrono::Utc>) -> serde_json::Value {
    let status = node.status.as_ref();
    let current = status.and_then(|s| s.node_info.as_ref()).map(|i| i.boot_id.as_str()).unwrap_or_default();
    let conditions = status.and_then(|s| s.conditions.clone()).unwrap_or_default();
    let at = karpenter_api::time::rfc3339(now);
    let was_ready = conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True");
    let since = conditions
        .iter()
        .find(|c| c.type_ == "Ready" && was_ready)
        .and_then(|c| c.last_transition_time.as_ref())
        .and_then(|t| serde_json::to_value(t).ok())
        .unwrap_or_else(|| serde_json::Value::String(at.clone()));
    let mut out: Vec<serde_json::Value> =
        conditions.iter().filter(|c| c.type_ != "Ready").filter_map(|c| serde_json::to_value(c).ok()).collect();
    out.push(serde_json::json!({
        "type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
        "lastHeartbeatTime": at, "lastTransitionTime": since,
    }));
    serde_json::json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "status": {"nodeInfo": {"bootID": next_boot_id(name, current)}, "conditions": out},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_ids_count_up_and_always_change() {
        assert_eq!(first_boot_id("n"), "n-boot-0");
        assert_eq!(next_boot_id("n", "n-boot-0"), "n-boot-1");
        assert_eq!(next_boot_id("n", "n-boot-41"), "n-boot-42");
        assert_eq!(next_boot_id("n", ""), "n-boot-1");
        assert_eq!(next_boot_id("n", "3f2a-uuid"), "n-boot-1");
        assert_eq!(next_boot_id("n", "m-boot-1"), "n-boot-1");
        assert_ne!(next_boot_id("n", "n-boot-x"), "n-boot-x");
        let last = format!("n-boot-{}", u64::MAX);
        assert_ne!(next_boot_id("n", &last), last);
    }

    #[test]
    fn partitions_are_stable_and_spread() {
        assert_eq!(partition("a"), partition("a"));
        let used: BTreeSet<&str> = (0..200).map(|i| partition(&format!("node-{i}"))).collect();
        assert_eq!(used.len(), PARTITIONS.len(), "200 names use every partition");
    }

    #[test]
    fn missing_instance_type_file_and_bad_json_are_errors() {
        let err = load_instance_types_file("/nonexistent/kwok.json").unwrap_err();
        assert!(matches!(err, KwokError::Read { .. }), "{err}");
        let dir = std::env::temp_dir().join(format!("karpenter-kwok-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "[{\"name\": 1}]").unwrap();
        assert!(matches!(load_instance_types_file(&bad).unwrap_err(), KwokError::Catalogue { .. }));
        let empty = dir.join("empty.json");
        std::fs::write(&empty, "[]").unwrap();
        assert!(matches!(load_instance_types_file(&empty).unwrap_err(), KwokError::Empty { .. }));
        let good = dir.join("good.json");
        std::fs::write(&good, catalogue::to_instance_types_json(&catalogue::catalogue()[..3])).unwrap();
        let options = KwokOptions::from_instance_types_file(&good).unwrap();
        assert_eq!(options.instance_types.len(), 3);
        assert_eq!(options.instance_types[0].name, "c-1x-amd64-linux");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
