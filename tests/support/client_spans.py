"""A traced client's side of a request: its span and the W3C trace headers it sends under it."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

CLIENT_TRACER = TracerProvider().get_tracer("test-client")


def root_trace(span: Any) -> str:
    return f"{span.get_span_context().trace_id:032x}"


def client_span() -> tuple[Any, dict[str, str]]:
    """A client's span and the W3C headers an instrumented client sends under it."""
    span = CLIENT_TRACER.start_span("agent step", kind=SpanKind.INTERNAL)
    headers: dict[str, str] = {"tracestate": "vendor=abc"}
    TraceContextTextMapPropagator().inject(headers, context=set_span_in_context(span))
    return span, headers
