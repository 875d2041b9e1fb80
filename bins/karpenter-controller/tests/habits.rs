//! Runs `karpenter-controller` for the habits it shares with kubectl: paths positional and with `-f`, `-` for
//! standard input, errors on standard error and a non-zero exit for empty input, quiet ends on a closed pipe,
//! `version`, `completion`, `-o yaml`, the API server's words for negative requests, symlink loops and UTF-16.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"));
    c.current_dir(workspace_root());
    c
}

/// Runs with `stdin` as standard input; (exit code, stdout, stderr).
fn run_with(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running karpenter-controller");
    let mut input = child.stdin.take().expect("stdin");
    // The child may exit before reading everything (usage errors): a failed write is not the test's concern.
    let _ = input.write_all(stdin);
    drop(input);
    let Output { status, stdout, stderr } = child.wait_with_output().expect("waiting");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

fn run(args: &[&str]) -> (i32, String, String) {
    run_with(args, b"")
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("karpenter-controller-habits-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating temp dir");
        TempDir(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).expect("writing temp file");
        path.display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bundled() -> String {
    std::fs::read_to_string(workspace_root().join("examples/simulate/default.yaml")).expect("bundled example")
}

#[test]
fn simulate_reads_stdin_and_f_like_a_positional_path() {
    let (code, from_stdin, stderr) = run_with(&["simulate", "-"], bundled().as_bytes());
    assert_eq!(code, 0, "{stderr}");
    assert!(from_stdin.starts_with("Input: <stdin>\n"), "{from_stdin}");
    assert!(from_stdin.contains("inflate x10"), "{from_stdin}");
    // Notes go to standard error, not into the table.
    assert!(stderr.starts_with("note: KWOKNodeClass/default"), "{stderr}");
    assert!(!from_stdin.contains("note:"), "{from_stdin}");

    let (code, positional, _) = run(&["simulate", "examples/simulate/default.yaml"]);
    assert_eq!(code, 0);
    let (code, with_f, _) = run(&["simulate", "-f", "examples/simulate/default.yaml"]);
    assert_eq!(code, 0);
    assert_eq!(positional, with_f);
    assert_eq!(positional.replace("examples/simulate/default.yaml", "<stdin>"), from_stdin);

    let (code, stdout, stderr) = run_with(&["validate", "-f", "-"], bundled().as_bytes());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "validated 1 object in 1 file: 0 violations\n");
    let (code, stdout, _) = run(&["validate", "examples/simulate/default.yaml"]);
    assert_eq!((code, stdout.as_str()), (0, "validated 1 object in 1 file: 0 violations\n"));
}

#[test]
fn empty_input_exits_1_with_an_error_on_stderr() {
    let (code, stdout, stderr) = run_with(&["simulate", "-"], b"# nothing\n");
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(stderr, "the input holds no objects (<stdin>)\nerror: 1 problem in the input; nothing was simulated\n");
    let tmp = TempDir::new("empty");
    let empty = tmp.write("empty.yaml", b"");
    let (code, _, stderr) = run(&["validate", &empty]);
    assert_eq!(code, 1);
    assert_eq!(stderr, "error: the input holds no objects\n");
    let (code, _, stderr) = run_with(&["simulate", "-", "-f", "-"], bundled().as_bytes());
    assert_eq!(code, 1);
    assert!(stderr.contains("given more than once"), "{stderr}");
}

#[test]
fn closed_pipe_ends_quietly() {
    // Many pods make a long table; the read end is closed before the binary writes it.
    let many: String = (0..400)
        .map(|i| {
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}}}\nspec: {{containers: [{{name: c}}]}}\n---\n")
        })
        .collect();
    let text = format!("{}---\n{many}", bundled());
    for args in [&["simulate", "-"][..], &["completion", "bash"][..]] {
        let mut child = bin()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        drop(child.stdout.take());
        let mut input = child.stdin.take().expect("stdin");
        let _ = input.write_all(text.as_bytes());
        drop(input);
        let Output { status, stderr, .. } = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&stderr);
        assert!(!stderr.contains("panicked") && !stderr.contains("error"), "{args:?}: {stderr}");
        assert_eq!(status.code(), Some(0), "{args:?}: {stderr}");
    }
}

#[test]
fn version_and_completion() {
    let (code, stdout, _) = run(&["version"]);
    assert_eq!(code, 0);
    let expected = format!("karpenter-controller {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(stdout.starts_with(&expected) && stdout.ends_with(")\n"), "{stdout}");
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef karpenter-controller"), ("fish", "complete -c")]
    {
        let (code, stdout, stderr) = run(&["completion", shell]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains(marker) && stdout.contains("simulate"), "{shell}: {stdout}");
    }
    let (code, _, _) = run(&["completion", "powershell"]);
    assert_eq!(code, 2);
}

#[test]
fn yaml_output_parses_and_matches_json() {
    let (code, yaml, stderr) = run(&["simulate", "-o", "yaml"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, json, _) = run(&["simulate", "-o", "json"]);
    assert_eq!(code, 0);
    let from_yaml: serde_json::Value = serde_saphyr::from_str(&yaml).expect("YAML output parses");
    let from_json: serde_json::Value = serde_json::from_str(&json).expect("JSON output parses");
    assert_eq!(from_yaml, from_json);
    assert_eq!(from_yaml["summary"]["podsOnNewNodes"], 10);
    // With JSON and YAML the notes are in the document, not on stderr.
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn negative_requests_are_rejected_naming_object_and_field() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\n\
               spec: {containers: [{name: c, resources: {requests: {cpu: \"-1\", memory: 1Gi}}}]}\n";
    let (code, stdout, stderr) = run_with(&["simulate", "-"], pod.as_bytes());
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(
        stderr,
        "<stdin>: document 0: Pod/shop/web: spec.containers[0].resources.requests[cpu]: Invalid value: \"-1\": \
         must be greater than or equal to 0\nerror: 1 problem in the input; nothing was simulated\n"
    );
    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\nspec:\n  selector: {matchLabels: {a: b}}\n  \
                  template:\n    metadata: {labels: {a: b}}\n    spec: {initContainers: [{name: i, resources: {limits: {memory: -5Mi}}}], \
                  containers: [{name: c}]}\n";
    let (code, stdout, _) = run_with(&["validate", "-"], deploy.as_bytes());
    assert_eq!(code, 1);
    assert!(
        stdout.starts_with(
            "<stdin>: document 0: Deployment/api: spec.template.spec.initContainers[0].resources.limits[memory]: \
             Invalid value: \"-5Mi\": must be greater than or equal to 0\n"
        ),
        "{stdout}"
    );
}

#[cfg(unix)]
#[test]
fn symlink_loops_are_reported_and_do_not_hang() {
    let tmp = TempDir::new("loop");
    std::fs::create_dir_all(tmp.0.join("a")).expect("mkdir");
    tmp.write("a/pool.yaml", bundled().as_bytes());
    std::os::unix::fs::symlink(tmp.0.join("a"), tmp.0.join("a/again")).expect("symlink");
    let dir = tmp.0.display().to_string();
    let (code, stdout, stderr) = run(&["validate", &dir]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stderr.contains("a/again: symbolic link loop"), "{stderr}");
    assert!(stdout.ends_with("validated 1 object in 1 file: 0 violations, 1 load error\n"), "{stdout}");
}

#[test]
fn utf16_input_is_named_in_the_error() {
    let tmp = TempDir::new("utf16");
    let bytes: Vec<u8> = [0xFF, 0xFE].into_iter().chain(bundled().encode_utf16().flat_map(u16::to_le_bytes)).collect();
    let file = tmp.write("windows.yaml", &bytes);
    let (code, _, stderr) = run(&["simulate", &file]);
    assert_eq!(code, 1);
    assert!(stderr.starts_with(&format!("{file}: the text is UTF-16LE")), "{stderr}");
    let (code, _, stderr) = run_with(&["validate", "-"], &bytes);
    assert_eq!(code, 1);
    assert!(stderr.starts_with("<stdin>: the text is UTF-16LE"), "{stderr}");
}

/// An EKS-like dump as `kubectl get nodepools,nodes,pods,deployments -A -o yaml` gives it: no ReplicaSets, pods
/// bound to a node; and the same dump with only the pending pods.
#[test]
fn dumps_without_replica_sets_count_existing_pods_and_pending_only_dumps_warn() {
    let pool = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      \
                nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements:\n      \
                - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}\n";
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {kubernetes.io/hostname: n1}}\n\
                status: {allocatable: {cpu: '4', memory: 16Gi, pods: '110'}, capacity: {cpu: '4', memory: 16Gi, pods: '110'}}\n";
    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\nspec:\n  replicas: 3\n  \
                  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    \
                  spec: {containers: [{name: c, resources: {requests: {cpu: '1'}}}]}\n";
    let pod = |name: &str, node: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  labels: {{app: web, pod-template-hash: 5d8}}\n  \
             ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web-5d8, uid: u, controller: true}}]\n\
             spec: {{{node}containers: [{{name: c, resources: {{requests: {{cpu: '1'}}}}}}]}}\n"
        )
    };
    let old =
        "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: legacy, namespace: default}\nspec: {}\n";
    let full = [pool, node, deploy, &pod("web-5d8-a", "nodeName: n1, "), &pod("web-5d8-b", ""), old].join("---\n");
    let (code, stdout, stderr) = run_with(&["simulate", "-", "-o", "json", "--provider", "aws"], full.as_bytes());
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    // 3 replicas: one running on n1, one pending, one invented.
    assert_eq!(doc["summary"]["pendingPods"], 2, "{stdout}");
    let notes: Vec<&str> = doc["notes"].as_array().expect("notes").iter().filter_map(|n| n.as_str()).collect();
    assert!(
        notes.contains(&"Deployment object at apiVersion extensions/v1beta1 left out (Deployment/default/legacy): only apps/v1 is read"),
        "{notes:?}"
    );
    // The pool's EC2NodeClass puts it on the AWS catalogue, which evaluates the AWS label: no note.
    assert!(
        !notes
            .iter()
            .any(|n| n.starts_with("NodePool default has a requirement on karpenter.k8s.aws/instance-category")),
        "{notes:?}"
    );
    assert!(!notes.iter().any(|n| n.contains("pending pods only")), "{notes:?}");

    let pending_only = [pool, node, deploy, &pod("web-5d8-b", "")].join("---\n");
    let (code, stdout, stderr) = run_with(&["simulate", "-"], pending_only.as_bytes());
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("warning: the input has 1 node but no pod running on any"), "{stderr}");
    assert!(!stdout.contains("warning"), "{stdout}");
}

#[test]
fn run_without_a_reachable_cluster_names_kubeconfig_and_server_once() {
    let tmp = TempDir::new("kubeconfig");
    // Port 1 of the loopback address: nothing listens, the connection is refused at once.
    let kubeconfig = tmp.write(
        "config",
        b"apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
          users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
    );
    let out = bin()
        .args(["run", "--provider", "kwok", "--log-output-paths", "stderr"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("running karpenter-controller");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_else(|| panic!("no error line in {stderr}"));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        line.starts_with(&format!(
            "error: listing KWOKNodeClasses from the Kubernetes API server https://127.0.0.1:1/ (kubeconfig {kubeconfig}): "
        )),
        "{line}"
    );
    assert_eq!(line.matches("Connection refused").count(), 1, "the cause is said once: {line}");
    assert!(!line.contains("CRDs"), "no CRD hint without a 404: {line}");
}
