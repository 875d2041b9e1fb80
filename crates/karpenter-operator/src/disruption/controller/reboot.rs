//! Node repair's reboot flow (the `Reboot` repair action): the NodeClaim gets `Rebooting=True` and the node the
//! disrupted taint, the node drains (bounded by the reboot grace period), the provider reboots it with the old
//! boot id recorded first, and a later step judges the node that came back: healthy with a new boot id clears the
//! marks; still unhealthy, or not back within [`REBOOT_TIMEOUT`], has repair replace it instead.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use karpenter_api::condition::{ConditionStatus, set_condition};
use karpenter_api::labels;
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_api::time::chrono_duration;
use karpenter_api::{CompactPod, NodeClaim};
use karpenter_disruption::command::Command;
use karpenter_scheduler::snapshot::is_daemon_set_pod;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{CONTROLLER, Disruption, Inner, StepReport, Target, reason_label};
use crate::events::reasons;
use crate::kube_util::{is_not_found, lock, retry_write_conflicts};

/// How long a rebooted node may take to come back with a new boot id before repair replaces it instead.
pub const REBOOT_TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// A reboot being prepared: the node drains (bounded by `deadline`), then the provider reboots it.
#[derive(Debug, Clone)]
pub(super) struct RebootFlight {
    pub(super) target: Target,
    command: Command,
    deadline: Option<DateTime<Utc>>,
}

/// A reboot drain bound: a Go duration, or a bare `0` (forceful).
fn parse_grace(text: &str) -> Option<Duration> {
    if text.trim() == "0" {
        return Some(Duration::ZERO);
    }
    karpenter_api::duration::parse_go_duration(text.trim()).ok()
}

/// The Node's `status.nodeInfo.bootID`, if reported.
fn boot_id(node: &Node) -> Option<String> {
    node.status.as_ref()?.node_info.as_ref().map(|i| i.boot_id.clone()).filter(|b| !b.is_empty())
}

impl Disruption {
    /// Starts node repair's `Reboot` command: each target's reboot is prepared ([`Self::prepare_reboot`]) and
    /// then drained and issued by [`Self::advance_reboots`] over the next steps.
    pub(super) async fn start_reboots(
        &self,
        inner: &mut Inner,
        targets: Vec<Target>,
        command: Command,
        report: &mut StepReport,
    ) {
        for t in targets {
            match self.prepare_reboot(&t, &command).await {
                Ok(flight) => {
                    lock(&self.repair).rebooting.insert(t.node.clone());
                    inner.reboots.push(flight);
                }
                Err(e) => report.errors.push(format!("preparing the reboot of {}: {e}", t.node)),
            }
        }
        report.started.push(command);
    }

    /// Starts a reboot (node repair's `Reboot` action): `Rebooting=True` (`RebootRequested`) on the NodeClaim
    /// and the node tainted `karpenter.sh/disrupted`, then [`Self::advance_reboots`] drains it. The drain is
    /// bounded by the NodeClaim's `karpenter.sh/reboot-termination-grace-period` (a duration; `0` forceful),
    /// else by the repair policy's bound, else unbounded.
    async fn prepare_reboot(&self, t: &Target, command: &Command) -> Result<RebootFlight, String> {
        let claims = self.claims();
        let current = claims.get(&t.claim).await.map_err(|e| e.to_string())?;
        let now = self.ctx.clock.now();
        let mut conditions = current.conditions().to_vec();
        set_condition(
            &mut conditions,
            cond::REBOOTING,
            ConditionStatus::True,
            "RebootRequested",
            &crate::lifecycle::truncate(&command.explanation),
            current.metadata.generation,
            now,
        );
        let written = crate::kube_util::patch_claim_conditions(&claims, &current, &conditions)
            .await
            .map_err(|e| e.to_string())?;
        self.ctx.state.apply(written.clone());
        retry_write_conflicts(Some(&*self.ctx.metrics), CONTROLLER, "Node", &t.node, || self.taint(&t.node))
            .await
            .map_err(|e| e.to_string())?;
        let annotated = written.annotations().get(labels::annotations::REBOOT_TERMINATION_GRACE_PERIOD);
        let bound = match annotated {
            Some(text) => Some(parse_grace(text).ok_or_else(|| {
                format!(
                    "{} {text:?} is not a duration; draining without a bound",
                    labels::annotations::REBOOT_TERMINATION_GRACE_PERIOD
                )
            }))
            .transpose()
            .unwrap_or_else(|e| {
                tracing::warn!(controller = CONTROLLER, NodeClaim = %t.claim, "{e}");
                None
            }),
            None => command.repair.as_ref().and_then(|r| r.termination_grace_period_seconds).map(Duration::from_secs),
        };
        Ok(RebootFlight {
            target: t.clone(),
            command: command.clone(),
            deadline: bound.map(|b| now + chrono_duration(b)),
        })
    }

    /// Reboots being prepared: evicts the node's pods (PDBs honoured) until none is left or the deadline has
    /// passed (the rest are deleted), then reboots.
    pub(super) async fn advance_reboots(&self, inner: &mut Inner, report: &mut StepReport) {
        let now = self.ctx.clock.now();
        let mut keep = Vec::new();
        for flight in std::mem::take(&mut inner.reboots) {
            let node = &flight.target.node;
            let pods: Vec<Arc<CompactPod>> = self
                .ctx
                .state
                .pods_on_node(node)
                .into_iter()
                .filter(|p| {
                    !is_daemon_set_pod(p)
                        && !karpenter_disruption::pods::is_static(p)
                        && !karpenter_disruption::pods::tolerates_disrupted_taint(p)
                })
                .collect();
            let forceful = flight.deadline.is_some_and(|d| now >= d);
            for pod in pods.iter().filter(|p| p.meta().deletion_timestamp.is_none() || forceful) {
                let (ns, name) = (pod.metadata.namespace.as_deref().unwrap_or("default"), pod.name_any());
                if forceful {
                    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(self.ctx.client.clone(), ns);
                    let dp = kube::api::DeleteParams { grace_period_seconds: Some(1), ..Default::default() };
                    if let Err(e) = api.delete(&name, &dp).await
                        && !is_not_found(&e)
                    {
                        report.errors.push(format!("deleting pod {ns}/{name} before a reboot: {e}"));
                    }
                    continue;
                }
                match crate::eviction::evict_uid(&self.ctx.client, ns, &name, pod.metadata.uid.as_deref()).await {
                    Ok(outcome) => {
                        self.ctx.metrics.pods_eviction_requests(&outcome.code().to_string()).inc();
                    }
                    Err(e) => report.errors.push(format!("evicting {ns}/{name} before a reboot: {e}")),
                }
            }
            if !pods.is_empty() && !forceful {
                keep.push(flight);
                continue;
            }
            if !pods.is_empty() && pods.iter().any(|p| p.meta().deletion_timestamp.is_none()) {
                // Deleted this step: reboot once they are gone.
                keep.push(flight);
                continue;
            }
            lock(&self.repair).rebooting.remove(node);
            if let Err(e) = self.reboot(&flight.target, &flight.command).await {
                report.errors.push(format!("rebooting {node}: {e}"));
            }
        }
        inner.reboots = keep;
    }

    /// The reboot itself: the node's boot id recorded on the NodeClaim before the provider is asked, so a
    /// restarted controller sees a reboot under way (or done) and never issues it twice. A provider that cannot
    /// reboot (`NotImplemented`) makes repair replace from now on; the marks are taken back so the next pass does.
    async fn reboot(&self, t: &Target, command: &Command) -> Result<(), String> {
        let claims = self.claims();
        let boot = self.ctx.state.get_shared::<Node>(&t.node).and_then(|n| boot_id(&n)).unwrap_or_default();
        let patch = json!({"metadata": {"annotations": {labels::annotations::REBOOT_PRE_BOOT_ID: boot}}});
        let written =
            claims.patch(&t.claim, &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(|e| e.to_string())?;
        self.ctx.state.apply(written.clone());
        match self.ctx.cloud.reboot(&written).await {
            Ok(()) => {
                self.ctx.metrics.voluntary_disruption_decisions("reboot", &reason_label(command), "").inc();
                self.event_on(t, reasons::DISRUPTION_TERMINATING, format!("Rebooting Node: {}", command.explanation))
                    .await;
                tracing::info!(controller = CONTROLLER, NodeClaim = %t.claim, Node = %t.node, "rebooting unhealthy node");
                Ok(())
            }
            Err(e) => {
                if e.kind() == karpenter_cloudprovider::ErrorKind::NotImplemented {
                    tracing::info!(controller = CONTROLLER, NodeClaim = %t.claim, provider = self.ctx.cloud.name(),
                        "the provider cannot reboot; node repair replaces instead");
                    lock(&self.repair).reboot_unsupported = true;
                }
                self.clear_reboot(&t.claim).await.map_err(|e| e.to_string())?;
                if let Err(e) = self.untaint(&t.node).await {
                    tracing::warn!(controller = CONTROLLER, Node = %t.node, error = %e, "removing the disrupted taint");
                }
                Err(e.to_string())
            }
        }
    }

    /// Removes a reboot's marks from a NodeClaim: the boot-id annotation and `Rebooting` (set `False`,
    /// `RebootCompleted`, when it was there).
    async fn clear_reboot(&self, claim: &str) -> Result<(), kube::Error> {
        let claims = self.claims();
        let current = match claims.get(claim).await {
            Ok(c) => c,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut conditions = current.conditions().to_vec();
        let had = conditions.iter().any(|c| c.type_ == cond::REBOOTING && c.status == ConditionStatus::True);
        let mut written = current.clone();
        if had {
            set_condition(
                &mut conditions,
                cond::REBOOTING,
                ConditionStatus::False,
                "RebootCompleted",
                "",
                current.metadata.generation,
                self.ctx.clock.now(),
            );
            written = crate::kube_util::patch_claim_conditions(&claims, &current, &conditions).await?;
        }
        if written.annotations().contains_key(labels::annotations::REBOOT_PRE_BOOT_ID) {
            let patch = json!({"metadata": {"annotations": {labels::annotations::REBOOT_PRE_BOOT_ID: null}}});
            written = claims.patch(claim, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        self.ctx.state.apply(written);
        Ok(())
    }

    /// Ends the reboots that are over: the marks and the taint go when the node came back with a new boot id;
    /// one that came back still unhealthy (its condition matching past its toleration, counted from the reboot
    /// request too), or did not come back healthy within [`REBOOT_TIMEOUT`], is replaced by a later pass.
    pub(super) async fn finish_reboots(&self, report: &mut StepReport) {
        let Some(policies) = &self.repair_policies else { return };
        let now = self.ctx.clock.now();
        for claim in self.ctx.state.list_shared::<NodeClaim>() {
            let Some(before) = claim.annotations().get(labels::annotations::REBOOT_PRE_BOOT_ID) else { continue };
            let Some(node) = claim.node_name().and_then(|n| self.ctx.state.get_shared::<Node>(n)) else { continue };
            let rebooted = boot_id(&node).is_some_and(|b| &b != before);
            let matched =
                node.status.as_ref().and_then(|s| s.conditions.as_deref()).and_then(|c| policies.assess(c, now));
            let healthy = matched.is_none();
            let requested = claim
                .conditions()
                .iter()
                .find(|c| c.type_ == cond::REBOOTING)
                .and_then(|c| karpenter_api::time::parse_rfc3339(&c.last_transition_time));
            // Back with its condition still matching: broken only once the policy's toleration (at most
            // REBOOT_TIMEOUT) has passed since the reboot was requested too. Until then the node may still be
            // starting up and about to report itself healthy: a condition nothing has rewritten yet keeps its
            // pre-reboot transition time, so it would look broken the moment the new boot id shows.
            let still_broken = matched.is_some_and(|m| {
                let settle = chrono_duration(m.toleration.min(REBOOT_TIMEOUT));
                m.is_eligible(now) && requested.is_none_or(|t| now - t >= settle)
            });
            let timed_out = requested.is_none_or(|t| now - t >= chrono_duration(REBOOT_TIMEOUT));
            let failed = (rebooted && still_broken) || (!healthy && timed_out);
            if failed {
                tracing::info!(controller = CONTROLLER, NodeClaim = %claim.name_any(), rebooted,
                    "the reboot did not repair the node; replacing it");
                lock(&self.repair).escalated.insert(claim.name_any());
            }
            if (rebooted && healthy) || failed {
                let cleared = match self.clear_reboot(&claim.name_any()).await {
                    Ok(()) => self.untaint(&node.name_any()).await,
                    Err(e) => Err(e),
                };
                match cleared {
                    Ok(()) => tracing::info!(controller = CONTROLLER, NodeClaim = %claim.name_any(),
                        "node came back healthy after its reboot"),
                    Err(e) => report.errors.push(format!("clearing the reboot of {}: {e}", claim.name_any())),
                }
            }
        }
    }
}
