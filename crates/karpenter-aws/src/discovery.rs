//! Cluster discovery through EKS `DescribeCluster`, as upstream's AWS operator does at startup.
//!
//! Nodes need the API server endpoint, its CA bundle and the service CIDR (AL2023's nodeadm config carries all
//! three). When `CLUSTER_ENDPOINT` is set it wins; when it is empty the endpoint is discovered and discovery
//! failing is fatal at startup, as upstream. The service CIDR and CA are always taken from `DescribeCluster` when
//! it answers; with a configured endpoint a failing `DescribeCluster` (a cluster that is not EKS, a missing
//! `eks:DescribeCluster` permission) is logged and the rest stays unknown.

use std::fmt;

use async_trait::async_trait;

use crate::api_error::AwsApiError;

/// What `DescribeCluster` says about a cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterInfo {
    /// The API server endpoint (`https://...`).
    pub endpoint: String,
    /// The cluster CA bundle, base64 PEM as EKS returns it.
    pub certificate_authority: Option<String>,
    /// The IPv4 service CIDR (`kubernetesNetworkConfig.serviceIpv4Cidr`).
    pub service_ipv4_cidr: Option<String>,
    /// The IPv6 service CIDR, for IPv6 clusters.
    pub service_ipv6_cidr: Option<String>,
    /// `ipv4` or `ipv6`.
    pub ip_family: Option<String>,
    /// The Kubernetes minor version (`1.33`).
    pub version: Option<String>,
    /// The cluster's ARN (ARC zonal shift's name for it).
    pub arn: Option<String>,
}

impl ClusterInfo {
    /// The service CIDR of the cluster's IP family (IPv6 when the family is `ipv6`, else IPv4).
    pub fn service_cidr(&self) -> Option<&str> {
        if self.ip_family.as_deref() == Some("ipv6") {
            self.service_ipv6_cidr.as_deref().or(self.service_ipv4_cidr.as_deref())
        } else {
            self.service_ipv4_cidr.as_deref().or(self.service_ipv6_cidr.as_deref())
        }
    }
}

/// The EKS call discovery makes.
#[async_trait]
pub trait EksApi: Send + Sync + fmt::Debug {
    /// `DescribeCluster` of the cluster named `name`.
    async fn describe_cluster(&self, name: &str) -> Result<ClusterInfo, AwsApiError>;
}

/// Discovery could not produce an endpoint.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// `CLUSTER_ENDPOINT` is empty and `DescribeCluster` failed.
    #[error("CLUSTER_ENDPOINT is not set and discovering it failed for cluster {cluster:?}: {source}")]
    DescribeCluster {
        /// The cluster name.
        cluster: String,
        /// The EKS error.
        #[source]
        source: AwsApiError,
    },
    /// `DescribeCluster` answered without an endpoint (a cluster still being created).
    #[error("CLUSTER_ENDPOINT is not set and EKS reports no endpoint for cluster {cluster:?}")]
    NoEndpoint {
        /// The cluster name.
        cluster: String,
    },
    /// The endpoint (configured or discovered) is not an https URL.
    #[error("cluster endpoint {0:?} is not an https:// URL")]
    BadEndpoint(String),
    /// No cluster name to discover with.
    #[error("CLUSTER_NAME is required to discover the cluster endpoint")]
    NoClusterName,
}

fn check_endpoint(endpoint: &str) -> Result<(), DiscoveryError> {
    let rest = endpoint.strip_prefix("https://").unwrap_or_default();
    if rest.is_empty() || rest.contains(char::is_whitespace) {
        return Err(DiscoveryError::BadEndpoint(endpoint.to_owned()));
    }
    Ok(())
}

/// The cluster facts nodes need: the configured endpoint (`CLUSTER_ENDPOINT`, may be empty) or the discovered
/// one, completed with what `DescribeCluster` says (see the module docs).
pub async fn discover(
    api: &dyn EksApi,
    cluster_name: &str,
    configured_endpoint: &str,
) -> Result<ClusterInfo, DiscoveryError> {
    let configured = configured_endpoint.trim();
    if configured.is_empty() {
        if cluster_name.is_empty() {
            return Err(DiscoveryError::NoClusterName);
        }
        let info = api
            .describe_cluster(cluster_name)
            .await
            .map_err(|source| DiscoveryError::DescribeCluster { cluster: cluster_name.to_owned(), source })?;
        if info.endpoint.is_empty() {
            return Err(DiscoveryError::NoEndpoint { cluster: cluster_name.to_owned() });
        }
        check_endpoint(&info.endpoint)?;
        tracing::info!(cluster = cluster_name, endpoint = %info.endpoint, service_cidr = ?info.service_cidr(),
            "discovered the cluster endpoint with eks:DescribeCluster");
        return Ok(info);
    }
    check_endpoint(configured)?;
    let described = if cluster_name.is_empty() {
        None
    } else {
        match api.describe_cluster(cluster_name).await {
            Ok(info) => Some(info),
            Err(e) => {
                tracing::info!(cluster = cluster_name, error = %e,
                    "eks:DescribeCluster failed; the service CIDR and CA bundle stay unknown");
                None
            }
        }
    };
    let mut info = described.unwrap_or_default();
    info.endpoint = configured.to_owned();
    Ok(info)
}

/// The ClusterIP of the `kube-dns` Service in `kube-system`: the cluster DNS handed to nodes in their user data.
/// `None` when the Service is missing, headless, or cannot be read: nodes then keep their image's default. The
/// one Kubernetes read of cluster discovery; the chart's `-dns` Role in `kube-system` grants exactly this `get`.
pub async fn kube_dns_ip(client: &kube::Client) -> Option<String> {
    let services: kube::Api<k8s_openapi::api::core::v1::Service> = kube::Api::namespaced(client.clone(), "kube-system");
    match services.get_opt("kube-dns").await {
        Ok(service) => service.and_then(|s| s.spec?.cluster_ip).filter(|ip| !ip.is_empty() && ip != "None"),
        Err(e) => {
            tracing::info!(error = %e, "reading the kube-dns service failed; nodes use their default cluster DNS");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeEks;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            endpoint: "https://ABC.gr7.us-west-2.eks.amazonaws.com".into(),
            certificate_authority: Some("LS0tLS1CRUdJTg==".into()),
            service_ipv4_cidr: Some("10.100.0.0/16".into()),
            service_ipv6_cidr: None,
            ip_family: Some("ipv4".into()),
            version: Some("1.33".into()),
            arn: Some("arn:aws:eks:us-west-2:111122223333:cluster/prod".into()),
        }
    }

    #[tokio::test]
    async fn discovers_when_unset() {
        let eks = FakeEks::new().with_cluster("prod", cluster());
        let info = discover(&eks, "prod", "").await.unwrap();
        assert_eq!(info, cluster());
        assert_eq!(info.service_cidr(), Some("10.100.0.0/16"));
        assert_eq!(eks.calls(), ["prod"]);
    }

    #[tokio::test]
    async fn unset_endpoint_and_failing_eks_is_fatal() {
        let eks = FakeEks::new();
        let err = discover(&eks, "prod", "").await.unwrap_err();
        assert!(matches!(&err, DiscoveryError::DescribeCluster { source, .. } if source.is_not_found()), "{err}");
        let eks = FakeEks::new().with_cluster("prod", ClusterInfo { endpoint: String::new(), ..cluster() });
        assert!(matches!(discover(&eks, "prod", "").await, Err(DiscoveryError::NoEndpoint { .. })));
        let eks = FakeEks::new().with_cluster("prod", ClusterInfo { endpoint: "http://x".into(), ..cluster() });
        assert!(matches!(discover(&eks, "prod", "").await, Err(DiscoveryError::BadEndpoint(_))));
        assert!(matches!(discover(&eks, "", "").await, Err(DiscoveryError::NoClusterName)));
    }

    #[tokio::test]
    async fn configured_endpoint_wins_and_eks_failure_is_tolerated() {
        let eks = FakeEks::new().with_cluster("prod", cluster());
        let info = discover(&eks, "prod", "https://my-endpoint.example").await.unwrap();
        assert_eq!(info.endpoint, "https://my-endpoint.example");
        assert_eq!(info.service_ipv4_cidr.as_deref(), Some("10.100.0.0/16"));

        let eks = FakeEks::new();
        eks.fail_next(AwsApiError::new("DescribeCluster", "AccessDeniedException", "no"));
        let info = discover(&eks, "prod", "https://my-endpoint.example").await.unwrap();
        assert_eq!(info, ClusterInfo { endpoint: "https://my-endpoint.example".into(), ..Default::default() });
        assert!(matches!(discover(&eks, "prod", "my-endpoint").await, Err(DiscoveryError::BadEndpoint(_))));
    }

    #[test]
    fn ipv6_clusters_use_the_ipv6_service_cidr() {
        let info =
            ClusterInfo { service_ipv6_cidr: Some("fd00::/108".into()), ip_family: Some("ipv6".into()), ..cluster() };
        assert_eq!(info.service_cidr(), Some("fd00::/108"));
    }
}
