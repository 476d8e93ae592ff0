"""The views of recent conversations, so a request that repeats its previous one converts only what is new.

An agent sends its whole history with every call: request ``k + 1`` is request ``k``'s messages (or
input items) plus a few. A chat-completions request is read as it comes; a Responses or Messages
request must first be converted into the chain's view, about 2 µs of Python per native message. The
memo keeps, per conversation, the native messages of its latest request and the view built from
them; the next request's natives are compared with them (``==``, in C), and the view messages of the
equal leading ones are taken as they are (with their token counts), so only the new tail is
converted. What is sent upstream is always the new request's own natives: a view message stands for
its native only in the chain's eyes, save one case: a Messages tool result a filter rewrote the
same way last turn reuses that write-back. (``==`` holds 1, 1.0 and true alike: a message resent
with another spelling of a number keeps the earlier spelling in its view, and in that write-back.)

A conversation is known by its surface and its opening (the system prompt or instructions and the
first message); two conversations that open alike share one entry and each finds only the prefix
they share. Entries are dropped oldest first beyond ``max_messages`` native messages in all (each
entry holds its request's parsed messages and their view: measured 1.7 KB an input item, 3.7 KB a
Messages message, on the bench's 400-message conversations).

View messages are shared by every request whose prefix they match: the chain must not change a
message in place (no built-in filter does; a custom filter must copy, as the house rules say).
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.core.tokens import TokenCounter
from proxy.surfaces._view import View


@dataclass(frozen=True)
class Remembered:
    """A conversation's latest natives and the view built from them, counted with ``counter``."""

    natives: list[Any]
    view: View
    counter: TokenCounter


class ViewMemo:
    """The latest view of each recent conversation, bounded by the native messages held in all."""

    def __init__(self, max_messages: int) -> None:
        self.max_messages = max_messages
        self._entries: OrderedDict[bytes, Remembered] = OrderedDict()
        self._held = 0
        self.hits = 0
        """Native messages taken from the memo instead of converted, since the memo was made."""

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held(self) -> int:
        """Native messages the memo holds now."""
        return self._held

    def recall(self, key: bytes | None, counter: TokenCounter) -> Remembered | None:
        """The entry of the conversation ``key`` names, when its view was counted with ``counter``."""
        if key is None:
            return None
        entry = self._entries.get(key)
        if entry is None or entry.counter is not counter:
            return None
        self._entries.move_to_end(key)
        return entry

    def keep(self, key: bytes | None, entry: Remembered, *, reused: int = 0) -> None:
        """Remember ``entry`` as the conversation's latest (``reused``: how many of its natives kept
        their view from the memo), dropping the oldest entries beyond the bound."""
        self.hits += reused
        if key is None:
            return
        old = self._entries.pop(key, None)
        if old is not None:
            self._held -= len(old.natives)
        if len(entry.natives) > self.max_messages:
            return
        self._entries[key] = entry
        self._held += len(entry.natives)
        while self._held > self.max_messages:
            _, dropped = self._entries.popitem(last=False)
            self._held -= len(dropped.natives)


def conversation_key(surface: str, opening: Any, natives: list[Any]) -> bytes | None:
    """What names a conversation: its surface, its opening (system or instructions) and first native."""
    if not natives:
        return None
    try:
        return surface.encode() + b"\0" + orjson.dumps([opening, natives[0]])
    except (TypeError, orjson.JSONEncodeError):  # not JSON (a body made in code): not remembered
        return None


def matched(natives: list[Any], remembered: list[Any]) -> int:
    """How many leading ``natives`` equal the remembered ones."""
    try:
        same = list(map(operator.eq, natives, remembered))
    except RecursionError:  # nesting too deep to compare: convert it all
        return 0
    try:
        return same.index(False)
    except ValueError:
        return len(same)
