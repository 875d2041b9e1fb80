//! The core settings: every setting is a flag that also reads an environment variable, with upstream
//! Karpenter's names and defaults, so an operator's Helm values and env carry over unchanged. The environment
//! gives the default; a flag overrides it.
//!
//! [`CoreSettings`] apply to every provider; a provider's own settings live in its crate (karpenter-aws's
//! `AwsSettings`). All are `clap::Args`: the binary flattens them into its `run` command and renders the
//! checked-in settings reference (`docs/settings.md`) from the same definitions with [`reference_section`], so
//! the docs cannot drift from the code.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::{ArgAction, Args, Command};
// The policies are the scheduler's own types: settings parse into what the scheduler reads, with no mapping.
pub use karpenter_requirements::{MinValuesPolicy, PreferencePolicy};

pub use karpenter_api::labels::consolidation_min_savings::Setting as MinSavingsSetting;
pub use karpenter_api::settings::SettingsError;
use karpenter_api::settings::{
    compatibility_help, parse_cluster_limits, parse_duration_setting as duration, parse_feature_gates, parse_go_bool,
};
use karpenter_requirements::ResourceList;
pub use karpenter_scheduler::SchedulerConfig;

// The runtime's type: settings parse into what the logger reads, with no mapping.
pub use karpenter_runtime::logging::LogLevel;

/// The core feature gates (`FEATURE_GATES`), parsed from `Name=bool` pairs separated by commas.
/// Names this build does not know are ignored, as upstream does, so a newer values file still starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    pub node_repair: bool,
    pub reserved_capacity: bool,
    pub spot_to_spot_consolidation: bool,
    pub node_overlay: bool,
    pub static_capacity: bool,
    pub capacity_buffer: bool,
    pub pod_deletion_cost_management: bool,
}

impl FeatureGates {
    /// The defaults as text, in the form the setting takes.
    pub const DEFAULT: &'static str = "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,\
                                       NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false,\
                                       PodDeletionCostManagement=false";
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            node_repair: false,
            reserved_capacity: true,
            spot_to_spot_consolidation: false,
            node_overlay: false,
            static_capacity: false,
            capacity_buffer: false,
            pod_deletion_cost_management: false,
        }
    }
}

impl FromStr for FeatureGates {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut gates = Self::default();
        for (name, value) in parse_feature_gates(s)? {
            match name.as_str() {
                "NodeRepair" => gates.node_repair = value,
                "ReservedCapacity" => gates.reserved_capacity = value,
                "SpotToSpotConsolidation" => gates.spot_to_spot_consolidation = value,
                "NodeOverlay" => gates.node_overlay = value,
                "StaticCapacity" => gates.static_capacity = value,
                "CapacityBuffer" => gates.capacity_buffer = value,
                "PodDeletionCostManagement" => gates.pod_deletion_cost_management = value,
                _ => {} // unknown gates are ignored, as upstream does
            }
        }
        Ok(gates)
    }
}

impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NodeRepair={},ReservedCapacity={},SpotToSpotConsolidation={},NodeOverlay={},StaticCapacity={},CapacityBuffer={},\
             PodDeletionCostManagement={}",
            self.node_repair,
            self.reserved_capacity,
            self.spot_to_spot_consolidation,
            self.node_overlay,
            self.static_capacity,
            self.capacity_buffer,
            self.pod_deletion_cost_management
        )
    }
}

/// Settings of every provider.
#[derive(Debug, Clone, Args)]
pub struct CoreSettings {
    /// End a provisioning batch after this long without a new pending pod.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = duration)]
    pub batch_idle_duration: Duration,
    /// Longest window of one provisioning batch (the nomination window is max(2x this, 10s)).
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = duration)]
    pub batch_max_duration: Duration,
    /// The settings that shape decisions, which `simulate` takes too.
    #[command(flatten)]
    pub decisions: DecisionSettings,
    // CPU requests of the controller in millicores: the scheduler's threads (`scheduler_parallelism`).
    #[arg(long, env = "CPU_REQUESTS", default_value_t = 1000, allow_negative_numbers = true, help = format!(
        "CPU requests of the controller in millicores. Provisioning and disruption simulations check the existing \
         nodes for each pod on ceil(CPU_REQUESTS / 1000) threads when at least {} nodes are left to check \
         (upstream's scheduler concurrency); decisions are the same whatever the count. Values <= 0 mean 1000",
        karpenter_scheduler::scheduler::PARALLEL_MIN_EXISTING))]
    pub cpu_requests: i64,
    // The help comes from the one list of settings without effect (karpenter_api::settings::COMPATIBILITY_ONLY).
    #[arg(long, env = "MEMORY_LIMIT", default_value_t = -1, allow_negative_numbers = true,
          help = compatibility_help("MEMORY_LIMIT", "Memory limit of the controller in bytes; -1 means none"))]
    pub memory_limit: i64,
    /// Kubernetes client queries per second.
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = 200)]
    pub kube_client_qps: u32,
    /// Kubernetes client burst above the QPS rate.
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = 300)]
    pub kube_client_burst: u32,
    /// Port of the Prometheus /metrics endpoint.
    #[arg(long, env = "METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    /// Port of the /healthz and /readyz probes.
    #[arg(long, env = "HEALTH_PROBE_PORT", default_value_t = 8081)]
    pub health_probe_port: u16,
    /// Serve profiles on the metrics server, at upstream's paths: /debug/pprof/ (index), /debug/pprof/profile?seconds=N (CPU over N seconds, default 30, at most 600; pprof protobuf, one at a time) and /debug/pprof/heap (a build with the jemalloc-profiling feature started with _RJEM_MALLOC_CONF=prof:true; otherwise 501). Off: those paths answer 404
    #[arg(long, env = "ENABLE_PROFILING", default_value = "false", action = ArgAction::Set, value_parser = parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub enable_profiling: bool,
    /// Log level: debug, info or error (empty: info).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: LogLevel,
    /// Where logs go, comma-separated (stdout, stderr or file paths).
    #[arg(long, env = "LOG_OUTPUT_PATHS", default_value = "stdout", value_delimiter = ',')]
    pub log_output_paths: Vec<String>,
    /// Where error logs go, comma-separated (stdout, stderr or file paths).
    #[arg(long, env = "LOG_ERROR_OUTPUT_PATHS", default_value = "stderr", value_delimiter = ',')]
    pub log_error_output_paths: Vec<String>,
    /// Run every controller without first acquiring the leader-election Lease.
    #[arg(long, env = "DISABLE_LEADER_ELECTION", default_value = "false", action = ArgAction::Set, value_parser = parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, env = "LEADER_ELECTION_NAME", default_value = "karpenter-leader-election")]
    pub leader_election_name: String,
    /// Namespace of the leader-election Lease; empty means the controller's own namespace.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "")]
    pub leader_election_namespace: String,
    /// true: a standby starts watching the cluster only once it wins the Lease. false (upstream's warmup): the cluster-state watchers start before the leader election, so a standby's state is synced when it takes over; only the controllers wait for the Lease. No effect with DISABLE_LEADER_ELECTION
    #[arg(long, env = "DISABLE_CONTROLLER_WARMUP", default_value = "true", action = ArgAction::Set, value_parser = parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_controller_warmup: bool,
    /// Turn off the pod, node and NodePool state metrics (the metrics.pod, metrics.node and metrics.nodepool controllers) and the NodeClaim, NodePool and Node status-condition and termination metrics (operator_nodeclaim_*, operator_nodepool_*, operator_node_*), as upstream. The provider's node-class ones and the cluster-state gauges stay
    #[arg(long, env = "DISABLE_CLUSTER_STATE_OBSERVABILITY", default_value = "false", action = ArgAction::Set, value_parser = parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_cluster_state_observability: bool,
    /// With the NodeRepair gate on: repair unhealthy nodes as v1.14 did (forceful deletion, no replacement first, no budget) instead of as a disruption method within the Unhealthy budget
    #[arg(long, env = "LEGACY_NODE_REPAIR", default_value = "false", action = ArgAction::Set, value_parser = parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub legacy_node_repair: bool,
    /// Namespace the controller runs in (set by the Helm chart from the downward API).
    #[arg(long, env = "SYSTEM_NAMESPACE", default_value = "kube-system")]
    pub system_namespace: String,
}

/// The settings that shape what Karpenter decides (which nodes to launch, which to disrupt) and that the what-if
/// simulator reproduces: declared once here and flattened into [`CoreSettings`] (the controller's `run`) and into
/// `simulate`'s arguments, so both read a value with the same flag, variable, default and parser. A setting of
/// the controller that changes decisions but that simulate does not model belongs in [`CoreSettings`] instead
/// (the binary's test of the two commands lists those).
#[derive(Debug, Clone, Args)]
pub struct DecisionSettings {
    /// Feature gates as Name=bool pairs separated by commas; unknown names are ignored.
    #[arg(long, env = "FEATURE_GATES", value_name = "GATES", default_value = FeatureGates::DEFAULT)]
    pub feature_gates: FeatureGates,
    /// Respect or Ignore preferred affinities and ScheduleAnyway topology spreads.
    #[arg(long, env = "PREFERENCE_POLICY", value_name = "POLICY", default_value = "Respect")]
    pub preference_policy: PreferencePolicy,
    /// Strict or BestEffort: whether a NodeClaim may launch when minValues cannot be met.
    #[arg(long, env = "MIN_VALUES_POLICY", value_name = "POLICY", default_value = "Strict")]
    pub min_values_policy: MinValuesPolicy,
    /// Leave pods that request DRA ResourceClaims out of provisioning; false simulates device allocation (docs/dra.md).
    #[arg(long, env = "IGNORE_DRA_REQUESTS", default_value = "true", action = ArgAction::Set, value_parser = parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub ignore_dra_requests: bool,
    /// Treat other autoscalers' annotations as karpenter.sh/do-not-disrupt: a pod's cluster-autoscaler.kubernetes.io/safe-to-evict=false, a node's cluster-autoscaler.kubernetes.io/scale-down-disabled=true, and their node-autoscaling.kubernetes.io forms (safe-to-evict, do-not-disrupt). Not in upstream Karpenter (docs/beyond-upstream.md)
    #[arg(long, env = "HONOR_AUTOSCALER_ANNOTATIONS", default_value = "true", action = ArgAction::Set, value_parser = parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub honor_autoscaler_annotations: bool,
    /// Cluster-wide limits over every NodePool, as resource=quantity pairs separated by commas (cpu, memory, ephemeral-storage, pods, nodes, huge pages such as hugepages-2Mi, or a domain-prefixed extended resource such as nvidia.com/gpu; e.g. cpu=2000,memory=8Ti,nodes=300). Enforced in provisioning like a NodePool's limits, counting every NodePool's nodes and in-flight NodeClaims; empty means none. Not in upstream Karpenter (docs/beyond-upstream.md)
    #[arg(long, env = "CLUSTER_LIMITS", value_name = "LIMITS", default_value = "", value_parser = parse_cluster_limits)]
    pub cluster_limits: ResourceList,
    /// Scheduler config, a YAML or JSON document decoded strictly: {podTopologySpread: {defaultConstraints: [...]}}. The default topology spread constraints are given, in the scheduling simulation only, to pods that declare none, with a selector derived from the Services and ReplicaSet/StatefulSet/ReplicationController selecting the pod as kube-scheduler derives it. Empty: none (kube-scheduler's System defaults are not applied). A malformed config stops the controller at start-up
    #[arg(long, env = "SCHEDULER_CONFIG", value_name = "CONFIG", default_value = "", value_parser = parse_scheduler_config)]
    pub scheduler_config: SchedulerConfig,
    /// Minimum saving of a consolidation move that launches a replacement or removes several nodes, for every NodePool: a percentage of the candidates' price (5%) or an amount per hour ($0.02/h). A NodePool's karpenter-rs.io/consolidation-min-savings annotation may ask more (the stricter applies); deletes of single nodes and empty nodes are never held. Empty: none, as upstream. Not in upstream Karpenter (docs/beyond-upstream.md)
    #[arg(long, env = "CONSOLIDATION_MIN_SAVINGS", value_name = "SAVING", default_value = "")]
    pub consolidation_min_savings: MinSavingsSetting,
    /// How many cheaper instance types single-node spot-to-spot consolidation needs before it replaces a spot node, and keeps as the replacement's options (upstream's fixed 15; at least 1). Not in upstream Karpenter as a setting (docs/beyond-upstream.md)
    #[arg(long, env = "SPOT_TO_SPOT_MIN_INSTANCE_TYPES", value_name = "N",
          default_value_t = karpenter_disruption::SPOT_TO_SPOT_MIN_TYPES, value_parser = parse_spot_to_spot_min_instance_types)]
    pub spot_to_spot_min_instance_types: usize,
}

/// `SPOT_TO_SPOT_MIN_INSTANCE_TYPES`: a whole number of instance types, at least 1 (with none kept the replacement
/// would have nothing to launch).
pub fn parse_spot_to_spot_min_instance_types(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s:?} is not a number of instance types (a whole number, at least 1)")),
    }
}

fn parse_scheduler_config(s: &str) -> Result<SchedulerConfig, String> {
    SchedulerConfig::parse(s).map_err(|e| e.to_string())
}

impl CoreSettings {
    /// Applies upstream's start-up normalisation: `CPU_REQUESTS <= 0` means 1000 millicores.
    pub fn normalized(mut self) -> Self {
        if self.cpu_requests <= 0 {
            self.cpu_requests = 1000;
        }
        self
    }

    /// The Lease namespace: the configured one, or the controller's own.
    pub fn leader_election_namespace(&self) -> &str {
        if self.leader_election_namespace.is_empty() { &self.system_namespace } else { &self.leader_election_namespace }
    }

    /// The client these settings describe (`KUBE_CLIENT_QPS`, `KUBE_CLIENT_BURST`), with our user agent and an
    /// inferred configuration.
    pub fn client_options(&self) -> karpenter_runtime::client::ClientOptions {
        karpenter_runtime::client::ClientOptions::new(self.kube_client_qps, self.kube_client_burst)
    }

    /// The Lease these settings name (`LEADER_ELECTION_NAME`, [`CoreSettings::leader_election_namespace`]), held
    /// as `identity`, with controller-runtime's timings.
    pub fn leader_election(&self, identity: String) -> karpenter_runtime::leader::LeaderElectionConfig {
        karpenter_runtime::leader::LeaderElectionConfig::new(
            self.leader_election_name.clone(),
            self.leader_election_namespace().to_string(),
            identity,
        )
    }

    /// The logger these settings describe (`LOG_LEVEL`, `LOG_OUTPUT_PATHS`, `LOG_ERROR_OUTPUT_PATHS`).
    pub fn log_config(&self) -> karpenter_runtime::logging::LogConfig {
        karpenter_runtime::logging::LogConfig {
            level: self.log_level,
            output_paths: self.log_output_paths.clone(),
            error_output_paths: self.log_error_output_paths.clone(),
        }
    }

    /// The nomination window: max(2 x BATCH_MAX_DURATION, 10s).
    pub fn nomination_window(&self) -> Duration {
        (self.batch_max_duration * 2).max(Duration::from_secs(10))
    }

    /// Scheduler parallelism derived from CPU_REQUESTS: ceil(millicores / 1000).
    pub fn scheduler_parallelism(&self) -> usize {
        let millis = if self.cpu_requests <= 0 { 1000 } else { self.cpu_requests };
        usize::try_from((millis + 999) / 1000).unwrap_or(1).max(1)
    }
}

/// One row of the settings reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingDoc {
    pub env: String,
    pub flag: String,
    pub default: String,
    pub help: String,
}

/// The settings of a `clap::Args` type as rows, in declaration order.
pub fn setting_docs<A: Args>() -> Vec<SettingDoc> {
    let command = A::augment_args(Command::new("settings"));
    command
        .get_arguments()
        .filter_map(|arg| {
            let env = arg.get_env()?.to_string_lossy().into_owned();
            let flag = format!("--{}", arg.get_long()?);
            let default =
                arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect::<Vec<_>>().join(",");
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            Some(SettingDoc { env, flag, default, help })
        })
        .collect()
}

/// One section of the settings reference (`docs/settings.md`, composed by the binary): a heading and a table of
/// `rows` (from [`setting_docs`]).
pub fn reference_section(title: &str, rows: &[SettingDoc]) -> String {
    let mut out = format!("\n## {title}\n\n| Environment variable | Flag | Default | Meaning |\n|---|---|---|---|\n");
    for row in rows {
        let default = if row.default.is_empty() { "\"\"".to_string() } else { format!("`{}`", row.default) };
        out.push_str(&format!("| `{}` | `{}` | {} | {} |\n", row.env, row.flag, default, row.help.replace('|', "\\|")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        core: CoreSettings,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        // Parses flags only; environment variables are not set in unit tests (set_var is banned), so each
        // test's defaults come from the declarations. Env lookup itself is clap's and covered by its tests.
        Cli::try_parse_from(std::iter::once("karpenter-controller").chain(args.iter().copied()))
    }

    /// The runtime's configurations carry the settings they are built from: the Lease defaults to the system
    /// namespace, the client to the settings' rate, the logger to its level and paths.
    #[test]
    fn runtime_configurations_come_from_the_settings() {
        let core = parse(&[]).expect("defaults").core;
        let lease = core.leader_election("me".into());
        assert_eq!((lease.name.as_str(), lease.namespace.as_str()), ("karpenter-leader-election", "kube-system"));
        assert_eq!((lease.identity.as_str(), lease.lease_duration), ("me", Duration::from_secs(15)));
        let core = parse(&[
            "--leader-election-namespace=elsewhere",
            "--kube-client-qps=7",
            "--kube-client-burst=9",
            "--log-level=debug",
            "--log-output-paths=stderr,/tmp/x",
        ])
        .expect("accepted")
        .core;
        assert_eq!(core.leader_election("me".into()).namespace, "elsewhere");
        let client = core.client_options();
        assert_eq!(
            (client.qps, client.burst, client.user_agent.as_str()),
            (7, 9, karpenter_runtime::client::USER_AGENT)
        );
        let log = core.log_config();
        assert_eq!((log.level, log.output_paths), (LogLevel::Debug, vec!["stderr".to_string(), "/tmp/x".to_string()]));
        assert_eq!(log.error_output_paths, ["stderr"]);
    }

    #[test]
    fn booleans_parse_as_go_and_an_empty_log_level_is_info() {
        let core = parse(&[
            "--enable-profiling=True",
            "--disable-controller-warmup=0",
            "--disable-leader-election=T",
            "--ignore-dra-requests=FALSE",
            "--legacy-node-repair=1",
            "--log-level=",
        ])
        .unwrap()
        .core;
        assert!(core.enable_profiling && core.disable_leader_election && core.legacy_node_repair);
        assert!(!core.disable_controller_warmup && !core.decisions.ignore_dra_requests);
        assert_eq!(core.log_level, LogLevel::Info);
        // What Go refuses stays refused, with the accepted forms named.
        let err = parse(&["--enable-profiling=yes"]).unwrap_err().to_string();
        assert!(err.contains("is not a boolean"), "{err}");
        assert!(parse(&["--log-level=verbose"]).is_err());
    }

    #[test]
    fn scheduler_config_with_min_domains_on_schedule_anyway_starts() {
        // Upstream accepts it; minDomains has no effect there and is dropped with a warning.
        let config = "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, \
                      whenUnsatisfiable: ScheduleAnyway, minDomains: 3}]}";
        let core = parse(&["--scheduler-config", config]).expect("accepted").core;
        assert_eq!(core.decisions.scheduler_config.default_constraints.len(), 1);
        assert_eq!(core.decisions.scheduler_config.default_constraints[0].min_domains, None);
        assert_eq!(core.decisions.scheduler_config.warnings.len(), 1);
        assert!(core.decisions.scheduler_config.warnings[0].contains("topology.kubernetes.io/zone"));
    }

    #[test]
    fn defaults_are_upstreams() {
        let cli = parse(&[]).unwrap();
        let core = cli.core;
        assert_eq!(core.batch_idle_duration, Duration::from_secs(1));
        assert_eq!(core.batch_max_duration, Duration::from_secs(10));
        assert_eq!(core.decisions.feature_gates, FeatureGates::default());
        assert!(
            core.decisions.feature_gates.reserved_capacity && !core.decisions.feature_gates.spot_to_spot_consolidation
        );
        assert_eq!(core.decisions.preference_policy, PreferencePolicy::Respect);
        assert_eq!(core.decisions.min_values_policy, MinValuesPolicy::Strict);
        assert_eq!((core.kube_client_qps, core.kube_client_burst), (200, 300));
        assert_eq!((core.metrics_port, core.health_probe_port), (8080, 8081));
        assert_eq!(core.log_level, LogLevel::Info);
        assert_eq!(core.log_output_paths, ["stdout"]);
        assert!(!core.disable_leader_election);
        assert_eq!(core.leader_election_name, "karpenter-leader-election");
        assert!(core.decisions.ignore_dra_requests && core.disable_controller_warmup);
        assert!(core.decisions.honor_autoscaler_annotations, "on by default (beyond upstream)");
        assert!(core.decisions.cluster_limits.is_empty(), "no cluster limit by default");
        assert_eq!(core.decisions.consolidation_min_savings, MinSavingsSetting(None), "no minimum saving by default");
        assert_eq!(core.decisions.spot_to_spot_min_instance_types, 15, "upstream's constant");
        assert_eq!(core.nomination_window(), Duration::from_secs(20));
    }

    #[test]
    fn flags_override_and_bools_take_go_forms() {
        let cli = parse(&[
            "--batch-idle-duration=500ms",
            "--batch-max-duration",
            "2m",
            "--disable-leader-election",
            "--ignore-dra-requests=false",
            "--preference-policy=Ignore",
            "--min-values-policy=BestEffort",
            "--feature-gates=SpotToSpotConsolidation=true, Unknown=true",
            "--log-output-paths=stdout,/var/log/k.log",
            "--cpu-requests=-5",
            "--honor-autoscaler-annotations=false",
            "--cluster-limits=cpu=2000, memory=8Ti,nodes=300",
        ])
        .unwrap();
        let core = cli.core.normalized();
        assert_eq!(core.batch_idle_duration, Duration::from_millis(500));
        assert_eq!(core.batch_max_duration, Duration::from_secs(120));
        assert_eq!(core.nomination_window(), Duration::from_secs(240));
        assert!(core.disable_leader_election);
        assert!(!core.decisions.ignore_dra_requests);
        assert_eq!(core.decisions.preference_policy, PreferencePolicy::Ignore);
        assert_eq!(core.decisions.min_values_policy, MinValuesPolicy::BestEffort);
        // Disruption's simulations read both policies, as upstream's do (`SimulateScheduling`).
        let disruption = crate::disruption::DisruptionSettings::from_settings(&core);
        assert_eq!(disruption.preference_policy, PreferencePolicy::Ignore);
        assert_eq!(disruption.min_values_policy, MinValuesPolicy::BestEffort);
        assert!(core.decisions.feature_gates.spot_to_spot_consolidation);
        assert!(core.decisions.feature_gates.reserved_capacity, "gates not named keep their defaults");
        assert_eq!(core.log_output_paths, ["stdout", "/var/log/k.log"]);
        assert_eq!(core.cpu_requests, 1000, "CPU_REQUESTS <= 0 means 1000");
        assert_eq!(core.scheduler_parallelism(), 1);
        assert!(!core.decisions.honor_autoscaler_annotations);
        let disruption = crate::disruption::DisruptionSettings::from_settings(&core);
        assert!(!disruption.honor_autoscaler_annotations, "the off switch reaches the disruption loop");
        assert_eq!(core.decisions.cluster_limits.get_or_zero("cpu").value(), Some(2000));
        assert_eq!(core.decisions.cluster_limits.get_or_zero("nodes").value(), Some(300));
        assert_eq!(core.decisions.cluster_limits.len(), 3);
        assert_eq!(
            disruption.cluster_limits, core.decisions.cluster_limits,
            "disruption's simulations honour them too"
        );
        let provisioner = crate::provisioner::ProvisionerOptions::from_settings(&core);
        assert_eq!(provisioner.cluster_limits, core.decisions.cluster_limits);
    }

    /// Both consolidation settings reach the disruption loop and, through it, every pass's options.
    #[test]
    fn consolidation_settings_reach_the_disruption_passes() {
        let core = parse(&["--consolidation-min-savings= 7.5% ", "--spot-to-spot-min-instance-types=4"]).unwrap().core;
        let savings = karpenter_api::labels::consolidation_min_savings::MinSavings::Percent(7.5);
        assert_eq!(core.decisions.consolidation_min_savings, MinSavingsSetting(Some(savings)));
        let disruption = crate::disruption::DisruptionSettings::from_settings(&core);
        assert_eq!(disruption.consolidation_min_savings, Some(savings));
        assert_eq!(disruption.spot_to_spot_min_instance_types, 4);
        let amount = parse(&["--consolidation-min-savings=$0.02/h"]).unwrap().core.decisions.consolidation_min_savings;
        assert_eq!(amount.0, Some(karpenter_api::labels::consolidation_min_savings::MinSavings::PerHour(0.02)));
    }

    #[test]
    fn cpu_requests_size_the_threads_of_provisioning_and_disruption_simulations() {
        for (millicores, threads) in [("1000", 1), ("1001", 2), ("2500", 3), ("8000", 8), ("0", 1), ("-3", 1)] {
            let core = parse(&[&format!("--cpu-requests={millicores}")]).unwrap().core.normalized();
            assert_eq!(core.scheduler_parallelism(), threads, "{millicores}");
            let provisioner = crate::provisioner::ProvisionerOptions::from_settings(&core);
            assert_eq!(provisioner.scheduler_options().parallelism, threads, "{millicores}: provisioning");
            let disruption = crate::disruption::DisruptionSettings::from_settings(&core);
            assert_eq!(disruption.scheduler_parallelism, threads, "{millicores}: disruption");
        }
        assert!(parse(&["--cpu-requests=1.5"]).is_err(), "millicores are a whole number, as upstream's int64");
    }

    #[test]
    fn bad_values_are_rejected_with_the_setting_named() {
        for (args, needle) in [
            (&["--log-level=verbose"][..], "not a log level"),
            (&["--preference-policy=respect"][..], "not a preference policy"),
            (&["--min-values-policy=Loose"][..], "not a min-values policy"),
            (&["--feature-gates=NodeRepair"][..], "must have the form Name=true"),
            (&["--feature-gates=NodeRepair=yes"][..], "\"yes\" is not a boolean"),
            (&["--batch-idle-duration=10"][..], "is not a duration"),
            (&["--metrics-port=70000"][..], "70000"),
            (&["--cluster-limits=cpus=10"][..], "entry 1 (\"cpus=10\"): unknown resource \"cpus\""),
            (&["--cluster-limits=cpu=10,memory=-1"][..], "entry 2 (\"memory=-1\"): a limit cannot be negative"),
            (&["--consolidation-min-savings=5"][..], "\"5\" is not a minimum saving"),
            (&["--consolidation-min-savings=120%"][..], "\"120%\" is more than 100%"),
            (&["--spot-to-spot-min-instance-types=0"][..], "\"0\" is not a number of instance types"),
            (&["--spot-to-spot-min-instance-types=many"][..], "\"many\" is not a number of instance types"),
        ] {
            let err = parse(args).expect_err(needle).to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn feature_gates_round_trip_through_display() {
        let gates: FeatureGates = "NodeRepair=true,CapacityBuffer=true".parse().unwrap();
        assert_eq!(gates.to_string().parse::<FeatureGates>().unwrap(), gates);
        assert_eq!(FeatureGates::DEFAULT.parse::<FeatureGates>().unwrap(), FeatureGates::default());
        assert_eq!("".parse::<FeatureGates>().unwrap(), FeatureGates::default());
        let gates: FeatureGates = "PodDeletionCostManagement=true".parse().unwrap();
        assert!(gates.pod_deletion_cost_management && !FeatureGates::default().pod_deletion_cost_management);
        assert_eq!(gates.to_string().parse::<FeatureGates>().unwrap(), gates);
    }

    #[test]
    fn every_setting_has_an_env_var_and_help() {
        let docs = setting_docs::<CoreSettings>();
        assert!(docs.len() >= 20, "{}", docs.len());
        for doc in &docs {
            assert!(!doc.help.is_empty(), "{} has no help", doc.env);
            assert_eq!(doc.env, doc.env.to_uppercase());
        }
        for expected in ["BATCH_IDLE_DURATION", "FEATURE_GATES", "KUBE_CLIENT_QPS"] {
            assert!(docs.iter().any(|d| d.env == expected), "{expected}");
        }
        let section = reference_section("Core", &docs);
        assert!(section.starts_with("\n## Core\n"), "{section}");
        assert!(section.contains("| `FEATURE_GATES` | `--feature-gates` |"), "{section}");
    }
}
