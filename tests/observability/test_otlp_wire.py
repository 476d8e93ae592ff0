"""history_proxy.observability.otlp_wire writes what the SDK's own OTLP encoder writes, decoded field by field."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as sdk_encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.span import TraceState

from history_proxy.observability.otlp_wire import encode_spans


class Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def made_spans() -> list[ReadableSpan]:
    kept = Keep()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc", "n": 3}))
    provider.add_span_processor(SimpleSpanProcessor(kept))
    tracer = provider.get_tracer("history_proxy", "1.0", schema_url="https://opentelemetry.io/schemas/1.44.0")
    remote = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "abc")]),
    )
    root = tracer.start_span(
        "chat gpt-4o",
        context=set_span_in_context(NonRecordingSpan(remote)),
        kind=SpanKind.SERVER,
        attributes={
            "s": "text é ✓",
            "i": 42,
            "neg": -7,
            "big": 2**62,
            "f": 0.25,
            "b": True,
            "no": False,
            "list": ["a", "b"],
            "ints": [1, 2, 3],
            "empty": "",
        },
        links=[Link(remote, {"why": "follows"})],
    )
    root.add_event("filter summarize", {"tokens_removed": 120, "at": "policies.roles.x[0]"})
    root.add_event("bare")
    root.set_status(Status(StatusCode.ERROR, "502"))
    child = tracer.start_span("upstream openai", context=set_span_in_context(root), kind=SpanKind.CLIENT)
    child.set_status(Status(StatusCode.OK))
    child.end()
    root.end()
    other = TracerProvider().get_tracer("other")  # a second resource and scope
    lone = other.start_span("internal")
    lone.end()
    assert isinstance(lone, ReadableSpan)
    return [*kept.spans, lone]


def test_our_bytes_decode_to_what_the_sdk_encoder_writes() -> None:
    spans = made_spans()
    ours = ExportTraceServiceRequest.FromString(encode_spans(spans))
    theirs = ExportTraceServiceRequest.FromString(sdk_encode_spans(spans).SerializePartialToString())
    assert ours == theirs
    assert len(ours.resource_spans) == 2


def test_no_spans_is_an_empty_request() -> None:
    assert encode_spans([]) == b""
