"""``manager_digest`` (Plexus's ``ManagerAgentConversationFilter``, seed 002): an overview for a supervisor.

An optional manager system prompt, an overview (counts, then a line per recent message), the newest
assistant message and what follows it, and a closing instruction.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from history_proxy.core.messages import (
    SYSTEM_ROLES,
    Message,
    group_spans,
    is_opaque,
    leading_system_count,
    newest_user_index,
    text_of,
    tool_call_ids,
    tool_call_names,
)
from history_proxy.filters._digests import label, one_line, preview, system_message
from history_proxy.filters.base import Filter, FilterContext

DEFAULT_INSTRUCTION = (
    "You are a coaching manager who helps AI assistants by asking thoughtful questions about their next "
    "steps. Ask questions that help the assistant think through what they should do next, rather than "
    "giving direct orders. Be supportive and give the assistant agency to decide based on your coaching "
    "questions."
)
"""Plexus's closing instruction to the manager agent, word for word."""


def manager_line(index: int, message: Message) -> str:
    """One message as a line of the manager overview (Plexus's ``_create_message_summary``)."""
    text = text_of(message.get("content"))
    names = tool_call_names(message)
    role = message.get("role")
    if role == "assistant" and names:
        said = f"{preview(one_line(text), 100)} " if text.strip() else ""
        return f"[{index}] Assistant: {said}[Tools: {', '.join(names)}]"
    if not text.strip():
        return f"[{index}] {label(message)}: <empty>"
    limit = {"user": 150, "assistant": 200}.get(str(role), 80 if role in SYSTEM_ROLES else 100)
    if role == "tool":
        text = " ".join(text.split("\n")[:3])
    return f"[{index}] {label(message)}: {preview(one_line(text), limit)}"


def recent_for_budget(max_tokens: int | None) -> int:
    """Plexus's choice of how many recent messages to digest: 3 under 2000 tokens, 5 under 5000, else 8."""
    if max_tokens is not None and max_tokens < 2000:
        return 3
    if max_tokens is not None and max_tokens < 5000:
        return 5
    return 8


def unanswered_tail_start(messages: list[Message]) -> int | None:
    """Start of a trailing action whose calls are not all answered yet (None when there is none)."""
    spans = group_spans(messages)
    if not spans:
        return None
    start, stop = spans[-1]
    answered = {m.get("tool_call_id") for m in messages[start + 1 : stop]}
    calls = tool_call_ids(messages[start]) if messages[start].get("role") == "assistant" else []
    return start if any(call_id not in answered for call_id in calls) else None


class ManagerDigest(Filter):
    """A manager's overview: counts and recent digests, the newest assistant reply, a closing instruction.

    Output, in order: ``system_prompt`` (replacing the leading system messages' text; the tool
    declarations and opaque items among them stay) or the leading system messages; an overview system
    message (message, tool-result and assistant counts, then a line per recent message); the newest user
    message when it is older than the newest assistant message; the newest assistant message and
    everything after it, verbatim (an action with all its results); a system message with
    ``instruction``. An unanswered trailing action stays last, after the instruction, as the input had
    it.

    ```yaml
    manager: [{type: manager_digest, system_prompt: "You supervise a coding agent.", recent: 5}]
    ```
    """

    type: Literal["manager_digest"]
    system_prompt: str | None = Field(default=None, min_length=1)
    """Replaces the leading system messages; none keeps them."""
    recent: int | None = Field(default=None, ge=1)
    """Messages digested in the overview; none: 3, 5 or 8 chosen by ``max_tokens`` as Plexus does."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Plexus's token budget for the automatic ``recent``: under 2000 -> 3, under 5000 -> 5, else 8."""
    instruction: str = Field(default=DEFAULT_INSTRUCTION, min_length=1)
    """The closing system message (Plexus's coaching-manager instruction)."""
    cache_friendly = (
        "no: the overview changes on every request; only a fixed system_prompt stays a stable prefix"
    )

    @model_validator(mode="after")
    def _recent_or_budget(self) -> ManagerDigest:
        if self.recent is not None and self.max_tokens is not None:
            raise ValueError("set recent (a fixed count) or max_tokens (Plexus's automatic choice), not both")
        return self

    def overview(self, messages: list[Message], lead: int) -> str:
        """Plexus's overview text: counts over the whole input, then a line per recent message."""
        recent = self.recent if self.recent is not None else recent_for_budget(self.max_tokens)
        window = range(max(lead, len(messages) - recent), len(messages))
        tools = sum(1 for m in messages if m.get("role") == "tool")
        replies = sum(1 for m in messages if m.get("role") == "assistant")
        lines = [
            f"📊 CONVERSATION OVERVIEW: {len(messages)} messages ({tools} tool results, {replies} AI responses)",
            "",
            f"📋 RECENT CONVERSATION ({len(window)} messages):",
        ]
        lines += [f"   {manager_line(i, messages[i])}" for i in window]
        return "\n".join(lines)

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        lead = leading_system_count(messages)
        newest_user = newest_user_index(messages)
        newest_assistant = next(
            (i for i in range(len(messages) - 1, lead - 1, -1) if messages[i].get("role") == "assistant"),
            None,
        )
        tail_start = newest_assistant if newest_assistant is not None else newest_user
        if tail_start is None:
            tail_start = len(messages)
        head = messages[:lead]
        if self.system_prompt is not None:  # replaces the text instructions; tool declarations stay
            head = [system_message(self.system_prompt), *(m for m in head if is_opaque(m))]
        result = [*head, system_message(self.overview(messages, lead))]
        if newest_user is not None and newest_user < tail_start:
            result.append(messages[newest_user])
        tail = messages[tail_start:]
        unanswered = unanswered_tail_start(tail)
        if unanswered is None:
            return [*result, *tail, system_message(self.instruction)]
        return [*result, *tail[:unanswered], system_message(self.instruction), *tail[unanswered:]]
