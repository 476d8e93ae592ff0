"""One tenant's share and slow bodies: per-tenant concurrency and the body read timeout, served."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from proxy.config.loading import parse_config
from proxy.config.models import Config
from tests.test_reliability import LOOPBACK, FaultUpstream, chat, eventually, raw_request, serving

pytestmark = pytest.mark.anyio

KEYS = {"a": "sk-proxy-tenant-a", "b": "sk-proxy-tenant-b"}


def tenants_config(base_url: str, **limits: Any) -> Config:
    return parse_config(
        {
            "upstreams": {"main": {"base_url": base_url, "retries": 0}},
            "auth": {"keys": [{"key": key, "tenant": tenant} for tenant, key in KEYS.items()]},
            "limits": {"connect_timeout_s": 1, "read_timeout_s": 10, **limits},
        },
        env={},
    )


def bearer(tenant: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[tenant]}"}


async def test_one_tenant_at_its_limit_leaves_room_for_the_others() -> None:
    async with FaultUpstream(default="hold") as upstream:
        config = tenants_config(upstream.base_url, max_concurrent=20, max_concurrent_per_tenant=2)
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:

            def post(tenant: str) -> asyncio.Task[httpx.Response]:
                return asyncio.create_task(
                    client.post(f"{url}/v1/chat/completions", json=chat(), headers=bearer(tenant))
                )

            held = [post("a"), post("a")]
            await eventually(lambda: len(upstream.arrivals) == 2)
            refused = await client.post(f"{url}/v1/chat/completions", json=chat(), headers=bearer("a"))
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            assert "limits.max_concurrent_per_tenant" in refused.json()["error"]["message"]

            held.append(post("b"))  # another tenant is admitted
            await eventually(lambda: len(upstream.arrivals) == 3)
            upstream.release.set()
            assert [answer.status_code for answer in await asyncio.gather(*held)] == [200, 200, 200]
            again = await client.post(f"{url}/v1/chat/completions", json=chat(), headers=bearer("a"))
            assert again.status_code == 200  # the tenant's slots came back


async def test_a_body_that_stops_arriving_is_408_and_never_forwarded() -> None:
    async with (
        FaultUpstream() as upstream,
        serving(tenants_config(upstream.base_url, body_timeout_s=0.5)) as url,
    ):
        port = int(url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection(LOOPBACK, port)
        request = raw_request(chat(), authorization=f"Bearer {KEYS['a']}", x_probe="stalled")
        writer.write(request[:-10])  # the head and most of the body, then nothing
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 15)  # read to the end: the proxy closes
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ") and b"connection: close" in head.lower()
    assert b"limits.body_timeout_s" in body
    assert "stalled" not in upstream.arrived
