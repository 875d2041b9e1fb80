use std::collections::BTreeMap;

use super::*;
use crate::api::{Alias, AliasError, EC2NodeClassSpec, conditions};

const BASE: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
  securityGroupSelectorTerms:
    - tags:
        karpenter.sh/discovery: my-cluster
"#;

fn base() -> EC2NodeClass {
    serde_saphyr::from_str(BASE).unwrap()
}

fn paths(nc: &EC2NodeClass) -> Vec<String> {
    nc.validate(&ValidationContext::new(crate::labels::provider_labels())).into_iter().map(|v| v.path).collect()
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn base_is_valid_and_round_trips() {
    let nc = base();
    assert!(paths(&nc).is_empty(), "{:?}", paths(&nc));
    let json = serde_json::to_value(&nc).unwrap();
    // Defaults appear after a round trip, like after the API server's defaulting.
    assert_eq!(json["spec"]["metadataOptions"]["httpTokens"], "required");
    assert!(json["spec"].get("tags").is_none(), "empty maps are not serialised");
    let back: EC2NodeClass = serde_json::from_value(json).unwrap();
    assert_eq!(back, nc);
}

#[test]
fn alias_parsing() {
    let a: Alias = "al2023@latest".parse().unwrap();
    assert_eq!((a.family, a.version.as_str(), a.is_latest()), (AmiFamily::Al2023, "latest", true));
    let b: Alias = "bottlerocket@v1.26.2".parse().unwrap();
    assert_eq!((b.family, b.is_latest()), (AmiFamily::Bottlerocket, false));
    assert_eq!(b.to_string(), "bottlerocket@v1.26.2");
    assert_eq!("windows2025@latest".parse::<Alias>().unwrap().family, AmiFamily::Windows2025);
    assert_eq!("windows2019@v1".parse::<Alias>(), Err(AliasError::WindowsVersion));
    assert!(matches!("ubuntu@latest".parse::<Alias>(), Err(AliasError::UnknownFamily(_))));
    assert!(matches!("AL2023@latest".parse::<Alias>(), Err(AliasError::UnknownFamily(_))));
    for bad in ["al2023", "al2023@", "@latest", "al-2023@latest"] {
        assert!(matches!(bad.parse::<Alias>(), Err(AliasError::Format(_))), "{bad}");
    }
    assert_eq!(format!("al2023@{}", "1".repeat(30)).parse::<Alias>(), Err(AliasError::TooLong));
}

#[test]
fn effective_family_prefers_ami_family() {
    let mut nc = base();
    assert_eq!(nc.effective_ami_family(), Some(AmiFamily::Al2023));
    assert_eq!(nc.alias().map(|a| a.version), Some("latest".to_string()));
    nc.spec.ami_family = Some(AmiFamily::Custom);
    assert_eq!(nc.effective_ami_family(), Some(AmiFamily::Custom));
    assert!(paths(&nc).is_empty(), "Custom is allowed with an alias");
    nc.spec.ami_family = Some(AmiFamily::Bottlerocket);
    assert_eq!(paths(&nc), vec!["spec.amiFamily"]);
    nc.spec.ami_family = None;
    nc.spec.ami_selector_terms[0].alias = None;
    nc.spec.ami_selector_terms[0].id = Some("ami-0123".into());
    assert_eq!(nc.effective_ami_family(), None);
    assert_eq!(paths(&nc), vec!["spec.amiFamily"]);
}

#[test]
fn ami_family_names() {
    for f in AmiFamily::ALL {
        assert_eq!(f.as_str().parse::<AmiFamily>(), Ok(f));
        assert_eq!(serde_json::to_value(f).unwrap(), f.as_str());
        if let Some(a) = f.alias_name() {
            assert_eq!(AmiFamily::from_alias_name(a), Some(f));
        }
    }
    assert_eq!(AmiFamily::Custom.alias_name(), None);
    assert!(AmiFamily::Windows2022.is_windows() && !AmiFamily::Al2.is_windows());
}

#[test]
fn every_violation_is_reported_with_its_path() {
    let mut nc = base();
    nc.spec.ami_selector_terms.push(AmiSelectorTerm { id: Some("ami-01".into()), ..Default::default() });
    nc.spec.instance_profile = Some("profile".into());
    nc.spec.tags = tags(&[("kubernetes.io/cluster/foo", "owned"), ("team", "a")]);
    nc.spec.subnet_selector_terms[0].id = Some("subnet-01".into());
    nc.spec.metadata_options.http_put_response_hop_limit = 0;
    let p = paths(&nc);
    for want in [
        "spec.amiSelectorTerms[0].alias",
        "spec",
        "spec.tags[kubernetes.io/cluster/foo]",
        "spec.subnetSelectorTerms[0]",
        "spec.metadataOptions.httpPutResponseHopLimit",
    ] {
        assert!(p.iter().any(|x| x == want), "missing {want} in {p:?}");
    }
    assert!(!p.iter().any(|x| x == "spec.tags[team]"));
}

#[test]
fn selector_terms_counts() {
    let mut nc = base();
    nc.spec.subnet_selector_terms =
        (0..31).map(|i| SubnetSelectorTerm { id: Some(format!("subnet-{i}")), tags: None }).collect();
    nc.spec.security_group_selector_terms.clear();
    let p = paths(&nc);
    assert!(p.contains(&"spec.subnetSelectorTerms".to_string()), "{p:?}");
    assert!(p.contains(&"spec.securityGroupSelectorTerms".to_string()), "{p:?}");
    nc.spec.subnet_selector_terms.truncate(30);
    nc.spec
        .security_group_selector_terms
        .push(SecurityGroupSelectorTerm { name: Some("x".into()), ..Default::default() });
    assert!(paths(&nc).is_empty());
}

#[test]
fn selector_tags() {
    let mut nc = base();
    nc.spec.security_group_selector_terms[0].tags = Some(tags(&[("a", "*"), ("", "x"), ("b", "")]));
    assert_eq!(
        paths(&nc),
        vec!["spec.securityGroupSelectorTerms[0].tags[]", "spec.securityGroupSelectorTerms[0].tags[b]"]
    );
    let many: Vec<(String, String)> = (0..21).map(|i| (format!("k{i}"), "v".to_string())).collect();
    nc.spec.security_group_selector_terms[0].tags = Some(many.into_iter().collect());
    assert_eq!(paths(&nc), vec!["spec.securityGroupSelectorTerms[0].tags"]);
}

#[test]
fn owners() {
    let mut nc = base();
    nc.spec.ami_family = Some(AmiFamily::Al2023);
    nc.spec.ami_selector_terms[0] = AmiSelectorTerm { name: Some("n".into()), ..Default::default() };
    for ok in ["self", "amazon", "aws-marketplace", "123456789012"] {
        nc.spec.ami_selector_terms[0].owner = Some(ok.into());
        assert!(paths(&nc).is_empty(), "{ok}");
    }
    for bad in ["12345678901", "Amazon", "", "1234567890123"] {
        nc.spec.ami_selector_terms[0].owner = Some(bad.into());
        assert_eq!(paths(&nc), vec!["spec.amiSelectorTerms[0].owner"], "{bad}");
    }
}

#[test]
fn role_and_instance_profile() {
    let mut nc = base();
    nc.spec.role = None;
    assert_eq!(paths(&nc), vec!["spec"]);
    nc.spec.instance_profile = Some(String::new());
    assert_eq!(paths(&nc), vec!["spec.instanceProfile"]);
    nc.spec.instance_profile = Some("p".into());
    assert!(paths(&nc).is_empty());
    assert!(!nc.spec.manages_instance_profile());
}

#[test]
fn kubelet_rules() {
    let mut nc = base();
    let mut k = KubeletConfiguration {
        system_reserved: tags(&[("cpu", "100m"), ("memory", "-1Gi"), ("gpu", "1")]),
        kube_reserved: tags(&[("pid", "1000"), ("ephemeral-storage", "-2Gi")]),
        eviction_hard: tags(&[
            ("memory.available", "100%"),
            ("nodefs.available", "100.01%"),
            ("pid.available", "10Ki"),
        ]),
        eviction_soft: tags(&[("memory.available", "99.99%"), ("imagefs.available", "5%")]),
        eviction_soft_grace_period: [("memory.available", "1m"), ("nodefs.inodesFree", "30s")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect(),
        image_gc_high_threshold_percent: Some(50),
        image_gc_low_threshold_percent: Some(60),
        max_pods: Some(MaxPods::Static(-1)),
        ..Default::default()
    };
    nc.spec.kubelet = Some(k.clone());
    let p = paths(&nc);
    assert_eq!(
        p,
        vec![
            "spec.kubelet.maxPods",
            "spec.kubelet.systemReserved[gpu]",
            "spec.kubelet.systemReserved[memory]",
            "spec.kubelet.kubeReserved[ephemeral-storage]",
            "spec.kubelet.evictionHard[nodefs.available]",
            "spec.kubelet.evictionSoft[imagefs.available]",
            "spec.kubelet.evictionSoftGracePeriod[nodefs.inodesFree]",
            "spec.kubelet.imageGCHighThresholdPercent",
        ]
    );
    k.system_reserved.remove("gpu");
    k.system_reserved.insert("memory".into(), "1Gi".into());
    k.kube_reserved.insert("ephemeral-storage".into(), "1Gi".into());
    k.eviction_hard.insert("nodefs.available".into(), "10%".into());
    k.eviction_soft.remove("imagefs.available");
    k.eviction_soft_grace_period.remove("nodefs.inodesFree");
    k.image_gc_high_threshold_percent = Some(61);
    k.max_pods = Some(MaxPods::Static(0));
    nc.spec.kubelet = Some(k.clone());
    assert!(paths(&nc).is_empty(), "{:?}", paths(&nc));
    // Values that are not quantities are CEL expressions: the API accepts them (the controller checks them).
    k.max_pods = Some(MaxPods::Expression("min(max_pods, 50)".into()));
    k.kube_reserved.insert("memory".into(), "11 * max_pods + 255".into());
    nc.spec.kubelet = Some(k.clone());
    assert!(paths(&nc).is_empty(), "{:?}", paths(&nc));
    assert!(k.has_expressions());
}

/// `base()` with `kubelet` (YAML flow map) and, when given, `amiFamily`/alias of that family.
fn with_kubelet(kubelet: &str, alias: &str) -> EC2NodeClass {
    let text = BASE.replace("alias: al2023@latest", &format!("alias: {alias}"));
    serde_saphyr::from_str(&format!("{text}  kubelet: {kubelet}\n")).expect("decodes")
}

fn messages(nc: &EC2NodeClass) -> Vec<String> {
    nc.validate(&ValidationContext::new(crate::labels::provider_labels())).into_iter().map(|v| v.to_string()).collect()
}

#[test]
fn open_kubelet_map_decodes_whatever_its_content() {
    // Malformed interpreted values and unknown fields never make the class undecodable: they stay raw.
    let nc = with_kubelet(
        r#"{podsPerCore: "x", evictionHard: 5, maxPods: 20, fooBar: {a: 1}, serializeImagePulls: false}"#,
        "al2023@latest",
    );
    let k = nc.spec.kubelet.as_ref().unwrap();
    assert_eq!(k.max_pods, Some(MaxPods::Static(20)));
    assert_eq!(k.pods_per_core, None);
    assert!(k.eviction_hard.is_empty());
    assert_eq!(k.other.get("podsPerCore"), Some(&serde_json::json!("x")));
    assert_eq!(k.other.get("evictionHard"), Some(&serde_json::json!(5)));
    let passthrough: Vec<&str> = k.passthrough().map(|(n, _)| n.as_str()).collect();
    assert_eq!(passthrough, ["fooBar", "serializeImagePulls"], "malformed interpreted fields are not passed on");
    // Every field round-trips, malformed ones included (the drift hash sees them).
    let json = serde_json::to_value(&nc.spec.kubelet).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"podsPerCore": "x", "evictionHard": 5, "maxPods": 20, "fooBar": {"a": 1}, "serializeImagePulls": false})
    );
    assert_eq!(
        messages(&nc),
        [
            "spec.kubelet.evictionHard: expected a map",
            "spec.kubelet.fooBar: unknown field",
            "spec.kubelet.podsPerCore: expected an integer",
        ]
    );
}

#[test]
fn interpreted_values_the_typed_slot_refuses_are_reported_even_when_their_json_shape_fits() {
    // A Go duration KDuration does not take, and a maxPods beyond int32.
    let nc = with_kubelet(
        r#"{evictionSoftGracePeriod: {memory.available: "1.5m"}, evictionSoft: {memory.available: 5%}, maxPods: 4294967296}"#,
        "al2023@latest",
    );
    let m = messages(&nc);
    assert_eq!(m.len(), 3, "{m:?}");
    assert!(m[2].starts_with("spec.kubelet.evictionSoft["), "the soft key has no grace period left: {m:?}");
    assert!(m.iter().any(|x| x.starts_with("spec.kubelet.evictionSoftGracePeriod: ")), "{m:?}");
    assert!(m.iter().any(|x| x.starts_with("spec.kubelet.maxPods: ") && x.contains("int32")), "{m:?}");
}

#[test]
fn passthrough_fields_per_family() {
    let fields = r#"{maxPods: 30, serializeImagePulls: false, eventRecordQPS: 10}"#;
    assert!(messages(&with_kubelet(fields, "al2023@latest")).is_empty());
    assert!(messages(&with_kubelet(fields, "al2@latest")).is_empty());
    assert_eq!(
        messages(&with_kubelet(fields, "bottlerocket@latest"))
            .iter()
            .map(|m| m.split(':').next().unwrap())
            .collect::<Vec<_>>(),
        ["spec.kubelet.serializeImagePulls"],
        "Bottlerocket has event-qps but no setting for serializeImagePulls"
    );
    assert_eq!(
        messages(&with_kubelet(fields, "windows2022@latest"))
            .iter()
            .map(|m| m.split(':').next().unwrap())
            .collect::<Vec<_>>(),
        ["spec.kubelet.eventRecordQPS", "spec.kubelet.serializeImagePulls"]
    );
    let custom = BASE.replace("alias: al2023@latest", "id: ami-123\n  amiFamily: Custom");
    let custom: EC2NodeClass = serde_saphyr::from_str(&format!("{custom}  kubelet: {fields}\n")).expect("decodes");
    assert!(messages(&custom).is_empty(), "{:?}", messages(&custom));
}

#[test]
fn percentages() {
    for ok in ["0%", "5%", "99.99%", "100%", "100.0%", "100.00%", "7.5%"] {
        assert!(is_percentage(ok), "{ok}");
    }
    for bad in ["101%", "100.01%", "5", "%", ".5%", "5.%", "5.123%", "-1%", "1000%"] {
        assert!(!is_percentage(bad), "{bad}");
    }
}

#[test]
fn volume_sizes() {
    assert_eq!(parse_volume_size("20Gi"), Some(20 << 30));
    assert_eq!(parse_volume_size("59000Gi"), Some(59_000 << 30));
    assert_eq!(parse_volume_size("64000G"), Some(64_000_000_000_000));
    assert_eq!(parse_volume_size("58Ti"), Some(58 << 40));
    assert_eq!(parse_volume_size("64T"), Some(64_000_000_000_000));
    for bad in ["59001Gi", "64001G", "59Ti", "65T", "0Gi", "020Gi", "20", "20GB", "Gi", "1.5Gi", "-1Gi", "100000Gi"] {
        assert_eq!(parse_volume_size(bad), None, "{bad}");
    }
    let bd = BlockDevice { volume_size: Some("3G".into()), ..Default::default() };
    assert_eq!(bd.volume_size_gib(), Some(3), "3 GB rounds up to 3 GiB");
}

#[test]
fn block_devices() {
    let mut nc = base();
    let root = |size: &str| BlockDeviceMapping {
        device_name: Some("/dev/xvda".into()),
        root_volume: true,
        ebs: Some(BlockDevice { volume_size: Some(size.into()), ..Default::default() }),
    };
    nc.spec.block_device_mappings = vec![root("100Gi"), root("60000Gi")];
    assert_eq!(paths(&nc), vec!["spec.blockDeviceMappings", "spec.blockDeviceMappings[1].ebs.volumeSize"]);
    nc.spec.block_device_mappings[1].root_volume = false;
    nc.spec.block_device_mappings[1].ebs =
        Some(BlockDevice { volume_initialization_rate: Some(99), ..Default::default() });
    assert_eq!(
        paths(&nc),
        vec![
            "spec.blockDeviceMappings[1].ebs",
            "spec.blockDeviceMappings[1].ebs.volumeInitializationRate",
            "spec.blockDeviceMappings[1].ebs.volumeInitializationRate",
        ]
    );
    nc.spec.block_device_mappings[1].ebs = Some(BlockDevice {
        snapshot_id: Some("snap-1".into()),
        volume_initialization_rate: Some(300),
        ..Default::default()
    });
    assert!(paths(&nc).is_empty());
    assert_eq!(nc.spec.root_volume().and_then(|m| m.ebs.as_ref()).and_then(BlockDevice::volume_size_gib), Some(100));
}

#[test]
fn network_interfaces() {
    let ni = |card, dev, t| NetworkInterface { network_card_index: card, device_index: dev, interface_type: t };
    let mut nc = base();
    nc.spec.network_interfaces = vec![
        ni(0, 0, InterfaceType::Interface),
        ni(1, 0, InterfaceType::EfaOnly),
        ni(1, 1, InterfaceType::EfaOnly),
        ni(2, 0, InterfaceType::EfaOnly),
        ni(2, 0, InterfaceType::Interface),
    ];
    assert_eq!(paths(&nc), vec!["spec.networkInterfaces[2]", "spec.networkInterfaces[4]"]);
    nc.spec.network_interfaces = vec![ni(0, 1, InterfaceType::Interface), ni(0, 0, InterfaceType::EfaOnly)];
    assert_eq!(paths(&nc), vec!["spec.networkInterfaces"]);
}

#[test]
fn connection_tracking_and_placement_group() {
    let mut nc = base();
    nc.spec.connection_tracking = Some(ConnectionTracking::default());
    nc.spec.placement_group_selector = Some(PlacementGroupSelector::default());
    assert_eq!(paths(&nc), vec!["spec.placementGroupSelector", "spec.connectionTracking"]);
    nc.spec.connection_tracking = Some(ConnectionTracking {
        tcp_established_timeout: Some(59),
        udp_stream_timeout: Some(180),
        udp_timeout: Some(61),
    });
    nc.spec.placement_group_selector = Some(PlacementGroupSelector { name: None, id: Some("pg-XYZ".into()) });
    assert_eq!(
        paths(&nc),
        vec![
            "spec.placementGroupSelector.id",
            "spec.connectionTracking.tcpEstablishedTimeout",
            "spec.connectionTracking.udpTimeout"
        ]
    );
}

#[test]
fn validation_is_deterministic() {
    let mut nc = base();
    nc.spec.tags = tags(&[("karpenter.sh/nodepool", "x"), ("eks:eks-cluster-name", "y"), ("", "z")]);
    let a = nc.validate(&ValidationContext::new(crate::labels::provider_labels()));
    let b = nc.clone().validate(&ValidationContext::new(crate::labels::provider_labels()));
    assert_eq!(a, b);
    assert_eq!(
        a.into_iter().map(|v| v.path).collect::<Vec<_>>(),
        vec!["spec.tags[]", "spec.tags[eks:eks-cluster-name]", "spec.tags[karpenter.sh/nodepool]"]
    );
}

#[test]
fn spec_validate_uses_spec_paths() {
    let mut spec: EC2NodeClassSpec = base().spec;
    spec.ip_prefix_count = Some(-1);
    let v = spec.validate(&ValidationContext::new(crate::labels::provider_labels()));
    assert!(v.has_path("spec.ipPrefixCount"));
    let mut out = Violations::new();
    spec.validate_at("x", &mut out);
    assert!(out.has_path("x.ipPrefixCount"));
}

#[test]
fn ready_dependents_follow_the_gate() {
    assert_eq!(conditions::ready_dependents(false).len(), 6);
    let with = conditions::ready_dependents(true);
    assert!(with.contains(&conditions::CAPACITY_RESERVATIONS_READY));
    assert!(!with.contains(&conditions::READY));
}

#[test]
fn drift_hash_input_covers_the_right_fields() {
    let mut nc = base();
    let a = nc.spec.drift_hash_input(Some("CA"));
    assert_eq!(a["amiFamily"], "AL2023", "resolved from the alias");
    assert_eq!(a["caBundle"], "CA");
    for f in crate::api::HASH_EXCLUDED_FIELDS.iter().filter(|f| **f != "amiFamily") {
        assert!(a.get(*f).is_none(), "{f}");
    }
    // Selector terms, ipPrefixCount and the raw amiFamily do not change the input when the resolved family stays.
    nc.spec.subnet_selector_terms[0].id = Some("subnet-1".into());
    nc.spec.ip_prefix_count = Some(2);
    nc.spec.ami_family = Some(AmiFamily::Al2023);
    assert_eq!(nc.spec.drift_hash_input(Some("CA")), a);
    // Anything else does.
    nc.spec.metadata_options.http_tokens = crate::api::HttpTokens::Optional;
    assert_ne!(nc.spec.drift_hash_input(Some("CA")), a);
    nc.spec.metadata_options.http_tokens = crate::api::HttpTokens::Required;
    nc.spec.ami_family = Some(AmiFamily::Custom);
    assert_ne!(nc.spec.drift_hash_input(Some("CA")), a);
}

#[test]
fn max_pods_is_an_int32_or_an_expression() {
    let decode = |s: &str| serde_json::from_str::<MaxPods>(s);
    assert_eq!(decode("20").unwrap(), MaxPods::Static(20));
    assert_eq!(decode("-1").unwrap(), MaxPods::Static(-1), "validation, not decoding, rejects negatives");
    assert_eq!(decode("\"min(max_pods, 20)\"").unwrap(), MaxPods::Expression("min(max_pods, 20)".into()));
    let err = decode("2147483648").unwrap_err().to_string();
    assert!(err.contains("2147483648 is out of the int32 range"), "{err}");
    assert!(decode("1.5").is_err() && decode("true").is_err());
    // An int serializes as the former int32 field did (the drift hash depends on it).
    assert_eq!(serde_json::to_string(&MaxPods::Static(20)).unwrap(), "20");
}

#[test]
fn one_image_gc_threshold_alone_is_judged_against_the_kubelets_default_other() {
    // The kubelet fills the unset one with its default (high 85, low 80) and refuses low >= high.
    for (kubelet, problem) in [
        (
            "{imageGCHighThresholdPercent: 80}",
            Some(
                "imageGCHighThresholdPercent: must be greater than the kubelet's default imageGCLowThresholdPercent (80)",
            ),
        ),
        ("{imageGCHighThresholdPercent: 81}", None),
        (
            "{imageGCLowThresholdPercent: 85}",
            Some(
                "imageGCLowThresholdPercent: must be less than the kubelet's default imageGCHighThresholdPercent (85)",
            ),
        ),
        ("{imageGCLowThresholdPercent: 84}", None),
        ("{imageGCHighThresholdPercent: 50, imageGCLowThresholdPercent: 40}", None),
    ] {
        let found = messages(&with_kubelet(kubelet, "al2023@latest"));
        match problem {
            None => assert!(found.is_empty(), "{kubelet}: {found:?}"),
            Some(p) => assert!(found.iter().any(|m| m.contains(p)), "{kubelet}: {found:?}"),
        }
    }
}
