"""One keep-alive HTTP/1.1 connection to an upstream: an asyncio protocol around httptools' parser.

:class:`proxy.upstream.transport.LeanTransport` pools these. The request is written in one call; the answer's
head and body arrive through parser callbacks and are handed over as they arrive (raw bytes, no
decoding), holding back reading while more than ``HIGH_WATER`` bytes wait for the client. Failures
are raised as httpx's exception types, the transport's contract (see its module docstring).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import cast

import httptools
import httpx

HIGH_WATER = 256 * 1024
"""Bytes of an answer buffered before the connection stops reading until the client catches up."""


class Connection(asyncio.Protocol):
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
            self._fail(
                httpx.RemoteProtocolError("the upstream closed the connection before the answer was complete")
            )
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
        framed = any(name.lower() in (b"content-length", b"transfer-encoding") for name, _ in self.headers)
        self.until_close = not framed and self.status not in (204, 304)
        self.server_keeps_alive = self.parser.should_keep_alive()  # reset once the answer is complete
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if not body:
            return
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
            self._fail(
                httpx.RemoteProtocolError("the upstream closed the connection before the request was sent")
            )
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


async def _wait(
    future: asyncio.Future[None], timeout: float | None, error: type[httpx.TimeoutException]
) -> None:
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
