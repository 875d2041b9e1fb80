//! Entry points for fuzz targets (`fuzz/fuzz_targets/`) and their corpus replay test. Not a stable API.

use crate::labels::ProviderLabels;
use crate::loader;
use crate::node_class_api::NodeClassApis;
use crate::validation::ValidationContext;

/// A label vocabulary that names no real provider but has every part a provider's set has (well-known keys, a
/// restricted domain, a key with known values), so validation takes each of its label-key paths.
pub fn neutral_labels() -> ProviderLabels {
    ProviderLabels::new("fuzz")
        .with_restricted_domain("fuzz.example.com")
        .with_well_known(["fuzz.example.com/instance-family", "fuzz.example.com/instance-size"])
        .with_known_values("fuzz.example.com/tenancy", ["shared", "dedicated"])
}

/// Loads arbitrary bytes as a manifest (both as YAML and as JSON) and validates every core Karpenter object with
/// [`neutral_labels`]. Must never panic.
pub fn manifest(data: &[u8]) {
    manifest_with(data, &NodeClassApis::none(), &[neutral_labels()]);
}

/// [`manifest`], validating the node classes of `node_classes` too and every object once per label set of
/// `label_sets` (the fuzz target passes the providers').
pub fn manifest_with(data: &[u8], node_classes: &NodeClassApis, label_sets: &[ProviderLabels]) {
    let text = String::from_utf8_lossy(data);
    let contexts: Vec<ValidationContext> = label_sets.iter().cloned().map(ValidationContext::new).collect();
    for origin in ["fuzz.yaml", "fuzz.json"] {
        let (loaded, errors) = loader::load_str_all(&text, origin);
        streamed_agrees(&text, origin, &loaded, &errors);
        for e in &errors {
            let _ = e.to_string();
        }
        for l in &loaded {
            let _ = l.describe();
            for ctx in &contexts {
                if let Some(violations) = l.object.validate_with(ctx, node_classes) {
                    for v in violations.iter() {
                        let _ = v.to_string();
                    }
                }
            }
        }
    }
}

/// Where the block-wise reader of large Lists takes `text`, it must load exactly what the whole-text loader does:
/// the same objects and the same errors, in the same order.
pub fn streamed_agrees(text: &str, origin: &str, loaded: &[loader::Loaded], errors: &[loader::LoadError]) {
    let Some((fast, fast_errors)) = loader::load_streamed(text.as_bytes(), origin, &loader::LoadOptions::default())
    else {
        return;
    };
    assert_eq!(format!("{fast:?}"), format!("{loaded:?}"), "{origin}: the streamed objects differ");
    let messages = |e: &[loader::LoadError]| e.iter().map(ToString::to_string).collect::<Vec<_>>();
    assert_eq!(messages(&fast_errors), messages(errors), "{origin}: the streamed errors differ");
}

/// Decodes arbitrary bytes as watched objects with and without [`crate::lean::Lean`]. Must never panic; where the
/// full decode succeeds the lean one must too, and equal it but for `metadata.managedFields`.
pub fn lean(data: &[u8]) {
    fn check<K>(data: &[u8])
    where
        K: serde::de::DeserializeOwned + kube::Resource + PartialEq + std::fmt::Debug,
    {
        let lean = serde_json::from_slice::<crate::lean::Lean<K>>(data);
        if let Ok(mut full) = serde_json::from_slice::<K>(data) {
            full.meta_mut().managed_fields = None;
            match lean {
                Ok(lean) => assert_eq!(lean.0, full, "the lean decode differs from the full one"),
                Err(e) => panic!("the full decode succeeded, the lean one failed: {e}"),
            }
        }
    }
    check::<k8s_openapi::api::core::v1::Pod>(data);
    check::<k8s_openapi::api::core::v1::Node>(data);
    check::<crate::NodeClaim>(data);
    check::<crate::NodePool>(data);
}
