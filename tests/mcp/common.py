"""Shared by the MCP client tests: start `quarry serve`, check tool lists, swap a component.

The tests are driven by tests/integration/mcp.rs, which writes a config, and runs one of the
client scripts here with the venv holding the official Python `mcp` SDK (tests/mcp/venvs.sh).
Every wait is bounded; a failure raises AssertionError with what was seen.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--quarry", required=True, help="the quarry binary")
    p.add_argument("--config", required=True, help="the host config")
    p.add_argument("--transport", choices=["stdio", "http"], required=True)
    p.add_argument("--expected", help="`quarry list --json` output: the tools tools/list must return")
    p.add_argument("--swap-src", help="a new component version to copy over --swap-dest")
    p.add_argument("--swap-dest", help="the component file the host watches")
    return p.parse_args()


@contextmanager
def http_server(quarry: str, config: str, env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """Runs `quarry serve --http 127.0.0.1:0`; yields its URL once it listens."""
    proc = subprocess.Popen(
        [quarry, "--config", config, "serve", "--http", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    found: list[str] = []
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            sys.stderr.write("[quarry] " + line)
            m = re.search(r"serving MCP at (http://\S+)", line)
            if m and not found:
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        ready.wait(120)
        assert found, f"quarry serve --http did not start within 120 s; stderr:\n{''.join(lines)}"
        yield found[0], proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def stdio_command(quarry: str, config: str) -> tuple[str, list[str]]:
    return quarry, ["--config", config, "serve", "--stdio"]


def load_expected(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return json.load(f)


def null_types(schema: Any, where: str = "$") -> list[str]:
    """Every place a schema makes a value nullable: `type: [..., "null"]`, `type: "null"`, an
    `anyOf`/`oneOf` with a null branch, or `nullable: true` (CrewAI issue #7280)."""
    found = []
    if isinstance(schema, dict):
        t = schema.get("type")
        if (isinstance(t, list) and "null" in t) or t == "null" or schema.get("nullable") is True:
            found.append(where)
        for union in ("anyOf", "oneOf"):
            branches = schema.get(union)
            if isinstance(branches, list) and any(isinstance(b, dict) and b.get("type") == "null" for b in branches):
                found.append(f"{where}.{union}")
        for k, v in schema.items():
            found += null_types(v, f"{where}.{k}")
    elif isinstance(schema, list):
        for i, v in enumerate(schema):
            found += null_types(v, f"{where}[{i}]")
    return found


def check_tool_list(tools: list[Any], expected: list[dict[str, Any]]) -> None:
    """tools/list (as scenario.ToolInfo) matches `quarry list --json`: the same names in the same (sorted) order, the
    components' own descriptions and schemas, every schema an object without nullable types."""
    names = [t.name for t in tools]
    assert names == [e["name"] for e in expected], f"tools/list names {names} != {[e['name'] for e in expected]}"
    assert names == sorted(names), f"tools/list is not sorted: {names}"
    assert len(set(names)) == len(names), f"duplicate tool names: {names}"
    for t, e in zip(tools, expected):
        schema = t.schema
        assert t.description == e["description"], f"{t.name}: description {t.description!r} != {e['description']!r}"
        assert schema == e["args_schema"], f"{t.name}: inputSchema {schema} != {e['args_schema']}"
        assert schema.get("type") == "object", f"{t.name}: inputSchema is not an object schema: {schema}"
        assert not null_types(schema), f"{t.name}: nullable types at {null_types(schema)}"


def swap(src: str, dest: str) -> None:
    """Replaces a component the way a deploy does: write beside it, then rename over it."""
    tmp = dest + ".tmp-new"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def quarry_call(quarry: str, config: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """`quarry call --json`: what the CLI says the same call produces."""
    out = subprocess.run(
        [quarry, "--config", config, "call", tool, json.dumps(args), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, f"quarry call {tool} failed: {out.stderr}"
    return json.loads(out.stdout)


def expect_mirror(name: str, text: str, structured: Any, cli: dict[str, Any]) -> None:
    """content[0] is the whole text; structuredContent mirrors the hits, the route and extra data."""
    assert text == cli["text"], f"{name}: content[0].text differs from `quarry call`:\n{text[:500]}\n---\n{cli['text'][:500]}"
    assert isinstance(structured, dict), f"{name}: structuredContent is {structured!r}"
    assert structured.get("hits") == cli["hits"], f"{name}: structuredContent.hits differ from `quarry call`"
    assert structured.get("route") == cli["route"], f"{name}: structuredContent.route differs from `quarry call`"
    # Ingest reports ("opened", "added") say what this process indexed for the call, which
    # differs between the long-running server and a fresh CLI process; the rest must match.
    def stable(extra: Any) -> Any:
        # So does how long a phase took (`*_ms`, in a build's report).
        if isinstance(extra, dict):
            return {k: stable(v) for k, v in extra.items() if k not in ("opened", "added") and not k.endswith("_ms")}
        if isinstance(extra, list):
            return [stable(v) for v in extra]
        return extra

    assert stable(structured.get("extra")) == stable(cli["extra"]), (
        f"{name}: structuredContent.extra differs from `quarry call`:\n{structured.get('extra')}\n---\n{cli['extra']}"
    )


class Steps:
    """Prints each step with its time, so a failure log shows how far a run got."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __call__(self, what: str) -> None:
        print(f"[{time.monotonic() - self.t0:7.2f}s] {what}", flush=True)
