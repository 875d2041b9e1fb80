//! Bridges from the API types to the requirements algebra (`karpenter-requirements`).
//!
//! The scheduler and disruption work on [`Requirements`]; these functions build them from a NodePool's template
//! (as upstream's NodeClaimTemplate) and a NodeClaim's spec, and let a [`ProviderLabels`] value serve as the
//! `allow_undefined` key set of compatibility checks.

use karpenter_requirements::{KeySet, Operator, Requirement, RequirementError, Requirements};

use crate::labels::{self, ProviderLabels};
use crate::nodeclaim::NodeSelectorRequirementWithMinValues;
use crate::{NodeClaim, NodePool};

/// Simulation-only keys: added to a template so DaemonSets that select on them are counted, and stripped from
/// the NodeClaims that are created.
pub const SIMULATION_ONLY_KEYS: [&str; 2] = [labels::NODE_REGISTERED, labels::NODE_INITIALIZED];

impl KeySet for ProviderLabels {
    /// Core and provider well-known keys: a pod may require them without the NodePool declaring them.
    fn contains_key(&self, key: &str) -> bool {
        self.is_well_known(key)
    }
}

impl NodeSelectorRequirementWithMinValues {
    /// This requirement in the algebra's form. Errors name the key and the problem (unknown operator, a
    /// numeric operator without exactly one integer, ...); validation reports the same problems with paths.
    pub fn to_requirement(&self) -> Result<Requirement, RequirementError> {
        let operator: Operator = self
            .operator
            .parse()
            .map_err(|source| RequirementError::UnknownOperator { key: self.key.clone(), source })?;
        let min_values = self.min_values.and_then(|m| u32::try_from(m).ok());
        Requirement::new(&self.key, operator, &self.values, min_values)
    }
}

/// Intersects every entry of a requirement list (`add` tightens on a repeated key).
pub fn requirements_from(list: &[NodeSelectorRequirementWithMinValues]) -> Result<Requirements, RequirementError> {
    let mut out = Requirements::new();
    for r in list {
        out.add(r.to_requirement()?);
    }
    Ok(out)
}

impl NodePool {
    /// The requirements every NodeClaim of this pool starts from, simulation-only keys aside: the template's
    /// requirements, ∩ its labels as `In`, ∩ `karpenter.sh/nodepool In [name]` and
    /// `<group>/<kind lowercase> In [node class name]`.
    pub fn template_requirements(&self) -> Result<Requirements, RequirementError> {
        let template = &self.spec.template;
        let mut reqs = requirements_from(&template.spec.requirements)?;
        reqs.add_all(&Requirements::from_labels(template.metadata.labels.iter()));
        if let Some(name) = self.metadata.name.as_deref() {
            reqs.add(Requirement::in_values(labels::NODE_POOL, [name]));
        }
        let class = &template.spec.node_class_ref;
        reqs.add(Requirement::in_values(&class.label_key(), [class.name.as_str()]));
        Ok(reqs)
    }

    /// [`template_requirements`](Self::template_requirements) plus the simulation-only keys
    /// ([`SIMULATION_ONLY_KEYS`] as `In [true]`, so DaemonSets that select on them are counted), for the
    /// scheduler's simulated NodeClaims.
    pub fn simulation_requirements(&self) -> Result<Requirements, RequirementError> {
        let mut reqs = self.template_requirements()?;
        for key in SIMULATION_ONLY_KEYS {
            reqs.add(Requirement::in_values(key, ["true"]));
        }
        Ok(reqs)
    }
}

impl NodeClaim {
    /// The NodeClaim's spec requirements.
    pub fn requirements(&self) -> Result<Requirements, RequirementError> {
        requirements_from(&self.spec.requirements)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    metadata:
      labels: {team: a}
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
        - {key: karpenter.sh/capacity-type, operator: NotIn, values: [on-demand]}
        - {key: karpenter.k8s.aws/instance-cpu, operator: Gt, values: ["3"]}
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: [c5, m5, r5], minValues: 2}
"#;

    #[test]
    fn template_requirements_follow_the_spec_steps() {
        let pool: NodePool = serde_saphyr::from_str(POOL).expect("fixture parses");
        let reqs = pool.template_requirements().expect("valid requirements");
        let ct = reqs.get(labels::CAPACITY_TYPE);
        assert!(ct.has("spot") && !ct.has("on-demand"), "repeated keys intersect");
        assert!(reqs.get("team").has("a") && !reqs.get("team").has("b"), "labels become In requirements");
        assert!(reqs.get(labels::NODE_POOL).has("default"));
        assert!(reqs.get("karpenter.k8s.aws/ec2nodeclass").has("default"));
        let cpu = reqs.get(crate::test_vocabulary::aws_keys::INSTANCE_CPU);
        assert!(cpu.has("4") && !cpu.has("3"), "Gt 3 admits 4, not 3");
        assert_eq!(reqs.get(crate::test_vocabulary::aws_keys::INSTANCE_FAMILY).min_values(), Some(2));
        assert!(!reqs.has(labels::NODE_REGISTERED));
        let sim = pool.simulation_requirements().expect("valid");
        assert!(sim.get(labels::NODE_REGISTERED).has("true"));
    }

    #[test]
    fn provider_labels_allow_undefined_well_known_keys() {
        let pool: NodePool = serde_saphyr::from_str(POOL).expect("fixture parses");
        let template = pool.template_requirements().expect("valid");
        let aws = crate::test_vocabulary::aws();
        let zone_pod = Requirements::from_labels([(&labels::ZONE.to_string(), &"us-west-2a".to_string())]);
        assert!(template.compatible(&zone_pod, &aws).is_ok(), "zone is well known: instance types constrain it");
        let custom_pod = Requirements::from_labels([(&"example.com/gpu".to_string(), &"true".to_string())]);
        assert!(template.compatible(&custom_pod, &aws).is_err(), "custom labels must be declared by the pool");
    }

    #[test]
    fn bad_operator_is_an_error_naming_the_key() {
        let r = NodeSelectorRequirementWithMinValues::new("example.com/x", "Like", &["a"]);
        let err = r.to_requirement().expect_err("unknown operator");
        assert!(err.to_string().contains("example.com/x"), "{err}");
    }
}
