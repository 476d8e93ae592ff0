"""What the three role views (seed 000) share: the current turn's bounds, text-only copies, reassembly.

All three views keep the leading system messages and the newest user message (SPEC invariant 2) and
return messages in their original order. Message types come from annotations or, without them,
from :func:`proxy.core.messages.classify`; the current turn is the last turn span.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.core.messages import (
    FINAL,
    GLOBAL_OBSERVATION,
    OBSERVATION,
    SYNTHESIS,
    Message,
    current_turn_start,
    group_spans,
    has_text,
    keep_spans,
    leading_system_count,
    newest_user_index,
    tool_calls,
)

COMPLETION_TYPES = frozenset({FINAL, SYNTHESIS})
"""Seed 000's completion types: signals that a turn (``final``) or a phase (``synthesis``) ended."""


TRACE_RESULT_TYPES = frozenset({OBSERVATION, GLOBAL_OBSERVATION})


def current_turn_bounds(messages: Sequence[Message]) -> tuple[int, int]:
    """``(leading system count, start of the current turn)``; the turn never starts inside the system block."""
    lead = leading_system_count(messages)
    return lead, current_turn_start(messages, lead)


def text_only(message: Message) -> Message | None:
    """A message reduced to its text: itself without tool calls, else a copy without ``tool_calls``.

    None for an assistant message with no text (nothing of it would be left to show).
    """
    if message.get("role") == "assistant" and not has_text(message):
        return None
    if not tool_calls(message):
        return message
    return {k: v for k, v in message.items() if k != "tool_calls"}


def assemble(messages: Sequence[Message], kept: dict[int, Message]) -> list[Message]:
    """The kept messages in their original order, with the newest user message always among them.

    ``kept`` maps an input index to the message to emit there (the input message itself, or a
    changed copy). A user message is a group alone, so adding it never breaks a tool pair. When
    nothing would be kept (no system, no user message), the newest group is, so the list is never empty.
    """
    newest_user = newest_user_index(messages)
    if newest_user is not None and newest_user not in kept:
        kept = {**kept, newest_user: messages[newest_user]}
    if not kept and messages:
        last_group = group_spans(messages)[-1]
        kept = {i: messages[i] for i in range(*last_group)}
    return [kept[i] for i in sorted(kept)]


def assemble_spans(
    messages: Sequence[Message], spans: list[tuple[int, int]], newest_user: int | None
) -> list[Message]:
    """:func:`assemble` for kept ``spans`` (in order, not overlapping) of unchanged messages.

    One slice per span when they already hold the newest user message (``newest_user``, as
    :func:`newest_user_index` gives it) and keep something, the usual case; otherwise
    :func:`assemble` applies its rules.
    """
    if newest_user is None or any(a <= newest_user < b for a, b in spans):
        kept = keep_spans(messages, spans)
        if kept:
            return kept
    return assemble(messages, {i: messages[i] for a, b in spans for i in range(a, b)})


def producing_agent(message: Message) -> str | None:
    """Who produced a message: its ``agent`` annotation, else an assistant's ``name`` (AutoGen transcripts)."""
    agent = message.get("agent")
    if isinstance(agent, str):
        return agent
    name = message.get("name")
    if message.get("role") == "assistant" and isinstance(name, str):
        return name
    return None
