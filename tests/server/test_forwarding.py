"""What a client's forwarding and hop-by-hop headers become on the way upstream."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import respx

from tests.support.asgi_app import CLAUDE, COMPLETION, chat, make_config, serve

pytestmark = pytest.mark.anyio

PEER = "127.0.0.1"  # httpx's ASGI transport presents every request as from 127.0.0.1


async def sent_upstream(mocked: respx.MockRouter, headers: dict[str, str], **config: Any) -> httpx.Headers:
    route = mocked.post(f"{CLAUDE}/chat/completions").mock(return_value=httpx.Response(200, json=COMPLETION))
    async with serve(make_config(**config)) as client:
        response = await client.post("/v1/chat/completions", json=chat(model="claude-x"), headers=headers)
    assert response.status_code == 200
    return route.calls.last.request.headers


async def test_expect_100_continue_is_not_forwarded(mocked: respx.MockRouter) -> None:
    sent = await sent_upstream(mocked, {"expect": "100-continue"})
    assert "expect" not in sent


async def test_a_header_named_in_connection_is_hop_by_hop_authorization_included(
    mocked: respx.MockRouter,
) -> None:
    plain = await sent_upstream(mocked, {"authorization": "Bearer sk-client", "x-keep": "1"})
    assert plain["authorization"] == "Bearer sk-client"  # an upstream without a key gets the client's
    named = await sent_upstream(
        mocked,
        {
            "authorization": "Bearer sk-client",
            "x-drop": "1",
            "x-keep": "1",
            "connection": "Authorization, X-Drop",
        },
    )
    assert "authorization" not in named and "x-drop" not in named and named["x-keep"] == "1"


async def test_forwarding_headers_from_an_untrusted_peer_are_replaced(mocked: respx.MockRouter) -> None:
    forged = {
        "x-forwarded-for": "6.6.6.6",
        "x-forwarded-proto": "gopher",
        "x-forwarded-host": "evil.test",
        "forwarded": "for=6.6.6.6",
    }
    sent = await sent_upstream(mocked, forged)
    assert sent["x-forwarded-for"] == PEER and sent["x-forwarded-proto"] == "http"
    assert sent["x-forwarded-host"] == "p" and sent["forwarded"] == 'for=127.0.0.1;proto=http;host="p"'
    assert "6.6.6.6" not in str(sent) and "evil.test" not in str(sent)


async def test_forwarding_headers_from_a_trusted_proxy_are_kept_and_appended(
    mocked: respx.MockRouter,
) -> None:
    by_balancer = {
        "x-forwarded-for": "203.0.113.7, 10.0.0.2",
        "x-forwarded-proto": "https",
        "x-forwarded-host": "api.example.com",
        "forwarded": "for=203.0.113.7;proto=https",
    }
    sent = await sent_upstream(mocked, by_balancer, trusted_proxies=["127.0.0.0/8", "::1"])
    assert sent["x-forwarded-for"] == "203.0.113.7, 10.0.0.2, 127.0.0.1"
    assert sent["x-forwarded-proto"] == "https" and sent["x-forwarded-host"] == "api.example.com"
    assert sent["forwarded"] == 'for=203.0.113.7;proto=https, for=127.0.0.1;proto=http;host="p"'


async def test_forwarding_headers_are_set_when_the_client_sent_none(mocked: respx.MockRouter) -> None:
    sent = await sent_upstream(mocked, {}, trusted_proxies=["10.0.0.0/8"])
    assert sent["x-forwarded-for"] == PEER and sent["x-forwarded-proto"] == "http"
