//! `cloudprovider.metrics`: what the provider offers, as gauges (upstream's AWS controller of that name, here
//! for every provider). Once a minute it asks the provider for every NodePool's instance types and sets
//! `karpenter_cloudprovider_instance_type_offering_available` (1 when some NodePool sees the offering
//! available), `karpenter_cloudprovider_instance_type_offering_price_estimate` (the offering's price), and per
//! instance type `karpenter_cloudprovider_instance_type_cpu_cores` and `karpenter_cloudprovider_instance_type_memory_bytes`
//! (upstream's AWS provider sets those two from EC2's vCPU count and memory size as it builds each type; here
//! they are the type's capacity as the provider reports it, which for AWS is after the VM memory overhead).
//!
//! A NodePool whose instance types cannot be listed is skipped (the pass reports an error); the others still
//! publish, as upstream.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use karpenter_api::NodePool;
use karpenter_cloudprovider::CloudProviderError;
use karpenter_requirements::InstanceType;
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::metrics::{Metrics, ReconcileResult};

/// The controller's name, upstream's.
pub const CONTROLLER: &str = "cloudprovider.metrics";
/// How often the gauges are refreshed (upstream's requeue).
pub const INTERVAL: Duration = Duration::from_secs(60);
/// The refresh while no NodePool exists yet.
const NO_POOL_RETRY: Duration = Duration::from_secs(5);

/// Instance types of some NodePools could not be listed.
#[derive(Debug, thiserror::Error)]
#[error("listing the instance types of NodePool {node_pool}: {source}")]
pub struct OfferingMetricsError {
    pub node_pool: String,
    #[source]
    pub source: CloudProviderError,
}

/// The controller (see the module docs).
#[derive(Debug)]
pub struct CloudProviderMetrics {
    ctx: ControllerContext,
}

impl CloudProviderMetrics {
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone() }
    }

    /// One refresh; the first NodePool that failed is the error.
    pub async fn reconcile(&self) -> Result<(), OfferingMetricsError> {
        let mut first_error = None;
        let mut offerings: BTreeMap<(String, String, String), (bool, f64)> = BTreeMap::new();
        let mut types: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for pool in self.ctx.state.list_shared::<NodePool>() {
            match self.ctx.cloud.instance_types(&pool).await {
                Ok(its) => collect(&its, &mut offerings, &mut types),
                Err(source) => {
                    first_error.get_or_insert(OfferingMetricsError { node_pool: pool.name_any(), source });
                }
            }
        }
        publish(&self.ctx.metrics, &offerings, &types);
        first_error.map_or(Ok(()), Err)
    }

    /// Refreshes every [`INTERVAL`] until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let passes = self.ctx.metrics.reconciler(CONTROLLER, 1);
        loop {
            let pass = passes.pass();
            let reconciled = self.reconcile().await;
            pass.finish(ReconcileResult::of_pass(&reconciled));
            if let Err(e) = reconciled {
                tracing::warn!(controller = CONTROLLER, error = %e, "instance type metrics");
            }
            // Until the first NodePool exists there is nothing to publish: look again soon, so a new cluster's
            // first pool has its offering series within seconds rather than a full interval later.
            let next = if self.ctx.state.list_shared::<NodePool>().is_empty() { NO_POOL_RETRY } else { INTERVAL };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(next) => {}
            }
        }
    }
}

type OfferingKey = (String, String, String);

fn collect(
    its: &[InstanceType],
    offerings: &mut BTreeMap<OfferingKey, (bool, f64)>,
    types: &mut BTreeMap<String, (f64, f64)>,
) {
    for it in its {
        for o in &it.offerings {
            let key = (
                it.name.clone(),
                o.capacity_type().unwrap_or_default().to_string(),
                o.zone().unwrap_or_default().to_string(),
            );
            // Available if any NodePool sees it available; the price is the last one seen (as upstream).
            let entry = offerings.entry(key).or_insert((false, o.price));
            *entry = (entry.0 || o.available, o.price);
        }
        let capacity = it.capacity();
        let cpu = capacity.get("cpu").and_then(|q| q.milli_value()).map_or(0.0, |m| m as f64 / 1000.0);
        let memory = capacity.get("memory").and_then(|q| q.value()).map_or(0.0, |b| b as f64);
        types.insert(it.name.clone(), (cpu, memory));
    }
}

fn publish(metrics: &Metrics, offerings: &BTreeMap<OfferingKey, (bool, f64)>, types: &BTreeMap<String, (f64, f64)>) {
    for ((it, capacity_type, zone), (available, price)) in offerings {
        let available = if *available { 1.0 } else { 0.0 };
        metrics.cloudprovider_instance_type_offering_available(it, capacity_type, zone).set(available);
        metrics.cloudprovider_instance_type_offering_price_estimate(it, capacity_type, zone).set(*price);
    }
    for (it, (cpu, memory)) in types {
        metrics.cloudprovider_instance_type_cpu_cores(it).set(*cpu);
        metrics.cloudprovider_instance_type_memory_bytes(it).set(*memory);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_cloudprovider::CloudProvider;
    use karpenter_testing::apiserver::ApiServer;
    use karpenter_testing::{FakeClock, NodePoolOptions, node_pool};

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find(|l| l.starts_with(series)).map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
    }

    #[tokio::test]
    async fn every_offering_of_every_pool_is_published() {
        let server = ApiServer::new();
        let cloud = Arc::new(karpenter_testing::kwok::fake());
        let ctx = ControllerContext::for_tests(server.client(), cloud.clone(), Arc::new(FakeClock::default()));
        ctx.state.apply(node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }));
        let controller = CloudProviderMetrics::new(&ctx);
        controller.reconcile().await.unwrap();

        let its = cloud.instance_types(&ctx.state.list::<NodePool>()[0]).await.unwrap();
        let it = &its[0];
        let o = &it.offerings[0];
        let labels = format!(
            "{{instance_type=\"{}\",capacity_type=\"{}\",zone=\"{}\"}}",
            it.name,
            o.capacity_type().unwrap(),
            o.zone().unwrap()
        );
        let text = ctx.metrics.render();
        let available = sample(&text, &format!("karpenter_cloudprovider_instance_type_offering_available{labels}"));
        assert_eq!(available, Some(if o.available { 1.0 } else { 0.0 }), "{text}");
        let price = sample(&text, &format!("karpenter_cloudprovider_instance_type_offering_price_estimate{labels}"));
        assert_eq!(price, Some(o.price));
        let cpu = it.capacity().get("cpu").unwrap().milli_value().unwrap() as f64 / 1000.0;
        let cores = format!("karpenter_cloudprovider_instance_type_cpu_cores{{instance_type=\"{}\"}}", it.name);
        assert_eq!(sample(&text, &cores), Some(cpu));
        let memory = format!("karpenter_cloudprovider_instance_type_memory_bytes{{instance_type=\"{}\"}}", it.name);
        assert!(sample(&text, &memory).unwrap() > 0.0);
    }

    /// The fault path: the provider cannot list one pool's instance types; the pass fails, naming the pool.
    #[tokio::test]
    async fn a_failing_provider_fails_the_pass_and_names_the_pool() {
        let server = ApiServer::new();
        let cloud = Arc::new(karpenter_testing::kwok::fake());
        cloud.fail_next(karpenter_cloudprovider::Method::InstanceTypes, 1, || CloudProviderError::Other {
            message: "the provider is down".into(),
            source: None,
        });
        let ctx = ControllerContext::for_tests(server.client(), cloud, Arc::new(FakeClock::default()));
        ctx.state.apply(node_pool(NodePoolOptions { name: Some("default".into()), ..Default::default() }));
        let error = CloudProviderMetrics::new(&ctx).reconcile().await.unwrap_err();
        assert_eq!(error.node_pool, "default");
    }
}
