//! Loaded objects handed to the API types' consumers that take them by kind: a capacity buffer's
//! [`BufferSources`] and the DRA objects of an input. Here, not beside those types, so that no type module
//! imports the loader.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::object::{Loaded, Object};
use crate::capacitybuffer::{BufferSources, Scalable};
use crate::dra::{DraError, DraObjects, is_later_version};

/// Loaded manifests (`simulate`'s input) as a buffer's [`BufferSources`].
#[derive(Debug, Clone, Copy)]
pub struct LoadedSources<'a>(pub &'a [Loaded]);

impl BufferSources for LoadedSources<'_> {
    fn pod_template(&self, namespace: &str, name: &str) -> Option<(PodTemplateSpec, Option<i64>)> {
        self.0.iter().find_map(|l| match &l.object {
            Object::PodTemplate(t) if in_namespace(&t.metadata, namespace, name) => {
                Some((t.template.clone().unwrap_or_default(), t.metadata.generation))
            }
            _ => None,
        })
    }

    fn scalable(&self, namespace: &str, kind: &str, name: &str) -> Option<Scalable> {
        let (template, replicas) = self.0.iter().find_map(|l| match (&l.object, kind) {
            (Object::Deployment(d), "Deployment") if in_namespace(&d.metadata, namespace, name) => {
                d.spec.as_ref().map(|s| (s.template.clone(), s.replicas))
            }
            (Object::StatefulSet(d), "StatefulSet") if in_namespace(&d.metadata, namespace, name) => {
                d.spec.as_ref().map(|s| (s.template.clone(), s.replicas))
            }
            (Object::ReplicaSet(d), "ReplicaSet") if in_namespace(&d.metadata, namespace, name) => {
                d.spec.as_ref().map(|s| (s.template.clone().unwrap_or_default(), s.replicas))
            }
            _ => None,
        })?;
        // Kubernetes' default for an unset `spec.replicas`.
        Some(Scalable { template, replicas: replicas.unwrap_or(1) })
    }
}

/// Whether `meta` names `namespace/name` (no namespace reads as `default`).
fn in_namespace(meta: &ObjectMeta, namespace: &str, name: &str) -> bool {
    meta.name.as_deref() == Some(name) && meta.namespace.as_deref().unwrap_or("default") == namespace
}

impl DraObjects {
    /// Takes `object` if it is a DRA object: `Ok(true)` when taken, `Ok(false)` for other objects, an error for a
    /// DRA object that cannot be read (a `v1beta2`/`v1` document that does not decode, a negative count).
    pub fn add(&mut self, object: &Object) -> Result<bool, DraError> {
        match object {
            Object::ResourceClaim(c) => self.add_claim(c)?,
            Object::ResourceClaimTemplate(t) => self.add_template(t)?,
            Object::DeviceClass(c) => self.add_class(c),
            Object::ResourceSlice(s) => self.add_slice(s)?,
            Object::Unknown(u) if is_later_version(&u.api_version, &u.kind) => {
                self.add_later_version(&u.api_version, &u.kind, &u.value)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}
