"""Per-tenant and per-role rates, and the tenant limits shared by replicas through a real Redis.

In-process apps (``serving``) on free loopback ports; the Redis tests start ``redis-server`` on a free
port (skipped with the reason when it is not installed). The three-replica fleet behind nginx is
tests/test_fleet.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.server.quotas import Admitted, LocalCounters, Rate, Refusal, Slot
from history_proxy.server.shared_limits import SharedCounters
from tests.support.faults import FaultUpstream, chat, eventually, serving
from tests.support.redis_server import RedisServer, redis_server
from tests.support.tenants import KEYS, bearer

pytestmark = pytest.mark.anyio

__all__ = ["redis_server"]  # the fixture, used by name below


def limited_config(base_url: str, redis_url: str | None = None, **limits: Any) -> Config:
    return parse_config(
        {
            "upstreams": {"main": {"base_url": base_url, "retries": 0}},
            "auth": {"keys": [{"key": key, "tenant": tenant} for tenant, key in KEYS.items()]},
            "summary_cache": {"key_prefix": "test-limits:"},
            "limits": {"connect_timeout_s": 1, "read_timeout_s": 10, "redis_url": redis_url, **limits},
        },
        env={},
    )


async def post(client: httpx.AsyncClient, url: str, tenant: str, role: str = "default") -> httpx.Response:
    headers = {**bearer(tenant), "x-agent-role": role}
    return await client.post(f"{url}/v1/chat/completions", json=chat(), headers=headers)


async def test_a_tenant_past_its_requests_a_minute_is_refused_with_the_setting_and_a_retry_after() -> None:
    async with FaultUpstream() as upstream:
        config = limited_config(upstream.base_url, per_tenant={"requests_per_minute": 3})
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            answers = [await post(client, url, "a") for _ in range(4)]
            other = await post(client, url, "b")
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    refused = answers[-1]
    assert "limits.per_tenant.requests_per_minute" in refused.json()["error"]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    assert other.status_code == 200 and len(upstream.arrivals) == 4  # the refused one never went upstream


async def test_a_role_limit_counts_each_tenants_callers_of_that_role_apart() -> None:
    async with FaultUpstream() as upstream:
        config = limited_config(upstream.base_url, per_role={"worker": {"requests_per_minute": 2}})
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            workers = [(await post(client, url, "a", "worker")).status_code for _ in range(3)]
            orchestrator = await post(client, url, "a", "orchestrator")
            other_tenant = await post(client, url, "b", "worker")
    assert workers == [200, 200, 429]
    assert orchestrator.status_code == 200 and other_tenant.status_code == 200


async def test_a_tenant_that_spent_its_tokens_a_minute_is_refused_until_the_window_moves() -> None:
    async with FaultUpstream() as upstream:
        config = limited_config(upstream.base_url, per_tenant={"tokens_per_minute": 5})
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            first = await post(client, url, "a")  # "hi" is more than 5 input tokens with the overhead
            second = await post(client, url, "a")
    assert first.status_code == 200 and second.status_code == 429
    assert (
        "5 input tokens a minute (limits.per_tenant.tokens_per_minute)" in second.json()["error"]["message"]
    )


async def test_two_replicas_sharing_redis_hold_a_tenants_concurrency_in_total(
    redis_server: RedisServer,
) -> None:
    async with FaultUpstream(default="hold") as upstream:
        config = limited_config(upstream.base_url, redis_server.url, max_concurrent_per_tenant=2)
        async with (
            serving(config) as one,
            serving(config) as two,
            httpx.AsyncClient(timeout=10) as client,
        ):
            held = [asyncio.create_task(post(client, url, "a")) for url in (one, two)]
            await eventually(lambda: len(upstream.arrivals) == 2)
            refused = [await post(client, url, "a") for url in (one, two)]  # each replica has one in flight
            other = asyncio.create_task(post(client, two, "b"))
            await eventually(lambda: len(upstream.arrivals) == 3)
            upstream.release.set()
            assert [a.status_code for a in await asyncio.gather(*held, other)] == [200, 200, 200]
            again = await post(client, one, "a")
    assert [r.status_code for r in refused] == [429, 429]
    assert "limits.max_concurrent_per_tenant" in refused[0].json()["error"]["message"]
    assert again.status_code == 200


async def test_the_slots_of_a_replica_that_died_come_back_after_the_lease(redis_server: RedisServer) -> None:
    slot = Slot("slots:a", 1, "tenant 'a'")
    dead = SharedCounters(redis_server.url, lease_s=1, key_prefix="test-limits:")
    assert isinstance(await dead.admit(slot, dead.member(), []), Admitted)
    await dead.aclose()  # stops renewing without giving the slot back, as a killed process would
    alive = SharedCounters(redis_server.url, lease_s=1, key_prefix="test-limits:")
    try:
        assert isinstance(await alive.admit(slot, alive.member(), []), Refusal)
        await asyncio.sleep(1.2)
        assert isinstance(await alive.admit(slot, alive.member(), []), Admitted)
    finally:
        await alive.aclose()


async def test_a_slot_held_longer_than_the_lease_is_renewed_and_not_taken(redis_server: RedisServer) -> None:
    slot = Slot("slots:a", 1, "tenant 'a'")
    holder = SharedCounters(redis_server.url, lease_s=1, key_prefix="test-limits:")
    other = SharedCounters(redis_server.url, lease_s=1, key_prefix="test-limits:")
    try:
        member = holder.member()
        assert isinstance(await holder.admit(slot, member, []), Admitted)
        await asyncio.sleep(2.5)
        assert isinstance(await other.admit(slot, other.member(), []), Refusal)
        await holder.release(slot, member)
        assert isinstance(await other.admit(slot, other.member(), []), Admitted)
    finally:
        await holder.aclose()
        await other.aclose()


async def test_with_redis_unreachable_each_process_still_holds_its_own_limits() -> None:
    rate = Rate("tenant:a:requests", 2, 1, "limits.per_tenant.requests_per_minute", "tenant 'a'")
    counters = SharedCounters("redis://127.0.0.1:9/0", lease_s=5, timeout_s=0.2)
    try:
        answers = [await counters.admit(None, counters.member(), [rate]) for _ in range(3)]
    finally:
        await counters.aclose()
    assert [type(a) for a in answers] == [Admitted, Admitted, Refusal]
    assert isinstance(answers[2], Refusal)
    assert "limits.per_tenant.requests_per_minute" in answers[2].message


async def test_the_rate_window_slides_the_previous_minute_out_and_says_when_to_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [6000.0]  # the start of a minute
    monkeypatch.setattr("history_proxy.server.quotas.time.time", lambda: now[0])
    rate = Rate("tenant:a:requests", 10, 1, "limits.per_tenant.requests_per_minute", "tenant 'a'")
    counters = LocalCounters()
    assert [await counters.admit(None, "m", [rate]) for _ in range(10)] == [Admitted(100)] * 10
    full = await counters.admit(None, "m", [rate])
    assert isinstance(full, Refusal) and full.retry_after_s == 60  # nothing leaves before the minute is over
    now[0] += 90  # half-way through the next minute: the previous one weighs 10 x 0.5
    admitted = [await counters.admit(None, "m", [rate]) for _ in range(6)]
    assert admitted[:5] == [Admitted(101)] * 5 and isinstance(admitted[5], Refusal)
    assert admitted[5].retry_after_s == 6  # one request's room: a tenth of the previous minute's weight
    now[0] += 120  # two minutes idle: all forgotten
    assert isinstance(await counters.admit(None, "m", [rate]), Admitted)


async def test_a_token_reservation_is_settled_in_the_minute_it_was_counted_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [6000.0]  # the start of a minute
    monkeypatch.setattr("history_proxy.server.quotas.time.time", lambda: now[0])
    budget = Rate(
        "tenant:a:tokens", 150, 600, "limits.per_tenant.tokens_per_minute", "tenant 'a'", tokens=True
    )
    counters = LocalCounters()
    admitted = await counters.admit(None, "m", [budget])  # not spent yet: admitted, 600 reserved
    assert isinstance(admitted, Admitted)
    assert isinstance(await counters.admit(None, "m", [budget]), Refusal)  # the reservation spent it
    now[0] += 60  # the next minute: the reservation's minute is the previous one, still weighing fully
    await counters.settle_tokens([budget.key], admitted, 100 - 600)  # 100 tokens were really sent
    assert isinstance(await counters.admit(None, "m", [budget]), Admitted)  # 100 < 150
    await counters.settle_tokens([budget.key], admitted, -10_000)  # never below nothing
    assert counters.minutes[budget.key].previous == 0
