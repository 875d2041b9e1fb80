//! A pod decoded straight from its JSON text, or from the YAML tree the block parser built, into the typed `Pod`,
//! without the `serde_json::Value` the general path builds first (building, walking and dropping that tree was
//! most of the cost of loading a 50,000-pod dump).
//!
//! This is only a shortcut: it answers `None` for anything but a clean pod (another kind, a syntax error, a field
//! the type does not know, a value of the wrong type), and the caller then takes the general path, which gives the
//! error messages, line numbers and lenient cases (an unknown field whose value is empty). So whenever it answers,
//! the general path would have produced the same object and no error.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use serde::de::{self, Deserialize, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};

use super::{SNode, YNode};

/// The pod in `text` (one JSON object), if it is a clean `v1` `Pod`.
pub(super) fn pod_from_json(text: &str) -> Option<Pod> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut clean = true;
    let doc: PodDocument = serde_ignored::deserialize(&mut de, |_| clean = false).ok()?;
    de.end().ok()?;
    clean.then_some(doc.0)
}

/// The pod `node` holds, if it is a clean `v1` `Pod` (the same answer as for the node's `Value`).
pub(super) fn pod_from_node(node: &SNode) -> Option<Pod> {
    let mut clean = true;
    let doc: PodDocument = serde_ignored::deserialize(NodeDeserializer(node), |_| clean = false).ok()?;
    clean.then_some(doc.0)
}

/// Why the shortcut gave up; never shown (the general path words the error).
#[derive(Debug)]
struct Declined;

impl fmt::Display for Declined {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a clean pod")
    }
}

impl std::error::Error for Declined {}

impl de::Error for Declined {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Declined
    }
}

/// A YAML node read as `serde_json`'s `Value` reads: by the node's own type, null as an absent option.
struct NodeDeserializer<'a>(&'a SNode);

impl<'de> Deserializer<'de> for NodeDeserializer<'de> {
    type Error = Declined;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        match &self.0.node {
            YNode::Null => visitor.visit_unit(),
            YNode::Bool(b) => visitor.visit_bool(*b),
            YNode::I64(i) => visitor.visit_i64(*i),
            YNode::U64(u) => visitor.visit_u64(*u),
            // `Value` has no NaN or infinity: the general path reads them as null.
            YNode::F64(f) if f.is_finite() => visitor.visit_f64(*f),
            YNode::F64(_) => visitor.visit_unit(),
            YNode::Str(s) => visitor.visit_borrowed_str(s),
            YNode::Seq(items) => {
                let mut access = Items(items.iter());
                let value = visitor.visit_seq(&mut access)?;
                if access.0.len() == 0 { Ok(value) } else { Err(Declined) }
            }
            YNode::Map(entries) => {
                let mut access = Entries { entries: entries.iter(), value: None };
                let value = visitor.visit_map(&mut access)?;
                if access.entries.len() == 0 { Ok(value) } else { Err(Declined) }
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Declined> {
        match &self.0.node {
            YNode::Null => visitor.visit_none(),
            YNode::F64(f) if !f.is_finite() => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Declined> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Declined> {
        // Only unit variants written as a string; anything else is left to the general path.
        match &self.0.node {
            YNode::Str(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            _ => Err(Declined),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit unit_struct seq
        tuple tuple_struct map struct identifier ignored_any
    }
}

struct Items<'a>(std::slice::Iter<'a, SNode>);

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = Declined;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Declined> {
        self.0.next().map(|n| seed.deserialize(NodeDeserializer(n))).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Entries<'a> {
    entries: std::slice::Iter<'a, (String, SNode)>,
    value: Option<&'a SNode>,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Declined;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Declined> {
        let Some((key, value)) = self.entries.next() else { return Ok(None) };
        self.value = Some(value);
        seed.deserialize(de::value::BorrowedStrDeserializer::new(key)).map(Some)
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Declined> {
        let value = self.value.take().ok_or(Declined)?;
        seed.deserialize(NodeDeserializer(value))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// A `Pod` whose `apiVersion` and `kind` must both be present (the typed `Pod` accepts a document without them,
/// but then the general path would not have taken it for a pod).
struct PodDocument(Pod);

enum Field {
    ApiVersion,
    Kind,
    Metadata,
    Spec,
    Status,
    Other,
}

impl<'de> Deserialize<'de> for Field {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct FieldVisitor;
        impl Visitor<'_> for FieldVisitor {
            type Value = Field;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Field, E> {
                Ok(match v {
                    "apiVersion" => Field::ApiVersion,
                    "kind" => Field::Kind,
                    "metadata" => Field::Metadata,
                    "spec" => Field::Spec,
                    "status" => Field::Status,
                    _ => Field::Other,
                })
            }
        }
        deserializer.deserialize_identifier(FieldVisitor)
    }
}

impl<'de> Deserialize<'de> for PodDocument {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DocumentVisitor;
        impl<'de> Visitor<'de> for DocumentVisitor {
            type Value = PodDocument;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a v1 Pod")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PodDocument, A::Error> {
                let (mut api_version, mut kind) = (false, false);
                let mut pod = Pod::default();
                while let Some(field) = map.next_key::<Field>()? {
                    match field {
                        Field::ApiVersion => {
                            let value: std::borrow::Cow<'_, str> = map.next_value()?;
                            if value != "v1" {
                                return Err(de::Error::custom("not v1"));
                            }
                            api_version = true;
                        }
                        Field::Kind => {
                            let value: std::borrow::Cow<'_, str> = map.next_value()?;
                            if value != "Pod" {
                                return Err(de::Error::custom("not a Pod"));
                            }
                            kind = true;
                        }
                        Field::Metadata => pod.metadata = map.next_value()?,
                        Field::Spec => pod.spec = map.next_value()?,
                        Field::Status => pod.status = map.next_value()?,
                        Field::Other => return Err(de::Error::custom("unknown field")),
                    }
                }
                if api_version && kind { Ok(PodDocument(pod)) } else { Err(de::Error::custom("not a Pod")) }
            }
        }
        deserializer.deserialize_map(DocumentVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn general(text: &str) -> (Vec<super::super::Loaded>, Vec<super::super::LoadError>) {
        super::super::load_str_all_with(text, "pod.json", &super::super::LoadOptions::default())
    }

    #[test]
    fn a_clean_pod_is_decoded_as_the_general_path_decodes_it() {
        let text = r#"{"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]},
            "status": {"phase": "Pending"}}"#;
        let direct = pod_from_json(text).expect("a clean pod");
        let (loaded, errors) = general(text);
        assert!(errors.is_empty(), "{errors:?}");
        let [l] = &loaded[..] else { panic!("one object: {loaded:?}") };
        let super::super::Object::Pod(pod) = &l.object else { panic!("a pod: {:?}", l.object) };
        assert_eq!(&direct, pod.as_ref());
    }

    #[test]
    fn anything_but_a_clean_pod_is_left_to_the_general_path() {
        for (text, why) in [
            (r#"{"kind": "Pod", "metadata": {"name": "p"}}"#, "no apiVersion"),
            (r#"{"apiVersion": "v1", "metadata": {"name": "p"}}"#, "no kind"),
            (r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "p"}}"#, "another kind"),
            (r#"{"apiVersion": "apps/v1", "kind": "Pod"}"#, "another apiVersion"),
            (r#"{"apiVersion": "v1", "kind": "Pod", "spex": {}}"#, "an unknown top-level field"),
            (r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"nmae": "p"}}"#, "an unknown nested field"),
            (r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": null, "x": ""}}"#, "unknown but empty"),
            (r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 3}}"#, "a wrong type"),
            (r#"{"apiVersion": "v1", "kind": "Pod", "metadata": null}"#, "null metadata"),
            (r#"{"apiVersion": "v1", "kind": "Pod"} {}"#, "trailing text"),
            (r#"{"apiVersion": "v1", "kind": "Pod""#, "truncated"),
            (r#"[{"apiVersion": "v1", "kind": "Pod"}]"#, "not an object"),
        ] {
            assert!(pod_from_json(text).is_none(), "{why}: {text}");
        }
    }

    #[test]
    fn a_repeated_field_keeps_its_last_value_as_the_general_path_does() {
        let text = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "metadata": {"name": "b"}}"#;
        let direct = pod_from_json(text).expect("a clean pod");
        assert_eq!(direct.metadata.name.as_deref(), Some("b"));
        let (loaded, _) = general(text);
        let super::super::Object::Pod(pod) = &loaded[0].object else { panic!("a pod") };
        assert_eq!(&direct, pod.as_ref());
    }

    /// The block parser's tree for `entry` (one `- ...` sequence entry).
    fn node(entry: &str) -> SNode {
        super::super::block::parse_entry(entry, 1).expect("plain block YAML")
    }

    #[test]
    fn a_clean_yaml_pod_is_decoded_as_the_general_path_decodes_it() {
        let entry = "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: p\n    namespace: default\n    labels:\n      app: a\n      \
                     pod-template-hash: '0000000000'\n  spec:\n    priority: 0\n    containers:\n    - name: c\n      image: i\n      \
                     resources:\n        requests:\n          cpu: 100m\n    securityContext: {}\n    tolerations:\n    \
                     - key: k\n      operator: Exists\n      tolerationSeconds: 300\n  status:\n    phase: Pending\n";
        let direct = pod_from_node(&node(entry)).expect("a clean pod");
        let text = entry.lines().map(|l| l.get(2..).unwrap_or_default()).collect::<Vec<_>>().join("\n");
        let (loaded, errors) =
            super::super::load_str_all_with(&text, "pod.yaml", &super::super::LoadOptions::default());
        assert!(errors.is_empty(), "{errors:?}");
        let super::super::Object::Pod(pod) = &loaded[0].object else { panic!("a pod: {loaded:?}") };
        assert_eq!(&direct, pod.as_ref());
        assert_eq!(
            direct.metadata.labels.as_ref().and_then(|l| l.get("pod-template-hash")).map(String::as_str),
            Some("0000000000")
        );
    }

    #[test]
    fn a_yaml_tree_that_is_not_a_clean_pod_is_left_to_the_general_path() {
        for (entry, why) in [
            ("- kind: Pod\n  apiVersion: apps/v1\n", "another apiVersion"),
            ("- kind: Pod\n  metadata:\n    name: p\n", "no apiVersion"),
            ("- apiVersion: v1\n  kind: Pod\n  metadata:\n    nmae: p\n", "an unknown field"),
            ("- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: 12\n", "a number for a string"),
            ("- apiVersion: v1\n  kind: Pod\n  spec:\n    containers: {}\n", "a mapping for a list"),
            ("- apiVersion: v1\n  kind: Pod\n  spec:\n    priority: x\n", "a string for a number"),
        ] {
            assert!(pod_from_node(&node(entry)).is_none(), "{why}: {entry}");
        }
    }
}
