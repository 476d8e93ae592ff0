"""One entry for every surface: which surface a body is, and its native request after the caller's chain.

``shape(surface, pipeline, body, identity, upstream)`` runs the chain over the surface's view and
rebuilds the native body with the surface's own adapter (its row in :mod:`history_proxy.surfaces.table`);
chat completions are the view itself and go through :meth:`history_proxy.pipeline.run.Pipeline.run`.
"""

from __future__ import annotations

from typing import Any

from history_proxy.core.identity import Identity
from history_proxy.errors import InvalidRequestError
from history_proxy.pipeline.run import Pipeline
from history_proxy.surfaces import breakpoints
from history_proxy.surfaces._view import REF, Shaped, run_view, unfiltered
from history_proxy.surfaces.marks import place_marks
from history_proxy.surfaces.memo import ViewMemo
from history_proxy.surfaces.provider_held import provider_held
from history_proxy.surfaces.table import BY_NAME, NAMES, Surface, SurfaceName, surface_of

__all__ = ["Surface", "SurfaceName", "as_chat", "detect", "preview", "shape", "surface_named"]

ANTHROPIC_ONLY_KEYS = frozenset({"system", "stop_sequences", "thinking", "top_k", "anthropic_version"})
ANTHROPIC_BLOCKS = (
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "document",
    "image",
    "server_tool_use",
)
"""A tuple, not a set: a hostile block ``type`` may be unhashable."""


def detect(body: Any) -> SurfaceName:
    """Which surface a request body is written for (for previews and replays that are not told)."""
    if not isinstance(body, dict):
        return "chat"
    if "messages" not in body and ("input" in body or "instructions" in body):
        return "responses"
    if not ANTHROPIC_ONLY_KEYS.isdisjoint(body):
        return "messages"
    chat = body.get("messages")
    if isinstance(chat, list):
        for message in chat:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list) and any(
                isinstance(block, dict) and block.get("type") in ANTHROPIC_BLOCKS for block in content
            ):
                return "messages"
    return "chat"


def surface_named(name: str | None, body: Any) -> Surface:
    """The surface ``name`` (``chat``, ``responses``, ``messages``), or the detected one when none is given."""
    if name is None or name == "":
        return BY_NAME[detect(body)]
    if name not in NAMES:
        raise InvalidRequestError(f"unknown api {name!r}: use one of {', '.join(NAMES)}", param="api")
    return BY_NAME[name]


def as_chat(surface: Surface | str, body: Any) -> Any:
    """A body of any surface as a chat-completions body of its view (for replays); chat bodies as they are."""
    to_view = surface_of(surface).to_view
    if to_view is None or not isinstance(body, dict):
        return body
    view = to_view(body, None, None).messages
    plain = [{key: value for key, value in m.items() if key != REF} for m in view]
    return {"model": body.get("model") or "", "messages": plain}


async def preview(pipeline: Pipeline, body: Any, identity: Identity, api: str | None = None) -> Shaped:
    """``body`` (of the surface ``api``, or detected) after the caller's chain, routed by its model."""
    model = body.get("model") if isinstance(body, dict) else None
    upstream = pipeline.config.route(model if isinstance(model, str) else "")[0]
    return await shape(surface_named(api, body), pipeline, body, identity, upstream)


async def shape(
    surface: Surface | str,
    pipeline: Pipeline,
    body: Any,
    identity: Identity,
    upstream: str | None,
    memo: ViewMemo | None = None,
    *,
    model: str | None = None,
) -> Shaped:
    """The native body to send for ``body`` after ``identity``'s chain, and what the chain did.

    ``surface``: a row of :mod:`history_proxy.surfaces.table`, or an API's name. ``memo``: the views of
    recent conversations, so a request converts only what its previous one did not have
    (:mod:`history_proxy.surfaces.memo`). ``model``: the model the route names (Gemini's path), when
    the body names none.
    """
    surface = surface_of(surface)
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    if model is None:
        model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequestError(surface.model_type_error, param="model")
    model = model or ""
    if surface.policy_only is not None:  # no chain's view: the global and tenant policies only
        return surface.policy_only(pipeline, body, identity, upstream)
    if memo is not None and memo.max_messages == 0:
        memo = None
    to_view, rebuild = surface.to_view, surface.rebuild
    if to_view is None or rebuild is None:  # chat completions: the body is its own view
        result = await pipeline.run(body, identity, upstream)
        return _breakpoints(pipeline, Shaped(result.body, result), upstream, identity, "messages")
    view = to_view(body, pipeline.tokens.get(model=model), memo)
    state = surface.provider_state(body) if surface.provider_state is not None else None
    if state is not None:
        return provider_held(pipeline, body, view, model, identity, upstream, state)
    if not view.messages:  # nothing a chain may shape: forwarded as it came, the upstream judges
        shaped = _unshaped(surface, pipeline, body, view, model, identity, upstream)
        return _through_policy(surface, pipeline, shaped, identity, model, upstream)
    validate = surface.validate
    shaped = await run_view(
        pipeline,
        view,
        model,
        identity,
        upstream,
        (lambda sent: rebuild(body, view, sent))
        if validate is None
        else (lambda sent: validate(body, rebuild(body, view, sent))),
        surface.name,
    )
    shaped = _through_policy(surface, pipeline, shaped, identity, model, upstream)
    if surface.native_marks:
        _mark(pipeline, shaped, upstream, unmarked_messages=view.first_mark is None)
    elif surface.name == "responses":
        _breakpoints(pipeline, shaped, upstream, identity, "input")
    return shaped


def _through_policy(
    surface: Surface, pipeline: Pipeline, shaped: Shaped, identity: Identity, model: str, upstream: str | None
) -> Shaped:
    """``shaped`` with the content the view does not carry through the history-free policy filters."""
    if surface.through_policy is None:
        return shaped
    return surface.through_policy(pipeline, shaped, identity, model, upstream)


def _unshaped(
    surface: Surface,
    pipeline: Pipeline,
    body: dict[str, Any],
    view: Any,
    model: str,
    identity: Identity,
    upstream: str | None,
) -> Shaped:
    """A request whose view is empty, forwarded unfiltered with its surface's note."""
    shaped = unfiltered(pipeline, body, view, model, identity, upstream, surface.name, "")
    shaped.result.report["notes"][-1] = surface.empty_note
    return shaped


def _breakpoints(
    pipeline: Pipeline, shaped: Shaped, upstream: str | None, identity: Identity, list_key: str
) -> Shaped:
    """``shaped`` after the upstream's OpenAI cache breakpoint mode (enforce mode; chat and Responses)."""
    target = pipeline.config.upstreams.get(upstream or "")
    if target is None or target.breakpoints == "forward" or shaped.result.mode != "enforce":
        return shaped
    body = breakpoints.apply(shaped.body, pipeline.config.cache_control, target, identity, list_key)
    if body is not shaped.body:
        shaped.body = shaped.result.body = body
    return shaped


def _mark(pipeline: Pipeline, shaped: Shaped, upstream: str | None, *, unmarked_messages: bool) -> None:
    """Native ``cache_control`` marks on ``shaped``'s body, for an upstream that takes them (enforce mode)."""
    slot = pipeline.config.cache_control
    target = pipeline.config.upstreams.get(upstream or "")
    if slot is not None and target is not None and target.cache_control and shaped.result.mode == "enforce":
        shaped.body = place_marks(shaped.body, slot, unmarked_messages=unmarked_messages)
        shaped.result.body = shaped.body
