//! EC2NodeClass-specific checks: defaults (on decode and in the CRD schema) and the CRD's names, printer columns and
//! subresources.
//!
//! The EC2NodeClass fixtures (`tests/fixtures/ec2nodeclass/{valid,invalid}/*.yaml`, `examples/manifests/`) are
//! checked by karpenter-api's fixture harness in `node_class_fixtures.rs`.

// This binary uses only the schemas and paths of the shared harness (karpenter-api's, which every kind's
// fixtures go through).
#[allow(dead_code)]
#[path = "../../karpenter-api/tests/common/mod.rs"]
mod common;

use karpenter_api::ValidationContext;
use karpenter_api::crd;
use karpenter_api::node_class_api::NodeClassApis;
use karpenter_aws::api::{AmiFamily, EC2NodeClass, HttpTokens, node_class_apis};
use serde_json::json;

use common::crate_dir;

#[test]
fn defaults_are_applied_on_decode_and_by_the_schema() {
    let text =
        std::fs::read_to_string(crate_dir().join("tests/fixtures/ec2nodeclass/valid/ec2nodeclass-al2023-alias.yaml"))
            .unwrap();
    let nc: EC2NodeClass = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(nc.spec.metadata_options.http_put_response_hop_limit, 1);
    assert_eq!(nc.spec.metadata_options.http_tokens, HttpTokens::Required);
    assert_eq!(nc.effective_ami_family(), Some(AmiFamily::Al2023));
    let s = common::schemas(&node_class_apis()).remove("EC2NodeClass").expect("the AWS CRDs include EC2NodeClass");
    let mo = &s["properties"]["spec"]["properties"]["metadataOptions"];
    assert_eq!(
        mo["default"],
        json!({"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled", "httpPutResponseHopLimit": 1, "httpTokens": "required"})
    );
    assert_eq!(mo["properties"]["httpTokens"]["default"], json!("required"));
}

#[test]
fn crd_names_columns_and_subresources() {
    let c = crd::generate::<EC2NodeClass>(&karpenter_aws::labels::provider_labels());
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
    let aws = karpenter_api::node_class_api::crds_with(&karpenter_aws::labels::provider_labels(), &node_class_apis());
    assert!(aws.iter().any(|c| c.spec.names.kind == "EC2NodeClass"));
    let core =
        karpenter_api::node_class_api::crds_with(&karpenter_aws::labels::provider_labels(), &NodeClassApis::none());
    assert!(!core.iter().any(|c| c.spec.names.kind == "EC2NodeClass"), "the core CRDs name no node class");
}

/// Upstream's EC2NodeClass CRD does not require `spec` either: the object loads (as a watch decodes it) and
/// validation names the required selector terms, not a decoding error.
#[test]
fn ec2_node_class_without_spec_loads_and_reports_required_fields() {
    let loaded = karpenter_api::load_str(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: default}\n",
        "ec2.yaml",
    )
    .expect("an EC2NodeClass without spec decodes");
    assert_eq!(loaded[0].object.kind(), "EC2NodeClass");
    let violations = loaded[0]
        .object
        .validate_with(&ValidationContext::new(karpenter_aws::labels::provider_labels()), &node_class_apis())
        .expect("karpenter kind");
    assert!(violations.has_path("spec.subnetSelectorTerms"), "{violations:?}");
    assert!(violations.has_path("spec.amiSelectorTerms"), "{violations:?}");
}

/// The label set written out as test data for karpenter-api's tests (which may not depend on this crate) is
/// this crate's set; the test kit's copy is checked by the unit tests of `labels`.
#[test]
fn karpenter_apis_test_copy_of_the_label_set_is_this_crates() {
    assert_eq!(common::vocabulary::aws(), karpenter_aws::labels::provider_labels());
}
