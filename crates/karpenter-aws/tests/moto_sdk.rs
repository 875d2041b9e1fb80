//! The SDK adapters against moto (an EC2/SSM/SQS/IAM/EKS emulator) in us-west-2: the interruption queue end to
//! end, the EC2/SSM/IAM/EKS adapters, error codes mapped to kinds. Every test starts its own moto server (see
//! `common::moto`); the SDK's retries are off, so errors are seen as moto sends them.

#![cfg(feature = "sdk")]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_ec2::types::Tag;
use aws_sdk_sqs::types::QueueAttributeName;
use common::moto::MotoServer;
use karpenter_aws::api_error::AwsErrorKind;
use karpenter_aws::discovery::{EksApi, discover};
use karpenter_aws::nodeclass::api::{
    CreateInstanceProfileRequest, DescribeImagesRequest, Filter, IamApi, ImageApi, SecurityGroupApi, SsmApi, SubnetApi,
};
use karpenter_aws::pricing_api::PricingApi;
use karpenter_aws::queue::{InstanceClaim, QueueApi, SqsInterruptionSource, StaticLookup};
use karpenter_aws::sdk::{AwsClients, SdkOptions};
use karpenter_cloudprovider::{InterruptionAction, InterruptionKind, InterruptionSource};

const REGION: &str = "us-west-2";

async fn clients(server: &MotoServer) -> AwsClients {
    AwsClients::load(&SdkOptions::emulator(&server.url(), REGION)).await.expect("sdk config")
}

const INSTANCE: &str = "i-0123456789abcdef0";

fn spot_warning(instance_id: &str) -> String {
    format!(
        r#"{{"version":"0","id":"7f0c-spot","detail-type":"EC2 Spot Instance Interruption Warning",
        "source":"aws.ec2","account":"123456789012","time":"2026-03-01T12:00:00Z","region":"us-west-2",
        "resources":["arn:aws:ec2:us-west-2a:instance/{instance_id}"],
        "detail":{{"instance-id":"{instance_id}","instance-action":"terminate"}}}}"#
    )
}

async fn queue_depth(c: &AwsClients, url: &str) -> (u64, u64) {
    let out = c
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    let attrs = out.attributes().cloned().unwrap_or_default();
    let n = |k: &QueueAttributeName| attrs.get(k).and_then(|v| v.parse().ok()).unwrap_or(u64::MAX);
    (n(&QueueAttributeName::ApproximateNumberOfMessages), n(&QueueAttributeName::ApproximateNumberOfMessagesNotVisible))
}

#[tokio::test]
async fn interruption_queue_round_trip() {
    let Some(server) = MotoServer::start() else { return };
    let c = clients(&server).await;
    let url = c.sqs.create_queue().queue_name("karpenter-int").send().await.unwrap().queue_url.unwrap();
    c.sqs.send_message().queue_url(&url).message_body(spot_warning(INSTANCE)).send().await.unwrap();
    c.sqs.send_message().queue_url(&url).message_body("{\"version\": garbled").send().await.unwrap();
    assert_eq!(queue_depth(&c, &url).await, (2, 0));

    let claim = InstanceClaim {
        name: "default-abcde".into(),
        provider_id: format!("aws:///us-west-2a/{INSTANCE}"),
        instance_type: Some("m5.large".into()),
        zone: Some("us-west-2a".into()),
        capacity_type: Some("spot".into()),
        capacity_reservation_id: None,
    };
    let lookup = Arc::new(StaticLookup(BTreeMap::from([(INSTANCE.to_owned(), claim)])));
    let source = SqsInterruptionSource::new(Arc::new(c.sqs_adapter()), lookup, "karpenter-int");

    let events = source.next_batch().await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].provider_id, format!("aws:///us-west-2a/{INSTANCE}"));
    assert_eq!(events[0].kind, InterruptionKind::SpotInterrupted);
    assert_eq!(events[0].action, InterruptionAction::Delete);
    let stats = source.stats();
    assert_eq!((stats.received, stats.malformed, stats.deleted), (2, 1, 1));
    // The garbled message is gone; the spot warning is in flight until acknowledged.
    assert_eq!(queue_depth(&c, &url).await, (0, 1));

    source.acknowledge(&events).await.unwrap();
    assert_eq!(queue_depth(&c, &url).await, (0, 0));
    assert_eq!(source.stats().deleted, 2);
}

#[tokio::test]
async fn sqs_errors_keep_their_codes() {
    let Some(server) = MotoServer::start() else { return };
    let c = clients(&server).await;
    let sqs = c.sqs_adapter();
    let err = sqs.queue_url("no-such-queue").await.unwrap_err();
    assert_eq!(err.operation, "GetQueueUrl");
    assert!(err.code.contains("NonExistentQueue"), "{err}");
    assert_eq!(err.kind, AwsErrorKind::NotFound);
    let source = SqsInterruptionSource::new(Arc::new(sqs), Arc::new(StaticLookup::default()), "no-such-queue");
    let err = source.next_batch().await.unwrap_err();
    assert!(err.message.contains("NonExistentQueue"), "{err}");
}

#[tokio::test]
async fn ec2_adapters_describe_seeded_resources() {
    let Some(server) = MotoServer::start() else { return };
    let c = clients(&server).await;
    let (vpc, subnets, sg) = seed_network(&c).await;

    let ec2 = c.ec2_adapter();
    let tags = BTreeMap::from([("karpenter.sh/discovery".to_owned(), "test-cluster".to_owned())]);
    let mut found = ec2.describe_subnets(&Filter::for_tags(&tags)).await.unwrap();
    found.sort_by(|a, b| a.subnet_id.cmp(&b.subnet_id));
    let mut want: Vec<&String> = subnets[..2].iter().collect();
    want.sort();
    assert_eq!(found.iter().map(|s| &s.subnet_id).collect::<Vec<_>>(), want);
    assert!(found.iter().all(|s| s.vpc_id.as_deref() == Some(vpc.as_str())));
    assert!(found.iter().all(|s| s.available_ip_address_count > 200), "{found:?}");
    assert!(found.iter().all(|s| s.tags.get("karpenter.sh/discovery").map(String::as_str) == Some("test-cluster")));
    let zones: Vec<&str> = found.iter().map(|s| s.availability_zone.as_str()).collect();
    assert!(zones.contains(&"us-west-2a") && zones.contains(&"us-west-2b"), "{zones:?}");
    let by_id = ec2.describe_subnets(&[Filter::new("subnet-id", [subnets[2].as_str()])]).await.unwrap();
    assert_eq!(by_id.len(), 1);
    assert_eq!(by_id[0].availability_zone, "us-west-2c");

    let groups = ec2.describe_security_groups(&Filter::for_tags(&tags)).await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].group_id, sg);
    assert_eq!(groups[0].group_name, "karpenter-nodes");
    let by_name = ec2.describe_security_groups(&[Filter::new("group-name", ["karpenter-nodes"])]).await.unwrap();
    assert_eq!(by_name.len(), 1);
    let none = ec2.describe_security_groups(&[Filter::new("group-name", ["absent"])]).await.unwrap();
    assert!(none.is_empty());

    // moto ships Amazon-owned images; select one by name and owner, deprecated included.
    let request = DescribeImagesRequest {
        filters: vec![
            Filter::new("name", ["suse-sles-12-sp3-v20170907-hvm-ssd-x86_64"]),
            Filter::new("state", ["available"]),
        ],
        owners: vec![],
    };
    let images = ec2.describe_images(&request).await.unwrap();
    assert_eq!(images.len(), 1, "{images:?}");
    assert_eq!(images[0].image_id, "ami-35e92e4c");
    assert_eq!(images[0].architecture, "x86_64");
    assert!(!images[0].creation_date.is_empty());
    let none = ec2
        .describe_images(&DescribeImagesRequest { filters: vec![Filter::new("name", ["nope-*"])], owners: vec![] })
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn ssm_iam_and_eks_adapters() {
    let Some(server) = MotoServer::start() else { return };
    let c = clients(&server).await;

    // SSM: moto refuses PutParameter under /aws/, so seed a custom path.
    c.ssm
        .put_parameter()
        .name("/karpenter/test/ami")
        .value("ami-35e92e4c")
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .unwrap();
    let ssm = c.ssm_adapter();
    assert_eq!(ssm.get_parameter("/karpenter/test/ami").await.unwrap(), "ami-35e92e4c");
    let err = ssm.get_parameter("/karpenter/test/absent").await.unwrap_err();
    assert_eq!(err.kind, AwsErrorKind::NotFound, "{err}");
    assert_eq!(err.code, "ParameterNotFound");

    // IAM instance profiles: create, add a role, get, list by path, remove, delete, then NotFound.
    c.iam
        .create_role()
        .role_name("KarpenterNodeRole")
        .assume_role_policy_document(r#"{"Version":"2012-10-17","Statement":[]}"#)
        .send()
        .await
        .unwrap();
    let iam = c.iam_adapter();
    let path = "/karpenter/us-west-2/test-cluster/uid-1/";
    let created = iam
        .create_instance_profile(&CreateInstanceProfileRequest {
            name: "test-cluster_123".into(),
            path: path.into(),
            tags: BTreeMap::from([("karpenter.k8s.aws/ec2nodeclass".to_owned(), "default".to_owned())]),
        })
        .await
        .unwrap();
    assert_eq!(created.name, "test-cluster_123");
    assert_eq!(created.path, path);
    let err = iam
        .create_instance_profile(&CreateInstanceProfileRequest {
            name: "test-cluster_123".into(),
            path: path.into(),
            tags: BTreeMap::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code, "EntityAlreadyExists", "{err}");
    iam.add_role_to_instance_profile("test-cluster_123", "KarpenterNodeRole").await.unwrap();
    let got = iam.get_instance_profile("test-cluster_123").await.unwrap();
    assert_eq!(got.roles, ["KarpenterNodeRole"]);
    let listed = iam.list_instance_profiles("/karpenter/us-west-2/").await.unwrap();
    assert_eq!(listed.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["test-cluster_123"]);
    assert!(iam.list_instance_profiles("/other/").await.unwrap().is_empty());
    iam.remove_role_from_instance_profile("test-cluster_123", "KarpenterNodeRole").await.unwrap();
    iam.delete_instance_profile("test-cluster_123").await.unwrap();
    let err = iam.get_instance_profile("test-cluster_123").await.unwrap_err();
    assert_eq!(err.kind, AwsErrorKind::NotFound, "{err}");
    assert_eq!(err.code, "NoSuchEntity");

    // EKS discovery.
    let eks = c.eks_adapter();
    let err = eks.describe_cluster("test-cluster").await.unwrap_err();
    assert_eq!(err.kind, AwsErrorKind::NotFound, "{err}");
    c.eks
        .create_cluster()
        .name("test-cluster")
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().subnet_ids("subnet-1").build())
        .send()
        .await
        .unwrap();
    let info = discover(&eks, "test-cluster", "").await.unwrap();
    assert!(info.endpoint.starts_with("https://"), "{info:?}");
    assert!(info.certificate_authority.is_some(), "{info:?}");
    let configured = discover(&eks, "test-cluster", "https://configured.example").await.unwrap();
    assert_eq!(configured.endpoint, "https://configured.example");
}

/// Seeds a VPC with two discovery-tagged subnets (us-west-2a/b), an untagged one (us-west-2c) and a tagged security
/// group; returns (vpc, subnets, security group).
async fn seed_network(c: &AwsClients) -> (String, Vec<String>, String) {
    let discovery = Tag::builder().key("karpenter.sh/discovery").value("test-cluster").build();
    let vpc = c.ec2.create_vpc().cidr_block("10.0.0.0/16").send().await.unwrap().vpc.unwrap().vpc_id.unwrap();
    let mut subnets = Vec::new();
    for (i, zone) in ["us-west-2a", "us-west-2b", "us-west-2c"].into_iter().enumerate() {
        let out = c.ec2.create_subnet().vpc_id(&vpc).cidr_block(format!("10.0.{i}.0/24")).availability_zone(zone);
        let subnet = out.send().await.unwrap().subnet.unwrap().subnet_id.unwrap();
        if i < 2 {
            c.ec2.create_tags().resources(&subnet).tags(discovery.clone()).send().await.unwrap();
        }
        subnets.push(subnet);
    }
    let sg = c.ec2.create_security_group().group_name("karpenter-nodes").description("nodes").vpc_id(&vpc);
    let sg = sg.send().await.unwrap().group_id.unwrap();
    c.ec2.create_tags().resources(&sg).tags(discovery).send().await.unwrap();
    (vpc, subnets, sg)
}

#[tokio::test]
async fn node_class_resolution_through_the_adapters() {
    use karpenter_api::condition::Conditions;
    use karpenter_aws::api::conditions;
    use karpenter_aws::nodeclass::instance_profile::ClusterIdentity;
    use karpenter_aws::nodeclass::{NodeClassResolver, ResolverApis, ResolverSettings};

    let Some(server) = MotoServer::start() else { return };
    let c = clients(&server).await;
    let (_, subnets, sg) = seed_network(&c).await;
    // moto lacks the EKS SSM parameters and refuses names under /aws/: the AMI comes from a custom parameter.
    let param = c.ssm.put_parameter().name("/karpenter/test/ami").value("ami-35e92e4c");
    param.r#type(aws_sdk_ssm::types::ParameterType::String).send().await.unwrap();
    let role = c.iam.create_role().role_name("KarpenterNodeRole");
    role.assume_role_policy_document(r#"{"Version":"2012-10-17","Statement":[]}"#).send().await.unwrap();

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
        cluster: ClusterIdentity { cluster_name: "test-cluster".into(), region: REGION.into() },
        service_cidr: Some("10.100.0.0/16".into()),
        ..ResolverSettings::default()
    };
    let clock: Arc<dyn karpenter_cloudprovider::Clock> = Arc::new(karpenter_cloudprovider::SystemClock);
    let resolver = NodeClassResolver::new(apis, settings, clock);
    let node_class: karpenter_aws::api::EC2NodeClass = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "uid": "uid-1", "generation": 1},
        "spec": {
            "amiFamily": "AL2023",
            "amiSelectorTerms": [{"ssmParameter": "/karpenter/test/ami"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test-cluster"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "test-cluster"}}],
            "role": "KarpenterNodeRole"
        }
    }))
    .unwrap();
    let status = resolver.reconcile(&node_class, "1.33").await.status;

    let mut want: Vec<&str> = subnets[..2].iter().map(String::as_str).collect();
    want.sort();
    let mut got: Vec<&str> = status.subnets.iter().map(|s| s.id.as_str()).collect();
    got.sort();
    assert_eq!(got, want, "{status:?}");
    assert_eq!(status.security_groups.iter().map(|g| g.id.as_str()).collect::<Vec<_>>(), [sg.as_str()]);
    assert_eq!(status.amis.iter().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["ami-35e92e4c"], "{status:?}");
    let profile = status.instance_profile.clone().expect("instance profile");
    let described = c.iam.get_instance_profile().instance_profile_name(&profile).send().await.unwrap();
    let roles: Vec<&str> = described.instance_profile().unwrap().roles().iter().map(|r| r.role_name()).collect();
    assert_eq!(roles, ["KarpenterNodeRole"]);
    for condition in [conditions::SUBNETS_READY, conditions::SECURITY_GROUPS_READY, conditions::AMIS_READY] {
        assert!(status.is_true(condition), "{condition}: {:?}", status.conditions);
    }

    // The validation dry runs pass (RunInstances answers DryRunOperation; moto takes the other two as allowed).
    use karpenter_aws::nodeclass::status::AuthorizationCheck;
    let dry_run = karpenter_aws::sdk::dry_run::Ec2DryRun::new(c.ec2.clone(), "test-cluster");
    assert_eq!(dry_run.check(&node_class, &status).await, Ok(()));
}

#[tokio::test]
async fn spot_price_history_through_the_pricing_adapter() {
    let Some(server) = MotoServer::start() else { return };
    let c = clients(&server).await;
    let start = chrono::DateTime::from_timestamp(1_772_366_400, 0).unwrap();
    let prices = c.pricing_adapter().spot_prices(start).await.unwrap();
    // moto prices every offering of the region at the same placeholder price.
    assert!(prices.len() > 100, "{}", prices.len());
    let m5: Vec<_> = prices.iter().filter(|p| p.instance_type == "m5.large").collect();
    assert!(m5.iter().any(|p| p.zone == "us-west-2a"), "{m5:?}");
    assert!(m5.iter().all(|p| p.price > 0.0 && p.timestamp.is_some()));
}

/// The AWS settings as `run --provider aws` would parse them from these flags.
fn aws_settings(flags: &[&str]) -> karpenter_aws::settings::AwsSettings {
    use clap::{Args, Command, FromArgMatches};
    let command = karpenter_aws::settings::AwsSettings::augment_args(Command::new("run"));
    let matches = command.try_get_matches_from(std::iter::once("run").chain(flags.iter().copied())).unwrap();
    karpenter_aws::settings::AwsSettings::from_arg_matches(&matches).unwrap()
}

/// What the assembly needs from the binary: an in-process API server's client and no node classes.
fn assembly_start<'a>(
    settings: &'a karpenter_aws::settings::AwsSettings,
    client: karpenter_api::kube::Client,
    shutdown: &tokio_util::sync::CancellationToken,
) -> karpenter_aws::assembly::AwsStart<'a> {
    karpenter_aws::assembly::AwsStart {
        settings,
        reserved_capacity: true,
        client,
        clock: Arc::new(karpenter_cloudprovider::SystemClock),
        shutdown: shutdown.clone(),
        node_classes: Arc::new(karpenter_cloudprovider::InMemoryNodeClasses::new()),
        metrics: Arc::new(karpenter_runtime::metrics::Metrics::new(&Default::default())),
    }
}

#[tokio::test]
async fn the_assembly_returns_the_provider_its_controllers_and_the_queue() {
    let Some(server) = MotoServer::start() else { return };
    let c = clients(&server).await;
    c.sqs.create_queue().queue_name("karpenter-int").send().await.unwrap();
    let api = karpenter_testing::apiserver::ApiServer::builder()
        .provider(&karpenter_aws::labels::provider_labels(), &karpenter_aws::api::node_class_apis())
        .build();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let sdk = SdkOptions::emulator(&server.url(), REGION);

    // An isolated VPC (no Pricing API, no instance-profile GC) with the endpoint configured (no DescribeCluster).
    let settings = aws_settings(&[
        "--cluster-name=test-cluster",
        "--cluster-endpoint=https://10.0.0.1",
        "--isolated-vpc",
        "--interruption-queue=karpenter-int",
    ]);
    let runtime = karpenter_aws::assembly::start(assembly_start(&settings, api.client(), &shutdown), &sdk)
        .await
        .expect("the assembly starts against moto");
    assert!(runtime.interruption.is_some(), "INTERRUPTION_QUEUE is set");
    // Price and instance-type refresh, launch-template GC, tagging, the node class controller, SSM invalidation,
    // capacity-block expiration and reserved-capacity demotion; no instance-profile GC in an isolated VPC.
    assert_eq!(runtime.controllers.len(), 8, "{runtime:?}");
    assert_eq!(runtime.cloud_provider.name(), "aws");

    // Without a queue there is no interruption source; outside an isolated VPC the instance-profile GC runs.
    let settings = aws_settings(&["--cluster-name=test-cluster", "--cluster-endpoint=https://10.0.0.1"]);
    let start = assembly_start(&settings, api.client(), &shutdown);
    let metrics = start.metrics.clone();
    let runtime = karpenter_aws::assembly::start(start, &sdk).await.expect("the assembly starts against moto");
    assert!(runtime.interruption.is_none());
    assert_eq!(runtime.controllers.len(), 9, "{runtime:?}");
    // Every AWS controller reports its reconcile and workqueue series under upstream's name from the start: the
    // kube-runtime ones with kube-runtime's unbounded concurrency, the periodic ones as singletons.
    let exposition = metrics.render();
    for (controller, workers) in [
        ("nodeclass", 0),
        ("nodeclaim.tagging", 0),
        ("providers.ssm.invalidation", 1),
        ("instanceprofile.garbagecollection", 1),
        ("capacityreservation.expiration", 1),
        ("capacityreservation.capacitytype", 1),
        ("providers.instancetype", 1),
        ("providers.pricing", 1),
    ] {
        let series = format!("controller_runtime_max_concurrent_reconciles{{controller=\"{controller}\"}} ");
        let value = exposition.lines().find_map(|l| l.strip_prefix(series.as_str())?.parse::<f64>().ok());
        assert_eq!(value, Some(f64::from(workers)), "`{series}` in:\n{exposition}");
    }

    // ENABLE_ZONAL_SHIFT adds the ARC watcher of the cluster EKS describes (its ARN names it to ARC).
    c.eks
        .create_cluster()
        .name("test-cluster")
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .resources_vpc_config(aws_sdk_eks::types::VpcConfigRequest::builder().subnet_ids("subnet-1").build())
        .send()
        .await
        .unwrap();
    let settings = aws_settings(&[
        "--cluster-name=test-cluster",
        "--cluster-endpoint=https://10.0.0.1",
        "--enable-zonal-shift=true",
    ]);
    let start = assembly_start(&settings, api.client(), &shutdown);
    let metrics = start.metrics.clone();
    let runtime = karpenter_aws::assembly::start(start, &sdk).await.expect("the assembly starts against moto");
    assert_eq!(runtime.controllers.len(), 10, "{runtime:?}");
    let watcher = "controller_runtime_max_concurrent_reconciles{controller=\"zonalshift\"} ";
    let workers = metrics.render().lines().find_map(|l| l.strip_prefix(watcher)?.parse::<f64>().ok());
    assert_eq!(workers, Some(1.0), "the zonal-shift watcher's series");

    // Fatal errors name what is wrong: no endpoint and a cluster EKS does not know; a price file without the
    // region.
    let settings = aws_settings(&["--cluster-name=no-such-cluster"]);
    let err = karpenter_aws::assembly::start(assembly_start(&settings, api.client(), &shutdown), &sdk)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("resolving the cluster endpoint: "), "{err}");
    let prices = std::env::temp_dir().join(format!("karpenter-assembly-prices-{}.json", std::process::id()));
    let mut file = karpenter_aws::pricing::PriceFile::default();
    file.set_region(
        "eu-west-1",
        karpenter_aws::pricing::PriceTable {
            on_demand: BTreeMap::from([("m5.large".to_owned(), 0.107)]),
            ..Default::default()
        },
    );
    std::fs::write(&prices, file.to_json()).unwrap();
    let flag = format!("--price-file={}", prices.display());
    let settings = aws_settings(&["--cluster-name=test-cluster", "--cluster-endpoint=https://10.0.0.1", &flag]);
    let result = karpenter_aws::assembly::start(assembly_start(&settings, api.client(), &shutdown), &sdk).await;
    std::fs::remove_file(&prices).unwrap();
    let err = result.unwrap_err().to_string();
    assert!(err.starts_with("PRICE_FILE: ") && err.contains(REGION), "{err}");
    shutdown.cancel();
}

/// DescribeInstanceStatus through the adapter: moto reports its running instances with both checks `ok` and no
/// pending event, so the status-check source finds nothing to do for a NodeClaim's instance.
#[tokio::test]
async fn instance_status_checks_read_moto_statuses() {
    use karpenter_aws::status::{InstanceStatusApi, InstanceStatusSource};
    let Some(server) = MotoServer::start() else { return };
    let c = clients(&server).await;
    let run = c
        .ec2
        .run_instances()
        .image_id("ami-35e92e4c")
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .min_count(2)
        .max_count(2)
        .send()
        .await
        .unwrap();
    let mut ids: Vec<String> = run.instances().iter().filter_map(|i| i.instance_id()).map(str::to_owned).collect();
    ids.sort();
    let ec2 = Arc::new(c.ec2_adapter());
    let mut statuses = ec2.describe_instance_status().await.expect("DescribeInstanceStatus");
    statuses.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    assert_eq!(statuses.iter().map(|s| s.instance_id.clone()).collect::<Vec<_>>(), ids, "{statuses:?}");
    for s in &statuses {
        assert_eq!((s.instance_status.as_str(), s.system_status.as_str()), ("ok", "ok"), "{s:?}");
        assert!(s.availability_zone.as_deref().is_some_and(|z| z.starts_with(REGION)), "{s:?}");
        assert!(karpenter_aws::status::assess(s).is_none(), "{s:?}");
    }

    // A stopped instance is not reported (running instances only).
    c.ec2.stop_instances().instance_ids(&ids[0]).send().await.unwrap();
    let statuses = ec2.describe_instance_status().await.expect("DescribeInstanceStatus");
    assert_eq!(statuses.iter().map(|s| s.instance_id.clone()).collect::<Vec<_>>(), [ids[1].clone()]);

    let claims = BTreeMap::from([(
        ids[1].clone(),
        InstanceClaim {
            name: "claim".into(),
            provider_id: format!("aws:///us-west-2a/{}", ids[1]),
            ..Default::default()
        },
    )]);
    let clock = Arc::new(karpenter_cloudprovider::SystemClock);
    let source = InstanceStatusSource::new(
        ec2,
        Arc::new(StaticLookup(claims)),
        clock,
        Arc::new(karpenter_cloudprovider::NoSleep),
    );
    assert!(source.next_batch().await.expect("check").is_empty());
}

/// A stand-in for ARC zonal shift (moto has none): answers every request with `body` (JSON) and records the
/// request lines.
fn arc_stand_in(body: &'static str) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            seen.lock().unwrap().push(line.trim().to_owned());
            // The headers, up to the blank line (a GET has no body).
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).map_or(true, |n| n == 0) || header == "\r\n" {
                    break;
                }
            }
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (url, requests)
}

/// GetManagedResource through the adapter: applied zonal shifts, practice runs and autoshifts come back with
/// their zone ids; shifts not applied are left out.
#[tokio::test]
async fn the_zonal_shift_adapter_reads_the_applied_shifts_of_the_cluster() {
    use karpenter_aws::zonalshift::{AppliedShift, ShiftKind, ZonalShiftApi};
    const ARN: &str = "arn:aws:eks:us-west-2:123456789012:cluster/prod";
    let (url, requests) = arc_stand_in(
        r#"{"arn":"arn:aws:eks:us-west-2:123456789012:cluster/prod","name":"prod","appliedWeights":{},
        "zonalShifts":[
          {"appliedStatus":"APPLIED","zonalShiftId":"zs-1","resourceIdentifier":"arn:aws:eks:us-west-2:123456789012:cluster/prod",
           "awayFrom":"usw2-az1","expiryTime":1800003600,"startTime":1800000000,"comment":"bad deploy"},
          {"appliedStatus":"APPLIED","zonalShiftId":"pr-1","resourceIdentifier":"arn:aws:eks:us-west-2:123456789012:cluster/prod",
           "awayFrom":"usw2-az3","expiryTime":1800003600,"startTime":1800000000,"comment":"practice","shiftType":"PRACTICE_RUN"},
          {"appliedStatus":"NOT_APPLIED","zonalShiftId":"zs-2","resourceIdentifier":"arn:aws:eks:us-west-2:123456789012:cluster/prod",
           "awayFrom":"usw2-az4","expiryTime":1800003600,"startTime":1800000000,"comment":"superseded"}],
        "autoshifts":[{"appliedStatus":"APPLIED","awayFrom":"usw2-az2","startTime":1800000000}]}"#,
    );
    let config = karpenter_aws::sdk::load_config(&SdkOptions::emulator(&url, REGION)).await.unwrap();
    let adapter = karpenter_aws::sdk::ZonalShiftAdapter::new(aws_sdk_arczonalshift::Client::new(&config));
    let mut shifts = adapter.applied_shifts(ARN).await.expect("the stand-in answers");
    shifts.sort();
    let shift = |zone: &str, kind, id: &str| AppliedShift { away_from: zone.into(), kind, id: id.into() };
    assert_eq!(
        shifts,
        [
            shift("usw2-az1", ShiftKind::ZonalShift, "zs-1"),
            shift("usw2-az2", ShiftKind::Autoshift, ""),
            shift("usw2-az3", ShiftKind::PracticeRun, "pr-1"),
        ]
    );
    let requests = requests.lock().unwrap().clone();
    assert!(
        requests.iter().any(|r| r.starts_with("GET /managedresources/arn%3Aaws%3Aeks%3Aus-west-2%3A123456789012%3Acluster%2Fprod")),
        "{requests:?}"
    );
}
