//! `run --provider aws` (feature `aws`): builds the AWS provider and its controllers from the settings.
//!
//! Order, as upstream's startup (cloudprovider-aws.md §14): the SDK configuration from the default chains
//! (region from `AWS_REGION`, the profile or IMDS; credentials from the environment, the profile, IRSA, EKS Pod
//! Identity or IMDS), an EC2 connectivity check, the cluster endpoint from `CLUSTER_ENDPOINT` or EKS
//! `DescribeCluster` (fatal when neither gives one), the EC2NodeClass lookup, price refresh, EC2NodeClass
//! resolution and its controllers, the SQS interruption source when `INTERRUPTION_QUEUE` is set, and the
//! CloudProvider.

use std::sync::Arc;

use anyhow::Context;
use futures::FutureExt;
use futures::future::BoxFuture;
use karpenter_api::ec2nodeclass::EC2NodeClass;
use karpenter_aws::discovery;
use karpenter_aws::nodeclass::controller::{
    ApiServerVersion, CapacityBlockExpiration, InstanceProfileGarbageCollector, NodeClassController,
    SsmInvalidationController,
};
use karpenter_aws::nodeclass::instance_profile::ClusterIdentity;
use karpenter_aws::nodeclass::{NodeClassResolver, ResolverApis, ResolverSettings};
use karpenter_aws::pricing::PriceTable;
use karpenter_aws::pricing_api::PricingProvider;
use karpenter_aws::queue::{NodeClaimLookup, SqsInterruptionSource};
use karpenter_aws::sdk::{AwsClients, SdkOptions};
use karpenter_cloudprovider::{Clock, CloudProvider, InterruptionSource, NodeClassLookup};
use karpenter_operator::node_classes::KubeNodeClasses;
use karpenter_operator::settings::{AwsSettings, CoreSettings};
use tokio_util::sync::CancellationToken;

/// What the AWS provider hands the controller manager.
pub struct AwsRuntime {
    /// The CloudProvider.
    pub cloud_provider: Arc<dyn CloudProvider>,
    /// The EC2NodeClasses, kept current by a watcher.
    pub node_classes: Arc<dyn NodeClassLookup>,
    /// The SQS interruption source, when `INTERRUPTION_QUEUE` is set.
    pub interruption: Option<Arc<dyn InterruptionSource>>,
    /// AWS-side controllers (node class status and finalizer, SSM invalidation, instance-profile GC, capacity
    /// blocks, price refresh); each runs until the token passed to [`start`] fires.
    pub controllers: Vec<BoxFuture<'static, ()>>,
}

impl std::fmt::Debug for AwsRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsRuntime")
            .field("interruption", &self.interruption.is_some())
            .field("controllers", &self.controllers.len())
            .finish_non_exhaustive()
    }
}

/// The parts built before the CloudProvider, handed to it.
#[allow(dead_code)]
struct Parts {
    clients: AwsClients,
    cluster: discovery::ClusterInfo,
    ca_bundle: Option<String>,
    resolver: Arc<NodeClassResolver>,
    pricing: Arc<PricingProvider>,
    node_classes: KubeNodeClasses,
}

/// Builds the AWS runtime (see the module docs).
pub async fn start(
    core: &CoreSettings,
    aws: &AwsSettings,
    client: kube::Client,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) -> anyhow::Result<AwsRuntime> {
    let clients = AwsClients::load(&SdkOptions::default()).await.context("loading the AWS SDK configuration")?;
    clients
        .ec2
        .describe_availability_zones()
        .send()
        .await
        .map_err(|e| karpenter_aws::sdk::api_error("DescribeAvailabilityZones", e))
        .context("checking EC2 connectivity")?;
    tracing::info!(region = %clients.region, "AWS SDK configured");

    let cluster = discovery::discover(&clients.eks_adapter(), &aws.cluster_name, &aws.cluster_endpoint)
        .await
        .context("resolving the cluster endpoint")?;
    let ca_bundle = Some(aws.cluster_ca_bundle.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| cluster.certificate_authority.clone());

    let node_classes = KubeNodeClasses::new();
    node_classes
        .start::<EC2NodeClass>(client.clone(), shutdown.clone())
        .await
        .context("listing EC2NodeClasses (is the CRD installed?)")?;

    let mut controllers: Vec<BoxFuture<'static, ()>> = Vec::new();

    let pricing = Arc::new(PricingProvider::new(
        &clients.region,
        Some(Arc::new(clients.pricing_adapter())),
        aws.isolated_vpc,
        PriceTable::default(),
    ));
    controllers.push(pricing.clone().run(clock.clone(), shutdown.clone()).boxed());

    let ec2 = Arc::new(clients.ec2_adapter());
    let apis = ResolverApis {
        subnets: ec2.clone(),
        security_groups: ec2.clone(),
        images: ec2.clone(),
        ssm: Arc::new(clients.ssm_adapter()),
        capacity_reservations: ec2.clone(),
        placement_groups: ec2.clone(),
        iam: Arc::new(clients.iam_adapter()),
    };
    let settings = ResolverSettings {
        cluster: ClusterIdentity { cluster_name: aws.cluster_name.clone(), region: clients.region.clone() },
        subnet_refresh_interval: aws.subnet_refresh_interval,
        ami_refresh_interval: aws.ami_refresh_interval,
        reserved_capacity: core.feature_gates.reserved_capacity,
    };
    let resolver = Arc::new(NodeClassResolver::new(apis, settings, clock.clone()));
    let version = Arc::new(ApiServerVersion::new(client.clone(), clock.clone()));
    let node_class_controller =
        Arc::new(NodeClassController::new(client.clone(), resolver.clone(), version, clock.clone(), ca_bundle.clone()));
    controllers.push(node_class_controller.run(shutdown.clone()).boxed());
    controllers.push(
        Arc::new(SsmInvalidationController::for_resolver(&resolver, clock.clone())).run(shutdown.clone()).boxed(),
    );
    if !aws.isolated_vpc {
        let gc = InstanceProfileGarbageCollector::new(client.clone(), resolver.instance_profiles.clone());
        controllers.push(Arc::new(gc).run(shutdown.clone()).boxed());
    }
    controllers.push(Arc::new(CapacityBlockExpiration::new(client.clone())).run(shutdown.clone()).boxed());

    let interruption: Option<Arc<dyn InterruptionSource>> = if aws.interruption_queue.trim().is_empty() {
        None
    } else {
        let source = SqsInterruptionSource::new(
            Arc::new(clients.sqs_adapter()),
            Arc::new(NodeClaimLookup::new(client.clone())),
            aws.interruption_queue.trim(),
        );
        Some(Arc::new(source))
    };

    let parts = Parts { clients, cluster, ca_bundle, resolver, pricing, node_classes: node_classes.clone() };
    let cloud_provider = cloud_provider(&parts, core, aws, client, clock, shutdown, &mut controllers)?;
    Ok(AwsRuntime { cloud_provider, node_classes: Arc::new(node_classes), interruption, controllers })
}

/// The CloudProvider over the parts.
fn cloud_provider(
    _parts: &Parts,
    _core: &CoreSettings,
    _aws: &AwsSettings,
    _client: kube::Client,
    _clock: Arc<dyn Clock>,
    _shutdown: CancellationToken,
    _controllers: &mut Vec<BoxFuture<'static, ()>>,
) -> anyhow::Result<Arc<dyn CloudProvider>> {
    anyhow::bail!(
        "the AWS CloudProvider (karpenter_aws::provider::AwsCloudProvider: launch templates, CreateFleet, instance \
         types) is not implemented yet; --provider aws cannot run"
    )
}
