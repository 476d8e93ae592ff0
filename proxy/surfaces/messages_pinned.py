"""Pinned Messages: the messages of ``/v1/messages`` no filter may touch, put back where they stood.

A message whose role is neither ``user`` nor ``assistant`` (Claude Code's mid-conversation
``system`` messages, beta ``mid-conversation-system-2026-04-07``, or a role added after this proxy was
written) is not in the chain's view: no filter can drop, merge or edit it, nor take it for a turn
boundary. When the adapter writes the request back, each one returns verbatim (less the proxy's
annotation keys) before the first kept message that followed it in the request, or at the end.
"""

from __future__ import annotations

from typing import Any

from proxy.surfaces._view import without_annotations

VIEWED_ROLES = ("user", "assistant")


def is_pinned(message: dict[str, Any]) -> bool:
    """Whether a native message stays out of the view (a role other than user or assistant)."""
    return message.get("role") not in VIEWED_ROLES


def with_pinned(
    natives: list[dict[str, Any]], spans: list[int], written: list[dict[str, Any]], origins: list[int]
) -> tuple[list[dict[str, Any]], list[int]]:
    """``written`` with the pinned natives (roles other than user and assistant) put back in place:
    each before the first kept message that followed it (at the end when none did)."""
    pinned = [i for i in range(len(natives)) if spans[i] == spans[i + 1] and is_pinned(natives[i])]
    if not pinned:
        return written, origins
    out: list[dict[str, Any]] = []
    where: list[int] = []
    p, last = 0, -1
    for message, origin in zip(written, origins, strict=True):
        last = origin if origin >= 0 else last  # a message a filter made stands where the last native did
        while p < len(pinned) and pinned[p] < last:
            out.append(without_annotations(natives[pinned[p]]))
            where.append(pinned[p])
            p += 1
        out.append(message)
        where.append(origin)
    for i in pinned[p:]:
        out.append(without_annotations(natives[i]))
        where.append(i)
    return out, where


def omitted_at(
    natives: list[dict[str, Any]], written: list[dict[str, Any]], origins: list[int]
) -> int | None:
    """Where the history written back needs a user message saying earlier ones were left out: before
    its first user or assistant message when that is not a user message and not where the request
    began (after the pinned messages that opened the request, if they did); None when it needs none."""
    first = next((n for n, message in enumerate(written) if not is_pinned(message)), None)
    if first is None or written[first].get("role") == "user":
        return None
    began = next((i for i, message in enumerate(natives) if not is_pinned(message)), -1)
    if origins[first] == began:  # the request itself opened so
        return None
    return first if origins[0] == 0 else 0
