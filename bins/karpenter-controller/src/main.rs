//! `karpenter-controller`: the karpenter-rs controller binary.
//!
//! Subcommands:
//! - `simulate [PATH...] [-f PATH...] [--instance-types FILE] [--provider kwok|aws] [--region R] [-o table|json|yaml]`: the what-if
//!   simulator (see [`simulate`] and docs/simulate.md): which nodes Karpenter would create for the pending pods
//!   of a set of manifests, at what price, and why the rest cannot be placed. With no path it runs a bundled
//!   example. With `--timeline FILE`, `--scale WORKLOAD=N` or `--for DURATION` the cluster then evolves over
//!   simulated time (provisioning, expiration, disruption) and the report lists the commands, their reasons and
//!   the $/h before and after. With no path, what is piped to standard input, else the bundled example (said on
//!   standard error). Exit status 1 if the input has errors or holds no objects.
//! - `validate [PATH...] [-f PATH...] [--provider aws|kwok] [-o json|yaml]`: validates every NodePool, NodeClaim,
//!   EC2NodeClass and KWOKNodeClass the way the API server (schema + CEL) plus upstream's runtime validation
//!   would. Other kinds are loaded (so a file mixing Pods and NodePools works) but not validated. Exit status 1
//!   if any object has a violation, any file fails to load or the input holds no objects.
//!
//!   Both read paths as kubectl's `-f` does: files, directories (recursive; symlinked directories followed, a
//!   loop reported), `-` for standard input; a file of a directory that holds no Kubernetes object (instance-type
//!   JSON) is skipped with a warning. Results go to standard output, errors and notes to standard error; a
//!   closed standard output (`| head -1`) ends the command quietly.
//! - `version [-o json|yaml]`: the version and the commit the binary was built from (build.rs).
//! - `completion bash|zsh|fish`: a shell completion script.
//! - `crds [--provider aws|kwok] [--capacity-buffer] [-o yaml|json]`: prints the CRDs as multi-document YAML, or
//!   as one JSON `List` (with the CapacityBuffer CRD Karpenter reads but does not own, on request).
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
//!
//! Habits of kubectl's: help asked for (`--help`, `help`, no subcommand at all) goes to standard output with exit
//! status 0; every usage error (an unknown flag, a missing argument, a value that does not parse, `--for 10x`
//! included) exits with status 2 and runtime failures with status 1.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use karpenter_api::NodeClassApis;
use karpenter_api::ValidationContext;
use karpenter_api::loader;

use providers::Provider;

mod build_info;
#[cfg(test)]
mod decision_settings_tests;
mod inputs;
mod kwok_kubelet;
#[cfg(test)]
mod metrics_reference;
mod providers;
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
#[command(name = "karpenter-controller", version = build_info::VERSION_LINE, about = "Karpenter node autoscaler (karpenter-rs)")]
struct Cli {
    /// None: the help is printed (to standard output, exit status 0), as bare `kubectl` does.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// What-if simulation: the nodes Karpenter would create for the pending pods of a set of manifests.
    ///
    /// Reads NodePools, Pods, Deployments, ReplicaSets, StatefulSets, Jobs, DaemonSets, Nodes and NodeClaims
    /// (files, directories or `kubectl get -o yaml` output) and prints the new nodes (the offering a launch
    /// would pick), the placements on existing nodes, prices, and why any pod cannot be placed. With no PATH it
    /// reads what is piped to standard input, else runs a bundled example. Each NodePool is evaluated against the catalogue of its node class: the built-in
    /// AWS catalogue for an EC2NodeClass (--region), the kwok catalogue otherwise (or --instance-types).
    Simulate {
        /// Manifest files or directories (walked recursively for .yaml/.yml/.json; files there that hold no
        /// Kubernetes object are skipped with a warning), `-` for standard input. None (and no -f): standard
        /// input when something is piped in, else the bundled example.
        #[arg(value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// The same as PATH, as kubectl spells it (repeatable).
        #[arg(short = 'f', long = "filename", value_name = "PATH")]
        filenames: Vec<PathBuf>,
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
        /// Output format: aligned tables, or one JSON or YAML document (docs/simulate.md).
        #[arg(short = 'o', long, value_enum, default_value_t = OutputFormat::Table)]
        output: OutputFormat,
        /// Run over simulated time with the steps of FILE (docs/simulate.md, "Simulated time").
        #[arg(long, value_name = "FILE")]
        timeline: Option<PathBuf>,
        /// Scale a workload at time 0: `[KIND/][NAMESPACE/]NAME=REPLICAS` (repeatable); runs over simulated time.
        #[arg(long, value_name = "WORKLOAD=N", value_parser = checked_scale)]
        scale: Vec<String>,
        /// How long simulated time runs (e.g. 2h; default 1h without --timeline).
        #[arg(long = "for", value_name = "DURATION", value_parser = checked_duration)]
        run_for: Option<String>,
        /// How long a launched node takes to register and initialize over simulated time (default 0s: at once).
        /// Pods wait for it, and a disruption command stays in flight (its candidates tainted, counted against
        /// budgets) until its replacements are initialized. Runs over simulated time as --for does.
        #[arg(long, value_name = "DURATION", value_parser = parsed_duration)]
        node_startup: Option<std::time::Duration>,
        /// The controller's settings that shape decisions (`karpenter_operator::settings::DecisionSettings`):
        /// the same flags, environment variables, defaults and parsers as `run`'s. Boxed as `cluster` is.
        #[command(flatten)]
        decisions: Box<karpenter_operator::settings::DecisionSettings>,
        /// The AWS provider's settings that shape decisions, as `run --provider aws` takes them.
        #[command(flatten)]
        aws_decisions: karpenter_aws::settings::AwsDecisionSettings,
        /// Boxed: the variant is by far the largest (clippy's large_enum_variant).
        #[command(flatten)]
        cluster: Box<simulate::live::ClusterArgs>,
    },
    /// Validate Karpenter manifests (files or directories of .yaml/.yml/.json, `-` for standard input).
    Validate {
        /// Manifest files or directories (walked recursively), `-` for standard input.
        #[arg(value_name = "PATH", required_unless_present = "files")]
        paths: Vec<PathBuf>,
        /// The same as PATH, as kubectl spells it (repeatable).
        #[arg(short = 'f', long = "filename", value_name = "PATH")]
        files: Vec<PathBuf>,
        /// Cloud provider whose well-known labels and node class apply.
        #[arg(long, value_enum, default_value = "aws")]
        provider: Provider,
        /// Output format: lines (`FILE: document N: Kind/name: field: message`, then a summary), or one JSON or
        /// YAML document with the counts, the violations by field and the load errors.
        #[arg(short = 'o', long, value_enum)]
        output: Option<DataFormat>,
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
    /// Print the CustomResourceDefinitions as multi-document YAML (`kubectl apply -f -` takes it), or as a JSON
    /// `List` with -o json (as `kubectl get -o json` prints several objects).
    Crds {
        /// Cloud provider whose node class CRD is included.
        #[arg(long, value_enum, default_value = "aws")]
        provider: Provider,
        /// Also print the CapacityBuffer CRD (`autoscaling.x-k8s.io`), which Karpenter reads with the
        /// CapacityBuffer gate but does not own (docs/capacity-buffer.md).
        #[arg(long)]
        capacity_buffer: bool,
        /// Output format: multi-document YAML (the default), or one JSON `v1 List` of the CRDs.
        #[arg(short = 'o', long, value_enum, default_value_t = DataFormat::Yaml)]
        output: DataFormat,
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
    /// Print the version and the commit this binary was built from.
    Version {
        /// Output format: one line, or a JSON or YAML document (version, gitCommit, rustVersion, platform).
        #[arg(short = 'o', long, value_enum)]
        output: Option<DataFormat>,
    },
    /// Print a shell completion script, e.g. `source <(karpenter-controller completion bash)`.
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
    },
}

/// The shells `completion` writes scripts for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
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
enum OutputFormat {
    Table,
    Json,
    Yaml,
}

/// `-o` of the commands whose human form is lines of text (`validate`, `version`) or YAML (`crds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DataFormat {
    Json,
    Yaml,
}

impl DataFormat {
    /// `value` as one JSON document (indented, a final newline) or one YAML document.
    fn render(self, value: &impl serde::Serialize) -> anyhow::Result<String> {
        Ok(match self {
            DataFormat::Json => serde_json::to_string_pretty(value).context("serialising to JSON")? + "\n",
            DataFormat::Yaml => serde_saphyr::to_string(value).context("serialising to YAML")?,
        })
    }
}

/// Every node-class kind this binary knows (each provider's own API): what `validate` and simulate validate
/// manifests with, whichever provider is chosen, so a manifest of either kind is checked.
pub(crate) fn node_classes() -> NodeClassApis {
    let mut all = NodeClassApis::none();
    for entry in providers::PROVIDERS {
        for api in (entry.node_class_apis)().iter() {
            all = all.with(api);
        }
    }
    all
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(command) = cli.command else {
        return help();
    };
    let result = match command {
        Command::Simulate {
            mut paths,
            filenames,
            instance_types,
            provider,
            region,
            output,
            timeline,
            scale,
            run_for,
            node_startup,
            decisions,
            aws_decisions,
            cluster,
        } => {
            paths.extend(filenames);
            if paths.is_empty() && !cluster.from_cluster {
                match inputs::default_input() {
                    inputs::DefaultInput::Stdin => paths.push(PathBuf::from("-")),
                    inputs::DefaultInput::Bundled(why) => {
                        eprintln!("note: {why}; simulating the bundled example {}", simulate::BUNDLED_NAME)
                    }
                }
            }
            let time = (timeline.is_some() || !scale.is_empty() || run_for.is_some() || node_startup.is_some())
                .then_some(simulate::TimeOptions { timeline, scale, run_for, node_startup });
            let provider = provider.map(Provider::labels);
            let decisions = *decisions;
            let options = simulate::Options {
                paths,
                instance_types,
                provider,
                region,
                time,
                honor_autoscaler_annotations: decisions.honor_autoscaler_annotations,
                cluster_limits: decisions.cluster_limits,
                scheduler_config: decisions.scheduler_config,
                feature_gates: decisions.feature_gates,
                ignore_dra_requests: decisions.ignore_dra_requests,
                aws_feature_gates: aws_decisions.aws_feature_gates,
                preference_policy: decisions.preference_policy,
                min_values_policy: decisions.min_values_policy,
                consolidation_min_savings: decisions.consolidation_min_savings.0,
                spot_to_spot_min_instance_types: decisions.spot_to_spot_min_instance_types,
            };
            run_simulate(options, &cluster, output)
        }
        Command::Validate { mut paths, files, provider, output } => {
            paths.extend(files);
            validate(&paths, provider, output)
        }
        Command::Version { output } => version(output),
        Command::Completion { shell } => completion(shell),
        Command::Crds { provider, capacity_buffer, output } => crds(provider, capacity_buffer, output),
        Command::Run(args) => run::run(*args),
        Command::KwokKubelet(args) => kwok_kubelet::run(*args),
        Command::Prices(args) => prices(&args),
        Command::Catalogue(args) => catalogue(&args),
    };
    match result {
        Ok(code) => code,
        // The reader of standard output has gone (`| head -1`): nothing is left to say.
        Err(e) if inputs::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", inputs::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The top-level help on standard output, exit status 0: bare `kubectl` prints its help the same way.
fn help() -> ExitCode {
    use clap::CommandFactory;
    let help = Cli::command().render_help().to_string();
    match std::io::stdout().lock().write_all(help.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("error: writing to stdout: {e}");
            ExitCode::FAILURE
        }
        _ => ExitCode::SUCCESS,
    }
}

fn version(output: Option<DataFormat>) -> anyhow::Result<ExitCode> {
    let info = build_info::VersionInfo::current();
    let text = match output {
        None => info.line(),
        Some(format) => format.render(&info)?,
    };
    std::io::stdout().lock().write_all(text.as_bytes()).context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}

fn completion(shell: Shell) -> anyhow::Result<ExitCode> {
    use clap::CommandFactory;
    use clap_complete::Shell as S;
    let shell = match shell {
        Shell::Bash => S::Bash,
        Shell::Zsh => S::Zsh,
        Shell::Fish => S::Fish,
    };
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "karpenter-controller", &mut script);
    std::io::stdout().lock().write_all(&script).context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// What `validate -o json|yaml` prints; the line form prints the same content.
#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ValidationReport {
    /// Files read (standard input counts as one; skipped files do not).
    files: usize,
    /// Karpenter objects validated (other kinds are loaded, not counted).
    objects: usize,
    violations: Vec<Violation>,
    /// Files and documents that could not be loaded, as the line form prints them on standard error.
    load_errors: Vec<String>,
    /// Files of directories skipped as not manifests, as the warnings on standard error say.
    skipped: Vec<String>,
}

/// One violation, by field.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Violation {
    file: String,
    /// 0-based index of the document in the file.
    document: usize,
    /// 0-based index in the `items` of a `List` document.
    #[serde(skip_serializing_if = "Option::is_none")]
    item: Option<usize>,
    /// `Kind/name` or `Kind/namespace/name`.
    object: String,
    /// The field path, in the API server's notation (`spec.template.spec.requirements[0]`).
    field: String,
    message: String,
}

impl Violation {
    fn new(loaded: &karpenter_api::loader::Loaded, field: &str, message: &str) -> Self {
        Violation {
            file: loaded.origin.file.clone(),
            document: loaded.origin.document,
            item: loaded.origin.item,
            object: loaded.object.display_name(),
            field: field.to_owned(),
            message: message.to_owned(),
        }
    }

    /// `FILE: document N: Kind/name: field: message`, the line form.
    fn line(&self) -> String {
        let origin =
            karpenter_api::loader::Origin { file: self.file.clone(), document: self.document, item: self.item };
        format!("{origin}: {}: {}: {}", self.object, self.field, self.message)
    }
}

/// The violations of one object: the binary's own checks (negative quantities, kubelet CEL) first, then the
/// object's validation. The checks report whole lines; the object's known prefix is taken off to get the field.
fn violations_of(loaded: &karpenter_api::loader::Loaded, ctx: &ValidationContext) -> (bool, Vec<Violation>) {
    let one = std::slice::from_ref(loaded);
    let prefix = format!("{}: {}: ", loaded.origin, loaded.object.display_name());
    let mut out: Vec<Violation> =
        [simulate::checks::negative_quantities(one), simulate::checks::kubelet_expressions(one)]
            .iter()
            .flatten()
            .map(|line| {
                let rest = line.strip_prefix(&prefix).unwrap_or(line);
                let (field, message) = rest.split_once(": ").unwrap_or(("", rest));
                Violation::new(loaded, field, message)
            })
            .collect();
    let violations = loaded.object.validate_with(ctx, &node_classes());
    let validated = violations.is_some();
    for v in violations.iter().flat_map(|v| v.iter()) {
        out.push(Violation::new(loaded, &v.path.to_string(), &v.message));
    }
    (validated, out)
}

fn validate(paths: &[PathBuf], provider: Provider, output: Option<DataFormat>) -> anyhow::Result<ExitCode> {
    let ctx = ValidationContext { provider: provider.labels() };
    let input = inputs::load(paths, |p| loader::load_paths(p));
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let stderr = std::io::stderr();
    let mut err = stderr.lock();

    let mut report = ValidationReport { files: input.files, ..ValidationReport::default() };
    for warning in &input.skipped {
        writeln!(err, "{warning}").context("writing to stderr")?;
    }
    report.skipped = input.skipped.clone();
    for error in &input.errors {
        writeln!(err, "{error}").context("writing to stderr")?;
        report.load_errors.push(error.to_string());
    }
    for object in &input.objects {
        let (validated, violations) = violations_of(object, &ctx);
        report.objects += usize::from(validated);
        report.violations.extend(violations);
    }
    match output {
        Some(format) => out.write_all(format.render(&report)?.as_bytes()).context("writing to stdout")?,
        None => {
            for v in &report.violations {
                writeln!(out, "{}", v.line()).context("writing to stdout")?;
            }
            let mut line = format!(
                "validated {} in {}: {}",
                inputs::plural(report.objects, "object", "objects"),
                inputs::plural(report.files, "file", "files"),
                inputs::plural(report.violations.len(), "violation", "violations")
            );
            if !report.load_errors.is_empty() {
                line.push_str(&format!(", {}", inputs::plural(report.load_errors.len(), "load error", "load errors")));
            }
            writeln!(out, "{line}").context("writing to stdout")?;
        }
    }
    if input.objects.is_empty() && input.errors.is_empty() {
        writeln!(err, "error: the input holds no objects").context("writing to stderr")?;
        return Ok(ExitCode::FAILURE);
    }
    Ok(if report.violations.is_empty() && report.load_errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Notes on standard error: all of them with the table (which is the result), only warnings with JSON and YAML
/// (whose documents carry every note).
fn print_notes(notes: &[String], all: bool) -> anyhow::Result<()> {
    let stderr = std::io::stderr();
    let mut err = stderr.lock();
    for note in notes {
        if note.starts_with("warning: ") {
            writeln!(err, "{note}").context("writing to stderr")?;
        } else if all {
            writeln!(err, "note: {note}").context("writing to stderr")?;
        }
    }
    Ok(())
}

fn run_simulate(
    options: simulate::Options,
    cluster: &simulate::live::ClusterArgs,
    output: OutputFormat,
) -> anyhow::Result<ExitCode> {
    match simulate::live::run(&options, cluster)? {
        simulate::Outcome::Report(mut report) => {
            print_notes(&report.notes, output == OutputFormat::Table)?;
            let text = match output {
                OutputFormat::Table => {
                    report.notes.clear();
                    simulate::render(&report)
                }
                OutputFormat::Json => report.to_json() + "\n",
                OutputFormat::Yaml => serde_saphyr::to_string(&report).context("serialising the report")?,
            };
            std::io::stdout().lock().write_all(text.as_bytes()).context("writing to stdout")?;
            Ok(ExitCode::SUCCESS)
        }
        simulate::Outcome::Timeline(mut report) => {
            print_notes(&report.notes, output == OutputFormat::Table)?;
            let text = match output {
                OutputFormat::Table => {
                    report.notes.clear();
                    simulate::render_timeline(&report)
                }
                OutputFormat::Json => serde_json::to_string_pretty(&report).context("serialising the report")? + "\n",
                OutputFormat::Yaml => serde_saphyr::to_string(&report).context("serialising the report")?,
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
            let count = errors.iter().filter(|e| !e.starts_with("warning: ")).count();
            let problems = inputs::plural(count, "problem", "problems");
            writeln!(err, "error: {problems} in the input; nothing was simulated").context("writing to stderr")?;
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

fn crds(provider: Provider, capacity_buffer: bool, output: DataFormat) -> anyhow::Result<ExitCode> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let labels = provider.labels();
    let mut all = karpenter_api::node_class_api::crds_with(&labels, &provider.node_classes());
    if capacity_buffer {
        all.extend(karpenter_api::crd::optional_crds(&labels));
    }
    if output == DataFormat::Json {
        // Several objects as `kubectl get -o json` prints them: one `v1 List`.
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": all});
        out.write_all(DataFormat::Json.render(&list)?.as_bytes()).context("writing to stdout")?;
        return Ok(ExitCode::SUCCESS);
    }
    for crd in all {
        let yaml = karpenter_api::crd::try_render_yaml(&crd)
            .with_context(|| format!("rendering CRD {}", crd.metadata.name.as_deref().unwrap_or("?")))?;
        out.write_all(yaml.as_bytes()).context("writing to stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--scale`, checked while the flags are parsed so a bad value is a usage error (exit status 2) like any other.
fn checked_scale(s: &str) -> Result<String, String> {
    simulate::timeline::parse_scale_flag(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.strip_prefix(&format!("--scale {s}: ")).unwrap_or(&e).to_owned())
}

/// `--for`, checked while the flags are parsed (a usage error, exit status 2); the simulation parses it again.
fn checked_duration(s: &str) -> Result<String, String> {
    karpenter_api::duration::parse_go_duration(s).map(|_| s.to_owned()).map_err(|e| e.to_string())
}

/// A duration flag read once, as clap parses it (`--node-startup`); a bad value is a usage error.
fn parsed_duration(s: &str) -> Result<std::time::Duration, String> {
    karpenter_api::duration::parse_go_duration(s).map_err(|e| e.to_string())
}
