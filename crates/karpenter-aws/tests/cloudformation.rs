//! deploy/cloudformation.yaml, the IAM and infrastructure template docs/install-eks.md installs from, held to the
//! code:
//!
//! - cfn-lint (AWS's own template checker, with the CloudFormation resource schemas) accepts it. Skipped with a
//!   message where cfn-lint is not installed; under CI (`karpenter_testing::in_ci`) its absence fails, as .ci/run
//!   installs it.
//! - The controller's managed policies allow every AWS API call karpenter-aws makes. The calls are read from its
//!   source (the SDK code is behind the `sdk` feature: the adapters in src/sdk and the start-up in src/assembly.rs;
//!   read rather than compiled): every `<client>.operation_name(` on a field or parameter typed
//!   `aws_sdk_<service>::Client`, directly or through a struct holding one (`clients.ec2`). A new call without a
//!   policy statement fails here, and so does a granted action no adapter calls unless it is listed, with its
//!   reason, in [`GRANTED_WITHOUT_A_CALL`].
//! - The node class validation's dry runs (`RunInstances`, `CreateFleet`, `CreateLaunchTemplate`), tagged by
//!   `karpenter_aws::launch::tags::dry_run_tags`, meet the `aws:RequestTag/...` conditions of the statements
//!   that allow them and `ec2:CreateTags` on creation, so a class validates under the template's policies.
//! - Its EventBridge rules deliver every kind of event the interruption parser acts on, and nothing it ignores.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use karpenter_aws::interruption::{self, Kind};
use serde_json::Value;

/// Actions the policies grant that no adapter calls by that name, and why each is needed.
const GRANTED_WITHOUT_A_CALL: &[(&str, &str)] = &[(
    "iam:PassRole",
    "RunInstances and CreateFleet hand the node role (through the instance profile) to EC2; IAM checks this \
     permission on the launch, it is no API call of its own",
)];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn template() -> Value {
    let path = workspace_root().join("deploy/cloudformation.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{} is not plain YAML: {e}", path.display()))
}

fn resources_of_type<'a>(template: &'a Value, kind: &str) -> Vec<(&'a str, &'a Value)> {
    let resources = template["Resources"].as_object().expect("the template has Resources");
    resources.iter().filter(|(_, r)| r["Type"] == kind).map(|(name, r)| (name.as_str(), &r["Properties"])).collect()
}

/// `${Anything}` replaced by a placeholder: what `Fn::Sub` leaves is then plain JSON.
fn without_substitutions(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').map(|e| start + e + 1).expect("an unterminated ${ in a policy");
        out.push_str("SUBSTITUTED");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn as_strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// Every action an `Allow` statement of the controller's managed policies grants, with the policy granting it.
fn granted_actions() -> BTreeMap<String, String> {
    let template = template();
    let mut granted = BTreeMap::new();
    let policies = resources_of_type(&template, "AWS::IAM::ManagedPolicy");
    assert!(!policies.is_empty(), "the template declares no managed policy");
    for (name, props) in policies {
        let document = &props["PolicyDocument"];
        let document: Value = match document.get("Fn::Sub").and_then(Value::as_str) {
            Some(text) => serde_json::from_str(&without_substitutions(text))
                .unwrap_or_else(|e| panic!("{name}: the policy document is not JSON: {e}")),
            None => document.clone(),
        };
        let statements = document["Statement"].as_array().unwrap_or_else(|| panic!("{name}: no Statement list"));
        for statement in statements {
            if statement["Effect"] != "Allow" {
                continue;
            }
            for action in as_strings(&statement["Action"]) {
                assert!(!action.contains('*'), "{name} grants the wildcard action {action}: list the calls instead");
                granted.insert(action, name.to_owned());
            }
        }
    }
    granted
}

/// The IAM action prefix of an SDK crate (`aws_sdk_<crate>`).
fn iam_prefix(sdk_crate: &str) -> &'static str {
    match sdk_crate {
        "ec2" => "ec2",
        "ssm" => "ssm",
        "sqs" => "sqs",
        "iam" => "iam",
        "eks" => "eks",
        "pricing" => "pricing",
        "arczonalshift" => "arc-zonal-shift",
        other => panic!("an adapter uses aws_sdk_{other}, whose IAM action prefix this test does not know: add it"),
    }
}

/// `describe_instance_types` -> `DescribeInstanceTypes`.
fn operation_name(snake: &str) -> String {
    snake
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Source without its comment lines (docs may name calls an adapter does not make).
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// `name: aws_sdk_<crate>::Client` and `name: &aws_sdk_<crate>::Client` (fields and parameters) in `code`.
fn client_declarations(code: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("aws_sdk_") {
        let after = &rest[at + "aws_sdk_".len()..];
        let sdk_crate: String = after.chars().take_while(|c| is_ident_char(*c)).collect();
        let is_client = after[sdk_crate.len()..].starts_with("::Client");
        let before = rest[..at].trim_end().trim_end_matches('&').trim_end();
        if is_client && let Some(before) = before.strip_suffix(':') {
            let before = before.trim_end();
            let name: String =
                before.chars().rev().take_while(|c| is_ident_char(*c)).collect::<Vec<_>>().into_iter().rev().collect();
            if !name.is_empty() {
                found.push((name, sdk_crate));
            }
        }
        rest = &rest[at + "aws_sdk_".len()..];
    }
    found
}

/// The structs a file implements (`impl X` / `impl Trait for X`).
fn implemented_types(code: &str) -> BTreeSet<String> {
    let mut types = BTreeSet::new();
    for line in code.lines() {
        let Some(rest) = line.trim_start().strip_prefix("impl") else { continue };
        let target = rest.split(" for ").last().unwrap_or(rest);
        let name: String = target.trim_start().chars().take_while(|c| is_ident_char(*c)).collect();
        if !name.is_empty() {
            types.insert(name);
        }
    }
    types
}

/// The client-typed fields of every `struct X { .. }` in `code`, by struct name.
fn struct_fields(code: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out = BTreeMap::new();
    let mut rest = code;
    while let Some(at) = rest.find("struct ") {
        let after = &rest[at + "struct ".len()..];
        let name: String = after.chars().take_while(|c| is_ident_char(*c)).collect();
        if let (Some(open), false) = (after.find('{'), name.is_empty()) {
            let close = after[open..].find('}').map_or(after.len(), |c| open + c);
            out.insert(name, client_declarations(&after[open..close]));
        }
        rest = after;
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// karpenter-aws's source files, as (path under src/, code without comment lines).
fn sources() -> Vec<(String, String)> {
    let src = workspace_root().join("crates/karpenter-aws/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    files.iter().map(|p| (p.strip_prefix(&src).expect("under src").display().to_string(), code_of(p))).collect()
}

/// The fields and parameters `code` gives the type `ty` (`name: Ty`, `name: &Ty`).
fn typed_bindings(code: &str, ty: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for pattern in [format!(": {ty}"), format!(": &{ty}")] {
        for (at, m) in code.match_indices(pattern.as_str()) {
            if code[at + m.len()..].starts_with(is_ident_char) {
                continue;
            }
            let name: String = code[..at]
                .chars()
                .rev()
                .take_while(|c| is_ident_char(*c))
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// Every AWS call of karpenter-aws: `service:Operation` -> the files making it.
fn adapter_calls() -> BTreeMap<String, BTreeSet<String>> {
    let sources = sources();
    let mut fields_of_struct = BTreeMap::new();
    for (_, code) in &sources {
        fields_of_struct.extend(struct_fields(code));
    }

    let mut calls: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, code) in &sources {
        // Which service each client-typed name in this file is: its own fields and parameters, then the client
        // fields of the structs it implements methods for or binds a field or parameter to.
        // (name, service, the names it must be a field of: `None` for a client declared in this file).
        let mut receivers: Vec<(String, String, Option<BTreeSet<String>>)> =
            client_declarations(code).into_iter().map(|(name, sdk_crate)| (name, sdk_crate, None)).collect();
        let implemented = implemented_types(code);
        for (ty, fields) in &fields_of_struct {
            let mut owners = typed_bindings(code, ty);
            if implemented.contains(ty) {
                owners.insert("self".to_owned());
            }
            if !owners.is_empty() {
                receivers.extend(
                    fields.iter().map(|(name, sdk_crate)| (name.clone(), sdk_crate.clone(), Some(owners.clone()))),
                );
            }
        }
        let names: BTreeSet<&String> = receivers.iter().map(|(name, _, _)| name).collect();
        for receiver in names {
            let mut rest = code.as_str();
            let mut offset = 0;
            while let Some(found) = rest.find(receiver.as_str()) {
                let at = offset + found;
                rest = &code[at + receiver.len()..];
                offset = at + receiver.len();
                let before = &code[..at];
                if before.chars().next_back().is_some_and(is_ident_char) || rest.starts_with(is_ident_char) {
                    continue;
                }
                let Some(after_dot) = rest.trim_start().strip_prefix('.') else { continue };
                let method: String = after_dot.trim_start().chars().take_while(|c| is_ident_char(*c)).collect();
                let called = after_dot.trim_start()[method.len()..].trim_start().starts_with('(');
                // `clone` copies the client; every other method of an SDK client is an operation.
                if !called || method.is_empty() || method == "clone" || method == "config" {
                    continue;
                }
                // The identifier this name is a field of (`clients` in `clients.ec2`), if any.
                let owner: Option<String> = before.trim_end().strip_suffix('.').map(|b| {
                    let b = b.trim_end();
                    b.chars().rev().take_while(|c| is_ident_char(*c)).collect::<Vec<_>>().into_iter().rev().collect()
                });
                let services: BTreeSet<&String> = receivers
                    .iter()
                    .filter(|(name, _, owners)| {
                        name == receiver
                            && match owners {
                                None => true,
                                Some(owners) => owner.as_ref().is_some_and(|o| owners.contains(o)),
                            }
                    })
                    .map(|(_, sdk_crate, _)| sdk_crate)
                    .collect();
                assert!(services.len() <= 1, "{file}: `{receiver}.{method}` could be a client of {services:?}");
                if let Some(sdk_crate) = services.first() {
                    let action = format!("{}:{}", iam_prefix(sdk_crate), operation_name(&method));
                    calls.entry(action).or_default().insert(file.clone());
                }
            }
        }
    }
    calls
}

/// The operation names the adapters give their errors (`api_error("DescribeSubnets", e)`): an independent list
/// to check the call finder against.
fn error_operation_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (_, code) in sources() {
        for piece in code.split("api_error(\"").skip(1) {
            let name: String = piece.chars().take_while(|c| *c != '"').collect();
            names.insert(name);
        }
    }
    names
}

#[test]
fn the_call_finder_sees_every_operation_the_adapters_report_errors_for() {
    let found: BTreeSet<String> =
        adapter_calls().keys().map(|a| a.split_once(':').expect("service:Operation").1.to_owned()).collect();
    let reported = error_operation_names();
    assert!(reported.len() >= 30, "too few api_error(\"...\") names found: {reported:?}");
    assert_eq!(found, reported, "calls found in the adapters vs the operations their errors name");
}

#[test]
fn the_controller_policies_allow_every_call_the_adapters_make() {
    let calls = adapter_calls();
    let granted = granted_actions();
    for known in
        ["ec2:CreateFleet", "ec2:DescribeInstanceTypes", "sqs:ReceiveMessage", "arc-zonal-shift:GetManagedResource"]
    {
        assert!(calls.contains_key(known), "the call finder missed {known}: {:?}", calls.keys());
    }
    let missing: Vec<String> = calls
        .iter()
        .filter(|(action, _)| !granted.contains_key(*action))
        .map(|(action, files)| {
            format!("{action} (called in src/{})", files.iter().cloned().collect::<Vec<_>>().join(", "))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "deploy/cloudformation.yaml's controller policies do not allow:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_controller_policies_grant_nothing_the_adapters_do_not_call_unless_explained() {
    let calls = adapter_calls();
    let granted = granted_actions();
    let explained: BTreeMap<&str, &str> = GRANTED_WITHOUT_A_CALL.iter().copied().collect();
    let unexplained: Vec<String> = granted
        .iter()
        .filter(|(action, _)| !calls.contains_key(*action) && !explained.contains_key(action.as_str()))
        .map(|(action, policy)| format!("{action} (in {policy})"))
        .collect();
    assert!(
        unexplained.is_empty(),
        "granted but never called; remove them or list them in GRANTED_WITHOUT_A_CALL with the reason:\n{}",
        unexplained.join("\n")
    );
    for (action, reason) in GRANTED_WITHOUT_A_CALL {
        assert!(
            granted.contains_key(*action),
            "{action} is listed as granted ({reason}) but the template does not grant it"
        );
        assert!(
            !calls.contains_key(*action),
            "{action} is called by an adapter now: drop it from GRANTED_WITHOUT_A_CALL"
        );
    }
}

/// A minimal EventBridge event matching a rule, carrying every detail the parser may want for its kind.
fn event(source: &str, detail_type: &str, state: &str) -> String {
    serde_json::json!({
        "version": "0",
        "id": "e",
        "source": source,
        "detail-type": detail_type,
        "detail": {
            "instance-id": "i-0123456789abcdef0",
            "state": state,
            "capacity-reservation-id": "cr-0123456789abcdef0",
            "service": "EC2",
            "eventTypeCategory": "scheduledChange",
            "affectedEntities": [{ "entityValue": "i-0123456789abcdef0" }]
        }
    })
    .to_string()
}

#[test]
fn the_eventbridge_rules_deliver_every_event_the_interruption_handling_acts_on() {
    let template = template();
    let mut kinds = BTreeSet::new();
    let rules = resources_of_type(&template, "AWS::Events::Rule");
    for (name, props) in &rules {
        let pattern = &props["EventPattern"];
        let target = &props["Targets"][0]["Arn"]["Fn::GetAtt"];
        assert_eq!(target, &serde_json::json!(["KarpenterInterruptionQueue", "Arn"]), "{name} targets the queue");
        for source in as_strings(&pattern["source"]) {
            for detail_type in as_strings(&pattern["detail-type"]) {
                // A state-change rule delivers every state; the parser acts on stopping and terminating ones.
                for state in ["stopping", "shutting-down"] {
                    let message = interruption::parse(event(&source, &detail_type, state).as_bytes())
                        .unwrap_or_else(|e| panic!("{name}: {source}/{detail_type}: {e}"));
                    assert_ne!(message.kind, Kind::NoOp, "{name} delivers {source}/{detail_type}, which is ignored");
                    kinds.insert(format!("{:?}", message.kind));
                }
            }
        }
    }
    let expected: BTreeSet<String> = [
        Kind::SpotInterrupted,
        Kind::RebalanceRecommendation,
        Kind::ScheduledChange,
        Kind::InstanceStopped,
        Kind::InstanceTerminated,
        Kind::CapacityReservationInterrupted,
    ]
    .iter()
    .map(|k| format!("{k:?}"))
    .collect();
    assert_eq!(kinds, expected, "the kinds of event the template's rules deliver");
}

/// cfn-lint: `KARPENTER_CFN_LINT`, else the venv .ci/run installs (target/cfn-lint-venv), else `cfn-lint` on PATH.
fn cfn_lint() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KARPENTER_CFN_LINT") {
        return Some(PathBuf::from(path));
    }
    let venv = workspace_root().join("target/cfn-lint-venv/bin/cfn-lint");
    if venv.is_file() {
        return Some(venv);
    }
    let on_path = Command::new("cfn-lint").arg("--version").output().is_ok_and(|o| o.status.success());
    on_path.then(|| PathBuf::from("cfn-lint"))
}

#[test]
fn cfn_lint_accepts_the_template() {
    let Some(lint) = cfn_lint() else {
        assert!(
            !karpenter_testing::in_ci(),
            "cfn-lint is not installed (.ci/run installs it into target/cfn-lint-venv)"
        );
        eprintln!("skipped: cfn-lint not found (pip install cfn-lint==1.51.0, or set KARPENTER_CFN_LINT)");
        return;
    };
    let template = workspace_root().join("deploy/cloudformation.yaml");
    let output =
        Command::new(&lint).arg(&template).output().unwrap_or_else(|e| panic!("running {}: {e}", lint.display()));
    assert!(
        output.status.success(),
        "cfn-lint found problems in deploy/cloudformation.yaml:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

// ---- The validation dry runs under the policies' tag conditions ----
//
// Every statement of the controller policies is evaluated as IAM would for one resource a dry run creates: the
// action and the resource's ARN must match (`*` globs), and every condition must hold on what the request carries
// (`aws:RequestTag/<key>` from the dry run's tags for that resource type, `ec2:CreateAction`,
// `aws:RequestedRegion`). A condition on anything else (`aws:ResourceTag/...`: nothing exists yet) or an operator
// other than `StringEquals`/`StringLike` counts as not met, so a statement is credited only when it surely applies.

const POLICY_CLUSTER: &str = "prod";
const POLICY_REGION: &str = "us-west-2";

/// `*` and `?` globs, as IAM matches actions, resources and `StringLike` values.
fn glob(pattern: &str, text: &str) -> bool {
    fn matches(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|i| matches(rest, &t[i..])),
            Some(('?', rest)) => !t.is_empty() && matches(rest, &t[1..]),
            Some((c, rest)) => t.first() == Some(c) && matches(rest, &t[1..]),
        }
    }
    matches(&pattern.chars().collect::<Vec<_>>(), &text.chars().collect::<Vec<_>>())
}

/// `Fn::Sub` as CloudFormation does it for one stack: the cluster's name, region, partition and account.
fn substituted(text: &str) -> String {
    text.replace("${ClusterName}", POLICY_CLUSTER)
        .replace("${AWS::Region}", POLICY_REGION)
        .replace("${AWS::Partition}", "aws")
        .replace("${AWS::AccountId}", "111122223333")
}

/// The `Allow` statements of the controller's managed policies, substituted.
fn allow_statements() -> Vec<Value> {
    let template = template();
    let mut out = Vec::new();
    for (name, props) in resources_of_type(&template, "AWS::IAM::ManagedPolicy") {
        let document = &props["PolicyDocument"];
        let document: Value = match document.get("Fn::Sub").and_then(Value::as_str) {
            Some(text) => serde_json::from_str(&without_substitutions(&substituted(text)))
                .unwrap_or_else(|e| panic!("{name}: the policy document is not JSON: {e}")),
            None => document.clone(),
        };
        let statements = document["Statement"].as_array().unwrap_or_else(|| panic!("{name}: no Statement list"));
        out.extend(statements.iter().filter(|s| s["Effect"] == "Allow").cloned());
    }
    out
}

/// Whether `statement` allows `action` on `arn` for a request whose condition keys are `context`.
fn allows(statement: &Value, action: &str, arn: &str, context: &BTreeMap<String, String>) -> bool {
    if !as_strings(&statement["Action"]).iter().any(|a| glob(a, action)) {
        return false;
    }
    if !as_strings(&statement["Resource"]).iter().any(|r| glob(r, arn)) {
        return false;
    }
    let Some(conditions) = statement.get("Condition").and_then(Value::as_object) else { return true };
    conditions.iter().all(|(operator, keys)| {
        let Some(keys) = keys.as_object() else { return false };
        keys.iter().all(|(key, wanted)| {
            let Some(value) = context.get(key) else { return false };
            let wanted = as_strings(wanted);
            match operator.as_str() {
                "StringEquals" => wanted.iter().any(|w| w == value),
                "StringLike" => wanted.iter().any(|w| glob(w, value)),
                _ => false,
            }
        })
    })
}

/// Why the policies refuse `action` creating a `resource` tagged `tags`: the missing permission, or `None`.
/// Tagging on creation needs `ec2:CreateTags` for the resource too, with `ec2:CreateAction` naming the call.
fn refusal(
    statements: &[Value],
    action: karpenter_aws::launch::tags::DryRunAction,
    resource: karpenter_aws::launch::tags::TaggedResource,
    tags: &BTreeMap<String, String>,
) -> Option<String> {
    let arn = format!("arn:aws:ec2:{POLICY_REGION}:111122223333:{}/dry-run", resource.as_str());
    let operation = action.iam_action().trim_start_matches("ec2:");
    let mut context: BTreeMap<String, String> =
        tags.iter().map(|(k, v)| (format!("aws:RequestTag/{k}"), v.clone())).collect();
    context.insert("aws:RequestedRegion".into(), POLICY_REGION.into());
    context.insert("ec2:CreateAction".into(), operation.into());
    for needed in [action.iam_action(), "ec2:CreateTags"] {
        if !statements.iter().any(|s| allows(s, needed, &arn, &context)) {
            return Some(format!("{needed} on {} for {operation} tagged {tags:?}", resource.as_str()));
        }
    }
    None
}

fn dry_run_node_class(tags: serde_json::Value) -> karpenter_aws::api::EC2NodeClass {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                 "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": POLICY_CLUSTER}}],
                 "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": POLICY_CLUSTER}}],
                 "tags": tags}
    }))
    .unwrap()
}

#[test]
fn the_policy_evaluator_reads_conditions_as_iam_does() {
    let statement: Value = serde_json::json!({
        "Effect": "Allow", "Action": ["ec2:RunInstances"], "Resource": "arn:aws:ec2:*:*:instance/*",
        "Condition": {"StringEquals": {"aws:RequestTag/a": "x"}, "StringLike": {"aws:RequestTag/b": "*"}}
    });
    let arn = "arn:aws:ec2:us-west-2:1:instance/i-1";
    let context = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (format!("aws:RequestTag/{k}"), v.to_string())).collect()
    };
    assert!(allows(&statement, "ec2:RunInstances", arn, &context(&[("a", "x"), ("b", "")])));
    assert!(!allows(&statement, "ec2:RunInstances", arn, &context(&[("a", "y"), ("b", "1")])));
    assert!(!allows(&statement, "ec2:RunInstances", arn, &context(&[("a", "x")])), "an absent key fails");
    assert!(!allows(&statement, "ec2:CreateFleet", arn, &context(&[("a", "x"), ("b", "1")])));
    assert!(!allows(&statement, "ec2:RunInstances", "arn:aws:ec2:r:1:volume/v", &context(&[("a", "x"), ("b", "1")])));
}

#[test]
fn the_policies_allow_every_validation_dry_run_with_its_tags() {
    use karpenter_aws::launch::tags::{DryRunAction, dry_run_tags};
    let statements = allow_statements();
    // With and without tags of the class's own (a class's tags never replace the launch tags).
    for class_tags in [serde_json::json!({}), serde_json::json!({"team": "a", "Name": "custom"})] {
        let class = dry_run_node_class(class_tags);
        let mut refused = Vec::new();
        for action in DryRunAction::ALL {
            let tagging = dry_run_tags(POLICY_CLUSTER, &class, action);
            assert!(!tagging.request.is_empty(), "{action:?} tags nothing");
            refused.extend(tagging.request.iter().filter_map(|t| refusal(&statements, action, t.resource, &t.tags)));
        }
        assert!(refused.is_empty(), "deploy/cloudformation.yaml refuses the dry runs:\n{}", refused.join("\n"));
    }
}

// The bug this guards against: dry runs tagged with the class's `spec.tags` alone are refused by the same
// policies, so the evaluator above is not vacuous.
#[test]
fn dry_runs_tagged_only_with_the_class_tags_would_be_refused() {
    use karpenter_aws::launch::tags::{DryRunAction, dry_run_tags};
    let statements = allow_statements();
    let class = dry_run_node_class(serde_json::json!({"team": "a"}));
    for action in DryRunAction::ALL {
        for t in dry_run_tags(POLICY_CLUSTER, &class, action).request {
            let class_tags_only = class.spec.tags.clone();
            assert!(
                refusal(&statements, action, t.resource, &class_tags_only).is_some(),
                "{action:?} on {} allowed with the class's tags alone",
                t.resource.as_str()
            );
        }
    }
}

// Upstream's controller policy allows `CreateLaunchTemplate` only when the request tags the template with the
// cluster ownership tag, `eks:eks-cluster-name` and a `karpenter.sh/nodepool` (any value): the tags our real
// launch templates carry meet that condition as well as deploy/cloudformation.yaml's, and without the NodePool
// tag they would not.
#[test]
fn real_launch_templates_carry_the_node_pool_tag_upstreams_policy_asks_for() {
    use karpenter_aws::launch::tags::{DryRunAction, TaggedResource, launch_template_tags};
    let upstream_shaped: Vec<Value> = ["ec2:CreateLaunchTemplate", "ec2:CreateTags"]
        .iter()
        .map(|action| {
            serde_json::json!({
                "Effect": "Allow", "Action": [action],
                "Resource": format!("arn:aws:ec2:{POLICY_REGION}:*:launch-template/*"),
                "Condition": {
                    "StringEquals": {
                        format!("aws:RequestTag/kubernetes.io/cluster/{POLICY_CLUSTER}"): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": POLICY_CLUSTER
                    },
                    "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}
                }
            })
        })
        .collect();
    let ours = allow_statements();
    let class = dry_run_node_class(serde_json::json!({"team": "a"}));
    let tags = launch_template_tags(POLICY_CLUSTER, &class, "general");
    assert_eq!(tags.get("karpenter.sh/nodepool").map(String::as_str), Some("general"));
    for (policy, statements) in [("deploy/cloudformation.yaml", &ours), ("upstream's condition", &upstream_shaped)] {
        let refused = refusal(statements, DryRunAction::CreateLaunchTemplate, TaggedResource::LaunchTemplate, &tags);
        assert_eq!(refused, None, "{policy} refuses our launch template");
    }
    let mut without_pool = tags.clone();
    without_pool.remove("karpenter.sh/nodepool");
    let refused =
        refusal(&upstream_shaped, DryRunAction::CreateLaunchTemplate, TaggedResource::LaunchTemplate, &without_pool);
    assert!(refused.is_some(), "the condition is not vacuous");
}
