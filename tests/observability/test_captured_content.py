"""Telemetry's captured content bounded in characters, and its export queue bounded in bytes (issue 34, R8)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry, Counter

from history_proxy.observability import genai
from history_proxy.observability.otel import (
    BoundedBatchSpanProcessor,
    QueueBytes,
    _CountingExporter,
    span_bytes,
)

SECRET = "sk-" + "Q" * 40


def chars(messages: list[dict[str, Any]]) -> int:
    return sum(len(part["content"]) for message in messages for part in message["parts"])


def test_a_24_mb_body_is_captured_within_the_bound_newest_messages_first() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "s" * 1_000_000},
            *({"role": "user", "content": f"turn {i} " + "x" * 24_000} for i in range(1000)),
        ],
    }
    captured = genai.input_messages(body, 64 * 1024)
    assert chars(captured) <= 64 * 1024 + 200  # the cut markers and the note
    assert captured[-1]["parts"][0]["content"].startswith("turn 999 ")  # the newest is kept
    note = next(m for m in captured if m["role"] == genai.OURS)["parts"][0]["content"]
    assert "earlier messages not captured" in note
    assert len(captured) < 12
    assert captured[0]["role"] == "system" and len(captured[0]["parts"][0]["content"]) <= 16 * 1024 + 50


def test_a_text_is_cut_before_a_secret_it_would_leave_half_of() -> None:
    text = "a" * 990 + " " + SECRET + " tail"
    captured = genai.input_messages({"messages": [{"role": "user", "content": text}]}, 1024)
    kept = captured[-1]["parts"][0]["content"]
    assert "sk-QQ" not in kept and kept.startswith("a" * 990)
    assert "more characters]" in kept
    system = genai.input_messages({"instructions": "i" * 5000, "input": "hi"}, 4096)
    assert len(system[0]["parts"][0]["content"]) < 1100  # the system prompt gets a quarter at most


class Held(SpanExporter):
    """An exporter that waits until released, as a slow collector does."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.exported: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.exported += spans
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_the_export_queue_is_bounded_in_bytes() -> None:
    registry = CollectorRegistry()
    dropped = Counter("dropped", "test", ["reason"], registry=registry)
    exported = Counter("exported", "test", registry=registry)
    queued = QueueBytes(4 * 1024 * 1024)
    slow = Held()
    processor = BoundedBatchSpanProcessor(_CountingExporter(slow, dropped, exported, queued), dropped, queued)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    try:
        for _ in range(20):
            with tracer.start_as_current_span("big", attributes={genai.INPUT_MESSAGES: "m" * 1024 * 1024}):
                pass
        assert queued.held <= 4 * 1024 * 1024
        assert (registry.get_sample_value("dropped_total", {"reason": "queue_full"}) or 0) >= 14
    finally:
        slow.release.set()
        provider.shutdown()
    assert 1 <= len(slow.exported) <= 6 and queued.held == 0
    assert span_bytes(slow.exported[0]) > 1024 * 1024
