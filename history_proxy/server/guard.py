"""The outermost layer of every request: its config, admission, and the client going away.

:class:`RequestGuard` wraps the whole app (plain ASGI, no framework) and, for each HTTP request:

- takes the serving state (config, pipeline, upstreams) the request starts on and puts it in the
  scope (``state["serving"]``, read once as ``Call.state``), so a config reload while it runs never
  changes it half-way (see :mod:`history_proxy.server.reload`);
- admits it or answers ``429`` with ``Retry-After`` at once when ``limits.max_concurrent`` requests
  under ``/v1/`` are already in flight in this process, or its tenant or role is at one of its limits
  (``max_concurrent_per_tenant``, ``per_tenant``, ``per_role``: :mod:`history_proxy.server.admission`, shared
  by the fleet through ``limits.redis_url``); the admin, health and metrics routes are never refused;
- watches the connection once the request body has been read (for requests still running after
  ``WATCH_AFTER_S``), and when the client disconnects before the answer is complete, cancels the
  request's work: the upstream request (still waiting for its first byte, or mid-stream), a filter
  chain, a retry backoff. httpx closes an upstream connection it was cancelled on, so the upstream
  sees its client leave too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

import anyio

from history_proxy.config.models import Config
from history_proxy.errors import AuthError, OverloadedError
from history_proxy.observability.metrics import Exchange, request_id_for
from history_proxy.server.admission import Quotas, Ticket
from history_proxy.server.caller import proxy_token, tenant_for_key
from history_proxy.server.doors import limited as limited_route
from history_proxy.server.doors import normalise
from history_proxy.server.edge import error_answer, route_path, scope_headers
from history_proxy.server.quotas import Refusal, limits_apply
from history_proxy.server.reload import StateSwitch
from history_proxy.surfaces.table import error_shape_of

log = logging.getLogger("history_proxy")

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CLIENT_CLOSED = 499  # nginx's status for a client that went away before the answer
OVERLOAD_RETRY_AFTER_S = 1
WATCH_AFTER_S = 0.05
"""How long a request runs before its connection is watched (bounds the extra delay in noticing)."""
_DISCONNECT: Message = {"type": "http.disconnect"}
_EMPTY_BODY: Message = {"type": "http.request", "body": b"", "more_body": False}


class GuardedProxy(Protocol):
    """What the guard needs from the app it wraps."""

    states: StateSwitch

    def finish(self, exchange: Exchange, status: int | None = None) -> None:
        """Count and log a request once."""
        ...


def _has_body(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


def _tenant_of(config: Config, scope: Scope) -> str | None:
    """The tenant of the request's proxy key; None without one (the app answers 401 if it needs one)."""
    keys = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in scope.get("headers", ())
        if name in (b"authorization", b"x-api-key", b"x-goog-api-key")
    }
    try:
        return tenant_for_key(config, proxy_token(keys))
    except AuthError:
        return None


class ClientWatch:
    """The request's ``receive`` and ``send`` seen by the app, and a watcher for the client leaving.

    While the body is being read, the app's ``receive`` is the server's. Once the app has the whole
    body (at once for a request without one) and the request is still running ``WATCH_AFTER_S``
    later, a watcher task owns the server's ``receive`` and waits for ``http.disconnect``; the app's
    later ``receive`` calls wait for the same event.
    """

    def __init__(self, scope: Scope, receive: Receive, send: Send, on_gone: Callable[[], None]) -> None:
        self._receive = receive
        self._send = send
        self._on_gone = on_gone
        self._owes_empty_body = not _has_body(scope)
        self._body_done = False
        self._gone = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.answered = False
        """The final body message of the response was sent."""
        self.left = False
        """The client disconnected before the answer was complete."""
        if self._owes_empty_body:
            self._arm()

    async def receive(self) -> Message:
        if self._owes_empty_body:
            self._owes_empty_body = False  # the server has nothing else to give for a bodiless request
            return dict(_EMPTY_BODY)
        if not self._body_done:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self._body_done = True
                self._gone.set()
            elif not message.get("more_body", False):
                self._body_done = True
                self._arm()
            return message
        await self._gone.wait()
        return dict(_DISCONNECT)

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.answered = True
        await self._send(message)

    def _arm(self) -> None:
        # most answers are complete within a few milliseconds: only a request still running after
        # WATCH_AFTER_S gets a watcher task, so the quick ones pay for a timer, not a task
        self._timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, self._start_watching)

    def _start_watching(self) -> None:
        self._timer = None
        self._watcher = asyncio.get_running_loop().create_task(
            self._watch(), name="history-proxy client watch"
        )

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass  # a bodiless request's own empty body message, or nothing
        self._gone.set()
        if not self.answered:
            self.left = True
            self._on_gone()

    async def aclose(self) -> None:
        """Stop the watcher and wait for it, so no task outlives the request."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        watcher, self._watcher = self._watcher, None
        if watcher is None or watcher.done():
            return
        watcher.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([watcher])


class RequestGuard:
    """ASGI middleware: pinned state, ``max_concurrent`` admission, cancel on client disconnect."""

    def __init__(self, app: ASGIApp, proxy: GuardedProxy) -> None:
        self.app = app
        self.proxy = proxy
        self.in_flight = 0
        """Admitted requests under ``/v1/`` not yet finished (streams included)."""
        self.quotas = Quotas()
        """Per-tenant slots and rates (this process's, or shared through ``limits.redis_url``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            try:
                await self.app(scope, receive, send)
            finally:
                if scope["type"] == "lifespan":
                    await self.quotas.aclose()
            return
        state = self.proxy.states.latest
        scope.setdefault("state", {})["serving"] = state
        limits = state.config.limits
        # one identity before any limit: the route the doors will serve (``//v1/messages`` is
        # ``/v1/messages``), so every spelling counts, and a refusal takes the route's error shape
        limited = limited_route(normalise(scope, route_path(scope)))
        limit = limits.max_concurrent
        if limited and limit is not None and self.in_flight >= limit:
            message = f"the proxy is already serving {limit} requests (limits.max_concurrent); retry shortly"
            await self._refuse(scope, receive, send, message)
            return
        # the process's slot is taken before awaiting the tenant's admission (Redis may be far), so
        # max_concurrent is checked and counted in one step; a refused request gives it back
        self.in_flight += limited
        ticket = None
        try:
            if limited and limits_apply(limits):  # else no header is read for the tenant
                ticket = await self.quotas.admit(state.config, _tenant_of(state.config, scope), scope)
            if isinstance(ticket, Refusal):
                await self._refuse(scope, receive, send, ticket.message, ticket.retry_after_s)
                return
            await self._run(scope, receive, send)
        finally:
            self.in_flight -= limited
            if isinstance(ticket, Ticket):
                await self.quotas.settle(ticket, scope["state"].get("exchange"))

    async def _run(self, scope: Scope, receive: Receive, send: Send) -> None:
        with anyio.CancelScope() as cancel:
            watch = ClientWatch(scope, receive, send, cancel.cancel)
            try:
                await self.app(scope, watch.receive, watch.send)
            finally:
                await watch.aclose()
        if watch.left:
            exchange = scope["state"].get("exchange")
            request_id = exchange.request_id if isinstance(exchange, Exchange) else "-"
            log.info(
                "client went away before the answer to request %s was complete; its work was cancelled",
                request_id,
            )
            if isinstance(exchange, Exchange):
                self.proxy.finish(exchange, CLIENT_CLOSED)

    async def _refuse(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        message: str,
        retry_after_s: int = OVERLOAD_RETRY_AFTER_S,
    ) -> None:
        exchange = Exchange(
            request_id_for(scope_headers(scope)),
            scope.get("method", ""),
            scope.get("path", ""),
            time.perf_counter(),
        )
        error = OverloadedError(message, retry_after_s=retry_after_s)
        self.proxy.finish(exchange, error.status_code)
        surface = error_shape_of(route_path(scope))  # a Messages client gets Anthropic's shape
        await error_answer(error, exchange.request_id, surface)(scope, receive, send)
