//! The pod-events controller (`nodeclaim.podevents`): stamps `status.lastPodEventTime` on the
//! NodeClaim of a node when a pod is bound to it, finishes there (Succeeded / Failed) or starts terminating
//! there. DaemonSet pods do not count. A stamp less than [`DEDUPE`] old is kept (no write), so pod churn costs at
//! most one status write per NodeClaim every 10 s. The `Consolidatable` condition and karpenter-disruption's
//! candidate check measure `consolidateAfter` from this time.
//!
//! The controller remembers what it last saw of each pod (node, terminal, terminating) and stamps on a change.
//! It follows the cluster state's pod watch ([`ClusterState::pod_changes`]); pods already known when it starts,
//! or listed again by a re-list, are recorded without stamping ([`PodEvents::prime`]): a restart of the
//! controller does not reset every node's consolidation clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, stream};

use karpenter_api::time::{parse_rfc3339, rfc3339};
use karpenter_api::{CompactPod, NodeClaim};
use karpenter_scheduler::snapshot::is_daemon_set_pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::metrics::ReconcileResult;

use crate::context::ControllerContext;
use crate::kube_util::ReconcileError;
use crate::state::{PodChange, object_key};

/// The controller name in logs.
pub const CONTROLLER: &str = "nodeclaim.podevents";
/// A `lastPodEventTime` younger than this is not rewritten.
pub const DEDUPE: Duration = Duration::from_secs(10);
/// NodeClaims stamped at once.
const STAMP_CONCURRENCY: usize = 16;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Facts {
    node: Option<String>,
    terminal: bool,
    terminating: bool,
}

fn facts(pod: &CompactPod) -> Facts {
    Facts {
        node: pod.node_name().map(str::to_owned),
        terminal: pod.is_terminal(),
        terminating: pod.metadata.deletion_timestamp.is_some(),
    }
}

fn pod_id(pod: &CompactPod) -> String {
    pod.metadata.uid.clone().unwrap_or_else(|| object_key(pod))
}

/// The pod-events controller (see the module docs).
pub struct PodEvents {
    ctx: ControllerContext,
    /// By pod uid. A hash map: every pod change of the cluster looks its pod up here.
    seen: Mutex<HashMap<String, Facts>>,
}

impl std::fmt::Debug for PodEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodEvents").finish_non_exhaustive()
    }
}

impl PodEvents {
    /// A controller writing through the context's client; NodeClaims are found in its cluster state.
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone(), seen: Mutex::default() }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<String, Facts>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records pods as already known (no stamp): the pods of a (re)list.
    pub fn prime<'a>(&self, pods: impl IntoIterator<Item = &'a CompactPod>) {
        let mut seen = self.seen();
        for p in pods {
            seen.insert(pod_id(p), facts(p));
        }
    }

    /// Forgets a deleted pod.
    pub fn forget(&self, pod: &CompactPod) {
        self.seen().remove(&pod_id(pod));
    }

    /// Handles one observation of `pod`: stamps its node's NodeClaim if the pod was bound, finished or started
    /// terminating since it was last seen. Returns the NodeClaim stamped, if any.
    pub async fn observe(&self, pod: &CompactPod) -> Result<Option<String>, ReconcileError> {
        let Some(node) = self.event_node(pod) else { return Ok(None) };
        let Some(claim) = self.claim_of(&node) else { return Ok(None) };
        self.stamp(&claim).await
    }

    /// Records what is now known of `pod`; the node whose NodeClaim it gives a pod event, if it does.
    fn event_node(&self, pod: &CompactPod) -> Option<String> {
        let now_facts = facts(pod);
        let before = self.seen().insert(pod_id(pod), now_facts.clone()).unwrap_or_default();
        if is_daemon_set_pod(pod) {
            return None;
        }
        let node = now_facts.node?;
        let event = before.node.is_none()
            || (!before.terminal && now_facts.terminal)
            || (!before.terminating && now_facts.terminating);
        event.then_some(node)
    }

    /// The NodeClaim of `node`: through the Node's providerID (the state's index), else the claim that names the
    /// node in its status (a Node not seen yet).
    fn claim_of(&self, node: &str) -> Option<Arc<NodeClaim>> {
        let by_provider_id = self
            .ctx
            .state
            .get_shared::<k8s_openapi::api::core::v1::Node>(node)
            .and_then(|n| n.spec.as_ref()?.provider_id.clone())
            .and_then(|id| self.ctx.state.node_claims_by_provider_id(&id).into_iter().next());
        by_provider_id.or_else(|| self.ctx.state.find_shared::<NodeClaim>(|c| c.node_name() == Some(node)))
    }

    async fn stamp(&self, claim: &NodeClaim) -> Result<Option<String>, ReconcileError> {
        let now = self.ctx.clock.now();
        let last = claim.status.as_ref().and_then(|s| s.last_pod_event_time.as_deref()).and_then(parse_rfc3339);
        let dedupe = chrono::Duration::from_std(DEDUPE).unwrap_or(chrono::Duration::MAX);
        if last.is_some_and(|l| now - l < dedupe) || claim.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let name = claim.name_any();
        let patch = json!({"status": {"lastPodEventTime": rfc3339(now)}});
        let api: Api<NodeClaim> = Api::all(self.ctx.client.clone());
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(written) => {
                self.ctx.state.apply(written);
                Ok(Some(name))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Follows the cluster state's pod changes ([`ClusterState::pod_changes`]: the state's one pod watch, not a
    /// second one) until `shutdown`.
    ///
    /// Reading the changes never waits on a write: the reader only notes which nodes had a pod event, and a second
    /// loop stamps their NodeClaims, [`STAMP_CONCURRENCY`] at a time, each node once however many of its pods
    /// changed meanwhile. A queued change holds its version of the pod, so a reader that waited on writes fell
    /// minutes behind a scale-out of thousands of nodes and held hundreds of MB at 50,000 pods.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut changes = self.ctx.state.pod_changes();
        let this = self.as_ref();
        // Nodes with a pod event not yet stamped, and one pod that gave it (for the log line).
        let due: Mutex<BTreeMap<String, String>> = Mutex::default();
        let wake = tokio::sync::Notify::new();
        // Its queue is `due`: a node enters it once however many pod events it gets before its stamp.
        let queue = this.ctx.metrics.reconciler(CONTROLLER, STAMP_CONCURRENCY);
        let read = async {
            while let Some(change) = changes.recv().await {
                match change {
                    PodChange::Listed(pod) => this.prime([pod.as_ref()]),
                    PodChange::Applied(pod) => {
                        if let Some(node) = this.event_node(&pod) {
                            let mut due = due.lock().unwrap_or_else(|p| p.into_inner());
                            due.entry(node).or_insert_with(|| {
                                queue.queued();
                                object_key(pod.as_ref())
                            });
                            wake.notify_one();
                        }
                    }
                    PodChange::Deleted(pod) => this.forget(&pod),
                }
            }
        };
        let write = async {
            loop {
                wake.notified().await;
                let nodes = std::mem::take(&mut *due.lock().unwrap_or_else(|p| p.into_inner()));
                let stamps: Vec<(Arc<NodeClaim>, String)> = nodes
                    .into_iter()
                    .filter_map(|(node, pod)| {
                        let claim = this.claim_of(&node);
                        if claim.is_none() {
                            // Taken from the queue with nothing to do.
                            queue.start().finish(ReconcileResult::Success);
                        }
                        claim.map(|claim| (claim, pod))
                    })
                    .collect();
                let queue = &queue;
                stream::iter(stamps)
                    .for_each_concurrent(STAMP_CONCURRENCY, |(claim, pod)| async move {
                        let stamping = queue.start();
                        let stamped = this.stamp(&claim).await;
                        stamping.finish(if stamped.is_ok() { ReconcileResult::Success } else { ReconcileResult::Error });
                        if let Err(e) = stamped {
                            tracing::warn!(controller = CONTROLLER, Pod = %pod, NodeClaim = %claim.name_any(), error = %e,
                                "recording the last pod event time failed");
                        }
                    })
                    .await;
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = read => {}
            () = write => {}
        }
    }
}
