//! What multi-node and single-node consolidation share: which candidates may be consolidated at all, in
//! consolidation order, and the checks a consolidation command must pass again after the validation wait.

use crate::candidate::Candidate;
use crate::command::{Command, Decision, Reason};
use crate::engine::Engine;
use crate::validation::failure::{FailureKind, ValidationFailure, fail};

/// The pass's consolidation candidates: the non-empty candidates that pass [`Engine::consolidation_precheck`],
/// sorted for consolidation, and why the others may not be consolidated.
#[derive(Debug)]
pub(crate) struct Eligible<'a> {
    /// In consolidation order.
    pub sorted: Vec<Candidate<'a>>,
    /// `(node, reason)` of the non-empty candidates the precheck refused, in the pass's order.
    pub refused: Vec<(String, Reason)>,
}

impl<'a> Eligible<'a> {
    pub fn new(engine: &Engine<'a>, cands: &[Candidate<'a>]) -> Self {
        let mut eligible: Vec<&Candidate<'a>> = Vec::new();
        let mut refused = Vec::new();
        for c in cands.iter().filter(|c| !c.is_empty()) {
            match engine.consolidation_precheck(c) {
                Ok(()) => eligible.push(c),
                Err(r) => refused.push((c.node.name.clone(), r)),
            }
        }
        Eligible { sorted: Engine::sorted(eligible), refused }
    }
}

/// Validation: a consolidation candidate still has pods to move and passes the precheck.
pub(crate) fn still_candidate(engine: &Engine<'_>, c: &Candidate<'_>) -> Result<(), Reason> {
    if c.is_empty() { Err(Reason::NothingToDo) } else { engine.consolidation_precheck(c) }
}

/// Validation: the pods still schedule, a delete still needs no new node and a replace exactly one whose options
/// include every option of the command's replacement.
pub(crate) fn recheck(
    engine: &Engine<'_>,
    kept: &[&Candidate<'_>],
    command: &Command,
) -> Result<Command, ValidationFailure> {
    let d = engine.simulate(kept, true).map_err(|e| fail(FailureKind::Scheduling, e.to_string()))?;
    match (command.decision, d.new_node_claims.as_slice()) {
        (Decision::Delete, []) => Ok(command.clone()),
        (Decision::Delete, claims) => {
            Err(fail(FailureKind::Scheduling, format!("a delete now needs {} new node(s)", claims.len())))
        }
        (Decision::Replace, [claim]) => {
            let planned: Vec<&str> =
                command.replacements.first().map(|r| r.instance_type_names().collect()).unwrap_or_default();
            let missing: Vec<&str> =
                planned.into_iter().filter(|it| !claim.instance_type_names().any(|n| n == *it)).collect();
            if missing.is_empty() {
                Ok(command.clone())
            } else {
                Err(fail(FailureKind::Scheduling, format!("the replacement can no longer be any of {missing:?}")))
            }
        }
        (Decision::Reboot, _) => Err(fail(FailureKind::Churn, "consolidation never reboots")),
        (Decision::Replace, claims) => Err(fail(
            FailureKind::Scheduling,
            format!("a replace now needs {} new node(s) instead of one", claims.len()),
        )),
    }
}
