"""Recover from overflow on ``/v1/responses`` and ``/v1/messages``: the official SDKs against the proxy.

The upstream is the built-in mock behind a small context window (served by uvicorn in this
process): a Responses or Messages request whose history holds more than :data:`WINDOW` tokens is
refused the way each API refuses it, anything else is answered by the mock. The proxy runs in
process; the ``openai`` and ``anthropic`` SDKs reach it over ASGI.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from history_proxy.config.loading import parse_config
from history_proxy.core.tokens import TokenCounters
from history_proxy.server.app import create_app
from history_proxy.surfaces import messages as anthropic_surface
from history_proxy.surfaces import responses as responses_surface
from tests.factories import exchange, system, user
from tests.support.access_app import access_lines
from tests.support.recorder import Recorder, serve_in_thread
from tests.surface_bodies import (
    anthropic_chat,
    messages_body,
    messages_errors,
    plain_chat,
    responses_body,
    responses_errors,
)
from tests.upstream_respx import PROXY_VARIABLES

pytestmark = pytest.mark.anyio

WINDOW = 1500
"""The upstream refuses a request whose history holds more tokens than this."""
MAX_TOKENS = 200
RETRY = "x-history-overflow-retry"
COUNTER = TokenCounters()


def history_tokens(path: str, body: dict[str, Any]) -> int:
    """What the upstream counts: the request's history as chat messages (the proxy's own view)."""
    adapter = responses_surface if path.endswith("/responses") else anthropic_surface
    return COUNTER.get(model=body["model"]).messages(adapter.to_view(body).messages)


def refusal(path: str, tokens: int) -> dict[str, Any]:
    """How each API refuses a prompt over the window (an OpenAI-compatible server's words for Responses)."""
    if path.startswith("/v1/messages"):
        message = f"prompt is too long: {tokens} tokens > {WINDOW} maximum"
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return {
        "error": {
            "message": f"This model's maximum context length is {WINDOW} tokens. However, your messages "
            f"resulted in {tokens} tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
    }


MOCK_CHUNKS = 5
"""The mock's default streamed chunks, as this suite always had them."""


class SmallWindow(Recorder):
    """The built-in mock behind a window of :data:`WINDOW` tokens, recording every request."""

    def __init__(self) -> None:
        super().__init__(chunks=MOCK_CHUNKS)

    async def intercept(self, path: str, body: Any, scope: Scope, receive: Receive, send: Send) -> bool:
        if isinstance(body, dict) and path in ("/v1/responses", "/v1/messages", "/v1/messages/count_tokens"):
            tokens = history_tokens(path, body)
            if tokens > WINDOW:
                await JSONResponse(refusal(path, tokens), status_code=400)(scope, receive, send)
                return True
        return False


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[SmallWindow, str]]:
    app = SmallWindow()
    for url in serve_in_thread(app):
        yield app, url


class Proxy:
    def __init__(self, http: httpx2.AsyncClient) -> None:
        self.http = http
        self.openai = openai.AsyncOpenAI(
            base_url="http://proxy/v1", api_key="k", http_client=http, max_retries=0
        )
        self.claude = anthropic.AsyncAnthropic(
            base_url="http://proxy", api_key="k", http_client=http, max_retries=0
        )

    async def metrics(self) -> str:
        return (await self.http.get("http://proxy/metrics")).text


@asynccontextmanager
async def serving(url: str) -> AsyncIterator[Proxy]:
    config = parse_config(
        {
            "upstreams": {
                "openai": {"base_url": url, "retries": 0},
                "claude": {"base_url": url, "api": "anthropic", "cache_control": True, "retries": 0},
            },
            "routes": [{"model": "claude-*", "upstream": "claude"}],
            "cache_control": {"last_n_messages": 2},
            "policies": {"roles": {"default": [{"type": "passthrough"}]}},
        },
        env={},
    )
    app = create_app(config)
    async with (
        app.router.lifespan_context(app),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app)) as http,
    ):
        yield Proxy(http)


@pytest.fixture
def proxied(
    upstream: tuple[SmallWindow, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> tuple[SmallWindow, str]:
    for name in PROXY_VARIABLES:  # the upstream is on localhost, reached directly
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.INFO, logger="history_proxy.access")
    upstream[0].seen.clear()
    return upstream


def agent_chat(newest: str = "now run the tests") -> list[Any]:
    chat = [system("You are a coding agent."), user("fix the build")]
    for k in range(12):
        chat += exchange("bash", output=f"step {k}: " + "compiling module ... ok\n" * 30)
    return [*chat, user(newest)]


def responses_request() -> dict[str, Any]:
    body = responses_body(plain_chat(agent_chat()[1:]), [1, 0])  # reasoning items on every other step
    return {**body, "instructions": "You are a coding agent."}


def messages_request() -> dict[str, Any]:
    body = messages_body(anthropic_chat(agent_chat()), [1, 0])  # signed thinking on every other step
    return {**body, "model": "claude-test-model", "max_tokens": MAX_TOKENS}


def retried(metrics: str, outcome: str, upstream: str) -> bool:
    return f'history_proxy_overflow_retries_total{{outcome="{outcome}",upstream="{upstream}"}} 1.0' in metrics


def check_retry(
    window: SmallWindow, path: str, headers: Any, caplog: pytest.LogCaptureFixture, metrics: str, name: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answer says it was retried; the upstream saw the request, then a smaller one that fits."""
    first, second = (seen["body"] for seen in window.seen)
    assert [seen["path"] for seen in window.seen] == [path, path]
    budget = int(headers[RETRY])
    assert 0 < budget < WINDOW
    assert history_tokens(path, second) <= WINDOW < history_tokens(path, first)
    [line] = access_lines(caplog)
    assert line["overflow_retry"] == budget and line["status"] == 200
    assert retried(metrics, "retried", name)
    return first, second


# --- Responses ---------------------------------------------------------------------------------


async def test_a_responses_request_refused_as_too_long_is_answered_by_one_fitted_retry(
    proxied: tuple[SmallWindow, str], caplog: pytest.LogCaptureFixture
) -> None:
    body = responses_request()
    async with serving(proxied[1]) as proxy:
        raw = await proxy.openai.responses.with_raw_response.create(**body)
        metrics = await proxy.metrics()
    response = raw.parse()
    assert response.status == "completed" and response.output_text.startswith("mock: received")
    first, second = check_retry(proxied[0], "/v1/responses", raw.headers, caplog, metrics, "openai")
    assert first["input"] == body["input"]
    assert responses_errors(second) == []
    assert len(second["input"]) < len(first["input"])
    assert second["instructions"] == body["instructions"]
    assert second["input"][-1] == body["input"][-1]  # the newest user turn
    assert all(item in body["input"] for item in second["input"])  # every kept item verbatim


async def test_a_streamed_responses_request_is_retried_before_its_stream_starts(
    proxied: tuple[SmallWindow, str], caplog: pytest.LogCaptureFixture
) -> None:
    body = responses_request()
    async with serving(proxied[1]) as proxy:
        raw = await proxy.openai.responses.with_raw_response.create(**body, stream=True)
        events = [event.type async for event in raw.parse()]
        metrics = await proxy.metrics()
    assert events[0] == "response.created" and events[-1] == "response.completed"
    _, second = check_retry(proxied[0], "/v1/responses", raw.headers, caplog, metrics, "openai")
    assert second["stream"] is True and responses_errors(second) == []


async def test_a_responses_request_with_its_history_at_the_provider_is_not_retried(
    proxied: tuple[SmallWindow, str],
) -> None:
    body: dict[str, Any] = {"model": "gpt-4o", "previous_response_id": "resp_1", "input": "word " * 4000}
    async with serving(proxied[1]) as proxy:
        with pytest.raises(openai.BadRequestError) as refused:
            await proxy.openai.responses.create(**body)
        metrics = await proxy.metrics()
    assert refused.value.code == "context_length_exceeded"
    assert RETRY not in refused.value.response.headers
    assert len(proxied[0].seen) == 1
    assert "history_proxy_overflow_retries_total{" not in metrics


# --- Messages ----------------------------------------------------------------------------------


async def test_a_messages_request_refused_as_too_long_is_answered_by_one_fitted_retry(
    proxied: tuple[SmallWindow, str], caplog: pytest.LogCaptureFixture
) -> None:
    body = messages_request()
    async with serving(proxied[1]) as proxy:
        raw = await proxy.claude.messages.with_raw_response.create(**body)
        metrics = await proxy.metrics()
    message = await raw.parse()
    assert message.content[0].type == "text" and message.content[0].text.startswith("mock: received")
    _, second = check_retry(proxied[0], "/v1/messages", raw.headers, caplog, metrics, "claude")
    assert messages_errors(second) == []
    assert len(second["messages"]) < len(body["messages"])
    assert second["system"] == body["system"] and second["messages"][0]["role"] == "user"
    newest = second["messages"][-1]
    assert newest["role"] == "user" and newest["content"][0]["text"] == body["messages"][-1]["content"]
    marked = [i for i, m in enumerate(second["messages"]) if "cache_control" in json.dumps(m)]
    assert marked == [len(second["messages"]) - 2, len(second["messages"]) - 1]  # placed as on the first send
    signed = [b for m in second["messages"] if isinstance(m["content"], list) for b in m["content"]]
    thinking = [b for b in signed if b["type"] == "thinking"]
    sent_blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    assert thinking and all(block in sent_blocks for block in thinking)  # never edited


async def test_a_streamed_messages_request_is_retried_before_its_stream_starts(
    proxied: tuple[SmallWindow, str], caplog: pytest.LogCaptureFixture
) -> None:
    body = messages_request()
    async with serving(proxied[1]) as proxy:
        raw = await proxy.claude.messages.with_raw_response.create(**body, stream=True)
        events = [event.type async for event in await raw.parse()]
        metrics = await proxy.metrics()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    _, second = check_retry(proxied[0], "/v1/messages", raw.headers, caplog, metrics, "claude")
    assert second["stream"] is True and messages_errors(second) == []


async def test_a_messages_refusal_nothing_smaller_can_answer_goes_back_as_it_came(
    proxied: tuple[SmallWindow, str],
) -> None:
    body: dict[str, Any] = {
        "model": "claude-test-model",
        "max_tokens": MAX_TOKENS,
        "system": "You are a coding agent.",
        "messages": [{"role": "user", "content": "word " * 4000}],  # the newest user message alone is over
    }
    async with serving(proxied[1]) as proxy:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await proxy.claude.messages.create(**body)
        metrics = await proxy.metrics()
    assert refused.value.body == refusal("/v1/messages", history_tokens("/v1/messages", body))
    assert RETRY not in refused.value.response.headers
    assert len(proxied[0].seen) == 1
    assert retried(metrics, "unfitted", "claude")


async def test_count_tokens_is_never_retried(proxied: tuple[SmallWindow, str]) -> None:
    body = messages_request()
    del body["max_tokens"]
    async with serving(proxied[1]) as proxy:
        with pytest.raises(anthropic.BadRequestError):
            await proxy.claude.messages.count_tokens(**body)
        metrics = await proxy.metrics()
    assert [seen["path"] for seen in proxied[0].seen] == ["/v1/messages/count_tokens"]
    assert "history_proxy_overflow_retries_total{" not in metrics
