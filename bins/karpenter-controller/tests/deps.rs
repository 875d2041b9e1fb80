//! The pure crates stay pure: no async runtime, Kubernetes client, HTTP stack, TLS library or AWS SDK in their
//! normal dependencies (default features). They take data and return decisions; the IO lives in the operator,
//! the providers and the binary. And the provider boundary points one way: providers depend on
//! karpenter-cloudprovider, never it (nor its tests) on a provider.

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
