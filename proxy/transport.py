"""A lean HTTP/1.1 transport for the upstream httpx client: asyncio protocols and httptools' parser.

httpx's default transport (httpcore over anyio streams, h11 for framing) cost about a third of the
proxy's CPU per request in profiles of the benchmark. :class:`LeanTransport` does the same job for
the requests the proxy sends, with one asyncio protocol per keep-alive connection and the C parser
uvicorn already uses (``httptools``): the request is written in one call, the response head and body
arrive through parser callbacks, the body is handed over as it arrives (no decoding: raw bytes).

It keeps httpx's contract, so everything above it (``proxy.upstream``: retries, fallbacks, error
mapping; respx in tests) is unchanged:

    refused / unreachable / TLS failure      httpx.ConnectError      (httpx.ConnectTimeout on time)
    no answer within the read timeout        httpx.ReadTimeout       (before the head, or between pieces)
    closed before a complete answer          httpx.RemoteProtocolError
    a malformed answer                       httpx.RemoteProtocolError

A request on a reused connection that the upstream closed before answering a byte (an idle
keep-alive connection closed at the same moment) is sent again once on a new connection, as
browsers and urllib3 do: the upstream never read it. ``HEAD`` requests (whose answers announce a
body they do not carry) go to httpx's own transport.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import cast

import httptools
import httpx

HIGH_WATER = 256 * 1024
"""Bytes of an answer buffered before the connection stops reading until the client catches up."""
IDLE_PER_ORIGIN = 256
"""Idle keep-alive connections kept per upstream origin; more are closed when they fall idle."""

Origin = tuple[str, str, int]


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection to an upstream, answering one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.until_close = False  # a body that ends when the connection does (no length, not chunked)
        self.complete = False
        self.server_keeps_alive = False
        self.received = False
        self.error: Exception | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.waiter: asyncio.Future[None] | None = None
        self.write_waiter: asyncio.Future[None] | None = None
        self.writing_paused = False
        self.reading_paused = False

    # --- asyncio protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed answer from the upstream ({exc})"))
            self.close()
            return
        if self.buffered > HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.head_done and self.until_close and not self.complete:
            self.complete = True
            self._wake()
        elif not self.complete:
            self._fail(httpx.RemoteProtocolError("the upstream closed the connection before the answer was complete"))
        self._wake_writer()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._wake_writer()

    # --- httptools callbacks -----------------------------------------------------------------

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if 100 <= self.status < 200:
            return  # an interim answer (100 Continue): the real one follows
        framed = any(
            name.lower() in (b"content-length", b"transfer-encoding") for name, _ in self.headers
        )
        self.until_close = not framed and self.status not in (204, 304)
        self.server_keeps_alive = self.parser.should_keep_alive()  # reset once the answer is complete
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        self._wake()

    def on_message_complete(self) -> None:
        if not self.head_done:  # the end of an interim answer
            self.reason, self.headers = b"", []
            return
        self.complete = True
        self._wake()

    # --- used by the transport ---------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_writer(self) -> None:
        waiter = self.write_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: Exception) -> None:
        if self.error is None:
            self.error = error
        self._wake()

    def close(self) -> None:
        """Drop the connection (an answer still in flight cannot be reused)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    @property
    def reusable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def start(self, head: bytes, body: bytes) -> None:
        """Write a request (its head and a whole body) and get ready for its answer."""
        self._reset()
        if self.closed or self.transport is None:
            self._fail(httpx.RemoteProtocolError("the upstream closed the connection before the request was sent"))
            return
        if len(body) < 16384:
            self.transport.write(head + body)  # one write, one segment
        else:
            self.transport.writelines((head, body))  # no copy of a large body

    async def write_more(self, data: bytes, timeout: float | None) -> None:
        """Write part of a streamed body, waiting while the upstream reads slower than we send."""
        if self.closed or self.transport is None:
            raise httpx.WriteError("the upstream closed the connection while the request was being sent")
        self.transport.write(data)
        if self.writing_paused:
            self.write_waiter = self.loop.create_future()
            await _wait(self.write_waiter, timeout, httpx.WriteTimeout)
            if self.closed:
                raise httpx.WriteError("the upstream closed the connection while the request was being sent")

    async def head(self, timeout: float | None) -> None:
        """Wait for the answer's status line and headers."""
        while not self.head_done:
            if self.error is not None:
                raise self.error
            self.waiter = self.loop.create_future()
            await _wait(self.waiter, timeout, httpx.ReadTimeout)

    async def next_piece(self, timeout: float | None) -> bytes | None:
        """The next piece of the body as it arrived, or None at its end."""
        while True:
            if self.chunks:
                piece = self.chunks.popleft()
                self.buffered -= len(piece)
                if self.reading_paused and self.buffered <= HIGH_WATER // 4 and self.transport is not None:
                    self.reading_paused = False
                    self.transport.resume_reading()
                return piece
            if self.complete:
                return None
            if self.error is not None:
                raise self.error
            self.waiter = self.loop.create_future()
            await _wait(self.waiter, timeout, httpx.ReadTimeout)

    @property
    def keep_alive(self) -> bool:
        return self.complete and not self.until_close and self.server_keeps_alive and self.reusable


async def _wait(future: asyncio.Future[None], timeout: float | None, error: type[httpx.TimeoutException]) -> None:
    """Await ``future``, raising ``error`` after ``timeout`` seconds (a timer, not a task per wait)."""
    if timeout is None:
        await future
        return
    timer = future.get_loop().call_later(timeout, _expire, future)
    try:
        await future
    except TimeoutError:
        raise error(f"no answer from the upstream within {timeout:g} s") from None
    finally:
        timer.cancel()


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class _Body(httpx.AsyncByteStream):
    """An answer's body as it arrives; closing it returns the connection to the pool when reusable."""

    def __init__(self, transport: LeanTransport, origin: Origin, connection: _Connection, timeout: float | None) -> None:
        self._transport = transport
        self._origin = origin
        self._connection: _Connection | None = connection
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

    def __init__(self, ssl_context: ssl.SSLContext, *, keepalive_s: float, fallback: httpx.AsyncBaseTransport) -> None:
        self._ssl = ssl_context
        self._keepalive_s = keepalive_s
        self._fallback = fallback
        self._idle: dict[Origin, list[_Connection]] = {}
        self._busy: set[_Connection] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if request.method == "HEAD" or url.scheme not in ("http", "https"):
            return await self._fallback.handle_async_request(request)
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        origin: Origin = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        head = _request_head(request)
        whole = isinstance(request.stream, httpx.ByteStream)
        body = request.content if whole else b""
        connection, reused = await self._acquire(origin, timeouts.get("connect"))
        try:
            try:
                await self._send(connection, head, body, request, timeouts)
                await connection.head(timeouts.get("read"))
            except httpx.RemoteProtocolError:
                if not (reused and whole and not connection.received):
                    raise
                connection.close()  # an idle connection closed just as we used it: try once on a new one
                self._busy.discard(connection)
                connection, _ = await self._acquire(origin, timeouts.get("connect"), fresh=True)
                await self._send(connection, head, body, request, timeouts)
                await connection.head(timeouts.get("read"))
        except BaseException:
            connection.close()
            self._busy.discard(connection)
            raise
        return httpx.Response(
            connection.status,
            headers=connection.headers,
            stream=_Body(self, origin, connection, timeouts.get("read")),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": connection.reason},
        )

    async def _send(
        self, connection: _Connection, head: bytes, body: bytes, request: httpx.Request, timeouts: dict[str, float | None]
    ) -> None:
        connection.start(head, body)
        if isinstance(request.stream, httpx.ByteStream):
            return
        chunked = request.headers.get("transfer-encoding", "").lower() == "chunked"
        async for piece in request.stream:  # type: ignore[union-attr]
            if piece:
                data = b"%x\r\n%b\r\n" % (len(piece), piece) if chunked else piece
                await connection.write_more(data, timeouts.get("write"))
        if chunked:
            await connection.write_more(b"0\r\n\r\n", timeouts.get("write"))

    async def _acquire(self, origin: Origin, timeout: float | None, *, fresh: bool = False) -> tuple[_Connection, bool]:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle and not fresh:
            connection = idle.pop()
            if connection.reusable and now - connection.idle_since < self._keepalive_s:
                self._busy.add(connection)
                return connection, True
            connection.close()
        connection = await self._connect(origin, timeout)
        self._busy.add(connection)
        return connection, False

    async def _connect(self, origin: Origin, timeout: float | None) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        secure = scheme == "https"
        try:
            async with asyncio.timeout(timeout):
                _, protocol = await loop.create_connection(
                    lambda: _Connection(loop),
                    host,
                    port,
                    ssl=self._ssl if secure else None,
                    server_hostname=host if secure else None,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} within {timeout:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc}") from None
        return protocol

    def release(self, origin: Origin, connection: _Connection) -> None:
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


def _request_head(request: httpx.Request) -> bytes:
    """The request line and headers as sent (httpx has set Host and the body's length or chunking)."""
    lines = [b"%b %b HTTP/1.1\r\n" % (request.method.encode("ascii"), request.url.raw_path)]
    lines.extend(b"%b: %b\r\n" % (name, value) for name, value in request.headers.raw)
    lines.append(b"\r\n")
    head = b"".join(lines)
    if head.count(b"\n") != len(lines) or head.count(b"\r") != len(lines) or b"\0" in head:
        raise httpx.LocalProtocolError("a request header holds a line break or a NUL byte")
    return head
