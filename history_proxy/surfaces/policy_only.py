"""Bodies that carry a conversation but no chain's view: the global and tenant policies still apply.

``POST /v1/completions`` (a ``prompt``: a string or a list of strings) and ``POST /v1/messages/batches``
(``requests[].params``: whole Messages requests) are conversations too, and used to be forwarded raw,
so the global secret filter never saw them (issue 34, R4). Their surface rows
(:mod:`history_proxy.surfaces.table`) run :func:`completions` and :func:`batches`: the history-free
filters of ``policies.global`` and the caller's ``policies.tenants``
(:data:`~history_proxy.surfaces.history_free.HISTORY_FREE`, the secret filter) over every text, written
back in place. A role's chain does not apply: a legacy prompt has no turns to view, and a batch's
requests are answered later, outside this caller's conversation. In shadow mode nothing is changed.
Everything else in these bodies (token-array prompts, ``suffix``, ``custom_id``, every other field) is
forwarded as sent.
"""

from __future__ import annotations

from typing import Any

from history_proxy.core.identity import Identity
from history_proxy.core.messages import Message
from history_proxy.errors import InvalidRequestError
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces import messages
from history_proxy.surfaces._view import Shaped, View, unfiltered
from history_proxy.surfaces.history_free import history_free_filters, noted, through_history_free
from history_proxy.surfaces.messages_pinned import through_policy
from history_proxy.surfaces.messages_valid import valid_for_messages

POLICY_ONLY = "policy_only"
"""The note of every request on these routes (the role's chain does not apply)."""
FILTERED = "policy_only:filtered"
"""The note of a request whose text the global or tenant filters changed."""


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    return model if isinstance(model, str) else ""


def _shaped(
    pipeline: Pipeline, body: dict[str, Any], view: list[Message], identity: Identity, upstream: str | None
) -> Shaped:
    """``body`` forwarded with the figures of ``view`` and the note :data:`POLICY_ONLY`."""
    shaped = unfiltered(pipeline, body, View(view, []), _model(body), identity, upstream, "chat", "")
    shaped.result.report["notes"][-1] = POLICY_ONLY
    return shaped


def completions(pipeline: Pipeline, body: dict[str, Any], identity: Identity, upstream: str | None) -> Shaped:
    """A legacy completions body with each string ``prompt`` through the global and tenant filters."""
    prompt = body.get("prompt")
    prompts = [prompt] if isinstance(prompt, str) else prompt if isinstance(prompt, list) else []
    texts = [n for n, p in enumerate(prompts) if isinstance(p, str)]
    view: list[Message] = [{"role": "user", "content": prompts[n]} for n in texts]
    shaped = _shaped(pipeline, body, view, identity, upstream)
    filters = history_free_filters(pipeline, identity)
    sent = through_history_free(pipeline, filters, view, identity, _model(body), upstream, body)
    if sent is view:
        return shaped
    out = list(prompts)
    for n, message in zip(texts, sent, strict=True):
        content = message.get("content")
        out[n] = content if isinstance(content, str) else prompts[n]
    if out == prompts:
        return shaped
    written = out[0] if isinstance(prompt, str) else out
    return noted(shaped, {**body, "prompt": written}, FILTERED, filters)


def batches(pipeline: Pipeline, body: dict[str, Any], identity: Identity, upstream: str | None) -> Shaped:
    """A Messages batch with each request's ``params`` through the global and tenant filters, as a
    ``/v1/messages`` request's history-free content is (its view, ``system`` and pinned messages)."""
    requests = body.get("requests")
    if not isinstance(requests, list):
        return _shaped(pipeline, body, [], identity, upstream)
    filters = history_free_filters(pipeline, identity)
    out: list[Any] = []
    seen: list[Message] = []
    for n, request in enumerate(requests):
        params = request.get("params") if isinstance(request, dict) else None
        if not isinstance(params, dict) or not filters:
            out.append(request)
            continue
        filtered, view = _params(pipeline, params, identity, upstream, n)
        seen += view
        out.append(request if filtered is params else {**request, "params": filtered})
    shaped = _shaped(pipeline, body, seen, identity, upstream)
    if all(map(lambda a, b: a is b, out, requests)):
        return shaped
    return noted(shaped, {**body, "requests": out}, FILTERED, filters)


def _params(
    pipeline: Pipeline, params: dict[str, Any], identity: Identity, upstream: str | None, n: int
) -> tuple[dict[str, Any], list[Message]]:
    """One batch request's ``params`` through the history-free filters, and its view."""
    try:
        view = messages.to_view(params)
    except InvalidRequestError as exc:  # in Anthropic's words, at the request's place in the batch
        raise InvalidRequestError(
            f"requests.{n}.params.{exc.message}", param=f"requests.{n}.params"
        ) from None
    model = _model(params)
    filters = history_free_filters(pipeline, identity)
    sent = through_history_free(pipeline, filters, view.messages, identity, model, upstream, params)
    rebuilt = (
        params if sent is view.messages else valid_for_messages(params, messages.rebuild(params, view, sent))
    )
    shaped = unfiltered(pipeline, rebuilt, view, model, identity, upstream, "messages", "")
    shaped = through_policy(pipeline, shaped, identity, model, upstream)
    body = shaped.body
    return (params if body == params else body), view.messages
