#!/usr/bin/env python3
"""A recording, scripted Anthropic Messages upstream (stdlib only, runs in any venv and network namespace).

Every ``POST /v1/messages`` (and ``/v1/messages/count_tokens``) is appended to a JSONL file as
``{"seq", "path", "query", "headers", "body"}`` -- the body exactly as the client sent it, the headers
lower-cased -- and answered in Anthropic's own format: a ``message`` (JSON) or its ``event:`` SSE
stream (``message_start`` .. ``message_stop``) when ``stream: true``.

The script is a two-call tool loop, decided from the body alone:

- a request without ``tools`` (a client's side call: a title, a quota probe) gets a short text;
- a request whose newest user message carries no ``tool_result`` gets a ``thinking`` block (with a
  signature) and a ``tool_use`` of the client's ``Read`` tool (or its first tool) on the path named
  after ``FILE:`` in that message (``FILE:/abs/path``); without one, a short text;
- a request answering that call gets the final text ``DONE: <first line of the tool result>``.

``--fail-first N``: the first N ``/v1/messages`` requests are answered 429 (``rate_limit_error``,
``retry-after: 0``), to count a client's retries.

``--profile`` (``lenient`` by default) stands in for the upstreams people point Claude Code at:
``strict`` refuses a top-level field outside the Messages API's generally available ones with
Anthropic's 400 "``<field>``: Extra inputs are not permitted" (as copilot-api and local servers do);
``honour`` applies ``context_management`` as Anthropic's API does and returns its ``applied_edits``
(with history-proxy's edit modules, :mod:`history_proxy.mock.profiles`: only this profile needs the
package importable).

Run as a process: ``python3 anthropic_recorder.py --port 0 --out rec.jsonl`` prints
``LISTENING <port>`` on stdout once it serves.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FILE_MARKER = re.compile(r"FILE:(\S+)")
KNOWN_FIELDS = frozenset(
    "model messages max_tokens system metadata stop_sequences stream temperature top_k top_p tools "
    "tool_choice thinking service_tier output_config".split()
)
"""The Messages API's generally available top-level fields (what a strict compatible server knows)."""


def extra_field(body: dict[str, Any]) -> str | None:
    """A strict server's refusal of ``body``'s first unknown top-level field."""
    for key in body:
        if key not in KNOWN_FIELDS:
            return f"{key}: Extra inputs are not permitted"
    return None


def honoured(body: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """``body`` with its ``context_management`` applied, and the answer's ``context_management``."""
    from history_proxy.mock.profiles import honoured as apply

    applied, answer = apply(body, max(1, len(json.dumps(body)) // 4), 1.0)
    return applied, None if answer is None else answer.context_management


SIGNATURE = "c2lnbmF0dXJlLWZyb20tdGhlLXJlY29yZGVy"  # any opaque string: the client passes it back


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = []
    for block in _blocks(content):
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(_text(block.get("content")))
    return "\n".join(parts)


def reply_for(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The content blocks of the scripted answer to ``body``."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("name")]
    users = [m for m in messages if m.get("role") == "user"]
    last = users[-1] if users else {}
    results = [b for b in _blocks(last.get("content")) if b.get("type") == "tool_result"]
    if not tools:
        return [{"type": "text", "text": "Recorded session"}]
    if results:
        first_line = _text(results[-1].get("content")).strip().splitlines() or [""]
        line = re.sub(r"^\s*\d+[\t→]", "", first_line[0])  # Read numbers its lines
        return [{"type": "text", "text": f"DONE: {line.strip()}"}]
    found = FILE_MARKER.findall(_text(last.get("content")))
    if not found:
        return [{"type": "text", "text": "No FILE: marker in this task; nothing to read."}]
    names = [t["name"] for t in tools]
    tool = "Read" if "Read" in names else names[0]
    seq = len(messages)
    return [
        {"type": "thinking", "thinking": f"I should read {found[-1]} first.", "signature": SIGNATURE},
        {"type": "tool_use", "id": f"toolu_rec{seq:04d}", "name": tool, "input": {"file_path": found[-1]}},
    ]


def message(seq: int, body: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {
        "id": f"msg_rec{seq:04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-recorder"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": max(1, len(json.dumps(body)) // 4), "output_tokens": 12},
    }


def events(answer: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``answer`` as Anthropic's SSE events, in order."""
    start = {**answer, "content": [], "stop_reason": None, "usage": {**answer["usage"], "output_tokens": 1}}
    out: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    first: dict[str, Any]
    deltas: list[dict[str, Any]]
    for i, block in enumerate(answer["content"]):
        kind = block["type"]
        if kind == "text":
            first, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}]
        elif kind == "thinking":
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        else:
            first = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}]
        out.append(
            ("content_block_start", {"type": "content_block_start", "index": i, "content_block": first})
        )
        out += [
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}) for d in deltas
        ]
        out.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta = {"stop_reason": answer["stop_reason"], "stop_sequence": None}
    final = {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 12}}
    if "context_management" in answer:
        final["context_management"] = answer["context_management"]
    out.append(("message_delta", final))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


class AnthropicRecorder:
    def __init__(
        self,
        out: str | Path,
        host: str = "127.0.0.1",
        port: int = 0,
        fail_first: int = 0,
        profile: str = "lenient",
    ):
        self.profile = profile
        self.out = Path(out)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.seq = 0
        self.fail_first = fail_first
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                self._send(200 if self.path.startswith("/healthz") else 404, b"{}")

            def do_HEAD(self) -> None:
                self._send(200, b"")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                path, _, query = self.path.partition("?")
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsed": raw.decode("utf-8", "replace")}
                headers = {k.lower(): v for k, v in self.headers.items()}
                with recorder.lock:
                    recorder.seq += 1
                    seq = recorder.seq
                    record = {"seq": seq, "path": path, "query": query, "headers": headers, "body": body}
                    with recorder.out.open("a", encoding="utf-8") as f:
                        f.write(json.dumps(record, ensure_ascii=False) + "\n")
                    failing = path.endswith("/messages") and seq <= recorder.fail_first
                if path.endswith("/count_tokens"):
                    self._send(200, json.dumps({"input_tokens": max(1, len(raw) // 4)}).encode())
                elif not path.endswith("/messages"):
                    self._send(
                        404, b'{"type":"error","error":{"type":"not_found_error","message":"not found"}}'
                    )
                elif recorder.profile == "strict" and extra_field(body) is not None:
                    error = {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": extra_field(body)},
                    }
                    self._send(400, json.dumps(error).encode())
                elif failing:
                    error = {
                        "type": "error",
                        "error": {"type": "rate_limit_error", "message": "rate limited"},
                    }
                    self._send(429, json.dumps(error).encode(), extra=[("retry-after", "0")])
                else:
                    managed = None
                    if recorder.profile == "honour":
                        body, managed = honoured(body)
                    answer = message(seq, body, reply_for(body))
                    if managed is not None:
                        answer["context_management"] = managed
                    if body.get("stream"):
                        self._stream(answer)
                    else:
                        self._send(200, json.dumps(answer).encode())

            def _send(self, status: int, data: bytes, extra: Sequence[tuple[str, str]] = ()) -> None:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("request-id", f"req_rec{recorder.seq:04d}")
                for name, value in extra:
                    self.send_header(name, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, answer: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for kind, data in events(answer):
                    self.wfile.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> str:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--fail-first", type=int, default=0)
    parser.add_argument("--profile", choices=("lenient", "strict", "honour"), default="lenient")
    args = parser.parse_args(argv)
    recorder = AnthropicRecorder(args.out, port=args.port, fail_first=args.fail_first, profile=args.profile)
    print(f"LISTENING {recorder.port}", flush=True)
    try:
        recorder.server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
