"""The requests family: every request answered, its prompt tokens before and after the chain, and
the time the proxy spent on it (``history_proxy_requests``, ``_tokens_before``, ``_tokens_after``,
``_overhead_seconds``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from history_proxy.observability.access import Exchange
from history_proxy.observability.collectors import Children

TOKEN_BUCKETS = (100, 500, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000, 1_000_000)
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class RequestCollectors:
    """Requests by role, upstream and status; tokens before and after the chain; the proxy's overhead."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "history_proxy_requests",
            "Requests answered, by caller role, upstream and HTTP status.",
            ["role", "upstream", "status"],
            registry=registry,
        )
        self.tokens_before = Histogram(
            "history_proxy_tokens_before",
            "Prompt tokens of chat completions as the client sent them.",
            ["role"],
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.tokens_after = Histogram(
            "history_proxy_tokens_after",
            "Prompt tokens of chat completions after the role's filter chain.",
            ["role"],
            buckets=TOKEN_BUCKETS,
            registry=registry,
        )
        self.overhead = Histogram(
            "history_proxy_overhead_seconds",
            "Time spent in the proxy per request, excluding the wait for the upstream.",
            buckets=OVERHEAD_BUCKETS,
            registry=registry,
        )
        self._requests = Children(self.requests)
        self._tokens_before = Children(self.tokens_before)
        self._tokens_after = Children(self.tokens_after)

    def observe(self, exchange: Exchange, role: str, upstream: str, traffic: bool) -> None:
        """Count a finished request; its token figures when it is ``traffic`` (forwarded, not a preview)."""
        self._requests(role, upstream, str(exchange.status)).inc()
        result = exchange.result
        if traffic and result is not None:
            self._tokens_before(role).observe(result.tokens_before)
            self._tokens_after(role).observe(result.tokens_after)
        if exchange.overhead_ms is not None:
            self.observe_overhead(exchange.overhead_ms / 1000)

    def observe_overhead(self, seconds: float) -> None:
        self.overhead.observe(max(0.0, seconds))
