#!/usr/bin/env python3
"""Checks the book under docs/ and the README: every relative link leads to a file of the
checkout (and a `#fragment` to a heading of it), every page of docs/src is in SUMMARY.md, and
every command shown in a shell block is one that exists: `make TARGET` a target of the
Makefile, `quarry SUBCOMMAND --flag` a subcommand of the built host taking that flag (asked of
the binary given with --quarry, as `make test` builds it).

    python3 .ci/docs-check.py [--quarry PATH]

Prints each problem as FILE:LINE: what, and exits 1 if there is any."""

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)")


def pages():
    """The README and every page of the book."""
    return [ROOT / "README.md"] + sorted((ROOT / "docs" / "src").glob("*.md"))


def slug(heading):
    """A heading's anchor as mdBook and GitHub make it: lower case, punctuation dropped, spaces
    as hyphens."""
    text = re.sub(r"[`*_\[\]()]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    return {slug(line.lstrip("#")) for _, line in prose(path) if line.startswith("#")}


def prose(path):
    """(line number, line) of every line outside fenced blocks."""
    fence = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fence = not fence
        elif not fence:
            yield n, line


def blocks(path):
    """(line number, line) of every line inside a sh, shell, bash or console block."""
    fence, shell = False, False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if m:
            fence, shell = (not fence), (not fence and m.group(1) in ("sh", "shell", "bash", "console"))
            continue
        if fence and shell:
            yield n, line


def make_targets():
    targets = set()
    for line in (ROOT / "Makefile").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([a-z][a-z0-9-]*):", line)
        if m:
            targets.add(m.group(1))
    return targets


class Quarry:
    """What the built host says its subcommands and their flags are."""

    def __init__(self, binary):
        self.binary, self.helps = binary, {}

    def help(self, sub):
        if sub not in self.helps:
            args = [self.binary] + ([sub] if sub else []) + ["--help"]
            run = subprocess.run(args, capture_output=True, text=True, timeout=30)
            self.helps[sub] = run.stdout if run.returncode == 0 else None
        return self.helps[sub]

    def subcommands(self):
        text = self.help("") or ""
        return set(re.findall(r"^  ([a-z][a-z-]*)  ", text, re.M))


def check_links(path, problems):
    for n, line in prose(path):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, fragment = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                problems.append(f"{path.relative_to(ROOT)}:{n}: link to {target}: no such file")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                problems.append(f"{path.relative_to(ROOT)}:{n}: link to {target}: no such heading")


def check_inline_make(path, problems, targets):
    """`make TARGET` in prose, as an inline code span."""
    for n, line in prose(path):
        for target in re.findall(r"`(?:[A-Z_]+=\S+ )*make ([a-z][a-z0-9-]*)[^`]*`", line):
            if target not in targets:
                problems.append(f"{path.relative_to(ROOT)}:{n}: make {target}: no such target in the Makefile")


def check_summary(problems):
    src = ROOT / "docs" / "src"
    listed = set(re.findall(r"\]\(([^)]+\.md)\)", (src / "SUMMARY.md").read_text(encoding="utf-8")))
    for page in src.glob("*.md"):
        if page.name != "SUMMARY.md" and page.name not in listed:
            problems.append(f"docs/src/{page.name}: not in SUMMARY.md")


def check_commands(path, problems, targets, quarry):
    for n, line in blocks(path):
        where = f"{path.relative_to(ROOT)}:{n}"
        command = line.split("#", 1)[0].strip()
        for m in re.finditer(r"(?:^|[;&|] *)make ([a-z][a-z0-9-]*)", command):
            if m.group(1) not in targets:
                problems.append(f"{where}: make {m.group(1)}: no such target in the Makefile")
        m = re.match(r"^(?:[A-Z_]+=\S+ )*quarry\b(.*)", command)
        if not m or quarry is None:
            continue
        words = m.group(1).split()
        # Global options first (-c FILE, --config FILE), then the subcommand.
        while words and words[0] in ("-c", "--config"):
            words = words[2:]
        if not words or words[0].startswith("-") or words[0] == "...":
            continue
        sub = words[0]
        if sub not in quarry.subcommands():
            problems.append(f"{where}: quarry {sub}: no such subcommand")
            continue
        text = quarry.help(sub) or ""
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", " ".join(words[1:])):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}\b", text):
                problems.append(f"{where}: quarry {sub} {flag}: `quarry {sub} --help` has no such flag")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quarry", help="the built host, to check the quarry commands shown")
    args = parser.parse_args()
    quarry = Quarry(args.quarry) if args.quarry else None
    problems = []
    check_summary(problems)
    targets = make_targets()
    for page in pages():
        check_links(page, problems)
        check_commands(page, problems, targets, quarry)
        check_inline_make(page, problems, targets)
    for p in problems:
        print(p)
    checked = "links and commands" if quarry else "links and make targets (no --quarry: quarry commands unchecked)"
    print(f"docs-check: {len(pages())} pages, {checked}: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
