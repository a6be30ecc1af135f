#!/usr/bin/env python3
"""Validate labelled questions (questions.jsonl) against their manual's sections.jsonl.

  python3 tests/eval/manuals/check_questions.py QUESTIONS.jsonl [--sections SECTIONS.jsonl]
  python3 tests/eval/manuals/check_questions.py --manual NAME QUESTIONS.jsonl
  python3 tests/eval/manuals/check_questions.py --shared      # the two manuals in shared/data

Without --sections / --manual, the sections.jsonl beside the questions file is used.
--manual NAME uses ${QUARRY_MANUALS:-~/.cache/quarry/manuals}/NAME/sections.jsonl and checks
each question's lang against manuals.json. Several question files may be given (each
with the sections.jsonl beside it, or all against --sections).

Each line must be one JSON object with exactly the fields of the existing question files:
id, question, answer_sections, answer_section_ids, acceptable_sections,
acceptable_section_ids, chapters, type (single|multi), lang, note. Checked: ids unique;
every section id exists; answer_sections[i] / acceptable_sections[i] equal the path_str of
the id at the same position; chapters equal the (deduplicated) chapters of the gold
sections; single has one gold section, multi at least two; no section both gold and
acceptable; section ids named in the note exist. Prints a summary per file; exits 1 with
file:line messages on any error (2 on bad usage).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIELDS = ["id", "question", "answer_sections", "answer_section_ids", "acceptable_sections",
          "acceptable_section_ids", "chapters", "type", "lang", "note"]
LANGS = {"en", "zh-Hans"}
SHARED = os.environ.get("QUARRY_SHARED_DATA") or os.path.normpath(
    os.path.join(HERE, "..", "..", "..", "..", "shared", "data"))


def load_sections(path: str) -> dict:
    secs = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
                secs[r["id"]] = r
            except (ValueError, KeyError) as e:
                raise SystemExit(f"{path}:{n}: not a sections.jsonl row ({e})")
    return secs


def check_file(qpath: str, spath: str, want_lang: str | None = None) -> tuple[list[str], dict]:
    errs: list[str] = []
    secs = load_sections(spath)
    seen_ids: dict[str, int] = {}
    count = multi = 0
    langs = set()

    def err(n, msg):
        errs.append(f"{qpath}:{n}: {msg}")

    with open(qpath, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            err(n, "empty line")
            continue
        try:
            q = json.loads(line)
        except ValueError as e:
            err(n, f"not JSON: {e}")
            continue
        if not isinstance(q, dict):
            err(n, "not a JSON object")
            continue
        count += 1
        missing = [k for k in FIELDS if k not in q]
        extra = [k for k in q if k not in FIELDS]
        if missing:
            err(n, f"missing field(s) {missing}")
        if extra:
            err(n, f"unknown field(s) {extra} (the fields are {FIELDS})")
        if missing:
            continue
        qid = q["id"]
        if not isinstance(qid, str) or not qid:
            err(n, "id must be a non-empty string")
        elif qid in seen_ids:
            err(n, f"id {qid!r} repeats line {seen_ids[qid]}")
        else:
            seen_ids[qid] = n
        if not isinstance(q["question"], str) or not q["question"].strip():
            err(n, "question must be a non-empty string")
        if not isinstance(q["note"], str):
            err(n, "note must be a string")
        if q["type"] not in ("single", "multi"):
            err(n, f"type {q['type']!r} is not single or multi")
        if q["lang"] not in LANGS:
            err(n, f"lang {q['lang']!r} is not one of {sorted(LANGS)}")
        elif want_lang and q["lang"] != want_lang:
            err(n, f"lang {q['lang']!r}, the manual's is {want_lang!r}")
        langs.add(q["lang"])

        ok_lists = True
        for names, ids in (("answer_sections", "answer_section_ids"),
                           ("acceptable_sections", "acceptable_section_ids")):
            P, I = q[names], q[ids]
            if not (isinstance(P, list) and isinstance(I, list)
                    and all(isinstance(x, str) for x in P + I)):
                err(n, f"{names} and {ids} must be lists of strings")
                ok_lists = False
                continue
            if len(P) != len(I):
                err(n, f"{names} has {len(P)} paths, {ids} {len(I)} ids")
            if len(set(I)) != len(I):
                err(n, f"{ids} repeats an id: {I}")
            for k, sid in enumerate(I):
                s = secs.get(sid)
                if s is None:
                    err(n, f"{ids}[{k}] {sid!r} is not in {spath}")
                    ok_lists = False
                    continue
                if k < len(P) and P[k] != s["path_str"]:
                    err(n, f"{names}[{k}] {P[k]!r} is not the path of {sid}: {s['path_str']!r}")
        if not ok_lists:
            continue
        gold = q["answer_section_ids"]
        if not gold:
            err(n, "no gold section (answer_section_ids is empty)")
        both = set(gold) & set(q["acceptable_section_ids"])
        if both:
            err(n, f"{sorted(both)} both gold and acceptable")
        if q["type"] == "multi":
            multi += 1
            if len(gold) < 2:
                err(n, f"type multi needs at least 2 gold sections, has {len(gold)}")
        elif q["type"] == "single" and len(gold) != 1:
            err(n, f"type single needs exactly 1 gold section, has {len(gold)} (use multi)")
        want_ch = list(dict.fromkeys(secs[s]["chapter"] for s in gold))
        ch = q["chapters"]
        if not isinstance(ch, list) or len(set(map(str, ch))) != len(ch) or set(ch) != set(want_ch):
            err(n, f"chapters {ch!r} are not the gold sections' chapters {want_ch!r}")
        if isinstance(q["note"], str):
            for sid in re.findall(r"\bS\d{5}\b", q["note"]):
                if sid not in secs:
                    err(n, f"note names {sid}, which is not in {spath}")
    return errs, {"count": count, "multi": multi, "langs": sorted(langs)}


def manuals_dir() -> str:
    return os.environ.get("QUARRY_MANUALS") or os.path.expanduser("~/.cache/quarry/manuals")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Validate questions.jsonl against sections.jsonl.")
    ap.add_argument("questions", nargs="*")
    ap.add_argument("--sections", help="sections.jsonl to check against")
    ap.add_argument("--manual", help="a manual of manuals.json, built by build.sh")
    ap.add_argument("--shared", action="store_true",
                    help=f"check the question files of the manuals in {SHARED}/manuals")
    a = ap.parse_args(argv)
    jobs = []  # (questions, sections, lang)
    if a.shared:
        d = os.path.join(SHARED, "manuals")
        if not os.path.isdir(d):
            print(f"check_questions: {d} not found (set QUARRY_SHARED_DATA to shared/data)",
                  file=sys.stderr)
            return 2
        for name in sorted(os.listdir(d)):
            q = os.path.join(d, name, "questions.jsonl")
            if os.path.isfile(q):
                jobs.append((q, os.path.join(d, name, "sections.jsonl"), None))
    lang = None
    sections = a.sections
    if a.manual:
        with open(os.path.join(HERE, "manuals.json"), encoding="utf-8") as f:
            conf = {m["name"]: m for m in json.load(f)["manuals"]}
        if a.manual not in conf:
            print(f"check_questions: unknown manual {a.manual!r}; known: {', '.join(conf)}",
                  file=sys.stderr)
            return 2
        lang = conf[a.manual]["lang"]
        sections = sections or os.path.join(manuals_dir(), a.manual, "sections.jsonl")
        if not os.path.isfile(sections):
            print(f"check_questions: {sections} missing: run bash tests/eval/manuals/build.sh "
                  f"{a.manual}", file=sys.stderr)
            return 2
    for q in a.questions:
        s = sections or os.path.join(os.path.dirname(os.path.abspath(q)), "sections.jsonl")
        jobs.append((q, s, lang))
    if not jobs:
        ap.print_usage(sys.stderr)
        return 2
    bad = 0
    for q, s, lg in jobs:
        for p in (q, s):
            if not os.path.isfile(p):
                print(f"check_questions: {p} not found", file=sys.stderr)
                return 2
        errs, st = check_file(q, s, lg)
        for e in errs:
            print(e)
        status = "OK" if not errs else f"{len(errs)} error(s)"
        print(f"{q}: {st['count']} questions, {st['multi']} multi, lang {','.join(st['langs']) or '-'}"
              f" against {s}: {status}")
        bad += len(errs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
