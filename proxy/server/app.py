"""The ASGI app: the handlers, lifespan, error bookkeeping, one access line per request.

``create_app(config)`` builds a Starlette app around the serving state of one config (its
:class:`~proxy.pipeline.run.Pipeline` and :class:`~proxy.upstream.client.Upstreams`, the shared
client opened in the lifespan); each request carries the state it started on (``Call.state``).
``app_from_env()`` is the factory ``uvicorn --factory`` calls in each worker; it reads the config
path from ``HISTORY_PROXY_CONFIG``.

Handlers: ``POST /v1/chat/completions`` (filtered, forwarded; the edge calls it, no router),
``POST /v1/history/preview`` (filtered, not forwarded), any other ``/v1/...`` (forwarded
unchanged), ``GET /healthz``, ``GET /metrics``, ``POST /admin/reload``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Scope

from proxy.config.loading import ConfigError, load_config, summary
from proxy.config.models import CONFIG_ENV, Config
from proxy.core.identity import Identity
from proxy.core.tokens import TokenCounters
from proxy.errors import FilterError, MethodNotAllowedError, NotFoundError, ProxyError
from proxy.observability.access import fresh_request_id
from proxy.observability.memory import watch_memory
from proxy.observability.metrics import Exchange, Metrics, request_id_for
from proxy.pipeline.headers import history_headers
from proxy.pipeline.run import Pipeline, PipelineResult
from proxy.server.body import (
    capped_stream,
    check_containers,
    encode_json,
    has_body,
    model_of,
    read_body,
)
from proxy.server.caller import authorize_metrics, reachable_upstreams, resolve_identity
from proxy.server.edge import Call, Edge, Outgoing, Relay, Whole, error_answer, route_path, scope_headers
from proxy.server.forwarded import forwarded_headers
from proxy.server.gc_tuning import settle_gc
from proxy.server.guard import CLIENT_CLOSED, RequestGuard
from proxy.server.overflow import RETRY_HEADER, retry_if_overflow
from proxy.server.protocol import HEAD_LIMITS
from proxy.server.reload import Reloader, ServingState, StateSwitch, authorize_admin, reload_on_sighup
from proxy.server.surfaces import error_surface, previewed, surface_call
from proxy.server.warm import counted_off_loop, read_request
from proxy.summaries.cache import CachingSummarizer
from proxy.summaries.store import memory_of, summary_backend
from proxy.surfaces.memo import ViewMemo
from proxy.upstream.client import Body, Upstreams
from proxy.upstream.reply import UpstreamReply

log = logging.getLogger("history_proxy")
Headers = list[tuple[str, str]] | None


class _Proxy:
    """The app's handlers and what every serving state shares; each request reads its ``Call.state``."""

    def __init__(self, config: Config, config_path: str | None, *, settle_gc: bool = False) -> None:
        self.config_path = config_path
        self._settles_gc = settle_gc
        self.metrics = Metrics(config)
        upstreams = Upstreams(config)
        backend = summary_backend(config.summary_cache, self.metrics)
        self.summaries = CachingSummarizer(upstreams, backend, recorder=self.metrics)
        self.tokens = TokenCounters(max_bytes=config.limits.token_cache_bytes)  # read once, at start
        self.states = StateSwitch(self._serving(config, upstreams))
        watch_memory(
            self.metrics.registry,
            token_cache=lambda: self.tokens,
            surface_memo=lambda: self.states.latest.views,
            summary_cache=lambda: memory_of(self.summaries.backend),
        )
        self.reloader = Reloader(config_path, self.states, self._next_state)

    def _serving(self, config: Config, upstreams: Upstreams, generation: int = 0) -> ServingState:
        """What one config builds; token counters, HTTP client, mock and summary cache are shared."""
        pipeline = Pipeline(config, self.tokens, summarizer=self.summaries)
        HEAD_LIMITS.configure(config.limits)  # read by this process's connections per request head
        return ServingState(config, pipeline, upstreams, generation, ViewMemo.of(config.limits))

    async def _next_state(self, config: Config, current: ServingState) -> ServingState:
        upstreams = await current.upstreams.reconfigured(config)
        self.summaries.summarizer = upstreams  # summary calls route by the newest config
        self.metrics.reconfigure(config)
        return self._serving(config, upstreams, current.generation + 1)

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        state = self.states.latest
        try:
            await state.upstreams.start()
            self.tokens.get()  # load the default encoding now, not during the first request
            log.info(
                "history-proxy ready: %s (config %s)",
                summary(state.config),
                self.config_path or "given in code",
            )
            if self._settles_gc:
                settle_gc()
            with reload_on_sighup(self.reloader):
                yield
        finally:
            try:
                await self.summaries.aclose()  # first: running summary calls use the upstream client
            finally:
                await self.states.latest.upstreams.stop()

    # --- bookkeeping -------------------------------------------------------------------------

    def begin(self, call: Call) -> Exchange:
        exchange = Exchange(request_id_for(call.headers), call.method, call.path, time.perf_counter())
        call.scope.setdefault("state", {})["exchange"] = exchange
        return self.metrics.telemetry.begin(exchange, call.headers, call.state.config)

    def identify(self, call: Call, exchange: Exchange) -> Identity:
        exchange.identity = resolve_identity(call.state.config, call.headers)
        return exchange.identity

    def finish(self, exchange: Exchange, status: int | None = None) -> None:
        """Count and log the request once, however it ended."""
        self.metrics.finish(exchange, status)

    # --- routes ------------------------------------------------------------------------------

    async def chat_completions(self, call: Call) -> Outgoing:
        """``POST /v1/chat/completions``: filtered, forwarded (the edge calls it, never the router)."""
        exchange = self.begin(call)
        identity = self.identify(call, exchange)
        names, forwarded, result = await self._shaped(call, exchange, identity)
        reply = await self._open(call, exchange, "/chat/completions", names, forwarded)
        headers = history_headers(result, identity.role)
        retried = await retry_if_overflow(
            reply,
            forwarded,
            lambda fitted: self._open(call, exchange, "/chat/completions", [reply.upstream], fitted),
            config=call.state.config,
            tokens=self.tokens,
            metrics=self.metrics,
            exchange=exchange,
        )
        if retried is not None:
            reply, headers[RETRY_HEADER] = retried[0], str(retried[1])
        return await self._respond(reply, exchange, headers)

    surface = surface_call  # POST /v1/responses, /v1/messages, /v1/messages/count_tokens

    async def _shaped(
        self, call: Call, exchange: Exchange, identity: Identity
    ) -> tuple[list[str], Body, PipelineResult]:
        """The upstreams to try, the filtered body (encoded) and what the chain did.

        Only the encoded body and the chain's figures outlive this call: the parsed messages are
        freed before the upstream is reached (in a burst, thousands of requests wait there at
        once), unless a fallback upstream places other cache marks and needs the chain run again.
        """
        config, pipeline = call.state.config, call.state.pipeline
        body = await read_request(call)
        names = self._route(call, body, exchange)
        exchange.stream = body.get("stream") is True
        if config.log_bodies:
            exchange.body = body
        result = await counted_off_loop(lambda: pipeline.run(body, identity, names[0]), body, self.tokens)
        content = encode_json(result.body)
        kept = exchange.result = result.without_messages()
        marks = config.upstreams[names[0]].cache_control
        if all(config.upstreams[name].cache_control == marks for name in names[1:]):
            return names, content, kept

        async def body_for(name: str) -> bytes:
            if config.upstreams[name].cache_control == marks:
                return content
            return encode_json((await pipeline.run(body, identity, name)).body)  # other cache marks

        return names, body_for, kept

    async def preview(self, request: Request) -> Response:
        call = Call.of(request)
        exchange = self.begin(call)
        identity = self.identify(call, exchange)
        body = await read_request(call)
        names = self._route(call, body, exchange)  # the caller's scope, as if forwarded (docs/hardening.md)
        exchange.upstream = None  # nothing is forwarded
        sent, result = await previewed(call, body, identity, names[0])
        exchange.result = result
        headers = {**history_headers(result, identity.role), "x-request-id": exchange.request_id}
        content = encode_json({"body": sent, "report": result.report})  # JSONResponse fails on "\ud800"
        response = Response(content, media_type="application/json", headers=headers)
        self.finish(exchange, 200)
        return response

    async def forward(self, request: Request) -> Outgoing:
        call = Call.of(request)
        exchange = self.begin(call)
        self.identify(call, exchange)
        limit = call.state.config.limits.max_body_bytes
        body: Body = None
        model = ""
        if has_body(call.headers):
            if "json" in call.headers.get("content-type", ""):
                body = await read_body(call.headers, call.stream(), limit)
                check_containers(body, call.state.config.limits.max_json_containers)
                model = model_of(body)
            else:  # uploads go through unread, to the default upstream
                body = capped_stream(call.headers, call.stream(), limit)
        names = self._route(call, {"model": model}, exchange)
        raw_path = call.scope.get("raw_path") or call.path.encode()
        reply = await self._open(call, exchange, raw_path.decode("latin-1").removeprefix("/v1"), names, body)
        return await self._respond(reply, exchange, {})

    async def admin_reload(self, request: Request) -> Response:
        """Re-read the config file (admin tenants only); a bad file is a 400 and changes nothing."""
        call = Call.of(request)
        exchange = self.begin(call)
        exchange.identity = Identity(role="admin", tenant=authorize_admin(call.state.config, call.headers))
        answer = await self.reloader.answer()
        self.finish(exchange, 200)
        return JSONResponse(answer, headers={"x-request-id": exchange.request_id})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_text(self, request: Request) -> Response:
        authorize_metrics(request.scope["state"]["serving"].config, Call.of(request).headers)
        content, media_type = self.metrics.render()
        return Response(content, media_type=media_type)

    # --- forwarding --------------------------------------------------------------------------

    def _route(self, call: Call, body: dict[str, Any], exchange: Exchange) -> list[str]:
        """The upstreams to try for ``body``'s model that the caller's key may reach (else 403)."""
        exchange.model = self.metrics.telemetry.requested(exchange, body)
        names = reachable_upstreams(
            call.state.config, call.headers, call.state.config.route(exchange.model or "")
        )
        exchange.upstream = names[0]
        return names

    async def _open(
        self, call: Call, exchange: Exchange, path: str, names: list[str], body: Body, sent: Headers = None
    ) -> UpstreamReply:
        """Send the request upstream: ``sent`` headers (default: the client's) and this hop's forwarding."""
        exchange.upstream_started = time.perf_counter()
        client = call.scope.get("client")
        headers = forwarded_headers(
            call.header_items if sent is None else sent,
            client[0] if client else "",
            call.scope.get("scheme", "http"),
            call.state.config.trusted_proxies,
        )
        return await call.state.upstreams.open(
            call.method, path, query=call.query, headers=headers, names=names, body=body, trace=exchange.trace
        )

    async def _respond(self, reply: UpstreamReply, exchange: Exchange, extra: dict[str, str]) -> Outgoing:
        exchange.upstream, exchange.attempts = reply.upstream, reply.attempts
        exchange.status = reply.status_code
        waited_ms = reply.wait_ms
        response: Outgoing
        if reply.ok and (exchange.stream or not reply.is_whole_json):
            response = Relay(reply, lambda: self._streamed(reply, exchange))
            if exchange.stream:
                self.metrics.stream_opened(exchange)
        else:  # error answers and whole JSON answers: read at once, sent verbatim in one write
            read_started = time.perf_counter()
            response = Whole(reply.status_code, await reply.read())
            waited_ms += (time.perf_counter() - read_started) * 1000
        exchange.overhead_ms = exchange.elapsed_ms() - waited_ms
        if extra:
            extra = {**extra, "x-history-overhead-ms": f"{exchange.overhead_ms:.2f}"}
        ours = {**extra, "x-request-id": exchange.request_id}  # these replace the upstream's own
        headers = response.headers  # only content-length so far
        for name, value in reply.headers:
            name = "x-upstream-request-id" if name == "x-request-id" else name
            if name not in ours:
                headers.append((name.encode("latin-1"), value.encode("latin-1")))
        headers += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in ours.items()]
        if not reply.ok:
            self.finish(exchange)
        elif not isinstance(response, Relay):
            self._streamed(reply, exchange)  # relayed whole: record it now
        return response

    def _streamed(self, reply: UpstreamReply, exchange: Exchange) -> None:
        exchange.broken = reply.broken
        exchange.first_byte_at = reply.first_byte_at
        exchange.usage = reply.usage
        if not reply.complete and not reply.broken:
            exchange.status = CLIENT_CLOSED
        self.finish(exchange)

    # --- errors ------------------------------------------------------------------------------

    def error_answer(self, scope: Scope, exc: ProxyError) -> Whole:
        """A ``ProxyError`` from any route in its surface's error shape, counted and logged once.

        The shape is that of the API surface the request's path belongs to (:func:`error_surface`).
        """
        exchange = scope.get("state", {}).get("exchange")
        if not isinstance(exchange, Exchange):
            exchange = None
        request_id = exchange.request_id if exchange else request_id_for(scope_headers(scope))
        if isinstance(exc, FilterError):
            self.metrics.observe_filter_failure(exc.filter_type)
            log.error("filter %s at %s failed (request %s)", exc.filter_type, exc.position, request_id)
        if exchange is not None:
            self.finish(exchange, exc.status_code)
        return error_answer(exc, request_id, error_surface(route_path(scope)))

    async def on_http_error(self, request: Request, exc: Exception) -> Response:
        """Starlette's own 404/405 become ``ProxyError``s, answered by the edge like every other."""
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 404:
            raise NotFoundError(
                f"no route {request.method} {request.url.path}: this proxy serves /v1/... (OpenAI API), "
                "POST /v1/history/preview, GET /healthz and GET /metrics"
            )
        if status == 405:
            allow = (exc.headers or {}).get("Allow") if isinstance(exc, HTTPException) else None
            raise MethodNotAllowedError(f"{request.method} is not allowed on {request.url.path}", allow=allow)
        raise ProxyError(str(exc))

    def on_unhandled(self, scope: Scope, exc: BaseException) -> str:
        """Log a bug with its traceback (never the body), count it, and return the request id."""
        exchange = scope.get("state", {}).get("exchange")
        request_id = exchange.request_id if isinstance(exchange, Exchange) else fresh_request_id()
        if isinstance(exc, ClientDisconnect):
            log.info("client went away before the answer to request %s was sent", request_id)
            status = CLIENT_CLOSED
        else:
            log.error(
                "unhandled error answering %s %s (request %s)",
                scope.get("method"),
                scope.get("path"),
                request_id,
                exc_info=exc,
            )
            status = 500
        if isinstance(exchange, Exchange):
            self.finish(exchange, status)
        return request_id


def create_app(config: Config, *, config_path: str | None = None, settle_gc: bool = False) -> Starlette:
    """The proxy as an ASGI app for ``config``; the upstream client opens in its lifespan.

    ``settle_gc``: tune the garbage collector once started (:func:`settle_gc`), for a served process.
    """
    proxy = _Proxy(config, config_path, settle_gc=settle_gc)
    routes = [  # POST /v1/chat/completions never reaches the router: the edge serves it
        Route("/v1/history/preview", proxy.preview, methods=["POST"]),
        Route(
            "/v1/{path:path}",
            proxy.forward,
            methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
        ),
        Route("/healthz", proxy.healthz, methods=["GET"]),
        Route("/metrics", proxy.metrics_text, methods=["GET"]),
        Route("/admin/reload", proxy.admin_reload, methods=["POST"]),
    ]
    app = Starlette(
        routes=routes,
        lifespan=proxy.lifespan,
        middleware=[
            Middleware(RequestGuard, proxy=proxy),
            Middleware(Edge, proxy=proxy),
        ],
        exception_handlers={HTTPException: proxy.on_http_error},
    )
    app.state.proxy = proxy
    return app


def app_from_env() -> Starlette:
    """The app for ``uvicorn --factory``: config from ``$HISTORY_PROXY_CONFIG`` or the default file."""
    path = os.environ.get(CONFIG_ENV) or None
    try:
        config = load_config(path)
    except ConfigError as exc:
        sys.stderr.write("".join(f"{exc.source}: {line}\n" for line in exc.errors))
        raise SystemExit(1) from None
    return create_app(config, config_path=path, settle_gc=True)
