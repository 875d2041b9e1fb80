#![no_main]
//! Fuzz target: parsing of interruption-queue (SQS) messages. The work lives in
//! `karpenter_aws::fuzzing::sqs_message` so the seed corpus can be replayed on stable by
//! `crates/karpenter-aws/tests/fuzz_corpus.rs`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    karpenter_aws::fuzzing::sqs_message(data);
});
