//! What a node's kubelet is started with, read back from the user data of its launch template: the command-line
//! flags and the `KubeletConfiguration` each AMI family's bootstrap hands the kubelet. It reads the artefact
//! itself (the rendered text, not the [`BootstrapConfig`](super::userdata::BootstrapConfig) it came from), so a
//! judge of that text, the real kubelet (`kubelet --config FILE FLAGS...`), sees what a node would see.
//!
//! | Family | Flags | Configuration |
//! |---|---|---|
//! | AL2 | `bootstrap.sh --kubelet-extra-args`, unquoted as systemd splits `KUBELET_EXTRA_ARGS` | the AMI's file ([`base_configuration`]) with bootstrap.sh's `--dns-cluster-ip` and the `jq` merge of the passed-through fields |
//! | AL2023 | every NodeConfig's `spec.kubelet.flags`, in order | nodeadm's defaults with every NodeConfig's `spec.kubelet.config` merged in order |
//! | Bottlerocket | `node-labels` and `node-taints` (as Bottlerocket passes them) | the `settings.kubernetes` keys mapped to the fields they set |
//! | Windows | `Start-EKSBootstrap.ps1 -KubeletExtraArgs` | the defaults with `-DNSClusterIP` |
//! | Custom | none: the user's own bootstrap | none |
//!
//! What bootstrap programs add on their own (node IP, credential provider, the kubeconfig) is left out: it
//! does not depend on the node class.

use serde_json::{Value, json};

use crate::api::AmiFamily;
use crate::api::{
    KUBELET_DEFAULT_IMAGE_GC_HIGH_PERCENT, KUBELET_DEFAULT_IMAGE_GC_LOW_PERCENT, KubeletConfiguration,
    kubelet_field_of_bottlerocket_setting,
};

use super::userdata::{
    BootstrapConfig, MimePart, NODEADM_CONTENT_TYPE, is_mime, is_registration_only_label, label_in_namespace,
    parse_mime, user_data,
};

/// The kubelet's command-line flags and configuration file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeletInputs {
    /// Flags, each `--name=value` as the kubelet receives it (no shell quoting left).
    pub flags: Vec<String>,
    /// The `KubeletConfiguration` (`kubelet.config.k8s.io/v1beta1`) as JSON.
    pub config: Value,
}

/// User data whose kubelet inputs cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read the kubelet inputs of {family} user data: {message}")]
pub struct KubeletInputsError {
    family: String,
    message: String,
}

fn error(family: AmiFamily, message: impl Into<String>) -> KubeletInputsError {
    KubeletInputsError { family: format!("{family:?}"), message: message.into() }
}

/// The configuration file the AMIs start from: the fields their own files set that matter to validation.
pub fn base_configuration() -> Value {
    json!({
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "address": "0.0.0.0",
        "authentication": {"anonymous": {"enabled": false}, "webhook": {"cacheTTL": "2m0s", "enabled": true}},
        "authorization": {"mode": "Webhook", "webhook": {"cacheAuthorizedTTL": "5m0s", "cacheUnauthorizedTTL": "30s"}},
        "clusterDomain": "cluster.local",
        "cgroupDriver": "systemd",
        "readOnlyPort": 0,
        "serializeImagePulls": false,
        "protectKernelDefaults": true
    })
}

/// The kubelet inputs of `user_data` rendered for `family`.
pub fn kubelet_inputs(family: AmiFamily, user_data: &str) -> Result<KubeletInputs, KubeletInputsError> {
    match family {
        AmiFamily::Al2 => al2(user_data),
        AmiFamily::Al2023 => al2023(user_data),
        AmiFamily::Bottlerocket => bottlerocket(user_data),
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => windows(user_data),
        AmiFamily::Custom => Ok(KubeletInputs { flags: Vec::new(), config: base_configuration() }),
    }
}

/// `over` merged into `base`, objects key by key (nodeadm's and `jq *`'s merge), anything else replaced.
fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Splits an argument string as systemd splits an environment variable's value on `ExecStart`: on whitespace,
/// with double quotes grouping and removed.
fn split_systemd_words(s: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let (mut quoted, mut any) = (false, false);
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            c => {
                current.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(current);
    }
    words
}

/// The value of a single-quoted argument after `marker` (`--kubelet-extra-args '...'`), unescaping the quote
/// as `escaped_quote` writes it (`'\''` for POSIX shells, `''` for PowerShell).
fn single_quoted_after(text: &str, marker: &str, escaped_quote: &str) -> Option<String> {
    let start = text.find(marker)? + marker.len();
    let rest = text[start..].trim_start().strip_prefix('\'')?;
    let mut out = String::new();
    let mut i = 0;
    while i < rest.len() {
        if rest[i..].starts_with(escaped_quote) {
            out.push('\'');
            i += escaped_quote.len();
        } else if rest[i..].starts_with('\'') {
            return Some(out);
        } else {
            let c = rest[i..].chars().next()?;
            out.push(c);
            i += c.len_utf8();
        }
    }
    None
}

fn parts(family: AmiFamily, user_data: &str) -> Result<Vec<MimePart>, KubeletInputsError> {
    if !is_mime(user_data) {
        return Err(error(family, "not a MIME multipart document"));
    }
    parse_mime(user_data).map_err(|e| error(family, e.to_string()))
}

fn al2(user_data: &str) -> Result<KubeletInputs, KubeletInputsError> {
    let family = AmiFamily::Al2;
    let parts = parts(family, user_data)?;
    let script = parts
        .iter()
        .rev()
        .map(|p| p.body.as_str())
        .find(|b| b.contains("/etc/eks/bootstrap.sh"))
        .ok_or_else(|| error(family, "no part calls /etc/eks/bootstrap.sh"))?;
    let mut config = base_configuration();
    // The passed-through fields, merged into the AMI's file with jq before bootstrap.sh runs.
    if let Some(start) = script.find("<<'KARPENTER_KUBELET_CONFIG'\n") {
        let body = &script[start + "<<'KARPENTER_KUBELET_CONFIG'\n".len()..];
        let json = body.split("\nKARPENTER_KUBELET_CONFIG").next().unwrap_or("");
        let fields: Value = serde_json::from_str(json).map_err(|e| error(family, format!("kubelet config: {e}")))?;
        merge(&mut config, &fields);
    }
    if let Some(dns) = single_quoted_after(script, "--dns-cluster-ip", "'\\''") {
        config["clusterDNS"] = json!([dns]);
    }
    let flags = single_quoted_after(script, "--kubelet-extra-args", "'\\''")
        .map(|a| split_systemd_words(&a))
        .unwrap_or_default();
    Ok(KubeletInputs { flags, config })
}

fn al2023(user_data: &str) -> Result<KubeletInputs, KubeletInputsError> {
    let family = AmiFamily::Al2023;
    let mut config = base_configuration();
    let mut flags = Vec::new();
    let mut found = false;
    for part in parts(family, user_data)?.iter().filter(|p| p.content_type.starts_with(NODEADM_CONTENT_TYPE)) {
        for doc in serde_saphyr::from_multiple::<Value>(&part.body).map_err(|e| error(family, e.to_string()))? {
            if doc.get("kind").and_then(Value::as_str) != Some("NodeConfig") {
                continue;
            }
            found = true;
            let kubelet = &doc["spec"]["kubelet"];
            if let Some(c) = kubelet.get("config") {
                merge(&mut config, c);
            }
            if let Some(f) = kubelet.get("flags").and_then(Value::as_array) {
                flags.extend(f.iter().filter_map(Value::as_str).map(str::to_owned));
            }
        }
    }
    if !found {
        return Err(error(family, "no NodeConfig part"));
    }
    Ok(KubeletInputs { flags, config })
}

/// A TOML value as JSON (dates, which kubelet settings never are, as strings).
fn toml_to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => json!(s),
        toml::Value::Integer(i) => json!(i),
        toml::Value::Float(f) => json!(f),
        toml::Value::Boolean(b) => json!(b),
        toml::Value::Datetime(d) => json!(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(t.iter().map(|(k, v)| (k.clone(), toml_to_json(v))).collect()),
    }
}

/// How a Bottlerocket setting's value becomes the kubelet field's value.
type Retype = fn(Value) -> Value;

/// The configuration field a Bottlerocket `settings.kubernetes` key sets, and how its value is typed there.
fn bottlerocket_field(key: &str) -> Option<(&'static str, Retype)> {
    let same: Retype = |v| v;
    let integer: Retype = |v| match &v {
        Value::String(s) => s.trim().parse::<i64>().map_or(v.clone(), |i| json!(i)),
        _ => v,
    };
    let list: Retype = |v| if v.is_array() { v } else { json!([v]) };
    Some(match key {
        "max-pods" => ("maxPods", same),
        "cluster-dns-ip" => ("clusterDNS", list),
        "system-reserved" => ("systemReserved", same),
        "kube-reserved" => ("kubeReserved", same),
        "eviction-hard" => ("evictionHard", same),
        "eviction-soft" => ("evictionSoft", same),
        "eviction-soft-grace-period" => ("evictionSoftGracePeriod", same),
        "eviction-max-pod-grace-period" => ("evictionMaxPodGracePeriod", same),
        "image-gc-high-threshold-percent" => ("imageGCHighThresholdPercent", integer),
        "image-gc-low-threshold-percent" => ("imageGCLowThresholdPercent", integer),
        "cpu-cfs-quota-enforced" => ("cpuCFSQuota", same),
        other => (kubelet_field_of_bottlerocket_setting(other)?, same),
    })
}

fn bottlerocket(user_data: &str) -> Result<KubeletInputs, KubeletInputsError> {
    let family = AmiFamily::Bottlerocket;
    let root: toml::Table = user_data.parse().map_err(|e: toml::de::Error| error(family, e.to_string()))?;
    let mut config = base_configuration();
    let mut flags = Vec::new();
    let Some(toml::Value::Table(kube)) = root.get("settings").and_then(|s| s.get("kubernetes")) else {
        return Err(error(family, "no settings.kubernetes table"));
    };
    for (key, value) in kube {
        match key.as_str() {
            "node-labels" => {
                let labels = value.as_table().ok_or_else(|| error(family, "node-labels is not a table"))?;
                let pairs: Vec<String> =
                    labels.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
                flags.push(format!("--node-labels={}", pairs.join(",")));
            }
            "node-taints" => {
                let taints = value.as_table().ok_or_else(|| error(family, "node-taints is not a table"))?;
                let mut all = Vec::new();
                for (k, values) in taints {
                    for v in values.as_array().into_iter().flatten().filter_map(toml::Value::as_str) {
                        // `value:Effect`, the value possibly empty.
                        let (value, effect) = v.rsplit_once(':').unwrap_or(("", v));
                        all.push(if value.is_empty() {
                            format!("{k}:{effect}")
                        } else {
                            format!("{k}={value}:{effect}")
                        });
                    }
                }
                flags.push(format!("--register-with-taints={}", all.join(",")));
            }
            other => {
                if let Some((field, typed)) = bottlerocket_field(other) {
                    config[field] = typed(toml_to_json(value));
                }
            }
        }
    }
    Ok(KubeletInputs { flags, config })
}

fn windows(user_data: &str) -> Result<KubeletInputs, KubeletInputsError> {
    let family = AmiFamily::Windows2022;
    if !user_data.contains("Start-EKSBootstrap.ps1") {
        return Err(error(family, "no call of Start-EKSBootstrap.ps1"));
    }
    let mut config = base_configuration();
    if let Some(dns) = single_quoted_after(user_data, "-DNSClusterIP", "''") {
        config["clusterDNS"] = json!([dns]);
    }
    let flags =
        single_quoted_after(user_data, "-KubeletExtraArgs", "''").map(|a| split_systemd_words(&a)).unwrap_or_default();
    Ok(KubeletInputs { flags, config })
}

/// The rules of the kubelet's own configuration validation (v1.32) that a node class's `userData` can break,
/// as the kubelet words them, judged on a merged configuration (`KubeletInputs::config`): a kubelet given that
/// configuration refuses to start. The kubelet judge of the test suite checks this list agrees with the real
/// kubelet. Empty when none is broken.
pub fn kubelet_config_refusals(config: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let int = |name: &str| config.get(name).and_then(Value::as_i64);
    let num = |name: &str| config.get(name).and_then(Value::as_f64);
    let text = |name: &str| config.get(name).and_then(Value::as_str);
    // A duration the kubelet cannot read, or a negative one, as `None` with the text kept for the message.
    let duration = |name: &str| -> Option<Result<std::time::Duration, String>> {
        let t = text(name)?;
        Some(karpenter_api::duration::parse_go_duration(t).map_err(|_| t.to_owned()))
    };
    let high = int("imageGCHighThresholdPercent").unwrap_or(i64::from(KUBELET_DEFAULT_IMAGE_GC_HIGH_PERCENT));
    let low = int("imageGCLowThresholdPercent").unwrap_or(i64::from(KUBELET_DEFAULT_IMAGE_GC_LOW_PERCENT));
    for (name, v) in [("imageGCHighThresholdPercent", high), ("imageGCLowThresholdPercent", low)] {
        if !(0..=100).contains(&v) {
            out.push(format!("{name} {v} must be between 0 and 100, inclusive"));
        }
    }
    if low >= high {
        out.push(format!("imageGCLowThresholdPercent {low} must be less than imageGCHighThresholdPercent {high}"));
    }
    for name in [
        "maxPods",
        "podsPerCore",
        "maxOpenFiles",
        "kubeAPIQPS",
        "kubeAPIBurst",
        "eventRecordQPS",
        "eventBurst",
        "registryPullQPS",
        "registryBurst",
    ] {
        if let Some(v) = num(name).filter(|v| *v < 0.0) {
            out.push(format!("{name} {v} must not be a negative number"));
        }
    }
    if let Some(v) = int("nodeStatusMaxImages").filter(|v| *v < -1) {
        out.push(format!("nodeStatusMaxImages {v} must be -1 or greater"));
    }
    if let Some(v) = int("oomScoreAdj").filter(|v| !(-1000..=1000).contains(v)) {
        out.push(format!("oomScoreAdj {v} must be between -1000 and 1000, inclusive"));
    }
    if let Some(v) = int("containerLogMaxWorkers").filter(|v| *v < 1) {
        out.push(format!("containerLogMaxWorkers {v} must be greater than or equal to 1"));
    }
    let policies = ["none", "best-effort", "restricted", "single-numa-node"];
    if let Some(p) = text("topologyManagerPolicy").filter(|p| !policies.contains(p)) {
        out.push(format!("topologyManagerPolicy {p:?} must be one of {policies:?}"));
    }
    if let Some(s) = text("topologyManagerScope").filter(|s| !["container", "pod"].contains(s)) {
        out.push(format!("topologyManagerScope {s:?} must be \"container\" or \"pod\""));
    }
    let grace = duration("shutdownGracePeriod");
    let critical = duration("shutdownGracePeriodCriticalPods");
    for (name, d) in [("shutdownGracePeriod", &grace), ("shutdownGracePeriodCriticalPods", &critical)] {
        if let Some(Err(t)) = d {
            out.push(format!("{name} {t} must be a non-negative duration"));
        }
    }
    if let (Some(Ok(critical)), grace) = (&critical, &grace) {
        let grace = match grace {
            Some(Ok(g)) => *g,
            _ => std::time::Duration::ZERO,
        };
        if *critical > grace {
            out.push(format!("shutdownGracePeriodCriticalPods {critical:?} must be <= shutdownGracePeriod {grace:?}"));
        }
    }
    if let Some(Ok(d)) = duration("containerLogMonitorInterval").filter(|d| matches!(d, Ok(d) if d.as_secs() < 3)) {
        out.push(format!("containerLogMonitorInterval {d:?} must be at least 3s"));
    }
    let min_age = match duration("imageMinimumGCAge") {
        Some(Ok(d)) => d,
        _ => std::time::Duration::from_secs(120),
    };
    if let Some(Ok(max_age)) = duration("imageMaximumGCAge")
        && !max_age.is_zero()
        && max_age <= min_age
    {
        out.push(format!("imageMaximumGCAge {max_age:?} must be greater than imageMinimumGCAge {min_age:?}"));
    }
    let custom_period = config["featureGates"]["CustomCPUCFSQuotaPeriod"].as_bool() == Some(true);
    if let Some(Ok(period)) = duration("cpuCFSQuotaPeriod")
        && period != std::time::Duration::from_millis(100)
        && !custom_period
    {
        out.push(format!("cpuCFSQuotaPeriod {period:?} requires feature gate CustomCPUCFSQuotaPeriod"));
    }
    out
}

/// The labels in the `kubernetes.io` / `k8s.io` namespaces the kubelet sets on its own Node and therefore takes
/// in `--node-labels`.
const KUBELET_LABELS: [&str; 11] = [
    "kubernetes.io/hostname",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
];

/// Whether the kubelet takes `key` in `--node-labels`: outside the `kubernetes.io` / `k8s.io` namespaces
/// anything; inside them its own labels ([`KUBELET_LABELS`]) and the `kubelet.kubernetes.io` and
/// `node.kubernetes.io` namespaces (subdomains included).
fn kubelet_takes_label(key: &str) -> bool {
    !is_registration_only_label(key)
        || KUBELET_LABELS.contains(&key)
        || label_in_namespace(key, "kubelet.kubernetes.io")
        || label_in_namespace(key, "node.kubernetes.io")
}

/// The kubelet's refusals of `--node-labels` among `flags` (labels in its protected namespaces it does not
/// take, [`kubelet_takes_label`]), as it words them. The kubelet judge checks the rule agrees with the kubelet.
pub fn kubelet_flag_refusals(flags: &[String]) -> Vec<String> {
    let refused: Vec<&str> = flags
        .iter()
        .filter_map(|f| f.strip_prefix("--node-labels="))
        .flat_map(|v| v.trim_matches('"').split(','))
        .filter_map(|kv| kv.split('=').next())
        .filter(|k| !k.is_empty() && !kubelet_takes_label(k))
        .collect();
    if refused.is_empty() {
        Vec::new()
    } else {
        vec![format!("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: {}", refused.join(", "))]
    }
}

/// What the kubelet would refuse in the configuration a node class's `userData` contributes, merged with the
/// class's static kubelet settings (an AL2023 NodeConfig's `kubelet.config` and `kubelet.flags`, Bottlerocket's
/// `settings.kubernetes`) ([`kubelet_config_refusals`], [`kubelet_flag_refusals`]); empty when nothing, when the family takes no configuration from user data
/// (AL2's and Windows' are scripts, Custom's is not Karpenter's), or when the user data cannot be built (its own
/// problem, reported elsewhere).
pub fn user_data_kubelet_refusals(
    family: AmiFamily,
    custom_user_data: Option<&str>,
    kubelet: Option<&KubeletConfiguration>,
) -> Vec<String> {
    if !matches!(family, AmiFamily::Al2023 | AmiFamily::Bottlerocket) || custom_user_data.is_none() {
        return Vec::new();
    }
    // Expressions resolve per instance type; their fields are judged by node class validation instead.
    let kubelet = kubelet.filter(|k| !k.has_expressions()).cloned().unwrap_or_default();
    // Any CIDR: without one, AL2023 user data is not built at all, which is a problem of its own.
    let config = BootstrapConfig::for_validation(custom_user_data, Some("10.100.0.0/16"), kubelet);
    let Ok(text) = user_data(family, &config) else { return Vec::new() };
    let Ok(inputs) = kubelet_inputs(family, &text) else { return Vec::new() };
    let mut refusals = kubelet_config_refusals(&inputs.config);
    refusals.extend(kubelet_flag_refusals(&inputs.flags));
    refusals
}

#[cfg(test)]
mod tests;
