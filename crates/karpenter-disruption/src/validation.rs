//! The re-check after the validation wait of emptiness and consolidation: is a command computed earlier still valid
//! against a later snapshot?
//!
//! Every candidate must still be a candidate for the command's method (not nominated, not blocked, still
//! empty / drifted / consolidatable), within budget and, in a pool disrupted one topology domain at a time, in no
//! domain waiting for another; the pods must still schedule; a delete must still need
//! no new node and a replace exactly one, whose options include every option of the command's replacement.
//! Emptiness commands drop invalid candidates individually and only fail when none remain.

// What a failed validation reports is data the methods produce (in their `recheck`), so it has a module of its
// own below both them and `validate`, which asks them.
pub(crate) mod failure;

use std::time::Duration;

use chrono::{DateTime, Utc};
use karpenter_api::ProviderLabels;
use karpenter_scheduler::{ClusterSnapshot, PoolInput};

use crate::DisruptionOptions;
use crate::budget::Remaining;
use crate::candidate::{Candidate, Cluster, candidate};
use crate::command::{Command, Method, Reason};
use crate::engine::Engine;
use crate::methods;

use failure::fail;
pub use failure::{FailureKind, ValidationFailure};

/// How long a graceful command (Emptiness, consolidation) waits between its decision and [`validate`] (upstream's
/// `commandValidationDelay`). The one definition: the controller's disruption loop and `simulate`'s simulated
/// time both wait this long.
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);

/// What the disruption loop does with one pass's commands. The one definition of that step: the controller's
/// loop and `simulate`'s simulated time both follow it.
#[derive(Debug, Clone, PartialEq)]
pub enum NextStep {
    /// The pass found nothing to disrupt.
    Idle,
    /// Start every command now. Drift (and static drift) is eventual: the nodes must go whatever the cluster
    /// looks like in 15 s, so upstream starts them without the re-check.
    StartNow(Vec<Command>),
    /// Hold the command for [`VALIDATION_DELAY`], then [`validate`] it against a fresh snapshot and start what
    /// is still valid. Emptiness and consolidation are graceful: they act only when moving the pods is still
    /// safe and worth it after the wait (pods may have arrived, budgets may have been spent). One command per
    /// pass, as upstream's queue holds one.
    ValidateAfterDelay(Command),
}

/// The step that follows a pass with these commands (see [`NextStep`]). One method acts per pass, so the first
/// command's method decides.
pub fn next_step(mut commands: Vec<Command>) -> NextStep {
    let Some(first) = commands.first() else { return NextStep::Idle };
    if first.method.is_graceful() {
        NextStep::ValidateAfterDelay(commands.swap_remove(0))
    } else {
        NextStep::StartNow(commands)
    }
}

/// Where the pass goes on after `command` failed validation. Upstream validates inside its method loop, and a
/// method whose command fails validation hands over to the next method in the same pass (multi-node
/// consolidation to single-node consolidation, Emptiness to drift and consolidation), against the cluster as it is
/// after the wait: evaluate again now with [`DisruptionOptions::continue_after`] set to the answer. `None` when no
/// graceful method follows (single-node consolidation ends the loop): the next pass is a full one. The one
/// definition of that step: the controller's loop and `simulate`'s simulated time both follow it.
pub fn continue_after(command: &Command) -> Option<Method> {
    let later = Method::ORDER.iter().skip_while(|m| **m != command.method).skip(1);
    (command.method.is_graceful() && later.clone().any(|m| m.is_graceful())).then_some(command.method)
}

/// Re-checks `command` against `snapshot` at `now`. Returns the command to execute (for Emptiness possibly with
/// fewer candidates).
pub fn validate(
    command: &Command,
    snapshot: &ClusterSnapshot,
    pools: &[PoolInput<'_>],
    provider: &ProviderLabels,
    now: DateTime<Utc>,
    options: &DisruptionOptions,
) -> Result<Command, ValidationFailure> {
    let cluster = Cluster::new(snapshot, pools, provider, now, options);
    let engine = Engine::new(cluster);
    let method = methods::of(command.method);
    let mut remaining = Remaining::new(&engine.budgets, command.reason);
    let mut kept: Vec<Candidate<'_>> = Vec::new();
    for r in &command.candidates {
        let check = (|| -> Result<Candidate<'_>, (FailureKind, String)> {
            let node = snapshot
                .nodes
                .iter()
                .find(|n| n.name == r.node)
                .ok_or((FailureKind::Churn, format!("node {} is gone", r.node)))?;
            let c = candidate(&engine.cluster, node).map_err(|e| (FailureKind::Churn, format!("{}: {e}", r.node)))?;
            // Another domain of a pool disrupted one topology domain at a time may have started meanwhile (a
            // forceful expiry, say): the command waits like a spent budget.
            if let Some(waiting) = engine.topology.block(&c) {
                return Err((FailureKind::Budget, format!("{}: {waiting}", r.node)));
            }
            let still = method.still_candidate(&engine, &c, command);
            if let Err(e) = still {
                let kind =
                    if matches!(e, Reason::BudgetExhausted { .. }) { FailureKind::Budget } else { FailureKind::Churn };
                let what = if e == Reason::NothingToDo { "no longer qualifies".to_owned() } else { e.to_string() };
                return Err((kind, format!("{}: {what}", r.node)));
            }
            if !remaining.take(c.pool_name) {
                return Err((
                    FailureKind::Budget,
                    format!("{}: budget of NodePool {} is used up", r.node, c.pool_name),
                ));
            }
            Ok(c)
        })();
        match check {
            Ok(c) => kept.push(c),
            Err((kind, msg)) => {
                if !method.drops_invalid_candidates() {
                    return Err(fail(kind, msg));
                }
            }
        }
    }
    // The pools' karpenter-rs.io/min-nodes floors, against the later snapshot: a command that drops invalid
    // candidates (Emptiness) keeps those the floors still allow, any other command holds as a whole or fails.
    let mut refs: Vec<&Candidate<'_>> = Vec::new();
    for c in &kept {
        refs.push(c);
        if let Err(e) = engine.floor_allows(&refs, &command.replacements) {
            if !method.drops_invalid_candidates() {
                return Err(fail(FailureKind::Churn, format!("{}: {e}", c.node.name)));
            }
            refs.pop();
        }
    }
    if refs.is_empty() {
        return Err(fail(FailureKind::Churn, "no candidate of the command is still valid"));
    }
    method.recheck(&engine, &refs, command)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Decision;
    use karpenter_api::nodepool::DisruptionReason;

    fn command(method: Method, node: &str) -> Command {
        Command {
            method,
            reason: method.reason(),
            decision: Decision::Delete,
            candidates: Vec::new(),
            replacements: Vec::new(),
            displaced_pods: Vec::new(),
            savings_per_hour: 0.0,
            explanation: node.to_owned(),
            repair: None,
        }
    }

    /// Upstream's method loop after a failed validation: multi-node consolidation's command failing hands over to
    /// single-node consolidation in the same pass, which finds its own command; after single-node consolidation
    /// nothing follows.
    #[test]
    fn a_pass_continues_after_the_method_whose_command_failed_validation() {
        use crate::engine::tests::{manifests, pass_over, sized, summary};
        assert_eq!(continue_after(&command(Method::MultiNodeConsolidation, "a")), Some(Method::MultiNodeConsolidation));
        assert_eq!(continue_after(&command(Method::Emptiness, "a")), Some(Method::Emptiness));
        assert_eq!(continue_after(&command(Method::SingleNodeConsolidation, "a")), None);
        assert_eq!(continue_after(&command(Method::Drift, "a")), None, "drift is never validated");

        let catalogue = [sized("c4", 4, &[("on-demand", 0.2)])];
        let manifests = manifests(
            r#"[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]"#,
            &[
                ("n1", "c4", "on-demand", "4", &["1"]),
                ("n2", "c4", "on-demand", "4", &["1"]),
                ("n3", "c4", "on-demand", "4", &["1"]),
            ],
        );
        let full = summary(&pass_over(&manifests, &catalogue, &DisruptionOptions::default()));
        assert_eq!(full.len(), 1, "{full:?}");
        assert!(full[0].starts_with("MultiNodeConsolidation Delete "), "{full:?}");
        let after = |m: Method| {
            let options = DisruptionOptions { continue_after: Some(m), ..DisruptionOptions::default() };
            summary(&pass_over(&manifests, &catalogue, &options))
        };
        let single = after(Method::MultiNodeConsolidation);
        assert_eq!(single.len(), 1, "{single:?}");
        assert!(single[0].starts_with("SingleNodeConsolidation Delete "), "{single:?}");
        assert_eq!(after(Method::Emptiness), full, "the methods after Emptiness still run");
        assert!(after(Method::SingleNodeConsolidation).is_empty());
    }

    #[test]
    fn drift_starts_at_once_and_graceful_methods_wait_for_validation() {
        assert_eq!(next_step(Vec::new()), NextStep::Idle);
        let drift = vec![command(Method::StaticDrift, "a"), command(Method::StaticDrift, "b")];
        assert_eq!(next_step(drift.clone()), NextStep::StartNow(drift));
        assert_eq!(next_step(vec![command(Method::Drift, "a")]), NextStep::StartNow(vec![command(Method::Drift, "a")]));
        for method in [Method::Emptiness, Method::MultiNodeConsolidation, Method::SingleNodeConsolidation] {
            let step = next_step(vec![command(method, "a"), command(method, "b")]);
            assert_eq!(step, NextStep::ValidateAfterDelay(command(method, "a")), "{method:?}: the first command only");
        }
        assert_eq!(command(Method::Emptiness, "a").reason, DisruptionReason::Empty);
    }
}
