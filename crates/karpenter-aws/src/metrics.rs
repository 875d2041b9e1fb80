//! The metric families only the AWS provider records, declared here ([`FAMILIES`]) and recorded into the
//! runtime's registry ([`karpenter_runtime::metrics::Metrics`]) the binary hands it, through [`AwsMetrics`]:
//! launch and termination failures and the EC2 request batchers
//! ([`crate::provider::AwsCloudProvider::with_metrics`]), the interruption queue's messages
//! ([`crate::queue::SqsInterruptionSource::with_metrics`]) and the instance status checks
//! ([`crate::status::InstanceStatusSource::with_metrics`]). The core declares none of them, so a controller has
//! them only when it runs this provider; their names, labels and help are upstream's AWS provider's, which
//! dashboards read. The test below drives each fault path over the in-memory EC2 and SQS (no SDK) and reads the
//! samples back from the registry.

use karpenter_runtime::metrics::{
    Counter, DURATION_BUCKETS, Histogram, Metrics, MetricsError, ProviderFamily, ProviderFamilyKind, SIZE_BUCKETS,
};

/// `karpenter_cloudprovider_instance_launch_failures_total`.
pub const LAUNCH_FAILURES: ProviderFamily = ProviderFamily {
    name: "karpenter_cloudprovider_instance_launch_failures_total",
    kind: ProviderFamilyKind::Counter,
    labels: &["zone", "zone_id", "capacity_type", "reason"],
    help: "Number of offerings CreateFleet refused (AWS): one per fleet error naming a zone; reason is EC2's error code (InsufficientInstanceCapacity, ...).",
};
/// `karpenter_cloudprovider_instance_termination_failures_total`.
pub const TERMINATION_FAILURES: ProviderFamily = ProviderFamily {
    name: "karpenter_cloudprovider_instance_termination_failures_total",
    kind: ProviderFamilyKind::Counter,
    labels: &["zone", "zone_id"],
    help: "Number of instance terminations that failed (AWS).",
};
/// `karpenter_cloudprovider_batcher_batch_size`.
pub const BATCH_SIZE: ProviderFamily = ProviderFamily {
    name: "karpenter_cloudprovider_batcher_batch_size",
    kind: ProviderFamilyKind::Histogram(SIZE_BUCKETS),
    labels: &["batcher"],
    help: "Requests merged into one batched cloud provider call (AWS).",
};
/// `karpenter_cloudprovider_batcher_batch_time_seconds`.
pub const BATCH_TIME: ProviderFamily = ProviderFamily {
    name: "karpenter_cloudprovider_batcher_batch_time_seconds",
    kind: ProviderFamilyKind::Histogram(DURATION_BUCKETS),
    labels: &["batcher"],
    help: "Time a batch was held open (AWS).",
};
/// `karpenter_interruption_received_messages_total`.
pub const RECEIVED_MESSAGES: ProviderFamily = ProviderFamily {
    name: "karpenter_interruption_received_messages_total",
    kind: ProviderFamilyKind::Counter,
    labels: &["message_type"],
    help: "Number of interruption messages received, by type (AWS).",
};
/// `karpenter_interruption_deleted_messages_total`.
pub const DELETED_MESSAGES: ProviderFamily = ProviderFamily {
    name: "karpenter_interruption_deleted_messages_total",
    kind: ProviderFamilyKind::Counter,
    labels: &[],
    help: "Number of interruption messages deleted from the queue (AWS).",
};
/// `karpenter_interruption_message_queue_duration_seconds`.
pub const MESSAGE_QUEUE_DURATION: ProviderFamily = ProviderFamily {
    name: "karpenter_interruption_message_queue_duration_seconds",
    kind: ProviderFamilyKind::Histogram(DURATION_BUCKETS),
    labels: &[],
    help: "Time between an interruption message being sent and its processing (AWS).",
};
/// `karpenter_interruption_instance_status_unhealthy_total`.
pub const INSTANCE_STATUS_UNHEALTHY: ProviderFamily = ProviderFamily {
    name: "karpenter_interruption_instance_status_unhealthy_total",
    kind: ProviderFamilyKind::Counter,
    labels: &["category"],
    help: "Number of instances found unhealthy by instance status checks, by category: InstanceStatus, SystemStatus (impaired checks) or ScheduledEvent (AWS).",
};

/// The families only the AWS provider records, in the order /metrics serves them.
pub const FAMILIES: [ProviderFamily; 8] = [
    LAUNCH_FAILURES,
    TERMINATION_FAILURES,
    BATCH_SIZE,
    BATCH_TIME,
    RECEIVED_MESSAGES,
    DELETED_MESSAGES,
    MESSAGE_QUEUE_DURATION,
    INSTANCE_STATUS_UNHEALTHY,
];

/// Declares [`FAMILIES`] in `metrics`; a family the registry refuses (a name taken: a bug the test below
/// catches) is logged and left out, as the provider works without its metrics.
pub fn declare(metrics: &Metrics) {
    if let Err(e) = metrics.declare(&FAMILIES) {
        tracing::error!(error = %e, "declaring the AWS provider's metric families");
    }
}

/// The series, or when the registry refused its family (see [`declare`]) `detached()`, counted nowhere.
fn or_detached<M>(series: Result<M, MetricsError>, detached: impl FnOnce() -> M) -> M {
    series.unwrap_or_else(|e| {
        tracing::error!(error = %e, "recording an AWS provider metric");
        detached()
    })
}

fn or_detached_histogram(series: Result<Histogram, MetricsError>, family: &ProviderFamily) -> Histogram {
    let buckets = match family.kind {
        ProviderFamilyKind::Histogram(buckets) => buckets,
        ProviderFamilyKind::Counter | ProviderFamilyKind::Gauge => DURATION_BUCKETS,
    };
    or_detached(series, || Histogram::new(buckets.iter().copied()))
}

/// The AWS provider's families as typed series of the registry, one method per family whose parameters are its
/// labels, in order (the core's families have the same shape on [`Metrics`]).
pub trait AwsMetrics {
    /// `karpenter_cloudprovider_instance_launch_failures_total`.
    fn cloudprovider_instance_launch_failures(
        &self,
        zone: &str,
        zone_id: &str,
        capacity_type: &str,
        reason: &str,
    ) -> Counter;
    /// `karpenter_cloudprovider_instance_termination_failures_total`.
    fn cloudprovider_instance_termination_failures(&self, zone: &str, zone_id: &str) -> Counter;
    /// `karpenter_cloudprovider_batcher_batch_size`.
    fn cloudprovider_batcher_batch_size(&self, batcher: &str) -> Histogram;
    /// `karpenter_cloudprovider_batcher_batch_time_seconds`.
    fn cloudprovider_batcher_batch_time_seconds(&self, batcher: &str) -> Histogram;
    /// `karpenter_interruption_received_messages_total`.
    fn interruption_received_messages(&self, message_type: &str) -> Counter;
    /// `karpenter_interruption_deleted_messages_total`.
    fn interruption_deleted_messages(&self) -> Counter;
    /// `karpenter_interruption_message_queue_duration_seconds`.
    fn interruption_message_queue_duration_seconds(&self) -> Histogram;
    /// `karpenter_interruption_instance_status_unhealthy_total`.
    fn interruption_instance_status_unhealthy(&self, category: &str) -> Counter;
}

impl AwsMetrics for Metrics {
    fn cloudprovider_instance_launch_failures(
        &self,
        zone: &str,
        zone_id: &str,
        capacity_type: &str,
        reason: &str,
    ) -> Counter {
        or_detached(self.provider_counter(&LAUNCH_FAILURES, [zone, zone_id, capacity_type, reason]), Counter::default)
    }
    fn cloudprovider_instance_termination_failures(&self, zone: &str, zone_id: &str) -> Counter {
        or_detached(self.provider_counter(&TERMINATION_FAILURES, [zone, zone_id]), Counter::default)
    }
    fn cloudprovider_batcher_batch_size(&self, batcher: &str) -> Histogram {
        or_detached_histogram(self.provider_histogram(&BATCH_SIZE, [batcher]), &BATCH_SIZE)
    }
    fn cloudprovider_batcher_batch_time_seconds(&self, batcher: &str) -> Histogram {
        or_detached_histogram(self.provider_histogram(&BATCH_TIME, [batcher]), &BATCH_TIME)
    }
    fn interruption_received_messages(&self, message_type: &str) -> Counter {
        or_detached(self.provider_counter(&RECEIVED_MESSAGES, [message_type]), Counter::default)
    }
    fn interruption_deleted_messages(&self) -> Counter {
        or_detached(self.provider_counter(&DELETED_MESSAGES, []), Counter::default)
    }
    fn interruption_message_queue_duration_seconds(&self) -> Histogram {
        or_detached_histogram(self.provider_histogram(&MESSAGE_QUEUE_DURATION, []), &MESSAGE_QUEUE_DURATION)
    }
    fn interruption_instance_status_unhealthy(&self, category: &str) -> Counter {
        or_detached(self.provider_counter(&INSTANCE_STATUS_UNHEALTHY, [category]), Counter::default)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use crate::api::{GROUP, KIND};
    use async_trait::async_trait;
    use karpenter_api::NodeClaim;
    use std::sync::Arc;

    use karpenter_runtime::metrics::{BuildInfo, Metrics};
    use karpenter_testing::FakeClock;

    use super::*;
    use crate::api_error::{AwsApiError, AwsErrorKind};
    use crate::instancetypes::SharedPrices;
    use crate::launch::instance::ClusterInfo;
    use crate::launch::mock::{MockEc2, instance_type_info, ops};
    use crate::pricing::{PriceSource, PriceTable};
    use crate::provider::{AwsCloudProvider, AwsCloudProviderOptions};
    use crate::queue::{InstanceClaim, InstanceLookup, LookupError, SqsInterruptionSource};
    use crate::status::{IMPAIRED, InstanceStatus, InstanceStatusSource};
    use crate::testing::MemoryQueue;
    use karpenter_cloudprovider::{Clock, CloudProvider, InMemoryNodeClasses, InterruptionSource};

    /// A resolved, ready EC2NodeClass in two zones.
    fn node_class() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default", "generation": 1, "uid": "uid-1"},
            "spec": {
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "role": "KarpenterNodeRole"
            },
            "status": {
                "subnets": [{"id": "subnet-a", "zone": "us-west-2a", "zoneID": "usw2-az1"},
                            {"id": "subnet-b", "zone": "us-west-2b", "zoneID": "usw2-az2"}],
                "securityGroups": [{"id": "sg-1"}],
                "amis": [{"id": "ami-amd", "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}],
                "instanceProfile": "profile-1",
                "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1,
                                "lastTransitionTime": "2026-01-01T00:00:00Z", "reason": "Ready", "message": ""}]
            }
        })
    }

    fn claim(name: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "requirements": [
                    {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ],
                "resources": {"requests": {"cpu": "1"}},
                "nodeClassRef": {"group": GROUP, "kind": KIND, "name": "default"}
            }
        }))
        .expect("a NodeClaim")
    }

    /// The NodeClaims of instances, as the API server would answer.
    #[derive(Debug, Default)]
    struct Claims(BTreeMap<String, InstanceClaim>);

    #[async_trait]
    impl InstanceLookup for Claims {
        async fn lookup(&self, ids: &[String]) -> Result<BTreeMap<String, InstanceClaim>, LookupError> {
            Ok(ids.iter().filter_map(|id| Some((id.clone(), self.0.get(id)?.clone()))).collect())
        }
    }

    fn spot_warning(instance_id: &str) -> String {
        format!(
            r#"{{"version":"0","id":"spot-1","detail-type":"EC2 Spot Instance Interruption Warning",
            "source":"aws.ec2","account":"123456789012","time":"2024-01-01T00:00:00Z","region":"us-west-2",
            "resources":["arn:aws:ec2:us-west-2a:instance/{instance_id}"],
            "detail":{{"instance-id":"{instance_id}","instance-action":"terminate"}}}}"#
        )
    }

    /// The sample names of a text exposition that carry a value, with their label names.
    fn sampled(exposition: &str) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in exposition.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let entry = out.entry(name.to_owned()).or_default();
            entry.extend(labels.split("\",").filter_map(|l| l.split_once('=')).map(|(k, _)| k.to_owned()));
        }
        out
    }

    /// Each AWS-only family is recorded where upstream records it, into the registry `run --provider aws` hands
    /// the assembly: a launch with one zone out of capacity (launch failure, CreateFleet and DescribeInstances
    /// batches), a TerminateInstances EC2 refuses (termination failure, TerminateInstances batch), a spot
    /// interruption and a garbled body on the queue (received, deleted, time in the queue) and an impaired
    /// instance status (unhealthy). The batchers keep production's windows, on tokio's real timer (under half a
    /// second in all; nothing races them: each batch holds one request).
    #[tokio::test]
    async fn every_aws_only_family_reaches_the_registry() {
        let metrics = Arc::new(Metrics::new(&BuildInfo::default()));
        let clock = FakeClock::default();
        let ec2 = MockEc2::new(Arc::new(clock.clone()));
        ec2.set_catalogue(vec![instance_type_info("m5.large", 2, 8)], &["us-west-2a", "us-west-2b"]);
        ec2.set_zone_ids(&[("us-west-2a", "usw2-az1"), ("us-west-2b", "usw2-az2")]);
        let classes = InMemoryNodeClasses::new();
        classes.insert_value(GROUP, KIND, "default", node_class());
        let mut prices = PriceTable::default();
        prices.on_demand.insert("m5.large".into(), 0.096);
        let cluster = ClusterInfo {
            name: "test-cluster".into(),
            endpoint: "https://api.example".into(),
            ca_bundle: Some("Q0E=".into()),
            service_cidr: Some("10.100.0.0/16".into()),
            dns_ip: Some("10.100.0.10".into()),
        };
        let provider = AwsCloudProvider::new(
            ec2.apis(),
            Arc::new(classes),
            Arc::new(clock.clone()),
            Arc::new(clock.clone()),
            SharedPrices::new(PriceSource::Table(prices)),
            AwsCloudProviderOptions::new(cluster, "us-west-2"),
        )
        .with_metrics(metrics.clone());
        provider.instance_type_provider().refresh().await.expect("the catalogue");

        // us-west-2a is out of on-demand m5.large: the fleet's error for it is a launch failure, 2b launches.
        ec2.set_exhausted("on-demand", "m5.large", "us-west-2a", true);
        let launched = provider.create(&claim("claim-1")).await.expect("a launch in us-west-2b");
        let provider_id = launched.status.as_ref().and_then(|s| s.provider_id.clone()).expect("a provider id");
        assert!(provider_id.starts_with("aws:///us-west-2b/"), "{provider_id}");
        let instance_id = provider_id.rsplit('/').next().unwrap_or_default().to_owned();

        // EC2 refuses the termination: counted with the instance's zone and zone id.
        ec2.fail_next(
            ops::TERMINATE_INSTANCES,
            AwsApiError {
                operation: "TerminateInstances".into(),
                code: "UnauthorizedOperation".into(),
                message: "not authorized".into(),
                kind: AwsErrorKind::Unauthorized,
            },
        );
        provider.delete(&launched).await.expect_err("EC2 refused the termination");

        // The queue: a spot interruption of the instance (an event, deleted once acknowledged) and a garbled
        // body (deleted at once), both sent 5 s before they are read.
        let queue = Arc::new(MemoryQueue::new("karpenter-int"));
        let sent = clock.now().timestamp_millis() - 5_000;
        queue.send_at(&spot_warning(&instance_id), Some(sent));
        queue.send_at("{not an event", Some(sent));
        let claims = Arc::new(Claims(BTreeMap::from([(
            instance_id.clone(),
            InstanceClaim { name: "claim-1".into(), provider_id: provider_id.clone(), ..Default::default() },
        )])));
        let source = SqsInterruptionSource::new(queue.clone(), claims.clone(), queue.url())
            .with_metrics(metrics.clone(), Arc::new(clock.clone()));
        let events = source.receive_events().await.expect("a receive");
        assert_eq!(events.len(), 1, "{events:?}");
        source.acknowledge(&events).await.expect("the acknowledgement");
        assert!(queue.is_empty(), "both messages were deleted");

        // The status checks find the instance impaired; the report counts once acknowledged.
        ec2.set_instance_status(
            &instance_id,
            InstanceStatus {
                instance_id: instance_id.clone(),
                availability_zone: Some("us-west-2b".into()),
                instance_status: IMPAIRED.into(),
                system_status: "ok".into(),
                events: vec![],
            },
        );
        let status = InstanceStatusSource::new(Arc::new(ec2.clone()), claims, Arc::new(clock.clone()), Arc::new(clock))
            .with_metrics(metrics.clone());
        let events = status.check().await.expect("a status check");
        assert_eq!(events.len(), 1, "{events:?}");
        status.acknowledge(&events).await.expect("the acknowledgement");

        let exposition = metrics.render();
        let seen = sampled(&exposition);
        let sample_of = |family: &str| {
            let name = family.to_owned();
            if name.ends_with("_total") { name } else { format!("{name}_count") }
        };
        let missing: Vec<&str> =
            FAMILIES.iter().map(|f| f.name).filter(|f| !seen.contains_key(&sample_of(f))).collect();
        assert!(missing.is_empty(), "not sampled: {missing:?}\n{exposition}");
        for batcher in ["create_fleet", "describe_instances", "terminate_instances"] {
            assert!(
                exposition
                    .contains(&format!("karpenter_cloudprovider_batcher_batch_size_count{{batcher=\"{batcher}\"}} ")),
                "no {batcher} batch:\n{exposition}"
            );
        }
        let lines = |prefix: &str| exposition.lines().filter(|l| l.starts_with(prefix)).collect::<Vec<_>>().join("\n");
        let launch = lines("karpenter_cloudprovider_instance_launch_failures_total{");
        assert!(launch.contains("zone=\"us-west-2a\"") && launch.contains("zone_id=\"usw2-az1\""), "{launch}");
        assert!(launch.contains("reason=\"InsufficientInstanceCapacity\""), "{launch}");
        let termination = lines("karpenter_cloudprovider_instance_termination_failures_total{");
        assert!(termination.contains("zone=\"us-west-2b\",zone_id=\"usw2-az2\"} 1"), "{termination}");
        let received = lines("karpenter_interruption_received_messages_total{");
        assert!(received.contains("message_type=\"spot_interrupted\"} 1"), "{received}");
        // A series without labels is written `name{} value`.
        let value = |sample: &str| -> f64 {
            let line =
                exposition.lines().find(|l| l.split_once(' ').is_some_and(|(s, _)| s.trim_end_matches("{}") == sample));
            line.and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
        };
        assert_eq!(value("karpenter_interruption_deleted_messages_total"), 2.0, "{exposition}");
        // Both deletions 5 s after their messages were sent (the clock stood still).
        assert_eq!(value("karpenter_interruption_message_queue_duration_seconds_count"), 2.0, "{exposition}");
        assert_eq!(value("karpenter_interruption_message_queue_duration_seconds_sum"), 10.0, "{exposition}");
        let unhealthy = lines("karpenter_interruption_instance_status_unhealthy_total{");
        assert!(unhealthy.contains("category=\"InstanceStatus\"} 1"), "{unhealthy}");
    }

    /// The families as the core registry served them before they moved here (tests/fixtures/
    /// aws-metrics-exposition.txt, rendered by that registry with one sample each): names, help, types, labels,
    /// buckets and their order on /metrics are unchanged, as dashboards read them.
    #[test]
    fn the_families_are_served_as_before_they_moved() {
        let metrics = Metrics::new(&BuildInfo::default());
        declare(&metrics);
        metrics
            .cloudprovider_instance_launch_failures(
                "us-west-2a",
                "usw2-az1",
                "on-demand",
                "InsufficientInstanceCapacity",
            )
            .inc();
        metrics.cloudprovider_instance_termination_failures("us-west-2b", "usw2-az2").inc();
        metrics.cloudprovider_batcher_batch_size("create_fleet").observe(3.0);
        metrics.cloudprovider_batcher_batch_time_seconds("create_fleet").observe(0.04);
        metrics.interruption_received_messages("spot_interrupted").inc();
        metrics.interruption_deleted_messages().inc();
        metrics.interruption_message_queue_duration_seconds().observe(5.0);
        metrics.interruption_instance_status_unhealthy("InstanceStatus").inc();
        let expected = include_str!("../tests/fixtures/aws-metrics-exposition.txt");
        let exposition = metrics.render();
        assert!(exposition.contains(expected), "expected, in one block:\n{expected}\nserved:\n{exposition}");
        let names: Vec<String> = metrics.provider_descriptors().into_iter().map(|d| d.name).collect();
        assert_eq!(names, FAMILIES.map(|f| f.name.to_owned()), "every family declared, in order");
    }

    /// The families are no core family's, and the registry takes them as declared.
    #[test]
    fn the_families_are_the_providers_own() {
        let core: BTreeSet<String> = Metrics::descriptors().into_iter().map(|d| d.name).collect();
        for family in FAMILIES {
            assert!(!core.contains(family.name), "{} is declared by the core too", family.name);
        }
        let metrics = Metrics::new(&BuildInfo::default());
        assert_eq!(metrics.declare(&FAMILIES), Ok(()));
    }
}
