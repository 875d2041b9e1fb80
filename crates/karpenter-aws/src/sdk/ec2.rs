//! EC2 adapters: the node class traits (subnets, security groups, images, capacity reservations, placement
//! groups) over aws-sdk-ec2. Every call follows `NextToken` to the last page.

use async_trait::async_trait;
use aws_sdk_ec2::types::Filter as SdkFilter;

use super::{api_error, tag_map, to_chrono};
use crate::api_error::AwsApiError;
use crate::nodeclass::api::{
    CapacityReservationApi, CapacityReservationDescription, DescribeCapacityReservationsRequest, DescribeImagesRequest,
    DescribePlacementGroupsRequest, Filter, ImageApi, ImageDescription, PlacementGroupApi, PlacementGroupDescription,
    SecurityGroupApi, SecurityGroupDescription, SubnetApi, SubnetDescription,
};

/// Page size of `DescribeSubnets` and `DescribeSecurityGroups` (upstream's).
const SUBNET_PAGE: i32 = 500;
/// Page size of `DescribeImages` (upstream's).
const IMAGE_PAGE: i32 = 1000;

/// EC2 calls.
#[derive(Clone, Debug)]
pub struct Ec2Adapter {
    pub(crate) client: aws_sdk_ec2::Client,
}

impl Ec2Adapter {
    /// The adapter over `client`.
    pub fn new(client: aws_sdk_ec2::Client) -> Self {
        Self { client }
    }

    /// The client.
    pub fn client(&self) -> &aws_sdk_ec2::Client {
        &self.client
    }
}

/// Our filters as the SDK's.
pub(crate) fn sdk_filters(filters: &[Filter]) -> Vec<SdkFilter> {
    filters.iter().map(|f| SdkFilter::builder().name(&f.name).set_values(Some(f.values.clone())).build()).collect()
}

fn tags(tags: &[aws_sdk_ec2::types::Tag]) -> std::collections::BTreeMap<String, String> {
    tag_map(tags.iter().map(|t| (t.key(), t.value())))
}

#[async_trait]
impl SubnetApi for Ec2Adapter {
    async fn describe_subnets(&self, filters: &[Filter]) -> Result<Vec<SubnetDescription>, AwsApiError> {
        let mut pages = self
            .client
            .describe_subnets()
            .set_filters(Some(sdk_filters(filters)))
            .max_results(SUBNET_PAGE)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("DescribeSubnets", e))?;
            out.extend(page.subnets().iter().map(|s| SubnetDescription {
                subnet_id: s.subnet_id().unwrap_or_default().to_owned(),
                availability_zone: s.availability_zone().unwrap_or_default().to_owned(),
                availability_zone_id: s.availability_zone_id().map(str::to_owned),
                available_ip_address_count: i64::from(s.available_ip_address_count().unwrap_or_default()),
                vpc_id: s.vpc_id().map(str::to_owned),
                tags: tags(s.tags()),
            }));
        }
        Ok(out)
    }
}

#[async_trait]
impl SecurityGroupApi for Ec2Adapter {
    async fn describe_security_groups(&self, filters: &[Filter]) -> Result<Vec<SecurityGroupDescription>, AwsApiError> {
        let mut pages = self
            .client
            .describe_security_groups()
            .set_filters(Some(sdk_filters(filters)))
            .max_results(SUBNET_PAGE)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("DescribeSecurityGroups", e))?;
            out.extend(page.security_groups().iter().map(|g| SecurityGroupDescription {
                group_id: g.group_id().unwrap_or_default().to_owned(),
                group_name: g.group_name().unwrap_or_default().to_owned(),
                vpc_id: g.vpc_id().map(str::to_owned),
                tags: tags(g.tags()),
            }));
        }
        Ok(out)
    }
}

#[async_trait]
impl ImageApi for Ec2Adapter {
    async fn describe_images(&self, request: &DescribeImagesRequest) -> Result<Vec<ImageDescription>, AwsApiError> {
        let mut builder = self
            .client
            .describe_images()
            .set_filters(Some(sdk_filters(&request.filters)))
            .include_deprecated(true)
            .max_results(IMAGE_PAGE);
        if !request.owners.is_empty() {
            builder = builder.set_owners(Some(request.owners.clone()));
        }
        let mut pages = builder.into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("DescribeImages", e))?;
            out.extend(page.images().iter().map(|i| ImageDescription {
                image_id: i.image_id().unwrap_or_default().to_owned(),
                name: i.name().map(str::to_owned),
                architecture: i.architecture().map(|a| a.as_str().to_owned()).unwrap_or_default(),
                creation_date: i.creation_date().unwrap_or_default().to_owned(),
                deprecation_time: i.deprecation_time().map(str::to_owned),
                owner_id: i.owner_id().map(str::to_owned),
                tags: tags(i.tags()),
            }));
        }
        Ok(out)
    }
}

#[async_trait]
impl CapacityReservationApi for Ec2Adapter {
    async fn describe_capacity_reservations(
        &self,
        request: &DescribeCapacityReservationsRequest,
    ) -> Result<Vec<CapacityReservationDescription>, AwsApiError> {
        let mut builder = self.client.describe_capacity_reservations().set_filters(Some(sdk_filters(&request.filters)));
        if !request.capacity_reservation_ids.is_empty() {
            builder = builder.set_capacity_reservation_ids(Some(request.capacity_reservation_ids.clone()));
        }
        let mut pages = builder.into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("DescribeCapacityReservations", e))?;
            out.extend(page.capacity_reservations().iter().map(|r| CapacityReservationDescription {
                capacity_reservation_id: r.capacity_reservation_id().unwrap_or_default().to_owned(),
                availability_zone: r.availability_zone().unwrap_or_default().to_owned(),
                instance_type: r.instance_type().unwrap_or_default().to_owned(),
                owner_id: r.owner_id().unwrap_or_default().to_owned(),
                instance_match_criteria: r.instance_match_criteria().map(|c| c.as_str().to_owned()).unwrap_or_default(),
                reservation_type: r.reservation_type().map(|t| t.as_str().to_owned()),
                state: r.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
                total_instance_count: i64::from(r.total_instance_count().unwrap_or_default()),
                available_instance_count: i64::from(r.available_instance_count().unwrap_or_default()),
                end_date: r.end_date().and_then(to_chrono),
                interruptible: r.interruptible().unwrap_or_default(),
                tags: tags(r.tags()),
            }));
        }
        Ok(out)
    }
}

#[async_trait]
impl PlacementGroupApi for Ec2Adapter {
    async fn describe_placement_groups(
        &self,
        request: &DescribePlacementGroupsRequest,
    ) -> Result<Vec<PlacementGroupDescription>, AwsApiError> {
        let mut builder = self.client.describe_placement_groups();
        if !request.group_ids.is_empty() {
            builder = builder.set_group_ids(Some(request.group_ids.clone()));
        }
        if !request.group_names.is_empty() {
            builder = builder.set_group_names(Some(request.group_names.clone()));
        }
        let out = builder.send().await.map_err(|e| api_error("DescribePlacementGroups", e))?;
        Ok(out
            .placement_groups()
            .iter()
            .map(|g| PlacementGroupDescription {
                group_id: g.group_id().unwrap_or_default().to_owned(),
                group_name: g.group_name().unwrap_or_default().to_owned(),
                strategy: g.strategy().map(|s| s.as_str().to_owned()).unwrap_or_default(),
                partition_count: g.partition_count(),
                spread_level: g.spread_level().map(|s| s.as_str().to_owned()),
                state: g.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
            })
            .collect())
    }
}
