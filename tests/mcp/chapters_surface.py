"""Chapter RAG's whole MCP surface through the official Python `mcp` 1.x SDK (the handshake era
CrewAI speaks), over stdio: its chapters as resources (listed, read, a template whose ids
complete), the `resource` of each search hit, the answerer's prompt, and every route (the
search's, the prompt's, `route`'s) asking the client's model through sampling, the write-up's
router agent.

The client's model is the scripted OpenAI-compatible LLM of tests/crew (its URL in --llm): the
sampling callback sends it the request's system prompt and messages, as a client would send
them to its own model, and answers with what it said.

    python chapters_surface.py --quarry Q --config C --llm http://127.0.0.1:PORT --manual NAME
"""

from __future__ import annotations

import argparse
import json
import urllib.request

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

import common


def ask_llm(url: str, params: types.CreateMessageRequestParams) -> str:
    messages = []
    if params.systemPrompt:
        messages.append({"role": "system", "content": params.systemPrompt})
    for m in params.messages:
        messages.append({"role": m.role, "content": getattr(m.content, "text", "")})
    body = json.dumps({"model": "scripted", "messages": messages}).encode()
    req = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        answer = json.load(r)
    return answer["choices"][0]["message"]["content"]


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quarry", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--llm", required=True)
    p.add_argument("--instance", default="manual")
    p.add_argument("--question", required=True)
    p.add_argument("--route", required=True, help="the chapter ids the scripted router names, comma-separated")
    args = p.parse_args()
    step = common.Steps()
    inst = args.instance
    sampled: list[types.CreateMessageRequestParams] = []

    async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        sampled.append(params)
        text = await anyio.to_thread.run_sync(ask_llm, args.llm, params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=text), model="scripted"
        )

    server = StdioServerParameters(command=args.quarry, args=["--config", args.config, "serve", "--stdio"])
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, sampling_callback=sampling) as session:
            init = await session.initialize()
            caps = init.capabilities
            assert caps.resources is not None and caps.prompts is not None and caps.completions is not None, caps
            step("initialized: resources, prompts and completions offered")

            listed = (await session.list_resources()).resources
            uris = [str(r.uri) for r in listed]
            assert f"quarry://{inst}/chapter/1" in uris and f"quarry://{inst}/chapter/2.1" in uris, uris
            step(f"resources/list: {len(listed)} chapters")

            templates = (await session.list_resource_templates()).resourceTemplates
            template = f"quarry://{inst}/chapter/{{id}}"
            assert [t.uriTemplate for t in templates] == [template], templates
            done = await session.complete(types.ResourceTemplateReference(type="ref/resource", uri=template),
                                          {"name": "id", "value": "2"})
            assert done.completion.values and all(v.startswith("2") for v in done.completion.values), done
            assert "2.1" in done.completion.values, done
            step(f"completion of the template's id '2': {done.completion.values}")

            read = await session.read_resource(f"quarry://{inst}/chapter/2.1")
            text = read.contents[0].text
            assert read.contents[0].mimeType == "text/markdown" and "Bandwidth" in text and "--bwlimit" in text, read
            step(f"resources/read chapter 2.1: {len(text)} chars")

            res = await session.call_tool(f"{inst}.search", {"question": args.question})
            assert not res.isError and len(res.content) == 1, res.content
            hits = res.structuredContent["hits"]
            for h in hits:
                assert h["resource"] == f"quarry://{inst}/chapter/{h['location']['chapter']}", h
            step(f"search: {len(hits)} hits, each naming its chapter's resource")

            prompts = (await session.list_prompts()).prompts
            assert [p.name for p in prompts] == [f"{inst}.answer"], prompts
            prompt = await session.get_prompt(f"{inst}.answer", {"question": args.question})
            first = prompt.messages[0].content.text
            assert "[chapter 3.4]" in first and "do not piece" in first and args.question in first, first
            assert "Search report:" in first and "Routed to:" in first, first
            links = [m.content for m in prompt.messages[1:]]
            assert links and all(l.type == "resource_link" and str(l.uri).startswith(f"quarry://{inst}/chapter/")
                                 for l in links), links
            step(f"prompts/get answer: instructions, the search report, {len(links)} chapter links")

            # The search and the prompt's search asked the model too: one route for all.
            assert len(sampled) == 2, sampled
            assert hits and res.structuredContent["extra"]["route"]["routed_by"] == "client_model_and_embeddings", res
            route = await session.call_tool(f"{inst}.route", {"question": args.question})
            body = route.structuredContent["extra"]
            ids = [c["chapter_id"] for c in body["chapters"]]
            # The model's first pick leads; fused with the embeddings, not in their place.
            assert ids[0] == args.route.split(",")[0], body
            assert body["routed_by"] == "client_model_and_embeddings", body
            assert body["model"]["chapters"] == args.route.split(","), body
            assert len(sampled) == 3, sampled
            asked = sampled[-1].messages[0].content.text
            assert args.question in asked and "Chapter tree (" in asked, asked
            step(f"route through sampling: {ids}, {body['reason']!r}")
    step("ok")


if __name__ == "__main__":
    anyio.run(main)
