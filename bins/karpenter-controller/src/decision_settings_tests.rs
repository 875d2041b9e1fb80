//! `run` and `simulate` take the settings that shape decisions from one declaration each
//! (`karpenter_operator::settings::DecisionSettings`, `karpenter_aws::settings::AwsDecisionSettings`). These tests
//! read both commands as clap builds them, so a setting re-declared in `simulate`, a decision setting that one of
//! the two commands lacks, or a new controller setting nobody sorted fails here.

use std::collections::BTreeMap;

use clap::{Args, Command, CommandFactory, FromArgMatches};
use karpenter_aws::settings::AwsDecisionSettings;
use karpenter_operator::settings::DecisionSettings;

use crate::Cli;

/// The settings of `run` that `simulate` does not take, each with why. A new setting of the controller lands here
/// or, when the simulator honours it, in `DecisionSettings`.
const RUN_ONLY: &[(&str, &str)] = &[
    // Shape decisions, but the simulator does not model them.
    ("BATCH_IDLE_DURATION", "simulate schedules every pending pod in one pass, with no batching window"),
    ("BATCH_MAX_DURATION", "as BATCH_IDLE_DURATION"),
    ("LEGACY_NODE_REPAIR", "simulate repairs as the NodeRepair gate's disruption method only"),
    ("VM_MEMORY_OVERHEAD_PERCENT", "simulate's AWS catalogue uses upstream's default overhead"),
    ("RESERVED_ENIS", "simulate's AWS catalogue uses upstream's default (none)"),
    // The number of threads; decisions are the same whatever the count.
    ("CPU_REQUESTS", "threads of the scheduler"),
    // The process, its clients, its endpoints, its logs.
    ("MEMORY_LIMIT", "process"),
    ("KUBE_CLIENT_QPS", "client"),
    ("KUBE_CLIENT_BURST", "client"),
    ("METRICS_PORT", "endpoint"),
    ("HEALTH_PROBE_PORT", "endpoint"),
    ("ENABLE_PROFILING", "endpoint"),
    ("LOG_LEVEL", "logs"),
    ("LOG_OUTPUT_PATHS", "logs"),
    ("LOG_ERROR_OUTPUT_PATHS", "logs"),
    ("DISABLE_LEADER_ELECTION", "leader election"),
    ("LEADER_ELECTION_NAME", "leader election"),
    ("LEADER_ELECTION_NAMESPACE", "leader election"),
    ("DISABLE_CONTROLLER_WARMUP", "leader election"),
    ("DISABLE_CLUSTER_STATE_OBSERVABILITY", "metrics"),
    ("SYSTEM_NAMESPACE", "where the controller runs"),
    // The kwok provider's runtime: simulate takes its catalogue as `--instance-types`, without the variable.
    ("KWOK_SIMULATE_KUBELET", "kwok runtime"),
    ("KWOK_INSTANCE_TYPES", "kwok catalogue (simulate: --instance-types)"),
    // The AWS provider's account, prices and caches: simulate uses its built-in catalogue and prices.
    ("CLUSTER_NAME", "AWS account"),
    ("CLUSTER_ENDPOINT", "AWS account"),
    ("CLUSTER_CA_BUNDLE", "AWS account"),
    ("EKS_CONTROL_PLANE", "AWS account"),
    ("ISOLATED_VPC", "AWS prices"),
    ("PRICE_FILE", "AWS prices"),
    ("INTERRUPTION_QUEUE", "AWS interruption events"),
    ("DISABLE_DRY_RUN", "AWS authorization checks"),
    ("ENABLE_ZONAL_SHIFT", "AWS zonal shifts"),
    ("AMI_REFRESH_INTERVAL", "AWS caches"),
    ("SUBNET_REFRESH_INTERVAL", "AWS caches"),
    ("SECURITY_GROUP_REFRESH_INTERVAL", "AWS caches"),
];

/// One setting as a command takes it.
#[derive(Debug, PartialEq, Eq)]
struct Setting {
    flag: String,
    defaults: Vec<String>,
    help: String,
}

/// The settings (arguments read from an environment variable) of `command`, by variable.
fn settings(command: &Command) -> BTreeMap<String, Setting> {
    command
        .get_arguments()
        .filter_map(|arg| {
            let env = arg.get_env()?.to_string_lossy().into_owned();
            let setting = Setting {
                flag: arg.get_long().unwrap_or_default().to_owned(),
                defaults: arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect(),
                help: arg.get_help().map(ToString::to_string).unwrap_or_default(),
            };
            Some((env, setting))
        })
        .collect()
}

fn subcommand(name: &str) -> Command {
    Cli::command().find_subcommand(name).unwrap_or_else(|| panic!("no {name} subcommand")).clone()
}

/// The decision settings as declared, core and AWS.
fn declared() -> BTreeMap<String, Setting> {
    let command = AwsDecisionSettings::augment_args(DecisionSettings::augment_args(Command::new("decisions")));
    settings(&command)
}

#[test]
fn run_and_simulate_take_the_same_decision_settings() {
    let declared = declared();
    assert!(declared.len() >= 10, "{:?}", declared.keys());
    let simulate = settings(&subcommand("simulate"));
    assert_eq!(simulate, declared, "simulate's settings are exactly the declared decision settings");
    let mut run = settings(&subcommand("run"));
    for (env, setting) in &declared {
        assert_eq!(run.remove(env).as_ref(), Some(setting), "run takes {env} as simulate does");
    }
    let run_only: Vec<&str> = run.keys().map(String::as_str).collect();
    let mut listed: Vec<&str> = RUN_ONLY.iter().map(|(env, _)| *env).collect();
    listed.sort_unstable();
    assert_eq!(run_only, listed, "run's other settings are the listed ones (RUN_ONLY)");
}

/// The same words on both command lines give the same values: one parser per value.
#[test]
fn the_same_flags_parse_to_the_same_values_in_both_commands() {
    let flags = [
        "--feature-gates=SpotToSpotConsolidation=true,StaticCapacity=true",
        "--preference-policy=Ignore",
        "--min-values-policy=BestEffort",
        "--ignore-dra-requests=f",
        "--honor-autoscaler-annotations=0",
        "--cluster-limits=cpu=100,nodes=7",
        "--scheduler-config={podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: \
         topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}]}}",
        "--consolidation-min-savings=5%",
        "--spot-to-spot-min-instance-types=3",
        "--aws-feature-gates=NodeClassCEL=true",
    ];
    let parsed = |command: &[&str]| {
        let argv = ["karpenter-controller"].iter().chain(command).chain(&flags);
        let matches = Cli::command().try_get_matches_from(argv).expect("parses");
        let (_, matches) = matches.subcommand().expect("a subcommand");
        let core = DecisionSettings::from_arg_matches(matches).expect("decision settings");
        let aws = AwsDecisionSettings::from_arg_matches(matches).expect("AWS decision settings");
        format!("{core:?} {aws:?}")
    };
    let run = parsed(&["run", "--provider", "kwok"]);
    assert_eq!(parsed(&["simulate"]), run);
    for value in ["spot_to_spot_min_instance_types: 3", "Ignore", "BestEffort", "node_class_cel: true"] {
        assert!(run.contains(value), "{value}: {run}");
    }
    // A bad value is refused by both, with the same message.
    let refused = |command: &[&str]| {
        let argv = ["karpenter-controller"].iter().chain(command).chain(&["--spot-to-spot-min-instance-types=0"]);
        Cli::command().try_get_matches_from(argv).expect_err("refused").to_string()
    };
    let run = refused(&["run", "--provider", "kwok"]);
    assert!(run.contains("\"0\" is not a number of instance types"), "{run}");
    assert_eq!(refused(&["simulate"]).lines().next(), run.lines().next());
}
