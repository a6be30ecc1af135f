"""CrewAI's MCPServerAdapter using quarry's tools: the example in README.md, run by the tests.

    python crewai_example.py QUARRY CONFIG [URL]

Without URL, the adapter starts `quarry serve --stdio` itself; with one, it connects to a
running `quarry serve --http`. No LLM is called: the example hands the tools to an agent and
runs one the way the agent would.
"""

import sys

from crewai import Agent
from crewai_tools import MCPServerAdapter
from mcp import StdioServerParameters

quarry, config = sys.argv[1], sys.argv[2]
if len(sys.argv) > 3:
    server = {"url": sys.argv[3], "transport": "streamable-http"}
else:
    server = StdioServerParameters(command=quarry, args=["-c", config, "serve", "--stdio"])

with MCPServerAdapter(server) as tools:
    print("tools:", [t.name for t in tools])
    librarian = Agent(
        role="Librarian",
        goal="Answer questions from the manual, citing chapters",
        backstory="Knows where everything is in the manual.",
        tools=tools,
        llm="gpt-4o-mini",  # any LLM; this example never calls it
    )
    # CrewAI turns `manual.search` into `manual_search` for LLM function names.
    search = next(t for t in librarian.tools if t.name == "manual_search")
    answer = search.run(question="How do I limit the bandwidth of a transfer?")
    print(answer)
