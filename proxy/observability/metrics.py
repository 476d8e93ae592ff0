"""What the proxy records per request: Prometheus collectors in a registry of its own (no process
globals) and one structured access line (logger ``history_proxy.access``, never content or keys).

Label values stay bounded: ``role`` is one of the roles the config names, its default role,
``other`` for any other header value, or ``none`` before the caller is known; ``upstream`` is an
upstream name from the config or ``none``; ``filter`` is a registered filter type; agent names,
request ids and models never become labels.

Each process has its own registry. Under ``serve --workers N`` the command points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before the workers start; prometheus-client then
keeps every worker's values in files there and :meth:`Metrics.render` sums them, so any worker's
``/metrics`` shows the whole server.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from typing import Any, Generic, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from proxy.config.models import Config
from proxy.core.identity import Identity
from proxy.filters import FILTER_TYPES
from proxy.observability.access import Exchange, access_log, request_id_for
from proxy.observability.logs import JsonMessage
from proxy.observability.refetch import observe_refetches, refetch_counter
from proxy.observability.role_hints import RoleHints
from proxy.observability.summary_metrics import SummaryCollectors
from proxy.observability.tracing import Telemetry

__all__ = [
    "Exchange",
    "Metrics",
    "request_id_for",
]  # Exchange and request_id_for live in proxy.observability.access

NO_LABEL = "none"
OTHER_ROLE = "other"
TOKEN_BUCKETS = (100, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 1_000_000)
SUMMARIZER_ROLE = "summarizer"
"""The role the proxy's own summary calls are counted and logged under."""
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
FILTER_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
UPSTREAM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 600.0)
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
CHILDREN_KEPT = 1024
"""Label sets :class:`Children` remembers per collector (the labels are bounded; this is a backstop)."""

Collector = TypeVar("Collector", Counter, Histogram)


class Children(Generic[Collector]):
    """A collector's child per label values, found by a dict lookup instead of ``labels()`` each time.

    The children are prometheus-client's own (it keeps every one it makes), so values and exposition
    are those of ``collector.labels(...)``, multiprocess mode included.
    """

    __slots__ = ("_known", "collector")

    def __init__(self, collector: Collector) -> None:
        self.collector: Collector = collector
        self._known: dict[tuple[str, ...], Collector] = {}

    def __call__(self, *values: str) -> Collector:
        child = self._known.get(values)
        if child is None:
            child = self.collector.labels(*values)
            if len(self._known) < CHILDREN_KEPT:
                self._known[values] = child
        return child


class Metrics(SummaryCollectors):
    """Request, token, filter-failure and overhead collectors for one app."""

    def __init__(self, config: Config) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._roles = frozenset(config.policies.roles) | {config.identity.default_role, SUMMARIZER_ROLE}
        self._upstreams = frozenset(config.upstreams)
        self.requests = Counter(
            "history_proxy_requests",
            "Requests answered, by caller role, upstream and HTTP status.",
            ["role", "upstream", "status"],
            registry=self.registry,
        )
        self.tokens_before = Histogram(
            "history_proxy_tokens_before",
            "Prompt tokens of chat completions as the client sent them.",
            ["role"],
            buckets=TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.tokens_after = Histogram(
            "history_proxy_tokens_after",
            "Prompt tokens of chat completions after the role's filter chain.",
            ["role"],
            buckets=TOKEN_BUCKETS,
            registry=self.registry,
        )
        self.filter_failures = Counter(
            "history_proxy_filter_failures",
            "Filters that raised or broke an invariant, by filter type.",
            ["filter"],
            registry=self.registry,
        )
        self.overhead = Histogram(
            "history_proxy_overhead_seconds",
            "Time spent in the proxy per request, excluding the wait for the upstream.",
            buckets=OVERHEAD_BUCKETS,
            registry=self.registry,
        )
        self.role_hints = RoleHints(self.registry)
        self._add_summary_collectors()
        self._add_report_collectors(config)
        self.telemetry = Telemetry(config.telemetry, self.registry)  # spans, ended by finish
        self._requests = Children(self.requests)
        self._tokens_before = Children(self.tokens_before)
        self._tokens_after = Children(self.tokens_after)
        self._filter_failures = Children(self.filter_failures)
        self._filter_tokens_removed = Children(self.filter_tokens_removed)
        self._filter_tokens_added = Children(self.filter_tokens_added)
        self._filter_seconds = Children(self.filter_seconds)
        self._shadow_requests = Children(self.shadow_requests)
        self._upstream_seconds = Children(self.upstream_seconds)
        self._upstream_first_byte = Children(self.upstream_first_byte)
        self._upstream_tokens = Children(self.upstream_tokens)

    def _add_report_collectors(self, config: Config) -> None:
        """What each chain did, upstream timings and open streams."""
        self._secrets = [u.key for u in config.upstreams.values() if u.key] + [
            k.key.get_secret_value() for k in config.auth.keys
        ]
        self.filter_tokens_removed = Counter(
            "history_proxy_filter_tokens_removed",
            "Prompt tokens removed by filters (shadow mode included), by filter type and caller role.",
            ["filter", "role"],
            registry=self.registry,
        )
        self.filter_tokens_added = Counter(
            "history_proxy_filter_tokens_added",
            "Prompt tokens added by filters (digests, summaries, notices), by filter type and caller role.",
            ["filter", "role"],
            registry=self.registry,
        )
        self.filter_seconds = Histogram(
            "history_proxy_filter_seconds",
            "Time one filter took on one request, by filter type.",
            ["filter"],
            buckets=FILTER_BUCKETS,
            registry=self.registry,
        )
        self.shadow_requests = Counter(
            "history_proxy_shadow_requests",
            "Chat completions whose chain ran in shadow mode (reported, original forwarded), by role.",
            ["role"],
            registry=self.registry,
        )
        self.upstream_seconds = Histogram(
            "history_proxy_upstream_seconds",
            "From sending to the upstream until its whole answer was relayed (retries included).",
            ["upstream"],
            buckets=UPSTREAM_BUCKETS,
            registry=self.registry,
        )
        self.upstream_first_byte = Histogram(
            "history_proxy_upstream_first_byte_seconds",
            "From sending to the upstream until the first byte of its answer's body.",
            ["upstream"],
            buckets=UPSTREAM_BUCKETS,
            registry=self.registry,
        )
        self.upstream_tokens = Counter(
            "history_proxy_upstream_input_tokens",
            "Input tokens the upstream reported (usage), of which `kind` cached (read from its prompt "
            "cache) and cache_write (written to it); kind=input counts them all. By role and upstream.",
            ["kind", "role", "upstream"],
            registry=self.registry,
        )
        self.overflow_retries = Counter(
            "history_proxy_overflow_retries",
            "Requests (chat completions, Responses, Messages) refused by the upstream as too long: "
            "retried fitted (outcome=retried) or "
            "passed back because nothing smaller fits (outcome=unfitted).",
            ["upstream", "outcome"],
            registry=self.registry,
        )
        self.memo_messages = Counter(
            "history_proxy_surface_memo_messages",
            "Native messages (input items) of Responses and Messages requests whose view the view memo "
            "had (outcome=reused) or that were converted (outcome=converted).",
            ["surface", "outcome"],
            registry=self.registry,
        )
        self.memo_held = Gauge(
            "history_proxy_surface_memo_held_messages",
            "Native messages the view memo holds now (limits.surface_memo_messages bounds it).",
            registry=self.registry,
        )
        self.upstream_broken = Counter(
            "history_proxy_upstream_broken",
            "Upstream answers that broke off after the client's answer started (SSE: an in-band error "
            "event; other bodies: the client's connection dropped without the answer's end).",
            ["upstream"],
            registry=self.registry,
        )
        self.refetches = refetch_counter(self.registry)
        self.streams_in_flight = Gauge(
            "history_proxy_streams_in_flight",
            "Upstream answers to stream: true requests being relayed right now.",
            registry=self.registry,
            multiprocess_mode="livesum",
        )

    def stream_opened(self, exchange: Exchange) -> None:
        """Count a streamed answer as in flight until :meth:`finish`."""
        if exchange.stream_opened():
            self.streams_in_flight.inc()

    def _observe_report(self, exchange: Exchange, role: str, upstream: str) -> None:
        """Per-filter tokens and time, shadow runs, upstream timings and the end of a stream."""
        if exchange.streaming:
            self.streams_in_flight.dec()
        if exchange.broken:
            self.upstream_broken.labels(upstream).inc()
        if (seconds := exchange.upstream_ms()) is not None:
            self._upstream_seconds(upstream).observe(seconds / 1000)
        if (seconds := exchange.first_byte_ms()) is not None:
            self._upstream_first_byte(upstream).observe(max(0.0, seconds / 1000))
        if (usage := exchange.usage) is not None:
            self._upstream_tokens("input", role, upstream).inc(usage.input_tokens)
            self._upstream_tokens("cached", role, upstream).inc(usage.cached_tokens)
            self._upstream_tokens("cache_write", role, upstream).inc(usage.cache_write_tokens)
        result = exchange.result
        if result is None or exchange.upstream is None:  # previews are not traffic
            return
        if result.mode == "shadow":
            self._shadow_requests(role).inc()
        observe_refetches(self.refetches, result.report, role)
        for outcome in result.report.get("filters", ()):
            kind = self.filter_label(outcome["type"])
            removed = outcome["tokens_removed"]
            if removed > 0:
                self._filter_tokens_removed(kind, role).inc(removed)
            elif removed < 0:
                self._filter_tokens_added(kind, role).inc(-removed)
            self._filter_seconds(kind).observe(outcome["ms"] / 1000)

    def role_label(self, role: str | None) -> str:
        """``role`` if the config names it, else ``other`` (``none`` when unknown)."""
        if role is None:
            return NO_LABEL
        return role if role in self._roles else OTHER_ROLE

    @staticmethod
    def filter_label(filter_type: str) -> str:
        """A registered filter type, else ``other``."""
        return filter_type if filter_type in FILTER_TYPES else "other"

    def upstream_label(self, upstream: str | None) -> str:
        return upstream if upstream in self._upstreams else NO_LABEL

    def reconfigure(self, config: Config) -> None:
        """Take a reloaded config's roles, upstreams and secrets (collectors and their counts are kept)."""
        self._roles = frozenset(config.policies.roles) | {config.identity.default_role, SUMMARIZER_ROLE}
        self._upstreams = frozenset(config.upstreams)
        self._secrets = [u.key for u in config.upstreams.values() if u.key] + [
            k.key.get_secret_value() for k in config.auth.keys
        ]

    def observe_filter_failure(self, filter_type: str) -> None:
        self._filter_failures(self.filter_label(filter_type)).inc()

    def observe_overflow(self, upstream: str, outcome: str) -> None:
        """Count a refusal for length and what the proxy did about it."""
        self.overflow_retries.labels(self.upstream_label(upstream), outcome).inc()

    def observe_memo(self, surface: str, reused: int, converted: int, held: int) -> None:
        """Count a surface request's natives by whether the view memo had their view; the memo's size."""
        if reused:
            self.memo_messages.labels(surface, "reused").inc(reused)
        if converted:
            self.memo_messages.labels(surface, "converted").inc(converted)
        self.memo_held.set(held)

    def observe_overhead(self, seconds: float) -> None:
        self.overhead.observe(max(0.0, seconds))

    def finish(self, exchange: Exchange, status: int | None = None) -> None:
        """Count the request and write its access line, once, however it ended."""
        if not exchange.ended(status):
            return
        role = self.role_label(exchange.identity.role if exchange.identity else None)
        upstream = self.upstream_label(exchange.upstream)
        self._requests(role, upstream, str(exchange.status)).inc()
        self.role_hints.observe(exchange.identity)
        result = exchange.result
        if result is not None and exchange.upstream is not None:  # previews are not traffic
            self._tokens_before(role).observe(result.tokens_before)
            self._tokens_after(role).observe(result.tokens_after)
            if result.failed_filter:
                self.observe_filter_failure(result.failed_filter.partition("@")[0])
        if exchange.overhead_ms is not None:
            self.observe_overhead(exchange.overhead_ms / 1000)
        self._observe_report(exchange, role, upstream)
        if exchange.trace is not None:
            exchange.trace.end(exchange)
        if access_log.isEnabledFor(logging.INFO):  # no fields (or redacted body) for a line nobody sees
            self._write_access_line(exchange.fields(self._secrets))

    @staticmethod
    def _write_access_line(fields: dict[str, Any]) -> None:
        """``access_log.info(JsonMessage(fields), extra={"access": fields})`` from the caller's line.

        The same record as ``info`` makes, without ``findCaller``'s walk up the stack: the caller is
        known (``finish``), and ``logging._srcfile = None`` still turns the lookup off.
        """
        if not logging._srcfile:  # as Logger._log tests it
            where: tuple[str, int, str] = ("(unknown file)", 0, "(unknown function)")
        else:
            caller = sys._getframe(1)
            where = (caller.f_code.co_filename, caller.f_lineno, caller.f_code.co_name)
        filename, line, function = where
        message, extra = JsonMessage(fields), {"access": fields}
        record = access_log.makeRecord(
            access_log.name, logging.INFO, filename, line, message, (), None, function, extra
        )
        access_log.handle(record)

    # --- summaries (``summarize``): the recorder proxy.summaries.cache reports to ---------------------

    def summary_call(
        self, *, upstream: str | None, model: str, outcome: str, status: int, seconds: float
    ) -> None:
        """Count one summary call, and log and count it as a request of role ``summarizer``."""
        self.summary_calls.labels(self.upstream_label(upstream), outcome).inc()
        self.telemetry.summary_call(upstream, model, outcome, status, seconds)
        exchange = Exchange(
            uuid.uuid4().hex,
            "POST",
            "/v1/chat/completions",
            time.perf_counter() - seconds,
            identity=Identity(role=SUMMARIZER_ROLE),
            model=model or None,
            upstream=upstream,
        )
        self.finish(exchange, status)

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type (every worker's, in multiprocess mode)."""
        directory = os.environ.get(MULTIPROCESS_ENV)
        if directory:
            merged = CollectorRegistry()
            MultiProcessCollector(merged, path=directory)  # type: ignore[no-untyped-call]
            return generate_latest(merged), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
