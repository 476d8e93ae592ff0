"""The bytes of request bodies in flight, bounded for the whole process (``limits.max_inflight_bytes``).

Every request under ``/v1/`` holds its body from the first byte read until its answer starts: the
raw bytes, the parsed body (about twice as much again), the filtered body sent upstream. 256
concurrent requests of 32 MiB would need gigabytes, and a replica given 768 MiB is killed with every
tenant's streams on it. :class:`InflightBytes` sits inside the guard (after the doors named the
route) and counts each request's ``Content-Length`` before its body is read, and the bytes of a
chunked body as they arrive; a request that would take the process past the budget is answered at
once, in its surface's shape: ``503`` (OpenAI's ``server_error``) or ``529`` (Anthropic's
``overloaded_error``), with ``Retry-After``. Its bytes are given back once its answer starts (by
then its body, parsed and encoded, is freed: a stream holds only its relay's buffers) or it ends.

Without ``limits.max_inflight_bytes`` the budget is sized from the container's memory limit
(cgroup v2 ``memory.max``, or v1 ``memory.limit_in_bytes``) when one is set
(:func:`budget_from_memory`), shared by the workers of ``serve --workers N``; else it is unbounded.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, Protocol

from history_proxy.config.models import LimitsConfig
from history_proxy.errors import BusyError
from history_proxy.observability.metrics import Exchange, request_id_for
from history_proxy.server.doors import limited
from history_proxy.server.edge import error_answer, route_path, scope_headers
from history_proxy.surfaces.table import error_shape_of

log = logging.getLogger("history_proxy")

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

BODY_MEMORY_FACTOR = 3
"""Bytes of memory a request holds per byte of its body while it runs (raw, parsed, sent upstream;
measured 2.5 on concurrent 30 MB ``/v1/messages`` bodies, docs/hardening.md)."""
BASE_BYTES = 160 * 1024 * 1024
"""A served process's memory before any request (interpreter, libraries, tokenizer tables; measured
~110 MB, docs/hardening.md), with room to spare."""
WORKERS_ENV = "HISTORY_PROXY_WORKERS"
"""Set by ``serve`` to its ``--workers``: the processes that share the container's memory."""
_CGROUP_FILES = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
_NO_LIMIT = 1 << 60  # cgroup v1 writes a huge number for "no limit"


def container_memory_limit(files: tuple[Path, ...] = _CGROUP_FILES) -> int | None:
    """The container's memory limit in bytes (cgroup v2, else v1), or None when there is none."""
    for path in files:
        try:
            text = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if text.isdigit() and int(text) < _NO_LIMIT:
            return int(text)
        return None  # "max": this cgroup is not limited
    return None


def budget_from_memory(limits: LimitsConfig, memory: int | None, workers: int = 1) -> int | None:
    """The bytes of bodies one process may hold: what the memory limit leaves after the base, the view
    memo and the token cache, over :data:`BODY_MEMORY_FACTOR`, shared by ``workers`` processes."""
    if memory is None:
        return None
    fixed = BASE_BYTES + limits.surface_memo_bytes + limits.token_cache_bytes
    return max((memory // max(workers, 1) - fixed) // BODY_MEMORY_FACTOR, 1024 * 1024)


def worst_case_memory(limits: LimitsConfig, budget: int | None) -> int | None:
    """The most one process may hold under ``limits`` with ``budget`` bytes of bodies in flight (None:
    unbounded): the base, the view memo, the token cache and every body at :data:`BODY_MEMORY_FACTOR`."""
    if budget is None and limits.max_concurrent is None:
        return None
    bodies = limits.max_concurrent * limits.max_body_bytes if limits.max_concurrent is not None else budget
    if budget is not None and bodies is not None:
        bodies = min(bodies, budget)
    assert bodies is not None
    return BASE_BYTES + limits.surface_memo_bytes + limits.token_cache_bytes + BODY_MEMORY_FACTOR * bodies


class Finisher(Protocol):
    """What counts and logs a refused request."""

    def finish(self, exchange: Exchange, status: int | None = None) -> None: ...


def _declared(scope: Scope) -> int:
    for name, value in scope.get("headers", ()):
        if name == b"content-length" and value.strip().isdigit():
            return int(value)
    return 0


class _Hold:
    """One request's bytes in the budget: its ``Content-Length`` from admission (more as a chunked
    body arrives), given back once its answer starts (the body and its parsed form are gone by then,
    only the relay's buffers remain) or when it ends, whichever comes first."""

    def __init__(self, owner: InflightBytes, budget: int, surface: str, declared: int) -> None:
        self.owner = owner
        self.budget = budget
        self.surface = surface
        self.taken = declared
        self.read = 0
        self.released = False

    def fits(self, more: int) -> bool:
        return self.owner.held + more <= self.budget

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.owner.held -= self.taken

    def receiving(self, receive: Receive) -> Receive:
        async def counted() -> Message:
            message = await receive()
            if message["type"] == "http.request" and not self.released:
                self.read += len(message.get("body", b""))
                if self.read > self.taken:  # a chunked body (or one longer than declared) takes what it reads
                    if not self.fits(self.read - self.taken):
                        raise BusyError(self.owner._message(self.budget), self.surface)
                    self.owner.held += self.read - self.taken
                    self.taken = self.read
            return message

        return counted

    def sending(self, send: Send) -> Send:
        async def started(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.release()
            await send(message)

        return started


class InflightBytes:
    """ASGI middleware: the process's budget of request body bytes in flight (see the module)."""

    def __init__(self, app: ASGIApp, proxy: Finisher) -> None:
        self.app = app
        self.proxy = proxy
        self.held = 0
        """Bytes of the bodies of requests now running."""
        self._sized: int | None = budget_from_memory(
            LimitsConfig(), container_memory_limit(), int(os.environ.get(WORKERS_ENV, "1") or 1)
        )
        self._sized_for: LimitsConfig | None = None

    def budget(self, limits: LimitsConfig) -> int | None:
        """``limits.max_inflight_bytes``, else sized from the container's memory limit, else None."""
        if limits.max_inflight_bytes is not None:
            return limits.max_inflight_bytes
        if self._sized_for is not limits:  # a reload may change the memo and cache bounds
            self._sized_for = limits
            workers = int(os.environ.get(WORKERS_ENV, "1") or 1)
            memory = container_memory_limit()
            self._sized = budget_from_memory(limits, memory, workers)
            if self._sized is not None and self._sized < limits.max_body_bytes:
                log.warning(
                    "the container's memory limit (%d MiB for %d worker(s)) leaves %d MiB for request bodies "
                    "in flight, less than limits.max_body_bytes: set limits.max_inflight_bytes, or give the "
                    "container more memory (docs/hardening.md)",
                    (memory or 0) >> 20,
                    workers,
                    self._sized >> 20,
                )
        return self._sized

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        budget = self.budget(scope["state"]["serving"].config.limits)
        if budget is None or not limited(route_path(scope)):  # no budget: one attribute test a request
            await self.app(scope, receive, send)
            return
        surface = error_shape_of(route_path(scope))
        hold = _Hold(self, budget, surface, _declared(scope))
        if not hold.fits(hold.taken):
            await self._refuse(scope, receive, send, self._message(budget), surface)
            return
        self.held += hold.taken
        try:
            await self.app(scope, hold.receiving(receive), hold.sending(send))
        finally:
            hold.release()

    def _message(self, budget: int) -> str:
        return (
            f"the proxy holds {self.held // (1024 * 1024)} MiB of request bodies in flight, its budget of "
            f"{budget // (1024 * 1024)} MiB (limits.max_inflight_bytes); retry shortly"
        )

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, message: str, surface: str) -> None:
        exchange = Exchange(
            request_id_for(scope_headers(scope)),
            scope.get("method", ""),
            scope.get("path", ""),
            time.perf_counter(),
        )
        error = BusyError(message, surface)
        self.proxy.finish(exchange, error.status_code)
        await error_answer(error, exchange.request_id, surface)(scope, receive, send)
