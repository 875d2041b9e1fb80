//! EC2NodeClass-specific checks: defaults (on decode and in the CRD schema) and the CRD's names, printer columns and
//! subresources.
//!
//! The EC2NodeClass fixtures (`tests/fixtures/{valid,invalid}/ec2nodeclass-*.yaml`, `examples/manifests/`) are
//! checked with every other kind's in `cel_agreement.rs`.

// This binary uses only the schemas and paths of the shared harness.
#[allow(dead_code)]
mod common;

use karpenter_api::ProviderLabels;
use karpenter_api::crd;
use karpenter_api::ec2nodeclass::{AmiFamily, EC2NodeClass, HttpTokens};
use serde_json::json;

use common::crate_dir;

#[test]
fn defaults_are_applied_on_decode_and_by_the_schema() {
    let text =
        std::fs::read_to_string(crate_dir().join("tests/fixtures/valid/ec2nodeclass-al2023-alias.yaml")).unwrap();
    let nc: EC2NodeClass = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(nc.spec.metadata_options.http_put_response_hop_limit, 1);
    assert_eq!(nc.spec.metadata_options.http_tokens, HttpTokens::Required);
    assert_eq!(nc.effective_ami_family(), Some(AmiFamily::Al2023));
    let s = common::schemas().remove("EC2NodeClass").expect("the AWS CRDs include EC2NodeClass");
    let mo = &s["properties"]["spec"]["properties"]["metadataOptions"];
    assert_eq!(
        mo["default"],
        json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"})
    );
    assert_eq!(mo["properties"]["httpTokens"]["default"], json!("required"));
}

#[test]
fn crd_names_columns_and_subresources() {
    let c = crd::generate::<EC2NodeClass>(&ProviderLabels::aws());
    assert_eq!(c.spec.group, "karpenter.k8s.aws");
    assert_eq!(c.spec.scope, "Cluster");
    assert_eq!(c.spec.names.kind, "EC2NodeClass");
    assert_eq!(c.spec.names.plural, "ec2nodeclasses");
    assert_eq!(c.spec.names.short_names, Some(vec!["ec2nc".to_string(), "ec2ncs".to_string()]));
    assert_eq!(c.spec.names.categories, Some(vec!["karpenter".to_string()]));
    let v = &c.spec.versions[0];
    assert_eq!(v.name, "v1");
    assert!(v.subresources.as_ref().and_then(|s| s.status.as_ref()).is_some());
    let cols: Vec<(String, i32)> =
        v.additional_printer_columns.iter().flatten().map(|c| (c.name.clone(), c.priority.unwrap_or(0))).collect();
    assert_eq!(cols, vec![("Ready".into(), 0), ("Age".into(), 0), ("Role".into(), 1)]);
    assert!(crd::crds(&ProviderLabels::aws()).iter().any(|c| c.spec.names.kind == "EC2NodeClass"));
    assert!(!crd::crds(&ProviderLabels::kwok()).iter().any(|c| c.spec.names.kind == "EC2NodeClass"));
}
