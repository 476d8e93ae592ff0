"""The bad day, for real: the proxy served by uvicorn on a loopback port, in front of an upstream
that misbehaves on purpose (a raw asyncio server that refuses, hangs, resets, trickles), and clients
that walk away. Each fault has a clear outcome, the upstream learns when the client left, nothing
is left behind, and the proxy keeps serving.
"""

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
import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from proxy.config.loading import parse_config
from proxy.config.models import Config
from proxy.mock.upstream import create_mock_app
from proxy.server.app import create_app

pytestmark = pytest.mark.anyio

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


def _event(index: int) -> bytes:
    return f'data: {{"choices":[{{"index":0,"delta":{{"content":"piece {index} "}}}}]}}\n\n'.encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _head(status: int, content_type: str, length: int | None = None, extra: str = "") -> bytes:
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    lines = [
        f"HTTP/1.1 {status} {REASONS[status]}",
        f"content-type: {content_type}",
        framing,
        "connection: close",
    ]
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def _reset(writer: asyncio.StreamWriter) -> None:
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
        writer.write(_head(200, "application/json", len(COMPLETION)) + COMPLETION)
        await writer.drain()

    async def _busy(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str) -> None:
        body = b'{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}'
        writer.write(_head(503, "application/json", len(body), "retry-after-ms: 200\r\n") + body)
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
        writer.write(_head(200, kind))
        watch = asyncio.create_task(self._until_dropped(reader, probe))
        try:
            for index in range(PATIENCE_S * 20):
                if watch.done():
                    return
                writer.write(_chunk(_event(index) if kind == "text/event-stream" else b" "))
                await writer.drain()
                await asyncio.sleep(0.05)
        finally:
            watch.cancel()

    async def _reset_before(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        _reset(writer)

    async def _reset_mid(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str
    ) -> None:
        writer.write(_head(200, "text/event-stream") + _chunk(_event(0)) + _chunk(_event(1)))
        await writer.drain()
        await asyncio.sleep(0.05)
        _reset(writer)

    async def _trickle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, probe: str) -> None:
        """One event, then the rest only once the test has seen the first one arrive at its client."""
        writer.write(_head(200, "text/event-stream") + _chunk(_event(0)))
        await writer.drain()
        await asyncio.wait_for(self.release.wait(), PATIENCE_S)
        for index in (1, 2):
            writer.write(_chunk(_event(index)))
            await writer.drain()
            await asyncio.sleep(0.02)
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


# --- the proxy under uvicorn, in this process -------------------------------------------------


class _InProcessServer(uvicorn.Server):
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
    server = _InProcessServer(settings)
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


async def statuses(url: str) -> dict[str, float]:
    """``history_proxy_requests`` counts by status, from the proxy's own /metrics."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{url}/metrics")).text
    counts: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "history_proxy_requests_total":
                counts[sample.labels["status"]] += sample.value
    return counts


async def still_healthy(url: str, upstream: FaultUpstream) -> None:
    async with httpx.AsyncClient(timeout=5) as client:
        assert (await client.get(f"{url}/healthz")).status_code == 200
        answer = await client.post(f"{url}/v1/chat/completions", json=chat(), headers={"x-fault": "ok"})
    assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"


# --- 1. the client goes away ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["non-streaming", "streaming"])
async def test_a_client_leaving_before_the_first_upstream_byte_closes_the_upstream_request(
    stream: bool,
) -> None:
    async with FaultUpstream() as upstream, serving(make_config(("main", upstream.base_url))) as url:
        fds, tasks = open_fds(), other_tasks()
        port = int(url.rsplit(":", 1)[1])
        _, writer = await asyncio.open_connection(LOOPBACK, port)
        writer.write(raw_request(chat(stream), x_fault="hang", x_probe="leaver"))
        await writer.drain()
        await asyncio.wait_for(upstream.arrived["leaver"].wait(), NOTICE_S)
        writer.close()
        await writer.wait_closed()

        await asyncio.wait_for(upstream.dropped["leaver"].wait(), NOTICE_S)  # it would wait 30 s otherwise
        await eventually(lambda: (open_fds(), other_tasks()) == (fds, tasks))
        assert (await statuses(url))["499"] == 1
        await still_healthy(url, upstream)


@pytest.mark.parametrize("fault", ["stream", "slow-json"])
async def test_a_client_leaving_mid_answer_closes_the_upstream_stream(fault: str) -> None:
    async with FaultUpstream() as upstream, serving(make_config(("main", upstream.base_url))) as url:
        fds, tasks = open_fds(), other_tasks()
        port = int(url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        writer.write(raw_request(chat(stream=fault == "stream"), x_fault=fault, x_probe="leaver"))
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        await reader.read(1)  # the answer has started flowing
        writer.close()
        await writer.wait_closed()

        await asyncio.wait_for(upstream.dropped["leaver"].wait(), NOTICE_S)
        await eventually(lambda: (open_fds(), other_tasks()) == (fds, tasks))
        assert (await statuses(url))["499"] == 1
        await still_healthy(url, upstream)


async def test_a_client_leaving_while_sending_its_body_never_reaches_the_upstream() -> None:
    async with FaultUpstream() as upstream, serving(make_config(("main", upstream.base_url))) as url:
        port = int(url.rsplit(":", 1)[1])
        _, writer = await asyncio.open_connection(LOOPBACK, port)
        request = raw_request(chat(), x_probe="half")
        writer.write(request[: len(request) - 5])
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        await still_healthy(url, upstream)
    assert "half" not in upstream.arrived


# --- 2. upstream faults ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


async def test_a_refused_connection_is_a_502_in_openai_shape() -> None:
    async with FaultUpstream() as upstream:
        config = make_config(("gone", f"http://{LOOPBACK}:{free_port()}/v1"), ("main", upstream.base_url))
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(f"{url}/v1/chat/completions", json=chat())
            assert answer.status_code == 502
            assert answer.json()["error"]["code"] == "upstream_unavailable"
            assert "'gone' is unreachable" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("fault", "status", "code"),
    [("reset-before", 502, "upstream_unavailable"), ("hang", 504, "upstream_timeout")],
    ids=["reset-before-the-answer", "timeout-before-the-headers"],
)
async def test_an_upstream_failing_before_its_answer_is_a_clear_error(
    fault: str, status: int, code: str
) -> None:
    async with FaultUpstream() as upstream:
        config = make_config(("main", upstream.base_url), read_timeout_s=0.3)
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(
                f"{url}/v1/chat/completions", json=chat(), headers={"x-fault": fault, "x-probe": "p"}
            )
            assert (answer.status_code, answer.json()["error"]["code"]) == (status, code)
            if fault == "hang":  # a timed-out upstream request is closed, not left hanging
                await asyncio.wait_for(upstream.dropped["p"].wait(), NOTICE_S)
            await still_healthy(url, upstream)


async def test_a_stream_reset_mid_way_ends_with_an_in_band_error_then_done() -> None:
    async with FaultUpstream() as upstream, serving(make_config(("main", upstream.base_url))) as url:
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(
                f"{url}/v1/chat/completions", json=chat(stream=True), headers={"x-fault": "reset-mid"}
            )
        events = [e for e in answer.text.split("\n\n") if e]
        assert answer.status_code == 200
        assert events[:2] == [_event(0).decode().strip(), _event(1).decode().strip()]
        assert json.loads(events[2].removeprefix("data: "))["error"]["code"] == "upstream_unavailable"
        assert events[3:] == ["data: [DONE]"]
        await still_healthy(url, upstream)


async def test_a_slow_trickle_is_relayed_piece_by_piece() -> None:
    async with FaultUpstream() as upstream, serving(make_config(("main", upstream.base_url))) as url:
        async with (
            httpx.AsyncClient(timeout=10) as client,
            client.stream(
                "POST", f"{url}/v1/chat/completions", json=chat(stream=True), headers={"x-fault": "trickle"}
            ) as answer,
        ):
            pieces = answer.aiter_raw()
            first = await anext(pieces)
            assert first.startswith(_event(0))  # arrived while the upstream still holds back the rest
            upstream.release.set()
            rest = b"".join([piece async for piece in pieces])
        assert (first + rest).endswith(b"data: [DONE]\n\n")
        assert _event(2) in rest
        await still_healthy(url, upstream)


# --- 3. retries and fallbacks --------------------------------------------------------------------


async def test_a_503_is_retried_after_the_wait_its_retry_after_asks_for() -> None:
    async with FaultUpstream(script=("busy",)) as upstream:
        config = parse_config(
            {
                "upstreams": {"main": {"base_url": upstream.base_url, "retries": 2}},
                "limits": {"read_timeout_s": 5},
            },
            env={},
        )
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(f"{url}/v1/chat/completions", json=chat())
    assert answer.status_code == 200
    assert [fault for fault, _ in upstream.arrivals] == ["busy", "ok"]
    assert upstream.arrivals[1][1] - upstream.arrivals[0][1] >= 0.2  # retry-after-ms: 200


async def test_fallbacks_are_tried_in_order_when_the_route_fails_before_any_byte() -> None:
    async with FaultUpstream(default="busy") as busy, FaultUpstream() as good:
        config = make_config(
            ("gone", f"http://{LOOPBACK}:{free_port()}/v1"),
            ("busy", busy.base_url),
            ("good", good.base_url),
            fallbacks=("busy", "good"),
        )
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(f"{url}/v1/chat/completions", json=chat())
    assert answer.status_code == 200 and answer.json()["object"] == "chat.completion"
    assert [f for f, _ in busy.arrivals] == ["busy"] and [f for f, _ in good.arrivals] == ["ok"]


async def test_nothing_is_retried_once_bytes_reached_the_client() -> None:
    async with FaultUpstream(default="reset-mid") as flaky, FaultUpstream() as backup:
        config = make_config(("flaky", flaky.base_url), ("backup", backup.base_url), fallbacks=("backup",))
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(f"{url}/v1/chat/completions", json=chat(stream=True))
    assert answer.text.endswith("data: [DONE]\n\n") and '"upstream_unavailable"' in answer.text
    assert len(flaky.arrivals) == 1 and backup.arrivals == []


# --- 4. back-pressure -------------------------------------------------------------------------------


async def test_requests_beyond_max_concurrent_are_refused_at_once_with_retry_after() -> None:
    async with FaultUpstream(default="hold") as upstream:
        config = make_config(("main", upstream.base_url), max_concurrent=2)
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            held = [
                asyncio.create_task(client.post(f"{url}/v1/chat/completions", json=chat())) for _ in range(2)
            ]
            await eventually(lambda: len(upstream.arrivals) == 2)

            refused = await client.post(f"{url}/v1/chat/completions", json=chat())
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "proxy_overloaded"
            assert (await client.get(f"{url}/healthz")).status_code == 200  # never refused

            upstream.release.set()
            assert [answer.status_code for answer in await asyncio.gather(*held)] == [200, 200]
            assert (await client.post(f"{url}/v1/chat/completions", json=chat())).status_code == 200
            counts = await statuses(url)
    assert (counts["429"], counts["200"]) == (1, 3)


async def test_idle_upstream_connections_are_closed_once_their_keep_alive_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pooled keep-alive connections to the upstream are closed after their keep-alive even when no
    more requests come (the sweeper closes them; nothing else would)."""
    monkeypatch.setattr("proxy.upstream.pools.KEEPALIVE_S", 0.3)
    mock = _InProcessServer(
        uvicorn.Config(create_mock_app(), lifespan="off", log_config=None, access_log=False)
    )
    sock = socket.socket()
    sock.bind((LOOPBACK, 0))
    mock_task = asyncio.create_task(mock.serve(sockets=[sock]))
    try:
        while not mock.started:
            await asyncio.sleep(0.01)
        config = make_config(("mock", f"http://{LOOPBACK}:{sock.getsockname()[1]}/v1"))
        async with serving(config) as url:
            fds = open_fds()
            async with httpx.AsyncClient(timeout=10) as client:
                for _ in range(6):  # leaves a kept-alive upstream connection behind
                    assert (await client.post(f"{url}/v1/chat/completions", json=chat())).status_code == 200
            await eventually(lambda: open_fds() <= fds, within=5)
    finally:
        mock.should_exit = True
        await asyncio.wait_for(mock_task, 10)
        sock.close()
