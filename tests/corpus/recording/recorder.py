#!/usr/bin/env python3
"""A recording, scripted OpenAI-compatible upstream (stdlib only, runs in any venv).

Every ``POST /v1/chat/completions`` (also without ``/v1``) is appended to a JSONL file as
``{"seq", "path", "headers": {"X-Agent-Role", "X-Agent-Name"}, "body"}`` -- the body exactly as
the client sent it -- and answered by a *responder*: a function ``respond(body, headers) -> reply``
whose reply is ``{"content": str | None, "tool_calls": [{"name": str, "arguments": dict | str}]}``.
The answer is a ``chat.completion`` (JSON), or SSE ``chat.completion.chunk`` events ending with
``data: [DONE]`` when ``stream: true`` (with a usage chunk when ``stream_options.include_usage``).
Ids and timestamps are derived from a counter, so runs are deterministic.

Responders decide from the request body only (the system prompt says which agent is calling),
never from the identity headers: behind history-proxy those headers are not forwarded.

Use in-process (``Recorder(path, respond).start()`` -> base URL) or as a process:
``python3 recorder.py --port 0 --out rec.jsonl --responder scenarios:respond`` (prints
``LISTENING <port>`` on stdout once it serves; ``--responder`` names ``module:function``, looked up
next to this file first).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

IDENTITY_HEADERS = ("X-Agent-Role", "X-Agent-Name")
Json = dict[str, Any]  # a JSON object: a request body, a reply, a message
Responder = Callable[[Json, dict[str, str]], Json]


def text_of(content: Any) -> str:
    """The text of a message's content (string, list of parts, or None)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def system_text(body: Json) -> str:
    return "\n".join(text_of(m.get("content")) for m in body.get("messages", []) if m.get("role") in ("system", "developer"))


def tool_names(body: Json) -> list[str]:
    return [t.get("function", {}).get("name", "") for t in body.get("tools") or []]


def last_message(body: Json) -> Json:
    msgs: list[Json] = body.get("messages") or [{}]
    return msgs[-1]


def count_tool_results(body: Json, name: str | None = None) -> int:
    """How many tool results the request carries (for the calls named ``name`` when given)."""
    calls = {}
    for m in body.get("messages", []):
        for tc in m.get("tool_calls") or []:
            calls[tc.get("id")] = tc.get("function", {}).get("name")
    return sum(1 for m in body.get("messages", []) if m.get("role") == "tool"
               and (name is None or calls.get(m.get("tool_call_id")) == name))


def mock_text(body: Json) -> str:
    """The built-in mock's style of answer: what was received."""
    msgs = body.get("messages", [])
    roles: dict[str, int] = {}
    for m in msgs:
        roles[m.get("role", "?")] = roles.get(m.get("role", "?"), 0) + 1
    last_user = next((text_of(m.get("content")) for m in reversed(msgs) if m.get("role") == "user"), "")
    summary = ", ".join(f"{k}={v}" for k, v in roles.items())
    return f'mock: received {len(msgs)} messages ({summary}); last user: "{last_user[:60]}"'


class Recorder:
    def __init__(self, out: str | Path, respond: Responder, host: str = "127.0.0.1", port: int = 0):
        self.out = Path(out)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.respond = respond
        self.lock = threading.Lock()
        self.seq = 0
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("healthz"):
                    self._send(200, b'{"ok": true}', "application/json")
                elif self.path.rstrip("/").endswith("models"):
                    data = {"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model", "owned_by": "recorder"}]}
                    self._send(200, json.dumps(data).encode(), "application/json")
                else:
                    self._send(404, b'{"error": {"message": "not found"}}', "application/json")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                if not self.path.rstrip("/").endswith("chat/completions"):
                    self._send(404, b'{"error": {"message": "only chat/completions is recorded"}}', "application/json")
                    return
                body = json.loads(raw)
                headers = {h: self.headers[h] for h in IDENTITY_HEADERS if self.headers.get(h) is not None}
                with recorder.lock:
                    recorder.seq += 1
                    seq = recorder.seq
                    with recorder.out.open("a", encoding="utf-8") as f:
                        f.write(json.dumps({"seq": seq, "path": self.path, "headers": headers, "body": body},
                                           ensure_ascii=False) + "\n")
                try:
                    reply = recorder.respond(body, headers)
                except Exception as e:  # a responder bug must be visible, not a hang
                    print(f"recorder: responder failed on request {seq}: {e!r}", file=sys.stderr)
                    self._send(500, json.dumps({"error": {"message": f"responder failed: {e!r}"}}).encode(),
                               "application/json")
                    return
                if body.get("stream"):
                    self._stream(seq, body, reply)
                else:
                    self._send(200, json.dumps(completion(seq, body, reply)).encode(), "application/json")

            def _send(self, status: int, data: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, seq: int, body: Json, reply: Json) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in chunks(seq, body, reply):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> str:
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self.base_url

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _tool_calls(seq: int, reply: Json) -> list[Json]:
    out = []
    for i, tc in enumerate(reply.get("tool_calls") or []):
        args = tc.get("arguments", {})
        out.append({"id": f"call_{seq:04d}_{i}", "type": "function",
                    "function": {"name": tc["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}})
    return out


def _usage(body: Json, reply: Json) -> Json:
    prompt = max(1, len(json.dumps(body.get("messages", []))) // 4)
    completion_tokens = max(1, len(json.dumps(reply)) // 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion_tokens, "total_tokens": prompt + completion_tokens}


def completion(seq: int, body: Json, reply: Json) -> Json:
    calls = _tool_calls(seq, reply)
    message: Json = {"role": "assistant", "content": reply.get("content"), "refusal": None}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-rec{seq:04d}", "object": "chat.completion", "created": 1700000000 + seq,
        "model": body.get("model", "gpt-4o-mini"), "system_fingerprint": "fp_recorder",
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": _usage(body, reply),
    }


def chunks(seq: int, body: Json, reply: Json) -> list[Json]:
    base = {"id": f"chatcmpl-rec{seq:04d}", "object": "chat.completion.chunk", "created": 1700000000 + seq,
            "model": body.get("model", "gpt-4o-mini"), "system_fingerprint": "fp_recorder"}
    out = [dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
    text = reply.get("content") or ""
    for i in range(0, len(text), 40):
        out.append(dict(base, choices=[{"index": 0, "delta": {"content": text[i:i + 40]}, "finish_reason": None}]))
    calls = _tool_calls(seq, reply)
    for i, tc in enumerate(calls):
        out.append(dict(base, choices=[{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            {"index": i, "id": tc["id"], "type": "function", "function": {"name": tc["function"]["name"], "arguments": ""}}]}}]))
        out.append(dict(base, choices=[{"index": 0, "finish_reason": None, "delta": {"tool_calls": [
            {"index": i, "function": {"arguments": tc["function"]["arguments"]}}]}}]))
    out.append(dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]))
    if (body.get("stream_options") or {}).get("include_usage"):
        out.append(dict(base, choices=[], usage=_usage(body, reply)))
    return out


def load_responder(spec: str) -> Responder:
    module, _, func = spec.partition(":")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    responder: Responder = getattr(importlib.import_module(module), func or "respond")
    return responder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--out", required=True, help="JSONL file the requests are appended to")
    ap.add_argument("--responder", default="scenarios:respond", help="module:function (default scenarios:respond)")
    args = ap.parse_args(argv)
    rec = Recorder(args.out, load_responder(args.responder), args.host, args.port)
    print(f"LISTENING {rec.port}", flush=True)
    try:
        rec.server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
