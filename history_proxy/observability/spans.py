"""One model call's spans: the request's span, one per upstream attempt, the chain's work, summaries.

    chat gpt-4o  (SERVER; the client's traceparent its parent, else a new root)
    ├── history_proxy.shape           the caller's chain (chain_ms, before the first send), one
    │                                 event per filter: "filter summarize" (tokens, messages removed)
    ├── summary gpt-4o-mini           (CLIENT) a call ``summarize`` made (cache misses only)
    ├── upstream openai               (CLIENT) attempt 1: 429
    └── upstream backup               (CLIENT) attempt 2, a fallback: 200

Each attempt sends the upstream a ``traceparent`` naming its own span (the client's
``traceparent``/``tracestate`` are replaced, the ``tracestate`` carried on). The request's span is
ended, and its attributes set (:mod:`history_proxy.observability.genai`), when
:meth:`history_proxy.observability.metrics.Metrics.finish` counts the request. The chain's spans are laid out
from its report after the fact: the chain's time ends where the first attempt starts, and the
filters run one after another in it, each event stamped where its filter ended.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from history_proxy.config.models import Config
from history_proxy.observability import genai
from history_proxy.observability.access import Exchange
from history_proxy.observability.logs import redact

PROPAGATOR = TraceContextTextMapPropagator()
TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})
CURRENT: ContextVar[RequestTrace | None] = ContextVar("history_proxy_trace", default=None)
"""The trace of the request this task serves (summary calls made under it become its children)."""
CLIENT_CLOSED = 499


class RequestTrace:
    """The spans of one model call, from :meth:`begin` to :meth:`end`."""

    def __init__(
        self, tracer: Tracer, exchange: Exchange, headers: Mapping[str, str], config: Config, *, latest: bool
    ) -> None:
        self._tracer = tracer
        self._config = config
        self._latest = latest
        self._epoch_ns = time.time_ns()
        self._perf = exchange.started
        self.surface = genai.surface_of(exchange.path) or "chat"
        parent = PROPAGATOR.extract(headers)
        self.span = tracer.start_span(
            genai.OPERATION_NAME,
            context=parent,
            kind=SpanKind.SERVER,
            start_time=self._ns(exchange.started),
            attributes={genai.OPERATION: genai.OPERATION_NAME, f"{genai.OURS}.surface": self.surface},
        )
        self._context: Context = set_span_in_context(self.span)
        self._headers = headers
        self._tried: list[str] = []
        self._attempt: Span | None = None
        self._reply: Any = None
        self._content: list[dict[str, Any]] | None = None
        self.ended = False
        CURRENT.set(self)

    def _ns(self, perf: float) -> int:
        """A ``perf_counter`` moment of this request as nanoseconds since the epoch."""
        return self._epoch_ns + int((perf - self._perf) * 1e9)

    @property
    def trace_id(self) -> str:
        """The trace id in hex, as the access line carries it."""
        return f"{self.span.get_span_context().trace_id:032x}"

    # --- while the request runs ---------------------------------------------------------------

    def request(self, model: str | None, body: Mapping[str, Any]) -> None:
        """The client's body was read: the model names the span; settings, not content, are kept."""
        if model:
            self.span.update_name(f"{genai.OPERATION_NAME} {model}")
            self.span.set_attribute(genai.REQUEST_MODEL, model)
        if self.span.is_recording():
            self.span.set_attributes(genai.request_attributes(body, self._headers))

    def shaped(self, body: Mapping[str, Any]) -> None:
        """The body the chain made, as forwarded: its messages kept (``telemetry.capture_content`` on),
        bounded by ``telemetry.capture_content_chars`` and redacted, before the body is freed.

        Costs the body's number of messages, not its bytes: no JSON is parsed or written on the loop
        (a 24 MB body held ``/healthz`` for 1.6 s when its bytes were parsed, redacted and re-encoded).
        """
        telemetry = self._config.telemetry
        if not telemetry.capture_content or not self.span.is_recording() or self._content is not None:
            return
        secrets = [u.key for u in self._config.upstreams.values() if u.key]
        secrets += [k.key.get_secret_value() for k in self._config.auth.keys]
        self._content = redact(genai.input_messages(body, telemetry.capture_content_chars), secrets)

    def attempt(
        self, upstream: str, number: int, headers: list[tuple[bytes, bytes]], content: bytes | None
    ) -> list[tuple[bytes, bytes]]:
        """An upstream attempt starts: its span, and the headers carrying its trace context (``content``,
        the bytes sent, is not read: :meth:`shaped` took the messages)."""
        fallback = bool(self._tried) and upstream != self._tried[0]
        self._tried.append(upstream)
        attributes: dict[str, Any] = {
            f"{genai.OURS}.upstream": upstream,
            f"{genai.OURS}.attempt": number,
            f"{genai.OURS}.fallback": fallback,
            "http.request.method": "POST",
        }
        self._attempt = span = self._tracer.start_span(
            f"upstream {upstream}", context=self._context, kind=SpanKind.CLIENT, attributes=attributes
        )
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier, context=set_span_in_context(span))
        sent = [header for header in headers if header[0] not in TRACE_HEADERS]
        sent += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in carrier.items()]
        return sent

    def attempted(self, status: int | None, error: BaseException | None) -> None:
        """The attempt's answer arrived (its status), or it failed (``error``)."""
        span, self._attempt = self._attempt, None
        if span is None:
            return
        if status is not None:
            span.set_attribute(genai.HTTP_STATUS, status)
            if status >= 400:
                span.set_attribute(genai.ERROR_TYPE, str(status))
                span.set_status(Status(StatusCode.ERROR))
        if error is not None:
            span.set_attribute(genai.ERROR_TYPE, type(error).__name__)
            span.set_status(Status(StatusCode.ERROR, type(error).__name__))
        span.end()

    def replied(self, reply: Any) -> None:
        """The answer the client gets (the last one, after an overflow retry)."""
        self._reply = reply

    def summary(self, *, upstream: str | None, model: str, outcome: str, status: int, seconds: float) -> None:
        """A summary call made under this request (the ``summarize`` filter), as a span that just ended."""
        now = time.perf_counter()
        target = self._config.upstreams.get(upstream or "")
        span = self._tracer.start_span(
            f"summary {model}",
            context=self._context,
            kind=SpanKind.CLIENT,
            start_time=self._ns(now - seconds),
            attributes={
                genai.OPERATION: genai.OPERATION_NAME,
                genai.PROVIDER: target.api if target is not None else "openai",
                genai.REQUEST_MODEL: model,
                f"{genai.OURS}.upstream": upstream or "",
                f"{genai.OURS}.summary.outcome": outcome,
                genai.HTTP_STATUS: status,
            },
        )
        if outcome != "ok":
            span.set_attribute(genai.ERROR_TYPE, outcome)
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end(end_time=self._ns(now))

    # --- at the end -----------------------------------------------------------------------------

    def end(self, exchange: Exchange) -> None:
        """The request was counted: its attributes, the chain's spans, and the span ends."""
        if self.ended:
            return
        self.ended = True
        if self._attempt is not None:  # never told how the attempt ended
            self.attempted(None, _Unfinished())
        span = self.span
        if span.is_recording():
            span.set_attributes(self._attributes(exchange))
            self._record_error(exchange)
            self._shape_spans(exchange)
        span.end(end_time=self._ns(time.perf_counter()))

    def _attributes(self, exchange: Exchange) -> dict[str, Any]:
        upstream = self._config.upstreams.get(exchange.upstream or "")
        provider = upstream.api if upstream is not None else "openai"
        found: dict[str, Any] = {genai.PROVIDER: provider, f"{genai.OURS}.request_id": exchange.request_id}
        if not self._latest:
            found[genai.SYSTEM] = provider
        found[genai.HTTP_STATUS] = exchange.status
        found.update(genai.identity_attributes(exchange.identity))
        found.update(genai.chain_attributes(exchange.result))
        found.update(genai.upstream_attributes(self._tried, exchange.attempts, exchange.upstream))
        reply = self._reply
        facts = reply.answer_facts() if reply is not None else None
        unfiltered = exchange.result.tokens_before if exchange.result is not None else None
        pricing = upstream.price_model if upstream is not None else None
        found.update(genai.usage_attributes(exchange.usage, facts, pricing, unfiltered))
        if exchange.overflow_retry is not None:
            found[f"{genai.OURS}.overflow_retry"] = exchange.overflow_retry
        if exchange.overhead_ms is not None:
            found[f"{genai.OURS}.overhead_ms"] = round(exchange.overhead_ms, 3)
        if self._content is not None:
            found[genai.INPUT_MESSAGES] = json.dumps(self._content, ensure_ascii=False)
        return found

    def _record_error(self, exchange: Exchange) -> None:
        status = exchange.status
        kind = None
        if exchange.broken:
            kind = "upstream_broken"
        elif status == CLIENT_CLOSED:
            kind = "client_closed"
        elif status >= 400:
            kind = str(status)
        if kind is not None:
            self.span.set_attribute(genai.ERROR_TYPE, kind)
            self.span.set_status(Status(StatusCode.ERROR, kind))

    def _shape_spans(self, exchange: Exchange) -> None:
        """The chain's span, with one event per filter (an event is cheaper to make and export than a span)."""
        result = exchange.result
        if result is None:
            return
        end = exchange.upstream_started or time.perf_counter()
        start = max(exchange.started, end - result.chain_ms / 1000)
        shape = self._tracer.start_span(
            f"{genai.OURS}.shape", context=self._context, start_time=self._ns(start)
        )
        at = start
        for outcome in result.report.get("filters", ()):
            at += outcome["ms"] / 1000
            shape.add_event(
                f"filter {outcome['type']}",
                {
                    f"{genai.OURS}.filter.type": outcome["type"],
                    f"{genai.OURS}.filter.at": outcome["at"],
                    f"{genai.OURS}.filter.tokens_removed": outcome["tokens_removed"],
                    f"{genai.OURS}.filter.messages_removed": outcome["messages_removed"],
                    f"{genai.OURS}.filter.ms": outcome["ms"],
                },
                timestamp=self._ns(at),
            )
        shape.end(end_time=self._ns(max(end, at)))


class _Unfinished(Exception):
    """An attempt still open when its request was counted."""
