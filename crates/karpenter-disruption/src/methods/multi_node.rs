//! Multi-node consolidation: the longest prefix of the sorted consolidation candidates (at most
//! [`crate::DisruptionOptions::multi_node_max_candidates`], within budget) whose pods fit on the other nodes and
//! at most one new, cheaper node, found by binary search. Graceful: the command waits for validation, and when it
//! fails there the pass goes on with single-node consolidation ([`crate::validation::continue_after`]).

use karpenter_api::nodepool::DisruptionReason;

use super::{DisruptionMethod, PassState, consolidation};
use crate::budget::Remaining;
use crate::candidate::{BALANCED_THRESHOLD, Candidate};
use crate::command::{Command, ConsolidationMove, Decision, Method, Reason};
use crate::engine::Engine;
use crate::may_simulate_multi;
use crate::validation::failure::ValidationFailure;

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
        let max = options.multi_node_max_candidates;
        search(engine, &refs, max, || may_simulate_multi(options), &mut pass.consolidation_moves).into_iter().collect()
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
///
/// The outcome goes to `moves` once, as upstream's `EmitMultiNodeEvents`: the command found, approved; else, when
/// Balanced scoring rejected an attempt, the last one rejected (none when the time ran out with no command).
pub(crate) fn search<'a>(
    engine: &Engine<'a>,
    eligible: &[&Candidate<'a>],
    max: usize,
    may_simulate: impl Fn() -> bool,
    moves: &mut Vec<ConsolidationMove>,
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
    // The command found, and the last attempt Balanced scoring rejected: (prefix length, scores) each.
    let mut best: Option<(Command, usize, Scores)> = None;
    let mut last_rejected: Option<(usize, Scores)> = None;
    let mut timed_out = false;
    while lo <= hi {
        if !may_simulate() {
            timed_out = true;
            break;
        }
        let mid = (lo + hi) / 2;
        let prefix = list.get(..=mid)?;
        match attempt(engine, prefix) {
            Attempt::Valid(cmd, scores) => {
                best = Some((*cmd, mid + 1, scores));
                lo = mid + 1;
            }
            invalid => {
                if let Attempt::Rejected(scores) = invalid {
                    last_rejected = Some((mid + 1, scores));
                }
                if mid == 0 {
                    break;
                }
                hi = mid - 1;
            }
        }
    }
    let method = Method::MultiNodeConsolidation;
    match (&best, last_rejected) {
        (Some((_, n, scores)), _) => moves.extend(Engine::consolidation_moves(method, &list[..*n], true, scores)),
        (None, Some((n, scores))) if !timed_out => {
            moves.extend(Engine::consolidation_moves(method, &list[..n], false, &scores));
        }
        _ => {}
    }
    best.map(|(cmd, _, _)| cmd)
}

/// The Balanced pools' scores of a move, by pool name ([`Engine::balanced_scores`]).
type Scores = Vec<(String, f64)>;

/// What one multi-node attempt found.
enum Attempt {
    /// A command, with the Balanced pools' scores.
    Valid(Box<Command>, Scores),
    /// Balanced scoring rejected the move: the Balanced pools' scores.
    Rejected(Scores),
    /// No move, or one refused for another reason.
    Invalid,
}

/// One attempt: valid when a delete, or a replace that still has types after `filterOutSameInstanceType`, saves
/// something, is approved by every Balanced pool and pays for itself.
fn attempt<'a>(engine: &Engine<'a>, prefix: &[&Candidate<'a>]) -> Attempt {
    let Ok(m) = engine.consolidate(prefix, Method::MultiNodeConsolidation) else { return Attempt::Invalid };
    let cmd = match m.command.decision {
        Decision::Delete => m.command,
        Decision::Replace => match engine.filter_out_same_instance_type(prefix, &m.priced_types, m.command) {
            Some(cmd) => cmd,
            None => return Attempt::Invalid,
        },
        Decision::Reboot => return Attempt::Invalid,
    };
    if cmd.savings_per_hour <= 0.0 {
        return Attempt::Invalid;
    }
    let scores = engine.balanced_scores(prefix, cmd.savings_per_hour);
    if scores.iter().any(|(_, score)| *score < BALANCED_THRESHOLD) {
        return Attempt::Rejected(scores);
    }
    if engine.pays_for_itself(prefix, &cmd).is_err() {
        return Attempt::Invalid;
    }
    Attempt::Valid(Box::new(cmd), scores)
}
