//! `karpenter-controller run`: the help lists every setting (flag and environment variable), and the AWS
//! provider without the `aws` build feature fails with a message naming the feature.

use std::process::{Command, Output};

fn run(args: &[&str]) -> (i32, String, String) {
    let Output { status, stdout, stderr } =
        Command::new(env!("CARGO_BIN_EXE_karpenter-controller")).args(args).output().expect("running the binary");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[test]
fn run_help_lists_every_setting() {
    let (code, help, stderr) = run(&["run", "--help"]);
    assert_eq!(code, 0, "{stderr}");
    let docs = karpenter_operator::settings::setting_docs::<karpenter_operator::CoreSettings>()
        .into_iter()
        .chain(karpenter_operator::settings::setting_docs::<karpenter_aws::settings::AwsSettings>());
    let mut n = 0;
    for doc in docs {
        assert!(help.contains(&doc.flag), "run --help does not list {}:\n{help}", doc.flag);
        assert!(help.contains(&format!("env: {}", doc.env)), "run --help does not name {}:\n{help}", doc.env);
        n += 1;
    }
    assert!(n >= 35, "{n} settings");
    for flag in ["--provider", "--kwok-simulate-kubelet", "--instance-types"] {
        assert!(help.contains(flag), "{flag}:\n{help}");
    }
}

#[test]
fn run_requires_a_provider() {
    let (code, _, stderr) = run(&["run"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--provider"), "{stderr}");
}

#[test]
fn bad_settings_are_usage_errors_naming_the_flag() {
    let (code, _, stderr) = run(&["run", "--provider=kwok", "--log-level=verbose"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--log-level") && stderr.contains("not a log level"), "{stderr}");
}

#[test]
fn bad_cluster_limits_stop_the_controller_at_start_up_naming_the_entry() {
    let (code, _, stderr) = run(&["run", "--provider=kwok", "--cluster-limits=cpu=2000,cpus=10"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--cluster-limits"), "{stderr}");
    assert!(stderr.contains("entry 2 (\"cpus=10\"): unknown resource \"cpus\""), "{stderr}");
    // From the environment, as the Helm chart sets it.
    let Output { status, stderr, .. } = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .args(["run", "--provider=kwok"])
        .env("CLUSTER_LIMITS", "memory=-8Ti")
        .output()
        .expect("running the binary");
    let stderr = String::from_utf8_lossy(&stderr);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("entry 1 (\"memory=-8Ti\"): a limit cannot be negative"), "{stderr}");
}

/// The consolidation settings: a minimum saving without its unit, or a spot-to-spot floor of 0, from a flag or from
/// the environment as the Helm chart sets them, stop the controller at start-up naming the setting and the value.
#[test]
fn bad_consolidation_settings_stop_the_controller_at_start_up() {
    let (code, _, stderr) = run(&["run", "--provider=kwok", "--consolidation-min-savings=5"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--consolidation-min-savings") && stderr.contains("\"5\" is not a minimum saving"),
        "{stderr}"
    );
    for (env, value, needle) in [
        ("CONSOLIDATION_MIN_SAVINGS", "0.02", "\"0.02\" is not a minimum saving"),
        ("SPOT_TO_SPOT_MIN_INSTANCE_TYPES", "0", "\"0\" is not a number of instance types"),
    ] {
        let Output { status, stderr, .. } = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
            .args(["run", "--provider=kwok"])
            .env(env, value)
            .output()
            .expect("running the binary");
        let stderr = String::from_utf8_lossy(&stderr);
        assert_eq!(status.code(), Some(2), "{env}: {stderr}");
        assert!(stderr.contains(needle), "{env}: {stderr}");
    }
}

#[cfg(not(feature = "aws"))]
#[test]
fn aws_without_the_feature_fails_clearly() {
    let (code, stdout, stderr) = run(&["run", "--provider", "aws", "--cluster-name", "prod"]);
    assert_eq!(code, 2, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("`aws` cargo feature"), "{stderr}");
    assert!(stderr.contains("--features aws"), "{stderr}");
}

#[test]
fn kwok_flags_are_refused_with_aws() {
    let (code, _, stderr) = run(&["run", "--provider", "aws", "--kwok-simulate-kubelet"]);
    assert_eq!(code, 2, "{stderr}");
    if cfg!(feature = "aws") {
        assert!(stderr.contains("--provider kwok only"), "{stderr}");
    }
}

#[test]
fn bad_scheduler_config_stops_the_controller_at_start_up_naming_the_field() {
    let config = "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, \
                  whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}]}";
    let (code, _, stderr) = run(&["run", "--provider=kwok", &format!("--scheduler-config={config}")]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--scheduler-config"), "{stderr}");
    assert!(stderr.contains("defaultConstraints[0]: labelSelector is not allowed"), "{stderr}");
    // From the environment, as the Helm chart sets it: an unknown field is an error.
    let Output { status, stderr, .. } = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
        .args(["run", "--provider=kwok"])
        .env("SCHEDULER_CONFIG", "{\"podTopologySpread\": {\"defaultingType\": \"List\"}}")
        .output()
        .expect("running the binary");
    let stderr = String::from_utf8_lossy(&stderr);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("scheduler config:") && stderr.contains("defaultingType"), "{stderr}");
}
