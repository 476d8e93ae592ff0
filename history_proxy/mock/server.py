"""The built-in mock upstream served in the proxy's own event loop, for ``mock://`` upstreams.

:class:`MockUpstreamServer` runs :func:`history_proxy.mock.upstream.create_mock_app` under uvicorn on a
free port of 127.0.0.1 inside the current event loop, without taking over signal handling and
without its startup lines reading as the proxy's own. :class:`history_proxy.upstream.client.Upstreams` starts one
when the config has a mock upstream.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from history_proxy.mock.upstream import create_mock_app
from history_proxy.observability.logs import NotFromTask

log = logging.getLogger("history_proxy.upstream")


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the process's own server."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class MockUpstreamServer:
    """The built-in mock upstream on a free local port, served in the current event loop."""

    def __init__(self) -> None:
        self._server: _QuietServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._quiet: logging.Filter = logging.Filter()
        self.base_url = ""

    async def start(self) -> None:
        """Listen on 127.0.0.1 (a free port) and set ``base_url`` once it serves."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))  # bound here so the port is known and binding cannot fail inside uvicorn
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_mock_app(),
            lifespan="off",
            log_config=None,
            log_level=None,
            access_log=False,
            timeout_graceful_shutdown=1,
        )
        self._server = _QuietServer(config)
        self._task = asyncio.create_task(
            self._server.serve(sockets=[sock]), name="history-proxy mock upstream"
        )
        # the mock's uvicorn lines ("Started server process", ...) would read as the proxy's own
        self._quiet = NotFromTask(self._task)
        logging.getLogger("uvicorn.error").addFilter(self._quiet)
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the built-in mock upstream stopped while starting")
            await asyncio.sleep(0.005)
        self.base_url = f"http://127.0.0.1:{port}/v1"
        log.info("built-in mock upstream listening on %s", self.base_url)

    async def stop(self) -> None:
        """Stop serving (waiting up to 5 s for open answers)."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(self._task, timeout=5)
        except TimeoutError:
            self._task.cancel()
        logging.getLogger("uvicorn.error").removeFilter(self._quiet)
        self._server = self._task = None
