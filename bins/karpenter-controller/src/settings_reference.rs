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

    /// The settings accepted for compatibility only are exactly those of the one list, and both the reference
    /// and `run --help` say so, with why, for each of them and for no other.
    #[test]
    fn settings_without_effect_are_the_listed_ones_and_say_so() {
        use clap::CommandFactory;
        use karpenter_api::settings::{COMPATIBILITY_NOTE, COMPATIBILITY_ONLY};
        use karpenter_aws::settings::AwsSettings;
        use karpenter_operator::CoreSettings;
        use karpenter_operator::settings::setting_docs;

        let listed: Vec<&str> = COMPATIBILITY_ONLY.iter().map(|(env, _)| *env).collect();
        assert_eq!(listed, ["MEMORY_LIMIT"], "Go's GC soft limit has no counterpart here");
        let rows: Vec<_> = setting_docs::<CoreSettings>().into_iter().chain(setting_docs::<AwsSettings>()).collect();
        let noted: Vec<&str> =
            rows.iter().filter(|r| r.help.contains(COMPATIBILITY_NOTE)).map(|r| r.env.as_str()).collect();
        assert_eq!(noted, listed, "the reference notes exactly the listed settings");
        // `run --help`, with clap's line wrapping undone.
        let mut command = crate::Cli::command();
        let run = command.find_subcommand_mut("run").expect("run");
        let help = run.render_long_help().to_string().split_whitespace().collect::<Vec<_>>().join(" ");
        for (env, why) in COMPATIBILITY_ONLY {
            let row = rows.iter().find(|r| r.env == *env).expect("a listed setting exists");
            assert!(row.help.ends_with(&format!("{COMPATIBILITY_NOTE}: {why}")), "{}", row.help);
            let note = format!("{COMPATIBILITY_NOTE}: {why}").split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(help.contains(&note), "run --help lacks the note of {env}");
            assert!(help.contains(&format!("env: {env}=")), "run --help lacks {env}");
        }
        assert_eq!(help.matches(COMPATIBILITY_NOTE).count(), listed.len(), "run --help notes only the listed settings");
    }
}
