"""The Responses and Messages routes: the chat path's machinery over each surface's own body.

``POST /v1/responses``, ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` read the caller,
run its chain over the surface's view (:func:`proxy.surfaces.shape.shape`), forward the rebuilt
native body on the surface it came in on, and relay the answer raw (JSON, or each API's own SSE
events), with the same ``x-history-*`` headers, metrics and access line as chat completions, and
the same one retry of a request the upstream refused as too long (:mod:`proxy.server.overflow`). A
route that sends a surface to an upstream that does not speak it is answered 400. Errors on the
Messages routes are written in Anthropic's error shape (``proxy.errors.ERROR_SHAPES["anthropic"]``,
picked by :func:`error_surface`). The edge calls :func:`surface_call` under any root path; the
router never sees these routes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.config.models import Config
from proxy.errors import ANTHROPIC, OPENAI, InvalidRequestError
from proxy.pipeline.headers import history_headers
from proxy.pipeline.run import PipelineResult
from proxy.server.body import encode_json
from proxy.server.edge import Call, Outgoing
from proxy.server.overflow import RETRY_HEADER, retry_if_overflow
from proxy.server.warm import counted_off_loop, read_request
from proxy.surfaces.shape import PATHS, SPEAKS, Surface, shape, surface_named

if TYPE_CHECKING:
    from proxy.server.app import _Proxy

ANTHROPIC_VERSION = "2023-06-01"
"""Sent to ``api: anthropic`` upstreams when the client named no ``anthropic-version``."""


def is_anthropic_path(path: str) -> bool:
    """Whether errors on ``path`` are written in Anthropic's shape."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def error_surface(path: str) -> str:
    """The API surface whose error shape answers errors on ``path`` (below any root path)."""
    return ANTHROPIC if is_anthropic_path(path) else OPENAI


def check_speaks(config: Config, surface: Surface, names: list[str]) -> None:
    """A 400 when the route sends ``surface`` to an upstream whose ``api`` does not serve it."""
    for name in names:
        upstream = config.upstreams[name]
        if not upstream.is_mock and surface not in SPEAKS[upstream.api]:
            raise InvalidRequestError(
                f"the route for this model sends {PATHS[surface]} to upstream {name!r}, whose api is "
                f"{upstream.api!r} and does not serve it; route the model to an upstream that speaks it "
                "(upstreams.<name>.api), this proxy does not translate between APIs",
                code="surface_not_served",
            )


ROUTES: dict[str, tuple[Surface, str]] = {
    "/v1/responses": ("responses", "/responses"),
    "/v1/messages": ("messages", "/messages"),
    "/v1/messages/count_tokens": ("messages", "/messages/count_tokens"),
}
"""Each route's surface and the upstream path it is forwarded to."""


async def surface_call(proxy: _Proxy, call: Call, route: str) -> Outgoing:
    """One Responses or Messages request on ``route`` (its path below any root path): shaped,
    forwarded, answered."""
    surface, path = ROUTES[route]
    config = call.state.config
    exchange = proxy.begin(call)
    identity = proxy.identify(call, exchange)
    body = await read_request(call, "input" if surface == "responses" else "messages")
    names = proxy._route(call, body, exchange)
    check_speaks(config, surface, names)
    exchange.stream = body.get("stream") is True
    if config.log_bodies:
        exchange.body = body
    memo = call.state.views.for_tenant(identity.tenant)  # tenants never share a memo entry
    pipeline = call.state.pipeline
    shaped = await counted_off_loop(
        lambda: shape(surface, pipeline, body, identity, names[0], memo), body, proxy.tokens
    )
    if memo.max_messages:
        proxy.metrics.observe_memo(surface, shaped.reused, shaped.converted, memo.held)
    exchange.result = shaped.result.without_messages()
    content = encode_json(shaped.body)
    headers = call.header_items
    if surface == "messages" and "anthropic-version" not in call.headers:
        headers = [*headers, ("anthropic-version", ANTHROPIC_VERSION)]
    reply = await proxy._open(call, exchange, path, names, content, headers)
    answer = history_headers(shaped.result, identity.role)
    if route != "/v1/messages/count_tokens":  # a count is never refused for length
        retried = await retry_if_overflow(
            reply,
            content,
            lambda fitted: proxy._open(call, exchange, path, [reply.upstream], fitted, headers),
            config=config,
            tokens=proxy.tokens,
            metrics=proxy.metrics,
            exchange=exchange,
            surface=surface,
        )
        if retried is not None:
            reply, answer[RETRY_HEADER] = retried[0], str(retried[1])
    reply.surface = surface
    return await proxy._respond(reply, exchange, answer)


async def previewed(
    call: Call, body: Any, identity: Any, upstream: str
) -> tuple[dict[str, Any], PipelineResult]:
    """The preview of a body of any surface (``?api=chat|responses|messages``, or detected)."""
    surface = surface_named(_query_api(call.query), body)
    check_speaks(call.state.config, surface, [upstream])
    pipeline = call.state.pipeline
    shaped = await counted_off_loop(
        lambda: shape(surface, pipeline, body, identity, upstream), body, pipeline.tokens
    )
    return shaped.body, shaped.result


def _query_api(query: str) -> str | None:
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name == "api":
            return value
    return None
