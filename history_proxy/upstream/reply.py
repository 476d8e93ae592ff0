"""One upstream answer as the server relays it: status, end-to-end headers, whole or streamed body.

A failure after the first byte of an SSE answer goes in-band (:attr:`UpstreamReply.stream_error`); any other
body that breaks off is marked :attr:`UpstreamReply.broken` and the server ends the client's answer
without its proper end, so the client can tell. Transport errors become the proxy's 502/504 errors
(:func:`transport_error`). Bodies read whole are read under a cap (:meth:`UpstreamReply.read`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import httpx

from history_proxy.core.answer import AnswerFacts
from history_proxy.core.usage import CacheUsage, UsageTap, usage_of_json
from history_proxy.errors import (
    ProxyError,
    StreamError,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
    chat_stream_error,
)
from history_proxy.upstream.headers import decode_headers, response_headers
from history_proxy.upstream.transport import Answer, LeanAnswer, TLSVerificationError

log = logging.getLogger("history_proxy.upstream")

WHOLE_ANSWER_BYTES = 8 * 1024 * 1024
"""A successful JSON answer declaring at most this length is read whole, then sent in one write."""
ERROR_BODY_BYTES = 1024 * 1024
"""Most bytes of an error answer's body read (they are read whole); a longer one is a 502."""


class AnswerRewrite(Protocol):
    """A change the proxy makes to a successful answer (an emulated standard's fields); raw otherwise."""

    def whole(self, body: bytes) -> bytes:
        """A whole answer, rewritten."""

    def piece(self, piece: bytes) -> bytes:
        """An SSE piece as it arrives: what may be passed on now."""

    def end(self) -> bytes:
        """What is still held when the stream ends."""


@dataclass
class UpstreamReply:
    """An upstream answer whose headers arrived; the body is still to be read or streamed."""

    upstream: str
    response: Answer
    """The answer as the transport handed it over (status, raw headers, raw body)."""
    attempts: int
    wait_ms: float
    """Time spent waiting for upstreams (sends and backoff), excluded from the proxy overhead."""
    broken: bool = field(default=False, init=False)
    """Set when the body broke off after streaming started."""
    complete: bool = field(default=False, init=False)
    """Set when the whole body was relayed."""
    first_byte_at: float | None = field(default=None, init=False)
    """When :meth:`stream` received the first piece of the body (``time.perf_counter``)."""
    stream_error: StreamError = field(default_factory=lambda: chat_stream_error, init=False)
    """The in-band error event of the surface the answer is relayed on (its
    :attr:`history_proxy.surfaces.table.Surface.stream_error`; chat completions' by default)."""
    usage: CacheUsage | None = field(default=None, init=False)
    """The input and prompt-cache tokens the answer reported (JSON body or the stream's usage event)."""
    rewrite: AnswerRewrite | None = field(default=None, init=False)
    """Set for a request whose standards the proxy emulated: its successful answer is rewritten."""
    _facts: AnswerFacts | None = field(default=None, init=False, repr=False)
    _decoded: list[tuple[str, str]] | None = field(default=None, init=False, repr=False)
    _body: bytes | None = field(default=None, init=False, repr=False)

    @property
    def status_code(self) -> int:
        return self.response.status_code

    @property
    def ok(self) -> bool:
        return 200 <= self.response.status_code < 300

    def _header(self, name: str) -> str:
        """The value of header ``name`` (repeats joined with ``", "``, as httpx does; empty when absent)."""
        if self._decoded is None:
            self._decoded = decode_headers(self.response.raw_headers)
        return ", ".join([value for key, value in self._decoded if key == name])

    def answer_facts(self) -> AnswerFacts | None:
        """The answer's id, model, finish reasons and output tokens once relayed (a whole body is read
        for them now, on demand: only a recorded span asks)."""
        if self._facts is None and self._body is not None and self.ok:
            facts = self._facts = AnswerFacts()
            with contextlib.suppress(ValueError):
                facts.read(json.loads(self._body))
        return self._facts

    @property
    def cut_off(self) -> bool:
        """The body broke off and no in-band event says so (not SSE): the client's answer must not
        end properly, or a truncated body would pass for a whole one."""
        return self.broken and not self.is_sse

    @property
    def is_sse(self) -> bool:
        return self._header("content-type").startswith("text/event-stream")

    @property
    def is_whole_json(self) -> bool:
        """A JSON answer of a declared length up to ``WHOLE_ANSWER_BYTES``: read at once, not relayed
        piece by piece (a chunked JSON answer may be slow or long, and is relayed as it arrives)."""
        length, kind = self._header("content-length"), self._header("content-type")
        return length.isdigit() and int(length) <= WHOLE_ANSWER_BYTES and "json" in kind.lower()

    @property
    def headers(self) -> list[tuple[str, str]]:
        """End-to-end response headers (hop-by-hop, Content-Length, Date and Server dropped)."""
        if self._decoded is None:
            self._decoded = decode_headers(self.response.raw_headers)
        return response_headers(self._decoded)

    async def read(self) -> bytes:
        """The whole raw body (error and non-streamed answers, passed through verbatim); read once, kept.

        At most ``WHOLE_ANSWER_BYTES`` (``ERROR_BODY_BYTES`` for an error answer): a longer body is
        a 502 naming the cap, and the upstream connection is closed instead of read to its end.
        """
        if self._body is not None:
            return self._body
        limit = WHOLE_ANSWER_BYTES if self.ok else ERROR_BODY_BYTES
        pieces: list[bytes] = []
        size = 0
        answer = self.response
        try:
            declared = self._header("content-length")
            if declared.isdigit() and int(declared) > limit:
                raise self._too_long(limit)
            while (piece := await answer.next_piece()) is not None:
                if self.first_byte_at is None:
                    self.first_byte_at = time.perf_counter()
                size += len(piece)
                if size > limit:
                    raise self._too_long(limit)
                pieces.append(piece)
            self.complete = True
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            if self.ok:
                self.usage = usage_of_json(body)
                if self.rewrite is not None:
                    body = self.rewrite.whole(body)
            self._body = body
            return body
        except httpx.HTTPError as exc:
            raise transport_error(self.upstream, exc) from None
        finally:
            await self.aclose()

    def _too_long(self, limit: int) -> ProxyError:
        log.warning(
            "upstream %s answered %d with a body over %d bytes", self.upstream, self.status_code, limit
        )
        return UpstreamUnavailableError(
            f"upstream {self.upstream!r} answered {self.status_code} with a body over {limit} bytes, "
            "which the proxy does not relay"
        )

    async def stream(self) -> AsyncIterator[bytes]:
        """The raw body as it arrives; a failure after the first byte ends it as the docstring above says."""
        if self.rewrite is not None and self.ok:
            async for rewritten in self._rewritten(self.rewrite):
                yield rewritten
            return
        answer = self.response
        tap = UsageTap(sse=self.is_sse) if self.ok else None
        try:
            while (piece := await answer.next_piece()) is not None:
                if self.first_byte_at is None:
                    self.first_byte_at = time.perf_counter()
                yield piece
                if tap is not None:  # after the piece went on: the tap never holds a byte back
                    tap.feed(piece)
            self.complete = True
            if tap is not None:
                self.usage, self._facts = tap.close(), tap.facts
        except httpx.HTTPError as exc:
            self.broken = True
            error = transport_error(self.upstream, exc, mid_stream=True)
            if self.is_sse:
                log.warning("upstream %s broke off mid-stream: %s", self.upstream, error.message)
                yield self.stream_error(error)
            else:
                log.warning(
                    "upstream %s broke off mid-answer: %s; the client's connection is dropped",
                    self.upstream,
                    error.message,
                )
        finally:
            await self.aclose()

    async def _rewritten(self, rewrite: AnswerRewrite) -> AsyncIterator[bytes]:
        """The body through ``rewrite``: SSE event by event, anything else whole at its end."""
        sse = self.is_sse
        held: list[bytes] = []
        async for piece in self._raw():
            if sse:
                out = rewrite.piece(piece)
                if out:
                    yield out
            else:
                held.append(piece)
        if not self.complete:
            if held:
                yield b"".join(held)
            return
        tail = rewrite.end() if sse else rewrite.whole(b"".join(held))
        if tail:
            yield tail

    async def _raw(self) -> AsyncIterator[bytes]:
        rewrite, self.rewrite = self.rewrite, None
        try:
            async for piece in self.stream():
                yield piece
        finally:
            self.rewrite = rewrite

    async def aclose(self) -> None:
        """Release the upstream connection (idempotent; completes even while being cancelled)."""
        if isinstance(self.response, LeanAnswer):
            self.response.release()  # no wait in it: nothing for a cancellation to interrupt
            return
        with anyio.CancelScope(shield=True):
            await self.response.aclose()


def transport_error(upstream: str, exc: httpx.HTTPError, *, mid_stream: bool = False) -> ProxyError:
    """The proxy's 502/504 for a transport failure (the reason kept for protocol and TLS errors)."""
    when = " mid-stream" if mid_stream else ""
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeoutError(
            f"upstream {upstream!r} timed out{when} ({type(exc).__name__}); "
            "raise limits.read_timeout_s / limits.connect_timeout_s if it is only slow"
        )
    if isinstance(exc, httpx.RemoteProtocolError | TLSVerificationError):
        return UpstreamUnavailableError(f"upstream {upstream!r} failed{when}: {exc}")
    hint = "" if mid_stream else "; offline, `history-proxy serve --mock` answers from the built-in mock"
    return UpstreamUnavailableError(
        f"upstream {upstream!r} is unreachable or reset the connection{when} ({type(exc).__name__}){hint}"
    )
