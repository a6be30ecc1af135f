"""The tools the searcher and the answerer get: Quarry's own tools (over MCP), held to the
chapters the route chose, and recorded for the run's audit trail.

Nothing is searched or checked here: each call goes to the Quarry tool unchanged, or is refused
before it leaves the crew when it would step outside the route.
"""

from __future__ import annotations

import json
from typing import Any

from crewai.tools import BaseTool
from pydantic import BaseModel, Field, PrivateAttr

from guards import within


class Scope:
    """The chapters the route chose (set once the router's answer passed its checks), and
    every scoped call made, for the audit trail."""

    def __init__(self) -> None:
        self.chapters: list[str] = []
        self.searches: list[dict[str, Any]] = []
        self.refused: list[dict[str, Any]] = []
        self.validations: list[dict[str, Any]] = []

    def allows(self, chapter_id: str) -> bool:
        return any(within(chapter_id.strip(), c) for c in self.chapters)


class _Scoped(BaseTool):
    """A Quarry tool (over MCP) seen through the route's scope."""

    _tool: Any = PrivateAttr()
    _scope: Scope = PrivateAttr()

    def __init__(self, tool: BaseTool, scope: Scope, **data: Any) -> None:
        super().__init__(**data)
        self._tool = tool
        self._scope = scope


class SearchArgs(BaseModel):
    chapter_id: str = Field(description="One of the routed chapter ids (or a section of one), e.g. \"3.4\"")
    query: str = Field(description="What to look for: the user's question, or part of it")
    top_k: int = Field(default=5, ge=1, le=10, description="How many passages to return")


class ScopedSearch(_Scoped):
    """Quarry's `search_chapter_content`, refused outside the routed chapters."""

    name: str = "search_chapter_content"
    description: str = (
        "Searches inside one routed chapter of the manual (its sections included), by meaning and "
        "keywords. Returns JSON results with chapter_id, chapter_title, chunk_index, score and content. "
        "Only the chapters the router chose may be searched."
    )
    args_schema: type[BaseModel] = SearchArgs
    def _run(self, chapter_id: str, query: str, top_k: int = 5) -> str:
        if not self._scope.allows(chapter_id):
            allowed = ", ".join(self._scope.chapters) or "none yet"
            message = (
                f"chapter {chapter_id} is outside the routed chapters ({allowed}); "
                "search one of those (or a section of one) instead"
            )
            self._scope.refused.append({"chapter_id": chapter_id, "query": query, "reason": message})
            return "Error: " + message
        result = self._tool.run(chapter_id=chapter_id.strip(), query=query, top_k=top_k)
        self._scope.searches.append({"chapter_id": chapter_id, "query": query, "top_k": top_k, "result": parse(result)})
        return result


class CitationArgs(BaseModel):
    cited: list[str] = Field(description="The chapter ids your answer cites, e.g. [\"3.4\", \"3.5.1\"]")


class CheckedCitations(_Scoped):
    """Quarry's `validate_citations`, with the routed chapters as the candidates (the model
    names only what it cites, so it cannot widen the candidates)."""

    name: str = "validate_citations"
    description: str = (
        "Checks that the chapter ids your answer cites are inside the chapters that were searched. "
        "Call it with every id you cite before you answer; cite only ids it reports valid."
    )
    args_schema: type[BaseModel] = CitationArgs
    def _run(self, cited: list[str]) -> str:
        result = self._tool.run(cited=[str(c).strip() for c in cited], candidates=list(self._scope.chapters))
        self._scope.validations.append({"cited": cited, "candidates": list(self._scope.chapters), "result": parse(result)})
        return result


def parse(text: Any) -> Any:
    """A tool's JSON answer as data, or its text when it is not JSON."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text
