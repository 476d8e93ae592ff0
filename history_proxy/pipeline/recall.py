"""The recall store: where ``last_n_observations`` with ``recall: true`` keeps the outputs it elides.

Keyed by tenant, then handle: a caller reads back only what its own tenant's requests put (an open
proxy's callers share the tenant ``None``). Bounded in bytes twice, per tenant and in all, the least
recently used entries going first, and every entry expires ``ttl_s`` seconds after it was last put or
read. In memory, one per serving process (the request itself carries every original a normal client
resends; the store serves only clients that send a notice back, so losing it on a restart costs a
"no longer held" notice, never an error). Implements :class:`history_proxy.filters.base.RecallStore`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

MAX_BYTES = 64 * 1024 * 1024
"""All tenants' outputs together, in UTF-8 bytes."""
MAX_TENANT_BYTES = 16 * 1024 * 1024
"""One tenant's outputs, in UTF-8 bytes."""
TTL_S = 3600.0
"""Seconds an output is held after it was last put or read."""


class MemoryRecallStore:
    """Elided outputs by (tenant, handle), bounded in bytes, expiring (module docstring)."""

    def __init__(
        self,
        *,
        max_bytes: int = MAX_BYTES,
        max_tenant_bytes: int = MAX_TENANT_BYTES,
        ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_tenant_bytes = max_tenant_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[tuple[str | None, str], tuple[str, int, float]] = OrderedDict()
        self._bytes = 0
        self._tenant_bytes: dict[str | None, int] = {}

    @property
    def bytes(self) -> int:
        """The UTF-8 bytes held, all tenants together."""
        return self._bytes

    @property
    def held_bytes(self) -> int:
        """:attr:`bytes`, under the name the memory gauges read (``history_proxy_recall_store_bytes``)."""
        return self._bytes

    def tenant_bytes(self, tenant: str | None) -> int:
        """The UTF-8 bytes held for ``tenant``."""
        return self._tenant_bytes.get(tenant, 0)

    def put(self, tenant: str | None, handle: str, text: str) -> None:
        """Hold ``text`` under ``(tenant, handle)``; an output larger than a tenant's share is not held."""
        key = (tenant, handle)
        now = self._clock()
        held = self._entries.get(key)
        if held is not None:
            self._entries[key] = (held[0], held[1], now)
            self._entries.move_to_end(key)
            return
        size = len(text.encode())
        if size > self.max_tenant_bytes or size > self.max_bytes:
            return
        self._expire(now)
        while self._tenant_bytes.get(tenant, 0) + size > self.max_tenant_bytes:
            self._drop(next(k for k in self._entries if k[0] == tenant))
        while self._bytes + size > self.max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[key] = (text, size, now)
        self._bytes += size
        self._tenant_bytes[tenant] = self._tenant_bytes.get(tenant, 0) + size

    def get(self, tenant: str | None, handle: str) -> str | None:
        """The output held under ``(tenant, handle)``, or None (never held, expired, evicted)."""
        key = (tenant, handle)
        held = self._entries.get(key)
        if held is None:
            return None
        now = self._clock()
        if now - held[2] > self.ttl_s:
            self._drop(key)
            return None
        self._entries[key] = (held[0], held[1], now)
        self._entries.move_to_end(key)
        return held[0]

    def _expire(self, now: float) -> None:
        while self._entries:
            key, (_, _, stamp) = next(iter(self._entries.items()))
            if now - stamp <= self.ttl_s:
                return
            self._drop(key)

    def _drop(self, key: tuple[str | None, str]) -> None:
        _, size, _ = self._entries.pop(key)
        self._bytes -= size
        left = self._tenant_bytes[key[0]] - size
        if left:
            self._tenant_bytes[key[0]] = left
        else:
            del self._tenant_bytes[key[0]]

    def __len__(self) -> int:
        return len(self._entries)
