//! The chart checked by reading it: every value under `settings` reaches the Deployment, and every environment
//! variable the Deployment sets is a setting the controller reads (a typo in either place fails this test instead
//! of silently doing nothing). With Helm (`tools/get-helm.sh`, or `KARPENTER_HELM`; skipped without it, a failure
//! under `CI=true`) the rendered RBAC is checked against the settings that gate it; real_plane.rs `chart-rbac` runs
//! the controller under it.
//!
//! Upstream's values file (issue 34 item 4): `helm lint --strict` passes on both charts; the chart renders with
//! upstream Karpenter's own values.yaml (tests/fixtures/upstream-values.yaml, its keys and defaults, extracted by
//! tools/upstream-chart-values.py); every key of it takes effect ([`upstream_effects`]: set to another value, the
//! rendered manifests change) or is in [`NOT_APPLICABLE`] with the reason (also in docs/install-eks.md); on a real
//! kube-apiserver (karpenter_testing::realplane) the rendered manifests pass a server-side dry-run apply, the CRD
//! chart installs for real (its CRDs become Established) and the chart installs with upstream's values.

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
            _ => [" ", "\n", ")"].iter().any(|end| deployment.contains(&format!("{key}{end}"))),
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

/// The Helm binary ([`karpenter_testing::helm::require`]).
fn helm() -> Option<PathBuf> {
    karpenter_testing::helm::require()
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

// ------------------------------------------------------------------------------------ upstream's values file

use serde_json::{Value, json};

fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

/// tests/fixtures/upstream-values.yaml: upstream Karpenter's chart values (keys and defaults).
fn upstream_values_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream-values.yaml")
}

fn upstream_values() -> Value {
    let text = std::fs::read_to_string(upstream_values_file()).expect("the upstream values fixture");
    serde_saphyr::from_str(&text).expect("upstream values parse")
}

/// The keys of a values tree: paths to scalars, lists and empty maps (a non-empty map is descended into).
fn value_paths(value: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                prefix.push(k.clone());
                value_paths(v, prefix, out);
                prefix.pop();
            }
        }
        _ => out.push(prefix.clone()),
    }
}

fn upstream_keys() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    value_paths(&upstream_values(), &mut Vec::new(), &mut out);
    out
}

fn lookup<'a>(value: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, k| v.as_object()?.get(k))
}

/// `{a: {b: value}}` for path `[a, b]`.
fn nested(path: &[String], value: Value) -> Value {
    path.iter().rev().fold(value, |inner, k| json!({ k.clone(): inner }))
}

/// Merges `overlay` into `base` as Helm merges values files (maps key by key; anything else replaced).
fn deep_merge(base: &mut Value, overlay: &Value) {
    match (base, overlay) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                deep_merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// The key upstream's chart requires, given as a template (upstream runs `tpl` on it): "karpenter-cluster".
fn required_values() -> Value {
    json!({"settings": {"clusterName": "{{ .Release.Name }}-cluster"}})
}

/// Upstream's keys whose upstream default differs from this chart's, and why.
const DIFFERENT_DEFAULTS: [(&str, &str); 3] = [
    ("controller.image.repository", "this chart's image, ghcr.io/karpenter-rs/karpenter-controller"),
    ("controller.image.tag", "this chart's appVersion"),
    ("controller.image.digest", "empty: upstream's digest names upstream's image"),
];

/// Upstream's keys that cannot take effect here, and why. None today: every key of upstream 1.14.1's values file
/// reaches the manifests (and every setting the controller); the image keys are translated (see
/// docs/install-eks.md, "Keeping upstream's values file").
const NOT_APPLICABLE: [(&str, &str); 0] = [];

/// Upstream's keys, each with a value other than upstream's default that shows it taking effect, and the values
/// (`context`) both renders need for the key to matter (e.g. the ServiceMonitor on for its fields).
fn upstream_effects() -> Vec<(&'static str, Value, Value)> {
    let monitor = json!({"serviceMonitor": {"enabled": true}});
    let mirror = json!({"controller": {"image": {"repository": "registry.example.com/karpenter-rs/controller"}}});
    let token_volume = json!({"extraVolumes": [{"name": "aws-iam-token", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "sts.amazonaws.com", "expirationSeconds": 86400, "path": "token"}}]}}]});
    let mut sidecar = token_volume.clone();
    deep_merge(
        &mut sidecar,
        &json!({"controller": {"sidecarContainer": [{"name": "sidecar", "image": "busybox:1.36", "command": ["sleep", "3600"]}]}}),
    );
    let none = json!({});
    vec![
        ("nameOverride", json!("kr"), none.clone()),
        ("fullnameOverride", json!("karpenter-rs"), none.clone()),
        ("additionalLabels", json!({"example.com/team": "nodes"}), none.clone()),
        ("additionalAnnotations", json!({"example.com/owner": "platform"}), none.clone()),
        ("imagePullPolicy", json!("Always"), none.clone()),
        ("imagePullSecrets", json!([{"name": "regcred"}]), none.clone()),
        ("service.annotations", json!({"example.com/service": "metrics"}), none.clone()),
        ("serviceAccount.create", json!(false), none.clone()),
        ("serviceAccount.name", json!("karpenter-sa"), none.clone()),
        (
            "serviceAccount.annotations",
            json!({"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/k"}),
            none.clone(),
        ),
        (
            "additionalClusterRoleRules",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
            none.clone(),
        ),
        ("serviceMonitor.enabled", json!(true), none.clone()),
        ("serviceMonitor.additionalLabels", json!({"release": "prometheus"}), monitor.clone()),
        (
            "serviceMonitor.relabelings",
            json!([{"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]),
            monitor.clone(),
        ),
        (
            "serviceMonitor.metricRelabelings",
            json!([{"action": "drop", "regex": "go_.*", "sourceLabels": ["__name__"]}]),
            monitor.clone(),
        ),
        ("serviceMonitor.endpointConfig", json!({"interval": "15s"}), monitor.clone()),
        ("serviceMonitor.sampleLimit", json!(10000), monitor.clone()),
        ("replicas", json!(3), none.clone()),
        ("revisionHistoryLimit", json!(5), none.clone()),
        ("strategy.rollingUpdate.maxUnavailable", json!(2), none.clone()),
        ("podLabels", json!({"example.com/pod": "karpenter"}), none.clone()),
        ("podAnnotations", json!({"example.com/pod": "karpenter"}), none.clone()),
        ("podDisruptionBudget.name", json!("karpenter-pdb"), none.clone()),
        ("podDisruptionBudget.maxUnavailable", json!(2), none.clone()),
        ("podSecurityContext.fsGroup", json!(1000), none.clone()),
        ("podSecurityContext.seccompProfile.type", json!("Unconfined"), none.clone()),
        ("priorityClassName", json!("system-node-critical"), none.clone()),
        ("terminationGracePeriodSeconds", json!(60), none.clone()),
        ("hostNetwork", json!(true), none.clone()),
        ("schedulerName", json!("my-scheduler"), none.clone()),
        ("dnsPolicy", json!("Default"), none.clone()),
        ("dnsConfig", json!({"options": [{"name": "ndots", "value": "1"}]}), none.clone()),
        ("initContainers", json!([{"name": "init", "image": "busybox:1.36", "command": ["true"]}]), none.clone()),
        ("nodeSelector.kubernetes.io/os", json!("windows"), none.clone()),
        (
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
            json!([{"matchExpressions": [
                {"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]),
            none.clone(),
        ),
        (
            "affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            json!([{"topologyKey": "topology.kubernetes.io/zone"}]),
            none.clone(),
        ),
        (
            "topologySpreadConstraints",
            json!([{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway"}]),
            none.clone(),
        ),
        (
            "tolerations",
            json!([{"key": "dedicated", "operator": "Equal", "value": "karpenter", "effect": "NoSchedule"}]),
            none.clone(),
        ),
        ("extraVolumes", token_volume["extraVolumes"].clone(), none.clone()),
        ("controller.containerName", json!("karpenter"), none.clone()),
        ("controller.image.repository", json!("registry.example.com/karpenter-rs/controller"), none.clone()),
        ("controller.image.tag", json!("9.9.9"), mirror.clone()),
        ("controller.image.digest", json!(format!("sha256:{}", "a".repeat(64))), mirror.clone()),
        ("controller.env", json!([{"name": "AWS_REGION", "value": "eu-west-1"}]), none.clone()),
        ("controller.envFrom", json!([{"configMapRef": {"name": "karpenter-env", "optional": true}}]), none.clone()),
        ("controller.securityContext.appArmorProfile", json!({"type": "RuntimeDefault"}), none.clone()),
        ("controller.securityContext.seLinuxOptions", json!({"level": "s0:c123,c456"}), none.clone()),
        ("controller.securityContext.seccompProfile", json!({"type": "RuntimeDefault"}), none.clone()),
        (
            "controller.resources",
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
            none.clone(),
        ),
        (
            "controller.extraVolumeMounts",
            json!([{"name": "aws-iam-token", "mountPath": "/var/run/secrets/eks.amazonaws.com/serviceaccount", "readOnly": true}]),
            token_volume.clone(),
        ),
        ("controller.sidecarContainer", sidecar["controller"]["sidecarContainer"].clone(), none.clone()),
        (
            "controller.sidecarVolumeMounts",
            json!([{"name": "aws-iam-token", "mountPath": "/token", "readOnly": true}]),
            sidecar.clone(),
        ),
        ("controller.metrics.port", json!(8000), none.clone()),
        ("controller.healthProbe.port", json!(8001), none.clone()),
        ("logLevel", json!("debug"), none.clone()),
        ("logOutputPaths", json!(["stdout", "/tmp/karpenter.log"]), none.clone()),
        ("logErrorOutputPaths", json!(["stderr", "/tmp/karpenter-errors.log"]), none.clone()),
        ("settings.batchMaxDuration", json!("20s"), none.clone()),
        ("settings.batchIdleDuration", json!("2s"), none.clone()),
        ("settings.preferencePolicy", json!("Ignore"), none.clone()),
        ("settings.minValuesPolicy", json!("BestEffort"), none.clone()),
        ("settings.clusterCABundle", json!("LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"), none.clone()),
        ("settings.clusterName", json!("other-cluster"), none.clone()),
        ("settings.clusterEndpoint", json!("https://example.gr7.eu-west-1.eks.amazonaws.com"), none.clone()),
        ("settings.isolatedVPC", json!(true), none.clone()),
        ("settings.eksControlPlane", json!(true), none.clone()),
        ("settings.vmMemoryOverheadPercent", json!(0.1), none.clone()),
        ("settings.interruptionQueue", json!("karpenter-queue"), none.clone()),
        ("settings.enableZonalShift", json!(true), none.clone()),
        ("settings.reservedENIs", json!("1"), none.clone()),
        ("settings.ignoreDRARequests", json!(false), none.clone()),
        ("settings.disableClusterStateObservability", json!(true), none.clone()),
        ("settings.disableDryRun", json!(true), none.clone()),
        ("settings.amiRefreshInterval", json!("5m"), none.clone()),
        ("settings.subnetRefreshInterval", json!("5m"), none.clone()),
        ("settings.featureGates.nodeRepair", json!(true), none.clone()),
        ("settings.featureGates.nodeOverlay", json!(true), none.clone()),
        ("settings.featureGates.reservedCapacity", json!(false), none.clone()),
        ("settings.featureGates.spotToSpotConsolidation", json!(true), none.clone()),
        ("settings.featureGates.staticCapacity", json!(true), none.clone()),
        ("settings.featureGates.capacityBuffer", json!(true), none.clone()),
        ("settings.awsFeatureGates.nodeClassCEL", json!(true), none),
    ]
}

/// The fixture's key paths by their dotted names (`nodeSelector.kubernetes.io/os` keeps its dots).
fn upstream_key_index() -> BTreeMap<String, Vec<String>> {
    upstream_keys().into_iter().map(|p| (p.join("."), p)).collect()
}

/// Every upstream value changed at once (each effect's context and value): a values file far from the defaults.
fn everything_changed() -> Value {
    let index = upstream_key_index();
    let mut all = json!({});
    for (key, value, context) in upstream_effects() {
        deep_merge(&mut all, &context);
        deep_merge(&mut all, &nested(&index[key], value));
    }
    all
}

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Writes `values` to a file of its own for `helm -f`.
fn values_file(values: &Value) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = repo_path("target/helm-chart-test");
    std::fs::create_dir_all(&dir).expect("target/helm-chart-test");
    let path = dir.join(format!("values-{}-{}.json", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, serde_json::to_vec(values).unwrap()).expect("values file");
    path
}

/// `helm template karpenter <chart>` in namespace `karpenter` with upstream's values file, then `files` (later
/// wins), and `args`: the output, or helm's error.
fn template_upstream(helm: &Path, files: &[&Value], args: &[&str]) -> Result<String, String> {
    let mut command = std::process::Command::new(helm);
    command.args(["template", "karpenter"]).arg(repo_path("charts/karpenter")).args(["--namespace", "karpenter"]);
    command.arg("-f").arg(upstream_values_file());
    let paths: Vec<PathBuf> = files.iter().map(|v| values_file(v)).collect();
    for path in &paths {
        command.arg("-f").arg(path);
    }
    let out = command.args(args).output().expect("running helm");
    for path in &paths {
        let _ = std::fs::remove_file(path);
    }
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("utf-8"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn documents(text: &str) -> Vec<Value> {
    text.split("\n---")
        .map(|d| d.trim().trim_start_matches("---"))
        .filter_map(|d| serde_saphyr::from_str::<Value>(d).ok())
        .filter(Value::is_object)
        .collect()
}

use std::path::Path;

const MONITORING_API: [&str; 2] = ["--api-versions", "monitoring.coreos.com/v1"];

#[test]
fn helm_lint_strict_passes_on_both_charts() {
    let Some(helm) = helm() else { return };
    let lint = |chart: &str, args: &[&str]| {
        let out = std::process::Command::new(&helm)
            .args(["lint", "--strict"])
            .arg(repo_path(chart))
            .args(args)
            .output()
            .expect("running helm");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "helm lint --strict {chart} {args:?}:\n{text}");
        assert!(
            !text.contains("[WARNING]") && !text.contains("[ERROR]"),
            "helm lint --strict {chart} {args:?}:\n{text}"
        );
    };
    let required = values_file(&required_values());
    let everything = values_file(&everything_changed());
    let upstream = upstream_values_file();
    let (required, everything, upstream) =
        (required.to_str().unwrap(), everything.to_str().unwrap(), upstream.to_str().unwrap());
    lint("charts/karpenter", &[]);
    lint("charts/karpenter", &["-f", upstream, "-f", required]);
    lint("charts/karpenter", &["-f", upstream, "-f", required, "-f", everything]);
    lint("charts/karpenter-crd", &[]);
    lint("charts/karpenter-crd", &["--set", "capacityBuffer.installCRD=true", "--set", "additionalAnnotations.a=b"]);
}

#[test]
fn upstream_values_keys_and_defaults_are_ours() {
    let ours: Value = serde_saphyr::from_str(&chart_file("values.yaml")).unwrap();
    let upstream = upstream_values();
    let keys = upstream_keys();
    assert!(keys.len() >= 80, "{} keys in the fixture", keys.len());
    for path in &keys {
        let key = path.join(".");
        let mine = lookup(&ours, path).unwrap_or_else(|| panic!("values.yaml lacks upstream's key {key}"));
        let theirs = lookup(&upstream, path).unwrap();
        if DIFFERENT_DEFAULTS.iter().any(|(k, _)| *k == key) {
            assert_ne!(mine, theirs, "{key} is listed as a different default but is upstream's");
        } else {
            assert_eq!(mine, theirs, "{key}: our default {mine} is not upstream's {theirs}");
        }
    }
}

#[test]
fn every_upstream_value_takes_effect_or_is_not_applicable() {
    let index = upstream_key_index();
    let effects = upstream_effects();
    let listed: BTreeSet<&str> =
        effects.iter().map(|(k, _, _)| *k).chain(NOT_APPLICABLE.iter().map(|(k, _)| *k)).collect();
    for key in index.keys() {
        assert!(
            listed.contains(key.as_str()),
            "upstream's {key} is neither shown to take effect nor listed as not applicable"
        );
    }
    for key in &listed {
        assert!(index.contains_key(*key), "{key} is not a key of upstream's values (stale entry)");
    }
    assert_eq!(listed.len(), effects.len() + NOT_APPLICABLE.len(), "a key listed twice");
    let docs = std::fs::read_to_string(repo_path("docs/install-eks.md")).unwrap();
    for (key, _) in NOT_APPLICABLE.iter().chain(DIFFERENT_DEFAULTS.iter()) {
        assert!(docs.contains(&format!("`{key}`")), "docs/install-eks.md does not list {key}");
    }
    assert!(docs.contains("### Keeping upstream's values file"), "docs/install-eks.md lacks the section");

    let Some(helm) = helm() else { return };
    let required = required_values();
    let mut baselines: BTreeMap<String, String> = BTreeMap::new();
    for (key, value, context) in &effects {
        let base = baselines.entry(context.to_string()).or_insert_with(|| {
            template_upstream(&helm, &[&required, context], &MONITORING_API)
                .unwrap_or_else(|e| panic!("upstream's values with {context}: {e}"))
        });
        let changed =
            template_upstream(&helm, &[&required, context, &nested(&index[*key], value.clone())], &MONITORING_API)
                .unwrap_or_else(|e| panic!("upstream's values with {key}={value}: {e}"));
        assert_ne!(*base, changed, "{key}={value} changes nothing in the rendered chart");
    }
}

fn kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn container(deployment: &Value, index: usize) -> &Value {
    &deployment["spec"]["template"]["spec"]["containers"][index]
}

fn env_of(container: &Value, name: &str) -> Value {
    container["env"].as_array().expect("env").iter().find(|e| e["name"] == name).cloned().unwrap_or(Value::Null)
}

/// The items issue 34 found with upstream's values file, one by one.
#[test]
fn upstream_values_render_as_an_operator_expects() {
    let Some(helm) = helm() else { return };
    let required = required_values();
    let render = |extra: Value, args: &[&str]| -> Vec<Value> {
        documents(&template_upstream(&helm, &[&required, &extra], args).unwrap_or_else(|e| panic!("{extra}: {e}")))
    };
    let docs = render(json!({}), &[]);
    let deployment = kind(&docs, "Deployment")[0];
    let controller = container(deployment, 0);
    // Upstream's empty profile maps are left out (the API server refuses empty profiles); the hardening stays.
    let sc = &controller["securityContext"];
    for profile in ["appArmorProfile", "seLinuxOptions", "seccompProfile"] {
        assert!(sc.get(profile).is_none(), "{profile} rendered from upstream's empty map: {sc}");
    }
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    // Upstream's image (repository, tag and digest) is replaced by this chart's.
    let chart: Value = serde_saphyr::from_str(&chart_file("Chart.yaml")).unwrap();
    let ours: Value = serde_saphyr::from_str(&chart_file("values.yaml")).unwrap();
    let default_image = format!(
        "{}:{}",
        ours["controller"]["image"]["repository"].as_str().unwrap(),
        chart["appVersion"].as_str().unwrap()
    );
    assert_eq!(controller["image"], default_image.as_str());
    // Our repository (or a mirror) with upstream's digest kept: the digest is dropped; a digest of ours is used.
    let upstream_digest = upstream_values()["controller"]["image"]["digest"].clone();
    for (repository, digest, image) in [
        (
            "ghcr.io/karpenter-rs/karpenter-controller",
            upstream_digest.clone(),
            "ghcr.io/karpenter-rs/karpenter-controller:0.1.0",
        ),
        ("registry.example.com/k", upstream_digest, "registry.example.com/k:0.1.0"),
        ("registry.example.com/k", json!("sha256:0123"), "registry.example.com/k:0.1.0@sha256:0123"),
    ] {
        let image_values =
            json!({"controller": {"image": {"repository": repository, "tag": "0.1.0", "digest": digest}}});
        let docs = render(image_values, &[]);
        assert_eq!(container(kind(&docs, "Deployment")[0], 0)["image"], image, "{repository} {digest}");
    }
    // Upstream's sizing: CPU_REQUESTS from the CPU request in millicores, MEMORY_LIMIT from the memory limit.
    let cpu = env_of(controller, "CPU_REQUESTS");
    assert_eq!(cpu["valueFrom"]["resourceFieldRef"]["resource"], "requests.cpu", "{cpu}");
    assert_eq!(cpu["valueFrom"]["resourceFieldRef"]["divisor"], "1m", "{cpu}");
    assert_eq!(cpu["valueFrom"]["resourceFieldRef"]["containerName"], controller["name"], "{cpu}");
    // The settings the binary reads, upstream's values through `tpl`.
    for (name, value) in [
        ("IGNORE_DRA_REQUESTS", "true"),
        ("DISABLE_CLUSTER_STATE_OBSERVABILITY", "false"),
        ("DISABLE_DRY_RUN", "false"),
        ("AMI_REFRESH_INTERVAL", "1m"),
        ("SUBNET_REFRESH_INTERVAL", "1m"),
        ("CLUSTER_NAME", "karpenter-cluster"),
    ] {
        assert_eq!(env_of(controller, name)["value"], value, "{name}");
    }
    let templated = json!({"settings": {"interruptionQueue": "{{ .Release.Name }}-queue", "amiRefreshInterval": "{{ printf \"%dm\" 5 }}"}});
    let docs = render(templated, &[]);
    let controller = container(kind(&docs, "Deployment")[0], 0);
    assert_eq!(env_of(controller, "INTERRUPTION_QUEUE")["value"], "karpenter-queue");
    assert_eq!(env_of(controller, "AMI_REFRESH_INTERVAL")["value"], "5m");
    // The token: mounted by the controller's pod, not by the ServiceAccount, as upstream.
    assert_eq!(deployment["spec"]["template"]["spec"]["automountServiceAccountToken"], true);
    assert_eq!(kind(&docs, "ServiceAccount")[0]["automountServiceAccountToken"], false);
    // The ServiceMonitor only where its API is served.
    let monitor = json!({"serviceMonitor": {"enabled": true, "sampleLimit": 5000,
        "relabelings": [{"action": "labeldrop", "regex": "pod"}], "metricRelabelings": [{"action": "drop", "regex": "go_.*"}]}});
    assert!(kind(&render(monitor.clone(), &[]), "ServiceMonitor").is_empty(), "a ServiceMonitor without its API");
    let docs = render(monitor, &MONITORING_API);
    let sm = kind(&docs, "ServiceMonitor")[0];
    assert_eq!(sm["spec"]["sampleLimit"], 5000);
    assert_eq!(sm["spec"]["endpoints"][0]["relabelings"][0]["action"], "labeldrop");
    assert_eq!(sm["spec"]["endpoints"][0]["metricRelabelings"][0]["action"], "drop");
    // additionalAnnotations on every object (14 with the ServiceMonitor), beside each object's own.
    let annotated = json!({"additionalAnnotations": {"example.com/owner": "platform"}, "serviceMonitor": {"enabled": true},
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn"}}, "service": {"annotations": {"s": "t"}}});
    let docs = render(annotated, &MONITORING_API);
    assert_eq!(docs.len(), 14, "{:?}", docs.iter().map(|d| &d["kind"]).collect::<Vec<_>>());
    for doc in &docs {
        assert_eq!(
            doc["metadata"]["annotations"]["example.com/owner"], "platform",
            "{} {}",
            doc["kind"], doc["metadata"]["name"]
        );
    }
    assert_eq!(kind(&docs, "ServiceAccount")[0]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"], "arn");
    assert_eq!(kind(&docs, "Service")[0]["metadata"]["annotations"]["s"], "t");
    // additionalClusterRoleRules reach the core ClusterRole.
    let rules =
        json!({"additionalClusterRoleRules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]});
    assert!(has(&grants(&render(rules, &[])), "*", "/configmaps", "get"));
    // initContainers and the sidecars' mounts (their own, then extraVolumeMounts, then sidecarVolumeMounts).
    let pod = json!({
        "initContainers": [{"name": "init", "image": "busybox:1.36"}],
        "extraVolumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}],
        "controller": {"extraVolumeMounts": [{"name": "a", "mountPath": "/a"}],
            "sidecarVolumeMounts": [{"name": "b", "mountPath": "/b"}],
            "sidecarContainer": [{"name": "side", "image": "busybox:1.36", "volumeMounts": [{"name": "b", "mountPath": "/own"}]}]}});
    let docs = render(pod, &[]);
    let spec = &kind(&docs, "Deployment")[0]["spec"]["template"]["spec"];
    assert_eq!(spec["initContainers"][0]["name"], "init");
    let mounts: Vec<&str> = spec["containers"][1]["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert_eq!(mounts, ["/own", "/a", "/b"]);
    // A map where a list of containers belongs is refused by name.
    let err = template_upstream(&helm, &[&required, &json!({"initContainers": {"name": "x"}})], &[]).unwrap_err();
    assert!(err.contains("initContainers"), "{err}");
}

// ------------------------------------------------------------------------------------------- a real API server

/// `helm` against `plane` (its admin kubeconfig; Helm's caches in the plane's state dir): the output, or the error.
fn helm_on_plane(
    helm: &Path,
    plane: &karpenter_testing::realplane::RealPlane,
    args: &[&str],
) -> Result<String, String> {
    let home = plane.state_dir().join("helm-home");
    let out = std::process::Command::new(helm)
        .args(args)
        .arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("running helm");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() { Ok(text) } else { Err(text) }
}

/// Server-side apply of `doc` with `dryRun=All`: admission and validation run, nothing is stored.
async fn dry_run_apply(client: &kube::Client, doc: &Value) -> Result<(), String> {
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    let (api_version, kind) =
        (doc["apiVersion"].as_str().unwrap_or_default(), doc["kind"].as_str().unwrap_or_default());
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let gvk = kube::core::GroupVersionKind::gvk(group, version, kind);
    let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await.map_err(|e| format!("{kind}: {e}"))?;
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = match (caps.scope, doc["metadata"]["namespace"].as_str()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
        (kube::discovery::Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), &resource),
        (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    };
    let params = PatchParams::apply("karpenter-helm-chart-test").dry_run();
    api.patch(name, &params, &Patch::Apply(doc)).await.map(|_| ()).map_err(|e| format!("{kind} {name}: {e}"))
}

/// On a real kube-apiserver: the chart rendered with upstream's values file (as is, and with every value changed)
/// passes a server-side dry-run apply; the CRD chart installs for real and its CRDs become Established; the chart
/// installs for real with upstream's values and the ServiceMonitor on, which this plane does not serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_values_on_a_real_api_server() {
    let Some(helm) = helm() else { return };
    let options = karpenter_testing::realplane::PlaneOptions {
        scheduler: false,
        controller_manager: false,
        ..Default::default()
    };
    let Some(plane) = tokio::task::spawn_blocking(move || karpenter_testing::realplane::require_with(options))
        .await
        .expect("plane start")
    else {
        return;
    };
    let client = plane.client().await.expect("client");
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": "karpenter"}})).unwrap();
    namespaces.create(&Default::default(), &ns).await.expect("namespace karpenter");

    let required = required_values();
    for (what, values) in [("upstream's values", json!({})), ("every value changed", everything_changed())] {
        let docs =
            documents(&template_upstream(&helm, &[&required, &values], &[]).unwrap_or_else(|e| panic!("{what}: {e}")));
        assert!(docs.len() >= 12, "{what}: {} objects", docs.len());
        let mut refused = Vec::new();
        for doc in &docs {
            if let Err(e) = dry_run_apply(&client, doc).await {
                refused.push(e);
            }
        }
        assert!(refused.is_empty(), "{what}: the API server refuses:\n{}", refused.join("\n"));
        if what == "upstream's values" {
            // The check can fail: the Deployment as the chart rendered upstream's empty profile maps before.
            let mut deployment = kind(&docs, "Deployment")[0].clone();
            deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["appArmorProfile"] = json!({});
            let refused = dry_run_apply(&client, &deployment).await.expect_err("an empty appArmorProfile");
            assert!(refused.contains("appArmorProfile"), "{refused}");
        }
    }

    // The CRD chart, for real.
    let crd_chart = repo_path("charts/karpenter-crd");
    let installed = helm_on_plane(
        &helm,
        &plane,
        &["install", "karpenter-crd", crd_chart.to_str().unwrap(), "--namespace", "karpenter"],
    );
    installed.unwrap_or_else(|e| panic!("helm install karpenter-crd: {e}"));
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(client.clone());
    let names = [
        "nodepools.karpenter.sh",
        "nodeclaims.karpenter.sh",
        "nodeoverlays.karpenter.sh",
        "ec2nodeclasses.karpenter.k8s.aws",
    ];
    for name in names {
        // Up to 30 s, in steps of 200 ms.
        for attempt in 0.. {
            let crd = crds.get_opt(name).await.expect("get CRD");
            let established = crd
                .as_ref()
                .and_then(|c| c.status.as_ref())
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
            if established {
                break;
            }
            assert!(attempt < 150, "CRD {name} not Established after 30 s: {crd:?}");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    // The chart, for real, with upstream's values and the ServiceMonitor asked for: no ServiceMonitor API here, so
    // none is created (and NOTES says so) instead of the install failing.
    let required_file = values_file(&required);
    let chart = repo_path("charts/karpenter");
    let upstream_file = upstream_values_file();
    let args = [
        "install",
        "karpenter",
        chart.to_str().unwrap(),
        "--namespace",
        "karpenter",
        "--skip-crds",
        "-f",
        upstream_file.to_str().unwrap(),
        "-f",
        required_file.to_str().unwrap(),
        "--set",
        "serviceMonitor.enabled=true",
    ];
    let out = helm_on_plane(&helm, &plane, &args).unwrap_or_else(|e| panic!("helm install karpenter: {e}"));
    let _ = std::fs::remove_file(&required_file);
    assert!(out.contains("no ServiceMonitor was created"), "{out}");
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client.clone(), "karpenter");
    let deployment = deployments.get("karpenter").await.expect("the Deployment");
    let image = deployment.spec.and_then(|s| s.template.spec).map(|s| s.containers[0].image.clone());
    assert_eq!(image.flatten().as_deref(), Some("ghcr.io/karpenter-rs/karpenter-controller:0.1.0"));
    tokio::task::spawn_blocking(move || drop(plane)).await.expect("plane stop");
}
