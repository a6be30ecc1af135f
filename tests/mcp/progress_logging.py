"""Progress and log lines over MCP with the official Python `mcp` 1.x SDK's callbacks, over
stdio or streamable HTTP.

The config (tests/integration/mcp.rs) serves `slow`, the hostile fixture preparing for 3 s in
steps it reports, and `docs`, DOCX search on the toy embedder. The steps:
1. the tools are listed while `slow` prepares; a call to it waits, and its progress callback
   hears the preparation's steps, increasing; no log line comes before the session sets a level;
2. a DOCX search that ingests a document reports the ingest's progress;
3. at level `info`, a call that faults sends the guest's stderr (info) and the fault (error);
4. at level `error`, the same call sends the fault only.
"""

from __future__ import annotations

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

import common


async def run(session: ClientSession, logs: list[types.LoggingMessageNotificationParams], step: common.Steps) -> None:
    await session.initialize()
    tools = [t.name for t in (await session.list_tools()).tools]
    assert "slow.echo" in tools and "docs.search_docx" in tools, tools
    step(f"listed {len(tools)} tools while slow prepares")

    heard: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append((progress, total, message))

    res = await session.call_tool("slow.echo", {"text": "after the preparation"}, progress_callback=on_progress)
    assert not res.isError and "after the preparation" in res.content[0].text, res
    assert len(heard) >= 2, f"the wait heard {heard}"
    assert all(t == 30 for _, t, _ in heard), heard
    assert [p for p, _, _ in heard] == sorted({p for p, _, _ in heard}), f"progress must increase: {heard}"
    assert all(m and m.startswith("slow: preparing the fixture: ") for _, _, m in heard), heard
    assert not logs, f"log lines before logging/setLevel: {logs}"
    step(f"the call waited for the preparation, hearing {len(heard)} progress notes: {heard[-1][2]}")

    heard.clear()
    res = await session.call_tool(
        "docs.search_docx",
        {"docx": "/docs/tables.docx", "search_query": "table"},
        progress_callback=on_progress,
    )
    assert not res.isError, res
    assert heard, "the ingest reported no progress"
    progress, total, message = heard[-1]
    assert total and progress == total and message.startswith("docs: "), heard
    step(f"the ingest reported {len(heard)} progress notes, the last: {message}")

    await session.set_logging_level("info")
    res = await session.call_tool("slow.shout_and_panic", {"kib": 1})
    assert res.isError and "recycled" in res.content[0].text, res
    with anyio.fail_after(10):
        while not any(m.level == "error" for m in logs):
            await anyio.sleep(0.05)
    levels = sorted({m.level for m in logs})
    assert levels == ["error", "info"], [(m.level, str(m.data)[:80]) for m in logs]
    assert any("recycling the instance" in str(m.data) for m in logs if m.level == "error"), logs
    assert all(m.logger == "quarry" and len(str(m.data)) <= 1024 for m in logs), logs
    step(f"at info: {len(logs)} log lines, levels {levels}")

    logs.clear()
    await session.set_logging_level("error")
    res = await session.call_tool("slow.shout_and_panic", {"kib": 1})
    assert res.isError, res
    with anyio.fail_after(10):
        while not logs:
            await anyio.sleep(0.05)
    await anyio.sleep(0.3)
    assert [m.level for m in logs] == ["error"], [(m.level, str(m.data)[:80]) for m in logs]
    step("at error: the fault only")


async def main() -> None:
    args = common.parse_args()
    step = common.Steps()
    logs: list[types.LoggingMessageNotificationParams] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    if args.transport == "stdio":
        command, argv = common.stdio_command(args.quarry, args.config)
        async with stdio_client(StdioServerParameters(command=command, args=argv)) as (r, w):
            async with ClientSession(r, w, logging_callback=on_log) as session:
                await run(session, logs, step)
    else:
        with common.http_server(args.quarry, args.config) as (url, _):
            async with streamablehttp_client(url) as (r, w, _):
                async with ClientSession(r, w, logging_callback=on_log) as session:
                    await run(session, logs, step)
    step(f"[{args.transport}] ok")


if __name__ == "__main__":
    anyio.run(main)
