//! What this binary was built from, recorded by build.rs: `version` prints it, `--version` and the
//! `karpenter_build_info` metric carry the commit, and every log line of `run` names it.

use serde::Serialize;

/// The git commit this binary was built from: build.rs takes `KARPENTER_GIT_COMMIT` (the Dockerfile's build
/// argument), else `git rev-parse HEAD`, else `unknown`.
pub const COMMIT: &str = env!("KARPENTER_GIT_COMMIT");

/// The version of the compiler that built this binary (upstream reports its Go version in the same places).
pub const RUSTC_VERSION: &str = env!("KARPENTER_RUSTC_VERSION");

/// `clap`'s `--version` line: the version and the commit, as `version` prints them.
pub const VERSION_LINE: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("KARPENTER_GIT_COMMIT"), ")");

/// `version -o json|yaml`: kubectl's field names where they mean the same (`gitCommit`, `platform`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionInfo {
    /// The crate version, e.g. `0.1.0`.
    pub version: &'static str,
    /// [`COMMIT`].
    pub git_commit: &'static str,
    /// [`RUSTC_VERSION`].
    pub rust_version: &'static str,
    /// `os/arch` of the build target, e.g. `linux/x86_64`.
    pub platform: String,
}

impl VersionInfo {
    pub fn current() -> Self {
        VersionInfo {
            version: env!("CARGO_PKG_VERSION"),
            git_commit: COMMIT,
            rust_version: RUSTC_VERSION,
            platform: format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        }
    }

    /// The human form: `karpenter-controller 0.1.0 (commit 1a2b3c…)`.
    pub fn line(&self) -> String {
        format!("karpenter-controller {} (commit {})\n", self.version, self.git_commit)
    }
}
