"""Turn-based windows: ``sliding_window`` and ``truncate`` (AgentRoute's history policies, seed 004).

AgentRoute splits off the leading system messages (always kept) and groups the rest into turns: a
turn starts at a user message and runs to the next one, so tool calls and their results stay with
the turn that triggered them; messages before the first user message form the first turn.
``HistorySlidingWindow`` keeps the newest ``window_size`` turns; ``HistoryTruncate`` keeps the
newest turns that fit a token budget, always at least the newest one.

Both add ``step``: the number of dropped turns is rounded up to a multiple of ``step``, so the
first kept turn stays put for several consecutive requests (prompt caches can reuse the prefix).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator

from proxy.filters.base import Filter, FilterContext
from proxy.messages import (
    Message,
    how_many_to_drop,
    in_steps,
    keep_spans,
    leading_system_count,
    newest_user_index,
    turn_spans,
)


def without_oldest_turns(
    messages: list[Message], lead: int, turns: Sequence[tuple[int, int]], dropped: int
) -> list[Message]:
    """The leading system messages and every turn from ``turns[dropped]`` on.

    The newest user message stays in place if it falls in a dropped turn (only possible when a
    later message is annotated as the task), as SPEC invariant 2 asks.
    """
    if dropped == 0:
        return list(messages)
    cut = turns[dropped][0]
    newest_user = newest_user_index(messages)
    pinned = [(newest_user, newest_user + 1)] if newest_user is not None and lead <= newest_user < cut else []
    return keep_spans(messages, [(0, lead), *pinned, (cut, len(messages))])


class SlidingWindow(Filter):
    """Keep the leading system messages and the newest ``window_size`` turns.

    A history of ``window_size`` turns or fewer is returned unchanged. With ``step`` > 1 the window
    start moves in blocks of ``step`` turns: between ``window_size - step + 1`` and ``window_size``
    turns are kept, and consecutive requests keep an identical prefix until the next block is due.

    ```yaml
    assistant: [{type: sliding_window, window_size: 10, step: 5}]
    ```
    """

    type: Literal["sliding_window"]
    window_size: int = Field(default=20, ge=1)
    """How many of the newest turns to keep (a turn starts at a user message)."""
    step: int = Field(default=1, ge=1)
    """Drop turns in blocks of this many (at most window_size), so the prefix moves once per block."""

    cache_friendly = (
        "with step > 1: the window start moves once every step turns, so consecutive requests keep an "
        "identical prefix until then; with step 1 it moves on every new turn"
    )

    @model_validator(mode="after")
    def _step_fits_the_window(self) -> SlidingWindow:
        if self.step > self.window_size:
            raise ValueError(
                f"step ({self.step}) must be <= window_size ({self.window_size}): a block of dropped turns "
                "cannot be larger than the window"
            )
        return self

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        lead = leading_system_count(messages)
        turns = turn_spans(messages, lead)
        if len(turns) <= self.window_size:
            return list(messages)
        dropped = in_steps(len(turns) - self.window_size, self.step, len(turns) - 1)
        return without_oldest_turns(messages, lead, turns, dropped)


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
    max_tokens: int = Field(ge=1)
    """The most tokens the request may hold (reply priming included)."""
    step: int = Field(default=1, ge=1)
    """Drop turns in blocks of this many, so the prefix moves once per block."""

    cache_friendly = (
        "with step > 1: turns are dropped in blocks of step, so consecutive requests keep an identical "
        "prefix until the next block is due; with step 1 the prefix shifts whenever the budget overflows"
    )

    def budget(self) -> int | None:
        return self.max_tokens

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        counter = ctx.tokens.get(model=ctx.model)
        excess = counter.messages(messages) - self.max_tokens
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
