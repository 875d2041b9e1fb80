//! The CloudProvider conformance suite: the fake passes it, and deliberately broken providers fail the check
//! for the rule they break (so the suite can fail).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use karpenter_api::{ConditionStatus, NodeClaim, NodePool, ProviderLabels};
use karpenter_cloudprovider::{
    CloudProvider, CloudProviderError, DriftReason, FakeCloudProvider, FakeOptions, NodeClassKind, RepairPolicy,
};
use karpenter_requirements::InstanceType;
use karpenter_testing::FakeClock;
use karpenter_testing::conformance::{FakeHooks, Fixtures, Outcome, Report, run};

fn fake(clock: &FakeClock) -> FakeCloudProvider {
    FakeCloudProvider::new(FakeOptions {
        clock: Arc::new(clock.clone()),
        sleeper: Arc::new(clock.clone()),
        launch_latency: Duration::from_secs(2),
        termination_delay: Duration::from_secs(30),
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

#[tokio::test(flavor = "current_thread")]
async fn the_fake_passes_every_check() {
    let clock = FakeClock::default();
    let fake = fake(&clock);
    let report = run(Arc::new(fake.clone()), &fixtures(&fake, &clock)).await;
    assert!(report.passed(), "{report}");
    assert_eq!(report.provider, "kwok");
    for check in [
        "describes_itself",
        "create_returns_launched_claim",
        "create_leaves_no_duplicate",
        "repeated_create",
        "get_and_list_by_cluster",
        "delete_until_gone",
        "insufficient_capacity",
        "drift",
        "reboot",
        "repair_policies",
    ] {
        assert_eq!(outcome(&report, check), &Outcome::Passed, "{report}");
    }
    assert!(report.check("cleanup").is_none(), "{report}");
    // A 30 s termination delay with 5 s polls: gone on the sixth poll.
    let delete = report.check("delete_until_gone").unwrap();
    assert_eq!(delete.notes, ["gone after 6 delete poll(s)"], "{report}");
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
    let fixtures = Fixtures { sleeper: Arc::new(clock.clone()), ..Fixtures::kwok() };
    let report = run(Arc::new(fake), &fixtures).await;
    assert!(report.passed(), "{report}");
    assert!(matches!(outcome(&report, "insufficient_capacity"), Outcome::Skipped(_)), "{report}");
    assert!(matches!(outcome(&report, "drift"), Outcome::Skipped(_)), "{report}");
    let text = report.to_string();
    assert!(text.contains("SKIP insufficient_capacity"), "{text}");
    assert!(text.contains("no other cluster given"), "{text}");
}

/// How a [`Broken`] provider breaks the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every create launches a second, hidden-in-plain-sight instance.
    Duplicate,
    /// Repeated creates launch new instances, but all are listed (allowed: not idempotent, GC cleans up).
    FreshInstances,
    /// delete never reports the instance gone.
    ImmortalDelete,
    /// Insufficient capacity reported as a generic create error.
    SilentIce,
    /// list() shows the other cluster's instances too.
    LeakyList,
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
}

#[async_trait]
impl CloudProvider for Broken {
    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        match self.mode {
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
            Mode::SilentIce => self.inner.create(claim).await.map_err(|e| match e {
                CloudProviderError::InsufficientCapacity { message, .. } => {
                    CloudProviderError::create("LaunchFailed", message)
                }
                other => other,
            }),
            _ => self.inner.create(claim).await,
        }
    }
    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudProviderError> {
        match (self.mode, self.inner.delete(claim).await) {
            (Mode::ImmortalDelete, Err(e)) if e.is_not_found() => Ok(()),
            (_, r) => r,
        }
    }
    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudProviderError> {
        self.inner.get(provider_id).await
    }
    async fn list(&self) -> Result<Vec<NodeClaim>, CloudProviderError> {
        let mut out = self.inner.list().await?;
        if self.mode == Mode::LeakyList {
            out.extend(self.other.list().await?);
        }
        Ok(out)
    }
    async fn instance_types(&self, pool: &NodePool) -> Result<Arc<[InstanceType]>, CloudProviderError> {
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
    let broken = Broken { inner: inner.clone(), other: other.clone(), mode, counter: AtomicUsize::new(0) };
    let fixtures = Fixtures { other_cluster: Some(Arc::new(other)), ..fixtures(&inner, &clock) };
    run(Arc::new(broken), &fixtures).await
}

fn assert_fails(report: &Report, check: &str, why: &str) {
    assert!(!report.passed(), "{report}");
    match outcome(report, check) {
        Outcome::Failed(msg) => assert!(msg.contains(why), "{check}: {msg}\n{report}"),
        other => panic!("{check} should fail, got {other:?}\n{report}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_that_duplicates_creates_fails() {
    let report = run_broken(Mode::Duplicate).await;
    assert_fails(&report, "create_leaves_no_duplicate", "one create added 2 instance(s)");
    assert_eq!(report.provider, "broken");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_that_is_not_idempotent_but_lists_everything_passes_with_a_note() {
    let report = run_broken(Mode::FreshInstances).await;
    assert!(report.passed(), "{report}");
    let repeated = report.check("repeated_create").unwrap();
    assert!(repeated.notes.iter().any(|n| n.contains("not idempotent")), "{report}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_whose_instances_never_go_fails() {
    let report = run_broken(Mode::ImmortalDelete).await;
    assert_fails(&report, "delete_until_gone", "not gone after 10 delete polls");
    assert!(matches!(outcome(&report, "cleanup"), Outcome::Failed(_)), "{report}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_that_hides_insufficient_capacity_fails() {
    let report = run_broken(Mode::SilentIce).await;
    assert_fails(&report, "insufficient_capacity", "should fail with InsufficientCapacity");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_that_lists_other_clusters_fails() {
    let report = run_broken(Mode::LeakyList).await;
    assert_fails(&report, "get_and_list_by_cluster", "list() includes another cluster's instance");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_that_always_answers_drifted_fails() {
    let report = run_broken(Mode::AlwaysDrifted).await;
    assert_fails(&report, "drift", "a fresh instance is drifted");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_whose_reboot_replaces_the_instance_fails() {
    let report = run_broken(Mode::RebootReplaces).await;
    assert_fails(&report, "reboot", "reboot changed list()");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_that_reboots_gone_instances_fails() {
    let report = run_broken(Mode::RebootGhosts).await;
    assert_fails(&report, "reboot", "reboot of gone instance");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_whose_reboot_errors_fails() {
    let report = run_broken(Mode::RebootFails).await;
    assert_fails(&report, "reboot", "reboot of a live instance should be Ok or NotImplemented");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_that_reboots_but_calls_gone_instances_not_implemented_fails() {
    let report = run_broken(Mode::RebootForgets).await;
    assert_fails(&report, "reboot", "reboot of a gone instance should be NodeClaimNotFound");
}

#[tokio::test(flavor = "current_thread")]
async fn a_provider_with_an_invalid_repair_policy_set_fails() {
    let report = run_broken(Mode::NoFallbackPolicy).await;
    assert_fails(&report, "repair_policies", "needs a fallback policy for AcceleratedHardwareReady=False");
}
