//! The one way from a [`NodeClaimPlan`] to the NodeClaim object: [`build_node_claim`], used by the controller's
//! provisioning, disruption replacements and static capacity, and by `simulate`'s launches.
//!
//! The NodeClaim comes from the NodePool's template, as upstream's NodeClaimTemplate:
//! * labels: the template's; for each custom (neither well-known nor restricted) key the plan requires `In`, its
//!   smallest value, unless the template labels the key already; `karpenter.sh/nodepool`; the node class's label;
//! * annotations: the template's, the NodePool hash and its version, `karpenter.sh/nodeclaim-min-values-relaxed`;
//! * spec: the plan's requirements (instance-type options and capacity types included), the template's taints,
//!   startup taints, `nodeClassRef`, `expireAfter` and `terminationGracePeriod`, and `resources.requests` = the
//!   pods' requests plus the DaemonSet overhead;
//! * `generateName: <nodepool>-` (the name is left to the API server) and, when the NodePool has a uid, an owner
//!   reference to it.
//!
//! The `karpenter.sh/termination` finalizer is added by the lifecycle controller before launch, as upstream.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use karpenter_api::hash::node_pool_hash_annotations;
use karpenter_api::labels::{self, annotations};
use karpenter_api::nodeclaim::{ResourceQuantity, ResourceRequirements};
use karpenter_api::{NodeClaim, NodeClaimSpec, NodePool, NodeSelectorRequirementWithMinValues, ProviderLabels};
use karpenter_requirements::Operator;

use crate::decision::NodeClaimPlan;

/// Why a plan cannot become a NodeClaim of a NodePool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The NodePool has no name.
    #[error("the NodePool has no name")]
    UnnamedNodePool,
    /// The plan is for another NodePool.
    #[error("the plan {plan} is for NodePool {planned}, not {node_pool}")]
    NodePoolMismatch {
        /// The plan's name.
        plan: String,
        /// The plan's NodePool.
        planned: String,
        /// The NodePool given.
        node_pool: String,
    },
}

/// Builds the NodeClaim for `plan` from its NodePool (see the module docs).
pub fn build_node_claim(
    pool: &NodePool,
    plan: &NodeClaimPlan,
    provider: &ProviderLabels,
) -> Result<NodeClaim, BuildError> {
    let pool_name = pool.metadata.name.clone().ok_or(BuildError::UnnamedNodePool)?;
    if plan.node_pool != pool_name {
        return Err(BuildError::NodePoolMismatch {
            plan: plan.name.clone(),
            planned: plan.node_pool.clone(),
            node_pool: pool_name,
        });
    }
    let template = &pool.spec.template;
    let node_class = &template.spec.node_class_ref;

    let requirements: Vec<NodeSelectorRequirementWithMinValues> = plan
        .requirements
        .to_serialized()
        .into_iter()
        .map(|r| NodeSelectorRequirementWithMinValues {
            key: r.key,
            operator: r.operator.as_str().to_owned(),
            values: r.values,
            min_values: r.min_values.map(|m| i32::try_from(m).unwrap_or(i32::MAX)),
        })
        .collect();

    let mut claim_labels: BTreeMap<String, String> = template.metadata.labels.clone();
    // One value for each custom requirement `In` (the smallest: upstream picks any), the template's label first.
    for r in &requirements {
        let custom = !provider.is_well_known(&r.key) && !provider.is_restricted(&r.key);
        if custom
            && r.operator == Operator::In.as_str()
            && !claim_labels.contains_key(&r.key)
            && let Some(v) = r.values.first()
        {
            claim_labels.insert(r.key.clone(), v.clone());
        }
    }
    claim_labels.insert(labels::NODE_POOL.to_owned(), pool_name.clone());
    claim_labels.insert(node_class.label_key(), node_class.name.clone());

    let mut claim_annotations = template.metadata.annotations.clone();
    for (k, v) in node_pool_hash_annotations(pool) {
        claim_annotations.insert(k.to_owned(), v);
    }
    claim_annotations.insert(
        annotations::NODE_CLAIM_MIN_VALUES_RELAXED.to_owned(),
        if plan.min_values_relaxed { "true" } else { "false" }.to_owned(),
    );
    // Set only when an overlay changed one of the options, as upstream does (the AWS launch then keeps the
    // overlay's price order).
    if plan.price_overlay_applied {
        claim_annotations.insert(annotations::PRICE_OVERLAY_APPLIED.to_owned(), "true".to_owned());
    }
    if plan.capacity_overlay_applied {
        claim_annotations.insert(annotations::CAPACITY_OVERLAY_APPLIED.to_owned(), "true".to_owned());
    }
    // Initialization waits for these drivers to publish their pools.
    if !plan.requested_dra_drivers.is_empty() {
        claim_annotations.insert(annotations::REQUESTED_DRA_DRIVERS.to_owned(), plan.requested_dra_drivers.join(","));
    }

    let requests: BTreeMap<String, ResourceQuantity> =
        plan.total_requests().iter().map(|(name, q)| (name.to_owned(), ResourceQuantity::new(q.to_string()))).collect();

    let owner = pool.metadata.uid.as_ref().map(|uid| OwnerReference {
        api_version: "karpenter.sh/v1".into(),
        kind: "NodePool".into(),
        name: pool_name.clone(),
        uid: uid.clone(),
        block_owner_deletion: Some(true),
        controller: None,
    });
    Ok(NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{pool_name}-")),
            labels: Some(claim_labels),
            annotations: Some(claim_annotations),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints: template.spec.taints.clone(),
            startup_taints: template.spec.startup_taints.clone(),
            requirements,
            resources: (!requests.is_empty()).then_some(ResourceRequirements { requests }),
            node_class_ref: node_class.clone(),
            termination_grace_period: template.spec.termination_grace_period.clone(),
            expire_after: template.spec.expire_after.clone(),
        },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::InstanceTypeOption;
    use karpenter_api::hash::node_pool_hash;
    use karpenter_requirements::{Format, Quantity, Requirement, Requirements, ResourceList};
    use karpenter_testing::{NodePoolOptions, node_pool, nodepool_requirement};

    fn quantity(s: &str) -> Quantity {
        s.parse().expect("quantity")
    }

    fn pool() -> NodePool {
        let mut pool = node_pool(NodePoolOptions {
            name: Some("default".into()),
            labels: [("team".to_owned(), "a".to_owned())].into(),
            requirements: vec![nodepool_requirement("karpenter.sh/capacity-type", "In", &["on-demand"])],
            termination_grace_period: Some("1h".into()),
            ..Default::default()
        });
        pool.metadata.uid = Some("uid-1".into());
        pool.spec.template.metadata.annotations.insert("note".into(), "kept".into());
        pool
    }

    fn plan(requirements: Requirements) -> NodeClaimPlan {
        NodeClaimPlan {
            name: "default-1".into(),
            node_pool: "default".into(),
            requirements,
            instance_types: [InstanceTypeOption::named("m-2x"), InstanceTypeOption::named("m-4x")].into(),
            price: Some(0.1),
            zones: vec!["zone-a".into()],
            pods: vec!["default/a".parse().expect("key"), "default/b".parse().expect("key")],
            requests: ResourceList::new()
                .with("cpu", quantity("1500m"))
                .with("memory", quantity("1Gi"))
                .with("pods", Quantity::from_int(2, Format::DecimalSI)),
            daemon_set_overhead: ResourceList::new()
                .with("cpu", quantity("500m"))
                .with("memory", quantity("512Mi"))
                .with("pods", Quantity::from_int(1, Format::DecimalSI)),
            min_values_relaxed: false,
            price_overlay_applied: false,
            capacity_overlay_applied: false,
            requested_dra_drivers: Vec::new(),
        }
    }

    fn default_requirements() -> Requirements {
        [
            Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
            Requirement::in_values(labels::INSTANCE_TYPE, ["m-2x", "m-4x"]).with_min_values(Some(2)),
            Requirement::in_values(labels::NODE_POOL, ["default"]),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn the_claim_carries_the_pool_and_the_plan() {
        let pool = pool();
        let claim = build_node_claim(&pool, &plan(default_requirements()), &karpenter_testing::vocabulary::aws())
            .expect("builds");
        assert_eq!(claim.metadata.generate_name.as_deref(), Some("default-"));
        assert_eq!(claim.metadata.name, None, "named by the API server");

        let l = claim.metadata.labels.as_ref().expect("labels");
        assert_eq!(l.get(labels::NODE_POOL).map(String::as_str), Some("default"));
        assert_eq!(l.get("team").map(String::as_str), Some("a"), "the template's labels");
        let class = &pool.spec.template.spec.node_class_ref;
        assert_eq!(l.get(&class.label_key()), Some(&class.name), "the node class label");
        assert!(
            !l.contains_key(labels::INSTANCE_TYPE) && !l.contains_key(labels::CAPACITY_TYPE),
            "well-known: no label"
        );

        let a = claim.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(a.get(annotations::NODE_POOL_HASH), Some(&node_pool_hash(&pool)));
        assert_eq!(
            a.get(annotations::NODE_POOL_HASH_VERSION).map(String::as_str),
            Some(karpenter_api::hash::NODE_POOL_HASH_VERSION)
        );
        assert_eq!(a.get(annotations::NODE_CLAIM_MIN_VALUES_RELAXED).map(String::as_str), Some("false"));
        assert_eq!(a.get("note").map(String::as_str), Some("kept"), "the template's annotations");

        let owners = claim.metadata.owner_references.as_ref().expect("owner");
        assert_eq!(owners.len(), 1);
        let o = &owners[0];
        assert_eq!(
            (o.api_version.as_str(), o.kind.as_str(), o.name.as_str(), o.uid.as_str(), o.block_owner_deletion),
            ("karpenter.sh/v1", "NodePool", "default", "uid-1", Some(true))
        );

        let it = claim.spec.requirements.iter().find(|r| r.key == labels::INSTANCE_TYPE).expect("instance types");
        assert_eq!((it.operator.as_str(), it.values.join(" "), it.min_values), ("In", "m-2x m-4x".to_owned(), Some(2)));
        let requests = &claim.spec.resources.as_ref().expect("requests").requests;
        let got: Vec<(&str, &str)> = requests.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, [("cpu", "2"), ("memory", "1536Mi"), ("pods", "3")], "pods' requests + DaemonSet overhead");
        assert_eq!(claim.spec.node_class_ref, *class);
        assert_eq!(claim.spec.termination_grace_period.as_ref().map(ToString::to_string).as_deref(), Some("1h"));
        assert!(claim.status.is_none());
    }

    #[test]
    fn custom_in_requirements_become_labels_the_templates_win() {
        let mut pool = pool();
        pool.spec.template.metadata.labels.insert("tier".into(), "gold".into());
        let mut reqs = default_requirements();
        reqs.add(Requirement::in_values("example.com/rack", ["r2", "r1"]));
        reqs.add(Requirement::in_values("tier", ["silver"]));
        reqs.add(Requirement::exists("example.com/any"));
        reqs.add(Requirement::in_values("karpenter.sh/custom", ["y"]));
        let mut p = plan(reqs);
        p.min_values_relaxed = true;
        let claim = build_node_claim(&pool, &p, &karpenter_testing::vocabulary::aws()).expect("builds");
        let l = claim.metadata.labels.as_ref().expect("labels");
        assert_eq!(l.get("example.com/rack").map(String::as_str), Some("r1"), "custom In: its smallest value");
        assert_eq!(l.get("tier").map(String::as_str), Some("gold"), "the template's label is kept");
        assert!(!l.contains_key("example.com/any"), "Exists is no label");
        assert!(!l.contains_key("karpenter.sh/custom"), "restricted keys are no label");
        let a = claim.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(a.get(annotations::NODE_CLAIM_MIN_VALUES_RELAXED).map(String::as_str), Some("true"));
    }

    #[test]
    fn overlay_annotations_follow_the_plan() {
        let pool = pool();
        let p = plan(Requirements::new());
        let a = build_node_claim(&pool, &p, &karpenter_testing::vocabulary::aws())
            .expect("builds")
            .metadata
            .annotations
            .unwrap();
        assert!(!a.contains_key(annotations::PRICE_OVERLAY_APPLIED));
        assert!(!a.contains_key(annotations::CAPACITY_OVERLAY_APPLIED));
        for (price, capacity) in [(true, false), (false, true), (true, true)] {
            let mut p = plan(Requirements::new());
            p.price_overlay_applied = price;
            p.capacity_overlay_applied = capacity;
            let a = build_node_claim(&pool, &p, &karpenter_testing::vocabulary::aws())
                .expect("builds")
                .metadata
                .annotations
                .unwrap();
            assert_eq!(a.contains_key(annotations::PRICE_OVERLAY_APPLIED), price);
            assert_eq!(a.contains_key(annotations::CAPACITY_OVERLAY_APPLIED), capacity);
            assert!(a.values().all(|v| !v.is_empty()));
        }
    }

    #[test]
    fn requested_dra_drivers_annotation_lists_the_plans_drivers() {
        let pool = pool();
        let mut p = plan(Requirements::new());
        let a = build_node_claim(&pool, &p, &karpenter_testing::vocabulary::aws())
            .expect("builds")
            .metadata
            .annotations
            .unwrap();
        assert!(!a.contains_key(annotations::REQUESTED_DRA_DRIVERS), "no claims, no annotation");
        p.requested_dra_drivers = vec!["efa.amazonaws.com".into(), "gpu.nvidia.com".into()];
        let a = build_node_claim(&pool, &p, &karpenter_testing::vocabulary::aws())
            .expect("builds")
            .metadata
            .annotations
            .unwrap();
        assert_eq!(
            a.get(annotations::REQUESTED_DRA_DRIVERS).map(String::as_str),
            Some("efa.amazonaws.com,gpu.nvidia.com")
        );
    }

    #[test]
    fn without_uid_or_requests_those_fields_are_left_out() {
        let mut pool = pool();
        pool.metadata.uid = None;
        let mut p = plan(Requirements::new());
        p.requests = ResourceList::new();
        p.daemon_set_overhead = ResourceList::new();
        let claim = build_node_claim(&pool, &p, &karpenter_testing::vocabulary::kwok()).expect("builds");
        assert!(claim.metadata.owner_references.is_none());
        assert!(claim.spec.resources.is_none());
        assert!(claim.spec.requirements.is_empty());
    }

    #[test]
    fn a_plan_for_another_pool_is_an_error() {
        let mut p = plan(Requirements::new());
        p.node_pool = "other".into();
        let err = build_node_claim(&pool(), &p, &karpenter_testing::vocabulary::aws()).unwrap_err();
        assert_eq!(err.to_string(), "the plan default-1 is for NodePool other, not default");
        let mut unnamed = pool();
        unnamed.metadata.name = None;
        assert_eq!(
            build_node_claim(&unnamed, &p, &karpenter_testing::vocabulary::aws()).unwrap_err(),
            BuildError::UnnamedNodePool
        );
    }
}
