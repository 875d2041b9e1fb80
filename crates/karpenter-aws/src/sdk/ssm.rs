//! [`SsmApi`] over aws-sdk-ssm.

use async_trait::async_trait;

use super::api_error;
use crate::api_error::AwsApiError;
use crate::nodeclass::api::SsmApi;

/// SSM `GetParameter`.
#[derive(Clone, Debug)]
pub struct SsmAdapter {
    client: aws_sdk_ssm::Client,
}

impl SsmAdapter {
    /// The adapter over `client`.
    pub fn new(client: aws_sdk_ssm::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl SsmApi for SsmAdapter {
    async fn get_parameter(&self, name: &str) -> Result<String, AwsApiError> {
        let out = self.client.get_parameter().name(name).send().await.map_err(|e| api_error("GetParameter", e))?;
        out.parameter().and_then(|p| p.value()).map(str::to_owned).ok_or_else(|| {
            AwsApiError::new("GetParameter", "ParameterNotFound", format!("parameter {name} has no value"))
        })
    }
}
