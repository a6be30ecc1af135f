"""What the crew's code checks between the agents, without a model: the router's JSON, the
widening of an unsure route, the scope of the searcher and the citations of the answer.

Everything here is plain Python, so it is the same whichever LLM runs the agents.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, Field, ValidationError, field_validator

#: Below this router confidence the search widens from each routed section to its parent.
WIDEN_BELOW = 0.7

_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.S)
_CITE_EN = re.compile(r"\[chapter\s+([0-9]+(?:\.[0-9]+)*)\]", re.I)
_CITE_ZH = re.compile(r"【章节\s*([0-9]+(?:\.[0-9]+)*)】")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


class RouterOutput(BaseModel):
    """The router's contract: 1-3 chapter ids, a confidence in [0, 1], one reason."""

    chapters: list[str] = Field(min_length=1, max_length=3)
    confidence: float = Field(ge=0.0, le=1.0)
    reason: str = Field(min_length=1)

    @field_validator("chapters")
    @classmethod
    def _ids(cls, ids: list[str]) -> list[str]:
        out = []
        for raw in ids:
            c = str(raw).strip()
            if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", c):
                raise ValueError(f"{raw!r} is not a chapter id; ids look like \"3\" or \"3.4.1\"")
            if c not in out:
                out.append(c)
        return out


class RouterError(ValueError):
    """The router's answer breaks the contract; the message says how, for its retry."""


def strip_fence(text: str) -> str:
    """The text inside a Markdown code fence, or the text itself (trimmed)."""
    m = _FENCE.match(text)
    return (m.group(1) if m else text).strip()


def parse_router(text: str) -> RouterOutput:
    """Parses the router's answer (a code fence around it is tolerated)."""
    body = strip_fence(text)
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        raise RouterError(
            f"the answer is not JSON ({e.msg} at line {e.lineno} column {e.colno}); answer with one "
            'JSON object only, like {"chapters": ["3.4"], "confidence": 0.9, "reason": "..."}, '
            "with no other text"
        ) from None
    try:
        return RouterOutput.model_validate(value)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'answer'}: {err['msg']}" for err in e.errors())
        raise RouterError(f"the JSON does not match the contract: {problems}") from None


def parent(chapter_id: str) -> str:
    """The chapter a section belongs to ("3.4.1" -> "3.4"); a top-level chapter is its own."""
    return chapter_id.rsplit(".", 1)[0] if "." in chapter_id else chapter_id


def within(chapter_id: str, scope: str) -> bool:
    """Whether `chapter_id` is `scope` or one of its sections."""
    return chapter_id == scope or chapter_id.startswith(scope + ".")


def widen(route: RouterOutput) -> list[str]:
    """The chapters to search: the routed ones, or their parents when the router is unsure
    (confidence below WIDEN_BELOW), without repeats or chapters inside another one."""
    ids = [parent(c) for c in route.chapters] if route.confidence < WIDEN_BELOW else list(route.chapters)
    out: list[str] = []
    for c in ids:
        if any(within(c, o) for o in out):
            continue
        out = [o for o in out if not within(o, c)] + [c]
    return out


def is_chinese(text: str) -> bool:
    """Whether a question is Chinese (then citations read 【章节 3.4】)."""
    return len(_CJK.findall(text)) >= max(2, len(text.strip()) // 10)


def citation(chapter_id: str, chinese: bool) -> str:
    """How an answer cites a chapter."""
    return f"【章节 {chapter_id}】" if chinese else f"[chapter {chapter_id}]"


def citations(answer: str) -> list[str]:
    """The chapter ids an answer cites, in order of first appearance."""
    found = [m.group(1) for m in _CITE_EN.finditer(answer)] + [m.group(1) for m in _CITE_ZH.finditer(answer)]
    return list(dict.fromkeys(found))
