//! `karpenter-controller simulate [PATH...]`: what Karpenter would do for the pending pods of a set of manifests,
//! without a cluster or a cloud account.
//!
//! 1. Load the manifests (files, directories, `kubectl get -o yaml` List output) with the API crate's loader and
//!    validate the Karpenter objects; any load error or violation stops the run with errors naming file,
//!    document index, object and field.
//! 2. Build the [`ClusterSnapshot`] with the scheduler's file-input rules (unbound pods are pending; workloads
//!    are expanded only when their pods are absent; DaemonSets count as overhead; NodeClaims without a node are
//!    in flight).
//! 3. Evaluate every NodePool against the catalogue of its node class ([`catalogue`]: kwok, or AWS for an
//!    EC2NodeClass, with `--instance-types FILE` replacing the built-in one of its format; `--provider` forces one
//!    kind). A referenced node class that is not in the input is treated as ready (and a note says so); one in
//!    the input whose `Ready` condition is not `True` leaves its NodePools out.
//! 4. Schedule, then report: per new node the offering the fake provider's create would pick, the pods, the
//!    placements on existing nodes, prices, and why each unplaced pod cannot be placed ([`Report`]).
//!
//! With no path, the binary's entry reads standard input when something is piped in, else runs the bundled
//! example `examples/simulate/default.yaml` (compiled into the binary) and says so on standard error. Files of a
//! directory that hold no Kubernetes object (instance-type JSON beside the manifests) are skipped with a warning
//! ([`crate::inputs`]).
//!
//! With `--timeline FILE`, `--scale` or `--for`, the cluster then evolves over simulated time ([`world`]):
//! timeline steps, provisioning, expiration and disruption, reported as a [`TimelineReport`].
//!
//! With `--from-cluster` the input is a running cluster's objects ([`live`], read-only), plus any files.

mod buffers;
mod catalogue;
pub mod checks;
mod floor;
pub mod live;
mod pods;
mod report;
mod static_pools;
mod table;
pub mod timeline;
mod timeline_report;
mod world;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use karpenter_api::loader::{self, Loaded, Object};
use karpenter_api::{Conditions, NodePool, ProviderLabels, ValidationContext};
use karpenter_scheduler::provisioning::{PoolExclusion, dynamic_pool_exclusion};
use karpenter_scheduler::{ClusterSnapshot, PoolInput, SchedulerOptions, schedule};
use serde_json::Value;

pub use catalogue::{Catalogue, DEFAULT_REGION, Kind};
pub use report::Report;
pub use table::render;
pub use timeline_report::{TimelineReport, render as render_timeline};

/// The name the bundled example is reported under.
pub const BUNDLED_NAME: &str = "examples/simulate/default.yaml";
/// The bundled example: a NodePool restricted to Linux and an `inflate` Deployment of 10 pods of 1 CPU.
pub const BUNDLED: &str = include_str!("../../../../examples/simulate/default.yaml");

/// What to simulate.
#[derive(Debug)]
pub struct Options {
    /// Manifest files or directories; empty for the bundled example.
    pub paths: Vec<PathBuf>,
    /// An instance-type file (kwok JSON or an AWS catalogue) replacing the built-in catalogue of its kind.
    pub instance_types: Option<PathBuf>,
    /// `--provider`: whose well-known labels and restricted domains apply, and the catalogue of every NodePool;
    /// `None`: per NodePool by node class, with AWS labels when any NodePool has an EC2NodeClass.
    pub provider: Option<ProviderLabels>,
    /// `--region`: the AWS catalogue's region.
    pub region: String,
    /// Run over simulated time (`--timeline`, `--scale`, `--for`); `None`: one scheduling pass.
    pub time: Option<TimeOptions>,
    /// `HONOR_AUTOSCALER_ANNOTATIONS`: other autoscalers' annotations block disruption as do-not-disrupt does.
    pub honor_autoscaler_annotations: bool,
    /// `CLUSTER_LIMITS` (`--cluster-limits`): every NodePool's new nodes draw on them, in both modes.
    pub cluster_limits: karpenter_requirements::ResourceList,
    /// `SCHEDULER_CONFIG` (`--scheduler-config`): default topology spread constraints, in both modes.
    pub scheduler_config: karpenter_scheduler::SchedulerConfig,
    /// `FEATURE_GATES` (`--feature-gates`): the disruption gates over simulated time, and `CapacityBuffer` in both
    /// modes.
    pub feature_gates: karpenter_operator::settings::FeatureGates,
    /// `IGNORE_DRA_REQUESTS` (`--ignore-dra-requests`, default true): `false` simulates DRA device allocation
    /// (docs/dra.md), in both modes.
    pub ignore_dra_requests: bool,
    /// `AWS_FEATURE_GATES` (`--aws-feature-gates`): `NodeClassCEL` evaluates EC2NodeClass kubelet expressions.
    pub aws_feature_gates: karpenter_aws::settings::AwsFeatureGates,
    /// `PREFERENCE_POLICY` (`--preference-policy`): `Ignore` drops preferences in provisioning and in
    /// disruption's simulations, in both modes.
    pub preference_policy: karpenter_requirements::PreferencePolicy,
    /// `MIN_VALUES_POLICY` (`--min-values-policy`): `BestEffort` relaxes minValues in provisioning (disruption's
    /// simulations judge minValues under it too), in both modes.
    pub min_values_policy: karpenter_requirements::MinValuesPolicy,
    /// `CONSOLIDATION_MIN_SAVINGS` (`--consolidation-min-savings`): the cluster-wide minimum saving of
    /// replacements and multi-node moves over simulated time.
    pub consolidation_min_savings: Option<karpenter_disruption::savings::MinSavings>,
    /// `SPOT_TO_SPOT_MIN_INSTANCE_TYPES` (`--spot-to-spot-min-instance-types`) over simulated time.
    pub spot_to_spot_min_instance_types: usize,
}

impl Options {
    /// The scheduler options of provisioning (pending pods, min-nodes floors), built by the controller's own
    /// [`karpenter_operator::provisioner::ProvisionerOptions::scheduler_options`] so both read the settings
    /// alike. Disruption's simulations keep their own options (reserved offerings may be let go), with the same
    /// preference and minValues policies, as the controller's (and upstream's) do.
    pub fn provisioning(&self) -> SchedulerOptions {
        karpenter_operator::provisioner::ProvisionerOptions {
            preference_policy: self.preference_policy,
            min_values_policy: self.min_values_policy,
            cluster_limits: self.cluster_limits.clone(),
            scheduler_config: self.scheduler_config.clone(),
            ignore_dra_requests: self.ignore_dra_requests,
            ..Default::default()
        }
        .scheduler_options()
    }
}

/// What to run over simulated time.
#[derive(Debug, Default)]
pub struct TimeOptions {
    /// `--timeline FILE`.
    pub timeline: Option<PathBuf>,
    /// `--scale` steps at 0s, before the timeline's.
    pub scale: Vec<String>,
    /// `--for`: the run lasts at least this long (default 1h without a timeline file).
    pub run_for: Option<String>,
    /// `--node-startup`: how long a launched node takes to register and initialize (default 0s: at once).
    pub node_startup: Option<std::time::Duration>,
}

/// The result of a run.
#[derive(Debug)]
pub enum Outcome {
    /// The simulation ran.
    Report(Box<Report>),
    /// The run over simulated time ran.
    Timeline(Box<TimelineReport>),
    /// The input has problems (each line names file, document, object and field); nothing was simulated. Lines
    /// starting `warning: ` (files of a directory skipped as not manifests) come first and are not problems.
    InputErrors(Vec<String>),
}

/// Runs one simulation. `Err` for problems outside the manifests (an unreadable instance-type file).
pub fn simulate(options: &Options) -> anyhow::Result<Outcome> {
    simulate_with(options, None)
}

/// How long a live run (`--from-cluster` without `--timeline`, `--scale` or `--for`) runs over simulated time:
/// the disruption validation wait, so the commands decided now are executed (or rejected) in the report.
const LIVE_RUN_FOR: &str = "15s";

/// [`simulate`] over a cluster's objects (`--from-cluster`), with the objects of `options.paths` added (a file
/// object replaces the cluster's object of the same kind, namespace and name). Without time options, a live
/// run goes over [`LIVE_RUN_FOR`] from the time the cluster was read: what Karpenter would provision now, what
/// it would disrupt, and every node's verdict.
///
/// Long because it is simulate's one sequence from input to outcome (load, validate, settings, catalogue, snapshot,
/// then the plain or timed run), each step reading what the steps before produced.
pub fn simulate_with(options: &Options, cluster: Option<live::ClusterInput>) -> anyhow::Result<Outcome> {
    let bundled = options.paths.is_empty() && cluster.is_none();
    let (mut objects, load_errors, skipped) = if bundled {
        let (objects, errors) = loader::load_str_all(BUNDLED, BUNDLED_NAME);
        (objects, errors, Vec::new())
    } else if options.paths.is_empty() {
        (Vec::new(), Vec::new(), Vec::new())
    } else {
        load_inputs(&options.paths)
    };

    let mut errors: Vec<String> = load_errors.iter().map(ToString::to_string).collect();
    let mut notes = skipped.clone();
    let mut live_source = None;
    let mut now = None;
    let live_time;
    let mut time = options.time.as_ref();
    if let Some(cluster) = cluster {
        errors.extend(cluster.errors);
        notes.extend(cluster.notes);
        objects = live::merge(cluster.objects, objects, &mut notes);
        live_source = Some(cluster.source);
        now = Some(cluster.now);
        // `--node-startup` alone keeps the live run's length.
        let startup_only = time.filter(|t| t.timeline.is_none() && t.scale.is_empty() && t.run_for.is_none());
        live_time = TimeOptions {
            run_for: Some(LIVE_RUN_FOR.to_owned()),
            node_startup: startup_only.and_then(|t| t.node_startup),
            ..TimeOptions::default()
        };
        time = if time.is_none() || startup_only.is_some() { Some(&live_time) } else { time };
    }
    let force = options.provider.as_ref().map(|p| if p.name == "aws" { Kind::Aws } else { Kind::Kwok });
    let mut provider = options.provider.clone().unwrap_or_else(|| provider_of(&objects));
    let ctx = ValidationContext { provider: provider.clone() };
    for loaded in &objects {
        let Some(violations) = loaded.object.validate_with(&ctx, &crate::node_classes()) else { continue };
        for v in violations.iter() {
            errors.push(format!("{}: {}: {}: {}", loaded.origin, loaded.object.display_name(), v.path, v.message));
        }
    }
    errors.extend(checks::negative_quantities(&objects));
    if objects.is_empty() && errors.is_empty() {
        let names: Vec<String> = live_source.clone().into_iter().chain(input_names(&options.paths)).collect();
        errors.push(format!("the input holds no objects ({})", names.join(", ")));
    }
    if !errors.is_empty() {
        // The files skipped are said too: one of them may be the manifest that was meant.
        return Ok(Outcome::InputErrors(skipped.into_iter().chain(errors).collect()));
    }

    let mut snapshot = match ClusterSnapshot::from_objects(&objects) {
        Ok(s) => s,
        Err(e) => return Ok(Outcome::InputErrors(vec![e.to_string()])),
    };
    buffers::add(&mut snapshot, &objects, options.feature_gates.capacity_buffer, &mut notes);
    snapshot.node_pools.iter_mut().for_each(assume_ready);

    let selection = catalogue::Selection {
        force,
        instance_types: options.instance_types.as_deref(),
        region: &options.region,
        aws_feature_gates: options.aws_feature_gates,
    };
    let mut catalogue = Catalogue::build(&selection, &snapshot.node_pools, &objects, &mut notes)?;
    // The input's reserved nodes hold their reservations' instances.
    catalogue.count_running_reservations(&snapshot);
    // As upstream's kwok provider makes its offerings' requirement keys well-known, reserved offerings of a kwok
    // file make the reservation-id label one, so claims can be matched to (and pinned to) reservations.
    let reserved = |o: &karpenter_requirements::Offering| o.reservation_id().is_some();
    if catalogue.all_instance_types().any(|it| it.offerings.iter().any(reserved)) {
        provider.well_known.insert(karpenter_requirements::labels::RESERVATION_ID.to_owned());
    }
    // Upstream's kwok provider registers the requirement keys of its catalogue as well-known (its own labels and
    // the offerings' keys), as its fake provider does for the labels its test types carry (`size`, `special`,
    // `integer`): a pod or DaemonSet may then require such a key that its NodePool does not name. A kwok file's
    // per-type `requirements` are such labels, so every key of a kwok catalogue is well-known here too.
    if provider.name != "aws" {
        for it in catalogue.all_instance_types() {
            provider.well_known.extend(it.requirements.keys().map(str::to_owned));
        }
    }
    duplicate_notes(&objects, &mut notes);
    checks::unsupported_api_versions(&objects, &mut notes);
    checks::unevaluable_keys(&objects, &snapshot.node_pools, &catalogue, &provider, &mut notes);
    checks::pending_only(&snapshot, &mut notes);
    checks::dra_gates(options.aws_feature_gates, options.ignore_dra_requests, &mut notes);
    notes.extend(options.scheduler_config.warnings.iter().cloned());
    notes.extend(floor::notes(&snapshot.node_pools));
    let ready = ready_node_pools(&snapshot.node_pools, &objects, &mut notes);
    provisioning_notes(&ready, options.feature_gates.static_capacity, &mut notes);
    let inputs = if bundled {
        vec![BUNDLED_NAME.to_owned()]
    } else {
        live_source.clone().into_iter().chain(input_names(&options.paths)).collect()
    };
    if let Some(time) = time {
        let ready: Vec<NodePool> = ready.into_iter().cloned().collect();
        let run = Run {
            inputs,
            bundled,
            provider: &provider,
            notes,
            catalogue: &catalogue,
            now,
            honor_autoscaler_annotations: options.honor_autoscaler_annotations,
            cluster_limits: &options.cluster_limits,
            scheduler_config: &options.scheduler_config,
            feature_gates: options.feature_gates,
            ignore_dra_requests: options.ignore_dra_requests,
            provisioning: options.provisioning(),
            consolidation_min_savings: options.consolidation_min_savings,
            spot_to_spot_min_instance_types: options.spot_to_spot_min_instance_types,
        };
        let without = threshold_flags(options);
        if without.is_empty() {
            return run_timeline(run, time, snapshot, ready, objects);
        }
        // The same run without the threshold flags, so the report shows the churn they save. Pools' own
        // annotations stay: they are part of the input.
        let baseline_run = Run {
            consolidation_min_savings: None,
            spot_to_spot_min_instance_types: karpenter_disruption::SPOT_TO_SPOT_MIN_TYPES,
            notes: Vec::new(),
            ..run.clone()
        };
        let outcome = run_timeline(run, time, snapshot.clone(), ready.clone(), objects.clone())?;
        let Outcome::Timeline(mut report) = outcome else { return Ok(outcome) };
        if let Outcome::Timeline(baseline) = run_timeline(baseline_run, time, snapshot, ready, objects)? {
            report.summary.baseline = Some(baseline.summary.as_baseline(without));
        }
        return Ok(Outcome::Timeline(report));
    }
    // The provisioner's NodePools: dynamic, Ready, not being deleted (the controller's rule).
    let pools: Vec<PoolInput<'_>> = ready
        .iter()
        .filter(|p| dynamic_pool_exclusion(p).is_none())
        .map(|p| PoolInput {
            node_pool: p,
            instance_types: catalogue.for_pool(p.metadata.name.as_deref().unwrap_or("")),
        })
        .collect();
    let scheduler = options.provisioning();
    // As the controller's provisioner: the currently reschedulable pods of nodes being deleted are scheduled
    // with the pending ones (the report shows them as pending pods placed).
    let floor_now = now.or_else(|| world::latest_timestamp(&snapshot)).unwrap_or_default();
    let rescheduling =
        karpenter_disruption::pods::reschedule_deleting_nodes(&snapshot, floor_now).filter(|r| !r.pods.is_empty());
    if let Some(r) = &rescheduling {
        notes.push(format!(
            "{} of nodes being deleted scheduled again, as the controller does: {}",
            if r.pods.len() == 1 { "1 pod".to_owned() } else { format!("{} pods", r.pods.len()) },
            r.pods.join(", ")
        ));
    }
    // The report's view: the pods that stay on the nodes being deleted are shown there still.
    let shown = rescheduling.as_ref().map(|r| {
        let mut shown = r.snapshot.clone();
        let moved: std::collections::BTreeSet<&str> = r.pods.iter().map(String::as_str).collect();
        let deleting: std::collections::BTreeSet<&str> =
            snapshot.nodes.iter().filter(|n| n.marked_for_deletion).map(|n| n.name.as_str()).collect();
        shown.bound_pods.extend(
            snapshot
                .bound_pods
                .iter()
                .filter(|p| {
                    p.node_name().is_some_and(|n| deleting.contains(n))
                        && !moved.contains(karpenter_scheduler::snapshot::pod_key(p).as_str())
                })
                .cloned(),
        );
        shown
    });
    let shown = shown.as_ref().unwrap_or(&snapshot);
    let snapshot = rescheduling.as_ref().map_or(&snapshot, |r| &r.snapshot);
    let mut decisions = schedule(snapshot, &pools, &provider, &scheduler);
    // Pools below their karpenter-rs.io/min-nodes floor get nodes without pods, as the controller launches them.
    let extra =
        floor::plans(snapshot, &pools, &provider, floor_now, &decisions.new_node_claims, &scheduler, &mut notes);
    decisions.new_node_claims.extend(extra);
    // Static NodePools get their replicas, as the controller's static provisioning creates them.
    if options.feature_gates.static_capacity {
        let extra = static_pools::plans(
            snapshot,
            &ready,
            &catalogue,
            &provider,
            &options.cluster_limits,
            &decisions,
            &mut notes,
        );
        decisions.new_node_claims.extend(extra);
    }

    let report = Report::build(
        report::Inputs {
            now: floor_now,
            inputs,
            bundled_example: bundled,
            provider: provider.name.clone(),
            notes,
            objects: &objects,
            snapshot: shown,
            catalogue: &catalogue,
        },
        decisions,
    );
    Ok(Outcome::Report(Box::new(report)))
}

/// Node repair over simulated time (`--feature-gates NodeRepair=true`): the input's Nodes whose conditions match
/// the provider's default repair policies (AWS's without its RebootForRepair gate, or kwok's).
fn repair_options(
    enabled: bool,
    provider: &ProviderLabels,
    objects: &[Loaded],
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<karpenter_disruption::repair::RepairOptions> {
    if !enabled {
        return Ok(Default::default());
    }
    let policies = if provider.name == "aws" {
        karpenter_aws::provider::repair_policies(false)
    } else {
        karpenter_kwok::provider::repair_policies()
    };
    let policies = karpenter_api::repair::RepairPolicies::new(policies).context("the provider's repair policies")?;
    let unhealthy = objects
        .iter()
        .filter_map(|l| match &l.object {
            Object::Node(n) => Some(n),
            _ => None,
        })
        .filter_map(|n| {
            let conditions = n.status.as_ref()?.conditions.as_deref()?;
            Some((n.metadata.name.clone()?, policies.assess(conditions, now)?))
        })
        .collect();
    Ok(karpenter_disruption::repair::RepairOptions { enabled: true, unhealthy, ..Default::default() })
}

/// The input's Nodes whose `Ready` condition is not True (they count as disrupting in budgets, as in the
/// controller). Nodes without conditions (hand-written input) count as Ready.
fn not_ready_nodes(objects: &[Loaded]) -> std::collections::BTreeSet<String> {
    objects
        .iter()
        .filter_map(|l| match &l.object {
            Object::Node(n) => Some(n),
            _ => None,
        })
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status != "True")
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}

/// The labels of the provider whose catalogue the input asks for: AWS when any NodePool's node class is an
/// EC2NodeClass, else kwok.
fn provider_of(objects: &[Loaded]) -> ProviderLabels {
    let aws = objects.iter().any(|l| match &l.object {
        Object::NodePool(p) => Kind::of_group(&p.spec.template.spec.node_class_ref.group) == Kind::Aws,
        _ => false,
    });
    if aws { karpenter_aws::labels::provider_labels() } else { karpenter_kwok::labels::provider_labels() }
}

/// The decision flags a run over simulated time is compared without (`summary.baseline`), as given: a minimum
/// saving, and a spot-to-spot floor other than upstream's.
fn threshold_flags(options: &Options) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(min) = options.consolidation_min_savings {
        flags.push(format!("--consolidation-min-savings {min}"));
    }
    if options.spot_to_spot_min_instance_types != karpenter_disruption::SPOT_TO_SPOT_MIN_TYPES {
        flags.push(format!("--spot-to-spot-min-instance-types {}", options.spot_to_spot_min_instance_types));
    }
    flags
}

/// What a run over simulated time reports besides its events.
#[derive(Clone)]
struct Run<'a> {
    inputs: Vec<String>,
    bundled: bool,
    provider: &'a ProviderLabels,
    notes: Vec<String>,
    catalogue: &'a Catalogue,
    /// When a live cluster was read: simulated time starts here (unless the timeline says when).
    now: Option<chrono::DateTime<chrono::Utc>>,
    honor_autoscaler_annotations: bool,
    cluster_limits: &'a karpenter_requirements::ResourceList,
    scheduler_config: &'a karpenter_scheduler::SchedulerConfig,
    feature_gates: karpenter_operator::settings::FeatureGates,
    ignore_dra_requests: bool,
    /// Provisioning's scheduler options ([`Options::provisioning`]).
    provisioning: SchedulerOptions,
    consolidation_min_savings: Option<karpenter_disruption::savings::MinSavings>,
    spot_to_spot_min_instance_types: usize,
}

/// The default start of simulated time (when neither the timeline nor the input says later).
const DEFAULT_START: &str = "2026-01-01T00:00:00Z";
/// `--for` without a timeline file.
const DEFAULT_RUN_FOR: std::time::Duration = std::time::Duration::from_secs(3600);

/// Long because it is the timeline's one sequence (steps and their times, the world, the loop over passes, the
/// final verdicts and report) over locals each stage hands to the next.
fn run_timeline(
    run: Run<'_>,
    time: &TimeOptions,
    snapshot: ClusterSnapshot,
    pools: Vec<NodePool>,
    objects: Vec<Loaded>,
) -> anyhow::Result<Outcome> {
    use timeline::{Step, format_offset};
    use timeline_report::{EventKind, FinalNode, PendingGroup, TimelineSummary};

    // The steps: --scale at 0s, then the file's.
    let mut errors = Vec::new();
    let mut steps: Vec<Step> = Vec::new();
    for s in &time.scale {
        match timeline::parse_scale_flag(s) {
            Ok(action) => steps.push(Step { label: format!("--scale {s}"), at: std::time::Duration::ZERO, action }),
            Err(e) => errors.push(e),
        }
    }
    let mut file = None;
    if let Some(path) = &time.timeline {
        match timeline::read(path) {
            Ok(t) => file = Some(t),
            Err(e) => errors.extend(e),
        }
    }
    let run_for = match &time.run_for {
        Some(d) => match karpenter_api::duration::parse_go_duration(d) {
            Ok(d) => Some(d),
            Err(e) => {
                errors.push(format!("--for {d}: expected a duration such as 2h or 90m ({e})"));
                None
            }
        },
        None => None,
    };
    if !errors.is_empty() {
        return Ok(Outcome::InputErrors(errors));
    }
    let source = file.as_ref().map(|f| f.source.clone());
    let file_start = file.as_ref().and_then(|f| f.start);
    if let Some(f) = file {
        steps.extend(f.steps);
    }
    let last_step = steps.iter().map(|s| s.at).max().unwrap_or_default();
    let run_for = run_for.unwrap_or(if time.timeline.is_some() { std::time::Duration::ZERO } else { DEFAULT_RUN_FOR });
    let length = last_step.max(run_for);

    let default_start = chrono::DateTime::parse_from_rfc3339(DEFAULT_START)
        .map(|t| t.with_timezone(&chrono::Utc))
        .context("default start")?;
    let start = file_start
        .or(run.now)
        .unwrap_or_else(|| world::latest_timestamp(&snapshot).map_or(default_start, |t| t.max(default_start)));
    let end = start + chrono::Duration::from_std(length).unwrap_or(chrono::Duration::MAX);

    let repair = repair_options(run.feature_gates.node_repair, run.provider, &objects, start)?;
    let not_ready_nodes = not_ready_nodes(&objects);
    let mut w = world::World::new(snapshot, pools, run.catalogue, run.provider.clone(), objects, start);
    w.static_capacity = run.feature_gates.static_capacity;
    w.node_startup = time.node_startup.map_or(chrono::Duration::zero(), karpenter_api::time::chrono_duration);
    w.options.honor_autoscaler_annotations = run.honor_autoscaler_annotations;
    w.options.spot_to_spot_consolidation = run.feature_gates.spot_to_spot_consolidation;
    w.options.spot_to_spot_min_instance_types = run.spot_to_spot_min_instance_types;
    w.options.consolidation_min_savings = run.consolidation_min_savings;
    w.options.pod_deletion_cost_management = run.feature_gates.pod_deletion_cost_management;
    w.options.repair = repair;
    w.options.not_ready_nodes = not_ready_nodes;
    w.options.scheduler.cluster_limits = run.cluster_limits.clone();
    w.options.scheduler.scheduler_config = run.scheduler_config.clone();
    w.options.scheduler.ignore_dra_requests = run.ignore_dra_requests;
    // Disruption's simulations read both policies as provisioning does (the controller's and upstream's too).
    w.options.scheduler.preference_policy = run.provisioning.preference_policy;
    w.options.scheduler.min_values_policy = run.provisioning.min_values_policy;
    w.provisioning = run.provisioning.clone();
    // The input's pending pods first, as a plain simulate would place them.
    w.provision()?;
    let before = w.state();
    let mut next_step = 0;
    loop {
        while let Some(step) = steps.get(next_step) {
            let due = start + chrono::Duration::from_std(step.at).unwrap_or(chrono::Duration::MAX);
            if due > w.now {
                break;
            }
            if let Err(e) = w.step(step) {
                let source = source.as_deref().filter(|_| step.label.starts_with("steps"));
                let prefix = source.map(|s| format!("{s}: ")).unwrap_or_default();
                return Ok(Outcome::InputErrors(vec![format!("{prefix}{}", e.0)]));
            }
            next_step += 1;
        }
        w.settle()?;
        let step_due =
            steps.get(next_step).map(|s| start + chrono::Duration::from_std(s.at).unwrap_or(chrono::Duration::MAX));
        let next = [step_due, w.next_instant()].into_iter().flatten().min();
        match next {
            Some(t) if t <= end => w.now = t,
            _ => break,
        }
    }
    if w.now < end {
        w.now = end;
        w.settle()?;
    }
    w.finish();

    // The end: verdicts of one more pass, nodes, pending pods.
    let pass = w.pass();
    let after = w.state();
    let owners = pods::Owners::new(w.objects());
    let per_node = world::pods_per_node(&w.snapshot);
    let verdicts: BTreeMap<&str, &karpenter_disruption::Verdict> =
        pass.verdicts.iter().map(|v| (v.node.as_str(), v)).collect();
    let nodes: Vec<FinalNode> = w
        .snapshot
        .nodes
        .iter()
        .map(|n| {
            let on = per_node.get(n.name.as_str()).cloned().unwrap_or_default();
            let keys: Vec<String> = on.iter().map(|p| karpenter_scheduler::snapshot::pod_key(p)).collect();
            let groups = pods::group(keys.iter().map(String::as_str).zip(on.iter().copied().map(Some)), &owners);
            let l = |k: &str| n.labels.get(k).cloned();
            FinalNode {
                name: n.name.clone(),
                node_pool: n.node_pool.clone(),
                instance_type: l(karpenter_api::labels::INSTANCE_TYPE),
                zone: l(karpenter_api::labels::ZONE),
                capacity_type: l(karpenter_api::labels::CAPACITY_TYPE),
                price: w.node_price(n),
                price_estimated: w.node_price_estimated(n),
                pods: on.len(),
                pod_groups: groups,
                verdict: verdicts.get(n.name.as_str()).map(|v| v.message.clone()).unwrap_or_default(),
                details: report::NodeDetails::of_node(n, &w.snapshot, w.now),
            }
        })
        .collect();
    let mut unschedulable: BTreeMap<(String, &'static str), Vec<String>> = BTreeMap::new();
    if !w.snapshot.pending_pods.is_empty() {
        let inputs: Vec<PoolInput<'_>> = w
            .pools()
            .iter()
            .filter(|p| dynamic_pool_exclusion(p).is_none())
            .map(|p| PoolInput {
                node_pool: p,
                instance_types: w.catalogue().for_pool(p.metadata.name.as_deref().unwrap_or("")),
            })
            .collect();
        let d = schedule(&w.snapshot, &inputs, run.provider, &run.provisioning);
        for u in d.unschedulable {
            unschedulable.entry((u.reason.to_string(), u.reason.code())).or_default().push(u.pod.to_string());
        }
    }
    let mut summary = TimelineSummary {
        savings_per_hour: world::round(before.price_per_hour - after.price_per_hour),
        before,
        after,
        ..Default::default()
    };
    for e in &w.events {
        summary.nodes_launched += e.nodes_launched.len();
        summary.nodes_removed += e.nodes_removed.len();
        match e.kind {
            EventKind::Disruption => {
                summary.commands += 1;
                if let Some(c) = &e.command {
                    *summary.commands_by_method.entry(format!("{:?}", c.method)).or_default() += 1;
                    summary.pods_moved += c.displaced_pods.len();
                }
            }
            EventKind::ValidationFailed => summary.validation_failures += 1,
            EventKind::DisruptionFailed => summary.commands_rolled_back += 1,
            _ => {}
        }
    }
    summary.commands_in_flight = w.commands_in_flight();
    summary.average_price_per_hour =
        timeline_report::average_price_per_hour(summary.before.price_per_hour, &w.events, length.as_secs());
    let mut notes = run.notes;
    notes.append(&mut w.notes);
    let report = TimelineReport {
        api_version: timeline_report::API_VERSION.to_owned(),
        inputs: run.inputs,
        bundled_example: run.bundled,
        timeline: source,
        provider: run.provider.name.clone(),
        // The catalogues at the end: NodePools applied during the run may have added some.
        catalogue: report::CatalogueSummary {
            source: w.catalogue().source.clone(),
            instance_types: w.catalogue().len(),
        },
        notes,
        start: karpenter_api::time::rfc3339(start),
        end: karpenter_api::time::rfc3339(end),
        duration: format_offset(length),
        summary,
        events: std::mem::take(&mut w.events),
        nodes,
        verdicts: pass.verdicts,
        unschedulable: unschedulable
            .into_iter()
            .map(|((reason, code), pods)| PendingGroup { code, reason, pods })
            .collect(),
    };
    Ok(Outcome::Timeline(Box::new(report)))
}

/// Objects and load errors, as [`loader::load_paths`] returns them.
type Load = (Vec<Loaded>, Vec<loader::LoadError>);

/// The inputs as the report names them (`-` is standard input).
fn input_names(paths: &[PathBuf]) -> Vec<String> {
    let name =
        |p: &PathBuf| if p.as_os_str() == "-" { crate::inputs::STDIN_NAME.to_owned() } else { p.display().to_string() };
    paths.iter().map(name).collect()
}

/// The paths (`-`: standard input) loaded with [`load_parallel`], and a warning per file of a directory that is
/// not a manifest (skipped).
fn load_inputs(paths: &[PathBuf]) -> (Vec<Loaded>, Vec<loader::LoadError>, Vec<String>) {
    let input = crate::inputs::load(paths, load_parallel);
    (input.objects, input.errors, input.skipped)
}

/// [`loader::load_paths`] with the files spread over the available cores (parsing dominates a large input).
/// Objects and errors come out in the same order as from `load_paths`, file by file.
fn load_parallel(paths: &[PathBuf]) -> Load {
    let (files, mut errors) = loader::manifest_files(paths);
    // Pods are kept as decisions read them: a dump of 50,000 pods is never held as full objects.
    let progress = Progress::new();
    let report = |file: &str, read: u64, size: u64| progress.report(file, read, size);
    let options = loader::LoadOptions {
        compact_pods: true,
        progress: progress.shown.then_some(&report as &loader::Progress<'_>),
    };
    let options = &options;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, files.len().max(1));
    let mut per_file: Vec<(usize, Load)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let files = &files;
                scope.spawn(move || {
                    files
                        .iter()
                        .enumerate()
                        .skip(t)
                        .step_by(threads)
                        .map(|(i, f)| (i, loader::load_paths_with([f], options)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|payload| std::panic::resume_unwind(payload)))
            .collect()
    });
    progress.done();
    per_file.sort_by_key(|(i, _)| *i);
    let mut objects = Vec::new();
    for (_, (loaded, errs)) in per_file {
        objects.extend(loaded);
        errors.extend(errs);
    }
    (objects, errors)
}

/// Loading progress on standard error: only when it is a terminal, and only once loading has taken
/// [`Progress::AFTER`] (a quick run, or one whose errors are piped, prints nothing extra).
struct Progress {
    shown: bool,
    start: karpenter_cloudprovider::time::Stopwatch,
    /// When a line was last written (milliseconds since `start`), 0 before the first.
    last: std::sync::atomic::AtomicU64,
}

impl Progress {
    const AFTER: std::time::Duration = std::time::Duration::from_secs(2);

    fn new() -> Self {
        use std::io::IsTerminal;
        Progress {
            shown: std::io::stderr().is_terminal(),
            start: karpenter_cloudprovider::time::Stopwatch::start(),
            last: 0.into(),
        }
    }

    fn report(&self, file: &str, read: u64, size: u64) {
        use std::sync::atomic::Ordering;
        let elapsed = self.start.elapsed();
        let now = elapsed.as_millis() as u64;
        let last = self.last.load(Ordering::Relaxed);
        if elapsed < Self::AFTER || now < last + 200 || self.last.swap(now, Ordering::Relaxed) != last {
            return;
        }
        let percent = (read.min(size) * 100).checked_div(size).unwrap_or(100);
        eprint!("\rloading {file}: {percent}% of {} MB\x1b[K", size.div_ceil(1_000_000));
    }

    /// Clears the progress line, if one was written.
    fn done(&self) {
        if self.last.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            eprint!("\r\x1b[K");
        }
    }
}

/// Duplicate notes shown before `and N more`.
const MAX_DUPLICATE_NOTES: usize = 5;

/// Notes for objects that appear more than once (same kind, namespace and name): a cluster cannot hold both, yet
/// every copy is simulated (two copies of a pod are two pods), so the user should know.
fn duplicate_notes(objects: &[Loaded], notes: &mut Vec<String>) {
    let mut seen: BTreeMap<(String, &str), Vec<&loader::Origin>> = BTreeMap::new();
    for loaded in objects {
        if loaded.object.name().is_some() {
            seen.entry((loaded.object.display_name(), loaded.object.api_version())).or_default().push(&loaded.origin);
        }
    }
    let duplicates: Vec<_> = seen.into_iter().filter(|(_, origins)| origins.len() > 1).collect();
    for ((name, _), origins) in duplicates.iter().take(MAX_DUPLICATE_NOTES) {
        let places: Vec<String> = origins.iter().map(ToString::to_string).collect();
        notes.push(format!(
            "{name} is in the input {} times ({}); every copy is simulated",
            origins.len(),
            places.join(", ")
        ));
    }
    if duplicates.len() > MAX_DUPLICATE_NOTES {
        notes.push(format!(
            "... and {} more objects in the input more than once",
            duplicates.len() - MAX_DUPLICATE_NOTES
        ));
    }
}

/// Readiness of a NodePool's node class as simulate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ClassState {
    Ready,
    Missing,
    NotReady(String),
}

/// The NodePools whose node class counts as ready; notes for missing classes (treated as ready) and for pools
/// left out.
fn ready_node_pools<'a>(pools: &'a [NodePool], objects: &[Loaded], notes: &mut Vec<String>) -> Vec<&'a NodePool> {
    let mut missing: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    let mut ready = Vec::new();
    for pool in pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let r = &pool.spec.template.spec.node_class_ref;
        match class_state(objects, &r.group, &r.kind, &r.name) {
            ClassState::Ready => ready.push(pool),
            ClassState::Missing => {
                missing.entry((r.kind.clone(), r.name.clone(), r.group.clone())).or_default().push(name);
                ready.push(pool);
            }
            ClassState::NotReady(why) => {
                notes.push(format!("NodePool {name} left out: its {}/{} is not ready ({why})", r.kind, r.name));
            }
        }
    }
    for ((kind, name, group), pools) in missing {
        let label = if pools.len() == 1 { "NodePool" } else { "NodePools" };
        notes.push(format!(
            "{kind}/{name} ({group}) is not in the input: treated as ready ({label} {})",
            pools.join(", ")
        ));
    }
    ready
}

/// A NodePool of the input without a `Ready` condition (written by hand) is taken as `Ready=True`: the
/// controller's readiness controllers would judge it from its node class, which [`ready_node_pools`] does here.
/// A pool whose input status says otherwise keeps it (a captured cluster's pool that is not ready).
pub(crate) fn assume_ready(pool: &mut NodePool) {
    use karpenter_api::nodeclaim::conditions;
    if pool.conditions().condition(conditions::READY).is_some() {
        return;
    }
    let status = pool.status.get_or_insert_with(Default::default);
    status.conditions.push(karpenter_api::Condition {
        type_: conditions::READY.to_owned(),
        status: karpenter_api::ConditionStatus::True,
        observed_generation: None,
        last_transition_time: DEFAULT_START.to_owned(),
        reason: conditions::READY.to_owned(),
        message: "no status in the input: taken as ready by simulate".to_owned(),
    });
}

/// Notes for the NodePools provisioning leaves out (not Ready, being deleted: the controller's rule) and for
/// static pools while the `StaticCapacity` gate is off.
fn provisioning_notes(pools: &[&NodePool], static_capacity: bool, notes: &mut Vec<String>) {
    for pool in pools {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        match dynamic_pool_exclusion(pool) {
            None => {}
            Some(PoolExclusion::Static) if static_capacity => {
                if let Some(e) = karpenter_scheduler::provisioning::pool_exclusion(pool) {
                    notes.push(format!("static NodePool {name} gets no nodes: it is {e}"));
                }
            }
            Some(PoolExclusion::Static) => notes.push(format!(
                "NodePool {name} is static (spec.replicas: {}): its nodes are created only with the \
                 StaticCapacity feature gate (--feature-gates StaticCapacity=true)",
                pool.spec.replicas.unwrap_or_default()
            )),
            Some(e) => notes.push(format!("NodePool {name} left out of provisioning: it is {e}")),
        }
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

fn class_state(objects: &[Loaded], group: &str, kind: &str, name: &str) -> ClassState {
    let found = objects.iter().find(|l| {
        group_of(l.object.api_version()) == group && l.object.kind() == kind && l.object.name() == Some(name)
    });
    let Some(found) = found else { return ClassState::Missing };
    // (status, reason) of the Ready condition, if the object has one.
    let ready: Option<(String, String)> = match &found.object {
        // Node classes are the providers' kinds, unknown to the loader: their Ready condition read from the JSON.
        Object::Unknown(u) => unknown_ready(&u.value),
        _ => None,
    };
    match ready {
        // A hand-written node class has no status: nothing says it is not ready.
        None => ClassState::Ready,
        Some((status, _)) if status == "True" => ClassState::Ready,
        Some((status, reason)) if reason.is_empty() => ClassState::NotReady(format!("Ready={status}")),
        Some((status, reason)) => ClassState::NotReady(format!("Ready={status}, {reason}")),
    }
}

fn unknown_ready(value: &Value) -> Option<(String, String)> {
    let conditions = value.get("status")?.get("conditions")?.as_array()?;
    let ready = conditions.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))?;
    let field = |k: &str| ready.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    Some((field("status"), field("reason")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::load_str;

    const POOLS: &str = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: a}
spec: {template: {spec: {nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: missing}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: b}
spec: {template: {spec: {nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: missing}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: c}
spec: {template: {spec: {nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: broken}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: d}
spec: {template: {spec: {nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: plain}, requirements: []}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: e}
spec: {template: {spec: {nodeClassRef: {group: example.com, kind: FooClass, name: x}, requirements: []}}}
---
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: broken}
spec: {}
status:
  conditions: [{type: Ready, status: 'False', reason: Broken, lastTransitionTime: '2026-01-01T00:00:00Z'}]
---
apiVersion: karpenter.kwok.sh/v1alpha1
kind: KWOKNodeClass
metadata: {name: plain}
spec: {}
---
apiVersion: example.com/v1
kind: FooClass
metadata: {name: x}
status:
  conditions: [{type: Ready, status: Unknown}]
";

    #[test]
    fn parallel_loading_keeps_load_paths_order() {
        let dir = std::env::temp_dir().join(format!("karpenter-simulate-load-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).expect("temp dir");
        let pod =
            |name: &str| format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{containers: []}}\n");
        for i in 0..7 {
            let text = format!("{}---\n{}", pod(&format!("a{i}")), pod(&format!("b{i}")));
            let name = if i % 2 == 0 { format!("f{i}.yaml") } else { format!("sub/f{i}.yaml") };
            std::fs::write(dir.join(name), text).expect("write");
        }
        std::fs::write(dir.join("bad.yaml"), "kind: [").expect("write");
        let paths = vec![dir.clone(), dir.join("missing.yaml")];
        let (objects, errors) = load_parallel(&paths);
        let (expected_objects, expected_errors) = loader::load_paths(&paths);
        let _ = std::fs::remove_dir_all(&dir);
        let describe = |o: &[Loaded]| o.iter().map(Loaded::describe).collect::<Vec<_>>();
        assert_eq!(objects.len(), 14);
        assert_eq!(describe(&objects), describe(&expected_objects));
        let messages = |e: &[loader::LoadError]| {
            let mut m: Vec<String> = e.iter().map(ToString::to_string).collect();
            m.sort();
            m
        };
        assert_eq!(errors.len(), 2);
        assert_eq!(messages(&errors), messages(&expected_errors));
    }

    #[test]
    fn duplicates_are_noted_once_per_object() {
        let pod =
            "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec: {containers: [{name: c}]}\n";
        let mut objects = load_str(&format!("{pod}---\n{pod}"), "a.yaml").expect("valid");
        objects.extend(load_str(pod, "b.yaml").expect("valid"));
        objects.extend(load_str(&pod.replace("web", "api"), "b.yaml").expect("valid"));
        let mut notes = Vec::new();
        duplicate_notes(&objects, &mut notes);
        assert_eq!(
            notes,
            ["Pod/default/web is in the input 3 times (a.yaml: document 0, a.yaml: document 1, b.yaml: document 0); \
              every copy is simulated"]
        );
    }

    #[test]
    fn node_classes_missing_are_ready_with_a_note_and_not_ready_ones_leave_pools_out() {
        let objects = load_str(POOLS, "pools.yaml").expect("valid input");
        let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let mut notes = Vec::new();
        duplicate_notes(&objects, &mut notes);
        let ready = ready_node_pools(&snapshot.node_pools, &objects, &mut notes);
        let names: Vec<&str> = ready.iter().filter_map(|p| p.metadata.name.as_deref()).collect();
        assert_eq!(names, ["a", "b", "d"]);
        assert_eq!(
            notes,
            [
                "NodePool c left out: its KWOKNodeClass/broken is not ready (Ready=False, Broken)",
                "NodePool e left out: its FooClass/x is not ready (Ready=Unknown)",
                "KWOKNodeClass/missing (karpenter.kwok.sh) is not in the input: treated as ready (NodePools a, b)",
            ]
        );
    }
}
