//! Single-node consolidation: each consolidation candidate alone, in an order interleaving the pools, deleted when
//! its pods fit elsewhere or replaced by one cheaper node; the first that works gives the command. Graceful: the
//! command waits for validation. The last method of a pass, so it resumes where a pass cut short stopped
//! ([`crate::DisruptionOptions::resume_single_node_after`]).

use karpenter_api::nodepool::{ConsolidationPolicy, DisruptionReason};

use super::{DisruptionMethod, PassState, consolidation};
use crate::budget::Remaining;
use crate::candidate::{BALANCED_THRESHOLD, Candidate};
use crate::command::{Command, ConsolidationMove, Decision, Method, Reason};
use crate::engine::Engine;
use crate::may_simulate;
use crate::validation::failure::ValidationFailure;

pub(crate) struct SingleNodeConsolidation;

impl DisruptionMethod for SingleNodeConsolidation {
    fn method(&self) -> Method {
        Method::SingleNodeConsolidation
    }

    fn reason(&self) -> DisruptionReason {
        DisruptionReason::Underutilized
    }

    fn is_graceful(&self) -> bool {
        true
    }

    fn consolidation_type(&self) -> &'static str {
        "single"
    }

    /// Every consolidation candidate gets a result: the precheck's refusal, or its own evaluation (simulated only
    /// until something is decided, unless [`crate::DisruptionOptions::every_verdict`], and while the pass's
    /// simulation budget lasts).
    fn evaluate<'a>(&self, pass: &mut PassState<'_, 'a>, closed: bool) -> Vec<Command> {
        let (engine, cands) = (pass.engine, pass.cands);
        let options = engine.cluster.options;
        let method = Method::SingleNodeConsolidation;
        let eligible = pass.consolidation.get_or_init(|| consolidation::Eligible::new(engine, cands));
        for (node, r) in &eligible.refused {
            pass.results.record(node, method, Err(r.clone()));
        }
        let sorted = &eligible.sorted;
        let remaining = Remaining::new(&engine.budgets, method.reason());
        let mut first_single: Option<Command> = None;
        // The domain multi-node consolidation's command took is the one its keyed pool's other candidates would
        // have to share (earlier methods' commands leave the domains to consolidation's own choice).
        let mut topology = engine.topology.clone();
        let multi = pass.commands.iter().filter(|c| c.method == Method::MultiNodeConsolidation);
        for r in multi.flat_map(|m| &m.candidates) {
            if let Some(c) = sorted.iter().find(|c| c.node.name == r.node) {
                topology.take(c);
            }
        }
        let mut single_order = Engine::single_order(sorted);
        if let Some(after) = options.resume_single_node_after.as_deref()
            && let Some(i) = single_order.iter().position(|c| c.node.name == after)
        {
            single_order.rotate_left(i + 1);
        }
        // The last candidate simulated, and whether the budget stopped the loop after it.
        let mut last_simulated: Option<&str> = None;
        let mut ran_out = false;
        for c in single_order {
            let decided = closed || first_single.is_some();
            let mut record = |r| pass.results.record(&c.node.name, method, r);
            if decided && !options.every_verdict {
                record(Err(Reason::NotEvaluated { method }));
                continue;
            }
            if options.consolidation_unchanged {
                record(Err(Reason::ConsolidationUnchanged));
                continue;
            }
            if let Some(r) = topology.block(c) {
                record(Err(r));
                continue;
            }
            if let Some(r) = engine.budget_block(c, method, &remaining) {
                record(Err(r));
                continue;
            }
            if ran_out || !may_simulate(options) {
                ran_out = true;
                record(Err(Reason::PassTimeSpent { method }));
                continue;
            }
            last_simulated = Some(c.node.name.as_str());
            // Upstream scores moves until it has its command; the verdicts simulated after that count nothing.
            let mut uncounted = Vec::new();
            let moves = if decided { &mut uncounted } else { &mut pass.consolidation_moves };
            match single(engine, c, moves) {
                Ok(cmd) => {
                    record(Ok(cmd.explanation.clone()));
                    if first_single.is_none() {
                        topology.take(c);
                        first_single = Some(cmd);
                    }
                }
                Err(r) => record(Err(r)),
            }
        }
        // Where the next pass resumes: after the last candidate simulated (where this pass started when it
        // simulated none).
        pass.resume_single_node_after = ran_out
            .then(|| last_simulated.map(str::to_owned).or_else(|| options.resume_single_node_after.clone()))
            .flatten();
        first_single.into_iter().collect()
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

/// Single-node consolidation of one candidate, budget not included. A move that is computed is judged by Balanced
/// scoring and recorded in `moves` (upstream's `ApproveCommand`, which counts every policy's moves).
fn single<'a>(engine: &Engine<'a>, c: &Candidate<'a>, moves: &mut Vec<ConsolidationMove>) -> Result<Command, Reason> {
    if c.pool.node_pool.spec.disruption.consolidation_policy == ConsolidationPolicy::Balanced {
        // Best case: a pure delete saving the whole price (upstream's `CanPassThreshold`: no move, nothing counted).
        engine.balanced(&[c], c.price)?;
    }
    let m = engine.consolidate(&[c], Method::SingleNodeConsolidation)?;
    if m.command.decision == Decision::Replace && m.command.savings_per_hour <= 0.0 {
        return Err(Reason::NoCheaperOption { price: c.price });
    }
    let scores = engine.balanced_scores(&[c], m.command.savings_per_hour);
    let rejected = scores.iter().find(|(_, score)| *score < BALANCED_THRESHOLD).cloned();
    moves.extend(Engine::consolidation_moves(Method::SingleNodeConsolidation, &[c], rejected.is_none(), &scores));
    if let Some((node_pool, score)) = rejected {
        return Err(Reason::BalancedRejected { node_pool, score });
    }
    // A single node's delete is never held by the minimum saving (see `savings`); its replacement is.
    if m.command.decision == Decision::Replace {
        engine.pays_for_itself(&[c], &m.command)?;
    }
    Ok(m.command)
}
