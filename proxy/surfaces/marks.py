"""Native ``cache_control`` marks on a Messages request (``POST /v1/messages``), placed as the slot says."""

from __future__ import annotations

from typing import Any

from proxy.core.invariants import MAX_CACHE_MARKS
from proxy.filters.cache_control import CacheControl

UNMARKABLE = ("thinking", "redacted_thinking")  # a tuple: a hostile block type may be unhashable


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
            at = markable[0] if slot.part == "first" else markable[-1]
            blocks[at] = {**blocks[at], "cache_control": mark}
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
