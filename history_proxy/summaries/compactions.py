"""Where the summaries behind the proxy's own Responses ``compaction`` items are kept.

An upstream without Responses compaction gets it emulated (:mod:`history_proxy.surfaces.compaction`):
the proxy writes a summary and answers a ``compaction`` item whose ``encrypted_content`` is a handle
to it. :class:`CompactionStore` keeps the summary under the caller's tenant and the handle, in the
summary cache's backend: this process's byte-bounded memory LRU (``summary_cache.max_bytes``), and
Redis with ``summary_cache.backend: redis``, so every replica can expand a handle another wrote.
A handle looked up by another tenant finds nothing.
"""

from __future__ import annotations

import hashlib

from history_proxy.summaries.store import SummaryBackend


class CompactionStore:
    """Summaries by (tenant, handle), in a summary backend (bounded in bytes; Redis when configured)."""

    def __init__(self, backend: SummaryBackend) -> None:
        self.backend = backend

    @staticmethod
    def _key(tenant: str | None, handle: str) -> str:
        scoped = f"compaction\0{tenant or ''}\0{tenant is None}\0{handle}"
        return "compaction:" + hashlib.sha256(scoped.encode("utf-8")).hexdigest()

    async def keep(self, tenant: str | None, handle: str, summary: str) -> None:
        """Remember ``summary`` as ``tenant``'s ``handle``."""
        await self.backend.store(self._key(tenant, handle), summary)

    async def find(self, tenant: str | None, handle: str) -> str | None:
        """``tenant``'s summary behind ``handle`` (None: never written for this tenant, or evicted)."""
        key = self._key(tenant, handle)
        found = self.backend.cached(key)
        return found if found is not None else await self.backend.fetch(key)
