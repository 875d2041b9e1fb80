//! What happens to static drift when a cluster swaps upstream Karpenter for karpenter-rs and back
//! (docs/migration-from-upstream.md, "Drift across the swap").
//!
//! The facts this holds us to, from upstream (aws/karpenter-provider-aws v1.14.1, kubernetes-sigs/karpenter):
//! - upstream's `EC2NodeClass.Hash` of the node class in its `ec2nodeclass_hash_test.go`, with the CA bundle
//!   `test-ca-bundle`, and the hash after each static field change, pinned there as values;
//! - the selector terms change no hash, reordering tags or block device mappings changes none;
//! - upstream's hash version `v6` for `karpenter.k8s.aws/ec2nodeclass-hash-version` (the NodePool's `v3` is held
//!   in karpenter-api's `tests/upstream_hashes.rs`); upstream compares hashes only when the owner's version equals
//!   the NodeClaim's, and re-annotates NodeClaims of another version without drifting them.
//!
//! Our claims: our hash of the same spec is never upstream's value (a different function), every field upstream
//! hashes changes ours too, and the swap is safe both ways because our versions (`rs1`) are none of upstream's:
//! each side sees a version mismatch and re-annotates instead of drifting.

use karpenter_api::NodeClaim;
use karpenter_api::hash::StaticDrift;
use karpenter_aws::api::EC2NodeClass;
use karpenter_aws::api::hash::{EC2_NODE_CLASS_HASH_VERSION, ec2_node_class_hash, ec2_node_class_static_drift};
use karpenter_aws::labels::annotations;
use serde_json::{Value, json};

/// Upstream's current hash version (the provider's pkg/apis/v1/ec2nodeclass.go `EC2NodeClassHashVersion`) and
/// every earlier one. The NodePool's are checked in karpenter-api's `tests/upstream_hashes.rs`.
const UPSTREAM_EC2_NODE_CLASS_VERSIONS: &[&str] = &["v1", "v2", "v3", "v4", "v5", "v6"];
const UPSTREAM_EC2_NODE_CLASS_VERSION: &str = "v6";

/// The CA bundle upstream's hash test passes.
const CA_BUNDLE: &str = "test-ca-bundle";
/// Upstream's hash of [`base_class`] with [`CA_BUNDLE`].
const UPSTREAM_BASE_HASH: &str = "11148166120438674859";

/// The node class of upstream's hash test, as a manifest.
fn base_spec() -> Value {
    json!({
        "role": "role-1",
        "tags": {"keyTag-1": "valueTag-1", "keyTag-2": "valueTag-2"},
        "context": "fake-context",
        "detailedMonitoring": false,
        "associatePublicIPAddress": false,
        "metadataOptions": {
            "httpEndpoint": "disabled",
            "httpProtocolIPv6": "disabled",
            "httpPutResponseHopLimit": 1,
            "httpTokens": "optional"
        },
        "blockDeviceMappings": [
            {
                "deviceName": "map-device-1",
                "rootVolume": false,
                "ebs": {
                    "deleteOnTermination": false,
                    "encrypted": false,
                    "iops": 0,
                    "kmsKeyID": "fakeKMSKeyID",
                    "snapshotID": "fakeSnapshot",
                    "throughput": 0,
                    "volumeSize": "2G",
                    "volumeType": "standard"
                }
            },
            {"deviceName": "map-device-2"}
        ],
        "userData": "userdata-test-1",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test"}}]
    })
}

fn class(spec: Value) -> EC2NodeClass {
    let manifest = json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": spec
    });
    serde_json::from_value(manifest).unwrap_or_else(|e| panic!("the ported node class decodes: {e}"))
}

/// Upstream's test changes fields with mergo (override, slices merged element by element): objects merge by
/// key, lists by index, anything else is replaced.
fn merged(mut base: Value, change: &Value) -> Value {
    match (&mut base, change) {
        (Value::Object(b), Value::Object(c)) => {
            for (k, v) in c {
                let current = b.remove(k).unwrap_or(Value::Null);
                b.insert(k.clone(), merged(current, v));
            }
            base
        }
        (Value::Array(b), Value::Array(c)) => {
            for (i, v) in c.iter().enumerate() {
                match b.get_mut(i) {
                    Some(slot) => *slot = merged(slot.take(), v),
                    None => b.push(v.clone()),
                }
            }
            base
        }
        _ => change.clone(),
    }
}

fn our_hash(spec: Value) -> String {
    ec2_node_class_hash(&class(spec), Some(CA_BUNDLE))
}

/// Upstream's table "should match static hash on field value change": the change and upstream's hash after it.
fn upstream_static_field_changes() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("UserData", "11774429238106843388", json!({"userData": "userdata-test-2"})),
        ("Tags", "9327338697296909506", json!({"tags": {"keyTag-test-3": "valueTag-test-3"}})),
        ("Context", "2279761750428738028", json!({"context": "context-2"})),
        ("DetailedMonitoring", "1936848126751988570", json!({"detailedMonitoring": true})),
        ("InstanceStorePolicy", "16697988646989909967", json!({"instanceStorePolicy": "RAID0"})),
        ("AssociatePublicIPAddress", "16141801171825097963", json!({"associatePublicIPAddress": true})),
        (
            "MetadataOptions HTTPEndpoint",
            "14969742554812447671",
            json!({"metadataOptions": {"httpEndpoint": "enabled"}}),
        ),
        (
            "MetadataOptions HTTPProtocolIPv6",
            "1581716956216772561",
            json!({"metadataOptions": {"httpProtocolIPv6": "enabled"}}),
        ),
        (
            "MetadataOptions HTTPPutResponseHopLimit",
            "14046948658064232764",
            json!({"metadataOptions": {"httpPutResponseHopLimit": 10}}),
        ),
        ("MetadataOptions HTTPTokens", "1346719102507290084", json!({"metadataOptions": {"httpTokens": "required"}})),
        (
            "BlockDeviceMapping DeviceName",
            "8979166653850509463",
            json!({"blockDeviceMappings": [{"deviceName": "map-device-test-3"}]}),
        ),
        (
            "BlockDeviceMapping RootVolume",
            "8875796205856543692",
            json!({"blockDeviceMappings": [{"rootVolume": true}]}),
        ),
        (
            "BlockDeviceMapping DeleteOnTermination",
            "1470935115846151531",
            json!({"blockDeviceMappings": [{"ebs": {"deleteOnTermination": true}}]}),
        ),
        (
            "BlockDeviceMapping Encrypted",
            "5252376125396833097",
            json!({"blockDeviceMappings": [{"ebs": {"encrypted": true}}]}),
        ),
        ("BlockDeviceMapping IOPS", "11651419893470054855", json!({"blockDeviceMappings": [{"ebs": {"iops": 10}}]})),
        (
            "BlockDeviceMapping KMSKeyID",
            "1488385067008138755",
            json!({"blockDeviceMappings": [{"ebs": {"kmsKeyID": "test"}}]}),
        ),
        (
            "BlockDeviceMapping SnapshotID",
            "12786013539168652330",
            json!({"blockDeviceMappings": [{"ebs": {"snapshotID": "test"}}]}),
        ),
        (
            "BlockDeviceMapping Throughput",
            "1873429003468556999",
            json!({"blockDeviceMappings": [{"ebs": {"throughput": 10}}]}),
        ),
        (
            "BlockDeviceMapping VolumeType",
            "6743466905516550702",
            json!({"blockDeviceMappings": [{"ebs": {"volumeType": "io1"}}]}),
        ),
        (
            "BlockDeviceMapping VolumeSize",
            "10372902467896351912",
            json!({"blockDeviceMappings": [{"ebs": {"volumeSize": "10G"}}]}),
        ),
        (
            "ConnectionTracking TCPEstablishedTimeout",
            "1619669030802245540",
            json!({"connectionTracking": {"tcpEstablishedTimeout": 300}}),
        ),
        (
            "ConnectionTracking UDPStreamTimeout",
            "13743705849402595405",
            json!({"connectionTracking": {"udpStreamTimeout": 120}}),
        ),
        ("ConnectionTracking UDPTimeout", "17941926745862994490", json!({"connectionTracking": {"udpTimeout": 45}})),
        (
            "CPUOptions NestedVirtualization",
            "6157846767212910604",
            json!({"cpuOptions": {"nestedVirtualization": "enabled"}}),
        ),
    ]
}

#[test]
fn our_hash_is_never_upstreams_value_for_the_same_spec() {
    let base = our_hash(base_spec());
    assert_ne!(base, UPSTREAM_BASE_HASH, "our hash of upstream's test class");
    for (field, upstream, change) in upstream_static_field_changes() {
        let ours = our_hash(merged(base_spec(), &change));
        assert_ne!(ours, upstream, "{field}: our hash equals upstream's, which the swap does not rely on");
    }
    // Upstream's instanceProfile case: role dropped, an instance profile set.
    let mut profile = base_spec();
    profile.as_object_mut().expect("an object").remove("role");
    profile["instanceProfile"] = json!("test-instance-profile");
    assert_ne!(our_hash(profile), "10323991363677716244", "instanceProfile");
}

#[test]
fn every_field_upstream_hashes_changes_our_hash() {
    let base = our_hash(base_spec());
    for (field, _, change) in upstream_static_field_changes() {
        let spec = merged(base_spec(), &change);
        assert_ne!(spec, base_spec(), "{field}: the change applies");
        assert_ne!(our_hash(spec), base, "{field} is a static field upstream, so it drifts nodes here too");
    }
    let with_profile = |name: &str| {
        let mut spec = base_spec();
        spec.as_object_mut().expect("an object").remove("role");
        spec["instanceProfile"] = json!(name);
        our_hash(spec)
    };
    assert_ne!(with_profile("test-instance-profile"), with_profile("other-instance-profile"), "instanceProfile");
}

#[test]
fn fields_upstream_leaves_out_of_its_hash_leave_ours_unchanged() {
    let base = our_hash(base_spec());
    let unchanged = [
        ("amiSelectorTerms", json!({"amiSelectorTerms": [{"tags": {"ami-test-key": "ami-test-value"}}]})),
        ("subnetSelectorTerms", json!({"subnetSelectorTerms": [{"tags": {"subnet-test-key": "subnet-test-value"}}]})),
        (
            "securityGroupSelectorTerms",
            json!({"securityGroupSelectorTerms": [{"tags": {"security-group-test-key": "security-group-test-value"}}]}),
        ),
    ];
    for (field, change) in unchanged {
        assert_eq!(our_hash(merged(base_spec(), &change)), base, "{field} drifts dynamically, not by hash");
    }
    let mut reordered = base_spec();
    reordered["blockDeviceMappings"].as_array_mut().expect("a list").reverse();
    reordered["tags"] = json!({"keyTag-2": "valueTag-2", "keyTag-1": "valueTag-1"});
    assert_eq!(our_hash(reordered), base, "block device mappings and tags reordered");
}

#[test]
fn our_hash_versions_are_none_of_upstreams() {
    assert!(!UPSTREAM_EC2_NODE_CLASS_VERSIONS.contains(&EC2_NODE_CLASS_HASH_VERSION), "{EC2_NODE_CLASS_HASH_VERSION}");
}

fn claim(annotations: &[(&str, &str)]) -> NodeClaim {
    let annotations: serde_json::Map<String, Value> =
        annotations.iter().map(|(k, v)| ((*k).to_owned(), json!(v))).collect();
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-x", "labels": {"karpenter.sh/nodepool": "default"}, "annotations": annotations},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []
        }
    }))
    .expect("the claim decodes")
}

fn annotated_class(hash: &str, version: &str) -> EC2NodeClass {
    let mut c = class(base_spec());
    c.metadata.annotations = Some(
        [
            (annotations::EC2_NODE_CLASS_HASH.to_owned(), hash.to_owned()),
            (annotations::EC2_NODE_CLASS_HASH_VERSION.to_owned(), version.to_owned()),
        ]
        .into(),
    );
    c
}

#[test]
fn swapping_upstream_for_ours_drifts_no_node_class_claim() {
    // A NodeClaim upstream launched from this class: upstream's hash and version.
    let upstream_claim = claim(&[
        (annotations::EC2_NODE_CLASS_HASH, UPSTREAM_BASE_HASH),
        (annotations::EC2_NODE_CLASS_HASH_VERSION, UPSTREAM_EC2_NODE_CLASS_VERSION),
    ]);
    // Before our controller re-annotates the class it still carries upstream's values: hashes of one function.
    let untouched = annotated_class(UPSTREAM_BASE_HASH, UPSTREAM_EC2_NODE_CLASS_VERSION);
    assert_eq!(ec2_node_class_static_drift(&untouched, &upstream_claim), StaticDrift::NotDrifted);
    // Once it carries ours, the versions differ: no drift, the claim's annotations are rewritten to the class's.
    let ours = our_hash(base_spec());
    let reannotated = annotated_class(&ours, EC2_NODE_CLASS_HASH_VERSION);
    assert_eq!(ec2_node_class_static_drift(&reannotated, &upstream_claim), StaticDrift::VersionMismatch);
    let rewritten = claim(&[
        (annotations::EC2_NODE_CLASS_HASH, &ours),
        (annotations::EC2_NODE_CLASS_HASH_VERSION, EC2_NODE_CLASS_HASH_VERSION),
    ]);
    assert_eq!(ec2_node_class_static_drift(&reannotated, &rewritten), StaticDrift::NotDrifted);
    // A real change after the swap still drifts.
    let changed = merged(base_spec(), &json!({"userData": "userdata-test-2"}));
    let mut edited = annotated_class(&our_hash(changed.clone()), EC2_NODE_CLASS_HASH_VERSION);
    edited.spec = class(changed).spec;
    assert_eq!(ec2_node_class_static_drift(&edited, &rewritten), StaticDrift::Drifted);
}

#[test]
fn swapping_back_leaves_upstream_a_version_mismatch() {
    // What we leave behind: class and claims at our version. Upstream compares hashes only at equal versions, and
    // its current versions differ from ours, so it re-annotates (the claim and class here are what it reads).
    let ours = our_hash(base_spec());
    let claim_left = claim(&[
        (annotations::EC2_NODE_CLASS_HASH, &ours),
        (annotations::EC2_NODE_CLASS_HASH_VERSION, EC2_NODE_CLASS_HASH_VERSION),
    ]);
    assert_ne!(
        claim_left.metadata.annotations.as_ref().expect("annotated")[annotations::EC2_NODE_CLASS_HASH_VERSION],
        UPSTREAM_EC2_NODE_CLASS_VERSION
    );
    // Until upstream re-annotates the class, both carry our values: the same function on both sides.
    let left = annotated_class(&ours, EC2_NODE_CLASS_HASH_VERSION);
    assert_eq!(ec2_node_class_static_drift(&left, &claim_left), StaticDrift::NotDrifted);
    // Upstream's class annotation (v6) against our claim (rs1): a mismatch, as upstream judges it too.
    let upstream_class = annotated_class(UPSTREAM_BASE_HASH, UPSTREAM_EC2_NODE_CLASS_VERSION);
    assert_eq!(ec2_node_class_static_drift(&upstream_class, &claim_left), StaticDrift::VersionMismatch);
}
