//! The CloudProvider conformance suite (feature `conformance`): the contract documented on
//! [`CloudProvider`] checked against any implementation, for cloud authors and for our own providers.
//!
//! [`run`] launches a few instances through the provider, checks each rule and cleans up, returning a
//! [`Report`] with one [`CheckResult`] per rule. It is plain async code: call it from `#[tokio::test]` or any
//! executor. Between `delete` polls it waits through [`Fixtures::sleeper`], by default tokio's timer (real
//! time, so a cloud that takes seconds to terminate passes); outside a tokio runtime give it another
//! [`Sleeper`] (a `FakeClock` in tests), or the suite refuses to start with a `fixtures` failure saying so.
//!
//! Every check below is proven by a deliberately broken provider in the suite's own tests
//! (`crates/karpenter-testing/tests/conformance.rs`) that fails that check and no other.
//!
//! | Check | Rule |
//! |---|---|
//! | `describes_itself` | a name, a default node class kind, the fixture NodePool's node class among the supported kinds, instance types with zoned, typed offerings |
//! | `create_returns_launched_claim` | the result carries the claim's name and own labels, `status.providerID`, capacity, allocatable, the instance-type, zone and capacity-type labels and a label for every single-valued requirement of the launched instance type |
//! | `create_satisfies_claim` | the launched instance type is one `instance_types` reports, fits the claim's resource requests (checked with a claim asking for the largest type's allocatable CPU) and satisfies its requirements (checked with a claim pinned to the priciest allowed offering) |
//! | `create_leaves_no_duplicate` | one create makes exactly one new instance in `list()`, the one returned |
//! | `repeated_create` | creating the same NodeClaim again (sequentially and concurrently) returns the same instance, or else every instance launched is visible in `list()` for the garbage collector |
//! | `get_and_list_by_cluster` | `get` finds the instance by provider id and `list` includes it; with a second cluster's provider on the same account, that one neither lists nor gets it |
//! | `terminating_is_visible` | while an instance terminates (after `delete` said `Ok`, before it is gone), `get` returns it and `list` includes it, both with `metadata.deletionTimestamp` set (noted, not failed, when the cloud terminates at once) |
//! | `delete_until_gone` | `delete` of a live instance is `Ok`; polling `delete` reaches `NodeClaimNotFound`; then `get` is `NodeClaimNotFound`, `list` no longer has it, and `delete` stays `NodeClaimNotFound` |
//! | `unknown_node_class` | (needs [`Fixtures::missing_node_class`]) `instance_types` of a NodePool whose node class does not exist is `Ok` and empty, and a create for it fails with a launch error (`InsufficientCapacity`, `NodeClassNotReady` or `Create`) and launches nothing |
//! | `insufficient_capacity` | (needs [`ConformanceHooks::exhaust_capacity`]) a create with every allowed offering exhausted fails with `InsufficientCapacity` naming offerings among the exhausted ones, launches nothing, and `instance_types` then reports the named offerings unavailable |
//! | `drift` | a fresh instance is not drifted; after [`ConformanceHooks::cause_drift`] (when supported) `is_drifted` gives the expected reason |
//! | `reboot` | `reboot` of a live instance is `Ok` or `NotImplemented` and neither terminates nor duplicates it (`list` unchanged, `get` finds it live); once the instance is gone `reboot` is `NodeClaimNotFound` (or `NotImplemented` from a provider that answered so for the live one) |
//! | `repair_policies` | the provider's repair policies pass `RepairPolicies::new` (a set that does not would keep node repair from starting) |
//!
//! Two more names appear only as failures: `fixtures` when the suite refuses to start (bad fixtures, or the
//! default sleeper outside a tokio runtime; no other check runs) and `cleanup` when an instance the suite
//! launched is not gone at the end.
//!
//! Not checked, because nothing in the trait lets the suite provoke them: `NodeClassNotReady` for a class that
//! exists but is not ready, `UnevaluatedNodePool`, `status.imageID` (only "where the cloud has one") and the
//! content of `labels()`.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use karpenter_cloudprovider::{FakeCloudProvider, FakeOptions, InMemoryNodeClasses};
//! use karpenter_kwok::testing::{KWOKNodeClassOptions, kwok_node_class};
//! use karpenter_testing::{FakeClock, kwok};
//! use karpenter_testing::conformance::{FakeHooks, Fixtures, run};
//!
//! // The fake looks node classes up here: the `default` class exists and is ready, any other is missing.
//! let classes = InMemoryNodeClasses::new();
//! classes.insert_resource(&kwok_node_class(KWOKNodeClassOptions::default())).unwrap();
//! let clock = FakeClock::default();
//! let fake = FakeCloudProvider::new(FakeOptions {
//!     clock: Arc::new(clock.clone()),
//!     sleeper: Arc::new(clock.clone()),
//!     node_classes: Some(Arc::new(classes)),
//!     ..kwok::fake_options()
//! });
//! let fixtures = Fixtures {
//!     other_cluster: Some(Arc::new(fake.for_cluster("another-cluster"))),
//!     hooks: Arc::new(FakeHooks(fake.clone())),
//!     sleeper: Arc::new(clock), // fake time: the delete polls do not really wait
//!     ..Fixtures::kwok()
//! };
//! let report = run(Arc::new(fake), &fixtures).await;
//! assert!(report.passed(), "{report}");
//! # });
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use karpenter_api::labels::{CAPACITY_TYPE, INSTANCE_TYPE, OS, ZONE};
use karpenter_api::nodeclaim::{NodeClassReference, ResourceQuantity};
use karpenter_api::{NodeClaim, NodePool};
use karpenter_cloudprovider::{
    CloudProvider, CloudProviderError, DriftReason, ErrorKind, FakeCloudProvider, OfferingRef, Sleeper, TokioSleeper,
};
use karpenter_requirements::{InstanceType, Operator, Requirements, ResourceList};

use crate::karpenter::{NodeClaimOptions, NodePoolOptions, kwok_node_class_ref, node_claim, node_pool};
use crate::nodepool_requirement;

/// What the suite needs from the cloud under test beyond the trait: optional ways to provoke situations.
/// Every method defaults to "not supported", which skips the check that needs it.
#[async_trait]
pub trait ConformanceHooks: Send + Sync + fmt::Debug {
    /// Makes every offering `claim` could launch on unavailable (out of capacity) and returns them; `None` when
    /// the cloud cannot do that on demand.
    async fn exhaust_capacity(&self, _claim: &NodeClaim) -> Option<Vec<OfferingRef>> {
        None
    }

    /// Undoes [`exhaust_capacity`](Self::exhaust_capacity).
    async fn restore_capacity(&self) {}

    /// Makes a launched instance drift and returns the reason `is_drifted` should then give; `None` when not
    /// supported.
    async fn cause_drift(&self, _launched: &NodeClaim) -> Option<DriftReason> {
        None
    }
}

/// Hooks that support nothing (the ICE and drift-reason checks are skipped).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHooks;

#[async_trait]
impl ConformanceHooks for NoHooks {}

/// Hooks for [`FakeCloudProvider`]: capacity through its per-offering insufficient capacity, drift through
/// `set_drifted`.
#[derive(Clone, Debug)]
pub struct FakeHooks(pub FakeCloudProvider);

#[async_trait]
impl ConformanceHooks for FakeHooks {
    async fn exhaust_capacity(&self, claim: &NodeClaim) -> Option<Vec<OfferingRef>> {
        let reqs = claim.requirements().ok()?;
        let mut requests = ResourceList::new();
        for (name, q) in claim.spec.resources.iter().flat_map(|r| r.requests.iter()) {
            requests.insert(name, q.parse().ok()?);
        }
        let mut out = Vec::new();
        for it in &self.0.options().instance_types {
            if !requests.fits(it.allocatable()) || reqs.intersects(&it.requirements).is_err() {
                continue;
            }
            for o in it.offerings.iter().filter(|o| reqs.intersects(&o.requirements).is_ok()) {
                let r = OfferingRef::new(&it.name, o.zone().unwrap_or(""), o.capacity_type().unwrap_or(""));
                self.0.set_insufficient_capacity(r.clone(), true);
                out.push(r);
            }
        }
        Some(out)
    }

    async fn restore_capacity(&self) {
        self.0.clear_insufficient_capacity();
    }

    async fn cause_drift(&self, launched: &NodeClaim) -> Option<DriftReason> {
        let reason = DriftReason::new("ConformanceDrift");
        self.0.set_drifted(launched.provider_id()?, Some(reason.clone())).then_some(reason)
    }
}

/// The suite's inputs. Start from [`Fixtures::new`] (or [`Fixtures::kwok`]) and override fields with struct
/// update syntax.
#[derive(Clone, Debug)]
pub struct Fixtures {
    /// A NodePool whose node class exists and is ready.
    pub node_pool: NodePool,
    /// A NodeClaim the provider can launch (as the provisioner would create it from `node_pool`). Each check
    /// launches a copy named `<name_prefix>-<check>-<n>`.
    pub node_claim: NodeClaim,
    /// Prefix of the NodeClaim names the suite creates.
    pub name_prefix: String,
    /// A reference to a node class that does not exist, for the `unknown_node_class` check. `None` skips that
    /// check: set it so for a provider configured without node-class lookups, which treats every class as present.
    pub missing_node_class: Option<NodeClassReference>,
    /// The same cloud account seen from another cluster, to check that get/list stay within a cluster.
    pub other_cluster: Option<Arc<dyn CloudProvider>>,
    /// Ways to provoke insufficient capacity and drift.
    pub hooks: Arc<dyn ConformanceHooks>,
    /// Waits between `delete` polls. The default, [`Fixtures::tokio_sleeper`], really waits on tokio's timer
    /// and needs a tokio runtime with the time driver; give a `FakeClock` to make the waits instant.
    pub sleeper: Arc<dyn Sleeper>,
    /// Interval between `delete` polls.
    pub delete_poll_interval: Duration,
    /// How many `delete` polls before an instance that is not gone fails the check.
    pub delete_poll_attempts: usize,
}

impl Fixtures {
    /// Fixtures for a provider whose node class `node_class_ref` exists and is ready: a `default` NodePool on it
    /// restricted to linux, a claim from it for 1 CPU and 1 GiB (spot or on-demand), the same kind with the name
    /// `conformance-missing` as the missing node class, no other cluster, no hooks, and tokio's timer waiting up
    /// to 12 delete polls 5 s apart (a minute for an instance to terminate).
    pub fn new(node_class_ref: NodeClassReference) -> Self {
        let pool = node_pool(NodePoolOptions {
            name: Some("default".into()),
            requirements: vec![nodepool_requirement(OS, "In", &["linux"])],
            node_class_ref: Some(node_class_ref.clone()),
            ..Default::default()
        });
        let missing = NodeClassReference::new(&node_class_ref.group, &node_class_ref.kind, "conformance-missing");
        let claim = node_claim(NodeClaimOptions {
            name: Some("conformance".into()),
            node_pool: Some("default".into()),
            requirements: vec![
                nodepool_requirement(OS, "In", &["linux"]),
                nodepool_requirement(karpenter_api::labels::NODE_POOL, "In", &["default"]),
                nodepool_requirement(CAPACITY_TYPE, "In", &["spot", "on-demand"]),
            ],
            requests: [("cpu", "1"), ("memory", "1Gi")].into(),
            node_class_ref: Some(node_class_ref),
            ..Default::default()
        });
        Self {
            node_pool: pool,
            node_claim: claim,
            name_prefix: "conformance".into(),
            missing_node_class: Some(missing),
            other_cluster: None,
            hooks: Arc::new(NoHooks),
            sleeper: Self::tokio_sleeper(),
            delete_poll_interval: Duration::from_secs(5),
            delete_poll_attempts: 12,
        }
    }

    /// [`Fixtures::new`] on the `default` KWOKNodeClass (`karpenter.kwok.sh`).
    pub fn kwok() -> Self {
        Self::new(kwok_node_class_ref("default"))
    }

    /// The default sleeper: tokio's timer. [`run`] recognises this instance and refuses to start outside a
    /// tokio runtime instead of panicking in the first wait.
    pub fn tokio_sleeper() -> Arc<dyn Sleeper> {
        static TOKIO: OnceLock<Arc<dyn Sleeper>> = OnceLock::new();
        TOKIO.get_or_init(|| Arc::new(TokioSleeper)).clone()
    }

    /// Why the suite cannot run with these fixtures, if it cannot.
    fn problem(&self) -> Option<String> {
        if Arc::ptr_eq(&self.sleeper, &Self::tokio_sleeper()) && tokio::runtime::Handle::try_current().is_err() {
            return Some(
                "Fixtures.sleeper is tokio's timer (the default) but no tokio runtime is running: run the suite \
                 inside a tokio runtime with the time driver enabled, or set Fixtures.sleeper to a Sleeper for \
                 your executor (a FakeClock makes the waits instant)"
                    .into(),
            );
        }
        if self.delete_poll_attempts == 0 {
            return Some("Fixtures.delete_poll_attempts is 0: no delete could ever be seen to finish".into());
        }
        if self.name_prefix.is_empty() {
            return Some("Fixtures.name_prefix is empty: the suite could not name its NodeClaims".into());
        }
        let (pool, claim) = (&self.node_pool.spec.template.spec.node_class_ref, &self.node_claim.spec.node_class_ref);
        if pool != claim {
            return Some(format!(
                "Fixtures.node_claim's node class {}/{} {} is not Fixtures.node_pool's {}/{} {}",
                claim.group, claim.kind, claim.name, pool.group, pool.kind, pool.name
            ));
        }
        if let Err(e) = self.node_claim.requirements() {
            return Some(format!("Fixtures.node_claim has invalid requirements: {e}"));
        }
        if let Err(e) = requests_of(&self.node_claim) {
            return Some(format!("Fixtures.node_claim has invalid resource requests: {e}"));
        }
        None
    }
}

/// How one check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The rule holds.
    Passed,
    /// The rule is broken; why.
    Failed(String),
    /// Not checked; why (e.g. a hook the cloud does not support).
    Skipped(String),
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    /// The check's name (see the module table).
    pub name: &'static str,
    /// How it ended.
    pub outcome: Outcome,
    /// Observations that are not failures (e.g. "create is not idempotent; duplicates are listed").
    pub notes: Vec<String>,
}

/// The suite's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The provider's name.
    pub provider: String,
    /// One result per check, in run order.
    pub checks: Vec<CheckResult>,
}

impl Report {
    /// True when no check failed (skipped checks do not fail the suite).
    pub fn passed(&self) -> bool {
        self.failures().is_empty()
    }

    /// The failed checks.
    pub fn failures(&self) -> Vec<&CheckResult> {
        self.checks.iter().filter(|c| matches!(c.outcome, Outcome::Failed(_))).collect()
    }

    /// The result of the named check.
    pub fn check(&self, name: &str) -> Option<&CheckResult> {
        self.checks.iter().find(|c| c.name == name)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "conformance of provider {:?}:", self.provider)?;
        for c in &self.checks {
            match &c.outcome {
                Outcome::Passed => writeln!(f, "  PASS {}", c.name)?,
                Outcome::Failed(why) => writeln!(f, "  FAIL {}: {why}", c.name)?,
                Outcome::Skipped(why) => writeln!(f, "  SKIP {}: {why}", c.name)?,
            }
            for n in &c.notes {
                writeln!(f, "       note: {n}")?;
            }
        }
        Ok(())
    }
}

/// The label the suite puts on every NodeClaim it creates (value: the check), which `create` must keep.
pub const CHECK_LABEL: &str = "conformance.karpenter-rs.dev/check";

/// A check's body: `Err` fails it.
type CheckFn = Result<Vec<String>, String>;

struct Suite<'a> {
    provider: Arc<dyn CloudProvider>,
    fixtures: &'a Fixtures,
    /// Launched claims still to clean up.
    launched: Vec<NodeClaim>,
    /// Claims launched through the other cluster's provider, cleaned up through it.
    foreign: Vec<NodeClaim>,
    counter: usize,
}

/// Runs every check against `provider` (see the module docs) and cleans up what it launched. Fixtures the suite
/// cannot run with (see [`Fixtures::sleeper`]) give a report with the one failed check `fixtures`.
pub async fn run(provider: Arc<dyn CloudProvider>, fixtures: &Fixtures) -> Report {
    let name = provider.name().to_owned();
    if let Some(why) = fixtures.problem() {
        let refused = CheckResult { name: "fixtures", outcome: Outcome::Failed(why), notes: vec![] };
        return Report { provider: name, checks: vec![refused] };
    }
    let mut suite =
        Suite { provider: provider.clone(), fixtures, launched: Vec::new(), foreign: Vec::new(), counter: 0 };
    let mut checks = Vec::new();
    let r = suite.describes_itself().await;
    checks.push(result("describes_itself", r));
    let r = suite.create_returns_launched_claim().await;
    checks.push(result("create_returns_launched_claim", r));
    let r = suite.create_satisfies_claim().await;
    checks.push(result("create_satisfies_claim", r));
    let r = suite.create_leaves_no_duplicate().await;
    checks.push(result("create_leaves_no_duplicate", r));
    let r = suite.repeated_create().await;
    checks.push(result("repeated_create", r));
    let r = suite.get_and_list_by_cluster().await;
    checks.push(result("get_and_list_by_cluster", r));
    let r = suite.terminating_is_visible().await;
    checks.push(result("terminating_is_visible", r));
    let r = suite.delete_until_gone().await;
    checks.push(result("delete_until_gone", r));
    let r = suite.unknown_node_class().await;
    checks.push(skippable("unknown_node_class", r));
    let r = suite.insufficient_capacity().await;
    checks.push(skippable("insufficient_capacity", r));
    let r = suite.drift().await;
    checks.push(skippable("drift", r));
    let r = suite.reboot().await;
    checks.push(result("reboot", r));
    checks.push(result("repair_policies", repair_policies(&*provider)));
    let leftovers = suite.cleanup().await;
    if !leftovers.is_empty() {
        checks.push(CheckResult {
            name: "cleanup",
            outcome: Outcome::Failed(format!("instances not gone after cleanup: {}", leftovers.join(", "))),
            notes: vec![],
        });
    }
    Report { provider: name, checks }
}

fn result(name: &'static str, r: CheckFn) -> CheckResult {
    match r {
        Ok(notes) => CheckResult { name, outcome: Outcome::Passed, notes },
        Err(why) => CheckResult { name, outcome: Outcome::Failed(why), notes: vec![] },
    }
}

/// Like [`result`], with `Ok` notes starting with `SKIP:` meaning skipped.
fn skippable(name: &'static str, r: CheckFn) -> CheckResult {
    match r {
        Ok(notes) if notes.first().is_some_and(|n| n.starts_with("SKIP: ")) => {
            let why = notes.first().map(|n| n.trim_start_matches("SKIP: ").to_owned()).unwrap_or_default();
            CheckResult { name, outcome: Outcome::Skipped(why), notes: notes.into_iter().skip(1).collect() }
        }
        other => result(name, other),
    }
}

fn err(context: &str, e: &CloudProviderError) -> String {
    format!("{context}: {e} ({})", e.kind())
}

fn ids(claims: &[NodeClaim]) -> BTreeSet<String> {
    claims.iter().filter_map(|c| c.provider_id().map(str::to_owned)).collect()
}

fn label<'c>(claim: &'c NodeClaim, key: &str) -> Option<&'c str> {
    claim.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The claim's `spec.resources.requests`, parsed.
fn requests_of(claim: &NodeClaim) -> Result<ResourceList, String> {
    let mut requests = ResourceList::new();
    for (name, q) in claim.spec.resources.iter().flat_map(|r| r.requests.iter()) {
        requests.insert(name, q.0.parse().map_err(|e| format!("{name}: {e}"))?);
    }
    Ok(requests)
}

/// Sets the claim's `spec.resources.requests` to `requests`.
fn set_requests(claim: &mut NodeClaim, requests: &ResourceList) {
    let list: BTreeMap<String, ResourceQuantity> =
        requests.iter().map(|(name, q)| (name.to_string(), ResourceQuantity(q.to_string()))).collect();
    claim.spec.resources.get_or_insert_with(Default::default).requests = list;
}

/// `key In [value]` added to the claim's requirements.
fn pin(claim: &mut NodeClaim, key: &str, value: &str) {
    claim.spec.requirements.push(nodepool_requirement(key, "In", &[value]));
}

/// The instance types `reqs` and `requests` allow, each with its offerings `reqs` allows that are available.
fn launchable<'i>(
    its: &'i [InstanceType],
    reqs: &Requirements,
    requests: &ResourceList,
) -> Vec<(&'i InstanceType, Vec<&'i karpenter_requirements::Offering>)> {
    its.iter()
        .filter(|it| requests.fits(it.allocatable()) && reqs.intersects(&it.requirements).is_ok())
        .map(|it| {
            let offerings =
                it.offerings.iter().filter(|o| o.available && reqs.intersects(&o.requirements).is_ok()).collect();
            (it, offerings)
        })
        .filter(|(_, offerings): &(_, Vec<_>)| !offerings.is_empty())
        .collect()
}

impl Suite<'_> {
    /// A fresh copy of the fixture claim with a unique name.
    fn claim(&mut self, check: &str) -> NodeClaim {
        self.counter += 1;
        let mut c = self.fixtures.node_claim.clone();
        c.metadata.name = Some(format!("{}-{check}-{}", self.fixtures.name_prefix, self.counter));
        c.metadata.uid = None;
        c.status = None;
        // A label of the claim's own, which `create` must carry to the launched claim.
        c.metadata.labels.get_or_insert_with(Default::default).insert(CHECK_LABEL.into(), check.into());
        c
    }

    /// The claim as the controller holds it after launch: its own spec and metadata with the launch status.
    fn as_launched(claim: &NodeClaim, created: &NodeClaim) -> NodeClaim {
        let mut c = claim.clone();
        c.status = created.status.clone();
        let labels = c.metadata.labels.get_or_insert_with(Default::default);
        labels.extend(created.metadata.labels.clone().unwrap_or_default());
        c
    }

    async fn create(&mut self, claim: &NodeClaim) -> Result<NodeClaim, CloudProviderError> {
        let created = self.provider.create(claim).await?;
        self.launched.push(Self::as_launched(claim, &created));
        Ok(created)
    }

    async fn list_ids(&self) -> Result<BTreeSet<String>, String> {
        self.provider.list().await.map(|l| ids(&l)).map_err(|e| err("list", &e))
    }

    async fn describes_itself(&mut self) -> CheckFn {
        let p = &self.provider;
        if p.name().is_empty() {
            return Err("name() is empty".into());
        }
        let kinds = p.supported_node_classes();
        let Some(default) = kinds.first() else { return Err("supported_node_classes() is empty".into()) };
        let reference = &self.fixtures.node_pool.spec.template.spec.node_class_ref;
        if !kinds.iter().any(|k| k.matches(reference)) {
            return Err(format!(
                "the fixture NodePool's node class {}/{} is not among supported_node_classes() (default {}/{})",
                reference.group, reference.kind, default.group, default.kind
            ));
        }
        let its = p.instance_types(&self.fixtures.node_pool).await.map_err(|e| err("instance_types", &e))?;
        if its.is_empty() {
            return Err("instance_types() of the fixture NodePool is empty".into());
        }
        for it in its.iter() {
            if it.offerings.is_empty() {
                return Err(format!("instance type {} has no offerings", it.name));
            }
            if let Some(o) = it.offerings.iter().find(|o| o.zone().is_none() || o.capacity_type().is_none()) {
                return Err(format!(
                    "instance type {} has an offering without zone or capacity type: {:?}",
                    it.name, o
                ));
            }
        }
        Ok(vec![format!("{} instance types", its.len())])
    }

    async fn create_returns_launched_claim(&mut self) -> CheckFn {
        let claim = self.claim("launch");
        let created = self.create(&claim).await.map_err(|e| err("create", &e))?;
        if created.metadata.name != claim.metadata.name {
            return Err(format!("create returned name {:?} for {:?}", created.metadata.name, claim.metadata.name));
        }
        if created.provider_id().is_none_or(str::is_empty) {
            return Err("create returned no status.providerID".into());
        }
        let status = created.status.clone().unwrap_or_default();
        if status.capacity.is_empty() || status.allocatable.is_empty() {
            return Err("create returned no status.capacity / status.allocatable".into());
        }
        for key in [INSTANCE_TYPE, ZONE, CAPACITY_TYPE] {
            if label(&created, key).is_none_or(str::is_empty) {
                return Err(format!("create returned no {key} label"));
            }
        }
        let labels = created.metadata.labels.clone().unwrap_or_default();
        for (key, value) in claim.metadata.labels.iter().flatten() {
            if labels.get(key) != Some(value) {
                return Err(format!(
                    "create dropped the claim's own label {key}={value} (returned {:?})",
                    labels.get(key)
                ));
            }
        }
        // Every single-valued requirement of the launched type is a label (what the scheduler matched on).
        let its =
            self.provider.instance_types(&self.fixtures.node_pool).await.map_err(|e| err("instance_types", &e))?;
        let type_name = label(&created, INSTANCE_TYPE).unwrap_or_default();
        if let Some(it) = its.iter().find(|it| it.name == type_name) {
            for r in it.requirements.iter().filter(|r| r.operator() == Operator::In && r.values().len() == 1) {
                let value = r.any();
                if labels.get(r.key()) != Some(&value) {
                    return Err(format!(
                        "create returned {:?} for label {} where instance type {type_name} has the single value {value:?}",
                        labels.get(r.key()),
                        r.key()
                    ));
                }
            }
        }
        Ok(vec![])
    }

    /// The launched type fits the requests and the launch satisfies the requirements.
    async fn create_satisfies_claim(&mut self) -> CheckFn {
        let its =
            self.provider.instance_types(&self.fixtures.node_pool).await.map_err(|e| err("instance_types", &e))?;
        let base = self.claim("fit");
        let reqs = base.requirements().map_err(|e| format!("fixture claim requirements: {e}"))?;
        let requests = requests_of(&base)?;
        let allowed = launchable(&its, &reqs, &requests);
        let Some((biggest, _)) = allowed.iter().max_by_key(|(it, _)| it.allocatable().cpu()) else {
            return Err("no instance type reported by instance_types() is launchable for the fixture claim".into());
        };
        let mut notes = vec![];
        // Requests: as much CPU as the largest allowed type has, so a launch that ignores them picks a type too
        // small (unless every allowed type is that large).
        let mut big = base.clone();
        let mut big_requests = requests.clone();
        big_requests.insert("cpu", biggest.allocatable().cpu().max(requests.cpu()));
        set_requests(&mut big, &big_requests);
        if allowed.iter().all(|(it, _)| big_requests.fits(it.allocatable())) {
            notes.push("every launchable type has the same CPU: the requests rule is checked weakly".to_owned());
        }
        let created = self.create(&big).await.map_err(|e| err("create for the largest type's CPU", &e))?;
        let name = label(&created, INSTANCE_TYPE).unwrap_or_default();
        let Some(it) = its.iter().find(|it| it.name == name) else {
            return Err(format!("create launched instance type {name:?}, which instance_types() does not report"));
        };
        if !big_requests.fits(it.allocatable()) {
            return Err(format!(
                "create launched {name} (allocatable cpu {}, memory {}) for a claim requesting cpu {}, memory {}",
                it.allocatable().cpu(),
                it.allocatable().memory(),
                big_requests.cpu(),
                big_requests.memory()
            ));
        }
        if let Err(e) = reqs.intersects(&it.requirements) {
            return Err(format!("create launched {name}, whose requirements violate the claim's: {e}"));
        }
        // Requirements: pinned to the priciest allowed offering, so a launch that ignores them and picks the
        // cheapest lands elsewhere.
        let priciest = allowed
            .iter()
            .flat_map(|(it, offerings)| offerings.iter().map(move |o| (*it, *o)))
            .max_by(|a, b| a.1.price.total_cmp(&b.1.price));
        let Some((it, o)) = priciest else { return Ok(notes) };
        let (zone, capacity_type) = (o.zone().unwrap_or_default(), o.capacity_type().unwrap_or_default());
        let mut pinned = self.claim("pinned");
        pin(&mut pinned, INSTANCE_TYPE, &it.name);
        pin(&mut pinned, ZONE, zone);
        pin(&mut pinned, CAPACITY_TYPE, capacity_type);
        let pinned_reqs = pinned.requirements().map_err(|e| format!("pinned claim requirements: {e}"))?;
        let created = self
            .create(&pinned)
            .await
            .map_err(|e| err(&format!("create pinned to {}/{zone}/{capacity_type}", it.name), &e))?;
        let labels = created.metadata.labels.clone().unwrap_or_default();
        let resolved = Requirements::from_labels(labels.iter());
        if let Err(e) = pinned_reqs.intersects(&resolved) {
            return Err(format!(
                "the launched labels violate the claim's requirements (pinned to {}/{zone}/{capacity_type}): {e}",
                it.name
            ));
        }
        Ok(notes)
    }

    async fn create_leaves_no_duplicate(&mut self) -> CheckFn {
        let before = self.list_ids().await?;
        let claim = self.claim("single");
        let created = self.create(&claim).await.map_err(|e| err("create", &e))?;
        let after = self.list_ids().await?;
        let new: Vec<&String> = after.difference(&before).collect();
        let id = created.provider_id().unwrap_or_default();
        if new.len() != 1 || new.first().map(|s| s.as_str()) != Some(id) {
            return Err(format!(
                "one create added {} instance(s) to list() ({new:?}); expected exactly {id:?}",
                new.len()
            ));
        }
        Ok(vec![])
    }

    async fn repeated_create(&mut self) -> CheckFn {
        let before = self.list_ids().await?;
        let claim = self.claim("repeat");
        let first = self.create(&claim).await.map_err(|e| err("first create", &e))?;
        let second = self.create(&claim).await.map_err(|e| err("second create", &e))?;
        let (p, c2) = (self.provider.clone(), claim.clone());
        let (a, b) = futures::future::join(p.create(&c2), p.create(&c2)).await;
        let mut returned = BTreeSet::new();
        for (what, r) in [("first", Ok(first)), ("second", Ok(second)), ("concurrent", a), ("concurrent", b)] {
            let created = r.map_err(|e| err(&format!("{what} create"), &e))?;
            self.launched.push(Self::as_launched(&claim, &created));
            returned.insert(created.provider_id().unwrap_or_default().to_owned());
        }
        let after = self.list_ids().await?;
        let new: BTreeSet<String> = after.difference(&before).cloned().collect();
        let hidden: Vec<&String> = returned.iter().filter(|id| !after.contains(*id)).collect();
        if !hidden.is_empty() {
            return Err(format!("repeated creates launched {returned:?}; {hidden:?} not visible in list() for GC"));
        }
        if returned.len() == 1 {
            // Instances listed beyond the one returned are visible to the GC, which the rule asks; a single create
            // leaving one behind is `create_leaves_no_duplicate`'s failure.
            if new != returned {
                return Ok(vec![format!("create returned one instance {returned:?} and list() gained {new:?}")]);
            }
            return Ok(vec![]);
        }
        Ok(vec![format!(
            "create is not idempotent per NodeClaim ({} instances for one claim); all are listed, so GC removes the extras",
            returned.len()
        )])
    }

    async fn get_and_list_by_cluster(&mut self) -> CheckFn {
        let claim = self.claim("get");
        let created = self.create(&claim).await.map_err(|e| err("create", &e))?;
        let id = created.provider_id().unwrap_or_default().to_owned();
        let got = self.provider.get(&id).await.map_err(|e| err("get", &e))?;
        if got.provider_id() != Some(id.as_str()) {
            return Err(format!("get({id:?}) returned providerID {:?}", got.provider_id()));
        }
        if label(&got, INSTANCE_TYPE) != label(&created, INSTANCE_TYPE) {
            return Err(format!("get({id:?}) reports another instance type than create"));
        }
        if !self.list_ids().await?.contains(&id) {
            return Err(format!("list() does not include {id:?}"));
        }
        let Some(other) = &self.fixtures.other_cluster else {
            return Ok(vec!["no other cluster given: cluster separation not checked".into()]);
        };
        let theirs = other.list().await.map_err(|e| err("other cluster's list", &e))?;
        if ids(&theirs).contains(&id) {
            return Err(format!("another cluster's list() includes {id:?}"));
        }
        match other.get(&id).await {
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(err("another cluster's get should be NodeClaimNotFound", &e)),
            Ok(_) => return Err(format!("another cluster's get({id:?}) found this cluster's instance")),
        }
        // And the other way round: an instance of the other cluster is not ours.
        let foreign_claim = self.claim("foreign");
        let foreign = other.create(&foreign_claim).await.map_err(|e| err("other cluster's create", &e))?;
        self.foreign.push(Self::as_launched(&foreign_claim, &foreign));
        let foreign_id = foreign.provider_id().unwrap_or_default().to_owned();
        if self.list_ids().await?.contains(&foreign_id) {
            return Err(format!("list() includes another cluster's instance {foreign_id:?}"));
        }
        match self.provider.get(&foreign_id).await {
            Err(e) if e.is_not_found() => Ok(vec![]),
            Err(e) => Err(err("get of another cluster's instance should be NodeClaimNotFound", &e)),
            Ok(_) => Err(format!("get({foreign_id:?}) found another cluster's instance")),
        }
    }

    /// While an instance terminates, `get` and `list` show it with a deletion timestamp.
    async fn terminating_is_visible(&mut self) -> CheckFn {
        let claim = self.claim("terminating");
        let created = self.create(&claim).await.map_err(|e| err("create", &e))?;
        let launched = Self::as_launched(&claim, &created);
        let id = created.provider_id().unwrap_or_default().to_owned();
        if let Err(e) = self.provider.delete(&launched).await {
            return Err(err("delete of a live instance should be Ok (deletion under way)", &e));
        }
        let got = match self.provider.get(&id).await {
            Err(e) if e.is_not_found() => {
                return Ok(vec!["the instance was gone at once: the terminating state was not observed".into()]);
            }
            Err(e) => return Err(err("get of a terminating instance", &e)),
            Ok(got) => got,
        };
        if got.metadata.deletion_timestamp.is_none() {
            return Err(format!("get({id:?}) of a terminating instance has no deletionTimestamp"));
        }
        let listed = self.provider.list().await.map_err(|e| err("list", &e))?;
        match listed.iter().find(|c| c.provider_id() == Some(id.as_str())) {
            None => Err(format!("list() hides terminating instance {id:?} (get still finds it)")),
            Some(c) if c.metadata.deletion_timestamp.is_none() => {
                Err(format!("list() shows terminating instance {id:?} without deletionTimestamp"))
            }
            Some(_) => Ok(vec![]),
        }
    }

    /// A NodePool or NodeClaim on a node class that does not exist gets no instance types and no instance.
    async fn unknown_node_class(&mut self) -> CheckFn {
        let Some(missing) = self.fixtures.missing_node_class.clone() else {
            return Ok(vec!["SKIP: Fixtures.missing_node_class is None".into()]);
        };
        let what = format!("{}/{} {}", missing.group, missing.kind, missing.name);
        let mut pool = self.fixtures.node_pool.clone();
        pool.spec.template.spec.node_class_ref = missing.clone();
        match self.provider.instance_types(&pool).await {
            Ok(its) if its.is_empty() => {}
            Ok(its) => {
                return Err(format!(
                    "instance_types() answers {} instance type(s) for a NodePool on missing node class {what}; \
                     expected none",
                    its.len()
                ));
            }
            Err(e) => {
                return Err(err(&format!("instance_types() for missing node class {what} should be Ok and empty"), &e));
            }
        }
        let mut claim = self.claim("missing-class");
        claim.spec.node_class_ref = missing;
        let before = self.list_ids().await?;
        match self.create(&claim).await {
            Ok(created) => {
                return Err(format!("create launched {:?} on missing node class {what}", created.provider_id()));
            }
            Err(e) => match e.kind() {
                ErrorKind::InsufficientCapacity | ErrorKind::NodeClassNotReady | ErrorKind::Create => {}
                _ => {
                    return Err(err(
                        &format!(
                            "create on missing node class {what} should fail with InsufficientCapacity, \
                             NodeClassNotReady or Create"
                        ),
                        &e,
                    ));
                }
            },
        }
        let after = self.list_ids().await?;
        if after != before {
            let new: Vec<&String> = after.difference(&before).collect();
            return Err(format!("a failed create on missing node class {what} left instances behind: {new:?}"));
        }
        Ok(vec![])
    }

    /// Deletes a fresh instance and follows it until it is gone.
    async fn delete_until_gone(&mut self) -> CheckFn {
        let claim = self.claim("delete");
        let created = self.create(&claim).await.map_err(|e| err("create", &e))?;
        let launched = Self::as_launched(&claim, &created);
        let id = created.provider_id().unwrap_or_default().to_owned();
        if let Err(e) = self.provider.delete(&launched).await {
            return Err(err("delete of a live instance should be Ok (deletion under way)", &e));
        }
        let polls = self.poll_gone(&launched).await?;
        match self.provider.get(&id).await {
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(err("get of a gone instance should be NodeClaimNotFound", &e)),
            Ok(_) => return Err(format!("get({id:?}) still finds the instance after delete said it is gone")),
        }
        if self.list_ids().await?.contains(&id) {
            return Err(format!("list() still includes {id:?} after delete said it is gone"));
        }
        match self.provider.delete(&launched).await {
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(err("delete of a gone instance should be NodeClaimNotFound", &e)),
            Ok(()) => return Err("delete of a gone instance returned Ok".into()),
        }
        Ok(vec![format!("gone after {polls} delete poll(s)")])
    }

    async fn poll_gone(&self, launched: &NodeClaim) -> Result<usize, String> {
        poll_gone(&*self.provider, self.fixtures, launched).await
    }

    async fn insufficient_capacity(&mut self) -> CheckFn {
        let claim = self.claim("ice");
        let Some(exhausted) = self.fixtures.hooks.exhaust_capacity(&claim).await else {
            return Ok(vec!["SKIP: the hooks cannot exhaust capacity".into()]);
        };
        let outcome = self.ice_after_exhaustion(&claim, &exhausted).await;
        self.fixtures.hooks.restore_capacity().await;
        outcome
    }

    async fn ice_after_exhaustion(&mut self, claim: &NodeClaim, exhausted: &[OfferingRef]) -> CheckFn {
        let before = self.list_ids().await?;
        let e = match self.create(claim).await {
            Ok(created) => {
                return Err(format!(
                    "create succeeded ({:?}) although every allowed offering was exhausted",
                    created.provider_id()
                ));
            }
            Err(e) => e,
        };
        if e.kind() != ErrorKind::InsufficientCapacity {
            return Err(err("create should fail with InsufficientCapacity", &e));
        }
        let named = e.failed_offerings();
        if named.is_empty() {
            return Err(format!("the InsufficientCapacity error names no offering: {e}"));
        }
        let exhausted: BTreeSet<&OfferingRef> = exhausted.iter().collect();
        if let Some(o) = named.iter().find(|o| !exhausted.contains(o)) {
            return Err(format!("the error names offering {o}, which was not exhausted"));
        }
        let after = self.list_ids().await?;
        if after != before {
            let new: Vec<&String> = after.difference(&before).collect();
            return Err(format!("a failed create left instances behind: {new:?}"));
        }
        let its =
            self.provider.instance_types(&self.fixtures.node_pool).await.map_err(|e| err("instance_types", &e))?;
        for o in named {
            let found = its.iter().filter(|it| it.name == o.instance_type).flat_map(|it| &it.offerings).find(|off| {
                off.zone() == Some(o.zone.as_str()) && off.capacity_type() == Some(o.capacity_type.as_str())
            });
            match found {
                Some(off) if off.available => {
                    return Err(format!("instance_types() still reports failed offering {o} available"));
                }
                Some(_) => {}
                None => return Err(format!("instance_types() does not report failed offering {o} at all")),
            }
        }
        Ok(vec![format!("{} offering(s) named", named.len())])
    }

    async fn drift(&mut self) -> CheckFn {
        let claim = self.claim("drift");
        let created = self.create(&claim).await.map_err(|e| err("create", &e))?;
        let launched = Self::as_launched(&claim, &created);
        match self.provider.is_drifted(&launched).await {
            Ok(None) => {}
            Ok(Some(r)) => return Err(format!("a fresh instance is drifted: {r}")),
            Err(e) => return Err(err("is_drifted", &e)),
        }
        let Some(expected) = self.fixtures.hooks.cause_drift(&launched).await else {
            return Ok(vec!["SKIP: the hooks cannot cause drift (a fresh instance is correctly not drifted)".into()]);
        };
        match self.provider.is_drifted(&launched).await {
            Ok(Some(r)) if r == expected => Ok(vec![]),
            Ok(other) => Err(format!("is_drifted gave {other:?} after drift was caused; expected {expected}")),
            Err(e) => Err(err("is_drifted", &e)),
        }
    }

    async fn reboot(&mut self) -> CheckFn {
        let claim = self.claim("reboot");
        let created = self.create(&claim).await.map_err(|e| err("create", &e))?;
        let launched = Self::as_launched(&claim, &created);
        let id = created.provider_id().unwrap_or_default().to_owned();
        let before = self.list_ids().await?;
        let rebooted = match self.provider.reboot(&launched).await {
            Ok(()) => true,
            Err(e) if e.kind() == ErrorKind::NotImplemented => false,
            Err(e) => return Err(err("reboot of a live instance should be Ok or NotImplemented", &e)),
        };
        let after = self.list_ids().await?;
        if after != before {
            let gone: Vec<&String> = before.difference(&after).collect();
            let new: Vec<&String> = after.difference(&before).collect();
            return Err(format!("reboot changed list(): {gone:?} gone, {new:?} new"));
        }
        match self.provider.get(&id).await {
            Ok(got) if got.metadata.deletion_timestamp.is_some() => {
                return Err(format!("reboot left {id:?} terminating"));
            }
            Ok(_) => {}
            Err(e) => return Err(err(&format!("get({id:?}) after reboot"), &e)),
        }
        if let Err(e) = self.provider.delete(&launched).await {
            return Err(err("delete after reboot", &e));
        }
        self.poll_gone(&launched).await?;
        match self.provider.reboot(&launched).await {
            Err(e) if e.is_not_found() => {}
            Err(e) if e.kind() == ErrorKind::NotImplemented && !rebooted => {}
            Err(e) => return Err(err("reboot of a gone instance should be NodeClaimNotFound", &e)),
            Ok(()) => return Err(format!("reboot of gone instance {id:?} returned Ok")),
        }
        if rebooted { Ok(vec![]) } else { Ok(vec!["reboot is NotImplemented: node repair replaces instead".into()]) }
    }

    /// Deletes every launched instance and waits until gone; returns the provider ids that are not.
    async fn cleanup(&mut self) -> Vec<String> {
        let mut leftovers = cleanup(&*self.provider, self.fixtures, std::mem::take(&mut self.launched)).await;
        if let Some(other) = &self.fixtures.other_cluster {
            leftovers.extend(cleanup(&**other, self.fixtures, std::mem::take(&mut self.foreign)).await);
        }
        leftovers
    }
}

/// The provider's repair policies pass the same validation node repair applies at startup.
fn repair_policies(provider: &dyn CloudProvider) -> CheckFn {
    let policies = provider.repair_policies();
    let n = policies.len();
    karpenter_api::repair::RepairPolicies::new(policies)
        .map_err(|e| format!("repair_policies() is not a valid set: {e}"))?;
    Ok(vec![format!("{n} repair policies")])
}

/// Polls `delete` until `NodeClaimNotFound`; `Ok(polls)` or why not.
async fn poll_gone(provider: &dyn CloudProvider, fixtures: &Fixtures, launched: &NodeClaim) -> Result<usize, String> {
    for attempt in 1..=fixtures.delete_poll_attempts {
        if attempt > 1 {
            fixtures.sleeper.sleep(fixtures.delete_poll_interval).await;
        }
        match provider.delete(launched).await {
            Err(e) if e.is_not_found() => return Ok(attempt),
            Err(e) => return Err(err("delete poll", &e)),
            Ok(()) => {}
        }
    }
    Err(format!(
        "instance {:?} not gone after {} delete polls {:?} apart",
        launched.provider_id(),
        fixtures.delete_poll_attempts,
        fixtures.delete_poll_interval
    ))
}

/// Deletes every launched instance through `provider` and waits until gone; returns the ids that are not.
async fn cleanup(provider: &dyn CloudProvider, fixtures: &Fixtures, launched: Vec<NodeClaim>) -> Vec<String> {
    let mut leftovers = Vec::new();
    let mut seen = BTreeSet::new();
    for claim in launched {
        let Some(id) = claim.provider_id().map(str::to_owned) else { continue };
        if !seen.insert(id.clone()) {
            continue;
        }
        match provider.delete(&claim).await {
            Err(e) if e.is_not_found() => continue,
            Err(_) => {
                leftovers.push(id);
                continue;
            }
            Ok(()) => {}
        }
        if poll_gone(provider, fixtures, &claim).await.is_err() {
            leftovers.push(id);
        }
    }
    leftovers
}
