"""Forwarding to upstreams: the one shared httpx client, header hygiene, retries, fallbacks, streaming.

What a client sees for each outcome of :meth:`Upstreams.open` and :meth:`UpstreamReply.stream`:

    connect error / connect timeout           retried with backoff, then the route's fallbacks, then
                                              502 UpstreamUnavailableError / 504 UpstreamTimeoutError
    429, 502, 503 before any byte was sent    retried (Retry-After honoured up to a cap) when the
                                              upstream's ``status_retries`` says the proxy retries, then
                                              fallbacks, then the last answer passed through (with its
                                              Retry-After); with ``client`` (or ``auto`` and a client that
                                              retries on its own, :mod:`.retrying_clients`) not retried
                                              here: fallbacks, then passed back
    read timeout before the headers           504 UpstreamTimeoutError (not retried: the upstream may
                                              already be working on it)
    reset / protocol error before headers     502 UpstreamUnavailableError (not retried, same reason: a
                                              request is never sent twice once written)
    any other answer                          passed through: status, end-to-end headers, raw bytes
    a status outside 100-599, a 101           502 UpstreamUnavailableError (the transport refuses them)
    failure after the first byte              SSE: in-band ``data: {"error": ...}`` then ``data: [DONE]``;
                                              other bodies: the client's connection is dropped without
                                              the answer's end (``UpstreamReply.cut_off``)

This module and :mod:`history_proxy.upstream.pools` (the connections) import httpx; ``app.py`` turns an
:class:`UpstreamReply` into a response; the built-in mock runs in :mod:`history_proxy.mock.server`.
"""

from __future__ import annotations

import asyncio
import copy
import email.utils
import logging
import random
import re
import time
import urllib.parse
from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from history_proxy.config.models import Config
from history_proxy.core.messages import Message, strip_annotations
from history_proxy.core.summary_input import SUMMARY_PURPOSE
from history_proxy.errors import InvalidRequestError, ProxyError, UpstreamUnavailableError
from history_proxy.upstream.headers import (
    upstream_authorization,
    wire_request_headers,
    withheld_headers,
)
from history_proxy.upstream.pools import ClientPool
from history_proxy.upstream.reply import UpstreamReply, transport_error
from history_proxy.upstream.retrying_clients import client_retries
from history_proxy.upstream.transport import Address, Answer, Timeouts, TLSVerificationError

log = logging.getLogger("history_proxy.upstream")

RETRY_STATUSES = frozenset({429, 502, 503})
PARSED_URLS = 1024
_DOT_SEGMENT = re.compile(r"(?:^|/)\.\.?(?:/|$)")

Body = bytes | Callable[[str], Awaitable[bytes]] | AsyncIterable[bytes] | None
"""What to send: fixed bytes, bytes built per upstream (a fallback may need other cache marks),
a one-shot stream (never retried), or nothing."""


WireHeaders = list[tuple[bytes, bytes]]


class AttemptTrace(Protocol):
    """What :meth:`Upstreams.open` tells a request's trace (:mod:`history_proxy.observability.spans`)."""

    def attempt(self, upstream: str, number: int, headers: WireHeaders, content: bytes | None) -> WireHeaders:
        """An attempt starts: the headers to send (the trace context of this attempt in them)."""

    def attempted(self, status: int | None, error: BaseException | None) -> None:
        """The attempt ended: the answer's status once its headers arrived, or what was raised."""

    def replied(self, reply: UpstreamReply) -> None:
        """The answer relayed to the client (the last attempt's)."""


def retry_after_s(headers: httpx.Headers) -> float | None:
    """Seconds an upstream asked us to wait (``retry-after-ms``, ``retry-after`` seconds or date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        moment = email.utils.parsedate_tz(value)
        return None if moment is None else max(0.0, email.utils.mktime_tz(moment) - time.time())


class LocalMock(Protocol):
    """A built-in mock upstream served on a local port (:class:`history_proxy.mock.server.MockUpstreamServer`)."""

    base_url: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Upstreams:
    """The shared client and the built-in mock; sends requests to named upstreams."""

    def __init__(
        self,
        config: Config,
        *,
        backoff_s: float = 0.25,
        max_retry_wait_s: float = 8.0,
        mock: Callable[[], LocalMock] | None = None,
    ) -> None:
        """``mock``: builds the local mock that ``mock://`` upstreams go to (none: they are unavailable)."""
        self.config = config
        self._mock_factory = mock
        self.backoff_s = backoff_s
        self.max_retry_wait_s = max_retry_wait_s
        self._pool = ClientPool()
        self._addresses: dict[tuple[str, str, str], Address] = {}
        self._mock: LocalMock | None = None
        self._prepared: _Prepared | None = None

    async def start(self) -> None:
        """Open the client pool, and the built-in mock when an upstream is served by it."""
        self._pool.open(self._prepare().timeouts)
        await self._start_mock(self.config)

    async def stop(self) -> None:
        """Close the client pool (shared by every reconfigured view) and stop the mock."""
        await self._pool.close()
        if self._mock is not None:
            await self._mock.stop()
            self._mock = None

    @property
    def client(self) -> httpx.AsyncClient:
        """One of the shared clients, in turn."""
        return self._pool.next()

    async def reconfigured(self, config: Config) -> Upstreams:
        """A view routing by a reloaded ``config`` that shares this client and built-in mock.

        Starts the mock when ``config`` is the first to need it; the last view stops everything.
        """
        view = copy.copy(self)
        view.config = config
        await view._start_mock(config)
        return view

    async def _start_mock(self, config: Config) -> None:
        """Start the built-in mock when ``config`` is the first to send to it."""
        wanted = any(u.is_mock for u in config.upstreams.values())
        if wanted and self._mock is None and self._mock_factory is not None:
            self._mock = self._mock_factory()
            await self._mock.start()

    def url(self, name: str, path: str, query: str = "") -> str:
        """The upstream URL for a path below ``/v1`` (the mock's local address for mock upstreams).

        Only the config names the scheme, host and base path: a path that is not absolute or holds
        ``.``/``..`` segments (which would climb out of the base path) is refused with a 400.
        """
        if not path.startswith("/") or _DOT_SEGMENT.search(urllib.parse.unquote(path)):
            message = "the request path must be absolute and without '.' or '..' segments"
            raise InvalidRequestError(message, code="invalid_path")
        return f"{self._base(name)}{path}" + (f"?{query}" if query else "")

    def _base(self, name: str) -> str:
        base = self._prepare().bases[name]
        if base is None:
            if self._mock is None:
                raise UpstreamUnavailableError(
                    f"upstream {name!r} is the built-in mock, which is not running"
                )
            return self._mock.base_url
        return base

    def _address(self, name: str, path: str, query: str) -> Address:
        """Where :meth:`url` points, parsed once (httpx's parser costs more than a request's whole send)."""
        key = (self._base(name), path, query)
        address = self._addresses.get(key)
        if address is None:
            url = self.url(name, path, query)  # refuses paths climbing out of the base path
            try:
                parsed = httpx.URL(url)
            except httpx.InvalidURL:
                message = "the request path or query cannot be forwarded"
                raise InvalidRequestError(message, code="invalid_path") from None
            if len(self._addresses) >= PARSED_URLS:  # arbitrary forwarded paths must not grow it forever
                self._addresses.clear()
            address = self._addresses[key] = Address.of(parsed)
        return address

    def _prepare(self) -> _Prepared:
        """This config's per-upstream pieces, computed once per config (views share the rest)."""
        prepared = self._prepared
        if prepared is None or prepared.config is not self.config:
            limits, upstreams = self.config.limits, self.config.upstreams.items()
            prepared = self._prepared = _Prepared(
                self.config,
                Timeouts(limits.connect_timeout_s, limits.read_timeout_s, limits.read_timeout_s),
                {name: None if upstream.is_mock else upstream.base_url for name, upstream in upstreams},
                {name: upstream_authorization(upstream) for name, upstream in upstreams},
                {name: withheld_headers(upstream, self.config.identity) for name, upstream in upstreams},
            )
        return prepared

    async def open(
        self,
        method: str,
        path: str,
        *,
        query: str,
        headers: Sequence[tuple[str, str]],
        names: Sequence[str],
        body: Body,
        trace: AttemptTrace | None = None,
    ) -> UpstreamReply:
        """Send to the first of ``names`` that answers, retrying before any byte reaches the client.

        ``names`` is the route: the primary upstream, then its fallbacks. Returns once response
        headers arrived; raises 502/504 ``ProxyError``s when no upstream could be reached. ``trace``
        (the request's, when telemetry is on) hears of every attempt and sets its trace context.
        """
        replayable = not isinstance(body, AsyncIterable)
        candidates = list(names) if replayable else list(names[:1])
        proxy_keys = bool(self.config.auth.keys)
        prepared = self._prepare()
        waited = 0.0
        attempts = 0
        failure: ProxyError | None = None
        for index, name in enumerate(candidates):
            upstream = self.config.upstreams[name]
            tries = upstream.retries + 1 if replayable else 1
            content = await body(name) if callable(body) else body
            outgoing = wire_request_headers(
                headers,
                prepared.authorizations[name],
                client_auth_is_proxy_key=proxy_keys,
                withheld=prepared.withheld[name],
            )
            for attempt in range(tries):
                address = self._address(name, path, query)
                attempts += 1
                started = time.perf_counter()
                try:
                    answer = await (
                        self._pool.exchange(address, method, outgoing, content, prepared.timeouts)
                        if trace is None
                        else self._traced(trace, (name, attempts), address, method, outgoing, content)
                    )
                except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                    # nothing reached the upstream: safe to try again
                    waited += time.perf_counter() - started
                    failure = transport_error(name, exc)
                    level = logging.WARNING if isinstance(exc, TLSVerificationError) else logging.INFO
                    log.log(
                        level, "upstream %s: %s: %s (attempt %d)", name, type(exc).__name__, exc, attempt + 1
                    )
                    delay = None if attempt == tries - 1 else self._backoff(attempt)
                except httpx.HTTPError as exc:
                    raise transport_error(name, exc) from None
                else:
                    waited += time.perf_counter() - started
                    if not 100 <= answer.status_code <= 599:  # through httpx's transports (HTTP proxy, HEAD)
                        await answer.aclose()
                        message = (
                            f"upstream {name!r} answered with status {answer.status_code}, outside 100-599"
                        )
                        raise UpstreamUnavailableError(message)
                    retryable = answer.status_code in RETRY_STATUSES
                    delay = (
                        self._retry_wait(httpx.Headers(answer.raw_headers), attempt)
                        if retryable
                        and attempt < tries - 1
                        and not client_retries(upstream.status_retries, headers)
                        else None
                    )
                    if not retryable or (delay is None and index == len(candidates) - 1):
                        return _replied(trace, UpstreamReply(name, answer, attempts, waited * 1000))
                    await answer.aclose()
                    log.info("upstream %s answered %d (attempt %d)", name, answer.status_code, attempt + 1)
                if delay is None:
                    break
                await asyncio.sleep(delay)
                waited += delay
        # the last upstream either answered (returned above) or could not be reached
        raise failure or UpstreamUnavailableError("no upstream could be reached")

    async def _traced(
        self,
        trace: AttemptTrace,
        attempt: tuple[str, int],
        address: Address,
        method: str,
        headers: WireHeaders,
        content: Any,
    ) -> Answer:
        """One attempt told to ``trace``: ``attempt`` is the upstream's name and the attempt's number."""
        timeouts = self._prepare().timeouts
        sent = trace.attempt(*attempt, headers, content if isinstance(content, bytes) else None)
        try:
            answer = await self._pool.exchange(address, method, sent, content, timeouts)
        except BaseException as exc:
            trace.attempted(None, exc)
            raise
        trace.attempted(answer.status_code, None)
        return answer

    def _backoff(self, attempt: int) -> float:
        return float(min(self.backoff_s * 2**attempt, self.max_retry_wait_s) * random.uniform(0.5, 1.0))

    def _retry_wait(self, headers: httpx.Headers, attempt: int) -> float | None:
        """The wait before the next try; ``None`` when the upstream asks for longer than the cap."""
        asked = retry_after_s(headers)
        if asked is None:
            return self._backoff(attempt)
        return asked if asked <= self.max_retry_wait_s else None

    async def summarize(
        self, messages: list[Message], *, model: str, upstream: str | None, prompt: str, timeout_s: float
    ) -> str:
        """Ask ``model`` (non-streaming) to summarize ``messages``; the ``Summarizer`` protocol."""
        name = upstream or self.config.route(model)[0]
        target = self.config.upstreams[name]
        payload = {
            "model": model,
            "messages": [*strip_annotations(messages), {"role": "user", "content": prompt}],
        }
        # Sent straight to the upstream, never through a filter chain; the purpose header tells the
        # mock (and a history-proxy further along) that this is a summary request.
        headers = [("content-type", "application/json"), ("x-history-purpose", SUMMARY_PURPOSE)]
        if target.forward_identity:
            headers.append((self.config.identity.role_header, "summarizer"))
        if target.key is not None:
            headers.append(("authorization", f"Bearer {target.key}"))
        try:
            response = await self.client.post(
                self.url(name, "/chat/completions"), json=payload, headers=headers, timeout=timeout_s
            )
        except httpx.HTTPError as exc:
            raise transport_error(name, exc) from None
        if response.status_code != 200:
            raise UpstreamUnavailableError(
                f"summary call to upstream {name!r} answered {response.status_code}"
            )
        content = _first_choice_text(response.json())
        if not content:
            raise UpstreamUnavailableError(f"summary call to upstream {name!r} returned no text")
        return content


@dataclass(frozen=True)
class _Prepared:
    """What :meth:`Upstreams.open` needs of a config, computed once per config, not per request."""

    config: Config
    timeouts: Timeouts
    bases: dict[str, str | None]
    """Each upstream's base URL (None: the built-in mock's, known once it runs)."""
    authorizations: dict[str, tuple[bytes, bytes] | None]
    """Each upstream's own Authorization header, as sent (None: the client's may be forwarded)."""
    withheld: dict[str, frozenset[str]]
    """Each upstream's client headers kept at the proxy (the identity headers, unless forwarded)."""


def _replied(trace: AttemptTrace | None, reply: UpstreamReply) -> UpstreamReply:
    if trace is not None:
        trace.replied(reply)
    return reply


def _first_choice_text(answer: Any) -> str:
    try:
        content = answer["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return ""
    return content.strip() if isinstance(content, str) else ""
