//! The NodeClaim consistency check (`nodeclaim.consistency`): an initialized
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

use k8s_openapi::api::core::v1::Node;
use karpenter_api::NodeClaim;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::nodeclaim::conditions::{self as cond, reasons};
use karpenter_requirements::Quantity;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::events::{Event, reasons as event_reasons};
use crate::kube_util::{ReconcileError, Requeue, ensure_claim_condition};
use crate::metrics::runtime::queue::ControllerQueue;
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
    ctx: ControllerContext,
}

impl std::fmt::Debug for Consistency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consistency").finish_non_exhaustive()
    }
}

impl Consistency {
    /// Nodes are looked up in the context's cluster state (by providerID).
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone() }
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.ctx.client.clone())
    }

    /// Checks the NodeClaim `name`; returns when to check again ([`SCAN_PERIOD`] for a checked claim).
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api = self.claims();
        // The state's copy, as every reconcile triggered by a watch event: a GET per NodeClaim change was one of
        // the controller's larger costs in a 5,000-pod scale-out. Writes below are guarded by its resourceVersion.
        // A claim the state does not hold (not seen yet, or gone) is read from the API server.
        let claim = match self.ctx.state.get_shared::<NodeClaim>(name) {
            Some(c) => Some(NodeClaim::clone(&c)),
            None => api.get_opt(name).await?,
        };
        let Some(claim) = claim else { return Ok(None) };
        if claim.metadata.deletion_timestamp.is_some() || !claim.is_initialized() {
            return Ok(None);
        }
        let Some(provider_id) = claim.provider_id().filter(|p| !p.is_empty()) else { return Ok(None) };
        let Some(node) = self.ctx.state.nodes_by_provider_id(provider_id).into_iter().next() else {
            return Ok(Some(SCAN_PERIOD));
        };
        let issues = check(&claim, &node);
        let now = self.ctx.clock.now();
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
            self.ctx.recorder.publish_detached(event);
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
        // The cluster state's watches, not watches of our own (ClusterState::controller_source).
        let (claims, claim_events) = self.ctx.state.controller_source::<NodeClaim>();
        let (_, node_events) = self.ctx.state.controller_source::<Node>();
        let queue = ControllerQueue::new(crate::kube_util::ErrorPolicyContext::reconciles(&*self, 0));
        let controller = Controller::for_shared_stream(queue.objects(claim_events), claims)
            .watches_shared_stream(
                node_events,
                queue.mapped(|node: Arc<Node>| {
                    node.owner_references()
                        .iter()
                        .filter(|o| o.kind == "NodeClaim")
                        .map(|o| ObjectRef::new(&o.name))
                        .collect::<Vec<_>>()
                }),
            )
            .graceful_shutdown_on(shutdown.cancelled_owned());
        queue
            .run(
                controller,
                |claim: Arc<NodeClaim>, ctx: Arc<Self>| async move {
                    Ok::<Action, ReconcileError>(to_action(ctx.reconcile(&claim.name_any()).await?))
                },
                error_policy,
                self,
            )
            .await;
    }
}

impl crate::kube_util::ErrorPolicyContext for Consistency {
    fn controller_name(&self) -> &'static str {
        CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(self.ctx.metrics().as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::TaintEffect;
    use karpenter_cloudprovider::Clock;
    use karpenter_testing::apiserver::{ApiServer, create_with_status};
    use karpenter_testing::{FakeClock, NodeClaimOptions, NodeOptions, karpenter_taint, node, node_claim, taint};

    fn claim(name: &str, initialized: bool) -> NodeClaim {
        let mut c = node_claim(NodeClaimOptions {
            name: Some(name.into()),
            labels: [("team".to_owned(), "a".to_owned())].into(),
            taints: vec![karpenter_taint("dedicated", Some("x"), TaintEffect::NoSchedule)],
            provider_id: Some(format!("kwok://{name}")),
            node_name: Some(name.into()),
            capacity: [("cpu", "4"), ("memory", "16Gi"), ("nvidia.com/gpu", "0")].into(),
            launched: true,
            registered: true,
            initialized,
            ..Default::default()
        });
        c.metadata.uid = None;
        c
    }

    fn node_for(name: &str, cpu: &str, with_taint: bool) -> Node {
        node(NodeOptions {
            name: Some(name.into()),
            provider_id: Some(format!("kwok://{name}")),
            labels: [("team".to_owned(), "a".to_owned())].into(),
            capacity: [("cpu", cpu), ("memory", "15.5Gi")].into(),
            taints: if with_taint { vec![taint("dedicated", Some("x"), "NoSchedule")] } else { vec![] },
            ..Default::default()
        })
    }

    #[test]
    fn shape_labels_and_taints_are_compared() {
        let c = claim("c", true);
        assert!(check(&c, &node_for("c", "4", true)).is_empty(), "15.5Gi of 16Gi is above 90 %");
        assert!(check(&c, &node_for("c", "3600m", true)).is_empty(), "exactly 90 %");
        let issues = check(&c, &node_for("c", "2", false));
        assert_eq!(issues.len(), 2, "{issues:?}");
        assert_eq!(issues[0], "expected 4 of resource cpu, but found 2 (50.0% of expected)");
        assert_eq!(issues[1], "expected taint dedicated:NoSchedule on the node, found none");
        let mut relabelled = node_for("c", "4", true);
        relabelled.metadata.labels.as_mut().unwrap().insert("team".into(), "b".into());
        assert_eq!(check(&c, &relabelled), ["expected label team=a on the node, found team=b"]);
    }

    #[tokio::test]
    async fn failed_checks_set_the_condition_and_publish_events() {
        let clock = FakeClock::default();
        let server = ApiServer::builder().clock(Arc::new(clock.clone())).build();
        let client = server.client();
        let ctx = ControllerContext::for_tests(
            client.clone(),
            Arc::new(karpenter_testing::kwok::fake()),
            Arc::new(clock.clone()),
        );
        let state = ctx.state();
        let api: Api<NodeClaim> = Api::all(client.clone());
        for (name, initialized) in [("small", true), ("fine", true), ("young", false)] {
            create_with_status(&api, &claim(name, initialized)).await.unwrap();
        }
        state.apply(node_for("small", "2", true));
        state.apply(node_for("fine", "4", true));
        state.apply(node_for("young", "1", true));
        let consistency = Consistency::new(&ctx);

        assert_eq!(consistency.reconcile("small").await.unwrap(), Some(SCAN_PERIOD));
        let c = api.get("small").await.unwrap();
        let found = c.conditions().iter().find(|c| c.type_ == cond::CONSISTENT_STATE_FOUND).unwrap();
        assert_eq!((found.status, found.reason.as_str()), (ConditionStatus::False, reasons::CONSISTENCY_CHECK_FAILED));
        assert!(found.message.contains("resource cpu"), "{}", found.message);
        assert_eq!(found.last_transition_time, karpenter_api::time::rfc3339(clock.now()));

        assert_eq!(consistency.reconcile("fine").await.unwrap(), Some(SCAN_PERIOD));
        let c = api.get("fine").await.unwrap();
        assert!(
            c.conditions().iter().any(|c| c.type_ == cond::CONSISTENT_STATE_FOUND && c.status == ConditionStatus::True)
        );

        assert_eq!(consistency.reconcile("young").await.unwrap(), None, "not initialized: not checked");
        assert!(!api.get("young").await.unwrap().conditions().iter().any(|c| c.type_ == cond::CONSISTENT_STATE_FOUND));
        assert_eq!(consistency.reconcile("missing").await.unwrap(), None);

        let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(client.clone());
        let mut messages = Vec::new();
        for _ in 0..100 {
            messages = events
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some(event_reasons::FAILED_CONSISTENCY_CHECK))
                .map(|e| (e.involved_object.name.unwrap_or_default(), e.message.unwrap_or_default()))
                .collect::<Vec<_>>();
            if !messages.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert_eq!(messages[0].0, "small");
        assert!(messages[0].1.starts_with("Consistency check failed, expected 4 of resource cpu"), "{messages:?}");
    }
}
