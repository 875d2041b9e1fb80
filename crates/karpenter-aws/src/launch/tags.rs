//! The tags of what a launch creates, per EC2 resource type, in one place: the real launches
//! ([`crate::launch::instance::InstanceProvider::tags`], [`crate::launch::template::launch_template_tags`], the
//! SDK adapters' `TagSpecifications`) and the node class validation's dry runs (`sdk::dry_run`) all take them
//! from here.
//!
//! Why the dry runs must carry them: tag-scoped controller policies (upstream's getting-started CloudFormation,
//! deploy/cloudformation.yaml) allow `RunInstances`, `CreateFleet` and `CreateLaunchTemplate` only when the
//! request tags what it creates with the cluster tag, `eks:eks-cluster-name` and `karpenter.sh/nodepool`
//! (deploy/cloudformation.yaml accepts `karpenter.k8s.aws/ec2nodeclass` on launch templates too; ours carry
//! both). A dry run without them is refused although the
//! real launch is allowed, and the class would report `ValidationSucceeded=False`.
//!
//! The set is upstream's (`utils.GetTags` of the AWS provider): the node class's `spec.tags`, then the cluster
//! ownership tag, `karpenter.sh/nodepool`, `eks:eks-cluster-name` and `karpenter.k8s.aws/ec2nodeclass`, which
//! win over a `spec.tags` entry of the same key (validation refuses those keys anyway). Validation has no
//! NodePool, so its dry runs carry `karpenter.sh/nodepool` with an empty value, as upstream's do.

use std::collections::BTreeMap;

use crate::api::EC2NodeClass;

use crate::launch::fleet::{CLUSTER_TAG, EKS_CLUSTER_NAME_TAG, NODE_CLASS_TAG, NODE_POOL_TAG, cluster_ownership_tag};

/// An EC2 resource type a launch tags on creation (`TagSpecifications[].ResourceType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TaggedResource {
    Instance,
    Volume,
    NetworkInterface,
    Fleet,
    LaunchTemplate,
    SpotInstancesRequest,
}

impl TaggedResource {
    /// EC2's name of the type, also the resource part of its ARN (`...:instance/i-...`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Instance => "instance",
            Self::Volume => "volume",
            Self::NetworkInterface => "network-interface",
            Self::Fleet => "fleet",
            Self::LaunchTemplate => "launch-template",
            Self::SpotInstancesRequest => "spot-instances-request",
        }
    }
}

/// What `CreateFleet` tags: the instance, its volumes and the fleet (the network interfaces get their tags from
/// the launch template, [`LAUNCH_TEMPLATE_DATA_TAGGED`]).
pub const FLEET_TAGGED: [TaggedResource; 3] = [TaggedResource::Instance, TaggedResource::Volume, TaggedResource::Fleet];
/// What `RunInstances` tags when no launch template does it: the instance, its volumes and its interfaces.
pub const RUN_INSTANCES_TAGGED: [TaggedResource; 3] =
    [TaggedResource::Instance, TaggedResource::Volume, TaggedResource::NetworkInterface];
/// What a launch template's own `TagSpecifications` tag at launch: the network interfaces (and, for spot, the
/// spot instance request, [`launch_template_data_tagged`]).
pub const LAUNCH_TEMPLATE_DATA_TAGGED: [TaggedResource; 1] = [TaggedResource::NetworkInterface];

/// The resources a launch template's data tags: network interfaces, plus spot instance requests for spot.
pub fn launch_template_data_tagged(spot: bool) -> Vec<TaggedResource> {
    let mut resources = LAUNCH_TEMPLATE_DATA_TAGGED.to_vec();
    if spot {
        resources.push(TaggedResource::SpotInstancesRequest);
    }
    resources
}

/// The tags of every resource a launch for `node_pool` from `node_class` creates in `cluster` (instances,
/// volumes, network interfaces, fleets): upstream's set, see the module documentation. Launches add the
/// NodeClaim's own tag to the instance.
pub fn launch_tags(cluster: &str, node_class: &EC2NodeClass, node_pool: &str) -> BTreeMap<String, String> {
    let mut tags = node_class.spec.tags.clone();
    tags.insert(cluster_ownership_tag(cluster), "owned".into());
    tags.insert(NODE_POOL_TAG.into(), node_pool.into());
    tags.insert(EKS_CLUSTER_NAME_TAG.into(), cluster.into());
    tags.insert(NODE_CLASS_TAG.into(), node_class.metadata.name.clone().unwrap_or_default());
    tags
}

/// The tags of a launch template for `node_pool`'s launches from `node_class`: [`launch_tags`] (with
/// `karpenter.sh/nodepool`) and `karpenter.k8s.aws/cluster`. A template is already one NodePool's (its user data
/// carries the NodePool's labels), and the NodePool tag is what upstream's controller policy asks of
/// `CreateLaunchTemplate`, of launching from a template and of `DeleteLaunchTemplate`.
pub fn launch_template_tags(cluster: &str, node_class: &EC2NodeClass, node_pool: &str) -> BTreeMap<String, String> {
    let mut tags = launch_tags(cluster, node_class, node_pool);
    tags.insert(CLUSTER_TAG.into(), cluster.into());
    tags
}

/// One `TagSpecifications` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TagSpecification {
    pub resource: TaggedResource,
    pub tags: BTreeMap<String, String>,
}

/// A validation dry run's tagging.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DryRunTags {
    /// The request's `TagSpecifications`: what IAM checks as `aws:RequestTag/...` for the call.
    pub request: Vec<TagSpecification>,
    /// `LaunchTemplateData.TagSpecifications` (only `CreateLaunchTemplate`): applied at launch, not checked on
    /// creation, sent as a real template would carry them.
    pub template_data: Vec<TagSpecification>,
}

/// The EC2 calls validation dry-runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DryRunAction {
    RunInstances,
    CreateFleet,
    CreateLaunchTemplate,
}

impl DryRunAction {
    /// Every dry-run call.
    pub const ALL: [Self; 3] = [Self::CreateLaunchTemplate, Self::CreateFleet, Self::RunInstances];

    /// The IAM action (`ec2:RunInstances`, ...).
    pub fn iam_action(self) -> &'static str {
        match self {
            Self::RunInstances => "ec2:RunInstances",
            Self::CreateFleet => "ec2:CreateFleet",
            Self::CreateLaunchTemplate => "ec2:CreateLaunchTemplate",
        }
    }
}

/// The tagging of `action`'s validation dry run for `node_class` in `cluster`: for each resource type, the tags a
/// real launch gives it (as upstream: [`launch_tags`] with an empty NodePool; the launch template itself takes
/// [`launch_template_tags`] with an empty NodePool, the tags our real templates carry but for the NodePool's name).
pub fn dry_run_tags(cluster: &str, node_class: &EC2NodeClass, action: DryRunAction) -> DryRunTags {
    let tags = launch_tags(cluster, node_class, "");
    let each = |resources: &[TaggedResource], tags: &BTreeMap<String, String>| -> Vec<TagSpecification> {
        resources.iter().map(|&resource| TagSpecification { resource, tags: tags.clone() }).collect()
    };
    match action {
        DryRunAction::RunInstances => DryRunTags { request: each(&RUN_INSTANCES_TAGGED, &tags), template_data: vec![] },
        DryRunAction::CreateFleet => DryRunTags { request: each(&FLEET_TAGGED, &tags), template_data: vec![] },
        DryRunAction::CreateLaunchTemplate => DryRunTags {
            request: each(&[TaggedResource::LaunchTemplate], &launch_template_tags(cluster, node_class, "")),
            // Validation launches on-demand: no spot instance request.
            template_data: each(&launch_template_data_tagged(false), &tags),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_class(tags: &[(&str, &str)]) -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {"role": "KarpenterNodeRole", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                     "securityGroupSelectorTerms": [{"tags": {"a": "b"}}],
                     "tags": tags.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()}
        }))
        .unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn resources(specs: &[TagSpecification]) -> Vec<&'static str> {
        specs.iter().map(|s| s.resource.as_str()).collect()
    }

    // Upstream's GetTags: the class's tags plus the four static tags; validation's claim has no NodePool label.
    #[test]
    fn launch_tags_are_the_class_tags_and_the_static_tags() {
        let class = node_class(&[("tag1", "tag1value"), ("tag2", "tag2value")]);
        assert_eq!(
            launch_tags("prod", &class, "general"),
            map(&[
                ("tag1", "tag1value"),
                ("tag2", "tag2value"),
                ("kubernetes.io/cluster/prod", "owned"),
                ("karpenter.sh/nodepool", "general"),
                ("eks:eks-cluster-name", "prod"),
                ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ])
        );
    }

    // Upstream: "should override default tag names": a class may set `Name`, which is no static tag.
    #[test]
    fn the_class_may_set_name_and_the_static_tags_win() {
        let class = node_class(&[("Name", "myname"), ("eks:eks-cluster-name", "other")]);
        let tags = launch_tags("prod", &class, "general");
        assert_eq!(tags["Name"], "myname");
        assert_eq!(tags["eks:eks-cluster-name"], "prod", "validation refuses the key; launches never send it");
    }

    // Upstream's validation: RunInstances tags instance, volume and network interface; CreateFleet instance,
    // volume and fleet; CreateLaunchTemplate the template, and its data the network interfaces (on-demand: no
    // spot request). All with the cluster tag, the (empty) NodePool, the cluster name and the class, plus the
    // class's own tags.
    #[test]
    fn dry_runs_tag_each_resource_type_as_upstream() {
        let class = node_class(&[("team", "a")]);
        let expected = map(&[
            ("team", "a"),
            ("kubernetes.io/cluster/prod", "owned"),
            ("karpenter.sh/nodepool", ""),
            ("eks:eks-cluster-name", "prod"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ]);
        let run = dry_run_tags("prod", &class, DryRunAction::RunInstances);
        assert_eq!(resources(&run.request), ["instance", "volume", "network-interface"]);
        assert!(run.request.iter().all(|s| s.tags == expected));
        assert!(run.template_data.is_empty());

        let fleet = dry_run_tags("prod", &class, DryRunAction::CreateFleet);
        assert_eq!(resources(&fleet.request), ["instance", "volume", "fleet"]);
        assert!(fleet.request.iter().all(|s| s.tags == expected));

        let lt = dry_run_tags("prod", &class, DryRunAction::CreateLaunchTemplate);
        assert_eq!(resources(&lt.request), ["launch-template"]);
        assert_eq!(resources(&lt.template_data), ["network-interface"]);
        assert_eq!(lt.template_data[0].tags, expected);
        // Our templates' own tags: the NodePool (empty, as every dry run's), the cluster named twice.
        assert_eq!(
            lt.request[0].tags,
            map(&[
                ("team", "a"),
                ("kubernetes.io/cluster/prod", "owned"),
                ("karpenter.sh/nodepool", ""),
                ("eks:eks-cluster-name", "prod"),
                ("karpenter.k8s.aws/ec2nodeclass", "default"),
                ("karpenter.k8s.aws/cluster", "prod"),
            ])
        );
    }

    // The dry runs ask what the real calls send: real fleets tag the same resource types with the same tags,
    // the NodePool's name (and the NodeClaim on the instance) aside.
    #[test]
    fn dry_runs_agree_with_real_launches() {
        let class = node_class(&[("team", "a")]);
        let mut real = launch_tags("prod", &class, "general");
        real.insert(NODE_POOL_TAG.into(), String::new());
        let fleet = dry_run_tags("prod", &class, DryRunAction::CreateFleet);
        assert!(fleet.request.iter().all(|s| s.tags == real));
        let lt = dry_run_tags("prod", &class, DryRunAction::CreateLaunchTemplate);
        let mut real_template = launch_template_tags("prod", &class, "general");
        assert_eq!(real_template.insert(NODE_POOL_TAG.into(), String::new()).as_deref(), Some("general"));
        assert_eq!(lt.request[0].tags, real_template);
        assert_eq!(
            launch_template_data_tagged(true),
            [TaggedResource::NetworkInterface, TaggedResource::SpotInstancesRequest]
        );
    }
}
