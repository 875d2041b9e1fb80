//! DRA without the `dra-cel` feature: devices of a class without selectors are still allocated, and a CEL
//! selector (on the class or on the request) makes the pod unschedulable with a reason naming the feature,
//! never a match that skips the selector.

use karpenter_api::{labels, load_str};
use karpenter_requirements::{Format, InstanceType, Offering, Overhead, Quantity, Requirement, ResourceList};

use super::{PoolInput, SchedulerOptions, schedule};
use crate::decision::Decisions;
use crate::snapshot::ClusterSnapshot;

const POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n---\n";

/// A node with one published GPU, whose model the selectors below pick or reject.
const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: node-a, labels: {kubernetes.io/hostname: node-a}}\nstatus: {allocatable: {cpu: '8', pods: '100'}}\n---\n\
apiVersion: resource.k8s.io/v1beta1\nkind: ResourceSlice\nmetadata: {name: node-a-gpus}\nspec:\n  driver: gpu.example.com\n  nodeName: node-a\n  pool: {name: node-a, generation: 1, resourceSliceCount: 1}\n  devices:\n  - {name: gpu-0, basic: {attributes: {model: {string: A100}}}}\n---\n";

/// Device class `name`, with a CEL selector when `cel` is given.
fn class(name: &str, cel: Option<&str>) -> String {
    let spec = cel.map_or("{}".to_owned(), |e| format!("{{selectors: [{{cel: {{expression: '{e}'}}}}]}}"));
    format!("apiVersion: resource.k8s.io/v1beta1\nkind: DeviceClass\nmetadata: {{name: {name}}}\nspec: {spec}\n---\n")
}

/// Pod `name` with its own ResourceClaim for one device of `class`, with a request selector when `cel` is given.
fn pod_claiming(name: &str, class: &str, cel: Option<&str>) -> String {
    let selectors = cel.map(|e| format!(", selectors: [{{cel: {{expression: '{e}'}}}}]")).unwrap_or_default();
    format!(
        "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\nmetadata: {{name: {name}-claim, namespace: default}}\nspec: {{devices: {{requests: [{{name: r, deviceClassName: {class}{selectors}}}]}}}}\n---\n\
apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec: {{resourceClaims: [{{name: c, resourceClaimName: {name}-claim}}], containers: [{{name: c, image: x, resources: {{requests: {{cpu: 100m}}}}}}]}}\n---\n"
    )
}

/// One CPU-only instance type: a pod that needs a device can only go to node-a.
fn solve(yaml: &str) -> Decisions {
    let offering = Offering::new(
        [Requirement::in_values(labels::ZONE, ["z"]), Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"])]
            .into_iter()
            .collect(),
        1.0,
    );
    let capacity = ResourceList::new()
        .with("cpu", Quantity::from_int(8, Format::DecimalSI))
        .with("pods", Quantity::from_int(100, Format::DecimalSI));
    let its = vec![InstanceType::new(
        "cpu-only",
        [Requirement::in_values(labels::INSTANCE_TYPE, ["cpu-only"])].into_iter().collect(),
        vec![offering],
        capacity,
        Overhead::default(),
    )];
    let objects = load_str(yaml, "input.yaml").expect("input parses");
    let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
    let pools: Vec<PoolInput<'_>> =
        snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: &its }).collect();
    let options = SchedulerOptions { ignore_dra_requests: false, ..Default::default() };
    schedule(&snapshot, &pools, &karpenter_testing::vocabulary::aws(), &options)
}

#[test]
fn cel_selectors_are_refused_naming_the_feature_and_plain_classes_still_allocate() {
    // The selector would match node-a's GPU: without the feature the pod must still not be placed by it.
    let matching = r#"device.attributes["gpu.example.com"].model == "A100""#;
    let yaml = format!(
        "{POOL}{NODE}{}{}{}{}{}",
        class("any-gpu", None),
        class("a100", Some(matching)),
        pod_claiming("plain", "any-gpu", None),
        pod_claiming("by-class", "a100", None),
        pod_claiming("by-request", "any-gpu", Some(matching)),
    );
    let d = solve(&yaml);
    let on_node_a = d.existing_nodes.iter().find(|n| n.name == "node-a").map(|n| n.pods.clone()).unwrap_or_default();
    assert_eq!(on_node_a, vec!["default/plain".to_owned()], "only the selector-free claim gets the GPU");
    let reason = |p: &str| {
        d.unschedulable
            .iter()
            .find(|u| u.pod == format!("default/{p}"))
            .map(|u| (u.reason.code(), u.reason.to_string()))
            .unwrap_or_else(|| panic!("{p} is not unschedulable: {d:?}"))
    };
    for (pod, whose) in [("by-class", "DeviceClass a100"), ("by-request", "request r")] {
        let (code, message) = reason(pod);
        assert_eq!(code, "ResourceClaims", "{pod}: {message}");
        assert!(message.starts_with(whose), "{pod}: {message}");
        assert!(message.contains("`dra-cel` feature"), "{pod}: {message}");
    }
}
