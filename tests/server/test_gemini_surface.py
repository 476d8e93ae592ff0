"""Gemini's native API through the app: shaped on every role, keys handled, streams relayed, Google's errors."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest
import respx

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from tests.support.asgi_app import serve

pytestmark = pytest.mark.anyio

BASE = "https://gemini.test/v1beta"
UPSTREAM_KEY = "AIza-upstream-PLANTED-0123456789"
CLIENT_KEY = "AIza-client-PLANTED-9876543210"
PROXY_KEY = "hp-gemini-PLANTED-0123456789ab"
LONG = "\n".join(f"line {n}" for n in range(50))
ANSWER = {
    "candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}],
    "usageMetadata": {"promptTokenCount": 900, "cachedContentTokenCount": 600, "totalTokenCount": 910},
}


def config(*, key: bool = True, auth: bool = False) -> Config:
    upstream: dict[str, Any] = {"base_url": BASE, "api": "google", "retries": 0}
    if key:
        upstream["api_key"] = UPSTREAM_KEY
    raw: dict[str, Any] = {
        "upstreams": {"gemini": upstream},
        "policies": {
            "roles": {
                "worker": [{"type": "last_n_observations", "n": 1}],
                "orchestrator": [{"type": "orchestrator_view", "max_conversation_turns": 2}],
                "manager": [{"type": "manager_view", "turns": "every_user"}],
            }
        },
    }
    if auth:
        raw["auth"] = {"keys": [{"key": PROXY_KEY, "tenant": "team-g"}]}
    return parse_config(raw, env={})


def request() -> dict[str, Any]:
    def step(command: str, output: str) -> list[dict[str, Any]]:
        return [
            {
                "role": "model",
                "parts": [{"functionCall": {"name": "run_shell_command", "args": {"command": command}}}],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "run_shell_command", "response": {"output": output}}}
                ],
            },
        ]

    return {
        "systemInstruction": {"parts": [{"text": "You are Gemini CLI."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "First task."}]},
            *step("ls", LONG),
            {"role": "model", "parts": [{"text": "Done with the first."}]},
            {"role": "user", "parts": [{"text": "Second task."}]},
            *step("cat a", LONG),
            *step("cat b", "short"),
        ],
    }


def sent_body(route: respx.Route, n: int = -1) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(route.calls[n].request.content)
    return body


@pytest.mark.parametrize("role", ["worker", "orchestrator", "manager", "default"])
async def test_every_role_shapes_gemini_requests_and_keeps_the_instruction_and_the_pairs(
    mocked: respx.MockRouter, role: str
) -> None:
    route = mocked.post(f"{BASE}/models/gemini-2.5-pro:generateContent").mock(
        return_value=httpx.Response(200, json=ANSWER)
    )
    async with serve(config()) as client:
        answer = await client.post(
            "/v1beta/models/gemini-2.5-pro:generateContent", json=request(), headers={"X-Agent-Role": role}
        )
    assert answer.status_code == 200, answer.text
    assert answer.json() == ANSWER
    assert answer.headers["x-history-role"] == role
    sent = sent_body(route)
    assert sent["systemInstruction"] == request()["systemInstruction"]
    assert sent["contents"][-1] == request()["contents"][-1], "the newest response is kept"
    calls = [p for c in sent["contents"] for p in c["parts"] if "functionCall" in p]
    responses = [p for c in sent["contents"] for p in c["parts"] if "functionResponse" in p]
    assert len(calls) == len(responses), "every call keeps its response"
    if role == "default":
        assert sent == request()
    else:
        assert sent != request()
        assert int(answer.headers["x-history-tokens-after"]) < int(answer.headers["x-history-tokens-before"])


async def test_the_upstream_key_replaces_the_client_key_in_header_and_query_and_never_reaches_the_log(
    mocked: respx.MockRouter, caplog: pytest.LogCaptureFixture
) -> None:
    route = mocked.post(f"{BASE}/models/gemini-2.5-pro:generateContent").mock(
        return_value=httpx.Response(200, json=ANSWER)
    )
    caplog.set_level(logging.INFO)
    async with serve(config()) as client:
        await client.post(
            f"/v1beta/models/gemini-2.5-pro:generateContent?key={CLIENT_KEY}&alt=json",
            json=request(),
            headers={"x-goog-api-key": CLIENT_KEY},
        )
    upstream = route.calls[0].request
    assert upstream.headers["x-goog-api-key"] == UPSTREAM_KEY
    assert "key=" not in str(upstream.url) and "alt=json" in str(upstream.url)
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("history_proxy"))
    assert "gemini-2.5-pro" in ours, "the access line was written"
    assert CLIENT_KEY not in ours and UPSTREAM_KEY not in ours


async def test_without_an_upstream_key_the_client_key_is_forwarded_as_sent(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{BASE}/models/gemini-2.5-pro:generateContent").mock(
        return_value=httpx.Response(200, json=ANSWER)
    )
    async with serve(config(key=False)) as client:
        await client.post(
            f"/v1beta/models/gemini-2.5-pro:generateContent?key={CLIENT_KEY}",
            json=request(),
            headers={"x-goog-api-key": CLIENT_KEY},
        )
    upstream = route.calls[0].request
    assert upstream.headers["x-goog-api-key"] == CLIENT_KEY
    assert f"key={CLIENT_KEY}" in str(upstream.url)


async def test_a_proxy_key_in_x_goog_api_key_selects_the_tenant_and_stays_at_the_proxy(
    mocked: respx.MockRouter,
) -> None:
    route = mocked.post(f"{BASE}/models/gemini-2.5-pro:generateContent").mock(
        return_value=httpx.Response(200, json=ANSWER)
    )
    async with serve(config(key=False, auth=True)) as client:
        refused = await client.post("/v1beta/models/gemini-2.5-pro:generateContent", json=request())
        answer = await client.post(
            "/v1beta/models/gemini-2.5-pro:generateContent",
            json=request(),
            headers={"x-goog-api-key": PROXY_KEY},
        )
    assert refused.status_code == 401
    assert refused.json()["error"]["status"] == "UNAUTHENTICATED"
    assert answer.status_code == 200
    assert "x-goog-api-key" not in route.calls[0].request.headers


async def test_a_stream_is_relayed_as_received_and_its_usage_reaches_the_metrics(
    mocked: respx.MockRouter,
) -> None:
    chunks = b'data: {"candidates":[{"content":{"parts":[{"text":"o"}]}}]}\r\n\r\n' + (
        b'data: {"candidates":[{"content":{"parts":[{"text":"k"}]},"finishReason":"STOP"}],'
        b'"usageMetadata":{"promptTokenCount":900,"cachedContentTokenCount":600}}\r\n\r\n'
    )
    route = mocked.post(f"{BASE}/models/gemini-2.5-pro:streamGenerateContent").mock(
        return_value=httpx.Response(200, content=chunks, headers={"content-type": "text/event-stream"})
    )
    async with serve(config()) as client:
        answer = await client.post(
            "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
            json=request(),
            headers={"X-Agent-Role": "worker"},
        )
        metrics = (await client.get("/metrics")).text
    assert answer.status_code == 200 and answer.content == chunks
    assert "alt=sse" in str(route.calls[0].request.url)
    cached = [
        line
        for line in metrics.splitlines()
        if "cached" in line and "gemini" in line and not line.startswith("#")
    ]
    assert any(line.endswith(" 600.0") for line in cached), cached


async def test_count_tokens_is_shaped_like_the_request_it_counts(mocked: respx.MockRouter) -> None:
    route = mocked.post(f"{BASE}/models/gemini-2.5-pro:countTokens").mock(
        return_value=httpx.Response(200, json={"totalTokens": 12})
    )
    async with serve(config()) as client:
        answer = await client.post(
            "/v1beta/models/gemini-2.5-pro:countTokens", json=request(), headers={"X-Agent-Role": "worker"}
        )
    assert answer.json() == {"totalTokens": 12}
    assert sent_body(route) != request()


@pytest.mark.parametrize(
    ("body", "status"),
    [({"contents": "hi"}, 400), ({"contents": [3]}, 400)],
)
async def test_bad_bodies_are_refused_in_googles_shape(body: dict[str, Any], status: int) -> None:
    async with serve(config()) as client:
        answer = await client.post("/v1beta/models/gemini-2.5-pro:generateContent", json=body)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert set(error) == {"code", "message", "status"} and error["status"] == "INVALID_ARGUMENT"


async def test_upstream_errors_pass_through_verbatim(mocked: respx.MockRouter) -> None:
    error = {"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}
    mocked.post(f"{BASE}/models/gemini-2.5-pro:generateContent").mock(
        return_value=httpx.Response(429, json=error)
    )
    async with serve(config()) as client:
        answer = await client.post("/v1beta/models/gemini-2.5-pro:generateContent", json=request())
    assert answer.status_code == 429 and answer.json() == error
