//! Launches through [`AwsCloudProvider`] over [`MockEc2`]: the launch-time subnet accounting and the EFA/IPv6
//! network interfaces of launch templates as the instance provider uses them.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::api::{GROUP, KIND};
use karpenter_api::NodeClaim;
use karpenter_api::labels::{CAPACITY_TYPE, NODE_POOL, OS, ZONE};
use karpenter_api::nodeclaim::NodeClassReference;
use karpenter_cloudprovider::{CloudProvider, ErrorKind, InMemoryNodeClasses, OfferingRef};
use karpenter_testing::FakeClock;
use karpenter_testing::karpenter::{NodeClaimOptions, node_claim};
use karpenter_testing::nodepool_requirement;
use serde_json::json;

use crate::ec2::InstanceTypeInfo;
use crate::instancetypes::SharedPrices;
use crate::launch::instance::ClusterInfo;
use crate::launch::mock::{MockEc2, instance_type_info};
use crate::pricing::{PriceSource, PriceTable};
use crate::provider::{AwsCloudProvider, AwsCloudProviderOptions};

const ZONES: [&str; 2] = ["us-west-2a", "us-west-2b"];
/// Pods of [`instance_type_info`] types: 3 ENIs × (10 − 1) + 2.
const PODS: i64 = 29;

struct Env {
    ec2: MockEc2,
    provider: AwsCloudProvider,
}

fn env(infos: Vec<InstanceTypeInfo>, spec: serde_json::Value, dns_ip: &str) -> Env {
    let clock = FakeClock::default();
    let ec2 = MockEc2::new(Arc::new(clock.clone()));
    let mut prices = PriceTable::default();
    for (i, info) in infos.iter().enumerate() {
        prices.on_demand.insert(info.instance_type.clone(), 0.1 + 0.01 * i as f64);
    }
    ec2.set_catalogue(infos, &ZONES);
    // The provider tests' class with three subnets (two in us-west-2a), amd64 only and no tags.
    let mut class = crate::provider::tests::class_json("True");
    class["status"]["subnets"] = json!([
        {"id": "subnet-a1", "zone": "us-west-2a", "zoneID": "usw2-az1"},
        {"id": "subnet-a2", "zone": "us-west-2a", "zoneID": "usw2-az1"},
        {"id": "subnet-b1", "zone": "us-west-2b", "zoneID": "usw2-az2"}
    ]);
    class["status"]["amis"] = json!([{"id": "ami-amd", "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]);
    if let Some(s) = class["spec"].as_object_mut() {
        s.remove("tags");
    }
    if let (Some(s), Some(extra)) = (class["spec"].as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    let classes = InMemoryNodeClasses::new();
    classes.insert_value(GROUP, KIND, "default", class);
    let cluster = ClusterInfo {
        name: "test-cluster".into(),
        endpoint: "https://api.example".into(),
        ca_bundle: Some("Q0E=".into()),
        service_cidr: Some("10.100.0.0/16".into()),
        dns_ip: Some(dns_ip.into()),
    };
    let provider = AwsCloudProvider::new(
        ec2.apis(),
        Arc::new(classes),
        Arc::new(clock.clone()),
        Arc::new(clock.clone()),
        SharedPrices::new(PriceSource::Table(prices)),
        AwsCloudProviderOptions::new(cluster, "us-west-2"),
    );
    Env { ec2, provider }
}

fn claim(name: &str, zone: Option<&str>, requests: &[(&str, &str)]) -> NodeClaim {
    let mut requirements = vec![
        nodepool_requirement(OS, "In", &["linux"]),
        nodepool_requirement(NODE_POOL, "In", &["default"]),
        nodepool_requirement(CAPACITY_TYPE, "In", &["on-demand"]),
    ];
    if let Some(zone) = zone {
        requirements.push(nodepool_requirement(ZONE, "In", &[zone]));
    }
    node_claim(NodeClaimOptions {
        name: Some(name.into()),
        node_pool: Some("default".into()),
        requirements,
        requests: requests.into(),
        node_class_ref: Some(NodeClassReference::new(GROUP, KIND, "default")),
        ..Default::default()
    })
}

fn subnets_of_last_fleet(e: &Env) -> BTreeSet<(String, String)> {
    let fleets = e.ec2.fleet_requests();
    let last = fleets.last().expect("a fleet request");
    last.launch_template_configs
        .iter()
        .flat_map(|c| &c.overrides)
        .map(|o| (o.availability_zone.clone(), o.subnet_id.clone().unwrap_or_default()))
        .collect()
}

fn pair(zone: &str, subnet: &str) -> (String, String) {
    (zone.to_owned(), subnet.to_owned())
}

#[tokio::test(start_paused = true)]
async fn overrides_use_the_subnet_with_most_free_ips_and_launches_hold_their_prediction() {
    let e = env(vec![instance_type_info("m5.large", 2, 8)], json!({}), "10.100.0.10");
    let ips = e.provider.instance_provider().subnet_ips().clone();
    ips.record("subnet-a1", 100);
    ips.record("subnet-a2", 120);
    ips.record("subnet-b1", 50);
    let basic = [("cpu", "1")];
    e.provider.create(&claim("one", None, &basic)).await.unwrap();
    assert_eq!(subnets_of_last_fleet(&e), BTreeSet::from([pair(ZONES[0], "subnet-a2"), pair(ZONES[1], "subnet-b1")]));
    // The fleet launched in zone a (cheapest first in the mock): a2 keeps the prediction, b1 got it back.
    assert_eq!(ips.free_ips("subnet-a2"), Some(120 - PODS));
    assert_eq!(ips.free_ips("subnet-b1"), Some(50));
    // a2 is down to 91 free IPs, below a1's 100: the next launch goes to a1.
    e.provider.create(&claim("two", None, &basic)).await.unwrap();
    assert_eq!(subnets_of_last_fleet(&e), BTreeSet::from([pair(ZONES[0], "subnet-a1"), pair(ZONES[1], "subnet-b1")]));
    assert_eq!(ips.free_ips("subnet-a1"), Some(100 - PODS));
    // A failed CreateFleet gives the whole prediction back.
    e.ec2.fail_next(
        crate::launch::mock::ops::CREATE_FLEET,
        crate::api_error::AwsApiError::new("CreateFleet", "UnauthorizedOperation", "no"),
    );
    assert!(e.provider.create(&claim("three", None, &basic)).await.is_err());
    assert_eq!(ips.free_ips("subnet-a2"), Some(120 - PODS));
    assert_eq!(ips.free_ips("subnet-a1"), Some(100 - PODS));
    assert_eq!(ips.free_ips("subnet-b1"), Some(50));
}

#[tokio::test(start_paused = true)]
async fn a_full_subnet_is_skipped_and_its_zone_marked_only_when_no_subnet_is_left() {
    let e = env(vec![instance_type_info("m5.large", 2, 8)], json!({}), "10.100.0.10");
    let ips = e.provider.instance_provider().subnet_ips().clone();
    ips.record("subnet-a1", 100);
    ips.record("subnet-a2", 120);
    e.ec2.set_subnet_full("subnet-a2", true);
    let in_a = |name: &str| claim(name, Some(ZONES[0]), &[("cpu", "1")]);
    let offering = OfferingRef::new("m5.large", ZONES[0], "on-demand");
    let err = e.provider.create(&in_a("first")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity, "{err}");
    assert!(ips.is_unavailable("subnet-a2"));
    assert_eq!(ips.described("subnet-a2"), Some(0));
    assert!(!e.provider.unavailable_offerings().is_unavailable(&offering), "subnet-a1 still serves the zone");
    // The retry goes to a1 and launches.
    let created = e.provider.create(&in_a("second")).await.unwrap();
    assert_eq!(subnets_of_last_fleet(&e), BTreeSet::from([pair(ZONES[0], "subnet-a1")]));
    assert!(created.provider_id().is_some());
    // a1 runs out too: now the zone has no subnet left and the offering is marked.
    e.ec2.set_subnet_full("subnet-a1", true);
    let err = e.provider.create(&in_a("third")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity, "{err}");
    assert!(e.provider.unavailable_offerings().is_unavailable(&offering));
    // With every subnet of the zone out, a launch there has no override at all.
    let err = e.provider.create(&in_a("fourth")).await.unwrap_err();
    assert!(err.to_string().contains("no capacity offerings") || err.kind() == ErrorKind::InsufficientCapacity);
    assert_eq!(e.ec2.fleet_requests().len(), 3, "no fourth fleet request");
}

fn efa_type(name: &str, efa: i64) -> InstanceTypeInfo {
    let mut info = instance_type_info(name, 2, 8);
    info.network_info.efa_info = Some(crate::ec2::EfaInfo { maximum_efa_interfaces: Some(efa) });
    info
}

#[tokio::test(start_paused = true)]
async fn efa_requests_get_one_launch_template_per_efa_count_with_efa_interfaces() {
    let infos = vec![efa_type("c5n.large", 1), efa_type("p4d.large", 2), instance_type_info("m5.large", 2, 8)];
    let e = env(infos.clone(), json!({}), "10.100.0.10");
    e.provider.create(&claim("efa", None, &[("cpu", "1"), ("vpc.amazonaws.com/efa", "1")])).await.unwrap();
    let fleets = e.ec2.fleet_requests();
    assert_eq!(fleets[0].launch_template_configs.len(), 2, "one template per EFA count (m5 has none)");
    let mut counts: Vec<Vec<(i32, i32, Option<String>)>> = e
        .ec2
        .launch_templates()
        .iter()
        .map(|lt| {
            assert!(lt.data.security_group_ids.is_empty(), "groups are on the interfaces");
            lt.data
                .network_interfaces
                .iter()
                .map(|n| (n.network_card_index, n.device_index, n.interface_type.clone()))
                .collect()
        })
        .collect();
    counts.sort();
    let efa = || Some("efa".to_owned());
    assert_eq!(counts, vec![vec![(0, 0, efa())], vec![(0, 0, efa()), (1, 1, efa())]]);

    // Without an EFA request the same types share one template without interfaces.
    let e = env(infos, json!({}), "10.100.0.10");
    e.provider.create(&claim("plain", None, &[("cpu", "1")])).await.unwrap();
    let lts = e.ec2.launch_templates();
    assert_eq!(lts.len(), 1);
    assert!(lts[0].data.network_interfaces.is_empty());
    assert_eq!(lts[0].data.security_group_ids, ["sg-1"]);
}

#[tokio::test(start_paused = true)]
async fn ipv6_clusters_get_an_ipv6_primary_interface() {
    let e = env(vec![instance_type_info("m5.large", 2, 8)], json!({"ipPrefixCount": 2}), "fd00:10:96::a");
    assert!(e.provider.instance_provider().cluster().is_ipv6());
    e.provider.create(&claim("v6", None, &[("cpu", "1")])).await.unwrap();
    let lts = e.ec2.launch_templates();
    let primary = &lts[0].data.network_interfaces[0];
    assert_eq!((primary.primary_ipv6, primary.ipv6_address_count), (Some(true), Some(1)));
    assert_eq!((primary.ipv4_prefix_count, primary.ipv6_prefix_count), (None, Some(2)));
    let v4 = ClusterInfo { dns_ip: Some("10.100.0.10".into()), ..Default::default() };
    assert!(!v4.is_ipv6());
    assert!(!ClusterInfo::default().is_ipv6());
}
