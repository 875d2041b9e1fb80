//! Drift: the first drifted candidate (of a pool that is not static), oldest-drifted with empties first, that has
//! budget and whose pods all fit gives the command. Eventual: the command starts at once.

use karpenter_api::nodepool::DisruptionReason;

use super::{DisruptionMethod, PassState, repair};
use crate::budget::Remaining;
use crate::candidate::Candidate;
use crate::command::{Command, Method, Reason};
use crate::engine::Engine;
use crate::validation::failure::{FailureKind, ValidationFailure, fail};
use crate::{DisruptionOptions, may_simulate};

pub(crate) struct Drift;

impl DisruptionMethod for Drift {
    fn method(&self) -> Method {
        Method::Drift
    }

    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Drifted
    }

    fn is_graceful(&self) -> bool {
        false
    }

    fn evaluate<'a>(&self, pass: &mut PassState<'_, 'a>, closed: bool) -> Vec<Command> {
        let options = pass.engine.cluster.options;
        drift(pass.engine, pass.cands, options, closed, &mut |node, m, r| pass.results.record(node, m, r))
            .into_iter()
            .collect()
    }

    fn still_candidate(&self, _engine: &Engine<'_>, c: &Candidate<'_>, _command: &Command) -> Result<(), Reason> {
        if c.drifted_since.is_none() {
            return Err(Reason::NothingToDo);
        }
        c.pod_block_for(false).map_or(Ok(()), |b| Err(b.clone()))
    }

    /// Drift starts without the re-check ([`crate::validation::next_step`]); asked anyway, its pods must still fit.
    fn recheck(
        &self,
        engine: &Engine<'_>,
        kept: &[&Candidate<'_>],
        command: &Command,
    ) -> Result<Command, ValidationFailure> {
        engine.simulate(kept, false).map_err(|e| fail(FailureKind::Scheduling, e.to_string()))?;
        Ok(command.clone())
    }
}

/// The drift command, if any. With `every_verdict` every drifted candidate is simulated (for its verdict);
/// without, the simulations stop at the first command (or are all skipped when the pass is `closed` to drift).
/// Once the options' simulation budget is spent the rest are not simulated ([`Reason::PassTimeSpent`]).
fn drift<'a>(
    engine: &Engine<'a>,
    cands: &[Candidate<'a>],
    options: &DisruptionOptions,
    closed: bool,
    record: &mut impl FnMut(&str, Method, Result<String, Reason>),
) -> Option<Command> {
    let mut drifted: Vec<&Candidate<'a>> =
        cands.iter().filter(|c| c.drifted_since.is_some() && !c.pool.node_pool.is_static()).collect();
    drifted.sort_by(|a, b| {
        let ta = a.drifted_since.flatten();
        let tb = b.drifted_since.flatten();
        ta.cmp(&tb).then_with(|| a.node.name.cmp(&b.node.name))
    });
    // Stable partition: empty (no reschedulable pods) first.
    drifted.sort_by_key(|c| !c.reschedulable.is_empty());
    let remaining = Remaining::new(&engine.budgets, Method::Drift.reason());
    let mut topology = engine.topology.clone();
    let mut command = None;
    for c in drifted {
        if let Some(r) = c.pod_block_for(false) {
            record(&c.node.name, Method::Drift, Err(r.clone()));
            continue;
        }
        if let Some(r) = topology.block(c) {
            record(&c.node.name, Method::Drift, Err(r));
            continue;
        }
        if let Some(r) = engine.budget_block(c, Method::Drift, &remaining) {
            record(&c.node.name, Method::Drift, Err(r));
            continue;
        }
        if (closed || command.is_some()) && !options.every_verdict {
            record(&c.node.name, Method::Drift, Err(Reason::NotEvaluated { method: Method::Drift }));
            continue;
        }
        if !may_simulate(options) {
            record(&c.node.name, Method::Drift, Err(Reason::PassTimeSpent { method: Method::Drift }));
            continue;
        }
        // A pool with no room for the replacement (at its limits) deletes first (upstream v1.15): the freed room
        // then takes the replacement through provisioning, instead of the drift waiting forever.
        let simulated = match engine.simulate(&[c], false) {
            Ok(d) => Ok((d.new_node_claims, "drifted".to_owned())),
            Err(e @ Reason::PodsUnschedulable { .. }) => match repair::no_room(engine, c) {
                Some(why) => Ok((Vec::new(), format!("drifted; {why}, so it goes first"))),
                None => Err(e),
            },
            Err(e) => Err(e),
        };
        match simulated.and_then(|(plans, what)| engine.floor_allows(&[c], &plans).map(|()| (plans, what))) {
            Ok((plans, what)) => {
                let cmd = Engine::command(Method::Drift, &[c], plans, &what);
                record(&c.node.name, Method::Drift, Ok(cmd.explanation.clone()));
                if command.is_none() {
                    topology.take(c);
                    command = Some(cmd);
                }
            }
            Err(r) => record(&c.node.name, Method::Drift, Err(r)),
        }
    }
    command
}
