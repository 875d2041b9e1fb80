//! StaticDrift: per static NodePool, replace up to `min(budget, drifted)` drifted nodes (within `limits.nodes`),
//! each with one NodeClaim from the pool's template. Eventual: its commands start at once.

use std::collections::BTreeMap;

use karpenter_api::nodepool::DisruptionReason;
use karpenter_scheduler::decision::NodeClaimPlan;

use super::{DisruptionMethod, PassState, drift};
use crate::budget::Remaining;
use crate::candidate::Candidate;
use crate::command::{Command, Method, Reason};
use crate::engine::Engine;
use crate::validation::failure::ValidationFailure;

pub(crate) struct StaticDrift;

impl DisruptionMethod for StaticDrift {
    fn method(&self) -> Method {
        Method::StaticDrift
    }

    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Drifted
    }

    fn is_graceful(&self) -> bool {
        false
    }

    fn evaluate<'a>(&self, pass: &mut PassState<'_, 'a>, _closed: bool) -> Vec<Command> {
        // Nothing is simulated, so the commands are computed whether the pass takes them or not.
        static_drift(pass.engine, pass.cands, &mut |node, m, r| pass.results.record(node, m, r))
    }

    fn still_candidate(&self, engine: &Engine<'_>, c: &Candidate<'_>, command: &Command) -> Result<(), Reason> {
        drift::Drift.still_candidate(engine, c, command)
    }

    /// Eventual commands start without the re-check ([`crate::validation::next_step`]); asked anyway, they stand.
    fn recheck(
        &self,
        _engine: &Engine<'_>,
        _kept: &[&Candidate<'_>],
        command: &Command,
    ) -> Result<Command, ValidationFailure> {
        Ok(command.clone())
    }
}

/// The static pools' replacement commands, with a result recorded for every drifted candidate of a static pool.
fn static_drift<'a>(
    engine: &Engine<'a>,
    cands: &[Candidate<'a>],
    record: &mut impl FnMut(&str, Method, Result<String, Reason>),
) -> Vec<Command> {
    let mut by_pool: BTreeMap<&str, Vec<&Candidate<'a>>> = BTreeMap::new();
    for c in cands.iter().filter(|c| c.drifted_since.is_some() && c.pool.node_pool.is_static()) {
        by_pool.entry(c.pool_name).or_default().push(c);
    }
    let snapshot = engine.cluster.snapshot;
    let mut topology = engine.topology.clone();
    let mut out = Vec::new();
    for (pool_name, mut list) in by_pool {
        list.sort_by(|a, b| {
            a.drifted_since.flatten().cmp(&b.drifted_since.flatten()).then(a.node.name.cmp(&b.node.name))
        });
        let Some(pool) = engine.cluster.pools.get(pool_name).map(|p| p.node_pool) else { continue };
        let replicas = pool.spec.replicas.unwrap_or(0).max(0) as u64;
        let claims: Vec<_> =
            snapshot.node_claims.iter().filter(|c| c.node_pool.as_deref() == Some(pool_name)).collect();
        let running = claims.iter().filter(|c| !c.marked_for_deletion).count() as u64;
        let pending_disruption = claims.iter().filter(|c| c.marked_for_deletion).count() as u64;
        let mut n = engine.budgets.allowed(pool_name, Method::StaticDrift.reason()) as usize;
        let mut wait = None;
        if running + pending_disruption > replicas && running > replicas {
            wait = Some(format!("scale-down in progress ({running} running, {replicas} replicas)"));
            n = 0;
        }
        // Each command launches its replacement before its node goes, so it needs room under `limits.nodes`
        // (every NodeClaim of the pool counts, deleting ones too); a node without room waits, as upstream's
        // reservation against the limit grants no more commands than that.
        let mut room = usize::MAX;
        let mut full = String::new();
        if let Some(limit) = pool.spec.limits.get(karpenter_api::nodepool::NODES_LIMIT) {
            let limit: u64 = limit.0.parse().unwrap_or(0);
            room = limit.saturating_sub(claims.len() as u64) as usize;
            full = format!("no room for a replacement under limits.nodes {limit} ({} NodeClaims)", claims.len());
        }
        let mut taken = 0;
        for c in list {
            if taken < n {
                if let Some(r) = topology.block(c) {
                    record(&c.node.name, Method::StaticDrift, Err(r));
                    continue;
                }
                if taken >= room {
                    record(&c.node.name, Method::StaticDrift, Err(Reason::StaticDriftWaiting { detail: full.clone() }));
                    continue;
                }
                let plan = match NodeClaimPlan::from_template(pool, format!("{pool_name}-replacement-{}", taken + 1)) {
                    Ok(plan) => plan,
                    Err(e) => {
                        // Validation rejects such a pool; nothing to replace with until it is fixed.
                        let detail = format!("NodePool {pool_name} has invalid requirements: {e}");
                        record(&c.node.name, Method::StaticDrift, Err(Reason::StaticDriftWaiting { detail }));
                        continue;
                    }
                };
                let cmd = Engine::command(Method::StaticDrift, &[c], vec![plan], "drifted (static pool)");
                record(&c.node.name, Method::StaticDrift, Ok(cmd.explanation.clone()));
                topology.take(c);
                taken += 1;
                out.push(cmd);
            } else if let Some(w) = &wait {
                record(&c.node.name, Method::StaticDrift, Err(Reason::StaticDriftWaiting { detail: w.clone() }));
            } else {
                let remaining = Remaining::default();
                if let Some(r) = engine.budget_block(c, Method::StaticDrift, &remaining) {
                    record(&c.node.name, Method::StaticDrift, Err(r));
                }
            }
        }
    }
    out
}
