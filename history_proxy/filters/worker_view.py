"""``worker_view`` (seed 000): the task and what followed, without other agents' traces and completion signals."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from history_proxy.core.messages import (
    ACTION,
    FINAL,
    GLOBAL_OBSERVATION,
    TASK,
    Message,
    classify,
    group_spans,
)
from history_proxy.filters._views import (
    TRACE_RESULT_TYPES,
    Turns,
    assemble,
    producing_agent,
    text_only,
    view_turn,
)
from history_proxy.filters.base import Filter, FilterContext


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
    """The worker's view: its task and what it did since, without other agents' traces or completion signals.

    Keeps the leading system messages, the current turn's task message and the groups after it,
    except other agents' execution traces (their tool calls and tool results: groups attributed by
    an ``agent`` annotation or a ``name`` differing from ``X-Agent-Name``; only when that header is
    sent) and completion signals (``final``). Another agent's plain message (a group chat turn) is
    conversation the worker needs and stays; another agent's action keeps only its text. With
    ``include_global`` a group holding a ``global_observation`` is always kept. A group (an action
    and all its results) is kept or dropped as one.

    Turns: ``first_user`` by default (a worker running a tool loop has one task: later user
    messages are observations, nudges or peers' messages, not new tasks); see
    :mod:`history_proxy.filters._views` for ``every_user`` and ``pattern``. Without ``X-Agent-Name`` every
    agent's messages are kept, with the note ``worker_view:agent_unknown`` when some were attributed.

    ```yaml
    worker: [{type: worker_view, include_global: true, turns: first_user}]
    ```
    """

    type: Literal["worker_view"]
    include_global: bool = True
    """Keep groups holding a ``global_observation`` even when another agent produced them."""
    turns: Turns = "first_user"
    """Which user messages start a new task: ``first_user`` (safe default), ``every_user``, ``{pattern: REGEX}``."""
    cache_friendly = "yes within a turn: the kept prefix only grows until the next task message"

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        return "nothing outside this role's view: every message kept"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        turn = view_turn(messages, self.turns)
        lead, current, anchor = turn.lead, turn.start, turn.anchor
        tail = messages[current:]
        if drops_nothing(tail, ctx.completion_tools):
            return [*messages[:lead], *(messages[i] for i in anchor), *tail]
        # the current turn begins a group, so classifying it alone gives the kinds the whole list would
        kinds = classify(tail, ctx.completion_tools)
        kept: dict[int, Message] = {i: messages[i] for i in range(lead)}
        kept.update((i, messages[i]) for i in anchor)
        attributed = False
        for a, b in group_spans(messages, current):
            first = messages[a]
            group_kinds = kinds[a - current : b - current]
            attributed = attributed or producing_agent(first) is not None
            if a == current and group_kinds[0] == TASK:
                kept.update((i, messages[i]) for i in range(a, b))
                continue
            keep = self.keeps_group(first, group_kinds, ctx.agent)
            if keep == "all":
                kept.update((i, messages[i]) for i in range(a, b))
            elif keep == "text" and (reduced := text_only(first)) is not None:
                kept[a] = reduced
        if attributed and ctx.agent is None:
            ctx.notes.append("worker_view:agent_unknown")
        return assemble(messages, kept)

    def keeps_group(
        self, first: Message, kinds: Sequence[str], agent: str | None
    ) -> Literal["all", "text", "none"]:
        """How much of a group (its first message, the kinds of all its messages) this worker sees."""
        if self.include_global and GLOBAL_OBSERVATION in kinds:
            return "all"
        if FINAL in kinds:
            return "none"
        if agent is None:  # who is asking is unknown: every agent's messages stay
            return "all"
        producer = producing_agent(first)
        if producer is None or producer == agent:
            return "all"
        if kinds[0] == ACTION:  # another agent's execution trace: its calls and results go, its words stay
            return "text"
        if kinds[0] in TRACE_RESULT_TYPES:
            return "none"
        return "all"  # another agent's plain message: conversation the worker needs
