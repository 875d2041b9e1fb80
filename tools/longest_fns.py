#!/usr/bin/env python3
"""The longest production functions of a Rust tree: every `fn` in crates/*/src and bins/*/src, test modules and
tests.rs files left out; length in lines from the `fn` line to its closing brace (brace matching that skips
string and char literals and comments).

`longest_fns.py ROOT N` prints the N longest. `longest_fns.py ROOT --unexplained LIMIT` prints every function over
LIMIT lines whose comments just above it (doc or line comments, attributes between) do not say why it is long
(the words "long because"), and exits 1 when there is one: a long function is either split or explained."""
import os, re, sys

root = sys.argv[1]
unexplained = len(sys.argv) > 3 and sys.argv[2] == '--unexplained'
n = int(sys.argv[3]) if unexplained else int(sys.argv[2]) if len(sys.argv) > 2 else 10

def explained(raw_lines, fn_line):
    """Whether the comment block above line `fn_line` (1-based) says why the function is long."""
    i = fn_line - 2
    block = []
    while i >= 0:
        t = raw_lines[i].strip()
        if t.startswith('//') or t.startswith('#[') or t.startswith('#!['):
            block.append(t); i -= 1; continue
        break
    return 'long because' in ' '.join(block).lower()

def is_test(raw_lines, fn_line):
    """A `#[test]` (or `#[tokio::test]`) function in a test-only file the walk cannot tell from production code."""
    i = fn_line - 2
    while i >= 0:
        t = raw_lines[i].strip()
        if t.startswith('#['):
            if t == '#[test]' or '::test' in t: return True
            i -= 1; continue
        if t.startswith('//'):
            i -= 1; continue
        return False
    return False

def strip(src):
    out = []; i = 0; L = len(src)
    while i < L:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i); j = L if j < 0 else j
            out.append(' ' * (j - i)); i = j; continue
        if src.startswith('/*', i):
            j = src.find('*/', i + 2); j = L if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j; continue
        m = re.match(r'r(#*)"', src[i:i+10])
        if m and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0))); j = L if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j; continue
        if c == '"':
            j = i + 1
            while j < L and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j; continue
        if c == "'":
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'", src[i:i+12])
            if m:
                out.append(' ' * len(m.group(0))); i += len(m.group(0)); continue
        out.append(c); i += 1
    return ''.join(out)

rows = []
for top in ('crates', 'bins'):
    base = os.path.join(root, top)
    if not os.path.isdir(base): continue
    for crate in sorted(os.listdir(base)):
        src_dir = os.path.join(base, crate, 'src')
        for dp, dn, fn in os.walk(src_dir):
            for f in fn:
                if not f.endswith('.rs') or f == 'tests.rs' or 'fuzzing' in f: continue
                p = os.path.join(dp, f)
                raw = open(p, encoding='utf-8').read()
                raw_lines = raw.split('\n')
                text = strip(raw)
                m = re.search(r'#\[cfg\(test\)\]\s*mod\s+\w+\s*\{', text)
                if m: text = text[:m.start()]
                lines = text.split('\n')
                for fm in re.finditer(r'\bfn\s+(\w+)', text):
                    k = text.find('{', fm.end()); semi = text.find(';', fm.end())
                    if k < 0 or (0 <= semi < k): continue
                    depth = 0; j = k
                    while j < len(text):
                        if text[j] == '{': depth += 1
                        elif text[j] == '}':
                            depth -= 1
                            if depth == 0: break
                        j += 1
                    a = text.count('\n', 0, fm.start()) + 1; b = text.count('\n', 0, j) + 1
                    if is_test(raw_lines, a): continue
                    rows.append((b - a + 1, os.path.relpath(p, root), fm.group(1), a, explained(raw_lines, a)))
rows.sort(key=lambda r: -r[0])
if unexplained:
    bad = [r for r in rows if r[0] > n and not r[4]]
    for r in bad:
        print(f"{r[0]:5d}  {r[1]}:{r[3]}  {r[2]}: over {n} lines with no comment saying why it is long")
    sys.exit(1 if bad else 0)
for r in rows[:n]:
    print(f"{r[0]:5d}  {r[1]}:{r[3]}  {r[2]}")
print(f"functions: {len(rows)}, over 100 lines: {sum(1 for r in rows if r[0] > 100)}, over 60: {sum(1 for r in rows if r[0] > 60)}")
