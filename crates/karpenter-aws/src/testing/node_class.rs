//! The EC2NodeClass builder of the test kit's family (NodePool and NodeClaim builders are
//! `karpenter_testing::karpenter`'s): it lives with the API it builds.

use std::collections::BTreeMap;

use karpenter_testing::karpenter::{TEST_CLUSTER, non_empty_map};
use karpenter_testing::uid_for;

use crate::api::{
    AmiSelectorTerm, EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus, SecurityGroupSelectorTerm, SubnetSelectorTerm,
};

/// An EC2NodeClass. Defaults: name `default`, `amiSelectorTerms: [{alias: al2023@latest}]`, role
/// `KarpenterNodeRole-test-cluster` (unless `instance_profile` is set), subnet and security-group selectors on the
/// tag `karpenter.sh/discovery: test-cluster`, upstream's metadata options; no status unless given.
#[derive(Clone, Debug, Default)]
pub struct EC2NodeClassOptions {
    /// Default: `default` (the name the other builders' nodeClassRef points to).
    pub name: Option<String>,
    /// `metadata.annotations`, e.g. the drift hash.
    pub annotations: BTreeMap<String, String>,
    /// Default `al2023@latest`; ignored when `ami_selector_terms` is non-empty.
    pub ami_alias: Option<String>,
    /// `spec.amiSelectorTerms`, used as given when non-empty.
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// `AL2`, `AL2023`, `Bottlerocket`, `Custom`, `Windows2019`, …
    pub ami_family: Option<String>,
    /// `spec.role`: the IAM role of the nodes' instance profile; default `KarpenterNodeRole-test-cluster`.
    pub role: Option<String>,
    /// `spec.instanceProfile`: an existing instance profile instead of a role.
    pub instance_profile: Option<String>,
    /// `spec.subnetSelectorTerms`; default the discovery tag.
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// `spec.securityGroupSelectorTerms`; default the discovery tag.
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// `spec.tags`: tags put on the launched instances, volumes and templates.
    pub tags: BTreeMap<String, String>,
    /// `spec.userData`: the user's bootstrap, which the AWS provider combines with its own by AMI family.
    pub user_data: Option<String>,
    /// Any further spec fields, as JSON merged over the generated spec (e.g. `{"kubelet": {"maxPods": 20}}`).
    pub extra_spec: Option<serde_json::Value>,
    /// `status`, used as given (resolved AMIs, subnets, security groups, conditions); none by default.
    pub status: Option<EC2NodeClassStatus>,
}

fn discovery_tags() -> BTreeMap<String, String> {
    BTreeMap::from([("karpenter.sh/discovery".to_string(), TEST_CLUSTER.to_string())])
}

/// Builds an EC2NodeClass from `o`. The spec is assembled as JSON and decoded, so every field the API defaults
/// gets its default.
///
/// # Panics
/// If the options (in particular `extra_spec`) do not decode as an `EC2NodeClassSpec`.
pub fn ec2_node_class(o: EC2NodeClassOptions) -> EC2NodeClass {
    let name = o.name.clone().unwrap_or_else(|| "default".to_string());
    let ami_terms = if o.ami_selector_terms.is_empty() {
        vec![AmiSelectorTerm {
            alias: Some(o.ami_alias.clone().unwrap_or_else(|| "al2023@latest".into())),
            ..Default::default()
        }]
    } else {
        o.ami_selector_terms.clone()
    };
    let subnets = if o.subnet_selector_terms.is_empty() {
        vec![SubnetSelectorTerm { tags: Some(discovery_tags()), ..Default::default() }]
    } else {
        o.subnet_selector_terms.clone()
    };
    let groups = if o.security_group_selector_terms.is_empty() {
        vec![SecurityGroupSelectorTerm { tags: Some(discovery_tags()), ..Default::default() }]
    } else {
        o.security_group_selector_terms.clone()
    };
    let mut obj = serde_json::Map::new();
    obj.insert("amiSelectorTerms".into(), serde_json::json!(ami_terms));
    obj.insert("subnetSelectorTerms".into(), serde_json::json!(subnets));
    obj.insert("securityGroupSelectorTerms".into(), serde_json::json!(groups));
    match (&o.role, &o.instance_profile) {
        (_, Some(profile)) if o.role.is_none() => {
            obj.insert("instanceProfile".into(), profile.clone().into());
        }
        (role, profile) => {
            obj.insert(
                "role".into(),
                role.clone().unwrap_or_else(|| format!("KarpenterNodeRole-{TEST_CLUSTER}")).into(),
            );
            if let Some(profile) = profile {
                obj.insert("instanceProfile".into(), profile.clone().into());
            }
        }
    }
    if let Some(family) = &o.ami_family {
        obj.insert("amiFamily".into(), family.clone().into());
    }
    if !o.tags.is_empty() {
        obj.insert("tags".into(), serde_json::json!(o.tags));
    }
    if let Some(user_data) = &o.user_data {
        obj.insert("userData".into(), user_data.clone().into());
    }
    if let Some(serde_json::Value::Object(extra)) = &o.extra_spec {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    let spec: EC2NodeClassSpec = serde_json::from_value(serde_json::Value::Object(obj))
        .unwrap_or_else(|e| panic!("EC2NodeClassOptions do not form a valid spec: {e}"));
    let mut class = EC2NodeClass::new(&name, spec);
    class.metadata.uid = Some(uid_for("EC2NodeClass", "", &name));
    class.metadata.annotations = non_empty_map(&o.annotations);
    class.status = o.status.clone();
    class
}

#[cfg(test)]
mod tests {
    use karpenter_api::{Validate, ValidationContext};
    use karpenter_testing::map;

    use super::*;

    fn assert_valid<T: Validate>(o: &T, ctx: &ValidationContext) {
        let v = o.validate(ctx);
        assert!(v.is_empty(), "{v:?}");
    }

    /// The builder's object, written as JSON, passes the API's strict decoding and validation (what a manifest of
    /// it meets in `validate` and simulate).
    #[test]
    fn built_class_validates_through_the_node_class_api() {
        use karpenter_api::node_class_api::NodeClassApi;
        let json = serde_json::to_value(ec2_node_class(EC2NodeClassOptions::default())).unwrap();
        let v =
            crate::api::EC2_NODE_CLASS_API.validate(&json, &ValidationContext::new(crate::labels::provider_labels()));
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn default_ec2_node_class_is_valid_with_alias_role_and_selectors() {
        let class = ec2_node_class(EC2NodeClassOptions::default());
        assert_eq!(class.metadata.name.as_deref(), Some("default"));
        assert_eq!(class.spec.ami_selector_terms[0].alias.as_deref(), Some("al2023@latest"));
        assert_eq!(class.spec.role.as_deref(), Some("KarpenterNodeRole-test-cluster"));
        assert!(class.spec.instance_profile.is_none());
        assert_eq!(class.spec.subnet_selector_terms[0].tags.as_ref().unwrap()["karpenter.sh/discovery"], TEST_CLUSTER);
        assert_valid(&class, &ValidationContext::new(crate::labels::provider_labels()));
    }

    #[test]
    fn ec2_node_class_options_override_defaults() {
        let class = ec2_node_class(EC2NodeClassOptions {
            name: Some("custom".into()),
            ami_selector_terms: vec![AmiSelectorTerm { id: Some("ami-0123".into()), ..Default::default() }],
            ami_family: Some("AL2023".into()),
            instance_profile: Some("profile".into()),
            tags: map(&[("team", "infra")]),
            extra_spec: Some(serde_json::json!({"kubelet": {"maxPods": 20}})),
            ..Default::default()
        });
        assert!(class.spec.role.is_none());
        assert_eq!(class.spec.instance_profile.as_deref(), Some("profile"));
        assert_eq!(class.spec.ami_selector_terms[0].id.as_deref(), Some("ami-0123"));
        assert_eq!(class.spec.tags["team"], "infra");
        assert_eq!(class.spec.kubelet.as_ref().and_then(|k| k.max_pods.clone()), Some(20.into()));
        assert_valid(&class, &ValidationContext::new(crate::labels::provider_labels()));
    }
}
