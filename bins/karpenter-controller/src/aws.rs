//! `run --provider aws` (feature `aws`): builds the AWS provider and its controllers from the settings.
//!
//! Order, as in upstream's AWS operator startup: the SDK configuration from the default chains
//! (region from `AWS_REGION`, the profile or IMDS; credentials from the environment, the profile, IRSA, EKS Pod
//! Identity or IMDS), an EC2 connectivity check, the cluster endpoint from `CLUSTER_ENDPOINT` or EKS
//! `DescribeCluster` (fatal when neither gives one), the EC2NodeClass lookup, price refresh, EC2NodeClass
//! resolution and its controllers, the CloudProvider (instance-type catalogue loaded before start, fatal on
//! failure) and the SQS interruption source when `INTERRUPTION_QUEUE` is set.
//!
//! Prices: `PRICE_FILE` (checked by [`check_price_file`] before anything else starts, then loaded for the region)
//! gives the initial prices, and in an isolated VPC the only on-demand ones; the Pricing API refresh replaces
//! them elsewhere. With no price source at all, offerings are priced by the documented estimate, logged once by
//! the refresh and published as a `PricesEstimated` Warning event on each EC2NodeClass.
//!
//! Also [`prices`], the `karpenter-controller prices` command that writes a price file.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use futures::FutureExt;
use futures::future::BoxFuture;
use karpenter_api::ec2nodeclass::EC2NodeClass;
use karpenter_aws::discovery;
use karpenter_aws::instancetype::Settings as InstanceTypeSettings;
use karpenter_aws::instancetypes::{self, SharedPrices};
use karpenter_aws::launch::instance::{ClusterInfo, LaunchFailure, LaunchFailureSink};
use karpenter_aws::nodeclass::controller::{
    ApiServerVersion, CapacityBlockExpiration, InstanceProfileGarbageCollector, NodeClassController,
    SsmInvalidationController,
};
use karpenter_aws::nodeclass::demotion::ReservationDemotion;
use karpenter_aws::nodeclass::instance_profile::ClusterIdentity;
use karpenter_aws::nodeclass::reservation::{CapacityReservationProvider, PlacementGroupProvider};
use karpenter_aws::nodeclass::{NodeClassResolver, ResolverApis, ResolverSettings};
use karpenter_aws::pricing::{PriceFile, PriceTable};
use karpenter_aws::pricing_api::{self, PricingProvider};
use karpenter_aws::provider::{AwsApis, AwsCloudProvider, AwsCloudProviderOptions};
use karpenter_aws::queue::{NodeClaimLookup, SqsInterruptionSource};
use karpenter_aws::runtime::every;
use karpenter_aws::sdk::dry_run::Ec2DryRun;
use karpenter_aws::sdk::{AwsClients, SdkOptions};
use karpenter_cloudprovider::{Clock, CloudProvider, InterruptionSource, NodeClassLookup, SystemClock, TokioSleeper};
use karpenter_operator::metrics::Metrics;
use karpenter_operator::node_classes::KubeNodeClasses;
use karpenter_operator::settings::{AwsSettings, CoreSettings};
use tokio_util::sync::CancellationToken;

use crate::PricesArgs;

/// How often unused launch templates are deleted (their cache keeps them one minute).
const LAUNCH_TEMPLATE_GC_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// What the AWS provider hands the controller manager.
pub struct AwsRuntime {
    /// The CloudProvider.
    pub cloud_provider: Arc<dyn CloudProvider>,
    /// The EC2NodeClasses, kept current by a watcher.
    pub node_classes: Arc<dyn NodeClassLookup>,
    /// The SQS interruption source, when `INTERRUPTION_QUEUE` is set.
    pub interruption: Option<Arc<dyn InterruptionSource>>,
    /// AWS-side controllers (node class status and finalizer, SSM invalidation, instance-profile GC, capacity
    /// blocks, price and instance-type refresh, launch-template GC); each runs until the token passed to
    /// [`start`] fires.
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

/// Builds the AWS runtime (see the module docs).
pub async fn start(
    core: &CoreSettings,
    aws: &AwsSettings,
    client: kube::Client,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
) -> anyhow::Result<AwsRuntime> {
    let clients = AwsClients::load(&SdkOptions::default()).await.context("loading the AWS SDK configuration")?;
    let zones_out = clients
        .ec2
        .describe_availability_zones()
        .send()
        .await
        .map_err(|e| karpenter_aws::sdk::api_error("DescribeAvailabilityZones", e))
        .context("checking EC2 connectivity")?;
    let zones: Vec<String> =
        zones_out.availability_zones().iter().filter_map(|z| z.zone_name()).map(str::to_owned).collect();
    tracing::info!(region = %clients.region, zones = ?zones, "AWS SDK configured");

    let cluster = discovery::discover(&clients.eks_adapter(), &aws.cluster_name, &aws.cluster_endpoint)
        .await
        .context("resolving the cluster endpoint")?;
    let ca_bundle = Some(aws.cluster_ca_bundle.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| cluster.certificate_authority.clone());
    let dns_ip = kube_dns_ip(&client).await;

    let node_classes = KubeNodeClasses::new();
    node_classes
        .start::<EC2NodeClass>(client.clone(), shutdown.clone())
        .await
        .context("listing EC2NodeClasses (is the CRD installed?)")?;
    let lookup: Arc<dyn NodeClassLookup> = Arc::new(node_classes);

    let mut controllers: Vec<BoxFuture<'static, ()>> = Vec::new();
    let ec2 = Arc::new(clients.ec2_adapter());

    // Prices: the operator's file (if any) first, then refreshed every 12 h into the prices the instance-type
    // provider reads.
    let initial = initial_prices(aws, &clients.region)?;
    let pricing = Arc::new(PricingProvider::new(
        &clients.region,
        Some(Arc::new(clients.pricing_adapter())),
        aws.isolated_vpc,
        initial,
    ));
    pricing.refresh(clock.now()).await;
    let prices = SharedPrices::new(pricing.price_source(&zones));
    {
        let (pricing, prices, clock, zones) = (pricing.clone(), prices.clone(), clock.clone(), zones.clone());
        controllers.push(
            every(pricing_api::REFRESH_INTERVAL, shutdown.clone(), move || {
                let (pricing, prices, clock, zones) = (pricing.clone(), prices.clone(), clock.clone(), zones.clone());
                async move {
                    pricing.refresh(clock.now()).await;
                    prices.set(pricing.price_source(&zones));
                }
            })
            .boxed(),
        );
    }

    // The CloudProvider (launch templates, CreateFleet, instances, instance types).
    let mut options = AwsCloudProviderOptions::new(
        ClusterInfo {
            name: aws.cluster_name.clone(),
            endpoint: cluster.endpoint.clone(),
            ca_bundle: ca_bundle.clone(),
            service_cidr: cluster.service_cidr().map(str::to_owned),
            dns_ip,
        },
        &clients.region,
    );
    // Launch templates' capacity-reservation preference and described instances' capacity type follow the gate.
    options.reserved_capacity = core.feature_gates.reserved_capacity;
    options.instance_types.settings = InstanceTypeSettings {
        vm_memory_overhead_percent: aws.vm_memory_overhead_percent,
        reserved_enis: i64::from(aws.reserved_enis),
    };
    // Shared with the node class resolver: its describes seed the reservation counts launches then track, and
    // launches resolve placement groups through its cache.
    let placement_groups = Arc::new(PlacementGroupProvider::new(ec2.clone(), clock.clone()));
    let capacity_reservations = Arc::new(CapacityReservationProvider::new(ec2.clone(), clock.clone()));
    let provider = AwsCloudProvider::new(
        AwsApis { fleet: ec2.clone(), launch_templates: ec2.clone(), instance_types: ec2.clone() },
        lookup.clone(),
        clock.clone(),
        Arc::new(TokioSleeper),
        prices,
        options,
    )
    .with_placement_groups(placement_groups.clone())
    .with_capacity_reservations(capacity_reservations.clone())
    .with_launch_failure_sink(Arc::new(PrometheusLaunchFailures(metrics)));
    let types = provider.instance_type_provider().refresh().await.context("fetching the instance-type catalogue")?;
    tracing::info!(instance_types = types, "instance-type catalogue loaded");
    match provider.launch_templates().hydrate().await {
        Ok(n) => tracing::info!(launch_templates = n, "launch-template cache hydrated"),
        Err(e) => tracing::warn!(error = %e, "hydrating the launch-template cache failed"),
    }
    {
        let p = provider.clone();
        controllers.push(
            every(instancetypes::REFRESH_INTERVAL, shutdown.clone(), move || {
                let p = p.clone();
                async move {
                    if let Err(e) = p.instance_type_provider().refresh().await {
                        tracing::warn!(error = %e, "refreshing the instance-type catalogue failed");
                    }
                }
            })
            .boxed(),
        );
        let p = provider.clone();
        controllers.push(
            every(LAUNCH_TEMPLATE_GC_INTERVAL, shutdown.clone(), move || {
                let p = p.clone();
                async move {
                    p.launch_templates().delete_expired().await;
                }
            })
            .boxed(),
        );
    }

    // Post-registration tagging (Name, karpenter.sh/nodeclaim, eks:eks-cluster-name once the node registered).
    controllers.push(
        Arc::new(karpenter_aws::tagging::TaggingController::new(
            client.clone(),
            Arc::new(provider.clone()),
            aws.cluster_name.clone(),
        ))
        .run(shutdown.clone())
        .boxed(),
    );

    // EC2NodeClass resolution and its controllers.
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
    let mut resolver = NodeClassResolver::new(apis, settings, clock.clone());
    resolver.placement_groups = placement_groups;
    resolver.capacity_reservations = capacity_reservations;
    if !aws.disable_dry_run {
        resolver = resolver.with_authorization_check(Arc::new(Ec2DryRun::new(clients.ec2.clone())));
    }
    // Launches choose subnets by the free-IP counts the resolver describes.
    resolver.subnets.share_ips(provider.instance_provider().subnet_ips());
    let resolver = Arc::new(resolver);
    let version = Arc::new(ApiServerVersion::new(client.clone(), clock.clone()));
    let node_class_controller =
        NodeClassController::new(client.clone(), resolver.clone(), version, clock.clone(), ca_bundle.clone())
            .with_launch_template_cleanup(Arc::new(provider.launch_templates().clone()))
            .with_price_estimate_warning(pricing.clone());
    controllers.push(Arc::new(node_class_controller).run(shutdown.clone()).boxed());
    let ssm_invalidation = SsmInvalidationController::for_resolver(&resolver, clock.clone());
    controllers.push(Arc::new(ssm_invalidation).run(shutdown.clone()).boxed());
    if !aws.isolated_vpc {
        let gc = InstanceProfileGarbageCollector::new(client.clone(), resolver.instance_profiles.clone());
        controllers.push(Arc::new(gc).run(shutdown.clone()).boxed());
    }
    controllers.push(Arc::new(CapacityBlockExpiration::new(client.clone())).run(shutdown.clone()).boxed());
    if core.feature_gates.reserved_capacity {
        // Reserved capacity whose reservation ended runs on as on-demand: relabel its NodeClaims and Nodes.
        let demotion = ReservationDemotion::new(client.clone(), provider.instance_provider().clone(), clock.clone());
        controllers.push(Arc::new(demotion).run(shutdown.clone()).boxed());
    }

    // Interruption: the SQS queue; spot and reservation interruptions mark their offerings unavailable.
    let interruption: Option<Arc<dyn InterruptionSource>> = if aws.interruption_queue.trim().is_empty() {
        None
    } else {
        let source = SqsInterruptionSource::new(
            Arc::new(clients.sqs_adapter()),
            Arc::new(NodeClaimLookup::new(client.clone())),
            aws.interruption_queue.trim(),
        )
        .with_hook(Arc::new(provider.clone()));
        Some(Arc::new(source))
    };

    Ok(AwsRuntime { cloud_provider: Arc::new(provider), node_classes: lookup, interruption, controllers })
}

/// Reads and checks `PRICE_FILE` (when set) before the controller starts, so a malformed file stops it at once
/// with an error naming the file; the region check follows in [`start`], once the region is known.
pub fn check_price_file(aws: &AwsSettings) -> anyhow::Result<()> {
    if let Some(path) = price_file_path(aws) {
        PriceFile::read(path).context("PRICE_FILE")?;
    }
    Ok(())
}

fn price_file_path(aws: &AwsSettings) -> Option<&Path> {
    Some(aws.price_file.trim()).filter(|p| !p.is_empty()).map(Path::new)
}

/// The prices to start from: the region's part of `PRICE_FILE`, or none (the Pricing API's first refresh, else
/// the estimate).
fn initial_prices(aws: &AwsSettings, region: &str) -> anyhow::Result<PriceTable> {
    let Some(path) = price_file_path(aws) else { return Ok(PriceTable::default()) };
    let table = PriceFile::load_region(path, region).context("PRICE_FILE")?;
    tracing::info!(file = %path.display(), region, on_demand = table.on_demand.len(),
        spot_types = table.spot.len(), isolated_vpc = aws.isolated_vpc, "price file loaded");
    Ok(table)
}

/// `karpenter-controller prices`: every region's prices from the Pricing API (and spot prices with
/// `--include-spot`), merged into one file written whole (a temporary file renamed over FILE) or to stdout.
pub fn prices(args: &PricesArgs) -> anyhow::Result<ExitCode> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the tokio runtime")?;
    let file = runtime.block_on(fetch_prices(args, &SystemClock))?;
    let json = file.to_json();
    if args.output.as_os_str() == "-" {
        std::io::stdout().lock().write_all(json.as_bytes()).context("writing to stdout")?;
    } else {
        write_whole(&args.output, json.as_bytes())?;
    }
    for region in &args.regions {
        let table = file.region(region);
        let spot: usize = table.spot.values().map(|z| z.len()).sum();
        eprintln!(
            "{region}: {} on-demand prices{}",
            table.on_demand.len(),
            if args.include_spot { format!(", {spot} spot prices") } else { String::new() }
        );
    }
    if args.output.as_os_str() != "-" {
        eprintln!("wrote {}", args.output.display());
    }
    Ok(ExitCode::SUCCESS)
}

async fn fetch_prices(args: &PricesArgs, clock: &dyn Clock) -> anyhow::Result<PriceFile> {
    let mut file = PriceFile::default();
    for region in &args.regions {
        let options = SdkOptions { region: Some(region.clone()), ..Default::default() };
        let clients = AwsClients::load(&options).await.context("loading the AWS SDK configuration")?;
        let spot_since = args.include_spot.then(|| clock.now());
        let prices = pricing_api::fetch_price_file(&clients.pricing_adapter(), region, spot_since)
            .await
            .with_context(|| format!("pricing {region}"))?;
        file.set_region(region, prices.region(region));
    }
    Ok(file)
}

/// Writes `bytes` to a temporary file next to `path` and renames it over `path`.
fn write_whole(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// `karpenter_cloudprovider_instance_launch_failures_total`, counted from the instance provider's launch failures.
struct PrometheusLaunchFailures(Arc<Metrics>);

impl std::fmt::Debug for PrometheusLaunchFailures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrometheusLaunchFailures")
    }
}

impl LaunchFailureSink for PrometheusLaunchFailures {
    fn launch_failed(&self, failure: &LaunchFailure) {
        self.0
            .cloudprovider_instance_launch_failures(
                &failure.zone,
                &failure.zone_id,
                &failure.capacity_type,
                &failure.reason,
            )
            .inc();
    }
}

/// The kube-dns service IP (nodes' default cluster DNS), when the cluster has that service.
async fn kube_dns_ip(client: &kube::Client) -> Option<String> {
    let services: kube::Api<k8s_openapi::api::core::v1::Service> = kube::Api::namespaced(client.clone(), "kube-system");
    match services.get_opt("kube-dns").await {
        Ok(service) => service.and_then(|s| s.spec?.cluster_ip).filter(|ip| !ip.is_empty() && ip != "None"),
        Err(e) => {
            tracing::info!(error = %e, "reading the kube-dns service failed; nodes use their default cluster DNS");
            None
        }
    }
}
