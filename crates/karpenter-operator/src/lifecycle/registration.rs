//! Step 3 of a lifecycle pass: registering the claim's Node (see the module docs of [`super`]).

use k8s_openapi::api::core::v1::{Node, Taint as CoreTaint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use karpenter_api::NodeClaim;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::labels::{self, finalizers, taints};
use karpenter_api::nodeclaim::conditions::{self as cond, reasons as cond_reasons};
use karpenter_scheduler::snapshot::api_taint;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{CONTROLLER, LifecycleContext, LifecycleError, Pass, truncate};
use crate::events::{Event, reasons};

impl Pass<'_> {
    /// Step 3: registration (until `Registered=True`). Returns whether the claim is registered (before or by this
    /// pass) and its Node when exactly one has the claim's providerID.
    pub(super) async fn register(&mut self) -> Result<(bool, Option<Node>), LifecycleError> {
        let registered = self.is_true(cond::REGISTERED);
        if !self.is_true(cond::LAUNCHED) {
            return Ok((registered, None));
        }
        let provider_id = self.status.provider_id.clone().unwrap_or_default();
        let nodes = self.ctx.shared.state.nodes_by_provider_id(&provider_id);
        match nodes.as_slice() {
            [] => {
                let (reason, message) = (cond_reasons::NODE_NOT_FOUND, "Node not registered with cluster");
                self.set(cond::REGISTERED, ConditionStatus::Unknown, reason, message);
                Ok((registered, None))
            }
            [one] if registered => Ok((true, Some(Node::clone(one)))),
            [one] => {
                let synced = register_node(self.ctx, &self.claim, one).await?;
                self.status.node_name = synced.metadata.name.clone();
                self.set(cond::REGISTERED, ConditionStatus::True, cond::REGISTERED, "");
                let pool = self.claim.node_pool_name().unwrap_or("");
                let zone = synced.labels().get(labels::ZONE).map(String::as_str).unwrap_or("");
                self.ctx.shared.metrics.nodes_created(pool, zone).inc();
                let name = &self.name;
                tracing::info!(controller = CONTROLLER, NodeClaim = %name, Node = %synced.name_any(), "registered nodeclaim");
                Ok((true, Some(synced)))
            }
            _ => {
                let message = truncate(&format!("{} Nodes have providerID {provider_id}", nodes.len()));
                self.set(cond::REGISTERED, ConditionStatus::False, cond_reasons::MULTIPLE_NODES_FOUND, &message);
                Ok((registered, None))
            }
        }
    }
}

/// Whether two taints are the same taint (key and effect; the value does not count).
pub(super) fn taint_matches(a: &CoreTaint, b: &CoreTaint) -> bool {
    a.key == b.key && a.effect == b.effect
}

/// Syncs the claim onto its Node (see the module docs) and returns the written Node.
async fn register_node(ctx: &LifecycleContext, claim: &NodeClaim, node: &Node) -> Result<Node, LifecycleError> {
    let claim_name = claim.name_any();
    let node_name = node.name_any();
    let mut node_labels = node.labels().clone();
    node_labels.extend(claim.labels().clone());
    node_labels.insert(labels::NODE_REGISTERED.to_owned(), "true".to_owned());
    let mut node_annotations = node.annotations().clone();
    node_annotations.extend(claim.annotations().clone());

    let mut owners = node.owner_references().to_vec();
    if !owners.iter().any(|o| o.kind == "NodeClaim" && o.name == claim_name) {
        owners.push(OwnerReference {
            api_version: "karpenter.sh/v1".into(),
            kind: "NodeClaim".into(),
            name: claim_name.clone(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            block_owner_deletion: Some(true),
            controller: None,
        });
    }
    let mut node_finalizers = node.finalizers().to_vec();
    if !node_finalizers.iter().any(|f| f == finalizers::TERMINATION) {
        node_finalizers.push(finalizers::TERMINATION.to_owned());
    }

    let mut node_taints: Vec<CoreTaint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let had_unregistered = node_taints.iter().any(|t| t.key == taints::UNREGISTERED);
    if !had_unregistered {
        ctx.shared.recorder.publish_detached(Event::warning(
            node,
            reasons::UNREGISTERED_TAINT_MISSING,
            format!(
                "Missing {} taint which prevents registration related race conditions on Karpenter-managed nodes",
                taints::UNREGISTERED
            ),
        ));
    }
    node_taints.retain(|t| t.key != taints::UNREGISTERED);
    let do_not_sync = node.labels().get(labels::DO_NOT_SYNC_TAINTS).is_some_and(|v| v == "true");
    if !do_not_sync {
        for t in claim.spec.taints.iter().chain(&claim.spec.startup_taints).map(api_taint) {
            if !node_taints.iter().any(|have| taint_matches(have, &t)) {
                node_taints.push(t);
            }
        }
    }

    let patch = json!({
        "metadata": {
            "labels": node_labels,
            "annotations": node_annotations,
            "ownerReferences": owners,
            "finalizers": node_finalizers,
            "resourceVersion": node.resource_version(),
        },
        "spec": {"taints": node_taints},
    });
    let api: Api<Node> = Api::all(ctx.shared.client.clone());
    let written = api.patch(&node_name, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|source| {
        LifecycleError::Kube { name: claim_name, action: "registering the node", kind: "Node", source }
    })?;
    ctx.shared.state.apply(written.clone());
    Ok(written)
}
