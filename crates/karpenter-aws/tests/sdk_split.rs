//! The AWS SDK stays behind the `sdk` feature: the SDK-free half and the controller binary without its `aws`
//! feature never compile it, and with it the TLS stack is rustls over ring (no aws-lc-sys C build, no OpenSSL).

use std::process::Command;

fn normal_deps(package: &str, features: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut args = vec!["tree", "-p", package, "-e", "normal", "--prefix", "none", "--offline"];
    for f in features {
        args.extend(["--features", f]);
    }
    let output = Command::new(cargo).current_dir(&root).args(&args).output().expect("running cargo tree");
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let crates: Vec<String> = stdout.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_owned).collect();
    assert!(crates.iter().any(|c| c == package), "unexpected output:\n{stdout}");
    crates
}

fn aws_sdk_crates(crates: &[String]) -> Vec<&String> {
    crates.iter().filter(|c| c.starts_with("aws-sdk-") || c.starts_with("aws-smithy-") || *c == "aws-config").collect()
}

#[test]
fn without_features_nothing_compiles_the_sdk() {
    let aws = normal_deps("karpenter-aws", &[]);
    assert_eq!(aws_sdk_crates(&aws), Vec::<&String>::new());
    let controller = normal_deps("karpenter-controller", &[]);
    assert_eq!(aws_sdk_crates(&controller), Vec::<&String>::new());
}

#[test]
fn the_sdk_feature_uses_rustls_over_ring() {
    let crates = normal_deps("karpenter-aws", &["sdk"]);
    for wanted in
        ["aws-config", "aws-sdk-ec2", "aws-sdk-sqs", "aws-sdk-ssm", "aws-sdk-iam", "aws-sdk-eks", "rustls", "ring"]
    {
        assert!(crates.iter().any(|c| c == wanted), "{wanted} missing with the sdk feature");
    }
    for banned in ["aws-lc-sys", "aws-lc-rs", "openssl-sys", "native-tls"] {
        assert!(!crates.iter().any(|c| c == banned), "the sdk feature pulls {banned}");
    }
}
