"""When a prefix-moving filter should advance, decided by what advancing costs and saves (issue 18).

A filter that compacts the history's oldest items (elides observations, cuts results, drops groups)
changes the request from the first compacted message on; a prompt cache then bills everything after
that point as written (``write``) instead of read (``read``). Advancing pays once
``(write - read) * tail``, where ``tail`` is the compacted tokens from the first changed message to
the end of the previous request (messages new in this request are written either way), and saves
``read * saved`` on every later request, ``saved`` being the tokens the advance removes. It pays
back after ``(write - read) * tail / (read * saved)`` requests.

The rule: advance when that break-even comes within the requests expected before the next advance,
estimated as a quarter of the requests since the previous advance (``HORIZON_SHARE``; at least
``MIN_HORIZON``), or when a hard limit (the model's window less the answer's room) forces it; an
advance goes as far as the eager position (the one a filter advancing on every request would hold),
in one large step. Short requests, under the provider's ``min_tokens``, are judged the same way:
moving their prefix would keep them from ever building a cache once they pass it. A provider whose
writes cost no more than reads (``write <= read``) makes every advance free.

Statelessness: the boundary is a pure function of the request. Every earlier request of the
conversation is a prefix of this one (the history before each model answer), so the filter replays
the rule over those prefixes, oldest first, and lands where each earlier request landed: every
replica, and every later request, agrees on where the boundary stood, so the prefix stays identical
between advances.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from history_proxy.core.cost import ANTHROPIC, Pricing
from history_proxy.core.messages import Message
from history_proxy.core.windows import calibrated_limit
from history_proxy.filters.base import FilterContext

NOTICE_TOKENS = 16
"""About what a notice left in a compacted message's place costs (``Old environment output: ...``)."""
HORIZON_SHARE = 0.25
"""The requests an advance is expected to serve, as a share of the requests since the previous
advance (or since the start): the next interval is assumed a quarter as long as the last, a safety
factor of four against a conversation that ends soon after an advance (tuned on the corpus:
docs/cost.md)."""
MIN_HORIZON = 2
"""Requests an advance is assumed to serve at least (the current one and the next)."""


@dataclass(frozen=True)
class Item:
    """A compactable unit, oldest first: where its first message is and the tokens compacting it saves."""

    position: int
    saving: int


def request_points(messages: Sequence[Message]) -> list[int]:
    """The lengths of the requests this conversation was sent as: before each model answer that
    follows a non-assistant message, and the whole list (this request)."""
    points = [
        i
        for i in range(1, len(messages))
        if messages[i].get("role") == "assistant" and messages[i - 1].get("role") != "assistant"
    ]
    if not points or points[-1] != len(messages):
        points.append(len(messages))
    return points


def cumulative(token_counts: Sequence[int]) -> list[int]:
    """``out[i]`` is the tokens of the first ``i`` messages."""
    return list(accumulate(token_counts, initial=0))


def cost_boundary(
    messages: Sequence[Message],
    token_counts: Sequence[int],
    items: Sequence[Item],
    eager: Callable[[int, int], int],
    pricing: Pricing | None,
    hard_limit: int | None = None,
    keep: Callable[[int, int], bool] | None = None,
    kept: set[int] | None = None,
) -> int:
    """How many of the oldest ``items`` are compacted in the request ``messages``.

    ``eager(end, available)`` is how many items a filter advancing on every request would compact in
    the request of the first ``end`` messages, ``available`` of the items lying before ``end``; a
    request that, compacted up to the current boundary, holds more than ``hard_limit`` tokens moves
    the boundary to the eager count regardless of cost. ``keep(item, end)``: whether an advance made in
    the request of the first ``end`` messages leaves that item whole (it saves nothing then, stays whole
    for good, and an advance it alone would make is no advance); the items so kept are added to
    ``kept``. A forced advance keeps nothing whole.
    """
    prices = pricing or ANTHROPIC
    penalty = max(prices.write - prices.read, 0.0)
    cum = cumulative(token_counts)
    savings = cumulative([item.saving for item in items])
    boundary, last_advance, available, previous_end = 0, 0, 0, 0
    for number, end in enumerate(request_points(messages), start=1):
        end_before, previous_end = previous_end, end
        while available < len(items) and items[available].position < end:
            available += 1
        target = min(max(eager(end, available), boundary), available)
        if target <= boundary:
            continue
        kept_tokens = cum[end] - savings[boundary]
        must = hard_limit is not None and kept_tokens > hard_limit
        spared = {k for k in range(boundary, target) if keep(k, end)} if keep and not must else set()
        saved = savings[target] - savings[boundary] - sum(items[k].saving for k in spared)
        # what the advance rewrites: the compacted tokens between the first change and the end of the
        # previous request (messages new in this request are written either way)
        first = next((k for k in range(boundary, target) if k not in spared), target)
        if first == target:
            continue  # nothing would change
        tail = max(0, cum[end_before] - cum[items[first].position] - saved)
        horizon = max((number - last_advance) * HORIZON_SHARE, MIN_HORIZON)
        if must or penalty == 0.0 or prices.read * saved * horizon >= penalty * tail:
            boundary, last_advance = target, number
            if kept is not None:
                kept.update(spared)
    return boundary


def window_room(ctx: FilterContext) -> int | None:
    """The hard limit a cost trigger must respect: the model's window less the answer's room, if known."""
    if ctx.window is None:
        return None
    return calibrated_limit(ctx.window - ctx.reserve, ctx.token_ratio)
