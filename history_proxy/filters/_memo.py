"""A memo of values computed from a text, bounded in entries and in characters of the texts held.

Filters read old messages on every request that still carries them; a memo lets them scan each text
once. The oldest entries go first. Any two memos are equal: what a filter remembered never makes two
configurations differ (filters are pydantic models compared by value).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    """Values by key, at most ``max_entries`` of them and ``max_chars`` characters of their texts."""

    def __init__(self, *, max_entries: int, max_chars: int) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._held: dict[K, tuple[V, int]] = {}
        self._chars = 0

    def remembered(self, key: K, chars: int, compute: Callable[[], V]) -> V:
        """The value held for ``key``, else ``compute()``, kept when its text (``chars`` long) fits."""
        found = self._held.get(key)
        if found is not None:
            return found[0]
        value = compute()
        if chars <= self.max_chars:
            held = self._held
            while held and (len(held) >= self.max_entries or self._chars + chars > self.max_chars):
                oldest = next(iter(held))  # dicts keep insertion order
                self._chars -= held.pop(oldest)[1]
            held[key] = (value, chars)
            self._chars += chars
        return value

    def __len__(self) -> int:
        return len(self._held)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self))

    __hash__ = None  # type: ignore[assignment]
