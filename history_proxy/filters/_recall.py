"""Recall without interception (``last_n_observations`` with ``recall: true``).

Each elided output's notice carries a short *handle*, ``#`` and 10 hex digits of a hash of the output
(the same on every request and replica):

    Old environment output: (86 lines omitted; to see it whole again, mention #3fa2b1c9ab)

A later assistant message (its text or a tool call's arguments) that mentions the handle brings the
output back whole, in place; one that quotes a distinctive token first read in that output (an id, a
path: the output's *facts*) brings back the output's lines holding it, quoted in its notice. No tool is
injected and nothing is intercepted: the agent's own words are the request.

The request normally carries every original (chat histories are resent whole), so restoring needs no
store. A client that sends back a notice instead of the output (a history saved as the proxy sent it)
is served from the *recall store*: the filter puts each output it elides there, under the caller's
tenant, and reads it back when a later message mentions the handle. The store is injected through
the filter's context (``FilterContext.recall``); a handle it no longer holds (expired, evicted, another
tenant's) is said so in the notice, never an error.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from history_proxy.core.evidence import message_text
from history_proxy.core.messages import Message
from history_proxy.filters._facts import FactsMemo
from history_proxy.filters._memo import BoundedMemo
from history_proxy.filters.base import FilterContext

HANDLE_DIGITS = 10
"""Hex digits in a handle (40 bits: a clash inside one tenant's store is negligible)."""
MENTION = re.compile(r"#([0-9a-f]{10})(?![0-9a-f])")
"""A handle as an assistant message mentions it."""
NOTICE_HANDLE = re.compile(r"^Old environment output: \(.*mention #([0-9a-f]{10})\)")
"""The handle in a notice a client sent back in place of the output."""


def handle_of(text: str) -> str:
    """The handle of an output's text: 10 hex digits of its BLAKE2b hash."""
    return hashlib.blake2b(text.encode(), digest_size=HANDLE_DIGITS // 2).hexdigest()


class HandleMemo(BoundedMemo[str, str]):
    """The handles of outputs already hashed, so an old output is hashed once rather than on every
    request that still carries it (bounded: :class:`BoundedMemo`)."""

    def __init__(self, *, max_entries: int = 4096, max_chars: int = 8_000_000) -> None:
        super().__init__(max_entries=max_entries, max_chars=max_chars)

    def handle(self, text: str) -> str:
        """:func:`handle_of`, remembered."""
        return self.remembered(text, len(text), lambda: handle_of(text))


def with_handle(notice: str, handle: str) -> str:
    """``notice`` with ``; to see it whole again, mention #handle`` inside its first parentheses."""
    head, sep, tail = notice.partition(")")
    if not sep:
        return notice
    return f"{head}; to see it whole again, mention #{handle}){tail}"


def expired(notice: str, handle: str) -> str:
    """A notice sent back whose handle the store no longer holds, saying so."""
    first, _, rest = notice.partition("\n")
    said = f"{first} (#{handle} is no longer held: read the output again if it is needed)"
    return f"{said}\n{rest}" if rest else said


@dataclass
class References:
    """What the assistant messages after each observation refer to."""

    handles: set[int] = field(default_factory=set)
    """Observations (message indices) whose handle a later assistant message mentions."""
    tokens: dict[int, set[str]] = field(default_factory=dict)
    """For each observation, its facts that a later assistant message quotes."""


def references(
    messages: Sequence[Message],
    handles: dict[str, int],
    facts: dict[int, list[str]],
    memo: FactsMemo,
) -> References:
    """The handles (``handle -> observation index``) and facts (``facts[i]``: the new tokens of the
    observation at ``i``) that assistant messages after their observation mention."""
    owner = {token: i for i, tokens in facts.items() for token in tokens}
    found = References()
    for j, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        text = message_text(message)
        if handles and "#" in text:
            found.handles.update(i for h in MENTION.findall(text) if (i := handles.get(h, j)) < j)
        for token in memo.tokens(text):
            i = owner.get(token, j)
            if i < j:
                found.tokens.setdefault(i, set()).add(token)
    return found


def sent_back_handle(message: Message) -> str | None:
    """The handle of a notice a client sent in place of an output, if ``message`` holds one."""
    content = message.get("content")
    if not isinstance(content, str) or not content.startswith("Old environment output: ("):
        return None
    match = NOTICE_HANDLE.match(content)
    return match.group(1) if match else None


def restore_sent_back(
    messages: list[Message], positions: list[int], ctx: FilterContext, rewrites: list[tuple[Message, Message]]
) -> set[int]:
    """Bring back, from the recall store, each output a client sent as a notice whose handle a later
    assistant message mentions; a handle the store no longer holds is said so. The indices restored."""
    sent = {h: i for i in positions if (h := sent_back_handle(messages[i])) is not None}
    if not sent:
        return set()
    mentioned = references(messages, sent, {}, FactsMemo(max_entries=1)).handles
    restored: set[int] = set()
    for handle, i in sent.items():
        if i not in mentioned:
            continue
        original = ctx.recall.get(ctx.tenant, handle) if ctx.recall is not None else None
        notice = str(messages[i].get("content") or "")
        copy = {**messages[i], "content": original if original is not None else expired(notice, handle)}
        rewrites.append((messages[i], copy))
        messages[i] = copy
        if original is not None:
            restored.add(i)
    return restored
