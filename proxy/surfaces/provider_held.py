"""Responses requests whose history lives at the provider: the new input items still pass the policy.

With ``previous_response_id`` or ``conversation`` the provider holds the history, so no history filter
can apply and the request goes out unfiltered (note ``history_at_provider:<key>``). The new ``input``
items it carries are still the caller's content: the filters of the global and tenant policies that
need no history (:data:`HISTORY_FREE`: ``remove_regex``, the secret filter) run over them, as on any
other request, and the items are written back in place. Role chains, budgets and cache marks do not
apply (they are about a history this request does not carry). In shadow mode nothing is changed.
"""

from __future__ import annotations

from typing import Any

from proxy.core.identity import Identity
from proxy.pipeline.run import Pipeline
from proxy.surfaces import responses
from proxy.surfaces._view import Shaped, View, unfiltered

HISTORY_FREE = ("remove_regex",)
"""Filter types that read one message at a time, so they apply to new items without their history."""
POLICY_LOCATIONS = ("policies.global[", "policies.tenants.")
"""The chain locations whose filters apply to every request of a tenant (not a role's view)."""


def provider_held(
    pipeline: Pipeline,
    body: dict[str, Any],
    view: View,
    model: str,
    identity: Identity,
    upstream: str | None,
    why: str,
) -> Shaped:
    """``body`` with its new input items through the history-free global and tenant filters."""
    resolved = pipeline.resolve(identity.role, identity.tenant)
    filters = [
        f for at, f in resolved.chain if at.startswith(POLICY_LOCATIONS) and f.type_name in HISTORY_FREE
    ]
    sent = view.messages
    if filters and resolved.mode == "enforce" and sent:
        ctx = pipeline.context(identity, model, upstream, body=body)
        for filter_ in filters:
            sent = filter_.apply(sent, ctx)
    rebuilt = body if sent is view.messages else responses.rebuild(body, view, sent)
    shaped = unfiltered(pipeline, rebuilt, view, model, identity, "responses", why)
    if rebuilt is not body:
        shaped.result.report["notes"].append("history_at_provider:new_items_filtered")
        shaped.result.report["chain"] = [f.type_name for f in filters]
    return shaped
