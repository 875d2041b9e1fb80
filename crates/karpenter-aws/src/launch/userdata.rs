//! User data per AMI family, as pure functions of a [`BootstrapConfig`].
//!
//! | Family | Karpenter's part | The node class `userData` |
//! |---|---|---|
//! | AL2023 | nodeadm `NodeConfig` (YAML) in a MIME multipart document | MIME parts, a `NodeConfig` or a shell script, placed before ours (nodeadm merges NodeConfigs in order, so ours win) |
//! | AL2 | `/etc/eks/bootstrap.sh` shell script in a MIME multipart document | MIME parts or a shell script, placed before ours |
//! | Bottlerocket | TOML `settings.kubernetes.*` | TOML, merged: the user's settings are kept, ours win on the keys we set, labels and taints are merged key by key |
//! | Windows | PowerShell calling `Start-EKSBootstrap.ps1` | PowerShell, placed before ours inside one `<powershell>` block |
//! | Custom | nothing | passed through verbatim |
//!
//! The kubelet fields Karpenter does not interpret ([`KubeletConfiguration::passthrough`]) reach the kubelet as
//! configuration: merged into the nodeadm `spec.kubelet.config` (AL2023), merged with `jq` into the AMI's
//! kubelet configuration file before `bootstrap.sh` runs (AL2), and as the `settings.kubernetes` keys
//! Bottlerocket has for them ([`bottlerocket_setting`]). Windows takes none (validation rejects them there).
//!
//! The output is plain text; the launch-template API adapter base64-encodes it. Every function is
//! deterministic (maps are ordered) and never panics on malformed user data: what cannot be parsed is an
//! [`UserDataError`].

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::api::AmiFamily;
use crate::api::{KubeletConfiguration, MaxPods, bottlerocket_setting};
use karpenter_api::nodeclaim::Taint;
use serde_json::{Map, Value, json};

/// The MIME boundary of the multipart documents we write.
pub const MIME_BOUNDARY: &str = "//";
/// Content type of a nodeadm `NodeConfig` part.
pub const NODEADM_CONTENT_TYPE: &str = "application/node.eks.aws";
/// Content type of a shell-script part.
pub const SHELL_CONTENT_TYPE: &str = "text/x-shellscript; charset=\"us-ascii\"";

/// Everything the bootstrap of a node needs, resolved for one launch template.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BootstrapConfig {
    /// The EKS cluster name.
    pub cluster_name: String,
    /// The API server endpoint (`https://...`).
    pub cluster_endpoint: String,
    /// The cluster CA bundle, base64 (as EKS returns it).
    pub ca_bundle: Option<String>,
    /// The service CIDR (AL2023's `spec.cluster.cidr`).
    pub service_cidr: Option<String>,
    /// Kubelet settings of the node class, resolved for the launch's instance types by the caller: `cluster_dns`
    /// defaulted to the kube-dns IP, `max_pods` a static value (the group's pods value unless set), and no CEL
    /// expression left in the reserved maps (see `crate::launch::instance`).
    pub kubelet: KubeletConfiguration,
    /// Node labels to register with.
    pub labels: BTreeMap<String, String>,
    /// Taints to register with (the registration taint `karpenter.sh/unregistered:NoExecute` included).
    pub taints: Vec<Taint>,
    /// `instanceStorePolicy: RAID0`.
    pub instance_store_raid0: bool,
    /// The node class `userData`, if any.
    pub custom_user_data: Option<String>,
}

/// User data that could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    /// The node class `userData` says it is MIME multipart but cannot be split.
    #[error("userData is not a valid MIME multipart document: {0}")]
    InvalidMime(String),
    /// The node class `userData` of a Bottlerocket class is not TOML (or not a table where settings go).
    #[error("userData is not valid Bottlerocket TOML: {0}")]
    InvalidToml(String),
    /// AL2023: nodeadm refuses a `NodeConfig` without `spec.cluster.cidr`, and the cluster's service CIDR is not
    /// known (EKS `DescribeCluster` was not answered, as in an isolated VPC).
    #[error(
        "the cluster's service CIDR is unknown (EKS DescribeCluster gave none) and nodeadm refuses a NodeConfig \
         without spec.cluster.cidr; AL2023 nodes are not launched until it is known"
    )]
    MissingServiceCidr,
}

/// The user data of a launch template of `family`. Labels the kubelet may not set
/// ([`is_registration_only_label`]) are left out for every family: Karpenter puts them on the Node when it
/// registers.
pub fn user_data(family: AmiFamily, config: &BootstrapConfig) -> Result<String, UserDataError> {
    let filtered;
    let config = if config.labels.keys().any(|k| is_registration_only_label(k)) {
        let mut c = config.clone();
        c.labels.retain(|k, _| !is_registration_only_label(k));
        filtered = c;
        &filtered
    } else {
        config
    };
    match family {
        AmiFamily::Al2023 => al2023(config),
        AmiFamily::Al2 => al2(config),
        AmiFamily::Bottlerocket => bottlerocket(config),
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => Ok(windows(config)),
        AmiFamily::Custom => Ok(config.custom_user_data.clone().unwrap_or_default()),
    }
}

/// Whether a label belongs to the `kubernetes.io` or `k8s.io` namespaces (the domain itself or a subdomain,
/// `node-restriction.kubernetes.io` included). The kubelet refuses most of them in `--node-labels` and exits
/// (`node-role.kubernetes.io/worker`, say), and the NodeRestriction admission plugin refuses the rest on a
/// node's own writes, so none go into user data, as upstream does; the registration controller copies the
/// NodeClaim's labels onto the Node instead.
pub fn is_registration_only_label(key: &str) -> bool {
    label_in_namespace(key, "kubernetes.io") || label_in_namespace(key, "k8s.io")
}

/// Whether `key`'s domain prefix is the namespace `ns` or a subdomain of it (`node-role.kubernetes.io` is in
/// `kubernetes.io`; `notkubernetes.io` is not). A key without a prefix is in no namespace.
pub(crate) fn label_in_namespace(key: &str, ns: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else { return false };
    domain == ns || domain.strip_suffix(ns).is_some_and(|p| p.ends_with('.'))
}

/// Whether the kubelet's cluster DNS is an IPv6 address: the node is in an IPv6 cluster (upstream's test too).
fn ipv6_cluster(config: &BootstrapConfig) -> bool {
    config.kubelet.cluster_dns.first().is_some_and(|ip| ip.trim().parse::<std::net::Ipv6Addr>().is_ok())
}

/// What is wrong with a node class's `userData` for `family`, judged as a launch would judge it (MIME split,
/// Bottlerocket TOML), and, for AL2023, a service CIDR the cluster does not have. `None` when a launch can
/// build its user data.
pub fn node_class_user_data_problem(
    family: AmiFamily,
    custom_user_data: Option<&str>,
    service_cidr: Option<&str>,
) -> Option<UserDataError> {
    user_data(family, &BootstrapConfig::for_validation(custom_user_data, service_cidr, KubeletConfiguration::default()))
        .err()
}

impl BootstrapConfig {
    /// What validation renders a node class's user data with, launch-free: placeholder cluster name and
    /// endpoint (they never decide whether user data can be built), the cluster's service CIDR, the class's
    /// `userData` and the kubelet settings to merge it with.
    pub fn for_validation(
        custom_user_data: Option<&str>,
        service_cidr: Option<&str>,
        kubelet: KubeletConfiguration,
    ) -> Self {
        Self {
            cluster_name: "validation".into(),
            cluster_endpoint: "https://validation".into(),
            service_cidr: service_cidr.map(str::to_owned),
            kubelet,
            custom_user_data: custom_user_data.map(str::to_owned),
            ..Default::default()
        }
    }
}

// -------------------------------------------------------------------------------------------------------------
// MIME.
// -------------------------------------------------------------------------------------------------------------

/// One part of a MIME multipart document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MimePart {
    /// The `Content-Type` header value.
    pub content_type: String,
    /// The body (without trailing newline).
    pub body: String,
}

fn normalize_newlines(s: &str) -> String {
    s.replace("\r\n", "\n")
}

/// The boundary of a multipart document's top-level headers, or `None` when `text` is not MIME multipart.
fn multipart_boundary(headers: &str) -> Option<String> {
    for line in headers.lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        if !name.trim().eq_ignore_ascii_case("content-type") {
            continue;
        }
        let value = value.trim();
        if !value.to_ascii_lowercase().starts_with("multipart/") {
            return None;
        }
        for param in value.split(';').skip(1) {
            let Some((k, v)) = param.split_once('=') else { continue };
            if k.trim().eq_ignore_ascii_case("boundary") {
                return Some(v.trim().trim_matches('"').to_owned());
            }
        }
    }
    None
}

/// Whether `text` is a MIME document (starts with a `MIME-Version` or `Content-Type` header).
pub fn is_mime(text: &str) -> bool {
    let first = text.trim_start().lines().next().unwrap_or("").to_ascii_lowercase();
    first.starts_with("mime-version:") || first.starts_with("content-type:")
}

/// Splits a MIME multipart document into its parts.
pub fn parse_mime(text: &str) -> Result<Vec<MimePart>, UserDataError> {
    let text = normalize_newlines(text);
    let (headers, body) = text.trim_start().split_once("\n\n").unwrap_or((text.trim_start(), ""));
    let boundary = multipart_boundary(headers)
        .ok_or_else(|| UserDataError::InvalidMime("no multipart Content-Type with a boundary".into()))?;
    if boundary.is_empty() {
        return Err(UserDataError::InvalidMime("empty boundary".into()));
    }
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in body.lines() {
        if line.trim_end() == format!("{delimiter}--") {
            if let Some(lines) = current.take() {
                parts.push(part_from_lines(&lines)?);
            }
            break;
        }
        if line.trim_end() == delimiter {
            if let Some(lines) = current.take() {
                parts.push(part_from_lines(&lines)?);
            }
            current = Some(Vec::new());
            continue;
        }
        if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    // Still open after the last line: the closing delimiter is missing, and the document ends with its last
    // part, as cloud-init reads it (upstream's reader accepts a document ending in a plain delimiter too); a
    // trailing plain delimiter opens no part.
    if let Some(lines) = current.filter(|l| l.iter().any(|x| !x.trim().is_empty())) {
        parts.push(part_from_lines(&lines)?);
    }
    Ok(parts)
}

fn part_from_lines(lines: &[&str]) -> Result<MimePart, UserDataError> {
    let blank = lines
        .iter()
        .position(|l| l.trim().is_empty())
        .ok_or_else(|| UserDataError::InvalidMime("a part has no blank line after its headers".into()))?;
    let (headers, body) = lines.split_at(blank);
    let content_type = headers
        .iter()
        .filter_map(|h| h.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_owned())
        .ok_or_else(|| UserDataError::InvalidMime("a part has no Content-Type".into()))?;
    let body = body.iter().skip(1).copied().collect::<Vec<_>>().join("\n");
    Ok(MimePart { content_type, body: body.trim_end_matches('\n').to_owned() })
}

/// Writes a MIME multipart document with [`MIME_BOUNDARY`].
pub fn write_mime(parts: &[MimePart]) -> String {
    let mut out = format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{MIME_BOUNDARY}\"\n\n");
    for p in parts {
        let _ = write!(out, "--{MIME_BOUNDARY}\nContent-Type: {}\n\n{}\n\n", p.content_type, p.body);
    }
    let _ = writeln!(out, "--{MIME_BOUNDARY}--");
    out
}

fn looks_like_node_config(text: &str) -> bool {
    text.contains("node.eks.aws/") && text.contains("NodeConfig")
}

/// The node class `userData` as MIME parts: split when it is MIME, else one part (nodeadm `NodeConfig` when
/// `nodeadm` is true and it looks like one, else a shell script).
fn user_parts(custom: Option<&str>, nodeadm: bool) -> Result<Vec<MimePart>, UserDataError> {
    let Some(text) = custom.filter(|t| !t.trim().is_empty()) else { return Ok(Vec::new()) };
    if is_mime(text) {
        return parse_mime(text);
    }
    let body = normalize_newlines(text).trim_end_matches('\n').to_owned();
    let content_type = if nodeadm && looks_like_node_config(text) { NODEADM_CONTENT_TYPE } else { SHELL_CONTENT_TYPE };
    Ok(vec![MimePart { content_type: content_type.into(), body }])
}

// -------------------------------------------------------------------------------------------------------------
// Shared pieces.
// -------------------------------------------------------------------------------------------------------------

fn taint_string(t: &Taint) -> String {
    match t.value.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => format!("{}={}:{}", t.key, v, t.effect.as_str()),
        None => format!("{}:{}", t.key, t.effect.as_str()),
    }
}

fn labels_flag(labels: &BTreeMap<String, String>) -> String {
    map_flag(labels, '=')
}

/// `key<separator>value,...` for a map flag. Each map flag has its own pair syntax: the reserved maps and the
/// grace periods take `key=value`, the eviction thresholds `signal<threshold` (the kubelet refuses
/// `memory.available=10%` there and exits).
fn map_flag(map: &BTreeMap<String, String>, separator: char) -> String {
    map.iter().map(|(k, v)| format!("{k}{separator}{v}")).collect::<Vec<_>>().join(",")
}

/// The kubelet command-line arguments (AL2 `--kubelet-extra-args`, Windows `-KubeletExtraArgs`).
fn kubelet_args(config: &BootstrapConfig) -> Vec<String> {
    let k = &config.kubelet;
    let mut args = Vec::new();
    if !config.labels.is_empty() {
        args.push(format!("--node-labels=\"{}\"", labels_flag(&config.labels)));
    }
    if !config.taints.is_empty() {
        let taints: Vec<String> = config.taints.iter().map(taint_string).collect();
        args.push(format!("--register-with-taints=\"{}\"", taints.join(",")));
    }
    if let Some(m) = k.max_pods.as_ref().and_then(MaxPods::as_static) {
        args.push(format!("--max-pods={m}"));
    }
    if let Some(p) = k.pods_per_core {
        args.push(format!("--pods-per-core={p}"));
    }
    for (flag, map, separator) in [
        ("--system-reserved", &k.system_reserved, '='),
        ("--kube-reserved", &k.kube_reserved, '='),
        ("--eviction-hard", &k.eviction_hard, '<'),
        ("--eviction-soft", &k.eviction_soft, '<'),
    ] {
        if !map.is_empty() {
            args.push(format!("{flag}=\"{}\"", map_flag(map, separator)));
        }
    }
    if !k.eviction_soft_grace_period.is_empty() {
        let m: BTreeMap<String, String> =
            k.eviction_soft_grace_period.iter().map(|(a, b)| (a.clone(), b.to_string())).collect();
        args.push(format!("--eviction-soft-grace-period=\"{}\"", map_flag(&m, '=')));
    }
    if let Some(v) = k.eviction_max_pod_grace_period {
        args.push(format!("--eviction-max-pod-grace-period={v}"));
    }
    if let Some(v) = k.image_gc_high_threshold_percent {
        args.push(format!("--image-gc-high-threshold={v}"));
    }
    if let Some(v) = k.image_gc_low_threshold_percent {
        args.push(format!("--image-gc-low-threshold={v}"));
    }
    if let Some(v) = k.cpu_cfs_quota {
        args.push(format!("--cpu-cfs-quota={v}"));
    }
    args
}

/// Single-quotes for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Single-quotes for PowerShell.
fn ps_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

// -------------------------------------------------------------------------------------------------------------
// AL2023 (nodeadm).
// -------------------------------------------------------------------------------------------------------------

/// Karpenter's nodeadm `NodeConfig` as a JSON value (rendered as YAML by [`yaml`]).
pub fn node_config(config: &BootstrapConfig) -> Value {
    let k = &config.kubelet;
    let mut cluster = Map::new();
    cluster.insert("name".into(), json!(config.cluster_name));
    cluster.insert("apiServerEndpoint".into(), json!(config.cluster_endpoint));
    if let Some(ca) = &config.ca_bundle {
        cluster.insert("certificateAuthority".into(), json!(ca));
    }
    if let Some(cidr) = &config.service_cidr {
        cluster.insert("cidr".into(), json!(cidr));
    }
    // The passed-through fields first: the interpreted ones and Karpenter's own (registration taints) win.
    let mut kc: Map<String, Value> = k.passthrough().map(|(n, v)| (n.clone(), v.clone())).collect();
    if !k.cluster_dns.is_empty() {
        kc.insert("clusterDNS".into(), json!(k.cluster_dns));
    }
    if let Some(v) = k.max_pods.as_ref().and_then(MaxPods::as_static) {
        kc.insert("maxPods".into(), json!(v));
    }
    if let Some(v) = k.pods_per_core {
        kc.insert("podsPerCore".into(), json!(v));
    }
    for (name, map) in [
        ("systemReserved", &k.system_reserved),
        ("kubeReserved", &k.kube_reserved),
        ("evictionHard", &k.eviction_hard),
        ("evictionSoft", &k.eviction_soft),
    ] {
        if !map.is_empty() {
            kc.insert(name.into(), json!(map));
        }
    }
    if !k.eviction_soft_grace_period.is_empty() {
        let m: BTreeMap<&String, String> =
            k.eviction_soft_grace_period.iter().map(|(a, b)| (a, b.to_string())).collect();
        kc.insert("evictionSoftGracePeriod".into(), json!(m));
    }
    if let Some(v) = k.eviction_max_pod_grace_period {
        kc.insert("evictionMaxPodGracePeriod".into(), json!(v));
    }
    if let Some(v) = k.image_gc_high_threshold_percent {
        kc.insert("imageGCHighThresholdPercent".into(), json!(v));
    }
    if let Some(v) = k.image_gc_low_threshold_percent {
        kc.insert("imageGCLowThresholdPercent".into(), json!(v));
    }
    if let Some(v) = k.cpu_cfs_quota {
        kc.insert("cpuCFSQuota".into(), json!(v));
    }
    if !config.taints.is_empty() {
        let taints: Vec<Value> = config
            .taints
            .iter()
            .map(|t| {
                let mut m = Map::new();
                m.insert("key".into(), json!(t.key));
                if let Some(v) = t.value.as_deref().filter(|v| !v.is_empty()) {
                    m.insert("value".into(), json!(v));
                }
                m.insert("effect".into(), json!(t.effect.as_str()));
                Value::Object(m)
            })
            .collect();
        kc.insert("registerWithTaints".into(), Value::Array(taints));
    }
    let mut kubelet = Map::new();
    if !kc.is_empty() {
        kubelet.insert("config".into(), Value::Object(kc));
    }
    if !config.labels.is_empty() {
        kubelet.insert("flags".into(), json!([format!("--node-labels={}", labels_flag(&config.labels))]));
    }
    let mut spec = Map::new();
    spec.insert("cluster".into(), Value::Object(cluster));
    if !kubelet.is_empty() {
        spec.insert("kubelet".into(), Value::Object(kubelet));
    }
    if config.instance_store_raid0 {
        spec.insert("instance".into(), json!({"localStorage": {"strategy": "RAID0"}}));
    }
    json!({"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig", "spec": Value::Object(spec)})
}

/// Renders a JSON value as block YAML: maps in key order, strings double-quoted (JSON escapes are valid YAML).
pub fn yaml(value: &Value) -> String {
    let mut out = String::new();
    yaml_into(value, 0, &mut out);
    out
}

fn yaml_scalar(v: &Value) -> String {
    match v {
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Object(m) if m.is_empty() => "{}".into(),
        Value::Array(a) if a.is_empty() => "[]".into(),
        other => other.to_string(),
    }
}

fn is_block(v: &Value) -> bool {
    matches!(v, Value::Object(m) if !m.is_empty()) || matches!(v, Value::Array(a) if !a.is_empty())
}

fn yaml_into(value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                let key = if k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') && !k.is_empty() {
                    k.clone()
                } else {
                    Value::String(k.clone()).to_string()
                };
                if is_block(v) {
                    let _ = writeln!(out, "{pad}{key}:");
                    let child = if matches!(v, Value::Array(_)) { indent } else { indent + 2 };
                    yaml_into(v, child, out);
                } else {
                    let _ = writeln!(out, "{pad}{key}: {}", yaml_scalar(v));
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                if is_block(item) {
                    let mut nested = String::new();
                    yaml_into(item, indent + 2, &mut nested);
                    // The first line of the nested block goes after the dash.
                    let trimmed = nested.get(indent + 2..).unwrap_or("");
                    let _ = write!(out, "{pad}- {trimmed}");
                } else {
                    let _ = writeln!(out, "{pad}- {}", yaml_scalar(item));
                }
            }
        }
        other => {
            let _ = writeln!(out, "{pad}{}", yaml_scalar(other));
        }
    }
}

fn al2023(config: &BootstrapConfig) -> Result<String, UserDataError> {
    if config.service_cidr.as_deref().is_none_or(|c| c.trim().is_empty()) {
        return Err(UserDataError::MissingServiceCidr);
    }
    let mut parts = user_parts(config.custom_user_data.as_deref(), true)?;
    let body = format!("---\n{}", yaml(&node_config(config)));
    parts.push(MimePart { content_type: NODEADM_CONTENT_TYPE.into(), body: body.trim_end().to_owned() });
    Ok(write_mime(&parts))
}

// -------------------------------------------------------------------------------------------------------------
// AL2 (bootstrap.sh).
// -------------------------------------------------------------------------------------------------------------

fn al2(config: &BootstrapConfig) -> Result<String, UserDataError> {
    let mut parts = user_parts(config.custom_user_data.as_deref(), false)?;
    let mut script = String::from(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n",
    );
    script.push_str(&al2_kubelet_config_merge(&config.kubelet));
    let _ = write!(
        script,
        "/etc/eks/bootstrap.sh {} --apiserver-endpoint {}",
        sh_quote(&config.cluster_name),
        sh_quote(&config.cluster_endpoint)
    );
    if let Some(ca) = &config.ca_bundle {
        let _ = write!(script, " --b64-cluster-ca {}", sh_quote(ca));
    }
    // bootstrap.sh assumes IPv4 (its DNS and node-IP defaults) unless told otherwise.
    if ipv6_cluster(config) {
        script.push_str(" \\\n--ip-family ipv6");
    }
    if config.instance_store_raid0 {
        script.push_str(" \\\n--local-disks raid0");
    }
    if let Some(dns) = config.kubelet.cluster_dns.first() {
        let _ = write!(script, " \\\n--dns-cluster-ip {}", sh_quote(dns));
    }
    script.push_str(" \\\n--use-max-pods false");
    let args = kubelet_args(config);
    if !args.is_empty() {
        let _ = write!(script, " \\\n--kubelet-extra-args {}", sh_quote(&args.join(" ")));
    }
    parts.push(MimePart { content_type: SHELL_CONTENT_TYPE.into(), body: script });
    Ok(write_mime(&parts))
}

/// Where the AL2 AMI keeps the kubelet's configuration file, which `bootstrap.sh` edits in place with `jq`.
pub const AL2_KUBELET_CONFIG: &str = "/etc/kubernetes/kubelet/kubelet-config.json";
/// The heredoc delimiter of the passed-through fields (JSON on one line never equals it).
const AL2_KUBELET_CONFIG_EOF: &str = "KARPENTER_KUBELET_CONFIG";

/// `bootstrap.sh` carries the kubelet's settings only as command-line flags, and not every configuration field
/// has one, so the passed-through fields are merged into the AMI's kubelet configuration file before it runs
/// (`jq` is on every EKS AL2 AMI; `bootstrap.sh` needs it). The merge is deep (`*`), so a nested field such as
/// `authentication.webhook.cacheTTL` keeps its siblings; `bootstrap.sh`'s own edits and the flags of the
/// interpreted fields still win. Empty when there is nothing to pass through.
fn al2_kubelet_config_merge(k: &KubeletConfiguration) -> String {
    let fields: Map<String, Value> = k.passthrough().map(|(n, v)| (n.clone(), v.clone())).collect();
    if fields.is_empty() {
        return String::new();
    }
    let json = Value::Object(fields).to_string();
    format!(
        "cat > /tmp/karpenter-kubelet-config.json <<'{AL2_KUBELET_CONFIG_EOF}'\n{json}\n{AL2_KUBELET_CONFIG_EOF}\n\
         jq -s '.[0] * .[1]' {AL2_KUBELET_CONFIG} /tmp/karpenter-kubelet-config.json > /tmp/kubelet-config.merged \
         && mv /tmp/kubelet-config.merged {AL2_KUBELET_CONFIG}\n"
    )
}

// -------------------------------------------------------------------------------------------------------------
// Windows (Start-EKSBootstrap.ps1).
// -------------------------------------------------------------------------------------------------------------

fn strip_powershell_tags(s: &str) -> String {
    let s = normalize_newlines(s);
    let s = s.trim();
    let s = s.strip_prefix("<powershell>").unwrap_or(s);
    let s = s.strip_suffix("</powershell>").unwrap_or(s);
    s.trim_matches('\n').to_owned()
}

fn windows(config: &BootstrapConfig) -> String {
    let mut out = String::from("<powershell>\n");
    if let Some(user) = config.custom_user_data.as_deref().filter(|u| !u.trim().is_empty()) {
        let _ = writeln!(out, "{}", strip_powershell_tags(user));
    }
    out.push_str("[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n");
    let _ = write!(
        out,
        "& $EKSBootstrapScriptFile -EKSClusterName {} -APIServerEndpoint {}",
        ps_quote(&config.cluster_name),
        ps_quote(&config.cluster_endpoint)
    );
    if let Some(ca) = &config.ca_bundle {
        let _ = write!(out, " -Base64ClusterCA {}", ps_quote(ca));
    }
    let args = kubelet_args(config);
    if !args.is_empty() {
        let _ = write!(out, " -KubeletExtraArgs {}", ps_quote(&args.join(" ")));
    }
    if let Some(dns) = config.kubelet.cluster_dns.first() {
        let _ = write!(out, " -DNSClusterIP {}", ps_quote(dns));
    }
    out.push_str("\n</powershell>\n");
    out
}

// -------------------------------------------------------------------------------------------------------------
// Bottlerocket (TOML).
// -------------------------------------------------------------------------------------------------------------

fn toml_string_map(map: &BTreeMap<String, String>) -> toml::Table {
    map.iter().map(|(k, v)| (k.clone(), toml::Value::String(v.clone()))).collect()
}

/// A JSON value as TOML (`None` for null, which TOML lacks: the setting is left out).
fn toml_value(v: &Value) -> Option<toml::Value> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64()?),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(items) => toml::Value::Array(items.iter().filter_map(toml_value).collect()),
        Value::Object(m) => {
            toml::Value::Table(m.iter().filter_map(|(k, v)| Some((k.clone(), toml_value(v)?))).collect())
        }
    })
}

/// Gets or creates the table at `key` in `table`; a non-table value there is replaced.
fn subtable<'a>(table: &'a mut toml::Table, key: &str) -> &'a mut toml::Table {
    match table.entry(key.to_owned()).or_insert_with(|| toml::Value::Table(toml::Table::new())) {
        toml::Value::Table(t) => t,
        other => {
            *other = toml::Value::Table(toml::Table::new());
            match other {
                toml::Value::Table(t) => t,
                _ => unreachable!("just replaced by a table"),
            }
        }
    }
}

/// The `settings.kubernetes` keys Bottlerocket's settings model has and Karpenter knows (upstream's modelled
/// subset, sorted). A user's key outside it is dropped, as upstream drops it: Bottlerocket refuses user data
/// with a setting it does not know, and the node never joins.
pub const BOTTLEROCKET_KUBERNETES_KEYS: &[&str] = &[
    "allowed-unsafe-sysctls",
    "api-server",
    "cloud-provider",
    "cluster-certificate",
    "cluster-dns-ip",
    "cluster-domain",
    "cluster-name",
    "container-log-max-files",
    "container-log-max-size",
    "container-log-max-workers",
    "container-log-monitor-interval",
    "cpu-cfs-quota-enforced",
    "cpu-manager-policy",
    "cpu-manager-policy-options",
    "cpu-manager-reconcile-period",
    "credential-providers",
    "device-ownership-from-security-context",
    "event-burst",
    "event-qps",
    "eviction-hard",
    "eviction-max-pod-grace-period",
    "eviction-soft",
    "eviction-soft-grace-period",
    "hostname-override-source",
    "ids-per-pod",
    "image-gc-high-threshold-percent",
    "image-gc-low-threshold-percent",
    "kube-api-burst",
    "kube-api-qps",
    "kube-reserved",
    "log-level",
    "max-pods",
    "memory-manager-policy",
    "memory-manager-reserved-memory",
    "node-labels",
    "node-taints",
    "pod-pids-limit",
    "registry-burst",
    "registry-qps",
    "seccomp-default",
    "server-tls-bootstrap",
    "shutdown-grace-period",
    "shutdown-grace-period-for-critical-pods",
    "single-process-oom-kill",
    "static-pods",
    "system-reserved",
    "topology-manager-policy",
    "topology-manager-policy-options",
    "topology-manager-scope",
];

/// Bottlerocket's settings model types the image GC thresholds as strings (`"85"`), not integers.
const BOTTLEROCKET_STRING_PERCENTS: [&str; 2] = ["image-gc-high-threshold-percent", "image-gc-low-threshold-percent"];

/// The bootstrap command that sets up the instance store as RAID0 ephemeral storage and binds the directories
/// that hold images, pod volumes and logs to it (`instanceStorePolicy: RAID0`; the capacity Karpenter offers
/// counts that storage).
pub const BOTTLEROCKET_INSTANCE_STORE_COMMAND: &str = "000-mount-instance-storage";

/// Whether `key` is one of [`BOTTLEROCKET_KUBERNETES_KEYS`].
fn is_bottlerocket_kubernetes_key(key: &str) -> bool {
    BOTTLEROCKET_KUBERNETES_KEYS.binary_search(&key).is_ok()
}

/// The `settings.kubernetes` keys of a Bottlerocket `userData` that a launch drops
/// ([`BOTTLEROCKET_KUBERNETES_KEYS`]), sorted; empty when it is not TOML or has none.
pub fn bottlerocket_dropped_settings(custom_user_data: &str) -> Vec<String> {
    let Ok(root) = custom_user_data.parse::<toml::Table>() else { return Vec::new() };
    let Some(toml::Value::Table(kube)) = root.get("settings").and_then(|s| s.get("kubernetes")) else {
        return Vec::new();
    };
    kube.keys().filter(|k| !is_bottlerocket_kubernetes_key(k)).cloned().collect()
}

/// The user's TOML as upstream's merge takes it: only `settings` is kept; under `settings.kubernetes` only the
/// known keys, the image GC thresholds as strings, and no `node-taints` (the node registers with Karpenter's
/// taints only). The user's node labels stay, and ours win key by key.
fn bottlerocket_user_settings(text: Option<&str>) -> Result<toml::Table, UserDataError> {
    let Some(text) = text.filter(|u| !u.trim().is_empty()) else { return Ok(toml::Table::new()) };
    let mut user: toml::Table = text.parse().map_err(|e: toml::de::Error| UserDataError::InvalidToml(e.to_string()))?;
    let mut root = toml::Table::new();
    let Some(settings) = user.remove("settings") else { return Ok(root) };
    let toml::Value::Table(mut settings) = settings else {
        return Err(UserDataError::InvalidToml("settings is not a table".into()));
    };
    if let Some(kube) = settings.get_mut("kubernetes") {
        let toml::Value::Table(kube) = kube else {
            return Err(UserDataError::InvalidToml("settings.kubernetes is not a table".into()));
        };
        kube.retain(|k, _| is_bottlerocket_kubernetes_key(k) && k != "node-taints");
        for key in BOTTLEROCKET_STRING_PERCENTS {
            if let Some(toml::Value::Integer(i)) = kube.get(key) {
                let text = i.to_string();
                kube.insert(key.to_owned(), toml::Value::String(text));
            }
        }
    }
    root.insert("settings".into(), toml::Value::Table(settings));
    Ok(root)
}

fn bottlerocket(config: &BootstrapConfig) -> Result<String, UserDataError> {
    let mut root = bottlerocket_user_settings(config.custom_user_data.as_deref())?;
    let k = &config.kubelet;
    let settings = subtable(&mut root, "settings");
    if config.instance_store_raid0 {
        let commands = subtable(subtable(settings, "bootstrap-commands"), BOTTLEROCKET_INSTANCE_STORE_COMMAND);
        let command =
            |args: &[&str]| toml::Value::Array(args.iter().map(|a| toml::Value::String((*a).into())).collect());
        commands.insert(
            "commands".into(),
            toml::Value::Array(vec![
                command(&["apiclient", "ephemeral-storage", "init"]),
                command(&[
                    "apiclient",
                    "ephemeral-storage",
                    "bind",
                    "--dirs",
                    "/var/lib/containerd",
                    "/var/lib/kubelet",
                    "/var/log/pods",
                ]),
            ]),
        );
        commands.insert("mode".into(), toml::Value::String("always".into()));
        commands.insert("essential".into(), toml::Value::Boolean(true));
    }
    let kube = subtable(settings, "kubernetes");
    kube.insert("cluster-name".into(), toml::Value::String(config.cluster_name.clone()));
    kube.insert("api-server".into(), toml::Value::String(config.cluster_endpoint.clone()));
    if let Some(ca) = &config.ca_bundle {
        kube.insert("cluster-certificate".into(), toml::Value::String(ca.clone()));
    }
    match k.cluster_dns.as_slice() {
        [] => {}
        [one] => {
            kube.insert("cluster-dns-ip".into(), toml::Value::String(one.clone()));
        }
        many => {
            kube.insert(
                "cluster-dns-ip".into(),
                toml::Value::Array(many.iter().cloned().map(toml::Value::String).collect()),
            );
        }
    }
    if let Some(m) = k.max_pods.as_ref().and_then(MaxPods::as_static) {
        kube.insert("max-pods".into(), toml::Value::Integer(i64::from(m)));
    }
    for (key, map) in [
        ("system-reserved", &k.system_reserved),
        ("kube-reserved", &k.kube_reserved),
        ("eviction-hard", &k.eviction_hard),
        ("eviction-soft", &k.eviction_soft),
    ] {
        if !map.is_empty() {
            kube.insert(key.into(), toml::Value::Table(toml_string_map(map)));
        }
    }
    if !k.eviction_soft_grace_period.is_empty() {
        let m: BTreeMap<String, String> =
            k.eviction_soft_grace_period.iter().map(|(a, b)| (a.clone(), b.to_string())).collect();
        kube.insert("eviction-soft-grace-period".into(), toml::Value::Table(toml_string_map(&m)));
    }
    if let Some(v) = k.eviction_max_pod_grace_period {
        kube.insert("eviction-max-pod-grace-period".into(), toml::Value::Integer(i64::from(v)));
    }
    for (key, v) in BOTTLEROCKET_STRING_PERCENTS
        .into_iter()
        .zip([k.image_gc_high_threshold_percent, k.image_gc_low_threshold_percent])
    {
        if let Some(v) = v {
            kube.insert(key.into(), toml::Value::String(v.to_string()));
        }
    }
    if let Some(v) = k.cpu_cfs_quota {
        kube.insert("cpu-cfs-quota-enforced".into(), toml::Value::Boolean(v));
    }
    // Validation lets through only the fields Bottlerocket has a setting for; skip any other defensively.
    for (name, v) in k.passthrough() {
        if let (Some(key), Some(value)) = (bottlerocket_setting(name), toml_value(v)) {
            kube.insert(key.to_owned(), value);
        }
    }
    if !config.labels.is_empty() {
        let labels = subtable(kube, "node-labels");
        for (key, v) in &config.labels {
            labels.insert(key.clone(), toml::Value::String(v.clone()));
        }
    }
    if !config.taints.is_empty() {
        let mut ours: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for t in &config.taints {
            ours.entry(t.key.as_str()).or_default().push(format!("{}:{}", t.value_str(), t.effect.as_str()));
        }
        let taints = subtable(kube, "node-taints");
        for (key, values) in ours {
            taints.insert(key.to_owned(), toml::Value::Array(values.into_iter().map(toml::Value::String).collect()));
        }
    }
    Ok(root.to_string())
}

#[cfg(test)]
mod tests;
