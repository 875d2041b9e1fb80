//! The NodeClaim consistency check (`nodeclaim.consistency`, `shared/spec/disruption.md` §10): an initialized
//! NodeClaim's Node is compared with what the claim says it is, every [`SCAN_PERIOD`]:
//!
//! - **shape**: for every resource of the claim's `status.capacity` with a non-zero value, the Node's capacity
//!   must be at least [`MIN_CAPACITY_RATIO`] (90 %) of it (a smaller node means the instance type's capacity in
//!   the catalogue is wrong, and scheduling over-packs such nodes);
//! - **labels**: every label of the claim is on the Node with the same value (registration copies them);
//! - **taints**: every taint of the claim's `spec.taints` is on the Node (same key and effect).
//!
//! Problems found: `ConsistentStateFound=False(ConsistencyCheckFailed)` with the problems as the message and a
//! Warning event `FailedConsistencyCheck` on the NodeClaim per problem; none: `ConsistentStateFound=True`.
//! Claims not yet initialized, being deleted, or without a Node are skipped. Nothing is repaired: the check
//! informs (events and the condition), as upstream's does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::nodeclaim::conditions::{self as cond, reasons};
use karpenter_cloudprovider::Clock;
use karpenter_requirements::Quantity;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;

use crate::events::{Event, Recorder, reasons as event_reasons};
use crate::kube_util::{ReconcileError, Requeue, ensure_claim_condition};
use crate::state::ClusterState;
use crate::termination::{error_policy, to_action};

/// The controller name in logs.
pub const CONTROLLER: &str = "nodeclaim.consistency";
/// How often each initialized NodeClaim is checked.
pub const SCAN_PERIOD: Duration = Duration::from_secs(10 * 60);
/// The share of the expected capacity a Node must have.
pub const MIN_CAPACITY_RATIO: f64 = 0.9;

fn parse(q: &str) -> Option<f64> {
    q.parse::<Quantity>().ok().map(|q| q.as_nanos() as f64 / 1e9)
}

/// The inconsistencies between `claim` and its `node` (see the module docs), in a stable order.
pub fn check(claim: &NodeClaim, node: &Node) -> Vec<String> {
    let mut issues = Vec::new();
    let node_capacity: BTreeMap<String, String> = node
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .map(|c| c.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
        .unwrap_or_default();
    for (resource, expected) in claim.status.iter().flat_map(|s| s.capacity.iter()) {
        let Some(expected_v) = parse(expected.as_str()).filter(|v| *v > 0.0) else { continue };
        let found = node_capacity.get(resource).map(String::as_str).unwrap_or("0");
        let found_v = parse(found).unwrap_or(0.0);
        if found_v < expected_v * MIN_CAPACITY_RATIO {
            issues.push(format!(
                "expected {} of resource {resource}, but found {found} ({:.1}% of expected)",
                expected.as_str(),
                found_v / expected_v * 100.0
            ));
        }
    }
    let node_labels = node.labels();
    for (key, value) in claim.labels() {
        match node_labels.get(key) {
            Some(v) if v == value => {}
            Some(v) => issues.push(format!("expected label {key}={value} on the node, found {key}={v}")),
            None => issues.push(format!("expected label {key}={value} on the node, found none")),
        }
    }
    let node_taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    for taint in &claim.spec.taints {
        let effect = taint.effect.as_str();
        let present = node_taints.into_iter().flatten().any(|t| t.key == taint.key && t.effect == effect);
        if !present {
            issues.push(format!("expected taint {}:{effect} on the node, found none", taint.key));
        }
    }
    issues
}

/// The consistency controller (see the module docs).
pub struct Consistency {
    client: Client,
    state: ClusterState,
    recorder: Recorder,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Consistency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consistency").finish_non_exhaustive()
    }
}

impl Consistency {
    /// Nodes are looked up in `state` (by providerID).
    pub fn new(client: Client, state: ClusterState, recorder: Recorder, clock: Arc<dyn Clock>) -> Self {
        Self { client, state, recorder, clock }
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }

    /// Checks the NodeClaim `name`; returns when to check again ([`SCAN_PERIOD`] for a checked claim).
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api = self.claims();
        let Some(claim) = api.get_opt(name).await? else { return Ok(None) };
        if claim.metadata.deletion_timestamp.is_some() || !claim.is_initialized() {
            return Ok(None);
        }
        let Some(provider_id) = claim.provider_id().filter(|p| !p.is_empty()) else { return Ok(None) };
        let Some(node) = self.state.nodes_by_provider_id(provider_id).into_iter().next() else {
            return Ok(Some(SCAN_PERIOD));
        };
        let issues = check(&claim, &node);
        let now = self.clock.now();
        if issues.is_empty() {
            ensure_claim_condition(
                &api,
                &claim,
                cond::CONSISTENT_STATE_FOUND,
                ConditionStatus::True,
                cond::CONSISTENT_STATE_FOUND,
                "",
                now,
            )
            .await?;
            return Ok(Some(SCAN_PERIOD));
        }
        for issue in &issues {
            tracing::error!(controller = CONTROLLER, NodeClaim = %name, Node = %node.name_any(), issue = %issue, "consistency check failed");
            let event = Event::warning(
                &claim,
                event_reasons::FAILED_CONSISTENCY_CHECK,
                format!("Consistency check failed, {issue}"),
            );
            self.recorder.publish_detached(event);
        }
        ensure_claim_condition(
            &api,
            &claim,
            cond::CONSISTENT_STATE_FOUND,
            ConditionStatus::False,
            reasons::CONSISTENCY_CHECK_FAILED,
            &issues.join("; "),
            now,
        )
        .await?;
        Ok(Some(SCAN_PERIOD))
    }

    /// Watches NodeClaims and Nodes (mapped to their NodeClaim by owner reference) until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        Controller::new(self.claims(), watcher::Config::default())
            .watches(Api::<Node>::all(self.client.clone()), watcher::Config::default(), |node: Node| {
                node.owner_references()
                    .iter()
                    .filter(|o| o.kind == "NodeClaim")
                    .map(|o| ObjectRef::new(&o.name))
                    .collect::<Vec<_>>()
            })
            .graceful_shutdown_on(shutdown.cancelled_owned())
            .run(
                |claim: Arc<NodeClaim>, ctx: Arc<Self>| async move {
                    Ok::<Action, ReconcileError>(to_action(ctx.reconcile(&claim.name_any()).await?))
                },
                error_policy,
                self,
            )
            .for_each(|_| async {})
            .await;
    }
}
