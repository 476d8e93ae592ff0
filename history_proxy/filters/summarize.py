"""``summarize``: old turns folded into one model-written summary (AgentRoute's HistorySummarize, seed 004).

AgentRoute keeps the newest ``keep_recent`` turns verbatim and replaces everything older with an
LLM summary injected as a system message, calling the model again on every compaction. Here the
summarized span only advances in blocks of ``step`` turns, and the summary comes from
``ctx.summarizer`` (the proxy caches it under a hash of exactly what it summarizes), so
consecutive requests of a growing conversation send a byte-identical prefix until the next block
is due and pay for one model call per block, not per request.

If the summary cannot be had (no summarizer, an error, ``timeout_s`` passed) the request still goes
out: the span's turns are dropped as ``truncate`` drops turns, the note ``summarize:fallback`` is
added to the context and a warning is logged (never content).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from history_proxy.core.messages import Message, leading_system_count, newest_user_index, turn_spans
from history_proxy.filters._turns import without_oldest_turns
from history_proxy.filters.base import Filter, FilterContext

log = logging.getLogger("history_proxy.summarize")

SUMMARY_HEADING = "Conversation summary so far:"
FALLBACK_NOTE = "summarize:fallback"
DEFAULT_SUMMARY_PROMPT = (
    "Summarize the conversation above in 3-5 concise bullet points. Keep names, numbers, identifiers, "
    "file paths and decisions exactly as they were given, and note what is still open. Do not speculate "
    "or add anything that was not said. Answer with the bullet points only."
)


def summarized_turns(
    turns: Sequence[tuple[int, int]], keep_recent: int, step: int, newest_user: int | None
) -> int:
    """How many of the oldest turns to summarize: whole ``step`` blocks older than the newest ``keep_recent``.

    The turn holding the newest user message and everything after it is never summarized.
    """
    candidates = len(turns) - keep_recent
    if newest_user is not None:
        holding = next((k for k, (a, b) in enumerate(turns) if a <= newest_user < b), len(turns))
        candidates = min(candidates, holding)
    return max(0, candidates) // step * step


def summary_message(summary: str) -> Message:
    """The system message that stands in for the summarized turns."""
    return {"role": "system", "content": f"{SUMMARY_HEADING}\n{summary}"}


class Summarize(Filter):
    """Replace the turns older than the newest ``keep_recent`` with one model-written summary message.

    The summary is a system message ``Conversation summary so far:`` plus the summary, placed right
    after the leading system messages. The summarized span grows in blocks of ``step`` turns; older
    turns not yet in a full block stay verbatim. Falls back to dropping the span's turns (as
    ``truncate`` would) when the summary call fails or takes longer than ``timeout_s``.

    ```yaml
    planner: [{type: summarize, keep_recent: 4, step: 4, model: gpt-4o-mini}]
    ```
    """

    type: Literal["summarize"]
    keep_recent: int = Field(default=4, ge=0)
    """Newest turns kept verbatim (0: all may be summarized except the turn of the newest user message)."""
    model: str | None = Field(default=None, min_length=1)
    """The model that writes summaries (none: the request's own model)."""
    upstream: str | None = Field(default=None, min_length=1)
    """The named upstream the summary call goes to (none: the request's own upstream)."""
    summary_prompt: str = Field(default=DEFAULT_SUMMARY_PROMPT, min_length=1)
    """The instruction sent after the old turns; it is part of the cache key."""
    step: int = Field(default=4, ge=1)
    """The summarized span advances in blocks of this many turns: one model call per block."""
    timeout_s: float = Field(default=20.0, gt=0)
    """The longest a request waits for its summary before falling back to dropping the old turns."""

    cache_friendly = (
        "yes: the summarized span advances once every step turns and its summary is cached by content, "
        "so consecutive requests keep a byte-identical prefix (summary included) until the next block"
    )

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        return f"not triggered: no turn older than the newest {self.keep_recent} (summarized {self.step} at a time)"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        """Without the event loop no summary can be written: the fallback (old turns dropped)."""
        lead, turns, span = self._plan(messages)
        if span == 0:
            return list(messages)
        return self._fallback(messages, ctx, lead, turns, span, "no summarizer in a synchronous run")

    async def apply_async(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        """Summarize the span through ``ctx.summarizer``; fall back to dropping it when that fails."""
        lead, turns, span = self._plan(messages)
        if span == 0:
            return list(messages)
        if ctx.summarizer is None:
            return self._fallback(messages, ctx, lead, turns, span, "no summarizer configured")
        old = messages[lead : turns[span - 1][1]]
        try:
            async with asyncio.timeout(self.timeout_s):
                summary = await ctx.summarizer.summarize(
                    old,
                    model=self.model or ctx.model,
                    upstream=self.upstream or ctx.upstream,
                    prompt=self.summary_prompt,
                    timeout_s=self.timeout_s,
                )
        except TimeoutError:
            return self._fallback(messages, ctx, lead, turns, span, f"no summary within {self.timeout_s:g}s")
        except Exception as exc:
            return self._fallback(messages, ctx, lead, turns, span, f"{type(exc).__name__}: {exc}")
        if not isinstance(summary, str) or not summary.strip():
            return self._fallback(messages, ctx, lead, turns, span, "the summary came back empty")
        rest = turns[span][0] if span < len(turns) else len(messages)
        return [*messages[:lead], summary_message(summary.strip()), *messages[rest:]]

    def _plan(self, messages: list[Message]) -> tuple[int, list[tuple[int, int]], int]:
        lead = leading_system_count(messages)
        turns = turn_spans(messages, lead)
        return lead, turns, summarized_turns(turns, self.keep_recent, self.step, newest_user_index(messages))

    def _fallback(
        self,
        messages: list[Message],
        ctx: FilterContext,
        lead: int,
        turns: list[tuple[int, int]],
        span: int,
        reason: str,
    ) -> list[Message]:
        dropped = min(span, len(turns) - 1)  # like truncate: the newest turn always stays
        log.warning(
            "summarize (role %s): %s; dropped the %d oldest turn(s) instead of summarizing them",
            ctx.role,
            reason,
            dropped,
        )
        ctx.notes.append(FALLBACK_NOTE)
        return without_oldest_turns(messages, lead, turns, dropped)
