//! Scenario tests as data: `tests/scenarios/<name>/input.yaml` (manifests) and optional `scenario.yaml`
//! (options) -> `expected.json`. `UPDATE_SCENARIOS=1 cargo test -p karpenter-scheduler --test scenarios`
//! rewrites the expected files. Every decision is also verified by the independent checker.
//!
//! `scenario.yaml` fields (all optional): `catalogue` (`standard`, default, or `benchmark`),
//! `preferencePolicy` (`Respect`/`Ignore`), `minValuesPolicy` (`Strict`/`BestEffort`), `maxPodAttempts`,
//! `upstreamPacking` (`true`: no cost post-pass, upstream's packing exactly), `clusterLimits` (`CLUSTER_LIMITS`
//! syntax: `cpu=16,nodes=3`), `schedulerConfig` (`SCHEDULER_CONFIG` text: default topology spread constraints).

mod common;

use std::path::Path;

use karpenter_api::load_str;
use karpenter_requirements::{MinValuesPolicy, PreferencePolicy};
use karpenter_scheduler::check::check_with_defaults;
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions, schedule};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Scenario {
    catalogue: Option<String>,
    preference_policy: Option<String>,
    min_values_policy: Option<String>,
    max_pod_attempts: Option<usize>,
    upstream_packing: Option<bool>,
    cluster_limits: Option<String>,
    scheduler_config: Option<String>,
}

/// The scenario's `schedulerConfig` as the scheduler reads it: as written, or as JSON when the crate is built
/// without its `yaml` feature (JSON only), so the scenarios run in both builds.
fn scheduler_config_text(scenario: &Scenario) -> String {
    let text = scenario.scheduler_config.clone().unwrap_or_default();
    #[cfg(not(feature = "yaml"))]
    if let Ok(value) = serde_saphyr::from_str::<serde_json::Value>(&text) {
        return value.to_string();
    }
    text
}

fn run(dir: &Path) -> Result<(), String> {
    let input = std::fs::read_to_string(dir.join("input.yaml")).map_err(|e| e.to_string())?;
    let scenario: Scenario = match std::fs::read_to_string(dir.join("scenario.yaml")) {
        Ok(s) => serde_saphyr::from_str(&s).map_err(|e| format!("scenario.yaml: {e}"))?,
        Err(_) => Scenario::default(),
    };
    let objects = load_str(&input, "input.yaml").map_err(|e| e.to_string())?;
    let snapshot = ClusterSnapshot::from_objects(&objects).map_err(|e| e.to_string())?;
    let catalogue = match scenario.catalogue.as_deref().unwrap_or("standard") {
        "standard" => common::standard(),
        "benchmark" => common::benchmark(400),
        other => return Err(format!("unknown catalogue {other}")),
    };
    let pools: Vec<PoolInput<'_>> =
        snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: &catalogue }).collect();
    let options = SchedulerOptions {
        preference_policy: match scenario.preference_policy.as_deref() {
            Some("Ignore") => PreferencePolicy::Ignore,
            _ => PreferencePolicy::Respect,
        },
        min_values_policy: match scenario.min_values_policy.as_deref() {
            Some("BestEffort") => MinValuesPolicy::BestEffort,
            _ => MinValuesPolicy::Strict,
        },
        max_pod_attempts: scenario.max_pod_attempts,
        upstream_packing: scenario.upstream_packing.unwrap_or(false),
        cluster_limits: karpenter_api::settings::parse_cluster_limits(scenario.cluster_limits.as_deref().unwrap_or(""))
            .map_err(|e| format!("scenario.yaml clusterLimits: {e}"))?,
        scheduler_config: karpenter_scheduler::SchedulerConfig::parse(&scheduler_config_text(&scenario))
            .map_err(|e| format!("scenario.yaml schedulerConfig: {e}"))?,
        ..Default::default()
    };
    let provider = karpenter_testing::vocabulary::aws();
    let decisions = schedule(&snapshot, &pools, &provider, &options);
    check_with_defaults(&snapshot, &pools, &provider, &options.scheduler_config, &decisions)
        .map_err(|v| format!("checker: {v:#?}"))?;
    karpenter_scheduler::check::check_cluster_limits(&snapshot, &pools, &options.cluster_limits, &decisions)
        .map_err(|v| format!("checker: {v:#?}"))?;
    let again = schedule(&snapshot, &pools, &provider, &options);
    if again != decisions {
        return Err("not deterministic".into());
    }
    let json = decisions.to_json() + "\n";
    // The JSON is a view of the typed document: it reads back to a document with the same view.
    let back: karpenter_scheduler::Decisions = serde_json::from_str(&json).map_err(|e| format!("reading back: {e}"))?;
    if back.to_json() + "\n" != json {
        return Err("the JSON does not read back to the same document".into());
    }
    let expected_path = dir.join("expected.json");
    if std::env::var_os("UPDATE_SCENARIOS").is_some() {
        std::fs::write(&expected_path, &json).map_err(|e| e.to_string())?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(&expected_path)
        .map_err(|e| format!("{}: {e} (run with UPDATE_SCENARIOS=1)", expected_path.display()))?;
    if expected != json {
        return Err(format!("decision differs from expected.json:\n{json}"));
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
    assert!(dirs.len() >= 15, "expected at least 15 scenarios, found {}", dirs.len());
    let mut failures = Vec::new();
    for d in &dirs {
        if let Err(e) = run(d) {
            failures
                .push(format!("{}: {e}", d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()));
        }
    }
    assert!(failures.is_empty(), "{} of {} scenarios failed:\n{}", failures.len(), dirs.len(), failures.join("\n\n"));
}
