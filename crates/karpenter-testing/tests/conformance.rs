//! The CloudProvider conformance suite: the fake passes it, and for every check a deliberately broken provider
//! fails that check and no other (so each rule can fail, and a failure names the rule broken).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::TimeZone;
use karpenter_api::labels::{INSTANCE_TYPE, ZONE};
use karpenter_api::nodeclaim::ResourceQuantity;
use karpenter_api::{ConditionStatus, NodeClaim, NodePool, ProviderLabels};
use karpenter_cloudprovider::{
    CloudProvider, CloudProviderError, DriftReason, FakeCloudProvider, FakeOptions, InMemoryNodeClasses, NodeClassKind,
    RepairPolicy,
};
use karpenter_kwok::testing::{KWOKNodeClassOptions, kwok_node_class};
use karpenter_requirements::InstanceType;
use karpenter_testing::conformance::{CHECK_LABEL, FakeHooks, Fixtures, Outcome, Report, run};
use karpenter_testing::{FakeClock, TokioClock};

/// The node classes the fake looks up: `default` exists and is ready; any other is missing.
fn node_classes() -> Arc<InMemoryNodeClasses> {
    let classes = InMemoryNodeClasses::new();
    classes.insert_resource(&kwok_node_class(KWOKNodeClassOptions::default())).unwrap();
    Arc::new(classes)
}

fn fake(clock: &FakeClock) -> FakeCloudProvider {
    FakeCloudProvider::new(FakeOptions {
        clock: Arc::new(clock.clone()),
        sleeper: Arc::new(clock.clone()),
        launch_latency: Duration::from_secs(2),
        termination_delay: Duration::from_secs(30),
        node_classes: Some(node_classes()),
        ..karpenter_testing::kwok::fake_options()
    })
}

fn fixtures(fake: &FakeCloudProvider, clock: &FakeClock) -> Fixtures {
    Fixtures {
        other_cluster: Some(Arc::new(fake.for_cluster("another-cluster"))),
        hooks: Arc::new(FakeHooks(fake.clone())),
        sleeper: Arc::new(clock.clone()),
        ..Fixtures::kwok()
    }
}

fn outcome<'r>(report: &'r Report, check: &str) -> &'r Outcome {
    &report.check(check).unwrap_or_else(|| panic!("no check {check} in\n{report}")).outcome
}

/// Every check the suite runs, in order.
const CHECKS: [&str; 13] = [
    "describes_itself",
    "create_returns_launched_claim",
    "create_satisfies_claim",
    "create_leaves_no_duplicate",
    "repeated_create",
    "get_and_list_by_cluster",
    "terminating_is_visible",
    "delete_until_gone",
    "unknown_node_class",
    "insufficient_capacity",
    "drift",
    "reboot",
    "repair_policies",
];

#[tokio::test(flavor = "current_thread")]
async fn the_fake_passes_every_check() {
    let clock = FakeClock::default();
    let fake = fake(&clock);
    let report = run(Arc::new(fake.clone()), &fixtures(&fake, &clock)).await;
    assert!(report.passed(), "{report}");
    assert_eq!(report.provider, "kwok");
    let names: Vec<&str> = report.checks.iter().map(|c| c.name).collect();
    assert_eq!(names, CHECKS, "{report}");
    for check in CHECKS {
        assert_eq!(outcome(&report, check), &Outcome::Passed, "{report}");
    }
    // A 30 s termination delay with 5 s polls, the first at once: gone on the seventh poll.
    let delete = report.check("delete_until_gone").unwrap();
    assert_eq!(delete.notes, ["gone after 7 delete poll(s)"], "{report}");
    assert!(report.check("terminating_is_visible").unwrap().notes.is_empty(), "{report}");
    assert!(report.check("create_satisfies_claim").unwrap().notes.is_empty(), "{report}");
    // Everything launched was cleaned up, and capacity restored.
    assert!(fake.instance_ids().is_empty());
    assert!(fake.insufficient_capacity().is_empty());
    assert_eq!(fake.reboots().len(), 1, "the reboot check rebooted its one instance");
    assert!(report.check("reboot").unwrap().notes.is_empty(), "{report}");
    assert_eq!(report.check("repair_policies").unwrap().notes, ["2 repair policies"], "{report}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_without_reboot_passes_with_a_note() {
    let clock = FakeClock::default();
    let fake = FakeCloudProvider::new(FakeOptions { reboot: false, ..FakeOptions::clone(fake(&clock).options()) });
    let report = run(Arc::new(fake.clone()), &fixtures(&fake, &clock)).await;
    assert!(report.passed(), "{report}");
    let reboot = report.check("reboot").unwrap();
    assert_eq!(reboot.outcome, Outcome::Passed, "{report}");
    assert!(reboot.notes.iter().any(|n| n.contains("NotImplemented")), "{report}");
    assert!(fake.reboots().is_empty());
}

#[tokio::test(flavor = "current_thread")]
async fn without_hooks_the_provoking_checks_are_skipped_not_failed() {
    let clock = FakeClock::default();
    let fake = fake(&clock);
    let fixtures = Fixtures { sleeper: Arc::new(clock.clone()), missing_node_class: None, ..Fixtures::kwok() };
    let report = run(Arc::new(fake), &fixtures).await;
    assert!(report.passed(), "{report}");
    for check in ["insufficient_capacity", "drift", "unknown_node_class"] {
        assert!(matches!(outcome(&report, check), Outcome::Skipped(_)), "{report}");
    }
    let text = report.to_string();
    assert!(text.contains("SKIP insufficient_capacity"), "{text}");
    assert!(text.contains("SKIP unknown_node_class: Fixtures.missing_node_class is None"), "{text}");
    assert!(text.contains("no other cluster given"), "{text}");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn by_default_the_suite_really_waits_for_a_slow_termination() {
    // A cloud whose instances take 30 s to go, on a clock that moves with tokio's; the fixtures' sleeper is the
    // default (tokio's timer), as a cloud author running `..Fixtures::kwok()` gets it.
    let fake = FakeCloudProvider::new(FakeOptions {
        clock: Arc::new(TokioClock::starting_at(chrono::Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap())),
        termination_delay: Duration::from_secs(30),
        node_classes: Some(node_classes()),
        ..karpenter_testing::kwok::fake_options()
    });
    let started = karpenter_testing::tokio_now();
    let report = run(Arc::new(fake.clone()), &Fixtures::kwok()).await;
    assert!(report.passed(), "{report}");
    assert_eq!(report.check("delete_until_gone").unwrap().notes, ["gone after 7 delete poll(s)"], "{report}");
    assert!(karpenter_testing::tokio_now() - started >= Duration::from_secs(30), "the polls waited on tokio's timer");
    assert!(fake.instance_ids().is_empty(), "{report}");
}

/// Runs a future on this thread without any runtime (what a non-tokio executor looks like to the suite); the fake
/// with a `FakeClock` never waits, so polling in a loop ends.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    for _ in 0..1_000_000 {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
    }
    panic!("the future never finished");
}

#[test]
fn outside_tokio_the_default_sleeper_refuses_to_start_with_a_clear_message() {
    let clock = FakeClock::default();
    let fake = fake(&clock);
    let report = block_on(run(Arc::new(fake.clone()), &Fixtures::kwok()));
    assert_eq!(report.checks.len(), 1, "{report}");
    assert_only_failure(&report, "fixtures", "no tokio runtime is running");
    assert!(fake.instance_ids().is_empty(), "nothing launched");
    // The same executor with a sleeper of its own runs the suite.
    let report = block_on(run(Arc::new(fake.clone()), &fixtures(&fake, &clock)));
    assert!(report.passed(), "{report}");
}

#[test]
fn fixtures_new_takes_any_node_class_and_kwok_is_its_shorthand() {
    let reference = karpenter_api::nodeclaim::NodeClassReference::new("example.com", "ExampleNodeClass", "small");
    let fixtures = Fixtures::new(reference.clone());
    assert_eq!(fixtures.node_pool.spec.template.spec.node_class_ref, reference);
    assert_eq!(fixtures.node_claim.spec.node_class_ref, reference);
    let missing = fixtures.missing_node_class.unwrap();
    assert_eq!((missing.group.as_str(), missing.kind.as_str()), ("example.com", "ExampleNodeClass"));
    assert_ne!(missing.name, "small");
    let kwok = Fixtures::kwok();
    assert_eq!(kwok.node_claim.spec.node_class_ref, karpenter_testing::kwok_node_class_ref("default"));
    assert!(Arc::ptr_eq(&kwok.sleeper, &Fixtures::tokio_sleeper()), "the default sleeper waits on tokio's timer");
}

#[tokio::test(flavor = "current_thread")]
async fn fixtures_the_suite_cannot_use_are_refused() {
    let clock = FakeClock::default();
    let fake = fake(&clock);
    let base = fixtures(&fake, &clock);
    let no_polls = Fixtures { delete_poll_attempts: 0, ..base.clone() };
    let report = run(Arc::new(fake.clone()), &no_polls).await;
    assert_only_failure(&report, "fixtures", "delete_poll_attempts is 0");
    let mut mismatched = base.clone();
    mismatched.node_claim.spec.node_class_ref.name = "other".into();
    let report = run(Arc::new(fake.clone()), &mismatched).await;
    assert_only_failure(&report, "fixtures", "is not Fixtures.node_pool's");
    let mut bad_request = base;
    bad_request.node_claim.spec.resources.get_or_insert_with(Default::default).requests =
        BTreeMap::from([("cpu".to_owned(), ResourceQuantity("lots".into()))]);
    let report = run(Arc::new(fake.clone()), &bad_request).await;
    assert_only_failure(&report, "fixtures", "invalid resource requests: cpu");
    assert!(fake.instance_ids().is_empty(), "nothing launched");
}

/// How a [`Broken`] provider breaks the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// supported_node_classes() names only a kind the fixtures' NodePool does not use.
    ForeignNodeClassKind,
    /// create returns the launched claim without the claim's own labels.
    DropsClaimLabels,
    /// create launches for the fixture's small requests whatever the claim asks (a 2-CPU type for 6 CPUs).
    IgnoresRequests,
    /// create ignores the claim's instance-type and zone requirements.
    IgnoresRequirements,
    /// Every create launches a second, hidden-in-plain-sight instance.
    Duplicate,
    /// Repeated creates launch new instances, but all are listed (allowed: not idempotent, GC cleans up).
    FreshInstances,
    /// Repeated creates launch new instances that list() does not show.
    HiddenRetries,
    /// list() shows the other cluster's instances too.
    LeakyList,
    /// list() hides terminating instances.
    HidesTerminating,
    /// get returns a terminating instance without its deletion timestamp.
    GetForgetsDeletion,
    /// get still answers for an instance that is gone.
    GetFindsGone,
    /// delete never reports the instance gone.
    ImmortalDelete,
    /// instance_types answers with the catalogue for any node class, even a missing one.
    AnswersUnknownClass,
    /// create launches on the fixture's node class whatever the claim names.
    LaunchesUnknownClass,
    /// Insufficient capacity reported as a generic create error.
    SilentIce,
    /// Every instance claims to be drifted.
    AlwaysDrifted,
    /// reboot replaces the instance: terminates it and launches another.
    RebootReplaces,
    /// reboot of a gone instance answers Ok.
    RebootGhosts,
    /// reboot of a live instance fails with a generic error.
    RebootFails,
    /// reboot says NotImplemented for a gone instance after rebooting live ones.
    RebootForgets,
    /// A repair policy with a reason regex and no fallback.
    NoFallbackPolicy,
}

#[derive(Debug)]
struct Broken {
    inner: FakeCloudProvider,
    other: FakeCloudProvider,
    mode: Mode,
    counter: AtomicUsize,
    /// Claim names created so far (HiddenRetries).
    seen: Mutex<BTreeSet<String>>,
    /// Provider ids list() hides (HiddenRetries).
    hidden: Mutex<BTreeSet<String>>,
    /// Every launched claim by provider id (GetFindsGone).
    launched: Mutex<BTreeMap<String, NodeClaim>>,
}

#[async_trait]
impl CloudProvider for Broken {
    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let created = match self.mode {
            Mode::Duplicate => {
                let mut twin = claim.clone();
                twin.metadata.name = claim.metadata.name.clone().map(|n| format!("{n}-twin"));
                self.inner.create(&twin).await?;
                self.inner.create(claim).await
            }
            Mode::FreshInstances => {
                let n = self.counter.fetch_add(1, Ordering::SeqCst);
                let mut fresh = claim.clone();
                fresh.metadata.name = claim.metadata.name.clone().map(|name| format!("{name}-{n}"));
                let mut created = self.inner.create(&fresh).await?;
                created.metadata.name.clone_from(&claim.metadata.name);
                Ok(created)
            }
            Mode::HiddenRetries => {
                let name = claim.metadata.name.clone().unwrap_or_default();
                if self.seen.lock().unwrap().insert(name.clone()) {
                    return self.inner.create(claim).await;
                }
                let n = self.counter.fetch_add(1, Ordering::SeqCst);
                let mut retry = claim.clone();
                retry.metadata.name = Some(format!("{name}-retry-{n}"));
                let mut created = self.inner.create(&retry).await?;
                self.hidden.lock().unwrap().extend(created.provider_id().map(str::to_owned));
                created.metadata.name = Some(name);
                Ok(created)
            }
            Mode::IgnoresRequests => {
                let mut small = claim.clone();
                small.spec.resources = Fixtures::kwok().node_claim.spec.resources;
                self.inner.create(&small).await
            }
            Mode::IgnoresRequirements => {
                let mut loose = claim.clone();
                loose.spec.requirements.retain(|r| r.key != INSTANCE_TYPE && r.key != ZONE);
                self.inner.create(&loose).await
            }
            Mode::LaunchesUnknownClass => {
                let mut anywhere = claim.clone();
                anywhere.spec.node_class_ref = karpenter_testing::kwok_node_class_ref("default");
                self.inner.create(&anywhere).await
            }
            Mode::SilentIce => self.inner.create(claim).await.map_err(|e| match e {
                CloudProviderError::InsufficientCapacity { message, .. } => {
                    CloudProviderError::create("LaunchFailed", message)
                }
                other => other,
            }),
            _ => self.inner.create(claim).await,
        }?;
        if let Some(id) = created.provider_id() {
            self.launched.lock().unwrap().insert(id.to_owned(), created.clone());
        }
        let mut created = created;
        if self.mode == Mode::DropsClaimLabels
            && let Some(labels) = created.metadata.labels.as_mut()
        {
            labels.remove(CHECK_LABEL);
        }
        Ok(created)
    }
    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        match (self.mode, self.inner.delete(claim).await) {
            (Mode::ImmortalDelete, Err(e)) if e.is_not_found() => Ok(()),
            (_, r) => r,
        }
    }
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        match (self.mode, self.inner.get(provider_id).await) {
            (Mode::GetFindsGone, Err(e)) if e.is_not_found() => {
                self.launched.lock().unwrap().get(provider_id).cloned().ok_or(e)
            }
            (Mode::GetForgetsDeletion, Ok(mut got)) => {
                got.metadata.deletion_timestamp = None;
                Ok(got)
            }
            (_, r) => r,
        }
    }
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let mut out = self.inner.list().await?;
        match self.mode {
            Mode::LeakyList => out.extend(self.other.list().await?),
            Mode::HidesTerminating => out.retain(|c| c.metadata.deletion_timestamp.is_none()),
            Mode::HiddenRetries => {
                let hidden = self.hidden.lock().unwrap();
                out.retain(|c| c.provider_id().is_none_or(|id| !hidden.contains(id)));
            }
            _ => {}
        }
        Ok(out)
    }
    async fn instance_types(&self, pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
        if self.mode == Mode::AnswersUnknownClass {
            return self.inner.instance_types(&Fixtures::kwok().node_pool).await;
        }
        self.inner.instance_types(pool).await
    }
    async fn is_drifted(&self, claim: &NodeClaim) -> Result<Option<DriftReason>, CloudProviderError> {
        match self.mode {
            Mode::AlwaysDrifted => Ok(Some(DriftReason::new("Everything"))),
            _ => self.inner.is_drifted(claim).await,
        }
    }
    fn repair_policies(&self) -> Vec<RepairPolicy> {
        let mut out = self.inner.repair_policies();
        if self.mode == Mode::NoFallbackPolicy {
            let mut gpu = RepairPolicy::replace("AcceleratedHardwareReady", ConditionStatus::False, Duration::ZERO);
            gpu.reason_regex = Some("^Xid".into());
            out.push(gpu);
        }
        out
    }
    async fn reboot(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        match (self.mode, self.inner.reboot(claim).await) {
            (Mode::RebootReplaces, Ok(())) => {
                self.inner.delete(claim).await?;
                let mut again = claim.clone();
                again.metadata.name = claim.metadata.name.clone().map(|n| format!("{n}-again"));
                self.inner.create(&again).await.map(drop)
            }
            (Mode::RebootGhosts, Err(e)) if e.is_not_found() => Ok(()),
            (Mode::RebootFails, Ok(())) => Err(CloudProviderError::other("reboot refused")),
            (Mode::RebootForgets, Err(e)) if e.is_not_found() => Err(CloudProviderError::not_implemented("Reboot")),
            (_, r) => r,
        }
    }
    fn name(&self) -> &str {
        "broken"
    }
    fn supported_node_classes(&self) -> Vec<NodeClassKind> {
        if self.mode == Mode::ForeignNodeClassKind {
            return vec![NodeClassKind::new("example.com", "ExampleNodeClass")];
        }
        self.inner.supported_node_classes()
    }
    fn labels(&self) -> &ProviderLabels {
        self.inner.labels()
    }
}

async fn run_broken(mode: Mode) -> Report {
    let clock = FakeClock::default();
    let inner = fake(&clock);
    let other = inner.for_cluster("another-cluster");
    // The other cluster has an instance of its own, so a leaky list shows it.
    other.add_instance(&Fixtures::kwok().node_claim).unwrap();
    let broken = Broken {
        inner: inner.clone(),
        other: other.clone(),
        mode,
        counter: AtomicUsize::new(0),
        seen: Mutex::default(),
        hidden: Mutex::default(),
        launched: Mutex::default(),
    };
    let fixtures = Fixtures { other_cluster: Some(Arc::new(other)), ..fixtures(&inner, &clock) };
    run(Arc::new(broken), &fixtures).await
}

/// `check` failed with a message containing `why`, and no other check failed.
fn assert_only_failure(report: &Report, check: &str, why: &str) {
    assert!(!report.passed(), "{report}");
    match outcome(report, check) {
        Outcome::Failed(msg) => assert!(msg.contains(why), "{check}: {msg}\n{report}"),
        other => panic!("{check} should fail, got {other:?}\n{report}"),
    }
    let failed: Vec<&str> = report.failures().iter().map(|c| c.name).collect();
    assert_eq!(failed, [check], "only {check} should fail:\n{report}");
}

/// Each broken provider, the one check that catches it, and what that check says.
const CAUGHT: [(Mode, &str, &str); 19] = [
    (Mode::ForeignNodeClassKind, "describes_itself", "is not among supported_node_classes()"),
    (Mode::DropsClaimLabels, "create_returns_launched_claim", "create dropped the claim's own label"),
    (Mode::IgnoresRequests, "create_satisfies_claim", "for a claim requesting cpu"),
    (Mode::IgnoresRequirements, "create_satisfies_claim", "the launched labels violate the claim's requirements"),
    (Mode::Duplicate, "create_leaves_no_duplicate", "one create added 2 instance(s)"),
    (Mode::HiddenRetries, "repeated_create", "not visible in list() for GC"),
    (Mode::LeakyList, "get_and_list_by_cluster", "list() includes another cluster's instance"),
    (Mode::HidesTerminating, "terminating_is_visible", "list() hides terminating instance"),
    (Mode::GetForgetsDeletion, "terminating_is_visible", "of a terminating instance has no deletionTimestamp"),
    (Mode::GetFindsGone, "delete_until_gone", "still finds the instance after delete said it is gone"),
    (Mode::AnswersUnknownClass, "unknown_node_class", "instance type(s) for a NodePool on missing node class"),
    (Mode::LaunchesUnknownClass, "unknown_node_class", "create launched"),
    (Mode::SilentIce, "insufficient_capacity", "should fail with InsufficientCapacity"),
    (Mode::AlwaysDrifted, "drift", "a fresh instance is drifted"),
    (Mode::RebootReplaces, "reboot", "reboot changed list()"),
    (Mode::RebootGhosts, "reboot", "reboot of gone instance"),
    (Mode::RebootFails, "reboot", "reboot of a live instance should be Ok or NotImplemented"),
    (Mode::RebootForgets, "reboot", "reboot of a gone instance should be NodeClaimNotFound"),
    (Mode::NoFallbackPolicy, "repair_policies", "needs a fallback policy for AcceleratedHardwareReady=False"),
];

#[tokio::test(flavor = "current_thread")]
async fn each_broken_provider_fails_exactly_the_check_for_the_rule_it_breaks() {
    for (mode, check, why) in CAUGHT {
        let report = run_broken(mode).await;
        assert_eq!(report.provider, "broken");
        assert_only_failure(&report, check, why);
    }
    // Every check the suite runs is caught by at least one broken provider.
    let caught: BTreeSet<&str> = CAUGHT.iter().map(|(_, check, _)| *check).collect();
    assert_eq!(caught, CHECKS.into_iter().collect(), "a check no broken provider fails");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_that_is_not_idempotent_but_lists_everything_passes_with_a_note() {
    let report = run_broken(Mode::FreshInstances).await;
    assert!(report.passed(), "{report}");
    let repeated = report.check("repeated_create").unwrap();
    assert!(repeated.notes.iter().any(|n| n.contains("not idempotent")), "{report}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_whose_instances_never_go_fails_every_check_that_deletes() {
    // Not one rule broken but the ground every deleting check stands on: those fail, and cleanup names the rest.
    let report = run_broken(Mode::ImmortalDelete).await;
    let failed: Vec<&str> = report.failures().iter().map(|c| c.name).collect();
    assert_eq!(failed, ["delete_until_gone", "reboot", "cleanup"], "{report}");
    match outcome(&report, "delete_until_gone") {
        Outcome::Failed(msg) => assert!(msg.contains("not gone after 12 delete polls"), "{msg}"),
        other => panic!("{other:?}"),
    }
}
