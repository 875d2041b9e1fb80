//! A pod decoded straight from its JSON text into the typed `Pod`, without the `serde_json::Value` the general
//! path builds first (building, walking and dropping that tree was most of the cost of loading a 50,000-pod dump).
//!
//! This is only a shortcut: it answers `None` for anything but a clean pod (another kind, a syntax error, a field
//! the type does not know, a value of the wrong type), and the caller then takes the general path, which gives the
//! error messages, line numbers and lenient cases (an unknown field whose value is empty). So whenever it answers,
//! the general path would have produced the same object and no error.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

/// The pod in `text` (one JSON object), if it is a clean `v1` `Pod`.
pub(super) fn pod_from_json(text: &str) -> Option<Pod> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut clean = true;
    let doc: PodDocument = serde_ignored::deserialize(&mut de, |_| clean = false).ok()?;
    de.end().ok()?;
    clean.then_some(doc.0)
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
}
