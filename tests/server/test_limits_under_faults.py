"""Issue 34's R5, R6 and R9: the limits stay exact while Redis is far, killed, restarted or paused.

Each test runs the real ``history-proxy serve`` against a real ``redis-server`` on a free port (skipped
with the reason when it is not installed) and a holding upstream in this process, so the requests a
test sends stay in flight until it lets them go, and counts what reached the upstream.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from tests.support.faults import FaultUpstream, eventually
from tests.support.redis_server import DelayedRedis, RedisServer, redis_server
from tests.support.serve_process import Server, start

pytestmark = pytest.mark.anyio

__all__ = ["redis_server"]  # the fixture, used by name below

KEY = "proxy-key-team-a"
PREFIX = "test-faults:"
SLOTS = f"{PREFIX}limits:slots:team-a"


@contextmanager
def proxy(tmp_path: Path, upstream: FaultUpstream, redis_url: str, **limits: Any) -> Iterator[Server]:
    """``history-proxy serve`` with one tenant's key, the limits given, counting in ``redis_url``."""
    config = {
        "upstreams": {"main": {"base_url": upstream.base_url, "retries": 0}},
        "auth": {"keys": [{"key": KEY, "tenant": "team-a"}]},
        "summary_cache": {"key_prefix": PREFIX},
        "limits": {"connect_timeout_s": 1, "read_timeout_s": 30, "redis_url": redis_url, **limits},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    yield from start("serve", "--config", str(path), log=tmp_path / "serve.log", ready_path="/healthz")


def chat(content: str = "hi") -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}


async def post(
    client: httpx.AsyncClient, server: Server, body: dict[str, Any] | None = None, fault: str | None = None
) -> int:
    """A chat completion with the tenant's key; ``fault`` tells the upstream how to answer (else: hold)."""
    headers = {"authorization": f"Bearer {KEY}", **({"x-fault": fault} if fault else {})}
    answer = await client.post(f"{server.url}/v1/chat/completions", json=body or chat(), headers=headers)
    return answer.status_code


def slots_in(server: RedisServer) -> int:
    return int(redis.Redis(port=server.port).zcard(SLOTS))


def tokens_counted(server: RedisServer) -> int:
    store = redis.Redis(port=server.port, decode_responses=True)
    return sum(int(store.get(key) or 0) for key in store.keys(f"{PREFIX}limits:tenant:team-a:tokens:*"))


# --- R5: max_concurrent is checked and counted in one step ------------------------------------------


@pytest.mark.parametrize("delay_s", [0.0, 0.3], ids=["redis-local", "redis-300ms-away"])
async def test_a_burst_gets_max_concurrent_slots_while_redis_admission_is_awaited(
    redis_server: RedisServer, tmp_path: Path, delay_s: float
) -> None:
    async with FaultUpstream(default="hold") as upstream:
        with (
            DelayedRedis(redis_server.port, delay_s) as far,
            proxy(tmp_path, upstream, far.url, max_concurrent=3, max_concurrent_per_tenant=100) as server,
        ):
            async with httpx.AsyncClient(timeout=30) as client:
                burst = [asyncio.create_task(post(client, server)) for _ in range(8)]
                await eventually(lambda: sum(t.done() for t in burst) >= 5 or len(upstream.arrivals) > 3, 15)
                await eventually(lambda: len(upstream.arrivals) >= 3, 10)  # through Redis's admission
                await asyncio.sleep(0.5 + 2 * delay_s)  # time for one more to reach the upstream, if admitted
                reached = len(upstream.arrivals)
                upstream.release.set()
                statuses = await asyncio.gather(*burst)
    assert reached == 3
    assert sorted(statuses) == [200] * 3 + [429] * 5


# --- R6: a Redis that lost the slots gets them back; the fallback counts this process's own --------


async def hold_two(
    client: httpx.AsyncClient, server: Server, upstream: FaultUpstream
) -> list[asyncio.Task[int]]:
    held = [asyncio.create_task(post(client, server)) for _ in range(2)]
    await eventually(lambda: len(upstream.arrivals) == 2, 10)
    return held


async def test_a_redis_restarted_empty_gets_the_slots_in_flight_back(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with FaultUpstream(default="hold") as upstream:
        with proxy(tmp_path, upstream, redis_server.url, max_concurrent_per_tenant=2, lease_s=1) as server:
            async with httpx.AsyncClient(timeout=30) as client:
                held = await hold_two(client, server, upstream)
                redis_server.kill()
                redis_server.start()  # empty: nothing is persisted
                await eventually(lambda: slots_in(redis_server) == 2, 10)  # the renewer put both back
                third = await post(client, server, fault="ok")
                upstream.release.set()
                finished = await asyncio.gather(*held)
                after = await post(client, server, fault="ok")
    assert third == 429 and finished == [200, 200] and after == 200
    assert len(upstream.arrivals) == 3  # the refused one never went upstream


async def test_a_redis_paused_longer_than_the_lease_gets_the_slots_back_when_it_returns(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    assert redis_server.process is not None
    async with FaultUpstream(default="hold") as upstream:
        with proxy(tmp_path, upstream, redis_server.url, max_concurrent_per_tenant=2, lease_s=1) as server:
            async with httpx.AsyncClient(timeout=30) as client:
                held = await hold_two(client, server, upstream)
                os.kill(redis_server.process.pid, signal.SIGSTOP)
                try:
                    paused = await post(client, server, fault="ok")
                    await asyncio.sleep(2.5)  # the leases (1 s) run out on Redis's clock
                finally:
                    os.kill(redis_server.process.pid, signal.SIGCONT)
                await eventually(lambda: slots_in(redis_server) == 2, 15)
                back = await post(client, server, fault="ok")
                upstream.release.set()
                finished = await asyncio.gather(*held)
    assert paused == 429 and back == 429 and finished == [200, 200]


async def test_while_redis_is_down_the_fallback_counts_the_requests_this_process_has_in_flight(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with FaultUpstream(default="hold") as upstream:
        with proxy(tmp_path, upstream, redis_server.url, max_concurrent_per_tenant=2, lease_s=1) as server:
            async with httpx.AsyncClient(timeout=30) as client:
                held = await hold_two(client, server, upstream)
                redis_server.kill()
                during = [await post(client, server, fault="ok") for _ in range(3)]
                upstream.release.set()
                finished = await asyncio.gather(*held)
                freed = await post(client, server, fault="ok")  # still down: counted here
    assert during == [429, 429, 429] and finished == [200, 200] and freed == 200
    assert "unreachable" in server.output()


# --- R9: tokens a minute are reserved at admission ------------------------------------------------


@pytest.mark.parametrize("shared", [True, False], ids=["redis", "in-process"])
async def test_a_concurrent_burst_cannot_pass_a_token_budget_none_of_it_has_counted_yet(
    request: pytest.FixtureRequest, tmp_path: Path, shared: bool
) -> None:
    body = chat("word " * 5000)  # ~5,000 input tokens, ~25 kB
    budget = {"per_tenant": {"tokens_per_minute": 2000}}
    async with FaultUpstream(default="hold") as upstream:
        store: RedisServer | None = request.getfixturevalue("redis_server") if shared else None
        with proxy(tmp_path, upstream, store.url if store else "", **budget) as server:
            async with httpx.AsyncClient(timeout=30) as client:
                burst = [asyncio.create_task(post(client, server, body)) for _ in range(20)]
                await eventually(lambda: sum(t.done() for t in burst) >= 19 or len(upstream.arrivals) > 1, 15)
                await asyncio.sleep(0.5)
                reached = len(upstream.arrivals)
                upstream.release.set()
                statuses = await asyncio.gather(*burst)
                later = await post(client, server, chat())
    assert reached == 1
    assert sorted(statuses) == [200] + [429] * 19
    assert later == 429  # the budget stays spent by what was really sent
    if (
        store is not None
    ):  # the reservation (~6,250: bytes / 4) was settled to the tokens really sent (~5,000)
        assert 4000 < tokens_counted(store) < len(str(body)) // 4
