"""Gauges of what the proxy holds in memory: each bounded cache's bytes and bound, and the process's RSS.

Read when ``/metrics`` is scraped (``Gauge.set_function``), never on the request path:

- ``history_proxy_token_cache_bytes`` / ``_max_bytes``: the per-string token counts
  (``limits.token_cache_bytes``);
- ``history_proxy_surface_memo_bytes`` / ``_max_bytes``: the view memo, estimated
  (``limits.surface_memo_bytes``);
- ``history_proxy_summary_cache_bytes`` / ``_max_bytes``: summaries in this process's memory
  (``summary_cache.max_bytes``);
- ``history_proxy_process_resident_bytes``: the process's resident set size (Linux ``/proc``).

glibc keeps memory freed by Python in its heap: when the caches let go of :data:`TRIM_BYTES` or
more since the last scrape (``released_bytes``: the view memo dropping or forgetting conversations),
the scrape first hands the freed pages back to the OS (``malloc_trim``), so RSS returns after a load.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
TRIM_BYTES = 16 * 1024 * 1024
"""Bytes the caches must have let go of since the last scrape before freed memory is handed back."""


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
    ).set_function(_Trimmer(list(caches.values())).resident_bytes)


class _Trimmer:
    """Reads RSS, first handing freed memory back to the OS when the caches let go of much."""

    def __init__(self, caches: list[Callable[[], Bounded]]) -> None:
        self.caches = caches
        self.released = 0

    def resident_bytes(self) -> float:
        released = sum(getattr(cache(), "released_bytes", 0) for cache in self.caches)
        if released - self.released >= TRIM_BYTES:
            release_freed_memory()
            self.released = released
        return float(resident_bytes())


def release_freed_memory() -> None:
    """Hand memory the process freed back to the OS (glibc's ``malloc_trim``; nothing elsewhere)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def _reader(cache: Callable[[], Bounded], name: str) -> Callable[[], float]:
    return lambda: float(getattr(cache(), name))


def resident_bytes() -> int:
    """This process's resident set size, in bytes (0 where ``/proc/self/statm`` is not available)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return 0
