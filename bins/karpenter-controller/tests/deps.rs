//! karpenter-api must stay pure: no async runtime, HTTP stack or TLS library in its normal dependencies.

use std::process::Command;

#[test]
fn karpenter_api_pulls_in_no_runtime_or_http_stack() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(cargo)
        .current_dir(&root)
        .args(["tree", "-p", "karpenter-api", "-e", "normal", "--prefix", "none", "--offline"])
        .output()
        .expect("running cargo tree");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    let crates: Vec<&str> = stdout.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(crates.contains(&"karpenter-api") && crates.contains(&"serde"), "unexpected output:\n{stdout}");
    for banned in ["tokio", "hyper", "reqwest", "kube-client", "tower", "openssl", "openssl-sys", "native-tls"] {
        assert!(!crates.contains(&banned), "karpenter-api depends on {banned}:\n{stdout}");
    }
}
