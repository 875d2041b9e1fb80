//! Upstream Karpenter's scheduling benchmark workload, rebuilt from its description (issue 3 item 6):
//!
//! * **Catalogue**: 400 fake instance types, `fake-it-{k-1}` for k = 1..=400 with k vCPU, 2k GiB and 10k pods;
//!   price 0.1 per vCPU + 0.1 per 10⁹ bytes of memory; spot offerings in `test-zone-1` and `test-zone-2`,
//!   on-demand in `test-zone-1..3`, all at that price; 100m CPU and 10Mi memory of instance overhead.
//! * **NodePool** `default` without requirements and with effectively unlimited limits (10⁷ CPU, 10⁷ Gi).
//! * **Diverse pods** ([`diverse_pods`]): five classes of `n/5` pods (the remainder generic): generic pods
//!   with a random `my-label` a..g; zonal spread (maxSkew 1, DoNotSchedule, selector on a random
//!   `my-label`); the same on hostname; required zonal self-affinity in 7 groups (`my-affininity` a..g,
//!   upstream's spelling); required hostname anti-affinity among the whole class (`app: nginx`).
//! * **Preference pods** ([`preference_pods`]): `app: nginx` with a satisfiable preferred zone
//!   (`test-zone-1`), an unsatisfiable weight-10 zonal anti-affinity preference and a satisfiable weight-1
//!   hostname anti-affinity preference, all against `app: nginx`.
//! * **Unconstrained pods** ([`unconstrained_pods`]): the same request shapes, nothing else.
//!
//! Requests: CPU uniformly from {100m, 250m, 500m, 1, 1.5}, memory from {100, 256, 512, 1024, 2048,
//! 4096}Mi, drawn from a seeded [`Rng`] (upstream seeds Go's `math/rand` with 42; the stream differs, the
//! distribution is the same). Every generator restarts the RNG, so a workload is a pure function of `n`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, Container, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodAffinity, PodAffinityTerm,
    PodAntiAffinity, PodSpec, PreferredSchedulingTerm, ResourceRequirements, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use karpenter_api::NodePool;
use karpenter_requirements::{
    Format, InstanceType, Offering, Overhead, Quantity, Requirement, Requirements, ResourceList,
};

/// The fake provider's zones.
pub const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];
const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";
const CPU: [&str; 5] = ["100m", "250m", "500m", "1", "1500m"];
const MEMORY: [&str; 6] = ["100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi"];
const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];

/// A small deterministic generator (SplitMix64): the same seed gives the same workload on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// An element of `items`, uniformly (`items` must not be empty).
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        let i = (self.next_u64() % items.len() as u64) as usize;
        items[i]
    }
}

/// Upstream's seed.
pub const SEED: u64 = 42;

fn offering(zone: &str, capacity_type: &str, price: f64) -> Offering {
    let reqs: Requirements =
        [Requirement::in_values(ZONE, [zone]), Requirement::in_values("karpenter.sh/capacity-type", [capacity_type])]
            .into_iter()
            .collect();
    Offering::new(reqs, price)
}

/// The price of `cpu` cores and `memory_bytes` in upstream's fake provider.
pub fn fake_price(cpu: i64, memory_bytes: i64) -> f64 {
    0.1 * cpu as f64 + 0.1 * memory_bytes as f64 / 1e9
}

/// The 400-type catalogue.
pub fn catalogue() -> Vec<InstanceType> {
    (1..=400i64)
        .map(|k| {
            let name = format!("fake-it-{}", k - 1);
            let memory = k * 2 * (1 << 30);
            let price = fake_price(k, memory);
            let mut offerings: Vec<Offering> = ZONES[..2].iter().map(|z| offering(z, "spot", price)).collect();
            offerings.extend(ZONES.iter().map(|z| offering(z, "on-demand", price)));
            let reqs: Requirements = [
                Requirement::in_values("node.kubernetes.io/instance-type", [name.as_str()]),
                Requirement::in_values("kubernetes.io/arch", ["amd64"]),
                Requirement::in_values("kubernetes.io/os", ["linux"]),
                Requirement::in_values(ZONE, ZONES),
                Requirement::in_values("karpenter.sh/capacity-type", ["spot", "on-demand"]),
            ]
            .into_iter()
            .collect();
            let capacity = ResourceList::new()
                .with("cpu", Quantity::from_int(k, Format::DecimalSI))
                .with("memory", Quantity::from_int(memory, Format::BinarySI))
                .with("pods", Quantity::from_int(k * 10, Format::DecimalSI));
            let overhead = Overhead {
                kube_reserved: ResourceList::new()
                    .with("cpu", Quantity::from_milli(100))
                    .with("memory", Quantity::from_int(10 << 20, Format::BinarySI)),
                ..Default::default()
            };
            InstanceType::new(name, reqs, offerings, capacity, overhead)
        })
        .collect()
}

/// The NodePool: no requirements, limits far above any workload here.
pub fn node_pool() -> NodePool {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []
            }},
            "limits": {"cpu": "10000000", "memory": "10000000Gi"}
        }
    }))
    .expect("fixture NodePool")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn selector(pairs: &[(&str, &str)]) -> Option<LabelSelector> {
    Some(LabelSelector { match_labels: Some(labels(pairs)), match_expressions: None })
}

/// A pending pod with random requests; `shape` adds labels and scheduling constraints.
fn pod(
    i: usize,
    class: &str,
    rng: &mut Rng,
    labels: BTreeMap<String, String>,
    shape: impl FnOnce(&mut PodSpec),
) -> Pod {
    let requests: BTreeMap<String, KQuantity> = [
        ("cpu".to_string(), KQuantity(rng.pick(&CPU).into())),
        ("memory".to_string(), KQuantity(rng.pick(&MEMORY).into())),
    ]
    .into();
    let mut spec = PodSpec {
        containers: vec![Container {
            name: "app".into(),
            image: Some("nginx".into()),
            resources: Some(ResourceRequirements { requests: Some(requests), ..Default::default() }),
            ..Default::default()
        }],
        ..Default::default()
    };
    shape(&mut spec);
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{class}-{i:06}")),
            namespace: Some("default".into()),
            uid: Some(format!("00000000-0000-4000-8000-{i:012}")),
            labels: (!labels.is_empty()).then_some(labels),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

fn generic(i: usize, rng: &mut Rng) -> Pod {
    let l = labels(&[("my-label", rng.pick(&LABEL_VALUES))]);
    pod(i, "generic", rng, l, |_| {})
}

fn spread(i: usize, rng: &mut Rng, key: &str, class: &str) -> Pod {
    let l = labels(&[("my-label", rng.pick(&LABEL_VALUES))]);
    let sel = selector(&[("my-label", rng.pick(&LABEL_VALUES))]);
    pod(i, class, rng, l, |s| {
        s.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: sel,
            ..Default::default()
        }]);
    })
}

fn term(pairs: &[(&str, &str)], key: &str) -> PodAffinityTerm {
    PodAffinityTerm { label_selector: selector(pairs), topology_key: key.into(), ..Default::default() }
}

fn zonal_affinity(i: usize, rng: &mut Rng) -> Pod {
    let value = rng.pick(&LABEL_VALUES);
    let l = labels(&[("my-affininity", value)]);
    pod(i, "zone-affinity", rng, l, |s| {
        s.affinity = Some(Affinity {
            pod_affinity: Some(PodAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term(
                    &[("my-affininity", value)],
                    ZONE,
                )]),
                ..Default::default()
            }),
            ..Default::default()
        });
    })
}

fn hostname_anti_affinity(i: usize, rng: &mut Rng) -> Pod {
    pod(i, "host-anti-affinity", rng, labels(&[("app", "nginx")]), |s| {
        s.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![term(&[("app", "nginx")], HOSTNAME)]),
                ..Default::default()
            }),
            ..Default::default()
        });
    })
}

/// Upstream's diverse workload of `n` pods (see the module docs).
pub fn diverse_pods(n: usize) -> Vec<Pod> {
    let mut rng = Rng::new(SEED);
    let per = n / 5;
    let mut pods = Vec::with_capacity(n);
    let mut i = 0usize;
    let mut next = |pods: &mut Vec<Pod>, count: usize, make: &mut dyn FnMut(usize, &mut Rng) -> Pod| {
        for _ in 0..count {
            pods.push(make(i, &mut rng));
            i += 1;
        }
    };
    next(&mut pods, per, &mut generic);
    next(&mut pods, per, &mut |i, r| spread(i, r, ZONE, "zone-spread"));
    next(&mut pods, per, &mut |i, r| spread(i, r, HOSTNAME, "host-spread"));
    next(&mut pods, per, &mut zonal_affinity);
    next(&mut pods, per, &mut hostname_anti_affinity);
    let rest = n - pods.len();
    next(&mut pods, rest, &mut generic);
    pods
}

/// Upstream's preference workload of `n` pods (see the module docs).
pub fn preference_pods(n: usize) -> Vec<Pod> {
    let mut rng = Rng::new(SEED);
    (0..n)
        .map(|i| {
            pod(i, "preference", &mut rng, labels(&[("app", "nginx")]), |s| {
                s.affinity = Some(Affinity {
                    node_affinity: Some(NodeAffinity {
                        preferred_during_scheduling_ignored_during_execution: Some(vec![PreferredSchedulingTerm {
                            weight: 1,
                            preference: NodeSelectorTerm {
                                match_expressions: Some(vec![NodeSelectorRequirement {
                                    key: ZONE.into(),
                                    operator: "In".into(),
                                    values: Some(vec!["test-zone-1".into()]),
                                }]),
                                match_fields: None,
                            },
                        }]),
                        ..Default::default()
                    }),
                    pod_anti_affinity: Some(PodAntiAffinity {
                        preferred_during_scheduling_ignored_during_execution: Some(vec![
                            WeightedPodAffinityTerm { weight: 10, pod_affinity_term: term(&[("app", "nginx")], ZONE) },
                            WeightedPodAffinityTerm {
                                weight: 1,
                                pod_affinity_term: term(&[("app", "nginx")], HOSTNAME),
                            },
                        ]),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            })
        })
        .collect()
}

/// `n` pods with the workload's request shapes and no labels or constraints.
pub fn unconstrained_pods(n: usize) -> Vec<Pod> {
    let mut rng = Rng::new(SEED);
    (0..n).map(|i| pod(i, "plain", &mut rng, BTreeMap::new(), |_| {})).collect()
}

/// A full cluster: `nodes` existing nodes of the NodePool with no room left (1 CPU allocatable each) and
/// `pending` pending replicas of one workload that share one spec, as the controller's state shares them. The
/// provisioning pass of the controller's `memory-50k` perf case near its end: every replica is turned down by the
/// existing nodes and goes to a new NodeClaim.
pub fn full_cluster(nodes: usize, pending: usize) -> karpenter_scheduler::ClusterSnapshot {
    let (nodes, pods) = full_cluster_objects(nodes, pending);
    let mut builder = karpenter_scheduler::ClusterSnapshot::builder();
    for node in &nodes {
        builder.node(node);
    }
    for pod in pods {
        builder.pod(pod);
    }
    builder.build().expect("fixture snapshot")
}

/// The Nodes and pods of [`full_cluster`], before a snapshot is built from them.
pub fn full_cluster_objects(
    nodes: usize,
    pending: usize,
) -> (Vec<k8s_openapi::api::core::v1::Node>, Vec<karpenter_api::CompactPod>) {
    let mut fixtures = Vec::with_capacity(nodes);
    for i in 0..nodes {
        let name = format!("node-{i:05}");
        let zone = ["test-zone-1", "test-zone-2", "test-zone-3"][i % 3];
        let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "karpenter.sh/nodepool": "default", "karpenter.sh/initialized": "true",
                "karpenter.sh/capacity-type": "on-demand", "kubernetes.io/hostname": name,
                "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "fake-it-15",
                "topology.kubernetes.io/zone": zone}},
            "spec": {},
            "status": {"allocatable": {"cpu": "1", "memory": "4Gi", "pods": "110"},
                       "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"}}
        }))
        .expect("fixture Node");
        fixtures.push(node);
    }
    let template: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pending", "namespace": "default", "labels": {"app": "pending"},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "pause", "image": "pause",
                                 "resources": {"requests": {"cpu": "1500m", "memory": "256Mi"}}}]}
    }))
    .expect("fixture Pod");
    let template = karpenter_api::CompactPod::from(template);
    let pods = (0..pending)
        .map(|i| {
            let mut pod = template.clone();
            pod.metadata.name = Some(format!("pending-{i:05}"));
            pod.metadata.uid = Some(format!("uid-{i:05}"));
            pod
        })
        .collect();
    (fixtures, pods)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_matches_the_description() {
        let its = catalogue();
        assert_eq!(its.len(), 400);
        let last = &its[399];
        assert_eq!(last.name, "fake-it-399");
        assert_eq!(last.capacity().cpu(), Quantity::from_int(400, Format::DecimalSI));
        assert_eq!(last.capacity().memory(), "800Gi".parse::<Quantity>().unwrap());
        assert_eq!(last.capacity().pods(), Quantity::from_int(4000, Format::DecimalSI));
        assert_eq!(last.allocatable().cpu(), Quantity::from_milli(399_900));
        assert!((last.offerings[0].price - (40.0 + 0.1 * 800.0 * 1.073_741_824)).abs() < 1e-9);
        assert_eq!(last.offerings.len(), 5);
    }

    #[test]
    fn workloads_are_deterministic_and_split_in_five_classes() {
        let a = diverse_pods(1003);
        assert_eq!(a, diverse_pods(1003));
        assert_eq!(a.len(), 1003);
        let count = |prefix: &str| {
            a.iter().filter(|p| p.metadata.name.as_deref().is_some_and(|n| n.starts_with(prefix))).count()
        };
        assert_eq!(count("generic-"), 200 + 3);
        for class in ["zone-spread-", "host-spread-", "zone-affinity-", "host-anti-affinity-"] {
            assert_eq!(count(class), 200, "{class}");
        }
        let groups: std::collections::BTreeSet<&str> =
            a.iter().filter_map(|p| p.metadata.labels.as_ref()?.get("my-affininity").map(String::as_str)).collect();
        assert_eq!(groups.len(), 7);
        let cpus: std::collections::BTreeSet<String> = unconstrained_pods(500)
            .iter()
            .map(|p| {
                p.spec.as_ref().unwrap().containers[0].resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"]
                    .0
                    .clone()
            })
            .collect();
        assert_eq!(cpus.len(), 5, "every CPU size is drawn");
        assert_eq!(preference_pods(10).len(), 10);
    }
}
