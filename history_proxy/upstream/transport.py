"""A lean HTTP/1.1 transport for the upstream requests: pooled asyncio connections and httptools' parser.

httpx's default transport (httpcore over anyio streams, h11 for framing) cost about a third of the
proxy's CPU per request in profiles of the benchmark. :class:`LeanTransport` does the same job for
the requests the proxy sends, over keep-alive :class:`~history_proxy.upstream.connection.Connection` s. It has two
doors: :meth:`LeanTransport.exchange`, which :mod:`history_proxy.upstream.client` uses for every request (a head
written from prebuilt bytes, an :class:`Answer` back: no httpx Request, Response or Headers per
request), and httpx's ``handle_async_request`` for the shared ``httpx.AsyncClient`` (summary calls).

Both keep httpx's contract, so everything above (retries, fallbacks, error mapping; respx in tests)
is unchanged:

    refused / unreachable / TLS failure      httpx.ConnectError      (httpx.ConnectTimeout on time;
                                             TLSVerificationError, naming the reason, for a certificate)
    no answer within the read timeout        httpx.ReadTimeout       (before the head, or between pieces)
    closed before a complete answer          httpx.RemoteProtocolError
    a malformed answer                       httpx.RemoteProtocolError
    a header holding CR, LF or NUL           httpx.LocalProtocolError (nothing is sent)

A request is never sent twice. An idle connection is checked before a request is written on it
(closed, or holding bytes nobody asked for: it is dropped and another one taken, as urllib3 does);
once a byte of the request was written, a connection closing before the answer is a
``RemoteProtocolError``, even on a reused connection: the upstream may have read the request and
started on it (a chat completion costs money and may have side effects). ``HEAD`` requests (whose
answers announce a body they do not carry) go to httpx's own transport.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import httpx

from history_proxy.upstream.connection import Connection, NotSent

IDLE_PER_ORIGIN = 256
"""Idle keep-alive connections kept per upstream origin; more are closed when they fall idle."""
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
"""Methods whose request announces a zero length when it has no body (as httpx does)."""

Origin = tuple[str, str, int]
Content = bytes | AsyncIterable[bytes] | None
"""A request body: whole bytes (sent with its length), a stream (sent chunked, never resent) or none."""


class TLSVerificationError(httpx.ConnectError):
    """The upstream's TLS certificate was not accepted; the message says why."""


class Timeouts(NamedTuple):
    """Seconds allowed to connect, between pieces of the answer, and for each write of a streamed body."""

    connect: float | None
    read: float | None
    write: float | None


@dataclass(frozen=True, slots=True)
class Address:
    """An upstream URL parsed once: the connection's origin, the Host header and the request target."""

    url: httpx.URL
    origin: Origin
    host: bytes
    target: bytes

    @classmethod
    def of(cls, url: httpx.URL) -> Address:
        port = url.port or (443 if url.scheme == "https" else 80)
        return cls(url, (url.scheme, url.host, port), url.netloc, url.raw_path)


def wire_headers(
    address: Address, method: str, headers: list[tuple[bytes, bytes]], body: Content
) -> list[tuple[bytes, bytes]]:
    """``headers`` as sent, in httpx's order: ``Host`` first, a zero ``Content-Length`` for an empty
    POST/PUT/PATCH next, and the body's length or chunking last. ``headers`` holds neither."""
    if body is None or body == b"":
        if method in BODY_METHODS:
            return [(b"Host", address.host), (b"Content-Length", b"0"), *headers]
        return [(b"Host", address.host), *headers]
    framing = (
        (b"Content-Length", b"%d" % len(body))
        if isinstance(body, bytes)
        else (b"Transfer-Encoding", b"chunked")
    )
    return [(b"Host", address.host), *headers, framing]


class Answer(Protocol):
    """An upstream answer whose head arrived; its raw body is still to be read, then it is closed."""

    @property
    def status_code(self) -> int: ...

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """The headers as received: names in their own case, in order, repeats kept."""
        ...

    async def next_piece(self) -> bytes | None:
        """The next piece of the body as it arrived (never empty), or None at its end."""
        ...

    async def aclose(self) -> None:
        """Release the connection (idempotent)."""
        ...


class LeanAnswer:
    """An :class:`Answer` read straight from a pooled connection; closing it returns the connection."""

    __slots__ = ("_connection", "_origin", "_timeout", "_transport", "raw_headers", "status_code")

    def __init__(
        self, transport: LeanTransport, origin: Origin, connection: Connection, timeout: float | None
    ) -> None:
        self.status_code = connection.status
        self.raw_headers = connection.headers
        self._transport = transport
        self._origin = origin
        self._connection: Connection | None = connection
        self._timeout = timeout

    async def next_piece(self) -> bytes | None:
        connection = self._connection
        return None if connection is None else await connection.next_piece(self._timeout)

    def release(self) -> None:
        """:meth:`aclose` without a wait: nothing to shield from cancellation."""
        connection, self._connection = self._connection, None
        if connection is not None:
            self._transport.release(self._origin, connection)

    async def aclose(self) -> None:
        self.release()


class ResponseAnswer:
    """An httpx ``Response`` as an :class:`Answer` (``HEAD``, an HTTP proxy from the environment, respx)."""

    __slots__ = ("_pieces", "response")

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._pieces: AsyncIterator[bytes] | None = None

    @property
    def status_code(self) -> int:
        return self.response.status_code

    @property
    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        return self.response.headers.raw

    async def next_piece(self) -> bytes | None:
        if self._pieces is None:
            self._pieces = self.response.aiter_raw()
        return await anext(self._pieces, None)

    async def aclose(self) -> None:
        await self.response.aclose()


class _Body(httpx.AsyncByteStream):
    """An answer's body as it arrives; closing it returns the connection to the pool when reusable."""

    def __init__(
        self, transport: LeanTransport, origin: Origin, connection: Connection, timeout: float | None
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: Connection | None = connection
        self._timeout = timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        while (piece := await connection.next_piece(self._timeout)) is not None:
            yield piece

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._transport.release(self._origin, connection)


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 with keep-alive for the upstream client; see the module docstring."""

    def __init__(
        self, ssl_context: ssl.SSLContext, *, keepalive_s: float, fallback: httpx.AsyncBaseTransport
    ) -> None:
        self._ssl = ssl_context
        self._keepalive_s = keepalive_s
        self._fallback = fallback
        self._idle: dict[Origin, list[Connection]] = {}
        self._busy: set[Connection] = set()

    async def exchange(
        self,
        address: Address,
        method: str,
        headers: list[tuple[bytes, bytes]],
        body: Content,
        timeouts: Timeouts,
    ) -> LeanAnswer:
        """Send one request and return once the answer's head arrived (the body is read from the answer).

        ``headers`` are the end-to-end ones, as bytes; ``Host`` and the body's framing are added as
        :func:`wire_headers` says. Not for ``HEAD``, whose answer's framing the parser cannot know.
        """
        method = method.upper()
        head = _head(method, address.target, wire_headers(address, method, headers, body))
        if body is None or isinstance(body, bytes):
            connection = await self._roundtrip(address.origin, head, body or b"", None, timeouts)
        else:
            connection = await self._roundtrip(address.origin, head, b"", body, timeouts, chunked=True)
        return LeanAnswer(self, address.origin, connection, timeouts.read)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if request.method == "HEAD" or url.scheme not in ("http", "https"):
            return await self._fallback.handle_async_request(request)
        given: dict[str, float | None] = request.extensions.get("timeout", {})
        timeouts = Timeouts(given.get("connect"), given.get("read"), given.get("write"))
        origin: Origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        head = _head(request.method, url.raw_path, request.headers.raw)
        if isinstance(request.stream, httpx.ByteStream):
            connection = await self._roundtrip(origin, head, request.content, None, timeouts)
        else:
            chunked = request.headers.get("transfer-encoding", "").lower() == "chunked"
            stream: AsyncIterable[bytes] = request.stream  # type: ignore[assignment]
            connection = await self._roundtrip(origin, head, b"", stream, timeouts, chunked=chunked)
        return httpx.Response(
            connection.status,
            headers=connection.headers,
            stream=_Body(self, origin, connection, timeouts.read),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": connection.reason},
        )

    async def _roundtrip(
        self,
        origin: Origin,
        head: bytes,
        body: bytes,
        stream: AsyncIterable[bytes] | None,
        timeouts: Timeouts,
        *,
        chunked: bool = False,
    ) -> Connection:
        """Send ``head`` and ``body`` (or ``stream``) on a pooled connection; the connection once the
        answer's head arrived. Only a connection found closed before anything was written on it is
        replaced (once); nothing written is ever written again."""
        connection = await self._acquire(origin, timeouts.connect)
        try:
            try:
                await self._send(connection, head, body, stream, chunked, timeouts.write)
            except NotSent:
                self._busy.discard(connection)
                connection = await self._acquire(origin, timeouts.connect, fresh=True)
                await self._send(connection, head, body, stream, chunked, timeouts.write)
            await connection.head(timeouts.read)
        except BaseException:
            connection.close()
            self._busy.discard(connection)
            raise
        return connection

    @staticmethod
    async def _send(
        connection: Connection,
        head: bytes,
        body: bytes,
        stream: AsyncIterable[bytes] | None,
        chunked: bool,
        write_timeout: float | None,
    ) -> None:
        connection.start(head, body)
        if stream is None:
            return
        async for piece in stream:
            if piece:
                data = b"%x\r\n%b\r\n" % (len(piece), piece) if chunked else piece
                await connection.write_more(data, write_timeout)
        if chunked:
            await connection.write_more(b"0\r\n\r\n", write_timeout)

    async def _acquire(self, origin: Origin, timeout: float | None, *, fresh: bool = False) -> Connection:
        """An idle connection still open, within its keep-alive and silent since its last answer, or a
        new one. The check and the write that follows happen without a wait between them."""
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle and not fresh:
            connection = idle.pop()
            if (
                connection.reusable
                and now - connection.idle_since < self._keepalive_s
                and not connection.readable()
            ):
                self._busy.add(connection)
                return connection
            connection.close()
        connection = await self._connect(origin, timeout)
        self._busy.add(connection)
        return connection

    async def _connect(self, origin: Origin, timeout: float | None) -> Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        secure = scheme == "https"
        try:
            async with asyncio.timeout(timeout):
                _, protocol = await loop.create_connection(
                    lambda: Connection(loop),
                    host,
                    port,
                    ssl=self._ssl if secure else None,
                    server_hostname=host if secure else None,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} within {timeout:g} s") from None
        except ssl.SSLCertVerificationError as exc:
            reason = exc.verify_message or exc.reason or str(exc)
            raise TLSVerificationError(f"TLS certificate of {host}:{port} not accepted: {reason}") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from None
        return protocol

    def release(self, origin: Origin, connection: Connection) -> None:
        """Take back a connection whose answer was read (kept for reuse) or abandoned (closed)."""
        self._busy.discard(connection)
        if not connection.keep_alive:
            connection.close()
            return
        idle = self._idle.setdefault(origin, [])
        if len(idle) >= IDLE_PER_ORIGIN:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        idle.append(connection)

    def sweep(self) -> int:
        """Close idle connections past their keep-alive or closed by the upstream; how many."""
        now = time.monotonic()
        closed = 0
        for origin, idle in list(self._idle.items()):
            alive = [c for c in idle if c.reusable and now - c.idle_since < self._keepalive_s]
            for connection in idle:
                if connection not in alive:
                    connection.close()
                    closed += 1
            if alive:
                self._idle[origin] = alive
            else:
                del self._idle[origin]
        return closed

    @property
    def idle_connections(self) -> int:
        """How many connections wait in the pool for a request."""
        return sum(len(idle) for idle in self._idle.values())

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
        for connection in list(self._busy):
            connection.close()
        self._busy.clear()
        await self._fallback.aclose()


def _head(method: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """The request line and headers as sent; refuses a line break or NUL byte anywhere in them."""
    lines = [b"%b %b HTTP/1.1" % (method.encode("ascii"), target)]
    lines += [name + b": " + value for name, value in headers]
    head = b"\r\n".join(lines) + b"\r\n\r\n"
    if head.count(b"\n") != len(lines) + 1 or head.count(b"\r") != len(lines) + 1 or b"\0" in head:
        raise httpx.LocalProtocolError("a request header holds a line break or a NUL byte")
    return head
