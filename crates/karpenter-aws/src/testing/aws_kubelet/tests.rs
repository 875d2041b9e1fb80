//! The stand-in's boot against [`MockEc2`] with launches through the provider: the real kubelet's verdict on the
//! user data decides, its message is kept, and an accepted boot builds the Node a kubelet registers. Skipped where
//! the kubelet judge is missing (a failure under `CI=true`).

use std::sync::Arc;

use crate::api::{GROUP, KIND};
use karpenter_api::labels::{CAPACITY_TYPE, NODE_POOL, OS};
use karpenter_api::nodeclaim::{NodeClassReference, Taint as ClaimTaint, TaintEffect};
use karpenter_cloudprovider::{CloudProvider, InMemoryNodeClasses};
use karpenter_testing::FakeClock;
use karpenter_testing::karpenter::{NodeClaimOptions, node_claim};
use karpenter_testing::nodepool_requirement;
use serde_json::json;

use super::*;
use crate::instancetypes::SharedPrices;
use crate::launch::instance::ClusterInfo;
use crate::launch::mock::instance_type_info;
use crate::pricing::{PriceSource, PriceTable};
use crate::provider::{AwsCloudProvider, AwsCloudProviderOptions};

/// A provider over a fresh [`MockEc2`] whose class `default` (AL2023, Ready) has `spec` merged in.
fn provider(spec: serde_json::Value) -> (MockEc2, AwsCloudProvider) {
    let clock = FakeClock::default();
    let ec2 = MockEc2::new(Arc::new(clock.clone()));
    ec2.set_catalogue(vec![instance_type_info("m5.large", 2, 8)], &["us-west-2a", "us-west-2b"]);
    let mut prices = PriceTable::default();
    prices.on_demand.insert("m5.large".into(), 0.1);
    let mut class = crate::provider::tests::class_json("True");
    if let (Some(s), Some(extra)) = (class["spec"].as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    let classes = InMemoryNodeClasses::new();
    classes.insert_value(GROUP, KIND, "default", class);
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
        Arc::new(clock),
        SharedPrices::new(PriceSource::Table(prices)),
        AwsCloudProviderOptions::new(cluster, "us-west-2"),
    );
    (ec2, provider)
}

/// A claim of pool `default` labelled with a `node-role.kubernetes.io` label (left to registration) and tainted.
fn claim(name: &str) -> NodeClaim {
    node_claim(NodeClaimOptions {
        name: Some(name.into()),
        node_pool: Some("default".into()),
        labels: [("node-role.kubernetes.io/worker".to_owned(), "true".to_owned()), ("team".into(), "a".into())].into(),
        requirements: vec![
            nodepool_requirement(OS, "In", &["linux"]),
            nodepool_requirement(NODE_POOL, "In", &["default"]),
            nodepool_requirement(CAPACITY_TYPE, "In", &["on-demand"]),
        ],
        taints: vec![ClaimTaint::new("dedicated", Some("web"), TaintEffect::NoSchedule)],
        requests: [("cpu", "1")].into(),
        node_class_ref: Some(NodeClassReference::new(GROUP, KIND, "default")),
        ..Default::default()
    })
}

/// Launches `name` through the provider; the launched claim (with its providerID).
async fn launch(provider: &AwsCloudProvider, name: &str) -> NodeClaim {
    let launched = provider.create(&claim(name)).await.expect("launch");
    let mut c = claim(name);
    c.status = launched.status;
    assert!(c.provider_id().is_some_and(|p| p.starts_with("aws:///")), "{:?}", c.provider_id());
    c
}

#[tokio::test(start_paused = true)]
async fn the_kubelet_accepting_the_user_data_registers_the_node_with_its_labels_taints_and_resources() {
    let Some(judge) = KubeletCheck::require() else { return };
    let (ec2, provider) = provider(json!({"kubelet": {
        "kubeReserved": {"cpu": "100m", "memory": "512Mi"},
        "evictionHard": {"memory.available": "10%", "nodefs.available": "10%"},
        "imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80
    }}));
    let c = launch(&provider, "good").await;
    let boot = boot_instance(&ec2, &judge, &c, AmiFamily::Al2023).await.expect("boots");
    let Boot::Accepted { node, inputs } = boot else { panic!("refused: {boot:?}") };
    assert_eq!(inputs.config["imageGCHighThresholdPercent"], 85, "{inputs:?}");
    assert_eq!(node.name_any(), "good");
    assert_eq!(node.spec.as_ref().and_then(|s| s.provider_id.as_deref()), c.provider_id());
    let labels = node.labels();
    assert_eq!(labels.get("team").map(String::as_str), Some("a"), "{labels:?}");
    assert_eq!(labels.get("karpenter.sh/nodepool").map(String::as_str), Some("default"));
    assert_eq!(labels.get("kubernetes.io/arch").map(String::as_str), Some("amd64"));
    assert!(!labels.contains_key("node-role.kubernetes.io/worker"), "left to Karpenter's registration: {labels:?}");
    let taints: Vec<(String, Option<String>, String)> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.key, t.value, t.effect))
        .collect();
    assert!(taints.contains(&("dedicated".into(), Some("web".into()), "NoSchedule".into())), "{taints:?}");
    assert!(taints.iter().any(|t| t.0 == "karpenter.sh/unregistered"), "{taints:?}");
    let status = node.status.as_ref().expect("status");
    let get =
        |m: &Option<BTreeMap<String, K8sQuantity>>, k: &str| m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone());
    assert_eq!(get(&status.capacity, "cpu").as_deref(), Some("2"));
    assert_eq!(get(&status.allocatable, "cpu").as_deref(), Some("1900m"));
    // 8 GiB less 512 MiB reserved less 10% evicted.
    let memory: Quantity = get(&status.allocatable, "memory").expect("memory").parse().expect("quantity");
    let gib = 1024_i128 * 1024 * 1024 * 1_000_000_000;
    assert_eq!(memory.as_nanos(), 8 * gib - gib / 2 - 8 * gib / 10);
}

#[tokio::test(start_paused = true)]
async fn the_kubelet_refusing_the_user_data_leaves_no_node_and_says_why() {
    let Some(judge) = KubeletCheck::require() else { return };
    // A user NodeConfig whose image GC thresholds are the wrong way round: nodeadm merges it into the kubelet's
    // configuration at boot, and the kubelet refuses to start.
    let user_data = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      \
                     imageGCHighThresholdPercent: 40\n      imageGCLowThresholdPercent: 60\n";
    let (ec2, provider) = provider(json!({"userData": user_data}));
    let c = launch(&provider, "bad").await;
    let boot = boot_instance(&ec2, &judge, &c, AmiFamily::Al2023).await.expect("judged");
    let Boot::Refused { message, inputs } = boot else { panic!("accepted: {boot:?}") };
    assert!(message.contains("imageGCLowThresholdPercent"), "{message}");
    assert_eq!(inputs.config["imageGCHighThresholdPercent"], 40, "{inputs:?}");
}

#[tokio::test(start_paused = true)]
async fn a_role_label_among_the_user_node_config_flags_is_refused() {
    let Some(judge) = KubeletCheck::require() else { return };
    // nodeadm passes every NodeConfig's flags; the kubelet merges the two --node-labels and refuses the role label.
    let user_data = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    flags:\n      \
                     - --node-labels=node-role.kubernetes.io/worker=true\n";
    let (ec2, provider) = provider(json!({"userData": user_data}));
    let c = launch(&provider, "role").await;
    let boot = boot_instance(&ec2, &judge, &c, AmiFamily::Al2023).await.expect("judged");
    let Boot::Refused { message, inputs } = boot else { panic!("accepted: {boot:?}") };
    assert!(message.contains("node-role.kubernetes.io"), "{message}");
    assert_eq!(inputs.flags.iter().filter(|f| f.starts_with("--node-labels=")).count(), 2, "{inputs:?}");
}

#[test]
fn flags_are_parsed_as_the_kubelet_parses_them() {
    let flags: Vec<String> = [
        "--node-labels=a=1,b=2",
        "--register-with-taints=k=v:NoSchedule,e:NoExecute",
        "--eviction-hard=memory.available<5%,nodefs.available<1Gi",
        "--kube-reserved",
        "cpu=100m",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let labels = map_flag(&flags, "node-labels").expect("labels");
    assert_eq!(labels, BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())]));
    let taints = flag_taints(&flags).expect("taints");
    assert_eq!(taints[0].value.as_deref(), Some("v"));
    assert_eq!(
        (taints[1].key.as_str(), taints[1].value.as_deref(), taints[1].effect.as_str()),
        ("e", None, "NoExecute")
    );
    let inputs = KubeletInputs { flags, config: json!({}) };
    assert_eq!(eviction_hard(&inputs).get("nodefs.available").map(String::as_str), Some("1Gi"));
    assert_eq!(reserved(&inputs, "kube-reserved", "kubeReserved").get("cpu").map(String::as_str), Some("100m"));
    assert_eq!(amount("5%", 200), 10);
}
