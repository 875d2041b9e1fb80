//! The EC2 instance API Karpenter uses — CreateFleet (instant), DescribeInstances, TerminateInstances,
//! CreateTags — as the narrow [`FleetApi`] trait over our own structs, plus the
//! pieces of a launch that are pure: the tags of an instance, the reason mapping of fleet errors.

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::api_error::AwsApiError;

/// Tag (and label) naming the NodeClaim an instance was launched for.
pub const NODE_CLAIM_TAG: &str = "karpenter.sh/nodeclaim";
/// Tag naming the NodePool.
pub const NODE_POOL_TAG: &str = "karpenter.sh/nodepool";
/// Tag naming the EC2NodeClass.
pub const NODE_CLASS_TAG: &str = "karpenter.k8s.aws/ec2nodeclass";
/// Tag naming the EKS cluster.
pub const EKS_CLUSTER_NAME_TAG: &str = "eks:eks-cluster-name";
/// Tag naming the cluster on launch templates.
pub const CLUSTER_TAG: &str = "karpenter.k8s.aws/cluster";

/// `kubernetes.io/cluster/<cluster>` (value `owned`).
pub fn cluster_ownership_tag(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

/// `DefaultTargetCapacityType` of a fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum TargetCapacityType {
    /// `spot`.
    Spot,
    /// `on-demand` (also default, targeted capacity reservations: the reservation is in the launch template).
    OnDemand,
    /// `capacity-block`.
    CapacityBlock,
    /// `reserved-capacity` (interruptible capacity reservations).
    ReservedCapacity,
}

impl TargetCapacityType {
    /// EC2's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Spot => "spot",
            Self::OnDemand => "on-demand",
            Self::CapacityBlock => "capacity-block",
            Self::ReservedCapacity => "reserved-capacity",
        }
    }
}

/// One `LaunchTemplateConfigs[].Overrides[]` entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FleetOverride {
    /// `InstanceType`.
    pub instance_type: String,
    /// `SubnetId` (the zone's chosen subnet).
    pub subnet_id: Option<String>,
    /// `ImageId`.
    pub image_id: Option<String>,
    /// `AvailabilityZone`.
    pub availability_zone: String,
    /// `Priority`: the offering's price (lower is preferred by `prioritized` strategies).
    pub priority: f64,
}

/// One `LaunchTemplateConfigs[]` entry (version `$Latest`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FleetLaunchTemplateConfig {
    /// `LaunchTemplateSpecification.LaunchTemplateName`.
    pub launch_template_name: String,
    /// Overrides.
    pub overrides: Vec<FleetOverride>,
}

/// A `CreateFleet` request of type `instant`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CreateFleetRequest {
    /// `TargetCapacitySpecification.DefaultTargetCapacityType`.
    pub target_capacity_type: TargetCapacityType,
    /// `TargetCapacitySpecification.TotalTargetCapacity`.
    pub total_target_capacity: u32,
    /// `SpotOptions.AllocationStrategy` (spot fleets).
    pub spot_allocation_strategy: Option<String>,
    /// `OnDemandOptions.AllocationStrategy` (on-demand and reserved fleets).
    pub on_demand_allocation_strategy: Option<String>,
    /// `ReservedCapacityOptions.ReservationTypes = [interruptible-capacity-reservation]`.
    pub interruptible_reservations: bool,
    /// `Context`.
    pub context: Option<String>,
    /// `LaunchTemplateConfigs`.
    pub launch_template_configs: Vec<FleetLaunchTemplateConfig>,
    /// `TagSpecifications` for `instance`, `volume` and `fleet`.
    pub tags: BTreeMap<String, String>,
}

impl CreateFleetRequest {
    /// The batching key: the request without the per-NodeClaim tag and the capacity. Requests with equal keys
    /// are merged into one fleet.
    pub fn batch_key(&self) -> String {
        let mut r = self.clone();
        r.tags.remove(NODE_CLAIM_TAG);
        r.total_target_capacity = 1;
        serde_json::to_string(&r).unwrap_or_default()
    }

    /// Every (instance type, zone) the request offers EC2.
    pub fn offerings(&self) -> impl Iterator<Item = (&str, &str)> {
        self.launch_template_configs
            .iter()
            .flat_map(|c| &c.overrides)
            .map(|o| (o.instance_type.as_str(), o.availability_zone.as_str()))
    }
}

/// An instance a fleet launched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetInstance {
    /// Its id.
    pub instance_id: String,
    /// `InstanceType`.
    pub instance_type: String,
    /// The zone of the override used.
    pub availability_zone: String,
    /// The subnet of the override used.
    pub subnet_id: Option<String>,
    /// The image of the override used.
    pub image_id: Option<String>,
    /// `Lifecycle` (`spot`, `on-demand`).
    pub lifecycle: Option<String>,
}

/// One `CreateFleetOutput.Errors[]` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetError {
    /// `ErrorCode`.
    pub error_code: String,
    /// `ErrorMessage`.
    pub error_message: String,
    /// The override's instance type, when EC2 says.
    pub instance_type: Option<String>,
    /// The override's zone, when EC2 says.
    pub availability_zone: Option<String>,
    /// The override's subnet, when EC2 says.
    pub subnet_id: Option<String>,
}

/// A `CreateFleet` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateFleetResponse {
    /// Launched instances (one entry per instance id).
    pub instances: Vec<FleetInstance>,
    /// Per-override errors.
    pub errors: Vec<FleetError>,
}

/// An instance's state (`InstanceState.Name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
    Stopping,
    Stopped,
}

impl InstanceState {
    /// EC2's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::ShuttingDown => "shutting-down",
            Self::Terminated => "terminated",
            Self::Stopping => "stopping",
            Self::Stopped => "stopped",
        }
    }

    /// Parses EC2's value.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pending, Self::Running, Self::ShuttingDown, Self::Terminated, Self::Stopping, Self::Stopped]
            .into_iter()
            .find(|v| v.as_str() == s)
    }

    /// The states Karpenter describes (everything but `terminated`).
    pub const LIVE: [InstanceState; 5] =
        [Self::Pending, Self::Running, Self::Stopping, Self::Stopped, Self::ShuttingDown];
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An instance as `DescribeInstances` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ec2Instance {
    /// `InstanceId`.
    pub instance_id: String,
    /// `InstanceType`.
    pub instance_type: String,
    /// `Placement.AvailabilityZone`.
    pub availability_zone: String,
    /// `Placement.AvailabilityZoneId` (`usw2-az1`, ...), when EC2 reports it.
    pub availability_zone_id: Option<String>,
    /// `SubnetId`.
    pub subnet_id: Option<String>,
    /// `ImageId`.
    pub image_id: Option<String>,
    /// `State.Name`.
    pub state: InstanceState,
    /// `SpotInstanceRequestId` (spot instances have one).
    pub spot_instance_request_id: Option<String>,
    /// `CapacityReservationId`.
    pub capacity_reservation_id: Option<String>,
    /// `CapacityReservationSpecification.CapacityReservationPreference` as EC2 names it (`open`, `none`,
    /// `capacity-reservations-only`; see [`crate::launch::template::CapacityReservationPreference`]).
    pub capacity_reservation_preference: Option<String>,
    /// `SecurityGroups[].GroupId`.
    pub security_group_ids: Vec<String>,
    /// `Placement.GroupId`.
    pub placement_group_id: Option<String>,
    /// `LaunchTime`.
    pub launch_time: Option<DateTime<Utc>>,
    /// `Tags`.
    pub tags: BTreeMap<String, String>,
}

/// A `DescribeInstances` filter (`tag:<key>`, `tag-key`, `instance-state-name`, ...).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Filter {
    /// Filter name.
    pub name: String,
    /// Values (ORed).
    pub values: Vec<String>,
}

impl Filter {
    /// A filter.
    pub fn new(name: impl Into<String>, values: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self { name: name.into(), values: values.into_iter().map(Into::into).collect() }
    }

    /// `tag:<key>` = `value`.
    pub fn tag(key: &str, value: &str) -> Self {
        Self::new(format!("tag:{key}"), [value])
    }

    /// `tag-key` = `key`.
    pub fn tag_key(key: &str) -> Self {
        Self::new("tag-key", [key])
    }

    /// `instance-state-name` in the live states.
    pub fn live_states() -> Self {
        Self::new("instance-state-name", InstanceState::LIVE.map(InstanceState::as_str))
    }
}

/// A `DescribeInstances` request (all pages).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DescribeInstancesRequest {
    /// `InstanceIds` (empty: all).
    pub instance_ids: Vec<String>,
    /// `Filters` (ANDed).
    pub filters: Vec<Filter>,
}

/// A `TerminateInstances` answer entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TerminatingInstance {
    /// `InstanceId`.
    pub instance_id: String,
    /// `CurrentState.Name`.
    pub current_state: InstanceState,
}

/// The EC2 instance calls of a launch. Implementations: the SDK adapter (feature `sdk`) and
/// `launch::mock::MockEc2` (tests and feature `test-util`).
///
/// * `create_fleet`: one `CreateFleet` call of type `instant`; per-override failures are in the answer's
///   `errors`, a failure of the call itself is the `Err`.
/// * `describe_instances`: every page. Instance ids EC2 does not know make EC2 fail the whole call with
///   `InvalidInstanceID.NotFound` (kind [`NotFound`](crate::api_error::AwsErrorKind::NotFound)); the caller
///   handles that (the batcher retries id by id).
/// * `terminate_instances`, `create_tags`: as EC2.
/// * `reboot_instances`: as EC2: the reboot is queued and the call returns; an unknown id fails the call with
///   `InvalidInstanceID.NotFound`.
#[async_trait]
pub trait FleetApi: Send + Sync + fmt::Debug {
    /// `CreateFleet`.
    async fn create_fleet(&self, request: &CreateFleetRequest) -> Result<CreateFleetResponse, AwsApiError>;
    /// `DescribeInstances`, all pages.
    async fn describe_instances(&self, request: &DescribeInstancesRequest) -> Result<Vec<Ec2Instance>, AwsApiError>;
    /// `TerminateInstances`.
    async fn terminate_instances(&self, instance_ids: &[String]) -> Result<Vec<TerminatingInstance>, AwsApiError>;
    /// `RebootInstances` (node repair's reboot).
    async fn reboot_instances(&self, instance_ids: &[String]) -> Result<(), AwsApiError>;
    /// `CreateTags`.
    async fn create_tags(&self, resource_ids: &[String], tags: &BTreeMap<String, String>) -> Result<(), AwsApiError>;
}

/// The `Launched` condition reason for a fleet error code (upstream's `ToReasonMessage` mapping).
pub fn reason_for_code(code: &str) -> &'static str {
    match code {
        "AuthFailure.ServiceLinkedRoleCreationNotPermitted" => "SpotSLRCreationFailed",
        "UnauthorizedOperation" | "AuthFailure" | "AccessDenied" => "Unauthorized",
        "InvalidAMIID.Unauthorized" | "AuthFailure.AMI" => "AMIAuthorizationFailure",
        "InvalidParameter" | "InvalidGroup.NotFound" | "SecurityGroupsPerInstanceLimitExceeded" => {
            "SecurityGroupSubnetVPCMismatch"
        }
        "InvalidIamInstanceProfileName" | "InvalidParameterValue.InstanceProfile" => "InstanceProfileNameInvalid",
        "InvalidLaunchTemplateName.NotFoundException" | "InvalidLaunchTemplateId.NotFound" => "LaunchTemplateNotFound",
        "InvalidUserData.Malformed" | "UserDataSizeLimitExceeded" => "UserDataSizeLimitExceeded",
        "InvalidAMIID.Malformed" => "InvalidAMIID",
        "InvalidAMIID.NotFound" | "InvalidAMIID.Unavailable" => "AMINotFound",
        "RequestLimitExceeded" => "RequestLimitExceeded",
        "InternalError" | "InternalFailure" | "ServiceUnavailable" => "InternalError",
        "FreeTierIneligible" => "FreeTierIneligible",
        "MaxFleetCountExceeded" => "FleetQuotaExceeded",
        "PendingVerification" => "AccountPendingVerification",
        "MaxSpotInstanceCountExceeded" => "SpotQuotaExceeded",
        "VcpuLimitExceeded" => "VCPULimitExceeded",
        "InsufficientFreeAddressesInSubnet" => "InsufficientFreeAddressesInSubnet",
        _ => "LaunchFailed",
    }
}

/// Whether a fleet error says the launch template is gone (the cache is stale).
pub fn is_launch_template_not_found(code: &str) -> bool {
    reason_for_code(code) == "LaunchTemplateNotFound"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(claim: &str) -> CreateFleetRequest {
        CreateFleetRequest {
            target_capacity_type: TargetCapacityType::Spot,
            total_target_capacity: 1,
            spot_allocation_strategy: Some("price-capacity-optimized".into()),
            on_demand_allocation_strategy: None,
            interruptible_reservations: false,
            context: None,
            launch_template_configs: vec![FleetLaunchTemplateConfig {
                launch_template_name: "karpenter.k8s.aws/1".into(),
                overrides: vec![FleetOverride {
                    instance_type: "m5.large".into(),
                    subnet_id: Some("subnet-a".into()),
                    image_id: Some("ami-1".into()),
                    availability_zone: "us-west-2a".into(),
                    priority: 0.04,
                }],
            }],
            tags: [(NODE_CLAIM_TAG.to_string(), claim.to_string()), (NODE_POOL_TAG.into(), "default".into())].into(),
        }
    }

    #[test]
    fn batch_key_ignores_only_the_node_claim_tag() {
        assert_eq!(request("a").batch_key(), request("b").batch_key());
        let mut other = request("a");
        other.tags.insert(NODE_POOL_TAG.into(), "other".into());
        assert_ne!(request("a").batch_key(), other.batch_key());
        let mut other = request("a");
        other.launch_template_configs[0].overrides[0].priority = 0.05;
        assert_ne!(request("a").batch_key(), other.batch_key());
    }

    #[test]
    fn states_and_reasons() {
        assert_eq!(InstanceState::parse("shutting-down"), Some(InstanceState::ShuttingDown));
        assert_eq!(InstanceState::parse("bogus"), None);
        assert_eq!(reason_for_code("VcpuLimitExceeded"), "VCPULimitExceeded");
        assert_eq!(reason_for_code("Something"), "LaunchFailed");
        assert!(is_launch_template_not_found("InvalidLaunchTemplateName.NotFoundException"));
    }
}
