"""The shaping family: what each chain did and what the surfaces' view memo spared.

Per filter type the tokens it removed or added, its time and its failures; chains run in shadow
mode; re-fetches the chains caused (``history_proxy_refetch``); native messages whose view the memo
had or converted, and the memo's size.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from history_proxy.filters import FILTER_TYPES
from history_proxy.observability.collectors import Children
from history_proxy.observability.refetch import observe_refetches, refetch_counter
from history_proxy.pipeline.run import PipelineResult

FILTER_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)


def filter_label(filter_type: str) -> str:
    """A registered filter type, else ``other``."""
    return filter_type if filter_type in FILTER_TYPES else "other"


class ShapingCollectors:
    """Filter failures, tokens and time per filter type, shadow runs, re-fetches, the view memo."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.filter_failures = Counter(
            "history_proxy_filter_failures",
            "Filters that raised or broke an invariant, by filter type.",
            ["filter"],
            registry=registry,
        )
        self.filter_tokens_removed = Counter(
            "history_proxy_filter_tokens_removed",
            "Prompt tokens removed by filters (shadow mode included), by filter type and caller role.",
            ["filter", "role"],
            registry=registry,
        )
        self.filter_tokens_added = Counter(
            "history_proxy_filter_tokens_added",
            "Prompt tokens added by filters (digests, summaries, notices), by filter type and caller role.",
            ["filter", "role"],
            registry=registry,
        )
        self.filter_seconds = Histogram(
            "history_proxy_filter_seconds",
            "Time one filter took on one request, by filter type.",
            ["filter"],
            buckets=FILTER_BUCKETS,
            registry=registry,
        )
        self.shadow_requests = Counter(
            "history_proxy_shadow_requests",
            "Chat completions whose chain ran in shadow mode (reported, original forwarded), by role.",
            ["role"],
            registry=registry,
        )
        self.memo_messages = Counter(
            "history_proxy_surface_memo_messages",
            "Native messages (input items) of Responses and Messages requests whose view the view memo "
            "had (outcome=reused) or that were converted (outcome=converted).",
            ["surface", "outcome"],
            registry=registry,
        )
        self.memo_held = Gauge(
            "history_proxy_surface_memo_held_messages",
            "Native messages the view memo holds now (limits.surface_memo_messages bounds it).",
            registry=registry,
        )
        self.refetches = refetch_counter(registry)
        self._filter_failures = Children(self.filter_failures)
        self._filter_tokens_removed = Children(self.filter_tokens_removed)
        self._filter_tokens_added = Children(self.filter_tokens_added)
        self._filter_seconds = Children(self.filter_seconds)
        self._shadow_requests = Children(self.shadow_requests)

    def observe(self, result: PipelineResult, role: str) -> None:
        """What the chain of a forwarded request did: a failed filter, shadow mode, re-fetches, and
        each filter's tokens and time."""
        if result.failed_filter:
            self.observe_filter_failure(result.failed_filter.partition("@")[0])
        if result.mode == "shadow":
            self._shadow_requests(role).inc()
        observe_refetches(self.refetches, result.report, role)
        for outcome in result.report.get("filters", ()):
            kind = filter_label(outcome["type"])
            removed = outcome["tokens_removed"]
            if removed > 0:
                self._filter_tokens_removed(kind, role).inc(removed)
            elif removed < 0:
                self._filter_tokens_added(kind, role).inc(-removed)
            self._filter_seconds(kind).observe(outcome["ms"] / 1000)

    def observe_filter_failure(self, filter_type: str) -> None:
        self._filter_failures(filter_label(filter_type)).inc()

    def observe_memo(self, surface: str, reused: int, converted: int, held: int) -> None:
        """Count a surface request's natives by whether the view memo had their view; the memo's size."""
        if reused:
            self.memo_messages.labels(surface, "reused").inc(reused)
        if converted:
            self.memo_messages.labels(surface, "converted").inc(converted)
        self.memo_held.set(held)
