"""Responses requests whose history lives at the provider: the new input items still pass the policy.

With ``previous_response_id`` or ``conversation`` the provider holds the history, so no history filter
can apply and the request goes out unfiltered (note ``history_at_provider:<key>``). The new ``input``
items it carries are still the caller's content: the filters of the global and tenant policies that
need no history (:data:`history_proxy.surfaces.history_free.HISTORY_FREE`: ``remove_regex``, the secret
filter) run over them and over ``instructions``, as on any other request, and the items are written
back in place. Role chains,
budgets and cache marks do not apply (they are about a history this request does not carry). In
shadow mode nothing is changed.
"""

from __future__ import annotations

from typing import Any

from history_proxy.core.identity import Identity
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces import responses
from history_proxy.surfaces._view import Shaped, View, unfiltered
from history_proxy.surfaces.history_free import (
    history_free_filters,
    instructions_through_policy,
    noted,
    through_history_free,
)

NEW_ITEMS_FILTERED = "history_at_provider:new_items_filtered"
"""The note of a request whose new input items the history-free filters changed."""


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
    filters = history_free_filters(pipeline, identity)
    sent = through_history_free(pipeline, filters, view.messages, identity, model, upstream, body)
    rebuilt = body if sent is view.messages else responses.rebuild(body, view, sent)
    shaped = unfiltered(pipeline, body, view, model, identity, upstream, "responses", why)
    if rebuilt is not body and rebuilt != body:  # an edit of the instructions alone rebuilds the same items
        shaped = noted(shaped, rebuilt, NEW_ITEMS_FILTERED, filters)
    return instructions_through_policy(pipeline, shaped, identity, model, upstream)
