"""``sliding_window`` (AgentRoute's ``HistorySlidingWindow``, seed 004): the newest ``window_size`` turns."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from proxy.core.messages import Message, in_steps, leading_system_count, turn_spans
from proxy.filters._turns import without_oldest_turns
from proxy.filters.base import Filter, FilterContext


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
