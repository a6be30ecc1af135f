"""The handshake era (initialize, tools/list, tools/call) with the official Python `mcp` 1.x SDK,
the one CrewAI's adapter uses, over stdio or streamable HTTP. The steps are in scenario.py;
tool-list changes arrive as `notifications/tools/list_changed` on the session."""

from __future__ import annotations

import anyio
import mcp.types as types
from mcp import ClientSession, McpError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client

import common
import scenario


class Adapter:
    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def list_tools(self) -> list[scenario.ToolInfo]:
        res = await self.session.list_tools()
        return [scenario.ToolInfo(t.name, t.description, t.inputSchema) for t in res.tools]

    async def call(self, name: str, arguments: dict) -> scenario.Result:
        try:
            res = await self.session.call_tool(name, arguments)
        except McpError as e:
            raise scenario.ProtocolError(e.error.code, e.error.message) from e
        content = [(c.type, getattr(c, "text", None)) for c in res.content]
        return scenario.Result(res.isError, content, res.structuredContent)


async def run(session: ClientSession, args, changed: anyio.Event, step: common.Steps) -> None:
    init = await session.initialize()
    step(f"initialized: protocol {init.protocolVersion}, server {init.serverInfo.name} {init.serverInfo.version}")
    assert init.protocolVersion == types.LATEST_PROTOCOL_VERSION, init.protocolVersion
    assert init.capabilities.tools is not None and init.capabilities.tools.listChanged, init.capabilities
    s = Adapter(session)
    await scenario.tools_and_calls(s, args, step)
    await scenario.swap_and_see(s, args, step, changed.wait)


async def main() -> None:
    args = common.parse_args()
    step = common.Steps()
    changed = anyio.Event()

    async def on_message(message) -> None:
        if isinstance(message, types.ServerNotification) and isinstance(message.root, types.ToolListChangedNotification):
            changed.set()

    if args.transport == "stdio":
        command, argv = common.stdio_command(args.quarry, args.config)
        async with stdio_client(StdioServerParameters(command=command, args=argv)) as (r, w):
            async with ClientSession(r, w, message_handler=on_message) as session:
                await run(session, args, changed, step)
    else:
        with common.http_server(args.quarry, args.config) as (url, _):
            async with streamablehttp_client(url) as (r, w, _):
                async with ClientSession(r, w, message_handler=on_message) as session:
                    await run(session, args, changed, step)
    step("ok")


if __name__ == "__main__":
    anyio.run(main)
