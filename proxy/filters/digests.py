"""One-line digests of older messages for supervising agents (Plexus, seed 002).

Plexus gives its supervising agents a digest instead of the full history:

- ``sop_digest`` (Plexus's ``SOPAgentConversationFilter``): the newest group verbatim; every older
  message as one short line (``[3] User: ...``, ``[4] Assistant: Used tools: grep [EXPLORATION_STAGE]``,
  ``[5] Tool Result: <data returned>``), folded into one system message;
- ``manager_digest`` (Plexus's ``ManagerAgentConversationFilter``): an optional manager system
  prompt, an overview (counts, then a line per recent message), the newest assistant message and
  what follows it, and a closing instruction.

The line formats, stage tags and preview lengths are Plexus's; the numbers in brackets are indexes
into the request's ``messages``. Previews are made one line by collapsing whitespace.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from proxy.filters.base import Filter, FilterContext
from proxy.messages import (
    SYSTEM_ROLES,
    Message,
    group_spans,
    leading_system_count,
    newest_user_index,
    text_of,
    tool_call_ids,
    tool_call_names,
)

STAGE_KEYWORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("HYPOTHESIS_STAGE", ("procedure", "hypothesis", "configuration", "yaml")),
    ("SYNTHESIS_STAGE", ("pattern", "root cause", "synthesis", "analysis shows")),
    ("EXPLORATION_STAGE", ("examining", "found feedback", "analyzing")),
)
"""Plexus's stage tags and the keywords (in an assistant's text) that set them; the first match wins."""

DEFAULT_INSTRUCTION = (
    "You are a coaching manager who helps AI assistants by asking thoughtful questions about their next "
    "steps. Ask questions that help the assistant think through what they should do next, rather than "
    "giving direct orders. Be supportive and give the assistant agency to decide based on your coaching "
    "questions."
)
"""Plexus's closing instruction to the manager agent, word for word."""

SOP_HEADER = "📋 EARLIER CONVERSATION ({count} messages, one line each):"


def one_line(text: str) -> str:
    """The text with every run of whitespace (newlines included) collapsed to one space."""
    return " ".join(text.split())


def preview(text: str, limit: int) -> str:
    """Plexus's preview: the first ``limit`` characters plus ``...`` when the text is longer."""
    return text[:limit] + "..." if len(text) > limit else text


def stage_tag(text: str) -> str:
    """`` [NAME_STAGE]`` for the first stage whose keyword occurs in the text, else ''."""
    lowered = text.lower()
    for tag, keywords in STAGE_KEYWORDS:
        if any(keyword in lowered for keyword in keywords):
            return f" [{tag}]"
    return ""


def label(message: Message) -> str:
    """How a digest line names the message's role."""
    role = str(message.get("role", ""))
    if role in SYSTEM_ROLES:
        return "System"
    if role == "tool":
        return "Tool Result"
    return {"user": "User", "assistant": "Assistant"}.get(role, role.capitalize() or "Message")


def sop_line(index: int, message: Message, user_chars: int, assistant_chars: int) -> str:
    """One message as a line of the SOP digest (Plexus's ``_create_truncated_summary``)."""
    text = text_of(message.get("content"))
    names = tool_call_names(message)
    role = message.get("role")
    if role == "assistant" and names:
        return f"[{index}] Assistant: Used tools: {', '.join(names)}{stage_tag(text)}"
    if not text.strip():
        return f"[{index}] {label(message)}: <empty>"
    if role in SYSTEM_ROLES:
        return f"[{index}] System: Initial setup and role definition"
    if role == "user":
        return f"[{index}] User: {preview(one_line(text), user_chars)}"
    if role == "assistant":
        return f"[{index}] Assistant: {preview(one_line(text), assistant_chars)}{stage_tag(text)}"
    if role == "tool":
        return f"[{index}] Tool Result: <data returned>"
    return f"[{index}] {label(message)}: <content>"


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


def system_message(text: str) -> Message:
    return {"role": "system", "content": text}


class SopDigest(Filter):
    """The newest group verbatim; every older message folded into one system message of one-line digests.

    After the leading system messages comes one system message with a line per older message in
    Plexus's format and stage tags, then the newest group (an action with all its results, or one
    message). The newest user message, when it is older than the newest group, is kept verbatim
    between the digest and the newest group instead of being digested.

    ```yaml
    sop: [{type: sop_digest, user_chars: 60, assistant_chars: 40}]
    ```
    """

    type: Literal["sop_digest"]
    user_chars: int = Field(default=60, ge=1)
    """Characters of a user message shown in its digest line (Plexus: 60)."""
    assistant_chars: int = Field(default=40, ge=1)
    """Characters of an assistant's text shown in its digest line (Plexus: 40)."""
    cache_friendly = "no: the digest right after the leading system messages changes on every request"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        lead = leading_system_count(messages)
        spans = group_spans(messages, lead)
        if not spans:
            return list(messages)
        newest_start = spans[-1][0]
        newest_user = newest_user_index(messages)
        kept_user = [newest_user] if newest_user is not None and newest_user < newest_start else []
        older = [i for i in range(lead, newest_start) if i not in kept_user]
        if not older:
            return list(messages)
        lines = [SOP_HEADER.format(count=len(older))]
        lines += [sop_line(i, messages[i], self.user_chars, self.assistant_chars) for i in older]
        return [
            *messages[:lead],
            system_message("\n".join(lines)),
            *(messages[i] for i in kept_user),
            *messages[newest_start:],
        ]


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

    Output, in order: ``system_prompt`` (replacing the leading system messages) or the leading
    system messages; an overview system message (message, tool-result and assistant counts, then
    a line per recent message); the newest user message when it is older than the newest assistant
    message; the newest assistant message and everything after it, verbatim (an action with all
    its results); a system message with ``instruction``. An unanswered trailing action stays last,
    after the instruction, as the input had it.

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
        head = [system_message(self.system_prompt)] if self.system_prompt is not None else messages[:lead]
        result = [*head, system_message(self.overview(messages, lead))]
        if newest_user is not None and newest_user < tail_start:
            result.append(messages[newest_user])
        tail = messages[tail_start:]
        unanswered = unanswered_tail_start(tail)
        if unanswered is None:
            return [*result, *tail, system_message(self.instruction)]
        return [*result, *tail[:unanswered], system_message(self.instruction), *tail[unanswered:]]
