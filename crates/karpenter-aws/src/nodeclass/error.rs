//! The error of the kube-backed node class controllers ([`super::controller`] and [`super::demotion`]).

use crate::api_error::AwsApiError;

/// Errors of the kube-backed controllers.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Aws(#[from] AwsApiError),
    /// An instance-provider call (DescribeInstances) failed.
    #[error(transparent)]
    CloudProvider(#[from] karpenter_cloudprovider::CloudProviderError),
}

impl ControllerError {
    /// A 409 from the API server: someone else wrote the object first.
    pub(super) fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube(kube::Error::Api(s)) if s.code == 409)
    }
}
