"""The OpenTelemetry SDK, set up once per process when ``telemetry.enabled``: a tracer provider of
the proxy's own (never the global one), batched OTLP/HTTP export and the dropped spans in /metrics.

Spans are exported by the SDK's ``BatchSpanProcessor`` on its own thread: a request only appends its
spans to a queue bounded in spans (``OTEL_BSP_MAX_QUEUE_SIZE``, 2048) and in bytes
(``telemetry.max_queue_bytes``, 32 MiB: a span with captured content may carry 64 K characters). A
collector that is down or slow costs dropped spans, never request time; they are counted in
``history_proxy_telemetry_spans_dropped_total`` by ``reason``: ``queue_full`` (the queue was full when a
span ended: it is dropped, no log line)
or ``export_failed`` (the collector refused or could not be reached, after the exporter's own
retries). Imported only when telemetry is on (redis's client imports parts of the SDK's metrics on its own).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence, Sized

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry, Counter

from history_proxy.config.telemetry import TelemetryConfig
from history_proxy.observability.genai import SCHEMA_URL
from history_proxy.observability.otlp_wire import encode_spans

log = logging.getLogger("history_proxy.telemetry")

DEFAULT_SERVICE_NAME = "history-proxy"
SDK_DISABLED_ENV = "OTEL_SDK_DISABLED"
SHUTDOWN_TIMEOUT_MS = 3000
"""How long a stopping process waits to export its last spans."""


def sdk_disabled() -> bool:
    """``OTEL_SDK_DISABLED=true``: the SDK's own switch, which turns telemetry off whatever the config says."""
    return os.environ.get(SDK_DISABLED_ENV, "").strip().lower() == "true"


class _WireExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP exporter (its endpoint, headers, TLS, compression, timeout and retries from
    ``OTEL_EXPORTER_OTLP_*``) writing its requests with :func:`~history_proxy.observability.otlp_wire.encode_spans`.

    Reaches into the exporter's ``_client`` and ``_shutdown`` (the version is pinned; the end-to-end
    tests decode what it sends)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            return SpanExportResult.FAILURE
        sent = self._client.export(encode_spans(spans))
        return SpanExportResult.SUCCESS if sent.success else SpanExportResult.FAILURE


SPAN_BYTES = 2048
"""The estimated bytes of a span besides its string attributes (ids, times, numbers, events)."""


def span_bytes(span: ReadableSpan) -> int:
    """A span's estimated size while it waits for export: its string attributes and :data:`SPAN_BYTES`."""
    attributes = span.attributes or {}
    return SPAN_BYTES + sum(len(value) for value in attributes.values() if isinstance(value, str))


class QueueBytes:
    """The estimated bytes of the spans waiting for export, shared by the processor (which adds a span's
    when it queues it, on the request's thread) and the exporter (which takes them off, on its own)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        """Count ``size`` more bytes queued, unless that would pass the limit."""
        with self._lock:
            if self.held + size > self.limit:
                return False
            self.held += size
            return True

    def give(self, size: int) -> None:
        with self._lock:
            self.held = max(0, self.held - size)


class _CountingExporter(SpanExporter):
    """The OTLP exporter, counting the spans of every batch it could not deliver."""

    def __init__(
        self, inner: SpanExporter, dropped: Counter, exported: Counter, queued: QueueBytes | None = None
    ) -> None:
        self._inner = inner
        self._dropped = dropped
        self._exported = exported
        self._queued = queued

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._queued is not None:  # out of the queue: their bytes are the exporter's now
            self._queued.give(sum(map(span_bytes, spans)))
        try:
            result = self._inner.export(spans)
        except Exception:  # an exporter bug must not kill the export thread
            log.exception("exporting %d spans failed", len(spans))
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self._exported.inc(len(spans))
        else:
            self._dropped.labels("export_failed").inc(len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class BoundedBatchSpanProcessor(BatchSpanProcessor):
    """The SDK's batch processor, dropping (and counting) a span at once when its queue is full: of
    spans (``OTEL_BSP_MAX_QUEUE_SIZE``), or of bytes (``telemetry.max_queue_bytes``, by :func:`span_bytes`).

    The SDK would drop the oldest span and log a warning for each one: a log record per span on
    the request path, while the collector is down, is what the queue is there to spare requests.
    Reaches into the processor's queue (the version is pinned; a test fills it)."""

    def __init__(self, exporter: SpanExporter, dropped: Counter, queued: QueueBytes | None = None) -> None:
        super().__init__(exporter)
        self._dropped = dropped.labels("queue_full")
        inner = self._batch_processor
        self._queue: Sized = inner._queue
        self._limit: int = inner._max_queue_size
        self._queued = queued

    def on_end(self, span: ReadableSpan) -> None:
        if len(self._queue) >= self._limit:
            self._dropped.inc()
            return
        sampled = span.context is not None and span.context.trace_flags.sampled  # else the SDK queues nothing
        if self._queued is not None and sampled and not self._queued.take(span_bytes(span)):
            self._dropped.inc()
            return
        super().on_end(span)

    def shutdown(self) -> None:
        """Export what is queued, for at most :data:`SHUTDOWN_TIMEOUT_MS` (the SDK waits 30 s: a
        stopping proxy must not hang on a dead collector)."""
        self._batch_processor.shutdown(timeout_millis=SHUTDOWN_TIMEOUT_MS)


def start_tracer(config: TelemetryConfig, registry: CollectorRegistry) -> tuple[Tracer, TracerProvider]:
    """A tracer exporting in batches to ``config.endpoint`` (or the ``OTEL_EXPORTER_OTLP_*`` environment)."""
    dropped = Counter(
        "history_proxy_telemetry_spans_dropped",
        "Spans not delivered to the OTLP collector, by reason: queue_full (the export queue was full: "
        "collector slow or down) or export_failed (the collector refused them or was unreachable).",
        ["reason"],
        registry=registry,
    )
    exported = Counter(
        "history_proxy_telemetry_spans_exported",
        "Spans the OTLP collector accepted.",
        registry=registry,
    )
    name = config.service_name or os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    resource = Resource.create({SERVICE_NAME: name})  # also reads OTEL_RESOURCE_ATTRIBUTES
    sampler = None if config.sample_ratio is None else ParentBased(TraceIdRatioBased(config.sample_ratio))
    provider = TracerProvider(resource=resource, sampler=sampler)  # sampler None: OTEL_TRACES_SAMPLER
    queued = QueueBytes(config.max_queue_bytes)
    exporter = _CountingExporter(_WireExporter(endpoint=config.endpoint), dropped, exported, queued)
    provider.add_span_processor(BoundedBatchSpanProcessor(exporter, dropped, queued))
    log.info("telemetry on: %s, service.name %s", config.describe(), name)
    return provider.get_tracer("history_proxy", schema_url=SCHEMA_URL), provider
