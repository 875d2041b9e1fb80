//! The table of docs/metrics.md is generated from the metrics declaration (`metrics::reference_markdown`) between
//! two markers; the prose around it is written by hand and kept. This test fails when the table drifts from the
//! declaration. Regenerate with `UPDATE_DOCS=1 cargo test -p karpenter-operator --test metrics_docs`.

use std::path::PathBuf;

const BEGIN: &str = "<!-- BEGIN GENERATED from crates/karpenter-runtime/src/metrics.rs (Metrics::descriptors); \
                     do not edit. Regenerate: UPDATE_DOCS=1 cargo test -p karpenter-operator --test metrics_docs -->";
const END: &str = "<!-- END GENERATED -->";

/// `doc` with the text between the markers replaced by `generated`; an error naming what is missing when the
/// markers are not there once each, in order.
fn splice(doc: &str, generated: &str) -> Result<String, String> {
    let begin = doc.find(BEGIN).ok_or_else(|| format!("no begin marker: {BEGIN}"))?;
    let end = doc.find(END).ok_or_else(|| format!("no end marker: {END}"))?;
    if end < begin || doc.matches(BEGIN).count() != 1 || doc.matches(END).count() != 1 {
        return Err("the markers must appear once each, begin before end".into());
    }
    Ok(format!("{}{BEGIN}\n\n{generated}\n{END}{}", &doc[..begin], &doc[end + END.len()..]))
}

#[test]
fn metrics_reference_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/metrics.md");
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    let expected =
        splice(&actual, &karpenter_operator::metrics::reference_markdown(&karpenter_disruption::Reason::CODES))
            .unwrap_or_else(|e| panic!("docs/metrics.md: {e}"));
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    assert!(
        actual == expected,
        "docs/metrics.md is out of date; run UPDATE_DOCS=1 cargo test -p karpenter-operator --test metrics_docs"
    );
}

#[test]
fn splicing_keeps_the_prose_and_replaces_only_the_table() {
    let doc = format!("# T\n\nintro\n\n{BEGIN}\n\nold table\n{END}\n\n## More\n\nprose\n");
    let out = splice(&doc, "| new |\n").expect("markers");
    assert_eq!(out, format!("# T\n\nintro\n\n{BEGIN}\n\n| new |\n\n{END}\n\n## More\n\nprose\n"));
    assert_eq!(splice(&out, "| new |\n").as_ref(), Ok(&out), "idempotent");
    assert!(splice("no markers", "x").unwrap_err().contains("begin marker"));
    assert!(splice(&format!("{END} {BEGIN}"), "x").is_err());
}
