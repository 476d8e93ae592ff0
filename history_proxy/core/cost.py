"""What a sequence of requests costs once a provider's prompt cache is priced in (docs/cost.md).

Prices are relative to the uncached input price (1.0 per token). A provider caches a request's prefix;
the next request that starts with the same tokens, within the cache's time to live, pays ``read`` for
them. Tokens after the longest reusable prefix are written to the cache (``write``, 1.25 for
Anthropic's 5-minute cache, 1.0 for OpenAI, which charges nothing extra) when the request is long
enough to be cached at all (``min_tokens``), else billed at 1.0. Reads are counted in whole ``block``
tokens (OpenAI: 128) and only from ``min_tokens`` (1,024).

Requests are compared as lists of message keys (whole messages, see ``devtools.replay``): a message
that changed in any byte ends the reusable prefix, as a changed token would. That undercounts a
cache that also reuses the unchanged start of a changed message, equally for every chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Pricing:
    """A provider's prompt-cache prices, relative to its uncached input price."""

    name: str = "anthropic"
    read: float = 0.1
    """Price of a cached input token (a share of the uncached input price)."""
    write: float = 1.25
    """Price of an input token written to the cache (1.0: writing costs nothing extra)."""
    min_tokens: int = 1024
    """Shortest prefix the provider caches; shorter requests are billed at 1.0 and cache nothing."""
    block: int = 1
    """Reads count in whole blocks of this many tokens."""
    ttl_s: float = 300.0
    """How long an unused cached prefix survives."""

    def cached(self, prefix_tokens: int) -> int:
        """Tokens the provider bills as cached when ``prefix_tokens`` repeat a cached request."""
        if prefix_tokens < self.min_tokens:
            return 0
        return prefix_tokens - prefix_tokens % self.block

    def cost(self, tokens: int, prefix_tokens: int) -> float:
        """The price of one request of ``tokens`` input tokens whose first ``prefix_tokens`` are cached."""
        cached = self.cached(min(prefix_tokens, tokens))
        fresh = tokens - cached
        rate = self.write if tokens >= self.min_tokens else 1.0
        return cached * self.read + fresh * rate


OPENAI = Pricing(name="openai", read=0.1, write=1.0, min_tokens=1024, block=128, ttl_s=300.0)
"""OpenAI's automatic caching: cached reads at 0.1x (gpt-4.1/gpt-5 families) from 1,024 tokens in
128-token blocks; writing costs nothing extra; entries live 5 to 10 minutes unused."""
ANTHROPIC = Pricing(name="anthropic", read=0.1, write=1.25, min_tokens=1024, block=1, ttl_s=300.0)
"""Anthropic's 5-minute cache: reads 0.1x, writes 1.25x, from 1,024 tokens (Sonnet/Opus)."""
PRESETS: dict[str, Pricing] = {"openai": OPENAI, "anthropic": ANTHROPIC}


@dataclass(frozen=True)
class Priced:
    """One request as billed."""

    tokens: int
    prefix_tokens: int
    """Tokens of the longest prefix this request shares with a cached earlier request."""
    cached: int
    """Of those, the tokens billed as cached (``Pricing.cached``)."""
    cost: float


def shared_prefix(previous: Sequence[str], current: Sequence[str]) -> int:
    """How many leading messages two requests share byte for byte."""
    n = 0
    for a, b in zip(previous, current, strict=False):
        if a != b:
            break
        n += 1
    return n


class CacheSimulator:
    """Prices requests one after another as a provider's prompt cache would bill them.

    Every request sent is cached (its whole prefix, as a cache mark on its last message or OpenAI's
    automatic caching does); a later request reads the longest prefix it shares with any earlier one
    still alive (used within ``ttl_s``; replays without clocks count every earlier request alive).
    """

    def __init__(self, pricing: Pricing) -> None:
        self.pricing = pricing
        self._entries: list[tuple[list[str], list[int], float | None]] = []

    def send(
        self, keys: Sequence[str], token_counts: Sequence[int], total: int, at: float | None = None
    ) -> Priced:
        """Price one request: its message keys, each message's tokens, and its whole token count."""
        alive = [e for e in self._entries if at is None or e[2] is None or at - e[2] <= self.pricing.ttl_s]
        best = max((shared_prefix(k, keys) for k, _, _ in alive), default=0)
        prefix = sum(token_counts[:best])
        cost = self.pricing.cost(total, prefix)
        cached = self.pricing.cached(min(prefix, total))
        alive.append((list(keys), list(token_counts), at))
        self._entries = alive[-64:]  # a bounded memory: the newest prefixes are the ones reused
        return Priced(tokens=total, prefix_tokens=prefix, cached=cached, cost=cost)
