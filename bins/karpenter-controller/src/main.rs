//! `karpenter-controller`: the karpenter-rs controller binary.
//!
//! Subcommands:
//! - `simulate [PATH...] [--instance-types FILE] [--provider kwok|aws] [--region R] [--output table|json]`: the what-if
//!   simulator (see [`simulate`] and docs/simulate.md): which nodes Karpenter would create for the pending pods
//!   of a set of manifests, at what price, and why the rest cannot be placed. With no path it runs a bundled
//!   example. With `--timeline FILE`, `--scale WORKLOAD=N` or `--for DURATION` the cluster then evolves over
//!   simulated time (provisioning, expiration, disruption) and the report lists the commands, their reasons and
//!   the $/h before and after. Exit status 1 if the input has errors, 2 on a usage error.
//! - `validate -f FILE_OR_DIR [-f ...] [--provider aws|kwok]`: validates every NodePool, NodeClaim, EC2NodeClass
//!   and KWOKNodeClass the way the API server (schema + CEL) plus upstream's runtime validation would. Other kinds
//!   are loaded (so a file mixing Pods and NodePools works) but not validated. Exit status 1 if any object has a
//!   violation or any file fails to load, 2 on a usage error.
//! - `crds [--provider aws|kwok]`: prints the CRDs as multi-document YAML.
//! - `prices --region R [--region R2 ...] --output FILE [--include-spot]`: writes the price file of isolated VPCs
//!   (`PRICE_FILE`) from the AWS Pricing API (on-demand Linux prices, the controller's own queries) and, with
//!   `--include-spot`, EC2's current spot prices. Needs the `aws` cargo feature (exit status 2 without it) and
//!   credentials allowed `pricing:GetProducts` (and `ec2:DescribeSpotPriceHistory`); run it where the internet is
//!   reachable and ship the file to the cluster. Exit status 1 if any region cannot be priced (nothing is written).
//! - `catalogue --region R --output FILE [--include-spot]`: writes an AWS catalogue file for `simulate
//!   --instance-types` from the account (EC2's instance types and zone offerings of the region, its prices from
//!   the Pricing API). Needs the `aws` cargo feature (exit status 2 without it).
//! - `run --provider kwok|aws [--kwok-simulate-kubelet] [--instance-types FILE] [settings...]`: the controller
//!   (see [`run`]): every setting is a flag and an environment variable with upstream's names
//!   (`karpenter_operator::settings`, docs/settings.md). `--provider aws` needs the `aws` cargo feature; without it
//!   the command exits with status 2 and says so. Exit status 1 when the controller fails (or loses its lease).
//! - `kwok-kubelet [--interval 1s] [--all-nodes]`: the kwok Nodes' kubelet stand-in as a process of its own (see
//!   [`kwok_kubelet`]): Ready, Leases, running pods, removal of terminated pods, until SIGTERM. Client and logs
//!   as `run` (`$KUBECONFIG` or in-cluster).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use karpenter_api::loader;
use karpenter_api::{ProviderLabels, ValidationContext};

mod kwok_kubelet;
mod run;
#[cfg(test)]
mod settings_reference;
mod simulate;

/// jemalloc, not glibc's malloc: the controller's allocations come in waves (a scale-out's watch events and
/// scheduling snapshots), and glibc's per-thread arenas kept each wave's peak resident after the memory was freed.
/// jemalloc's background threads return freed pages to the OS within seconds.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[cfg(feature = "aws")]
mod aws;

#[derive(Debug, Parser)]
#[command(name = "karpenter-controller", version, about = "Karpenter node autoscaler (karpenter-rs)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// What-if simulation: the nodes Karpenter would create for the pending pods of a set of manifests.
    ///
    /// Reads NodePools, Pods, Deployments, ReplicaSets, StatefulSets, Jobs, DaemonSets, Nodes and NodeClaims
    /// (files, directories or `kubectl get -o yaml` output) and prints the new nodes (the offering a launch
    /// would pick), the placements on existing nodes, prices, and why any pod cannot be placed. With no PATH it
    /// runs a bundled example. Each NodePool is evaluated against the catalogue of its node class: the built-in
    /// AWS catalogue for an EC2NodeClass (--region), the kwok catalogue otherwise (or --instance-types).
    Simulate {
        /// Manifest files or directories (walked recursively for .yaml/.yml/.json). None: the bundled example.
        #[arg(value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Instance types in upstream's kwok JSON format or an AWS catalogue file, instead of the built-in catalogue
        /// of that kind.
        #[arg(long, value_name = "FILE")]
        instance_types: Option<PathBuf>,
        /// Evaluate every NodePool against this provider's catalogue, with its well-known labels and restricted
        /// domains (default: per NodePool by node class; AWS labels when any NodePool has an EC2NodeClass).
        #[arg(long, value_enum)]
        provider: Option<Provider>,
        /// The AWS region simulated (its zone offerings; prices are us-east-1's where the catalogue has none).
        #[arg(long, value_name = "REGION", default_value = simulate::DEFAULT_REGION)]
        region: String,
        /// Output format: aligned tables, or one JSON document (docs/simulate.md).
        #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
        /// Run over simulated time with the steps of FILE (docs/simulate.md, "Simulated time").
        #[arg(long, value_name = "FILE")]
        timeline: Option<PathBuf>,
        /// Scale a workload at time 0: `[KIND/][NAMESPACE/]NAME=REPLICAS` (repeatable); runs over simulated time.
        #[arg(long, value_name = "WORKLOAD=N")]
        scale: Vec<String>,
        /// How long simulated time runs (e.g. 2h; default 1h without --timeline).
        #[arg(long = "for", value_name = "DURATION")]
        run_for: Option<String>,
    },
    /// Validate Karpenter manifests (files or directories of .yaml/.yml/.json).
    Validate {
        /// A manifest file or a directory (walked recursively). Repeatable.
        #[arg(short = 'f', long = "filename", value_name = "FILE_OR_DIR", required = true)]
        files: Vec<PathBuf>,
        /// Cloud provider whose well-known labels and node class apply.
        #[arg(long, value_enum, default_value_t = Provider::Aws)]
        provider: Provider,
    },
    /// Run the controller: provisioning, NodeClaim lifecycle, termination, disruption, interruption, garbage
    /// collection and the NodePool controllers, on the leader replica.
    ///
    /// Every setting is also an environment variable (the variable gives the default, the flag overrides it);
    /// names and defaults are upstream Karpenter's (docs/settings.md). Logs are JSON lines; SIGTERM stops it
    /// gracefully.
    Run(Box<run::RunArgs>),
    /// Play the kubelet of the kwok Nodes (Ready, Leases, running pods, removal of terminated pods) until
    /// SIGTERM, for clusters without a KWOK controller: what `run --kwok-simulate-kubelet` does, in its own
    /// process. The client and logs are `run`'s (`$KUBECONFIG` or in-cluster; every setting of `run` applies).
    KwokKubelet(Box<kwok_kubelet::KwokKubeletArgs>),
    /// Print the CustomResourceDefinitions as multi-document YAML.
    Crds {
        /// Cloud provider whose node class CRD is included.
        #[arg(long, value_enum, default_value_t = Provider::Aws)]
        provider: Provider,
    },
    /// Write a price file for isolated VPCs (the controller's PRICE_FILE) from the AWS Pricing API.
    ///
    /// Run it where the Pricing API is reachable, with credentials allowed pricing:GetProducts (and
    /// ec2:DescribeSpotPriceHistory with --include-spot), then mount the file into the controller and set
    /// PRICE_FILE. Needs the `aws` build feature. Nothing is written unless every region was priced.
    Prices(PricesArgs),
    /// Write an AWS catalogue file for `simulate --instance-types` from a live account: one region's instance
    /// types and zone offerings (DescribeInstanceTypes, DescribeInstanceTypeOfferings) and its prices (Pricing
    /// API). Needs the `aws` build feature and credentials allowed ec2:DescribeInstanceType* and
    /// pricing:GetProducts (and ec2:DescribeSpotPriceHistory with --include-spot).
    Catalogue(CatalogueArgs),
}

/// `karpenter-controller catalogue`.
#[derive(Debug, clap::Args)]
pub(crate) struct CatalogueArgs {
    /// The region.
    #[arg(long, value_name = "REGION")]
    pub(crate) region: String,
    /// Where to write it (`-`: standard output); gzipped when the name ends in `.gz`. Written whole or not at all.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub(crate) output: PathBuf,
    /// Also record the current spot prices per zone (otherwise simulate estimates spot prices).
    #[arg(long)]
    pub(crate) include_spot: bool,
}

/// `karpenter-controller prices`.
#[derive(Debug, clap::Args)]
pub(crate) struct PricesArgs {
    /// Region to price (repeatable: one file can hold several regions).
    #[arg(long = "region", value_name = "REGION", required = true)]
    pub(crate) regions: Vec<String>,
    /// Where to write the price file (`-`: standard output). Written whole or not at all.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub(crate) output: PathBuf,
    /// Also record the current spot prices per zone (the controller refreshes spot prices from EC2 anyway; these
    /// only serve until its first refresh).
    #[arg(long)]
    pub(crate) include_spot: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Provider {
    Aws,
    Kwok,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OutputFormat {
    Table,
    Json,
}

impl Provider {
    fn labels(self) -> ProviderLabels {
        match self {
            Provider::Aws => ProviderLabels::aws(),
            Provider::Kwok => ProviderLabels::kwok(),
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate { paths, instance_types, provider, region, output, timeline, scale, run_for } => {
            let time = (timeline.is_some() || !scale.is_empty() || run_for.is_some())
                .then_some(simulate::TimeOptions { timeline, scale, run_for });
            let provider = provider.map(Provider::labels);
            run_simulate(simulate::Options { paths, instance_types, provider, region, time }, output)
        }
        Command::Validate { files, provider } => validate(&files, provider),
        Command::Crds { provider } => crds(provider),
        Command::Run(args) => run::run(*args),
        Command::KwokKubelet(args) => kwok_kubelet::run(*args),
        Command::Prices(args) => prices(&args),
        Command::Catalogue(args) => catalogue(&args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Counts of one validation run.
#[derive(Debug, Default)]
struct Summary {
    objects: usize,
    files: usize,
    violations: usize,
    load_errors: usize,
}

fn validate(paths: &[PathBuf], provider: Provider) -> anyhow::Result<ExitCode> {
    let ctx = ValidationContext { provider: provider.labels() };
    let (loaded, errors) = loader::load_paths(paths);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();

    let mut summary = Summary::default();
    let mut files: BTreeSet<String> = BTreeSet::new();
    let (manifest_files, _) = loader::manifest_files(paths);
    files.extend(manifest_files.iter().map(|f| f.display().to_string()));

    for error in &errors {
        summary.load_errors += 1;
        writeln!(out, "{error}").context("writing to stdout")?;
    }
    for object in &loaded {
        let Some(violations) = object.object.validate(&ctx) else { continue };
        summary.objects += 1;
        for v in violations.iter() {
            summary.violations += 1;
            writeln!(out, "{}: {}: {}: {}", object.origin, object.object.display_name(), v.path, v.message)
                .context("writing to stdout")?;
        }
    }
    summary.files = files.len();
    let mut line =
        format!("validated {} objects in {} files: {} violations", summary.objects, summary.files, summary.violations);
    if summary.load_errors > 0 {
        line.push_str(&format!(", {} load errors", summary.load_errors));
    }
    writeln!(out, "{line}").context("writing to stdout")?;
    Ok(if summary.violations == 0 && summary.load_errors == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn run_simulate(options: simulate::Options, output: OutputFormat) -> anyhow::Result<ExitCode> {
    match simulate::simulate(&options)? {
        simulate::Outcome::Report(report) => {
            let text = match output {
                OutputFormat::Table => simulate::render(&report),
                OutputFormat::Json => report.to_json() + "\n",
            };
            std::io::stdout().lock().write_all(text.as_bytes()).context("writing to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        simulate::Outcome::Timeline(report) => {
            let text = match output {
                OutputFormat::Table => simulate::render_timeline(&report),
                OutputFormat::Json => serde_json::to_string_pretty(&report).context("serialising the report")? + "\n",
            };
            std::io::stdout().lock().write_all(text.as_bytes()).context("writing to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        simulate::Outcome::InputErrors(errors) => {
            let stderr = std::io::stderr();
            let mut err = stderr.lock();
            for e in &errors {
                writeln!(err, "{e}").context("writing to stderr")?;
            }
            writeln!(err, "error: {} problems in the input; nothing was simulated", errors.len())
                .context("writing to stderr")?;
            Ok(ExitCode::FAILURE)
        }
    }
}

#[cfg(feature = "aws")]
fn prices(args: &PricesArgs) -> anyhow::Result<ExitCode> {
    aws::prices(args)
}

#[cfg(feature = "aws")]
fn catalogue(args: &CatalogueArgs) -> anyhow::Result<ExitCode> {
    aws::catalogue(args)
}

#[cfg(not(feature = "aws"))]
fn catalogue(_args: &CatalogueArgs) -> anyhow::Result<ExitCode> {
    eprintln!(
        "error: catalogue needs a karpenter-controller built with the `aws` cargo feature \
         (cargo build -p karpenter-controller --features aws); this build cannot call EC2"
    );
    Ok(ExitCode::from(2))
}

#[cfg(not(feature = "aws"))]
fn prices(_args: &PricesArgs) -> anyhow::Result<ExitCode> {
    eprintln!(
        "error: prices needs a karpenter-controller built with the `aws` cargo feature \
         (cargo build -p karpenter-controller --features aws); this build cannot call the AWS Pricing API"
    );
    Ok(ExitCode::from(2))
}

fn crds(provider: Provider) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for crd in karpenter_api::crd::crds(&provider.labels()) {
        let yaml = karpenter_api::crd::try_render_yaml(&crd)
            .with_context(|| format!("rendering CRD {}", crd.metadata.name.as_deref().unwrap_or("?")))?;
        out.write_all(yaml.as_bytes()).context("writing to stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}
