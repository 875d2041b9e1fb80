//! Replays the checked-in cargo-fuzz seed corpus on stable so CI checks the fuzz invariants without libFuzzer.

use std::path::PathBuf;

#[test]
fn quantity_corpus_replays() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/quantity");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= 30, "expected a seed corpus of at least 30 files, found {}", files.len());
    for file in files {
        let data = std::fs::read(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        karpenter_requirements::fuzzing::quantity(&data);
    }
}
