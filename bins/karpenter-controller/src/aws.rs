//! `run --provider aws` and `prices` (feature `aws`): the binary's side of the AWS provider. The provider itself,
//! its controllers and its interruption source are assembled by [`karpenter_aws::assembly::start`]; the binary
//! hands it what it owns: the EC2NodeClass watcher (shared with the controller manager) and the Prometheus
//! registry, which the provider records its own families into.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use karpenter_aws::api::EC2NodeClass;
use karpenter_aws::assembly::{AwsRuntime, AwsStart};
use karpenter_aws::sdk::SdkOptions;
use karpenter_aws::settings::AwsSettings;
use karpenter_cloudprovider::{Clock, NodeClassLookup, SystemClock};
use karpenter_operator::CoreSettings;
use karpenter_operator::metrics::Metrics;
use karpenter_operator::node_classes::KubeNodeClasses;
use tokio_util::sync::CancellationToken;

use crate::{CatalogueArgs, PricesArgs};

/// Starts the EC2NodeClass watcher and the AWS provider; returns the provider's runtime and the watcher.
pub async fn start(
    core: &CoreSettings,
    aws: &AwsSettings,
    client: kube::Client,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
    metrics: Arc<Metrics>,
) -> anyhow::Result<(AwsRuntime, Arc<dyn NodeClassLookup>)> {
    if let Some(message) = karpenter_aws::dynamic_resources::dra_gates_unused(
        &aws.decisions.aws_feature_gates,
        core.decisions.ignore_dra_requests,
    ) {
        tracing::warn!("{message}");
    }
    let node_classes = KubeNodeClasses::new();
    node_classes
        .start::<EC2NodeClass>(client.clone(), shutdown.clone())
        .await
        .context("listing EC2NodeClasses (is the CRD installed?)")?;
    let node_classes: Arc<dyn NodeClassLookup> = Arc::new(node_classes);
    let start = AwsStart {
        settings: aws,
        reserved_capacity: core.decisions.feature_gates.reserved_capacity,
        client,
        clock,
        shutdown,
        node_classes: node_classes.clone(),
        metrics,
    };
    let runtime = karpenter_aws::assembly::start(start, &SdkOptions::default()).await?;
    Ok((runtime, node_classes))
}

/// `karpenter-controller prices`: every region's prices from the Pricing API (and spot prices with
/// `--include-spot`), merged into one file written whole (a temporary file renamed over FILE) or to stdout.
pub fn prices(args: &PricesArgs) -> anyhow::Result<ExitCode> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the tokio runtime")?;
    let spot_since = args.include_spot.then(|| SystemClock.now());
    let file = runtime.block_on(karpenter_aws::assembly::fetch_prices(&args.regions, spot_since))?;
    let json = file.to_json();
    if args.output.as_os_str() == "-" {
        std::io::stdout().lock().write_all(json.as_bytes()).context("writing to stdout")?;
    } else {
        write_whole(&args.output, json.as_bytes())?;
    }
    for region in &args.regions {
        let table = file.region(region);
        let spot: usize = table.spot.values().map(|z| z.len()).sum();
        eprintln!(
            "{region}: {} on-demand prices{}",
            table.on_demand.len(),
            if args.include_spot { format!(", {spot} spot prices") } else { String::new() }
        );
    }
    if args.output.as_os_str() != "-" {
        eprintln!("wrote {}", args.output.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes `bytes` to a temporary file next to `path` and renames it over `path`.
/// `karpenter-controller catalogue`: one region's instance types, zone offerings and prices from the account, as
/// an AWS catalogue file for `simulate --instance-types` (gzipped when FILE ends in `.gz`).
pub fn catalogue(args: &CatalogueArgs) -> anyhow::Result<ExitCode> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the tokio runtime")?;
    let now = SystemClock.now();
    let spot_since = args.include_spot.then_some(now);
    let description = format!(
        "EC2 instance types, zone offerings and prices of {} as the account saw them at {}, written by \
         `karpenter-controller catalogue`",
        args.region,
        karpenter_api::time::rfc3339(now)
    );
    let file = runtime.block_on(karpenter_aws::assembly::fetch_catalogue(&args.region, spot_since, &description))?;
    let bytes = if args.output.extension().is_some_and(|e| e == "gz") {
        file.to_gzip()
    } else {
        serde_json::to_string_pretty(&file).map(|s| s + "\n").context("encoding the catalogue")?.into_bytes()
    };
    if args.output.as_os_str() == "-" {
        std::io::stdout().lock().write_all(&bytes).context("writing to stdout")?;
    } else {
        write_whole(&args.output, &bytes)?;
        eprintln!(
            "{}: {} instance types, {} on-demand prices; wrote {}",
            args.region,
            file.instance_types.len(),
            file.prices.region(&args.region).on_demand.len(),
            args.output.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn write_whole(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}
