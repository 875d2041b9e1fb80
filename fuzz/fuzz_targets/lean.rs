#![no_main]
//! Fuzz target: decoding watched objects without `managedFields` (`karpenter_api::lean::Lean`) agrees with the
//! full decode. The invariants live in `karpenter_api::fuzzing::lean` so the seed corpus can be replayed on stable
//! by `crates/karpenter-api/tests/fuzz_corpus.rs`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    karpenter_api::fuzzing::lean(data);
});
