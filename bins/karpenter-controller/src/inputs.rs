//! The manifest inputs of `simulate` and `validate`, read as kubectl reads `-f`: files, directories (walked
//! recursively, symlinked directories followed) and `-` for standard input.
//!
//! One habit is ours: a file found in a directory walk that holds no Kubernetes object at all (no document with
//! an `apiVersion` or a `kind`: the kwok instance-type JSON and AWS catalogues that sit beside the manifests in
//! examples/simulate, a Helm values file) is skipped with a warning naming it and why, where kubectl would fail
//! the whole command. A file named explicitly (or standard input) that is not a manifest is still an error, in
//! one line that says so, and a manifest with a bad document is an error naming file, document and field.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use karpenter_api::loader::{self, LoadError, Loaded};
use serde_json::Value;

/// The name standard input is reported under.
pub const STDIN_NAME: &str = "<stdin>";

/// Objects and load errors, as [`loader::load_paths`] returns them.
pub type Load = (Vec<Loaded>, Vec<LoadError>);

/// What [`load`] read.
#[derive(Debug, Default)]
pub struct Input {
    pub objects: Vec<Loaded>,
    pub errors: Vec<LoadError>,
    /// How many files were read (standard input counts as one; skipped files do not).
    pub files: usize,
    /// One `warning: FILE skipped: WHY` per file of a directory walk that is not a manifest.
    pub skipped: Vec<String>,
}

fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Loads `paths` in order: `-` reads standard input (once: a second `-` is an error), every other run of paths
/// goes through `load_files`. Files of a directory walk that hold no Kubernetes object are skipped (see the
/// module docs).
pub fn load(paths: &[PathBuf], load_files: impl Fn(&[PathBuf]) -> Load) -> Input {
    let mut input = Input::default();
    let mut stdin_read = false;
    for run in paths.chunk_by(|a, b| is_stdin(a) == is_stdin(b)) {
        if !is_stdin(&run[0]) {
            let files = loader::manifest_files(run).0;
            let (objects, errors) = load_files(run);
            let (errors, skipped) = sort_out_non_manifests(run, &files, &objects, errors);
            input.files += files.len() - skipped.len();
            input.skipped.extend(skipped);
            input.objects.extend(objects);
            input.errors.extend(errors);
            continue;
        }
        for _ in run {
            if stdin_read {
                input.errors.push(LoadError::Syntax {
                    file: STDIN_NAME.to_owned(),
                    line: None,
                    message: "`-` (standard input) given more than once; it can be read only once".to_owned(),
                });
                continue;
            }
            stdin_read = true;
            input.files += 1;
            let bytes = match stdin_bytes() {
                Ok(bytes) => bytes.to_vec(),
                Err(source) => {
                    input.errors.push(LoadError::Io { path: PathBuf::from(STDIN_NAME), source });
                    continue;
                }
            };
            match loader::decode_text(bytes, STDIN_NAME) {
                Ok(text) => {
                    let (objects, mut errors) = loader::load_str_all(&text, STDIN_NAME);
                    if objects.is_empty()
                        && !errors.is_empty()
                        && let Some(why) = not_a_manifest(&text, false)
                    {
                        errors = vec![not_a_manifest_error(STDIN_NAME, &why)];
                    }
                    input.objects.extend(objects);
                    input.errors.extend(errors);
                }
                Err(e) => input.errors.push(e),
            }
        }
    }
    input
}

/// Standard input, read to its end once per process (a second call returns the same bytes): `simulate` looks at
/// it to decide what to run before the loader reads it as `-`.
pub fn stdin_bytes() -> std::io::Result<&'static [u8]> {
    static STDIN: OnceLock<Result<Vec<u8>, (std::io::ErrorKind, String)>> = OnceLock::new();
    let read = STDIN.get_or_init(|| {
        let mut bytes = Vec::new();
        std::io::stdin().lock().read_to_end(&mut bytes).map(|_| bytes).map_err(|e| (e.kind(), e.to_string()))
    });
    match read {
        Ok(bytes) => Ok(bytes),
        Err((kind, message)) => Err(std::io::Error::new(*kind, message.clone())),
    }
}

/// What `simulate` reads when given no path (and no cluster).
#[derive(Debug, PartialEq, Eq)]
pub enum DefaultInput {
    /// Standard input is a pipe or a file with something in it: read it, as `-` would.
    Stdin,
    /// The bundled example; the text says why, for the note on standard error.
    Bundled(&'static str),
}

/// Piped input is never ignored: with standard input not a terminal, what it holds is the input, unless it is
/// empty (`< /dev/null`, a cron job, a test harness), when the bundled example runs as at a terminal.
pub fn default_input() -> DefaultInput {
    if std::io::stdin().is_terminal() {
        return DefaultInput::Bundled("no input given");
    }
    match stdin_bytes() {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {
            DefaultInput::Bundled("no input given and standard input is empty")
        }
        // Read errors are reported by the loader, under `<stdin>`.
        _ => DefaultInput::Stdin,
    }
}

/// Splits off the files of `files` (those `run` names, walked) that loaded no object, only errors, and hold no
/// Kubernetes object at all: found in a directory walk they are skipped (their errors dropped, a warning each);
/// named explicitly their errors become one saying what the file is.
fn sort_out_non_manifests(
    run: &[PathBuf],
    files: &[PathBuf],
    objects: &[Loaded],
    errors: Vec<LoadError>,
) -> (Vec<LoadError>, Vec<String>) {
    let failed: Vec<&PathBuf> = files
        .iter()
        .filter(|f| {
            let name = f.display().to_string();
            errors.iter().any(|e| e.file() == name) && !objects.iter().any(|o| o.origin.file == name)
        })
        .collect();
    if failed.is_empty() {
        return (errors, Vec::new());
    }
    let mut errors = errors;
    let mut skipped = Vec::new();
    for file in failed {
        let explicit = run.contains(file);
        let Some(why) = std::fs::read(file).ok().and_then(|bytes| {
            let bytes_look_like_catalogue = karpenter_aws::catalogue::looks_like_catalogue(&bytes);
            let text = String::from_utf8(bytes).ok()?;
            not_a_manifest(&text, bytes_look_like_catalogue)
        }) else {
            continue;
        };
        let name = file.display().to_string();
        let first = errors.iter().position(|e| e.file() == name);
        errors.retain(|e| e.file() != name);
        if explicit {
            let at = first.unwrap_or(errors.len()).min(errors.len());
            errors.insert(at, not_a_manifest_error(&name, &why));
        } else {
            skipped.push(format!("warning: {name} skipped: {why}"));
        }
    }
    (errors, skipped)
}

fn not_a_manifest_error(name: &str, why: &str) -> LoadError {
    LoadError::Syntax { file: name.to_owned(), line: None, message: format!("not a manifest: {why}") }
}

/// Why `text` holds no Kubernetes object (no document, nor any item of a top-level JSON array, has an
/// `apiVersion` or a `kind`); `None` when it does, or when it does not parse (a syntax error is the loader's to
/// report).
fn not_a_manifest(text: &str, looks_like_aws_catalogue: bool) -> Option<String> {
    if looks_like_aws_catalogue {
        return Some(format!(
            "an AWS catalogue ({}), not Kubernetes objects (simulate reads it with --instance-types)",
            karpenter_aws::catalogue::API_VERSION
        ));
    }
    let documents: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(value) => vec![value],
        Err(_) => serde_saphyr::from_multiple::<Value>(text).ok()?,
    };
    let documents: Vec<&Value> = documents
        .iter()
        .flat_map(|d| match d {
            Value::Array(items) => items.iter().collect(),
            other => vec![other],
        })
        .filter(|d| !d.is_null())
        .collect();
    let has_type = |d: &&Value| d.get("apiVersion").is_some() || d.get("kind").is_some();
    if documents.is_empty() || documents.iter().any(has_type) {
        return None;
    }
    let instance_type = |d: &&Value| d.get("name").is_some() && d.get("offerings").is_some();
    Some(if documents.iter().all(instance_type) {
        "a list of instance types (upstream's kwok format), not Kubernetes objects (simulate reads it with \
         --instance-types)"
            .to_owned()
    } else {
        "no document has an apiVersion or a kind".to_owned()
    })
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
