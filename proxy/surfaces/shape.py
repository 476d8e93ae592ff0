"""One entry for every surface: which surface a body is, and its native request after the caller's chain.

``shape(surface, pipeline, body, identity, upstream)`` runs the chain over the surface's view and
rebuilds the native body (:mod:`proxy.surfaces.responses`, :mod:`proxy.surfaces.messages`); chat
completions are the view itself and go through :meth:`proxy.pipeline.run.Pipeline.run` directly.
"""

from __future__ import annotations

from typing import Any, Literal

from proxy.core.identity import Identity
from proxy.errors import InvalidRequestError
from proxy.pipeline.run import Pipeline
from proxy.surfaces import messages, responses
from proxy.surfaces._view import REF, Shaped, run_view, unfiltered
from proxy.surfaces.history_free import instructions_through_policy
from proxy.surfaces.marks import place_marks
from proxy.surfaces.memo import ViewMemo
from proxy.surfaces.messages_pinned import through_policy
from proxy.surfaces.messages_valid import valid_for_messages
from proxy.surfaces.provider_held import provider_held

Surface = Literal["chat", "responses", "messages"]
SURFACES: tuple[Surface, ...] = ("chat", "responses", "messages")
PATHS: dict[Surface, str] = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}
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

NOTHING_TO_SHAPE = "messages:no_user_or_assistant_message"
"""The note of a Messages request whose messages are all pinned (forwarded unfiltered)."""

SPEAKS: dict[str, frozenset[Surface]] = {
    "openai": frozenset({"chat", "responses"}),
    "anthropic": frozenset({"chat", "messages"}),
}
"""The surfaces an upstream of each ``api`` serves (Anthropic also serves OpenAI-compatible chat)."""


def detect(body: Any) -> Surface:
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
        return detect(body)
    if name not in SURFACES:
        raise InvalidRequestError(f"unknown api {name!r}: use one of {', '.join(SURFACES)}", param="api")
    return name


def as_chat(surface: Surface, body: Any) -> Any:
    """A body of any surface as a chat-completions body of its view (for replays); chat bodies as they are."""
    if surface == "chat" or not isinstance(body, dict):
        return body
    view = (responses.to_view(body) if surface == "responses" else messages.to_view(body)).messages
    plain = [{key: value for key, value in m.items() if key != REF} for m in view]
    return {"model": body.get("model") or "", "messages": plain}


async def preview(pipeline: Pipeline, body: Any, identity: Identity, api: str | None = None) -> Shaped:
    """``body`` (of the surface ``api``, or detected) after the caller's chain, routed by its model."""
    model = body.get("model") if isinstance(body, dict) else None
    upstream = pipeline.config.route(model if isinstance(model, str) else "")[0]
    return await shape(surface_named(api, body), pipeline, body, identity, upstream)


async def shape(
    surface: Surface,
    pipeline: Pipeline,
    body: Any,
    identity: Identity,
    upstream: str | None,
    memo: ViewMemo | None = None,
) -> Shaped:
    """The native body to send for ``body`` after ``identity``'s chain, and what the chain did.

    ``memo``: the views of recent conversations, so a request converts only what its previous one
    did not have (:mod:`proxy.surfaces.memo`).
    """
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        wording = (
            "model: Input should be a valid string" if surface == "messages" else "'model' must be a string"
        )
        raise InvalidRequestError(wording, param="model")  # Anthropic's words on its surface
    model = model or ""
    if memo is not None and memo.max_messages == 0:
        memo = None
    if surface == "chat":
        result = await pipeline.run(body, identity, upstream)
        return Shaped(result.body, result)
    if surface == "responses":
        view = responses.to_view(body, pipeline.tokens.get(model=model), memo)
        state = responses.provider_state(body)
        if state is not None:
            return provider_held(pipeline, body, view, model, identity, upstream, state)
        if not view.messages:  # no history to shape (an empty or absent input): the upstream judges
            shaped = unfiltered(pipeline, body, view, model, identity, surface, "no_input")
            return instructions_through_policy(pipeline, shaped, identity, model, upstream)
        shaped = await run_view(
            pipeline,
            view,
            model,
            identity,
            upstream,
            lambda sent: responses.rebuild(body, view, sent),
            surface,
        )
        return instructions_through_policy(pipeline, shaped, identity, model, upstream)
    view = messages.to_view(body, pipeline.tokens.get(model=model), memo)
    if not view.messages:  # only pinned messages: nothing a chain may shape, forwarded as it came
        shaped = unfiltered(pipeline, body, view, model, identity, surface, "")
        shaped.result.report["notes"][-1] = NOTHING_TO_SHAPE
        return through_policy(pipeline, shaped, identity, model, upstream)
    shaped = await run_view(
        pipeline,
        view,
        model,
        identity,
        upstream,
        lambda sent: valid_for_messages(body, messages.rebuild(body, view, sent)),
        surface,
    )
    shaped = through_policy(pipeline, shaped, identity, model, upstream)  # the pinned messages' text
    slot = pipeline.config.cache_control
    target = pipeline.config.upstreams.get(upstream or "")
    if slot is not None and target is not None and target.cache_control and shaped.result.mode == "enforce":
        shaped.body = place_marks(shaped.body, slot, unmarked_messages=view.first_mark is None)
        shaped.result.body = shaped.body
    return shaped
