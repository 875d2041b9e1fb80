//! Controller settings: every setting is a flag that also reads an environment variable, with upstream
//! Karpenter's names and defaults, so an operator's Helm values and env
//! carry over unchanged. The environment gives the default; a flag overrides it.
//!
//! [`CoreSettings`] apply to every provider; [`AwsSettings`] are added by the binary when it runs the AWS
//! provider. Both are `clap::Args`, so the binary flattens them into its `run` command, and
//! [`reference_markdown`] renders the checked-in settings reference (`docs/settings.md`) from the same
//! definitions, so the docs cannot drift from the code.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::{ArgAction, Args, Command};
use karpenter_api::duration::parse_go_duration;
// The policies are the scheduler's own types: settings parse into what the scheduler reads, with no mapping.
pub use karpenter_requirements::{MinValuesPolicy, PreferencePolicy};

/// A setting that cannot be used, named by its environment variable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("{setting}: {message}")]
    Invalid { setting: &'static str, message: String },
}

fn invalid(setting: &'static str, message: impl Into<String>) -> SettingsError {
    SettingsError::Invalid { setting, message: message.into() }
}

fn duration(s: &str) -> Result<Duration, String> {
    parse_go_duration(s).map_err(|e| format!("{s:?} is not a duration such as 10s or 1m30s: {e}"))
}

/// Log verbosity (`LOG_LEVEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Error,
}

impl FromStr for LogLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "debug" => Ok(Self::Debug),
            "info" => Ok(Self::Info),
            "error" => Ok(Self::Error),
            _ => Err(format!("{s:?} is not a log level; use debug, info or error")),
        }
    }
}

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
}

impl FeatureGates {
    /// The defaults as text, in the form the setting takes.
    pub const DEFAULT: &'static str = "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,\
                                       NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false";
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
        }
    }
}

/// Parses `Name=bool,Name=bool`: the gate list syntax shared by `FEATURE_GATES` and `AWS_FEATURE_GATES`.
/// Whitespace around entries is allowed, empty entries are skipped; a malformed entry is an error.
fn parse_gate_list(s: &str) -> Result<BTreeMap<String, bool>, String> {
    let mut gates = BTreeMap::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((name, value)) = entry.split_once('=') else {
            return Err(format!("feature gate {entry:?} must have the form Name=true or Name=false"));
        };
        let value = match value.trim() {
            "true" | "True" | "TRUE" => true,
            "false" | "False" | "FALSE" => false,
            other => return Err(format!("feature gate {}: {other:?} is not true or false", name.trim())),
        };
        gates.insert(name.trim().to_string(), value);
    }
    Ok(gates)
}

impl FromStr for FeatureGates {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut gates = Self::default();
        for (name, value) in parse_gate_list(s)? {
            match name.as_str() {
                "NodeRepair" => gates.node_repair = value,
                "ReservedCapacity" => gates.reserved_capacity = value,
                "SpotToSpotConsolidation" => gates.spot_to_spot_consolidation = value,
                "NodeOverlay" => gates.node_overlay = value,
                "StaticCapacity" => gates.static_capacity = value,
                "CapacityBuffer" => gates.capacity_buffer = value,
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
            "NodeRepair={},ReservedCapacity={},SpotToSpotConsolidation={},NodeOverlay={},StaticCapacity={},CapacityBuffer={}",
            self.node_repair,
            self.reserved_capacity,
            self.spot_to_spot_consolidation,
            self.node_overlay,
            self.static_capacity,
            self.capacity_buffer
        )
    }
}

/// The AWS feature gates (`AWS_FEATURE_GATES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AwsFeatureGates {
    pub node_class_cel: bool,
}

impl FromStr for AwsFeatureGates {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut gates = Self::default();
        for (name, value) in parse_gate_list(s)? {
            if name == "NodeClassCEL" {
                gates.node_class_cel = value;
            }
        }
        Ok(gates)
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
    /// Feature gates as Name=bool pairs separated by commas; unknown names are ignored.
    #[arg(long, env = "FEATURE_GATES", default_value = FeatureGates::DEFAULT)]
    pub feature_gates: FeatureGates,
    /// Respect or Ignore preferred affinities and ScheduleAnyway topology spreads.
    #[arg(long, env = "PREFERENCE_POLICY", default_value = "Respect")]
    pub preference_policy: PreferencePolicy,
    /// Strict or BestEffort: whether a NodeClaim may launch when minValues cannot be met.
    #[arg(long, env = "MIN_VALUES_POLICY", default_value = "Strict")]
    pub min_values_policy: MinValuesPolicy,
    /// Leave pods that request DRA ResourceClaims out of provisioning.
    #[arg(long, env = "IGNORE_DRA_REQUESTS", default_value = "true", action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub ignore_dra_requests: bool,
    /// CPU requests of the controller in millicores; sizes the scheduler's parallelism. Values <= 0 mean 1000.
    #[arg(long, env = "CPU_REQUESTS", default_value_t = 1000, allow_negative_numbers = true)]
    pub cpu_requests: i64,
    /// Memory limit of the controller in bytes; -1 means none.
    #[arg(long, env = "MEMORY_LIMIT", default_value_t = -1, allow_negative_numbers = true)]
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
    /// Serve profiling endpoints on the metrics server.
    #[arg(long, env = "ENABLE_PROFILING", default_value = "false", action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub enable_profiling: bool,
    /// Log level: debug, info or error.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: LogLevel,
    /// Where logs go, comma-separated (stdout, stderr or file paths).
    #[arg(long, env = "LOG_OUTPUT_PATHS", default_value = "stdout", value_delimiter = ',')]
    pub log_output_paths: Vec<String>,
    /// Where error logs go, comma-separated (stdout, stderr or file paths).
    #[arg(long, env = "LOG_ERROR_OUTPUT_PATHS", default_value = "stderr", value_delimiter = ',')]
    pub log_error_output_paths: Vec<String>,
    /// Run every controller without first acquiring the leader-election Lease.
    #[arg(long, env = "DISABLE_LEADER_ELECTION", default_value = "false", action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_leader_election: bool,
    /// Name of the leader-election Lease.
    #[arg(long, env = "LEADER_ELECTION_NAME", default_value = "karpenter-leader-election")]
    pub leader_election_name: String,
    /// Namespace of the leader-election Lease; empty means the controller's own namespace.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "")]
    pub leader_election_namespace: String,
    /// Do not start informers before winning the Lease.
    #[arg(long, env = "DISABLE_CONTROLLER_WARMUP", default_value = "true", action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_controller_warmup: bool,
    /// Turn off the pod, node and NodePool state metrics and the status-condition metrics.
    #[arg(long, env = "DISABLE_CLUSTER_STATE_OBSERVABILITY", default_value = "false", action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_cluster_state_observability: bool,
    /// Namespace the controller runs in (set by the Helm chart from the downward API).
    #[arg(long, env = "SYSTEM_NAMESPACE", default_value = "kube-system")]
    pub system_namespace: String,
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

/// Settings of the AWS provider.
#[derive(Debug, Clone, Args)]
pub struct AwsSettings {
    /// Name of the cluster: used in tags and discovery. Required.
    #[arg(long, env = "CLUSTER_NAME", default_value = "")]
    pub cluster_name: String,
    /// API server endpoint handed to nodes; read with EKS DescribeCluster when empty.
    #[arg(long, env = "CLUSTER_ENDPOINT", default_value = "")]
    pub cluster_endpoint: String,
    /// Cluster CA bundle handed to nodes; taken from the controller's own TLS config when empty.
    #[arg(long, env = "CLUSTER_CA_BUNDLE", default_value = "")]
    pub cluster_ca_bundle: String,
    /// Discover the Kubernetes version and service CIDR through the EKS API.
    #[arg(long, env = "EKS_CONTROL_PLANE", default_value = "false", action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub eks_control_plane: bool,
    /// The VPC has no internet access: no Pricing API (on-demand prices from PRICE_FILE, else the estimate) and
    /// no instance-profile GC.
    #[arg(long, env = "ISOLATED_VPC", default_value = "false", action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub isolated_vpc: bool,
    /// JSON price file (as `karpenter-controller prices` writes it) loaded at start; the controller refuses to
    /// start if it is malformed or has no on-demand prices for the region. The initial prices, and in an
    /// isolated VPC the only on-demand source. Empty: the Pricing API, or the documented estimate.
    #[arg(long, env = "PRICE_FILE", default_value = "", value_name = "FILE")]
    pub price_file: String,
    /// SQS queue name for interruption events; empty disables interruption handling.
    #[arg(long, env = "INTERRUPTION_QUEUE", default_value = "")]
    pub interruption_queue: String,
    /// Fraction of memory capacity discounted until a node reports its own capacity.
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value_t = 0.075)]
    pub vm_memory_overhead_percent: f64,
    /// ENIs kept out of the max-pods computation.
    #[arg(long = "reserved-enis", env = "RESERVED_ENIS", default_value_t = 0)]
    pub reserved_enis: u32,
    /// Skip the dry-run authorization checks of EC2NodeClass resolution.
    #[arg(long, env = "DISABLE_DRY_RUN", default_value = "false", action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_dry_run: bool,
    /// Honour Application Recovery Controller zonal shifts.
    #[arg(long, env = "ENABLE_ZONAL_SHIFT", default_value = "false", action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub enable_zonal_shift: bool,
    /// How long resolved AMIs are cached (at least 1m).
    #[arg(long, env = "AMI_REFRESH_INTERVAL", default_value = "1m", value_parser = duration)]
    pub ami_refresh_interval: Duration,
    /// How long resolved subnets are cached (at least 1m).
    #[arg(long, env = "SUBNET_REFRESH_INTERVAL", default_value = "1m", value_parser = duration)]
    pub subnet_refresh_interval: Duration,
    /// AWS feature gates as Name=bool pairs (NodeClassCEL).
    #[arg(long, env = "AWS_FEATURE_GATES", default_value = "NodeClassCEL=false")]
    pub aws_feature_gates: AwsFeatureGates,
}

impl AwsSettings {
    /// Checks what clap cannot: the required cluster name, ranges and minimum refresh intervals.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.cluster_name.trim().is_empty() {
            return Err(invalid("CLUSTER_NAME", "is required (the name of the EKS cluster)"));
        }
        if !(0.0..1.0).contains(&self.vm_memory_overhead_percent) || self.vm_memory_overhead_percent.is_nan() {
            return Err(invalid(
                "VM_MEMORY_OVERHEAD_PERCENT",
                format!("{} must be a fraction in [0, 1)", self.vm_memory_overhead_percent),
            ));
        }
        if !self.cluster_endpoint.is_empty() && !self.cluster_endpoint.starts_with("https://") {
            return Err(invalid("CLUSTER_ENDPOINT", format!("{:?} must be an https:// URL", self.cluster_endpoint)));
        }
        for (setting, value) in [
            ("AMI_REFRESH_INTERVAL", self.ami_refresh_interval),
            ("SUBNET_REFRESH_INTERVAL", self.subnet_refresh_interval),
        ] {
            if value < Duration::from_secs(60) {
                return Err(invalid(setting, format!("{value:?} is below the minimum of 1m")));
            }
        }
        Ok(())
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

/// Every environment variable the controller reads, core and AWS.
pub fn known_env_vars() -> Vec<String> {
    setting_docs::<CoreSettings>().into_iter().chain(setting_docs::<AwsSettings>()).map(|d| d.env).collect()
}

/// The settings reference, checked in as `docs/settings.md` and tested for drift.
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "# Settings\n\n\
         <!-- Generated from crates/karpenter-operator/src/settings.rs; do not edit. \
         Regenerate: UPDATE_DOCS=1 cargo test -p karpenter-operator --test settings_docs -->\n\n\
         Every setting is an environment variable and a flag of `karpenter-controller run`; the environment \
         gives the default and a flag overrides it. Names and defaults follow upstream Karpenter, so existing \
         Helm values and environments carry over.\n",
    );
    for (title, rows) in
        [("Core", setting_docs::<CoreSettings>()), ("AWS (with `--provider aws`)", setting_docs::<AwsSettings>())]
    {
        out.push_str(&format!(
            "\n## {title}\n\n| Environment variable | Flag | Default | Meaning |\n|---|---|---|---|\n"
        ));
        for row in rows {
            let default = if row.default.is_empty() { "\"\"".to_string() } else { format!("`{}`", row.default) };
            out.push_str(&format!(
                "| `{}` | `{}` | {} | {} |\n",
                row.env,
                row.flag,
                default,
                row.help.replace('|', "\\|")
            ));
        }
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
        #[command(flatten)]
        aws: AwsSettings,
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        // Parses flags only; environment variables are not set in unit tests (set_var is banned), so each
        // test's defaults come from the declarations. Env lookup itself is clap's and covered by its tests.
        Cli::try_parse_from(std::iter::once("karpenter-controller").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_are_upstreams() {
        let cli = parse(&[]).unwrap();
        let core = cli.core;
        assert_eq!(core.batch_idle_duration, Duration::from_secs(1));
        assert_eq!(core.batch_max_duration, Duration::from_secs(10));
        assert_eq!(core.feature_gates, FeatureGates::default());
        assert!(core.feature_gates.reserved_capacity && !core.feature_gates.spot_to_spot_consolidation);
        assert_eq!(core.preference_policy, PreferencePolicy::Respect);
        assert_eq!(core.min_values_policy, MinValuesPolicy::Strict);
        assert_eq!((core.kube_client_qps, core.kube_client_burst), (200, 300));
        assert_eq!((core.metrics_port, core.health_probe_port), (8080, 8081));
        assert_eq!(core.log_level, LogLevel::Info);
        assert_eq!(core.log_output_paths, ["stdout"]);
        assert!(!core.disable_leader_election);
        assert_eq!(core.leader_election_name, "karpenter-leader-election");
        assert!(core.ignore_dra_requests && core.disable_controller_warmup);
        assert_eq!(core.nomination_window(), Duration::from_secs(20));
        let aws = cli.aws;
        assert_eq!(aws.vm_memory_overhead_percent, 0.075);
        assert_eq!(aws.reserved_enis, 0);
        assert_eq!(aws.price_file, "", "no price file unless set");
        assert_eq!(aws.ami_refresh_interval, Duration::from_secs(60));
        assert!(!aws.aws_feature_gates.node_class_cel);
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
            "--reserved-enis=1",
            "--cluster-name=prod",
            "--price-file=/etc/karpenter/prices.json",
        ])
        .unwrap();
        let core = cli.core.normalized();
        assert_eq!(core.batch_idle_duration, Duration::from_millis(500));
        assert_eq!(core.batch_max_duration, Duration::from_secs(120));
        assert_eq!(core.nomination_window(), Duration::from_secs(240));
        assert!(core.disable_leader_election);
        assert!(!core.ignore_dra_requests);
        assert_eq!(core.preference_policy, PreferencePolicy::Ignore);
        assert_eq!(core.min_values_policy, MinValuesPolicy::BestEffort);
        assert!(core.feature_gates.spot_to_spot_consolidation);
        assert!(core.feature_gates.reserved_capacity, "gates not named keep their defaults");
        assert_eq!(core.log_output_paths, ["stdout", "/var/log/k.log"]);
        assert_eq!(core.cpu_requests, 1000, "CPU_REQUESTS <= 0 means 1000");
        assert_eq!(core.scheduler_parallelism(), 1);
        assert_eq!(cli.aws.reserved_enis, 1);
        assert_eq!(cli.aws.price_file, "/etc/karpenter/prices.json");
        cli.aws.validate().unwrap();
    }

    #[test]
    fn bad_values_are_rejected_with_the_setting_named() {
        for (args, needle) in [
            (&["--log-level=verbose"][..], "not a log level"),
            (&["--preference-policy=respect"][..], "not a preference policy"),
            (&["--min-values-policy=Loose"][..], "not a min-values policy"),
            (&["--feature-gates=NodeRepair"][..], "must have the form Name=true"),
            (&["--feature-gates=NodeRepair=yes"][..], "is not true or false"),
            (&["--batch-idle-duration=10"][..], "is not a duration"),
            (&["--metrics-port=70000"][..], "70000"),
        ] {
            let err = parse(args).expect_err(needle).to_string();
            assert!(err.contains(needle), "{args:?}: {err}");
        }
    }

    #[test]
    fn aws_validation() {
        let ok = parse(&["--cluster-name=prod"]).unwrap().aws;
        ok.validate().unwrap();
        let missing = parse(&[]).unwrap().aws;
        assert_eq!(
            missing.validate().unwrap_err().to_string(),
            "CLUSTER_NAME: is required (the name of the EKS cluster)"
        );
        let short = parse(&["--cluster-name=p", "--ami-refresh-interval=30s"]).unwrap().aws;
        assert!(short.validate().unwrap_err().to_string().starts_with("AMI_REFRESH_INTERVAL: "));
        let overhead = parse(&["--cluster-name=p", "--vm-memory-overhead-percent=1.5"]).unwrap().aws;
        assert!(overhead.validate().unwrap_err().to_string().starts_with("VM_MEMORY_OVERHEAD_PERCENT: "));
        let endpoint = parse(&["--cluster-name=p", "--cluster-endpoint=http://x"]).unwrap().aws;
        assert!(endpoint.validate().is_err());
    }

    #[test]
    fn feature_gates_round_trip_through_display() {
        let gates: FeatureGates = "NodeRepair=true,CapacityBuffer=true".parse().unwrap();
        assert_eq!(gates.to_string().parse::<FeatureGates>().unwrap(), gates);
        assert_eq!(FeatureGates::DEFAULT.parse::<FeatureGates>().unwrap(), FeatureGates::default());
        assert_eq!("".parse::<FeatureGates>().unwrap(), FeatureGates::default());
    }

    #[test]
    fn every_setting_has_an_env_var_and_help() {
        let docs = setting_docs::<CoreSettings>().into_iter().chain(setting_docs::<AwsSettings>()).collect::<Vec<_>>();
        assert!(docs.len() >= 35, "{}", docs.len());
        for doc in &docs {
            assert!(!doc.help.is_empty(), "{} has no help", doc.env);
            assert_eq!(doc.env, doc.env.to_uppercase());
        }
        let envs = known_env_vars();
        for expected in
            ["CLUSTER_NAME", "INTERRUPTION_QUEUE", "BATCH_IDLE_DURATION", "FEATURE_GATES", "KUBE_CLIENT_QPS"]
        {
            assert!(envs.iter().any(|e| e == expected), "{expected}");
        }
    }
}
