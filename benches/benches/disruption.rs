//! Disruption passes on large clusters, with two catalogues: `kwok` (`karpenter_kwok::catalogue::catalogue`,
//! nodes of `s-16x-amd64-linux`, 16 vCPU / 64 GiB) and `aws` (the us-east-1 types of moto's EC2 catalogue converted
//! by `karpenter_aws::instancetype` with on-demand prices from `../shared/data/aws/on-demand-prices.json`, as in
//! the `aws_catalogue` bench; nodes of `m5.4xlarge`, 16 vCPU / 64 GiB). Without moto (`KARPENTER_MOTO_VENV`,
//! default `target/moto-venv`) the `aws` cases print a note and are skipped.
//!
//! * `disruption/single-node/{kwok,aws}/{1000,5000}`: a full pass ([`karpenter_disruption::evaluate`]) over N
//!   nodes with 30 pods each: 70 % of the nodes are full (30 × 500m / 2 GiB), 30 % underutilized (30 × 100m /
//!   256 MiB). Every node is a consolidation candidate and gets a verdict from its own single-node simulation
//!   (upstream stops at 3 minutes; here every candidate is evaluated), after multi-node consolidation has run.
//! * `disruption/multi-node/{kwok,aws}/100`: multi-node consolidation alone
//!   ([`karpenter_disruption::multi_node_consolidation`]) on the 1,000-node cluster: the binary search over the
//!   first 100 sorted candidates (upstream's cap), without upstream's 1 minute timeout.
//!
//! * `disruption/pending/kwok/5000`: a pass as the controller runs it (`every_verdict` off) over the 5,000-node
//!   cluster while 40,000 pods of 1.5 vCPU are pending (a large scale-out under way: they need thousands of new
//!   nodes, so no consolidation can make do with one).
//!
//! Before criterion measures a case it runs once and prints: time, commands, verdict counts by outcome.
//! `cargo bench -p karpenter-benches --bench disruption -- single-node/kwok/1000`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use karpenter_api::{IntoSharedPod, NodeClaim, NodePool, ProviderLabels};
use karpenter_aws::instancetype::InstanceTypeContext;
use karpenter_aws::moto::{LocationType, MotoCatalogue};
use karpenter_aws::pricing::{PriceFile, PriceSource};
use karpenter_cloudprovider::time::Stopwatch;
use karpenter_disruption::{DisruptionOptions, Pass, evaluate, multi_node_consolidation};
use karpenter_kwok::catalogue as kwok;
use karpenter_requirements::{InstanceType, ResourceList};
use karpenter_scheduler::{ClusterSnapshot, NodeClaimInfo, NodeInfo, PoolInput};
use serde_json::json;

/// A catalogue and the instance type every node of the cluster runs.
struct Case {
    name: &'static str,
    instance_types: Vec<InstanceType>,
    node_type: &'static str,
    /// Zones where `node_type` has an available on-demand offering (nodes are spread over them).
    zones: Vec<String>,
}

fn on_demand_zones(its: &[InstanceType], node_type: &str) -> Vec<String> {
    let mut zones: Vec<String> = its
        .iter()
        .filter(|t| t.name == node_type)
        .flat_map(|t| t.offerings.iter())
        .filter(|o| o.available && o.capacity_type() == Some("on-demand"))
        .filter_map(|o| o.zone().map(str::to_owned))
        .collect();
    zones.sort();
    zones.dedup();
    zones
}

fn kwok_case() -> Case {
    let instance_types = kwok::catalogue();
    let node_type = "s-16x-amd64-linux";
    let zones = on_demand_zones(&instance_types, node_type);
    Case { name: "kwok", instance_types, node_type, zones }
}

/// us-east-1 from moto, or `None` (with a note) without moto.
fn aws_case() -> Option<Case> {
    const REGION: &str = "us-east-1";
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cat = match MotoCatalogue::discover(&root) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("disruption/aws: skipped: {e}");
            return None;
        }
    };
    let infos = cat.instance_types_in(REGION).expect("moto's us-east-1 catalogue loads");
    let zones = cat.locations(REGION, LocationType::AvailabilityZone).expect("moto's us-east-1 zone offerings");
    let prices = match PriceFile::read(&root.join("../shared/data/aws/on-demand-prices.json")) {
        Ok(f) => PriceSource::Table(f.region(REGION)),
        Err(e) => {
            eprintln!("disruption/aws: no price snapshot ({e}); pricing every offering by the documented estimate");
            PriceSource::Estimate
        }
    };
    let ctx = InstanceTypeContext { region: REGION.into(), zones, prices, ..Default::default() };
    let instance_types = ctx.instance_types(&infos);
    let node_type = "m5.4xlarge";
    let zones = on_demand_zones(&instance_types, node_type);
    assert!(!zones.is_empty(), "{node_type} has an available on-demand offering in {REGION}");
    Some(Case { name: "aws", instance_types, node_type, zones })
}

fn cases() -> Vec<Case> {
    let mut out = vec![kwok_case()];
    out.extend(aws_case());
    out
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T12:00:00Z").map(|t| t.with_timezone(&Utc)).unwrap_or_default()
}

fn pool() -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
            ]}},
            "disruption": {"budgets": [{"nodes": "100%"}]}}
    }))
    .expect("pool")
}

/// `n` nodes with 30 pods each; nodes with `i % 10 < 3` (30 %) are underutilized.
fn cluster(n: usize, case: &Case) -> ClusterSnapshot {
    let it = case.instance_types.iter().find(|t| t.name == case.node_type).expect("node type in the catalogue");
    let allocatable: ResourceList = it.allocatable().clone();
    let claim_template: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}, "requirements": []},
        "status": {"conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:05:00Z", "reason": "Initialized", "message": ""}]}
    }))
    .expect("claim");
    let pod_template = |cpu: &str, mem: &str| -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "x", "namespace": "default", "labels": {"app": "web"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"}]},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": mem}}}]},
            "status": {"phase": "Running"}
        }))
        .expect("pod")
    };
    let full = pod_template("500m", "2Gi");
    let light = pod_template("100m", "256Mi");
    let mut s = ClusterSnapshot { node_pools: vec![pool()], ..Default::default() };
    for i in 0..n {
        let name = format!("node-{i:05}");
        let zone = case.zones[i % case.zones.len()].as_str();
        let labels: BTreeMap<String, String> = [
            ("kubernetes.io/hostname", name.as_str()),
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/os", "linux"),
            ("node.kubernetes.io/instance-type", case.node_type),
            ("topology.kubernetes.io/zone", zone),
            ("karpenter.sh/capacity-type", "on-demand"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.sh/initialized", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let claim_name = format!("claim-{i:05}");
        let mut claim = claim_template.clone();
        claim.metadata.name = Some(claim_name.clone());
        claim.metadata.labels = Some(labels.clone());
        s.node_claims.push(NodeClaimInfo {
            name: claim_name.clone(),
            node_pool: Some("default".into()),
            node_name: Some(name.clone()),
            in_flight: false,
            claim: claim.into(),
            capacity: it.capacity().clone(),
            allocatable: allocatable.clone(),
            marked_for_deletion: false,
            nominated: false,
        });
        s.nodes.push(NodeInfo {
            name: name.clone(),
            labels,
            allocatable: allocatable.clone(),
            capacity: it.capacity().clone(),
            node_pool: Some("default".into()),
            node_claim: Some(claim_name),
            initialized: true,
            ..Default::default()
        });
        let template = if i % 10 < 3 { &light } else { &full };
        for j in 0..30 {
            let mut p = template.clone();
            p.metadata.name = Some(format!("p-{i:05}-{j:02}"));
            p.metadata.uid = Some(format!("uid-{i}-{j}"));
            if let Some(spec) = p.spec.as_mut() {
                spec.node_name = Some(name.clone());
            }
            s.bound_pods.push(p.into_shared());
        }
    }
    s.sort();
    s
}

fn summary(pass: &Pass) -> String {
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for v in &pass.verdicts {
        *outcomes.entry(format!("{:?}", v.outcome)).or_default() += 1;
    }
    let commands: Vec<String> = pass
        .commands
        .iter()
        .map(|c| {
            format!(
                "{:?} {:?} of {} nodes saving ${:.2}/h",
                c.method,
                c.decision,
                c.candidates.len(),
                c.savings_per_hour
            )
        })
        .collect();
    format!("commands [{}], verdicts {outcomes:?}", commands.join("; "))
}

fn single_node(c: &mut Criterion) {
    let provider = ProviderLabels::aws();
    let options = DisruptionOptions::default();
    let mut group = c.benchmark_group("disruption/single-node");
    group.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_millis(100));
    for case in cases() {
        for n in [1_000usize, 5_000] {
            let snapshot = cluster(n, &case);
            let pools = [PoolInput { node_pool: &snapshot.node_pools[0], instance_types: &case.instance_types }];
            let start = Stopwatch::start();
            let pass = evaluate(&snapshot, &pools, &provider, now(), &options);
            let secs = start.elapsed().as_secs_f64();
            eprintln!("disruption/single-node/{}/{n}: {secs:.3} s, {}", case.name, summary(&pass));
            group.measurement_time(Duration::from_secs_f64((secs * 12.0).max(1.0)));
            group.bench_function(format!("{}/{n}", case.name), |b| {
                b.iter(|| evaluate(black_box(&snapshot), &pools, &provider, now(), &options))
            });
        }
    }
    group.finish();
}

fn multi_node(c: &mut Criterion) {
    let provider = ProviderLabels::aws();
    let options = DisruptionOptions::default();
    let mut group = c.benchmark_group("disruption/multi-node");
    group.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_millis(100));
    for case in cases() {
        // 1,000 nodes; multi-node consolidation takes the first 100 sorted candidates (upstream's cap).
        let snapshot = cluster(1_000, &case);
        let pools = [PoolInput { node_pool: &snapshot.node_pools[0], instance_types: &case.instance_types }];
        let start = Stopwatch::start();
        let cmd = multi_node_consolidation(&snapshot, &pools, &provider, now(), &options);
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "disruption/multi-node/{}/100: {secs:.3} s, {}",
            case.name,
            cmd.as_ref().map_or_else(
                || "no command".to_owned(),
                |c| format!("{:?} of {} nodes saving ${:.2}/h", c.decision, c.candidates.len(), c.savings_per_hour)
            )
        );
        group.measurement_time(Duration::from_secs_f64((secs * 12.0).max(1.0)));
        group.bench_function(format!("{}/100", case.name), |b| {
            b.iter(|| multi_node_consolidation(black_box(&snapshot), &pools, &provider, now(), &options))
        });
    }
    group.finish();
}

/// 40,000 pending pods of 1.5 vCPU / 1 GiB added to `snapshot`.
fn with_pending(mut snapshot: ClusterSnapshot) -> ClusterSnapshot {
    let template: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "x", "namespace": "default", "labels": {"app": "batch"}},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .expect("pod");
    for i in 0..40_000 {
        let mut p = template.clone();
        p.metadata.name = Some(format!("pending-{i:05}"));
        p.metadata.uid = Some(format!("uid-pending-{i}"));
        snapshot.pending_pods.push(p.into_shared());
    }
    snapshot.sort();
    snapshot
}

fn pending(c: &mut Criterion) {
    let provider = ProviderLabels::aws();
    let options = DisruptionOptions { every_verdict: false, ..Default::default() };
    let mut group = c.benchmark_group("disruption/pending");
    group.sample_size(10).sampling_mode(SamplingMode::Flat).warm_up_time(Duration::from_millis(100));
    let case = kwok_case();
    let snapshot = with_pending(cluster(5_000, &case));
    let pools = [PoolInput { node_pool: &snapshot.node_pools[0], instance_types: &case.instance_types }];
    let start = Stopwatch::start();
    let pass = evaluate(&snapshot, &pools, &provider, now(), &options);
    let secs = start.elapsed().as_secs_f64();
    eprintln!("disruption/pending/kwok/5000: {secs:.3} s, {}", summary(&pass));
    group.measurement_time(Duration::from_secs_f64((secs * 12.0).max(1.0)));
    group
        .bench_function("kwok/5000", |b| b.iter(|| evaluate(black_box(&snapshot), &pools, &provider, now(), &options)));
    group.finish();
}

criterion_group!(benches, single_node, multi_node, pending);
criterion_main!(benches);
