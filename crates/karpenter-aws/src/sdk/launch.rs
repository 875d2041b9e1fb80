//! The launch traits over aws-sdk-ec2: [`LaunchTemplateApi`] (create, describe, list by tag, delete) and
//! [`FleetApi`] (CreateFleet instant, DescribeInstances, TerminateInstances, RebootInstances, CreateTags).

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_ec2::types as sdk;

use super::{Ec2Adapter, api_error, tag_map, to_chrono};
use crate::api_error::AwsApiError;
use crate::launch::fleet::{
    CreateFleetRequest, CreateFleetResponse, DescribeInstancesRequest, Ec2Instance, FleetApi, FleetError,
    FleetInstance, InstanceState, TerminatingInstance,
};
use crate::launch::tags::{FLEET_TAGGED, launch_template_data_tagged};
use crate::launch::template::{
    CapacityReservationPreference, LaunchTemplate, LaunchTemplateApi, LaunchTemplateInfo, LtBlockDevice,
};

pub(super) fn sdk_tags(tags: &BTreeMap<String, String>) -> Vec<sdk::Tag> {
    tags.iter().map(|(k, v)| sdk::Tag::builder().key(k).value(v).build()).collect()
}

pub(super) fn tag_spec(resource: sdk::ResourceType, tags: &BTreeMap<String, String>) -> sdk::TagSpecification {
    sdk::TagSpecification::builder().resource_type(resource).set_tags(Some(sdk_tags(tags))).build()
}

fn to_i32(v: Option<i64>) -> Option<i32> {
    v.and_then(|v| i32::try_from(v).ok())
}

fn block_device(d: &LtBlockDevice) -> sdk::LaunchTemplateBlockDeviceMappingRequest {
    let ebs = sdk::LaunchTemplateEbsBlockDeviceRequest::builder()
        .set_volume_size(d.volume_size_gib.and_then(|v| i32::try_from(v).ok()))
        .set_volume_type(d.volume_type.as_deref().map(sdk::VolumeType::from))
        .set_iops(to_i32(d.iops))
        .set_throughput(to_i32(d.throughput))
        .set_encrypted(d.encrypted)
        .set_kms_key_id(d.kms_key_id.clone())
        .set_snapshot_id(d.snapshot_id.clone())
        .set_delete_on_termination(d.delete_on_termination)
        .set_volume_initialization_rate(d.volume_initialization_rate)
        .build();
    sdk::LaunchTemplateBlockDeviceMappingRequest::builder().device_name(&d.device_name).ebs(ebs).build()
}

/// The SDK's `LaunchTemplateData` of a launch template (user data base64-encoded here).
fn template_data(t: &LaunchTemplate) -> sdk::RequestLaunchTemplateData {
    let d = &t.data;
    let m = &d.metadata_options;
    let mut b = sdk::RequestLaunchTemplateData::builder()
        .image_id(&d.image_id)
        .user_data(aws_smithy_types::base64::encode(d.user_data.as_bytes()))
        .set_block_device_mappings(Some(d.block_device_mappings.iter().map(block_device).collect()))
        .metadata_options(
            sdk::LaunchTemplateInstanceMetadataOptionsRequest::builder()
                .http_endpoint(sdk::LaunchTemplateInstanceMetadataEndpointState::from(m.http_endpoint.as_str()))
                .set_http_protocol_ipv6(
                    m.http_protocol_ipv6.as_deref().map(sdk::LaunchTemplateInstanceMetadataProtocolIpv6::from),
                )
                .set_http_put_response_hop_limit(to_i32(Some(m.http_put_response_hop_limit)))
                .http_tokens(sdk::LaunchTemplateHttpTokensState::from(m.http_tokens.as_str()))
                .instance_metadata_tags(sdk::LaunchTemplateInstanceMetadataTagsState::from(
                    m.instance_metadata_tags.as_str(),
                ))
                .build(),
        )
        .monitoring(sdk::LaunchTemplatesMonitoringRequest::builder().enabled(d.detailed_monitoring).build());
    if let Some(p) = &d.placement {
        b = b.placement(
            sdk::LaunchTemplatePlacementRequest::builder()
                .set_tenancy(p.tenancy.as_deref().map(sdk::Tenancy::from))
                .set_group_id(p.group_id.clone())
                .set_partition_number(p.partition_number)
                .build(),
        );
    }
    if let Some(profile) = &d.instance_profile {
        b = b.iam_instance_profile(
            sdk::LaunchTemplateIamInstanceProfileSpecificationRequest::builder().name(profile).build(),
        );
    }
    if !d.security_group_ids.is_empty() {
        b = b.set_security_group_ids(Some(d.security_group_ids.clone()));
    }
    for n in &d.network_interfaces {
        let tracking = n.connection_tracking.as_ref().map(|c| {
            sdk::ConnectionTrackingSpecificationRequest::builder()
                .set_tcp_established_timeout(c.tcp_established_timeout)
                .set_udp_stream_timeout(c.udp_stream_timeout)
                .set_udp_timeout(c.udp_timeout)
                .build()
        });
        b = b.network_interfaces(
            sdk::LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                .network_card_index(n.network_card_index)
                .device_index(n.device_index)
                .set_interface_type(n.interface_type.clone())
                .set_associate_public_ip_address(n.associate_public_ip_address)
                .set_ipv4_prefix_count(n.ipv4_prefix_count)
                .set_ipv6_prefix_count(n.ipv6_prefix_count)
                .set_ipv6_address_count(n.ipv6_address_count)
                .set_primary_ipv6(n.primary_ipv6)
                .set_connection_tracking_specification(tracking)
                .set_groups(Some(n.security_group_ids.clone()))
                .delete_on_termination(n.delete_on_termination)
                .build(),
        );
    }
    if let Some(preference) = d.capacity_reservation_preference {
        let preference = match preference {
            CapacityReservationPreference::Open => sdk::CapacityReservationPreference::Open,
            CapacityReservationPreference::None => sdk::CapacityReservationPreference::None,
            CapacityReservationPreference::CapacityReservationsOnly => {
                sdk::CapacityReservationPreference::CapacityReservationsOnly
            }
        };
        let target = d
            .capacity_reservation_id
            .as_ref()
            .map(|id| sdk::CapacityReservationTarget::builder().capacity_reservation_id(id).build());
        b = b.capacity_reservation_specification(
            sdk::LaunchTemplateCapacityReservationSpecificationRequest::builder()
                .capacity_reservation_preference(preference)
                .set_capacity_reservation_target(target)
                .build(),
        );
    }
    if let Some(market) = &d.market_type {
        b = b.instance_market_options(
            sdk::LaunchTemplateInstanceMarketOptionsRequest::builder()
                .market_type(sdk::MarketType::from(market.as_str()))
                .build(),
        );
    }
    if d.nested_virtualization {
        b = b.cpu_options(
            sdk::LaunchTemplateCpuOptionsRequest::builder()
                .nested_virtualization(sdk::NestedVirtualizationSpecification::from("enabled"))
                .build(),
        );
    }
    if let Some(enabled) = d.enclave_enabled {
        b = b.enclave_options(sdk::LaunchTemplateEnclaveOptionsRequest::builder().enabled(enabled).build());
    }
    if !d.resource_tags.is_empty() {
        for resource in launch_template_data_tagged(d.tag_spot_requests) {
            b = b.tag_specifications(
                sdk::LaunchTemplateTagSpecificationRequest::builder()
                    .resource_type(sdk::ResourceType::from(resource.as_str()))
                    .set_tags(Some(sdk_tags(&d.resource_tags)))
                    .build(),
            );
        }
    }
    b.build()
}

fn template_info(t: &sdk::LaunchTemplate) -> LaunchTemplateInfo {
    LaunchTemplateInfo {
        name: t.launch_template_name().unwrap_or_default().to_owned(),
        id: t.launch_template_id().unwrap_or_default().to_owned(),
        tags: tag_map(t.tags().iter().map(|t| (t.key(), t.value()))),
    }
}

#[async_trait]
impl LaunchTemplateApi for Ec2Adapter {
    async fn create_launch_template(&self, template: &LaunchTemplate) -> Result<LaunchTemplateInfo, AwsApiError> {
        let out = self
            .client
            .create_launch_template()
            .launch_template_name(&template.name)
            .launch_template_data(template_data(template))
            .tag_specifications(tag_spec(sdk::ResourceType::LaunchTemplate, &template.tags))
            .send()
            .await
            .map_err(|e| api_error("CreateLaunchTemplate", e))?;
        Ok(out.launch_template().map(template_info).unwrap_or_else(|| LaunchTemplateInfo {
            name: template.name.clone(),
            id: String::new(),
            tags: template.tags.clone(),
        }))
    }

    async fn describe_launch_template(&self, name: &str) -> Result<Option<LaunchTemplateInfo>, AwsApiError> {
        match self.client.describe_launch_templates().launch_template_names(name).send().await {
            Ok(out) => Ok(out.launch_templates().first().map(template_info)),
            Err(e) => {
                let e = api_error("DescribeLaunchTemplates", e);
                if e.is_not_found() { Ok(None) } else { Err(e) }
            }
        }
    }

    async fn list_launch_templates(
        &self,
        tag_key: &str,
        tag_value: &str,
    ) -> Result<Vec<LaunchTemplateInfo>, AwsApiError> {
        let filter = sdk::Filter::builder().name(format!("tag:{tag_key}")).values(tag_value).build();
        let mut pages = self.client.describe_launch_templates().filters(filter).into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("DescribeLaunchTemplates", e))?;
            out.extend(page.launch_templates().iter().map(template_info));
        }
        Ok(out)
    }

    async fn delete_launch_template(&self, name: &str) -> Result<(), AwsApiError> {
        match self.client.delete_launch_template().launch_template_name(name).send().await {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = api_error("DeleteLaunchTemplate", e);
                if e.is_not_found() { Ok(()) } else { Err(e) }
            }
        }
    }
}

fn fleet_request(
    client: &aws_sdk_ec2::Client,
    r: &CreateFleetRequest,
) -> aws_sdk_ec2::operation::create_fleet::builders::CreateFleetFluentBuilder {
    let mut b = client
        .create_fleet()
        .r#type(sdk::FleetType::Instant)
        .target_capacity_specification(
            sdk::TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(i32::try_from(r.total_target_capacity).unwrap_or(i32::MAX))
                .default_target_capacity_type(sdk::DefaultTargetCapacityType::from(r.target_capacity_type.as_str()))
                .build(),
        )
        .set_context(r.context.clone());
    if let Some(s) = &r.spot_allocation_strategy {
        b = b.spot_options(
            sdk::SpotOptionsRequest::builder()
                .allocation_strategy(sdk::SpotAllocationStrategy::from(s.as_str()))
                .build(),
        );
    }
    if let Some(s) = &r.on_demand_allocation_strategy {
        b = b.on_demand_options(
            sdk::OnDemandOptionsRequest::builder()
                .allocation_strategy(sdk::FleetOnDemandAllocationStrategy::from(s.as_str()))
                .build(),
        );
    }
    if r.interruptible_reservations {
        b = b.reserved_capacity_options(
            sdk::ReservedCapacityOptionsRequest::builder()
                .reservation_types(sdk::FleetReservationType::from("interruptible-capacity-reservation"))
                .build(),
        );
    }
    for c in &r.launch_template_configs {
        let spec = sdk::FleetLaunchTemplateSpecificationRequest::builder()
            .launch_template_name(&c.launch_template_name)
            .version("$Latest")
            .build();
        let overrides = c
            .overrides
            .iter()
            .map(|o| {
                sdk::FleetLaunchTemplateOverridesRequest::builder()
                    .instance_type(sdk::InstanceType::from(o.instance_type.as_str()))
                    .set_subnet_id(o.subnet_id.clone())
                    .set_image_id(o.image_id.clone())
                    .availability_zone(&o.availability_zone)
                    .priority(o.priority)
                    .build()
            })
            .collect();
        b = b.launch_template_configs(
            sdk::FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(spec)
                .set_overrides(Some(overrides))
                .build(),
        );
    }
    if !r.tags.is_empty() {
        for resource in FLEET_TAGGED {
            b = b.tag_specifications(tag_spec(sdk::ResourceType::from(resource.as_str()), &r.tags));
        }
    }
    b
}

fn instance(i: &sdk::Instance) -> Option<Ec2Instance> {
    Some(Ec2Instance {
        instance_id: i.instance_id()?.to_owned(),
        instance_type: i.instance_type().map(|t| t.as_str().to_owned()).unwrap_or_default(),
        availability_zone: i.placement().and_then(|p| p.availability_zone()).unwrap_or_default().to_owned(),
        availability_zone_id: i.placement().and_then(|p| p.availability_zone_id()).map(str::to_owned),
        subnet_id: i.subnet_id().map(str::to_owned),
        image_id: i.image_id().map(str::to_owned),
        state: InstanceState::parse(i.state()?.name()?.as_str())?,
        spot_instance_request_id: i.spot_instance_request_id().map(str::to_owned),
        capacity_reservation_id: i.capacity_reservation_id().map(str::to_owned),
        capacity_reservation_preference: i
            .capacity_reservation_specification()
            .and_then(|c| c.capacity_reservation_preference())
            .map(|p| p.as_str().to_owned()),
        security_group_ids: i.security_groups().iter().filter_map(|g| g.group_id()).map(str::to_owned).collect(),
        placement_group_id: i.placement().and_then(|p| p.group_id()).map(str::to_owned),
        launch_time: i.launch_time().and_then(to_chrono),
        tags: tag_map(i.tags().iter().map(|t| (t.key(), t.value()))),
    })
}

#[async_trait]
impl FleetApi for Ec2Adapter {
    async fn create_fleet(&self, request: &CreateFleetRequest) -> Result<CreateFleetResponse, AwsApiError> {
        let out = fleet_request(&self.client, request).send().await.map_err(|e| api_error("CreateFleet", e))?;
        let mut response = CreateFleetResponse::default();
        for i in out.instances() {
            let o = i.launch_template_and_overrides().and_then(|l| l.overrides());
            for id in i.instance_ids() {
                response.instances.push(FleetInstance {
                    instance_id: id.clone(),
                    instance_type: i
                        .instance_type()
                        .map(|t| t.as_str().to_owned())
                        .or_else(|| o.and_then(|o| o.instance_type()).map(|t| t.as_str().to_owned()))
                        .unwrap_or_default(),
                    availability_zone: o.and_then(|o| o.availability_zone()).unwrap_or_default().to_owned(),
                    subnet_id: o.and_then(|o| o.subnet_id()).map(str::to_owned),
                    image_id: o.and_then(|o| o.image_id()).map(str::to_owned),
                    lifecycle: i.lifecycle().map(|l| l.as_str().to_owned()),
                });
            }
        }
        for e in out.errors() {
            let o = e.launch_template_and_overrides().and_then(|l| l.overrides());
            response.errors.push(FleetError {
                error_code: e.error_code().unwrap_or_default().to_owned(),
                error_message: e.error_message().unwrap_or_default().to_owned(),
                instance_type: o.and_then(|o| o.instance_type()).map(|t| t.as_str().to_owned()),
                availability_zone: o.and_then(|o| o.availability_zone()).map(str::to_owned),
                subnet_id: o.and_then(|o| o.subnet_id()).map(str::to_owned),
            });
        }
        Ok(response)
    }

    async fn describe_instances(&self, request: &DescribeInstancesRequest) -> Result<Vec<Ec2Instance>, AwsApiError> {
        let filters = request
            .filters
            .iter()
            .map(|f| sdk::Filter::builder().name(&f.name).set_values(Some(f.values.clone())).build())
            .collect();
        let mut b = self.client.describe_instances().set_filters(Some(filters));
        if !request.instance_ids.is_empty() {
            b = b.set_instance_ids(Some(request.instance_ids.clone()));
        }
        let mut pages = b.into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("DescribeInstances", e))?;
            out.extend(page.reservations().iter().flat_map(|r| r.instances()).filter_map(instance));
        }
        Ok(out)
    }

    async fn terminate_instances(&self, instance_ids: &[String]) -> Result<Vec<TerminatingInstance>, AwsApiError> {
        let out = self
            .client
            .terminate_instances()
            .set_instance_ids(Some(instance_ids.to_vec()))
            .send()
            .await
            .map_err(|e| api_error("TerminateInstances", e))?;
        Ok(out
            .terminating_instances()
            .iter()
            .filter_map(|t| {
                Some(TerminatingInstance {
                    instance_id: t.instance_id()?.to_owned(),
                    current_state: InstanceState::parse(t.current_state()?.name()?.as_str())?,
                })
            })
            .collect())
    }

    async fn reboot_instances(&self, instance_ids: &[String]) -> Result<(), AwsApiError> {
        self.client
            .reboot_instances()
            .set_instance_ids(Some(instance_ids.to_vec()))
            .send()
            .await
            .map_err(|e| api_error("RebootInstances", e))?;
        Ok(())
    }

    async fn create_tags(&self, resource_ids: &[String], tags: &BTreeMap<String, String>) -> Result<(), AwsApiError> {
        self.client
            .create_tags()
            .set_resources(Some(resource_ids.to_vec()))
            .set_tags(Some(sdk_tags(tags)))
            .send()
            .await
            .map_err(|e| api_error("CreateTags", e))?;
        Ok(())
    }
}

/// Running instances only (`IncludeAllInstances` unset), every page of 1000.
#[async_trait]
impl crate::status::InstanceStatusApi for Ec2Adapter {
    async fn describe_instance_status(&self) -> Result<Vec<crate::status::InstanceStatus>, AwsApiError> {
        use crate::status::{InstanceStatus, ScheduledEvent};
        let mut pages = self.client.describe_instance_status().max_results(1000).into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("DescribeInstanceStatus", e))?;
            out.extend(page.instance_statuses().iter().filter_map(|s| {
                let check = |c: Option<&sdk::InstanceStatusSummary>| {
                    c.and_then(|c| c.status()).map(|s| s.as_str().to_owned()).unwrap_or_default()
                };
                Some(InstanceStatus {
                    instance_id: s.instance_id()?.to_owned(),
                    availability_zone: s.availability_zone().map(str::to_owned),
                    instance_status: check(s.instance_status()),
                    system_status: check(s.system_status()),
                    events: s
                        .events()
                        .iter()
                        .map(|e| ScheduledEvent {
                            code: e.code().map(|c| c.as_str().to_owned()).unwrap_or_default(),
                            description: e.description().unwrap_or_default().to_owned(),
                            not_before: e.not_before().and_then(to_chrono),
                        })
                        .collect(),
                })
            }));
        }
        Ok(out)
    }
}
