"""``cache_control``: prompt-cache marks on the newest messages (SWE-agent's CacheControl, seed 003)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from history_proxy.core.invariants import MAX_CACHE_MARKS, cache_mark_count
from history_proxy.core.messages import Message
from history_proxy.filters.base import Filter, FilterContext


class CacheControl(Filter):
    """Mark the newest eligible messages for prompt caching (Anthropic-style ``cache_control``).

    Placed after every chain through the config's ``cache_control`` slot, for upstreams declared
    with ``cache_control: true``; it can also stand in a chain as ``type: cache_control``.

    It first removes the marks equal to the one it places (left by an earlier pass, so applying it
    twice equals applying it once), keeps every other mark the client set, then walks from the
    newest message back, skipping the newest ``last_n_messages_offset`` messages, and marks up to
    ``last_n_messages`` messages whose role is in ``tagged_roles`` and whose content is not empty.
    A message that already carries a client mark counts as marked. The mark goes on the ``part``
    content part (string content becomes one text part); a tool message gets it on the message
    itself, as SWE-agent places it. Client marks count towards the limit of 4 per request.

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
        ours = self.mark()
        result = list(messages)
        marks = 0
        for i, message in enumerate(messages):
            # a message with no mark and no content parts has nothing to clear or count
            if "cache_control" in message or isinstance(message.get("content"), list):
                result[i] = cleared = without_mark(message, ours)
                marks += cache_mark_count((cleared,))
        room = max(0, MAX_CACHE_MARKS - marks)
        counted = 0
        for age, i in enumerate(range(len(result) - 1, -1, -1)):
            if counted >= self.last_n_messages:
                break
            message = result[i]
            if age < self.last_n_messages_offset or not self.eligible(message):
                continue
            if not has_mark(message):
                if room == 0:
                    break
                result[i] = self.marked(message)
                room -= 1
            counted += 1
        return result

    def eligible(self, message: Message) -> bool:
        """A message of a tagged role with non-empty content the mark can sit on."""
        if message.get("role") not in self.tagged_roles:
            return False
        content = message.get("content")
        if isinstance(content, str):
            return content != ""
        if isinstance(content, list) and content:
            return message.get("role") == "tool" or isinstance(content[self._part_index], dict)
        return False

    @property
    def _part_index(self) -> int:
        return 0 if self.part == "first" else -1

    def marked(self, message: Message) -> Message:
        """A copy of an eligible ``message`` carrying one new mark."""
        content = message["content"]
        parts: list[Any] = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        if message.get("role") == "tool":
            # SWE-agent's "workaround for weird bug": a tool message carries the mark itself.
            return {**message, "content": parts, "cache_control": self.mark()}
        index = self._part_index % len(parts)
        parts[index] = {**parts[index], "cache_control": self.mark()}
        return {**message, "content": parts}


def has_mark(message: Message) -> bool:
    """Whether the message or one of its content parts carries a ``cache_control`` mark."""
    return cache_mark_count([message]) > 0


def without_mark(message: Message, mark: dict[str, Any]) -> Message:
    """``message`` without the marks equal to ``mark`` (the same object when it has none)."""
    content = message.get("content")
    if "cache_control" not in message and not isinstance(content, list):
        return message  # the common case: no mark anywhere
    new_content = content
    if isinstance(content, list) and any(
        isinstance(p, dict) and p.get("cache_control") == mark for p in content
    ):
        new_content = [
            {k: v for k, v in p.items() if k != "cache_control"}
            if isinstance(p, dict) and p.get("cache_control") == mark
            else p
            for p in content
        ]
    own = message.get("cache_control") == mark
    if new_content is content and not own:
        return message
    changed = {k: v for k, v in message.items() if not (own and k == "cache_control")}
    if new_content is not content:
        changed["content"] = new_content
    return changed
