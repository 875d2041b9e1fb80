//! Compact pod lists: pods grouped by the workload that owns them (`inflate x10`).

use std::collections::BTreeMap;

use karpenter_api::CompactPod;
use karpenter_api::kube::Resource;
use karpenter_api::loader::{Loaded, Object};
use serde::Serialize;

/// Pods of one owner (or one standalone pod).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroup {
    /// Namespace of the pods.
    pub namespace: String,
    /// Owner kind (`Deployment`, `StatefulSet`, `Job`, `ReplicaSet`, ...), or `Pod` for a pod without owner.
    pub kind: String,
    /// Owner name (the pod's own name for a standalone pod).
    pub name: String,
    /// Number of pods.
    pub count: usize,
}

impl PodGroup {
    /// `inflate x10`; `kube-system/coredns x2` outside the default namespace; a standalone pod by its name.
    pub fn label(&self) -> String {
        if self.kind == BUFFER_KIND {
            return format!("buffer {}/{}: {} virtual pods", self.namespace, self.name, self.count);
        }
        let name =
            if self.namespace == "default" { self.name.clone() } else { format!("{}/{}", self.namespace, self.name) };
        if self.kind == "Pod" { name } else { format!("{name} x{}", self.count) }
    }
}

/// The owner kind a CapacityBuffer's virtual pods are grouped under.
pub const BUFFER_KIND: &str = "CapacityBuffer";

/// Resolves the workload a pod belongs to: a ReplicaSet is reported as its Deployment when the input holds the
/// ReplicaSet with a Deployment owner, or when the pod's `pod-template-hash` label is the suffix of the
/// ReplicaSet's name (as the Deployment controller names them).
#[derive(Debug, Default)]
pub struct Owners {
    /// (namespace, ReplicaSet) → Deployment.
    deployment_of: BTreeMap<(String, String), String>,
}

const POD_TEMPLATE_HASH: &str = "pod-template-hash";

impl Owners {
    /// Learns ReplicaSet owners from the loaded objects.
    pub fn new(objects: &[Loaded]) -> Self {
        let mut deployment_of = BTreeMap::new();
        for loaded in objects {
            let Object::ReplicaSet(rs) = &loaded.object else { continue };
            let owner = rs.metadata.owner_references.iter().flatten().find(|o| o.kind == "Deployment");
            if let (Some(owner), Some(name)) = (owner, rs.metadata.name.as_ref()) {
                let namespace = rs.metadata.namespace.clone().unwrap_or_else(|| "default".to_owned());
                deployment_of.insert((namespace, name.clone()), owner.name.clone());
            }
        }
        Owners { deployment_of }
    }

    /// (namespace, kind, name) of the pod's owner; the pod itself when it has none.
    pub fn owner_of(&self, pod: &impl Resource) -> (String, String, String) {
        let meta = pod.meta();
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".to_owned());
        let annotations = meta.annotations.as_ref();
        let buffer = |k: &str| annotations.and_then(|a| a.get(k)).cloned();
        if buffer(karpenter_api::capacitybuffer::annotations::FAKE_POD).as_deref() == Some("true")
            && let Some(name) = buffer(karpenter_api::capacitybuffer::annotations::NAME)
        {
            return (namespace, BUFFER_KIND.to_owned(), name);
        }
        let refs = meta.owner_references.as_deref().unwrap_or_default();
        let Some(owner) = refs.iter().find(|o| o.controller == Some(true)).or_else(|| refs.first()) else {
            let name = meta.name.clone().unwrap_or_default();
            return (namespace, "Pod".to_owned(), name);
        };
        if owner.kind == "ReplicaSet" {
            if let Some(deployment) = self.deployment_of.get(&(namespace.clone(), owner.name.clone())) {
                return (namespace, "Deployment".to_owned(), deployment.clone());
            }
            let hash = meta.labels.as_ref().and_then(|l| l.get(POD_TEMPLATE_HASH));
            if let Some(deployment) = hash.and_then(|h| owner.name.strip_suffix(h.as_str())?.strip_suffix('-'))
                && !deployment.is_empty()
            {
                return (namespace, "Deployment".to_owned(), deployment.to_owned());
            }
        }
        (namespace, owner.kind.clone(), owner.name.clone())
    }
}

/// Groups pods by owner, sorted by (namespace, kind, name). `pods` yields each pod's key (`namespace/name`) and the
/// pod when it is known; an unknown key becomes a standalone pod.
pub fn group<'a>(pods: impl IntoIterator<Item = (&'a str, Option<&'a CompactPod>)>, owners: &Owners) -> Vec<PodGroup> {
    let mut counts: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for (key, pod) in pods {
        let owner = match pod {
            Some(pod) => owners.owner_of(pod),
            None => {
                let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
                (namespace.to_owned(), "Pod".to_owned(), name.to_owned())
            }
        };
        *counts.entry(owner).or_default() += 1;
    }
    counts.into_iter().map(|((namespace, kind, name), count)| PodGroup { namespace, kind, name, count }).collect()
}

/// The groups as one short line: at most `max` groups, then `+N more`.
pub fn compact(groups: &[PodGroup], max: usize) -> String {
    if groups.is_empty() {
        return "-".to_owned();
    }
    let mut parts: Vec<String> = groups.iter().take(max).map(PodGroup::label).collect();
    if groups.len() > max {
        let rest: usize = groups.iter().skip(max).map(|g| g.count).sum();
        parts.push(format!("+{rest} more pods"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_api::load_str;

    const INPUT: &str = "
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-abc
  namespace: default
  ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: u1, controller: true}]
spec:
  selector: {matchLabels: {app: web}}
  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c, image: x}]}}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-abc-1
  namespace: default
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-abc, uid: u2, controller: true}]
spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: api-7f9-1
  namespace: shop
  labels: {pod-template-hash: 7f9}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: api-7f9, uid: u3, controller: true}]
spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: db-0
  namespace: shop
  ownerReferences: [{apiVersion: apps/v1, kind: StatefulSet, name: db, uid: u4, controller: true}]
spec: {containers: [{name: c, image: x}]}
---
apiVersion: v1
kind: Pod
metadata: {name: lonely, namespace: default}
spec: {containers: [{name: c, image: x}]}
";

    fn pods(objects: &[Loaded]) -> Vec<(String, CompactPod)> {
        objects
            .iter()
            .filter_map(|l| match &l.object {
                Object::Pod(p) => {
                    let p = CompactPod::from(p.as_ref());
                    Some((karpenter_scheduler::snapshot::pod_key(&p), p))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn owners_resolve_through_replica_sets_and_hash_labels() {
        let objects = load_str(INPUT, "pods.yaml").expect("valid input");
        let owners = Owners::new(&objects);
        let pods = pods(&objects);
        let found: Vec<_> = pods.iter().map(|(_, p)| owners.owner_of(p)).collect();
        let expected = [
            ("default", "Deployment", "web"),
            ("shop", "Deployment", "api"),
            ("shop", "StatefulSet", "db"),
            ("default", "Pod", "lonely"),
        ];
        let expected: Vec<_> = expected.iter().map(|(n, k, o)| (n.to_string(), k.to_string(), o.to_string())).collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn groups_count_and_render_compactly() {
        let objects = load_str(INPUT, "pods.yaml").expect("valid input");
        let owners = Owners::new(&objects);
        let pods = pods(&objects);
        let mut input: Vec<(&str, Option<&CompactPod>)> = pods.iter().map(|(k, p)| (k.as_str(), Some(p))).collect();
        // The same pod twice counts twice; an unknown key is a standalone pod.
        input.push((pods[0].0.as_str(), Some(&pods[0].1)));
        input.push(("other/ghost", None));
        let groups = group(input, &owners);
        let labels: Vec<String> = groups.iter().map(PodGroup::label).collect();
        assert_eq!(labels, ["web x2", "lonely", "other/ghost", "shop/api x1", "shop/db x1"]);
        assert_eq!(compact(&groups, 2), "web x2, lonely, +3 more pods");
        assert_eq!(compact(&groups, 10), labels.join(", "));
        assert_eq!(compact(&[], 3), "-");
    }
}
