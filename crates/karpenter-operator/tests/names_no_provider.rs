//! The operator names no provider (issue 35 item 7): its production code takes every node-class kind through
//! `NodeClassRegistration`, so a new cloud is its crate plus an entry in the binary. This fails when a
//! provider's kind, API group or crate shows up in the operator's sources outside its tests (files named
//! `tests.rs` or `*_tests.rs`, and the `#[cfg(test)] mod tests` that ends a file). Prose about upstream's
//! providers ("as upstream's AWS provider does") is fine; their names in code or docs are not.

use std::path::{Path, PathBuf};

/// What only a provider's code has a reason to name: its node-class kinds, API groups and crates, and the
/// karpenter-api modules holding its types.
const PROVIDER_NAMES: [&str; 10] = [
    "EC2NodeClass",
    "KWOKNodeClass",
    "karpenter.k8s.aws",
    "karpenter.kwok.sh",
    "karpenter_aws",
    "karpenter_kwok",
    "karpenter_api::ec2nodeclass",
    "karpenter_api::kwok",
    "ec2nodeclass::",
    "kwok::",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name != "tests.rs" && !name.ends_with("_tests.rs") {
                out.push(path);
            }
        }
    }
}

/// `text` without its trailing test module: from a `#[cfg(test)]` line followed by `mod tests` to the end.
fn production_part(text: &str) -> &str {
    let mut offset = 0;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" && lines.peek().is_some_and(|next| next.trim_start().starts_with("mod tests"))
        {
            return &text[..offset];
        }
        offset += line.len() + 1;
    }
    text
}

/// Each line of `text` (a source file) naming a provider in its production part, as `file:line: name: line`.
fn provider_names(file: &str, text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (i, line) in production_part(text).lines().enumerate() {
        if let Some(name) = PROVIDER_NAMES.iter().find(|n| line.contains(**n)) {
            found.push(format!("{file}:{}: {name}: {}", i + 1, line.trim()));
        }
    }
    found
}

#[test]
fn the_operators_production_code_names_no_provider() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 30, "found the sources: {}", files.len());
    let found: Vec<String> = files
        .iter()
        .flat_map(|f| provider_names(&f.display().to_string(), &std::fs::read_to_string(f).unwrap_or_default()))
        .collect();
    assert!(found.is_empty(), "provider names in the operator's production code:\n{}", found.join("\n"));
}

/// The scan sees a name in code and docs, and skips only the trailing test module.
#[test]
fn the_scan_finds_names_outside_the_test_module_only() {
    let text = "//! Reads EC2NodeClasses.\nuse karpenter_kwok::X;\nfn f() {}\n#[cfg(test)]\nmod tests {\n    use karpenter_api::KWOKNodeClass;\n}\n";
    let found = provider_names("f.rs", text);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("f.rs:1: EC2NodeClass") && found[1].starts_with("f.rs:2: karpenter_kwok"));
    assert!(provider_names("g.rs", "#[cfg(test)]\nmod tests;\n").is_empty());
    let middle = "#[cfg(test)]\nfn helper() {}\nconst K: &str = \"karpenter.kwok.sh\";\n";
    assert_eq!(provider_names("h.rs", middle).len(), 1, "a cfg(test) item that is not the test module is scanned");
}
