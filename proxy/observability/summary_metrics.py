"""The summary cache's collectors (``history_proxy_summary_cache_*``, ``history_proxy_summary_calls``).

:class:`~proxy.observability.metrics.Metrics` takes them as a base, so it is the recorder that
:mod:`proxy.summaries.cache` reports hits, misses and errors to; the summary call itself is counted
there too, since it is also logged as a request of role ``summarizer``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class SummaryCollectors:
    """Summaries found without a model call, those that needed one, failed cache operations, calls."""

    registry: CollectorRegistry

    def _add_summary_collectors(self) -> None:
        self.summary_hits = Counter(
            "history_proxy_summary_cache_hits",
            "Summaries found without a model call, by where: memory, redis, inflight (joined a running call).",
            ["source"],
            registry=self.registry,
        )
        self.summary_misses = Counter(
            "history_proxy_summary_cache_misses",
            "Summaries that needed a model call.",
            registry=self.registry,
        )
        self.summary_errors = Counter(
            "history_proxy_summary_cache_errors",
            "Failed summary cache operations (e.g. Redis unreachable), by backend.",
            ["backend"],
            registry=self.registry,
        )
        self.summary_calls = Counter(
            "history_proxy_summary_calls",
            "Summary calls to an upstream, by upstream and outcome (ok, error, timeout, cancelled at shutdown).",
            ["upstream", "outcome"],
            registry=self.registry,
        )

    def summary_cache_hit(self, source: str) -> None:
        self.summary_hits.labels(source).inc()

    def summary_cache_miss(self) -> None:
        self.summary_misses.inc()

    def summary_cache_error(self, backend: str) -> None:
        self.summary_errors.labels(backend).inc()
