//! Glue between the halves the controller binary assembles (its `aws` feature): the launch side's
//! [`LaunchTemplateProvider`] as the node class finalizer's [`LaunchTemplateCleanup`], and the periodic loops of
//! the AWS-side controllers that have no controller type of their own.

use std::future::Future;
use std::time::Duration;

use crate::api::EC2NodeClass;
use async_trait::async_trait;
use karpenter_runtime::metrics::{ReconcileMetrics, ReconcileResult};
use tokio_util::sync::CancellationToken;

use crate::api_error::AwsApiError;
use crate::launch::template::LaunchTemplateProvider;
use crate::nodeclass::controller::LaunchTemplateCleanup;

#[async_trait]
impl LaunchTemplateCleanup for LaunchTemplateProvider {
    async fn delete_launch_templates(&self, node_class: &EC2NodeClass) -> Result<(), AwsApiError> {
        let name = node_class.metadata.name.as_deref().unwrap_or_default();
        let deleted = self.delete_for_node_class(name).await?;
        if !deleted.is_empty() {
            tracing::info!(node_class = name, launch_templates = ?deleted, "deleted the node class's launch templates");
        }
        Ok(())
    }
}

/// One pass of a periodic controller (a singleton controller upstream), recorded under its reconcile and
/// workqueue series when it has them: its one item queued and taken as the pass starts, the pass timed, its result
/// `requeue_after` (it runs again after its interval) or `error`.
pub async fn timed_pass<T, E>(
    metrics: Option<&ReconcileMetrics>,
    pass: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let guard = metrics.map(ReconcileMetrics::pass);
    let result = pass.await;
    if let Some(guard) = guard {
        guard.finish(ReconcileResult::of_pass(&result));
    }
    result
}

/// Runs `pass` now and then every `interval` until `shutdown` fires (a pass in progress finishes first).
pub async fn every<F, Fut>(interval: Duration, shutdown: CancellationToken, mut pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        if shutdown.is_cancelled() {
            return;
        }
        pass().await;
        if shutdown.run_until_cancelled(tokio::time::sleep(interval)).await.is_none() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::launch::mock::MockEc2;
    use crate::launch::template::LaunchTemplateApi;

    #[tokio::test]
    async fn a_timed_pass_counts_one_reconcile_with_its_result() {
        let metrics = karpenter_runtime::metrics::Metrics::new(&karpenter_runtime::metrics::BuildInfo::default());
        let series = metrics.reconciler("providers.ssm.invalidation", 1);
        let ok: Result<u8, String> = timed_pass(Some(&series), async { Ok(1) }).await;
        assert_eq!(ok, Ok(1));
        let failed: Result<u8, String> = timed_pass(Some(&series), async { Err("no".to_owned()) }).await;
        assert_eq!(failed, Err("no".to_owned()));
        // Without series the pass runs all the same.
        assert_eq!(timed_pass(None, async { Ok::<u8, String>(2) }).await, Ok(2));
        let text = metrics.render();
        let line = |prefix: &str| text.lines().find(|l| l.starts_with(prefix)).map(str::to_owned);
        let sample = |name: &str, result: &str| {
            line(&format!("{name}{{controller=\"providers.ssm.invalidation\",result=\"{result}\"}}"))
        };
        assert!(
            sample("controller_runtime_reconcile_total", "requeue_after").is_some_and(|l| l.ends_with(" 1")),
            "{text}"
        );
        assert!(sample("controller_runtime_reconcile_total", "error").is_some_and(|l| l.ends_with(" 1")), "{text}");
        let adds = text.lines().find(|l| {
            l.starts_with("workqueue_adds_total{") && l.contains("controller=\"providers.ssm.invalidation\"")
        });
        assert!(adds.is_some_and(|l| l.ends_with(" 2")), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn every_runs_at_start_and_each_interval_until_shutdown() {
        let runs = Arc::new(AtomicUsize::new(0));
        let token = CancellationToken::new();
        let r = runs.clone();
        let task = tokio::spawn(every(Duration::from_secs(10), token.clone(), move || {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
            }
        }));
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        token.cancel();
        task.await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn node_class_cleanup_deletes_its_launch_templates() {
        let clock: Arc<dyn karpenter_cloudprovider::Clock> = Arc::new(karpenter_cloudprovider::SystemClock);
        let ec2 = MockEc2::new(clock.clone());
        let provider = LaunchTemplateProvider::new(Arc::new(ec2.clone()), clock, "test-cluster");
        let node_class: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"id": "subnet-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}],
                "role": "r"
            }
        }))
        .unwrap();
        let tags = crate::launch::template::launch_template_tags("test-cluster", &node_class, "default");
        let data = crate::launch::template::LaunchTemplateData {
            image_id: "ami-1".into(),
            instance_profile: None,
            security_group_ids: vec!["sg-1".into()],
            user_data: String::new(),
            block_device_mappings: vec![],
            metadata_options: crate::launch::template::LtMetadataOptions {
                http_endpoint: "enabled".into(),
                http_protocol_ipv6: Some("disabled".into()),
                http_put_response_hop_limit: 1,
                http_tokens: "required".into(),
                instance_metadata_tags: "disabled".into(),
            },
            network_interfaces: vec![],
            detailed_monitoring: false,
            ..Default::default()
        };
        let template = crate::launch::template::LaunchTemplate::new(data, tags);
        provider.ensure(&template).await.unwrap();
        assert!(ec2.describe_launch_template(&template.name).await.unwrap().is_some());
        provider.delete_launch_templates(&node_class).await.unwrap();
        assert!(ec2.describe_launch_template(&template.name).await.unwrap().is_none());
        assert!(provider.cached().is_empty());
    }
}
