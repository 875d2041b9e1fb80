//! The metrics reference, `docs/metrics.md`: its generated part lists the core's families (karpenter-runtime)
//! and what each provider of the table adds (the families its crate declares, the status-condition families of
//! its node-class kinds registered with status metrics), composed here because the binary is where the providers
//! meet. Drift-tested below; regenerate with
//! `UPDATE_DOCS=1 cargo test -p karpenter-controller --bin karpenter-controller metrics_reference`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use karpenter_operator::metrics::{MetricDescriptor, ProviderFamily, ProviderReference, reference_markdown};

use crate::providers::PROVIDERS;

/// The families a provider's crate declares itself, by provider name (its `--provider` value); a provider not
/// listed declares none.
const OWN_FAMILIES: &[(&str, &[ProviderFamily])] = &[("aws", &karpenter_aws::metrics::FAMILIES)];

const BEGIN: &str = "<!-- BEGIN GENERATED from Metrics::descriptors (crates/karpenter-runtime/src/metrics.rs) and \
                     the providers' families (bins/karpenter-controller/src/metrics_reference.rs); do not edit. \
                     Regenerate: UPDATE_DOCS=1 cargo test -p karpenter-controller --bin karpenter-controller \
                     metrics_reference -->";
const END: &str = "<!-- END GENERATED -->";

/// (name, own families, node-class kinds with status metrics) of every provider of the table.
fn providers() -> Vec<(String, &'static [ProviderFamily], Vec<String>)> {
    PROVIDERS
        .iter()
        .map(|entry| {
            let name = (entry.labels)().name;
            let own = OWN_FAMILIES.iter().find(|(n, _)| *n == name).map_or(&[][..], |(_, f)| *f);
            let kinds =
                (entry.node_classes)().into_iter().filter(|r| r.status_metrics).map(|r| r.api_resource.kind).collect();
            (name, own, kinds)
        })
        .collect()
}

/// The generated part of the reference.
fn generated() -> String {
    let providers = providers();
    let references: Vec<ProviderReference<'_>> = providers
        .iter()
        .map(|(provider, families, status_kinds)| ProviderReference { provider, families, status_kinds })
        .collect();
    reference_markdown(&karpenter_disruption::Reason::CODES, &references)
}

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

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn metrics_reference_is_current() {
    let path = root().join("docs/metrics.md");
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    let expected = splice(&actual, &generated()).unwrap_or_else(|e| panic!("docs/metrics.md: {e}"));
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    assert!(
        actual == expected,
        "docs/metrics.md is out of date; run UPDATE_DOCS=1 cargo test -p karpenter-controller --bin \
         karpenter-controller metrics_reference"
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

/// Every family listed under `[provider]` in upstream's list (`metrics_upstream/v1.15.txt`: upstream's AWS
/// provider's families) is added by a provider of the table with exactly upstream's type and labels, and every
/// family a provider adds is upstream's.
#[test]
fn providers_add_upstreams_provider_families() {
    let list = std::fs::read_to_string(root().join("crates/karpenter-runtime/src/metrics_upstream/v1.15.txt"))
        .expect("upstream's list");
    let section = list.split_once("\n[provider]\n").map(|(_, rest)| rest).expect("a [provider] section");
    let upstream: BTreeMap<String, (String, BTreeSet<String>)> = section
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with('['))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            let [name, kind, labels] = parts.as_slice() else { panic!("malformed line {l:?}") };
            let labels = labels.split(',').filter(|l| *l != "-").map(str::to_owned).collect();
            ((*name).to_owned(), ((*kind).to_owned(), labels))
        })
        .collect();
    assert!(upstream.len() >= 14, "the [provider] section: {upstream:?}");
    let describe = |d: MetricDescriptor| {
        (d.name, (d.kind.as_str().to_owned(), d.labels.iter().map(|l| (*l).to_owned()).collect()))
    };
    let added: BTreeMap<String, (String, BTreeSet<String>)> = providers()
        .iter()
        .flat_map(|(_, families, kinds)| {
            let status = kinds
                .iter()
                .flat_map(|k| karpenter_operator::metrics::StatusConditionMetrics::node_class_descriptors(k));
            families.iter().map(ProviderFamily::descriptor).chain(status).collect::<Vec<_>>()
        })
        .map(describe)
        .collect();
    assert_eq!(added, upstream, "the families the providers add (left) against upstream's (right)");
}

/// Each provider named in [`OWN_FAMILIES`] is a provider of the table.
#[test]
fn own_families_name_providers_of_the_table() {
    let names: Vec<String> = PROVIDERS.iter().map(|e| (e.labels)().name).collect();
    for (provider, _) in OWN_FAMILIES {
        assert!(names.iter().any(|n| n == provider), "{provider} is not a provider of the table: {names:?}");
    }
}
