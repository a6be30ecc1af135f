"""The stateless 2026-07-28 revision (server/discover, no initialize) with the official Python
`mcp` 2.x SDK, over stdio or streamable HTTP. The steps are in scenario.py; tool-list changes
arrive on a `subscriptions/listen` stream."""

from __future__ import annotations

import anyio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

import common
import scenario


class Adapter:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def list_tools(self) -> list[scenario.ToolInfo]:
        res = await self.client.list_tools()
        return [scenario.ToolInfo(t.name, t.description, t.input_schema) for t in res.tools]

    async def call(self, name: str, arguments: dict) -> scenario.Result:
        try:
            res = await self.client.call_tool(name, arguments)
        except MCPError as e:
            raise scenario.ProtocolError(e.error.code, e.error.message) from e
        content = [(c.type, getattr(c, "text", None)) for c in res.content]
        return scenario.Result(res.is_error, content, res.structured_content)


async def run(client: Client, args, step: common.Steps) -> None:
    step(f"discovered: protocol {client.protocol_version}, server {client.server_info.name if client.server_info else '?'}")
    assert client.protocol_version == "2026-07-28", client.protocol_version
    s = Adapter(client)
    await scenario.tools_and_calls(s, args, step)
    async with client.listen(tools_list_changed=True) as sub:
        assert sub.honored.tools_list_changed, sub.honored

        async def changed() -> None:
            async for _event in sub:
                return

        await scenario.swap_and_see(s, args, step, changed)


async def main() -> None:
    args = common.parse_args()
    step = common.Steps()
    if args.transport == "stdio":
        command, argv = common.stdio_command(args.quarry, args.config)
        async with Client(StdioServerParameters(command=command, args=argv), mode="auto") as client:
            await run(client, args, step)
    else:
        with common.http_server(args.quarry, args.config) as (url, _):
            async with Client(url, mode="auto") as client:
                await run(client, args, step)
    step("ok")


if __name__ == "__main__":
    anyio.run(main)
