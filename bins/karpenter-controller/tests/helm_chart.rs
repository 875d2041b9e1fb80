//! Helm is not installable here, so the chart is checked by reading it: every value under `settings`
//! reaches the Deployment, and every environment variable the Deployment sets is a setting the
//! controller reads (a typo in either place fails this test instead of silently doing nothing).

use std::collections::BTreeSet;
use std::path::PathBuf;

use karpenter_operator::settings::setting_docs;

fn chart_file(rel: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/karpenter").join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn leaf_keys(prefix: &str, value: &serde_json::Value, out: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                leaf_keys(&format!("{prefix}.{k}"), v, out);
            }
        }
        _ => {
            out.insert(prefix.to_string());
        }
    }
}

fn deployment_env_names(deployment: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut in_env = false;
    for line in deployment.lines() {
        let trimmed = line.trim();
        if trimmed == "env:" {
            in_env = true;
            continue;
        }
        if in_env && (trimmed.starts_with("ports:") || trimmed.starts_with("{{- with .Values.controller.envFrom")) {
            in_env = false;
        }
        if in_env && let Some(name) = trimmed.strip_prefix("- name: ") {
            names.insert(name.to_string());
        }
    }
    names
}

#[test]
fn every_settings_value_reaches_the_deployment() {
    let values: serde_json::Value = serde_saphyr::from_str(&chart_file("values.yaml")).unwrap();
    let mut keys = BTreeSet::new();
    leaf_keys(".Values.settings", &values["settings"], &mut keys);
    assert!(keys.len() >= 15, "{keys:?}");
    let deployment = chart_file("templates/deployment.yaml");
    let helpers = chart_file("templates/_helpers.tpl");
    for key in &keys {
        let gate = key.strip_prefix(".Values.settings.featureGates.");
        let aws_gate = key.strip_prefix(".Values.settings.awsFeatureGates.");
        let used = match (gate, aws_gate) {
            // Feature gates are assembled into FEATURE_GATES (and AWS_FEATURE_GATES) by helper templates.
            (Some(name), _) => helpers.contains(&format!("$gates.{name}")),
            (_, Some(name)) => helpers.contains(&format!("$awsGates.{name}")),
            _ => deployment.contains(&format!("{key} ")) || deployment.contains(&format!("{key}\n")),
        };
        assert!(used, "values.yaml sets {key} but no template uses it");
    }
}

#[test]
fn every_deployment_env_var_is_a_controller_setting() {
    let known: BTreeSet<String> = setting_docs::<karpenter_operator::CoreSettings>()
        .into_iter()
        .chain(setting_docs::<karpenter_aws::settings::AwsSettings>())
        .map(|d| d.env)
        .collect();
    let names = deployment_env_names(&chart_file("templates/deployment.yaml"));
    assert!(names.len() >= 15, "{names:?}");
    for name in &names {
        assert!(known.contains(name), "the chart sets {name}, which the controller does not read");
    }
    for required in ["CLUSTER_NAME", "FEATURE_GATES", "METRICS_PORT", "HEALTH_PROBE_PORT", "LOG_LEVEL"] {
        assert!(names.contains(required), "the chart does not set {required}");
    }
}

#[test]
fn feature_gate_helper_names_every_gate_the_controller_knows() {
    let helpers = chart_file("templates/_helpers.tpl");
    let line = helpers.lines().find(|l| l.contains("NodeRepair=%t")).expect("FEATURE_GATES helper");
    for gate in karpenter_operator::FeatureGates::DEFAULT.split(',') {
        let name = gate.split('=').next().unwrap();
        assert!(line.contains(&format!("{name}=%t")), "helper misses {name}");
    }
}

#[test]
fn aws_feature_gate_helper_names_every_aws_gate() {
    let helpers = chart_file("templates/_helpers.tpl");
    let line = helpers.lines().find(|l| l.contains("NodeClassCEL=%t")).expect("AWS_FEATURE_GATES helper");
    for gate in karpenter_aws::settings::DEFAULT_AWS_FEATURE_GATES.split(',') {
        let name = gate.split('=').next().unwrap();
        assert!(line.contains(&format!("{name}=%t")), "helper misses {name}");
    }
    let values: serde_json::Value = serde_saphyr::from_str(&chart_file("values.yaml")).unwrap();
    let off = values["settings"]["awsFeatureGates"].as_object().expect("settings.awsFeatureGates");
    assert_eq!(off.len(), 4, "{off:?}");
    assert!(off.values().all(|v| v == &serde_json::Value::Bool(false)), "every AWS gate off by default: {off:?}");
}

#[test]
fn chart_crds_are_the_generated_ones() {
    // The generated CRDs are drift-tested in karpenter-api; here we check the chart ships all three.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/karpenter/crds");
    let mut files: Vec<_> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(
        files,
        [
            "karpenter.k8s.aws_ec2nodeclasses.yaml",
            "karpenter.sh_nodeclaims.yaml",
            "karpenter.sh_nodeoverlays.yaml",
            "karpenter.sh_nodepools.yaml"
        ]
    );
}
