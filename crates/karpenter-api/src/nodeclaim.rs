//! NodeClaim (`karpenter.sh/v1`): one requested machine, and the shapes shared with NodePool templates and
//! provider node classes (taints, requirements with minValues, node class references).
//!
//! Schema conventions used by every kind in this crate (see also [`crate::crd`]):
//! - structural constraints (lengths, ranges, patterns, enums, list types) and *static* CEL rules are written next
//!   to the field with schemars attributes: `#[schemars(length(max = 63))]`, `#[schemars(range(min = 1))]`,
//!   `#[schemars(extend("x-kubernetes-validations" = [{"rule": "...", "message": "..."}]))]`;
//! - CEL rules that depend on the provider's label vocabulary are inserted by [`crate::crd`] after generation
//!   (see [`crate::crd::SchemaPatch`]);
//! - every struct denies unknown fields, optional fields are skipped when absent so a manifest round-trips.

use std::collections::{BTreeMap, BTreeSet};

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{Condition, Conditions};
use crate::crd::{CelRule, KarpenterCrd, SchemaPatch};
use crate::duration::{DurationUnits, KDuration, NillableDuration, check_syntax};
use crate::labels::{self, ProviderLabels};
use crate::validation::{
    Validate, ValidationContext, Violations, field, index, key as map_key, label_value_errors, qualified_name_errors,
};
use karpenter_requirements::{Operator, UnknownOperator};

/// Taint effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    /// Pods that do not tolerate the taint are not scheduled onto the node; pods already running stay.
    NoSchedule,
    /// The scheduler avoids the node for pods that do not tolerate the taint, but may still use it.
    PreferNoSchedule,
    /// Pods that do not tolerate the taint are not scheduled, and running ones are evicted.
    NoExecute,
}

impl TaintEffect {
    /// The effect as Kubernetes spells it in a taint.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::PreferNoSchedule => "PreferNoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }
}

impl std::fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node taint (our own schema-friendly copy of `core/v1 Taint`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    /// Taint key (a qualified name).
    #[schemars(
        length(min = 1, max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
        )
    )]
    pub key: String,
    /// Taint value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 316),
        regex(
            pattern = r"^(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
        )
    )]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: TaintEffect,
    /// RFC 3339 time the taint was added (only meaningful for `NoExecute`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub time_added: Option<String>,
}

impl Taint {
    /// A taint without `timeAdded`; `None` is the empty value.
    pub fn new(key: impl Into<String>, value: Option<&str>, effect: TaintEffect) -> Self {
        Self { key: key.into(), value: value.map(str::to_string), effect, time_added: None }
    }

    /// Same key, value and effect (`timeAdded` ignored), as Kubernetes compares taints.
    pub fn matches(&self, other: &Taint) -> bool {
        self.key == other.key && self.effect == other.effect && self.value_str() == other.value_str()
    }

    /// The value, empty when absent (Kubernetes treats the two alike when matching).
    pub fn value_str(&self) -> &str {
        self.value.as_deref().unwrap_or("")
    }
}

/// Requirement operators.
pub mod operator {
    /// The key's label value is one of `values`.
    pub const IN: &str = "In";
    /// The key's label value is none of `values`, or the label is absent.
    pub const NOT_IN: &str = "NotIn";
    /// The label is present, with any value.
    pub const EXISTS: &str = "Exists";
    /// The label is absent.
    pub const DOES_NOT_EXIST: &str = "DoesNotExist";
    /// The label's value, as an integer, is greater than the single value.
    pub const GT: &str = "Gt";
    /// The label's value, as an integer, is less than the single value.
    pub const LT: &str = "Lt";
    /// The label's value, as an integer, is greater than or equal to the single value (Karpenter v1.13+).
    pub const GTE: &str = "Gte";
    /// The label's value, as an integer, is less than or equal to the single value (Karpenter v1.13+).
    pub const LTE: &str = "Lte";
    /// Every operator a NodePool or NodeClaim requirement may use.
    pub const ALL: [&str; 8] = [IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT, GTE, LTE];
    /// Operators that take exactly one non-negative integer.
    pub const NUMERIC: [&str; 4] = [GT, LT, GTE, LTE];
}

/// Maximum number of requirements per template / NodeClaim.
pub const MAX_REQUIREMENTS: usize = 100;
/// Maximum length of a requirement key.
pub const MAX_REQUIREMENT_KEY_LEN: usize = 316;
/// Maximum length of a label value.
pub const MAX_LABEL_VALUE_LEN: usize = 63;

/// A node selector requirement with an optional minimum number of distinct values the scheduler must keep
/// flexible (`minValues`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelectorRequirementWithMinValues {
    /// Label key the requirement applies to.
    #[schemars(
        length(max = 316),
        regex(
            pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
        )
    )]
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, `Gte` or `Lte`.
    #[schemars(extend("enum" = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"]))]
    pub operator: String,
    /// Values (label values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(length(max = 63), regex(pattern = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub values: Vec<String>,
    /// Minimum number of distinct values the scheduler must keep available (1..50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 50))]
    pub min_values: Option<i32>,
}

impl NodeSelectorRequirementWithMinValues {
    /// A requirement without `minValues`, the operator as text (validation rejects an unknown one); prefer the
    /// typed constructors ([`Self::in_values`], [`Self::with_operator`], ...).
    pub fn new(key: impl Into<String>, operator: &str, values: &[&str]) -> Self {
        Self {
            key: key.into(),
            operator: operator.to_string(),
            values: values.iter().map(|s| s.to_string()).collect(),
            min_values: None,
        }
    }

    /// A requirement with a typed operator and no `minValues`.
    pub fn with_operator<I, S>(key: impl Into<String>, operator: Operator, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            key: key.into(),
            operator: operator.as_str().to_owned(),
            values: values.into_iter().map(Into::into).collect(),
            min_values: None,
        }
    }

    /// `key In [values]`.
    pub fn in_values<I, S>(key: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_operator(key, Operator::In, values)
    }

    /// `key NotIn [values]`.
    pub fn not_in<I, S>(key: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_operator(key, Operator::NotIn, values)
    }

    /// `key Exists`.
    pub fn exists(key: impl Into<String>) -> Self {
        Self::with_operator(key, Operator::Exists, std::iter::empty::<String>())
    }

    /// `key DoesNotExist`.
    pub fn does_not_exist(key: impl Into<String>) -> Self {
        Self::with_operator(key, Operator::DoesNotExist, std::iter::empty::<String>())
    }

    /// `key Gt value`: the label, as an integer, is greater than `value`.
    pub fn gt(key: impl Into<String>, value: i64) -> Self {
        Self::with_operator(key, Operator::Gt, [value.to_string()])
    }

    /// `key Lt value`: the label, as an integer, is less than `value`.
    pub fn lt(key: impl Into<String>, value: i64) -> Self {
        Self::with_operator(key, Operator::Lt, [value.to_string()])
    }

    /// The same requirement with `minValues` set: the scheduler keeps at least `min_values` distinct values of
    /// the key among a NodeClaim's instance types.
    pub fn with_min_values(mut self, min_values: i32) -> Self {
        self.min_values = Some(min_values);
        self
    }

    /// The operator, typed; an error names the operator text when it is not one of the eight.
    pub fn typed_operator(&self) -> Result<Operator, UnknownOperator> {
        self.operator.parse()
    }
}

/// Reference to a provider node class (e.g. `karpenter.k8s.aws/EC2NodeClass/default`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClassReference {
    /// API group of the node class, e.g. `karpenter.k8s.aws`.
    #[schemars(length(min = 1), regex(pattern = r"^[^/]*$"))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "group may not be empty"}]))]
    pub group: String,
    /// Kind of the node class, e.g. `EC2NodeClass`.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "kind may not be empty"}]))]
    pub kind: String,
    /// Name of the node class.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self != ''", "message": "name may not be empty"}]))]
    pub name: String,
}

impl NodeClassReference {
    /// A reference to the node class `name` of `kind` in API group `group`.
    pub fn new(group: &str, kind: &str, name: &str) -> Self {
        Self { group: group.into(), kind: kind.into(), name: name.into() }
    }

    /// The informational node label key for this class: `<group>/<lowercase kind>`.
    pub fn label_key(&self) -> String {
        format!("{}/{}", self.group, self.kind.to_lowercase())
    }
}

/// Resource quantities as an API object writes them (`cpu: "4"`, `memory: 16Gi`, `nodes: 10`): the text is kept,
/// so objects round-trip unchanged. For arithmetic, convert to [`karpenter_requirements::ResourceList`], the one
/// type named `ResourceList` (each quantity parsed exactly).
pub type ResourceQuantities = BTreeMap<String, ResourceQuantity>;

/// The former name of [`ResourceQuantities`], kept only so code written against 0.1.0 still compiles; it is
/// hidden from the docs so that `ResourceList` names one type, [`karpenter_requirements::ResourceList`].
#[deprecated(
    since = "0.1.1",
    note = "renamed ResourceQuantities; karpenter_requirements::ResourceList is the arithmetic type"
)]
#[doc(hidden)]
pub type ResourceList = ResourceQuantities;

pub use crate::crd::ResourceQuantity;

/// Resource requests recorded on a NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceRequirements {
    /// Summed requests of the pods packed onto the claim plus DaemonSet overhead.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: ResourceQuantities,
}

/// Condition types of NodeClaims (and NodePools / node classes where noted) and their reasons.
pub mod conditions {
    /// Root condition (NodeClaim: Launched ∧ Registered ∧ Initialized; NodePool: ValidationSucceeded ∧
    /// NodeClassReady; node classes: all of theirs).
    pub const READY: &str = "Ready";
    /// The cloud provider has launched an instance for the NodeClaim (`status.providerID` is set).
    pub const LAUNCHED: &str = "Launched";
    /// A Node with the NodeClaim's provider ID has joined the cluster.
    pub const REGISTERED: &str = "Registered";
    /// The Node is ready, its startup taints are gone and its extended resources are registered.
    pub const INITIALIZED: &str = "Initialized";
    /// The node has been empty or underutilized for the NodePool's `consolidateAfter`: consolidation may consider it.
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    /// The NodeClaim no longer matches its NodePool or node class; its reason names what changed (see [`drift`]).
    pub const DRIFTED: &str = "Drifted";
    /// Why the NodeClaim is being disrupted (reasons `Underutilized`, `Empty`, `Drifted`, ...).
    pub const DISRUPTION_REASON: &str = "DisruptionReason";
    /// Node repair is rebooting the instance (reason `RebootRequested`; `False` with `RebootCompleted` after).
    pub const REBOOTING: &str = "Rebooting";
    /// Termination has evicted every pod it must (reasons `Draining`, `TerminationGracePeriodElapsed`).
    pub const DRAINED: &str = "Drained";
    /// Every volume attachment of the node is gone, so the instance can be terminated without losing data.
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    /// The provider has been asked to terminate the instance.
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    /// The Node matches what the NodeClaim asked for (capacity, labels); `False` reports a mismatch.
    pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
    /// NodePool / node class.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// NodePool.
    pub const NODE_CLASS_READY: &str = "NodeClassReady";
    /// NodePool.
    pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";

    /// The conditions whose conjunction is a NodeClaim's `Ready`.
    pub const NODE_CLAIM_READY_DEPENDENTS: [&str; 3] = [LAUNCHED, REGISTERED, INITIALIZED];

    /// Reasons of the NodeClaim and NodePool conditions above.
    pub mod reasons {
        // Registered.
        /// `Registered=Unknown`: no Node with the NodeClaim's provider ID yet.
        pub const NODE_NOT_FOUND: &str = "NodeNotFound";
        /// `Registered=Unknown`: a registration hook (a provider's pre-registration check) has not passed yet.
        pub const REGISTRATION_HOOK_PENDING: &str = "RegistrationHookPending";
        /// `Registered=False`: more than one Node has the NodeClaim's provider ID.
        pub const MULTIPLE_NODES_FOUND: &str = "MultipleNodesFound";
        // Initialized.
        /// `Initialized=Unknown`: the Node is not `Ready` yet.
        pub const NODE_NOT_READY: &str = "NodeNotReady";
        /// `Initialized=Unknown`: startup taints are still on the Node.
        pub const STARTUP_TAINTS_EXIST: &str = "StartupTaintsExist";
        /// `Initialized=Unknown`: taints Kubernetes puts on a starting node (not-ready, uninitialized) are still there.
        pub const KNOWN_EPHEMERAL_TAINTS_EXIST: &str = "KnownEphemeralTaintsExist";
        /// `Initialized=Unknown`: an extended resource the instance type promises is not in the Node's allocatable yet.
        pub const RESOURCE_NOT_REGISTERED: &str = "ResourceNotRegistered";
        /// `Initialized=Unknown`: a DRA driver the NodeClaim's pods need has not published its device pools yet.
        pub const DRA_DRIVER_POOLS_NOT_PUBLISHED: &str = "DRADriverPoolsNotPublished";
        // Drained / VolumesDetached.
        /// `Drained=Unknown`: pods are still being evicted.
        pub const DRAINING: &str = "Draining";
        /// `VolumesDetached=Unknown`: volume attachments remain.
        pub const AWAITING_VOLUME_DETACHMENT: &str = "AwaitingVolumeDetachment";
        /// The terminationGracePeriod ran out: remaining pods are deleted and volumes no longer awaited.
        pub const TERMINATION_GRACE_PERIOD_ELAPSED: &str = "TerminationGracePeriodElapsed";
        // ConsistentStateFound.
        /// `ConsistentStateFound=False`: the Node differs from what the NodeClaim asked for.
        pub const CONSISTENCY_CHECK_FAILED: &str = "ConsistencyCheckFailed";
        // DisruptionReason.
        /// `DisruptionReason`: consolidation replaces or removes an underutilized node.
        pub const UNDERUTILIZED: &str = "Underutilized";
        /// `DisruptionReason`: the node has no pods left to reschedule.
        pub const EMPTY: &str = "Empty";
        /// `DisruptionReason`: the node no longer matches its NodePool or node class.
        pub const DRIFTED: &str = "Drifted";
        // NodePool NodeClassReady.
        /// `NodeClassReady=False`: the NodePool's nodeClassRef names no existing node class.
        pub const NODE_CLASS_NOT_FOUND: &str = "NodeClassNotFound";
        /// `NodeClassReady=False`: the node class is being deleted.
        pub const NODE_CLASS_TERMINATING: &str = "NodeClassTerminating";
    }

    /// Reasons of the `Drifted` condition.
    pub mod drift {
        /// The NodePool's template changed since the NodeClaim was made (its hash differs).
        pub const NODE_POOL_DRIFTED: &str = "NodePoolDrifted";
        /// The NodeClaim's labels no longer satisfy the NodePool's requirements.
        pub const REQUIREMENTS_DRIFTED: &str = "RequirementsDrifted";
        /// The NodeClaim's instance type is no longer offered.
        pub const INSTANCE_TYPE_NOT_FOUND: &str = "InstanceTypeNotFound";
    }
}

fn default_expire_after() -> NillableDuration {
    NillableDuration::from_static("720h")
}

/// NodeClaim spec; also the `spec` of a NodePool's template.
// kube-derive takes one `printcolumn(...)` per column; clippy reads the repeated `type_ = "string"` as duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    singular = "nodeclaim",
    category = "karpenter",
    status = "NodeClaimStatus",
    derive = "PartialEq",
    doc = "NodeClaim is one requested machine: what Karpenter asked the cloud provider for, and how far it got.",
    printcolumn(name = "Type", type_ = "string", json_path = ".metadata.labels.node\\.kubernetes\\.io/instance-type"),
    printcolumn(name = "Capacity", type_ = "string", json_path = ".metadata.labels.karpenter\\.sh/capacity-type"),
    printcolumn(name = "Zone", type_ = "string", json_path = ".metadata.labels.topology\\.kubernetes\\.io/zone"),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "ImageID", type_ = "string", json_path = ".status.imageID", priority = 1),
    printcolumn(name = "ID", type_ = "string", json_path = ".status.providerID", priority = 1),
    printcolumn(
        name = "NodePool",
        type_ = "string",
        json_path = ".metadata.labels.karpenter\\.sh/nodepool",
        priority = 1
    ),
    printcolumn(name = "NodeClass", type_ = "string", json_path = ".spec.nodeClassRef.name", priority = 1),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Drifted\")].status",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "spec is immutable"}]))]
pub struct NodeClaimSpec {
    /// Taints applied to the node; pods must tolerate them to schedule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub taints: Vec<Taint>,
    /// Taints applied at boot and expected to be removed by something else; ignored by the scheduler.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub startup_taints: Vec<Taint>,
    /// Requirements the launched instance must satisfy.
    #[schemars(length(max = 100))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Resource requests of the pods packed onto this claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// The provider node class the instance is launched from.
    pub node_class_ref: NodeClassReference,
    /// Maximum time a node may drain once deletion starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(s|m|h))+$"))]
    pub termination_grace_period: Option<KDuration>,
    /// Maximum node lifetime (`Never` disables expiry).
    #[serde(default = "default_expire_after")]
    #[schemars(regex(pattern = r"^(([0-9]+(s|m|h))+|Never)$"))]
    pub expire_after: NillableDuration,
}

/// Observed state of a NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeClaimStatus {
    /// Name of the registered Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Cloud provider id, e.g. `aws:///us-west-2a/i-0123`.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "providerID")]
    pub provider_id: Option<String>,
    /// Image (AMI) id.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "imageID")]
    pub image_id: Option<String>,
    /// Estimated capacity of the chosen instance type.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: ResourceQuantities,
    /// Estimated allocatable resources of the chosen instance type.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocatable: ResourceQuantities,
    /// Last time a pod was bound to / left the node (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_pod_event_time: Option<String>,
    /// Status conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl Conditions for NodeClaimStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

impl NodeClaim {
    /// How the claim's node will be terminated, as the `termination_mode` label of the disruption metrics says
    /// it: `graceful` without a `terminationGracePeriod` (pods' blocks always hold), `forceful` with a zero one,
    /// `eventual` with a positive one (blocks are overridden once it has passed).
    pub fn termination_mode(&self) -> &'static str {
        match &self.spec.termination_grace_period {
            None => "graceful",
            Some(d) if d.duration().is_zero() => "forceful",
            Some(_) => "eventual",
        }
    }

    /// The owning NodePool, from the `karpenter.sh/nodepool` label.
    pub fn node_pool_name(&self) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(labels::NODE_POOL).map(String::as_str)
    }

    /// `status.conditions`, empty when there is no status.
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
    }

    /// True when the condition exists with status `True`.
    pub fn is_condition_true(&self, type_: &str) -> bool {
        self.conditions().is_true(type_)
    }

    /// Whether `Launched` is `True`.
    pub fn is_launched(&self) -> bool {
        self.is_condition_true(conditions::LAUNCHED)
    }
    /// Whether `Registered` is `True`.
    pub fn is_registered(&self) -> bool {
        self.is_condition_true(conditions::REGISTERED)
    }
    /// Whether `Initialized` is `True`.
    pub fn is_initialized(&self) -> bool {
        self.is_condition_true(conditions::INITIALIZED)
    }
    /// Whether `Drifted` is `True`.
    pub fn is_drifted(&self) -> bool {
        self.is_condition_true(conditions::DRIFTED)
    }
    /// `status.providerID`: the instance, once launched.
    pub fn provider_id(&self) -> Option<&str> {
        self.status.as_ref()?.provider_id.as_deref()
    }
    /// `status.nodeName`: the Node, once registered.
    pub fn node_name(&self) -> Option<&str> {
        self.status.as_ref()?.node_name.as_deref()
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Validation shared by NodeClaim specs and NodePool templates.
// ---------------------------------------------------------------------------------------------------------------

/// Validates requirements (CEL list rules and upstream's runtime checks). `allow_node_pool_key` is true for
/// NodeClaims (whose requirements carry `karpenter.sh/nodepool`) and false for NodePool templates.
pub fn validate_requirements(
    reqs: &[NodeSelectorRequirementWithMinValues],
    path: &str,
    provider: &ProviderLabels,
    allow_node_pool_key: bool,
    out: &mut Violations,
) {
    if reqs.len() > MAX_REQUIREMENTS {
        out.push(path, format!("must have at most {MAX_REQUIREMENTS} items, found {}", reqs.len()));
    }
    for (i, r) in reqs.iter().enumerate() {
        let rp = index(path, i);
        let kp = field(&rp, "key");
        if r.key.len() > MAX_REQUIREMENT_KEY_LEN {
            out.push(&kp, format!("must be at most {MAX_REQUIREMENT_KEY_LEN} characters"));
        }
        for e in qualified_name_errors(&r.key) {
            out.push(&kp, e);
        }
        if let Some(msg) = restricted_key_message(&r.key, provider, allow_node_pool_key) {
            out.push(&kp, msg);
        }
        let op = r.operator.as_str();
        if !operator::ALL.contains(&op) {
            out.push(
                field(&rp, "operator"),
                format!("unsupported operator {op:?}, must be one of {}", operator::ALL.join(", ")),
            );
        }
        let vp = field(&rp, "values");
        for (j, v) in r.values.iter().enumerate() {
            for e in label_value_errors(v) {
                out.push(index(&vp, j), e);
            }
        }
        if op == operator::IN && r.values.is_empty() {
            out.push(&vp, "requirements with operator 'In' must have a value defined");
        }
        if operator::NUMERIC.contains(&op)
            && !(r.values.len() == 1 && r.values.iter().all(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit())))
        {
            out.push(&vp, format!("requirements with operator '{op}' must have a single positive integer value"));
        }
        if let Some(mv) = r.min_values {
            let mp = field(&rp, "minValues");
            if !(1..=50).contains(&mv) {
                out.push(&mp, "must be between 1 and 50");
            }
            if op == operator::IN && r.values.len() < mv.max(0) as usize {
                out.push(
                    &mp,
                    "requirements with 'minValues' must have at least that many values specified in the 'values' field",
                );
            }
        }
        // Runtime: well-known keys with a closed value set need at least one (and ≥ minValues) valid value.
        if op == operator::IN
            && !r.values.is_empty()
            && let Some(known) = provider.known_values(&r.key)
        {
            let valid: BTreeSet<&str> = r.values.iter().map(String::as_str).filter(|v| known.contains(v)).collect();
            if valid.is_empty() {
                out.push(&vp, format!("no valid value for {}, must include one of {}", r.key, known.join(", ")));
            } else if let Some(mv) = r.min_values
                && valid.len() < mv.max(0) as usize
            {
                out.push(&vp, format!("{} valid value(s) for {} but minValues is {mv}", valid.len(), r.key));
            }
        }
    }
}

/// Why `key` may not be used as a template label / requirement key, if it may not.
pub fn restricted_key_message(key: &str, provider: &ProviderLabels, allow_node_pool_key: bool) -> Option<String> {
    if key == labels::NODE_POOL {
        return (!allow_node_pool_key).then(|| format!("label {key} is restricted"));
    }
    if key == labels::HOSTNAME {
        return Some(format!("label {key} is restricted"));
    }
    if provider.is_restricted(key) {
        return Some(format!(
            "label {key} is restricted; specify a well known label or a custom label that does not use a restricted domain"
        ));
    }
    None
}

/// Validates taints and startup taints: key/value syntax, and (key, effect) unique across both lists.
pub fn validate_taints(taints: &[Taint], startup: &[Taint], spec_path: &str, out: &mut Violations) {
    let mut seen: BTreeSet<(&str, TaintEffect)> = BTreeSet::new();
    for (name, list) in [("taints", taints), ("startupTaints", startup)] {
        let lp = field(spec_path, name);
        for (i, t) in list.iter().enumerate() {
            let tp = index(&lp, i);
            if t.key.is_empty() {
                out.push(field(&tp, "key"), "taint key may not be empty");
            } else {
                for e in qualified_name_errors(&t.key) {
                    out.push(field(&tp, "key"), e);
                }
            }
            if let Some(v) = t.value.as_deref().filter(|v| !v.is_empty()) {
                for e in qualified_name_errors(v) {
                    out.push(field(&tp, "value"), e);
                }
            }
            if !seen.insert((t.key.as_str(), t.effect)) {
                out.push(&tp, format!("duplicate taint key {:?} with effect {}", t.key, t.effect));
            }
        }
    }
}

/// Validates the node class reference fields.
pub fn validate_node_class_ref(r: &NodeClassReference, path: &str, out: &mut Violations) {
    for (name, v) in [("group", &r.group), ("kind", &r.kind), ("name", &r.name)] {
        if v.is_empty() {
            out.push(field(path, name), format!("{name} may not be empty"));
        }
    }
    if r.group.contains('/') {
        out.push(field(path, "group"), "group may not contain '/'");
    }
}

fn validate_duration_field(text: &str, allow_never: bool, path: &str, out: &mut Violations) {
    if allow_never && text == NillableDuration::NEVER {
        return;
    }
    if !check_syntax(text, DurationUnits::HoursMinutesSeconds) {
        let extra = if allow_never { " or 'Never'" } else { "" };
        out.push(path, format!("invalid duration {text:?}: must match <integer><h|m|s>...{extra}"));
    }
}

/// Borrowed view of the fields a NodeClaim spec and a NodePool template spec share, for shared validation.
#[derive(Clone, Copy, Debug)]
pub struct ClaimSpecFields<'a> {
    /// `requirements`.
    pub requirements: &'a [NodeSelectorRequirementWithMinValues],
    /// `taints`.
    pub taints: &'a [Taint],
    /// `startupTaints`.
    pub startup_taints: &'a [Taint],
    /// `nodeClassRef`.
    pub node_class_ref: &'a NodeClassReference,
    /// `expireAfter`.
    pub expire_after: &'a NillableDuration,
    /// `terminationGracePeriod`, when set.
    pub termination_grace_period: Option<&'a KDuration>,
}

impl ClaimSpecFields<'_> {
    /// Validates the shared fields; `path` is the spec's path (e.g. `spec.template.spec`).
    pub fn validate_at(&self, path: &str, ctx: &ValidationContext, allow_node_pool_key: bool, out: &mut Violations) {
        validate_requirements(self.requirements, &field(path, "requirements"), &ctx.provider, allow_node_pool_key, out);
        validate_taints(self.taints, self.startup_taints, path, out);
        validate_node_class_ref(self.node_class_ref, &field(path, "nodeClassRef"), out);
        validate_duration_field(self.expire_after.as_str(), true, &field(path, "expireAfter"), out);
        if let Some(tgp) = self.termination_grace_period {
            validate_duration_field(tgp.as_str(), false, &field(path, "terminationGracePeriod"), out);
        }
    }
}

impl NodeClaimSpec {
    /// The fields validation shares with a NodePool's template spec.
    pub fn fields(&self) -> ClaimSpecFields<'_> {
        ClaimSpecFields {
            requirements: &self.requirements,
            taints: &self.taints,
            startup_taints: &self.startup_taints,
            node_class_ref: &self.node_class_ref,
            expire_after: &self.expire_after,
            termination_grace_period: self.termination_grace_period.as_ref(),
        }
    }
}

/// CEL rules for a requirements list at `path` (list-level operator rules and the provider's restricted
/// domains on keys). Shared by NodePool templates and NodeClaims.
pub fn requirement_patches(path: &str, provider: &ProviderLabels) -> Vec<SchemaPatch> {
    let item = format!("{path}[]");
    let mut p = vec![
        SchemaPatch::validation(
            &item,
            CelRule::new("self.operator != 'In' || (has(self.values) && size(self.values) != 0)")
                .message("requirements with operator 'In' must have a value defined"),
        ),
        SchemaPatch::validation(
            &item,
            CelRule::new(
                "!(self.operator in ['Gt', 'Lt', 'Gte', 'Lte']) || (has(self.values) && size(self.values) == 1 && self.values[0].matches('^[0-9]+$'))",
            )
            .message("requirements with operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single non-negative integer value"),
        ),
        SchemaPatch::validation(
            &item,
            CelRule::new("!(self.operator == 'In' && has(self.minValues)) || (has(self.values) && size(self.values) >= self.minValues)")
                .message("requirements with 'minValues' must have at least that many values specified in the 'values' field"),
        ),
    ];
    for (rule, message) in crate::nodepool::restricted_domain_rules(provider, "self") {
        p.push(SchemaPatch::validation(&format!("{item}.key"), CelRule::new(rule).message(message)));
    }
    p
}

impl KarpenterCrd for NodeClaim {
    fn schema_patches(provider: &ProviderLabels) -> Vec<SchemaPatch> {
        requirement_patches("spec.requirements", provider)
    }
}

/// Checks every value of a resource map is a Kubernetes quantity.
pub fn validate_quantity_map(map: &ResourceQuantities, path: &str, out: &mut Violations) {
    for (k, v) in map {
        if let Some(e) = v.error() {
            out.push(map_key(path, k), e);
        }
    }
}

impl Validate for NodeClaim {
    fn validate(&self, ctx: &ValidationContext) -> Violations {
        let mut out = Violations::new();
        self.spec.fields().validate_at("spec", ctx, true, &mut out);
        if let Some(res) = &self.spec.resources {
            validate_quantity_map(&res.requests, "spec.resources.requests", &mut out);
        }
        out
    }
}

impl NodeClaim {
    /// Transition rules: the whole spec is immutable.
    pub fn validate_update(&self, old: &Self, ctx: &ValidationContext) -> Violations {
        let mut out = self.validate(ctx);
        if self.spec != old.spec {
            out.push("spec", "spec is immutable");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(yaml: &str) -> NodeClaim {
        serde_saphyr::from_str(yaml).unwrap()
    }

    const BASE: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-abcde
  labels:
    karpenter.sh/nodepool: default
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
    - {key: karpenter.sh/nodepool, operator: In, values: [default]}
    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
"#;

    #[test]
    fn termination_mode_follows_the_termination_grace_period() {
        assert_eq!(claim(BASE).termination_mode(), "graceful");
        let with = |tgp: &str| claim(&format!("{BASE}  terminationGracePeriod: {tgp}\n")).termination_mode();
        assert_eq!(with("0s"), "forceful");
        assert_eq!(with("30s"), "eventual");
        assert_eq!(with("48h"), "eventual");
    }

    #[test]
    fn consolidation_policy_metric_labels_are_snake_case() {
        use crate::nodepool::ConsolidationPolicy as P;
        assert_eq!(P::WhenEmpty.metric_label(), "when_empty");
        assert_eq!(P::WhenEmptyOrUnderutilized.metric_label(), "when_empty_or_underutilized");
        assert_eq!(P::Balanced.metric_label(), "balanced");
    }

    #[test]
    fn decodes_defaults_and_helpers() {
        let c = claim(BASE);
        assert_eq!(c.spec.expire_after.as_str(), "720h");
        assert_eq!(c.node_pool_name(), Some("default"));
        assert!(!c.is_launched());
        assert!(
            c.validate(&ValidationContext::new(crate::test_vocabulary::aws())).is_empty(),
            "{:?}",
            c.validate(&ValidationContext::new(crate::test_vocabulary::aws()))
        );
    }

    #[test]
    fn unknown_field_is_named() {
        let err = serde_saphyr::from_str::<NodeClaim>(&BASE.replace("requirements:", "requirement:")).unwrap_err();
        assert!(err.to_string().contains("requirement"), "{err}");
    }

    #[test]
    fn spec_is_immutable() {
        let old = claim(BASE);
        let mut new = old.clone();
        assert!(new.validate_update(&old, &ValidationContext::new(crate::test_vocabulary::aws())).is_empty());
        new.spec.node_class_ref.name = "other".into();
        assert!(new.validate_update(&old, &ValidationContext::new(crate::test_vocabulary::aws())).has_path("spec"));
    }

    #[test]
    fn duplicate_taints_across_lists() {
        let mut c = claim(BASE);
        c.spec.taints.push(Taint::new("example.com/a", None, TaintEffect::NoSchedule));
        c.spec.startup_taints.push(Taint::new("example.com/a", Some("x"), TaintEffect::NoSchedule));
        c.spec.startup_taints.push(Taint::new("example.com/a", None, TaintEffect::NoExecute));
        let v = c.validate(&ValidationContext::new(crate::test_vocabulary::aws()));
        assert!(v.has_path("spec.startupTaints[0]"), "{v:?}");
        assert!(!v.has_path("spec.startupTaints[1]"), "{v:?}");
    }
}
