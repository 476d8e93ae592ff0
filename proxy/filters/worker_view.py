"""``worker_view`` (seed 000): the current turn only, without other agents' traces and completion signals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from proxy.core.messages import (
    FINAL,
    GLOBAL_OBSERVATION,
    TASK,
    Message,
    classify,
    group_spans,
    newest_user_index,
)
from proxy.filters._views import (
    assemble_spans,
    current_turn_bounds,
    producing_agent,
)
from proxy.filters.base import Filter, FilterContext


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
