//! The CloudProvider conformance suite against KwokCloudProvider over the in-process API server.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_cloudprovider::{DriftReason, InMemoryNodeClasses, OfferingRef};
use karpenter_kwok::testing::{KWOKNodeClassOptions, kwok_node_class};
use karpenter_kwok::{KwokCloudProvider, KwokOptions, MANAGED_LABEL};
use karpenter_testing::apiserver::ApiServer;
use karpenter_testing::conformance::{ConformanceHooks, Fixtures, Outcome, run};
use kube::api::{Api, ListParams};

/// Capacity through the provider's out-of-capacity marks, drift through the drift annotation.
#[derive(Debug)]
struct KwokHooks(KwokCloudProvider);

#[async_trait]
impl ConformanceHooks for KwokHooks {
    async fn exhaust_capacity(&self, claim: &NodeClaim) -> Option<Vec<OfferingRef>> {
        self.0.exhaust_capacity_for(claim).ok()
    }

    async fn restore_capacity(&self) {
        self.0.clear_insufficient_capacity();
    }

    async fn cause_drift(&self, launched: &NodeClaim) -> Option<DriftReason> {
        let id = launched.provider_id()?;
        self.0.set_drifted(id, Some("ConformanceDrift")).await.ok()?.then(|| DriftReason::new("ConformanceDrift"))
    }
}

/// `looks_up_classes`: the provider has node classes to look up; without them every KWOKNodeClass counts as
/// present, so the suite's missing-class check does not apply.
async fn run_suite(provider: KwokCloudProvider, other: KwokCloudProvider, server: &ApiServer, looks_up_classes: bool) {
    let fixtures = Fixtures {
        missing_node_class: if looks_up_classes { Fixtures::kwok().missing_node_class } else { None },
        other_cluster: Some(Arc::new(other)),
        hooks: Arc::new(KwokHooks(provider.clone())),
        ..Fixtures::kwok()
    };
    let report = run(Arc::new(provider.clone()), &fixtures).await;
    assert!(report.passed(), "{report}");
    for check in report.checks.iter().filter(|c| looks_up_classes || c.name != "unknown_node_class") {
        assert_eq!(check.outcome, Outcome::Passed, "{report}");
    }
    assert_eq!(report.provider, "kwok");
    assert!(report.check("insufficient_capacity").is_some() && report.check("drift").is_some(), "{report}");
    assert!(report.check("reboot").is_some_and(|c| c.notes.is_empty()), "kwok reboots its Nodes: {report}");
    assert!(report.check("repair_policies").is_some(), "{report}");
    // Everything launched was cleaned up: no kwok Node is left.
    let nodes: Api<Node> = Api::all(server.client());
    let left = nodes.list(&ListParams::default().labels(&format!("{MANAGED_LABEL}=true"))).await.unwrap();
    assert!(left.items.is_empty(), "{:?}", left.items.iter().map(|n| n.metadata.name.clone()).collect::<Vec<_>>());
    assert!(provider.insufficient_capacity().is_empty(), "the hooks restored capacity");
}

#[tokio::test]
async fn kwok_provider_passes_the_conformance_suite() {
    // Two API servers are two clusters: the other cluster's provider must neither list nor get our Nodes.
    let (server, other_server) = (ApiServer::new(), ApiServer::new());
    let provider = KwokCloudProvider::with_defaults(server.client());
    let other = KwokCloudProvider::with_defaults(other_server.client());
    run_suite(provider, other, &server, false).await;
}

#[tokio::test]
async fn kwok_provider_passes_the_conformance_suite_with_node_classes() {
    let classes = InMemoryNodeClasses::new();
    classes
        .insert_resource(&kwok_node_class(KWOKNodeClassOptions { name: Some("default".into()), ready: Some(true) }))
        .unwrap();
    let (server, other_server) = (ApiServer::new(), ApiServer::new());
    let options = KwokOptions { node_classes: Some(Arc::new(classes.clone())), ..KwokOptions::default() };
    let provider = KwokCloudProvider::new(server.client(), options.clone());
    let other = KwokCloudProvider::new(other_server.client(), options);
    run_suite(provider, other, &server, true).await;
}
