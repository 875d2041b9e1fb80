//! The pure crates stay pure: no async runtime, Kubernetes client, HTTP stack, TLS library or AWS SDK in their
//! normal dependencies (default features). They take data and return decisions; the IO lives in the operator,
//! the providers and the binary. And the provider boundary points one way: providers depend on
//! karpenter-cloudprovider, never it (nor its tests) on a provider. Every crate depends only on lower floors.

use std::process::Command;

/// The crates that must do no IO, with default features.
const PURE_CRATES: [&str; 5] = [
    "karpenter-requirements",
    "karpenter-api",
    "karpenter-scheduler",
    "karpenter-disruption",
    "karpenter-cloudprovider",
];

/// Crates that mean IO: an async runtime, the Kubernetes client (kube's `client` feature pulls in `kube-client`),
/// an HTTP stack or a TLS library.
const BANNED: [&str; 9] =
    ["tokio", "hyper", "reqwest", "kube-client", "tower", "tower-http", "openssl", "openssl-sys", "native-tls"];

/// The names of the crates in `package`'s normal dependency tree (itself included).
fn normal_dependencies(package: &str) -> Vec<String> {
    dependencies(package, "normal")
}

/// The names of the crates in `package`'s dependency tree over the `edges` kinds (`cargo tree -e`), itself included.
fn dependencies(package: &str, edges: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(cargo)
        .current_dir(&root)
        .args(["tree", "-p", package, "-e", edges, "--prefix", "none", "--offline"])
        .output()
        .expect("running cargo tree");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    let crates: Vec<String> = stdout.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_owned).collect();
    assert!(crates.iter().any(|c| c == package), "unexpected output:\n{stdout}");
    crates
}

#[test]
fn karpenter_api_pulls_in_no_runtime_or_http_stack() {
    let crates = normal_dependencies("karpenter-api");
    assert!(crates.iter().any(|c| c == "serde"), "unexpected output: {crates:?}");
    for banned in BANNED {
        assert!(!crates.iter().any(|c| c == banned), "karpenter-api depends on {banned}: {crates:?}");
    }
}

#[test]
fn pure_crates_pull_in_no_runtime_client_http_stack_or_aws_sdk() {
    for package in PURE_CRATES {
        let crates = normal_dependencies(package);
        let impure: Vec<&String> =
            crates.iter().filter(|c| BANNED.contains(&c.as_str()) || c.starts_with("aws-sdk-")).collect();
        assert!(impure.is_empty(), "{package} depends on {impure:?}");
    }
}

/// The fake provider and the launch rule in karpenter-cloudprovider take instance types as data; the catalogues
/// belong to the providers' crates, which depend on this one. A normal dependency back would be a cycle Cargo
/// refuses, so the edge to guard against is a dev-dependency (which would give the crate's tests a second copy of
/// its own types, through the provider).
#[test]
fn karpenter_cloudprovider_depends_on_no_provider_even_in_its_tests() {
    let crates = dependencies("karpenter-cloudprovider", "normal,dev");
    assert!(crates.iter().any(|c| c == "karpenter-requirements"), "unexpected output: {crates:?}");
    for provider in ["karpenter-kwok", "karpenter-aws"] {
        assert!(!crates.iter().any(|c| c == provider), "karpenter-cloudprovider depends on {provider}: {crates:?}");
    }
}

/// The default build of the binary (the README's `cargo run -p karpenter-controller -- simulate`) compiles no AWS
/// SDK: simulate's AWS catalogue and the provider's settings come from karpenter-aws without its `sdk` feature.
#[test]
fn karpenter_controller_default_build_has_no_aws_sdk() {
    let crates = normal_dependencies("karpenter-controller");
    assert!(crates.iter().any(|c| c == "karpenter-aws"), "unexpected output: {crates:?}");
    let sdk: Vec<&String> =
        crates.iter().filter(|c| c.starts_with("aws-sdk-") || c.starts_with("aws-config")).collect();
    assert!(sdk.is_empty(), "karpenter-controller's default features pull in {sdk:?}");
}

/// The workspace's floors, bottom up (docs/architecture.md, "Layers"): a crate depends only on crates of lower
/// floors. karpenter-testing serves every floor's tests and is left out.
const FLOORS: [&[&str]; 9] = [
    &["karpenter-requirements"],
    &["karpenter-api"],
    &["karpenter-scheduler"],
    &["karpenter-disruption"],
    &["karpenter-cloudprovider"],
    &["karpenter-runtime"],
    &["karpenter-aws", "karpenter-kwok"],
    &["karpenter-operator"],
    &["karpenter-controller"],
];

fn floor_of(krate: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&krate))
}

/// Every workspace crate's direct normal dependencies among our crates are on a floor below its own.
#[test]
fn crates_depend_only_on_lower_floors() {
    for (floor, crates) in FLOORS.iter().enumerate() {
        for krate in *crates {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            let output = Command::new(cargo)
                .current_dir(&root)
                .args(["tree", "-p", krate, "-e", "normal", "--depth", "1", "--prefix", "none", "--offline"])
                .output()
                .expect("running cargo tree");
            assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
            let stdout = String::from_utf8_lossy(&output.stdout);
            let ours = stdout
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .filter(|c| c.starts_with("karpenter-") && c != krate && *c != "karpenter-testing");
            for dependency in ours {
                let below = floor_of(dependency).unwrap_or_else(|| panic!("{dependency} is on no floor of FLOORS"));
                assert!(below < floor, "{krate} (floor {floor}) depends on {dependency} (floor {below})");
            }
        }
    }
}

/// karpenter-runtime is what controllers run on and knows none of them: neither it nor its tests depend on the
/// operator, a provider or the decision crates the controllers drive.
#[test]
fn karpenter_runtime_names_no_controller_or_provider() {
    let crates = dependencies("karpenter-runtime", "normal,dev");
    assert!(crates.iter().any(|c| c == "prometheus-client"), "unexpected output: {crates:?}");
    for banned in
        ["karpenter-operator", "karpenter-aws", "karpenter-kwok", "karpenter-scheduler", "karpenter-disruption"]
    {
        assert!(!crates.iter().any(|c| c == banned), "karpenter-runtime depends on {banned}: {crates:?}");
    }
    // The sources may mention the operator in prose (which tests provoke a family), never import from it.
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crates/karpenter-runtime/src");
    let mut stack = vec![src];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("the runtime's sources").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for line in text.lines().map(str::trim_start).filter(|l| !l.starts_with("//") && !l.starts_with('"')) {
                let code = line.split('"').step_by(2).collect::<String>();
                for krate in ["karpenter_operator", "karpenter_aws", "karpenter_kwok", "karpenter_controller"] {
                    assert!(!code.contains(krate), "{} names {krate}: {line}", path.display());
                }
            }
        }
    }
}

/// The dependencies a library user of the scheduler may leave out (issue 35 item 5), each behind a feature:
/// (crate, the scheduler feature that brings it).
const OPTIONAL_FOR_LIBRARIES: [(&str, &str); 3] =
    [("kube-cel", "dra-cel"), ("serde-saphyr", "yaml"), ("chrono-tz", "time-zones")];

/// `karpenter-scheduler` with `default-features = false` compiles none of them; with its defaults, and in the
/// binary, all of them are there (the controller evaluates CEL selectors, reads YAML and budget time zones).
#[test]
fn the_scheduler_without_default_features_leaves_out_cel_yaml_and_time_zones() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(cargo)
        .current_dir(&root)
        .args(["tree", "-p", "karpenter-scheduler", "-e", "normal", "--prefix", "none", "--offline"])
        .arg("--no-default-features")
        .output()
        .expect("running cargo tree");
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    let lean: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    assert!(lean.iter().any(|c| c == "karpenter-api"), "unexpected output: {lean:?}");
    let full = normal_dependencies("karpenter-scheduler");
    let binary = normal_dependencies("karpenter-controller");
    for (krate, feature) in OPTIONAL_FOR_LIBRARIES {
        assert!(!lean.iter().any(|c| c == krate), "{krate} is compiled without the scheduler's `{feature}` feature");
        assert!(full.iter().any(|c| c == krate), "{krate} missing from the scheduler's default features");
        assert!(binary.iter().any(|c| c == krate), "{krate} missing from the binary");
    }
}

/// The core crates whose production code must name no provider: a provider (its NodeClass API, labels, CRDs) is
/// one crate plugged in through values (`karpenter_api::node_class_api`, `ProviderLabels`), never named below it.
const CORE_CRATES: [&str; 7] = [
    "karpenter-api",
    "karpenter-requirements",
    "karpenter-scheduler",
    "karpenter-disruption",
    "karpenter-cloudprovider",
    "karpenter-runtime",
    "karpenter-operator",
];

/// What names a provider: its node-class kinds, its API groups, its crates.
const PROVIDER_NAMES: [&str; 6] =
    ["EC2NodeClass", "KWOKNodeClass", "karpenter.k8s.aws", "karpenter.kwok.sh", "karpenter_aws", "karpenter_kwok"];

/// Production files that still name a provider, with how many times: the work left (issue 35 item 7). Each entry
/// says what is left; the count must match exactly, so a new mention fails and a removed one asks for the entry
/// to shrink.
const PROVIDER_NAMES_LEFT: [(&str, usize); 2] = [
    // The capacity-reservation label the algebra's offerings carry (`karpenter.k8s.aws/capacity-reservation-id`):
    // offerings, the scheduler's reservation pinning and launches read it by this one key (upstream's core has it
    // as a variable the provider sets); making it a provider's value threads it through the scheduler's options.
    ("crates/karpenter-requirements/src/labels.rs", 1),
    // The in-memory fake stands in for the kwok provider and serves its node-class kind by name (as it takes
    // kwok's label set, built from that group by `fake::stand_in_labels()`, by default, and most tests build
    // NodeClaims of that kind for it).
    ("crates/karpenter-cloudprovider/src/fake.rs", 2),
];

/// `text` without `#[cfg(test)] mod x { ... }` blocks (a test may name anything).
fn without_test_modules(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let opens_test_module = lines[i].trim() == "#[cfg(test)]"
            && lines.get(i + 1).is_some_and(|l| {
                let item = l.trim_start().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
                item.starts_with("mod ") && l.trim_end().ends_with('{')
            });
        if opens_test_module {
            let mut depth = 0i64;
            let mut j = i + 1;
            while j < lines.len() {
                depth += lines[j].matches('{').count() as i64 - lines[j].matches('}').count() as i64;
                j += 1;
                if depth <= 0 {
                    break;
                }
            }
            i = j;
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

/// Files of `dir` (recursively) that are test modules by name or by a `#[cfg(test)] mod x;` in their parent.
fn production_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("the crate's sources").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut test_modules = std::collections::BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            if pair[0] == "#[cfg(test)]"
                && let Some(name) = pair[1].strip_prefix("mod ").and_then(|r| r.strip_suffix(';'))
            {
                // `a.rs` declares `a/<name>.rs`; `lib.rs` and `mod.rs` declare `<name>.rs` beside them.
                let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
                let parent = file.parent().expect("a file has a directory");
                let base = if stem == "lib" || stem == "mod" { parent.to_path_buf() } else { parent.join(stem) };
                test_modules.insert(base.join(format!("{name}.rs")));
            }
        }
    }
    files.retain(|f| {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        !name.ends_with("tests.rs") && !test_modules.contains(f)
    });
    files.sort();
    files
}

/// The core crates' production code names no provider (beyond the pinned [`PROVIDER_NAMES_LEFT`]). Left out, as a
/// test may name anything: `#[cfg(test)]` modules and test files; and comments, doc comments included (prose
/// and doc examples may say where upstream's kinds live; what couples a crate to a provider is its code).
#[test]
fn core_crates_name_no_provider() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut found: Vec<(String, usize)> = Vec::new();
    for krate in CORE_CRATES {
        for file in production_files(&root.join("crates").join(krate).join("src")) {
            let text = without_test_modules(&std::fs::read_to_string(&file).expect("a source file"));
            let count: usize = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .map(|l| PROVIDER_NAMES.iter().map(|name| l.matches(name).count()).sum::<usize>())
                .sum();
            if count > 0 {
                let relative = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
                found.push((relative, count));
            }
        }
    }
    let expected: Vec<(String, usize)> = PROVIDER_NAMES_LEFT.iter().map(|(f, n)| ((*f).to_owned(), *n)).collect();
    let mut found_sorted = found.clone();
    found_sorted.sort();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(
        found_sorted, expected_sorted,
        "production files of the core crates naming a provider (file, mentions) differ from PROVIDER_NAMES_LEFT: \
         a new mention belongs in the provider's crate; a removed one shrinks the list"
    );
}

/// The scanner sees what it must: code in a test module is left out, a mention in code is counted.
#[test]
fn the_provider_name_scan_skips_test_modules_only() {
    for visibility in ["", "pub(crate) ", "pub "] {
        let text = format!(
            "const A: &str = \"karpenter.kwok.sh\";\n// EC2NodeClass in prose\n#[cfg(test)]\n{visibility}mod tests {{\n    \
             fn f() {{ let _ = \"EC2NodeClass\"; }}\n}}\nconst B: u8 = 0;\n"
        );
        let kept = without_test_modules(&text);
        assert!(kept.contains("karpenter.kwok.sh") && kept.contains("const B") && !kept.contains("fn f()"), "{kept}");
    }
}
