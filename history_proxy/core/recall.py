"""Recall: elided originals kept retrievable by handle, per tenant (the interface only; pure).

The engine endpoint (``POST /v1/compress``) puts the original of each message it left out under a
handle written into the placeholder; ``GET /v1/retrieve/{handle}`` reads it back for the same
tenant. Any store that answers :class:`Recall` can serve both: the memory store
(:class:`history_proxy.summaries.recall.MemoryRecall`) is the default; a filter's own store of
elided observations plugs in by implementing the same three methods.
"""

from __future__ import annotations

from typing import Protocol


class Recall(Protocol):
    """A bounded store of elided originals, keyed by tenant and handle."""

    def keep(self, tenant: str | None, handle: str, original: str) -> None:
        """Keep ``original`` for ``tenant`` under ``handle`` (an older entry may be evicted)."""
        ...

    def get(self, tenant: str | None, handle: str) -> str | None:
        """The original ``tenant`` kept under ``handle``; None when unknown, expired or another tenant's."""
        ...

    @property
    def held_bytes(self) -> int:
        """The bytes held now (bounded by the store's configured size)."""
        ...
