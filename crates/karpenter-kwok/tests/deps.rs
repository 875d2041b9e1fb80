//! karpenter-kwok reaches the controller binary: it must not depend on the test kit (karpenter-testing: the
//! kubelet stand-in lives here) nor pull in a test API server (kube-cel, hyper's server side, kube-runtime) or a
//! TLS stack of its own.

use std::process::Command;

#[test]
fn karpenter_kwok_pulls_in_no_test_server_or_tls() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(cargo)
        .current_dir(&root)
        .args(["tree", "-p", "karpenter-kwok", "-e", "normal,features", "--prefix", "none", "--offline"])
        .output()
        .expect("running cargo tree");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    let crates: Vec<&str> = lines.iter().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(crates.contains(&"kube-client"), "unexpected output:\n{stdout}");
    for banned in ["karpenter-testing", "kube-cel", "kube-runtime", "json-patch", "rustls", "openssl", "native-tls"] {
        assert!(!crates.contains(&banned), "karpenter-kwok depends on {banned}:\n{stdout}");
    }
    assert!(!lines.iter().any(|l| l.starts_with("hyper feature \"server\"")), "karpenter-kwok enables hyper's server");
}
