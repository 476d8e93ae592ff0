"""``truncate`` (AgentRoute's ``HistoryTruncate``, seed 004): the newest turns that fit a token budget.

Always at least the newest turn.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from history_proxy.core.messages import (
    Message,
    how_many_to_drop,
    leading_system_count,
    newest_user_index,
    turn_spans,
)
from history_proxy.filters._limits import TokenLimit, resolve_limit
from history_proxy.filters._turns import without_oldest_turns
from history_proxy.filters.base import Filter, FilterContext


class Truncate(Filter):
    """Keep the leading system messages and the newest turns that fit ``max_tokens``.

    The system messages are counted first and always kept; the oldest turns go first; the newest
    turn always stays, even when it alone is over the budget. Tokens are counted with tiktoken in the
    request model's encoding (OpenAI's chat recipe). With ``step`` > 1 turns go in blocks of ``step``.

    ```yaml
    researcher: [{type: truncate, max_tokens: 100000, step: 4}]
    ```
    """

    type: Literal["truncate"]
    max_tokens: TokenLimit
    """The most tokens the request may hold (reply priming included), or a share of the request model's
    context window less the request's ``max_completion_tokens`` (``80%``)."""
    step: int = Field(default=1, ge=1)
    """Drop turns in blocks of this many, so the prefix moves once per block."""

    cache_friendly = (
        "with step > 1: turns are dropped in blocks of step, so consecutive requests keep an identical "
        "prefix until the next block is due; with step 1 the prefix shifts whenever the budget overflows"
    )

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        return f"not triggered: under budget ({tokens} of {self.budget(ctx)} tokens)"

    def budget(self, ctx: FilterContext | None = None) -> int | None:
        return resolve_limit(self.max_tokens, ctx)

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        counter = ctx.tokens.get(model=ctx.model)
        excess = counter.messages(messages) - (resolve_limit(self.max_tokens, ctx) or 1)
        if excess <= 0:
            return list(messages)
        lead = leading_system_count(messages)
        turns = turn_spans(messages, lead)
        newest_user = newest_user_index(messages)
        sizes = [  # the newest turn is never dropped, and the newest user message stays wherever it is
            sum(counter.message(messages[i]) for i in range(a, b) if i != newest_user) for a, b in turns[:-1]
        ]
        dropped = how_many_to_drop(sizes, excess, self.step)
        if dropped == 0:
            return list(messages)
        return without_oldest_turns(messages, lead, turns, dropped)
