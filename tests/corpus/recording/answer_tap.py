"""A recording pass-through between a client and the proxy (stdlib only): what the client got back.

Every request is sent on to ``target`` as it came (method, path, headers, body); the answer is relayed
to the client piece by piece as it arrives (SSE included; the connection closes at its end) and its
body appended to a JSONL file as ``{"path", "status", "body"}`` once complete. Started by
tests/clients/claude_code_netns.py with ``"tap": true``, so the test can read the ``applied_edits``
Claude Code received.
"""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


class AnswerTap:
    def __init__(self, out: Path, target_port: int, port: int) -> None:
        self.out = out
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes: no framing to redo

            def log_message(self, *args: Any) -> None:
                pass

            def _relay(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                upstream = http.client.HTTPConnection("127.0.0.1", target_port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in HOP:
                        self.send_header(name, value)
                self.end_headers()
                seen = bytearray()
                while piece := answer.read1(65536):
                    seen += piece
                    self.wfile.write(piece)
                    self.wfile.flush()
                upstream.close()
                record = {"path": self.path, "status": answer.status, "body": seen.decode("utf-8", "replace")}
                with lock, out.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(record) + "\n")

            do_GET = do_POST = do_HEAD = _relay

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
