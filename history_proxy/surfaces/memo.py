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

A conversation is known by its surface and a digest of its opening (the system prompt or instructions
and the first message), and its size counts that opening, which its view holds; two conversations
that open alike share one entry and each finds only the prefix they share, and only within one
tenant (:meth:`ViewMemo.for_tenant`). Entries are dropped oldest first beyond ``max_messages`` native
messages or ``max_bytes`` estimated bytes in all (each entry holds its request's parsed messages and
their view: measured 1.7 KB an input item, 3.7 KB a Messages message, on the bench's 400-message
conversations; estimated here from their JSON).

View messages are shared by every request whose prefix they match: the chain must not change a
message in place (no built-in filter does; a custom filter must copy, as the house rules say).
"""

from __future__ import annotations

import hashlib
import operator
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

from history_proxy.config.models import LimitsConfig
from history_proxy.core.tokens import TokenCounter
from history_proxy.surfaces._view import View


@dataclass(frozen=True)
class Remembered:
    """A conversation's latest natives and the view built from them, counted with ``counter``."""

    natives: list[Any]
    view: View
    counter: TokenCounter


NATIVE_BYTES = 1024
"""The estimated cost of one remembered native message besides its JSON: its dicts and its view."""
JSON_FACTOR = 2
"""Parsed messages and their views hold about this many bytes per byte of their JSON."""


@dataclass
class _Store:
    """What every tenant's :class:`ViewMemo` shares: the entries and the bounds."""

    max_messages: int
    max_bytes: int
    idle_s: float
    entries: OrderedDict[bytes, tuple[Remembered, list[int]]] = field(default_factory=OrderedDict)
    """Each entry and the estimated bytes held by its natives up to each one (cumulative), least
    recently used first."""
    used: dict[bytes, float] = field(default_factory=dict)
    """When each entry was last kept or recalled (``time.monotonic``)."""
    held: int = 0
    held_bytes: int = 0
    released_bytes: int = 0
    hits: int = 0


class ViewMemo:
    """The latest view of each recent conversation, bounded in native messages and in bytes, per tenant.

    :meth:`for_tenant` gives the memo as one tenant sees it: the same store and bounds, and keys of
    that tenant's own, so no tenant ever finds (or times, or counts) another tenant's conversations.
    """

    def __init__(self, max_messages: int, max_bytes: int = 64 * 1024 * 1024, idle_s: float = 900.0) -> None:
        """A memo of at most ``max_messages`` natives and ``max_bytes`` estimated bytes (either 0: off),
        forgetting conversations idle for ``idle_s``."""
        self._store = _Store(max_messages if max_bytes else 0, max_bytes, idle_s)
        self._tenant = b""

    @classmethod
    def of(cls, limits: LimitsConfig) -> ViewMemo:
        """The memo ``limits.surface_memo_messages`` and ``limits.surface_memo_bytes`` bound."""
        return cls(limits.surface_memo_messages, limits.surface_memo_bytes, limits.surface_memo_idle_s)

    def for_tenant(self, tenant: str | None) -> ViewMemo:
        """This memo as ``tenant`` sees it (its entries only)."""
        view = ViewMemo.__new__(ViewMemo)
        view._store = self._store
        view._tenant = b"" if tenant is None else f"{len(tenant)}:{tenant}\0".encode()
        return view

    def __len__(self) -> int:
        return len(self._store.entries)

    @property
    def max_messages(self) -> int:
        """The bound in native messages (0: the memo is off)."""
        return self._store.max_messages

    @property
    def max_bytes(self) -> int:
        """The bound in estimated bytes."""
        return self._store.max_bytes

    @property
    def held(self) -> int:
        """Native messages the memo holds now."""
        return self._store.held

    @property
    def held_bytes(self) -> int:
        """Estimated bytes the memo holds now (:data:`JSON_FACTOR` x JSON + :data:`NATIVE_BYTES` each),
        conversations idle for ``idle_s`` forgotten first."""
        self._expire(time.monotonic())
        return self._store.held_bytes

    @property
    def released_bytes(self) -> int:
        """Estimated bytes of the entries dropped or replaced so far (their memory is free again)."""
        return self._store.released_bytes

    @property
    def hits(self) -> int:
        """Native messages taken from the memo instead of converted, since the memo was made."""
        return self._store.hits

    def recall(self, conversation: Conversation | None, counter: TokenCounter) -> Remembered | None:
        """The entry of ``conversation``, when its view was counted with ``counter``."""
        if conversation is None:
            return None
        key = self._tenant + conversation.key
        now = time.monotonic()
        self._expire(now)
        found = self._store.entries.get(key)
        if found is None or found[0].counter is not counter:
            return None
        self._store.entries.move_to_end(key)
        self._store.used[key] = now
        return found[0]

    def keep(self, conversation: Conversation | None, entry: Remembered, *, reused: int = 0) -> None:
        """Remember ``entry`` as the conversation's latest (``reused``: how many of its natives kept
        their view from the memo), dropping the oldest entries beyond the bounds.

        An entry's size counts all it holds: its key, its opening (the system prompt or instructions,
        in its view) and its natives with their views."""
        store = self._store
        store.hits += reused
        if conversation is None:
            return
        key = self._tenant + conversation.key
        old = store.entries.pop(key, None)
        store.used.pop(key, None)
        sizes: list[int] = []
        if old is not None:
            store.held -= len(old[0].natives)
            store.held_bytes -= old[1][-1] if old[1] else 0
            store.released_bytes += old[1][-1] if old[1] else 0
            sizes = old[1][:reused]
        sizes = _sized(entry.natives, sizes, len(key) + JSON_FACTOR * conversation.opening_bytes)
        size = sizes[-1] if sizes else 0
        if len(entry.natives) > store.max_messages or size > store.max_bytes:
            return
        store.entries[key] = (entry, sizes)
        store.used[key] = time.monotonic()
        store.held += len(entry.natives)
        store.held_bytes += size
        while store.held > store.max_messages or store.held_bytes > store.max_bytes:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        store = self._store
        key, (dropped, dropped_sizes) = store.entries.popitem(last=False)
        store.used.pop(key, None)
        store.held -= len(dropped.natives)
        store.held_bytes -= dropped_sizes[-1] if dropped_sizes else 0
        store.released_bytes += dropped_sizes[-1] if dropped_sizes else 0

    def _expire(self, now: float) -> None:
        """Forget the conversations last used more than ``idle_s`` ago (the oldest come first)."""
        store = self._store
        while store.entries and now - store.used.get(next(iter(store.entries)), now) > store.idle_s:
            self._drop_oldest()


def _sized(natives: list[Any], known: list[int], opening: int) -> list[int]:
    """The cumulative estimated bytes of ``natives`` after ``opening`` bytes, the first ``len(known)``
    already in ``known``."""
    total = known[-1] if known else opening
    sizes = list(known)
    for native in natives[len(known) :]:
        try:
            total += NATIVE_BYTES + JSON_FACTOR * len(orjson.dumps(native))
        except (TypeError, orjson.JSONEncodeError):  # not JSON (a body made in code): a rough figure
            total += NATIVE_BYTES * 4
        sizes.append(total)
    return sizes


@dataclass(frozen=True, slots=True)
class Conversation:
    """What names a conversation in the memo, and what its opening costs to hold."""

    key: bytes
    """The surface and a digest of the opening (system or instructions) and first native: a fixed 32
    bytes however long the system prompt (a 4 MB one used to be held twice, key and view)."""
    opening_bytes: int
    """The JSON length of the opening and first native, which the entry's view holds."""


def conversation_key(surface: str, opening: Any, natives: list[Any]) -> Conversation | None:
    """What names a conversation: its surface, its opening (system or instructions) and first native.

    Two openings with one digest would share an entry, and still each find only the natives equal to
    its own (``matched`` compares them), so a collision costs a conversion, never a wrong view.
    """
    if not natives:
        return None
    try:
        opening_json = orjson.dumps([opening, natives[0]])
    except (TypeError, orjson.JSONEncodeError):  # not JSON (a body made in code): not remembered
        return None
    digest = hashlib.blake2b(opening_json, digest_size=32).digest()
    return Conversation(surface.encode() + b"\0" + digest, len(opening_json))


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
