"""Role views: what an orchestrator, a manager and a worker each see (seed 000).

Seed 000's hierarchical history filters give each agent role its own slice of one shared history:

- ``orchestrator_view``: the conversation of previous turns (user messages and assistant text, no
  execution traces or completion signals), newest ``max_conversation_turns`` messages, plus the
  current turn verbatim;
- ``manager_view``: the ``synthesis`` messages of the previous phase, plus the current turn;
- ``worker_view``: the current turn only, without other agents' traces and completion signals.

All three keep the leading system messages and the newest user message (SPEC invariant 2) and
return messages in their original order. Message types come from annotations or, without them,
from :func:`proxy.messages.classify`; the current turn is the last turn span.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from proxy.filters.base import Filter, FilterContext
from proxy.messages import (
    FINAL,
    GLOBAL_OBSERVATION,
    OBSERVATION,
    SYNTHESIS,
    TASK,
    Message,
    NotApplicable,
    classify,
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


class OrchestratorView(Filter):
    """The orchestrator's view: previous turns as conversation only, the current turn verbatim.

    From the turns before the current one it keeps user messages and assistant text (an assistant
    message with text and tool calls keeps its text); tool results, tool-call-only messages,
    completion signals (``final``, ``synthesis``), observations and mid-history system messages are
    dropped, and of what remains the newest ``max_conversation_turns`` messages are kept.

    ```yaml
    orchestrator: [{type: orchestrator_view, max_conversation_turns: 8}]
    ```
    """

    type: Literal["orchestrator_view"]
    max_conversation_turns: int = Field(default=8, ge=1)
    """How many conversation messages of previous turns to keep, newest first (counts messages, as the source does)."""
    cache_friendly = "no: the conversation window slides by one message per turn; no knob makes it stable"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        lead, current = current_turn_bounds(messages)
        kinds = classify(messages, ctx.completion_tools)
        conversation: list[tuple[int, Message]] = []
        for i in range(lead, current):
            message = messages[i]
            if message.get("role") not in ("user", "assistant"):
                continue
            if kinds[i] in COMPLETION_TYPES or kinds[i] in TRACE_RESULT_TYPES:
                continue
            reduced = text_only(message)
            if reduced is not None:
                conversation.append((i, reduced))
        kept = {i: messages[i] for i in range(lead)}
        kept.update(conversation[-self.max_conversation_turns :])
        kept.update((i, messages[i]) for i in range(current, len(messages)))
        return assemble(messages, kept)


PhaseId = int | Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class ManagerView(Filter):
    """The manager's view: the previous phase's ``synthesis`` messages, then the current turn verbatim.

    The previous phase is ``previous_phase_id`` when configured, otherwise the ``X-Agent-Phase``
    header minus 1 (phase 0 has no previous phase, so the manager sees no synthesis). Syntheses are
    the messages annotated ``message_type: synthesis`` whose ``phase_id`` matches (``1`` equals
    ``"1"``). A synthesis carrying tool calls keeps only its text, so no call is left unanswered.

    ```yaml
    manager: [{type: manager_view}]  # previous phase = X-Agent-Phase minus 1
    # or a fixed phase: [{type: manager_view, previous_phase_id: 2}]
    ```
    """

    type: Literal["manager_view"]
    previous_phase_id: PhaseId | None = None
    """The phase whose syntheses the manager sees; none: the X-Agent-Phase header minus 1."""
    cache_friendly = "yes within a phase: the syntheses and the turn start stay fixed as the turn grows"

    def previous_phase(self, ctx: FilterContext) -> str | None:
        """The previous phase id as text, or None when the current phase is the first (0 or lower)."""
        if self.previous_phase_id is not None:
            return str(self.previous_phase_id).strip()
        if ctx.phase is None or not ctx.phase.strip():
            raise NotApplicable(
                "the current phase is unknown: send the X-Agent-Phase header (an integer) "
                "or set previous_phase_id in the filter's config"
            )
        try:
            phase = int(ctx.phase)
        except ValueError:
            raise NotApplicable(
                f"X-Agent-Phase {ctx.phase!r} is not an integer: send an integer phase "
                "or set previous_phase_id in the filter's config"
            ) from None
        return str(phase - 1) if phase > 0 else None

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        previous = self.previous_phase(ctx)
        lead, current = current_turn_bounds(messages)
        kinds = classify(messages, ctx.completion_tools)
        kept = {i: messages[i] for i in range(lead)}
        if previous is not None:
            for i in range(lead, current):
                message = messages[i]
                if kinds[i] != SYNTHESIS or message.get("role") in ("tool", "function"):
                    continue
                phase_id = message.get("phase_id")
                if phase_id is None or str(phase_id).strip() != previous:
                    continue
                reduced = text_only(message)
                if reduced is not None:
                    kept[i] = reduced
        kept.update((i, messages[i]) for i in range(current, len(messages)))
        return assemble(messages, kept)


def producing_agent(message: Message) -> str | None:
    """Who produced a message: its ``agent`` annotation, else an assistant's ``name`` (AutoGen transcripts)."""
    agent = message.get("agent")
    if isinstance(agent, str):
        return agent
    name = message.get("name")
    if message.get("role") == "assistant" and isinstance(name, str):
        return name
    return None


def drops_nothing(turn: Sequence[Message], completion_tools: frozenset[str]) -> bool:
    """Whether ``worker_view`` keeps every group of the current ``turn``, told without classifying it.

    So it is when no message is annotated or attributed to an agent (no global observation, no
    other agent's trace) and no tool call names a completion tool (no completion signal). The newest
    user message is then in the turn (it would start a later turn otherwise), so it is kept too.
    False is always safe (the filter then classifies the turn): so it is for tool calls of any other
    shape than ``{function: {name: str}}``, and for calls on messages that are not actions.
    """
    try:  # one loop, no call per message: this runs on every request
        for message in turn:
            if "message_type" in message or "agent" in message or "name" in message:
                return False
            calls = message.get("tool_calls")
            if calls:
                for call in calls:
                    name = call["function"]["name"]
                    if name.__class__ is not str or name in completion_tools:
                        return False
    except (LookupError, TypeError, AttributeError):
        return False
    return True


class WorkerView(Filter):
    """The worker's view: the current turn only, without other agents' traces or completion signals.

    Keeps the leading system messages, the current turn's task message and the groups after it,
    except groups produced by another agent (``agent`` annotation, or an assistant's ``name``,
    differing from ``X-Agent-Name``; only when that header is sent) and completion signals
    (``final``). With ``include_global`` a group holding a ``global_observation`` is always kept.
    A group (an action and all its results) is kept or dropped as one.

    ```yaml
    worker: [{type: worker_view, include_global: true}]
    ```
    """

    type: Literal["worker_view"]
    include_global: bool = True
    """Keep groups holding a ``global_observation`` even when another agent produced them."""
    cache_friendly = "yes within a turn: the kept prefix only grows until the next task message"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        lead, current = current_turn_bounds(messages)
        turn = messages[current:]
        if drops_nothing(turn, ctx.completion_tools):
            return messages[:lead] + turn
        # the current turn begins a group, so classifying it alone gives the kinds the whole list would
        kinds = classify(messages[current:], ctx.completion_tools)
        spans = [(0, lead)]
        newest_user: int | None = None
        for a, b in group_spans(messages, current):
            first = messages[a]
            if first.get("role") == "user":  # a user message is a group alone: the newest is met last
                newest_user = a
            group_kinds = kinds[a - current : b - current]
            if (a == current and group_kinds[0] == TASK) or self.keeps_group(first, group_kinds, ctx.agent):
                spans.append((a, b))
        if newest_user is None:
            newest_user = newest_user_index(messages[:current])
        return assemble_spans(messages, spans, newest_user)

    def keeps_group(self, first: Message, kinds: Sequence[str], agent: str | None) -> bool:
        """Whether a group (its first message, the kinds of all its messages) belongs in this worker's view."""
        if self.include_global and GLOBAL_OBSERVATION in kinds:
            return True
        if FINAL in kinds:
            return False
        if agent is None or ("agent" not in first and "name" not in first):  # no producer: everyone's
            return True
        producer = producing_agent(first)
        return producer is None or producer == agent
