//! docs/metrics.md is generated from the metrics registry; this test fails when they drift apart.
//! Regenerate with `UPDATE_DOCS=1 cargo test -p karpenter-operator --test metrics_docs`.

use std::path::PathBuf;

#[test]
fn metrics_reference_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/metrics.md");
    let expected = karpenter_operator::metrics::reference_markdown();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "docs/metrics.md is out of date; run UPDATE_DOCS=1 cargo test -p karpenter-operator --test metrics_docs"
    );
}
