"""``token_limiter``: drop the oldest groups until the request fits a token limit (AgentKit, seed 001).

AgentKit's ``TokenLimiter`` groups messages into segments (a tool call with all its results, or a
message alone) and keeps the newest segments that fit the limit, so tool pairs never break. Here
the segments are the shared groups of ``history_proxy.core.messages`` and the count is the full request as
OpenAI counts it (docs/http.md, tokens). Two things of the source are deliberately not copied: it keeps
nothing when the newest segment alone is over the limit (an empty history), and it drops the
system prompt like any other message. Here the leading system messages (``keep_system``), the
newest user message and the newest group are pinned: they stay even when they alone are over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from history_proxy.core.messages import (
    Message,
    group_spans,
    how_many_to_drop,
    is_opaque,
    keep_spans,
    leading_system_count,
    newest_user_index,
)
from history_proxy.core.tokens import TokenCounter
from history_proxy.filters._limits import TokenLimit, resolve_limit
from history_proxy.filters.base import Filter, FilterContext


class TokenLimiter(Filter):
    """Drop whole groups, oldest first, until the request fits ``limit`` tokens.

    A group is an assistant message with tool calls plus all its results, or any other message
    alone. The leading system messages (when ``keep_system``), the newest user message and the newest
    group always stay, even when they alone are over the limit. With ``step`` > 1 the groups go in
    blocks of ``step``, so consecutive requests of a growing conversation keep the same prefix.

    ```yaml
    worker: [{type: token_limiter, limit: 16000, encoding: cl100k_base, step: 8}]
    ```
    """

    type: Literal["token_limiter"]
    limit: TokenLimit
    """The most tokens the request may hold (OpenAI's chat recipe, reply priming included), or a share of
    the request model's context window less the request's ``max_completion_tokens`` (``80%``)."""
    encoding: Literal["auto", "o200k_base", "cl100k_base"] = "auto"
    """tiktoken encoding; ``auto`` picks the request model's (o200k_base for unknown models)."""
    tokenizer: Literal["tiktoken", "approximate"] = "tiktoken"
    """``approximate`` counts ceil(characters / 4) instead of running tiktoken."""
    keep_system: bool = True
    """Pin the leading system/developer messages; false makes them droppable like any other group."""
    step: int = Field(default=1, ge=1)
    """Drop groups in blocks of this many, so the kept prefix moves only once per block."""

    cache_friendly = (
        "with step > 1: the cut moves in blocks of step groups, so consecutive requests keep an identical "
        "prefix until the next block is due; with step 1 the prefix shifts on almost every request"
    )

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        return f"not triggered: under budget ({tokens} of {self.budget(ctx)} tokens)"

    def budget(self, ctx: FilterContext | None = None) -> int | None:
        return resolve_limit(self.limit, ctx)

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        counter = ctx.tokens.get(model=ctx.model, encoding=self.encoding, tokenizer=self.tokenizer)
        excess = counter.messages(messages) - (resolve_limit(self.limit, ctx) or 1)
        if excess <= 0:
            return list(messages)
        instructions = leading_system_count(messages)
        lead = instructions if self.keep_system else 0
        spans = group_spans(messages, lead)
        newest_user = newest_user_index(messages)
        droppable = [  # tool declarations among the instructions stay even without keep_system
            span
            for span in spans[:-1]
            if (newest_user is None or not span[0] <= newest_user < span[1])
            and not (span[0] < instructions and is_opaque(messages[span[0]]))
        ]
        count = how_many_to_drop([_tokens(counter, messages[a:b]) for a, b in droppable], excess, self.step)
        if count == 0:
            return list(messages)
        dropped = set(droppable[:count])
        return keep_spans(messages, [(0, lead), *(span for span in spans if span not in dropped)])


def _tokens(counter: TokenCounter, messages: Sequence[Message]) -> int:
    return sum(counter.message(m) for m in messages)
