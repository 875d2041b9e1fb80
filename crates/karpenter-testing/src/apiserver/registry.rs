//! The kinds the server stores, with their scope and subresources: built-in kinds from a table, the Karpenter
//! kinds from the CRDs `karpenter_api` generates (so the served kinds follow the CRDs).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::crd::optional_crds;
use karpenter_api::labels::ProviderLabels;
use karpenter_api::node_class_api::{NodeClassApis, crds_with};

use super::schema::SchemaRef;

/// One served resource (one group/version/plural).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceKind {
    /// API group, `""` for the core group.
    pub group: String,
    /// Served version.
    pub version: String,
    /// Plural resource name, as in URLs (`pods`).
    pub plural: String,
    /// Singular name (`pod`).
    pub singular: String,
    /// Kind (`Pod`).
    pub kind: String,
    /// Short names for discovery.
    pub short_names: Vec<String>,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `/status` subresource: status writes go there, main-resource writes keep the stored status.
    pub status_subresource: bool,
    /// Has a `/scale` subresource: (specReplicasPath, statusReplicasPath) as JSON paths like `.spec.replicas`.
    pub scale_subresource: Option<(String, Option<String>)>,
    /// `metadata.generation` is maintained (1 on create, +1 on each change outside metadata and status).
    pub generation: bool,
    /// A custom resource (served from a CRD): strategic merge patch is refused, as on the real server.
    pub custom: bool,
    /// Only reads are served (CustomResourceDefinitions).
    pub read_only: bool,
    /// The CRD's structural schema for custom resources: pruning, defaults, validation and CEL rules on writes.
    pub(crate) schema: Option<SchemaRef>,
}

impl ResourceKind {
    /// `v1` or `group/version`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }
}

/// (group, version, plural, kind, short names, namespaced, status subresource, generation)
type Row = (&'static str, &'static str, &'static str, &'static str, &'static [&'static str], bool, bool, bool);

const BUILT_IN: &[Row] = &[
    ("", "v1", "pods", "Pod", &["po"], true, true, false),
    ("", "v1", "nodes", "Node", &["no"], false, true, false),
    ("", "v1", "namespaces", "Namespace", &["ns"], false, true, false),
    ("", "v1", "events", "Event", &["ev"], true, false, false),
    ("", "v1", "configmaps", "ConfigMap", &["cm"], true, false, false),
    ("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", &["pvc"], true, true, false),
    ("", "v1", "persistentvolumes", "PersistentVolume", &["pv"], false, true, false),
    ("apps", "v1", "daemonsets", "DaemonSet", &["ds"], true, true, true),
    ("", "v1", "services", "Service", &["svc"], true, true, false),
    ("", "v1", "replicationcontrollers", "ReplicationController", &["rc"], true, true, true),
    ("apps", "v1", "replicasets", "ReplicaSet", &["rs"], true, true, true),
    ("apps", "v1", "statefulsets", "StatefulSet", &["sts"], true, true, true),
    ("apps", "v1", "deployments", "Deployment", &["deploy"], true, true, true),
    ("", "v1", "podtemplates", "PodTemplate", &[], true, false, false),
    ("", "v1", "resourcequotas", "ResourceQuota", &["quota"], true, true, false),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", &["pdb"], true, true, true),
    ("storage.k8s.io", "v1", "storageclasses", "StorageClass", &["sc"], false, false, false),
    ("storage.k8s.io", "v1", "csinodes", "CSINode", &[], false, false, false),
    ("storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", &[], false, true, false),
    ("coordination.k8s.io", "v1", "leases", "Lease", &[], true, false, false),
    ("events.k8s.io", "v1", "events", "Event", &["ev"], true, false, false),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        &["crd", "crds"],
        false,
        true,
        true,
    ),
];

/// The served kinds, in a fixed order (built-ins, then CRDs).
#[derive(Debug, Clone)]
pub struct Registry {
    kinds: Vec<ResourceKind>,
    crds: Vec<CustomResourceDefinition>,
}

impl Registry {
    /// Built-in kinds plus the Karpenter CRDs: karpenter.sh NodePool, NodeClaim and NodeOverlay, the CapacityBuffer
    /// CRD Karpenter reads and, with the feature `kwok`, the kwok provider's KWOKNodeClass. The label rules of the
    /// karpenter.sh CRDs are the AWS set's ([`vocabulary::aws`](crate::vocabulary::aws), test data), as upstream's
    /// CRDs carry them. Another provider's labels and node classes: [`Registry::karpenter_with`].
    pub fn karpenter() -> Self {
        #[cfg(feature = "kwok")]
        let node_classes = NodeClassApis::none().with(&karpenter_kwok::api::KWOK_NODE_CLASS_API);
        #[cfg(not(feature = "kwok"))]
        let node_classes = NodeClassApis::none();
        Self::karpenter_with(&crate::vocabulary::aws(), &node_classes)
    }

    /// Built-in kinds plus the core Karpenter CRDs with `labels`' rules (restricted domains, well-known keys), the
    /// CapacityBuffer CRD and the CRDs of `node_classes` (the test kit depends on no provider: a provider's tests
    /// pass its own labels and node classes).
    pub fn karpenter_with(labels: &ProviderLabels, node_classes: &NodeClassApis) -> Self {
        let mut crd_list = crds_with(labels, node_classes);
        crd_list.extend(optional_crds(labels));
        Self::with_crds(crd_list)
    }

    /// Built-in kinds plus the given CRDs (each served at its storage version).
    pub fn with_crds(crd_list: Vec<CustomResourceDefinition>) -> Self {
        let mut kinds: Vec<ResourceKind> = BUILT_IN
            .iter()
            .map(|&(group, version, plural, kind, short, namespaced, status, generation)| ResourceKind {
                group: group.into(),
                version: version.into(),
                plural: plural.into(),
                singular: kind.to_ascii_lowercase(),
                kind: kind.into(),
                short_names: short.iter().map(|s| s.to_string()).collect(),
                namespaced,
                status_subresource: status,
                scale_subresource: None,
                generation,
                custom: false,
                read_only: group == "apiextensions.k8s.io",
                schema: None,
            })
            .collect();
        for crd in &crd_list {
            let spec = &crd.spec;
            let Some(version) = spec.versions.iter().find(|v| v.storage).or_else(|| spec.versions.first()) else {
                continue;
            };
            let sub = version.subresources.as_ref();
            kinds.push(ResourceKind {
                group: spec.group.clone(),
                version: version.name.clone(),
                plural: spec.names.plural.clone(),
                singular: spec.names.singular.clone().unwrap_or_else(|| spec.names.kind.to_ascii_lowercase()),
                kind: spec.names.kind.clone(),
                short_names: spec.names.short_names.clone().unwrap_or_default(),
                namespaced: spec.scope == "Namespaced",
                status_subresource: sub.is_some_and(|s| s.status.is_some()),
                scale_subresource: sub
                    .and_then(|s| s.scale.as_ref())
                    .map(|s| (s.spec_replicas_path.clone(), Some(s.status_replicas_path.clone()))),
                generation: true,
                custom: true,
                read_only: false,
                schema: version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .and_then(|s| serde_json::to_value(s).ok())
                    .map(SchemaRef::new),
            });
        }
        Self { kinds, crds: crd_list }
    }

    /// Every served kind.
    pub fn kinds(&self) -> &[ResourceKind] {
        &self.kinds
    }

    /// The CRDs behind the custom kinds (served read-only under apiextensions.k8s.io).
    pub fn crds(&self) -> &[CustomResourceDefinition] {
        &self.crds
    }

    /// The kind served at group/version/plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceKind> {
        self.kinds.iter().find(|k| k.group == group && k.version == version && k.plural == plural)
    }

    /// Served (group, version) pairs, in registration order without duplicates.
    pub fn group_versions(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for k in &self.kinds {
            let gv = (k.group.clone(), k.version.clone());
            if !out.contains(&gv) {
                out.push(gv);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn karpenter_registry_serves_crd_kinds_with_their_subresources() {
        let r = Registry::karpenter();
        let np = r.find("karpenter.sh", "v1", "nodepools").expect("nodepools served");
        assert!(!np.namespaced && np.status_subresource && np.custom && np.generation);
        assert!(np.scale_subresource.is_some() && np.schema.is_some());
        let nc = r.find("karpenter.sh", "v1", "nodeclaims").expect("nodeclaims served");
        assert!(nc.status_subresource && nc.scale_subresource.is_none());
        assert!(r.find("karpenter.sh", "v1alpha1", "nodeoverlays").is_some());
        #[cfg(feature = "kwok")]
        assert!(r.find("karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses").is_some());
        let pods = r.find("", "v1", "pods").expect("pods");
        assert!(pods.namespaced && pods.status_subresource && !pods.custom);
        assert!(r.find("", "v1", "secrets").is_none());
        assert_eq!(r.group_versions().first(), Some(&(String::new(), "v1".to_string())));
    }
}
