"""The directory-RAG crew of the seed write-up, on Quarry's chapter-rag tools over MCP.

    python crew.py "How do I limit bandwidth during office hours?" \
        --config ../../../host/demo.toml --tools rclone

Three agents run in order (CrewAI `Process.sequential`):

1. the router reads the chapter tree, level by level, and answers JSON
   `{chapters, confidence, reason}`. The crew's code strips a code fence, checks the JSON
   against a pydantic model and the ids against the manual (Quarry's `validate_citations`),
   and gives the router one retry, told what was wrong. Below confidence 0.7 each routed
   section widens to its parent chapter;
2. the searcher searches inside the routed chapters only (a search elsewhere is refused);
3. the answerer writes the answer with citations, `[chapter 3.4]` (【章节 3.4】 for a Chinese
   question), after checking them with `validate_citations`; an answer citing a chapter it
   did not validate gets one retry.

Each run writes router.json, search.json, answer.json and run.json to its own folder under
--runs, so a wrong answer can be traced to the stage that went wrong.

Any OpenAI-compatible endpoint: OPENAI_BASE_URL and OPENAI_API_KEY, and a model per agent in
CREW_ROUTER_MODEL and CREW_SEARCHER_MODEL (default gpt-4o-mini) and CREW_ANSWER_MODEL (default
gpt-4o); CREW_LLM_TIMEOUT bounds each LLM request (seconds, default 120).
Exit status: 0 answered, 1 a stage failed (the message says which), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from crewai import Agent, Crew, Process, Task
from crewai.llms.providers.openai.completion import OpenAICompletion
from crewai.tools import BaseTool
from crewai_tools import MCPServerAdapter
from mcp import StdioServerParameters
from pydantic import BaseModel, Field, PrivateAttr

import guards
from scoped_tools import CheckedCitations, Scope, ScopedSearch, parse

STAGES = ("router", "searcher", "answerer")


class Meter:
    """LLM calls, characters sent and seconds waited, per stage."""

    def __init__(self) -> None:
        self.stages = {s: {"llm_calls": 0, "chars_sent": 0, "llm_seconds": 0.0, "tool_calls": 0} for s in STAGES}

    def llm(self, stage: str, messages: Any, seconds: float) -> None:
        s = self.stages[stage]
        s["llm_calls"] += 1
        s["chars_sent"] += chars(messages)
        s["llm_seconds"] += seconds


METER = Meter()


def chars(messages: Any) -> int:
    if isinstance(messages, str):
        return len(messages)
    total = 0
    for m in messages or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(p.get("text", "")) for p in content if isinstance(p, dict))
    return total


class MeteredLLM(OpenAICompletion):
    """The OpenAI-compatible client, counting what each stage sends and waits for."""

    _stage: str = PrivateAttr(default="router")

    def for_stage(self, stage: str) -> MeteredLLM:
        self._stage = stage
        return self

    def call(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return super().call(messages, *args, **kwargs)
        finally:
            METER.llm(self._stage, messages, time.perf_counter() - start)


class TreeArgs(BaseModel):
    level: int = Field(default=1, ge=1, le=3, description="How many levels to show: 1 first, then open one chapter")
    under: str | None = Field(default=None, description="Show only the chapters inside this chapter id, e.g. \"12\"")


class Counted(BaseTool):
    """A tool passed through unchanged (name, description and schema may be restated for the
    agent), its calls counted for its stage."""

    _inner: Any = PrivateAttr()
    _stage: str = PrivateAttr()

    def __init__(self, inner: BaseTool, stage: str, **restated: Any) -> None:
        fields = {"name": inner.name, "description": inner.description, "args_schema": inner.args_schema}
        super().__init__(**{**fields, **restated})
        self._inner = inner
        self._stage = stage

    def _run(self, **kwargs: Any) -> str:
        METER.stages[self._stage]["tool_calls"] += 1
        return self._inner.run(**{k: v for k, v in kwargs.items() if v is not None})


class Run:
    """One question's run: its folder and what each stage produced."""

    def __init__(self, runs: Path) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        runs.mkdir(parents=True, exist_ok=True)
        n = 1
        while True:
            # mkdir, not a check first: two runs started in the same second get their own folders.
            try:
                (runs / f"{stamp}-{n}").mkdir()
                break
            except FileExistsError:
                n += 1
        self.dir = runs / f"{stamp}-{n}"
        self.router: dict[str, Any] = {"attempts": []}
        self.answer: dict[str, Any] = {"attempts": []}

    def write(self, name: str, value: Any) -> None:
        (self.dir / f"{name}.json").write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def router_guard(run: Run, scope: Scope, check_ids: BaseTool):
    """The router task's guardrail: the JSON contract, real chapter ids, widening."""

    def guard(output):  # unannotated: CrewAI inspects a guardrail's annotations
        raw = output.raw
        attempt: dict[str, Any] = {"raw": raw}
        run.router["attempts"].append(attempt)
        try:
            route = guards.parse_router(raw)
            answer = parse(check_ids.run(cited=route.chapters, candidates=route.chapters))
            if not isinstance(answer, dict):
                # Never pass ids that were not checked.
                raise guards.RouterError(f"Quarry could not check the chapter ids: {str(answer)[:300]}")
            bad = [c for c in answer.get("cited", []) if not c.get("valid")]
            if bad:
                raise guards.RouterError(
                    "these chapter ids are not in the manual: "
                    + "; ".join(f"{c['id']} ({c['reason']})" for c in bad)
                    + ". Use only ids list_chapter_tree shows."
                )
        except guards.RouterError as e:
            attempt["error"] = str(e)
            run.write("router", run.router)
            return False, f"Your routing answer was refused: {e}"
        chapters = guards.widen(route)
        scope.chapters = chapters
        decided = {
            "chapters": chapters,
            "confidence": route.confidence,
            "reason": route.reason,
        }
        if chapters != route.chapters:
            decided["widened_from"] = route.chapters
            decided["widened_because"] = f"confidence {route.confidence} is below {guards.WIDEN_BELOW}"
        attempt["parsed"] = route.model_dump()
        run.router["decided"] = decided
        run.write("router", run.router)
        return True, json.dumps(decided, ensure_ascii=False)

    return guard


def answer_guard(run: Run, scope: Scope, chinese: bool):
    """The answer task's guardrail: it cites, and only what validate_citations accepted."""

    def guard(output):  # unannotated: CrewAI inspects a guardrail's annotations
        text = output.raw
        cited = guards.citations(text)
        validated = {
            c["id"]
            for v in scope.validations
            if isinstance(v["result"], dict)
            for c in v["result"].get("cited", [])
            if c.get("valid")
        }
        attempt = {"answer": text, "citations": cited}
        run.answer["attempts"].append(attempt)
        problem = None
        if not cited:
            problem = f"the answer cites no chapter; end each point with its source, like {guards.citation('3.4', chinese)}"
        elif missing := [c for c in cited if c not in validated]:
            problem = (
                f"the answer cites {', '.join(missing)} without validate_citations accepting them; "
                "call validate_citations with every id you cite, and cite only the valid ones"
            )
        if problem:
            attempt["error"] = problem
            run.write("answer", run.answer)
            return False, f"Your answer was refused: {problem}"
        run.answer.update(answer=text, citations=cited, validations=scope.validations)
        run.write("answer", run.answer)
        return True, text

    return guard


def build(tools: dict[str, BaseTool], run: Run, scope: Scope, question: str, endpoint: dict[str, str]) -> Crew:
    chinese = guards.is_chinese(question)
    cite = guards.citation("3.4", chinese)

    def llm(stage: str, model: str, **kw: Any) -> MeteredLLM:
        return MeteredLLM(
            model=model, base_url=endpoint["base_url"], api_key=endpoint["api_key"], timeout=endpoint["timeout"], **kw
        ).for_stage(stage)

    tree = Counted(
        tools["list_chapter_tree"],
        "router",
        name="list_chapter_tree",
        description="Lists the manual's chapters: ids, titles and how many sections each holds. "
        "Call it with level 1 first; to look inside a chapter, call it again with under set to its id.",
        args_schema=TreeArgs,
    )
    router = Agent(
        role="Router, an expert in document structure and routing",
        goal="Pick the 1-3 chapters of the manual's tree most likely to answer the user's question",
        backstory="You know technical manuals' tables of contents well. You judge by chapter titles and "
        "their place in the tree; you never read the chapters' text, that is the next step.",
        tools=[tree],
        llm=llm("router", endpoint["router"], temperature=0, max_tokens=512),
        max_iter=4,
    )
    router_task = Task(
        description=(
            "Read the user's question. Call list_chapter_tree (level 1), then open the most promising "
            "chapters with under=<id> to see their sections. Then answer with one JSON object:\n"
            '{"chapters": ["3.4", "3.5"], "confidence": 0.9, "reason": "..."}\n'
            "chapters: 1-3 chapter ids that exist in the tree; confidence: how sure you are, 0 to 1; "
            "reason: one sentence. Output only the JSON: no code fence, no explanation.\n\n"
            "User question: {question}"
        ),
        expected_output="One JSON object with chapters, confidence and reason, nothing else",
        agent=router,
        guardrail=router_guard(run, scope, tools["validate_citations"]),
        guardrail_max_retries=1,
    )
    searcher = Agent(
        role="Searcher, who retrieves passages from given chapters",
        goal="Find the passages of the routed chapters that answer the user's question",
        backstory="You search only inside the chapters the router chose, and never widen the search yourself.",
        tools=[Counted(ScopedSearch(tools["search_chapter_content"], scope), "searcher")],
        llm=llm("searcher", endpoint["searcher"], temperature=0),
        max_iter=6,
    )
    search_task = Task(
        description=(
            "The routing result (JSON, its chapters already checked) is in the context. For each of its "
            "chapters call search_chapter_content with that chapter_id, the user's question as query and "
            "top_k 5. Return a JSON array of every result: chapter_id, chapter_title, content, score. "
            "Leave no routed chapter out and search no other.\n\nUser question: {question}"
        ),
        expected_output="A JSON array of the passages found in the routed chapters",
        agent=searcher,
        context=[router_task],
    )
    answerer = Agent(
        role="Answerer, an expert in explaining technical documentation",
        goal="Answer accurately from the search report, citing the chapter of every point",
        backstory="You answer strictly from the retrieved passages. When they do not hold the answer you "
        "say what is missing rather than invent it. You cite full chapter ids.",
        tools=[Counted(CheckedCitations(tools["validate_citations"], scope), "answerer")],
        llm=llm("answerer", endpoint["answerer"], temperature=0.2),
        max_iter=4,
    )
    answer_task = Task(
        description=(
            "Answer the user's question from the search report in the context.\n"
            "1. First the answer's core in under 100 words.\n"
            f"2. Then the details point by point, each ending with its source, written as {cite}.\n"
            "3. If the passages do not hold the information, say so; do not piece it together.\n"
            "Before you answer, call validate_citations with every chapter id you will cite, and cite "
            "only the ids it reports valid.\n\nUser question: {question}"
        ),
        expected_output=f"The answer, each point citing its chapter as {cite}",
        agent=answerer,
        context=[search_task],
        guardrail=answer_guard(run, scope, chinese),
        guardrail_max_retries=1,
    )
    return Crew(
        agents=[router, searcher, answerer],
        tasks=[router_task, search_task, answer_task],
        process=Process.sequential,
    )


def startup_problem(config: Path, quarry: str) -> str | None:
    """Why `quarry serve --stdio` would exit at once, when it can be told without starting it."""
    if not config.is_file():
        return f"no Quarry config at {config}: pass --config (or set QUARRY_CONFIG)"
    try:
        tomllib.loads(config.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        return f"{config} is not a valid TOML config: {e}"
    if shutil.which(quarry) is None:
        return f"cannot run the quarry binary {quarry!r}: pass --quarry (or set QUARRY_BIN); `make host` builds it"
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("question")
    p.add_argument("--config", default=os.environ.get("QUARRY_CONFIG", "quarry.toml"), help="Quarry's config (stdio)")
    p.add_argument("--tools", default="rclone", help="the chapter-rag instance in that config (default rclone)")
    p.add_argument("--quarry", default=os.environ.get("QUARRY_BIN", "quarry"), help="the quarry binary (stdio)")
    p.add_argument("--http", metavar="URL", help="a running `quarry serve --http`, e.g. http://127.0.0.1:8765/mcp")
    p.add_argument("--call-log", metavar="FILE", help="have the quarry it starts log every tool call to FILE")
    p.add_argument("--runs", default="runs", help="where each run's folder goes (default ./runs)")
    p.add_argument("--connect-timeout", type=int, default=30, metavar="SECONDS",
                   help="how long quarry may take to list its tools (default 30, CrewAI's)")
    a = p.parse_args()
    if not a.question.strip():
        print("error: the question is empty; ask one, e.g. crew.py \"How do I limit bandwidth?\"", file=sys.stderr)
        return 2
    # The adapter does not notice a quarry that exits at start (it waits out the connect
    # timeout), so the mistakes that make it exit are caught here first.
    if not a.http:
        problem = startup_problem(Path(a.config), a.quarry)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    endpoint = {
        "base_url": os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
        "api_key": os.environ.get("OPENAI_API_KEY", ""),
        "router": os.environ.get("CREW_ROUTER_MODEL", "gpt-4o-mini"),
        "searcher": os.environ.get("CREW_SEARCHER_MODEL", "gpt-4o-mini"),
        "answerer": os.environ.get("CREW_ANSWER_MODEL", "gpt-4o"),
        # Each LLM request is bounded (the client retries twice more on failure).
        "timeout": os.environ.get("CREW_LLM_TIMEOUT", "120"),
    }
    try:
        endpoint["timeout"] = float(endpoint["timeout"])
    except ValueError:
        endpoint["timeout"] = 0.0
    if not endpoint["timeout"] > 0:
        print(f"error: CREW_LLM_TIMEOUT={os.environ.get('CREW_LLM_TIMEOUT')!r} is not a number of seconds above 0",
              file=sys.stderr)
        return 2
    if not endpoint["api_key"]:
        # Local servers (Ollama, llama.cpp, vLLM) take any key; the SDK insists on one.
        endpoint["api_key"] = "unused"
    if a.http:
        server: Any = {"url": a.http, "transport": "streamable-http"}
    else:
        args = ["--config", a.config, "serve", "--stdio"] + (["--call-log", a.call_log] if a.call_log else [])
        server = StdioServerParameters(command=a.quarry, args=args, env=dict(os.environ))
    try:
        run = Run(Path(a.runs))
    except OSError as e:
        print(f"error: cannot make a run folder under {a.runs}: {e}; pass --runs a directory you can write",
              file=sys.stderr)
        return 2
    scope = Scope()
    launched = time.perf_counter()
    outcome = "answered"
    try:
        adapter_cm = MCPServerAdapter(server, connect_timeout=a.connect_timeout)
    except Exception as e:  # the adapter wraps whatever stopped quarry in a RuntimeError
        target = a.http or f"{a.quarry} --config {a.config}"
        print(f"error: cannot start or reach quarry ({target}): {e}; check --config and --quarry, or --http",
              file=sys.stderr)
        return 2
    with adapter_cm as adapter:
        # Quarry's start (and, the first time, its index build) is not the crew's cost.
        started = time.perf_counter()
        prefix = a.tools + "_"
        tools = {t.name[len(prefix):]: t for t in adapter if t.name.startswith(prefix)}
        missing = {"list_chapter_tree", "search_chapter_content", "validate_citations"} - tools.keys()
        if missing:
            print(f"error: quarry serves no {', '.join(sorted(missing))} for instance {a.tools!r}; "
                  f"its tools are {sorted(t.name for t in adapter)}; pass --tools with a chapter-rag instance",
                  file=sys.stderr)
            return 2
        crew = build(tools, run, scope, a.question, endpoint)
        try:
            result = crew.kickoff(inputs={"question": a.question})
            answer = result.raw
        except Exception as e:  # CrewAI raises once a guardrail's retry is spent
            stage, attempts = ("router", run.router["attempts"]) if "decided" not in run.router else (
                ("answerer", run.answer["attempts"]) if run.answer["attempts"] else ("searcher", []))
            refusal = attempts[-1].get("error") if attempts else None
            if refusal:
                outcome = f"failed at the {stage}: its answer was refused {len(attempts)} times (one retry): {refusal}"
            else:
                outcome = f"failed at the {stage}: {e}"
            answer = None
    run.write("search", {"chapters": scope.chapters, "searches": scope.searches, "refused": scope.refused,
                         "report": crew.tasks[1].output.raw if crew.tasks[1].output else None})
    wall = time.perf_counter() - started
    llm_seconds = sum(s["llm_seconds"] for s in METER.stages.values())
    summary = {
        "question": a.question,
        "outcome": outcome,
        "models": {s: endpoint[s] for s in STAGES},
        "endpoint": endpoint["base_url"],
        "stages": METER.stages,
        "startup_seconds": round(started - launched, 3),
        "wall_seconds": round(wall, 3),
        "wall_seconds_without_llm": round(wall - llm_seconds, 3),
    }
    run.write("run", summary)
    print(f"run folder: {run.dir}")
    if answer is None:
        print(f"error: the crew {outcome}; see {run.dir} for each stage's output", file=sys.stderr)
        return 1
    print(f"routed to: {', '.join(scope.chapters)}")
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
