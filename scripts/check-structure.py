#!/usr/bin/env python3
"""The code's shape, checked by the test command:

- no import cycle between the top-level modules of any crate (a module's
  `use crate::x` / `crate::x::` paths, and a submodule's `super::x` that
  reaches a sibling of its top-level module, are edges);
- no product file over 500 lines, no product function over 80 lines
  (tests, examples, benches, fuzz targets and the simulator excluded);
- no `String` error type in product code: no `Result<_, E>` nor
  `type Err = E` whose E is `String`, `&str` or `Box<dyn Error>`, and no
  `...Error` newtype over a `String` (errors are typed: thiserror).

Prints the module graph's cycles, the oversized items and the string
errors, exits 1 on any.
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MAX_FILE = 500
# Problems tolerated for now (none: every one fails the test command).
KNOWN = set()
MAX_FN = 80
# ds-sim is the test bench's simulated DS, not product code
PRODUCT = ["reaper-core", "reaper-zk", "reaper-etcd", "reaper-sql", "reaper-jdbc",
           "reaper-agent", "reaper"]


def rust_files(src):
    for d, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def test_children(files):
    """Files declared under `#[cfg(test)] mod x;` by their parent module."""
    out = set()
    for p in files:
        text = open(p, encoding="utf-8").read()
        d = os.path.dirname(p)
        base = os.path.basename(p)[:-3]
        own = d if base in ("mod", "lib", "main") else os.path.join(d, base)
        for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text):
            for cand in (os.path.join(own, m.group(1) + ".rs"),
                         os.path.join(own, m.group(1), "mod.rs")):
                out.add(cand)
    return out


def is_test_file(path, tests=()):
    base = os.path.basename(path)
    return (base.startswith("tests") or base.endswith("_tests.rs") or "/tests/" in path
            or base == "testing.rs" or base == "testkit.rs" or path in tests)


def top_module(src, path):
    rel = os.path.relpath(path, src)
    parts = rel[:-3].split(os.sep)
    if parts[0] in ("lib", "main"):
        return None
    return parts[0]


def strip_tests(text):
    """Drops `#[cfg(test)] mod x { ... }` blocks (their imports are the tests')."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def edges_of(src, path, text, mods):
    me = top_module(src, path)
    if me is None:
        return set()
    found = set()
    for m in re.finditer(r"\bcrate::([a-z_][a-z0-9_]*)", text):
        found.add(m.group(1))
    # `super::` chains that climb out of the top-level module to the crate root
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    depth = len(rel) - 1 if rel[-1] != "mod" else len(rel) - 2
    climb = r"\b" + r"super::" * (depth + 1) + r"([a-z_][a-z0-9_]*)"
    for m in re.finditer(climb, text):
        found.add(m.group(1))
    return {(me, t) for t in found if t in mods and t != me}


def cycles(nodes, edges):
    graph = {n: sorted({b for a, b in edges if a == n}) for n in nodes}
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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

    for n in nodes:
        if n not in index:
            strong(n)
    return out


# what an error type must not be
STRINGLY = re.compile(r"^(String|&\s*('static\s+)?str|Box<\s*dyn\s+(std::error::)?Error\b.*>)$")


def generic_args(text, start):
    """The top-level arguments of the `<...>` opening at `start`, and its end."""
    depth, args, cur, j = 0, [], [], start
    while j < len(text):
        ch = text[j]
        if ch == "<":
            depth += 1
            if depth == 1:
                j += 1
                continue
        elif ch == ">" and text[j - 1] != "-":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args, j
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            j += 1
            continue
        cur.append(ch)
        j += 1
    return args, j


def string_errors(path, text):
    out = []

    def line(pos):
        return text.count("\n", 0, pos) + 1

    for m in re.finditer(r"\bResult<", text):
        args, _ = generic_args(text, m.end() - 1)
        if len(args) == 2 and STRINGLY.match(" ".join(args[1].split())):
            out.append(f"{path}:{line(m.start())}: a String error type: Result<_, {args[1]}>")
    for m in re.finditer(r"\btype\s+Err\s*=\s*([^;]+);", text):
        if STRINGLY.match(" ".join(m.group(1).split())):
            out.append(f"{path}:{line(m.start())}: a String error type: type Err = {m.group(1)}")
    for m in re.finditer(r"\bstruct\s+(\w*Error)\s*\(\s*(pub(\([^)]*\))?\s+)?String\s*\)", text):
        out.append(f"{path}:{line(m.start())}: a String error type: {m.group(1)} wraps a String")
    return out


def long_functions(path, text):
    lines = text.split("\n")
    out = []
    fn = re.compile(r"^(\s*)(pub(\([^)]*\))?\s+)?(async\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)")
    for i, line in enumerate(lines):
        m = fn.match(line)
        if not m:
            continue
        indent = m.group(1)
        # the body ends at the first line closing at the fn's own indentation
        for j in range(i + 1, len(lines)):
            if lines[j].startswith(indent + "}") and not lines[j].startswith(indent + "} else"):
                n = j - i + 1
                if n > MAX_FN:
                    out.append(f"{path}:{i + 1}: fn {m.group(7)} is {n} lines (at most {MAX_FN})")
                break
            if lines[j].rstrip().endswith(";") and j == i + 1 and "{" not in line:
                break
    return out


def main():
    problems = []
    for crate in PRODUCT:
        src = os.path.join(ROOT, "crates", crate, "src")
        every = list(rust_files(src))
        tests = test_children(every)
        # what a test module includes by #[path] is a test too
        for p in every:
            if is_test_file(p, tests):
                text = open(p, encoding="utf-8").read()
                for m in re.finditer(r'#\[path\s*=\s*"([^"]+)"\]', text):
                    tests.add(os.path.normpath(os.path.join(os.path.dirname(p), m.group(1))))
        files = [p for p in every if not is_test_file(p, tests)]
        texts = {p: strip_tests(open(p, encoding="utf-8").read()) for p in files}
        mods = {top_module(src, p) for p in files} - {None}
        edges = set()
        for p, t in texts.items():
            edges |= edges_of(src, p, t, mods)
        for c in cycles(sorted(mods), edges):
            problems.append(f"{crate}: import cycle between modules {' <-> '.join(c)}")
        for p, t in texts.items():
            n = open(p, encoding="utf-8").read().count("\n")
            rel = os.path.relpath(p, ROOT)
            if n > MAX_FILE:
                problems.append(f"{rel}: {n} lines (at most {MAX_FILE})")
            problems.extend(long_functions(rel, t))
            problems.extend(string_errors(rel, t))
    new = [p for p in problems if p not in KNOWN]
    for p in problems:
        print(("NEW   " if p in new else "known ") + p)
    print(f"structure: {len(problems)} problem(s), {len(new)} new")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
