"""``last_n_observations``: SWE-agent's ``LastNObservations`` (seed 003).

Of the N observations, positions ``[1, max(0, floor(N / polling) * polling - n))`` have their content
replaced by ``Old environment output: (L lines omitted)``; the first observation (SWE-agent's instance
template) is never elided by count; a keep tag saves an observation, a remove tag elides it even when
recent, and remove beats keep.

Observations are the messages annotated ``message_type: observation``; when none is annotated, the
first user message followed by every tool message.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_serializer, model_validator

from history_proxy.core.messages import OBSERVATION, Message, image_count, tags_of
from history_proxy.filters._cost_trigger import NOTICE_TOKENS, Item, cost_boundary, window_room
from history_proxy.filters._facts import FactsMemo, new_facts, quoted_by_recent_steps, with_facts
from history_proxy.filters.base import Filter, FilterContext

TagSet = frozenset[str]


def observation_positions(messages: Sequence[Message]) -> list[int]:
    """Indices of the observations, oldest first.

    The messages annotated ``message_type: observation``; when none is, the first user message
    (SWE-agent's instance template, an observation there) and every tool message.
    """
    annotated: list[int] = []
    tools: list[int] = []
    first_user: int | None = None
    for i, message in enumerate(messages):
        if message.get("message_type") == OBSERVATION:
            annotated.append(i)
        role = message.get("role")
        if role == "tool":
            tools.append(i)
        elif role == "user" and first_user is None:
            first_user = i
    if annotated:
        return annotated
    if first_user is not None:
        bisect.insort(tools, first_user)
    return tools


def elided_by_count(observation_count: int, n: int, polling: int) -> range:
    """Observation positions elided by count: ``[1, max(0, floor(N / polling) * polling - n))``."""
    return range(1, max(0, (observation_count // polling) * polling - n))


def line_count(text: str) -> int:
    """``len(text.splitlines())``, without building the lines.

    ASCII text whose only line boundary is ``\\n`` (the usual tool output) has one line per
    ``\\n``, plus one for a last line that does not end with it; any other text is split.
    """
    if (
        text.isascii()
        and "\r" not in text
        and "\x0b" not in text
        and "\x0c" not in text
        and "\x1c" not in text
        and "\x1d" not in text
        and "\x1e" not in text
    ):
        return text.count("\n") + (0 if text == "" or text.endswith("\n") else 1)
    return len(text.splitlines())


def elision_notice(content: Any) -> str:
    """``Old environment output: (L lines omitted)``, plus `` (I images omitted)`` when there are images.

    L counts ``str.splitlines()`` of the string content, or of every text part summed.
    """
    if isinstance(content, str):
        return f"Old environment output: ({line_count(content)} lines omitted)"
    lines = 0
    if isinstance(content, list):
        lines = sum(
            line_count(part["text"])
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    notice = f"Old environment output: ({lines} lines omitted)"
    images = image_count(content)
    if images > 0:
        notice += f" ({images} images omitted)"
    return notice


def elided(message: Message, notices: NoticeMemo | None = None) -> Message:
    """A copy of ``message`` whose content is the elision notice (one text part for list content).

    With ``notices``, the notice of a ``str`` content comes from (and goes into) that memo.
    """
    content = message.get("content")
    if notices is not None and content.__class__ is str:
        return {**message, "content": notices.notice(content)}
    notice = elision_notice(content)
    if isinstance(content, list):
        return {**message, "content": [{"type": "text", "text": notice}]}
    return {**message, "content": notice}


class NoticeMemo:
    """The elision notices of string contents already elided, so an old observation's lines are
    counted once rather than on every request that still carries it.

    Bounded: at most ``max_entries`` contents and ``max_chars`` characters of them are held; the
    oldest go first. Any two memos are equal: what a filter remembered never makes two
    configurations differ.
    """

    def __init__(self, *, max_entries: int = 4096, max_chars: int = 8_000_000) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._notices: dict[str, str] = {}
        self._chars = 0

    def notice(self, content: str) -> str:
        """:func:`elision_notice` of a ``str`` content."""
        notice = self._notices.get(content)
        if notice is None:
            notice = elision_notice(content)
            if len(content) <= self.max_chars:
                notices = self._notices
                while notices and (
                    len(notices) >= self.max_entries or self._chars + len(content) > self.max_chars
                ):
                    oldest = next(iter(notices))  # dicts keep insertion order
                    del notices[oldest]
                    self._chars -= len(oldest)
                notices[content] = notice
                self._chars += len(content)
        return notice

    def __len__(self) -> int:
        return len(self._notices)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoticeMemo)

    __hash__ = None  # type: ignore[assignment]


class LastNObservations(Filter):
    """Elide all but the newest ``n`` observations, or the tagged ones (SWE-agent's rule).

    ```yaml
    worker: [{type: last_n_observations, n: 5, polling: 5}]
    ```
    """

    type: Literal["last_n_observations"]
    n: int = Field(ge=1)
    """How many of the newest observations keep their content."""
    polling: int = Field(default=1, ge=1)
    """Move the elision boundary only every ``polling`` observations (keeps between n and n+polling)."""
    trigger: Literal["count", "cost"] = "count"
    """``cost``: move the boundary (to the newest ``n``) only when the tokens it elides repay the cache
    rewrite it causes, under the upstream's pricing (docs/cost.md); ``count``: every ``polling``."""
    notice: Literal["lines", "facts"] = "lines"
    """``facts``: the notice also lists the output's distinctive tokens (paths, dotted names, ids, numbers)
    that no earlier message holds, so what the agent read stays in the request (docs/filters); an output
    no longer than that notice is left as it is. ``lines``: SWE-agent's ``(L lines omitted)``."""
    keep_quoted: int = Field(default=0, ge=0)
    """With ``trigger: cost``: an old output one of whose facts (a distinctive token no earlier message
    holds) one of the agent's ``keep_quoted`` newest steps quotes when the boundary passes it stays whole
    for good. 0: off."""
    always_keep_output_for_tags: TagSet = Field(default=frozenset({"keep_output"}))
    """An observation tagged with one of these keeps its content even when old."""
    always_remove_output_for_tags: TagSet = Field(default=frozenset({"remove_output"}))
    """An observation tagged with one of these is elided even when recent (beats the keep tags)."""
    cache_friendly = (
        "only with polling > 1: the boundary moves once every `polling` observations, so between those "
        "moves the elided prefix stays identical (polling 1 changes an old message on every new observation)"
    )

    _notices: NoticeMemo = PrivateAttr(default_factory=NoticeMemo)
    _facts: FactsMemo = PrivateAttr(default_factory=FactsMemo)
    # old observations stay the same strings from request to request: their notices are remembered

    @model_validator(mode="after")
    def _one_trigger(self) -> LastNObservations:
        if self.trigger == "cost" and self.polling != 1:
            raise ValueError("polling moves the boundary by count, trigger: cost by price; set one of them")
        if self.keep_quoted and self.trigger != "cost":
            raise ValueError("keep_quoted decides when the boundary moves: it needs trigger: cost")
        return self

    @field_serializer("always_keep_output_for_tags", "always_remove_output_for_tags")
    def _sorted(self, tags: TagSet) -> list[str]:
        return sorted(tags)

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        paying = " or eliding would not yet pay for the prompt-cache rewrite (trigger: cost)"
        return (
            f"not triggered: no observation older than the newest {self.n} to elide"
            f"{paying if self.trigger == 'cost' else ''}"
        )

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        positions = observation_positions(messages)
        facts = new_facts(messages, positions, self.private("_facts")) if self.notice == "facts" else None
        spared: set[int] = set()
        if self.trigger == "cost":
            by_count = range(1, 1 + self._cost_boundary(messages, positions, ctx, facts, spared))
        else:
            by_count = elided_by_count(len(positions), self.n, self.polling)
        result = list(messages)
        notices: NoticeMemo = self.private("_notices")
        rewrites: list[tuple[Message, Message]] = []
        for k, i in enumerate(positions):
            message = messages[i]
            if message.get("tags") is None:  # untagged, the usual case: the count alone decides
                if k not in by_count or k in spared:
                    continue
            else:
                tags = tags_of(message)
                if not (tags & self.always_remove_output_for_tags) and (
                    k not in by_count or tags & self.always_keep_output_for_tags
                ):
                    continue
            copy = elided(message, notices)
            if facts is not None:
                copy = _with_facts(message, copy, facts[i])
                if copy is message:
                    continue
            result[i] = copy
            rewrites.append((message, copy))
        # the request's counter learns each copy's tokens from its original's: no walk over the copies
        ctx.tokens.get(model=ctx.model).count_rewritten(rewrites, "content")
        return result

    def _cost_boundary(
        self,
        messages: list[Message],
        positions: list[int],
        ctx: FilterContext,
        facts: dict[int, list[str]] | None,
        spared: set[int],
    ) -> int:
        """How many observations after the first are elided, decided by price (``_cost_trigger``);
        a notice with facts saves the output's tokens less the facts' (approximately: 1 + chars / 4)."""
        counter = ctx.tokens.get(model=ctx.model)
        counts = [counter.message(m) for m in messages]
        listed = {i: sum(1 + len(t) // 4 for t in facts[i]) for i in positions[1:]} if facts else {}
        items = [Item(i, max(0, counts[i] - NOTICE_TOKENS - listed.get(i, 0))) for i in positions[1:]]
        n = self.n

        def eager(_end: int, available: int) -> int:
            return available - n  # every observation but the first and the newest n

        keep = (
            quoted_by_recent_steps(messages, positions[1:], self.private("_facts"), self.keep_quoted, facts)
            if self.keep_quoted
            else None
        )
        kept: set[int] = set()
        boundary = cost_boundary(messages, counts, items, eager, ctx.pricing, window_room(ctx), keep, kept)
        spared.update(k + 1 for k in kept)  # item k is observation k + 1 (the first is never elided)
        return boundary


def _with_facts(message: Message, copy: Message, facts: list[str]) -> Message:
    """``copy`` (``message`` elided) with ``facts`` in its notice; ``message`` itself when that notice
    would not be shorter than the text it replaces."""
    content = copy["content"]
    notice = content if isinstance(content, str) else content[0]["text"]
    full = with_facts(notice, facts)
    original = message.get("content")
    if isinstance(original, str) and len(full) >= len(original):
        return message
    if full is notice:
        return copy
    return {**copy, "content": full if isinstance(content, str) else [{"type": "text", "text": full}]}
