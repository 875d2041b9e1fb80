//! [`IamApi`] over aws-sdk-iam (instance profiles).

use std::collections::BTreeMap;

use async_trait::async_trait;
use aws_sdk_iam::types::{InstanceProfile, Tag};

use super::{api_error, build_error, tag_map};
use crate::api_error::AwsApiError;
use crate::nodeclass::api::{CreateInstanceProfileRequest, IamApi, InstanceProfileDescription};

/// IAM instance-profile calls.
#[derive(Clone, Debug)]
pub struct IamAdapter {
    client: aws_sdk_iam::Client,
}

impl IamAdapter {
    /// The adapter over `client`.
    pub fn new(client: aws_sdk_iam::Client) -> Self {
        Self { client }
    }
}

fn describe(p: &InstanceProfile) -> InstanceProfileDescription {
    InstanceProfileDescription {
        name: p.instance_profile_name().to_owned(),
        id: Some(p.instance_profile_id().to_owned()).filter(|s| !s.is_empty()),
        arn: Some(p.arn().to_owned()).filter(|s| !s.is_empty()),
        path: p.path().to_owned(),
        roles: p.roles().iter().map(|r| r.role_name().to_owned()).collect(),
        tags: tag_map(p.tags().iter().map(|t| (Some(t.key()), Some(t.value())))),
    }
}

fn sdk_tags(operation: &str, tags: &BTreeMap<String, String>) -> Result<Vec<Tag>, AwsApiError> {
    tags.iter().map(|(k, v)| Tag::builder().key(k).value(v).build().map_err(|e| build_error(operation, e))).collect()
}

#[async_trait]
impl IamApi for IamAdapter {
    async fn get_instance_profile(&self, name: &str) -> Result<InstanceProfileDescription, AwsApiError> {
        let out = self
            .client
            .get_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
            .map_err(|e| api_error("GetInstanceProfile", e))?;
        out.instance_profile().map(describe).ok_or_else(|| {
            AwsApiError::new("GetInstanceProfile", "NoSuchEntity", format!("no instance profile {name}"))
        })
    }

    async fn create_instance_profile(
        &self,
        request: &CreateInstanceProfileRequest,
    ) -> Result<InstanceProfileDescription, AwsApiError> {
        let mut builder = self.client.create_instance_profile().instance_profile_name(&request.name);
        if !request.path.is_empty() {
            builder = builder.path(&request.path);
        }
        if !request.tags.is_empty() {
            builder = builder.set_tags(Some(sdk_tags("CreateInstanceProfile", &request.tags)?));
        }
        let out = builder.send().await.map_err(|e| api_error("CreateInstanceProfile", e))?;
        Ok(out.instance_profile().map(describe).unwrap_or_else(|| InstanceProfileDescription {
            name: request.name.clone(),
            path: request.path.clone(),
            tags: request.tags.clone(),
            ..Default::default()
        }))
    }

    async fn add_role_to_instance_profile(&self, profile: &str, role: &str) -> Result<(), AwsApiError> {
        self.client
            .add_role_to_instance_profile()
            .instance_profile_name(profile)
            .role_name(role)
            .send()
            .await
            .map_err(|e| api_error("AddRoleToInstanceProfile", e))?;
        Ok(())
    }

    async fn remove_role_from_instance_profile(&self, profile: &str, role: &str) -> Result<(), AwsApiError> {
        self.client
            .remove_role_from_instance_profile()
            .instance_profile_name(profile)
            .role_name(role)
            .send()
            .await
            .map_err(|e| api_error("RemoveRoleFromInstanceProfile", e))?;
        Ok(())
    }

    async fn delete_instance_profile(&self, name: &str) -> Result<(), AwsApiError> {
        self.client
            .delete_instance_profile()
            .instance_profile_name(name)
            .send()
            .await
            .map_err(|e| api_error("DeleteInstanceProfile", e))?;
        Ok(())
    }

    async fn tag_instance_profile(&self, name: &str, tags: &BTreeMap<String, String>) -> Result<(), AwsApiError> {
        self.client
            .tag_instance_profile()
            .instance_profile_name(name)
            .set_tags(Some(sdk_tags("TagInstanceProfile", tags)?))
            .send()
            .await
            .map_err(|e| api_error("TagInstanceProfile", e))?;
        Ok(())
    }

    async fn list_instance_profiles(&self, path_prefix: &str) -> Result<Vec<InstanceProfileDescription>, AwsApiError> {
        let mut pages = self.client.list_instance_profiles().path_prefix(path_prefix).into_paginator().send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| api_error("ListInstanceProfiles", e))?;
            // IAM filters by path prefix; filtering again keeps emulators that ignore `PathPrefix` (moto) honest.
            out.extend(page.instance_profiles().iter().filter(|p| p.path().starts_with(path_prefix)).map(describe));
        }
        Ok(out)
    }
}
