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

use karpenter_api::AmiFamily;
use karpenter_api::ec2nodeclass::kubelet_field_of_bottlerocket_setting;

use super::userdata::{MimePart, NODEADM_CONTENT_TYPE, is_mime, parse_mime};

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

/// The configuration field a Bottlerocket `settings.kubernetes` key sets, and how its value is typed there.
fn bottlerocket_field(key: &str) -> Option<(&'static str, fn(Value) -> Value)> {
    let same: fn(Value) -> Value = |v| v;
    let integer: fn(Value) -> Value = |v| match &v {
        Value::String(s) => s.trim().parse::<i64>().map_or(v.clone(), |i| json!(i)),
        _ => v,
    };
    let list: fn(Value) -> Value = |v| if v.is_array() { v } else { json!([v]) };
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

#[cfg(test)]
mod tests;
