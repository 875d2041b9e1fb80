#![no_main]
//! Fuzz target: manifest loading (YAML and JSON, multi-document, Lists) and validation of every Karpenter object,
//! the AWS provider's EC2NodeClass included, with the AWS label set and a neutral one. The work lives in
//! `karpenter_api::fuzzing::manifest_with` so the seed corpus can be replayed on stable by
//! `crates/karpenter-api/tests/fuzz_corpus.rs`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let label_sets = [karpenter_aws::labels::provider_labels(), karpenter_api::fuzzing::neutral_labels()];
    karpenter_api::fuzzing::manifest_with(data, &karpenter_aws::api::node_class_apis(), &label_sets);
});
