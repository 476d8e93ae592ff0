"""The memory store of elided originals (:class:`history_proxy.core.recall.Recall`): an LRU bounded in bytes.

Entries are keyed by (tenant, handle), so one tenant never reads another's originals, and expire
``ttl_s`` after they were last kept. The byte bound counts each original's UTF-8 size plus its
handle and tenant; the oldest entries go first when a new one would pass it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

ENTRY_OVERHEAD = 64
"""Bytes counted per entry besides its text (the key tuple and the bookkeeping)."""


class MemoryRecall:
    """Elided originals in this process's memory, at most ``max_bytes``, each kept ``ttl_s``."""

    def __init__(self, max_bytes: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], tuple[str, float, int]] = OrderedDict()
        self._held = 0

    @property
    def held_bytes(self) -> int:
        """The bytes held now."""
        return self._held

    def keep(self, tenant: str | None, handle: str, original: str) -> None:
        """Keep ``original`` under (tenant, handle); too large for the bound: not kept."""
        key = (tenant or "", handle)
        size = len(original.encode("utf-8", "replace")) + len(handle) + len(key[0]) + ENTRY_OVERHEAD
        if size > self.max_bytes:
            return
        self._drop(key)
        while self._entries and self._held + size > self.max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[key] = (original, self._clock() + self.ttl_s, size)
        self._held += size

    def get(self, tenant: str | None, handle: str) -> str | None:
        """The original, or None when unknown, expired or kept for another tenant."""
        key = (tenant or "", handle)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def _drop(self, key: tuple[str, str]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._held -= entry[2]
