//! The NodeClaim disruption-condition controller: `Drifted` and `Consolidatable`.
//!
//! [`NodeClaimDisruption::reconcile_once`] handles one NodeClaim and returns when to look again:
//!
//! - **Consolidatable**: removed when the NodePool is static, its `consolidateAfter` is `Never`, or the claim is
//!   not `Initialized`; otherwise the reference time is `status.lastPodEventTime`, else the `Initialized`
//!   transition; `Consolidatable=True` once `now ≥ reference + consolidateAfter`, else removed and requeued at
//!   exactly that time.
//! - **Drifted** (requeue 5 min): removed while not `Launched`. Checked in order: the NodePool hash
//!   (`NodePoolDrifted`; a hash-*version* mismatch is no drift: the claim's hash annotations are rewritten to
//!   the NodePool's), the requirements (`RequirementsDrifted`: the claim's labels must satisfy every NodePool
//!   requirement; widening never drifts), the instance type (`InstanceTypeNotFound`: for claims older than 1 h,
//!   at most every 30 min per claim, the claim's instance type is no longer offered or has no offering
//!   compatible with its labels), then the cloud provider's `is_drifted`. Removed when none applies.
//!
//! Claims without a NodePool, or being deleted, are left alone.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use karpenter_api::condition::ConditionStatus;
use karpenter_api::hash::{StaticDrift, node_pool_hash_annotations, node_pool_static_drift};
use karpenter_api::labels::{self, annotations};
use karpenter_api::nodeclaim::conditions::{self as cond, drift as cond_reasons};
use karpenter_api::scheduling::requirements_from;
use karpenter_api::time::{chrono_duration, from_k8s};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_cloudprovider::{CloudProvider, ErrorKind};
use karpenter_requirements::{NoKeys, Requirements};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::ControllerContext;
use crate::kube_util::{ReconcileError, Requeue, patch_claim_conditions};
use crate::metrics::runtime::queue::ControllerQueue;
use crate::nodepool::hash::version_rewrite;
use crate::termination::{error_policy, to_action};
use karpenter_api::condition::{remove_condition, set_condition};

/// The controller name in logs.
pub const CONTROLLER: &str = "nodeclaim.disruption";
/// How often drift is re-checked.
pub const DRIFT_REQUEUE: Duration = Duration::from_secs(5 * 60);
/// Claims younger than this are not checked for a vanished instance type.
pub const INSTANCE_TYPE_CHECK_MIN_AGE: Duration = Duration::from_secs(60 * 60);
/// A claim's instance type is checked at most this often.
pub const INSTANCE_TYPE_CHECK_INTERVAL: Duration = Duration::from_secs(30 * 60);

/// The condition controller (see the module docs).
pub struct NodeClaimDisruption {
    ctx: ControllerContext,
    /// NodeClaim uid → when its instance type was last found offered.
    instance_type_checked: Mutex<BTreeMap<String, DateTime<Utc>>>,
}

impl std::fmt::Debug for NodeClaimDisruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClaimDisruption").finish_non_exhaustive()
    }
}

fn creation(claim: &NodeClaim) -> Option<DateTime<Utc>> {
    claim.metadata.creation_timestamp.as_ref().and_then(from_k8s)
}

/// Whether the claim's labels no longer satisfy the NodePool's requirements (`RequirementsDrifted`).
pub fn requirements_drifted(pool: &NodePool, claim: &NodeClaim) -> bool {
    let Ok(pool_reqs) = requirements_from(&pool.spec.template.spec.requirements) else { return false };
    let claim_reqs = Requirements::from_labels(claim.labels().iter());
    claim_reqs.compatible(&pool_reqs, &NoKeys).is_err()
}

impl NodeClaimDisruption {
    /// A controller writing through the context's client; NodePools are read from its cluster state.
    pub fn new(ctx: &ControllerContext) -> Self {
        Self { ctx: ctx.clone(), instance_type_checked: Mutex::default() }
    }

    fn claims(&self) -> Api<NodeClaim> {
        Api::all(self.ctx.client.clone())
    }

    /// `Some(reason)` when the claim has drifted. May rewrite the claim's hash annotations (version mismatch, with
    /// the hash controller's rule); returns the claim as stored afterwards.
    async fn drift(
        &self,
        pool: &NodePool,
        mut claim: NodeClaim,
    ) -> Result<(NodeClaim, Option<String>), ReconcileError> {
        if node_pool_static_drift(pool, &claim) == StaticDrift::VersionMismatch {
            // The pool's annotations when it has them (the hash controller's), else computed now.
            let pool_annotations = pool.annotations();
            let (hash, version) = match (
                pool_annotations.get(annotations::NODE_POOL_HASH),
                pool_annotations.get(annotations::NODE_POOL_HASH_VERSION),
            ) {
                (Some(h), Some(v)) => (h.clone(), v.clone()),
                _ => {
                    let [(_, h), (_, v)] = node_pool_hash_annotations(pool);
                    (h, v)
                }
            };
            let values = version_rewrite(&claim, &hash, &version);
            let patch = json!({"metadata": {"resourceVersion": claim.resource_version(), "annotations": values}});
            let written =
                self.claims().patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
            tracing::info!(controller = CONTROLLER, NodeClaim = %claim.name_any(),
                "nodepool hash version changed, rewrote the nodeclaim's hash annotations");
            self.ctx.state.apply(written.clone());
            claim = written;
        }
        // After a rewrite a non-drifted claim carries the pool's hash; an already drifted one keeps its old hash
        // and so stays drifted.
        if node_pool_static_drift(pool, &claim) == StaticDrift::Drifted {
            return Ok((claim, Some(cond_reasons::NODE_POOL_DRIFTED.to_owned())));
        }
        if requirements_drifted(pool, &claim) {
            return Ok((claim, Some(cond_reasons::REQUIREMENTS_DRIFTED.to_owned())));
        }
        if let Some(r) = self.instance_type_drift(pool, &claim).await? {
            return Ok((claim, Some(r)));
        }
        match self.ctx.cloud.is_drifted(&claim).await {
            Ok(Some(reason)) => Ok((claim, Some(reason.0))),
            Ok(None) => Ok((claim, None)),
            Err(e) if e.kind() == ErrorKind::NodeClaimNotFound => Ok((claim, None)),
            Err(e) => Err(e.into()),
        }
    }

    async fn instance_type_drift(&self, pool: &NodePool, claim: &NodeClaim) -> Result<Option<String>, ReconcileError> {
        let now = self.ctx.clock.now();
        let old_enough = creation(claim).is_some_and(|c| now - c >= chrono_duration(INSTANCE_TYPE_CHECK_MIN_AGE));
        if !old_enough {
            return Ok(None);
        }
        let uid = claim.metadata.uid.clone().unwrap_or_else(|| claim.name_any());
        let recent = {
            let checked = self.instance_type_checked.lock().unwrap_or_else(|p| p.into_inner());
            checked.get(&uid).is_some_and(|at| now - *at < chrono_duration(INSTANCE_TYPE_CHECK_INTERVAL))
        };
        if recent {
            return Ok(None);
        }
        let Some(name) = claim.labels().get(labels::INSTANCE_TYPE) else { return Ok(None) };
        let its = self.ctx.cloud.instance_types(pool).await?;
        let claim_reqs = Requirements::from_labels(
            claim.labels().iter().filter(|(k, _)| k.as_str() == labels::ZONE || k.as_str() == labels::CAPACITY_TYPE),
        );
        let mut reserved_as_on_demand = claim_reqs.clone();
        if claim.labels().get(labels::CAPACITY_TYPE).map(String::as_str) == Some(labels::CAPACITY_TYPE_RESERVED) {
            reserved_as_on_demand.add(karpenter_requirements::Requirement::in_values(
                labels::CAPACITY_TYPE,
                [labels::CAPACITY_TYPE_ON_DEMAND],
            ));
        }
        let found = its.iter().find(|it| &it.name == name).is_some_and(|it| {
            it.offerings.iter().any(|o| {
                o.requirements.intersects_ok(&claim_reqs) || o.requirements.intersects_ok(&reserved_as_on_demand)
            })
        });
        if found {
            self.instance_type_checked.lock().unwrap_or_else(|p| p.into_inner()).insert(uid, now);
            Ok(None)
        } else {
            Ok(Some(cond_reasons::INSTANCE_TYPE_NOT_FOUND.to_owned()))
        }
    }

    /// Sets both conditions on the NodeClaim `name` (see the module docs) and returns when to look again.
    pub async fn reconcile_once(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let Some(claim) = self.claims().get_opt(name).await? else { return Ok(None) };
        self.reconcile_claim(claim).await
    }

    /// [`Self::reconcile_once`] on a claim already read (the run loop's: the cluster state's copy; a write from
    /// a stale copy fails on its resourceVersion and is retried).
    pub async fn reconcile_claim(&self, claim: NodeClaim) -> Result<Requeue, ReconcileError> {
        let name = claim.name_any();
        let name = name.as_str();
        if claim.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let Some(pool_name) = claim.node_pool_name().map(str::to_owned) else { return Ok(None) };
        let pool = match self.ctx.state.get::<NodePool>(&pool_name) {
            Some(p) => p,
            None => match Api::<NodePool>::all(self.ctx.client.clone()).get_opt(&pool_name).await? {
                Some(p) => p,
                None => return Ok(None),
            },
        };
        let now = self.ctx.clock.now();
        let mut requeue: Option<Duration> = None;
        let mut earliest = |d: Duration| requeue = Some(requeue.map_or(d, |r: Duration| r.min(d)));

        // Drifted.
        let (claim, drifted) = if claim.is_launched() { self.drift(&pool, claim).await? } else { (claim, None) };
        if claim.is_launched() {
            earliest(DRIFT_REQUEUE);
        }
        let mut conditions = claim.conditions().to_vec();
        let generation = claim.metadata.generation;
        let mut changed = match &drifted {
            Some(reason) => {
                set_condition(&mut conditions, cond::DRIFTED, ConditionStatus::True, reason, "", generation, now)
            }
            None => remove_condition(&mut conditions, cond::DRIFTED),
        };
        if changed && let Some(r) = &drifted {
            tracing::info!(controller = CONTROLLER, NodeClaim = %name, reason = %r, "nodeclaim drifted");
        }

        // Consolidatable.
        // The rule simulate's report reads too (karpenter_disruption::candidate::consolidatable_at).
        let consolidatable = match karpenter_disruption::candidate::consolidatable_at(&claim, &pool) {
            Some(due) if now >= due => true,
            Some(due) => {
                earliest((due - now).to_std().unwrap_or(Duration::ZERO));
                false
            }
            None => false,
        };
        changed |= if consolidatable {
            let (status, reason) = (ConditionStatus::True, cond::CONSOLIDATABLE);
            set_condition(&mut conditions, cond::CONSOLIDATABLE, status, reason, "", generation, now)
        } else {
            remove_condition(&mut conditions, cond::CONSOLIDATABLE)
        };
        if changed {
            let written = patch_claim_conditions(&self.claims(), &claim, &conditions).await?;
            self.ctx.state.apply(written);
        }
        Ok(requeue)
    }

    /// Watches NodeClaims (and NodePools, mapped to their NodeClaims) until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        // The cluster state's watches, not watches of our own (ClusterState::controller_source).
        let (claims, claim_events) = self.ctx.state.controller_source::<NodeClaim>();
        let (_, pool_events) = self.ctx.state.controller_source::<NodePool>();
        let pool_claims = claims.clone();
        // Only a pool's spec and annotations bear on its claims' conditions: its status writes (the counter's,
        // on every NodeClaim event) must not re-evaluate every claim of the pool.
        let queue = ControllerQueue::new(crate::kube_util::ErrorPolicyContext::reconciles(&*self, 0));
        let controller = Controller::for_shared_stream(queue.objects(claim_events), claims)
            .watches_shared_stream(
                crate::nodepool::spec_changes(pool_events),
                queue.mapped(move |pool: Arc<NodePool>| {
                    let name = pool.name_any();
                    pool_claims
                        .state()
                        .iter()
                        .filter(|c| c.node_pool_name() == Some(name.as_str()))
                        .map(|c| ObjectRef::new(&c.name_any()))
                        .collect::<Vec<_>>()
                }),
            )
            .graceful_shutdown_on(shutdown.cancelled_owned());
        queue
            .run(
                controller,
                |claim: Arc<NodeClaim>, ctx: Arc<Self>| async move {
                    Ok::<_, ReconcileError>(to_action(ctx.reconcile_claim(NodeClaim::clone(&claim)).await?))
                },
                error_policy,
                self.clone(),
            )
            .await;
    }
}

impl crate::kube_util::ErrorPolicyContext for NodeClaimDisruption {
    fn controller_name(&self) -> &'static str {
        CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(self.ctx.metrics().as_ref())
    }
}
