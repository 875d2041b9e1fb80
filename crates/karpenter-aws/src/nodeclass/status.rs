//! The node class status computation: [`NodeClassResolver::reconcile`] turns an EC2NodeClass into its new
//! status (resolved subnets, security groups, AMIs, instance profile, capacity reservations) with the
//! conditions upstream sets, and the time to look again. It writes nothing: the kube-backed runner
//! ([`super::controller`]) patches the result.
//!
//! Conditions (types and reasons from `crate::api::conditions`):
//!
//! | Condition | False reason |
//! |---|---|
//! | `AMIsReady` | `AMINotFound` (nothing matches, or no SSM parameter of the alias exists), `UnsupportedAlias` |
//! | `SubnetsReady` | `SubnetsNotFound` |
//! | `SecurityGroupsReady` | `SecurityGroupsNotFound` |
//! | `InstanceProfileReady` | `InstanceProfileNotFound` (IAM refused or the spec names no role/profile) |
//! | `PlacementGroupReady` | `PlacementGroupNotFound` (only with a selector; True without) |
//! | `CapacityReservationsReady` | (only with the `ReservedCapacity` gate; True once described) |
//! | `ValidationSucceeded` | `InvalidKubeletConfiguration` ([`kubelet_configuration_problems`], checked first), `InvalidUserData` and `ClusterCIDRNotFound` ([`user_data_problem`]: user data a launch could not merge, AL2023 without the cluster's service CIDR), `KubeletExpressionsDisabled`, `KubeletExpressionInvalid`, `KubeletExpressionEvaluationFailed` (kubelet CEL expressions, with [`NodeClassResolver::with_instance_types`]), `DependenciesNotReady`, `TagValidationFailed`, and the dry-run reasons of an [`AuthorizationCheck`] |
//! | `Ready` | `UnhealthyDependents` (False when one is False, Unknown when one is Unknown) |
//!
//! A True condition's reason is its type. Each condition carries the node class's generation as
//! `observedGeneration`; a transition time changes only when the status does. A failed AWS call that may
//! succeed on retry (throttling, transient) keeps the previous value and condition of that part (Unknown if it
//! had none); any other failure sets the part's condition False with the error as message.

use std::sync::Arc;
use std::time::Duration;

use crate::api::{
    Ami, FORBIDDEN_TAG_KEYS, FORBIDDEN_TAG_PREFIX, SecurityGroup, Subnet, conditions, conditions::reasons,
    validate_kubelet_configuration,
};
use crate::api::{AmiFamily, EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use karpenter_api::condition::{ConditionStatus, set_condition};
use karpenter_cloudprovider::Clock;

use super::ami::{AmiError, AmiProvider, ResolvedAmi, SsmProvider};
use super::api::{CapacityReservationApi, IamApi, ImageApi, PlacementGroupApi, SecurityGroupApi, SsmApi, SubnetApi};
use super::cache::TtlCache;
use super::instance_profile::{ClusterIdentity, InstanceProfileError, InstanceProfileProvider};
use super::network::{SECURITY_GROUP_CACHE_TTL, SecurityGroupProvider, SubnetInfo, SubnetProvider};
use super::reservation::{CapacityReservationProvider, PlacementGroupProvider};
use crate::api_error::AwsApiError;
use crate::instancetypes::{ExpressionCheck, InstanceTypeProvider};
use crate::launch::kubelet_inputs::user_data_kubelet_refusals;
use crate::launch::userdata::{UserDataError, node_class_user_data_problem};

/// `PlacementGroupReady=False` reason.
pub const PLACEMENT_GROUP_NOT_FOUND: &str = "PlacementGroupNotFound";
/// `Ready` reason when a dependent condition is not True.
pub const UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";
/// Condition reason while a part has never been resolved (its first AWS call failed with a retryable error).
pub const AWAITING_RESOLUTION: &str = "AwaitingResolution";

/// `ValidationSucceeded=Unknown` reason while kubelet expressions wait for the instance-type catalogue.
pub const AWAITING_INSTANCE_TYPES: &str = "AwaitingInstanceTypes";
const AWAITING_INSTANCE_TYPES_MESSAGE: &str =
    "the kubelet expressions are evaluated against every instance type once the catalogue is fetched";

/// How long a validation result is reused.
pub const VALIDATION_CACHE_TTL: Duration = Duration::from_secs(30 * 60);

/// The AWS APIs resolution needs.
#[derive(Clone, Debug)]
pub struct ResolverApis {
    pub subnets: Arc<dyn SubnetApi>,
    pub security_groups: Arc<dyn SecurityGroupApi>,
    pub images: Arc<dyn ImageApi>,
    pub ssm: Arc<dyn SsmApi>,
    pub capacity_reservations: Arc<dyn CapacityReservationApi>,
    pub placement_groups: Arc<dyn PlacementGroupApi>,
    pub iam: Arc<dyn IamApi>,
}

/// Settings of resolution (from `AwsSettings` and the feature gates; plain values, no operator dependency).
#[derive(Clone, Debug)]
pub struct ResolverSettings {
    pub cluster: ClusterIdentity,
    /// `SUBNET_REFRESH_INTERVAL`.
    pub subnet_refresh_interval: Duration,
    /// `AMI_REFRESH_INTERVAL`.
    pub ami_refresh_interval: Duration,
    /// `SECURITY_GROUP_REFRESH_INTERVAL`: how long resolved security groups are reused before
    /// DescribeSecurityGroups is called again.
    pub security_group_refresh_interval: Duration,
    /// The `ReservedCapacity` feature gate.
    pub reserved_capacity: bool,
    /// The cluster's service CIDR (EKS `DescribeCluster`); AL2023 classes are not valid without it, since
    /// nodeadm refuses a `NodeConfig` that lacks it.
    pub service_cidr: Option<String>,
}

impl Default for ResolverSettings {
    fn default() -> Self {
        Self {
            cluster: ClusterIdentity::default(),
            subnet_refresh_interval: Duration::from_secs(60),
            ami_refresh_interval: Duration::from_secs(60),
            security_group_refresh_interval: SECURITY_GROUP_CACHE_TTL,
            reserved_capacity: true,
            service_cidr: None,
        }
    }
}

/// A failed dry-run authorization check (`ValidationSucceeded=False`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthorizationFailure {
    /// `CreateFleetAuthCheckFailed`, `CreateLaunchTemplateAuthCheckFailed`, `RunInstancesAuthCheckFailed`, or
    /// another validation reason (`UserDataSizeLimitExceeded`, ...).
    pub reason: String,
    pub message: String,
}

/// The dry-run checks of validation (`CreateFleet`, `CreateLaunchTemplate`, `RunInstances` with `DryRun`),
/// implemented by the launch side, which knows how to build those requests. Skipped when `DISABLE_DRY_RUN`
/// (do not pass one).
#[async_trait]
pub trait AuthorizationCheck: Send + Sync + std::fmt::Debug {
    /// `Ok` when every dry run answered `DryRunOperation`; the first failure otherwise. `status` is the freshly
    /// resolved status (subnets, security groups, AMIs, instance profile) the dry runs should use.
    async fn check(&self, node_class: &EC2NodeClass, status: &EC2NodeClassStatus) -> Result<(), AuthorizationFailure>;
}

/// The outcome of one reconcile.
#[derive(Clone, Debug, PartialEq)]
pub struct Reconciled {
    /// The new status (conditions included).
    pub status: EC2NodeClassStatus,
    /// When to reconcile again.
    pub requeue_after: Duration,
}

/// Resolves node classes: every provider with its cache, and the status computation.
#[derive(Debug)]
pub struct NodeClassResolver {
    pub subnets: Arc<SubnetProvider>,
    pub security_groups: Arc<SecurityGroupProvider>,
    pub amis: Arc<AmiProvider>,
    pub instance_profiles: Arc<InstanceProfileProvider>,
    pub capacity_reservations: Arc<CapacityReservationProvider>,
    pub placement_groups: Arc<PlacementGroupProvider>,
    authorization: Option<Arc<dyn AuthorizationCheck>>,
    /// Evaluates kubelet CEL expressions against its catalogue (and holds the `NodeClassCEL` gate).
    instance_types: Option<InstanceTypeProvider>,
    validation: TtlCache<(String, i64), Result<(), AuthorizationFailure>>,
    reserved_capacity: bool,
    service_cidr: Option<String>,
    clock: Arc<dyn Clock>,
}

/// Requeue after success of most parts.
const REQUEUE_OK: Duration = Duration::from_secs(300);
/// Requeue after a failure, and the subnet cadence.
const REQUEUE_SHORT: Duration = Duration::from_secs(60);
/// Validation cadence.
const REQUEUE_VALIDATION: Duration = Duration::from_secs(600);

/// What a part's resolution says about its condition.
enum Part<T> {
    /// Resolved: the value and whether the condition is True (with the False reason/message otherwise).
    Done(T, Result<(), (String, String)>),
    /// Retryable failure: keep the previous value and condition.
    Keep(String),
}

fn keep_or_fail<T>(e: &AwsApiError, reason: &str, empty: T) -> Part<T> {
    if e.is_retryable() {
        Part::Keep(e.to_string())
    } else {
        Part::Done(empty, Err((reason.to_string(), e.to_string())))
    }
}

/// The status one reconcile is computing, and how soon to look again so far.
struct StatusUpdate {
    status: EC2NodeClassStatus,
    requeue: Duration,
    /// The node class's generation (every condition's `observedGeneration`).
    generation: Option<i64>,
    now: DateTime<Utc>,
}

impl StatusUpdate {
    /// Look again within `after` at the latest.
    fn requeue_within(&mut self, after: Duration) {
        self.requeue = self.requeue.min(after);
    }

    /// Sets a condition: True with its type as reason, or False with the reason and message.
    fn set(&mut self, type_: &str, result: Result<(), (String, String)>) {
        let (s, reason, message) = match result {
            Ok(()) => (ConditionStatus::True, type_.to_string(), String::new()),
            Err((reason, message)) => (ConditionStatus::False, reason, message),
        };
        set_condition(&mut self.status.conditions, type_, s, &reason, &message, self.generation, self.now);
    }

    /// Sets a condition Unknown (a transient state that blocks launches without failing).
    fn unknown(&mut self, type_: &str, reason: &str, message: &str) {
        let (generation, now) = (self.generation, self.now);
        set_condition(&mut self.status.conditions, type_, ConditionStatus::Unknown, reason, message, generation, now);
    }

    /// Keeps a condition as it is after a retryable failure; one never set becomes Unknown
    /// (`AwaitingResolution`) with the failure as message.
    fn keep(&mut self, type_: &str, message: &str) {
        if !self.status.conditions.iter().any(|c| c.type_ == type_) {
            set_condition(
                &mut self.status.conditions,
                type_,
                ConditionStatus::Unknown,
                AWAITING_RESOLUTION,
                message,
                self.generation,
                self.now,
            );
        }
    }

    /// Sets `Ready` from the dependent conditions ([`ready_condition`]).
    fn set_ready(&mut self, dependents: &[&str]) {
        let (s, reason, message) = ready_condition(&self.status, dependents);
        set_condition(&mut self.status.conditions, conditions::READY, s, &reason, &message, self.generation, self.now);
    }

    /// Applies a part's resolution: a resolved value is stored (`store`) and its condition set; a kept one
    /// leaves value and condition alone ([`keep`](Self::keep)). Returns whether the part is not resolved True,
    /// for the parts that then look again sooner.
    fn apply<T>(&mut self, type_: &str, part: Part<T>, store: impl FnOnce(&mut EC2NodeClassStatus, T)) -> bool {
        match part {
            Part::Done(v, r) => {
                let failed = r.is_err();
                store(&mut self.status, v);
                self.set(type_, r);
                failed
            }
            Part::Keep(m) => {
                self.keep(type_, &m);
                true
            }
        }
    }
}

/// Every problem of the class's `spec.kubelet` (unknown fields, wrong shapes, fields its AMI family cannot carry,
/// broken kubelet rules), joined into one message with `kubelet.`-rooted paths; `None` when it has none.
pub fn kubelet_configuration_problems(spec: &EC2NodeClassSpec) -> Option<String> {
    let kubelet = spec.kubelet.as_ref()?;
    let violations = validate_kubelet_configuration(kubelet, spec.effective_ami_family(), "kubelet");
    (!violations.is_empty()).then(|| violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
}

/// What keeps a launch from building the class's user data ([`node_class_user_data_problem`]), as a
/// `ValidationSucceeded=False` reason and message; `None` when a launch can build it.
pub fn user_data_problem(spec: &EC2NodeClassSpec, service_cidr: Option<&str>) -> Option<(&'static str, String)> {
    // Launches bootstrap an unknown family as AL2023 (`crate::launch::instance`).
    let family = spec.effective_ami_family().unwrap_or(AmiFamily::Al2023);
    if let Some(problem) = node_class_user_data_problem(family, spec.user_data.as_deref(), service_cidr) {
        let reason = match problem {
            UserDataError::MissingServiceCidr => reasons::CLUSTER_CIDR_NOT_FOUND,
            UserDataError::InvalidMime(_) | UserDataError::InvalidToml(_) => reasons::INVALID_USER_DATA,
        };
        return Some((reason, problem.to_string()));
    }
    // The kubelet configuration the user data contributes, merged with the class's: what the kubelet refuses
    // would leave every node of the class unregistered.
    let refusals = user_data_kubelet_refusals(family, spec.user_data.as_deref(), spec.kubelet.as_ref());
    (!refusals.is_empty()).then(|| {
        let message = format!("userData: the kubelet would refuse its configuration: {}", refusals.join("; "));
        (reasons::INVALID_USER_DATA, message)
    })
}

/// The AMIs part. None matching, an alias without SSM parameters, or one unsupported on this Kubernetes
/// version is False; an API error is kept when retryable; an invalid Kubernetes version is kept (the AMIs
/// cannot be judged without one).
fn amis_part(resolved: Result<Vec<ResolvedAmi>, AmiError>) -> Part<Vec<Ami>> {
    match resolved {
        Ok(amis) if amis.is_empty() => {
            Part::Done(vec![], Err((reasons::AMI_NOT_FOUND.into(), "AMISelector did not match any AMIs".into())))
        }
        Ok(amis) => Part::Done(amis.iter().map(ResolvedAmi::to_status).collect(), Ok(())),
        Err(AmiError::UnsupportedAlias { alias, kubernetes_version }) => Part::Done(
            vec![],
            Err((
                reasons::UNSUPPORTED_ALIAS.into(),
                format!("alias {alias} is not supported on Kubernetes {kubernetes_version}"),
            )),
        ),
        Err(e @ AmiError::NoParameters(_)) => Part::Done(vec![], Err((reasons::AMI_NOT_FOUND.into(), e.to_string()))),
        Err(AmiError::Api(e)) => keep_or_fail(&e, reasons::AMI_NOT_FOUND, vec![]),
        Err(e @ AmiError::InvalidKubernetesVersion(_)) => Part::Keep(e.to_string()),
    }
}

/// The subnets part: none matching is False.
fn subnets_part(listed: Result<Vec<SubnetInfo>, AwsApiError>) -> Part<Vec<Subnet>> {
    match listed {
        Ok(s) if s.is_empty() => Part::Done(
            vec![],
            Err((reasons::SUBNETS_NOT_FOUND.into(), "SubnetSelector did not match any Subnets".into())),
        ),
        Ok(s) => Part::Done(s.iter().map(SubnetInfo::to_status).collect(), Ok(())),
        Err(e) => keep_or_fail(&e, reasons::SUBNETS_NOT_FOUND, vec![]),
    }
}

/// The security groups part: none matching is False.
fn security_groups_part(listed: Result<Vec<SecurityGroup>, AwsApiError>) -> Part<Vec<SecurityGroup>> {
    match listed {
        Ok(g) if g.is_empty() => Part::Done(
            vec![],
            Err((
                reasons::SECURITY_GROUPS_NOT_FOUND.into(),
                "SecurityGroupSelector did not match any SecurityGroups".into(),
            )),
        ),
        Ok(g) => Part::Done(g, Ok(())),
        Err(e) => keep_or_fail(&e, reasons::SECURITY_GROUPS_NOT_FOUND, vec![]),
    }
}

/// `Ready` from the dependent conditions: True when all are True, else False when one is False and Unknown
/// otherwise (a missing condition counts as Unknown), naming each one not True. Returns status, reason and
/// message.
fn ready_condition(status: &EC2NodeClassStatus, dependents: &[&str]) -> (ConditionStatus, String, String) {
    let mut unhealthy = Vec::new();
    let mut any_false = false;
    for d in dependents {
        let s = status.conditions.iter().find(|c| c.type_ == *d).map_or(ConditionStatus::Unknown, |c| c.status);
        if s != ConditionStatus::True {
            any_false |= s == ConditionStatus::False;
            unhealthy.push(format!("{d}={s:?}"));
        }
    }
    if unhealthy.is_empty() {
        (ConditionStatus::True, conditions::READY.to_string(), String::new())
    } else if any_false {
        (ConditionStatus::False, UNHEALTHY_DEPENDENTS.to_string(), unhealthy.join(", "))
    } else {
        (ConditionStatus::Unknown, UNHEALTHY_DEPENDENTS.to_string(), unhealthy.join(", "))
    }
}

impl NodeClassResolver {
    pub fn new(apis: ResolverApis, settings: ResolverSettings, clock: Arc<dyn Clock>) -> Self {
        let ssm = Arc::new(SsmProvider::new(apis.ssm, clock.clone()));
        Self {
            subnets: Arc::new(SubnetProvider::new(apis.subnets, clock.clone(), settings.subnet_refresh_interval)),
            security_groups: Arc::new(SecurityGroupProvider::new(
                apis.security_groups,
                clock.clone(),
                settings.security_group_refresh_interval,
            )),
            amis: Arc::new(AmiProvider::new(apis.images, ssm, clock.clone(), settings.ami_refresh_interval)),
            instance_profiles: Arc::new(InstanceProfileProvider::new(apis.iam, settings.cluster, clock.clone())),
            capacity_reservations: Arc::new(CapacityReservationProvider::new(
                apis.capacity_reservations,
                clock.clone(),
            )),
            placement_groups: Arc::new(PlacementGroupProvider::new(apis.placement_groups, clock.clone())),
            authorization: None,
            instance_types: None,
            validation: TtlCache::new(clock.clone(), VALIDATION_CACHE_TTL),
            reserved_capacity: settings.reserved_capacity,
            service_cidr: settings.service_cidr,
            clock,
        }
    }

    /// Adds the dry-run authorization checks to validation.
    pub fn with_authorization_check(mut self, check: Arc<dyn AuthorizationCheck>) -> Self {
        self.authorization = Some(check);
        self
    }

    /// Checks the kubelet CEL expressions of node classes as part of validation, against `provider`'s catalogue
    /// and `NodeClassCEL` gate (share the cloud provider's instance-type provider).
    pub fn with_instance_types(mut self, provider: InstanceTypeProvider) -> Self {
        self.instance_types = Some(provider);
        self
    }

    /// Whether the `ReservedCapacity` gate is on.
    pub fn reserved_capacity(&self) -> bool {
        self.reserved_capacity
    }

    /// Computes the node class's new status for Kubernetes `k8s_version` (`1.31`): each part in turn, then
    /// validation (which needs the parts resolved) and `Ready` (which sums the conditions up).
    pub async fn reconcile(&self, node_class: &EC2NodeClass, k8s_version: &str) -> Reconciled {
        let previous = node_class.status.clone().unwrap_or_default();
        let mut update = StatusUpdate {
            status: previous.clone(),
            requeue: REQUEUE_OK,
            generation: node_class.metadata.generation,
            now: self.clock.now(),
        };
        let spec = &node_class.spec;
        let amis = amis_part(self.amis.resolve(spec, k8s_version).await);
        if update.apply(conditions::AMIS_READY, amis, |s, v| s.amis = v) {
            update.requeue_within(REQUEUE_SHORT);
        }
        self.reconcile_capacity_reservations(&mut update, spec).await;
        self.reconcile_placement_group(&mut update, spec).await;
        // Subnets are refreshed every minute.
        update.requeue_within(REQUEUE_SHORT);
        let subnets = subnets_part(self.subnets.list(&spec.subnet_selector_terms).await);
        update.apply(conditions::SUBNETS_READY, subnets, |s, v| s.subnets = v);
        let groups = security_groups_part(self.security_groups.list(&spec.security_group_selector_terms).await);
        update.apply(conditions::SECURITY_GROUPS_READY, groups, |s, v| s.security_groups = v);
        self.reconcile_instance_profile(&mut update, node_class, previous.instance_profile.as_deref()).await;
        update.requeue_within(REQUEUE_VALIDATION);
        self.reconcile_validation(&mut update, node_class).await;
        update.set_ready(&conditions::ready_dependents(self.reserved_capacity));
        let StatusUpdate { mut status, requeue, .. } = update;
        status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        Reconciled { status, requeue_after: requeue }
    }

    /// `ValidationSucceeded`: the kubelet configuration, then its CEL expressions, then [`Self::validate`].
    async fn reconcile_validation(&self, update: &mut StatusUpdate, node_class: &EC2NodeClass) {
        if let Some(message) = kubelet_configuration_problems(&node_class.spec) {
            // First: an invalid map is not worth compiling expressions from, and blocks launches by itself.
            let reason = reasons::INVALID_KUBELET_CONFIGURATION.to_owned();
            update.set(conditions::VALIDATION_SUCCEEDED, Err((reason, message)));
            return;
        }
        if let Some((reason, message)) = user_data_problem(&node_class.spec, self.service_cidr.as_deref()) {
            // A launch would fail building the user data: say so before anything that needs AWS.
            update.set(conditions::VALIDATION_SUCCEEDED, Err((reason.to_owned(), message)));
            return;
        }
        match self.instance_types.as_ref().map(|p| p.check_kubelet_expressions(node_class)) {
            Some(ExpressionCheck::Failed { reason, message }) => {
                update.set(conditions::VALIDATION_SUCCEEDED, Err((reason.to_owned(), message)));
            }
            Some(ExpressionCheck::NoInstanceTypes) => {
                // Transient: the catalogue is fetched at start; until then the expressions cannot be judged.
                update.requeue_within(REQUEUE_SHORT);
                update.unknown(
                    conditions::VALIDATION_SUCCEEDED,
                    AWAITING_INSTANCE_TYPES,
                    AWAITING_INSTANCE_TYPES_MESSAGE,
                );
            }
            Some(ExpressionCheck::Passed) | None => {
                let validation = self.validate(node_class, &update.status).await;
                update.set(conditions::VALIDATION_SUCCEEDED, validation);
            }
        }
    }

    /// Capacity reservations, with the `ReservedCapacity` gate only (without it, they and their condition are
    /// dropped). Looked at again when the first of them starts or ends ([`CapacityReservationProvider::next_requeue`]).
    async fn reconcile_capacity_reservations(&self, update: &mut StatusUpdate, spec: &EC2NodeClassSpec) {
        if !self.reserved_capacity {
            update.status.capacity_reservations.clear();
            update.status.conditions.retain(|c| c.type_ != conditions::CAPACITY_RESERVATIONS_READY);
            return;
        }
        let part = match self.capacity_reservations.list(&spec.capacity_reservation_selector_terms).await {
            Ok(list) => {
                update.requeue_within(self.capacity_reservations.next_requeue(&list));
                Part::Done(list, Ok(()))
            }
            Err(e) => {
                update.requeue_within(REQUEUE_SHORT);
                keep_or_fail(&e, "CapacityReservationsNotFound", vec![])
            }
        };
        update.apply(conditions::CAPACITY_RESERVATIONS_READY, part, |s, v| s.capacity_reservations = v);
    }

    /// The placement group: True without a selector, else once the selected group exists. The status keeps no
    /// value; launches resolve the group themselves.
    async fn reconcile_placement_group(&self, update: &mut StatusUpdate, spec: &EC2NodeClassSpec) {
        let Some(selector) = &spec.placement_group_selector else {
            update.set(conditions::PLACEMENT_GROUP_READY, Ok(()));
            return;
        };
        let part = match self.placement_groups.resolve(selector).await {
            Ok(Some(_)) => Part::Done((), Ok(())),
            Ok(None) => {
                let what = selector.id.as_deref().or(selector.name.as_deref()).unwrap_or_default();
                Part::Done((), Err((PLACEMENT_GROUP_NOT_FOUND.into(), format!("placement group {what} not found"))))
            }
            Err(e) => keep_or_fail(&e, PLACEMENT_GROUP_NOT_FOUND, ()),
        };
        if update.apply(conditions::PLACEMENT_GROUP_READY, part, |_, ()| {}) {
            update.requeue_within(REQUEUE_SHORT);
        }
    }

    /// The instance profile (created for a role when the spec names one); a failure that is not retryable
    /// clears it.
    async fn reconcile_instance_profile(
        &self,
        update: &mut StatusUpdate,
        node_class: &EC2NodeClass,
        previous: Option<&str>,
    ) {
        let part = match self.instance_profiles.resolve(node_class, previous).await {
            Ok(name) => Part::Done(Some(name), Ok(())),
            Err(InstanceProfileError::Api(e)) if e.is_retryable() => Part::Keep(e.to_string()),
            Err(e) => Part::Done(None, Err((reasons::INSTANCE_PROFILE_NOT_FOUND.into(), e.to_string()))),
        };
        if update.apply(conditions::INSTANCE_PROFILE_READY, part, |s, v| s.instance_profile = v) {
            update.requeue_within(REQUEUE_SHORT);
        }
    }

    /// `ValidationSucceeded`: dependencies first, then tags, then the (cached) dry-run checks.
    async fn validate(&self, node_class: &EC2NodeClass, status: &EC2NodeClassStatus) -> Result<(), (String, String)> {
        let deps = [
            conditions::AMIS_READY,
            conditions::SUBNETS_READY,
            conditions::SECURITY_GROUPS_READY,
            conditions::INSTANCE_PROFILE_READY,
        ];
        let not_ready: Vec<&str> = deps
            .iter()
            .copied()
            .filter(|d| !status.conditions.iter().any(|c| c.type_ == *d && c.status == ConditionStatus::True))
            .collect();
        if !not_ready.is_empty() {
            return Err((
                reasons::DEPENDENCIES_NOT_READY.into(),
                format!("Failed to validate: waiting on {}", not_ready.join(", ")),
            ));
        }
        for key in node_class.spec.tags.keys() {
            if FORBIDDEN_TAG_KEYS.contains(&key.as_str()) || key.starts_with(FORBIDDEN_TAG_PREFIX) {
                return Err((reasons::TAG_VALIDATION_FAILED.into(), format!("tag {key:?} is restricted")));
            }
        }
        let Some(check) = &self.authorization else { return Ok(()) };
        let key = (node_class.metadata.uid.clone().unwrap_or_default(), node_class.metadata.generation.unwrap_or(0));
        let result = match self.validation.get(&key) {
            Some(r) => r,
            None => {
                let r = check.check(node_class, status).await;
                self.validation.insert(key, r.clone());
                r
            }
        };
        result.map_err(|f| (f.reason, f.message))
    }
}

#[cfg(test)]
mod tests;
