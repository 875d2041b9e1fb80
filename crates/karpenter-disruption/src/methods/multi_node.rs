//! Multi-node consolidation: the longest prefix of the sorted consolidation candidates (at most
//! [`crate::DisruptionOptions::multi_node_max_candidates`], within budget) whose pods fit on the other nodes and
//! at most one new, cheaper node, found by binary search. Graceful: the command waits for validation, and when it
//! fails there the pass goes on with single-node consolidation ([`crate::validation::continue_after`]).

use karpenter_api::nodepool::DisruptionReason;

use super::{DisruptionMethod, PassState, consolidation};
use crate::budget::Remaining;
use crate::candidate::Candidate;
use crate::command::{Command, Decision, Method, Reason};
use crate::engine::Engine;
use crate::may_simulate_multi;
use crate::validation::ValidationFailure;

pub(crate) struct MultiNodeConsolidation;

impl DisruptionMethod for MultiNodeConsolidation {
    fn method(&self) -> Method {
        Method::MultiNodeConsolidation
    }

    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Underutilized
    }

    fn is_graceful(&self) -> bool {
        true
    }

    fn consolidation_type(&self) -> &'static str {
        "multi"
    }

    /// Records nothing: single-node consolidation gives every consolidation candidate its result. Searches only
    /// when the pass may take its command and something changed since consolidation last found nothing.
    fn evaluate<'a>(&self, pass: &mut PassState<'_, 'a>, closed: bool) -> Vec<Command> {
        let (engine, cands) = (pass.engine, pass.cands);
        let options = engine.cluster.options;
        if closed || options.consolidation_unchanged {
            return Vec::new();
        }
        let eligible = pass.consolidation.get_or_init(|| consolidation::Eligible::new(engine, cands));
        let refs: Vec<&Candidate<'a>> = eligible.sorted.iter().collect();
        search(engine, &refs, options.multi_node_max_candidates, || may_simulate_multi(options)).into_iter().collect()
    }

    fn still_candidate(&self, engine: &Engine<'_>, c: &Candidate<'_>, _command: &Command) -> Result<(), Reason> {
        consolidation::still_candidate(engine, c)
    }

    fn recheck(
        &self,
        engine: &Engine<'_>,
        kept: &[&Candidate<'_>],
        command: &Command,
    ) -> Result<Command, ValidationFailure> {
        consolidation::recheck(engine, kept, command)
    }
}

/// Binary search over the prefix length of `eligible` (sorted for consolidation); `may_simulate` is asked before
/// each attempt, and the best command found so far stands when it says no.
pub(crate) fn search<'a>(
    engine: &Engine<'a>,
    eligible: &[&Candidate<'a>],
    max: usize,
    may_simulate: impl Fn() -> bool,
) -> Option<Command> {
    let mut remaining = Remaining::new(&engine.budgets, Method::MultiNodeConsolidation.reason());
    // The best-ranked candidate of a keyed pool chooses its domain; the pool's others must share it.
    let mut topology = engine.topology.clone();
    let mut list: Vec<&Candidate<'a>> = Vec::new();
    for c in eligible {
        if topology.block(c).is_none() && remaining.take(c.pool_name) {
            topology.take(c);
            list.push(c);
        }
        if list.len() >= max {
            break;
        }
    }
    if list.len() < 2 {
        return None;
    }
    let (mut lo, mut hi) = (1usize, list.len() - 1);
    let mut best = None;
    while lo <= hi {
        if !may_simulate() {
            break;
        }
        let mid = (lo + hi) / 2;
        let prefix = list.get(..=mid)?;
        match attempt(engine, prefix) {
            Some(cmd) => {
                best = Some(cmd);
                lo = mid + 1;
            }
            None => {
                if mid == 0 {
                    break;
                }
                hi = mid - 1;
            }
        }
    }
    best
}

/// One attempt: valid when a delete, or a replace that still has types after `filterOutSameInstanceType`, saves
/// something, is approved by every Balanced pool and pays for itself.
fn attempt<'a>(engine: &Engine<'a>, prefix: &[&Candidate<'a>]) -> Option<Command> {
    let m = engine.consolidate(prefix, Method::MultiNodeConsolidation).ok()?;
    let cmd = match m.command.decision {
        Decision::Delete => m.command,
        Decision::Replace => engine.filter_out_same_instance_type(prefix, &m.priced_types, m.command)?,
        Decision::Reboot => return None,
    };
    if cmd.savings_per_hour <= 0.0 {
        return None;
    }
    engine.balanced(prefix, cmd.savings_per_hour).ok()?;
    engine.pays_for_itself(prefix, &cmd).ok()?;
    Some(cmd)
}
