"""The policy's history-free filters, for content the chain's view does not carry.

Some content reaches the upstream without passing the caller's chain: the new ``input`` items of a
Responses request whose history the provider holds (:mod:`history_proxy.surfaces.provider_held`), a
Responses request's ``instructions`` (kept whole by the view: :func:`instructions_through_policy`),
and the pinned messages of ``/v1/messages`` (:mod:`history_proxy.surfaces.messages_pinned`). The filters of the global
and tenant policies that read one message at a time (:data:`HISTORY_FREE`: ``remove_regex``, the
secret filter) still run over it, so a policy applies to everything the proxy forwards. Role chains,
budgets and cache marks do not apply there; in shadow mode nothing is changed.
"""

from __future__ import annotations

from typing import Any

from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.filters.base import Filter
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces._view import Shaped

HISTORY_FREE = ("remove_regex",)
"""Filter types that read one message at a time, so they apply to messages without their history."""
POLICY_LOCATIONS = ("policies.global[", "policies.tenants.")
"""The chain locations whose filters apply to every request of a tenant (not a role's view)."""
INSTRUCTIONS_FILTERED = "responses:instructions_filtered"
"""The note of a Responses request whose ``instructions`` the history-free filters changed."""


def history_free_filters(pipeline: Pipeline, identity: Identity) -> list[Filter]:
    """The history-free filters of ``identity``'s global and tenant policies (none in shadow mode)."""
    resolved = pipeline.resolve(identity.role, identity.tenant)
    if resolved.mode != "enforce":
        return []
    return [f for at, f in resolved.chain if at.startswith(POLICY_LOCATIONS) and f.type_name in HISTORY_FREE]


def through_history_free(
    pipeline: Pipeline,
    filters: list[Filter],
    messages: list[Message],
    identity: Identity,
    model: str,
    upstream: str | None,
    body: dict[str, Any],
) -> list[Message]:
    """``messages`` through ``filters``, in order (the same list when there are none)."""
    if not filters or not messages:
        return messages
    ctx = pipeline.context(identity, model, upstream, body=body)
    for filter_ in filters:
        messages = filter_.apply(messages, ctx)
    return messages


def stand_in() -> Message:
    """A message without content in place of one the filters must not edit (so ``keep_last`` counts it)."""
    return {"role": "user", "content": None}


def noted(shaped: Shaped, body: dict[str, Any], note: str, filters: list[Filter]) -> Shaped:
    """``shaped`` sending ``body``, its report noting ``note`` (and the filters, when its chain is empty)."""
    shaped.body = body
    shaped.result.body = body
    report = shaped.result.report
    report["notes"] = [*report.get("notes", []), note]
    report["chain"] = report.get("chain") or [f.type_name for f in filters]
    return shaped


def instructions_through_policy(
    pipeline: Pipeline, shaped: Shaped, identity: Identity, model: str, upstream: str | None
) -> Shaped:
    """``shaped`` (a Responses request) with its string ``instructions`` through the history-free
    global and tenant filters (the same object when they change nothing)."""
    instructions = shaped.body.get("instructions")
    filters = history_free_filters(pipeline, identity)
    if not filters or not isinstance(instructions, str):
        return shaped
    items = shaped.body.get("input")
    count = len(items) if isinstance(items, list) else 1
    views = [{"role": "system", "content": instructions}, *(stand_in() for _ in range(count))]
    sent = through_history_free(pipeline, filters, views, identity, model, upstream, shaped.body)
    text = sent[0].get("content")
    if text == instructions or not isinstance(text, str):
        return shaped
    return noted(shaped, {**shaped.body, "instructions": text}, INSTRUCTIONS_FILTERED, filters)
