"""The steps every client test takes, whatever the SDK and protocol era: tools/list, one call
per RAG tool, a tool error, arguments that break the schema, a protocol error, calls to two
instances at once, and a hot swap. A client script supplies a `Session` adapter over its SDK."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

import anyio

import calls
import common


@dataclass
class Result:
    """A tools/call result, the same whatever the SDK calls its fields."""

    is_error: bool
    content: list[Any]  # (type, text) pairs
    structured: Any


@dataclass
class ToolInfo:
    name: str
    description: str | None
    schema: dict[str, Any]


class ProtocolError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{code} {message}")
        self.code, self.message = code, message


class Session(Protocol):
    async def list_tools(self) -> list[ToolInfo]: ...

    async def call(self, name: str, arguments: dict[str, Any]) -> Result: ...


async def tools_and_calls(s: Session, args: Any, step: common.Steps) -> None:
    expected = common.load_expected(args.expected)
    first = await s.list_tools()
    common.check_tool_list(first, expected)
    again = await s.list_tools()
    assert again == first, "tools/list changed between two calls"
    step(f"tools/list: {len(first)} tools, as `quarry list` says")

    for name, arguments in calls.RAG_CALLS:
        res = await s.call(name, arguments)
        assert len(res.content) == 1 and res.content[0][0] == "text", f"{name}: content is {res.content}"
        text = res.content[0][1]
        assert not res.is_error, f"{name} failed: {text}"
        common.expect_mirror(name, text, res.structured, common.quarry_call(args.quarry, args.config, name, arguments))
        step(f"{name}: {len(text)} chars, {len(res.structured['hits'])} hits, same as `quarry call`")

    name, arguments = calls.TOOL_ERROR
    res = await s.call(name, arguments)
    assert res.is_error, f"{name} {arguments} should fail: {res}"
    assert calls.TOOL_ERROR_TEXT in res.content[0][1], res.content
    assert res.structured["error"]["kind"] == calls.TOOL_ERROR_KIND, res.structured
    step(f"tool error: isError, {res.content[0][1]!r}")

    name, arguments = calls.SCHEMA_ERROR
    res = await s.call(name, arguments)
    assert res.is_error and res.structured["error"]["kind"] == "invalid-args", res
    step(f"arguments breaking the schema: isError, {res.content[0][1]!r}")

    try:
        await s.call(calls.UNKNOWN_TOOL, {})
        raise AssertionError("an unknown tool must be a protocol error")
    except ProtocolError as e:
        assert e.code == calls.INVALID_PARAMS and "Unknown tool" in e.message, e
        step(f"protocol error: {e.code} {e.message!r}")

    # Two instances at once: the fast call finishes while the slow one still runs.
    done: dict[str, float] = {}
    t0 = time.monotonic()

    async def timed(name: str, arguments: dict) -> None:
        res = await s.call(name, arguments)
        done[name] = time.monotonic() - t0
        if name == calls.SLOW_CALL[0]:
            assert res.is_error and res.structured["error"]["kind"] == "fault", res
            assert "deadline" in res.content[0][1], res.content

    async with anyio.create_task_group() as tg:
        tg.start_soon(timed, *calls.SLOW_CALL)
        await anyio.sleep(0.3)
        tg.start_soon(timed, *calls.FAST_CALL)
    slow, fast = done[calls.SLOW_CALL[0]], done[calls.FAST_CALL[0]]
    assert fast < slow - 1.0, f"calls to different instances did not overlap: fast {fast:.2f}s, slow {slow:.2f}s"
    step(f"parallel: {calls.FAST_CALL[0]} at {fast:.2f}s while {calls.SLOW_CALL[0]} ran to {slow:.2f}s")


async def swap_and_see(s: Session, args: Any, step: common.Steps, changed: Callable[[], Awaitable[None]]) -> None:
    """Replaces the echo component; `changed` must return once the server said the tools changed,
    and tools/list and calls must then show the new version."""
    common.swap(args.swap_src, args.swap_dest)
    with anyio.fail_after(60):
        await changed()
    step("notifications/tools/list_changed received")
    after = await s.list_tools()
    echo = next(t for t in after if t.name == "echo.echo")
    assert echo.description and "(v2)" in echo.description, f"tools/list did not change after the swap: {echo}"
    res = await s.call("echo.echo", {"text": "x"})
    assert res.content[0][1].endswith("[v2]"), res.content
    step(f"after the swap: {echo.description!r}")
