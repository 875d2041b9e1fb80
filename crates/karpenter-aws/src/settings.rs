//! The AWS provider's settings (`karpenter-controller run --provider aws`): flags that also read environment
//! variables, with upstream Karpenter's AWS names and defaults. The binary flattens [`AwsSettings`] into its
//! `run` command next to the core settings and renders both into the settings reference (`docs/settings.md`).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use clap::{ArgAction, Args};
use karpenter_api::settings::{SettingsError, parse_duration_setting as duration, parse_feature_gates, parse_go_bool};

use crate::pricing::{PriceFile, PriceFileError, PriceTable};

/// The AWS feature gates (`AWS_FEATURE_GATES`), upstream v1.15's, all alpha and off by default. Names this
/// version does not know are ignored, as upstream does, so a newer values file still starts; a malformed entry
/// is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AwsFeatureGates {
    /// `NodeClassCEL`: CEL expressions in an EC2NodeClass's `spec.kubelet`.
    pub node_class_cel: bool,
    /// `DRANVIDIAGPU`: DRA device templates for the NVIDIA GPU driver.
    pub dra_nvidia_gpu: bool,
    /// `DRAEFA`: DRA device templates for the EFA driver.
    pub dra_efa: bool,
    /// `RebootForRepair`: node repair may reboot an instance (`ec2:RebootInstances`) before replacing it.
    pub reboot_for_repair: bool,
}

/// `AWS_FEATURE_GATES`' default: every gate named, every gate off.
pub const DEFAULT_AWS_FEATURE_GATES: &str = "NodeClassCEL=false,DRANVIDIAGPU=false,DRAEFA=false,RebootForRepair=false";

impl FromStr for AwsFeatureGates {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut gates = Self::default();
        for (name, value) in parse_feature_gates(s)? {
            match name.as_str() {
                "NodeClassCEL" => gates.node_class_cel = value,
                "DRANVIDIAGPU" => gates.dra_nvidia_gpu = value,
                "DRAEFA" => gates.dra_efa = value,
                "RebootForRepair" => gates.reboot_for_repair = value,
                _ => {}
            }
        }
        Ok(gates)
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
    /// Take the cluster's Kubernetes version (for AMI aliases) from eks:DescribeCluster instead of the API server's /version, as upstream. DescribeCluster supplies the endpoint (when CLUSTER_ENDPOINT is empty), the CA bundle and the service CIDR whatever this says.
    #[arg(long, env = "EKS_CONTROL_PLANE", default_value = "false", action = ArgAction::Set, value_parser = parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub eks_control_plane: bool,
    /// The VPC has no internet access: no Pricing API (on-demand prices from PRICE_FILE, else the estimate) and
    /// no instance-profile GC.
    #[arg(long, env = "ISOLATED_VPC", default_value = "false", action = ArgAction::Set, value_parser = parse_go_bool,
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
    #[arg(long, env = "DISABLE_DRY_RUN", default_value = "false", action = ArgAction::Set, value_parser = parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub disable_dry_run: bool,
    /// Honour Application Recovery Controller zonal shifts.
    #[arg(long, env = "ENABLE_ZONAL_SHIFT", default_value = "false", action = ArgAction::Set, value_parser = parse_go_bool,
          num_args = 0..=1, default_missing_value = "true")]
    pub enable_zonal_shift: bool,
    /// How long resolved AMIs are cached (at least 1m).
    #[arg(long, env = "AMI_REFRESH_INTERVAL", default_value = "1m", value_parser = duration)]
    pub ami_refresh_interval: Duration,
    /// How long resolved subnets are cached (at least 1m).
    #[arg(long, env = "SUBNET_REFRESH_INTERVAL", default_value = "1m", value_parser = duration)]
    pub subnet_refresh_interval: Duration,
    /// How long resolved security groups are cached before DescribeSecurityGroups is called again (at least 1m).
    #[arg(long, env = "SECURITY_GROUP_REFRESH_INTERVAL", default_value = "1m", value_parser = duration)]
    pub security_group_refresh_interval: Duration,
    /// The AWS settings that shape decisions, which `simulate` takes too.
    #[command(flatten)]
    pub decisions: AwsDecisionSettings,
}

/// The AWS settings that shape what Karpenter decides and that the what-if simulator reproduces over its AWS
/// catalogue: declared once here and flattened into [`AwsSettings`] (the controller's `run`) and into
/// `simulate`'s arguments, as the operator's `DecisionSettings` are for the core settings.
#[derive(Debug, Clone, Args)]
pub struct AwsDecisionSettings {
    /// AWS feature gates as Name=bool pairs (NodeClassCEL, DRANVIDIAGPU, DRAEFA, RebootForRepair; unknown names
    /// are ignored).
    #[arg(long, env = "AWS_FEATURE_GATES", value_name = "GATES", default_value = DEFAULT_AWS_FEATURE_GATES)]
    pub aws_feature_gates: AwsFeatureGates,
}

impl AwsSettings {
    /// Checks what clap cannot: the required cluster name, ranges and minimum refresh intervals.
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.cluster_name.trim().is_empty() {
            return Err(SettingsError::invalid("CLUSTER_NAME", "is required (the name of the EKS cluster)"));
        }
        if !(0.0..1.0).contains(&self.vm_memory_overhead_percent) || self.vm_memory_overhead_percent.is_nan() {
            return Err(SettingsError::invalid(
                "VM_MEMORY_OVERHEAD_PERCENT",
                format!("{} must be a fraction in [0, 1)", self.vm_memory_overhead_percent),
            ));
        }
        if !self.cluster_endpoint.is_empty() && !self.cluster_endpoint.starts_with("https://") {
            return Err(SettingsError::invalid(
                "CLUSTER_ENDPOINT",
                format!("{:?} must be an https:// URL", self.cluster_endpoint),
            ));
        }
        for (setting, value) in [
            ("AMI_REFRESH_INTERVAL", self.ami_refresh_interval),
            ("SUBNET_REFRESH_INTERVAL", self.subnet_refresh_interval),
            ("SECURITY_GROUP_REFRESH_INTERVAL", self.security_group_refresh_interval),
        ] {
            if value < Duration::from_secs(60) {
                return Err(SettingsError::invalid(setting, format!("{value:?} is below the minimum of 1m")));
            }
        }
        Ok(())
    }
}

impl AwsSettings {
    /// `PRICE_FILE` as a path, when set.
    pub fn price_file_path(&self) -> Option<&Path> {
        Some(self.price_file.trim()).filter(|p| !p.is_empty()).map(Path::new)
    }

    /// Reads and checks `PRICE_FILE` (when set), so the binary can refuse a malformed file before it starts
    /// anything; whether the file prices the region is checked by [`AwsSettings::initial_prices`] once the region
    /// is known.
    pub fn check_price_file(&self) -> Result<(), PriceFileError> {
        match self.price_file_path() {
            Some(path) => PriceFile::read(path).map(drop),
            None => Ok(()),
        }
    }

    /// The prices to start from in `region`: the region's part of `PRICE_FILE`, or none (then the Pricing API's
    /// first refresh, else the documented estimate, gives them).
    pub fn initial_prices(&self, region: &str) -> Result<PriceTable, PriceFileError> {
        let Some(path) = self.price_file_path() else { return Ok(PriceTable::default()) };
        let table = PriceFile::load_region(path, region)?;
        tracing::info!(file = %path.display(), region, on_demand = table.on_demand.len(),
            spot_types = table.spot.len(), isolated_vpc = self.isolated_vpc, "price file loaded");
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        aws: AwsSettings,
    }

    fn parse(args: &[&str]) -> Result<AwsSettings, clap::Error> {
        // Flags only: environment variables are not set in unit tests (set_var is banned), so the defaults come
        // from the declarations.
        Cli::try_parse_from(std::iter::once("karpenter-controller").chain(args.iter().copied())).map(|c| c.aws)
    }

    #[test]
    fn defaults_are_upstreams() {
        let aws = parse(&[]).unwrap();
        assert_eq!(aws.vm_memory_overhead_percent, 0.075);
        assert_eq!(aws.reserved_enis, 0);
        assert_eq!(aws.price_file, "", "no price file unless set");
        assert_eq!(aws.ami_refresh_interval, Duration::from_secs(60));
        assert_eq!(aws.subnet_refresh_interval, Duration::from_secs(60));
        assert_eq!(aws.security_group_refresh_interval, Duration::from_secs(60));
        assert!(!aws.isolated_vpc && !aws.disable_dry_run);
        assert_eq!(aws.decisions.aws_feature_gates, AwsFeatureGates::default(), "every gate off");
    }

    #[test]
    fn every_v1_15_gate_parses_and_unknown_names_are_ignored() {
        let gates: AwsFeatureGates =
            "NodeClassCEL=true, DRANVIDIAGPU=True,DRAEFA=TRUE,RebootForRepair=true,SomeFutureGate=true"
                .parse()
                .unwrap();
        assert_eq!(
            gates,
            AwsFeatureGates { node_class_cel: true, dra_nvidia_gpu: true, dra_efa: true, reboot_for_repair: true }
        );
        let only_reboot: AwsFeatureGates = "RebootForRepair=true".parse().unwrap();
        assert_eq!(only_reboot, AwsFeatureGates { reboot_for_repair: true, ..AwsFeatureGates::default() });
        assert_eq!(DEFAULT_AWS_FEATURE_GATES.parse::<AwsFeatureGates>().unwrap(), AwsFeatureGates::default());
        let err = "RebootForRepair".parse::<AwsFeatureGates>().unwrap_err();
        assert!(err.contains("must have the form Name=true"), "{err}");
    }

    #[test]
    fn flags_override() {
        let aws = parse(&[
            "--reserved-enis=1",
            "--cluster-name=prod",
            "--price-file=/etc/karpenter/prices.json",
            "--isolated-vpc",
            "--aws-feature-gates=NodeClassCEL=true",
            "--security-group-refresh-interval=5m",
        ])
        .unwrap();
        assert_eq!(aws.reserved_enis, 1);
        assert_eq!(aws.price_file, "/etc/karpenter/prices.json");
        assert!(aws.isolated_vpc);
        assert!(aws.decisions.aws_feature_gates.node_class_cel);
        assert_eq!(aws.security_group_refresh_interval, Duration::from_secs(300));
        aws.validate().unwrap();
        let err = parse(&["--aws-feature-gates=NodeClassCEL=maybe"]).unwrap_err().to_string();
        assert!(err.contains("is not a boolean"), "{err}");
    }

    #[test]
    fn booleans_parse_as_go() {
        let aws = parse(&["--isolated-vpc=True", "--disable-dry-run=t", "--enable-zonal-shift=0"]).unwrap();
        assert!(aws.isolated_vpc && aws.disable_dry_run && !aws.enable_zonal_shift);
        assert!(parse(&["--isolated-vpc=yes"]).is_err());
    }

    #[test]
    fn validation_names_the_setting() {
        parse(&["--cluster-name=prod"]).unwrap().validate().unwrap();
        assert_eq!(
            parse(&[]).unwrap().validate().unwrap_err().to_string(),
            "CLUSTER_NAME: is required (the name of the EKS cluster)"
        );
        for (args, setting) in [
            (&["--cluster-name=p", "--ami-refresh-interval=30s"][..], "AMI_REFRESH_INTERVAL: "),
            (&["--cluster-name=p", "--subnet-refresh-interval=59s"][..], "SUBNET_REFRESH_INTERVAL: "),
            (&["--cluster-name=p", "--security-group-refresh-interval=30s"][..], "SECURITY_GROUP_REFRESH_INTERVAL: "),
            (&["--cluster-name=p", "--vm-memory-overhead-percent=1.5"][..], "VM_MEMORY_OVERHEAD_PERCENT: "),
            (&["--cluster-name=p", "--cluster-endpoint=http://x"][..], "CLUSTER_ENDPOINT: "),
        ] {
            let err = parse(args).unwrap().validate().unwrap_err().to_string();
            assert!(err.starts_with(setting), "{args:?}: {err}");
        }
    }

    #[test]
    fn price_file_is_checked_when_set() {
        let none = parse(&[]).unwrap();
        assert_eq!(none.price_file_path(), None);
        none.check_price_file().unwrap();
        assert!(none.initial_prices("us-east-1").unwrap().on_demand.is_empty());

        let path = std::env::temp_dir().join(format!("karpenter-aws-settings-{}.json", std::process::id()));
        std::fs::write(&path, "{ not json").unwrap();
        let flag = format!("--price-file= {} ", path.display());
        let set = parse(&[flag.as_str()]).unwrap();
        assert_eq!(set.price_file_path(), Some(path.as_path()), "surrounding blanks are trimmed");
        let err = set.check_price_file().unwrap_err().to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(err.contains("price file is not valid") && err.contains(&*path.to_string_lossy()), "{err}");
    }
}
