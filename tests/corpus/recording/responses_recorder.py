#!/usr/bin/env python3
"""A recording, scripted OpenAI Responses upstream for coding agents (stdlib only, runs anywhere).

Every ``POST /v1/responses`` (and a proxy's ``/v1/chat/completions`` summary call, answered with
:data:`SUMMARY_TEXT`) is appended to a JSONL file as ``{"seq", "path", "headers", "body"}``
(all request headers but ``authorization``, and the body exactly as it arrived) and answered with
the Responses API's typed SSE events (``response.created`` .. ``response.completed``), or a JSON
``response`` object without ``stream: true``. The script is a tool loop of two calls:

1. while the current turn (from the newest user message on) carries no ``function_call_output``: an encrypted ``reasoning`` item, then a
   ``function_call`` to the shell tool the request declares (top-level ``tools`` or an
   ``additional_tools`` input item; Codex's ``exec_command`` or ``shell``) running ``COMMAND``;
2. then a final assistant message, ``DONE_TEXT`` followed by the last tool output's first line.

``--fail N`` answers the first N requests with ``--status`` (429 by default, OpenAI's error body,
``retry-after: 0``) before the script starts: a client's own retries are counted in the file.

``--compaction`` makes it an upstream with Responses compaction: a request ending with a
``compaction_trigger`` item (Codex's remote compaction) is answered with one ``compaction`` item
sealed as :data:`SEALED`. Without it, a ``compaction`` or ``compaction_trigger`` item is refused with
OpenAI's 400, as a Responses server without compaction refuses it.

``python3 responses_recorder.py --port 0 --out rec.jsonl`` prints ``LISTENING <port>`` once it serves.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMMAND = "echo codex-e2e-marker"
DONE_TEXT = "The command printed:"
ENCRYPTED = "gAAAAB-recorded-opaque-reasoning-state"
SEALED = "gAAAAB-recorded-compaction-state"
"""Stands for the provider's encrypted compaction: only this upstream can read it back."""
COMPACTION_ITEMS = ("compaction", "compaction_trigger")
"""Stands for the provider's encrypted reasoning: a client must send it back as it came."""


def declared_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tool the request declares: top-level ``tools`` and ``additional_tools`` items (namespaces walked)."""
    found: list[dict[str, Any]] = []

    def walk(tools: Any) -> None:
        for tool in tools or []:
            if isinstance(tool, dict) and tool.get("type") == "namespace":
                walk(tool.get("tools"))
            elif isinstance(tool, dict):
                found.append(tool)

    walk(body.get("tools"))
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            walk(item.get("tools"))
    return found


def shell_call(body: dict[str, Any], seq: int) -> dict[str, Any]:
    """The function call that runs ``COMMAND`` with the shell tool the request declares."""
    names = [str(tool.get("name")) for tool in declared_tools(body)]
    arguments: dict[str, str | list[str]]
    if "exec_command" in names:
        name, arguments = "exec_command", {"cmd": COMMAND}
    elif "shell_command" in names:
        name, arguments = "shell_command", {"command": COMMAND}
    else:
        name, arguments = "shell", {"command": ["bash", "-lc", COMMAND]}
    return {
        "type": "function_call",
        "id": f"fc_rec{seq:04d}",
        "call_id": f"call_rec{seq:04d}",
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def output_text(body: dict[str, Any]) -> str:
    """The newest ``function_call_output``'s text."""
    for item in reversed(body.get("input") or []):
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item.get("output")
            if isinstance(output, list):
                return "".join(p.get("text", "") for p in output if isinstance(p, dict))
            return str(output)
    return ""


def compaction_refusal(body: dict[str, Any], has_compaction: bool) -> dict[str, Any] | None:
    """OpenAI's error for a compaction item this upstream cannot take (None: it can)."""
    for n, item in enumerate(i for i in body.get("input") or [] if isinstance(i, dict)):
        kind = item.get("type")
        if kind in COMPACTION_ITEMS and not has_compaction:
            message = f"Invalid value: '{kind}'."
            return {
                "message": message,
                "type": "invalid_request_error",
                "param": f"input[{n}].type",
                "code": None,
            }
        if kind == "compaction" and item.get("encrypted_content") != SEALED:
            message = "The encrypted content could not be verified."
            return {"message": message, "type": "invalid_request_error", "param": f"input[{n}]", "code": None}
    return None


def answer_items(body: dict[str, Any], seq: int) -> list[dict[str, Any]]:
    """The script: a reasoning item and a shell call first, then the final text; one sealed
    ``compaction`` item for a request that ends with a ``compaction_trigger``."""
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    if items and items[-1].get("type") == "compaction_trigger":
        return [{"type": "compaction", "id": f"cmp_rec{seq:04d}", "encrypted_content": SEALED}]
    users = [n for n, i in enumerate(items) if i.get("role") == "user"]
    turn = items[users[-1] :] if users else items  # the current turn: a tool loop of its own
    if not any(i.get("type") == "function_call_output" for i in turn):
        reasoning = {
            "type": "reasoning",
            "id": f"rs_rec{seq:04d}",
            "summary": [{"type": "summary_text", "text": "Run the command first."}],
            "encrypted_content": ENCRYPTED,
        }
        return [reasoning, shell_call(body, seq)]
    seen = next((line for line in output_text(body).splitlines() if "codex-e2e-marker" in line), "nothing")
    text = f"{DONE_TEXT} {seen.strip()}"
    part = {"type": "output_text", "text": text, "annotations": []}
    return [
        {
            "type": "message",
            "id": f"msg_rec{seq:04d}",
            "role": "assistant",
            "status": "completed",
            "content": [part],
        }
    ]


SUMMARY_TEXT = "Summary (recorder): the user asked to run the marker command in the shell."
"""The recorder's answer to a chat-completions summary call (a proxy compacting for an upstream without it)."""


def summary_completion(body: dict[str, Any], seq: int) -> dict[str, Any]:
    """A ``chat.completion`` holding :data:`SUMMARY_TEXT`, as a model answers a summary request."""
    message = {"role": "assistant", "content": SUMMARY_TEXT}
    return {
        "id": f"chatcmpl-rec{seq:04d}",
        "object": "chat.completion",
        "created": 1700000000 + seq,
        "model": body.get("model", "gpt-5"),
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def response(body: dict[str, Any], seq: int, output: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": f"resp_rec{seq:04d}",
        "object": "response",
        "created_at": 1700000000 + seq,
        "status": status,
        "model": body.get("model", "gpt-5"),
        "output": output,
        "usage": {
            "input_tokens": max(1, len(json.dumps(body.get("input"))) // 4),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 5},
            "total_tokens": 10 + max(1, len(json.dumps(body.get("input"))) // 4),
        },
    }


def events(body: dict[str, Any], seq: int, output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Responses SSE events of an answer, in OpenAI's order."""
    out: list[dict[str, Any]] = []
    started = response(body, seq, [], "in_progress")
    out.append({"type": "response.created", "response": started})
    out.append({"type": "response.in_progress", "response": started})
    for index, item in enumerate(output):
        out.append({"type": "response.output_item.added", "output_index": index, "item": item})
        if item["type"] == "message":
            text = item["content"][0]["text"]
            ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
            out.append({"type": "response.output_text.delta", **ids, "delta": text})
            out.append({"type": "response.output_text.done", **ids, "text": text})
        out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    out.append({"type": "response.completed", "response": response(body, seq, output, "completed")})
    for n, event in enumerate(out):
        event["sequence_number"] = n
    return out


class ResponsesRecorder:
    """The recorder as a threaded HTTP server on ``host:port`` (0: a free port)."""

    def __init__(
        self,
        out: str,
        host: str = "127.0.0.1",
        port: int = 0,
        fail: int = 0,
        status: int = 429,
        compaction: bool = False,
    ):
        self.out, self.fail, self.status, self.compaction = out, fail, status, compaction
        self.lock = threading.Lock()
        self.seq = 0
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": "gpt-5", "object": "model"}]})

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                body = json.loads(raw) if raw else {}
                headers = {k.lower(): v for k, v in self.headers.items() if k.lower() != "authorization"}
                with recorder.lock:
                    recorder.seq += 1
                    seq = recorder.seq
                    with open(recorder.out, "a", encoding="utf-8") as f:
                        f.write(
                            json.dumps({"seq": seq, "path": self.path, "headers": headers, "body": body})
                            + "\n"
                        )
                if seq <= recorder.fail:
                    error = {
                        "message": "Rate limit reached (recorder).",
                        "type": "rate_limit_error",
                        "param": None,
                        "code": None,
                    }
                    self._send(recorder.status, {"error": error}, {"retry-after": "0"})
                    return
                if self.path.endswith("/chat/completions"):  # a proxy's summary call (emulated compaction)
                    self._send(200, summary_completion(body, seq))
                    return
                refused = compaction_refusal(body, recorder.compaction)
                if refused is not None:
                    self._send(400, {"error": refused})
                    return
                output = answer_items(body, seq)
                if not body.get("stream"):
                    self._send(200, response(body, seq, output, "completed"))
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                for event in events(body, seq, output):
                    self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

            def _send(self, status: int, payload: Any, extra: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in (extra or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--out", required=True, help="JSONL file the requests are appended to")
    ap.add_argument("--fail", type=int, default=0, help="answer the first N requests with --status")
    ap.add_argument("--status", type=int, default=429)
    ap.add_argument("--compaction", action="store_true", help="serve Responses compaction (Codex's trigger)")
    args = ap.parse_args(argv)
    recorder = ResponsesRecorder(args.out, args.host, args.port, args.fail, args.status, args.compaction)
    print(f"LISTENING {recorder.server.server_address[1]}", flush=True)
    try:
        recorder.server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
