"""``cache_control``: prompt-cache marks on the newest messages (SWE-agent's CacheControl, seed 003)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from proxy.filters.base import Filter, FilterContext
from proxy.messages import MAX_CACHE_MARKS, Message, cache_mark_count


class CacheControl(Filter):
    """Mark the newest eligible messages for prompt caching (Anthropic-style ``cache_control``).

    Placed after every chain through the config's ``cache_control`` slot, for upstreams declared
    with ``cache_control: true``; it can also stand in a chain as ``type: cache_control``.

    ```yaml
    cache_control: {last_n_messages: 2, tagged_roles: [user, tool], part: last}
    ```
    """

    type: Literal["cache_control"]
    last_n_messages: int = 2
    """How many of the newest eligible messages get a mark (<= 0: only clear our own marks)."""
    last_n_messages_offset: int = Field(default=0, ge=0)
    """Skip this many of the newest messages (all roles count) before marking."""
    tagged_roles: list[str] = Field(default_factory=lambda: ["user", "tool"])
    """Only messages with these roles are marked."""
    part: Literal["last", "first"] = "last"
    """Which content part carries the mark: ``last`` as Anthropic advises, ``first`` for SWE-agent parity."""
    ttl: Literal["1h"] | None = None
    """Cache lifetime; none is the provider default (5 minutes)."""
    cache_friendly = "yes: marks move with the newest messages; the marked prefix is what the provider caches"

    def mark(self) -> dict[str, Any]:
        mark: dict[str, Any] = {"type": "ephemeral"}
        if self.ttl:
            mark["ttl"] = self.ttl
        return mark

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        raise NotImplementedError("cache_control is being written")
