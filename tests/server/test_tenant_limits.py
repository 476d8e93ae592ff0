"""Tenants: upstreams scoped per proxy key, one tenant's share of the concurrency."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import respx

from history_proxy.config.loading import ConfigError, parse_config
from history_proxy.config.models import Config
from tests.support.asgi_app import CLAUDE, COMPLETION, MAIN, UPSTREAM_KEY, make_config, serve
from tests.support.asgi_app import chat as chat_of
from tests.support.faults import FaultUpstream, chat, eventually, serving
from tests.support.tenants import KEYS, bearer

pytestmark = pytest.mark.anyio


def tenants_config(base_url: str, **limits: Any) -> Config:
    return parse_config(
        {
            "upstreams": {"main": {"base_url": base_url, "retries": 0}},
            "auth": {"keys": [{"key": key, "tenant": tenant} for tenant, key in KEYS.items()]},
            "limits": {"connect_timeout_s": 1, "read_timeout_s": 10, **limits},
        },
        env={},
    )


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


# --- tenant-scoped upstreams ---------------------------------------------------------------------


def scoped_config(**key_b: Any) -> Config:
    raw = make_config().model_dump(mode="json", by_alias=True, exclude_unset=True)
    return parse_config(
        {
            **raw,
            "upstreams": {
                "main": {"base_url": MAIN, "api_key": UPSTREAM_KEY, "retries": 0},
                "claude": {"base_url": CLAUDE, "retries": 0},
            },
            "auth": {"keys": [{"key": KEYS["a"], "tenant": "a"}, {"key": KEYS["b"], "tenant": "b", **key_b}]},
            "routes": [
                {"model": "claude-*", "upstream": "claude"},
                {"model": "gpt-*", "upstream": "main", "fallbacks": ["claude"]},
            ],
        },
        env={},
    )


async def test_a_key_reaches_only_its_upstreams_and_others_get_a_403_naming_the_setting(
    mocked: respx.MockRouter,
) -> None:
    keyed = mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    claude = mocked.post(f"{CLAUDE}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(scoped_config(upstreams=["claude"])) as client:
        refused = await client.post("/v1/chat/completions", json=chat_of(), headers=bearer("b"))
        listed = await client.get("/v1/models", headers=bearer("b"))  # routes to the default: main
        allowed = await client.post(
            "/v1/chat/completions", json=chat_of(model="claude-x"), headers=bearer("b")
        )
        other_tenant = await client.post("/v1/chat/completions", json=chat_of(), headers=bearer("a"))
    for response in (refused, listed):
        error = response.json()["error"]
        assert response.status_code == 403 and error["type"] == "permission_error"
        assert "auth.keys[].upstreams" in error["message"] and "'main'" in error["message"]
    assert allowed.status_code == 200 and other_tenant.status_code == 200
    assert keyed.call_count == 1 and claude.call_count == 1  # tenant b never reached main
    assert all(UPSTREAM_KEY not in str(call.request.headers) for call in claude.calls)


async def test_fallbacks_outside_a_keys_upstreams_are_never_tried(mocked: respx.MockRouter) -> None:
    main = mocked.post(f"{MAIN}/chat/completions").mock(return_value=httpx.Response(503, json={}))
    claude = mocked.post(f"{CLAUDE}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(scoped_config(upstreams=["main"])) as client:
        scoped = await client.post("/v1/chat/completions", json=chat_of(), headers=bearer("b"))
        unscoped = await client.post("/v1/chat/completions", json=chat_of(), headers=bearer("a"))
    assert scoped.status_code == 503 and unscoped.status_code == 200
    assert main.call_count == 2 and claude.call_count == 1


def test_a_key_naming_an_unknown_upstream_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"keys\[1\]\.upstreams\[0\] names unknown upstream 'nope'"):
        scoped_config(upstreams=["nope"])


async def test_a_messages_request_refused_for_concurrency_gets_anthropics_error_shape() -> None:
    async with FaultUpstream(default="hold") as upstream:
        config = tenants_config(upstream.base_url, max_concurrent=1)
        async with serving(config) as url, httpx.AsyncClient(timeout=10) as client:
            held = asyncio.create_task(
                client.post(f"{url}/v1/chat/completions", json=chat(), headers=bearer("a"))
            )
            await eventually(lambda: len(upstream.arrivals) == 1)
            messages = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
            refused = await client.post(f"{url}/v1/messages", json=messages, headers=bearer("b"))
            upstream.release.set()
            assert (await held).status_code == 200
    assert refused.status_code == 429
    error = refused.json()
    assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error"
    assert "limits.max_concurrent" in error["error"]["message"]
