"""A misbehaving upstream (a raw asyncio server that refuses, hangs, resets, trickles) and the proxy
served by uvicorn in the test's event loop on a free loopback port."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Self

import anyio
import uvicorn

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.server.app import create_app

LOOPBACK = "127.0.0.1"
PATIENCE_S = 30  # how long a misbehaving upstream would keep going if nobody stopped it
NOTICE_S = 2  # the proxy must pass on a client's departure well within this
COMPLETION = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}
        ],
    }
).encode()
REASONS = {200: "OK", 503: "Service Unavailable"}


# --- a misbehaving upstream ------------------------------------------------------------------


def sse_event(index: int) -> bytes:
    return f'data: {{"choices":[{{"index":0,"delta":{{"content":"piece {index} "}}}}]}}\n\n'.encode()


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def response_head(status: int, content_type: str, length: int | None = None, extra: str = "") -> bytes:
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    lines = [
        f"HTTP/1.1 {status} {REASONS[status]}",
        f"content-type: {content_type}",
        framing,
        "connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def reset_connection(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST instead of a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultUpstream:
    """An HTTP/1.1 upstream on a free loopback port; each request's behaviour comes from its
    ``x-fault`` header, else the next of ``script``, else ``default``. ``x-probe`` names a request so
    a test can wait until it arrived and until the proxy dropped its connection."""

    def __init__(self, default: str = "ok", script: tuple[str, ...] = ()) -> None:
        self.default = default
        self.script = list(script)
        self.arrived: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.dropped: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.release = asyncio.Event()
        self.arrivals: list[tuple[str, float]] = []
        self._handlers: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, LOOPBACK, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        probe = "-"
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)
            }
            await reader.readexactly(int(headers.get("content-length", "0")))
            probe = headers.get("x-probe", "-")
            fault = headers.get("x-fault") or (self.script.pop(0) if self.script else self.default)
            self.arrivals.append((fault, time.monotonic()))
            self.arrived[probe].set()
            await getattr(self, "_" + fault.replace("-", "_"))(reader, writer, probe)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.dropped[probe].set()
        finally:
            writer.close()
            self._handlers.discard(task)

    async def _until_dropped(self, reader: asyncio.StreamReader, probe: str) -> None:
        try:
            data = await asyncio.wait_for(reader.read(1), PATIENCE_S)
        except (TimeoutError, ConnectionError):
            data = b""
        if not data:
            self.dropped[probe].set()

    async def _ok(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str) -> None:
        writer.write(response_head(200, "application/json", len(COMPLETION)) + COMPLETION)
        await writer.drain()

    async def _busy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str) -> None:
        body = b'{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}'
        writer.write(response_head(503, "application/json", len(body), "retry-after-ms: 200\r\n") + body)
        await writer.drain()

    async def _hang(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str) -> None:
        await self._until_dropped(reader, probe)  # never answers; notes when the proxy hangs up

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str) -> None:
        await asyncio.wait_for(self.release.wait(), PATIENCE_S)
        await self._ok(reader, writer, probe)

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str) -> None:
        await self._endless(reader, writer, probe, "text/event-stream")

    async def _slow_json(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        await self._endless(reader, writer, probe, "application/json")

    async def _endless(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str, kind: str
    ) -> None:
        writer.write(response_head(200, kind))
        watch = asyncio.create_task(self._until_dropped(reader, probe))
        try:
            for index in range(PATIENCE_S * 20):
                if watch.done():
                    return
                writer.write(chunked(sse_event(index) if kind == "text/event-stream" else b" "))
                await writer.drain()
                await asyncio.sleep(0.05)
        finally:
            watch.cancel()

    async def _reset_before(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        reset_connection(writer)

    async def _reset_mid(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        writer.write(response_head(200, "text/event-stream") + chunked(sse_event(0)) + chunked(sse_event(1)))
        await writer.drain()
        await asyncio.sleep(0.05)
        reset_connection(writer)

    async def _trickle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str) -> None:
        """One event, then the rest only once the test has seen the first one arrive at its client."""
        writer.write(response_head(200, "text/event-stream") + chunked(sse_event(0)))
        await writer.drain()
        await asyncio.wait_for(self.release.wait(), PATIENCE_S)
        for index in (1, 2):
            writer.write(chunked(sse_event(index)))
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(chunked(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


# --- the proxy under uvicorn, in this process -------------------------------------------------


class InProcessServer(uvicorn.Server):
    """uvicorn serving inside the test's event loop, leaving the process's signal handlers alone."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def serving(config: Config) -> AsyncIterator[str]:
    """The proxy on a free loopback port, as ``serve`` runs it (uvicorn, httptools); yields its URL."""
    app = create_app(config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((LOOPBACK, 0))
    port = sock.getsockname()[1]
    settings = uvicorn.Config(
        app,
        http="httptools",
        ws="none",
        lifespan="on",
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    server = InProcessServer(settings)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not task.done(), "the proxy stopped while starting"
            await asyncio.sleep(0.01)
        yield f"http://{LOOPBACK}:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


def make_config(*upstreams: tuple[str, str], fallbacks: tuple[str, ...] = (), **limits: Any) -> Config:
    names = [name for name, _ in upstreams]
    return parse_config(
        {
            "upstreams": {name: {"base_url": url, "retries": 0} for name, url in upstreams},
            "routes": [{"model": "*", "upstream": names[0], "fallbacks": list(fallbacks)}],
            "limits": {"connect_timeout_s": 1, "read_timeout_s": 10, **limits},
        },
        env={},
    )


def chat(stream: bool = False) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "stream": stream}


def raw_request(body: dict[str, Any], **headers: str) -> bytes:
    content = json.dumps(body).encode()
    lines = [
        "POST /v1/chat/completions HTTP/1.1",
        f"host: {LOOPBACK}",
        "content-type: application/json",
        f"content-length: {len(content)}",
        *(f"{name.replace('_', '-')}: {value}" for name, value in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + content


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def other_tasks() -> int:
    return len(asyncio.all_tasks()) - 1


async def eventually(check: Callable[[], bool], within: float = NOTICE_S) -> None:
    with anyio.fail_after(within):
        while not check():
            await asyncio.sleep(0.02)
