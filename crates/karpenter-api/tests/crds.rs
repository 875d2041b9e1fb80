//! The checked-in CRDs under `charts/*/crds/` must equal what the types generate.
//!
//! Regenerate with: `UPDATE_CRDS=1 cargo test -p karpenter-api --test crds`

use std::path::{Path, PathBuf};

use karpenter_api::ProviderLabels;
use karpenter_api::crd::{self, render_yaml};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (chart CRD directory, provider, which generated CRDs go there).
fn expected() -> Vec<(PathBuf, String, String)> {
    let root = repo_root();
    let mut out = Vec::new();
    for c in crd::crds(&ProviderLabels::aws()) {
        out.push((root.join("charts/karpenter/crds"), crd::file_name(&c), render_yaml(&c)));
    }
    for c in crd::node_class_crds(&ProviderLabels::kwok()) {
        out.push((root.join("charts/karpenter-kwok/crds"), crd::file_name(&c), render_yaml(&c)));
    }
    out
}

fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}:\n  checked in: {x}\n  generated:  {y}", i + 1);
        }
    }
    format!("length differs: checked in {} lines, generated {} lines", a.lines().count(), b.lines().count())
}

#[test]
fn checked_in_crds_are_up_to_date() {
    let update = std::env::var_os("UPDATE_CRDS").is_some();
    let mut stale = Vec::new();
    for (dir, name, yaml) in expected() {
        let path = dir.join(&name);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &yaml).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(existing) if existing == yaml => {}
            Ok(existing) => stale.push(format!("{}: {}", path.display(), first_difference(&existing, &yaml))),
            Err(e) => stale.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        stale.is_empty(),
        "checked-in CRDs differ from the generated ones:\n{}\n\nregenerate with: UPDATE_CRDS=1 cargo test -p karpenter-api --test crds",
        stale.join("\n")
    );
}

#[test]
fn every_kind_has_a_crd() {
    let aws: Vec<String> = crd::crds(&ProviderLabels::aws()).iter().map(crd::file_name).collect();
    assert!(aws.contains(&"karpenter.sh_nodepools.yaml".to_string()), "{aws:?}");
    assert!(aws.contains(&"karpenter.sh_nodeclaims.yaml".to_string()), "{aws:?}");
    let kwok: Vec<String> = crd::node_class_crds(&ProviderLabels::kwok()).iter().map(crd::file_name).collect();
    assert_eq!(kwok, vec!["karpenter.kwok.sh_kwoknodeclasses.yaml".to_string()]);
}

#[test]
fn provider_rules_follow_the_label_set() {
    let aws = render_yaml(&crd::generate::<karpenter_api::NodePool>(&ProviderLabels::aws()));
    let kwok = render_yaml(&crd::generate::<karpenter_api::NodePool>(&ProviderLabels::kwok()));
    let aws_domain = r#"label domain "karpenter.k8s.aws" is restricted"#;
    let kwok_domain = r#"label domain "karpenter.kwok.sh" is restricted"#;
    assert!(aws.contains(aws_domain) && !aws.contains(kwok_domain));
    assert!(kwok.contains(kwok_domain) && !kwok.contains(aws_domain));
}

#[test]
fn patches_apply_cleanly() {
    for p in [ProviderLabels::aws(), ProviderLabels::kwok()] {
        crd::try_generate::<karpenter_api::NodePool>(&p).unwrap();
        crd::try_generate::<karpenter_api::NodeClaim>(&p).unwrap();
        crd::try_generate::<karpenter_api::KWOKNodeClass>(&p).unwrap();
    }
}
