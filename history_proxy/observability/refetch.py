"""The re-fetch counter: tool calls repeating an earlier call whose output the chain hid (docs/cost.md)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter

from history_proxy.core.refetch import refetch_count


def refetch_counter(registry: CollectorRegistry) -> Counter:
    """``history_proxy_refetch_total{role}``."""
    return Counter(
        "history_proxy_refetch",
        "Tool calls whose name and arguments repeat an earlier call whose output the role's chain elided "
        "or dropped (re-fetches: compaction that went too far), by caller role.",
        ["role"],
        registry=registry,
    )


def observe_refetches(counter: Counter, report: dict[str, Any], role: str) -> None:
    """Count the re-fetches a chain report notes (``refetch:N``)."""
    count = refetch_count(report.get("notes"))
    if count:
        counter.labels(role).inc(count)
