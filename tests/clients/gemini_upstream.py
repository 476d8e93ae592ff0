#!/usr/bin/env python3
"""A recording, scripted Gemini API upstream for Gemini CLI (stdlib only, runs anywhere).

Every ``POST .../models/{model}:{method}`` is appended to a JSONL file as ``{"seq", "path", "query",
"headers", "body"}`` (every header but the key headers, the body as it arrived) and answered in
Gemini's format (``streamGenerateContent`` as ``?alt=sse`` events, else one JSON answer):

- ``countTokens``: ``{"totalTokens": N}`` (characters / 4);
- a request that asks for JSON (``generationConfig.responseMimeType``; Gemini CLI's own checks: its
  model router's complexity score, who speaks next): an object answering both;
- the tool loop of two calls: while the newest content carries no ``functionResponse``, a
  ``functionCall`` to ``run_shell_command`` running ``COMMAND``; then ``DONE_TEXT`` and the tool's
  output's first line.

Every answer reports ``usageMetadata`` with a ``cachedContentTokenCount``. The key headers are not
recorded; ``key-is-the-upstreams`` says whether ``x-goog-api-key`` was ``$UPSTREAM_KEY``.
``python3 gemini_upstream.py --port 0 --out rec.jsonl`` prints ``LISTENING <port>`` once it serves.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

COMMAND = "echo gemini-e2e-marker"
DONE_TEXT = "The command printed:"
KEY_HEADERS = ("x-goog-api-key", "authorization")


def output_of(content: dict[str, Any]) -> str | None:
    """The text of the first ``functionResponse`` in a content, if it has one."""
    for part in content.get("parts") or []:
        response = part.get("functionResponse") if isinstance(part, dict) else None
        if isinstance(response, dict):
            return json.dumps(response.get("response"))
    return None


def first_line(output: str) -> str:
    try:
        value = json.loads(output)
    except ValueError:
        value = output
    if isinstance(value, dict):
        value = next((v for v in value.values() if isinstance(v, str)), json.dumps(value))
    text = str(value)
    for line in text.splitlines():
        if "gemini-e2e-marker" in line:
            return line.strip()
    return text.splitlines()[0] if text else ""


def answer_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") == "application/json" or config.get("responseJsonSchema"):
        choice = {
            "next_speaker": "user",
            "reasoning": "the answer is complete",
            "complexity_reasoning": "one shell command",
            "complexity_score": 10,
        }
        return [{"text": json.dumps(choice)}]
    contents = body.get("contents") or []
    last = contents[-1] if contents else {}
    output = output_of(last) if isinstance(last, dict) else None
    if output is None:
        args = {"command": COMMAND, "description": "print the marker"}
        return [{"functionCall": {"name": "run_shell_command", "args": args}}]
    return [{"text": f"{DONE_TEXT} {first_line(output)}"}]


def usage(body: dict[str, Any]) -> dict[str, int]:
    prompt = max(1, len(json.dumps(body)) // 4)
    return {
        "promptTokenCount": prompt,
        "cachedContentTokenCount": prompt // 2,
        "candidatesTokenCount": 8,
        "totalTokenCount": prompt + 8,
    }


class Recorder(BaseHTTPRequestHandler):
    out: str = ""
    lock = threading.Lock()
    seq = 0

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        split = urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.loads(raw or b"{}")
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in KEY_HEADERS}
        headers["key-is-the-upstreams"] = str(
            self.headers.get("x-goog-api-key") == os.environ.get("UPSTREAM_KEY")
        )
        with self.lock:
            Recorder.seq += 1
            with open(self.out, "a", encoding="utf-8") as f:
                record = {
                    "seq": Recorder.seq,
                    "path": split.path,
                    "query": split.query,
                    "headers": headers,
                    "body": body,
                }
                f.write(json.dumps(record) + "\n")
        method = split.path.rpartition(":")[2]
        if method == "countTokens":
            self._json({"totalTokens": max(1, len(raw) // 4)})
            return
        answer = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": answer_parts(body)},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": usage(body),
            "modelVersion": split.path.rpartition("/")[2].partition(":")[0],
        }
        if method == "streamGenerateContent":
            data = b"data: " + json.dumps(answer).encode() + b"\r\n\r\n"
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._json(answer)

    def _json(self, value: Any) -> None:
        data = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()
    Recorder.out = options.out
    server = ThreadingHTTPServer(("127.0.0.1", options.port), Recorder)
    print(f"LISTENING {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
