"""``tool_result_truncation`` (Plexus's ``TokenAwareConversationFilter``, seed 002): old tool results cut short.

Plexus keeps the newest two tool results whole and cuts every older one longer than 500 characters
to its first 500, followed by a notice that gives the original size and asks the model to note what
it learned. Never removes or reorders a message. ``keep_recent`` counts ``tool`` messages (not
groups), as Plexus does. ``worker_compaction`` builds on the same limits.
"""

from __future__ import annotations

import bisect
from typing import Any, Literal

from pydantic import Field, field_validator

from history_proxy.core.messages import Message
from history_proxy.filters._cost_trigger import NOTICE_TOKENS, Item, cost_boundary, window_room
from history_proxy.filters.base import Filter, FilterContext

DEFAULT_NOTICE = (
    "\n\n[TOOL RESULT TRUNCATED at {max_chars} chars - original was {original_chars} chars, "
    "{original_tokens} tokens. Summarize key learnings since you won't see these details again.]"
)
"""Plexus's truncation notice, word for word, with its numbers as placeholders."""


NOTICE_PLACEHOLDERS = ("max_chars", "original_chars", "original_tokens")


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)


def text_length(content: Any) -> int:
    """Characters of text in a content: the string's length, or the sum over its text parts."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(part["text"]) for part in content if _is_text_part(part))
    return 0


def text_pieces(content: Any) -> list[str]:
    """The text strings of a content, in order."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [part["text"] for part in content if _is_text_part(part)]
    return []


def cut_text(content: Any, max_chars: int, notice: str) -> Any:
    """The first ``max_chars`` characters of a content's text followed by ``notice``.

    A string becomes a shorter string. In a list, text parts within the first ``max_chars``
    characters stay as they are, the part where the cut falls is shortened and gets the notice,
    and later text parts go (they would be empty); image and other parts stay where they were.
    """
    if isinstance(content, str):
        return content[:max_chars] + notice
    if not isinstance(content, list):
        return content
    remaining = max_chars
    noticed = False
    cut: list[Any] = []
    for part in content:
        if not _is_text_part(part):
            cut.append(part)
        elif len(part["text"]) <= remaining:
            remaining -= len(part["text"])
            cut.append(part)
        elif not noticed:
            cut.append({**part, "text": part["text"][:remaining] + notice})
            remaining = 0
            noticed = True
    return cut


class ToolResultLimits(Filter):
    """Fields and truncation shared by ``tool_result_truncation`` and ``worker_compaction``."""

    keep_recent: int = Field(default=2, ge=0)
    """How many of the newest tool messages stay whole (Plexus: 2)."""
    max_chars: int = Field(default=500, ge=1)
    """Older tool results longer than this are cut to this many characters (Plexus: 500)."""
    notice: str = DEFAULT_NOTICE
    """Appended to a cut result; placeholders {max_chars}, {original_chars}, {original_tokens}."""

    @field_validator("notice")
    @classmethod
    def _notice_placeholders_are_known(cls, value: str) -> str:
        sample = dict.fromkeys(NOTICE_PLACEHOLDERS, 0)
        try:
            value.format(**sample)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as exc:
            allowed = ", ".join(f"{{{name}}}" for name in NOTICE_PLACEHOLDERS)
            raise ValueError(
                f"not a usable notice template ({type(exc).__name__}: {exc}); placeholders are {allowed}, "
                "and literal braces are written {{ and }}"
            ) from None
        return value

    def truncate_old_results(
        self, messages: list[Message], ctx: FilterContext, old: list[int] | None = None
    ) -> list[Message]:
        """Cut the tool results older than the newest ``keep_recent`` that are over ``max_chars``
        (or, given ``old``, those of these indices that are over it)."""
        if old is None:
            tool_indices = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
            old = tool_indices[: max(0, len(tool_indices) - self.keep_recent)]
        result = list(messages)
        for i in old:
            content = messages[i].get("content")
            size = text_length(content)
            if size > self.max_chars:
                result[i] = {
                    **messages[i],
                    "content": cut_text(content, self.max_chars, self._notice(content, ctx)),
                }
        return result

    def _notice(self, content: Any, ctx: FilterContext) -> str:
        tokens = 0
        if "original_tokens" in self.notice:
            counter = ctx.tokens.get(model=ctx.model)
            tokens = sum(counter.text(piece) for piece in text_pieces(content))
        return self.notice.format(
            max_chars=self.max_chars, original_chars=text_length(content), original_tokens=tokens
        )


class ToolResultTruncation(ToolResultLimits):
    """Cut old, long tool results to ``max_chars`` plus a notice with the original size.

    Tool messages older than the newest ``keep_recent`` and longer than ``max_chars`` characters
    keep their first ``max_chars`` characters followed by ``notice``. Nothing is removed or
    reordered; ``tool_call_id``, ``name`` and every other field stay.

    ```yaml
    worker: [{type: tool_result_truncation, keep_recent: 2, max_chars: 500}]
    ```
    """

    type: Literal["tool_result_truncation"]
    trigger: Literal["every", "cost"] = "every"
    """``every``: a result is cut as soon as it is older than the newest ``keep_recent``; ``cost``: old
    results are cut (all at once) only when the tokens removed repay the prompt-cache rewrite the cut
    causes, under the upstream's pricing (docs/cost.md)."""
    cache_friendly = (
        "mostly: a result is cut the same way on every request once it is older than the newest keep_recent, "
        "but that rewrites the prompt cache from the result that just aged; trigger: cost cuts in large steps "
        "only when it pays"
    )

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        paying = " or cutting would not yet pay (trigger: cost)" if self.trigger == "cost" else ""
        return (
            f"not triggered: no tool result older than the newest {self.keep_recent} is over "
            f"{self.max_chars} characters{paying}"
        )

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        if self.trigger == "every":
            return self.truncate_old_results(messages, ctx)
        counter = ctx.tokens.get(model=ctx.model)
        counts = [counter.message(m) for m in messages]
        tools = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
        long = [i for i in tools if text_length(messages[i].get("content")) > self.max_chars]
        # what a cut saves: the result's tokens less the kept characters (~4 a token) and the notice
        kept = self.max_chars // 4 + NOTICE_TOKENS * 3
        items = [Item(i, max(0, counts[i] - kept)) for i in long]
        keep = self.keep_recent

        def eager(end: int, _available: int) -> int:
            older = bisect.bisect_left(tools, end) - keep  # tool results before end, less the recent ones
            if older <= 0:
                return 0
            return bisect.bisect_left(long, tools[older] if older < len(tools) else end)

        count = cost_boundary(messages, counts, items, eager, ctx.pricing, window_room(ctx))
        return self.truncate_old_results(messages, ctx, long[:count])
