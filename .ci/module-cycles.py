#!/usr/bin/env python3
"""Fails if modules of a crate import each other in a cycle, at any depth, in code or in docs.

Reads every file under the crate's src, drops plain comments and everything from the first
`#[cfg(test)]` on (the crate's test modules sit at the end of their files), and collects the
module paths each file names: `crate::a::b`, `super::x`, `self::x`, and the items of `{...}`
groups after them, in its code and in its doc comments (a rustdoc link from a lower layer to a
higher one is a cycle in the docs, though the code has none).
Each file is a module (host/src/a/b.rs and host/src/a/b/mod.rs are `a::b`). For every module
P, its children are the nodes of one graph: a file inside child A that names something inside
child B gives an edge A -> B. A strongly connected component of more than one node in any of
these graphs is a cycle: it is printed with the files that make each edge, and the script
exits 1. So `config` <-> `capability` is caught at the top, `capability::http` <->
`capability::couchbase` one level down.

A module brought into scope by `use` and then named bare (`capability::files::View` after
`use crate::capability;`) counts as an edge to the imported module only.

Usage: module-cycles.py [SRC ...]   (default: host/src, every host/crates/*/src and components/*/src)
"""
import glob
import os
import re
import sys

here_dir = os.path.dirname(os.path.abspath(__file__))
roots = sys.argv[1:] or [os.path.join(here_dir, "..", "host", "src")] + sorted(
    glob.glob(os.path.join(here_dir, "..", "host", "crates", "*", "src"))
    + glob.glob(os.path.join(here_dir, "..", "components", "*", "src"))
)


def module_path(path, root):
    parts = os.path.relpath(path, root)[:-3].split(os.sep)
    if parts[-1] == "mod":
        parts = parts[:-1]
    if parts in (["lib"], ["main"]):
        return []
    return parts


def code_of(text):
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    # Doc comments, kept apart: their paths are rustdoc links.
    docs = "\n".join(m.group(1) for m in re.finditer(r"^\s*//[/!](.*)$", text, flags=re.M))
    # Strings may hold `crate::` (messages, docs in attributes): drop them.
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return "\n".join(line.split("//")[0] for line in text.splitlines()) + "\n" + docs


IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH = re.compile(r"\b((?:crate|self|super)(?:::(?:super|" + IDENT + r"))*)(?:::\{([^{}]*)\})?")


def absolute(segments, here):
    """`segments` (starting with crate/self/super) as a path from the crate root."""
    if segments[0] == "crate":
        out, rest = [], segments[1:]
    else:
        out, rest = list(here), segments
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                out = out[:-1]
            rest = rest[1:]
    return out + rest


def edges_of(root):
    """The graph of each module's children, and the modules."""
    files = []
    for dirpath, _, names in os.walk(root):
        for f in names:
            if f.endswith(".rs"):
                files.append(os.path.join(dirpath, f))
    modules = {tuple(module_path(f, root)) for f in files}

    edges = {}  # parent -> {child: {child: {files}}}
    for path in files:
        here = module_path(path, root)
        code = code_of(open(path, encoding="utf-8").read())
        named = []
        for m in PATH.finditer(code):
            base = absolute(m.group(1).split("::"), here)
            named.append(base)
            if m.group(2) is not None:
                for item in m.group(2).split(","):
                    segs = [s for s in item.strip().split(" as ")[0].split("::") if s]
                    if segs and segs != ["self"]:
                        named.append(base + segs)
        for target in named:
            # The longest prefix of the target that is a module.
            while target and tuple(target) not in modules:
                target = target[:-1]
            depth = 0
            while depth < min(len(here), len(target)) and here[depth] == target[depth]:
                depth += 1
            if depth < len(here) and depth < len(target):
                parent = tuple(here[:depth])
                a, b = here[depth], target[depth]
                edges.setdefault(parent, {}).setdefault(a, {}).setdefault(b, set()).add(os.path.relpath(path, root))
    return edges, modules


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(graph) | {d for ds in graph.values() for d in ds}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
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
            out.append(scc)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return [sorted(s) for s in out if len(s) > 1]


sys.setrecursionlimit(10000)
failed = False
for root in roots:
    root = os.path.normpath(root)
    edges, modules = edges_of(root)
    name = os.path.relpath(os.path.dirname(root), os.path.join(here_dir, ".."))
    for parent in sorted(edges):
        for cycle in sccs(edges[parent]):
            failed = True
            where = "::".join(parent) or "crate"
            print(f"{name}: cycle under {where}: " + " <-> ".join(cycle))
            for a in cycle:
                for b, used in sorted(edges[parent].get(a, {}).items()):
                    if b in cycle:
                        print(f"  {a} -> {b}: {', '.join(sorted(used))}")
    print(f"{name}: {len(modules) - 1} modules checked")
if failed:
    sys.exit(1)
print("no module cycles, in code or docs, at any depth")
