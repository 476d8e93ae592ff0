"""The token report: its head (who, where, the chain, before and after, each filter) and the
figures of each side (messages, tokens, tokens by role).

Split from :mod:`history_proxy.pipeline.run`, which decides what is sent; this module only writes and counts
what it is handed, through the request's :class:`~history_proxy.core.tokens.TokenCounter`. Every report
starts as :func:`report_head` writes it, the chain's (:mod:`history_proxy.pipeline.run`) and that of a
request forwarded unshaped (:func:`history_proxy.surfaces._view.unfiltered`) alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.core.tokens import TokenCounter
from history_proxy.core.validation import check_messages


def report_head(
    identity: Identity,
    model: str | None,
    upstream: str | None,
    chain: list[str],
    before: dict[str, Any],
    after: dict[str, Any],
    filters: list[dict[str, Any]],
) -> dict[str, Any]:
    """The fields every report opens with, in this order; the caller adds ``limit``,
    ``failed_filter``, ``notes``, ``mode`` and ``forwarded`` where they apply."""
    return {
        "role": identity.role,
        "agent": identity.agent,
        "tenant": identity.tenant,
        "phase": identity.phase,
        "model": model,
        "upstream": upstream,
        "chain": chain,
        "before": before,
        "after": after,
        "filters": filters,
    }


def by_role(messages: Sequence[Message], counts: Sequence[int]) -> dict[str, int]:
    """Tokens per role (a role that is not a string is reported by its text)."""
    by_role: dict[str, int] = {}
    for message, tokens in zip(messages, counts, strict=True):
        role = message.get("role")
        if role.__class__ is not str:
            role = str(role)
        by_role[role] = by_role.get(role, 0) + tokens
    return by_role


def side(counter: TokenCounter, messages: Sequence[Message]) -> dict[str, Any]:
    """One side of the report (before or after the chain): messages, tokens, tokens by role."""
    return side_of(messages, by_role(messages, counter.each(messages)))


def side_of(messages: Sequence[Message], by_role: dict[str, int]) -> dict[str, Any]:
    """One side of the report from counts already taken (3 more tokens for the reply priming)."""
    return {"messages": len(messages), "tokens": sum(by_role.values()) + 3, "tokens_by_role": by_role}


def checked_side(
    counter: TokenCounter, messages: list[Any], counted: list[int | None] | None
) -> dict[str, Any]:
    """:func:`request_messages`' checks of every message and the tokens before the chain, in one walk.

    The messages of the plain shape are checked and counted together (:meth:`TokenCounter.each_plain`,
    or ``counted`` by the caller); the others are checked in full, in order, and counted the usual way.
    """
    if counted is None or len(counted) != len(messages):
        counts = counter.each_plain(messages)
    else:
        counts = counter.remember(messages, counted)
    if None in counts:
        check_messages(messages, counts)
        return side(counter, messages)
    return side_of(messages, by_role(messages, counts))  # type: ignore[arg-type]
