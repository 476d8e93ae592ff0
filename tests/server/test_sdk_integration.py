"""The proxy through the official openai SDK: what an agent pointing its base URL at us experiences.

The SDK talks to the app in process (httpx2's ASGI transport, the SDK's own HTTP stack); the app's
upstream client is the one respx intercepts, so the SDK's calls are never mocked themselves.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import openai
import pytest
import respx
from openai.types.chat import ChatCompletionFunctionToolParam

from history_proxy.config.loading import parse_config
from history_proxy.config.models import Config
from history_proxy.core.messages import Message
from history_proxy.server.app import create_app
from tests.factories import action, call, result, system, user
from tests.upstream_respx import UPSTREAM_MOCKER

pytestmark = pytest.mark.anyio

UPSTREAM = "https://upstream.test/v1"
UPSTREAM_KEY = "sk-upstream-key-for-tests-0123456789"
PROXY_KEY = "hp-proxy-key-for-tests-9876543210"
LONG_OUTPUT = "\n".join(f"{i}: running test_case_{i} ... passed" for i in range(40))


@pytest.fixture
def upstream() -> Iterator[respx.MockRouter]:
    with respx.mock(assert_all_called=False, using=UPSTREAM_MOCKER) as router:
        yield router


def make_config(*, auth: bool = False) -> Config:
    raw: dict[str, Any] = {
        "upstreams": {"main": {"base_url": UPSTREAM, "api_key": UPSTREAM_KEY, "retries": 0}},
        "limits": {"connect_timeout_s": 0.5, "read_timeout_s": 0.5},
        "policies": {
            "roles": {
                "worker": [
                    {"type": "passthrough"},
                    {"type": "tool_result_truncation", "keep_recent": 1, "max_chars": 40},
                    {"type": "remove_regex", "remove": ["sk-[A-Za-z0-9]{20,}"]},
                ],
            }
        },
    }
    if auth:
        raw["auth"] = {"keys": [{"key": PROXY_KEY, "tenant": "team-a"}]}
    return parse_config(raw, env={})


@asynccontextmanager
async def sdk(config: Config, api_key: str = "client-key") -> AsyncIterator[openai.AsyncOpenAI]:
    app = create_app(config)
    async with app.router.lifespan_context(app):
        http_client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
        async with openai.AsyncOpenAI(
            base_url="http://proxy/v1", api_key=api_key, http_client=http_client, max_retries=0
        ) as client:
            yield client


def completion(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def delta(content: str, finish_reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish_reason}],
    }


def as_sent(*messages: Message) -> list[Any]:
    """``messages`` as the SDK's ``messages`` argument: plain dicts, perhaps with keys (or, on purpose,
    values) its types do not model, which it sends unchanged."""
    return list(messages)


def worker_history() -> list[Any]:
    """A worker's conversation, annotated as docs/http.md allows (extra keys the SDK sends unchanged)."""
    first, second = action(), action()
    return as_sent(
        system(),
        user("Run the tests; my key is sk-abcdefghijklmnopqrstuvwxyz", message_type="task", agent="w1"),
        first,
        result(first, LONG_OUTPUT, message_type="observation", tags=["remove_output"]),
        second,
        result(second, "all green"),
    )


async def test_a_completion_reaches_the_upstream_filtered_and_comes_back_parsed(
    upstream: respx.MockRouter,
) -> None:
    route = upstream.post(f"{UPSTREAM}/chat/completions").mock(
        return_value=httpx.Response(200, json=completion({"role": "assistant", "content": "Tests pass."}))
    )
    async with sdk(make_config()) as client:
        answer = await client.chat.completions.create(
            model="gpt-4o", messages=worker_history(), extra_headers={"X-Agent-Role": "worker"}
        )
    assert answer.choices[0].message.content == "Tests pass."
    sent = json.loads(route.calls.last.request.content)["messages"]
    assert "sk-abcdefghijklmnopqrstuvwxyz" not in sent[1]["content"]
    assert len(sent[3]["content"]) < len(LONG_OUTPUT) and sent[5]["content"] == "all green"
    assert not any(key in m for m in sent for key in ("message_type", "agent", "tags", "phase_id"))
    assert route.calls.last.request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


async def test_streamed_chunks_parse_in_the_sdk(upstream: respx.MockRouter) -> None:
    upstream.post(f"{UPSTREAM}/chat/completions").mock(
        return_value=httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=sse(delta("Tests "), delta("pass."), delta("", finish_reason="stop")),
        )
    )
    async with sdk(make_config()) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o", messages=worker_history(), stream=True, extra_headers={"X-Agent-Role": "worker"}
        )
        pieces = [chunk.choices[0].delta.content or "" async for chunk in stream]
    assert "".join(pieces) == "Tests pass."


async def test_tool_calls_round_trip(upstream: respx.MockRouter) -> None:
    asked = call("read_file", {"path": "setup.py"}, call_id="call_next")
    route = upstream.post(f"{UPSTREAM}/chat/completions").mock(
        return_value=httpx.Response(
            200, json=completion({"role": "assistant", "content": None, "tool_calls": [asked]}, "tool_calls")
        )
    )
    tools: list[ChatCompletionFunctionToolParam] = [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    ]
    listing = action(call("ls", call_id="c1"))
    history = as_sent(user("Look at setup.py"), listing, result(listing, "setup.py README.md"))
    async with sdk(make_config()) as client:
        answer = await client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
    tool_calls = answer.choices[0].message.tool_calls
    assert tool_calls is not None
    tool_call = tool_calls[0]
    assert tool_call.type == "function"
    assert (tool_call.id, tool_call.function.name) == ("call_next", "read_file")
    assert json.loads(tool_call.function.arguments) == {"path": "setup.py"}
    sent = json.loads(route.calls.last.request.content)
    assert sent["tools"] == tools
    assert sent["messages"][1]["tool_calls"][0]["id"] == "c1" and sent["messages"][2]["tool_call_id"] == "c1"


async def test_role_headers_select_the_chain_and_are_reported(upstream: respx.MockRouter) -> None:
    upstream.post(f"{UPSTREAM}/chat/completions").mock(
        return_value=httpx.Response(200, json=completion({"role": "assistant", "content": "ok"}))
    )
    async with sdk(make_config()) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=worker_history(), extra_headers={"X-Agent-Role": "worker"}
        )
        plain = await client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=worker_history()
        )
    assert raw.headers["x-history-role"] == "worker"
    assert raw.headers["x-history-filters"] == "passthrough,tool_result_truncation,remove_regex"
    assert plain.headers["x-history-role"] == "default" and plain.headers["x-history-filters"] == ""
    assert raw.parse().choices[0].message.content == "ok"


@pytest.mark.parametrize(
    ("status", "exception"), [(429, openai.RateLimitError), (500, openai.InternalServerError)]
)
async def test_upstream_errors_arrive_as_the_sdks_own_exceptions(
    upstream: respx.MockRouter, status: int, exception: type[openai.APIStatusError]
) -> None:
    body = {
        "error": {"message": "upstream refused", "type": "upstream_type", "param": None, "code": "up_code"}
    }
    upstream.post(f"{UPSTREAM}/chat/completions").mock(return_value=httpx.Response(status, json=body))
    async with sdk(make_config()) as client:
        with pytest.raises(exception) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=as_sent(user("hi")))
    assert caught.value.status_code == status
    assert caught.value.body == body["error"] and caught.value.code == "up_code"


async def test_our_400_carries_what_to_fix(upstream: respx.MockRouter) -> None:
    async with sdk(make_config()) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(
                model="gpt-4o", messages=as_sent({"role": "robot", "content": "hi"})
            )
    assert caught.value.type == "invalid_request_error" and caught.value.param == "messages[0].role"


async def test_an_unknown_proxy_key_is_the_sdks_authentication_error(upstream: respx.MockRouter) -> None:
    async with sdk(make_config(auth=True), api_key="not-the-proxy-key") as client:
        with pytest.raises(openai.AuthenticationError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=as_sent(user("hi")))
    assert caught.value.code == "invalid_api_key"


async def test_the_proxy_key_selects_the_tenant_and_is_not_forwarded(upstream: respx.MockRouter) -> None:
    route = upstream.post(f"{UPSTREAM}/chat/completions").mock(
        return_value=httpx.Response(200, json=completion({"role": "assistant", "content": "ok"}))
    )
    async with sdk(make_config(auth=True), api_key=PROXY_KEY) as client:
        await client.chat.completions.create(model="gpt-4o", messages=as_sent(user("hi")))
    assert route.calls.last.request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [
        (httpx.ConnectError("refused"), 502, "upstream_unavailable"),
        (httpx.ReadTimeout("slow"), 504, "upstream_timeout"),
    ],
)
async def test_unreachable_and_slow_upstreams_carry_our_codes(
    upstream: respx.MockRouter, failure: Exception, status: int, code: str
) -> None:
    upstream.post(f"{UPSTREAM}/chat/completions").mock(side_effect=failure)
    async with sdk(make_config()) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(model="gpt-4o", messages=as_sent(user("hi")))
    assert (caught.value.status_code, caught.value.code) == (status, code)


async def test_models_listing_is_forwarded(upstream: respx.MockRouter) -> None:
    upstream.get(f"{UPSTREAM}/models").mock(
        return_value=httpx.Response(
            200,
            json={
                "object": "list",
                "data": [{"id": "gpt-4o", "object": "model", "created": 0, "owned_by": "x"}],
            },
        )
    )
    async with sdk(make_config()) as client:
        models = [m.id async for m in client.models.list()]
    assert models == ["gpt-4o"]
