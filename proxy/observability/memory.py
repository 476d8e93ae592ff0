"""Gauges of what the proxy holds in memory: each bounded cache's bytes and bound, and the process's RSS.

Read when ``/metrics`` is scraped (``Gauge.set_function``), never on the request path:

- ``history_proxy_token_cache_bytes`` / ``_max_bytes``: the per-string token counts
  (``limits.token_cache_bytes``);
- ``history_proxy_surface_memo_bytes`` / ``_max_bytes``: the view memo, estimated
  (``limits.surface_memo_bytes``);
- ``history_proxy_summary_cache_bytes`` / ``_max_bytes``: summaries in this process's memory
  (``summary_cache.max_bytes``);
- ``history_proxy_process_resident_bytes``: the process's resident set size (Linux ``/proc``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Bounded(Protocol):
    """A cache that knows what it holds and its bound, in bytes."""

    @property
    def held_bytes(self) -> int: ...

    @property
    def max_bytes(self) -> int: ...


def watch_memory(registry: CollectorRegistry, **caches: Callable[[], Bounded]) -> None:
    """Register the gauges of ``caches`` (name -> the cache now) and of the process's RSS in ``registry``."""
    for name, cache in caches.items():
        label = name.replace("_", " ")
        held = Gauge(f"history_proxy_{name}_bytes", f"Bytes the {label} holds now.", registry=registry)
        held.set_function(_reader(cache, "held_bytes"))
        bound = Gauge(f"history_proxy_{name}_max_bytes", f"The {label}'s bound in bytes.", registry=registry)
        bound.set_function(_reader(cache, "max_bytes"))
    Gauge(
        "history_proxy_process_resident_bytes",
        "Resident set size of this process (0 where /proc is not available).",
        registry=registry,
    ).set_function(resident_bytes)


def _reader(cache: Callable[[], Bounded], name: str) -> Callable[[], float]:
    return lambda: float(getattr(cache(), name))


def resident_bytes() -> int:
    """This process's resident set size, in bytes (0 where ``/proc/self/statm`` is not available)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0
