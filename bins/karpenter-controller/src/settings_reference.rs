//! The settings reference, `docs/settings.md`: the core settings (karpenter-operator) and the AWS provider's
//! (karpenter-aws), composed here because the binary is where both become flags of `run`. Rendered from the
//! clap definitions themselves and drift-tested below, so the docs cannot disagree with the code.
//! Regenerate with `UPDATE_DOCS=1 cargo test -p karpenter-controller --bin karpenter-controller settings_reference`.

use karpenter_aws::settings::AwsSettings;
use karpenter_operator::CoreSettings;
use karpenter_operator::settings::{reference_section, setting_docs};

/// The whole reference as checked in.
pub(crate) fn reference_markdown() -> String {
    let mut out = String::from(
        "# Settings\n\n\
         <!-- Generated from the clap definitions of CoreSettings (karpenter-operator) and AwsSettings \
         (karpenter-aws); do not edit. Regenerate: UPDATE_DOCS=1 cargo test -p karpenter-controller \
         --bin karpenter-controller settings_reference -->\n\n\
         Every setting is an environment variable and a flag of `karpenter-controller run`; the environment \
         gives the default and a flag overrides it. Names and defaults follow upstream Karpenter, so existing \
         Helm values and environments carry over. Booleans (and feature-gate values) are read as upstream's Go \
         code reads them: `true`/`false`, `1`/`0`, `t`/`f`, `TRUE`/`FALSE`, `True`/`False`.\n",
    );
    out.push_str(&reference_section("Core", &setting_docs::<CoreSettings>()));
    out.push_str(&reference_section("AWS (with `--provider aws`)", &setting_docs::<AwsSettings>()));
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    #[test]
    fn settings_reference_is_current() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/settings.md");
        let expected = super::reference_markdown();
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(&path, &expected).unwrap();
            return;
        }
        let actual = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            actual == expected,
            "docs/settings.md is out of date; run UPDATE_DOCS=1 cargo test -p karpenter-controller \
             --bin karpenter-controller settings_reference"
        );
        for section in
            ["\n## Core\n", "\n## AWS (with `--provider aws`)\n", "| `CLUSTER_NAME` |", "| `FEATURE_GATES` |"]
        {
            assert!(expected.contains(section), "{section}");
        }
    }
}
