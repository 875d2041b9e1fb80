//! What aws/karpenter-provider-aws's instance-type suite (and the overhead cases of its launch-template suite)
//! pins about capacity, pods, reserved resources and eviction thresholds, restated as our tests (issue 32,
//! item 3; the inventory is `docs/upstream-aws-expectations.md`, each test names its rows).
//!
//! The instance types are described here as EC2 describes them (vCPUs, memory, ENIs per card, IPv4 addresses
//! per ENI, EFA, instance storage); the numbers are EC2's published figures for those types.

use std::collections::BTreeSet;

use crate::api::EC2NodeClass;
use karpenter_requirements::{InstanceType, Quantity};
use serde_json::{Value, json};

use super::*;

fn q(s: &str) -> Quantity {
    s.parse().expect("test quantity")
}

/// An instance type as `DescribeInstanceTypes` answers: `enis` per network card (the first is the default).
fn ec2_type(name: &str, vcpus: i64, mib: i64, cards: &[i64], ips: i64, arch: &str, extra: Value) -> InstanceTypeInfo {
    let mut v = json!({
        "InstanceType": name,
        "CurrentGeneration": true,
        "Hypervisor": "nitro",
        "SupportedUsageClasses": ["on-demand", "spot"],
        "SupportedVirtualizationTypes": ["hvm"],
        "ProcessorInfo": {"SupportedArchitectures": [arch], "Manufacturer": "Intel"},
        "VCpuInfo": {"DefaultVCpus": vcpus},
        "MemoryInfo": {"SizeInMiB": mib},
        "NetworkInfo": {
            "MaximumNetworkInterfaces": cards.iter().sum::<i64>(),
            "Ipv4AddressesPerInterface": ips,
            "DefaultNetworkCardIndex": 0,
            "NetworkCards": cards.iter().enumerate()
                .map(|(i, m)| json!({"NetworkCardIndex": i, "MaximumNetworkInterfaces": m}))
                .collect::<Vec<_>>()
        }
    });
    merge(&mut v, extra);
    serde_json::from_value(v).expect("instance type info")
}

fn merge(into: &mut Value, extra: Value) {
    match (into, extra) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn t3_large() -> InstanceTypeInfo {
    ec2_type("t3.large", 2, 8192, &[3], 12, "x86_64", json!({}))
}

fn m5_large() -> InstanceTypeInfo {
    ec2_type("m5.large", 2, 8192, &[3], 10, "x86_64", json!({}))
}

fn m5_xlarge() -> InstanceTypeInfo {
    ec2_type("m5.xlarge", 4, 16384, &[4], 15, "x86_64", json!({}))
}

/// Two network cards of 8 ENIs, 50 addresses each, 2 EFA interfaces, 4 × 1900 GB of NVMe instance storage.
fn m6idn_32xlarge() -> InstanceTypeInfo {
    ec2_type(
        "m6idn.32xlarge",
        128,
        524_288,
        &[8, 8],
        50,
        "x86_64",
        json!({"NetworkInfo": {"EfaSupported": true, "EfaInfo": {"MaximumEfaInterfaces": 2}},
               "InstanceStorageSupported": true,
               "InstanceStorageInfo": {"TotalSizeInGB": 7600, "NvmeSupport": "required",
                                       "Disks": [{"SizeInGB": 1900, "Count": 4, "Type": "ssd"}]}}),
    )
}

fn all_types() -> Vec<InstanceTypeInfo> {
    vec![t3_large(), m5_large(), m5_xlarge(), m6idn_32xlarge()]
}

/// The node class spec: the provider tests' class with `spec` laid over it.
fn spec(extra: Value) -> crate::api::EC2NodeClassSpec {
    let mut class = crate::provider::tests::class_json("True");
    if let (Some(s), Some(e)) = (class["spec"].as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value::<EC2NodeClass>(class).expect("node class").spec
}

fn alias(a: &str) -> Value {
    json!({"amiSelectorTerms": [{"alias": a}]})
}

fn with(mut a: Value, b: Value) -> Value {
    merge(&mut a, b);
    a
}

fn context(extra: Value, cel: bool, settings: Settings) -> InstanceTypeContext {
    InstanceTypeContext {
        region: "us-west-2".into(),
        node_class: NodeClassSettings::from_spec(&spec(extra), cel).expect("node class settings"),
        settings,
        zones: all_types()
            .iter()
            .chain([a1_medium()].iter())
            .map(|i| (i.instance_type.clone(), BTreeSet::from(["us-west-2a".to_owned()])))
            .collect(),
        prices: PriceSource::Estimate,
        ..Default::default()
    }
}

fn ctx(extra: Value) -> InstanceTypeContext {
    context(extra, false, Settings::default())
}

fn build(c: &InstanceTypeContext, info: &InstanceTypeInfo) -> InstanceType {
    c.instance_type(info).unwrap_or_else(|| panic!("{} is built", info.instance_type))
}

fn pods(it: &InstanceType) -> i64 {
    it.capacity().pods().value().unwrap_or(-1)
}

fn value(list: &ResourceList, name: &str) -> Option<i64> {
    list.get(name).and_then(Quantity::value)
}

fn milli(list: &ResourceList, name: &str) -> Option<i64> {
    list.get(name).and_then(Quantity::milli_value)
}

fn no_vm_overhead() -> Settings {
    Settings { vm_memory_overhead_percent: 0.0, ..Settings::default() }
}

const MIB: i64 = 1 << 20;

// ------------------------------------------------------------------------------------------------------------
// Pods.
// ------------------------------------------------------------------------------------------------------------

/// IT-POD-1, IT-POD-9: ENI-limited pods on the default card: t3.large 3 × 11 + 2 = 35, m6idn.32xlarge
/// 8 × 49 + 2 = 394; `podsPerCore: 0` changes nothing.
#[test]
fn pods_default_to_the_eni_limit_of_the_default_card() {
    for extra in [json!({}), json!({"kubelet": {"podsPerCore": 0}})] {
        let c = ctx(extra.clone());
        assert_eq!(pods(&build(&c, &t3_large())), 35, "{extra}");
        assert_eq!(pods(&build(&c, &m6idn_32xlarge())), 394, "{extra}");
    }
}

/// IT-POD-2, IT-POD-10: `maxPods` is the pods capacity of every type; Windows families take 110, the ENI-limited
/// families never do by default.
#[test]
fn pods_follow_max_pods_and_windows_takes_110() {
    let c = ctx(json!({"kubelet": {"maxPods": 10}}));
    for info in all_types() {
        assert_eq!(pods(&build(&c, &info)), 10, "{}", info.instance_type);
    }
    let windows = ctx(alias("windows2022@latest"));
    let linux = ctx(json!({}));
    for info in all_types() {
        assert_eq!(pods(&build(&windows, &info)), 110, "{}", info.instance_type);
        assert_ne!(pods(&build(&linux, &info)), 110, "{}", info.instance_type);
    }
}

/// IT-POD-3: t3.large with `maxPods: 10`: kube-reserved memory is `11 × pods + 255` with the ENI-limited
/// pods (35) for AL2, AL2023 and Custom, and with the pods capacity for Bottlerocket and Windows.
#[test]
fn kube_reserved_memory_per_family_with_max_pods() {
    let custom = json!({"amiFamily": "Custom", "amiSelectorTerms": [{"tags": {"*": "*"}}]});
    for (case, family, pods_expected, memory) in [
        ("al2", alias("al2@latest"), 10, "640Mi"),
        ("al2023", alias("al2023@latest"), 10, "640Mi"),
        ("bottlerocket", alias("bottlerocket@latest"), 10, "365Mi"),
        ("windows2019", alias("windows2019@latest"), 10, "365Mi"),
        ("windows2022", alias("windows2022@latest"), 10, "365Mi"),
        ("windows2025", alias("windows2025@latest"), 10, "365Mi"),
        ("custom", custom, 10, "640Mi"),
    ] {
        let it = build(&ctx(with(family, json!({"kubelet": {"maxPods": 10}}))), &t3_large());
        assert_eq!(pods(&it), pods_expected, "{case}");
        assert_eq!(it.overhead().kube_reserved.get("memory"), Some(&q(memory)), "{case}");
    }
}

/// IT-POD-4: one reserved ENI: t3.large pods 2 × 11 + 2 = 24 (Windows 110); kube-reserved memory as above.
#[test]
fn reserved_enis_lower_the_eni_limit() {
    let custom = json!({"amiFamily": "Custom", "amiSelectorTerms": [{"tags": {"*": "*"}}]});
    let settings = Settings { reserved_enis: 1, ..Settings::default() };
    for (case, family, pods_expected, memory) in [
        ("al2", alias("al2@latest"), 24, "640Mi"),
        ("al2023", alias("al2023@latest"), 24, "640Mi"),
        ("bottlerocket", alias("bottlerocket@latest"), 24, "519Mi"),
        ("windows2019", alias("windows2019@latest"), 110, "1465Mi"),
        ("windows2022", alias("windows2022@latest"), 110, "1465Mi"),
        ("windows2025", alias("windows2025@latest"), 110, "1465Mi"),
        ("custom", custom, 24, "640Mi"),
    ] {
        let it = build(&context(family, false, settings.clone()), &t3_large());
        assert_eq!(pods(&it), pods_expected, "{case}");
        assert_eq!(it.overhead().kube_reserved.get("memory"), Some(&q(memory)), "{case}");
    }
}

/// IT-POD-5: more reserved ENIs than the type has: 0 usable ENIs, 0 pods (not the `+ 2`).
#[test]
fn reserved_enis_never_go_below_zero() {
    let settings = Settings { reserved_enis: 1_000_000, ..Settings::default() };
    assert_eq!(pods(&build(&context(json!({}), false, settings), &t3_large())), 0);
}

/// IT-POD-6..8: `podsPerCore` caps the pods at `podsPerCore × vCPUs` (with `maxPods` too), except on
/// Bottlerocket, which ignores it.
#[test]
fn pods_per_core_caps_pods_except_on_bottlerocket() {
    let one = ctx(json!({"kubelet": {"podsPerCore": 1}}));
    let four_max_20 = ctx(json!({"kubelet": {"podsPerCore": 4, "maxPods": 20}}));
    let br = ctx(with(alias("bottlerocket@latest"), json!({"kubelet": {"podsPerCore": 1}})));
    let plain = ctx(json!({}));
    for info in all_types() {
        let vcpus = info.vcpu_info.default_vcpus.unwrap();
        let eni = eni_limited_pods(&info, 0, 0);
        assert_eq!(pods(&build(&one, &info)), vcpus.min(eni), "{}", info.instance_type);
        assert_eq!(pods(&build(&four_max_20, &info)), 20.min(4 * vcpus), "{}", info.instance_type);
        assert_eq!(pods(&build(&br, &info)), eni, "{}", info.instance_type);
        assert_eq!(pods(&build(&plain, &info)), eni, "{}", info.instance_type);
    }
}

/// IT-NI-1..2: efa-only interfaces on card 0 take ENIs from the pods formula; on other cards they do not:
/// m6idn.32xlarge 8 × 49 + 2 = 394, or 7 × 49 + 2 = 345 with one efa-only interface on card 0.
#[test]
fn efa_only_interfaces_on_card_zero_lower_max_pods() {
    for (case, interfaces, expected) in [
        ("efa-only on card 1", json!([[0, 0, "interface"], [1, 0, "efa-only"]]), 394),
        ("efa-only on card 0", json!([[0, 0, "interface"], [0, 1, "efa-only"]]), 345),
    ] {
        let nis: Vec<Value> = interfaces
            .as_array()
            .unwrap()
            .iter()
            .map(|n| json!({"networkCardIndex": n[0], "deviceIndex": n[1], "interfaceType": n[2]}))
            .collect();
        let it = build(&ctx(json!({"networkInterfaces": nis})), &m6idn_32xlarge());
        assert_eq!(pods(&it), expected, "{case}");
    }
}

// ------------------------------------------------------------------------------------------------------------
// Reserved resources and eviction thresholds (m5.xlarge, as upstream's Overhead context).
// ------------------------------------------------------------------------------------------------------------

/// IT-OVH-1..2: system-reserved is nothing by default and the node class's values when given.
#[test]
fn system_reserved_defaults_to_nothing_and_follows_the_node_class() {
    let it = build(&ctx(json!({})), &m5_xlarge());
    for r in ["cpu", "memory", "ephemeral-storage"] {
        assert_eq!(value(&it.overhead().system_reserved, r).unwrap_or(0), 0, "{r}");
    }
    let c = ctx(json!({"kubelet": {"systemReserved": {"cpu": "2", "memory": "20Gi", "ephemeral-storage": "10Gi"}}}));
    let sr = &build(&c, &m5_xlarge()).overhead().system_reserved.clone();
    assert_eq!(
        (sr.get("cpu"), sr.get("memory"), sr.get("ephemeral-storage")),
        (Some(&q("2")), Some(&q("20Gi")), Some(&q("10Gi")))
    );
}

/// IT-OVH-3..4: kube-reserved defaults on m5.xlarge (80m, 11 × 58 + 255 = 893Mi, 1Gi) and the node class's
/// values when given.
#[test]
fn kube_reserved_defaults_and_overrides() {
    let kr = build(&ctx(json!({})), &m5_xlarge()).overhead().kube_reserved.clone();
    assert_eq!(milli(&kr, "cpu"), Some(80));
    assert_eq!(kr.get("memory"), Some(&q("893Mi")));
    assert_eq!(kr.get("ephemeral-storage"), Some(&q("1Gi")));
    let c = ctx(json!({"kubelet": {
        "systemReserved": {"cpu": "1", "memory": "20Gi", "ephemeral-storage": "1Gi"},
        "kubeReserved": {"cpu": "2", "memory": "10Gi", "ephemeral-storage": "2Gi"}}}));
    let kr = build(&c, &m5_xlarge()).overhead().kube_reserved.clone();
    assert_eq!(
        (kr.get("cpu"), kr.get("memory"), kr.get("ephemeral-storage")),
        (Some(&q("2")), Some(&q("10Gi")), Some(&q("2Gi")))
    );
}

/// The memory eviction threshold of m5.xlarge under `kubelet` (no VM overhead, as upstream's context), and the
/// memory capacity it is a share of.
fn memory_eviction(family: Value, kubelet: Value) -> (i64, i64) {
    let base = json!({"systemReserved": {"memory": "20Gi"}, "kubeReserved": {"memory": "10Gi"}});
    let c = context(with(family, json!({"kubelet": with(base, kubelet)})), false, no_vm_overhead());
    let it = build(&c, &m5_xlarge());
    (value(&it.overhead().eviction_threshold, "memory").unwrap_or(0), value(it.capacity(), "memory").unwrap())
}

/// IT-EVI-1..10: only `evictionHard` counts: a quantity as given, a percentage of the memory capacity, `100%` as
/// 0 (disabled); `evictionSoft` never changes the threshold (100Mi by default), on Bottlerocket too.
#[test]
fn eviction_threshold_comes_from_eviction_hard_only() {
    let al2023 = json!({});
    let br = alias("bottlerocket@latest");
    for (case, family, kubelet, expected) in [
        ("hard quantity", &al2023, json!({"evictionHard": {"memory.available": "500Mi"}}), Ok(500 * MIB)),
        ("hard 10%", &al2023, json!({"evictionHard": {"memory.available": "10%"}}), Err(0.10)),
        ("hard 100%", &al2023, json!({"evictionHard": {"memory.available": "100%"}}), Ok(0)),
        ("soft only", &al2023, json!({"evictionSoft": {"memory.available": "50Mi"}}), Ok(100 * MIB)),
        ("soft quantity only", &al2023, json!({"evictionSoft": {"memory.available": "500Mi"}}), Ok(100 * MIB)),
        (
            "hard 5%, soft 10%",
            &al2023,
            json!({"evictionHard": {"memory.available": "5%"}, "evictionSoft": {"memory.available": "10%"}}),
            Err(0.05),
        ),
        ("soft 100%", &al2023, json!({"evictionSoft": {"memory.available": "100%"}}), Ok(100 * MIB)),
        (
            "bottlerocket hard 1Gi, soft 10Gi",
            &br,
            json!({"evictionHard": {"memory.available": "1Gi"}, "evictionSoft": {"memory.available": "10Gi"}}),
            Ok(1 << 30),
        ),
        (
            "hard 1Gi, soft 3Gi",
            &al2023,
            json!({"evictionHard": {"memory.available": "1Gi"}, "evictionSoft": {"memory.available": "3Gi"}}),
            Ok(1 << 30),
        ),
        (
            "hard 5%, soft 2%",
            &al2023,
            json!({"evictionHard": {"memory.available": "5%"}, "evictionSoft": {"memory.available": "2%"}}),
            Err(0.05),
        ),
        (
            "hard 1Gi, soft 10%",
            &al2023,
            json!({"evictionHard": {"memory.available": "1Gi"}, "evictionSoft": {"memory.available": "10%"}}),
            Ok(1 << 30),
        ),
    ] {
        let (threshold, capacity) = memory_eviction(family.clone(), kubelet);
        match expected {
            Ok(bytes) => assert_eq!(threshold, bytes, "{case}"),
            Err(share) => {
                let want = capacity as f64 * share;
                assert!((threshold as f64 - want).abs() <= 10.0, "{case}: {threshold} vs {want}");
            }
        }
    }
}

/// IT-EVI-8: with no kubelet settings the thresholds are no CPU, 100Mi of memory and about 2Gi (10 % of the
/// 20Gi root volume) of ephemeral storage.
#[test]
fn eviction_threshold_defaults() {
    let it = build(&context(json!({}), false, no_vm_overhead()), &m5_xlarge());
    let e = &it.overhead().eviction_threshold;
    assert_eq!(value(e, "cpu").unwrap_or(0), 0);
    assert_eq!(value(e, "memory"), Some(100 * MIB));
    let storage = value(e, "ephemeral-storage").unwrap() as f64;
    assert!((storage - 2.0 * (1u64 << 30) as f64).abs() < 1024.0, "{storage}");
}

/// LT-OVH-1..3: with no VM overhead, m5.xlarge's memory overhead in total is 993Mi (893 + 100) on AL2 and on
/// Bottlerocket without `maxPods`, and 1565Mi (11 × 110 + 255 + 100) on Bottlerocket with `maxPods: 110`.
#[test]
fn total_memory_overhead_like_the_launch_template_suite() {
    for (case, extra, expected) in [
        ("al2", alias("al2@latest"), "993Mi"),
        ("bottlerocket", alias("bottlerocket@latest"), "993Mi"),
        (
            "bottlerocket, maxPods 110",
            with(alias("bottlerocket@latest"), json!({"kubelet": {"maxPods": 110}})),
            "1565Mi",
        ),
    ] {
        let it = build(&context(extra, false, no_vm_overhead()), &m5_xlarge());
        let o = it.overhead();
        let total: i64 = [&o.kube_reserved, &o.system_reserved, &o.eviction_threshold]
            .iter()
            .map(|l| value(l, "memory").unwrap_or(0))
            .sum();
        assert_eq!(total, q(expected).value().unwrap(), "{case}");
    }
}

/// IT-ALLOC-1: the allocatable estimate never exceeds what kubelet reports on real nodes (AL2023 defaults).
#[test]
fn allocatable_never_exceeds_what_real_nodes_report() {
    let c = ctx(json!({}));
    for (info, memory, cpu) in [
        (ec2_type("t4g.small", 2, 2048, &[3], 4, "arm64", json!({})), "1408312Ki", "1930m"),
        (ec2_type("t4g.medium", 2, 4096, &[3], 6, "arm64", json!({})), "3377496Ki", "1930m"),
        (ec2_type("t4g.xlarge", 4, 16384, &[4], 15, "arm64", json!({})), "15136012Ki", "3920m"),
        (m5_large(), "7220184Ki", "1930m"),
    ] {
        let it = build(&c, &info);
        let a = it.allocatable();
        assert!(value(a, "memory").unwrap() <= q(memory).value().unwrap(), "{}: {a}", info.instance_type);
        assert!(milli(a, "cpu").unwrap() <= q(cpu).milli_value().unwrap(), "{}: {a}", info.instance_type);
    }
}

// ------------------------------------------------------------------------------------------------------------
// Ephemeral storage, compatibility, labels.
// ------------------------------------------------------------------------------------------------------------

/// IT-EPH-1..4: a block device mapping without a size (a snapshot) counts as EBS's 20Gi default on the family's
/// ephemeral device (AL2 and AL2023 `/dev/xvda`, Bottlerocket `/dev/xvdb`, Custom the last mapping).
#[test]
fn ephemeral_storage_defaults_to_20gi_when_the_mapping_has_no_size() {
    let custom = json!({"amiFamily": "Custom", "amiSelectorTerms": [{"tags": {"*": "*"}}]});
    for (case, family, device) in [
        ("al2", alias("al2@latest"), "/dev/xvda"),
        ("al2023", alias("al2023@latest"), "/dev/xvda"),
        ("bottlerocket", alias("bottlerocket@latest"), "/dev/xvdb"),
        ("custom", custom, "/dev/xvda"),
    ] {
        let bdm = json!({"blockDeviceMappings": [{"deviceName": device,
                         "ebs": {"snapshotID": "snap-xxxxxxxx", "volumeInitializationRate": 100}}]});
        let it = build(&ctx(with(family, bdm)), &m5_large());
        assert_eq!(it.capacity().get("ephemeral-storage"), Some(&q("20Gi")), "{case}");
    }
}

/// IT-EPH-5: RAID0 over instance storage: the ephemeral storage is the instance storage (7600G on
/// m6idn.32xlarge).
#[test]
fn raid0_ephemeral_storage_is_the_instance_storage() {
    let it = build(&ctx(json!({"instanceStorePolicy": "RAID0"})), &m6idn_32xlarge());
    assert_eq!(value(it.capacity(), "ephemeral-storage"), q("7600G").value());
}

fn a1_medium() -> InstanceTypeInfo {
    ec2_type("a1.medium", 1, 2048, &[2], 4, "arm64", json!({}))
}

/// IT-COMPAT-1..2: a1 types have no AL2023 image (unavailable), but Bottlerocket serves them.
#[test]
fn a1_types_are_compatible_with_bottlerocket_but_not_al2023() {
    for (family, expected) in [(alias("al2023@latest"), false), (alias("bottlerocket@latest"), true)] {
        let settings = NodeClassSettings::from_spec(&spec(family.clone()), false).unwrap();
        assert_eq!(compatible_with_node_class(&a1_medium(), &settings), expected, "{family}");
    }
}

/// IT-COMPAT-3..4: configured interfaces the type supports keep it available; more efa-only interfaces than the
/// type's EFA count make it incompatible.
#[test]
fn network_interface_configuration_decides_compatibility() {
    let ni = |card: i64, device: i64, kind: &str| json!({"networkCardIndex": card, "deviceIndex": device, "interfaceType": kind});
    let fits = json!({"networkInterfaces": [ni(0, 0, "interface"), ni(0, 1, "efa-only")]});
    let too_many = json!({"networkInterfaces": [ni(0, 0, "interface"), ni(0, 1, "efa-only"), ni(1, 0, "efa-only"),
        ni(2, 0, "efa-only"), ni(3, 0, "efa-only"), ni(4, 0, "efa-only")]});
    for (case, extra, expected) in [("fits", fits, true), ("five efa-only on a 2-EFA type", too_many, false)] {
        let settings = NodeClassSettings::from_spec(&spec(extra), false).unwrap();
        assert_eq!(compatible_with_node_class(&m6idn_32xlarge(), &settings), expected, "{case}");
    }
}

fn label(it: &InstanceType, key: &str) -> Option<String> {
    let r = it.requirements.get_ref(key)?;
    match (r.operator(), r.values().as_slice()) {
        (karpenter_requirements::Operator::In, [v]) => Some(v.to_string()),
        _ => None,
    }
}

/// IT-NITRO-1..2 (difference found, see the doc): `karpenter.k8s.aws/nitro-sandbox` says whether the type
/// supports Nitro Enclaves.
#[test]
fn nitro_enclave_support_is_a_label() {
    for (support, expected) in [("supported", "true"), ("unsupported", "false")] {
        let info = ec2_type("m5.large", 2, 8192, &[3], 10, "x86_64", json!({"NitroEnclavesSupport": support}));
        let it = build(&ctx(json!({})), &info);
        assert_eq!(label(&it, crate::labels::NITRO_SANDBOX).as_deref(), Some(expected), "{support}");
    }
}

// ------------------------------------------------------------------------------------------------------------
// Kubelet CEL expressions (NodeClassCEL gate).
// ------------------------------------------------------------------------------------------------------------

fn cel(kubelet: Value) -> InstanceTypeContext {
    context(json!({ "kubelet": kubelet }), true, Settings::default())
}

/// IT-CEL-4: `maxPods: min(110, vcpus * 8)` is 16 on m5.large.
#[test]
fn cel_max_pods_resolves_per_type() {
    assert_eq!(pods(&build(&cel(json!({"maxPods": "min(110, vcpus * 8)"})), &m5_large())), 16);
}

/// IT-CEL-5: with the gate off an expression is not evaluated: t3.large keeps its ENI-limited 35.
#[test]
fn cel_max_pods_is_ignored_with_the_gate_off() {
    let c = context(json!({"kubelet": {"maxPods": "7 + 0"}}), false, Settings::default());
    assert_eq!(pods(&build(&c, &t3_large())), 35);
}

/// IT-CEL-6, IT-CEL-8, LT-CEL-1..2: reserved expressions resolve per type (cpu up to a 10m multiple, memory up
/// to a 16Mi multiple: m5.large `vcpus * 30` is 60m, `memory_mib / 100` is 81 → 96Mi); static entries of the
/// same map stay.
#[test]
fn cel_reserved_expressions_resolve_into_the_overhead() {
    let exprs = json!({"cpu": "vcpus * 30", "memory": "memory_mib / 100"});
    let kube =
        build(&cel(json!({"kubeReserved": with(exprs.clone(), json!({"ephemeral-storage": "3Gi"}))})), &m5_large());
    let kr = &kube.overhead().kube_reserved;
    assert_eq!(
        (milli(kr, "cpu"), kr.get("memory"), kr.get("ephemeral-storage")),
        (Some(60), Some(&q("96Mi")), Some(&q("3Gi")))
    );
    let system = build(&cel(json!({"systemReserved": exprs})), &m5_large());
    let sr = &system.overhead().system_reserved;
    assert_eq!((milli(sr, "cpu"), sr.get("memory")), (Some(60), Some(&q("96Mi"))));
}

/// IT-CEL-7: a reserved expression's `max_pods` is the resolved `maxPods` expression (16 → 176Mi).
#[test]
fn cel_reserved_expressions_see_the_resolved_max_pods() {
    let it = build(
        &cel(json!({"maxPods": "min(110, vcpus * 8)", "kubeReserved": {"memory": "max_pods * 11"}})),
        &m5_large(),
    );
    assert_eq!(pods(&it), 16);
    assert_eq!(it.overhead().kube_reserved.get("memory"), Some(&q("176Mi")));
}

/// IT-CEL-1..3: a `maxPods` expression that is negative, above `i32::MAX` or fails at run time does not resolve;
/// upstream then fails the whole list, we leave the type out (see the doc).
#[test]
fn cel_max_pods_that_cannot_resolve_is_an_error() {
    for expr in ["0 - 1", "2147483647 + 1", "1 / (vcpus - vcpus)"] {
        let c = cel(json!({ "maxPods": expr }));
        assert!(c.kubelet(&m5_large()).is_err(), "{expr}");
        assert!(c.check_expressions(all_types().iter()).is_err(), "{expr}");
        assert!(c.instance_type(&m5_large()).is_none(), "{expr}: the type is left out");
    }
}
