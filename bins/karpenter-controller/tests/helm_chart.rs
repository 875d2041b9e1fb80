//! The chart checked by reading it: every value under `settings` reaches the Deployment, and every environment
//! variable the Deployment sets is a setting the controller reads (a typo in either place fails this test instead
//! of silently doing nothing). With Helm (`tools/get-helm.sh`, or `KARPENTER_HELM`; skipped without it, a failure
//! under `CI=true`) the rendered RBAC is checked against the settings that gate it; real_plane.rs `chart-rbac` runs
//! the controller under it.

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

/// The Helm binary: `KARPENTER_HELM`, else `target/tools/helm`; `None` (said on stderr) without one, a failure
/// under `CI=true`.
fn helm() -> Option<PathBuf> {
    let path = std::env::var_os("KARPENTER_HELM")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/helm"));
    if path.is_file() {
        return Some(path);
    }
    let why = format!("no helm at {} (run tools/get-helm.sh, or set KARPENTER_HELM)", path.display());
    assert!(!karpenter_testing::realplane::in_ci(), "{why}");
    eprintln!("skipped: {why}");
    None
}

/// The chart rendered by `helm` with `sets` (`key=value`), as JSON documents.
fn render(helm: &std::path::Path, sets: &[&str]) -> Vec<serde_json::Value> {
    let chart = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../charts/karpenter");
    let mut command = std::process::Command::new(helm);
    command.args(["template", "karpenter"]).arg(chart).args(["--namespace", "karpenter"]);
    for set in ["settings.clusterName=test"].iter().chain(sets) {
        command.args(["--set", set]);
    }
    let out = command.output().expect("running helm");
    assert!(out.status.success(), "helm template {sets:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    text.split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<serde_json::Value>(d).ok())
        .filter(|d| d.is_object())
        .collect()
}

/// Every (namespace, apiGroup/resource, verb) the rendered Roles and ClusterRoles grant, resource names appended
/// as `resource[name]`; ClusterRoles aggregated into `admin` (for people, not the controller) left out.
fn grants(docs: &[serde_json::Value]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    let roles = docs.iter().filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole");
    for role in roles.filter(|r| r["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"].is_null()) {
        let ns = role["metadata"]["namespace"].as_str().unwrap_or("*").to_string();
        for rule in role["rules"].as_array().into_iter().flatten() {
            let strings = |key: &str| -> Vec<String> {
                rule[key].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_owned)).collect()
            };
            let names = strings("resourceNames");
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        let resource = if names.is_empty() {
                            format!("{group}/{resource}")
                        } else {
                            format!("{group}/{resource}[{}]", names.join(","))
                        };
                        out.insert((ns.clone(), resource, verb));
                    }
                }
            }
        }
    }
    out
}

fn has(grants: &BTreeSet<(String, String, String)>, ns: &str, resource: &str, verb: &str) -> bool {
    grants.contains(&(ns.to_string(), resource.to_string(), verb.to_string()))
}

#[test]
fn rendered_rbac_follows_the_settings() {
    let Some(helm) = helm() else { return };
    let default = grants(&render(&helm, &[]));
    // The kube-dns read (karpenter-aws discovery.rs) and the leader Lease; nothing on ConfigMaps or node Leases.
    assert!(has(&default, "kube-system", "/services[kube-dns]", "get"), "{default:#?}");
    assert!(has(&default, "karpenter", "coordination.k8s.io/leases[karpenter-leader-election]", "update"));
    assert!(has(&default, "karpenter", "coordination.k8s.io/leases", "create"));
    assert!(default.iter().all(|(ns, r, _)| ns != "kube-node-lease" && !r.contains("configmaps")), "{default:#?}");
    // Off by default: DRA, the spread watchers, the gates' kinds, patching pods.
    for resource in [
        "resource.k8s.io/resourceclaims",
        "/services",
        "/replicationcontrollers",
        "apps/replicasets",
        "apps/deployments",
        "karpenter.sh/nodeoverlays",
        "autoscaling.x-k8s.io/capacitybuffers",
        "/podtemplates",
    ] {
        assert!(!has(&default, "*", resource, "list"), "{resource} is granted by default");
    }
    assert!(!has(&default, "*", "/pods", "patch"));
    let toggled = [
        ("settings.ignoreDRARequests=false", "resource.k8s.io/resourceslices", "watch"),
        ("settings.schedulerConfig.podTopologySpread.defaultConstraints[0].maxSkew=1", "/services", "watch"),
        ("settings.schedulerConfig.podTopologySpread.defaultConstraints[0].maxSkew=1", "apps/statefulsets", "list"),
        ("settings.featureGates.nodeOverlay=true", "karpenter.sh/nodeoverlays/status", "patch"),
        ("settings.featureGates.capacityBuffer=true", "apps/deployments", "watch"),
        ("settings.featureGates.capacityBuffer=true", "autoscaling.x-k8s.io/capacitybuffers/status", "patch"),
        ("settings.featureGates.podDeletionCostManagement=true", "/pods", "patch"),
    ];
    for (set, resource, verb) in toggled {
        let rendered = grants(&render(&helm, &[set]));
        assert!(has(&rendered, "*", resource, verb), "{set}: no {verb} on {resource}");
    }
    // The DRA setting reaches the controller too, so grants and behaviour agree.
    let docs = render(&helm, &["settings.ignoreDRARequests=false"]);
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").expect("Deployment");
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array().expect("env");
    assert!(env.iter().any(|e| e["name"] == "IGNORE_DRA_REQUESTS" && e["value"] == "false"), "{env:?}");
}
