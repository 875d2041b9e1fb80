//! Provider drift of a NodeClaim as pure functions of the NodeClaim, facts about its
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

use crate::api::EC2NodeClass;
use crate::api::hash::ec2_node_class_static_drift;
use karpenter_api::NodeClaim;
use karpenter_api::hash::StaticDrift;
use karpenter_cloudprovider::DriftReason;
use karpenter_requirements::Requirements;

use crate::labels as aws_labels;
use crate::nodeclass::ami::ami_for_instance_type;
use reasons as drift_reasons;

/// The AWS reasons of a NodeClaim's `Drifted` condition, beside the core ones
/// (`karpenter_api::nodeclaim::conditions::drift`).
pub mod reasons {
    /// The EC2NodeClass now resolves to AMIs other than the instance's.
    pub const AMI_DRIFT: &str = "AMIDrift";
    /// The instance's subnet is no longer among the EC2NodeClass's resolved subnets.
    pub const SUBNET_DRIFT: &str = "SubnetDrift";
    /// The instance's security groups differ from the EC2NodeClass's resolved ones.
    pub const SECURITY_GROUP_DRIFT: &str = "SecurityGroupDrift";
    /// The instance's capacity reservation is no longer among the resolved ones.
    pub const CAPACITY_RESERVATION_DRIFT: &str = "CapacityReservationDrift";
    /// The instance's placement group differs from the EC2NodeClass's resolved one.
    pub const PLACEMENT_GROUP_DRIFT: &str = "PlacementGroupDrift";
    /// The EC2NodeClass spec changed since the NodeClaim was launched (its hash differs).
    pub const NODE_CLASS_DRIFT: &str = "NodeClassDrift";
}

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

#[cfg(test)]
mod tests {
    use crate::api::EC2NodeClassStatus;
    use crate::api::{Ami, CapacityReservation, InstanceMatchCriteria, NodeSelectorRequirement, SecurityGroup, Subnet};
    use crate::labels::annotations;
    use crate::testing::{EC2NodeClassOptions, ec2_node_class};
    use karpenter_requirements::Requirement;
    use karpenter_testing::{NodeClaimOptions, default_node_class_ref, node_claim};

    use super::*;

    fn ami(id: &str, arch: &str, gpu: bool) -> Ami {
        let mut requirements = vec![NodeSelectorRequirement::new("kubernetes.io/arch", "In", &[arch])];
        requirements.push(NodeSelectorRequirement::new(
            aws_labels::INSTANCE_GPU_COUNT,
            if gpu { "Exists" } else { "DoesNotExist" },
            &[],
        ));
        Ami { id: id.into(), name: None, deprecated: false, requirements }
    }

    fn node_class() -> EC2NodeClass {
        let mut c = ec2_node_class(EC2NodeClassOptions::default());
        c.status = Some(EC2NodeClassStatus {
            subnets: vec![
                Subnet { id: "subnet-a".into(), zone: "us-west-2a".into(), zone_id: None },
                Subnet { id: "subnet-b".into(), zone: "us-west-2b".into(), zone_id: None },
            ],
            security_groups: vec![
                SecurityGroup { id: "sg-1".into(), name: None },
                SecurityGroup { id: "sg-2".into(), name: None },
            ],
            amis: vec![ami("ami-gpu", "amd64", true), ami("ami-std", "amd64", false), ami("ami-arm", "arm64", false)],
            capacity_reservations: vec![CapacityReservation {
                id: "cr-1".into(),
                availability_zone: "us-west-2a".into(),
                instance_type: "m5.large".into(),
                owner_id: "123456789012".into(),
                instance_match_criteria: InstanceMatchCriteria::Targeted,
                reservation_type: Default::default(),
                interruptible: false,
                state: Default::default(),
                end_time: None,
            }],
            ..Default::default()
        });
        c
    }

    fn claim(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> NodeClaim {
        node_claim(NodeClaimOptions {
            name: Some("c".into()),
            node_class_ref: Some(default_node_class_ref()),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            image_id: Some("ami-std".into()),
            ..Default::default()
        })
    }

    fn facts() -> InstanceFacts {
        InstanceFacts {
            image_id: Some("ami-std".into()),
            subnet_id: Some("subnet-a".into()),
            security_group_ids: vec!["sg-2".into(), "sg-1".into()],
            capacity_reservation_id: None,
            placement_group_id: None,
        }
    }

    fn amd64(gpu: Option<&str>) -> Requirements {
        let mut r = Requirements::new();
        r.add(Requirement::in_values("kubernetes.io/arch", ["amd64"]));
        r.add(match gpu {
            Some(n) => Requirement::in_values(aws_labels::INSTANCE_GPU_COUNT, [n]),
            None => Requirement::does_not_exist(aws_labels::INSTANCE_GPU_COUNT),
        });
        r
    }

    fn reason(r: Option<DriftReason>) -> Option<String> {
        r.map(|r| r.0)
    }

    #[test]
    fn nothing_drifted() {
        let its = amd64(None);
        let ctx = DriftContext { instance_type_requirements: Some(&its), resolved_placement_group_id: None };
        assert_eq!(is_drifted(&node_class(), &claim(&[], &[]), &facts(), ctx), None);
    }

    #[test]
    fn ami_drift_follows_the_instance_type_mapping() {
        let nc = node_class();
        let c = claim(&[], &[]);
        let std = amd64(None);
        let gpu = amd64(Some("1"));
        assert_eq!(ami_drift(&nc, &c, &facts(), Some(&std)), None);
        // A GPU instance type maps to ami-gpu: running ami-std is drift.
        assert_eq!(reason(ami_drift(&nc, &c, &facts(), Some(&gpu))).as_deref(), Some("AMIDrift"));
        // An image no longer resolved at all.
        let old = InstanceFacts { image_id: Some("ami-old".into()), ..facts() };
        assert_eq!(reason(ami_drift(&nc, &c, &old, None)).as_deref(), Some("AMIDrift"));
        assert_eq!(ami_drift(&nc, &c, &facts(), None), None);
        // The claim's imageID is used when the instance fact is missing; nothing known, no drift.
        let unknown = InstanceFacts { image_id: None, ..facts() };
        assert_eq!(ami_drift(&nc, &c, &unknown, Some(&std)), None);
        let mut bare = c.clone();
        bare.status = None;
        assert_eq!(ami_drift(&nc, &bare, &unknown, Some(&std)), None);
        // No AMIs resolved yet: no drift.
        let mut empty = nc.clone();
        empty.status.as_mut().unwrap().amis.clear();
        assert_eq!(ami_drift(&empty, &c, &old, None), None);
    }

    #[test]
    fn network_drift() {
        let nc = node_class();
        let other_subnet = InstanceFacts { subnet_id: Some("subnet-z".into()), ..facts() };
        assert_eq!(reason(subnet_drift(&nc, &other_subnet)).as_deref(), Some("SubnetDrift"));
        let fewer_groups = InstanceFacts { security_group_ids: vec!["sg-1".into()], ..facts() };
        assert_eq!(reason(security_group_drift(&nc, &fewer_groups)).as_deref(), Some("SecurityGroupDrift"));
        let more_groups =
            InstanceFacts { security_group_ids: vec!["sg-1".into(), "sg-2".into(), "sg-3".into()], ..facts() };
        assert_eq!(reason(security_group_drift(&nc, &more_groups)).as_deref(), Some("SecurityGroupDrift"));
        assert_eq!(security_group_drift(&nc, &facts()), None, "order does not matter");
        let mut unresolved = nc.clone();
        unresolved.status = Some(EC2NodeClassStatus::default());
        assert_eq!(subnet_drift(&unresolved, &other_subnet), None);
        assert_eq!(security_group_drift(&unresolved, &fewer_groups), None);
    }

    #[test]
    fn reservation_and_placement_group_drift() {
        let nc = node_class();
        let in_cr = InstanceFacts { capacity_reservation_id: Some("cr-1".into()), ..facts() };
        assert_eq!(capacity_reservation_drift(&nc, &in_cr), None);
        let gone_cr = InstanceFacts { capacity_reservation_id: Some("cr-9".into()), ..facts() };
        assert_eq!(reason(capacity_reservation_drift(&nc, &gone_cr)).as_deref(), Some("CapacityReservationDrift"));
        assert_eq!(capacity_reservation_drift(&nc, &facts()), None);

        let in_pg = claim(&[(aws_labels::PLACEMENT_GROUP_ID, "pg-1")], &[]);
        assert_eq!(placement_group_drift(&in_pg, Some("pg-1")), None);
        assert_eq!(reason(placement_group_drift(&in_pg, Some("pg-2"))).as_deref(), Some("PlacementGroupDrift"));
        assert_eq!(reason(placement_group_drift(&in_pg, None)).as_deref(), Some("PlacementGroupDrift"));
        assert_eq!(
            reason(placement_group_drift(&claim(&[], &[]), Some("pg-1"))).as_deref(),
            Some("PlacementGroupDrift")
        );
        assert_eq!(placement_group_drift(&claim(&[], &[]), None), None);
    }

    #[test]
    fn static_hash_drift_and_version_mismatch() {
        let mut nc = node_class();
        nc.metadata.annotations = Some(
            [
                (annotations::EC2_NODE_CLASS_HASH.to_string(), "111".to_string()),
                (annotations::EC2_NODE_CLASS_HASH_VERSION.to_string(), "rs1".to_string()),
            ]
            .into(),
        );
        let same =
            claim(&[], &[(annotations::EC2_NODE_CLASS_HASH, "111"), (annotations::EC2_NODE_CLASS_HASH_VERSION, "rs1")]);
        let changed =
            claim(&[], &[(annotations::EC2_NODE_CLASS_HASH, "222"), (annotations::EC2_NODE_CLASS_HASH_VERSION, "rs1")]);
        let upstream =
            claim(&[], &[(annotations::EC2_NODE_CLASS_HASH, "222"), (annotations::EC2_NODE_CLASS_HASH_VERSION, "v5")]);
        assert_eq!(static_drift(&nc, &same), None);
        assert_eq!(reason(static_drift(&nc, &changed)).as_deref(), Some("NodeClassDrift"));
        assert_eq!(static_drift(&nc, &upstream), None, "version mismatch is not drift");
        assert_eq!(static_drift(&nc, &claim(&[], &[])), None);
    }

    #[test]
    fn first_match_wins_in_upstream_order() {
        let mut nc = node_class();
        nc.metadata.annotations = Some(
            [
                (annotations::EC2_NODE_CLASS_HASH.to_string(), "111".to_string()),
                (annotations::EC2_NODE_CLASS_HASH_VERSION.to_string(), "rs1".to_string()),
            ]
            .into(),
        );
        let everything = InstanceFacts {
            image_id: Some("ami-old".into()),
            subnet_id: Some("subnet-z".into()),
            security_group_ids: vec!["sg-9".into()],
            capacity_reservation_id: Some("cr-9".into()),
            placement_group_id: None,
        };
        let drifted_claim =
            claim(&[], &[(annotations::EC2_NODE_CLASS_HASH, "222"), (annotations::EC2_NODE_CLASS_HASH_VERSION, "rs1")]);
        let ctx = DriftContext::default();
        assert_eq!(reason(is_drifted(&nc, &drifted_claim, &everything, ctx)).as_deref(), Some("NodeClassDrift"));
        let c = claim(&[], &[]);
        assert_eq!(reason(is_drifted(&nc, &c, &everything, ctx)).as_deref(), Some("AMIDrift"));
        let f = InstanceFacts { image_id: Some("ami-std".into()), ..everything.clone() };
        assert_eq!(reason(is_drifted(&nc, &c, &f, ctx)).as_deref(), Some("SecurityGroupDrift"));
        let f = InstanceFacts { security_group_ids: vec!["sg-1".into(), "sg-2".into()], ..f };
        assert_eq!(reason(is_drifted(&nc, &c, &f, ctx)).as_deref(), Some("SubnetDrift"));
        let f = InstanceFacts { subnet_id: Some("subnet-b".into()), ..f };
        assert_eq!(reason(is_drifted(&nc, &c, &f, ctx)).as_deref(), Some("CapacityReservationDrift"));
        let f = InstanceFacts { capacity_reservation_id: None, ..f };
        let pg = DriftContext { resolved_placement_group_id: Some("pg-1"), ..ctx };
        assert_eq!(reason(is_drifted(&nc, &c, &f, pg)).as_deref(), Some("PlacementGroupDrift"));
        assert_eq!(is_drifted(&nc, &c, &f, ctx), None);
    }
}
