//! The re-check after the validation wait of emptiness and consolidation: is a command computed earlier still valid
//! against a later snapshot?
//!
//! Every candidate must still be a candidate for the command's method (not nominated, not blocked, still
//! empty / drifted / consolidatable) and within budget; the pods must still schedule; a delete must still need
//! no new node and a replace exactly one, whose options include every option of the command's replacement.
//! Emptiness commands drop invalid candidates individually and only fail when none remain.

use std::time::Duration;

use chrono::{DateTime, Utc};
use karpenter_api::ProviderLabels;
use karpenter_scheduler::{ClusterSnapshot, PoolInput};
use serde::{Deserialize, Serialize};

use crate::budget::Remaining;
use crate::candidate::{Candidate, Cluster, candidate};
use crate::command::{Command, Decision, Method, Reason};
use crate::engine::Engine;
use crate::{DisruptionOptions, emptiness_check};

/// How long a graceful command (Emptiness, consolidation) waits between its decision and [`validate`] (upstream's
/// `commandValidationDelay`). The one definition: the controller's disruption loop and `simulate`'s simulated
/// time both wait this long.
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);

/// Failure classes (upstream's `budget | scheduling | churn` metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailureKind {
    /// A budget no longer allows the command.
    Budget,
    /// The pods no longer schedule as planned.
    Scheduling,
    /// A candidate is no longer a candidate (pods arrived, nominated, deleted, ...).
    Churn,
}

/// Why a command was rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind:?}: {message}")]
#[serde(rename_all = "camelCase")]
pub struct ValidationFailure {
    /// Class.
    pub kind: FailureKind,
    /// Details.
    pub message: String,
}

fn fail(kind: FailureKind, message: impl Into<String>) -> ValidationFailure {
    ValidationFailure { kind, message: message.into() }
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
            let still = match command.method {
                Method::Emptiness => {
                    if !c.is_empty() {
                        Err(Reason::NothingToDo)
                    } else {
                        emptiness_check(&engine, &c, &Remaining::new(&engine.budgets, command.reason))
                    }
                }
                Method::Drift | Method::StaticDrift => {
                    if c.drifted_since.is_none() {
                        Err(Reason::NothingToDo)
                    } else {
                        c.pod_block_for(false).map_or(Ok(()), |b| Err(b.clone()))
                    }
                }
                Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
                    if c.is_empty() {
                        Err(Reason::NothingToDo)
                    } else {
                        engine.consolidation_precheck(&c)
                    }
                }
            };
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
                if command.method != Method::Emptiness {
                    return Err(fail(kind, msg));
                }
            }
        }
    }
    if kept.is_empty() {
        return Err(fail(FailureKind::Churn, "no candidate of the command is still valid"));
    }
    let refs: Vec<&Candidate<'_>> = kept.iter().collect();
    match command.method {
        Method::Emptiness => Ok(Engine::command(Method::Emptiness, &refs, Vec::new(), "empty")),
        Method::StaticDrift => Ok(command.clone()),
        Method::Drift => {
            engine.simulate(&refs, false).map_err(|e| fail(FailureKind::Scheduling, e.to_string()))?;
            Ok(command.clone())
        }
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
            let d = engine.simulate(&refs, true).map_err(|e| fail(FailureKind::Scheduling, e.to_string()))?;
            match (command.decision, d.new_node_claims.as_slice()) {
                (Decision::Delete, []) => Ok(command.clone()),
                (Decision::Delete, claims) => {
                    Err(fail(FailureKind::Scheduling, format!("a delete now needs {} new node(s)", claims.len())))
                }
                (Decision::Replace, [claim]) => {
                    let planned = command.replacements.first().map(|r| r.instance_types.as_slice()).unwrap_or(&[]);
                    let missing: Vec<&String> =
                        planned.iter().filter(|it| !claim.instance_types.contains(it)).collect();
                    if missing.is_empty() {
                        Ok(command.clone())
                    } else {
                        Err(fail(
                            FailureKind::Scheduling,
                            format!("the replacement can no longer be any of {missing:?}"),
                        ))
                    }
                }
                (Decision::Replace, claims) => Err(fail(
                    FailureKind::Scheduling,
                    format!("a replace now needs {} new node(s) instead of one", claims.len()),
                )),
            }
        }
    }
}
