"""A tiny OTLP/HTTP trace receiver for tests and the bench: POST /v1/traces (protobuf), spans kept as dicts.

Started on a free loopback port in a thread; ``delay_s`` makes it a slow collector.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    events: list[dict[str, Any]]
    resource: dict[str, Any]
    start_ns: int
    end_ns: int


@dataclass
class Receiver:
    """The spans received so far (thread-safe appends), and the server."""

    delay_s: float = 0.0
    spans: list[ReceivedSpan] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"

    def take(self, body: bytes) -> None:
        self.raw.append(body)
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            resource = {kv.key: value_of(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={kv.key: value_of(kv.value) for kv in span.attributes},
                            status_code=span.status.code,
                            events=[
                                {"name": e.name, **{kv.key: value_of(kv.value) for kv in e.attributes}}
                                for e in span.events
                            ],
                            resource=resource,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                        )
                    )

    def wait_for(self, predicate: Any, timeout_s: float = 10.0) -> list[ReceivedSpan]:
        """The spans matching ``predicate`` once at least one arrived (empty after ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = [span for span in list(self.spans) if predicate(span)]
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.05)

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                receiver.take(body)
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
