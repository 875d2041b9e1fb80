//! Records what the binary was built from, for `version` and the `karpenter_build_info` metric (src/build.rs):
//!
//! - `KARPENTER_GIT_COMMIT`: the environment variable of the same name when set (the Dockerfile passes it as a
//!   build argument: the image's build context has no `.git`), else `git rev-parse HEAD` of the checkout, else
//!   `unknown` (a source tarball, no git installed).
//! - `KARPENTER_RUSTC_VERSION`: the compiler's version (`rustc --version`), as upstream reports its Go version.
//!
//! Cargo reruns this script when the variable changes or when the checkout's HEAD or the branch it points at
//! moves, not on every build: watching the whole `.git` directory would rerun it on every `git add`.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=KARPENTER_GIT_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    let commit = match std::env::var("KARPENTER_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_owned(),
        _ => {
            watch_git_head();
            git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env=KARPENTER_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=KARPENTER_RUSTC_VERSION={}", rustc_version().unwrap_or_else(|| "unknown".to_owned()));
}

/// Asks Cargo to rerun this script when HEAD moves: the HEAD file (a checkout of another branch or a detached
/// commit) and, when HEAD names a branch, that branch's ref file, or `packed-refs` when the ref is packed (a
/// missing file would make Cargo rerun the script on every build). `--git-path` resolves worktrees too.
fn watch_git_head() {
    let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) else { return };
    println!("cargo:rerun-if-changed={}", absolute(&head).display());
    let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) else { return };
    for candidate in [branch.as_str(), "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", candidate]).map(|p| absolute(&p))
            && path.is_file()
        {
            println!("cargo:rerun-if-changed={}", path.display());
            return;
        }
    }
}

/// `git` paths are relative to the directory it ran in: this crate's.
fn absolute(path: &str) -> PathBuf {
    let path = PathBuf::from(path);
    if path.is_absolute() {
        return path;
    }
    std::env::var_os("CARGO_MANIFEST_DIR").map_or(path.clone(), |dir| PathBuf::from(dir).join(path))
}

/// The trimmed standard output of a successful `git` command run in this crate's directory.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// `1.95.0` from `rustc 1.95.0 (59807616e 2026-04-14)`.
fn rustc_version() -> Option<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc).arg("--version").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace().nth(1).map(str::to_owned)
}
