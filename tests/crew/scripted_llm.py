"""A scripted OpenAI-compatible chat server for the crew tests: no model, no network.

    python scripted_llm.py SCRIPT.json REQUESTS.jsonl

Listens on 127.0.0.1 (a free port, printed as `port N` on stdout) and answers
`POST /v1/chat/completions` from SCRIPT, a JSON object keyed by agent:

    {"router": [[turn, turn, ...], [turn, ...]], "searcher": [[...]], "answerer": [[...]]}

The agent is found by its role in the system prompt: CrewAI writes "You are ROLE.", and the
role must start with the key (case-insensitive). Each conversation that starts afresh (no assistant message yet) is the agent's next
attempt (a task retried after a failed guardrail starts afresh), and the number of assistant
messages so far picks the turn. A turn is either

    {"tool": "list_chapter_tree", "args": {...}}   a native tool call; the tool is the one
                                                    offered whose name ends with this
    {"content": "text"}                             a final answer

Every request is appended to REQUESTS as one JSON line (agent, attempt, turn, the tools offered,
the characters of the messages, the request itself), so a test can check what reached the
model. A request the script has no turn for gets HTTP 500 and a message saying which.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

script = json.load(open(sys.argv[1], encoding="utf-8"))
log_path = sys.argv[2]
lock = threading.Lock()
attempts = {agent: -1 for agent in script}


def text_of(message):
    content = message.get("content") or ""
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content


def answer(request):
    messages = request.get("messages", [])
    system = " ".join(text_of(m) for m in messages if m.get("role") == "system").lower()
    if not system:
        system = text_of(messages[0]).lower() if messages else ""
    agent = next((a for a in script if f"you are {a.lower()}" in system), None)
    if agent is None:
        raise LookupError(f"no agent of the script ({', '.join(script)}) is named in the system prompt: {system[:300]!r}")
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    with lock:
        if turn == 0:
            attempts[agent] += 1
        attempt = attempts[agent]
    offered = [t["function"]["name"] for t in request.get("tools") or []]
    chars = sum(len(text_of(m)) for m in messages)
    with lock, open(log_path, "a", encoding="utf-8") as log:
        log.write(json.dumps({"agent": agent, "attempt": attempt, "turn": turn, "tools": offered,
                              "chars": chars, "request": request}, ensure_ascii=False) + "\n")
    try:
        step = script[agent][attempt][turn]
    except IndexError:
        raise LookupError(f"the script has no turn {turn} for attempt {attempt} of {agent}") from None
    message = {"role": "assistant", "content": None}
    finish = "stop"
    if "tool" in step:
        name = next((n for n in offered if n == step["tool"] or n.endswith(step["tool"])), None)
        if name is None:
            raise LookupError(f"{agent} was not offered a tool named like {step['tool']!r}; offered: {offered}")
        message["tool_calls"] = [{
            "id": f"call_{agent}_{attempt}_{turn}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(step["args"], ensure_ascii=False)},
        }]
        finish = "tool_calls"
    else:
        message["content"] = step["content"]
    return {
        "id": f"chatcmpl-{agent}-{attempt}-{turn}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": chars // 4, "completion_tokens": 10, "total_tokens": chars // 4 + 10},
    }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        try:
            reply, status = answer(json.loads(body)), 200
        except Exception as e:  # the test reads this in the crew's error
            reply, status = {"error": {"message": f"scripted LLM: {e}", "type": "script"}}, 500
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"port {server.server_address[1]}", flush=True)
server.serve_forever()
