"""The Responses and Messages routes: the chat path's machinery over each surface's own body.

``POST /v1/responses``, ``POST /v1/messages`` and ``POST /v1/messages/count_tokens`` read the caller,
run its chain over the surface's view (:func:`proxy.surfaces.shape.shape`), forward the rebuilt
native body on the surface it came in on, and relay the answer raw (JSON, or each API's own SSE
events), with the same ``x-history-*`` headers, metrics and access line as chat completions. A
route that sends a surface to an upstream that does not speak it is answered 400. Errors on the
Messages routes are written in Anthropic's error shape (:func:`anthropic_error_body`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.routing import Route

from proxy.errors import InvalidRequestError, ProxyError
from proxy.pipeline.headers import history_headers
from proxy.pipeline.run import PipelineResult
from proxy.server.body import encode_json, parse_body, read_body
from proxy.server.edge import Answer, Call
from proxy.surfaces.shape import PATHS, SPEAKS, Surface, shape, surface_named

if TYPE_CHECKING:
    from proxy.server.app import _Proxy

ANTHROPIC_VERSION = "2023-06-01"
"""Sent to ``api: anthropic`` upstreams when the client named no ``anthropic-version``."""

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` as the Anthropic API answers errors."""
    error_type = _ANTHROPIC_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": error_type, "message": message}}


def is_anthropic_path(path: str) -> bool:
    """Whether errors on ``path`` are written in Anthropic's shape."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def check_speaks(proxy: _Proxy, surface: Surface, names: list[str]) -> None:
    """A 400 when the route sends ``surface`` to an upstream whose ``api`` does not serve it."""
    for name in names:
        upstream = proxy.config.upstreams[name]
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


async def surface_call(proxy: _Proxy, call: Call, route: str | None = None) -> Answer:
    """One Responses or Messages request on ``route`` (default ``call.path``): shaped, forwarded, answered."""
    surface, path = ROUTES[route or call.path]
    exchange = proxy.begin(call)
    identity = proxy.identify(call, exchange)
    body = parse_body(await read_body(call.headers, call.stream(), proxy.config.limits.max_body_bytes))
    names = proxy._route(body, exchange)
    check_speaks(proxy, surface, names)
    exchange.stream = body.get("stream") is True
    if proxy.config.log_bodies:
        exchange.body = body
    shaped = await shape(surface, proxy.pipeline, body, identity, names[0])
    exchange.result = shaped.result.without_messages()
    content = encode_json(shaped.body)
    headers = call.header_items
    if surface == "messages" and "anthropic-version" not in call.headers:
        headers = [*headers, ("anthropic-version", ANTHROPIC_VERSION)]
    exchange.upstream_started = time.perf_counter()
    reply = await proxy.upstreams.open(
        call.method, path, query=call.query, headers=headers, names=names, body=content
    )
    return await proxy._respond(reply, exchange, history_headers(shaped.result, identity.role))


def surface_routes(proxy: _Proxy) -> list[Route]:
    """The routes of the Responses and Messages surfaces, for the app's router."""

    def handler(route: str) -> Callable[[Request], Awaitable[Answer]]:
        async def handle(request: Request) -> Answer:  # under a root path; otherwise the edge calls it
            return await surface_call(proxy, Call.of(request), route)

        return handle

    return [Route(route, handler(route), methods=["POST"]) for route in ROUTES]


async def previewed(
    proxy: _Proxy, call: Call, body: Any, identity: Any, upstream: str
) -> tuple[dict[str, Any], PipelineResult]:
    """The preview of a body of any surface (``?api=chat|responses|messages``, or detected)."""
    surface = surface_named(_query_api(call.query), body)
    shaped = await shape(surface, proxy.pipeline, body, identity, upstream)
    return shaped.body, shaped.result


def _query_api(query: str) -> str | None:
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name == "api":
            return value
    return None


def error_json(path: str, exc: ProxyError) -> dict[str, Any]:
    """A ``ProxyError`` body in the shape of the surface ``path`` belongs to."""
    return anthropic_error_body(exc.status_code, exc.message) if is_anthropic_path(path) else exc.body()
