#![no_main]
//! Fuzz target: Kubernetes quantity parsing, canonical formatting and checked arithmetic.
//! The invariants live in `karpenter_requirements::fuzzing::quantity` so the seed corpus can be replayed on
//! stable by `crates/karpenter-requirements/tests/fuzz_corpus.rs`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    karpenter_requirements::fuzzing::quantity(data);
});
