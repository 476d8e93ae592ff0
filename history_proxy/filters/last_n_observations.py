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
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_serializer, model_validator

from history_proxy.core.evidence import message_text
from history_proxy.core.messages import OBSERVATION, Message, image_count, tags_of
from history_proxy.filters._cost_trigger import NOTICE_TOKENS, Item, cost_boundary, window_room
from history_proxy.filters._facts import FactsMemo, new_facts, quoted_by_recent_steps, with_facts
from history_proxy.filters._line_digest import DigestMemo, digest_notice
from history_proxy.filters._memo import BoundedMemo
from history_proxy.filters._recall import HandleMemo, references, restore_sent_back, with_handle
from history_proxy.filters._reencode import is_record, reencode_outputs
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


class NoticeMemo(BoundedMemo[str, str]):
    """The elision notices of string contents already elided, so an old observation's lines are
    counted once rather than on every request that still carries it (bounded: :class:`BoundedMemo`)."""

    def __init__(self, *, max_entries: int = 4096, max_chars: int = 8_000_000) -> None:
        super().__init__(max_entries=max_entries, max_chars=max_chars)

    def notice(self, content: str) -> str:
        """:func:`elision_notice` of a ``str`` content."""
        return self.remembered(content, len(content), lambda: elision_notice(content))


@dataclass
class _Plan:
    """What one request's options decide before the boundary: per observation index."""

    facts: dict[int, list[str]] | None = None
    records: set[int] = field(default_factory=set)
    """Small structured records, never elided (``keep_records``)."""
    restored: set[int] = field(default_factory=set)
    """Outputs kept whole because a later step mentions their handle, or brought back from the store."""
    quoted: dict[int, frozenset[str]] = field(default_factory=dict)
    """Facts of each output a later step quotes (``recall``): their lines go in the notice."""
    handles: dict[int, str] = field(default_factory=dict)
    sent: list[Message] = field(default_factory=list)
    """The request's messages as the client sent them (before ``reencode``): digests quote their lines."""
    notices: dict[int, Message] = field(default_factory=dict)
    """Each elidable output's elided copy, made once per request (the trigger prices it, apply sends it)."""


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
    notice: Literal["lines", "facts", "digest"] = "lines"
    """``facts``: the notice also lists the output's distinctive tokens (paths, dotted names, ids, numbers)
    that no earlier message holds, so what the agent read stays in the request (docs/filters); ``digest``:
    it quotes the output's lines holding them, verbatim, up to ``digest_share`` of the output, and lists
    the rest; an output no longer than its notice is left as it is. ``lines``: SWE-agent's
    ``(L lines omitted)``."""
    digest_share: float = Field(default=0.15, gt=0.0, le=1.0)
    """With ``notice: digest``: the most the quoted lines may hold, as a share of the output's characters."""
    keep_quoted: int = Field(default=0, ge=0)
    """With ``trigger: cost``: an old output one of whose facts (a distinctive token no earlier message
    holds) one of the agent's ``keep_quoted`` newest steps quotes when the boundary passes it stays whole
    for good. 0: off."""
    keep_records: int = Field(default=0, ge=0)
    """An output that is a JSON object or array of at most this many bytes is never elided (a small
    record whose every field may matter, and whose notice would cost about as much). 0: off."""
    reencode: bool = False
    """Re-encode every output losslessly the first time it is sent (JSON without blanks between tokens,
    trailing blanks and runs of blank lines removed): the same text on every later request."""
    recall: bool = False
    """Each notice carries a handle; a later assistant message mentioning it brings the output back
    whole, one quoting a fact of it brings back the lines holding that fact (docs/filters)."""
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
    _digests: DigestMemo = PrivateAttr(default_factory=DigestMemo)
    _handles: HandleMemo = PrivateAttr(default_factory=HandleMemo)
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
        result = list(messages)
        rewrites: list[tuple[Message, Message]] = []
        if self.reencode:
            reencode_outputs(result, positions, rewrites, ctx)
        if self.recall:
            restored = restore_sent_back(result, positions, ctx, rewrites)
        plan = self._plan(result, positions)
        plan.sent = messages
        if self.recall:
            plan.restored |= restored
        spared: set[int] = set()
        if self.trigger == "cost":
            by_count = range(1, 1 + self._cost_boundary(result, positions, ctx, plan, spared))
        else:
            by_count = elided_by_count(len(positions), self.n, self.polling)
        current = list(result)
        for k, i in enumerate(positions):
            message = current[i]
            if message.get("tags") is None:  # untagged, the usual case: the count alone decides
                if k not in by_count or k in spared:
                    continue
            else:
                tags = tags_of(message)
                if not (tags & self.always_remove_output_for_tags) and (
                    k not in by_count or tags & self.always_keep_output_for_tags
                ):
                    continue
            copy = self._elided(current, i, plan, ctx)
            if copy is not message:
                result[i] = copy
                rewrites.append((message, copy))
        # the request's counter learns each copy's tokens from its original's: no walk over the copies
        ctx.tokens.get(model=ctx.model).count_rewritten(rewrites, "content")
        return result

    def _plan(self, messages: list[Message], positions: list[int]) -> _Plan:
        """The facts, records and references of this request's observations."""
        plan = _Plan()
        memo: FactsMemo = self.private("_facts")
        if self.notice != "lines" or self.recall:
            plan.facts = new_facts(messages, positions, memo)
        if self.keep_records:
            plan.records = {
                i
                for i in positions[1:]
                if _text(messages[i]) is not None and is_record(_text(messages[i]) or "", self.keep_records)
            }
        if self.recall and plan.facts is not None:
            handles: HandleMemo = self.private("_handles")
            for i in positions[1:]:
                text = _text(messages[i])
                if text is not None:
                    plan.handles[i] = handles.handle(text)
            by_handle = {h: i for i, h in plan.handles.items()}
            refs = references(messages, by_handle, plan.facts, memo)
            plan.restored = refs.handles
            plan.quoted = {i: frozenset(tokens) for i, tokens in refs.tokens.items()}
        return plan

    def _elided(self, messages: list[Message], i: int, plan: _Plan, ctx: FilterContext) -> Message:
        """The message at ``i`` as this request sends it once the boundary passed it: its notice, or
        itself (a record, a restored output, an output no longer than its notice)."""
        message = messages[i]
        if i in plan.records or i in plan.restored:
            return message
        copy = plan.notices.get(i)
        if copy is None:
            copy = self._notice_copy(message, i, plan)
            plan.notices[i] = copy
        if copy is not message and ctx.recall is not None and i in plan.handles:
            ctx.recall.put(ctx.tenant, plan.handles[i], _text(message) or "")
        return copy

    def _notice_copy(self, message: Message, i: int, plan: _Plan) -> Message:
        """``message`` elided, with what the options keep in its notice; ``message`` itself when that
        notice would not be shorter than its text."""
        copy = elided(message, self.private("_notices"))
        facts, original = plan.facts, _text(message)
        if facts is None:
            return copy
        if original is None:  # list content: the fact list, as before
            return _with_facts(message, copy, facts[i]) if self.notice != "lines" else copy
        quoted = plan.quoted.get(i, frozenset())
        notice = elision_notice(original)
        if self.notice == "facts" and not quoted:
            notice = with_facts(notice, facts[i])
        elif self.notice == "digest" or quoted:
            digests: DigestMemo = self.private("_digests")
            share = self.digest_share if self.notice == "digest" else 0.0
            quotes, left = digests.digest(_text(plan.sent[i]) or original, facts[i], share, quoted)
            notice = digest_notice(notice, quotes, left if self.notice != "lines" else [])
        if self.recall and i in plan.handles:
            notice = with_handle(notice, plan.handles[i])
        if len(notice) >= len(original):
            return message
        return {**message, "content": notice}

    def _cost_boundary(
        self,
        messages: list[Message],
        positions: list[int],
        ctx: FilterContext,
        plan: _Plan,
        spared: set[int],
    ) -> int:
        """How many observations after the first are elided, decided by price (``_cost_trigger``);
        an elided output saves its tokens less its notice's (approximately: 1 + chars / 4); a record or
        a restored output saves nothing."""
        counter = ctx.tokens.get(model=ctx.model)
        counts = [counter.message(m) for m in messages]
        items = [Item(i, self._saving(messages, i, counts[i], plan)) for i in positions[1:]]
        n = self.n

        def eager(_end: int, available: int) -> int:
            return available - n  # every observation but the first and the newest n

        quoted = (
            quoted_by_recent_steps(
                messages, positions[1:], self.private("_facts"), self.keep_quoted, plan.facts
            )
            if self.keep_quoted
            else None
        )
        whole = {k for k, i in enumerate(positions[1:]) if i in plan.records or i in plan.restored}
        keep = quoted
        if whole:  # records and restored outputs stay whole: passing them changes nothing

            def keep(k: int, end: int) -> bool:
                return k in whole or (quoted is not None and quoted(k, end))

        kept: set[int] = set()
        boundary = cost_boundary(messages, counts, items, eager, ctx.pricing, window_room(ctx), keep, kept)
        spared.update(k + 1 for k in kept)  # item k is observation k + 1 (the first is never elided)
        return boundary

    def _saving(self, messages: list[Message], i: int, tokens: int, plan: _Plan) -> int:
        if i in plan.records or i in plan.restored:
            return 0
        if plan.facts is None:
            return max(0, tokens - NOTICE_TOKENS)
        copy = plan.notices.get(i)
        if copy is None:
            copy = plan.notices[i] = self._notice_copy(messages[i], i, plan)
        if copy is messages[i]:
            return 0
        content = copy.get("content")
        notice = content if isinstance(content, str) else message_text(copy)
        return max(0, tokens - NOTICE_TOKENS - len(notice) // 4)


def _text(message: Message) -> str | None:
    content = message.get("content")
    return content if isinstance(content, str) else None


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
