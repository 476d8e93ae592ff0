"""The ASGI layers around the routes: the last-resort 500, and the fast path for chat completions.

Both wrap the app that :func:`proxy.app.create_app` builds, inside :class:`~proxy.guard.RequestGuard`.
"""

from __future__ import annotations

from typing import Protocol

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.errors import ProxyError, error_body

CHAT_PATH = "/v1/chat/completions"


class EdgeProxy(Protocol):
    """What the layers need from the app's handlers."""

    async def chat_completions(self, request: Request) -> Response: ...

    async def on_proxy_error(self, request: Request, exc: Exception) -> Response: ...

    def on_unhandled(self, scope: Scope, exc: BaseException) -> str: ...


class LastResort:
    """Outermost guard: a bug answers a plain 500 ``server_error`` and never a traceback."""

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
            await self.app(scope, receive, tracking_send)
        except Exception as exc:  # noqa: BLE001 - the last guard: log it, answer 500, keep serving
            request_id = self.proxy.on_unhandled(scope, exc)
            if not started and not isinstance(exc, ClientDisconnect):
                body = error_body(
                    f"internal error in the proxy; its log has the details (request {request_id})",
                    "server_error",
                )
                await JSONResponse(body, status_code=500, headers={"x-request-id": request_id})(
                    scope, receive, send
                )


class ChatFastPath:
    """``POST /v1/chat/completions`` straight to its handler, past the router and its wrappers.

    The router's matching, Starlette's per-route wrappers and its exception middleware do nothing
    for this route that the two lines below do not; every other request goes through them.
    """

    def __init__(self, app: ASGIApp, proxy: EdgeProxy) -> None:
        self.app = app
        self.proxy = proxy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != CHAT_PATH or scope["method"] != "POST" or scope.get("root_path"):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            response = await self.proxy.chat_completions(request)
        except ProxyError as exc:
            response = await self.proxy.on_proxy_error(request, exc)
        await response(scope, receive, send)
