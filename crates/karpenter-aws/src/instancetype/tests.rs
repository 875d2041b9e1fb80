//! Hand-computed capacity, allocatable and labels for a few real types (the fixture holds EC2's answers for them,
//! most copied from moto's catalogue, p3.2xlarge, g4ad.xlarge and dl1.24xlarge written from EC2's documentation).

use super::*;
use crate::api::{BlockDevice, EC2NodeClassSpec, KubeletConfiguration};
use crate::ec2::DescribeInstanceTypesOutput;
use crate::pricing::PriceTable;

const FIXTURE: &str = include_str!("../../tests/fixtures/describe-instance-types.json");

fn info(name: &str) -> InstanceTypeInfo {
    let out: DescribeInstanceTypesOutput = serde_json::from_str(FIXTURE).expect("fixture decodes");
    out.instance_types.into_iter().find(|i| i.instance_type == name).expect("type in fixture")
}

fn ctx() -> InstanceTypeContext {
    let zones = ["us-west-2a", "us-west-2b", "us-west-2c"];
    let out: DescribeInstanceTypesOutput = serde_json::from_str(FIXTURE).expect("fixture decodes");
    InstanceTypeContext {
        region: "us-west-2".into(),
        zones: out
            .instance_types
            .iter()
            .map(|i| (i.instance_type.clone(), zones.iter().map(|z| z.to_string()).collect()))
            .collect(),
        prices: PriceSource::Estimate,
        ..Default::default()
    }
}

fn ctx_with(f: impl FnOnce(&mut NodeClassSettings)) -> InstanceTypeContext {
    let mut c = ctx();
    f(&mut c.node_class);
    c
}

fn q(s: &str) -> Quantity {
    s.parse().expect("test quantity")
}

fn build(c: &InstanceTypeContext, name: &str) -> InstanceType {
    c.instance_type(&info(name)).expect("supported type")
}

fn label(it: &InstanceType, key: &str) -> Option<String> {
    let r = it.requirements.get_ref(key)?;
    match (r.operator(), r.values().as_slice()) {
        (karpenter_requirements::Operator::In, [v]) => Some(v.to_string()),
        (karpenter_requirements::Operator::DoesNotExist, _) => None,
        (op, vs) => panic!("{key}: unexpected {op} {vs:?}"),
    }
}

#[track_caller]
fn assert_resources(list: &ResourceList, expected: &[(&str, &str)]) {
    for (name, want) in expected {
        assert_eq!(list.get(name), Some(&q(want)), "{name}: {list}");
    }
}

#[test]
fn m5_large() {
    let it = build(&ctx(), "m5.large");
    // 8192 MiB − ceil(8192 × 0.075) = 8192 − 615; pods 3 ENIs × (10 − 1) + 2.
    assert_resources(
        it.capacity(),
        &[("cpu", "2"), ("memory", "7577Mi"), ("pods", "29"), ("ephemeral-storage", "20Gi")],
    );
    // kube-reserved 70m / 11 × 29 + 255 = 574Mi / 1Gi; eviction 100Mi and 10 % of 20Gi.
    assert_resources(
        &it.overhead().kube_reserved,
        &[("cpu", "70m"), ("memory", "574Mi"), ("ephemeral-storage", "1Gi")],
    );
    assert_resources(&it.overhead().eviction_threshold, &[("memory", "100Mi"), ("ephemeral-storage", "2Gi")]);
    assert!(it.overhead().system_reserved.is_empty());
    assert_resources(
        it.allocatable(),
        &[("cpu", "1930m"), ("memory", "6903Mi"), ("pods", "29"), ("ephemeral-storage", "17Gi")],
    );
    assert_eq!(it.capacity().len(), 4, "no extended resources: {}", it.capacity());
    for (key, want) in [
        (INSTANCE_TYPE, Some("m5.large")),
        (ARCH, Some("amd64")),
        (OS, Some("linux")),
        (REGION, Some("us-west-2")),
        (WINDOWS_BUILD, None),
        (aws_labels::INSTANCE_CATEGORY, Some("m")),
        (aws_labels::INSTANCE_FAMILY, Some("m5")),
        (aws_labels::INSTANCE_GENERATION, Some("5")),
        (aws_labels::INSTANCE_SIZE, Some("large")),
        (aws_labels::INSTANCE_CPU, Some("2")),
        (aws_labels::INSTANCE_CPU_MANUFACTURER, Some("intel")),
        (aws_labels::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ, Some("3100")),
        (aws_labels::INSTANCE_MEMORY, Some("8192")),
        (aws_labels::INSTANCE_NETWORK_BANDWIDTH, Some("750")),
        (aws_labels::INSTANCE_EBS_BANDWIDTH, Some("4750")),
        (aws_labels::INSTANCE_HYPERVISOR, Some("nitro")),
        (aws_labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED, Some("false")),
        (aws_labels::INSTANCE_CAPABILITY_FLEX, Some("false")),
        (aws_labels::INSTANCE_LOCAL_NVME, None),
        (aws_labels::INSTANCE_GPU_NAME, None),
        (aws_labels::INSTANCE_GPU_COUNT, None),
        (aws_labels::INSTANCE_ACCELERATOR_NAME, None),
        (aws_labels::CAPACITY_RESERVATION_ID, None),
    ] {
        assert_eq!(label(&it, key).as_deref(), want, "{key}");
    }
    let zones = it.requirements.get(ZONE);
    assert_eq!(zones.values().len(), 3);
    let cts = it.requirements.get(CAPACITY_TYPE);
    assert!(cts.has("on-demand") && cts.has("spot") && !cts.has("reserved"));
    let tenancy = it.requirements.get(aws_labels::INSTANCE_TENANCY);
    assert!(tenancy.has("default") && tenancy.has("dedicated"));
}

#[test]
fn c6g_xlarge_arm64() {
    let it = build(&ctx(), "c6g.xlarge");
    // arm64: (8192 − 64) − ceil(8128 × 0.075) = 8128 − 610; pods 4 × 14 + 2 = 58.
    assert_resources(it.capacity(), &[("cpu", "4"), ("memory", "7518Mi"), ("pods", "58")]);
    // 80m; 11 × 58 + 255 = 893Mi.
    assert_resources(&it.overhead().kube_reserved, &[("cpu", "80m"), ("memory", "893Mi")]);
    assert_resources(it.allocatable(), &[("cpu", "3920m"), ("memory", "6525Mi"), ("pods", "58")]);
    assert_eq!(label(&it, ARCH).as_deref(), Some("arm64"));
    assert_eq!(label(&it, aws_labels::INSTANCE_CPU_MANUFACTURER).as_deref(), Some("aws"));
    assert_eq!(label(&it, aws_labels::INSTANCE_NETWORK_BANDWIDTH).as_deref(), Some("1250"));
    assert_eq!(label(&it, aws_labels::INSTANCE_CATEGORY).as_deref(), Some("c"));
    assert_eq!(label(&it, aws_labels::INSTANCE_GENERATION).as_deref(), Some("6"));
}

#[test]
fn t3_micro() {
    let it = build(&ctx(), "t3.micro");
    // 1024 − ceil(76.8); 2 ENIs × (2 − 1) + 2 = 4 pods; 11 × 4 + 255 = 299Mi.
    assert_resources(it.capacity(), &[("cpu", "2"), ("memory", "947Mi"), ("pods", "4")]);
    assert_resources(&it.overhead().kube_reserved, &[("cpu", "70m"), ("memory", "299Mi")]);
    assert_resources(it.allocatable(), &[("cpu", "1930m"), ("memory", "548Mi"), ("pods", "4")]);
    assert_eq!(label(&it, aws_labels::INSTANCE_EBS_BANDWIDTH).as_deref(), Some("2085"));
    assert_eq!(label(&it, aws_labels::INSTANCE_NETWORK_BANDWIDTH).as_deref(), Some("64"));
}

#[test]
fn p3_2xlarge_nvidia() {
    let it = build(&ctx(), "p3.2xlarge");
    // 62464 − ceil(4684.8) = 57779; 4 × 14 + 2 = 58 pods; 8 vCPU ⇒ 60 + 10 + 10 + 10 = 90m.
    assert_resources(it.capacity(), &[("cpu", "8"), ("memory", "57779Mi"), ("pods", "58"), ("nvidia.com/gpu", "1")]);
    assert_resources(&it.overhead().kube_reserved, &[("cpu", "90m"), ("memory", "893Mi")]);
    assert_resources(it.allocatable(), &[("cpu", "7910m"), ("memory", "56786Mi"), ("nvidia.com/gpu", "1")]);
    assert_eq!(label(&it, aws_labels::INSTANCE_GPU_NAME).as_deref(), Some("v100"));
    assert_eq!(label(&it, aws_labels::INSTANCE_GPU_MANUFACTURER).as_deref(), Some("nvidia"));
    assert_eq!(label(&it, aws_labels::INSTANCE_GPU_COUNT).as_deref(), Some("1"));
    assert_eq!(label(&it, aws_labels::INSTANCE_GPU_MEMORY).as_deref(), Some("16384"));
    assert_eq!(label(&it, aws_labels::INSTANCE_HYPERVISOR).as_deref(), Some("xen"));
    assert_eq!(label(&it, aws_labels::INSTANCE_ACCELERATOR_NAME), None);
}

#[test]
fn g4dn_xlarge_nvidia_with_local_nvme() {
    let it = build(&ctx(), "g4dn.xlarge");
    // 16384 − ceil(1228.8) = 15155; 3 × 9 + 2 = 29 pods.
    assert_resources(it.capacity(), &[("memory", "15155Mi"), ("pods", "29"), ("nvidia.com/gpu", "1")]);
    assert_resources(it.allocatable(), &[("cpu", "3920m"), ("memory", "14481Mi")]);
    assert_eq!(label(&it, aws_labels::INSTANCE_GPU_NAME).as_deref(), Some("t4"));
    assert_eq!(label(&it, aws_labels::INSTANCE_LOCAL_NVME).as_deref(), Some("125"));
    assert_eq!(label(&it, aws_labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED).as_deref(), Some("true"));
}

#[test]
fn dra_gates_give_gpu_and_efa_types_slice_templates() {
    // Off (the default): no templates, as upstream v1.14.
    assert!(build(&ctx(), "g4dn.xlarge").dynamic_resources.is_empty());
    let on = InstanceTypeContext { dra: DraTemplates { nvidia_gpu: true, efa: true }, ..ctx() };
    let g4dn = build(&on, "g4dn.xlarge");
    let drivers: Vec<&str> = g4dn.dynamic_resources.iter().map(|t| t.driver.as_str()).collect();
    assert_eq!(drivers, ["gpu.nvidia.com"], "g4dn.xlarge has one T4 and no EFA");
    let t4 = &g4dn.dynamic_resources[0].devices[0];
    assert_eq!(t4.attributes.get("productName"), Some(&karpenter_requirements::DeviceAttribute::String("T4".into())));
    assert_eq!(t4.capacity.get("memory"), Some(&q("16Gi")));
    // dl1: Habana accelerators are no NVIDIA GPUs; its 4 EFA interfaces are published, as the extended resource says.
    let dl1 = build(&on, "dl1.24xlarge");
    let drivers: Vec<(&str, usize)> =
        dl1.dynamic_resources.iter().map(|t| (t.driver.as_str(), t.devices.len())).collect();
    assert_eq!(drivers, [(crate::dynamic_resources::EFA_DRIVER, 4)]);
    assert!(build(&on, "m5.large").dynamic_resources.is_empty(), "neither GPUs nor EFA");
}

#[test]
fn amd_and_habana_gpus() {
    let g4ad = build(&ctx(), "g4ad.xlarge");
    // 2 ENIs × (4 − 1) + 2 = 8 pods; 11 × 8 + 255 = 343Mi.
    assert_resources(g4ad.capacity(), &[("amd.com/gpu", "1"), ("pods", "8")]);
    assert_resources(&g4ad.overhead().kube_reserved, &[("memory", "343Mi")]);
    assert_eq!(g4ad.capacity().get("nvidia.com/gpu"), None);
    assert_eq!(label(&g4ad, aws_labels::INSTANCE_GPU_NAME).as_deref(), Some("radeon-pro-v520"));
    assert_eq!(label(&g4ad, aws_labels::INSTANCE_GPU_MANUFACTURER).as_deref(), Some("amd"));

    let dl1 = build(&ctx(), "dl1.24xlarge");
    // Card 0: 15 ENIs × 49 + 2 = 737 pods; 96 vCPU ⇒ 310m.
    assert_resources(dl1.capacity(), &[("habana.ai/gaudi", "8"), ("vpc.amazonaws.com/efa", "4"), ("pods", "737")]);
    assert_resources(&dl1.overhead().kube_reserved, &[("cpu", "310m")]);
    assert_eq!(label(&dl1, aws_labels::INSTANCE_GPU_NAME).as_deref(), Some("gaudi-hl-205"));
    assert_eq!(label(&dl1, aws_labels::INSTANCE_NETWORK_BANDWIDTH).as_deref(), Some("400000"));
}

#[test]
fn neuron_types() {
    let inf1 = build(&ctx(), "inf1.xlarge");
    assert_resources(inf1.capacity(), &[("aws.amazon.com/neuron", "1"), ("aws.amazon.com/neuroncore", "4")]);
    assert_eq!(label(&inf1, aws_labels::INSTANCE_ACCELERATOR_NAME).as_deref(), Some("inferentia"));
    assert_eq!(label(&inf1, aws_labels::INSTANCE_ACCELERATOR_MANUFACTURER).as_deref(), Some("aws"));
    assert_eq!(label(&inf1, aws_labels::INSTANCE_ACCELERATOR_COUNT).as_deref(), Some("1"));
    assert_eq!(label(&inf1, aws_labels::INSTANCE_GPU_COUNT), None);

    let trn1 = build(&ctx(), "trn1.32xlarge");
    assert_resources(
        trn1.capacity(),
        &[("aws.amazon.com/neuron", "16"), ("aws.amazon.com/neuroncore", "32"), ("vpc.amazonaws.com/efa", "8")],
    );
    // Default card 0 has 5 ENIs: 5 × 49 + 2.
    assert_resources(trn1.capacity(), &[("pods", "247")]);
    assert_eq!(label(&trn1, aws_labels::INSTANCE_ACCELERATOR_NAME).as_deref(), Some("trainium"));
    assert_eq!(label(&trn1, aws_labels::INSTANCE_ACCELERATOR_COUNT).as_deref(), Some("16"));
}

#[test]
fn names_flex_metal_and_high_memory() {
    let flex = build(&ctx(), "m7i-flex.large");
    assert_eq!(label(&flex, aws_labels::INSTANCE_FAMILY).as_deref(), Some("m7i-flex"));
    assert_eq!(label(&flex, aws_labels::INSTANCE_CAPABILITY_FLEX).as_deref(), Some("true"));
    assert_eq!(label(&flex, aws_labels::INSTANCE_GENERATION).as_deref(), Some("7"));
    let metal = build(&ctx(), "m5.metal");
    assert_eq!(label(&metal, aws_labels::INSTANCE_HYPERVISOR), None);
    assert_eq!(label(&metal, aws_labels::INSTANCE_SIZE).as_deref(), Some("metal"));
    let u = build(&ctx(), "u-6tb1.56xlarge");
    assert_eq!(label(&u, aws_labels::INSTANCE_CATEGORY).as_deref(), Some("u"));
    assert_eq!(label(&u, aws_labels::INSTANCE_GENERATION).as_deref(), Some("1"));
    assert_eq!(label(&u, aws_labels::INSTANCE_FAMILY).as_deref(), Some("u-6tb1"));
}

#[test]
fn category_and_generation_parse_like_upstreams_pattern() {
    assert_eq!(category_and_generation("m5.large"), Some(("m", "5")));
    assert_eq!(category_and_generation("x2iezn.2xlarge"), Some(("x", "2")));
    assert_eq!(category_and_generation("u-12tb1.112xlarge"), Some(("u", "1")));
    assert_eq!(category_and_generation("p6-b200.48xlarge"), Some(("p", "6")));
    assert_eq!(category_and_generation("mac2-m2pro.metal"), Some(("mac", "2")));
    assert_eq!(category_and_generation("m5"), None, "no dot");
    assert_eq!(category_and_generation("u-tb.large"), None);
    assert_eq!(category_and_generation("5m.large"), None);
    assert_eq!(category_and_generation(""), None);
}

#[test]
fn kube_reserved_cpu_bands() {
    assert_eq!(kube_reserved_cpu_millis(1), 60);
    assert_eq!(kube_reserved_cpu_millis(2), 70);
    assert_eq!(kube_reserved_cpu_millis(4), 80);
    assert_eq!(kube_reserved_cpu_millis(8), 90);
    assert_eq!(kube_reserved_cpu_millis(96), 310);
    assert_eq!(kube_reserved_cpu_millis(0), 0);
}

#[test]
fn kubelet_max_pods_and_pods_per_core() {
    let max = build(&ctx_with(|n| n.max_pods = Some(110)), "m5.large");
    assert_resources(max.capacity(), &[("pods", "110")]);
    // AL2023 sizes kube-reserved memory by the ENI limit, not by maxPods.
    assert_resources(&max.overhead().kube_reserved, &[("memory", "574Mi")]);

    let ppc = build(&ctx_with(|n| n.pods_per_core = Some(10)), "m5.large");
    assert_resources(ppc.capacity(), &[("pods", "20")]);
    let ppc_big = build(&ctx_with(|n| n.pods_per_core = Some(100)), "m5.large");
    assert_resources(ppc_big.capacity(), &[("pods", "29")]);

    // Bottlerocket ignores podsPerCore and sizes kube-reserved memory by the pods capacity.
    let br = build(
        &ctx_with(|n| {
            n.ami_family = AmiFamily::Bottlerocket;
            n.pods_per_core = Some(10);
            n.max_pods = Some(110);
        }),
        "m5.large",
    );
    assert_resources(br.capacity(), &[("pods", "110")]);
    assert_resources(&br.overhead().kube_reserved, &[("memory", "1465Mi")]);
}

#[test]
fn reserved_enis_and_efa_only_interfaces() {
    let mut c = ctx();
    c.settings.reserved_enis = 1;
    let it = build(&c, "m5.large");
    // (3 − 1) × 9 + 2 = 20 pods; kube-reserved memory still uses 0 reserved ENIs.
    assert_resources(it.capacity(), &[("pods", "20")]);
    assert_resources(&it.overhead().kube_reserved, &[("memory", "574Mi")]);
    c.settings.reserved_enis = 5;
    assert_resources(build(&c, "m5.large").capacity(), &[("pods", "0")]);

    let efa = ctx_with(|n| n.network_interfaces = vec![(0, 0, false), (0, 1, true)]);
    let trn1 = build(&efa, "trn1.32xlarge");
    // Card 0: 5 − 1 efa-only = 4 usable: 4 × 49 + 2; one EFA advertised.
    assert_resources(trn1.capacity(), &[("pods", "198"), ("vpc.amazonaws.com/efa", "1")]);
    // m5.large has no EFA: offerings unavailable.
    assert!(build(&efa, "m5.large").offerings.iter().all(|o| !o.available));
    assert!(build(&efa, "trn1.32xlarge").offerings.iter().all(|o| o.available));
}

#[test]
fn windows_family() {
    let it = build(&ctx_with(|n| n.ami_family = AmiFamily::Windows2022), "m5.large");
    assert_resources(
        it.capacity(),
        &[("pods", "110"), ("ephemeral-storage", "50Gi"), ("vpc.amazonaws.com/PrivateIPv4Address", "9")],
    );
    assert_resources(&it.overhead().kube_reserved, &[("memory", "1465Mi")]);
    assert_resources(&it.overhead().eviction_threshold, &[("ephemeral-storage", "5Gi")]);
    assert_eq!(label(&it, OS).as_deref(), Some("windows"));
    assert_eq!(label(&it, WINDOWS_BUILD).as_deref(), Some("10.0.20348"));
    // Windows images are amd64 only: an arm64 type stays linux.
    let arm = build(&ctx_with(|n| n.ami_family = AmiFamily::Windows2019), "c6g.xlarge");
    assert_eq!(label(&arm, OS).as_deref(), Some("linux"));
}

#[test]
fn kubelet_reserved_and_eviction_from_a_node_class() {
    let spec: EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
        "subnetSelectorTerms": [{"id": "subnet-1"}],
        "securityGroupSelectorTerms": [{"id": "sg-1"}],
        "amiSelectorTerms": [{"alias": "al2@latest"}],
        "role": "KarpenterNodeRole",
        "kubelet": {
            "kubeReserved": {"cpu": "200m"},
            "systemReserved": {"memory": "100Mi", "pid": "1000"},
            "evictionHard": {"memory.available": "5%", "nodefs.available": "15.5%"}
        },
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": "100Gi"}}]
    }))
    .expect("spec decodes");
    let nc = NodeClassSettings::from_spec(&spec, false).expect("valid settings");
    assert_eq!(nc.ami_family, AmiFamily::Al2);
    let c = InstanceTypeContext { node_class: nc, ..ctx() };
    let it = build(&c, "m5.large");
    assert_resources(it.capacity(), &[("ephemeral-storage", "100Gi")]);
    // kubeReserved overrides cpu only.
    assert_resources(&it.overhead().kube_reserved, &[("cpu", "200m"), ("memory", "574Mi")]);
    assert_resources(&it.overhead().system_reserved, &[("memory", "100Mi"), ("pid", "1000")]);
    // ceil(7577Mi × 5 %) = ceil(7945060352 × 0.05) = ceil(397253017.6); 100Gi × 15.5 % = 15872Mi exactly.
    assert_resources(&it.overhead().eviction_threshold, &[("memory", "397253018"), ("ephemeral-storage", "15872Mi")]);
    // 7577Mi − 574Mi − 100Mi − 397253018 bytes.
    let want = (7577 - 574 - 100) * MIB - 397_253_018;
    assert_eq!(it.allocatable().memory().value(), Some(want));
    assert_eq!(it.allocatable().get("pid"), None, "pid is not a node resource");
}

#[test]
fn eviction_thresholds_parse() {
    assert_eq!(Threshold::parse("10%"), Some(Threshold::Percent(1000)));
    assert_eq!(Threshold::parse("7.5%"), Some(Threshold::Percent(750)));
    assert_eq!(Threshold::parse("0.05%"), Some(Threshold::Percent(5)));
    assert_eq!(Threshold::parse("100%").map(|t| t.bytes(1 << 30)), Some(Quantity::from_int(0, Format::BinarySI)));
    assert_eq!(Threshold::parse("500Mi").map(|t| t.bytes(1 << 30)), Some(q("500Mi")));
    for bad in ["101%", "1.234%", "%", "-5%", "abc", "-1Gi", ".5%"] {
        assert_eq!(Threshold::parse(bad), None, "{bad}");
    }
    let spec = KubeletConfiguration {
        eviction_hard: [("memory.available".to_string(), "lots".to_string())].into(),
        ..Default::default()
    };
    let mut s: EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
        "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r"
    }))
    .expect("spec decodes");
    s.kubelet = Some(spec);
    let err = NodeClassSettings::from_spec(&s, false).unwrap_err();
    assert!(err.to_string().contains("memory.available"), "{err}");
    s.kubelet =
        Some(KubeletConfiguration { kube_reserved: [("cpu".into(), "-1".into())].into(), ..Default::default() });
    assert!(NodeClassSettings::from_spec(&s, false).is_err());
}

#[test]
fn ephemeral_storage_choices() {
    let ebs = |size: &str| Some(BlockDevice { volume_size: Some(size.into()), ..Default::default() });
    let m5 = info("m5.large");
    let g4 = info("g4dn.xlarge");
    let mut nc = NodeClassSettings::default();
    assert_eq!(ephemeral_storage(&m5, &nc), q("20Gi"));
    nc.block_device_mappings = vec![
        BlockDeviceMapping { device_name: Some("/dev/xvda".into()), ebs: ebs("40Gi"), root_volume: false },
        BlockDeviceMapping { device_name: Some("/dev/xvdb".into()), ebs: ebs("80Gi"), root_volume: true },
    ];
    assert_eq!(ephemeral_storage(&m5, &nc), q("80Gi"), "root volume wins");
    nc.block_device_mappings[1].root_volume = false;
    assert_eq!(ephemeral_storage(&m5, &nc), q("40Gi"), "the family's device");
    nc.ami_family = AmiFamily::Bottlerocket;
    assert_eq!(ephemeral_storage(&m5, &nc), q("80Gi"), "Bottlerocket's data volume is /dev/xvdb");
    nc.ami_family = AmiFamily::Custom;
    assert_eq!(ephemeral_storage(&m5, &nc), q("80Gi"), "Custom: the last mapping");
    nc.block_device_mappings.clear();
    assert_eq!(ephemeral_storage(&m5, &nc), q("20Gi"));
    nc.instance_store_raid0 = true;
    assert_eq!(ephemeral_storage(&g4, &nc), q("125G"), "RAID0 over instance storage, decimal GB");
    assert_eq!(ephemeral_storage(&m5, &nc), q("20Gi"), "no instance storage: default");
}

#[test]
fn vm_memory_overhead_setting() {
    let mut c = ctx();
    c.settings.vm_memory_overhead_percent = 0.0;
    assert_resources(build(&c, "m5.large").capacity(), &[("memory", "8192Mi")]);
    c.settings.vm_memory_overhead_percent = 0.1;
    // 8192 − ceil(819.2)
    assert_resources(build(&c, "m5.large").capacity(), &[("memory", "7372Mi")]);
}

#[test]
fn offerings_prices_zones_and_availability() {
    let mut c = ctx();
    c.subnet_zones = Some(["us-west-2a", "us-west-2b"].iter().map(|z| z.to_string()).collect());
    c.zone_ids = [("us-west-2a", "usw2-az1"), ("us-west-2b", "usw2-az2")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let mut table = PriceTable::default();
    table.on_demand.insert("m5.large".into(), 0.096);
    table.spot.insert("m5.large".into(), [("us-west-2a".to_string(), 0.035), ("us-west-2b".to_string(), 0.04)].into());
    c.prices = PriceSource::Table(table);
    c.unavailable.insert(("spot".into(), "m5.large".into(), "us-west-2b".into()));
    let it = build(&c, "m5.large");
    let got: Vec<(String, String, f64, bool)> = it
        .offerings
        .iter()
        .map(|o| (o.zone().unwrap_or("").to_owned(), o.capacity_type().unwrap_or("").to_owned(), o.price, o.available))
        .collect();
    assert_eq!(
        got,
        vec![
            ("us-west-2a".into(), "on-demand".into(), 0.096, true),
            ("us-west-2a".into(), "spot".into(), 0.035, true),
            ("us-west-2b".into(), "on-demand".into(), 0.096, true),
            ("us-west-2b".into(), "spot".into(), 0.04, false),
        ]
    );
    assert_eq!(it.requirements.get(ZONE).values().len(), 2, "subnet zones only");
    let ids = it.requirements.get(aws_labels::ZONE_ID);
    assert!(ids.has("usw2-az1") && ids.has("usw2-az2"));
    assert_eq!(it.offerings[0].requirements.get(aws_labels::ZONE_ID).values().as_slice()[0].as_ref(), "usw2-az1");

    // Unpriced: t3.micro has no price at all, so its offerings exist but are unavailable.
    let t3 = build(&c, "t3.micro");
    assert_eq!(t3.offerings.len(), 4);
    assert!(t3.offerings.iter().all(|o| !o.available));

    // AL2023 has no a1 images.
    let mut est = ctx();
    assert!(build(&est, "a1.large").offerings.iter().all(|o| !o.available));
    est.node_class.ami_family = AmiFamily::Al2;
    assert!(build(&est, "a1.large").offerings.iter().all(|o| o.available && o.price > 0.0));
}

#[test]
fn unsupported_types_are_skipped() {
    let c = ctx();
    let mut i = info("m5.large");
    i.supported_virtualization_types = vec!["paravirtual".into()];
    assert!(c.instance_type(&i).is_none());
    let mut i = info("m5.large");
    i.processor_info.supported_architectures = vec!["x86_64_mac".into()];
    assert!(c.instance_type(&i).is_none());
    assert!(c.instance_type(&InstanceTypeInfo::default()).is_none());
    // A type EC2 describes without offerings gets none (and an empty zone requirement).
    let mut c = ctx();
    c.zones.clear();
    let it = build(&c, "m5.large");
    assert!(it.offerings.is_empty());
}

#[test]
fn catalogue_is_sorted() {
    let out: DescribeInstanceTypesOutput = serde_json::from_str(FIXTURE).expect("fixture decodes");
    let its = ctx().instance_types(out.instance_types.iter().rev());
    let names: Vec<&str> = its.iter().map(|i| i.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_eq!(its.len(), out.instance_types.len());
}

#[test]
fn estimated_prices_and_pod_eni_table() {
    let mut c = ctx();
    let m5 = info("m5.large");
    // No price source: every offering is available at the documented estimate.
    let it = build(&c, "m5.large");
    assert_eq!(it.offerings.len(), 6);
    assert!(it.offerings.iter().all(|o| o.available && o.price == crate::pricing::estimate(&m5)));
    // Security groups for pods: branch interfaces only for types the table lists.
    assert_eq!(it.capacity().get(resources::POD_ENI), None);
    c.branch_interfaces.insert("m5.large".into(), 9);
    assert_resources(build(&c, "m5.large").capacity(), &[("vpc.amazonaws.com/pod-eni", "9")]);
    assert_eq!(build(&c, "c6g.xlarge").capacity().get(resources::POD_ENI), None);
}

fn spec_with_kubelet(kubelet: serde_json::Value) -> EC2NodeClassSpec {
    serde_json::from_value(serde_json::json!({
        "subnetSelectorTerms": [{"id": "subnet-1"}], "securityGroupSelectorTerms": [{"id": "sg-1"}],
        "amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "r", "kubelet": kubelet
    }))
    .expect("spec decodes")
}

#[test]
fn kubelet_expressions_shape_capacity_and_overhead() {
    let spec = spec_with_kubelet(serde_json::json!({
        "maxPods": "min(max_pods, 20)",
        "kubeReserved": {"memory": "11 * max_pods + 100", "cpu": "vcpus * 25"},
        "systemReserved": {"pid": "max_pods * 10", "memory": "100Mi"}
    }));
    let c = InstanceTypeContext { node_class: NodeClassSettings::from_spec(&spec, true).expect("compiles"), ..ctx() };
    // m5.large: ENI default 29 → 20; memory 11 × 20 + 100 = 320 MiB (a multiple of 16); cpu 2 × 25 = 50m.
    let it = build(&c, "m5.large");
    assert_resources(it.capacity(), &[("pods", "20")]);
    assert_resources(&it.overhead().kube_reserved, &[("cpu", "50m"), ("memory", "320Mi")]);
    assert_resources(&it.overhead().system_reserved, &[("pid", "200"), ("memory", "100Mi")]);
    // t3.micro: ENI default 4 stays 4; memory 11 × 4 + 100 = 144 MiB.
    let small = build(&c, "t3.micro");
    assert_resources(small.capacity(), &[("pods", "4")]);
    assert_resources(&small.overhead().kube_reserved, &[("memory", "144Mi")]);
    assert_eq!(c.check_expressions([&info("m5.large"), &info("t3.micro")]), Ok(()));
}

#[test]
fn kubelet_expressions_are_ignored_with_the_gate_off() {
    let spec = spec_with_kubelet(serde_json::json!({
        "maxPods": "min(max_pods, 20)",
        "kubeReserved": {"memory": "11 * max_pods + 100", "cpu": "200m"}
    }));
    let nc = NodeClassSettings::from_spec(&spec, false).expect("settings");
    assert!(nc.expressions.is_empty());
    let it = build(&InstanceTypeContext { node_class: nc, ..ctx() }, "m5.large");
    // The family default max pods and the computed default memory; the quantity still applies.
    assert_resources(it.capacity(), &[("pods", "29")]);
    assert_resources(&it.overhead().kube_reserved, &[("cpu", "200m"), ("memory", "574Mi")]);
}

#[test]
fn kubelet_expression_failures_name_the_type_and_leave_it_out() {
    let bad = spec_with_kubelet(serde_json::json!({"maxPods": "max_pods +"}));
    let err = NodeClassSettings::from_spec(&bad, true).unwrap_err();
    assert!(matches!(err, InstanceTypeError::KubeletExpression(KubeletExpressionError::Invalid { .. })), "{err}");
    // Fails for the small type only: 4 ENI-limited pods minus 10.
    let spec = spec_with_kubelet(serde_json::json!({"maxPods": "max_pods - 10"}));
    let c = InstanceTypeContext { node_class: NodeClassSettings::from_spec(&spec, true).expect("compiles"), ..ctx() };
    let err = c.check_expressions([&info("m5.large"), &info("t3.micro")]).unwrap_err().to_string();
    assert!(err.contains("t3.micro") && err.contains("max_pods - 10") && err.contains("maxPods"), "{err}");
    assert!(c.instance_type(&info("t3.micro")).is_none());
    assert_resources(build(&c, "m5.large").capacity(), &[("pods", "19")]);
}
