//! Emptiness: every empty candidate its budget allows, in one command (deleted, nothing moves). Graceful: the
//! command waits for validation, which drops the candidates that no longer qualify one by one.

use karpenter_api::nodepool::DisruptionReason;

use super::{DisruptionMethod, PassState};
use crate::budget::Remaining;
use crate::candidate::{self, Candidate};
use crate::command::{Command, Method, Reason};
use crate::engine::Engine;
use crate::validation::failure::ValidationFailure;

pub(crate) struct Emptiness;

impl DisruptionMethod for Emptiness {
    fn method(&self) -> Method {
        Method::Emptiness
    }

    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Empty
    }

    fn is_graceful(&self) -> bool {
        true
    }

    fn consolidation_type(&self) -> &'static str {
        "empty"
    }

    fn evaluate<'a>(&self, pass: &mut PassState<'_, 'a>, _closed: bool) -> Vec<Command> {
        // Nothing is simulated, so the command is computed whether the pass takes it or not.
        emptiness(pass.engine, pass.cands, &mut |node, m, r| pass.results.record(node, m, r)).into_iter().collect()
    }

    fn still_candidate(&self, engine: &Engine<'_>, c: &Candidate<'_>, command: &Command) -> Result<(), Reason> {
        if !c.is_empty() {
            return Err(Reason::NothingToDo);
        }
        check(engine, c, &Remaining::new(&engine.budgets, command.reason))
    }

    fn drops_invalid_candidates(&self) -> bool {
        true
    }

    fn recheck(
        &self,
        _engine: &Engine<'_>,
        kept: &[&Candidate<'_>],
        _command: &Command,
    ) -> Result<Command, ValidationFailure> {
        Ok(Engine::command(Method::Emptiness, kept, Vec::new(), "empty"))
    }
}

/// Whether an empty candidate may be deleted: its pool consolidates and is not static, it hosts no CapacityBuffer,
/// it is consolidatable, no pod blocks it and its budget has room.
fn check(engine: &Engine<'_>, c: &Candidate<'_>, remaining: &Remaining) -> Result<(), Reason> {
    let pool = c.pool.node_pool;
    if pool.is_static() {
        return Err(Reason::StaticNodePool);
    }
    if pool.spec.disruption.consolidate_after.is_never() {
        return Err(Reason::ConsolidationDisabled);
    }
    if let Some(buffers) = engine.buffer_hosts.get(&c.node.name) {
        return Err(Reason::HostsCapacityBuffer { buffers: buffers.iter().cloned().collect() });
    }
    candidate::consolidatable(c.claim, pool, engine.cluster.now)?;
    if let Some(r) = c.pod_block_for(true) {
        return Err(r.clone());
    }
    if let Some(r) = engine.budget_block(c, Method::Emptiness, remaining) {
        return Err(r);
    }
    Ok(())
}

/// The emptiness command, if any, with a result recorded for every empty candidate.
fn emptiness<'a>(
    engine: &Engine<'a>,
    cands: &[Candidate<'a>],
    record: &mut impl FnMut(&str, Method, Result<String, Reason>),
) -> Option<Command> {
    let mut empties: Vec<&Candidate<'_>> = Vec::new();
    let remaining = Remaining::new(&engine.budgets, Method::Emptiness.reason());
    // In consolidation order, so that a pool's floor keeps the nodes a command would take last.
    let ordered = Engine::sorted(cands.iter().filter(|c| c.is_empty()));
    let mut taken: Vec<&Candidate<'_>> = Vec::new();
    for c in &ordered {
        let checked = check(engine, c, &remaining).and_then(|()| {
            let mut with = taken.clone();
            with.push(c);
            engine.floor_allows(&with, &[])
        });
        match checked {
            Ok(()) => {
                record(&c.node.name, Method::Emptiness, Ok("empty".into()));
                taken.push(c);
            }
            Err(r) => record(&c.node.name, Method::Emptiness, Err(r)),
        }
    }
    empties.extend(taken);
    let mut sorted: Vec<Candidate<'_>> = Engine::sorted(empties.iter().copied());
    let mut remaining = remaining;
    let mut topology = engine.topology.clone();
    sorted.retain(|c| topology.block(c).is_none() && remaining.take(c.pool_name) && topology.admit(c).is_ok());
    let refs: Vec<&Candidate<'_>> = sorted.iter().collect();
    (!refs.is_empty()).then(|| Engine::command(Method::Emptiness, &refs, Vec::new(), "empty"))
}
