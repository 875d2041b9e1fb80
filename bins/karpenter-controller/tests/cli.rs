//! Runs the built `karpenter-controller` binary: `validate` on good and bad manifests, `crds` output.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use karpenter_api::loader::{self, Object};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_karpenter-controller"))
}

fn run(args: &[&str]) -> (i32, String, String) {
    let Output { status, stdout, stderr } = bin().args(args).output().expect("running karpenter-controller");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("karpenter-controller-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating temp dir");
        TempDir(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("writing temp file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn examples_validate_cleanly() {
    let examples = workspace_root().join("examples/manifests");
    let (code, stdout, stderr) = run(&["validate", "-f", examples.to_str().unwrap()]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.starts_with("validated "), "{stdout}");
    assert!(summary.ends_with(": 0 violations"), "{stdout}");
}

const GOOD_POOL: &str = "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: good
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
";

#[test]
fn invalid_manifests_exit_1_and_name_file_document_object_and_path() {
    let tmp = TempDir::new("invalid");
    let pods_and_pools = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: default}}\nspec: {{containers: [{{name: c}}]}}\n---\n{GOOD_POOL}---\n{}",
        GOOD_POOL.replace("name: good", "name: bad").replace("values: [spot]", "values: []")
    );
    let invalid = tmp.write("pools.yaml", &pods_and_pools);
    let typo = tmp.write("typo.yaml", &GOOD_POOL.replace("operator: In", "operater: In"));
    tmp.write("notes.txt", "not a manifest: [");

    let (code, stdout, stderr) = run(&["validate", "-f", tmp.0.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    let violation =
        format!("{}: document 2: NodePool/bad: spec.template.spec.requirements[0].values:", invalid.display());
    assert!(stdout.lines().any(|l| l.starts_with(&violation)), "missing {violation:?} in\n{stdout}");
    let load_error = format!(
        "{}: document 0: NodePool/good: spec.template.spec.requirements[0]: unknown field \"operater\"",
        typo.display()
    );
    assert!(stderr.lines().any(|l| l.starts_with(&load_error)), "missing {load_error:?} in\n{stderr}");
    assert!(!stdout.contains("notes.txt"), "{stdout}");
    // Two NodePools validated (the Pod is loaded, not validated), in the two manifest files.
    let summary = stdout.lines().last().unwrap_or_default();
    assert!(summary.starts_with("validated 2 objects in 2 files: "), "{summary}");
    assert!(summary.ends_with(", 1 load error"), "{summary}");
}

#[test]
fn kwok_provider_validates_kwok_node_classes() {
    let tmp = TempDir::new("kwok");
    let file = tmp.write(
        "kwok.yaml",
        &(GOOD_POOL
            .replace("group: karpenter.k8s.aws, kind: EC2NodeClass", "group: karpenter.kwok.sh, kind: KWOKNodeClass")
            + "---\napiVersion: karpenter.kwok.sh/v1alpha1\nkind: KWOKNodeClass\nmetadata: {name: default}\nspec: {}\n"),
    );
    let (code, stdout, _) = run(&["validate", "--provider", "kwok", "-f", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(stdout.trim(), "validated 2 objects in 1 file: 0 violations");
}

#[test]
fn usage_errors_exit_2() {
    let (code, _, stderr) = run(&["validate"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, _) = run(&["validate", "-f", "x", "--provider", "gcp"]);
    assert_eq!(code, 2);
    let (code, _, _) = run(&["frobnicate"]);
    assert_eq!(code, 2);
}

#[test]
fn missing_file_is_a_load_error() {
    let (code, _, stderr) = run(&["validate", "-f", "/nonexistent/karpenter.yaml"]);
    assert_eq!(code, 1);
    assert!(stderr.starts_with("/nonexistent/karpenter.yaml: "), "{stderr}");
}

fn crd_names(provider: &str) -> Vec<String> {
    let (code, stdout, stderr) = run(&["crds", "--provider", provider]);
    assert_eq!(code, 0, "{stderr}");
    let loaded = loader::load_str(&stdout, "crds.yaml").expect("crds output is valid YAML");
    loaded
        .iter()
        .map(|l| {
            let Object::Unknown(u) = &l.object else { panic!("unexpected {:?}", l.object.kind()) };
            assert_eq!(
                (u.api_version.as_str(), u.kind.as_str()),
                ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
            );
            l.object.name().unwrap_or_default().to_string()
        })
        .collect()
}

#[test]
fn crds_print_the_provider_crds() {
    assert_eq!(
        crd_names("aws"),
        [
            "nodepools.karpenter.sh",
            "nodeclaims.karpenter.sh",
            "nodeoverlays.karpenter.sh",
            "ec2nodeclasses.karpenter.k8s.aws"
        ]
    );
    assert_eq!(
        crd_names("kwok"),
        [
            "nodepools.karpenter.sh",
            "nodeclaims.karpenter.sh",
            "nodeoverlays.karpenter.sh",
            "kwoknodeclasses.karpenter.kwok.sh"
        ]
    );
}

#[test]
fn kubelet_expressions_that_do_not_compile_are_violations() {
    let tmp = TempDir::new("kubelet-cel");
    let class = |kubelet: &str| {
        format!(
            "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: c}}\nspec:\n  role: r\n  \
             amiSelectorTerms: [{{alias: al2023@latest}}]\n  subnetSelectorTerms: [{{tags: {{k: v}}}}]\n  \
             securityGroupSelectorTerms: [{{tags: {{k: v}}}}]\n  kubelet: {kubelet}\n"
        )
    };
    let bad = tmp.write("bad.yaml", &class("{maxPods: \"min(max_pods,\"}"));
    let (code, stdout, _) = run(&["validate", "-f", bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("EC2NodeClass/c: spec.kubelet.maxPods: ") && stdout.contains("KubeletExpressionInvalid"));
    let good =
        tmp.write("good.yaml", &class("{maxPods: \"min(max_pods, 50)\", systemReserved: {cpu: \"vcpus * 10\"}}"));
    let (code, stdout, _) = run(&["validate", "-f", good.to_str().unwrap()]);
    assert_eq!((code, stdout.trim()), (0, "validated 1 object in 1 file: 0 violations"));
}

/// `crds -o json`: one `v1 List` of the same CRDs, as `kubectl get -o json` prints several objects; `-o yaml` is
/// the default multi-document form (what `kubectl apply -f -` and a chart's crds/ take).
#[test]
fn crds_as_a_json_list() {
    let (code, stdout, stderr) = run(&["crds", "--provider", "kwok", "-o", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let list: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!((list["apiVersion"].as_str(), list["kind"].as_str()), (Some("v1"), Some("List")));
    let names: Vec<&str> =
        list["items"].as_array().expect("items").iter().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert_eq!(names, crd_names("kwok"));
    // The same objects as the YAML form.
    let (_, yaml, _) = run(&["crds", "--provider", "kwok"]);
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("YAML documents");
    assert_eq!(list["items"].as_array().expect("items"), &docs);
    let (code, explicit, _) = run(&["crds", "--provider", "kwok", "-o", "yaml"]);
    assert_eq!((code, explicit), (0, yaml));
}
