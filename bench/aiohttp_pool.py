"""aiohttp's client in place of the lean transport, for measuring one against the other (issue 16).

:class:`AiohttpPool` keeps :class:`history_proxy.upstream.pools.ClientPool`'s interface and sends every
request of :meth:`exchange` through one ``aiohttp.ClientSession`` (its C parser, its pool, capped
header sizes), with raw bodies (no decompression) and no headers of its own, so the upstream sees
what the lean transport sends. Failures are mapped to the httpx types the proxy expects. The httpx
client of the parent class stays for summary calls.

Not used by the proxy: ``python -m bench.clients`` builds a copy of the tree whose
``history_proxy/upstream/pools.py`` ends with ``from bench.aiohttp_pool import AiohttpPool as ClientPool``
and compares the two with ``bench.compare``.
"""

from __future__ import annotations

import aiohttp
import httpx
from yarl import URL

from history_proxy.upstream.pools import KEEPALIVE_S, ClientPool
from history_proxy.upstream.transport import Address, Answer, Content, Timeouts


class AiohttpAnswer:
    """An aiohttp response as the proxy's :class:`~history_proxy.upstream.transport.Answer`."""

    __slots__ = ("_response",)

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status_code(self) -> int:
        status: int = self._response.status
        return status

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        return list(self._response.raw_headers)

    async def next_piece(self) -> bytes | None:
        try:
            piece = await self._response.content.readany()
        except aiohttp.ClientPayloadError as exc:
            raise httpx.RemoteProtocolError(str(exc)) from None
        except TimeoutError:
            raise httpx.ReadTimeout("no answer from the upstream in time") from None
        return piece or None

    async def aclose(self) -> None:
        self._response.release()


class AiohttpPool(ClientPool):
    """:class:`ClientPool` whose :meth:`exchange` goes through aiohttp."""

    def __init__(self) -> None:
        super().__init__()
        self._session: aiohttp.ClientSession | None = None

    def open(self, timeouts: Timeouts) -> None:
        super().open(timeouts)
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=KEEPALIVE_S)
        self._session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
            cookie_jar=aiohttp.DummyCookieJar(),
        )

    async def exchange(
        self,
        address: Address,
        method: str,
        headers: list[tuple[bytes, bytes]],
        body: Content,
        timeouts: Timeouts,
    ) -> Answer:
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(connect=timeouts.connect, sock_read=timeouts.read)
        sent = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in headers]
        try:
            response = await self._session.request(
                method,
                URL(str(address.url), encoded=True),
                headers=sent,
                data=body,
                timeout=timeout,
                allow_redirects=False,
            )
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc)) from None
        except TimeoutError:
            raise httpx.ReadTimeout("no answer from the upstream in time") from None
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(str(exc)) from None
        return AiohttpAnswer(response)

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        await super().close()
