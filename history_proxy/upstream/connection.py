"""One keep-alive HTTP/1.1 connection to an upstream: an asyncio protocol around httptools' parser.

:class:`history_proxy.upstream.transport.LeanTransport` pools these. The request is written in one call; the answer's
head and body arrive through parser callbacks and are handed over as they arrive (raw bytes, no
decoding), holding back reading while more than ``HIGH_WATER`` bytes wait for the client. Failures
are raised as httpx's exception types, the transport's contract (see its module docstring).

What the parser accepts is narrower than what it can read, because the answer is relayed:

- a head (status line, headers, interim answers) over ``HEAD_LIMIT`` bytes or ``HEADER_COUNT_LIMIT``
  headers, and as many bytes of framing or trailers between two pieces of body, are refused;
- a status outside 100-599, a ``101 Switching Protocols`` (the proxy never asks to upgrade) and a
  ``Transfer-Encoding`` other than plain ``chunked`` (the proxy would relay still-encoded bytes as if
  they were not) are refused;
- trailers of a chunked answer are read and dropped, never added to the answer's headers;
- a byte arriving while no request is waiting for its answer (an upstream talking out of turn) marks
  the connection unusable: it is closed and never handed out again.
"""

from __future__ import annotations

import asyncio
import re
import select
from collections import deque
from typing import cast

import httptools
import httpx

HIGH_WATER = 256 * 1024
"""Bytes of an answer buffered before the connection stops reading until the client catches up."""
HEAD_LIMIT = 64 * 1024
"""Bytes of an answer's head (status line, headers, interim answers) accepted; also the bytes of chunk
framing or trailers accepted between two pieces of body (Envoy allows 60 KiB of headers)."""
HEADER_COUNT_LIMIT = 100
"""Headers accepted in one answer's head (Envoy's default)."""


_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


class _Refused(Exception):
    """Raised from a parser callback to stop reading an answer the proxy will not relay."""


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection to an upstream, answering one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.idle_since = 0.0
        self.expecting = False
        """A request was written and its answer is not complete yet: only then may bytes arrive."""
        self.unsolicited = False
        """Bytes arrived while no request was waiting for them: never use this connection again."""
        self._poll: select.poll | None = None
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
        self.head_bytes = 0
        self.header_count = 0
        self.framing_bytes = 0  # bytes since the last piece of body: head, chunk framing, trailers
        self.refusal: str | None = None

    # --- asyncio protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._poll = select.poll()
            self._poll.register(sock.fileno(), select.POLLIN)

    def data_received(self, data: bytes) -> None:
        if not self.expecting:
            self.unsolicited = True  # an upstream talking out of turn: its next answer cannot be trusted
            self.close()
            return
        if not self.received and data[:1] in (b"\r", b"\n"):  # the parser would skip them; h11 does not
            self._fail(httpx.RemoteProtocolError("the upstream sent an empty line before its status line"))
            self.close()
            return
        self.received = True
        self.framing_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self.unsolicited:  # bytes past the end of the answer: it is complete, the connection is not
                self.close()
                return
            reason = self.refusal or f"malformed answer from the upstream ({exc})"
            self._fail(httpx.RemoteProtocolError(reason))
            self.close()
            return
        if not self.complete and self.framing_bytes > HEAD_LIMIT:
            where = "answer head" if not self.head_done else "chunk framing or trailers"
            self._fail(httpx.RemoteProtocolError(f"the upstream's {where} exceeds {HEAD_LIMIT} bytes"))
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

    def _refuse(self, reason: str) -> None:
        self.refusal = reason
        raise _Refused(reason)

    def on_message_begin(self) -> None:
        if not self.expecting:
            self.unsolicited = True
            raise _Refused("bytes after the end of the answer")

    def on_status(self, reason: bytes) -> None:
        self.reason += reason
        self.head_bytes += len(reason)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.head_done:
            return  # a trailer of a chunked answer: dropped, never merged into the headers
        self.head_bytes += len(name) + len(value) + 4
        self.header_count += 1
        if self.header_count > HEADER_COUNT_LIMIT:
            self._refuse(f"the upstream's answer has more than {HEADER_COUNT_LIMIT} headers")
        # whitespace around a value is not part of it (RFC 9110 5.5); the parser keeps what trails
        self.headers.append((name, value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.head_bytes > HEAD_LIMIT:
            self._refuse(f"the upstream's answer head exceeds {HEAD_LIMIT} bytes")
        if _CONTROL.search(self.reason):
            self._refuse("the upstream's status line holds a control character")
        if not 100 <= self.status <= 599:
            self._refuse(f"the upstream answered with status {self.status}, outside 100-599")
        if self.status == 101:
            self._refuse("the upstream switched protocols (101), which the proxy never asks for")
        if self.status < 200:
            return  # an interim answer (100 Continue, 103 Early Hints): the real one follows
        codings: list[bytes] = []
        framed = False
        for name, value in self.headers:
            lowered = name.lower()
            if lowered == b"transfer-encoding":
                codings += [token.strip().lower() for token in value.split(b",")]
            framed = framed or lowered == b"content-length"
        if codings and codings != [b"chunked"]:
            coding = b", ".join(codings).decode("latin-1")
            self._refuse(f"the upstream sent Transfer-Encoding: {coding}; only plain chunked is relayed")
        self.framing_bytes = 0
        framed = framed or bool(codings)
        self.until_close = not framed and self.status not in (204, 304)
        self.server_keeps_alive = self.parser.should_keep_alive()  # reset once the answer is complete
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.framing_bytes = 0
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
        self.expecting = False
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
        return (
            not self.closed
            and not self.unsolicited
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def readable(self) -> bool:
        """Whether the socket holds bytes or an end not yet read: an idle connection that does is
        closed or talking out of turn (what urllib3 checks before reusing a connection)."""
        return self._poll is not None and bool(self._poll.poll(0))

    def start(self, head: bytes, body: bytes) -> None:
        """Write a request (its head and a whole body) and get ready for its answer.

        Raises :class:`NotSent` when the connection is already closed: nothing was written.
        """
        self._reset()
        if not self.reusable or self.transport is None:
            raise NotSent("the upstream closed the connection before the request was sent")
        self.expecting = True
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


class NotSent(httpx.ConnectError):
    """The connection was found closed before a byte of the request was written: safe to send elsewhere
    (a ``ConnectError``, which the client retries, should it happen on a new connection too)."""


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
