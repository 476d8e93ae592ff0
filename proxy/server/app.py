"""The ASGI app: routes, lifespan, error rendering, one access line per request.

``create_app(config)`` builds a Starlette app around one :class:`~proxy.pipeline.run.Pipeline` and one
:class:`~proxy.upstream.client.Upstreams` (the shared httpx client, opened in the lifespan).
``app_from_env()`` is the factory ``uvicorn --factory`` calls in each worker; it reads the config
path from ``HISTORY_PROXY_CONFIG``.

Routes: ``POST /v1/chat/completions`` (filtered, forwarded), ``POST /v1/history/preview`` (filtered,
not forwarded), any other ``/v1/...`` (forwarded unchanged), ``GET /healthz``, ``GET /metrics``.
"""

from __future__ import annotations

import gc
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
from proxy.config.models import Config
from proxy.core.identity import Identity
from proxy.core.tokens import TokenCounters
from proxy.errors import FilterError, NotFoundError, ProxyError, error_body
from proxy.observability.access import fresh_request_id
from proxy.observability.metrics import Exchange, Metrics, request_id_for
from proxy.pipeline.headers import history_headers
from proxy.pipeline.run import Pipeline, PipelineResult
from proxy.server.body import capped_stream, encode_json, has_body, model_of, parse_body, read_body
from proxy.server.caller import resolve_identity
from proxy.server.edge import CHAT_PATH, Answer, Call, Edge, Relay, Whole
from proxy.server.guard import CLIENT_CLOSED, RequestGuard
from proxy.server.overflow import RETRY_HEADER, retry_if_overflow
from proxy.server.reload import (
    Reloader,
    ServesState,
    ServingState,
    StateSwitch,
    authorize_admin,
    reload_on_sighup,
)
from proxy.server.surfaces import error_json, previewed, surface_call, surface_routes
from proxy.summaries.cache import CachingSummarizer
from proxy.summaries.store import summary_backend
from proxy.upstream.client import Body, Upstreams
from proxy.upstream.reply import UpstreamReply

CONFIG_ENV = "HISTORY_PROXY_CONFIG"
GC_YOUNG_THRESHOLD = 2000
"""Allocations between young-generation collections once serving (Python's default: 700)."""

log = logging.getLogger("history_proxy")


class _Proxy(ServesState):
    """The app's state and handlers: one config, pipeline, upstream client and metrics registry."""

    def __init__(self, config: Config, config_path: str | None, *, settle_gc: bool = False) -> None:
        self.config_path = config_path
        self._settles_gc = settle_gc
        self.metrics = Metrics(config)
        upstreams = Upstreams(config)
        backend = summary_backend(config.summary_cache, self.metrics)
        self.summaries = CachingSummarizer(upstreams, backend, recorder=self.metrics)
        self.tokens = TokenCounters()
        self.states = StateSwitch(self._serving(config, upstreams))
        self.reloader = Reloader(config_path, self.states, self._next_state)

    def _serving(self, config: Config, upstreams: Upstreams, generation: int = 0) -> ServingState:
        """What one config builds; token counters, HTTP client, mock and summary cache are shared."""
        pipeline = Pipeline(config, self.tokens, summarizer=self.summaries)
        return ServingState(config, pipeline, upstreams, generation)

    async def _next_state(self, config: Config, current: ServingState) -> ServingState:
        upstreams = await current.upstreams.reconfigured(config)
        self.summaries.summarizer = upstreams  # summary calls route by the newest config
        self.metrics.reconfigure(config)
        return self._serving(config, upstreams, current.generation + 1)

    @asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            await self.upstreams.start()
            self.pipeline.tokens.get()  # load the default encoding now, not during the first request
            log.info(
                "history-proxy ready: %s (config %s)",
                summary(self.config),
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
                await self.upstreams.stop()

    # --- bookkeeping -------------------------------------------------------------------------

    def begin(self, call: Call) -> Exchange:
        exchange = Exchange(request_id_for(call.headers), call.method, call.path, time.perf_counter())
        call.scope.setdefault("state", {})["exchange"] = exchange
        return exchange

    def identify(self, call: Call, exchange: Exchange) -> Identity:
        exchange.identity = resolve_identity(self.config, call.headers)
        return exchange.identity

    def finish(self, exchange: Exchange, status: int | None = None) -> None:
        """Count and log the request once, however it ended."""
        self.metrics.finish(exchange, status)

    # --- routes ------------------------------------------------------------------------------

    async def chat_route(self, request: Request) -> Answer:
        """``POST /v1/chat/completions`` when Starlette routes it (under a root path)."""
        return await self.chat_completions(Call.of(request))

    async def chat_completions(self, call: Call) -> Answer:
        exchange = self.begin(call)
        identity = self.identify(call, exchange)
        names, forwarded, result = await self._shaped(call, exchange, identity)
        reply = await self._open(call, exchange, "/chat/completions", names, forwarded)
        headers = history_headers(result, identity.role)
        retried = await retry_if_overflow(
            reply,
            forwarded,
            lambda fitted: self._open(call, exchange, "/chat/completions", [reply.upstream], fitted),
            config=self.config,
            tokens=self.pipeline.tokens,
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
        body = parse_body(await read_body(call.headers, call.stream(), self.config.limits.max_body_bytes))
        names = self._route(body, exchange)
        exchange.stream = body.get("stream") is True
        if self.config.log_bodies:
            exchange.body = body
        result = await self.pipeline.run(body, identity, names[0])
        content = encode_json(result.body)
        kept = exchange.result = result.without_messages()
        marks = self.config.upstreams[names[0]].cache_control
        if all(self.config.upstreams[name].cache_control == marks for name in names[1:]):
            return names, content, kept

        async def body_for(name: str) -> bytes:
            if self.config.upstreams[name].cache_control == marks:
                return content
            return encode_json((await self.pipeline.run(body, identity, name)).body)  # other cache marks

        return names, body_for, kept

    async def preview(self, request: Request) -> Response:
        call = Call.of(request)
        exchange = self.begin(call)
        identity = self.identify(call, exchange)
        body = parse_body(await read_body(call.headers, call.stream(), self.config.limits.max_body_bytes))
        names = self._route(body, exchange)
        exchange.upstream = None  # nothing is forwarded
        sent, result = await previewed(self, call, body, identity, names[0])
        exchange.result = result
        headers = {**history_headers(result, identity.role), "x-request-id": exchange.request_id}
        content = encode_json({"body": sent, "report": result.report})  # JSONResponse fails on "\ud800"
        response = Response(content, media_type="application/json", headers=headers)
        self.finish(exchange, 200)
        return response

    async def forward(self, request: Request) -> Answer:
        call = Call.of(request)
        exchange = self.begin(call)
        self.identify(call, exchange)
        limit = self.config.limits.max_body_bytes
        body: Body = None
        model = ""
        if has_body(call.headers):
            if "json" in call.headers.get("content-type", ""):
                body = await read_body(call.headers, call.stream(), limit)
                model = model_of(body)
            else:  # uploads go through unread, to the default upstream
                body = capped_stream(call.headers, call.stream(), limit)
        names = self._route({"model": model}, exchange)
        raw_path = call.scope.get("raw_path") or call.path.encode()
        reply = await self._open(call, exchange, raw_path.decode("latin-1").removeprefix("/v1"), names, body)
        return await self._respond(reply, exchange, {})

    async def admin_reload(self, request: Request) -> Response:
        """Re-read the config file (admin tenants only); a bad file is a 400 and changes nothing."""
        call = Call.of(request)
        exchange = self.begin(call)
        exchange.identity = Identity(role="admin", tenant=authorize_admin(self.config, call.headers))
        answer = await self.reloader.answer()
        self.finish(exchange, 200)
        return JSONResponse(answer, headers={"x-request-id": exchange.request_id})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_text(self, request: Request) -> Response:
        content, media_type = self.metrics.render()
        return Response(content, media_type=media_type)

    # --- forwarding --------------------------------------------------------------------------

    def _route(self, body: dict[str, Any], exchange: Exchange) -> list[str]:
        model = body.get("model")
        exchange.model = model if isinstance(model, str) and model else None
        names = self.config.route(exchange.model or "")
        exchange.upstream = names[0]
        return names

    async def _open(
        self, call: Call, exchange: Exchange, path: str, names: list[str], body: Body
    ) -> UpstreamReply:
        exchange.upstream_started = time.perf_counter()
        return await self.upstreams.open(
            call.method, path, query=call.query, headers=call.header_items, names=names, body=body
        )

    async def _respond(self, reply: UpstreamReply, exchange: Exchange, extra: dict[str, str]) -> Answer:
        exchange.upstream, exchange.attempts = reply.upstream, reply.attempts
        exchange.status = reply.status_code
        waited_ms = reply.wait_ms
        response: Answer
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

    async def on_proxy_error(self, request: Request, exc: Exception) -> Response:
        """Render any ``ProxyError`` in OpenAI's error shape (for the routes Starlette serves)."""
        if not isinstance(exc, ProxyError):  # pragma: no cover - registered for ProxyError only
            raise exc
        return self.error_answer(Call.of(request), exc)

    def error_answer(self, call: Call, exc: ProxyError) -> Response:
        """A ``ProxyError`` in OpenAI's error shape, counted and logged once."""
        exchange = call.exchange
        request_id = exchange.request_id if exchange else request_id_for(call.headers)
        if isinstance(exc, FilterError):
            self.metrics.observe_filter_failure(exc.filter_type)
            log.error("filter %s at %s failed (request %s)", exc.filter_type, exc.position, request_id)
        if exchange is not None:
            self.finish(exchange, exc.status_code)
        return JSONResponse(
            error_json(call.path, exc),
            status_code=exc.status_code,
            headers={**exc.headers(), "x-request-id": request_id},
        )

    async def on_http_error(self, request: Request, exc: Exception) -> Response:
        """Starlette's own 404/405 in OpenAI's error shape."""
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        if status == 404:
            error = NotFoundError(
                f"no route {request.method} {request.url.path}: this proxy serves /v1/... (OpenAI API), "
                "POST /v1/history/preview, GET /healthz and GET /metrics"
            )
            return await self.on_proxy_error(request, error)
        headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
        message = f"{request.method} is not allowed on {request.url.path}" if status == 405 else str(exc)
        body = error_body(
            message, "invalid_request_error", code="method_not_allowed" if status == 405 else None
        )
        return JSONResponse(body, status_code=status, headers=headers)

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


def settle_gc() -> None:
    """Once the app is ready: what startup built is never scanned again, and collections are rarer.

    Frozen, the modules, config and token encodings stay out of every later collection. At Python's
    default threshold the objects of the requests in flight (at concurrency 64, thousands) cross
    it every few requests and are scanned each time; nearly all of them are freed without the
    collector, so a higher threshold cuts the collections (about 7 % of the CPU per request at 700)
    for a bounded wait of cyclic garbage. 2000, not more: 2000 and 5000 measured alike in CPU, and
    the higher one holds more garbage (1,000 slow streams: 262 MB at 700, 270-292 at 2000, 290-296
    at 5000, single runs that spread by about 20 MB).
    """
    gc.collect()  # garbage left by startup is collected, not frozen
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def create_app(config: Config, *, config_path: str | None = None, settle_gc: bool = False) -> Starlette:
    """The proxy as an ASGI app for ``config``; the upstream client opens in its lifespan.

    ``settle_gc``: tune the garbage collector once started (:func:`settle_gc`), for a served process.
    """
    proxy = _Proxy(config, config_path, settle_gc=settle_gc)
    routes = [
        Route(CHAT_PATH, proxy.chat_route, methods=["POST"]),
        Route("/v1/history/preview", proxy.preview, methods=["POST"]),
        *surface_routes(proxy),
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
        exception_handlers={ProxyError: proxy.on_proxy_error, HTTPException: proxy.on_http_error},
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
