"""The calls every client test makes, and what each must produce: one per RAG tool, a tool
error, a protocol error, and two calls on different instances that must overlap."""

# (tool, arguments): every RAG tool in the test config (tests/integration/mcp.rs).
RAG_CALLS = [
    ("manual.list_chapter_tree", {}),
    ("manual.get_chapter", {"chapter_id": "2"}),
    ("manual.route", {"question": "How do I limit the bandwidth of a transfer?"}),
    ("manual.search_chapter_content", {"chapter_id": "2", "query": "bandwidth timetable"}),
    ("manual.search", {"question": "How do I limit the bandwidth of a transfer?"}),
    ("manual.validate_citations", {"cited": ["2.1"], "candidates": ["2"]}),
    ("docs.search_docx", {"docx": "/docs/tables.docx", "search_query": "Merged Cell 1.1", "similarity_threshold": 0.0}),
]

# A tool that runs and fails: isError, the component's own words, the kind beside them.
TOOL_ERROR = ("manual.get_chapter", {"chapter_id": "999.9"})
TOOL_ERROR_TEXT = 'no chapter "999.9"'
TOOL_ERROR_KIND = "not-found"

# Arguments that break the schema: a tool error the model can correct, not a protocol error.
SCHEMA_ERROR = ("manual.search", {"question": "bandwidth", "limit": "many"})

# A request that cannot be routed: a JSON-RPC error.
UNKNOWN_TOOL = "nosuch.tool"
INVALID_PARAMS = -32602

# `slow.spin` runs until its 3 s deadline; `echo.echo`, on another instance, must answer meanwhile.
SLOW_CALL = ("slow.spin", {})
FAST_CALL = ("echo.echo", {"text": "meanwhile"})
