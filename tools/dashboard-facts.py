#!/usr/bin/env python3
"""Extracts the facts a Grafana dashboard needs from /metrics: for every PromQL query of every panel (and every
template variable's query), the metrics it reads and the labels it matches on or groups by.

The facts go to checked-in fixtures, one line per metric and panel (tab-separated):

    <sample name>  <labels, comma-separated, - for none>  <dashboard file>  <panel title, or "variable $name">

The real-plane `metrics` scenario (bins/karpenter-controller/tests/real_plane.rs) holds them against what the
controller serves: every metric has samples and every label listed is on them. Two fixtures:

- bins/karpenter-controller/tests/fixtures/upstream-dashboards.txt, from upstream's getting-started dashboards
  (aws/karpenter-provider-aws, website/content/en/docs/getting-started/getting-started-with-karpenter/), read
  from a git dir at a commit named in the header;
- bins/karpenter-controller/tests/fixtures/our-dashboards.txt, from docs/dashboards/*.json.

Usage:
    tools/dashboard-facts.py                    # rewrite our fixture from docs/dashboards/*.json
    tools/dashboard-facts.py --upstream GIT_DIR [--ref REF]   # rewrite the upstream fixture
    tools/dashboard-facts.py --check [--upstream GIT_DIR]     # exit 1 when a fixture is stale; the upstream
                                                # one is re-read at the commit its header names

The PromQL reading is deliberately small (no full grammar): a metric is an identifier that is not a function, a
keyword or a label; its labels are those of its own {matchers}, of the by()/without() of every aggregation whose
argument encloses it, and of on()/ignoring()/group_left()/group_right() anywhere in the query (vector matching
needs them on both sides). `by ($var)` over a custom variable stands for each of the variable's options. A
table panel joining its series on a label (seriesToColumns, joinByField) needs that label on all of them.
Standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "bins", "karpenter-controller", "tests", "fixtures")
UPSTREAM_OUT = os.path.join(FIXTURES, "upstream-dashboards.txt")
OURS_OUT = os.path.join(FIXTURES, "our-dashboards.txt")
OURS_DIR = os.path.join(ROOT, "docs", "dashboards")
UPSTREAM_DIR = "website/content/en/docs/getting-started/getting-started-with-karpenter"
UPSTREAM_FILES = ["karpenter-capacity-dashboard.json", "karpenter-performance-dashboard.json"]

AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                "quantile", "limitk", "limit_ratio"}
GROUPING = {"by", "without"}
MATCHING = {"on", "ignoring", "group_left", "group_right"}
KEYWORDS = AGGREGATIONS | GROUPING | MATCHING | {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan"}

TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<var>\$\{[A-Za-z0-9_:.]+\}|\$[A-Za-z0-9_]+)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<number>[0-9][0-9a-zA-Z.]*)
  | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){}\[\],@])
""", re.VERBOSE)


class PromQLError(ValueError):
    pass


def tokenize(expr):
    tokens, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise PromQLError(f"cannot read PromQL at {expr[pos:pos + 20]!r} in {expr!r}")
        pos = m.end()
        if m.lastgroup in ("ws", "comment"):
            continue
        tokens.append((m.lastgroup, m.group()))
    return tokens


def closing(tokens, i):
    """Index of the bracket closing the one at i."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    opener, depth = tokens[i][1], 0
    for j in range(i, len(tokens)):
        if tokens[j][1] == opener:
            depth += 1
        elif tokens[j][1] == pairs[opener]:
            depth -= 1
            if depth == 0:
                return j
    raise PromQLError(f"unbalanced {opener!r}")


def label_list(tokens, i, variables):
    """Labels in the parenthesised list at i (expanding custom variables); the index of its ')'."""
    end = closing(tokens, i)
    labels = set()
    for kind, text in tokens[i + 1:end]:
        if kind == "ident":
            labels.add(text)
        elif kind == "var":
            name = text.strip("${}")
            if name not in variables:
                raise PromQLError(f"grouping by {text}, which is no custom variable")
            labels.update(variables[name])
    return labels, end


def facts(expr, variables):
    """[(metric, set of labels)] of one PromQL expression."""
    tokens = tokenize(expr)
    metrics = []  # (token index, name, labels)
    scoped = []  # (first, last, labels): a by()/without() clause over the argument tokens first..last
    everywhere = set()
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else None
        if text == "[":
            i = closing(tokens, i) + 1  # a range or subquery: durations, no names
            continue
        if kind == "ident" and text in GROUPING and nxt == "(":
            labels, end = label_list(tokens, i + 1, variables)
            if i > 0 and tokens[i - 1][1] in AGGREGATIONS:
                # `sum by (l) (arg)`
                if end + 1 >= len(tokens) or tokens[end + 1][1] != "(":
                    raise PromQLError(f"no argument after {text}(...) in {expr!r}")
                first, last = end + 1, closing(tokens, end + 1)
            else:
                # `sum (arg) by (l)`: the argument is the group just before
                if i == 0 or tokens[i - 1][1] != ")":
                    raise PromQLError(f"{text}(...) follows no aggregation in {expr!r}")
                depth, first = 0, None
                for j in range(i - 1, -1, -1):
                    if tokens[j][1] == ")":
                        depth += 1
                    elif tokens[j][1] == "(":
                        depth -= 1
                        if depth == 0:
                            first = j
                            break
                last = i - 1
            scoped.append((first, last, labels))
            i = end + 1
            continue
        if kind == "ident" and text in MATCHING and nxt == "(":
            labels, end = label_list(tokens, i + 1, variables)
            everywhere |= labels
            i = end + 1
            continue
        if kind == "ident" and text not in KEYWORDS and nxt != "(":
            labels = set()
            end = i
            if nxt == "{":
                end = closing(tokens, i + 1)
                body = tokens[i + 2:end]
                for j, (k, t) in enumerate(body):
                    if k == "ident" and j + 1 < len(body) and body[j + 1][1] in ("=", "!=", "=~", "!~"):
                        labels.add(t)
            metrics.append((i, text, labels))
            i = end + 1
            continue
        if text == "{":
            raise PromQLError(f"a selector without a metric name in {expr!r}")
        i += 1
    out = []
    for pos, name, labels in metrics:
        labels = set(labels) | everywhere
        for first, last, grouped in scoped:
            if first <= pos <= last:
                labels |= grouped
        out.append((name, labels))
    return out


def label_values(query):
    """`label_values(selector, label)` -> (selector or None, label); None when it is no label_values query."""
    m = re.fullmatch(r"\s*label_values\((.*)\)\s*", query, re.DOTALL)
    if not m:
        return None
    inner = m.group(1)
    selector, _, label = inner.rpartition(",")
    return (selector.strip() or None), label.strip()


def panels(items):
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def dashboard_facts(name, dashboard):
    """[(metric, labels, file, where)] of one dashboard."""
    variables = {}
    queried = []
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "custom":
            variables[v["name"]] = [o.strip() for o in str(v.get("query", "")).split(",") if o.strip()]
        elif v.get("type") == "query":
            q = v.get("query")
            queried.append((v["name"], q.get("query", "") if isinstance(q, dict) else (q or "")))
    out = []
    for var, query in queried:
        lv = label_values(query)
        if lv is None:
            found = facts(query, variables)
        else:
            selector, label = lv
            if selector is None:
                continue  # every series' values: no metric to hold
            found = [(m, ls | {label}) for m, ls in facts(selector, variables)]
        out += [(m, ls, name, f"variable ${var}") for m, ls in found]
    for p in panels(dashboard.get("panels", [])):
        # A table joining its queries' series on a label needs that label on every one of them.
        joins = {t.get("options", {}).get("byField") for t in p.get("transformations", [])
                 if t.get("id") in ("seriesToColumns", "joinByField")} - {None}
        for t in p.get("targets", []):
            if t.get("expr"):
                out += [(m, ls | joins, name, p.get("title", "")) for m, ls in facts(t["expr"], variables)]
    return out


def render(header, rows):
    lines = [f"# {h}" for h in header]
    seen = set()
    for metric, labels, name, where in rows:
        line = "\t".join([metric, ",".join(sorted(labels)) or "-", name, where])
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return "\n".join(lines) + "\n"


HEADER = [
    "Facts of Grafana dashboards' PromQL, written by tools/dashboard-facts.py; do not edit.",
    "One line per metric and panel, tab-separated: sample name, labels matched on or grouped by (- for none),",
    "dashboard file, panel title (or the template variable). real_plane.rs's `metrics` scenario holds them",
    "against /metrics.",
]


def upstream_fixture(git_dir, ref):
    commit = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", ref], check=True, capture_output=True,
                            text=True).stdout.strip()
    rows = []
    for f in UPSTREAM_FILES:
        text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{UPSTREAM_DIR}/{f}"], check=True,
                              capture_output=True, text=True).stdout
        rows += dashboard_facts(f, json.loads(text))
    return render(HEADER + [f"source: aws/karpenter-provider-aws@{commit} {UPSTREAM_DIR}/"], rows)


def ours_fixture():
    rows = []
    for f in sorted(os.listdir(OURS_DIR)):
        if f.endswith(".json"):
            with open(os.path.join(OURS_DIR, f), encoding="utf-8") as fh:
                rows += dashboard_facts(f, json.load(fh))
    return render(HEADER + ["source: docs/dashboards/*.json"], rows)


def fixture_commit(path):
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            m = re.match(r"# source: aws/karpenter-provider-aws@([0-9a-f]{40}) ", line)
            if m:
                return m.group(1)
    raise SystemExit(f"{path}: no source commit in the header")


def check(path, expected):
    with open(path, encoding="utf-8") as fh:
        actual = fh.read()
    if actual != expected:
        print(f"{os.path.relpath(path, ROOT)} is stale: rerun tools/dashboard-facts.py", file=sys.stderr)
        return False
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", metavar="GIT_DIR", help="a clone (bare or not) of aws/karpenter-provider-aws")
    parser.add_argument("--ref", default="HEAD")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    try:
        if args.check:
            ok = check(OURS_OUT, ours_fixture())
            if args.upstream:
                ok &= check(UPSTREAM_OUT, upstream_fixture(args.upstream, fixture_commit(UPSTREAM_OUT)))
            sys.exit(0 if ok else 1)
        if args.upstream:
            out, text = UPSTREAM_OUT, upstream_fixture(args.upstream, args.ref)
        else:
            out, text = OURS_OUT, ours_fixture()
    except PromQLError as e:
        sys.exit(f"dashboard-facts: {e}")
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    main()
