//! The instance profile instances launch with.
//!
//! * `spec.instanceProfile`: used as it is.
//! * `spec.role`: Karpenter manages a profile named `<cluster>_<hash>` under the IAM path
//!   `/karpenter/<region>/<cluster>/<node class uid>/`, tagged `kubernetes.io/cluster/<cluster>=owned`,
//!   `eks:eks-cluster-name=<cluster>`, `karpenter.k8s.aws/ec2nodeclass=<name>`,
//!   `topology.kubernetes.io/region=<region>` over the node class's `spec.tags`, with the role attached. The hash
//!   covers the region, the node class name and uid, and the role: a role change gives a new profile (created
//!   with the new role) while the old one stays usable by in-flight launches — it is protected from garbage
//!   collection for an hour. Upstream names the new profile with a random suffix; ours is derived from the role
//!   so that reconciles are deterministic (going back to an earlier role reuses its profile if it still exists).
//! * Existence is cached for 15 minutes; a profile with a missing tag is tagged, one with another role gets the
//!   role swapped.
//! * On node class deletion every profile under the node class's path (and the one in its status, if managed)
//!   loses its role and is deleted; the garbage collector deletes unreferenced profiles under the cluster's path.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::api::EC2NodeClass;
use crate::labels as aws_labels;
use karpenter_api::labels::REGION;
use karpenter_cloudprovider::Clock;

use super::api::{CreateInstanceProfileRequest, IamApi, InstanceProfileDescription};
use super::cache::TtlCache;
use crate::api_error::{AwsApiError, AwsErrorKind};

/// How long a profile's existence (with its role) is trusted.
pub const INSTANCE_PROFILE_CACHE_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a profile that was just created, or just replaced by a role change, is kept from garbage collection.
pub const INSTANCE_PROFILE_PROTECTION: Duration = Duration::from_secs(3600);

/// Cluster identity the managed profiles carry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterIdentity {
    /// `CLUSTER_NAME`.
    pub cluster_name: String,
    /// AWS region.
    pub region: String,
}

/// The role name of `spec.role`, which may be a name, a path-qualified name or an ARN (the last `/` segment).
pub fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

/// Creates, reuses and deletes the instance profiles of node classes with `spec.role`.
#[derive(Debug)]
pub struct InstanceProfileProvider {
    iam: Arc<dyn IamApi>,
    cluster: ClusterIdentity,
    /// profile name → attached role, while trusted.
    existing: TtlCache<String, String>,
    /// profile names garbage collection leaves alone for now.
    protected: TtlCache<String, ()>,
}

/// Why the instance profile could not be resolved.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InstanceProfileError {
    /// Neither `role` nor `instanceProfile` is set (the CRD forbids it; an object written around validation).
    #[error("neither spec.role nor spec.instanceProfile is set")]
    Unspecified,
    #[error(transparent)]
    Api(#[from] AwsApiError),
}

impl InstanceProfileProvider {
    pub fn new(iam: Arc<dyn IamApi>, cluster: ClusterIdentity, clock: Arc<dyn Clock>) -> Self {
        Self {
            iam,
            cluster,
            existing: TtlCache::new(clock.clone(), INSTANCE_PROFILE_CACHE_TTL),
            protected: TtlCache::new(clock, INSTANCE_PROFILE_PROTECTION),
        }
    }

    /// The IAM path of every profile this cluster manages: `/karpenter/<region>/<cluster>/`.
    pub fn cluster_path(&self) -> String {
        format!("/karpenter/{}/{}/", self.cluster.region, self.cluster.cluster_name)
    }

    /// The IAM path of a node class's profiles: `/karpenter/<region>/<cluster>/<uid>/`.
    pub fn node_class_path(&self, node_class: &EC2NodeClass) -> String {
        format!("{}{}/", self.cluster_path(), node_class.metadata.uid.as_deref().unwrap_or_default())
    }

    /// The managed profile name for a node class and role: `<cluster>_<hash>` (at most 128 characters, IAM's
    /// limit).
    pub fn profile_name(&self, node_class: &EC2NodeClass, role: &str) -> String {
        let seed = format!(
            "{}{}{}{}",
            self.cluster.region,
            node_class.metadata.name.as_deref().unwrap_or_default(),
            node_class.metadata.uid.as_deref().unwrap_or_default(),
            role_name(role)
        );
        let hash = karpenter_api::hash::fnv1a64(seed.as_bytes());
        let mut cluster = self.cluster.cluster_name.clone();
        cluster.truncate(100);
        format!("{cluster}_{hash}")
    }

    /// The tags of a managed profile (static tags over `spec.tags`).
    pub fn profile_tags(&self, node_class: &EC2NodeClass) -> BTreeMap<String, String> {
        let mut tags = node_class.spec.tags.clone();
        let cluster = &self.cluster.cluster_name;
        tags.insert(format!("kubernetes.io/cluster/{cluster}"), "owned".into());
        tags.insert("eks:eks-cluster-name".into(), cluster.clone());
        tags.insert(aws_labels::EC2_NODE_CLASS.into(), node_class.metadata.name.clone().unwrap_or_default());
        tags.insert(REGION.into(), self.cluster.region.clone());
        tags
    }

    /// The instance profile name for the node class, creating / repairing the managed profile when `spec.role`
    /// is set. `previous` is the profile in the node class's status: when it is a different managed profile
    /// (the role changed) it is protected from garbage collection for an hour.
    pub async fn resolve(
        &self,
        node_class: &EC2NodeClass,
        previous: Option<&str>,
    ) -> Result<String, InstanceProfileError> {
        if let Some(profile) = &node_class.spec.instance_profile {
            return Ok(profile.clone());
        }
        let Some(role) = node_class.spec.role.as_deref() else { return Err(InstanceProfileError::Unspecified) };
        let role = role_name(role);
        let name = self.profile_name(node_class, role);
        if let Some(prev) = previous.filter(|p| *p != name) {
            self.protected.insert(prev.to_string(), ());
        }
        if self.existing.get(&name).as_deref() == Some(role) {
            return Ok(name);
        }
        let wanted_tags = self.profile_tags(node_class);
        let profile = match self.iam.get_instance_profile(&name).await {
            Ok(p) => {
                let missing: BTreeMap<String, String> = wanted_tags
                    .iter()
                    .filter(|(k, v)| p.tags.get(*k) != Some(*v))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if !missing.is_empty() {
                    self.iam.tag_instance_profile(&name, &missing).await?;
                }
                p
            }
            Err(e) if e.is_not_found() => {
                let request = CreateInstanceProfileRequest {
                    name: name.clone(),
                    path: self.node_class_path(node_class),
                    tags: wanted_tags,
                };
                self.protected.insert(name.clone(), ());
                match self.iam.create_instance_profile(&request).await {
                    Ok(p) => p,
                    Err(e) if e.code == "EntityAlreadyExists" => self.iam.get_instance_profile(&name).await?,
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        if !profile.roles.iter().any(|r| r == role) {
            for other in &profile.roles {
                self.iam.remove_role_from_instance_profile(&name, other).await?;
            }
            self.iam.add_role_to_instance_profile(&name, role).await?;
        }
        self.existing.insert(name.clone(), role.to_string());
        Ok(name)
    }

    /// Deletes the profiles Karpenter manages for this node class (every profile under its path, and the status
    /// profile when it is one of ours). A gone profile is fine. Node classes with `spec.instanceProfile` own no
    /// profile: nothing is deleted. Returns the deleted names.
    pub async fn delete_managed(&self, node_class: &EC2NodeClass) -> Result<Vec<String>, AwsApiError> {
        if node_class.spec.role.is_none() {
            return Ok(Vec::new());
        }
        let mut profiles: BTreeMap<String, InstanceProfileDescription> = self
            .iam
            .list_instance_profiles(&self.node_class_path(node_class))
            .await?
            .into_iter()
            .map(|p| (p.name.clone(), p))
            .collect();
        let status_profile = node_class.status.as_ref().and_then(|s| s.instance_profile.clone());
        if let Some(name) = status_profile.filter(|n| !profiles.contains_key(n) && self.is_managed_name(n)) {
            match self.iam.get_instance_profile(&name).await {
                Ok(p) if p.path.starts_with(&self.cluster_path()) => {
                    profiles.insert(name, p);
                }
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        let mut deleted = Vec::new();
        for profile in profiles.into_values() {
            self.delete_profile(&profile).await?;
            deleted.push(profile.name);
        }
        Ok(deleted)
    }

    fn is_managed_name(&self, name: &str) -> bool {
        name.strip_prefix(&self.cluster.cluster_name).is_some_and(|rest| rest.starts_with('_'))
    }

    async fn delete_profile(&self, profile: &InstanceProfileDescription) -> Result<(), AwsApiError> {
        for role in &profile.roles {
            match self.iam.remove_role_from_instance_profile(&profile.name, role).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        match self.iam.delete_instance_profile(&profile.name).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        self.existing.remove(&profile.name);
        Ok(())
    }

    /// Garbage collection: deletes the profiles under the cluster's path that no node class references (the
    /// `referenced` names, from every EC2NodeClass's status) and that are not protected (just created, or
    /// replaced less than an hour ago). Returns the deleted names.
    pub async fn garbage_collect(&self, referenced: &BTreeSet<String>) -> Result<Vec<String>, AwsApiError> {
        let mut deleted = Vec::new();
        let mut profiles = self.iam.list_instance_profiles(&self.cluster_path()).await?;
        profiles.sort_by(|a, b| a.name.cmp(&b.name));
        for p in profiles {
            if referenced.contains(&p.name) || self.protected.get(&p.name).is_some() {
                continue;
            }
            match self.delete_profile(&p).await {
                Ok(()) => deleted.push(p.name),
                Err(e) if e.kind == AwsErrorKind::InvalidRequest || e.code == "DeleteConflict" => {
                    // Still attached to running instances (DeleteConflict) or similar: try again next pass.
                    tracing::debug!(profile = %p.name, error = %e, "instance profile not garbage collected");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }
}
