"""The one handler of every shaped request: chat completions, Responses, Messages, ``count_tokens``, preview.

:func:`handle` serves a request of any :class:`~history_proxy.surfaces.table.Surface` (the edge picks the
row by its route, under any root path; the router never sees these routes) in one path:

1. identity: the request's record and the caller's role, agent and tenant;
2. body: read (parsed off the event loop when large), the ``model`` routed to the upstreams the
   caller's key may reach, and refused with a 400 when one of them does not speak the surface;
3. shaping: the caller's chain over the surface's view, rebuilt as its native body
   (:func:`history_proxy.surfaces.shape.shape`), tokenized off the loop past a budget;
4. fallbacks: a fallback upstream that places other cache marks gets the chain run again for it;
5. relay: the body sent with the surface's default headers, the answer relayed raw with the
   ``x-history-*`` headers, and a refusal for length fitted and retried once when the surface refits
   (:mod:`history_proxy.server.overflow`).

A preview (:func:`preview`, ``POST /v1/history/preview``) runs steps 1 to 3 on the surface
``?api=`` names (or the one its body is written for) and answers the shaped body and report instead
of forwarding it.
"""

from __future__ import annotations

from history_proxy.config.models import Config
from history_proxy.core.identity import Identity
from history_proxy.errors import InvalidRequestError
from history_proxy.observability.metrics import Exchange
from history_proxy.pipeline.headers import history_headers
from history_proxy.pipeline.run import PipelineResult
from history_proxy.server.body import encode_json
from history_proxy.server.edge import Call, Outgoing, Whole, route_path
from history_proxy.server.forwarding import Forwarder
from history_proxy.server.overflow import RETRY_HEADER, retry_if_overflow
from history_proxy.server.warm import counted_off_loop, read_request
from history_proxy.surfaces.shape import shape, surface_named
from history_proxy.surfaces.table import BY_NAME, Surface, path_model, upstream_path_of
from history_proxy.upstream.client import Body
from history_proxy.upstream.headers import query_without_key


def check_speaks(config: Config, surface: Surface, names: list[str]) -> None:
    """A 400 when the route sends ``surface`` to an upstream whose ``api`` does not serve it."""
    for name in names:
        upstream = config.upstreams[name]
        if not upstream.is_mock and upstream.api not in surface.served_by:
            raise InvalidRequestError(
                f"the route for this model sends {BY_NAME[surface.name].upstream_path} to upstream "
                f"{name!r}, whose api is {upstream.api!r} and does not serve it; route the model to an "
                "upstream that speaks it (upstreams.<name>.api), this proxy does not translate between APIs",
                code="surface_not_served",
            )


async def handle(fwd: Forwarder, call: Call, surface: Surface) -> Outgoing:
    """One request on ``surface``'s route: shaped, forwarded, answered."""
    exchange = fwd.begin(call)
    identity = fwd.identify(call, exchange)
    model = path_model(surface, route_path(call.scope))
    names, content, result = await _shaped(fwd, call, exchange, identity, surface, model)
    sent = call.header_items
    missing = [(name, value) for name, value in surface.default_headers if name not in call.headers]
    if missing:
        sent = [*sent, *missing]
    path = upstream_path_of(surface, model)
    config = call.state.config
    query = (
        query_without_key(call.query, config.upstreams[names[0]], bool(config.auth.keys))
        if surface.key_in_query
        else None
    )
    reply = await fwd.open(call, exchange, path, names, content, sent, query)
    answer = history_headers(result, identity.role)
    if surface.refits:
        retried = await retry_if_overflow(
            reply,
            content,
            lambda fitted: fwd.open(call, exchange, path, [reply.upstream], fitted, sent),
            config=call.state.config,
            tokens=fwd.tokens,
            metrics=fwd.metrics,
            exchange=exchange,
            surface=surface,
        )
        if retried is not None:
            reply, answer[RETRY_HEADER] = retried[0], str(retried[1])
    reply.stream_error = surface.stream_error
    return await fwd.respond(reply, exchange, answer)


async def _shaped(
    fwd: Forwarder, call: Call, exchange: Exchange, identity: Identity, surface: Surface, model: str = ""
) -> tuple[list[str], Body, PipelineResult]:
    """The upstreams to try, the shaped body (encoded) and what the chain did.

    Only the encoded body and the chain's figures outlive this call: the parsed messages are freed
    before the upstream is reached (in a burst, thousands of requests wait there at once), unless a
    fallback upstream places other cache marks and needs the chain run again.
    """
    config, pipeline = call.state.config, call.state.pipeline
    body = await read_request(call, surface.history)
    names = fwd.route(call, {"model": model} if model else body, exchange)
    check_speaks(config, surface, names)
    exchange.read(body, keep=config.log_bodies, stream=surface.streams)
    memo = None if surface.body_is_view else call.state.views.for_tenant(identity.tenant)
    named = model or None
    shaped = await counted_off_loop(
        lambda: shape(surface, pipeline, body, identity, names[0], memo, model=named), body, fwd.tokens
    )
    if memo is not None and memo.max_messages:  # tenants never share a memo entry
        fwd.metrics.observe_memo(surface.name, shaped.reused, shaped.converted, memo.held)
    content = encode_json(shaped.body)
    kept = exchange.shaped(shaped.result.without_messages())
    marks = config.upstreams[names[0]].cache_control
    if all(config.upstreams[name].cache_control == marks for name in names[1:]):
        return names, content, kept

    async def body_for(name: str) -> bytes:
        if config.upstreams[name].cache_control == marks:
            return content
        return encode_json(
            (await shape(surface, pipeline, body, identity, name, model=named)).body
        )  # other marks

    return names, body_for, kept


async def preview(fwd: Forwarder, call: Call) -> Outgoing:
    """``POST /v1/history/preview``: the body of any surface (``?api=chat|responses|messages``, or
    detected) after the caller's chain, with the report, routed as if forwarded but not forwarded."""
    exchange = fwd.begin(call)
    identity = fwd.identify(call, exchange)
    body = await read_request(call)
    # the caller's scope, as if forwarded (docs/hardening.md), recorded as going nowhere
    names = fwd.route(call, body, exchange, forward=False)
    surface = surface_named(_query_api(call.query), body)
    check_speaks(call.state.config, surface, names[:1])
    pipeline = call.state.pipeline
    shaped = await counted_off_loop(
        lambda: shape(surface, pipeline, body, identity, names[0]), body, pipeline.tokens
    )
    result = exchange.shaped(shaped.result)
    headers = {**history_headers(result, identity.role), "x-request-id": exchange.request_id}
    content = encode_json({"body": shaped.body, "report": result.report})  # a lone "\ud800" stays escaped
    answer = Whole(200, content)
    answer.headers += [(b"content-type", b"application/json")]
    answer.headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    fwd.finish(exchange, 200)
    return answer


def _query_api(query: str) -> str | None:
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name == "api":
            return value
    return None
