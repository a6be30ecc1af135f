"""CrewAI's MCPServerAdapter, with its default connect timeout (30 s), on a first start of
`quarry serve --stdio` whose index build takes longer than that.

    python crewai_first_start.py QUARRY CONFIG

The adapter lists the tools while the manual is still being indexed, then a search waits for
the index and answers. Prints how long each step took; the test checks them.
"""

import sys
import time

from crewai_tools import MCPServerAdapter
from mcp import StdioServerParameters

quarry, config = sys.argv[1], sys.argv[2]
server = StdioServerParameters(command=quarry, args=["--config", config, "serve", "--stdio"])

start = time.monotonic()
with MCPServerAdapter(server) as tools:  # the default connect_timeout: 30 s
    print(f"connected in {time.monotonic() - start:.1f} s")
    names = [t.name for t in tools]
    print("tools:", names)
    assert "manual_search" in names, names
    search = next(t for t in tools if t.name == "manual_search")
    answer = search.run(question="How do I limit the bandwidth of a transfer?")
    print(f"answered after {time.monotonic() - start:.1f} s")
    print(answer)
    assert "--bwlimit" in answer, answer
print("[first start] ok")
