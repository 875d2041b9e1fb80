//! A launch through [`AwsCloudProvider`] over the SDK adapters against moto in us-west-2: the node class resolved
//! by the resolver, then create (launch template + CreateFleet instant), create again (the tagged instance is
//! found, no second launch), get, list, reboot (NotImplemented without the `RebootForRepair` gate, RebootInstances
//! with it), delete until NotFound.
//!
//! moto's quirks shape the assertions: CreateFleet always takes the first override (so the claim pins one
//! instance type and zone) and instances do not get the launch template's security groups or profile.
//!
//! A second test creates a launch template with every network and placement field (and a targeted capacity
//! reservation) through the SDK adapter and reads it back with DescribeLaunchTemplateVersions (moto stores the
//! request's data as given).
//!
//! moto does not report `CapacityReservationSpecification` on instances, so the instance side of the
//! capacity-reservation preference is covered by the MockEc2 tests only.

#![cfg(feature = "sdk")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_ec2::types::{CapacityReservationPreference, Tag};
use common::moto::MotoServer;
use karpenter_api::NodeClaim;
use karpenter_api::condition::Conditions;
use karpenter_api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, NODE_POOL, OS, ZONE};
use karpenter_api::nodeclaim::NodeClassReference;
use karpenter_aws::api::{GROUP, KIND, conditions};
use karpenter_aws::api_error::AwsErrorKind;
use karpenter_aws::instancetypes::SharedPrices;
use karpenter_aws::launch::fleet::FleetApi;
use karpenter_aws::launch::instance::ClusterInfo;
use karpenter_aws::nodeclass::instance_profile::ClusterIdentity;
use karpenter_aws::nodeclass::{NodeClassResolver, ResolverApis, ResolverSettings};
use karpenter_aws::pricing::PriceSource;
use karpenter_aws::provider::{AwsApis, AwsCloudProvider, AwsCloudProviderOptions, instance_id};
use karpenter_aws::sdk::{AwsClients, SdkOptions};
use karpenter_cloudprovider::{Clock, CloudProvider, ErrorKind, InMemoryNodeClasses, Sleeper, SystemClock};
use karpenter_testing::karpenter::{NodeClaimOptions, node_claim};
use karpenter_testing::nodepool_requirement;

const REGION: &str = "us-west-2";
const CLUSTER: &str = "test-cluster";

/// Real waits (the provider's throttling backoff).
#[derive(Debug)]
struct TokioSleep;

#[async_trait::async_trait]
impl Sleeper for TokioSleep {
    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}

fn claim(name: &str) -> NodeClaim {
    node_claim(NodeClaimOptions {
        name: Some(name.into()),
        node_pool: Some("default".into()),
        requirements: vec![
            nodepool_requirement(OS, "In", &["linux"]),
            nodepool_requirement(NODE_POOL, "In", &["default"]),
            nodepool_requirement(CAPACITY_TYPE, "In", &["on-demand"]),
            nodepool_requirement(INSTANCE_TYPE, "In", &["m5.large"]),
            nodepool_requirement(ZONE, "In", &["us-west-2a"]),
        ],
        requests: [("cpu", "1"), ("memory", "1Gi")].into(),
        node_class_ref: Some(NodeClassReference::new(GROUP, KIND, "default")),
        ..Default::default()
    })
}

#[tokio::test]
async fn create_get_list_delete_through_the_cloud_provider() {
    let Some(server) = MotoServer::start() else { return };
    let c = AwsClients::load(&SdkOptions::emulator(&server.url(), REGION)).await.expect("sdk config");

    // Seed what the node class selects.
    let discovery = Tag::builder().key("karpenter.sh/discovery").value(CLUSTER).build();
    let vpc = c.ec2.create_vpc().cidr_block("10.0.0.0/16").send().await.unwrap().vpc.unwrap().vpc_id.unwrap();
    for (i, zone) in ["us-west-2a", "us-west-2b"].into_iter().enumerate() {
        let out = c.ec2.create_subnet().vpc_id(&vpc).cidr_block(format!("10.0.{i}.0/24")).availability_zone(zone);
        let subnet = out.send().await.unwrap().subnet.unwrap().subnet_id.unwrap();
        c.ec2.create_tags().resources(&subnet).tags(discovery.clone()).send().await.unwrap();
    }
    let sg = c.ec2.create_security_group().group_name("nodes").description("nodes").vpc_id(&vpc);
    let sg = sg.send().await.unwrap().group_id.unwrap();
    c.ec2.create_tags().resources(&sg).tags(discovery).send().await.unwrap();
    let param = c.ssm.put_parameter().name("/karpenter/test/ami").value("ami-35e92e4c");
    param.r#type(aws_sdk_ssm::types::ParameterType::String).send().await.unwrap();
    let role = c.iam.create_role().role_name("KarpenterNodeRole");
    role.assume_role_policy_document(r#"{"Version":"2012-10-17","Statement":[]}"#).send().await.unwrap();

    // Resolve the node class, then hand it (with its status) to the provider's lookup.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let ec2 = Arc::new(c.ec2_adapter());
    let apis = ResolverApis {
        subnets: ec2.clone(),
        security_groups: ec2.clone(),
        images: ec2.clone(),
        ssm: Arc::new(c.ssm_adapter()),
        capacity_reservations: ec2.clone(),
        placement_groups: ec2.clone(),
        iam: Arc::new(c.iam_adapter()),
    };
    let settings = ResolverSettings {
        cluster: ClusterIdentity { cluster_name: CLUSTER.into(), region: REGION.into() },
        service_cidr: Some("10.100.0.0/16".into()),
        ..ResolverSettings::default()
    };
    let resolver = NodeClassResolver::new(apis, settings, clock.clone());
    let mut node_class: karpenter_aws::api::EC2NodeClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "uid": "uid-1", "generation": 1},
        "spec": {
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"ssmParameter": "/karpenter/test/ami"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "role": "KarpenterNodeRole"
        }
    }))
    .unwrap();
    let status = resolver.reconcile(&node_class, "1.33").await.status;
    assert!(status.is_true(conditions::READY), "{:?}", status.conditions);
    node_class.status = Some(status);
    let classes = InMemoryNodeClasses::new();
    classes.insert_value(GROUP, KIND, "default", serde_json::to_value(&node_class).unwrap());

    let options = AwsCloudProviderOptions::new(
        ClusterInfo {
            name: CLUSTER.into(),
            endpoint: "https://api.example".into(),
            ca_bundle: Some("Q0E=".into()),
            service_cidr: Some("10.100.0.0/16".into()),
            dns_ip: None,
        },
        REGION,
    );
    let classes = Arc::new(classes);
    let provider_with = |options: AwsCloudProviderOptions| {
        AwsCloudProvider::new(
            AwsApis { fleet: ec2.clone(), launch_templates: ec2.clone(), instance_types: ec2.clone() },
            classes.clone(),
            clock.clone(),
            Arc::new(TokioSleep),
            SharedPrices::new(PriceSource::Estimate),
            options,
        )
    };
    let provider = provider_with(options.clone());
    let rebooting = provider_with(AwsCloudProviderOptions { reboot_for_repair: true, ..options });

    let created = provider.create(&claim("default-abc12")).await.expect("create");
    let provider_id = created.provider_id().expect("provider id").to_owned();
    assert!(provider_id.starts_with("aws:///us-west-2a/i-"), "{provider_id}");
    let id = instance_id(&provider_id).expect("instance id").to_owned();
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(INSTANCE_TYPE).map(String::as_str), Some("m5.large"));
    assert_eq!(labels.get(CAPACITY_TYPE).map(String::as_str), Some("on-demand"));

    // The instance in EC2: tagged with the claim, the cluster and the pool, launched from the claim's AMI.
    let described = c.ec2.describe_instances().instance_ids(&id).send().await.unwrap();
    let instance = described.reservations()[0].instances()[0].clone();
    let tag = |k: &str| instance.tags().iter().find(|t| t.key() == Some(k)).and_then(|t| t.value()).map(str::to_owned);
    assert_eq!(tag("karpenter.sh/nodeclaim").as_deref(), Some("default-abc12"));
    assert_eq!(tag("karpenter.sh/nodepool").as_deref(), Some("default"));
    assert_eq!(tag("eks:eks-cluster-name").as_deref(), Some(CLUSTER));
    assert_eq!(instance.image_id(), Some("ami-35e92e4c"));
    let templates = c.ec2.describe_launch_templates().send().await.unwrap();
    assert_eq!(templates.launch_templates().len(), 1, "{templates:?}");
    // With the ReservedCapacity gate on (the default) an on-demand launch template opts out of every capacity
    // reservation (preference `none`, no target), so the instance never lands in an open reservation.
    let name = templates.launch_templates()[0].launch_template_name().expect("name");
    let versions = c.ec2.describe_launch_template_versions().launch_template_name(name).send().await.unwrap();
    let data = versions.launch_template_versions()[0].launch_template_data().expect("data");
    let spec = data.capacity_reservation_specification().expect("capacity reservation specification");
    assert_eq!(spec.capacity_reservation_preference(), Some(&CapacityReservationPreference::None));
    assert!(spec.capacity_reservation_target().is_none(), "{spec:?}");

    // A retried create finds the tagged instance instead of launching another.
    let again = provider.create(&claim("default-abc12")).await.expect("create again");
    assert_eq!(again.provider_id(), Some(provider_id.as_str()));
    let all = c.ec2.describe_instances().send().await.unwrap();
    assert_eq!(all.reservations().iter().map(|r| r.instances().len()).sum::<usize>(), 1);

    assert_eq!(provider.get(&provider_id).await.expect("get").provider_id(), Some(provider_id.as_str()));
    let listed = provider.list().await.expect("list");
    assert_eq!(listed.iter().filter_map(|c| c.provider_id()).collect::<Vec<_>>(), [provider_id.as_str()]);

    // Reboot: NotImplemented without the gate; with it RebootInstances is accepted and the instance stays the one
    // instance, running. An id EC2 does not know is NotFound (what the provider maps to NodeClaimNotFound).
    let err = provider.reboot(&created).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotImplemented, "{err}");
    rebooting.reboot(&created).await.expect("reboot");
    let listed = rebooting.list().await.expect("list after reboot");
    assert_eq!(listed.iter().filter_map(|c| c.provider_id()).collect::<Vec<_>>(), [provider_id.as_str()]);
    let err = ec2.reboot_instances(&["i-0123456789abcdef0".to_owned()]).await.unwrap_err();
    assert_eq!(err.kind, AwsErrorKind::NotFound, "{err}");

    // Delete: in progress, then NotFound once EC2 no longer lists the instance as live.
    let mut gone = false;
    for _ in 0..20 {
        match provider.delete(&created).await {
            Ok(()) => tokio::time::sleep(Duration::from_millis(250)).await,
            Err(e) if e.is_not_found() => {
                gone = true;
                break;
            }
            Err(e) => panic!("delete: {e}"),
        }
    }
    assert!(gone, "the instance never went away");
    assert!(provider.get(&provider_id).await.unwrap_err().is_not_found());
    assert!(rebooting.reboot(&created).await.unwrap_err().is_not_found(), "a terminated instance is not rebooted");
}

#[tokio::test]
async fn launch_template_network_and_placement_fields_reach_ec2() {
    use karpenter_aws::launch::template::{
        CapacityReservationPreference as Preference, LaunchTemplate, LaunchTemplateApi, LaunchTemplateData,
        LtConnectionTracking, LtNetworkInterface, LtPlacement,
    };

    let Some(server) = MotoServer::start() else { return };
    let c = AwsClients::load(&SdkOptions::emulator(&server.url(), REGION)).await.expect("sdk config");
    let efa = |card: i32, device: i32| LtNetworkInterface {
        network_card_index: card,
        device_index: device,
        interface_type: Some("efa".into()),
        security_group_ids: vec!["sg-1".into()],
        delete_on_termination: true,
        ..Default::default()
    };
    let primary = LtNetworkInterface {
        associate_public_ip_address: Some(false),
        ipv6_prefix_count: Some(2),
        ipv6_address_count: Some(1),
        primary_ipv6: Some(true),
        connection_tracking: Some(LtConnectionTracking {
            tcp_established_timeout: Some(600),
            udp_stream_timeout: Some(90),
            udp_timeout: Some(30),
        }),
        ..efa(0, 0)
    };
    let data = LaunchTemplateData {
        image_id: "ami-35e92e4c".into(),
        user_data: "#!/bin/bash".into(),
        network_interfaces: vec![primary, efa(1, 1)],
        placement: Some(LtPlacement {
            group_id: Some("pg-0123456789abcdef0".into()),
            partition_number: Some(2),
            tenancy: Some("dedicated".into()),
        }),
        nested_virtualization: true,
        enclave_enabled: Some(true),
        capacity_reservation_id: Some("cr-0123456789abcdef0".into()),
        capacity_reservation_preference: Some(Preference::CapacityReservationsOnly),
        resource_tags: [("team".to_string(), "a".to_string())].into(),
        tag_spot_requests: true,
        ..Default::default()
    };
    let template = LaunchTemplate::new(data, [("eks:eks-cluster-name".to_string(), CLUSTER.to_string())].into());
    c.ec2_adapter().create_launch_template(&template).await.expect("create launch template");

    let out = c.ec2.describe_launch_template_versions().launch_template_name(&template.name).send().await.unwrap();
    let stored = out.launch_template_versions()[0].launch_template_data().expect("data").clone();
    let placement = stored.placement().expect("placement");
    assert_eq!(placement.group_id(), Some("pg-0123456789abcdef0"));
    assert_eq!(placement.partition_number(), Some(2));
    assert_eq!(placement.tenancy().map(|t| t.as_str()), Some("dedicated"));
    let interfaces = stored.network_interfaces();
    assert_eq!(interfaces.len(), 2, "{interfaces:?}");
    let cards: Vec<(Option<i32>, Option<i32>, Option<&str>)> =
        interfaces.iter().map(|n| (n.network_card_index(), n.device_index(), n.interface_type())).collect();
    assert_eq!(cards, [(Some(0), Some(0), Some("efa")), (Some(1), Some(1), Some("efa"))]);
    let p = &interfaces[0];
    assert_eq!(p.associate_public_ip_address(), Some(false));
    assert_eq!(p.ipv6_prefix_count(), Some(2));
    assert_eq!(p.ipv6_address_count(), Some(1));
    assert_eq!(p.primary_ipv6(), Some(true));
    assert_eq!(p.groups(), ["sg-1"]);
    let tracking = p.connection_tracking_specification().expect("connection tracking");
    assert_eq!(
        (tracking.tcp_established_timeout(), tracking.udp_stream_timeout(), tracking.udp_timeout()),
        (Some(600), Some(90), Some(30))
    );
    assert!(stored.security_group_ids().is_empty(), "groups are on the interfaces");
    let nested = stored.cpu_options().and_then(|o| o.nested_virtualization()).map(|n| n.as_str().to_owned());
    assert_eq!(nested.as_deref(), Some("enabled"));
    assert_eq!(stored.enclave_options().and_then(|o| o.enabled()), Some(true));
    let spec = stored.capacity_reservation_specification().expect("capacity reservation specification");
    assert_eq!(spec.capacity_reservation_preference(), Some(&CapacityReservationPreference::CapacityReservationsOnly));
    let target = spec.capacity_reservation_target().and_then(|t| t.capacity_reservation_id());
    assert_eq!(target, Some("cr-0123456789abcdef0"));
    let mut tagged: Vec<&str> =
        stored.tag_specifications().iter().filter_map(|t| t.resource_type()).map(|r| r.as_str()).collect();
    tagged.sort();
    // moto also lists the template's own tag specification among the data's.
    tagged.retain(|r| *r != "launch-template");
    assert_eq!(tagged, ["network-interface", "spot-instances-request"]);
}
