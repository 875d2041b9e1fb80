//! The AWS provider assembled in one call ([`start`]): the CloudProvider, the AWS-side controllers and the SQS
//! interruption source, built from [`AwsSettings`] and the SDK's default configuration. The binary
//! (`karpenter-controller run --provider aws`) hands what it owns (the Kubernetes client, the clock, the shutdown
//! token, the EC2NodeClass watcher and its metrics sink) and gets back what the controller manager runs.
//!
//! The order follows upstream's AWS operator startup: the SDK configuration from the default chains (region from
//! `AWS_REGION`, the profile or IMDS; credentials from the environment, the profile, IRSA, EKS Pod Identity or
//! IMDS); an EC2 connectivity check; the cluster endpoint from `CLUSTER_ENDPOINT` or EKS `DescribeCluster`
//! (fatal when neither gives one); the price refresh; the CloudProvider, whose instance-type catalogue is loaded
//! before [`start`] returns (fatal on failure); the EC2NodeClass resolver and its controllers; the interruption
//! queue when `INTERRUPTION_QUEUE` is set; the instance status checks.
//!
//! Prices: `PRICE_FILE` gives the initial prices, and in an isolated VPC the only on-demand ones; the Pricing API
//! refresh replaces them elsewhere. With no price source at all offerings are priced by the documented estimate,
//! logged by the refresh and published as a `PricesEstimated` Warning event on each EC2NodeClass.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use karpenter_cloudprovider::{Clock, CloudProvider, InterruptionSource, NodeClassLookup, TokioSleeper};
use tokio_util::sync::CancellationToken;

use crate::api_error::AwsApiError;
use crate::discovery::{self, DiscoveryError};
use crate::instancetype::Settings as InstanceTypeSettings;
use crate::instancetypes::{self, SharedPrices};
use crate::launch::instance::ClusterInfo;
use crate::nodeclass::controller::{
    CapacityBlockExpiration, InstanceProfileGarbageCollector, NodeClassController, SsmInvalidationController,
    kubernetes_version_source,
};
use crate::nodeclass::demotion::ReservationDemotion;
use crate::nodeclass::instance_profile::ClusterIdentity;
use crate::nodeclass::reservation::{CapacityReservationProvider, PlacementGroupProvider};
use crate::nodeclass::{NodeClassResolver, ResolverApis, ResolverSettings};
use crate::pricing::{PriceFile, PriceFileError};
use crate::pricing_api::{self, FetchPricesError, PricingProvider};
use crate::provider::{AwsApis, AwsCloudProvider, AwsCloudProviderOptions};
use crate::queue::{NodeClaimLookup, SqsInterruptionSource};
use crate::runtime::{every, timed_pass};

/// Upstream's name of the instance-type catalogue's refresh loop (the `controller` label of its series).
const INSTANCE_TYPE_REFRESH: &str = "providers.instancetype";
/// Upstream's name of the price refresh loop (the `controller` label of its series).
const PRICE_REFRESH: &str = "providers.pricing";
use crate::sdk::dry_run::Ec2DryRun;
use crate::sdk::{AwsClients, SdkLoadError, SdkOptions};
use crate::settings::AwsSettings;
use crate::status::InstanceStatusSource;

/// How often unused launch templates are deleted (their cache keeps them one minute).
const LAUNCH_TEMPLATE_GC_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// What the binary hands [`start`].
pub struct AwsStart<'a> {
    /// The AWS settings (already validated: [`AwsSettings::validate`]).
    pub settings: &'a AwsSettings,
    /// The `ReservedCapacity` core feature gate: launch templates' capacity-reservation preference, described
    /// instances' capacity type, reservation resolution and the reserved-to-on-demand demotion follow it.
    pub reserved_capacity: bool,
    /// The Kubernetes client the AWS controllers use.
    pub client: kube::Client,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Stops the AWS controllers.
    pub shutdown: CancellationToken,
    /// The EC2NodeClasses, kept current by the caller's watcher.
    pub node_classes: Arc<dyn NodeClassLookup>,
    /// The registry the provider records its own families into (launch and termination failures, the EC2
    /// request batchers, the interruption queue's messages, unhealthy instances; `karpenter_aws::metrics`).
    pub metrics: Arc<karpenter_runtime::metrics::Metrics>,
}

impl std::fmt::Debug for AwsStart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsStart")
            .field("settings", self.settings)
            .field("reserved_capacity", &self.reserved_capacity)
            .finish_non_exhaustive()
    }
}

/// What [`start`] returns to the controller manager.
pub struct AwsRuntime {
    /// The CloudProvider.
    pub cloud_provider: Arc<dyn CloudProvider>,
    /// The SQS interruption source, when `INTERRUPTION_QUEUE` is set.
    pub interruption: Option<Arc<dyn InterruptionSource>>,
    /// The instance status checks (every minute `DescribeInstanceStatus`), an interruption source of their own
    /// that needs no queue.
    pub instance_status: Arc<dyn InterruptionSource>,
    /// The AWS-side controllers (node class status and finalizer, SSM invalidation, instance-profile GC, capacity
    /// blocks, reserved-capacity demotion, post-registration tagging, price and instance-type refresh,
    /// launch-template GC); each runs until the shutdown token fires.
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

/// Why the AWS provider could not start; each is fatal for `run --provider aws`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error("loading the AWS SDK configuration: {0}")]
    Sdk(#[from] SdkLoadError),
    #[error("checking EC2 connectivity: {0}")]
    Connectivity(#[source] AwsApiError),
    #[error("resolving the cluster endpoint: {0}")]
    Cluster(#[from] DiscoveryError),
    #[error("PRICE_FILE: {0}")]
    PriceFile(#[from] PriceFileError),
    #[error("fetching the instance-type catalogue: {0}")]
    Catalogue(#[source] AwsApiError),
}

/// Builds the AWS provider (see the module docs); `sdk` is [`SdkOptions::default`] in production (the default
/// chains) and points at an emulator in tests.
pub async fn start(start: AwsStart<'_>, sdk: &SdkOptions) -> Result<AwsRuntime, StartError> {
    let clients = AwsClients::load(sdk).await?;
    let (zones, zone_names) = availability_zones(&clients).await?;
    let mut assembly = Assembly { start, clients, controllers: Vec::new() };
    let (cluster, cluster_arn) = assembly.cluster_info().await?;
    let ca_bundle = cluster.ca_bundle.clone();
    let service_cidr = cluster.service_cidr.clone();
    let pricing = assembly.pricing().await?;
    let prices = SharedPrices::new(pricing.price_source(&zones));
    assembly.price_loop(&pricing, &prices, &zones);
    let (provider, shared) = assembly.cloud_provider(cluster, prices).await?;
    assembly.node_class_controllers(&provider, shared, pricing, ca_bundle, service_cidr);
    assembly.zonal_shift(&provider, cluster_arn, zone_names);
    let interruption = assembly.interruption_source(&provider);
    let instance_status = assembly.instance_status();
    Ok(AwsRuntime {
        cloud_provider: Arc::new(provider),
        interruption,
        instance_status,
        controllers: assembly.controllers,
    })
}

/// The region's zone names, and zone id -> name (ARC names zones by id); the first call to EC2, so a provider
/// without EC2 access fails here, at once.
async fn availability_zones(
    clients: &AwsClients,
) -> Result<(Vec<String>, std::collections::BTreeMap<String, String>), StartError> {
    let zones = clients
        .ec2
        .describe_availability_zones()
        .send()
        .await
        .map_err(|e| crate::sdk::api_error("DescribeAvailabilityZones", e))
        .map_err(StartError::Connectivity)?;
    let names: Vec<String> =
        zones.availability_zones().iter().filter_map(|z| z.zone_name()).map(str::to_owned).collect();
    let by_id = zones
        .availability_zones()
        .iter()
        .filter_map(|z| Some((z.zone_id()?.to_owned(), z.zone_name()?.to_owned())))
        .collect();
    tracing::info!(region = %clients.region, zones = ?names, "AWS SDK configured");
    Ok((names, by_id))
}

/// The caches the CloudProvider and the EC2NodeClass resolver share: the resolver's describes seed the
/// reservation counts launches then track, and launches resolve placement groups through its cache.
struct SharedCaches {
    placement_groups: Arc<PlacementGroupProvider>,
    capacity_reservations: Arc<CapacityReservationProvider>,
}

/// The state of one [`start`]: what the binary handed in, the SDK clients and the controllers built so far.
struct Assembly<'a> {
    start: AwsStart<'a>,
    clients: AwsClients,
    controllers: Vec<BoxFuture<'static, ()>>,
}

impl Assembly<'_> {
    fn settings(&self) -> &AwsSettings {
        self.start.settings
    }

    /// What nodes need to join: the endpoint (configured or discovered), the CA bundle (configured, else
    /// EKS's), the service CIDR and the cluster DNS IP.
    async fn cluster_info(&self) -> Result<(ClusterInfo, Option<String>), StartError> {
        let aws = self.settings();
        let cluster =
            discovery::discover(&self.clients.eks_adapter(), &aws.cluster_name, &aws.cluster_endpoint).await?;
        let ca_bundle = Some(aws.cluster_ca_bundle.trim().to_owned())
            .filter(|s| !s.is_empty())
            .or_else(|| cluster.certificate_authority.clone());
        let info = ClusterInfo {
            name: aws.cluster_name.clone(),
            endpoint: cluster.endpoint.clone(),
            ca_bundle,
            service_cidr: cluster.service_cidr().map(str::to_owned),
            dns_ip: crate::discovery::kube_dns_ip(&self.start.client).await,
        };
        Ok((info, cluster.arn))
    }

    /// `ENABLE_ZONAL_SHIFT`: the ARC watcher of the cluster (`crate::zonalshift`), named by the ARN
    /// `eks:DescribeCluster` gave; without it the setting cannot work, which a warning says.
    fn zonal_shift(
        &mut self,
        provider: &AwsCloudProvider,
        cluster_arn: Option<String>,
        zone_names: std::collections::BTreeMap<String, String>,
    ) {
        if !self.settings().enable_zonal_shift {
            return;
        }
        let Some(arn) = cluster_arn else {
            tracing::warn!(cluster = %self.settings().cluster_name,
                "ENABLE_ZONAL_SHIFT is on but eks:DescribeCluster gave no cluster ARN; zonal shifts are not watched");
            return;
        };
        let events = crate::nodeclass::controller::NodeClassZonalShiftEvents::new(
            self.start.client.clone(),
            self.start.clock.clone(),
        );
        let watcher = Arc::new(
            crate::zonalshift::ZonalShiftWatcher::new(
                Arc::new(self.clients.zonal_shift_adapter()),
                arn,
                zone_names,
                provider.unavailable_offerings().clone(),
                Arc::new(events),
            )
            .with_metrics(&self.start.metrics),
        );
        self.controllers.push(watcher.run(Arc::new(TokioSleeper), self.start.shutdown.clone()).boxed());
    }

    /// Prices: the operator's file (if any) first, then the Pricing API's first refresh (the later ones are
    /// [`Assembly::price_loop`]).
    async fn pricing(&self) -> Result<Arc<PricingProvider>, StartError> {
        let aws = self.start.settings;
        let initial = aws.initial_prices(&self.clients.region)?;
        let pricing = Arc::new(PricingProvider::new(
            &self.clients.region,
            Some(Arc::new(self.clients.pricing_adapter())),
            aws.isolated_vpc,
            initial,
        ));
        pricing.refresh(self.start.clock.now()).await;
        Ok(pricing)
    }

    /// The CloudProvider (launch templates, CreateFleet, instances, instance types) with its catalogue loaded,
    /// and its periodic loops ([`Assembly::provider_loops`]).
    async fn cloud_provider(
        &mut self,
        cluster: ClusterInfo,
        prices: SharedPrices,
    ) -> Result<(AwsCloudProvider, SharedCaches), StartError> {
        let aws = self.start.settings;
        let clock = self.start.clock.clone();
        let ec2 = Arc::new(self.clients.ec2_adapter());
        let mut options = AwsCloudProviderOptions::new(cluster, &self.clients.region);
        // Launch templates' capacity-reservation preference and described instances' capacity type follow the
        // gate.
        options.reserved_capacity = self.start.reserved_capacity;
        options.reboot_for_repair = aws.decisions.aws_feature_gates.reboot_for_repair;
        options.instance_types.node_class_cel = aws.decisions.aws_feature_gates.node_class_cel;
        options.instance_types.dra =
            crate::dynamic_resources::DraTemplates::from_gates(&aws.decisions.aws_feature_gates);
        options.instance_types.settings = InstanceTypeSettings {
            vm_memory_overhead_percent: aws.vm_memory_overhead_percent,
            reserved_enis: i64::from(aws.reserved_enis),
        };
        let shared = SharedCaches {
            placement_groups: Arc::new(PlacementGroupProvider::new(ec2.clone(), clock.clone())),
            capacity_reservations: Arc::new(CapacityReservationProvider::new(ec2.clone(), clock.clone())),
        };
        let provider = AwsCloudProvider::new(
            AwsApis { fleet: ec2.clone(), launch_templates: ec2.clone(), instance_types: ec2 },
            self.start.node_classes.clone(),
            clock,
            Arc::new(TokioSleeper),
            prices,
            options,
        )
        .with_placement_groups(shared.placement_groups.clone())
        .with_capacity_reservations(shared.capacity_reservations.clone())
        .with_metrics(self.start.metrics.clone());
        let types = provider.instance_type_provider().refresh().await.map_err(StartError::Catalogue)?;
        tracing::info!(instance_types = types, "instance-type catalogue loaded");
        match provider.launch_templates().hydrate().await {
            Ok(n) => tracing::info!(launch_templates = n, "launch-template cache hydrated"),
            Err(e) => tracing::warn!(error = %e, "hydrating the launch-template cache failed"),
        }
        self.provider_loops(&provider);
        Ok((provider, shared))
    }

    /// The provider's periodic loops: catalogue refresh, launch-template GC, and the tagging of
    /// registered instances (Name, karpenter.sh/nodeclaim, eks:eks-cluster-name).
    fn provider_loops(&mut self, provider: &AwsCloudProvider) {
        let shutdown = self.start.shutdown.clone();
        let p = provider.clone();
        // Upstream's `providers.instancetype` singleton: its passes counted as reconciles.
        let series = self.start.metrics.reconciler(INSTANCE_TYPE_REFRESH, 1);
        self.controllers.push(
            every(instancetypes::REFRESH_INTERVAL, shutdown.clone(), move || {
                let (p, series) = (p.clone(), series.clone());
                async move {
                    if let Err(e) = timed_pass(Some(&series), p.instance_type_provider().refresh()).await {
                        tracing::warn!(error = %e, "refreshing the instance-type catalogue failed");
                    }
                }
            })
            .boxed(),
        );
        let p = provider.clone();
        self.controllers.push(
            every(LAUNCH_TEMPLATE_GC_INTERVAL, shutdown.clone(), move || {
                let p = p.clone();
                async move {
                    p.launch_templates().delete_expired().await;
                }
            })
            .boxed(),
        );
        let mut tagging = crate::tagging::TaggingController::new(
            self.start.client.clone(),
            Arc::new(provider.clone()),
            self.settings().cluster_name.clone(),
        )
        .with_metrics(&self.start.metrics);
        if self.settings().enable_zonal_shift {
            tagging = tagging.with_zonal_shifts(provider.unavailable_offerings().clone());
        }
        self.controllers.push(Arc::new(tagging).run(shutdown).boxed());
    }

    /// The price refresh loop: every 12 h the Pricing API (or the price file) into the prices launches read.
    fn price_loop(&mut self, pricing: &Arc<PricingProvider>, prices: &SharedPrices, zones: &[String]) {
        let (pricing, prices, clock, zones) =
            (pricing.clone(), prices.clone(), self.start.clock.clone(), zones.to_vec());
        // Upstream's `providers.pricing` singleton: its passes counted as reconciles (a failed price fetch keeps
        // the last prices and is logged by the pricing provider, so every pass ends as a requeue).
        let series = self.start.metrics.reconciler(PRICE_REFRESH, 1);
        self.controllers.push(
            every(pricing_api::REFRESH_INTERVAL, self.start.shutdown.clone(), move || {
                let (pricing, prices, clock, zones) = (pricing.clone(), prices.clone(), clock.clone(), zones.clone());
                let series = series.clone();
                async move {
                    let pass = async {
                        pricing.refresh(clock.now()).await;
                        prices.set(pricing.price_source(&zones));
                        Ok::<(), std::convert::Infallible>(())
                    };
                    let _ = timed_pass(Some(&series), pass).await;
                }
            })
            .boxed(),
        );
    }

    /// EC2NodeClass resolution and its controllers: status and finalizer, SSM invalidation, instance-profile GC
    /// (not in an isolated VPC: IAM has no VPC endpoint), capacity-block expiration and, with reserved capacity,
    /// the demotion of NodeClaims whose reservation ended.
    fn node_class_controllers(
        &mut self,
        provider: &AwsCloudProvider,
        shared: SharedCaches,
        pricing: Arc<PricingProvider>,
        ca_bundle: Option<String>,
        service_cidr: Option<String>,
    ) {
        let aws = self.start.settings;
        let (client, clock, shutdown) = (&self.start.client, &self.start.clock, &self.start.shutdown);
        let ec2 = Arc::new(self.clients.ec2_adapter());
        let apis = ResolverApis {
            subnets: ec2.clone(),
            security_groups: ec2.clone(),
            images: ec2.clone(),
            ssm: Arc::new(self.clients.ssm_adapter()),
            capacity_reservations: ec2.clone(),
            placement_groups: ec2,
            iam: Arc::new(self.clients.iam_adapter()),
        };
        let settings = ResolverSettings {
            cluster: ClusterIdentity { cluster_name: aws.cluster_name.clone(), region: self.clients.region.clone() },
            subnet_refresh_interval: aws.subnet_refresh_interval,
            ami_refresh_interval: aws.ami_refresh_interval,
            security_group_refresh_interval: aws.security_group_refresh_interval,
            reserved_capacity: self.start.reserved_capacity,
            service_cidr,
        };
        let mut resolver = NodeClassResolver::new(apis, settings, clock.clone());
        resolver.placement_groups = shared.placement_groups;
        resolver.capacity_reservations = shared.capacity_reservations;
        if !aws.disable_dry_run {
            resolver = resolver
                .with_authorization_check(Arc::new(Ec2DryRun::new(self.clients.ec2.clone(), aws.cluster_name.clone())));
        }
        // Validation evaluates kubelet CEL expressions against the provider's catalogue (and its NodeClassCEL gate).
        resolver = resolver.with_instance_types(provider.instance_type_provider().clone());
        // Launches choose subnets by the free-IP counts the resolver describes.
        resolver.subnets.share_ips(provider.instance_provider().subnet_ips());
        let resolver = Arc::new(resolver);
        let eks: Arc<dyn discovery::EksApi> = Arc::new(self.clients.eks_adapter());
        let version =
            kubernetes_version_source(aws.eks_control_plane, client.clone(), eks, &aws.cluster_name, clock.clone());
        let metrics = &*self.start.metrics;
        let status = NodeClassController::new(client.clone(), resolver.clone(), version, clock.clone(), ca_bundle)
            .with_launch_template_cleanup(Arc::new(provider.launch_templates().clone()))
            .with_price_estimate_warning(pricing)
            .with_metrics(metrics);
        let mut controllers = vec![
            Arc::new(status).run(shutdown.clone()).boxed(),
            Arc::new(SsmInvalidationController::for_resolver(&resolver, clock.clone()).with_metrics(metrics))
                .run(shutdown.clone())
                .boxed(),
            Arc::new(CapacityBlockExpiration::new(client.clone()).with_metrics(metrics)).run(shutdown.clone()).boxed(),
        ];
        if !aws.isolated_vpc {
            let gc = InstanceProfileGarbageCollector::new(client.clone(), resolver.instance_profiles.clone())
                .with_metrics(metrics);
            controllers.push(Arc::new(gc).run(shutdown.clone()).boxed());
        }
        if self.start.reserved_capacity {
            // Reserved capacity whose reservation ended runs on as on-demand: relabel its NodeClaims and Nodes.
            let demotion =
                ReservationDemotion::new(client.clone(), provider.instance_provider().clone(), clock.clone())
                    .with_metrics(metrics);
            controllers.push(Arc::new(demotion).run(shutdown.clone()).boxed());
        }
        self.controllers.extend(controllers);
    }

    /// The instance status checks, finding NodeClaims as the queue does.
    fn instance_status(&self) -> Arc<dyn InterruptionSource> {
        let source = InstanceStatusSource::new(
            Arc::new(self.clients.ec2_adapter()),
            Arc::new(NodeClaimLookup::new(self.start.client.clone())),
            self.start.clock.clone(),
            Arc::new(TokioSleeper),
        )
        .with_metrics(self.start.metrics.clone());
        Arc::new(source)
    }

    /// The SQS interruption source when `INTERRUPTION_QUEUE` is set; spot and reservation interruptions mark
    /// their offerings unavailable through the provider.
    fn interruption_source(&self, provider: &AwsCloudProvider) -> Option<Arc<dyn InterruptionSource>> {
        let queue = self.settings().interruption_queue.trim();
        if queue.is_empty() {
            return None;
        }
        let source = SqsInterruptionSource::new(
            Arc::new(self.clients.sqs_adapter()),
            Arc::new(NodeClaimLookup::new(self.start.client.clone())),
            queue,
        )
        .with_hook(Arc::new(provider.clone()))
        .with_metrics(self.start.metrics.clone(), self.start.clock.clone());
        Some(Arc::new(source))
    }
}

/// The price file of each of `regions` from the Pricing API (and with `spot_since` the spot prices since then),
/// merged into one, as `karpenter-controller prices` writes it.
pub async fn fetch_prices(
    regions: &[String],
    spot_since: Option<chrono::DateTime<chrono::Utc>>,
) -> Result<PriceFile, FetchPricesFailed> {
    let mut file = PriceFile::default();
    for region in regions {
        let options = SdkOptions { region: Some(region.clone()), ..Default::default() };
        let clients = AwsClients::load(&options).await?;
        let prices = pricing_api::fetch_price_file(&clients.pricing_adapter(), region, spot_since)
            .await
            .map_err(|source| FetchPricesFailed::Region { region: region.clone(), source })?;
        file.set_region(region, prices.region(region));
    }
    Ok(file)
}

/// `karpenter-controller catalogue`: one region's AWS catalogue (`crate::catalogue`) from EC2
/// (`DescribeInstanceTypes`, `DescribeInstanceTypeOfferings` by zone, through the SDK adapter the provider uses)
/// with the region's prices from the Pricing API ([`fetch_prices`]; spot prices too with `spot_since`).
pub async fn fetch_catalogue(
    region: &str,
    spot_since: Option<chrono::DateTime<chrono::Utc>>,
    description: &str,
) -> Result<crate::catalogue::CatalogueFile, FetchCatalogueFailed> {
    let options = SdkOptions { region: Some(region.to_owned()), ..Default::default() };
    let clients = AwsClients::load(&options).await.map_err(FetchPricesFailed::Sdk)?;
    let prices = fetch_prices(&[region.to_owned()], spot_since).await?;
    let mut file = crate::catalogue::from_api(&clients.ec2_adapter(), region, prices, description).await?;
    let zone_ids = zone_ids(&clients).await?;
    if !zone_ids.is_empty() {
        file.zone_ids.insert(region.to_owned(), zone_ids);
    }
    Ok(file)
}

/// The region's zone names with their zone ids (`us-east-1a` -> `use1-az4`): an account's zone names map to
/// physical zones differently from another account's, so the file records the pairing of the account it came from.
async fn zone_ids(clients: &AwsClients) -> Result<std::collections::BTreeMap<String, String>, AwsApiError> {
    let zones = clients
        .ec2
        .describe_availability_zones()
        .send()
        .await
        .map_err(|e| crate::sdk::api_error("DescribeAvailabilityZones", e))?;
    Ok(zones
        .availability_zones()
        .iter()
        .filter_map(|z| Some((z.zone_name()?.to_owned(), z.zone_id()?.to_owned())))
        .collect())
}

/// Why [`fetch_catalogue`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchCatalogueFailed {
    #[error(transparent)]
    Prices(#[from] FetchPricesFailed),
    #[error("describing instance types: {0}")]
    Ec2(#[from] crate::api_error::AwsApiError),
}

/// Why [`fetch_prices`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchPricesFailed {
    #[error("loading the AWS SDK configuration: {0}")]
    Sdk(#[from] SdkLoadError),
    #[error("pricing {region}: {source}")]
    Region {
        region: String,
        #[source]
        source: FetchPricesError,
    },
}
