"""``orchestrator_view`` (seed 000): previous turns reduced to conversation, the current turn verbatim."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from history_proxy.core.messages import Message, classify
from history_proxy.filters._views import (
    COMPLETION_TYPES,
    TRACE_RESULT_TYPES,
    Turns,
    assemble,
    text_only,
    view_turn,
)
from history_proxy.filters.base import Filter, FilterContext


class OrchestratorView(Filter):
    """The orchestrator's view: previous turns as conversation only, the current turn verbatim.

    From the turns before the current one it keeps user messages and assistant text (an assistant
    message with text and tool calls keeps its text); tool results, tool-call-only messages,
    completion signals (``final``, ``synthesis``), observations and mid-history system messages are
    dropped, and of what remains the newest ``max_conversation_turns`` messages are kept.

    Turns: ``every_user`` by default (an orchestrator facing a person reads each user message as a
    new turn; a user message carrying a ``name`` is a peer agent's, not a turn); the conversation's
    first user message, its task statement, is kept too when the current turn was inferred after it.
    See :mod:`history_proxy.filters._views` for ``first_user`` and ``pattern``.

    ```yaml
    orchestrator: [{type: orchestrator_view, max_conversation_turns: 8, turns: every_user}]
    ```
    """

    type: Literal["orchestrator_view"]
    max_conversation_turns: int = Field(default=8, ge=1)
    """How many conversation messages of previous turns to keep, newest first (counts messages, as the source does)."""
    turns: Turns = "every_user"
    """Which user messages start a new turn: ``every_user`` (default), ``first_user``, ``{pattern: REGEX}``."""
    cache_friendly = "no: the conversation window slides by one message per turn; no knob makes it stable"

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        return "nothing outside this role's view: every message kept"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        turn = view_turn(messages, self.turns)
        lead, current = turn.lead, turn.start
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
        kept.update((i, messages[i]) for i in turn.anchor)
        kept.update((i, messages[i]) for i in range(current, len(messages)))
        return assemble(messages, kept)
