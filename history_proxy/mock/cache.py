"""The mock's prompt cache: what a provider would report as cached for a request (issue 18).

Providers cache a request's prefix and bill it as read when a later request repeats it. The mock
models that the way OpenAI's automatic caching works: the cached part of a request is the longest
prefix of whole messages that an earlier request to the same mock (and model) also began with,
counted in ``BLOCK``-token blocks and only from ``MIN_TOKENS``; a request shorter than that is
neither read nor written. Prefixes are remembered as hashes in a bounded LRU, so memory stays flat
and the figures depend only on the sequence of requests, never on the clock. Tokens are the mock's
approximation (a quarter of the characters), the same count it reports as the prompt's.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import OrderedDict
from dataclasses import dataclass

from history_proxy.core.messages import Message

MIN_TOKENS = 1024
"""A request under this many tokens is not cached (OpenAI's and Anthropic's minimum)."""
BLOCK = 128
"""The cached part is counted in blocks of this many tokens (OpenAI)."""
CAPACITY = 4096
"""Prefix hashes remembered; the least recently used go first."""


@dataclass(frozen=True)
class CacheReport:
    """One request's prompt tokens, of which read from the cache and written to it."""

    prompt_tokens: int
    cached_tokens: int
    written_tokens: int


class PromptCache:
    """An LRU of message-prefix hashes standing in for a provider's prompt cache."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._prefixes: OrderedDict[bytes, None] = OrderedDict()

    def lookup(self, model: str, messages: list[Message], chars: list[int]) -> CacheReport:
        """Report the request (``chars``: each message's character count) and remember its prefixes."""
        prompt = math.ceil(sum(chars) / 4)
        if prompt < MIN_TOKENS:
            return CacheReport(prompt, 0, 0)
        running = hashlib.sha256(model.encode())
        hashes: list[bytes] = []
        for message in messages:
            running.update(json.dumps(_unmarked(message), sort_keys=True, default=str).encode())
            hashes.append(running.copy().digest())
        shared = 0
        for i, digest in enumerate(hashes):
            if digest not in self._prefixes:
                break
            shared = i + 1
        for digest in hashes:
            self._prefixes[digest] = None
            self._prefixes.move_to_end(digest)
        while len(self._prefixes) > self._capacity:
            self._prefixes.popitem(last=False)
        shared_tokens = math.ceil(sum(chars[:shared]) / 4)
        cached = shared_tokens // BLOCK * BLOCK if shared_tokens >= MIN_TOKENS else 0
        return CacheReport(prompt, cached, prompt - cached)


def _unmarked(message: Message) -> Message:
    """The message without ``cache_control`` marks (a provider's cache key ignores where they stand)."""
    content = message.get("content")
    if isinstance(content, list):
        content = [
            {k: v for k, v in part.items() if k != "cache_control"} if isinstance(part, dict) else part
            for part in content
        ]
    return {**{k: v for k, v in message.items() if k != "cache_control"}, "content": content}
