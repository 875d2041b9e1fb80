//! Custom resources whose `spec` may be absent.
//!
//! kube-derive's root type requires the `spec` key when decoding and its CRD lists `spec` in the top-level
//! `required`. Upstream's node classes declare `spec` with `omitempty` and their
//! CRDs require no `spec`, so an object written as `{apiVersion, kind, metadata}` is accepted by the API server;
//! a watch over such objects must decode them too. For these kinds the `CustomResource` derive generates a hidden
//! schema type (`#[kube(root = "...")]`) and `optional_spec_root!` writes the public root type by hand: the same
//! shape and traits, with `spec` defaulted when absent and removed from the CRD's top-level `required`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Removes `spec` from the top-level `required` of every version of `crd` (and the empty list with it) and sets
/// the schema's title to the kind (the derived schema type has another name).
pub fn spec_not_required(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let kind = crd.spec.names.kind.clone();
    for version in &mut crd.spec.versions {
        let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) else { continue };
        if let Some(required) = schema.required.as_mut() {
            required.retain(|r| r != "spec");
            if required.is_empty() {
                schema.required = None;
            }
        }
        if schema.title.is_some() {
            schema.title = Some(kind.clone());
        }
    }
    crd
}

/// Writes the public root type `$root` of a kind whose derived schema type is `$derived` (same fields:
/// `metadata`, `spec: $spec`, `status: Option<$status>`), with `spec` defaulted when absent. Exported for the
/// providers' node classes (the calling crate depends on `serde`, as its derives need).
#[macro_export]
macro_rules! optional_spec_root {
    ($(#[$attr:meta])* $root:ident, $derived:ident, $spec:ty, $status:ty) => {
        $(#[$attr])*
        #[derive(Clone, Debug, Default, PartialEq, ::serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $root {
            /// Standard object metadata.
            #[serde(default)]
            pub metadata: $crate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            /// The spec; the default when the object has none.
            #[serde(default)]
            pub spec: $spec,
            /// Observed state.
            #[serde(default)]
            pub status: ::core::option::Option<$status>,
        }

        impl $root {
            /// An object named `name` with `spec` and no status.
            pub fn new(name: &str, spec: $spec) -> Self {
                Self {
                    metadata: $crate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.to_string()),
                        ..Default::default()
                    },
                    spec,
                    status: None,
                }
            }
        }

        impl ::serde::Serialize for $root {
            fn serialize<S: ::serde::Serializer>(&self, ser: S) -> ::core::result::Result<S::Ok, S::Error> {
                use ::serde::ser::SerializeStruct;
                let mut obj = ser.serialize_struct(stringify!($root), 4 + usize::from(self.status.is_some()))?;
                obj.serialize_field("apiVersion", &<$root as $crate::kube::Resource>::api_version(&()))?;
                obj.serialize_field("kind", &<$root as $crate::kube::Resource>::kind(&()))?;
                obj.serialize_field("metadata", &self.metadata)?;
                obj.serialize_field("spec", &self.spec)?;
                if let Some(status) = &self.status {
                    obj.serialize_field("status", status)?;
                }
                obj.end()
            }
        }

        impl $crate::kube::Resource for $root {
            type DynamicType = ();
            type Scope = <$derived as $crate::kube::Resource>::Scope;
            fn group(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$derived as $crate::kube::Resource>::group(dt)
            }
            fn kind(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$derived as $crate::kube::Resource>::kind(dt)
            }
            fn version(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$derived as $crate::kube::Resource>::version(dt)
            }
            fn api_version(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$derived as $crate::kube::Resource>::api_version(dt)
            }
            fn plural(dt: &()) -> ::std::borrow::Cow<'_, str> {
                <$derived as $crate::kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &$crate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut $crate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }

        impl $crate::kube::core::object::HasSpec for $root {
            type Spec = $spec;
            fn spec(&self) -> &$spec {
                &self.spec
            }
            fn spec_mut(&mut self) -> &mut $spec {
                &mut self.spec
            }
        }

        impl $crate::kube::core::object::HasStatus for $root {
            type Status = $status;
            fn status(&self) -> ::core::option::Option<&$status> {
                self.status.as_ref()
            }
            fn status_mut(&mut self) -> &mut ::core::option::Option<$status> {
                &mut self.status
            }
        }

        impl $crate::kube::CustomResourceExt for $root {
            fn crd() -> $crate::k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
                $crate::optional_spec::spec_not_required(<$derived as $crate::kube::CustomResourceExt>::crd())
            }
            fn crd_name() -> &'static str {
                <$derived as $crate::kube::CustomResourceExt>::crd_name()
            }
            fn api_resource() -> $crate::kube::core::ApiResource {
                <$derived as $crate::kube::CustomResourceExt>::api_resource()
            }
            fn shortnames() -> &'static [&'static str] {
                <$derived as $crate::kube::CustomResourceExt>::shortnames()
            }
        }
    };
}
