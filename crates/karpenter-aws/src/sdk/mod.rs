//! The AWS SDK side (feature `sdk`): the clients, and adapters implementing this crate's narrow API traits with
//! aws-sdk-ec2/ssm/sqs/iam/eks/pricing/arczonalshift.
//!
//! [`AwsClients::load`] builds every client from one `SdkConfig` loaded with the SDK's default chains: region
//! from the options, `AWS_REGION`, the profile or IMDS; credentials from the environment, the profile, web
//! identity (IRSA), the container endpoint (EKS Pod Identity) or IMDS. The HTTP client is rustls over ring (the
//! crypto provider the rest of the workspace uses, no C build). Retries are configured deliberately
//! ([`SdkOptions::retry`]): the controller keeps the SDK's standard retries, tests turn them off so injected
//! errors are seen as they are. An endpoint override ([`SdkOptions::endpoint_url`]) points every client at an
//! emulator.
//!
//! [`Ec2Adapter`] implements every EC2 trait: the node class ones (subnets, security groups, images, capacity
//! reservations, placement groups), the launch ones (launch templates, fleets, instances) and the instance-type
//! one.
//!
//! Adapters (one file per service) only translate: requests from our structs to the SDK's builders, every page
//! of an answer back to our structs, and an SDK error to [`AwsApiError`] with the service's error code
//! ([`api_error`]).

use std::fmt;
use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};

use crate::api_error::{AwsApiError, AwsErrorKind};

mod arc;
pub mod dry_run;
mod ec2;
mod eks;
mod iam;
pub mod instancetypes;
mod launch;
mod pricing;
mod sqs;
mod ssm;

pub use arc::ZonalShiftAdapter;
pub use ec2::Ec2Adapter;
pub use eks::EksAdapter;
pub use iam::IamAdapter;
pub use pricing::PricingAdapter;
pub use sqs::SqsAdapter;
pub use ssm::SsmAdapter;

/// The SDK's HTTP timeout for one operation, retries included (upstream's 4 minutes).
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(4 * 60);

/// How the clients are built.
#[derive(Clone, Debug, Default)]
pub struct SdkOptions {
    /// The region; `None` = the default chain (`AWS_REGION`, profile, IMDS).
    pub region: Option<String>,
    /// Send every call to this endpoint instead of AWS's (an emulator in tests).
    pub endpoint_url: Option<String>,
    /// Retries; `None` = the SDK's standard mode (3 attempts, exponential backoff with jitter).
    pub retry: Option<RetryConfig>,
    /// Fixed credentials (access key id, secret key) instead of the default chain (tests).
    pub static_credentials: Option<(String, String)>,
}

impl SdkOptions {
    /// Options for an emulator at `endpoint_url` in `region`: fixed test credentials and no retries, so every
    /// error the emulator produces is seen as it is.
    pub fn emulator(endpoint_url: &str, region: &str) -> Self {
        Self {
            region: Some(region.to_owned()),
            endpoint_url: Some(endpoint_url.to_owned()),
            retry: Some(RetryConfig::disabled()),
            static_credentials: Some(("testing".to_owned(), "testing".to_owned())),
        }
    }
}

/// Loading the SDK configuration failed.
#[derive(Debug, thiserror::Error)]
pub enum SdkLoadError {
    /// No region from the options, the environment, the profile or IMDS.
    #[error("no AWS region: set AWS_REGION (or run on EC2 where IMDS answers)")]
    NoRegion,
}

/// Loads the shared SDK configuration (see the module docs).
pub async fn load_config(options: &SdkOptions) -> Result<SdkConfig, SdkLoadError> {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        // rustls over ring, plain HTTP allowed (emulators).
        .http_client(
            aws_smithy_http_client::Builder::new().tls_provider(Provider::Rustls(CryptoMode::Ring)).build_https(),
        )
        .retry_config(options.retry.clone().unwrap_or_else(RetryConfig::standard))
        .timeout_config(TimeoutConfig::builder().operation_timeout(OPERATION_TIMEOUT).build());
    if let Some(region) = &options.region {
        loader = loader.region(Region::new(region.clone()));
    }
    if let Some(url) = &options.endpoint_url {
        loader = loader.endpoint_url(url.clone());
    }
    if let Some((key, secret)) = &options.static_credentials {
        loader = loader.credentials_provider(aws_credential_types_credentials(key, secret));
    }
    let config = loader.load().await;
    if config.region().is_none() {
        return Err(SdkLoadError::NoRegion);
    }
    Ok(config)
}

fn aws_credential_types_credentials(key: &str, secret: &str) -> aws_sdk_ec2::config::Credentials {
    aws_sdk_ec2::config::Credentials::new(key, secret, None, None, "karpenter-static")
}

/// Every client the AWS provider uses, from one configuration.
#[derive(Clone)]
pub struct AwsClients {
    /// The region.
    pub region: String,
    /// EC2.
    pub ec2: aws_sdk_ec2::Client,
    /// SSM.
    pub ssm: aws_sdk_ssm::Client,
    /// SQS.
    pub sqs: aws_sdk_sqs::Client,
    /// IAM.
    pub iam: aws_sdk_iam::Client,
    /// EKS.
    pub eks: aws_sdk_eks::Client,
    /// The Pricing API, in the region that serves this one ([`crate::pricing_api::pricing_region`]).
    pub pricing: aws_sdk_pricing::Client,
    /// ARC zonal shift.
    pub arc_zonal_shift: aws_sdk_arczonalshift::Client,
}

impl fmt::Debug for AwsClients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsClients").field("region", &self.region).finish_non_exhaustive()
    }
}

impl AwsClients {
    /// Loads the configuration and builds the clients.
    pub async fn load(options: &SdkOptions) -> Result<Self, SdkLoadError> {
        let config = load_config(options).await?;
        Self::from_config(&config)
    }

    /// The clients of a loaded configuration (which must have a region).
    pub fn from_config(config: &SdkConfig) -> Result<Self, SdkLoadError> {
        let region = config.region().ok_or(SdkLoadError::NoRegion)?.to_string();
        let pricing_region = crate::pricing_api::pricing_region(&region);
        let pricing_config = aws_sdk_pricing::config::Builder::from(config).region(Region::new(pricing_region)).build();
        Ok(Self {
            ec2: aws_sdk_ec2::Client::new(config),
            ssm: aws_sdk_ssm::Client::new(config),
            sqs: aws_sdk_sqs::Client::new(config),
            iam: aws_sdk_iam::Client::new(config),
            eks: aws_sdk_eks::Client::new(config),
            arc_zonal_shift: aws_sdk_arczonalshift::Client::new(config),
            pricing: aws_sdk_pricing::Client::from_conf(pricing_config),
            region,
        })
    }

    /// The EC2 adapter (subnets, security groups, images, reservations, placement groups, spot prices, ...).
    pub fn ec2_adapter(&self) -> Ec2Adapter {
        Ec2Adapter::new(self.ec2.clone())
    }

    /// The SSM adapter.
    pub fn ssm_adapter(&self) -> SsmAdapter {
        SsmAdapter::new(self.ssm.clone())
    }

    /// The SQS adapter.
    pub fn sqs_adapter(&self) -> SqsAdapter {
        SqsAdapter::new(self.sqs.clone())
    }

    /// The IAM adapter.
    pub fn iam_adapter(&self) -> IamAdapter {
        IamAdapter::new(self.iam.clone())
    }

    /// The EKS adapter.
    pub fn eks_adapter(&self) -> EksAdapter {
        EksAdapter::new(self.eks.clone())
    }

    /// The ARC zonal shift adapter.
    pub fn zonal_shift_adapter(&self) -> ZonalShiftAdapter {
        ZonalShiftAdapter::new(self.arc_zonal_shift.clone())
    }

    /// The pricing adapter (Pricing API for on-demand, EC2 for spot).
    pub fn pricing_adapter(&self) -> PricingAdapter {
        PricingAdapter::new(self.pricing.clone(), self.ec2.clone())
    }
}

/// An SDK error as an [`AwsApiError`] of `operation`: a service error keeps AWS's code (classified); a timeout,
/// dispatch or response failure is [`AwsErrorKind::Transient`]; a request the SDK could not build is
/// [`AwsErrorKind::InvalidRequest`].
pub fn api_error<E, R>(operation: &str, err: SdkError<E, R>) -> AwsApiError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug,
{
    let context = DisplayErrorContext(&err).to_string();
    match &err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code().unwrap_or("Unknown").to_owned();
            let message = e.message().map(str::to_owned).unwrap_or(context);
            AwsApiError::new(operation, code, message)
        }
        SdkError::TimeoutError(_) => {
            AwsApiError::with_kind(operation, "TimeoutError", context, AwsErrorKind::Transient)
        }
        SdkError::DispatchFailure(_) => {
            AwsApiError::with_kind(operation, "DispatchFailure", context, AwsErrorKind::Transient)
        }
        SdkError::ResponseError(_) => {
            AwsApiError::with_kind(operation, "ResponseError", context, AwsErrorKind::Transient)
        }
        SdkError::ConstructionFailure(_) => {
            AwsApiError::with_kind(operation, "ConstructionFailure", context, AwsErrorKind::InvalidRequest)
        }
        _ => AwsApiError::with_kind(operation, "Unknown", context, AwsErrorKind::Other),
    }
}

/// A request the SDK refused to build (a required field missing) as an [`AwsApiError`].
pub(crate) fn build_error(operation: &str, err: impl fmt::Display) -> AwsApiError {
    AwsApiError::with_kind(operation, "ConstructionFailure", err.to_string(), AwsErrorKind::InvalidRequest)
}

/// SDK tags as a sorted map.
pub(crate) fn tag_map<'a>(
    tags: impl IntoIterator<Item = (Option<&'a str>, Option<&'a str>)>,
) -> std::collections::BTreeMap<String, String> {
    tags.into_iter().filter_map(|(k, v)| Some((k?.to_owned(), v.unwrap_or_default().to_owned()))).collect()
}

/// An SDK timestamp as chrono's.
pub(crate) fn to_chrono(t: &aws_sdk_ec2::primitives::DateTime) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())
}

/// chrono's timestamp as the SDK's.
pub(crate) fn from_chrono(t: chrono::DateTime<chrono::Utc>) -> aws_sdk_ec2::primitives::DateTime {
    aws_sdk_ec2::primitives::DateTime::from_secs(t.timestamp())
}
