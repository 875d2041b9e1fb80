//! Replays the checked-in seed corpus of the `sqs_message` fuzz target on stable, so CI checks the parser's
//! invariants without libFuzzer.

use std::collections::BTreeSet;
use std::path::PathBuf;

use karpenter_aws::interruption::{Kind, parse};

fn seeds() -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/sqs_message");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|f| {
            let data = std::fs::read(&f).unwrap_or_else(|e| panic!("reading {}: {e}", f.display()));
            (f, data)
        })
        .collect()
}

#[test]
fn sqs_message_corpus_replays() {
    let seeds = seeds();
    assert!(seeds.len() >= 15, "expected at least 15 seeds, found {}", seeds.len());
    for (_, data) in &seeds {
        karpenter_aws::fuzzing::sqs_message(data);
    }
}

/// The corpus covers every kind and the error paths.
#[test]
fn sqs_message_corpus_covers_every_kind_and_errors() {
    let mut kinds = BTreeSet::new();
    let mut errors = 0;
    for (_, data) in seeds() {
        match parse(&data) {
            Ok(m) => {
                kinds.insert(m.kind);
            }
            Err(_) => errors += 1,
        }
    }
    let all: BTreeSet<Kind> = [
        Kind::SpotInterrupted,
        Kind::RebalanceRecommendation,
        Kind::ScheduledChange,
        Kind::InstanceStopped,
        Kind::InstanceTerminated,
        Kind::CapacityReservationInterrupted,
        Kind::NoOp,
    ]
    .into();
    assert_eq!(kinds, all);
    assert!(errors >= 6, "{errors} malformed seeds");
}

/// The `manifest` target validates EC2NodeClasses through this crate's API: its seeds replay the same way here.
#[test]
fn manifest_corpus_replays_with_the_ec2_node_class_api() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/manifest");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= 20, "expected the manifest seed corpus, found {} files", files.len());
    let apis = karpenter_aws::api::node_class_apis();
    let label_sets = [karpenter_aws::labels::provider_labels(), karpenter_api::fuzzing::neutral_labels()];
    for f in files {
        let data = std::fs::read(&f).unwrap_or_else(|e| panic!("reading {}: {e}", f.display()));
        karpenter_api::fuzzing::manifest_with(&data, &apis, &label_sets);
    }
}
