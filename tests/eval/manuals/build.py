#!/usr/bin/env python3
"""Build the pinned Debian documentation packages into retrieval-benchmark manuals.

Each manual in manuals.json becomes, under ${QUARRY_MANUALS:-~/.cache/quarry/manuals}/NAME/:

  manual.md        one GitHub-flavoured Markdown file, ATX headings, chapters at level 1
  sections.jsonl   its heading tree (sections.py; same fields as shared/data/manuals/*)
  manual.docx      pandoc's DOCX of manual.md (real Heading 1-6 styles)
  LICENSE          the package's /usr/share/doc/PKG/copyright
  SOURCE.txt       package, version, hashes, pandoc version, licence

Steps: apt-get download PKG=VERSION (sha256 checked; when the archive no longer has that
version, the candidate version is accepted only if every source file's sha256 matches the
pin) -> dpkg-deb -x -> cut navigation/TOC/index chrome out of the HTML -> pandoc HTML ->
JSON AST -> clean the AST here (levels, links, tables, footnotes, admonitions) -> pandoc
GFM -> small text fixes -> sections.jsonl -> compare sha256 of manual.md and
sections.jsonl with the pins (a change would move the line ranges that labelled questions
point at) -> manual.docx.

Run through build.sh, which makes the venv with the pinned markdown-it-py and installs
pandoc when missing.  `build.py --update-pins` rewrites the pins in manuals.json (only
when you mean to change the manuals: every questions.jsonl built on them must be
re-checked with check_questions.py).
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the work tree
import sections  # noqa: E402  (needs markdown-it-py: run through build.sh)

MANUALS_JSON = os.path.join(HERE, "manuals.json")  # --manifest overrides (for tests)
REL_SCRIPT = "tests/eval/manuals/build.sh"
MARKER = "QUARRYSOURCEFILEMARKER"
FENCE_CLASS = "quarryfence"
FENCE_RE = re.compile(r"^((?:[ >]|[-*+] |\d+[.)] )*(?:`{3,}|~{3,})) ?" + FENCE_CLASS + "$")
# Options of the final AST -> Markdown step; part of what the manual.md pin depends on.
# English text is wrapped at 72 columns (like rclone's MANUAL.md); Chinese keeps one
# paragraph per line (like trpl-zh-cn's manual.md): the writer can only wrap at spaces.
PANDOC_GFM_ARGS = ["-f", "json", "-t", "gfm", "--reference-location=block"]
WRAP_ARGS = {"auto": ["--wrap=auto", "--columns=72"], "none": ["--wrap=none"]}


class BuildError(Exception):
    pass


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_bytes(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def run(cmd, *, what: str, fix: str, input: bytes | None = None, cwd: str | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(cmd, input=input, cwd=cwd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    except FileNotFoundError:
        raise BuildError(f"{cmd[0]} missing ({what}): {fix}")
    if check and p.returncode != 0:
        err = p.stderr.decode("utf-8", "replace").strip()
        raise BuildError(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{err}\n{fix}")
    return p


# --------------------------------------------------------------------------- tools

def pandoc_version() -> str:
    p = run(["pandoc", "--version"], what="pandoc --version",
            fix="pandoc missing: run apt-get install -y pandoc (build.sh does this when run as root)")
    return p.stdout.decode().splitlines()[0].split()[1]


def pandoc_version_full() -> str:
    p = run(["pandoc", "--version"], what="pandoc --version", fix="run apt-get install -y pandoc")
    return " | ".join(l.strip() for l in p.stdout.decode().splitlines()[:3])


def pandoc(args, data: bytes, what: str) -> bytes:
    return run(["pandoc", *args], input=data, what=what,
               fix="pandoc missing or broken: run apt-get install -y pandoc").stdout


# --------------------------------------------------------------------------- package

def deb_field(deb: str, field: str) -> str:
    return run(["dpkg-deb", "-f", deb, field], what="dpkg-deb -f",
               fix="dpkg-deb missing: run this on Debian/Ubuntu (apt-get install dpkg)"
               ).stdout.decode().strip()


def fetch_deb(m: dict, debdir: str) -> tuple[str, bool]:
    """Return (path of the .deb, fallback) where fallback means 'not the pinned version'."""
    pkg, ver, want = m["package"], m["version"], m.get("deb_sha256")
    os.makedirs(debdir, exist_ok=True)
    # A .deb kept from an earlier build (or dropped there by hand) with the pinned hash.
    for cand in sorted(glob.glob(os.path.join(debdir, f"{pkg}_*.deb"))):
        if want and sha256_file(cand) == want:
            return cand, False
    tmp = tempfile.mkdtemp(prefix="dl-", dir=debdir)
    try:
        p = run(["apt-get", "download", f"{pkg}={ver}"], cwd=tmp, check=False,
                what=f"apt-get download {pkg}={ver}",
                fix="apt-get missing: build on Debian bookworm (or a derivative with its archive)")
        fallback = False
        if p.returncode != 0:
            err = p.stderr.decode("utf-8", "replace").strip()
            log(f"  {pkg}={ver} could not be downloaded ({err.splitlines()[-1] if err else 'no message'}); "
                f"trying the archive's candidate version of {pkg}")
            p2 = run(["apt-get", "download", pkg], cwd=tmp, check=False,
                     what=f"apt-get download {pkg}", fix="")
            if p2.returncode != 0:
                raise BuildError(
                    f"cannot download {pkg}: neither {pkg}={ver} nor the candidate version is available.\n"
                    f"{p2.stderr.decode('utf-8', 'replace').strip()}\n"
                    f"Run apt-get update (the package lists may be missing or stale), check that "
                    f"bookworm's main component is in /etc/apt/sources.list(.d), or put "
                    f"{pkg}_{ver}_all.deb into {debdir}.")
            fallback = True
        debs = glob.glob(os.path.join(tmp, "*.deb"))
        if len(debs) != 1:
            raise BuildError(f"apt-get download {pkg} left {len(debs)} .deb files in {tmp}")
        got = debs[0]
        got_ver = deb_field(got, "Version")
        sha = sha256_file(got)
        if not fallback:
            if want and sha != want:
                raise BuildError(
                    f"{pkg} {ver}: the downloaded .deb has sha256 {sha}, pinned {want}.\n"
                    f"The same version with different bytes should not happen in Debian: check "
                    f"your mirror. (Only if you mean to change the pin: build.py --update-pins.)")
        else:
            log(f"  FALLBACK: pinned {pkg} {ver} is no longer in the archive; downloaded {got_ver} "
                f"(sha256 {sha}); it is used only if every source file matches its pinned sha256")
        dest = os.path.join(debdir, os.path.basename(got))
        os.replace(got, dest)
        return dest, fallback
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def extract(deb: str, dest: str) -> None:
    run(["dpkg-deb", "-x", deb, dest], what=f"dpkg-deb -x {os.path.basename(deb)}",
        fix="dpkg-deb missing: run this on Debian/Ubuntu")


# --------------------------------------------------------------------------- HTML cut

class _Cutter(html.parser.HTMLParser):
    """Find the byte ranges of elements to drop (whole subtrees), by tag/class/id."""

    def __init__(self, text: str, rules: list[dict]):
        super().__init__(convert_charrefs=True)
        self.text = text
        self.rules = rules
        self.line_off = [0]
        for m in re.finditer("\n", text):
            self.line_off.append(m.end())
        self.cuts: list[tuple[int, int]] = []
        self.active: tuple[str, int, int] | None = None  # (tag, depth, start)

    def _pos(self) -> int:
        line, col = self.getpos()
        return self.line_off[line - 1] + col

    def _match(self, tag, attrs) -> bool:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        for r in self.rules:
            if r.get("tag", tag) != tag:
                continue
            if "class" in r and r["class"] not in classes:
                continue
            if "id" in r and a.get("id") != r["id"]:
                continue
            return True
        return False

    def handle_starttag(self, tag, attrs):
        if self.active:
            t, depth, start = self.active
            if tag == t:
                self.active = (t, depth + 1, start)
            return
        if self._match(tag, attrs):
            self.active = (tag, 1, self._pos())

    def handle_startendtag(self, tag, attrs):
        if self.active:
            return
        if self._match(tag, attrs):
            start = self._pos()
            self.cuts.append((start, start + len(self.get_starttag_text())))

    def handle_endtag(self, tag):
        if not self.active:
            return
        t, depth, start = self.active
        if tag != t:
            return
        if depth > 1:
            self.active = (t, depth - 1, start)
            return
        pos = self._pos()
        end = self.text.index(">", pos) + 1
        self.cuts.append((start, end))
        self.active = None


def cut_elements(text: str, rules: list[dict]) -> tuple[str, int]:
    c = _Cutter(text, rules)
    c.feed(text)
    c.close()
    if c.active:
        raise BuildError(f"unbalanced <{c.active[0]}> while cutting chrome out of the HTML")
    out, last = [], 0
    for s, e in c.cuts:
        out.append(text[last:s])
        last = e
    out.append(text[last:])
    return "".join(out), len(c.cuts)


# Chrome of DocBook XSL and texinfo (makeinfo 6.x/7.x) HTML output.
CUT_RULES = {
    "docbook": [
        {"tag": "div", "class": c} for c in (
            "navheader", "navfooter", "toc", "list-of-tables", "list-of-figures",
            "list-of-examples", "list-of-equations", "list-of-procedures", "index")
    ],
    "texinfo": [
        {"tag": "div", "class": "header"}, {"tag": "div", "class": "nav-panel"},
        {"tag": "div", "class": "Contents_element"}, {"tag": "div", "class": "contents"},
        {"tag": "div", "class": "Overview_element"}, {"tag": "div", "class": "shortcontents"},
        {"tag": "ul", "class": "section-toc"}, {"tag": "table", "class": "menu"},
        {"tag": "a", "class": "copiable-anchor"}, {"tag": "a", "class": "copiable-link"},
        {"tag": "div", "id": "Indexes"},  # Appendix D Indexes: index pages
    ],
}

# --------------------------------------------------------------------------- AST clean

ADMONITIONS = {"note", "tip", "warning", "caution", "important"}
STRUCTURAL = {"book", "part", "chapter", "preface", "appendix", "article", "glossary",
              "bibliography", "section", "sect1", "sect2", "sect3", "sect4", "sect5",
              "refentry", "colophon", "dedication", "reference"}
TEXINFO_LEVEL = {
    "chapter": 1, "unnumbered": 1, "appendix": 1,
    "section": 2, "unnumberedsec": 2, "appendixsec": 2,
    "subsection": 3, "unnumberedsubsec": 3, "appendixsubsec": 3,
    "subsubsection": 4, "unnumberedsubsubsec": 4, "appendixsubsubsec": 4,
}
TEXINFO_RELATIVE = {"heading", "subheading", "subsubheading", "node-heading", "chapheading",
                    "majorheading"}
TEXINFO_TITLE = {"settitle", "top"}
ABS_URL = re.compile(r"^(https?|ftp|mailto|news|nntp|git|ssh|rsync)://|^mailto:", re.I)
EMPTY_ATTR = ["", [], []]


def _is_cjk(ch: str) -> bool:
    if not ch:
        return False
    o = ord(ch)
    return (0x2E80 <= o <= 0x9FFF or 0xAC00 <= o <= 0xD7AF or 0xF900 <= o <= 0xFAFF
            or 0xFE30 <= o <= 0xFE4F or 0xFF00 <= o <= 0xFFEF or 0x20000 <= o <= 0x2FA1F
            or 0x3000 <= o <= 0x303F)


def _stringify(x) -> str:
    """Plain text of AST nodes (for titles, table checks)."""
    if isinstance(x, list):
        return "".join(_stringify(i) for i in x)
    if isinstance(x, dict):
        t, c = x.get("t"), x.get("c")
        if t == "Str":
            return c
        if t in ("Space", "SoftBreak", "LineBreak"):
            return " "
        if t in ("Code", "Math", "RawInline"):
            return c[1] if t != "RawInline" else ""
        if t == "CodeBlock":
            return c[1]
        if t == "Image":
            return ""
        if t in ("Link", "Span"):
            return _stringify(c[1])
        if t == "Quoted":
            return '"' + _stringify(c[1]) + '"'
        if t in ("Cite",):
            return _stringify(c[1])
        if t == "Note":
            return ""
        if c is None:
            return ""
        return _stringify(c)
    return ""


class Cleaner:
    def __init__(self, fmt: str, lang: str, front: bool, src: str):
        self.fmt = fmt
        self.lang = lang
        self.front = front
        self.src = src
        self.divs: list[list[str]] = []  # class lists of the enclosing Divs
        self.footnotes: dict[str, list] = {}
        self.tex_level = 0  # texinfo: level of the current sectioning heading
        self.stats = {"links_unwrapped": 0, "images_dropped": 0, "footnotes": 0,
                      "admonitions": 0, "tables": 0, "deflists": 0, "titles_demoted": 0}

    # ---- entry
    def document(self, blocks: list) -> list:
        self._collect_footnotes(blocks)
        out = self.blocks(blocks)
        return out

    def _collect_footnotes(self, blocks):
        def visit(bs):
            for b in bs:
                if b.get("t") == "Div":
                    (ident, classes, _), inner = b["c"]
                    if "footnote" in classes and ident.startswith("ftn."):
                        self.footnotes[ident] = inner
                    else:
                        visit(inner)
                elif b.get("t") in ("BlockQuote",):
                    visit(b["c"])
        visit(blocks)

    # ---- blocks
    def blocks(self, bs: list) -> list:
        out = []
        for b in bs:
            out.extend(self.block(b))
        return out

    def block(self, b: dict) -> list:
        t, c = b["t"], b.get("c")
        if t in ("Plain", "Para"):
            ils = self.inlines(c)
            ils = _trim(ils)
            return [{"t": t, "c": ils}] if ils else []
        if t == "Header":
            return self.header(*c)
        if t == "CodeBlock":
            text = c[1].strip("\n")
            text = "\n".join(l.rstrip() for l in text.split("\n"))
            # The class makes pandoc's GFM writer use a fence (it writes an indented block
            # for a code block without one); postprocess() takes the info string off again.
            return [{"t": "CodeBlock", "c": [["", [FENCE_CLASS], []], text]}] if text.strip() else []
        if t in ("RawBlock", "HorizontalRule", "Null"):
            return []
        if t == "BlockQuote":
            inner = self.blocks(c)
            return [{"t": "BlockQuote", "c": inner}] if inner else []
        if t == "BulletList":
            items = [self.blocks(it) for it in c]
            items = [it for it in items if it]
            return [{"t": "BulletList", "c": items}] if items else []
        if t == "OrderedList":
            items = [self.blocks(it) for it in c[1]]
            items = [it for it in items if it]
            return [{"t": "OrderedList", "c": [c[0], items]}] if items else []
        if t == "DefinitionList":
            return self.deflist(c)
        if t == "LineBlock":
            ils = []
            for line in c:
                if ils:
                    ils.append({"t": "LineBreak"})
                ils.extend(self.inlines(line))
            return [{"t": "Para", "c": ils}] if _trim(ils) else []
        if t == "Table":
            return self.table(c)
        if t == "Div":
            return self.div(*c)
        raise BuildError(f"{self.src}: unexpected pandoc block {t}")

    def header(self, level, attr, ils):
        classes = attr[1]
        text_ils = _trim(self.inlines(ils))
        new = level
        if self.front:
            new = None
        elif self.fmt == "texinfo":
            cls = [k for k in classes if k in TEXINFO_LEVEL or k in TEXINFO_RELATIVE
                   or k in TEXINFO_TITLE]
            if not cls:
                raise BuildError(f"{self.src}: texinfo heading without a known class "
                                 f"{classes}: {_stringify(ils)!r}; extend TEXINFO_LEVEL in build.py")
            k = cls[0]
            if k in TEXINFO_TITLE:
                new = None
            elif k in TEXINFO_LEVEL:
                new = TEXINFO_LEVEL[k]
                self.tex_level = new
            else:
                new = min(6, max(1, self.tex_level) + 1)
        else:  # docbook: the book's own title page is front matter, not a chapter
            enclosing = [k for cl in self.divs for k in cl if k in STRUCTURAL]
            if enclosing and enclosing[-1] == "book":
                new = None
        if not text_ils:
            return []
        if new is None:
            self.stats["titles_demoted"] += 1
            return [{"t": "Para", "c": [{"t": "Strong", "c": text_ils}]}]
        return [{"t": "Header", "c": [new, EMPTY_ATTR, text_ils]}]

    def div(self, attr, inner):
        ident, classes, _ = attr
        if "footnote" in classes and ident.startswith("ftn."):
            return []  # moved into the Note at its reference
        if "footnotes" in classes:
            return []
        adm = [k for k in classes if k in ADMONITIONS]
        if adm:
            return self.admonition(adm[0], inner)
        self.divs.append(classes)
        try:
            return self.blocks(inner)
        finally:
            self.divs.pop()

    def admonition(self, kind, inner):
        """DocBook admonition: a table with an icon cell and a title cell, or a
        Header + blocks. Becomes a block quote starting with **Tip** (or Note ...)."""
        self.stats["admonitions"] += 1
        title = None
        body = []
        for b in inner:
            if b["t"] == "Table":
                for row in _table_rows(b["c"]):
                    for cell in row:
                        blocks = cell[4]
                        txt = _stringify(blocks).strip()
                        if not txt:
                            continue  # the icon
                        if title is None and len(txt) < 40 and all(
                                x["t"] in ("Plain", "Para") for x in blocks):
                            title = blocks
                        else:
                            body.extend(blocks)
            elif b["t"] == "Header" and title is None:
                title = [{"t": "Plain", "c": b["c"][2]}]
            else:
                body.append(b)
        body = self.blocks(body)
        head_ils = _trim(self.inlines(title[0]["c"])) if title else [
            {"t": "Str", "c": kind.capitalize()}]
        return [{"t": "BlockQuote", "c": [{"t": "Para", "c": [{"t": "Strong", "c": head_ils}]}] + body}]

    def deflist(self, items):
        self.stats["deflists"] += 1
        out = []
        for term, defs in items:
            term_ils = _trim(self.inlines(term))
            # a Para, not Plain: the writer then puts a blank line between term and
            # definition (a Plain would run into the definition's first paragraph)
            blocks = [{"t": "Para", "c": term_ils}] if term_ils else []
            for d in defs:
                blocks.extend(self.blocks(d))
            if blocks:
                # a term alone (several <dt> for one <dd>) joins the next item
                if out and len(out[-1]) == 1 and out[-1][0]["t"] == "Para" and term_ils:
                    prev = out[-1][0]["c"]
                    out[-1] = [{"t": "Para", "c": prev + [{"t": "Str", "c": ","}, {"t": "Space"}] + term_ils}] + blocks[1:]
                else:
                    out.append(blocks)
        return [{"t": "BulletList", "c": out}] if out else []

    def table(self, c):
        """Rebuild the table as a rectangular grid of single-line cells so that pandoc
        writes a GFM pipe table (it falls back to raw HTML otherwise)."""
        self.stats["tables"] += 1
        _attr, _caption, _colspecs, head, bodies, foot = c
        rows_in = [(r, True) for r in head[1]]
        for body in bodies:
            rows_in += [(r, False) for r in body[2]] + [(r, False) for r in body[3]]
        rows_in += [(r, False) for r in foot[1]]
        grid: list[list] = []
        is_head: list[bool] = []
        pending: dict[tuple[int, int], bool] = {}  # cells covered by a rowspan
        for ri, (row, h) in enumerate(rows_in):
            cells = row[1]
            out_row = []
            col = 0
            it = iter(cells)
            while True:
                while pending.pop((ri, col), False):
                    out_row.append([])
                    col += 1
                cell = next(it, None)
                if cell is None:
                    break
                _, _, rowspan, colspan, blocks = cell
                out_row.append(self.cell_inlines(blocks))
                for k in range(1, max(1, colspan)):
                    out_row.append([])
                for r2 in range(1, max(1, rowspan)):
                    for k in range(max(1, colspan)):
                        pending[(ri + r2, col + k)] = True
                col += max(1, colspan)
            # spans reaching past the last cell of this row
            while any(key[0] == ri for key in pending):
                if pending.pop((ri, col), False):
                    out_row.append([])
                    col += 1
                else:
                    break
            grid.append(out_row)
            is_head.append(h)
        grid_nonempty = [i for i, r in enumerate(grid) if any(r)]
        grid = [grid[i] for i in grid_nonempty]
        is_head = [is_head[i] for i in grid_nonempty]
        if not grid:
            return []
        ncols = max(len(r) for r in grid)
        for r in grid:
            r.extend([[]] * (ncols - len(r)))
        # Drop columns that are empty everywhere (layout spacers).
        keep = [j for j in range(ncols) if any(r[j] for r in grid)]
        grid = [[r[j] for j in keep] for r in grid]
        ncols = len(keep)
        nhead = 0
        while nhead < len(grid) and is_head[nhead]:
            nhead += 1
        if nhead == 0:
            nhead = 1  # GFM tables need a header row: promote the first row
        head_rows, body_rows = grid[:nhead], grid[nhead:]
        if len(head_rows) > 1:  # GFM has one header row: merge the others into it
            merged = []
            for j in range(ncols):
                parts = [r[j] for r in head_rows if r[j]]
                ils = []
                for p in parts:
                    if ils:
                        ils += [{"t": "Space"}, {"t": "Str", "c": "/"}, {"t": "Space"}]
                    ils += p
                merged.append(ils)
            head_rows = [merged]

        def mkrow(r):
            return [EMPTY_ATTR, [[EMPTY_ATTR, {"t": "AlignDefault"}, 1, 1,
                                  [{"t": "Plain", "c": ils}] if ils else []] for ils in r]]

        return [{"t": "Table", "c": [
            EMPTY_ATTR, [None, []],
            [[{"t": "AlignDefault"}, {"t": "ColWidthDefault"}] for _ in range(ncols)],
            [EMPTY_ATTR, [mkrow(r) for r in head_rows]],
            [[EMPTY_ATTR, 0, [], [mkrow(r) for r in body_rows]]],
            [EMPTY_ATTR, []],
        ]}]

    def cell_inlines(self, blocks) -> list:
        """Flatten a cell's blocks to one line of inlines."""
        parts: list[list] = []

        def flat(bs):
            for b in bs:
                t, c = b["t"], b.get("c")
                if t in ("Plain", "Para"):
                    parts.append(self.inlines(c))
                elif t == "Header":
                    parts.append(self.inlines(c[2]))
                elif t == "CodeBlock":
                    parts.append([{"t": "Code", "c": [EMPTY_ATTR, " ".join(c[1].split())]}])
                elif t == "LineBlock":
                    for line in c:
                        parts.append(self.inlines(line))
                elif t in ("BulletList", "OrderedList"):
                    items = c if t == "BulletList" else c[1]
                    for it in items:
                        flat(it)
                elif t == "DefinitionList":
                    for term, defs in c:
                        parts.append(self.inlines(term))
                        for d in defs:
                            flat(d)
                elif t in ("BlockQuote",):
                    flat(c)
                elif t == "Div":
                    flat(c[1])
                elif t == "Table":
                    for row in _table_rows(c):
                        for cell in row:
                            flat(cell[4])
        flat(blocks)
        # Links in table cells keep their text only: the cells of DocBook package
        # tables are mostly links (package page, popcon graph, size page) whose URLs
        # would triple the width of every row.
        parts = [_unlink(p) for p in parts]
        out = []
        for p in parts:
            p = _trim([x if x["t"] not in ("LineBreak", "SoftBreak") else {"t": "Space"} for x in p])
            if not p:
                continue
            if out:
                out += [{"t": "Str", "c": ";"}, {"t": "Space"}]
            out += p
        return out

    # ---- inlines
    def inlines(self, ils: list) -> list:
        out = []
        for x in ils:
            out.extend(self.inline(x))
        # join CJK text that the HTML source broke across lines
        if self.lang.startswith("zh"):
            res = []
            for i, x in enumerate(out):
                if x["t"] == "SoftBreak":
                    prev = res[-1] if res else None
                    nxt = out[i + 1] if i + 1 < len(out) else None
                    a = _last_char(prev)
                    b = _first_char(nxt)
                    # CSS Text 3: a line break between two East Asian wide characters
                    # is removed; next to a Latin letter it is a space.
                    if _is_cjk(a) and _is_cjk(b):
                        continue
                res.append(x)
            out = res
        # collapse runs of spaces
        res = []
        for x in out:
            if x["t"] in ("Space", "SoftBreak") and res and res[-1]["t"] in ("Space", "SoftBreak"):
                continue
            res.append(x)
        return res

    def inline(self, x: dict) -> list:
        t, c = x["t"], x.get("c")
        if t == "Str" and "\xa0" in c:
            # DocBook puts no-break spaces after section numbers ("1.1.\xa0Title") and in
            # cross references: plain spaces, so titles and text match what people type.
            out = []
            for k, part in enumerate(c.split("\xa0")):
                if k:
                    out.append({"t": "Space"})
                if part:
                    out.append({"t": "Str", "c": part})
            return out
        if t in ("Str", "Space", "SoftBreak", "LineBreak", "Math"):
            return [x]
        if t in ("Emph", "Strong", "Strikeout"):
            inner = _trim(self.inlines(c))
            return [{"t": t, "c": inner}] if inner else []
        if t == "Underline":
            inner = _trim(self.inlines(c))
            return [{"t": "Emph", "c": inner}] if inner else []
        if t in ("Superscript", "Subscript"):
            inner = self.inlines(c)
            if not inner:
                return []
            return [{"t": "Str", "c": "^" if t == "Superscript" else "_"}] + inner
        if t == "SmallCaps":
            return self.inlines(c)
        if t == "Quoted":
            return [{"t": "Quoted", "c": [c[0], self.inlines(c[1])]}]
        if t == "Cite":
            return self.inlines(c[1])
        if t == "Code":
            return [{"t": "Code", "c": [EMPTY_ATTR, c[1]]}] if c[1] else []
        if t == "RawInline":
            return []
        if t == "Image":
            self.stats["images_dropped"] += 1
            return []
        if t == "Span":
            return self.inlines(c[1])
        if t == "Note":
            return [{"t": "Note", "c": self.blocks(c)}]
        if t == "Link":
            attr, content, (url, title) = c
            if "footnote" in attr[1] and url.startswith("#ftn."):
                body = self.footnotes.get(url[1:])
                if body is None:
                    raise BuildError(f"{self.src}: footnote {url} has no text")
                self.stats["footnotes"] += 1
                return [{"t": "Note", "c": self.blocks(_strip_backlink(body))}]
            inner = _trim(self.inlines(content))
            if not inner:
                return []
            if ABS_URL.match(url):
                return [{"t": "Link", "c": [EMPTY_ATTR, inner, [url, ""]]}]
            self.stats["links_unwrapped"] += 1
            return inner
        raise BuildError(f"{self.src}: unexpected pandoc inline {t}")


def _unlink(ils: list) -> list:
    out = []
    for x in ils:
        if x["t"] == "Link":
            out.extend(_unlink(x["c"][1]))
        elif x["t"] in ("Emph", "Strong", "Strikeout"):
            out.append({"t": x["t"], "c": _unlink(x["c"])})
        else:
            out.append(x)
    return out


def _table_rows(c):
    _attr, _cap, _specs, head, bodies, foot = c
    rows = list(head[1])
    for b in bodies:
        rows += b[2] + b[3]
    rows += foot[1]
    return [r[1] for r in rows]


def _strip_backlink(blocks):
    """Drop the '[1]' link back to the reference at the start of a DocBook footnote."""
    if blocks and blocks[0]["t"] in ("Para", "Plain"):
        ils = list(blocks[0]["c"])
        while ils and ils[0]["t"] in ("Space", "SoftBreak"):
            ils.pop(0)
        if ils and ils[0]["t"] == "Link" and ils[0]["c"][2][0].startswith("#"):
            ils.pop(0)
        return [{"t": blocks[0]["t"], "c": ils}] + blocks[1:]
    return blocks


def _blank(x: dict) -> bool:
    return x["t"] in ("Space", "SoftBreak", "LineBreak") or (x["t"] == "Str" and not x["c"].strip())


def _trim(ils: list) -> list:
    i, j = 0, len(ils)
    while i < j and _blank(ils[i]):
        i += 1
    while j > i and _blank(ils[j - 1]):
        j -= 1
    return ils[i:j]


def _last_char(x) -> str:
    if x and x["t"] == "Str" and x["c"]:
        return x["c"][-1]
    if x and x["t"] == "Code" and x["c"][1]:
        return x["c"][1][-1]
    return ""


def _first_char(x) -> str:
    if x and x["t"] == "Str" and x["c"]:
        return x["c"][0]
    if x and x["t"] == "Code" and x["c"][1]:
        return x["c"][1][0]
    return ""


# --------------------------------------------------------------------------- markdown

def convert(m: dict, root: str) -> tuple[str, list[tuple[int, str]], dict]:
    fmt = m["format"]
    api = None
    all_blocks: list = []
    stats: dict = {"cut_elements": 0}
    front = set(m.get("front_files", []))
    for i, s in enumerate(m["sources"]):
        path = os.path.join(root, s["path"])
        with open(path, "rb") as f:
            raw = f.read()
        text = raw.decode("utf-8")
        text, ncut = cut_elements(text, CUT_RULES[fmt])
        stats["cut_elements"] += ncut
        doc = json.loads(pandoc(["-f", "html", "-t", "json"], text.encode("utf-8"),
                                what=f"pandoc HTML -> JSON of {s['path']}"))
        api = doc["pandoc-api-version"]
        cl = Cleaner(fmt, m["lang"], s["path"] in front, s["path"])
        blocks = cl.document(doc["blocks"])
        for k, v in cl.stats.items():
            stats[k] = stats.get(k, 0) + v
        all_blocks.append({"t": "Para", "c": [{"t": "Str", "c": f"{MARKER}{i}"}]})
        all_blocks.extend(blocks)
    doc = {"pandoc-api-version": api, "meta": {}, "blocks": all_blocks}
    md = pandoc(PANDOC_GFM_ARGS + WRAP_ARGS[m.get("wrap", "auto")], json.dumps(doc).encode("utf-8"),
                what=f"pandoc JSON -> GFM of {m['name']}").decode("utf-8")
    md, starts = postprocess(md, m)
    return md, starts, stats


def postprocess(md: str, m: dict) -> tuple[str, list[tuple[int, str]]]:
    """Take out the per-file marker paragraphs (remembering the line where each source
    file's text begins) and end the text with exactly one newline. Nothing else is
    touched: blank lines inside code blocks are content."""
    out: list[str] = []
    starts: list[tuple[int, str]] = []
    skip_blank = False
    for line in md.split("\n"):
        if line.startswith(MARKER):
            starts.append((len(out) + 1, m["sources"][int(line[len(MARKER):])]["path"]))
            skip_blank = True
            continue
        if skip_blank and line == "":
            skip_blank = False
            continue
        skip_blank = False
        if FENCE_CLASS in line:
            line = FENCE_RE.sub(r"\1", line)
        out.append(line)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n", starts


def source_file_fn(starts: list[tuple[int, str]]):
    def f(line: int):
        cur = None
        for s, p in starts:
            if s <= line:
                cur = p
            else:
                break
        return cur
    return f


def lint_markdown(md: str) -> list[str]:
    """Leftovers that must not be there: raw HTML, empty links, unfenced code."""
    from markdown_it import MarkdownIt
    problems = []
    # CommonMark has no footnotes: blank out GFM footnote definitions (their indented
    # continuation lines would look like indented code), keeping the line numbers.
    lines = md.split("\n")
    in_note = False
    for i, line in enumerate(lines):
        if re.match(r"\[\^[^\]]+\]: ", line):
            in_note = True
            lines[i] = ""
        elif in_note and (line.startswith("    ") or line == ""):
            lines[i] = ""
        else:
            in_note = False
    toks = MarkdownIt("commonmark").enable("table").parse("\n".join(lines))
    if FENCE_CLASS in md:
        problems.append(f"fence marker {FENCE_CLASS} left in the text")
    for t in toks:
        if t.type == "html_block":
            problems.append(f"line {t.map[0] + 1}: raw HTML block {t.content[:60]!r}")
        if t.type == "code_block":
            problems.append(f"line {t.map[0] + 1}: indented (unfenced) code block")
        if t.type == "inline":
            for ch in t.children or []:
                if ch.type == "html_inline":
                    problems.append(f"line {t.map[0] + 1}: raw HTML {ch.content[:60]!r}")
    def walk(children, line):
        for k, ch in enumerate(children or []):
            if ch.type == "link_open" and k + 1 < len(children) and children[k + 1].type == "link_close":
                problems.append(f"line {line}: empty link to {ch.attrs.get('href')}")
    for t in toks:
        if t.type == "inline":
            walk(t.children, t.map[0] + 1 if t.map else "?")
    return problems


# --------------------------------------------------------------------------- build

def outputs_ok(m: dict, d: str) -> bool:
    need = ["manual.md", "sections.jsonl", "manual.docx", "LICENSE", "SOURCE.txt"]
    if not all(os.path.isfile(os.path.join(d, n)) for n in need):
        return False
    return (m.get("manual_md_sha256") and m.get("sections_jsonl_sha256")
            and sha256_file(os.path.join(d, "manual.md")) == m["manual_md_sha256"]
            and sha256_file(os.path.join(d, "sections.jsonl")) == m["sections_jsonl_sha256"])


def docx_heading_styles(path: str) -> dict:
    with zipfile.ZipFile(path) as z:
        xml = z.read("word/document.xml").decode("utf-8")
    counts: dict = {}
    for lvl in re.findall(r'<w:pStyle w:val="Heading(\d)"', xml):
        counts[int(lvl)] = counts.get(int(lvl), 0) + 1
    return counts


def stats_of(md: str, rows: list[dict]) -> dict:
    per = {}
    for r in rows:
        per[r["level"]] = per.get(r["level"], 0) + 1
    words = len(re.findall(r"\w+", md)) if True else 0
    cjk = sum(1 for ch in md if _is_cjk(ch))
    return {
        "lines": md.count("\n"),
        "chars": len(md),
        "words": len(re.findall(r"[A-Za-z0-9_]+", md)),
        "cjk_chars": cjk,
        "headings": len(rows),
        "per_level": dict(sorted(per.items())),
        "chapters": per.get(1, 0),
        "max_line": max(len(l) for l in md.split("\n")),
    }


def build_one(m: dict, conf: dict, outroot: str, update_pins: bool, force: bool) -> dict:
    name = m["name"]
    dest = os.path.join(outroot, name)
    t0 = time.time()
    if not force and not update_pins and outputs_ok(m, dest):
        log(f"{name}: up to date ({dest}, hashes match the pins) [{time.time() - t0:.3f}s]")
        return {"name": name, "skipped": True}
    pv = pandoc_version()
    if pv != conf["pandoc"]:
        log(f"{name}: WARNING pandoc {pv}, the pins were made with pandoc {conf['pandoc']} "
            f"(Debian bookworm); the output may differ")
    debdir = os.path.join(outroot, ".debs")
    deb, fallback = fetch_deb(m, debdir)
    deb_sha = sha256_file(deb)
    deb_ver = deb_field(deb, "Version")
    log(f"{name}: {os.path.basename(deb)} sha256 {deb_sha}")
    os.makedirs(os.path.join(outroot, ".work"), exist_ok=True)
    work = tempfile.mkdtemp(prefix=f"{name}-", dir=os.path.join(outroot, ".work"))
    try:
        root = os.path.join(work, "root")
        extract(deb, root)
        bad = []
        for s in m["sources"]:
            p = os.path.join(root, s["path"])
            if not os.path.isfile(p):
                bad.append(f"  {s['path']}: missing from the package")
                continue
            got = sha256_file(p)
            if s.get("sha256") and got != s["sha256"]:
                bad.append(f"  {s['path']}: sha256 {got}, pinned {s['sha256']}")
            if update_pins:
                s["sha256"] = got
        if bad:
            raise BuildError(
                f"{m['package']} {deb_ver} does not contain the pinned source files:\n"
                + "\n".join(bad) + "\n"
                + ("The pinned version is gone from the archive and the candidate differs: "
                   "the manual cannot be rebuilt identically. Get the pinned .deb "
                   f"({m['package']} {m['version']}, sha256 {m.get('deb_sha256')}) from a Debian "
                   f"archive snapshot and put it in {debdir}, or re-pin with --update-pins and "
                   f"re-check every questions.jsonl."
                   if fallback else "Re-pin with --update-pins only if you mean to change the manual."))
        if fallback:
            log(f"{name}: FALLBACK accepted: {m['package']} {deb_ver} instead of {m['version']}, "
                f"all {len(m['sources'])} source files match their pinned sha256")
        md, starts, cstats = convert(m, root)
        rows = sections.extract(md, source_file_fn(starts))
        stage = os.path.join(work, "out")
        os.makedirs(stage)
        with open(os.path.join(stage, "manual.md"), "w", encoding="utf-8", newline="\n") as f:
            f.write(md)
        sections.write_jsonl(rows, os.path.join(stage, "sections.jsonl"))
        md_sha = sha256_file(os.path.join(stage, "manual.md"))
        sec_sha = sha256_file(os.path.join(stage, "sections.jsonl"))
        problems = lint_markdown(md)
        if problems:
            log(f"{name}: {len(problems)} Markdown leftovers:\n  " + "\n  ".join(problems[:20]))
        if update_pins:
            m["deb_sha256"] = m.get("deb_sha256") if fallback else deb_sha
            m["manual_md_sha256"] = md_sha
            m["sections_jsonl_sha256"] = sec_sha
        else:
            errs = []
            if md_sha != m.get("manual_md_sha256"):
                errs.append(f"  manual.md       built {md_sha}\n                  pinned {m.get('manual_md_sha256')}")
            if sec_sha != m.get("sections_jsonl_sha256"):
                errs.append(f"  sections.jsonl  built {sec_sha}\n                  pinned {m.get('sections_jsonl_sha256')}")
            if errs:
                keep = os.path.join(outroot, f"{name}.mismatch")
                shutil.rmtree(keep, ignore_errors=True)
                shutil.move(stage, keep)
                raise BuildError(
                    f"the built manual differs from the pin (labelled questions point at its "
                    f"line ranges, so it is not installed):\n" + "\n".join(errs) + "\n"
                    f"  pandoc used {pv} ({pandoc_version_full()}), pins made with {conf['pandoc']}; "
                    f"markdown-it-py pinned {conf['markdown_it_py']}.\n"
                    f"  The rejected build is in {keep} (diff it against {dest}). If the change is "
                    f"intended, run build.sh --update-pins and re-check every questions.jsonl with "
                    f"check_questions.py.")
        # copyright -> LICENSE
        lic_src = os.path.join(root, m["copyright"])
        shutil.copyfile(os.path.realpath(lic_src) if os.path.exists(lic_src) else lic_src,
                        os.path.join(stage, "LICENSE"))
        # docx
        run(["pandoc", "-f", "gfm", "manual.md", "-o", "manual.docx"], cwd=stage,
            what=f"pandoc manual.md -> manual.docx ({name})", fix="run apt-get install -y pandoc")
        hstyles = docx_heading_styles(os.path.join(stage, "manual.docx"))
        st = stats_of(md, rows)
        st.update(cstats)
        with open(os.path.join(stage, "SOURCE.txt"), "w", encoding="utf-8") as f:
            f.write(source_txt(m, conf, deb, deb_ver, deb_sha, fallback, md_sha, sec_sha, st))
        tmp_old = dest + ".old"
        if os.path.exists(dest):
            shutil.rmtree(tmp_old, ignore_errors=True)
            os.replace(dest, tmp_old)
        os.replace(stage, dest)
        shutil.rmtree(tmp_old, ignore_errors=True)
        shutil.rmtree(os.path.join(outroot, f"{name}.mismatch"), ignore_errors=True)
        dt = time.time() - t0
        log(f"{name}: built {dest} in {dt:.1f}s: {st['lines']} lines, {st['headings']} headings "
            f"{st['per_level']}, {st['chapters']} chapters; docx heading styles {hstyles}")
        return {"name": name, "skipped": False, "seconds": round(dt, 1), "stats": st,
                "docx_headings": hstyles, "lint": problems}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def source_txt(m, conf, deb, deb_ver, deb_sha, fallback, md_sha, sec_sha, st) -> str:
    srcs = ", ".join("/" + s["path"] for s in m["sources"])
    if len(m["sources"]) > 3:
        first, last = m["sources"][0]["path"], m["sources"][-1]["path"]
        srcs = (f"{len(m['sources'])} files /{os.path.dirname(first)}/"
                f"{{{', '.join(os.path.basename(s['path']) for s in m['sources'])}}}")
    fb = (f" (FALLBACK: pinned {m['version']} no longer in the archive; {deb_ver} used because "
          f"every source file's sha256 matches the pin)" if fallback else "")
    return (
        f"Debian bookworm package {m['package']} {deb_ver}{fb} ({os.path.basename(deb)}, sha256 "
        f"{deb_sha}), {srcs} in the book's order: {m['title']}. "
        f"License: {m['license']} (LICENSE = /{m['copyright']}). "
        f"manual.md = the HTML without navigation, tables of contents and index pages, converted "
        f"with Debian's pandoc ({pandoc_version_full()}) to GitHub-flavoured Markdown "
        f"(chapters at level 1); sha256 {md_sha}; sections.jsonl sha256 {sec_sha} "
        f"(markdown-it-py {conf['markdown_it_py']}). {st['lines']} lines, {st['headings']} headings, "
        f"{st['chapters']} chapters. Rebuild: {REL_SCRIPT} {m['name']}\n")


def report(m: dict, outroot: str) -> str:
    """Sizes and the ten largest sections of a built manual."""
    d = os.path.join(outroot, m["name"])
    with open(os.path.join(d, "manual.md"), encoding="utf-8") as f:
        md = f.read()
    with open(os.path.join(d, "sections.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(l) for l in f]
    st = stats_of(md, rows)
    out = [f"== {m['name']} ({m['lang']}, {m['package']} {m['version']}): {st['lines']} lines, "
           f"{st['chars']} chars, {st['words']} Latin words, {st['cjk_chars']} CJK chars, "
           f"longest line {st['max_line']}",
           f"   headings {st['headings']}: " + ", ".join(f"H{k} {v}" for k, v in st["per_level"].items())
           + f"; chapters (H1) {st['chapters']}",
           "   largest sections by own_chars:"]
    for r in sorted(rows, key=lambda r: -r["own_chars"])[:10]:
        out.append(f"   {r['own_chars']:7d}  {r['id']} L{r['line_start']}-{r['line_end']}  {r['path_str']}")
    return "\n".join(out)


def load_conf(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"build.py: cannot read the pins {path}: {e}")


def save_conf(conf: dict, path: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(conf, f, ensure_ascii=False, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Build the pinned Debian manuals (see manuals.json).")
    ap.add_argument("names", nargs="*", help="manuals to build (default: all)")
    ap.add_argument("--out", default=os.environ.get("QUARRY_MANUALS") or os.path.expanduser(
        "~/.cache/quarry/manuals"))
    ap.add_argument("--force", action="store_true", help="rebuild even when up to date")
    ap.add_argument("--update-pins", action="store_true",
                    help="write the hashes of this build into manuals.json (changes the benchmark!)")
    ap.add_argument("--stats", metavar="FILE", help="write per-manual build stats as JSON")
    ap.add_argument("--report", action="store_true",
                    help="print sizes and the largest sections of the built manuals (no build)")
    ap.add_argument("--manifest", default=MANUALS_JSON, help="the pins (default: manuals.json beside this script)")
    a = ap.parse_args(argv)
    conf = load_conf(a.manifest)
    by_name = {m["name"]: m for m in conf["manuals"]}
    unknown = [n for n in a.names if n not in by_name]
    if unknown:
        log(f"unknown manual(s) {unknown}; known: {', '.join(by_name)}")
        return 2
    names = a.names or list(by_name)
    if a.report:
        for n in names:
            if not os.path.isfile(os.path.join(a.out, n, "sections.jsonl")):
                log(f"{n}: not built in {a.out}: run {REL_SCRIPT} {n}")
                return 1
            print(report(by_name[n], a.out))
        return 0
    os.makedirs(a.out, exist_ok=True)
    results, failed = [], []
    for n in names:
        try:
            results.append(build_one(by_name[n], conf, a.out, a.update_pins, a.force))
        except BuildError as e:
            log(f"ERROR {n}: {e}")
            failed.append(n)
    if a.update_pins and not failed:
        save_conf(conf, a.manifest)
        log(f"pins written to {a.manifest}")
    if a.stats:
        with open(a.stats, "w", encoding="utf-8") as f:
            json.dump(results, f, ensure_ascii=False, indent=2)
    if failed:
        log(f"FAILED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
