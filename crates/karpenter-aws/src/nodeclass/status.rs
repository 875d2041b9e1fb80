//! The node class status computation: [`NodeClassResolver::reconcile`] turns an EC2NodeClass into its new
//! status (resolved subnets, security groups, AMIs, instance profile, capacity reservations) with the
//! conditions upstream sets, and the time to look again. It writes nothing: the kube-backed runner
//! ([`super::controller`]) patches the result.
//!
//! Conditions (types and reasons from `karpenter_api::ec2nodeclass::conditions`):
//!
//! | Condition | False reason |
//! |---|---|
//! | `AMIsReady` | `AMINotFound` (nothing matches, or no SSM parameter of the alias exists), `UnsupportedAlias` |
//! | `SubnetsReady` | `SubnetsNotFound` |
//! | `SecurityGroupsReady` | `SecurityGroupsNotFound` |
//! | `InstanceProfileReady` | `InstanceProfileNotFound` (IAM refused or the spec names no role/profile) |
//! | `PlacementGroupReady` | `PlacementGroupNotFound` (only with a selector; True without) |
//! | `CapacityReservationsReady` | (only with the `ReservedCapacity` gate; True once described) |
//! | `ValidationSucceeded` | `DependenciesNotReady`, `TagValidationFailed`, and the dry-run reasons of an [`AuthorizationCheck`] |
//! | `Ready` | `UnhealthyDependents` (False when one is False, Unknown when one is Unknown) |
//!
//! A True condition's reason is its type. Each condition carries the node class's generation as
//! `observedGeneration`; a transition time changes only when the status does. A failed AWS call that may
//! succeed on retry (throttling, transient) keeps the previous value and condition of that part (Unknown if it
//! had none); any other failure sets the part's condition False with the error as message.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use karpenter_api::condition::{ConditionStatus, set_condition};
use karpenter_api::ec2nodeclass::{FORBIDDEN_TAG_KEYS, FORBIDDEN_TAG_PREFIX, conditions, conditions::reasons};
use karpenter_api::{EC2NodeClass, EC2NodeClassStatus};
use karpenter_cloudprovider::Clock;

use super::ami::{AmiError, AmiProvider, SsmProvider};
use super::api::{CapacityReservationApi, IamApi, ImageApi, PlacementGroupApi, SecurityGroupApi, SsmApi, SubnetApi};
use super::cache::TtlCache;
use super::instance_profile::{ClusterIdentity, InstanceProfileError, InstanceProfileProvider};
use super::network::{SECURITY_GROUP_CACHE_TTL, SecurityGroupProvider, SubnetProvider};
use super::reservation::{CapacityReservationProvider, PlacementGroupProvider};
use crate::api_error::AwsApiError;

/// `PlacementGroupReady=False` reason.
pub const PLACEMENT_GROUP_NOT_FOUND: &str = "PlacementGroupNotFound";
/// `Ready` reason when a dependent condition is not True.
pub const UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";
/// Condition reason while a part has never been resolved (its first AWS call failed with a retryable error).
pub const AWAITING_RESOLUTION: &str = "AwaitingResolution";

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
    /// The `ReservedCapacity` feature gate.
    pub reserved_capacity: bool,
}

impl Default for ResolverSettings {
    fn default() -> Self {
        Self {
            cluster: ClusterIdentity::default(),
            subnet_refresh_interval: Duration::from_secs(60),
            ami_refresh_interval: Duration::from_secs(60),
            reserved_capacity: true,
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
    validation: TtlCache<(String, i64), Result<(), AuthorizationFailure>>,
    reserved_capacity: bool,
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

impl NodeClassResolver {
    pub fn new(apis: ResolverApis, settings: ResolverSettings, clock: Arc<dyn Clock>) -> Self {
        let ssm = Arc::new(SsmProvider::new(apis.ssm, clock.clone()));
        Self {
            subnets: Arc::new(SubnetProvider::new(apis.subnets, clock.clone(), settings.subnet_refresh_interval)),
            security_groups: Arc::new(SecurityGroupProvider::new(
                apis.security_groups,
                clock.clone(),
                SECURITY_GROUP_CACHE_TTL,
            )),
            amis: Arc::new(AmiProvider::new(apis.images, ssm, clock.clone(), settings.ami_refresh_interval)),
            instance_profiles: Arc::new(InstanceProfileProvider::new(apis.iam, settings.cluster, clock.clone())),
            capacity_reservations: Arc::new(CapacityReservationProvider::new(
                apis.capacity_reservations,
                clock.clone(),
            )),
            placement_groups: Arc::new(PlacementGroupProvider::new(apis.placement_groups, clock.clone())),
            authorization: None,
            validation: TtlCache::new(clock.clone(), VALIDATION_CACHE_TTL),
            reserved_capacity: settings.reserved_capacity,
            clock,
        }
    }

    /// Adds the dry-run authorization checks to validation.
    pub fn with_authorization_check(mut self, check: Arc<dyn AuthorizationCheck>) -> Self {
        self.authorization = Some(check);
        self
    }

    /// Whether the `ReservedCapacity` gate is on.
    pub fn reserved_capacity(&self) -> bool {
        self.reserved_capacity
    }

    /// Computes the node class's new status for Kubernetes `k8s_version` (`1.31`).
    pub async fn reconcile(&self, node_class: &EC2NodeClass, k8s_version: &str) -> Reconciled {
        let now = self.clock.now();
        let generation = node_class.metadata.generation;
        let previous = node_class.status.clone().unwrap_or_default();
        let mut status = previous.clone();
        let mut requeue = REQUEUE_OK;
        let spec = &node_class.spec;
        let set = |status: &mut EC2NodeClassStatus, type_: &str, result: Result<(), (String, String)>| {
            let (s, reason, message) = match result {
                Ok(()) => (ConditionStatus::True, type_.to_string(), String::new()),
                Err((reason, message)) => (ConditionStatus::False, reason, message),
            };
            set_condition(&mut status.conditions, type_, s, &reason, &message, generation, now);
        };
        let keep = |status: &mut EC2NodeClassStatus, type_: &str, message: &str| {
            if !status.conditions.iter().any(|c| c.type_ == type_) {
                set_condition(
                    &mut status.conditions,
                    type_,
                    ConditionStatus::Unknown,
                    AWAITING_RESOLUTION,
                    message,
                    generation,
                    now,
                );
            }
        };

        // AMIs.
        let amis = match self.amis.resolve(spec, k8s_version).await {
            Ok(amis) if amis.is_empty() => {
                Part::Done(vec![], Err((reasons::AMI_NOT_FOUND.into(), "AMISelector did not match any AMIs".into())))
            }
            Ok(amis) => Part::Done(amis.iter().map(|a| a.to_status()).collect(), Ok(())),
            Err(AmiError::UnsupportedAlias { alias, kubernetes_version }) => Part::Done(
                vec![],
                Err((
                    reasons::UNSUPPORTED_ALIAS.into(),
                    format!("alias {alias} is not supported on Kubernetes {kubernetes_version}"),
                )),
            ),
            Err(e @ AmiError::NoParameters(_)) => {
                Part::Done(vec![], Err((reasons::AMI_NOT_FOUND.into(), e.to_string())))
            }
            Err(AmiError::Api(e)) => keep_or_fail(&e, reasons::AMI_NOT_FOUND, vec![]),
            Err(e @ AmiError::InvalidKubernetesVersion(_)) => Part::Keep(e.to_string()),
        };
        match amis {
            Part::Done(v, r) => {
                if r.is_err() {
                    requeue = requeue.min(REQUEUE_SHORT);
                }
                status.amis = v;
                set(&mut status, conditions::AMIS_READY, r);
            }
            Part::Keep(m) => {
                requeue = requeue.min(REQUEUE_SHORT);
                keep(&mut status, conditions::AMIS_READY, &m);
            }
        }

        // Capacity reservations (gate ReservedCapacity).
        if self.reserved_capacity {
            match self.capacity_reservations.list(&spec.capacity_reservation_selector_terms).await {
                Ok(list) => {
                    requeue = requeue.min(self.capacity_reservations.next_requeue(&list));
                    status.capacity_reservations = list;
                    set(&mut status, conditions::CAPACITY_RESERVATIONS_READY, Ok(()));
                }
                Err(e) => {
                    requeue = requeue.min(REQUEUE_SHORT);
                    match keep_or_fail(&e, "CapacityReservationsNotFound", vec![]) {
                        Part::Done(v, r) => {
                            status.capacity_reservations = v;
                            set(&mut status, conditions::CAPACITY_RESERVATIONS_READY, r);
                        }
                        Part::Keep(m) => keep(&mut status, conditions::CAPACITY_RESERVATIONS_READY, &m),
                    }
                }
            }
        } else {
            status.capacity_reservations.clear();
            status.conditions.retain(|c| c.type_ != conditions::CAPACITY_RESERVATIONS_READY);
        }

        // Placement group.
        match &spec.placement_group_selector {
            None => set(&mut status, conditions::PLACEMENT_GROUP_READY, Ok(())),
            Some(selector) => match self.placement_groups.resolve(selector).await {
                Ok(Some(_)) => set(&mut status, conditions::PLACEMENT_GROUP_READY, Ok(())),
                Ok(None) => {
                    requeue = requeue.min(REQUEUE_SHORT);
                    let what = selector.id.as_deref().or(selector.name.as_deref()).unwrap_or_default();
                    set(
                        &mut status,
                        conditions::PLACEMENT_GROUP_READY,
                        Err((PLACEMENT_GROUP_NOT_FOUND.into(), format!("placement group {what} not found"))),
                    );
                }
                Err(e) => {
                    requeue = requeue.min(REQUEUE_SHORT);
                    match keep_or_fail(&e, PLACEMENT_GROUP_NOT_FOUND, ()) {
                        Part::Done((), r) => set(&mut status, conditions::PLACEMENT_GROUP_READY, r),
                        Part::Keep(m) => keep(&mut status, conditions::PLACEMENT_GROUP_READY, &m),
                    }
                }
            },
        }

        // Subnets (refreshed every minute).
        requeue = requeue.min(REQUEUE_SHORT);
        let subnets = match self.subnets.list(&spec.subnet_selector_terms).await {
            Ok(s) if s.is_empty() => Part::Done(
                vec![],
                Err((reasons::SUBNETS_NOT_FOUND.into(), "SubnetSelector did not match any Subnets".into())),
            ),
            Ok(s) => Part::Done(s.iter().map(|s| s.to_status()).collect(), Ok(())),
            Err(e) => keep_or_fail(&e, reasons::SUBNETS_NOT_FOUND, vec![]),
        };
        match subnets {
            Part::Done(v, r) => {
                status.subnets = v;
                set(&mut status, conditions::SUBNETS_READY, r);
            }
            Part::Keep(m) => keep(&mut status, conditions::SUBNETS_READY, &m),
        }

        // Security groups.
        let groups = match self.security_groups.list(&spec.security_group_selector_terms).await {
            Ok(g) if g.is_empty() => Part::Done(
                vec![],
                Err((
                    reasons::SECURITY_GROUPS_NOT_FOUND.into(),
                    "SecurityGroupSelector did not match any SecurityGroups".into(),
                )),
            ),
            Ok(g) => Part::Done(g, Ok(())),
            Err(e) => keep_or_fail(&e, reasons::SECURITY_GROUPS_NOT_FOUND, vec![]),
        };
        match groups {
            Part::Done(v, r) => {
                status.security_groups = v;
                set(&mut status, conditions::SECURITY_GROUPS_READY, r);
            }
            Part::Keep(m) => keep(&mut status, conditions::SECURITY_GROUPS_READY, &m),
        }

        // Instance profile.
        match self.instance_profiles.resolve(node_class, previous.instance_profile.as_deref()).await {
            Ok(name) => {
                status.instance_profile = Some(name);
                set(&mut status, conditions::INSTANCE_PROFILE_READY, Ok(()));
            }
            Err(InstanceProfileError::Api(e)) if e.is_retryable() => {
                requeue = requeue.min(REQUEUE_SHORT);
                keep(&mut status, conditions::INSTANCE_PROFILE_READY, &e.to_string());
            }
            Err(e) => {
                requeue = requeue.min(REQUEUE_SHORT);
                status.instance_profile = None;
                set(
                    &mut status,
                    conditions::INSTANCE_PROFILE_READY,
                    Err((reasons::INSTANCE_PROFILE_NOT_FOUND.into(), e.to_string())),
                );
            }
        }

        // Validation.
        requeue = requeue.min(REQUEUE_VALIDATION);
        let validation = self.validate(node_class, &status).await;
        set(&mut status, conditions::VALIDATION_SUCCEEDED, validation);

        // Ready.
        let dependents = conditions::ready_dependents(self.reserved_capacity);
        let mut unhealthy = Vec::new();
        let mut any_false = false;
        for d in &dependents {
            let s = status.conditions.iter().find(|c| c.type_ == *d).map_or(ConditionStatus::Unknown, |c| c.status);
            if s != ConditionStatus::True {
                any_false |= s == ConditionStatus::False;
                unhealthy.push(format!("{d}={s:?}"));
            }
        }
        let (s, reason, message) = if unhealthy.is_empty() {
            (ConditionStatus::True, conditions::READY.to_string(), String::new())
        } else if any_false {
            (ConditionStatus::False, UNHEALTHY_DEPENDENTS.to_string(), unhealthy.join(", "))
        } else {
            (ConditionStatus::Unknown, UNHEALTHY_DEPENDENTS.to_string(), unhealthy.join(", "))
        };
        set_condition(&mut status.conditions, conditions::READY, s, &reason, &message, generation, now);
        status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
        Reconciled { status, requeue_after: requeue }
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
