"""One identity of a request before any limit (issue 34, item 1, in this process).

Every spelling of a shaped route that the doors serve, and every case and spacing of a configured
role, counts against every limit kind exactly as the canonical spelling does: ``max_concurrent``,
``max_concurrent_per_tenant``, ``per_tenant`` and ``per_role``. A refusal comes in the shape of the
surface the spelling reaches (Anthropic's for ``//v1/messages``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from tests.support.faults import FaultUpstream, eventually, serving
from tests.support.tenants import KEYS, bearer

pytestmark = pytest.mark.anyio

BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/responses": {"model": "gpt-4o", "input": "hi"},
    "/v1/messages": {"model": "claude-x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
}


def spellings(route: str) -> list[str]:
    """Every way of writing ``route`` that the doors serve as it."""
    rest = route.removeprefix("/v1/")
    return [
        f"//v1/{rest}",
        f"/V1/{rest}",
        f"/v1//{rest}",
        f"/v1/{rest}/",
        f"/v1/{rest.upper()}",
        f"///v1/{rest}//",
    ]


CASES = [spelled for route in BODIES for spelled in spellings(route)]
ROLE_CASES = ["WORKER", "Worker", "wOrKeR", "worker"]


def config(base_url: str, **limits: Any) -> Config:
    return parse_config(
        {
            "upstreams": {
                "main": {"base_url": base_url, "retries": 0},
                "claude": {"base_url": base_url, "retries": 0, "api": "anthropic"},
            },
            "routes": [{"model": "claude-*", "upstream": "claude"}],
            "auth": {"keys": [{"key": key, "tenant": tenant} for tenant, key in KEYS.items()]},
            "limits": {"connect_timeout_s": 1, "read_timeout_s": 10, **limits},
            "policies": {"roles": {"worker": [{"type": "last_n_observations", "n": 3}]}},
        },
        env={},
    )


async def send(client: httpx.AsyncClient, url: str, path: str, role: str = "worker") -> httpx.Response:
    route = next(r for r in BODIES if path.lower().replace("//", "/").rstrip("/").endswith(r.lower()[3:]))
    target = httpx.URL(url).copy_with(raw_path=path.encode())
    return await client.post(target, json=BODIES[route], headers={**bearer("a"), "x-agent-role": role})


def assert_refused(answer: httpx.Response, path: str, setting: str) -> None:
    assert answer.status_code == 429, (path, answer.status_code, answer.text)
    body = answer.json()
    if "messages" in path.lower():
        assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error", body
    else:
        assert body["error"]["type"] == "rate_limit_error", body
    assert setting in answer.text, answer.text


@pytest.mark.parametrize("setting", ["limits.per_tenant", "limits.per_role.worker"])
async def test_every_spelling_and_role_case_counts_against_the_rates(setting: str) -> None:
    rate = {"requests_per_minute": 3}
    limits = {"per_tenant": rate} if setting == "limits.per_tenant" else {"per_role": {"worker": rate}}
    async with (
        FaultUpstream() as upstream,
        serving(config(upstream.base_url, **limits)) as url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        for _ in range(3):  # the budget spent on the canonical spelling and role
            assert (await send(client, url, "/v1/chat/completions")).status_code == 200
        for path in CASES:
            for role in ROLE_CASES:
                assert_refused(await send(client, url, path, role), path, setting)
        assert len(upstream.arrivals) == 3


@pytest.mark.parametrize("setting", ["limits.max_concurrent", "limits.max_concurrent_per_tenant"])
async def test_every_spelling_and_role_case_counts_against_the_slots(setting: str) -> None:
    name = setting.removeprefix("limits.")
    async with (
        FaultUpstream(default="hold") as upstream,
        serving(config(upstream.base_url, **{name: 2})) as url,
        httpx.AsyncClient(timeout=20) as client,
    ):
        held = [
            asyncio.create_task(send(client, url, path, role))
            for path, role in (("//v1/messages", "WORKER"), ("/V1/responses", "Worker"))
        ]
        await eventually(lambda: len(upstream.arrivals) == 2)
        for path in CASES:
            for role in ROLE_CASES[:2]:
                assert_refused(await send(client, url, path, role), path, setting)
        assert len(upstream.arrivals) == 2
        upstream.release.set()
        assert [answer.status_code for answer in await asyncio.gather(*held)] == [200, 200]
        assert (await send(client, url, "//v1/chat/completions")).status_code == 200  # slots came back
