//! The disruption methods, one module each, behind one trait ([`DisruptionMethod`]).
//!
//! A pass ([`crate::evaluate`]) walks [`Method::ORDER`] and asks each method, through [`of`], for its commands;
//! [`crate::validation::validate`] asks the command's method what still qualifies after the wait. Nothing else
//! sequences the methods, so adding one is: a variant of [`Method`] in its place in [`Method::ORDER`]
//! (`command.rs`), a module here implementing [`DisruptionMethod`], and its arm in [`of`].
//!
//! What methods hand on to the ones after them lives in [`PassState`]: the commands taken so far (a later method
//! still evaluates, for its verdicts, but gives the pass no command), each node's results, and the consolidation
//! candidates both consolidation methods share.

pub(crate) mod consolidation;
pub(crate) mod drift;
pub(crate) mod emptiness;
pub(crate) mod multi_node;
pub mod repair;
pub(crate) mod single_node;
pub(crate) mod static_drift;

use std::cell::OnceCell;
use std::collections::BTreeMap;

use karpenter_api::nodepool::DisruptionReason;

use crate::candidate::Candidate;
use crate::command::{Command, ConsolidationMove, Method, Reason};
use crate::engine::Engine;
use crate::validation::failure::ValidationFailure;

/// What a method found for a node: `Ok(detail)` when it would act, else why not.
pub(crate) type Found = Result<String, Reason>;

/// Per node: per method, in the order they were recorded, what the method found.
#[derive(Debug, Default)]
pub(crate) struct Results(pub BTreeMap<String, Vec<(Method, Found)>>);

impl Results {
    /// Records what `method` found for `node`.
    pub fn record(&mut self, node: &str, method: Method, result: Found) {
        self.0.entry(node.to_owned()).or_default().push((method, result));
    }
}

/// One pass as the methods see it, in [`Method::ORDER`].
pub(crate) struct PassState<'p, 'a> {
    /// The pass's prepared state (snapshot indexes, budgets, simulator).
    pub engine: &'p Engine<'a>,
    /// The nodes every method but repair considers (the others already have their verdict).
    pub cands: &'p [Candidate<'a>],
    /// The commands the pass has taken so far: at most one method's.
    pub commands: Vec<Command>,
    /// What each method found for each node, for the verdicts.
    pub results: Results,
    /// Where the next pass's single-node consolidation resumes ([`crate::Pass::resume_single_node_after`]).
    pub resume_single_node_after: Option<String>,
    /// The consolidation candidates, computed by the first consolidation method that asks
    /// ([`consolidation::Eligible`]).
    pub consolidation: OnceCell<consolidation::Eligible<'a>>,
    /// How Balanced scoring judged the consolidation moves ([`crate::Pass::consolidation_moves`]).
    pub consolidation_moves: Vec<ConsolidationMove>,
}

impl<'p, 'a> PassState<'p, 'a> {
    pub fn new(engine: &'p Engine<'a>, cands: &'p [Candidate<'a>]) -> Self {
        PassState {
            engine,
            cands,
            commands: Vec::new(),
            results: Results::default(),
            resume_single_node_after: None,
            consolidation: OnceCell::new(),
            consolidation_moves: Vec::new(),
        }
    }
}

/// One disruption method: how it evaluates a pass and re-checks its command, and the facts about it the
/// controller, budgets and metrics need.
pub(crate) trait DisruptionMethod: Sync {
    /// Its name in commands, verdicts and [`Method::ORDER`].
    fn method(&self) -> Method;

    /// The budget reason its commands consume.
    fn reason(&self) -> DisruptionReason;

    /// `graceful` (pod blocks always apply, the command waits for validation) or `eventual` (pod blocks are relaxed
    /// with terminationGracePeriod, the command starts at once).
    fn is_graceful(&self) -> bool;

    /// Upstream's `consolidation_type` metric label: `""` for a method that does not consolidate.
    fn consolidation_type(&self) -> &'static str {
        ""
    }

    /// Upstream runs it in a controller of its own, not in the disruption method loop: a command that failed
    /// validation does not keep it from acting in the pass that goes on ([`crate::DisruptionOptions::continue_after`]).
    fn outside_method_loop(&self) -> bool {
        false
    }

    /// The method's commands in this pass, with a result recorded in `pass.results` for each node it considered.
    /// `closed`: the pass takes no command from it (an earlier method acted, or the pass goes on after this
    /// method's failed command), so it simulates only for verdicts ([`crate::DisruptionOptions::every_verdict`]).
    fn evaluate<'a>(&self, pass: &mut PassState<'_, 'a>, closed: bool) -> Vec<Command>;

    /// Validation: whether `c`, one of `command`'s candidates in the later snapshot, still qualifies for the method
    /// (budget and topology are checked by the caller).
    fn still_candidate(&self, engine: &Engine<'_>, c: &Candidate<'_>, command: &Command) -> Result<(), Reason>;

    /// Validation: a candidate that no longer qualifies leaves the command instead of failing it (Emptiness).
    fn drops_invalid_candidates(&self) -> bool {
        false
    }

    /// Validation: the command to start, given the candidates `kept` that still qualify.
    fn recheck(
        &self,
        engine: &Engine<'_>,
        kept: &[&Candidate<'_>],
        command: &Command,
    ) -> Result<Command, ValidationFailure>;
}

// What each method answers about itself, asked through the method's name: here with the implementations
// rather than in `command.rs`, so the data types know nothing of the methods.
impl Method {
    /// The budget reason the method consumes.
    pub fn reason(self) -> DisruptionReason {
        of(self).reason()
    }

    /// `graceful` (pod blocks always apply) or `eventual` (pod blocks are relaxed with terminationGracePeriod).
    /// Repair is neither: pod blocks never keep a broken node, its drain is bounded by the repair policy.
    pub fn is_graceful(self) -> bool {
        of(self).is_graceful()
    }

    /// Upstream's `consolidation_type` metric label: `empty`, `multi`, `single`, or `""` for a method that does not
    /// consolidate (drift, static drift, repair).
    pub fn consolidation_type(self) -> &'static str {
        of(self).consolidation_type()
    }
}

/// The implementation of `method`.
pub(crate) fn of(method: Method) -> &'static dyn DisruptionMethod {
    match method {
        Method::Repair => &repair::Repair,
        Method::Emptiness => &emptiness::Emptiness,
        Method::StaticDrift => &static_drift::StaticDrift,
        Method::Drift => &drift::Drift,
        Method::MultiNodeConsolidation => &multi_node::MultiNodeConsolidation,
        Method::SingleNodeConsolidation => &single_node::SingleNodeConsolidation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The declared order is the enum's (the pass compares methods by it: "at or before the method whose command
    /// failed validation"), holds every method once, and each method's implementation is its own.
    #[test]
    fn the_order_names_every_method_once_in_declaration_order() {
        assert!(Method::ORDER.windows(2).all(|w| w[0] < w[1]), "{:?}", Method::ORDER);
        for m in Method::ORDER {
            assert_eq!(of(m).method(), m);
        }
    }

    /// Upstream's order (`NewMethods` in pkg/controllers/disruption/controller.go), node repair first: a broken
    /// node is replaced before anything is consolidated.
    #[test]
    fn the_order_is_upstreams() {
        use Method::*;
        assert_eq!(
            Method::ORDER,
            [Repair, Emptiness, StaticDrift, Drift, MultiNodeConsolidation, SingleNodeConsolidation]
        );
        let labels: Vec<&str> = Method::ORDER.iter().map(|m| m.consolidation_type()).collect();
        assert_eq!(labels, ["", "empty", "", "", "multi", "single"]);
        let graceful: Vec<bool> = Method::ORDER.iter().map(|m| m.is_graceful()).collect();
        assert_eq!(graceful, [false, true, false, false, true, true]);
    }
}
