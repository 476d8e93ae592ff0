"""An OTLP/HTTP collector stand-in for ``bench.compare --telemetry``: accepts every export, counts it.

Runs as a thread of the harness on a free loopback port; ``delay_s`` makes it a slow collector.
Nothing is decoded: it answers ``200`` with an empty ``ExportTraceServiceResponse`` (zero bytes).
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Sink:
    """``with Sink() as sink:`` a collector at ``sink.url``; ``sink.exports`` counts the POSTs."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.exports = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                if sink.delay_s:
                    time.sleep(sink.delay_s)
                sink.exports += 1
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def __enter__(self) -> Sink:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
