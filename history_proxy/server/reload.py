"""Config reload: ``SIGHUP`` or ``POST /admin/reload`` swaps in a new serving state, whole.

A :class:`ServingState` is everything built from one config (the config, its pipeline, an
:class:`~history_proxy.upstream.client.Upstreams` view routing by it); the token counters, the HTTP client, the
built-in mock and the summary cache are shared by every state. :class:`StateSwitch` holds the
latest state; :class:`history_proxy.server.guard.RequestGuard` takes it once per request and the handlers
pass it along (``Call.state``), so a request runs to its end on the state it started with while new
requests get the new one.

:class:`Reloader` re-reads the file the app was started with. A file that does not validate is
refused with every located error in the log (and in the admin answer); the old state keeps serving.
Under ``serve --workers N`` an admin reload that validated in the worker answering it asks the
supervisor to replace every worker, one at a time, as ``SIGHUP`` to the supervisor does: each new
worker reads the file again, so no worker keeps serving the old config.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from history_proxy.config.loading import ConfigError, load_config, summary
from history_proxy.config.models import Config
from history_proxy.core.identity import bearer_token
from history_proxy.errors import ForbiddenError, InvalidRequestError
from history_proxy.pipeline.run import Pipeline
from history_proxy.server.caller import tenant_for_key
from history_proxy.surfaces.memo import ViewMemo
from history_proxy.upstream.client import Upstreams

log = logging.getLogger("history_proxy")

SUPERVISOR_ENV = "HISTORY_PROXY_SUPERVISOR"
"""Set by ``serve --workers N`` (N > 1) to its own pid, the uvicorn supervisor its workers inherit it from."""


def supervisor_pid() -> int | None:
    """The pid of the ``serve --workers N`` supervisor when this process is one of its workers."""
    value = os.environ.get(SUPERVISOR_ENV, "")
    return int(value) if value.isdigit() and int(value) == os.getppid() else None


@dataclass(frozen=True)
class ServingState:
    """One loaded config and what is built from it."""

    config: Config
    pipeline: Pipeline
    upstreams: Upstreams
    generation: int = 0
    """0 for the config the app started with, then 1, 2, ... per successful reload."""
    views: ViewMemo = field(default_factory=lambda: ViewMemo(0))
    """The views of recent Responses and Messages conversations (``limits.surface_memo_messages``)."""


class StateSwitch:
    """The latest serving state; :class:`history_proxy.server.guard.RequestGuard` hands it to each request."""

    def __init__(self, initial: ServingState) -> None:
        self.latest = initial

    def swap(self, state: ServingState) -> None:
        """Serve new requests on ``state`` (one assignment: atomic for every request that follows)."""
        self.latest = state


Build = Callable[[Config, ServingState], Awaitable[ServingState]]
"""Builds the next state from a new config and the state it replaces."""


class Reloader:
    """Re-reads ``path`` and swaps the state it builds into ``switch``; one reload at a time."""

    def __init__(self, path: str | None, switch: StateSwitch, build: Build) -> None:
        self.path = path
        self.switch = switch
        self._build = build
        self._lock = asyncio.Lock()

    async def reload(self) -> Config:
        """Load, validate and swap in the config file; raises ``ConfigError`` and keeps the old state."""
        if self.path is None:
            raise ConfigError(
                ["(reload): the app was given its config in code, not read from a file"], "config"
            )
        async with self._lock:
            try:
                config = load_config(self.path)
            except ConfigError as exc:
                log.error(
                    "config reload refused, still serving the previous config; %s:\n%s",
                    exc.source,
                    "\n".join(f"  {line}" for line in exc.errors),
                )
                raise
            current = self.switch.latest
            try:
                state = await self._build(config, current)
            except Exception as exc:  # whatever failed, the old state keeps serving
                log.error(
                    "config reload refused, still serving the previous config: %s",
                    type(exc).__name__,
                    exc_info=exc,
                )
                raise ConfigError(
                    [f"(reload): could not start what the new config needs ({type(exc).__name__})"], self.path
                ) from None
            self.switch.swap(state)
        log.info("config reloaded from %s (generation %d): %s", self.path, state.generation, summary(config))
        return config

    async def reload_logged(self) -> None:
        """Reload for a signal: a refusal is already in the log, nothing else to do."""
        with contextlib.suppress(ConfigError):
            await self.reload()

    async def answer(self) -> dict[str, Any]:
        """Reload for ``POST /admin/reload``: what to answer, or a 400 naming every error."""
        try:
            config = await self.reload()
        except ConfigError as exc:
            raise InvalidRequestError(
                f"{exc.source}: the new config is invalid and was not loaded; the previous one keeps serving: "
                + "; ".join(exc.errors),
                code="invalid_config",
            ) from None
        answer: dict[str, Any] = {
            "status": "reloaded",
            "generation": self.switch.latest.generation,
            "config": summary(config),
        }
        supervisor = supervisor_pid()
        if supervisor is not None:  # the other workers would keep the old config: uvicorn replaces them all
            os.kill(supervisor, signal.SIGHUP)
            answer["workers"] = "restarting"
            log.info(
                "asked the supervisor (pid %d) to replace every worker with one reading the file", supervisor
            )
        return answer


def authorize_admin(config: Config, headers: Mapping[str, str]) -> str:
    """The tenant of an admin caller: 401 without a valid proxy key, 403 unless its tenant is an admin."""
    if not config.auth.keys or not config.admin.tenants:
        raise ForbiddenError(
            "admin endpoints are off: configure auth.keys and admin.tenants to use them "
            "(or send the process SIGHUP to reload its config)"
        )
    tenant = tenant_for_key(config, bearer_token(headers))
    if tenant not in config.admin.tenants:
        raise ForbiddenError(f"tenant {tenant!r} may not call admin endpoints (admin.tenants)")
    return str(tenant)


HANGUP_ENV = "HISTORY_PROXY_SIGHUP"
"""``stop``: SIGHUP means the terminal ``serve`` runs in has closed, so the server stops (``serve`` sets it
when started from a terminal with one process); otherwise SIGHUP reloads the config, as daemons do."""


def _stop_on_hangup() -> None:
    log.info("SIGHUP: the terminal closed; stopping (a server started without a terminal reloads instead)")
    os.kill(os.getpid(), signal.SIGTERM)  # uvicorn's graceful shutdown


@contextlib.contextmanager
def reload_on_sighup(reloader: Reloader) -> Iterator[bool]:
    """Reload on ``SIGHUP`` inside the block; yields whether a handler was installed.

    Only the main thread's event loop can take signals, and only an app started from a file has
    something to reload; elsewhere this does nothing.
    """
    sighup = getattr(signal, "SIGHUP", None)
    if sighup is None or reloader.path is None or threading.current_thread() is not threading.main_thread():
        yield False
        return
    loop = asyncio.get_running_loop()
    running: set[asyncio.Task[None]] = set()

    def on_sighup() -> None:
        if os.environ.get(HANGUP_ENV) == "stop":
            _stop_on_hangup()
            return
        log.info("SIGHUP: reloading the config from %s", reloader.path)
        task = loop.create_task(reloader.reload_logged(), name="history-proxy reload")
        running.add(task)
        task.add_done_callback(running.discard)

    previous = signal.getsignal(sighup)
    try:
        loop.add_signal_handler(sighup, on_sighup)
    except (NotImplementedError, RuntimeError, ValueError):
        yield False
        return
    try:
        yield True
    finally:
        loop.remove_signal_handler(sighup)
        if previous is not None:
            signal.signal(sighup, previous)
        for task in running:
            task.cancel()
