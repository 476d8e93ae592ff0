"""The proxy's upstream connections: one shared httpx client over the lean transport, and its sweeper.

:class:`ClientPool` opens one ``httpx.AsyncClient`` whose transport is
:class:`~history_proxy.upstream.transport.LeanTransport` (keep-alive HTTP/1.1 connections per upstream origin), and
runs a background task closing connections idle past ``KEEPALIVE_S``. :mod:`history_proxy.upstream.client` decides
what to send where; this module only owns the connections.
"""

from __future__ import annotations

import asyncio
import urllib.request
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx

from history_proxy.upstream.transport import Address, Answer, Content, LeanTransport, ResponseAnswer, Timeouts

KEEPALIVE_S = 30.0


def _refusing_jar() -> CookieJar:
    """A jar that keeps no cookie: the client is shared by every caller, so an upstream's
    Set-Cookie must never ride along on another client's (or tenant's) request."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


class ClientPool:
    """The shared httpx client, opened with the app; connections idle too long are swept.

    Its transport keeps idle connections in a list per origin (taking and returning one costs the
    same with 5 or 5,000 open), so one client serves every request; ``HEAD`` requests go through
    httpx's own transport, with its own pool. When the environment names an HTTP proxy
    (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``), the client uses httpx's own transports, which
    route through it (and honour ``NO_PROXY``).
    """

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None
        self._transport: LeanTransport | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def open(self, timeouts: Timeouts) -> None:
        """Open the client (with ``timeouts`` as its default) and start the sweeper."""
        timeout = _httpx_timeout(timeouts)
        ssl_context = httpx.create_ssl_context()
        limits = httpx.Limits(
            max_connections=None, max_keepalive_connections=256, keepalive_expiry=KEEPALIVE_S
        )
        if not urllib.request.getproxies():
            fallback = httpx.AsyncHTTPTransport(verify=ssl_context, limits=limits)
            self._transport = LeanTransport(ssl_context, keepalive_s=KEEPALIVE_S, fallback=fallback)
        self._client = httpx.AsyncClient(
            transport=self._transport,  # None: httpx's own, with the environment's proxies
            timeout=timeout,
            verify=ssl_context,
            limits=limits,
            follow_redirects=False,
            cookies=_refusing_jar(),
        )
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="history-proxy connection sweeper")

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_S / 2)
            self.sweep()

    def sweep(self) -> int:
        """Close every connection idle past its keep-alive; how many were closed."""
        return self._transport.sweep() if self._transport is not None else 0

    async def send(self, request: httpx.Request) -> httpx.Response:
        """Send ``request``; the answer's body is still to be read (or closed).

        Straight to the transport: the client's layer (cookies, which are refused anyway, auth,
        redirects, which are not followed, default headers) does nothing the proxy needs and cost
        as much CPU as the transport itself. Through the client when the environment names an
        HTTP proxy, so httpx's proxy routing applies. ``request`` carries its timeouts in
        ``extensions["timeout"]``.
        """
        if self._client is None:
            raise RuntimeError("upstream client is not open: run the app inside its lifespan")
        if self._transport is not None:
            return await self._transport.handle_async_request(request)
        return await self._client.send(request, stream=True)

    async def exchange(
        self,
        address: Address,
        method: str,
        headers: list[tuple[bytes, bytes]],
        body: Content,
        timeouts: Timeouts,
    ) -> Answer:
        """Send one request (``headers`` end-to-end, as bytes); the answer's body is still to be read.

        Through the lean transport's own door (:meth:`LeanTransport.exchange`: no httpx objects per
        request); ``HEAD`` and requests through an HTTP proxy named by the environment go as an
        httpx request, as :meth:`send` sends it.
        """
        if self._transport is not None and method != "HEAD":
            return await self._transport.exchange(address, method, headers, body, timeouts)
        extensions = {"timeout": _httpx_timeout(timeouts).as_dict()}
        request = httpx.Request(method, address.url, headers=headers, content=body, extensions=extensions)
        return ResponseAnswer(await self.send(request))

    def next(self) -> httpx.AsyncClient:
        """The shared client."""
        if self._client is None:
            raise RuntimeError("upstream client is not open: run the app inside its lifespan")
        return self._client

    async def close(self) -> None:
        """Stop the sweeper and close the client (and its connections)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        client, self._client, self._transport = self._client, None, None
        if client is not None:
            await client.aclose()


def _httpx_timeout(timeouts: Timeouts) -> httpx.Timeout:
    return httpx.Timeout(
        connect=timeouts.connect, read=timeouts.read, write=timeouts.write, pool=timeouts.connect
    )
