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
    // With JSON and YAML the notes are in the document, not on stderr; only which input ran is said there.
    assert_eq!(
        stderr,
        "note: no input given and standard input is empty; simulating the bundled example \
         examples/simulate/default.yaml\n"
    );
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

/// (exit code, stdout, stderr) with standard input closed at once (`< /dev/null`, as cron and CI give it).
fn run_null_stdin(args: &[&str]) -> (i32, String, String) {
    let Output { status, stdout, stderr } =
        bin().args(args).stdin(Stdio::null()).output().expect("running karpenter-controller");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// Help asked for goes to standard output with exit status 0, as kubectl's does (bare `kubectl` included).
#[test]
fn help_goes_to_stdout_with_exit_0() {
    for args in [&[][..], &["--help"], &["-h"], &["help"], &["help", "simulate"], &["simulate", "--help"]] {
        let (code, stdout, stderr) = run_null_stdin(args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert!(stdout.contains("Usage: karpenter-controller"), "{args:?}: {stdout}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
    let (_, bare, _) = run_null_stdin(&[]);
    let (_, asked, _) = run_null_stdin(&["--help"]);
    for subcommand in ["simulate", "validate", "crds", "version", "run"] {
        assert!(bare.contains(&format!("  {subcommand} ")), "{subcommand} listed: {bare}");
    }
    assert_eq!(bare, asked, "bare invocation prints the --help text");
}

/// One exit status for every usage error (2), value parse errors included; runtime failures exit 1.
#[test]
fn usage_errors_exit_2_and_runtime_failures_exit_1() {
    let usage: &[(&[&str], &str)] = &[
        (&["simulate", "--for", "10x"], "invalid value '10x' for '--for <DURATION>'"),
        (&["simulate", "--scale", "inflate"], "invalid value 'inflate' for '--scale <WORKLOAD=N>'"),
        (&["simulate", "-o", "xml"], "invalid value 'xml'"),
        (&["validate", "-o", "table", "x.yaml"], "invalid value 'table'"),
        (&["crds", "-o", "table"], "invalid value 'table'"),
        (&["version", "-o", "wide"], "invalid value 'wide'"),
        (&["simulate", "--no-such-flag"], "unexpected argument '--no-such-flag'"),
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
        (&["validate"], "required"),
    ];
    for (args, message) in usage {
        let (code, stdout, stderr) = run_null_stdin(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(stderr.starts_with("error: ") && stderr.contains(message), "{args:?}: {stderr}");
    }
    // A good --for still runs (the value is checked while parsing and used by the simulation).
    let (code, stdout, stderr) = run_null_stdin(&["simulate", "--for", "10m"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("10m"), "{stdout}");
    for args in [&["simulate", "/nonexistent/cluster.yaml"][..], &["validate", "/nonexistent/cluster.yaml"]] {
        let (code, _, stderr) = run_null_stdin(args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
    }
}

/// Piped input is never ignored: `... | simulate` reads it; with nothing piped the bundled example runs and
/// standard error says so.
#[test]
fn simulate_without_a_path_reads_piped_stdin_else_says_it_runs_the_bundled_example() {
    let three = bundled().replace("replicas: 10", "replicas: 3");
    assert_ne!(three, bundled(), "the bundled example has 10 replicas");
    let (code, stdout, stderr) = run_with(&["simulate"], three.as_bytes());
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("Input: <stdin>\n"), "{stdout}");
    assert!(stdout.contains("inflate x3"), "{stdout}");
    assert!(!stderr.contains("bundled example"), "{stderr}");
    // `-` says the same explicitly.
    let (code, explicit, _) = run_with(&["simulate", "-"], three.as_bytes());
    assert_eq!((code, explicit), (0, stdout));

    // Piped but not manifests: an error about standard input, not a silent bundled run.
    let (code, stdout, stderr) = run_with(&["simulate", "-o", "json"], b"# nothing here\n");
    assert_eq!(code, 1, "{stdout}");
    assert!(stderr.starts_with("the input holds no objects (<stdin>)\n"), "{stderr}");

    let note = "note: no input given and standard input is empty; simulating the bundled example \
                examples/simulate/default.yaml\n";
    for (code, stdout, stderr) in [run_with(&["simulate"], b""), run_null_stdin(&["simulate"])] {
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.starts_with("Input: examples/simulate/default.yaml (the bundled example"), "{stdout}");
        assert!(stdout.contains("inflate x10"), "{stdout}");
        assert!(stderr.starts_with(note), "{stderr}");
    }
    // With JSON the note is on standard error too (the document says bundledExample: true).
    let (code, stdout, stderr) = run_with(&["simulate", "-o", "json"], b"");
    assert_eq!(code, 0);
    assert_eq!(stderr, note);
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(doc["bundledExample"], true);
}

/// `simulate examples/simulate` runs on the repo's own example folder: the instance-type JSON beside the
/// manifests is skipped with a warning naming each file; named explicitly it is an error saying what it is.
#[test]
fn directories_skip_files_that_are_not_manifests() {
    let (code, stdout, stderr) = run(&["simulate", "examples/simulate"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("Input: examples/simulate\n"), "{stdout}");
    for file in ["dra-instance-types.json", "instance-types.json"] {
        let warning = format!(
            "warning: examples/simulate/{file} skipped: a list of instance types (upstream's kwok format), not \
             Kubernetes objects (simulate reads it with --instance-types)\n"
        );
        assert!(stderr.contains(&warning), "{file}: {stderr}");
    }
    assert!(!stderr.contains("apiVersion"), "{stderr}");
    // The JSON document lists the skipped files among its notes; the warnings reach standard error as well.
    let (code, stdout, stderr) = run(&["simulate", "examples/simulate", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stderr.matches(" skipped: ").count(), 2, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let notes = doc["notes"].to_string();
    assert!(notes.contains("examples/simulate/instance-types.json skipped"), "{notes}");

    // validate reads directories the same way; skipped files are not counted.
    let (code, stdout, stderr) = run(&["validate", "examples/simulate"]);
    assert_eq!(code, 0, "{stderr}");
    let yaml_files = std::fs::read_dir(workspace_root().join("examples/simulate"))
        .expect("examples/simulate")
        .filter(|e| e.as_ref().is_ok_and(|e| e.path().extension().is_some_and(|x| x == "yaml")))
        .count();
    assert!(stdout.contains(&format!(" in {yaml_files} files: 0 violations")), "{stdout}");
    assert_eq!(stderr.matches(" skipped: ").count(), 2, "{stderr}");

    // Named explicitly: one error saying what the file is.
    let (code, stdout, stderr) = run(&["simulate", "examples/simulate/instance-types.json"]);
    assert_eq!(code, 1, "{stdout}");
    assert_eq!(
        stderr,
        "examples/simulate/instance-types.json: not a manifest: a list of instance types (upstream's kwok \
         format), not Kubernetes objects (simulate reads it with --instance-types)\n\
         error: 1 problem in the input; nothing was simulated\n"
    );
    let (code, _, stderr) = run_with(&["validate", "-"], b"{\"name\": \"x\", \"size\": 3}\n");
    assert_eq!(code, 1);
    assert!(stderr.starts_with("<stdin>: not a manifest: no document has an apiVersion or a kind\n"), "{stderr}");
}

/// A directory's malformed manifest is still an error naming file, document and field; a file of the same
/// directory that holds no object at all (a values file) is skipped.
#[test]
fn malformed_manifests_in_a_directory_are_errors_not_skipped() {
    let tmp = TempDir::new("mixed");
    tmp.write("values.yaml", b"replicaCount: 2\nimage: {tag: v1}\n");
    tmp.write("README.md", b"# not read: only .yaml, .yml and .json are\n");
    let pool = bundled().split("\n---\n").next().expect("a NodePool").to_owned();
    let bad = tmp.write("pool.yaml", pool.replace("operator: In", "operater: In").as_bytes());
    let no_kind = tmp.write("no-kind.yaml", b"apiVersion: v1\nmetadata: {name: x}\n");
    let dir = tmp.0.display().to_string();
    let (code, stdout, stderr) = run(&["simulate", &dir]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stderr.contains(&format!("warning: {dir}/values.yaml skipped: no document has an apiVersion or a kind")));
    assert!(
        stderr.contains(&format!(
            "{bad}: document 0: NodePool/default: spec.template.spec.requirements[0]: unknown field \"operater\""
        )),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("{no_kind}: document 0")), "{stderr}");
    assert!(!stderr.contains("README"), "{stderr}");
}

/// `version -o json|yaml` and the human line carry the commit build.rs recorded: in a git checkout, a commit of
/// this repository.
#[test]
fn version_output_formats_carry_the_commit() {
    let (code, json, stderr) = run(&["version", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let (code, yaml, _) = run(&["version", "-o", "yaml"]);
    assert_eq!(code, 0);
    let from_yaml: serde_json::Value = serde_saphyr::from_str(&yaml).expect("YAML");
    assert_eq!(doc, from_yaml);
    assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
    let commit = doc["gitCommit"].as_str().expect("gitCommit").to_owned();
    assert!(doc["rustVersion"].as_str().is_some_and(|v| v.split('.').count() == 3), "{doc}");
    assert_eq!(doc["platform"], format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH));
    let (_, line, _) = run(&["version"]);
    assert_eq!(line, format!("karpenter-controller {} (commit {commit})\n", env!("CARGO_PKG_VERSION")));
    let (code, flag, _) = run(&["--version"]);
    assert_eq!((code, flag), (0, line));
    // Built in this checkout (no KARPENTER_GIT_COMMIT): git knows the commit.
    let known = Command::new("git")
        .args(["cat-file", "-t", &commit])
        .current_dir(workspace_root())
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout == b"commit\n");
    if workspace_root().join(".git").exists() && std::env::var_os("KARPENTER_GIT_COMMIT").is_none() {
        assert!(known, "{commit} is not a commit of this repository");
    }
}

/// `validate -o json|yaml`: the counts, each violation by field, the load errors; the exit status as the line form.
#[test]
fn validate_output_formats() {
    let bad = bundled().replace("values: [\"linux\"]", "values: []").replace("values: [linux]", "values: []");
    assert_ne!(bad, bundled());
    let (code, lines, _) = run_with(&["validate", "-"], bad.as_bytes());
    assert_eq!(code, 1);
    let (code, json, stderr) = run_with(&["validate", "-", "-o", "json"], bad.as_bytes());
    assert_eq!(code, 1, "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!((doc["files"].as_u64(), doc["objects"].as_u64()), (Some(1), Some(1)), "{doc}");
    let v = &doc["violations"][0];
    assert_eq!(v["file"], "<stdin>");
    assert_eq!(v["document"], 0);
    assert_eq!(v["object"], "NodePool/default");
    assert_eq!(v["field"], "spec.template.spec.requirements[0].values");
    let line = format!(
        "<stdin>: document 0: NodePool/default: spec.template.spec.requirements[0].values: {}\n",
        v["message"].as_str().expect("message")
    );
    assert!(lines.starts_with(&line), "the line form says the same: {lines}");
    let (code, yaml, _) = run_with(&["validate", "-", "-o", "yaml"], bad.as_bytes());
    assert_eq!(code, 1);
    assert_eq!(serde_saphyr::from_str::<serde_json::Value>(&yaml).expect("YAML"), doc);
    let (code, json, _) = run_with(&["validate", "-f", "-", "-o", "json"], bundled().as_bytes());
    assert_eq!(code, 0);
    let doc: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(doc["violations"], serde_json::json!([]));
    assert_eq!(doc["loadErrors"], serde_json::json!([]));
}
