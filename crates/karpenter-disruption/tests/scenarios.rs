//! Scenario tests as data: `tests/scenarios/<name>/input.yaml` (manifests) and optional `scenario.yaml`
//! (options) -> `expected.json` (the pass). `UPDATE_SCENARIOS=1 cargo test -p karpenter-disruption --test
//! scenarios` rewrites the expected files. Every pass is also checked against the invariants of
//! `common::check_pass` (PDBs, do-not-disrupt, budgets, displaced pods re-validated).
//!
//! `scenario.yaml` fields (all optional): `now` (RFC 3339, default `2026-01-01T12:00:00Z`), `spotToSpot`
//! (feature gate, default false), `notReady` (node names whose Ready is not True), `nominated` (node names),
//! `everyVerdict` (default true; false as the controller runs a pass), `consolidationUnchanged` (default false:
//! the controller's "already consolidated" short-circuit), `simulations` and `multiNodeSimulations` (simulation
//! budgets as counts; default unbounded), `resumeSingleNodeAfter` (a node name: where single-node consolidation
//! resumes), `honorAutoscalerAnnotations` (default true: other autoscalers' do-not-disrupt annotations),
//! `clusterLimits` (`CLUSTER_LIMITS` syntax, e.g. `cpu=6`; default none).

mod common;

use std::path::Path;

use chrono::{DateTime, Utc};
use karpenter_api::load_str;
use karpenter_disruption::{DisruptionOptions, SimulationBudget, evaluate};
use karpenter_scheduler::ClusterSnapshot;
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Scenario {
    now: Option<String>,
    spot_to_spot: Option<bool>,
    #[serde(default)]
    not_ready: Vec<String>,
    #[serde(default)]
    nominated: Vec<String>,
    every_verdict: Option<bool>,
    consolidation_unchanged: Option<bool>,
    simulations: Option<usize>,
    multi_node_simulations: Option<usize>,
    resume_single_node_after: Option<String>,
    honor_autoscaler_annotations: Option<bool>,
    /// `CLUSTER_LIMITS` syntax, e.g. `cpu=6`.
    cluster_limits: Option<String>,
}

const DEFAULT_NOW: &str = "2026-01-01T12:00:00Z";

fn run(dir: &Path) -> Result<(), String> {
    let input = std::fs::read_to_string(dir.join("input.yaml")).map_err(|e| e.to_string())?;
    let scenario: Scenario = match std::fs::read_to_string(dir.join("scenario.yaml")) {
        Ok(s) => serde_saphyr::from_str(&s).map_err(|e| format!("scenario.yaml: {e}"))?,
        Err(_) => Scenario::default(),
    };
    let objects = load_str(&input, "input.yaml").map_err(|e| e.to_string())?;
    let mut snapshot = ClusterSnapshot::from_objects(&objects).map_err(|e| e.to_string())?;
    for n in &mut snapshot.nodes {
        n.nominated = scenario.nominated.contains(&n.name);
    }
    let now: DateTime<Utc> = DateTime::parse_from_rfc3339(scenario.now.as_deref().unwrap_or(DEFAULT_NOW))
        .map_err(|e| format!("now: {e}"))?
        .with_timezone(&Utc);
    let catalogue = common::catalogue();
    let pools = common::pools(&snapshot, &catalogue);
    let options = DisruptionOptions {
        spot_to_spot_consolidation: scenario.spot_to_spot.unwrap_or(false),
        not_ready_nodes: scenario.not_ready.iter().cloned().collect(),
        every_verdict: scenario.every_verdict.unwrap_or(true),
        consolidation_unchanged: scenario.consolidation_unchanged.unwrap_or(false),
        resume_single_node_after: scenario.resume_single_node_after.clone(),
        honor_autoscaler_annotations: scenario.honor_autoscaler_annotations.unwrap_or(true),
        scheduler: karpenter_scheduler::SchedulerOptions {
            cluster_limits: karpenter_api::settings::parse_cluster_limits(
                scenario.cluster_limits.as_deref().unwrap_or(""),
            )
            .map_err(|e| format!("scenario.yaml clusterLimits: {e}"))?,
            ..DisruptionOptions::default().scheduler
        },
        ..Default::default()
    };
    // Budgets are counts spent as the pass runs: each evaluation below gets fresh ones.
    let budgets = |options: &DisruptionOptions| DisruptionOptions {
        simulation_budget: scenario.simulations.map(SimulationBudget::simulations),
        multi_node_budget: scenario.multi_node_simulations.map(SimulationBudget::simulations),
        ..options.clone()
    };
    let provider = karpenter_testing::vocabulary::aws();
    let pass = evaluate(&snapshot, &pools, &provider, now, &budgets(&options));
    common::check_pass(&snapshot, &pools, now, &options, &pass)?;
    if evaluate(&snapshot, &pools, &provider, now, &budgets(&options)) != pass {
        return Err("not deterministic".into());
    }
    let json = pass.to_json() + "\n";
    let expected_path = dir.join("expected.json");
    if std::env::var_os("UPDATE_SCENARIOS").is_some() {
        std::fs::write(&expected_path, &json).map_err(|e| e.to_string())?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(&expected_path)
        .map_err(|e| format!("{}: {e} (run with UPDATE_SCENARIOS=1)", expected_path.display()))?;
    if expected != json {
        return Err(format!("pass differs from expected.json:\n{json}"));
    }
    Ok(())
}

#[test]
fn scenarios() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .expect("scenario dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("input.yaml").exists())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 20, "expected at least 20 scenarios, found {}", dirs.len());
    let mut failures = Vec::new();
    for d in &dirs {
        if let Err(e) = run(d) {
            failures
                .push(format!("{}: {e}", d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()));
        }
    }
    assert!(failures.is_empty(), "{} of {} scenarios failed:\n{}", failures.len(), dirs.len(), failures.join("\n\n"));
}

/// Balanced scoring reported per move, as upstream's evaluator counts it (`karpenter_consolidation_moves_total`,
/// `karpenter_consolidation_score`), on the `balanced-rejects` scenario: n1's best case, a pure delete, cannot pass
/// (upstream's `CanPassThreshold`: no move computed, nothing counted); n2's replacement is computed and approved
/// with its score. What is counted does not depend on how many verdicts the pass simulates after its command.
#[test]
fn balanced_scoring_reports_each_computed_move() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios/balanced-rejects");
    let input = std::fs::read_to_string(dir.join("input.yaml")).expect("input");
    let objects = load_str(&input, "input.yaml").expect("manifests");
    let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
    let catalogue = common::catalogue();
    let pools = common::pools(&snapshot, &catalogue);
    let now = DateTime::parse_from_rfc3339(DEFAULT_NOW).expect("now").with_timezone(&Utc);
    let pass_with = |every_verdict| {
        let options = DisruptionOptions { every_verdict, ..Default::default() };
        evaluate(&snapshot, &pools, &karpenter_testing::vocabulary::aws(), now, &options)
    };
    let pass = pass_with(false);
    let command = pass.commands.first().expect("n2 is replaced");
    assert_eq!(command.candidates[0].node, "n2");
    let single: Vec<_> = pass
        .consolidation_moves
        .iter()
        .filter(|m| m.method == karpenter_disruption::Method::SingleNodeConsolidation)
        .collect();
    let [n2] = single.as_slice() else { panic!("one single-node move, n2's: {:?}", pass.consolidation_moves) };
    assert_eq!((n2.node_pool.as_str(), n2.policy), ("default", karpenter_api::nodepool::ConsolidationPolicy::Balanced));
    let score = n2.score.expect("a Balanced pool's move is scored");
    assert!(n2.approved && n2.pool_approved() && score >= 0.5, "{n2:?}");
    for m in &pass.consolidation_moves {
        assert_eq!(m.pool_approved(), m.score.is_none_or(|s| s >= 0.5), "{m:?}");
    }
    assert_eq!(
        pass_with(true).consolidation_moves,
        pass.consolidation_moves,
        "verdicts after the command count nothing"
    );
}
