//! NodePool registration health (`nodepool.registrationhealth`):
//! `NodeRegistrationHealthy`, informational (not part of `Ready`).
//!
//! [`RegistrationTracker`] keeps the last [`BUFFER_SIZE`] launch/registration outcomes of each pool. The
//! run loop feeds it from a NodeClaim watch ([`RegistrationTracker::observe`]): a claim seen `Registered=True`
//! is a success; a claim going away (deleted or being deleted) that had started launching (`Launched` present)
//! but never registered is a failure, with the `Launched` reason when the launch itself failed and
//! `RegistrationFailed` otherwise (the lifecycle's launch and registration timeouts delete such claims). Each
//! claim counts once. [`RegistrationTracker::record`] takes outcomes directly. Its verdict: no outcome yet ⇒ none (the condition stays `Unknown`); at least
//! half failures ⇒ `False` with the latest failure's reason (`RegistrationFailed` when it has none); else `True`.
//!
//! [`RegistrationHealth::reconcile`] writes the verdict, and resets it — buffer cleared, condition
//! `Unknown(AwaitingReconciliation)` — when the NodePool's generation differs from the condition's
//! observedGeneration or the node class's generation differs from `status.nodeClassObservedGeneration` (a
//! changed pool or class deserves a fresh verdict), recording the class generation.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use karpenter_api::condition::ConditionStatus;
use karpenter_api::nodeclaim::conditions as cond;
use karpenter_api::{NodeClaim, NodePool};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::nodeclass::{NodeClassResolver, NodeClassState};
use super::{Watches, patch_pool_status, run_pool_controller, set_pool_condition};
use crate::context::ControllerContext;
use crate::kube_util::{ReconcileError, Requeue};
use crate::state::ClusterState;
use crate::termination::to_action;

/// The controller name in logs.
pub const CONTROLLER: &str = "nodepool.registrationhealth";
/// Outcomes remembered per pool.
pub const BUFFER_SIZE: usize = 4;
/// Reason of a failure verdict without a more specific one.
pub const REGISTRATION_FAILED: &str = "RegistrationFailed";
/// Reason of the condition after a reset.
pub const AWAITING_RECONCILIATION: &str = "AwaitingReconciliation";

/// One launch/registration outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A NodeClaim registered.
    Success,
    /// A launch or registration failed, with the reason (e.g. the `Launched` condition's).
    Failure(String),
}

/// The per-pool outcome buffers (see the module docs). Share it behind an `Arc`.
#[derive(Debug, Default)]
pub struct RegistrationTracker {
    pools: Mutex<BTreeMap<String, VecDeque<Outcome>>>,
    /// NodeClaim uids whose outcome was recorded (forgotten when the claim is gone).
    counted: Mutex<BTreeSet<String>>,
}

impl RegistrationTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an outcome for `pool`, keeping the last [`BUFFER_SIZE`].
    pub fn record(&self, pool: &str, outcome: Outcome) {
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        let buffer = pools.entry(pool.to_owned()).or_default();
        buffer.push_back(outcome);
        while buffer.len() > BUFFER_SIZE {
            buffer.pop_front();
        }
    }

    /// Records the outcome `claim` shows, if any and not recorded yet; `gone` when the claim was removed. Returns
    /// the outcome recorded.
    pub fn observe(&self, claim: &NodeClaim, gone: bool) -> Option<Outcome> {
        let uid = claim.metadata.uid.clone()?;
        let pool = claim.node_pool_name()?.to_owned();
        let deleting = gone || claim.metadata.deletion_timestamp.is_some();
        let outcome =
            if claim.conditions().iter().any(|c| c.type_ == cond::REGISTERED && c.status == ConditionStatus::True) {
                Some(Outcome::Success)
            } else if deleting {
                claim.conditions().iter().find(|c| c.type_ == cond::LAUNCHED).map(|launched| {
                    if launched.status == ConditionStatus::True || launched.reason.is_empty() {
                        Outcome::Failure(REGISTRATION_FAILED.to_owned())
                    } else {
                        Outcome::Failure(launched.reason.clone())
                    }
                })
            } else {
                None
            };
        let mut counted = self.counted.lock().unwrap_or_else(PoisonError::into_inner);
        let first = outcome.is_some() && counted.insert(uid.clone());
        if gone {
            counted.remove(&uid);
        }
        drop(counted);
        let outcome = outcome.filter(|_| first)?;
        self.record(&pool, outcome.clone());
        Some(outcome)
    }

    /// Forgets `pool`'s outcomes.
    pub fn reset(&self, pool: &str) {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner).remove(pool);
    }

    /// The verdict for `pool`: `None` without outcomes, else the condition status and reason.
    pub fn verdict(&self, pool: &str) -> Option<(ConditionStatus, String)> {
        let pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        let buffer = pools.get(pool).filter(|b| !b.is_empty())?;
        let failures: Vec<&String> = buffer
            .iter()
            .filter_map(|o| match o {
                Outcome::Failure(r) => Some(r),
                Outcome::Success => None,
            })
            .collect();
        if failures.len() * 2 >= buffer.len() {
            let reason =
                failures.last().filter(|r| !r.is_empty()).map_or(REGISTRATION_FAILED.to_owned(), |r| (*r).clone());
            Some((ConditionStatus::False, reason))
        } else {
            Some((ConditionStatus::True, cond::NODE_REGISTRATION_HEALTHY.to_owned()))
        }
    }
}

/// The registration-health controller (see the module docs).
pub struct RegistrationHealth {
    ctx: ControllerContext,
    tracker: Arc<RegistrationTracker>,
    resolver: NodeClassResolver,
}

impl std::fmt::Debug for RegistrationHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistrationHealth").field("tracker", &self.tracker).finish_non_exhaustive()
    }
}

impl RegistrationHealth {
    pub fn new(ctx: &ControllerContext, tracker: Arc<RegistrationTracker>, resolver: NodeClassResolver) -> Self {
        Self { ctx: ctx.clone(), tracker, resolver }
    }

    /// The tracker outcomes are recorded in.
    pub fn tracker(&self) -> &Arc<RegistrationTracker> {
        &self.tracker
    }

    /// One pass over the NodePool `name`.
    pub async fn reconcile(&self, name: &str) -> Result<Requeue, ReconcileError> {
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let Some(pool) = api.get_opt(name).await? else {
            self.tracker.reset(name);
            return Ok(None);
        };
        self.reconcile_pool(&pool).await
    }

    /// [`Self::reconcile`] on a pool already read (the run loop's: the cluster state's copy).
    pub async fn reconcile_pool(&self, pool: &NodePool) -> Result<Requeue, ReconcileError> {
        let api: Api<NodePool> = Api::all(self.ctx.client.clone());
        let name = pool.name_any();
        let name = name.as_str();
        let class_generation =
            match self.resolver.fetch(&self.ctx.client, &pool.spec.template.spec.node_class_ref).await? {
                Some(NodeClassState::Present { generation, .. }) => generation,
                // Readiness reports a missing or unreadable class; there is nothing to judge registration against.
                _ => return Ok(None),
            };
        let now = self.ctx.clock.now();
        let generation = pool.metadata.generation;
        let mut status = super::status_of(pool);
        let observed = status.conditions.iter().find(|c| c.type_ == cond::NODE_REGISTRATION_HEALTHY);
        let stale = observed.is_none_or(|c| c.observed_generation != generation)
            || status.node_class_observed_generation != class_generation;
        if stale {
            self.tracker.reset(name);
            set_pool_condition(
                &mut status.conditions,
                cond::NODE_REGISTRATION_HEALTHY,
                ConditionStatus::Unknown,
                AWAITING_RECONCILIATION,
                "",
                now,
                generation,
            );
            status.node_class_observed_generation = class_generation;
        } else if let Some((verdict, reason)) = self.tracker.verdict(name) {
            let message = if verdict == ConditionStatus::False {
                "at least half of the recent launches or registrations of this NodePool failed"
            } else {
                ""
            };
            set_pool_condition(
                &mut status.conditions,
                cond::NODE_REGISTRATION_HEALTHY,
                verdict,
                &reason,
                message,
                now,
                generation,
            );
        }
        let before = super::status_of(pool);
        if status.conditions != before.conditions
            || status.node_class_observed_generation != before.node_class_observed_generation
        {
            patch_pool_status(
                &api,
                pool,
                json!({"conditions": status.conditions, "nodeClassObservedGeneration": status.node_class_observed_generation}),
            )
            .await?;
        }
        Ok(None)
    }

    /// Records what `claim` shows and, when that is a new outcome, writes the pool's verdict at once (a conflict
    /// is retried once; the pool's next event retries anything else).
    /// Writes `pool`'s verdict, retrying once on a conflict.
    async fn write_verdict(&self, pool: &str) {
        for _ in 0..2 {
            match self.reconcile(pool).await {
                Ok(_) => return,
                Err(e) if e.is_conflict() => continue,
                Err(e) => {
                    tracing::warn!(controller = CONTROLLER, NodePool = %pool, error = %e, "writing registration health");
                    return;
                }
            }
        }
    }

    /// Feeds the tracker from the state's NodeClaims until `shutdown` (see the module docs). A claim the
    /// state's reflector store no longer holds was deleted.
    ///
    /// Reading the claims never waits on a verdict's write: the pools with a new outcome are collected and
    /// written by a second loop, each pool once however many of its claims registered meanwhile. A loop that
    /// wrote (three API calls) before reading the next claim fell behind a scale-out of thousands of claims, and
    /// every claim version queued behind it stayed in memory (~25 KB per node at 1,000 nodes).
    pub async fn observe_claims(&self, state: &ClusterState, shutdown: CancellationToken) {
        let (store, mut claims) = state.controller_source::<NodeClaim>();
        let changed: Mutex<BTreeSet<String>> = Mutex::default();
        let wake = tokio::sync::Notify::new();
        let read = async {
            while let Some(claim) = claims.next().await {
                let gone = store.get(&ObjectRef::from_obj(claim.as_ref())).is_none();
                if self.tracker.observe(&claim, gone).is_some()
                    && let Some(pool) = claim.node_pool_name()
                {
                    changed.lock().unwrap_or_else(PoisonError::into_inner).insert(pool.to_owned());
                    wake.notify_one();
                }
            }
        };
        let write = async {
            loop {
                wake.notified().await;
                let pools = std::mem::take(&mut *changed.lock().unwrap_or_else(PoisonError::into_inner));
                for pool in pools {
                    self.write_verdict(&pool).await;
                }
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = read => {}
            () = write => {}
        }
    }

    /// Follows the state's NodePools and their NodeClaims (which produce the outcomes:
    /// [`RegistrationHealth::observe_claims`], which also writes a pool's verdict when it changes) until
    /// `shutdown`.
    pub async fn run(self: Arc<Self>, state: ClusterState, shutdown: CancellationToken) {
        let observer = {
            let this = self.clone();
            let shutdown = shutdown.clone();
            let state = state.clone();
            tokio::spawn(async move { this.observe_claims(&state, shutdown).await })
        };
        // Status changes too: readiness writes NodeClassReady when the node class appears or changes, and that is
        // this controller's cue to look at the class (its generation resets the verdict).
        let watches = Watches { status_changes: true, ..Watches::default() };
        run_pool_controller(&state, self, watches, shutdown, |pool: Arc<NodePool>, ctx: Arc<Self>| async move {
            Ok::<Action, ReconcileError>(to_action(ctx.reconcile_pool(&pool).await?))
        })
        .await;
        observer.abort();
    }
}

impl crate::kube_util::ErrorPolicyContext for RegistrationHealth {
    fn controller_name(&self) -> &'static str {
        CONTROLLER
    }
    fn metrics(&self) -> Option<&crate::metrics::Metrics> {
        Some(self.ctx.metrics().as_ref())
    }
}
