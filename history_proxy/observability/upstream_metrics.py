"""The upstream family: how long upstreams took, what they reported, how their answers ended.

Time to the whole answer and to its first byte; the input and prompt-cache tokens their usage
reported; answers that broke off; refusals for length and what the proxy did about them; streamed
answers being relayed right now.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from history_proxy.observability.access import Exchange
from history_proxy.observability.collectors import Children

UPSTREAM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 600.0)


class UpstreamCollectors:
    """Upstream timings, usage tokens, broken answers, overflow retries and streams in flight."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.upstream_seconds = Histogram(
            "history_proxy_upstream_seconds",
            "From sending to the upstream until its whole answer was relayed (retries included).",
            ["upstream"],
            buckets=UPSTREAM_BUCKETS,
            registry=registry,
        )
        self.upstream_first_byte = Histogram(
            "history_proxy_upstream_first_byte_seconds",
            "From sending to the upstream until the first byte of its answer's body.",
            ["upstream"],
            buckets=UPSTREAM_BUCKETS,
            registry=registry,
        )
        self.upstream_tokens = Counter(
            "history_proxy_upstream_input_tokens",
            "Input tokens the upstream reported (usage), of which `kind` cached (read from its prompt "
            "cache) and cache_write (written to it); kind=input counts them all. By role and upstream.",
            ["kind", "role", "upstream"],
            registry=registry,
        )
        self.overflow_retries = Counter(
            "history_proxy_overflow_retries",
            "Requests (chat completions, Responses, Messages) refused by the upstream as too long: "
            "retried fitted (outcome=retried) or "
            "passed back because nothing smaller fits (outcome=unfitted).",
            ["upstream", "outcome"],
            registry=registry,
        )
        self.upstream_broken = Counter(
            "history_proxy_upstream_broken",
            "Upstream answers that broke off after the client's answer started (SSE: an in-band error "
            "event; other bodies: the client's connection dropped without the answer's end).",
            ["upstream"],
            registry=registry,
        )
        self.streams_in_flight = Gauge(
            "history_proxy_streams_in_flight",
            "Upstream answers to stream: true requests being relayed right now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self._upstream_seconds = Children(self.upstream_seconds)
        self._upstream_first_byte = Children(self.upstream_first_byte)
        self._upstream_tokens = Children(self.upstream_tokens)

    def stream_opened(self, exchange: Exchange) -> None:
        """Count a streamed answer as in flight until :meth:`observe` sees its request finished."""
        if exchange.stream_opened():
            self.streams_in_flight.inc()

    def observe(self, exchange: Exchange, role: str, upstream: str) -> None:
        """The end of a stream, a broken answer, the upstream's timings and the usage it reported."""
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

    def observe_overflow(self, upstream: str, outcome: str) -> None:
        """Count a refusal for length (``upstream`` already a label) and what the proxy did about it."""
        self.overflow_retries.labels(upstream, outcome).inc()
