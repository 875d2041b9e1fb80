//! The narrow AWS API traits EC2NodeClass resolution calls, with our own request and response structs.
//!
//! One trait per concern, one method per AWS call. Filters are plain data ([`Filter`]) in EC2's own spelling
//! (`subnet-id`, `tag:Name`, `tag-key`, `group-name`, ...), so an implementation passes them to the SDK as they
//! are. **Implementations return every page** (they follow `NextToken` themselves; upstream asks for 500 subnets,
//! 1000 images per page) and map a failed call to [`AwsApiError`] (`AwsApiError::new(operation, code, message)`
//! classifies the code). Lists are returned in whatever order AWS gives; callers sort.
//!
//! The `sdk` feature implements these traits over aws-sdk-ec2 / aws-sdk-ssm / aws-sdk-iam; tests use in-memory
//! mocks.

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::api_error::AwsApiError;

/// An EC2 `Filter`: `name` and the values it may take (ORed).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Filter {
    pub name: String,
    pub values: Vec<String>,
}

impl Filter {
    /// A filter `name` in `values`.
    pub fn new(name: impl Into<String>, values: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self { name: name.into(), values: values.into_iter().map(Into::into).collect() }
    }

    /// The filters selecting resources by tags: `tag:<key>` = value, or `tag-key` = key for the value `*`.
    pub fn for_tags(tags: &BTreeMap<String, String>) -> Vec<Filter> {
        tags.iter()
            .map(
                |(k, v)| {
                    if v == "*" { Filter::new("tag-key", [k.as_str()]) } else { Filter::new(format!("tag:{k}"), [v]) }
                },
            )
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------------------------
// EC2 DescribeSubnets.
// ---------------------------------------------------------------------------------------------------------------

/// One subnet of a `DescribeSubnets` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubnetDescription {
    /// `SubnetId`.
    pub subnet_id: String,
    /// `AvailabilityZone` (name, e.g. `us-west-2a`).
    pub availability_zone: String,
    /// `AvailabilityZoneId` (e.g. `usw2-az1`).
    pub availability_zone_id: Option<String>,
    /// `AvailableIpAddressCount`.
    pub available_ip_address_count: i64,
    /// `VpcId`.
    pub vpc_id: Option<String>,
    /// `Tags`.
    pub tags: BTreeMap<String, String>,
}

/// EC2 `DescribeSubnets`.
#[async_trait]
pub trait SubnetApi: Send + Sync + fmt::Debug {
    /// Every subnet matching all `filters` (ANDed; the values of one filter are ORed), all pages.
    async fn describe_subnets(&self, filters: &[Filter]) -> Result<Vec<SubnetDescription>, AwsApiError>;
}

// ---------------------------------------------------------------------------------------------------------------
// EC2 DescribeSecurityGroups.
// ---------------------------------------------------------------------------------------------------------------

/// One security group of a `DescribeSecurityGroups` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecurityGroupDescription {
    /// `GroupId`.
    pub group_id: String,
    /// `GroupName`.
    pub group_name: String,
    /// `VpcId`.
    pub vpc_id: Option<String>,
    /// `Tags`.
    pub tags: BTreeMap<String, String>,
}

/// EC2 `DescribeSecurityGroups`.
#[async_trait]
pub trait SecurityGroupApi: Send + Sync + fmt::Debug {
    /// Every security group matching all `filters`, all pages.
    async fn describe_security_groups(&self, filters: &[Filter]) -> Result<Vec<SecurityGroupDescription>, AwsApiError>;
}

// ---------------------------------------------------------------------------------------------------------------
// EC2 DescribeImages.
// ---------------------------------------------------------------------------------------------------------------

/// An EC2 `DescribeImages` request. Implementations always send `IncludeDeprecated = true` (deprecated images
/// are chosen only when nothing newer matches, which the caller decides).
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DescribeImagesRequest {
    /// `Filters` (the caller always includes `state = available`).
    pub filters: Vec<Filter>,
    /// `Owners` (account ids, `self`, `amazon`, `aws-marketplace`); empty = no owner restriction.
    pub owners: Vec<String>,
}

/// One image of a `DescribeImages` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageDescription {
    /// `ImageId`.
    pub image_id: String,
    /// `Name`.
    pub name: Option<String>,
    /// `Architecture` in EC2's spelling: `x86_64`, `arm64`, `i386`, `x86_64_mac`, `arm64_mac`.
    pub architecture: String,
    /// `CreationDate` (RFC 3339, as EC2 returns it).
    pub creation_date: String,
    /// `DeprecationTime` (RFC 3339), if a deprecation is scheduled; deprecated once it has passed.
    pub deprecation_time: Option<String>,
    /// `OwnerId`.
    pub owner_id: Option<String>,
    /// `Tags`.
    pub tags: BTreeMap<String, String>,
}

/// EC2 `DescribeImages`.
#[async_trait]
pub trait ImageApi: Send + Sync + fmt::Debug {
    /// Every image matching the request (deprecated ones included), all pages.
    async fn describe_images(&self, request: &DescribeImagesRequest) -> Result<Vec<ImageDescription>, AwsApiError>;
}

// ---------------------------------------------------------------------------------------------------------------
// SSM GetParameter.
// ---------------------------------------------------------------------------------------------------------------

/// SSM `GetParameter`.
#[async_trait]
pub trait SsmApi: Send + Sync + fmt::Debug {
    /// The value of parameter `name` (a name or an ARN). A missing parameter is an error of kind `NotFound`
    /// (`ParameterNotFound`).
    async fn get_parameter(&self, name: &str) -> Result<String, AwsApiError>;
}

// ---------------------------------------------------------------------------------------------------------------
// EC2 DescribeCapacityReservations.
// ---------------------------------------------------------------------------------------------------------------

/// An EC2 `DescribeCapacityReservations` request.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DescribeCapacityReservationsRequest {
    /// `CapacityReservationIds` (empty = not restricted by id).
    pub capacity_reservation_ids: Vec<String>,
    /// `Filters` (`owner-id`, `instance-match-criteria`, `state`, `tag:<k>`, `tag-key`).
    pub filters: Vec<Filter>,
}

/// One reservation of a `DescribeCapacityReservations` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapacityReservationDescription {
    /// `CapacityReservationId`.
    pub capacity_reservation_id: String,
    /// `AvailabilityZone`.
    pub availability_zone: String,
    /// `InstanceType`.
    pub instance_type: String,
    /// `OwnerId`.
    pub owner_id: String,
    /// `InstanceMatchCriteria`: `open` or `targeted`.
    pub instance_match_criteria: String,
    /// `ReservationType`: `default` or `capacity-block` (absent on older answers = `default`).
    pub reservation_type: Option<String>,
    /// `State`: `active`, `expired`, `cancelled`, `pending`, `failed`, `scheduled`, `payment-pending`, ...
    pub state: String,
    /// `TotalInstanceCount`.
    pub total_instance_count: i64,
    /// `AvailableInstanceCount`.
    pub available_instance_count: i64,
    /// `EndDate`, if the reservation ends.
    pub end_date: Option<DateTime<Utc>>,
    /// Whether the reservation is interruptible (`Interruptible`).
    pub interruptible: bool,
    /// `Tags`.
    pub tags: BTreeMap<String, String>,
}

/// EC2 `DescribeCapacityReservations`.
#[async_trait]
pub trait CapacityReservationApi: Send + Sync + fmt::Debug {
    /// Every reservation matching the request, all pages.
    async fn describe_capacity_reservations(
        &self,
        request: &DescribeCapacityReservationsRequest,
    ) -> Result<Vec<CapacityReservationDescription>, AwsApiError>;
}

// ---------------------------------------------------------------------------------------------------------------
// EC2 DescribePlacementGroups.
// ---------------------------------------------------------------------------------------------------------------

/// An EC2 `DescribePlacementGroups` request: by id or by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DescribePlacementGroupsRequest {
    /// `GroupIds`.
    pub group_ids: Vec<String>,
    /// `GroupNames`.
    pub group_names: Vec<String>,
}

/// One placement group of a `DescribePlacementGroups` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementGroupDescription {
    /// `GroupId`.
    pub group_id: String,
    /// `GroupName`.
    pub group_name: String,
    /// `Strategy`: `cluster`, `partition` or `spread`.
    pub strategy: String,
    /// `PartitionCount` (partition groups).
    pub partition_count: Option<i32>,
    /// `SpreadLevel`: `host` or `rack` (spread groups).
    pub spread_level: Option<String>,
    /// `State`: `pending`, `available`, `deleting`, `deleted`.
    pub state: String,
}

/// EC2 `DescribePlacementGroups`.
#[async_trait]
pub trait PlacementGroupApi: Send + Sync + fmt::Debug {
    /// The placement groups the request names. A missing id or name is either an empty answer or an error of
    /// kind `NotFound` (`InvalidPlacementGroup.Unknown`, `InvalidPlacementGroupId.NotFound`); callers treat both
    /// as "not found".
    async fn describe_placement_groups(
        &self,
        request: &DescribePlacementGroupsRequest,
    ) -> Result<Vec<PlacementGroupDescription>, AwsApiError>;
}

// ---------------------------------------------------------------------------------------------------------------
// IAM instance profiles.
// ---------------------------------------------------------------------------------------------------------------

/// An IAM instance profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceProfileDescription {
    /// `InstanceProfileName`.
    pub name: String,
    /// `InstanceProfileId`.
    pub id: Option<String>,
    /// `Arn`.
    pub arn: Option<String>,
    /// `Path` (`/karpenter/<region>/<cluster>/<node class uid>/` for the ones Karpenter manages).
    pub path: String,
    /// Names of the attached roles (IAM allows at most one).
    pub roles: Vec<String>,
    /// `Tags`.
    pub tags: BTreeMap<String, String>,
}

/// An IAM `CreateInstanceProfile` request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CreateInstanceProfileRequest {
    /// `InstanceProfileName`.
    pub name: String,
    /// `Path`.
    pub path: String,
    /// `Tags`.
    pub tags: BTreeMap<String, String>,
}

/// IAM's instance-profile calls.
#[async_trait]
pub trait IamApi: Send + Sync + fmt::Debug {
    /// `GetInstanceProfile`; a missing profile is an error of kind `NotFound` (`NoSuchEntity`).
    async fn get_instance_profile(&self, name: &str) -> Result<InstanceProfileDescription, AwsApiError>;
    /// `CreateInstanceProfile`; an existing name is `EntityAlreadyExists`.
    async fn create_instance_profile(
        &self,
        request: &CreateInstanceProfileRequest,
    ) -> Result<InstanceProfileDescription, AwsApiError>;
    /// `AddRoleToInstanceProfile`.
    async fn add_role_to_instance_profile(&self, profile: &str, role: &str) -> Result<(), AwsApiError>;
    /// `RemoveRoleFromInstanceProfile`.
    async fn remove_role_from_instance_profile(&self, profile: &str, role: &str) -> Result<(), AwsApiError>;
    /// `DeleteInstanceProfile` (its roles must have been removed).
    async fn delete_instance_profile(&self, name: &str) -> Result<(), AwsApiError>;
    /// `TagInstanceProfile`.
    async fn tag_instance_profile(&self, name: &str, tags: &BTreeMap<String, String>) -> Result<(), AwsApiError>;
    /// `ListInstanceProfiles` with `PathPrefix`, all pages (the answer carries roles but, as IAM's, no tags).
    async fn list_instance_profiles(&self, path_prefix: &str) -> Result<Vec<InstanceProfileDescription>, AwsApiError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_filters_use_tag_key_for_wildcards() {
        let tags = BTreeMap::from([("Name".to_string(), "*".to_string()), ("team".to_string(), "a".to_string())]);
        assert_eq!(Filter::for_tags(&tags), vec![Filter::new("tag-key", ["Name"]), Filter::new("tag:team", ["a"])]);
    }
}
