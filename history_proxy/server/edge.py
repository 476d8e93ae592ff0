"""The HTTP edge inside the guard: the chat and surface paths, every error answer, and answers.

:class:`Edge` wraps the app that :func:`history_proxy.server.app.create_app` builds, inside
:class:`~history_proxy.server.guard.RequestGuard`. ``POST /v1/chat/completions`` and the surfaces' routes
(:data:`history_proxy.surfaces.table.BY_ROUTE`), under any root
path, go from the ASGI scope straight to their handlers as
a :class:`Call`, and their answers (:class:`Whole` or :class:`Relay`) straight to ``send``: no
router, and no Starlette ``Request``, ``URL``, ``Headers`` or ``Response`` on the way; they have
no other route. Every other request goes through Starlette's router; its handlers read a
:class:`Call` too. Every :class:`~history_proxy.errors.ProxyError`, whichever route raised it, is answered
here, the one place an error becomes an answer (:func:`error_answer`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote

from starlette.datastructures import URL
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from history_proxy.errors import OPENAI, InvalidRequestError, MethodNotAllowedError, ProxyError, render_error
from history_proxy.observability.access import Exchange
from history_proxy.server.doors import PREVIEW_ROUTE, canonical, normalise
from history_proxy.surfaces.table import BY_ROUTE, Surface, surface_at
from history_proxy.upstream.reply import UpstreamReply

if TYPE_CHECKING:
    from history_proxy.server.reload import ServingState


class Call:
    """One HTTP request as the handlers read it, taken from the ASGI scope once."""

    __slots__ = ("_receive", "header_items", "headers", "method", "path", "query", "scope", "state")

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
        self.state: ServingState = scope["state"]["serving"]
        """The serving state (config, pipeline, upstreams) the guard pinned for this request."""
        self._receive = receive

    @classmethod
    def of(cls, request: Request) -> Call:
        """The call for a request Starlette routed."""
        url = request.url
        return cls(request.scope, request.receive, url.path, url.query)

    @property
    def exchange(self) -> Exchange | None:
        """The request's access record, once :meth:`history_proxy.server.app._Proxy.begin` made it."""
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
    :class:`~history_proxy.server.guard.ClientWatch`, which cancels the relay (or, with a server speaking ASGI
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


Outgoing = Whole | Relay
"""An answer a handler returns for the edge to send."""


def scope_headers(scope: Scope) -> Mapping[str, str]:
    """One value per lower-case name (the first one sent, as Starlette's ``Headers`` reads it)."""
    return {
        name.decode("latin-1"): value.decode("latin-1") for name, value in reversed(scope.get("headers", ()))
    }


def error_answer(exc: ProxyError, request_id: str, surface: str = OPENAI) -> Whole:
    """``exc`` in ``surface``'s error shape, with its own headers and the request id."""
    answer = Whole(exc.status_code, render_error(exc, surface))
    answer.headers += [
        (b"content-type", b"application/json"),
        (b"x-request-id", request_id.encode("latin-1")),
        *((name.encode("latin-1"), value.encode("latin-1")) for name, value in exc.headers().items()),
    ]
    return answer


def route_path(scope: Scope) -> str:
    """The path below the root path, as Starlette's router matches it."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root + "/") else path


_UNSAFE_IN_RAW_PATH = (b"\\", b"%5c", b";", b"%3b", b"%00", b"%25")


def check_path(scope: Scope) -> None:
    """400 for a path an upstream or a server behind it could read as another one.

    Refused: dot segments (``.``, ``..``, also percent-encoded or after a second decoding), a
    backslash (``..\\admin``: a path separator on some servers), a semicolon (``..;/admin``: path
    parameters in Java servers), ``%00`` and ``%25`` (a percent sign, for a second decoding). Such a
    path is never forwarded. (``POST /v1/chat/completions`` is exactly that path, so needs no check.)
    """
    raw: bytes = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    lowered = raw.lower()
    path: str = scope["path"]
    if (
        any(mark in lowered for mark in _UNSAFE_IN_RAW_PATH)
        or "\\" in path
        or ";" in path
        or any(unquote(segment) in (".", "..") for segment in path.split("/"))
    ):
        raise InvalidRequestError(
            f"the request path {raw.decode('latin-1')[:200]!r} holds a dot segment, a backslash, a semicolon "
            "or an encoded percent sign or NUL; this proxy forwards plain paths only",
            code="invalid_path",
        )


class EdgeProxy(Protocol):
    """What the edge needs from the app's handlers."""

    async def handle(self, call: Call, surface: Surface) -> Outgoing: ...

    def error_answer(self, scope: Scope, exc: ProxyError) -> Whole: ...

    def on_unhandled(self, scope: Scope, exc: BaseException) -> str: ...


class Edge:
    """Chat completions and the surfaces past the router; every error answered in one place; the last resort.

    The last resort: a bug answers a plain 500 ``server_error`` (if no answer started) and never a
    traceback. A ``ProxyError`` raised by any route (the router's 404/405 become ones) is answered
    by :meth:`EdgeProxy.error_answer`.
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
            try:
                await self._dispatch(scope, receive, tracking_send)
            except ProxyError as exc:
                if started:
                    raise
                await self.proxy.error_answer(scope, exc)(scope, receive, tracking_send)
        except Exception as exc:
            request_id = self.proxy.on_unhandled(scope, exc)
            if not started and not isinstance(exc, ClientDisconnect):
                error = ProxyError(
                    f"internal error in the proxy; its log has the details (request {request_id})"
                )
                await error_answer(error, request_id)(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Chat and the surfaces past the router, under any spelling of their paths (:mod:`doors`)."""
        try:
            surface = surface_at(route_path(scope)) if scope["method"] == "POST" else None
            if surface is None:
                check_path(scope)
                route = route_path(scope)
                if scope["method"] != "POST":
                    # another method on a shaped route is the upstream's to answer (OpenAI lists stored
                    # chat completions on GET), forwarded as any other path; the preview is ours: 405
                    if canonical(route) == PREVIEW_ROUTE:
                        raise MethodNotAllowedError(
                            f"{scope['method']} {PREVIEW_ROUTE} is not served: POST the request body to preview",
                            allow="POST",
                        )
                    surface = None
                else:
                    surface = BY_ROUTE.get(normalise(scope, route))
            if surface is not None:
                await self._shaped(scope, receive, send, surface)
            else:
                await self.app(scope, receive, send)
        except RecursionError:  # JSON nested deeper than Python walks: the client's to fix
            raise InvalidRequestError(
                "the request body nests objects or arrays too deeply for this proxy; send at most a few "
                "hundred levels",
                code="nesting_too_deep",
            ) from None

    async def _shaped(self, scope: Scope, receive: Receive, send: Send, surface: Surface) -> None:
        # the query string as Starlette reads it; there rarely is one, so its parser costs nothing here
        query = URL(scope=scope).query if scope.get("query_string") else ""
        call = Call(scope, receive, scope["path"], query)
        answer = await self.proxy.handle(call, surface)
        await answer(scope, receive, send)
