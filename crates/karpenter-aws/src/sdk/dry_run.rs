//! The node class validation's dry runs ([`AuthorizationCheck`]) over aws-sdk-ec2: `RunInstances`,
//! `CreateLaunchTemplate` and `CreateFleet` with `DryRun = true`, built from the freshly resolved status (first
//! AMI, subnet, security groups, instance profile) and tagged as the real launches tag what they create
//! ([`crate::launch::tags::dry_run_tags`]: the node class's tags, the cluster, NodePool and node class tags), so
//! that a tag-scoped controller policy judges the dry run as it will judge the launches.
//!
//! EC2 answers a permitted dry run with the error `DryRunOperation`. Only a refusal of kind
//! [`Unauthorized`](crate::api_error::AwsErrorKind::Unauthorized) fails validation (reasons
//! `RunInstancesAuthCheckFailed`, `CreateLaunchTemplateAuthCheckFailed`, `CreateFleetAuthCheckFailed`); any other
//! error (a made-up launch template EC2 cannot find, throttling) says nothing about permissions and is logged.

use crate::api::{EC2NodeClass, EC2NodeClassStatus};
use async_trait::async_trait;
use aws_sdk_ec2::types as sdk;

use super::api_error;
use super::launch::{sdk_tags, tag_spec};
use crate::api_error::{AwsApiError, AwsErrorKind};
use crate::launch::tags::{DryRunAction, DryRunTags, dry_run_tags};
use crate::nodeclass::status::{AuthorizationCheck, AuthorizationFailure};

/// The instance type of the dry runs (any type EC2 knows; nothing is launched).
const DRY_RUN_INSTANCE_TYPE: &str = "m5.large";
/// The launch-template name of the dry runs.
const DRY_RUN_TEMPLATE: &str = "karpenter.k8s.aws/dry-run";

/// Dry-run authorization checks against EC2.
#[derive(Clone, Debug)]
pub struct Ec2DryRun {
    client: aws_sdk_ec2::Client,
    /// The cluster's name: the cluster tags of the dry runs carry it.
    cluster_name: String,
}

impl Ec2DryRun {
    /// The checks over `client` for the cluster `cluster_name`.
    pub fn new(client: aws_sdk_ec2::Client, cluster_name: impl Into<String>) -> Self {
        Self { client, cluster_name: cluster_name.into() }
    }

    fn tags(&self, node_class: &EC2NodeClass, action: DryRunAction) -> DryRunTags {
        dry_run_tags(&self.cluster_name, node_class, action)
    }
}

/// The request's `TagSpecifications`.
fn request_tags(tags: &DryRunTags) -> Vec<sdk::TagSpecification> {
    tags.request.iter().map(|t| tag_spec(sdk::ResourceType::from(t.resource.as_str()), &t.tags)).collect()
}

/// `Ok` for an allowed dry run (`DryRunOperation`) and for errors unrelated to permissions; the failure for an
/// unauthorized one.
pub fn judge(result: Result<(), AwsApiError>, reason: &str) -> Result<(), AuthorizationFailure> {
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.code == "DryRunOperation" => Ok(()),
        Err(e) if e.kind == AwsErrorKind::Unauthorized => {
            Err(AuthorizationFailure { reason: reason.to_owned(), message: e.to_string() })
        }
        Err(e) => {
            tracing::info!(error = %e, reason, "dry run failed for a reason other than authorization; ignoring");
            Ok(())
        }
    }
}

#[async_trait]
impl AuthorizationCheck for Ec2DryRun {
    async fn check(&self, node_class: &EC2NodeClass, status: &EC2NodeClassStatus) -> Result<(), AuthorizationFailure> {
        let image = status.amis.first().map(|a| a.id.clone());
        let subnet = status.subnets.first().map(|s| s.id.clone());
        let groups: Vec<String> = status.security_groups.iter().map(|g| g.id.clone()).collect();
        let profile = status.instance_profile.clone();

        let run = self
            .client
            .run_instances()
            .dry_run(true)
            .min_count(1)
            .max_count(1)
            .instance_type(sdk::InstanceType::from(DRY_RUN_INSTANCE_TYPE))
            .set_image_id(image.clone())
            .set_subnet_id(subnet.clone())
            .set_security_group_ids(Some(groups.clone()).filter(|g| !g.is_empty()))
            .set_iam_instance_profile(
                profile.clone().map(|p| sdk::IamInstanceProfileSpecification::builder().name(p).build()),
            );
        let result = run
            .set_tag_specifications(Some(request_tags(&self.tags(node_class, DryRunAction::RunInstances))))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| api_error("RunInstances", e));
        judge(result, "RunInstancesAuthCheckFailed")?;

        let lt_tags = self.tags(node_class, DryRunAction::CreateLaunchTemplate);
        let data_tags = lt_tags.template_data.iter().map(|t| {
            sdk::LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(sdk::ResourceType::from(t.resource.as_str()))
                .set_tags(Some(sdk_tags(&t.tags)))
                .build()
        });
        let data = sdk::RequestLaunchTemplateData::builder()
            .set_image_id(image)
            .set_security_group_ids(Some(groups).filter(|g| !g.is_empty()))
            .set_iam_instance_profile(
                profile.map(|p| sdk::LaunchTemplateIamInstanceProfileSpecificationRequest::builder().name(p).build()),
            )
            .set_tag_specifications(Some(data_tags.collect()))
            .build();
        let result = self
            .client
            .create_launch_template()
            .dry_run(true)
            .launch_template_name(DRY_RUN_TEMPLATE)
            .launch_template_data(data)
            .set_tag_specifications(Some(request_tags(&lt_tags)))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| api_error("CreateLaunchTemplate", e));
        judge(result, "CreateLaunchTemplateAuthCheckFailed")?;

        let spec = sdk::FleetLaunchTemplateSpecificationRequest::builder()
            .launch_template_name(DRY_RUN_TEMPLATE)
            .version("$Latest")
            .build();
        let overrides = sdk::FleetLaunchTemplateOverridesRequest::builder()
            .instance_type(sdk::InstanceType::from(DRY_RUN_INSTANCE_TYPE))
            .set_subnet_id(subnet)
            .build();
        let result = self
            .client
            .create_fleet()
            .dry_run(true)
            .r#type(sdk::FleetType::Instant)
            .target_capacity_specification(
                sdk::TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(1)
                    .default_target_capacity_type(sdk::DefaultTargetCapacityType::OnDemand)
                    .build(),
            )
            .launch_template_configs(
                sdk::FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(spec)
                    .overrides(overrides)
                    .build(),
            )
            .set_tag_specifications(Some(request_tags(&self.tags(node_class, DryRunAction::CreateFleet))))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| api_error("CreateFleet", e));
        judge(result, "CreateFleetAuthCheckFailed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unauthorized_refusals_fail() {
        assert_eq!(judge(Ok(()), "X"), Ok(()));
        assert_eq!(
            judge(Err(AwsApiError::new("RunInstances", "DryRunOperation", "would have succeeded")), "X"),
            Ok(())
        );
        assert_eq!(
            judge(Err(AwsApiError::new("CreateFleet", "InvalidLaunchTemplateName.NotFoundException", "")), "X"),
            Ok(())
        );
        let failed = judge(Err(AwsApiError::new("RunInstances", "UnauthorizedOperation", "not allowed")), "R");
        assert_eq!(failed.unwrap_err().reason, "R");
    }
}
