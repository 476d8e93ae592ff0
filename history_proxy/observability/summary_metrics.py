"""The summaries family: the summary cache's collectors (``history_proxy_summary_cache_*``) and
summary calls (``history_proxy_summary_calls``).

:class:`~history_proxy.observability.metrics.Metrics` is the recorder :mod:`history_proxy.summaries.cache` reports
hits, misses, errors and calls to, and counts them here; it also logs a summary call as a request of
role ``summarizer``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class SummaryCollectors:
    """Summaries found without a model call, those that needed one, failed cache operations, calls."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.summary_hits = Counter(
            "history_proxy_summary_cache_hits",
            "Summaries found without a model call, by where: memory, redis, inflight (joined a running call).",
            ["source"],
            registry=registry,
        )
        self.summary_misses = Counter(
            "history_proxy_summary_cache_misses",
            "Summaries that needed a model call.",
            registry=registry,
        )
        self.summary_errors = Counter(
            "history_proxy_summary_cache_errors",
            "Failed summary cache operations (e.g. Redis unreachable), by backend.",
            ["backend"],
            registry=registry,
        )
        self.summary_calls = Counter(
            "history_proxy_summary_calls",
            "Summary calls to an upstream, by upstream and outcome (ok, error, timeout, cancelled at shutdown).",
            ["upstream", "outcome"],
            registry=registry,
        )

    def hit(self, source: str) -> None:
        self.summary_hits.labels(source).inc()

    def miss(self) -> None:
        self.summary_misses.inc()

    def error(self, backend: str) -> None:
        self.summary_errors.labels(backend).inc()

    def call(self, upstream: str, outcome: str) -> None:
        """Count a summary call (``upstream`` already a label)."""
        self.summary_calls.labels(upstream, outcome).inc()
