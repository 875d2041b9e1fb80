//! Step 4 of a lifecycle pass: initializing the registered claim once its Node is ready (see the module docs of
//! [`super`]).

use k8s_openapi::api::core::v1::{Node, Taint as CoreTaint};
use k8s_openapi::api::resource::v1beta1::ResourceSlice;
use karpenter_api::NodeClaim;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::dra::PoolGenerations;
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
        let blocker = initialization_blocker(&self.claim, node).or_else(|| self.dra_blocker(node));
        match blocker {
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

impl Pass<'_> {
    /// A NodeClaim launched for pods with DRA claims (`karpenter.sh/requested-dra-drivers`) is initialized only
    /// once each of those drivers has published a complete pool of ResourceSlices for its Node: until then the
    /// scheduler could not place the pods that wait for its devices.
    fn dra_blocker(&self, node: &Node) -> Option<(&'static str, String)> {
        let requested = self.claim.annotations().get(labels::annotations::REQUESTED_DRA_DRIVERS)?;
        let drivers: Vec<&str> = requested.split(',').map(str::trim).filter(|d| !d.is_empty()).collect();
        let node_name = node.name_any();
        let missing = self.ctx.shared.state.unpublished_dra_drivers(&node_name, &drivers);
        (!missing.is_empty()).then(|| {
            (
                cond_reasons::DRA_DRIVER_POOLS_NOT_PUBLISHED,
                format!(
                    "DRA drivers {} have not published complete resource pools for Node {node_name}",
                    missing.join(", ")
                ),
            )
        })
    }
}

/// The drivers among `drivers` without a complete pool for Node `node` in `slices`: a pool (driver, pool name) is
/// complete when its newest generation's slices for the node number `resourceSliceCount`.
pub fn unpublished_dra_drivers<'a>(
    slices: impl Iterator<Item = &'a ResourceSlice>,
    node: &str,
    drivers: &[&str],
) -> Vec<String> {
    let mut pools = PoolGenerations::default();
    for s in slices.filter(|s| s.spec.node_name.as_deref() == Some(node)) {
        let pool = &s.spec.pool;
        pools.add(&s.spec.driver, &pool.name, pool.generation, pool.resource_slice_count);
    }
    drivers.iter().filter(|d| !pools.has_complete(d)).map(|d| (*d).to_owned()).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(driver: &str, node: &str, pool: &str, generation: i64, count: i64) -> ResourceSlice {
        serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice",
            "metadata": {"name": format!("{node}-{driver}-{pool}-{generation}")},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": pool, "generation": generation, "resourceSliceCount": count}}
        }))
        .unwrap()
    }

    #[test]
    fn a_driver_counts_once_its_newest_pool_generation_is_complete() {
        let drivers = ["gpu.example.com", "nic.example.com"];
        assert_eq!(unpublished_dra_drivers([].iter(), "n", &drivers), drivers);
        // Two slices announced, one published: incomplete.
        let half = [slice("gpu.example.com", "n", "p", 1, 2)];
        assert_eq!(unpublished_dra_drivers(half.iter(), "n", &drivers), drivers);
        let full = [slice("gpu.example.com", "n", "p", 1, 2), slice("gpu.example.com", "n", "p", 1, 2)];
        assert_eq!(unpublished_dra_drivers(full.iter(), "n", &drivers), ["nic.example.com"]);
        // A newer generation replaces the older one and must be complete itself.
        let newer = [
            slice("gpu.example.com", "n", "p", 1, 1),
            slice("gpu.example.com", "n", "p", 2, 2),
            slice("nic.example.com", "n", "q", 1, 1),
        ];
        assert_eq!(unpublished_dra_drivers(newer.iter(), "n", &drivers), ["gpu.example.com"]);
        // Another node's slices do not count.
        let elsewhere = [slice("nic.example.com", "other", "q", 1, 1)];
        assert_eq!(unpublished_dra_drivers(elsewhere.iter(), "n", &["nic.example.com"]), ["nic.example.com"]);
    }
}
