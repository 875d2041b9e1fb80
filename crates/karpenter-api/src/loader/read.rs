//! Reading manifests: text and files into [`Loaded`] objects (see the [loader](super)'s docs for the input it
//! takes and the errors it reports), with the fast paths for large inputs in `block`, `direct` and `split`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate, ReplicationController, ResourceQuota,
    Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1beta1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::object::{DecodeError, LoadError, Loaded, Object, Origin, UnknownObject};
use crate::capacitybuffer::CapacityBuffer;
use crate::nodeclaim::NodeClaim;
use crate::nodeoverlay::NodeOverlay;
use crate::nodepool::NodePool;
use crate::pod::{CompactPod, SpecInterner};

mod block;
mod direct;
mod split;

macro_rules! define_decoders {
    ($( $variant:ident($ty:ty) = $api_version:literal ),* $(,)?) => {
        /// Decodes `value` as the type registered for (apiVersion, kind); `None` if no type is registered.
        fn decode_known(api_version: &str, kind: &str, value: &Value) -> Option<Result<Object, Decoded>> {
            $(
                if api_version == $api_version && kind == stringify!($variant) {
                    return Some(decode_as::<$ty>(value).map(|o| Object::$variant(Box::new(o))));
                }
            )*
            None
        }

        /// A decoded object serialised again (what [`unknown_fields`] compares the input with).
        fn round_trip(object: &Object) -> Value {
            // Serialising a decoded API object cannot fail in practice; if it did, the unknown-field check is
            // skipped.
            match object {
                $( Object::$variant(o) => serde_json::to_value(o).unwrap_or(Value::Null), )*
                Object::Unknown(_) | Object::CompactPod(_) => Value::Null,
            }
        }
    };
}

with_object_kinds!(define_decoders);

/// How [`load_paths_with`] and [`load_str_all_with`] keep what they decode, and what they report while reading.
#[derive(Clone, Copy, Default)]
pub struct LoadOptions<'a> {
    /// Pods become [`Object::CompactPod`] as soon as they are decoded, replicas sharing one spec, so a dump of
    /// many pods is never held as full `Pod` objects. For consumers that read pods as decisions do (`simulate`).
    pub compact_pods: bool,
    /// Called while a large file is read.
    pub progress: Option<&'a Progress<'a>>,
}

/// A progress report: (file, bytes read so far, file size).
pub type Progress<'a> = dyn Fn(&str, u64, u64) + Sync + 'a;

impl fmt::Debug for LoadOptions<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadOptions")
            .field("compact_pods", &self.compact_pods)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// Loads every object in `text`, stopping at the first error. `origin_name` names the source in origins and
/// errors; if it ends in `.json` the text is read as JSON, otherwise as YAML (which also accepts JSON).
pub fn load_str(text: &str, origin_name: &str) -> Result<Vec<Loaded>, LoadError> {
    let (loaded, mut errors) = load_str_all(text, origin_name);
    if errors.is_empty() { Ok(loaded) } else { Err(errors.swap_remove(0)) }
}

/// Like [`load_str`] but keeps going after a bad document: returns every object that loaded and every error.
/// A syntax error still rejects the whole text.
pub fn load_str_all(text: &str, origin_name: &str) -> (Vec<Loaded>, Vec<LoadError>) {
    load_str_all_with(text, origin_name, &LoadOptions::default())
}

/// [`load_str_all`] with options.
pub fn load_str_all_with(text: &str, origin_name: &str, options: &LoadOptions<'_>) -> (Vec<Loaded>, Vec<LoadError>) {
    let (loaded, errors) = with_large_stack(|| load_str_all_inner(text, origin_name));
    (compact_all(loaded, options), errors)
}

/// The objects with their pods in compact form when `options` asks for it.
fn compact_all(loaded: Vec<Loaded>, options: &LoadOptions<'_>) -> Vec<Loaded> {
    if !options.compact_pods {
        return loaded;
    }
    let mut specs = SpecInterner::new();
    loaded.into_iter().map(|l| Loaded { origin: l.origin, object: compact(l.object, &mut specs) }).collect()
}

/// A Pod as an [`Object::CompactPod`] (its spec shared through `specs`); any other object as it is.
fn compact(object: Object, specs: &mut SpecInterner) -> Object {
    match object {
        Object::Pod(pod) => Object::CompactPod(Arc::new(specs.intern(CompactPod::from(*pod)))),
        other => other,
    }
}

/// Stack for parsing and decoding. The parser caps nesting at 64 levels (and JSON at 128), but a deeply nested
/// document still needs more stack than a test thread's 2 MiB in debug builds; the reservation is virtual memory,
/// only the pages actually used are touched.
const LOADER_STACK_BYTES: usize = 64 << 20;

/// Runs `f` on a scoped thread with a large stack (or inline if no thread can be spawned).
fn with_large_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    let mut f = Some(f);
    let outcome = std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("manifest-loader".into())
            .stack_size(LOADER_STACK_BYTES)
            .spawn_scoped(scope, || f.take().map(|f| f()));
        spawned.ok().map(|handle| handle.join())
    });
    match outcome {
        Some(Ok(Some(result))) => result,
        // A panic in the loader is a bug: re-raise it on the caller's thread with its own message.
        Some(Err(payload)) => std::panic::resume_unwind(payload),
        // No thread could be spawned: run inline.
        Some(Ok(None)) | None => match f.take() {
            Some(f) => f(),
            None => unreachable!("the loader closure ran but returned nothing"),
        },
    }
}

fn load_str_all_inner(text: &str, origin_name: &str) -> (Vec<Loaded>, Vec<LoadError>) {
    let documents = if origin_name.to_ascii_lowercase().ends_with(".json") {
        parse_json(text, origin_name)
    } else {
        parse_yaml(text, origin_name)
    };
    let documents = match documents {
        Ok(d) => d,
        Err(e) => return (Vec::new(), vec![e]),
    };
    let mut loaded = Vec::new();
    let mut errors = Vec::new();
    for (index, doc) in documents.into_iter().enumerate() {
        let origin = Origin { file: origin_name.to_string(), document: index, item: None };
        load_document(doc, origin, &mut loaded, &mut errors);
    }
    (loaded, errors)
}

/// Loads one file (any extension; `.json` is read as JSON), stopping at the first error.
pub fn load_file(path: impl AsRef<Path>) -> Result<Vec<Loaded>, LoadError> {
    let (loaded, mut errors) = load_file_all(path.as_ref(), &LoadOptions::default());
    if errors.is_empty() { Ok(loaded) } else { Err(errors.swap_remove(0)) }
}

/// Files from this size on are read in blocks, a `List`'s items decoded in parallel as they arrive
/// ([`split`]); smaller ones are read whole.
const STREAM_FROM_BYTES: u64 = 1 << 20;

/// What the block-wise reader of large Lists makes of `bytes` (named `name`), `None` where it reads the text
/// whole instead. For the tests and fuzz targets that hold it to [`load_str_all_with`].
pub(crate) fn load_streamed(
    bytes: &[u8],
    name: &str,
    options: &LoadOptions<'_>,
) -> Option<(Vec<Loaded>, Vec<LoadError>)> {
    split::load(bytes, name, bytes.len() as u64, options).ok().flatten()
}

/// Every object of one file and every error.
fn load_file_all(path: &Path, options: &LoadOptions<'_>) -> (Vec<Loaded>, Vec<LoadError>) {
    let name = path.display().to_string();
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size >= STREAM_FROM_BYTES {
        match std::fs::File::open(path) {
            Ok(file) => match split::load(file, &name, size, options) {
                Ok(Some(done)) => return done,
                // Not a plain List: read whole below.
                Ok(None) => {}
                Err(source) => return (Vec::new(), vec![LoadError::Io { path: path.to_path_buf(), source }]),
            },
            Err(source) => return (Vec::new(), vec![LoadError::Io { path: path.to_path_buf(), source }]),
        }
    }
    match read(path) {
        Ok(text) => load_str_all_with(&text, &name, options),
        Err(e) => (Vec::new(), vec![e]),
    }
}

/// Loads files and directories. Directories are walked recursively in sorted order, reading only `.yaml`, `.yml`
/// and `.json` files (symlinked directories are followed; a link back into the directories being walked is an
/// error, not a loop); files named explicitly are read whatever their extension. Returns every object that loaded and every error (a bad document does not hide its neighbours).
pub fn load_paths<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> (Vec<Loaded>, Vec<LoadError>) {
    load_paths_with(paths, &LoadOptions::default())
}

/// [`load_paths`] with options.
pub fn load_paths_with<P: AsRef<Path>>(
    paths: impl IntoIterator<Item = P>,
    options: &LoadOptions<'_>,
) -> (Vec<Loaded>, Vec<LoadError>) {
    let mut loaded = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        let mut files = Vec::new();
        collect_files(path.as_ref(), true, &mut files, &mut errors);
        for file in files {
            let (l, e) = load_file_all(&file, options);
            loaded.extend(l);
            errors.extend(e);
        }
    }
    (loaded, errors)
}

/// The files [`load_paths`] would read for `paths`, in order (useful for counting files).
pub fn manifest_files<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> (Vec<PathBuf>, Vec<LoadError>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        collect_files(path.as_ref(), true, &mut files, &mut errors);
    }
    (files, errors)
}

/// True for the extensions directory walks read.
pub fn is_manifest_file(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "yaml" | "yml" | "json"))
}

fn read(path: &Path) -> Result<String, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io { path: path.to_path_buf(), source })?;
    decode_text(bytes, &path.display().to_string())
}

/// Manifest bytes as text: UTF-8 (a byte-order mark is dropped). UTF-16 and UTF-32 (which editors and Windows
/// shells write, recognised by their byte-order mark or, for UTF-16 without one, by the zero bytes between ASCII
/// characters) are rejected with an error naming the encoding, as is anything else that is not UTF-8.
pub fn decode_text(bytes: Vec<u8>, name: &str) -> Result<String, LoadError> {
    let syntax = |message: String| LoadError::Syntax { file: name.to_owned(), line: None, message };
    let convert = |encoding: &str| {
        syntax(format!(
            "the text is {encoding}; manifests must be UTF-8 (convert it, e.g. `iconv -f {} -t UTF-8`)",
            encoding.split(' ').next().unwrap_or(encoding)
        ))
    };
    let head: &[u8] = &bytes[..bytes.len().min(4)];
    if head.starts_with(&[0xFF, 0xFE, 0, 0]) {
        return Err(convert("UTF-32LE (little-endian, with a byte-order mark)"));
    }
    if head.starts_with(&[0, 0, 0xFE, 0xFF]) {
        return Err(convert("UTF-32BE (big-endian, with a byte-order mark)"));
    }
    if head.starts_with(&[0xFF, 0xFE]) {
        return Err(convert("UTF-16LE (little-endian, with a byte-order mark)"));
    }
    if head.starts_with(&[0xFE, 0xFF]) {
        return Err(convert("UTF-16BE (big-endian, with a byte-order mark)"));
    }
    // UTF-16 without a mark: YAML starts with ASCII, so one byte of each of the first pairs is zero.
    if bytes.len() >= 4 && bytes[0] != 0 && bytes[1] == 0 && bytes[2] != 0 && bytes[3] == 0 {
        return Err(convert("UTF-16LE (little-endian)"));
    }
    if bytes.len() >= 4 && bytes[0] == 0 && bytes[1] != 0 && bytes[2] == 0 && bytes[3] != 0 {
        return Err(convert("UTF-16BE (big-endian)"));
    }
    let mut text = String::from_utf8(bytes).map_err(|e| syntax(format!("not UTF-8 text: {e}")))?;
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

/// Walks `path` into `files`. Symlinked directories are followed; `ancestors` holds the canonical paths of the
/// directories being walked, so a link back to one of them (a loop) is reported once and not entered.
fn collect_files(path: &Path, explicit: bool, files: &mut Vec<PathBuf>, errors: &mut Vec<LoadError>) {
    collect_files_in(path, explicit, files, errors, &mut Vec::new());
}

fn collect_files_in(
    path: &Path,
    explicit: bool,
    files: &mut Vec<PathBuf>,
    errors: &mut Vec<LoadError>,
    ancestors: &mut Vec<PathBuf>,
) {
    let io = |source: std::io::Error| LoadError::Io { path: path.to_path_buf(), source };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        // A dangling link or a link to itself found in a directory walk: skipped unless it looks like a
        // manifest (then it is reported: the user meant it to be read).
        Err(_) if !explicit && !is_manifest_file(path) => return,
        Err(source) => {
            errors.push(io(source));
            return;
        }
    };
    if meta.is_dir() {
        let canonical = match std::fs::canonicalize(path) {
            Ok(c) => c,
            Err(source) => {
                errors.push(io(source));
                return;
            }
        };
        if ancestors.contains(&canonical) {
            errors.push(io(std::io::Error::other(format!(
                "symbolic link loop: {} is a directory being read already; not read again",
                canonical.display()
            ))));
            return;
        }
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(source) => {
                errors.push(io(source));
                return;
            }
        };
        let mut children = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => children.push(entry.path()),
                Err(source) => errors.push(io(source)),
            }
        }
        children.sort();
        ancestors.push(canonical);
        for child in children {
            collect_files_in(&child, false, files, errors, ancestors);
        }
        ancestors.pop();
    } else if explicit || is_manifest_file(path) {
        files.push(path.to_path_buf());
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Parsing: text -> documents (JSON values, with a line map for YAML).

/// A parsed YAML node with the line it starts on.
#[derive(Debug)]
struct SNode {
    line: u64,
    node: YNode,
}

#[derive(Debug)]
enum YNode {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(String),
    Seq(Vec<SNode>),
    Map(Vec<(String, SNode)>),
}

impl<'de> Deserialize<'de> for SNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<YNode>::deserialize(d)?;
        Ok(SNode { line: spanned.referenced.line(), node: spanned.value })
    }
}

impl<'de> Deserialize<'de> for YNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = YNode;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<YNode, E> {
        Ok(YNode::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<YNode, E> {
        Ok(YNode::I64(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<YNode, E> {
        Ok(YNode::U64(v))
    }
    fn visit_i128<E: de::Error>(self, v: i128) -> Result<YNode, E> {
        Ok(YNode::Str(v.to_string()))
    }
    fn visit_u128<E: de::Error>(self, v: u128) -> Result<YNode, E> {
        Ok(YNode::Str(v.to_string()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<YNode, E> {
        Ok(YNode::F64(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<YNode, E> {
        Ok(YNode::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<YNode, E> {
        Ok(YNode::Str(v))
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<YNode, E> {
        Ok(YNode::Str(String::from_utf8_lossy(v).into_owned()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<YNode, E> {
        Ok(YNode::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<YNode, E> {
        Ok(YNode::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<YNode, D::Error> {
        YNode::deserialize(d)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<YNode, D::Error> {
        YNode::deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<YNode, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<SNode>()? {
            items.push(item);
        }
        Ok(YNode::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<YNode, A::Error> {
        let mut entries: Vec<(String, SNode)> = Vec::new();
        // Small maps (nearly all of a manifest) check duplicates by scanning; big ones (a ConfigMap's data, a
        // huge label set) switch to a set so the check stays linear.
        let mut seen: Option<std::collections::HashSet<String>> = None;
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value::<SNode>()?;
            let duplicate = match &mut seen {
                Some(set) => !set.insert(key.clone()),
                None if entries.len() >= 32 => {
                    let mut set: std::collections::HashSet<String> = entries.iter().map(|(k, _)| k.clone()).collect();
                    let duplicate = !set.insert(key.clone());
                    seen = Some(set);
                    duplicate
                }
                None => entries.iter().any(|(k, _)| *k == key),
            };
            if duplicate {
                return Err(de::Error::custom(format!("duplicate key {key:?}")));
            }
            entries.push((key, value));
        }
        Ok(YNode::Map(entries))
    }
}

impl SNode {
    fn to_value(&self) -> Value {
        match &self.node {
            YNode::Null => Value::Null,
            YNode::Bool(b) => Value::Bool(*b),
            YNode::I64(i) => Value::from(*i),
            YNode::U64(u) => Value::from(*u),
            YNode::F64(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            YNode::Str(s) => Value::String(s.clone()),
            YNode::Seq(items) => Value::Array(items.iter().map(SNode::to_value).collect()),
            YNode::Map(entries) => {
                Value::Object(entries.iter().map(|(k, v)| (k.clone(), v.to_value())).collect::<Map<String, Value>>())
            }
        }
    }

    /// Moves the node and everything under it `by` lines down (a node parsed out of a later part of a file).
    fn shift(&mut self, by: u64) {
        if self.line > 0 {
            self.line += by;
        }
        match &mut self.node {
            YNode::Seq(items) => items.iter_mut().for_each(|n| n.shift(by)),
            YNode::Map(entries) => entries.iter_mut().for_each(|(_, n)| n.shift(by)),
            _ => {}
        }
    }

    /// The line of the deepest node reachable along `path`.
    fn line_of(&self, path: &[Seg]) -> u64 {
        let mut node = self;
        for seg in path {
            let next = match (seg, &node.node) {
                (Seg::Key(k), YNode::Map(entries)) => entries.iter().find(|(key, _)| key == k).map(|(_, v)| v),
                (Seg::Index(i), YNode::Seq(items)) => items.get(*i),
                _ => None,
            };
            match next {
                Some(n) => node = n,
                None => break,
            }
        }
        node.line
    }
}

/// One parsed document: the JSON value and, for YAML, the source tree for line numbers.
struct Document {
    value: Value,
    source: Option<SNode>,
}

impl Document {
    fn line_of(&self, path: &[Seg]) -> Option<u64> {
        self.source.as_ref().map(|s| s.line_of(path)).filter(|l| *l > 0)
    }

    /// The document for item `i` of a list document.
    fn item(&self, i: usize) -> Option<Document> {
        let value = self.value.get("items")?.get(i)?.clone();
        let source = self.source.as_ref().and_then(|s| match &s.node {
            YNode::Map(entries) => match &entries.iter().find(|(k, _)| k == "items")?.1.node {
                YNode::Seq(items) => items.get(i).map(|item| SNode { line: item.line, node: clone_node(&item.node) }),
                _ => None,
            },
            _ => None,
        });
        Some(Document { value, source })
    }
}

fn clone_node(node: &YNode) -> YNode {
    match node {
        YNode::Null => YNode::Null,
        YNode::Bool(b) => YNode::Bool(*b),
        YNode::I64(i) => YNode::I64(*i),
        YNode::U64(u) => YNode::U64(*u),
        YNode::F64(f) => YNode::F64(*f),
        YNode::Str(s) => YNode::Str(s.clone()),
        YNode::Seq(items) => {
            YNode::Seq(items.iter().map(|n| SNode { line: n.line, node: clone_node(&n.node) }).collect())
        }
        YNode::Map(entries) => YNode::Map(
            entries.iter().map(|(k, n)| (k.clone(), SNode { line: n.line, node: clone_node(&n.node) })).collect(),
        ),
    }
}

fn parse_yaml(text: &str, file: &str) -> Result<Vec<Document>, LoadError> {
    Ok(parse_yaml_nodes(text, file)?
        .into_iter()
        .filter(|n| !matches!(n.node, YNode::Null))
        .map(|n| Document { value: n.to_value(), source: Some(n) })
        .collect())
}

/// The documents of `text` as parse trees (empty ones included).
fn parse_yaml_nodes(text: &str, file: &str) -> Result<Vec<SNode>, LoadError> {
    // YAML 1.2 scalars (`yes`, `n`, `on` stay strings), non-finite floats (`.inf`) and numbers with leading zeros or
    // underscores kept as strings, so a bad value fails on its own field rather than rejecting the whole file.
    let options = serde_saphyr::options! {
        strict_booleans: true,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::AsString,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        with_snippet: false,
        // The defaults (1,024 documents, 250,000 nodes) guard services against hostile input; ours is the operator's
        // own files, and `kubectl get pods -A -o yaml` of a large cluster exceeds them. Alias limits stay.
        budget: serde_saphyr::budget! {
            max_documents: 10_000_000,
            max_nodes: 500_000_000,
            max_events: 1_000_000_000,
            max_reader_input_bytes: None,
            max_total_scalar_bytes: 4 * 1024 * 1024 * 1024,
        },
    };
    let nodes: Vec<SNode> = serde_saphyr::from_multiple_with_options(text, options).map_err(|e| {
        let line = e.location().map(|l| l.line()).filter(|l| *l > 0);
        let message = e.render_with_options(serde_saphyr::render_options! {
            snippets: serde_saphyr::SnippetMode::Off,
        });
        LoadError::Syntax { file: file.to_string(), line, message: format!("invalid YAML: {message}") }
    })?;
    Ok(nodes)
}

fn parse_json(text: &str, file: &str) -> Result<Vec<Document>, LoadError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let value: Value = serde_json::from_str(text).map_err(|e| LoadError::Syntax {
        file: file.to_string(),
        line: Some(e.line() as u64).filter(|l| *l > 0),
        message: format!("invalid JSON: {e}"),
    })?;
    Ok(match value {
        Value::Array(items) => items.into_iter().map(|value| Document { value, source: None }).collect(),
        value => vec![Document { value, source: None }],
    })
}

// ---------------------------------------------------------------------------------------------------------------
// Decoding: document -> object.

/// A segment of a field path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// Renders a path in the API server's notation: `spec.requirements[0]`, `metadata.labels[karpenter.sh/x]`.
fn render_path(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Key(k) if k.contains(['.', '/', '[', ']', ' ']) || k.is_empty() => out.push_str(&format!("[{k}]")),
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
        }
    }
    out
}

/// A decoding failure inside one document.
struct Decoded {
    path: Vec<Seg>,
    message: String,
}

fn decode_as<T>(value: &Value) -> Result<T, Decoded>
where
    T: serde::de::DeserializeOwned,
{
    let typed: T = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e
            .path()
            .iter()
            .filter_map(|s| match s {
                serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
                serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
                serde_path_to_error::Segment::Enum { variant } => Some(Seg::Key(variant.clone())),
                serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        Decoded { path, message: e.into_inner().to_string() }
    })?;
    Ok(typed)
}

/// The shape of a document: its keys, the type and length of every value, and whether each value is empty or a
/// default (what [`unknown_fields`] looks at), but not the values themselves. For the core kinds, whose types
/// keep every field they know whatever its value, the unknown fields of a document follow from its shape.
fn shape_of(kind: &str, value: &Value) -> (u64, u64) {
    use std::hash::{Hash, Hasher};
    fn walk(value: &Value, h: &mut impl Hasher) {
        match value {
            Value::Null => h.write_u8(0),
            Value::Bool(b) => h.write_u8(1 + u8::from(*b)),
            Value::Number(_) => h.write_u8(3 + u8::from(is_default_like(value))),
            Value::String(s) => h.write_u8(5 + u8::from(s.is_empty())),
            Value::Array(items) => {
                h.write_u8(7);
                h.write_usize(items.len());
                items.iter().for_each(|v| walk(v, h));
            }
            Value::Object(map) => {
                h.write_u8(8);
                h.write_usize(map.len());
                for (k, v) in map {
                    k.hash(h);
                    walk(v, h);
                }
            }
        }
    }
    // Two independent 64-bit hashes, so two shapes are taken for one only by a 128-bit collision.
    let mut first = std::hash::DefaultHasher::new();
    let mut second = std::hash::DefaultHasher::new();
    second.write_u64(0x9e37_79b9_7f4a_7c15);
    for h in [&mut first, &mut second] {
        kind.hash(h);
        walk(value, h);
    }
    (first.finish(), second.finish())
}

thread_local! {
    /// Shapes of core-kind documents found to have no unknown fields: a document of the same shape has none
    /// either, and is not serialised again to check (a dump's replicas share a handful of shapes).
    static CHECKED_SHAPES: std::cell::RefCell<std::collections::HashSet<(u64, u64)>> = Default::default();
}

/// Shapes remembered per thread at most.
const MAX_CHECKED_SHAPES: usize = 4096;

/// Fields present (with a non-default value) in `input` but absent from the decoded object's serialisation.
fn unknown_fields(input: &Value, decoded: &Value, path: &mut Vec<Seg>, out: &mut Vec<(Vec<Seg>, String)>) {
    match (input, decoded) {
        (Value::Object(i), Value::Object(d)) => {
            for (k, v) in i {
                match d.get(k) {
                    Some(dv) => {
                        path.push(Seg::Key(k.clone()));
                        unknown_fields(v, dv, path, out);
                        path.pop();
                    }
                    None if is_default_like(v) => {}
                    None => out.push((path.clone(), k.clone())),
                }
            }
        }
        (Value::Array(i), Value::Array(d)) => {
            for (index, (iv, dv)) in i.iter().zip(d).enumerate() {
                path.push(Seg::Index(index));
                unknown_fields(iv, dv, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn is_default_like(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

fn is_list_kind(kind: &str) -> bool {
    kind == "List" || (kind.len() > 4 && kind.ends_with("List"))
}

fn load_document(doc: Document, origin: Origin, loaded: &mut Vec<Loaded>, errors: &mut Vec<LoadError>) {
    let err = |origin: &Origin, object: Option<String>, path: &[Seg], line: Option<u64>, message: String| {
        LoadError::Decode(Box::new(DecodeError {
            origin: origin.clone(),
            object,
            path: render_path(path),
            line,
            message,
        }))
    };
    let Value::Object(map) = &doc.value else {
        errors.push(err(
            &origin,
            None,
            &[],
            doc.line_of(&[]),
            format!("expected a Kubernetes object (a mapping), found {}", json_type(&doc.value)),
        ));
        return;
    };
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    let name = map.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str).map(str::to_string);
    let object = (!kind.is_empty()).then(|| match &name {
        Some(n) => format!("{kind}/{n}"),
        None => kind.clone(),
    });
    for (field, value) in [("apiVersion", &api_version), ("kind", &kind)] {
        if value.is_empty() {
            let path = [Seg::Key(field.to_string())];
            errors.push(err(&origin, object.clone(), &[], doc.line_of(&path), format!("missing or empty {field}")));
            return;
        }
    }

    if is_list_kind(&kind) && (kind == "List" || map.contains_key("items")) {
        if origin.item.is_some() {
            errors.push(err(&origin, object, &[], doc.line_of(&[]), "a List inside a List is not supported".into()));
            return;
        }
        let Some(items) = map.get("items") else {
            // An empty list may omit `items`.
            return;
        };
        let Value::Array(items) = items else {
            let path = [Seg::Key("items".into())];
            errors.push(err(&origin, object, &path, doc.line_of(&path), "items must be a list".into()));
            return;
        };
        for i in 0..items.len() {
            if let Some(item) = doc.item(i) {
                let origin = Origin { item: Some(i), ..origin.clone() };
                load_document(item, origin, loaded, errors);
            }
        }
        return;
    }

    let Some(result) = decode_known(&api_version, &kind, &doc.value) else {
        let object = Object::Unknown(Box::new(UnknownObject { api_version, kind, value: doc.value }));
        loaded.push(Loaded { origin, object });
        return;
    };
    match result {
        Ok(object_value) => {
            let shape = (!object_value.is_karpenter()).then(|| shape_of(&kind, &doc.value));
            if let Some(shape) = shape
                && CHECKED_SHAPES.with(|s| s.borrow().contains(&shape))
            {
                loaded.push(Loaded { origin, object: object_value });
                return;
            }
            let mut unknown = Vec::new();
            unknown_fields(&doc.value, &round_trip(&object_value), &mut Vec::new(), &mut unknown);
            if let Some(shape) = shape
                && unknown.is_empty()
            {
                CHECKED_SHAPES.with(|s| {
                    let mut s = s.borrow_mut();
                    if s.len() >= MAX_CHECKED_SHAPES {
                        s.clear();
                    }
                    s.insert(shape);
                });
            }
            for (path, field) in &unknown {
                let mut field_path = path.clone();
                field_path.push(Seg::Key(field.clone()));
                let line = doc.line_of(&field_path);
                errors.push(err(&origin, object.clone(), path, line, format!("unknown field {field:?}")));
            }
            if unknown.is_empty() {
                loaded.push(Loaded { origin, object: object_value });
            }
        }
        Err(Decoded { mut path, message }) => {
            // serde's `unknown field `x`, expected one of ...` (deny_unknown_fields): same wording as the
            // round-trip check, with the line of the field itself.
            let (message, line) = match unknown_field_name(&message) {
                Some((field, rest)) => {
                    // The path may already end with the unknown key; report it on its parent object.
                    let mut field_path = path.clone();
                    if path.last() == Some(&Seg::Key(field.to_string())) {
                        path.pop();
                    } else {
                        field_path.push(Seg::Key(field.to_string()));
                    }
                    (format!("unknown field {field:?}{rest}"), doc.line_of(&field_path))
                }
                None => (message.clone(), doc.line_of(&path)),
            };
            errors.push(err(&origin, object, &path, line, message));
        }
    }
}

/// Splits serde's "unknown field `x`, expected ..." into the field name and the rest (`, expected ...`).
fn unknown_field_name(message: &str) -> Option<(&str, &str)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (field, rest) = rest.split_once('`')?;
    Some((field, rest))
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_path_uses_brackets_for_indices_and_dotted_keys() {
        let p = vec![
            Seg::Key("metadata".into()),
            Seg::Key("labels".into()),
            Seg::Key("karpenter.sh/x".into()),
            Seg::Key("spec".into()),
            Seg::Index(2),
            Seg::Key("a".into()),
        ];
        assert_eq!(render_path(&p), "metadata.labels[karpenter.sh/x].spec[2].a");
    }

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("karpenter-loader-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("temp dir");
            TempDir(dir)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n";

    #[cfg(unix)]
    #[test]
    fn symlinked_directories_are_followed_and_loops_reported_not_walked() {
        let dir = TempDir::new("symlinks");
        let real = dir.0.join("real");
        std::fs::create_dir_all(real.join("sub")).expect("mkdir");
        std::fs::write(real.join("sub/pod.yaml"), POD).expect("write");
        let top = dir.0.join("top");
        std::fs::create_dir_all(&top).expect("mkdir");
        std::os::unix::fs::symlink(&real, top.join("linked")).expect("symlink");
        // A loop: real/sub/back -> real.
        std::os::unix::fs::symlink(&real, real.join("sub/back")).expect("symlink");
        let (files, errors) = manifest_files([&top]);
        assert_eq!(files, [top.join("linked/sub/pod.yaml")]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let message = errors[0].to_string();
        assert!(message.contains("symbolic link loop") && message.contains("linked/sub/back"), "{message}");
        // A link to itself named like a manifest is an error; one not named like a manifest is skipped.
        std::os::unix::fs::symlink("self.yaml", top.join("self.yaml")).expect("symlink");
        std::os::unix::fs::symlink("other", top.join("other")).expect("symlink");
        let (_, errors) = manifest_files([&top]);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors.iter().any(|e| e.file().ends_with("self.yaml")), "{errors:?}");
    }

    #[test]
    fn utf16_and_utf32_are_named_and_a_utf8_bom_is_dropped() {
        let utf16le: Vec<u8> = [0xFF, 0xFE].into_iter().chain(POD.encode_utf16().flat_map(u16::to_le_bytes)).collect();
        let utf16be: Vec<u8> = POD.encode_utf16().flat_map(u16::to_be_bytes).collect();
        let err = decode_text(utf16le, "in.yaml").expect_err("UTF-16LE").to_string();
        assert!(err.starts_with("in.yaml: the text is UTF-16LE (little-endian, with a byte-order mark)"), "{err}");
        let err = decode_text(utf16be, "in.yaml").expect_err("UTF-16BE").to_string();
        assert!(err.contains("UTF-16BE (big-endian)") && err.contains("iconv -f UTF-16BE -t UTF-8"), "{err}");
        let err = decode_text(vec![0xFF, 0xFE, 0, 0, b'a', 0, 0, 0], "in.yaml").expect_err("UTF-32").to_string();
        assert!(err.contains("UTF-32LE"), "{err}");
        let bom: Vec<u8> = "\u{feff}".bytes().chain(POD.bytes()).collect();
        assert_eq!(decode_text(bom, "in.yaml").expect("UTF-8 with BOM"), POD);
        assert!(decode_text(vec![b'a', 0xC3], "x").expect_err("bad").to_string().contains("not UTF-8"));
    }

    #[test]
    fn list_kinds() {
        assert!(is_list_kind("List"));
        assert!(is_list_kind("PodList"));
        assert!(!is_list_kind("Pod"));
        assert!(!is_list_kind("Lis"));
    }
}

#[cfg(test)]
mod shape_tests {
    use super::*;

    #[test]
    fn a_shape_seen_clean_does_not_hide_unknown_fields_of_another() {
        let pod = |name: &str, extra: &str| {
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec: {{containers: [{{name: c}}]{extra}}}\n"
            )
        };
        // The same shape with other values is clean; an extra field (another shape) is still found, every time.
        let text = [pod("a", ""), pod("b", ""), pod("c", ", bogus: 1"), pod("d", ", bogus: 1"), pod("e", ", bogus: 0")]
            .join("---\n");
        let (loaded, errors) = load_str_all(&text, "pods.yaml");
        let names: Vec<_> = loaded.iter().map(|l| l.object.display_name()).collect();
        assert_eq!(names, ["Pod/a", "Pod/b", "Pod/e"]);
        let errors: Vec<_> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[1].starts_with("pods.yaml: document 3: Pod/d: spec: unknown field \"bogus\""), "{errors:?}");
    }
}
