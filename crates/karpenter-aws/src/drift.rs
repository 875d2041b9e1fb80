//! Provider drift of a NodeClaim (cloudprovider-aws.md §9) as pure functions of the NodeClaim, facts about its
//! instance and the EC2NodeClass. The CloudProvider's `is_drifted` fills [`InstanceFacts`] from
//! `DescribeInstances` and calls [`is_drifted`].
//!
//! Checks, first match wins:
//! 1. **`NodeClassDrift`** — the static hash: the node class's `karpenter.k8s.aws/ec2nodeclass-hash` differs from
//!    the NodeClaim's under the same hash version (a version mismatch is never drift: the hash controller
//!    rewrites the NodeClaim's annotations instead).
//! 2. **`AMIDrift`** — the instance's image is not the AMI that `status.amis` gives the NodeClaim's instance
//!    type (first compatible AMI in status order); without the instance type's requirements, not among
//!    `status.amis` at all.
//! 3. **`SecurityGroupDrift`** — the instance's security-group id set differs from the status's.
//! 4. **`SubnetDrift`** — the instance's subnet is not among the status's subnets.
//! 5. **`CapacityReservationDrift`** — the instance runs in a reservation that is not among the status's.
//! 6. **`PlacementGroupDrift`** — the NodeClaim's `karpenter.k8s.aws/placement-group-id` label differs from the
//!    resolved placement group (either side absent counts as a difference only when the other is present).
//!
//! Missing inputs never cause drift: an empty status list (not resolved yet), an unknown instance fact.

use std::collections::BTreeSet;

use karpenter_api::hash::{StaticDrift, ec2_node_class_static_drift};
use karpenter_api::labels::aws as aws_labels;
use karpenter_api::nodeclaim::conditions::drift as drift_reasons;
use karpenter_api::{EC2NodeClass, NodeClaim};
use karpenter_cloudprovider::DriftReason;
use karpenter_requirements::Requirements;

use crate::nodeclass::ami::ami_for_instance_type;

/// What the CloudProvider knows about the NodeClaim's instance (from `DescribeInstances`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceFacts {
    /// `ImageId`.
    pub image_id: Option<String>,
    /// `SubnetId`.
    pub subnet_id: Option<String>,
    /// The security groups of the instance (`SecurityGroups[].GroupId`); empty = unknown.
    pub security_group_ids: Vec<String>,
    /// `CapacityReservationId`, when the instance runs in a reservation.
    pub capacity_reservation_id: Option<String>,
    /// `Placement.GroupId`.
    pub placement_group_id: Option<String>,
}

/// Everything drift needs besides the NodeClaim, instance and node class.
#[derive(Clone, Copy, Debug, Default)]
pub struct DriftContext<'a> {
    /// Requirements of the NodeClaim's instance type (from the provider's catalogue), for the AMI mapping.
    pub instance_type_requirements: Option<&'a Requirements>,
    /// The id of the node class's resolved placement group (`PlacementGroupProvider::resolve`); `None` when the
    /// class has no selector or it resolves to nothing.
    pub resolved_placement_group_id: Option<&'a str>,
}

/// Static drift from the hash annotations ([`karpenter_api::hash`]).
pub fn static_drift(node_class: &EC2NodeClass, claim: &NodeClaim) -> Option<DriftReason> {
    match ec2_node_class_static_drift(node_class, claim) {
        StaticDrift::Drifted => Some(DriftReason::new(drift_reasons::NODE_CLASS_DRIFT)),
        StaticDrift::NotDrifted | StaticDrift::VersionMismatch | StaticDrift::Unknown => None,
    }
}

/// AMI drift. Uses `instance.image_id`, else the NodeClaim's `status.imageID`.
pub fn ami_drift(
    node_class: &EC2NodeClass,
    claim: &NodeClaim,
    instance: &InstanceFacts,
    instance_type_requirements: Option<&Requirements>,
) -> Option<DriftReason> {
    let amis = &node_class.status.as_ref()?.amis;
    if amis.is_empty() {
        return None;
    }
    let image = instance
        .image_id
        .as_deref()
        .or_else(|| claim.status.as_ref().and_then(|s| s.image_id.as_deref()))
        .filter(|i| !i.is_empty())?;
    let current = match instance_type_requirements {
        // An instance type no AMI serves any more: the image cannot be current.
        Some(reqs) => ami_for_instance_type(amis, reqs).is_some_and(|a| a.id == image),
        None => amis.iter().any(|a| a.id == image),
    };
    (!current).then(|| DriftReason::new(drift_reasons::AMI_DRIFT))
}

/// Security-group drift: the sets differ.
pub fn security_group_drift(node_class: &EC2NodeClass, instance: &InstanceFacts) -> Option<DriftReason> {
    let status = node_class.status.as_ref()?;
    if status.security_groups.is_empty() || instance.security_group_ids.is_empty() {
        return None;
    }
    let want: BTreeSet<&str> = status.security_groups.iter().map(|g| g.id.as_str()).collect();
    let have: BTreeSet<&str> = instance.security_group_ids.iter().map(String::as_str).collect();
    (want != have).then(|| DriftReason::new(drift_reasons::SECURITY_GROUP_DRIFT))
}

/// Subnet drift: the instance's subnet is not selected any more.
pub fn subnet_drift(node_class: &EC2NodeClass, instance: &InstanceFacts) -> Option<DriftReason> {
    let status = node_class.status.as_ref()?;
    let subnet = instance.subnet_id.as_deref()?;
    if status.subnets.is_empty() {
        return None;
    }
    (!status.subnets.iter().any(|s| s.id == subnet)).then(|| DriftReason::new(drift_reasons::SUBNET_DRIFT))
}

/// Capacity-reservation drift: the instance's reservation is not selected any more. (The provider may confirm
/// with `CapacityReservationProvider::is_selected_uncached` before acting on it.)
pub fn capacity_reservation_drift(node_class: &EC2NodeClass, instance: &InstanceFacts) -> Option<DriftReason> {
    let id = instance.capacity_reservation_id.as_deref()?;
    let reservations = node_class.status.as_ref().map(|s| s.capacity_reservations.as_slice()).unwrap_or_default();
    (!reservations.iter().any(|r| r.id == id)).then(|| DriftReason::new(drift_reasons::CAPACITY_RESERVATION_DRIFT))
}

/// Placement-group drift: the claim's placement-group label differs from the resolved group.
pub fn placement_group_drift(claim: &NodeClaim, resolved_placement_group_id: Option<&str>) -> Option<DriftReason> {
    let label = claim.metadata.labels.as_ref().and_then(|l| l.get(aws_labels::PLACEMENT_GROUP_ID)).map(String::as_str);
    (label != resolved_placement_group_id).then(|| DriftReason::new(drift_reasons::PLACEMENT_GROUP_DRIFT))
}

/// All checks in order; the first drift found.
pub fn is_drifted(
    node_class: &EC2NodeClass,
    claim: &NodeClaim,
    instance: &InstanceFacts,
    context: DriftContext<'_>,
) -> Option<DriftReason> {
    static_drift(node_class, claim)
        .or_else(|| ami_drift(node_class, claim, instance, context.instance_type_requirements))
        .or_else(|| security_group_drift(node_class, instance))
        .or_else(|| subnet_drift(node_class, instance))
        .or_else(|| capacity_reservation_drift(node_class, instance))
        .or_else(|| placement_group_drift(claim, context.resolved_placement_group_id))
}
