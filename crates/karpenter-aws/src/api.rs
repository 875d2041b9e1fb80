//! EC2NodeClass (`karpenter.k8s.aws/v1`): how Karpenter launches EC2 instances: which subnets, security groups,
//! AMIs, capacity reservations and placement group to use, the instance role, kubelet settings, block devices,
//! network interfaces and instance metadata options.
//!
//! The provider owns its API, as upstream's AWS provider does: [`EC2_NODE_CLASS_API`] is what a program registers
//! to read, validate and install it (see [`karpenter_api::node_class_api`]); [`hash`] is its static drift hash.
//!
//! Types follow karpenter-api's conventions (see [`karpenter_api::nodeclaim`] and [`karpenter_api::crd`]):
//! camelCase, unknown fields denied, optional fields skipped when absent, static schema constraints and CEL rules
//! written next to the fields. [`Validate`](karpenter_api::validation::Validate) for [`EC2NodeClass`] lives in `validation` and applies the same rules
//! in Rust (every violation, with its field path).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use karpenter_api::condition::{Condition, Conditions};
use karpenter_api::crd::KarpenterCrd;
use karpenter_api::duration::KDuration;
use karpenter_api::node_class_api::TypedNodeClassApi;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub mod hash;
mod kubelet_fields;
mod validation;

pub use kubelet_fields::{FieldKind, bottlerocket_setting, kubelet_field_kind, kubelet_field_of_bottlerocket_setting};
pub use validation::{
    EVICTION_SIGNALS, FORBIDDEN_TAG_KEYS, FORBIDDEN_TAG_PREFIX, KUBELET_DEFAULT_IMAGE_GC_HIGH_PERCENT,
    KUBELET_DEFAULT_IMAGE_GC_LOW_PERCENT, MAX_BLOCK_DEVICE_MAPPINGS, MAX_NETWORK_INTERFACES, MAX_SELECTOR_TAGS,
    MAX_SELECTOR_TERMS, RESERVED_RESOURCES, parse_volume_size, validate_kubelet_configuration,
};

/// API group of EC2NodeClass.
pub const GROUP: &str = "karpenter.k8s.aws";
/// Kind name.
pub const KIND: &str = "EC2NodeClass";

/// Condition types of an EC2NodeClass. `Ready` is the conjunction of the others (see [`ready_dependents`]).
pub mod conditions {
    /// `True` when every condition it depends on is `True`: the class can be launched from.
    pub const READY: &str = "Ready";
    /// The AMI selector terms resolved to at least one AMI (`status.amis`).
    pub const AMIS_READY: &str = "AMIsReady";
    /// The subnet selector terms resolved to at least one subnet (`status.subnets`).
    pub const SUBNETS_READY: &str = "SubnetsReady";
    /// The security group selector terms resolved to at least one group (`status.securityGroups`).
    pub const SECURITY_GROUPS_READY: &str = "SecurityGroupsReady";
    /// The instance profile exists: the one named in `spec.instanceProfile`, or the one created for `spec.role`.
    pub const INSTANCE_PROFILE_READY: &str = "InstanceProfileReady";
    /// The controller's IAM permissions were checked with dry-run calls (CreateFleet, CreateLaunchTemplate, RunInstances).
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// The placement group selector resolved to an existing placement group.
    pub const PLACEMENT_GROUP_READY: &str = "PlacementGroupReady";
    /// Only part of `Ready` when the `ReservedCapacity` feature gate is on.
    pub const CAPACITY_RESERVATIONS_READY: &str = "CapacityReservationsReady";

    /// The condition types whose conjunction is `Ready`. `reserved_capacity` is the `ReservedCapacity` gate.
    pub fn ready_dependents(reserved_capacity: bool) -> Vec<&'static str> {
        let mut v = vec![
            AMIS_READY,
            SUBNETS_READY,
            SECURITY_GROUPS_READY,
            INSTANCE_PROFILE_READY,
            VALIDATION_SUCCEEDED,
            PLACEMENT_GROUP_READY,
        ];
        if reserved_capacity {
            v.push(CAPACITY_RESERVATIONS_READY);
        }
        v
    }

    /// Reasons set by the status controllers.
    pub mod reasons {
        /// `AMIsReady=False`: no AMI matches the selector terms.
        pub const AMI_NOT_FOUND: &str = "AMINotFound";
        /// `AMIsReady=False`: the alias names a family or version that has no published AMI.
        pub const UNSUPPORTED_ALIAS: &str = "UnsupportedAlias";
        /// `SubnetsReady=False`: no subnet matches the selector terms.
        pub const SUBNETS_NOT_FOUND: &str = "SubnetsNotFound";
        /// `SecurityGroupsReady=False`: no security group matches the selector terms.
        pub const SECURITY_GROUPS_NOT_FOUND: &str = "SecurityGroupsNotFound";
        /// `InstanceProfileReady=False`: the named instance profile does not exist.
        pub const INSTANCE_PROFILE_NOT_FOUND: &str = "InstanceProfileNotFound";
        /// `ValidationSucceeded=False`: the CreateFleet dry run was denied.
        pub const CREATE_FLEET_AUTH_CHECK_FAILED: &str = "CreateFleetAuthCheckFailed";
        /// `ValidationSucceeded=False`: the CreateLaunchTemplate dry run was denied.
        pub const CREATE_LAUNCH_TEMPLATE_AUTH_CHECK_FAILED: &str = "CreateLaunchTemplateAuthCheckFailed";
        /// `ValidationSucceeded=False`: the RunInstances dry run was denied.
        pub const RUN_INSTANCES_AUTH_CHECK_FAILED: &str = "RunInstancesAuthCheckFailed";
        /// `ValidationSucceeded=False`: `spec.tags` would overwrite tags Karpenter manages.
        pub const TAG_VALIDATION_FAILED: &str = "TagValidationFailed";
        /// `ValidationSucceeded=Unknown`: validation waits for the other conditions to be `True`.
        pub const DEPENDENCIES_NOT_READY: &str = "DependenciesNotReady";
        /// `ValidationSucceeded=False`: the generated user data is larger than EC2 accepts.
        pub const USER_DATA_SIZE_LIMIT_EXCEEDED: &str = "UserDataSizeLimitExceeded";
        /// `spec.kubelet` has CEL expressions but the AWS `NodeClassCEL` gate is off.
        pub const KUBELET_EXPRESSIONS_DISABLED: &str = "KubeletExpressionsDisabled";
        /// A kubelet CEL expression does not compile.
        pub const KUBELET_EXPRESSION_INVALID: &str = "KubeletExpressionInvalid";
        /// A kubelet CEL expression fails for a known instance type.
        pub const KUBELET_EXPRESSION_EVALUATION_FAILED: &str = "KubeletExpressionEvaluationFailed";
        /// `spec.kubelet` has an unknown field, a value of the wrong shape, a field the AMI family cannot carry,
        /// or breaks a kubelet rule (also the reason of the Warning event naming the problem).
        pub const INVALID_KUBELET_CONFIGURATION: &str = "InvalidKubeletConfiguration";
        /// `spec.userData` cannot be merged with Karpenter's bootstrap (a MIME document that cannot be split,
        /// Bottlerocket settings that are not TOML tables); also the Warning event's reason.
        pub const INVALID_USER_DATA: &str = "InvalidUserData";
        /// An AL2023 class while the cluster's service CIDR is unknown (nodeadm needs it); also the Warning
        /// event's reason.
        pub const CLUSTER_CIDR_NOT_FOUND: &str = "ClusterCIDRNotFound";
    }
}

pub use conditions::ready_dependents;

// -------------------------------------------------------------------------------------------------------------
// AMI family and alias.
// -------------------------------------------------------------------------------------------------------------

/// The AMI family: decides bootstrap format, default block devices and user-data merging.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum AmiFamily {
    /// Amazon Linux 2 (`AL2`): shell user data running the EKS bootstrap script; a 20 GiB root volume.
    #[serde(rename = "AL2")]
    Al2,
    /// Amazon Linux 2023 (`AL2023`): nodeadm's `NodeConfig` in MIME multi-part user data; a 20 GiB root volume.
    #[serde(rename = "AL2023")]
    Al2023,
    /// Bottlerocket: TOML settings as user data; a 4 GiB OS volume plus a 20 GiB data volume.
    Bottlerocket,
    /// No family: Karpenter adds no bootstrap and no default block devices; the user data is used as given, and
    /// the AMIs come from ID, name or tag selector terms (no alias names this family).
    Custom,
    /// Windows Server 2019 (EKS-optimized): PowerShell user data; a 50 GiB root volume.
    Windows2019,
    /// Windows Server 2022 (EKS-optimized): PowerShell user data; a 50 GiB root volume.
    Windows2022,
    /// Windows Server 2025 (EKS-optimized): PowerShell user data; a 50 GiB root volume.
    Windows2025,
}

impl AmiFamily {
    /// Every family, in declaration order.
    pub const ALL: [AmiFamily; 7] = [
        Self::Al2,
        Self::Al2023,
        Self::Bottlerocket,
        Self::Custom,
        Self::Windows2019,
        Self::Windows2022,
        Self::Windows2025,
    ];

    /// The name used in `spec.amiFamily` (`AL2023`, `Bottlerocket`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Al2 => "AL2",
            Self::Al2023 => "AL2023",
            Self::Bottlerocket => "Bottlerocket",
            Self::Custom => "Custom",
            Self::Windows2019 => "Windows2019",
            Self::Windows2022 => "Windows2022",
            Self::Windows2025 => "Windows2025",
        }
    }

    /// The family part of an alias (`al2023` in `al2023@latest`); `None` for `Custom`, which has no alias.
    pub fn alias_name(&self) -> Option<&'static str> {
        match self {
            Self::Al2 => Some("al2"),
            Self::Al2023 => Some("al2023"),
            Self::Bottlerocket => Some("bottlerocket"),
            Self::Custom => None,
            Self::Windows2019 => Some("windows2019"),
            Self::Windows2022 => Some("windows2022"),
            Self::Windows2025 => Some("windows2025"),
        }
    }

    /// Parses the family part of an alias (lowercase, exact).
    pub fn from_alias_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.alias_name() == Some(s))
    }

    /// Whether nodes of this family run Windows (they get `kubernetes.io/os: windows`).
    pub fn is_windows(&self) -> bool {
        matches!(self, Self::Windows2019 | Self::Windows2022 | Self::Windows2025)
    }
}

impl fmt::Display for AmiFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AmiFamily {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|f| f.as_str() == s).ok_or_else(|| format!("unknown AMI family {s:?}"))
    }
}

/// A parsed AMI alias, `family@version` (`al2023@latest`, `bottlerocket@v1.20.3`, `al2@v20240807`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Alias {
    /// The family the alias selects AMIs of.
    pub family: AmiFamily,
    /// `latest` or a pinned version, as written.
    pub version: String,
}

impl Alias {
    /// The version meaning "the newest AMI of the family".
    pub const LATEST: &'static str = "latest";

    /// Whether the alias follows the newest AMI (`family@latest`) rather than a pinned version.
    pub fn is_latest(&self) -> bool {
        self.version == Self::LATEST
    }
}

impl fmt::Display for Alias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.family.alias_name().unwrap_or("custom"), self.version)
    }
}

/// Why an alias string is not valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AliasError {
    #[error("alias must be of the form family@version (e.g. al2023@latest), got {0:?}")]
    /// Not `family@version`; holds the text as written.
    Format(String),
    #[error(
        "family {0:?} is not supported, must be one of al2, al2023, bottlerocket, windows2019, windows2022, windows2025"
    )]
    /// A family with no alias (`custom` included); holds the family as written.
    UnknownFamily(String),
    #[error("windows families may only specify version 'latest'")]
    /// A Windows family with a version other than `latest` (Windows AMIs cannot be pinned).
    WindowsVersion,
    #[error("alias may be at most {max} characters", max = MAX_ALIAS_LEN)]
    /// Longer than the API allows.
    TooLong,
}

/// Maximum length of an alias.
pub const MAX_ALIAS_LEN: usize = 30;

impl FromStr for Alias {
    type Err = AliasError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > MAX_ALIAS_LEN {
            return Err(AliasError::TooLong);
        }
        let (family, version) = s.split_once('@').ok_or_else(|| AliasError::Format(s.to_string()))?;
        if family.is_empty() || !family.bytes().all(|b| b.is_ascii_alphanumeric()) || version.is_empty() {
            return Err(AliasError::Format(s.to_string()));
        }
        let family = AmiFamily::from_alias_name(family).ok_or_else(|| AliasError::UnknownFamily(family.to_string()))?;
        if family.is_windows() && version != Alias::LATEST {
            return Err(AliasError::WindowsVersion);
        }
        Ok(Self { family, version: version.to_string() })
    }
}

// -------------------------------------------------------------------------------------------------------------
// Selector terms.
// -------------------------------------------------------------------------------------------------------------

/// Selects subnets by tags or id. Terms are ORed; fields within a term are ANDed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.tags) || has(self.id)", "message": "expected at least one, got none, ['tags', 'id']"},
    {"rule": "!(has(self.id) && has(self.tags))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term"}
]))]
pub struct SubnetSelectorTerm {
    /// Tags a subnet must carry; value `*` matches any value of the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(k, k != '' && self[k] != '')", "message": "empty tag keys or values aren't supported"}
    ]))]
    pub tags: Option<BTreeMap<String, String>>,
    /// Subnet id (`subnet-...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^subnet-[0-9a-z]+$"))]
    pub id: Option<String>,
}

/// Selects security groups by tags, id or group name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.tags) || has(self.id) || has(self.name)", "message": "expected at least one, got none, ['tags', 'id', 'name']"},
    {"rule": "!has(self.id) || !(has(self.tags) || has(self.name))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"},
    {"rule": "!has(self.name) || !(has(self.tags) || has(self.id))", "message": "'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term"}
]))]
pub struct SecurityGroupSelectorTerm {
    /// Tags a security group must carry; value `*` matches any value of the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(k, k != '' && self[k] != '')", "message": "empty tag keys or values aren't supported"}
    ]))]
    pub tags: Option<BTreeMap<String, String>>,
    /// Security group id (`sg-...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sg-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// Security group name (the group name, not the `Name` tag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Which instances may use a capacity reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMatchCriteria {
    /// Any matching instance launched without a target lands in the reservation.
    Open,
    /// Only instances launched with the reservation as target.
    Targeted,
}

/// Selects capacity reservations (ODCRs and capacity blocks) by tags, id, owner or match criteria.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.tags) || has(self.id) || has(self.instanceMatchCriteria)", "message": "expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']"},
    {"rule": "!has(self.id) || !(has(self.tags) || has(self.ownerID) || has(self.instanceMatchCriteria))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in a capacity reservation selector term"}
]))]
pub struct CapacityReservationSelectorTerm {
    /// Tags a reservation must carry; value `*` matches any value of the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(k, k != '' && self[k] != '')", "message": "empty tag keys or values aren't supported"}
    ]))]
    pub tags: Option<BTreeMap<String, String>>,
    /// Reservation id (`cr-...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^cr-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// Owning AWS account id (12 digits).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ownerID")]
    #[schemars(regex(pattern = r"^[0-9]{12}$"))]
    pub owner_id: Option<String>,
    /// `open` or `targeted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<InstanceMatchCriteria>,
}

/// Selects the placement group instances launch into, by name or id (exactly one).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.name) != has(self.id)", "message": "expected exactly one of ['name', 'id']"}
]))]
pub struct PlacementGroupSelector {
    /// Placement group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub name: Option<String>,
    /// Placement group id (`pg-...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^pg-[0-9a-z]+$"))]
    pub id: Option<String>,
}

/// Selects AMIs by alias, id, name (+ owner), tags or SSM parameter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.tags) || has(self.id) || has(self.name) || has(self.alias) || has(self.ssmParameter)", "message": "expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']"},
    {"rule": "!has(self.id) || !(has(self.alias) || has(self.tags) || has(self.name) || has(self.owner))", "message": "'id' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"},
    {"rule": "!has(self.alias) || !(has(self.id) || has(self.tags) || has(self.name) || has(self.owner) || has(self.ssmParameter))", "message": "'alias' is mutually exclusive, cannot be set with a combination of other fields in amiSelectorTerms"}
]))]
pub struct AmiSelectorTerm {
    /// `family@version`: an EKS-optimized AMI resolved through SSM (`al2023@latest`, `bottlerocket@v1.20.3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30), regex(pattern = r"^[a-zA-Z0-9]+@.+$"))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.matches('^(al2|al2023|bottlerocket|windows2019|windows2022|windows2025)@')", "message": "family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'"},
        {"rule": "!self.matches('^windows20(19|22|25)@') || self.endsWith('@latest')", "message": "windows families may only specify version 'latest'"}
    ]))]
    pub alias: Option<String>,
    /// Tags an AMI must carry; value `*` matches any value of the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(k, k != '' && self[k] != '')", "message": "empty tag keys or values aren't supported"}
    ]))]
    pub tags: Option<BTreeMap<String, String>>,
    /// AMI id (`ami-...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^ami-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// AMI name; may contain wildcards (`*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// AMI owner: an account id, `self`, `amazon` or `aws-marketplace`. Defaults to `self,amazon` with a name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]{12}|self|amazon|aws-marketplace)$"))]
    pub owner: Option<String>,
    /// Name or ARN of an SSM parameter whose value is an AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2048))]
    pub ssm_parameter: Option<String>,
}

impl AmiSelectorTerm {
    /// The parsed alias of this term, if it has a valid one.
    pub fn parsed_alias(&self) -> Option<Alias> {
        self.alias.as_deref()?.parse().ok()
    }
}

// -------------------------------------------------------------------------------------------------------------
// Kubelet.
// -------------------------------------------------------------------------------------------------------------

/// `spec.kubelet`: an open map of upstream `kubelet.config.k8s.io/v1beta1 KubeletConfiguration` fields (v1.15).
///
/// Karpenter interprets 12 fields (the typed fields below; five of them shape scheduling) and passes every other
/// field through to the node's bootstrap ([`other`](Self::other)). The CRD no longer validates the map (it is
/// `x-kubernetes-preserve-unknown-fields`), so decoding never fails on its content: a field whose value does not
/// fit its typed slot stays in `other` with its raw value, where [`validate_kubelet_configuration`] reports it
/// (`ValidationSucceeded=False`, `InvalidKubeletConfiguration`) instead of the object vanishing from watches.
/// Serialization writes the typed fields and then `other`, so a class holding only v1.14 fields serializes (and
/// hashes) exactly as before.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    /// Cluster DNS server IPs; defaults to the kube-dns service IP.
    #[serde(skip_serializing_if = "Vec::is_empty", rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    /// Maximum pods per node: a non-negative int, or a CEL expression evaluated per instance type (AWS gate
    /// `NodeClassCEL`); defaults to the instance type's ENI-based limit (or 110).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<MaxPods>,
    /// Maximum pods per vCPU; the smaller of this and `maxPods` wins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<i32>,
    /// Resources reserved for OS daemons (`cpu`, `memory`, `ephemeral-storage`, `pid`): quantities, or CEL
    /// expressions (any value that is not a quantity; AWS gate `NodeClassCEL`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, String>,
    /// Resources reserved for Kubernetes daemons (`cpu`, `memory`, `ephemeral-storage`, `pid`): quantities, or
    /// CEL expressions as in `systemReserved`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds: signal → quantity or percentage.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, String>,
    /// Soft eviction thresholds: signal → quantity or percentage; each needs a grace period.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft: BTreeMap<String, String>,
    /// Grace period per soft eviction signal.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, KDuration>,
    /// Maximum pod termination grace period (seconds) used when a soft eviction threshold is met.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage percent that always triggers image garbage collection.
    #[serde(skip_serializing_if = "Option::is_none", rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percent below which image garbage collection never runs.
    #[serde(skip_serializing_if = "Option::is_none", rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Enforce CPU limits with CFS quota.
    #[serde(skip_serializing_if = "Option::is_none", rename = "cpuCFSQuota")]
    pub cpu_cfs_quota: Option<bool>,
    /// Every field not held by a typed field above, raw: the fields Karpenter passes through without
    /// interpreting them ([`passthrough`](Self::passthrough)), and an interpreted field whose value has the wrong
    /// shape (kept so validation names it and the drift hash sees it). Never holds a key a typed field also holds.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// The JSON names of the typed (interpreted) fields of [`KubeletConfiguration`].
pub const INTERPRETED_KUBELET_FIELDS: [&str; 12] = [
    "clusterDNS",
    "maxPods",
    "podsPerCore",
    "systemReserved",
    "kubeReserved",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "cpuCFSQuota",
];

/// Moves `raw[name]` into `slot` when it decodes as `T`; a value that does not stays in `raw` (so it lands in
/// `other`). A null is the same as absent.
fn take_typed<T: serde::de::DeserializeOwned>(raw: &mut BTreeMap<String, serde_json::Value>, name: &str, slot: &mut T) {
    match raw.remove(name) {
        None | Some(serde_json::Value::Null) => {}
        Some(v) => match T::deserialize(&v) {
            Ok(t) => *slot = t,
            Err(_) => {
                raw.insert(name.to_owned(), v);
            }
        },
    }
}

impl KubeletConfiguration {
    /// The typed view of a raw `spec.kubelet` map: never fails (see the type's docs).
    pub fn from_raw(mut raw: BTreeMap<String, serde_json::Value>) -> Self {
        let mut k = Self::default();
        take_typed(&mut raw, "clusterDNS", &mut k.cluster_dns);
        take_typed(&mut raw, "maxPods", &mut k.max_pods);
        take_typed(&mut raw, "podsPerCore", &mut k.pods_per_core);
        take_typed(&mut raw, "systemReserved", &mut k.system_reserved);
        take_typed(&mut raw, "kubeReserved", &mut k.kube_reserved);
        take_typed(&mut raw, "evictionHard", &mut k.eviction_hard);
        take_typed(&mut raw, "evictionSoft", &mut k.eviction_soft);
        take_typed(&mut raw, "evictionSoftGracePeriod", &mut k.eviction_soft_grace_period);
        take_typed(&mut raw, "evictionMaxPodGracePeriod", &mut k.eviction_max_pod_grace_period);
        take_typed(&mut raw, "imageGCHighThresholdPercent", &mut k.image_gc_high_threshold_percent);
        take_typed(&mut raw, "imageGCLowThresholdPercent", &mut k.image_gc_low_threshold_percent);
        take_typed(&mut raw, "cpuCFSQuota", &mut k.cpu_cfs_quota);
        k.other = raw;
        k
    }

    /// The fields passed through to the node's bootstrap uninterpreted: `other` without the interpreted names
    /// (an interpreted field there has a malformed value, which validation rejects).
    pub fn passthrough(&self) -> impl Iterator<Item = (&String, &serde_json::Value)> {
        self.other.iter().filter(|(k, _)| !INTERPRETED_KUBELET_FIELDS.contains(&k.as_str()))
    }
}

fn decode_error<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> Option<String> {
    T::deserialize(v).err().map(|e| e.to_string())
}

/// Why the value `v` of the interpreted field `name` does not fit its typed slot (`None` when it does, or when
/// `name` is not interpreted). Mirrors the slot types of [`KubeletConfiguration::from_raw`].
pub(crate) fn interpreted_decode_error(name: &str, v: &serde_json::Value) -> Option<String> {
    match name {
        "clusterDNS" => decode_error::<Vec<String>>(v),
        "maxPods" => decode_error::<MaxPods>(v),
        "podsPerCore" | "evictionMaxPodGracePeriod" | "imageGCHighThresholdPercent" | "imageGCLowThresholdPercent" => {
            decode_error::<i32>(v)
        }
        "systemReserved" | "kubeReserved" | "evictionHard" | "evictionSoft" => {
            decode_error::<BTreeMap<String, String>>(v)
        }
        "evictionSoftGracePeriod" => decode_error::<BTreeMap<String, KDuration>>(v),
        "cpuCFSQuota" => decode_error::<bool>(v),
        _ => None,
    }
}

/// Any JSON object decodes (see [`KubeletConfiguration::from_raw`]); only a non-object fails, which the CRD's
/// `type: object` already rules out.
impl<'de> Deserialize<'de> for KubeletConfiguration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        BTreeMap::<String, serde_json::Value>::deserialize(d).map(Self::from_raw)
    }
}

/// An open object: the API server keeps every field and checks none (the controller does, see
/// [`validate_kubelet_configuration`]).
impl JsonSchema for KubeletConfiguration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "KubeletConfiguration".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
    }

    fn inline_schema() -> bool {
        true
    }
}

/// `kubelet.maxPods`: an int (static) or a string (a CEL expression evaluated per instance type, v1.15). An int
/// serializes as a JSON number exactly as the former `int32` field did, so existing objects hash alike.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum MaxPods {
    /// A fixed value (validation rejects negative ones).
    Static(i32),
    /// A CEL expression (see the AWS provider's kubelet expression docs).
    Expression(String),
}

impl MaxPods {
    /// The static value, if this is one.
    pub fn as_static(&self) -> Option<i32> {
        match self {
            MaxPods::Static(v) => Some(*v),
            MaxPods::Expression(_) => None,
        }
    }

    /// The expression, if this is one.
    pub fn as_expression(&self) -> Option<&str> {
        match self {
            MaxPods::Static(_) => None,
            MaxPods::Expression(e) => Some(e),
        }
    }
}

/// An int must fit in int32 (the CRD's `maximum` says so too); any string is an expression.
impl<'de> Deserialize<'de> for MaxPods {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = MaxPods;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an int32 or a CEL expression string")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<MaxPods, E> {
                i32::try_from(v).map(MaxPods::Static).map_err(|_| E::custom(format!("{v} is out of the int32 range")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<MaxPods, E> {
                i32::try_from(v).map(MaxPods::Static).map_err(|_| E::custom(format!("{v} is out of the int32 range")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<MaxPods, E> {
                Ok(MaxPods::Expression(v.to_owned()))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl From<i32> for MaxPods {
    fn from(v: i32) -> Self {
        MaxPods::Static(v)
    }
}

/// A `kubeReserved` / `systemReserved` value: a quantity, or (anything that does not parse as one) a CEL
/// expression. The one place that decides which a value is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReservedValue<'a> {
    /// A resource quantity (possibly negative: validation rejects those).
    Quantity(karpenter_requirements::Quantity),
    /// A CEL expression.
    Expression(&'a str),
}

impl<'a> ReservedValue<'a> {
    /// Classifies `v`.
    pub fn parse(v: &'a str) -> Self {
        match v.parse() {
            Ok(q) => ReservedValue::Quantity(q),
            Err(_) => ReservedValue::Expression(v),
        }
    }
}

impl KubeletConfiguration {
    /// Whether any value is a CEL expression (`maxPods` as a string, or a reserved value that is not a quantity).
    pub fn has_expressions(&self) -> bool {
        self.max_pods.as_ref().is_some_and(|m| m.as_expression().is_some())
            || self
                .kube_reserved
                .values()
                .chain(self.system_reserved.values())
                .any(|v| matches!(ReservedValue::parse(v), ReservedValue::Expression(_)))
    }
}

// -------------------------------------------------------------------------------------------------------------
// Block devices, network interfaces, metadata options and friends.
// -------------------------------------------------------------------------------------------------------------

/// EBS volume type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    /// `standard`: previous-generation magnetic volumes.
    Standard,
    /// `io1`: provisioned-IOPS SSD (`iops` required by EC2).
    Io1,
    /// `io2`: provisioned-IOPS SSD with higher durability (`iops` required by EC2).
    Io2,
    /// `gp2`: general-purpose SSD whose IOPS scale with size.
    Gp2,
    /// `sc1`: cold HDD, throughput-optimised for infrequent access.
    Sc1,
    /// `st1`: throughput-optimised HDD.
    St1,
    /// `gp3`: general-purpose SSD with IOPS and throughput set apart from size (3,000 IOPS and 125 MiB/s
    /// baseline); the type of every AMI family's default block devices.
    Gp3,
}

/// An EBS volume.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.snapshotID) || has(self.volumeSize)", "message": "snapshotID or volumeSize must be defined"},
    {"rule": "!has(self.volumeInitializationRate) || has(self.snapshotID)", "message": "volumeInitializationRate must not be set when snapshotID is not set"}
]))]
pub struct BlockDevice {
    /// Delete the volume when the instance terminates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Encrypt the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// KMS key for encryption.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "kmsKeyID")]
    pub kms_key_id: Option<String>,
    /// Snapshot the volume is created from.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "snapshotID")]
    pub snapshot_id: Option<String>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Snapshot initialisation rate in MiB/s (100..300); only with `snapshotID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
    /// Size: up to 59000Gi / 64000G / 58Ti / 64T.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = r"^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|5[0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-3][0-9]{3}|64000)G|(?:[1-9]|[1-4][0-9]|5[0-8])Ti|(?:[1-9]|[1-5][0-9]|6[0-4])T)$"
    ))]
    pub volume_size: Option<String>,
    /// Volume type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["standard", "io1", "io2", "gp2", "sc1", "st1", "gp3"]))]
    pub volume_type: Option<VolumeType>,
}

impl BlockDevice {
    /// Volume size in bytes, if set and valid.
    pub fn volume_size_bytes(&self) -> Option<u64> {
        parse_volume_size(self.volume_size.as_deref()?)
    }

    /// Volume size in GiB rounded up (what EC2 takes), if set and valid.
    pub fn volume_size_gib(&self) -> Option<u64> {
        self.volume_size_bytes().map(|b| b.div_ceil(1 << 30))
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A block device mapping.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockDeviceMapping {
    /// Device name (`/dev/xvda`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// This is the root volume (the one the kubelet and container runtime use).
    #[serde(default, skip_serializing_if = "is_false")]
    pub root_volume: bool,
}

/// Local instance-store handling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InstanceStorePolicy {
    /// RAID0 all local NVMe disks and use the array for kubelet and containerd.
    #[serde(rename = "RAID0")]
    Raid0,
}

/// Network interface type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InterfaceType {
    /// A regular ENI (optionally EFA-capable).
    Interface,
    /// An EFA-only interface (no IP networking).
    EfaOnly,
}

/// An explicitly configured network interface.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkInterface {
    /// Network card index.
    #[schemars(range(min = 0))]
    pub network_card_index: i32,
    /// Device index on the card.
    #[schemars(range(min = 0))]
    pub device_index: i32,
    /// `interface` or `efa-only`.
    pub interface_type: InterfaceType,
}

/// Enabled / disabled switch used by metadata options and CPU options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EnabledDisabled {
    /// `enabled`.
    Enabled,
    /// `disabled`.
    Disabled,
}

/// IMDSv2 token requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HttpTokens {
    /// Metadata requests must carry an IMDSv2 session token (Karpenter's default).
    Required,
    /// Tokenless IMDSv1 requests are accepted as well.
    Optional,
}

fn default_enabled() -> EnabledDisabled {
    EnabledDisabled::Enabled
}
fn default_disabled() -> EnabledDisabled {
    EnabledDisabled::Disabled
}
fn default_hop_limit() -> i64 {
    1
}
fn default_http_tokens() -> HttpTokens {
    HttpTokens::Required
}

/// Instance metadata service options.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MetadataOptions {
    /// IMDS endpoint on or off.
    #[serde(default = "default_enabled")]
    pub http_endpoint: EnabledDisabled,
    /// IMDS IPv6 endpoint on or off.
    #[serde(default = "default_disabled", rename = "httpProtocolIPv6")]
    pub http_protocol_ipv6: EnabledDisabled,
    /// PUT response hop limit (1..64); 1 keeps pods from reaching IMDS.
    #[serde(default = "default_hop_limit")]
    #[schemars(range(min = 1, max = 64))]
    pub http_put_response_hop_limit: i64,
    /// `required` (IMDSv2 only) or `optional`.
    #[serde(default = "default_http_tokens")]
    pub http_tokens: HttpTokens,
}

impl Default for MetadataOptions {
    fn default() -> Self {
        Self {
            http_endpoint: EnabledDisabled::Enabled,
            http_protocol_ipv6: EnabledDisabled::Disabled,
            http_put_response_hop_limit: 1,
            http_tokens: HttpTokens::Required,
        }
    }
}

/// Connection-tracking timeouts (seconds) for the primary interface; at least one must be set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)", "message": "expected at least one, got none, ['tcpEstablishedTimeout', 'udpStreamTimeout', 'udpTimeout']"}
]))]
pub struct ConnectionTracking {
    /// Idle timeout of established TCP connections (60..432000 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432000))]
    pub tcp_established_timeout: Option<i32>,
    /// Idle timeout of UDP flows seen in both directions (60..180 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    /// Idle timeout of one-direction UDP flows (30..60 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

/// CPU options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CpuOptions {
    /// `enabled` restricts launches to instance types that support nested virtualization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub nested_virtualization: Option<EnabledDisabled>,
}

/// Nitro Enclaves options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnclaveOptions {
    /// Launch instances with Nitro Enclaves enabled (`true`) or explicitly disabled (`false`). Instance types
    /// without enclave support are not filtered out: their launches fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

// -------------------------------------------------------------------------------------------------------------
// Spec and status.
// -------------------------------------------------------------------------------------------------------------

/// Desired configuration of EC2 instances launched for NodePools that reference this class.
// kube's `printcolumn(...)` entries repeat `type_ = "string"`, which clippy reads as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    root = "EC2NodeClassSchema",
    plural = "ec2nodeclasses",
    singular = "ec2nodeclass",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    category = "karpenter",
    status = "EC2NodeClassStatus",
    derive = "PartialEq",
    doc = "EC2NodeClass is the AWS-specific configuration of the instances Karpenter launches.",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    printcolumn(name = "Role", type_ = "string", json_path = ".spec.role", priority = 1)
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-validations" = [
    {"rule": "has(self.amiFamily) || self.amiSelectorTerms.exists(x, has(x.alias))", "message": "amiFamily must be specified if amiSelectorTerms does not contain an alias"},
    {"rule": "!has(self.amiFamily) || self.amiFamily == 'Custom' || self.amiSelectorTerms.all(x, !has(x.alias) || x.alias.startsWith({'AL2': 'al2@', 'AL2023': 'al2023@', 'Bottlerocket': 'bottlerocket@', 'Windows2019': 'windows2019@', 'Windows2022': 'windows2022@', 'Windows2025': 'windows2025@'}[self.amiFamily]))", "message": "amiFamily must be Custom or match the family of the alias"},
    {"rule": "(has(self.role) && !has(self.instanceProfile)) || (!has(self.role) && has(self.instanceProfile))", "message": "must specify exactly one of ['role', 'instanceProfile']"}
]))]
pub struct EC2NodeClassSpec {
    /// Subnets instances may launch into (1..30 terms, ORed).
    #[schemars(length(min = 1, max = 30))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Security groups attached to instances (1..30 terms, ORed).
    #[schemars(length(min = 1, max = 30))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Capacity reservations instances may launch into (at most 30 terms, ORed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 30))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// Placement group instances launch into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// AMIs to launch (1..30 terms, ORed); an alias term must be the only term.
    #[schemars(length(min = 1, max = 30))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "!self.exists(x, has(x.alias)) || self.size() == 1", "message": "'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"}
    ]))]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// Bootstrap family; required unless an alias term gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["AL2", "AL2023", "Bottlerocket", "Custom", "Windows2019", "Windows2022", "Windows2025"]))]
    pub ami_family: Option<AmiFamily>,
    /// User data merged with Karpenter's generated bootstrap (format depends on the AMI family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// IAM role for a Karpenter-managed instance profile. Exclusive with `instanceProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub role: Option<String>,
    /// Existing instance profile to use. Exclusive with `role`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub instance_profile: Option<String>,
    /// Tags for instances, volumes, launch templates, network interfaces and fleet requests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.all(k, k != '')", "message": "empty tag keys aren't supported"},
        {"rule": "self.all(k, k != 'eks:eks-cluster-name')", "message": "tag contains a restricted tag matching eks:eks-cluster-name"},
        {"rule": "self.all(k, !k.startsWith('kubernetes.io/cluster'))", "message": "tag contains a restricted tag matching kubernetes.io/cluster/"},
        {"rule": "self.all(k, k != 'karpenter.sh/nodepool')", "message": "tag contains a restricted tag matching karpenter.sh/nodepool"},
        {"rule": "self.all(k, k != 'karpenter.sh/nodeclaim')", "message": "tag contains a restricted tag matching karpenter.sh/nodeclaim"},
        {"rule": "self.all(k, k != 'karpenter.k8s.aws/ec2nodeclass')", "message": "tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass"}
    ]))]
    pub tags: BTreeMap<String, String>,
    /// Kubelet settings: any field of upstream's `kubelet.config.k8s.io/v1beta1 KubeletConfiguration`. Checked by
    /// the controller (`ValidationSucceeded`, reason `InvalidKubeletConfiguration`), not by the API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Block device mappings (at most 50; at most one root volume). Default: the AMI family's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.filter(x, has(x.rootVolume) && x.rootVolume).size() <= 1", "message": "must have only one blockDeviceMappings with rootVolume"}
    ]))]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// Local NVMe instance-store policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Explicit network interfaces (must include the primary: card 0, device 0, `interface`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 150))]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    #[schemars(extend("x-kubernetes-validations" = [
        {"rule": "self.exists(x, x.networkCardIndex == 0 && x.deviceIndex == 0 && x.interfaceType == 'interface')", "message": "networkInterfaces must include the primary interface (networkCardIndex 0, deviceIndex 0, interfaceType interface)"},
        {"rule": "self.all(x, self.exists_one(y, y.networkCardIndex == x.networkCardIndex && y.deviceIndex == x.deviceIndex))", "message": "networkCardIndex and deviceIndex pairs must be unique"},
        {"rule": "self.all(x, x.interfaceType != 'efa-only' || self.exists_one(y, y.interfaceType == 'efa-only' && y.networkCardIndex == x.networkCardIndex))", "message": "at most one efa-only interface per network card"}
    ]))]
    pub network_interfaces: Vec<NetworkInterface>,
    /// CloudWatch detailed monitoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Assign a public IP to the primary interface (default: the subnet's setting).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "associatePublicIPAddress")]
    pub associate_public_ip_address: Option<bool>,
    /// IPv4 (or IPv6) prefixes to assign to the primary interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    /// Instance metadata service options.
    #[serde(default)]
    pub metadata_options: MetadataOptions,
    /// Connection-tracking timeouts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// CPU options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
    /// Nitro Enclaves: unset leaves the launch template without `EnclaveOptions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enclave_options: Option<EnclaveOptions>,
    /// EC2 Fleet `Context` (reserved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

karpenter_api::optional_spec_root!(
    /// EC2NodeClass is the AWS-specific configuration of the instances Karpenter launches. As upstream's CRD, it
    /// does not require `spec`: an object without one decodes with the empty spec, which `validate()` rejects
    /// (the selector terms are required) and the node class controller reports as not ready.
    EC2NodeClass,
    EC2NodeClassSchema,
    EC2NodeClassSpec,
    EC2NodeClassStatus
);

/// A resolved subnet.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Subnet {
    /// The subnet's ID (`subnet-...`).
    pub id: String,
    /// Availability zone name.
    pub zone: String,
    /// Availability zone id.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "zoneID")]
    pub zone_id: Option<String>,
}

/// A resolved security group.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecurityGroup {
    /// The security group's ID (`sg-...`).
    pub id: String,
    /// The security group's name, when EC2 reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A node selector requirement (the shape of `core/v1 NodeSelectorRequirement`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeSelectorRequirement {
    /// The label key the requirement constrains (`kubernetes.io/arch`, `karpenter.k8s.aws/instance-gpu-count`).
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`.
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// The values the operator compares with: any number for `In`/`NotIn`, none for `Exists`/`DoesNotExist`,
    /// one integer for `Gt`/`Lt`.
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub values: Vec<String>,
}

impl NodeSelectorRequirement {
    /// A requirement on `key` with `operator` (spelt as the API spells it, e.g. `"In"`) and `values`.
    pub fn new(key: impl Into<String>, operator: &str, values: &[&str]) -> Self {
        Self { key: key.into(), operator: operator.into(), values: values.iter().map(|v| v.to_string()).collect() }
    }
}

/// A resolved AMI with the instance-type requirements it serves (architecture, GPU/accelerator variant, OS).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Ami {
    /// The AMI's ID (`ami-...`).
    pub id: String,
    /// The AMI's name, when EC2 reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Deprecated AMIs are used only when no non-deprecated AMI matches.
    #[serde(default, skip_serializing_if = "is_false")]
    pub deprecated: bool,
    /// What an instance type must satisfy to launch with this AMI (architecture, accelerator presence, ...).
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub requirements: Vec<NodeSelectorRequirement>,
}

/// Reservation kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CapacityReservationType {
    /// On-demand capacity reservation.
    #[default]
    Default,
    /// Capacity block for ML.
    CapacityBlock,
}

/// Reservation state as Karpenter sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CapacityReservationState {
    /// Instances can launch into the reservation (the default).
    #[default]
    Active,
    /// A capacity block within 40 minutes of its end.
    Expiring,
}

/// A resolved capacity reservation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacityReservation {
    /// The reservation's ID (`cr-...`).
    #[schemars(regex(pattern = r"^cr-[0-9a-z]+$"))]
    pub id: String,
    /// The availability zone the reserved capacity is in.
    pub availability_zone: String,
    /// The one instance type the reservation holds capacity for.
    pub instance_type: String,
    /// The 12-digit ID of the AWS account that owns the reservation (it may be shared from another account).
    #[serde(rename = "ownerID")]
    #[schemars(regex(pattern = r"^[0-9]{12}$"))]
    pub owner_id: String,
    /// Which launches the reservation takes: `open` (any matching launch) or `targeted` (only launches that name
    /// it, as Karpenter's do).
    pub instance_match_criteria: InstanceMatchCriteria,
    /// An on-demand capacity reservation (`default`, the default) or a capacity block for ML.
    #[serde(default)]
    pub reservation_type: CapacityReservationType,
    /// Whether EC2 may reclaim the reservation's capacity while instances run in it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub interruptible: bool,
    /// `active`, or `expiring` for a capacity block inside EC2's reclaim window before its end (only capacity
    /// blocks expire this way).
    #[serde(default)]
    pub state: CapacityReservationState,
    /// RFC 3339 end time, if the reservation ends: from then on its capacity is released and no instance can
    /// launch into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub end_time: Option<String>,
}

/// Observed state of an EC2NodeClass: what its selectors resolved to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EC2NodeClassStatus {
    /// The subnets `subnetSelectorTerms` currently select: where instances may launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub subnets: Vec<Subnet>,
    /// The security groups `securityGroupSelectorTerms` currently select, attached to every instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub security_groups: Vec<SecurityGroup>,
    /// The capacity reservations `capacityReservationSelectorTerms` currently select (each a reserved offering).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub capacity_reservations: Vec<CapacityReservation>,
    /// The AMIs `amiSelectorTerms` (or the family's alias) currently resolve to, each with the instance types it
    /// serves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub amis: Vec<Ami>,
    /// Name of the instance profile instances launch with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Readiness of the node class and of each thing it resolves (`SubnetsReady`, `AMIsReady`, ...,
    /// `Ready`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl Conditions for EC2NodeClassStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }
}

impl KarpenterCrd for EC2NodeClass {}

/// The EC2NodeClass API, for a program's [`NodeClassApis`](karpenter_api::node_class_api::NodeClassApis).
pub static EC2_NODE_CLASS_API: TypedNodeClassApi<EC2NodeClass> = TypedNodeClassApi::new();

/// The node classes this provider serves (EC2NodeClass), as one registry.
pub fn node_class_apis() -> karpenter_api::node_class_api::NodeClassApis {
    karpenter_api::node_class_api::NodeClassApis::none().with(&EC2_NODE_CLASS_API)
}

impl EC2NodeClassSpec {
    /// The alias of the (single) alias term, if any term has a valid alias.
    pub fn alias(&self) -> Option<Alias> {
        self.ami_selector_terms.iter().find_map(AmiSelectorTerm::parsed_alias)
    }

    /// `amiFamily` if set, otherwise the alias's family. `None` only for a class that fails validation.
    pub fn effective_ami_family(&self) -> Option<AmiFamily> {
        self.ami_family.or_else(|| self.alias().map(|a| a.family))
    }

    /// The root-volume mapping, if one is marked.
    pub fn root_volume(&self) -> Option<&BlockDeviceMapping> {
        self.block_device_mappings.iter().find(|m| m.root_volume)
    }

    /// True when Karpenter manages the instance profile (from `role`).
    pub fn manages_instance_profile(&self) -> bool {
        self.role.is_some()
    }

    /// What the static drift hash covers, as JSON: the spec without [`HASH_EXCLUDED_FIELDS`] (they
    /// drift dynamically by comparing resolved status, or do not need new instances), plus the *resolved* AMI
    /// family under `amiFamily` and the cluster CA bundle under `caBundle` when known. Hash it with the crate's
    /// canonical hash (order-insensitive lists, empty values dropped).
    pub fn drift_hash_input(&self, ca_bundle: Option<&str>) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        if let serde_json::Value::Object(map) = &mut v {
            for f in HASH_EXCLUDED_FIELDS {
                map.remove(f);
            }
            if let Some(f) = self.effective_ami_family() {
                map.insert("amiFamily".into(), serde_json::Value::String(f.as_str().into()));
            }
            if let Some(ca) = ca_bundle {
                map.insert("caBundle".into(), serde_json::Value::String(ca.into()));
            }
        }
        v
    }
}

/// Spec fields left out of the static drift hash (the resolved AMI family is added back).
pub const HASH_EXCLUDED_FIELDS: [&str; 6] = [
    "subnetSelectorTerms",
    "securityGroupSelectorTerms",
    "capacityReservationSelectorTerms",
    "amiSelectorTerms",
    "ipPrefixCount",
    "amiFamily",
];

impl EC2NodeClass {
    /// See [`EC2NodeClassSpec::alias`].
    pub fn alias(&self) -> Option<Alias> {
        self.spec.alias()
    }

    /// See [`EC2NodeClassSpec::effective_ami_family`].
    pub fn effective_ami_family(&self) -> Option<AmiFamily> {
        self.spec.effective_ami_family()
    }

    /// `status.conditions`, empty when there is no status.
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
    }

    /// Whether the `Ready` condition is `True`.
    pub fn is_ready(&self) -> bool {
        self.conditions().is_true(conditions::READY)
    }
}
