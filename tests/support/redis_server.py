"""A throw-away ``redis-server`` on a free loopback port, and the fixture that starts one (or skips)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
import redis

REDIS_SERVER = shutil.which("redis-server")
PREFIX = "test-history-proxy:"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A throw-away ``redis-server`` (no persistence) that a test can stop and start again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert REDIS_SERVER is not None
        self.process = subprocess.Popen(
            [
                REDIS_SERVER,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, socket_timeout=0.2).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)

    def kill(self) -> None:
        """Gone at once, as a crashed Redis (its data with it: nothing is persisted)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def summary_keys(self) -> list[str]:
        client = redis.Redis(port=self.port, decode_responses=True)
        return sorted(str(k) for k in client.keys(f"{PREFIX}summary:*"))


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (Debian package redis-server; .ci/run installs it)")
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


class DelayedRedis:
    """A loopback TCP relay to a Redis that holds every command ``delay_s`` before passing it on (a
    Redis far away), run on its own event loop in a thread; ``url`` is the relay's."""

    def __init__(self, target_port: int, delay_s: float) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> DelayedRedis:
        self._thread.start()
        opened = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", 0), self._loop
        )
        self._server = opened.result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        back = asyncio.create_task(self._pipe(up_reader, writer, 0.0))
        try:
            await self._pipe(reader, up_writer, self.delay_s)
        finally:
            back.cancel()
            up_writer.close()
            writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if delay_s:
                    await asyncio.sleep(delay_s)
                writer.write(data)
                await writer.drain()
