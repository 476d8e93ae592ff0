"""The ASGI app: the handlers, lifespan, error bookkeeping, one access line per request.

``create_app(config)`` builds a Starlette app around the serving state of one config (its
:class:`~history_proxy.pipeline.run.Pipeline` and :class:`~history_proxy.upstream.client.Upstreams`, the shared
client opened in the lifespan); each request carries the state it started on (``Call.state``).
``app_from_env()`` is the factory ``uvicorn --factory`` calls in each worker; it reads the config
path from ``HISTORY_PROXY_CONFIG``.

Handlers: the shaped routes of the surface table (chat completions, Responses, Messages,
``count_tokens``: the edge calls :meth:`_Proxy.handle`, no router) and ``POST /v1/history/preview``
(shaped, not forwarded), both :mod:`history_proxy.server.handler`; any other ``/v1/...`` (forwarded
unchanged), ``GET /healthz``, ``GET /metrics``, ``POST /admin/reload``. Routing, sending and
answering are :class:`~history_proxy.server.forwarding.Forwarder`'s, which ``_Proxy`` is.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Scope

from history_proxy.config.loading import ConfigError, load_config, summary
from history_proxy.config.models import CONFIG_ENV, Config
from history_proxy.core.calibration import Calibration
from history_proxy.core.identity import Identity
from history_proxy.core.tokens import TokenCounters
from history_proxy.errors import FilterError, MethodNotAllowedError, NotFoundError, ProxyError
from history_proxy.mock.server import MockUpstreamServer
from history_proxy.observability.access import fresh_request_id
from history_proxy.observability.memory import watch_memory
from history_proxy.observability.metrics import Exchange, Metrics, request_id_for
from history_proxy.pipeline.recall import MemoryRecallStore
from history_proxy.pipeline.run import Pipeline
from history_proxy.server.body import (
    capped_stream,
    check_containers,
    has_body,
    model_of,
    read_body,
)
from history_proxy.server.caller import authorize_metrics
from history_proxy.server.doors import PREVIEW_ROUTE
from history_proxy.server.edge import Call, Edge, Outgoing, Whole, error_answer, route_path, scope_headers
from history_proxy.server.engine import compress
from history_proxy.server.forwarding import Forwarder
from history_proxy.server.gc_tuning import settle_gc
from history_proxy.server.guard import CLIENT_CLOSED, RequestGuard
from history_proxy.server.handler import handle, preview
from history_proxy.server.inflight import InflightBytes
from history_proxy.server.protocol import HEAD_LIMITS
from history_proxy.server.reload import Reloader, ServingState, StateSwitch, authorize_admin, reload_on_sighup
from history_proxy.server.retrieve import Originals, retrieve
from history_proxy.summaries.cache import CachingSummarizer
from history_proxy.summaries.compactions import CompactionStore
from history_proxy.summaries.recall import MemoryRecall
from history_proxy.summaries.store import memory_of, summary_backend
from history_proxy.surfaces.memo import ViewMemo
from history_proxy.surfaces.table import Surface, error_shape_of
from history_proxy.upstream.client import Body, Upstreams

log = logging.getLogger("history_proxy")


class _Proxy(Forwarder):
    """The app's handlers and what every serving state shares; each request reads its ``Call.state``."""

    def __init__(self, config: Config, config_path: str | None, *, settle_gc: bool = False) -> None:
        self.config_path = config_path
        self._settles_gc = settle_gc
        self.metrics = Metrics(config)
        upstreams = Upstreams(config, mock=MockUpstreamServer)  # started when an upstream is mock://
        backend = summary_backend(config.summary_cache, self.metrics)
        self.summaries = CachingSummarizer(upstreams, backend, recorder=self.metrics)
        self.compactions = CompactionStore(backend)  # bounded with the summaries, Redis when they are
        self.tokens = TokenCounters(max_bytes=config.limits.token_cache_bytes)  # read once, at start
        self.recall = MemoryRecallStore()  # kept across reloads, like the token counters
        self.calibration = Calibration()  # learned token ratios outlive reloads
        self.metrics.watch_calibration(self.calibration)
        self.states = StateSwitch(self._serving(config, upstreams))
        watch_memory(
            self.metrics.registry,
            token_cache=lambda: self.tokens,
            surface_memo=lambda: self.states.latest.views,
            summary_cache=lambda: memory_of(self.summaries.backend),
            recall_store=lambda: self.recall,
        )
        self.reloader = Reloader(config_path, self.states, self._next_state)
        kept = config.limits
        self.compressed = MemoryRecall(kept.recall_bytes, kept.recall_ttl_s) if kept.recall_bytes else None
        """Messages ``POST /v1/compress`` left out, per tenant (read at start, kept across reloads)."""

    def _serving(self, config: Config, upstreams: Upstreams, generation: int = 0) -> ServingState:
        """What one config builds; token counters, HTTP client, mock and summary cache are shared."""
        pipeline = Pipeline(
            config, self.tokens, summarizer=self.summaries, recall=self.recall, calibration=self.calibration
        )
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

    # --- routes ------------------------------------------------------------------------------

    async def handle(self, call: Call, surface: Surface) -> Outgoing:
        """A shaped route (chat completions, Responses, Messages, count_tokens, the engine): the edge calls it."""
        if surface.answers:
            return await compress(self, call, surface, self.compressed)
        return await handle(self, call, surface)

    async def retrieve(self, request: Request) -> Outgoing:
        """``GET /v1/retrieve/{hash}``: a message ``POST /v1/compress`` left out, or a tool output a
        filter elided with recall, for the same tenant."""
        stores: list[Originals] = [self.recall]
        if self.compressed is not None:
            stores.insert(0, self.compressed)
        return await retrieve(self, Call.of(request), request.path_params["handle"], stores)

    async def preview(self, request: Request) -> Outgoing:
        """``POST /v1/history/preview``: shaped as if forwarded, answered with the body and report."""
        return await preview(self, Call.of(request))

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
        names = self.route(call, {"model": model}, exchange)
        raw_path = call.scope.get("raw_path") or call.path.encode()
        reply = await self.open(call, exchange, raw_path.decode("latin-1").removeprefix("/v1"), names, body)
        return await self.respond(reply, exchange, {})

    async def admin_reload(self, request: Request) -> Response:
        """Re-read the config file (admin tenants only); a bad file is a 400 and changes nothing."""
        call = Call.of(request)
        exchange = self.begin(call)
        exchange.identified(Identity(role="admin", tenant=authorize_admin(call.state.config, call.headers)))
        answer = await self.reloader.answer()
        self.finish(exchange, 200)
        return JSONResponse(answer, headers={"x-request-id": exchange.request_id})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_text(self, request: Request) -> Response:
        authorize_metrics(request.scope["state"]["serving"].config, Call.of(request).headers)
        content, media_type = self.metrics.render()
        return Response(content, media_type=media_type)

    # --- errors ------------------------------------------------------------------------------

    def error_answer(self, scope: Scope, exc: ProxyError) -> Whole:
        """A ``ProxyError`` from any route in its surface's error shape, counted and logged once.

        The shape is that of the API surface the request's path belongs to (:func:`error_shape_of`).
        """
        exchange = scope.get("state", {}).get("exchange")
        if not isinstance(exchange, Exchange):
            exchange = None
        request_id = exchange.request_id if exchange else request_id_for(scope_headers(scope))
        if isinstance(exc, FilterError):
            self.metrics.observe_filter_failure(exc.filter_type)
            log.error("filter %s at %s failed (request %s)", exc.filter_type, exc.position, request_id)
        if exchange is not None:
            exchange.refused(exc.code or exc.error_type, exc.message)
            self.finish(exchange, exc.status_code)
        return error_answer(exc, request_id, error_shape_of(route_path(scope)))

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
        Route(PREVIEW_ROUTE, proxy.preview, methods=["POST"]),
        Route("/v1/retrieve/{handle}", proxy.retrieve, methods=["GET"]),
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
            Middleware(InflightBytes, proxy=proxy),  # after the guard named the route
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
