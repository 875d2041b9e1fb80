//! Step 4 of a lifecycle pass: initializing the registered claim once its Node is ready (see the module docs of
//! [`super`]).

use k8s_openapi::api::core::v1::{Node, Taint as CoreTaint};
use karpenter_api::NodeClaim;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::labels::{self, taints};
use karpenter_api::nodeclaim::conditions::{self as cond, reasons as cond_reasons};
use karpenter_scheduler::snapshot::api_taint;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::registration::taint_matches;
use super::{CONTROLLER, LifecycleContext, LifecycleError, Pass, truncate};

impl Pass<'_> {
    /// Step 4: initialization of the registered claim's `node` (until `Initialized=True`).
    pub(super) async fn initialize(&mut self, node: &Node) -> Result<(), LifecycleError> {
        if self.is_true(cond::INITIALIZED) {
            return Ok(());
        }
        match initialization_blocker(&self.claim, node) {
            Some((reason, message)) => {
                self.set(cond::INITIALIZED, ConditionStatus::Unknown, reason, &truncate(&message));
            }
            None => {
                label_initialized(self.ctx, &self.name, node).await?;
                self.set(cond::INITIALIZED, ConditionStatus::True, cond::INITIALIZED, "");
                let name = &self.name;
                tracing::info!(controller = CONTROLLER, NodeClaim = %name, Node = %node.name_any(), "initialized nodeclaim");
            }
        }
        Ok(())
    }
}

/// Why the Node is not initialized yet (condition reason and message), `None` when it is.
pub fn initialization_blocker(claim: &NodeClaim, node: &Node) -> Option<(&'static str, String)> {
    let node_name = node.name_any();
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    if !ready {
        return Some((cond_reasons::NODE_NOT_READY, format!("Node {node_name} is not ready")));
    }
    let node_taints: Vec<CoreTaint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    if let Some(t) =
        claim.spec.startup_taints.iter().map(api_taint).find(|st| node_taints.iter().any(|t| taint_matches(t, st)))
    {
        return Some((cond_reasons::STARTUP_TAINTS_EXIST, format!("StartupTaint {:?} still exists", t.key)));
    }
    let ephemeral = [taints::NOT_READY, taints::UNREACHABLE, taints::CLOUD_PROVIDER_UNINITIALIZED];
    if let Some(t) = node_taints.iter().find(|t| ephemeral.contains(&t.key.as_str())) {
        return Some((
            cond_reasons::KNOWN_EPHEMERAL_TAINTS_EXIST,
            format!("KnownEphemeralTaint {:?} still exists", t.key),
        ));
    }
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.clone()).unwrap_or_default();
    for (resource, q) in claim.spec.resources.iter().flat_map(|r| r.requests.iter()) {
        let requested = q.parse().is_ok_and(|q: karpenter_requirements::Quantity| !q.is_zero());
        let registered = allocatable
            .get(resource)
            .and_then(|a| a.0.parse::<karpenter_requirements::Quantity>().ok())
            .is_some_and(|a| !a.is_zero());
        if requested && !registered {
            return Some((
                cond_reasons::RESOURCE_NOT_REGISTERED,
                format!("Resource {resource:?} was requested but not registered"),
            ));
        }
    }
    None
}

async fn label_initialized(ctx: &LifecycleContext, claim_name: &str, node: &Node) -> Result<(), LifecycleError> {
    if node.labels().get(labels::NODE_INITIALIZED).is_some_and(|v| v == "true") {
        return Ok(());
    }
    let patch =
        json!({"metadata": {"labels": {labels::NODE_INITIALIZED: "true"}, "resourceVersion": node.resource_version()}});
    let api: Api<Node> = Api::all(ctx.shared.client.clone());
    let written =
        api.patch(&node.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|source| {
            LifecycleError::Kube {
                name: claim_name.to_owned(),
                action: "labelling the node initialized",
                kind: "Node",
                source,
            }
        })?;
    ctx.shared.state.apply(written);
    Ok(())
}
