"""The bad day, for real: the proxy served by uvicorn on a loopback port, in front of an upstream
that misbehaves on purpose (a raw asyncio server that refuses, hangs, resets, trickles), and clients
that walk away. Each fault has a clear outcome, the upstream learns when the client left, nothing
is left behind, and the proxy keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import defaultdict

import httpx
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from history_proxy.config.loading import parse_config
from history_proxy.mock.upstream import create_mock_app
from tests.support.faults import (
    LOOPBACK,
    NOTICE_S,
    FaultUpstream,
    InProcessServer,
    chat,
    eventually,
    make_config,
    open_fds,
    other_tasks,
    raw_request,
    serving,
    sse_event,
)

pytestmark = pytest.mark.anyio


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
        assert events[:2] == [sse_event(0).decode().strip(), sse_event(1).decode().strip()]
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
            assert first.startswith(sse_event(0))  # arrived while the upstream still holds back the rest
            upstream.release.set()
            rest = b"".join([piece async for piece in pieces])
        assert (first + rest).endswith(b"data: [DONE]\n\n")
        assert sse_event(2) in rest
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
    monkeypatch.setattr("history_proxy.upstream.pools.KEEPALIVE_S", 0.3)
    mock = InProcessServer(
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
