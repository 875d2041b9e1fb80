//! Replays the checked-in cargo-fuzz seed corpus of the `manifest` target on stable, so CI checks that loading
//! and validating arbitrary manifests never panics without needing libFuzzer.

use std::path::PathBuf;

#[test]
fn manifest_corpus_replays() {
    for data in seeds("manifest", 20) {
        karpenter_api::fuzzing::manifest(&data);
    }
}

/// The corpus is meant to exercise both paths: some seeds load cleanly, others fail to load.
#[test]
fn manifest_corpus_mixes_valid_and_malformed_seeds() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/manifest");
    let (loaded, errors) = karpenter_api::load_paths([&dir]);
    assert!(loaded.len() >= 20, "{} objects loaded", loaded.len());
    assert!(errors.len() >= 5, "{} load errors", errors.len());
}

/// The `lean` target's seeds: objects with and without `managedFields`, malformed ones, other kinds.
#[test]
fn lean_corpus_replays() {
    for data in seeds("lean", 10) {
        karpenter_api::fuzzing::lean(&data);
    }
}

/// The seed files of the fuzz target `target`, in name order; at least `min` of them.
fn seeds(target: &str, min: usize) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= min, "expected a seed corpus of at least {min} files, found {}", files.len());
    files.iter().map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("reading {}: {e}", f.display()))).collect()
}
