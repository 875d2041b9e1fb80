//! What `metrics.pod` holds per pod (its own bookkeeping plus the registry's `pods_state` and waiting-gauge
//! series), measured with a heap profiler (dhat) in a test that gates it.
//!
//! 4,000 pods of one ReplicaSet are recorded in a `ClusterState` (half pending, half running on 40 nodes with
//! upstream's node labels); one resync of the pod metrics then records every pod. The heap held afterwards, less
//! the heap held before, is divided by the pod count.
//!
//! Run alone with `cargo test -p karpenter-operator --test observability_memory -- --nocapture` to see the figures.

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use karpenter_api::labels;
use karpenter_operator::ControllerContext;
use karpenter_operator::events::Recorder;
use karpenter_operator::metrics::{BuildInfo, Metrics};
use karpenter_operator::observability::pod::PodMetrics;
use karpenter_operator::state::ClusterState;
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::{FakeClock, NodeOptions, PodOptions, node, pod};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const PODS: usize = 4_000;
const NODES: usize = 40;
/// The ceiling on what the pod metrics add per pod (measured 1.26 KB: the registry's copy of the labels is most
/// of it; at 5,000 pods about 6 MB).
const MAX_BYTES_PER_POD: usize = 2 * 1024;

#[tokio::test]
async fn pod_metrics_hold_little_per_pod() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let clock = FakeClock::new(Utc.with_ymd_and_hms(2026, 11, 27, 9, 0, 0).unwrap());
    let server = ApiServer::new();
    let client = server.client();
    let state = ClusterState::new(Arc::new(clock.clone()), Duration::from_secs(20));
    state.mark_all_synced();
    let metrics = Arc::new(Metrics::new(&BuildInfo::default()));
    let recorder = Recorder::new(client.clone(), Arc::new(clock.clone()), "test");
    let ctx = ControllerContext::new(
        client,
        state.clone(),
        Arc::new(karpenter_testing::kwok::fake()),
        recorder,
        metrics.clone(),
        Arc::new(clock.clone()),
    );
    for n in 0..NODES {
        state.apply(node(NodeOptions {
            name: Some(format!("node-{n:03}")),
            labels: [
                (labels::NODE_POOL.to_string(), "default".to_string()),
                (labels::ZONE.to_string(), "us-east-1a".to_string()),
                (labels::ARCH.to_string(), "amd64".to_string()),
                (labels::CAPACITY_TYPE.to_string(), "spot".to_string()),
                (labels::INSTANCE_TYPE.to_string(), "m5.large".to_string()),
            ]
            .into(),
            ..Default::default()
        }));
    }
    for i in 0..PODS {
        let bound = i % 2 == 1;
        state.apply(pod(PodOptions {
            name: Some(format!("web-7d9f8c6b5d-{i:05}")),
            namespace: Some("default".into()),
            owner: Some(("ReplicaSet".into(), "web-7d9f8c6b5d".into())),
            node_name: bound.then(|| format!("node-{:03}", (i / 2) % NODES)),
            phase: Some(if bound { "Running" } else { "Pending" }.into()),
            requests: [("cpu", "100m")].into(),
            ..Default::default()
        }));
    }
    let pods = PodMetrics::new(&ctx);
    let before = dhat::HeapStats::get().curr_bytes;
    pods.resync();
    let after = dhat::HeapStats::get().curr_bytes;
    let per_pod = after.saturating_sub(before) / PODS;
    println!("metrics.pod holds {per_pod} bytes per pod ({} KiB for {PODS} pods)", (after - before) / 1024);
    assert!(metrics.render().contains("karpenter_pods_state{"));
    assert!(per_pod <= MAX_BYTES_PER_POD, "{per_pod} bytes per pod, ceiling {MAX_BYTES_PER_POD}");
    drop(pods);
}
