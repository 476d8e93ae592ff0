"""Turns as AgentRoute groups them (seed 004), shared by ``sliding_window``, ``truncate`` and ``summarize``.

The leading system messages are always kept; the rest is grouped into turns: a turn starts at a user
message and runs to the next one, so tool calls and their results stay with the turn that triggered
them; messages before the first user message form the first turn. ``step`` rounds the number of
dropped turns up to a multiple of itself, so the first kept turn stays put for several consecutive
requests (prompt caches can reuse the prefix).
"""

from __future__ import annotations

from collections.abc import Sequence

from history_proxy.core.messages import Message, keep_spans, newest_user_index


def without_oldest_turns(
    messages: list[Message], lead: int, turns: Sequence[tuple[int, int]], dropped: int
) -> list[Message]:
    """The leading system messages and every turn from ``turns[dropped]`` on.

    The newest user message stays in place if it falls in a dropped turn (only possible when a
    later message is annotated as the task), as invariant 2 of docs/architecture.md asks.
    """
    if dropped == 0:
        return list(messages)
    cut = turns[dropped][0]
    newest_user = newest_user_index(messages)
    pinned = [(newest_user, newest_user + 1)] if newest_user is not None and lead <= newest_user < cut else []
    return keep_spans(messages, [(0, lead), *pinned, (cut, len(messages))])
