//! kube-rs's rule for libraries, held for every library crate of the workspace: a library never enables a
//! k8s-openapi version feature (the final binary chooses the Kubernetes version), and the three places that name
//! the version karpenter-rs builds with agree: the binary's feature, `.cargo/config.toml`'s
//! `K8S_OPENAPI_ENABLED_VERSION` (what `cargo doc -p <library>` builds with) and each library's docs.rs features.
//! This lives in karpenter-api's tests because every other library depends on it; it reads the workspace's files.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every library crate published from the workspace.
const LIBRARIES: [&str; 10] = [
    "karpenter-api",
    "karpenter-requirements",
    "karpenter-testing",
    "karpenter-scheduler",
    "karpenter-cloudprovider",
    "karpenter-disruption",
    "karpenter-aws",
    "karpenter-runtime",
    "karpenter-operator",
    "karpenter-kwok",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The `v1_NN` feature the binary enables on k8s-openapi.
fn binary_version_feature() -> String {
    let manifest = read("bins/karpenter-controller/Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.starts_with("k8s-openapi ") && l.contains("features"))
        .expect("the binary's k8s-openapi dependency names its features");
    let start = line.find("\"v1_").expect("a v1_NN feature") + 1;
    let end = start + line[start..].find('"').expect("closing quote");
    line[start..end].to_owned()
}

#[test]
fn no_library_enables_a_kubernetes_version_feature() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    for library in LIBRARIES {
        // Normal edges with features: the library as a dependent sees it (dev-dependencies may pick a version).
        let output = Command::new(&cargo)
            .current_dir(root())
            .args(["tree", "-p", library, "-e", "normal,features", "-i", "k8s-openapi", "--prefix", "none"])
            .arg("--offline")
            .output()
            .expect("running cargo tree");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
        assert!(stdout.contains("k8s-openapi v"), "unexpected output for {library}:\n{stdout}");
        let versions: Vec<&str> = stdout.lines().filter(|l| l.contains("k8s-openapi feature \"v1_")).collect();
        assert!(versions.is_empty(), "{library} enables a k8s-openapi version feature: {versions:?}");
    }
}

#[test]
fn the_workspace_names_one_kubernetes_version() {
    let feature = binary_version_feature();
    let version = feature.replace("v1_", "1.");

    let config = read(".cargo/config.toml");
    let expected = format!("K8S_OPENAPI_ENABLED_VERSION = \"{version}\"");
    assert!(config.lines().any(|l| l.trim() == expected), ".cargo/config.toml lacks `{expected}`");

    for library in LIBRARIES {
        let manifest = read(&format!("crates/{library}/Cargo.toml"));
        let docs_rs = manifest.split("[package.metadata.docs.rs]").nth(1).unwrap_or_else(|| {
            panic!("{library} has no [package.metadata.docs.rs] (docs.rs could not build it: no version feature)")
        });
        let needle = format!("\"k8s-openapi/{feature}\"");
        assert!(docs_rs.contains(&needle), "{library}'s docs.rs features lack {needle}");
    }
}

#[test]
fn every_library_carries_crates_io_metadata() {
    for library in LIBRARIES {
        let manifest = read(&format!("crates/{library}/Cargo.toml"));
        let package = manifest.split("\n[").next().unwrap_or_default();
        for key in
            ["description", "license.workspace", "repository.workspace", "readme.workspace", "keywords", "categories"]
        {
            assert!(package.lines().any(|l| l.starts_with(key)), "{library}'s [package] lacks {key}");
        }
        assert!(package.lines().any(|l| l == "publish = true"), "{library} is not publishable");
    }
}
