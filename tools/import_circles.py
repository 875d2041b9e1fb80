#!/usr/bin/env python3
"""Import circles between the source files of one crate.

    python3 tools/import_circles.py crates/karpenter-api [--edges]

Reads every production `.rs` file under `<crate>/src` (test modules, `#[cfg(test)]` blocks and `tests.rs` files
are left out: a test may import anything), resolves each `crate::...` / `super::...` path it names to the file
that defines the module, and prints the strongly connected components of that file graph with more than one
file: a circle is a set of files each of which reaches every other through imports. `--edges` prints every
arrow of each circle with the path that makes it.

It reads paths as text, not as the compiler does: a path re-exported by `lib.rs` (`crate::NodePool`) is followed
to the module whose `pub use` names it; a macro's paths and glob imports are not resolved.
"""

import os
import re
import sys
from collections import defaultdict


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(re.sub(r"//.*", "", line) for line in text.splitlines())


def strip_test_blocks(text):
    """Removes `#[cfg(test)]` items (a `mod x { ... }` block, or one item up to its `;` or block)."""
    out, i = [], 0
    marker = re.compile(r"#\[cfg\(test\)\]")
    while True:
        m = marker.search(text, i)
        if not m:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i : m.start()])
        j = m.end()
        # skip to the end of the item: a `;` before any `{`, or the matching `}`
        depth = 0
        while j < len(text):
            c = text[j]
            if c == ";" and depth == 0:
                j += 1
                break
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            j += 1
        i = j


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e] (aliases and `self` handled)."""
    tree = tree.strip()
    m = re.match(r"^(.*?)\{(.*)\}$", tree, flags=re.S)
    if not m:
        tree = re.sub(r"\s+as\s+\w+$", "", tree)
        tree = re.sub(r"::self$", "", tree)
        return [tree] if tree else []
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for c in inner:
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        cur += c
    parts.append(cur)
    result = []
    for p in parts:
        p = p.strip()
        if not p:
            continue
        for e in expand_use(p):
            result.append(prefix + e if e != "self" else prefix.rstrip(":"))
    return result


class Crate:
    def __init__(self, root):
        self.src = os.path.join(root, "src")
        self.files = {}  # module path tuple -> file
        self.test_files = set()
        self.reexports = {}  # (module path, name) -> full path tuple
        self._discover(("crate",), os.path.join(self.src, "lib.rs"))

    def _discover(self, modpath, path):
        self.files[modpath] = path
        text = strip_comments(open(path, encoding="utf-8").read())
        for m in re.finditer(r"(#\[cfg\(test\)\]\s*)?(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text):
            name = m.group(2)
            child = self._child_file(modpath, path, name)
            if child is None:
                continue
            if m.group(1) or name == "tests" or name.endswith("_tests"):
                self.test_files.add(child)
                continue
            self._discover(modpath + (name,), child)
        prod = strip_test_blocks(text)
        for m in re.finditer(r"\bpub\s+use\s+([^;]+);", prod):
            for full in expand_use(m.group(1)):
                segs = full.split("::")
                alias = re.search(r"\s+as\s+(\w+)$", m.group(1))
                name = segs[-1]
                self.reexports[(modpath, name)] = self.absolute(modpath, segs)

    def _child_file(self, modpath, path, name):
        base = os.path.dirname(path)
        if os.path.basename(path) not in ("lib.rs", "mod.rs"):
            base = os.path.join(base, os.path.splitext(os.path.basename(path))[0])
        for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
            if os.path.exists(cand):
                return cand
        return None

    def absolute(self, modpath, segs):
        segs = [s.strip() for s in segs if s.strip()]
        if not segs:
            return None
        if segs[0] == "crate":
            return tuple(segs)
        cur = list(modpath)
        while segs and segs[0] in ("super", "self"):
            if segs.pop(0) == "super":
                cur.pop()
        if not segs or len(cur) == 0:
            return tuple(cur) if cur else None
        # a `use` path relative to the current module (2018 paths): only if it names a child module
        if tuple(cur + [segs[0]]) in self.files:
            return tuple(cur + segs)
        return None

    def file_of(self, path, seen=0):
        """The file that defines the longest module prefix of `path`, following `pub use` re-exports."""
        if path is None or seen > 8:
            return None
        for n in range(len(path), 0, -1):
            prefix = path[:n]
            if prefix in self.files:
                if n < len(path):
                    target = self.reexports.get((prefix, path[n]))
                    if target and target != path:
                        return self.file_of(target + path[n + 1 :], seen + 1) or self.files[prefix]
                return self.files[prefix]
        return None

    def edges(self):
        edges = defaultdict(set)
        for modpath, path in self.files.items():
            if path in self.test_files or path.endswith("tests.rs"):
                continue
            text = strip_test_blocks(strip_comments(open(path, encoding="utf-8").read()))
            names = []
            for m in re.finditer(r"\buse\s+([^;]+);", text):
                for full in expand_use(m.group(1)):
                    names.append(full.split("::"))
            for m in re.finditer(r"\b((?:crate|super)(?:::\w+)+)", text):
                names.append(m.group(1).split("::"))
            for segs in names:
                target = self.file_of(self.absolute(modpath, segs))
                if target and target != path and not target.endswith("lib.rs") and not self._is_ancestor(target, path):
                    edges[path].add((target, "::".join(segs)))
        return edges

    def _is_ancestor(self, target, path):
        """A parent module reached from its own child (`super::x` naming the parent's item) is not an import
        across rooms: the child is part of the parent. Kept as an arrow only between distinct module trees."""
        return False


def circles(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            strong(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        sys.exit(__doc__)
    crate = Crate(args[0])
    edges = crate.edges()
    graph = {k: {t for t, _ in v} for k, v in edges.items()}
    found = circles(graph)
    rel = lambda p: os.path.relpath(p, crate.src)
    print(f"{len(crate.files) - len(crate.test_files)} files, {sum(len(v) for v in graph.values())} arrows, "
          f"{len(found)} circles")
    for comp in found:
        print(f"circle of {len(comp)} files: " + ", ".join(rel(f) for f in comp))
        if "--edges" in sys.argv:
            members = set(comp)
            for f in comp:
                for target, via in sorted(edges[f]):
                    if target in members:
                        print(f"    {rel(f)} -> {rel(target)}  ({via})")


if __name__ == "__main__":
    main()
