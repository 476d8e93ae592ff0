"""The HTTP/1.1 server protocol: uvicorn's httptools protocol with each request head and body bounded.

uvicorn's httptools protocol reads a request head without limit (its h11 protocol stops at 16 KiB):
a client sending header lines without end grows the process until it dies, before any auth runs.
:class:`BoundedHttpToolsProtocol` counts the head's bytes and header lines as they arrive and times
it from its first byte; past ``limits.max_header_bytes`` or ``limits.max_headers`` it answers ``431``,
past ``limits.header_timeout_s`` ``408``, in the caller's error shape, and closes the connection. The
app never sees such a request. A body that pauses longer than ``limits.body_timeout_s`` is answered
``408`` the same way, and the app sees its client leave (nothing is forwarded). One timer per body,
armed only once a body is still incomplete after a read and re-armed only when it fires, so a body
that arrives with its head costs no timer and each read costs one clock reading.

The limits are those of the serving config of this process (:data:`HEAD_LIMITS`, set by the app when
it starts and on every reload): uvicorn builds the protocol from a class, so there is no per-app
argument to pass.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from history_proxy.config.models import LimitsConfig
from history_proxy.errors import HeadersTooLargeError, ProxyError, RequestTimeoutError, render_error
from history_proxy.observability.access import fresh_request_id
from history_proxy.surfaces.table import error_shape_of

log = logging.getLogger("history_proxy")

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


@dataclass
class HeadLimits:
    """Bounds of one request head (the defaults are ``LimitsConfig``'s)."""

    max_bytes: int = LimitsConfig().max_header_bytes
    max_count: int = LimitsConfig().max_headers
    timeout_s: float = LimitsConfig().header_timeout_s
    body_timeout_s: float = LimitsConfig().body_timeout_s
    max_connections: int = 0
    """Open client connections allowed in this process (:func:`connection_cap`)."""
    connections: int = 0
    """Client connections open now in this process."""

    def configure(self, limits: LimitsConfig) -> None:
        """Take a (re)loaded config's limits; connections read them per request head."""
        self.max_bytes = limits.max_header_bytes
        self.max_count = limits.max_headers
        self.timeout_s = limits.header_timeout_s
        self.body_timeout_s = limits.body_timeout_s
        self.max_connections = connection_cap(limits.max_connections)


def connection_cap(configured: int | None) -> int:
    """``limits.max_connections``, or three quarters of the open-file limit (``ulimit -n``) when unset.

    Each client connection holds a file descriptor (for ``header_timeout_s`` when idle); the rest of
    the limit is left to upstream connections, the log and the config file.
    """
    if configured is not None:
        return configured
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return 768
    return 768 if soft == resource.RLIM_INFINITY else max(16, soft * 3 // 4)


class TooManyConnectionsError(ProxyError):
    status_code = 503
    error_type = "overloaded_error"
    code = "too_many_connections"

    def headers(self) -> dict[str, str]:
        return {"retry-after": "1"}


HEAD_LIMITS = HeadLimits()
"""The head limits of the app serving in this process."""


def bounded_http(limits: LimitsConfig) -> dict[str, Any]:
    """uvicorn's options for the proxy's server: this protocol (and, were h11 chosen, its head cap),
    and no proxy-headers rewriting: the peer stays the TCP peer, ``trusted_proxies`` decides
    (:mod:`history_proxy.server.forwarded`)."""
    return {
        "http": BoundedHttpToolsProtocol,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
        "proxy_headers": False,
    }


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a head that broke a limit."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing request heads over :data:`HEAD_LIMITS`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._in_body = False
        self._body_at = 0.0
        """When the last body bytes arrived (the loop's clock)."""
        self._body_timer: asyncio.TimerHandle | None = None
        self._refusal: ProxyError | None = None
        self._counted = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        HEAD_LIMITS.connections += 1
        self._counted = True
        if HEAD_LIMITS.connections > HEAD_LIMITS.max_connections:
            self._refuse(
                TooManyConnectionsError(
                    f"this proxy process has {HEAD_LIMITS.max_connections} client connections open "
                    "(limits.max_connections); retry shortly or reuse a connection"
                )
            )
            return
        # a connection that never completes its first head (or never sends a byte) is timed too
        self._head_timer = self.loop.call_later(HEAD_LIMITS.timeout_s, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return  # answered and closing: nothing more is read
        if self._in_head and data:
            self._head_bytes += len(data)
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(HEAD_LIMITS.timeout_s, self._head_timed_out)
        super().data_received(data)
        if self._in_head and self._refusal is None and self._head_bytes > HEAD_LIMITS.max_bytes:
            self._refuse(self._too_large())
        elif self._in_body:
            self._body_at = self.loop.time()
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(HEAD_LIMITS.body_timeout_s, self._body_timed_out)

    def on_headers_complete(self) -> None:
        self._end_head()
        if len(self.headers) > HEAD_LIMITS.max_count:  # counted once: max_bytes already bounds memory
            self._refusal = HeadersTooLargeError(
                f"the request has more than {HEAD_LIMITS.max_count} header lines (limits.max_headers)"
            )
            raise _HeadRefused
        if self._head_bytes > HEAD_LIMITS.max_bytes and self._parsed_size() > HEAD_LIMITS.max_bytes:
            self._refusal = self._too_large()  # a whole head over the limit that came in one read
            raise _HeadRefused
        self._in_body = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._end_body()
        self._in_head = True  # whatever arrives next is the head of the next request
        self._head_bytes = 0

    def send_400_response(self, msg: str) -> None:
        # the parser stops on a callback's exception and uvicorn answers 400: ours says why
        if self._refusal is not None:
            self._write_refusal(self._refusal)
        else:
            super().send_400_response(msg)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._counted:
            self._counted = False
            HEAD_LIMITS.connections -= 1
        self._end_head()
        self._end_body()
        super().connection_lost(exc)

    def _end_body(self) -> None:
        self._in_body = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timed_out(self) -> None:
        self._body_timer = None
        if not self._in_body or self.transport.is_closing():
            return
        if self.flow.read_paused:  # the app is not reading yet (back-pressure): not the client's pause
            self._body_at = self.loop.time()
        waited = self.loop.time() - self._body_at
        if waited < HEAD_LIMITS.body_timeout_s:  # bytes came since the timer was armed: wait the rest
            self._body_timer = self.loop.call_later(HEAD_LIMITS.body_timeout_s - waited, self._body_timed_out)
            return
        self._refuse(
            RequestTimeoutError(
                f"no byte of the request body arrived for {HEAD_LIMITS.body_timeout_s:g} s "
                "(limits.body_timeout_s)"
            )
        )

    def _end_head(self) -> None:
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _parsed_size(self) -> int:
        """The head's size as parsed: target, names and values with their separators."""
        return len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)

    def _too_large(self) -> HeadersTooLargeError:
        return HeadersTooLargeError(
            f"the request head is over {HEAD_LIMITS.max_bytes} bytes (limits.max_header_bytes)"
        )

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # a pipelined head behind an answer still being sent: never cut into that answer
            self._head_timer = self.loop.call_later(HEAD_LIMITS.timeout_s, self._head_timed_out)
            return
        self._refuse(
            RequestTimeoutError(
                f"the request head was not complete {HEAD_LIMITS.timeout_s:g} s after its first byte "
                "(limits.header_timeout_s)"
            )
        )

    def _error_surface(self) -> str:
        """The error shape of the surface the request's target names, as far as it was read."""
        target = bytes(getattr(self, "url", b"") or b"").decode("latin-1")
        return error_shape_of(target.partition("?")[0])

    def _refuse(self, error: ProxyError) -> None:
        self._refusal = error
        self._write_refusal(error)

    def _write_refusal(self, error: ProxyError) -> None:
        reading_body = self._in_body
        self._end_head()
        self._end_body()
        request_id = fresh_request_id()
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
        log.warning("refused a request from %s: %s (request %s)", client, error.message, request_id)
        if (
            self.cycle is not None
            and not self.cycle.response_complete
            and (not reading_body or self.cycle.response_started)
        ):
            self.transport.close()  # an answer is being sent on this connection: only closing is left
            return
        body = render_error(error, self._error_surface())
        head = [
            b"HTTP/1.1 %d %s\r\n" % (error.status_code, _REASONS[error.status_code]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"x-request-id: %s\r\n" % request_id.encode(),
            *(b"%s: %s\r\n" % (name.encode(), value.encode()) for name, value in error.headers().items()),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
