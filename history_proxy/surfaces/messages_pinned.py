"""Pinned Messages: the messages of ``/v1/messages`` no filter may touch, put back where they stood.

A message whose role is neither ``user`` nor ``assistant`` (Claude Code's mid-conversation
``system`` messages, beta ``mid-conversation-system-2026-04-07``, or a role added after this proxy was
written) is not in the chain's view: no filter can drop, merge or edit it, nor take it for a turn
boundary. When the adapter writes the request back, each one returns verbatim (less the proxy's
annotation keys) before the first kept message that followed it in the request, or at the end.

The policy still applies to their text (:func:`through_policy`): the history-free filters of the
global and tenant policies (:data:`history_proxy.surfaces.history_free.HISTORY_FREE`, the secret filter
``remove_regex``) run over the string content and the ``text`` blocks of each pinned message as it is
sent; every other field and block stays, the message stays where it is and is never dropped. A text
block left blank is removed (as :mod:`history_proxy.surfaces.messages_valid` removes one from a changed
message) and a message left with no content says :data:`REMOVED`.
"""

from __future__ import annotations

from typing import Any

from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces._view import Shaped, view_content, without_annotations, written_back
from history_proxy.surfaces.history_free import history_free_filters, noted, stand_in, through_history_free
from history_proxy.surfaces.messages_valid import REMOVED

VIEWED_ROLES = ("user", "assistant")
PINNED_FILTERED = "messages:pinned_filtered"
"""The note of a request whose pinned messages' text the policy's history-free filters changed."""


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


def through_policy(
    pipeline: Pipeline, shaped: Shaped, identity: Identity, model: str, upstream: str | None
) -> Shaped:
    """``shaped`` with the text of its pinned messages through the history-free global and tenant
    filters (the same object when they change nothing). Each other message is a stand-in without
    content, so a filter's ``keep_last`` counts the messages as sent."""
    filters = history_free_filters(pipeline, identity)
    written = shaped.body.get("messages")
    if not filters or not isinstance(written, list) or not any(map(_pinned, written)):
        return shaped
    views: list[Message] = [
        {"role": "system", "content": view_content(m.get("content"))} if _pinned(m) else stand_in()
        for m in written
    ]
    sent = through_history_free(pipeline, filters, views, identity, model, upstream, shaped.body)
    out = list(written)
    for n, (before, after) in enumerate(zip(views, sent, strict=True)):
        if after["content"] != before["content"]:
            native = written[n]["content"]
            out[n] = {
                **written[n],
                "content": _valid(written_back(native, before["content"], after["content"], "text")),
            }
    if out == written:
        return shaped
    return noted(shaped, {**shaped.body, "messages": out}, PINNED_FILTERED, filters)


def _pinned(message: Any) -> bool:
    return isinstance(message, dict) and is_pinned(message)


def _valid(content: Any) -> Any:
    """A pinned message's edited content without blank text blocks, :data:`REMOVED` when none is left."""
    if isinstance(content, str):
        return content if content.strip() else REMOVED
    blocks = [
        block
        for block in content
        if not (
            isinstance(block, dict) and block.get("type") == "text" and not str(block.get("text")).strip()
        )
    ]
    return blocks or [{"type": "text", "text": REMOVED}]
