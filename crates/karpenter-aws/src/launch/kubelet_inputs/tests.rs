//! The kubelet inputs read back from rendered user data, and the real kubelet's verdict on them over a matrix of
//! node class kubelet settings and NodePool labels and taints, for every AMI family: whatever validation lets
//! through must be accepted by the kubelet (`karpenter_testing::kubelet_check`, skipped where the shared k8s
//! folder is missing, a failure under `CI=true`).

use crate::api::{KubeletConfiguration, MaxPods, validate_kubelet_configuration};
use karpenter_api::nodeclaim::{Taint, TaintEffect};
use karpenter_testing::kubelet_check::{KubeletCheck, Verdict};
use serde_json::json;

use super::*;
use crate::launch::userdata::{BootstrapConfig, user_data};

const FAMILIES: [AmiFamily; 4] = [AmiFamily::Al2, AmiFamily::Al2023, AmiFamily::Bottlerocket, AmiFamily::Windows2022];

fn bootstrap(kubelet: KubeletConfiguration) -> BootstrapConfig {
    BootstrapConfig {
        cluster_name: "my-cluster".into(),
        cluster_endpoint: "https://ABC.gr7.us-west-2.eks.amazonaws.com".into(),
        ca_bundle: Some("Q0EtQlVORExF".into()),
        service_cidr: Some("10.100.0.0/16".into()),
        kubelet,
        labels: [
            ("karpenter.sh/capacity-type", "spot"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.sh/do-not-sync-taints", "true"),
            ("karpenter.k8s.aws/instance-family", "m5"),
            ("team", "a"),
            ("example.com/owner", "x_y.z-1"),
            // NodePool validation accepts these; the kubelet refuses them in --node-labels.
            ("node-role.kubernetes.io/worker", "true"),
            ("topology.kubernetes.io/zone", "us-west-2a"),
            ("node.kubernetes.io/instance-type", "m5.large"),
            ("example.k8s.io/x", "y"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
        taints: vec![
            Taint::new("dedicated", Some("gpu"), TaintEffect::NoSchedule),
            Taint::new("example.com/spot", None, TaintEffect::PreferNoSchedule),
            Taint::new("karpenter.sh/unregistered", None, TaintEffect::NoExecute),
        ],
        instance_store_raid0: false,
        custom_user_data: None,
    }
}

/// A node class's `spec.kubelet` as the API decodes it, with the values a launch resolves first (clusterDNS
/// from kube-dns, a static maxPods).
fn kubelet(spec: serde_json::Value) -> KubeletConfiguration {
    let mut k: KubeletConfiguration = serde_json::from_value(spec).expect("kubelet decodes");
    if k.cluster_dns.is_empty() {
        k.cluster_dns = vec!["10.100.0.10".into()];
    }
    if k.max_pods.as_ref().and_then(MaxPods::as_static).is_none() {
        k.max_pods = Some(MaxPods::Static(29));
    }
    k
}

/// Node class kubelet settings: every interpreted field, edge values, passed-through fields (those Bottlerocket
/// has a setting for, so every family can carry them), and values CEL expressions resolve to.
fn matrix() -> Vec<(&'static str, serde_json::Value)> {
    vec![
        ("defaults", json!({})),
        (
            "every interpreted field",
            json!({
                "maxPods": 110, "podsPerCore": 10,
                "systemReserved": {"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi", "pid": "100"},
                "kubeReserved": {"cpu": "200m", "memory": "500Mi", "ephemeral-storage": "3Gi", "pid": "200"},
                "evictionHard": {"memory.available": "5%", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
                                 "imagefs.available": "15%", "imagefs.inodesFree": "5%", "pid.available": "10%"},
                "evictionSoft": {"memory.available": "500Mi", "nodefs.available": "15%"},
                "evictionSoftGracePeriod": {"memory.available": "1m30s", "nodefs.available": "2m"},
                "evictionMaxPodGracePeriod": 60,
                "imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80,
                "cpuCFSQuota": false,
                "clusterDNS": ["10.100.0.10", "169.254.20.10"]
            }),
        ),
        (
            "edge values",
            json!({
                "maxPods": 1, "podsPerCore": 0, "evictionMaxPodGracePeriod": 0,
                "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 0, "cpuCFSQuota": true,
                "evictionHard": {"memory.available": "1Ki", "pid.available": "0%"},
                "kubeReserved": {"cpu": "0"}
            }),
        ),
        ("ipv6 cluster DNS", json!({"clusterDNS": ["fd01:b0c7:6f5a::a"]})),
        (
            "values CEL expressions resolve to",
            json!({"maxPods": 58, "kubeReserved": {"cpu": "70m", "memory": "893Mi", "ephemeral-storage": "1Gi"},
                   "systemReserved": {"memory": "1465Mi"}}),
        ),
        (
            "passed-through fields",
            json!({
                "shutdownGracePeriod": "30s", "shutdownGracePeriodCriticalPods": "10s",
                "containerLogMaxSize": "50Mi", "containerLogMaxFiles": 3, "podPidsLimit": 4096,
                "registryPullQPS": 10, "registryBurst": 20, "eventRecordQPS": 5, "eventBurst": 10,
                "kubeAPIQPS": 50, "kubeAPIBurst": 100, "serverTLSBootstrap": true, "seccompDefault": true,
                "cpuManagerPolicy": "static", "cpuManagerReconcilePeriod": "10s", "topologyManagerPolicy": "best-effort",
                "topologyManagerScope": "pod", "allowedUnsafeSysctls": ["net.core.somaxconn"], "clusterDomain": "cluster.local",
                "kubeReserved": {"cpu": "100m"}
            }),
        ),
        (
            "the open map beyond Bottlerocket's settings (AL2, AL2023)",
            json!({
                "featureGates": {"InPlacePodVerticalScaling": true},
                "authentication": {"webhook": {"cacheTTL": "1m"}},
                "serializeImagePulls": false, "maxParallelImagePulls": 5,
                "containerLogMaxWorkers": 2, "containerLogMonitorInterval": "10s",
                "imageMaximumGCAge": "168h", "imageMinimumGCAge": "5m",
                "nodeStatusMaxImages": 100, "kubeletCgroups": "/kubelet.slice",
                "memoryManagerPolicy": "None", "topologyManagerPolicyOptions": {"prefer-closest-numa-nodes": "true"},
                "reservedSystemCPUs": "0", "cpuManagerPolicy": "static", "cpuManagerPolicyOptions": {"full-pcpus-only": "true"}
            }),
        ),
        // A kubelet rule validation must catch (else nodes never join): low >= high.
        ("image GC low above high", json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60})),
        ("image GC percent over 100", json!({"imageGCHighThresholdPercent": 101})),
        // One threshold alone meets the kubelet's default of the other (high 85, low 80).
        ("image GC high alone at the default low", json!({"imageGCHighThresholdPercent": 80})),
        ("image GC low alone above the default high", json!({"imageGCLowThresholdPercent": 90})),
        ("image GC high alone above the default low", json!({"imageGCHighThresholdPercent": 90})),
        ("negative pods per core", json!({"podsPerCore": -1})),
        ("cpu manager static without reservation", json!({"cpuManagerPolicy": "static"})),
    ]
}

#[test]
fn al2_flags_are_the_extra_args_as_systemd_splits_them_and_config_has_the_passthrough() {
    let mut k = kubelet(json!({"evictionHard": {"memory.available": "5%"}, "shutdownGracePeriod": "30s"}));
    k.cluster_dns = vec!["10.100.0.10".into()];
    let mut c = bootstrap(k);
    c.cluster_name = "it's".into();
    let inputs = kubelet_inputs(AmiFamily::Al2, &user_data(AmiFamily::Al2, &c).unwrap()).unwrap();
    assert!(inputs.flags.contains(&"--eviction-hard=memory.available<5%".to_owned()), "{:?}", inputs.flags);
    assert!(inputs.flags.contains(&"--register-with-taints=dedicated=gpu:NoSchedule,example.com/spot:PreferNoSchedule,karpenter.sh/unregistered:NoExecute".to_owned()), "{:?}", inputs.flags);
    assert!(
        inputs
            .flags
            .iter()
            .any(|f| f.starts_with("--node-labels=") && f.contains("team=a") && !f.contains("kubernetes.io"))
    );
    assert_eq!(inputs.config["shutdownGracePeriod"], "30s");
    assert_eq!(inputs.config["clusterDNS"], json!(["10.100.0.10"]));
}

#[test]
fn al2023_reads_every_node_config_in_order_and_bottlerocket_maps_settings_to_fields() {
    let mut c = bootstrap(kubelet(json!({"imageGCHighThresholdPercent": 85, "podPidsLimit": 100})));
    c.custom_user_data = Some(
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      maxPods: 5\n      \
         cpuManagerPolicy: static\n    flags:\n    - --v=2\n"
            .into(),
    );
    let inputs = kubelet_inputs(AmiFamily::Al2023, &user_data(AmiFamily::Al2023, &c).unwrap()).unwrap();
    assert_eq!(inputs.config["maxPods"], 29, "ours come last and win");
    assert_eq!(inputs.config["cpuManagerPolicy"], "static", "theirs stay");
    assert_eq!(inputs.flags[0], "--v=2");
    assert!(inputs.config["registerWithTaints"].as_array().is_some_and(|t| t.len() == 3));
    c.custom_user_data = None;
    let inputs = kubelet_inputs(AmiFamily::Bottlerocket, &user_data(AmiFamily::Bottlerocket, &c).unwrap()).unwrap();
    assert_eq!(inputs.config["imageGCHighThresholdPercent"], 85, "Bottlerocket's string becomes the kubelet's integer");
    assert_eq!(inputs.config["podPidsLimit"], 100);
    assert_eq!(inputs.config["clusterDNS"], json!(["10.100.0.10"]));
}

#[test]
fn unreadable_user_data_is_an_error_naming_the_family() {
    let e = kubelet_inputs(AmiFamily::Al2, "#!/bin/bash\n").unwrap_err();
    assert!(e.to_string().contains("Al2"), "{e}");
    assert!(kubelet_inputs(AmiFamily::Bottlerocket, "x = [").is_err());
    assert!(kubelet_inputs(AmiFamily::Windows2022, "<powershell></powershell>").is_err());
}

/// The judge: every (family, kubelet settings) pair validation accepts renders user data whose kubelet inputs the
/// real kubelet accepts; the pairs validation refuses never reach a node. Prints the count of each.
#[test]
fn the_real_kubelet_accepts_what_validation_lets_through() {
    let Some(judge) = KubeletCheck::require() else { return };
    let mut cases = Vec::new();
    let mut refused_by_validation = Vec::new();
    for (name, spec) in matrix() {
        let decoded: KubeletConfiguration = serde_json::from_value(spec.clone()).unwrap();
        for family in FAMILIES {
            let violations = validate_kubelet_configuration(&decoded, Some(family), "kubelet");
            if violations.is_empty() {
                let text = user_data(family, &bootstrap(kubelet(spec.clone()))).unwrap();
                cases.push((format!("{family:?}: {name}"), kubelet_inputs(family, &text).unwrap()));
            } else {
                refused_by_validation.push(format!("{family:?}: {name}: {violations:?}"));
            }
        }
    }
    // Two at a time: each run of the kubelet takes a second or two.
    let judge_all = |half: &[(String, KubeletInputs)]| -> Vec<(String, Result<Verdict, String>)> {
        half.iter().map(|(n, i)| (n.clone(), judge.check(Some(&i.config), &i.flags))).collect()
    };
    let (a, b) = cases.split_at(cases.len() / 2);
    let results: Vec<(String, Result<Verdict, String>)> = std::thread::scope(|s| {
        let first = s.spawn(|| judge_all(a));
        let mut out = judge_all(b);
        out.extend(first.join().expect("kubelet-check thread"));
        out
    });
    let rejected: Vec<String> =
        results.iter().filter(|(_, v)| *v != Ok(Verdict::Accepted)).map(|(n, v)| format!("{n}: {v:?}")).collect();
    eprintln!(
        "kubelet-check: {} inputs judged, {} rejected; {} refused by validation first",
        results.len(),
        rejected.len(),
        refused_by_validation.len()
    );
    assert!(rejected.is_empty(), "the kubelet refuses what validation lets through:\n{}", rejected.join("\n"));
    assert!(results.len() >= 20, "the matrix shrank: {}", results.len());
}

/// Single kubelet configuration fields, each with what `kubelet_config_refusals` predicts; the judge checks the
/// real kubelet says the same of each.
fn configuration_cases() -> Vec<(serde_json::Value, bool)> {
    vec![
        (json!({}), true),
        (json!({"imageGCHighThresholdPercent": 50}), false),
        (json!({"imageGCLowThresholdPercent": 90}), false),
        (json!({"imageGCHighThresholdPercent": 101}), false),
        (json!({"imageGCHighThresholdPercent": 90, "imageGCLowThresholdPercent": 10}), true),
        (json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 50}), false),
        (json!({"maxPods": -1}), false),
        (json!({"maxPods": 0}), true),
        (json!({"podsPerCore": -1}), false),
        (json!({"registryPullQPS": -1}), false),
        (json!({"kubeAPIBurst": -1}), false),
        (json!({"eventRecordQPS": 0}), true),
        (json!({"maxOpenFiles": -1}), false),
        (json!({"nodeStatusMaxImages": -2}), false),
        (json!({"nodeStatusMaxImages": -1}), true),
        (json!({"oomScoreAdj": -1001}), false),
        (json!({"oomScoreAdj": -999}), true),
        (json!({"topologyManagerPolicy": "foo"}), false),
        (json!({"topologyManagerPolicy": "single-numa-node"}), true),
        (json!({"topologyManagerScope": "node"}), false),
        (json!({"shutdownGracePeriod": "10s", "shutdownGracePeriodCriticalPods": "20s"}), false),
        (json!({"shutdownGracePeriod": "30s", "shutdownGracePeriodCriticalPods": "10s"}), true),
        (json!({"shutdownGracePeriodCriticalPods": "5s"}), false),
        (json!({"containerLogMaxWorkers": 0}), false),
        (json!({"containerLogMonitorInterval": "1s"}), false),
        (json!({"containerLogMonitorInterval": "10s"}), true),
        (json!({"imageMinimumGCAge": "10m", "imageMaximumGCAge": "5m"}), false),
        (json!({"imageMaximumGCAge": "1h"}), true),
        (json!({"cpuCFSQuotaPeriod": "2s"}), false),
        (json!({"cpuCFSQuotaPeriod": "100ms"}), true),
    ]
}

#[test]
fn kubelet_config_refusals_name_each_broken_rule() {
    for (fields, accepted) in configuration_cases() {
        let mut config = base_configuration();
        merge(&mut config, &fields);
        let refusals = kubelet_config_refusals(&config);
        assert_eq!(refusals.is_empty(), accepted, "{fields}: {refusals:?}");
    }
    let mut config = base_configuration();
    merge(&mut config, &json!({"imageGCHighThresholdPercent": 50}));
    assert_eq!(
        kubelet_config_refusals(&config),
        ["imageGCLowThresholdPercent 80 must be less than imageGCHighThresholdPercent 50"]
    );
}

/// The judge of the predictor: the real kubelet accepts exactly the configurations `kubelet_config_refusals`
/// finds nothing in.
#[test]
fn the_real_kubelet_agrees_with_the_predicted_refusals() {
    let Some(judge) = KubeletCheck::require() else { return };
    let cases = configuration_cases();
    let run = |half: &[(serde_json::Value, bool)]| -> Vec<(String, bool, Result<Verdict, String>)> {
        half.iter()
            .map(|(fields, accepted)| {
                let mut config = base_configuration();
                merge(&mut config, fields);
                (fields.to_string(), *accepted, judge.check(Some(&config), &[]))
            })
            .collect()
    };
    let (a, b) = cases.split_at(cases.len() / 2);
    let verdicts: Vec<(String, bool, Result<Verdict, String>)> = std::thread::scope(|s| {
        let first = s.spawn(|| run(a));
        let mut out = run(b);
        out.extend(first.join().expect("kubelet-check thread"));
        out
    });
    let disagreements: Vec<String> = verdicts
        .iter()
        .filter(|(_, accepted, v)| match v {
            Ok(Verdict::Accepted) => !accepted,
            Ok(Verdict::Refused(_)) => *accepted,
            Err(_) => true,
        })
        .map(|(f, accepted, v)| format!("{f}: predicted accepted={accepted}, kubelet {v:?}"))
        .collect();
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

#[test]
fn user_data_kubelet_refusals_judge_the_merge_of_the_users_config_and_ours() {
    let node_config = |config: &str| {
        format!("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n{config}")
    };
    let broken = node_config("      imageGCHighThresholdPercent: 40\n      imageGCLowThresholdPercent: 60\n");
    let refusals = user_data_kubelet_refusals(AmiFamily::Al2023, Some(&broken), None);
    assert_eq!(refusals, ["imageGCLowThresholdPercent 60 must be less than imageGCHighThresholdPercent 40"]);
    // Theirs alone is fine (82 is below the default high of 85), and so is ours alone (81 is above the default
    // low of 80); the merge is not.
    let low = node_config("      imageGCLowThresholdPercent: 82\n");
    assert!(user_data_kubelet_refusals(AmiFamily::Al2023, Some(&low), None).is_empty());
    let ours = kubelet(json!({"imageGCHighThresholdPercent": 81}));
    assert_eq!(
        user_data_kubelet_refusals(AmiFamily::Al2023, Some(&low), Some(&ours)),
        ["imageGCLowThresholdPercent 82 must be less than imageGCHighThresholdPercent 81"]
    );
    // Bottlerocket settings map to the fields they set.
    let toml = "[settings.kubernetes]\nimage-gc-high-threshold-percent = \"50\"\n";
    assert_eq!(user_data_kubelet_refusals(AmiFamily::Bottlerocket, Some(toml), None).len(), 1);
    // Scripts are not judged, nor is a family without Karpenter's bootstrap.
    assert!(user_data_kubelet_refusals(AmiFamily::Al2, Some(&broken), None).is_empty());
    assert!(user_data_kubelet_refusals(AmiFamily::Custom, Some(&broken), None).is_empty());
}

/// `--node-labels` flags, each with whether the kubelet takes it (as `kubelet_flag_refusals` predicts).
fn label_flag_cases() -> Vec<(&'static str, bool)> {
    vec![
        ("team=a,example.com/x=y", true),
        ("kubernetes.io/hostname=x", true),
        ("node.kubernetes.io/foo=x", true),
        ("a.node.kubernetes.io/foo=x", true),
        ("kubelet.kubernetes.io/foo=x", true),
        ("topology.kubernetes.io/zone=a", true),
        ("failure-domain.beta.kubernetes.io/zone=a", true),
        ("beta.kubernetes.io/instance-type=m5", true),
        ("kubernetes.io/foo=x", false),
        ("example.k8s.io/x=y", false),
        ("node-restriction.kubernetes.io/x=y", false),
        ("team=a,node-role.kubernetes.io/worker=true", false),
    ]
}

#[test]
fn the_real_kubelet_agrees_with_the_predicted_label_refusals() {
    for (labels, taken) in label_flag_cases() {
        let flags = vec![format!("--node-labels={labels}")];
        assert_eq!(kubelet_flag_refusals(&flags).is_empty(), taken, "{labels}");
    }
    let Some(judge) = KubeletCheck::require() else { return };
    for (labels, taken) in label_flag_cases() {
        let verdict = judge.check(None, &[format!("--node-labels={labels}")]);
        assert_eq!(verdict.as_ref().map(|v| *v == Verdict::Accepted), Ok(taken), "{labels}: {verdict:?}");
    }
}

#[test]
fn a_users_node_config_flags_are_judged_too() {
    let user = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    flags:\n    - \
                --node-labels=node-role.kubernetes.io/worker=true\n";
    let refusals = user_data_kubelet_refusals(AmiFamily::Al2023, Some(user), None);
    assert_eq!(
        refusals,
        ["unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: node-role.kubernetes.io/worker"]
    );
}
