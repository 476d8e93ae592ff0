"""``manager_view`` (seed 000): the previous phase's ``synthesis`` messages, then the current turn."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import StringConstraints

from proxy.core.messages import SYNTHESIS, Message, NotApplicable, classify
from proxy.filters._views import (
    assemble,
    current_turn_bounds,
    text_only,
)
from proxy.filters.base import Filter, FilterContext

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
