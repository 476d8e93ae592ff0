"""The per-string token-count cache of one encoding, bounded in entries and in bytes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextvars import ContextVar

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
"""The string cache's bound in bytes (``limits.token_cache_bytes``)."""
ENTRY_BYTES = 100
"""What one cache entry costs besides its string: the dict slot, the int, the hash."""
LARGE_CHARS = 64 * 1024
"""Strings this long are remembered by their hash and length, not by themselves (:class:`StringCounts`)."""
MAX_LARGE = 4096
"""How many large strings' counts are remembered (oldest dropped first)."""


LOOP_BUDGET: ContextVar[list[int] | None] = ContextVar("history_proxy_loop_budget", default=None)
"""Characters the current request may still tokenize where it runs (None: no limit). The server sets
it around a request's shaping on the event loop (``history_proxy.server.warm``); past it, :class:`CountLater`."""


class CountLater(BaseException):  # a signal, not an error: no ``except Exception`` may take it
    """The request's budget of on-loop tokenizing is spent: count its long strings elsewhere, then retry."""


class StringCounts:
    """The per-string count cache of one encoding, shared by a counter and its request views.

    Bounded in entries and in bytes (each string's ``sys.getsizeof`` plus :data:`ENTRY_BYTES`); the
    oldest entries go first (dicts keep insertion order), a tenth of the bound at a time. A string of
    :data:`LARGE_CHARS` or more is remembered under its ``hash()`` and length (a 64-bit SipHash with
    the process's secret seed, computed once per string object by every dict look-up anyway), so a
    30 MB tool result costs a few bytes of cache, and its next look-up no tokenizing.
    """

    def __init__(self, length: Callable[[str], int], max_entries: int, max_bytes: int) -> None:
        self.length = length
        self.cache: dict[str, int] = {}
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.large: dict[tuple[int, int], int] = {}
        self.held_bytes = 0
        self.misses = 0

    def tokenize(self, text: str) -> int:
        """Count ``text`` with the tokenizer and remember it."""
        if len(text) >= LARGE_CHARS:
            count = self.large.get((hash(text), len(text)))
            if count is not None:
                return count
        budget = LOOP_BUDGET.get()
        if budget is not None:
            budget[0] -= len(text)
            if budget[0] < 0:
                raise CountLater
        self.misses += 1
        return self.keep(text, self.length(text))

    def known(self, text: str) -> bool:
        """Whether ``text``'s count is remembered."""
        return text in self.cache or (len(text) >= LARGE_CHARS and (hash(text), len(text)) in self.large)

    def keep(self, text: str, count: int) -> int:
        """Remember ``count`` as the tokens of ``text`` (within the bounds); gives it back."""
        if len(text) >= LARGE_CHARS:
            if len(self.large) >= MAX_LARGE:
                for key in list(self.large)[: MAX_LARGE // 10]:
                    del self.large[key]
            self.large[(hash(text), len(text))] = count
            return count
        size = sys.getsizeof(text) + ENTRY_BYTES
        if size > self.max_bytes // 8 or text in self.cache:
            return count
        if len(self.cache) >= self.max_entries or self.held_bytes + size > self.max_bytes:
            self._evict(size)
        self.cache[text] = count
        self.held_bytes += size
        return count

    def _evict(self, needed: int) -> None:
        """Drop the oldest entries: a tenth of each bound, and room for ``needed`` bytes."""
        target = min(self.max_bytes - self.max_bytes // 10, self.max_bytes - needed)
        count = len(self.cache) - (self.max_entries - (self.max_entries // 10 or 1))
        dropped: list[str] = []
        freed = self.held_bytes
        for key in self.cache:
            if len(dropped) >= count and freed <= target:
                break
            dropped.append(key)
            freed -= sys.getsizeof(key) + ENTRY_BYTES
        for key in dropped:
            del self.cache[key]
        self.held_bytes = freed
