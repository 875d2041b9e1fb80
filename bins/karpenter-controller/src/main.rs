//! `karpenter-controller`: the karpenter-rs controller binary.
//!
//! Subcommands:
//! - `validate -f FILE_OR_DIR [-f ...] [--provider aws|kwok]`: validates every NodePool, NodeClaim, EC2NodeClass
//!   and KWOKNodeClass the way the API server (schema + CEL) plus upstream's runtime validation would. Other kinds
//!   are loaded (so a file mixing Pods and NodePools works) but not validated. Exit status 1 if any object has a
//!   violation or any file fails to load, 2 on a usage error.
//! - `crds [--provider aws|kwok]`: prints the CRDs as multi-document YAML.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use karpenter_api::loader;
use karpenter_api::{ProviderLabels, ValidationContext};

#[derive(Debug, Parser)]
#[command(name = "karpenter-controller", version, about = "Karpenter node autoscaler (karpenter-rs)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate Karpenter manifests (files or directories of .yaml/.yml/.json).
    Validate {
        /// A manifest file or a directory (walked recursively). Repeatable.
        #[arg(short = 'f', long = "filename", value_name = "FILE_OR_DIR", required = true)]
        files: Vec<PathBuf>,
        /// Cloud provider whose well-known labels and node class apply.
        #[arg(long, value_enum, default_value_t = Provider::Aws)]
        provider: Provider,
    },
    /// Print the CustomResourceDefinitions as multi-document YAML.
    Crds {
        /// Cloud provider whose node class CRD is included.
        #[arg(long, value_enum, default_value_t = Provider::Aws)]
        provider: Provider,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Provider {
    Aws,
    Kwok,
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
        Command::Validate { files, provider } => validate(&files, provider),
        Command::Crds { provider } => crds(provider),
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
