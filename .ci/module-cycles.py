#!/usr/bin/env python3
"""Fails if the host's modules import each other in a cycle.

Reads every file under host/src, drops comments and `#[cfg(test)]` modules, and collects the
`crate::X` paths each one names (in `use` lines and in code, `use crate::{a, b}` groups
included). Each file belongs to the top-level module X of its path (host/src/X.rs or
host/src/X/...). An edge A -> B means a file of A names crate::B. Any strongly connected
component of more than one module is a cycle: it is printed with the edges that make it, and the
script exits 1.

Usage: module-cycles.py [host/src]
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "host", "src")
root = os.path.normpath(root)


def module_of(path):
    rel = os.path.relpath(path, root)
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def code_of(text):
    # Everything from the first #[cfg(test)] on is test code in this crate's style.
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//")[0] for line in text.splitlines())


edges = {}
for dirpath, _, files in os.walk(root):
    for f in files:
        if not f.endswith(".rs"):
            continue
        path = os.path.join(dirpath, f)
        src = module_of(path)
        if src in ("lib", "main"):
            continue
        code = code_of(open(path, encoding="utf-8").read())
        names = set(re.findall(r"crate::([a-z_][a-z0-9_]*)", code))
        for group in re.findall(r"crate::\{([^}]*)\}", code):
            names.update(re.findall(r"(?:^|,)\s*([a-z_][a-z0-9_]*)", group))
        for dst in names:
            if dst != src:
                edges.setdefault(src, {}).setdefault(dst, set()).add(os.path.relpath(path, root))

# Tarjan's strongly connected components.
index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]
nodes = set(edges) | {d for ds in edges.values() for d in ds}


def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges.get(v, {}):
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        scc = []
        while True:
            w = stack.pop()
            on.discard(w)
            scc.append(w)
            if w == v:
                break
        sccs.append(scc)


sys.setrecursionlimit(10000)
for v in sorted(nodes):
    if v not in index:
        visit(v)

cycles = [sorted(s) for s in sccs if len(s) > 1]
if not cycles:
    print(f"no module cycles among {len(nodes)} host modules")
    sys.exit(0)
for c in cycles:
    print("cycle: " + " <-> ".join(c))
    for a in c:
        for b, files in sorted(edges.get(a, {}).items()):
            if b in c:
                print(f"  {a} -> {b}: {', '.join(sorted(files))}")
sys.exit(1)
