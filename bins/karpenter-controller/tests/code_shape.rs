//! The shape of the code, held as a test: no production function over 120 lines without a comment saying why it
//! must be long (rooms with one job each). The measure is `tools/longest_fns.py` (`tools/longest_fns.py . 10`
//! prints the ten longest).

use std::path::Path;
use std::process::Command;

#[test]
fn every_function_over_120_lines_says_why_it_is_long() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("python3")
        .arg(root.join("tools/longest_fns.py"))
        .arg(&root)
        .args(["--unexplained", "120"])
        .output()
        .expect("python3 runs tools/longest_fns.py");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "split these functions into steps with one job each, or say above each why it must stay long \
         (a comment with the words \"long because\"):\n{listed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
