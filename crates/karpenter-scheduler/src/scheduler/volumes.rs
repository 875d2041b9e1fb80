//! Volumes: volume topology alternatives and CSI volume limits.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use karpenter_api::CompactPod;
use karpenter_api::labels;
use karpenter_requirements::{InstanceType, Requirement, Requirements};

use crate::snapshot::ClusterSnapshot;

/// The annotation the PV controller sets once a claim's binding is complete.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// What a pod's volumes need: node requirement alternatives (empty: none) and (driver, claim) pairs for
/// volume limits.
#[derive(Debug, Default, Clone)]
pub(crate) struct PodVolumes {
    pub alternatives: Vec<Requirements>,
    pub claims: Vec<(String, String)>,
}

/// Lookups by name, built once per pass.
pub(crate) struct VolumeIndex<'a> {
    pvcs: BTreeMap<(&'a str, &'a str), &'a PersistentVolumeClaim>,
    pvs: BTreeMap<&'a str, &'a PersistentVolume>,
    classes: BTreeMap<&'a str, &'a StorageClass>,
}

fn in_tree_driver(pv: &PersistentVolume) -> Option<&'static str> {
    let s = pv.spec.as_ref()?;
    if s.aws_elastic_block_store.is_some() {
        Some("ebs.csi.aws.com")
    } else if s.gce_persistent_disk.is_some() {
        Some("pd.csi.storage.gke.io")
    } else if s.azure_disk.is_some() {
        Some("disk.csi.azure.com")
    } else if s.azure_file.is_some() {
        Some("file.csi.azure.com")
    } else if s.cinder.is_some() {
        Some("cinder.csi.openstack.org")
    } else if s.vsphere_volume.is_some() {
        Some("csi.vsphere.vmware.com")
    } else if s.portworx_volume.is_some() {
        Some("pxd.portworx.com")
    } else {
        None
    }
}

fn in_tree_provisioner(p: &str) -> &str {
    match p {
        "kubernetes.io/aws-ebs" => "ebs.csi.aws.com",
        "kubernetes.io/gce-pd" => "pd.csi.storage.gke.io",
        "kubernetes.io/azure-disk" => "disk.csi.azure.com",
        "kubernetes.io/azure-file" => "file.csi.azure.com",
        "kubernetes.io/cinder" => "cinder.csi.openstack.org",
        "kubernetes.io/vsphere-volume" => "csi.vsphere.vmware.com",
        "kubernetes.io/portworx-volume" => "pxd.portworx.com",
        other => other,
    }
}

impl<'a> VolumeIndex<'a> {
    pub fn new(snapshot: &'a ClusterSnapshot) -> Self {
        VolumeIndex {
            pvcs: snapshot
                .pvcs
                .iter()
                .map(|p| {
                    (
                        (
                            p.metadata.namespace.as_deref().unwrap_or("default"),
                            p.metadata.name.as_deref().unwrap_or(""),
                        ),
                        p,
                    )
                })
                .collect(),
            pvs: snapshot.pvs.iter().map(|p| (p.metadata.name.as_deref().unwrap_or(""), p)).collect(),
            classes: snapshot.storage_classes.iter().map(|c| (c.metadata.name.as_deref().unwrap_or(""), c)).collect(),
        }
    }

    fn class_alternatives(&self, class: &str) -> Result<(Vec<Requirements>, String), String> {
        let sc = self.classes.get(class).ok_or_else(|| format!("storage class {class} not found"))?;
        let mut alts = Vec::new();
        // Each term is one alternative (terms are ORed); a term without expressions constrains nothing and is
        // left out, as upstream does.
        for term in sc.allowed_topologies.iter().flatten() {
            let mut r = Requirements::new();
            for e in term.match_label_expressions.iter().flatten() {
                r.add(Requirement::in_values(&e.key, e.values.iter().map(String::as_str)));
            }
            if !r.is_empty() {
                alts.push(r);
            }
        }
        Ok((alts, in_tree_provisioner(&sc.provisioner).to_owned()))
    }

    fn pv_alternatives(pv: &PersistentVolume) -> Result<Vec<Requirements>, String> {
        let spec = pv.spec.as_ref();
        let local = spec.is_some_and(|s| s.local.is_some() || s.host_path.is_some());
        let terms = spec
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
            .map(|r| r.node_selector_terms.as_slice())
            .unwrap_or(&[]);
        // Each term is one alternative (terms are ORed). A local or hostPath volume's hostname is dropped (a new
        // node has another name), and a term that named only the hostname stays as an alternative that
        // constrains nothing; any other term without expressions is left out, as upstream does.
        let mut alts = Vec::new();
        for t in terms {
            let mut r = Requirements::from_node_selector_term(t).map_err(|e| {
                format!("persistent volume {}: invalid node affinity: {e}", pv.metadata.name.as_deref().unwrap_or(""))
            })?;
            let named_something = !r.is_empty();
            if local {
                r.remove(labels::HOSTNAME);
            }
            if named_something {
                alts.push(r);
            }
        }
        Ok(alts)
    }

    /// The volume needs of `pod`, or the per-pod error upstream would give.
    pub fn pod(&self, pod: &CompactPod) -> Result<PodVolumes, String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let spec = &*pod.spec;
        let mut per_volume: Vec<Vec<Requirements>> = Vec::new();
        let mut out = PodVolumes::default();
        for v in spec.volumes.iter().flatten() {
            let (claim_name, ephemeral_class) = if let Some(c) = &v.persistent_volume_claim {
                (c.claim_name.clone(), None)
            } else if let Some(e) = &v.ephemeral {
                let class = e.volume_claim_template.as_ref().and_then(|t| t.spec.storage_class_name.clone());
                (format!("{}-{}", pod.metadata.name.as_deref().unwrap_or(""), v.name), Some(class))
            } else {
                continue;
            };
            let (alts, driver) = match self.pvcs.get(&(ns, claim_name.as_str())) {
                Some(pvc) => self.claim(pvc, ns, &claim_name)?,
                None => match ephemeral_class {
                    Some(Some(class)) => self.class_alternatives(&class)?,
                    Some(None) => {
                        return Err(format!("ephemeral volume {}: no storage class", v.name));
                    }
                    None => return Err(format!("persistentvolumeclaim \"{claim_name}\" not found")),
                },
            };
            if !driver.is_empty() {
                out.claims.push((driver, format!("{ns}/{claim_name}")));
            }
            if !alts.is_empty() {
                per_volume.push(alts);
            }
        }
        out.alternatives = cross_product(per_volume);
        Ok(out)
    }

    fn claim(&self, pvc: &PersistentVolumeClaim, ns: &str, name: &str) -> Result<(Vec<Requirements>, String), String> {
        if pvc.metadata.deletion_timestamp.is_some() {
            return Err(format!("persistentvolumeclaim \"{ns}/{name}\" is being deleted"));
        }
        if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            return Err(format!("persistentvolumeclaim \"{ns}/{name}\" is Lost"));
        }
        let spec = pvc.spec.as_ref();
        let class = spec.and_then(|s| s.storage_class_name.clone()).filter(|c| !c.is_empty());
        if let Some(volume) = spec.and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty()) {
            let completed = pvc.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(BIND_COMPLETED));
            if !completed {
                return Err(format!(
                    "persistentvolumeclaim \"{ns}/{name}\" names volume {volume} but its binding is not complete"
                ));
            }
            let pv = self
                .pvs
                .get(volume)
                .ok_or_else(|| format!("persistentvolume \"{volume}\" of claim \"{ns}/{name}\" not found"))?;
            // kube-scheduler refuses a pod whose volume is going away; a node launched for it would stay empty.
            if pv.metadata.deletion_timestamp.is_some() {
                return Err(format!("persistentvolume \"{volume}\" of claim \"{ns}/{name}\" is being deleted"));
            }
            let driver = pv
                .spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .map(|c| c.driver.clone())
                .or_else(|| in_tree_driver(pv).map(str::to_owned))
                .or_else(|| {
                    let c = class.as_deref().or(pv.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()))?;
                    self.classes.get(c).map(|sc| in_tree_provisioner(&sc.provisioner).to_owned())
                })
                .unwrap_or_default();
            return Ok((Self::pv_alternatives(pv)?, driver));
        }
        let Some(class) = class else {
            return Err(format!("persistentvolumeclaim \"{ns}/{name}\" is unbound and has no storage class"));
        };
        // An Immediate class provisions the volume without regard to the pod's node, so the pod waits for that
        // binding (kube-scheduler's rule, as upstream). The API server writes the mode; a hand-written class
        // without it is read as WaitForFirstConsumer, the mode under which Karpenter can help.
        if self.classes.get(class.as_str()).and_then(|sc| sc.volume_binding_mode.as_deref()) == Some("Immediate") {
            return Err(format!(
                "persistentvolumeclaim \"{ns}/{name}\" is unbound and its storage class {class} binds immediately: \
                 the pod waits for the binding"
            ));
        }
        self.class_alternatives(&class)
    }
}

/// Cross product of per-volume alternatives, keeping mutually compatible combinations (all if none is).
fn cross_product(per_volume: Vec<Vec<Requirements>>) -> Vec<Requirements> {
    let mut all: Vec<Requirements> = vec![Requirements::new()];
    let mut compatible: Vec<Requirements> = vec![Requirements::new()];
    if per_volume.is_empty() {
        return Vec::new();
    }
    for alts in per_volume {
        let mut next_all = Vec::new();
        let mut next_ok = Vec::new();
        for base in &all {
            for a in &alts {
                next_all.push(base.intersection(a));
            }
        }
        for base in &compatible {
            for a in &alts {
                if base.intersects(a).is_ok() {
                    next_ok.push(base.intersection(a));
                }
            }
        }
        all = next_all;
        compatible = next_ok;
        if all.len() > 64 {
            all.truncate(64);
        }
        if compatible.len() > 64 {
            compatible.truncate(64);
        }
    }
    if compatible.is_empty() { all } else { compatible }
}

/// The first alternative compatible with `node` (`None`: the pod has no volume topology).
pub(crate) fn first_compatible<'r>(
    alternatives: &'r [Requirements],
    node: &Requirements,
    allow: &impl karpenter_requirements::KeySet,
) -> Result<Option<&'r Requirements>, String> {
    if alternatives.is_empty() {
        return Ok(None);
    }
    alternatives
        .iter()
        .find(|a| node.compatible_ok(a, allow))
        .map(Some)
        .ok_or_else(|| incompatible_alternatives(alternatives))
}

/// Why no volume-topology alternative fits: every alternative named.
pub(crate) fn incompatible_alternatives(alternatives: &[Requirements]) -> String {
    format!(
        "volume topology {} is not compatible",
        alternatives.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" or ")
    )
}

/// The volumes a new NodeClaim attaches: CSI driver → distinct claims (`namespace/name`).
pub(crate) type ClaimVolumes = BTreeMap<String, BTreeSet<String>>;

/// Per CSI driver `claims` use: how many distinct claims a NodeClaim already attaching `used` would attach with
/// them.
pub(crate) fn attach_counts<'c>(used: &ClaimVolumes, claims: &'c [(String, String)]) -> BTreeMap<&'c str, usize> {
    let mut added: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (driver, claim) in claims {
        if !used.get(driver).is_some_and(|u| u.contains(claim)) {
            added.entry(driver).or_default().insert(claim);
        }
    }
    claims
        .iter()
        .map(|(driver, _)| {
            let n = used.get(driver).map_or(0, BTreeSet::len) + added.get(driver.as_str()).map_or(0, BTreeSet::len);
            (driver.as_str(), n)
        })
        .collect()
}

/// Whether a node of `it` can attach `counts` (per driver); a driver without a limit for `it` has none.
pub(crate) fn within_attach_limits(it: &InstanceType, counts: &BTreeMap<&str, usize>) -> bool {
    counts.iter().all(|(driver, &n)| it.volume_attachment_limits.get(*driver).is_none_or(|&l| n as u64 <= u64::from(l)))
}

/// Why none of `its` can attach `counts`: the driver, the count and the largest limit when every option has a
/// limit for that driver; otherwise a generic reason.
pub(crate) fn attach_limit_error(its: &[&InstanceType], counts: &BTreeMap<&str, usize>) -> String {
    for (driver, &n) in counts {
        let limits: Option<Vec<u32>> = its.iter().map(|it| it.volume_attachment_limits.get(*driver).copied()).collect();
        if let Some(max) = limits.and_then(|l| l.into_iter().max())
            && n as u64 > u64::from(max)
        {
            return format!(
                "{n} volumes of {driver} exceed the largest volume attachment limit of the instance types ({max})"
            );
        }
    }
    "no instance type can attach the pod's volumes (volume attachment limits)".into()
}

/// CSI volume usage of an existing node: driver → claims in use, and the node's limits.
#[derive(Debug, Default, Clone)]
pub(crate) struct VolumeUsage {
    pub used: BTreeMap<String, BTreeSet<String>>,
    /// Shared by the clones of the node (a solve never changes them).
    pub limits: Arc<BTreeMap<String, i32>>,
}

impl VolumeUsage {
    /// Whether adding `claims` stays within the limits.
    pub fn check(&self, claims: &[(String, String)]) -> Result<(), String> {
        // No claim adds no attachment (and most pods have none: this runs for every node a pod is tried on).
        if claims.is_empty() {
            return Ok(());
        }
        for (driver, limit) in self.limits.iter() {
            let mut set: BTreeSet<&str> = self.used.get(driver).into_iter().flatten().map(String::as_str).collect();
            let before = set.len();
            for (d, c) in claims {
                if d == driver {
                    set.insert(c);
                }
            }
            if set.len() > before && set.len() as i64 > i64::from(*limit) {
                return Err(format!("volume limit of {driver} ({limit}) reached"));
            }
        }
        Ok(())
    }

    pub fn add(&mut self, claims: &[(String, String)]) {
        for (d, c) in claims {
            self.used.entry(d.clone()).or_default().insert(c.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use karpenter_api::load_str;

    use super::*;

    /// The volume verdict for pod `pod` of `yaml` (a pod, its claims, volumes and classes).
    fn verdict(yaml: &str) -> Result<PodVolumes, String> {
        let objects = load_str(yaml, "input.yaml").expect("input parses");
        let snapshot = ClusterSnapshot::from_objects(&objects).expect("snapshot");
        let index = VolumeIndex::new(&snapshot);
        let pod = snapshot.pending_pods.iter().find(|p| p.metadata.name.as_deref() == Some("pod")).expect("pod");
        index.pod(pod)
    }

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: pod, namespace: default}\nspec:\n  \
                       volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]\n  \
                       containers: [{name: app, image: app}]\n";

    fn class(mode: &str) -> String {
        format!(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {{name: sc}}\nprovisioner: csi.example.com\n{mode}\n---\n\
             apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: data, namespace: default}}\n\
             spec: {{storageClassName: sc, accessModes: [ReadWriteOnce]}}\n---\n{POD}"
        )
    }

    #[test]
    fn an_unbound_claim_of_an_immediate_class_waits_for_its_binding() {
        let err = verdict(&class("volumeBindingMode: Immediate")).expect_err("immediate and unbound");
        assert!(err.contains("binds immediately"), "{err}");
        let ok = verdict(&class("volumeBindingMode: WaitForFirstConsumer")).expect("provisioned for the node");
        assert_eq!(ok.claims, [("csi.example.com".to_owned(), "default/data".to_owned())]);
        assert!(verdict(&class("")).is_ok(), "a class without the mode is read as WaitForFirstConsumer");
    }

    #[test]
    fn a_claim_bound_to_a_volume_being_deleted_is_refused() {
        let yaml = |deleting: &str| {
            format!(
                "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: pv{deleting}}}\n\
                 spec: {{accessModes: [ReadWriteOnce], capacity: {{storage: 1Gi}}, csi: {{driver: d, volumeHandle: h}}}}\n---\n\
                 apiVersion: v1\nkind: PersistentVolumeClaim\n\
                 metadata: {{name: data, namespace: default, annotations: {{pv.kubernetes.io/bind-completed: \"yes\"}}}}\n\
                 spec: {{volumeName: pv, accessModes: [ReadWriteOnce]}}\n---\n{POD}"
            )
        };
        assert!(verdict(&yaml("")).is_ok());
        let err =
            verdict(&yaml(", deletionTimestamp: \"2026-01-01T00:00:00Z\", finalizers: [kubernetes.io/pv-protection]"))
                .expect_err("volume being deleted");
        assert!(err.contains("is being deleted"), "{err}");
    }
}
