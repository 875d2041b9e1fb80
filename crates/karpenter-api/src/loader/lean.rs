//! Decoding watched objects without `metadata.managedFields`.
//!
//! The API server sends every object with its `managedFields`: one entry per field manager, each a JSON tree of
//! the fields it owns. k8s-openapi decodes them into `serde_json::Value` trees, and the controller's cluster state
//! then drops them. At scale that was a tenth of the controller's CPU (docs/benchmarks.md, "Controller CPU": 9.4 %
//! of the samples of a 3,000-pod run decoding `ManagedFieldsEntry`, more freeing it). [`Lean<K>`] decodes a `K`
//! with that key skipped by the parser (serde's `IgnoredAny`: scanned, never allocated), so watches never build
//! what they would throw away.
//!
//! The skip is a thin layer over any serde `Deserializer`: the top-level map hands its `metadata` value to a
//! deserializer whose map leaves out `managedFields`; every other key and value goes to `K`'s own `Deserialize`
//! untouched.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// A `K` decoded without `metadata.managedFields` (see the module docs). Serializes as `K`.
#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct Lean<K>(pub K);

impl<K: Resource> Resource for Lean<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> std::borrow::Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

impl<'de, K: Deserialize<'de>> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(Filtered { inner: deserializer, level: Level::Object }).map(Lean)
    }
}

/// Where in the object a [`Filtered`] deserializer is.
#[derive(Clone, Copy)]
enum Level {
    /// The object: its `metadata` value is filtered at [`Level::Metadata`].
    Object,
    /// The object's metadata: `managedFields` is skipped.
    Metadata,
}

/// A deserializer that filters the maps it yields (see [`Level`]); everything else is forwarded.
struct Filtered<D> {
    inner: D,
    level: Level,
}

macro_rules! forward {
    ($($method:ident)*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.inner.$method(visitor)
        })*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Filtered<D> {
    type Error = D::Error;

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_map(FilteringVisitor { inner: visitor, level: self.level })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_struct(name, fields, FilteringVisitor { inner: visitor, level: self.level })
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_option(FilteringVisitor { inner: visitor, level: self.level })
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.inner.deserialize_enum(name, variants, visitor)
    }

    forward! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_f32 deserialize_f64
        deserialize_char deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_unit deserialize_seq deserialize_identifier deserialize_ignored_any
    }
}

/// Wraps the visitor of a map (or of an `Option` around one) so its `MapAccess` is filtered.
struct FilteringVisitor<V> {
    inner: V,
    level: Level,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for FilteringVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(FilteredMap { inner: map, level: self.level, key: None })
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(Filtered { inner: deserializer, level: self.level })
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }
}

/// A map that leaves out `managedFields` (at [`Level::Metadata`]) and filters `metadata` (at
/// [`Level::Object`]).
struct FilteredMap<A> {
    inner: A,
    level: Level,
    /// The key whose value comes next.
    key: Option<String>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilteredMap<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, Self::Error> {
        loop {
            let Some(key) = self.inner.next_key::<String>()? else { return Ok(None) };
            if matches!(self.level, Level::Metadata) && key == "managedFields" {
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            let value = seed.deserialize(key.as_str().into_deserializer())?;
            self.key = Some(key);
            return Ok(Some(value));
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Self::Error> {
        match (self.level, self.key.take().as_deref()) {
            (Level::Object, Some("metadata")) => {
                self.inner.next_value_seed(FilteredSeed { inner: seed, level: Level::Metadata })
            }
            _ => self.inner.next_value_seed(seed),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// Deserializes `inner`'s value through a [`Filtered`] deserializer.
struct FilteredSeed<S> {
    inner: S,
    level: Level,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for FilteredSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.inner.deserialize(Filtered { inner: deserializer, level: self.level })
    }
}

#[cfg(test)]
mod tests {
    use crate::NodeClaim;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;

    fn pod_json() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "default", "uid": "u-1", "resourceVersion": "42",
                "labels": {"app": "a"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "managedFields": [
                    {"manager": "kube-scheduler", "operation": "Update", "apiVersion": "v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:conditions": {".": {}}}}},
                    {"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:containers": {}}}}
                ],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r"}],
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": "500m"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
        })
    }

    #[test]
    fn managed_fields_are_skipped_and_everything_else_is_kept() {
        let text = pod_json().to_string();
        let lean: Lean<Pod> = serde_json::from_str(&text).unwrap();
        let mut full: Pod = serde_json::from_str(&text).unwrap();
        assert!(full.metadata.managed_fields.as_ref().is_some_and(|m| m.len() == 2), "the fixture has them");
        assert_eq!(lean.0.metadata.managed_fields, None);
        full.metadata.managed_fields = None;
        assert_eq!(lean.0, full, "nothing but managedFields differs");
    }

    #[test]
    fn a_managed_fields_key_elsewhere_is_kept() {
        // Only metadata.managedFields is skipped: a label or annotation of that name is data.
        let mut value = pod_json();
        value["metadata"]["labels"]["managedFields"] = json!("x");
        let lean: Lean<Pod> = serde_json::from_value(value).unwrap();
        assert_eq!(lean.0.metadata.labels.unwrap().get("managedFields").map(String::as_str), Some("x"));
    }

    #[test]
    fn custom_resources_and_watch_events_decode() {
        let claim = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                     "requirements": []},
        });
        let event = json!({"type": "MODIFIED", "object": claim}).to_string();
        let decoded: kube::core::WatchEvent<Lean<NodeClaim>> = serde_json::from_str(&event).unwrap();
        let kube::core::WatchEvent::Modified(c) = decoded else { panic!("a MODIFIED event") };
        assert_eq!(c.0.metadata.name.as_deref(), Some("c"));
        assert_eq!(c.0.metadata.managed_fields, None);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        for text in
            ["", "[]", "{\"metadata\": 3}", "{\"metadata\": {\"managedFields\": }}", "{\"spec\": {\"containers\": 1}}"]
        {
            assert!(serde_json::from_str::<Lean<Pod>>(text).is_err(), "{text}");
        }
    }
}
