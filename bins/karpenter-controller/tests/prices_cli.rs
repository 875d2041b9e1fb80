//! `karpenter-controller prices` and `PRICE_FILE`: the command's flags; without the `aws` build feature it fails
//! naming the feature; with it, a price file is written from a Pricing API (a local stand-in speaking the
//! awsJson 1.1 protocol, selected with `AWS_ENDPOINT_URL`), and a malformed `PRICE_FILE` stops `run` before it
//! starts anything, with an error naming the file.

use std::path::PathBuf;
use std::process::{Command, Output};

fn run_with(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_karpenter-controller"));
    command.args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    let Output { status, stdout, stderr } = command.output().expect("running the binary");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

fn run(args: &[&str]) -> (i32, String, String) {
    run_with(args, &[])
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("karpenter-prices-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating a temp dir");
        TempDir(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn prices_help_and_usage() {
    let (code, help, stderr) = run(&["prices", "--help"]);
    assert_eq!(code, 0, "{stderr}");
    for flag in ["--region", "--output", "--include-spot", "PRICE_FILE", "pricing:GetProducts"] {
        assert!(help.contains(flag), "{flag}:\n{help}");
    }
    let (code, _, stderr) = run(&["prices", "--output", "/tmp/never-written.json"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--region"), "{stderr}");
    let (code, help, _) = run(&["run", "--help"]);
    assert_eq!(code, 0);
    assert!(help.contains("--price-file") && help.contains("env: PRICE_FILE"), "{help}");
}

#[cfg(not(feature = "aws"))]
#[test]
fn prices_without_the_feature_fails_clearly_and_writes_nothing() {
    let dir = TempDir::new("nofeature");
    let out = dir.path("prices.json");
    let (code, _, stderr) = run(&["prices", "--region", "us-east-1", "--output", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("`aws` cargo feature") && stderr.contains("--features aws"), "{stderr}");
    assert!(!out.exists());
}

#[cfg(not(feature = "aws"))]
#[test]
fn catalogue_without_the_feature_fails_clearly_and_writes_nothing() {
    let dir = TempDir::new("nofeature-catalogue");
    let out = dir.path("catalogue.json.gz");
    let (code, _, stderr) = run(&["catalogue", "--region", "us-east-1", "--output", out.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("`aws` cargo feature") && stderr.contains("cannot call EC2"), "{stderr}");
    assert!(!out.exists());
}

// The moto server helper of karpenter-aws's tests (started from the same virtualenv, skipped the same way).
#[cfg(feature = "aws")]
#[allow(dead_code)]
#[path = "../../../crates/karpenter-aws/tests/common/moto.rs"]
mod moto;

#[cfg(feature = "aws")]
mod aws {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    use super::*;

    /// Credentials and config that keep the SDK off the real AWS, IMDS and the user's profile.
    fn offline_env(endpoint: &str) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", endpoint.to_owned()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
            ("AWS_CONFIG_FILE", "/nonexistent/aws-config".into()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials".into()),
            ("AWS_MAX_ATTEMPTS", "1".into()),
        ]
    }

    fn price_document(instance_type: &str, usd: &str) -> String {
        serde_json::json!({
            "product": {"productFamily": "Compute Instance", "attributes": {"instanceType": instance_type}},
            "terms": {"OnDemand": {"T": {"priceDimensions": {"T.D": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}}}}
        })
        .to_string()
    }

    /// A Pricing API stand-in: `GetProducts` answers two prices for us-east-1 and none for any other region.
    /// Returns its URL; serves until the test process ends.
    fn pricing_api() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding");
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let mut reader = BufReader::new(stream);
                let mut length = 0usize;
                let mut line = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    if let Some((k, v)) = line.split_once(':')
                        && k.eq_ignore_ascii_case("content-length")
                    {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let body = String::from_utf8_lossy(&body);
                let list: Vec<String> = if body.contains("\"us-east-1\"") {
                    vec![price_document("m5.large", "0.0960000000"), price_document("c5.large", "0.0850000000")]
                } else {
                    vec![]
                };
                let answer = serde_json::json!({"FormatVersion": "aws_v1", "PriceList": list}).to_string();
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        url
    }

    #[test]
    fn prices_writes_a_price_file_from_the_pricing_api() {
        let endpoint = pricing_api();
        let env = offline_env(&endpoint);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let dir = TempDir::new("write");
        let out = dir.path("prices.json");
        let (code, _, stderr) = run_with(&["prices", "--region", "us-east-1", "--output", out.to_str().unwrap()], &env);
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("us-east-1: 2 on-demand prices"), "{stderr}");
        let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(
            written,
            serde_json::json!({"onDemand": {"us-east-1": {"c5.large": 0.085, "m5.large": 0.096}}}),
            "the PRICE_FILE format"
        );

        // A region without prices: an error naming it, and the existing file is left as it was.
        let before = std::fs::read(&out).unwrap();
        let (code, _, stderr) = run_with(
            &["prices", "--region", "us-east-1", "--region", "us-wset-2", "--output", out.to_str().unwrap()],
            &env,
        );
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains("pricing us-wset-2") && stderr.contains("no on-demand Linux prices"), "{stderr}");
        assert_eq!(std::fs::read(&out).unwrap(), before);

        // Standard output.
        let (code, stdout, stderr) = run_with(&["prices", "--region", "us-east-1", "--output", "-"], &env);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&stdout).unwrap(), written);
    }

    #[test]
    fn a_malformed_price_file_stops_the_controller_naming_the_file() {
        let dir = TempDir::new("malformed");
        let bad = dir.path("prices.json");
        std::fs::write(&bad, r#"{"onDemand": {"us-east-1": {"m5.large": -1}}}"#).unwrap();
        let bad = bad.to_str().unwrap();
        let (code, _, stderr) = run(&["run", "--provider", "aws", "--cluster-name", "prod", "--price-file", bad]);
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains("PRICE_FILE") && stderr.contains(bad), "{stderr}");
        assert!(stderr.contains("on-demand price of m5.large in us-east-1 is -1"), "{stderr}");

        std::fs::write(dir.path("prices.json"), "onDemand: yaml").unwrap();
        let (code, _, stderr) =
            run_with(&["run", "--provider", "aws", "--cluster-name", "prod"], &[("PRICE_FILE", bad)]);
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains(bad) && stderr.contains("not valid"), "{stderr}");

        let missing = dir.path("missing.json");
        let missing = missing.to_str().unwrap();
        let (code, _, stderr) = run(&["run", "--provider", "aws", "--cluster-name", "prod", "--price-file", missing]);
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains(missing), "{stderr}");
    }

    /// `catalogue` end to end: EC2's instance types and zone offerings from moto, prices from the Pricing
    /// stand-in (each service on its own endpoint, as `AWS_ENDPOINT_URL_<SERVICE>` selects), written as a gzipped
    /// catalogue that simulate then reads with `--instance-types`.
    #[test]
    fn catalogue_writes_a_region_from_ec2_and_pricing_that_simulate_reads() {
        let Some(moto) = crate::moto::MotoServer::start() else { return };
        let pricing = pricing_api();
        let mut env = offline_env(&pricing);
        env.push(("AWS_ENDPOINT_URL_EC2", moto.url()));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let dir = TempDir::new("catalogue");
        let out = dir.path("us-east-1.json.gz");
        let (code, _, stderr) =
            run_with(&["catalogue", "--region", "us-east-1", "--output", out.to_str().unwrap()], &env);
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("us-east-1: ") && stderr.contains(" instance types, 2 on-demand prices"), "{stderr}");
        let count: usize = stderr
            .split("us-east-1: ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(count > 500, "moto's us-east-1 has hundreds of instance types, the file {count}: {stderr}");
        // The account's zone names are paired with their zone ids (DescribeAvailabilityZones).
        let file = karpenter_aws::catalogue::CatalogueFile::parse(&std::fs::read(&out).unwrap()).unwrap();
        let ids = &file.zone_ids["us-east-1"];
        assert!(ids.get("us-east-1a").is_some_and(|id| id.starts_with("use1-az")), "zoneIds: {ids:?}");

        // simulate reads the file as an AWS catalogue: an EC2NodeClass pool asking for m5.large gets one, priced
        // from the file (m5.large at $0.096/h from the stand-in).
        let input = dir.path("input.yaml");
        std::fs::write(
            &input,
            r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: test}}]
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  containers: [{name: c, image: x, resources: {requests: {cpu: "1", memory: 1Gi}}}]
"#,
        )
        .unwrap();
        let (code, stdout, stderr) =
            run(&["simulate", "--instance-types", out.to_str().unwrap(), input.to_str().unwrap(), "-o", "json"]);
        assert_eq!(code, 0, "{stderr}");
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        let text = report.to_string();
        assert!(text.contains("m5.large") && text.contains("0.096"), "{stdout}");
    }
}
