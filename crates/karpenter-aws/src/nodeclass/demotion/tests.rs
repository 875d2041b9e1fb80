//! The demotion controller against karpenter-testing's in-process API server and [`MockEc2`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::labels as aws_labels;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node};
use karpenter_api::NodeClaim;
use karpenter_api::labels::CAPACITY_TYPE;
use karpenter_testing::apiserver::{ApiServer, create_with_status};
use karpenter_testing::{FakeClock, NodeClaimOptions, NodeOptions, default_node_class_ref, node, node_claim};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::api_error::AwsApiError;
use crate::launch::fleet::{EKS_CLUSTER_NAME_TAG, NODE_CLASS_TAG, NODE_POOL_TAG};
use crate::launch::ice::UnavailableOfferings;
use crate::launch::instance::{BatchWindows, ClusterInfo, RetryPolicy};
use crate::launch::mock::{MockCall, MockEc2, ops};
use crate::launch::template::LaunchTemplateProvider;

const CLUSTER: &str = "test-cluster";

struct Env {
    _server: ApiServer,
    client: Client,
    ec2: MockEc2,
    demotion: ReservationDemotion,
}

/// An [`InstanceProvider`] of the cluster [`CLUSTER`] over `ec2`.
pub(crate) fn instance_provider(ec2: &MockEc2, clock: &FakeClock) -> InstanceProvider {
    let clock_arc: Arc<dyn Clock> = Arc::new(clock.clone());
    InstanceProvider::new(
        Arc::new(ec2.clone()),
        LaunchTemplateProvider::new(Arc::new(ec2.clone()), clock_arc.clone(), CLUSTER),
        UnavailableOfferings::new(clock_arc),
        Arc::new(clock.clone()),
        ClusterInfo { name: CLUSTER.into(), ..Default::default() },
        BatchWindows::default(),
        RetryPolicy::default(),
    )
}

fn env() -> Env {
    let clock = FakeClock::default();
    let server = ApiServer::builder()
        .clock(Arc::new(clock.clone()))
        .provider(&crate::labels::provider_labels(), &crate::api::node_class_apis())
        .build();
    let client = server.client();
    let ec2 = MockEc2::new(Arc::new(clock.clone()));
    let demotion = ReservationDemotion::new(client.clone(), instance_provider(&ec2, &clock), Arc::new(clock));
    Env { _server: server, client, ec2, demotion }
}

fn provider_id(instance: &str) -> String {
    format!("aws:///us-west-2a/{instance}")
}

/// A live instance of the cluster: in reservation `reservation` (preference `capacity-reservations-only`, as
/// Karpenter's reserved templates set; `none` without one), a spot instance when `spot`.
fn instance(id: &str, reservation: Option<&str>, spot: bool, state: InstanceState) -> Ec2Instance {
    Ec2Instance {
        instance_id: id.into(),
        instance_type: "m5.large".into(),
        availability_zone: "us-west-2a".into(),
        availability_zone_id: None,
        subnet_id: Some("subnet-a".into()),
        image_id: Some("ami-1".into()),
        state,
        spot_instance_request_id: spot.then(|| format!("sir-{id}")),
        capacity_reservation_id: reservation.map(str::to_owned),
        capacity_reservation_preference: Some(
            if reservation.is_some() { "capacity-reservations-only" } else { "none" }.to_owned(),
        ),
        security_group_ids: vec!["sg-1".into()],
        placement_group_id: None,
        launch_time: None,
        tags: BTreeMap::from([
            (NODE_POOL_TAG.to_owned(), "default".to_owned()),
            (NODE_CLASS_TAG.to_owned(), "default".to_owned()),
            (EKS_CLUSTER_NAME_TAG.to_owned(), CLUSTER.to_owned()),
        ]),
    }
}

/// Labels of capacity launched into `cr-1` (plus one unrelated label that must survive demotion).
fn reserved_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        (CAPACITY_TYPE.to_owned(), "reserved".to_owned()),
        (aws_labels::CAPACITY_RESERVATION_ID.to_owned(), "cr-1".to_owned()),
        (aws_labels::CAPACITY_RESERVATION_TYPE.to_owned(), "default".to_owned()),
        (aws_labels::CAPACITY_RESERVATION_INTERRUPTIBLE.to_owned(), "false".to_owned()),
        ("team".to_owned(), "a".to_owned()),
    ])
}

fn on_demand_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(CAPACITY_TYPE.to_owned(), "on-demand".to_owned()), ("team".to_owned(), "a".to_owned())])
}

impl Env {
    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }
    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// A NodeClaim `name` on instance `instance` with Node `<name>-node`, both labelled `labels`.
    async fn create_pair(&self, name: &str, instance: &str, labels: BTreeMap<String, String>) {
        let claim = node_claim(NodeClaimOptions {
            name: Some(name.into()),
            node_class_ref: Some(default_node_class_ref()),
            labels: labels.clone(),
            provider_id: Some(provider_id(instance)),
            node_name: Some(format!("{name}-node")),
            launched: true,
            registered: true,
            ..Default::default()
        });
        create_with_status(&self.claims(), &claim).await.unwrap();
        self.create_node(&format!("{name}-node"), instance, labels).await;
    }

    async fn create_node(&self, name: &str, instance: &str, labels: BTreeMap<String, String>) {
        let n = node(NodeOptions {
            name: Some(name.into()),
            labels,
            provider_id: Some(provider_id(instance)),
            ..Default::default()
        });
        self.nodes().create(&PostParams::default(), &n).await.unwrap();
    }

    async fn claim_labels(&self, name: &str) -> BTreeMap<String, String> {
        self.claims().get(name).await.unwrap().labels().clone()
    }

    /// The node's labels without the builder's hostname label.
    async fn node_labels(&self, name: &str) -> BTreeMap<String, String> {
        let mut labels = self.nodes().get(name).await.unwrap().labels().clone();
        labels.remove("kubernetes.io/hostname");
        labels
    }

    fn describes(&self) -> usize {
        self.ec2.calls().iter().filter(|c| matches!(c, MockCall::DescribeInstances(_))).count()
    }

    /// (kind, name, reason) of the events published so far, sorted.
    async fn events(&self) -> Vec<(String, String, String)> {
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), "default");
        let mut out: Vec<(String, String, String)> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|e| {
                assert_eq!(e.type_.as_deref(), Some("Normal"));
                (
                    e.involved_object.kind.unwrap_or_default(),
                    e.involved_object.name.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                )
            })
            .collect();
        out.sort();
        out
    }
}

#[test]
fn the_patch_sets_on_demand_and_removes_every_reservation_label() {
    let patch = demotion_patch(Some("42"));
    assert_eq!(patch["metadata"]["resourceVersion"], "42");
    let labels = patch["metadata"]["labels"].as_object().unwrap();
    assert_eq!(labels[CAPACITY_TYPE], "on-demand");
    for key in RESERVATION_LABELS {
        assert!(labels[key].is_null(), "{key} removed");
    }
    assert_eq!(labels.len(), 1 + RESERVATION_LABELS.len());
    // Every reservation label the api crate knows is in the list.
    let known: Vec<&str> =
        aws_labels::WELL_KNOWN.iter().copied().filter(|k| k.contains("capacity-reservation")).collect();
    assert_eq!(known, RESERVATION_LABELS);
}

#[tokio::test]
async fn demotes_only_claims_and_nodes_whose_instance_is_on_demand_now() {
    let env = env();
    // The reservation ended: EC2 reports no reservation for i-demoted any more.
    env.ec2.insert_instance(instance("i-demoted", None, false, InstanceState::Running));
    env.ec2.insert_instance(instance("i-reserved", Some("cr-1"), false, InstanceState::Running));
    env.ec2.insert_instance(instance("i-stopping", None, false, InstanceState::ShuttingDown));
    env.ec2.insert_instance(instance("i-ondemand", None, false, InstanceState::Running));
    // Still in cr-1, but its preference was changed to `open`: no longer reserved capacity.
    let opened = Ec2Instance {
        capacity_reservation_preference: Some("open".into()),
        ..instance("i-opened", Some("cr-1"), false, InstanceState::Running)
    };
    env.ec2.insert_instance(opened);
    env.create_pair("demoted", "i-demoted", reserved_labels()).await;
    env.create_pair("opened", "i-opened", reserved_labels()).await;
    env.create_pair("reserved", "i-reserved", reserved_labels()).await;
    env.create_pair("gone", "i-gone", reserved_labels()).await;
    env.create_pair("stopping", "i-stopping", reserved_labels()).await;
    // Not labelled reserved: never looked at, even with a stray reservation label.
    let mut stray = on_demand_labels();
    stray.insert(aws_labels::CAPACITY_RESERVATION_ID.to_owned(), "cr-9".to_owned());
    env.create_pair("ondemand", "i-ondemand", stray.clone()).await;
    let before: BTreeMap<String, Option<String>> = {
        let mut m = BTreeMap::new();
        for name in ["reserved", "gone", "stopping", "ondemand"] {
            m.insert(name.to_owned(), env.claims().get(name).await.unwrap().metadata.resource_version);
            let node = format!("{name}-node");
            m.insert(node.clone(), env.nodes().get(&node).await.unwrap().metadata.resource_version);
        }
        m
    };

    let pass = env.demotion.run_once().await.unwrap();
    assert_eq!(
        pass,
        DemotionPass {
            node_claims: vec!["demoted".into(), "opened".into()],
            nodes: vec!["demoted-node".into(), "opened-node".into()],
            retry: vec![]
        }
    );
    assert_eq!(env.describes(), 1, "one DescribeInstances for every claim and node");
    assert_eq!(env.claim_labels("demoted").await, on_demand_labels());
    assert_eq!(env.node_labels("demoted-node").await, on_demand_labels());
    assert_eq!(env.claim_labels("opened").await, on_demand_labels());
    assert_eq!(env.node_labels("opened-node").await, on_demand_labels());
    // Still reserved, gone, shutting down, not reserved: untouched.
    for (name, rv) in &before {
        let now = if name.ends_with("-node") {
            env.nodes().get(name).await.unwrap().metadata.resource_version
        } else {
            env.claims().get(name).await.unwrap().metadata.resource_version
        };
        assert_eq!(&now, rv, "{name} untouched");
    }
    assert_eq!(env.claim_labels("reserved").await, reserved_labels());
    assert_eq!(env.node_labels("gone-node").await, reserved_labels());
    assert_eq!(env.claim_labels("ondemand").await, stray);
    assert_eq!(
        env.events().await,
        vec![
            ("Node".into(), "demoted-node".into(), DEMOTED_REASON.into()),
            ("Node".into(), "opened-node".into(), DEMOTED_REASON.into()),
            ("NodeClaim".into(), "demoted".into(), DEMOTED_REASON.into()),
            ("NodeClaim".into(), "opened".into(), DEMOTED_REASON.into()),
        ]
    );

    // Nothing left to demote: the next pass changes nothing.
    let again = env.demotion.run_once().await.unwrap();
    assert_eq!(again, DemotionPass::default());
    assert_eq!(env.events().await.len(), 4);
}

#[tokio::test]
async fn no_reserved_capacity_means_no_ec2_call() {
    let env = env();
    env.ec2.insert_instance(instance("i-1", None, false, InstanceState::Running));
    env.create_pair("od", "i-1", on_demand_labels()).await;
    assert_eq!(env.demotion.run_once().await.unwrap(), DemotionPass::default());
    assert_eq!(env.describes(), 0);
}

#[tokio::test]
async fn spot_and_unlaunched_claims_are_left_alone() {
    let env = env();
    // A spot instance is never relabelled on-demand, whatever its claim says.
    env.ec2.insert_instance(instance("i-spot", None, true, InstanceState::Running));
    env.create_pair("spot", "i-spot", reserved_labels()).await;
    // A reserved claim not launched yet (no provider id).
    let claim = node_claim(NodeClaimOptions {
        name: Some("pending".into()),
        node_class_ref: Some(default_node_class_ref()),
        labels: reserved_labels(),
        ..Default::default()
    });
    create_with_status(&env.claims(), &claim).await.unwrap();
    assert_eq!(env.demotion.run_once().await.unwrap(), DemotionPass::default());
    assert_eq!(env.claim_labels("spot").await, reserved_labels());
    assert_eq!(env.claim_labels("pending").await, reserved_labels());
}

#[tokio::test]
async fn a_conflict_is_retried_by_the_next_pass_and_a_late_node_is_demoted_on_its_own() {
    let env = env();
    env.ec2.insert_instance(instance("i-1", None, false, InstanceState::Running));
    env.create_pair("a", "i-1", reserved_labels()).await;
    // Read, then someone else writes: the demotion's precondition fails.
    let stale = env.claims().get("a").await.unwrap();
    let mut fresh = stale.clone();
    fresh.labels_mut().insert("touched".into(), "yes".into());
    env.claims().replace("a", &PostParams::default(), &fresh).await.unwrap();
    let i = env.ec2.instance("i-1").unwrap();
    assert_eq!(env.demotion.demote_node_claim(&stale, &i).await, PatchOutcome::Retry);
    assert_eq!(env.claim_labels("a").await[CAPACITY_TYPE], "reserved", "nothing written on conflict");
    // A claim deleted meanwhile is nothing to do.
    let mut missing = stale.clone();
    missing.metadata.name = Some("missing".into());
    assert_eq!(env.demotion.demote_node_claim(&missing, &i).await, PatchOutcome::Gone);

    let pass = env.demotion.run_once().await.unwrap();
    assert_eq!(pass.node_claims, ["a"]);
    let labels = env.claim_labels("a").await;
    assert_eq!(labels[CAPACITY_TYPE], "on-demand");
    assert_eq!(labels["touched"], "yes", "the other writer's change kept");
    assert!(!labels.contains_key(aws_labels::CAPACITY_RESERVATION_ID));

    // A Node that registered later with the kubelet's reserved labels is demoted without its claim.
    env.create_node("a-late", "i-1", reserved_labels()).await;
    let pass = env.demotion.run_once().await.unwrap();
    assert_eq!(pass, DemotionPass { node_claims: vec![], nodes: vec!["a-late".into()], retry: vec![] });
    assert_eq!(env.node_labels("a-late").await, on_demand_labels());
}

#[tokio::test]
async fn a_describe_failure_changes_nothing_and_the_next_pass_recovers() {
    let env = env();
    env.ec2.insert_instance(instance("i-1", None, false, InstanceState::Running));
    env.create_pair("a", "i-1", reserved_labels()).await;
    env.ec2.fail_next(ops::DESCRIBE_INSTANCES, AwsApiError::new("DescribeInstances", "RequestLimitExceeded", "slow"));
    assert!(matches!(env.demotion.run_once().await, Err(ControllerError::CloudProvider(_))));
    assert_eq!(env.claim_labels("a").await, reserved_labels());
    assert_eq!(env.demotion.run_once().await.unwrap().node_claims, ["a"]);
}

#[tokio::test]
async fn the_run_loop_demotes_on_its_interval_and_stops_on_shutdown() {
    let env = env();
    env.ec2.insert_instance(instance("i-1", None, false, InstanceState::Running));
    env.create_pair("a", "i-1", reserved_labels()).await;
    let shutdown = CancellationToken::new();
    let demotion = Arc::new(env.demotion.clone().with_interval(Duration::from_millis(20)));
    let task = tokio::spawn(demotion.run(shutdown.clone()));
    let mut demoted = false;
    for _ in 0..200 {
        if env.claim_labels("a").await[CAPACITY_TYPE] == "on-demand" {
            demoted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(demoted, "the loop ran a pass");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("stops on shutdown").unwrap();
}
