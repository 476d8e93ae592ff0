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
from history_proxy.server import compaction_route
from history_proxy.server.body import encode_json
from history_proxy.server.compaction_route import Compacting
from history_proxy.server.context_standards import (
    Standards,
    answer_rewrite,
    pause_answer,
    same_mode_fallbacks,
    standards,
)
from history_proxy.server.edge import Call, Outgoing, Whole, route_path
from history_proxy.server.forwarding import Forwarder
from history_proxy.server.overflow import RETRY_HEADER, retry_if_overflow
from history_proxy.server.warm import counted_off_loop, read_request
from history_proxy.surfaces.compaction_answer import InlineCompaction
from history_proxy.surfaces.context_management import FIELD, with_beta
from history_proxy.surfaces.shape import shape, surface_named
from history_proxy.surfaces.table import BY_NAME, Surface, path_model, upstream_path_of
from history_proxy.upstream.client import Body
from history_proxy.upstream.headers import query_without_key
from history_proxy.upstream.reply import AnswerRewrite


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
    names, content, result, managed, compacting = await _shaped(fwd, call, exchange, identity, surface, model)
    own = pause_answer(managed) if managed is not None else None
    if own is not None:  # compacted with pause_after_compaction: the proxy's own answer, nothing sent
        return _answered(fwd, exchange, history_headers(result, identity.role), *own)
    if compacting is not None and compacting.local is not None:  # answered by the proxy (emulated)
        return _local(fwd, exchange, compacting.local, history_headers(result, identity.role))
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
    rewrite: AnswerRewrite | None = None
    if compacting is not None and compacting.item is not None:  # compacted inline: the item answered
        rewrite = InlineCompaction(compacting.item)
    if managed is not None:
        sent = with_beta(sent, managed.managed.beta)
        rewrite = await answer_rewrite(
            managed, surface, lambda body: fwd.open(call, exchange, path, names, body, sent, query)
        )
    reply = await fwd.open(call, exchange, path, names, content, sent, query)
    reply.rewrite = rewrite
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
            reply.rewrite = rewrite
    reply.stream_error = surface.stream_error
    return await fwd.respond(reply, exchange, answer)


def _local(fwd: Forwarder, exchange: Exchange, answer: Whole, headers: dict[str, str]) -> Whole:
    """An answer the proxy wrote itself, with the ``x-history-*`` headers and the request id."""
    headers = {**headers, "x-request-id": exchange.request_id}
    answer.headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    fwd.finish(exchange, answer.status)
    return answer


async def _shaped(
    fwd: Forwarder, call: Call, exchange: Exchange, identity: Identity, surface: Surface, model: str = ""
) -> tuple[list[str], Body, PipelineResult, Standards | None, Compacting | None]:
    """The upstreams to try, the shaped body (encoded) and what the chain did.

    Only the encoded body and the chain's figures outlive this call: the parsed messages are freed
    before the upstream is reached (in a burst, thousands of requests wait there at once), unless a
    fallback upstream places other cache marks and needs the chain run again.
    """
    config, pipeline = call.state.config, call.state.pipeline
    body = await read_request(call, surface.history)
    names = same_mode_fallbacks(
        config, surface, body, fwd.route(call, {"model": model} if model else body, exchange)
    )
    if surface.policy_only is None:  # a batch names no model: routed as any other path, never refused
        check_speaks(config, surface, names)
    compacting = None
    if surface.compaction_items:  # Responses compaction for this upstream (native, emulated, stripped)
        body, names, compacting = await compaction_route.prepare(
            call, fwd.compactions, surface, body, names, identity
        )
    exchange.read(body, keep=config.log_bodies, stream=surface.streams)
    memo = None if surface.body_is_view else call.state.views.for_tenant(identity.tenant)
    named = model or None
    shaped = await counted_off_loop(
        lambda: shape(surface, pipeline, body, identity, names[0], memo, model=named), body, fwd.tokens
    )
    if compacting is not None:
        await compaction_route.emulate(call, fwd.compactions, surface, shaped, identity, names[0], compacting)
        if compacting.local is not None:  # answered here: recorded as shaped, never forwarded
            return names, b"", exchange.shaped(shaped.result.without_messages()), None, compacting
    if memo is not None and memo.max_messages:  # tenants never share a memo entry
        fwd.metrics.observe_memo(surface.name, shaped.reused, shaped.converted, memo.held)
    managed = None
    if FIELD in shaped.body and surface.name == "messages":  # one lookup for a request without it
        managed = await standards(pipeline, surface, names[0], shaped.body, shaped.result, identity)
    sent_body = shaped.body if managed is None else managed.managed.body
    content = encode_json(sent_body)
    if exchange.trace is not None:  # its span's content, if captured, read before the body is freed
        exchange.trace.shaped(sent_body)
    kept = exchange.shaped(shaped.result.without_messages())
    marks = config.upstreams[names[0]].cache_control
    if all(config.upstreams[name].cache_control == marks for name in names[1:]):
        return names, content, kept, managed, compacting

    async def body_for(name: str) -> bytes:
        if config.upstreams[name].cache_control == marks:
            return content
        other = await shape(surface, pipeline, body, identity, name, model=named)  # other marks
        again = await standards(pipeline, surface, name, other.body, other.result, identity)
        return encode_json(other.body if again is None else again.managed.body)

    return names, body_for, kept, managed, compacting


def _answered(
    fwd: Forwarder, exchange: Exchange, headers: dict[str, str], content: bytes, kind: str
) -> Outgoing:
    """An answer the proxy gives itself (with the ``x-history-*`` headers), recorded as a 200."""
    answer = Whole(200, content)
    answer.headers += [(b"content-type", kind.encode("latin-1"))]
    return _local(fwd, exchange, answer, headers)


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
    managed = await standards(pipeline, surface, names[0], shaped.body, shaped.result, identity)
    if (
        managed is not None
    ):  # the body as it would be sent: the client's edits as the upstream's mode makes them
        shaped.body = managed.managed.body
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
