//! The manifest inputs of `simulate` and `validate`, read as kubectl reads `-f`: files, directories (walked
//! recursively, symlinked directories followed) and `-` for standard input.

use std::io::Read;
use std::path::{Path, PathBuf};

use karpenter_api::loader::{self, LoadError, Loaded};

/// The name standard input is reported under.
pub const STDIN_NAME: &str = "<stdin>";

/// Objects and load errors, as [`loader::load_paths`] returns them.
pub type Load = (Vec<Loaded>, Vec<LoadError>);

fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Loads `paths` in order: `-` reads standard input (once: a second `-` is an error), every other run of paths
/// goes through `load_files`. Also returns how many files were read (standard input counts as one).
pub fn load(paths: &[PathBuf], load_files: impl Fn(&[PathBuf]) -> Load) -> (Vec<Loaded>, Vec<LoadError>, usize) {
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    let mut files = 0;
    let mut stdin_read = false;
    for run in paths.chunk_by(|a, b| is_stdin(a) == is_stdin(b)) {
        if !is_stdin(&run[0]) {
            files += loader::manifest_files(run).0.len();
            let (o, e) = load_files(run);
            objects.extend(o);
            errors.extend(e);
            continue;
        }
        for _ in run {
            if stdin_read {
                errors.push(LoadError::Syntax {
                    file: STDIN_NAME.to_owned(),
                    line: None,
                    message: "`-` (standard input) given more than once; it can be read only once".to_owned(),
                });
                continue;
            }
            stdin_read = true;
            files += 1;
            let mut bytes = Vec::new();
            if let Err(source) = std::io::stdin().lock().read_to_end(&mut bytes) {
                errors.push(LoadError::Io { path: PathBuf::from(STDIN_NAME), source });
                continue;
            }
            match loader::decode_text(bytes, STDIN_NAME) {
                Ok(text) => {
                    let (o, e) = loader::load_str_all(&text, STDIN_NAME);
                    objects.extend(o);
                    errors.extend(e);
                }
                Err(e) => errors.push(e),
            }
        }
    }
    (objects, errors, files)
}

/// `1 file`, `2 files`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Whether an error comes from writing to a closed pipe (`| head -1`): the reader has gone, so the command ends
/// quietly.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// An error and its causes on one line, each said once: a cause whose text the message so far already holds (a
/// library error that prints its source inside its own message) is not repeated.
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
