//! [`EksApi`] over aws-sdk-eks.

use async_trait::async_trait;

use super::api_error;
use crate::api_error::AwsApiError;
use crate::discovery::{ClusterInfo, EksApi};

/// EKS `DescribeCluster`.
#[derive(Clone, Debug)]
pub struct EksAdapter {
    client: aws_sdk_eks::Client,
}

impl EksAdapter {
    /// The adapter over `client`.
    pub fn new(client: aws_sdk_eks::Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl EksApi for EksAdapter {
    async fn describe_cluster(&self, name: &str) -> Result<ClusterInfo, AwsApiError> {
        let out =
            self.client.describe_cluster().name(name).send().await.map_err(|e| api_error("DescribeCluster", e))?;
        let Some(c) = out.cluster() else {
            return Err(AwsApiError::new("DescribeCluster", "ResourceNotFoundException", "no cluster in the answer"));
        };
        let net = c.kubernetes_network_config();
        Ok(ClusterInfo {
            endpoint: c.endpoint().unwrap_or_default().to_owned(),
            certificate_authority: c.certificate_authority().and_then(|ca| ca.data()).map(str::to_owned),
            service_ipv4_cidr: net.and_then(|n| n.service_ipv4_cidr()).map(str::to_owned),
            service_ipv6_cidr: net.and_then(|n| n.service_ipv6_cidr()).map(str::to_owned),
            ip_family: net.and_then(|n| n.ip_family()).map(|f| f.as_str().to_owned()),
            version: c.version().map(str::to_owned),
            arn: c.arn().map(str::to_owned),
        })
    }
}
