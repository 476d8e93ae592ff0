"""``sliding_window`` (AgentRoute's ``HistorySlidingWindow``, seed 004): the newest ``window_size`` turns."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from history_proxy.core.messages import Message, in_steps, leading_system_count, turn_spans
from history_proxy.filters._cost_trigger import Item, cost_boundary, window_room
from history_proxy.filters._turns import without_oldest_turns
from history_proxy.filters.base import Filter, FilterContext


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
    trigger: Literal["count", "cost"] = "count"
    """``cost``: drop the turns beyond the window (all at once) only when the tokens dropped repay the
    prompt-cache rewrite it causes, under the upstream's pricing (docs/cost.md); ``count``: by ``step``."""

    cache_friendly = (
        "with step > 1: the window start moves once every step turns, so consecutive requests keep an "
        "identical prefix until then; with step 1 it moves on every new turn; trigger: cost moves it only "
        "when the dropped turns repay the cache rewrite"
    )

    @model_validator(mode="after")
    def _step_fits_the_window(self) -> SlidingWindow:
        if self.trigger == "cost" and self.step != 1:
            raise ValueError("step moves the window by count, trigger: cost by price; set one of them")
        if self.step > self.window_size:
            raise ValueError(
                f"step ({self.step}) must be <= window_size ({self.window_size}): a block of dropped turns "
                "cannot be larger than the window"
            )
        return self

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        paying = " or dropping would not yet pay (trigger: cost)" if self.trigger == "cost" else ""
        return f"not triggered: within window_size ({self.window_size} turns){paying}"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        lead = leading_system_count(messages)
        turns = turn_spans(messages, lead)
        if len(turns) <= self.window_size:
            return list(messages)
        if self.trigger == "cost":
            dropped = min(self._cost_boundary(messages, turns, ctx), len(turns) - 1)
            if dropped == 0:
                return list(messages)
        else:
            dropped = in_steps(len(turns) - self.window_size, self.step, len(turns) - 1)
        return without_oldest_turns(messages, lead, turns, dropped)

    def _cost_boundary(
        self, messages: list[Message], turns: list[tuple[int, int]], ctx: FilterContext
    ) -> int:
        """How many of the oldest turns go, decided by price (``_cost_trigger``)."""
        counter = ctx.tokens.get(model=ctx.model)
        counts = [counter.message(m) for m in messages]
        items = [Item(a, sum(counts[a:b])) for a, b in turns]
        size = self.window_size

        def eager(_end: int, available: int) -> int:
            return available - size  # every turn begun before end but the newest window_size

        return cost_boundary(messages, counts, items, eager, ctx.pricing, window_room(ctx))
