//! A large `List` (what `kubectl get -A -o json|yaml` prints) read in blocks, its items decoded in parallel as
//! they arrive, so the file's text, its parse tree and its full objects are never all held at once.
//!
//! The items of the top-level `items` are cut out of the text without parsing it: in JSON by matching brackets
//! outside strings, in YAML by lines (the entries of a block sequence start with `-` at the sequence's column).
//! Each item is then parsed and decoded on its own by the code that reads a whole file; everything but the items
//! (the List's `apiVersion`, `kind`, `metadata`) is parsed as one document with `items: []` in their place, and
//! must be a plain List. Anything else (several documents, an alias to an anchor outside its item, a syntax error
//! anywhere, a document that is not a List) gives up with `Ok(None)`, and the caller reads the file whole: results
//! and errors are always exactly those of [`super::load_str_all_with`].

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{Arc, Mutex, mpsc};

use serde_json::Value;

use super::{
    Document, LOADER_STACK_BYTES, LoadError, LoadOptions, Loaded, Object, Origin, SNode, SpecInterner, block, compact,
    direct, is_list_kind, load_document, parse_yaml_nodes,
};

/// Bytes read at a time (a few KiB in tests, so they cross block boundaries).
const BLOCK: usize = if cfg!(test) { 4 << 10 } else { 8 << 20 };
/// Text handed to a worker at a time.
const BATCH_BYTES: usize = if cfg!(test) { 1 << 10 } else { 256 << 10 };
/// The text before the items (`apiVersion: v1` and the `items:` key) must be within this.
const MAX_HEAD: usize = 1 << 20;
/// Nesting inside an item beyond which the whole file is read instead (the parsers' limits count from the top).
const MAX_ITEM_DEPTH: usize = 48;

/// One item's text: a range of the block it was read in (not copied; the block is dropped once its last item is
/// decoded).
struct ItemText {
    block: Arc<String>,
    range: std::ops::Range<usize>,
}

impl std::ops::Deref for ItemText {
    type Target = str;
    fn deref(&self) -> &str {
        &self.block[self.range.clone()]
    }
}

/// One item's text.
struct Item {
    text: ItemText,
    /// Lines in the file before the item's text (YAML).
    line: u64,
    index: usize,
}

type Done = (Vec<Loaded>, Vec<LoadError>);

/// Loads `reader` (the file `name`, `size` bytes) if it is one plain List; `Ok(None)` otherwise.
pub(super) fn load(
    reader: impl Read,
    name: &str,
    size: u64,
    options: &LoadOptions<'_>,
) -> std::io::Result<Option<Done>> {
    let json = name.to_ascii_lowercase().ends_with(".json");
    let mut source = Source { reader, pending: Vec::new(), read: 0, first: true };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
    let (work_tx, work_rx) = mpsc::sync_channel::<(usize, Vec<Item>)>(threads * 2);
    let work_rx = Arc::new(Mutex::new(work_rx));
    let (done_tx, done_rx) = mpsc::channel::<(usize, Option<Done>)>();
    let compact_pods = options.compact_pods;
    std::thread::scope(|scope| {
        let mut workers = Vec::new();
        for _ in 0..threads {
            let work_rx = Arc::clone(&work_rx);
            let done_tx = done_tx.clone();
            let spawned = std::thread::Builder::new()
                .name("manifest-items".into())
                .stack_size(LOADER_STACK_BYTES)
                .spawn_scoped(scope, move || {
                    let mut specs = SpecInterner::new();
                    loop {
                        let next = work_rx.lock().map(|rx| rx.recv());
                        let Ok(Ok((batch_no, items))) = next else { break };
                        let done = decode_batch(items, name, json, compact_pods.then_some(&mut specs));
                        if done_tx.send((batch_no, done)).is_err() {
                            break;
                        }
                    }
                });
            match spawned {
                Ok(handle) => workers.push(handle),
                Err(e) => return Err(e),
            }
        }
        drop(done_tx);
        let mut results: BTreeMap<usize, Done> = BTreeMap::new();
        let mut failed = false;
        let collect = |results: &mut BTreeMap<usize, Done>, failed: &mut bool, block: bool| {
            loop {
                let next = if block { done_rx.recv().ok() } else { done_rx.try_recv().ok() };
                match next {
                    Some((batch_no, Some(done))) => {
                        results.insert(batch_no, done);
                    }
                    Some((_, None)) => *failed = true,
                    None => break,
                }
            }
        };
        let mut batches = 0;
        let split = {
            let mut send = |items: Vec<Item>| -> bool {
                if work_tx.send((batches, items)).is_err() {
                    return false;
                }
                batches += 1;
                collect(&mut results, &mut failed, false);
                !failed
            };
            let progress = |read: u64| {
                if let Some(report) = options.progress {
                    report(name, read, size);
                }
            };
            if json {
                split_json(&mut source, &mut send, &progress)
            } else {
                split_yaml(&mut source, &mut send, &progress)
            }
        };
        drop(work_tx);
        collect(&mut results, &mut failed, true);
        for w in workers {
            if let Err(payload) = w.join() {
                std::panic::resume_unwind(payload);
            }
        }
        let Some(head) = split? else { return Ok(None) };
        if failed || results.len() != batches {
            return Ok(None);
        }
        if !plain_list(&head) {
            return Ok(None);
        }
        let mut loaded = Vec::new();
        let mut errors = Vec::new();
        for (_, (l, e)) in results {
            loaded.extend(l);
            errors.extend(e);
        }
        Ok(Some((loaded, errors)))
    })
}

/// The List's own fields: `apiVersion` and `kind` (of a list) set, `items` the `[]` put in place of the items.
fn plain_list(head: &Value) -> bool {
    let Value::Object(map) = head else { return false };
    let text = |field: &str| map.get(field).and_then(Value::as_str).unwrap_or_default();
    !text("apiVersion").is_empty()
        && is_list_kind(text("kind"))
        && map.get("items").and_then(Value::as_array).is_some_and(Vec::is_empty)
}

/// A pod the shortcut decoded, as the general path would have loaded it (compact when asked).
fn pod_loaded(pod: k8s_openapi::api::core::v1::Pod, origin: Origin, specs: Option<&mut SpecInterner>) -> Loaded {
    let object = Object::Pod(Box::new(pod));
    let object = match specs {
        Some(specs) => compact(object, specs),
        None => object,
    };
    Loaded { origin, object }
}

/// Decodes the items of one batch; `None` if one of them is not valid YAML/JSON on its own.
fn decode_batch(items: Vec<Item>, name: &str, json: bool, mut specs: Option<&mut SpecInterner>) -> Option<Done> {
    let mut loaded = Vec::new();
    let mut errors = Vec::new();
    for item in items {
        let origin = Origin { file: name.to_owned(), document: 0, item: Some(item.index) };
        if json && let Some(pod) = direct::pod_from_json(&item.text) {
            loaded.push(pod_loaded(pod, origin, specs.as_deref_mut()));
            continue;
        }
        let doc = if json {
            let value: Value = serde_json::from_str(&item.text).ok()?;
            // Items cut by their closing line were not measured while cut: one nested deeper than the parser
            // allows in the whole file is read with the whole file.
            if depth(&value) > MAX_ITEM_DEPTH {
                return None;
            }
            Document { value, source: None }
        } else if let Some(entry) = block::parse_entry(&item.text, item.line + 2) {
            if let Some(pod) = direct::pod_from_node(&entry) {
                loaded.push(pod_loaded(pod, origin, specs.as_deref_mut()));
                continue;
            }
            Document { value: entry.to_value(), source: Some(entry) }
        } else {
            let mut nodes = parse_yaml_nodes(&format!("items:\n{}", &*item.text), name).ok()?;
            // The text is one sequence entry under an `items:` key (so it is as deep as in the file, for the
            // parser's nesting limit): `items:\n- apiVersion: ...`.
            let [node] = &mut nodes[..] else { return None };
            let super::YNode::Map(fields) = &mut node.node else { return None };
            let [(_, items)] = &mut fields[..] else { return None };
            let super::YNode::Seq(entries) = &mut items.node else { return None };
            let [entry] = &mut entries[..] else { return None };
            let mut entry = std::mem::replace(entry, SNode { line: 0, node: super::YNode::Null });
            entry.shift(item.line);
            Document { value: entry.to_value(), source: Some(entry) }
        };
        let before = loaded.len();
        load_document(doc, origin, &mut loaded, &mut errors);
        if let Some(specs) = specs.as_deref_mut() {
            for l in &mut loaded[before..] {
                if matches!(l.object, Object::Pod(_)) {
                    let object = std::mem::replace(&mut l.object, Object::Namespace(Box::default()));
                    l.object = compact(object, specs);
                }
            }
        }
    }
    Some((loaded, errors))
}

/// A new block: the text from `pos` on (an item the block's end cut) and the next block read; `pos` is then 0.
/// False when the reader gives up.
fn refill(
    buf: &mut Arc<String>,
    pos: &mut usize,
    fill: &mut dyn FnMut(&mut String, &mut bool) -> std::io::Result<bool>,
    eof: &mut bool,
) -> std::io::Result<bool> {
    let mut next = String::with_capacity(buf.len() - *pos + BLOCK + 4);
    next.push_str(&buf[*pos..]);
    *pos = 0;
    let more = fill(&mut next, eof)?;
    *buf = Arc::new(next);
    Ok(more)
}

/// The nesting of a JSON value (a scalar is 0).
fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// The file's bytes as UTF-8 text, a block at a time.
struct Source<R> {
    reader: R,
    /// Bytes read but not yet text (the start of a character cut by the block's end).
    pending: Vec<u8>,
    read: u64,
    first: bool,
}

impl<R: Read> Source<R> {
    /// Appends the next block to `buf`: `Ok(Some(true))` when something was added, `Ok(Some(false))` at the end,
    /// `Ok(None)` when the bytes are not plain UTF-8 (the whole-file reader says why).
    fn fill(&mut self, buf: &mut String) -> std::io::Result<Option<bool>> {
        let n = (&mut self.reader).take(BLOCK as u64).read_to_end(&mut self.pending)?;
        self.read += n as u64;
        if n == 0 {
            return Ok(if self.pending.is_empty() { Some(false) } else { None });
        }
        if self.first {
            self.first = false;
            // UTF-16 and UTF-32 (a zero byte or a byte-order mark among the first bytes) are named by the
            // whole-file reader; a UTF-8 byte-order mark is dropped as it drops it.
            let head = &self.pending[..self.pending.len().min(4)];
            if head.contains(&0) || head.starts_with(&[0xFF]) || head.starts_with(&[0xFE]) {
                return Ok(None);
            }
            if self.pending.starts_with(&[0xEF, 0xBB, 0xBF]) {
                self.pending.drain(..3);
            }
        }
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => return Ok(None),
        };
        let text = std::str::from_utf8(&self.pending[..valid]).unwrap_or_default();
        buf.push_str(text);
        self.pending.drain(..valid);
        Ok(Some(true))
    }
}

/// Batches items for the workers.
struct Batcher<'a> {
    items: Vec<Item>,
    bytes: usize,
    next_index: usize,
    send: &'a mut dyn FnMut(Vec<Item>) -> bool,
}

impl Batcher<'_> {
    /// Queues an item; false once the workers have given up.
    fn push(&mut self, text: ItemText, line: u64) -> bool {
        self.bytes += text.len();
        self.items.push(Item { text, line, index: self.next_index });
        self.next_index += 1;
        if self.bytes >= BATCH_BYTES { self.flush() } else { true }
    }

    fn flush(&mut self) -> bool {
        self.bytes = 0;
        if self.items.is_empty() {
            return true;
        }
        (self.send)(std::mem::take(&mut self.items))
    }
}

/// A line that may end the document or start a directive: the file is read whole instead.
fn document_marker(line: &str) -> bool {
    line.starts_with("---") || line.starts_with("...") || line.starts_with('%')
}

/// Blank or only a comment.
fn blank(line: &str) -> bool {
    let t = line.trim_start_matches([' ', '\t']);
    t.is_empty() || t.starts_with('#') || t == "\n" || t == "\r\n" || t == "\r"
}

/// The column of a block sequence entry (`- x`, `-`), if `line` is one.
fn entry_column(line: &str) -> Option<usize> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    let rest = &line[indent..];
    let after = rest.strip_prefix('-')?;
    (after.is_empty() || after.starts_with([' ', '\n', '\r'])).then_some(indent)
}

/// Splits a YAML List. Returns the List without its items, or `None` to give up.
///
/// Long because it is one pass of a line scanner whose state (the block being read, the current item's start
/// inside it, the line number, the Head/First/Items/Tail state) changes together on every line; the block
/// refill keeps the current item's text across block boundaries by moving those offsets. Split into functions,
/// each would take and return that whole state, which hides rather than names the one loop. The small
/// line tests (`blank`, `entry_column`, `document_marker`) are already apart.
fn split_yaml<R: Read>(
    source: &mut Source<R>,
    send: &mut dyn FnMut(Vec<Item>) -> bool,
    progress: &dyn Fn(u64),
) -> std::io::Result<Option<Value>> {
    enum State {
        Head,
        First,
        Items { column: usize },
        Tail,
    }
    let mut state = State::Head;
    let mut batcher = Batcher { items: Vec::new(), bytes: 0, next_index: 0, send };
    let mut head = String::new();
    // The current item is `buf[item_start..]` up to the line being read: handed to the workers as a range of the
    // block, not copied.
    let mut item_start = 0usize;
    let mut item_line = 0u64;
    let mut buf: Arc<String> = Arc::new(String::new());
    let mut pos = 0usize;
    let mut line_no = 0u64;
    let mut eof = false;
    loop {
        if !eof {
            // The next block: what is left of this one (from the current item's start, or the cut line) first.
            let keep = if matches!(state, State::Items { .. }) { item_start } else { pos };
            let mut next = String::with_capacity(buf.len() - keep + BLOCK + 4);
            next.push_str(&buf[keep..]);
            match source.fill(&mut next)? {
                None => return Ok(None),
                Some(more) => eof = !more,
            }
            pos -= keep;
            item_start -= keep.min(item_start);
            buf = Arc::new(next);
            progress(source.read);
        }
        while pos < buf.len() {
            if matches!(state, State::Items { column: 0 }) {
                // Under an entry at column 0, every line that starts with a space is the entry's (indented, or
                // blank): skip a run of them at once, by newlines alone.
                let bytes = buf.as_bytes();
                while bytes.get(pos) == Some(&b' ') {
                    let Some(n) = memchr::memchr(b'\n', &bytes[pos..]) else { break };
                    pos += n + 1;
                    line_no += 1;
                }
                if pos >= buf.len() {
                    break;
                }
            }
            let line_start = pos;
            let end = match memchr::memchr(b'\n', &buf.as_bytes()[pos..]) {
                Some(i) => pos + i + 1,
                None if eof => buf.len(),
                None => break,
            };
            let line = &buf[pos..end];
            pos = end;
            let this_line = line_no;
            line_no += 1;
            if matches!(state, State::Items { .. } | State::First)
                && !blank(line)
                && let Some(column) = entry_column(line)
                && matches!(state, State::First) | matches!(state, State::Items { column: c } if c == column)
            {
                if matches!(state, State::Items { .. })
                    && !batcher.push(ItemText { block: Arc::clone(&buf), range: item_start..line_start }, item_line)
                {
                    return Ok(None);
                }
                state = State::Items { column };
                // Numbered as if under an `items:` line above it (how a declined item is parsed).
                item_line = this_line - 1;
                item_start = line_start;
                continue;
            }
            match state {
                State::Head => {
                    if document_marker(line) {
                        return Ok(None);
                    }
                    if line.trim_end() == "items:" {
                        // The items' place, on the same line, so the List's own fields keep their lines.
                        head.push_str("items: []\n");
                        state = State::First;
                    } else {
                        head.push_str(line);
                        if head.len() > MAX_HEAD {
                            return Ok(None);
                        }
                    }
                }
                State::First => {
                    if !blank(line) {
                        return Ok(None);
                    }
                    head.push('\n');
                }
                State::Items { column } => {
                    let indent = line.len() - line.trim_start_matches(' ').len();
                    if blank(line) || indent > column {
                        continue;
                    }
                    // The end of the items: the List's next field, at the top level.
                    if line.starts_with([' ', '\t', '-']) || document_marker(line) {
                        return Ok(None);
                    }
                    if !batcher.push(ItemText { block: Arc::clone(&buf), range: item_start..line_start }, item_line) {
                        return Ok(None);
                    }
                    // Empty lines keep the List's remaining fields on their own lines.
                    let lines_so_far = head.bytes().filter(|b| *b == b'\n').count() as u64;
                    head.extend(std::iter::repeat_n('\n', this_line.saturating_sub(lines_so_far) as usize));
                    head.push_str(line);
                    state = State::Tail;
                }
                State::Tail => {
                    if document_marker(line) {
                        return Ok(None);
                    }
                    head.push_str(line);
                }
            }
        }
        if matches!(state, State::Head) && head.len() > MAX_HEAD {
            return Ok(None);
        }
        if eof && pos >= buf.len() {
            break;
        }
    }
    match state {
        State::Items { .. } => {
            if !batcher.push(ItemText { block: Arc::clone(&buf), range: item_start..buf.len() }, item_line) {
                return Ok(None);
            }
        }
        State::Tail => {}
        State::Head | State::First => return Ok(None),
    }
    if !batcher.flush() {
        return Ok(None);
    }
    // The List itself, parsed as the whole file would be: one document, a mapping.
    let Ok(nodes) = parse_yaml_nodes(&head, "") else { return Ok(None) };
    let mut docs = nodes.into_iter().filter(|n| !matches!(n.node, super::YNode::Null));
    match (docs.next(), docs.next()) {
        (Some(doc), None) => Ok(Some(doc.to_value())),
        _ => Ok(None),
    }
}

/// The end of the JSON string starting at `start` (just past its closing quote), `None` if the text ends first.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    loop {
        let j = i + memchr2(b'"', b'\\', &bytes[i..])?;
        if bytes[j] == b'\\' {
            i = j + 2;
            if i > bytes.len() {
                return None;
            }
        } else {
            return Some(j + 1);
        }
    }
}

fn memchr2(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
    memchr::memchr2(a, b, hay)
}

/// The line an item of pretty-printed JSON ends with, up to its `}`: a newline, the indentation of the item's
/// opening `{`, and `}` (`"\n        }"` in kubectl's output), if the `{` at `start` begins its own line.
fn closing_marker(bytes: &[u8], start: usize) -> Option<Vec<u8>> {
    let line_start = memchr::memrchr(b'\n', &bytes[..start])? + 1;
    let indent = &bytes[line_start..start];
    if indent.is_empty() || indent.iter().any(|b| *b != b' ') {
        return None;
    }
    let mut marker = Vec::with_capacity(indent.len() + 2);
    marker.push(b'\n');
    marker.extend_from_slice(indent);
    marker.push(b'}');
    Some(marker)
}

/// Where the item starting at `start` ends, found by its closing line alone (`finder` looks for the
/// [`closing_marker`]): `None` if the text ends first. A newline is never inside a JSON string, so the marker is
/// always structure; if it is not the item's own closing brace (JSON indented some other way), the text cut here
/// is not one JSON value, fails to parse on its own, and the file is read whole.
fn item_end_by_marker(bytes: &[u8], start: usize, finder: &memchr::memmem::Finder<'_>) -> Option<usize> {
    finder.find(&bytes[start..]).map(|at| start + at + finder.needle().len())
}

/// Where the JSON value starting at `start` ends: `Ok(None)` if the text ends first, `Err` if it is not one
/// this splitter reads (too deep, or not an object or array).
fn value_end(bytes: &[u8], start: usize) -> Result<Option<usize>, ()> {
    if !matches!(bytes[start], b'{' | b'[') {
        return Err(());
    }
    let mut depth = 0usize;
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => match string_end(bytes, i) {
                Some(end) => {
                    i = end;
                    continue;
                }
                None => return Ok(None),
            },
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_ITEM_DEPTH {
                    return Err(());
                }
            }
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some(i + 1));
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(None)
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// Splits a JSON List: `{... "items": [ {...}, {...} ] ...}`. Returns the List without its items, or `None`.
///
/// Long because, as [`split_yaml`], it is one byte scanner over refilled blocks whose offsets (the head's end,
/// each item's start and end, the refill point) move together; the value-boundary tests (`value_end`,
/// `string_end`, `item_end_by_marker`, `skip_ws`) are already functions of their own.
fn split_json<R: Read>(
    source: &mut Source<R>,
    send: &mut dyn FnMut(Vec<Item>) -> bool,
    progress: &dyn Fn(u64),
) -> std::io::Result<Option<Value>> {
    let mut batcher = Batcher { items: Vec::new(), bytes: 0, next_index: 0, send };
    let mut buf = String::new();
    let mut eof = false;
    let mut fill = |buf: &mut String, eof: &mut bool| -> std::io::Result<bool> {
        match source.fill(buf)? {
            None => Ok(false),
            Some(more) => {
                *eof = !more;
                progress(source.read);
                Ok(true)
            }
        }
    };
    if !fill(&mut buf, &mut eof)? {
        return Ok(None);
    }
    // The head: `{`, then members up to `"items": [`, each key a plain string.
    let bytes = buf.as_bytes();
    let mut i = skip_ws(bytes, 0);
    if bytes.get(i) != Some(&b'{') {
        return Ok(None);
    }
    i += 1;
    let items_at = loop {
        i = skip_ws(bytes, i);
        if bytes.get(i) != Some(&b'"') {
            return Ok(None);
        }
        let Some(key_end) = string_end(bytes, i) else { return Ok(None) };
        let key_start = i;
        let key = &buf[i..key_end];
        i = skip_ws(bytes, key_end);
        if bytes.get(i) != Some(&b':') {
            return Ok(None);
        }
        i = skip_ws(bytes, i + 1);
        if i >= bytes.len() {
            return Ok(None);
        }
        if key == "\"items\"" {
            if bytes[i] != b'[' {
                return Ok(None);
            }
            break (key_start, i + 1);
        }
        // Another member: a scalar up to the next `,`, or an object or array.
        let end = if matches!(bytes[i], b'{' | b'[') {
            match value_end(bytes, i) {
                Ok(Some(end)) => end,
                _ => return Ok(None),
            }
        } else if bytes[i] == b'"' {
            match string_end(bytes, i) {
                Some(end) => end,
                None => return Ok(None),
            }
        } else {
            match bytes[i..].iter().position(|b| matches!(b, b',' | b'}')) {
                Some(n) => i + n,
                None => return Ok(None),
            }
        };
        i = skip_ws(bytes, end);
        if bytes.get(i) != Some(&b',') {
            return Ok(None);
        }
        i += 1;
    };
    let (key_start, mut pos) = items_at;
    let mut head = format!("{}\"items\": []", &buf[..key_start]);
    // The items are handed to the workers as ranges of the block they were read in, so their text is not copied
    // again; a block is dropped once its last item is decoded.
    let mut buf = Arc::new(buf);
    // The items, each an object, separated by commas.
    let mut expect_item = false;
    // Pretty-printed JSON (kubectl's): each item ends with a line holding its closing brace alone, at the
    // indentation of its opening one, found far faster than by matching brackets.
    let mut marker: Option<memchr::memmem::Finder<'static>> = None;
    let tail_start = loop {
        let bytes = buf.as_bytes();
        pos = skip_ws(bytes, pos);
        if pos >= bytes.len() {
            if eof || !refill(&mut buf, &mut pos, &mut fill, &mut eof)? {
                return Ok(None);
            }
            continue;
        }
        match bytes[pos] {
            b']' if !expect_item && batcher.next_index > 0 => break pos + 1,
            b']' if batcher.next_index == 0 => break pos + 1,
            b',' if !expect_item && batcher.next_index > 0 => {
                expect_item = true;
                pos += 1;
            }
            b'{' if expect_item || batcher.next_index == 0 => {
                if batcher.next_index == 0 {
                    marker = closing_marker(bytes, pos).map(|m| memchr::memmem::Finder::new(&m).into_owned());
                }
                let found = match &marker {
                    Some(finder) => Ok(item_end_by_marker(bytes, pos, finder)),
                    None => value_end(bytes, pos),
                };
                match found {
                    Ok(Some(end)) => {
                        if !batcher.push(ItemText { block: Arc::clone(&buf), range: pos..end }, 0) {
                            return Ok(None);
                        }
                        expect_item = false;
                        pos = end;
                    }
                    Ok(None) if !eof => {
                        if !refill(&mut buf, &mut pos, &mut fill, &mut eof)? {
                            return Ok(None);
                        }
                    }
                    _ => return Ok(None),
                }
            }
            _ => return Ok(None),
        }
    };
    if !batcher.flush() {
        return Ok(None);
    }
    // The rest of the List (`"kind": "List", "metadata": {...}}`) is small: read it whole.
    let mut buf = buf[tail_start..].to_owned();
    while !eof {
        if !fill(&mut buf, &mut eof)? {
            return Ok(None);
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
    }
    head.push_str(&buf);
    // A second `items` (the last one wins when the whole file is read), or a key spelt with escapes: read whole.
    if head.matches("\"items\"").count() != 1 || head.contains('\\') {
        return Ok(None);
    }
    Ok(serde_json::from_str(&head).ok())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::super::{LoadOptions, load_str_all_with, load_streamed};

    /// The streamed and the whole-text loads of `text`, as text (objects by `Debug`, errors by `Display`), or
    /// `None` when the streamed reader gives up.
    fn both(text: &str, name: &str, compact_pods: bool) -> Option<(String, String)> {
        let options = LoadOptions { compact_pods, ..LoadOptions::default() };
        let (fast, fast_errors) = load_streamed(text.as_bytes(), name, &options)?;
        let (whole, whole_errors) = load_str_all_with(text, name, &options);
        let messages = |e: &[super::LoadError]| e.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
        assert_eq!(format!("{fast:#?}"), format!("{whole:#?}"), "{name}: objects differ");
        assert_eq!(messages(&fast_errors), messages(&whole_errors), "{name}: errors differ");
        Some((format!("{fast:?}"), messages(&fast_errors)))
    }

    fn dump(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dumps").join(name);
        std::fs::read_to_string(path).expect("dump fixture")
    }

    #[test]
    fn kubectl_dumps_load_as_the_whole_text_does() {
        for name in ["pods-7.json", "pods-7.yaml"] {
            let text = dump(name);
            for compact in [false, true] {
                let (objects, errors) = both(&text, name, compact).expect("a kubectl dump is streamed");
                assert_eq!(errors, "", "{name}");
                assert_eq!(objects.matches("origin: Origin").count(), 10, "{name}: pool, deployment, set, 7 pods");
            }
            assert!(both(&text, name, true).expect("streamed").0.contains("CompactPod("));
        }
        // The same dumps as other writers lay them out.
        let yaml = dump("pods-7.yaml");
        let variants = [
            ("crlf.yaml", yaml.replace('\n', "\r\n")),
            ("indented.yaml", yaml.replace("\n- ", "\n  - ").replace("\n  ", "\n    ").replace("\n    - ", "\n  - ")),
            ("comments.yaml", format!("# kubectl get pods -A -o yaml\n{}", yaml.replace("\n- ", "\n# an item\n- "))),
        ];
        for (name, text) in &variants {
            both(text, name, false).unwrap_or_else(|| panic!("{name} is streamed"));
        }
        let json: serde_json::Value = serde_json::from_str(&dump("pods-7.json")).expect("JSON");
        let compact_json = serde_json::to_string(&json).expect("JSON");
        both(&compact_json, "compact.json", false).expect("single-line JSON is streamed");
        // Ending inside the last item, without a final newline; a blank line and a comment inside an item.
        let unterminated = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n\n  metadata:\n\
                            # a comment\n    name: x\n- apiVersion: v1\n  kind: Namespace\n  metadata:\n    name: y";
        let (objects, errors) = both(unterminated, "unterminated.yaml", false).expect("streamed");
        assert!(errors.is_empty() && objects.matches("origin: Origin").count() == 2, "{objects} {errors}");
        let two_spaces = serde_json::to_string_pretty(&json).expect("JSON");
        both(&two_spaces, "two-spaces.json", true).expect("JSON indented by two is streamed");
    }

    /// Items of indented JSON are cut at the line closing them; where that line is not the item's own closing
    /// brace, or an item is nested deeper than the whole file may be, the file is read whole, so the results are
    /// still the whole text's.
    #[test]
    fn json_items_cut_at_a_misleading_closing_line_are_read_whole() {
        let misleading = "{\n  \"apiVersion\": \"v1\",\n  \"items\": [\n    {\n    \"metadata\": {\"name\": \"a\"\n    },\n    \
                          \"apiVersion\": \"v1\", \"kind\": \"Pod\"\n    }\n  ],\n  \"kind\": \"List\"\n}\n";
        assert_eq!(both(misleading, "misleading.json", false), None);
        let (loaded, errors) = load_str_all_with(misleading, "misleading.json", &LoadOptions::default());
        assert!(errors.is_empty() && loaded.len() == 1, "{errors:?}");

        let nested = format!("{}1{}", "[".repeat(60), "]".repeat(60));
        let deep = format!(
            "{{\n  \"apiVersion\": \"v1\",\n  \"items\": [\n    {{\n      \"apiVersion\": \"example.com/v1\", \"kind\": \"Thing\", \
             \"spec\": {nested}\n    }}\n  ],\n  \"kind\": \"List\"\n}}\n"
        );
        assert_eq!(both(&deep, "deep.json", false), None);
    }

    #[test]
    fn problems_inside_items_are_reported_as_the_whole_text_reports_them() {
        let yaml = dump("pods-7.yaml");
        // An unknown field in the fifth item: named with its line.
        let bad = yaml.replacen("  kind: Pod\n", "  kind: Pod\n  bogus: 1\n", 2);
        let (_, errors) = both(&bad, "bad.yaml", false).expect("streamed");
        assert!(errors.contains("bad.yaml: document 0 item 3: Pod/app-0-") && errors.contains("(line "), "{errors}");
        let json = dump("pods-7.json");
        let bad = json.replacen("\"kind\": \"Pod\",", "\"kind\": \"Pod\", \"bogus\": 1,", 1);
        let (_, errors) = both(&bad, "bad.json", false).expect("streamed");
        assert!(errors.contains("bad.json: document 0 item 3: Pod/") && errors.contains("bogus"), "{errors}");
        // Not plain Lists, or not valid: read whole (and so reported exactly as before).
        let given_up = [
            ("syntax.yaml", yaml.replacen("  kind: Pod\n", "  kind: [Pod\n", 1)),
            ("alias.yaml", yaml.replacen("name: default", "name: &n default", 1).replacen("name: c", "name: *n", 1)),
            ("two.yaml", format!("{yaml}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: x}}\n")),
            ("notlist.yaml", yaml.replace("kind: List", "kind: Pod")),
            ("syntax.json", json.replacen("\"kind\": \"Pod\",", "\"kind\": \"Pod\",,", 1)),
            ("twice.json", json.replacen("\"kind\": \"List\"", "\"kind\": \"List\", \"items\": []", 1)),
            ("trailing.json", format!("{json} x")),
            ("notlist.json", json.replace("\"kind\": \"List\"", "\"kind\": \"Pod\"")),
            ("array.json", format!("[{json}]")),
        ];
        for (name, text) in &given_up {
            assert_eq!(both(text, name, false), None, "{name}");
        }
    }

    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                files(&path, out);
            } else if super::super::is_manifest_file(&path) {
                out.push(path);
            }
        }
    }

    #[test]
    fn fixtures_and_examples_load_as_the_whole_text_does() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut paths = Vec::new();
        files(&root.join("tests/fixtures"), &mut paths);
        files(&root.join("../../examples"), &mut paths);
        assert!(paths.len() > 20, "{paths:?}");
        let mut streamed = 0;
        for path in paths {
            let Ok(text) = std::fs::read_to_string(&path) else { continue };
            let name = path.display().to_string();
            streamed += usize::from(both(&text, &name, false).is_some());
            both(&text, &name, true);
        }
        assert!(streamed >= 2, "the dumps at least");
    }
}

#[cfg(test)]
mod block_tests {
    use super::super::{SNode, YNode, block, parse_yaml_nodes};

    /// Every node's line and value, in order.
    fn flat(node: &SNode, path: String, out: &mut Vec<String>) {
        let value = match &node.node {
            YNode::Seq(items) => {
                for (i, n) in items.iter().enumerate() {
                    flat(n, format!("{path}[{i}]"), out);
                }
                "seq".to_owned()
            }
            YNode::Map(entries) => {
                for (k, n) in entries {
                    flat(n, format!("{path}.{k}"), out);
                }
                "map".to_owned()
            }
            other => format!("{:?}", SNode { line: 0, node: clone(other) }.to_value()),
        };
        out.push(format!("{path} @{}: {value}", node.line));
    }

    fn clone(node: &YNode) -> YNode {
        super::super::clone_node(node)
    }

    /// The general parser's tree of an entry (`- ...`, starting on line `first_line`).
    fn general(text: &str, first_line: u64) -> SNode {
        let padded = format!("{}items:\n{text}", "\n".repeat(first_line as usize - 2));
        let mut nodes = parse_yaml_nodes(&padded, "t.yaml").expect("valid YAML");
        let YNode::Map(mut fields) = nodes.remove(0).node else { panic!("a mapping") };
        let YNode::Seq(mut items) = fields.remove(0).1.node else { panic!("a sequence") };
        items.remove(0)
    }

    fn same(text: &str) -> bool {
        let Some(fast) = block::parse_entry(text, 5) else { return false };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        flat(&fast, String::new(), &mut a);
        flat(&general(text, 5), String::new(), &mut b);
        assert_eq!(a.join("\n"), b.join("\n"), "{text}");
        true
    }

    #[test]
    fn the_block_parser_gives_the_general_parsers_tree_or_declines() {
        let dump = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dumps/pods-7.yaml"),
        )
        .expect("dump");
        let body = dump.split_once("items:\n").expect("items").1;
        let mut entries = 0;
        for entry in body.split("\n- ").map(|e| if e.starts_with("- ") { e.to_owned() } else { format!("- {e}") }) {
            let entry = entry.split("\nkind: List").next().unwrap_or_default();
            assert!(same(&format!("{entry}\n")), "declined: {entry}");
            entries += 1;
        }
        assert_eq!(entries, 10);
        let accepted = [
            "- a: 1\n  b: -2\n  c: x y\n  d: '0'\n  e: \"q\"\n  f: 'it''s'\n  g: 100m\n  h: 128Mi\n  i: /dev/x\n",
            "- a:\n  - x\n  - w: 1\n    z: {}\n  b: []\n  c: true\n  d: false\n  e: null\n  f: ~\n",
            "- a:\n    b:\n      c: 1\n  d: 2\n",
            "- x\n",
            "-   a: 1\n    b: 2\n",
            "- a: 2026-11-01T00:00:00Z\n  b: registry.k8s.io/pause:3.9\n",
            "- a: 0000000008\n  b: 000000000a\n  c: 00\n  d: 7d4b9c8f6\n  e: 0\n  f: abc1e5\n",
            "- a: 000000000e\n  b: 1e\n  c: 12e5x\n  d: 3e+\n  e: 1.2.3\n  f: 5d4f8b7c9\n  g: 1x2\n  h: 2026-11-01\n",
        ];
        for text in accepted {
            assert!(same(text), "declined: {text}");
        }
        let declined = [
            "- a: 1.5\n",
            "- a: 0x1F\n",
            "- a: yes\n",
            "- a: True\n",
            "- a: 1e3\n",
            "- a: 1E-3\n",
            "- a: 1_000\n",
            "- a: 2.\n",
            "- a: 0b101\n",
            "- a: 0o17\n",
            "- a: 12e+5\n",
            "- a: .inf\n",
            "- a: &x 1\n",
            "- a: *x\n",
            "- a: !!str 1\n",
            "- a: [1]\n",
            "- a: {b: 1}\n",
            "- a: |\n    x\n",
            "- a: x # c\n",
            "- a: long\n    text\n",
            "- a:\n",
            "- a: 1\n  a: 2\n",
            "- 'a': 1\n",
            "- 1: x\n",
            "- a: \"x\\ny\"\n",
            "- - a\n",
            "- a: b: c\n",
            "- a: -x\n",
            "- a:\tb\n",
            "- a: 1\n - b\n",
        ];
        for text in declined {
            assert!(block::parse_entry(text, 5).is_none(), "accepted: {text}");
        }
    }
}
