"""One identity of a request before any limit, through Redis (issue 34, item 1; the in-process half is
tests/server/test_one_identity.py).

Two ``history-proxy serve`` replicas share a real ``redis-server``: what one spends under the canonical
path and role, the other refuses under every spelling of a shaped route the doors serve and every case
of the role, and Redis holds one counter per tenant and role (``worker``, never ``WORKER``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml

from tests.support.faults import FaultUpstream, eventually
from tests.support.redis_server import RedisServer, redis_server
from tests.support.serve_process import Server, start

pytestmark = pytest.mark.anyio

__all__ = ["redis_server"]  # the fixture, used by name below

KEY = "proxy-key-team-a"
PREFIX = "test-identity:"
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "gpt-4o", "input": "hi"},
    "/v1/messages": {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
}
ROLE_CASES = ["WORKER", "Worker", "wOrKeR", "worker"]


def spellings(route: str) -> list[str]:
    """Ways of writing ``route`` that the doors serve as it."""
    rest = route.removeprefix("/v1/")
    return [f"//v1/{rest}", f"/V1/{rest}", f"/v1//{rest}", f"/v1/{rest}/", f"/v1/{rest.upper()}"]


CASES = [(route, spelled) for route in BODIES for spelled in spellings(route)]


@contextmanager
def replicas(
    tmp_path: Path, upstream: FaultUpstream, redis_url: str, **limits: Any
) -> Iterator[list[Server]]:
    config = {
        "upstreams": {
            "main": {"base_url": upstream.base_url, "retries": 0},
            "claude": {"base_url": upstream.base_url, "retries": 0, "api": "anthropic"},
        },
        "routes": [{"model": "claude-*", "upstream": "claude"}],
        "auth": {"keys": [{"key": KEY, "tenant": "team-a"}]},
        "summary_cache": {"key_prefix": PREFIX},
        "limits": {"connect_timeout_s": 1, "read_timeout_s": 30, "redis_url": redis_url, **limits},
        "policies": {"roles": {"worker": [{"type": "last_n_observations", "n": 3}]}},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                contextmanager(start)(
                    "serve", "--config", str(path), log=tmp_path / f"serve-{n}.log", ready_path="/healthz"
                )
            )
            for n in range(2)
        ]


async def send(
    client: httpx.AsyncClient, server: Server, route: str, path: str, role: str, fault: str = "ok"
) -> httpx.Response:
    target = httpx.URL(server.url).copy_with(raw_path=path.encode())
    headers = {"authorization": f"Bearer {KEY}", "x-agent-role": role, "x-fault": fault}
    return await client.post(target, json=BODIES[route], headers=headers)


def refused(answer: httpx.Response, setting: str) -> bool:
    return answer.status_code == 429 and setting in answer.text


@pytest.mark.parametrize("setting", ["limits.per_tenant", "limits.per_role.worker"])
async def test_what_one_replica_spent_the_other_refuses_under_every_spelling_and_role_case(
    redis_server: RedisServer, tmp_path: Path, setting: str
) -> None:
    rate = {"requests_per_minute": 3}
    limits = {"per_tenant": rate} if setting == "limits.per_tenant" else {"per_role": {"worker": rate}}
    async with FaultUpstream() as upstream:
        with replicas(tmp_path, upstream, redis_server.url, **limits) as (one, two):
            async with httpx.AsyncClient(timeout=30) as client:
                spent = [
                    await send(client, one, "/v1/chat/completions", "/v1/chat/completions", "worker")
                    for _ in range(3)
                ]
                answers = {
                    (path, role): await send(client, two, route, path, role)
                    for route, path in CASES
                    for role in ROLE_CASES
                }
    assert [a.status_code for a in spent] == [200, 200, 200]
    passed = {case: a.status_code for case, a in answers.items() if not refused(a, setting)}
    assert passed == {}
    assert len(upstream.arrivals) == 3
    keys = redis.Redis(port=redis_server.port, decode_responses=True).keys(f"{PREFIX}limits:*")
    assert keys and all(":WORKER" not in key and ":Worker" not in key for key in keys)


async def test_a_tenants_slots_held_on_one_replica_are_counted_on_the_other_under_every_spelling(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    async with FaultUpstream(default="hold") as upstream:
        with replicas(tmp_path, upstream, redis_server.url, max_concurrent_per_tenant=2) as (one, two):
            async with httpx.AsyncClient(timeout=30) as client:
                held = [
                    asyncio.create_task(send(client, one, route, path, role, fault="hold"))
                    for route, path, role in (
                        ("/v1/messages", "//v1/messages", "WORKER"),
                        ("/v1/responses", "/V1/responses", "Worker"),
                    )
                ]
                await eventually(lambda: len(upstream.arrivals) == 2, 10)
                answers = {path: await send(client, two, route, path, "worker") for route, path in CASES}
                slots = redis.Redis(port=redis_server.port).zcard(f"{PREFIX}limits:slots:team-a")
                upstream.release.set()
                finished = [a.status_code for a in await asyncio.gather(*held)]
                after = await send(client, two, "/v1/chat/completions", "//v1/chat/completions", "WORKER")
    passed = {
        path: a.status_code for path, a in answers.items() if not refused(a, "max_concurrent_per_tenant")
    }
    assert passed == {}
    assert slots == 2 and finished == [200, 200] and after.status_code == 200
