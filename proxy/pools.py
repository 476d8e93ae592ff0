"""The proxy's upstream connections: sharded httpx client pools and the sweeper of idle connections.

:class:`ClientPool` hands out one of ``POOL_SHARDS`` shared ``httpx.AsyncClient`` objects in turn
(each opened when traffic first reaches it, together at most ``MAX_CONNECTIONS`` connections) and
runs a background task closing connections idle past ``KEEPALIVE_S``. :mod:`proxy.upstream` decides
what to send where; this module only owns the connections.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx

MAX_CONNECTIONS = 1024
POOL_SHARDS = 64
KEEPALIVE_S = 30.0


def _refusing_jar() -> CookieJar:
    """A jar that keeps no cookie: the clients are shared by every caller, so an upstream's
    Set-Cookie must never ride along on another client's (or tenant's) request."""
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


class ClientPool:
    """The shared httpx clients, used in turn; each opened when traffic first reaches it.

    httpcore's pool scans (idle x all) of its connections whenever a request starts or ends, which
    costs seconds of CPU with hundreds of open streams: small pools keep each scan short. It also
    closes connections idle past their keep-alive only when their pool is next used, so a sweeper
    closes them in pools that traffic no longer reaches.
    """

    def __init__(self) -> None:
        self._clients: list[httpx.AsyncClient] = []
        self._turn = itertools.count()
        self._ssl: ssl.SSLContext | None = None
        self._timeout = httpx.Timeout(10)
        self._sweeper: asyncio.Task[None] | None = None

    def open(self, timeout: httpx.Timeout) -> None:
        """Start handing out clients (with ``timeout`` as their default) and start the sweeper."""
        self._ssl, self._timeout = httpx.create_ssl_context(), timeout
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="history-proxy connection sweeper")

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(KEEPALIVE_S / 2)
            await self.sweep()

    async def sweep(self) -> None:
        """Close every connection idle past its keep-alive, in every pool."""
        for client in list(self._clients):
            # httpx internals: if they ever change, there is nothing to sweep and the pools clean up as before
            pool = getattr(getattr(client, "_transport", None), "_pool", None)
            for connection in list(getattr(pool, "connections", ())):
                if connection.is_idle() and connection.has_expired():
                    await connection.aclose()  # the pool drops closed connections when next used

    def next(self) -> httpx.AsyncClient:
        """The next shared client in turn (opening its pool on first use)."""
        if self._ssl is None:
            raise RuntimeError("upstream client is not open: run the app inside its lifespan")
        index = next(self._turn) % POOL_SHARDS
        if index >= len(self._clients):
            per_pool = MAX_CONNECTIONS // POOL_SHARDS
            limits = httpx.Limits(
                max_connections=per_pool, max_keepalive_connections=per_pool, keepalive_expiry=KEEPALIVE_S
            )
            self._clients.append(
                httpx.AsyncClient(
                    timeout=self._timeout,
                    limits=limits,
                    verify=self._ssl,
                    follow_redirects=False,
                    cookies=_refusing_jar(),
                )
            )
            index = len(self._clients) - 1
        return self._clients[index]

    async def close(self) -> None:
        """Stop the sweeper and close every client (and its connections)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._ssl = None
        clients, self._clients = self._clients, []
        for client in clients:
            await client.aclose()
