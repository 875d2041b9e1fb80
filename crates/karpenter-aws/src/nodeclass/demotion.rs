//! Reserved → on-demand demotion.
//!
//! When a capacity reservation expires or is cancelled, its instances keep running, now as ordinary on-demand
//! instances: EC2 stops reporting a reservation for them. Likewise an instance whose capacity-reservation
//! preference is changed away from `capacity-reservations-only` (`ModifyInstanceCapacityReservationAttributes`,
//! e.g. to `open`) is no longer reserved capacity (only `capacity-reservations-only` instances count as reserved),
//! even while EC2 still reports a reservation id for it. Their NodeClaims and Nodes still carry
//! `karpenter.sh/capacity-type=reserved` and the reservation labels, which would make scheduling, consolidation
//! pricing and drift treat them as reserved capacity. [`ReservationDemotion`] fixes the labels, every
//! [`DEMOTION_INTERVAL`]:
//!
//! 1. lists the NodeClaims and the Nodes labelled `karpenter.sh/capacity-type=reserved` (label selector);
//! 2. when there are any, describes the cluster's instances once ([`InstanceProvider::list`], one
//!    `DescribeInstances` for all of them, never one per claim);
//! 3. for each object whose instance (from its provider id) EC2 reports as on-demand
//!    ([`crate::provider::capacity_type_of`] under the instance provider's `ReservedCapacity` gate: no
//!    reservation id, or a preference other than `capacity-reservations-only`): sets `karpenter.sh/capacity-type=on-demand` and removes the
//!    reservation labels ([`RESERVATION_LABELS`]) with a JSON merge patch guarded by the object's
//!    resourceVersion, then publishes a Normal [`DEMOTED_REASON`] event on it.
//!
//! Nodes are handled on their own, not through their NodeClaim, so a conflict on one object never strands the
//! other: whatever is still labelled `reserved` is looked at again on the next tick (a 409 is simply retried
//! then). Nodes are found by their own labels and provider id, which also covers a Node that registered with
//! the kubelet's reserved labels after its NodeClaim was already demoted. Objects without an AWS provider id
//! (not launched yet), whose instance is gone or shutting down (other controllers handle those), or whose
//! instance is still reserved (or spot) are left alone.
//!
//! The capacity reservation's tracked instance count
//! ([`crate::nodeclass::reservation::CapacityReservationProvider`]) is not touched: an instance leaves its
//! reservation mostly because the reservation itself ended (its count no longer matters), and otherwise the
//! status controller's describe, at most a minute later, reports the count EC2 knows; giving one back here
//! could count the same slot twice.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::labels as aws_labels;
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::NodeClaim;
use karpenter_api::labels::{CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED};
use karpenter_cloudprovider::Clock;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::error::ControllerError;
use crate::launch::fleet::{Ec2Instance, InstanceState};
use crate::launch::instance::InstanceProvider;
use crate::provider::{capacity_type_of, instance_id};
use crate::runtime::timed_pass;
use karpenter_runtime::metrics::{Metrics, ReconcileMetrics};

/// How often reserved NodeClaims and Nodes are checked.
pub const DEMOTION_INTERVAL: Duration = Duration::from_secs(60);
/// The reason of the event published on each demoted NodeClaim and Node.
pub const DEMOTED_REASON: &str = "CapacityReservationDemoted";
/// The labels only reserved capacity carries; demotion removes them.
pub const RESERVATION_LABELS: [&str; 3] = [
    aws_labels::CAPACITY_RESERVATION_ID,
    aws_labels::CAPACITY_RESERVATION_TYPE,
    aws_labels::CAPACITY_RESERVATION_INTERRUPTIBLE,
];

/// What one pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DemotionPass {
    /// NodeClaims relabelled on-demand, sorted.
    pub node_claims: Vec<String>,
    /// Nodes relabelled on-demand, sorted.
    pub nodes: Vec<String>,
    /// Objects (`NodeClaim/<name>`, `Node/<name>`) whose patch failed (a conflict, or another API error, which is
    /// logged); they are still labelled reserved, so the next pass tries again. Sorted.
    pub retry: Vec<String>,
}

/// How one patch ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchOutcome {
    /// Relabelled.
    Demoted,
    /// The object is gone: nothing to do.
    Gone,
    /// 409 (it changed since it was read) or another API error: the next pass tries again.
    Retry,
}

/// The merge patch that relabels an object on-demand: capacity type, reservation labels removed (`null`), and the
/// read resourceVersion as a precondition.
pub fn demotion_patch(resource_version: Option<&str>) -> Value {
    let mut labels = Map::new();
    labels.insert(CAPACITY_TYPE.to_owned(), Value::from(CAPACITY_TYPE_ON_DEMAND));
    for key in RESERVATION_LABELS {
        labels.insert(key.to_owned(), Value::Null);
    }
    json!({ "metadata": { "resourceVersion": resource_version, "labels": labels } })
}

/// The instance behind a provider id when it is live and EC2 reports it on-demand (`reserved_capacity`: the
/// feature gate).
fn demoted_instance<'a>(
    provider_id: Option<&str>,
    instances: &'a BTreeMap<String, Ec2Instance>,
    reserved_capacity: bool,
) -> Option<&'a Ec2Instance> {
    let id = instance_id(provider_id?)?;
    let instance = instances.get(id)?;
    let live = !matches!(instance.state, InstanceState::ShuttingDown | InstanceState::Terminated);
    (live && capacity_type_of(instance, reserved_capacity) == CAPACITY_TYPE_ON_DEMAND).then_some(instance)
}

/// The reserved → on-demand demotion controller; see the module docs.
#[derive(Clone)]
pub struct ReservationDemotion {
    client: Client,
    instances: InstanceProvider,
    clock: Arc<dyn Clock>,
    interval: Duration,
    reconcile_metrics: Option<ReconcileMetrics>,
}

impl std::fmt::Debug for ReservationDemotion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservationDemotion").field("interval", &self.interval).finish_non_exhaustive()
    }
}

impl ReservationDemotion {
    /// Describes instances through `instances` (the CloudProvider's instance provider); `clock` stamps events.
    pub fn new(client: Client, instances: InstanceProvider, clock: Arc<dyn Clock>) -> Self {
        Self { client, instances, clock, interval: DEMOTION_INTERVAL, reconcile_metrics: None }
    }

    /// Upstream's name of this controller: the `controller` label of its reconcile and workqueue series.
    pub const NAME: &'static str = "capacityreservation.capacitytype";

    /// Records each pass into `metrics` under [`Self::NAME`], as a singleton controller (one worker).
    pub fn with_metrics(mut self, metrics: &Metrics) -> Self {
        self.reconcile_metrics = Some(metrics.reconciler(Self::NAME, 1));
        self
    }

    /// Another cadence (tests).
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.client.clone())
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// One pass. Fails only when listing the objects or describing the instances fails (nothing was changed
    /// then); failed patches are reported in [`DemotionPass::retry`].
    pub async fn run_once(&self) -> Result<DemotionPass, ControllerError> {
        let reserved = ListParams::default().labels(&format!("{CAPACITY_TYPE}={CAPACITY_TYPE_RESERVED}"));
        let claims = self.claims().list(&reserved).await?.items;
        let nodes = self.nodes().list(&reserved).await?.items;
        let mut pass = DemotionPass::default();
        if claims.is_empty() && nodes.is_empty() {
            return Ok(pass);
        }
        let instances: BTreeMap<String, Ec2Instance> =
            self.instances.list().await?.into_iter().map(|i| (i.instance_id.clone(), i)).collect();
        let gate = self.instances.reserved_capacity();
        for node in &nodes {
            let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            let Some(instance) = demoted_instance(provider_id, &instances, gate) else { continue };
            match self.demote_node(node, instance).await {
                PatchOutcome::Demoted => pass.nodes.push(node.name_any()),
                PatchOutcome::Gone => {}
                PatchOutcome::Retry => pass.retry.push(format!("Node/{}", node.name_any())),
            }
        }
        for claim in &claims {
            let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.as_deref());
            let Some(instance) = demoted_instance(provider_id, &instances, gate) else { continue };
            match self.demote_node_claim(claim, instance).await {
                PatchOutcome::Demoted => pass.node_claims.push(claim.name_any()),
                PatchOutcome::Gone => {}
                PatchOutcome::Retry => pass.retry.push(format!("NodeClaim/{}", claim.name_any())),
            }
        }
        pass.node_claims.sort();
        pass.nodes.sort();
        pass.retry.sort();
        Ok(pass)
    }

    /// Relabels `claim` (as read) on-demand, with its resourceVersion as precondition, and publishes the event.
    pub async fn demote_node_claim(&self, claim: &NodeClaim, instance: &Ec2Instance) -> PatchOutcome {
        let patch = demotion_patch(claim.metadata.resource_version.as_deref());
        let name = claim.name_any();
        let result = self.claims().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
        let outcome = outcome("NodeClaim", &name, result.map(|_| ()));
        if outcome == PatchOutcome::Demoted {
            let object = reference::<NodeClaim>(&claim.metadata, "NodeClaim");
            self.publish(object, &name, 0, &message(claim.labels(), instance)).await;
        }
        outcome
    }

    /// Relabels `node` (as read) on-demand, with its resourceVersion as precondition, and publishes the event.
    pub async fn demote_node(&self, node: &Node, instance: &Ec2Instance) -> PatchOutcome {
        let patch = demotion_patch(node.metadata.resource_version.as_deref());
        let name = node.name_any();
        let result = self.nodes().patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
        let outcome = outcome("Node", &name, result.map(|_| ()));
        if outcome == PatchOutcome::Demoted {
            let object = reference::<Node>(&node.metadata, "Node");
            // A Node may share its NodeClaim's name: a distinct event name for the same instant.
            self.publish(object, &name, 1, &message(node.labels(), instance)).await;
        }
        outcome
    }

    /// A core/v1 Normal event (in `default`, as client-go records events of cluster-scoped objects).
    async fn publish(&self, involved_object: ObjectReference, name: &str, salt: i64, message: &str) {
        let now = self.clock.now();
        let stamp = now.timestamp_nanos_opt().unwrap_or_default().saturating_add(salt);
        let time = karpenter_api::time::to_k8s(now);
        let event = CoreEvent {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{stamp:x}")),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object,
            reason: Some(DEMOTED_REASON.into()),
            message: Some(message.into()),
            type_: Some("Normal".into()),
            source: Some(EventSource { component: Some("karpenter".into()), host: None }),
            reporting_component: Some("karpenter".into()),
            count: Some(1),
            first_timestamp: time.clone(),
            last_timestamp: time,
            ..Default::default()
        };
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), "default");
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            tracing::debug!(error = %e, object = name, "demotion event not published");
        }
    }

    /// Runs a pass every interval until `shutdown` is cancelled.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            if shutdown.run_until_cancelled(tokio::time::sleep(self.interval)).await.is_none() {
                return;
            }
            match timed_pass(self.reconcile_metrics.as_ref(), self.run_once()).await {
                Ok(pass) => {
                    if !pass.node_claims.is_empty() || !pass.nodes.is_empty() {
                        tracing::info!(node_claims = ?pass.node_claims, nodes = ?pass.nodes,
                            "demoted reserved capacity to on-demand");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "reserved capacity demotion failed"),
            }
        }
    }
}

fn outcome(kind: &str, name: &str, result: Result<(), kube::Error>) -> PatchOutcome {
    match result {
        Ok(()) => PatchOutcome::Demoted,
        Err(kube::Error::Api(s)) if s.code == 404 => PatchOutcome::Gone,
        Err(kube::Error::Api(s)) if s.code == 409 => {
            tracing::debug!(kind, name, "changed while being demoted; retried next pass");
            PatchOutcome::Retry
        }
        Err(e) => {
            tracing::warn!(kind, name, error = %e, "demoting to on-demand failed; retried next pass");
            PatchOutcome::Retry
        }
    }
}

fn reference<K: Resource<DynamicType = ()>>(meta: &ObjectMeta, kind: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(kind.into()),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        ..Default::default()
    }
}

fn message(labels: &BTreeMap<String, String>, instance: &Ec2Instance) -> String {
    if let Some(id) = &instance.capacity_reservation_id {
        // Still in a reservation, but not as reserved capacity (its preference changed).
        let preference = instance.capacity_reservation_preference.as_deref().unwrap_or("unknown");
        return format!(
            "Instance {} runs in capacity reservation {id} with preference {preference}, not \
             capacity-reservations-only; capacity type reserved -> on-demand",
            instance.instance_id
        );
    }
    match labels.get(aws_labels::CAPACITY_RESERVATION_ID) {
        Some(id) => format!(
            "Instance {} no longer runs in capacity reservation {id}; capacity type reserved -> on-demand",
            instance.instance_id
        ),
        None => format!(
            "Instance {} no longer runs in a capacity reservation; capacity type reserved -> on-demand",
            instance.instance_id
        ),
    }
}

/// An instance provider over an empty [`crate::launch::mock::MockEc2`] (other modules' tests).
#[cfg(test)]
pub(crate) fn test_instance_provider(clock: &karpenter_testing::FakeClock) -> InstanceProvider {
    tests::instance_provider(&crate::launch::mock::MockEc2::new(Arc::new(clock.clone())), clock)
}

#[cfg(test)]
mod tests;
