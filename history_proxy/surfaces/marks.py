"""Native ``cache_control`` marks on a Messages request (``POST /v1/messages``), placed as the slot says.

Anthropic reads breakpoints in the order tools, system, messages, and a breakpoint with a longer TTL
must not come after one with a shorter TTL (``1h`` before ``5m``). The client's own marks are never
touched; a mark the proxy places takes the slot's TTL, **downgraded** to the shortest TTL among the
client's marks before it (a ``1h`` slot after a client's 5-minute mark places a 5-minute mark: the
breakpoint still caches, and the request stays valid), and is **skipped** where a client's longer-lived
mark comes after it (a 5-minute mark cannot stand before a client's ``1h`` one).
"""

from __future__ import annotations

from typing import Any

from history_proxy.core.invariants import MAX_CACHE_MARKS
from history_proxy.filters.cache_control import CacheControl

UNMARKABLE = ("thinking", "redacted_thinking")  # a tuple: a hostile block type may be unhashable
DEFAULT_TTL = 300
"""A mark's TTL in seconds when it names none (Anthropic's default, 5 minutes)."""
TTL_SECONDS = {"5m": 300, "1h": 3600}
LONGEST = 1 << 30
"""The bound of a TTL when no client mark bounds it."""


def place_marks(
    body: dict[str, Any], slot: CacheControl, *, unmarked_messages: bool = False
) -> dict[str, Any]:
    """Native ``cache_control`` marks on the newest eligible messages, as the slot says.

    The client's own marks (on tools, system and messages) are kept and count towards the limit of
    4; a message already carrying one counts as marked. A user message holding tool results is of
    role ``tool`` for ``tagged_roles``; the mark goes on its last (``part: first``: first) block
    that may carry one (not ``thinking``). Applying it twice equals applying it once.
    ``unmarked_messages``: the caller knows no message carries a mark (the request's had none, and
    writing back never adds one), so they are not walked to count them.
    """
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body
    in_messages = 0 if unmarked_messages else marks_in(messages)
    room = MAX_CACHE_MARKS - marks_in(body.get("tools")) - marks_in(body.get("system")) - in_messages
    mark = slot.mark()
    ttl = _ttl_of(mark)
    head = min(ttls_in(body.get("tools")) + ttls_in(body.get("system")), default=LONGEST)
    floors = ceilings = None
    if in_messages:  # the client's marks in messages bound the TTL of a mark placed between them
        floors, ceilings = _bounds(messages, head)
    out = list(messages)
    counted = 0
    for age, i in enumerate(range(len(out) - 1, -1, -1)):
        if counted >= slot.last_n_messages:
            break
        message = out[i]
        content = message.get("content")
        if age < slot.last_n_messages_offset or not content or _role(message) not in slot.tagged_roles:
            continue
        if marks_in([message]) == 0:
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            markable = [
                n
                for n, block in enumerate(blocks)
                if isinstance(block, dict) and block.get("type") not in UNMARKABLE
            ]
            if room <= 0 or not markable:
                continue
            floor, ceiling = (floors[i], ceilings[i]) if floors and ceilings else (head, 0)
            if ceiling > min(ttl, floor):  # a client's longer-lived mark follows: none may stand here
                continue
            at = markable[0] if slot.part == "first" else markable[-1]
            placed = mark if ttl <= floor else _mark_for(floor)
            blocks[at] = {**blocks[at], "cache_control": placed}
            out[i] = {**message, "content": blocks}
            room -= 1
        counted += 1
    return {**body, "messages": out}


def _role(message: dict[str, Any]) -> str:
    content = message.get("content")
    if (
        message.get("role") == "user"
        and isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    ):
        return "tool"
    return str(message.get("role"))


def marks_in(value: Any) -> int:
    """The ``cache_control`` marks in tools, system blocks or messages (blocks and tool results inside)."""
    if not isinstance(value, list):
        return 0
    count = 0
    for item in value:
        if item.__class__ is not dict:
            continue
        if item.get("cache_control"):
            count += 1
        content = item.get("content")
        if content.__class__ is list:
            for block in content:  # one level inline: the usual depth, without a call per message
                if block.__class__ is not dict:
                    continue
                if block.get("cache_control"):
                    count += 1
                inner = block.get("content")
                if inner.__class__ is list:
                    count += marks_in(inner)
    return count


def _ttl_of(mark: Any) -> int:
    ttl = mark.get("ttl") if isinstance(mark, dict) else None
    return TTL_SECONDS.get(ttl, DEFAULT_TTL) if isinstance(ttl, str) else DEFAULT_TTL


def _mark_for(seconds: int) -> dict[str, Any]:
    """A mark with the TTL of ``seconds`` (the default one without a ``ttl`` field)."""
    if seconds == DEFAULT_TTL:
        return {"type": "ephemeral"}
    name = next(name for name, value in TTL_SECONDS.items() if value == seconds)
    return {"type": "ephemeral", "ttl": name}


def ttls_in(value: Any) -> list[int]:
    """The TTLs (seconds) of the ``cache_control`` marks in tools, system blocks or messages, in order."""
    if not isinstance(value, list):
        return []
    out: list[int] = []
    for item in value:
        if item.__class__ is not dict:
            continue
        if item.get("cache_control"):
            out.append(_ttl_of(item["cache_control"]))
        content = item.get("content")
        if content.__class__ is list:
            out += ttls_in(content)
    return out


def _bounds(messages: list[Any], head: int) -> tuple[list[int], list[int]]:
    """For each message: the shortest TTL of the client's marks before it (``head``: those on tools
    and system) and the longest after it (0: none)."""
    per = [ttls_in([message]) for message in messages]
    floors: list[int] = []
    floor = head
    for ttls in per:
        floors.append(floor)
        floor = min(floor, *ttls) if ttls else floor
    ceilings = [0] * len(messages)
    ceiling = 0
    for i in range(len(messages) - 1, -1, -1):
        ceilings[i] = ceiling
        ceiling = max(ceiling, *per[i]) if per[i] else ceiling
    return floors, ceilings
