//! What aws/karpenter-provider-aws's own tests pin about user data, MIME documents and launch templates,
//! restated as our tests (issue 32, item 3). The inventory, with the upstream suite each row comes from and the
//! facts we deliberately do differently, is `docs/upstream-aws-expectations.md`; each test here names its rows.
//!
//! Everything is checked as data, never as bytes: MIME documents are split into parts, nodeadm `NodeConfig`s
//! read as YAML, Bottlerocket settings as TOML, `bootstrap.sh` and `Start-EKSBootstrap.ps1` command lines as
//! argument lists. The small readers below are deliberately independent of the code under test (the crate has
//! no YAML or shell-word dependency, so they are written here for the subset the documents use).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::{AmiFamily, EC2NodeClass};
use crate::api::{GROUP, KIND, KubeletConfiguration};
use karpenter_api::NodeClaim;
use karpenter_api::labels::{CAPACITY_TYPE, NODE_POOL, OS};
use karpenter_api::nodeclaim::{NodeClassReference, Taint, TaintEffect};
use karpenter_cloudprovider::{CloudProvider, InMemoryNodeClasses};
use karpenter_testing::FakeClock;
use karpenter_testing::karpenter::{NodeClaimOptions, node_claim};
use karpenter_testing::nodepool_requirement;
use serde_json::{Map, Value, json};

use crate::ec2::InstanceTypeInfo;
use crate::instancetypes::SharedPrices;
use crate::launch::instance::ClusterInfo;
use crate::launch::mock::{MockEc2, instance_type_info};
use crate::launch::template::{
    CapacityReservationPreference, LaunchTemplate, LaunchTemplateData, default_block_devices, launch_template_name,
    network_interfaces,
};
use crate::launch::userdata::{BootstrapConfig, MimePart, parse_mime, user_data, write_mime};
use crate::pricing::{PriceSource, PriceTable};
use crate::provider::{AwsCloudProvider, AwsCloudProviderOptions};

// =============================================================================================================
// Readers: MIME, a YAML subset, shell and PowerShell words, Go durations.
// =============================================================================================================

/// One part of a MIME multipart document as read here.
#[derive(Clone, Debug, PartialEq)]
struct Part {
    content_type: String,
    body: String,
}

const NODEADM: &str = "application/node.eks.aws";
const SHELL: &str = "text/x-shellscript; charset=\"us-ascii\"";

/// Splits a multipart document (boundary from its top-level `Content-Type`); a missing closing delimiter ends
/// the last part at the end of the text.
fn mime(doc: &str) -> Vec<Part> {
    let doc = doc.replace("\r\n", "\n");
    let (head, body) = doc.trim_start().split_once("\n\n").expect("MIME headers end with a blank line");
    let boundary = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            if !name.trim().eq_ignore_ascii_case("content-type") {
                return None;
            }
            value.split(';').find_map(|p| p.trim().strip_prefix("boundary=").map(|b| b.trim_matches('"').to_owned()))
        })
        .expect("a multipart Content-Type with a boundary");
    let (open, close) = (format!("--{boundary}"), format!("--{boundary}--"));
    let mut parts = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in body.lines() {
        let t = line.trim_end();
        if t == close || t == open {
            if let Some(lines) = current.take() {
                parts.push(part(&lines));
            }
            if t == close {
                break;
            }
            current = Some(Vec::new());
            continue;
        }
        if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    if let Some(lines) = current.take() {
        parts.push(part(&lines));
    }
    parts
}

fn part(lines: &[&str]) -> Part {
    let blank = lines.iter().position(|l| l.trim().is_empty()).expect("part headers end with a blank line");
    let content_type = lines[..blank]
        .iter()
        .filter_map(|h| h.split_once(':'))
        .find(|(n, _)| n.trim().eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_owned())
        .expect("a part Content-Type");
    let body = lines[blank + 1..].join("\n").trim_end().to_owned();
    Part { content_type, body }
}

/// A YAML scalar: JSON-style double quotes, single quotes, `{}`, `[]`, booleans, null, numbers, else plain text.
fn yaml_scalar(s: &str) -> Value {
    let s = s.trim();
    if s.starts_with('"') {
        return serde_json::from_str(s).expect("a double-quoted YAML scalar");
    }
    if let Some(inner) = s.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        return Value::String(inner.replace("''", "'"));
    }
    match s {
        "{}" => return Value::Object(Map::new()),
        "[]" => return Value::Array(Vec::new()),
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        "null" | "~" | "" => return Value::Null,
        _ => {}
    }
    if let Ok(i) = s.parse::<i64>() {
        return json!(i);
    }
    if let Ok(f) = s.parse::<f64>() {
        return json!(f);
    }
    Value::String(s.to_owned())
}

/// The position of the `:` that ends a mapping key (outside quotes, followed by a space or the line end).
fn key_colon(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < b.len() {
        match (quote, b[i]) {
            (None, q @ (b'"' | b'\'')) if i == 0 => quote = Some(q),
            (Some(b'"'), b'\\') => i += 1,
            (Some(q), c) if c == q => quote = None,
            (None, b':') if i + 1 == b.len() || b[i + 1] == b' ' => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

fn yaml_key(k: &str) -> String {
    match yaml_scalar(k) {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// Reads the block YAML the NodeConfigs use (maps, sequences, scalars, `|` literal blocks) into JSON.
fn yaml(text: &str) -> Value {
    let lines: Vec<(usize, String)> = text
        .lines()
        .filter(|l| {
            let t = l.trim();
            !(t.is_empty() || t.starts_with('#') || t == "---")
        })
        .map(|l| (l.len() - l.trim_start().len(), l.trim().to_owned()))
        .collect();
    let mut lines = lines;
    let mut i = 0;
    let indent = lines.first().map_or(0, |l| l.0);
    yaml_block(&mut lines, &mut i, indent)
}

fn yaml_block(lines: &mut [(usize, String)], i: &mut usize, indent: usize) -> Value {
    if *i < lines.len() && (lines[*i].1.starts_with("- ") || lines[*i].1 == "-") {
        let mut items = Vec::new();
        while *i < lines.len() && lines[*i].0 == indent && (lines[*i].1.starts_with("- ") || lines[*i].1 == "-") {
            let rest = lines[*i].1.get(2..).unwrap_or("").to_owned();
            if (key_colon(&rest).is_some() && !rest.starts_with('"')) || rest.ends_with(':') {
                lines[*i] = (indent + 2, rest);
                items.push(yaml_block(lines, i, indent + 2));
            } else {
                *i += 1;
                items.push(yaml_scalar(&rest));
            }
        }
        return Value::Array(items);
    }
    let mut map = Map::new();
    while *i < lines.len() && lines[*i].0 == indent && !lines[*i].1.starts_with("- ") {
        let line = lines[*i].1.clone();
        let colon = key_colon(&line).unwrap_or_else(|| panic!("a YAML mapping line: {line:?}"));
        let key = yaml_key(&line[..colon]);
        let value = line[colon + 1..].trim().to_owned();
        *i += 1;
        let v = if value == "|" {
            let mut block = Vec::new();
            let start = lines.get(*i).map(|l| l.0);
            while *i < lines.len() && lines[*i].0 > indent {
                block.push(format!("{}{}", " ".repeat(lines[*i].0 - start.unwrap_or(0)), lines[*i].1));
                *i += 1;
            }
            Value::String(block.join("\n") + "\n")
        } else if !value.is_empty() {
            yaml_scalar(&value)
        } else if *i < lines.len() && lines[*i].0 > indent {
            let child = lines[*i].0;
            yaml_block(lines, i, child)
        } else if *i < lines.len() && lines[*i].0 == indent && lines[*i].1.starts_with("- ") {
            yaml_block(lines, i, indent)
        } else {
            Value::Null
        };
        map.insert(key, v);
    }
    Value::Object(map)
}

/// POSIX shell words: single and double quotes, backslash escapes, backslash-newline continuations.
fn shell_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(n) => {
                    cur.push(n);
                    in_word = true;
                }
            },
            '\'' => {
                in_word = true;
                for n in chars.by_ref() {
                    if n == '\'' {
                        break;
                    }
                    cur.push(n);
                }
            }
            '"' => {
                in_word = true;
                while let Some(n) = chars.next() {
                    match n {
                        '"' => break,
                        '\\' => {
                            if let Some(m) = chars.next() {
                                if !matches!(m, '"' | '\\' | '$' | '`') {
                                    cur.push('\\');
                                }
                                cur.push(m);
                            }
                        }
                        _ => cur.push(n),
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// PowerShell words: single-quoted strings (`''` is a quote), else whitespace-separated.
fn ps_words(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                while let Some(n) = chars.next() {
                    if n == '\'' {
                        if chars.peek() == Some(&'\'') {
                            chars.next();
                            cur.push('\'');
                        } else {
                            break;
                        }
                    } else {
                        cur.push(n);
                    }
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// A Go/Kubernetes duration (`1m0s`, `180s`, `5m`, `1h2m3s`) in seconds.
fn seconds(s: &str) -> u64 {
    let mut total = 0;
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let n: u64 = num.parse().unwrap_or_else(|_| panic!("duration {s:?}"));
        num.clear();
        total += n * match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => panic!("duration unit in {s:?}"),
        };
    }
    assert!(num.is_empty(), "duration {s:?} ends with a unit");
    total
}

/// `k<sep>v,...` as a map (`sep` is `=` or `<`).
fn pairs(s: &str, sep: char) -> BTreeMap<String, String> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once(sep).unwrap_or_else(|| panic!("{p:?} has no {sep:?}"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn strip_quotes(s: &str) -> &str {
    s.strip_prefix('"').and_then(|r| r.strip_suffix('"')).unwrap_or(s)
}

/// `--name=value` words as a map (a bare `--name` maps to an empty value).
fn flags(words: &[String]) -> BTreeMap<String, String> {
    words
        .iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k.to_owned(), strip_quotes(v).to_owned()),
            None => (w.clone(), String::new()),
        })
        .collect()
}

// =============================================================================================================
// The rendered documents, read.
// =============================================================================================================

/// An AL2 document: its parts, the `bootstrap.sh` arguments and the kubelet flags of `--kubelet-extra-args`.
struct Al2 {
    parts: Vec<Part>,
    cluster: String,
    args: BTreeMap<String, String>,
    kubelet: BTreeMap<String, String>,
}

fn al2_doc(doc: &str) -> Al2 {
    let parts = mime(doc);
    let script = &parts.last().expect("Karpenter's part").body;
    let at = script.find("/etc/eks/bootstrap.sh").expect("a bootstrap.sh call");
    let words = shell_words(&script[at..]);
    let cluster = words[1].clone();
    let mut args = BTreeMap::new();
    let mut it = words[2..].iter();
    while let Some(flag) = it.next() {
        assert!(flag.starts_with("--"), "bootstrap.sh flag expected, got {flag:?} in {words:?}");
        args.insert(flag.clone(), it.next().cloned().unwrap_or_default());
    }
    let kubelet = args.get("--kubelet-extra-args").map(|a| flags(&shell_words(a))).unwrap_or_default();
    Al2 { parts, cluster, args, kubelet }
}

/// A Windows document: the lines before the bootstrap call, its `-Name value` arguments and the kubelet flags.
struct Windows {
    user_lines: Vec<String>,
    args: BTreeMap<String, String>,
    kubelet: BTreeMap<String, String>,
}

fn windows_doc(doc: &str) -> Windows {
    let doc = doc.replace("\r\n", "\n");
    let inner =
        doc.trim().strip_prefix("<powershell>").and_then(|d| d.strip_suffix("</powershell>")).expect("one block");
    let lines: Vec<&str> = inner.lines().filter(|l| !l.trim().is_empty()).collect();
    let script_var = lines.iter().position(|l| l.starts_with("[string]$EKSBootstrapScriptFile")).expect("script path");
    let call = lines.iter().find(|l| l.starts_with("& $EKSBootstrapScriptFile")).expect("bootstrap call");
    let words = ps_words(call);
    let mut args = BTreeMap::new();
    let mut it = words[2..].iter();
    while let Some(name) = it.next() {
        args.insert(name.clone(), it.next().cloned().unwrap_or_default());
    }
    let kubelet = args.get("-KubeletExtraArgs").map(|a| flags(&shell_words(a))).unwrap_or_default();
    Windows { user_lines: lines[..script_var].iter().map(|l| l.to_string()).collect(), args, kubelet }
}

/// The NodeConfigs of an AL2023 document, in order (Karpenter's is the last).
fn node_configs(doc: &str) -> Vec<Value> {
    mime(doc).iter().filter(|p| p.content_type == NODEADM).map(|p| yaml(&p.body)).collect()
}

fn karpenter_node_config(doc: &str) -> Value {
    node_configs(doc).pop().expect("Karpenter's NodeConfig")
}

fn toml_doc(doc: &str) -> toml::Table {
    doc.parse().unwrap_or_else(|e| panic!("Bottlerocket user data is TOML: {e}\n{doc}"))
}

fn kube_settings(doc: &str) -> toml::Table {
    toml_doc(doc)["settings"]["kubernetes"].as_table().expect("settings.kubernetes").clone()
}

// =============================================================================================================
// Inputs like upstream's suites use.
// =============================================================================================================

const CA: &str = "Y2EtYnVuZGxlCg==";

fn labels() -> BTreeMap<String, String> {
    [
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("karpenter.sh/do-not-sync-taints", "true"),
        ("karpenter.sh/nodepool", "default"),
        ("testing/cluster", "unspecified"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn unregistered() -> Taint {
    Taint::new("karpenter.sh/unregistered", None, TaintEffect::NoExecute)
}

/// Kubelet settings: upstream's resolved defaults (cluster DNS, maxPods 110) with `extra` laid over them.
fn kubelet(extra: Value) -> KubeletConfiguration {
    let mut v = json!({"clusterDNS": ["10.0.100.10"], "maxPods": 110});
    if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    serde_json::from_value(v).expect("kubelet configuration")
}

/// What upstream's launch-template suite resolves for one template: its cluster, CA, service CIDR and labels.
fn config(extra: Value) -> BootstrapConfig {
    BootstrapConfig {
        cluster_name: "test-cluster".into(),
        cluster_endpoint: "https://test-cluster".into(),
        ca_bundle: Some(CA.into()),
        service_cidr: Some("10.100.0.0/16".into()),
        kubelet: kubelet(extra),
        labels: labels(),
        taints: vec![unregistered()],
        ..Default::default()
    }
}

fn with_user(mut c: BootstrapConfig, user: &str) -> BootstrapConfig {
    c.custom_user_data = Some(user.into());
    c
}

fn render(family: AmiFamily, c: &BootstrapConfig) -> String {
    user_data(family, c).unwrap_or_else(|e| panic!("{family:?} user data: {e}"))
}

// Inputs of upstream's `testdata` goldens (the node class `userData` cases), restated.
const AL2_MIME_INPUT: &str = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\n\
Content-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho \"Running custom user data script\"\n\n--BOUNDARY--";
const AL2_MIME_CONTENT_TYPE_FIRST: &str = "Content-Type: multipart/mixed; boundary=\"BOUNDARY\"\nMIME-Version: 1.0\n\n\
--BOUNDARY\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho \"Running custom user data script\"\n\n--BOUNDARY--";
const AL2_SHELL_INPUT: &str = "#!/bin/bash\necho \"Running custom user data script\"\n";
const CUSTOM_SCRIPT: &str = "#!/bin/bash\necho \"Running custom user data script\"";

const AL2023_NODECONFIG_INPUT: &str = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    \
name: test-cluster\n    clusterEndpoint: https://test-cluster\n    certificateAuthority: cluster-ca\n    cidr: 10.100.0.0/16\n  \
kubelet:\n    config:\n      maxPods: 42\n";
const AL2023_SHELL_INPUT: &str = "#!/bin/bash\necho \"Hello, AL2023!\"\n";

fn al2023_mime_input() -> String {
    format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: application/node.eks.aws\n\n\
         {AL2023_NODECONFIG_INPUT}--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n{AL2023_SHELL_INPUT}--//\n"
    )
}

const BR_INPUT: &str = r#"[settings.kubernetes]
"unknown-setting" = "unknown"
api-server = 'replaceme'
cloud-provider = 'external'
cluster-certificate = "replaceme"
cluster-name = 'replaceme'
max-pods = 9999999999 # replaceme

[settings.kubernetes.eviction-hard]
"memory.available" = "12%"

[settings.kubernetes.labels]
"replace" = "me"

[settings.kubernetes.node-labels]
"custom-node-label" = "custom"
"karpenter.sh/nodepool" = "should-be-overridden"

[settings.kubernetes.node-taints]
"replace" = ["me:Schedule"]

[settings.network]
hostname = "test.local"
https-proxy = "1.2.3.4:8080"
no-proxy = ["localhost", "127.0.0.1"]
hosts = [["10.0.0.0", ["test.example.com", "test1.example.com"]]]

[settings.ntp]
time-servers = ["169.254.169.123"]
"#;

const WINDOWS_INPUT: &str =
    "Write-Host \"Running custom user data script\"\nWrite-Host \"Finished running custom user data script\"\n";

// =============================================================================================================
// AL2 (launchtemplate suite, testdata/al2_*.golden, bootstrap/eksbootstrap.go's flag syntax).
// =============================================================================================================

/// LT-AL2-1..2: the golden without custom user data: one shell part whose `bootstrap.sh` call carries the
/// cluster, endpoint, CA, DNS IP, `--use-max-pods false` and the kubelet's labels, taints and max pods.
#[test]
fn al2_bootstrap_arguments_match_the_unmerged_golden() {
    let doc = render(AmiFamily::Al2, &config(json!({})));
    let al2 = al2_doc(&doc);
    assert_eq!(al2.parts.len(), 1);
    assert_eq!(al2.parts[0].content_type, SHELL);
    assert!(al2.parts[0].body.starts_with("#!/bin/bash -xe\n"), "{}", al2.parts[0].body);
    assert_eq!(al2.cluster, "test-cluster");
    for (flag, value) in [
        ("--apiserver-endpoint", "https://test-cluster"),
        ("--b64-cluster-ca", CA),
        ("--dns-cluster-ip", "10.0.100.10"),
        ("--use-max-pods", "false"),
    ] {
        assert_eq!(al2.args.get(flag).map(String::as_str), Some(value), "{flag}: {:?}", al2.args);
    }
    assert!(!al2.args.contains_key("--ip-family"), "IPv4 cluster: {:?}", al2.args);
    assert_eq!(pairs(&al2.kubelet["--node-labels"], '='), labels());
    assert_eq!(al2.kubelet["--register-with-taints"], "karpenter.sh/unregistered:NoExecute");
    assert_eq!(al2.kubelet["--max-pods"], "110");
}

/// LT-AL2-3..6: the node class `userData` (MIME, MIME with `Content-Type` first, a bare script, none) comes
/// first, unchanged; Karpenter's script is the last part.
#[test]
fn al2_custom_user_data_parts_come_before_karpenters() {
    for (case, user, expected_user_parts) in [
        ("mime", Some(AL2_MIME_INPUT), 1),
        ("content-type first", Some(AL2_MIME_CONTENT_TYPE_FIRST), 1),
        ("plain script", Some(AL2_SHELL_INPUT), 1),
        ("none", None, 0),
    ] {
        let mut c = config(json!({}));
        c.custom_user_data = user.map(str::to_owned);
        let doc = render(AmiFamily::Al2, &c);
        let al2 = al2_doc(&doc);
        assert_eq!(al2.parts.len(), expected_user_parts + 1, "{case}: {doc}");
        if expected_user_parts == 1 {
            assert_eq!(al2.parts[0], Part { content_type: SHELL.into(), body: CUSTOM_SCRIPT.into() }, "{case}");
        }
        assert!(al2.parts.last().unwrap().body.contains("/etc/eks/bootstrap.sh"), "{case}");
        assert_eq!(al2.args["--use-max-pods"], "false", "{case}");
    }
}

/// One kubelet flag case: name, kubelet settings, flag, map separator (`' '` for a scalar flag), expected entries.
type FlagCase = (&'static str, Value, &'static str, char, Vec<(&'static str, &'static str)>);

/// The kubelet flags of AL2 (`--kubelet-extra-args`) and Windows (`-KubeletExtraArgs`), as upstream's
/// `kubeletExtraArgs` writes them: reserved maps and grace periods joined with `=`, eviction thresholds
/// with `<` (LT-AL2-7..14, LT-WIN-3).
fn kubelet_flag_cases() -> Vec<FlagCase> {
    vec![
        ("max pods", json!({"maxPods": 10}), "--max-pods", ' ', vec![("", "10")]),
        ("pods per core", json!({"podsPerCore": 2}), "--pods-per-core", ' ', vec![("", "2")]),
        (
            "system reserved",
            json!({"systemReserved": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"}}),
            "--system-reserved",
            '=',
            vec![("cpu", "500m"), ("ephemeral-storage", "2Gi"), ("memory", "1Gi")],
        ),
        (
            "kube reserved",
            json!({"kubeReserved": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"}}),
            "--kube-reserved",
            '=',
            vec![("cpu", "500m"), ("ephemeral-storage", "2Gi"), ("memory", "1Gi")],
        ),
        (
            "eviction hard",
            json!({"evictionHard": {"memory.available": "10%", "nodefs.available": "15%", "nodefs.inodesFree": "5%"}}),
            "--eviction-hard",
            '<',
            vec![("memory.available", "10%"), ("nodefs.available", "15%"), ("nodefs.inodesFree", "5%")],
        ),
        (
            "eviction soft",
            json!({"evictionSoft": {"memory.available": "10%", "nodefs.available": "15%", "nodefs.inodesFree": "5%"},
                   "evictionSoftGracePeriod": {"memory.available": "1m", "nodefs.available": "180s", "nodefs.inodesFree": "5m"}}),
            "--eviction-soft",
            '<',
            vec![("memory.available", "10%"), ("nodefs.available", "15%"), ("nodefs.inodesFree", "5%")],
        ),
        (
            "eviction max pod grace period",
            json!({"evictionMaxPodGracePeriod": 300}),
            "--eviction-max-pod-grace-period",
            ' ',
            vec![("", "300")],
        ),
        (
            "image GC high",
            json!({"imageGCHighThresholdPercent": 50}),
            "--image-gc-high-threshold",
            ' ',
            vec![("", "50")],
        ),
        ("image GC low", json!({"imageGCLowThresholdPercent": 50}), "--image-gc-low-threshold", ' ', vec![("", "50")]),
        ("CPU CFS quota", json!({"cpuCFSQuota": false}), "--cpu-cfs-quota", ' ', vec![("", "false")]),
    ]
}

fn check_kubelet_flags(family: AmiFamily, flags_of: impl Fn(&str) -> BTreeMap<String, String>) {
    for (case, kc, flag, sep, expected) in kubelet_flag_cases() {
        let doc = render(family, &config(kc));
        let kubelet = flags_of(&doc);
        let value = kubelet.get(flag).unwrap_or_else(|| panic!("{family:?} {case}: no {flag} in {kubelet:?}"));
        if sep == ' ' {
            assert_eq!(value, expected[0].1, "{family:?} {case}");
        } else {
            let want: BTreeMap<String, String> =
                expected.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            assert_eq!(pairs(value, sep), want, "{family:?} {case}: {flag}={value}");
        }
    }
}

/// LT-AL2-7..14 (pending for eviction thresholds: issue 32, `<` separator).
#[test]
fn al2_kubelet_flags_use_upstreams_syntax() {
    check_kubelet_flags(AmiFamily::Al2, |doc| al2_doc(doc).kubelet);
}

/// LT-WIN-3 (pending for eviction thresholds: issue 32, `<` separator).
#[test]
fn windows_kubelet_flags_use_upstreams_syntax() {
    check_kubelet_flags(AmiFamily::Windows2022, |doc| windows_doc(doc).kubelet);
}

/// LT-AL2-12: the soft grace periods are `=`-joined durations (upstream prints `1m0s`, `3m0s`, `5m0s`; equal
/// durations are the same setting).
#[test]
fn al2_soft_eviction_grace_periods_are_durations() {
    let kc = json!({"evictionSoft": {"memory.available": "10%", "nodefs.available": "15%", "nodefs.inodesFree": "5%"},
                    "evictionSoftGracePeriod": {"memory.available": "1m", "nodefs.available": "180s", "nodefs.inodesFree": "5m"}});
    for family in [AmiFamily::Al2, AmiFamily::Windows2022] {
        let doc = render(family, &config(kc.clone()));
        let kubelet = if family == AmiFamily::Al2 { al2_doc(&doc).kubelet } else { windows_doc(&doc).kubelet };
        let grace = pairs(&kubelet["--eviction-soft-grace-period"], '=');
        let secs: BTreeMap<&str, u64> = grace.iter().map(|(k, v)| (k.as_str(), seconds(v))).collect();
        assert_eq!(
            secs,
            BTreeMap::from([("memory.available", 60), ("nodefs.available", 180), ("nodefs.inodesFree", 300)]),
            "{family:?}"
        );
    }
}

/// LT-AL2-15: `instanceStorePolicy: RAID0` adds `--local-disks raid0`.
#[test]
fn al2_raid0_adds_local_disks() {
    let mut c = config(json!({}));
    c.instance_store_raid0 = true;
    assert_eq!(al2_doc(&render(AmiFamily::Al2, &c)).args.get("--local-disks").map(String::as_str), Some("raid0"));
    assert!(!al2_doc(&render(AmiFamily::Al2, &config(json!({})))).args.contains_key("--local-disks"));
}

/// LT-AL2-16 (pending: issue 32): an IPv6 kube-dns address makes `bootstrap.sh` run with `--ip-family ipv6`.
#[test]
fn al2_ipv6_cluster_dns_sets_the_ip_family() {
    let c = config(json!({"clusterDNS": ["fd4b:121b:812b::a"]}));
    let al2 = al2_doc(&render(AmiFamily::Al2, &c));
    assert_eq!(al2.args.get("--ip-family").map(String::as_str), Some("ipv6"), "{:?}", al2.args);
    assert_eq!(al2.args["--dns-cluster-ip"], "fd4b:121b:812b::a");
}

/// LT-AL2-17, deliberately different: upstream drops a field it does not interpret on AL2; we merge it into the
/// AMI's kubelet configuration file before `bootstrap.sh` runs, and it is never a flag.
#[test]
fn al2_passthrough_fields_reach_the_kubelet_config_file_not_the_flags() {
    let doc = render(AmiFamily::Al2, &config(json!({"maxPods": 42, "topologyManagerPolicy": "restricted"})));
    let al2 = al2_doc(&doc);
    assert_eq!(al2.kubelet["--max-pods"], "42");
    assert!(al2.kubelet.keys().all(|k| !k.contains("topology")), "{:?}", al2.kubelet);
    let script = &al2.parts.last().unwrap().body;
    let merged: Value = script
        .lines()
        .find_map(|l| serde_json::from_str::<Value>(l).ok().filter(Value::is_object))
        .expect("the passed-through fields as one JSON line");
    assert_eq!(merged, json!({"topologyManagerPolicy": "restricted"}));
}

// =============================================================================================================
// AL2023 (launchtemplate suite, testdata/al2023_*.golden, bootstrap/nodeadm.go).
// =============================================================================================================

/// LT-AL23-1: the golden without custom user data, as data.
#[test]
fn al2023_node_config_matches_the_unmerged_golden() {
    let doc = render(AmiFamily::Al2023, &config(json!({})));
    let parts = mime(&doc);
    assert_eq!(parts.len(), 1);
    assert_eq!(parts[0].content_type, NODEADM);
    let nc = yaml(&parts[0].body);
    assert_eq!(nc["apiVersion"], "node.eks.aws/v1alpha1");
    assert_eq!(nc["kind"], "NodeConfig");
    assert_eq!(
        nc["spec"]["cluster"],
        json!({"apiServerEndpoint": "https://test-cluster", "certificateAuthority": CA, "cidr": "10.100.0.0/16",
               "name": "test-cluster"})
    );
    let kc = &nc["spec"]["kubelet"]["config"];
    assert_eq!(kc["clusterDNS"], json!(["10.0.100.10"]));
    assert_eq!(kc["maxPods"], json!(110));
    assert_eq!(kc["registerWithTaints"], json!([{"effect": "NoExecute", "key": "karpenter.sh/unregistered"}]));
    let flags = nc["spec"]["kubelet"]["flags"].as_array().expect("kubelet flags");
    assert_eq!(flags.len(), 1);
    let (name, value) = flags[0].as_str().unwrap().split_once('=').unwrap();
    assert_eq!(name, "--node-labels");
    assert_eq!(pairs(strip_quotes(value), '='), labels());
    // Upstream's empty `metadata`, `containerd` and `instance.localStorage` maps are no-ops: absent or empty.
    for empty in [&nc["metadata"], &nc["spec"]["containerd"], &nc["spec"]["instance"]["localStorage"]] {
        assert!(empty.is_null() || empty == &json!({}), "{empty}");
    }
}

/// LT-AL23-2..5: the node class `userData` parts come first, as NodeConfig or shell parts, and Karpenter's
/// NodeConfig is last (nodeadm merges in order, so Karpenter's values win).
#[test]
fn al2023_custom_user_data_parts_come_before_karpenters() {
    let mime_input = al2023_mime_input();
    for (case, user, expected) in [
        ("mime", Some(mime_input.as_str()), vec![NODEADM, SHELL]),
        ("yaml", Some(AL2023_NODECONFIG_INPUT), vec![NODEADM]),
        ("shell", Some(AL2023_SHELL_INPUT), vec![SHELL]),
        ("empty", None, vec![]),
    ] {
        let mut c = config(json!({}));
        c.custom_user_data = user.map(str::to_owned);
        let doc = render(AmiFamily::Al2023, &c);
        let parts = mime(&doc);
        let types: Vec<&str> = parts.iter().map(|p| p.content_type.as_str()).collect();
        let mut want = expected.clone();
        want.push(NODEADM);
        assert_eq!(types, want, "{case}: {doc}");
        for p in &parts[..expected.len()] {
            if p.content_type == NODEADM {
                assert_eq!(yaml(&p.body)["spec"]["kubelet"]["config"]["maxPods"], json!(42), "{case}");
            } else {
                assert_eq!(p.body, AL2023_SHELL_INPUT.trim_end(), "{case}");
            }
        }
        assert_eq!(karpenter_node_config(&doc)["spec"]["kubelet"]["config"]["maxPods"], json!(110), "{case}");
    }
}

/// LT-AL23-6..16: each interpreted kubelet field lands in `spec.kubelet.config` under its kubelet name.
#[test]
fn al2023_kubelet_fields_reach_the_inline_config() {
    let reserved = json!({"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"});
    let thresholds = json!({"memory.available": "10%", "nodefs.available": "15%", "nodefs.inodesFree": "5%"});
    for (field, kc, expected) in [
        ("systemReserved", json!({"systemReserved": reserved}), reserved.clone()),
        ("kubeReserved", json!({"kubeReserved": reserved}), reserved.clone()),
        ("evictionHard", json!({"evictionHard": thresholds}), thresholds.clone()),
        (
            "evictionSoft",
            json!({"evictionSoft": thresholds, "evictionSoftGracePeriod": {"memory.available": "1m"}}),
            thresholds.clone(),
        ),
        ("evictionMaxPodGracePeriod", json!({"evictionMaxPodGracePeriod": 300}), json!(300)),
        ("podsPerCore", json!({"podsPerCore": 2}), json!(2)),
        ("clusterDNS", json!({"clusterDNS": ["10.0.100.0"]}), json!(["10.0.100.0"])),
        ("clusterDNS", json!({"clusterDNS": ["fd4b:121b:812b::a"]}), json!(["fd4b:121b:812b::a"])),
        ("imageGCHighThresholdPercent", json!({"imageGCHighThresholdPercent": 50}), json!(50)),
        ("imageGCLowThresholdPercent", json!({"imageGCLowThresholdPercent": 50}), json!(50)),
        ("cpuCFSQuota", json!({"cpuCFSQuota": false}), json!(false)),
        ("maxPods", json!({"podsPerCore": 2, "maxPods": 100}), json!(100)),
    ] {
        let doc = render(AmiFamily::Al2023, &config(kc));
        assert_eq!(node_configs(&doc).len(), 1, "{field}");
        assert_eq!(karpenter_node_config(&doc)["spec"]["kubelet"]["config"][field], expected, "{field}");
    }
}

/// LT-AL23-10: soft grace periods are durations (upstream prints `1m0s`).
#[test]
fn al2023_soft_eviction_grace_periods_are_durations() {
    let kc = json!({"evictionSoft": {"memory.available": "10%", "nodefs.available": "15%", "nodefs.inodesFree": "5%"},
                    "evictionSoftGracePeriod": {"memory.available": "1m", "nodefs.available": "180s", "nodefs.inodesFree": "5m"}});
    let doc = render(AmiFamily::Al2023, &config(kc));
    let grace = &karpenter_node_config(&doc)["spec"]["kubelet"]["config"]["evictionSoftGracePeriod"];
    let secs: BTreeMap<&str, u64> =
        grace.as_object().unwrap().iter().map(|(k, v)| (k.as_str(), seconds(v.as_str().unwrap()))).collect();
    assert_eq!(secs, BTreeMap::from([("memory.available", 60), ("nodefs.available", 180), ("nodefs.inodesFree", 300)]));
}

/// LT-AL23-17..19: fields Karpenter does not interpret reach the inline config unchanged.
#[test]
fn al2023_passthrough_fields_reach_the_inline_config() {
    for (field, value) in [
        ("topologyManagerPolicy", json!("best-effort")),
        ("serializeImagePulls", json!(false)),
        ("containerLogMaxSize", json!("50Mi")),
    ] {
        let doc = render(AmiFamily::Al2023, &config(json!({ field: value.clone() })));
        assert_eq!(karpenter_node_config(&doc)["spec"]["kubelet"]["config"][field], value, "{field}");
    }
}

/// LT-AL23-20: the claim's taints and the registration taint all go to `registerWithTaints`.
#[test]
fn al2023_register_with_taints_holds_every_taint() {
    let mut c = config(json!({}));
    c.taints = vec![
        Taint::new("test-taint-1", None, TaintEffect::NoSchedule),
        Taint::new("test-taint-2", None, TaintEffect::NoExecute),
        unregistered(),
    ];
    let doc = render(AmiFamily::Al2023, &c);
    let taints = &karpenter_node_config(&doc)["spec"]["kubelet"]["config"]["registerWithTaints"];
    let mut got: Vec<Value> = taints.as_array().unwrap().clone();
    got.sort_by_key(|t| t["key"].as_str().unwrap_or("").to_owned());
    assert_eq!(
        got,
        vec![
            json!({"key": "karpenter.sh/unregistered", "effect": "NoExecute"}),
            json!({"key": "test-taint-1", "effect": "NoSchedule"}),
            json!({"key": "test-taint-2", "effect": "NoExecute"}),
        ]
    );
}

/// LT-AL23-22: RAID0 sets nodeadm's local-storage strategy.
#[test]
fn al2023_raid0_sets_the_local_storage_strategy() {
    let mut c = config(json!({}));
    c.instance_store_raid0 = true;
    let nc = karpenter_node_config(&render(AmiFamily::Al2023, &c));
    assert_eq!(nc["spec"]["instance"]["localStorage"]["strategy"], "RAID0");
}

/// LT-AL23-23 (pending: issue 32): without the service CIDR there is no AL2023 user data.
#[test]
fn al2023_without_a_service_cidr_fails() {
    let mut c = config(json!({}));
    c.service_cidr = None;
    assert!(user_data(AmiFamily::Al2023, &c).is_err(), "AL2023 user data without spec.cluster.cidr");
}

// =============================================================================================================
// Bottlerocket (launchtemplate suite, testdata/br_*.golden, bootstrap/bottlerocket*.go).
// =============================================================================================================

/// LT-BR-1: the golden without custom user data.
#[test]
fn bottlerocket_settings_match_the_unmerged_golden() {
    let mut c = config(json!({}));
    c.taints = vec![
        Taint::new("foo", Some("bar"), TaintEffect::NoExecute),
        Taint::new("baz", Some("bin"), TaintEffect::NoExecute),
        unregistered(),
    ];
    let k = kube_settings(&render(AmiFamily::Bottlerocket, &c));
    let s = |key: &str| k.get(key).and_then(toml::Value::as_str).map(str::to_owned);
    assert_eq!(s("api-server").as_deref(), Some("https://test-cluster"));
    assert_eq!(s("cluster-certificate").as_deref(), Some(CA));
    assert_eq!(s("cluster-name").as_deref(), Some("test-cluster"));
    assert_eq!(s("cluster-dns-ip").as_deref(), Some("10.0.100.10"));
    assert_eq!(k.get("max-pods").and_then(toml::Value::as_integer), Some(110));
    let node_labels: BTreeMap<String, String> =
        k["node-labels"].as_table().unwrap().iter().map(|(a, b)| (a.clone(), b.as_str().unwrap().to_owned())).collect();
    assert_eq!(node_labels, labels());
    let taints: toml::Table = toml::from_str(
        "baz = ['bin:NoExecute']\nfoo = ['bar:NoExecute']\n'karpenter.sh/unregistered' = [':NoExecute']",
    )
    .unwrap();
    assert_eq!(k["node-taints"].as_table(), Some(&taints));
}

/// LT-BR-2 (pending: issue 32): the merged golden. Unknown `settings.kubernetes` keys are dropped, known ones
/// kept unless Karpenter sets them, node labels merge (Karpenter wins), node taints are Karpenter's only, and
/// every other settings table survives untouched.
#[test]
fn bottlerocket_merges_user_settings_like_the_merged_golden() {
    let mut c = with_user(config(json!({})), BR_INPUT);
    c.taints = vec![
        Taint::new("foo", Some("bar"), TaintEffect::NoExecute),
        Taint::new("baz", Some("bin"), TaintEffect::NoExecute),
        unregistered(),
    ];
    let doc = toml_doc(&render(AmiFamily::Bottlerocket, &c));
    let expected: toml::Table = toml::from_str(
        r#"
[settings.kubernetes]
api-server = 'https://test-cluster'
cloud-provider = 'external'
cluster-certificate = 'Y2EtYnVuZGxlCg=='
cluster-name = 'test-cluster'
cluster-dns-ip = '10.0.100.10'
max-pods = 110

[settings.kubernetes.node-labels]
custom-node-label = 'custom'
'karpenter.k8s.aws/ec2nodeclass' = 'default'
'karpenter.sh/capacity-type' = 'on-demand'
'karpenter.sh/do-not-sync-taints' = 'true'
'karpenter.sh/nodepool' = 'default'
'testing/cluster' = 'unspecified'

[settings.kubernetes.node-taints]
baz = ['bin:NoExecute']
foo = ['bar:NoExecute']
'karpenter.sh/unregistered' = [':NoExecute']

[settings.kubernetes.eviction-hard]
'memory.available' = '12%'

[settings.network]
hostname = 'test.local'
hosts = [['10.0.0.0', ['test.example.com', 'test1.example.com']]]
https-proxy = '1.2.3.4:8080'
no-proxy = ['localhost', '127.0.0.1']

[settings.ntp]
time-servers = ['169.254.169.123']
"#,
    )
    .unwrap();
    assert_eq!(doc, expected);
}

/// LT-BR-4: user data that is not TOML fails (no launch template).
#[test]
fn bottlerocket_rejects_user_data_that_is_not_toml() {
    let c = with_user(config(json!({})), "#/bin/bash\n ./not-toml.sh");
    assert!(user_data(AmiFamily::Bottlerocket, &c).is_err());
}

/// LT-BR-5..15: kubelet settings as Bottlerocket's `settings.kubernetes` keys and types (image GC thresholds
/// are strings, the DNS IP one string; pending: issue 32 for those two).
#[test]
fn bottlerocket_kubelet_settings_use_upstreams_keys_and_types() {
    let reserved = json!({"cpu": "2", "memory": "3Gi", "ephemeral-storage": "10Gi"});
    let table = |s: &str| toml::Value::Table(toml::from_str(s).unwrap());
    for (case, kc, key, expected) in [
        (
            "system reserved",
            json!({"systemReserved": reserved}),
            "system-reserved",
            table("cpu = '2'\nmemory = '3Gi'\nephemeral-storage = '10Gi'"),
        ),
        (
            "kube reserved",
            json!({"kubeReserved": reserved}),
            "kube-reserved",
            table("cpu = '2'\nmemory = '3Gi'\nephemeral-storage = '10Gi'"),
        ),
        (
            "eviction hard",
            json!({"evictionHard": {"memory.available": "10%", "nodefs.available": "15%", "nodefs.inodesFree": "5%"}}),
            "eviction-hard",
            table("'memory.available' = '10%'\n'nodefs.available' = '15%'\n'nodefs.inodesFree' = '5%'"),
        ),
        (
            "eviction soft",
            json!({"evictionSoft": {"memory.available": "10%"}, "evictionSoftGracePeriod": {"memory.available": "1m"}}),
            "eviction-soft",
            table("'memory.available' = '10%'"),
        ),
        ("max pods", json!({"maxPods": 10}), "max-pods", toml::Value::Integer(10)),
        (
            "max pod grace period",
            json!({"maxPods": 35, "evictionMaxPodGracePeriod": 10}),
            "eviction-max-pod-grace-period",
            toml::Value::Integer(10),
        ),
        (
            "image GC high",
            json!({"imageGCHighThresholdPercent": 50}),
            "image-gc-high-threshold-percent",
            toml::Value::String("50".into()),
        ),
        (
            "image GC low",
            json!({"imageGCLowThresholdPercent": 50}),
            "image-gc-low-threshold-percent",
            toml::Value::String("50".into()),
        ),
        ("cluster DNS", json!({}), "cluster-dns-ip", toml::Value::String("10.0.100.10".into())),
        // Deliberately different (docs/upstream-aws-expectations.md): upstream keeps only the first IP; Bottlerocket's
        // model takes a list, as AL2023's clusterDNS does, so both servers reach the node.
        (
            "cluster DNS, two IPs",
            json!({"clusterDNS": ["10.0.100.10", "10.0.100.11"]}),
            "cluster-dns-ip",
            toml::Value::Array(vec![
                toml::Value::String("10.0.100.10".into()),
                toml::Value::String("10.0.100.11".into()),
            ]),
        ),
        ("CPU CFS quota", json!({"cpuCFSQuota": false}), "cpu-cfs-quota-enforced", toml::Value::Boolean(false)),
    ] {
        let k = kube_settings(&render(AmiFamily::Bottlerocket, &config(kc)));
        assert_eq!(k.get(key), Some(&expected), "{case}: {k}");
    }
    let k = kube_settings(&render(
        AmiFamily::Bottlerocket,
        &config(
            json!({"evictionSoft": {"memory.available": "10%"}, "evictionSoftGracePeriod": {"memory.available": "1m"}}),
        ),
    ));
    let grace = k["eviction-soft-grace-period"]["memory.available"].as_str().unwrap();
    assert_eq!(seconds(grace), 60, "LT-BR-7: grace period {grace}");
}

/// LT-BR-16..17: labels reach `node-labels`.
#[test]
fn bottlerocket_labels_reach_node_labels() {
    let mut c = config(json!({}));
    c.labels.insert("test-label-1".into(), "value-1".into());
    c.labels.insert("test-label-2".into(), "value-2".into());
    let k = kube_settings(&render(AmiFamily::Bottlerocket, &c));
    for (key, value) in [("test-label-1", "value-1"), ("test-label-2", "value-2")] {
        assert_eq!(k["node-labels"][key].as_str(), Some(value));
    }
}

fn bootstrap_commands(doc: &str) -> toml::Table {
    toml_doc(doc)["settings"].get("bootstrap-commands").and_then(toml::Value::as_table).cloned().unwrap_or_default()
}

/// The instance-storage command Karpenter adds for RAID0 (the explicit-directories form, valid on every
/// Bottlerocket version: upstream uses it when the AMI version is unknown or older than 1.46).
fn mount_instance_storage() -> toml::Value {
    toml::Value::Table(
        toml::from_str(
            "commands = [['apiclient', 'ephemeral-storage', 'init'], ['apiclient', 'ephemeral-storage', 'bind', \
             '--dirs', '/var/lib/containerd', '/var/lib/kubelet', '/var/log/pods']]\nmode = 'always'\nessential = true",
        )
        .unwrap(),
    )
}

/// LT-BR-18, LT-BR-20 (pending: issue 32): RAID0 adds `bootstrap-commands."000-mount-instance-storage"`.
#[test]
fn bottlerocket_raid0_adds_the_instance_storage_bootstrap_command() {
    let mut c = config(json!({}));
    c.instance_store_raid0 = true;
    let commands = bootstrap_commands(&render(AmiFamily::Bottlerocket, &c));
    assert_eq!(commands.get("000-mount-instance-storage"), Some(&mount_instance_storage()), "{commands}");
    assert!(bootstrap_commands(&render(AmiFamily::Bottlerocket, &config(json!({})))).is_empty());
}

/// LT-BR-19 (pending: issue 32): the user's bootstrap commands are kept next to Karpenter's.
#[test]
fn bottlerocket_raid0_keeps_the_users_bootstrap_commands() {
    let user = "[settings.bootstrap-commands.111-say-hello]\ncommands = [['echo', 'hello']]\nmode = 'always'\nessential = true\n";
    let mut c = with_user(config(json!({})), user);
    c.instance_store_raid0 = true;
    let commands = bootstrap_commands(&render(AmiFamily::Bottlerocket, &c));
    let hello: toml::Table =
        toml::from_str("commands = [['echo', 'hello']]\nmode = 'always'\nessential = true").unwrap();
    assert_eq!(commands.get("111-say-hello").and_then(toml::Value::as_table), Some(&hello));
    assert_eq!(commands.get("000-mount-instance-storage"), Some(&mount_instance_storage()));
}

/// BR-SET-2..5 (bootstrap/bottlerocket_test.go): `memory-manager-policy` and `memory-manager-reserved-memory`
/// (per NUMA node, with hugepages) are settings Bottlerocket knows; they survive the merge.
#[test]
fn bottlerocket_keeps_memory_manager_settings() {
    let user = "[settings.kubernetes]\n\"memory-manager-policy\" = \"Static\"\n\n\
                [settings.kubernetes.memory-manager-reserved-memory.0]\nenabled = true\nmemory = \"400Mi\"\n\
                hugepages-2Mi = \"64Mi\"\nhugepages-1Gi = \"2Gi\"\n\n\
                [settings.kubernetes.memory-manager-reserved-memory.1]\nenabled = true\nmemory = \"327Mi\"\n";
    let k = kube_settings(&render(AmiFamily::Bottlerocket, &with_user(config(json!({})), user)));
    assert_eq!(k["memory-manager-policy"].as_str(), Some("Static"));
    let reserved: toml::Table = toml::from_str(
        "[0]\nenabled = true\nmemory = '400Mi'\nhugepages-2Mi = '64Mi'\nhugepages-1Gi = '2Gi'\n[1]\nenabled = true\nmemory = '327Mi'",
    )
    .unwrap();
    assert_eq!(k["memory-manager-reserved-memory"].as_table(), Some(&reserved));
}

// =============================================================================================================
// Windows and Custom (launchtemplate suite, testdata/windows_*.golden).
// =============================================================================================================

/// LT-WIN-1..2: one `<powershell>` block, the user's script first, then `Start-EKSBootstrap.ps1` with the
/// cluster, endpoint, CA, kubelet flags and DNS IP.
#[test]
fn windows_bootstrap_matches_the_goldens() {
    for (case, user) in [("merged", Some(WINDOWS_INPUT)), ("unmerged", None)] {
        let mut c = config(json!({}));
        c.labels.insert("karpenter.sh/capacity-type".into(), "spot".into());
        c.custom_user_data = user.map(str::to_owned);
        let w = windows_doc(&render(AmiFamily::Windows2022, &c));
        let want_user: Vec<String> = user.map(|u| u.lines().map(str::to_owned).collect()).unwrap_or_default();
        assert_eq!(w.user_lines, want_user, "{case}");
        for (name, value) in [
            ("-EKSClusterName", "test-cluster"),
            ("-APIServerEndpoint", "https://test-cluster"),
            ("-Base64ClusterCA", CA),
            ("-DNSClusterIP", "10.0.100.10"),
        ] {
            assert_eq!(w.args.get(name).map(String::as_str), Some(value), "{case} {name}: {:?}", w.args);
        }
        let mut want_labels = labels();
        want_labels.insert("karpenter.sh/capacity-type".into(), "spot".into());
        assert_eq!(pairs(&w.kubelet["--node-labels"], '='), want_labels, "{case}");
        assert_eq!(w.kubelet["--register-with-taints"], "karpenter.sh/unregistered:NoExecute", "{case}");
        assert_eq!(w.kubelet["--max-pods"], "110", "{case}");
    }
}

/// LT-CUS-2: a Custom family's `userData` is the launch template's, byte for byte.
#[test]
fn custom_family_user_data_is_copied_untouched() {
    let c = with_user(config(json!({})), "special user data");
    assert_eq!(render(AmiFamily::Custom, &c), "special user data");
}

// =============================================================================================================
// MIME (bootstrap/mime suite and test_data).
// =============================================================================================================

const NODECONFIG_TXT: &str = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    name: test-cluster\n    \
apiServerEndpoint: https://example.com\n    certificateAuthority: ca-bundle\n    cidr: 10.100.0.0/16\n  kubelet:\n    config:\n      \
maxPods: 42\n      systemReserved:\n        cpu: 100m\n        memory: 100Mi\n        ephemeral-storage: 1Gi\n    flags:\n      \
- --node-labels \"foo=bar\"\n  containerd:\n    config: |\n      [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n      \
discard_unpacked_layers = false";
const SHELL_TXT: &str = "#!/bin/bash\necho \"I'm a shell script!\"";

fn mime_valid() -> String {
    format!(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"\n\n--//\nContent-Type: application/node.eks.aws\n\n\
         {NODECONFIG_TXT}\n\n--//\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n{SHELL_TXT}\n\n--//--\n"
    )
}

/// MIME-1: a document whose headers are not MIME headers is refused.
#[test]
fn mime_with_a_malformed_header_is_refused() {
    let bad = mime_valid().replacen(
        "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//\"",
        "MIME_VERSION = 1.0\nCONTENT_TYPE = MIME",
        1,
    );
    assert!(parse_mime(&bad).is_err());
}

/// MIME-2: a valid archive splits into its NodeConfig and shell parts with their contents.
#[test]
fn mime_valid_archive_splits_into_its_parts() {
    let parts = parse_mime(&mime_valid()).expect("valid MIME");
    let got: Vec<(String, String)> =
        parts.iter().map(|p| (p.content_type.clone(), p.body.trim_end().to_owned())).collect();
    assert_eq!(got, vec![(NODEADM.to_owned(), NODECONFIG_TXT.to_owned()), (SHELL.to_owned(), SHELL_TXT.to_owned())]);
    let nc = yaml(&parts[0].body);
    assert_eq!(
        nc["spec"]["kubelet"]["config"]["systemReserved"],
        json!({"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi"})
    );
    assert_eq!(nc["spec"]["kubelet"]["flags"], json!(["--node-labels \"foo=bar\""]));
}

/// MIME-3: writing the two parts gives an archive that reads back as the same parts, with our boundary `//`.
#[test]
fn mime_written_archive_reads_back() {
    let parts = vec![
        MimePart { content_type: NODEADM.into(), body: NODECONFIG_TXT.into() },
        MimePart { content_type: SHELL.into(), body: SHELL_TXT.into() },
    ];
    let doc = write_mime(&parts);
    assert!(doc.contains("boundary=\"//\""), "{doc}");
    let read = mime(&doc);
    assert_eq!(
        read,
        vec![
            Part { content_type: NODEADM.into(), body: NODECONFIG_TXT.into() },
            Part { content_type: SHELL.into(), body: SHELL_TXT.into() }
        ]
    );
    assert_eq!(mime(&doc), mime(&mime_valid()), "the same archive as upstream's test data");
}

/// MIME-4 (pending: issue 32): like Go's reader, a document without its closing delimiter is accepted.
#[test]
fn mime_without_the_closing_delimiter_is_accepted() {
    let open = mime_valid().replace("\n--//--\n", "\n");
    let parts = parse_mime(&open).expect("MIME without closing delimiter");
    assert_eq!(parts.len(), 2);
    let c = with_user(config(json!({})), &open);
    let doc = render(AmiFamily::Al2023, &c);
    assert_eq!(mime(&doc).len(), 3, "{doc}");
}

// =============================================================================================================
// Launch templates, end to end over the mock EC2 (launchtemplate and amifamily suites).
// =============================================================================================================

struct Env {
    ec2: MockEc2,
    provider: AwsCloudProvider,
}

const ZONES: [&str; 2] = ["us-west-2a", "us-west-2b"];

fn cluster() -> ClusterInfo {
    ClusterInfo {
        name: "test-cluster".into(),
        endpoint: "https://test-cluster".into(),
        ca_bundle: Some(CA.into()),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: Some("10.0.100.10".into()),
    }
}

fn catalogue() -> Vec<InstanceTypeInfo> {
    vec![instance_type_info("m5.large", 2, 8), instance_type_info("m5.xlarge", 4, 16)]
}

/// A provider over the mock EC2 with the provider tests' node class, `spec` laid over its spec.
fn env(region: &str, cluster: ClusterInfo, spec: Value) -> Env {
    let clock = FakeClock::default();
    let ec2 = MockEc2::new(Arc::new(clock.clone()));
    let infos = catalogue();
    let mut prices = PriceTable::default();
    for (i, info) in infos.iter().enumerate() {
        prices.on_demand.insert(info.instance_type.clone(), 0.1 + 0.01 * i as f64);
        let spot = ZONES.iter().map(|z| ((*z).to_owned(), 0.05 + 0.01 * i as f64)).collect();
        prices.spot.insert(info.instance_type.clone(), spot);
    }
    ec2.set_catalogue(infos, &ZONES);
    let mut class = crate::provider::tests::class_json("True");
    if let (Some(s), Some(extra)) = (class["spec"].as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    let classes = InMemoryNodeClasses::new();
    classes.insert_value(GROUP, KIND, "default", class);
    let provider = AwsCloudProvider::new(
        ec2.apis(),
        Arc::new(classes),
        Arc::new(clock.clone()),
        Arc::new(clock.clone()),
        SharedPrices::new(PriceSource::Table(prices)),
        AwsCloudProviderOptions::new(cluster, region),
    );
    Env { ec2, provider }
}

fn claim(os: &str, capacity_type: &str, labels: &[(&str, &str)]) -> NodeClaim {
    node_claim(NodeClaimOptions {
        name: Some("claim".into()),
        node_pool: Some("default".into()),
        labels: labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        requirements: vec![
            nodepool_requirement(OS, "In", &[os]),
            nodepool_requirement(NODE_POOL, "In", &["default"]),
            nodepool_requirement(CAPACITY_TYPE, "In", &[capacity_type]),
            nodepool_requirement("kubernetes.io/arch", "In", &["amd64"]),
        ],
        requests: [("cpu", "1")].as_slice().into(),
        node_class_ref: Some(NodeClassReference::new(GROUP, KIND, "default")),
        ..Default::default()
    })
}

/// Launches one claim and returns the launch templates created for it (as JSON, so the tests read fields by
/// their EC2 meaning whatever their Rust types).
async fn launch(e: &Env, claim: &NodeClaim) -> Result<Vec<Value>, String> {
    e.provider.create(claim).await.map_err(|err| err.to_string())?;
    Ok(templates(e))
}

fn templates(e: &Env) -> Vec<Value> {
    e.ec2.launch_templates().iter().map(|t: &LaunchTemplate| serde_json::to_value(&t.data).unwrap()).collect()
}

async fn launch_default(spec: Value) -> Vec<Value> {
    let e = env("us-west-2", cluster(), spec);
    let lts = launch(&e, &claim("linux", "on-demand", &[])).await.expect("launch");
    assert!(!lts.is_empty());
    lts
}

/// LT-META-1..2, IT-META-1: default metadata options (and instance metadata tags always off).
#[tokio::test(start_paused = true)]
async fn lt_metadata_options_default_like_upstream() {
    for lt in launch_default(json!({})).await {
        assert_eq!(
            lt["metadata_options"],
            json!({"http_endpoint": "enabled", "http_protocol_ipv6": "disabled", "http_put_response_hop_limit": 1,
                   "http_tokens": "required", "instance_metadata_tags": "disabled"})
        );
    }
}

/// IT-META-2: the node class's metadata options are used as given.
#[tokio::test(start_paused = true)]
async fn lt_metadata_options_follow_the_node_class() {
    let spec = json!({"metadataOptions": {"httpEndpoint": "disabled", "httpProtocolIPv6": "enabled",
                                          "httpPutResponseHopLimit": 1, "httpTokens": "optional"}});
    for lt in launch_default(spec).await {
        let m = &lt["metadata_options"];
        assert_eq!(
            (m["http_endpoint"].as_str(), m["http_protocol_ipv6"].as_str()),
            (Some("disabled"), Some("enabled"))
        );
        assert_eq!((m["http_put_response_hop_limit"].as_i64(), m["http_tokens"].as_str()), (Some(1), Some("optional")));
    }
}

/// AF-META-1..4 (pending: issue 32): the ISO partitions' regions leave `HttpProtocolIpv6` out.
#[tokio::test(start_paused = true)]
async fn lt_iso_regions_leave_http_protocol_ipv6_out() {
    for (region, expected) in [
        ("us-west-2", json!("disabled")),
        ("us-iso-east-1", Value::Null),
        ("us-iso-west-1", Value::Null),
        ("us-isob-east-1", Value::Null),
        ("us-isob-west-1", Value::Null),
        ("us-isof-south-1", Value::Null),
        ("us-isof-east-1", Value::Null),
    ] {
        let e = env(region, cluster(), json!({}));
        let lts = launch(&e, &claim("linux", "on-demand", &[])).await.expect(region);
        for lt in lts {
            assert_eq!(lt["metadata_options"]["http_protocol_ipv6"], expected, "{region}");
            assert_eq!(lt["metadata_options"]["http_tokens"], "required", "{region}");
        }
    }
}

fn device(name: &str, gib: u64, volume_type: &str) -> Value {
    json!({"device_name": name, "volume_size_gib": gib, "volume_type": volume_type, "encrypted": true})
}

fn devices_summary(lt: &Value) -> Vec<Value> {
    lt["block_device_mappings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            json!({"device_name": d["device_name"], "volume_size_gib": d["volume_size_gib"],
                   "volume_type": d["volume_type"], "encrypted": d["encrypted"]})
        })
        .collect()
}

/// LT-BDM-1..3, LT-BDM-6, LT-DEF-1: the families' default volumes (gp3, encrypted, no IOPS): AL2 and AL2023
/// one 20 GiB root, Bottlerocket a 4 GiB root and a 20 GiB data volume, Custom none; Windows a 50 GiB root.
#[tokio::test(start_paused = true)]
async fn lt_block_devices_default_per_family() {
    for (case, spec, expected) in [
        ("al2", json!({"amiSelectorTerms": [{"alias": "al2@latest"}]}), vec![device("/dev/xvda", 20, "gp3")]),
        ("al2023", json!({"amiSelectorTerms": [{"alias": "al2023@latest"}]}), vec![device("/dev/xvda", 20, "gp3")]),
        (
            "bottlerocket",
            json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]}),
            vec![device("/dev/xvda", 4, "gp3"), device("/dev/xvdb", 20, "gp3")],
        ),
        ("custom", json!({"amiFamily": "Custom", "amiSelectorTerms": [{"tags": {"*": "*"}}]}), vec![]),
    ] {
        for lt in launch_default(spec).await {
            assert_eq!(devices_summary(&lt), expected, "{case}");
            for d in lt["block_device_mappings"].as_array().unwrap() {
                assert!(d["iops"].is_null(), "{case}: no IOPS by default");
            }
        }
    }
    let windows = default_block_devices(AmiFamily::Windows2022);
    let windows: Vec<Value> = windows
        .iter()
        .map(|d| {
            json!({"device_name": d.device_name, "volume_size_gib": d.volume_size_gib,
                        "volume_type": d.volume_type, "encrypted": d.encrypted})
        })
        .collect();
    assert_eq!(windows, vec![device("/dev/sda1", 50, "gp3")]);
}

/// LT-BDM-4..5, LT-BDM-7, IT-EPH-1..4: the node class's volumes are used as given, sizes in GiB rounded up
/// (200G is 187 GiB, 4G 4, 2G 2), and a volume without a size keeps its snapshot and initialization rate.
#[tokio::test(start_paused = true)]
async fn lt_custom_block_devices_round_up_to_whole_gib() {
    let kms = "arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab";
    let ebs = |size: &str| {
        json!({"deleteOnTermination": true, "encrypted": true, "volumeType": "io2",
                                  "volumeSize": size, "iops": 10000, "kmsKeyID": kms})
    };
    for (case, family, sizes, expected) in [
        ("200G/200Gi", json!({}), ["200G", "200Gi"], [187, 200]),
        ("4G/2G", json!({}), ["4G", "2G"], [4, 2]),
        (
            "custom family",
            json!({"amiFamily": "Custom", "amiSelectorTerms": [{"tags": {"*": "*"}}]}),
            ["40Gi", "2G"],
            [40, 2],
        ),
    ] {
        let mut spec = json!({"blockDeviceMappings": [
            {"deviceName": "/dev/xvda", "ebs": ebs(sizes[0])},
            {"deviceName": "/dev/xvdb", "ebs": ebs(sizes[1])}
        ]});
        if let (Some(s), Some(f)) = (spec.as_object_mut(), family.as_object()) {
            s.extend(f.clone());
        }
        for lt in launch_default(spec).await {
            let d = lt["block_device_mappings"].as_array().unwrap();
            assert_eq!(d.len(), 2, "{case}");
            for (i, want) in expected.iter().enumerate() {
                assert_eq!(d[i]["volume_size_gib"], json!(want), "{case} #{i}");
                assert_eq!(d[i]["volume_type"], "io2", "{case}");
                assert_eq!(d[i]["iops"], json!(10000), "{case}");
                assert_eq!(d[i]["kms_key_id"], kms, "{case}");
                assert_eq!(
                    (d[i]["encrypted"].as_bool(), d[i]["delete_on_termination"].as_bool()),
                    (Some(true), Some(true))
                );
            }
        }
    }
    let spec = json!({"blockDeviceMappings": [{"deviceName": "/dev/xvda",
                      "ebs": {"snapshotID": "snap-xxxxxxxx", "volumeInitializationRate": 100}}]});
    for lt in launch_default(spec).await {
        let d = &lt["block_device_mappings"][0];
        assert_eq!(
            (d["snapshot_id"].as_str(), d["volume_initialization_rate"].as_i64()),
            (Some("snap-xxxxxxxx"), Some(100))
        );
    }
}

/// LT-MON-1..2: detailed monitoring is off unless the node class turns it on.
#[tokio::test(start_paused = true)]
async fn lt_detailed_monitoring_follows_the_node_class() {
    for (spec, expected) in [(json!({}), false), (json!({"detailedMonitoring": true}), true)] {
        for lt in launch_default(spec).await {
            assert_eq!(lt["detailed_monitoring"], json!(expected));
        }
    }
}

/// LT-GEN-3: the instance profile is the node class status's.
#[tokio::test(start_paused = true)]
async fn lt_instance_profile_is_the_node_class_status_one() {
    for lt in launch_default(json!({})).await {
        assert_eq!(lt["instance_profile"], "profile-1");
    }
}

/// LT-TAG-2: the node class tags go to the network interfaces, and to the spot request for spot launches.
#[tokio::test(start_paused = true)]
async fn lt_tags_reach_network_interfaces_and_spot_requests() {
    for (capacity_type, spot) in [("spot", true), ("on-demand", false)] {
        let e = env("us-west-2", cluster(), json!({"tags": {"tag1": "tag1value", "tag2": "tag2value"}}));
        let mut c = claim("linux", capacity_type, &[]);
        c.metadata.name = Some(format!("claim-{capacity_type}"));
        let lts = launch(&e, &c).await.expect(capacity_type);
        for lt in lts {
            assert_eq!(lt["resource_tags"]["tag1"], "tag1value", "{capacity_type}");
            assert_eq!(lt["resource_tags"]["tag2"], "tag2value", "{capacity_type}");
            assert_eq!(lt["tag_spot_requests"], json!(spot), "{capacity_type}");
        }
    }
}

fn user_data_of(lt: &Value) -> String {
    lt["user_data"].as_str().expect("user data").to_owned()
}

/// Labels and their keys as the user data of one family carries them.
fn user_data_labels(family: &str, doc: &str) -> BTreeMap<String, String> {
    match family {
        "al2" => pairs(&al2_doc(doc).kubelet["--node-labels"], '='),
        "al2023" => {
            let nc = karpenter_node_config(doc);
            let flag = nc["spec"]["kubelet"]["flags"][0].as_str().unwrap_or("").to_owned();
            let value = flag.split_once('=').map_or("", |(_, v)| v);
            pairs(strip_quotes(value), '=')
        }
        "bottlerocket" => kube_settings(doc)["node-labels"]
            .as_table()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect(),
        _ => unreachable!(),
    }
}

/// LT-UD-12 (pending: issue 32 for everything but node-restriction.kubernetes.io): labels in the domains
/// kubelet may not set (`kubernetes.io`, `k8s.io`, `node-restriction.kubernetes.io`, and their subdomains) are
/// left out of the user data of every family; other labels and `karpenter.sh/do-not-sync-taints` stay (LT-GEN-1).
#[tokio::test(start_paused = true)]
async fn lt_restricted_label_domains_stay_out_of_user_data() {
    let restricted = [
        "node-restriction.kubernetes.io/bar",
        "kubernetes.io/bar",
        "k8s.io/bar",
        "foo.node-restriction.kubernetes.io/bar",
        "foo.kubernetes.io/bar",
        "foo.k8s.io/bar",
    ];
    let mut claim_labels: Vec<(&str, &str)> = restricted.iter().map(|l| (*l, "foobar")).collect();
    claim_labels.push(("test-label-1", "value-1"));
    for (family, alias) in [("al2", "al2@latest"), ("al2023", "al2023@latest"), ("bottlerocket", "bottlerocket@latest")]
    {
        let e = env("us-west-2", cluster(), json!({"amiSelectorTerms": [{"alias": alias}]}));
        let lts = launch(&e, &claim("linux", "on-demand", &claim_labels)).await.expect(family);
        for lt in lts {
            let doc = user_data_of(&lt);
            for l in restricted {
                assert!(!doc.contains(l), "{family}: {l} in\n{doc}");
            }
            let got = user_data_labels(family, &doc);
            assert_eq!(got.get("test-label-1").map(String::as_str), Some("value-1"), "{family}: {got:?}");
            assert_eq!(got.get("karpenter.sh/do-not-sync-taints").map(String::as_str), Some("true"), "{family}");
        }
    }
}

/// LT-UD-3, LT-AL23-21: `maxPods` reaches the node as a concrete count (the ENI-limited 29 of the catalogue's
/// 3 ENIs × 10 addresses) when the node class sets none, and AL2 always says `--use-max-pods false`.
#[tokio::test(start_paused = true)]
async fn lt_max_pods_is_concrete_when_unset() {
    for lt in launch_default(json!({"amiSelectorTerms": [{"alias": "al2023@latest"}]})).await {
        let nc = karpenter_node_config(&user_data_of(&lt));
        assert_eq!(nc["spec"]["kubelet"]["config"]["maxPods"], json!(29));
    }
    for lt in launch_default(json!({"amiSelectorTerms": [{"alias": "al2@latest"}]})).await {
        let al2 = al2_doc(&user_data_of(&lt));
        assert_eq!(al2.args["--use-max-pods"], "false");
        assert_eq!(al2.kubelet["--max-pods"], "29");
    }
}

/// LT-AL23-23 (pending: issue 32): with the service CIDR unresolved no AL2023 launch template is created.
#[tokio::test(start_paused = true)]
async fn lt_al2023_without_a_service_cidr_creates_no_template() {
    let mut c = cluster();
    c.service_cidr = None;
    let e = env("us-west-2", c, json!({"amiSelectorTerms": [{"alias": "al2023@latest"}]}));
    let result = launch(&e, &claim("linux", "on-demand", &[])).await;
    assert!(result.is_err(), "launched: {result:?}");
    assert!(templates(&e).is_empty());
}

/// CPU-1..4: nested virtualization only when the node class enables it.
#[tokio::test(start_paused = true)]
async fn lt_cpu_options_follow_the_node_class() {
    for (spec, expected) in [
        (json!({}), false),
        (json!({"cpuOptions": {}}), false),
        (json!({"cpuOptions": {"nestedVirtualization": "enabled"}}), true),
        (json!({"cpuOptions": {"nestedVirtualization": "disabled"}}), false),
    ] {
        for lt in launch_default(spec.clone()).await {
            assert_eq!(lt["nested_virtualization"], json!(expected), "{spec}");
        }
    }
}

/// LT-NET-1: the cluster is IPv6 when its kube-dns address is.
#[test]
fn lt_ip_family_follows_the_dns_address() {
    for (dns, ipv6) in [("10.0.100.10", false), ("fd01:99f0:d47b::a", true)] {
        let c = ClusterInfo { dns_ip: Some(dns.into()), ..cluster() };
        assert_eq!(c.is_ipv6(), ipv6, "{dns}");
    }
}

fn node_class(spec: Value) -> EC2NodeClass {
    let mut class = crate::provider::tests::class_json("True");
    if let (Some(s), Some(extra)) = (class["spec"].as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    serde_json::from_value(class).expect("node class")
}

fn interfaces(spec: Value, ipv6: bool, efa: i64) -> Vec<Value> {
    let groups = vec!["sg-1".to_owned()];
    network_interfaces(&node_class(spec), &groups, ipv6, efa).iter().map(|n| serde_json::to_value(n).unwrap()).collect()
}

/// LT-PUB-1..4: `associatePublicIPAddress` is set on the primary interface, with or without EFA.
#[test]
fn lt_public_ip_association_follows_the_node_class() {
    for (value, efa) in [(true, 0), (false, 0), (true, 2), (false, 2)] {
        let nis = interfaces(json!({"associatePublicIPAddress": value}), false, efa);
        assert_eq!(nis[0]["associate_public_ip_address"], json!(value), "{value} efa={efa}");
    }
}

/// LT-PFX-1..8: `ipPrefixCount` is the IPv4 prefix count of IPv4 clusters and the IPv6 one of IPv6 clusters.
#[test]
fn lt_prefix_counts_follow_the_cluster_ip_family() {
    for count in [0, 1, 10, 100] {
        let v4 = interfaces(json!({"ipPrefixCount": count}), false, 0);
        assert_eq!((v4[0]["ipv4_prefix_count"].as_i64(), v4[0]["ipv6_prefix_count"].as_i64()), (Some(count), None));
        let v6 = interfaces(json!({"ipPrefixCount": count}), true, 0);
        assert_eq!((v6[0]["ipv4_prefix_count"].as_i64(), v6[0]["ipv6_prefix_count"].as_i64()), (None, Some(count)));
    }
}

/// LT-V6-1..4: in an IPv6 cluster the primary interface gets one IPv6 address as its primary IPv6, whether or
/// not a public IP is asked for and with EFA too; the public IP is left unset when not asked for.
#[test]
fn lt_ipv6_clusters_get_a_primary_ipv6_address() {
    for (public, efa) in [(None, 0), (None, 2), (Some(true), 2), (Some(false), 0)] {
        let spec = public.map_or(json!({}), |p| json!({"associatePublicIPAddress": p}));
        let nis = interfaces(spec, true, efa);
        assert!(!nis.is_empty());
        assert_eq!((nis[0]["ipv6_address_count"].as_i64(), nis[0]["primary_ipv6"].as_bool()), (Some(1), Some(true)));
        assert_eq!(nis[0]["associate_public_ip_address"], public.map_or(Value::Null, Value::Bool));
        if efa > 0 {
            assert_eq!(nis[0]["interface_type"], "efa");
        }
    }
}

fn tracking(v: Value) -> Value {
    json!({"tcp_established_timeout": v["tcpEstablishedTimeout"], "udp_stream_timeout": v["udpStreamTimeout"],
           "udp_timeout": v["udpTimeout"]})
}

/// LT-CT-1..3: connection tracking on the (primary) interface as the node class gives it.
#[test]
fn lt_connection_tracking_follows_the_node_class() {
    for ct in [
        None,
        Some(json!({"tcpEstablishedTimeout": 432000, "udpStreamTimeout": 180, "udpTimeout": 30})),
        Some(json!({"tcpEstablishedTimeout": 86400})),
    ] {
        let spec = ct.clone().map_or(json!({"associatePublicIPAddress": false}), |c| json!({"connectionTracking": c}));
        let nis = interfaces(spec, false, 0);
        assert_eq!(nis[0]["connection_tracking"], ct.map_or(Value::Null, tracking));
    }
}

const CT: &str = r#"{"tcpEstablishedTimeout": 86400, "udpStreamTimeout": 120, "udpTimeout": 45}"#;

/// LT-CT-4 (difference found, see the doc): connection tracking is set on every generated EFA interface.
#[test]
fn lt_connection_tracking_reaches_every_efa_interface() {
    let ct: Value = serde_json::from_str(CT).unwrap();
    let nis = interfaces(json!({"connectionTracking": ct}), false, 2);
    assert_eq!(nis.len(), 2);
    for (i, ni) in nis.iter().enumerate() {
        assert_eq!(ni["interface_type"], "efa", "#{i}");
        assert_eq!(ni["connection_tracking"], tracking(ct.clone()), "#{i}");
    }
}

fn four_interfaces() -> Value {
    json!([
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
        {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
        {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "interface"}
    ])
}

/// LT-CT-5 (difference found, see the doc): connection tracking is set on every configured interface but the
/// efa-only ones.
#[test]
fn lt_connection_tracking_reaches_every_configured_interface_but_efa_only() {
    let ct: Value = serde_json::from_str(CT).unwrap();
    let nis = interfaces(json!({"connectionTracking": ct, "networkInterfaces": four_interfaces()}), false, 0);
    assert_eq!(nis.len(), 4);
    for (i, ni) in nis.iter().enumerate() {
        let want = if ni["interface_type"] == "efa-only" { Value::Null } else { tracking(ct.clone()) };
        assert_eq!(ni["connection_tracking"], want, "#{i}: {ni}");
    }
}

/// LT-NI-1..2: configured interfaces are used in order with their cards, devices and types (EFA requested or
/// not).
#[test]
fn lt_configured_network_interfaces_are_used_as_given() {
    for efa in [0, 2] {
        let nis = interfaces(json!({"networkInterfaces": four_interfaces()}), false, efa);
        let got: Vec<(i64, i64, Value)> = nis
            .iter()
            .map(|n| {
                (
                    n["network_card_index"].as_i64().unwrap(),
                    n["device_index"].as_i64().unwrap(),
                    n["interface_type"].clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![(0, 0, Value::Null), (0, 1, json!("efa-only")), (1, 0, json!("efa-only")), (1, 1, Value::Null)],
            "efa={efa} (a plain interface's type is left to EC2's default, `interface`)"
        );
    }
}

/// LT-NI-3 (difference found for the non-primary interface, see the doc): prefixes on every ENA interface,
/// none on efa-only ones.
#[test]
fn lt_prefixes_go_on_every_ena_interface_but_not_efa_only() {
    let spec = json!({"ipPrefixCount": 2, "networkInterfaces": [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"},
        {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "interface"}
    ]});
    let nis = interfaces(spec, false, 0);
    let got: Vec<Option<i64>> = nis.iter().map(|n| n["ipv4_prefix_count"].as_i64()).collect();
    assert_eq!(got, vec![Some(2), None, Some(2)]);
}

/// LT-NI-4: no IPv6 settings on an efa-only interface; the ENA one gets its primary IPv6.
#[test]
fn lt_no_ipv6_settings_on_efa_only_interfaces() {
    let spec = json!({"networkInterfaces": [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "efa-only"}
    ]});
    let nis = interfaces(spec, true, 0);
    assert_eq!((nis[0]["primary_ipv6"].as_bool(), nis[0]["ipv6_address_count"].as_i64()), (Some(true), Some(1)));
    assert_ne!(nis[1]["primary_ipv6"], json!(true));
    assert!(nis[1]["ipv6_address_count"].is_null());
}

/// LT-CR-3: the capacity reservation preference is `none` for launches outside a reservation with the
/// `ReservedCapacity` gate on, left out with it off, and targets the reservation for reserved launches.
#[test]
fn lt_capacity_reservation_preference_follows_the_gate() {
    assert_eq!(CapacityReservationPreference::for_launch(None, true), Some(CapacityReservationPreference::None));
    assert_eq!(CapacityReservationPreference::for_launch(None, false), None);
    assert_eq!(
        CapacityReservationPreference::for_launch(Some("cr-1"), true),
        Some(CapacityReservationPreference::CapacityReservationsOnly)
    );
}

/// LT-NAME-1..7: the launch template name changes with every input of the template (cluster and kubelet
/// settings through the user data, profile, groups, volumes, AMI, monitoring, EFA interfaces, capacity type,
/// enclave, reservation, node class); equal inputs share a name.
#[test]
fn lt_names_differ_with_every_input() {
    let base = LaunchTemplateData::default();
    let tags = BTreeMap::from([("karpenter.k8s.aws/ec2nodeclass".to_owned(), "default".to_owned())]);
    let variants: Vec<(&str, LaunchTemplateData, BTreeMap<String, String>)> = vec![
        ("base", base.clone(), tags.clone()),
        (
            "user data (cluster name)",
            LaunchTemplateData { user_data: "cluster-name".into(), ..base.clone() },
            tags.clone(),
        ),
        (
            "user data (max pods 12)",
            LaunchTemplateData { user_data: "maxPods: 12".into(), ..base.clone() },
            tags.clone(),
        ),
        (
            "user data (max pods 21)",
            LaunchTemplateData { user_data: "maxPods: 21".into(), ..base.clone() },
            tags.clone(),
        ),
        (
            "instance profile",
            LaunchTemplateData { instance_profile: Some("test-profile".into()), ..base.clone() },
            tags.clone(),
        ),
        (
            "security groups",
            LaunchTemplateData { security_group_ids: vec!["sg-test".into()], ..base.clone() },
            tags.clone(),
        ),
        ("AMI", LaunchTemplateData { image_id: "test-ami".into(), ..base.clone() }, tags.clone()),
        ("monitoring", LaunchTemplateData { detailed_monitoring: true, ..base.clone() }, tags.clone()),
        ("spot", LaunchTemplateData { tag_spot_requests: true, ..base.clone() }, tags.clone()),
        ("enclave", LaunchTemplateData { enclave_enabled: Some(true), ..base.clone() }, tags.clone()),
        (
            "reservation",
            LaunchTemplateData { capacity_reservation_id: Some("cr-1".into()), ..base.clone() },
            tags.clone(),
        ),
        (
            "node class",
            base.clone(),
            BTreeMap::from([("karpenter.k8s.aws/ec2nodeclass".to_owned(), "other".to_owned())]),
        ),
    ];
    let names: Vec<String> = variants.iter().map(|(_, d, t)| launch_template_name(d, t)).collect();
    for (i, (case, ..)) in variants.iter().enumerate() {
        for (j, (other, ..)) in variants.iter().enumerate().skip(i + 1) {
            assert_ne!(names[i], names[j], "{case} vs {other}");
        }
    }
    assert_eq!(launch_template_name(&base, &tags), names[0], "equal inputs share a name");
}
