//! KwokCloudProvider against the in-process API server: the Node a launch creates, idempotence, the
//! instance lifecycle with finalizers, capacity marks, node classes, drift and instance-type files.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::labels::{ARCH, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODE_POOL, NODE_REGISTERED, OS, ZONE};
use karpenter_api::nodeclaim::NodeClassReference;
use karpenter_cloudprovider::{CloudProvider, CloudProviderError, ErrorKind, InMemoryNodeClasses, OfferingRef};
use karpenter_kwok::testing::{KWOKNodeClassOptions, kwok_node_class};
use karpenter_kwok::{
    KWOK_NODE_KEY, KwokCloudProvider, KwokOptions, MANAGED_LABEL, NODE_CLAIM_ANNOTATION, PARTITION_LABEL, PRICE_LABEL,
    UNREGISTERED_TAINT, catalogue,
};
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::{
    NodeClaimOptions, NodeOptions, NodePoolOptions, kwok_node_class_ref, node, node_claim, node_pool,
    nodepool_requirement,
};
use kube::api::{Api, Patch, PatchParams, PostParams};

fn claim(name: &str, requirements: &[(&str, &[&str])], cpu: &str) -> NodeClaim {
    let mut reqs: Vec<_> = requirements.iter().map(|(k, v)| nodepool_requirement(k, "In", v)).collect();
    reqs.push(nodepool_requirement(NODE_POOL, "In", &["default"]));
    let mut c = node_claim(NodeClaimOptions {
        name: Some(name.into()),
        node_pool: Some("default".into()),
        requirements: reqs,
        requests: [("cpu", cpu), ("memory", "1Gi")].into(),
        node_class_ref: Some(kwok_node_class_ref("default")),
        ..Default::default()
    });
    c.metadata.uid = Some(format!("uid-{name}"));
    c.metadata.labels.get_or_insert_with(BTreeMap::new).insert("team".into(), "a".into());
    c
}

fn linux(name: &str, cpu: &str) -> NodeClaim {
    claim(name, &[(OS, &["linux"]), (ARCH, &["amd64"])], cpu)
}

fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

fn label<'a>(l: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    l.get(key).map(String::as_str)
}

#[tokio::test]
async fn create_makes_the_node_upstream_makes() {
    let server = ApiServer::new();
    let provider = KwokCloudProvider::with_defaults(server.client());
    let nodes: Api<Node> = Api::all(server.client());
    let launched = provider.create(&linux("web-abc", "1")).await.unwrap();

    let node = nodes.get("web-abc").await.unwrap();
    let spec = node.spec.clone().unwrap();
    assert_eq!(spec.provider_id.as_deref(), Some("kwok://web-abc"));
    let taints: Vec<(String, String)> =
        spec.taints.unwrap_or_default().into_iter().map(|t| (t.key, t.effect)).collect();
    // The unregistered taint is ours; the API server's TaintNodesByCondition adds not-ready (no Ready condition).
    assert_eq!(
        taints,
        [
            (UNREGISTERED_TAINT.to_owned(), "NoExecute".to_owned()),
            ("node.kubernetes.io/not-ready".to_owned(), "NoSchedule".to_owned())
        ]
    );
    let l = labels(&node);
    // 1 CPU does not fit c-1x (900m allocatable): the cheapest fit is c-2x, spot, first zone.
    assert_eq!(label(&l, INSTANCE_TYPE), Some("c-2x-amd64-linux"));
    assert_eq!(label(&l, ZONE), Some("test-zone-a"));
    assert_eq!(label(&l, CAPACITY_TYPE), Some("spot"));
    assert_eq!(label(&l, ARCH), Some("amd64"));
    assert_eq!(label(&l, OS), Some("linux"));
    assert_eq!(label(&l, NODE_POOL), Some("default"));
    assert_eq!(label(&l, HOSTNAME), Some("web-abc"));
    assert_eq!(label(&l, "team"), Some("a"), "the claim's labels");
    assert_eq!(label(&l, "karpenter.kwok.sh/instance-family"), Some("c"));
    assert_eq!(label(&l, "karpenter.kwok.sh/instance-cpu"), Some("2"));
    assert_eq!(label(&l, "karpenter.kwok.sh/instance-memory"), Some("4Gi"));
    assert_eq!(label(&l, KWOK_NODE_KEY), Some("fake"));
    assert_eq!(label(&l, MANAGED_LABEL), Some("true"));
    assert!(label(&l, PARTITION_LABEL).is_some_and(|p| p.starts_with("partition-")));
    assert_eq!(label(&l, PRICE_LABEL), Some("0.038006"), "0.7 × (2 × 0.025 + 4.294967296 × 0.001)");
    assert_eq!(label(&l, NODE_REGISTERED), None, "registration is the lifecycle controller's");
    let annotations = node.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(NODE_CLAIM_ANNOTATION).map(String::as_str), Some("web-abc"));
    assert_eq!(annotations.get(KWOK_NODE_KEY).map(String::as_str), Some("fake"));
    let status = node.status.clone().unwrap();
    let cap = status.capacity.unwrap();
    let alloc = status.allocatable.unwrap();
    assert_eq!(cap.get("cpu").map(|q| q.0.as_str()), Some("2"));
    assert_eq!(cap.get("memory").map(|q| q.0.as_str()), Some("4Gi"));
    assert_eq!(cap.get("pods").map(|q| q.0.as_str()), Some("32"));
    assert_eq!(alloc.get("cpu").map(|q| q.0.as_str()), Some("1900m"));
    assert_eq!(alloc.get("memory").map(|q| q.0.as_str()), Some("4086Mi"));

    // What create returns: the claim's name, uid and spec with the Node's labels and the launch status.
    assert_eq!(launched.metadata.name.as_deref(), Some("web-abc"));
    assert_eq!(launched.metadata.uid.as_deref(), Some("uid-web-abc"));
    assert_eq!(launched.provider_id(), Some("kwok://web-abc"));
    let ll = launched.metadata.labels.clone().unwrap();
    assert_eq!(label(&ll, INSTANCE_TYPE), Some("c-2x-amd64-linux"));
    assert_eq!(label(&ll, ZONE), Some("test-zone-a"));
    let st = launched.status.clone().unwrap();
    assert_eq!(st.capacity.get("cpu").map(|q| q.as_str()), Some("2"));
    assert_eq!(st.allocatable.get("cpu").map(|q| q.as_str()), Some("1900m"));
    assert_eq!(launched.spec, linux("web-abc", "1").spec);

    // get and list see it the same way.
    let got = provider.get("kwok://web-abc").await.unwrap();
    assert_eq!(got.metadata.name.as_deref(), Some("web-abc"));
    assert_eq!(got.status.as_ref().and_then(|s| s.node_name.as_deref()), Some("web-abc"));
    assert_eq!(label(got.metadata.labels.as_ref().unwrap(), INSTANCE_TYPE), Some("c-2x-amd64-linux"));
    assert_eq!(provider.list().await.unwrap().len(), 1);
}

#[tokio::test]
async fn create_is_idempotent_per_node_claim_and_refuses_foreign_names() {
    let server = ApiServer::new();
    let provider = KwokCloudProvider::with_defaults(server.client());
    let c = linux("same", "1");
    let first = provider.create(&c).await.unwrap();
    // Even with the first offering gone, a repeated create returns the existing Node instead of launching.
    provider.set_insufficient_capacity(OfferingRef::new("c-2x-amd64-linux", "test-zone-a", "spot"), true);
    let (a, b) = tokio::join!(provider.create(&c), provider.create(&c));
    for again in [a.unwrap(), b.unwrap()] {
        assert_eq!(again.provider_id(), first.provider_id());
        assert_eq!(again.metadata.labels.as_ref().and_then(|l| l.get(ZONE)).map(String::as_str), Some("test-zone-a"));
    }
    assert_eq!(provider.list().await.unwrap().len(), 1);
    // Concurrent creates of a new claim: one Node.
    let fresh = linux("fresh", "1");
    let (a, b) = tokio::join!(provider.create(&fresh), provider.create(&fresh));
    assert_eq!(a.unwrap().provider_id(), b.unwrap().provider_id());
    assert_eq!(provider.list().await.unwrap().len(), 2);

    // A Node of that name that we did not launch: a create error, and get/list ignore it.
    let nodes: Api<Node> = Api::all(server.client());
    let mut foreign = node(NodeOptions { name: Some("taken".into()), ..Default::default() });
    foreign.spec.get_or_insert_with(Default::default).provider_id = Some("kwok://taken".into());
    nodes.create(&PostParams::default(), &foreign).await.unwrap();
    let err = provider.create(&linux("taken", "1")).await.unwrap_err();
    assert!(matches!(&err, CloudProviderError::Create { reason, .. } if reason == "NodeNameInUse"), "{err}");
    assert!(provider.get("kwok://taken").await.unwrap_err().is_not_found());
    assert_eq!(provider.list().await.unwrap().len(), 2);
    // Another NodeClaim of the same name (another uid) does not adopt the old claim's Node.
    let mut other_uid = linux("same", "1");
    other_uid.metadata.uid = Some("uid-other".into());
    assert_eq!(provider.create(&other_uid).await.unwrap_err().kind(), ErrorKind::Create);
}

#[tokio::test]
async fn a_node_held_by_a_finalizer_counts_as_terminated() {
    let server = ApiServer::new();
    let provider = KwokCloudProvider::with_defaults(server.client());
    let nodes: Api<Node> = Api::all(server.client());
    let c = linux("held", "1");
    let launched = provider.create(&c).await.unwrap();
    let mut as_controller = c.clone();
    as_controller.status = launched.status.clone();
    // The lifecycle controller puts karpenter.sh/termination on registered Nodes.
    let patch = serde_json::json!({"metadata": {"finalizers": ["karpenter.sh/termination"]}});
    nodes.patch("held", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();

    provider.delete(&as_controller).await.unwrap();
    let node = nodes.get("held").await.unwrap();
    assert!(node.metadata.deletion_timestamp.is_some(), "deletion requested, the finalizer holds the Node");
    // For kwok the Node is the instance: once it is terminating the instance is gone, so the termination
    // controller can remove its finalizer.
    assert!(provider.get("kwok://held").await.unwrap_err().is_not_found());
    assert!(provider.list().await.unwrap().is_empty());
    assert!(provider.delete(&as_controller).await.unwrap_err().is_not_found());
    assert!(provider.is_drifted(&as_controller).await.unwrap_err().is_not_found());
    // While the old Node lingers, a new launch for the same name waits (retried by the controller).
    let err = provider.create(&c).await.unwrap_err();
    assert!(matches!(&err, CloudProviderError::Create { reason, .. } if reason == "NodeTerminating"), "{err}");
    let patch = serde_json::json!({"metadata": {"finalizers": null}});
    nodes.patch("held", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    assert!(nodes.get_opt("held").await.unwrap().is_none());
    // A claim without provider id, or with another provider's id, has no instance here.
    assert!(provider.delete(&linux("never", "1")).await.unwrap_err().is_not_found());
    assert!(provider.get("aws:///zone/i-1").await.unwrap_err().is_not_found());
}

#[tokio::test]
async fn a_running_node_holds_its_reservation_instance_until_it_terminates() {
    let json = r#"[{"name": "r-2x", "architecture": "amd64", "operatingSystems": ["linux"],
        "resources": {"cpu": "2", "memory": "4Gi"},
        "offerings": [
          {"Price": 0.2, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]},
          {"Price": 0.05, "ReservationCapacity": 1, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]},
            {"key": "karpenter.k8s.aws/capacity-reservation-id", "operator": "In", "values": ["cr-1"]}]}]}]"#;
    let server = ApiServer::new();
    let options = KwokOptions {
        instance_types: catalogue::load_instance_types_json(json).expect("valid catalogue"),
        ..KwokOptions::default()
    };
    let provider = KwokCloudProvider::new(server.client(), options);
    let reserved = || async {
        let its = provider.instance_types(&pool()).await.unwrap();
        let o = its[0].offerings.iter().find(|o| o.reservation_id() == Some("cr-1")).cloned().unwrap();
        (o.reservation_capacity, o.available)
    };
    assert_eq!(reserved().await, (1, true));
    let launched = provider.create(&claim("first", &[(CAPACITY_TYPE, &["reserved"])], "1")).await.unwrap();
    let l = launched.metadata.labels.clone().unwrap_or_default();
    assert_eq!(label(&l, "karpenter.k8s.aws/capacity-reservation-id"), Some("cr-1"));
    assert_eq!(reserved().await, (0, false), "the running node holds the reservation's one instance");
    let err = provider.create(&claim("second", &[(CAPACITY_TYPE, &["reserved"])], "1")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity, "the reservation is full");
    let cheapest = provider.create(&claim("third", &[], "1")).await.unwrap();
    assert_eq!(label(&cheapest.metadata.labels.unwrap_or_default(), CAPACITY_TYPE), Some("on-demand"));
    let mut as_controller = claim("first", &[(CAPACITY_TYPE, &["reserved"])], "1");
    as_controller.status = launched.status.clone();
    provider.delete(&as_controller).await.unwrap();
    assert_eq!(reserved().await, (1, true), "terminated: the instance is free again");
}

#[tokio::test]
async fn a_claim_needing_an_override_resource_launches_from_that_offering_with_its_resources() {
    // The zone-b offering costs more and brings 4 slots, keeping 1Gi of memory for the system.
    let json = r#"[{"name": "s-2x", "architecture": "amd64", "operatingSystems": ["linux"],
        "resources": {"cpu": "2", "memory": "4Gi", "pods": "32"},
        "offerings": [
          {"Price": 0.1, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]},
          {"Price": 0.2, "CapacityOverride": {"test.com/extended-slots": "4"},
           "OverheadOverride": {"SystemReserved": {"memory": "1Gi"}}, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-b"]}]}]}]"#;
    let server = ApiServer::new();
    let options = KwokOptions {
        instance_types: catalogue::load_instance_types_json(json).expect("valid catalogue"),
        ..KwokOptions::default()
    };
    let provider = KwokCloudProvider::new(server.client(), options);
    let nodes: Api<Node> = Api::all(server.client());
    // A Node's `status.capacity` (`allocatable: false`) or `status.allocatable` quantity of `name`.
    let quantity = |node: &Node, allocatable: bool, name: &str| {
        let status = node.status.clone().unwrap_or_default();
        let list = if allocatable { status.allocatable } else { status.capacity };
        list.and_then(|l| l.get(name).map(|q| q.0.clone()))
    };

    let mut slot_user = claim("slot-user", &[], "1");
    let requests = &mut slot_user.spec.resources.as_mut().expect("requests").requests;
    requests.insert("test.com/extended-slots".into(), karpenter_api::nodeclaim::ResourceQuantity::new("1"));
    let launched = provider.create(&slot_user).await.unwrap();
    let node = nodes.get("slot-user").await.unwrap();
    assert_eq!(label(&labels(&node), ZONE), Some("test-zone-b"), "only that offering's node has a slot");
    assert_eq!(quantity(&node, false, "test.com/extended-slots").as_deref(), Some("4"));
    assert_eq!(quantity(&node, true, "test.com/extended-slots").as_deref(), Some("4"));
    assert_eq!(quantity(&node, true, "memory").as_deref(), Some("3Gi"), "the override's 1Gi replaces the 10Mi");
    let st = launched.status.unwrap();
    assert_eq!(st.allocatable.get("test.com/extended-slots").map(|q| q.as_str()), Some("4"));

    // A claim that asks for no slot takes the cheaper offering and the type's own resources, as before.
    provider.create(&claim("plain", &[], "1")).await.unwrap();
    let node = nodes.get("plain").await.unwrap();
    assert_eq!(label(&labels(&node), ZONE), Some("test-zone-a"));
    assert_eq!(quantity(&node, true, "test.com/extended-slots"), None);
    assert_eq!(quantity(&node, true, "memory").as_deref(), Some("4086Mi"), "the type's 10Mi kube-reserved");

    // With the slotted offering out of capacity, the error names it.
    provider.set_insufficient_capacity(OfferingRef::new("s-2x", "test-zone-b", "on-demand"), true);
    slot_user.metadata.name = Some("slot-user-2".into());
    let err = provider.create(&slot_user).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity);
    let CloudProviderError::InsufficientCapacity { offerings, .. } = err else { unreachable!() };
    assert_eq!(offerings, [OfferingRef::new("s-2x", "test-zone-b", "on-demand")]);
}

fn pool() -> karpenter_api::NodePool {
    node_pool(NodePoolOptions {
        name: Some("default".into()),
        node_class_ref: Some(kwok_node_class_ref("default")),
        ..Default::default()
    })
}

#[tokio::test]
async fn out_of_capacity_offerings_are_unavailable_and_skipped() {
    let server = ApiServer::new();
    let provider = KwokCloudProvider::with_defaults(server.client());
    let it = "c-1x-amd64-linux";
    let pinned = claim("ice", &[(INSTANCE_TYPE, &[it]), (ZONE, &["test-zone-b"])], "500m");
    provider.set_insufficient_capacity(OfferingRef::new(it, "test-zone-b", "spot"), true);
    let its = provider.instance_types(&pool()).await.unwrap();
    assert_eq!(its.len(), 144, "the whole catalogue, as upstream (NodePool requirements are the scheduler's)");
    assert_eq!(its.iter().flat_map(|i| &i.offerings).filter(|o| !o.available).count(), 1);
    let launched = provider.create(&pinned).await.unwrap();
    assert_eq!(launched.metadata.labels.unwrap().get(CAPACITY_TYPE).map(String::as_str), Some("on-demand"));

    let next = claim("ice-2", &[(INSTANCE_TYPE, &[it]), (ZONE, &["test-zone-b"])], "500m");
    let exhausted = provider.exhaust_capacity_for(&next).unwrap();
    assert_eq!(
        exhausted,
        [OfferingRef::new(it, "test-zone-b", "on-demand"), OfferingRef::new(it, "test-zone-b", "spot")]
    );
    let err = provider.create(&next).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity);
    assert_eq!(err.failed_offerings(), exhausted.as_slice());
    assert_eq!(provider.list().await.unwrap().len(), 1, "a failed create launches nothing");
    provider.clear_insufficient_capacity();
    assert!(provider.instance_types(&pool()).await.unwrap().iter().flat_map(|i| &i.offerings).all(|o| o.available));
    assert!(provider.create(&next).await.is_ok());
    // Nothing fits 1000 CPUs: InsufficientCapacity naming no offering.
    let err = provider.create(&linux("huge", "1000")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InsufficientCapacity);
    assert!(err.failed_offerings().is_empty());
}

#[tokio::test]
async fn node_classes_gate_create_and_instance_types() {
    let server = ApiServer::new();
    let classes = InMemoryNodeClasses::new();
    let provider = KwokCloudProvider::new(
        server.client(),
        KwokOptions { node_classes: Some(Arc::new(classes.clone())), ..KwokOptions::default() },
    );
    let c = linux("a", "1");
    assert_eq!(provider.create(&c).await.unwrap_err().kind(), ErrorKind::InsufficientCapacity, "class missing");
    assert!(provider.instance_types(&pool()).await.unwrap().is_empty());
    classes.insert_resource(&kwok_node_class(KWOKNodeClassOptions { name: None, ready: Some(false) })).unwrap();
    assert_eq!(provider.create(&c).await.unwrap_err().kind(), ErrorKind::NodeClassNotReady);
    assert_eq!(provider.instance_types(&pool()).await.unwrap().len(), 144, "not ready: still listed");
    let mut unknown = kwok_node_class(KWOKNodeClassOptions::default());
    unknown.status = None;
    classes.insert_resource(&unknown).unwrap();
    assert!(provider.create(&c).await.is_ok(), "unknown readiness does not block a kwok launch (as upstream)");
    let mut ec2 = linux("b", "1");
    ec2.spec.node_class_ref = NodeClassReference::new("karpenter.k8s.aws", "EC2NodeClass", "default");
    let err = provider.create(&ec2).await.unwrap_err();
    assert!(matches!(&err, CloudProviderError::Create { reason, .. } if reason == "UnsupportedNodeClass"), "{err}");
    assert_eq!(provider.supported_node_classes()[0].label_key(), "karpenter.kwok.sh/kwoknodeclass");
    assert_eq!(provider.name(), "kwok");
    assert_eq!(provider.repair_policies().len(), 2);
    assert_eq!(provider.repair_policies()[0].toleration_duration.as_secs(), 600);
}

#[tokio::test]
async fn drift_follows_the_node_annotation() {
    let server = ApiServer::new();
    let provider = KwokCloudProvider::with_defaults(server.client());
    let c = linux("d", "1");
    let mut launched = c.clone();
    launched.status = provider.create(&c).await.unwrap().status;
    assert_eq!(provider.is_drifted(&launched).await.unwrap(), None);
    assert!(provider.set_drifted("kwok://d", Some("ImageDrift")).await.unwrap());
    assert_eq!(provider.is_drifted(&launched).await.unwrap().map(|r| r.to_string()).as_deref(), Some("ImageDrift"));
    assert!(provider.set_drifted("kwok://d", None).await.unwrap());
    assert_eq!(provider.is_drifted(&launched).await.unwrap(), None);
    assert!(!provider.set_drifted("kwok://missing", Some("X")).await.unwrap());
}

#[tokio::test]
async fn instance_types_come_from_a_json_file() {
    let dir = std::env::temp_dir().join(format!("karpenter-kwok-it-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("instance_types.json");
    let json = r#"[{"name": "m5.large", "architecture": "amd64", "operatingSystems": ["linux"],
        "resources": {"cpu": "2", "memory": "8Gi", "pods": "29"},
        "offerings": [{"Price": 0.096, "Available": true, "Requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a"]}]}]}]"#;
    std::fs::write(&file, json).unwrap();
    let options = KwokOptions::from_instance_types_file(&file).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let server = ApiServer::new();
    let provider = KwokCloudProvider::new(server.client(), options);
    assert_eq!(provider.instance_types(&pool()).await.unwrap().len(), 1);
    let launched = provider.create(&linux("m", "1")).await.unwrap();
    let l = launched.metadata.labels.unwrap();
    assert_eq!(label(&l, INSTANCE_TYPE), Some("m5.large"));
    assert_eq!(label(&l, ZONE), Some("us-west-2a"));
    assert_eq!(label(&l, "karpenter.kwok.sh/instance-size"), Some("large"));
    assert_eq!(launched.status.unwrap().capacity.get("pods").map(|q| q.as_str()), Some("29"));
    assert_eq!(catalogue::catalogue().len(), 144, "the built-in catalogue is untouched");
}

fn boot_id(node: &Node) -> String {
    node.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.boot_id.clone()).unwrap_or_default()
}

fn condition(node: &Node, type_: &str) -> Option<(String, String)> {
    let c = node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)?;
    let since = c
        .last_transition_time
        .as_ref()
        .and_then(karpenter_api::time::from_k8s)
        .map(karpenter_api::time::rfc3339)
        .unwrap_or_default();
    Some((c.status.clone(), since))
}

#[tokio::test]
async fn reboot_brings_the_node_back_ready_with_a_new_boot_id() {
    let server = ApiServer::new();
    let start: chrono::DateTime<chrono::Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
    let clock = Arc::new(karpenter_testing::FakeClock::new(start));
    let provider =
        KwokCloudProvider::new(server.client(), KwokOptions { clock: clock.clone(), ..KwokOptions::default() });
    let nodes: Api<Node> = Api::all(server.client());
    let c = linux("sick", "1");
    let mut launched = c.clone();
    launched.status = provider.create(&c).await.unwrap().status;
    let node = nodes.get("sick").await.unwrap();
    assert_eq!(boot_id(&node), "sick-boot-0", "a launched Node has a boot id to record before a reboot");
    assert_eq!(node.status.as_ref().unwrap().node_info.as_ref().unwrap().architecture, "amd64");
    // The fault: Ready=False and a hardware condition, as node repair would see them.
    let broken = serde_json::json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "lastTransitionTime": "2025-12-31T23:00:00Z"},
        {"type": "AcceleratedHardwareReady", "status": "False", "reason": "Xid79", "lastTransitionTime": "2025-12-31T23:00:00Z"},
    ]}});
    nodes.patch_status("sick", &PatchParams::default(), &Patch::Merge(broken)).await.unwrap();

    clock.step_secs(60);
    provider.reboot(&launched).await.unwrap();
    let node = nodes.get("sick").await.unwrap();
    assert_eq!(boot_id(&node), "sick-boot-1");
    assert_eq!(condition(&node, "Ready"), Some(("True".into(), "2026-01-01T00:01:00Z".into())));
    assert_eq!(
        condition(&node, "AcceleratedHardwareReady"),
        Some(("False".into(), "2025-12-31T23:00:00Z".into())),
        "other conditions are the node's own: a fault the reboot did not fix stays"
    );
    // Again: another boot id; Ready was True already, so its transition time stays.
    clock.step_secs(60);
    provider.reboot(&launched).await.unwrap();
    let node = nodes.get("sick").await.unwrap();
    assert_eq!(boot_id(&node), "sick-boot-2");
    assert_eq!(condition(&node, "Ready"), Some(("True".into(), "2026-01-01T00:01:00Z".into())));
    // The same instance: nothing launched or removed.
    let listed: Vec<_> = provider.list().await.unwrap().into_iter().filter_map(|c| c.status?.provider_id).collect();
    assert_eq!(listed, vec!["kwok://sick".to_owned()]);

    // A terminating Node, a gone one, one never launched, another provider's id: NodeClaimNotFound.
    let patch = serde_json::json!({"metadata": {"finalizers": ["karpenter.sh/termination"]}});
    nodes.patch("sick", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    provider.delete(&launched).await.unwrap();
    assert!(provider.reboot(&launched).await.unwrap_err().is_not_found());
    assert_eq!(boot_id(&nodes.get("sick").await.unwrap()), "sick-boot-2", "a terminating Node is not rebooted");
    let patch = serde_json::json!({"metadata": {"finalizers": null}});
    nodes.patch("sick", &PatchParams::default(), &Patch::Merge(patch)).await.unwrap();
    assert!(provider.reboot(&launched).await.unwrap_err().is_not_found());
    assert!(provider.reboot(&linux("never", "1")).await.unwrap_err().is_not_found());
    let mut foreign = launched.clone();
    foreign.status.as_mut().unwrap().provider_id = Some("aws:///zone/i-1".into());
    assert!(provider.reboot(&foreign).await.unwrap_err().is_not_found());
}

#[tokio::test]
async fn reboot_leaves_nodes_it_did_not_launch_alone() {
    let server = ApiServer::new();
    let provider = KwokCloudProvider::with_defaults(server.client());
    let nodes: Api<Node> = Api::all(server.client());
    let real =
        node(NodeOptions { name: Some("real".into()), provider_id: Some("kwok://real".into()), ..Default::default() });
    nodes.create(&PostParams::default(), &real).await.unwrap();
    let mut claim = linux("real", "1");
    claim.status.get_or_insert_with(Default::default).provider_id = Some("kwok://real".into());
    assert!(provider.reboot(&claim).await.unwrap_err().is_not_found());
    assert_eq!(boot_id(&nodes.get("real").await.unwrap()), "");
}
