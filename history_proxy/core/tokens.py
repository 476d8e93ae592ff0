"""Token counting: OpenAI's chat recipe over tiktoken (offline) or a chars/4 approximation.

tiktoken never downloads here: :mod:`history_proxy.core.encodings` installs and loads its encoding files.

Counts are cached per distinct string, so a conversation that grows by two messages costs two
messages of tokenizing, not the whole history again. Within one request, a view
(``TokenCounters.for_request``) also remembers each message object it counted, so the counts
before, between and after the filters walk only the messages a filter changed. The first count
(``each_plain``) also tells which messages have the plain shape JSON clients send, so the pipeline
checks and counts a request's messages in one walk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from history_proxy.core.encodings import encoding_for_model, tiktoken_length
from history_proxy.core.messages import ANNOTATION_KEYS, KNOWN_ROLES, Message
from history_proxy.core.string_counts import DEFAULT_CACHE_BYTES, ENTRY_BYTES, StringCounts

Tokenizer = Literal["tiktoken", "approximate"]

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3


def approximate_length(text: str) -> int:
    """ceil(chars / 4)."""
    return math.ceil(len(text) / 4)


class TokenCounter:
    """Counts tokens of strings and messages with one encoding, caching per distinct string.

    The string cache lives as long as the counter (the proxy keeps one per encoding for every
    request). :meth:`for_request` gives a view that also remembers each message object it counted.
    """

    def __init__(
        self,
        length: Callable[[str], int],
        *,
        max_entries: int = 200_000,
        max_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self._strings = StringCounts(length, max_entries, max_bytes)
        # per-request views only: tokens by id(message), and the messages, so no id is reused meanwhile
        self._counted: dict[int, int] | None = None
        self._held: list[Message] = []

    @property
    def length(self) -> Callable[[str], int]:
        """The tokenizer itself (no cache): safe to call from another thread."""
        return self._strings.length

    def keep(self, text: str, count: int) -> None:
        """Remember ``count`` (counted by :attr:`length`) as the tokens of ``text``."""
        self._strings.keep(text, count)

    def remembers(self, text: str) -> bool:
        """Whether the count of ``text`` is in the cache."""
        return self._strings.known(text)

    @property
    def cache_bytes(self) -> int:
        """What the string cache holds now, in bytes (its strings' sizes plus a fixed cost per entry)."""
        return self._strings.held_bytes + len(self._strings.large) * ENTRY_BYTES

    @property
    def misses(self) -> int:
        """How many strings were tokenized (not found in the cache) so far."""
        return self._strings.misses

    def for_request(self) -> TokenCounter:
        """A view for one request: each message object is counted once, strings share this cache.

        Filters pass unchanged messages on as the same objects, so recounting the list after each
        filter costs only the messages a filter changed. The view holds every message it counted, so
        no id is reused while it lives; it must not outlive the request (a message changed in place
        later would keep its old count).
        """
        view = TokenCounter.__new__(TokenCounter)
        view._strings = self._strings
        view._counted = {}
        view._held = []
        return view

    @property
    def known(self) -> dict[str, int]:
        """The per-string counts so far, for callers that count many strings in a loop of their own.

        Read only: look a string up, and count one missing through :meth:`text`.
        """
        return self._strings.cache

    def text(self, text: str) -> int:
        """Tokens of one string."""
        cached = self._strings.cache.get(text)
        if cached is not None:
            return cached
        return self._strings.tokenize(text)

    def message(self, message: Message) -> int:
        """Tokens of one message by OpenAI's recipe (3 + every string field; +1 for a name)."""
        counted = self._counted
        if counted is None:
            return self._walk(message)
        count = counted.get(id(message))
        if count is None:
            count = counted[id(message)] = self._walk(message)
            self._held.append(message)
        return count

    def count_rewritten(self, rewrites: Iterable[tuple[Message, Message]], key: str) -> None:
        """Remember the tokens of each ``(original, copy)``'s copy: ``original`` with another string at ``key``.

        For a filter rewriting one string field of many messages (``last_n_observations``): a copy
        costs two string look-ups instead of a walk. Each copy must have its original's keys and
        values but for ``key`` (``{**original, key: text}``). Nothing is remembered outside a request
        view, for an original this view has not counted, or when either value is not a ``str`` or
        ``key`` is an annotation: such a copy is counted as usual when asked.
        """
        counted, strings = self._counted, self._strings
        if counted is None or key in ANNOTATION_KEYS:
            return
        cache = strings.cache
        for original, copy in rewrites:
            tokens = counted.get(id(original))
            old, new = original.get(key), copy.get(key)
            if tokens is None or old.__class__ is not str or new.__class__ is not str:
                continue
            tokens -= cache[old] if old in cache else strings.tokenize(old)
            tokens += cache[new] if new in cache else strings.tokenize(new)
            counted[id(copy)] = tokens
            self._held.append(copy)

    def messages(self, messages: Iterable[Message]) -> int:
        """Tokens of a whole request's messages, reply priming included."""
        listed = messages if isinstance(messages, (list, tuple)) else list(messages)
        if self._counted:
            try:  # every message counted already in this request: the usual case between filters
                return REPLY_PRIMING + sum(map(self._counted.__getitem__, map(id, listed)))
            except KeyError:
                pass
        return REPLY_PRIMING + sum(self.each(listed))

    def each(self, messages: Sequence[Message]) -> list[int]:
        """Tokens of every message, in order."""
        counted = self._counted
        walk = self._walk
        if counted is None:
            return [walk(message) for message in messages]
        if not counted:  # the first count of the request: every message is new, remember them in bulk
            walked = [walk(message) for message in messages]
            counted.update(zip(map(id, messages), walked, strict=True))
            self._held.extend(messages)
            return walked
        # look every message up at C speed, then walk only the ones this request has not counted yet
        counts: list[int | None] = list(map(counted.get, map(id, messages)))
        if None in counts:
            missing = [counts.index(None)]
            while True:  # C-level scans: usually only a few messages are new
                try:
                    missing.append(counts.index(None, missing[-1] + 1))
                except ValueError:
                    break
            new = [messages[i] for i in missing]
            walked = [walk(message) for message in new]
            counted.update(zip(map(id, new), walked, strict=True))
            self._held.extend(new)
            for i, count in zip(missing, walked, strict=True):
                counts[i] = count
        return counts  # type: ignore[return-value]

    def each_plain(self, messages: Sequence[Any]) -> list[int | None]:
        """:meth:`each` for the items of the plain shape, None for every other item, in one walk.

        Plain is what JSON clients send: a ``dict`` with a known ``role``, ``content`` a string,
        null or a list of part objects with string ``text``, string ``name`` and ``tool_call_id``,
        null or well-formed ``tool_calls`` (``{id, function: {name, arguments}}`` with string
        values), no annotation key, and exact ``str``/``list``/``dict`` types. Such a message is a
        valid request message, so a request is checked and counted in the same walk over its
        fields; the caller checks the others in full.
        """
        return self.remember(messages, [self._plain_walk(message) for message in messages])

    def remember(self, messages: Sequence[Any], counts: list[int | None]) -> list[int | None]:
        """Take ``counts`` (as :meth:`each_plain` gives them) as the counts of ``messages``; gives them back.

        For a caller that counted while building the messages (a surface adapter's view): every
        non-None count must be what :meth:`message` would count, and its message of the plain shape.
        """
        counted = self._counted
        if counted is not None:
            if None in counts:
                plain = [
                    (message, count)
                    for message, count in zip(messages, counts, strict=True)
                    if count is not None
                ]
                counted.update((id(message), count) for message, count in plain)
                self._held.extend(message for message, _ in plain)
            else:
                counted.update(zip(map(id, messages), counts, strict=True))  # type: ignore[arg-type]
                self._held.extend(messages)
        return counts

    def _plain_walk(self, message: Any) -> int | None:
        if message.__class__ is not dict:
            return None
        strings = self._strings
        cache = strings.cache
        total = TOKENS_PER_MESSAGE
        has_role = False
        for key, value in message.items():
            if value.__class__ is str:
                if key in _NEVER_STRINGS:
                    return None
                if key == "role":
                    if value not in KNOWN_ROLES:
                        return None
                    has_role = True
                try:
                    total += cache[value]
                except KeyError:
                    total += strings.tokenize(value)
                if key == "name":
                    total += TOKENS_PER_NAME
            elif key == "content" or key == "tool_calls":
                if value is None:
                    continue
                if value.__class__ is not list:
                    return None
                counted = self._plain_parts(value) if key == "content" else self._plain_calls(value)
                if counted is None:
                    return None
                total += counted
            elif key in _STRING_KEYS or key in ANNOTATION_KEYS or isinstance(value, str):
                return None  # a checked field of another type, an annotation, or a str subclass
        return total if has_role else None

    def _plain_parts(self, parts: list[Any]) -> int | None:
        """Plain content parts (objects whose text, if any, is a string) counted, else ``None``."""
        for part in parts:
            if part.__class__ is not dict or ("text" in part and part["text"].__class__ is not str):
                return None
        return self._parts(parts)

    def _plain_calls(self, calls: list[Any]) -> int | None:
        """Plain tool calls (``{id, function: {name, arguments}}``, string values) counted, else ``None``."""
        strings = self._strings
        cache = strings.cache
        total = 0
        for call in calls:
            function = call.get("function") if call.__class__ is dict else None
            if function.__class__ is not dict or call.get("id", "").__class__ is not str:
                return None
            name = function.get("name")
            if name.__class__ is not str:
                return None
            try:
                total += cache[name]
            except KeyError:
                total += strings.tokenize(name)
            if "arguments" in function:
                arguments = function["arguments"]
                if arguments.__class__ is not str:
                    return None
                try:
                    total += cache[arguments]
                except KeyError:
                    total += strings.tokenize(arguments)
        return total

    def _walk(self, message: Message) -> int:
        cache = self._strings.cache
        total = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if isinstance(value, str):
                if key in ANNOTATION_KEYS:
                    continue
                cached = cache.get(value)
                total += cached if cached is not None else self._strings.tokenize(value)
                if key == "name":
                    total += TOKENS_PER_NAME
            elif key == "content" and isinstance(value, list):
                total += self._parts(value)
            elif key == "tool_calls" and isinstance(value, list):
                total += self._calls(value)
        return total

    def _parts(self, parts: list[Any]) -> int:
        total = 0
        for part in parts:
            if isinstance(part, dict):
                text = part.get("text") or part.get("refusal")
                if isinstance(text, str):
                    total += self.text(text)
        return total

    def _calls(self, calls: list[Any]) -> int:
        cache = self._strings.cache
        total = 0
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                name, arguments = function.get("name"), function.get("arguments")
                if isinstance(name, str):
                    cached = cache.get(name)
                    total += cached if cached is not None else self._strings.tokenize(name)
                if isinstance(arguments, str):
                    cached = cache.get(arguments)
                    total += cached if cached is not None else self._strings.tokenize(arguments)
        return total


_STRING_KEYS = frozenset({"role", "name", "tool_call_id"})
_NEVER_STRINGS = ANNOTATION_KEYS | {
    "tool_calls"
}  # a plain message has no annotation, and no string tool_calls


class TokenCounters:
    """One cached :class:`TokenCounter` per (tokenizer, encoding), shared by every request."""

    def __init__(self, *, max_entries: int = 200_000, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._counters: dict[tuple[str, str], TokenCounter] = {}
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._shared: TokenCounters | None = None

    def get(
        self, *, model: str = "", encoding: str = "auto", tokenizer: Tokenizer = "tiktoken"
    ) -> TokenCounter:
        """The counter for ``encoding`` (``auto``: the model's), or the approximation."""
        name = encoding_for_model(model) if encoding == "auto" else encoding
        key = (tokenizer, name if tokenizer == "tiktoken" else "chars/4")
        counter = self._counters.get(key)
        if counter is None:
            if self._shared is not None:
                counter = self._shared.get(model=model, encoding=encoding, tokenizer=tokenizer).for_request()
            else:
                length = tiktoken_length(name) if tokenizer == "tiktoken" else approximate_length
                counter = TokenCounter(length, max_entries=self._max_entries, max_bytes=self._max_bytes)
            self._counters[key] = counter
        return counter

    def for_request(self) -> TokenCounters:
        """Counters for one request: their ``get`` gives :meth:`TokenCounter.for_request` views.

        Every filter of the request asking for the same encoding gets the same view, so a message
        the pipeline or an earlier filter counted is not walked again.
        """
        view = TokenCounters(max_entries=self._max_entries, max_bytes=self._max_bytes)
        view._shared = self
        return view

    @property
    def held_bytes(self) -> int:
        """What every counter's string cache holds now, in bytes."""
        return sum(counter.cache_bytes for counter in self._counters.values())

    @property
    def max_bytes(self) -> int:
        """The bound of each counter's string cache, in bytes (one counter per encoding in use)."""
        return self._max_bytes
