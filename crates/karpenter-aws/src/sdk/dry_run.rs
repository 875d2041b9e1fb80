//! The node class validation's dry runs ([`AuthorizationCheck`]) over aws-sdk-ec2: `RunInstances`,
//! `CreateLaunchTemplate` and `CreateFleet` with `DryRun = true`, built from the freshly resolved status (first
//! AMI, subnet, security groups, instance profile) and the node class's tags.
//!
//! EC2 answers a permitted dry run with the error `DryRunOperation`. Only a refusal of kind
//! [`Unauthorized`](crate::api_error::AwsErrorKind::Unauthorized) fails validation (reasons
//! `RunInstancesAuthCheckFailed`, `CreateLaunchTemplateAuthCheckFailed`, `CreateFleetAuthCheckFailed`); any other
//! error (a made-up launch template EC2 cannot find, throttling) says nothing about permissions and is logged.

use async_trait::async_trait;
use aws_sdk_ec2::types as sdk;
use karpenter_api::{EC2NodeClass, EC2NodeClassStatus};

use super::api_error;
use crate::api_error::{AwsApiError, AwsErrorKind};
use crate::nodeclass::status::{AuthorizationCheck, AuthorizationFailure};

/// The instance type of the dry runs (any type EC2 knows; nothing is launched).
const DRY_RUN_INSTANCE_TYPE: &str = "m5.large";
/// The launch-template name of the dry runs.
const DRY_RUN_TEMPLATE: &str = "karpenter.k8s.aws/dry-run";

/// Dry-run authorization checks against EC2.
#[derive(Clone, Debug)]
pub struct Ec2DryRun {
    client: aws_sdk_ec2::Client,
}

impl Ec2DryRun {
    /// The checks over `client`.
    pub fn new(client: aws_sdk_ec2::Client) -> Self {
        Self { client }
    }
}

fn tags(node_class: &EC2NodeClass, resource: sdk::ResourceType) -> Option<sdk::TagSpecification> {
    let tags: Vec<sdk::Tag> =
        node_class.spec.tags.iter().map(|(k, v)| sdk::Tag::builder().key(k).value(v).build()).collect();
    (!tags.is_empty()).then(|| sdk::TagSpecification::builder().resource_type(resource).set_tags(Some(tags)).build())
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

        let mut run = self
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
        if let Some(t) = tags(node_class, sdk::ResourceType::Instance) {
            run = run.tag_specifications(t);
        }
        let result = run.send().await.map(|_| ()).map_err(|e| api_error("RunInstances", e));
        judge(result, "RunInstancesAuthCheckFailed")?;

        let data = sdk::RequestLaunchTemplateData::builder()
            .set_image_id(image)
            .set_security_group_ids(Some(groups).filter(|g| !g.is_empty()))
            .set_iam_instance_profile(
                profile.map(|p| sdk::LaunchTemplateIamInstanceProfileSpecificationRequest::builder().name(p).build()),
            )
            .build();
        let mut create = self
            .client
            .create_launch_template()
            .dry_run(true)
            .launch_template_name(DRY_RUN_TEMPLATE)
            .launch_template_data(data);
        if let Some(t) = tags(node_class, sdk::ResourceType::LaunchTemplate) {
            create = create.tag_specifications(t);
        }
        let result = create.send().await.map(|_| ()).map_err(|e| api_error("CreateLaunchTemplate", e));
        judge(result, "CreateLaunchTemplateAuthCheckFailed")?;

        let spec = sdk::FleetLaunchTemplateSpecificationRequest::builder()
            .launch_template_name(DRY_RUN_TEMPLATE)
            .version("$Latest")
            .build();
        let overrides = sdk::FleetLaunchTemplateOverridesRequest::builder()
            .instance_type(sdk::InstanceType::from(DRY_RUN_INSTANCE_TYPE))
            .set_subnet_id(subnet)
            .build();
        let mut fleet = self
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
            );
        if let Some(t) = tags(node_class, sdk::ResourceType::Instance) {
            fleet = fleet.tag_specifications(t);
        }
        let result = fleet.send().await.map(|_| ()).map_err(|e| api_error("CreateFleet", e));
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
