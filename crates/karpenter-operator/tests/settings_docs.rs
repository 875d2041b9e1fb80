//! docs/settings.md is generated from the settings definitions; this test fails when they drift apart.
//! Regenerate with `UPDATE_DOCS=1 cargo test -p karpenter-operator --test settings_docs`.

use std::path::PathBuf;

#[test]
fn settings_reference_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/settings.md");
    let expected = karpenter_operator::settings::reference_markdown();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "docs/settings.md is out of date; run UPDATE_DOCS=1 cargo test -p karpenter-operator --test settings_docs"
    );
}
