//! The operator documents (docs/*.md and README.md) name only things that exist: every repository path
//! (`crates/...`, `bins/...`, `charts/...`, `deploy/...`, ...), every crate-relative test path (`tests/x.rs`, in
//! some crate), and every `cargo test|bench -p <crate> --test|--bench <name>` target. And the settings reference
//! (docs/settings.md, generated from the code) has every environment variable upstream Karpenter reads, but the one
//! docs/migration-from-upstream.md explains.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (name, text) of every operator document.
fn documents() -> Vec<(String, String)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    paths.push(root().join("README.md"));
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            (p.strip_prefix(root()).expect("in the repository").display().to_string(), text)
        })
        .collect()
}

fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-./*".contains(c)
}

/// The path-like words of `text` that start with `prefix` at a word boundary, trailing punctuation dropped.
fn words_starting_with<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices(prefix) {
        if text[..at].chars().next_back().is_some_and(|c| is_path_char(c) || c == '/') {
            continue;
        }
        let len = text[at..].find(|c: char| !is_path_char(c)).unwrap_or(text.len() - at);
        let word = text[at..at + len].trim_end_matches(['.', ',', ':']);
        if word.len() > prefix.len() {
            out.push(word);
        }
    }
    out
}

/// Whether `path` (relative to `base`; `*` matches within one name) names an existing file or directory.
fn exists(base: &Path, path: &str) -> bool {
    let mut dirs = vec![base.to_path_buf()];
    for part in path.trim_end_matches('/').split('/') {
        let mut next = Vec::new();
        for dir in &dirs {
            if let Some((head, tail)) = part.split_once('*') {
                let Ok(entries) = std::fs::read_dir(dir) else { continue };
                for entry in entries.flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.starts_with(head) && name.ends_with(tail) && name.len() >= head.len() + tail.len() {
                        next.push(entry.path());
                    }
                }
            } else if dir.join(part).exists() {
                next.push(dir.join(part));
            }
        }
        dirs = next;
    }
    !dirs.is_empty()
}

/// The directories of the workspace's packages, by package name.
fn package_dirs() -> Vec<(String, PathBuf)> {
    let mut dirs = Vec::new();
    for parent in ["crates", "bins"] {
        for entry in std::fs::read_dir(root().join(parent)).expect("the package folders") {
            dirs.push(entry.expect("a directory entry").path());
        }
    }
    dirs.extend(["benches", "perf", "fuzz"].map(|d| root().join(d)));
    dirs.into_iter()
        .filter_map(|dir| {
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
            let name =
                manifest.lines().find_map(|l| l.strip_prefix("name = ")).map(|n| n.trim_matches('"').to_owned())?;
            Some((name, dir))
        })
        .collect()
}

#[test]
fn every_repository_path_the_documents_name_exists() {
    let roots = ["crates/", "bins/", "charts/", "tools/", "examples/", "deploy/", "fuzz/", "benches/", "perf/", ".ci/"];
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, text) in documents() {
        for prefix in roots {
            for path in words_starting_with(&text, prefix) {
                // `deploy/karpenter` without an extension is kubectl's name of the Deployment, not our deploy/.
                if prefix == "deploy/" && !path.contains('.') {
                    continue;
                }
                checked += 1;
                if !exists(&root(), path) {
                    missing.push(format!("{doc}: {path}"));
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} paths found: the finder is broken");
    assert!(missing.is_empty(), "paths named in the documents that do not exist:\n{}", missing.join("\n"));
}

#[test]
fn every_crate_relative_test_path_exists_in_some_package() {
    let packages = package_dirs();
    let mut missing = Vec::new();
    for (doc, text) in documents() {
        for path in words_starting_with(&text, "tests/") {
            if !packages.iter().any(|(_, dir)| exists(dir, path)) {
                missing.push(format!("{doc}: {path}"));
            }
        }
    }
    assert!(missing.is_empty(), "test paths named in the documents that no package has:\n{}", missing.join("\n"));
}

#[test]
fn every_cargo_test_and_bench_target_the_documents_name_exists() {
    let packages = package_dirs();
    let mut missing = Vec::new();
    let mut checked = BTreeSet::new();
    for (doc, text) in documents() {
        for (at, _) in text.match_indices("cargo ") {
            let line = text[at..].lines().next().unwrap_or_default();
            let words: Vec<&str> =
                line.split_whitespace().map(|w| w.trim_end_matches(['`', ')', ',', '.', ';', ':'])).collect();
            let after = |flag: &str| words.iter().position(|w| *w == flag).and_then(|i| words.get(i + 1)).copied();
            let (Some(package), Some(kind)) = (after("-p"), words.get(1).copied()) else { continue };
            let Some((_, dir)) = packages.iter().find(|(name, _)| name == package) else {
                if !package.starts_with('<') {
                    missing.push(format!("{doc}: no package {package}"));
                }
                continue;
            };
            let (flag, folder) = match kind {
                "test" => ("--test", "tests"),
                "bench" => ("--bench", "benches"),
                _ => continue,
            };
            let Some(target) = after(flag).filter(|t| !t.starts_with(['<', '-'])) else { continue };
            checked.insert(format!("{package} {flag} {target}"));
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
            let declared = manifest.contains(&format!("name = \"{target}\""));
            let as_file = dir.join(folder).join(format!("{target}.rs")).is_file();
            let as_dir = dir.join(folder).join(target).join("main.rs").is_file();
            if !(declared || as_file || as_dir) {
                missing.push(format!("{doc}: cargo {kind} -p {package} {flag} {target}"));
            }
        }
    }
    assert!(checked.len() >= 5, "only {checked:?} found: the finder is broken");
    assert!(missing.is_empty(), "cargo targets named in the documents that do not exist:\n{}", missing.join("\n"));
}

/// Every environment variable upstream Karpenter v1.14's options read (kubernetes-sigs/karpenter and
/// aws/karpenter-provider-aws, pkg/operator/options/options.go).
const UPSTREAM_SETTINGS: &[&str] = &[
    "AMI_REFRESH_INTERVAL",
    "BATCH_IDLE_DURATION",
    "BATCH_MAX_DURATION",
    "CLUSTER_CA_BUNDLE",
    "CLUSTER_ENDPOINT",
    "CLUSTER_NAME",
    "CPU_REQUESTS",
    "DISABLE_CLUSTER_STATE_OBSERVABILITY",
    "DISABLE_CONTROLLER_WARMUP",
    "DISABLE_DRY_RUN",
    "DISABLE_LEADER_ELECTION",
    "EKS_CONTROL_PLANE",
    "ENABLE_PROFILING",
    "ENABLE_ZONAL_SHIFT",
    "FEATURE_GATES",
    "AWS_FEATURE_GATES",
    "HEALTH_PROBE_PORT",
    "IGNORE_DRA_REQUESTS",
    "INTERRUPTION_QUEUE",
    "ISOLATED_VPC",
    "KARPENTER_SERVICE",
    "KUBE_CLIENT_BURST",
    "KUBE_CLIENT_QPS",
    "LEADER_ELECTION_NAME",
    "LEADER_ELECTION_NAMESPACE",
    "LOG_ERROR_OUTPUT_PATHS",
    "LOG_LEVEL",
    "LOG_OUTPUT_PATHS",
    "MEMORY_LIMIT",
    "METRICS_PORT",
    "MIN_VALUES_POLICY",
    "PREFERENCE_POLICY",
    "RESERVED_ENIS",
    "SCHEDULER_CONFIG",
    "SUBNET_REFRESH_INTERVAL",
    "VM_MEMORY_OVERHEAD_PERCENT",
];

/// Upstream settings this build does not read, each explained in docs/migration-from-upstream.md.
const UPSTREAM_SETTINGS_NOT_READ: &[&str] = &["KARPENTER_SERVICE"];

#[test]
fn the_settings_reference_has_every_upstream_setting_but_the_explained_ones() {
    let reference = std::fs::read_to_string(root().join("docs/settings.md")).expect("docs/settings.md");
    let migration = std::fs::read_to_string(root().join("docs/migration-from-upstream.md"))
        .expect("docs/migration-from-upstream.md");
    for env in UPSTREAM_SETTINGS {
        let row = format!("| `{env}` |");
        if UPSTREAM_SETTINGS_NOT_READ.contains(env) {
            assert!(!reference.contains(&row), "{env} is read now: drop it from UPSTREAM_SETTINGS_NOT_READ");
            assert!(migration.contains(&format!("`{env}`")), "docs/migration-from-upstream.md must explain {env}");
        } else {
            assert!(reference.contains(&row), "upstream's {env} is not a setting here (docs/settings.md)");
        }
    }
}

/// Every `.rs` file under `dir`, recursively, with its text.
fn rust_sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                out.push((path, text));
            }
        }
    }
    out
}

/// Whether `name` is a module (a file or folder of that name) or an item (`fn`, `struct`, `enum`, `trait`, `type`,
/// `const`, `macro_rules!`) or a name they re-export (`pub use`) somewhere in these sources.
fn names_a_module_or_item(sources: &[(PathBuf, String)], name: &str) -> bool {
    let module = |p: &PathBuf| {
        p.file_stem().is_some_and(|s| s == name) || p.parent().and_then(|d| d.file_name()).is_some_and(|d| d == name)
    };
    let item = |text: &str| {
        ["fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "macro_rules! "].iter().any(|kw| {
            text.match_indices(&format!("{kw}{name}"))
                .any(|(at, m)| !text[at + m.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        })
    };
    // A crate a library re-exports (`pub use kube;`) is one of its names too.
    let re_export = |text: &str| {
        text.lines()
            .filter(|l| l.trim_start().starts_with("pub use "))
            .any(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).any(|w| w == name))
    };
    sources.iter().any(|(p, text)| module(p) || item(text) || re_export(text))
}

/// docs/architecture.md is a map, so what it names must be there: in each crate's paragraph (`**<package>** ...`),
/// every code word that reads as a Rust name (`loader`, `build_node_claim`, `ClusterSnapshot`, `validate()`) is a
/// module or an item of that package; every `crate_name::path::item` anywhere resolves in the crate it starts with.
#[test]
fn every_module_and_item_the_architecture_map_names_exists() {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let packages = package_dirs();
    let sources_of = |package: &str| {
        let (_, dir) =
            packages.iter().find(|(name, _)| name == package).unwrap_or_else(|| panic!("no package {package}"));
        rust_sources(&dir.join("src"))
    };
    let is_rust_name = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let mut missing = Vec::new();
    let mut checked = 0;
    for paragraph in text.split("\n\n") {
        let Some(rest) = paragraph.strip_prefix("**") else { continue };
        let Some((package, _)) = rest.split_once("**") else { continue };
        if !package.starts_with("karpenter-") {
            continue;
        }
        let sources = sources_of(package);
        for word in paragraph.split('`').skip(1).step_by(2) {
            let word = word.trim_end_matches("()");
            if !is_rust_name(word) || word.contains("::") {
                continue;
            }
            checked += 1;
            if !names_a_module_or_item(&sources, word) {
                missing.push(format!("{package}: `{word}`"));
            }
        }
    }
    for word in text.split('`').skip(1).step_by(2) {
        let Some((krate, path)) = word.split_once("::") else { continue };
        let Some(package) = krate.strip_prefix("karpenter_").map(|k| format!("karpenter-{k}")) else { continue };
        let sources = sources_of(&package);
        for segment in path.split("::") {
            checked += 1;
            if !names_a_module_or_item(&sources, segment) {
                missing.push(format!("{word}: `{segment}`"));
            }
        }
    }
    assert!(checked > 60, "only {checked} names found: the finder is broken");
    assert!(missing.is_empty(), "names in docs/architecture.md that the code does not have:\n{}", missing.join("\n"));
}
