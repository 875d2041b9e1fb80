//! Resolution rules against the in-memory AWS ([`super::mock::MockAws`]) on a fake clock.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::api::EC2NodeClass;
use crate::api::{
    Alias, AmiFamily, AmiSelectorTerm, CapacityReservationSelectorTerm, CapacityReservationState,
    CapacityReservationType, InstanceMatchCriteria, NodeSelectorRequirement, PlacementGroupSelector,
    SecurityGroupSelectorTerm, SubnetSelectorTerm, conditions,
};
use crate::labels as aws_labels;
use crate::testing::{EC2NodeClassOptions, ec2_node_class};
use chrono::{TimeZone, Utc};
use karpenter_api::condition::{ConditionStatus, Conditions};
use karpenter_cloudprovider::Clock;
use karpenter_requirements::{Requirement, Requirements};
use karpenter_testing::FakeClock;

use super::ami::*;
use super::api::*;
use super::instance_profile::{ClusterIdentity, role_name};
use super::mock::MockAws;
use super::network::{security_group_filter_sets, subnet_filter_sets};
use super::reservation::{reservation_queries, to_status as reservation_status};
use super::status::*;
use crate::api_error::{AwsApiError, AwsErrorKind};

pub(super) fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn subnet(id: &str, zone: &str, ips: i64, t: &[(&str, &str)]) -> SubnetDescription {
    SubnetDescription {
        subnet_id: id.into(),
        availability_zone: zone.into(),
        availability_zone_id: Some(format!("{zone}-id")),
        available_ip_address_count: ips,
        vpc_id: Some("vpc-1".into()),
        tags: tags(t),
    }
}

fn group(id: &str, name: &str, t: &[(&str, &str)]) -> SecurityGroupDescription {
    SecurityGroupDescription { group_id: id.into(), group_name: name.into(), vpc_id: None, tags: tags(t) }
}

fn image(id: &str, name: &str, arch: &str, created: &str) -> ImageDescription {
    ImageDescription {
        image_id: id.into(),
        name: Some(name.into()),
        architecture: arch.into(),
        creation_date: created.into(),
        deprecation_time: None,
        owner_id: Some("amazon".into()),
        tags: BTreeMap::new(),
    }
}

const DISCOVERY: &[(&str, &str)] = &[("karpenter.sh/discovery", "test-cluster")];

/// A world with two zones of subnets, security groups, AL2023 1.31 parameters and images.
pub(super) fn world() -> Arc<MockAws> {
    let aws = Arc::new(MockAws::new());
    aws.with(|w| {
        w.subnets = vec![
            subnet("subnet-a1", "us-west-2a", 100, DISCOVERY),
            subnet("subnet-a2", "us-west-2a", 500, DISCOVERY),
            subnet("subnet-b1", "us-west-2b", 300, DISCOVERY),
            subnet("subnet-other", "us-west-2c", 900, &[("team", "x")]),
        ];
        w.security_groups = vec![
            group("sg-1", "nodes", DISCOVERY),
            group("sg-2", "extra", &[("Name", "extra-sg"), ("karpenter.sh/discovery", "test-cluster")]),
            group("sg-3", "other", &[]),
        ];
        for (arch, variant, id) in [
            ("x86_64", "standard", "ami-std-amd"),
            ("x86_64", "nvidia", "ami-nv-amd"),
            ("x86_64", "neuron", "ami-neu-amd"),
            ("arm64", "standard", "ami-std-arm"),
            ("arm64", "nvidia", "ami-nv-arm"),
        ] {
            w.parameters.insert(
                format!("/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/{arch}/{variant}/recommended/image_id"),
                id.into(),
            );
            w.images.push(image(id, &format!("al2023-{variant}-{arch}"), arch, "2024-06-01T00:00:00.000Z"));
        }
    });
    aws
}

pub(super) fn apis(aws: &Arc<MockAws>) -> ResolverApis {
    aws.resolver_apis()
}

pub(super) fn settings() -> ResolverSettings {
    ResolverSettings {
        cluster: ClusterIdentity { cluster_name: "test-cluster".into(), region: "us-west-2".into() },
        service_cidr: Some("10.100.0.0/16".into()),
        ..Default::default()
    }
}

pub(super) fn clock() -> FakeClock {
    FakeClock::new(Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap())
}

fn resolver(aws: &Arc<MockAws>, clock: &FakeClock) -> NodeClassResolver {
    NodeClassResolver::new(apis(aws), settings(), Arc::new(clock.clone()))
}

fn class(o: EC2NodeClassOptions) -> EC2NodeClass {
    let mut c = ec2_node_class(o);
    c.metadata.generation = Some(3);
    c
}

fn default_class() -> EC2NodeClass {
    class(EC2NodeClassOptions { role: Some("KarpenterNodeRole".into()), ..Default::default() })
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

fn condition<'a>(status: &'a crate::api::EC2NodeClassStatus, t: &str) -> (&'a str, ConditionStatus) {
    let c = status.condition(t).unwrap_or_else(|| panic!("condition {t} missing"));
    (c.reason.as_str(), c.status)
}

// ---------------------------------------------------------------------------------------------------------------
// Selector semantics.
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn subnet_terms_merge_ids_and_query_tags_per_term() {
    let terms = vec![
        SubnetSelectorTerm { id: Some("subnet-1".into()), ..Default::default() },
        SubnetSelectorTerm { tags: Some(tags(&[("a", "1"), ("b", "*")])), ..Default::default() },
        SubnetSelectorTerm { id: Some("subnet-2".into()), ..Default::default() },
    ];
    assert_eq!(
        subnet_filter_sets(&terms),
        vec![
            vec![Filter::new("subnet-id", ["subnet-1", "subnet-2"])],
            vec![Filter::new("tag:a", ["1"]), Filter::new("tag-key", ["b"])],
        ]
    );
    let sg_terms = vec![
        SecurityGroupSelectorTerm { name: Some("nodes".into()), ..Default::default() },
        SecurityGroupSelectorTerm { id: Some("sg-9".into()), ..Default::default() },
        SecurityGroupSelectorTerm { tags: Some(tags(&[("Name", "x")])), ..Default::default() },
    ];
    assert_eq!(
        security_group_filter_sets(&sg_terms),
        vec![
            vec![Filter::new("group-id", ["sg-9"])],
            vec![Filter::new("group-name", ["nodes"])],
            vec![Filter::new("tag:Name", ["x"])],
        ]
    );
}

#[test]
fn subnets_union_terms_and_sort_by_free_ips() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    // Terms ORed: the discovery tag, plus an explicit id of an untagged subnet.
    let terms = vec![
        SubnetSelectorTerm { tags: Some(tags(DISCOVERY)), ..Default::default() },
        SubnetSelectorTerm { id: Some("subnet-other".into()), ..Default::default() },
    ];
    let got = block_on(r.subnets.list(&terms)).unwrap();
    let ids: Vec<&str> = got.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["subnet-other", "subnet-a2", "subnet-b1", "subnet-a1"]);
    // Fields ANDed: both tags must match.
    let and = vec![SubnetSelectorTerm {
        tags: Some(tags(&[("karpenter.sh/discovery", "test-cluster"), ("team", "x")])),
        ..Default::default()
    }];
    assert!(block_on(r.subnets.list(&and)).unwrap().is_empty());
    // `*` matches any value of the key.
    let any = vec![SubnetSelectorTerm { tags: Some(tags(&[("team", "*")])), ..Default::default() }];
    assert_eq!(block_on(r.subnets.list(&any)).unwrap().len(), 1);
    // The launch-time choice per zone: most free IPs.
    let status: Vec<_> = got.iter().map(|s| s.to_status()).collect();
    let zonal = r.subnets.zonal_subnets(&status);
    assert_eq!(zonal["us-west-2a"].id, "subnet-a2");
    assert_eq!(zonal["us-west-2b"].id, "subnet-b1");
    r.subnets.set_available_ips("subnet-a2", 0);
    assert_eq!(r.subnets.zonal_subnets(&status)["us-west-2a"].id, "subnet-a1");
}

#[test]
fn security_groups_by_group_name_not_name_tag() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    let by_name = vec![SecurityGroupSelectorTerm { name: Some("extra".into()), ..Default::default() }];
    let got = block_on(r.security_groups.list(&by_name)).unwrap();
    assert_eq!(got.iter().map(|g| g.id.as_str()).collect::<Vec<_>>(), ["sg-2"]);
    assert_eq!(got[0].name.as_deref(), Some("extra"));
    let by_tag_value = vec![SecurityGroupSelectorTerm { name: Some("extra-sg".into()), ..Default::default() }];
    assert!(block_on(r.security_groups.list(&by_tag_value)).unwrap().is_empty(), "the Name tag is not the name");
    let mixed = vec![
        SecurityGroupSelectorTerm { id: Some("sg-3".into()), ..Default::default() },
        SecurityGroupSelectorTerm { tags: Some(tags(DISCOVERY)), ..Default::default() },
    ];
    let ids: Vec<String> = block_on(r.security_groups.list(&mixed)).unwrap().into_iter().map(|g| g.id).collect();
    assert_eq!(ids, ["sg-1", "sg-2", "sg-3"]);
}

#[test]
fn subnet_cache_honours_the_refresh_interval() {
    let aws = world();
    let clock = clock();
    let mut s = settings();
    s.subnet_refresh_interval = Duration::from_secs(120);
    let r = NodeClassResolver::new(apis(&aws), s, Arc::new(clock.clone()));
    let terms = vec![SubnetSelectorTerm { tags: Some(tags(DISCOVERY)), ..Default::default() }];
    block_on(r.subnets.list(&terms)).unwrap();
    clock.step_secs(119);
    block_on(r.subnets.list(&terms)).unwrap();
    assert_eq!(aws.count("DescribeSubnets"), 1, "cached within the interval");
    aws.with(|w| w.subnets.retain(|s| s.subnet_id != "subnet-a1"));
    clock.step_secs(1);
    let got = block_on(r.subnets.list(&terms)).unwrap();
    assert_eq!(aws.count("DescribeSubnets"), 2, "described again once expired");
    assert_eq!(got.len(), 2);
    // Free-IP counts outlive the subnet cache: max(5 min, refresh + 4 min).
    clock.step_secs(359);
    assert_eq!(r.subnets.available_ips("subnet-a2"), Some(500));
    clock.step_secs(1);
    assert_eq!(r.subnets.available_ips("subnet-a2"), None);
}

#[test]
fn security_group_cache_honours_the_refresh_interval() {
    let aws = world();
    let clock = clock();
    let terms = vec![SecurityGroupSelectorTerm { tags: Some(tags(DISCOVERY)), ..Default::default() }];
    // The default: one minute.
    let r = resolver(&aws, &clock);
    block_on(r.security_groups.list(&terms)).unwrap();
    clock.step_secs(59);
    block_on(r.security_groups.list(&terms)).unwrap();
    assert_eq!(aws.count("DescribeSecurityGroups"), 1, "cached within the default minute");
    clock.step_secs(1);
    block_on(r.security_groups.list(&terms)).unwrap();
    assert_eq!(aws.count("DescribeSecurityGroups"), 2, "described again after a minute");

    let mut s = settings();
    s.security_group_refresh_interval = Duration::from_secs(300);
    let r = NodeClassResolver::new(apis(&aws), s, Arc::new(clock.clone()));
    let before = block_on(r.security_groups.list(&terms)).unwrap();
    aws.with(|w| w.security_groups.retain(|g| g.group_id != before[0].id));
    clock.step_secs(299);
    assert_eq!(block_on(r.security_groups.list(&terms)).unwrap(), before, "stale within the interval");
    assert_eq!(aws.count("DescribeSecurityGroups"), 3);
    clock.step_secs(1);
    let after = block_on(r.security_groups.list(&terms)).unwrap();
    assert_eq!(
        (aws.count("DescribeSecurityGroups"), after.len()),
        (4, before.len() - 1),
        "described again once expired"
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Aliases and SSM paths.
// ---------------------------------------------------------------------------------------------------------------

fn alias(s: &str) -> Alias {
    s.parse().unwrap()
}

fn paths(a: &str, k8s: &str) -> Vec<(String, &'static str, Vec<Variant>)> {
    alias_parameters(&alias(a), k8s).unwrap().into_iter().map(|p| (p.path, p.arch, p.variants)).collect()
}

#[test]
fn alias_paths_al2023() {
    use Variant::*;
    let base = "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023";
    assert_eq!(
        paths("al2023@latest", "1.31"),
        vec![
            (format!("{base}/x86_64/standard/recommended/image_id"), "amd64", vec![Standard]),
            (format!("{base}/x86_64/nvidia/recommended/image_id"), "amd64", vec![Nvidia]),
            (format!("{base}/x86_64/neuron/recommended/image_id"), "amd64", vec![Neuron]),
            (format!("{base}/arm64/standard/recommended/image_id"), "arm64", vec![Standard]),
            (format!("{base}/arm64/nvidia/recommended/image_id"), "arm64", vec![Nvidia]),
        ]
    );
    let pinned = paths("al2023@v20240807", "1.31");
    assert_eq!(
        pinned[0].0,
        format!("{base}/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.31-v20240807/image_id")
    );
    assert_eq!(pinned[4].0, format!("{base}/arm64/nvidia/amazon-eks-node-al2023-arm64-nvidia-1.31-v20240807/image_id"));
    assert!(alias_parameters(&alias("al2023@latest"), "1.31").unwrap().iter().all(|p| p.mutable));
    assert!(alias_parameters(&alias("al2023@v20240807"), "1.31").unwrap().iter().all(|p| !p.mutable));
}

#[test]
fn alias_paths_al2_and_support_window() {
    use Variant::*;
    let base = "/aws/service/eks/optimized-ami/1.30";
    assert_eq!(
        paths("al2@latest", "1.30"),
        vec![
            (format!("{base}/amazon-linux-2/recommended/image_id"), "amd64", vec![Standard]),
            (format!("{base}/amazon-linux-2-arm64/recommended/image_id"), "arm64", vec![Standard]),
            (format!("{base}/amazon-linux-2-gpu/recommended/image_id"), "amd64", vec![Nvidia, Neuron]),
        ]
    );
    let pinned = paths("al2@v20240807", "1.30");
    assert_eq!(pinned[0].0, format!("{base}/amazon-linux-2/amazon-eks-node-1.30-v20240807/image_id"));
    assert_eq!(pinned[1].0, format!("{base}/amazon-linux-2-arm64/amazon-eks-arm64-node-1.30-v20240807/image_id"));
    assert_eq!(pinned[2].0, format!("{base}/amazon-linux-2-gpu/amazon-eks-gpu-node-1.30-v20240807/image_id"));
    assert!(matches!(alias_parameters(&alias("al2@latest"), "1.33"), Err(AmiError::UnsupportedAlias { .. })));
    assert!(alias_parameters(&alias("al2@latest"), "1.32").is_ok());
    assert!(matches!(alias_parameters(&alias("al2023@latest"), "one"), Err(AmiError::InvalidKubernetesVersion(_))));
    // EKS reports minors like `31+`.
    assert_eq!(paths("al2023@latest", "1.31+")[0].0, paths("al2023@latest", "1.31")[0].0);
}

#[test]
fn alias_paths_bottlerocket() {
    use Variant::*;
    assert_eq!(
        paths("bottlerocket@v1.20.3", "1.31"),
        vec![
            (
                "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.20.3/image_id".to_string(),
                "amd64",
                vec![Standard, Neuron]
            ),
            ("/aws/service/bottlerocket/aws-k8s-1.31/arm64/1.20.3/image_id".to_string(), "arm64", vec![Standard]),
            ("/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/1.20.3/image_id".to_string(), "amd64", vec![Nvidia]),
            ("/aws/service/bottlerocket/aws-k8s-1.31-nvidia/arm64/1.20.3/image_id".to_string(), "arm64", vec![Nvidia]),
        ]
    );
    assert_eq!(
        paths("bottlerocket@latest", "1.31")[0].0,
        "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id"
    );
}

#[test]
fn alias_paths_windows() {
    for (family, year, build) in [
        ("windows2019", "2019", "10.0.17763"),
        ("windows2022", "2022", "10.0.20348"),
        ("windows2025", "2025", "10.0.26100"),
    ] {
        let params = alias_parameters(&alias(&format!("{family}@latest")), "1.35").unwrap();
        assert_eq!(params.len(), 1);
        assert_eq!(
            params[0].path,
            format!("/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-1.35/image_id")
        );
        assert_eq!(
            params[0].requirement_sets,
            vec![vec![
                NodeSelectorRequirement::new("kubernetes.io/arch", "In", &["amd64"]),
                NodeSelectorRequirement::new("kubernetes.io/os", "In", &["windows"]),
                NodeSelectorRequirement::new("node.kubernetes.io/windows-build", "In", &[build]),
            ]]
        );
    }
    assert!(matches!(alias_parameters(&alias("windows2025@latest"), "1.34"), Err(AmiError::UnsupportedAlias { .. })));
    assert!(alias_parameters(&alias("windows2022@latest"), "1.34").is_ok());
}

#[test]
fn variant_requirements() {
    let params = alias_parameters(&alias("al2023@latest"), "1.31").unwrap();
    assert_eq!(
        params[0].requirement_sets,
        vec![vec![
            NodeSelectorRequirement::new("kubernetes.io/arch", "In", &["amd64"]),
            NodeSelectorRequirement::new(aws_labels::INSTANCE_ACCELERATOR_COUNT, "DoesNotExist", &[]),
            NodeSelectorRequirement::new(aws_labels::INSTANCE_GPU_COUNT, "DoesNotExist", &[]),
        ]]
    );
    assert_eq!(
        params[1].requirement_sets,
        vec![vec![
            NodeSelectorRequirement::new("kubernetes.io/arch", "In", &["amd64"]),
            NodeSelectorRequirement::new(aws_labels::INSTANCE_GPU_COUNT, "Exists", &[]),
        ]]
    );
    assert_eq!(
        params[2].requirement_sets[0][1],
        NodeSelectorRequirement::new(aws_labels::INSTANCE_ACCELERATOR_COUNT, "Exists", &[])
    );
}

// ---------------------------------------------------------------------------------------------------------------
// AMI choice.
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn alias_resolves_one_ami_per_arch_and_variant() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    let amis = block_on(r.amis.resolve(&default_class().spec, "1.31")).unwrap();
    assert_eq!(amis.len(), 5);
    let by_id: BTreeMap<&str, &ResolvedAmi> = amis.iter().map(|a| (a.id.as_str(), a)).collect();
    assert!(by_id["ami-nv-arm"].requirements.contains(&NodeSelectorRequirement::new(
        "kubernetes.io/arch",
        "In",
        &["arm64"]
    )));
    // A missing parameter is skipped.
    aws.with(|w| w.parameters.retain(|k, _| !k.contains("neuron")));
    let r = resolver(&aws, &clock);
    assert_eq!(block_on(r.amis.resolve(&default_class().spec, "1.31")).unwrap().len(), 4);
    // None at all is an error.
    aws.with(|w| w.parameters.clear());
    let r = resolver(&aws, &clock);
    assert!(matches!(block_on(r.amis.resolve(&default_class().spec, "1.31")), Err(AmiError::NoParameters(_))));
}

#[test]
fn al2_gpu_image_serves_two_requirement_sets() {
    let aws = Arc::new(MockAws::new());
    aws.with(|w| {
        w.parameters.insert(
            "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-gpu/recommended/image_id".into(),
            "ami-gpu".into(),
        );
        w.images.push(image("ami-gpu", "amazon-eks-gpu-node", "x86_64", "2024-01-01T00:00:00Z"));
    });
    let clock = clock();
    let r = resolver(&aws, &clock);
    let c = class(EC2NodeClassOptions { ami_alias: Some("al2@latest".into()), ..Default::default() });
    let amis = block_on(r.amis.resolve(&c.spec, "1.30")).unwrap();
    assert_eq!(amis.len(), 2);
    assert!(amis.iter().all(|a| a.id == "ami-gpu"));
    assert_ne!(amis[0].requirements, amis[1].requirements);
}

fn terms_class(terms: Vec<AmiSelectorTerm>) -> EC2NodeClass {
    class(EC2NodeClassOptions { ami_selector_terms: terms, ami_family: Some("AL2023".into()), ..Default::default() })
}

#[test]
fn newest_image_per_requirements_and_deprecated_only_as_fallback() {
    let aws = Arc::new(MockAws::new());
    aws.with(|w| {
        w.images = vec![
            image("ami-old", "custom-1", "x86_64", "2024-01-01T00:00:00Z"),
            image("ami-new", "custom-2", "x86_64", "2024-03-01T00:00:00Z"),
            image("ami-arm", "custom-arm", "arm64", "2023-01-01T00:00:00Z"),
            image("ami-mac", "custom-mac", "x86_64_mac", "2025-01-01T00:00:00Z"),
            ImageDescription {
                deprecation_time: Some("2024-12-01T00:00:00Z".into()),
                ..image("ami-newest-deprecated", "custom-3", "x86_64", "2024-06-01T00:00:00Z")
            },
        ];
    });
    let clock = clock();
    let r = resolver(&aws, &clock);
    let c = terms_class(vec![AmiSelectorTerm { name: Some("custom-*".into()), ..Default::default() }]);
    let amis = block_on(r.amis.resolve(&c.spec, "1.31")).unwrap();
    let ids: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["ami-new", "ami-arm"], "newest non-deprecated per arch; unknown architectures ignored");
    // With only deprecated candidates, the deprecated one is used.
    aws.with(|w| w.images.retain(|i| i.image_id == "ami-newest-deprecated" || i.image_id == "ami-arm"));
    let r = resolver(&aws, &clock);
    let amis = block_on(r.amis.resolve(&c.spec, "1.31")).unwrap();
    assert_eq!(
        amis.iter().map(|a| (a.id.as_str(), a.deprecated)).collect::<Vec<_>>(),
        [("ami-arm", false), ("ami-newest-deprecated", true)]
    );
    assert!(amis[1].to_status().deprecated);
}

#[test]
fn term_queries_ids_ssm_names_owners_tags() {
    let aws = Arc::new(MockAws::new());
    aws.with(|w| {
        w.parameters.insert("/my/ami".into(), "ami-from-ssm".into());
        w.parameters.insert("/not/an/ami".into(), "hello".into());
    });
    let clock = clock();
    let r = resolver(&aws, &clock);
    let c = terms_class(vec![
        AmiSelectorTerm { id: Some("ami-2".into()), ..Default::default() },
        AmiSelectorTerm { ssm_parameter: Some("/my/ami".into()), ..Default::default() },
        AmiSelectorTerm { ssm_parameter: Some("/not/an/ami".into()), ..Default::default() },
        AmiSelectorTerm { ssm_parameter: Some("/missing".into()), ..Default::default() },
        AmiSelectorTerm { id: Some("ami-1".into()), ..Default::default() },
        AmiSelectorTerm { name: Some("n".into()), ..Default::default() },
        AmiSelectorTerm { name: Some("m".into()), owner: Some("123456789012".into()), ..Default::default() },
        AmiSelectorTerm { tags: Some(tags(&[("team", "a"), ("any", "*")])), ..Default::default() },
    ]);
    let queries = block_on(r.amis.queries(&c.spec, "1.31")).unwrap();
    let state = Filter::new("state", ["available"]);
    assert_eq!(
        queries.iter().map(|q| q.request.clone()).collect::<Vec<_>>(),
        vec![
            DescribeImagesRequest {
                filters: vec![Filter::new("image-id", ["ami-1", "ami-2", "ami-from-ssm"]), state.clone()],
                owners: vec![]
            },
            DescribeImagesRequest {
                filters: vec![Filter::new("name", ["n"]), state.clone()],
                owners: vec!["self".into(), "amazon".into()]
            },
            DescribeImagesRequest {
                filters: vec![Filter::new("name", ["m"]), state.clone()],
                owners: vec!["123456789012".into()]
            },
            DescribeImagesRequest {
                filters: vec![Filter::new("tag-key", ["any"]), Filter::new("tag:team", ["a"]), state],
                owners: vec![]
            },
        ]
    );
}

fn it_requirements(arch: &str, gpus: Option<&str>, accelerators: Option<&str>) -> Requirements {
    let mut r = Requirements::new();
    r.add(Requirement::in_values("kubernetes.io/arch", [arch]));
    for (key, v) in [(aws_labels::INSTANCE_GPU_COUNT, gpus), (aws_labels::INSTANCE_ACCELERATOR_COUNT, accelerators)] {
        r.add(match v {
            Some(v) => Requirement::in_values(key, [v]),
            None => Requirement::does_not_exist(key),
        });
    }
    r
}

#[test]
fn instance_types_match_amis_by_arch_and_accelerator() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    let amis: Vec<_> =
        block_on(r.amis.resolve(&default_class().spec, "1.31")).unwrap().iter().map(|a| a.to_status()).collect();
    let pick = |reqs: Requirements| ami_for_instance_type(&amis, &reqs).map(|a| a.id.clone());
    assert_eq!(pick(it_requirements("amd64", None, None)).as_deref(), Some("ami-std-amd"));
    assert_eq!(pick(it_requirements("arm64", None, None)).as_deref(), Some("ami-std-arm"));
    assert_eq!(pick(it_requirements("amd64", Some("1"), None)).as_deref(), Some("ami-nv-amd"));
    assert_eq!(pick(it_requirements("arm64", Some("4"), None)).as_deref(), Some("ami-nv-arm"));
    assert_eq!(pick(it_requirements("amd64", None, Some("16"))).as_deref(), Some("ami-neu-amd"));
    assert_eq!(pick(it_requirements("s390x", None, None)), None);
    let it = |name: &str, reqs: Requirements| {
        karpenter_requirements::InstanceType::new(name, reqs, vec![], Default::default(), Default::default())
    };
    let its = [
        it("m5.large", it_requirements("amd64", None, None)),
        it("g5.xlarge", it_requirements("amd64", Some("1"), None)),
        it("m7g.large", it_requirements("arm64", None, None)),
        it("c5.large", it_requirements("amd64", None, None)),
        it("z1.mainframe", it_requirements("s390x", None, None)),
    ];
    let mapped = map_to_instance_types(&amis, &its);
    assert_eq!(
        mapped,
        BTreeMap::from([
            ("ami-std-amd".to_string(), vec!["m5.large".to_string(), "c5.large".to_string()]),
            ("ami-nv-amd".to_string(), vec!["g5.xlarge".to_string()]),
            ("ami-std-arm".to_string(), vec!["m7g.large".to_string()]),
        ])
    );
}

#[test]
fn ssm_cache_and_deprecation_invalidation() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    block_on(r.amis.resolve(&default_class().spec, "1.31")).unwrap();
    assert_eq!(aws.count("GetParameter"), 5);
    clock.step_secs(120); // AMI cache expired, SSM cache (24 h) not.
    block_on(r.amis.resolve(&default_class().spec, "1.31")).unwrap();
    assert_eq!(aws.count("GetParameter"), 5);
    assert_eq!(aws.count("DescribeImages"), 2, "AMIs re-described after AMI_REFRESH_INTERVAL");
    // The standard x86 image becomes deprecated: its parameter is dropped and read again.
    aws.with(|w| {
        for i in &mut w.images {
            if i.image_id == "ami-std-amd" {
                i.deprecation_time = Some("2025-01-01T00:01:00Z".into());
            }
        }
    });
    let ssm = r.amis.ssm().clone();
    let dropped = block_on(ssm.invalidate_deprecated(&*aws, clock.now())).unwrap();
    assert_eq!(
        dropped,
        vec!["/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"]
    );
    clock.step_secs(120);
    block_on(r.amis.resolve(&default_class().spec, "1.31")).unwrap();
    assert_eq!(aws.count("GetParameter"), 6, "only the invalidated parameter is read again");
    clock.step_secs(24 * 3600);
    block_on(r.amis.resolve(&default_class().spec, "1.31")).unwrap();
    assert_eq!(aws.count("GetParameter"), 11, "after 24 h every parameter is read again");
}

// ---------------------------------------------------------------------------------------------------------------
// Instance profiles.
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn instance_profile_is_created_tagged_and_reused() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    let mut c = default_class();
    c.spec.tags = tags(&[("team", "a")]);
    let name = block_on(r.instance_profiles.resolve(&c, None)).unwrap();
    assert!(name.starts_with("test-cluster_"), "{name}");
    let uid = c.metadata.uid.clone().unwrap();
    let profile = aws.with(|w| w.instance_profiles[&name].clone());
    assert_eq!(profile.path, format!("/karpenter/us-west-2/test-cluster/{uid}/"));
    assert_eq!(profile.roles, ["KarpenterNodeRole"]);
    assert_eq!(
        profile.tags,
        tags(&[
            ("eks:eks-cluster-name", "test-cluster"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("kubernetes.io/cluster/test-cluster", "owned"),
            ("team", "a"),
            ("topology.kubernetes.io/region", "us-west-2"),
        ])
    );
    // Cached: no IAM call for 15 minutes.
    let calls = aws.calls().len();
    assert_eq!(block_on(r.instance_profiles.resolve(&c, Some(&name))).unwrap(), name);
    assert_eq!(aws.calls().len(), calls);
    // After the cache: a profile that lost its role and a tag is repaired, not re-created.
    clock.step_secs(15 * 60);
    aws.with(|w| {
        let p = w.instance_profiles.get_mut(&name).unwrap();
        p.roles.clear();
        p.tags.remove("team");
    });
    assert_eq!(block_on(r.instance_profiles.resolve(&c, Some(&name))).unwrap(), name);
    assert_eq!(aws.count("CreateInstanceProfile"), 1);
    assert_eq!(aws.count("TagInstanceProfile"), 1);
    assert_eq!(aws.with(|w| w.instance_profiles[&name].roles.clone()), ["KarpenterNodeRole"]);
    // spec.instanceProfile is used as it is.
    let given = class(EC2NodeClassOptions { instance_profile: Some("my-profile".into()), ..Default::default() });
    assert_eq!(block_on(r.instance_profiles.resolve(&given, None)).unwrap(), "my-profile");
    assert_eq!(aws.count("CreateInstanceProfile"), 1);
    assert_eq!(role_name("arn:aws:iam::123456789012:role/path/NodeRole"), "NodeRole");
}

#[test]
fn role_change_gives_a_new_profile_and_old_one_is_protected_then_collected() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    let c = default_class();
    let first = block_on(r.instance_profiles.resolve(&c, None)).unwrap();
    let mut changed = c.clone();
    changed.spec.role = Some("OtherRole".into());
    let second = block_on(r.instance_profiles.resolve(&changed, Some(&first))).unwrap();
    assert_ne!(first, second);
    assert_eq!(aws.with(|w| w.instance_profiles[&second].roles.clone()), ["OtherRole"]);
    // GC keeps both for an hour (new profile not yet in any status, old one protected).
    let referenced = BTreeSet::from([second.clone()]);
    assert!(block_on(r.instance_profiles.garbage_collect(&referenced)).unwrap().is_empty());
    clock.step_secs(3600);
    assert_eq!(block_on(r.instance_profiles.garbage_collect(&referenced)).unwrap(), vec![first.clone()]);
    assert!(aws.with(|w| !w.instance_profiles.contains_key(&first)));
    // Node class deletion removes the remaining managed profile (role removed first).
    let mut deleting = changed.clone();
    deleting.status =
        Some(crate::api::EC2NodeClassStatus { instance_profile: Some(second.clone()), ..Default::default() });
    assert_eq!(block_on(r.instance_profiles.delete_managed(&deleting)).unwrap(), vec![second.clone()]);
    assert!(aws.with(|w| w.instance_profiles.is_empty()));
    assert!(aws.count("RemoveRoleFromInstanceProfile") >= 1);
    // Deleting again is fine, and a class with spec.instanceProfile deletes nothing.
    assert!(block_on(r.instance_profiles.delete_managed(&deleting)).unwrap().is_empty());
    aws.with(|w| {
        w.instance_profiles.insert(
            "my-profile".into(),
            InstanceProfileDescription { name: "my-profile".into(), path: "/".into(), ..Default::default() },
        )
    });
    let given = class(EC2NodeClassOptions { instance_profile: Some("my-profile".into()), ..Default::default() });
    assert!(block_on(r.instance_profiles.delete_managed(&given)).unwrap().is_empty());
    assert!(aws.with(|w| w.instance_profiles.contains_key("my-profile")));
}

// ---------------------------------------------------------------------------------------------------------------
// Capacity reservations and placement groups.
// ---------------------------------------------------------------------------------------------------------------

pub(super) fn reservation(
    id: &str,
    kind: Option<&str>,
    end: Option<chrono::DateTime<Utc>>,
) -> CapacityReservationDescription {
    CapacityReservationDescription {
        capacity_reservation_id: id.into(),
        availability_zone: "us-west-2a".into(),
        instance_type: "p5.48xlarge".into(),
        owner_id: "123456789012".into(),
        instance_match_criteria: "targeted".into(),
        reservation_type: kind.map(str::to_string),
        state: "active".into(),
        total_instance_count: 4,
        available_instance_count: 2,
        end_date: end,
        interruptible: false,
        tags: tags(&[("team", "ml")]),
    }
}

#[test]
fn capacity_reservation_queries_status_and_availability() {
    let terms = vec![
        CapacityReservationSelectorTerm { id: Some("cr-1".into()), ..Default::default() },
        CapacityReservationSelectorTerm {
            owner_id: Some("123456789012".into()),
            instance_match_criteria: Some(InstanceMatchCriteria::Targeted),
            tags: Some(tags(&[("team", "ml")])),
            ..Default::default()
        },
    ];
    let q = reservation_queries(&terms);
    assert_eq!(q[0].capacity_reservation_ids, ["cr-1"]);
    assert_eq!(
        q[1].filters,
        vec![
            Filter::new("owner-id", ["123456789012"]),
            Filter::new("instance-match-criteria", ["targeted"]),
            Filter::new("tag:team", ["ml"]),
            Filter::new("state", ["active"]),
        ]
    );
    let clock = clock();
    let now = clock.now();
    let block = reservation("cr-2", Some("capacity-block"), Some(now + chrono::Duration::minutes(30)));
    let s = reservation_status(&block, now);
    assert_eq!(
        (s.reservation_type, s.state),
        (CapacityReservationType::CapacityBlock, CapacityReservationState::Expiring)
    );
    assert_eq!(s.end_time.as_deref(), Some("2025-01-01T00:30:00Z"));
    let later = reservation("cr-3", Some("capacity-block"), Some(now + chrono::Duration::hours(2)));
    assert_eq!(reservation_status(&later, now).state, CapacityReservationState::Active);
    let odcr = reservation("cr-1", None, Some(now + chrono::Duration::minutes(5)));
    assert_eq!(reservation_status(&odcr, now).state, CapacityReservationState::Active, "only capacity blocks expire");

    let aws = world();
    aws.with(|w| {
        w.capacity_reservations = vec![
            odcr.clone(),
            later.clone(),
            CapacityReservationDescription { state: "expired".into(), ..reservation("cr-9", None, None) },
        ]
    });
    let r = resolver(&aws, &clock);
    let list = block_on(r.capacity_reservations.list(&terms)).unwrap();
    assert_eq!(list.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["cr-1", "cr-3"]);
    // Requeue at the next transition: the ODCR ends in 5 minutes... but at most a minute.
    assert_eq!(r.capacity_reservations.next_requeue(&list), Duration::from_secs(60));
    let soon = vec![reservation_status(
        &reservation(
            "cr-4",
            Some("capacity-block"),
            Some(now + chrono::Duration::minutes(40) + chrono::Duration::seconds(20)),
        ),
        now,
    )];
    assert_eq!(r.capacity_reservations.next_requeue(&soon), Duration::from_secs(20));
    // Availability tracking.
    assert_eq!(r.capacity_reservations.available_count("cr-1"), Some(2));
    r.capacity_reservations.mark_launched("cr-1");
    assert_eq!(r.capacity_reservations.available_count("cr-1"), Some(1));
    r.capacity_reservations.mark_terminated("cr-1");
    r.capacity_reservations.mark_terminated("cr-1");
    assert_eq!(r.capacity_reservations.available_count("cr-1"), Some(3));
    r.capacity_reservations.mark_unavailable("cr-1");
    assert_eq!(r.capacity_reservations.available_count("cr-1"), Some(0));
    assert_eq!(r.capacity_reservations.available_count("cr-unknown"), None);
    assert!(block_on(r.capacity_reservations.is_selected_uncached(&terms, "cr-3")).unwrap());
    assert!(!block_on(r.capacity_reservations.is_selected_uncached(&terms, "cr-9")).unwrap());
}

#[test]
fn placement_group_resolution() {
    let aws = world();
    aws.with(|w| {
        w.placement_groups = vec![PlacementGroupDescription {
            group_id: "pg-1".into(),
            group_name: "ml".into(),
            strategy: "partition".into(),
            partition_count: Some(3),
            spread_level: None,
            state: "available".into(),
        }]
    });
    let clock = clock();
    let r = resolver(&aws, &clock);
    let by_name = PlacementGroupSelector { name: Some("ml".into()), id: None };
    let got = block_on(r.placement_groups.resolve(&by_name)).unwrap().unwrap();
    assert_eq!((got.id.as_str(), got.partition_count), ("pg-1", Some(3)));
    let missing = PlacementGroupSelector { id: Some("pg-404".into()), name: None };
    assert_eq!(block_on(r.placement_groups.resolve(&missing)).unwrap(), None);
}

// ---------------------------------------------------------------------------------------------------------------
// Status and conditions.
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn ready_node_class_status() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    let out = block_on(r.reconcile(&default_class(), "1.31"));
    let s = &out.status;
    assert_eq!(s.subnets.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["subnet-a2", "subnet-b1", "subnet-a1"]);
    assert_eq!(s.subnets[0].zone_id.as_deref(), Some("us-west-2a-id"));
    assert_eq!(s.security_groups.iter().map(|g| g.id.as_str()).collect::<Vec<_>>(), ["sg-1", "sg-2"]);
    assert_eq!(s.amis.len(), 5);
    assert!(s.instance_profile.as_deref().is_some_and(|p| p.starts_with("test-cluster_")));
    for t in conditions::ready_dependents(true) {
        assert_eq!(condition(s, t), (t, ConditionStatus::True), "{t}");
    }
    assert_eq!(condition(s, conditions::READY), ("Ready", ConditionStatus::True));
    assert!(s.conditions.iter().all(|c| c.observed_generation == Some(3)));
    assert_eq!(out.requeue_after, Duration::from_secs(60));
    // Reconciling the result again changes nothing (transition times kept).
    let mut again = default_class();
    again.status = Some(out.status.clone());
    clock.step_secs(30);
    assert_eq!(block_on(r.reconcile(&again, "1.31")).status, out.status);
}

#[test]
fn missing_subnets_security_groups_and_amis_fail_their_conditions() {
    let aws = world();
    aws.with(|w| {
        w.subnets.clear();
        w.security_groups.clear();
        w.images.clear();
    });
    let clock = clock();
    let r = resolver(&aws, &clock);
    let s = block_on(r.reconcile(&default_class(), "1.31")).status;
    assert_eq!(condition(&s, conditions::SUBNETS_READY), ("SubnetsNotFound", ConditionStatus::False));
    assert_eq!(condition(&s, conditions::SECURITY_GROUPS_READY), ("SecurityGroupsNotFound", ConditionStatus::False));
    assert_eq!(condition(&s, conditions::AMIS_READY), ("AMINotFound", ConditionStatus::False));
    assert_eq!(condition(&s, conditions::VALIDATION_SUCCEEDED), ("DependenciesNotReady", ConditionStatus::False));
    assert_eq!(condition(&s, conditions::INSTANCE_PROFILE_READY).1, ConditionStatus::True);
    let ready = s.condition(conditions::READY).unwrap();
    assert_eq!((ready.reason.as_str(), ready.status), ("UnhealthyDependents", ConditionStatus::False));
    assert!(ready.message.contains("SubnetsReady=False"), "{}", ready.message);
    assert!(s.subnets.is_empty() && s.amis.is_empty());
}

#[test]
fn unsupported_alias_and_missing_placement_group() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    let mut c = class(EC2NodeClassOptions { ami_alias: Some("al2@latest".into()), ..Default::default() });
    c.spec.placement_group_selector = Some(PlacementGroupSelector { name: Some("nope".into()), id: None });
    let s = block_on(r.reconcile(&c, "1.33")).status;
    assert_eq!(condition(&s, conditions::AMIS_READY), ("UnsupportedAlias", ConditionStatus::False));
    assert_eq!(condition(&s, conditions::PLACEMENT_GROUP_READY), ("PlacementGroupNotFound", ConditionStatus::False));
    assert_eq!(condition(&s, conditions::READY).1, ConditionStatus::False);
}

#[test]
fn retryable_errors_keep_the_previous_status_and_others_fail() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    let first = block_on(r.reconcile(&default_class(), "1.31")).status;
    let mut c = default_class();
    c.status = Some(first.clone());
    clock.step_secs(61);
    aws.fail_next("DescribeSubnets", AwsApiError::new("DescribeSubnets", "RequestLimitExceeded", "slow down"));
    let s = block_on(r.reconcile(&c, "1.31")).status;
    assert_eq!(s.subnets, first.subnets, "throttled: previous subnets kept");
    assert_eq!(condition(&s, conditions::SUBNETS_READY).1, ConditionStatus::True);
    clock.step_secs(61);
    aws.fail_next("DescribeSubnets", AwsApiError::new("DescribeSubnets", "UnauthorizedOperation", "no"));
    let s = block_on(r.reconcile(&c, "1.31")).status;
    assert!(s.subnets.is_empty());
    assert_eq!(condition(&s, conditions::SUBNETS_READY), ("SubnetsNotFound", ConditionStatus::False));
    // A first resolution that is throttled leaves the condition Unknown; validation waits on it.
    let aws = world();
    let r = resolver(&aws, &clock);
    aws.fail_next(
        "DescribeSecurityGroups",
        AwsApiError::with_kind("DescribeSecurityGroups", "", "timeout", AwsErrorKind::Transient),
    );
    let s = block_on(r.reconcile(&default_class(), "1.31")).status;
    assert_eq!(condition(&s, conditions::SECURITY_GROUPS_READY), ("AwaitingResolution", ConditionStatus::Unknown));
    assert_eq!(condition(&s, conditions::VALIDATION_SUCCEEDED), ("DependenciesNotReady", ConditionStatus::False));
    let ready = s.condition(conditions::READY).unwrap();
    assert_eq!(ready.status, ConditionStatus::False);
    assert!(ready.message.contains("SecurityGroupsReady=Unknown"), "{}", ready.message);
    // Once the call succeeds, everything is ready.
    clock.step_secs(61);
    let mut c = default_class();
    c.status = Some(s);
    assert!(block_on(r.reconcile(&c, "1.31")).status.is_true(conditions::READY));
}

#[test]
fn reserved_capacity_gate_controls_the_condition() {
    let aws = world();
    let clock = clock();
    let mut s = settings();
    s.reserved_capacity = false;
    let r = NodeClassResolver::new(apis(&aws), s, Arc::new(clock.clone()));
    let status = block_on(r.reconcile(&default_class(), "1.31")).status;
    assert!(status.condition(conditions::CAPACITY_RESERVATIONS_READY).is_none());
    assert_eq!(condition(&status, conditions::READY).1, ConditionStatus::True);
    assert_eq!(aws.count("DescribeCapacityReservations"), 0);
}

#[derive(Debug)]
struct DenyFleet;

#[async_trait::async_trait]
impl AuthorizationCheck for DenyFleet {
    async fn check(
        &self,
        _: &EC2NodeClass,
        status: &crate::api::EC2NodeClassStatus,
    ) -> Result<(), AuthorizationFailure> {
        assert!(!status.subnets.is_empty(), "dry runs see the resolved status");
        Err(AuthorizationFailure { reason: "CreateFleetAuthCheckFailed".into(), message: "denied".into() })
    }
}

#[test]
fn validation_reports_restricted_tags_and_dry_run_failures() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    let mut c = default_class();
    c.spec.tags = tags(&[("kubernetes.io/cluster/x", "owned")]);
    let s = block_on(r.reconcile(&c, "1.31")).status;
    assert_eq!(condition(&s, conditions::VALIDATION_SUCCEEDED), ("TagValidationFailed", ConditionStatus::False));
    let r = resolver(&aws, &clock).with_authorization_check(Arc::new(DenyFleet));
    let s = block_on(r.reconcile(&default_class(), "1.31")).status;
    assert_eq!(condition(&s, conditions::VALIDATION_SUCCEEDED), ("CreateFleetAuthCheckFailed", ConditionStatus::False));
    assert_eq!(condition(&s, conditions::READY).1, ConditionStatus::False);
}

#[test]
fn ami_family_enum_roundtrip_is_used_for_windows_builds() {
    assert_eq!(windows_build(AmiFamily::Windows2022), Some("10.0.20348"));
    assert_eq!(windows_build(AmiFamily::Al2023), None);
}

// ---------------------------------------------------------------------------------------------------------------
// Kubelet CEL expressions in ValidationSucceeded.

/// An instance-type provider over a mock catalogue (`types`: fetched when not empty) with the `NodeClassCEL` gate.
fn instance_types(
    clock: &FakeClock,
    types: &[(&str, i64, i64)],
    gate: bool,
) -> crate::instancetypes::InstanceTypeProvider {
    use crate::instancetypes::{InstanceTypeProvider, InstanceTypeProviderOptions, SharedPrices};
    use crate::launch::mock::{MockEc2, instance_type_info};
    let ec2 = MockEc2::new(Arc::new(clock.clone()));
    let infos = types.iter().map(|(n, c, m)| instance_type_info(n, *c, *m)).collect();
    ec2.set_catalogue(infos, &["us-west-2a"]);
    let mut options = InstanceTypeProviderOptions::new("us-west-2");
    options.node_class_cel = gate;
    let unavailable = crate::launch::ice::UnavailableOfferings::new(Arc::new(clock.clone()));
    let p = InstanceTypeProvider::new(
        Arc::new(ec2),
        Arc::new(clock.clone()),
        SharedPrices::default(),
        unavailable,
        options,
    );
    if !types.is_empty() {
        block_on(p.refresh()).expect("catalogue");
    }
    p
}

fn class_with_kubelet(kubelet: serde_json::Value) -> EC2NodeClass {
    let mut c = default_class();
    c.spec.kubelet = Some(serde_json::from_value(kubelet).expect("kubelet decodes"));
    c
}

fn validation(r: &NodeClassResolver, c: &EC2NodeClass) -> (String, ConditionStatus, String, Duration) {
    let out = block_on(r.reconcile(c, "1.31"));
    let v = out.status.condition(conditions::VALIDATION_SUCCEEDED).expect("ValidationSucceeded").clone();
    (v.reason, v.status, v.message, out.requeue_after)
}

#[test]
fn kubelet_expressions_need_the_gate_compile_and_evaluate_for_every_type() {
    let aws = world();
    let clock = clock();
    let types = [("m5.large", 2, 8), ("m5.xlarge", 4, 16)];
    let expr = class_with_kubelet(serde_json::json!({"maxPods": "min(max_pods, 20)", "kubeReserved": {"cpu": "100m"}}));
    // Gate off: any expression blocks launches.
    let off = resolver(&aws, &clock).with_instance_types(instance_types(&clock, &types, false));
    let (reason, status, message, _) = validation(&off, &expr);
    assert_eq!((reason.as_str(), status), ("KubeletExpressionsDisabled", ConditionStatus::False));
    assert!(message.contains("NodeClassCEL"), "{message}");
    // Without expressions the gate does not matter.
    let plain = class_with_kubelet(serde_json::json!({"maxPods": 20}));
    assert_eq!(validation(&off, &plain).1, ConditionStatus::True);

    let on = resolver(&aws, &clock).with_instance_types(instance_types(&clock, &types, true));
    assert_eq!(validation(&on, &expr).1, ConditionStatus::True);
    let invalid = class_with_kubelet(serde_json::json!({"kubeReserved": {"memory": "11 * pods + 255"}}));
    let (reason, status, message, _) = validation(&on, &invalid);
    assert_eq!((reason.as_str(), status), ("KubeletExpressionInvalid", ConditionStatus::False));
    assert!(message.contains("kubeReserved[memory]") && message.contains("\"pods\""), "{message}");
    // Fails for the 2-vCPU type only.
    let failing = class_with_kubelet(serde_json::json!({"systemReserved": {"cpu": "(vcpus - 3) * 100"}}));
    let (reason, status, message, _) = validation(&on, &failing);
    assert_eq!((reason.as_str(), status), ("KubeletExpressionEvaluationFailed", ConditionStatus::False));
    assert!(message.contains("m5.large") && message.contains("(vcpus - 3) * 100"), "{message}");
    assert_eq!(
        condition(&block_on(on.reconcile(&failing, "1.31")).status, conditions::READY).1,
        ConditionStatus::False
    );
}

#[test]
fn kubelet_expressions_wait_for_the_instance_type_catalogue() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock).with_instance_types(instance_types(&clock, &[], true));
    let expr = class_with_kubelet(serde_json::json!({"maxPods": "min(max_pods, 20)"}));
    let (reason, status, _, requeue) = validation(&r, &expr);
    assert_eq!(
        (reason.as_str(), status),
        (AWAITING_INSTANCE_TYPES, ConditionStatus::Unknown),
        "transient, not a failure"
    );
    assert!(requeue <= Duration::from_secs(60), "{requeue:?}");
}

// ---------------------------------------------------------------------------------------------------------------
// The open kubelet map in ValidationSucceeded.

#[test]
fn invalid_kubelet_configuration_blocks_the_class_with_every_problem() {
    let aws = world();
    let clock = clock();
    // With the CEL gate on and a catalogue: the map is judged before any expression.
    let types = [("m5.large", 2, 8)];
    let r = resolver(&aws, &clock).with_instance_types(instance_types(&clock, &types, true));
    let bad = class_with_kubelet(serde_json::json!({
        "maxPods": "min(max_pods, 20)",
        "fooBar": true,
        "podsPerCore": "x",
        "evictionHard": {"memory.free": "5%"},
    }));
    let (reason, status, message, _) = validation(&r, &bad);
    assert_eq!((reason.as_str(), status), ("InvalidKubeletConfiguration", ConditionStatus::False));
    assert_eq!(
        message,
        "kubelet.fooBar: unknown field; kubelet.podsPerCore: expected an integer; kubelet.evictionHard[memory.free]: \
         invalid key \"memory.free\", valid keys are memory.available, nodefs.available, nodefs.inodesFree, \
         imagefs.available, imagefs.inodesFree, pid.available"
    );
    let out = block_on(r.reconcile(&bad, "1.31"));
    assert_eq!(condition(&out.status, conditions::READY).1, ConditionStatus::False, "no launches");
    // Without an instance-type provider too (the check needs none).
    assert_eq!(validation(&resolver(&aws, &clock), &bad).0, "InvalidKubeletConfiguration");
    // Passthrough fields the AMI family can carry are fine.
    let good = class_with_kubelet(
        serde_json::json!({"maxPods": 20, "serializeImagePulls": false, "featureGates": {"A": true}}),
    );
    assert_eq!(validation(&r, &good).1, ConditionStatus::True);
}

// ---------------------------------------------------------------------------------------------------------------
// User data a launch could not build.

#[test]
fn al2023_classes_wait_for_the_service_cidr_and_say_why() {
    let aws = world();
    let clock = clock();
    let no_cidr = ResolverSettings { service_cidr: None, ..settings() };
    let r = NodeClassResolver::new(apis(&aws), no_cidr, Arc::new(clock.clone()));
    let (reason, status, message, _) = validation(&r, &default_class());
    assert_eq!((reason.as_str(), status), ("ClusterCIDRNotFound", ConditionStatus::False));
    assert!(message.contains("service CIDR") && message.contains("nodeadm"), "{message}");
    let out = block_on(r.reconcile(&default_class(), "1.31"));
    assert_eq!(condition(&out.status, conditions::READY).1, ConditionStatus::False, "no launches");
    // The other families bootstrap without it.
    let mut al2 = class(EC2NodeClassOptions { ami_alias: Some("al2@latest".into()), ..Default::default() });
    al2.metadata.generation = Some(3);
    let (reason, ..) = validation(&r, &al2);
    assert_ne!(reason, "ClusterCIDRNotFound");
    // With the CIDR the AL2023 class validates.
    assert_eq!(validation(&resolver(&aws, &clock), &default_class()).1, ConditionStatus::True);
}

#[test]
fn user_data_a_launch_cannot_merge_blocks_the_class_and_tolerated_forms_do_not() {
    let aws = world();
    let clock = clock();
    let r = resolver(&aws, &clock);
    let with_user_data = |alias: &str, user_data: &str| {
        class(EC2NodeClassOptions {
            ami_alias: Some(alias.into()),
            user_data: Some(user_data.into()),
            ..Default::default()
        })
    };
    let cases = [
        ("al2023@latest", "MIME-Version: 1.0\nContent-Type: multipart/mixed\n\nx", Some("InvalidUserData")),
        (
            "al2@latest",
            "Content-Type: multipart/mixed; boundary=\"B\"\n\n--B\nno headers\n--B--\n",
            Some("InvalidUserData"),
        ),
        ("bottlerocket@latest", "settings = [", Some("InvalidUserData")),
        ("bottlerocket@latest", "[settings]\nkubernetes = 1\n", Some("InvalidUserData")),
        // A kubelet configuration in the user's NodeConfig the kubelet refuses (low GC threshold over high).
        (
            "al2023@latest",
            "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      \
             imageGCHighThresholdPercent: 40\n      imageGCLowThresholdPercent: 60\n",
            Some("InvalidUserData"),
        ),
        // No closing delimiter: read to the end, as upstream reads it.
        (
            "al2@latest",
            "Content-Type: multipart/mixed; boundary=\"B\"\n\n--B\nContent-Type: text/x-shellscript\n\necho\n",
            None,
        ),
        // Unknown Bottlerocket settings are dropped at launch (with an event), not a failure.
        ("bottlerocket@latest", "[settings.kubernetes]\nfoo = 1\n", None),
        ("al2023@latest", "#!/bin/bash\necho hi\n", None),
    ];
    for (alias, user_data, problem) in cases {
        let (reason, status, message, _) = validation(&r, &with_user_data(alias, user_data));
        match problem {
            Some(p) => {
                assert_eq!((reason.as_str(), status), (p, ConditionStatus::False), "{alias}: {user_data:?}");
                assert!(message.starts_with("userData"), "{message}");
            }
            // (The mock world has AL2023 images only: other aliases stop at DependenciesNotReady.)
            None => assert!(
                !["InvalidUserData", "ClusterCIDRNotFound"].contains(&reason.as_str()),
                "{alias}: {user_data:?}: {reason} {message}"
            ),
        }
    }
}
