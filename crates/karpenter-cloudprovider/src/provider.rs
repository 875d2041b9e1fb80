//! The [`CloudProvider`] trait and the values it speaks in.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use karpenter_api::nodeclaim::NodeClassReference;
use karpenter_api::{NodeClaim, NodePool, ProviderLabels};
use karpenter_requirements::InstanceType;

use crate::error::CloudProviderError;

/// Why a provider considers a NodeClaim drifted (the `Drifted` condition's reason, e.g. `AMIDrift`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DriftReason(pub String);

impl DriftReason {
    /// A reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }

    /// The reason text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DriftReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for DriftReason {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

/// A provider's repair policies: defined next to the Node matching in `karpenter_api::repair`, which the
/// disruption crate and the controller share.
pub use karpenter_api::repair::{RepairAction, RepairPolicy};

/// A node-class kind a provider supports (`karpenter.k8s.aws` / `EC2NodeClass`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeClassKind {
    /// API group.
    pub group: String,
    /// Kind.
    pub kind: String,
}

impl NodeClassKind {
    /// A kind.
    pub fn new(group: &str, kind: &str) -> Self {
        Self { group: group.into(), kind: kind.into() }
    }

    /// Whether `reference` points at a node class of this kind.
    pub fn matches(&self, reference: &NodeClassReference) -> bool {
        reference.group == self.group && reference.kind == self.kind
    }

    /// The node label marking nodes of this kind as managed: `<group>/<lowercase kind>`.
    pub fn label_key(&self) -> String {
        format!("{}/{}", self.group, self.kind.to_lowercase())
    }
}

/// A cloud: launches, finds and terminates the machines behind NodeClaims, and describes what it can launch.
///
/// Object-safe and shared as `Arc<dyn CloudProvider>` (methods are `async` through
/// [`async_trait`](macro@async_trait)). Node classes reach an implementation through an injected
/// [`NodeClassLookup`](crate::NodeClassLookup), so no kube client is needed here.
///
/// # Contract (checked by `karpenter_testing::conformance`)
///
/// * **No create leaves a duplicate behind.** Where the cloud allows it, `create` is idempotent per NodeClaim
///   (a second create for the same NodeClaim returns the same instance, e.g. through a client token). In any case
///   every instance a create launched is visible through [`list`](Self::list), so the garbage collector
///   terminates an instance whose NodeClaim is gone.
/// * **`create`** launches one machine satisfying the claim's `spec.requirements` and `spec.resources` and returns
///   a NodeClaim carrying the resolved labels (instance type, zone, capacity type, every single-valued instance
///   type requirement, the claim's own labels), `status.providerID`, `status.capacity`, `status.allocatable` and,
///   where the cloud has one, `status.imageID`. Errors: [`InsufficientCapacity`] naming the offerings that failed
///   (the provider should then report them unavailable from [`instance_types`](Self::instance_types)),
///   [`NodeClassNotReady`], [`Create`].
/// * **`delete`** starts termination of the claim's `status.providerID`. `Ok` means "deletion under way": the
///   caller polls `delete` again until it returns [`NodeClaimNotFound`], which means the instance is gone.
///   Deleting an instance that is gone returns `NodeClaimNotFound`.
/// * **`get`** finds an instance of this cluster by provider id; `NodeClaimNotFound` once it is gone. A
///   terminating instance is returned with `metadata.deletionTimestamp` set.
/// * **`list`** returns every instance this provider launched for this cluster (and only those), terminating
///   ones with `deletionTimestamp` set; the GC compares it with the NodeClaims.
/// * **`instance_types`** returns every instance type for the pool's node class, including unavailable offerings
///   (marked `available: false`). A missing node class gives an empty list; [`UnevaluatedNodePool`] skips the
///   pool for this pass.
/// * **`is_drifted`** computes provider-side drift; the controller records the answer as the NodeClaim's
///   `Drifted` condition and disruption only reads the condition.
/// * **`reboot`** asks the cloud to reboot a live instance in place and returns once the request is accepted
///   (the caller sees the reboot as a new boot id on the Node). It never terminates, replaces or duplicates the
///   instance: `list` and `get` report the same instance afterwards. A gone instance gives `NodeClaimNotFound`;
///   a provider without in-place reboot answers [`NotImplemented`] for every instance (node repair then
///   replaces).
/// * **`repair_policies`** is a set `RepairPolicies::new` accepts (every reason regex with a condition-level
///   fallback, priorities within 0..=100); an invalid set keeps node repair from starting.
/// * **`supported_node_classes`**: the first element is the default kind.
/// * **`labels`**: the provider's well-known labels and restricted label domains, handed to validation and the
///   scheduler as a value.
///
/// [`InsufficientCapacity`]: CloudProviderError::InsufficientCapacity
/// [`NodeClassNotReady`]: CloudProviderError::NodeClassNotReady
/// [`Create`]: CloudProviderError::Create
/// [`NodeClaimNotFound`]: CloudProviderError::NodeClaimNotFound
/// [`NotImplemented`]: CloudProviderError::NotImplemented
/// [`UnevaluatedNodePool`]: CloudProviderError::UnevaluatedNodePool
#[async_trait]
pub trait CloudProvider: Send + Sync + fmt::Debug {
    /// Launches a machine for `node_claim`; see the contract.
    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError>;

    /// Starts terminating the machine behind `node_claim`; `Ok` = under way, `NodeClaimNotFound` = gone.
    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError>;

    /// The machine with this provider id, as a NodeClaim.
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError>;

    /// Every machine this provider owns in this cluster, as NodeClaims.
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError>;

    /// The instance types (with all offerings, available or not) for the pool's node class.
    async fn instance_types(&self, node_pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError>;

    /// Provider-side drift of a launched NodeClaim; `None` when not drifted.
    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError>;

    /// Node conditions that mean "broken" (node repair).
    fn repair_policies(&self) -> Vec<RepairPolicy>;

    /// Asks the cloud to reboot the machine behind `node_claim` in place (node repair's `Reboot` action). Returns
    /// once the request is accepted; the caller observes the recovery (a new boot id on the Node). A provider
    /// that cannot reboot returns [`NotImplemented`](CloudProviderError::NotImplemented), and repair replaces the
    /// node instead. `NodeClaimNotFound` once the instance is gone.
    async fn reboot(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError>;

    /// The provider's name (`aws`, `kwok`): metrics label and log field.
    fn name(&self) -> &str;

    /// Node-class kinds this provider launches from; the first is the default.
    fn supported_node_classes(&self) -> Vec<NodeClassKind>;

    /// The provider's well-known labels and restricted domains.
    fn labels(&self) -> &ProviderLabels;
}

/// Lets an `Arc` of a provider (including `Arc<dyn CloudProvider>`) be used where a provider is expected, e.g.
/// inside a decorator.
#[async_trait]
impl<P: CloudProvider + ?Sized> CloudProvider for Arc<P> {
    async fn create(&self, node_claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        (**self).create(node_claim).await
    }
    async fn delete(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        (**self).delete(node_claim).await
    }
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        (**self).get(provider_id).await
    }
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        (**self).list().await
    }
    async fn instance_types(&self, node_pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        (**self).instance_types(node_pool).await
    }
    async fn is_drifted(&self, node_claim: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError> {
        (**self).is_drifted(node_claim).await
    }
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        (**self).repair_policies()
    }
    async fn reboot(&self, node_claim: &NodeClaim) -> Result<(), CloudProviderError> {
        (**self).reboot(node_claim).await
    }
    fn name(&self) -> &str {
        (**self).name()
    }
    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        (**self).supported_node_classes()
    }
    fn labels(&self) -> &ProviderLabels {
        (**self).labels()
    }
}

/// The trait's methods, as a value (call records, metrics labels, failure injection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    /// [`CloudProvider::create`]: launch an instance for a NodeClaim.
    Create,
    /// [`CloudProvider::delete`]: terminate a NodeClaim's instance.
    Delete,
    /// [`CloudProvider::get`]: one NodeClaim's instance by provider ID.
    Get,
    /// [`CloudProvider::list`]: every instance the provider launched (garbage collection).
    List,
    /// [`CloudProvider::instance_types`]: a NodePool's instance types with their offerings.
    InstanceTypes,
    /// [`CloudProvider::is_drifted`]: whether an instance no longer matches its node class.
    IsDrifted,
    /// [`CloudProvider::repair_policies`]: the unhealthy node conditions that trigger repair.
    RepairPolicies,
    /// [`CloudProvider::reboot`]: an in-place reboot (repair), where the provider offers one.
    Reboot,
}

impl Method {
    /// Every method.
    pub const ALL: [Method; 8] = [
        Method::Create,
        Method::Delete,
        Method::Get,
        Method::List,
        Method::InstanceTypes,
        Method::IsDrifted,
        Method::RepairPolicies,
        Method::Reboot,
    ];

    /// The metrics label value (upstream's method names).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Create => "Create",
            Method::Delete => "Delete",
            Method::Get => "Get",
            Method::List => "List",
            Method::InstanceTypes => "GetInstanceTypes",
            Method::IsDrifted => "IsDrifted",
            Method::RepairPolicies => "RepairPolicies",
            Method::Reboot => "Reboot",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
