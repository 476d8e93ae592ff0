"""The HTTP edge inside the guard: the chat completions fast path, the last-resort 500, and answers.

:class:`Edge` wraps the app that :func:`proxy.server.app.create_app` builds, inside
:class:`~proxy.server.guard.RequestGuard`. ``POST /v1/chat/completions`` goes from the ASGI scope straight to
its handler as a :class:`Call`, and its answer (:class:`Whole` or :class:`Relay`) straight to
``send``: no router, and no Starlette ``Request``, ``URL``, ``Headers`` or ``Response`` on the way.
Every other request goes through Starlette's router; its handlers read a :class:`Call` too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Protocol

from starlette.datastructures import URL
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.errors import ProxyError, error_body
from proxy.observability.access import Exchange
from proxy.upstream.reply import UpstreamReply

CHAT_PATH = "/v1/chat/completions"
SURFACE_PATHS = frozenset({"/v1/responses", "/v1/messages", "/v1/messages/count_tokens"})
"""The Responses and Messages routes, also past the router (:meth:`EdgeProxy.surface`)."""


class Call:
    """One HTTP request as the handlers read it, taken from the ASGI scope once."""

    __slots__ = ("_receive", "header_items", "headers", "method", "path", "query", "scope")

    def __init__(self, scope: Scope, receive: Receive, path: str, query: str) -> None:
        self.scope = scope
        self.method: str = scope["method"]
        self.path = path
        """The path as Starlette's ``request.url.path`` reads it."""
        self.query = query
        """The query string as Starlette's ``request.url.query`` reads it."""
        self.header_items = [
            (name.decode("latin-1"), value.decode("latin-1")) for name, value in scope["headers"]
        ]
        """Every header as (lower-case name, value), in order, repeats kept."""
        self.headers: Mapping[str, str] = dict(reversed(self.header_items))
        """One value per lower-case name: the first one sent, as Starlette's ``Headers`` reads it."""
        self._receive = receive

    @classmethod
    def of(cls, request: Request) -> Call:
        """The call for a request Starlette routed."""
        url = request.url
        return cls(request.scope, request.receive, url.path, url.query)

    @property
    def exchange(self) -> Exchange | None:
        """The request's access record, once :meth:`proxy.server.app._Proxy.begin` made it."""
        exchange = self.scope.get("state", {}).get("exchange")
        return exchange if isinstance(exchange, Exchange) else None

    async def stream(self) -> AsyncIterator[bytes]:
        """The body as it arrives, as Starlette's ``Request.stream`` gives it (a last empty chunk
        included); raises ``ClientDisconnect`` when the client leaves first."""
        while True:
            message = await self._receive()
            if message["type"] == "http.request":
                body = message.get("body", b"")
                if body:
                    yield body
                if not message.get("more_body", False):
                    break
            elif message["type"] == "http.disconnect":
                raise ClientDisconnect()
        yield b""


class Whole:
    """An answer sent in one body message, with the headers Starlette's ``Response`` would give it."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, body: bytes) -> None:
        self.status = status
        self.body = body
        self.headers: list[tuple[bytes, bytes]] = (
            []  # no Content-Length on an answer that cannot have a body
            if status < 200 or status in (204, 304)
            else [(b"content-length", str(len(body)).encode("latin-1"))]
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


class Relay:
    """An upstream body relayed piece by piece, closed and recorded however the answer ends.

    No ``Content-Length``: the server sends it chunked. A body that broke off upstream (other than
    SSE, which ends with an in-band error event) gets no final chunk: the app returns without
    completing the answer, the server closes the connection (uvicorn logs "ASGI callable returned
    without completing response"), and the client sees a truncated answer, as behind nginx or Envoy,
    never a short body passed off as complete. A client leaving mid-stream is noticed by
    :class:`~proxy.server.guard.ClientWatch`, which cancels the relay (or, with a server speaking ASGI
    2.4, by ``send`` failing: a ``ClientDisconnect``, as Starlette's ``StreamingResponse`` raises).
    """

    __slots__ = ("_on_done", "_reply", "headers", "status")

    def __init__(self, reply: UpstreamReply, on_done: Callable[[], None]) -> None:
        self.status = reply.status_code
        self.headers: list[tuple[bytes, bytes]] = []
        self._reply = reply
        self._on_done = on_done

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        chunks = self._reply.stream()
        try:
            await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
            async for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if self._reply.cut_off:
                return  # no proper end: the server drops the connection, and the client sees a cut answer
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            if _spec_version(scope) < (2, 4):
                raise
            raise ClientDisconnect() from None  # how an ASGI 2.4 server reports a client gone
        finally:
            close = getattr(chunks, "aclose", None)  # an async generator, left open if sending failed
            if close is not None:
                await close()
            await self._reply.aclose()
            self._on_done()


def _spec_version(scope: Scope) -> tuple[int, ...]:
    return tuple(map(int, scope.get("asgi", {}).get("spec_version", "2.0").split(".")))


Answer = Whole | Relay


class EdgeProxy(Protocol):
    """What the edge needs from the app's handlers."""

    async def chat_completions(self, call: Call) -> Answer: ...

    async def surface(self, call: Call) -> Answer: ...

    def error_answer(self, call: Call, exc: ProxyError) -> Response: ...

    def on_unhandled(self, scope: Scope, exc: BaseException) -> str: ...


class Edge:
    """Chat completions past the router; every request under the last-resort guard.

    The last resort: a bug answers a plain 500 ``server_error`` (if no answer started) and never a
    traceback. The router's matching, Starlette's per-route wrappers and its exception middleware do
    nothing for the chat route that :meth:`_chat` does not.
    """

    def __init__(self, app: ASGIApp, proxy: EdgeProxy) -> None:
        self.app = app
        self.proxy = proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope.setdefault("state", {})
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            fast = scope["method"] == "POST" and not scope.get("root_path")
            if fast and scope["path"] == CHAT_PATH:
                await self._chat(scope, receive, tracking_send)
            elif fast and scope["path"] in SURFACE_PATHS:
                await self._chat(scope, receive, tracking_send, scope["path"])
            else:
                await self.app(scope, receive, tracking_send)
        except Exception as exc:
            request_id = self.proxy.on_unhandled(scope, exc)
            if not started and not isinstance(exc, ClientDisconnect):
                body = error_body(
                    f"internal error in the proxy; its log has the details (request {request_id})",
                    "server_error",
                )
                await JSONResponse(body, status_code=500, headers={"x-request-id": request_id})(
                    scope, receive, send
                )

    async def _chat(self, scope: Scope, receive: Receive, send: Send, surface: str | None = None) -> None:
        # the query string as Starlette reads it; there rarely is one, so its parser costs nothing here
        query = URL(scope=scope).query if scope.get("query_string") else ""
        call = Call(scope, receive, surface or CHAT_PATH, query)
        answer: Answer | Response
        try:
            answer = await (self.proxy.surface(call) if surface else self.proxy.chat_completions(call))
        except ProxyError as exc:
            answer = self.proxy.error_answer(call, exc)
        await answer(scope, receive, send)
