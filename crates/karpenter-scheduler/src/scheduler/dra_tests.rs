//! DRA in the solve loop: published devices on existing nodes, instance types' slice templates on new claims,
//! shared and pre-allocated claims, per-pod reasons and `IGNORE_DRA_REQUESTS`.

use karpenter_api::{labels, load_str};
use karpenter_requirements::{
    CounterSet, Device, DeviceAttribute, DeviceSliceTemplate, Format, InstanceType, Offering, Overhead, Quantity,
    Requirement, ResourceList,
};

use super::{PoolInput, SchedulerOptions, Solver, schedule};
use crate::decision::{Decisions, RejectionKind, UnschedulableReason};
use crate::snapshot::ClusterSnapshot;

const DRIVER: &str = "gpu.example.com";

fn gpu(name: &str, model: &str) -> Device {
    Device::named(name)
        .with_attribute("model", DeviceAttribute::String(model.into()))
        .with_capacity("memory", "80Gi".parse().expect("quantity"))
}

/// `cpu-only` (cheapest, no devices) and `gpu-2x` (two A100 GPUs from its slice template).
fn catalogue() -> Vec<InstanceType> {
    [("cpu-only", 1.0, 0usize), ("gpu-2x", 5.0, 2)]
        .into_iter()
        .map(|(name, price, gpus)| {
            let offering = Offering::new(
                [
                    Requirement::in_values(labels::ZONE, ["z"]),
                    Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
                ]
                .into_iter()
                .collect(),
                price,
            );
            let capacity = ResourceList::new()
                .with("cpu", Quantity::from_int(8, Format::DecimalSI))
                .with("pods", Quantity::from_int(100, Format::DecimalSI));
            let it = InstanceType::new(
                name,
                [Requirement::in_values(labels::INSTANCE_TYPE, [name])].into_iter().collect(),
                vec![offering],
                capacity,
                Overhead::default(),
            );
            if gpus == 0 {
                return it;
            }
            let devices = (0..gpus).map(|g| gpu(&format!("gpu-{g}"), "A100")).collect();
            it.with_dynamic_resources(vec![DeviceSliceTemplate {
                driver: DRIVER.into(),
                devices,
                ..Default::default()
            }])
        })
        .collect()
}

const POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n---\n";

const CLASS: &str = "apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {name: gpu}\nspec:\n  selectors: [{cel: {expression: 'device.driver == \"gpu.example.com\"'}}]\n---\n";

/// An initialized, unmanaged node `name` that published one slice with `models` GPUs.
fn node_with_gpus(name: &str, models: &[&str]) -> String {
    let devices: Vec<String> = models
        .iter()
        .enumerate()
        .map(|(i, m)| format!("  - {{name: gpu-{i}, basic: {{attributes: {{model: {{string: {m}}}}}}}}}"))
        .collect();
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}\nstatus: {{allocatable: {{cpu: '8', pods: '100'}}}}\n---\n\
apiVersion: resource.k8s.io/v1beta1\nkind: ResourceSlice\nmetadata: {{name: {name}-gpus}}\nspec:\n  driver: {DRIVER}\n  nodeName: {name}\n  pool: {{name: {name}, generation: 1, resourceSliceCount: 1}}\n  devices:\n{}\n---\n",
        devices.join("\n")
    )
}

/// A ResourceClaim `name` for `count` GPUs of the class, with an optional extra selector.
fn claim(name: &str, count: u32, selector: Option<&str>) -> String {
    let selectors = selector.map(|s| format!(", selectors: [{{cel: {{expression: '{s}'}}}}]")).unwrap_or_default();
    format!(
        "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {{name: {name}, namespace: default}}\nspec: {{devices: {{requests: [{{name: gpus, deviceClassName: gpu, count: {count}{selectors}}}]}}}}\n---\n"
    )
}

/// A pending pod using the named claims.
fn pod(name: &str, claims: &[&str]) -> String {
    let refs: Vec<String> =
        claims.iter().enumerate().map(|(i, c)| format!("{{name: c{i}, resourceClaimName: {c}}}")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec: {{resourceClaims: [{}], containers: [{{name: c, image: x, resources: {{requests: {{cpu: 100m}}}}}}]}}\n---\n",
        refs.join(", ")
    )
}

fn solve_with(yaml: &str, options: &SchedulerOptions) -> Decisions {
    solve_on(yaml, options, catalogue())
}

fn solve_on(yaml: &str, options: &SchedulerOptions, its: Vec<InstanceType>) -> Decisions {
    let objects = load_str(yaml, "input.yaml").expect("input parses");
    let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
    let pools: Vec<PoolInput<'_>> =
        snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: &its }).collect();
    schedule(&snapshot, &pools, &karpenter_testing::vocabulary::aws(), options)
}

fn solve(yaml: &str) -> Decisions {
    solve_with(yaml, &SchedulerOptions { ignore_dra_requests: false, ..Default::default() })
}

fn placed_on<'d>(d: &'d Decisions, pod: &str) -> Option<&'d str> {
    let key = format!("default/{pod}");
    d.existing_nodes
        .iter()
        .find(|n| n.pods.iter().any(|p| *p == key))
        .map(|n| n.name.as_str())
        .or_else(|| d.new_node_claims.iter().find(|c| c.pods.iter().any(|p| *p == key)).map(|c| c.name.as_str()))
}

#[test]
fn ignored_by_default_as_upstream() {
    let yaml =
        format!("{POOL}{CLASS}{}{}{}", node_with_gpus("node-a", &["A100"]), claim("one", 1, None), pod("p", &["one"]));
    let d = solve_with(&yaml, &SchedulerOptions::default());
    assert_eq!(d.unschedulable.len(), 1);
    assert_eq!(d.unschedulable[0].reason, UnschedulableReason::Unsupported { message: super::DRA_IGNORED.into() });
}

#[test]
fn a_container_or_init_container_claim_alone_is_a_dra_requirement_as_upstream() {
    // Upstream's DRA table: a claim named by a container or an init container makes the pod a DRA pod (left out
    // while DRA requests are ignored), even without the pod-level list the API server would require.
    let container = "apiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec:\n  containers: [{name: app, image: x, \
        resources: {requests: {cpu: '1'}, claims: [{name: gpu}]}}]\n---\n";
    let init = "apiVersion: v1\nkind: Pod\nmetadata: {name: i}\nspec:\n  initContainers: [{name: init, image: x, \
        resources: {claims: [{name: gpu}]}}]\n  containers: [{name: app, image: x}]\n---\n";
    let plain = "apiVersion: v1\nkind: Pod\nmetadata: {name: plain}\nspec:\n  containers: [{name: app, image: x}]\n";
    let d = solve_with(&format!("{POOL}{container}{init}{plain}"), &SchedulerOptions::default());
    let mut left_out: Vec<String> = d.unschedulable.iter().map(|u| u.pod.to_string()).collect();
    left_out.sort_unstable();
    assert_eq!(left_out, ["default/c", "default/i"]);
    assert!(
        d.unschedulable
            .iter()
            .all(|u| u.reason == UnschedulableReason::Unsupported { message: super::DRA_IGNORED.into() })
    );
    assert!(placed_on(&d, "plain").is_some());
}

#[test]
fn published_devices_are_used_once_then_templates_launch_a_gpu_node() {
    // node-a has one GPU: the first pod takes it, the second needs a new node whose type brings GPUs.
    let yaml = format!(
        "{POOL}{CLASS}{}{}{}{}{}",
        node_with_gpus("node-a", &["A100"]),
        claim("first", 1, None),
        claim("second", 1, None),
        pod("p1", &["first"]),
        pod("p2", &["second"]),
    );
    let d = solve(&yaml);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    let on: Vec<Option<&str>> = ["p1", "p2"].iter().map(|p| placed_on(&d, p)).collect();
    assert!(on.contains(&Some("node-a")), "{on:?}");
    assert_eq!(d.new_node_claims.len(), 1);
    let new = &d.new_node_claims[0];
    assert_eq!(new.instance_type_names().collect::<Vec<_>>(), ["gpu-2x"], "cpu-only publishes no devices");
    assert_eq!(new.requested_dra_drivers, [DRIVER]);
}

#[test]
fn devices_held_by_allocated_claims_are_not_reused() {
    let held = "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: held, namespace: default}\nspec: {devices: {requests: [{name: gpus, deviceClassName: gpu}]}}\nstatus:\n  allocation:\n    devices: {results: [{request: gpus, driver: gpu.example.com, pool: node-a, device: gpu-0}]}\n---\n";
    let yaml = format!(
        "{POOL}{CLASS}{}{held}{}{}",
        node_with_gpus("node-a", &["A100"]),
        claim("mine", 1, None),
        pod("p", &["mine"])
    );
    let d = solve(&yaml);
    assert_ne!(placed_on(&d, "p"), Some("node-a"), "node-a's only GPU is allocated already");
    assert_eq!(d.new_node_claims.len(), 1);
}

#[test]
fn selectors_pick_devices_and_a_claim_nobody_can_satisfy_gets_a_devices_reason() {
    let want_h100 = r#"device.attributes["gpu.example.com"].model == "H100""#;
    let yaml = format!(
        "{POOL}{CLASS}{}{}{}{}{}{}",
        node_with_gpus("node-a", &["A100"]),
        node_with_gpus("node-b", &["H100"]),
        claim("h100", 1, Some(want_h100)),
        claim("three", 3, None),
        pod("wants-h100", &["h100"]),
        pod("wants-three", &["three"]),
    );
    let d = solve(&yaml);
    assert_eq!(placed_on(&d, "wants-h100"), Some("node-b"));
    let failed = d.unschedulable.iter().find(|u| u.pod == "default/wants-three").expect("three GPUs fit nowhere");
    let rejections = failed.reason.rejections();
    assert_eq!(rejections.len(), 1);
    assert_eq!(rejections[0].kind, RejectionKind::Devices);
    assert_eq!(
        failed.reason.to_string(),
        "NodePool default: no instance type offers the devices of ResourceClaim default/three (request gpus: 3 device(s) of class gpu)"
    );
}

#[test]
fn a_shared_claim_is_allocated_once_and_pins_its_pods_together() {
    // Two pods share one claim for one GPU; node-a and node-b have one GPU each.
    let yaml = format!(
        "{POOL}{CLASS}{}{}{}{}{}",
        node_with_gpus("node-a", &["A100"]),
        node_with_gpus("node-b", &["A100"]),
        claim("shared", 1, None),
        pod("p1", &["shared"]),
        pod("p2", &["shared"]),
    );
    let d = solve(&yaml);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    assert_eq!(placed_on(&d, "p1"), placed_on(&d, "p2"), "one allocation, one node");
    assert!(d.new_node_claims.is_empty());
    // The same on new nodes: both pods on the one claim that allocated it.
    let yaml = format!("{POOL}{CLASS}{}{}{}", claim("shared", 2, None), pod("p1", &["shared"]), pod("p2", &["shared"]));
    let d = solve(&yaml);
    assert_eq!(d.new_node_claims.len(), 1, "{:?}", d.unschedulable);
    assert_eq!(d.new_node_claims[0].pods.len(), 2);
}

#[test]
fn an_allocated_claim_pins_its_pod_to_the_allocations_node() {
    let allocated = "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: done, namespace: default}\nspec: {devices: {requests: [{name: gpus, deviceClassName: gpu}]}}\nstatus:\n  allocation:\n    devices: {results: [{request: gpus, driver: gpu.example.com, pool: node-b, device: gpu-0}]}\n    nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [node-b]}]}]}\n---\n";
    let yaml = format!(
        "{POOL}{CLASS}{}{}{allocated}{}",
        node_with_gpus("node-a", &["A100"]),
        node_with_gpus("node-b", &["A100"]),
        pod("p", &["done"]),
    );
    let d = solve(&yaml);
    assert_eq!(placed_on(&d, "p"), Some("node-b"));
}

#[test]
fn claims_from_templates_are_per_pod() {
    let template = "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaimTemplate\nmetadata: {name: one-gpu, namespace: default}\nspec: {spec: {devices: {requests: [{name: gpu, deviceClassName: gpu}]}}}\n---\n";
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: trainer, namespace: default}\nspec:\n  replicas: 3\n  selector: {matchLabels: {app: t}}\n  template:\n    metadata: {labels: {app: t}}\n    spec:\n      resourceClaims: [{name: gpu, resourceClaimTemplateName: one-gpu}]\n      containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]\n---\n";
    let yaml = format!("{POOL}{CLASS}{}{template}{deployment}", node_with_gpus("node-a", &["A100"]));
    let d = solve(&yaml);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    let on_a = d.existing_nodes.iter().find(|n| n.name == "node-a").map_or(0, |n| n.pods.len());
    assert_eq!(on_a, 1, "node-a's one GPU holds one replica's claim");
    assert_eq!(d.new_node_claims.len(), 1, "a gpu-2x node holds the other two");
    assert_eq!(d.new_node_claims[0].pods.len(), 2);
}

#[test]
fn unresolvable_claims_are_per_pod_reasons() {
    let bad_cel = "apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {name: broken}\nspec: {selectors: [{cel: {expression: 'device.driver =='}}]}\n---\n\
apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: uses-broken, namespace: default}\nspec: {devices: {requests: [{name: r, deviceClassName: broken}]}}\n---\n\
apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: no-class, namespace: default}\nspec: {devices: {requests: [{name: r, deviceClassName: nope}]}}\n---\n";
    let yaml = format!(
        "{POOL}{CLASS}{bad_cel}{}{}{}",
        pod("missing", &["ghost"]),
        pod("broken", &["uses-broken"]),
        pod("classless", &["no-class"])
    );
    let d = solve(&yaml);
    let reason = |p: &str| {
        d.unschedulable
            .iter()
            .find(|u| u.pod == format!("default/{p}"))
            .map(|u| (u.reason.code(), u.reason.to_string()))
    };
    assert_eq!(reason("missing"), Some(("ResourceClaims", "ResourceClaim default/ghost not found".into())));
    let (code, message) = reason("broken").expect("broken CEL");
    assert_eq!(code, "ResourceClaims");
    assert!(message.starts_with("DeviceClass broken: invalid CEL selector \"device.driver ==\""), "{message}");
    assert_eq!(reason("classless"), Some(("ResourceClaims", "DeviceClass \"nope\" not found".into())));
}

#[test]
fn pods_without_claims_leave_the_dra_state_out() {
    let yaml = format!("{POOL}{CLASS}{}{}", node_with_gpus("node-a", &["A100"]), pod("plain", &[]));
    let objects = load_str(&yaml, "input.yaml").expect("input parses");
    let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
    let its = catalogue();
    let pools = [PoolInput { node_pool: &snapshot.node_pools[0], instance_types: &its }];
    let provider = karpenter_testing::vocabulary::aws();
    let options = SchedulerOptions { ignore_dra_requests: false, ..Default::default() };
    let solver = Solver::new(&snapshot, &pools, &provider, &options);
    assert!(solver.dra.is_none(), "no pod has claims: no per-solve DRA state, no check in the hot path");
    assert_eq!(solver.solve(&mut |_| false).existing_nodes[0].name, "node-a");
}

#[test]
fn a_device_failure_relaxes_no_preference() {
    // The first required term allows only `cpu-only` (no devices); the second would allow `gpu-2x`. Upstream
    // does not relax on a DRA error, so the pod stays pending instead of trying the second term.
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: picky, namespace: default}\nspec:\n  resourceClaims: [{name: c, resourceClaimName: one}]\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms:\n        - matchExpressions: [{key: node.kubernetes.io/instance-type, operator: In, values: [cpu-only]}]\n        - matchExpressions: [{key: node.kubernetes.io/instance-type, operator: In, values: [gpu-2x]}]\n  containers: [{name: c, image: x, resources: {requests: {cpu: 100m}}}]\n---\n";
    let d = solve(&format!("{POOL}{CLASS}{}{pod}", claim("one", 1, None)));
    assert_eq!(d.unschedulable.len(), 1, "{:?}", d.new_node_claims);
    assert_eq!(d.unschedulable[0].reason.rejections()[0].kind, RejectionKind::Devices);
    // Without the claim the same pod is placed (on cpu-only: the first term).
    let plain = pod.replace("  resourceClaims: [{name: c, resourceClaimName: one}]\n", "");
    let d = solve(&format!("{POOL}{plain}"));
    assert_eq!(d.new_node_claims[0].instance_type_names().collect::<Vec<_>>(), ["cpu-only"]);
}

#[test]
fn an_in_flight_claim_offers_its_instance_types_template_devices() {
    // A launched gpu-2x NodeClaim without its node yet: its two template GPUs take two claims; the third pod
    // needs a new node. The same claim with two instance-type options offers nothing (which type launches is open).
    let in_flight = |types: &str| {
        format!(
            "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: default-abc, labels: {{karpenter.sh/nodepool: default}}}}\n\
spec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}\n  requirements: [{{key: node.kubernetes.io/instance-type, operator: In, values: [{types}]}}]\n\
status: {{providerID: 'aws:///z/i-1', capacity: {{cpu: '8', pods: '100'}}, allocatable: {{cpu: '8', pods: '100'}}}}\n---\n"
        )
    };
    let pods: String =
        (1..=3).map(|i| claim(&format!("c{i}"), 1, None) + &pod(&format!("p{i}"), &[&format!("c{i}")])).collect();
    let d = solve(&format!("{POOL}{CLASS}{}{pods}", in_flight("gpu-2x")));
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    let on_claim = d.existing_nodes.iter().find(|n| n.name == "default-abc").map_or(0, |n| n.pods.len());
    assert_eq!(on_claim, 2, "{d:?}");
    assert_eq!(d.new_node_claims.len(), 1);
    let d = solve(&format!("{POOL}{CLASS}{}{pods}", in_flight("cpu-only, gpu-2x")));
    assert!(d.existing_nodes.iter().all(|n| n.name != "default-abc"), "{d:?}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]
    /// Whatever the nodes publish and the pods ask, no node gets more GPUs' worth of claims than it published,
    /// no new node more than its type's template holds, and every pod placed or not has a reason.
    #[test]
    fn placements_never_overcommit_devices(
        gpus in proptest::collection::vec(0usize..4, 1..4),
        asks in proptest::collection::vec(1u32..4, 1..8),
    ) {
        let mut yaml = format!("{POOL}{CLASS}");
        for (n, count) in gpus.iter().enumerate() {
            let models = vec!["A100"; *count];
            if models.is_empty() {
                yaml.push_str(&format!(
                    "apiVersion: v1\nkind: Node\nmetadata: {{name: n{n}, labels: {{kubernetes.io/hostname: n{n}}}}}\nstatus: {{allocatable: {{cpu: '8', pods: '100'}}}}\n---\n"
                ));
            } else {
                yaml.push_str(&node_with_gpus(&format!("n{n}"), &models));
            }
        }
        for (p, ask) in asks.iter().enumerate() {
            yaml.push_str(&claim(&format!("c{p}"), *ask, None));
            yaml.push_str(&pod(&format!("p{p}"), &[&format!("c{p}")]));
        }
        let d = solve(&yaml);
        let ask_of = |key: &str| -> u32 {
            key.strip_prefix("default/p").and_then(|i| i.parse::<usize>().ok()).and_then(|i| asks.get(i)).copied().unwrap_or(0)
        };
        for node in &d.existing_nodes {
            let published = node.name.strip_prefix('n').and_then(|i| i.parse::<usize>().ok()).and_then(|i| gpus.get(i)).copied().unwrap_or(0);
            let used: u32 = node.pods.iter().map(|p| ask_of(p.as_str())).sum();
            proptest::prop_assert!(used as usize <= published, "{}: {used} > {published}", node.name);
        }
        for claim in &d.new_node_claims {
            let used: u32 = claim.pods.iter().map(|p| ask_of(p.as_str())).sum();
            proptest::prop_assert!(used <= 2, "{}: {used} GPUs on a gpu-2x", claim.name);
            proptest::prop_assert_eq!(claim.instance_type_names().collect::<Vec<_>>(), vec!["gpu-2x"]);
            proptest::prop_assert_eq!(&claim.requested_dra_drivers, &vec![DRIVER.to_string()]);
        }
        // A pod asking for more than any node or type holds is the only kind left over.
        for u in &d.unschedulable {
            proptest::prop_assert!(ask_of(u.pod.as_str()) > 2, "{} ({}) should have fit a new gpu-2x", u.pod, u.reason);
        }
        proptest::prop_assert_eq!(d.placed_pods() + d.unschedulable.len(), asks.len());
    }
}

#[test]
fn disruption_simulations_keep_a_pod_with_an_allocated_claim_on_its_node() {
    use crate::simulation::{SimulationView, Simulator};
    use std::collections::BTreeSet;
    // p runs on node-a with its claim allocated to node-a's GPU; node-b has a free GPU. Removing node-a cannot
    // move p: its claim stays pinned to node-a (docs/dra.md, limits). A pod whose claim is not allocated yet
    // moves to node-b's GPU.
    let allocated = "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: held, namespace: default}\nspec: {devices: {requests: [{name: gpus, deviceClassName: gpu}]}}\nstatus:\n  allocation:\n    devices: {results: [{request: gpus, driver: gpu.example.com, pool: node-a, device: gpu-0}]}\n    nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [node-a]}]}]}\n---\n";
    let bound = |name: &str, claim: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec: {{nodeName: node-a, resourceClaims: [{{name: c, resourceClaimName: {claim}}}], containers: [{{name: c, image: x, resources: {{requests: {{cpu: 100m}}}}}}]}}\n---\n"
        )
    };
    for (claim, extra, moves) in [("held", allocated.to_owned(), false), ("free", claim("free", 1, None), true)] {
        let yaml = format!(
            "{POOL}{CLASS}{}{}{extra}{}",
            node_with_gpus("node-a", &["A100"]),
            node_with_gpus("node-b", &["A100"]),
            bound("p", claim)
        );
        let objects = load_str(&yaml, "input.yaml").expect("input parses");
        let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let its = catalogue();
        let pools = [PoolInput { node_pool: &snapshot.node_pools[0], instance_types: &its }];
        let provider = karpenter_testing::vocabulary::aws();
        let options = SchedulerOptions { ignore_dra_requests: false, ..Default::default() };
        let sim = Simulator::new(&snapshot, &pools, &provider, &options);
        let removed = BTreeSet::from(["node-a".to_string()]);
        let view =
            SimulationView { removed: &removed, pods: snapshot.pods_on("node-a").collect(), ..Default::default() };
        let d = sim.simulate(&view);
        if moves {
            assert_eq!(d.existing_nodes.first().map(|n| n.name.as_str()), Some("node-b"), "{d:?}");
        } else {
            assert_eq!(d.unschedulable.len(), 1, "{d:?}");
            let reason = d.unschedulable[0].reason.to_string();
            assert!(reason.contains("ResourceClaim default/held is allocated to devices of another node"), "{reason}");
        }
    }
}

/// A node `name` publishing, at `resource.k8s.io/v1`, `devices` (flow-style YAML list items) and `counters`.
fn node_v1(name: &str, devices: &[&str], counters: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}, labels: {{kubernetes.io/hostname: {name}}}}}\nstatus: {{allocatable: {{cpu: '8', pods: '100'}}}}\n---\n\
apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}-gpus}}\nspec:\n  driver: {DRIVER}\n  nodeName: {name}\n  pool: {{name: {name}, generation: 1, resourceSliceCount: 1}}\n  sharedCounters: [{counters}]\n  devices: [{}]\n---\n",
        devices.join(", ")
    )
}

/// A v1 ResourceClaim `name` with `requests` (flow-style YAML list items) and `constraints`.
fn claim_v1(name: &str, requests: &[&str], constraints: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, namespace: default}}\nspec: {{devices: {{requests: [{}], constraints: [{constraints}]}}}}\n---\n",
        requests.join(", ")
    )
}

fn gpu_v1(name: &str, model: &str, numa: i64) -> String {
    format!("{{name: {name}, attributes: {{model: {{string: {model}}}, numa: {{int: {numa}}}}}}}")
}

#[test]
fn match_attribute_backtracks_to_devices_sharing_the_value() {
    // gpu-0 (A100, numa 0) is the first A100, but only gpu-1 shares numa 1 with the H100.
    let node =
        node_v1("node-a", &[&gpu_v1("gpu-0", "A100", 0), &gpu_v1("gpu-1", "A100", 1), &gpu_v1("gpu-2", "H100", 1)], "");
    let requests = [
        "{name: a, exactly: {deviceClassName: gpu, selectors: [{cel: {expression: 'device.attributes[\"gpu.example.com\"].model == \"A100\"'}}]}}",
        "{name: h, exactly: {deviceClassName: gpu, selectors: [{cel: {expression: 'device.attributes[\"gpu.example.com\"].model == \"H100\"'}}]}}",
    ];
    let constraint = "{matchAttribute: gpu.example.com/numa}";
    let yaml = format!(
        "{POOL}{CLASS}{node}{}{}{}{}",
        claim_v1("first", &requests, constraint),
        claim_v1("second", &requests, constraint),
        pod("p1", &["first"]),
        pod("p2", &["second"]),
    );
    let d = solve(&yaml);
    assert_eq!(placed_on(&d, "p1"), Some("node-a"), "{:?}", d.unschedulable);
    // The second claim finds gpu-0 alone (no H100 left); the templates' GPUs have no numa attribute.
    assert_eq!(d.unschedulable.len(), 1);
    let reason = d.unschedulable[0].reason.to_string();
    assert!(reason.contains("the same gpu.example.com/numa for all requests"), "{reason}");
}

#[test]
fn tainted_devices_go_only_to_tolerating_requests() {
    let tainted =
        "{name: gpu-0, attributes: {model: {string: A100}}, taints: [{key: maintenance, effect: NoSchedule}]}";
    let node = node_v1("node-a", &[tainted], "");
    let plain = claim_v1("plain", &["{name: g, exactly: {deviceClassName: gpu}}"], "");
    let tolerating = claim_v1(
        "tolerating",
        &["{name: g, exactly: {deviceClassName: gpu, tolerations: [{key: maintenance, operator: Exists}]}}"],
        "",
    );
    let yaml = format!("{POOL}{CLASS}{node}{plain}{tolerating}{}{}", pod("p1", &["plain"]), pod("p2", &["tolerating"]));
    let d = solve(&yaml);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    assert_eq!(placed_on(&d, "p2"), Some("node-a"));
    assert_ne!(placed_on(&d, "p1"), Some("node-a"), "the untolerated taint keeps the plain claim off gpu-0");
    assert_eq!(d.new_node_claims.len(), 1);

    // Only a tainted H100 anywhere: the reason names the taint.
    let h100 = "{name: gpu-0, attributes: {model: {string: H100}}, taints: [{key: maintenance, value: planned, effect: NoExecute}]}";
    let wants = claim("h100", 1, Some(r#"device.attributes["gpu.example.com"].model == "H100""#));
    let d = solve(&format!("{POOL}{CLASS}{}{wants}{}", node_v1("node-a", &[h100], ""), pod("p", &["h100"])));
    let reason = d.unschedulable.first().map(|u| u.reason.to_string()).unwrap_or_default();
    assert!(
        reason.contains("(the matching devices have taints it does not tolerate: maintenance=planned:NoExecute)"),
        "{reason}"
    );
}

#[test]
fn admin_access_shares_a_device_in_use() {
    let node = node_v1("node-a", &[&gpu_v1("gpu-0", "A100", 0)], "");
    let held = "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {name: held, namespace: default}\nspec: {devices: {requests: [{name: g, deviceClassName: gpu}]}}\nstatus:\n  allocation:\n    devices: {results: [{request: g, driver: gpu.example.com, pool: node-a, device: gpu-0}]}\n---\n";
    let admin = claim_v1("monitor", &["{name: g, exactly: {deviceClassName: gpu, adminAccess: true}}"], "");
    let also = claim_v1("monitor-2", &["{name: g, exactly: {deviceClassName: gpu, adminAccess: true}}"], "");
    let plain = claim_v1("plain", &["{name: g, exactly: {deviceClassName: gpu}}"], "");
    let yaml = format!(
        "{POOL}{CLASS}{node}{held}{admin}{also}{plain}{}{}{}",
        pod("m1", &["monitor"]),
        pod("m2", &["monitor-2"]),
        pod("p", &["plain"])
    );
    let d = solve(&yaml);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    assert_eq!(placed_on(&d, "m1"), Some("node-a"), "admin access may use the held device");
    assert_eq!(placed_on(&d, "m2"), Some("node-a"), "and takes it from nobody");
    assert_ne!(placed_on(&d, "p"), Some("node-a"), "a plain request still finds gpu-0 held");
}

#[test]
fn partitions_share_their_counters() {
    // Four partitions of one 80Gi GPU, 40Gi each: two fit at a time.
    let parts: Vec<String> = (0..4)
        .map(|i| format!("{{name: part-{i}, attributes: {{model: {{string: A100}}}}, consumesCounters: [{{counterSet: gpu-0, counters: {{memory: {{value: 40Gi}}}}}}]}}"))
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let node = node_v1("node-a", &parts, "{name: gpu-0, counters: {memory: {value: 80Gi}}}");
    let claims: String = (0..3).map(|i| claim(&format!("c{i}"), 1, None)).collect();
    let pods: String = (0..3).map(|i| pod(&format!("p{i}"), &[&format!("c{i}")])).collect();
    let d = solve(&format!("{POOL}{CLASS}{node}{claims}{pods}"));
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    let on_a = (0..3).filter(|i| placed_on(&d, &format!("p{i}")) == Some("node-a")).count();
    assert_eq!(on_a, 2, "the counter holds two partitions");
    assert_eq!(d.new_node_claims.len(), 1);
}

#[test]
fn template_partitions_share_each_new_nodes_counters() {
    // gpu-2x's template: four partitions of one 80Gi GPU, 40Gi each; a node holds two of them at a time.
    let its: Vec<InstanceType> = catalogue()
        .into_iter()
        .map(|it| {
            if it.dynamic_resources.is_empty() {
                return it;
            }
            let memory = |q: &str| [("memory".to_owned(), q.parse::<Quantity>().expect("quantity"))].into();
            let devices = (0..4)
                .map(|i| Device {
                    consumes_counters: vec![CounterSet { name: "gpu-0".into(), counters: memory("40Gi") }],
                    ..gpu(&format!("part-{i}"), "A100")
                })
                .collect();
            let shared_counters = vec![CounterSet { name: "gpu-0".into(), counters: memory("80Gi") }];
            it.with_dynamic_resources(vec![DeviceSliceTemplate { driver: DRIVER.into(), devices, shared_counters }])
        })
        .collect();
    let claims: String = (0..3).map(|i| claim(&format!("c{i}"), 1, None)).collect();
    let pods: String = (0..3).map(|i| pod(&format!("p{i}"), &[&format!("c{i}")])).collect();
    let options = SchedulerOptions { ignore_dra_requests: false, ..Default::default() };
    let d = solve_on(&format!("{POOL}{CLASS}{claims}{pods}"), &options, its);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    let mut per_node: Vec<usize> = d.new_node_claims.iter().map(|c| c.pods.len()).collect();
    per_node.sort_unstable();
    assert_eq!(per_node, [1, 2], "the counter holds two partitions per node");
}

const NET: &str = "net.example.com";

const NET_CLASS: &str = "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: net}\nspec:\n  selectors: [{cel: {expression: 'device.driver == \"net.example.com\"'}}]\n---\n";

/// A published `net.example.com` slice of `devices` accelerators seen by `nodes` (`allNodes: true` or a
/// `nodeSelector: ...`), e.g. network-attached ones.
fn shared_slice(name: &str, nodes: &str, devices: usize) -> String {
    let devices: Vec<String> = (0..devices).map(|i| format!("{{name: acc-{i}}}")).collect();
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}}}\nspec:\n  driver: {NET}\n  {nodes}\n  pool: {{name: {name}, generation: 1, resourceSliceCount: 1}}\n  devices: [{}]\n---\n",
        devices.join(", ")
    )
}

fn net_claim(name: &str) -> String {
    claim_v1(name, &["{name: a, exactly: {deviceClassName: net}}"], "")
}

#[test]
fn all_nodes_devices_serve_new_nodes_once_each_and_wait_for_no_driver() {
    // One network-attached accelerator for the whole cluster: the first pod's new node uses it (the cheapest
    // type does, as it needs no device of its own), the second finds it taken.
    let yaml = format!(
        "{POOL}{NET_CLASS}{}{}{}{}{}",
        shared_slice("fabric", "allNodes: true", 1),
        net_claim("n1"),
        net_claim("n2"),
        pod("p1", &["n1"]),
        pod("p2", &["n2"]),
    );
    let d = solve(&yaml);
    assert_eq!(d.new_node_claims.len(), 1, "{d:?}");
    let new = &d.new_node_claims[0];
    assert_eq!(new.pods.len(), 1);
    assert!(new.instance_type_names().any(|n| n == "cpu-only"), "{:?}", new.instance_types);
    assert!(new.requested_dra_drivers.is_empty(), "published devices have nothing to wait for");
    assert_eq!(d.unschedulable.len(), 1, "one allocation per shared device: {d:?}");
    assert!(d.unschedulable[0].reason.to_string().contains("no instance type offers the devices of ResourceClaim"));

    // A pod using its node's GPU and a shared accelerator: only the GPU's driver is waited for.
    let both = format!(
        "{POOL}{CLASS}{NET_CLASS}{}{}{}{}",
        shared_slice("fabric", "allNodes: true", 1),
        claim("gpu", 1, None),
        net_claim("n1"),
        pod("p", &["gpu", "n1"]),
    );
    let d = solve(&both);
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    assert_eq!(d.new_node_claims[0].instance_type_names().collect::<Vec<_>>(), ["gpu-2x"]);
    assert_eq!(d.new_node_claims[0].requested_dra_drivers, [DRIVER]);
}

#[test]
fn node_selector_devices_serve_a_new_node_only_when_the_selector_is_certain() {
    let on_type = "nodeSelector: {nodeSelectorTerms: [{matchExpressions: [{key: node.kubernetes.io/instance-type, operator: In, values: [cpu-only]}]}]}";
    let yaml = |nodes: &str, pool: &str| {
        format!("{pool}{NET_CLASS}{}{}{}", shared_slice("rack", nodes, 2), net_claim("n1"), pod("p", &["n1"]))
    };
    // Implied by the instance type's own requirement: a cpu-only node sees the slice.
    let d = solve(&yaml(on_type, POOL));
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    assert_eq!(d.new_node_claims[0].instance_type_names().collect::<Vec<_>>(), ["cpu-only"]);

    // A zone selector: the NodePool must pin the zone for the node to be certain to match.
    let in_zone = "nodeSelector: {nodeSelectorTerms: [{matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [z, y]}]}]}";
    let d = solve(&yaml(in_zone, POOL));
    assert_eq!(d.unschedulable.len(), 1, "the zone is open: {d:?}");
    let pinned = POOL
        .replace("requirements: []", "requirements: [{key: topology.kubernetes.io/zone, operator: In, values: [z]}]");
    let d = solve(&yaml(in_zone, &pinned));
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    // A node name is never certain for a node not launched yet.
    let by_name =
        "nodeSelector: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [a]}]}]}";
    assert_eq!(solve(&yaml(by_name, &pinned)).unschedulable.len(), 1);
}

#[test]
fn an_in_flight_claim_shares_all_nodes_devices_with_new_nodes() {
    // The in-flight cpu-only NodeClaim takes the one accelerator; the second pod finds none left.
    let in_flight = "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: default-abc, labels: {karpenter.sh/nodepool: default}}\n\
spec:\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [cpu-only]}]\n\
status: {providerID: 'aws:///z/i-1', capacity: {cpu: '8', pods: '100'}, allocatable: {cpu: '8', pods: '100'}}\n---\n";
    let yaml = format!(
        "{POOL}{NET_CLASS}{in_flight}{}{}{}{}{}",
        shared_slice("fabric", "allNodes: true", 1),
        net_claim("n1"),
        net_claim("n2"),
        pod("p1", &["n1"]),
        pod("p2", &["n2"]),
    );
    let d = solve(&yaml);
    assert_eq!(placed_on(&d, "p1"), Some("default-abc"), "{d:?}");
    assert!(d.new_node_claims.is_empty(), "{d:?}");
    assert_eq!(d.unschedulable.len(), 1);
}

/// A `resource.k8s.io/v1` slice of node-a's pool at `generation` of `count` slices, with one GPU `model`.
fn pool_slice(name: &str, generation: i64, count: i64, model: &str) -> String {
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}}}\nspec:\n  driver: {DRIVER}\n  nodeName: node-a\n  pool: {{name: node-a, generation: {generation}, resourceSliceCount: {count}}}\n  devices: [{{name: {name}, attributes: {{model: {{string: {model}}}}}}}]\n---\n"
    )
}

#[test]
fn only_complete_pools_of_the_newest_generation_are_offered() {
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: node-a, labels: {kubernetes.io/hostname: node-a}}\nstatus: {allocatable: {cpu: '8', pods: '100'}}\n---\n";
    let h100 = claim("h100", 1, Some(r#"device.attributes["gpu.example.com"].model == "H100""#));
    let run = |slices: &str| solve(&format!("{POOL}{CLASS}{node}{slices}{h100}{}", pod("p", &["h100"])));
    // The pool says two slices; one is here: nothing of it is offered, and the reason says why.
    let d = run(&pool_slice("s1", 1, 2, "H100"));
    assert_eq!(d.unschedulable.len(), 1, "{d:?}");
    let reason = d.unschedulable[0].reason.to_string();
    assert!(
        reason.contains("not offered while their pool is incomplete: gpu.example.com pool node-a has 1 of its 2 slices of generation 1"),
        "{reason}"
    );
    // Both slices: the pool is complete.
    let d = run(&format!("{}{}", pool_slice("s1", 1, 2, "H100"), pool_slice("s2", 1, 2, "A100")));
    assert_eq!(placed_on(&d, "p"), Some("node-a"), "{d:?}");
    // A slice of an older generation is stale: the newest one (complete on its own) replaced it.
    let d = run(&format!("{}{}", pool_slice("old", 1, 1, "H100"), pool_slice("new", 2, 1, "A100")));
    assert_eq!(d.unschedulable.len(), 1, "{d:?}");
    assert!(!d.unschedulable[0].reason.to_string().contains("incomplete"), "a complete newest generation");
    let d = run(&format!("{}{}", pool_slice("old", 1, 1, "A100"), pool_slice("new", 2, 1, "H100")));
    assert_eq!(placed_on(&d, "p"), Some("node-a"), "{d:?}");
}

#[test]
fn distinct_attribute_spreads_devices_over_values() {
    // Two GPUs on numa 0, one on numa 1: a claim for two on different NUMA nodes must take the numa-1 one, so
    // a second such claim finds only numa 0 left (and the templates' GPUs have no numa attribute).
    let node =
        node_v1("node-a", &[&gpu_v1("gpu-0", "A100", 0), &gpu_v1("gpu-1", "A100", 0), &gpu_v1("gpu-2", "A100", 1)], "");
    let two = ["{name: g, exactly: {deviceClassName: gpu, count: 2}}"];
    let distinct = "{distinctAttribute: gpu.example.com/numa}";
    let yaml = format!(
        "{POOL}{CLASS}{node}{}{}{}{}",
        claim_v1("first", &two, distinct),
        claim_v1("second", &two, distinct),
        pod("p1", &["first"]),
        pod("p2", &["second"]),
    );
    let d = solve(&yaml);
    assert_eq!(placed_on(&d, "p1"), Some("node-a"), "{d:?}");
    assert_eq!(d.unschedulable.len(), 1, "{d:?}");
    let reason = d.unschedulable[0].reason.to_string();
    assert!(reason.contains("a different gpu.example.com/numa for all requests"), "{reason}");
    // Without the constraint both claims fit: two plus one would not, so the second goes to a new node.
    let d = solve(&yaml.replace(distinct, ""));
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]
    /// However many existing nodes and pods there are, the shared accelerators of an all-nodes slice are handed
    /// out at most once across every candidate (existing and new), and no new node waits for their driver.
    #[test]
    fn shared_devices_are_never_handed_out_twice(
        shared in 0usize..5,
        nodes in 0usize..3,
        asks in proptest::collection::vec(1usize..3, 1..7),
    ) {
        let mut yaml = format!("{POOL}{NET_CLASS}{}", shared_slice("fabric", "allNodes: true", shared));
        for n in 0..nodes {
            yaml.push_str(&format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: n{n}, labels: {{kubernetes.io/hostname: n{n}}}}}\nstatus: {{allocatable: {{cpu: '8', pods: '100'}}}}\n---\n"
            ));
        }
        for (p, ask) in asks.iter().enumerate() {
            let request = format!("{{name: a, exactly: {{deviceClassName: net, count: {ask}}}}}");
            yaml.push_str(&claim_v1(&format!("c{p}"), &[&request], ""));
            yaml.push_str(&pod(&format!("p{p}"), &[&format!("c{p}")]));
        }
        let d = solve(&yaml);
        let ask_of = |key: &str| -> usize {
            key.strip_prefix("default/p").and_then(|i| i.parse::<usize>().ok()).and_then(|i| asks.get(i)).copied().unwrap_or(0)
        };
        let on_existing = d.existing_nodes.iter().flat_map(|n| &n.pods);
        let on_new = d.new_node_claims.iter().flat_map(|c| &c.pods);
        let used: usize = on_existing.chain(on_new).map(|p| ask_of(p.as_str())).sum();
        proptest::prop_assert!(used <= shared, "{used} accelerators handed out of {shared}: {d:?}");
        for claim in &d.new_node_claims {
            proptest::prop_assert!(claim.requested_dra_drivers.is_empty(), "{:?}", claim.requested_dra_drivers);
        }
        proptest::prop_assert_eq!(d.placed_pods() + d.unschedulable.len(), asks.len());
        // A pod is left out only when what is left cannot hold it (what is left only shrinks during the pass).
        for u in &d.unschedulable {
            proptest::prop_assert!(ask_of(u.pod.as_str()) > shared - used, "{} fits the {} left: {d:?}", u.pod, shared - used);
        }
    }
}

#[test]
fn a_claim_allocated_on_a_node_selector_slice_may_go_to_a_new_node_that_certainly_matches() {
    let selector = "{nodeSelectorTerms: [{matchExpressions: [{key: node.kubernetes.io/instance-type, operator: In, values: [cpu-only]}]}]}";
    let allocated = |selector: &str| {
        format!(
            "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {{name: held, namespace: default}}\nspec: {{devices: {{requests: [{{name: a, deviceClassName: net}}]}}}}\nstatus:\n  allocation:\n    devices: {{results: [{{request: a, driver: {NET}, pool: rack, device: acc-0}}]}}\n    nodeSelector: {selector}\n---\n"
        )
    };
    let yaml = |selector: &str| {
        format!(
            "{POOL}{NET_CLASS}{}{}{}",
            shared_slice("rack", &format!("nodeSelector: {selector}"), 1),
            allocated(selector),
            pod("p", &["held"])
        )
    };
    let d = solve(&yaml(selector));
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    assert_eq!(
        d.new_node_claims[0].instance_type_names().collect::<Vec<_>>(),
        ["cpu-only"],
        "the allocation's nodes: cpu-only ones"
    );
    assert!(d.new_node_claims[0].requested_dra_drivers.is_empty());
    // A selector a new node cannot be certain of (a node name): the pod waits.
    let by_name = "{nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [a]}]}]}";
    let d = solve(&yaml(by_name));
    assert_eq!(d.unschedulable.len(), 1, "{d:?}");
    assert!(d.unschedulable[0].reason.to_string().contains("is allocated to devices of another node"));
}
