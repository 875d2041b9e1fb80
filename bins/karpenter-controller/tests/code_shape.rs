//! The shape of the code, held as a test: no production function over 120 lines without a comment saying why it
//! must be long (rooms with one job each). The measure is `tools/longest_fns.py` (`tools/longest_fns.py . 10`
//! prints the ten longest); no import circles between the files of a crate (`tools/import_circles.py`).

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

/// The crates whose files import one another in one direction only (no file reaches itself through imports),
/// measured by `tools/import_circles.py` (`--edges` names the imports that close a circle). A circle means two
/// rooms each need the other: move the shared item to the lower one (or a module of its own) instead.
/// Each entry is a crate's directory under the workspace root. karpenter-api still holds a circle and joins this
/// list once it is broken.
const CRATES_WITHOUT_IMPORT_CIRCLES: [&str; 10] = [
    "crates/karpenter-aws",
    "crates/karpenter-cloudprovider",
    "crates/karpenter-disruption",
    "crates/karpenter-kwok",
    "crates/karpenter-operator",
    "crates/karpenter-requirements",
    "crates/karpenter-runtime",
    "crates/karpenter-scheduler",
    "crates/karpenter-testing",
    "examples/toy-cloud",
];

#[test]
fn no_import_circles_between_the_files_of_a_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut circles = String::new();
    for crate_dir in CRATES_WITHOUT_IMPORT_CIRCLES {
        let out = Command::new("python3")
            .arg(root.join("tools/import_circles.py"))
            .arg(root.join(crate_dir))
            .arg("--edges")
            .output()
            .expect("python3 runs tools/import_circles.py");
        let listed = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{crate_dir}: {listed}{}", String::from_utf8_lossy(&out.stderr));
        // The first line counts files, arrows and circles; each circle follows on a line of its own.
        assert!(
            listed.lines().next().is_some_and(|l| l.ends_with(" circles")),
            "{crate_dir}: unexpected output {listed}"
        );
        if listed.lines().any(|l| l.starts_with("circle of ")) {
            circles.push_str(&format!("{crate_dir}: {listed}"));
        }
    }
    assert!(
        circles.is_empty(),
        "files that import each other (break each circle by moving the shared item down):\n{circles}"
    );
}
