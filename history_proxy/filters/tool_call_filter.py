"""``tool_call_filter``: remove tool calls and their results from the history (AgentKit, seed 001).

AgentKit's ``ToolCallFilter`` hides tool interactions from an agent that should not see them
("tool contamination": an agent calling tools it does not have because another agent's calls are
in its history). It has three modes: remove every call (no options), ``exclude`` the named tools,
or ``include`` only the named tools; ``persistResults`` leaves a one-line note of what was used.

Here a call is removed from its assistant message together with the tool message(s) answering it;
the other calls of a parallel group and their results stay. Each tool message is matched to the
nearest preceding assistant message (its group), so ids reused across turns are handled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, model_validator

from history_proxy.core.invariants import empty_assistant_errors
from history_proxy.core.messages import Message, NotApplicable, call_name, group_spans, is_action, tool_calls
from history_proxy.filters.base import Filter, FilterContext


def usage_note(removed: Sequence[dict[str, Any]]) -> str:
    """AgentKit's summary of removed calls: ``Used **NAME** tool`` or ``Used tools: A, B`` (call order)."""
    names = [call_name(c) for c in removed]
    return f"Used **{names[0]}** tool" if len(names) == 1 else f"Used tools: {', '.join(names)}"


def with_note(content: Any, note: str) -> Any:
    """``content`` with ``note`` on a new line after its text; just ``note`` when there is no text.

    A list content gets the note as one more text part, leaving its other parts untouched.
    """
    if isinstance(content, list) and content:
        return [*content, {"type": "text", "text": note}]
    if isinstance(content, str) and content.strip():
        return f"{content}\n{note}"
    return note


class ToolCallFilter(Filter):
    """Remove tool calls (all, the ``exclude``d ones, or all but the ``include``d ones) and their results.

    An assistant message left with no calls keeps its text (as a plain text message) or disappears.
    With ``persist_results``, each assistant message that lost calls says which ones:
    ``Used **search** tool`` or ``Used tools: search, fetch``, after its own text.

    ```yaml
    manager: [{type: tool_call_filter}]                                  # every call
    worker: [{type: tool_call_filter, exclude: [debug_log], persist_results: true}]
    reviewer: [{type: tool_call_filter, include: [search]}]             # only search calls
    ```
    """

    type: Literal["tool_call_filter"]
    exclude: list[str] | None = Field(default=None)
    """Tool names whose calls are removed; with neither exclude nor include every call is removed."""
    include: list[str] | None = Field(default=None)
    """Tool names whose calls are kept; calls to any other tool are removed (not with exclude)."""
    persist_results: bool = False
    """Leave a ``Used **NAME** tool`` / ``Used tools: A, B`` note where calls were removed."""

    cache_friendly = (
        "yes: every message is rewritten the same way on every request, so the kept prefix never changes"
    )

    @model_validator(mode="after")
    def _one_mode(self) -> ToolCallFilter:
        if self.exclude is not None and self.include is not None:
            raise ValueError(
                "give exclude or include, not both: exclude removes the named tools, include keeps only "
                "the named tools, neither removes every tool call"
            )
        return self

    def removes(self, tool_name: str) -> bool:
        """Whether a call to ``tool_name`` is removed."""
        if self.include is not None:
            return tool_name not in self.include
        if self.exclude is not None:
            return tool_name in self.exclude
        return True

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        return "no tool call or result to remove"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        kept: list[Message] = []
        for start, stop in group_spans(messages):
            head = messages[start]
            calls = tool_calls(head) if is_action(head) else []
            removed = [c for c in calls if self.removes(call_name(c))]
            if not removed:
                kept.extend(messages[start:stop])
                continue
            remaining = [c for c in calls if not self.removes(call_name(c))]
            rewritten = self._without_calls(head, remaining, removed)
            if rewritten is not None:
                kept.append(rewritten)
            remaining_ids = {c.get("id") for c in remaining}
            removed_ids = {c.get("id") for c in removed} - remaining_ids
            kept.extend(m for m in messages[start + 1 : stop] if m.get("tool_call_id") not in removed_ids)
        if not kept:
            raise NotApplicable(
                "every message is a removed tool call or its result, so nothing would be left; "
                "send a user or system message too, or keep some tools with include/exclude"
            )
        return kept

    def _without_calls(
        self, head: Message, remaining: list[dict[str, Any]], removed: list[dict[str, Any]]
    ) -> Message | None:
        """The assistant message with only ``remaining`` calls, or None when nothing is left of it."""
        changed: Message
        if remaining:
            changed = {**head, "tool_calls": remaining}
        else:
            changed = {key: value for key, value in head.items() if key != "tool_calls"}
        if self.persist_results:
            changed["content"] = with_note(head.get("content"), usage_note(removed))
        elif not remaining and empty_assistant_errors([changed]):
            return None
        return changed
