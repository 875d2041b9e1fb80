//! The real kubelet as a judge of what node bootstrap hands it: `kubelet-check.sh` of the shared k8s folder
//! (`$KARPENTER_K8S_DIR`, else `../shared/k8s` beside the workspace) runs the kubelet v1.32.6 on a set of flags
//! and a `KubeletConfiguration` file and says whether it would start, with the kubelet's own message when not.
//!
//! ```no_run
//! use karpenter_testing::kubelet_check::{KubeletCheck, Verdict};
//! // None means "skipped" (the reason is printed); under CI=true a missing script fails the test.
//! let Some(kubelet) = KubeletCheck::require() else { return };
//! let verdict = kubelet.check(None, &["--eviction-hard=memory.available<10%".to_string()]).unwrap();
//! assert_eq!(verdict, Verdict::Accepted);
//! ```

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::in_ci;

/// What the kubelet said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It parsed and validated everything and would start.
    Accepted,
    /// It refused, with its message.
    Refused(String),
}

/// A runner of `kubelet-check.sh`.
#[derive(Clone, Debug)]
pub struct KubeletCheck {
    script: PathBuf,
}

impl KubeletCheck {
    /// The script in the shared k8s folder, when it is there.
    ///
    /// # Errors
    /// Names the path looked at when the script is missing.
    pub fn find() -> Result<Self, String> {
        let dir = match std::env::var_os("KARPENTER_K8S_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/k8s"),
        };
        let script = dir.join("kubelet-check.sh");
        if script.is_file() { Ok(Self { script }) } else { Err(format!("{} not found", script.display())) }
    }

    /// [`find`](Self::find) for a test: `None` (with the reason on stderr) when the script is missing.
    ///
    /// # Panics
    /// When the script is missing and `CI=true`: CI must run the judge.
    pub fn require() -> Option<Self> {
        match Self::find() {
            Ok(k) => Some(k),
            Err(e) if !in_ci() => {
                eprintln!("skipped: the kubelet judge is not available here: {e} (under CI=true this fails)");
                None
            }
            Err(e) => panic!("kubelet-check: {e}"),
        }
    }

    /// Runs the kubelet on `flags` and, when given, `config` written as its configuration file.
    ///
    /// # Errors
    /// When the script could not run or stopped in an unexpected way (its exit 2), with its output.
    pub fn check(&self, config: Option<&serde_json::Value>, flags: &[String]) -> Result<Verdict, String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let mut cmd = Command::new("bash");
        cmd.arg(&self.script);
        let file = match config {
            Some(c) => {
                let path = std::env::temp_dir().join(format!(
                    "kubelet-check-{}-{}.json",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::write(&path, c.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
                cmd.arg("--config").arg(&path);
                Some(path)
            }
            None => None,
        };
        let out = cmd.args(flags).output().map_err(|e| format!("{}: {e}", self.script.display()));
        if let Some(path) = file {
            let _ = std::fs::remove_file(path);
        }
        let out = out?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        match out.status.code() {
            Some(0) => Ok(Verdict::Accepted),
            Some(1) => Ok(Verdict::Refused(stderr)),
            code => Err(format!("kubelet-check exited {code:?}: {stderr}")),
        }
    }
}
