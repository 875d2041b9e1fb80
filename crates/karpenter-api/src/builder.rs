//! Builders for the objects a scheduler user writes by hand: [`NodePoolBuilder`] (through [`NodePool::builder`])
//! and [`PodBuilder`], a pod with resource requests.
//!
//! The builders start from upstream's defaults, taken from the one place each is encoded (the serde defaults of
//! [`NodePoolSpec`]'s fields), so a built NodePool equals the same manifest applied with those fields left out.
//! They do not validate: run [`Validate::validate`](crate::Validate::validate) on the result where the input comes
//! from elsewhere.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use karpenter_requirements::ResourceList;

use crate::duration::{KDuration, NillableDuration};
use crate::nodeclaim::{NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceQuantity, Taint};
use crate::nodepool::{
    Budget, ConsolidationPolicy, Disruption, NodeClaimTemplate, NodeClaimTemplateSpec, NodePool, NodePoolSpec,
    TemplateMetadata, default_expire_after,
};

/// Builds a [`NodePool`] from upstream's defaults: consolidation policy `WhenEmptyOrUnderutilized`,
/// `consolidateAfter: 0s`, one budget of `10%` of the nodes, `expireAfter: 720h`, no requirements, taints,
/// limits or weight.
///
/// ```
/// use std::time::Duration;
/// use karpenter_api::NodePool;
/// use karpenter_api::nodeclaim::{NodeClassReference, NodeSelectorRequirementWithMinValues as Req};
/// use karpenter_api::nodepool::ConsolidationPolicy;
///
/// let pool = NodePool::builder("general", NodeClassReference::new("karpenter.k8s.aws", "EC2NodeClass", "default"))
///     .requirement(Req::in_values("karpenter.sh/capacity-type", ["spot", "on-demand"]))
///     .requirement(Req::gt("karpenter.k8s.aws/instance-cpu", 2))
///     .limit("cpu", "1000")
///     .consolidate_after(Duration::from_secs(300))
///     .build();
/// assert_eq!(pool.spec.disruption.consolidation_policy, ConsolidationPolicy::WhenEmptyOrUnderutilized);
/// assert_eq!(pool.spec.disruption.budgets[0].nodes, "10%");
/// assert_eq!(pool.spec.template.spec.expire_after.as_str(), "720h");
/// assert_eq!(pool.spec.template.spec.requirements[1].operator, "Gt");
/// ```
#[derive(Clone, Debug)]
pub struct NodePoolBuilder {
    name: String,
    spec: NodePoolSpec,
}

impl NodePool {
    /// A builder for a NodePool named `name` launching from `node_class_ref`; see [`NodePoolBuilder`].
    pub fn builder(name: impl Into<String>, node_class_ref: NodeClassReference) -> NodePoolBuilder {
        NodePoolBuilder {
            name: name.into(),
            spec: NodePoolSpec {
                template: NodeClaimTemplate {
                    metadata: TemplateMetadata::default(),
                    spec: NodeClaimTemplateSpec {
                        taints: Vec::new(),
                        startup_taints: Vec::new(),
                        requirements: Vec::new(),
                        node_class_ref,
                        termination_grace_period: None,
                        expire_after: default_expire_after(),
                    },
                },
                disruption: Disruption::default(),
                limits: BTreeMap::new(),
                weight: None,
                replicas: None,
            },
        }
    }
}

impl NodePoolBuilder {
    /// Adds a requirement every node of the pool satisfies (typed constructors on
    /// [`NodeSelectorRequirementWithMinValues`]: `in_values`, `not_in`, `exists`, `does_not_exist`, `gt`, `lt`).
    pub fn requirement(mut self, requirement: NodeSelectorRequirementWithMinValues) -> Self {
        self.spec.template.spec.requirements.push(requirement);
        self
    }

    /// Adds a label put on the pool's NodeClaims and nodes.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.spec.template.metadata.labels.insert(key.into(), value.into());
        self
    }

    /// Adds an annotation put on the pool's NodeClaims and nodes.
    pub fn annotation(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.spec.template.metadata.annotations.insert(key.into(), value.into());
        self
    }

    /// Adds a taint pods must tolerate to land on the pool's nodes.
    pub fn taint(mut self, taint: Taint) -> Self {
        self.spec.template.spec.taints.push(taint);
        self
    }

    /// Adds a startup taint (set at boot and removed by something else; the scheduler ignores it).
    pub fn startup_taint(mut self, taint: Taint) -> Self {
        self.spec.template.spec.startup_taints.push(taint);
        self
    }

    /// Sets a limit on the pool's summed capacity for `resource` (`"cpu"`, `"memory"`, `"nodes"`, ...): a
    /// quantity's text (`"1000"`, `"4Ti"`) or a [`karpenter_requirements::Quantity`].
    pub fn limit(mut self, resource: impl Into<String>, quantity: impl Into<ResourceQuantity>) -> Self {
        self.spec.limits.insert(resource.into(), quantity.into());
        self
    }

    /// Sets the weight (1..100; higher pools are tried first).
    pub fn weight(mut self, weight: i32) -> Self {
        self.spec.weight = Some(weight);
        self
    }

    /// Makes the pool static with `replicas` nodes.
    pub fn replicas(mut self, replicas: i64) -> Self {
        self.spec.replicas = Some(replicas);
        self
    }

    /// Sets which nodes consolidation considers.
    pub fn consolidation_policy(mut self, policy: ConsolidationPolicy) -> Self {
        self.spec.disruption.consolidation_policy = policy;
        self
    }

    /// Sets how long a node must be quiet before consolidation considers it: a [`Duration`] or
    /// [`NillableDuration::Never`] (no consolidation).
    pub fn consolidate_after(mut self, after: impl Into<NillableDuration>) -> Self {
        self.spec.disruption.consolidate_after = after.into();
        self
    }

    /// Replaces the disruption budgets (the default is one budget of `10%`).
    pub fn budgets(mut self, budgets: impl IntoIterator<Item = Budget>) -> Self {
        self.spec.disruption.budgets = budgets.into_iter().collect();
        self
    }

    /// Sets the node lifetime: a [`Duration`] or [`NillableDuration::Never`] (no expiry).
    pub fn expire_after(mut self, after: impl Into<NillableDuration>) -> Self {
        self.spec.template.spec.expire_after = after.into();
        self
    }

    /// Sets how long a node may drain once its deletion starts.
    pub fn termination_grace_period(mut self, period: Duration) -> Self {
        self.spec.template.spec.termination_grace_period = Some(KDuration::from_duration(period));
        self
    }

    /// The NodePool (no status).
    pub fn build(self) -> NodePool {
        NodePool::new(&self.name, self.spec)
    }
}

/// Builds a [`Pod`] with one container and the given resource requests: pending unless
/// [`node_name`](Self::node_name) binds it.
///
/// ```
/// use karpenter_api::builder::PodBuilder;
/// use karpenter_requirements::ResourceList;
/// use karpenter_requirements::resources::{CPU, MEMORY};
///
/// let requests = ResourceList::try_from_pairs([(CPU, "500m"), (MEMORY, "1Gi")]).unwrap();
/// let pod = PodBuilder::new("default", "web-0").requests(&requests).label("app", "web").build();
/// assert_eq!(karpenter_requirements::pod_requests(&pod).unwrap(), requests);
/// ```
#[derive(Clone, Debug, Default)]
pub struct PodBuilder {
    metadata: ObjectMeta,
    spec: PodSpec,
    requests: ResourceList,
}

impl PodBuilder {
    /// A pod `namespace/name` with no requests.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        PodBuilder {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            ..PodBuilder::default()
        }
    }

    /// Sets the container's resource requests (replacing earlier ones).
    pub fn requests(mut self, requests: &ResourceList) -> Self {
        self.requests = requests.clone();
        self
    }

    /// Adds a label.
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.labels.get_or_insert_default().insert(key.into(), value.into());
        self
    }

    /// Adds a `nodeSelector` entry.
    pub fn node_selector(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.spec.node_selector.get_or_insert_default().insert(key.into(), value.into());
        self
    }

    /// Adds a toleration.
    pub fn toleration(mut self, toleration: Toleration) -> Self {
        self.spec.tolerations.get_or_insert_default().push(toleration);
        self
    }

    /// Binds the pod to `node` (a running pod rather than a pending one).
    pub fn node_name(mut self, node: impl Into<String>) -> Self {
        self.spec.node_name = Some(node.into());
        self
    }

    /// The pod (no status).
    pub fn build(self) -> Pod {
        let resources = (!self.requests.is_empty()).then(|| ResourceRequirements {
            requests: Some(self.requests.to_k8s()),
            ..ResourceRequirements::default()
        });
        let container = Container { name: "main".to_owned(), resources, ..Container::default() };
        Pod { metadata: self.metadata, spec: Some(PodSpec { containers: vec![container], ..self.spec }), status: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::{Object, load_str};

    fn node_class() -> NodeClassReference {
        NodeClassReference::new("karpenter.k8s.aws", "EC2NodeClass", "default")
    }

    /// The builder's defaults are the ones the API applies to a manifest that leaves the fields out (the serde
    /// defaults mirror the CRD's defaults, which the CRD tests hold against upstream's).
    #[test]
    fn node_pool_defaults_equal_a_minimal_manifest() {
        let objects = load_str(
            "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: general}\nspec:\n  template:\n    spec:\n      \
             nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
            "pool.yaml",
        )
        .unwrap();
        let Object::NodePool(loaded) = &objects[0].object else { panic!("not a NodePool: {:?}", objects[0]) };
        let built = NodePool::builder("general", node_class()).build();
        assert_eq!(built.spec, loaded.spec);
        assert_eq!(built.metadata.name, loaded.metadata.name);
    }

    #[test]
    fn node_pool_setters_land_in_the_spec() {
        let pool = NodePool::builder("gpu", node_class())
            .requirement(NodeSelectorRequirementWithMinValues::exists("example.com/gpu").with_min_values(2))
            .label("team", "ml")
            .taint(Taint::new("gpu", Some("true"), crate::nodeclaim::TaintEffect::NoSchedule))
            .limit("nodes", "10")
            .weight(50)
            .consolidation_policy(ConsolidationPolicy::WhenEmpty)
            .consolidate_after(NillableDuration::Never)
            .expire_after(Duration::from_secs(3600))
            .termination_grace_period(Duration::from_secs(600))
            .build();
        let yaml = serde_json::to_value(&pool.spec).unwrap();
        assert_eq!(yaml["template"]["spec"]["requirements"][0]["operator"], "Exists");
        assert_eq!(yaml["template"]["spec"]["requirements"][0]["minValues"], 2);
        assert_eq!(yaml["template"]["metadata"]["labels"]["team"], "ml");
        assert_eq!(yaml["limits"]["nodes"], "10");
        assert_eq!(yaml["weight"], 50);
        assert_eq!(yaml["disruption"]["consolidationPolicy"], "WhenEmpty");
        assert_eq!(yaml["disruption"]["consolidateAfter"], "Never");
        assert_eq!(yaml["template"]["spec"]["expireAfter"], "3600s");
        assert_eq!(yaml["template"]["spec"]["terminationGracePeriod"], "600s");
        let ctx = crate::ValidationContext::new(crate::test_vocabulary::aws());
        let violations = crate::Validate::validate(&pool, &ctx);
        assert!(violations.is_empty(), "{violations:?}");
    }

    #[test]
    fn pod_without_requests_has_no_resources_and_a_bound_pod_has_its_node() {
        let pod = PodBuilder::new("ns", "p").node_name("node-1").build();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node-1"));
        assert!(spec.containers[0].resources.is_none());
    }
}
