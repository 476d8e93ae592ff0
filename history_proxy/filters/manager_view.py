"""``manager_view`` (seed 000): the previous phase's ``synthesis`` messages, then the current turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import StringConstraints

from history_proxy.core.messages import SYNTHESIS, Message, classify
from history_proxy.filters._views import (
    Turns,
    assemble,
    text_only,
    view_turn,
)
from history_proxy.filters.base import Filter, FilterContext

PhaseId = int | Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class ManagerView(Filter):
    """The manager's view: the previous phase's ``synthesis`` messages, then the current turn verbatim.

    The previous phase is ``previous_phase_id`` when configured, otherwise the ``X-Agent-Phase``
    header minus 1 (phase 0 has no previous phase, so the manager sees no synthesis). Syntheses are
    the messages annotated ``message_type: synthesis`` whose ``phase_id`` matches (``1`` equals
    ``"1"``). A synthesis carrying tool calls keeps only its text, so no call is left unanswered.

    Without a usable phase (no header, or one that is not an integer) the request never fails: the
    previous phase is the newest ``phase_id`` among the synthesis messages before the current turn
    (note ``manager_view:phase_inferred``), or, with none, the manager sees the leading system and
    the current turn (note ``manager_view:phase_unknown``).

    Turns: ``first_user`` by default (a manager delegating in a tool loop works on one task); see
    :mod:`history_proxy.filters._views`.

    ```yaml
    manager: [{type: manager_view}]  # previous phase = X-Agent-Phase minus 1, else inferred
    # or a fixed phase: [{type: manager_view, previous_phase_id: 2}]
    ```
    """

    type: Literal["manager_view"]
    previous_phase_id: PhaseId | None = None
    """The phase whose syntheses the manager sees; none: the X-Agent-Phase header minus 1, else inferred."""
    turns: Turns = "first_user"
    """Which user messages start a new turn: ``first_user`` (safe default), ``every_user``, ``{pattern: REGEX}``."""
    cache_friendly = "yes within a phase: the syntheses and the turn start stay fixed as the turn grows"

    def previous_phase(
        self, messages: Sequence[Message], kinds: Sequence[str], start: int, ctx: FilterContext
    ) -> str | None:
        """The previous phase id as text, or None when there is none (phase 0, or nothing to infer)."""
        if self.previous_phase_id is not None:
            return str(self.previous_phase_id).strip()
        header = (ctx.phase or "").strip()
        if header:
            try:
                phase = int(header)
            except ValueError:
                ctx.notes.append("manager_view:phase_not_integer")
            else:
                return str(phase - 1) if phase > 0 else None
        for i in range(start - 1, -1, -1):
            phase_id = messages[i].get("phase_id")
            if kinds[i] == SYNTHESIS and phase_id is not None and str(phase_id).strip():
                ctx.notes.append("manager_view:phase_inferred")
                return str(phase_id).strip()
        ctx.notes.append("manager_view:phase_unknown")
        return None

    def idle_reason(self, tokens: int, ctx: FilterContext) -> str:
        return "nothing outside this role's view: every message kept"

    def apply(self, messages: list[Message], ctx: FilterContext) -> list[Message]:
        turn = view_turn(messages, self.turns)
        lead, current = turn.lead, turn.start
        kinds = classify(messages, ctx.completion_tools)
        previous = self.previous_phase(messages, kinds, current, ctx)
        kept = {i: messages[i] for i in range(lead)}
        kept.update((i, messages[i]) for i in turn.anchor)
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
