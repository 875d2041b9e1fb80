//! Golden user data per family. Regenerate after an intended change with
//! `KARPENTER_UPDATE_GOLDEN=1 cargo test -p karpenter-aws --lib launch::userdata` and review the diff.

use std::path::PathBuf;

use karpenter_api::KDuration;
use karpenter_api::nodeclaim::TaintEffect;

use super::*;

fn config() -> BootstrapConfig {
    let mut kubelet = KubeletConfiguration {
        cluster_dns: vec!["10.100.0.10".into()],
        max_pods: Some(MaxPods::Static(29)),
        ..Default::default()
    };
    kubelet.kube_reserved.insert("cpu".into(), "100m".into());
    kubelet.eviction_hard.insert("memory.available".into(), "5%".into());
    BootstrapConfig {
        cluster_name: "my-cluster".into(),
        cluster_endpoint: "https://ABC.gr7.us-west-2.eks.amazonaws.com".into(),
        ca_bundle: Some("Q0EtQlVORExF".into()),
        service_cidr: Some("10.100.0.0/16".into()),
        kubelet,
        labels: [
            ("karpenter.sh/capacity-type".to_string(), "on-demand".to_string()),
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
        ]
        .into(),
        taints: vec![
            Taint::new("dedicated", Some("gpu"), TaintEffect::NoSchedule),
            Taint::new("karpenter.sh/unregistered", None, TaintEffect::NoExecute),
        ],
        instance_store_raid0: false,
        custom_user_data: None,
    }
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/launch/userdata/golden").join(name);
    if std::env::var_os("KARPENTER_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(actual, expected, "golden {name} differs");
}

#[test]
fn golden_per_family() {
    let c = config();
    golden("al2023.txt", &user_data(AmiFamily::Al2023, &c).unwrap());
    golden("al2.txt", &user_data(AmiFamily::Al2, &c).unwrap());
    golden("bottlerocket.toml", &user_data(AmiFamily::Bottlerocket, &c).unwrap());
    golden("windows.ps1", &user_data(AmiFamily::Windows2022, &c).unwrap());
    // The three Windows families bootstrap alike.
    assert_eq!(user_data(AmiFamily::Windows2019, &c), user_data(AmiFamily::Windows2025, &c));
    assert_eq!(user_data(AmiFamily::Custom, &c).unwrap(), "");
}

#[test]
fn golden_merges_with_node_class_user_data() {
    let mut c = config();
    c.custom_user_data = Some("#!/bin/bash\r\necho hello\r\n".into());
    golden("al2023-shell.txt", &user_data(AmiFamily::Al2023, &c).unwrap());
    c.custom_user_data = Some(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\n\
         Content-Type: application/node.eks.aws\n\n---\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n\
         spec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n\n--BOUNDARY\n\
         Content-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho mime\n\n--BOUNDARY--\n"
            .into(),
    );
    golden("al2023-mime.txt", &user_data(AmiFamily::Al2023, &c).unwrap());
    golden("al2-mime.txt", &user_data(AmiFamily::Al2, &c).unwrap());
    c.custom_user_data = Some(
        "[settings.kubernetes]\nmax-pods = 5\ncluster-name = \"theirs\"\nfoo = \"bar\"\n\
         [settings.kubernetes.node-labels]\n\"team\" = \"a\"\n\"karpenter.sh/nodepool\" = \"mine\"\n\
         [settings.host-containers.admin]\nenabled = true\n"
            .into(),
    );
    golden("bottlerocket-merged.toml", &user_data(AmiFamily::Bottlerocket, &c).unwrap());
    c.custom_user_data = Some("<powershell>\nWrite-Host 'before'\n</powershell>".into());
    golden("windows-merged.ps1", &user_data(AmiFamily::Windows2019, &c).unwrap());
    c.custom_user_data = Some("anything at all\n".into());
    assert_eq!(user_data(AmiFamily::Custom, &c).unwrap(), "anything at all\n");
}

#[test]
fn al2023_node_config_part_comes_last_and_user_node_config_is_typed() {
    let mut c = config();
    c.custom_user_data = Some("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {}\n".into());
    let parts = parse_mime(&user_data(AmiFamily::Al2023, &c).unwrap()).unwrap();
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0].content_type, NODEADM_CONTENT_TYPE);
    assert!(parts[0].body.starts_with("apiVersion: node.eks.aws/v1alpha1"));
    assert!(parts[1].body.contains("name: \"my-cluster\""));
}

#[test]
fn bottlerocket_ours_win_on_cluster_keys_and_labels_merge() {
    let mut c = config();
    c.custom_user_data = Some(
        "[settings.kubernetes]\ncluster-name = \"theirs\"\nmax-pods = 5\n[settings.kubernetes.node-labels]\n\
         team = \"a\"\n\"karpenter.sh/nodepool\" = \"mine\"\n"
            .into(),
    );
    let out: toml::Table = user_data(AmiFamily::Bottlerocket, &c).unwrap().parse().unwrap();
    let k = &out["settings"]["kubernetes"];
    assert_eq!(k["cluster-name"].as_str(), Some("my-cluster"));
    assert_eq!(k["max-pods"].as_integer(), Some(29));
    assert_eq!(k["node-labels"]["team"].as_str(), Some("a"));
    assert_eq!(k["node-labels"]["karpenter.sh/nodepool"].as_str(), Some("default"));
    // A scalar where a table goes is an error that names it (the node class goes not ready), not a panic.
    for bad in ["settings = 3\n", "[settings]\nkubernetes = \"x\"\n"] {
        c.custom_user_data = Some(bad.into());
        let err = user_data(AmiFamily::Bottlerocket, &c).unwrap_err();
        assert!(matches!(&err, UserDataError::InvalidToml(m) if m.contains("not a table")), "{bad}: {err}");
    }
}

#[test]
fn al2_raid0_grace_periods_and_quoting() {
    let mut c = config();
    c.instance_store_raid0 = true;
    c.cluster_name = "it's".into();
    c.kubelet.eviction_soft.insert("memory.available".into(), "10%".into());
    c.kubelet.eviction_soft_grace_period.insert("memory.available".into(), "1m".parse::<KDuration>().unwrap());
    let out = user_data(AmiFamily::Al2, &c).unwrap();
    assert!(out.contains("/etc/eks/bootstrap.sh 'it'\\''s' "), "{out}");
    assert!(out.contains("--local-disks raid0"));
    assert!(out.contains("--eviction-soft-grace-period=\"memory.available=1m\""));
    let nc = node_config(&c);
    assert_eq!(nc["spec"]["instance"]["localStorage"]["strategy"], "RAID0");
    assert_eq!(nc["spec"]["kubelet"]["config"]["evictionSoftGracePeriod"]["memory.available"], "1m");
}

#[test]
fn malformed_user_data_is_an_error() {
    let mut c = config();
    c.custom_user_data = Some("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"X\"\n\n--X\nno".into());
    assert!(matches!(user_data(AmiFamily::Al2023, &c), Err(UserDataError::InvalidMime(_))));
    c.custom_user_data = Some("[settings\nbroken".into());
    assert!(matches!(user_data(AmiFamily::Bottlerocket, &c), Err(UserDataError::InvalidToml(_))));
    // Not MIME and not TOML: fine for a shell family.
    c.custom_user_data = Some("[settings\nbroken".into());
    assert!(user_data(AmiFamily::Al2, &c).is_ok());
}

#[test]
fn mime_round_trip() {
    let parts = vec![
        MimePart { content_type: SHELL_CONTENT_TYPE.into(), body: "#!/bin/sh\necho a".into() },
        MimePart { content_type: NODEADM_CONTENT_TYPE.into(), body: "---\nkind: NodeConfig".into() },
    ];
    assert_eq!(parse_mime(&write_mime(&parts)).unwrap(), parts);
    assert!(is_mime("MIME-Version: 1.0\n"));
    assert!(!is_mime("#!/bin/bash\n"));
}

/// `config()` with passed-through fields (and a malformed interpreted one, which is never passed on).
fn passthrough_config() -> BootstrapConfig {
    let mut c = config();
    for (k, v) in [
        ("serializeImagePulls", serde_json::json!(false)),
        ("eventRecordQPS", serde_json::json!(10)),
        ("allowedUnsafeSysctls", serde_json::json!(["net.core.somaxconn"])),
        ("authentication", serde_json::json!({"webhook": {"cacheTTL": "1m"}})),
        ("registerWithTaints", serde_json::json!([{"key": "mine", "effect": "NoSchedule"}])),
        ("podsPerCore", serde_json::json!("x")),
    ] {
        c.kubelet.other.insert(k.into(), v);
    }
    c
}

#[test]
fn al2023_merges_passthrough_fields_into_the_kubelet_config_and_ours_win() {
    let nc = node_config(&passthrough_config());
    let kc = &nc["spec"]["kubelet"]["config"];
    assert_eq!(kc["serializeImagePulls"], false);
    assert_eq!(kc["eventRecordQPS"], 10);
    assert_eq!(kc["authentication"]["webhook"]["cacheTTL"], "1m");
    assert_eq!(kc["maxPods"], 29, "interpreted fields are still there");
    assert!(kc.get("podsPerCore").is_none(), "a malformed interpreted field is not passed on");
    let taints: Vec<&str> =
        kc["registerWithTaints"].as_array().unwrap().iter().map(|t| t["key"].as_str().unwrap()).collect();
    assert_eq!(taints, ["dedicated", "karpenter.sh/unregistered"], "Karpenter's registration taints win");
    let text = user_data(AmiFamily::Al2023, &passthrough_config()).unwrap();
    assert!(text.contains("serializeImagePulls: false"), "{text}");
}

#[test]
fn al2_merges_passthrough_fields_into_the_kubelet_config_file_before_bootstrap() {
    let text = user_data(AmiFamily::Al2, &passthrough_config()).unwrap();
    let script = &parse_mime(&text).unwrap()[0].body;
    let merge = script.find("jq -s '.[0] * .[1]' /etc/kubernetes/kubelet/kubelet-config.json").expect(script);
    let bootstrap = script.find("/etc/eks/bootstrap.sh").unwrap();
    assert!(merge < bootstrap, "merged before bootstrap.sh edits the file:\n{script}");
    let json_line = script
        .lines()
        .skip_while(|l| !l.starts_with("cat > /tmp/karpenter-kubelet-config.json <<'KARPENTER_KUBELET_CONFIG'"))
        .nth(1)
        .expect("heredoc body");
    let fields: serde_json::Value = serde_json::from_str(json_line).unwrap();
    assert_eq!(fields["serializeImagePulls"], false);
    assert_eq!(fields["authentication"]["webhook"]["cacheTTL"], "1m");
    assert!(fields.get("podsPerCore").is_none());
    // Nothing to pass through: no merge step.
    assert!(!user_data(AmiFamily::Al2, &config()).unwrap().contains("jq "));
}

#[test]
fn bottlerocket_gets_the_settings_it_has_windows_and_custom_none() {
    let text = user_data(AmiFamily::Bottlerocket, &passthrough_config()).unwrap();
    let root: toml::Table = text.parse().unwrap();
    let kube = root["settings"]["kubernetes"].as_table().unwrap();
    assert_eq!(kube["event-qps"].as_integer(), Some(10));
    assert_eq!(kube["allowed-unsafe-sysctls"].as_array().unwrap()[0].as_str(), Some("net.core.somaxconn"));
    for absent in ["serialize-image-pulls", "serializeImagePulls", "authentication", "registerWithTaints"] {
        assert!(!kube.contains_key(absent), "{absent} has no Bottlerocket setting:\n{text}");
    }
    let windows = user_data(AmiFamily::Windows2022, &passthrough_config()).unwrap();
    assert_eq!(windows, user_data(AmiFamily::Windows2022, &config()).unwrap(), "validation rejects them for Windows");
    let mut custom = passthrough_config();
    custom.custom_user_data = Some("#!/bin/bash\necho mine\n".into());
    assert_eq!(user_data(AmiFamily::Custom, &custom).unwrap(), "#!/bin/bash\necho mine\n", "Custom stays verbatim");
}

/// The MIME parts of a rendered document, by content type and body.
fn parts_of(out: &str) -> Vec<MimePart> {
    parse_mime(out).unwrap()
}

/// The `--kubelet-extra-args` of AL2 user data, split as bootstrap.sh hands them to the kubelet.
fn al2_extra_args(out: &str) -> Vec<String> {
    let start = out.find("--kubelet-extra-args '").expect("extra args") + "--kubelet-extra-args '".len();
    let rest = &out[start..];
    let quoted = &rest[..rest.find('\'').unwrap()];
    quoted.split(' ').map(|a| a.replace('"', "")).collect()
}

#[test]
fn eviction_flags_take_signal_less_than_threshold_and_the_other_maps_take_equals() {
    let mut c = config();
    c.kubelet.eviction_soft.insert("nodefs.available".into(), "15%".into());
    c.kubelet.eviction_soft_grace_period.insert("nodefs.available".into(), "2m".parse::<KDuration>().unwrap());
    c.kubelet.system_reserved.insert("memory".into(), "100Mi".into());
    for family in [AmiFamily::Al2, AmiFamily::Windows2022] {
        let out = user_data(family, &c).unwrap();
        for expected in [
            "--eviction-hard=\"memory.available<5%\"",
            "--eviction-soft=\"nodefs.available<15%\"",
            "--eviction-soft-grace-period=\"nodefs.available=2m\"",
            "--kube-reserved=\"cpu=100m\"",
            "--system-reserved=\"memory=100Mi\"",
        ] {
            assert!(out.contains(expected), "{family:?}: {expected} in {out}");
        }
    }
    let args = al2_extra_args(&user_data(AmiFamily::Al2, &c).unwrap());
    assert!(args.iter().any(|a| a == "--eviction-hard=memory.available<5%"), "{args:?}");
}

#[test]
fn kubernetes_io_and_k8s_io_labels_stay_out_of_user_data_for_every_family() {
    let mut c = config();
    for (k, v) in [
        ("node-role.kubernetes.io/worker", "true"),
        ("topology.kubernetes.io/zone", "us-west-2a"),
        ("node.kubernetes.io/instance-type", "m5.large"),
        ("kubernetes.io/arch", "amd64"),
        ("node-restriction.kubernetes.io/team", "a"),
        ("example.k8s.io/x", "y"),
        ("k8s.io/y", "z"),
        ("team", "a"),
        ("example.com/kubernetes.io", "kept"),
        ("notkubernetes.io/kept", "yes"),
    ] {
        c.labels.insert(k.into(), v.into());
    }
    let kept = [
        "karpenter.sh/capacity-type",
        "karpenter.sh/nodepool",
        "team",
        "example.com/kubernetes.io",
        "notkubernetes.io/kept",
    ];
    for family in [AmiFamily::Al2, AmiFamily::Al2023, AmiFamily::Bottlerocket, AmiFamily::Windows2022] {
        let out = user_data(family, &c).unwrap();
        let labels: Vec<String> = if family == AmiFamily::Bottlerocket {
            let t: toml::Table = out.parse().unwrap();
            t["settings"]["kubernetes"]["node-labels"].as_table().unwrap().keys().cloned().collect()
        } else {
            let flag = out.split("--node-labels=").nth(1).expect("a --node-labels flag");
            let value = flag.trim_start_matches('"').split(['"', '\n', ' ']).next().unwrap();
            value.split(',').map(|kv| kv.split_once('=').unwrap().0.to_owned()).collect()
        };
        let mut expected: Vec<&str> = kept.to_vec();
        expected.sort_unstable();
        assert_eq!(labels, expected, "{family:?}\n{out}");
    }
    assert!(is_registration_only_label("kubernetes.io/hostname"));
    assert!(!is_registration_only_label("karpenter.k8s.aws/instance-family"));
    assert!(!is_registration_only_label("nokubernetes.io"), "no domain without a slash");
}

#[test]
fn al2023_without_a_service_cidr_is_refused_and_the_other_families_need_none() {
    let mut c = config();
    c.service_cidr = None;
    assert_eq!(user_data(AmiFamily::Al2023, &c), Err(UserDataError::MissingServiceCidr));
    c.service_cidr = Some(" ".into());
    assert_eq!(user_data(AmiFamily::Al2023, &c), Err(UserDataError::MissingServiceCidr));
    for family in [AmiFamily::Al2, AmiFamily::Bottlerocket, AmiFamily::Windows2022, AmiFamily::Custom] {
        assert!(user_data(family, &c).is_ok(), "{family:?}");
    }
    assert_eq!(node_class_user_data_problem(AmiFamily::Al2023, None, None), Some(UserDataError::MissingServiceCidr));
    assert_eq!(node_class_user_data_problem(AmiFamily::Al2023, None, Some("10.100.0.0/16")), None);
}

#[test]
fn al2_in_an_ipv6_cluster_tells_bootstrap_sh_its_ip_family() {
    let mut c = config();
    assert!(!user_data(AmiFamily::Al2, &c).unwrap().contains("--ip-family"));
    c.kubelet.cluster_dns = vec!["fd01:b0c7:6f5a::a".into()];
    let out = user_data(AmiFamily::Al2, &c).unwrap();
    assert!(out.contains(" \\\n--ip-family ipv6 \\\n"), "{out}");
    assert!(out.contains("--dns-cluster-ip 'fd01:b0c7:6f5a::a'"), "{out}");
}

#[test]
fn mime_user_data_without_its_closing_delimiter_is_read_to_its_end() {
    let open = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"B\"\n\n--B\n\
                Content-Type: text/x-shellscript\n\n#!/bin/bash\necho one\n\n--B\n\
                Content-Type: text/x-shellscript\n\n#!/bin/bash\necho two\n";
    let parts = parse_mime(open).unwrap();
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(parts[1].body, "#!/bin/bash\necho two");
    // Ending in a plain delimiter opens no part.
    let parts = parse_mime(&format!("{open}\n--B\n")).unwrap();
    assert_eq!(parts.len(), 2, "{parts:?}");
    let mut c = config();
    c.custom_user_data = Some(open.into());
    for family in [AmiFamily::Al2, AmiFamily::Al2023] {
        let out = parts_of(&user_data(family, &c).unwrap());
        assert_eq!(out.len(), 3, "{family:?}: the user's two parts and ours");
        assert!(out[1].body.ends_with("echo two"));
    }
    assert_eq!(node_class_user_data_problem(AmiFamily::Al2, Some(open), None), None);
    // Still an error: a part without headers, and no boundary at all.
    let headless = "Content-Type: multipart/mixed; boundary=\"B\"\n\n--B\necho\n--B--\n";
    assert!(matches!(parse_mime(headless), Err(UserDataError::InvalidMime(_))));
    assert!(matches!(parse_mime("Content-Type: multipart/mixed\n\nx"), Err(UserDataError::InvalidMime(_))));
}

#[test]
fn bottlerocket_raid0_mounts_the_instance_store_at_bootstrap() {
    let mut c = config();
    let out: toml::Table = user_data(AmiFamily::Bottlerocket, &c).unwrap().parse().unwrap();
    assert!(out["settings"].get("bootstrap-commands").is_none());
    c.instance_store_raid0 = true;
    c.custom_user_data = Some(
        "[settings.bootstrap-commands.010-theirs]\ncommands = [[\"echo\", \"hi\"]]\nmode = \"once\"\nessential = false\n"
            .into(),
    );
    let out: toml::Table = user_data(AmiFamily::Bottlerocket, &c).unwrap().parse().unwrap();
    let commands = &out["settings"]["bootstrap-commands"];
    let ours = &commands[BOTTLEROCKET_INSTANCE_STORE_COMMAND];
    let as_args = |v: &toml::Value| -> Vec<Vec<String>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect())
            .collect()
    };
    assert_eq!(
        as_args(&ours["commands"]),
        [
            vec!["apiclient", "ephemeral-storage", "init"],
            vec![
                "apiclient",
                "ephemeral-storage",
                "bind",
                "--dirs",
                "/var/lib/containerd",
                "/var/lib/kubelet",
                "/var/log/pods"
            ],
        ]
    );
    assert_eq!(ours["mode"].as_str(), Some("always"));
    assert_eq!(ours["essential"].as_bool(), Some(true));
    assert_eq!(commands["010-theirs"]["mode"].as_str(), Some("once"), "the user's commands stay");
}

#[test]
fn bottlerocket_merge_keeps_known_settings_replaces_taints_and_types_gc_thresholds_as_strings() {
    let mut c = config();
    c.kubelet.image_gc_high_threshold_percent = Some(85);
    c.kubelet.image_gc_low_threshold_percent = Some(80);
    c.custom_user_data = Some(
        "[settings.kubernetes]\nfoo = \"bar\"\nallowed-unsafe-sysctls = [\"net.core.somaxconn\"]\n\
         [settings.kubernetes.node-taints]\ntheirs = [\"x:NoSchedule\"]\n\
         [settings.host-containers.admin]\nenabled = true\n[other]\nx = 1\n"
            .into(),
    );
    let out: toml::Table = user_data(AmiFamily::Bottlerocket, &c).unwrap().parse().unwrap();
    let k = &out["settings"]["kubernetes"];
    assert!(k.get("foo").is_none(), "a setting Bottlerocket's model lacks is dropped");
    assert_eq!(k["allowed-unsafe-sysctls"][0].as_str(), Some("net.core.somaxconn"), "a modelled one stays");
    let taints = k["node-taints"].as_table().unwrap();
    assert_eq!(taints.keys().collect::<Vec<_>>(), ["dedicated", "karpenter.sh/unregistered"], "ours replace theirs");
    assert_eq!(k["image-gc-high-threshold-percent"].as_str(), Some("85"));
    assert_eq!(k["image-gc-low-threshold-percent"].as_str(), Some("80"));
    assert_eq!(out["settings"]["host-containers"]["admin"]["enabled"].as_bool(), Some(true), "other settings stay");
    assert!(out.get("other").is_none(), "only settings is Bottlerocket user data");
    assert_eq!(
        bottlerocket_dropped_settings(c.custom_user_data.as_deref().unwrap()),
        ["foo"],
        "named for the node class's event"
    );
    // A user's integer threshold becomes the string Bottlerocket's model wants.
    c.kubelet.image_gc_high_threshold_percent = None;
    c.custom_user_data = Some("[settings.kubernetes]\nimage-gc-high-threshold-percent = 90\n".into());
    let out: toml::Table = user_data(AmiFamily::Bottlerocket, &c).unwrap().parse().unwrap();
    assert_eq!(out["settings"]["kubernetes"]["image-gc-high-threshold-percent"].as_str(), Some("90"));
}

#[test]
fn bottlerocket_known_keys_are_sorted_for_their_binary_search() {
    assert!(BOTTLEROCKET_KUBERNETES_KEYS.windows(2).all(|w| w[0] < w[1]));
    // Every key Karpenter itself writes is a known one.
    for k in [
        "cluster-name",
        "api-server",
        "cluster-certificate",
        "cluster-dns-ip",
        "max-pods",
        "node-labels",
        "node-taints",
    ] {
        assert!(BOTTLEROCKET_KUBERNETES_KEYS.binary_search(&k).is_ok(), "{k}");
    }
}
