//! Instance types' volume attachment limits on new NodeClaims.

use std::collections::{BTreeMap, BTreeSet};

use karpenter_api::{labels, load_str};
use karpenter_requirements::{Format, InstanceType, Offering, Overhead, Quantity, Requirement, ResourceList};

use super::volumes::{ClaimVolumes, attach_counts, within_attach_limits};
use super::{PoolInput, SchedulerOptions, schedule};
use crate::check::check;
use crate::decision::{Decisions, InstanceTypeOption, PodKey};
use crate::snapshot::ClusterSnapshot;

const EBS: &str = "ebs.csi.aws.com";
const EFS: &str = "efs.csi.aws.com";

/// `small` (cheaper) and `large`, 8 cpu each, with the given per-driver limits.
fn catalogue(small: &[(&str, u32)], large: &[(&str, u32)]) -> Vec<InstanceType> {
    [("small", 1.0, small), ("large", 2.0, large)]
        .into_iter()
        .map(|(name, price, limits)| {
            let offering = Offering::new(
                [
                    Requirement::in_values(labels::ZONE, ["z"]),
                    Requirement::in_values(labels::CAPACITY_TYPE, ["on-demand"]),
                ]
                .into_iter()
                .collect(),
                price,
            );
            let capacity = ResourceList::new()
                .with("cpu", Quantity::from_int(8, Format::DecimalSI))
                .with("pods", Quantity::from_int(100, Format::DecimalSI));
            InstanceType::new(
                name,
                [Requirement::in_values(labels::INSTANCE_TYPE, [name])].into_iter().collect(),
                vec![offering],
                capacity,
                Overhead::default(),
            )
            .with_volume_attachment_limits(limits.iter().map(|(d, n)| (d.to_string(), *n)).collect())
        })
        .collect()
}

const HEAD: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n---\n\
apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: ebs}\nprovisioner: ebs.csi.aws.com\nvolumeBindingMode: WaitForFirstConsumer\n---\n\
apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: efs}\nprovisioner: efs.csi.aws.com\nvolumeBindingMode: WaitForFirstConsumer\n---\n";

/// A pending pod with one unbound claim per (class, claim name) in `claims` (claims are created here too).
fn pod(name: &str, claims: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut volumes = Vec::new();
    for (class, claim) in claims {
        out.push_str(&format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {claim}, namespace: default}}\nspec: {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}, storageClassName: {class}}}\n---\n"
        ));
        volumes.push(format!("{{name: {claim}, persistentVolumeClaim: {{claimName: {claim}}}}}"));
    }
    out.push_str(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec: {{volumes: [{}], containers: [{{name: c, image: x, resources: {{requests: {{cpu: 100m}}}}}}]}}\n---\n",
        volumes.join(", ")
    ));
    out
}

fn solve(yaml: &str, its: &[InstanceType]) -> Decisions {
    let objects = load_str(yaml, "input.yaml").expect("input parses");
    let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
    let pools: Vec<PoolInput<'_>> =
        snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: its }).collect();
    let provider = karpenter_testing::vocabulary::aws();
    let d = schedule(&snapshot, &pools, &provider, &SchedulerOptions::default());
    check(&snapshot, &pools, &provider, &d).expect("the checker agrees");
    d
}

fn instance_types(d: &Decisions) -> Vec<Vec<String>> {
    d.new_node_claims.iter().map(|c| c.instance_type_names().map(str::to_owned).collect()).collect()
}

#[test]
fn counts_distinct_claims_per_driver() {
    let used: ClaimVolumes = BTreeMap::from([(EBS.to_string(), BTreeSet::from(["default/a".to_string()]))]);
    let claims = vec![
        (EBS.to_string(), "default/a".to_string()),
        (EBS.to_string(), "default/b".to_string()),
        (EFS.to_string(), "default/c".to_string()),
    ];
    let counts = attach_counts(&used, &claims);
    assert_eq!(counts, BTreeMap::from([(EBS, 2), (EFS, 1)]));
    let its = catalogue(&[(EBS, 1)], &[(EBS, 2), (EFS, 1)]);
    assert!(!within_attach_limits(&its[0], &counts), "2 EBS volumes on a type that attaches 1");
    assert!(within_attach_limits(&its[1], &counts));
    // A driver the type sets no limit for is unlimited.
    assert!(within_attach_limits(&catalogue(&[], &[])[0], &counts));
}

#[test]
fn a_claim_keeps_only_the_types_that_attach_its_volumes() {
    // Three pods with one EBS claim each: the cheap type attaches two, so the shared claim ends up on `large`.
    let yaml =
        format!("{HEAD}{}{}{}", pod("p0", &[("ebs", "v0")]), pod("p1", &[("ebs", "v1")]), pod("p2", &[("ebs", "v2")]));
    let d = solve(&yaml, &catalogue(&[(EBS, 2)], &[(EBS, 8)]));
    assert!(d.unschedulable.is_empty(), "{:?}", d.unschedulable);
    assert_eq!(d.new_node_claims.len(), 1);
    assert_eq!(d.new_node_claims[0].pods.len(), 3);
    assert_eq!(instance_types(&d), vec![vec!["large".to_string()]]);
    // Without limits both types stay options.
    let d = solve(&yaml, &catalogue(&[], &[]));
    assert_eq!(instance_types(&d), vec![vec!["small".to_string(), "large".to_string()]]);
    // With room for only one more volume per node, pods spill onto new claims instead.
    let d = solve(&yaml, &catalogue(&[(EBS, 1)], &[(EBS, 1)]));
    assert_eq!(d.new_node_claims.len(), 3, "{d:?}");
}

#[test]
fn a_pod_over_every_limit_is_unschedulable_naming_the_driver() {
    let yaml = format!("{HEAD}{}", pod("big", &[("ebs", "v0"), ("ebs", "v1"), ("ebs", "v2")]));
    let d = solve(&yaml, &catalogue(&[(EBS, 1)], &[(EBS, 2)]));
    assert!(d.new_node_claims.is_empty());
    let reason = d.unschedulable[0].reason.to_string();
    assert!(
        reason.contains(
            "3 volumes of ebs.csi.aws.com exceed the largest volume attachment limit of the instance types (2)"
        ),
        "{reason}"
    );
    // Each type fails a different driver: no single limit to name.
    let yaml = format!("{HEAD}{}", pod("mixed", &[("ebs", "v0"), ("ebs", "v1"), ("efs", "f0"), ("efs", "f1")]));
    let d = solve(&yaml, &catalogue(&[(EBS, 1)], &[(EFS, 1)]));
    let reason = d.unschedulable[0].reason.to_string();
    assert!(reason.contains("no instance type can attach the pod's volumes"), "{reason}");
}

/// The checker catches a decision whose new claim offers an option that cannot attach its pods' volumes.
#[test]
fn the_checker_refuses_an_option_over_its_attachment_limit() {
    let yaml = format!("{HEAD}{}{}", pod("a", &[("ebs", "a1"), ("ebs", "a2")]), pod("b", &[("ebs", "b1")]));
    let its = catalogue(&[(EBS, 2)], &[(EBS, 8)]);
    let objects = load_str(&yaml, "input.yaml").expect("input parses");
    let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
    let pools: Vec<PoolInput<'_>> =
        snapshot.node_pools.iter().map(|p| PoolInput { node_pool: p, instance_types: &its }).collect();
    let provider = karpenter_testing::vocabulary::aws();
    let mut d = schedule(&snapshot, &pools, &provider, &SchedulerOptions::default());
    assert!(check(&snapshot, &pools, &provider, &d).is_ok());
    // Forge a decision: both pods (three EBS volumes) on one claim that may still be `small` (2 attachments).
    let all: Vec<PodKey> = d.new_node_claims.iter().flat_map(|c| c.pods.clone()).collect();
    d.new_node_claims.truncate(1);
    d.new_node_claims[0].pods = all;
    d.new_node_claims[0].instance_types =
        [InstanceTypeOption::named("small"), InstanceTypeOption::named("large")].into();
    let v = check(&snapshot, &pools, &provider, &d).unwrap_err();
    assert!(
        v.iter().any(|v| v.contains("option small attaches at most 2 ebs.csi.aws.com volumes, its pods use 3")),
        "{v:?}"
    );
}
