//! The timeline file of `simulate --timeline FILE` (docs/simulate.md, "Simulated time"): steps at offsets from
//! the start of the run.
//!
//! ```yaml
//! apiVersion: karpenter-rs.timeline/v1     # optional
//! start: "2026-01-01T00:00:00Z"           # optional (default: see docs)
//! steps:
//!   - at: 0s
//!     scale: {deployment: inflate, replicas: 2}
//!   - at: 10m
//!     delete: pod/default/inflate-1
//!   - at: 30m
//!     drift: nodepool/default
//!   - at: 45m
//!     apply: more-pods.yaml                # relative to the timeline file
//!   - advance: 1h                          # one hour after the previous step; nothing else happens
//! ```
//!
//! A bare list of steps is accepted too. Errors name the file, the step (`steps[2]`) and the field.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

/// The `apiVersion` a timeline file may declare.
pub const API_VERSION: &str = "karpenter-rs.timeline/v1";

/// A workload kind `scale` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    ReplicaSet,
}

impl WorkloadKind {
    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::ReplicaSet => "ReplicaSet",
        }
    }

    fn parse(s: &str) -> Option<WorkloadKind> {
        match s.to_ascii_lowercase().as_str() {
            "deployment" | "deploy" | "deployments" => Some(WorkloadKind::Deployment),
            "statefulset" | "sts" | "statefulsets" => Some(WorkloadKind::StatefulSet),
            "replicaset" | "rs" | "replicasets" => Some(WorkloadKind::ReplicaSet),
            _ => None,
        }
    }
}

/// A kind `delete` accepts besides pods and nodes (the kinds the input and `apply` can hold).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletedKind {
    NodeClaim,
    NodePool,
    Workload(WorkloadKind),
    DaemonSet,
    PodDisruptionBudget,
    Namespace,
}

impl DeletedKind {
    /// The Kubernetes kind.
    pub fn as_str(self) -> &'static str {
        match self {
            DeletedKind::NodeClaim => "NodeClaim",
            DeletedKind::NodePool => "NodePool",
            DeletedKind::Workload(w) => w.as_str(),
            DeletedKind::DaemonSet => "DaemonSet",
            DeletedKind::PodDisruptionBudget => "PodDisruptionBudget",
            DeletedKind::Namespace => "Namespace",
        }
    }

    /// Whether objects of the kind live in a namespace.
    pub fn namespaced(self) -> bool {
        matches!(self, DeletedKind::Workload(_) | DeletedKind::DaemonSet | DeletedKind::PodDisruptionBudget)
    }

    fn parse(s: &str) -> Option<DeletedKind> {
        Some(match s.to_ascii_lowercase().as_str() {
            "nodeclaim" | "nodeclaims" => DeletedKind::NodeClaim,
            "nodepool" | "nodepools" => DeletedKind::NodePool,
            "daemonset" | "ds" | "daemonsets" => DeletedKind::DaemonSet,
            "poddisruptionbudget" | "pdb" | "poddisruptionbudgets" => DeletedKind::PodDisruptionBudget,
            "namespace" | "ns" | "namespaces" => DeletedKind::Namespace,
            other => DeletedKind::Workload(WorkloadKind::parse(other)?),
        })
    }
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Scale a workload of the input to `replicas` pods.
    Scale { kind: WorkloadKind, namespace: String, name: String, replicas: u32 },
    /// Delete a pod (it is gone, not recreated).
    DeletePod { namespace: String, name: String },
    /// Delete a node (and its NodeClaim): it is drained and terminated, as the controller's termination does.
    DeleteNode { name: String },
    /// Delete another object; `namespace` is `None` for cluster-scoped kinds.
    Delete { kind: DeletedKind, namespace: Option<String>, name: String },
    /// Add or replace objects from a manifest file.
    Apply { path: PathBuf },
    /// Mark every NodeClaim of a NodePool as drifted.
    DriftNodePool { name: String },
    /// Mark one node's NodeClaim as drifted.
    DriftNode { name: String },
    /// Nothing: simulated time passes.
    Advance,
}

/// One step.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// `steps[i]` (or `--scale` for a flag), for messages.
    pub label: String,
    /// Offset from the start.
    pub at: Duration,
    /// What happens.
    pub action: Action,
}

/// A parsed timeline.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Timeline {
    /// The file.
    pub source: String,
    /// `start`, when given.
    pub start: Option<DateTime<Utc>>,
    /// Steps in time order.
    pub steps: Vec<Step>,
}

/// Reads and parses a timeline file; `Err` lists every problem (`FILE: steps[2].scale.replicas: ...`).
pub fn read(path: &Path) -> Result<Timeline, Vec<String>> {
    let source = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| vec![format!("{source}: reading the timeline: {e}")])?;
    let base = path.parent().unwrap_or_else(|| Path::new("."));
    parse(&text, &source, base)
}

/// Parses timeline text; relative `apply` paths are resolved against `base`.
pub fn parse(text: &str, source: &str, base: &Path) -> Result<Timeline, Vec<String>> {
    let value: Value = serde_saphyr::from_str(text).map_err(|e| vec![format!("{source}: not a YAML timeline: {e}")])?;
    let mut errors = Vec::new();
    let mut err = |field: &str, message: String| errors.push(format!("{source}: {field}: {message}"));
    let mut timeline = Timeline { source: source.to_owned(), ..Default::default() };
    let steps = match &value {
        Value::Array(steps) => steps.clone(),
        Value::Object(map) => {
            for (k, v) in map {
                match k.as_str() {
                    "apiVersion" | "kind" => {
                        let expected = if k == "kind" { "Timeline" } else { API_VERSION };
                        if v.as_str() != Some(expected) {
                            err(k, format!("expected {expected:?}, found {v}"));
                        }
                    }
                    "start" => match v.as_str().and_then(|s| DateTime::parse_from_rfc3339(s).ok()) {
                        Some(t) => timeline.start = Some(t.with_timezone(&Utc)),
                        None => {
                            err("start", format!("expected an RFC 3339 time such as 2026-01-01T00:00:00Z, found {v}"))
                        }
                    },
                    "steps" => {}
                    other => err(other, "unknown field, expected one of `apiVersion`, `kind`, `start`, `steps`".into()),
                }
            }
            match map.get("steps") {
                Some(Value::Array(steps)) => steps.clone(),
                Some(Value::Null) | None => Vec::new(),
                Some(other) => {
                    err("steps", format!("expected a list of steps, found {other}"));
                    Vec::new()
                }
            }
        }
        Value::Null => Vec::new(),
        other => {
            err("(top level)", format!("expected a mapping with `steps` or a list of steps, found {other}"));
            Vec::new()
        }
    };
    let mut previous = Duration::ZERO;
    for (i, step) in steps.iter().enumerate() {
        let label = format!("steps[{i}]");
        // Time order is checked on `at` alone, so a step with another problem still moves the clock.
        if let Some(at) = step.get("at").and_then(|v| duration(v).ok()) {
            if at < previous {
                err(
                    &format!("{label}.at"),
                    format!(
                        "{} is earlier than the previous step ({}); steps must be in time order",
                        format_offset(at),
                        format_offset(previous)
                    ),
                );
            }
            previous = previous.max(at);
        }
        match parse_step(step, &label, previous, base) {
            Ok(s) => {
                previous = previous.max(s.at);
                timeline.steps.push(s);
            }
            Err(list) => {
                for (field, message) in list {
                    err(&field, message);
                }
            }
        }
    }
    if errors.is_empty() { Ok(timeline) } else { Err(errors) }
}

const ACTIONS: [&str; 5] = ["scale", "delete", "apply", "drift", "advance"];

fn parse_step(step: &Value, label: &str, previous: Duration, base: &Path) -> Result<Step, Vec<(String, String)>> {
    let mut errors: Vec<(String, String)> = Vec::new();
    let Value::Object(map) = step else {
        return Err(vec![(
            label.to_owned(),
            format!("expected a mapping such as `{{at: 10m, scale: ...}}`, found {step}"),
        )]);
    };
    for k in map.keys() {
        if k != "at" && !ACTIONS.contains(&k.as_str()) {
            errors.push((
                format!("{label}.{k}"),
                "unknown field, expected `at` and one of `scale`, `delete`, `apply`, `drift`, `advance`".into(),
            ));
        }
    }
    let actions: Vec<&str> = ACTIONS.iter().copied().filter(|a| map.contains_key(*a)).collect();
    let at = match map.get("at") {
        None => None,
        Some(v) => match duration(v) {
            Ok(d) => Some(d),
            Err(m) => {
                errors.push((format!("{label}.at"), m));
                None
            }
        },
    };
    let mut at = at.unwrap_or(previous);
    let action = match actions.as_slice() {
        [] => {
            errors.push((
                label.to_owned(),
                "no action: add one of `scale`, `delete`, `apply`, `drift`, `advance`".into(),
            ));
            None
        }
        [one] => {
            let field = format!("{label}.{one}");
            let v = &map[*one];
            let parsed: Result<Action, (String, String)> = match *one {
                "scale" => scale(v),
                "delete" => delete(v).map_err(|m| (String::new(), m)),
                "apply" => match v.as_str() {
                    Some(p) if !p.is_empty() => Ok(Action::Apply { path: base.join(p) }),
                    _ => Err((String::new(), format!("expected a manifest file path, found {v}"))),
                },
                "drift" => drift(v).map_err(|m| (String::new(), m)),
                _ => match duration(v) {
                    Ok(_) if map.contains_key("at") => {
                        Err((String::new(), "`advance` is relative to the previous step; drop `at`".into()))
                    }
                    Ok(d) => {
                        at = previous + d;
                        Ok(Action::Advance)
                    }
                    Err(m) => Err((String::new(), m)),
                },
            };
            match parsed {
                Ok(a) => Some(a),
                Err((sub, message)) => {
                    errors.push((format!("{field}{sub}"), message));
                    None
                }
            }
        }
        many => {
            errors.push((label.to_owned(), format!("one action per step, found {}", many.join(", "))));
            None
        }
    };
    match action {
        Some(action) if errors.is_empty() => Ok(Step { label: label.to_owned(), at, action }),
        _ => Err(errors),
    }
}

/// A Go-style duration (`90s`, `10m`, `1h30m`) or the number 0.
fn duration(v: &Value) -> Result<Duration, String> {
    match v {
        Value::String(s) => karpenter_api::duration::parse_go_duration(s)
            .map_err(|e| format!("expected a duration such as 10m or 1h30m, found {s:?} ({e})")),
        Value::Number(n) if n.as_u64() == Some(0) => Ok(Duration::ZERO),
        other => Err(format!("expected a duration such as 10m or 1h30m, found {other}")),
    }
}

/// `scale: {deployment: inflate, namespace: default, replicas: 2}`. Errors: (sub-field such as `.replicas`, or
/// empty, and the message).
fn scale(v: &Value) -> Result<Action, (String, String)> {
    let sub = |f: &str, m: String| (format!(".{f}"), m);
    let Value::Object(map) = v else {
        return Err((
            String::new(),
            format!("expected a mapping such as `{{deployment: inflate, replicas: 2}}`, found {v}"),
        ));
    };
    let mut kind = None;
    let mut namespace = "default".to_owned();
    let mut replicas = None;
    for (k, val) in map {
        match k.as_str() {
            "namespace" => match val.as_str() {
                Some(s) if !s.is_empty() => namespace = s.to_owned(),
                _ => return Err(sub("namespace", format!("expected a namespace name, found {val}"))),
            },
            "replicas" => match val.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) => replicas = Some(n),
                None => return Err(sub("replicas", format!("expected a non-negative integer, found {val}"))),
            },
            other => match WorkloadKind::parse(other) {
                Some(w) => {
                    if kind.is_some() {
                        return Err(sub(other, "one workload per step".into()));
                    }
                    match val.as_str() {
                        Some(name) if !name.is_empty() => kind = Some((w, name.to_owned())),
                        _ => return Err(sub(other, format!("expected the workload's name, found {val}"))),
                    }
                }
                None => {
                    return Err(sub(
                        other,
                        "unknown field, expected `deployment`, `statefulset` or `replicaset`, `namespace`, `replicas`"
                            .into(),
                    ));
                }
            },
        }
    }
    let Some((kind, name)) = kind else {
        return Err((
            String::new(),
            "expected the workload: `deployment: NAME`, `statefulset: NAME` or `replicaset: NAME`".into(),
        ));
    };
    let Some(replicas) = replicas else {
        return Err(sub("replicas", "missing (the new number of pods)".into()));
    };
    Ok(Action::Scale { kind, namespace, name, replicas })
}

/// `KIND/NAME` or, for a namespaced kind, `KIND/NAMESPACE/NAME`.
fn delete(v: &Value) -> Result<Action, String> {
    let s = v.as_str().unwrap_or_default();
    let parts: Vec<&str> = s.split('/').collect();
    let expected = || {
        format!(
            "expected KIND/NAME or KIND/NAMESPACE/NAME with KIND one of pod, node, nodeclaim, nodepool, deployment, \
             statefulset, replicaset, daemonset, pdb, namespace; found {v}"
        )
    };
    if let [kind, rest @ ..] = parts.as_slice()
        && let Some(kind) = DeletedKind::parse(kind)
    {
        return match (rest, kind.namespaced()) {
            ([name], namespaced) if !name.is_empty() => Ok(Action::Delete {
                kind,
                namespace: namespaced.then(|| "default".to_owned()),
                name: (*name).to_owned(),
            }),
            ([ns, name], true) if !ns.is_empty() && !name.is_empty() => {
                Ok(Action::Delete { kind, namespace: Some((*ns).to_owned()), name: (*name).to_owned() })
            }
            ([_, _], false) => {
                Err(format!("{} is cluster-scoped: expected {}/NAME, found {v}", kind.as_str(), parts[0]))
            }
            _ => Err(expected()),
        };
    }
    match parts.as_slice() {
        ["pod" | "pods", name] if !name.is_empty() => {
            Ok(Action::DeletePod { namespace: "default".into(), name: (*name).to_owned() })
        }
        ["pod" | "pods", ns, name] if !ns.is_empty() && !name.is_empty() => {
            Ok(Action::DeletePod { namespace: (*ns).to_owned(), name: (*name).to_owned() })
        }
        ["node" | "nodes", name] if !name.is_empty() => Ok(Action::DeleteNode { name: (*name).to_owned() }),
        _ => Err(expected()),
    }
}

/// `nodepool/NAME` or `node/NAME`.
fn drift(v: &Value) -> Result<Action, String> {
    let s = v.as_str().unwrap_or_default();
    match s.split_once('/') {
        Some(("nodepool" | "nodepools", name)) if !name.is_empty() && !name.contains('/') => {
            Ok(Action::DriftNodePool { name: name.to_owned() })
        }
        Some(("node" | "nodes", name)) if !name.is_empty() && !name.contains('/') => {
            Ok(Action::DriftNode { name: name.to_owned() })
        }
        _ => Err(format!("expected nodepool/NAME or node/NAME, found {v}")),
    }
}

/// `--scale [KIND/][NAMESPACE/]NAME=REPLICAS` (kind defaults to deployment, namespace to default).
pub fn parse_scale_flag(s: &str) -> Result<Action, String> {
    let err =
        || format!("--scale {s}: expected [KIND/][NAMESPACE/]NAME=REPLICAS such as inflate=2 or statefulset/db=3");
    let (target, replicas) = s.split_once('=').ok_or_else(err)?;
    let replicas: u32 = replicas.trim().parse().map_err(|_| err())?;
    let parts: Vec<&str> = target.split('/').collect();
    let (kind, namespace, name) = match parts.as_slice() {
        [name] => (WorkloadKind::Deployment, "default", *name),
        [first, name] => match WorkloadKind::parse(first) {
            Some(k) => (k, "default", *name),
            None => (WorkloadKind::Deployment, *first, *name),
        },
        [kind, ns, name] => (WorkloadKind::parse(kind).ok_or_else(err)?, *ns, *name),
        _ => return Err(err()),
    };
    if name.is_empty() || namespace.is_empty() {
        return Err(err());
    }
    Ok(Action::Scale { kind, namespace: namespace.to_owned(), name: name.to_owned(), replicas })
}

/// `0s`, `45s`, `10m`, `1h`, `1h2m3s` (whole seconds).
pub fn format_offset(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, sec) = (s / 3600, (s / 60) % 60, s % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if sec > 0 || out.is_empty() {
        out.push_str(&format!("{sec}s"));
    }
    out
}

impl Action {
    /// One line for the report.
    pub fn describe(&self) -> String {
        match self {
            Action::Scale { kind, namespace, name, replicas } => {
                format!("scale {}/{namespace}/{name} to {replicas} replicas", kind.as_str())
            }
            Action::DeletePod { namespace, name } => format!("delete pod {namespace}/{name}"),
            Action::DeleteNode { name } => format!("delete node {name}"),
            Action::Delete { kind, namespace: Some(ns), name } => format!("delete {} {ns}/{name}", kind.as_str()),
            Action::Delete { kind, namespace: None, name } => format!("delete {} {name}", kind.as_str()),
            Action::Apply { path } => format!("apply {}", path.display()),
            Action::DriftNodePool { name } => format!("drift NodePool {name}"),
            Action::DriftNode { name } => format!("drift node {name}"),
            Action::Advance => "advance".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> Timeline {
        parse(text, "t.yaml", Path::new("dir")).unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn errors(text: &str) -> Vec<String> {
        parse(text, "t.yaml", Path::new("dir")).expect_err("invalid")
    }

    #[test]
    fn parses_every_action_and_relative_times() {
        let t = ok("
apiVersion: karpenter-rs.timeline/v1
start: 2026-03-01T00:00:00Z
steps:
  - at: 0s
    scale: {deployment: inflate, replicas: 2}
  - at: 10m
    delete: pod/shop/web-1
  - at: 10m
    delete: node/n1
  - at: 30m
    drift: nodepool/default
  - advance: 1h
  - apply: more.yaml
  - drift: node/n2
");
        assert_eq!(t.start.map(|s| s.to_rfc3339()), Some("2026-03-01T00:00:00+00:00".to_owned()));
        let at: Vec<String> = t.steps.iter().map(|s| format_offset(s.at)).collect();
        assert_eq!(at, ["0s", "10m", "10m", "30m", "1h30m", "1h30m", "1h30m"]);
        assert_eq!(
            t.steps[0].action,
            Action::Scale {
                kind: WorkloadKind::Deployment,
                namespace: "default".into(),
                name: "inflate".into(),
                replicas: 2
            }
        );
        assert_eq!(t.steps[1].action, Action::DeletePod { namespace: "shop".into(), name: "web-1".into() });
        assert_eq!(t.steps[2].action, Action::DeleteNode { name: "n1".into() });
        assert_eq!(t.steps[3].action, Action::DriftNodePool { name: "default".into() });
        assert_eq!(t.steps[4].action, Action::Advance);
        assert_eq!(t.steps[5].action, Action::Apply { path: Path::new("dir").join("more.yaml") });
        assert_eq!(t.steps[6].action, Action::DriftNode { name: "n2".into() });
    }

    #[test]
    fn a_bare_list_of_steps_works() {
        let t = ok("- {at: 5m, scale: {statefulset: db, namespace: data, replicas: 0}}\n");
        assert_eq!(
            t.steps[0].action,
            Action::Scale { kind: WorkloadKind::StatefulSet, namespace: "data".into(), name: "db".into(), replicas: 0 }
        );
        assert_eq!(t.steps[0].at, Duration::from_secs(300));
    }

    #[test]
    fn errors_name_the_step_and_the_field() {
        let e = errors(
            "
steps:
  - at: 10x
    scale: {deployment: inflate, replicas: 2}
  - at: 5m
    scale: {deployment: inflate, replicas: -1}
  - at: 6m
    scale: {deployment: inflate}
  - at: 7m
  - at: 8m
    delete: pod
    drift: nodepool/a
  - at: 9m
    drift: nodeclaim/x
  - at: 10m
    advance: 1m
  - at: 2m
    apply: x.yaml
  - at: 12m
    sclae: {}
",
        );
        assert_eq!(
            e,
            [
                "t.yaml: steps[0].at: expected a duration such as 10m or 1h30m, found \"10x\" (invalid duration \"10x\": expected a sequence of <integer><unit> with units h, m, s (e.g. \"720h\", \"1h30m\"))",
                "t.yaml: steps[1].scale.replicas: expected a non-negative integer, found -1",
                "t.yaml: steps[2].scale.replicas: missing (the new number of pods)",
                "t.yaml: steps[3]: no action: add one of `scale`, `delete`, `apply`, `drift`, `advance`",
                "t.yaml: steps[4]: one action per step, found delete, drift",
                "t.yaml: steps[5].drift: expected nodepool/NAME or node/NAME, found \"nodeclaim/x\"",
                "t.yaml: steps[6].advance: `advance` is relative to the previous step; drop `at`",
                "t.yaml: steps[7].at: 2m is earlier than the previous step (10m); steps must be in time order",
                "t.yaml: steps[8].sclae: unknown field, expected `at` and one of `scale`, `delete`, `apply`, `drift`, `advance`",
                "t.yaml: steps[8]: no action: add one of `scale`, `delete`, `apply`, `drift`, `advance`",
            ]
        );
    }

    #[test]
    fn top_level_problems_are_reported() {
        assert_eq!(
            errors("apiVersion: v2\nstart: yesterday\nsteps: 3\nextra: 1\n"),
            [
                "t.yaml: apiVersion: expected \"karpenter-rs.timeline/v1\", found \"v2\"",
                "t.yaml: extra: unknown field, expected one of `apiVersion`, `kind`, `start`, `steps`",
                "t.yaml: start: expected an RFC 3339 time such as 2026-01-01T00:00:00Z, found \"yesterday\"",
                "t.yaml: steps: expected a list of steps, found 3",
            ]
        );
    }

    #[test]
    fn scale_flags() {
        assert_eq!(
            parse_scale_flag("inflate=2"),
            Ok(Action::Scale {
                kind: WorkloadKind::Deployment,
                namespace: "default".into(),
                name: "inflate".into(),
                replicas: 2
            })
        );
        assert_eq!(
            parse_scale_flag("shop/web=3"),
            Ok(Action::Scale {
                kind: WorkloadKind::Deployment,
                namespace: "shop".into(),
                name: "web".into(),
                replicas: 3
            })
        );
        assert_eq!(
            parse_scale_flag("sts/data/db=0"),
            Ok(Action::Scale {
                kind: WorkloadKind::StatefulSet,
                namespace: "data".into(),
                name: "db".into(),
                replicas: 0
            })
        );
        assert!(parse_scale_flag("inflate").is_err());
        assert!(parse_scale_flag("inflate=-1").is_err());
        assert!(parse_scale_flag("job/x/y=1").is_err());
    }

    #[test]
    fn offsets_are_compact() {
        assert_eq!(format_offset(Duration::ZERO), "0s");
        assert_eq!(format_offset(Duration::from_secs(3723)), "1h2m3s");
        assert_eq!(format_offset(Duration::from_secs(7200)), "2h");
    }
}
