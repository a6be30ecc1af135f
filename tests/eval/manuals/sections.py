#!/usr/bin/env python3
"""Heading tree of a Markdown manual, as sections.jsonl.

Uses a real CommonMark parser (markdown-it-py, pinned in build.sh) so that `#` lines
inside fenced code, HTML blocks or indented code are not taken for headings, and
setext headings and headings inside block quotes are.

One JSON object per heading, in document order, with the fields of the existing
files in shared/data/manuals/*/sections.jsonl:

  id                 "S00001", ...
  level              1..6
  title              the heading's inline text as rendered plain text (code spans
                     keep their content; `{#anchor}` attributes, which CommonMark does
                     not know, stay in the text)
  title_clean        title without a trailing `{#anchor ...}` attribute block
  path               titles_clean of the ancestors and this heading; a heading's
                     parent is the nearest earlier heading of a lower level
  path_str           " > ".join(path)
  chapter            path[0]
  line_start         1-based line of the heading (first line of a setext heading)
  line_end           last line before the next heading of any level, or the last line
                     (the last line is len(text.split("\\n")), as in the existing files:
                     `wc -l` + 1 for a file that ends in a newline)
  subtree_line_end   last line before the next heading of the same or a higher level
                     (lower or equal level number), or the last line
  own_chars          len() of the stripped text after the heading's own line(s) up to
                     line_end, lines joined with "\\n"
  in_blockquote      the heading sits inside a block quote
  setext             the heading is a setext (underlined) heading
  source_file        given by the caller (a function of line_start), else null
  dup_index          1 for the first heading with this path_str, 2 for the second, ...

Usage:  python3 sections.py MANUAL.md [-o sections.jsonl]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Callable, Optional

try:
    from markdown_it import MarkdownIt
except ImportError:  # pragma: no cover - message for people running it by hand
    sys.exit(
        "sections.py: markdown-it-py is missing. Run it with the venv that build.sh makes:\n"
        "  ${QUARRY_VENVS:-$HOME/.cache/quarry/venvs}/manuals/bin/python sections.py ...\n"
        "or: pip install markdown-it-py==3.0.0"
    )

ANCHOR_RE = re.compile(r"\s*\{#[^{}]*\}\s*$")


def _inline_text(tok) -> str:
    """Plain text of an inline token: text and code spans, breaks as spaces."""
    if not tok.children:
        return tok.content
    out = []
    for c in tok.children:
        if c.type in ("text", "code_inline"):
            out.append(c.content)
        elif c.type in ("softbreak", "hardbreak"):
            out.append(" ")
        elif c.type == "image":
            out.append(_inline_text(c))
        # html_inline, link_open/close, em/strong open/close: no text of their own
    return "".join(out)


def clean_title(title: str) -> str:
    return ANCHOR_RE.sub("", title).strip()


def parser() -> MarkdownIt:
    # CommonMark plus GFM tables (the built manuals are GFM); tables do not change
    # which lines are headings, it only keeps table rows out of paragraphs.
    return MarkdownIt("commonmark").enable("table")


def extract(text: str, source_file: Optional[Callable[[int], Optional[str]]] = None) -> list[dict]:
    # As in the existing sections.jsonl files, the last line number is
    # len(text.split("\n")): for a file ending in a newline that is one more than
    # `wc -l` (the empty string after the final newline counts as a line).
    lines = text.split("\n")
    nlines = len(lines)
    tokens = parser().parse(text)

    heads = []
    bq_depth = 0
    for i, tok in enumerate(tokens):
        if tok.type == "blockquote_open":
            bq_depth += 1
        elif tok.type == "blockquote_close":
            bq_depth -= 1
        elif tok.type == "heading_open":
            inline = tokens[i + 1]
            title = _inline_text(inline).strip()
            start, end = tok.map  # 0-based, end exclusive
            heads.append(
                {
                    "level": int(tok.tag[1]),
                    "title": title,
                    "line_start": start + 1,
                    "head_end": end,  # 1-based last line of the heading itself
                    "in_blockquote": bq_depth > 0,
                    "setext": tok.markup not in ("#", "##", "###", "####", "#####", "######"),
                }
            )

    out = []
    stack: list[tuple[int, str]] = []  # (level, title_clean)
    seen: dict[str, int] = {}
    for n, h in enumerate(heads):
        level = h["level"]
        tc = clean_title(h["title"])
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, tc))
        path = [t for _, t in stack]
        path_str = " > ".join(path)
        seen[path_str] = seen.get(path_str, 0) + 1

        line_end = heads[n + 1]["line_start"] - 1 if n + 1 < len(heads) else nlines
        sub_end = nlines
        for h2 in heads[n + 1:]:
            if h2["level"] <= level:
                sub_end = h2["line_start"] - 1
                break
        body = lines[h["head_end"]:line_end]
        own = len("\n".join(body).strip())
        out.append(
            {
                "id": f"S{n + 1:05d}",
                "level": level,
                "title": h["title"],
                "title_clean": tc,
                "path": path,
                "path_str": path_str,
                "chapter": path[0],
                "line_start": h["line_start"],
                "line_end": line_end,
                "subtree_line_end": sub_end,
                "own_chars": own,
                "in_blockquote": h["in_blockquote"],
                "setext": h["setext"],
                "source_file": source_file(h["line_start"]) if source_file else None,
                "dup_index": seen[path_str],
            }
        )
    return out


def write_jsonl(rows: list[dict], path: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("markdown")
    ap.add_argument("-o", "--output", help="sections.jsonl to write (default: stdout)")
    a = ap.parse_args(argv)
    with open(a.markdown, encoding="utf-8") as f:
        rows = extract(f.read())
    if a.output:
        write_jsonl(rows, a.output)
    else:
        for r in rows:
            sys.stdout.write(json.dumps(r, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
