//! Builders for the core Karpenter kinds: NodePool and NodeClaim. The node-class builders live with their
//! providers (`karpenter_aws::testing::ec2_node_class`, `karpenter_kwok::testing::kwok_node_class`): the test kit
//! depends on no provider.
//!
//! Durations are given as strings (`"30s"`, `"720h"`, `"Never"`) for brevity; an option string that is not a valid
//! duration is a bug in the test and panics with a message naming the option.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_api::condition::{Condition, ConditionStatus};
use karpenter_api::nodeclaim::{
    NodeClaim, NodeClaimSpec, NodeClaimStatus, NodeClassReference, NodeSelectorRequirementWithMinValues,
    ResourceQuantities, ResourceQuantity, ResourceRequirements, Taint,
};
use karpenter_api::nodepool::{
    Budget, ConsolidationPolicy, Disruption, NodeClaimTemplate, NodeClaimTemplateSpec, NodePool, NodePoolSpec,
    NodePoolStatus, TemplateMetadata,
};
use karpenter_api::{KDuration, NillableDuration};

use crate::names::{next_name, uid_for};
use crate::pod::{k8s_time, owner_reference};
use crate::resources::Resources;

/// The time written into conditions built here (`lastTransitionTime`): the [`crate::FakeClock`] default start.
pub const CONDITION_TIME: &str = "2024-01-01T00:00:00Z";

/// Cluster name used by default selectors and tags.
pub const TEST_CLUSTER: &str = "test-cluster";

/// A condition with the given status, reason `type_` (or `reason` when given) and [`CONDITION_TIME`].
pub fn condition(type_: &str, status: bool, reason: Option<&str>) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if status { ConditionStatus::True } else { ConditionStatus::False },
        observed_generation: None,
        last_transition_time: CONDITION_TIME.to_string(),
        reason: reason.unwrap_or(type_).to_string(),
        message: String::new(),
    }
}

/// A NodePool requirement: `nodepool_requirement("karpenter.sh/capacity-type", "In", &["spot"])`.
pub fn nodepool_requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues::new(key, operator, values)
}

pub use karpenter_api::nodeclaim::TaintEffect;

/// A Karpenter taint: `karpenter_taint("gpu", Some("true"), TaintEffect::NoSchedule)`.
pub fn karpenter_taint(key: &str, value: Option<&str>, effect: TaintEffect) -> Taint {
    Taint::new(key, value, effect)
}

/// The node class the builders reference by default, a test default: `karpenter.k8s.aws/EC2NodeClass/default`
/// (the AWS provider's kind, written as plain strings because the test kit depends on no provider; nothing here
/// reads the class).
pub fn default_node_class_ref() -> NodeClassReference {
    NodeClassReference::new("karpenter.k8s.aws", "EC2NodeClass", "default")
}

/// A reference to a KWOKNodeClass.
pub fn kwok_node_class_ref(name: &str) -> NodeClassReference {
    NodeClassReference::new("karpenter.kwok.sh", "KWOKNodeClass", name)
}

fn resource_list(r: &Resources) -> ResourceQuantities {
    r.0.iter().map(|(k, v)| (k.clone(), ResourceQuantity::new(v.0.clone()))).collect()
}

fn duration(option: &str, s: &str) -> KDuration {
    s.parse().unwrap_or_else(|e| panic!("{option}: invalid duration {s:?}: {e}"))
}

fn nillable(option: &str, s: &str) -> NillableDuration {
    s.parse().unwrap_or_else(|e| panic!("{option}: invalid duration {s:?}: {e}"))
}

/// `Some(m)` unless `m` is empty (absent maps stay absent in the built objects).
pub fn non_empty_map(m: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    if m.is_empty() { None } else { Some(m.clone()) }
}

/// A NodePool. Defaults: name `nodepool-N`, nodeClassRef to EC2NodeClass `default`, no requirements, upstream's
/// disruption defaults (`consolidateAfter: 0s`, `WhenEmptyOrUnderutilized`, one `10%` budget), `expireAfter: 720h`,
/// and status `Ready=True` (the provisioner only uses ready pools).
#[derive(Clone, Debug, Default)]
pub struct NodePoolOptions {
    /// Default: `nodepool-N` (a per-thread counter).
    pub name: Option<String>,
    /// Template labels (applied to nodes).
    pub labels: BTreeMap<String, String>,
    /// Template annotations (applied to nodes).
    pub annotations: BTreeMap<String, String>,
    /// Annotations on the NodePool object itself (e.g. the drift hash).
    pub metadata_annotations: BTreeMap<String, String>,
    /// `spec.template.spec.requirements`: the label constraints every node of the pool satisfies (with optional `minValues`).
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// `spec.template.spec.taints`: taints every node of the pool carries; pods must tolerate them.
    pub taints: Vec<Taint>,
    /// `spec.template.spec.startupTaints`: taints expected to be removed by a daemon after start; pods need not tolerate them.
    pub startup_taints: Vec<Taint>,
    /// `spec.limits`: the most of each resource the pool's nodes may have in total; empty means no limit.
    pub limits: Resources,
    /// `spec.weight`: pools with higher weight are tried first.
    pub weight: Option<i32>,
    /// Empty: upstream's default single `nodes: 10%` budget.
    pub budgets: Vec<Budget>,
    /// `spec.disruption.consolidationPolicy`; default `WhenEmptyOrUnderutilized`.
    pub consolidation_policy: Option<ConsolidationPolicy>,
    /// e.g. `"30s"` or `"Never"`.
    pub consolidate_after: Option<String>,
    /// e.g. `"720h"` or `"Never"`.
    pub expire_after: Option<String>,
    /// e.g. `"1h"`.
    pub termination_grace_period: Option<String>,
    /// Makes the pool static.
    pub replicas: Option<i64>,
    /// `spec.template.spec.nodeClassRef`; default EC2NodeClass `default`.
    pub node_class_ref: Option<NodeClassReference>,
    /// `Some(false)`: status `Ready=False`; `None`/`Some(true)`: ready.
    pub ready: Option<bool>,
    /// Replaces the generated status entirely.
    pub status: Option<NodePoolStatus>,
}

/// Builds a NodePool from `o`.
///
/// # Panics
/// If a duration option is not a valid duration.
pub fn node_pool(o: NodePoolOptions) -> NodePool {
    let name = o.name.clone().unwrap_or_else(|| next_name("nodepool"));
    let mut disruption = Disruption::default();
    if let Some(policy) = o.consolidation_policy {
        disruption.consolidation_policy = policy;
    }
    if let Some(after) = &o.consolidate_after {
        disruption.consolidate_after = nillable("consolidate_after", after);
    }
    if !o.budgets.is_empty() {
        disruption.budgets = o.budgets.clone();
    }
    let spec = NodePoolSpec {
        template: NodeClaimTemplate {
            metadata: TemplateMetadata { labels: o.labels.clone(), annotations: o.annotations.clone() },
            spec: NodeClaimTemplateSpec {
                taints: o.taints.clone(),
                startup_taints: o.startup_taints.clone(),
                requirements: o.requirements.clone(),
                node_class_ref: o.node_class_ref.clone().unwrap_or_else(default_node_class_ref),
                termination_grace_period: o
                    .termination_grace_period
                    .as_deref()
                    .map(|d| duration("termination_grace_period", d)),
                expire_after: nillable("expire_after", o.expire_after.as_deref().unwrap_or("720h")),
            },
        },
        disruption,
        limits: resource_list(&o.limits),
        weight: o.weight,
        replicas: o.replicas,
    };
    let ready = o.ready.unwrap_or(true);
    let status = o.status.clone().unwrap_or_else(|| NodePoolStatus {
        conditions: vec![
            condition("ValidationSucceeded", true, None),
            condition("NodeClassReady", ready, None),
            condition("Ready", ready, Some(if ready { "Ready" } else { "NodeClassNotReady" })),
        ],
        ..Default::default()
    });
    let mut pool = NodePool::new(&name, spec);
    pool.metadata.uid = Some(uid_for("NodePool", "", &name));
    pool.metadata.annotations = non_empty_map(&o.metadata_annotations);
    pool.status = Some(status);
    pool
}

/// A NodeClaim. Defaults: name `nodeclaim-N` (or `<node_pool>-N`), nodeClassRef to EC2NodeClass `default`,
/// `expireAfter: 720h`, no conditions unless `launched`/`registered`/`initialized` are set.
#[derive(Clone, Debug, Default)]
pub struct NodeClaimOptions {
    /// Default: `nodeclaim-N`, or `<node_pool>-N` when `node_pool` is set.
    pub name: Option<String>,
    /// Owning NodePool: sets the `karpenter.sh/nodepool` label and an owner reference.
    pub node_pool: Option<String>,
    /// `metadata.labels` (besides the `karpenter.sh/nodepool` label `node_pool` sets).
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`, e.g. the drift hashes.
    pub annotations: BTreeMap<String, String>,
    /// `metadata.finalizers`, e.g. Karpenter's termination finalizer.
    pub finalizers: Vec<String>,
    /// `spec.requirements`: the label constraints the launched instance must satisfy.
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// `spec.taints`: taints the node registers with.
    pub taints: Vec<Taint>,
    /// `spec.startupTaints`: taints a daemon removes after the node starts.
    pub startup_taints: Vec<Taint>,
    /// `spec.resources.requests`.
    pub requests: Resources,
    /// `spec.nodeClassRef`; default EC2NodeClass `default`.
    pub node_class_ref: Option<NodeClassReference>,
    /// `spec.expireAfter`, e.g. `"720h"` or `"Never"`; default `720h`.
    pub expire_after: Option<String>,
    /// `spec.terminationGracePeriod`, e.g. `"1h"`: how long draining may take before pods are deleted anyway.
    pub termination_grace_period: Option<String>,
    // Status.
    /// `status.providerID`: the launched instance; unset until launch.
    pub provider_id: Option<String>,
    /// `status.nodeName`: the Node that registered for this claim.
    pub node_name: Option<String>,
    /// `status.imageID`: the image the instance runs (drift compares it).
    pub image_id: Option<String>,
    /// `status.capacity`: the launched instance type's resources.
    pub capacity: Resources,
    /// Default: the capacity.
    pub allocatable: Resources,
    /// `status.lastPodEventTime`: when a pod last bound to or left the node (consolidateAfter counts from it).
    pub last_pod_event_time: Option<DateTime<Utc>>,
    /// Adds `Launched=True`.
    pub launched: bool,
    /// Adds `Registered=True`.
    pub registered: bool,
    /// Adds `Initialized=True`, and `Ready=True` when launched and registered too.
    pub initialized: bool,
    /// Extra conditions, appended after the lifecycle ones.
    pub conditions: Vec<Condition>,
    /// `metadata.creationTimestamp`; unset when `None`.
    pub creation_timestamp: Option<DateTime<Utc>>,
    /// `metadata.deletionTimestamp`: set, the NodeClaim is being deleted.
    pub deletion_timestamp: Option<DateTime<Utc>>,
}

/// Builds a NodeClaim from `o`.
///
/// # Panics
/// If a duration option is not a valid duration.
pub fn node_claim(o: NodeClaimOptions) -> NodeClaim {
    let name = o.name.clone().unwrap_or_else(|| match &o.node_pool {
        Some(pool) => next_name_for(pool),
        None => next_name("nodeclaim"),
    });
    let mut labels = o.labels.clone();
    if let Some(pool) = &o.node_pool {
        labels.insert(karpenter_api::labels::NODE_POOL.to_string(), pool.clone());
    }
    let spec = NodeClaimSpec {
        taints: o.taints.clone(),
        startup_taints: o.startup_taints.clone(),
        requirements: o.requirements.clone(),
        resources: (!o.requests.is_empty()).then(|| ResourceRequirements { requests: resource_list(&o.requests) }),
        node_class_ref: o.node_class_ref.clone().unwrap_or_else(default_node_class_ref),
        termination_grace_period: o
            .termination_grace_period
            .as_deref()
            .map(|d| duration("termination_grace_period", d)),
        expire_after: nillable("expire_after", o.expire_after.as_deref().unwrap_or("720h")),
    };
    let mut conditions = Vec::new();
    if o.launched {
        conditions.push(condition("Launched", true, None));
    }
    if o.registered {
        conditions.push(condition("Registered", true, None));
    }
    if o.initialized {
        conditions.push(condition("Initialized", true, None));
    }
    if o.launched && o.registered && o.initialized {
        conditions.push(condition("Ready", true, None));
    }
    conditions.extend(o.conditions.iter().cloned());
    let allocatable = if o.allocatable.is_empty() { &o.capacity } else { &o.allocatable };
    let status = NodeClaimStatus {
        node_name: o.node_name.clone(),
        provider_id: o.provider_id.clone(),
        image_id: o.image_id.clone(),
        capacity: resource_list(&o.capacity),
        allocatable: resource_list(allocatable),
        last_pod_event_time: o.last_pod_event_time.map(karpenter_api::time::rfc3339),
        conditions,
    };
    let mut claim = NodeClaim::new(&name, spec);
    claim.metadata = ObjectMeta {
        uid: Some(uid_for("NodeClaim", "", &name)),
        name: Some(name),
        labels: non_empty_map(&labels),
        annotations: non_empty_map(&o.annotations),
        finalizers: (!o.finalizers.is_empty()).then(|| o.finalizers.clone()),
        owner_references: o.node_pool.as_ref().map(|pool| vec![owner_reference("NodePool", "", pool)]),
        creation_timestamp: o.creation_timestamp.and_then(k8s_time),
        deletion_timestamp: o.deletion_timestamp.and_then(k8s_time),
        ..Default::default()
    };
    claim.status = Some(status);
    claim
}

/// Names claims of a pool `<pool>-1`, `<pool>-2`, … (one counter per thread shared by all pools, like
/// generateName's random suffix, unique within a test).
fn next_name_for(pool: &str) -> String {
    let n = next_name("nodeclaim");
    format!("{pool}-{}", n.trim_start_matches("nodeclaim-"))
}

#[cfg(test)]
mod tests {
    use karpenter_api::{Validate, ValidationContext};

    use super::*;
    use crate::names::reset_names;
    use crate::resources::map;

    fn assert_valid<T: Validate>(o: &T, ctx: &ValidationContext) {
        let v = o.validate(ctx);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn default_node_pool_is_valid_ready_and_points_at_default_ec2_node_class() {
        reset_names();
        let pool = node_pool(NodePoolOptions::default());
        assert_eq!(pool.metadata.name.as_deref(), Some("nodepool-1"));
        assert_eq!(pool.spec.template.spec.node_class_ref, default_node_class_ref());
        assert_eq!(pool.spec.template.spec.expire_after.as_str(), "720h");
        assert_eq!(pool.spec.disruption.budgets.len(), 1);
        assert!(pool.is_ready());
        assert_valid(&pool, &ValidationContext::new(crate::vocabulary::aws()));
    }

    #[test]
    fn node_pool_carries_requested_fields() {
        let pool = node_pool(NodePoolOptions {
            name: Some("gpu".into()),
            labels: map(&[("team", "ml")]),
            requirements: vec![nodepool_requirement("karpenter.sh/capacity-type", "In", &["spot", "on-demand"])],
            taints: vec![karpenter_taint("nvidia.com/gpu", None, TaintEffect::NoSchedule)],
            startup_taints: vec![karpenter_taint("example.com/booting", Some("true"), TaintEffect::NoExecute)],
            limits: [("cpu", "100"), ("nvidia.com/gpu", "8")].into(),
            weight: Some(50),
            budgets: vec![Budget { nodes: "0".into(), ..Default::default() }],
            consolidation_policy: Some(ConsolidationPolicy::WhenEmpty),
            consolidate_after: Some("5m".into()),
            expire_after: Some("Never".into()),
            termination_grace_period: Some("1h".into()),
            ready: Some(false),
            ..Default::default()
        });
        let spec = &pool.spec;
        assert_eq!(spec.template.metadata.labels["team"], "ml");
        assert_eq!(spec.template.spec.requirements[0].values, ["spot", "on-demand"]);
        assert_eq!(spec.template.spec.taints[0].key, "nvidia.com/gpu");
        assert_eq!(spec.template.spec.startup_taints.len(), 1);
        assert_eq!(spec.limits["nvidia.com/gpu"].as_str(), "8");
        assert_eq!(spec.weight, Some(50));
        assert_eq!(spec.disruption.budgets[0].nodes, "0");
        assert_eq!(spec.disruption.consolidation_policy, ConsolidationPolicy::WhenEmpty);
        assert_eq!(spec.disruption.consolidate_after.as_str(), "5m");
        assert!(spec.template.spec.expire_after.is_never());
        assert_eq!(spec.template.spec.termination_grace_period.as_ref().map(|d| d.as_str()), Some("1h"));
        assert!(!pool.is_ready());
        assert_valid(&pool, &ValidationContext::new(crate::vocabulary::aws()));
    }

    #[test]
    fn static_node_pool_is_valid() {
        let pool =
            node_pool(NodePoolOptions { replicas: Some(3), limits: [("nodes", "5")].into(), ..Default::default() });
        assert!(pool.is_static());
        assert_valid(&pool, &ValidationContext::new(crate::vocabulary::aws()));
    }

    #[test]
    fn invalid_options_produce_objects_that_fail_validation() {
        let pool = node_pool(NodePoolOptions {
            requirements: vec![nodepool_requirement("karpenter.sh/nodepool", "In", &["x"])],
            ..Default::default()
        });
        assert!(!pool.validate(&ValidationContext::new(crate::vocabulary::aws())).is_empty());
    }

    #[test]
    #[should_panic(expected = "consolidate_after")]
    fn bad_duration_option_panics_naming_the_option() {
        node_pool(NodePoolOptions { consolidate_after: Some("soon".into()), ..Default::default() });
    }

    #[test]
    fn node_claim_carries_pool_label_owner_status_and_conditions() {
        reset_names();
        let claim = node_claim(NodeClaimOptions {
            node_pool: Some("default".into()),
            requirements: vec![nodepool_requirement("node.kubernetes.io/instance-type", "In", &["m5.large"])],
            requests: [("cpu", "1500m"), ("pods", "3")].into(),
            provider_id: Some("aws:///us-west-2a/i-0123".into()),
            node_name: Some("ip-10-0-0-1".into()),
            capacity: [("cpu", "2"), ("memory", "8Gi")].into(),
            launched: true,
            registered: true,
            initialized: true,
            ..Default::default()
        });
        assert_eq!(claim.metadata.name.as_deref(), Some("default-1"));
        assert_eq!(claim.node_pool_name(), Some("default"));
        assert_eq!(claim.metadata.owner_references.as_ref().unwrap()[0].kind, "NodePool");
        assert_eq!(claim.spec.resources.as_ref().unwrap().requests["cpu"].as_str(), "1500m");
        let status = claim.status.as_ref().unwrap();
        assert_eq!(status.allocatable["memory"].as_str(), "8Gi");
        assert_eq!(claim.provider_id(), Some("aws:///us-west-2a/i-0123"));
        assert!(claim.is_launched() && claim.is_registered() && claim.is_initialized());
        assert!(claim.is_condition_true("Ready"));
        assert_valid(&claim, &ValidationContext::new(crate::vocabulary::aws()));
    }

    #[test]
    fn default_node_claim_has_no_conditions_and_is_valid() {
        let claim = node_claim(NodeClaimOptions::default());
        assert!(claim.conditions().is_empty());
        assert!(claim.metadata.owner_references.is_none());
        assert_valid(&claim, &ValidationContext::new(crate::vocabulary::aws()));
    }
}
