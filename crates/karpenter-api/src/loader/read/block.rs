//! A parser for the plain block YAML `kubectl get -o yaml` (and PyYAML's `safe_dump`) writes: nested block
//! mappings and sequences, plain scalars that are plainly strings, integers, `true`/`false`/`null`, one-line
//! quoted strings without escapes, and `{}`/`[]`. It is several times faster than the general parser, and
//! declines (`None`) anything else: comments after a value, multi-line scalars, anchors, tags, flow collections,
//! scalars whose type a reader could doubt (`1.5`, `0x1F`, `yes`). The caller then parses the text with the
//! general parser, so a result is always the tree that parser gives.

use super::{SNode, YNode};

/// Nesting beyond which the text is left to the general parser (and its limits).
const MAX_DEPTH: usize = 40;

struct Line<'a> {
    indent: usize,
    text: &'a str,
    /// 1-based.
    no: u64,
}

/// Parses one entry of a block sequence: `text` is the entry's lines (`- apiVersion: v1\n  kind: Pod\n...`), the
/// first of them line `first_line` (1-based) of the file.
pub(super) fn parse_entry(text: &str, first_line: u64) -> Option<SNode> {
    let mut lines = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        if raw.contains(['\t', '\r']) || raw.contains(" #") {
            return None;
        }
        let content = raw.trim_start_matches(' ');
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        lines.push(Line {
            indent: raw.len() - content.len(),
            text: content.trim_end_matches(' '),
            no: first_line + i as u64,
        });
    }
    let mut parser = Parser { lines, i: 0, depth: 0 };
    let first = parser.lines.first()?;
    if !is_entry(first.text) {
        return None;
    }
    let indent = first.indent;
    let node = parser.seq(indent)?;
    // Exactly one entry, and nothing after it.
    match node.node {
        YNode::Seq(mut items) if items.len() == 1 && parser.i == parser.lines.len() => items.pop(),
        _ => None,
    }
}

fn is_entry(text: &str) -> bool {
    text == "-" || text.starts_with("- ")
}

struct Parser<'a> {
    lines: Vec<Line<'a>>,
    i: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    /// The block node starting at the current line (a sequence if it is an entry, else a mapping).
    fn block(&mut self) -> Option<SNode> {
        let line = self.lines.get(self.i)?;
        let indent = line.indent;
        if is_entry(line.text) { self.seq(indent) } else { self.map(indent) }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    fn seq(&mut self, indent: usize) -> Option<SNode> {
        self.enter()?;
        let line_no = self.lines[self.i].no;
        let mut items = Vec::new();
        while let Some(line) = self.lines.get(self.i) {
            if line.indent < indent || (line.indent == indent && !is_entry(line.text)) {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let rest = &line.text[1..];
            let spaces = rest.len() - rest.trim_start_matches(' ').len();
            let rest = rest.trim_start_matches(' ');
            if rest.is_empty() {
                // `-` alone: the entry is the block below, or null.
                let no = line.no;
                self.i += 1;
                match self.lines.get(self.i) {
                    Some(next) if next.indent > indent => items.push(self.block()?),
                    _ => items.push(SNode { line: no, node: YNode::Null }),
                }
                continue;
            }
            if is_entry(rest) {
                return None;
            }
            if key_of(rest).is_some() {
                // `- key: value`: a mapping whose keys line up with this first one.
                let column = indent + 1 + spaces;
                self.lines[self.i] = Line { indent: column, text: rest, no: line.no };
                items.push(self.map(column)?);
            } else {
                items.push(SNode { line: line.no, node: scalar(rest)? });
                self.i += 1;
            }
        }
        self.depth -= 1;
        Some(SNode { line: line_no, node: YNode::Seq(items) })
    }

    fn map(&mut self, indent: usize) -> Option<SNode> {
        self.enter()?;
        let line_no = self.lines[self.i].no;
        let mut entries: Vec<(String, SNode)> = Vec::new();
        while let Some(line) = self.lines.get(self.i) {
            if line.indent < indent || (line.indent == indent && is_entry(line.text)) {
                break;
            }
            if line.indent > indent {
                return None;
            }
            let (key, value) = key_of(line.text)?;
            // A duplicate key is an error the general parser words.
            if entries.len() < 64 && entries.iter().any(|(k, _)| k == key) || entries.len() >= 64 {
                return None;
            }
            let no = line.no;
            self.i += 1;
            let node = if value.is_empty() {
                match self.lines.get(self.i) {
                    Some(next) if next.indent > indent || (next.indent == indent && is_entry(next.text)) => {
                        self.block()?
                    }
                    _ => return None,
                }
            } else {
                SNode { line: no, node: scalar(value)? }
            };
            entries.push((key.to_owned(), node));
        }
        self.depth -= 1;
        Some(SNode { line: line_no, node: YNode::Map(entries) })
    }
}

/// `key: value` or `key:` with a plain key that is plainly a string: (key, value text).
fn key_of(text: &str) -> Option<(&str, &str)> {
    let (key, value) = match text.find(": ") {
        Some(i) => (&text[..i], text[i + 2..].trim_start_matches(' ')),
        None => (text.strip_suffix(':')?, ""),
    };
    let first = key.chars().next()?;
    if !(first.is_ascii_alphabetic() || first == '/' || first == '_') || key.contains(':') || special_word(key) {
        return None;
    }
    Some((key, value))
}

/// Words some YAML readers take for booleans, nulls or numbers.
fn special_word(s: &str) -> bool {
    const WORDS: [&str; 12] = ["true", "false", "null", "yes", "no", "on", "off", "y", "n", "nan", "inf", "infinity"];
    WORDS.iter().any(|w| s.eq_ignore_ascii_case(w))
}

/// Whether some YAML reader could take `text` (starting with a digit) for a number: a base prefix (`0x`, `0o`,
/// `0b`), or digits and underscores with at most one point and an exponent that has digits (`1.5`, `1e3`,
/// `1_000`, `2.`). Leaving these to the general parser is always safe; a wrong "no" is not, so this errs towards
/// yes.
fn maybe_number(text: &str) -> bool {
    let b = text.as_bytes();
    if b.len() > 1 && b[0] == b'0' && matches!(b[1], b'x' | b'X' | b'o' | b'O' | b'b' | b'B') {
        return true;
    }
    let mantissa_end = b.iter().position(|c| !(c.is_ascii_digit() || matches!(c, b'_' | b'.'))).unwrap_or(b.len());
    if b[..mantissa_end].iter().filter(|c| **c == b'.').count() > 1 {
        return false;
    }
    match &b[mantissa_end..] {
        [] => true,
        [b'e' | b'E', rest @ ..] => {
            let digits = rest.strip_prefix(b"+").or_else(|| rest.strip_prefix(b"-")).unwrap_or(rest);
            !digits.is_empty() && digits.iter().all(|c| c.is_ascii_digit() || *c == b'_')
        }
        _ => false,
    }
}

/// A scalar (or `{}`, `[]`) written on one line; `None` if it is not one this parser reads.
fn scalar(text: &str) -> Option<YNode> {
    match text {
        "null" | "~" => return Some(YNode::Null),
        "true" => return Some(YNode::Bool(true)),
        "false" => return Some(YNode::Bool(false)),
        "{}" => return Some(YNode::Map(Vec::new())),
        "[]" => return Some(YNode::Seq(Vec::new())),
        _ => {}
    }
    if let Some(inner) = text.strip_prefix('\'') {
        let inner = inner.strip_suffix('\'')?;
        return (!inner.replace("''", "").contains('\'')).then(|| YNode::Str(inner.replace("''", "'")));
    }
    if let Some(inner) = text.strip_prefix('"') {
        let inner = inner.strip_suffix('"')?;
        return (!inner.contains(['"', '\\'])).then(|| YNode::Str(inner.to_owned()));
    }
    if text.contains(": ") || text.ends_with(':') {
        return None;
    }
    let first = text.chars().next()?;
    if first.is_ascii_digit() || first == '-' {
        let digits = text.strip_prefix('-').unwrap_or(text);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            // Leading zeros keep a number a string (the general parser is told so).
            if digits.len() > 1 && digits.starts_with('0') {
                return (first != '-').then(|| YNode::Str(text.to_owned()));
            }
            return if first == '-' {
                text.parse::<i64>().ok().map(YNode::I64)
            } else {
                text.parse::<u64>().ok().map(YNode::U64)
            };
        }
        if first == '-' || maybe_number(text) {
            return None;
        }
        // A quantity (`100m`, `128Mi`) or a hash (`0000000a`, `000000000e`) is no number form: a string.
        return Some(YNode::Str(text.to_owned()));
    }
    if !(first.is_ascii_alphabetic() || first == '/' || first == '_') || special_word(text) {
        return None;
    }
    Some(YNode::Str(text.to_owned()))
}
