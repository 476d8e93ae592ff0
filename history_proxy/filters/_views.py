"""What the three role views (seed 000) share: where the current turn starts, text-only copies, reassembly.

All three views keep the leading system messages and the newest user message (invariant 2 of docs/architecture.md) and
return messages in their original order. Message types come from annotations or, without them,
from :func:`history_proxy.core.messages.classify`.

Where the current turn starts is the one thing real traffic gets wrong most easily: frameworks send
no annotations, and a ``user`` message may be a new task, an environment observation (SWE-agent's
text mode), a framework's nudge (CrewAI) or another agent's message (AutoGen sends a peer's message
as ``user`` with the peer's ``name``). So the views read turns by their ``turns`` setting
(:data:`Turns`) and keep more when unsure:

- a message annotated ``message_type`` decides for itself (``task`` starts a turn, anything else
  does not);
- the first unannotated ``user`` message after the leading system (before any annotated task)
  always starts a turn: it is the task statement every framework sends first;
- a later unannotated ``user`` message starts a turn under ``every_user`` unless it carries a
  ``name`` (then it is a peer's message); never under ``first_user``; under ``{pattern: REGEX}``
  when its text matches REGEX;
- when the current turn's start was inferred (no annotation decided it), the opening task
  statement (the first user message and the user messages right after it) is kept besides it
  (:attr:`ViewTurn.anchor`): the task survives even when a later observation or nudge was taken
  for a turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from history_proxy.core.messages import (
    FINAL,
    GLOBAL_OBSERVATION,
    OBSERVATION,
    SYNTHESIS,
    TASK,
    Message,
    group_spans,
    has_text,
    keep_spans,
    leading_system_count,
    newest_user_index,
    text_of,
    tool_calls,
)

COMPLETION_TYPES = frozenset({FINAL, SYNTHESIS})
"""Seed 000's completion types: signals that a turn (``final``) or a phase (``synthesis``) ended."""


TRACE_RESULT_TYPES = frozenset({OBSERVATION, GLOBAL_OBSERVATION})


class TurnPattern(BaseModel):
    """``turns: {pattern: REGEX}``: a later user message starts a turn when its text matches REGEX.

    For a framework that marks its task messages with a prefix (CrewAI: ``Current Task:``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str
    """A Python regular expression, searched (``re.search``) in the message's text."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value

    def matches(self, text: str) -> bool:
        return re.search(self.pattern, text) is not None


Turns = Literal["every_user", "first_user"] | TurnPattern
"""Which unannotated user messages after the first one start a turn (see the module docstring)."""


@dataclass(frozen=True)
class ViewTurn:
    """Where a view's pieces are: the leading system block, the current turn, and the task anchor."""

    lead: int
    """How many system/developer messages open the list."""
    start: int
    """Index of the current turn's first message (``lead`` when no message starts a turn)."""
    anchor: tuple[int, ...]
    """The opening task statement (the first user message and the user messages right after it, e.g.
    SWE-agent's demonstration then its task), kept besides the current turn when an inference placed
    the turn after it; empty otherwise."""
    inferred: bool
    """True when no ``message_type`` annotation decided where the current turn starts."""


def view_turn(messages: Sequence[Message], turns: Turns = "every_user") -> ViewTurn:
    """Where the current turn starts for a view reading turns by ``turns``."""
    lead = leading_system_count(messages)
    start = lead
    first_user: int | None = None
    decided = False
    for i in range(lead, len(messages)):
        message = messages[i]
        role = message.get("role")
        if role == "tool":  # a tool message sits inside its action's group: it never starts a turn
            continue
        annotated = message.get("message_type")
        if annotated is not None:
            if annotated == TASK:
                start, decided = i, True
            continue
        if role != "user":
            continue
        if first_user is None and start == lead and not decided:  # the conversation's first task statement
            first_user = i
            starts = True
        elif turns == "every_user":
            starts = "name" not in message
        elif turns == "first_user":
            starts = False
        else:
            starts = turns.matches(text_of(message.get("content")))
        if starts:
            start, decided = i, False
    anchor: tuple[int, ...] = ()
    if first_user is not None and first_user < start and not decided:
        end = first_user
        while end < start and messages[end].get("role") == "user" and "message_type" not in messages[end]:
            end += 1
        anchor = tuple(range(first_user, end))
    return ViewTurn(lead, start, anchor, not decided)


def current_turn_bounds(messages: Sequence[Message], turns: Turns = "every_user") -> tuple[int, int]:
    """``(leading system count, start of the current turn)``; the turn never starts inside the system block."""
    turn = view_turn(messages, turns)
    return turn.lead, turn.start


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
    """Who produced a message: its ``agent`` annotation, else its ``name`` (AutoGen names peers' messages).

    A ``user`` message's ``name`` counts too: AutoGen sends a peer's turn as ``user`` with the peer's name.
    """
    agent = message.get("agent")
    if isinstance(agent, str):
        return agent
    name = message.get("name")
    if message.get("role") in ("assistant", "user") and isinstance(name, str):
        return name
    return None
